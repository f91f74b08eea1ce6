/* trace/sympins.c - sizes the trace turned into Python numbers (pins).
 *
 * A size the traced code reads (x.shape, x.size(), numel, len, strides,
 * is_contiguous, any call whose result is a constant computed from tensor
 * arguments) or that a builder without a symbolic audit bakes into the nodes
 * it makes is a number in the trace: where sizes are symbolic (sym/infer.c)
 * the symbols of such a size specialize.  The tracer records each one here;
 * the record costs an entry per read, and nothing else reads it when no dim
 * is dynamic. */
#include "trace/trace.h"
#include "sym/sym.h"

#include <string.h>

void cdy_tr_pin(tracer *tr, int value, unsigned dims, const char *why)
{
    cdy_trace *t = tr->t;
    if (value < 0 || !dims)
        return;
    if (t->npins && t->pins[t->npins - 1].value == value && t->pins[t->npins - 1].dims == dims)
        return;
    if (t->npins == t->cap_pins) {
        int cap = t->cap_pins ? 2 * t->cap_pins : 16;
        cdy_sym_pin *p = cdy_arena_alloc(&t->arena, (size_t)cap * sizeof(*p));
        if (!p) {
            cdy_tr_stop(tr, OUT_OF_MEMORY);
            return;
        }
        if (t->npins)
            memcpy(p, t->pins, (size_t)t->npins * sizeof(*p));
        t->pins = p;
        t->cap_pins = cap;
    }
    t->pins[t->npins++] = (cdy_sym_pin){value, dims, why};
}

void cdy_tr_pin_tensors(tracer *tr, tvar **args, int n, const char *why)
{
    for (int i = 0; i < n; i++)
        if (args[i] && args[i]->kind == TV_TENSOR)
            cdy_tr_pin(tr, args[i]->value, ~0u, why);
        else if (args[i] && (args[i]->kind == TV_TUPLE || args[i]->kind == TV_LIST))
            cdy_tr_pin_tensors(tr, args[i]->items, args[i]->n, why);
}

void cdy_tr_pin_query(tracer *tr, const char *what, tvar **args, int nargs)
{
    static const char *const free_[] = {"dim", "ndimension", "is_floating_point", "is_complex",
                                        "element_size", "get_device", "is_signed",
                                        "_has_torch_function", "has_torch_function",
                                        "_has_torch_function_unary",
                                        "has_torch_function_unary",
                                        "_has_torch_function_variadic",
                                        "has_torch_function_variadic", NULL};
    const char *dot = strrchr(what, '.');
    const char *name = dot ? dot + 1 : what;
    for (int i = 0; free_[i]; i++)
        if (!strcmp(name, free_[i]))
            return;
    if (nargs >= 1 && args[0]->kind == TV_TENSOR) {
        int nd = tr->t->graph.values[args[0]->value].meta.ndim;
        long d = -1;
        if (!strcmp(name, "__len__") && nargs == 1 && nd > 0)
            d = 0;
        else if (!strcmp(name, "size") && nargs == 2 && args[1]->kind == TV_CONST &&
                 PyLong_CheckExact(args[1]->obj)) {
            d = PyLong_AsLong(args[1]->obj);
            PyErr_Clear();
            d += d < 0 ? nd : 0;
        }
        if (d >= 0 && d < nd) {
            cdy_tr_pin(tr, args[0]->value, 1u << d, "the code read the size");
            return;
        }
    }
    cdy_tr_pin_tensors(tr, args, nargs, "a call's constant result read the sizes");
}

/* Room for one more view map in t; 0, or -1 (stopped). */
static int sp_view_room(tracer *tr)
{
    cdy_trace *t = tr->t;
    if (t->nsymviews < t->cap_symviews)
        return 0;
    int cap = t->cap_symviews ? 2 * t->cap_symviews : 16;
    cdy_sym_view *p = cdy_arena_alloc(&t->arena, (size_t)cap * sizeof(*p));
    if (!p)
        return cdy_tr_stop(tr, OUT_OF_MEMORY), -1;
    if (t->nsymviews)
        memcpy(p, t->symviews, (size_t)t->nsymviews * sizeof(*p));
    t->symviews = p;
    t->cap_symviews = cap;
    return 0;
}

/* 1 if name is in the NULL-terminated list. */
static int sp_in(const char *name, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(name, list[i]))
            return 1;
    return 0;
}

/* w's map for a permutation-like view of src into m: each dim of size >= 2
 * of m is the one dim of src with its size and stride, each of src's is
 * used once, size-1 dims are new; 0, or -1 (no such map). */
