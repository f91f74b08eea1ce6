/* pool.c - windowed nodes (kind 'W': max / avg / adaptive pooling and nearest
 * upsample over the last two dims of a 3-D or 4-D tensor): one kernel each.
 * Loops over the output in its memory order (channels_last: C innermost, a
 * simd loop); once both spatial loops are open, the window's bounds; per
 * output element a window loop whose body recomputes the input's pointwise
 * prologue from leaves (it is fused, never realized) and combines it exactly
 * as ATen's CPU kernel does. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compiler/cg.h"

/* What one windowed node computes, decoded from its args (see cdynamo.h). */
typedef struct {
    int op;
    int hd, wd;                       /* the spatial dims */
    int64_t H, W, OH, OW;             /* input and output spatial sizes */
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t divisor;                  /* avg: divisor_override, 0 none */
    int count_pad;                    /* avg: count_include_pad */
    double sch, scw;                  /* upsample: torch's scale args, 0 none */
    int exact;                        /* upsample: nearest-exact */
} cg_pool;

/* Unpack the pair scalar a (h << 32 | w) into *h and *w. */
static void cg_pool_pair(const cdy_value *a, int64_t *h, int64_t *w)
{
    *h = (int64_t)((uint64_t)a->i >> 32);
    *w = (int64_t)((uint64_t)a->i & 0xffffffffu);
}

/* Decode node v's parameters into *p (args already checked). */
static void cg_pool_decode(const cdy_graph *g, int v, cg_pool *p)
{
    const cdy_value *val = &g->values[v];
    const cdy_meta *im = &g->values[val->args[0]].meta, *om = &val->meta;
    memset(p, 0, sizeof(*p));
    p->op = val->op;
    p->hd = im->ndim - 2;
    p->wd = im->ndim - 1;
    p->H = im->sizes[p->hd];
    p->W = im->sizes[p->wd];
    p->OH = om->sizes[p->hd];
    p->OW = om->sizes[p->wd];
    p->dh = p->dw = 1;
    if (p->op == CDY_OP_MAX_POOL2D || p->op == CDY_OP_AVG_POOL2D) {
        cg_pool_pair(&g->values[val->args[1]], &p->kh, &p->kw);
        cg_pool_pair(&g->values[val->args[2]], &p->sh, &p->sw);
        cg_pool_pair(&g->values[val->args[3]], &p->ph, &p->pw);
    }
    if (p->op == CDY_OP_MAX_POOL2D)
        cg_pool_pair(&g->values[val->args[4]], &p->dh, &p->dw);
    if (p->op == CDY_OP_AVG_POOL2D) {
        p->divisor = g->values[val->args[4]].i >> 1;
        p->count_pad = (int)(g->values[val->args[4]].i & 1);
    }
    if (p->op == CDY_OP_UPSAMPLE_NEAREST2D) {
        p->sch = g->values[val->args[1]].f;
        p->scw = g->values[val->args[2]].f;
        p->exact = g->values[val->args[3]].i != 0;
    }
}

static int cg_pool_is_max(int op);

/* 1 if dtype dt is one eager's CPU kernel of op accepts. */
static int cg_pool_dtype_ok(int op, int dt)
{
    if (cdy_dtype_lowp(dt))   /* a max is one of its 16-bit inputs, exactly; averages run
                                 as torch's kernels (their rounding points) */
        return cg_pool_is_max(op);
    if (cdy_dtype_table[dt].is_float)
        return 1;
    switch (op) {
    case CDY_OP_MAX_POOL2D: return dt != CDY_DT_BOOL;
    case CDY_OP_AVG_POOL2D: return dt == CDY_DT_INT64;
    case CDY_OP_UPSAMPLE_NEAREST2D: return dt == CDY_DT_UINT8;
    default: return 0;
    }
}

/* Check node v's scalar args: int pairs with kernel, stride, dilation >= 1
 * and padding >= 0; avg flags >= 0; upsample scales float >= 0. 0 or -1. */
