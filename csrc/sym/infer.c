/* sym/infer.c - the symbolic shapes of a graph: sizes of every value as
 * expressions over the symbols of its inputs' dynamic dims (see sym.h).
 *
 * One pass over the values in order computes each value's sizes by its op's
 * rule; a size that has no rule, or that the trace read as a number (a pin),
 * specializes its symbols.  A pass that specializes a new symbol is run again
 * from the start with that symbol a constant, until a pass adds none: every
 * size of the result is then true for every value of the live symbols that
 * satisfies the relations (and size >= 2), and equals the value's meta at the
 * hints (checked per value: a rule that disagrees specializes its inputs). */
#include "sym/sym.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    cdy_sym_shapes *s;
    const cdy_graph *g;
    cdy_sym_mask pinned;      /* the symbols specialized so far */
    int changed;              /* this pass specialized a new one */
    const char *ext;          /* per value: an extern's matmul kind (sym.h), or NULL */
    const cdy_sym_hints *h;   /* or NULL */
    int oom;
} sy_pass;

/* Specialize the symbols of expression e (all of them when e < 0), saying
 * why (what, about value v's dim d). */
static void sy_pin(sy_pass *p, int e, int v, int d, const char *what)
{
    cdy_sym_mask m = e >= 0 ? cdy_sym_symbols(&p->s->tab, e) : (cdy_sym_mask){{0}};
    for (int k = 0; k < p->s->tab.nsyms; k++)
        if ((e < 0 || cdy_sym_mask_has(&m, k)) && !cdy_sym_mask_has(&p->pinned, k)) {
            cdy_sym_info *in = &p->s->info[k];
            in->pinned = 1;
            if (d >= 0)
                snprintf(in->why, sizeof(in->why), "%s (value %d, dim %d)", what, v, d);
            else
                snprintf(in->why, sizeof(in->why), "%s (value %d)", what, v);
            cdy_sym_mask_set(&p->pinned, k);
            p->changed = 1;
        }
}

/* Specialize every size of value v (its op has no symbolic rule: what). */
static void sy_pin_value(sy_pass *p, int v, const char *what)
{
    const cdy_value *val = &p->g->values[v];
    for (int d = 0; d < val->meta.ndim; d++)
        sy_pin(p, p->s->dims[v][d], v, d, what);
}

/* Constant sizes for value v: its meta's. */
static void sy_const_sizes(sy_pass *p, int v)
{
    const cdy_meta *m = &p->g->values[v].meta;
    for (int d = 0; d < m->ndim; d++) {
        p->s->dims[v][d] = cdy_sym_const(&p->s->tab, m->sizes[d]);
        p->oom |= p->s->dims[v][d] < 0;
    }
}

/* The malloc'd array arr of *cap items of size sz with room for item n
 * (grown by doubling, *cap updated); NULL out of memory (arr unchanged). */
static void *sy_grow(void *arr, int *cap, int n, size_t sz)
{
    if (arr && n < *cap)
        return arr;
    int c = *cap ? *cap : 16;
    while (c <= n)
        c *= 2;
    void *q = realloc(arr, (size_t)c * sz);
    if (q)
        *cap = c;
    return q;
}

/* Record that expressions a and b must be equal (a relation; a symbolic
 * one against a constant specializes it). */
static void sy_equal(sy_pass *p, int a, int b, int v, int d, const char *what)
{
    int64_t ca, cb;
    if (a == b)
        return;
    int ka = cdy_sym_is_const(&p->s->tab, a, &ca), kb = cdy_sym_is_const(&p->s->tab, b, &cb);
    if (ka || kb) {
        sy_pin(p, ka ? b : a, v, d, what);
        return;
    }
    for (int r = 0; r < p->s->nrel; r++)
        if ((p->s->rel[r][0] == a && p->s->rel[r][1] == b) ||
            (p->s->rel[r][0] == b && p->s->rel[r][1] == a))
            return;
    void *q = sy_grow(p->s->rel, &p->s->caprel, p->s->nrel, sizeof(*p->s->rel));
    if (!q) {
        sy_pin(p, a, v, d, "out of memory for a relation");
        sy_pin(p, b, v, d, "out of memory for a relation");
        return;
    }
    p->s->rel = q;
    p->s->rel[p->s->nrel][0] = a;
    p->s->rel[p->s->nrel++][1] = b;
}

/* Pointwise: the broadcast of the args' sizes (right-aligned; a size 1
 * broadcasts, other sizes must be equal). */
static int sy_pointwise(sy_pass *p, int v)
{
    const cdy_value *val = &p->g->values[v];
    int one = cdy_sym_const(&p->s->tab, 1);
    int nd = val->meta.ndim;
    if (one < 0)
        return -1;
    for (int d = 0; d < nd; d++) {
        int out = one;
        for (int a = 0; a < val->nargs; a++) {
            const cdy_value *x = &p->g->values[val->args[a]];
            int xd = d - (nd - x->meta.ndim);
            if (xd < 0)
                continue;
            int e = p->s->dims[val->args[a]][xd];
            if (e == one)
                continue;
            if (out == one)
                out = e;
            else
                sy_equal(p, out, e, v, d, "broadcast of a symbolic size against another size");
        }
        p->s->dims[v][d] = out;
    }
    return 0;
}

/* A reduction (input, dims mask, keepdim[, param]): the input's sizes with
 * the reduced dims dropped (or 1 with keepdim). */
static int sy_reduce(sy_pass *p, int v)
{
    const cdy_value *val = &p->g->values[v];
    const cdy_value *x = &p->g->values[val->args[0]];
    if (val->nargs < 3 || p->g->values[val->args[1]].kind != CDY_VAL_SCALAR ||
        p->g->values[val->args[2]].kind != CDY_VAL_SCALAR)
        return -1;
    int64_t mask = p->g->values[val->args[1]].i;
    int keep = p->g->values[val->args[2]].i != 0, n = 0;
    int one = cdy_sym_const(&p->s->tab, 1);
    for (int d = 0; d < x->meta.ndim && n < CDY_MAX_NDIM; d++) {
        if (!(mask >> d & 1))
            p->s->dims[v][n++] = p->s->dims[val->args[0]][d];
        else if (keep)
            p->s->dims[v][n++] = one;
    }
    return n == val->meta.ndim && one >= 0 ? 0 : -1;
}

/* A row op: the input's sizes; layer_norm's normalized dims specialize
 * (normalized_shape is a number the code gave). */
