/* rows.c - row nodes (kind 'N': softmax, log_softmax, layer_norm,
 * group_norm, softmax's and layer_norm's input gradients, layer_norm's
 * grad * xhat): one kernel each, but grad * xhat joins the kernel of its
 * layer_norm input gradient (cg_row_sibling), and the sums over the rows of
 * grad * xhat and of grad (the weight's and bias's gradients) join that
 * kernel too (cg_row_pick_sums, cg_row_emit_summed).  The input's dims
 * split into outer dims (the rows, parallel when large) and row dims; per
 * row a few passes over the row dims, each recomputing the input's pointwise
 * prologue inline from leaves (as reduce.c does) and accumulating
 * (CG_ROW_FLOAT_ACC; long rows' sums in lanes, cg_row_sum), then a final
 * pass writing the row, which also computes
 * the pointwise consumers of the result (the epilogue, cg_row_epilogue).
 * Softmax over a dim that is not innermost in memory runs in column mode
 * (cg_row_columns). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/cg.h"

/* float32 rows up to this long accumulate in float (one partial sum per
 * SIMD lane, as ATen's vectorized sums); longer ones, and float64, in double. */
#define CG_ROW_FLOAT_ACC 8192
/* At most this many realized pointwise consumers join a row kernel's epilogue. */
#define CG_ROW_EPI 8
/* At most this many column sums join a row kernel (cg_row_pick_sums). */
#define CG_ROW_NSUM 3
/* Column mode: columns per block (see cg_row_columns). */
#define CG_ROW_COLS 64

/* The shape of a row kernel: its iteration space (group_norm splits the
 * channel dim into groups x channels per group) and which dims are rows. */
typedef struct {
    int ndim;
    int64_t size[CDY_MAX_NDIM];
    int row[CDY_MAX_NDIM];       /* 1: dim is inside a row (reduced) */
    int64_t nrow;                /* elements per row */
    int64_t numel;
} cg_rowshape;

/* 1 if value a is a tensor (not an absent-argument SCALAR). */
static int cg_row_tensor(const cdy_graph *g, int a)
{
    return g->values[a].kind != CDY_VAL_SCALAR;
}

/* 1 if row node v is a layer_norm, its input gradient or its grad * xhat
 * (their weight, bias and grad index as the input does, broadcast). */
static int cg_row_ln(const cdy_graph *g, int v)
{
    int op = g->values[v].op;
    return op == CDY_OP_LAYER_NORM || op == CDY_OP_LAYER_NORM_BW || op == CDY_OP_LAYER_NORM_GX;
}

/* 1 if node u is the grad * xhat (LAYER_NORM_GX) of layer_norm input
 * gradient node v's input, grad, eps and rows: v's kernel computes it. */
static int cg_row_sibling(const cdy_graph *g, int v, int u)
{
    const cdy_value *a = &g->values[v], *b = &g->values[u];
    return a->op == CDY_OP_LAYER_NORM_BW && b->kind == CDY_VAL_NODE &&
           b->op == CDY_OP_LAYER_NORM_GX && a->args[0] == b->args[0] && a->args[2] == b->args[2] &&
           g->values[a->args[3]].f == g->values[b->args[3]].f &&
           g->values[a->args[4]].i == g->values[b->args[4]].i;
}

/* Check an optional weight/bias arg a of norm node v over trailing sizes
 * sz[0..n) (the channel count for group_norm): a SCALAR or a tensor of those
 * sizes and the input's dtype; 0 or -1. */
static int cg_check_affine(cg_ctx *c, int v, int a, const int64_t *sz, int n)
{
    const cdy_value *w = &c->g->values[a];
    const char *name = cdy_op_table[c->g->values[v].op].name;
    if (w->kind == CDY_VAL_SCALAR)
        return 0;
    if (w->meta.dtype != c->g->values[v].meta.dtype || w->meta.ndim != n)
        return cg_fail(c, "value %d (%s): weight/bias dtype or rank mismatch", v, name);
    for (int d = 0; d < n; d++)
        if (w->meta.sizes[d] != sz[d])
            return cg_fail(c, "value %d (%s): weight/bias sizes mismatch", v, name);
    if (!cg_row_ln(c->g, v) && w->kind == CDY_VAL_NODE &&
        !cg_is_extern(c->g, a) && !cg_is_special(c->g, a))
        return cg_fail(c, "value %d (%s): weight/bias must be realized", v, name);
    return 0;
}

/* Check gradient node v's (softmax's or layer_norm's) grad arg a: a tensor
 * of the input's sizes and dtype; 0 or -1. */
static int cg_check_grad(cg_ctx *c, int v, int a)
{
    const cdy_value *gv = &c->g->values[a], *in = &c->g->values[c->g->values[v].args[0]];
    if (gv->kind == CDY_VAL_SCALAR || gv->meta.dtype != in->meta.dtype ||
        gv->meta.ndim != in->meta.ndim ||
        memcmp(gv->meta.sizes, in->meta.sizes, sizeof(int64_t) * (size_t)in->meta.ndim))
        return cg_fail(c, "value %d (%s): grad is not a tensor of the input's sizes and dtype",
                       v, cdy_op_table[c->g->values[v].op].name);
    return 0;
}

/* Check the op-specific SCALAR params of row node v (dims, eps, groups). */
static int cg_check_row_params(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    const cdy_meta *im = &c->g->values[val->args[0]].meta;
    const char *name = cdy_op_table[val->op].name;
    int last = val->nargs - 1;
    const cdy_value *p = &c->g->values[val->args[last]];
    if (p->kind != CDY_VAL_SCALAR || cdy_dtype_table[p->meta.dtype].is_float)
        return cg_fail(c, "value %d (%s): last arg must be an int", v, name);
    if (val->op == CDY_OP_SOFTMAX || val->op == CDY_OP_LOG_SOFTMAX || val->op == CDY_OP_SOFTMAX_BW) {
        if (p->i < 0 || p->i >= im->ndim)
            return cg_fail(c, "value %d (%s): bad dim %lld of %d dims", v, name, (long long)p->i,
                           im->ndim);
        return val->op == CDY_OP_SOFTMAX_BW ? cg_check_grad(c, v, val->args[1]) : 0;
    }
    const cdy_value *eps = &c->g->values[val->args[3]];
    if (eps->kind != CDY_VAL_SCALAR || eps->meta.dtype != CDY_DT_FLOAT64)
        return cg_fail(c, "value %d (%s): eps must be a float", v, name);
    if (cg_row_ln(c->g, v)) {
        if (p->i < 0 || p->i > im->ndim)
            return cg_fail(c, "value %d (%s): bad normalized rank", v, name);
        const int64_t *tail = im->sizes + (im->ndim - p->i);
        if (val->op == CDY_OP_LAYER_NORM_BW || val->op == CDY_OP_LAYER_NORM_GX)
            return cg_check_affine(c, v, val->args[1], tail, (int)p->i) ||
                   cg_check_grad(c, v, val->args[2]);
        return cg_check_affine(c, v, val->args[1], tail, (int)p->i) ||
               cg_check_affine(c, v, val->args[2], tail, (int)p->i);
    }
    if (im->ndim < 2 || im->ndim >= CDY_MAX_NDIM || p->i <= 0 || im->sizes[1] % p->i)
        return cg_fail(c, "value %d (%s): bad groups or rank", v, name);
    return cg_check_affine(c, v, val->args[1], &im->sizes[1], 1) ||
           cg_check_affine(c, v, val->args[2], &im->sizes[1], 1);
}

/* Check row node v: a float32/float64 tensor input, a result of its sizes
 * and dtype, the op's params in range. */
int cg_check_rows(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    const char *name = cdy_op_table[val->op].name;
    const cdy_value *in = &c->g->values[val->args[0]];
    const cdy_meta *im = &in->meta, *om = &val->meta;
    if (in->kind == CDY_VAL_SCALAR || im->ndim != om->ndim || im->dtype != om->dtype ||
        (om->dtype != CDY_DT_FLOAT32 && om->dtype != CDY_DT_FLOAT64 && !cdy_dtype_lowp(om->dtype)))
        return cg_fail(c, "value %d (%s): input must be a float tensor of the result's dtype",
                       v, name);
    for (int d = 0; d < im->ndim; d++)
        if (im->sizes[d] != om->sizes[d])
            return cg_fail(c, "value %d (%s): result sizes are not the input's", v, name);
    return cg_check_row_params(c, v);
}

/* Fill rs for node v: iteration space and row dims (group_norm: dim 1 split
 * into groups x channels per group, rows are (n, group)). */
static void cg_row_shape(const cdy_graph *g, int v, cg_rowshape *rs)
{
    const cdy_value *val = &g->values[v];
    const cdy_meta *im = &g->values[val->args[0]].meta;
    int64_t p = g->values[val->args[val->nargs - 1]].i;
    memset(rs, 0, sizeof(*rs));
    rs->ndim = im->ndim;
    memcpy(rs->size, im->sizes, sizeof(int64_t) * (size_t)im->ndim);
    if (val->op == CDY_OP_SOFTMAX || val->op == CDY_OP_LOG_SOFTMAX || val->op == CDY_OP_SOFTMAX_BW)
        rs->row[p] = 1;
    else if (cg_row_ln(g, v))
        for (int d = im->ndim - (int)p; d < im->ndim; d++)
            rs->row[d] = 1;
    else {
        rs->ndim = im->ndim + 1;
        rs->size[1] = p;
        rs->size[2] = im->sizes[1] / p;
        memcpy(rs->size + 3, im->sizes + 2, sizeof(int64_t) * (size_t)(im->ndim - 2));
        for (int d = 2; d < rs->ndim; d++)
            rs->row[d] = 1;
    }
    rs->nrow = rs->numel = 1;
    for (int d = 0; d < rs->ndim; d++) {
        rs->numel *= rs->size[d];
        rs->nrow *= rs->row[d] ? rs->size[d] : 1;
    }
}

/* group_norm: rewrite each operand's strides for dim 1 split in G x C/G;
 * the weight/bias operands (per channel, shape [C]) index the channel. */
static void cg_row_split(const cdy_graph *g, int v, const cg_rowshape *rs, cg_operand *ops,
                         int nops)
{
    const cdy_value *val = &g->values[v];
    int64_t cpg = rs->size[2];
    for (int o = 0; o < nops; o++) {
        int64_t *st = ops[o].stride, cs;
        const cdy_meta *m = &g->values[ops[o].value].meta;
        int affine = !ops[o].is_out && (ops[o].value == val->args[1] ||
                                        ops[o].value == val->args[2]);
        if (affine) {
            cs = m->sizes[0] == 1 ? 0 : m->strides[0];
            memset(st, 0, sizeof(int64_t) * CDY_MAX_NDIM);
        } else {
            cs = st[1];
            memmove(st + 2, st + 1, sizeof(int64_t) * (size_t)(rs->ndim - 2));
        }
        st[1] = cs * cpg;
        st[2] = cs;
    }
}

/* Append operand o's offset: outer loops i<d>, row loops r<d>. */
static void cg_row_offset(cdy_buf *b, const cg_nest *on, const cg_nest *rn, int o)
{
    int any = 0;
    cg_offset_terms(b, on, o, 'i', &any);
    cg_offset_terms(b, rn, o, 'r', &any);
    if (!any)
        cdy_buf_puts(b, "0");
}

/* The kernel's working state, shared by the pass emitters. */
typedef struct {
    cg_ctx *c;
    int v, in, nops, first;
    cg_operand *ops;
    cg_nest *on, *rn;
    const char *T;               /* compute C type */
    const char *A;               /* accumulator C type */
    const char *vexp;            /* exp of T for x - max <= 0: cdy_vexp_negf, _flushf or exp */
    char *e;                     /* the input's expression in a pass body */
    char *out;                   /* the output's element, out_ptr0[...] */
    int col;                     /* column mode: see cg_row_columns */
    int nout;                    /* outputs: v, then the realized epilogue nodes */
    int *outs;
    int store;                   /* 0: v's result is not stored (cg_row_unread) */
    int stream;                  /* the final pass streams its stores (cg_row_streams) */
    int heavy;                   /* the epilogue has a transcendental op (CDY_OPF_TRANSCENDENTAL) */
    int may_stream;              /* cg_row_streams: streams unless heavy */
    int staged;                  /* emitting a streamed block: stores go to cdy_st<o>[rl] */
    int sib;                     /* the grad * xhat node its final pass computes (cg_row_sibling), or -1 */
    int sib_store;               /* 0: sib is not stored (its column sum is its only reader) */
    int nsum;                    /* column sums over the rows computed here (cg_row_pick_sums) */
    int sums[CG_ROW_NSUM];       /* their sum nodes: the last nsum outputs */
    int sum_src[CG_ROW_NSUM];    /* the values they sum (grad * xhat, the gradient, an
                                  * epilogue output) */
    const cg_rowshape *rs;       /* the iteration space (cg_row_shape) */
    int lanes;                   /* lanes of its sums (cg_row_lanes) */
    int prefetch;                /* its passes prefetch the next row (cg_row_prefetches) */
    int rn_expr;                 /* symbolic sizes: the row length's expression (-1: constant) */
    const char *par_cond;        /* symbolic sizes: the rows run parallel when it holds */
    const char *stream_cond;     /* ... and stream their stores when this holds too */
    const char *pf_cond;         /* symbolic sizes: its sum passes prefetch the next row when
                                  * this holds (cg_row_prefetch_cond); its final pass never */
    int whole;                   /* symbolic sizes: this copy of the loops runs when the row
                                  * length is whole lane blocks: no tails (cg_row_whole_split) */
    int range;                   /* symbolic sizes: the outer loops run the rows [cdy_lo,
                                  * cdy_hi) of the outer dims flattened (cg_row_ranges) */
} cg_rowk;

