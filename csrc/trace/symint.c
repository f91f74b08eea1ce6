/* trace/symint.c - symbolic Python ints: sizes the traced code reads.
 *
 * A size read (x.shape, x.size(), x.size(d), len(x), x.numel()) gives a
 * constant tvar carrying a node (cdy_sym_sx: dim d of graph value v, or +, *,
 * // by a constant over such), and torch.Size constants carry one per item.
 * The read records no pin.  The node follows the value where the tracer only
 * moves it (locals, the stack, tuples and lists, unpacking, indexing a size
 * tuple, int + - * // by constants, an inlined call's arguments) and goes into
 * the sizes of the ops with a symbolic rule for it (sympins.c: view / reshape);
 * every other use pins the sizes it reads (cdy_tr_pin), as a read did before:
 * each semantic op not known here pins the symbolic ints it consumes (deep,
 * in containers), a call's arguments are pinned after the call unless an
 * inlined frame or a rule took them, and a stop or break pins all of them.
 * So nothing the value decided is left unguarded: a node never pinned only
 * reached sizes that sym/infer.c computes from its expression. */
#include "trace/trace.h"
#include "frame/frame.h"
#include "sym/sym.h"

#include <stdio.h>
#include <string.h>

/* The why text of a pin at semantic op s (static). */
static const char *const sx_why[] = {
#define X(name, desc) "the code read the size and used it in " #name,
#include "pyver/sops.def"
#undef X
};

int cdy_sx_node(tracer *tr, char op, int a, int b, int value, int dim, long long c)
{
    cdy_trace *t = tr->t;
    if (t->nsx == t->cap_sx) {
        int cap = t->cap_sx ? 2 * t->cap_sx : 32;
        if (cap > 4096)
            return 0;
        cdy_sym_sx *p = cdy_arena_alloc(&t->arena, (size_t)cap * sizeof(*p));
        unsigned char *q = cdy_arena_alloc(&t->arena, (size_t)cap);
        if (!p || !q)
            return 0;
        if (t->nsx) {
            memcpy(p, t->sx, (size_t)t->nsx * sizeof(*p));
            memcpy(q, t->sx_pinned, (size_t)t->nsx);
        }
        t->sx = p;
        t->sx_pinned = q;
        t->cap_sx = cap;
    }
    t->sx[t->nsx] = (cdy_sym_sx){op, a, b, value, dim, c};
    t->sx_pinned[t->nsx] = 0;
    return ++t->nsx;
}

int cdy_sx_dim(tracer *tr, const tvar *t, int d)
{
    if (t->kind != TV_TENSOR || d < 0 || d >= tr->t->graph.values[t->value].meta.ndim)
        return 0;
    return cdy_sx_node(tr, 'd', 0, 0, t->value, d, 0);
}

int cdy_sx_numel(tracer *tr, const tvar *t)
{
    if (t->kind != TV_TENSOR)
        return 0;
    int nd = tr->t->graph.values[t->value].meta.ndim;
    int n = cdy_sx_node(tr, 'k', 0, 0, -1, -1, 1);
    for (int d = 0; d < nd && n; d++) {
        int e = cdy_sx_dim(tr, t, d);
        n = e ? cdy_sx_node(tr, '*', n, e, -1, -1, 0) : 0;
    }
    return n;
}

/* ---- Python ints as symbols (automatic dynamic ints) -------------------------- */

static const cdy_guards *const *si_prev;   /* the compiling code's entries' guards */
static int si_nprev, si_mode, si_automatic;

void cdy_sx_int_policy(const cdy_guards *const *prev, int n, int mode, int automatic)
{
    si_prev = prev;
    si_nprev = n;
    si_mode = mode;
    si_automatic = automatic;
}

/* 1 when an earlier entry guarded src as an int other than value (its
 * value changed), or as a symbol (a TYPE guard for int: it stays one). */
static int si_changed(const cdy_src *src, long long value)
{
    for (int e = 0; e < si_nprev; e++) {
        const cdy_guards *gs = si_prev[e];
        for (int i = 0; i < gs->n; i++) {
            const cdy_guard *g = &gs->items[i];
            if (!g->expect || !cdy_src_equal(&g->src, src))
                continue;
            if (g->kind == CDY_GUARD_TYPE && g->expect == (PyObject *)&PyLong_Type)
                return 1;
            if (g->kind == CDY_GUARD_CONST && PyLong_CheckExact(g->expect)) {
                int of = 0;
                long long w = PyLong_AsLongLongAndOverflow(g->expect, &of);
                PyErr_Clear();
                if (!of && w != value)
                    return 1;
            }
        }
    }
    return 0;
}

/* 1 when the policy makes the int at src (value) a symbol: dynamic=True an
 * argument's, automatic dynamic one whose value changed (si_changed); never
 * 0 or 1 (specialized as sizes are), nor a negative one. */
static int si_wanted(const cdy_src *src, long long value)
{
    if (value < 2 || value > ((long long)1 << 53))
        return 0;
    if (si_mode == 1 && src->kind == CDY_SRC_LOCAL && src->nattrs == 0)
        return 1;
    return si_mode == -1 && si_automatic && si_changed(src, value);
}

tvar *cdy_sx_int_input(tracer *tr, tvar *v, PyObject *o, const cdy_src *src)
{
    cdy_trace *t = tr->t;
    int of = 0;
    long long value = PyLong_AsLongLongAndOverflow(o, &of);
    PyErr_Clear();
    if (!v || of || !si_wanted(src, value) || t->nints >= CDY_SYM_MAX_SYMS)
        return v;
    if (t->nints == t->cap_ints) {
        int cap = t->cap_ints ? 2 * t->cap_ints : 8;
        cdy_sym_int *p = cdy_arena_alloc(&t->arena, (size_t)cap * sizeof(*p));
        const cdy_src **q = cdy_arena_alloc(&t->arena, (size_t)cap * sizeof(*q));
        if (!p || !q)
            return v;
        if (t->nints) {
            memcpy(p, t->ints, (size_t)t->nints * sizeof(*p));
            memcpy(q, t->int_srcp, (size_t)t->nints * sizeof(*q));
        }
        t->ints = p;
        t->int_srcp = q;
        t->cap_ints = cap;
    }
    cdy_src *copy = cdy_arena_alloc(&t->arena, sizeof(cdy_src));
    int n = copy ? cdy_sx_node(tr, 'i', 0, 0, -1, t->nints, value) : 0;
    if (!n)
        return v;
    *copy = *src;
    t->ints[t->nints] = (cdy_sym_int){value, 0, NULL};
    t->int_srcp[t->nints++] = copy;
    return cdy_sx_tag(tr, v, n);
}