static int sy_rows(sy_pass *p, int v)
{
    const cdy_value *val = &p->g->values[v];
    const cdy_value *x = &p->g->values[val->args[0]];
    if (x->meta.ndim != val->meta.ndim)
        return -1;
    for (int d = 0; d < x->meta.ndim; d++)
        p->s->dims[v][d] = p->s->dims[val->args[0]][d];
    if (!cdy_op_has(val->op, CDY_OPF_SYM_ROWS))
        return -1;
    if (cdy_op_has(val->op, CDY_OPF_SYM_NORMED)) {
        const cdy_value *nn = &p->g->values[val->args[4]];
        if (nn->kind != CDY_VAL_SCALAR || nn->i < 0 || nn->i > x->meta.ndim)
            return -1;
        for (int d = x->meta.ndim - (int)nn->i; d < x->meta.ndim; d++)
            sy_pin(p, p->s->dims[v][d], v, d, "layer_norm's normalized_shape");
        int last = cdy_op_has(val->op, CDY_OPF_SYM_GRAD2) ? 1 : 2;   /* arg 2: a grad or the bias */
        for (int a = 1; a <= last; a++) {    /* weight and bias: normalized_shape's sizes */
            const cdy_value *wv = &p->g->values[val->args[a]];
            if (wv->kind == CDY_VAL_SCALAR)
                continue;
            if (wv->meta.ndim != nn->i)
                return -1;
            for (int d = 0; d < wv->meta.ndim; d++)
                sy_pin(p, p->s->dims[val->args[a]][d], v, d, "layer_norm's normalized_shape");
        }
    }
    return 0;
}

/* cat / stack (pieces.., dim): the pieces' sizes, the cat dim summed (stack:
 * a new dim of the number of pieces); the other dims must be equal. */
static int sy_cat(sy_pass *p, int v)
{
    const cdy_value *val = &p->g->values[v];
    int np = val->nargs - 1, nd = val->meta.ndim;
    const cdy_value *dv = &p->g->values[val->args[np]];
    if (np < 1 || dv->kind != CDY_VAL_SCALAR)
        return -1;
    int stack = cdy_op_has(val->op, CDY_OPF_NEW_DIM), dim = (int)dv->i;
    dim = dim < 0 ? dim + nd : dim;
    if (dim < 0 || dim >= nd)
        return -1;
    for (int d = 0, pd = 0; d < nd; d++, pd++) {
        if (stack && d == dim) {
            p->s->dims[v][d] = cdy_sym_const(&p->s->tab, np);
            pd--;
            continue;
        }
        int e = stack || d != dim ? -2 : cdy_sym_const(&p->s->tab, 0);
        for (int a = 0; a < np; a++) {
            const cdy_value *x = &p->g->values[val->args[a]];
            if (x->meta.ndim != nd - stack)
                return -1;   /* torch's legacy empty 1-d piece: no rule */
            int xe = p->s->dims[val->args[a]][pd];
            if (!stack && d == dim)
                e = cdy_sym_add(&p->s->tab, e, xe);
            else if (e == -2)
                e = xe;
            else
                sy_equal(p, e, xe, v, d, "cat's pieces' sizes");
        }
        p->s->dims[v][d] = e;
    }
    return 0;
}

/* The matmul of a[.., M, K] and b[.., K, N] (b 2-D: [K, N]; bt: b is
 * [N, K], linear's weight) into v's dims: batch dims broadcast, K equal. */
static int sy_matmul(sy_pass *p, int v, int a, int b, int bt)
{
    const cdy_meta *am = &p->g->values[a].meta, *bm = &p->g->values[b].meta;
    int nd = p->g->values[v].meta.ndim;
    if (am->ndim < 2 || bm->ndim < 2 || nd != (am->ndim > bm->ndim ? am->ndim : bm->ndim))
        return -1;
    int *o = p->s->dims[v], *x = p->s->dims[a], *y = p->s->dims[b];
    int one = cdy_sym_const(&p->s->tab, 1);
    if (one < 0)
        return -1;
    for (int d = 0; d < nd - 2; d++) {        /* batch dims: broadcast */
        int xd = d - (nd - am->ndim), yd = d - (nd - bm->ndim);
        int ex = xd >= 0 ? x[xd] : one, ey = yd >= 0 ? y[yd] : one;
        o[d] = ex == one ? ey : ex;
        if (ex != one && ey != one)
            sy_equal(p, ex, ey, v, d, "matmul's batch sizes");
    }
    int k_b = bt ? y[bm->ndim - 1] : y[bm->ndim - 2];
    sy_equal(p, x[am->ndim - 1], k_b, v, nd - 1, "matmul's inner sizes");
    o[nd - 2] = x[am->ndim - 2];
    o[nd - 1] = bt ? y[bm->ndim - 2] : y[bm->ndim - 1];
    return 0;
}

/* Attention (q [.., L, E], k [.., S, E], v [.., S, Ev][, mask broadcasting
 * to [.., L, S]]) into v's dims [.., L, Ev]: q's batch dims, the inner sizes
 * and the mask's sizes relations. */
static int sy_attention(sy_pass *p, int v)
{
    const cdy_value *val = &p->g->values[v];
    if (val->nargs != 3 && val->nargs != 4)
        return -1;
    int qv = val->args[0], kv = val->args[1], vv = val->args[2];
    const cdy_meta *qm = &p->g->values[qv].meta, *km = &p->g->values[kv].meta,
                   *vm = &p->g->values[vv].meta;
    int nd = qm->ndim;
    if (nd < 2 || km->ndim != nd || vm->ndim != nd || val->meta.ndim != nd)
        return -1;
    int *o = p->s->dims[v], *q = p->s->dims[qv], *k = p->s->dims[kv], *w = p->s->dims[vv];
    int one = cdy_sym_const(&p->s->tab, 1);
    for (int d = 0; d < nd - 2; d++) {
        o[d] = q[d];
        if (k[d] != one && q[d] != one)
            sy_equal(p, q[d], k[d], v, d, "attention's batch sizes");
        if (w[d] != one && q[d] != one)
            sy_equal(p, q[d], w[d], v, d, "attention's batch sizes");
    }
    sy_equal(p, q[nd - 1], k[nd - 1], v, nd - 1, "attention's inner sizes");
    sy_equal(p, k[nd - 2], w[nd - 2], v, nd - 2, "attention's key and value lengths");
    o[nd - 2] = q[nd - 2];
    o[nd - 1] = w[nd - 1];
    if (val->nargs == 4) {   /* the mask broadcasts against [.., L, S] */
        int mv = val->args[3], mnd = p->g->values[mv].meta.ndim;
        if (mnd > nd || p->g->values[mv].kind == CDY_VAL_SCALAR)
            return -1;
        for (int d = 0; d < mnd; d++) {
            int od = d + nd - mnd, e = p->s->dims[mv][d];
            int want = od == nd - 1 ? k[nd - 2] : od == nd - 2 ? q[nd - 2] : q[od];
            if (e != one)
                sy_equal(p, want, e, v, od, "attention's mask sizes");
        }
    }
    return 0;
}

/* An extern whose result has its first argument's sizes (torch's encoder
 * layer fast path over src); the other tensors' sizes specialize. */
