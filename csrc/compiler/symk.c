/* symk.c - kernels with runtime sizes (issue 32).
 *
 * A graph compiled with symbolic sizes (cdy_codegen_sym, c->sym) is
 * scheduled at the example's sizes (the hints) as every graph is; then each
 * pointwise kernel's nest gets, per loop, the expression of its size and,
 * per operand, of its stride (cg_sym_nest), which the emitters print as the
 * locals n<d> / st<o>_<d> computed at the kernel's top from the symbols'
 * values (`const int64_t *cdy_s`, the kernel's last parameter).  The
 * decisions that read sizes become run-time ones: the parallel loop runs
 * under a condition on the actual element count (the kernel has a parallel
 * and a serial copy of its loops); streamed stores and memcpy copies are off.
 *
 * What holds at every size is what this file relies on: an operand is
 * contiguous (inputs with a symbol are guarded contiguous, the runtime
 * allocates buffers contiguous), a dim of size 1 is a constant (symbols are
 * >= 2), so the nest's ordering and coalescing made at the hints hold at
 * every size.  Anything else (a view or gather load, an index operand, a
 * special kind's kernel, a realized view with a symbolic size) fails the
 * symbolic compile with its reason; the caller then compiles the static
 * graph (every symbol specialized). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/cg.h"

int cg_sym_unsupported(cg_ctx *c, const char *what)
{
    return c->sym ? cg_fail(c, "symbolic sizes: %s", what) : 0;
}

/* The symbol expression e is (a lone symbol, coefficient 1), or -1. */
static int sk_var_of(const cdy_symtab *t, int e)
{
    const cdy_sym_poly *p = &t->exprs[e];
    if (p->nt != 1 || p->t[0].coef != 1 || p->t[0].nf != 1)
        return -1;
    const cdy_sym_atom *a = &t->atoms[p->t[0].f[0]];
    return a->expr < 0 ? a->sym : -1;
}

/* The representative of symbol k in rep (a union-find forest). */
static int sk_find(int *rep, int k)
{
    while (rep[k] != k)
        k = rep[k] = rep[rep[k]];
    return k;
}

/* e with every symbol replaced by the least symbol the relations make it
 * equal to (rep: the classes), or -1. */
static int sk_canon(cdy_symtab *t, int *rep, int e)
{
    const cdy_sym_poly p = t->exprs[e];   /* a copy: the table may grow */
    int r = cdy_sym_const(t, 0);
    for (int i = 0; i < p.nt && r >= 0; i++) {
        int term = cdy_sym_const(t, p.t[i].coef);
        for (int f = 0; f < p.t[i].nf && term >= 0; f++) {
            const cdy_sym_atom a = t->atoms[p.t[i].f[f]];
            int in = a.expr < 0 ? -1 : sk_canon(t, rep, a.expr);
            int x = a.expr < 0 ? cdy_sym_var(t, sk_find(rep, a.sym))
                               : in < 0 ? -1 : cdy_sym_floordiv(t, in, a.div);
            term = x < 0 ? -1 : cdy_sym_mul(t, term, x);
        }
        r = term < 0 ? -1 : cdy_sym_add(t, r, term);
    }
    return r;
}

/* 1 if expressions a and b are equal at every size the graph's guards
 * admit: the same id, a relation, or the same once every symbol is replaced
 * by the least one the relations between lone symbols make it equal to. */
static int sk_same(cdy_sym_shapes *s, int a, int b)
{
    if (a == b)
        return 1;
    if (a < 0 || b < 0)
        return 0;
    int rep[CDY_SYM_MAX_SYMS];
    for (int k = 0; k < s->tab.nsyms; k++)
        rep[k] = k;
    for (int r = 0; r < s->nrel; r++) {
        if ((s->rel[r][0] == a && s->rel[r][1] == b) || (s->rel[r][0] == b && s->rel[r][1] == a))
            return 1;
        int x = sk_var_of(&s->tab, s->rel[r][0]), y = sk_var_of(&s->tab, s->rel[r][1]);
        if (x >= 0 && y >= 0) {
            x = sk_find(rep, x);
            y = sk_find(rep, y);
            rep[x > y ? x : y] = x < y ? x : y;
        }
    }
    int ca = sk_canon(&s->tab, rep, a), cb = sk_canon(&s->tab, rep, b);
    return ca >= 0 && ca == cb;
}

static int sk_static_value(const cg_ctx *c, int v);
static int sk_static_tree(const cg_ctx *c, int v, int depth);

/* The meta value v's memory has: its plan buffer's, or (an input) its own. */
static const cdy_meta *sk_mem_meta(const cg_ctx *c, int v)
{
    int b = c->val_buf[v];
    return c->plan && b >= c->g->ninputs ? &c->plan->buffers[b] : &c->g->values[v].meta;
}

/* The stride expressions of non-canonical input v (example meta m) into
 * mst, as its guard (cdy_strides_follow) keeps them: in m's layout order, a
 * dim dense inside the next one the product of that one's stride and size,
 * any other (a gap: a slice of a bigger buffer) and a size-1 dim m's literal
 * stride; 0 or -1. */
static int sk_input_strides(cg_ctx *c, int v, const cdy_meta *m, int *mst)
{
    cdy_sym_shapes *s = c->sym;
    int order[CDY_MAX_NDIM], n = cdy_meta_layout_order(m, order), e = cdy_sym_const(&s->tab, 1);
    int64_t ext = 1;
    if (n < 0)
        return cg_sym_unsupported(c, "a kernel operand with a symbolic size overlaps itself");
    for (int d = 0; d < m->ndim; d++)
        mst[d] = cdy_sym_const(&s->tab, m->strides[d]);
    for (int i = n - 1; i >= 0 && e >= 0; i--) {
        int d = order[i];
        if (m->strides[d] == ext)
            mst[d] = e;
        e = mst[d] < 0 ? -1 : cdy_sym_mul(&s->tab, mst[d], s->dims[v][d]);
        ext = m->strides[d] * m->sizes[d];
    }
    for (int d = 0; d < m->ndim; d++)
        e = e < 0 || mst[d] < 0 ? -1 : e;
    return e < 0 ? cg_sym_unsupported(c, "a stride's expression is too large") : 0;
}

/* The strides of value v's own memory (a buffer or an input, per its dims)
 * into mst: literals when its sizes are static, else dense in the order of
 * its strides at the hints (inputs with a symbol are guarded contiguous, the
 * runtime allocates a buffer dense in that order: cdy_meta_dense_order), a
 * stride the product of the size expressions inside it; 0 or -1. */