int cdy_sx_int_srcs(cdy_trace *t)
{
    if (!t->nints)
        return 0;
    t->int_srcs = cdy_arena_alloc(&t->arena, sizeof(cdy_src) * (size_t)t->nints);
    for (int i = 0; !t->int_srcs && i < t->nints; i++)
        t->ints[i].pinned = 1;   /* no room for their sources: constants */
    if (!t->int_srcs)
        return -1;
    for (int i = 0; i < t->nints; i++)
        t->int_srcs[i] = *t->int_srcp[i];
    return 0;
}

/* operator's function `name` (borrowed, cached per slot), or NULL. */
static PyObject *si_operator(int slot, const char *name)
{
    static PyObject *fns[3];
    if (!fns[slot]) {
        PyObject *m = PyImport_ImportModule("operator");
        fns[slot] = m ? PyObject_GetAttrString(m, name) : NULL;
        Py_XDECREF(m);
        PyErr_Clear();
    }
    return fns[slot];
}

/* A ret of kind k (zeroed), or NULL. */
static cdy_ret *si_ret(tracer *tr, int k)
{
    cdy_ret *r = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_ret));
    if (r)
        r->kind = k;
    return r;
}

/* A CONST ret of int c, or NULL. */
static cdy_ret *si_const_ret(tracer *tr, long long c)
{
    cdy_ret *r = si_ret(tr, CDY_RET_CONST);
    if (r && !(r->obj = cdy_tr_keep(tr, PyLong_FromLongLong(c))))
        r = NULL;
    PyErr_Clear();
    return r;
}

/* The value of node n at the trace (its sizes' and ints' example values); 0
 * and *ok cleared for a node without one. */
static long long si_value(tracer *tr, int n, int *ok, int depth)
{
    const cdy_trace *t = tr->t;
    if (n <= 0 || n > t->nsx || depth > 64) {
        *ok = 0;
        return 0;
    }
    const cdy_sym_sx *x = &t->sx[n - 1];
    switch (x->op) {
    case 'k': case 'i':
        return x->c;
    case 'd':
        return t->graph.values[x->value].meta.sizes[x->dim];
    case '+':
        return si_value(tr, x->a, ok, depth + 1) + si_value(tr, x->b, ok, depth + 1);
    case '*':
        return si_value(tr, x->a, ok, depth + 1) * si_value(tr, x->b, ok, depth + 1);
    case '/': {
        long long a = si_value(tr, x->a, ok, depth + 1);
        return x->c > 0 ? (a >= 0 ? a / x->c : -((-a + x->c - 1) / x->c)) : (*ok = 0);
    }
    default:
        *ok = 0;
        return 0;
    }
}

/* The ret computing node n at replay (see cdy_sx_store_ret); *reads set when
 * it reads an int source; NULL: no rule. */
static cdy_ret *si_node_ret(tracer *tr, int n, int *reads, int depth)
{
    cdy_trace *t = tr->t;
    if (n <= 0 || n > t->nsx || depth > 32)
        return NULL;
    const cdy_sym_sx *x = &t->sx[n - 1];
    if (x->op == 'k')
        return si_const_ret(tr, x->c);
    if (x->op == 'i') {
        cdy_ret *r = x->dim < t->nints ? si_ret(tr, CDY_RET_SOURCE) : NULL;
        if (r)
            r->src = t->int_srcp[x->dim];
        *reads = 1;
        return r;
    }
    if (x->op == 'd') {   /* a size: static from here on, its value */
        cdy_sx_pin_node(tr, n, "the code stored a value computed from the size");
        int ok = 1;
        long long c = si_value(tr, n, &ok, 0);
        return ok ? si_const_ret(tr, c) : NULL;
    }
    if (x->op != '+' && x->op != '*' && x->op != '/')
        return NULL;
    PyObject *fn = x->op == '+' ? si_operator(0, "add") : x->op == '*' ? si_operator(1, "mul")
                                                                      : si_operator(2, "floordiv");
    cdy_ret *r = fn ? si_ret(tr, CDY_RET_CALL) : NULL;
    cdy_ret **items = r ? cdy_arena_alloc(&t->arena, 2 * sizeof(cdy_ret *)) : NULL;
    if (!items)
        return NULL;
    items[0] = si_node_ret(tr, x->a, reads, depth + 1);
    items[1] = x->op == '/' ? si_const_ret(tr, x->c) : si_node_ret(tr, x->b, reads, depth + 1);
    if (!items[0] || !items[1])
        return NULL;
    r->obj = fn;
    r->n = r->index = 2;
    r->items = items;
    return r;
}

cdy_ret *cdy_sx_store_ret(tracer *tr, tvar *v)
{
    cdy_trace *t = tr->t;
    int reads = 0, ok = 1;
    if (!v || v->kind != TV_CONST || !v->sx || !PyLong_CheckExact(v->obj) || !t->nints)
        return NULL;
    long long c = PyLong_AsLongLong(v->obj);
    PyErr_Clear();
    if (si_value(tr, v->sx, &ok, 0) != c || !ok)
        return NULL;   /* the node does not give the value: no ret from it */
    cdy_ret *r = si_node_ret(tr, v->sx, &reads, 0);
    if (!r || !reads)
        return NULL;
    if (t->nobjects == t->cap_objects) {   /* made before any store (frame/bytecode.c) */
        int cap = t->cap_objects ? 2 * t->cap_objects : 8;
        cdy_ret **o = cdy_arena_alloc(&t->arena, sizeof(cdy_ret *) * (size_t)cap);
        if (!o)
            return NULL;
        if (t->nobjects)
            memcpy(o, t->objects, sizeof(cdy_ret *) * (size_t)t->nobjects);
        t->objects = o;
        t->cap_objects = cap;
    }
    cdy_ret *ref = si_ret(tr, CDY_RET_OBJECT);
    if (!ref)
        return NULL;
    ref->index = t->nobjects;
    t->objects[t->nobjects++] = r;
    return ref;
}