static int sy_same_as_first(sy_pass *p, int v)
{
    const cdy_value *val = &p->g->values[v];
    if (val->nargs < 1 || p->g->values[val->args[0]].meta.ndim != val->meta.ndim)
        return -1;
    for (int d = 0; d < val->meta.ndim; d++)
        p->s->dims[v][d] = p->s->dims[val->args[0]][d];
    for (int a = 1; a < val->nargs; a++)
        sy_pin_value(p, val->args[a], "an argument of an extern following its first");
    return 0;
}

/* 1 if value a is a legacy empty piece of a cat (1-D of size 0: skipped). */
static int sy_cat_empty(const sy_pass *p, int a)
{
    const cdy_meta *m = &p->g->values[a].meta;
    return m->ndim == 1 && m->sizes[0] == 0;
}

/* torch.cat of v's args into v's dims (legacy empty 1-D pieces skipped, the
 * others of its rank): the dim whose size is not the first piece's is their
 * sum, the others the first's (equal in every piece: relations); one piece:
 * its sizes; -1 when no dim tells. */
static int sy_cat_extern(sy_pass *p, int v)
{
    const cdy_value *val = &p->g->values[v];
    const cdy_meta *m = &val->meta;
    int cd = -1, first = -1, *o = p->s->dims[v];
    for (int i = 0; i < val->nargs; i++) {
        if (sy_cat_empty(p, val->args[i]))
            continue;
        if (p->g->values[val->args[i]].meta.ndim != m->ndim)
            return -1;
        first = first < 0 ? val->args[i] : first;
    }
    for (int d = 0; first >= 0 && d < m->ndim; d++)
        if (m->sizes[d] != p->g->values[first].meta.sizes[d])
            cd = cd < 0 ? d : CDY_MAX_NDIM;
    if (first < 0 || cd >= m->ndim)
        return -1;
    for (int d = 0; d < m->ndim; d++) {
        o[d] = d == cd ? cdy_sym_const(&p->s->tab, 0) : p->s->dims[first][d];
        for (int i = 0; i < val->nargs; i++) {
            int a = val->args[i];
            if (sy_cat_empty(p, a))
                continue;
            if (d == cd)
                o[d] = cdy_sym_add(&p->s->tab, o[d], p->s->dims[a][d]);
            else if (a != first)
                sy_equal(p, o[d], p->s->dims[a][d], v, d, "cat's other sizes");
        }
        if (o[d] < 0)
            return -1;
    }
    return 0;
}

/* torch.diff along dim dim of v's args (input, then prepend / append, one
 * rank): the other dims are the input's (the others' equal), dim's size their
 * sum less n (the hints' difference); 0 or -1. */
static int sy_diff(sy_pass *p, int v, int dim)
{
    const cdy_value *val = &p->g->values[v];
    int nd = val->meta.ndim, e = cdy_sym_const(&p->s->tab, 0);
    int64_t hint = 0;
    for (int a = 0; a < val->nargs; a++)
        if (p->g->values[val->args[a]].meta.ndim != nd)
            return -1;
    if (dim >= nd)
        return -1;
    for (int d = 0; d < nd; d++) {
        p->s->dims[v][d] = p->s->dims[val->args[0]][d];
        for (int a = 1; a < val->nargs && d != dim; a++)
            sy_equal(p, p->s->dims[v][d], p->s->dims[val->args[a]][d], v, d,
                     "diff's prepend / append");
    }
    for (int a = 0; a < val->nargs && e >= 0; a++) {
        e = cdy_sym_add(&p->s->tab, e, p->s->dims[val->args[a]][dim]);
        hint += p->g->values[val->args[a]].meta.sizes[dim];
    }
    int n = e >= 0 ? cdy_sym_const(&p->s->tab, val->meta.sizes[dim] - hint) : -1;
    p->s->dims[v][dim] = n >= 0 ? cdy_sym_add(&p->s->tab, e, n) : -1;
    return p->s->dims[v][dim] >= 0 ? 0 : -1;
}

/* An extern of a known matmul kind (sym.h): mm / bmm / matmul, linear, addmm,
 * torch.cat. */
/* baddbmm(bias, b1, b2) into v's dims: bmm's sizes; the bias broadcasts against
 * them (right-aligned: its size-1 dims stay 1, the others equal v's). */
static int sy_baddbmm(sy_pass *p, int v)
{
    const cdy_value *val = &p->g->values[v];
    int bias = val->args[0];
    const cdy_meta *bm = &p->g->values[bias].meta;
    if (val->meta.ndim != 3 || p->g->values[val->args[1]].meta.ndim != 3 ||
        p->g->values[val->args[2]].meta.ndim != 3 || bm->ndim > 3 ||
        sy_matmul(p, v, val->args[1], val->args[2], 0))
        return -1;
    for (int bd = 0; bd < bm->ndim; bd++) {
        int d = bd + 3 - bm->ndim, e = p->s->dims[bias][bd];
        if (bm->sizes[bd] == 1)
            sy_pin(p, e, v, d, "baddbmm's bias broadcast dim");
        else
            sy_equal(p, e, p->s->dims[v][d], v, d, "baddbmm's bias sizes");
    }
    return 0;
}

/* A torch.library op's result (extern kind 'L') into v's dims: each dim the
 * argument dim its fake's probe found it follows, or its constant size
 * (sym.h's lmap); the runtime checks the real result's sizes. */
static int sy_libop(sy_pass *p, int v)
{
    const cdy_value *val = &p->g->values[v];
    if (!p->h || !p->h->lmap)
        return -1;
    for (int d = 0; d < val->meta.ndim; d++) {
        int code = p->h->lmap[v][d] - 1, u = code / CDY_MAX_NDIM, e = code % CDY_MAX_NDIM;
        if (code < 0) {   /* a constant: the hint's size */
            p->s->dims[v][d] = cdy_sym_const(&p->s->tab, val->meta.sizes[d]);
            continue;
        }
        if (u >= v || e >= p->g->values[u].meta.ndim)
            return -1;
        p->s->dims[v][d] = p->s->dims[u][e];
    }
    return 0;
}

