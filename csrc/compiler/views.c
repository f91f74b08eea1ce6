/* views.c - view nodes (kind 'V'): VIEW (an alias of its base: slicing,
 * select, permute, expand, reshape as a view...) and VIEW_COPY (a new tensor
 * whose elements are its base's at other indices: flip, clone, contiguous).
 *
 * A view read by a kernel and not realized is a load of its base's buffer
 * with the view's strides and element offset (cdy_value.view_*): no buffer,
 * no torch call.  A VIEW that must exist as a tensor (a graph output, an
 * extern's argument) is realized by torch: its call runs as an extern step
 * on its realized args, so it aliases them as in eager.  A realized
 * VIEW_COPY is a pointwise kernel output whose value is the load. */
#include <stdio.h>
#include <string.h>

#include "compiler/cg.h"

/* 1 if value v of g is a view node (kind 'V'). */
int cg_is_view(const cdy_graph *g, int v)
{
    return g->values[v].kind == CDY_VAL_NODE && g->values[v].op >= 0 &&
           g->values[v].op < CDY_OP_COUNT && cdy_op_table[g->values[v].op].kind == 'V';
}

/* 1 if value v of g is an aliasing view (VIEW). */
int cg_view_is_alias(const cdy_graph *g, int v)
{
    return cdy_value_is_alias(&g->values[v]);
}

/* Make copy node v (VIEW_COPY) an aliasing VIEW of its base. */
void cg_view_make_alias(cdy_graph *g, int v)
{
    g->values[v].op = CDY_OP_VIEW;
}

/* 1 if b is a tensor value earlier than v and not an aliasing VIEW (a base
 * that kinds V and G read from its own buffer). */
int cg_base_is_earlier_tensor(const cdy_graph *g, int v, int b)
{
    return b >= 0 && b < v && g->values[b].kind != CDY_VAL_SCALAR && !cg_view_is_alias(g, b);
}

/* Lowest and highest element offsets a meta-shaped walk with strides st and
 * offset off touches, into *lo / *hi; 0 if it touches nothing (numel 0). */
int cg_view_extent(const cdy_meta *m, const int64_t *st, int64_t off, int64_t *lo, int64_t *hi)
{
    *lo = *hi = off;
    for (int d = 0; d < m->ndim; d++) {
        if (m->sizes[d] == 0)
            return 0;
        int64_t span = (m->sizes[d] - 1) * st[d];
        if (span < 0)
            *lo += span;
        else
            *hi += span;
    }
    return 1;
}

/* Check view node v: args earlier, a tensor base that is not a VIEW, the
 * same dtype, and every element it reads inside the base's own elements. */
int cg_check_view(cg_ctx *c, int v)
{
    const cdy_graph *g = c->g;
    const cdy_value *val = &g->values[v];
    if (cg_check_meta(c, v, &val->meta))
        return -1;
    if (val->nargs < 1 || val->nargs > CDY_MAX_NODE_ARGS)
        return cg_fail(c, "value %d (view): %d args", v, val->nargs);
    for (int a = 0; a < val->nargs; a++)
        if (val->args[a] < 0 || val->args[a] >= v ||
            g->values[val->args[a]].kind == CDY_VAL_SCALAR)
            return cg_fail(c, "value %d (view): arg %d is not an earlier tensor", v, a);
    int b = val->view_base;
    if (!cg_base_is_earlier_tensor(g, v, b))
        return cg_fail(c, "value %d (view): base %d is not an earlier tensor", v, b);
    const cdy_meta *bm = &g->values[b].meta;
    if (bm->dtype != val->meta.dtype)
        return cg_fail(c, "value %d (view): dtype differs from its base's", v);
    int64_t lo, hi, blo, bhi;
    if (!cg_view_extent(&val->meta, val->view_strides, val->view_offset, &lo, &hi))
        return 0;
    if (!cg_view_extent(bm, bm->strides, 0, &blo, &bhi) || lo < blo || hi > bhi)
        return cg_fail(c, "value %d (view): reads outside its base", v);
    return 0;
}

/* Mark in real[] the values views need realized: the base of every view
 * that is read or realized, and the args of every realized VIEW (torch
 * makes the view from them).  Views are visited last to first, so a chain
 * of realized views realizes its links. */
void cg_view_mark_real(cg_ctx *c, char *real)
{
    const cdy_graph *g = c->g;
    char *used = cdy_arena_alloc(&c->arena, (size_t)g->nvalues + 1);
    if (!used)
        return;   /* cg_scratch's allocations fail next; nothing is emitted */
    for (int v = 0; v < g->nvalues; v++)
        for (int a = 0; g->values[v].kind == CDY_VAL_NODE && a < g->values[v].nargs; a++)
            used[g->values[v].args[a]] = 1;
    for (int v = g->nvalues - 1; v >= 0; v--) {
        if (!cg_is_view(g, v))
            continue;
        const cdy_value *val = &g->values[v];
        if (used[v] || real[v])
            real[val->view_base] = 1;
        if (real[v] && cdy_value_is_alias(val))
            for (int a = 0; a < val->nargs; a++)
                real[val->args[a]] = 1;
    }
}

/* 1 if view v needs the values before it (from lo) realized first: its base
 * is a node computed in the current segment, or it is a realized VIEW (an
 * extern step reading its args). */
int cg_view_boundary(cg_ctx *c, int v, int lo)
{
    const cdy_graph *g = c->g;
    int b = g->values[v].view_base;
    if (cg_view_is_alias(g, v) && c->val_buf[v] >= 0)
        return 1;
    return g->values[b].kind == CDY_VAL_NODE && b >= lo;
}

/* Fill *op with the load of view v: its base's buffer, the view's strides
 * aligned to the right of grp's rank (0 on missing and size-1 dims), its offset. */
void cg_view_operand(cg_ctx *c, const cg_group *grp, int v, cg_operand *op)
{
    const cdy_value *val = &c->g->values[v];
    const cdy_meta *m = &val->meta;
    int shift = grp->ndim - m->ndim;
    memset(op, 0, sizeof(*op));
    op->buffer = c->val_buf[val->view_base];
    op->value = v;
    op->dtype = m->dtype;
    op->offset = val->view_offset;
    for (int d = 0; d < grp->ndim; d++) {
        int md = d - shift;
        op->stride[d] = (md < 0 || m->sizes[md] == 1) ? 0 : val->view_strides[md];
    }
}

/* Emit `T t<v> = x<p>;` (p: view v's load parameter) at indentation ind. */
int cg_emit_view(cg_ctx *c, int v, int ind)
{
    const cdy_value *val = &c->g->values[v];
    cg_indent(&c->src, ind);
    cdy_buf_printf(&c->src, "%s t%d = x%d;  /* %s */\n", cdy_dtype_table[val->meta.dtype].cctype,
                   v, c->vparam[v], cdy_op_table[val->op].name);
    return 0;
}