static int cg_pool_check_args(cg_ctx *c, int v, const char *name)
{
    const cdy_value *val = &c->g->values[v];
    for (int a = 1; a < val->nargs; a++) {
        const cdy_value *s = &c->g->values[val->args[a]];
        int flt = cdy_dtype_table[s->meta.dtype].is_float;
        int want_flt = val->op == CDY_OP_UPSAMPLE_NEAREST2D && a < 3;
        if (s->kind != CDY_VAL_SCALAR || flt != want_flt)
            return cg_fail(c, "value %d (%s): arg %d must be a %s scalar", v, name, a,
                           want_flt ? "float" : "int");
        if (want_flt && !(s->f >= 0 && isfinite(s->f)))
            return cg_fail(c, "value %d (%s): bad scale", v, name);
        if (!want_flt && s->i < 0)
            return cg_fail(c, "value %d (%s): negative parameter", v, name);
        int64_t h, w;
        cg_pool_pair(s, &h, &w);
        int pad = a == 3 || val->op == CDY_OP_AVG_POOL2D || val->op == CDY_OP_UPSAMPLE_NEAREST2D;
        if (!want_flt && !pad && (h < 1 || w < 1))
            return cg_fail(c, "value %d (%s): kernel, stride and dilation must be >= 1", v, name);
        if (val->op == CDY_OP_AVG_POOL2D && a < 3 && (h < 1 || w < 1))
            return cg_fail(c, "value %d (%s): kernel and stride must be >= 1", v, name);
    }
    return 0;
}

/* Check windowed node v: a tensor input of rank 3 or 4, a result of the same
 * rank and dtype (one eager accepts) and the same non-spatial sizes, and
 * valid scalar parameters.  Every window is clamped to the input in the
 * kernel, so any output size is memory safe. */
int cg_check_pool(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    const char *name = cdy_op_table[val->op].name;
    const cdy_value *in = &c->g->values[val->args[0]];
    const cdy_meta *im = &in->meta, *om = &val->meta;
    if (in->kind == CDY_VAL_SCALAR || (im->ndim != 3 && im->ndim != 4) || om->ndim != im->ndim)
        return cg_fail(c, "value %d (%s): input must be a 3-D or 4-D tensor, result too", v, name);
    if (om->dtype != im->dtype || !cg_pool_dtype_ok(val->op, im->dtype))
        return cg_fail(c, "value %d (%s): dtype %s is not supported", v, name,
                       cdy_dtype_table[im->dtype].name);
    for (int d = 0; d < im->ndim - 2; d++)
        if (om->sizes[d] != im->sizes[d])
            return cg_fail(c, "value %d (%s): non-spatial sizes differ", v, name);
    return cg_pool_check_args(c, v, name);
}

/* The C literal a max window starts from in dtype dt (its lowest value). */
static const char *cg_pool_lowest(int dt)
{
    static const char *lo[] = {"0", "0", "(-128)", "(-32768)", "(-2147483647 - 1)",
                               "(-9223372036854775807LL - 1)", "(-INFINITY)", "(-INFINITY)",
                               "(-INFINITY)", "(-INFINITY)"};
    return lo[dt];
}

/* 1 for the ops that take the maximum of their window. */
static int cg_pool_is_max(int op)
{
    return op == CDY_OP_MAX_POOL2D || op == CDY_OP_ADAPTIVE_MAX_POOL2D;
}

/* The accumulator's C type: ATen's (float sums in float; 1x1 adaptive average
 * is torch's mean: double here, more exact than its cascade sum). */
static const char *cg_pool_acc_type(const cg_pool *p, int dt)
{
    if (p->op == CDY_OP_ADAPTIVE_AVG_POOL2D && p->OH == 1 && p->OW == 1)
        return "double";
    return cdy_dtype_table[dt].cctype;
}

/* Emit the source index of upsample dim (out var o, sizes in/out, scale sc) as
 * `const int64_t <var>0 = ...;`, as ATen's nearest_idx / nearest_exact_idx. */
static void cg_pool_nearest(cdy_buf *b, int ind, char var, int o, int64_t in, int64_t out,
                            double sc, int exact)
{
    cg_indent(b, ind);
    if (out == in && !exact) {
        cdy_buf_printf(b, "const int64_t %c0 = o%d;\n", var, o);
        return;
    }
    if (out == 2 * in && !exact) {
        cdy_buf_printf(b, "const int64_t %c0 = o%d >> 1;\n", var, o);
        return;
    }
    float s = sc > 0 ? (float)(1.0 / sc) : out > 0 ? (float)in / (float)out : 0.0f;
    if (exact)
        cdy_buf_printf(b, "int64_t %c0 = (int64_t)floorf((float)(((double)o%d + 0.5) * "
                          "(double)%af));\n", var, o, (double)s);
    else
        cdy_buf_printf(b, "int64_t %c0 = (int64_t)floorf((float)o%d * %af);\n", var, o,
                       (double)s);
    cg_indent(b, ind);
    cdy_buf_printf(b, "if (%c0 > %lldLL) %c0 = %lldLL;\n", var, (long long)(in - 1), var,
                   (long long)(in - 1));
}