static int sy_extern(sy_pass *p, int v)
{
    const cdy_value *val = &p->g->values[v];
    char k = p->ext ? p->ext[v] : 0;
    if (k == 'a')
        return sy_attention(p, v);
    if (k == 's')
        return sy_same_as_first(p, v);
    if (k == 'm' && val->nargs == 2)
        return sy_matmul(p, v, val->args[0], val->args[1], 0);
    if (k == 'k')
        return sy_cat_extern(p, v);
    if (k >= '0' && k <= '7')
        return sy_diff(p, v, k - '0');
    if (k == 'b' && val->nargs == 3) {       /* addmm(bias, x, w): x @ w + bias */
        const cdy_meta *bm = &p->g->values[val->args[0]].meta;
        if (p->g->values[val->args[1]].meta.ndim != 2 || p->g->values[val->args[2]].meta.ndim != 2)
            return -1;
        for (int d = 0; d < bm->ndim; d++)
            sy_pin(p, p->s->dims[val->args[0]][d], v, d, "addmm's bias");
        return sy_matmul(p, v, val->args[1], val->args[2], 0);
    }
    if (k == 'L')
        return sy_libop(p, v);
    if (k == 'B' && val->nargs == 3)         /* baddbmm(bias, b1, b2): b1 @ b2 + bias */
        return sy_baddbmm(p, v);
    if (k == 'l' && (val->nargs == 2 || val->nargs == 3)) {
        const cdy_meta *xm = &p->g->values[val->args[0]].meta;
        if (xm->ndim < 1 || p->g->values[val->args[1]].meta.ndim != 2)
            return -1;
        if (xm->ndim == 1)                   /* a vector: [N] */
            return -1;
        if (val->nargs == 3) {               /* the bias broadcasts against [.., N] */
            const cdy_meta *bm = &p->g->values[val->args[2]].meta;
            if (bm->ndim != 1 && bm->ndim != 0)
                return -1;
            for (int d = 0; d < bm->ndim; d++)
                sy_pin(p, p->s->dims[val->args[2]][d], v, d, "linear's bias");
        }
        return sy_matmul(p, v, val->args[0], val->args[1], 1);
    }
    return -1;
}

/* The product of src's dims [a, b] (its element count: 0, ndim - 1). */
static int sy_product(sy_pass *p, int src, int a, int b)
{
    int e = cdy_sym_const(&p->s->tab, 1);
    for (int d = a; d <= b; d++)
        e = cdy_sym_mul(&p->s->tab, e, p->s->dims[src][d]);
    return e;
}

/* The symbol of the trace's Python int i (input -1, sym.h), or -1. */
static int sy_int_symbol(const cdy_sym_shapes *s, int i)
{
    for (int k = 0; k < s->tab.nsyms; k++)
        if (s->info[k].input == -1 && s->info[k].dim == i)
            return k;
    return -1;
}

/* The expression of sx node x (op 'i', a Python int): its symbol, or its
 * value when it has none or that specialized. */
static int sy_int_expr(sy_pass *p, const cdy_sym_sx *x)
{
    int k = sy_int_symbol(p->s, x->dim);
    if (k < 0 || cdy_sym_mask_has(&p->pinned, k))
        return cdy_sym_const(&p->s->tab, x->c);
    return cdy_sym_var(&p->s->tab, k);
}

/* The expression of the trace's symbolic int n (1 + index into p->h->sx),
 * over the sizes of the values it read; -1 when it has none. */
static int sy_sx_expr(sy_pass *p, int n, int depth)
{
    if (!p->h || n <= 0 || n > p->h->nsx || depth > 64)
        return -1;
    const cdy_sym_sx *x = &p->h->sx[n - 1];
    cdy_symtab *tab = &p->s->tab;
    switch (x->op) {
    case 'd':
        if (x->value < 0 || x->value >= p->g->nvalues || x->dim < 0 ||
            x->dim >= p->g->values[x->value].meta.ndim)
            return -1;
        return p->s->dims[x->value][x->dim];
    case 'k':
        return cdy_sym_const(tab, x->c);
    case 'i':
        return sy_int_expr(p, x);
    case '+':
        return cdy_sym_add(tab, sy_sx_expr(p, x->a, depth + 1), sy_sx_expr(p, x->b, depth + 1));
    case '*':
        return cdy_sym_mul(tab, sy_sx_expr(p, x->a, depth + 1), sy_sx_expr(p, x->b, depth + 1));
    case '/':
        return cdy_sym_floordiv(tab, sy_sx_expr(p, x->a, depth + 1), x->c);
    case 'q':   /* a // b where b divides a at every size, else no rule */
        return cdy_sym_div_exact(tab, sy_sx_expr(p, x->a, depth + 1),
                                 sy_sx_expr(p, x->b, depth + 1));
    default:
        return -1;
    }
}

/* Specialize every size symbolic int n reads (its rule failed: the sizes it
 * gave became constants). */
static void sy_sx_pin(sy_pass *p, int n, int v, const char *what, int depth)
{
    if (!p->h || n <= 0 || n > p->h->nsx || depth > 64)
        return;
    const cdy_sym_sx *x = &p->h->sx[n - 1];
    if (x->op == 'd' && x->value >= 0 && x->value < p->g->nvalues &&
        x->dim < p->g->values[x->value].meta.ndim)
        sy_pin(p, p->s->dims[x->value][x->dim], v < 0 ? x->value : v, x->dim, what);
    else if (x->op == 'd')
        sy_pin(p, -1, v, -1, what);
    if (x->op == 'i' && sy_int_symbol(p->s, x->dim) >= 0)
        sy_pin(p, cdy_sym_var(&p->s->tab, sy_int_symbol(p->s, x->dim)), v, -1, what);
    if (x->op == '+' || x->op == '*' || x->op == '/' || x->op == 'q' || x->op == 'S')
        sy_sx_pin(p, x->a, v, what, depth + 1);
    if (x->op == '+' || x->op == '*' || x->op == 'q' || x->op == 'S')
        sy_sx_pin(p, x->b, v, what, depth + 1);
}

/* 1 if view map w names a symbolic int. */
static int sy_view_has_sx(const cdy_sym_view *w)
{
    for (int d = 0; d < CDY_MAX_NDIM; d++)
        if (w->sx[d])
            return 1;
    return 0;
}

/* Specialize the symbolic ints view v's map names (v has no symbolic sizes). */
static void sy_view_pin_sx(sy_pass *p, int v)
{
    for (int i = 0; p->h && i < p->h->nviews; i++)
        for (int d = 0; p->h->views[i].value == v && d < CDY_MAX_NDIM; d++) {
            sy_sx_pin(p, p->h->views[i].sx[d], v, "a view's size without a symbolic rule", 0);
            sy_sx_pin(p, p->h->views[i].st[d], v, "a view's start without a symbolic rule", 0);
        }
}

/* view / reshape whose sizes name symbolic ints (w->sx): those sizes are
 * their expressions, a -1 the source's element count over the product of the
 * others (an exact division), else the element counts equal (a relation). */
