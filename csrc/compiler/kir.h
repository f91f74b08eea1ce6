/* kir.h - the kernel IR: the compiler's scheduling decisions, as data.
 *
 * cdy_codegen (codegen.c) runs three passes over a checked graph:
 *   schedule  cg_schedule: the realized values get buffers, and the graph is
 *             cut into steps, in order: kernels (what each computes per
 *             element, its parameters with their strides, its loop nests,
 *             whether it runs in parallel and on how many threads, whether
 *             its innermost loop vectorizes and its stores stream) and the
 *             steps torch runs (externs, realized views).  Each kind of
 *             kernel has its scheduler (cg_sched_<kind>), which fills a
 *             kir_kernel and, for the special kinds, a record of its own (x:
 *             a reduction's variant and passes, a row kernel's mode and
 *             epilogue, a window's loop order...).
 *   print     cg_ir_print: ir_pre (the graph, a loop per node) and ir_post
 *             (the program: per kernel its loops, what it fuses, its loads and
 *             stores, its decisions and why; the fusion decisions) are
 *             printers of the graph and of the program.
 *   emit      cg_emit: per step, its kind's emitter writes the C of the
 *             kernel from its record (and decides nothing), and the plan's
 *             kernels and steps follow the program.
 * The plan carries a summary of the program (cdy_plan.kir, cdynamo.h) for
 * tests and tools, which read the decisions as data.
 *
 * Sizes are numbers here and literals in the C (a graph is specialized to its
 * inputs' sizes), unless the graph compiles with symbolic sizes (issue 32,
 * symk.c): then the numbers are the example's, the nests carry each loop's
 * size and each operand's stride as an expression (cg_nest.sym), which the
 * emitters print as locals computed from the kernel's `cdy_s` parameter,
 * and the decisions that read sizes are conditions evaluated per call
 * (kir_kernel.par_cond).  A load or store moves its
 * operand's dtype (cg_operand.dtype), converted to and from the compute dtype
 * of the node that reads it; bfloat16 / float16 (issue 33) load and store
 * through cg_ld / cg_st (codegen.c), computed in float32.  The emitters decide nothing: every
 * choice of how loops run (parallel, team, collapse, vector, stream) is a
 * field of the kernel's record. */
#ifndef CDY_KIR_H
#define CDY_KIR_H

#include <stdint.h>

#include "cdynamo.h"

/* Operands of one kernel, at most. */
#define CG_MAX_OPS CDY_MAX_KARGS

/* One pointer parameter of a kernel: a graph input or an output node. */
typedef struct {
    int buffer;                      /* plan buffer number (-1: an index operand, no pointer) */
    int is_out;
    int value;                       /* value number (outputs; first user for inputs) */
    int dtype;                       /* cdy_dtype of its elements in memory: what a load reads
                                      * and a store writes (the emitters' one source for it) */
    int64_t stride[CDY_MAX_NDIM];    /* per iteration dim, broadcast applied */
    int64_t offset;                  /* elements added to the pointer (view loads) */
    int sym_off;                     /* symbolic sizes: 1 + the expression id of the offset
                                      * (a cat piece's window), or 0: `offset` holds */
} cg_operand;

/* The loop nest of a kernel after ordering and coalescing, outer first. */
typedef struct {
    int ndim;
    int64_t size[CDY_MAX_NDIM];
    int64_t stride[CG_MAX_OPS][CDY_MAX_NDIM];
    unsigned gmask[CDY_MAX_NDIM];    /* the iteration-space dims each loop walks, a bit each */
    /* symbolic sizes (issue 32; symk.c), sym set: the expression ids (cdy_symtab) of each
     * loop's size and each operand's stride, or -1 where the number above holds for
     * every size; the emitters print a non-constant one as n<d> / st<o>_<d> */
    int sym;
    const char *pfx;                 /* the locals' names: n<pfx><d>, st<pfx><o>_<d> (NULL: "";
                                      * a reduce / rows kernel's row nest: "r") */
    int ssize[CDY_MAX_NDIM];
    int sstride[CG_MAX_OPS][CDY_MAX_NDIM];
} cg_nest;

/* A group of output nodes sharing one iteration space. */
typedef struct {
    int ndim;
    const int64_t *sizes;
    int nout;
    int *outs;                       /* value numbers */
} cg_group;

/* The kinds of steps: cdynamo.h's CDY_KIR_KINDS (cdy_kir_kind). */
typedef int kir_kind;

typedef struct {
    int kind;                    /* cdy_kir_kind */
    int number;                  /* kernel_<number>; -1 for steps that are not kernels */
    int node;                    /* the special / extern / view node, or -1 (pointwise) */
    int piece;                   /* CDY_KIR_POINTWISE of a cat / stack / pad: the piece, or -1 */
    cg_group grp;                /* iteration space and the values stored */
    int nfused;                  /* the nodes computed per element, in graph order */
    int *fused;
    int nops;                    /* parameters: loads, then stores */
    int nidx;                    /* index operands after them (IOTA: no parameter) */
    cg_operand *ops;
    cg_nest *nest;               /* the loops (of a reduce / rows / window kernel: the outer
                                  * loops; its record x has the rest) */
    int64_t numel;               /* iterations of the iteration space */
    /* decisions */
    int parallel;                /* the outer loop(s) run on several threads */
    const char *serial;          /* why not, when not (text of the IR dump) */
    const char *threads;         /* num_threads: "NTHREADS" (the whole team, cg.h), "1" serial */
    int collapse;                /* the parallel loop collapses the two outer loops */
    int vector;                  /* the innermost loop vectorizes (unit or zero strides) */
    int stream;                  /* stores are streamed (non-temporal, stream.c) */
    int64_t moved;               /* bytes loaded and stored (the parallel and stream rules) */
    int status;                  /* returns an int status: a gather checks its indices */
    int copy_unit;               /* a plain copy reversing units of this many bytes, or 0 */
    int64_t copy_row;            /* a plain copy of rows of this many bytes (memcpy), or 0 */
    int copy_parallel;           /* the copy's own parallel decision, its team, collapse */
    const char *copy_threads;
    int copy_collapse;
    int sep_from;                /* a pointwise kernel kept apart from kernel sep_from (its
                                  * iteration space differs), or -1 */
    const cg_group *sep_grp;     /* that kernel's group */
    const cg_nest *rnest;        /* a reduce / rows kernel's reduced (row) loops */
    unsigned flags;              /* CDY_KIRF_* */
    int share_out, share_in;     /* ops: an output written over an input that dies here
                                  * (share.c; the pair's pointers are not restrict), or -1 */
    const char *par_cond;        /* symbolic sizes: the C condition (over n<d>) under which
                                  * the loops run parallel, decided per call; else NULL */
    void *x;                     /* the kind's own record (cg_red_kernel, cg_rowk, ...) */
} kir_kernel;

/* The program: the steps of a plan, in order. */
typedef struct {
    int n, cap;
    kir_kernel *k;
} kir_program;

#endif /* CDY_KIR_H */