/* Emit one spatial dim's window [<var>0, <var>1) for output loop o<o>
 * (sizes in, out; kernel k, stride s, padding pd, dilation dl); avg also
 * gets the padded extent <var>p = <var>1 - <var>0 before clamping. */
static void cg_pool_bounds(cdy_buf *b, int ind, const cg_pool *p, char var, int o, int64_t in,
                           int64_t out, int64_t k, int64_t s, int64_t pd, int64_t dl)
{
    long long I = (long long)in, O = (long long)out;
    cg_indent(b, ind);
    switch (p->op) {
    case CDY_OP_MAX_POOL2D:
        cdy_buf_printf(b, "int64_t %c0 = o%d * %lldLL - %lldLL, %c1 = %c0 + %lldLL;\n", var, o,
                       (long long)s, (long long)pd, var, var, (long long)((k - 1) * dl + 1));
        cg_indent(b, ind);
        cdy_buf_printf(b, "if (%c1 > %lldLL) %c1 = %lldLL;\n", var, I, var, I);
        cg_indent(b, ind);
        cdy_buf_printf(b, "while (%c0 < 0) %c0 += %lldLL;\n", var, var, (long long)dl);
        break;
    case CDY_OP_AVG_POOL2D:
        cdy_buf_printf(b, "int64_t %c0 = o%d * %lldLL - %lldLL, %c1 = %c0 + %lldLL;\n", var, o,
                       (long long)s, (long long)pd, var, var, (long long)k);
        cg_indent(b, ind);
        cdy_buf_printf(b, "if (%c1 > %lldLL) %c1 = %lldLL;\n", var, I + pd, var, I + pd);
        cg_indent(b, ind);
        cdy_buf_printf(b, "const int64_t %cp = %c1 - %c0;\n", var, var, var);
        cg_indent(b, ind);
        cdy_buf_printf(b, "if (%c0 < 0) %c0 = 0;\n", var, var);
        cg_indent(b, ind);
        cdy_buf_printf(b, "if (%c1 > %lldLL) %c1 = %lldLL;\n", var, I, var, I);
        break;
    case CDY_OP_UPSAMPLE_NEAREST2D:
        cdy_buf_puts(b, "/* nearest source index */\n");
        cg_pool_nearest(b, ind, var, o, in, out, var == 'h' ? p->sch : p->scw, p->exact);
        cg_indent(b, ind);
        cdy_buf_printf(b, "const int64_t %c1 = %c0 + 1;\n", var, var);
        break;
    default:   /* adaptive: [floor(o * in / out), ceil((o + 1) * in / out)) */
        cdy_buf_printf(b, "const int64_t %c0 = o%d * %lldLL / %lldLL, %c1 = ((o%d + 1) * %lldLL + "
                          "%lldLL) / %lldLL;\n", var, o, I, O, var, o, I, O - 1, O);
        break;
    }
}

/* Append operand o's offset: dims other than hd/wd use the output loop vars
 * o<d>, the spatial ones ih / iw (stride table st, rank n). */
static void cg_pool_offset(cdy_buf *b, const int64_t *st, int n, int hd, int wd)
{
    int any = 0;
    for (int d = 0; d < n; d++) {
        if (st[d] == 0)
            continue;
        cdy_buf_puts(b, any ? " + " : "");
        if (d == hd)
            cdy_buf_puts(b, "ih");
        else if (d == wd)
            cdy_buf_puts(b, "iw");
        else
            cdy_buf_printf(b, "o%d", d);
        if (st[d] != 1)
            cdy_buf_printf(b, " * %lldLL", (long long)st[d]);
        any = 1;
    }
    if (!any)
        cdy_buf_puts(b, "0");
}