/* Unit size in bytes when kernel (grp, ops, nest) is a plain copy whose two
 * inner loops reverse the order of small contiguous units (channels_last
 * flip of W: units of C elements, stride -C in, C out); else 0. */
static int cg_reverse_unit(cg_ctx *c, const cg_group *grp, const cg_operand *ops, int nops,
                           const cg_nest *nest)
{
    if (nops != 2 || ops[0].is_out || !ops[1].is_out || grp->nout != 1 || nest->ndim < 2 ||
        c->g->values[grp->outs[0]].op != CDY_OP_VIEW_COPY || c->vparam[grp->outs[0]] != 0)
        return 0;
    int d = nest->ndim - 1, e = d - 1;
    int64_t u = nest->size[d], es = cdy_dtype_table[c->g->values[grp->outs[0]].meta.dtype].size;
    if (nest->stride[0][d] != 1 || nest->stride[1][d] != 1 || nest->stride[1][e] != u ||
        nest->stride[0][e] != -u || u * es > 8 || nest->size[e] * u * es < 32)
        return 0;
    return (int)(u * es);
}

/* Emit the row loop of a unit-reversing copy (U bytes a unit, W units a
 * row): 16-byte blocks shuffled in registers, then the tail unit by unit. */
static void cg_reverse_row(cdy_buf *b, int ind, int U, int64_t W)
{
    int P = 16 / U;
    cg_indent(b, ind);
    cdy_buf_printf(b, "int64_t w = 0;\n");
    cg_indent(b, ind);
    cdy_buf_printf(b, "for (; w * %d + 16 <= %lldLL; w += %d) {\n", U, (long long)(W * U), P);
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "cdy_v16u8 a;\n");
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "__builtin_memcpy(&a, src - w * %d + %d, 16);\n", U, U - 16);
    cg_indent(b, ind + 1);
    cdy_buf_puts(b, "a = __builtin_shuffle(a, (cdy_v16u8){");
    for (int k = 0; k < 16; k++) {
        int j = k / U, cc = k % U;
        cdy_buf_printf(b, "%s%d", k ? ", " : "", j < P ? 16 - (j + 1) * U + cc : 0);
    }
    cdy_buf_puts(b, "});\n");
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "__builtin_memcpy(dst + w * %d, &a, 16);\n", U);
    cg_indent(b, ind);
    cdy_buf_puts(b, "}\n");
    cg_indent(b, ind);
    cdy_buf_printf(b, "for (; w < %lldLL; w++)\n", (long long)W);
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "__builtin_memcpy(dst + w * %d, src - w * %d, %d);\n", U, U, U);
}

/* Bytes of a row when kernel (grp, ops, nest) is a plain copy whose inner
 * loop is contiguous in both operands (a row copy: flip of H, a crop); else 0. */
static int64_t cg_copy_row(cg_ctx *c, const cg_group *grp, const cg_operand *ops, int nops,
                           const cg_nest *nest)
{
    if (nops != 2 || ops[0].is_out || !ops[1].is_out || grp->nout != 1 || nest->ndim < 2 ||
        c->g->values[grp->outs[0]].op != CDY_OP_VIEW_COPY || c->vparam[grp->outs[0]] != 0)
        return 0;
    int d = nest->ndim - 1;
    if (nest->stride[0][d] != 1 || nest->stride[1][d] != 1)
        return 0;
    return nest->size[d] * cdy_dtype_table[c->g->values[grp->outs[0]].meta.dtype].size;
}

void cg_view_sched_copy(cg_ctx *c, kir_kernel *k)
{
    int U = cg_reverse_unit(c, &k->grp, k->ops, k->nops, k->nest);
    int64_t R = U ? 0 : cg_copy_row(c, &k->grp, k->ops, k->nops, k->nest);
    if (!U && !R)
        return;
    int e = k->nest->ndim - (U ? 2 : 1);
    k->copy_unit = U;
    k->copy_row = R;
    k->flags |= U ? CDY_KIRF_COPY_UNITS : CDY_KIRF_COPY_ROWS;
    k->copy_parallel = k->numel >= CG_PARALLEL_NUMEL && c->nthreads > 1 && e > 0;
    k->copy_collapse = k->copy_parallel && e >= 2 && k->nest->size[0] < 4 * (int64_t)c->nthreads;
    k->copy_threads = "NTHREADS";
}

/* Emit the loops of copy k (cg_view_emit_copy), parallel when par. */
static void cg_view_emit_copy_loops(cg_ctx *c, const kir_kernel *k, int par)
{
    const cg_nest *nest = k->nest;
    int U = k->copy_unit;
    cdy_buf *b = &c->src;
    int e = nest->ndim - (U ? 2 : 1), ind = 1;
    for (int d = 0; d < e; d++, ind++) {
        if (d == 0 && par) {
            cg_indent(b, ind);
            cdy_buf_printf(b, "#pragma omp parallel for num_threads(%s) schedule(static)%s\n",
                           k->copy_threads, k->copy_collapse ? " collapse(2)" : "");
        }
        cg_indent(b, ind);
        cdy_buf_printf(b, "for (int64_t i%d = 0; i%d < %s; i%d++) {\n", d, d,
                       cg_sym_size_text(c, nest, d), d);
    }
    cg_nest outer = *nest;
    outer.ndim = e;
    const char *name[2] = {"const uint8_t *src = (const uint8_t *)(in_ptr0 + ",
                           "uint8_t *dst = (uint8_t *)(out_ptr0 + "};
    for (int o = 0; o < 2; o++) {
        int any = 0;
        cg_indent(b, ind);
        cdy_buf_puts(b, name[o]);
        cg_offset_terms(b, &outer, o, 'i', &any);
        cdy_buf_puts(b, any ? ");\n" : "0);\n");
    }
    if (!U)
        cg_indent(b, ind);
    if (U)
        cg_reverse_row(b, ind, U, nest->size[e]);
    else if (nest->sym && nest->ssize[e] >= 0)   /* symbolic sizes: the row's bytes per call */
        cdy_buf_printf(b, "__builtin_memcpy(dst, src, (__SIZE_TYPE__)n%s%d * %dU);\n",
                       nest->pfx ? nest->pfx : "", e,
                       (int)cdy_dtype_table[c->g->values[k->grp.outs[0]].meta.dtype].size);
    else
        cdy_buf_printf(b, "__builtin_memcpy(dst, src, %lld);\n", (long long)k->copy_row);
    while (--ind > 0) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n");
    }
}

