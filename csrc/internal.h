/* internal.h - declarations shared by the Python-facing parts of cdynamo._C:
 * frame hook, guards, bytecode, tracer, runtime.  CPython's internals that
 * differ between versions are behind pyver/pycompat.h. */
#ifndef CDYNAMO_INTERNAL_H
#define CDYNAMO_INTERNAL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "cdynamo.h"

#include "pyver/pyver.h"   /* the Python versions cdynamo supports (3.11 - 3.13) */

/* ---- sources: where a value read by the trace lives at frame entry ------- */
typedef enum {
    CDY_SRC_LOCAL,    /* frame->localsplus[slot] (an argument) */
    CDY_SRC_GLOBAL,   /* f_globals[name], falling back to builtins */
    CDY_SRC_DEREF,    /* closure cell `slot` of the function (free variable) */
} cdy_src_kind;

#define CDY_MAX_ATTRS 24
typedef struct {
    int kind;                        /* cdy_src_kind */
    int slot;                        /* LOCAL: localsplus index; DEREF: closure index */
    PyObject *name;                  /* GLOBAL: the name (owned str) */
    PyObject *dict;                  /* GLOBAL: the globals dict (owned); NULL: the frame's */
    int nattrs;                      /* then one step per attrs[]: */
    PyObject *attrs[CDY_MAX_ATTRS];  /* owned: attribute name, or item key */
    char item[CDY_MAX_ATTRS];        /* 1: step is obj[key] (a dict item), 0: getattr */
} cdy_src;

void cdy_src_copy(cdy_src *dst, const cdy_src *src);   /* new references */
void cdy_src_clear(cdy_src *s);
/* Value of s in the frame's context; new reference, or NULL (error set). */
struct _PyInterpreterFrame;
PyObject *cdy_src_fetch(const cdy_src *s, PyObject *const *locals,
                        PyObject *globals, PyObject *builtins, PyObject *closure);
/* Readable name for logs: "x", "G['w']", "x.weight". Writes into buf. */
void cdy_src_name(const cdy_src *s, PyCodeObject *code, char *buf, size_t n);

/* ---- guards -------------------------------------------------------------- */
#define CDY_GUARD_KINDS(X)                                    \
    X(TENSOR, "tensor: type, dtype, device, layout, requires_grad, sizes, strides") \
    X(CONST, "value: exact type and ==")                      \
    X(ID, "identity of the object")                           \
    X(TYPE, "exact type (nn.Module arguments: what is read from them is guarded)") \
    X(LEN, "exact type (list/tuple) and length: the items have guards of their own") \
    X(KEYS, "a dict with exactly these keys, in order: the values have guards of their own") \
    X(GRAD_MODE, "torch.is_grad_enabled() is off")                \
    X(NUM_THREADS, "the OpenMP thread count the kernels were built for") \
    /* t5: */                                                 \
    X(CONTAINS, "`key in obj` (a dict or collections.abc.Mapping) gives the traced answer") \
    X(HASATTR, "hasattr(obj, name) gives the traced answer (an object guarded by type)") \
    X(STATE, "global torch state (default dtype, autocast, modes) is what the trace saw") \
    X(CALL, "a torch state query (expect, no arguments) gives the traced answer (dtype)") \
    X(SAME, "`src is other` gives the traced answer (requires_grad): two sources are one object or not")

typedef enum {
#define CDY_X(e, d) CDY_GUARD_##e,
    CDY_GUARD_KINDS(CDY_X)
#undef CDY_X
} cdy_guard_kind;

typedef struct {
    int kind;
    cdy_src src;
    char desc[96];          /* name for messages, e.g. "x" */
    PyObject *expect;       /* CONST: value; ID: object; TENSOR: exact type */
    PyObject *dtype;        /* TENSOR: torch.dtype (singleton) */
    cdy_src *other;         /* SAME: the second source (owned: PyMem, its references) */
    int requires_grad;
    int ndim;
    int64_t sizes[CDY_MAX_NDIM];
    int64_t strides[CDY_MAX_NDIM];
    /* a cache of what a global source (G['torch'].maximum) read last time it
     * held: the dict version tag of the globals and of each module walked
     * through, and the modules; equal tags mean the same dicts, unchanged */
    int memo_n;                             /* 0: nothing cached; -1: not memoizable */
    uint64_t memo_ver[CDY_MAX_ATTRS + 1];
    PyObject *memo_obj[CDY_MAX_ATTRS + 1];  /* borrowed: held by the unchanged dicts */
} cdy_guard;

