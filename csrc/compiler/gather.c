/* gather.c - gathered loads (kind 'G': GATHER, see cdynamo.h): embedding,
 * index_select, gather, tensor indexing.
 *
 * A GATHER node is an operand of a pointwise kernel like an unrealized view:
 * a parameter of its own pointing at its base's buffer, walked with the
 * node's view_strides in the dims the source keeps.  In the body that
 * parameter's "load" is only the base offset (`const int64_t x<p> = ...;`);
 * the node itself (cg_emit_gather) reads its index values (args, computed
 * or loaded earlier in the same body, so their producers fuse), wraps
 * negatives where eager does, checks the range branch-free (an index out of
 * range reads element 0 and sets a flag of the row: cg_gather_emit_flags
 * before the inner loop, cg_gather_emit_report after it) and loads
 * in_ptr<p>[x<p> + j0 * stride0 + ...].  Its consumers fuse as with any
 * pointwise node.  A gather never sits inside a special kind's kernel: it is
 * realized when such a kernel would read it (cg_gather_mark_real).
 *
 * Status convention: a kernel that computes a GATHER node is declared
 * `int kernel_k(<params>, int64_t *restrict cdy_err)` and returns cdy_err[0]
 * (0: every index in range).  An index out of range sets cdy_err[0] = 1,
 * cdy_err[1] = the index as given, cdy_err[2] = the size of the dim,
 * cdy_err[3] = the arg's code (error kind | dim << 8, build_index.c) | the
 * gather node's value number << CDY_ERR_VALUE_SHIFT (the runtime names its
 * user line); the
 * load then reads element 0 (never out of bounds) and the runtime raises eager's
 * exception after the kernel (cdy_kernel_desc.status).  Plain kernels keep
 * their void signature. */
#include <stdio.h>
#include <string.h>

#include "compiler/cg.h"

/* 1 if value v of g is a gathered load (kind 'G'). */
int cg_is_gather(const cdy_graph *g, int v)
{
    return g->values[v].kind == CDY_VAL_NODE && g->values[v].op >= 0 &&
           g->values[v].op < CDY_OP_COUNT && cdy_op_table[g->values[v].op].kind == 'G';
}

/* Number of index args of gather node val (args: k indices, k strides, k
 * sizes, k codes). */
static int cg_gather_nidx(const cdy_value *val)
{
    return val->nargs / 4;
}

/* 1 if every element gather node val can read (any index in range) lies
 * inside its base's elements (base meta bm, read from its data pointer). */
static int cg_gather_inside(const cdy_graph *g, const cdy_value *val, const cdy_meta *bm)
{
    int64_t lo, hi, blo, bhi;
    int k = cg_gather_nidx(val);
    if (!cg_view_extent(&val->meta, val->view_strides, val->view_offset, &lo, &hi))
        return 1;
    for (int i = 0; i < k; i++) {
        int64_t n = g->values[val->args[2 * k + i]].i;
        int64_t e = (n - 1) * g->values[val->args[k + i]].i;
        if (n > 0)
            *(e < 0 ? &lo : &hi) += e;
    }
    if (!cg_view_extent(bm, bm->strides, 0, &blo, &bhi))
        return 1;
    return lo >= blo && hi <= bhi;
}

/* Check gather node v: indices are earlier integer tensors that broadcast
 * to the result, strides/sizes/codes are int scalars, the base an earlier
 * realizable tensor of the node's dtype; 0 or -1 with a message. */
