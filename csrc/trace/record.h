/* trace/record.h - the trace record: what a trace leaves (cdy_trace: its
 * graph, the torch calls it recorded, guards, how to rebuild the return
 * value, mutations to replay) for the graph passes, the pipeline, the frame
 * hook (the transformed bytecode) and the runtime (cdy_run_record).  The
 * tracer's own state is trace/trace.h's. */
#ifndef CDY_TRACE_RECORD_H
#define CDY_TRACE_RECORD_H

#include "module.h"
#include "frame/guards.h"

/* ---- trace result ---------------------------------------------------------- */
/* OBJECT: objects[index] of the trace: an object the frame built, made once by the
 * transformed code before the stores and the return value (so every use is that one
 * object: identity is kept) */
typedef enum { CDY_RET_OUTPUT, CDY_RET_CONST, CDY_RET_SOURCE, CDY_RET_TUPLE, CDY_RET_LIST,
               CDY_RET_DICT, CDY_RET_CALL, CDY_RET_OBJECT } cdy_ret_kind;

typedef struct cdy_ret {
    int kind;
    int index;               /* OUTPUT: position among the graph's outputs; CALL: positionals */
    PyObject *obj;           /* CONST (borrowed from the trace's keep list); CALL: the class */
    const cdy_src *src;      /* SOURCE */
    int n;
    struct cdy_ret **items;  /* TUPLE, LIST, DICT values; CALL arguments */
    PyObject **keys;         /* DICT keys (borrowed constants); CALL: keyword names, n - index */
} cdy_ret;

/* A graph output that eager returns as a view of a mutated input (mutate.c):
 * the runtime returns input.as_strided(sizes, strides, its offset + offset)
 * in its place, or the input itself (same). */
typedef struct {
    int output, input, same, ndim;
    int64_t sizes[CDY_MAX_NDIM], strides[CDY_MAX_NDIM], offset;
} cdy_review;

/* An attribute store replayed after the graph: obj.name = value (mutate.c). */
typedef struct {
    const cdy_src *obj;
    PyObject *name;          /* borrowed (a code object's name) */
    cdy_ret *value;
    int item;                /* t5: 1 for a dict item store obj[name] = value (name: a constant key) */
} cdy_store;

/* A list/tuple argument of a traced call, rebuilt per call from graph values. */
typedef struct {
    int is_list;
    int n;
    int *ref;                /* per item: graph value number, or -1 for constant */
    PyObject **cst;          /* per item: the constant (borrowed) */
} cdy_pyseq;

/* One traced call, for the eager backend and extern nodes: fn(*args, **kw). */
typedef struct {
    PyObject *fn;            /* borrowed (kept alive by keep list) */
    int nargs;               /* positional + keyword values */
    int *ref;                /* per arg: graph value, -1 constant, -2 sequence (seq[i]) */
    PyObject **cst;          /* per arg: the constant (borrowed) */
    cdy_pyseq *seq;          /* per arg: the sequence when ref is -2 */
    PyObject *kwnames;       /* tuple or NULL (borrowed) */
    int value;               /* graph value this call defines; -1 for a multi-output call */
    int item;                /* >= 0: this node is item `item` of pynode `base`'s result */
    int base;
    int opaque;              /* 1: a torch.library op (trace/libops.c): run with the frame
                              * hook off, its Python implementation never traced */
} cdy_pynode;

/* The one detector of random draws (trace/calls.c), used by the trace's
 * fake calls (generators put back), the backward (no formula: a recompute
 * would draw again) and the runtime (a graph that raises puts the generator
 * back before its eager rerun).  1 if a callable named name draws from a
 * generator: a word of it (split at '_', '.', digits) names a random
 * function (rand, normal, bernoulli, dropout...; "bernoulli.p" too). */
int cdy_name_draws_rng(const char *name);
/* cdy_name_draws_rng of fn's __name__ (0 without one); errors are cleared. */
int cdy_fn_draws_rng(PyObject *fn);
/* 1 if recorded call p draws: by its fn's name, or
 * scaled_dot_product_attention with a dropout_p that is not a constant 0. */
int cdy_pynode_draws_rng(const cdy_pynode *p);
/* Recorded call p's argument at position pos, or given by keyword name: its
 * index in p's arguments, or -1 when absent. */
int cdy_pynode_arg_at(const cdy_pynode *p, int pos, const char *name);

/* RAISING: only while tracing: the traced code raised (trace/exceptions.c) and
 * the frames unwind to a handler; it never leaves cdy_trace_run */
typedef enum { CDY_TRACE_OK, CDY_TRACE_UNSUPPORTED, CDY_TRACE_ERROR,
               CDY_TRACE_RAISING } cdy_trace_status;

/* A graph break the frame resumes after (trace/breaks.c): the trace ends just
 * before the breaking CALL of the top frame; the transformed code calls the
 * graph, rebuilds the locals and the stack below the call, makes the call
 * itself and hands everything to a resume function (frame/resume.c) that goes
 * on at `next` in a copy of the frame's code. */
