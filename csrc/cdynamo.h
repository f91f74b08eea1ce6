/* cdynamo.h - types shared by the tracer, the compiler and the runtime.
 *
 * The graph is the contract between csrc/trace/ (which builds it) and
 * csrc/compiler/ (which lowers it).  It is plain C data: no Python objects,
 * so the compiler can be built and tested without Python.  The Python side
 * of a graph (callables for the eager backend, example values) lives in the
 * tracer's own structures.
 */
#ifndef CDYNAMO_H
#define CDYNAMO_H

#include <stddef.h>
#include <stdint.h>

#define CDY_MAX_NDIM 8
#define CDY_MAX_NODE_ARGS 16   /* an extern such as torch._transformer_encoder_layer_fwd reads 13 */
#define CDY_ERRLEN 512

/* ---- dtypes --------------------------------------------------------------
 * X(ENUM, torch name, C storage type, C compute type, size, is_float, is_int)
 * bool is stored as one byte holding 0 or 1, exactly as torch stores it.
 * bfloat16 / float16 are stored as their 16 bits and computed in float: a
 * kernel's local holds the float the 16 bits convert to exactly (cg_ld /
 * cg_st in compiler/codegen.c convert at loads and stores).  Low-precision
 * dtypes come last: the rows above keep their numbers.   */
#define CDY_DTYPES(X)                                                   \
    X(BOOL, "bool", "uint8_t", "uint8_t", 1, 0, 0)                      \
    X(UINT8, "uint8", "uint8_t", "uint8_t", 1, 0, 1)                    \
    X(INT8, "int8", "int8_t", "int8_t", 1, 0, 1)                        \
    X(INT16, "int16", "int16_t", "int16_t", 2, 0, 1)                    \
    X(INT32, "int32", "int32_t", "int32_t", 4, 0, 1)                    \
    X(INT64, "int64", "int64_t", "int64_t", 8, 0, 1)                    \
    X(FLOAT32, "float32", "float", "float", 4, 1, 0)                    \
    X(FLOAT64, "float64", "double", "double", 8, 1, 0)                  \
    X(BFLOAT16, "bfloat16", "uint16_t", "float", 2, 1, 0)               \
    X(FLOAT16, "float16", "uint16_t", "float", 2, 1, 0)

typedef enum {
#define CDY_X(e, n, st, ct, sz, f, i) CDY_DT_##e,
    CDY_DTYPES(CDY_X)
#undef CDY_X
    CDY_DT_COUNT,
    CDY_DT_NONE = -1
} cdy_dtype;

typedef struct {
    const char *name;      /* torch's name, e.g. "float32" */
    const char *ctype;     /* C storage type */
    const char *cctype;    /* C compute type */
    int size;
    int is_float;
    int is_int;
} cdy_dtype_info;

extern const cdy_dtype_info cdy_dtype_table[CDY_DT_COUNT];

/* 1 for bfloat16 / float16: stored in 16 bits, computed in float32. */
static inline int cdy_dtype_lowp(int dt)
{
    return dt == CDY_DT_BFLOAT16 || dt == CDY_DT_FLOAT16;
}

/* ---- ops: THE table is ops/ops.def (one row per op); ops/ops.h expands it
 * into enum cdy_op (CDY_OP_ADD, ...) and cdy_op_table (name, nargs, kind, ...). */
#include "ops/ops.h"

/* ---- tensor meta ---------------------------------------------------------- */
typedef struct {
    int dtype;                      /* cdy_dtype */
    int ndim;
    int64_t sizes[CDY_MAX_NDIM];
    int64_t strides[CDY_MAX_NDIM];  /* in elements */
} cdy_meta;

int64_t cdy_meta_numel(const cdy_meta *m);
int cdy_meta_contiguous(const cdy_meta *m);   /* row-major (size-1 dims any stride) */
/* The same for nd sizes sz and strides st (a guard's, a view's strides over its base). */
int cdy_strides_contiguous(int nd, const int64_t *sz, const int64_t *st);
/* 1 if m's strides are torch.empty's for its sizes (size-1 dims' too: an op
 * that keeps its input's layout, clone, copies them into its result). */
int cdy_meta_canonical(const cdy_meta *m);
/* The same for nd sizes sz and strides st (a guard reading them as arrays). */
int cdy_strides_canonical(int nd, const int64_t *sz, const int64_t *st);
/* Set st to torch.empty's strides for the nd sizes sz (cdy_strides_canonical's). */
void cdy_canonical_strides(int nd, const int64_t *sz, int64_t *st);
/* m's dims of size other than 1, outermost first, into order: their count if m
 * is dense in that order (a permutation of a contiguous layout), else -1. */