/* A copy of constant tvar c (the original may be shared). */
static tvar *sx_copy(tracer *tr, tvar *c)
{
    tvar *v = cdy_tv_new(tr, TV_CONST);
    if (v)
        *v = *c;
    return v;
}

tvar *cdy_sx_tag(tracer *tr, tvar *c, int sx)
{
    if (!c || !sx || c->kind != TV_CONST ||
        !(PyLong_CheckExact(c->obj) || (PySlice_Check(c->obj) && tr->t->sx[sx - 1].op == 'S')))
        return c;
    tvar *v = sx_copy(tr, c);
    if (v) {
        v->sx = sx;
        v->sxi = NULL;
        v->nsxi = 0;
    }
    return v;
}

/* c (a constant tuple of n items) as a copy with items' nodes sxi[0..n). */
static tvar *sx_tag_items(tracer *tr, tvar *c, const int *sxi, int n)
{
    int any = 0;
    for (int i = 0; i < n; i++)
        any |= sxi[i] != 0;
    if (!c || !any || c->kind != TV_CONST || !PyTuple_Check(c->obj) ||
        PyTuple_GET_SIZE(c->obj) != n)
        return c;
    tvar *v = sx_copy(tr, c);
    int *items = v ? cdy_arena_alloc(&tr->t->arena, sizeof(int) * (size_t)(n + 1)) : NULL;
    if (!items) {   /* no room: the copy carries none, so they are numbers */
        for (int i = 0; i < n; i++)
            cdy_sx_pin_node(tr, sxi[i], "out of memory");
        return v;
    }
    memcpy(items, sxi, sizeof(int) * (size_t)n);
    v->sx = 0;
    v->sxi = items;
    v->nsxi = n;
    return v;
}

tvar *cdy_sx_tag_shape(tracer *tr, tvar *c, const tvar *t)
{
    if (!c || t->kind != TV_TENSOR)
        return c;
    int nd = tr->t->graph.values[t->value].meta.ndim;
    int sxi[CDY_MAX_NDIM + 1];
    for (int d = 0; d < nd; d++)
        if (!(sxi[d] = cdy_sx_dim(tr, t, d))) {
            cdy_tr_pin(tr, t->value, ~0u, "the code read .shape");
            return c;
        }
    return sx_tag_items(tr, c, sxi, nd);
}

const char *cdy_sx_where(tracer *tr, const char *why)
{
    const char *file = PyUnicode_AsUTF8(tr->co->co_filename);
    const char *name = PyUnicode_AsUTF8(tr->co->co_name);
    PyErr_Clear();
    if (!file || !name)
        return why;
    const char *base = strrchr(file, '/');
    char buf[256];
    snprintf(buf, sizeof(buf), "%s at %s:%d in %s", why, base ? base + 1 : file,
             PyCode_Addr2Line(tr->co, tr->pc * 2), name);
    const char *r = cdy_arena_strdup(&tr->t->arena, buf);
    return r ? r : why;
}

void cdy_sx_pin_node(tracer *tr, int n, const char *why)
{
    cdy_trace *t = tr->t;
    if (n <= 0 || n > t->nsx || t->sx_pinned[n - 1])
        return;
    t->sx_pinned[n - 1] = 1;
    const cdy_sym_sx *x = &t->sx[n - 1];
    if (x->op == 'd')
        cdy_tr_pin(tr, x->value, 1u << x->dim, cdy_sx_where(tr, why));
    else if (x->op == '+' || x->op == '*' || x->op == 'q' || x->op == 'S') {
        cdy_sx_pin_node(tr, x->a, why);
        cdy_sx_pin_node(tr, x->b, why);
    }
    else if (x->op == '/')
        cdy_sx_pin_node(tr, x->a, why);
    else if (x->op == 'i' && x->dim >= 0 && x->dim < t->nints) {
        t->ints[x->dim].pinned = 1;   /* its CONST guard stays */
        t->ints[x->dim].why = cdy_sx_where(tr, why);
    }
}

/* cdy_sx_pin_deep to depth; past a depth bound every node is pinned. */
static void sx_pin_deep(tracer *tr, tvar *v, const char *why, int depth)
{
    if (!v)
        return;
    if (depth > 12) {
        cdy_sx_pin_all(tr, why);
        return;
    }
    if (v->kind == TV_CONST) {
        cdy_sx_pin_node(tr, v->sx, why);
        for (int i = 0; i < v->nsxi; i++)
            cdy_sx_pin_node(tr, v->sxi[i], why);
        return;
    }
    switch (v->kind) {
    case TV_TUPLE: case TV_LIST: case TV_DICT: case TV_ITER: case TV_FUNC: case TV_PARTIAL:
    case TV_SET:
        for (int i = 0; i < v->n; i++)
            sx_pin_deep(tr, v->items[i], why, depth + 1);
        break;
    default:
        break;
    }
    if (v->self && v->kind != TV_CELL)
        sx_pin_deep(tr, v->self, why, depth + 1);
    else if (v->kind == TV_CELL)
        sx_pin_deep(tr, v->self, why, depth + 1);
    if (v->store)
        sx_pin_deep(tr, v->store, why, depth + 1);
}

void cdy_sx_pin_deep(tracer *tr, tvar *v, const char *why)
{
    if (tr->t->nsx)
        sx_pin_deep(tr, v, why, 0);
}

void cdy_sx_pin_all(tracer *tr, const char *why)
{
    cdy_trace *t = tr->t;
    if (t->sx_pinning)
        return;
    t->sx_pinning = 1;
    for (int n = 1; n <= t->nsx; n++)
        cdy_sx_pin_node(tr, n, why);
    t->sx_pinning = 0;
}

void cdy_sx_pin_frame(tracer *tr, const char *why)
{
    for (; tr && tr->t->nsx; tr = tr->ninstr ? NULL : tr->parent) {
        int n = tr->sp > tr->sp_instr ? tr->sp : tr->sp_instr;
        for (int i = 0; tr->stack && i < n && i < tr->stack_cap; i++)
            sx_pin_deep(tr, tr->stack[i], why, 0);
    }
}