static int sk_dense_strides(cg_ctx *c, int v, int *mst)
{
    cdy_sym_shapes *s = c->sym;
    const cdy_meta *m = sk_mem_meta(c, v);
    if (c->g->values[v].kind == CDY_VAL_INPUT && !cdy_meta_canonical(m) &&
        !sk_static_value(c, v))
        return sk_input_strides(c, v, m, mst);
    int order[CDY_MAX_NDIM], zero = cdy_sym_const(&s->tab, 0), e = cdy_sym_const(&s->tab, 1);
    int static_ = sk_static_value(c, v), n = static_ ? 0 : cdy_meta_dense_order(m, order);
    if (n < 0)
        return cg_sym_unsupported(c, "a kernel operand with a symbolic size is not dense");
    for (int d = 0; d < m->ndim; d++)
        mst[d] = static_ ? cdy_sym_const(&s->tab, m->strides[d]) : zero;
    for (int i = n - 1; i >= 0; i--) {
        mst[order[i]] = e;
        e = e < 0 ? -1 : cdy_sym_mul(&s->tab, e, s->dims[v][order[i]]);
    }
    for (int d = 0; d < m->ndim && !static_; d++) {   /* a size 1: the sizes inside it, as
                                                         * the runtime's buffers (and eager) */
        for (int i = 0; m->sizes[d] == 1 && i < n; i++)
            mst[d] = i == 0 ? cdy_sym_const(&s->tab, 1) : mst[d];
        for (int i = 0; m->sizes[d] == 1 && i < n && mst[d] >= 0; i++)
            if (m->strides[order[i]] < m->strides[d])
                mst[d] = cdy_sym_mul(&s->tab, mst[d], s->dims[v][order[i]]);
    }
    for (int d = 0; d < m->ndim; d++)
        e = e < 0 || mst[d] < 0 ? -1 : e;
    return e < 0 || zero < 0 ? cg_sym_unsupported(c, "a stride's expression is too large") : 0;
}

/* The offset expression of a view at offset off (its base's elements) of
 * base b (meta bm, without overlap: stride expressions bst) into *e: the
 * offset's digits in the base's dims at the hints (mixed radix in the
 * layout's order: unique for in-range starts), each a constant start (sym.h's const_off)
 * on a dim of constant size, times that dim's stride expression; 0 or -1. */
static int sk_view_offset(cg_ctx *c, int b, const cdy_meta *bm, const int *bst, int64_t off,
                          int *e)
{
    cdy_sym_shapes *s = c->sym;
    int order[CDY_MAX_NDIM], n = cdy_meta_layout_order(bm, order);   /* dense, or an input's
                                                                       * layout with gaps */
    int64_t rem = off, k;
    *e = cdy_sym_const(&s->tab, 0);
    for (int i = 0; i < n && *e >= 0; i++) {
        int j = order[i];
        int64_t digit = rem / bm->strides[j];
        rem -= digit * bm->strides[j];
        if (!digit)
            continue;
        if (digit >= bm->sizes[j] || !cdy_sym_is_const(&s->tab, s->dims[b][j], &k))
            return cg_sym_unsupported(c, "a kernel loads a view starting inside a symbolic dim");
        *e = cdy_sym_add(&s->tab, *e, cdy_sym_mul(&s->tab, cdy_sym_const(&s->tab, digit), bst[j]));
    }
    if (n < 0 || rem || *e < 0)
        return cg_sym_unsupported(c, "a view's offset has no expression");
    return 0;
}

/* The stride expression of dim d of view v (constant size) that walks
 * inside one dim j of a dense layout w (sizes, strides at the hints, size
 * expressions wdims, stride expressions wst: its base, or its source view)
 * of constant size K: v's stride at the hints a multiple m of j's, the whole
 * walk within K of j's steps (a view of heads in a row: x.view(b, t, h, d));
 * the stride is then m * wst[j] at every size.  The expression, or -1. */
static int sk_sub_dim(cg_ctx *c, int v, int d, const cdy_meta *w, const int64_t *wstrides,
                      const int *wdims, const int *wst)
{
    cdy_sym_shapes *s = c->sym;
    const cdy_value *val = &c->g->values[v];
    int64_t n, k, vs = val->view_strides[d];
    if (!cdy_sym_is_const(&s->tab, s->dims[v][d], &n) || vs <= 0)
        return -1;
    for (int j = 0; j < w->ndim; j++) {
        int64_t ws = wstrides[j];
        if (w->sizes[j] < 2 || ws <= 0 || vs % ws || !cdy_sym_is_const(&s->tab, wdims[j], &k))
            continue;
        if ((vs / ws) * (n - 1) < k)
            return cdy_sym_mul(&s->tab, cdy_sym_const(&s->tab, vs / ws), wst[j]);
    }
    return -1;
}

/* The strides (in its base's elements) of view v loaded by a kernel into
 * mst and its offset's expression into *off: literals when its base's sizes
 * are static; else every dim of size >= 2 is one dim of the base's, with its
 * stride at the hints (the base is dense, so its dims >= 2 have distinct
 * strides and the dim is the one with the view's stride), used once, with
 * its size expression (all of it) or a constant size within a constant one
 * (a split's piece), or has stride 0 (expand); its offset is 0, or constant
 * indices (sym.h's const_off: a split's pieces) on dims of constant size;
 * or it is a reshape of its contiguous base (contiguous strides of its own
 * sizes); else -1 with the reason. */
static int sk_view_reshapes(cg_ctx *c, int v, int b);

/* Contiguous stride expressions of value v's dims into mst and 0 into *off;
 * 0, or -1 with the reason. */
static int sk_contig_strides(cg_ctx *c, int v, int *mst, int *off)
{
    cdy_sym_shapes *s = c->sym;
    int e = cdy_sym_const(&s->tab, 1);
    *off = cdy_sym_const(&s->tab, 0);
    for (int d = c->g->values[v].meta.ndim - 1; d >= 0; d--) {
        mst[d] = e;
        e = e < 0 ? -1 : cdy_sym_mul(&s->tab, e, s->dims[v][d]);
    }
    return e < 0 || *off < 0 ? cg_sym_unsupported(c, "out of expression space") : 0;
}

static int sk_view_strides(cg_ctx *c, int v, int *mst, int *off);

/* 1 if dim d of view v walks within a dim of size expression e of what it
 * views (with the same stride): of that size, a slice's cut (s->cut: guarded
 * within), or a constant size within a constant one. */
static int sk_dim_within(cdy_sym_shapes *s, int v, int d, int e)
{
    int64_t k1, k2;
    return sk_same(s, s->dims[v][d], e) || (s->cut && (s->cut[v] >> d & 1)) ||
           (cdy_sym_is_const(&s->tab, s->dims[v][d], &k1) && cdy_sym_is_const(&s->tab, e, &k2) &&
            k1 <= k2);
}

/* 1 if view value u's dims of size >= 2 nest at the hints (by decreasing
 * stride, each within the one before), order[] their dims in that order,
 * *n their count. */