/* Emit kernel loops for a plain copy by rows (k->copy_unit: a unit-reversing
 * copy, rows by cg_reverse_row; k->copy_row: one memcpy a row); the outer
 * loops as usual, parallel when k->copy_parallel (collapsed: copy_collapse),
 * with symbolic sizes when k->par_cond holds at run time. */
void cg_view_emit_copy(cg_ctx *c, const kir_kernel *k)
{
    cdy_buf *b = &c->src;
    if (k->copy_unit)
        cdy_buf_puts(b, "    typedef uint8_t cdy_v16u8 __attribute__((vector_size(16)));\n");
    if (!k->par_cond || !k->copy_parallel) {
        cg_view_emit_copy_loops(c, k, k->copy_parallel);
        return;
    }
    cdy_buf_printf(b, "    if (%s) {\n", k->par_cond);
    cg_view_emit_copy_loops(c, k, 1);
    cdy_buf_puts(b, "    } else {\n");
    cg_view_emit_copy_loops(c, k, 0);
    cdy_buf_puts(b, "    }\n");
}

void cg_view_print_copy(cg_ctx *c, cdy_buf *b, const kir_kernel *k)
{
    int U = k->copy_unit;
    int es = U ? cdy_dtype_table[c->g->values[k->grp.outs[0]].meta.dtype].size : 1;
    if (U)
        cdy_buf_printf(b, "  unit-reversing copy: rows of %lld units of %d bytes "
                       "reversed with 16-byte shuffles (%d element%s a unit)\n",
                       (long long)k->nest->size[k->nest->ndim - 2], U, U / es,
                       U / es == 1 ? "" : "s");
    else if (k->copy_row)
        cdy_buf_printf(b, "  row copy: a memcpy of %lld bytes per row\n", (long long)k->copy_row);
}

/* ---- cat / stack (kind 'K'): one kernel per non-empty piece, writing it
 * into its window of the output buffer, its pointwise producers fused ---- */

static int cg_check_pad(cg_ctx *c, int v);

/* 1 if a CAT-kind value is a stack (its pieces gain a dim). */
int cg_cat_is_stack(const cdy_value *val)
{
    return val->op == CDY_OP_STACK;
}

/* 1 if a CAT-kind value is a constant pad (one piece in a filled window). */
int cg_cat_is_pad(const cdy_value *val)
{
    return val->op == CDY_OP_PAD;
}

/* Output dim of piece dim pd for cat / stack node val along dim d. */
int cg_cat_outdim(const cdy_value *val, int d, int pd)
{
    return val->op == CDY_OP_STACK && pd >= d ? pd + 1 : pd;
}

/* Check cat / stack node v: tensor pieces earlier in the graph, an int dim
 * in range, pieces' sizes those of the output but along dim, the sizes
 * along dim adding up, no float piece in an integer / bool output. */
int cg_check_cat(cg_ctx *c, int v)
{
    const cdy_graph *g = c->g;
    const cdy_value *val = &g->values[v];
    const cdy_meta *om = &val->meta;
    int np = val->nargs - 1, stack = val->op == CDY_OP_STACK;
    if (val->op == CDY_OP_PAD)
        return cg_check_pad(c, v);
    if (cg_check_meta(c, v, om))
        return -1;
    if (np < 1 || val->args[np] < 0 || val->args[np] >= v ||
        g->values[val->args[np]].kind != CDY_VAL_SCALAR)
        return cg_fail(c, "value %d (cat): needs pieces and a dim", v);
    int64_t d = g->values[val->args[np]].i, total = 0;
    if (d < 0 || d >= om->ndim)
        return cg_fail(c, "value %d (cat): dim %lld out of range", v, (long long)d);
    for (int i = 0; i < np; i++) {
        int p = val->args[i];
        if (p < 0 || p >= v || g->values[p].kind == CDY_VAL_SCALAR)
            return cg_fail(c, "value %d (cat): piece %d is not an earlier tensor", v, i);
        const cdy_meta *pm = &g->values[p].meta;
        if (pm->ndim != om->ndim - stack)
            return cg_fail(c, "value %d (cat): piece %d has rank %d", v, i, pm->ndim);
        for (int pd = 0; pd < pm->ndim; pd++) {
            int od = cg_cat_outdim(val, (int)d, pd);
            if (od != d && pm->sizes[pd] != om->sizes[od])
                return cg_fail(c, "value %d (cat): piece %d size mismatch at dim %d", v, i, pd);
        }
        total += stack ? 1 : pm->sizes[d];
        if (cdy_dtype_table[pm->dtype].is_float && !cdy_dtype_table[om->dtype].is_float)
            return cg_fail(c, "value %d (cat): float piece into a %s result", v,
                           cdy_dtype_table[om->dtype].name);
        if (om->dtype == CDY_DT_BOOL && pm->dtype != CDY_DT_BOOL)
            return cg_fail(c, "value %d (cat): non-bool piece into a bool result", v);
    }
    if (total != om->sizes[d])
        return cg_fail(c, "value %d (cat): pieces add up to %lld, not %lld", v,
                       (long long)total, (long long)om->sizes[d]);
    return 0;
}

/* Mark live what piece p of cat node v needs (down to leaves and views),
 * with v the kernel's only output. */
static void cg_cat_mark(cg_ctx *c, int v, int p)
{
    const cdy_graph *g = c->g;
    memset(c->live, 0, (size_t)g->nvalues);
    memset(c->in_group, 0, (size_t)g->nvalues);
    c->live[v] = c->in_group[v] = 1;
    c->live[p] = 1;
    for (int u = p; u >= 0; u--) {
        const cdy_value *val = &g->values[u];
        if (!c->live[u] || val->kind != CDY_VAL_NODE || cg_is_leaf(c, u) || cg_is_view(g, u))
            continue;
        for (int a = 0; a < val->nargs; a++)
            c->live[val->args[a]] = 1;
    }
}

/* Emit `T t<v> = <current piece, converted>;` for cat node v. */
int cg_emit_cat_value(cg_ctx *c, int v, int ind)
{
    const cdy_value *val = &c->g->values[v];
    int p = c->kern->piece;
    char *e = cg_value_expr(c, p);
    char *x = e ? cg_cast(c, e, c->g->values[p].meta.dtype, val->meta.dtype) : NULL;
    if (!x)
        return cg_fail(c, "out of memory");
    cg_indent(&c->src, ind);
    cdy_buf_printf(&c->src, "%s t%d = %s;  /* %s piece %%%d */\n",
                   cdy_dtype_table[val->meta.dtype].cctype, v, x, cdy_op_table[val->op].name, p);
    return 0;
}