int cdy_sx_of(const tvar *a)
{
    return a && a->kind == TV_CONST ? a->sx : 0;
}

/* 1 if v holds a symbolic int (deep, bounded: past the bound, 1). */
static int sx_holds(const tvar *v, int depth)
{
    if (!v)
        return 0;
    if (depth > 12)
        return 1;
    if (v->kind == TV_CONST)
        return v->sx || v->nsxi;
    switch (v->kind) {
    case TV_TUPLE: case TV_LIST: case TV_DICT: case TV_ITER: case TV_FUNC: case TV_PARTIAL:
    case TV_SET:
        for (int i = 0; i < v->n; i++)
            if (sx_holds(v->items[i], depth + 1))
                return 1;
        break;
    default:
        break;
    }
    return (v->self && sx_holds(v->self, depth + 1)) || (v->store && sx_holds(v->store, depth + 1));
}

/* ---- the hook around each semantic op ---------------------------------------- */

/* How many stack items semantic op sop (with arg) consumes for its value, or
 * -1 for one that only moves values (nothing pinned) or that the post hook
 * handles; -2: unknown (the whole stack). */
static int sx_consumes(tracer *tr, int sop, int arg)
{
    switch (sop) {
    case CDY_SOP_NOP: case CDY_SOP_MAKE_CELL: case CDY_SOP_COPY_FREE_VARS:
    case CDY_SOP_POP_TOP: case CDY_SOP_PUSH_NULL: case CDY_SOP_COPY: case CDY_SOP_SWAP:
    case CDY_SOP_LOAD_FAST: case CDY_SOP_LOAD_FAST_AND_CLEAR: case CDY_SOP_STORE_FAST:
    case CDY_SOP_DELETE_FAST: case CDY_SOP_LOAD_CONST: case CDY_SOP_LOAD_GLOBAL:
    case CDY_SOP_LOAD_DEREF: case CDY_SOP_LOAD_CLOSURE: case CDY_SOP_KW_NAMES:
    case CDY_SOP_BUILD_TUPLE: case CDY_SOP_BUILD_LIST: case CDY_SOP_LIST_TO_TUPLE:
    case CDY_SOP_LIST_APPEND: case CDY_SOP_LIST_EXTEND: case CDY_SOP_UNPACK_SEQUENCE:
    case CDY_SOP_JUMP: case CDY_SOP_BINARY_OP: case CDY_SOP_BINARY_SUBSCR:
    case CDY_SOP_BUILD_SLICE:
    case CDY_SOP_CALL: case CDY_SOP_CALL_FUNCTION_EX: case CDY_SOP_LOAD_ASSERTION_ERROR:
    case CDY_SOP_COMPARE_OP: case CDY_SOP_DICT_MERGE: case CDY_SOP_DICT_UPDATE:
    case CDY_SOP_UNARY_NEGATIVE: case CDY_SOP_BUILD_MAP: case CDY_SOP_BUILD_CONST_KEY_MAP:
        return -1;   /* a dict display or merge moves its values (f(**kwargs)): read later, they pin */
    case CDY_SOP_RETURN_VALUE:
        return tr->parent ? -1 : 1;   /* an inlined frame's value goes on in its caller */
    case CDY_SOP_LOAD_ATTR: case CDY_SOP_LOAD_METHOD: case CDY_SOP_TO_BOOL:
    case CDY_SOP_UNARY_NOT: case CDY_SOP_UNARY_INVERT:
    case CDY_SOP_UNARY_POSITIVE: case CDY_SOP_GET_ITER: case CDY_SOP_FOR_ITER:
    case CDY_SOP_POP_JUMP_IF_FALSE: case CDY_SOP_POP_JUMP_IF_TRUE:
    case CDY_SOP_POP_JUMP_IF_NONE: case CDY_SOP_POP_JUMP_IF_NOT_NONE:
    case CDY_SOP_JUMP_IF_FALSE_OR_POP: case CDY_SOP_JUMP_IF_TRUE_OR_POP:
    case CDY_SOP_YIELD_VALUE: case CDY_SOP_STORE_DEREF: case CDY_SOP_KW_NAMES_TOS:
    case CDY_SOP_SET_ADD:
    case CDY_SOP_SET_UPDATE: case CDY_SOP_IMPORT_FROM: case CDY_SOP_CONVERT_VALUE:
    case CDY_SOP_GET_YIELD_FROM_ITER:
        return 1;
    case CDY_SOP_IS_OP: case CDY_SOP_CONTAINS_OP: case CDY_SOP_STORE_ATTR: case CDY_SOP_DELETE_SUBSCR: case CDY_SOP_MAP_ADD:
        return 2;
    case CDY_SOP_STORE_SUBSCR:
        return 3;
    case CDY_SOP_BUILD_STRING: case CDY_SOP_BUILD_SET:
        return arg;
    case CDY_SOP_FORMAT_VALUE:
        return (arg & 4) ? 2 : 1;
    default:
        return -2;
    }
}

/* Item k from the top (1 = tos) of tr's stack, or NULL. */
static tvar *sx_peek(tracer *tr, int k)
{
    return k >= 1 && k <= tr->sp ? tr->stack[tr->sp - k] : NULL;
}

/* Record the call's arguments (top n items, the call pair included) that carry
 * symbolic ints as pending: pinned after the call unless taken or passed on. */
static void sx_pend(tracer *tr, int n, tvar *spread, tvar *kw, cdy_sx_ctx *ctx)
{
    ctx->pend = tr->sx_pend;
    ctx->npend = tr->nsx_pend;
    kw = kw && kw->kind == TV_DICT ? kw : NULL;
    int cap = n + (spread && spread->kind == TV_TUPLE ? spread->n : 0) + (kw ? kw->n : 0) + 1;
    tvar **p = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)cap);
    int np = 0;
    for (int k = 1; p && k <= n; k++) {
        tvar *v = sx_peek(tr, k);
        if ((v == spread && v->kind == TV_TUPLE) || v == kw) {
            /* f(*args, **kwargs): their items are the arguments */
            for (int i = 0; i < v->n; i++)
                if (sx_holds(v->items[i], 0))
                    p[np++] = v->items[i];
        }
        else if (sx_holds(v, 0))
            p[np++] = v;
    }
    if (!p) {
        for (int k = 1; k <= n; k++)
            cdy_sx_pin_deep(tr, sx_peek(tr, k), "the code read the size and passed it to a call");
        np = 0;
    }
    tr->sx_pend = p;
    tr->nsx_pend = np;
}

