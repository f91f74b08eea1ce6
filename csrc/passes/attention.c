/* attention.c - torch's fused attention in the graph (a pass of the C
 * backend; the layout of its result is trace/meta.c's, mt_sdpa).
 *
 * A rewrite of the finished trace, before the C backend compiles it:
 * attention written out by hand becomes one call of
 * cdynamo._attention.attention (torch.nn.functional.scaled_dot_product_attention).
 *
 *   a = q @ k.transpose(-2, -1)        extern matmul   (B, H, L, S)
 *   s = a * c   (or a / c, or a)       pointwise       [+ m: an additive float mask]
 *   p = s.softmax(-1)                  row node
 *   y = p @ v                          extern matmul   (B, H, L, Ev)
 *
 * becomes y = cdynamo._attention.attention(q, k, v, [attn_mask=m,] scale=c):
 * torch.nn.functional.scaled_dot_product_attention where that gives eager's
 * values (every row of scores has a finite entry: its flash kernel turns a row
 * of -inf or NaN scores into zeros, where eager's softmax gives NaN), eager's
 * unfused ops otherwise (see python/cdynamo/_attention.py).
 * Eager's matmul of a transposed view copies both operands into contiguous
 * batches first; torch's fused CPU attention reads q, k and v where they are
 * and never writes the L x S scores (4x64-token heads: 262 us against 171 us;
 * 512 tokens: 13.2 ms against 4.0 ms on this project's machine).  Its result
 * differs from the unfused one by float rounding only (online softmax).
 *
 * Only a chain whose intermediates nothing else reads is rewritten: y's
 * node then reads (q, k, v[, m]) through its new call, and a, s, p (and
 * the mask's add) become unused scalars, which no step computes. */
#include <string.h>

#include "passes/passes.h"

static PyObject *sdpa_fn, *train_fn, *kw_scale, *kw_mask_scale, *matmul_fns[4];
static PyObject *contiguous_fn, *transpose_fn, *minus[3];   /* the lean chain's calls; -1, -2 */

/* Resolve the callables once; 0, or -1 (error cleared: no rewrite). */
static int at_init(void)
{
    if (sdpa_fn)
        return 0;
    PyObject *f = PyImport_ImportModule("cdynamo._attention");
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *op = PyImport_ImportModule("operator");
    PyObject *tensor = torch ? PyObject_GetAttrString(torch, "Tensor") : NULL;
    PyObject *sd = f ? PyObject_GetAttrString(f, "attention") : NULL;
    PyObject *ag = PyImport_ImportModule("cdynamo._autograd");
    train_fn = ag ? PyObject_GetAttrString(ag, "attention_forward") : NULL;
    Py_XDECREF(ag);
    if (sd && tensor && op) {
        matmul_fns[0] = PyObject_GetAttrString(torch, "matmul");
        matmul_fns[1] = PyObject_GetAttrString(tensor, "matmul");
        matmul_fns[2] = PyObject_GetAttrString(tensor, "__matmul__");
        matmul_fns[3] = PyObject_GetAttrString(op, "matmul");
        contiguous_fn = PyObject_GetAttrString(tensor, "contiguous");
        transpose_fn = PyObject_GetAttrString(tensor, "transpose");
        minus[1] = PyLong_FromLong(-1);
        minus[2] = PyLong_FromLong(-2);
        kw_scale = Py_BuildValue("(s)", "scale");
        kw_mask_scale = Py_BuildValue("(ss)", "attn_mask", "scale");
    }
    Py_XDECREF(f);
    Py_XDECREF(torch);
    Py_XDECREF(op);
    Py_XDECREF(tensor);
    int ok = sd && train_fn && matmul_fns[0] && matmul_fns[1] && matmul_fns[2] && matmul_fns[3] &&
             kw_scale && kw_mask_scale && contiguous_fn && transpose_fn && minus[1] && minus[2];
    if (!ok) {
        Py_XDECREF(sd);
        PyErr_Clear();
        return -1;
    }
    sdpa_fn = sd;
    return 0;
}

typedef struct {
    cdy_trace *t;
    int *pynode_of;    /* value -> its pynode, or -1 */
    int *users;        /* value -> how many nodes, calls and outputs read it */
} at_ctx;

