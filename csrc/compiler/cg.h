/* cg.h - the compiler's internal interface, shared by codegen.c (checks,
 * buffers, pointwise fusion, the driver), reduce.c and the other files of
 * node kinds that get kernels of their own, and mathlib.c.  The kernel IR
 * the passes share is kir.h's.
 *
 * A "special" node kind (CG_SPECIAL_KINDS) is a fusion boundary: the values
 * it reads are realized first (segments of pointwise kernels end before it),
 * its result is a buffer, and its scheduler makes the kernel(s) computing it.
 * A kernel may fuse the pointwise producers of its input (see reduce.c:
 * cg_mark_live + cg_operands at scheduling, cg_emit_node at emission
 * recompute them per element). */
#ifndef CDY_CG_H
#define CDY_CG_H

#include <stdint.h>

#include "cdynamo.h"
#include "compiler/kir.h"
#include "sym/sym.h"

/* Work below this many elements runs on one thread. */
#define CG_PARALLEL_NUMEL 32768
/* A pointwise kernel of at most CG_PARALLEL_CHEAP_OPS ops (neg, add, a copy)
 * also needs this many bytes loaded and stored to go parallel: the OpenMP
 * fork and join (about 0.7 us on 2 threads) costs more than it saves below
 * it (measured: uint8 neg/maximum of 64K elements are faster on 1 thread,
 * of 128K on 2; float32 ones break even at 32K elements, 256 KB). */
#define CG_PARALLEL_BYTES (256 * 1024)
#define CG_PARALLEL_CHEAP_OPS 2
/* Every parallel kernel runs on the whole team (NTHREADS), never a smaller one:
 * libgomp ends the pool threads a smaller team leaves out, and torch's next
 * parallel op (a linear, at the full team) creates them again.  A cheap kernel
 * on a team cut to its bytes (5 of 16 threads) between two linears cost ~750 us
 * a call on 16 Sapphire Rapids cores, where one cut-free team costs ~1-2 us
 * more than the cut one (docs/bench/device-2026-11-28). */
/* Elements per OpenMP chunk of a flat 1-D loop. */
#define CG_BLOCK 4096
/* Bytes of a streaming kernel's L1 blocks of outputs, at most (stream.c). */
#define CG_STREAM_STAGE 8192
/* A nest's innermost loop streams only if it stores at least this many bytes
 * of each output per pass (shorter, most of each store is a ragged end). */
#define CG_STREAM_ROW 256
typedef struct {
    const cdy_graph *g;
    int nthreads;
    cdy_arena arena;
    cdy_buf src;
    char *err;
    size_t errlen;
    int *val_buf;                    /* value -> plan buffer, -1 if none */
    char *live;                      /* value -> needed by the current kernel */
    int *param;                      /* plan buffer -> parameter of the current kernel */
    char *in_group;                  /* value -> output of the current kernel */
    cdy_buf ir_pre, ir_post;         /* IR dumps (see cdy_plan.ir_pre / ir_post) */
    int *val_nk;                     /* value -> number of kernels computing it */
    int *val_k0;                     /* value -> first kernel computing it */
    cdy_buf ir_dec;                  /* fusion decisions, appended to ir_post at the end */
    int nbuffers;                    /* the plan's buffer count */
    int cap_steps;                   /* capacity of plan->steps (and plan->kernels) */
    char *done;                      /* value -> stored by a special kernel's epilogue */
    int *red_prod;                   /* reduction value -> the pointwise value its kernel also
                                      * computes and stores (reduce.c cg_red_pick_producers),
                                      * or -1 */
    int *vparam;                     /* view value -> its load parameter in the current kernel */
    const cg_nest *nest;             /* the current pointwise kernel's nest (index operands) */
    int64_t stream_bytes;            /* kernels moving more bytes stream their stores; 0: never */
    cdy_plan *plan;                  /* the plan being filled */
    kir_program prog;                /* the kernel IR (kir.h): the schedule's steps */
    int nkernels;                    /* kernels scheduled so far */
    int nplan_steps;                 /* plan steps scheduled so far (kernels, externs, views) */
    const kir_kernel *kern;          /* the kernel being emitted */
    cdy_sym_shapes *sym;             /* symbolic sizes of g's values (issue 32), or NULL:
                                      * every size a literal (symk.c) */
    int sym_cat_dim, sym_cat_start;  /* symbolic sizes: the cat piece being scheduled's dim
                                      * and its start's expression (cg_sym_cat_start) */
    int *gsym;                       /* symbolic sizes: per gather value CG_GSYM ints, its
                                      * indexed sizes then strides as expressions (-1: the
                                      * literal; symk.c), or NULL */
} cg_ctx;
#define CG_GSYM 8