int cdy_meta_dense_order(const cdy_meta *m, int *order);
/* m's dims of size other than 1 by decreasing stride (ties by dim order) into
 * order: their count when m does not overlap (each stride > 0 and at least
 * the extent of the dim inside it: a permuted layout, dense or with gaps, as
 * a slice of a preallocated cache), else -1 (issue 32). */
int cdy_meta_layout_order(const cdy_meta *m, int *order);
/* 1 if sizes sz / strides st (m's rank) have the layout of example m with
 * its sizes >= 2 free: m canonical, torch.empty's strides; else, in m's
 * layout order, a dim dense inside the next one at m (its stride that dim's
 * extent) is dense at sz too, any other keeps m's stride and its gap (a
 * stride past the extent inside it), a size-1 dim keeps size 1 and its
 * stride, and the strides sort as m's do.  What a symbolic entry's kernels
 * (compiler/symk.c) and layouts rely on for a non-contiguous input. */
int cdy_strides_follow(const cdy_meta *m, int nd, const int64_t *sz, const int64_t *st);

/* ---- graph ------------------------------------------------------------------
 * Values are numbered 0..nvalues-1.  A value is a graph input (a tensor
 * passed at run time), a scalar constant, or the output of a node.  Node
 * arguments refer to values by number; values are in topological order.    */
typedef enum { CDY_VAL_INPUT, CDY_VAL_SCALAR, CDY_VAL_NODE } cdy_val_kind;

typedef struct {
    int kind;          /* cdy_val_kind */
    cdy_meta meta;     /* INPUT, NODE: the tensor's meta; SCALAR: dtype only, ndim 0 */
    /* INPUT */
    int input_index;   /* position in the runtime's input array */
    /* SCALAR: a Python number; dtype says which field holds it
     * (BOOL/ints use i, FLOAT64 uses f).  Cast to the compute dtype at use. */
    int64_t i;
    double f;
    /* NODE */
    int op;            /* cdy_op */
    int nargs;
    int args[CDY_MAX_NODE_ARGS]; /* value numbers */
    int compute_dtype; /* dtype the op computes in (torch's common dtype) */
    int source_line;   /* user's line number, for comments and logs */
    struct PyCodeObject *source_code; /* borrowed: the traced code of source_line, or NULL */
    /* kind 'V' nodes (VIEW, VIEW_COPY): element (i_0, ..) of the node is
     * element view_offset + sum_d i_d * view_strides[d] of value view_base's
     * buffer (elements from its data pointer; strides may be negative: flip).
     * view_base is never a VIEW node. */
    int view_base;
    int64_t view_offset;
    int64_t view_strides[CDY_MAX_NDIM];
} cdy_value;

typedef struct {
    int nvalues, cap_values;
    cdy_value *values;
    int ninputs;
    int noutputs;
    int *outputs;      /* value numbers returned, in order (may be inputs) */
} cdy_graph;

/* 1 if v is an extern node (kind E: torch runs it at run time). */
static inline int cdy_value_is_extern(const cdy_value *v)
{
    return v->kind == CDY_VAL_NODE && cdy_op_table[v->op].kind == 'E';
}

/* 1 if v is a node aliasing its base (CDY_OPF_ALIAS: a torch view when realized). */
static inline int cdy_value_is_alias(const cdy_value *v)
{
    return v->kind == CDY_VAL_NODE && (cdy_op_table[v->op].flags & CDY_OPF_ALIAS);
}

/* 1 if v is a strided copy of its base (kind V, not aliasing: VIEW_COPY). */
static inline int cdy_value_is_copy(const cdy_value *v)
{
    return v->kind == CDY_VAL_NODE && v->op == CDY_OP_VIEW_COPY;
}

/* Make node v a copy (kind V, not aliasing: VIEW_COPY) whose element
 * (i_0, ..) is element off + sum_d i_d * strides[d] of value base's buffer. */
static inline void cdy_value_set_copy(cdy_value *v, int base, const int64_t *strides,
                                      int64_t off)
{
    v->op = CDY_OP_VIEW_COPY;
    v->view_base = base;
    v->view_offset = off;
    for (int d = 0; d < CDY_MAX_NDIM; d++)
        v->view_strides[d] = strides[d];
}

/* Make node v a view (kind V, aliasing: VIEW) of value base (never a VIEW
 * node) whose element (i_0, ..) is element off + sum_d i_d * strides[d]. */