/* 1 if value v is an extern matmul(x, y) of two tensors; x and y set. */
static int at_matmul(at_ctx *a, int v, int *x, int *y)
{
    const cdy_value *val = &a->t->graph.values[v];
    int n = a->pynode_of[v];
    if (!cdy_value_is_extern(val) || n < 0)
        return 0;
    const cdy_pynode *p = &a->t->pynodes[n];
    int mm = 0;
    for (int i = 0; i < 4; i++)
        mm |= p->fn == matmul_fns[i];
    if (!mm || p->nargs != 2 || p->kwnames || p->item >= 0 || p->ref[0] < 0 || p->ref[1] < 0)
        return 0;
    *x = p->ref[0];
    *y = p->ref[1];
    return 1;
}

/* 1 if node v is op over (x, scalar) or (scalar, x) (x first only when
 * x_first), read only once; *x and *c set. */
static int at_scaled(at_ctx *a, int v, int op, int x_first, int *x, double *c)
{
    const cdy_graph *g = &a->t->graph;
    const cdy_value *val = &g->values[v];
    if (val->kind != CDY_VAL_NODE || val->op != op || val->nargs != 2)
        return 0;
    if (cdy_value_number(g, val->args[1], c)) {
        *x = val->args[0];
        return 1;
    }
    if (!x_first && cdy_value_number(g, val->args[0], c)) {
        *x = val->args[1];
        return 1;
    }
    return 0;
}

/* The pattern's pieces, value numbers (mask -1 when none). */
typedef struct {
    int y, p, add, scaled, a, q, kt, k, v, mask;
    double scale;
} at_match;

/* Peel s = a * c | c * a | a / c | a into m (a, scaled, scale) when a is
 * an extern matmul (q, kt) read only there; 1 or 0. */
static int at_chain(at_ctx *a, int s, at_match *m)
{
    const cdy_graph *g = &a->t->graph;
    double c = 1.0;
    int x = s;
    m->scaled = -1;
    if (at_scaled(a, s, CDY_OP_MUL, 0, &x, &c) || at_scaled(a, s, CDY_OP_DIV, 1, &x, &c)) {
        if (g->values[s].op == CDY_OP_DIV) {
            if (c == 0.0)
                return 0;
            c = 1.0 / c;
        }
        if (a->users[x] != 1)
            return 0;
        m->scaled = s;
    }
    m->a = x;
    m->scale = c;
    return at_matmul(a, x, &m->q, &m->kt);
}

/* Peel the softmax's input s = chain [+ mask] into m (at_chain, add, mask); 1 or 0. */
static int at_scores(at_ctx *a, int s, at_match *m)
{
    const cdy_graph *g = &a->t->graph;
    const cdy_value *sv = &g->values[s];
    m->add = m->mask = -1;
    if (at_chain(a, s, m))
        return 1;
    if (sv->kind != CDY_VAL_NODE || sv->op != CDY_OP_ADD || sv->nargs != 2)
        return 0;
    for (int i = 0; i < 2; i++) {   /* the mask: a float tensor beside the chain */
        int mask = sv->args[i], other = sv->args[1 - i];
        const cdy_value *mv = &g->values[mask];
        if (mv->kind != CDY_VAL_SCALAR && mv->meta.dtype == sv->meta.dtype &&
            mv->meta.ndim <= sv->meta.ndim && a->users[other] == 1 && at_chain(a, other, m)) {
            m->add = s;
            m->mask = mask;
            return 1;
        }
    }
    return 0;
}

/* 1 if dims 0 .. nd-3 of metas x and y agree. */
static int at_same_batch(const cdy_meta *x, const cdy_meta *y)
{
    if (x->ndim != y->ndim)
        return 0;
    for (int d = 0; d < x->ndim - 2; d++)
        if (x->sizes[d] != y->sizes[d])
            return 0;
    return 1;
}

/* k for kt = k.transpose(-2, -1): kt's view argument when it reads the same
 * elements with the last two dims swapped; -1 when none. */