/* ---- special node kinds: X(op kind char, check fn, schedule fn) ----------
 * check: 0, or -1 with a message (cg_fail).  schedule: the kernels of node v,
 * appended to the program (cg_kir_add); 0 or -1.  Each kernel kind has an
 * emitter and a printer (KIR_KINDS). */
int cg_check_reduce(cg_ctx *c, int v);
int cg_sched_reduce(cg_ctx *c, int v);
/* Before the schedule: give each column sum whose input is a realized pointwise
 * value read by nothing else before it that value's computation and store
 * (c->red_prod, the value marked c->done); 0 or -1. */
int cg_red_pick_producers(cg_ctx *c);
/* The column sum cat node v's kernel may compute (views.c): a float sum of v's
 * contiguous result (or a dense reshape of it) over its first *rows dims, set;
 * -1 if none. */
int cg_red_cat_sum(const cg_ctx *c, int v, int *rows);
int cg_check_rows(cg_ctx *c, int v);
int cg_sched_rows(cg_ctx *c, int v);
int cg_check_cat(cg_ctx *c, int v);
int cg_sched_cat(cg_ctx *c, int v);
int cg_check_pool(cg_ctx *c, int v);
int cg_sched_pool(cg_ctx *c, int v);

#define CG_SPECIAL_KINDS(X)                                                  \
    X('R', cg_check_reduce, cg_sched_reduce)                                 \
    X('N', cg_check_rows, cg_sched_rows)                                     \
    X('K', cg_check_cat, cg_sched_cat)                                       \
    X('W', cg_check_pool, cg_sched_pool)

/* ---- kernel kinds: X(kir_kind, emit fn, print fn) ------------------------
 * emit: the C of kernel k (its record's decisions); 0 or -1.  print: its
 * lines of the post-fusion IR into c->ir_post (decisions into c->ir_dec). */
int cg_emit_pointwise(cg_ctx *c, const kir_kernel *k);
void cg_print_pointwise(cg_ctx *c, const kir_kernel *k);
int cg_emit_cat_kernel(cg_ctx *c, const kir_kernel *k);
void cg_print_cat_kernel(cg_ctx *c, const kir_kernel *k);
int cg_emit_pad_fill(cg_ctx *c, const kir_kernel *k);
void cg_print_pad_fill(cg_ctx *c, const kir_kernel *k);
int cg_emit_reduce(cg_ctx *c, const kir_kernel *k);
void cg_print_reduce(cg_ctx *c, const kir_kernel *k);
int cg_emit_rows(cg_ctx *c, const kir_kernel *k);
void cg_print_rows(cg_ctx *c, const kir_kernel *k);
int cg_emit_pool(cg_ctx *c, const kir_kernel *k);
void cg_print_pool(cg_ctx *c, const kir_kernel *k);

#define KIR_KINDS(X)                                                         \
    X(CDY_KIR_POINTWISE, cg_emit_pointwise, cg_print_pointwise)                  \
    X(CDY_KIR_CAT, cg_emit_cat_kernel, cg_print_cat_kernel)                      \
    X(CDY_KIR_PAD_FILL, cg_emit_pad_fill, cg_print_pad_fill)                     \
    X(CDY_KIR_REDUCE, cg_emit_reduce, cg_print_reduce)                           \
    X(CDY_KIR_ROWS, cg_emit_rows, cg_print_rows)                                 \
    X(CDY_KIR_WINDOW, cg_emit_pool, cg_print_pool)

/* The next record of the program, of kind `kind` (zeroed but for kind,
 * number -1, node / piece / sep_from -1), or NULL with a message. */