typedef struct {
    int pc;                  /* code unit of the breaking instruction (its first prefix) */
    int next;                /* code unit after it: where the resume function goes on */
    int jump_op;             /* > 0: the break is a conditional jump (this raw opcode) on
                              * cond, not a call: a second resume function goes on at target */
    int target;
    struct cdy_ret *cond;
    int nargs;               /* arguments of the call (keyword ones last) */
    PyObject *kwnames;       /* their names, or NULL (borrowed: kept by the trace) */
    cdy_ret *callable;
    cdy_ret **args;
    int nbelow;              /* stack values below the call pair */
    cdy_ret **below;         /* NULL item: the NULL of a call protocol */
    int nlocals;             /* every local slot of the code (co_nlocalsplus) */
    cdy_ret **locals;        /* NULL item: unbound */
} cdy_break;

typedef struct {
    cdy_arena arena;
    PyObject *keep;          /* list owning every object the trace refers to */
    cdy_graph graph;
    int npynodes, cap_pynodes;
    cdy_pynode *pynodes;
    cdy_src *input_srcs;     /* per graph input, its source (arena) */
    cdy_guards guards;       /* moved to the cache entry on success */
    cdy_ret *ret;
    int status;
    int reason_code;         /* cdy_reason (trace/reasons.h) of the stop; 0 while OK */
    char reason[CDY_ERRLEN];
    int reason_line;         /* user's line of the failure */
    int return_line;
    PyObject *reason_file;   /* file of the failure (borrowed: a traced code's filename) */
    PyCodeObject *top_code;  /* the frame's code (names of sources) */
    void *memo;              /* sources already wrapped (trace/vars.c) */
    int nmemo, cap_memo;
    int grad_enabled;        /* torch.is_grad_enabled() when the trace started */
    int any_requires_grad;   /* an input requires grad: the entry guards grad mode */
    int grad_guarded;        /* the grad-mode guard was added */
    int training;            /* grad mode on and an input requires grad: the graph compiles
                                with a backward (trace/autograd.c) */
    int ninput_rg;           /* input_rg's length */
    unsigned char *input_rg; /* per graph input: it requires grad (training; PyMem) */
    int autocast_on;         /* CPU autocast is on at this point of the trace */
    int autocast_state;      /* the CPU autocast state (cdy_state_read) there: the entry
                                state, changed by autocast blocks entered in the trace */
    int autocast_entry;      /* the state when the trace started (guarded where used) */
    int ac_depth;            /* autocast blocks entered in the trace, not yet exited */
    int ac_saved[8];         /* the state each of them replaced */
    int autocast_dep;        /* a call whose dtypes CPU autocast changes (autocast.c) */
    const char *autocast_unhandled;  /* an extern traced under autocast without its casts */
    int modes_on;            /* a torch function / dispatch mode was active then */
    /* mutate.c */
    void *mut;               /* the tracer's mutation state */
    int nwriteback;          /* mutated inputs, copied into after the call: */
    int *writeback;          /* pairs (input position, output position of the final value) */
    int nstores;             /* attribute stores replayed after the call */
    cdy_store *stores;
    int nreview;             /* outputs that view mutated inputs */
    cdy_review *review;
    int nobjects, cap_objects;
    struct cdy_ret **objects; /* objects the frame built that escape (CALLs, each made once,
                                 inner ones first): the transformed code makes them first */
    PyObject *exc;           /* RAISING: the exception being raised (kept by keep) */
    void *handling;          /* the tvar of the exception being handled (PUSH_EXC_INFO), or NULL */
    int nafter;              /* calls the transformed code makes for their effect after */
    cdy_ret **after;         /* the graph and the stores (inputs' new strides: mutate.c) */
    cdy_break *brk;          /* the trace ends at a resumable break (ret is NULL then) */
    int stop_top_pc;         /* at the first stop: the top frame's instruction (its first */
    int stop_top_count;      /* prefix) and how many top-frame instructions had started */
    int break_at_pc;         /* > 0 (count): end the trace before the top frame's instruction */
    int break_at_count;      /* at this pc when it is its break_at_count-th one (breaks.c) */
    int meta_factory;        /* a factory made a tensor on device "meta": its graph's kernels
                              * would run on no data, so a break in it is not resumed */
    int npins, cap_pins;     /* sizes the trace read as numbers (trace/sympins.c): they */
    struct cdy_sym_pin_s *pins; /* specialize where sizes are symbolic (sym/sym.h) */
    int nsymviews, cap_symviews; /* views whose sizes follow their source's by a */
    struct cdy_sym_view_s *symviews; /* known function (trace/sympins.c) */
    int nsx, cap_sx;         /* symbolic Python ints (trace/symint.c): sizes the code read */
    struct cdy_sym_sx_s *sx; /* that are pinned only where a use needs their value */
    unsigned char *sx_pinned; /* per node: pinned already */
    int sx_pinning;          /* inside cdy_sx_pin_all (a stop while pinning) */
    int nints, cap_ints;     /* Python ints read as symbols (sx op 'i', sym.h): */
    struct cdy_sym_int_s *ints; /* their values, pinned flags, */
    const cdy_src **int_srcp; /* each one's source (arena, shallow: its guard owns it) */
    cdy_src *int_srcs;       /* and at the end an array of them (shallow copies) */
    int ncmps, cap_cmps;     /* comparisons of symbolic ints the trace decided */
    struct cdy_sym_cmp_s *cmps; /* (trace/symint.c): guards or range facts (sym/infer.c) */
} cdy_trace;