static int at_untransposed(const cdy_graph *g, int kt)
{
    const cdy_value *tv = &g->values[kt];
    if (!cdy_value_is_alias(tv) || tv->nargs != 1)
        return -1;
    int k = tv->args[0], nd = tv->meta.ndim;
    const cdy_value *kv = &g->values[k];
    int kview = kv->kind == CDY_VAL_NODE && cdy_op_table[kv->op].kind == 'V';
    if (kv->meta.ndim != nd || nd < 2 || (kview && !cdy_value_is_alias(kv)))
        return -1;
    int base = kview ? kv->view_base : k;
    int64_t off = kview ? kv->view_offset : 0;
    const int64_t *st = kview ? kv->view_strides : kv->meta.strides;
    if (tv->view_base != base || tv->view_offset != off)
        return -1;
    for (int d = 0; d < nd; d++) {
        int e = d == nd - 1 ? nd - 2 : d == nd - 2 ? nd - 1 : d;
        if (kv->meta.sizes[e] != tv->meta.sizes[d] ||
            (tv->meta.sizes[d] > 1 && st[e] != tv->view_strides[d]))
            return -1;
    }
    return k;
}

/* Match the pattern ending at y = p @ v into m; 1 or 0. */
static int at_match_at(at_ctx *a, int y, at_match *m)
{
    const cdy_graph *g = &a->t->graph;
    memset(m, 0, sizeof(*m));
    m->y = y;
    if (!at_matmul(a, y, &m->p, &m->v))
        return 0;
    const cdy_value *pv = &g->values[m->p];
    if (pv->kind != CDY_VAL_NODE || pv->op != CDY_OP_SOFTMAX || a->users[m->p] != 1)
        return 0;
    int dt = pv->meta.dtype, nd = pv->meta.ndim;
    double dim;
    if (nd != 4 || (dt != CDY_DT_FLOAT32 && dt != CDY_DT_FLOAT64) ||
        !cdy_value_number(g, pv->args[1], &dim) || (int)dim != nd - 1 ||
        g->values[pv->args[0]].meta.dtype != dt || a->users[pv->args[0]] != 1 ||
        !at_scores(a, pv->args[0], m) || a->users[m->a] != 1 ||
        (m->k = at_untransposed(g, m->kt)) < 0)
        return 0;
    const cdy_meta *q = &g->values[m->q].meta, *k = &g->values[m->k].meta;
    const cdy_meta *v = &g->values[m->v].meta, *am = &g->values[m->a].meta;
    const cdy_meta *sm = &g->values[pv->args[0]].meta;   /* a mask may not widen the scores */
    return !memcmp(sm->sizes, am->sizes, sizeof(int64_t) * 4) && q->dtype == dt && k->dtype == dt && v->dtype == dt && am->dtype == dt &&
           at_same_batch(q, k) && at_same_batch(q, v) && at_same_batch(q, am) &&
           q->sizes[3] == k->sizes[3] && k->sizes[2] == v->sizes[2] &&
           am->sizes[2] == q->sizes[2] && am->sizes[3] == k->sizes[2];
}

/* Rewrite matched m: y's node and call become the fused attention; 0 or -1. */
static int at_rewrite(at_ctx *a, const at_match *m)
{
    cdy_trace *t = a->t;
    cdy_pynode *p = &t->pynodes[a->pynode_of[m->y]];
    int n = m->mask >= 0 ? 5 : 4;
    int *ref = cdy_arena_alloc(&t->arena, sizeof(int) * (size_t)(n + 1));
    PyObject **cst = cdy_arena_alloc(&t->arena, sizeof(PyObject *) * (size_t)(n + 1));
    cdy_pyseq *seq = cdy_arena_alloc(&t->arena, sizeof(cdy_pyseq) * (size_t)(n + 1));
    PyObject *scale = PyFloat_FromDouble(m->scale);
    if (!ref || !cst || !seq || !scale || PyList_Append(t->keep, scale)) {
        Py_XDECREF(scale);
        PyErr_Clear();
        return -1;
    }
    Py_DECREF(scale);   /* the keep list owns it */
    memset(seq, 0, sizeof(cdy_pyseq) * (size_t)(n + 1));
    int vals[4] = {m->q, m->k, m->v, m->mask};
    for (int i = 0; i < n - 1; i++) {
        ref[i] = vals[i];
        cst[i] = NULL;
    }
    ref[n - 1] = -1;
    cst[n - 1] = scale;
    p->fn = sdpa_fn;
    p->nargs = n;
    p->ref = ref;
    p->cst = cst;
    p->seq = seq;
    p->kwnames = m->mask >= 0 ? kw_mask_scale : kw_scale;
    cdy_value *yv = &t->graph.values[m->y];
    yv->nargs = n - 1;
    memcpy(yv->args, vals, sizeof(int) * (size_t)(n - 1));
    cdy_graph *g = &t->graph;
    cdy_value_drop(g, m->p);
    cdy_value_drop(g, m->add);
    cdy_value_drop(g, m->scaled);
    cdy_value_drop(g, m->a);
    return 0;
}

