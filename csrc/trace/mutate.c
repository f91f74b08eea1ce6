/* mutate.c - in-place tensor ops, tensor item assignment and attribute
 * stores, functionalized.
 *
 *   t.add_(y), t += y, F.relu(t, inplace=True), torch.relu_(t)
 *       -> a new graph value r (the out-of-place op, cast to t's dtype); the
 *          tvar t is re-pointed to r, so every Python reference to the tensor
 *          (stack, locals, containers: they share the tvar) sees r.  Eager's
 *          checks (dtype casts, shapes) come from running the in-place op on
 *          a copy of t's fake.
 *   x[k] = v  -> x re-pointed to masked_fill (bool mask of x's shape) or to
 *          an extern `_cdy_setitem(x, k, v)` (a copy of x with x[k] = v).
 *   a graph input whose tvar was re-pointed (a mutated argument, buffer or
 *          parameter) -> its final value is a graph output that the runtime
 *          copies into the input after the call (t->writeback).
 *   obj.attr = v on an object read from the frame -> later reads of obj.attr
 *          in the trace see v; the transformed code does the setattr after
 *          the call (t->stores).
 * A tensor that shares memory with another tensor of the trace (a view of it,
 * or the base of a view) is not mutated: the trace stops with a reason. */
#include "trace/trace.h"
#include "pyver/pycompat.h"

#include <string.h>

/* Per-trace state: every TENSOR tvar made, and the inputs mutated. */
typedef struct {
    tvar *v;
    PyObject *fake;         /* v->obj when sid was read */
    long long sid;          /* its storage's identity */
} mut_reg;

typedef struct {
    const cdy_src *src;     /* the object */
    PyObject *name;         /* the attribute, or the key of a dict item */
    tvar *value;
    int item;               /* 1: a dict item store */
} mut_store;

typedef struct {
    tvar *v;                /* the caller's tensor (a source), now a view of its old self */
    int orig_value;         /* its graph input value before the first metadata op */
} mut_restride;

typedef struct {
    int n, cap;
    mut_reg *reg;
    int nin, capin;
    tvar **inputs;          /* mutated input tvars */
    int *input_value;       /* their graph input value at the first mutation */
    int nst, capst;
    mut_store *st;
    int nre, capre;
    mut_restride *re;       /* tensors of the caller whose metadata an op changed */
    int nco, capco;
    tvar **co;              /* lists and dicts of the caller the trace changed */
} mut_state;

static PyObject *setitem_fn, *scatter_fn, *restride_fn, *replace_fn;   /* the _cdy_ functions below */
static PyObject *relayout_fn;
static PyObject *str_untyped_storage, *str_cdata, *str_clone, *str_setattr;
static PyObject *str_parameters;

/* The trace's mutation state, made on first use; NULL when stopped. */
static mut_state *state(tracer *tr)
{
    if (!tr->t->mut && !(tr->t->mut = cdy_arena_alloc(&tr->t->arena, sizeof(mut_state))))
        cdy_tr_stop(tr, OUT_OF_MEMORY);
    return tr->t->mut;
}

/* Grow arena array *p of *cap items of size sz to hold n+1; 0 or -1. */
static int grow(tracer *tr, void **p, int *cap, int n, size_t sz)
{
    if (n < *cap)
        return 0;
    int c = *cap ? 2 * *cap : 32;
    void *q = cdy_arena_alloc(&tr->t->arena, sz * (size_t)c);
    if (!q)
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    if (n)
        memcpy(q, *p, sz * (size_t)n);
    *p = q;
    *cap = c;
    return 0;
}

/* Remember tensor tvar v (called when it is made). */
void cdy_mut_register(tracer *tr, tvar *v)
{
    mut_state *s = state(tr);
    if (!s || grow(tr, (void **)&s->reg, &s->cap, s->n, sizeof(mut_reg)))
        return;
    s->reg[s->n].v = v;
    s->reg[s->n].fake = NULL;
    s->n++;
}

/* _cdy_setitem(x, k, v): a copy of x with [k] = v; new reference or NULL. */
static PyObject *setitem_impl(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 3) {
        PyErr_SetString(PyExc_TypeError, "_cdy_setitem(x, k, v)");
        return NULL;
    }
    PyObject *y = PyObject_CallMethodNoArgs(args[0], str_clone);
    if (y && PyObject_SetItem(y, args[1], args[2]) < 0)
        Py_CLEAR(y);
    return y;
}

/* 1 if fn is _cdy_scatter (whose result meta trace/meta.c computes). */
int cdy_mut_is_scatter(PyObject *fn)
{
    return fn && fn == scatter_fn;
}

/* _cdy_scatter(root, src, size, stride, offset): a copy of root with its
 * elements at (size, stride, offset) set to src, where offset counts from
 * root's first element: root's own storage offset (that of a real input,
 * which its fake does not have) is not part of it, unlike
 * torch.as_strided_scatter's.  Root is contiguous.  New reference or NULL. */
static PyObject *scatter_impl(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 5) {
        PyErr_SetString(PyExc_TypeError, "_cdy_scatter(root, src, size, stride, offset)");
        return NULL;
    }
    PyObject *y = PyObject_CallMethodNoArgs(args[0], str_clone);
    PyObject *base = y ? PyObject_CallMethod(y, "storage_offset", NULL) : NULL;
    PyObject *off = base ? PyNumber_Add(base, args[4]) : NULL;
    PyObject *v = off ? PyObject_CallMethod(y, "as_strided", "OOO", args[2], args[3], off) : NULL;
    PyObject *r = v ? PyObject_CallMethod(v, "copy_", "O", args[1]) : NULL;
    Py_XDECREF(base);
    Py_XDECREF(off);
    Py_XDECREF(v);
    if (!r)
        Py_CLEAR(y);
    Py_XDECREF(r);
    return y;
}

/* _cdy_restride(x, size, stride, offset): x.as_strided_(size, stride,
 * x.storage_offset() + offset) (offset from x's first element); None or NULL. */
static PyObject *restride_impl(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 4) {
        PyErr_SetString(PyExc_TypeError, "_cdy_restride(x, size, stride, offset)");
        return NULL;
    }
    PyObject *base = PyObject_CallMethod(args[0], "storage_offset", NULL);
    PyObject *off = base ? PyNumber_Add(base, args[3]) : NULL;
    PyObject *r = off ? PyObject_CallMethod(args[0], "as_strided_", "OOO", args[1], args[2], off)
                      : NULL;
    Py_XDECREF(base);
    Py_XDECREF(off);
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

/* _cdy_relayout(x, size, stride): a copy of x with the given strides (the
 * eager backend's replay of a write's new value put in its tensor's
 * layout); new reference or NULL. */
static PyObject *relayout_impl(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 3) {
        PyErr_SetString(PyExc_TypeError, "_cdy_relayout(x, size, stride)");
        return NULL;
    }
    PyObject *y = PyObject_CallMethod(args[0], "new_empty_strided", "OO", args[1], args[2]);
    PyObject *r = y ? PyObject_CallMethod(y, "copy_", "O", args[0]) : NULL;
    if (!r)
        Py_CLEAR(y);
    Py_XDECREF(r);
    return y;
}

/* _cdy_replace(c, new): the caller's list or dict c given the contents of new
 * (c[:] = new; c.clear(); c.update(new)); None or NULL. */
static PyObject *replace_impl(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 2) {
        PyErr_SetString(PyExc_TypeError, "_cdy_replace(c, new)");
        return NULL;
    }
    int r;
    if (PyList_Check(args[0]))
        r = PyList_SetSlice(args[0], 0, PyList_GET_SIZE(args[0]), args[1]);
    else if (PyDict_Check(args[0])) {
        PyDict_Clear(args[0]);
        r = PyDict_Update(args[0], args[1]);
    }
    else {
        PyErr_SetString(PyExc_TypeError, "_cdy_replace: not a list or dict");
        r = -1;
    }
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* One-time lookups; 0 or -1 with an error. */
static int mut_init(void)
{
    if (setitem_fn)
        return 0;
    str_untyped_storage = PyUnicode_InternFromString("untyped_storage");
    str_cdata = PyUnicode_InternFromString("_cdata");
    str_clone = PyUnicode_InternFromString("clone");
    str_setattr = PyUnicode_InternFromString("__setattr__");
    str_parameters = PyUnicode_InternFromString("_parameters");
    static PyMethodDef def = {"_cdy_setitem", (PyCFunction)(void (*)(void))setitem_impl,
                              METH_FASTCALL, "x.clone() with [k] = v (a C function: not traced)"};
    static PyMethodDef sdef = {"_cdy_scatter", (PyCFunction)(void (*)(void))scatter_impl,
                               METH_FASTCALL, "root.clone() with src written at (size, stride, "
                               "offset from root's start) (a C function: not traced)"};
    static PyMethodDef rdef = {"_cdy_restride", (PyCFunction)(void (*)(void))restride_impl,
                               METH_FASTCALL, "x.as_strided_ with an offset from x's first "
                               "element (a C function: not traced)"};
    static PyMethodDef cdef = {"_cdy_replace", (PyCFunction)(void (*)(void))replace_impl,
                               METH_FASTCALL, "the caller's list or dict given the trace's final "
                               "contents (a C function: not traced)"};
    static PyMethodDef ldef = {"_cdy_relayout", (PyCFunction)(void (*)(void))relayout_impl,
                               METH_FASTCALL, "a copy of x with the given strides (a C "
                               "function: not traced)"};
    setitem_fn = PyCFunction_New(&def, NULL);
    relayout_fn = PyCFunction_New(&ldef, NULL);
    scatter_fn = PyCFunction_New(&sdef, NULL);
    restride_fn = PyCFunction_New(&rdef, NULL);
    replace_fn = PyCFunction_New(&cdef, NULL);
    return setitem_fn && scatter_fn && restride_fn && replace_fn && relayout_fn &&
           str_untyped_storage && str_cdata &&
           str_clone && str_setattr &&
           str_parameters ? 0 : -1;
}