static inline void cdy_value_set_view(cdy_value *v, int base, const int64_t *strides,
                                      int64_t off)
{
    cdy_value_set_copy(v, base, strides, off);
    v->op = CDY_OP_VIEW;
}

/* Make node v an extern node over the tensors args[0..n), computing in cdt. */
static inline void cdy_value_set_extern(cdy_value *v, const int *args, int n, int cdt)
{
    v->op = CDY_OP_EXTERN;
    v->nargs = n;
    for (int a = 0; a < n; a++)
        v->args[a] = args[a];
    v->compute_dtype = cdt;
}

/* ---- compiler: graph -> C source -> shared object ---------------------------
 * A kernel is a typed C function with one pointer parameter per buffer it
 * touches, e.g. `void kernel_0(const float *in_ptr0, float *out_ptr0)`.
 * Each parameter is a buffer of the plan.                                    */
#define CDY_MAX_KARGS 64
#define CDY_ERR_VALUE_SHIFT 32

typedef struct {
    char symbol[48];        /* function name in the shared object */
    int nargs;
    int args[CDY_MAX_KARGS]; /* buffer numbers (see cdy_plan) */
    int status;             /* 1: `int f(<args>, int64_t *err)`, nonzero: an index was
                             * out of range, err[1..3] index, size, code (gather.c);
                             * code >> CDY_ERR_VALUE_SHIFT: the graph value that failed */
} cdy_kernel_desc;

/* A step of a plan: run kernel `index`, or call extern node `index` (a
 * graph value) through torch, which produces buffer `out_buffer`.           */
typedef enum { CDY_STEP_KERNEL, CDY_STEP_EXTERN } cdy_step_kind;
typedef struct {
    int kind;
    int index;
    int out_buffer;
} cdy_step;

/* ---- the kernel IR's summary: what scheduling decided, per step ------------
 * The compiler's kernel IR (compiler/kir.h) summed up in the plan for tests
 * and tools (cdy_plan.kir; compiled graphs' kernel_ir): per step of the
 * schedule its kind, what a kernel computes and stores, its loops and its
 * decisions.  X(ENUM, name). */
#define CDY_KIR_KINDS(X)                                                     \
    X(POINTWISE, "pointwise") /* one loop nest: loads, fused nodes, stores (a piece of a \
                               * cat / stack / pad: its window) */             \
    X(CAT, "cat")             /* plain cat / stack pieces copied by one kernel */ \
    X(PAD_FILL, "pad_fill")   /* the border of a constant pad */                \
    X(REDUCE, "reduce")       /* a reduction (its pointwise prologue fused) */  \
    X(ROWS, "rows")           /* softmax / layer / group norm rows (+ epilogue) */ \
    X(WINDOW, "window")       /* pooling / upsample windows */                  \
    X(EXTERN, "extern")       /* a step torch runs: an extern node */           \
    X(VIEW, "view")           /* a step torch runs: a realized view */          \
    X(PAIRED, "paired")       /* no step: a reduction the next kernel computes */ \
    X(PIECES, "pieces")       /* no step: a cat / stack written by a kernel per piece */

typedef enum {
#define CDY_X(e, n) CDY_KIR_##e,
    CDY_KIR_KINDS(CDY_X)
#undef CDY_X
    CDY_KIR_COUNT
} cdy_kir_kind;

extern const char *const cdy_kir_kind_names[CDY_KIR_COUNT];

/* Flags of a step's decisions. */
enum {
    CDY_KIRF_TWO_PASS = 1 << 0,    /* reduce: a second pass over the reduced loops */
    CDY_KIRF_BLOCKS = 1 << 1,      /* reduce: an outer reduction, its last outer loop in blocks */
    CDY_KIRF_COLUMNS = 1 << 2,     /* rows: column mode (the row is not innermost in memory) */
    CDY_KIRF_UNSTORED = 1 << 3,    /* rows: the row op's result is not stored (only its
                                    * fused epilogue reads it) */
    CDY_KIRF_COPY_UNITS = 1 << 4,  /* pointwise: a plain copy reversing small units */
    CDY_KIRF_COPY_ROWS = 1 << 5,   /* pointwise: a plain copy, a memcpy a row */
    CDY_KIRF_LANES = 1 << 6,       /* reduce / rows: sums in independent partial lanes */
    CDY_KIRF_PREFETCH = 1 << 7,    /* reduce / rows: loads of the next row prefetched */
    CDY_KIRF_ROW_SPLIT = 1 << 8,   /* reduce: a column sum's rows split across the threads */
};