/* 1 if matched m may be rewritten in a training graph: no mask, float32
 * (sdpa_backward's fused gradients, torch's flash kernel, then apply; float64
 * keeps eager's unfused ops, whose rounding the fused kernel's would not). */
static int at_trainable(const cdy_trace *t, const at_match *m)
{
    return m->mask < 0 && t->graph.values[m->y].meta.dtype == CDY_DT_FLOAT32;
}

/* perm[d] := the dim of meta y that view dim d of w (sizes, strides st) is,
 * every dim of y once; 1, or 0 when w is no permutation of y. */
static int at_perm_of(const cdy_meta *y, const int64_t *sizes, const int64_t *st, int *perm)
{
    int taken = 0;
    for (int d = 0; d < 4; d++) {
        perm[d] = -1;
        for (int e = 0; e < 4 && perm[d] < 0; e++)
            if (!(taken >> e & 1) && sizes[d] == y->sizes[e] && st[d] == y->strides[e])
                perm[d] = e;
        if (perm[d] < 0)
            return 0;
        taken |= 1 << perm[d];
    }
    return 1;
}

/* Give attention result y (contiguous (B, H, L, E), every size > 1, not a
 * graph output) the flash kernel's heads-major layout ((B, L, H, E) memory),
 * so that the runtime keeps the kernel's result as it is (no copy into the
 * traced strides) and y.transpose(1, 2) reads it in order: every view or
 * copy of y (kind V, base y) must be a permutation of y's dims, its strides
 * then permuted alike (y.transpose(1, 2).reshape(b, t, c)'s copy then
 * reads y in order).  Nothing changes otherwise. */
static void at_heads_major(cdy_trace *t, int y)
{
    cdy_graph *g = &t->graph;
    cdy_meta *m = &g->values[y].meta;
    int perm[4];
    if (m->ndim != 4 || !cdy_meta_contiguous(m))
        return;
    for (int d = 0; d < 4; d++)
        if (m->sizes[d] < 2)
            return;
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i] == y)
            return;
    for (int w = 0; w < g->nvalues; w++) {
        const cdy_value *x = &g->values[w];
        if (x->kind == CDY_VAL_NODE && cdy_op_table[x->op].kind == 'V' && x->view_base == y &&
            (x->meta.ndim != 4 || x->view_offset != 0 ||
             !at_perm_of(m, x->meta.sizes, x->view_strides, perm)))
            return;
    }
    int64_t st[4] = {m->sizes[2] * m->sizes[1] * m->sizes[3], m->sizes[3],
                     m->sizes[1] * m->sizes[3], 1};
    for (int w = 0; w < g->nvalues; w++) {
        cdy_value *x = &g->values[w];
        if (x->kind != CDY_VAL_NODE || cdy_op_table[x->op].kind != 'V' || x->view_base != y)
            continue;
        at_perm_of(m, x->meta.sizes, x->view_strides, perm);
        for (int d = 0; d < 4; d++) {
            x->view_strides[d] = st[perm[d]];
            if (cdy_value_is_alias(x))
                x->meta.strides[d] = st[perm[d]];
        }
    }
    memcpy(m->strides, st, sizeof(st));
}

/* Rewrite matched m in a training graph: y's call becomes
 * cdynamo._autograd.attention_forward(q, k, v, scale) -> (y, lse), a
 * multi-output call (the call, then one item per result), lse a new value
 * before y (B, H, L) of the flash kernel's layout, saved for the backward
 * with y (trace/autograd.c: no attention recomputed there); 0 or -1 (out of
 * memory: then nothing changed but y's call, which at_rewrite made). */