/* Schedule the kernel copying value p (its producers fused) into the window
 * of node v's buffer of sizes sz (rank of p), output strides ostr, element
 * offset ooff; crop (or NULL): elements of p skipped before the window per
 * dim.  A pointwise kernel whose piece is p; 0 or -1. */
static int cg_sched_piece(cg_ctx *c, int v, int p, const int64_t *sz, const int64_t *ostr,
                          int64_t ooff, const int64_t *crop)
{
    int nd = c->g->values[p].meta.ndim;
    int number = cg_kernel_begin(c);
    kir_kernel *k = number < 0 ? NULL : cg_kir_add(c, CDY_KIR_POINTWISE);
    if (!k)
        return -1;
    cg_operand *ops = cdy_arena_alloc(&c->arena, sizeof(cg_operand) * CG_MAX_OPS);
    cg_nest *nest = cdy_arena_alloc(&c->arena, sizeof(cg_nest));
    int *outs = cdy_arena_alloc(&c->arena, sizeof(int));
    int64_t *sizes = cdy_arena_alloc(&c->arena, sizeof(int64_t) * CDY_MAX_NDIM);
    if (!ops || !nest || !outs || !sizes)
        return cg_fail(c, "out of memory");
    outs[0] = v;
    memcpy(sizes, sz, sizeof(int64_t) * (size_t)nd);
    cg_group grp = {nd, sizes, 1, outs};
    cg_cat_mark(c, v, p);
    int nops = cg_operands(c, &grp, ops);
    if (nops < 0)
        return -1;
    int first = cg_first_out(ops, nops);
    int64_t numel = 1;
    for (int d = 0; d < nd; d++) {
        numel *= sz[d];
        ops[first].stride[d] = sz[d] == 1 ? 0 : ostr[d];
        for (int o = 0; crop && o < first; o++)
            ops[o].offset += crop[d] * ops[o].stride[d];
    }
    ops[first].offset = ooff;
    cg_build_nest(&grp, ops, nops, nest);
    *k = (kir_kernel){.kind = CDY_KIR_POINTWISE, .number = number, .node = v, .piece = p,
                      .grp = grp, .nops = nops, .ops = ops, .nest = nest, .numel = numel,
                      .sep_from = -1};
    if (cg_kir_fuse(c, k) || (c->sym && cg_sym_piece(c, k, c->sym_cat_dim, c->sym_cat_start)))
        return -1;
    cg_sched_loops(c, k);
    if (c->sym)
        cg_sym_sched_loops(c, k);
    return 0;
}

/* Schedule piece p of cat / stack node v, which starts at `start` along dim d. */
static int cg_sched_cat_piece(cg_ctx *c, int v, int p, int d, int64_t start)
{
    const cdy_value *val = &c->g->values[v];
    const cdy_meta *pm = &c->g->values[p].meta, *om = &val->meta;
    int64_t ostr[CDY_MAX_NDIM];
    for (int pd = 0; pd < pm->ndim; pd++)
        ostr[pd] = om->strides[cg_cat_outdim(val, d, pd)];
    return cg_sched_piece(c, v, p, pm->sizes, ostr, start * om->strides[d], NULL);
}

/* ---- constant pad (PAD, kind 'K'): a kernel filling the border boxes
 * with the value, a kernel copying the (cropped) input into the interior ---- */

/* Per dim d of pad node val with input meta im: the interior's start in the
 * output and its length (the input's elements kept). */
static void cg_pad_interior(const cdy_value *val, const cdy_meta *im, int64_t *start,
                            int64_t *len)
{
    for (int d = 0; d < im->ndim; d++) {
        int64_t lo = val->view_strides[d], hi = val->meta.sizes[d] - im->sizes[d] - lo;
        start[d] = lo > 0 ? lo : 0;
        len[d] = im->sizes[d] + (lo < 0 ? lo : 0) + (hi < 0 ? hi : 0);
        if (len[d] < 0)
            len[d] = 0;
    }
}

/* Check pad node v: a tensor input of the result's rank and dtype, a scalar
 * value, sizes = input + pads, the value exact in an integer / bool result. */
static int cg_check_pad(cg_ctx *c, int v)
{
    const cdy_graph *g = c->g;
    const cdy_value *val = &g->values[v];
    if (cg_check_meta(c, v, &val->meta))
        return -1;
    if (val->nargs != 2 || val->args[0] < 0 || val->args[0] >= v || val->args[1] < 0 ||
        val->args[1] >= v || g->values[val->args[0]].kind == CDY_VAL_SCALAR ||
        g->values[val->args[1]].kind != CDY_VAL_SCALAR)
        return cg_fail(c, "value %d (pad): args must be a tensor and a scalar", v);
    const cdy_meta *im = &g->values[val->args[0]].meta;
    const cdy_value *sv = &g->values[val->args[1]];
    if (im->ndim != val->meta.ndim || im->dtype != val->meta.dtype)
        return cg_fail(c, "value %d (pad): input rank or dtype differs from the result's", v);
    for (int d = 0; d < im->ndim; d++)
        if (val->meta.sizes[d] - im->sizes[d] - val->view_strides[d] < -im->sizes[d] ||
            val->view_strides[d] < -im->sizes[d])
            return cg_fail(c, "value %d (pad): pads at dim %d crop more than the input", v, d);
    int odt = val->meta.dtype;
    double f = sv->meta.dtype == CDY_DT_FLOAT64 ? sv->f : (double)sv->i;
    if (!cdy_dtype_table[odt].is_float &&
        (f != (double)(int64_t)f || (odt == CDY_DT_BOOL && f != 0 && f != 1) ||
         (odt == CDY_DT_UINT8 && (f < 0 || f > 255))))
        return cg_fail(c, "value %d (pad): value not exact in %s", v, cdy_dtype_table[odt].name);
    return 0;
}

/* Emit one border box of pad node v: sizes sz from element start st, every
 * element set to lit, as loops in the current kernel (operand 0 = output). */