/* Order the output dims for the loops: size-1 dims first, then by the
 * output's strides, largest outermost (ties by dim order), into order[]. */
static void cg_pool_order(const cdy_meta *om, int *order)
{
    int n = om->ndim;
    for (int d = 0; d < n; d++)
        order[d] = d;
    for (int i = 1; i < n; i++) {
        int d = order[i], j = i;
        while (j > 0) {
            int e = order[j - 1];
            int before = om->sizes[e] == 1 ||
                         (om->sizes[d] != 1 && om->strides[e] >= om->strides[d]);
            if (before)
                break;
            order[j] = e;
            j--;
        }
        order[j] = d;
    }
}

/* Open the channel-block loop over dim cd (size C, block CB) at ind:
 * `for (int64_t o<cd> = cb; o<cd> < ce; o<cd>++)`, simd when asked. */
static void cg_pool_cloop(cdy_buf *b, int ind, int cd, int simd)
{
    if (simd) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "#pragma omp simd\n");
    }
    cg_indent(b, ind);
    cdy_buf_printf(b, "for (int64_t o%d = cb; o%d < ce; o%d++) {\n", cd, cd, cd);
}

/* Emit the window loops and, inside (within a channel loop over dim cd in
 * block mode, cd >= 0), the loads, the prologue nodes and the combine of
 * the accumulator `acc` (block mode: acc[o<cd> - cb]) with the input's
 * value.  Float max is ATen's `if (x > acc || isnan(x)) acc = x`, kept so
 * for a plain input outside block mode (GCC vectorizes small fixed windows
 * of it); else written as a select (vectorized over the channels in block
 * mode, branch-free with a prologue): x replaces acc unless x <= acc or acc
 * is NaN (the same result).
 * 0 or -1. */
static int cg_pool_window(cg_ctx *c, int v, const cg_pool *p, const cg_operand *ops, int nops,
                          int ind, int cd)
{
    cdy_buf *b = &c->src;
    const cdy_graph *g = c->g;
    int in = g->values[v].args[0], n = g->values[v].meta.ndim, open = 2 + (cd >= 0);
    cg_indent(b, ind);
    cdy_buf_printf(b, "for (int64_t ih = h0; ih < h1; ih += %lldLL) {\n", (long long)p->dh);
    if (cd < 0 && p->op == CDY_OP_ADAPTIVE_AVG_POOL2D && p->OH == 1 && p->OW == 1) {
        cg_indent(b, ind + 1);     /* torch's mean: its order is not a loop's either */
        cdy_buf_puts(b, "#pragma omp simd reduction(+:acc)\n");
    }
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "for (int64_t iw = w0; iw < w1; iw += %lldLL) {\n", (long long)p->dw);
    if (cd >= 0)
        cg_pool_cloop(b, ind + 2, cd, 1);
    ind += open;
    for (int o = 0; o < nops; o++) {
        if (ops[o].is_out)
            continue;
        cg_indent(b, ind);
        int lowp = cdy_dtype_lowp(ops[o].dtype);   /* widened: cg_ld */
        cdy_buf_printf(b, "const %s x%d = %s(in_ptr%d[",
                       lowp ? "float" : cdy_dtype_table[ops[o].dtype].ctype, o,
                       cg_ld(ops[o].dtype), o);
        cg_pool_offset(b, ops[o].stride, n, p->hd, p->wd);
        cdy_buf_puts(b, "]);\n");
    }
    for (int u = 0; u < g->nvalues; u++)
        if (u != v && c->live[u] && g->values[u].kind == CDY_VAL_NODE && !cg_is_leaf(c, u) &&
            cg_emit_node(c, u, ind))
            return -1;
    char *e = cg_value_expr(c, in);
    char *acc = cd >= 0 ? cg_strf(c, "acc[o%d - cb]", cd) : cg_strf(c, "acc");
    if (!e || !acc)
        return cg_fail(c, "out of memory");
    cg_indent(b, ind);
    if (cg_pool_is_max(p->op) && cdy_dtype_table[g->values[in].meta.dtype].is_float && cd < 0 &&
        cg_is_leaf(c, in))
        cdy_buf_printf(b, "%s = %s > %s || %s != %s ? %s : %s;\n", acc, e, acc, e, e, e, acc);
    else if (cg_pool_is_max(p->op) && cdy_dtype_table[g->values[in].meta.dtype].is_float)
        cdy_buf_printf(b, "{ const %s a_ = %s; %s = !(%s <= a_) & (a_ == a_) ? %s : a_; }\n",
                       cdy_dtype_table[g->values[in].meta.dtype].cctype, acc, acc, e, e);
    else if (cg_pool_is_max(p->op))
        cdy_buf_printf(b, "%s = %s > %s ? %s : %s;\n", acc, e, acc, e, acc);
    else if (p->op == CDY_OP_UPSAMPLE_NEAREST2D)
        cdy_buf_printf(b, "%s = %s;\n", acc, e);
    else
        cdy_buf_printf(b, "%s += %s;\n", acc, e);
    for (int i = 1; i <= open; i++) {
        cg_indent(b, ind - i);
        cdy_buf_puts(b, "}\n");
    }
    return 0;
}