/* The identity of fake x's storage, or -1 with an error. */
static long long storage_id(PyObject *x)
{
    PyObject *st = PyObject_CallMethodNoArgs(x, str_untyped_storage);
    PyObject *cd = st ? PyObject_GetAttr(st, str_cdata) : NULL;
    long long id = cd ? PyLong_AsLongLong(cd) : -1;
    Py_XDECREF(st);
    Py_XDECREF(cd);
    return id;
}

/* The Python value of a for a call on fakes (new reference), NULL if none. */
static PyObject *fake_of(tvar *a)
{
    if (a->kind == TV_TENSOR || a->kind == TV_CONST || a->kind == TV_OBJ)
        return Py_NewRef(a->obj);
    if (a->kind != TV_TUPLE && a->kind != TV_LIST)
        return NULL;
    PyObject *s = a->kind == TV_TUPLE ? PyTuple_New(a->n) : PyList_New(a->n);
    for (int i = 0; s && i < a->n; i++) {
        PyObject *o = fake_of(a->items[i]);
        if (!o) {
            Py_DECREF(s);
            return NULL;
        }
        if (a->kind == TV_TUPLE)
            PyTuple_SET_ITEM(s, i, o);
        else
            PyList_SET_ITEM(s, i, o);
    }
    return s;
}

/* 1 if in-place method `base`_ (args, kwnames) is x.copy_(src) of two tensors of
 * one dtype, src's sizes broadcasting to x's: eager's checks pass but the
 * overlap one (stop_on_overlap), and check_on_fakes need not run them (its
 * clone of a strided view's fake runs torch's Python empty_like ref, whose
 * first call imports torch.fx and sympy). */
static int copy_checks_pass(tracer *tr, const char *base, tvar **args, int nargs,
                            PyObject *kwnames)
{
    if (strcmp(base, "copy") || nargs != 2 || kwnames || args[0]->kind != TV_TENSOR ||
        args[1]->kind != TV_TENSOR)
        return 0;
    const cdy_meta *x = &tr->t->graph.values[args[0]->value].meta,
                   *src = &tr->t->graph.values[args[1]->value].meta;
    if (x->dtype != src->dtype || src->ndim > x->ndim)
        return 0;
    for (int d = 0; d < src->ndim; d++) {
        int64_t a = src->sizes[d], b = x->sizes[x->ndim - src->ndim + d];
        if (a != b && a != 1)
            return 0;
    }
    return 1;
}

/* Where a fake tensor's elements lie in its storage: its offset and
 * element size in bytes, sizes and strides (in elements), dtype (borrowed
 * from the fake). */
typedef struct {
    int64_t off, esize;
    int nd;
    int64_t sz[CDY_MAX_NDIM], st[CDY_MAX_NDIM];
    PyObject *dtype;
} mut_layout;

/* Read fake x's layout into l: 0, or -1 with an error. */
static int read_layout(PyObject *x, mut_layout *l)
{
    PyObject *off = PyObject_CallMethod(x, "storage_offset", NULL);
    PyObject *isz = off ? PyObject_CallMethod(x, "element_size", NULL) : NULL;
    PyObject *sz = isz ? PyObject_CallMethod(x, "size", NULL) : NULL;
    PyObject *st = sz ? PyObject_CallMethod(x, "stride", NULL) : NULL;
    PyObject *dt = st ? PyObject_GetAttrString(x, "dtype") : NULL;
    int bad = !dt || PyTuple_GET_SIZE(sz) != PyTuple_GET_SIZE(st) ||
              PyTuple_GET_SIZE(sz) > CDY_MAX_NDIM;
    if (!bad) {
        l->esize = PyLong_AsLongLong(isz);
        l->off = PyLong_AsLongLong(off) * l->esize;
        l->nd = (int)PyTuple_GET_SIZE(sz);
        for (int d = 0; d < l->nd; d++) {
            l->sz[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(sz, d));
            l->st[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(st, d));
        }
        l->dtype = dt;   /* torch's dtypes are singletons: alive as long as torch */
    }
    Py_XDECREF(off);
    Py_XDECREF(isz);
    Py_XDECREF(sz);
    Py_XDECREF(st);
    Py_XDECREF(dt);
    if (bad && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "cdynamo: a fake's sizes and strides disagree");
    return bad || PyErr_Occurred() ? -1 : 0;
}

/* The end (exclusive) of the bytes l's elements span from l->off. */
static int64_t layout_end(const mut_layout *l)
{
    int64_t last = 0;
    for (int d = 0; d < l->nd; d++) {
        if (l->sz[d] == 0)
            return l->off;
        last += (l->sz[d] - 1) * l->st[d];
    }
    return l->off + (last + 1) * l->esize;
}

/* The gcd of g and the byte strides of l's dims of size > 1 (g: 0 before any). */
static int64_t layout_gcd(const mut_layout *l, int64_t g)
{
    for (int d = 0; d < l->nd; d++) {
        if (l->sz[d] < 2)
            continue;
        for (int64_t k = llabs(l->st[d] * l->esize); k;) {   /* Euclid: g = gcd(g, k) */
            int64_t r = g % k;
            g = k;
            k = r;
        }
    }
    return g;
}

/* 1 if tensor operand b (a fake) shares bytes with the written tensor a in
 * a way other than being the same view: eager then reads elements the op
 * has already written (or raises); 0 if not (disjoint byte ranges, or
 * element offsets that differ modulo every stride: a[:, 0] and a[:, 1]);
 * -1 with an error. */
static int partial_overlap(PyObject *a, PyObject *b)
{
    long long sa = storage_id(a), sb = sa == -1 ? -1 : storage_id(b);
    if (sa == -1 || sb == -1)
        return -1;
    mut_layout la, lb;
    if (sa != sb || read_layout(a, &la) || read_layout(b, &lb))
        return PyErr_Occurred() ? -1 : 0;
    if (layout_end(&la) <= lb.off || layout_end(&lb) <= la.off)
        return 0;   /* disjoint ranges */
    int64_t g = layout_gcd(&lb, layout_gcd(&la, 0));
    if (la.esize == lb.esize && g > 0 && (lb.off - la.off) % g)
        return 0;   /* each element's address differs from each of a's by a nonzero
                       multiple of the element size modulo g: no byte in common */
    int same = la.off == lb.off && la.dtype == lb.dtype && la.nd == lb.nd &&
               !memcmp(la.sz, lb.sz, sizeof(int64_t) * (size_t)la.nd) &&
               !memcmp(la.st, lb.st, sizeof(int64_t) * (size_t)la.nd);
    return !same;
}

/* Stop the trace (MUT_OVERLAP) if a tensor operand among args[0..nargs)
 * other than args[skip] shares bytes with written fake w other than as the
 * same view: eager reads what it already wrote (element order) or raises
 * (TensorIterator's partial-overlap check).  0, or -1 stopped. */
static int stop_on_overlap(tracer *tr, PyObject *w, tvar **args, int nargs, int skip,
                           const char *what)
{
    for (int i = 0; i < nargs; i++) {
        int o = i != skip && args[i]->kind == TV_TENSOR && args[i]->obj != w
                    ? partial_overlap(w, args[i]->obj) : 0;
        if (o < 0)
            return cdy_tr_stop_exc(tr, INTERNAL_IN, what);
        if (o)
            return cdy_tr_stop(tr, MUT_OVERLAP, what);
    }
    return 0;
}

/* Run in-place fn(*args) on the fakes with args[0] replaced by a copy of its
 * fake: eager's checks (the overlap one first).  0, or -1 with the trace
 * stopped (ERROR: eager raises). */
static int check_on_fakes(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames,
                          const char *what)
{
    PyObject *pa[CDY_MAX_CALL_ARGS] = {NULL};
    if (nargs > CDY_MAX_CALL_ARGS)
        return cdy_tr_stop(tr, OP_TOO_MANY_ARGS, what);
    if (args[0]->kind == TV_TENSOR && stop_on_overlap(tr, args[0]->obj, args, nargs, 0, what))
        return -1;
    int made = 0, ok = 1;
    for (; ok && made < nargs; made++)
        ok = (pa[made] = made ? fake_of(args[made]) : PyObject_CallMethodNoArgs(args[0]->obj, str_clone)) != NULL;
    if (!ok) {
        for (int i = 0; i + 1 < made; i++)
            Py_DECREF(pa[i]);
        if (PyErr_Occurred())
            return cdy_tr_stop_exc(tr, INTERNAL_IN, what);
        return cdy_tr_stop(tr, MUT_BAD_ARG, what);
    }
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *r = PyObject_Vectorcall(fn, pa, (size_t)(nargs - nkw), kwnames);
    for (int i = 0; i < nargs; i++)
        Py_DECREF(pa[i]);
    if (!r)
        return cdy_tr_stop_torch(tr, what);
    Py_DECREF(r);
    return 0;
}