static void cg_pad_box(cg_ctx *c, const cdy_meta *om, const int64_t *sz, const int64_t *st,
                       const char *lit)
{
    cg_operand op;
    cg_nest nest;
    int64_t off = 0, numel = 1;
    memset(&op, 0, sizeof(op));
    op.is_out = 1;
    op.dtype = om->dtype;
    for (int d = 0; d < om->ndim; d++) {
        op.stride[d] = sz[d] == 1 ? 0 : om->strides[d];
        off += st[d] * om->strides[d];
        numel *= sz[d];
    }
    if (numel == 0)
        return;
    cg_group grp = {om->ndim, sz, 0, NULL};
    cg_build_nest(&grp, &op, 1, &nest);
    cdy_buf *b = &c->src;
    int ind = 1;
    cg_indent(b, ind);
    cdy_buf_puts(b, "{\n");
    for (int d = 0; d < nest.ndim; d++) {
        cg_indent(b, ++ind);
        cdy_buf_printf(b, "for (int64_t i%d = 0; i%d < %lldLL; i%d++)\n", d, d,
                       (long long)nest.size[d], d);
    }
    cg_indent(b, ++ind);
    cdy_buf_printf(b, "out_ptr0[%lldLL", (long long)off);
    int any = 1;
    cg_offset_terms(b, &nest, 0, 'i', &any);
    cdy_buf_printf(b, "] = %s;\n", lit);
    cg_indent(b, 1);
    cdy_buf_puts(b, "}\n");
}

/* The record of a pad's fill kernel: the interior (start, len per dim), the
 * value's literal in the result's dtype. */
typedef struct {
    int64_t start[CDY_MAX_NDIM], len[CDY_MAX_NDIM];
    int empty;                   /* the interior is empty: the whole result is border */
    const char *lit;
} cg_pad_kernel;

/* Schedule the fill kernel of pad node v (interior start / len, empty); 0 or -1. */
static int cg_sched_pad_fill(cg_ctx *c, int v, const int64_t *start, const int64_t *len,
                             int empty)
{
    const cdy_value *val = &c->g->values[v];
    const cdy_meta *om = &val->meta;
    const cdy_value *sv = &c->g->values[val->args[1]];
    char *lit = cg_scalar_literal(c, sv);
    lit = lit ? cg_cast(c, lit, sv->meta.dtype, om->dtype) : NULL;
    lit = lit && cdy_dtype_lowp(om->dtype) ? cg_strf(c, "%s(%s)", cg_st(om->dtype), lit) : lit;
    int *outs = cdy_arena_alloc(&c->arena, sizeof(int));
    cg_operand *op = cdy_arena_alloc(&c->arena, sizeof(cg_operand));
    cg_nest *none = cdy_arena_alloc(&c->arena, sizeof(cg_nest));
    cg_pad_kernel *pk = cdy_arena_alloc(&c->arena, sizeof(cg_pad_kernel));
    int number = cg_kernel_begin(c);
    kir_kernel *k = number < 0 ? NULL : cg_kir_add(c, CDY_KIR_PAD_FILL);
    if (!k)
        return -1;
    if (!lit || !outs || !op || !none || !pk)
        return cg_fail(c, "out of memory");
    outs[0] = v;
    op->buffer = c->val_buf[v];
    op->value = v;
    op->dtype = c->g->values[v].meta.dtype;
    op->is_out = 1;
    memcpy(pk->start, start, sizeof(pk->start));
    memcpy(pk->len, len, sizeof(pk->len));
    pk->empty = empty;
    pk->lit = lit;
    memset(c->live, 0, (size_t)c->g->nvalues);
    memset(c->in_group, 0, (size_t)c->g->nvalues);
    c->live[v] = c->in_group[v] = 1;
    k->number = number;
    k->node = v;
    k->grp = (cg_group){om->ndim, om->sizes, 1, outs};
    k->nops = 1;
    k->ops = op;
    k->nest = none;
    k->x = pk;
    return cg_kir_fuse(c, k);
}

/* Emit the fill kernel of pad node v: per dim, the box before and the box
 * after the interior (earlier dims interior, later dims whole); the whole
 * result when the interior is empty. */
int cg_emit_pad_fill(cg_ctx *c, const kir_kernel *k)
{
    const cdy_meta *om = &c->g->values[k->node].meta;
    const cg_pad_kernel *pk = k->x;
    cg_emit_header(c, k);
    int64_t sz[CDY_MAX_NDIM], st[CDY_MAX_NDIM];
    if (pk->empty) {
        memset(st, 0, sizeof(st));
        cg_pad_box(c, om, om->sizes, st, pk->lit);
    }
    for (int d = 0; d < om->ndim && !pk->empty; d++)
        for (int after = 0; after < 2; after++) {
            for (int j = 0; j < om->ndim; j++) {
                sz[j] = j < d ? pk->len[j] : om->sizes[j];
                st[j] = j < d ? pk->start[j] : 0;
            }
            sz[d] = after ? om->sizes[d] - pk->start[d] - pk->len[d] : pk->start[d];
            st[d] = after ? pk->start[d] + pk->len[d] : 0;
            cg_pad_box(c, om, sz, st, pk->lit);
        }
    cdy_buf_puts(&c->src, "}\n");
    return 0;
}

void cg_print_pad_fill(cg_ctx *c, const kir_kernel *k)
{
    const cg_pad_kernel *pk = k->x;
    cdy_buf_printf(&c->ir_post, "kernel_%d: %s %%%d: the border set to %s\n", k->number,
                   cdy_op_table[c->g->values[k->node].op].name, k->node, pk->lit);
    cg_ir_fuses(c, &c->ir_post, k);
}

/* Schedule pad node v: the fill kernel (when there is a border), then the
 * copy of the input's kept elements into the interior. */
static int cg_sched_pad(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    const cdy_meta *im = &c->g->values[val->args[0]].meta, *om = &val->meta;
    int64_t start[CDY_MAX_NDIM], len[CDY_MAX_NDIM], crop[CDY_MAX_NDIM], ooff = 0;
    int border = 0, empty = 0;
    memset(start, 0, sizeof(start));
    memset(len, 0, sizeof(len));
    cg_pad_interior(val, im, start, len);
    for (int d = 0; d < om->ndim; d++) {
        border |= len[d] != om->sizes[d];
        empty |= len[d] == 0;
        crop[d] = val->view_strides[d] < 0 ? -val->view_strides[d] : 0;
        ooff += start[d] * om->strides[d];
    }
    if (cdy_meta_numel(om) == 0)
        return 0;
    if (border && cg_sched_pad_fill(c, v, start, len, empty))
        return -1;
    if (empty)
        return 0;
    return cg_sched_piece(c, v, val->args[0], len, om->strides, ooff, crop);
}

/* 1 if every piece of cat / stack node v is read as it is (an input, a
 * realized value or a view load: no producer to fuse), so one kernel copies
 * them all. */
static int cg_cat_plain(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    for (int i = 0; i < val->nargs - 1; i++) {
        int p = val->args[i];
        if (c->val_buf[p] < 0 && !cg_is_view(c->g, p))
            return 0;
        if (c->val_buf[p] < 0 && c->val_buf[c->g->values[p].view_base] < 0)
            return 0;
    }
    return 1;
}

/* Element raw (dtype pdt, as stored) as an element of dtype odt, as stored:
 * through the compute type when they differ. */