/* ---- global torch state a trace may depend on (frame/state.c) ----------- */
typedef enum { CDY_STATE_DEFAULT_DTYPE, CDY_STATE_AUTOCAST, CDY_STATE_MODES } cdy_state_kind;
/* Resolve the readers; 0 or -1 (error set). */
int cdy_state_init(PyObject *torch);
/* The current value of state `which`, as a small int: DEFAULT_DTYPE its
 * c10::ScalarType; AUTOCAST CPU's and CUDA's enabled bits (1, 2) and their
 * autocast dtypes (bits 8-15, 16-23); MODES the lengths of the torch
 * function mode stack (bits 0-14) and of the dispatch mode stack (from bit
 * 15).  No Python call where torch's C++
 * readers were found; never fails. */
int cdy_state_read(int which);
/* Readable text of value v of state `which` into buf. */
void cdy_state_text(int which, int v, char *buf, size_t n);

typedef struct {
    int n, cap;
    cdy_guard *items;
    PyObject *tensor_check;  /* torch's C++ TensorGuards(...).check for the TENSOR
                                guards, all at once (cdy_guards_batch), or NULL */
} cdy_guards;

void cdy_guards_free(cdy_guards *gs);
/* Append a guard on s; returns it (zeroed apart from kind/src) or NULL (MemoryError). */
cdy_guard *cdy_guards_add(cdy_guards *gs, int kind, const cdy_src *src, const char *desc);
/* 1 if every guard holds for this frame, 0 if one fails (its message into
 * why when why != NULL), -1 on an internal error (exception set). */
int cdy_guards_check(const cdy_guards *gs, PyObject *const *locals, PyObject *globals,
                     PyObject *builtins, PyObject *closure, char *why, size_t whylen);
/* Let gs check its TENSOR guards in one call of torch's C++ TensorGuards
 * (torch._C._dynamo.guards), recorded from the values the guards read in
 * this frame state; without it (older torch, an error, a disagreement with
 * the guards), each is checked on its own as before.  Never fails. */
void cdy_guards_batch(cdy_guards *gs, PyObject *const *locals, PyObject *globals,
                      PyObject *builtins, PyObject *closure);
/* 1 if v's repr is cheap and short enough for a guard message. */
int cdy_guard_value_is_small(PyObject *v);
/* The guard list as text, one guard a line (new str). */
PyObject *cdy_guards_text(const cdy_guards *gs);

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
} cdy_pynode;

/* RAISING: only while tracing: the traced code raised (trace/exceptions.c) and
 * the frames unwind to a handler; it never leaves cdy_trace_run */
typedef enum { CDY_TRACE_OK, CDY_TRACE_UNSUPPORTED, CDY_TRACE_ERROR,
               CDY_TRACE_RAISING } cdy_trace_status;

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
    int autocast_on;         /* CPU autocast was on when the trace started */
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
} cdy_trace;

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
/* A new runtime/linear.c PackedLinear (linear(x, w, b) with w kept packed;
 * `always`: without timing it against torch's linear first), or NULL (no
 * error set) when this torch has no packed path. */
PyObject *cdy_packed_linear_new(int always);
/* Make PackedLinear pl apply relu to its result: 0, or -1 (unchanged) when
 * pl is not a PackedLinear or already applies it. */
int cdy_packed_linear_set_relu(PyObject *pl);
/* _C.callable_table(): the torch callables of ops/callables.def as resolved,
 * a list of (callable, op name or None, meta rule row or -1, builders,
 * contiguous) (trace/callables.c). */
PyObject *cdy_callables_py_table(PyObject *self, PyObject *unused);
/* Readable text of t's graph (new str), for logs, the debug dir and explain. */
PyObject *cdy_graph_text(const cdy_trace *t, PyCodeObject *co);

/* ---- runtime: compiled graphs -------------------------------------------- */
extern PyTypeObject cdy_compiled_type;
/* A callable running the plan's kernels from the .so at so_path (C backend). */
PyObject *cdy_compiled_from_plan(const cdy_plan *plan, const char *so_path,
                                 const char *name, int single, const cdy_trace *t);