typedef struct {
    int kind;                /* cdy_kir_kind */
    int kernel;              /* kernel_<kernel>, or -1 (no kernel) */
    int node;                /* the special / extern / view node, or -1 (pointwise) */
    int piece;               /* a cat / stack / pad piece written into its window, or -1 */
    int ndim;                /* the iteration space */
    int64_t sizes[CDY_MAX_NDIM];
    int nloops;              /* the loops after ordering and coalescing (a reduce / rows /
                              * window kernel: its outer loops) */
    int64_t loops[CDY_MAX_NDIM];
    int nrloops;             /* reduce / rows: the reduced (row) loops */
    int64_t rloops[CDY_MAX_NDIM];
    int nout;                /* the values stored */
    const int *outs;
    int nfused;              /* the nodes computed per element, graph order */
    const int *fused;
    int nparams;             /* pointer parameters */
    int parallel;            /* the outer loop(s) run on several threads */
    int threads;             /* their team: 0 all (NTHREADS), else that many */
    int collapse;            /* the parallel loop collapses two loops */
    int vector;              /* the innermost loop vectorizes */
    int stream;              /* the stores are non-temporal */
    int status;              /* the kernel checks gathered indices (an int status) */
    unsigned flags;          /* CDY_KIRF_* */
    const char *serial;      /* pointwise, not parallel: why (static text), else NULL */
} cdy_kir;

/* A plan says how the runtime executes a compiled graph: its steps in order.
 * Buffers 0..ninputs-1 are the inputs; extern steps produce theirs; the
 * others (kernel outputs: graph outputs and values an extern reads) are
 * allocated per call with the meta given (buffer_alloc[b] = 1), except
 * those no kernel reads or writes (buffer_alloc[b] = CDY_BUF_UNUSED: a row
 * kernel's result that only its fused epilogue uses), passed as NULL.     */
#define CDY_BUF_UNUSED 2
typedef struct {
    int ninputs;
    int nbuffers;
    cdy_meta *buffers;       /* nbuffers entries; inputs' meta too */
    int nkernels;
    cdy_kernel_desc *kernels;
    int noutputs;
    int *outputs;            /* buffer numbers returned */
    char *source;            /* the generated C (malloc'd) */
    int nthreads;            /* OpenMP threads the source was generated for */
    int nsteps;
    cdy_step *steps;
    int nvalues;
    int *value_buffer;       /* graph value -> buffer number, or -1 */
    char *buffer_alloc;      /* per buffer: 1 if the runtime allocates it, CDY_BUF_UNUSED */
    int *buffer_share;       /* per buffer: an input buffer of the pointwise kernel writing
                              * it, read there at the same addresses, that no later step
                              * touches: the runtime may give both one tensor; else -1
                              * (compiler/share.c; NULL: none) */
    char *ir_pre;            /* loop IR before fusion: one loop per graph node (malloc'd) */
    char *ir_post;           /* per kernel: loops, fused nodes, loads/stores, vectorized and
                              * parallel or not and why, fusion decisions (malloc'd) */
    int nkir;                /* the kernel IR's summary: per step of the schedule (malloc'd; */
    cdy_kir *kir;            /* outs and fused point into kir_values) */
    int *kir_values;
} cdy_plan;

/* Lower `g` to C for `nthreads` OpenMP threads; kernels moving more than
 * stream_bytes bytes write their outputs with non-temporal stores (0: never;
 * see compiler/stream.c).  Fills *plan (free with cdy_plan_free).
 * Returns 0, or -1 with a message in err. */
int cdy_codegen(const cdy_graph *g, int nthreads, int64_t stream_bytes, cdy_plan *plan,
                char *err, size_t errlen);
/* cdy_codegen with runtime sizes (issue 32): sym (sym/sym.h, g's symbolic
 * shapes from cdy_sym_infer; NULL: cdy_codegen) makes every kernel take the
 * symbols' values as `const int64_t *cdy_s` last and compute its loop sizes
 * and strides from them (compiler/symk.c); the plan's buffer metas are the
 * example's (the runtime evaluates sym->dims per call).  -1 with err
 * "symbolic sizes: <why>" when a step cannot take runtime sizes: the caller
 * then compiles with cdy_codegen (the static sizes). */
struct cdy_sym_shapes_s;
int cdy_codegen_sym(const cdy_graph *g, int nthreads, int64_t stream_bytes,
                    struct cdy_sym_shapes_s *sym, cdy_plan *plan, char *err, size_t errlen);