int cg_check_gather(cg_ctx *c, int v)
{
    const cdy_graph *g = c->g;
    const cdy_value *val = &g->values[v];
    int k = cg_gather_nidx(val);
    if (cg_check_meta(c, v, &val->meta))
        return -1;
    if (val->nargs < 4 || val->nargs % 4 || val->nargs > CDY_MAX_NODE_ARGS)
        return cg_fail(c, "value %d (gather): %d args", v, val->nargs);
    for (int a = 0; a < val->nargs; a++) {
        int av = val->args[a];
        if (av < 0 || av >= v)
            return cg_fail(c, "value %d (gather): arg %d is not earlier in the graph", v, a);
        const cdy_value *arg = &g->values[av];
        int is_idx = a < k;
        if (is_idx != (arg->kind != CDY_VAL_SCALAR))
            return cg_fail(c, "value %d (gather): arg %d has the wrong kind", v, a);
        if (is_idx && ((arg->meta.dtype != CDY_DT_INT64 && arg->meta.dtype != CDY_DT_INT32) ||
                       arg->meta.ndim > val->meta.ndim))
            return cg_fail(c, "value %d (gather): index %d is not an int tensor of rank <= %d",
                           v, a, val->meta.ndim);
        if (!is_idx && cdy_dtype_table[arg->meta.dtype].is_float)
            return cg_fail(c, "value %d (gather): arg %d is not an int scalar", v, a);
    }
    int b = val->view_base;
    if (!cg_base_is_earlier_tensor(g, v, b) || g->values[b].meta.dtype != val->meta.dtype)
        return cg_fail(c, "value %d (gather): base %d is not an earlier tensor of its dtype",
                       v, b);
    if (!cg_gather_inside(g, val, &g->values[b].meta))
        return cg_fail(c, "value %d (gather): reads outside its base", v);
    return 0;
}

/* Realize every gather nothing computed reads (dead code: its value is
 * unused), so that its kernel still checks its indices: eager raises for an
 * index out of range whether or not the result is used.  live: scratch of
 * nvalues chars; what real marks (outputs, externs and their args, special
 * kinds) is run, and so is what they read. */
static void cg_gather_mark_dead(cg_ctx *c, char *real, char *live)
{
    const cdy_graph *g = c->g;
    memcpy(live, real, (size_t)g->nvalues);
    for (int v = g->nvalues - 1; v >= 0; v--) {
        const cdy_value *val = &g->values[v];
        if (val->kind != CDY_VAL_NODE)
            continue;
        if (!live[v] && cg_is_gather(g, v))
            live[v] = real[v] = 1;
        if (!live[v])
            continue;
        for (int a = 0; a < val->nargs; a++)
            live[val->args[a]] = 1;
        if ((cg_is_view(g, v) || cg_is_gather(g, v)) && val->view_base >= 0)
            live[val->view_base] = 1;
    }
}

/* Mark what gathers need realized: their bases, every gather that a
 * special kind's kernel would read, directly or through unrealized
 * pointwise nodes (those kernels fuse producers but emit no status), and
 * every unused gather (cg_gather_mark_dead). */
void cg_gather_mark_real(cg_ctx *c, char *real)
{
    const cdy_graph *g = c->g;
    char *spec = cdy_arena_alloc(&c->arena, (size_t)g->nvalues + 1);
    char *live = cdy_arena_alloc(&c->arena, (size_t)g->nvalues + 1);
    if (!spec || !live)
        return;   /* cg_scratch's allocations fail next; nothing is emitted */
    cg_gather_mark_dead(c, real, live);
    for (int v = g->nvalues - 1; v >= 0; v--) {
        const cdy_value *val = &g->values[v];
        if (val->kind != CDY_VAL_NODE)
            continue;
        if (cg_is_gather(g, v)) {
            real[val->view_base] = 1;
            if (spec[v])
                real[v] = 1;
        }
        int reads = cg_is_special(g, v) || cg_is_view(g, v) || (spec[v] && !real[v]);
        for (int a = 0; reads && a < val->nargs; a++)
            spec[val->args[a]] = 1;
    }
}

/* 1 if the values before gather v (from lo) must be realized before it:
 * its base is a node of the current segment. */
int cg_gather_boundary(cg_ctx *c, int v, int lo)
{
    int b = c->g->values[v].view_base;
    return c->g->values[b].kind == CDY_VAL_NODE && b >= lo;
}