static int sk_nested(const cdy_value *u, int *order, int *n)
{
    *n = 0;
    for (int j = 0; j < u->meta.ndim; j++)
        if (u->meta.sizes[j] >= 2 && u->view_strides[j] > 0)
            order[(*n)++] = j;
    for (int i = 1; i < *n; i++)       /* insertion sort, decreasing stride */
        for (int k = i; k > 0 && u->view_strides[order[k]] > u->view_strides[order[k - 1]]; k--) {
            int t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
    for (int i = 1; i < *n; i++)
        if (u->view_strides[order[i]] * u->meta.sizes[order[i]] > u->view_strides[order[i - 1]])
            return 0;
    return 1;
}

/* The stride expression of a view dim of size expression ev that walks dim
 * j of a layout w (size expressions wdims, stride expressions wst; order:
 * its dims >= 2 outermost first, n of them) and the dims outside j in that
 * order as one (a flatten: x[..., 96:].reshape(-1, 32)): each such dim's
 * stride the one inside it times that one's size, and ev their sizes'
 * product, at every size; those dims added to *used (none in it before).
 * wst[j], or -1 if not so. */
static int sk_merged_dims(cg_ctx *c, int ev, const int *wdims, const int *wst,
                          const int *order, int n, int j, unsigned *used)
{
    cdy_sym_shapes *s = c->sym;
    int i = n - 1, e = wdims[j];
    unsigned mask = 1u << j;
    while (i >= 0 && order[i] != j)
        i--;
    while (i > 0 && e >= 0 && !sk_same(s, e, ev)) {
        int in = order[i], out = order[--i];
        if (!sk_same(s, wst[out], cdy_sym_mul(&s->tab, wst[in], wdims[in])))
            return -1;
        mask |= 1u << out;
        e = cdy_sym_mul(&s->tab, e, wdims[out]);
    }
    if (i < 0 || e < 0 || (*used & mask) || !sk_same(s, e, ev))
        return -1;
    *used |= mask;
    return wst[j];
}

/* View v's strides and offset through its source u (the node's first
 * argument, a view of the same base with stride expressions, as a split's
 * piece of a reshaped extern result): each dim of v of size >= 2 is one of
 * u's with its stride at the hints, of its size, cut from it (s->cut) or of
 * a constant size within a constant one; v's offset from u's is constant
 * indices on u's constant dims (u's dims nest).  0, or -1 (no message: the
 * caller's reason stands). */
static int sk_view_via_src(cg_ctx *c, int v, int *mst, int *off)
{
    cdy_sym_shapes *s = c->sym;
    const cdy_value *val = &c->g->values[v];
    int u = val->nargs >= 1 ? val->args[0] : -1, ust[CDY_MAX_NDIM], order[CDY_MAX_NDIM], n;
    const cdy_value *uv = u >= 0 && u < v ? &c->g->values[u] : NULL;
    int64_t rem = uv ? val->view_offset - uv->view_offset : -1, k1;
    char err[256];
    snprintf(err, sizeof(err), "%s", c->err && c->errlen ? c->err : "");
    if (!uv || rem < 0 || !cg_is_view(c->g, u) || uv->view_base != val->view_base ||
        !sk_nested(uv, order, &n) || sk_view_strides(c, u, ust, off))
        goto fail;
    for (int i = 0; i < n; i++) {
        int j = order[i];
        int64_t digit = rem / uv->view_strides[j];
        rem -= digit * uv->view_strides[j];
        if (digit && (digit >= uv->meta.sizes[j] || !cdy_sym_is_const(&s->tab, s->dims[u][j], &k1)))
            goto fail;
        if (digit)
            *off = cdy_sym_add(&s->tab, *off, cdy_sym_mul(&s->tab, cdy_sym_const(&s->tab, digit),
                                                          ust[j]));
    }
    if (rem || *off < 0)
        goto fail;
    unsigned used = 0;
    for (int d = 0; d < val->meta.ndim; d++) {
        mst[d] = cdy_sym_const(&s->tab, 0);
        if (val->meta.sizes[d] == 1 || val->view_strides[d] == 0)
            continue;
        int i = 0;
        while (i < n && (uv->view_strides[order[i]] != val->view_strides[d] || (used >> order[i] & 1)))
            i++;
        int j = i < n ? order[i] : -1;
        if (j < 0 &&
            (mst[d] = sk_sub_dim(c, v, d, &uv->meta, uv->view_strides, s->dims[u], ust)) >= 0)
            continue;                       /* heads inside a row: x.view(b, t, h, d) */
        if (j >= 0 && !sk_dim_within(s, v, d, s->dims[u][j]) &&
            (mst[d] = sk_merged_dims(c, s->dims[v][d], s->dims[u], ust, order, n, j, &used)) >= 0)
            continue;                       /* u's dims flattened into one */
        if (j < 0 || !sk_dim_within(s, v, d, s->dims[u][j]))
            goto fail;
        used |= 1u << j;
        mst[d] = ust[j];
    }
    return 0;
fail:
    if (c->err && c->errlen)
        snprintf(c->err, c->errlen, "%s", err);
    return -1;
}

/* 1 if view v starts each dim at a constant index (sym.h's const_off). */
static int sk_const_off(const cdy_sym_shapes *s, int v)
{
    return s->const_off && s->const_off[v];
}

/* 1 if view (or gather) v's offset moves with the symbols (sym.h's moves;
 * unknown: 1). */
static int sk_moves(const cg_ctx *c, int v)
{
    return !c->sym->moves || c->sym->moves[v];
}

/* View v's strides and offset through its source (s->vsrc: a 'p' or 'c'
 * map with start expressions): the source's (a view of the same base:
 * sk_view_strides; the base: its dense strides, offset 0) per mapped dim,
 * the offset the source's plus each source dim's start times its stride;
 * checked against v's strides and offset at the hints.  0, or -1 (no
 * message unless the source's layout failed). */
static int sk_view_via_map(cg_ctx *c, int v, int *mst, int *off)
{
    cdy_sym_shapes *s = c->sym;
    const cdy_value *val = &c->g->values[v];
    const cdy_sym_vsrc *r = s->vsrc ? &s->vsrc[v] : NULL;
    int u = r ? r->src : -1, ust[CDY_MAX_NDIM], zero = cdy_sym_const(&s->tab, 0);
    if (u < 0 || u >= v || zero < 0)
        return -1;
    const cdy_value *uv = &c->g->values[u];
    *off = zero;
    if (u == val->view_base ? sk_dense_strides(c, u, ust)
                            : !cg_is_view(c->g, u) || uv->view_base != val->view_base ||
                                  sk_view_strides(c, u, ust, off))
        return -1;
    for (int j = 0; j < uv->meta.ndim && *off >= 0; j++)
        if (r->start[j] >= 0)
            *off = cdy_sym_add(&s->tab, *off, cdy_sym_mul(&s->tab, r->start[j], ust[j]));
    if (*off < 0 || cdy_sym_eval(&s->tab, *off, NULL) != val->view_offset)
        return -1;
    for (int d = 0; d < val->meta.ndim; d++) {
        mst[d] = r->map[d] < 0 || r->map[d] >= uv->meta.ndim ? zero : ust[r->map[d]];
        if (val->meta.sizes[d] >= 2 && cdy_sym_eval(&s->tab, mst[d], NULL) != val->view_strides[d])
            return -1;
    }
    return 0;
}

static int sk_view_strides(cg_ctx *c, int v, int *mst, int *off)
{
    cdy_sym_shapes *s = c->sym;
    const cdy_value *val = &c->g->values[v];
    int b = val->view_base, bst[CDY_MAX_NDIM], zero = cdy_sym_const(&s->tab, 0);
    int border[CDY_MAX_NDIM];
    unsigned used = 0;
    const cdy_meta *bm = sk_mem_meta(c, b);
    int nb = cdy_meta_layout_order(bm, border);   /* sk_merged_dims checks its dims nest */
    *off = cdy_sym_const(&s->tab, val->view_offset);
    if (!sk_const_off(s, v) && s->vsrc && s->vsrc[v].src >= 0) {   /* a start from sizes */
        if (!sk_view_via_map(c, v, mst, off))
            return 0;
        return cg_sym_unsupported(c, "a view's offset from sizes has no expression");
    }
    if (sk_moves(c, v) && (!s->moves || sk_view_via_src(c, v, mst, off)))
        return cg_sym_unsupported(c, "a view of a view at an offset from sizes");
    if (sk_moves(c, v))
        return 0;   /* at constant indices of its source (sk_view_via_src) */
    if (sk_static_value(c, b) && sk_static_value(c, v) && !sk_moves(c, v)) {
        for (int d = 0; d < val->meta.ndim; d++)
            if ((mst[d] = cdy_sym_const(&s->tab, val->view_strides[d])) < 0)
                return cg_sym_unsupported(c, "out of expression space");
        return *off < 0 ? cg_sym_unsupported(c, "out of expression space") : 0;
    }
    if (!cg_is_gather(c->g, v) && sk_view_reshapes(c, v, b))   /* a reshape of a contiguous base */
        return sk_contig_strides(c, v, mst, off);
    if (val->view_offset && !sk_const_off(s, v) && !sk_view_via_src(c, v, mst, off))
        return 0;   /* a view at a constant index of a source at an offset from sizes */
    if (val->view_offset && !sk_const_off(s, v)) {
        char why[160];
        snprintf(why, sizeof(why), "a kernel loads a view at an offset of a base with a "
                 "symbolic size (%%%d, line %d)", v, val->source_line);
        return cg_sym_unsupported(c, why);
    }
    if (sk_dense_strides(c, b, bst) ||
        (val->view_offset && sk_view_offset(c, b, bm, bst, val->view_offset, off)))
        return -1;
    for (int d = 0; d < val->meta.ndim; d++) {
        mst[d] = zero;
        if (val->meta.sizes[d] == 1 || val->view_strides[d] == 0)
            continue;
        int j = 0;
        while (j < bm->ndim && (bm->sizes[j] == 1 || bm->strides[j] != val->view_strides[d]))
            j++;
        int ok = j < bm->ndim && !(used >> j & 1);
        ok = ok && sk_dim_within(s, v, d, s->dims[b][j]);
        if (!ok && (mst[d] = sk_sub_dim(c, v, d, bm, bm->strides, s->dims[b], bst)) >= 0)
            continue;                       /* a constant part of a constant-size dim */
        if (!ok && j < bm->ndim && !(used >> j & 1) && (mst[d] = sk_merged_dims(
                c, s->dims[v][d], s->dims[b], bst, border, nb, j, &used)) >= 0)
            continue;                       /* base dims flattened into one */
        if (!ok && !sk_view_via_src(c, v, mst, off))
            return 0;
        if (!ok) {
            char why[160];
            snprintf(why, sizeof(why), "a kernel loads a view that is not a permutation of its "
                     "base's dims (%%%d, line %d)", v, val->source_line);
            return cg_sym_unsupported(c, why);
        }
        used |= 1 << j;
        mst[d] = bst[j];
    }
    return zero < 0 ? cg_sym_unsupported(c, "out of expression space") : 0;
}

/* Operand op's stride expressions per dim of an iteration space of ndim
 * dims (gexp: their expressions) into st; 0, or -1 with a message. */
static int sk_live(const cdy_sym_shapes *s, int e);

int cg_sym_same_dims(cg_ctx *c, int v, int w)
{
    const cdy_meta *m = &c->g->values[v].meta;
    if (!c->sym || c->g->values[w].meta.ndim != m->ndim)
        return !c->sym;
    for (int d = 0; d < m->ndim; d++)
        if (!sk_same(c->sym, c->sym->dims[v][d], c->sym->dims[w][d]))
            return 0;
    return 1;
}

/* The expression of gather v's index i's range (sym.h's grange: the size
 * of the source dim it walks), or -1 (unknown or constant: the literal). */
static int sk_grange(const cdy_sym_shapes *s, int v, int i)
{
    return s->grange && i < CDY_SYM_MAX_GIDX && s->grange[v][i] > 0
               ? sk_live(s, s->grange[v][i] - 1) : -1;
}

/* Gather node v's indexed sizes and strides (gather.c: the range each index
 * is checked against, the stride it steps) as expressions into c->gsym:
 * the range is the size of the source dim the index walks (sym.h's grange:
 * an expanded one's too), else of the one dim of its base (dense: its dims
 * >= 2 have distinct strides) with that size and stride at the hints; the
 * stride is that base dim's dense stride; a literal where constant (a
 * static base's strides, a stride 0).  0, or -1 with the reason. */
static int sk_gather_dims(cg_ctx *c, int v)
{
    cdy_sym_shapes *s = c->sym;
    const cdy_value *val = &c->g->values[v];
    int k = val->nargs / 4, b = val->view_base, bst[CDY_MAX_NDIM];
    const cdy_meta *bm = sk_mem_meta(c, b);
    if (!c->gsym && (c->gsym = cdy_arena_alloc(&c->arena, sizeof(int) * CG_GSYM *
                                                (size_t)c->g->nvalues)))
        memset(c->gsym, 0xff, sizeof(int) * CG_GSYM * (size_t)c->g->nvalues);
    if (!c->gsym || k > CG_GSYM / 2)
        return cg_sym_unsupported(c, "out of memory");
    int fixed = sk_static_value(c, b);   /* the base's literal strides hold */
    if (!fixed && sk_dense_strides(c, b, bst))
        return -1;
    for (int i = 0; i < k; i++) {
        int64_t n = c->g->values[val->args[2 * k + i]].i, st = c->g->values[val->args[k + i]].i;
        int rg = sk_grange(s, v, i), j = 0;
        while (!fixed && j < bm->ndim &&
               (bm->sizes[j] < 2 || bm->sizes[j] != n || bm->strides[j] != st))
            j++;
        if (!fixed && j == bm->ndim && n >= 2 && st != 0)   /* st 0: an expanded dim */
            return cg_sym_unsupported(c, "a gather indexes a dim that is not one of its base's");
        c->gsym[v * CG_GSYM + i] = rg >= 0 ? rg : !fixed && j < bm->ndim ? sk_live(s, s->dims[b][j])
                                                                          : -1;
        c->gsym[v * CG_GSYM + CG_GSYM / 2 + i] = !fixed && j < bm->ndim ? sk_live(s, bst[j]) : -1;
    }
    return 0;
}

static int sk_op_strides(cg_ctx *c, int ndim, cg_operand *op, const int *gexp, int *st)
{
    cdy_sym_shapes *s = c->sym;
    const cdy_meta *m = &c->g->values[op->value].meta;
    int shift = ndim - m->ndim, zero = cdy_sym_const(&s->tab, 0), mst[CDY_MAX_NDIM], off = zero;
    int gather = cg_is_gather(c->g, op->value) &&   /* a realized one: its own dense buffer */
                 op->buffer != c->val_buf[op->value];
    if (op->buffer < 0)
        return cg_sym_unsupported(c, "a kernel loads an index");
    if (gather && !op->is_out && sk_gather_dims(c, op->value))
        return -1;
    if ((gather || cg_is_view(c->g, op->value)) && !op->is_out   /* a store: its own buffer */
            ? sk_view_strides(c, op->value, mst, &off)
                                    : op->offset ? cg_sym_unsupported(c, "an operand's offset")
                                                 : sk_dense_strides(c, op->value, mst))
        return -1;
    if (off < 0)
        return cg_sym_unsupported(c, "out of expression space");
    if (cg_is_view(c->g, op->value) && !op->is_out &&
        op->buffer != c->val_buf[c->g->values[op->value].view_base])
        off = zero;   /* a view torch realized (its own buffer): its pointer is at its offset */
    op->sym_off = sk_live(s, off) >= 0 ? off + 1 : 0;
    for (int d = 0; d < ndim; d++) {
        int md = d - shift;
        if (md < 0 || m->sizes[md] == 1) {
            st[d] = zero;
            continue;
        }
        if (!sk_same(s, s->dims[op->value][md], gexp[d]))
            return cg_sym_unsupported(c, "an operand's size differs from the kernel's");
        st[d] = mst[md];
    }
    return zero < 0 ? cg_sym_unsupported(c, "out of expression space") : 0;
}

/* The expression id, or -1 when it is a constant (the literal holds). */
static int sk_live(const cdy_sym_shapes *s, int e)
{
    int64_t v;
    return cdy_sym_is_const(&s->tab, e, &v) ? -1 : e;
}

/* The group's dim expressions (every output's equal) into gexp; 0 or -1. */
static int sk_group(cg_ctx *c, const kir_kernel *k, int *gexp)
{
    cdy_sym_shapes *s = c->sym;
    for (int d = 0; d < k->grp.ndim; d++)
        gexp[d] = s->dims[k->grp.outs[0]][d];
    for (int i = 1; i < k->grp.nout; i++)
        for (int d = 0; d < k->grp.ndim; d++)
            if (!sk_same(s, s->dims[k->grp.outs[i]][d], gexp[d]))
                return cg_sym_unsupported(c, "outputs of one kernel differ in size");
    return 0;
}

/* Loop d of nest n's group dims into dims (outermost first: by the first
 * output's strides at the hints ost, descending, ties by dim order; ost
 * NULL: dim order); their count. */
static int sk_loop_dims(const cg_nest *n, int d, int ndim, const int64_t *ost, int *dims)
{
    int k = 0;
    for (int g = 0; g < ndim; g++) {
        if (!(n->gmask[d] >> g & 1))
            continue;
        int j = k++;
        while (ost && j > 0 && ost[dims[j - 1]] < ost[g]) {
            dims[j] = dims[j - 1];
            j--;
        }
        dims[j] = g;
    }
    return k;
}

/* 1 if group dims a (outer) and b (inner) walk as one at every size for
 * each of the nops operands (stride expressions st): a's stride is b's
 * times b's size. */
static int sk_adjacent(cdy_sym_shapes *s, const int *gexp, int (*st)[CDY_MAX_NDIM], int nops,
                       int a, int b)
{
    for (int o = 0; o < nops; o++)
        if (!sk_same(s, st[o][a], cdy_sym_mul(&s->tab, st[o][b], gexp[b])))
            return 0;
    return 1;
}

/* Split nest n's loops (built at the hints, ost: the first output's strides
 * there) between the group dims they merge that are adjacent only at the
 * hints (sk_adjacent): the outer part a loop of its own with the stride of
 * its innermost dim (ops: the operands' strides per group dim).  0, or -1
 * (no loop left to split into). */
static int sk_split_loops(cg_ctx *c, cg_nest *n, const int *gexp, int (*st)[CDY_MAX_NDIM],
                          int nops, int ndim, const int64_t *ost, const cg_operand *ops)
{
    cdy_sym_shapes *s = c->sym;
    for (int d = 0; d < n->ndim; d++) {
        int dims[CDY_MAX_NDIM], nd = sk_loop_dims(n, d, ndim, ost, dims), i = 0;
        while (i + 1 < nd && sk_adjacent(s, gexp, st, nops, dims[i], dims[i + 1]))
            i++;
        if (i + 1 >= nd)
            continue;
        if (n->ndim >= CDY_MAX_NDIM)
            return -1;
        for (int e = n->ndim; e > d + 1; e--) {   /* loops after d move one inward */
            n->size[e] = n->size[e - 1];
            n->gmask[e] = n->gmask[e - 1];
            for (int o = 0; o < nops; o++)
                n->stride[o][e] = n->stride[o][e - 1];
        }
        n->ndim++;
        unsigned outer = 0;
        int64_t osz = 1;
        for (int j = 0; j <= i; j++) {
            outer |= 1u << dims[j];
            osz *= cdy_sym_eval(&s->tab, gexp[dims[j]], NULL);
        }
        n->gmask[d + 1] = n->gmask[d] & ~outer;
        n->gmask[d] = outer;
        n->size[d + 1] = osz ? n->size[d] / osz : 0;
        n->size[d] = osz;
        for (int o = 0; o < nops; o++) {
            n->stride[o][d + 1] = n->stride[o][d];
            n->stride[o][d] = ops[o].stride[dims[i]];
        }
    }
    return 0;
}

/* Fill nest n's symbolic sizes and strides (n->sym) from the iteration
 * space's dim expressions gexp and the nops operands' stride expressions st
 * per dim.  The dims one loop walks as one (merged at the hints) must merge
 * at every size: each operand's stride of a dim equal to its stride of the
 * next inner one times that one's size; a pointwise nest (ops given) splits
 * its loops where they do not (sk_split_loops), a reduction's fails.  ost
 * NULL (a reduction's nests): the loops walk the dims in dim order (their
 * index arithmetic relies on it); else the first output's strides at the
 * hints order a loop's dims.  0 or -1. */
static int sk_fill_nest(cg_ctx *c, cg_nest *n, const int *gexp, int (*st)[CDY_MAX_NDIM],
                        int nops, int ndim, const int64_t *ost, const cg_operand *ops)
{
    cdy_sym_shapes *s = c->sym;
    n->sym = 1;
    if (ops && ost && sk_split_loops(c, n, gexp, st, nops, ndim, ost, ops))
        return cg_sym_unsupported(c, "a kernel's loop merges dims that are not adjacent at "
                                     "every size, and no loop is left to split it");
    int prev = -1;
    for (int d = 0; d < n->ndim; d++) {
        int dims[CDY_MAX_NDIM], nd = sk_loop_dims(n, d, ndim, ost, dims);
        int e = cdy_sym_const(&s->tab, 1), last = nd ? dims[nd - 1] : -1;
        for (int i = 0; i < nd; i++) {
            if (!ost && dims[i] <= prev)
                return cg_sym_unsupported(c, "a kernel's loops are not in memory order");
            prev = dims[i];
            e = e < 0 ? -1 : cdy_sym_mul(&s->tab, e, gexp[dims[i]]);
            for (int o = 0; i + 1 < nd && o < nops; o++)
                if (!sk_same(s, st[o][dims[i]], cdy_sym_mul(&s->tab, st[o][dims[i + 1]],
                                                            gexp[dims[i + 1]])))
                    return cg_sym_unsupported(c, "a kernel's loop merges dims that are not "
                                                 "adjacent at every size");
        }
        if (e < 0 || (last < 0 && n->size[d] != 0))
            return cg_sym_unsupported(c, "a loop's size has no expression");
        n->ssize[d] = last < 0 ? -1 : sk_live(s, e);
        for (int o = 0; o < nops; o++)
            n->sstride[o][d] = last < 0 ? -1 : sk_live(s, st[o][last]);
    }
    return 0;
}

/* 1 if value v's sizes are constants and so are, for a view or a gather,
 * those of every value its memory comes from (base, indices): its strides
 * and offset are then the hints' at every size. */
static int sk_static_tree(const cg_ctx *c, int v, int depth)
{
    const cdy_value *val = &c->g->values[v];
    if (!sk_static_value(c, v) || depth > 16)
        return 0;
    int view = cg_is_view(c->g, v), gather = cg_is_gather(c->g, v);
    for (int i = 0; gather && i < val->nargs / 4; i++)
        if (sk_grange(c->sym, v, i) >= 0)
            return 0;                        /* its range checks read a symbol */
    if ((view || gather) && val->view_base >= 0 && !sk_static_tree(c, val->view_base, depth + 1))
        return 0;
    if ((view || gather) && sk_moves(c, v))
        return 0;   /* its offset moves with the symbols */
    for (int a = 0; gather && a < val->nargs; a++)
        if (!sk_static_tree(c, val->args[a], depth + 1))
            return 0;
    return 1;
}

/* 1 if kernel k reads and writes only static trees (sk_static_tree): it is
 * the static kernel at every size of the graph's symbols. */
static int sk_static_kernel(const cg_ctx *c, const kir_kernel *k)
{
    for (int i = 0; i < k->grp.nout; i++)
        if (!sk_static_value(c, k->grp.outs[i]))
            return 0;
    for (int o = 0; o < k->nops; o++)
        if (!sk_static_tree(c, k->ops[o].value, 0))
            return 0;
    return 1;
}

/* Index operand op's (an IOTA: iota.c) stride expressions per dim of an
 * iteration space of ndim dims (gexp) into st: 1 along its dim, whose size
 * must be the space's, 0 elsewhere; 0, or -1 with a message. */
static int sk_index_strides(cg_ctx *c, int ndim, const cg_operand *op, const int *gexp, int *st)
{
    cdy_sym_shapes *s = c->sym;
    int shift = ndim - c->g->values[op->value].meta.ndim;
    int zero = cdy_sym_const(&s->tab, 0), one = cdy_sym_const(&s->tab, 1);
    for (int d = 0; d < ndim; d++) {
        st[d] = op->stride[d] ? one : zero;
        if (op->stride[d] && (d < shift || !sk_same(s, s->dims[op->value][d - shift], gexp[d])))
            return cg_sym_unsupported(c, "an index's size differs from the kernel's");
    }
    return zero < 0 || one < 0 ? cg_sym_unsupported(c, "out of expression space") : 0;
}

int cg_sym_nest(cg_ctx *c, kir_kernel *k)
{
    int gexp[CDY_MAX_NDIM], st[CG_MAX_OPS][CDY_MAX_NDIM];
    if (sk_static_kernel(c, k))
        return 0;                /* its sizes and strides are literals */
    if (sk_group(c, k, gexp))
        return -1;
    for (int o = 0; o < k->nops; o++)
        if (sk_op_strides(c, k->grp.ndim, &k->ops[o], gexp, st[o]))
            return -1;
    for (int o = k->nops; o < k->nops + k->nidx; o++)
        if (sk_index_strides(c, k->grp.ndim, &k->ops[o], gexp, st[o]))
            return -1;
    return sk_fill_nest(c, k->nest, gexp, st, k->nops + k->nidx, k->grp.ndim,
                        k->ops[cg_first_out(k->ops, k->nops)].stride, k->ops);
}

/* Output op's strides over an input space whose dims `mask` are reduced
 * (keep: they stay as size 1) into st; 0 or -1. */
static int sk_red_out_strides(cg_ctx *c, const cg_operand *op, int ndim, int64_t mask, int keep,
                              int *st)
{
    cdy_sym_shapes *s = c->sym;
    const cdy_meta *om = &c->g->values[op->value].meta;
    int zero = cdy_sym_const(&s->tab, 0);
    if (!cdy_meta_contiguous(om) || zero < 0)
        return cg_sym_unsupported(c, "a reduction's output is not contiguous");
    for (int d = 0, od = 0; d < ndim; d++) {
        int red = (int)(mask >> d & 1);
        st[d] = zero;
        if (!red && om->sizes[od] != 1) {
            int e = cdy_sym_const(&s->tab, 1);
            for (int j = od + 1; j < om->ndim && e >= 0; j++)
                e = cdy_sym_mul(&s->tab, e, s->dims[op->value][j]);
            if (e < 0)
                return cg_sym_unsupported(c, "a stride's expression is too large");
            st[d] = e;
        }
        od += !red || keep;
    }
    return 0;
}

int cg_sym_red_nests(cg_ctx *c, int in, int64_t mask, int keep, cg_operand *ops, int nops,
                     cg_nest *on, cg_nest *rn, int *rnumel)
{
    return cg_sym_split_nests(c, in, mask, keep, 1, ops, nops, on, rn, rnumel);
}

int cg_sym_split_nests(cg_ctx *c, int in, int64_t mask, int keep, int red_outs,
                       cg_operand *ops, int nops, cg_nest *on, cg_nest *rn, int *rnumel)
{
    cdy_sym_shapes *s = c->sym;
    const cdy_meta *im = &c->g->values[in].meta;
    int gexp[CDY_MAX_NDIM], st[CG_MAX_OPS][CDY_MAX_NDIM], fixed = sk_static_tree(c, in, 0);
    for (int o = 0; fixed && o < nops; o++)
        fixed = sk_static_tree(c, ops[o].value, 0);
    if (fixed) {                 /* the static kernel at every size */
        *rnumel = -1;
        return 0;
    }
    for (int d = 0; d < im->ndim; d++)
        gexp[d] = s->dims[in][d];
    for (int o = 0; o < nops; o++)
        if (ops[o].is_out && red_outs ? sk_red_out_strides(c, &ops[o], im->ndim, mask, keep, st[o])
                          : sk_op_strides(c, im->ndim, &ops[o], gexp, st[o]))
            return -1;
    int e = cdy_sym_const(&s->tab, 1);
    for (int d = 0; d < im->ndim && e >= 0; d++)
        if (mask >> d & 1)
            e = cdy_sym_mul(&s->tab, e, gexp[d]);
    if (e < 0)
        return cg_sym_unsupported(c, "a reduction's size has no expression");
    *rnumel = sk_live(s, e);
    rn->pfx = "r";
    return sk_fill_nest(c, on, gexp, st, nops, im->ndim, NULL, NULL) ||
           sk_fill_nest(c, rn, gexp, st, nops, im->ndim, NULL, NULL);
}

int cg_sym_cat_start(cg_ctx *c, int v, int i)
{
    cdy_sym_shapes *s = c->sym;
    const cdy_value *val = &c->g->values[v];
    int stack = cg_cat_is_stack(val), d = c->sym_cat_dim;
    int e = cdy_sym_const(&s->tab, stack ? i : 0);
    for (int j = 0; !stack && j < i && e >= 0; j++)
        e = cdy_sym_add(&s->tab, e, s->dims[val->args[j]][d]);
    return e < 0 ? cg_sym_unsupported(c, "a cat piece's start has no expression") : e;
}

int cg_sym_piece(cg_ctx *c, kir_kernel *k, int d, int start)
{
    cdy_sym_shapes *s = c->sym;
    const cdy_value *val = &c->g->values[k->node];
    const cdy_meta *pm = &c->g->values[k->piece].meta;
    int gexp[CDY_MAX_NDIM], st[CG_MAX_OPS][CDY_MAX_NDIM], mst[CDY_MAX_NDIM];
    int first = cg_first_out(k->ops, k->nops), zero = cdy_sym_const(&s->tab, 0);
    if (k->nidx || k->nops != first + 1)
        return cg_sym_unsupported(c, "a cat piece's kernel reads an index");
    for (int pd = 0; pd < pm->ndim; pd++)
        gexp[pd] = s->dims[k->piece][pd];
    for (int o = 0; o < first; o++)
        if (sk_op_strides(c, pm->ndim, &k->ops[o], gexp, st[o]))
            return -1;
    if (sk_dense_strides(c, k->node, mst))
        return -1;
    for (int pd = 0; pd < pm->ndim; pd++) {
        int od = cg_cat_outdim(val, d, pd);
        st[first][pd] = pm->sizes[pd] == 1 ? zero : mst[od];
        if (od != d && !sk_same(s, s->dims[k->node][od], gexp[pd]))
            return cg_sym_unsupported(c, "a cat piece's size differs from the output's");
    }
    int off = cdy_sym_mul(&s->tab, start, mst[d]);
    if (off < 0 || zero < 0)
        return cg_sym_unsupported(c, "a cat piece's offset has no expression");
    k->ops[first].sym_off = sk_live(s, off) >= 0 ? off + 1 : 0;
    if (k->ops[first].sym_off)
        k->ops[first].offset = 0;
    return sk_fill_nest(c, k->nest, gexp, st, k->nops, pm->ndim, k->ops[first].stride, k->ops);
}

const char *cg_sym_expr_text(cg_ctx *c, int e)
{
    char ex[512];
    cdy_sym_print(&c->sym->tab, e, ex, sizeof(ex));
    return cg_strf(c, "(%s)", ex);
}

const char *cg_sym_numel_text(cg_ctx *c, const cg_nest *n)
{
    cdy_buf t = {0};
    for (int d = 0; d < n->ndim; d++)
        cdy_buf_printf(&t, "%s%s", d ? " * " : "", cg_sym_size_text(c, n, d));
    const char *r = cg_strf(c, "(%s)", t.data ? t.data : "1");
    cdy_buf_free(&t);
    return r;
}

const char *cg_sym_size_text(cg_ctx *c, const cg_nest *nest, int d)
{
    if (nest->sym && nest->ssize[d] >= 0)
        return cg_strf(c, "n%s%d", nest->pfx ? nest->pfx : "", d);
    return cg_strf(c, "%lldLL", (long long)nest->size[d]);
}

/* Emit `const int64_t <name> = <expression e>;`. */
static void sk_local(cg_ctx *c, const char *name, int e)
{
    char ex[512];
    cdy_sym_print(&c->sym->tab, e, ex, sizeof(ex));
    cdy_buf_printf(&c->src, "    const int64_t %s = %s;\n", name, ex);
}

/* Emit the size and stride locals of symbolic nest n (nops operands). */
static void sk_nest_locals(cg_ctx *c, const cg_nest *n, int nops)
{
    char name[32];
    const char *p = n->pfx ? n->pfx : "";
    for (int d = 0; n->sym && d < n->ndim; d++) {
        if (n->ssize[d] >= 0) {
            snprintf(name, sizeof(name), "n%s%d", p, d);
            sk_local(c, name, n->ssize[d]);
        }
        for (int o = 0; o < nops; o++)
            if (n->sstride[o][d] >= 0 && n->stride[o][d] != 0) {
                snprintf(name, sizeof(name), "st%s%d_%d", p, o, d);
                sk_local(c, name, n->sstride[o][d]);
            }
    }
}

void cg_sym_emit_locals(cg_ctx *c, const kir_kernel *k)
{
    for (int s = 0; s < c->sym->tab.nsyms; s++)
        cdy_buf_printf(&c->src, "    const int64_t s%d = cdy_s[%d]; (void)s%d;\n", s, s, s);
    if (k->nest)
        sk_nest_locals(c, k->nest, k->nops + (k->nidx > 0 ? k->nidx : 0));
    if (k->rnest)
        sk_nest_locals(c, k->rnest, k->nops);
}

/* 1 when row copy k (cg_view_sched_copy's copy_row, at the hints) copies
 * contiguous rows at every size: its innermost stride 1 in both operands
 * not an expression of the sizes. */
static int sk_copy_rows_hold(const kir_kernel *k)
{
    const cg_nest *n = k->nest;
    int last = n->ndim - 1;
    return k->copy_row && !k->copy_unit && last >= 1 && n->sstride[0][last] < 0 &&
           n->sstride[1][last] < 0;
}

void cg_sym_sched_loops(cg_ctx *c, kir_kernel *k)
{
    const cg_nest *n = k->nest;
    int rows = sk_copy_rows_hold(k);     /* one memcpy a row, as the static kernel */
    k->stream = 0;
    k->copy_unit = 0;
    k->flags &= ~(unsigned)CDY_KIRF_COPY_UNITS;
    if (!rows) {
        k->copy_row = 0;
        k->flags &= ~(unsigned)CDY_KIRF_COPY_ROWS;
    }
    int live = 0;
    for (int d = 0; d < n->ndim; d++)
        live |= n->ssize[d] >= 0;
    if (!live || n->ndim == 0 || c->nthreads <= 1)
        return;                            /* the hints' decision holds at every size */
    const char *numel = cg_sym_numel_text(c, n);
    int64_t per = cg_moved(k->ops, k->nops, n, 1);
    k->par_cond = k->nfused <= CG_PARALLEL_CHEAP_OPS && !rows
                      ? cg_strf(c, "%s >= %dLL && %s * %lldLL >= %dLL", numel, CG_PARALLEL_NUMEL,
                                numel, (long long)per, CG_PARALLEL_BYTES)
                      : cg_strf(c, "%s >= %dLL", numel, CG_PARALLEL_NUMEL);   /* a copy's: views.c */
    k->collapse = n->ndim >= 3;           /* the outer loop's length unknown: two shared */
    k->parallel = 1;
    k->serial = NULL;
    k->copy_parallel = rows;
    k->copy_collapse = rows && n->ndim >= 3;
}

int cg_sym_check_step(cg_ctx *c, int kind, int v)
{
    if (!c->sym)
        return 0;
    if (kind == CDY_KIR_EXTERN || kind == CDY_KIR_REDUCE || kind == CDY_KIR_ROWS ||
        (kind == CDY_KIR_CAT && !cg_cat_is_pad(&c->g->values[v])))
        return 0;                          /* torch takes the sizes (sym/infer.c's extern
                                            * rules); reduce.c's kernels take runtime sizes */
    if (kind != CDY_KIR_VIEW)
        return cg_sym_unsupported(c, cg_strf(c, "%s kernels take static sizes",
                                             cdy_op_table[c->g->values[v].op].name));
    return 0;                              /* a view's layout: cg_sym_check_plan */
}

/* 1 if view v (of base b, dense) is contiguous at every size: contiguous at
 * the hints, at offset 0, over a base contiguous at the hints, and of the
 * base's element count (a reshape of it). */
static int sk_view_reshapes(cg_ctx *c, int v, int b)
{
    cdy_sym_shapes *s = c->sym;
    const cdy_value *val = &c->g->values[v];
    cdy_meta vm = val->meta;
    for (int d = 0; d < vm.ndim; d++)
        vm.strides[d] = val->view_strides[d];
    const cdy_meta *bm = sk_mem_meta(c, b);
    int nv = cdy_sym_const(&s->tab, 1), nb = nv;
    for (int d = 0; d < vm.ndim && nv >= 0; d++)
        nv = cdy_sym_mul(&s->tab, nv, s->dims[v][d]);
    for (int d = 0; d < bm->ndim && nb >= 0; d++)
        nb = cdy_sym_mul(&s->tab, nb, s->dims[b][d]);
    return !val->view_offset && cdy_meta_contiguous(&vm) && cdy_meta_contiguous(bm) && nv >= 0 &&
           nb >= 0 && sk_same(s, nv, nb);
}

/* The layout of alias view v, which torch realizes (an extern's argument, an
 * output), at every size: s->vlay[v] (sym.h) from sk_view_strides (which
 * takes reshapes of a contiguous base); 0, or -1 with the reason. */
static int sk_view_layout(cg_ctx *c, int v)
{
    cdy_sym_shapes *s = c->sym;
    const cdy_value *val = &c->g->values[v];
    int b = val->view_base, mst[CDY_MAX_NDIM], off = -1;
    if (b < 0 || b >= v)
        return cg_sym_unsupported(c, "a realized view has a symbolic size and no base");
    if (!s->vlay && !(s->vlay = calloc((size_t)c->g->nvalues, sizeof(*s->vlay))))
        return cg_sym_unsupported(c, "out of memory");
    if (sk_view_strides(c, v, mst, &off))
        return -1;
    s->vlay[v][0] = b + 1;
    s->vlay[v][1] = off;
    for (int d = 0; d < val->meta.ndim; d++)
        s->vlay[v][2 + d] = mst[d];
    return 0;
}

int cg_sym_dim_live(const cg_ctx *c, int v, int64_t d)
{
    return c->sym && sk_live(c->sym, c->sym->dims[v][d]) >= 0;
}

/* 1 if every dim of value v is a constant. */
static int sk_static_value(const cg_ctx *c, int v)
{
    for (int d = 0; d < c->g->values[v].meta.ndim; d++)
        if (sk_live(c->sym, c->sym->dims[v][d]) >= 0)
            return 0;
    return 1;
}

const char *cg_sym_scalar_text(cg_ctx *c, int v)
{
    int e = c->sym && c->sym->sval ? c->sym->sval[v] - 1 : -1;
    return e >= 0 && sk_live(c->sym, e) >= 0 ? cg_sym_expr_text(c, e) : NULL;
}

/* 1 if node v reads an int scalar whose value is a live expression. */
static int sk_reads_sym_scalar(const cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    for (int a = 0; c->sym->sval && a < val->nargs; a++) {
        int e = c->sym->sval[val->args[a]] - 1;
        if (e >= 0 && sk_live(c->sym, e) >= 0)
            return 1;
    }
    return 0;
}

int cg_sym_check_plan(cg_ctx *c, const cdy_plan *plan)
{
    c->plan = (cdy_plan *)plan;            /* the buffers' layouts (sk_mem_meta) */
    for (int v = 0; c->sym && v < c->g->nvalues; v++)
        if (c->g->values[v].kind == CDY_VAL_NODE && sk_reads_sym_scalar(c, v) &&
            (!cdy_op_pointwise(c->g->values[v].op) || cg_is_extern(c->g, v)))
            return cg_sym_unsupported(c, "a size added to a tensor reaches an op without "
                                         "runtime numbers");
    for (int v = 0; c->sym && v < c->g->nvalues; v++) {
        int b = c->val_buf[v];
        if (b < 0 || (sk_static_value(c, v) && (!cg_view_is_alias(c->g, v) || !sk_moves(c, v))))
            continue;
        if (cg_view_is_alias(c->g, v)) {   /* torch realizes it: as_strided of its base */
            if (sk_view_layout(c, v))
                return -1;
            continue;
        }
        int order[CDY_MAX_NDIM];
        if (c->g->values[v].kind == CDY_VAL_INPUT &&       /* guarded to its example's */
            cdy_meta_layout_order(&c->g->values[v].meta, order) >= 0)   /* layout */
            continue;
        if (cdy_meta_dense_order(&plan->buffers[b], order) < 0)
            return cg_sym_unsupported(c, cg_strf(c, "a buffer with a symbolic size is not "
                                                 "dense (%s's value %d)",
                                                 cdy_op_table[c->g->values[v].op].name, v));
    }
    return 0;
}