/* The storage data pointer of the real tensor at src (top frame tr), or 0
 * with no error when it cannot be read. */
static uintptr_t real_storage(tracer *tr, const cdy_src *src)
{
    while (tr->parent)
        tr = tr->parent;
    PyObject *x = cdy_src_fetch(src, tr->frame_locals, tr->globals, tr->builtins, tr->closure);
    PyObject *st = x ? PyObject_CallMethodNoArgs(x, str_untyped_storage) : NULL;
    PyObject *p = st ? PyObject_CallMethod(st, "data_ptr", NULL) : NULL;
    uintptr_t r = p ? (uintptr_t)PyLong_AsUnsignedLongLong(p) : 0;
    Py_XDECREF(x);
    Py_XDECREF(st);
    Py_XDECREF(p);
    PyErr_Clear();
    return r;
}

/* 0 if input t's real tensor shares memory with no other tensor input of
 * the frame (the graph treats inputs as distinct), else -1 stopped. */
static int check_input_alias(tracer *tr, tvar *t)
{
    uintptr_t mine = real_storage(tr, t->src);
    const cdy_guards *gs = &tr->t->guards;
    char a[96], b[96];
    for (int i = 0; mine && i < gs->n; i++) {
        const cdy_guard *g = &gs->items[i];
        if (g->kind != CDY_GUARD_TENSOR)
            continue;
        cdy_src_name(t->src, tr->t->top_code, a, sizeof(a));
        cdy_src_name(&g->src, tr->t->top_code, b, sizeof(b));
        if (strcmp(a, b) && real_storage(tr, &g->src) == mine)
            return cdy_tr_stop(tr, MUT_SHARED_INPUTS, a, b);
    }
    return 0;
}

/* Record t as a mutated graph input (first mutation only); 0 or -1. */
static int note_input(tracer *tr, tvar *t)
{
    mut_state *s = state(tr);
    if (!s)
        return -1;
    if (!t->src || tr->t->graph.values[t->value].kind != CDY_VAL_INPUT)
        return 0;
    for (int i = 0; i < s->nin; i++)
        if (s->inputs[i] == t)
            return 0;
    int cap = s->capin;
    if (grow(tr, (void **)&s->inputs, &s->capin, s->nin, sizeof(tvar *)) ||
        grow(tr, (void **)&s->input_value, &cap, s->nin, sizeof(int)))
        return -1;
    s->inputs[s->nin] = t;
    s->input_value[s->nin++] = t->value;
    return 0;
}

/* A tvar calling method `name` of args[0] with args (self first). */
static tvar *call_method(tracer *tr, const char *name, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *m = cdy_tv_new(tr, TV_METHOD);
    if (!m || !(m->obj = cdy_tr_keep(tr, PyUnicode_FromString(name))))
        return NULL;
    m->self = args[0];
    return cdy_call(tr, m, args, nargs, kwnames);
}

/* x._base (new reference; None when x is not a view), or NULL with an error. */
static PyObject *base_of(PyObject *x)
{
    return PyObject_GetAttrString(x, "_base");
}

/* 1 if torch.can_cast(from, to): no float to integer or bool, no number
 * to bool (eager's rule for results written into an existing tensor). */
static int can_cast(int from, int to)
{
    if (cdy_dtype_table[from].is_float && !cdy_dtype_table[to].is_float)
        return 0;
    return !(from != CDY_DT_BOOL && to == CDY_DT_BOOL);
}

/* 1 if in-place op `base` (name without '_') writes any dtype into self
 * (copy_, fill_, zero_: eager casts); others follow can_cast. */
static int casts_freely(const char *base)
{
    return !strcmp(base, "copy") || !strcmp(base, "fill") || !strcmp(base, "zero");
}

/* 1 if meta m's elements fill a block of memory, each its own (a permuted
 * contiguous layout; size-1 dims have any stride). */
static int dense_layout(const cdy_meta *m)
{
    int64_t need = 1;   /* the stride the next dim in increasing order must have */
    int used[CDY_MAX_NDIM] = {0};
    for (int k = 0; k < m->ndim; k++) {
        int d = -1;
        for (int e = 0; e < m->ndim; e++)
            if (!used[e] && m->sizes[e] > 1 && (d < 0 || m->strides[e] < m->strides[d]))
                d = e;
        if (d < 0)
            return 1;
        if (m->strides[d] != need)
            return 0;
        used[d] = 1;
        need *= m->sizes[d];
    }
    return 1;
}

/* 1 if metas a and b (same sizes) differ in the stride of a dim of size > 1. */
static int other_strides(const cdy_meta *a, const cdy_meta *b)
{
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] > 1 && a->strides[d] != b->strides[d])
            return 1;
    return 0;
}