static int sy_view_sizes(sy_pass *p, int v, const cdy_sym_view *w)
{
    const cdy_meta *m = &p->g->values[v].meta, *sm = &p->g->values[w->src].meta;
    cdy_symtab *tab = &p->s->tab;
    int *o = p->s->dims[v];
    int known = cdy_sym_const(tab, 1);
    for (int d = 0; d < m->ndim; d++) {
        if (d == w->a)
            continue;
        o[d] = w->sx[d] ? sy_sx_expr(p, w->sx[d], 0) : cdy_sym_const(tab, m->sizes[d]);
        if (o[d] < 0)
            return -1;
        known = cdy_sym_mul(tab, known, o[d]);
    }
    int n = sy_product(p, w->src, 0, sm->ndim - 1);
    if (known < 0 || n < 0)
        return -1;
    if (w->a < 0) {
        sy_equal(p, n, known, v, 0, "a view's element count");
        return 0;
    }
    int64_t kh = cdy_sym_eval(tab, known, NULL), nh = cdy_sym_eval(tab, n, NULL);
    if (kh <= 0 || nh % kh)
        return -1;
    int q = cdy_sym_const(tab, nh / kh);    /* the -1 a constant */
    if (q >= 0 && cdy_sym_mul(tab, q, known) == n) {
        o[w->a] = q;
        return 0;
    }
    q = cdy_sym_div_exact(tab, n, known);
    if (q >= 0) {
        o[w->a] = q;
        return 0;
    }
    /* known = c * m for a monomial m dividing n: the -1 is floor(n / m / c), and
     * n == its product with the others a relation (eager's divisibility check) */
    const cdy_sym_poly *kp = &tab->exprs[known];
    if (kp->nt != 1 || kp->t[0].coef <= 0)
        return -1;
    int64_t c = kp->t[0].coef;
    int r = cdy_sym_div_exact(tab, n, cdy_sym_div_exact(tab, known, cdy_sym_const(tab, c)));
    q = cdy_sym_floordiv(tab, r, c);
    if (q < 0)
        return -1;
    sy_equal(p, cdy_sym_mul(tab, q, known), n, v, w->a, "a view's -1 divides");
    o[w->a] = q;
    return 0;
}

/* An expand (kind 'x', sym.h) into v's dims: a source dim keeps its size
 * (a symbolic int or a constant given for it must equal it: a relation or
 * a pin; bit d of w->a: a constant), another dim is
 * its symbolic int's size or the node's constant one; 0 or -1. */
static int sy_expand_map(sy_pass *p, int v, const cdy_sym_view *w)
{
    const cdy_meta *m = &p->g->values[v].meta, *sm = &p->g->values[w->src].meta;
    int *o = p->s->dims[v];
    for (int d = 0; d < m->ndim; d++) {
        int x = w->sx[d] ? sy_sx_expr(p, w->sx[d], 0) : -1;
        if (w->map[d] >= sm->ndim || (w->sx[d] && x < 0))
            return -1;
        o[d] = w->map[d] >= 0 ? p->s->dims[w->src][w->map[d]]
                              : x >= 0 ? x : cdy_sym_const(&p->s->tab, m->sizes[d]);
        if (w->map[d] >= 0 && (x >= 0 || (w->a >> d & 1)))
            sy_equal(p, o[d], x >= 0 ? x : cdy_sym_const(&p->s->tab, m->sizes[d]), v, d,
                     "expand's size of a kept dim");
        if (o[d] < 0)
            return -1;
    }
    return 0;
}

/* a == b for gather node v's dim d: a relation when equal at the hints,
 * else both specialize (torch.gather's index smaller than its input). */
static void sy_gather_equal(sy_pass *p, int a, int b, int v, int d)
{
    if (cdy_sym_eval(&p->s->tab, a, NULL) == cdy_sym_eval(&p->s->tab, b, NULL)) {
        sy_equal(p, a, b, v, d, "an index's size and its gather's");
        return;
    }
    sy_pin(p, a, v, d, "an index smaller than its gather's source");
    sy_pin(p, b, v, d, "an index smaller than its gather's source");
}

/* A gather node's (kind 'g', sym.h) into v's dims: kept source dims, the
 * index args' broadcast (sizes 1 broadcast, others equal), or constants;
 * an index's size in a kept dim (torch.gather's) is 1 or equals it; each
 * index's range (s->grange) the size of the source dim it walks; 0 or -1. */
static int sy_gather_map(sy_pass *p, int v, const cdy_sym_view *w)
{
    const cdy_value *val = &p->g->values[v];
    const cdy_meta *sm = &p->g->values[w->src].meta;
    int one = cdy_sym_const(&p->s->tab, 1), k = val->nargs / 4, nd = val->meta.ndim;
    if (one < 0 || cdy_op_table[val->op].kind != 'G' || w->src < 0)
        return -1;
    for (int d = 0; d < nd; d++) {
        int *o = &p->s->dims[v][d], kept = w->map[d] != -2;
        if (w->map[d] >= sm->ndim)
            return -1;
        *o = w->map[d] >= 0 ? p->s->dims[w->src][w->map[d]]
             : kept         ? cdy_sym_const(&p->s->tab, val->meta.sizes[d]) : one;
        for (int a = 0; a < k; a++) {
            int xd = d - (nd - p->g->values[val->args[a]].meta.ndim);
            int e = xd >= 0 ? p->s->dims[val->args[a]][xd] : one;
            if (e == one)
                continue;
            if (kept)
                sy_gather_equal(p, *o, e, v, d);
            else if (*o == one)
                *o = e;
            else
                sy_equal(p, *o, e, v, d, "broadcast of advanced indices");
        }
    }
    for (int i = 0; p->s->grange && i < k && i < CDY_SYM_MAX_GIDX; i++)
        p->s->grange[v][i] = w->idim[i] > 0 && w->idim[i] <= sm->ndim
                                 ? p->s->dims[w->src][w->idim[i] - 1] + 1 : 0;
    return 0;
}

/* Record view v's source, map (w's) and source dims' start expressions in
 * s->vsrc (allocated on first use); 0, or -1 (memory). */
static int sy_vsrc(sy_pass *p, int v, const cdy_sym_view *w, const int *start)
{
    cdy_sym_shapes *s = p->s;
    if (!s->vsrc && (s->vsrc = calloc((size_t)s->nvalues, sizeof(*s->vsrc))))
        for (int i = 0; i < s->nvalues; i++)
            s->vsrc[i].src = -1;
    if (!s->vsrc)
        return -1;
    s->vsrc[v].src = w->src;
    memcpy(s->vsrc[v].map, w->map, sizeof(w->map));
    memcpy(s->vsrc[v].start, start, sizeof(s->vsrc[v].start));
    return 0;
}