static int at_rewrite_train(at_ctx *a, const at_match *m)
{
    cdy_trace *t = a->t;
    int pn = a->pynode_of[m->y];
    int *ref = cdy_arena_alloc(&t->arena, sizeof(int) * 5);
    PyObject **cst = cdy_arena_alloc(&t->arena, sizeof(PyObject *) * 5);
    cdy_pyseq *seq = cdy_arena_alloc(&t->arena, sizeof(cdy_pyseq) * 5);
    if (!ref || !cst || !seq || at_rewrite(a, m) ||
        cdy_trace_insert_pynodes(t, pn, 2))
        return -1;
    if (cdy_trace_insert_values(t, m->y, 1)) {
        memmove(&t->pynodes[pn], &t->pynodes[pn + 2], sizeof(cdy_pynode) * (size_t)(t->npynodes - pn - 2));
        t->npynodes -= 2;
        return -1;
    }
    cdy_graph *g = &t->graph;
    int lse = m->y, y = m->y + 1;
    cdy_pynode *base = &t->pynodes[pn], *iy = &t->pynodes[pn + 1], *il = &t->pynodes[pn + 2];
    memset(seq, 0, sizeof(cdy_pyseq) * 5);
    *base = *il;                            /* y's call (at_rewrite's), now the base */
    base->fn = train_fn;
    base->kwnames = NULL;
    base->value = -1;
    base->item = -1;
    base->ref = ref;
    base->cst = cst;
    base->seq = seq;
    base->nargs = 4;
    memcpy(ref, (int[]){m->q, m->k, m->v, -1}, sizeof(int) * 4);
    cst[3] = t->pynodes[pn + 2].cst[t->pynodes[pn + 2].nargs - 1];   /* the scale */
    memset(iy, 0, sizeof(*iy));
    memset(il, 0, sizeof(*il));
    *iy = (cdy_pynode){.value = y, .item = 0, .base = pn};
    *il = (cdy_pynode){.value = lse, .item = 1, .base = pn};
    cdy_value *lv = &g->values[lse];
    *lv = g->values[y];
    const cdy_meta *q = &g->values[m->q].meta;
    lv->meta.ndim = 3;
    int64_t sz[3] = {q->sizes[0], q->sizes[1], q->sizes[2]};
    memcpy(lv->meta.sizes, sz, sizeof(sz));
    lv->meta.strides[0] = sz[1] * sz[2];    /* (B, L, H) memory: the flash kernel's */
    lv->meta.strides[1] = 1;
    lv->meta.strides[2] = sz[1];
    if (g->values[m->v].meta.sizes[3] == q->sizes[3])   /* the flash kernel runs */
        at_heads_major(t, y);
    return 0;
}

/* config.attention_flash_min_len when config.fused_attention_training is
 * on (an int >= 0), else -1: no flash kernels. */
static long at_flash_min_len(void)
{
    if (!cdy_config_flag("fused_attention_training"))
        return -1;
    PyObject *v = cdy_config_get("attention_flash_min_len");
    long n = v && PyLong_Check(v) ? PyLong_AsLong(v) : 0;
    Py_XDECREF(v);
    PyErr_Clear();
    return n < 0 ? 0 : n;
}

/* ---- the lean unfused chain (training, short sequences) -------------------- */

/* 1 if torch.matmul reads stack meta m in place: its batch dims (those
 * before the last two) merge into one and its matrices are row- or
 * column-major; 0: ATen would copy it first (attention's head views of the
 * qkv projection: batch and head strides apart). */
static int at_bmm_ready(const cdy_meta *m)
{
    int n = m->ndim;
    if (n < 3)
        return 1;
    if (m->strides[n - 1] != 1 && m->strides[n - 2] != 1)
        return 0;
    int64_t inner = -1;      /* the stride the next batch dim out must have */
    for (int d = n - 3; d >= 0; d--) {
        if (m->sizes[d] == 1)
            continue;
        if (inner >= 0 && m->strides[d] != inner)
            return 0;
        inner = m->strides[d] * m->sizes[d];
    }
    return 1;
}

/* Make new value c a contiguous copy of value x (VIEW_COPY: read through
 * x's base when x is a view), its node numbered like `like`'s source line. */
