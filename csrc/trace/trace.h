/* trace.h - the tracer's internal types, shared by trace.c (the interpreter
 * loop and opcodes), vars.c (symbolic values, sources, guards, attributes),
 * calls.c (tensor ops, extern ops, inlined Python calls, builtins) and
 * callables.c (what each torch callable is: ops/callables.def). */
#ifndef CDY_TRACE_H
#define CDY_TRACE_H

#include "trace/record.h"
#include "frame/frame.h"
#include "pyver/pyver.h"
#include "trace/reasons.h"

#define CDY_MAX_INLINE_DEPTH 48
#define CDY_MAX_CALL_ARGS 32

typedef enum {
    TV_NULL,     /* the NULL CPython pushes below a callable */
    TV_CONST,    /* an immutable Python value: None, numbers, str, tuples of them, dtypes */
    TV_TENSOR,   /* a graph value; obj is its fake (meta) tensor */
    TV_TUPLE,    /* items[] */
    TV_LIST,     /* items[] (fresh list made by the traced code) */
    TV_DICT,     /* keys[] (constants, objects fixed by identity) -> items[]; obj: its class
                  * when it is not a dict (OrderedDict, defaultdict), else NULL */
    TV_OBJ,      /* any other object, guarded by identity: modules, functions, nn.Modules */
    TV_METHOD,   /* Tensor method `obj` (a name) bound to tensor self */
    TV_BOUND,    /* Python function `obj` bound to self (a method of a user object) */
    TV_ITER,     /* an iterator over items[] at pos (self: the LIST it reads, live) */
    TV_CELL,     /* a cell: its value in self (NULL while unbound); src set when it is a
                  * real closure's cell (not stored into) */
    TV_FUNC,     /* a function made by the trace (obj); items[] its closure cells */
    TV_SUPER,    /* super() in a method of class obj, bound to self */
    TV_INST,     /* an instance of Python class obj built in the frame (trace/objects.c): self
                  * is its __dict__ (a DICT), store the contents of its builtin container
                  * base (a DICT for dict / OrderedDict subclasses, a LIST for list ones) or
                  * NULL; rebuilt after the graph when it escapes (returned, stored) */
    TV_VIEW,     /* d.keys() / d.values() / d.items() (pos 0 / 1 / 2) of the DICT self: a live
                  * view, read when it is used (len, iteration, `in`, truth) */
    TV_BMETH,    /* builtin method descriptor obj (dict.get, object.__setattr__, ...) bound to
                  * self: super().name where a builtin base implements name */
    TV_SET,      /* a set the trace made (trace/sets.c): items[] its members (constants and
                  * objects fixed by identity), obj a real set of them (membership, order) */
    TV_PARTIAL,  /* functools.partial(self, *items[:pos], **dict(zip(keys, items[pos:n]))) */
} tv_kind;

/* Room for a source's name ("self._modules['block']._modules['0']..."): the
 * trace's memo of wrapped sources is keyed by it, so it must not be cut short. */
#define CDY_DESC_LEN 1024

typedef struct tvar {
    int kind;
    PyObject *obj;          /* CONST/OBJ: the object; TENSOR: fake; METHOD: name; BOUND: function;
                             * TUPLE: NULL, or the torch.return_types type of a call's result */
    int value;              /* TENSOR: graph value number */
    PyTypeObject *tp;       /* TENSOR: the real tensor's type */
    int requires_grad;      /* TENSOR: an input that requires grad (grad mode is off) */
    const cdy_src *src;     /* where it lives at frame entry; NULL when the trace made it */
    struct tvar *self;      /* METHOD, BOUND */
    int n, pos;
    struct tvar **items;    /* TUPLE, LIST, DICT values, ITER */
    PyObject **keys;        /* DICT */
    struct tracer *owner;   /* CELL */
    int built;              /* INST, SET, PARTIAL: 1 + its index among the trace's objects once the
                             * transformed code makes it; -1 while it is being described */
    int cap;                /* LIST, DICT, TUPLE: capacity of items (and keys) when > 0: the
                             * arrays are this tvar's own (trace/containers.c grows them) */
    struct tvar *store;     /* INST: its builtin container base's contents; DICT: the
                             * default factory of a defaultdict; FUNC: its attributes (a DICT) */
    int fixed;              /* OBJ without a source whose attributes are fixed with it (a
                             * dataclass Field, an inspect.Signature): read without guards */
    int sx;                 /* CONST int: 1 + its symbolic int node (trace/symint.c), or 0 */
    int *sxi;               /* CONST tuple (a torch.Size the code read): per item 1 + its
                             * symbolic int node, or 0; nsxi items */
    int nsxi;
    int by_type;            /* OBJ read from the frame and guarded by type only (an
                             * nn.Module or a plain instance): what depends on more
                             * than its type must be read through guarded sources */
} tvar;

typedef struct {
    const char *key;        /* source description */
    tvar *var;
} tv_memo;

/* One frame being traced: the top one, or a function inlined into it. */
typedef struct tracer {
    cdy_trace *t;
    struct tracer *parent;
    int depth;
    PyCodeObject *co;
    PyObject *const *frame_locals;   /* top frame only: the real arguments */
    PyObject *globals;               /* the function's globals */
    PyObject *builtins, *closure;
    const cdy_src *func_src;         /* inlined: where the function object lives (guards its cells) */
    int func_src_soft;               /* func_src of a function fixed by convention: its cells
                                      * fixed by convention are read without it */
    int guard_globals;               /* 0 for torch's own code: its globals are not guarded */
    PyObject *bytes;
    const unsigned char *code;
    int ncode, pc;                   /* pc: the current instruction's opcode (code unit) */
    int pc_start;                    /* its first EXTENDED_ARG prefix (pc without one) */
    int ninstr;                      /* instructions started in this frame */
    tvar **locals;
    int nlocals;
    tvar **stack;
    int sp, stack_cap;
    PyObject *kwnames;
    tvar *retval;                    /* inlined frame: what it returned */
    tvar **cells;                    /* inlined TV_FUNC: its closure (TV_CELLs) */
    tvar *yielded;                   /* a generator run to the end: what it yielded */
    tvar **sx_pend;                  /* the current CALL's arguments carrying symbolic ints */
    int nsx_pend;                    /* (trace/symint.c): a consumer with a rule or an inlined
                                      * frame takes them; the rest are pinned after the call */
    const tvar *sx_index_taken;      /* a tensor index whose slices' symbolic ints a getitem
                                      * rule took (cdy_tr_sym_getitem): not pinned */
    tvar *sx_op_callable;            /* the callable CALL is calling (cdy_call's result then
                                      * goes on the stack; other calls' results are pinned) */
    int sp_instr;                    /* the stack depth when the current instruction began */
    tvar null_var;
} tracer;

/* ---- trace.c ---- */
/* Stop the trace with reason CODE of trace/reasons.def, its template filled
 * with the arguments; the status follows the code's category.  -1.  The first
 * stop of a trace wins; later ones are ignored. */