/* A view with a map (sym.h's cdy_sym_view) into v's dims. */
static int sy_view_map(sy_pass *p, int v, const cdy_sym_view *w)
{
    const cdy_meta *m = &p->g->values[v].meta;
    const cdy_meta *sm = w->src >= 0 ? &p->g->values[w->src].meta : m;
    int *o = p->s->dims[v];
    if (w->kind == 'p') {
        int start[CDY_MAX_NDIM];
        for (int d = 0; d < m->ndim; d++)
            o[d] = w->map[d] < 0 ? cdy_sym_const(&p->s->tab, 1) : p->s->dims[w->src][w->map[d]];
        for (int j = 0; j < CDY_MAX_NDIM; j++)
            start[j] = -1;
        return sy_vsrc(p, v, w, start);
    }
    if (w->kind == 'z') {   /* sizes given by symbolic ints (a factory's) */
        for (int d = 0; d < m->ndim; d++)
            if ((o[d] = w->sx[d] ? sy_sx_expr(p, w->sx[d], 0)
                                 : cdy_sym_const(&p->s->tab, m->sizes[d])) < 0)
                return -1;
        return 0;
    }
    if (w->kind == 'e') {   /* dims of the source (map), or constants (-1) */
        for (int d = 0; d < m->ndim; d++) {
            if (w->map[d] >= sm->ndim)
                return -1;
            o[d] = w->map[d] < 0 ? cdy_sym_const(&p->s->tab, m->sizes[d])
                                 : p->s->dims[w->src][w->map[d]];
        }
        return 0;
    }
    if (w->kind == 's') {   /* a piece of a split: the cut dim a constant (pinned) */
        if (w->a < 0 || w->a >= sm->ndim || m->ndim != sm->ndim)
            return -1;
        sy_pin(p, p->s->dims[w->src][w->a], v, w->a, "the dim a split cuts");
        for (int d = 0; d < m->ndim; d++)
            o[d] = d == w->a ? cdy_sym_const(&p->s->tab, m->sizes[d]) : p->s->dims[w->src][d];
        return 0;
    }
    if (w->kind == 'f') {
        if (w->a < 0 || w->b < w->a || w->b >= sm->ndim || m->ndim != sm->ndim - (w->b - w->a))
            return -1;
        for (int d = 0; d < m->ndim; d++)
            o[d] = d < w->a ? p->s->dims[w->src][d] :
                   d == w->a ? sy_product(p, w->src, w->a, w->b) :
                   p->s->dims[w->src][d + w->b - w->a];
        return 0;
    }
    if (w->kind == 'c') {   /* a getitem's: dims of the source, cut or whole, or new 1s */
        int start[CDY_MAX_NDIM];
        for (int d = 0; d < m->ndim; d++) {
            if (w->map[d] >= sm->ndim)
                return -1;
            o[d] = w->map[d] < 0 ? cdy_sym_const(&p->s->tab, 1)
                   : w->sx[d] ? sy_sx_expr(p, w->sx[d], 0)
                   : (w->a >> d & 1) ? cdy_sym_const(&p->s->tab, m->sizes[d])
                   : p->s->dims[w->src][w->map[d]];
            if (o[d] < 0)
                return -1;
        }
        for (int j = 0; j < CDY_MAX_NDIM; j++)
            if ((start[j] = w->st[j] ? sy_sx_expr(p, w->st[j], 0) : -1) < 0 && w->st[j])
                return -1;
        return sy_vsrc(p, v, w, start);
    }
    if (w->kind == 'x')
        return sy_expand_map(p, v, w);
    if (w->kind == 'g')
        return sy_gather_map(p, v, w);
    if (w->kind != 'r')
        return -1;
    if (sy_view_has_sx(w))
        return sy_view_sizes(p, v, w);
    int64_t known = 1;
    for (int d = 0; d < m->ndim; d++)
        if (d != w->a) {
            o[d] = cdy_sym_const(&p->s->tab, m->sizes[d]);
            known *= m->sizes[d];
        }
    int n = sy_product(p, w->src, 0, sm->ndim - 1);
    if (w->a < 0) {
        sy_equal(p, n, cdy_sym_const(&p->s->tab, known), v, 0, "a view to constant sizes");
        return 0;
    }
    if (known <= 0)
        return -1;
    /* only an exact division (else eager's check of divisibility would be a
     * guard): the source's last k dims specialize until it is one */
    for (int k = 0; k <= sm->ndim; k++) {
        cdy_sym_mask mask = p->pinned;   /* specialized earlier in this pass */
        for (int d = sm->ndim - k; d < sm->ndim; d++) {
            cdy_sym_mask r = cdy_sym_symbols(&p->s->tab, p->s->dims[w->src][d]);
            cdy_sym_mask_or(&mask, &r);
        }
        int nk = cdy_sym_subst_hints(&p->s->tab, n, &mask);
        int q = cdy_sym_floordiv(&p->s->tab, nk, known);
        if (q < 0 || cdy_sym_mul(&p->s->tab, q, cdy_sym_const(&p->s->tab, known)) != nk)
            continue;
        for (int d = sm->ndim - k; d < sm->ndim; d++)
            sy_pin(p, p->s->dims[w->src][d], v, d, "a view's -1 would not divide");
        o[w->a] = q;
        return 0;
    }
    return -1;
}

/* A view node: by its map when the trace recorded one. */
static int sy_view(sy_pass *p, int v)
{
    if (p->s->vsrc)
        p->s->vsrc[v].src = -1;   /* an earlier pass's */
    for (int i = 0; p->h && i < p->h->nviews; i++)
        if (p->h->views[i].value == v)
            return sy_view_map(p, v, &p->h->views[i]);
    return -1;
}

/* 1 if v's expressions are its meta's sizes at the hints. */
static int sy_agrees(sy_pass *p, int v)
{
    const cdy_meta *m = &p->g->values[v].meta;
    for (int d = 0; d < m->ndim; d++)
        if (p->s->dims[v][d] < 0 || cdy_sym_eval(&p->s->tab, p->s->dims[v][d], NULL) != m->sizes[d])
            return 0;
    return 1;
}

/* Gather node v without a rule: its map's source specializes (its index
 * ranges, s->grange, may read that source's expanded dims) and its ranges
 * are unknown (the literals). */
static void sy_gather_failed(sy_pass *p, int v, const char *what)
{
    for (int i = 0; p->h && i < p->h->nviews; i++)
        if (p->h->views[i].value == v && p->h->views[i].kind == 'g' && p->h->views[i].src >= 0)
            sy_pin_value(p, p->h->views[i].src, what);
    if (p->s->grange)
        memset(p->s->grange[v], 0, sizeof(p->s->grange[v]));
}

/* The sizes of node v by its op's rule, or specialized (its inputs' and its
 * own sizes) when it has none or the rule disagrees with the meta. */
