/* runtime/runtime.h - compiled graphs (runtime/compiled.c), the pool of
 * blocks their tensors come from (mempool.c), packed linear weights
 * (linear.c), fast tensor attribute reads (tensor_attrs.c), per-call phase
 * timing.  What the runtime takes of a trace is cdy_run_record
 * (trace/record.h). */
#ifndef CDY_RUNTIME_H
#define CDY_RUNTIME_H

#include "module.h"
#include "trace/record.h"

/* ---- runtime: compiled graphs -------------------------------------------- */
extern PyTypeObject cdy_compiled_type;
/* A callable running the plan's kernels from the .so at so_path (C backend). */
PyObject *cdy_compiled_from_plan(const cdy_plan *plan, const char *so_path,
                                 const char *name, int single, const cdy_run_record *r);
/* The same for a plan compiled with symbolic sizes (cdy_codegen_sym): it takes
 * *sym (left zeroed), computes the symbols' values from each call's inputs
 * (RuntimeError when the inputs break its shapes' rules), allocates every
 * buffer at those sizes and passes them to the kernels.  sym NULL: static. */
struct cdy_sym_shapes_s;
PyObject *cdy_compiled_from_plan_sym(const cdy_plan *plan, const char *so_path,
                                     const char *name, int single, const cdy_run_record *r,
                                     struct cdy_sym_shapes_s *sym);
/* A callable running the record's torch calls (eager backend). */
PyObject *cdy_compiled_eager(const cdy_run_record *r, const char *name, int single);
int cdy_runtime_init(PyObject *torch);
/* Adds runtime/train_call.c's functions (a training graph's per-call path) to m; 0 or -1. */
int cdy_train_call_init(PyObject *m);
/* Adds runtime/attention.c's attention_forward and attention_grads (a training
 * graph's attention through torch's flash kernels) to m; 0 or -1. */
int cdy_attention_init(PyObject *m);

/* ---- runtime: a matmul extern as the mm / bmm it reaches (runtime/mmdirect.c) */
int cdy_mmd_init(PyObject *torch);                /* 0, or -1 with error */
/* The direct form of torch.matmul(a, b) at static metas a, b (o: its
 * product's): a new ref to keep, or NULL (no error) where torch.matmul runs. */
PyObject *cdy_mmd_plan(const cdy_meta *a, const cdy_meta *b, const cdy_meta *o);
/* Run plan on tensors a, b (out: a contiguous tensor of o's meta to write,
 * or NULL): 1 with *r (new ref, torch.equal to torch.matmul's, same
 * strides), 0 where torch.matmul must run (an operand needs grad), -1 with error. */
int cdy_mmd_call(PyObject *plan, PyObject *a, PyObject *b, PyObject *out, PyObject **r);
/* _C.set_matmul_direct(flag): graphs compiled from now make direct forms
 * (default True); returns the flag before (A/B measurements, tests). */
PyObject *cdy_mmd_py_set(PyObject *self, PyObject *arg);

/* ---- runtime: the pool of blocks behind a graph's tensors (runtime/mempool.c) */
int cdy_mempool_init(PyObject *torch);            /* 0; pool off if torch lacks the API */
int cdy_mempool_on(void);                         /* may cdy_mempool_tensor be used */
/* Nonzero: this thread's graphs allocate their tensors of at least this many
 * bytes with torch, not from the pool (a training graph's call,
 * runtime/train_call.c: such tensors then go back to torch's allocator when
 * freed, as eager's do, not to the pool's free lists). */
extern _Thread_local int64_t cdy_mempool_bypass;
/* Nonzero while this thread runs a training graph: the blocks it takes go
 * back to the training free lists, which cdy_mempool_trim_train empties. */
extern _Thread_local int cdy_mempool_train;
void cdy_mempool_trim_train(void);                /* free the training lists' cached blocks */
/* May a tensor of meta m (strides >= 0) come from the pool (on, not bypassed, not empty). */
int cdy_mempool_takes(const cdy_meta *m);
int64_t cdy_mempool_extent(const cdy_meta *m);    /* elements m's strides (>= 0) span */
/* A new tensor of m (its data in *data), or NULL + error. */
PyObject *cdy_mempool_tensor(const cdy_meta *m, void **data);
/* Tensor x's data pointer into *data (1 for no storage) and, when m is not
 * NULL, its meta into *m (dtype -1: not a cdynamo dtype), read through torch's
 * DLPack exchange API without a Python call: 1, or 0 (nothing written, no
 * error) when that path does not apply (older torch, a subclass, not CPU). */
int cdy_mempool_read(PyObject *x, cdy_meta *m, void **data);
PyObject *cdy_mempool_py_set_limit(PyObject *self, PyObject *arg);
/* _C.set_heap_keep(n): glibc keeps n freed heap bytes mapped (mempool.c) */
PyObject *cdy_mempool_py_heap_keep(PyObject *self, PyObject *arg);
PyObject *cdy_mempool_py_stats(PyObject *self, PyObject *unused);
PyObject *cdy_mempool_py_clear(PyObject *self, PyObject *unused);
PyObject *cdy_mempool_py_reset_peak(PyObject *self, PyObject *unused);

/* A new runtime/linear.c PackedLinear (linear(x, w, b) with w kept packed;
 * `always`: without timing it against torch's linear first), or NULL (no
 * error set) when this torch has no packed path. */