/* A tuple of the n ints v; new reference or NULL. */
static PyObject *int_tuple(const int64_t *v, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (!x) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

/* A copy of r (dtype and sizes of meta tm) in tm's layout: a VIEW_COPY node whose
 * eager replay is _cdy_relayout.  An in-place op keeps its tensor's strides
 * where the out-of-place op it becomes may not (masked_fill's result is
 * contiguous).  NULL when stopped. */
static tvar *in_layout_of(tracer *tr, const cdy_meta *tm, tvar *r)
{
    cdy_meta m = tr->t->graph.values[r->value].meta;
    memcpy(m.strides, tm->strides, sizeof(int64_t) * (size_t)m.ndim);
    int base;
    int64_t st[CDY_MAX_NDIM], off;
    cdy_view_load_map(tr, r->value, &base, st, &off);
    int v = cdy_view_value(tr, 0, &r->value, 1, &m, base, st, off);
    PyObject *fake = v < 0 ? NULL : cdy_fake_from_meta(tr, &m);
    if (!fake)
        return NULL;
    tvar *a[3] = {r, cdy_tv_const(tr, int_tuple(m.sizes, m.ndim)), NULL};
    if (a[1])
        a[2] = cdy_tv_const(tr, int_tuple(m.strides, m.ndim));
    if (!a[2]) {
        if (tr->t->status == CDY_TRACE_OK)
            cdy_tr_stop_exc(tr, INTERNAL_IN, __func__);
        return NULL;
    }
    if (cdy_add_pynode(tr, relayout_fn, a, 3, NULL, v))
        return NULL;
    return cdy_tensor_tvar(tr, fake, v);
}

/* r as t's new value: t's dtype and sizes, a graph value made after
 * `before` (a fresh tensor); NULL when stopped.  Unless cast_ok, a result
 * dtype that cannot be cast to t's stops the trace as an error (eager
 * raises "result type X can't be cast to the desired output type Y"). */
static tvar *as_new_value(tracer *tr, tvar *t, tvar *r, int before, const char *what, int cast_ok)
{
    if (!r || r->kind != TV_TENSOR) {
        if (r)
            cdy_tr_stop(tr, MUT_NO_TENSOR, what);
        return NULL;
    }
    cdy_meta tm = tr->t->graph.values[t->value].meta;   /* a copy: nodes added move values */
    const cdy_meta *mt = &tm;
    int rdt = tr->t->graph.values[r->value].meta.dtype;
    if (!cast_ok && rdt != mt->dtype && !can_cast(rdt, mt->dtype)) {
        cdy_tr_stop(tr, MUT_CAST, what, cdy_dtype_table[rdt].name, cdy_dtype_table[mt->dtype].name);
        return NULL;
    }
    if (rdt != mt->dtype) {
        tvar *a[2] = {r, cdy_tv_const(tr, Py_NewRef(cdy_dtype_obj(mt->dtype)))};
        if (!a[1] || !(r = call_method(tr, "to", a, 2, NULL)))
            return NULL;
    }
    const cdy_meta *mr = &tr->t->graph.values[r->value].meta;
    if (mr->ndim != mt->ndim || memcmp(mr->sizes, mt->sizes, sizeof(int64_t) * (size_t)mt->ndim)) {
        cdy_tr_stop(tr, MUT_SHAPE, what);
        return NULL;
    }
    if (other_strides(mt, mr) && dense_layout(mt))
        return in_layout_of(tr, mt, r);   /* a new tensor in t's layout */
    PyObject *b = base_of(r->obj);   /* an existing tensor or a view (expand_as): copy it */
    int view = b && b != Py_None;
    Py_XDECREF(b);
    PyErr_Clear();
    if ((r->value < before && r->obj != t->obj) || view)
        r = call_method(tr, "clone", &r, 1, NULL);
    return r;
}

/* Re-point every tvar of t's tensor (those with t's fake) to value r. */
static void repoint(tracer *tr, tvar *t, tvar *r)
{
    mut_state *s = state(tr);
    PyObject *old = t->obj;
    if (r->obj == old)
        return;
    for (int i = 0; s && i < s->n; i++)
        if (s->reg[i].v->kind == TV_TENSOR && s->reg[i].v->obj == old && s->reg[i].v != t) {
            s->reg[i].v->obj = r->obj;
            s->reg[i].v->value = r->value;
        }
    t->obj = r->obj;
    t->value = r->value;
}

/* 1 if fake x is contiguous from its storage's start (a view's strides and
 * offset are then element positions in it), 0 if not, -1 on error. */
static int plain_base(PyObject *x)
{
    PyObject *c = PyObject_CallMethod(x, "is_contiguous", NULL);
    PyObject *o = c == Py_True ? PyObject_CallMethod(x, "storage_offset", NULL) : NULL;
    int r = c == Py_True ? (o ? PyLong_AsLong(o) == 0 : -1) : c ? 0 : -1;
    Py_XDECREF(c);
    Py_XDECREF(o);
    return r;
}

/* The tvar of t's tensor's root: t itself, or the registered tvar holding
 * t's base; NULL (not stopped) when t is a view of no tvar. */
static tvar *root_of(tracer *tr, tvar *t)
{
    mut_state *s = state(tr);
    PyObject *b = s ? base_of(t->obj) : NULL;
    tvar *found = b == Py_None ? t : NULL;
    for (int i = 0; b && b != Py_None && i < s->n && !found; i++)
        if (s->reg[i].v->kind == TV_TENSOR && s->reg[i].v->obj == b)
            found = s->reg[i].v;
    Py_XDECREF(b);
    PyErr_Clear();
    return found;
}

/* The tensors sharing t's memory: distinct fakes of registered tvars other
 * than root's, each a view of root (so it can be re-derived after the write),
 * into views[] (their count in *n).  0, or -1 stopped (another alias). */
static int aliases(tracer *tr, tvar *t, tvar *root, PyObject **views, int *n, const char *what)
{
    mut_state *s = state(tr);
    long long sid = s ? storage_id(t->obj) : -1;
    *n = 0;
    if (sid == -1)
        return cdy_tr_stop_exc(tr, FAKE_STORAGE);
    for (int i = 0; i < s->n; i++) {
        mut_reg *r = &s->reg[i];
        PyObject *f = r->v->obj;
        if (r->v->kind != TV_TENSOR || (root && f == root->obj))
            continue;
        if (r->fake != f) {
            if ((r->sid = storage_id(f)) == -1)
                return cdy_tr_stop_exc(tr, FAKE_STORAGE);
            r->fake = f;
        }
        if (r->sid != sid)
            continue;
        int dup = 0;
        for (int k = 0; k < *n && !dup; k++)
            dup = views[k] == f;
        if (dup)
            continue;
        PyObject *b = root ? base_of(f) : NULL;
        int ok = b && b == root->obj && *n < 64;
        Py_XDECREF(b);
        PyErr_Clear();
        if (!ok)
            return cdy_tr_stop(tr, MUT_ALIAS, what);
        views[(*n)++] = f;
    }
    return 0;
}

/* A tvar calling torch.<name>(args); NULL when stopped. */
static tvar *call_torch(tracer *tr, const char *name, tvar **args, int nargs)
{
    PyObject *fn = cdy_tr_keep(tr, PyObject_GetAttrString(cdy_torch, name));
    tvar *f = fn ? cdy_tv_new(tr, TV_OBJ) : NULL;
    if (!f) {
        if (tr->t->status == CDY_TRACE_OK)
            cdy_tr_stop_exc(tr, INTERNAL_IN, name);
        return NULL;
    }
    f->obj = fn;
    return cdy_call(tr, f, args, nargs, NULL);
}

/* args[1..3] = the constants size, stride, storage_offset of fake v; 0 or -1. */
static int geometry(tracer *tr, PyObject *v, tvar **args)
{
    PyObject *sz = PyObject_CallMethod(v, "size", NULL);
    PyObject *t = sz ? PySequence_Tuple(sz) : NULL;
    Py_XDECREF(sz);
    args[1] = t ? cdy_tv_const(tr, t) : NULL;
    PyObject *st = args[1] ? PyObject_CallMethod(v, "stride", NULL) : NULL;
    args[2] = st ? cdy_tv_const(tr, st) : NULL;
    PyObject *of = args[2] ? PyObject_CallMethod(v, "storage_offset", NULL) : NULL;
    args[3] = of ? cdy_tv_const(tr, of) : NULL;
    if (args[3])
        return 0;
    return tr->t->status == CDY_TRACE_OK ? cdy_tr_stop_exc(tr, VIEW_GEOMETRY)
                                         : -1;
}

/* The write of new value r into t: t's root gets the new contents (through
 * t's geometry when t is a view of it), every view of the root is re-derived
 * from the new root.  t, or NULL when stopped. */
static tvar *write_value(tracer *tr, tvar *t, tvar *root, PyObject **views, int nviews, tvar *r,
                   const char *what)
{
    tvar *a[5];
    if (note_input(tr, root))
        return NULL;
    if (t != root) {   /* root with r scattered through t's sizes, strides and offset */
        a[0] = root;
        if (geometry(tr, t->obj, a))
            return NULL;
        a[4] = a[3];   /* (root, r, size, stride, offset) */
        a[3] = a[2];
        a[2] = a[1];
        a[1] = r;
        if (!(r = cdy_call_extern(tr, scatter_fn, "as_strided_scatter", a, 5)))
            return NULL;
    }
    if (nviews && plain_base(r->obj) != 1 && !(r = call_method(tr, "contiguous", &r, 1, NULL)))
        return NULL;
    repoint(tr, root, r);
    for (int k = 0; k < nviews; k++) {
        tvar *nv, *u = NULL;
        a[0] = root;
        if (geometry(tr, views[k], a) || !(nv = call_torch(tr, "as_strided", a, 4)))
            return NULL;
        mut_state *s = state(tr);
        for (int i = 0; i < s->n && !u; i++)
            if (s->reg[i].v->obj == views[k])
                u = s->reg[i].v;
        if (u)
            repoint(tr, u, nv);
    }
    (void)what;
    return t;
}

/* 1 if meta m's elements may share memory: a dim of size > 1 with stride
 * 0, or one whose stride does not step over the span of the dims with
 * smaller strides (as_strided layouts); 0 when each element has its own. */
static int overlaps_itself(const cdy_meta *m)
{
    int64_t st[CDY_MAX_NDIM], sz[CDY_MAX_NDIM];
    int n = 0;
    for (int d = 0; d < m->ndim; d++) {
        if (m->sizes[d] == 0)
            return 0;
        if (m->sizes[d] == 1)
            continue;
        int k = n++;   /* insertion by stride */
        for (; k > 0 && st[k - 1] > m->strides[d]; k--) {
            st[k] = st[k - 1];
            sz[k] = sz[k - 1];
        }
        st[k] = m->strides[d];
        sz[k] = m->sizes[d];
    }
    int64_t span = 0;   /* highest offset the smaller-stride dims reach */
    for (int k = 0; k < n; k++) {
        if (st[k] <= span)
            return 1;
        span += (sz[k] - 1) * st[k];
    }
    return 0;
}

/* What a mutation of t needs: its root and the views to re-derive. */
typedef struct {
    tvar *root;
    int cast_ok;            /* the op writes any dtype (copy_, fill_, setitem) */
    int nviews;
    PyObject *views[64];
} mut_plan;

/* 0 if t may be mutated (its aliases are views of a plain root: they are
 * re-derived); -1 stopped. */
static int may_mutate(tracer *tr, tvar *t, const char *what, mut_plan *p)
{
    p->nviews = 0;
    p->cast_ok = 0;
    if (t->kind != TV_TENSOR)
        return cdy_tr_stop(tr, MUT_NON_TENSOR, what);
    if (mut_init())
        return cdy_tr_stop_exc(tr, PY_ERROR);
    if (overlaps_itself(&tr->t->graph.values[t->value].meta))   /* eager writes element by
                                                                  element, or raises */
        return cdy_tr_stop(tr, MUT_OVERLAP, what);
    p->root = root_of(tr, t);
    if (p->root && p->root != t && plain_base(p->root->obj) != 1) {
        PyErr_Clear();
        p->root = NULL;
    }
    if (aliases(tr, t, p->root, p->views, &p->nviews, what))
        return -1;
    if (!p->root)
        p->root = t;   /* a view nothing else shares: a value of its own */
    if (p->nviews && p->root == t && plain_base(t->obj) != 1) {
        PyErr_Clear();
        return cdy_tr_stop(tr, MUT_NONCONTIG_VIEW, what);
    }
    return 0;
}

/* The common tail: r (made after `before`) as t's new value, written per
 * plan p.  t, or NULL when stopped. */
static tvar *commit(tracer *tr, tvar *t, tvar *r, int before, const char *what, mut_plan *p)
{
    if (!(r = as_new_value(tr, t, r, before, what, p->cast_ok)))
        return NULL;
    return write_value(tr, t, p->root, p->views, p->nviews, r, what);
}

/* 1 if Tensor.<n> only changes its tensor's sizes and strides (a view of
 * its old self, the storage untouched). */
static int metadata_only(const char *n)
{
    static const char *ops[] = {"t_", "transpose_", "swapdims_", "swapaxes_", "squeeze_",
                                "unsqueeze_", NULL};
    for (int i = 0; ops[i]; i++)
        if (!strcmp(n, ops[i]))
            return 1;
    return 0;
}

/* Remember that caller's tensor t (a source) had its metadata changed,
 * its input value being orig_value; 0 or -1. */
static int note_restride(tracer *tr, tvar *t, int orig_value)
{
    mut_state *s = state(tr);
    if (!s)
        return -1;
    for (int i = 0; i < s->nre; i++)
        if (s->re[i].v == t)
            return 0;
    if (grow(tr, (void **)&s->re, &s->capre, s->nre, sizeof(mut_restride)))
        return -1;
    s->re[s->nre].v = t;
    s->re[s->nre++].orig_value = orig_value;
    return 0;
}

/* Tensor.<base>_ that changes only metadata (t_, transpose_, squeeze_...):
 * every reference to t's tensor becomes the view t.<base>(...); a hidden
 * tvar keeps t's old self as the root its views (t among them) derive
 * from, and for a caller's tensor the transformed code restrides it after
 * the graph.  t, or NULL when stopped. */
static tvar *metadata_method(tracer *tr, PyObject *fn, const char *base, tvar **args, int nargs,
                             PyObject *kwnames, const char *what)
{
    tvar *t = args[0];
    if (check_on_fakes(tr, fn, args, nargs, kwnames, what))
        return NULL;
    PyObject *b = base_of(t->obj);
    int is_root = b == Py_None;
    Py_XDECREF(b);
    if (!b)
        return cdy_tr_stop_exc(tr, INTERNAL_IN, what), NULL;
    tvar old = *t, *r = call_method(tr, base, args, nargs, kwnames);
    if (!r || r->kind != TV_TENSOR)
        return r ? cdy_tr_stop(tr, MUT_NO_TENSOR, what), NULL : NULL;
    repoint(tr, t, r);
    mut_state *s = state(tr);
    int orig = tr->t->graph.values[old.value].kind == CDY_VAL_INPUT ? old.value : -1;
    if (is_root) {   /* the old self, registered after the repoint: it keeps the old fake */
        tvar *h = cdy_tv_new(tr, TV_TENSOR);
        if (!h || !s)
            return NULL;
        *h = old;
        for (int i = 0; i < s->nin; i++)
            if (s->inputs[i] == t) {   /* mutated before: its input value, its root now h */
                s->inputs[i] = h;
                orig = s->input_value[i];
            }
    }
    if (t->src && is_root && orig >= 0 && note_restride(tr, t, orig))
        return NULL;
    return t;
}

/* Tensor.<name>_ (self args[0]); see trace.h. */
tvar *cdy_mut_method(tracer *tr, PyObject *name, tvar **args, int nargs, PyObject *kwnames)
{
    const char *n = PyUnicode_AsUTF8(name);
    char what[96], base[80];
    snprintf(what, sizeof(what), "in-place Tensor.%s()", n);
    size_t len = strlen(n);
    static const char *not_values[] = {"requires_grad_", "share_memory_", "resize_", "resize_as_",
                                       "set_", "detach_", "bernoulli_", "random_", "uniform_",
                                       "normal_", "exponential_", "geometric_", "cauchy_",
                                       "log_normal_", "as_strided_", "record_stream", NULL};
    for (int i = 0; not_values[i]; i++)
        if (!strcmp(n, not_values[i])) {
            cdy_tr_stop(tr, MUT_UNSUPPORTED, what);
            return NULL;
        }
    if (len >= sizeof(base))
        return cdy_tr_stop(tr, MUT_UNSUPPORTED, what), NULL;
    memcpy(base, n, len - 1);
    base[len - 1] = 0;
    if (metadata_only(n)) {
        PyObject *mf = args[0]->kind == TV_TENSOR && !mut_init()
                           ? cdy_tr_keep(tr, PyObject_GetAttr(cdy_tensor_type, name)) : NULL;
        if (!mf)
            return cdy_tr_stop_exc(tr, INTERNAL_IN, what), NULL;
        return metadata_method(tr, mf, base, args, nargs, kwnames, what);
    }
    mut_plan vb;
    if (may_mutate(tr, args[0], what, &vb))
        return NULL;
    vb.cast_ok = casts_freely(base);
    PyObject *fn = cdy_tr_keep(tr, PyObject_GetAttr(cdy_tensor_type, name));
    if (!fn)
        return cdy_tr_stop_exc(tr, INTERNAL_IN, what), NULL;
    if (copy_checks_pass(tr, base, args, nargs, kwnames)
            ? stop_on_overlap(tr, args[0]->obj, args, nargs, 0, what)
            : check_on_fakes(tr, fn, args, nargs, kwnames, what))
        return NULL;
    int before = tr->t->graph.nvalues;
    tvar *r;
    if (!strcmp(base, "copy") && nargs >= 2) {        /* copy_(src[, non_blocking]) */
        tvar *e[2] = {args[1], args[0]};
        r = call_method(tr, "expand_as", e, 2, NULL);
    }
    else if (!strcmp(base, "zero") || !strcmp(base, "fill")) {
        PyObject *fl = cdy_tr_keep(tr, PyObject_GetAttrString(cdy_torch, "full_like"));
        tvar *f = fl ? cdy_tv_new(tr, TV_OBJ) : NULL, *a[2] = {args[0], NULL};
        if (!f)
            return NULL;
        f->obj = fl;
        a[1] = nargs >= 2 ? args[1] : cdy_tv_const(tr, PyLong_FromLong(0));
        if (!a[1])
            return NULL;
        if (a[1]->kind == TV_TENSOR) {   /* fill_(0-dim tensor): its value, broadcast */
            tvar *e[2] = {a[1], args[0]};
            r = call_method(tr, "expand_as", e, 2, NULL);
        }
        else
            r = cdy_call(tr, f, a, 2, NULL);
    }
    else if (cdy_pc_has_attr_string(cdy_tensor_type, base))
        r = call_method(tr, base, args, nargs, kwnames);
    else {
        cdy_tr_stop(tr, MUT_NO_OUT_OF_PLACE, what);
        return NULL;
    }
    return commit(tr, args[0], r, before, what, &vb);
}

/* The out-of-place twin of torch function fn named `name` ending in '_'
 * (torch.relu_ -> torch.relu), found next to fn; borrowed, or NULL. */
static PyObject *outplace_fn(tracer *tr, PyObject *fn, const char *name)
{
    static const char *homes[] = {"torch", "torch.nn.functional", "torch._C._nn",
                                  "torch._C._VariableFunctions", "torch._VF", NULL};
    char base[80];
    size_t len = strlen(name);
    if (len < 2 || len >= sizeof(base))
        return NULL;
    memcpy(base, name, len - 1);
    base[len - 1] = 0;
    for (int i = 0; homes[i]; i++) {
        PyObject *m = PyImport_ImportModule(homes[i]);
        PyObject *same = m ? PyObject_GetAttrString(m, name) : NULL;
        PyObject *out = same == fn ? PyObject_GetAttrString(m, base) : NULL;
        Py_XDECREF(m);
        Py_XDECREF(same);
        PyErr_Clear();
        if (out)
            return cdy_tr_keep(tr, out);
    }
    return NULL;
}

/* The position in args of fn's `inplace` argument when it is passed True
 * (by keyword, or positionally to a Python function), else -1. */
static int inplace_arg(PyObject *fn, tvar **args, int nargs, PyObject *kwnames)
{
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nk; k++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, k), "inplace") == 0) {
            tvar *a = args[nargs - nk + k];
            return a->kind == TV_CONST && a->obj == Py_True ? (int)(nargs - nk + k) : -1;
        }
    if (!PyFunction_Check(fn))
        return -1;
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    for (int i = 0; i < co->co_argcount && i < nargs - nk; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(co->co_localsplusnames, i),
                                             "inplace") == 0)
            return args[i]->kind == TV_CONST && args[i]->obj == Py_True ? i : -1;
    return -1;
}