static int sp_perm_map(const cdy_meta *src, const cdy_meta *m, cdy_sym_view *w)
{
    int used[CDY_MAX_NDIM] = {0}, nused = 0, nbig = 0;
    for (int e = 0; e < src->ndim; e++)
        nbig += src->sizes[e] != 1;
    for (int d = 0; d < m->ndim; d++) {
        w->map[d] = -1;
        if (m->sizes[d] == 1)
            continue;
        for (int e = 0; e < src->ndim; e++)
            if (src->sizes[e] == m->sizes[d] && src->strides[e] == m->strides[d]) {
                if (w->map[d] >= 0 || used[e])
                    return -1;    /* ambiguous: two dims alike */
                w->map[d] = (signed char)e;
            }
        if (w->map[d] < 0)
            return -1;
        used[w->map[d]] = 1;
        nused++;
    }
    return nused == nbig ? 0 : -1;
}

/* The int argument named kw, or positional pos (call's args after self), or
 * dflt; 0, or -1 when it is there and not a constant int. */
static int sp_int_arg(const cdy_build_call *call, int pos, const char *kw, long *v, long dflt)
{
    int npos = call->nargs - (call->kwnames ? (int)PyTuple_GET_SIZE(call->kwnames) : 0);
    tvar *a = pos < npos ? call->args[pos] : NULL;
    for (int k = npos; !a && k < call->nargs; k++)
        if (!PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(call->kwnames, k - npos), kw))
            a = call->args[k];
    *v = dflt;
    if (!a)
        return 0;
    if (a->kind != TV_CONST || !PyLong_CheckExact(a->obj))
        return -1;
    *v = PyLong_AsLong(a->obj);
    return PyErr_Occurred() ? (PyErr_Clear(), -1) : 0;
}

/* The symbolic ints of a's int items (as cdy_int_items reads them) into
 * sx[*n..]; 0, or -1 (more than cap). */
static int sp_sx_items(const tvar *a, int *sx, int *n, int cap)
{
    if (a->kind == TV_CONST && PyLong_Check(a->obj)) {
        if (*n == cap)
            return -1;
        sx[(*n)++] = a->sx;
        return 0;
    }
    if (a->kind == TV_CONST && (PyTuple_Check(a->obj) || PyList_Check(a->obj))) {
        Py_ssize_t len = PySequence_Size(a->obj);
        for (Py_ssize_t i = 0; i < len; i++) {
            if (*n == cap)
                return -1;
            sx[(*n)++] = i < a->nsxi ? a->sxi[i] : 0;
        }
        return 0;
    }
    if (a->kind == TV_TUPLE || a->kind == TV_LIST) {
        for (int i = 0; i < a->n; i++)
            if (sp_sx_items(a->items[i], sx, n, cap))
                return -1;
        return 0;
    }
    return -1;
}

/* The size arguments of a view-like call (after self: varargs or one
 * sequence) as ints into dims and their symbolic ints into sx, exactly ndim
 * of them; 0, or -1. */
static int sp_size_args(const cdy_build_call *call, int ndim, int *dims, int *sx)
{
    int n = 0, ns = 0;
    for (int i = 1; i < call->nargs; i++)
        if (cdy_int_items(call->args[i], dims, &n, CDY_MAX_NDIM) ||
            sp_sx_items(call->args[i], sx, &ns, CDY_MAX_NDIM))
            return -1;
    return n == ndim && ns == n ? 0 : -1;
}

/* w for view / reshape (sizes as varargs or one sequence, at most one -1)
 * or flatten(start_dim, end_dim); 0, or -1. */
static int sp_shape_map(const cdy_build_call *call, const char *name, const cdy_meta *src,
                        const cdy_meta *m, cdy_sym_view *w)
{
    if (!strcmp(name, "flatten")) {
        long a, b;
        if (src->ndim < 1 || sp_int_arg(call, 1, "start_dim", &a, 0) ||
            sp_int_arg(call, 2, "end_dim", &b, -1))
            return -1;
        a += a < 0 ? src->ndim : 0;
        b += b < 0 ? src->ndim : 0;
        w->kind = 'f';
        w->a = (int)a;
        w->b = (int)b;
        return a >= 0 && b >= a && b < src->ndim ? 0 : -1;
    }
    int dims[CDY_MAX_NDIM];
    if (call->kwnames || sp_size_args(call, m->ndim, dims, w->sx))
        return -1;
    int n = m->ndim;
    w->kind = 'r';
    w->a = -1;
    for (int d = 0; d < n; d++)
        if (dims[d] == -1)
            w->a = d;
    if (w->a >= 0 && w->sx[w->a])
        return -1;   /* a -1 computed from sizes: no rule */
    return 0;
}