PyObject *cdy_packed_linear_new(int always);
/* PackedLinear pl (anything else: nothing) is called in a graph of runtime
 * sizes: it chooses torch's linear or its pack per rows of its input. */
void cdy_packed_linear_set_per_rows(PyObject *pl);
/* Make PackedLinear pl apply relu to its result: 0, or -1 (unchanged) when
 * pl is not a PackedLinear or already applies it. */
int cdy_packed_linear_set_relu(PyObject *pl);

/* The compiled graph (identity only, not a reference) whose last call on this
 * thread raised before writing any input, or NULL: the frame hook then reruns
 * the frame eagerly, so inputs and the exception are eager's (set by
 * runtime/compiled.c, consumed by frame/eval.c). */
extern _Thread_local const void *cdy_graph_failed;

/* Donated arguments: a caller that owns the references in an array args sets
 * cdy_donated_args = args just before calling a compiled graph (or an
 * optimized function whose direct path forwards them, frame/eval.c) with it.
 * The graph's call (runtime/compiled.c, C backend) then takes the references
 * out of the array (setting its slots NULL) and drops each input after the
 * last step that reads it, so that a tensor no one else holds is freed
 * mid-call (a compiled backward's saved tensors, as eager frees each node's
 * as its backward goes).  On an error before any input was dropped the
 * references are put back.  Cleared by the callee at entry and by the
 * caller after the call. */
extern _Thread_local PyObject *const *cdy_donated_args;

/* ---- per-call phase timing (cdynamo.overhead_breakdown) --------------------
 * Exclusive phases of a call: guards, inputs, alloc, kernels (generated
 * kernels), externs (torch calls), free (buffers dropped after their last
 * step), result; train_fwd / train_bwd are inclusive: the whole of a
 * training graph's _train_forward / _train_backward (runtime/train_call.c). */
#define CDY_PHASES(X) X(guards) X(inputs) X(alloc) X(kernels) X(externs) X(free) X(result) \
    X(train_fwd) X(train_bwd)
typedef enum {
#define CDY_X(n) CDY_PHASE_##n,
    CDY_PHASES(CDY_X)
#undef CDY_X
    CDY_PHASE_COUNT
} cdy_phase;
extern int cdy_phase_on;          /* timing wanted (rarely: it costs ~20 ns a phase) */
/* Accumulated while cdy_phase_on, in two banks: [0] the calls outside a
 * training graph's backward, [1] those inside it (train_call.c switches). */
extern long long cdy_phase_ns[2][CDY_PHASE_COUNT];
extern int cdy_phase_bank;        /* the bank phases add to: 0 or 1 */
/* Monotonic clock in nanoseconds (the thread's CPU clock while phase_timing("cpu")). */
long long cdy_now_ns(void);
/* Add the time since *t0 to phase p and restart *t0 (only while cdy_phase_on). */
static inline void cdy_phase_add(int p, long long *t0)
{
    if (__builtin_expect(cdy_phase_on, 0)) {
        long long t = cdy_now_ns();
        cdy_phase_ns[cdy_phase_bank][p] += t - *t0;
        *t0 = t;
    }
}
/* The start of a timed stretch: now, or 0 when timing is off. */
static inline long long cdy_phase_start(void)
{
    return __builtin_expect(cdy_phase_on, 0) ? cdy_now_ns() : 0;
}

/* ---- fast tensor attribute reads (runtime/tensor_attrs.c) ----------------
 * X(name): data descriptors (getsets) and no-argument methods of
 * torch.Tensor read on every call of a compiled function.                  */
#define CDY_SYM_TOKEN_MAX 256             /* CDY_SYM_MAX_SYMS (sym/sym.h) */
#define CDY_TENSOR_ATTRS(X) X(dtype) X(requires_grad) X(is_cpu) X(layout) X(shape) X(data_ptr) \
    X(stride) X(_version) X(storage_offset)

typedef enum {
#define CDY_X(a) CDY_TA_##a,
    CDY_TENSOR_ATTRS(CDY_X)
#undef CDY_X
    CDY_TA_COUNT
} cdy_tensor_attr_id;

/* v.<attr> (a new reference, or NULL with an error) through the C function
 * its type implements it with, resolved once per type and version tag;
 * PyObject_GetAttr (and a call, for methods) when it is not a C getset or
 * a C method callable with no arguments.  Methods (data_ptr, stride,
 * storage_offset) are called: the value is v.<attr>(). */
PyObject *cdy_tensor_attr(PyObject *v, int attr);

/* The symbols' values an entry's SYM guard read (frame/guards.c), handed
 * to the symbolic graph its frame calls next so that the graph checks no
 * size again (issue 32): set when the guard holds, kept by the frame hook
 * only for the entry it runs (cleared before every lookup), taken (cleared)
 * by the first symbolic graph call whose shapes match it (same symbols:
 * inputs, dims, hints) and whose arguments are the tensors the guard read.
 * A graph called otherwise reads and checks its inputs itself. */
typedef struct {
    const void *owner;                       /* the SYM guard's shapes; NULL: no token */
    int nsyms;
    int64_t vals[CDY_SYM_TOKEN_MAX];
    PyObject *objs[CDY_SYM_TOKEN_MAX];       /* borrowed identities: symbol k's input */
} cdy_sym_token;
extern cdy_sym_token cdy_sym_tok;

#endif /* CDY_RUNTIME_H */