kir_kernel *cg_kir_add(cg_ctx *c, int kind);
/* The next kernel's number (its plan step has room), or -1 with a message. */
int cg_kernel_begin(cg_ctx *c);
/* Record in k the nodes the current live set computes (c->live, not leaves);
 * 0 or -1 (out of memory). */
int cg_kir_fuse(cg_ctx *c, kir_kernel *k);
/* Schedule the pointwise kernel of group grp (cg_operands, nest, decisions):
 * its record, or NULL with a message. */
kir_kernel *cg_sched_pointwise(cg_ctx *c, const cg_group *grp);
/* Decide how kernel k's pointwise loops run (parallel, threads, collapse,
 * vector, stream, status; a plain copy's rows): from its ops, nest, numel. */
void cg_sched_loops(cg_ctx *c, kir_kernel *k);

/* ---- views.c: kind 'V' nodes (VIEW, VIEW_COPY) --------------------------
 * An unrealized view read by a kernel is a load of its base's buffer with its
 * own strides and offset (a parameter of its own); a realized VIEW is an
 * extern step (torch makes the view of its realized args); a realized
 * VIEW_COPY is a kernel output. */
int cg_is_view(const cdy_graph *g, int v);
int cg_view_is_alias(const cdy_graph *g, int v);
/* Make copy node v (VIEW_COPY) an aliasing VIEW of its base. */
void cg_view_make_alias(cdy_graph *g, int v);
/* 1 if b is a tensor value earlier than v and not an aliasing VIEW (a base
 * that kinds V and G read from its own buffer). */
int cg_base_is_earlier_tensor(const cdy_graph *g, int v, int b);
/* Lowest and highest element offsets a meta-shaped walk with strides st and
 * offset off touches, into *lo / *hi; 0 if it touches nothing (numel 0). */
int cg_view_extent(const cdy_meta *m, const int64_t *st, int64_t off, int64_t *lo, int64_t *hi);
int cg_check_view(cg_ctx *c, int v);
/* Mark what views need realized: bases of used views, args of realized VIEWs. */
void cg_view_mark_real(cg_ctx *c, char *real);
/* 1 if the values before view v (from lo) must be realized before it. */
int cg_view_boundary(cg_ctx *c, int v, int lo);
/* Fill *op: the load of view v in an iteration space of grp's rank. */
void cg_view_operand(cg_ctx *c, const cg_group *grp, int v, cg_operand *op);
/* Emit `T t<v> = x<param>;` for view v read through its load parameter. */
int cg_emit_view(cg_ctx *c, int v, int ind);
/* Decide whether pointwise kernel k is a plain copy by rows (reversing small
 * contiguous units with byte shuffles: a channels_last flip of W; or a
 * memcpy a row) and how its loops run: k->copy_*. */
void cg_view_sched_copy(cg_ctx *c, kir_kernel *k);
/* Emit the loops of such a copy (k->copy_unit or k->copy_row). */
void cg_view_emit_copy(cg_ctx *c, const kir_kernel *k);
/* Append its IR line (nothing for other kernels). */
void cg_view_print_copy(cg_ctx *c, cdy_buf *b, const kir_kernel *k);

/* ---- iota.c: kind 'I' nodes (IOTA, FILL) -------------------------------
 * An IOTA read by a pointwise kernel is an "index operand": an extra row of
 * the nest's strides (1 along its dim, 0 elsewhere) after the kernel's real
 * operands, so coalescing and reordering keep it exact; its value is the
 * sum of loop variable * stride (an induction variable GCC vectorizes).  It
 * is not a parameter.  Kernels of special kinds have no index operands: an
 * IOTA or FILL that would be fused into one is realized (a buffer) first. */
int cg_check_index(cg_ctx *c, int v);
void cg_index_mark_real(cg_ctx *c, char *real);
/* Append the live IOTA nodes of the kernel as index operands at ops[nops..);
 * their count, or -1. */