/* 1 if sop is `k in d` for a trace-made dict d (or its keys()): it reads
 * d's keys (a size stored as a key pinned there), never its values. */
static int sx_dict_lookup(tracer *tr, int sop)
{
    const tvar *c = sop == CDY_SOP_CONTAINS_OP ? sx_peek(tr, 1) : NULL;
    if (c && c->kind == TV_VIEW && c->pos == 0)
        c = c->self;
    return c && c->kind == TV_DICT;
}

/* 1 if sop is `obj.name = n` for an int n with a node and an object of the
 * caller (a source): the store is replayed, and its replay computes n from
 * the int symbols it reads or pins it then (mutate.c, cdy_sx_store_ret). */
static int sx_int(const tvar *v);
static int sx_store_kept(tracer *tr, int sop)
{
    const tvar *o = sop == CDY_SOP_STORE_ATTR ? sx_peek(tr, 1) : NULL, *n = sx_peek(tr, 2);
    return o && o->kind == TV_OBJ && o->src && sx_int(n) && n->sx && !n->nsxi;
}

void cdy_sx_pre(tracer *tr, int sop, int arg, cdy_sx_ctx *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->sop = sop;
    ctx->arg = arg;
    if (!tr->t->nsx)
        return;
    int n = sx_consumes(tr, sop, arg);
    const char *why = sop >= 0 && sop < CDY_SOP__COUNT ? sx_why[sop]
                                                         : "the code read the size and used it";
    if (n == -2)
        n = tr->sp;
    for (int k = sx_dict_lookup(tr, sop) ? 2 : 1; k <= n; k++)
        if (k != 2 || !sx_store_kept(tr, sop))
            cdy_sx_pin_deep(tr, sx_peek(tr, k), why);
    if (n >= 0)
        return;
    switch (sop) {
    case CDY_SOP_BINARY_OP: case CDY_SOP_BINARY_SUBSCR: case CDY_SOP_COMPARE_OP:
        ctx->n = 2;
        ctx->in[0] = sx_peek(tr, 2);
        ctx->in[1] = sx_peek(tr, 1);
        break;
    case CDY_SOP_BUILD_SLICE:
        ctx->n = arg == 2 || arg == 3 ? arg : 0;
        for (int i = 0; i < ctx->n; i++)
            ctx->in[i] = sx_peek(tr, arg - i);
        break;
    case CDY_SOP_BUILD_TUPLE:
        ctx->n = arg <= CDY_MAX_NDIM ? arg : 0;
        for (int i = 0; i < ctx->n; i++)
            ctx->in[i] = sx_peek(tr, arg - i);
        if (arg > CDY_MAX_NDIM)
            for (int k = 1; k <= arg; k++)   /* folded to a constant: no room for nodes */
                cdy_sx_pin_deep(tr, sx_peek(tr, k), why);
        break;
    case CDY_SOP_UNPACK_SEQUENCE: case CDY_SOP_LIST_EXTEND: case CDY_SOP_UNARY_NEGATIVE:
        ctx->n = 1;
        ctx->in[0] = sx_peek(tr, 1);
        break;
    case CDY_SOP_BUILD_MAP:   /* a key is hashed by its value: pinned (the values move) */
        for (int k = 2; k <= 2 * arg; k += 2)
            cdy_sx_pin_deep(tr, sx_peek(tr, k), why);
        break;
    case CDY_SOP_CALL:
        sx_pend(tr, arg + 2, NULL, NULL, ctx);
        break;
    case CDY_SOP_CALL_FUNCTION_EX:
        sx_pend(tr, (arg & 1) ? 4 : 3, sx_peek(tr, (arg & 1) ? 2 : 1),
                (arg & 1) ? sx_peek(tr, 1) : NULL, ctx);
        break;
    default:
        break;
    }
}

/* 1 if v is an int constant (not a bool). */
static int sx_int(const tvar *v)
{
    return v && v->kind == TV_CONST && PyLong_CheckExact(v->obj);
}

/* The node of int constant v: its own, or a new constant node. */
static int sx_operand(tracer *tr, const tvar *v)
{
    if (v->sx)
        return v->sx;
    long long c = PyLong_AsLongLong(v->obj);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return cdy_sx_node(tr, 'k', 0, 0, -1, -1, c);
}

/* The node of -n (n a node), or 0. */
static int sx_neg(tracer *tr, int n)
{
    int m = n ? cdy_sx_node(tr, 'k', 0, 0, -1, -1, -1) : 0;
    return m ? cdy_sx_node(tr, '*', n, m, -1, -1, 0) : 0;
}

/* The node of a <op> b for BINARY_OP code op over int constants, or 0. */
static int sx_arith(tracer *tr, int op, const tvar *a, const tvar *b)
{
    if (op >= CDY_NB_INPLACE_FIRST)
        op -= CDY_NB_INPLACE_FIRST;
    int x = sx_operand(tr, a), y = sx_operand(tr, b);
    if (!x || !y)
        return 0;
    switch (op) {
    case 0:    /* NB_ADD */
        return cdy_sx_node(tr, '+', x, y, -1, -1, 0);
    case 5:    /* NB_MULTIPLY */
        return cdy_sx_node(tr, '*', x, y, -1, -1, 0);
    case 10: { /* NB_SUBTRACT */
        int ny = sx_neg(tr, y);
        return ny ? cdy_sx_node(tr, '+', x, ny, -1, -1, 0) : 0;
    }
    case 2: {  /* NB_FLOOR_DIVIDE by a positive constant, or by a size (exact: 'q') */
        if (b->sx)
            return cdy_sx_node(tr, 'q', x, y, -1, -1, 0);
        long long c = PyLong_AsLongLong(b->obj);
        PyErr_Clear();
        return c > 0 ? cdy_sx_node(tr, '/', x, 0, -1, -1, c) : 0;
    }
    default:
        return 0;
    }
}