/* Emit one C line s at indentation ind; 0, or -1 when s is NULL (out of memory). */
static int cg_row_line(cg_rowk *k, int ind, const char *s)
{
    if (!s)
        return cg_fail(k->c, "out of memory");
    cg_indent(&k->c->src, ind);
    cdy_buf_printf(&k->c->src, "%s\n", s);
    return 0;
}

/* The statement defining t<u>, grad * xhat of layer_norm node u (GX), in a
 * pass after the moments (mu, rs); NULL on out of memory. */
static char *cg_row_gx(cg_rowk *k, int u)
{
    cg_ctx *c = k->c;
    const char *A = k->A;
    const char *ge = cg_value_expr(c, c->g->values[u].args[2]);
    const char *xe = cg_value_expr(c, c->g->values[u].args[0]);
    return ge && xe ? cg_strf(c, "const %s t%d = (%s)((%s)%s * (((%s)%s - (%s)mu) * (%s)rs));",
                              k->T, u, k->T, A, ge, A, xe, A, A)
                    : NULL;
}

/* 1 if u is one of the column sums k computes (cg_row_pick_sums). */
static int cg_row_is_sum(const cg_rowk *k, int u)
{
    for (int i = 0; i < k->nsum; i++)
        if (k->sums[i] == u)
            return 1;
    return 0;
}

/* Emit, in the final pass's body at indentation ind, each column sum's add
 * of this element into the thread's partial sums cdy_cs[i] (indexed by the
 * sum's own offset of the element's row position: its result is dense); 0 or -1. */
static int cg_row_sum_adds(cg_rowk *k, int ind)
{
    cg_ctx *c = k->c;
    cdy_buf *b = &c->src;
    for (int i = 0; i < k->nsum; i++) {
        int src = k->sum_src[i], o = k->nops - k->nsum + i, any = 0;
        const char *e = src == k->v || c->in_group[src] ? cg_strf(c, "t%d", src)
                                                         : cg_value_expr(c, src);
        if (!e)
            return cg_fail(c, "out of memory");
        cg_indent(b, ind);
        cdy_buf_printf(b, "cdy_cs[%d][", i);
        cg_offset_terms(b, k->rn, o, 'r', &any);
        cdy_buf_printf(b, "%s] += (double)%s;\n", any ? "" : "0", e);
    }
    return 0;
}

/* Emit the body block of a row pass at indentation ind: loads and prologue
 * nodes (prologue 1), stmt; prologue 2 (the final pass): stmt defines t<v>,
 * the epilogue nodes and their stores follow; 0 or -1. */
static int cg_row_body(cg_rowk *k, int ind, int prologue, const char *stmt)
{
    cg_ctx *c = k->c;
    cdy_buf *b = &c->src;
    if (!stmt)
        return cg_fail(c, "out of memory");
    cg_indent(b, ind++);
    cdy_buf_puts(b, "{\n");
    for (int o = 0; prologue && o < k->nops; o++) {
        if (k->ops[o].is_out)
            continue;
        cg_indent(b, ind);
        cdy_buf_printf(b, "const %s x%d = %s(in_ptr%d[", cdy_dtype_table[k->ops[o].dtype].cctype, o,
                       cg_ld(k->ops[o].dtype), o);
        cg_row_offset(b, k->on, k->rn, o);
        cdy_buf_puts(b, "]);\n");
    }
    for (int u = 0; prologue && u < c->g->nvalues; u++)
        if (u != k->v && (u < k->v || prologue == 2) && c->live[u] && !cg_row_is_sum(k, u) &&
            c->g->values[u].kind == CDY_VAL_NODE && !cg_is_leaf(c, u)) {
            if (u > k->v && *stmt && cg_row_line(k, ind, stmt))   /* t<v> before its epilogue */
                return -1;
            stmt = u > k->v ? "" : stmt;
            if (u == k->sib ? cg_row_line(k, ind, cg_row_gx(k, u)) : cg_emit_node(c, u, ind))
                return -1;
        }
    if (*stmt)
        cg_row_line(k, ind, stmt);
    for (int o = k->first + 1; prologue == 2 && o < k->nops - k->nsum; o++) {
        if (k->ops[o].value == k->sib && !k->sib_store)
            continue;
        cg_indent(b, ind);
        if (k->staged)
            cdy_buf_printf(b, "cdy_st%d[rl", o - k->first);
        else {
            cdy_buf_printf(b, "out_ptr%d[", o - k->first);
            cg_row_offset(b, k->on, k->rn, o);
        }
        cdy_buf_printf(b, "] = %s(t%d);\n", cg_st(k->ops[o].dtype), k->ops[o].value);
    }
    if (prologue == 2 && cg_row_sum_adds(k, ind))
        return -1;
    cg_indent(b, ind - 1);
    cdy_buf_puts(b, "}\n");
    return 0;
}

/* The lanes of the masked block ending a pass over a runtime-length row
 * (cg_row_pass, cg_row_masked_tail): one AVX-512 vector of floats (with a
 * one-byte operand cg_row_nlanes, as cg_row_lanes' blocks).  Softmax
 * over 4x17x17 floats, kernel alone: 3.5 us with a simd loop to the row's
 * end in its max and final passes, 1.9 us so; 4x16x16 the same. */
#define CG_ROW_TAIL 16

static int cg_row_masked_tail(cg_rowk *k, int ind, int nl, const char *clause, int prologue,
                              const char *stmt, const char *wt, const char *nt);
static int cg_row_nlanes(const cg_rowk *k);
static int cg_row_bytes_in(const cg_rowk *k);

/* Close the loops opened from indentation d0 up to ind. */
static void cg_row_close(cdy_buf *b, int d0, int ind)
{
    while (--ind >= d0) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n");
    }
}

/* Emit one pass over a row at indentation ind: the row loops (the innermost
 * one `#pragma omp simd <clause>` when clause is not NULL), then the body
 * (cg_row_body); 0 or -1. */
static int cg_row_pass(cg_rowk *k, int ind, const char *clause, int prologue, const char *stmt)
{
    cdy_buf *b = &k->c->src;
    int d0 = ind, last = k->rn->ndim - 1;
    /* a runtime row length: whole blocks of CG_ROW_TAIL, then one masked block */
    int tail = clause && !k->col && last >= 0 && k->rn->sym && k->rn->ssize[last] >= 0;
    int nl = cg_row_bytes_in(k) ? cg_row_nlanes(k) : CG_ROW_TAIL;   /* bytes: as cg_row_lanes */
    const char *nt = last >= 0 ? cg_sym_size_text(k->c, k->rn, last) : "";
    const char *wt = tail ? cg_strf(k->c, "(%s / %d * %d)", nt, nl, nl) : nt;
    for (int d = 0; d < k->rn->ndim; d++, ind++) {
        if (d == last && clause && !k->col) {
            cg_indent(b, ind);
            cdy_buf_printf(b, "#pragma omp simd %s\n", clause);
        }
        cg_indent(b, ind);
        cdy_buf_printf(b, "for (int64_t r%d = 0; r%d < %s; r%d++) {\n", d, d,
                       d == last ? wt : cg_sym_size_text(k->c, k->rn, d), d);
    }
    if (tail) {
        if (!wt)
            return cg_fail(k->c, "out of memory");
        if (cg_row_body(k, ind, prologue, stmt))
            return -1;
        cg_row_close(b, ind - 1, ind);
        int rc = k->whole ? 0 : cg_row_masked_tail(k, ind - 1, nl, clause, prologue, stmt, wt, nt);
        cg_row_close(b, d0, ind - 1);
        return rc;
    }
    if (k->col) {
        int last = k->on->ndim - 1;
        cg_indent(b, ind);
        cdy_buf_puts(b, "#pragma omp simd\n");
        cg_indent(b, ind++);
        cdy_buf_puts(b, "for (int64_t j = 0; j < jn; j++) {\n");
        cg_indent(b, ind);
        cdy_buf_printf(b, "const int64_t i%d = jb + j;\n", last);
    }
    if (cg_row_body(k, ind, prologue, stmt))
        return -1;
    cg_row_close(b, d0, ind);
    return 0;
}

/* Lanes of a long row's sum: 64 float / 32 double partial sums (4 AVX-512
 * registers), so consecutive vector adds do not wait on each other. */
static int cg_row_nlanes(const cg_rowk *k)
{
    return strcmp(k->A, "float") ? 32 : 64;
}

/* 1 when k loads a one-byte operand (a bool mask): its 16-lane blocks are
 * 16 bytes, and gcc then vectorizes the whole block with 8-byte vectors (two
 * floats): a masked softmax over 4x128x128 floats 1137 -> 442 us with
 * 64-lane blocks, one byte vector each. */
static int cg_row_bytes_in(const cg_rowk *k)
{
    for (int o = 0; o < k->nops; o++)
        if (!k->ops[o].is_out && cdy_dtype_table[k->ops[o].dtype].size == 1)
            return 1;
    return 0;
}

/* The lanes of k's sums: cg_row_nlanes when the innermost row dim is at
 * least 8 lane blocks long (measured on 4M floats, mean and variance passes:
 * 512-wide rows 433 -> 386 us, 1024-wide 420 -> 307 us; 256 no gain); one
 * vector's worth (16 float / 8 double) for rows of at least that, folded as
 * a tree (the simd reduction's epilogue adds the 16 lanes one after the
 * other: softmax over 8x128x128 floats 37.3 -> 33.5 us); else 0 (one simd
 * reduction).  Never in column mode. */
static int cg_row_lanes(const cg_rowk *k)
{
    int last = k->rn->ndim - 1, nl = cg_row_nlanes(k), vec = nl / 4;
    if (k->col || last < 0)
        return 0;
    int64_t n = k->rn->size[last];
    if (n >= nl && cg_row_bytes_in(k))
        return nl;
    return n >= 8 * nl ? nl : n >= vec ? vec : 0;
}

/* Fold lanes <acc>_l[0..nl) into acc as a tree: halving loops, then two
 * pairs (a simd reduction's epilogue adds the last vector's lanes one after
 * the other: 64 lanes folded so, gelu(layer_norm(x)) on 4096x1024 floats
 * took 1.015 times as long on a Zen 4). */
static int cg_row_fold(cg_rowk *k, int ind, const char *acc, int nl)
{
    cdy_buf *b = &k->c->src;
    for (int w = nl / 2; w >= 4; w /= 2) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "#pragma omp simd\n");
        cg_indent(b, ind);
        cdy_buf_printf(b, "for (int64_t rl = 0; rl < %d; rl++) %s_l[rl] += %s_l[rl + %d];\n", w,
                       acc, acc, w);
    }
    return cg_row_line(k, ind, cg_strf(k->c, "%s += (%s_l[0] + %s_l[2]) + (%s_l[1] + %s_l[3]);",
                                       acc, acc, acc, acc, acc));
}

/* Prefetch into L2 the next row's part of lane block rb, for each input read
 * per row, when the kernel's input is larger than this (bytes): a row's
 * first pass streams it from memory, and the rows (4 KiB, one page, for 1024
 * floats) are too short for the hardware prefetcher to run ahead.  The pass
 * that prefetches is the one with the most arithmetic per element, a norm's
 * final pass (its epilogue) and softmax's exp pass, so the next row's loads
 * overlap that work (cg_row_prefetches). */
#define CG_ROW_PREFETCH_BYTES (4 << 20)

/* 1 when k's passes prefetch the next row: rows of one dim, at least 8
 * lane blocks long (cg_row_nlanes, as cg_row_lanes), not column mode, an
 * input of CG_ROW_PREFETCH_BYTES or more. */
static int cg_row_prefetches(const cg_rowk *k)
{
    const cdy_meta *im = &k->c->g->values[k->in].meta;
    return !k->col && k->on->ndim > 0 && k->rn->ndim == 1 &&
           k->rn->size[0] >= 8 * cg_row_nlanes(k) &&
           cdy_meta_numel(im) * cdy_dtype_table[im->dtype].size >= CG_ROW_PREFETCH_BYTES;
}