/* w for expand(sizes...) (varargs or one sequence; kind 'x'): out dim d is
 * source dim map[d] (its size kept; the argument -1, or a symbolic int that
 * must equal it; bit d of a: a constant that must) or -1, a size-1 or new
 * dim whose size is the argument (a symbolic int sx[d], or the node's
 * constant size); 0, or -1. */
static int sp_expand_map(const cdy_build_call *call, const cdy_meta *src, const cdy_meta *m,
                         cdy_sym_view *w)
{
    int dims[CDY_MAX_NDIM];
    if (call->kwnames || m->ndim < src->ndim || sp_size_args(call, m->ndim, dims, w->sx))
        return -1;
    int n = m->ndim;
    w->kind = 'x';
    w->a = 0;
    for (int d = 0; d < n; d++) {
        int j = d - (m->ndim - src->ndim);
        w->map[d] = (signed char)(j >= 0 && src->sizes[j] != 1 ? j : -1);
        if (w->map[d] >= 0 && dims[d] != -1 && !w->sx[d])
            w->a |= 1 << d;   /* a constant size for a kept dim: it must equal it */
    }
    return 0;
}

/* Record that copy node value has src's sizes, dim for dim. */
static void sp_copy_map(tracer *tr, int value, int src)
{
    const cdy_meta *m = &tr->t->graph.values[value].meta;
    cdy_sym_view w = {value, src, 'p', -1, -1, {0}, {0}};
    for (int d = 0; d < m->ndim; d++)
        w.map[d] = (signed char)d;
    if (!sp_view_room(tr))
        tr->t->symviews[tr->t->nsymviews++] = w;
}

/* 1 if sx node n is a constant (*c its value). */
static int sp_const(const cdy_trace *t, int n, long long *c)
{
    if (n <= 0 || n > t->nsx || t->sx[n - 1].op != 'k')
        return 0;
    *c = (long long)t->sx[n - 1].c;
    return 1;
}

/* 1 if 'c' view w may be whole at some sizes and cut at others (so whether
 * it is contiguous can change with them): a symbolic start, or a dim cut to
 * fewer elements from a start of 0 (x[:, :n], x[:, n // 3:]).  A constant
 * start past 0 (x[:, 2:]) never makes its dim whole; x[:, None] cuts nothing. */
static int sp_may_flip(const cdy_trace *t, const cdy_sym_view *w)
{
    const cdy_meta *m = &t->graph.values[w->value].meta;
    long long c;
    for (int j = 0; j < CDY_MAX_NDIM; j++)
        if (w->st[j] && !sp_const(t, w->st[j], &c))
            return 1;
    for (int d = 0; d < m->ndim; d++) {
        int j = w->map[d];
        int cut = j >= 0 && (w->sx[d] || (d < 31 && (w->a >> d & 1)));
        if (cut && !(w->st[j] && sp_const(t, w->st[j], &c) && c > 0))
            return 1;
    }
    return 0;
}

/* 1 if value v is, through the views the trace recorded, a cut ('c': a
 * slice, narrow or int index): whether it is contiguous can follow the sizes
 * (x[:, n // 3:] is whole at n == 2), not only the order of its dims. */
static int sp_through_cut(const cdy_trace *t, int v)
{
    for (int hops = 0; hops < 64; hops++) {
        int i = t->nsymviews - 1;
        while (i >= 0 && t->symviews[i].value != v)
            i--;
        if (i < 0)
            return 0;
        if (t->symviews[i].kind == 'c' && sp_may_flip(t, &t->symviews[i]))
            return 1;
        v = t->symviews[i].src;
    }
    return 1;
}

void cdy_tr_sym_layout(tracer *tr, const char *what, tvar *x)
{
    const char *dot = strrchr(what, '.');
    if (x && x->kind == TV_TENSOR && !strcmp(dot ? dot + 1 : what, "contiguous") &&
        sp_through_cut(tr->t, x->value))
        cdy_tr_pin(tr, x->value, ~0u, "contiguous() of a cut: a copy or not by its sizes");
}

void cdy_tr_sym_copy(tracer *tr, const cdy_build_call *call, tvar *r)
{
    if (call->nargs >= 1)
        cdy_tr_sym_layout(tr, call->what, call->args[0]);
    if (call->nargs < 1 || !r || r == CDY_NOT_LOWERED || r->kind != TV_TENSOR ||
        call->args[0]->kind != TV_TENSOR || r == call->args[0])
        return;
    const cdy_graph *g = &tr->t->graph;
    const cdy_meta *m = &g->values[r->value].meta, *src = &g->values[call->args[0]->value].meta;
    if (g->values[r->value].kind == CDY_VAL_NODE && m->ndim == src->ndim &&
        !memcmp(m->sizes, src->sizes, sizeof(int64_t) * (size_t)m->ndim))
        sp_copy_map(tr, r->value, call->args[0]->value);
    else
        cdy_tr_pin_tensors(tr, call->args, call->nargs, "a copy without a symbolic rule");
}