/* A callable running the trace's calls through torch (eager backend). */
PyObject *cdy_compiled_eager(const cdy_trace *t, const char *name, int single);
int cdy_runtime_init(PyObject *torch);

/* ---- runtime: the pool of blocks behind a graph's tensors (runtime/mempool.c) */
int cdy_mempool_init(PyObject *torch);            /* 0; pool off if torch lacks the API */
int cdy_mempool_on(void);                         /* may cdy_mempool_tensor be used */
int64_t cdy_mempool_extent(const cdy_meta *m);    /* elements m's strides (>= 0) span */
/* A new tensor of m (its data in *data), or NULL + error. */
PyObject *cdy_mempool_tensor(const cdy_meta *m, void **data);
PyObject *cdy_mempool_py_set_limit(PyObject *self, PyObject *arg);
/* _C.start_standby(): start a standby compiler for the first build (frame/eval.c). */
PyObject *cdy_py_start_standby(PyObject *self, PyObject *unused);
PyObject *cdy_mempool_py_stats(PyObject *self, PyObject *unused);
PyObject *cdy_mempool_py_clear(PyObject *self, PyObject *unused);

/* ---- bytecode -------------------------------------------------------------- */
/* The transformed code: call global `fn_name` with the graph inputs and
 * rebuild the return value.  New reference or NULL (exception set). */
PyObject *cdy_bytecode_build(PyCodeObject *orig, const cdy_trace *t, PyObject *fn_name,
                             int single, int call_graph);
/* Number of argument slots of code (positional, kw-only, *args, **kwargs). */
int cdy_code_nargslots(PyCodeObject *co);

/* ---- frame hook and per-code cache ----------------------------------------- */
typedef struct {
    int enabled;             /* an optimized function runs on this thread */
    int backend;             /* CDY_BACKEND_* */
    int fullgraph;
} cdy_tls;

enum { CDY_BACKEND_C = 0, CDY_BACKEND_EAGER = 1 };

extern _Thread_local cdy_tls cdy_tls_state;
/* The compiled graph (identity only, not a reference) whose last call on this
 * thread raised before writing any input, or NULL: the frame hook then reruns
 * the frame eagerly, so inputs and the exception are eager's (set by
 * runtime/compiled.c, consumed by frame/eval.c). */
extern _Thread_local const void *cdy_graph_failed;
extern PyTypeObject cdy_optimized_type;
int cdy_frame_init(PyObject *module);
PyObject *cdy_frame_reset(void);

/* ---- the compile pipeline (pipeline.c) -------------------------------------- */
typedef struct {
    /* in */
    PyCodeObject *code;      /* the frame's code */
    int backend;             /* CDY_BACKEND_* */
    int forced;              /* handed to optimize: compiled even without a tensor op */
    /* out */
    int compiles;            /* the trace compiles: no stop, and a tensor op (or forced,
                                or torch modes on); name and single are set */
    char name[64];           /* __compiled_fn_N, the global the transformed code calls */
    int single;              /* the compiled graph returns its one output itself */
    PyObject *compiled;      /* new reference: the graph's callable; NULL: none (no
                                outputs) or failed */
    int threads;             /* the kernels follow torch.get_num_threads(), built for this
                                many threads (guard it); 0: not */
    int nthreads;            /* the threads the kernels are built for */
    int failed;              /* a stage failed: err says which and why */
    char err[CDY_ERRLEN];
} cdy_pipe;
/* Trace the frame of p->code and compile what it traced, stage by stage
 * (see pipeline.c); 0, or -1 with p->failed and p->err set.  t keeps the
 * trace (status, reason, guards) for the hook's entry. */
int cdy_pipeline(cdy_pipe *p, cdy_trace *t, PyObject *const *locals, PyObject *globals,
                 PyObject *builtins, PyObject *closure);
/* The compiler options of cdynamo.config into *opts, strings owned by *cc and
 * *dir (new references, dropped by the caller); 0, or -1 when not strings. */
int cdy_pipeline_cc_opts(cdy_cc_opts *opts, PyObject **cc, PyObject **dir);