/* Symbolic sizes: cg_row_prefetches' test as C text, made at run time (the
 * row length and the input's bytes), or NULL when k's rows never prefetch
 * (column mode, several row dims; not two outer dims either: a causal
 * softmax over 4x512x512 floats with its broadcast bool mask took 1.10 times
 * the static time at one thread with it, 1.06 without).  The input's bytes are the
 * rows' elements times its element size (the static test takes the input's
 * numel: the same for a row op's input).  Static and symbolic kernels then
 * prefetch at the same sizes (without it softmax over 4096 x 1000 floats at
 * 16 threads, where it is memory-bound, took 1.12 times the static time). */
static const char *cg_row_prefetch_cond(cg_rowk *k)
{
    cg_ctx *c = k->c;
    if (k->col || k->on->ndim != 1 || k->rn->ndim != 1)
        return NULL;
    const cdy_meta *im = &c->g->values[k->in].meta;
    const char *nr = cg_sym_size_text(c, k->rn, 0);
    return cg_strf(c, "%s >= %dLL && %s * %s * %dLL >= %dLL", nr, 8 * cg_row_nlanes(k),
                   cg_sym_numel_text(c, k->on), nr, (int)cdy_dtype_table[im->dtype].size,
                   CG_ROW_PREFETCH_BYTES);
}

/* Emit the prefetches of block rb (nl elements) of the next row, for each
 * input read contiguously per row. */
static void cg_row_prefetch(cg_rowk *k, int ind, int nl)
{
    cg_ctx *c = k->c;
    cdy_buf *b = &c->src;
    int lo = k->on->ndim - 1, last = k->rn->ndim - 1;
    for (int o = 0; o < k->nops; o++) {
        int64_t s = k->on->stride[o][lo];
        if (k->ops[o].is_out || s == 0 || k->rn->stride[o][last] != 1)
            continue;
        int lines = (int)(nl * cdy_dtype_table[k->ops[o].dtype].size / 64);
        cg_indent(b, ind);
        if (k->pf_cond)     /* symbolic sizes: cdy_pfn is 0 when the kernel does not prefetch */
            cdy_buf_printf(b, "if (i%d + 1 < cdy_pfn) {\n", lo);
        else
            cdy_buf_printf(b, "if (i%d + 1 < %lldLL) {\n", lo, (long long)k->on->size[lo]);
        cg_indent(b, ind + 1);
        cdy_buf_printf(b, "const int64_t r%d = rb;\n", last);
        cg_indent(b, ind + 1);
        cdy_buf_printf(b, "const char *pf = (const char *)&in_ptr%d[", o);
        cg_row_offset(b, k->on, k->rn, o);
        if (k->on->sym && k->on->sstride[o][lo] >= 0)
            cdy_buf_printf(b, " + st%s%d_%d];\n", k->on->pfx ? k->on->pfx : "", o, lo);
        else
            cdy_buf_printf(b, " + %lldLL];\n", (long long)s);
        for (int l = 0; l < lines; l++) {
            cg_indent(b, ind + 1);
            cdy_buf_printf(b, "__builtin_prefetch(pf + %d, 0, 2);\n", 64 * l);
        }
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n");
    }
}

/* Emit the L1 blocks of nl elements of a streamed pass's stored outputs
 * (before its block loop), or with write set their cdy_stream to the
 * outputs at rb (after it). */
static void cg_row_stage(cg_rowk *k, int ind, int nl, int write)
{
    cg_ctx *c = k->c;
    cdy_buf *b = &c->src;
    for (int o = k->first + !k->store; o < k->nops; o++) {
        int n = o - k->first;
        cg_indent(b, ind);
        if (!write) {
            cdy_buf_printf(b, "%s cdy_st%d[%d] __attribute__((aligned(64)));\n",
                           cdy_dtype_table[k->ops[o].dtype].ctype, n, nl);
            continue;
        }
        cdy_buf_printf(b, "{ const int64_t r%d = rb; cdy_stream(&out_ptr%d[", k->rn->ndim - 1, n);
        cg_row_offset(b, k->on, k->rn, o);
        cdy_buf_printf(b, "], cdy_st%d, %d * (int64_t)sizeof(cdy_st%d[0])); }\n", n, nl, n);
    }
}

/* Emit the tail of a pass whose row length nt is a runtime size (wt: its
 * whole blocks' length) at indentation ind: one more block of nl lanes
 * (`#pragma omp simd clause`), run only when the row has a tail, each lane's
 * stmt (a lane-block pass: its lanes' form, <acc>_l[rl]) under `if (r < nt)`.  GCC vectorizes it with masked loads and
 * stores; a `#pragma omp simd` loop from wt to nt instead cost more than the
 * static kernel's whole row even when empty (softmax over 4x16x16 floats:
 * 1.17 us against 0.79 us static, 0.92 us so; 4x128x128: 43 us, 28 us).
 * 0 or -1. */
static int cg_row_masked_tail(cg_rowk *k, int ind, int nl, const char *clause, int prologue,
                              const char *stmt, const char *wt, const char *nt)
{
    cdy_buf *b = &k->c->src;
    int last = k->rn->ndim - 1;
    cg_indent(b, ind);
    cdy_buf_printf(b, "if (%s < %s) {\n", wt, nt);
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "#pragma omp simd %s\n", clause);
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "for (int64_t rl = 0; rl < %d; rl++) {\n", nl);
    cg_indent(b, ind + 2);
    cdy_buf_printf(b, "const int64_t r%d = %s + rl;\n", last, wt);
    cg_indent(b, ind + 2);
    cdy_buf_printf(b, "if (r%d < %s)\n", last, nt);
    int rc = cg_row_body(k, ind + 3, prologue, stmt);
    cg_row_close(b, ind, ind + 2);
    return rc;
}

/* Emit a pass over the row in lane blocks at indentation ind: inside the
 * loops of the outer row dims, the innermost dim's whole blocks of nl run
 * block_stmt (r<last> = rb + rl; prefetching the next row's part of each
 * block when prefetch, cg_row_prefetch; storing into L1 blocks written by
 * cdy_stream when stage, cg_row_stage), its tail tail_stmt under
 * `#pragma omp simd tail_clause`; prologue as cg_row_body.  0 or -1. */
static int cg_row_blocks(cg_rowk *k, int ind, int nl, int prefetch, int stage, int prologue,
                         const char *block_stmt, const char *tail_clause, const char *tail_stmt)
{
    cdy_buf *b = &k->c->src;
    int last = k->rn->ndim - 1, d0 = ind;
    long long n = (long long)k->rn->size[last], whole = n / nl * nl;
    int sym = k->rn->sym && k->rn->ssize[last] >= 0;   /* runtime n: whole and tail at run time */
    const char *nt = cg_sym_size_text(k->c, k->rn, last);
    const char *wt = sym ? cg_strf(k->c, "(%s / %d * %d)", nt, nl, nl)
                         : cg_strf(k->c, "%lldLL", whole);
    for (int d = 0; d < last; d++, ind++) {
        cg_indent(b, ind);
        cdy_buf_printf(b, "for (int64_t r%d = 0; r%d < %s; r%d++) {\n", d, d,
                       cg_sym_size_text(k->c, k->rn, d), d);
    }
    cg_indent(b, ind);
    cdy_buf_printf(b, "for (int64_t rb = 0; rb < %s; rb += %d) {\n", wt, nl);
    if (prefetch)
        cg_row_prefetch(k, ind + 1, nl);
    if (stage)
        cg_row_stage(k, ind + 1, nl, 0);
    cg_indent(b, ind + 1);
    cdy_buf_puts(b, "#pragma omp simd\n");
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "for (int64_t rl = 0; rl < %d; rl++) {\n", nl);
    cg_indent(b, ind + 2);
    cdy_buf_printf(b, "const int64_t r%d = rb + rl;\n", last);
    k->staged = stage;
    int rc = cg_row_body(k, ind + 2, prologue, block_stmt);
    k->staged = 0;
    if (rc)
        return -1;
    cg_row_close(b, ind + 1, ind + 2);
    if (stage)
        cg_row_stage(k, ind + 1, nl, 1);
    cg_row_close(b, ind, ind + 1);
    if (sym)
        rc = k->whole ? 0 : cg_row_masked_tail(k, ind, nl, "", prologue,
                                               stage ? tail_stmt : block_stmt, wt, nt);
    else if (whole < n) {
        cg_indent(b, ind);
        cdy_buf_printf(b, "#pragma omp simd %s\n", tail_clause);
        cg_indent(b, ind);
        cdy_buf_printf(b, "for (int64_t r%d = %s; r%d < %s; r%d++) {\n", last, wt, last, nt,
                       last);
        rc = cg_row_body(k, ind + 1, prologue, tail_stmt);
        cg_row_close(b, ind, ind + 1);
    }
    cg_row_close(b, d0, ind);
    return rc;
}

/* The update of a sum pass for lvalue lv: pre lv post, or with fma (a
 * sum of squares of dv, pre declaring dv), pre lv = fma(dv, dv, lv): one
 * rounding, one instruction in place of a multiply and an add (-ffp-contract
 * is off); with lv2, then lv2 += dv (the deviations' sum).  NULL on out of
 * memory. */
static char *cg_row_upd(cg_ctx *c, const char *pre, const char *lv, const char *post,
                        const char *fma, const char *lv2)
{
    if (!lv || !(lv2 || !fma))
        return NULL;
    char *u = fma ? cg_strf(c, "%s%s = %s(dv, dv, %s);", pre, lv, fma, lv)
                  : cg_strf(c, "%s%s%s", pre, lv, post);
    return u && lv2 ? cg_strf(c, "%s %s += dv;", u, lv2) : u;
}

/* A sum pass: acc (declared, 0) summed by the statement pre <lvalue> post
 * (or, with fma, its sum of squares update and the sum of dv into acc2:
 * cg_row_upd) for each element.
 * With lanes (cg_row_lanes): the innermost dim's whole lane blocks add into
 * <acc>_l[], its tail into acc (cg_row_blocks); then the lanes are folded
 * into acc (cg_row_fold).  Else one simd reduction (cg_row_pass).  prefetch:
 * the pass prefetches the next row when cg_row_prefetches (its rows then
 * have cg_row_nlanes lanes). */
static int cg_row_sum(cg_rowk *k, int ind, const char *acc, const char *pre, const char *post,
                      const char *fma, int prefetch)
{
    cg_ctx *c = k->c;
    const char *acc2 = fma ? "e" : NULL;
    const char *clause = cg_strf(c, "reduction(+:%s%s%s)", acc, acc2 ? ", " : "",
                                 acc2 ? acc2 : "");
    int nl = k->lanes;
    if (!clause || !pre || !post)
        return cg_fail(c, "out of memory");
    if (!nl)
        return cg_row_pass(k, ind, clause, 1, cg_row_upd(c, pre, acc, post, fma, acc2));
    for (int a = 0; a < 1 + !!acc2; a++) {
        cg_indent(&c->src, ind);
        cdy_buf_printf(&c->src, "%s %s_l[%d] __attribute__((aligned(64))) = {0};\n", k->A,
                       a ? acc2 : acc, nl);
    }
    if (cg_row_blocks(k, ind, nl, prefetch && k->prefetch, 0, 1,
                      cg_row_upd(c, pre, cg_strf(c, "%s_l[rl]", acc), post, fma,
                                 acc2 ? cg_strf(c, "%s_l[rl]", acc2) : NULL), clause,
                      cg_row_upd(c, pre, acc, post, fma, acc2)))
        return -1;
    return cg_row_fold(k, ind, acc, nl) || (acc2 && cg_row_fold(k, ind, acc2, nl));
}

/* Declare per-row variable `name` of C type t = init (NULL: out of memory);
 * in column mode an array of CG_ROW_COLS, one per column of the block. */
static int cg_row_let(cg_rowk *k, int ind, const char *t, const char *name, const char *init)
{
    cg_ctx *c = k->c;
    if (!init)
        return cg_fail(c, "out of memory");
    cdy_buf *b = &c->src;
    cg_indent(b, ind);
    if (!k->col) {
        int acc = !strcmp(name, "mx") || !strcmp(name, "sum");    /* accumulators */
        cdy_buf_printf(b, "%s%s %s = %s;\n", acc ? "" : "const ", t, name, init);
        return 0;
    }
    cdy_buf_printf(b, "%s %s[%d];\n", t, name, CG_ROW_COLS);
    cg_indent(b, ind);
    cdy_buf_puts(b, "#pragma omp simd\n");
    cg_indent(b, ind);
    cdy_buf_printf(b, "for (int64_t j = 0; j < jn; j++) %s[j] = %s;\n", name, init);
    return 0;
}


/* The final pass: t<v> = expr stored to out_ptr0, then the epilogue
 * (prologue: 1 when expr reads the input's expression); in blocks of 4 lane
 * blocks (1 KiB) that prefetch the next row when prefetch and
 * cg_row_prefetches.  Not one lane block: GCC unrolls a simd loop of 8
 * vectors completely, 8 copies of the epilogue (gelu(layer_norm(x)): gcc
 * 0.23 -> 0.13 s, the same speed). */