/* fn(..., out=o): computed without out=, o re-pointed to the result cast to
 * its dtype (o must have the result's shape); o, or NULL when stopped. */
static tvar *out_call(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames, int ko)
{
    Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
    int pos = nargs - (int)nk + ko;
    tvar *o = args[pos], *a2[CDY_MAX_CALL_ARGS + 1], *f;
    mut_plan vb;
    const char *what = "a call with out=";
    if (nargs > CDY_MAX_CALL_ARGS) {
        cdy_tr_stop(tr, OP_TOO_MANY_ARGS, what);
        return NULL;
    }
    if (may_mutate(tr, o, what, &vb) || stop_on_overlap(tr, o->obj, args, nargs, pos, what))
        return NULL;
    /* eager's checks: the call into a copy of o's fake */
    PyObject *pa[CDY_MAX_CALL_ARGS], *r = NULL;
    int ok = 1, made = 0;
    for (; ok && made < nargs; made++)
        ok = (pa[made] = made == pos ? PyObject_CallMethodNoArgs(o->obj, str_clone)
                                     : fake_of(args[made])) != NULL;
    if (ok)
        r = PyObject_Vectorcall(fn, pa, (size_t)(nargs - nk), kwnames);
    for (int i = 0; i < made - !ok; i++)
        Py_DECREF(pa[i]);
    if (!r)
        return cdy_tr_stop_torch(tr, what), NULL;
    Py_DECREF(r);
    PyObject *rest = PyTuple_New(nk - 1);
    for (Py_ssize_t i = 0, j = 0; rest && i < nk; i++)
        if (i != ko)
            PyTuple_SET_ITEM(rest, j++, Py_NewRef(PyTuple_GET_ITEM(kwnames, i)));
    if (!cdy_tr_keep(tr, rest) || !(f = cdy_tv_new(tr, TV_OBJ)))
        return NULL;
    for (int i = 0, j = 0; i < nargs; i++)
        if (i != pos)
            a2[j++] = args[i];
    f->obj = fn;
    int before = tr->t->graph.nvalues;
    tvar *res = cdy_call(tr, f, a2, nargs - 1, nk > 1 ? rest : NULL);
    return commit(tr, o, res, before, what, &vb);
}