static char *cg_copy_elem(cg_ctx *c, const char *raw, int pdt, int odt)
{
    if (pdt == odt)
        return cg_strf(c, "%s", raw);
    char *ld = cg_strf(c, "%s(%s)", cg_ld(pdt), raw);
    char *x = ld ? cg_cast(c, ld, pdt, odt) : NULL;
    return x ? cg_strf(c, "%s(%s)", cg_st(odt), x) : NULL;
}

/* Emit the work-shared loops copying one plain piece (operand o, loop nest
 * n: in stride n->stride[0], out n->stride[1]) into the output at ooff:
 * rows of the inner loop (blocks of it when there is one loop). */
static void cg_cat_loops(cg_ctx *c, int o, const cg_nest *n, int64_t ooff, int pdt, int odt)
{
    cdy_buf *b = &c->src;
    int d = n->ndim - 1;
    if (d < 0) {
        cdy_buf_printf(b, "        #pragma omp single nowait\n        out_ptr0[%lldLL] = %s;\n",
                       (long long)ooff, cg_copy_elem(c, cg_strf(c, "in_ptr%d[0]", o), pdt, odt));
        return;
    }
    int64_t rows = 1, L = n->size[d], si = n->stride[0][d], so = n->stride[1][d];
    for (int k = 0; k < d; k++)
        rows *= n->size[k];
    int blocks = d == 0;
    int64_t nit = blocks ? (L + CG_BLOCK - 1) / CG_BLOCK : rows;
    cdy_buf_printf(b, "        #pragma omp for schedule(static) nowait\n"
                      "        for (int64_t r = 0; r < %lldLL; r++) {\n", (long long)nit);
    cdy_buf_printf(b, "            int64_t rem = r, io = %lldLL, ii = 0, lo = 0, hi = %lldLL;\n",
                   (long long)ooff, (long long)L);
    if (blocks)
        cdy_buf_printf(b, "            lo = r * %dLL; hi = lo + %dLL < %lldLL ? lo + %dLL : %lldLL;\n",
                       CG_BLOCK, CG_BLOCK, (long long)L, CG_BLOCK, (long long)L);
    for (int k = d - 1; k >= 0; k--)
        cdy_buf_printf(b, "            { int64_t q = rem %% %lldLL; rem /= %lldLL; "
                          "ii += q * %lldLL; io += q * %lldLL; }\n",
                       (long long)n->size[k], (long long)n->size[k], (long long)n->stride[0][k],
                       (long long)n->stride[1][k]);
    if (si == 1 && so == 1 && pdt == odt)
        cdy_buf_printf(b, "            __builtin_memcpy(out_ptr0 + io + lo, in_ptr%d + ii + lo, "
                          "(uint64_t)(hi - lo) * %d);\n", o, cdy_dtype_table[odt].size);
    else {
        char *x = cg_copy_elem(c, cg_strf(c, "in_ptr%d[ii + j * %lldLL]", o, (long long)si), pdt, odt);
        cdy_buf_printf(b, "            for (int64_t j = lo; j < hi; j++)\n"
                          "                out_ptr0[io + j * %lldLL] = %s;\n", (long long)so, x);
    }
    cdy_buf_puts(b, "        }\n");
}

/* The record of a cat / stack kernel copying plain pieces: per piece its
 * loop nest (in, out) and its start in the output. */
typedef struct {
    int np;
    cg_nest *nests;
    int64_t start[CDY_MAX_NODE_ARGS];
    const char *threads;         /* the parallel region's team: "1" when small */
    int rowk;                    /* > 0: by rows of the output's first rowk dims, each row
                                  * written whole (cg_emit_cat_rows); 0: per piece */
    int sum;                     /* the column sum over those rows this kernel also
                                  * computes (reduce.c cg_red_cat_sum), or -1 */
    int64_t rows, cols;          /* the rows' count and length */
    int parts;                   /* the rows cut into this many fixed ranges, one per
                                  * iteration of the work-shared loop */
} cg_cat_kernel;

/* Partial column sums of a cat kernel (cg_emit_cat_rows) on the calling
 * thread's stack: at most this many bytes (parts x columns doubles). */
#define CG_CAT_SUM_BYTES (128 << 10)

/* Choose how cat node v (cat dim d, no new dim) of contiguous output is
 * copied (ck->rowk, ck->sum): by rows computing a column sum over rows of
 * its first dims (reduce.c cg_red_cat_sum) when the partial sums fit, else
 * by rows of its dims before d when every piece's last dim is contiguous;
 * by rows only with a row per range at least, else per piece (rowk 0). */
static void cg_cat_pick_rows(cg_ctx *c, int v, int d, const cg_operand *ops, cg_cat_kernel *ck)
{
    const cdy_value *val = &c->g->values[v];
    const cdy_meta *om = &val->meta;
    int np = val->nargs - 1, k = 0;
    ck->rowk = 0;
    ck->sum = -1;
    if (cdy_op_has(val->op, CDY_OPF_NEW_DIM) || !cdy_meta_contiguous(om) || cdy_meta_numel(om) == 0)
        return;
    int s = cg_red_cat_sum(c, v, &k);
    if (s < 0 || k > d || (int64_t)ck->parts * cdy_meta_numel(&c->g->values[s].meta) * 8 >
                              CG_CAT_SUM_BYTES) {
        s = -1;
        k = d;
        for (int i = 0; i < np; i++) {
            const cdy_meta *pm = &c->g->values[val->args[i]].meta;
            if (pm->sizes[om->ndim - 1] > 1 && ops[i].stride[om->ndim - 1] != 1)
                return;
        }
    }
    int64_t rows = 1;
    for (int a = 0; a < k; a++)
        rows *= om->sizes[a];
    if (k == 0 || rows < 2 || rows < ck->parts)   /* a range per thread, a row at least */
        return;
    ck->rowk = k;
    ck->sum = s;
    ck->rows = rows;
    ck->cols = cdy_meta_numel(om) / rows;
}

/* Schedule cat / stack node v whose pieces are all plain (cg_cat_plain) as
 * one kernel: one parallel region, each piece's rows work-shared in turn. */