static int sp_narrow_map(tracer *tr, const cdy_build_call *call, const tvar *x, const cdy_meta *m,
                         cdy_sym_view *w);

void cdy_tr_sym_view(tracer *tr, const cdy_build_call *call, tvar *r)
{
    static const char *const perm[] = {"permute", "transpose", "swapaxes", "swapdims",
                                       "movedim", "moveaxis", "t", "adjoint", "squeeze",
                                       "unsqueeze", NULL};
    static const char *const shape[] = {"view", "reshape", "flatten", NULL};
    const char *dot = strrchr(call->what, '.');
    const char *name = dot ? dot + 1 : call->what;
    if (call->nargs < 1 || !r || r == CDY_NOT_LOWERED)
        return;   /* the call's symbolic ints stay pending: pinned after the call */
    if (r == call->args[0] && !sp_in(name, perm))   /* sizes the call gave: numbers */
        cdy_tr_pin_tensors(tr, call->args, call->nargs, "a view returning its input");
    if (r->kind != TV_TENSOR || call->args[0]->kind != TV_TENSOR || r == call->args[0])
        return;
    const cdy_graph *g = &tr->t->graph;
    const cdy_value *v = &g->values[r->value];
    cdy_sym_view w = {r->value, call->args[0]->value, 'p', -1, -1, {0}, {0}};
    const cdy_meta *src = &g->values[w.src].meta;
    int ok = v->kind == CDY_VAL_NODE && cdy_op_table[v->op].kind == 'V' &&
             (sp_in(name, perm) ? !sp_perm_map(src, &v->meta, &w) :
              sp_in(name, shape) ? !sp_shape_map(call, name, src, &v->meta, &w) :
              !strcmp(name, "narrow") ? !sp_narrow_map(tr, call, call->args[0], &v->meta, &w) :
              !strcmp(name, "expand") && !sp_expand_map(call, src, &v->meta, &w));
    if (!ok) {
        cdy_tr_pin_tensors(tr, call->args, call->nargs, "a view without a symbolic rule");
        return;
    }
    if (sp_view_room(tr))
        return;
    tr->t->symviews[tr->t->nsymviews++] = w;
    for (int i = 1; (w.kind == 'r' || w.kind == 'x' || w.kind == 'c') && i < call->nargs; i++)
        cdy_sx_taken(tr, call->args[i]);   /* their nodes are in the map: not pinned */
}

/* The node of the constant's symbolic slice (an 'S' node), or 0. */
static int sp_slice_node(tracer *tr, int sx)
{
    return sx > 0 && sx <= tr->t->nsx && tr->t->sx[sx - 1].op == 'S' ? sx : 0;
}

/* The node of constant k, of a + b, of a - b (0 when an operand is 0). */
static int sp_k(tracer *tr, long long k)
{
    return cdy_sx_node(tr, 'k', 0, 0, -1, -1, k);
}

static int sp_add(tracer *tr, int a, int b)
{
    return a && b ? cdy_sx_node(tr, '+', a, b, -1, -1, 0) : 0;
}

static int sp_sub(tracer *tr, int a, int b)
{
    int m = b ? sp_k(tr, -1) : 0;
    return sp_add(tr, a, m ? cdy_sx_node(tr, '*', b, m, -1, -1, 0) : 0);
}

/* A position in dim node d (size n at the example) given as int k (node sx,
 * 0: the constant k; negative counts from the end, as Python's and torch's):
 * into *node its index from the dim's start, guarded as the example has it:
 * the sign the trace took, then within the dim (0 <= index <= the dim, <
 * when strict: an int index), or clamped as Python's slices clamp (an index
 * <= 0 is the start, one >= the dim its end); 0, or -1 (an int index
 * outside the dim: no rule). */
static int sp_position(tracer *tr, int d, int64_t n, long long k, int sx, int strict,
                       const char *why, int *node)
{
    int r = sx ? sx : sp_k(tr, k), zero = sp_k(tr, 0);
    if (sx && cdy_sx_cmp(tr, r, zero, k < 0 ? Py_LT : Py_GE, 1, why))
        return -1;
    if (k < 0) {
        r = sp_add(tr, d, r);
        k += n;
    }
    if (strict && (k < 0 || k >= n))
        return -1;
    if (k < 0 || k > n) {   /* clamped to the dim's start or end */
        *node = k < 0 ? zero : d;
        return cdy_sx_cmp(tr, r, *node, k < 0 ? Py_LE : Py_GE, 1, why);
    }
    *node = r;
    return cdy_sx_cmp(tr, r, zero, Py_GE, 1, why) ||
           cdy_sx_cmp(tr, r, d, strict ? Py_LT : Py_LE, 1, why);
}