#define cdy_tr_stop(tr, CODE, ...) \
    cdy_tr_stop_at((tr), CDY_R_##CODE, 0, cdy_rt_##CODE, ##__VA_ARGS__)
/* The same, with ": ExcType: message" of the pending Python exception
 * appended (the exception is cleared). */
#define cdy_tr_stop_exc(tr, CODE, ...) \
    cdy_tr_stop_at((tr), CDY_R_##CODE, 1, cdy_rt_##CODE, ##__VA_ARGS__)
/* What the two macros call: fmt must be code's template (cdy_rt_CODE). */
int cdy_tr_stop_at(tracer *tr, cdy_reason code, int exc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* An invariant of the tracer: 0 when c holds; else a bug: abort in debug
 * builds (CDY_ASSERT), and in release stop the trace with INTERNAL reason
 * CODE (its template's arguments follow): -1. */
#define CDY_TR_CHECK(tr, c, CODE, ...)                                          \
    ((c) ? 0 : (cdy_tr_invariant_broken(__FILE__, __LINE__, #c),                \
                cdy_tr_stop((tr), CODE, ##__VA_ARGS__)))
static inline void cdy_tr_invariant_broken(const char *file, int line, const char *cond)
{
#ifdef CDY_DEBUG_BUILD
    cdy_assert_fail(file, line, "a tracer invariant is broken", cond);
#else
    (void)file, (void)line, (void)cond;
#endif
}
/* Stop for torch op `what` that raised on the fakes: NO_META_KERNEL for a
 * NotImplementedError (no meta kernel), else TORCH_RAISED; -1. */
int cdy_tr_stop_torch(tracer *tr, const char *what);
/* Whether the trace has stopped (a reason is recorded). */
int cdy_tr_stopped(const tracer *tr);
PyObject *cdy_tr_keep(tracer *tr, PyObject *o);
/* trace/vars.c: collections.OrderedDict, resolved once (borrowed; NULL if it cannot be). */
PyObject *cdy_ordered_dict_type(void);
/* trace/sympins.c: the trace read value's sizes at dims (a bit each) as numbers
 * (why: static text); of every tensor among args (in tuples and lists too). */
void cdy_tr_pin(tracer *tr, int value, unsigned dims, const char *why);
void cdy_tr_pin_tensors(tracer *tr, tvar **args, int n, const char *why);
/* A call `what` over args whose result is a constant: pins what it read
 * (x.size(d) / len(x): one dim; dim(), dtype queries: none; else all). */
void cdy_tr_pin_query(tracer *tr, const char *what, tvar **args, int nargs);
/* Call `what` of tensor x whose result's aliasing follows x's layout
 * (contiguous(): x itself or a copy): pins x's sizes where they decide it
 * (x a cut of its source, through the views the trace recorded). */
void cdy_tr_sym_layout(tracer *tr, const char *what, tvar *x);
/* After the view builder made r for call: record how r's sizes follow its
 * source's (transpose, permute, unsqueeze, squeeze, view / reshape with a
 * -1, flatten), else pin the call's tensors. */
struct cdy_build_call_s;
/* After clone / contiguous made r for call: r's sizes are its input's, dim
 * for dim (else the call's tensors are pinned). */
void cdy_tr_sym_copy(tracer *tr, const struct cdy_build_call_s *call, tvar *r);
/* After split / chunk / tensor_split made the pieces r for call: each piece's
 * sizes are its input's but the cut dim (pinned); else the call's tensors are. */
void cdy_tr_sym_split(tracer *tr, const struct cdy_build_call_s *call, tvar *r);
/* Node value's dim d is src's dim map[d], or its constant size (map[d] < 0). */
void cdy_tr_sym_dims(tracer *tr, int value, int src, const signed char *map);
/* A FILL node value made by zeros / ones / empty / full / new_* from sizes
 * given as ints or one sequence: the symbolic ints among them are its sizes
 * (kind 'z'), taken (not pinned); *_like: its input's sizes (else the call's
 * tensors are pinned); other forms: nothing (the ints pin after the call). */
void cdy_tr_sym_fill(tracer *tr, const struct cdy_build_call_s *call, int value);
/* Node value's dim d is symbolic int sx[d] (1 + node), or its constant size (0). */
void cdy_tr_sym_sizes(tracer *tr, int value, const int *sx);
void cdy_tr_sym_view(tracer *tr, const struct cdy_build_call_s *call, tvar *r);
/* After tensor getitem's builders: a 'p' map when the index keeps every dim
 * whole (None, Ellipsis, slice(None)), else its tensors' sizes pinned. */
void cdy_tr_sym_getitem(tracer *tr, const struct cdy_build_call_s *call, tvar *r);
/* GATHER node value of advanced indexing src[...]: its dim d is src's dim
 * map[d] (walked whole), the broadcast of its index args' sizes there (-2),
 * or its constant size (-1); index arg i ranges over src's dim idim[i] - 1
 * (0: unknown) (kind 'g', sym/infer.c).  0, or -1 (stopped: no room). */
int cdy_tr_sym_gathered(tracer *tr, int value, int src, const signed char *map,
                        const signed char *idim);
/* Int scalar value is symbolic int sx (1 + node): a size the code added to a
 * tensor (kind 'k', sym/infer.c); 0, or -1 (no room: the caller pins it). */
int cdy_tr_sym_scalar(tracer *tr, int value, int sx);
/* arange(start, end)'s length end - start (ints, one or both symbolic) as a
 * symbolic int (1 + node), with end >= start recorded as a comparison (a
 * guard unless the symbols' range decides it); 0 when no room / not ints. */
int cdy_sx_arange_len(tracer *tr, const tvar *start, const tvar *end);
/* ---- symint.c: symbolic Python ints (sizes the code read) ---- */
/* A new node (cdy_sym_sx) of the trace: 1 + its index, or 0 (no room). */
int cdy_sx_node(tracer *tr, char op, int a, int b, int value, int dim, long long c);
/* The symbolic int of dim d of tensor tvar t / of t's element count: 1 + node, or 0. */
int cdy_sx_dim(tracer *tr, const tvar *t, int d);
int cdy_sx_numel(tracer *tr, const tvar *t);
/* c (a constant tvar) as a copy carrying node sx (or, sxi, one per item of its tuple). */
tvar *cdy_sx_tag(tracer *tr, tvar *c, int sx);
tvar *cdy_sx_tag_shape(tracer *tr, tvar *c, const tvar *t);
/* Int constant v (exact int o) read from source src (CONST-guarded): a copy
 * carrying a new int symbol's node when the policy (cdy_sx_int_policy) makes
 * src symbolic, else v. */
tvar *cdy_sx_int_input(tracer *tr, tvar *v, PyObject *o, const cdy_src *src);
/* The value of v (an int carrying a symbolic node that reads a Python int
 * symbol) as a ret computing it from the frame's int sources before any
 * store (an object of the trace: operator.add / mul / floordiv of sources and
 * constants; sizes it reads pinned); NULL when v has no such node or a node
 * no ret computes (the caller pins v). */
cdy_ret *cdy_sx_store_ret(tracer *tr, tvar *v);
/* Each int symbol's source into t->int_srcs (at the trace's end); 0, or -1
 * (no room: every one pinned). */
int cdy_sx_int_srcs(cdy_trace *t);
/* why with where tr is ("why at file.py:12 in f"), in the trace's arena; why
 * itself when there is no room. */
const char *cdy_sx_where(tracer *tr, const char *why);
/* Pin every size symbolic int node n (1 + index) reads / v holds (deep) / the trace made. */
void cdy_sx_pin_node(tracer *tr, int n, const char *why);
void cdy_sx_pin_deep(tracer *tr, tvar *v, const char *why);
void cdy_sx_pin_all(tracer *tr, const char *why);
/* Pin the symbolic ints an exception raised at tr's instruction may depend on:
 * its operands, those its frame's stack held when the instruction began (its
 * caller's too when the frame has not begun: a call's arguments). */
void cdy_sx_pin_frame(tracer *tr, const char *why);
/* Around semantic op s: pin what it consumes as a number; carry nodes through int
 * arithmetic, tuple indexing, unpacking.  pre fills ctx; post gets step's result r. */
typedef struct {
    int sop, arg, n;
    tvar *in[CDY_MAX_NDIM];
    tvar **pend;
    int npend;
} cdy_sx_ctx;
void cdy_sx_pre(tracer *tr, int sop, int arg, cdy_sx_ctx *ctx);
void cdy_sx_post(tracer *tr, cdy_sx_ctx *ctx, int r);
/* An inlined frame receives args: the pending call arguments among them are passed on. */
void cdy_sx_passed(tracer *tr, tvar **args, int nargs);
/* A consumer with a symbolic rule used v's symbolic ints: not pinned after the call. */
void cdy_sx_taken(tracer *tr, const tvar *v);
/* Record that nodes a <op> b (Py_LT .. Py_GE) was truth at the example (sym/infer.c
 * decides it by range or guards it); 0, or -1 (a node 0, or no room). */
int cdy_sx_cmp(tracer *tr, int a, int b, int op, int truth, const char *why);
/* min(a, b) / max(a, b) (is_max) of two ints, one or both symbolic: the one
 * Python picks (its node goes on), the comparison recorded as a guard; NULL
 * when not such ints (or no room). */
tvar *cdy_sx_minmax(tracer *tr, int is_max, tvar *a, tvar *b);
/* A size query's result out (x.size(), x.size(d), len(x), x.numel()) as a constant
 * carrying its symbolic int(s); NULL when what is no such query (or stopped). */
tvar *cdy_sx_query(tracer *tr, const char *what, tvar **args, int nargs, PyObject *out);
/* The symbolic int of an int argument a (1 + node), or 0; sxi-carrying tuples: item i. */
int cdy_sx_of(const tvar *a);
/* Run code with locals already bound; 0 when it returned (tr->retval), -1 when stopped. */
int cdy_tr_run_frame(tracer *tr);
/* Decode the instruction k instructions after the current one (k = 0: the
 * current one) into *out; 0, or -1 past the end of the code. */
int cdy_tr_peek_instr(const tracer *tr, int k, cdy_pv_instr *out);
/* The current value of cell c (a slot of a frame still being traced); NULL when stopped. */
tvar *cdy_tr_cell_value(tracer *tr, tvar *c);
/* Zero-argument super() in the traced function: a SUPER tvar; NULL when stopped. */
tvar *cdy_tr_super(tracer *tr);

/* Guard that torch.is_grad_enabled() stays `enabled` (once per trace); 0 or -1. */
int cdy_guard_grad_mode(tracer *tr, int enabled);
/* Guard that global state `which` (CDY_STATE_*) keeps its current value
 * (once per trace); 0 or -1 (stopped). */
int cdy_guard_state(tracer *tr, int which);

/* make_ret (trace.c): v described for the transformed code (tensors become
 * graph outputs); NULL when stopped. */
cdy_ret *cdy_tr_make_ret(tracer *tr, tvar *v);

/* ---- breaks.c: resuming after a graph break ---- */
/* 1 if finished trace t stopped at a break code can resume after (its CALL
 * is then traced again by cdy_trace_run); else 0, with why not appended to
 * a break's reason and logged. */
int cdy_brk_resumable(cdy_trace *t, PyCodeObject *co);
/* End the trace before the top frame's CALL instruction d: the graph so far,
 * the frame's values described in t->brk; 0, or -1 when stopped. */
int cdy_brk_capture(tracer *tr, const cdy_pv_instr *d);
/* The second trace t did not end at the break: note why in first's reason. */
void cdy_brk_log_no_resume(cdy_trace *t, cdy_trace *first, PyCodeObject *co);

/* ---- vars.c ---- */
int cdy_vars_init(void);
tvar *cdy_tv_new(tracer *tr, int kind);
tvar *cdy_tv_const(tracer *tr, PyObject *o);           /* steals o */
tvar *cdy_tv_seq(tracer *tr, int kind, tvar **items, int n);
int cdy_is_const(PyObject *o);
int cdy_is_enum_member(PyObject *o);      /* a member of an Enum class */
int cdy_is_torch_module(PyObject *o);
int cdy_is_info_type(PyObject *t);         /* torch.finfo / torch.iinfo */
int cdy_is_module_list(PyObject *o);       /* nn.ModuleList / nn.Sequential */
/* `k in c` for constant k and a dict or collections.abc.Mapping c read from the frame, with a
 * CONTAINS guard: 0/1; -1 when not such a container; -2 when stopped. */
int cdy_contains_guarded(tracer *tr, tvar *c, tvar *k);
int cdy_is_torch_callable(PyObject *fn);
cdy_src *cdy_src_new(tracer *tr, int kind);
cdy_src *cdy_src_step(tracer *tr, const cdy_src *base, PyObject *key, int item);
/* Guard that type(inst).<name> is still expect (a property the trace inlined: deleting or
 * replacing it on the class recompiles); 0, or -1 when stopped. No guard when inst has no
 * source. */
int cdy_tr_guard_class_attr(tracer *tr, tvar *inst, PyObject *name, PyObject *expect);
/* A tvar for o read at src, guarded (guard=0: not guarded). */
tvar *cdy_wrap(tracer *tr, PyObject *o, const cdy_src *src, int guard);
/* A new graph value; NULL when stopped. */
cdy_value *cdy_graph_add(tracer *tr, int kind, int *index);
int cdy_read_meta(tracer *tr, PyObject *x, cdy_meta *m);
/* A new node computing op over args (value numbers) with meta m and compute
 * dtype cdt (no pynode); its value number, or -1 when stopped. */
int cdy_node_add(tracer *tr, int op, const int *args, int nargs, const cdy_meta *m, int cdt);
/* A node casting value v to dtype dt (its meta m, dtype dt); its value number or -1. */
int cdy_node_cast(tracer *tr, int v, const cdy_meta *m, int dt);
/* A new scalar value (int64, float64 or bool); its number, or -1 when stopped. */
int cdy_scalar_int(tracer *tr, long long i);
int cdy_scalar_float(tracer *tr, double f);
int cdy_scalar_bool(tracer *tr, int b);
/* A TENSOR tvar for a new graph node with output fake `out` (made meta if it is not). */
tvar *cdy_tensor_node(tracer *tr, PyObject *out, int *index);
/* A new meta tensor with meta m, kept by the trace; NULL when stopped. */
PyObject *cdy_fake_from_meta(tracer *tr, const cdy_meta *m);
/* A TENSOR tvar for graph value `value` whose fake is `fake`; NULL when stopped. */
tvar *cdy_tensor_tvar(tracer *tr, PyObject *fake, int value);
tvar *cdy_get_attr(tracer *tr, tvar *base, PyObject *name);
/* Items of an iterable tvar as a fresh TV_LIST-like array; NULL when stopped. */
tvar *cdy_iterate(tracer *tr, tvar *v);
int cdy_truth(tracer *tr, tvar *v);
/* 1 if o is fixed by convention once made (a class, function, code, dataclass Field,
 * inspect Signature / Parameter, property): read without guards when it has no source. */
int cdy_fixed_by_convention(PyObject *o);
/* f.name / f.name = v for a function the trace made (TV_FUNC). */
tvar *cdy_func_attr(tracer *tr, tvar *f, PyObject *name);
int cdy_func_setattr(tracer *tr, tvar *f, PyObject *name, tvar *v);
/* a is b for two values read from the frame (sources): decided on the real objects, and
 * guarded (SAME); 1 / 0, -1 stopped. */
int cdy_same_object(tracer *tr, tvar *a, tvar *b);
/* v (read from the frame) is fixed object `fixed`: decided now; true is guarded by
 * identity (1), false stops (no guard says "is not"); -1 stopped. */
int cdy_is_fixed(tracer *tr, tvar *v, tvar *fixed);
/* The key object of k (cdy_key_of); an object guarded by type becomes guarded by
 * identity (a set member or dict key: its identity decides); NULL when none. */
PyObject *cdy_key_fixed(tracer *tr, tvar *k);
/* A tvar for o read from a fixed object: a constant, or a fixed TV_OBJ. */
tvar *cdy_fixed_value(tracer *tr, PyObject *o);
extern PyObject *cdy_module_type;    /* torch.nn.Module */
extern PyObject *cdy_parameter_type; /* torch.nn.Parameter */

/* ---- libops.c: torch.library ops outside aten / prims as opaque externs ---- */
int cdy_libops_init(void);
/* 1 if fn is torch.ops.<ns>.<name>[.<overload>] or a torch.library.custom_op
 * (CustomOpDef) of a namespace other than aten / prims; else 0. */
int cdy_libop_is(PyObject *fn);
/* 0 when fn is not such an op, or is one whose schema neither mutates an
 * input nor returns an alias, or an aten / prims op that writes no input;
 * else -1, stopped (LIBOP_MUTATES / LIBOP_ALIAS). */
int cdy_libop_check(tracer *tr, PyObject *fn, const char *what);

/* ---- calls.c ---- */
int cdy_calls_init(void);
/* Apply callable to args (positional, then kwnames' values); NULL when stopped. */
tvar *cdy_call(tracer *tr, tvar *callable, tvar **args, int nargs, PyObject *kwnames);
/* autocast.c: under CPU autocast, args[0..nargs) of call `what` replaced by
 * eager's autocast casts of them (traced x.to(dtype)); *handled = 1 when the
 * call's casts are in the graph (its extern may run under autocast).  Marks
 * the trace as depending on the autocast state.  0, or -1 when stopped. */
int cdy_autocast_args(tracer *tr, const char *what, tvar **args, int nargs, int *handled);
/* 1 if o is an instance of a plain Python class: every class of its MRO but
 * object is a Python class, with metaclass type (no builtin container base,
 * no enum): one guarded by type has only what its attributes hold. */
int cdy_is_plain_instance(PyObject *o);
/* type(self).name(self), traced (a Python function of self's class); NULL when stopped. */
tvar *cdy_call_dunder(tracer *tr, tvar *self, const char *name);
/* A guard of kind on obj's source expecting `expect` (a new reference kept),
 * needing no grad; NULL with the trace stopped (PY_ERROR) on failure. */
cdy_guard *cdy_tr_guard_expect(tracer *tr, int kind, tvar *obj, PyObject *expect);
/* fn(*args) of Python function fn traced inline; NULL when stopped. */
tvar *cdy_inline(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames);
/* cdy_inline for a call whose result is the traced call's own (it goes on the
 * stack: its symbolic sizes stay symbolic). */
tvar *cdy_inline_result(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames);
/* first followed by args (arena); NULL when stopped. */
tvar **cdy_prepend(tracer *tr, tvar *first, tvar **args, int nargs);
/* The Python type of v's value (borrowed). */
PyObject *cdy_tvar_type(tvar *v);
/* operator.<name>, cached in slot (borrowed); NULL with error. */
PyObject *cdy_operator_fn(int slot, const char *name);
/* fn(*args) with tensor args, run through torch at run time (an extern node). */
tvar *cdy_call_extern(tracer *tr, PyObject *fn, const char *what, tvar **args, int nargs);
/* fn(*args, **kw) traced as any torch call is: a builder's nodes or an extern node. */
tvar *cdy_call_torch(tracer *tr, PyObject *fn, const char *what, tvar **args, int nargs,
                     PyObject *kwnames);
/* Record fn(*args, **kw) (tensors: tvars) as the call the eager backend
 * replays to compute value v; 0, or -1 when stopped. */
int cdy_add_pynode(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames, int v);
/* An extern node running fn(*args, **kw) (the tensors among args, in lists
 * too, are its args) whose result on the fakes is the tensor out, with the
 * call recorded as its pynode; fn is not called.  Its tvar, or NULL when stopped. */
tvar *cdy_extern_node(tracer *tr, PyObject *fn, const char *what, tvar **args, int nargs,
                      PyObject *kwnames, PyObject *out);
/* The items a dict view (TV_VIEW) shows now, as a fresh TV_LIST; NULL when stopped. */
tvar *cdy_view_list(tracer *tr, tvar *view);
/* Operator fn (an operator.* function) on tensors/constants. */
tvar *cdy_call_operator(tracer *tr, PyObject *fn, const char *sym, tvar **args, int nargs);

/* ---- mutate.c: in-place ops, tensor item assignment, attribute stores ---- */
/* Remember TENSOR tvar v (cdy_tv_new calls it): re-pointing and alias checks see it. */
void cdy_mut_register(tracer *tr, tvar *v);
/* 1 if fn is the _cdy_scatter function write-through views are traced as. */
int cdy_mut_is_scatter(PyObject *fn);
/* In-place Tensor method `name` (ends in '_') on args[0] (args: self first):
 * args[0] re-pointed to the out-of-place result; it, or NULL when stopped. */
tvar *cdy_mut_method(tracer *tr, PyObject *name, tvar **args, int nargs, PyObject *kwnames);
/* Torch function fn called in place (name ending in '_', or inplace=True) on
 * args[0]: *handled = 1 and as cdy_mut_method; else *handled = 0, NULL. */
tvar *cdy_mut_call(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames,
                   int *handled);
/* args[0] op= args[1] on a tensor (fn operator.<name>): the re-pointed
 * args[0], or the new value when setitem stores it back (x[k] op= v). */
tvar *cdy_mut_binary(tracer *tr, const char *name, PyObject *fn, const char *sym, tvar **args);
/* x[k] = v on tensor x: x re-pointed to the result; 0 or -1 (stopped). */
int cdy_mut_setitem(tracer *tr, tvar *x, tvar *k, tvar *v);
/* obj.name = v on an object read from the frame: later reads see v, the store
 * is replayed after the call; 0 or -1 (stopped). */
int cdy_mut_store_attr(tracer *tr, tvar *obj, PyObject *name, tvar *v);
/* c (a list or dict read from the frame: it has a source) was changed by the
 * trace: its final contents are written into the caller's object after the
 * graph (_cdy_replace); 0 or -1. */
int cdy_mut_container(tracer *tr, tvar *c);
/* Graph outputs cdy_mut_finish may add (bound for the output array). */
int cdy_mut_extra_outputs(tracer *tr);
/* At the top frame's return (after the return value's outputs): fill
 * t->stores and t->writeback (mutated inputs' final values become outputs). */
int cdy_mut_finish(tracer *tr, cdy_ret *(*make_ret)(tracer *, tvar *));
/* Tensors in v and its items (a bound for the graph outputs rebuilding v may add). */
int cdy_tv_count_tensors(const tvar *v);
/* 1 if v is a graph input the trace mutated (returned through its source). */
int cdy_mut_is_input(tracer *tr, tvar *v);
/* vars.c: later reads of src in this trace give v; 0 or -1. */
int cdy_memo_set(tracer *tr, const cdy_src *src, tvar *v);

/* ---- containers.c: dict and list values and their methods ---- */
/* Make c's items (and keys) arrays its own, with room for n; 0 or -1. */
int cdy_seq_reserve(tracer *tr, tvar *c, int n);
/* The key object of k (a constant, or an object fixed by identity), or NULL. */
PyObject *cdy_key_of(const tvar *k);
/* Position of key in DICT d; -1 absent, -2 stopped. */
int cdy_dict_find(tracer *tr, tvar *d, PyObject *key);
/* d[key] = v; 0 or -1. */
int cdy_dict_set(tracer *tr, tvar *d, PyObject *key, tvar *v);
/* d.update(other) for a dict, items view or iterable of pairs; 0 or -1. */
int cdy_dict_update(tracer *tr, tvar *d, tvar *other);
/* d | other (a new dict) or d |= other (d updated) for a DICT d: the result, *handled 1
 * (NULL when stopped); *handled 0 when the operands are not a dict's. */
tvar *cdy_dict_or(tracer *tr, tvar *d, tvar *other, int inplace, int *handled);
/* l.extend(v); 0 or -1. */
int cdy_list_extend(tracer *tr, tvar *l, tvar *v);
/* Sort list l in place by key (a callable tvar or NULL) as list.sort does; 0 or -1. */
int cdy_list_sort(tracer *tr, tvar *l, tvar *key, int reverse);
/* l[k] = v on a LIST (int index or slice); 0 or -1. */
int cdy_seq_setitem(tracer *tr, tvar *l, tvar *k, tvar *v);
/* del c[k] on a DICT or LIST; 0 or -1. */
int cdy_container_delitem(tracer *tr, tvar *c, tvar *k);
/* a == b for container items decided at trace time: 1 / 0, -1 stopped. */
int cdy_items_equal(tracer *tr, tvar *a, tvar *b);
/* A fresh copy of DICT / LIST c (no source); NULL when stopped. */
tvar *cdy_container_copy(tracer *tr, tvar *c);
/* Keyword argument `name` of a call, or NULL. */
tvar *cdy_kwarg(tvar **args, int nargs, PyObject *kwnames, const char *name);
/* Method `name` of DICT / LIST / SET self called with args (self not among them). */
tvar *cdy_container_method(tracer *tr, tvar *self, const char *name, tvar **args, int nargs,
                           PyObject *kwnames);

/* ---- custom_fn.c: a custom torch.autograd.Function's apply ---- */
/* func(self, *args) when func bound to self is Fn.apply of a torch.autograd.Function
 * subclass Fn (*handled 1): Fn.forward inlined under no_grad, else a stop; *handled
 * 0 and NULL for any other function. */
tvar *cdy_cfn_apply(tracer *tr, PyObject *func, PyObject *self, tvar **args, int nargs,
                    PyObject *kwnames, int *handled);

/* ---- objects.c: instances of Python classes built in the frame (TV_INST) ---- */
/* 1 if cls(...) may be traced as a TV_INST (a Python class on object, dict,
 * OrderedDict or list, whose metaclass keeps type.__call__ and whose __new__
 * is the builtin base's; no exception, nn.Module or tensor class). */
int cdy_obj_buildable(PyObject *cls);
/* cls(*args, **kw): a new instance, its __init__ traced; NULL when stopped. */
tvar *cdy_obj_new(tracer *tr, PyObject *cls, tvar **args, int nargs, PyObject *kwnames);
/* inst.name by Python's lookup (descriptors, __dict__, class, __getattr__). */
tvar *cdy_obj_getattr(tracer *tr, tvar *inst, PyObject *name);
/* hasattr(inst, name): 1 / 0, -1 stopped; *value (if value) the attribute when 1. */
int cdy_obj_hasattr(tracer *tr, tvar *inst, PyObject *name, tvar **value);
/* inst.name = v through its class's __setattr__; 0 or -1. */
int cdy_obj_setattr(tracer *tr, tvar *inst, PyObject *name, tvar *v);
/* del inst.name; 0 or -1 (AttributeError raised into the trace when absent). */
int cdy_obj_delattr(tracer *tr, tvar *inst, PyObject *name);
/* object.__setattr__(inst, name, v): properties' setters, else the __dict__; 0 or -1. */
int cdy_obj_set_plain(tracer *tr, tvar *inst, PyObject *name, tvar *v);
/* The class's Python special method `name` called on inst (*handled 0 when the class has
 * none: NULL, not stopped). */
tvar *cdy_obj_dunder(tracer *tr, tvar *inst, const char *name, tvar **args, int nargs, int *handled);
/* Special method `name` on inst: the Python one, else the builtin base's on its contents. */
tvar *cdy_obj_special(tracer *tr, tvar *inst, const char *name, tvar **args, int nargs);
int cdy_obj_truth(tracer *tr, tvar *inst);                 /* bool(inst): 0/1, -1 stopped */
tvar *cdy_obj_iter(tracer *tr, tvar *inst);                /* iter(inst) as a TV_ITER */
/* Builtin method descriptor descr (dict.get, object.__setattr__, ...) called on self. */
tvar *cdy_obj_call_builtin(tracer *tr, PyObject *descr, tvar *self, tvar **args, int nargs,
                           PyObject *kwnames);
/* A read-only dict method (get, __getitem__, __contains__) of an object of the caller. */
tvar *cdy_frame_builtin(tracer *tr, PyObject *descr, tvar *self, tvar **args, int nargs,
                        PyObject *kwnames);
/* copy.copy(v) (deep 0) / copy.deepcopy(v) (deep 1) on symbolic values: containers,
 * instances built here, objects of the caller copied through their guarded __dict__. */
tvar *cdy_copy(tracer *tr, tvar *v, int deep);
/* The transformed code's rebuilding of inst: an OBJECT ret (made once, every use the
 * same object); NULL when stopped. */
cdy_ret *cdy_obj_ret(tracer *tr, tvar *inst, cdy_ret *(*make_ret)(tracer *, tvar *));
/* The OBJECT ret of v: made_call(v) appended to the trace's objects the first time. */
cdy_ret *cdy_object_ret(tracer *tr, tvar *v, cdy_ret *(*make_call)(tracer *, tvar *,
                        cdy_ret *(*)(tracer *, tvar *)), cdy_ret *(*make_ret)(tracer *, tvar *));

/* ---- builtins.c: builtins and library functions run on symbolic values ---- */
/* fn(*args) when fn is one builtins.c runs itself (dict(), set(), map, filter,
 * sorted, min/max with key, any/all, callable, iter/next, zip(strict=),
 * functools.partial/reduce, dataclasses.fields, torch.compiler.is_compiling);
 * *handled 0 (NULL, not stopped) for other callables. */
tvar *cdy_call_known(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames,
                     int *handled);
tvar *cdy_partial_call(tracer *tr, tvar *p, tvar **args, int nargs, PyObject *kwnames);
/* callable(*args) for a builtin method of a fixed object with constant or fixed
 * arguments: run now, the result fixed; *handled 0 otherwise. */
tvar *cdy_call_fixed_method(tracer *tr, tvar *callable, tvar **args, int nargs,
                            PyObject *kwnames, int *handled);
tvar *cdy_partial_attr(tracer *tr, tvar *p, PyObject *name);
/* The rebuilding of a set, partial, OrderedDict/defaultdict or namedtuple the trace made. */
cdy_ret *cdy_made_ret(tracer *tr, tvar *v, cdy_ret *(*make_ret)(tracer *, tvar *));
int cdy_is_namedtuple_class(PyObject *cls);
int cdy_is_environ(PyObject *o);                 /* o is os.environ */
/* bound (a Python method of os.environ) called: get / [] / in read as guarded constants. */
tvar *cdy_environ_call(tracer *tr, tvar *bound, tvar **args, int nargs, PyObject *kwnames);
/* a <op> b (COMPARE_OP oparg) with an instance built in the frame among them. */
tvar *cdy_obj_compare(tracer *tr, int oparg, tvar **args);

/* ---- exceptions.c: exceptions raised and caught in the traced code ---- */
/* 1 if USER reason code names a Python exception the traced code may catch. */
int cdy_exc_raisable(int code);
/* Make the trace RAISING with exception e (NULL: one made for USER reason
 * code from t->reason); 1 when it is, 0 when the stop stays final. */
int cdy_exc_begin(tracer *tr, int code, PyObject *e);
/* Raise exception object e (kept by the trace) in the traced code; -1. */
int cdy_exc_raise(tracer *tr, PyObject *e);
/* A RAISING trace at tr->pc: 0 with *next the handler of tr's frame (the
 * exception pushed, the trace OK again), -1 when tr's frame has none. */
int cdy_exc_unwind(tracer *tr, int *next);
/* A RAISING trace whose exception is a `type`: caught by the tracer itself
 * (hasattr, getattr with a default): 1 and the trace is OK again; else 0. */
int cdy_exc_catch(tracer *tr, PyObject *type);
/* At the top frame: an exception that left it stops the trace (its reason). */
void cdy_exc_escaped(tracer *tr);
int cdy_exc_push_info(tracer *tr);               /* PUSH_EXC_INFO */
int cdy_exc_pop_except(tracer *tr);              /* POP_EXCEPT */
int cdy_exc_check_match(tracer *tr);             /* CHECK_EXC_MATCH */
int cdy_exc_raise_varargs(tracer *tr, int argc); /* RAISE_VARARGS */
int cdy_exc_reraise(tracer *tr, int oparg);      /* RERAISE */
/* ExcClass(*constants): the exception object; *handled 0 when cls is no exception class. */
tvar *cdy_exc_construct(tracer *tr, PyObject *cls, tvar **args, int nargs, PyObject *kwnames,
                        int *handled);

/* ---- contexts.c: `with` blocks ---- */
int cdy_op_before_with(tracer *tr);              /* BEFORE_WITH */
/* torch.no_grad() / enable_grad() / set_grad_enabled() / inference_mode() / autocast()
 * made now (a fixed object); *handled 0 for other callables. */
tvar *cdy_ctx_construct(tracer *tr, PyObject *cls, tvar **args, int nargs, PyObject *kwnames,
                        int *handled);
/* A call of fn: the __exit__ of an autocast block the trace entered restores
 * the trace's autocast state (None); *handled 0 for any other fn. */
tvar *cdy_ctx_exit_call(tracer *tr, PyObject *fn, int *handled);
/* Make the live CPU autocast state the trace's for a torch call that reads
 * it; the live state to give cdy_ac_live_restore, -1 when they agree. */
int cdy_ac_live_set(tracer *tr);
void cdy_ac_live_restore(int saved);

/* ---- sets.c ---- */
tvar *cdy_set_build(tracer *tr, tvar **items, int n);        /* BUILD_SET */
tvar *cdy_set_from(tracer *tr, tvar *iterable);               /* set(iterable); NULL arg: set() */
int cdy_set_add(tracer *tr, tvar *s, tvar *v);
int cdy_set_update(tracer *tr, tvar *s, tvar *v);
/* The members of s in iteration order as a tvar of kind (TV_ITER, TV_LIST). */
tvar *cdy_set_items(tracer *tr, tvar *s, int kind);
/* a sym b with a a set; *handled 0 when not a set operation. */
tvar *cdy_set_operator(tracer *tr, const char *sym, tvar *a, tvar *b, int *handled);
/* s op= other (sym "|", "&", "-", "^"): s itself; NULL when stopped. */
tvar *cdy_set_inplace(tracer *tr, const char *sym, tvar *s, tvar *other);
tvar *cdy_set_method(tracer *tr, tvar *s, const char *name, tvar **args, int nargs,
                     PyObject *kwnames);

/* ---- meta.c ---- */
/* A fake for pointwise op `op` over its bound args (called as fn), its meta
 * (sizes, strides, dtype) computed in C as CPU's TensorIterator does; NULL
 * with no error when the rules do not cover the call (run torch instead). */
PyObject *cdy_meta_pointwise(tracer *tr, int op, PyObject *fn, tvar **args, int n);
/* The same for reductions (sum, mean, amax, amin, any, all, count_nonzero
 * over bound args (x, dims mask, keepdim); var, std, vector_norm with a
 * fourth). */
PyObject *cdy_meta_reduce(tracer *tr, int op, tvar **args, int n);
/* The same for extern calls fn(*args) of the META rows of ops/callables.def
 * (matmul family, layer_norm, cat / stack, batch_norm, pooling,
 * softmax, losses, conv2d, embedding, flips, sdpa, group_norm, normalize,
 * cumsum, tril / triu, roll, addmm, cross_entropy), NULL with no error
 * outside its rules. */
PyObject *cdy_meta_extern(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames);
/* out (torch's meta of fn(*args): dtype, sizes), or a fake with the layout
 * CPU's kernel gives the result: lowered pointwise op op's (TensorIterator's
 * over its operands), an extern's (op CDY_OP_EXTERN) where fn is a pointwise
 * ATen op with a CPU kernel or one of the kernels that allocate contiguous
 * results; NULL with the trace stopped on error. */
PyObject *cdy_meta_cpu_layout(tracer *tr, int op, PyObject *fn, tvar **args, int nargs,
                              PyObject *kwnames, PyObject *out);
/* m: the meta of torch.empty_like(x) (preserve_format): x's strides where x
 * is dense and non-overlapping, else dense strides in the order of x's; 0 or
 * -1. */
int cdy_meta_empty_like(const cdy_meta *x, cdy_meta *m);
/* 1 if torch's suggest_memory_format() is channels_last for a tensor of meta m. */
int cdy_meta_suggests_cl(const cdy_meta *m);
/* build_views.c: ints from a (an int, or a tuple / list of ints) appended to
 * dims[*n] (at most cap); 0 or -1. */
int cdy_int_items(tvar *a, int *dims, int *n, int cap);
/* build_reduce.c: a torch.norm / Tensor.norm call that is a vector norm, its
 * args as torch.linalg.vector_norm's (input, ord, dim, keepdim) into pos[4];
 * 0, or -1 when it is not one (or on out of memory). */
int cdy_norm_args(tracer *tr, tvar **args, int nargs, PyObject *kwnames, tvar **pos);

/* ---- compose.c: decompositions of composite torch ops into graph ops ----
 * Each adds its nodes and returns the result's value, or -1 when stopped. */
/* batch_norm in eval mode: ch = (mean, var, weight, bias) channel values of
 * meta pm ([C, 1, ..]; -2: absent weight / bias); x * alpha + beta over om. */
int cdy_compose_batch_norm(tracer *tr, int x, const int *ch, double eps, const cdy_meta *pm,
                           const cdy_meta *om, int dt);
/* The elementwise loss of x and y over m: 'm' mse, 'l' l1, 's' smooth l1 (beta). */
int cdy_compose_loss(tracer *tr, int kind, int x, int y, const cdy_meta *m, double beta);
/* Loss elements l (rank ndim) reduced by mean (else sum) to the 0-d om; -1 if om is not. */
int cdy_compose_loss_reduce(tracer *tr, int l, int ndim, int mean, const cdy_meta *om);
/* x * step + start (scalar values; -2: left out) over meta m computed in cdt. */
int cdy_compose_affine(tracer *tr, int x, int step, int start, const cdy_meta *m, int cdt);
/* F.normalize: x / norm.clamp_min(eps) (norm of meta nm; the result's meta om). */
int cdy_compose_normalize(tracer *tr, int x, int norm, double eps, const cdy_meta *nm,
                          const cdy_meta *om);
/* ---- opbind.c ---- */
/* Canonical positional args of lowered op `op` for this call into out[]
 * (CDY_MAX_NODE_ARGS at most); their count, or -1: run it as an extern. */
int cdy_op_bind(tracer *tr, int *op, tvar **args, int nargs, PyObject *kwnames, tvar **out);
/* The position of parameter `input` in op's signature (where a method call's
 * self goes: 1 for where's "condition input other"), 0 when none. */
int cdy_op_self_pos(int op);
/* Bind args/kwnames by the parameter names of sig (up to 8, e.g. "input dim
 * *dtype"; prefixes and defaults ignored) into slot[] (NULL when absent);
 * 0, or -1 when an argument fits no parameter or two. */
int cdy_bind_names(const char *sig, tvar **args, int nargs, PyObject *kwnames, tvar **slot);

/* ---- builders: torch calls turned into graph nodes --------------------------
 * A builder (cdy_build_<FN> of trace/build_<area>.c, named by a BUILD row of
 * ops/callables.def) turns one torch call into graph nodes of its own
 * (several pointwise nodes, a special-kind node, a view...).  tensor_call
 * runs it after the call has run on the fakes: call->out is torch's result,
 * whose meta the built result must have. */
typedef struct cdy_build_call_s {
    PyObject *fn;          /* the callable: a torch function or Tensor.<name> */
    const char *what;      /* its name, for reasons */
    tvar **args;           /* positional, then kwnames' values */
    int nargs;
    PyObject *kwnames;
    PyObject *out;         /* torch's result on the fakes: a tensor or a tuple of them */
    int op;                /* the op its BUILD row names (builders of several ops), or NONE */
} cdy_build_call;
/* The result tvar; CDY_NOT_LOWERED: this call is not lowerable, it becomes
 * an extern node (torch runs it); NULL: the trace stopped (a reason is
 * recorded).  tensor_call checks the protocol: NULL with a Python exception
 * pending and no stop is a LOWER_FAILED internal error; NULL with neither
 * is read as CDY_NOT_LOWERED (builders written before the sentinel). */
typedef tvar *(*cdy_build_fn)(tracer *tr, const cdy_build_call *call);
extern tvar cdy_not_lowered;
#define CDY_NOT_LOWERED (&cdy_not_lowered)
/* t.T / .mT / .H / .mH as a transpose or permute call (a VIEW); NULL when
 * stopped, or with *not_attr set when n is another name (build_views.c). */
tvar *cdy_transpose_attr(tracer *tr, tvar *t, const char *n, int *not_attr);
/* A new kind V node over argv[0..n) with meta m (build_views.c): a VIEW
 * (alias) or a VIEW_COPY whose element (i_0, ..) is element off + sum_d i_d *
 * strides[d] of base's buffer (cdy_value.view_*); its value, or -1 when
 * stopped. */
int cdy_view_value(tracer *tr, int alias, const int *argv, int n, const cdy_meta *m, int base,
                   const int64_t *strides, int64_t off);
/* Base, strides and offset of the loads of value p (a view: its own; any
 * other tensor: itself, its strides, 0) (build_views.c). */
void cdy_view_load_map(tracer *tr, int p, int *base, int64_t *strides, int64_t *off);
/* The TV_TENSOR of a lowered call's result node v (its fake is call->out,
 * whose meta v must have), with the call recorded as v's pynode (the eager
 * backend replays it; a realized view runs it).  NULL when stopped. */
tvar *cdy_build_result(tracer *tr, const cdy_build_call *call, int v);
/* 1 if argument t is absent (NULL) or the constant None (calls.c). */
int cdy_tv_none(const tvar *t);
/* 1 if t is a constant Python int (not a bool) that fits a long long; its
 * value in *out (calls.c). */
int cdy_const_int(const tvar *t, long long *out);
/* The TUPLE tvar of a lowered call returning a tuple (call->out) whose items
 * are nodes vs[0..n) (metas those of the items): one pynode for the call, an
 * item pynode per node.  NULL when stopped (or when out has not n items). */
tvar *cdy_build_result_multi(tracer *tr, const cdy_build_call *call, const int *vs, int n);
/* Item `name` of a TUPLE made from a torch.return_types result (.values,
 * .indices), or NULL (not stopped) when there is none. */
tvar *cdy_seq_field(tracer *tr, tvar *v, PyObject *name);

/* F.dropout / torch.dropout in training mode inside a training trace: *handled
 * 1 and eager's computation traced inline (noise drawn by torch's bernoulli,
 * x * noise / (1 - p): differentiable), NULL when stopped; *handled 0 for any
 * other call (build_dropout.c). */
tvar *cdy_dropout_train(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames,
                        int *handled);

/* 1 if fn is a Python function of torch.optim (or torch.utils._foreach_utils): traced
 * inline, never called as a torch callable (build_optim.c). */
int cdy_optim_inlined(PyObject *fn);
/* Float o read from the frame at src (guarded): when src is an optimizer's
 * param_groups[i]['lr'] and an earlier entry of this code guarded it equal to another
 * value (a scheduler changed it) and tr traces torch.optim's code (the step), a graph
 * input read per call as a 0-dim float64 tensor
 * (src plus a converter step: guarded a float by type only); else NULL (also when
 * stopped: tr's status says). */
tvar *cdy_optim_float_input(tracer *tr, PyObject *o, const cdy_src *src);
/* 1 if tr traces torch.optim's _multi_tensor_sgd, whose is_compiling() only picks
 * _foreach_mul(grads, -lr) + _foreach_add_ over eager's _foreach_add_(alpha=-lr) for a
 * tensor lr (an item() under Dynamo): here the tensor alpha is a graph op (eager's fma,
 * cdynamo._optim.add_), so the trace takes eager's branch (is_compiling() False). */
int cdy_optim_eager_branch(tracer *tr);
/* t.grad (name: "grad") of a tensor read from the frame: its real .grad read through a
 * guarded source (None: a constant; a tensor: a graph input); NULL when stopped
 * (TENSOR_ATTR for a tensor the trace made). */
tvar *cdy_tensor_grad(tracer *tr, tvar *t, PyObject *name);
/* d[key] for a dict read from the frame (an optimizer's state) keyed by a tensor read
 * from the frame: the key guarded by identity, the item read through a guarded source;
 * *handled 0 for other subscripts.  NULL when stopped (OPTIM_STATE_MISSING: no item). */
tvar *cdy_optim_state_item(tracer *tr, tvar *d, tvar *key, int *handled);
/* Append to `to` copies of the guards of `from` marked carry (a resumed trace keeps
 * what decided its break: the state item still missing); 0 or -1 (no memory). */
int cdy_guards_carry(cdy_guards *to, const cdy_guards *from);
/* Tensor method `name` (args[0] self) or function fn (torch._foreach_*, torch.optim's
 * _get_value) that cdynamo._optim decomposes: *handled 1 and its Python traced inline (NULL when
 * stopped); *handled 0 for the others. */
tvar *cdy_optim_method(tracer *tr, PyObject *name, tvar **args, int nargs, PyObject *kwnames,
                       int *handled);
tvar *cdy_optim_function(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames,
                         int *handled);
/* list[cls] (a typing annotation in a cast(), as torch.optim writes): *handled 1 and the
 * GenericAlias, fixed; *handled 0 for other subscripts. */
tvar *cdy_generic_alias(tracer *tr, tvar *cls, tvar *arg, int *handled);
/* A call of torch.optim's _use_grad wrapper (an optimizer's step turning grad mode
 * off): *handled 1, the step's code is marked traced as its own frame and the trace
 * stops (OPTIM_STEP: the wrapper runs eagerly and calls it under no_grad).  *handled 0
 * for other calls. */
tvar *cdy_optim_use_grad(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames,
                         int *handled);
/* d.values() / keys() / items() of an empty dict subclass read from the frame (the
 * OrderedDicts of hooks torch.optim's step wrapper walks): *handled 1 and (), the dict
 * guarded empty (LEN); *handled 0 for other calls. */
tvar *cdy_empty_dict_view(tracer *tr, tvar *callable, int nargs, PyObject *kwnames, int *handled);
/* 1 if c is a list or tuple torch's own code read from its (unguarded) globals, as
 * torch.optim's _foreach_supported_types: fixed by convention like its other globals. */
int cdy_torch_global_seq(tracer *tr, const tvar *c);
/* The torch.optim function fobj wraps when fobj is torch._dynamo.disable's wrapper of it
 * (torch.compile wraps every optimizer's _init_group so): traced instead, its meaning
 * outside TorchDynamo; else fobj.  Borrowed. */
PyObject *cdy_optim_undisable(PyObject *fobj);
int cdy_is_dict_view_name(PyObject *name);   /* "values", "keys" or "items" */

/* ---- rewrite.c: shared by the rewrites of a finished trace ---- */
void cdy_trace_users(const cdy_trace *t, int *users);          /* readers per value */
void cdy_trace_pynode_of(const cdy_trace *t, int *pynode_of);  /* defining call per value, or -1 */
void cdy_value_drop(cdy_graph *g, int v);                      /* v: an unused scalar */
int cdy_value_number(const cdy_graph *g, int v, double *out);  /* 1 if v is a number */

/* ---- callables.c: the torch callables of ops/callables.def ---- */
int cdy_callables_init(PyObject *torch);
int cdy_callable_op(PyObject *fn);            /* its graph op (OP row), or CDY_OP_NONE */
int cdy_callable_method_op(PyObject *name);   /* the op of Tensor method `name`, or NONE */
/* The number of fn's META row among the META rows (meta.c's rule), or -1;
 * the op the rule binds as in *op. */
int cdy_callable_meta(PyObject *fn, int *op);
int cdy_callable_binary_op(PyObject *fn);     /* torch.min/max's (a, b) form's pointwise op, or NONE */
int cdy_callable_builds(PyObject *fn);        /* 1 if a BUILD row names fn */
int cdy_callable_symbolic(PyObject *fn);      /* 1 if its builders keep sizes symbolic,
                                                 * 2 the view builder (cdy_tr_sym_view), 3 clone
                                                 * / contiguous (cdy_tr_sym_copy), 4 split
                                                 * (cdy_tr_sym_split), 5 the gathers:
                                                 * embedding, index_select, gather
                                                 * (their builders record each GATHER
                                                 * node's map: build_index.c), 6 the fills
                                                 * zeros / ones / full / new_* / *_like
                                                 * (cdy_tr_sym_fill), 7 tensor getitem
                                                 * (cdy_tr_sym_getitem) */
int cdy_callable_contiguous(PyObject *fn);    /* 1 if a CONTIGUOUS row names fn */
/* Run the builders of call->fn (see callables.def); CDY_NOT_LOWERED when it has
 * none or they decline, else as a builder returns. */
tvar *cdy_callable_build(tracer *tr, const cdy_build_call *call);
/* Whether builder `what` declined the call (result r: CDY_NOT_LOWERED, or a
 * NULL with no stop and no exception); a NULL with an exception and no stop
 * is stopped here as LOWER_FAILED.  0 for a result or a stop. */
int cdy_build_declined(tracer *tr, tvar *r, const char *what);
int cdy_dtype_from_obj(PyObject *dtype);    /* cdy_dtype or CDY_DT_NONE */
PyObject *cdy_dtype_obj(int dt);            /* the torch.dtype (borrowed) */
int cdy_dtype_take(PyObject *dt);           /* consumes dt (may be NULL); cdy_dtype or NONE */
int cdy_result_dtype(PyObject *a, PyObject *b);   /* torch.result_type(a, b) or NONE */
#endif