static int cg_row_final(cg_rowk *k, int ind, int prologue, const char *expr, int prefetch)
{
    cg_ctx *c = k->c;
    if (!expr)
        return cg_fail(c, "out of memory");
    int epi = k->nout > 1, odt = c->g->values[k->v].meta.dtype;
    const char *st = cg_st(odt);
    if (cdy_dtype_lowp(odt))   /* t<v> holds the rounded value its epilogue reads */
        expr = cg_strf(c, "%s(%s)", odt == CDY_DT_BFLOAT16 ? "cdy_rbf" : "cdy_rh", expr);
    const char *stmt = k->store ? cg_strf(c, "const %s t%d = %s; %s = %s(t%d);", k->T, k->v, expr,
                                          k->out, st, k->v)
                                : cg_strf(c, "const %s t%d = %s;", k->T, k->v, expr);
    prologue = !k->store || epi ? 2 : prologue;
    prefetch = prefetch && k->prefetch && !k->pf_cond;
    if (k->stream)
        return cg_row_blocks(k, ind, 4 * cg_row_nlanes(k), prefetch, 1,
                             prologue, k->store ? cg_strf(c, "const %s t%d = %s; cdy_st0[rl] = "
                                                          "%s(t%d);", k->T, k->v, expr, st, k->v) : stmt,
                             "", stmt);
    if (prefetch)
        return cg_row_blocks(k, ind, 4 * cg_row_nlanes(k), 1, 0, prologue, stmt, "", stmt);
    return cg_row_pass(k, ind, "", prologue, stmt);
}

/* Softmax / log_softmax of one row: max, sum of exp(x - max) (softmax
 * stores the exps), then the scaled exps or x - max - log(sum).  In bfloat16 /
 * float16 as eager's kernels round: over the last dim softmax recomputes the
 * exps in the final pass (eager's float buffer: one rounding) and log_softmax
 * rounds the sum and its log to the dtype; over another dim softmax keeps the
 * exps in the output, rounded, and log_softmax rounds once. */
static int cg_row_softmax(cg_rowk *k, int ind)
{
    cg_ctx *c = k->c;
    int logsm = c->g->values[k->v].op == CDY_OP_LOG_SOFTMAX;
    const cdy_value *val = &c->g->values[k->v];
    int odt = val->meta.dtype, lowp = cdy_dtype_lowp(odt);
    int last = c->g->values[val->args[1]].i == val->meta.ndim - 1;
    int keep = !lowp || !last;   /* the exps kept in the output (rounded to its dtype) */
    const char *j = k->col ? "[j]" : "";
    const char *rnd = odt == CDY_DT_BFLOAT16 ? "cdy_rbf" : "cdy_rh";
    const char *out = lowp ? cg_strf(c, "%s(%s)", cg_ld(odt), k->out) : k->out;
    if (cg_row_let(k, ind, k->T, "mx", "-INFINITY") ||
        cg_row_pass(k, ind, "reduction(max:mx)", 1,
                    cg_strf(c, "mx%s = %s > mx%s ? %s : mx%s;", j, k->e, j, k->e, j)) ||
        cg_row_let(k, ind, k->A, "sum", "0"))
        return -1;
    const char *kept = keep ? cg_strf(c, "%s = %s(ex); ", k->out, cg_st(odt)) : "";
    const char *pre = logsm ? "" : cg_strf(c, "const %s ex = %s(%s - mx%s); %s", k->T,
                                           k->vexp, k->e, j, kept);
    const char *post = logsm ? cg_strf(c, " += (%s)%s(%s - mx%s);", k->A, k->vexp, k->e, j)
                             : cg_strf(c, " += (%s)ex;", k->A);
    if (k->col ? cg_row_pass(k, ind, "reduction(+:sum)", 1, cg_strf(c, "%ssum[j]%s", pre, post))
               : cg_row_sum(k, ind, "sum", pre, post, NULL, 1))
        return -1;
    if (logsm && lowp && last)   /* eager's last-dim kernel rounds the sum and its log */
        return cg_row_let(k, ind, k->T, "lse", cg_strf(c, "%s((float)log(%s((float)sum%s)))",
                                                          rnd, rnd, j)) ||
               cg_row_final(k, ind, 1, cg_strf(c, "(%s - mx%s) - lse%s", k->e, j, j), 0);
    if (logsm)
        return cg_row_let(k, ind, k->T, "lse", cg_strf(c, "(%s)log(sum%s)", k->T, j)) ||
               cg_row_final(k, ind, 1, cg_strf(c, "(%s - mx%s) - lse%s", k->e, j, j), 0);
    return cg_row_let(k, ind, k->T, "inv", cg_strf(c, "(%s)(1.0 / sum%s)", k->T, j)) ||
           cg_row_final(k, ind, !keep, keep ? cg_strf(c, "%s * inv%s", out, j)
                                            : cg_strf(c, "%s(%s - mx%s) * inv%s", k->vexp,
                                                      k->e, j, j), 0);
}

/* A norm's output as eager's kernels round it (mu, rs: the row's mean and
 * rstd in the compute type; w, b: the weight and bias, either absent).
 * layer_norm: (x - mu) * rs + 0 (eager adds its absent bias: a zero result
 * is +0), with w fma((x - mu) * rs, w, b) (b = 0 when absent: the same), with
 * b alone fma(x - mu, rs, b); bfloat16 / float16 without w and b fma(x, rs,
 * -mu * rs) + 0 (ATen's mixed-type loop: over a row of equal values the
 * rounding error of -mu * rs, its sign, not +0), with w or b fma(fma(x, rs,
 * -mu * rs), w, b) (the same loop's: a constant row gave 0, eager 0.99).  group_norm: (x - mu) * rs,
 * with w or b fma(x, s, fma(-s, mu, b)), s = rs * w (ATen's per-channel
 * scale and bias), so an inf weight gives inf - inf = NaN as eager's.  Given
 * the same mean and rstd, each is eager's result bit for bit (checked
 * against torch.native_layer_norm / native_group_norm's mean and rstd). */
static char *cg_row_affine(cg_rowk *k)
{
    cg_ctx *c = k->c;
    const cdy_value *val = &c->g->values[k->v];
    const char *fma = strcmp(k->T, "float") ? "CDY_FMA" : "CDY_FMAF";
    int w = cg_row_tensor(c->g, val->args[1]), b = cg_row_tensor(c->g, val->args[2]);
    const char *we = w ? cg_value_expr(c, val->args[1]) : "1";
    const char *be = b ? cg_value_expr(c, val->args[2]) : "0";
    if (!we || !be)
        return NULL;
    if (val->op == CDY_OP_GROUP_NORM && (w || b))
        return cg_strf(c, "%s(%s, rs * %s, %s(-(rs * %s), mu, %s))", fma, k->e, we, fma, we,
                       be);
    if (val->op == CDY_OP_LAYER_NORM && cdy_dtype_lowp(val->meta.dtype) && (w || b))
        return cg_strf(c, "%s(%s(%s, rs, -mu * rs), %s, %s)", fma, fma, k->e, we, be);
    if (w)   /* with w alone the bias is 0: fma(.., w, 0) rounds as "* w" but gives +0 for -0, as eager */
        return cg_strf(c, "%s((%s - mu) * rs, %s, %s)", fma, k->e, we, be);
    if (b)
        return cg_strf(c, "%s(%s - mu, rs, %s)", fma, k->e, be);
    if (val->op == CDY_OP_LAYER_NORM && cdy_dtype_lowp(val->meta.dtype))
        return cg_strf(c, "%s(%s, rs, -mu * rs) + (%s)0", fma, k->e, k->T);
    if (val->op == CDY_OP_LAYER_NORM)   /* eager adds its absent bias, 0: never -0 */
        return cg_strf(c, "(%s - mu) * rs + (%s)0", k->e, k->T);
    return cg_strf(c, "(%s - mu) * rs", k->e);
}

/* The row loops of k in the input's logical order (rows dims outer to inner, as
 * eager's contiguous copy of the row holds them), not merged or reordered. */
static void cg_row_logical(const cg_rowk *k, cg_nest *ln)
{
    memset(ln, 0, sizeof(*ln));
    for (int d = 0; d < k->rs->ndim; d++) {
        if (!k->rs->row[d] || k->rs->size[d] == 1)
            continue;
        ln->size[ln->ndim] = k->rs->size[d];
        for (int o = 0; o < k->nops; o++)
            ln->stride[o][ln->ndim] = k->ops[o].stride[d];
        ln->ndim++;
    }
}

/* Where the row's first mean m0 and sum of squared deviations q say that an
 * element may be large enough for eager's Welford moments to overflow (|x| up
 * to |m0| + sqrt(q) above sqrt(MAX / 48n): its squares summed over the row, its
 * merges' products), or is inf or NaN: recompute mu and var as eager does
 * (cdy_wf_*, mathlib.c; bfloat16 / float16 rows as ATen's reduced-type moments,
 * 16 halves a vector) in a pass over the row in logical order, so a row that
 * is NaN, inf or 0 in eager is so here; 0 or -1. */
static int cg_row_moments_exact(cg_rowk *k, int ind, int64_t n)
{
    cg_ctx *c = k->c;
    int f32 = !strcmp(k->T, "float");
    double lim = sqrt((f32 ? 3.4028234663852886e38 : 1.7976931348623157e308) / (48.0 * (double)n));
    const char *S = f32 ? "f32" : "f64";
    cg_nest ln, *rn = k->rn;
    cg_row_logical(k, &ln);
    if (cg_row_line(k, ind, cg_strf(c, "if (__builtin_expect(!(fabs((double)m0) <= %.17g && (double)q <= %.17g), 0)) {",
                                    lim / 2, lim * lim / 4)) ||
        cg_row_line(k, ind + 1, cg_strf(c, "cdy_wf_%s wf;", S)) ||
        cg_row_line(k, ind + 1, cg_strf(c, "cdy_wf_init_%s(&wf, %lldLL, %d, %d);", S, (long long)n,
                                        f32 ? 8 : 4, cdy_dtype_lowp(c->g->values[k->v].meta.dtype) ? 2 : 1)))
        return -1;
    k->rn = &ln;
    int rc = cg_row_pass(k, ind + 1, NULL, 1, cg_strf(c, "cdy_wf_push_%s(&wf, (%s)%s);", S, k->T,
                                                       k->e));
    k->rn = rn;
    return rc ||
           cg_row_line(k, ind + 1, cg_strf(c, "%s wm, wv;", k->T)) ||
           cg_row_line(k, ind + 1, cg_strf(c, "cdy_wf_end_%s(&wf, &wm, &wv);", S)) ||
           cg_row_line(k, ind + 1, "mu = wm;") ||
           cg_row_line(k, ind + 1, "var = wv;") ||
           cg_row_line(k, ind, "}");
}

/* The moments of a norm's row (declaring mu and rs): a first mean m0 = sum / n, then in
 * one pass the squares and the sum of the deviations d = x - m0; the mean
 * is m0 + sum(d) / n, the variance sum(d^2) / n - (sum(d) / n)^2 (0 where
 * rounding makes it negative), so a constant row has its own value as mean
 * exactly and normalizes to 0 (eager's Welford moments do; m0 alone is off by
 * the sum's rounding).  A row whose moments may overflow takes eager's
 * (cg_row_moments_exact).  rstd = 1 / sqrt(var + eps) as eager rounds it:
 * layer_norm's in the compute type with eps rounded to it, group_norm's in
 * double (its eps is a double). */
static int cg_row_moments(cg_rowk *k, int ind, int64_t n)
{
    cg_ctx *c = k->c;
    double eps = c->g->values[c->g->values[k->v].args[3]].f;
    const char *A = k->A, *T = k->T, *sq = strcmp(T, "float") ? "sqrt" : "sqrtf";
    long long nn = (long long)n;
    int gn = c->g->values[k->v].op == CDY_OP_GROUP_NORM;
    /* the final pass, with the affine map and the epilogue, prefetches the next row */
    if (cg_row_line(k, ind, cg_strf(c, "%s s = 0, q = 0, e = 0;", A)) ||
        cg_row_sum(k, ind, "s", "", cg_strf(c, " += (%s)%s;", A, k->e), NULL, 0) ||
        cg_row_line(k, ind, cg_strf(c, "const %s m0 = s / (%s)%lld.0;", A, A, nn)) ||
        cg_row_sum(k, ind, "q", cg_strf(c, "const %s dv = (%s)%s - m0; ", A, A, k->e),
                   "", strcmp(A, "float") ? "CDY_FMA" : "CDY_FMAF", 0) ||
        cg_row_line(k, ind, cg_strf(c, "const %s de = e / (%s)%lld.0, d2 = de * de, qn = q / "
                                       "(%s)%lld.0;", A, A, nn, A, nn)) ||
        cg_row_line(k, ind, cg_strf(c, "%s var = d2 < qn ? qn - d2 : 0;", A)) ||
        cg_row_line(k, ind, cg_strf(c, "%s mu = (%s)(m0 + de);", T, T)) ||
        cg_row_moments_exact(k, ind, n) ||
        cg_row_line(k, ind, gn ? cg_strf(c, "const %s rs = (%s)(1.0 / sqrt((double)var + %.17g));",
                                         T, T, eps)
                               : cg_strf(c, "const %s rs = (%s)1 / %s((%s)var + (%s)%.17g);", T, T,
                                         sq, T, T, eps)))
        return -1;
    return 0;
}