static void sy_node(sy_pass *p, int v)
{
    const cdy_value *val = &p->g->values[v];
    const char kind = cdy_op_table[val->op].kind;
    int r = -1;
    const char *why = "no symbolic rule for the op";
    if (cdy_op_pointwise(val->op))
        r = sy_pointwise(p, v);
    else if (kind == 'R')
        r = sy_reduce(p, v);
    else if (kind == 'N')
        r = sy_rows(p, v);
    else if (cdy_op_has(val->op, CDY_OPF_PIECES))
        r = sy_cat(p, v);
    else if (cdy_value_is_extern(val))
        r = sy_extern(p, v);
    else if (kind == 'V' || kind == 'G' || kind == 'I')
        r = sy_view(p, v);
    if (cdy_value_is_extern(val) && p->ext && p->ext[v] == 'U')   /* a torch.library op */
        why = "its fake's sizes followed no rule (probe):";
    if (r == 0 && !sy_agrees(p, v)) {
        r = -1;
        why = "the symbolic rule disagrees with the meta";
    }
    if (r == 0)
        return;
    char what[96];
    const char *ename = p->h && p->h->ext_names && cdy_value_is_extern(val)
                            ? p->h->ext_names + (size_t)v * CDY_SYM_EXT_NAME : "";
    snprintf(what, sizeof(what), "%s %s%s%s", why, cdy_op_table[val->op].name,
             *ename ? " " : "", ename);
    if (kind == 'V' || kind == 'I')
        sy_view_pin_sx(p, v);
    for (int a = 0; a < val->nargs; a++)
        sy_pin_value(p, val->args[a], what);
    if (kind == 'V' || kind == 'G')
        sy_pin_value(p, val->view_base, what);
    if (kind == 'G')
        sy_gather_failed(p, v, what);
    sy_const_sizes(p, v);
}

/* Comparison c of the trace, once every value's sizes are known: decided by
 * the symbols' range (counted), else a guard of the entry; without a rule
 * for a side (or out of memory) the sizes it reads specialize. */
static void sy_cmp(sy_pass *p, const cdy_sym_cmp *c)
{
    cdy_sym_shapes *s = p->s;
    const char *what = c->where ? c->where : "a comparison of sizes";
    int a = sy_sx_expr(p, c->a, 0), b = sy_sx_expr(p, c->b, 0);
    int mb = b >= 0 ? cdy_sym_mul(&s->tab, b, cdy_sym_const(&s->tab, -1)) : -1;
    int e = a >= 0 && mb >= 0 ? cdy_sym_add(&s->tab, a, mb) : -1;
    int dec = e >= 0 ? cdy_sym_cmp_decided(&s->tab, e, c->op) : -1;
    if (e >= 0 && dec == c->truth) {
        s->ncmp_range += !cdy_sym_is_const(&s->tab, e, &(int64_t){0});
        return;
    }
    for (int r = 0; e >= 0 && dec < 0 && r < s->ncmp; r++)
        if (s->cmp[r].expr == e && s->cmp[r].op == c->op)
            return;
    if (e >= 0 && dec < 0) {
        void *q = sy_grow(s->cmp, &s->capcmp, s->ncmp, sizeof(*s->cmp));
        if (q) {
            s->cmp = q;
            s->cmp[s->ncmp++] = (cdy_sym_cmp_rel){e, a, b, c->op, c->truth};
            return;
        }
        what = "out of memory for a comparison guard";
    }
    sy_sx_pin(p, c->a, -1, what, 0);
    sy_sx_pin(p, c->b, -1, what, 0);
}

/* Int scalar v's expression into s->sval when the trace made it from sizes
 * (kind 'k'); without a rule the sizes it reads specialize. */
static void sy_scalar(sy_pass *p, int v)
{
    p->s->sval[v] = 0;
    for (int i = 0; p->h && i < p->h->nviews; i++) {
        const cdy_sym_view *w = &p->h->views[i];
        if (w->value != v || w->kind != 'k')
            continue;
        int e = sy_sx_expr(p, w->sx[0], 0);
        if (e >= 0 && cdy_sym_eval(&p->s->tab, e, NULL) == p->g->values[v].i)
            p->s->sval[v] = e + 1;
        else
            sy_sx_pin(p, w->sx[0], -1, "a number added to a tensor without a rule", 0);
        return;
    }
}

/* One pass over g with p->pinned specialized: every value's sizes. */
static void sy_run(sy_pass *p)
{
    const cdy_sym_pin *pins = p->h ? p->h->pins : NULL;
    int npins = p->h ? p->h->npins : 0;
    cdy_sym_shapes *s = p->s;
    s->nrel = 0;
    s->ncmp = s->ncmp_range = 0;
    p->changed = 0;
    for (int v = 0; v < p->g->nvalues && !p->oom; v++) {
        const cdy_value *val = &p->g->values[v];
        if (val->kind == CDY_VAL_NODE)
            sy_node(p, v);
        else
            sy_const_sizes(p, v);
        if (val->kind == CDY_VAL_SCALAR && s->sval)
            sy_scalar(p, v);
        if (val->kind == CDY_VAL_INPUT)
            for (int k = 0; k < s->tab.nsyms; k++)
                if (s->info[k].input == val->input_index && !cdy_sym_mask_has(&p->pinned, k))
                    s->dims[v][s->info[k].dim] = cdy_sym_var(&s->tab, k);
        for (int i = 0; i < npins; i++)    /* v's pins, before the values that read it */
            for (int d = 0; pins[i].value == v && d < val->meta.ndim; d++)
                if (pins[i].dims >> d & 1)
                    sy_pin(p, s->dims[v][d], v, d, pins[i].why);
    }
    for (int i = 0; p->h && i < p->h->ncmps && !p->oom; i++)
        sy_cmp(p, &p->h->cmps[i]);
}

/* The symbols: per input with dyn bits, a symbol per marked dim of size >= 2;
 * then one per Python int of h the trace did not pin. */
static int sy_symbols(cdy_sym_shapes *s, const cdy_graph *g, const unsigned *dyn,
                      const cdy_sym_hints *h)
{
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *val = &g->values[v];
        if (val->kind != CDY_VAL_INPUT || !dyn)
            continue;
        for (int d = 0; d < val->meta.ndim; d++) {
            if (!(dyn[val->input_index] >> d & 1) || val->meta.sizes[d] < 2)
                continue;
            int k = s->tab.nsyms;
            if (cdy_sym_new(&s->tab, val->meta.sizes[d]) < 0)
                return -1;
            s->info[k].input = val->input_index;
            s->info[k].dim = d;
        }
    }
    for (int i = 0; h && i < h->nints; i++) {   /* the Python ints no use pinned */
        int k = s->tab.nsyms;
        if (h->ints[i].pinned || h->ints[i].value < 2)
            continue;
        if (cdy_sym_new(&s->tab, h->ints[i].value) < 0)
            return -1;
        s->info[k].input = -1;
        s->info[k].dim = i;
    }
    return 0;
}

static void sy_const_offsets(const cdy_graph *g, const cdy_sym_hints *h, cdy_sym_shapes *s);

