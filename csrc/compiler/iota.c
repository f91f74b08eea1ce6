/* iota.c - kind 'I' nodes: IOTA (the loop index along one dim) and FILL (a
 * constant), the generators that factories (arange, zeros, full, ...) and
 * tril / triu are lowered to.
 *
 * A kind 'I' node has no tensor args; its sizes are its own and consumers
 * broadcast it like any operand.  FILL is a literal.  IOTA is an "index
 * operand" of the pointwise kernel reading it (cg_index_operands): a row of
 * the nest's strides after the real operands (1 along its dim, 0 elsewhere),
 * so cg_build_nest merges dims only where the index stays linear and the
 * value is `i0 * s0 + i1 * s1 ...` in the nest's loop variables, which GCC
 * vectorizes as an induction variable (the plain pointwise path is
 * unchanged).  Special kinds (reductions, rows, cat, pooling) build nests of
 * their own, so what they would fuse from IOTA or FILL is realized first
 * (cg_index_mark_real). */
#include <string.h>

#include "compiler/cg.h"

/* Check kind 'I' node v: meta, one SCALAR arg; IOTA: int64, dim in range;
 * 0 or -1 with a message. */
int cg_check_index(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    const char *name = cdy_op_table[val->op].name;
    if (cg_check_meta(c, v, &val->meta))
        return -1;
    if (val->nargs != 1 || val->args[0] < 0 || val->args[0] >= v ||
        c->g->values[val->args[0]].kind != CDY_VAL_SCALAR)
        return cg_fail(c, "value %d (%s): expects one scalar arg", v, name);
    if (val->op == CDY_OP_FILL)
        return val->compute_dtype == val->meta.dtype
                   ? 0 : cg_fail(c, "value %d (%s): compute dtype differs", v, name);
    const cdy_value *dim = &c->g->values[val->args[0]];
    if (val->op != CDY_OP_IOTA || val->meta.dtype != CDY_DT_INT64 ||
        cdy_dtype_table[dim->meta.dtype].is_float || dim->i < 0 || dim->i >= val->meta.ndim)
        return cg_fail(c, "value %d (%s): needs int64 and a dim in range", v, name);
    return 0;
}

/* 1 if value v is computed inside pointwise kernels (not a buffer, not
 * special, extern or view): its args are fused wherever it is. */
static int cg_fused_pointwise(cg_ctx *c, const char *real, int v)
{
    const cdy_graph *g = c->g;
    return g->values[v].kind == CDY_VAL_NODE && !real[v] && !cg_is_special(g, v) &&
           !cg_is_extern(g, v) && !cg_is_view(g, v);
}

/* Mark in cst the nodes computed from kind 'I' nodes and scalars only
 * (pointwise, no tensor read): a mask, an arange expression. */
static void cg_const_nodes(cg_ctx *c, char *cst)
{
    const cdy_graph *g = c->g;
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *val = &g->values[v];
        if (val->kind != CDY_VAL_NODE || cg_is_special(g, v) || cg_is_extern(g, v) ||
            cg_is_view(g, v))
            continue;
        int ok = 1;
        for (int a = 0; a < val->nargs && ok; a++)
            ok = g->values[val->args[a]].kind == CDY_VAL_SCALAR || cst[val->args[a]];
        cst[v] = (char)ok;
    }
}

/* Mark real what a special node would otherwise fuse from kind 'I' nodes:
 * walking down from each special node through unrealized pointwise nodes,
 * the first node computed from kind 'I' nodes only (a causal mask: one
 * buffer, computed once, read by every pass of a row kernel). */