int cg_index_operands(cg_ctx *c, const cg_group *grp, cg_operand *ops, int nops);
/* Emit `T t<v> = ...;` for kind 'I' node v (IOTA: from c->nest). */
int cg_emit_index(cg_ctx *c, int v, int ind);
/* ---- gather.c: kind 'G' nodes (GATHER): a load at an index read from
 * other tensors, an operand of pointwise kernels like a view.  A kernel
 * computing one returns an int status and takes `int64_t *cdy_err` last
 * (see gather.c; cdy_kernel_desc.status). */
int cg_is_gather(const cdy_graph *g, int v);
int cg_check_gather(cg_ctx *c, int v);
/* Mark bases of gathers, and gathers a special kind's kernel would read, real. */
void cg_gather_mark_real(cg_ctx *c, char *real);
/* 1 if the values before gather v (from lo) must be realized before it. */
int cg_gather_boundary(cg_ctx *c, int v, int lo);
/* 1 if the current kernel computes a gather (status signature). */
int cg_kernel_gathers(cg_ctx *c);
/* Emit the base offset `const int64_t x<o> = ...;` of gather operand o. */
void cg_gather_emit_base(cg_ctx *c, const cg_nest *nest, int o, int ind);
/* Emit the index checks and `T t<v> = <gathered load>;` for gather node v. */
int cg_emit_gather(cg_ctx *c, int v, int ind);
/* Emit the row flags of the kernel's gathers before an inner loop, and their
 * report to the error slot after it (both nothing in other kernels). */
void cg_gather_emit_flags(cg_ctx *c, int ind);
void cg_gather_emit_report(cg_ctx *c, int ind);
/* Definition of cdy_gather_bad, written before each status kernel (guarded). */
extern const char cg_gather_helper[];

/* ---- share.c: an output written over an input that dies at its kernel ----
 * cg_share: after scheduling, pair outputs of pointwise kernels with dying
 * inputs read at the same addresses (plan->buffer_share, k->share_*); 0 or
 * -1.  cg_share_param: 1 if operand o of k is one of its pair's (no restrict). */
int cg_share(cg_ctx *c, cdy_plan *plan);
/* reduce.c: the operand of reduce kernel k storing its producer (each element
 * loaded and stored once, in one pass: cg_red_pick_producers), or -1. */
int cg_red_store_once(const kir_kernel *k);
int cg_share_param(const kir_kernel *k, int o);

/* 1 if node v of g is of a special kind. */
int cg_is_special(const cdy_graph *g, int v);
/* layout.c: channels_last strides for free nodes that read channels_last
 * data (c->g may become an arena copy); 0 or -1. */
int cg_layout(cg_ctx *c);