/* Emit the store of the output element from accumulator expression acc:
 * acc itself, or the average of the window. */
static void cg_pool_store(cg_ctx *c, const cg_pool *p, const cdy_meta *om, const char *acc,
                          int chl, int ind)
{
    cdy_buf *b = &c->src;
    const char *oct = cdy_dtype_table[om->dtype].ctype;
    const char *cct = cdy_dtype_table[om->dtype].cctype;
    cg_indent(b, ind);
    cdy_buf_puts(b, "out_ptr0[");
    cg_pool_offset(b, om->strides, om->ndim, -1, -1);
    if (p->op == CDY_OP_AVG_POOL2D && p->divisor)
        cdy_buf_printf(b, "] = h0 < h1 && w0 < w1 ? (%s)(%s / (%s)%lldLL) : 0;\n", oct, acc, cct,
                       (long long)p->divisor);
    else if (p->op == CDY_OP_AVG_POOL2D)
        cdy_buf_printf(b, "] = h0 < h1 && w0 < w1 ? (%s)(%s / (%s)(%s)) : 0;\n", oct, acc, cct,
                       p->count_pad ? "hp * wp" : "(h1 - h0) * (w1 - w0)");
    else if (p->op == CDY_OP_ADAPTIVE_AVG_POOL2D && p->OH == 1 && p->OW == 1)
        cdy_buf_printf(b, "] = (%s)(%s / %lld.0);\n", oct, acc, (long long)(p->H * p->W));
    else if (p->op == CDY_OP_ADAPTIVE_AVG_POOL2D && chl)
        cdy_buf_printf(b, "] = %s / (%s)((h1 - h0) * (w1 - w0));\n", acc, cct);
    else if (p->op == CDY_OP_ADAPTIVE_AVG_POOL2D)
        cdy_buf_printf(b, "] = %s / (%s)(h1 - h0) / (%s)(w1 - w0);\n", acc, cct, cct);
    else
        cdy_buf_printf(b, "] = %s(%s);\n", cg_st(om->dtype), acc);   /* 16 bits: cg_st */
}

/* The record of a window kernel: the decoded node, the order of the output
 * loops, block mode (channels_last: simd over a block of channels); whether
 * the outer loop runs in parallel is the kernel's. */
typedef struct {
    cg_pool p;
    int order[CDY_MAX_NDIM];
    int simd;
} cg_pool_kernel;

/* Print window kernel kk in the post-fusion IR. */
void cg_print_pool(cg_ctx *c, const kir_kernel *kk)
{
    const cg_pool_kernel *pk = kk->x;
    int k = kk->number, v = kk->node, nops = kk->nops, par = kk->parallel, simd = pk->simd;
    const cg_operand *ops = kk->ops;
    const cdy_value *val = &c->g->values[v];
    cdy_buf *ir = &c->ir_post;
    cdy_buf_printf(ir, "kernel_%d: window %%%d %s of %%%d ", k, v, cdy_op_table[val->op].name,
                   val->args[0]);
    cg_ir_dims(ir, c->g->values[val->args[0]].meta.sizes, val->meta.ndim);
    cdy_buf_puts(ir, " -> ");
    cg_ir_dims(ir, val->meta.sizes, val->meta.ndim);
    cdy_buf_puts(ir, " strides ");
    cg_ir_dims(ir, val->meta.strides, val->meta.ndim);
    cdy_buf_puts(ir, "\n");
    cg_ir_fuses(c, ir, kk);
    for (int o = 0; o < nops; o++) {
        cdy_buf_puts(ir, ops[o].is_out ? "  store " : "  load  ");
        cg_ir_param(ir, ops, nops, o);
        cdy_buf_puts(ir, "\n");
    }
    cdy_buf_printf(ir, "  vectorized: %s\n", simd ? "yes: omp simd over blocks of channels "
                   "(channels_last: an accumulator array per block)" : "no: the innermost loop is a spatial one");
    cdy_buf_printf(ir, "  parallel: %s\n", par ? "yes: omp parallel for over the outer loop"
                                              : "no: small");
    cdy_buf_printf(&c->ir_dec, "  kernel_%d is a separate kernel: window %%%d %s (values "
                               "before it are realized first; its prologue is fused)\n",
                   k, v, cdy_op_table[val->op].name);
}