static void at_set_copy(cdy_graph *g, int c, int x, int like)
{
    const cdy_value *xv = &g->values[x];
    cdy_value *cv = &g->values[c];
    int alias = cdy_value_is_alias(xv);
    cv->kind = CDY_VAL_NODE;
    cv->meta = xv->meta;
    cdy_canonical_strides(cv->meta.ndim, cv->meta.sizes, cv->meta.strides);
    cv->nargs = 1;
    cv->args[0] = x;
    cv->compute_dtype = xv->meta.dtype;
    cv->source_line = g->values[like].source_line;
    cv->source_code = g->values[like].source_code;
    cdy_value_set_copy(cv, alias ? xv->view_base : x, alias ? xv->view_strides : xv->meta.strides,
                       alias ? xv->view_offset : 0);
}

/* Make new value t the view kc.transpose(-2, -1) of contiguous copy kc. */
static void at_set_transpose(cdy_graph *g, int t, int kc)
{
    cdy_value *tv = &g->values[t];
    *tv = g->values[kc];
    int n = tv->meta.ndim;
    int64_t sz = tv->meta.sizes[n - 1], st = tv->meta.strides[n - 1];
    tv->meta.sizes[n - 1] = tv->meta.sizes[n - 2];
    tv->meta.strides[n - 1] = tv->meta.strides[n - 2];
    tv->meta.sizes[n - 2] = sz;
    tv->meta.strides[n - 2] = st;
    tv->args[0] = kc;
    cdy_value_set_view(tv, kc, tv->meta.strides, 0);
}

/* Fill new call p (at_lean's) as value v := fn(x[, -2, -1]) (transpose:
 * the last two dims swapped); 0, or -1 (no memory). */
static int at_set_call(cdy_trace *t, cdy_pynode *p, int v, PyObject *fn, int x)
{
    int n = fn == transpose_fn ? 3 : 1;
    int *ref = cdy_arena_alloc(&t->arena, sizeof(int) * 3);
    PyObject **cst = cdy_arena_alloc(&t->arena, sizeof(PyObject *) * 3);
    cdy_pyseq *seq = cdy_arena_alloc(&t->arena, sizeof(cdy_pyseq) * 3);
    if (!ref || !cst || !seq)
        return -1;
    memset(seq, 0, sizeof(cdy_pyseq) * 3);
    memcpy(ref, (int[]){x, -1, -1}, sizeof(int) * 3);
    cst[0] = NULL;
    cst[1] = minus[2];
    cst[2] = minus[1];
    *p = (cdy_pynode){.fn = fn, .nargs = n, .ref = ref, .cst = cst, .seq = seq,
                      .value = v, .item = -1};
    return 0;
}

/* Point tensor argument `slot` of matmul value mm (node and call) at value x. */
static void at_retarget(at_ctx *a, int mm, int slot, int x)
{
    a->t->graph.values[mm].args[slot] = x;
    a->t->pynodes[a->pynode_of[mm]].ref[slot] = x;
}

/* The lean chain for matched m in a training graph (what torch.compile's
 * CPU code does at short sequences): q, k and v copied by the graph's own
 * copy kernels into contiguous heads (B, H, L, E) before the two matmuls,
 * k's copy read transposed, so that torch.matmul calls bmm on them with no
 * ATen copy, and the backward's matmuls read the saved copies in place
 * (trace/autograd.c: the result's gradient made contiguous once).  The
 * softmax and its backward stay the graph's row kernels.  Only operands that
 * torch would copy are copied; 0, or -1 (nothing changed: no room). */