/* The default stream_bytes: 3/4 of the largest cache of CPU 0 (sysfs), 0 when
 * unknown or not on x86-64. */
int64_t cdy_stream_auto_bytes(void);
void cdy_plan_free(cdy_plan *plan);
/* The text every generated source starts with (the same for the life of the
 * process: types, libm, macros); NULL when memory is short. */
const char *cdy_codegen_prefix(void);

typedef struct {
    const char *cc;          /* compiler command, e.g. "gcc" */
    const char *cache_dir;   /* directory for the .so files */
    const char *extra_flags; /* appended to the command line (may be NULL) */
    const char *prefix;      /* what every source starts with (cdy_codegen_prefix), for
                                a standby compiler to parse ahead; NULL: no standby */
} cdy_cc_opts;

/* The line codegen puts before each kernel's text (its helpers, comment and
 * function): what precedes the first one is the file's prologue, which every
 * kernel needs.  cdy_cc_build may compile the kernels in several parts at once,
 * each the prologue plus whole kernels, cut at these lines. */
#define CDY_CC_KERNEL_MARK "/* -- kernel -- */\n"

/* Compile `source` to a shared object in the cache (or find it there).
 * On success writes the .so path into so_path, sets *disk_hit to 1 when the
 * file was already cached, 2 when a standby compiler built it (cc.c), else
 * 0, and returns 0; else -1 with a message in err.                        */
int cdy_cc_build(const char *source, const cdy_cc_opts *opts, char *so_path,
                 size_t so_path_len, int *disk_hit, char *err, size_t errlen);

/* Start a standby compiler for the next build under opts (see cc.c), unless
 * one is ready; without opts->prefix, close the one there is. */
void cdy_cc_standby(const cdy_cc_opts *opts);

/* Declarations that rename a kernel's libc and libm calls to the current
 * version of each function (-nostdlib would bind the oldest; see cc.c), for
 * the top of every generated file; "" on a C library needing none. */
const char *cdy_cc_renames(void);

/* The calling thread's OpenMP thread count (omp_get_max_threads of the
 * runtime the kernels use: torch's, which torch.set_num_threads sets);
 * -1 when no OpenMP runtime is loaded. */
int cdy_cc_max_threads(void);

/* ---- arena: memory for one compilation, freed in one call ------------------ */
typedef struct cdy_arena_block cdy_arena_block;
typedef struct {
    cdy_arena_block *head;
} cdy_arena;

void *cdy_arena_alloc(cdy_arena *a, size_t n);     /* zeroed; NULL on OOM */
char *cdy_arena_strdup(cdy_arena *a, const char *s);
void cdy_arena_free(cdy_arena *a);

/* ---- growable string buffer (compiler output, logs) ---------------------- */
typedef struct {
    char *data;
    size_t len, cap;
    int oom;
} cdy_buf;

void cdy_buf_printf(cdy_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void cdy_buf_puts(cdy_buf *b, const char *s);
char *cdy_buf_take(cdy_buf *b);   /* returns data (malloc'd), resets b */
void cdy_buf_free(cdy_buf *b);

/* ---- asserts -----------------------------------------------------------------
 * CDY_ASSERT(cond, msg): a check of an invariant.  Debug builds
 * (CDYNAMO_DEBUG_BUILD=1) print file:line, msg and the condition, then abort;
 * release builds compile it out.  Where going on past a broken invariant
 * could crash, the code also handles it: in the tracer with CDY_TR_CHECK
 * (trace/trace.h), an INTERNAL stop in release builds. */
#ifdef CDY_DEBUG_BUILD
#include <stdio.h>
#include <stdlib.h>
static inline void cdy_assert_fail(const char *file, int line, const char *msg, const char *cond)
{
    fprintf(stderr, "cdynamo: assertion failed at %s:%d: %s (%s)\n", file, line, msg, cond);
    abort();
}
#define CDY_ASSERT(c, msg) ((c) ? (void)0 : cdy_assert_fail(__FILE__, __LINE__, msg, #c))
#else
#define CDY_ASSERT(c, msg) ((void)0)
#endif

/* ---- stage-boundary checks (common/check.c) ----------------------------------
 * A traced graph's values are in topological order with valid ops, ranks,
 * dtypes, inputs and outputs; a plan's kernels, steps and outputs name
 * buffers it has.  0, or -1 with the first fault in err. */
int cdy_graph_check(const cdy_graph *g, char *err, size_t errlen);
int cdy_plan_check(const cdy_plan *p, char *err, size_t errlen);

#endif /* CDYNAMO_H */