/* Channels per block of the channels_last kernels' accumulator array. */
#define CG_POOL_CBLOCK 512

/* Emit the channel-block body (channels_last: innermost output dim cd of
 * size C with unit stride), as ATen's channels_last kernels: per block of
 * channels an accumulator array, initialized, combined over the window by a
 * simd loop over the channels (same per-channel order), then stored. */
static int cg_pool_cblock(cg_ctx *c, int v, const cg_pool *p, const cg_operand *ops, int nops,
                          int cd, int ind)
{
    cdy_buf *b = &c->src;
    const cdy_meta *om = &c->g->values[v].meta;
    int64_t C = om->sizes[cd], CB = C < CG_POOL_CBLOCK ? C : CG_POOL_CBLOCK;
    const char *acct = cg_pool_acc_type(p, om->dtype);
    cg_indent(b, ind);
    cdy_buf_printf(b, "for (int64_t cb = 0; cb < %lldLL; cb += %lldLL) {\n", (long long)C,
                   (long long)CB);
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "const int64_t ce = cb + %lldLL < %lldLL ? cb + %lldLL : %lldLL;\n",
                   (long long)CB, (long long)C, (long long)CB, (long long)C);
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "%s acc[%lld];\n", acct, (long long)CB);
    cg_pool_cloop(b, ind + 1, cd, 1);
    cg_indent(b, ind + 2);
    cdy_buf_printf(b, "acc[o%d - cb] = %s;\n", cd,
                   cg_pool_is_max(p->op) ? cg_pool_lowest(om->dtype) : "0");
    cg_indent(b, ind + 1);
    cdy_buf_puts(b, "}\n");
    if (cg_pool_window(c, v, p, ops, nops, ind + 1, cd))
        return -1;
    char *acc = cg_strf(c, "acc[o%d - cb]", cd);
    if (!acc)
        return cg_fail(c, "out of memory");
    cg_pool_cloop(b, ind + 1, cd, 1);
    cg_pool_store(c, p, om, acc, 1, ind + 2);
    cg_indent(b, ind + 1);
    cdy_buf_puts(b, "}\n");
    cg_indent(b, ind);
    cdy_buf_puts(b, "}\n");
    return 0;
}

/* Emit the loops over the output (in order[]; in block mode, simd, the
 * innermost one is the channel block), the window bounds once both spatial
 * loops are open, then the accumulator, the window and the store. */
static int cg_pool_loops(cg_ctx *c, int v, const cg_pool *p, const cg_operand *ops, int nops,
                         const int *order, int par, int collapse, int simd)
{
    cdy_buf *b = &c->src;
    const cdy_meta *om = &c->g->values[v].meta;
    int n = om->ndim, ind = 1, opened = 0, nl = simd ? n - 1 : n;
    for (int i = 0; i < nl; i++, ind++) {
        int d = order[i];
        if (i == 0 && par) {
            cg_indent(b, ind);
            cdy_buf_printf(b, "#pragma omp parallel for num_threads(NTHREADS) schedule(static)%s\n",
                           collapse ? " collapse(2)" : "");
        }
        cg_indent(b, ind);
        cdy_buf_printf(b, "for (int64_t o%d = 0; o%d < %lldLL; o%d++) {\n", d, d,
                       (long long)om->sizes[d], d);
        opened += d == p->hd || d == p->wd;
        if (opened == 2 && (d == p->hd || d == p->wd)) {
            cg_pool_bounds(b, ind + 1, p, 'h', p->hd, p->H, p->OH, p->kh, p->sh, p->ph, p->dh);
            cg_pool_bounds(b, ind + 1, p, 'w', p->wd, p->W, p->OW, p->kw, p->sw, p->pw, p->dw);
        }
    }
    if (simd && cg_pool_cblock(c, v, p, ops, nops, order[n - 1], ind))
        return -1;
    if (!simd) {
        cg_indent(b, ind);
        cdy_buf_printf(b, "%s acc = %s;\n", cg_pool_acc_type(p, om->dtype),
                       cg_pool_is_max(p->op) ? cg_pool_lowest(om->dtype) : "0");
        if (cg_pool_window(c, v, p, ops, nops, ind, -1))
            return -1;
        cg_pool_store(c, p, om, "acc", 0, ind);
    }
    while (--ind > 0) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n");
    }
    return 0;
}