static int cg_sched_cat_one(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    const cdy_meta *om = &val->meta;
    int np = val->nargs - 1, d = (int)c->g->values[val->args[np]].i;
    int number = cg_kernel_begin(c);
    kir_kernel *k = number < 0 ? NULL : cg_kir_add(c, CDY_KIR_CAT);
    if (!k)
        return -1;
    cg_operand *ops = cdy_arena_alloc(&c->arena, sizeof(cg_operand) * CG_MAX_OPS);
    cg_cat_kernel *ck = cdy_arena_alloc(&c->arena, sizeof(cg_cat_kernel));
    cg_nest *nests = cdy_arena_alloc(&c->arena, sizeof(cg_nest) * (size_t)np);
    int *outs = cdy_arena_alloc(&c->arena, sizeof(int) * 2);
    if (!ops || !ck || !nests || !outs)
        return cg_fail(c, "out of memory");
    outs[0] = v;
    memset(c->live, 0, (size_t)c->g->nvalues);
    memset(c->in_group, 0, (size_t)c->g->nvalues);
    int64_t pos = 0;
    for (int i = 0; i < np; i++) {
        int p = val->args[i];
        const cdy_meta *pm = &c->g->values[p].meta;
        cg_group grp = {pm->ndim, pm->sizes, 1, outs};
        if (c->val_buf[p] >= 0) {
            memset(&ops[i], 0, sizeof(ops[i]));
            ops[i].buffer = c->val_buf[p];
            ops[i].value = p;
            ops[i].dtype = pm->dtype;
            cg_broadcast_strides(pm, pm->ndim, ops[i].stride);
        } else
            cg_view_operand(c, &grp, p, &ops[i]);
        cg_operand pair[2] = {ops[i], {.buffer = c->val_buf[v], .is_out = 1, .value = v,
                                       .dtype = om->dtype}};
        pair[0].offset = 0;
        for (int pd = 0; pd < pm->ndim; pd++)
            pair[1].stride[pd] = pm->sizes[pd] == 1 ? 0 : om->strides[cg_cat_outdim(val, d, pd)];
        cg_build_nest(&grp, pair, 2, &nests[i]);
        ck->start[i] = pos * om->strides[d];
        pos += val->op == CDY_OP_STACK ? 1 : pm->sizes[d];
    }
    ops[np] = (cg_operand){.buffer = c->val_buf[v], .is_out = 1, .value = v,
                            .dtype = om->dtype};
    c->live[v] = c->in_group[v] = 1;
    int64_t onumel = cdy_meta_numel(om);
    k->number = number;
    k->node = v;
    k->grp = (cg_group){om->ndim, om->sizes, 1, outs};
    k->nops = np + 1;
    k->ops = ops;
    k->nest = &nests[0];
    k->numel = onumel;
    k->parallel = onumel >= CG_PARALLEL_NUMEL && c->nthreads > 1;
    ck->np = np;
    ck->nests = nests;
    ck->threads = k->parallel ? "NTHREADS" : "1";
    ck->parts = k->parallel ? c->nthreads : 1;
    k->threads = ck->threads;
    k->x = ck;
    cg_cat_pick_rows(c, v, d, ops, ck);
    if (ck->sum >= 0) {          /* the sum's output: a second output, the sum computed here */
        int s = ck->sum;
        ops[np + 1] = (cg_operand){.buffer = c->val_buf[s], .is_out = 1, .value = s,
                                    .dtype = c->g->values[s].meta.dtype};
        outs[1] = s;
        k->grp.nout = 2;
        k->nops = np + 2;
        c->live[s] = c->in_group[s] = 1;
        c->done[s] = 1;
    }
    return cg_kir_fuse(c, k);
}

/* Emit the copy of piece i (operand i, starting at ck->start[i] of its row)
 * into row r of a by-rows cat kernel (q0.. the row's indices, out_ptr0 + r *
 * cols the row): loops over the piece's dims from ck->rowk, contiguous runs
 * merged, the innermost a memcpy where both sides are contiguous. */
static void cg_cat_row_piece(cg_ctx *c, const kir_kernel *k, int i)
{
    const cg_cat_kernel *ck = k->x;
    const cdy_meta *om = &c->g->values[k->node].meta;
    const cdy_meta *pm = &c->g->values[c->g->values[k->node].args[i]].meta;
    const cg_operand *op = &k->ops[i];
    int pdt = op->dtype, odt = k->ops[ck->np].dtype, n = 0;
    int64_t sz[CDY_MAX_NDIM], si[CDY_MAX_NDIM], so[CDY_MAX_NDIM];
    for (int a = ck->rowk; a < om->ndim; a++) {
        if (pm->sizes[a] == 1)
            continue;
        if (n > 0 && si[n - 1] == pm->sizes[a] * op->stride[a] &&
            so[n - 1] == pm->sizes[a] * om->strides[a]) {   /* runs on both sides: merged */
            sz[n - 1] *= pm->sizes[a];
            si[n - 1] = op->stride[a];
            so[n - 1] = om->strides[a];
            continue;
        }
        sz[n] = pm->sizes[a];
        si[n] = op->stride[a];
        so[n++] = om->strides[a];
    }
    cdy_buf *b = &c->src;
    cdy_buf_printf(b, "                { int64_t ii = 0, io = r * %lldLL + %lldLL;\n",
                   (long long)ck->cols, (long long)ck->start[i]);
    for (int a = 0; a < ck->rowk; a++)
        if (pm->sizes[a] > 1)
            cdy_buf_printf(b, "                ii += q%d * %lldLL;\n", a, (long long)op->stride[a]);
    for (int a = 0; a + 1 < n; a++)
        cdy_buf_printf(b, "                for (int64_t a%d = 0; a%d < %lldLL; a%d++) {\n", a, a,
                       (long long)sz[a], a);
    cdy_buf_puts(b, "                { int64_t ji = ii, jo = io;\n");
    for (int a = 0; a + 1 < n; a++)
        cdy_buf_printf(b, "                ji += a%d * %lldLL; jo += a%d * %lldLL;\n", a,
                       (long long)si[a], a, (long long)so[a]);
    int64_t L = n ? sz[n - 1] : 1, li = n ? si[n - 1] : 0, lo = n ? so[n - 1] : 0;
    if (pdt == odt && (L == 1 || (li == 1 && lo == 1)))
        cdy_buf_printf(b, "                __builtin_memcpy(out_ptr0 + jo, in_ptr%d + ji, "
                          "%lldULL);\n",
                       i, (long long)(L * cdy_dtype_table[odt].size));
    else {
        char *in = cg_strf(c, "in_ptr%d[ji + j * %lldLL]", i, (long long)li);
        char *x = cg_copy_elem(c, in, pdt, odt);
        cdy_buf_printf(b, "                #pragma omp simd\n"
                          "                for (int64_t j = 0; j < %lldLL; j++)\n"
                          "                    out_ptr0[jo + j * %lldLL] = %s;\n",
                       (long long)L, (long long)lo, x);
    }
    cdy_buf_puts(b, "                }\n");
    for (int a = 0; a + 1 < n; a++)
        cdy_buf_puts(b, "                }\n");
    cdy_buf_puts(b, "                }\n");
}