/* Out dim od of view w (meta m) is source dim sd of x from node a to node b
 * (positions, sp_position): its size node b - a, guarded >= 2 (the symbolic
 * int sx[od]) or == 1 (a constant, bit od of a) as at the example, and its
 * start st[sd] = a; 0, or -1 (an empty cut: no rule). */
static int sp_span(tracer *tr, int sd, int od, int a, int b, const cdy_meta *m, cdy_sym_view *w,
                   const char *why)
{
    int64_t len = m->sizes[od];
    int n = sp_sub(tr, b, a), k = len >= 1 ? sp_k(tr, len >= 2 ? 2 : 1) : 0;
    if (!n || !k || cdy_sx_cmp(tr, n, k, len >= 2 ? Py_GE : Py_EQ, 1, why))
        return -1;
    if (len >= 2)
        w->sx[od] = n;
    else
        w->a |= 1 << od;
    w->st[sd] = a;
    return 0;
}

/* Out dim od of a getitem is src dim sd cut by slice item o (step 1, node
 * S: its bounds' symbolic ints): w's map; a start of 0 keeps the view's
 * offset, a symbolic stop is the size (guarded <= the dim and >= 2), a
 * constant stop a constant size (guarded <= the dim); any other bounds
 * (a start inside the dim, from its end, from sizes; a stop from the end)
 * are positions (sp_position) and the size their difference (sp_span).
 * Bounds clamped at the example, or an empty cut, pin the dim (a constant
 * offset inside it; kernels take those on constant dims).  0, or -1 (no
 * rule). */
static int sp_cut(tracer *tr, const tvar *x, int sd, int od, PyObject *o, int S,
                  const cdy_meta *m, cdy_sym_view *w)
{
    const cdy_sym_sx *n = S ? &tr->t->sx[S - 1] : NULL;
    int start_sx = n ? n->a : 0, stop_sx = n ? n->b : 0;
    PySliceObject *sl = (PySliceObject *)o;
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(o, &start, &stop, &step) < 0)
        return PyErr_Clear(), -1;
    int64_t dim = tr->t->graph.values[x->value].meta.sizes[sd];
    w->map[od] = (signed char)sd;
    if (step != 1)
        return -1;
    if (start == 0 && !start_sx && sl->stop == Py_None)
        return 0;                           /* the whole dim */
    int d = cdy_sx_dim(tr, x, sd);
    if (start != 0 || start_sx || stop < 0 || (sl->stop != Py_None && stop > dim) ||
        (stop_sx && stop < 2)) {
        const char *why = cdy_sx_where(tr, "a slice's bounds within the dim");
        int a = 0, b = sl->stop == Py_None ? d : 0;
        if (d && !sp_position(tr, d, dim, start, start_sx, 0, why, &a) &&
            (b || !sp_position(tr, d, dim, stop, stop_sx, 0, why, &b)) &&
            !sp_span(tr, sd, od, a, b, m, w, why))
            return 0;
        why = cdy_sx_where(tr, "a slice starting inside the dim");
        cdy_tr_pin(tr, x->value, 1u << sd, why);
        cdy_sx_pin_node(tr, start_sx, why);
        cdy_sx_pin_node(tr, stop_sx, why);
        Py_ssize_t first = start, last = stop;
        PySlice_AdjustIndices(dim, &first, &last, 1);
        w->a |= 1 << od;
        w->st[sd] = first ? sp_k(tr, first) : 0;
        return 0;
    }
    if (!stop_sx) {                         /* x[:k]: k elements while the dim has them */
        int k = d ? cdy_sx_node(tr, 'k', 0, 0, -1, -1, stop) : 0;
        w->a |= 1 << od;
        return dim >= stop && k && !cdy_sx_cmp(tr, d, k, Py_GE, 1, "a slice's constant stop") ? 0 : -1;
    }
    if (stop < 2 || stop > dim || m->sizes[od] != stop)
        return -1;                          /* clamped, or a size 0 / 1 */
    int two = cdy_sx_node(tr, 'k', 0, 0, -1, -1, 2);
    if (!d || !two || cdy_sx_cmp(tr, stop_sx, d, Py_LE, 1, "a slice's stop within the dim") ||
        cdy_sx_cmp(tr, stop_sx, two, Py_GE, 1, "a slice's size of at least 2"))
        return -1;
    w->sx[od] = stop_sx;
    return 0;
}