/* torch function fn called in place (see trace.h). */
tvar *cdy_mut_call(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames,
                   int *handled)
{
    char what[120];
    *handled = 0;
    for (Py_ssize_t k = 0; kwnames && k < PyTuple_GET_SIZE(kwnames); k++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, k), "out") == 0 &&
            args[nargs - PyTuple_GET_SIZE(kwnames) + k]->kind == TV_TENSOR) {
            *handled = 1;
            return out_call(tr, fn, args, nargs, kwnames, (int)k);
        }
    if (nargs < 1 || args[0]->kind != TV_TENSOR)
        return NULL;
    PyObject *nm = PyObject_GetAttrString(fn, "__name__");
    const char *n = nm && PyUnicode_Check(nm) ? PyUnicode_AsUTF8(nm) : "";
    size_t len = strlen(n);
    int kwpos = inplace_arg(fn, args, nargs, kwnames), kw = kwpos >= 0;
    int trailing = len > 1 && n[len - 1] == '_' && n[len - 2] != '_';
    PyObject *out = trailing && !kw ? outplace_fn(tr, fn, n) : NULL;
    snprintf(what, sizeof(what), "in-place %s()", n);
    char base[80] = "";
    if (trailing && len < sizeof(base))
        memcpy(base, n, len - 1);
    Py_XDECREF(nm);
    PyErr_Clear();
    if (!kw && !trailing)
        return NULL;
    *handled = 1;
    if (!kw && !out) {
        cdy_tr_stop(tr, MUT_NO_OUT_OF_PLACE, what);
        return NULL;
    }
    mut_plan vb;
    if (may_mutate(tr, args[0], what, &vb) || check_on_fakes(tr, fn, args, nargs, kwnames, what))
        return NULL;
    vb.cast_ok = casts_freely(base);
    int before = tr->t->graph.nvalues;
    tvar *r, *f;
    if (kw) {   /* the same call with inplace=False */
        tvar *a2[CDY_MAX_CALL_ARGS];
        memcpy(a2, args, sizeof(tvar *) * (size_t)nargs);
        if (!(a2[kwpos] = cdy_tv_const(tr, Py_NewRef(Py_False))) || !(f = cdy_tv_new(tr, TV_OBJ)))
            return NULL;
        f->obj = fn;
        r = cdy_call(tr, f, a2, nargs, kwnames);
    }
    else {
        if (!(f = cdy_tv_new(tr, TV_OBJ)))
            return NULL;
        f->obj = out;
        r = cdy_call(tr, f, args, nargs, kwnames);
    }
    if (r && r->kind == TV_TENSOR && r->obj == args[0]->obj)
        return args[0];   /* a no-op (dropout in eval) */
    return commit(tr, args[0], r, before, what, &vb);
}

/* How deep the container x lies below the operands (2: x, k; 3: x, a, b)
 * when the code after BINARY_OP at tr->pc stores its result back into x[k]
 * (x[k] op= v: SWAP 3; SWAP 2; STORE_SUBSCR) or x[a:b] (3.12's x[a:b] op= v:
 * SWAP 4; SWAP 3; SWAP 2; STORE_SLICE = BUILD_SLICE 2, STORE_SUBSCR), else 0. */
static int subscr_pattern(tracer *tr)
{
    cdy_pv_instr d;
    int n = 0;
    for (int k = 1, want = 0; k <= 4; k++) {
        if (cdy_tr_peek_instr(tr, k, &d) || d.nsops < 1)
            return 0;
        const cdy_sinstr *s = &d.sops[0];
        if (k == 1 && s->sop == CDY_SOP_SWAP && (s->arg == 3 || s->arg == 4)) {
            n = s->arg;
            want = n - 1;
        }
        else if (k > 1 && want >= 2 && s->sop == CDY_SOP_SWAP && s->arg == want)
            want--;
        else if (k > 1 && want == 1 && n == 3)
            return d.nsops == 1 && s->sop == CDY_SOP_STORE_SUBSCR ? 2 : 0;
        else if (k > 1 && want == 1)
            return d.nsops == 2 && s->sop == CDY_SOP_BUILD_SLICE && s->arg == 2 &&
                   d.sops[1].sop == CDY_SOP_STORE_SUBSCR ? 3 : 0;
        else
            return 0;
    }
    return 0;
}

/* a op= b on tensor a (see trace.h). */
tvar *cdy_mut_binary(tracer *tr, const char *name, PyObject *fn, const char *sym, tvar **args)
{
    char what[64], iname[32];
    snprintf(iname, sizeof(iname), "i%s", name[strlen(name) - 1] == '_' ? "and" : name);
    if (!strcmp(name, "or_"))
        strcpy(iname, "ior");
    PyObject *op = PyImport_ImportModule("operator");
    PyObject *ifn = op ? cdy_tr_keep(tr, PyObject_GetAttrString(op, iname)) : NULL;
    Py_XDECREF(op);
    if (!ifn) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    snprintf(what, sizeof(what), "in-place operator %s=", sym);
    /* a temporary x[k] of a tensor x, stored back by setitem (stack: x, k or x, a, b) */
    int depth = subscr_pattern(tr);
    int temp = depth && tr->sp >= depth && tr->stack[tr->sp - depth]->kind == TV_TENSOR;
    mut_plan vb;
    if (!temp && may_mutate(tr, args[0], what, &vb))
        return NULL;
    if (temp && mut_init()) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    if (check_on_fakes(tr, ifn, args, 2, NULL, what))
        return NULL;
    int before = tr->t->graph.nvalues;
    tvar *r = cdy_call_operator(tr, fn, sym, args, 2);
    if (temp) {   /* the temporary x[k] takes the value (it no longer aliases x) */
        if ((r = as_new_value(tr, args[0], r, before, what, 0)))
            repoint(tr, args[0], r);
        return r ? args[0] : NULL;
    }
    return commit(tr, args[0], r, before, what, &vb);
}

/* 1 if index k holds a tensor (x[k] = v is then eager's index_put_). */
static int index_has_tensor(const tvar *k, int depth)
{
    if (k->kind == TV_TENSOR)
        return 1;
    if ((k->kind != TV_TUPLE && k->kind != TV_LIST) || depth > 8)
        return 0;
    for (int i = 0; i < k->n; i++)
        if (index_has_tensor(k->items[i], depth + 1))
            return 1;
    return 0;
}

/* Stop the trace (MUT_OVERLAP) if tensor v of x[k] = v shares bytes with
 * what eager writes, x[k] (basic indexing: a view that eager copy_'s v
 * into) or x (a tensor index: index_put_), other than as the same view:
 * eager raises or reads what it wrote.  0, or -1 stopped. */
static int setitem_overlap(tracer *tr, tvar *x, tvar *k, tvar *v, const char *what)
{
    if (v->kind != TV_TENSOR || x->kind != TV_TENSOR)
        return 0;
    long long sx = storage_id(x->obj), sv = sx == -1 ? -1 : storage_id(v->obj);
    if (sx == -1 || sv == -1)
        return cdy_tr_stop_exc(tr, INTERNAL_IN, what);
    if (sx != sv)
        return 0;
    PyObject *fk = index_has_tensor(k, 0) ? NULL : fake_of(k);
    PyObject *w = fk ? PyObject_GetItem(x->obj, fk) : NULL;
    Py_XDECREF(fk);
    PyErr_Clear();                         /* no view of x[k]: all of x, the wider check */
    tvar *a[1] = {v};
    int rc = stop_on_overlap(tr, w ? w : x->obj, a, 1, -1, what);
    Py_XDECREF(w);
    return rc;
}