/* The items' nodes of constant tuple-like v into sxi (n items); 0, or -1. */
static int sx_items(const tvar *v, int *sxi, int n)
{
    if (!v || v->kind != TV_CONST || !PyTuple_Check(v->obj) || PyTuple_GET_SIZE(v->obj) != n)
        return -1;
    for (int i = 0; i < n; i++)
        sxi[i] = i < v->nsxi ? v->sxi[i] : 0;
    return 0;
}

/* `t + n` / `t - n` / `t * n` (op NB_ADD / NB_SUBTRACT / NB_MULTIPLY) of a
 * tensor t and a symbolic int n (a size the code read) that made r: when r is
 * a pointwise node with one int scalar arg, n's value (or minus it, + and -
 * only), that scalar is n's expression
 * (a runtime value of the kernels: sympins.c); 1, or 0 (nothing recorded). */
static int sx_tensor_offset(tracer *tr, int op, const tvar *t, const tvar *n, const tvar *r)
{
    if ((op != 0 && op != 10 && op != 5) || !t || t->kind != TV_TENSOR || !sx_int(n) || !n->sx || !r ||
        r->kind != TV_TENSOR)
        return 0;
    const cdy_graph *g = &tr->t->graph;
    const cdy_value *val = &g->values[r->value];
    long long k = PyLong_AsLongLong(n->obj);
    if (PyErr_Occurred() || val->kind != CDY_VAL_NODE || !cdy_op_pointwise(val->op)) {
        PyErr_Clear();
        return 0;
    }
    int sc = -1, nsc = 0;
    for (int a = 0; a < val->nargs; a++)
        if (g->values[val->args[a]].kind == CDY_VAL_SCALAR) {
            sc = val->args[a];
            nsc++;
        }
    /* n == 0: the scalar's sign tells nothing, so only an add node's (t + n) */
    if (nsc != 1 || g->values[sc].meta.dtype != CDY_DT_INT64 ||
        (k == 0 && !(op == 0 && !strcmp(cdy_op_table[val->op].name, "add"))))
        return 0;
    int e = g->values[sc].i == k ? n->sx : g->values[sc].i == -k && op != 5 ? sx_neg(tr, n->sx) : 0;
    return e && !cdy_tr_sym_scalar(tr, sc, e);
}

/* BINARY_OP's result r over ctx's operands. */
static void sx_post_binary(tracer *tr, cdy_sx_ctx *ctx, tvar *r)
{
    tvar *a = ctx->in[0], *b = ctx->in[1];
    int ha = sx_holds(a, 0), hb = sx_holds(b, 0);
    if (!ha && !hb)
        return;
    int op = ctx->arg >= CDY_NB_INPLACE_FIRST ? ctx->arg - CDY_NB_INPLACE_FIRST : ctx->arg;
    if (sx_tensor_offset(tr, op, a, b, r) || ((op == 0 || op == 5) && sx_tensor_offset(tr, op, b, a, r)))
        return;
    if (sx_int(a) && sx_int(b) && sx_int(r)) {
        int n = sx_arith(tr, ctx->arg, a, b);
        if (n) {
            tr->stack[tr->sp - 1] = cdy_sx_tag(tr, r, n);
            return;
        }
    }
    if (op == 0 && a && b && r && a->kind == TV_CONST && b->kind == TV_CONST &&
        r->kind == TV_CONST && PyTuple_Check(a->obj) && PyTuple_Check(b->obj) &&
        PyTuple_Check(r->obj)) {   /* size tuple + tuple */
        int na = (int)PyTuple_GET_SIZE(a->obj), nb = (int)PyTuple_GET_SIZE(b->obj);
        if (na + nb <= 2 * CDY_MAX_NDIM && PyTuple_GET_SIZE(r->obj) == na + nb) {
            int sxi[2 * CDY_MAX_NDIM];
            if (!sx_items(a, sxi, na) && !sx_items(b, sxi + na, nb)) {
                tr->stack[tr->sp - 1] = sx_tag_items(tr, r, sxi, na + nb);
                return;
            }
        }
    }
    cdy_sx_pin_deep(tr, a, sx_why[CDY_SOP_BINARY_OP]);
    cdy_sx_pin_deep(tr, b, sx_why[CDY_SOP_BINARY_OP]);
}

/* Room for one more comparison in t; 0, or -1. */
static int sx_cmp_room(cdy_trace *t)
{
    if (t->ncmps < t->cap_cmps)
        return 0;
    int cap = t->cap_cmps ? 2 * t->cap_cmps : 16;
    if (cap > 1024)
        return -1;
    cdy_sym_cmp *p = cdy_arena_alloc(&t->arena, (size_t)cap * sizeof(*p));
    if (!p)
        return -1;
    if (t->ncmps)
        memcpy(p, t->cmps, (size_t)t->ncmps * sizeof(*p));
    t->cmps = p;
    t->cap_cmps = cap;
    return 0;
}

/* Record comparison a <op> b, truth at the example, with why (static text,
 * or the trace's arena); 0, or -1 (a node 0, or no room). */
static int sx_cmp_push(tracer *tr, int a, int b, int op, int truth, const char *why)
{
    if (!a || !b || sx_cmp_room(tr->t))
        return -1;
    tr->t->cmps[tr->t->ncmps++] = (cdy_sym_cmp){a, b, (char)op, (char)truth, why};
    return 0;
}

int cdy_sx_cmp(tracer *tr, int a, int b, int op, int truth, const char *why)
{
    return sx_cmp_push(tr, a, b, op, truth, cdy_sx_where(tr, why));
}

int cdy_sx_arange_len(tracer *tr, const tvar *start, const tvar *end)
{
    if (!sx_int(start) || !sx_int(end))
        return 0;
    int a = sx_operand(tr, start), b = sx_operand(tr, end);
    int na = a && b ? sx_neg(tr, a) : 0;
    int n = na ? cdy_sx_node(tr, '+', b, na, -1, -1, 0) : 0;
    return n && !sx_cmp_push(tr, b, a, Py_GE, 1, "arange's end before its start") ? n : 0;
}