/* The sizes rule of opaque library op pn (trace/libops.c) of trace t into
 * map (per output dim: 1 + value * CDY_MAX_NDIM + dim of a tensor argument's
 * dim it follows, 0 a constant): found by running the op's fake on meta
 * tensors whose sizes >= 2 are all moved (equal sizes alike) and matching the
 * result's sizes.  1 when every dim has a rule, else 0 (no error set). */
int cdy_libop_size_map(const cdy_trace *t, const cdy_pynode *pn, int *map);

/* What a compiled graph keeps of its trace (runtime/compiled.c copies it,
 * so the trace may go after): the graph (its values' kinds, metas, source
 * lines; the inputs' positions), the torch calls the extern nodes and the
 * eager backend replay (pynodes, owning `keep`), the mutated inputs to copy
 * into after a call (writeback) and the outputs that view them (review).
 * The runtime reads nothing else of the tracer. */
typedef struct {
    const cdy_graph *graph;
    int npynodes;
    const cdy_pynode *pynodes;
    PyObject *keep;          /* borrowed: the list owning every object pynodes refer to */
    int nwriteback;
    const int *writeback;    /* pairs (input position, output position) */
    int nreview;
    const cdy_review *review;
} cdy_run_record;

/* t's part the runtime reads (pointers into t: valid while t lives). */
static inline cdy_run_record cdy_run_record_of(const cdy_trace *t)
{
    return (cdy_run_record){&t->graph, t->npynodes, t->pynodes, t->keep,
                            t->nwriteback, t->writeback, t->nreview, t->review};
}

/* Trace `code` symbolically with the frame's actual arguments as examples.
 * Always returns with t->status set; on CDY_TRACE_ERROR/UNSUPPORTED
 * t->reason says why.  No Python exception is left set. */
void cdy_trace_run(cdy_trace *t, PyCodeObject *code, PyObject *const *locals,
                   PyObject *globals, PyObject *builtins, PyObject *closure);
void cdy_trace_free(cdy_trace *t);
/* Test hook: make every later trace fail on purpose (kind CDY_INJECT_*; op:
 * the opcode whose step fails without recording a stop), or none
 * (CDY_INJECT_NONE); 0, or -1 for an unknown kind. */
enum { CDY_INJECT_NONE, CDY_INJECT_STEP, CDY_INJECT_NO_RETURN, CDY_INJECT_GRAPH };
int cdy_trace_inject(int kind, int op);
/* Guard t's entry on torch.is_grad_enabled() staying `enabled` (once per
 * trace: a second call does nothing); 0, or -1 with an error set (no guard added). */
int cdy_trace_guard_grad_mode(cdy_trace *t, int enabled);
/* _C.callable_table(): the torch callables of ops/callables.def as resolved,
 * a list of (callable, op name or None, meta rule row or -1, builders,
 * contiguous) (trace/callables.c). */
PyObject *cdy_callables_py_table(PyObject *self, PyObject *unused);
/* ---- training (trace/autograd.c) ------------------------------------------------ */
/* 1 when frames whose inputs require grad under grad mode compile with a
 * backward (cdynamo.config.compile_backward); else they run eagerly (AUTOGRAD). */
int cdy_autograd_on(void);
/* Note that graph input `index` of t requires grad (t->training set); 0, or -1 on OOM. */
int cdy_autograd_note_input(cdy_trace *t, int index);
/* What a training graph's compiled forward returns beyond the frame's outputs and
 * what its backward is: filled by cdy_autograd_build. */
typedef struct {
    int nuser;               /* the frame's outputs (the forward graph's first nuser) */
    PyObject *src;           /* the backward's Python source (str), or NULL: no output
                                needs a gradient (compile as usual) */
    PyObject *consts;        /* list: the constants the source reads as _K[i] */
    PyObject *saved_inputs;  /* tuple of input positions the backward reads */
    PyObject *grad_outputs;  /* tuple of the output positions that carry a gradient */
} cdy_backward;
/* Build the backward of t's graph from the derivative formulas of ops/ops.def
 * (training traces): the forward graph gains the values the backward saves as
 * outputs after the frame's; 0 (bw->src NULL when nothing needs a gradient), or
 * -1 with t stopped (NO_DERIVATIVE, AUTOGRAD_MUTATION, OUT_OF_MEMORY). */
int cdy_autograd_build(cdy_trace *t, cdy_backward *bw);
void cdy_backward_clear(cdy_backward *bw);

/* Readable text of t's graph (new str), for logs, the debug dir and explain. */
PyObject *cdy_graph_text(const cdy_trace *t, PyCodeObject *co);

#endif /* CDY_TRACE_RECORD_H */