/* x[k] = v on tensor x (see trace.h); 0 or -1. */
int cdy_mut_setitem(tracer *tr, tvar *x, tvar *k, tvar *v)
{
    const char *what = "tensor item assignment";
    mut_plan vb;
    if (may_mutate(tr, x, what, &vb) || setitem_overlap(tr, x, k, v, what))
        return -1;
    vb.cast_ok = 1;
    int before = tr->t->graph.nvalues;
    const cdy_value *gx = &tr->t->graph.values[x->value];
    tvar *r;
    if (k->kind == TV_TENSOR && tr->t->graph.values[k->value].meta.dtype == CDY_DT_BOOL &&
        tr->t->graph.values[k->value].meta.ndim == gx->meta.ndim &&
        !memcmp(tr->t->graph.values[k->value].meta.sizes, gx->meta.sizes,
                sizeof(int64_t) * (size_t)gx->meta.ndim) &&
        v->kind == TV_CONST && (PyLong_CheckExact(v->obj) || PyFloat_CheckExact(v->obj) ||
                                PyBool_Check(v->obj))) {
        tvar *a[3] = {x, k, v};   /* x[mask] = number: masked_fill */
        PyObject *mf = PyObject_GetAttrString(cdy_tensor_type, "masked_fill_");
        int bad = !mf || check_on_fakes(tr, mf, a, 3, NULL, what);
        Py_XDECREF(mf);
        if (bad)
            return -1;
        r = call_method(tr, "masked_fill", a, 3, NULL);
    }
    else {
        tvar *a[3] = {x, k, v};
        r = cdy_call_extern(tr, setitem_fn, "setitem", a, 3);
    }
    return commit(tr, x, r, before, what, &vb) ? 0 : -1;
}

/* 1 if the transformed code can rebuild v (as a return value is rebuilt). */
static int storable(tvar *v, int depth)
{
    if (v->kind == TV_TENSOR || v->kind == TV_CONST || v->kind == TV_OBJ)
        return 1;
    if (depth > 16)
        return 0;
    if (v->kind == TV_INST)
        return storable(v->self, depth + 1) && (!v->store || storable(v->store, depth + 1));
    if (v->kind == TV_PARTIAL && !storable(v->self, depth + 1))
        return 0;
    if (v->kind != TV_TUPLE && v->kind != TV_LIST && v->kind != TV_DICT && v->kind != TV_SET &&
        v->kind != TV_PARTIAL)
        return 0;
    for (int i = 0; !v->src && i < v->n; i++)
        if (!storable(v->items[i], depth + 1))
            return 0;
    return 1;
}

/* See trace.h. */
int cdy_tv_count_tensors(const tvar *v)
{
    int n = v->kind == TV_TENSOR;
    if (v->kind == TV_INST)
        return cdy_tv_count_tensors(v->self) + (v->store ? cdy_tv_count_tensors(v->store) : 0);
    if (v->kind == TV_PARTIAL)
        n += cdy_tv_count_tensors(v->self);
    int seq = v->kind == TV_TUPLE || v->kind == TV_LIST || v->kind == TV_DICT ||
              v->kind == TV_SET || v->kind == TV_PARTIAL;
    for (int i = 0; seq && i < v->n; i++)
        n += cdy_tv_count_tensors(v->items[i]);
    return n;
}

static int record_store(tracer *tr, mut_state *s, const cdy_src *src, PyObject *name, tvar *v,
                        int item);

/* obj.name = v (see trace.h); 0 or -1. */
int cdy_mut_store_attr(tracer *tr, tvar *obj, PyObject *name, tvar *v)
{
    mut_state *s = state(tr);
    if (!s)
        return -1;
    if (obj->kind == TV_INST)   /* an object built in the frame: its __setattr__, traced */
        return cdy_obj_setattr(tr, obj, name, v);
    if (obj->kind == TV_FUNC)   /* a function made here: functools.wraps' attributes */
        return cdy_func_setattr(tr, obj, name, v);
    if (obj->kind != TV_OBJ || !obj->src)
        return cdy_tr_stop(tr, STORE_ATTR_NEW);
    if (!storable(v, 0))
        return cdy_tr_stop(tr, STORE_ATTR_VALUE);
    if (v->kind == TV_OBJ && !v->src && !cdy_is_const(v->obj))
        return cdy_tr_stop(tr, STORE_ATTR_NO_SOURCE);
    PyObject *desc = _PyType_Lookup(Py_TYPE(obj->obj), name);   /* properties, slots */
    if (desc && (Py_TYPE(desc)->tp_descr_set || PyObject_TypeCheck(desc, &PyProperty_Type)))
        return cdy_tr_stop(tr, STORE_ATTR_DESCRIPTOR);
    if (mut_init())
        return cdy_tr_stop_exc(tr, PY_ERROR);
    int is_mod = PyObject_TypeCheck(obj->obj, (PyTypeObject *)cdy_module_type);
    if (is_mod) {   /* nn.Module.__setattr__ runs at replay; a parameter would need a Parameter */
        PyObject **dp = _PyObject_GetDictPtr(obj->obj);
        PyObject *params = dp && *dp ? PyDict_GetItemWithError(*dp, str_parameters) : NULL;
        if (params && PyDict_Check(params) && PyDict_GetItemWithError(params, name))
            return cdy_tr_stop(tr, STORE_PARAMETER, PyUnicode_AsUTF8(name));
        PyErr_Clear();
    }
    else if (_PyType_Lookup(Py_TYPE(obj->obj), str_setattr) !=
             _PyType_Lookup(&PyBaseObject_Type, str_setattr))
        return cdy_tr_stop(tr, STORE_ATTR_SETATTR);
    const cdy_src *src = cdy_src_step(tr, obj->src, name, 0);
    if (!src)
        return cdy_tr_stop(tr, ATTR_CHAIN_TOO_LONG);
    if (cdy_memo_set(tr, src, v))
        return -1;
    for (int h = 0; is_mod && h < 3; h++) {   /* reads through _parameters/_buffers/_modules */
        static const char *homes[3] = {"_parameters", "_buffers", "_modules"};
        PyObject *hn = cdy_tr_keep(tr, PyUnicode_FromString(homes[h]));
        const cdy_src *s1 = hn ? cdy_src_step(tr, obj->src, hn, 0) : NULL;
        const cdy_src *s2 = s1 ? cdy_src_step(tr, s1, name, 1) : NULL;
        if (!s2 || cdy_memo_set(tr, s2, v))
            return cdy_tr_stop(tr, ATTR_CHAIN_TOO_LONG);
    }
    return record_store(tr, s, obj->src, name, v, 0);
}

/* Remember the store src.name = v (item: src[name] = v) for replay; 0 or -1. */
static int record_store(tracer *tr, mut_state *s, const cdy_src *src, PyObject *name, tvar *v,
                        int item)
{
    for (int i = 0; i < s->nst; i++)
        if (s->st[i].src == src && s->st[i].item == item &&
            PyObject_RichCompareBool(s->st[i].name, name, Py_EQ) == 1) {
            s->st[i].value = v;
            return 0;
        }
    PyErr_Clear();
    if (grow(tr, (void **)&s->st, &s->capst, s->nst, sizeof(mut_store)))
        return -1;
    s->st[s->nst].src = src;
    s->st[s->nst].name = name;
    s->st[s->nst].item = item;
    s->st[s->nst++].value = v;
    return 0;
}

/* See trace.h: c (a list or dict with a source) changed; its final contents
 * are written back after the graph. */
int cdy_mut_container(tracer *tr, tvar *c)
{
    mut_state *s = state(tr);
    if (!s)
        return -1;
    for (int i = 0; i < s->nco; i++)
        if (s->co[i] == c)
            return 0;
    if (grow(tr, (void **)&s->co, &s->capco, s->nco, sizeof(tvar *)))
        return -1;
    s->co[s->nco++] = c;
    return 0;
}

/* 1 if tensor tvar v has meta m's sizes and strides and its fake offset 0. */
static int same_geometry(tracer *tr, tvar *v, const cdy_meta *m)
{
    const cdy_meta *cur = &tr->t->graph.values[v->value].meta;
    PyObject *o = PyObject_CallMethod(v->obj, "storage_offset", NULL);
    long long off = o ? PyLong_AsLongLong(o) : -1;
    Py_XDECREF(o);
    PyErr_Clear();
    return off == 0 && cur->ndim == m->ndim &&
           !memcmp(cur->sizes, m->sizes, sizeof(int64_t) * (size_t)m->ndim) &&
           !memcmp(cur->strides, m->strides, sizeof(int64_t) * (size_t)m->ndim);
}

/* The call _cdy_restride(<t's source>, size, stride, offset) that gives the
 * caller's tensor t its traced metadata; NULL when stopped. */
static cdy_ret *restride_call(tracer *tr, tvar *t)
{
    cdy_trace *tt = tr->t;
    tvar *g[4];
    cdy_ret *r = cdy_arena_alloc(&tt->arena, sizeof(cdy_ret));
    cdy_ret **items = cdy_arena_alloc(&tt->arena, sizeof(cdy_ret *) * 4);
    if (!r || !items)
        return cdy_tr_stop(tr, OUT_OF_MEMORY), NULL;
    if (geometry(tr, t->obj, g))
        return NULL;
    for (int i = 0; i < 4; i++) {
        if (!(items[i] = cdy_arena_alloc(&tt->arena, sizeof(cdy_ret))))
            return cdy_tr_stop(tr, OUT_OF_MEMORY), NULL;
        items[i]->kind = i ? CDY_RET_CONST : CDY_RET_SOURCE;
        items[i]->obj = i ? g[i]->obj : NULL;
        items[i]->src = i ? NULL : t->src;
    }
    r->kind = CDY_RET_CALL;
    r->obj = restride_fn;
    r->n = r->index = 4;
    r->items = items;
    return r;
}