/* Emit by-rows cat kernel k: the rows cut into ck->parts fixed ranges (the
 * first (t + 1) * rows / parts - t * rows / parts rows to range t), a
 * work-shared loop over the ranges writing each row whole, piece by piece;
 * with a column sum, each range adds its rows (as stored) in order into its
 * own partial sums in double, then the ranges' partials are added in range
 * order per column and stored: the order depends on the parts only (one
 * part: the separate sum kernel's order). */
static void cg_emit_cat_rows(cg_ctx *c, const kir_kernel *k)
{
    const cg_cat_kernel *ck = k->x;
    const cdy_value *val = &c->g->values[k->node];
    const cdy_meta *om = &val->meta;
    cdy_buf *b = &c->src;
    long long R = (long long)ck->rows, C = (long long)ck->cols;
    int odt = om->dtype;
    if (ck->sum >= 0)
        cdy_buf_printf(b, "    double part[%d][%lld];\n", ck->parts, C);
    cdy_buf_printf(b, "    #pragma omp parallel num_threads(%s)\n    {\n"
                      "        #pragma omp for schedule(static)\n"
                      "        for (int64_t t = 0; t < %dLL; t++) {\n"
                      "            const int64_t rlo = t * %lldLL / %d, "
                      "rhi = (t + 1) * %lldLL / %d;\n",
                   ck->threads, ck->parts, R, ck->parts, R, ck->parts);
    if (ck->sum >= 0)
        cdy_buf_printf(b, "            double *restrict acc = part[t];\n"
                          "            for (int64_t j = 0; j < %lldLL; j++)\n"
                          "                acc[j] = 0;\n", C);
    cdy_buf_puts(b, "            for (int64_t r = rlo; r < rhi; r++) {\n"
                    "                int64_t rem = r;\n");
    for (int a = ck->rowk - 1; a > 0; a--)
        cdy_buf_printf(b, "                const int64_t q%d = rem %% %lldLL; rem /= %lldLL;\n", a,
                       (long long)om->sizes[a], (long long)om->sizes[a]);
    cdy_buf_puts(b, "                const int64_t q0 = rem;\n");
    for (int a = 0; a < ck->rowk; a++)
        cdy_buf_printf(b, "                (void)q%d;\n", a);
    for (int i = 0; i < ck->np; i++)
        if (cdy_meta_numel(&c->g->values[val->args[i]].meta) > 0)
            cg_cat_row_piece(c, k, i);
    if (ck->sum >= 0)            /* the row just written, added in order */
        cdy_buf_printf(b, "                #pragma omp simd\n"
                          "                for (int64_t j = 0; j < %lldLL; j++)\n"
                          "                    acc[j] += (double)%s(out_ptr0[r * %lldLL + j]);\n",
                       C, cg_ld(odt), C);
    cdy_buf_puts(b, "            }\n        }\n");
    if (ck->sum >= 0) {
        int sdt = c->g->values[ck->sum].meta.dtype;
        cdy_buf_printf(b, "        #pragma omp for schedule(static)\n"
                          "        for (int64_t j = 0; j < %lldLL; j++) {\n"
                          "            double acc = part[0][j];\n"
                          "            for (int64_t t = 1; t < %dLL; t++)\n"
                          "                acc += part[t][j];\n"
                          "            out_ptr1[j] = %s((%s)(acc));\n"
                          "        }\n",
                       C, ck->parts, cg_st(sdt), cdy_dtype_table[sdt].cctype);
    }
    cdy_buf_puts(b, "    }\n}\n");
}

int cg_emit_cat_kernel(cg_ctx *c, const kir_kernel *k)
{
    const cg_cat_kernel *ck = k->x;
    const cdy_value *val = &c->g->values[k->node];
    cg_emit_header(c, k);
    if (ck->rowk > 0) {
        cg_emit_cat_rows(c, k);
        return 0;
    }
    cdy_buf_printf(&c->src, "    #pragma omp parallel num_threads(%s)\n    {\n", ck->threads);
    for (int i = 0; i < ck->np; i++)
        if (cdy_meta_numel(&c->g->values[val->args[i]].meta) > 0)
            cg_cat_loops(c, i, &ck->nests[i], ck->start[i], k->ops[i].dtype, k->ops[ck->np].dtype);
    cdy_buf_puts(&c->src, "    }\n}\n");
    return 0;
}

void cg_print_cat_kernel(cg_ctx *c, const kir_kernel *k)
{
    const cg_cat_kernel *ck = k->x;
    cdy_buf_printf(&c->ir_post, "kernel_%d: %s %%%d: its %d pieces (no producers to fuse) "
                   "copied by one kernel, one parallel region%s", k->number,
                   cdy_op_table[c->g->values[k->node].op].name, k->node, ck->np,
                   k->parallel ? "" : " (one thread: small)");
    if (ck->rowk > 0)
        cdy_buf_printf(&c->ir_post, ", by rows (%lld rows of %lld elements, %d ranges)",
                       (long long)ck->rows, (long long)ck->cols, ck->parts);
    if (ck->sum >= 0)
        cdy_buf_printf(&c->ir_post, "; the column sum %%%d over the rows computed here "
                       "(partial sums per range in double)", ck->sum);
    cdy_buf_puts(&c->ir_post, "\n");
    cg_ir_fuses(c, &c->ir_post, k);
}

/* Schedule cat / stack node v: a kernel per non-empty piece (see
 * cg_sched_piece), or one for plain pieces (cg_sched_cat_one); a pad node:
 * cg_sched_pad. */
int cg_sched_cat(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    if (val->op == CDY_OP_PAD)
        return cg_sched_pad(c, v);
    int np = val->nargs - 1, d = (int)c->g->values[val->args[np]].i;
    int64_t start = 0;
    if (!c->sym && cg_cat_plain(c, v))     /* symbolic sizes: a kernel per piece (symk.c) */
        return cg_sched_cat_one(c, v);
    for (int i = 0; i < np; i++) {
        int p = val->args[i];
        const cdy_meta *pm = &c->g->values[p].meta;
        c->sym_cat_dim = d < 0 ? d + val->meta.ndim : d;
        c->sym_cat_start = c->sym ? cg_sym_cat_start(c, v, i) : -1;
        if (c->sym && c->sym_cat_start < 0)
            return -1;
        if (cdy_meta_numel(pm) > 0 && cg_sched_cat_piece(c, v, p, d, start))
            return -1;
        start += val->op == CDY_OP_STACK ? 1 : pm->sizes[d];
    }
    kir_kernel *k = cg_kir_add(c, CDY_KIR_PIECES);   /* its line of the decisions */
    if (!k)
        return -1;
    k->node = v;
    return 0;
}