/* ---- per-call phase timing (cdynamo.overhead_breakdown) -------------------- */
#define CDY_PHASES(X) X(guards) X(inputs) X(alloc) X(kernels) X(result)
typedef enum {
#define CDY_X(n) CDY_PHASE_##n,
    CDY_PHASES(CDY_X)
#undef CDY_X
    CDY_PHASE_COUNT
} cdy_phase;
extern int cdy_phase_on;                          /* timing wanted (rarely: it costs ~20 ns a phase) */
extern long long cdy_phase_ns[CDY_PHASE_COUNT];   /* accumulated while cdy_phase_on */
/* Monotonic clock in nanoseconds. */
long long cdy_now_ns(void);
/* Add the time since *t0 to phase p and restart *t0 (only while cdy_phase_on). */
static inline void cdy_phase_add(int p, long long *t0)
{
    if (__builtin_expect(cdy_phase_on, 0)) {
        long long t = cdy_now_ns();
        cdy_phase_ns[p] += t - *t0;
        *t0 = t;
    }
}
/* The start of a timed stretch: now, or 0 when timing is off. */
static inline long long cdy_phase_start(void)
{
    return __builtin_expect(cdy_phase_on, 0) ? cdy_now_ns() : 0;
}

/* ---- counters (GIL-protected) --------------------------------------------- */
#define CDY_STATS(X) X(frames_seen) X(frames_compiled) X(cache_hits) X(cache_misses) \
    X(recompiles) X(graph_breaks) X(fallbacks) X(kernels_compiled) X(disk_cache_hits) \
    X(standby_builds) X(direct_calls) X(packed_linear_calls) X(weight_packs) X(eager_reruns)
typedef struct {
#define CDY_X(n) long long n;
    CDY_STATS(CDY_X)
#undef CDY_X
} cdy_stats_t;
extern cdy_stats_t cdy_stats;

/* ---- hooks into the Python package (slow paths only) ---------------------- */
/* Calls cdynamo._support.<name>(*args); returns new ref or NULL (error set). */
PyObject *cdy_py_call(const char *name, const char *fmt, ...);
/* 1 if log topic is on (set by cdynamo at import through _C.set_log_topics). */
int cdy_log_on(const char *topic);
/* Emit text under a topic through the package's logger; never fails. */
void cdy_log(const char *topic, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The package's config value (new ref) or NULL with error set. */
PyObject *cdy_config_get(const char *name);
/* Record a graph break / fallback reason for stats and explain; code is a
 * cdy_reason (trace/reasons.h). */
void cdy_record_break(const char *reason, int code, PyObject *filename, int line, const char *fn);
/* Record a frame that runs eagerly (explain's eager_frames); code as above; the
 * record (new ref) or NULL. */
PyObject *cdy_record_eager(const char *reason, int code, PyObject *filename, int line,
                           const char *fn);

/* The text of b as a new str (b is emptied), or NULL with an error set. */
PyObject *cdy_buf_str(cdy_buf *b);

/* ---- fast tensor attribute reads (runtime/tensor_attrs.c) ----------------
 * X(name): data descriptors (getsets) and no-argument methods of
 * torch.Tensor read on every call of a compiled function.                  */
#define CDY_TENSOR_ATTRS(X) X(dtype) X(requires_grad) X(is_cpu) X(layout) X(shape) X(data_ptr) \
    X(stride) X(_version)

typedef enum {
#define CDY_X(a) CDY_TA_##a,
    CDY_TENSOR_ATTRS(CDY_X)
#undef CDY_X
    CDY_TA_COUNT
} cdy_tensor_attr_id;

/* v.<attr> (a new reference, or NULL with an error) through the C function
 * its type implements it with, resolved once per type and version tag;
 * PyObject_GetAttr (and a call, for methods) when it is not a C getset or
 * a C method callable with no arguments.  Methods (data_ptr, stride) are
 * called: the value is v.<attr>(). */
PyObject *cdy_tensor_attr(PyObject *v, int attr);

/* interned strings used on hot paths */
typedef struct {
    PyObject *data_ptr, *dtype, *shape, *stride, *requires_grad, *layout, *is_cpu, *_version;
} cdy_strs_t;
extern cdy_strs_t cdy_str;
extern PyObject *cdy_torch;           /* the torch module */
extern PyObject *cdy_tensor_type;     /* torch.Tensor */
extern PyObject *cdy_strided_layout;  /* torch.strided */
extern PyObject *cdy_empty_tuple;     /* () */

#endif /* CDYNAMO_INTERNAL_H */