/* 1 if the current kernel computes a gather node (live, not a leaf): it then
 * has the status signature. */
int cg_kernel_gathers(cg_ctx *c)
{
    for (int v = 0; v < c->g->nvalues; v++)
        if (c->live[v] && cg_is_gather(c->g, v) && !cg_is_leaf(c, v))
            return 1;
    return 0;
}

/* Emit `const int64_t x<o> = <base offset>;` for gather operand o (its
 * element offset in the dims the source keeps) at indentation ind. */
void cg_gather_emit_base(cg_ctx *c, const cg_nest *nest, int o, int ind)
{
    int any = 0;
    cg_indent(&c->src, ind);
    cdy_buf_printf(&c->src, "const int64_t x%d = ", o);
    cg_offset_terms(&c->src, nest, o, 'i', &any);
    cdy_buf_puts(&c->src, any ? ";\n" : "0;\n");
}

/* The C text of gather v's indexed size (which 0) or stride (which 1) of
 * index arg i: its expression under symbolic sizes (symk.c), else the literal. */
static const char *cg_gather_num(cg_ctx *c, int v, int i, int which)
{
    const cdy_value *val = &c->g->values[v];
    int k = cg_gather_nidx(val);
    int e = c->sym && c->gsym ? c->gsym[v * CG_GSYM + which * (CG_GSYM / 2) + i] : -1;
    if (e >= 0)
        return cg_sym_expr_text(c, e);
    return cg_strf(c, "%lldLL", (long long)c->g->values[val->args[(which ? 1 : 2) * k + i]].i);
}

/* Emit the index j<v>_<i> of index arg i of gather v: loaded or computed
 * value r, wrapped when negative (code bit 16), then clamped to 0 when out
 * of range, branch-free (the loop still vectorizes), with the failure noted
 * in the row's flags (cg_gather_emit_flags / cg_gather_emit_report). */
static int cg_gather_emit_index(cg_ctx *c, int v, int i, int ind)
{
    const cdy_value *val = &c->g->values[v];
    int k = cg_gather_nidx(val);
    const char *n = cg_gather_num(c, v, i, 0);
    int wrap = (c->g->values[val->args[3 * k + i]].i & 16) != 0;
    char *e = cg_value_expr(c, val->args[i]);
    if (!e || !n)
        return cg_fail(c, "out of memory");
    cdy_buf *b = &c->src;
    cg_indent(b, ind);
    cdy_buf_printf(b, "const int64_t r%d_%d = (int64_t)%s;\n", v, i, e);
    cg_indent(b, ind);
    if (wrap)
        cdy_buf_printf(b, "const int64_t w%d_%d = r%d_%d < 0 ? r%d_%d + %s : r%d_%d;\n",
                       v, i, v, i, v, i, n, v, i);
    else
        cdy_buf_printf(b, "const int64_t w%d_%d = r%d_%d;\n", v, i, v, i);
    cg_indent(b, ind);
    cdy_buf_printf(b, "const int ok%d_%d = (uint64_t)w%d_%d < (uint64_t)%s;\n", v, i, v, i, n);
    cg_indent(b, ind);
    cdy_buf_printf(b, "cdy_bad%d_%d |= !ok%d_%d;\n", v, i, v, i);
    cg_indent(b, ind);
    cdy_buf_printf(b, "cdy_badv%d_%d = ok%d_%d ? cdy_badv%d_%d : r%d_%d;\n", v, i, v, i, v, i,
                   v, i);
    cg_indent(b, ind);
    cdy_buf_printf(b, "const int64_t j%d_%d = ok%d_%d ? w%d_%d : 0;\n", v, i, v, i, v, i);
    return 0;
}

/* Emit the failure flags of the current kernel's gathers (declared where a
 * row of the inner loop starts, private to its thread). */