/* ---- shared helpers (codegen.c) ------------------------------------------ */
int cg_fail(cg_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *cg_strf(cg_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cg_check_meta(cg_ctx *c, int v, const cdy_meta *m);
int cg_is_extern(const cdy_graph *g, int v);
/* 1 if v is loaded from a buffer by the current kernel. */
int cg_is_leaf(cg_ctx *c, int v);
/* Mark the values grp's outputs depend on, down to leaves (c->live, c->in_group). */
void cg_mark_live(cg_ctx *c, const cg_group *grp);
/* Broadcast strides of m in an iteration space of rank ndim. */
void cg_broadcast_strides(const cdy_meta *m, int ndim, int64_t *out);
/* The kernel's parameters (live leaves, then grp's outputs); count or -1. */
int cg_operands(cg_ctx *c, const cg_group *grp, cg_operand *ops);
int cg_first_out(const cg_operand *ops, int nops);
/* Loop nest: size-1 dims dropped, ordered by the first output's strides, coalesced. */
void cg_build_nest(const cg_group *grp, const cg_operand *ops, int nops, cg_nest *nest);
void cg_indent(cdy_buf *b, int n);
/* Append operand o's index terms in nest ("<var><d> * stride", " + "-joined;
 * *any: a term came before, set when one is written). */
void cg_offset_terms(cdy_buf *b, const cg_nest *nest, int o, char var, int *any);
char *cg_scalar_literal(cg_ctx *c, const cdy_value *val);
char *cg_cast(cg_ctx *c, const char *e, int from, int to);
/* Low-precision storage (bfloat16 / float16): the function a load of dtype dt
 * goes through to its compute type, the one a store goes through from it;
 * "" for the dtypes stored as computed (a parenthesized expression). */
const char *cg_ld(int dt);
const char *cg_st(int dt);
/* The dtype node math runs in for compute dtype cdt: float32 for bfloat16 /
 * float16 (torch's opmath type), cdt otherwise. */
int cg_opmath(int cdt);
/* Name of value v in a kernel body: x<param> (leaf), t<v> (node), a literal. */
char *cg_value_expr(cg_ctx *c, int v);
/* Emit `T t<v> = <op expression>;` for pointwise node v. */
int cg_emit_node(cg_ctx *c, int v, int ind);
/* Emit the pointwise loop nest and body of kernel k as scheduled (parallel,
 * vectorized, streamed). */
int cg_emit_loops(cg_ctx *c, const kir_kernel *k);
/* Emit `T t<v> = <piece>;` for cat / stack node v (views.c). */
int cg_emit_cat_value(cg_ctx *c, int v, int ind);
/* Bytes numel iterations of nest load and store (operands that stay put in
 * every loop are not counted). */
int64_t cg_moved(const cg_operand *ops, int nops, const cg_nest *nest, int64_t numel);
/* Append the IR line of kernel k's streamed stores (nothing when it does not stream). */
void cg_ir_stream(cg_ctx *c, cdy_buf *b, const kir_kernel *k);
/* Emit the kernel mark, the comment naming kernel k's fused ops, its signature. */
void cg_emit_header(cg_ctx *c, const kir_kernel *k);
/* cg_emit_header's two halves: the mark and comment; the signature (part set:
 * of a static helper kernel_<number>_<part> taking the offset pointers). */
void cg_emit_mark(cg_ctx *c, const kir_kernel *k);
void cg_emit_signature(cg_ctx *c, const kir_kernel *k, const char *part);
/* cg_emit_signature with the parameters extra (", int64_t a, ...") after the others. */
void cg_emit_signature_x(cg_ctx *c, const kir_kernel *k, const char *part, const char *extra);
void cg_ir_dims(cdy_buf *b, const int64_t *a, int n);
void cg_ir_param(cdy_buf *b, const cg_operand *ops, int nops, int o);
/* List in b the nodes kernel k computes, and count them (the fusion decisions). */
void cg_ir_fuses(cg_ctx *c, cdy_buf *b, const kir_kernel *k);

/* ---- stream.c: streamed (non-temporal) stores ------------------------------
 * A kernel moving more than c->stream_bytes computes each block of its
 * outputs into an L1 buffer `cdy_st<o>` and writes it with cdy_stream; each
 * thread ends with cdy_sfence() (both in the prologue). */
/* 1 if a kernel moving `bytes` streams its stores (x86-64 only). */
int cg_streams(const cg_ctx *c, int64_t bytes);
/* Open a parallel loop at indentation ind: `#pragma omp parallel for` with
 * clauses after schedule(static), or when stream, a parallel region `{` whose
 * `omp for` is nowait (cg_stream_close). */
void cg_stream_open(cg_ctx *c, int ind, const char *nt, const char *clauses, int stream);
/* After a streaming kernel's loops: the fence, and the region's `}` when par. */
void cg_stream_close(cg_ctx *c, int ind, int par);
/* Append the IR line saying the kernel streams its stores (nothing if not). */
void cg_stream_ir(cg_ctx *c, cdy_buf *b, int64_t bytes);

/* ---- symk.c: kernels with runtime sizes (issue 32) --------------------------
 * With c->sym, a pointwise kernel's loop sizes and strides are expressions
 * over the symbols' values, which it takes as `const int64_t *cdy_s` last;
 * what symk.c cannot express fails the symbolic compile (the caller then
 * specializes: cdy_codegen_sym's contract). */
/* Fill k's nest's symbolic sizes and strides (k->nest->sym); 0, or -1 with
 * a message (what cannot take runtime sizes). */
int cg_sym_nest(cg_ctx *c, kir_kernel *k);
/* Fail (-1, "symbolic sizes: <what>") when c->sym is set, else 0. */
int cg_sym_unsupported(cg_ctx *c, const char *what);
/* 1 if values v and w have the same size expressions (always without
 * symbolic sizes): kernels group outputs equal at every size, not only at
 * the hints (a batch of 2 and a sequence length hinted 2). */
int cg_sym_same_dims(cg_ctx *c, int v, int w);
/* 1 if dim d of value v has a symbolic (non-constant) size in a symbolic compile. */
int cg_sym_dim_live(const cg_ctx *c, int v, int64_t d);
/* The text of loop d's size: n<d> or a literal (into the arena). */
const char *cg_sym_size_text(cg_ctx *c, const cg_nest *nest, int d);
/* A reduction of value `in` over dims mask (keep: keepdim) with operands
 * ops (cg_operands; outputs' strides over in's dims): the symbolic sizes and
 * strides of its outer and reduced nests (on, rn, built by cg_build_nest) and
 * the expression of its reduced count (*rnumel, -1: a constant); 0 or -1. */
int cg_sym_red_nests(cg_ctx *c, int in, int64_t mask, int keep, cg_operand *ops, int nops,
                     cg_nest *on, cg_nest *rn, int *rnumel);
/* The same for an iteration space split in outer dims and dims mask (a row
 * kernel's rows): red_outs 0, its outputs have the input's sizes. */
int cg_sym_split_nests(cg_ctx *c, int in, int64_t mask, int keep, int red_outs,
                       cg_operand *ops, int nops, cg_nest *on, cg_nest *rn, int *rnumel);
/* Expression e as parenthesized C (over s<k>), into the arena. */
const char *cg_sym_expr_text(cg_ctx *c, int e);
/* The C text of int scalar value v when it is a live symbolic expression (a
 * size added to a tensor: sym.h's sval), else NULL (its literal holds). */
const char *cg_sym_scalar_text(cg_ctx *c, int v);
/* The product of nest n's loop sizes as parenthesized C (n<d> / literals). */
const char *cg_sym_numel_text(cg_ctx *c, const cg_nest *n);
/* Symbolic k: its loops' run-time decisions (k->par_cond; no stream, no
 * memcpy copy, no collapse). */
void cg_sym_sched_loops(cg_ctx *c, kir_kernel *k);
/* 0 if a step of kind (a special kind's kernel: CDY_KIR_REDUCE, ...; EXTERN;
 * VIEW) computing value v takes runtime sizes, else -1 with the reason. */
int cg_sym_check_step(cg_ctx *c, int kind, int v);
/* 0 if every buffer with a symbolic size is contiguous (the runtime allocates
 * them so), else -1 with the reason. */
int cg_sym_check_plan(cg_ctx *c, const cdy_plan *plan);
/* The expression of piece i's start along cat / stack node v's dim (the
 * sum of the earlier pieces' sizes there; stack: i), or -1 with a message. */
int cg_sym_cat_start(cg_ctx *c, int v, int i);
/* Fill cat piece kernel k's symbolic nest: its inputs' strides, the output's
 * window (the cat's strides, offset start * stride of dim d); 0 or -1. */
int cg_sym_piece(cg_ctx *c, kir_kernel *k, int d, int start);
/* Output dim of cat / stack node val's dim pd of a piece (cat along d). */
int cg_cat_outdim(const cdy_value *val, int d, int pd);
int cg_cat_is_stack(const cdy_value *val);
int cg_cat_is_pad(const cdy_value *val);
/* Emit the symbols' and the nest's size and stride locals of kernel k. */
void cg_sym_emit_locals(cg_ctx *c, const kir_kernel *k);

/* ---- mathlib.c ------------------------------------------------------------ */
/* libm's names as compiler builtins: every generated file's, in place of <math.h>. */
extern const char cg_prologue_libm[];
/* What every generated file's helpers start with (no trapping math, FMA macros). */
extern const char cg_prologue_math[];
/* Append to out the helper functions that kernels (C text) call, each with the
 * helpers it calls, in dependency order; a file parses no helper it never uses. */
void cg_emit_helpers(cdy_buf *out, const char *kernels);

#endif /* CDY_CG_H */