/* layer_norm / group_norm of one row: its moments (cg_row_moments), then the
 * final pass, the affine map (cg_row_affine) and the epilogue. */
static int cg_row_norm(cg_rowk *k, int ind, int64_t n)
{
    return cg_row_moments(k, ind, n) || cg_row_final(k, ind, 1, cg_row_affine(k), 1);
}

/* softmax's input gradient over one row (y the result, g the gradient):
 * sum = sum(g * y), then y * (g - sum) and the epilogue (the scores' scale,
 * typically), as ATen's softmax_backward_data. */
static int cg_row_softmax_bw(cg_rowk *k, int ind)
{
    cg_ctx *c = k->c;
    const char *A = k->A, *T = k->T;
    const char *ge = cg_value_expr(c, c->g->values[k->v].args[1]);
    if (!ge)
        return cg_fail(c, "out of memory");
    return cg_row_line(k, ind, cg_strf(c, "%s sum = 0;", A)) ||
           cg_row_sum(k, ind, "sum", "", cg_strf(c, " += (%s)%s * (%s)%s;", A, ge, A, k->e),
                      NULL, 0) ||
           cg_row_final(k, ind, 1, cg_strf(c, "(%s)((%s)%s * ((%s)%s - sum))", T, A, k->e, A,
                                           ge), 0);
}

/* grad * xhat of a layer_norm's row alone (no input gradient kernel computes
 * it): the moments, then the product. */
static int cg_row_norm_gx(cg_rowk *k, int ind, int64_t n)
{
    cg_ctx *c = k->c;
    const char *A = k->A;
    const char *ge = cg_value_expr(c, c->g->values[k->v].args[2]);
    if (!ge)
        return cg_fail(c, "out of memory");
    return cg_row_moments(k, ind, n) ||
           cg_row_final(k, ind, 1, cg_strf(c, "(%s)((%s)%s * (((%s)%s - (%s)mu) * (%s)rs))", k->T,
                                           A, ge, A, k->e, A, A), 1);
}

/* The two sums of layer_norm_backward's row, negated: sg -= gh, sx -= gh *
 * xh for each element, after pre (which defines gh and xh); in lanes as
 * cg_row_sum (cg_row_lanes), else one simd reduction.  0 or -1. */
static int cg_row_sum2(cg_rowk *k, int ind, const char *pre)
{
    cg_ctx *c = k->c;
    int nl = k->lanes;
    if (!pre)
        return cg_fail(c, "out of memory");
    const char *one = cg_strf(c, "%ssg -= gh; sx -= gh * xh;", pre);
    if (!nl)
        return cg_row_pass(k, ind, "reduction(+:sg, sx)", 1, one);
    for (int a = 0; a < 2; a++) {
        cg_indent(&c->src, ind);
        cdy_buf_printf(&c->src, "%s %s_l[%d] __attribute__((aligned(64))) = {0};\n", k->A,
                       a ? "sx" : "sg", nl);
    }
    if (cg_row_blocks(k, ind, nl, 0, 0, 1,
                      cg_strf(c, "%ssg_l[rl] -= gh; sx_l[rl] -= gh * xh;", pre),
                      "reduction(+:sg, sx)", one))
        return -1;
    return cg_row_fold(k, ind, "sg", nl) || cg_row_fold(k, ind, "sx", nl);
}

/* layer_norm's input gradient over one row (x the input, g the gradient, w
 * the weight or 1): the moments of x as layer_norm's (cg_row_moments), xh =
 * (x - mu) * rs, gh = g * w; the negated means of gh and gh * xh, ng and nx
 * (cg_row_sum2); then rs * ((gh + ng) + xh * nx) and the epilogue (the
 * residual's gradient added, typically).  ATen's backward computes the same
 * terms from the forward's saved mean and rstd.  The negation is exact, so
 * the values are those of rs * ((gh - mean(gh)) - xh * mean(gh * xh)) but
 * for the sign of a zero: a row whose gh are all zeros (or of length 1) gets
 * +0 (gh + ng, ng a sum from +0 of zeros' negations, is +0), as eager's
 * a * gh + b * x + c, where the -0 of gh - mean(gh) gave -0. */
static int cg_row_norm_bw(cg_rowk *k, int ind, int64_t n)
{
    cg_ctx *c = k->c;
    const cdy_value *val = &c->g->values[k->v];
    const char *A = k->A, *T = k->T;
    const char *ge = cg_value_expr(c, val->args[2]);
    const char *we = cg_row_tensor(c->g, val->args[1]) ? cg_value_expr(c, val->args[1]) : "1";
    if (!ge || !we)
        return cg_fail(c, "out of memory");
    const char *pre = cg_strf(c, "const %s gh = (%s)%s * (%s)%s; const %s xh = ((%s)%s - (%s)mu) "
                                 "* (%s)rs; ", A, A, ge, A, we, A, A, k->e, A, A);
    const char *fin = cg_strf(c, "(%s)((%s)rs * (((%s)%s * (%s)%s + ng) + ((%s)%s - (%s)mu) * "
                                 "(%s)rs * nx))", T, A, A, ge, A, we, A, k->e, A, A);
    long long nn = (long long)n;
    return cg_row_moments(k, ind, n) ||
           cg_row_line(k, ind, cg_strf(c, "%s sg = 0, sx = 0;", A)) ||
           cg_row_sum2(k, ind, pre) ||
           cg_row_line(k, ind, cg_strf(c, "const %s ng = sg / (%s)%lld.0, nx = sx / (%s)%lld.0;",
                                       A, A, nn, A, nn)) ||
           cg_row_final(k, ind, 1, fin, 1);
}

/* Bytes k moves over numel elements: each operand that steps through the
 * outer loops (the input, the outputs; not a weight or bias shared by all
 * rows), less v's result when it is not stored (it steps like the input). */
static int64_t cg_row_moved(const cg_rowk *k, int64_t numel)
{
    int64_t unstored = k->store ? 0 : cdy_dtype_table[k->c->g->values[k->v].meta.dtype].size;
    return cg_moved(k->ops, k->nops, k->on, numel) - numel * unstored;
}

/* 1 when k's final pass may stream its stores (stream.c): a norm (softmax
 * reads its stored exps back), rows of one dim that every stored output walks
 * contiguously, not column mode, enough bytes moved.  It does unless k->heavy.
 * A norm alone, or with a light epilogue, is memory-bound and streaming saves
 * the output's read for ownership: 16384x1024 floats, layer_norm 2848-2893 us
 * streamed vs 3900-4006 plainly, relu(layer_norm) 2897-2928 vs 3444-3505 (Zen 4,
 * 2 threads).  With exp, tanh, silu or gelu after it, the final pass computes
 * for longer than the first two and the streamed stores, all issued in it,
 * cost more than the reads for ownership that plain stores spread over the
 * passes: plainly 0.87-0.94 of the time on the Zen 4 (gelu 0.86-0.87 at 4096
 * and 16384 rows), and for gelu 0.88-0.91 on a 16-core Sapphire Rapids at 2
 * and 16 threads. */
static int cg_row_streams(const cg_rowk *k, int64_t numel)
{
    int op = k->c->g->values[k->v].op;
    if ((op != CDY_OP_LAYER_NORM && op != CDY_OP_GROUP_NORM && op != CDY_OP_LAYER_NORM_BW &&
         op != CDY_OP_LAYER_NORM_GX) ||
        k->col || k->rn->ndim != 1 ||
        k->on->ndim == 0)
        return 0;
    for (int o = k->first + !k->store; o < k->nops; o++)
        if (k->rn->stride[o][0] != 1)
            return 0;
    return cg_streams(k->c, cg_row_moved(k, numel));
}

/* The record of a row kernel: its working state (decisions: mode, store,
 * stream) and its shape; whether the rows run in parallel is the kernel's. */
typedef struct {
    cg_rowk k;
    cg_rowshape rs;
} cg_row_kernel;

/* Print row kernel kk in the post-fusion IR. */
void cg_print_rows(cg_ctx *c, const kir_kernel *kk)
{
    const cg_row_kernel *rk = kk->x;
    const cg_rowk *k = &rk->k;
    const cg_rowshape *rs = &rk->rs;
    int kn = kk->number, par = kk->parallel;
    cdy_buf *ir = &c->ir_post;
    const char *name = cdy_op_table[c->g->values[k->v].op].name;
    cdy_buf_printf(ir, "kernel_%d: row kernel %%%d %s of %%%d over ", kn, k->v, name, k->in);
    cg_ir_dims(ir, rs->size, rs->ndim);
    cdy_buf_printf(ir, ", %lld elements per row; outer loops ", (long long)rs->nrow);
    cg_ir_dims(ir, k->on->size, k->on->ndim);
    cdy_buf_puts(ir, ", row loops ");
    cg_ir_dims(ir, k->rn->size, k->rn->ndim);
    cdy_buf_printf(ir, ", accumulators %s%s\n", k->A,
                   k->col ? "; column mode: blocks of columns, column loop innermost" : "");
    cg_ir_fuses(c, ir, kk);
    for (int o = 0; o < k->nops; o++) {
        int unused = o == k->first && !k->store;
        int unsib = o > k->first && k->ops[o].value == k->sib && !k->sib_store;
        int sum = o >= k->nops - k->nsum;
        cdy_buf_puts(ir, unused || unsib ? "  (not stored) "
                         : k->ops[o].is_out ? "  store " : "  load  ");
        cg_ir_param(ir, k->ops, k->nops, o);
        cdy_buf_puts(ir, unused ? ": only its fused epilogue reads it\n"
                         : unsib ? ": only its column sum, computed here, reads it\n"
                         : sum ? ": column sum over the rows (each part's rows summed in double, "
                                 "the parts added in order after the rows)\n" : "\n");
    }
    cdy_buf_printf(ir, "  parallel: %s\n", par ? "yes: omp parallel for over the rows"
                                              : "no: small, or one row");
    if (k->stream)
        cg_stream_ir(c, ir, cg_row_moved(k, rs->numel));
    else if (k->may_stream)
        cdy_buf_puts(ir, "  stores: plain, not streamed: its epilogue is transcendental "
                         "(compute-bound)\n");
    cdy_buf_printf(&c->ir_dec, "  kernel_%d is a separate kernel: row op %%%d %s (values "
                               "before it are realized first; its prologue is fused)\n",
                   kn, k->v, name);
}

/* 1 if u is a pointwise node (kinds U, B, C, T): element i of it reads
 * element i of its args.  Views, gathers and index nodes read other elements
 * (a flip or a same-shape view of v reads v's buffer through strides of its
 * own), externs and special kinds are kernels or steps of their own. */
static int cg_row_pointwise(const cdy_graph *g, int u)
{
    if (g->values[u].kind != CDY_VAL_NODE)
        return 0;
    char k = cdy_op_table[g->values[u].op].kind;
    return k == 'U' || k == 'B' || k == 'C' || k == 'T';
}

/* 1 if value u (after row node v) may join v's epilogue: a pointwise node
 * over v's sizes whose tensor args are v, picked nodes (epi), inputs or
 * values realized before v (not v's per-channel args, indexed differently). */
static int cg_row_epi_ok(cg_ctx *c, int v, int u, const char *epi)
{
    const cdy_graph *g = c->g;
    const cdy_value *val = &g->values[u], *rv = &g->values[v];
    if (!cg_row_pointwise(g, u) || val->meta.ndim != rv->meta.ndim ||
        memcmp(val->meta.sizes, rv->meta.sizes, sizeof(int64_t) * (size_t)rv->meta.ndim))
        return 0;
    for (int a = 0; a < val->nargs; a++) {
        int w = val->args[a];
        if (g->values[w].kind == CDY_VAL_SCALAR || epi[w])
            continue;
        if (g->values[w].kind != CDY_VAL_INPUT && (w > v || c->val_buf[w] < 0))
            return 0;
        for (int b = 1; !cg_row_ln(g, v) && b < rv->nargs; b++)
            if (rv->args[b] == w)
                return 0;
    }
    return 1;
}

/* 1 when norm node v's result needs no store: not a graph output, and every
 * node reading it is a realized (stored) pointwise node of its epilogue, so
 * no later kernel reads v.  Softmax always stores (its exps live there). */
static int cg_row_unread(const cg_ctx *c, int v, const char *epi)
{
    const cdy_graph *g = c->g;
    int op = g->values[v].op;
    if (op == CDY_OP_SOFTMAX || op == CDY_OP_LOG_SOFTMAX)
        return 0;
    for (int o = 0; o < g->noutputs; o++)
        if (g->outputs[o] == v)
            return 0;
    for (int u = v + 1; u < g->nvalues; u++) {
        if ((cg_is_view(g, u) || cg_is_gather(g, u)) && g->values[u].view_base == v)
            return 0;    /* loads v's buffer through its own strides or indices */
        for (int a = 0; a < g->values[u].nargs; a++)
            if (g->values[u].args[a] == v && (!epi[u] || c->val_buf[u] < 0))
                return 0;
    }
    return 1;
}