void cg_gather_emit_flags(cg_ctx *c, int ind)
{
    for (int v = 0; v < c->g->nvalues; v++) {
        if (!c->live[v] || !cg_is_gather(c->g, v) || cg_is_leaf(c, v))
            continue;
        for (int i = 0; i < cg_gather_nidx(&c->g->values[v]); i++) {
            cg_indent(&c->src, ind);
            cdy_buf_printf(&c->src, "uint64_t cdy_bad%d_%d = 0;\n", v, i);
            cg_indent(&c->src, ind);
            cdy_buf_printf(&c->src, "int64_t cdy_badv%d_%d = 0;\n", v, i);
        }
    }
}

/* Emit the report of the flags after a row: an index out of range goes to
 * the error slot (cdy_gather_bad, see the file comment). */
void cg_gather_emit_report(cg_ctx *c, int ind)
{
    for (int v = 0; v < c->g->nvalues; v++) {
        if (!c->live[v] || !cg_is_gather(c->g, v) || cg_is_leaf(c, v))
            continue;
        const cdy_value *val = &c->g->values[v];
        int k = cg_gather_nidx(val);
        for (int i = 0; i < k; i++) {
            cg_indent(&c->src, ind);
            cdy_buf_printf(&c->src, "if (__builtin_expect(cdy_bad%d_%d != 0, 0))\n", v, i);
            cg_indent(&c->src, ind + 1);
            cdy_buf_printf(&c->src, "cdy_gather_bad(cdy_err, cdy_badv%d_%d, %s, %lldLL);\n",
                           v, i, cg_gather_num(c, v, i, 0),
                           (long long)(c->g->values[val->args[3 * k + i]].i |
                                       (int64_t)v << CDY_ERR_VALUE_SHIFT));
        }
    }
}

/* The helper gathering kernels report through, defined once per file. */
const char cg_gather_helper[] =
    "#ifndef CDY_GATHER_BAD\n"
    "#define CDY_GATHER_BAD\n"
    "/* an index out of range: note it in the caller's error slot (any one wins) */\n"
    "__attribute__((cold, noinline)) static void cdy_gather_bad(int64_t *err, int64_t r, "
    "int64_t n, int64_t code)\n"
    "{\n"
    "    __atomic_store_n(&err[3], code, __ATOMIC_RELAXED);\n"
    "    __atomic_store_n(&err[2], n, __ATOMIC_RELAXED);\n"
    "    __atomic_store_n(&err[1], r, __ATOMIC_RELAXED);\n"
    "    __atomic_store_n(&err[0], 1, __ATOMIC_RELAXED);\n"
    "}\n"
    "#endif\n";

/* Emit `T t<v> = in_ptr<p>[x<p> + j * stride ...];` for gather node v,
 * after its indices (cg_gather_emit_index).  A source dim of size 0 reads
 * nothing: every index is out of range and the value is 0. */
int cg_emit_gather(cg_ctx *c, int v, int ind)
{
    const cdy_value *val = &c->g->values[v];
    int k = cg_gather_nidx(val), p = c->vparam[v], empty = 0;
    for (int i = 0; i < k; i++) {
        if (cg_gather_emit_index(c, v, i, ind))
            return -1;
        empty |= c->g->values[val->args[2 * k + i]].i <= 0;
    }
    cdy_buf *b = &c->src;
    cg_indent(b, ind);
    cdy_buf_printf(b, "const %s t%d = ", cdy_dtype_table[val->meta.dtype].cctype, v);
    if (empty) {
        cdy_buf_puts(b, "0;  /* gather from an empty dim */\n");
        return 0;
    }
    cdy_buf_printf(b, "%s(in_ptr%d[x%d", cg_ld(val->meta.dtype), p, p);
    for (int i = 0; i < k; i++)
        cdy_buf_printf(b, " + j%d_%d * %s", v, i, cg_gather_num(c, v, i, 1));
    cdy_buf_puts(b, "]);  /* gather */\n");
    return 0;
}