tvar *cdy_sx_minmax(tracer *tr, int is_max, tvar *a, tvar *b)
{
    if (!sx_int(a) || !sx_int(b) || (!a->sx && !b->sx))
        return NULL;
    int x = sx_operand(tr, a), y = x ? sx_operand(tr, b) : 0;
    int op = is_max ? Py_GT : Py_LT;   /* Python keeps a unless b is strictly better */
    int better = PyObject_RichCompareBool(b->obj, a->obj, op);
    PyErr_Clear();
    /* b picked: guarded b >= a (b <= a for min), whose equal case gives the same int,
     * so the entry covers it (a kv offset max(n - w, 0) at n = w) */
    int gop = better > 0 ? (is_max ? Py_GE : Py_LE) : op;
    if (!y || better < 0 || sx_cmp_push(tr, y, x, gop, better, cdy_sx_where(tr, is_max ?
                                        "max() of ints" : "min() of ints")))
        return NULL;
    cdy_sx_taken(tr, a);
    cdy_sx_taken(tr, b);
    return better ? b : a;
}

/* COMPARE_OP's result r: two ints (one or both symbolic) compared to a bool
 * is recorded (sym/infer.c decides it by range or guards it); anything else
 * pins what the operands read. */
static void sx_post_compare(tracer *tr, cdy_sx_ctx *ctx, tvar *r)
{
    tvar *a = ctx->in[0], *b = ctx->in[1];
    const char *why = sx_why[CDY_SOP_COMPARE_OP];
    if (!sx_holds(a, 0) && !sx_holds(b, 0))
        return;
    int x = sx_int(a) && sx_int(b) ? sx_operand(tr, a) : 0;
    int y = x ? sx_operand(tr, b) : 0;
    if (x && y && ctx->arg >= 0 && ctx->arg <= 5 && r && r->kind == TV_CONST &&
        PyBool_Check(r->obj) && !sx_cmp_push(tr, x, y, ctx->arg, r->obj == Py_True, why))
        return;
    cdy_sx_pin_deep(tr, a, why);
    cdy_sx_pin_deep(tr, b, why);
}

/* UNARY_NEGATIVE's result r of a: -a for a symbolic int, else what a reads pins. */
static void sx_post_negative(tracer *tr, tvar *a, tvar *r)
{
    if (!sx_holds(a, 0))
        return;
    int n = sx_int(a) && sx_int(r) ? sx_neg(tr, a->sx) : 0;
    if (n)
        tr->stack[tr->sp - 1] = cdy_sx_tag(tr, r, n);
    else
        cdy_sx_pin_deep(tr, a, sx_why[CDY_SOP_UNARY_NEGATIVE]);
}

/* BINARY_SUBSCR's result r: an item or a slice of a size tuple. */
static void sx_post_subscr(tracer *tr, cdy_sx_ctx *ctx, tvar *r)
{
    tvar *c = ctx->in[0], *k = ctx->in[1];
    const char *why = sx_why[CDY_SOP_BINARY_SUBSCR];
    if (sx_holds(k, 0) && k != tr->sx_index_taken)
        cdy_sx_pin_deep(tr, k, why);
    tr->sx_index_taken = NULL;
    if (!c || c->kind != TV_CONST || !c->nsxi)
        return;   /* other containers: the item is moved, not computed */
    int n = c->nsxi;
    if (k && k->kind == TV_CONST && PyLong_CheckExact(k->obj) && sx_int(r)) {
        long i = PyLong_AsLong(k->obj);
        PyErr_Clear();
        i += i < 0 ? n : 0;
        if (i >= 0 && i < n) {
            tr->stack[tr->sp - 1] = cdy_sx_tag(tr, r, c->sxi[i]);
            return;
        }
    }
    if (k && k->kind == TV_CONST && PySlice_Check(k->obj) && r && r->kind == TV_CONST &&
        PyTuple_Check(r->obj)) {
        Py_ssize_t start, stop, step, len;
        if (PySlice_GetIndicesEx(k->obj, n, &start, &stop, &step, &len) == 0 &&
            len == PyTuple_GET_SIZE(r->obj) && len <= CDY_MAX_NDIM) {
            int sxi[CDY_MAX_NDIM + 1];
            for (Py_ssize_t i = 0; i < len; i++)
                sxi[i] = c->sxi[start + i * step];
            tr->stack[tr->sp - 1] = sx_tag_items(tr, r, sxi, (int)len);
            return;
        }
        PyErr_Clear();
    }
    cdy_sx_pin_deep(tr, c, why);
}

/* UNPACK_SEQUENCE of a size tuple: its items (first on top) carry its nodes. */
static void sx_post_unpack(tracer *tr, cdy_sx_ctx *ctx)
{
    tvar *c = ctx->in[0];
    if (!c || c->kind != TV_CONST || !c->nsxi)
        return;
    if (ctx->arg != c->nsxi || tr->sp < ctx->arg) {
        cdy_sx_pin_deep(tr, c, sx_why[CDY_SOP_UNPACK_SEQUENCE]);
        return;
    }
    for (int i = 0; i < c->nsxi; i++) {
        tvar **slot = &tr->stack[tr->sp - 1 - i];
        *slot = cdy_sx_tag(tr, *slot, c->sxi[i]);
    }
}

/* LIST_EXTEND of the list arg items down with a size tuple: its last items. */
static void sx_post_extend(tracer *tr, cdy_sx_ctx *ctx)
{
    tvar *c = ctx->in[0], *l = sx_peek(tr, ctx->arg);
    if (!c || c->kind != TV_CONST || !c->nsxi)
        return;
    if (!l || l->kind != TV_LIST || l->n < c->nsxi) {
        cdy_sx_pin_deep(tr, c, sx_why[CDY_SOP_LIST_EXTEND]);
        return;
    }
    for (int i = 0; i < c->nsxi; i++) {
        tvar **slot = &l->items[l->n - c->nsxi + i];
        *slot = cdy_sx_tag(tr, *slot, c->sxi[i]);
    }
}

/* BUILD_SLICE's result r (a constant slice): int bounds carrying symbolic
 * ints make it carry an 'S' node (a: start's node, b: stop's, 0 for a
 * constant or None) for a tensor index's rule (cdy_tr_sym_getitem); a
 * symbolic step, or bounds of another kind, pin what they read. */