/* Partial column sums of a row kernel (cg_row_pick_sums) on the calling
 * thread's stack: at most this many bytes (threads x sums x row doubles). */
#define CG_ROW_SUM_BYTES (128 << 10)

/* 1 if view w of value src (of k's sizes) is a contiguous reshape of
 * contiguous src to [rows, row length], not realized: its dim 0 the rows. */
static int cg_row_rows_view(const cg_ctx *c, const cg_rowk *k, int w, int src)
{
    const cdy_value *wv = &c->g->values[w];
    const cdy_meta *sm = &c->g->values[src].meta;
    return cg_is_view(c->g, w) && wv->view_base == src && c->val_buf[w] < 0 &&
           wv->meta.ndim == 2 && wv->meta.sizes[1] == k->rs->nrow &&
           cdy_meta_contiguous(&wv->meta) && cdy_meta_contiguous(sm) &&
           cdy_meta_numel(&wv->meta) == cdy_meta_numel(sm) && sm->ndim == k->rs->ndim &&
           !memcmp(sm->sizes, k->rs->size, sizeof(int64_t) * (size_t)sm->ndim);
}

/* 1 if node s is a sum of value src over exactly the outer dims of k's
 * rows (all of them, at least one; or dim 0 of a reshape of src to [rows,
 * row length], cg_row_rows_view) into a dense result of src's dtype, that
 * no reduction kernel owns otherwise (a producer it stores, reduce.c). */
static int cg_row_sum_ok(cg_ctx *c, const cg_rowk *k, int s, int src)
{
    const cdy_graph *g = c->g;
    const cdy_value *sv = &g->values[s];
    const cdy_meta *im = &g->values[k->in].meta;
    int p = (int)g->values[g->values[k->v].args[4]].i;
    int64_t outer = ((int64_t)1 << (im->ndim - p)) - 1;
    if (sv->kind != CDY_VAL_NODE || sv->op != CDY_OP_SUM || sv->nargs != 3 ||
        c->done[s] || c->val_buf[s] < 0 || c->red_prod[s] >= 0)
        return 0;
    if (sv->args[0] != src) {
        if (!cg_row_rows_view(c, k, sv->args[0], src))
            return 0;
        outer = 1;
    }
    const cdy_value *mv = &g->values[sv->args[1]];
    return mv->kind == CDY_VAL_SCALAR && mv->i == outer && outer != 0 &&
           sv->meta.dtype == g->values[src].meta.dtype &&
           cdy_meta_numel(&sv->meta) == k->rs->nrow && cdy_meta_contiguous(&sv->meta);
}

/* 1 if every reader of value u is a sum k computes: not a graph output, no
 * view of it, no other node reads it. */
static int cg_row_only_summed(const cg_ctx *c, const cg_rowk *k, int u)
{
    const cdy_graph *g = c->g;
    for (int o = 0; o < g->noutputs; o++)
        if (g->outputs[o] == u)
            return 0;
    for (int w = u + 1; w < g->nvalues; w++) {
        if ((cg_is_view(g, w) || cg_is_gather(g, w)) && g->values[w].view_base == u)
            return 0;
        for (int a = 0; a < g->values[w].nargs; a++)
            if (g->values[w].args[a] == u && !cg_row_is_sum(k, w))
                return 0;
    }
    return 1;
}

/* Layer_norm's weight and bias gradients in its row kernel: the sums over
 * the rows (the outer dims) of grad * xhat (k's sibling, or v itself) and of
 * the gradient become outputs of k (the last nsum, marked done and epi),
 * each thread summing its rows in double, combined in thread order
 * (cg_row_emit_summed).  Static sizes, float32 / float64, the partial sums
 * within CG_ROW_SUM_BYTES; grad * xhat is then not stored when nothing else
 * reads it.  0 or -1. */
static int cg_row_pick_sums(cg_ctx *c, cg_rowk *k, char *epi)
{
    const cdy_graph *g = c->g;
    const cdy_value *val = &g->values[k->v];
    int gx = val->op == CDY_OP_LAYER_NORM_GX ? k->v : k->sib;
    int src[CG_ROW_NSUM] = {gx, val->args[2], -1};
    k->sib_store = 1;
    if (c->sym || (val->op != CDY_OP_LAYER_NORM_BW && val->op != CDY_OP_LAYER_NORM_GX) ||
        (val->meta.dtype != CDY_DT_FLOAT32 && val->meta.dtype != CDY_DT_FLOAT64) ||
        (int64_t)c->nthreads * CG_ROW_NSUM * k->rs->nrow * 8 > CG_ROW_SUM_BYTES)
        return 0;
    for (int o = 1; o < k->nout && src[2] < 0; o++)   /* a stored epilogue output: the */
        if (k->outs[o] != k->sib && g->values[k->outs[o]].meta.dtype == val->meta.dtype)
            src[2] = k->outs[o];                       /* residual's gradient, typically */
    for (int i = 0; i < CG_ROW_NSUM; i++)
        for (int s = k->v + 1; src[i] >= 0 && s < g->nvalues; s++)
            if (cg_row_sum_ok(c, k, s, src[i])) {
                k->sums[k->nsum] = s;
                k->sum_src[k->nsum++] = src[i];
                k->outs[k->nout++] = s;
                c->done[s] = epi[s] = 1;
                break;
            }
    if (k->sib >= 0 && k->nsum && cg_row_only_summed(c, k, k->sib))
        k->sib_store = 0;
    return 0;
}

/* Pick the pointwise epilogue of row node v, computed in its final pass:
 * k->outs = v, then the realized picked nodes not done yet (marked done: no
 * other kernel computes them, it may read a norm result left unstored); k->heavy when one of the picked is transcendental.  0 or -1. */
static int cg_row_epilogue(cg_ctx *c, cg_rowk *k)
{
    const cdy_graph *g = c->g;
    char *epi = cdy_arena_alloc(&c->arena, (size_t)g->nvalues + 1);
    k->outs = cdy_arena_alloc(&c->arena, sizeof(int) * (CG_ROW_EPI + 1 + CG_ROW_NSUM));
    if (!epi || !k->outs)
        return cg_fail(c, "out of memory");
    k->outs[0] = k->v;
    k->nout = 1;
    epi[k->v] = 1;
    for (int u = k->v + 1; u < g->nvalues && k->nout <= CG_ROW_EPI; u++) {
        if (k->sib < 0 && !c->done[u] && c->val_buf[u] >= 0 && cg_row_sibling(g, k->v, u)) {
            k->sib = u;
            k->outs[k->nout++] = u;
            c->done[u] = epi[u] = 1;
            continue;
        }
        if (c->done[u] || !cg_row_epi_ok(c, k->v, u, epi))
            continue;   /* done: an earlier row kernel's epilogue computes it */
        epi[u] = 1;
        k->heavy |= cdy_op_has(g->values[u].op, CDY_OPF_TRANSCENDENTAL);
        if (c->val_buf[u] >= 0) {
            k->outs[k->nout++] = u;
            c->done[u] = 1;
        }
    }
    if (cg_row_pick_sums(c, k, epi))
        return -1;
    k->store = k->nout == 1 || !cg_row_unread(c, k->v, epi);
    return 0;
}

/* Build k's operands and the outer and row nests for node v; 0 or -1. */
static int cg_row_setup(cg_ctx *c, cg_rowk *k, const cg_rowshape *rs)
{
    const cdy_graph *g = c->g;
    if (cg_row_epilogue(c, k))
        return -1;
    int *outs = k->outs;
    int64_t *sz = cdy_arena_alloc(&c->arena, sizeof(int64_t) * CDY_MAX_NDIM * 2);
    k->ops = cdy_arena_alloc(&c->arena, sizeof(cg_operand) * CG_MAX_OPS);
    k->on = cdy_arena_alloc(&c->arena, sizeof(cg_nest));
    k->rn = cdy_arena_alloc(&c->arena, sizeof(cg_nest));
    if (!outs || !sz || !k->ops || !k->on || !k->rn)
        return cg_fail(c, "out of memory");
    const cdy_meta *im = &g->values[k->in].meta;
    cg_group grp = {im->ndim, im->sizes, k->nout, outs};
    cg_mark_live(c, &grp);
    for (int i = 0; i < k->nsum; i++)   /* a sum through a reshape reads t<src>, not the view */
        if (g->values[k->sums[i]].args[0] != k->sum_src[i])
            c->live[g->values[k->sums[i]].args[0]] = 0;
    if ((k->nops = cg_operands(c, &grp, k->ops)) < 0)
        return -1;
    k->first = cg_first_out(k->ops, k->nops);
    if (g->values[k->v].op == CDY_OP_GROUP_NORM)
        cg_row_split(g, k->v, rs, k->ops, k->nops);
    for (int d = 0; d < rs->ndim; d++) {
        sz[d] = rs->row[d] ? 1 : rs->size[d];
        sz[CDY_MAX_NDIM + d] = rs->row[d] ? rs->size[d] : 1;
    }
    cg_group og = {rs->ndim, sz, k->nout, outs};
    cg_group rg = {rs->ndim, sz + CDY_MAX_NDIM, k->nout, outs};
    cg_build_nest(&og, k->ops, k->nops, k->on);
    cg_build_nest(&rg, k->ops, k->nops, k->rn);
    k->rn_expr = -1;
    if (!c->sym)
        return 0;
    if (g->values[k->v].op == CDY_OP_GROUP_NORM)
        return cg_sym_unsupported(c, "group_norm kernels take static sizes");
    int64_t mask = 0;
    for (int d = 0; d < rs->ndim; d++)
        mask |= (int64_t)rs->row[d] << d;
    return cg_sym_split_nests(c, k->in, mask, 1, 0, k->ops, k->nops, k->on, k->rn, &k->rn_expr);
}

/* Column mode (softmax over a dim that is not the innermost in memory):
 * 1 when the innermost outer loop is contiguous in the output and the row
 * is not; the rows of a block of CG_ROW_COLS such columns are then processed
 * together, the column loop innermost (vectorized), accumulators per column. */
static int cg_row_columns(const cg_rowk *k)
{
    int op = k->c->g->values[k->v].op, lo = k->on->ndim - 1, lr = k->rn->ndim - 1;
    return (op == CDY_OP_SOFTMAX || op == CDY_OP_LOG_SOFTMAX) && lo >= 0 && lr >= 0 &&
           k->on->stride[k->first][lo] == 1 && k->rn->stride[k->first][lr] != 1 &&
           k->on->size[lo] >= 8;
}

/* Emit the outer loops of k (parallel when par, the two outer ones collapsed
 * when collapse) at indentation 1; in column
 * mode the innermost is a loop over blocks of columns.  Returns the body's
 * indentation. */
static int cg_row_outer(cg_rowk *k, int par, int collapse)
{
    cdy_buf *b = &k->c->src;
    int ind = 1, n = k->on->ndim;
    if (k->range) {     /* one or two outer dims (cg_row_ranges): one loop over the range */
        cg_indent(b, ind);
        const char *n1 = n == 2 ? cg_sym_size_text(k->c, k->on, 1) : NULL;
        if (!n1)
            cdy_buf_puts(b, "for (int64_t i0 = cdy_lo; i0 < cdy_hi; i0++) {\n");
        else
            cdy_buf_printf(b, "for (int64_t cdy_f = cdy_lo, i0 = cdy_lo / %s, i1 = cdy_lo %% %s; "
                           "cdy_f < cdy_hi; cdy_f++, i1 = i1 + 1 < %s ? i1 + 1 : 0, "
                           "i0 += i1 == 0) {\n", n1, n1, n1);
        return ind + 1;
    }
    for (int d = 0; d < n; d++, ind++) {
        if (d == 0 && par)
            cg_stream_open(k->c, ind, "NTHREADS", collapse ? " collapse(2)" : "", k->stream);
        cg_indent(b, ind);
        const char *sz = cg_sym_size_text(k->c, k->on, d);
        if (k->col && d == n - 1)
            cdy_buf_printf(b, "for (int64_t jb = 0; jb < %s; jb += %d) {\n", sz, CG_ROW_COLS);
        else
            cdy_buf_printf(b, "for (int64_t i%d = 0; i%d < %s; i%d++) {\n", d, d, sz, d);
    }
    if (k->col) {
        cg_indent(b, ind);
        const char *nc = cg_sym_size_text(k->c, k->on, n - 1);
        cdy_buf_printf(b, "const int64_t jn = %s - jb < %d ? %s - jb : %d;\n", nc, CG_ROW_COLS,
                       nc, CG_ROW_COLS);
    }
    return ind;
}