void cg_index_mark_real(cg_ctx *c, char *real)
{
    const cdy_graph *g = c->g;
    char *reach = cdy_arena_alloc(&c->arena, (size_t)g->nvalues + 1);
    char *cst = cdy_arena_alloc(&c->arena, (size_t)g->nvalues + 1);
    if (!reach || !cst)
        return;   /* the caller's next allocation fails the compile */
    cg_const_nodes(c, cst);
    for (int v = g->nvalues - 1; v >= 0; v--) {
        const cdy_value *val = &g->values[v];
        if (val->kind != CDY_VAL_NODE)
            continue;
        if (reach[v] && cst[v] && !cg_is_special(g, v)) {
            real[v] = 1;
            continue;
        }
        if (cg_is_special(g, v) || (reach[v] && cg_fused_pointwise(c, real, v)))
            for (int a = 0; a < val->nargs; a++)
                if (val->args[a] >= 0 && val->args[a] < v)
                    reach[val->args[a]] = 1;
    }
}

/* Fill index operand *op for IOTA node v in an iteration space of grp's
 * rank: stride 1 along its dim (aligned from the right), 0 elsewhere and
 * where v's dim has size 1 (broadcast: its index is 0 everywhere). */
static void cg_index_operand(cg_ctx *c, const cg_group *grp, int v, cg_operand *op)
{
    const cdy_value *val = &c->g->values[v];
    int shift = grp->ndim - val->meta.ndim;
    int dim = (int)c->g->values[val->args[0]].i + shift;
    memset(op, 0, sizeof(*op));
    op->buffer = -1;
    op->value = v;
    op->dtype = val->meta.dtype;
    for (int d = 0; d < grp->ndim; d++)
        op->stride[d] = d == dim && grp->sizes[d] != 1 && val->meta.sizes[dim - shift] != 1;
}

/* Append the live, unrealized IOTA nodes as index operands at ops[nops..),
 * c->vparam[v] their position; their count, or -1. */
int cg_index_operands(cg_ctx *c, const cg_group *grp, cg_operand *ops, int nops)
{
    int n = nops;
    for (int v = 0; v < c->g->nvalues; v++) {
        if (!c->live[v] || cg_is_leaf(c, v) || c->g->values[v].kind != CDY_VAL_NODE ||
            c->g->values[v].op != CDY_OP_IOTA)
            continue;
        if (n >= CG_MAX_OPS)
            return cg_fail(c, "kernel needs more than %d operands", CG_MAX_OPS);
        cg_index_operand(c, grp, v, &ops[n]);
        c->vparam[v] = n++;
    }
    return n - nops;
}

/* Emit `T t<v> = ...;` for kind 'I' node v: FILL its literal in v's dtype,
 * IOTA its index operand's offset in the current nest, through int32 when
 * it fits (GCC vectorizes int32 -> float conversions, not int64 ones on
 * AVX2, and folds the widening back into them; not when the dim's size is
 * symbolic: it may exceed INT32_MAX at a call). */
int cg_emit_index(cg_ctx *c, int v, int ind)
{
    const cdy_value *val = &c->g->values[v];
    const cdy_value *arg = &c->g->values[val->args[0]];
    cg_indent(&c->src, ind);
    if (val->op == CDY_OP_FILL) {
        char *lit = cg_scalar_literal(c, arg);
        char *e = lit ? cg_cast(c, lit, arg->meta.dtype, val->meta.dtype) : NULL;
        if (!e)
            return cg_fail(c, "out of memory");
        cdy_buf_printf(&c->src, "const %s t%d = %s;  /* fill */\n",
                       cdy_dtype_table[val->meta.dtype].cctype, v, e);
        return 0;
    }
    if (!c->nest)
        return cg_fail(c, "value %d (index_iota): not in a pointwise kernel", v);
    int any = 0, narrow = val->meta.sizes[arg->i] <= INT32_MAX && !cg_sym_dim_live(c, v, arg->i);
    cdy_buf_printf(&c->src, "const int64_t t%d = %s", v, narrow ? "(int32_t)(" : "");
    cg_offset_terms(&c->src, c->nest, c->vparam[v], 'i', &any);
    cdy_buf_printf(&c->src, "%s%s;  /* iota dim %lld */\n", any ? "" : "0", narrow ? ")" : "",
                   (long long)arg->i);
    return 0;
}