/* t->after: a restride call for each caller's tensor whose metadata
 * changed (its final geometry is not its input's), its input's sizes
 * pinned (the call's sizes and strides are the trace's numbers); 0 or -1. */
static int finish_restrides(tracer *tr, mut_state *s)
{
    cdy_trace *t = tr->t;
    if (!s->nre)
        return 0;
    for (int i = 0; i < s->nre; i++) {
        tvar *v = s->re[i].v;
        if (v->kind != TV_TENSOR)
            return cdy_tr_stop(tr, RESTRIDE_NOT_TENSOR);
        if (same_geometry(tr, v, &t->graph.values[s->re[i].orig_value].meta))
            continue;
        cdy_tr_pin(tr, s->re[i].orig_value, ~0u,
                   "an input's metadata changed in place (t_, squeeze_...): restrided to the "
                   "traced sizes after the graph (csrc/trace/mutate.c)");
        if (!(t->after[t->nafter++] = restride_call(tr, v)))
            return -1;
    }
    return 0;
}

/* Storage offset of fake x, or -1 with an error. */
static long long fake_offset(PyObject *x)
{
    PyObject *o = PyObject_CallMethod(x, "storage_offset", NULL);
    long long off = o ? PyLong_AsLongLong(o) : -1;
    Py_XDECREF(o);
    return off;
}

/* The fake of graph value v (a registered tvar's), or NULL. */
static PyObject *fake_of_value(mut_state *s, int v)
{
    for (int i = 0; i < s->n; i++)
        if (s->reg[i].v->kind == TV_TENSOR && s->reg[i].v->value == v)
            return s->reg[i].v->obj;
    return NULL;
}

/* Add to t->review output o (value ov, fake of) that shares memory with
 * the final value (tvar h) of mutated input `input` whose graph input value
 * is iv: the runtime returns the input (or a view of it) in its place, as
 * eager does.  0, or -1 stopped (a layout the input cannot view). */
static int add_review(tracer *tr, int o, int ov, PyObject *of, tvar *h, int input, int iv)
{
    cdy_trace *t = tr->t;
    const cdy_meta *im = &t->graph.values[iv].meta, *fm = &t->graph.values[h->value].meta;
    const cdy_meta *om = &t->graph.values[ov].meta;
    long long off = fake_offset(of), base = fake_offset(h->obj);
    if (off < 0 || base < 0)
        return cdy_tr_stop_exc(tr, FAKE_STORAGE);
    if (om->dtype != im->dtype || fm->ndim != im->ndim ||
        memcmp(fm->strides, im->strides, sizeof(int64_t) * (size_t)im->ndim))
        return cdy_tr_stop(tr, MUT_VIEW_LAYOUT);
    cdy_review *r = &t->review[t->nreview++];
    r->output = o;
    r->input = input;
    r->same = ov == h->value;
    r->ndim = om->ndim;
    memcpy(r->sizes, om->sizes, sizeof(int64_t) * (size_t)om->ndim);
    memcpy(r->strides, om->strides, sizeof(int64_t) * (size_t)om->ndim);
    r->offset = off - base;
    return 0;
}

/* t->review: every graph output that shares memory with the final value of
 * a mutated input (a view of the input in eager); 0 or -1 stopped. */
static int finish_reviews(tracer *tr, mut_state *s)
{
    cdy_trace *t = tr->t;
    t->review = cdy_arena_alloc(&t->arena, sizeof(cdy_review) * (size_t)(t->graph.noutputs + 1));
    if (!t->review)
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    for (int o = 0; o < t->graph.noutputs; o++) {
        int ov = t->graph.outputs[o];
        PyObject *of = fake_of_value(s, ov);
        long long sid = of ? storage_id(of) : -2;
        if (sid == -1)
            return cdy_tr_stop_exc(tr, FAKE_STORAGE);
        for (int i = 0; of && i < s->nin; i++) {
            tvar *h = s->inputs[i];
            if (h->value == s->input_value[i])
                continue;   /* not written: views of it are views of the input already */
            long long hs = storage_id(h->obj);
            if (hs == -1)
                return cdy_tr_stop_exc(tr, FAKE_STORAGE);
            if (hs == sid) {
                if (add_review(tr, o, ov, of, h, t->graph.values[s->input_value[i]].input_index,
                               s->input_value[i]))
                    return -1;
                break;
            }
        }
    }
    return 0;
}

/* Outputs the trace may add at return (bound for the output array). */
int cdy_mut_extra_outputs(tracer *tr)
{
    mut_state *s = tr->t->mut;
    int n = s ? s->nin : 0;
    for (int i = 0; s && i < s->nst; i++)
        n += cdy_tv_count_tensors(s->st[i].value);
    for (int i = 0; s && i < s->nco; i++)
        n += cdy_tv_count_tensors(s->co[i]);
    return n;
}

/* t->after: _cdy_replace(<c's source>, <c's final contents>) for each list
 * or dict of the caller the trace changed; 0 or -1. */
static int finish_containers(tracer *tr, mut_state *s, cdy_ret *(*make_ret)(tracer *, tvar *))
{
    cdy_trace *t = tr->t;
    for (int i = 0; i < s->nco; i++) {
        tvar *c = s->co[i], *copy = cdy_container_copy(tr, c);
        cdy_ret *r = cdy_arena_alloc(&t->arena, sizeof(cdy_ret));
        cdy_ret **items = cdy_arena_alloc(&t->arena, sizeof(cdy_ret *) * 2);
        cdy_ret *target = cdy_arena_alloc(&t->arena, sizeof(cdy_ret));
        if (!copy || !r || !items || !target)
            return cdy_tr_stop(tr, OUT_OF_MEMORY);
        if (!storable(copy, 0))
            return cdy_tr_stop(tr, STORE_CONTAINER_VALUE);
        target->kind = CDY_RET_SOURCE;
        target->src = c->src;
        items[0] = target;
        if (!(items[1] = make_ret(tr, copy)))
            return -1;
        r->kind = CDY_RET_CALL;
        r->obj = replace_fn;
        r->n = r->index = 2;
        r->items = items;
        t->after[t->nafter++] = r;
    }
    return 0;
}

/* At the top frame's return: writebacks of mutated inputs and attribute
 * stores (see trace.h); 0 or -1. */
int cdy_mut_finish(tracer *tr, cdy_ret *(*make_ret)(tracer *, tvar *))
{
    mut_state *s = tr->t->mut;
    cdy_trace *t = tr->t;
    if (!s || (!s->nin && !s->nst && !s->nre && !s->nco))
        return 0;
    if (mut_init())
        return cdy_tr_stop_exc(tr, PY_ERROR);
    if (!(t->after = cdy_arena_alloc(&t->arena, sizeof(cdy_ret *) * (size_t)(s->nre + s->nco + 1))))
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    if (finish_restrides(tr, s) || finish_containers(tr, s, make_ret))
        return -1;
    t->writeback = cdy_arena_alloc(&t->arena, sizeof(int) * (size_t)(2 * s->nin + 1));
    t->stores = cdy_arena_alloc(&t->arena, sizeof(cdy_store) * (size_t)(s->nst + 1));
    if (!t->writeback || !t->stores)
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    for (int i = 0; i < s->nst; i++) {
        cdy_store *st = &t->stores[t->nstores++];
        st->obj = s->st[i].src;
        st->name = s->st[i].name;
        st->item = s->st[i].item;
        /* an int from int symbols: computed at replay from their sources (symint.c) */
        st->value = st->item ? NULL : cdy_sx_store_ret(tr, s->st[i].value);
        if (!st->value)
            cdy_sx_pin_deep(tr, s->st[i].value, "the code stored the size");
        if (!st->value && !(st->value = make_ret(tr, s->st[i].value)))
            return -1;
    }
    for (int i = 0; i < s->nin; i++) {
        tvar *v = s->inputs[i];
        if (v->value == s->input_value[i])
            continue;
        if (check_input_alias(tr, v))
            return -1;
        int pos = -1;
        for (int o = 0; o < t->graph.noutputs; o++)
            if (t->graph.outputs[o] == v->value)
                pos = o;
        if (pos < 0) {
            pos = t->graph.noutputs;
            t->graph.outputs[t->graph.noutputs++] = v->value;
        }
        t->writeback[2 * t->nwriteback] = t->graph.values[s->input_value[i]].input_index;
        t->writeback[2 * t->nwriteback++ + 1] = pos;
    }
    return s->nin ? finish_reviews(tr, s) : 0;
}

/* 1 if v is a mutated input: returned through its source. */
int cdy_mut_is_input(tracer *tr, tvar *v)
{
    return v->kind == TV_TENSOR && v->src && v->src->kind != CDY_SRC_DEREF &&
           tr->t->graph.values[v->value].kind != CDY_VAL_INPUT;
}