/* The kernel record kk of row kernel rk (number), both paths. */
static int cg_row_record(cg_ctx *c, kir_kernel *kk, cg_row_kernel *rk, int number)
{
    cg_rowk *k = &rk->k;
    const cg_rowshape *rs = &rk->rs;
    int64_t nrows = rs->nrow ? rs->numel / rs->nrow : 0;
    kk->number = number;
    kk->node = k->v;
    kk->grp = (cg_group){rs->ndim, rs->size, k->nout, k->outs};
    kk->ops = k->ops;
    kk->nops = k->nops;
    kk->nest = k->on;
    kk->numel = rs->numel;
    kk->parallel = c->nthreads > 1 && rs->numel >= CG_PARALLEL_NUMEL && k->on->ndim > 0 && nrows > 1;
    kk->collapse = k->on->ndim >= 2 && k->on->size[0] < 4 * (int64_t)c->nthreads;
    kk->threads = "NTHREADS";
    kk->stream = k->stream;
    kk->status = cg_kernel_gathers(c);
    kk->rnest = k->rn;
    kk->flags = (k->col ? CDY_KIRF_COLUMNS : 0) | (k->store ? 0 : CDY_KIRF_UNSTORED) |
                (k->lanes ? CDY_KIRF_LANES : 0) | (k->prefetch ? CDY_KIRF_PREFETCH : 0);
    kk->x = rk;
    return cg_kir_fuse(c, kk);
}

/* Symbolic sizes (symk.c): row kernel rk with its size-dependent decisions
 * made per call (the rows' parallel loop), a runtime row length's sums in
 * vector lanes with a runtime tail, accumulated in float; column mode (a
 * softmax over a dim not innermost) with a runtime column count; streamed
 * stores and the sum passes' prefetch decided per call.  0 or -1. */
static int cg_row_sched_sym(cg_ctx *c, kir_kernel *kk, cg_row_kernel *rk, int number)
{
    cg_rowk *k = &rk->k;
    if (k->rn_expr >= 0 && c->g->values[k->v].op != CDY_OP_SOFTMAX &&
        c->g->values[k->v].op != CDY_OP_LOG_SOFTMAX && c->g->values[k->v].op != CDY_OP_SOFTMAX_BW)
        return cg_sym_unsupported(c, "a norm's row length is symbolic");
    int may_stream = cg_row_streams(k, (int64_t)1 << 40) && !k->heavy;   /* but for the bytes */
    k->stream = k->may_stream = 0;
    k->lanes = cg_row_lanes(k);
    /* a runtime row length: one vector's lanes (a mask's 64) at every length, not
     * the compiling call's choice.  The lanes stay in memory in the runtime-length
     * loops, and there 16 ran faster than 64 at every length (a C harness on the
     * host's Zen 4, softmax, 1 thread, us: 256x1000 102.7 / 108.3, 2048x512 415.6 /
     * 436.2, 512x2048 385.6 / 407.9, 1024x300 131.9 / 151.1; the static kernel's
     * 64 from 512 on: 111.4, 398.5, 404.4, 150.0) */
    if (k->rn_expr >= 0 && k->rn->ndim > 0)
        k->lanes = cg_row_nlanes(k) / (cg_row_bytes_in(k) ? 1 : 4);
    k->pf_cond = k->lanes > 0 ? cg_row_prefetch_cond(k) : NULL;
    k->prefetch = k->pf_cond != NULL;
    if (cg_row_record(c, kk, rk, number))
        return -1;
    kk->collapse = k->on->ndim >= 2 && !k->col;   /* the outer count unknown: its two loops'
                                                * rows shared (4 heads of 16 threads: 4 ran) */
    kk->parallel = c->nthreads > 1 && k->on->ndim > 0;
    if (kk->parallel) {
        const char *rows = cg_sym_numel_text(c, k->on);
        k->par_cond = cg_strf(c, "%s * %s >= %dLL && %s > 1", rows, cg_sym_numel_text(c, k->rn),
                              CG_PARALLEL_NUMEL, rows);
        kk->par_cond = k->par_cond;
    }
    if (may_stream)
        k->stream_cond = cg_strf(c, "%s * %s * %lldLL > %lldLL", cg_sym_numel_text(c, k->on),
                                 cg_sym_numel_text(c, k->rn), (long long)cg_row_moved(k, 1),
                                 (long long)c->stream_bytes);
    return 0;
}

/* Schedule row node v as one kernel: outer loops over the rows (parallel
 * when the work is large and there are several rows), the op's passes per
 * row, its epilogue; 0 or -1. */
int cg_sched_rows(cg_ctx *c, int v)
{
    int number = cg_kernel_begin(c);
    kir_kernel *kk = number < 0 ? NULL : cg_kir_add(c, CDY_KIR_ROWS);
    cg_row_kernel *rk = cdy_arena_alloc(&c->arena, sizeof(cg_row_kernel));
    if (!kk)
        return -1;
    if (!rk)
        return cg_fail(c, "out of memory");
    const cdy_graph *g = c->g;
    cg_rowshape *rs = &rk->rs;
    cg_rowk *k = &rk->k;
    cg_row_shape(g, v, rs);
    *k = (cg_rowk){.c = c, .v = v, .in = g->values[v].args[0], .rs = rs, .sib = -1};
    if (cg_row_setup(c, k, rs))
        return -1;
    if (!k->store)   /* the kernel's out_ptr0: never touched, no memory */
        c->plan->buffer_alloc[c->val_buf[v]] = CDY_BUF_UNUSED;
    if (!k->sib_store)   /* grad * xhat: only its column sum, computed here, reads it */
        c->plan->buffer_alloc[c->val_buf[k->sib]] = CDY_BUF_UNUSED;
    int f32 = g->values[v].meta.dtype == CDY_DT_FLOAT32 || cdy_dtype_lowp(g->values[v].meta.dtype);
    k->T = f32 ? "float" : "double";
    /* log_softmax only sums the exps (from 1 up): its terms under 2^-126 may flush */
    k->vexp = !f32 ? "exp" : g->values[v].op == CDY_OP_LOG_SOFTMAX ? "cdy_vexp_flushf"
                                                                   : "cdy_vexp_negf";
    /* a runtime row length (softmax's: a norm's rows are static) sums in float, as ATen's
     * vectorized softmax does at every length */
    k->A = f32 && (rs->nrow <= CG_ROW_FLOAT_ACC || k->rn_expr >= 0) ? "float" : "double";
    k->col = cg_row_columns(k);
    if (c->sym)
        return cg_row_sched_sym(c, kk, rk, number);
    k->may_stream = !k->nsum && cg_row_streams(k, rs->numel);
    k->stream = k->may_stream && !k->heavy;
    k->lanes = cg_row_lanes(k);
    k->prefetch = cg_row_prefetches(k);
    return cg_row_record(c, kk, rk, number);
}

static int cg_row_emit_loops(cg_ctx *c, cg_rowk *k, const cg_row_kernel *rk, int par,
                             int collapse);
static int cg_row_emit_streamed(cg_ctx *c, cg_rowk *k, const cg_row_kernel *rk, int par,
                                int collapse);

#define CG_ROW_EXACT_MAX 8
static int cg_row_exact_lens(const cg_rowk *k, int64_t *lens);
static int cg_row_call_exact(cg_ctx *c, const cg_rowk *k, const kir_kernel *kk,
                             const int64_t *lens, int ne);
static int cg_row_emit_body(cg_ctx *c, cg_rowk *k, const cg_row_kernel *rk,
                            const kir_kernel *kk);
static int cg_row_ranges(const cg_rowk *k, const kir_kernel *kk);
static int cg_row_emit_ranged(cg_ctx *c, cg_rowk *k, const cg_row_kernel *rk,
                              const kir_kernel *kk, const char *part, const int64_t *lens, int ne);

/* Emit row kernel kk (cg_sched_rows). */
int cg_emit_rows(cg_ctx *c, const kir_kernel *kk)
{
    const cg_row_kernel *rk = kk->x;
    cg_rowk k = rk->k;
    k.e = cg_value_expr(c, k.in);
    cdy_buf ob = {0};
    cdy_buf_puts(&ob, "out_ptr0[");
    cg_row_offset(&ob, k.on, k.rn, k.first);
    cdy_buf_puts(&ob, "]");
    char *os = cdy_buf_take(&ob);
    k.out = os ? cdy_arena_strdup(&c->arena, os) : NULL;
    free(os);
    if (!k.e || !k.out)
        return cg_fail(c, "out of memory");
    int64_t lens[CG_ROW_EXACT_MAX];
    int ne = rk->rs.numel > 0 && !kk->status ? cg_row_exact_lens(&k, lens) : 0;
    cg_emit_mark(c, kk);
    cg_nest *rn = k.rn, fixed = *rn;
    fixed.ssize[0] = -1;
    int ranged = cg_row_ranges(&k, kk);
    for (int i = 0; i < ne; i++) {   /* the exact lengths' helpers, rows in registers */
        fixed.size[0] = lens[i];
        k.rn = &fixed;
        k.lanes = cg_row_lanes(&k);  /* a static kernel's at this length */
        k.prefetch = 0;              /* rows of at most CG_ROW_EXACT_BYTES: too short */
        const char *part = cg_strf(c, "len%lld", (long long)lens[i]);
        int rc = ranged ? cg_row_emit_ranged(c, &k, rk, kk, part, NULL, 0) : 0;
        if (!ranged) {
            cg_emit_signature(c, kk, part);
            rc = cg_row_emit_body(c, &k, rk, kk);
            cdy_buf_puts(&c->src, "}\n");
        }
        k.rn = rn;
        k.lanes = rk->k.lanes;
        k.prefetch = rk->k.prefetch;
        if (rc)
            return -1;
    }
    if (ranged && rk->rs.numel > 0)
        return cg_row_emit_ranged(c, &k, rk, kk, NULL, lens, ne);
    cg_emit_signature(c, kk, NULL);
    if (ne && cg_row_call_exact(c, &k, kk, lens, ne))
        return -1;
    if (rk->rs.numel > 0 && cg_row_emit_body(c, &k, rk, kk))
        return -1;
    cdy_buf_puts(&c->src, "}\n");
    return 0;
}

/* The arguments of a call of one of symbolic row kernel k's helpers from
 * the kernel ("in_ptr0, out_ptr0, cdy_s", as cg_emit_signature), or NULL. */
static const char *cg_row_helper_args(cg_ctx *c, const cg_rowk *k)
{
    cdy_buf args = {0};
    for (int o = 0; o < k->nops; o++)
        cdy_buf_printf(&args, "%s%s_ptr%d", o ? ", " : "", k->ops[o].is_out ? "out" : "in",
                       k->ops[o].is_out ? o - k->first : o);
    cdy_buf_puts(&args, ", cdy_s");
    char *a = cdy_buf_take(&args);
    const char *r = a ? cdy_arena_strdup(&c->arena, a) : NULL;
    free(a);
    return r;
}

/* Emit the calls of row kernel kk's exact-length helpers (lens[0..ne),
 * cg_emit_rows), each returning when the row length is its length; 0 or -1. */
static int cg_row_call_exact(cg_ctx *c, const cg_rowk *k, const kir_kernel *kk,
                             const int64_t *lens, int ne)
{
    const char *a = cg_row_helper_args(c, k);
    const char *nt = cg_sym_size_text(c, k->rn, 0);
    if (!a || !nt)
        return cg_fail(c, "out of memory");
    for (int i = 0; i < ne; i++)
        cdy_buf_printf(&c->src, "    if (%s == %lldLL) {\n        kernel_%d_len%lld(%s);\n"
                       "        return;\n    }\n", nt, (long long)lens[i], kk->number,
                       (long long)lens[i], a);
    return 0;
}

/* 1 when symbolic row kernel k's loops are emitted once, in a helper over a
 * range of its rows that its parallel path (one range per thread) and its
 * serial path (all rows) both call (cg_row_emit_ranged), not once per path:
 * rows parallel per call (par_cond), no streamed stores, not column mode,
 * one or two outer dims, no error status.  Half the loops to compile: a
 * symbolic softmax's source (two exact-length helpers and the kernel) was
 * six copies of the loops. */
static int cg_row_ranges(const cg_rowk *k, const kir_kernel *kk)
{
    return k->par_cond && !k->stream_cond && !k->col && !kk->status &&
           (k->on->ndim == 1 || k->on->ndim == 2);
}

/* Emit symbolic row kernel k's function `part` (a helper's name; NULL: the
 * exported kernel, which first calls its exact-length helpers lens[0..ne))
 * as cg_row_ranges says: the helper <part>_rows over the rows [cdy_lo,
 * cdy_hi), then the function, which runs it over all rows, or when par_cond
 * holds in a parallel region over each thread's share as schedule(static)
 * splits them (the first n % threads threads one row more).  0 or -1. */