/* Source dim sd of x indexed by int item o (node sx, or 0): index 0 keeps
 * the view's offset; another is a position (sp_position, strict), the start
 * st[sd] of the dropped dim; one outside the dim at the example, or a
 * position without a node, pins the dim (a constant offset inside it).
 * 0, or -1 (not an int). */
static int sp_select(tracer *tr, const tvar *x, int sd, PyObject *o, int sx, cdy_sym_view *w)
{
    long k = PyLong_AsLong(o);
    if (k == -1 && PyErr_Occurred())
        return PyErr_Clear(), -1;
    if (k == 0 && !sx)
        return 0;
    int64_t dim = tr->t->graph.values[x->value].meta.sizes[sd];
    const char *why = cdy_sx_where(tr, "an int index within the dim");
    int d = cdy_sx_dim(tr, x, sd), a = 0;
    if (d && !sp_position(tr, d, dim, k, sx, 1, why, &a)) {
        w->st[sd] = a;
        return 0;
    }
    why = cdy_sx_where(tr, "an int index inside the dim");
    cdy_sx_pin_node(tr, sx, why);
    cdy_tr_pin(tr, x->value, 1u << sd, why);
    k += k < 0 ? dim : 0;
    w->st[sd] = k > 0 && k < dim ? sp_k(tr, k) : 0;
    return 0;
}

/* Int argument a: its value into *k; 0, or -1 (not a constant int). */
static int sp_int_of(const tvar *a, long long *k)
{
    if (!a || a->kind != TV_CONST || !PyLong_CheckExact(a->obj))
        return -1;
    *k = PyLong_AsLongLong(a->obj);
    return PyErr_Occurred() ? (PyErr_Clear(), -1) : 0;
}

/* w ('c', sym.h) for narrow(dim, start, length) of x into result meta m: the
 * dim cut from position start (sp_position) for length elements, guarded
 * within the dim (sp_span); 0, or -1 (no rule). */
static int sp_narrow_map(tracer *tr, const cdy_build_call *call, const tvar *x, const cdy_meta *m,
                         cdy_sym_view *w)
{
    tvar *slot[4];
    const cdy_meta *src = &tr->t->graph.values[x->value].meta;
    long long dim, start, len;
    if (cdy_bind_names("input dim start length", call->args, call->nargs, call->kwnames, slot) ||
        sp_int_of(slot[1], &dim) || sp_int_of(slot[2], &start) || sp_int_of(slot[3], &len) ||
        slot[1]->sx || m->ndim != src->ndim)
        return -1;
    dim += dim < 0 ? src->ndim : 0;
    if (dim < 0 || dim >= src->ndim)
        return -1;
    w->kind = 'c';
    w->a = 0;
    for (int d = 0; d < m->ndim; d++)
        w->map[d] = (signed char)d;
    const char *why = cdy_sx_where(tr, "narrow's start and length within the dim");
    int d = cdy_sx_dim(tr, x, (int)dim), a = 0, ln = slot[3]->sx ? slot[3]->sx : sp_k(tr, len);
    if (!d || !ln || sp_position(tr, d, src->sizes[dim], start, slot[2]->sx, 0, why, &a))
        return -1;
    int b = sp_add(tr, a, ln);
    if (!b || cdy_sx_cmp(tr, b, d, Py_LE, 1, why))
        return -1;
    return sp_span(tr, (int)dim, (int)dim, a, b, m, w, why);
}

/* w's 'c' map (sym.h) for x[idx] (meta m) when idx (a constant: tr's nodes
 * sx / sxi) is None, Ellipsis, a slice, an int or a tuple of them: out dim d
 * is a source dim (whole, or cut: sp_cut) or a new 1 (-1); an int drops its
 * dim (sp_select); 0, or -1. */