int cdy_sym_infer(const cdy_graph *g, const unsigned *dyn, const cdy_sym_hints *h,
                  cdy_sym_shapes *out)
{
    memset(out, 0, sizeof(*out));
    cdy_symtab_init(&out->tab);
    out->nvalues = g->nvalues;
    out->dims = calloc(g->nvalues ? (size_t)g->nvalues : 1, sizeof(*out->dims));
    sy_pass p = {out, g, {{0}}, 1, h ? h->ext : NULL, h, 0};
    out->sval = calloc(g->nvalues ? (size_t)g->nvalues : 1, sizeof(*out->sval));
    out->grange = calloc(g->nvalues ? (size_t)g->nvalues : 1, sizeof(*out->grange));
    if (!out->dims || !out->sval || !out->grange || sy_symbols(out, g, dyn, h)) {
        p.oom = 1;
    }
    while (p.changed && !p.oom && out->runs <= CDY_SYM_MAX_SYMS + 1) {
        out->runs++;
        sy_run(&p);
    }
    if (!p.oom)
        sy_const_offsets(g, h, out);
    if (!p.oom)
        return 0;
    for (int k = 0; k < out->tab.nsyms; k++) {
        out->info[k].pinned = 1;
        snprintf(out->info[k].why, sizeof(out->info[k].why), "out of memory or a size limit");
    }
    return -1;
}

void cdy_sym_shapes_free(cdy_sym_shapes *s)
{
    cdy_symtab_free(&s->tab);
    free(s->dims);
    s->dims = NULL;
    free(s->sval);
    s->sval = NULL;
    free(s->const_off);
    s->const_off = NULL;
    free(s->cut);
    s->cut = NULL;
    free(s->vsrc);
    s->vsrc = NULL;
    free(s->moves);
    s->moves = NULL;
    free(s->grange);
    s->grange = NULL;
    free(s->vlay);
    s->vlay = NULL;
    free(s->rel);
    s->rel = NULL;
    free(s->cmp);
    s->cmp = NULL;
    s->nrel = s->caprel = s->ncmp = s->capcmp = 0;
}

/* cut's bits (sym.h) of view w's value: its 'c' map's cuts, and the cuts of
 * the source dims its 'p' or 'c' map keeps whole. */
static void sy_cut_dims(const cdy_graph *g, const cdy_sym_view *w, unsigned char *cut)
{
    if (w->value < 0 || w->value >= g->nvalues || w->src < 0 || w->src >= w->value ||
        (w->kind != 'c' && w->kind != 'p'))
        return;
    for (int d = 0; d < g->values[w->value].meta.ndim; d++) {
        int j = w->map[d];
        int bit = j >= 0 && (w->kind == 'c' && (w->sx[d] || (w->a >> d & 1)) ? 1
                             : j < CDY_MAX_NDIM && (cut[w->src] >> j & 1));
        cut[w->value] |= (unsigned char)(bit << d);
    }
}

/* 1 unless view v (s->vsrc) starts a source dim at a position that moves
 * with the symbols, or inside a dim of symbolic size. */
static int sy_const_starts(cdy_sym_shapes *s, int v)
{
    const cdy_sym_vsrc *r = s->vsrc && s->vsrc[v].src >= 0 ? &s->vsrc[v] : NULL;
    int64_t k;
    for (int j = 0; r && j < CDY_MAX_NDIM; j++)
        if (r->start[j] >= 0 && (!cdy_sym_is_const(&s->tab, r->start[j], &k) ||
                                 (k && !cdy_sym_is_const(&s->tab, s->dims[r->src][j], &k))))
            return 0;
    return 1;
}

/* s->moves (sym.h) of value v, those of earlier values known: a view or
 * gather starting a dim at a non-constant position, or over a source (its
 * maps') that moves; one without a map moves when any earlier view of its
 * base does (it may be made from it). */
static int sy_moves(const cdy_graph *g, const cdy_sym_hints *h, const cdy_sym_shapes *s, int v)
{
    const cdy_value *val = &g->values[v];
    char k = val->kind == CDY_VAL_NODE ? cdy_op_table[val->op].kind : 0;
    int64_t c;
    if (k != 'V' && k != 'G')
        return 0;
    for (int j = 0; s->vsrc && s->vsrc[v].src >= 0 && j < CDY_MAX_NDIM; j++)
        if (s->vsrc[v].start[j] >= 0 && !cdy_sym_is_const(&s->tab, s->vsrc[v].start[j], &c))
            return 1;
    int mapped = 0;
    for (int i = 0; h && i < h->nviews; i++) {
        const cdy_sym_view *w = &h->views[i];
        if (w->value != v || w->src < 0 || w->src >= v)
            continue;
        mapped = 1;
        if (s->moves[w->src])
            return 1;
    }
    for (int u = 0; !mapped && u < v; u++)
        if (s->moves[u] && g->values[u].view_base == val->view_base)
            return 1;
    return 0;
}

/* s->const_off (sym.h) of g's values: a view is constant-offset when it
 * has a map of a kind that starts every dim at a constant index ('p', 'r',
 * 'f', 'e', 'g', 'x' (an expand): the source's offset; 's': a split piece,
 * a constant start on its pinned dim; 'c': a getitem, starts of 0 or on
 * pinned dims) over a constant-offset source; no map or another kind: 0.
 * Also s->cut
 * (sy_cut_dims).  Memory failure leaves them NULL (every view offset
 * unknown, no dim cut). */
static void sy_const_offsets(const cdy_graph *g, const cdy_sym_hints *h, cdy_sym_shapes *s)
{
    s->const_off = calloc(g->nvalues ? (size_t)g->nvalues : 1, 1);
    for (int v = 0; s->const_off && v < g->nvalues; v++) {
        const cdy_value *val = &g->values[v];
        s->const_off[v] = !(val->kind == CDY_VAL_NODE && cdy_op_table[val->op].kind == 'V');
        for (int i = 0; !s->const_off[v] && h && i < h->nviews; i++) {
            const cdy_sym_view *w = &h->views[i];
            if (w->value == v && w->src >= 0 && w->src < v && w->kind && strchr("prfescgx", w->kind))
                s->const_off[v] = s->const_off[w->src] && sy_const_starts(s, v);
        }
    }
    s->cut = calloc(g->nvalues ? (size_t)g->nvalues : 1, 1);
    for (int i = 0; s->cut && h && i < h->nviews; i++)   /* the trace's order: sources first */
        sy_cut_dims(g, &h->views[i], s->cut);
    s->moves = calloc(g->nvalues ? (size_t)g->nvalues : 1, 1);
    for (int v = 0; s->moves && v < g->nvalues; v++)
        s->moves[v] = (unsigned char)sy_moves(g, h, s, v);
}

int cdy_sym_any_live(const cdy_sym_shapes *s)
{
    for (int k = 0; k < s->tab.nsyms; k++)
        if (!s->info[k].pinned)
            return 1;
    return 0;
}

cdy_sym_mask cdy_sym_live(const cdy_sym_shapes *s)
{
    cdy_sym_mask m = {{0}};
    for (int k = 0; k < s->tab.nsyms; k++)
        if (!s->info[k].pinned)
            cdy_sym_mask_set(&m, k);
    return m;
}