static int cg_row_emit_ranged(cg_ctx *c, cg_rowk *k, const cg_row_kernel *rk,
                              const kir_kernel *kk, const char *part, const int64_t *lens, int ne)
{
    cdy_buf *b = &c->src;
    const char *fn = part ? cg_strf(c, "%s_rows", part) : "rows";
    const char *args = cg_row_helper_args(c, k);
    const char *rows = cg_sym_numel_text(c, k->on);
    if (!fn || !args || !rows)
        return cg_fail(c, "out of memory");
    cg_emit_signature_x(c, kk, fn, ", const int64_t cdy_lo, const int64_t cdy_hi");
    cdy_buf_puts(b, "    if (cdy_lo >= cdy_hi)\n        return;\n");
    if (k->pf_cond && k->prefetch)
        cdy_buf_printf(b, "    const int64_t cdy_pfn = %s ? %s : 0;\n", k->pf_cond,
                       cg_sym_size_text(c, k->on, k->on->ndim - 1));
    k->range = 1;
    int rc = cg_row_emit_loops(c, k, rk, 0, 0);
    k->range = 0;
    if (rc)
        return -1;
    cdy_buf_puts(b, "}\nint omp_get_num_threads(void);\nint omp_get_thread_num(void);\n");
    cg_emit_signature(c, kk, part);
    if (ne && cg_row_call_exact(c, k, kk, lens, ne))
        return -1;
    cdy_buf_printf(b, "    if (%s) {\n"
                      "        #pragma omp parallel num_threads(NTHREADS)\n"
                      "        {\n"
                      "            const int64_t cdy_n = %s, cdy_nt = omp_get_num_threads();\n"
                      "            const int64_t cdy_t = omp_get_thread_num();\n"
                      "            const int64_t cdy_q = cdy_n / cdy_nt, cdy_r = cdy_n %% cdy_nt;\n"
                      "            const int64_t lo = cdy_t * cdy_q + (cdy_t < cdy_r ? cdy_t : cdy_r);\n"
                      "            kernel_%d_%s(%s, lo, lo + cdy_q + (cdy_t < cdy_r));\n"
                      "        }\n"
                      "    } else\n"
                      "        kernel_%d_%s(%s, 0, %s);\n}\n",
                   k->par_cond, rows, kk->number, fn, args, kk->number, fn, args, rows);
    return 0;
}

/* Emit row kernel k's loops (its row nest k->rn): parallel or not as
 * k->par_cond holds at run time, streamed or not as k->stream_cond, else as
 * scheduled (kk); 0 or -1. */
static int cg_row_emit_body(cg_ctx *c, cg_rowk *k, const cg_row_kernel *rk,
                            const kir_kernel *kk)
{
    if (k->pf_cond && k->prefetch)    /* symbolic sizes: the rows prefetched ahead, or none */
        cdy_buf_printf(&c->src, "    const int64_t cdy_pfn = %s ? %s : 0;\n", k->pf_cond,
                       cg_sym_size_text(c, k->on, k->on->ndim - 1));
    if (k->par_cond) {    /* symbolic sizes: parallel when large enough */
        cdy_buf_printf(&c->src, "    if (%s) {\n", k->par_cond);
        if (cg_row_emit_streamed(c, k, rk, 1, kk->collapse))
            return -1;
        cdy_buf_puts(&c->src, "    } else {\n");
        if (cg_row_emit_streamed(c, k, rk, 0, 0))
            return -1;
        cdy_buf_puts(&c->src, "    }\n");
        return 0;
    }
    if (k->stream_cond)
        return cg_row_emit_streamed(c, k, rk, 0, 0);
    return cg_row_emit_loops(c, k, rk, kk->parallel, kk->collapse);
}

/* Symbolic sizes: k's loops (parallel when par, the two outer collapsed when
 * collapse) streaming their stores when k->stream_cond holds at run time,
 * else plain; 0 or -1. */
static int cg_row_emit_streamed(cg_ctx *c, cg_rowk *k, const cg_row_kernel *rk, int par,
                                int collapse)
{
    if (!k->stream_cond)
        return cg_row_emit_loops(c, k, rk, par, collapse);
    cdy_buf_printf(&c->src, "    if (%s) {\n", k->stream_cond);
    k->stream = 1;
    int rc = cg_row_emit_loops(c, k, rk, par, collapse);
    k->stream = 0;
    if (rc)
        return -1;
    cdy_buf_puts(&c->src, "    } else {\n");
    if (cg_row_emit_loops(c, k, rk, par, collapse))
        return -1;
    cdy_buf_puts(&c->src, "    }\n");
    return 0;
}

/* Lanes of a symbolic row kernel's blocks when its loops get a second copy
 * for rows of whole blocks (no masked tails, cg_rowk.whole), else 0: a
 * runtime row length, a one-byte (mask) input (its passes all in blocks of
 * cg_row_nlanes), no streamed stores, not column mode.  The tails, never run
 * at such lengths, still cost: where + softmax over 4 x 128 x 128 floats
 * with a bool mask, a C harness on a Zen 4, 37.1 -> 32.5 us (static 27.6);
 * 16-lane rows of plain floats gained nothing. */
static int cg_row_whole_split(const cg_rowk *k)
{
    int last = k->rn->ndim - 1, nl = cg_row_nlanes(k);
    return !k->col && !k->stream && last >= 0 && k->rn->sym && k->rn->ssize[last] >= 0 &&
           cg_row_bytes_in(k) && k->lanes == nl ? nl : 0;
}

/* A symbolic row kernel's rows of at most this many bytes of its compute
 * type (8 AVX-512 registers) get a helper function of the loops at their
 * exact length (cg_row_exact_lens). */
#define CG_ROW_EXACT_BYTES 512

/* The row lengths, each a constant, that symbolic row kernel k gets a copy
 * of its loops for (into lens, at most CG_ROW_EXACT_MAX); their count.  A runtime
 * length of one row dim, not column mode, no streamed stores: one vector's
 * lanes times 1, 2, 4... up to CG_ROW_EXACT_BYTES, each summed in the lanes
 * a static kernel of that length takes (cg_row_lanes; they were the
 * compiling call's).  A masked row of 16 or 32 too (it had none: the
 * runtime loops' masked 64-lane block computed 4 times the exps, 4x16x16
 * causal softmax 1.14-1.16x the static kernel's time on the 16-core
 * Sapphire Rapids; on the host's Zen 4, where 16-lane blocks load the mask
 * badly (cg_row_bytes_in), the static kernel's and this copy's 1.3x the
 * masked block's).
 * At a constant length gcc unrolls the passes completely and keeps the row
 * in registers, as the static kernel: the runtime-length loops keep the
 * sums' lanes in memory and reload the stored exps.  Softmax, C harness on a
 * Zen 4, static / runtime length / this copy: 4x128x128 floats with a bool
 * mask (where) 27.5 / 33.2 / 28.0 us; 4x128x128 plain 25.4 / 27.1 / 25.5;
 * 4x16x16 0.78 / 0.88 / 0.78 (a copy whose length is not whole blocks, the
 * tails masked, ran 1.3-1.7 times as long as the runtime loops).  Each copy
 * is a function of its own (cg_emit_rows): inlined in the kernel, the extra
 * loops cost the runtime-length ones registers (4x512x512: 472 -> 491 us). */
static int cg_row_exact_lens(const cg_rowk *k, int64_t *lens)
{
    int last = k->rn->ndim - 1, n = 0;
    if (k->col || k->stream || last != 0 || !k->rn->sym || k->rn->ssize[last] < 0 ||
        k->lanes <= 0)
        return 0;
    int64_t tsize = strcmp(k->T, "float") ? 8 : 4;
    for (int64_t l = cg_row_nlanes(k) / 4; l * tsize <= CG_ROW_EXACT_BYTES && n < CG_ROW_EXACT_MAX;
         l *= 2)
        lens[n++] = l;
    return n;
}

static int cg_row_emit_nest(cg_ctx *c, cg_rowk *k, const cg_row_kernel *rk, int par,
                            int collapse);

/* Emit row kernel k's loops: one copy (cg_row_emit_nest), or with
 * cg_row_whole_split a copy for rows of whole lane blocks and one for the
 * others, chosen at run time; 0 or -1. */
static int cg_row_emit_loops(cg_ctx *c, cg_rowk *k, const cg_row_kernel *rk, int par,
                             int collapse)
{
    int nl = cg_row_whole_split(k);
    if (!nl)
        return cg_row_emit_nest(c, k, rk, par, collapse);
    cdy_buf_printf(&c->src, "    if (%s %% %dLL == 0) {\n",
                   cg_sym_size_text(c, k->rn, k->rn->ndim - 1), nl);
    k->whole = 1;
    int rc = cg_row_emit_nest(c, k, rk, par, collapse);
    k->whole = 0;
    if (rc)
        return -1;
    cdy_buf_puts(&c->src, "    } else {\n");
    if (cg_row_emit_nest(c, k, rk, par, collapse))
        return -1;
    cdy_buf_puts(&c->src, "    }\n");
    return 0;
}

/* Emit the passes of k's op (its rows' loops open) at indentation ind; 0 or -1. */
static int cg_row_passes(cg_rowk *k, const cg_row_kernel *rk, int ind)
{
    int op = k->c->g->values[k->v].op;
    return op == CDY_OP_SOFTMAX || op == CDY_OP_LOG_SOFTMAX ? cg_row_softmax(k, ind)
           : op == CDY_OP_SOFTMAX_BW ? cg_row_softmax_bw(k, ind)
           : op == CDY_OP_LAYER_NORM_BW ? cg_row_norm_bw(k, ind, rk->rs.nrow)
           : op == CDY_OP_LAYER_NORM_GX ? cg_row_norm_gx(k, ind, rk->rs.nrow)
                                        : cg_row_norm(k, ind, rk->rs.nrow);
}

/* Emit row kernel k with column sums (cg_row_pick_sums): per part t of np
 * (NTHREADS when par, else 1; an `omp for` over them), the rows [t * R /
 * np, (t + 1) * R / np) of the R rows, the outer dims flattened, their sums
 * into the part's zeroed doubles cdy_cp[t]; after the loop's barrier each
 * column's parts added in t order (the same for any team size) and stored,
 * the columns spread over the threads.  0 or -1. */
static int cg_row_emit_summed(cg_ctx *c, cg_rowk *k, const cg_row_kernel *rk, int par)
{
    cdy_buf *b = &c->src;
    long long np = par ? c->nthreads : 1, w = (long long)rk->rs.nrow;
    long long rows = (long long)(rk->rs.numel / rk->rs.nrow), prod = 1;
    int ns = k->nsum, n = k->on->ndim;
    cdy_buf_printf(b, "    double cdy_cp[%lld][%d][%lld] __attribute__((aligned(64)));\n", np, ns,
                   w);
    if (par)
        cdy_buf_puts(b, "    #pragma omp parallel num_threads(NTHREADS)\n    {\n"
                        "    #pragma omp for schedule(static)\n");
    cdy_buf_printf(b, "    for (int64_t cdy_t = 0; cdy_t < %lldLL; cdy_t++) {\n", np);
    cdy_buf_printf(b, "        double (*cdy_cs)[%lld] = cdy_cp[cdy_t];\n"
                      "        __builtin_memset(cdy_cs, 0, sizeof(cdy_cp[0]));\n"
                      "        const int64_t cdy_hi = (cdy_t + 1) * %lldLL / %lldLL;\n"
                      "        for (int64_t cdy_f = cdy_t * %lldLL / %lldLL; cdy_f < cdy_hi; "
                      "cdy_f++) {\n", w, rows, np, rows, np);
    for (int d = n - 1; d >= 0; d--) {
        cdy_buf_printf(b, "            const int64_t i%d = cdy_f / %lldLL %% %lldLL;\n", d, prod,
                       (long long)k->on->size[d]);
        prod *= k->on->size[d];
    }
    if (cg_row_passes(k, rk, 3))
        return -1;
    cdy_buf_puts(b, "        }\n    }\n");
    if (par)
        cdy_buf_puts(b, "    #pragma omp for schedule(static)\n");
    cdy_buf_printf(b, "    for (int64_t j = 0; j < %lldLL; j++) {\n", w);
    for (int i = 0; i < ns; i++) {
        int o = k->nops - ns + i;
        cdy_buf_printf(b, "        double a%d = cdy_cp[0][%d][j];\n"
                          "        for (int64_t t = 1; t < %lldLL; t++)\n"
                          "            a%d += cdy_cp[t][%d][j];\n"
                          "        out_ptr%d[j] = %s((%s)a%d);\n", i, i, np, i, i,
                       o - k->first, cg_st(k->ops[o].dtype),
                       cdy_dtype_table[k->ops[o].dtype].cctype, i);
    }
    cdy_buf_puts(b, par ? "    }\n    }\n" : "    }\n");
    return 0;
}

/* Emit row kernel k's outer loops (parallel when par) and its op's passes; 0 or -1. */
static int cg_row_emit_nest(cg_ctx *c, cg_rowk *k, const cg_row_kernel *rk, int par,
                            int collapse)
{
    if (k->nsum)
        return cg_row_emit_summed(c, k, rk, par);
    int ind = cg_row_outer(k, par, collapse);
    if (cg_row_passes(k, rk, ind))
        return -1;
    while (--ind > 0) {
        cg_indent(&c->src, ind);
        cdy_buf_puts(&c->src, "}\n");
    }
    if (k->stream)
        cg_stream_close(c, 1, par);
    return 0;
}