/* Schedule windowed node v as a kernel: its input's pointwise producers are
 * recomputed per window element from leaves in the input's iteration space;
 * 0 or -1. */
int cg_sched_pool(cg_ctx *c, int v)
{
    int number = cg_kernel_begin(c);
    kir_kernel *k = number < 0 ? NULL : cg_kir_add(c, CDY_KIR_WINDOW);
    if (!k)
        return -1;
    const cdy_graph *g = c->g;
    const cdy_value *val = &g->values[v];
    const cdy_meta *im = &g->values[val->args[0]].meta, *om = &val->meta;
    cg_operand *ops = cdy_arena_alloc(&c->arena, sizeof(cg_operand) * CG_MAX_OPS);
    cg_nest *nest = cdy_arena_alloc(&c->arena, sizeof(cg_nest));
    int *outs = cdy_arena_alloc(&c->arena, sizeof(int));
    cg_pool_kernel *pk = cdy_arena_alloc(&c->arena, sizeof(cg_pool_kernel));
    if (!ops || !nest || !outs || !pk)
        return cg_fail(c, "out of memory");
    outs[0] = v;
    cg_group grp = {im->ndim, im->sizes, 1, outs};
    cg_mark_live(c, &grp);
    int nops = cg_operands(c, &grp, ops);
    if (nops < 0)
        return -1;
    cg_pool *p = &pk->p;
    cg_pool_decode(g, v, p);
    cg_pool_order(om, pk->order);
    nest->ndim = om->ndim;          /* for the header comment: the output loops */
    for (int i = 0; i < om->ndim; i++)
        nest->size[i] = om->sizes[pk->order[i]];
    int last = pk->order[om->ndim - 1];
    /* block mode: the channels are innermost in the output and the input (channels_last) */
    pk->simd = last != p->hd && last != p->wd && om->strides[last] == 1 && om->sizes[last] > 1 &&
               (im->sizes[p->hd] == 1 || im->strides[last] < im->strides[p->hd]) &&
               (im->sizes[p->wd] == 1 || im->strides[last] < im->strides[p->wd]);
    int64_t onumel = cdy_meta_numel(om), inumel = cdy_meta_numel(im);
    int64_t work = onumel > inumel ? onumel : inumel;
    k->number = number;
    k->node = v;
    k->grp = grp;
    k->ops = ops;
    k->nops = nops;
    k->nest = nest;
    k->numel = onumel;
    k->parallel = c->nthreads > 1 && work >= CG_PARALLEL_NUMEL && om->sizes[pk->order[0]] > 0;
    k->collapse = k->parallel && om->ndim - pk->simd >= 2 &&
                  om->sizes[pk->order[0]] < 4 * (int64_t)c->nthreads;
    k->vector = pk->simd;
    k->threads = "NTHREADS";
    k->status = cg_kernel_gathers(c);
    k->x = pk;
    return cg_kir_fuse(c, k);
}

/* Emit window kernel k (cg_sched_pool). */
int cg_emit_pool(cg_ctx *c, const kir_kernel *k)
{
    const cg_pool_kernel *pk = k->x;
    cg_emit_header(c, k);
    if (k->numel > 0 && cg_pool_loops(c, k->node, &pk->p, k->ops, k->nops, pk->order,
                                      k->parallel, k->collapse, pk->simd))
        return -1;
    cdy_buf_puts(&c->src, "}\n");
    return 0;
}