static int sp_getitem_map(tracer *tr, const tvar *x, const tvar *idx, const cdy_meta *m,
                          cdy_sym_view *w)
{
    const cdy_meta *src = &tr->t->graph.values[x->value].meta;
    PyObject *idx_obj = idx->obj, *one[1] = {idx_obj};
    int tuple = PyTuple_Check(idx_obj);
    PyObject **items = tuple ? &PyTuple_GET_ITEM(idx_obj, 0) : one;
    Py_ssize_t n = tuple ? PyTuple_GET_SIZE(idx_obj) : 1;
    int nslice = 0, nell = 0, sd = 0, od = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int integer = PyLong_CheckExact(items[i]);
        if (items[i] != Py_None && items[i] != Py_Ellipsis && !PySlice_Check(items[i]) && !integer)
            return -1;
        nslice += PySlice_Check(items[i]) || integer;   /* the source dims they consume */
        nell += items[i] == Py_Ellipsis;
    }
    if (nell > 1 || nslice > src->ndim)
        return -1;
    w->kind = 'c';
    w->a = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int k = items[i] == Py_None ? 0 : items[i] == Py_Ellipsis ? src->ndim - nslice : 1;
        int S = sp_slice_node(tr, tuple ? (i < idx->nsxi ? idx->sxi[i] : 0) : idx->sx);
        if (od + (PyLong_CheckExact(items[i]) ? 0 : k ? k : 1) > m->ndim)
            return -1;   /* an int takes no result dim */
        if (!k)
            w->map[od++] = -1;
        else if (PySlice_Check(items[i])) {
            if (sp_cut(tr, x, sd++, od++, items[i], S, m, w))
                return -1;
        }
        else if (PyLong_CheckExact(items[i])) {
            if (sp_select(tr, x, sd++, items[i], tuple ? (i < idx->nsxi ? idx->sxi[i] : 0)
                                                       : idx->sx, w))
                return -1;
        }
        else
            for (int j = 0; j < k; j++)
                w->map[od++] = (signed char)sd++;
    }
    while (sd < src->ndim && od < m->ndim)
        w->map[od++] = (signed char)sd++;
    if (sd != src->ndim || od != m->ndim)
        return -1;
    for (int d = 0; d < m->ndim; d++)
        if (w->map[d] < 0 ? m->sizes[d] != 1
                          : !w->sx[d] && !(w->a >> d & 1) && m->sizes[d] != src->sizes[w->map[d]])
            return -1;
    return 0;
}

int cdy_tr_sym_gathered(tracer *tr, int value, int src, const signed char *map,
                        const signed char *idim)
{
    cdy_sym_view w = {value, src, 'g', -1, -1, {0}, {0}, {0}, {0}};
    memcpy(w.map, map, sizeof(w.map));
    memcpy(w.idim, idim, sizeof(w.idim));
    if (sp_view_room(tr))
        return -1;
    tr->t->symviews[tr->t->nsymviews++] = w;
    return 0;
}

/* 1 if value has a gather map (cdy_tr_sym_gathered). */
static int sp_has_gather_map(const cdy_trace *t, int value)
{
    for (int i = t->nsymviews - 1; i >= 0; i--)
        if (t->symviews[i].value == value && t->symviews[i].kind == 'g')
            return 1;
    return 0;
}

void cdy_tr_sym_getitem(tracer *tr, const cdy_build_call *call, tvar *r)
{
    if (r && r != CDY_NOT_LOWERED && r->kind == TV_TENSOR && sp_has_gather_map(tr->t, r->value))
        return;   /* advanced indexing: its map is recorded (build_index.c) */
    if (call->nargs < 1 || !r || r == CDY_NOT_LOWERED) {   /* an extern: as before */
        cdy_tr_pin_tensors(tr, call->args, call->nargs, "an index without a symbolic rule");
        return;
    }
    const cdy_graph *g = &tr->t->graph;
    cdy_sym_view w = {r->value, call->args[0]->value, 'c', -1, -1, {0}, {0}};
    int ok = call->nargs == 2 && !call->kwnames && r->kind == TV_TENSOR &&
             call->args[0]->kind == TV_TENSOR && r != call->args[0] &&
             call->args[1]->kind == TV_CONST && g->values[r->value].kind == CDY_VAL_NODE &&
             cdy_op_table[g->values[r->value].op].kind == 'V' &&
             !sp_getitem_map(tr, call->args[0], call->args[1], &g->values[r->value].meta, &w);
    if (!ok || sp_view_room(tr)) {
        cdy_tr_pin_tensors(tr, call->args, call->nargs,
                           cdy_sx_where(tr, "an index without a symbolic rule"));
        return;
    }
    tr->t->symviews[tr->t->nsymviews++] = w;
    tr->sx_index_taken = call->args[1];   /* its slices' nodes are in the map */
    cdy_sx_taken(tr, call->args[1]);
}