static int at_lean(at_ctx *a, at_match *m)
{
    cdy_graph *g = &a->t->graph;
    int cq = !at_bmm_ready(&g->values[m->q].meta), cv = !at_bmm_ready(&g->values[m->v].meta);
    int ck = !at_bmm_ready(&g->values[m->kt].meta);
    int n = cq + cv + 2 * ck, at = m->a;
    if (!n)
        return 0;
    int pn = a->pynode_of[at];
    int *po = PyMem_Calloc((size_t)g->nvalues + (size_t)n + 1, sizeof(int));
    if (!po || cdy_trace_insert_pynodes(a->t, pn, n)) {
        PyMem_Free(po);
        return -1;
    }
    if (cdy_trace_insert_values(a->t, at, n)) {
        memmove(&a->t->pynodes[pn], &a->t->pynodes[pn + n],
                sizeof(cdy_pynode) * (size_t)(a->t->npynodes - pn - n));
        a->t->npynodes -= n;
        PyMem_Free(po);
        return -1;
    }
    /* the copies first, side by side (one kernel of the scheduler's), then k's view */
    int mm_a = m->a + n, mm_y = m->y + n, err = 0;
    int vq = cq ? at : -1, vk = ck ? at + cq : -1, vv = cv ? at + cq + ck : -1;
    int vt = ck ? at + n - 1 : -1;
    cdy_pynode *calls = &a->t->pynodes[pn];
    int src[3] = {m->q, m->k, m->v}, dst[3] = {vq, vk, vv};
    for (int i = 0; i < 3; i++)
        if (dst[i] >= 0) {
            at_set_copy(g, dst[i], src[i], mm_a);
            err |= at_set_call(a->t, calls++, dst[i], contiguous_fn, src[i]);
        }
    if (ck) {
        at_set_transpose(g, vt, vk);
        err |= at_set_call(a->t, calls++, vt, transpose_fn, vk);
    }
    PyMem_Free(a->pynode_of);
    a->pynode_of = po;
    cdy_trace_pynode_of(a->t, a->pynode_of);
    if (cq)
        at_retarget(a, mm_a, 0, vq);
    if (ck)
        at_retarget(a, mm_a, 1, vt);
    if (cv)
        at_retarget(a, mm_y, 1, vv);
    return err ? -1 : 1;
}

/* 1 if matched m takes torch's flash kernels in a training graph: trainable,
 * config.fused_attention_training on, and m's query length at least
 * config.attention_flash_min_len (below it the lean chain: its L x S scores
 * are small, and bmm's calls cheaper than the flash kernels' at many
 * threads). */
static int at_use_flash(const cdy_trace *t, const at_match *m, long min_len)
{
    return at_trainable(t, m) && min_len >= 0 &&
           t->graph.values[m->q].meta.sizes[2] >= min_len;
}

/* ---- hand-written attention ------------------------------------------------ */

/* Rewrite every hand-written attention in t (see the top of this file), or
 * in a training graph's forward (train: the flash call where at_use_flash,
 * its gradient then attention_grads', trace/autograd.c; else the lean chain,
 * at_lean, where an earlier chain ends before this one starts); the number
 * rewritten.
 * Never fails: a trace it cannot handle stays as is. */
static int at_pass(cdy_trace *t, int train)
{
    if (t->graph.nvalues == 0 || at_init())
        return 0;
    size_t nv = (size_t)t->graph.nvalues + 1;
    at_ctx a = {t, PyMem_Calloc(nv, sizeof(int)), PyMem_Calloc(nv, sizeof(int))};
    int done = 0;
    if (!a.pynode_of || !a.users)
        goto out;
    cdy_trace_pynode_of(t, a.pynode_of);
    cdy_trace_users(t, a.users);
    int n = 0;
    long min_len = train ? at_flash_min_len() : 0;
    at_match *ms = PyMem_Calloc((size_t)t->graph.nvalues + 1, sizeof(at_match));
    for (int v = 0; ms && v < t->graph.nvalues; v++)
        if (at_match_at(&a, v, &ms[n]))
            n++;
    for (int i = n - 1; i >= 0; i--) {   /* the last first: a rewrite moves the values after it */
        int r = !train                               ? at_rewrite(&a, &ms[i])
                : at_use_flash(t, &ms[i], min_len)   ? at_rewrite_train(&a, &ms[i])
                : i == 0 || ms[i - 1].y < ms[i].a    ? at_lean(&a, &ms[i]) - 1
                                                     : -1;
        done += r == 0;
    }
    PyMem_Free(ms);
out:
    PyMem_Free(a.pynode_of);
    PyMem_Free(a.users);
    return done;
}

int cdy_pass_attention(cdy_trace *t)
{
    return at_pass(t, 0);
}

int cdy_pass_attention_train(cdy_trace *t)
{
    return at_pass(t, 1);
}