static void sx_post_slice(tracer *tr, cdy_sx_ctx *ctx, tvar *r)
{
    const char *why = sx_why[CDY_SOP_BUILD_SLICE];
    if (!sx_holds(ctx->in[0], 0) && !sx_holds(ctx->in[1], 0) &&
        (ctx->n < 3 || !sx_holds(ctx->in[2], 0)))
        return;
    int ok = r && r->kind == TV_CONST && PySlice_Check(r->obj) &&
             (ctx->n < 3 || !sx_holds(ctx->in[2], 0));
    for (int i = 0; ok && i < 2; i++)
        ok = !sx_holds(ctx->in[i], 0) || (sx_int(ctx->in[i]) && ctx->in[i]->sx);
    int node = ok ? cdy_sx_node(tr, 'S', cdy_sx_of(ctx->in[0]), cdy_sx_of(ctx->in[1]), -1, -1, 0)
                  : 0;
    tvar *v = node ? sx_copy(tr, r) : NULL;
    if (!v) {
        for (int i = 0; i < ctx->n; i++)
            cdy_sx_pin_deep(tr, ctx->in[i], why);
        return;
    }
    v->sx = node;
    v->sxi = NULL;
    v->nsxi = 0;
    tr->stack[tr->sp - 1] = v;
}

/* BUILD_TUPLE folded to a constant: its items' nodes go with it. */
static void sx_post_build(tracer *tr, cdy_sx_ctx *ctx)
{
    tvar *r = sx_peek(tr, 1);
    int sxi[CDY_MAX_NDIM] = {0};
    if (!r || r->kind != TV_CONST || !ctx->n)
        return;
    for (int i = 0; i < ctx->n; i++) {
        tvar *v = ctx->in[i];
        if (v && v->kind == TV_CONST && v->nsxi)   /* a size tuple inside a tuple */
            cdy_sx_pin_deep(tr, v, sx_why[CDY_SOP_BUILD_TUPLE]);
        sxi[i] = v && v->kind == TV_CONST ? v->sx : 0;
    }
    tr->stack[tr->sp - 1] = sx_tag_items(tr, r, sxi, ctx->n);
}

void cdy_sx_post(tracer *tr, cdy_sx_ctx *ctx, int r)
{
    if (ctx->sop == CDY_SOP_CALL || ctx->sop == CDY_SOP_CALL_FUNCTION_EX) {
        for (int i = 0; i < tr->nsx_pend; i++)
            cdy_sx_pin_deep(tr, tr->sx_pend[i], "the code read the size and passed it to a call");
        tr->sx_pend = ctx->pend;
        tr->nsx_pend = ctx->npend;
        return;
    }
    if (r != 0 || !tr->t->nsx || !ctx->n || cdy_tr_stopped(tr))
        return;
    switch (ctx->sop) {
    case CDY_SOP_BINARY_OP:
        sx_post_binary(tr, ctx, sx_peek(tr, 1));
        break;
    case CDY_SOP_BINARY_SUBSCR:
        sx_post_subscr(tr, ctx, sx_peek(tr, 1));
        break;
    case CDY_SOP_COMPARE_OP:
        sx_post_compare(tr, ctx, sx_peek(tr, 1));
        break;
    case CDY_SOP_UNARY_NEGATIVE:
        sx_post_negative(tr, ctx->in[0], sx_peek(tr, 1));
        break;
    case CDY_SOP_UNPACK_SEQUENCE:
        sx_post_unpack(tr, ctx);
        break;
    case CDY_SOP_LIST_EXTEND:
        sx_post_extend(tr, ctx);
        break;
    case CDY_SOP_BUILD_TUPLE:
        sx_post_build(tr, ctx);
        break;
    case CDY_SOP_BUILD_SLICE:
        sx_post_slice(tr, ctx, sx_peek(tr, 1));
        break;
    default:
        break;
    }
}

/* Drop pending entry i of tr. */
static void sx_unpend(tracer *tr, int i)
{
    tr->sx_pend[i] = tr->sx_pend[--tr->nsx_pend];
}

void cdy_sx_passed(tracer *tr, tvar **args, int nargs)
{
    for (int i = 0; i < tr->nsx_pend; i++)
        for (int j = 0; j < nargs; j++)
            if (args[j] == tr->sx_pend[i]) {
                sx_unpend(tr, i--);
                break;
            }
}

void cdy_sx_taken(tracer *tr, const tvar *v)
{
    for (int i = 0; i < tr->nsx_pend; i++)
        if (tr->sx_pend[i] == v)
            sx_unpend(tr, i--);
}

tvar *cdy_sx_query(tracer *tr, const char *what, tvar **args, int nargs, PyObject *out)
{
    const char *dot = strrchr(what, '.');
    const char *name = dot ? dot + 1 : what;
    if (nargs < 1 || args[0]->kind != TV_TENSOR)
        return NULL;
    int nd = tr->t->graph.values[args[0]->value].meta.ndim, sx = 0;
    if (!strcmp(name, "size") && nargs == 1 && PyTuple_Check(out)) {
        tvar *c = cdy_tv_const(tr, Py_NewRef(out));
        return c ? cdy_sx_tag_shape(tr, c, args[0]) : NULL;
    }
    if (!PyLong_CheckExact(out))
        return NULL;
    if (!strcmp(name, "__len__") && nargs == 1 && nd > 0)
        sx = cdy_sx_dim(tr, args[0], 0);
    else if (!strcmp(name, "numel") && nargs == 1)
        sx = cdy_sx_numel(tr, args[0]);
    else if (!strcmp(name, "size") && nargs == 2 && args[1]->kind == TV_CONST &&
             PyLong_CheckExact(args[1]->obj) && !args[1]->sx) {
        long d = PyLong_AsLong(args[1]->obj);
        PyErr_Clear();
        d += d < 0 ? nd : 0;
        sx = d >= 0 && d < nd ? cdy_sx_dim(tr, args[0], (int)d) : 0;
    }
    if (!sx)
        return NULL;
    tvar *c = cdy_tv_const(tr, Py_NewRef(out));
    return c ? cdy_sx_tag(tr, c, sx) : NULL;
}