void cdy_tr_sym_split(tracer *tr, const cdy_build_call *call, tvar *r)
{
    if (call->nargs < 1 || !r || r == CDY_NOT_LOWERED || call->args[0]->kind != TV_TENSOR)
        return;
    tvar *slot[3];
    const cdy_graph *g = &tr->t->graph;
    int src = call->args[0]->value, nd = g->values[src].meta.ndim;
    long d = -1;
    if (!cdy_bind_names("input sizes dim", call->args, call->nargs, call->kwnames, slot)) {
        d = 0;
        if (slot[2] && (slot[2]->kind != TV_CONST || !PyLong_CheckExact(slot[2]->obj)))
            d = -1;
        else if (slot[2])
            d = PyLong_AsLong(slot[2]->obj);
        PyErr_Clear();
        d += d < 0 && slot[2] ? nd : 0;
    }
    int ok = d >= 0 && d < nd && r->kind == TV_TUPLE;
    for (int i = 0; ok && i < r->n; i++) {
        const tvar *p = r->items[i];
        const cdy_value *pv = p->kind == TV_TENSOR ? &g->values[p->value] : NULL;
        ok = pv && pv->kind == CDY_VAL_NODE && cdy_op_table[pv->op].kind == 'V' &&
             pv->meta.ndim == nd;
        for (int e = 0; ok && e < nd; e++)
            ok = e == d || pv->meta.sizes[e] == g->values[src].meta.sizes[e];
    }
    if (!ok) {
        cdy_tr_pin_tensors(tr, call->args, call->nargs, "a split without a symbolic rule");
        return;
    }
    cdy_tr_pin(tr, src, 1u << d, "the dim a split cuts");   /* the pieces' count and sizes */
    for (int i = 0; i < r->n; i++) {
        cdy_sym_view w = {r->items[i]->value, src, 's', (int)d, -1, {0}, {0}};
        if (sp_view_room(tr))
            return;
        tr->t->symviews[tr->t->nsymviews++] = w;
    }
}

void cdy_tr_sym_dims(tracer *tr, int value, int src, const signed char *map)
{
    cdy_sym_view w = {value, src, 'e', -1, -1, {0}, {0}};
    memcpy(w.map, map, sizeof(w.map));
    if (!sp_view_room(tr))
        tr->t->symviews[tr->t->nsymviews++] = w;
}

void cdy_tr_sym_sizes(tracer *tr, int value, const int *sx)
{
    cdy_sym_view w = {value, -1, 'z', -1, -1, {0}, {0}};
    memcpy(w.sx, sx, sizeof(w.sx));
    if (!sp_view_room(tr))
        tr->t->symviews[tr->t->nsymviews++] = w;
    else   /* no room: the sizes were numbers */
        for (int d = 0; d < CDY_MAX_NDIM; d++)
            cdy_sx_pin_node(tr, sx[d], "out of memory");
}

void cdy_tr_sym_fill(tracer *tr, const cdy_build_call *call, int value)
{
    const char *dot = strrchr(call->what, '.');
    const char *name = dot ? dot + 1 : call->what;
    size_t len = strlen(name);
    if (value < 0)
        return;
    if (len > 5 && !strcmp(name + len - 5, "_like")) {   /* its input's sizes */
        const cdy_graph *g = &tr->t->graph;
        const cdy_meta *m = &g->values[value].meta;
        const cdy_meta *src = call->nargs >= 1 && call->args[0]->kind == TV_TENSOR
                                  ? &g->values[call->args[0]->value].meta : NULL;
        if (src && src->ndim == m->ndim &&
            !memcmp(src->sizes, m->sizes, sizeof(int64_t) * (size_t)m->ndim))
            sp_copy_map(tr, value, call->args[0]->value);
        else
            cdy_tr_pin_tensors(tr, call->args, call->nargs, "a *_like without a symbolic rule");
        return;
    }
    int nkw = call->kwnames ? (int)PyTuple_GET_SIZE(call->kwnames) : 0;
    int first = !strncmp(name, "new_", 4), end = call->nargs - nkw;
    if (!strcmp(name, "full") || !strcmp(name, "new_full"))
        end = first + 1;   /* full(size, fill_value) */
    int sx[CDY_MAX_NDIM] = {0}, n = 0, any = 0;
    for (int i = first; i < end && i < call->nargs; i++)
        if (sp_sx_items(call->args[i], sx, &n, CDY_MAX_NDIM))
            return;   /* not a size list: its symbolic ints are pinned after the call */
    if (n != tr->t->graph.values[value].meta.ndim)
        return;
    for (int d = 0; d < n; d++)
        any |= sx[d] != 0;
    if (!any)
        return;
    cdy_tr_sym_sizes(tr, value, sx);
    for (int i = first; i < end && i < call->nargs; i++)
        cdy_sx_taken(tr, call->args[i]);
}

int cdy_tr_sym_scalar(tracer *tr, int value, int sx)
{
    cdy_sym_view w = {value, -1, 'k', -1, -1, {0}, {0}};
    w.sx[0] = sx;
    if (sp_view_room(tr))
        return -1;
    tr->t->symviews[tr->t->nsymviews++] = w;
    return 0;
}
