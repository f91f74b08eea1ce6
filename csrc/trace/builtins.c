/* builtins.c - Python builtins and library functions the tracer runs itself
 * on symbolic values: dict / OrderedDict / defaultdict / set / frozenset
 * construction, map, filter, sorted, min / max with a key, any / all,
 * callable, iter / next, zip(strict=True), functools.partial and reduce,
 * dataclasses.fields, torch.compiler.is_compiling() (True while tracing, as
 * under TorchDynamo), and the rebuilding of the values they make when they
 * escape the frame.  Each gives eager's result or stops with a reason. */
#include "trace/trace.h"
#include "pyver/pycompat.h"

#include <string.h>

static PyObject *lru_type;   /* functools._lru_cache_wrapper */
static PyObject *partial_type, *reduce_fn, *odict_type, *ddict_type, *dc_fields, *dc_is_dc;
static PyObject *environ_obj, *signature_fn, *method_type, *copy_fn, *deepcopy_fn, *device_t;
static PyObject *it_chain, *it_chain_from, *it_islice, *it_product, *it_combinations;
/* names for reasons' arguments */
static const char fname_max[] = "max", fname_min[] = "min", sym_gt[] = ">", sym_lt[] = "<";
static const char fname_dict[] = "dict", fname_map[] = "map", fname_filter[] = "filter";
static const char fname_reduce[] = "reduce", fname_sorted[] = "sorted", fname_zip[] = "zip";
static const char fname_partial[] = "partial", fname_signature[] = "inspect.signature";
static const char fname_device[] = "torch.device";
static const char fname_product[] = "itertools.product", fname_combinations[] = "itertools.combinations";
static const char fname_method[] = "a method of a fixed object";

/* One-time lookups; 0 or -1 (error set). */
static int builtins_init(void)
{
    if (partial_type)
        return 0;
    PyObject *ft = PyImport_ImportModule("functools");
    PyObject *co = PyImport_ImportModule("collections");
    PyObject *dc = PyImport_ImportModule("dataclasses");
    PyObject *os = PyImport_ImportModule("os");
    PyObject *insp = PyImport_ImportModule("inspect");
    PyObject *types = PyImport_ImportModule("types");
    PyObject *itt = PyImport_ImportModule("itertools");
    if (itt) {
        it_chain = PyObject_GetAttrString(itt, "chain");
        it_chain_from = it_chain ? PyObject_GetAttrString(it_chain, "from_iterable") : NULL;
        it_islice = PyObject_GetAttrString(itt, "islice");
        it_product = PyObject_GetAttrString(itt, "product");
        it_combinations = PyObject_GetAttrString(itt, "combinations");
    }
    Py_XDECREF(itt);
    device_t = PyObject_GetAttrString(cdy_torch, "device");
    PyObject *cp = PyImport_ImportModule("copy");
    if (cp) {
        copy_fn = PyObject_GetAttrString(cp, "copy");
        deepcopy_fn = PyObject_GetAttrString(cp, "deepcopy");
    }
    Py_XDECREF(cp);
    if (insp)
        signature_fn = PyObject_GetAttrString(insp, "signature");
    if (types)
        method_type = PyObject_GetAttrString(types, "MethodType");
    Py_XDECREF(insp);
    Py_XDECREF(types);
    if (ft) {
        partial_type = PyObject_GetAttrString(ft, "partial");
        reduce_fn = PyObject_GetAttrString(ft, "reduce");
        lru_type = PyObject_GetAttrString(ft, "_lru_cache_wrapper");
    }
    if (co) {
        odict_type = PyObject_GetAttrString(co, "OrderedDict");
        ddict_type = PyObject_GetAttrString(co, "defaultdict");
    }
    if (dc) {
        dc_fields = PyObject_GetAttrString(dc, "fields");
        dc_is_dc = PyObject_GetAttrString(dc, "is_dataclass");
    }
    if (os)
        environ_obj = PyObject_GetAttrString(os, "environ");
    Py_XDECREF(ft);
    Py_XDECREF(co);
    Py_XDECREF(dc);
    Py_XDECREF(os);
    return partial_type && reduce_fn && odict_type && ddict_type && dc_fields && dc_is_dc &&
           environ_obj && signature_fn && method_type && copy_fn && deepcopy_fn && device_t &&
           it_chain && it_chain_from && it_islice && it_product && it_combinations && lru_type ? 0 : -1;
}

/* 1 if o is os.environ. */
int cdy_is_environ(PyObject *o)
{
    return !builtins_init() && o == environ_obj;
}

/* 1 if fn is one of torch's "are we compiling" queries (torch.compiler.is_compiling,
 * is_dynamo_compiling, torch._dynamo's and torch._utils' is_compiling): true while
 * tracing, so library code takes the paths it keeps for compilers. */
static int is_compiling_query(PyObject *fn)
{
    if (!PyFunction_Check(fn))
        return 0;
    PyObject *mod = ((PyFunctionObject *)fn)->func_module;
    PyObject *name = ((PyFunctionObject *)fn)->func_qualname;
    if (!mod || !PyUnicode_Check(mod) || !name || !PyUnicode_Check(name))
        return 0;
    const char *m = PyUnicode_AsUTF8(mod), *n = PyUnicode_AsUTF8(name);
    if (!m || !n)
        return 0;
    return (!strcmp(n, "is_compiling") || !strcmp(n, "is_dynamo_compiling")) &&
           (!strcmp(m, "torch.compiler") || !strcmp(m, "torch._dynamo.external_utils") ||
            !strcmp(m, "torch._utils") || !strcmp(m, "torch._dynamo.eval_frame") ||
            !strcmp(m, "torch._dynamo"));
}

static tvar *const_tv(tracer *tr, PyObject *o)
{
    return cdy_tv_const(tr, o);
}

static int npos(int nargs, PyObject *kwnames)
{
    return nargs - (kwnames ? (int)PyTuple_GET_SIZE(kwnames) : 0);
}

/* ---- containers ---------------------------------------------------------------------- */

/* dict / OrderedDict / defaultdict(...) as a DICT of class cls; NULL when stopped. */
static tvar *make_dict(tracer *tr, PyObject *cls, tvar **args, int nargs, PyObject *kwnames)
{
    int np = npos(nargs, kwnames), first = 0;
    tvar *d = cdy_tv_new(tr, TV_DICT);
    if (!d)
        return NULL;
    d->obj = cls == (PyObject *)&PyDict_Type ? NULL : cls;
    if (cls == ddict_type) {
        if (np >= 1 && !cdy_tv_none(args[0]))
            d->store = args[0];
        first = 1;
    }
    if (np - first > 1) {
        cdy_tr_stop(tr, CALL_ARG_COUNT, fname_dict, 1, np - first);
        return NULL;
    }
    if (np > first && cdy_dict_update(tr, d, args[first]))
        return NULL;
    for (int k = np; k < nargs; k++)
        if (cdy_dict_set(tr, d, PyTuple_GET_ITEM(kwnames, k - np), args[k]))
            return NULL;
    return d;
}

/* set(it) / frozenset(it): a TV_SET (a frozenset of constants: a constant). */
static tvar *make_set(tracer *tr, PyObject *cls, tvar **args, int nargs)
{
    tvar *s = cdy_set_from(tr, nargs ? args[0] : NULL);
    if (!s || cls == (PyObject *)&PySet_Type)
        return s;
    for (int i = 0; i < s->n; i++)
        if (s->items[i]->kind != TV_CONST) {
            cdy_tr_stop(tr, SET_MEMBER);
            return NULL;
        }
    return const_tv(tr, PyFrozenSet_New(s->obj));
}

/* ---- iteration helpers -------------------------------------------------------------- */

/* The remaining items of iterable v as a TV_ITER, consumed from v when v is one. */
static tvar *drain(tracer *tr, tvar *v)
{
    tvar *it = cdy_iterate(tr, v);
    if (!it)
        return NULL;
    tvar *r = cdy_tv_seq(tr, TV_ITER, it->items + it->pos, it->n - it->pos);
    if (it == v)
        it->pos = it->n;
    return r;
}

/* map(f, *iterables): f traced per item, as a TV_ITER. */
static tvar *do_map(tracer *tr, tvar **args, int nargs)
{
    if (nargs < 2 || nargs > 9) {
        cdy_tr_stop(tr, CALL_ARG_COUNT, fname_map, 2, nargs);
        return NULL;
    }
    tvar *its[8];
    int m = 1 << 30;
    for (int i = 1; i < nargs; i++) {
        if (!(its[i - 1] = drain(tr, args[i])))
            return NULL;
        if (its[i - 1]->n < m)
            m = its[i - 1]->n;
    }
    tvar **out = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(m + 1));
    for (int k = 0; out && k < m; k++) {
        tvar *row[8];
        for (int i = 0; i < nargs - 1; i++)
            row[i] = its[i]->items[k];
        if (!(out[k] = cdy_call(tr, args[0], row, nargs - 1, NULL)))
            return NULL;
    }
    return out ? cdy_tv_seq(tr, TV_ITER, out, m) : NULL;
}

/* filter(f, iterable): the items for which f(item) (or the item, f None) is true. */
static tvar *do_filter(tracer *tr, tvar **args, int nargs)
{
    tvar *it = nargs == 2 ? drain(tr, args[1]) : NULL;
    if (!it) {
        if (nargs != 2)
            cdy_tr_stop(tr, CALL_ARG_COUNT, fname_filter, 2, nargs);
        return NULL;
    }
    tvar **out = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(it->n + 1));
    int m = 0;
    for (int k = 0; out && k < it->n; k++) {
        tvar *x = it->items[k];
        tvar *c = cdy_tv_none(args[0]) ? x : cdy_call(tr, args[0], &x, 1, NULL);
        int t = c ? cdy_truth(tr, c) : -1;
        if (t < 0)
            return NULL;
        if (t)
            out[m++] = x;
    }
    return out ? cdy_tv_seq(tr, TV_ITER, out, m) : NULL;
}

/* functools.reduce(f, iterable[, initial]). */
static tvar *do_reduce(tracer *tr, tvar **args, int nargs)
{
    tvar *it = nargs == 2 || nargs == 3 ? drain(tr, args[1]) : NULL;
    if (!it) {
        if (nargs != 2 && nargs != 3)
            cdy_tr_stop(tr, CALL_ARG_COUNT, fname_reduce, 2, nargs);
        return NULL;
    }
    int k = 0;
    tvar *acc = nargs == 3 ? args[2] : it->n ? it->items[k++] : NULL;
    if (!acc) {
        cdy_tr_stop(tr, REDUCE_EMPTY);
        return NULL;
    }
    for (; acc && k < it->n; k++) {
        tvar *pair[2] = {acc, it->items[k]};
        acc = cdy_call(tr, args[0], pair, 2, NULL);
    }
    return acc;
}

/* sorted(iterable, key=None, reverse=False): a new LIST. */
static tvar *do_sorted(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    int np = npos(nargs, kwnames);
    tvar *key = cdy_kwarg(args, nargs, kwnames, "key"), *rev = cdy_kwarg(args, nargs, kwnames, "reverse");
    if (np != 1 || nargs != 1 + (key != NULL) + (rev != NULL)) {
        cdy_tr_stop(tr, CALL_ARG_COUNT, fname_sorted, 1, np);
        return NULL;
    }
    int reverse = rev ? cdy_truth(tr, rev) : 0;
    tvar *it = reverse >= 0 ? drain(tr, args[0]) : NULL;
    tvar *l = it ? cdy_tv_seq(tr, TV_LIST, it->items, it->n) : NULL;
    return l && !cdy_list_sort(tr, l, key, reverse) ? l : NULL;
}

/* min / max over an iterable or the arguments, with key= (and default=): the
 * first extreme item by the keys (constants), as Python picks it. */
static tvar *do_minmax(tracer *tr, int is_max, tvar **args, int nargs, PyObject *kwnames,
                       int *handled)
{
    int np = npos(nargs, kwnames);
    tvar *key = cdy_kwarg(args, nargs, kwnames, "key"), *dflt = cdy_kwarg(args, nargs, kwnames, "default");
    *handled = key != NULL && np >= 1 && nargs == np + 1 + (dflt != NULL);
    if (!*handled)
        return NULL;   /* without a key: folded on constants by the caller */
    tvar *it = np == 1 ? drain(tr, args[0]) : cdy_tv_seq(tr, TV_ITER, args, np);
    if (!it)
        return NULL;
    if (!it->n) {
        if (!dflt)
            cdy_tr_stop(tr, MINMAX_EMPTY, is_max ? fname_max : fname_min);
        return dflt;
    }
    tvar *best = NULL;
    PyObject *bk = NULL;
    for (int k = 0; k < it->n; k++) {
        tvar *kv = cdy_tv_none(key) ? it->items[k] : cdy_call(tr, key, &it->items[k], 1, NULL);
        PyObject *ko = kv ? cdy_key_of(kv) : NULL;
        if (!ko) {
            if (kv)
                cdy_tr_stop(tr, SORT_KEY);
            return NULL;
        }
        int better = !bk ? 1 : PyObject_RichCompareBool(ko, bk, is_max ? Py_GT : Py_LT);
        if (better < 0) {
            cdy_tr_stop_exc(tr, RAISED_OPERATOR, is_max ? sym_gt : sym_lt);
            return NULL;
        }
        if (better) {
            best = it->items[k];
            bk = ko;
        }
    }
    return best;
}

/* any / all over an iterable of symbolic values (their truth decided at trace time). */
static tvar *do_anyall(tracer *tr, int is_any, tvar *v)
{
    tvar *it = drain(tr, v);
    if (!it)
        return NULL;
    for (int k = 0; k < it->n; k++) {
        int t = cdy_truth(tr, it->items[k]);
        if (t < 0)
            return NULL;
        if (t == is_any)
            return const_tv(tr, PyBool_FromLong(is_any));
    }
    return const_tv(tr, PyBool_FromLong(!is_any));
}

/* callable(v): 1 / 0 from v's kind and type. */
static int is_callable(tvar *v)
{
    switch (v->kind) {
    case TV_FUNC: case TV_BOUND: case TV_METHOD: case TV_BMETH: case TV_PARTIAL:
        return 1;
    case TV_INST:
        return ((PyTypeObject *)v->obj)->tp_call != NULL;
    case TV_CONST: case TV_OBJ:
        return PyCallable_Check(v->obj);
    default:
        return 0;
    }
}

/* zip(*iterables, strict=...): tuples of the items, strict: equal lengths or ValueError. */
static tvar *do_zip(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    int np = npos(nargs, kwnames);
    tvar *strict = cdy_kwarg(args, nargs, kwnames, "strict");
    int st = strict ? cdy_truth(tr, strict) : 0;
    if (st < 0 || np > 16 || nargs != np + (strict != NULL)) {
        if (st >= 0)
            cdy_tr_stop(tr, CALL_ARG_COUNT, fname_zip, 16, np);
        return NULL;
    }
    tvar *its[16];
    int m = np ? 1 << 30 : 0;
    for (int i = 0; i < np; i++) {
        if (!(its[i] = drain(tr, args[i])))
            return NULL;
        if (st && i && its[i]->n != its[0]->n) {
            cdy_tr_stop(tr, ZIP_STRICT);
            return NULL;
        }
        if (its[i]->n < m)
            m = its[i]->n;
    }
    tvar **rows = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(m + 1));
    for (int k = 0; rows && k < m; k++) {
        tvar *row[16];
        for (int i = 0; i < np; i++)
            row[i] = its[i]->items[k];
        if (!(rows[k] = cdy_tv_seq(tr, TV_TUPLE, row, np)))
            return NULL;
    }
    return rows ? cdy_tv_seq(tr, TV_ITER, rows, m) : NULL;
}

/* next(it[, default]). */
static tvar *do_next(tracer *tr, tvar **args, int nargs)
{
    tvar *it = args[0];
    if (it->kind != TV_ITER) {
        cdy_tr_stop(tr, FOR_ITER_NON_ITER);
        return NULL;
    }
    if (it->self && it->self->kind == TV_LIST) {   /* a list's iterator sees its changes */
        it->items = it->self->items;
        it->n = it->self->n;
    }
    if (it->pos < it->n)
        return it->items[it->pos++];
    if (nargs == 2)
        return args[1];
    cdy_tr_stop(tr, STOP_ITERATION);
    return NULL;
}

/* ---- functools.partial --------------------------------------------------------------- */

/* functools.partial(f, *args, **kw) as a TV_PARTIAL (a partial of a partial flattened). */
static tvar *make_partial(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    int np = npos(nargs, kwnames), nk = nargs - np;
    if (np < 1) {
        cdy_tr_stop(tr, CALL_ARG_COUNT, fname_partial, 1, np);
        return NULL;
    }
    tvar *inner = args[0];
    int ip = inner->kind == TV_PARTIAL ? inner->pos : 0, ik = inner->kind == TV_PARTIAL ? inner->n - ip : 0;
    tvar *p = cdy_tv_new(tr, TV_PARTIAL);
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(ip + ik + nargs + 1));
    PyObject **keys = cdy_arena_alloc(&tr->t->arena, sizeof(PyObject *) * (size_t)(ik + nk + 1));
    if (!p || !items || !keys)
        return NULL;
    int n = 0, kn = 0;
    for (int i = 0; i < ip; i++)
        items[n++] = inner->items[i];
    for (int i = 1; i < np; i++)
        items[n++] = args[i];
    p->pos = n;
    for (int i = 0; i < ik; i++) {   /* the inner's keywords, overridden by the new ones */
        int dup = 0;
        for (int k = 0; k < nk && !dup; k++)
            dup = !PyUnicode_Compare(inner->keys[i], PyTuple_GET_ITEM(kwnames, k));
        if (!dup) {
            keys[kn++] = inner->keys[i];
            items[n++] = inner->items[ip + i];
        }
    }
    for (int k = 0; k < nk; k++) {
        keys[kn++] = PyTuple_GET_ITEM(kwnames, k);
        items[n++] = args[np + k];
    }
    if (kwnames && !cdy_tr_keep(tr, Py_NewRef(kwnames)))
        return NULL;
    p->self = inner->kind == TV_PARTIAL ? inner->self : inner;
    p->items = items;
    p->keys = keys;
    p->n = n;
    return p;
}

/* A TV_PARTIAL for a functools.partial object read from the frame (fixed with it: its
 * func, args and keywords are read-only); NULL when stopped. */
static tvar *frame_partial(tracer *tr, PyObject *p)
{
    PyObject *fn = PyObject_GetAttrString(p, "func"), *a = PyObject_GetAttrString(p, "args");
    PyObject *kw = PyObject_GetAttrString(p, "keywords");
    tvar *r = NULL;
    if (fn && a && kw && PyTuple_Check(a) && PyDict_Check(kw) && cdy_tr_keep(tr, Py_NewRef(fn)) &&
        cdy_tr_keep(tr, Py_NewRef(a)) && cdy_tr_keep(tr, Py_NewRef(kw))) {
        int np = (int)PyTuple_GET_SIZE(a), nk = (int)PyDict_GET_SIZE(kw);
        tvar **args = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(np + nk + 2));
        PyObject *names = PyTuple_New(nk), *k, *v;
        Py_ssize_t pos = 0;
        int ok = args && names && (args[0] = cdy_wrap(tr, fn, NULL, 0));
        for (int i = 0; ok && i < np; i++)
            ok = (args[1 + i] = cdy_wrap(tr, PyTuple_GET_ITEM(a, i), NULL, 0)) != NULL;
        for (int i = 0; ok && PyDict_Next(kw, &pos, &k, &v); i++) {
            PyTuple_SET_ITEM(names, i, Py_NewRef(k));
            ok = (args[1 + np + i] = cdy_wrap(tr, v, NULL, 0)) != NULL;
        }
        if (ok && cdy_tr_keep(tr, Py_NewRef(names)))
            r = make_partial(tr, args, 1 + np + nk, nk ? names : NULL);
        Py_XDECREF(names);
    }
    Py_XDECREF(fn);
    Py_XDECREF(a);
    Py_XDECREF(kw);
    if (!r && tr->t->status == CDY_TRACE_OK)
        cdy_tr_stop_exc(tr, PY_ERROR);
    return r;
}

/* See trace.h: a call of partial p. */
tvar *cdy_partial_call(tracer *tr, tvar *p, tvar **args, int nargs, PyObject *kwnames)
{
    int np = npos(nargs, kwnames), nk = nargs - np, pk = p->n - p->pos;
    tvar **all = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(p->n + nargs + 1));
    PyObject *names = pk + nk ? PyTuple_New(pk + nk) : NULL;
    if (!all || (pk + nk && !names)) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    int n = 0, kn = 0;
    for (int i = 0; i < p->pos; i++)
        all[n++] = p->items[i];
    for (int i = 0; i < np; i++)
        all[n++] = args[i];
    for (int i = 0; i < pk; i++) {   /* the partial's keywords, unless the call gives them */
        int dup = 0;
        for (int k = 0; k < nk && !dup; k++)
            dup = !PyUnicode_Compare(p->keys[i], PyTuple_GET_ITEM(kwnames, k));
        if (!dup) {
            PyTuple_SET_ITEM(names, kn++, Py_NewRef(p->keys[i]));
            all[n++] = p->items[p->pos + i];
        }
    }
    for (int k = 0; k < nk; k++) {
        PyTuple_SET_ITEM(names, kn++, Py_NewRef(PyTuple_GET_ITEM(kwnames, k)));
        all[n++] = args[np + k];
    }
    if (names && kn < pk + nk && _PyTuple_Resize(&names, kn) < 0) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    if (names && !cdy_tr_keep(tr, names))
        return NULL;
    return cdy_call(tr, p->self, all, n, kn ? names : NULL);
}

/* See trace.h: p.func, p.args, p.keywords. */
tvar *cdy_partial_attr(tracer *tr, tvar *p, PyObject *name)
{
    const char *n = PyUnicode_AsUTF8(name);
    if (n && !strcmp(n, "func"))
        return p->self;
    if (n && !strcmp(n, "args"))
        return cdy_tv_seq(tr, TV_TUPLE, p->items, p->pos);
    if (n && !strcmp(n, "keywords")) {
        tvar *d = cdy_tv_new(tr, TV_DICT);
        for (int i = p->pos; d && i < p->n; i++)
            if (cdy_dict_set(tr, d, p->keys[i - p->pos], p->items[i]))
                return NULL;
        return d;
    }
    cdy_tr_stop(tr, ATTR_OF_VALUE, n ? n : "?");
    return NULL;
}

/* ---- dataclasses ------------------------------------------------------------------- */

/* The class fixed by v's kind or guard, or NULL: an instance built here, an object
 * guarded by type or identity, a class. */
static PyObject *class_of(tvar *v)
{
    if (v->kind == TV_INST)
        return v->obj;
    if ((v->kind == TV_OBJ || v->kind == TV_CONST) && v->obj)
        return PyType_Check(v->obj) ? v->obj : (PyObject *)Py_TYPE(v->obj);
    return NULL;
}

/* dataclasses.fields(x) / is_dataclass(x) of an instance or class whose class is
 * known: the class's Field objects (fixed with it) / a constant. */
static tvar *dataclass_query(tracer *tr, PyObject *fn, tvar *x)
{
    PyObject *cls = class_of(x);
    if (!cls) {
        cdy_tr_stop(tr, DATACLASS_QUERY);
        return NULL;
    }
    PyObject *r = PyObject_CallOneArg(fn, cls);
    if (!r) {
        cdy_tr_stop_exc(tr, RAISED_CALL, PyUnicode_AsUTF8(((PyFunctionObject *)fn)->func_qualname));
        return NULL;
    }
    if (cdy_is_const(r))
        return const_tv(tr, r);
    if (!cdy_tr_keep(tr, r) || !PyTuple_Check(r)) {
        cdy_tr_stop(tr, DATACLASS_QUERY);
        return NULL;
    }
    int n = (int)PyTuple_GET_SIZE(r);
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
    for (int i = 0; items && i < n; i++) {
        tvar *f = cdy_tv_new(tr, TV_OBJ);
        if (!f)
            return NULL;
        f->obj = PyTuple_GET_ITEM(r, i);
        f->fixed = 1;
        items[i] = f;
    }
    return items ? cdy_tv_seq(tr, TV_TUPLE, items, n) : NULL;
}

/* The name of fn when it is a function of the builtins module, else "". */
static const char *builtin_fn_name(PyObject *fn)
{
    if (!PyCFunction_Check(fn) || !PyCFunction_GET_SELF(fn) || !PyModule_Check(PyCFunction_GET_SELF(fn)))
        return "";
    const char *m = PyModule_GetName(PyCFunction_GET_SELF(fn));
    if (!m) {
        PyErr_Clear();
        return "";
    }
    return strcmp(m, "builtins") ? "" : ((PyCFunctionObject *)fn)->m_ml->ml_name;
}

/* ---- inspect.signature --------------------------------------------------------------- */

/* A fixed TV_OBJ for o (new reference: kept), or a constant. */
static tvar *fixed_tv(tracer *tr, PyObject *o)
{
    if (!o || !cdy_tr_keep(tr, o))
        return NULL;
    if (cdy_is_const(o))
        return cdy_tv_const(tr, Py_NewRef(o));
    tvar *v = cdy_tv_new(tr, TV_OBJ);
    if (v) {
        v->obj = o;
        v->fixed = 1;
    }
    return v;
}

/* inspect.signature(f) of a callable whose signature the trace knows: a function
 * (fixed by its guard: identity, or code and defaults), a method of a class fixed by
 * its instance's guard, a module; the Signature object, fixed.  NULL when stopped. */
static tvar *do_signature(tracer *tr, tvar *f)
{
    PyObject *real = NULL;
    int drop_first = 0;
    if ((f->kind == TV_OBJ && !f->by_type) || f->kind == TV_FUNC || f->kind == TV_CONST)
        real = Py_NewRef(f->obj);
    else if (f->kind == TV_OBJ && f->by_type && PyObject_TypeCheck(f->obj, (PyTypeObject *)cdy_module_type))
        real = Py_NewRef(f->obj);   /* a module: its forward's signature, fixed by its type */
    else if (f->kind == TV_BOUND && f->self->kind == TV_OBJ && f->self->obj)
        real = PyObject_CallFunctionObjArgs(method_type, f->obj, f->self->obj, NULL);
    else if (f->kind == TV_BOUND) {
        real = Py_NewRef(f->obj);
        drop_first = 1;
    }
    if (!real) {
        if (!PyErr_Occurred())
            cdy_tr_stop(tr, SIGNATURE_OF);
        else
            cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    PyObject *sig = PyObject_CallOneArg(signature_fn, real);
    Py_DECREF(real);
    if (sig && drop_first) {   /* bound to an object the trace made: its first parameter is taken */
        PyObject *params = PyObject_GetAttrString(sig, "parameters");
        PyObject *vals = params ? PyObject_CallMethod(params, "values", NULL) : NULL;
        PyObject *lst = vals ? PySequence_List(vals) : NULL;
        PyObject *rest = lst ? PyList_GetSlice(lst, 1, PyList_GET_SIZE(lst)) : NULL;
        PyObject *kw = rest ? Py_BuildValue("{s:O}", "parameters", rest) : NULL;
        PyObject *meth = kw ? PyObject_GetAttrString(sig, "replace") : NULL;
        PyObject *empty = PyTuple_New(0);
        PyObject *s2 = meth && empty ? PyObject_Call(meth, empty, kw) : NULL;
        Py_XDECREF(params);
        Py_XDECREF(vals);
        Py_XDECREF(lst);
        Py_XDECREF(rest);
        Py_XDECREF(kw);
        Py_XDECREF(meth);
        Py_XDECREF(empty);
        Py_SETREF(sig, s2);
    }
    if (!sig) {
        cdy_tr_stop_exc(tr, RAISED_CALL, fname_signature);
        return NULL;
    }
    return fixed_tv(tr, sig);
}

/* See trace.h: fn(*args) where fn is a builtin method of a fixed object
 * (sig.parameters.items(), field.name.startswith(...)) and the arguments are
 * constants or fixed: run now, the result fixed.  *handled 0 otherwise. */
tvar *cdy_call_fixed_method(tracer *tr, tvar *callable, tvar **args, int nargs,
                            PyObject *kwnames, int *handled)
{
    PyObject *fn = callable->obj;
    if (callable->fixed && PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) &&
        PyDict_Check(PyCFunction_GET_SELF(fn)) && !kwnames && nargs == 2 &&
        !strcmp(((PyCFunctionObject *)fn)->m_ml->ml_name, "get") &&
        (args[0]->kind == TV_CONST || (args[0]->kind == TV_OBJ && args[0]->fixed))) {
        /* fixed_dict.get(k, default) with any default: the item, fixed, or the default */
        PyObject *v = PyDict_GetItemWithError(PyCFunction_GET_SELF(fn), args[0]->obj);
        *handled = 1;
        if (!v && PyErr_Occurred()) {
            cdy_tr_stop_exc(tr, RAISED_DICT_KEY);
            return NULL;
        }
        return v ? cdy_fixed_value(tr, v) : args[1];
    }
    *handled = callable->fixed && (PyCFunction_Check(fn) || Py_IS_TYPE(fn, &PyMethodDescr_Type) ||
                                   Py_IS_TYPE(fn, cdy_pc_method_wrapper_type()));
    PyObject *self = *handled && PyCFunction_Check(fn) ? PyCFunction_GET_SELF(fn) : NULL;
    if (self && (PyDict_Check(self) || PyList_Check(self) || PyAnySet_Check(self) ||
                 PyByteArray_Check(self))) {   /* a mutable container: its readers only */
        static const char *readers[] = {"get", "keys", "values", "items", "copy", "index", "count",
                                        "__contains__", "__getitem__", "__len__", "issubset",
                                        "issuperset", "isdisjoint", "union", "intersection",
                                        "difference", NULL};
        const char *n = ((PyCFunctionObject *)fn)->m_ml->ml_name;
        int ok = 0;
        for (int i = 0; readers[i] && !ok; i++)
            ok = !strcmp(n, readers[i]);
        if (!ok) {
            cdy_tr_stop(tr, METHOD_UNSUPPORTED, n, Py_TYPE(self)->tp_name);
            return NULL;
        }
    }
    for (int i = 0; *handled && i < nargs; i++)
        *handled = args[i]->kind == TV_CONST || (args[i]->kind == TV_OBJ && args[i]->fixed);
    if (!*handled)
        return NULL;
    PyObject **pa = cdy_arena_alloc(&tr->t->arena, sizeof(PyObject *) * (size_t)(nargs + 1));
    if (!pa) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    for (int i = 0; i < nargs; i++)
        pa[i] = args[i]->obj;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *r = PyObject_Vectorcall(fn, pa, (size_t)(nargs - nkw), kwnames);
    if (!r) {
        cdy_tr_stop_exc(tr, RAISED_CALL, fname_method);
        return NULL;
    }
    return fixed_tv(tr, r);
}

/* See trace.h: os.environ.get(k[, d]), os.environ[k], os.environ.__contains__(k): the
 * answer read now, guarded (`k in os.environ` by a CONTAINS guard, the value by its
 * item source): a guarded constant, so the compiled code follows the environment. */
tvar *cdy_environ_call(tracer *tr, tvar *bound, tvar **args, int nargs, PyObject *kwnames)
{
    PyObject *fname = ((PyFunctionObject *)bound->obj)->func_name;
    const char *n = PyUnicode_AsUTF8(fname);
    tvar *env = bound->self;
    if (!n || kwnames || nargs < 1 || nargs > 2 || args[0]->kind != TV_CONST ||
        !PyUnicode_Check(args[0]->obj) || (strcmp(n, "get") && nargs == 2) ||
        (strcmp(n, "get") && strcmp(n, "__getitem__") && strcmp(n, "__contains__"))) {
        tvar **all = cdy_prepend(tr, env, args, nargs);   /* another method: traced as written */
        return all ? cdy_inline(tr, bound->obj, all, nargs + 1, kwnames) : NULL;
    }
    int has = cdy_contains_guarded(tr, env, args[0]);
    if (has < 0) {
        if (has == -1)
            cdy_tr_stop(tr, IN_OP);
        return NULL;
    }
    if (!strcmp(n, "__contains__"))
        return const_tv(tr, PyBool_FromLong(has));
    if (!has) {
        if (!strcmp(n, "get"))
            return nargs == 2 ? args[1] : const_tv(tr, Py_NewRef(Py_None));
        cdy_tr_stop(tr, KEY_ERROR);
        return NULL;
    }
    PyObject *v = PyObject_GetItem(env->obj, args[0]->obj);
    const cdy_src *s = v ? cdy_src_step(tr, env->src, args[0]->obj, 1) : NULL;
    tvar *r = s ? cdy_wrap(tr, v, s, 1) : NULL;
    Py_XDECREF(v);
    if (!s)
        cdy_tr_stop_exc(tr, RAISED_SUBSCRIPT);
    return r;
}

/* ---- itertools --------------------------------------------------------------------- */

/* A TV_ITER over the items of every iterable in its[0..n). */
static tvar *do_chain(tracer *tr, tvar **its, int n)
{
    tvar *out = cdy_tv_seq(tr, TV_LIST, NULL, 0);
    for (int i = 0; out && i < n; i++)
        if (cdy_list_extend(tr, out, its[i]))
            return NULL;
    return out ? cdy_tv_seq(tr, TV_ITER, out->items, out->n) : NULL;
}

/* islice(it, stop) / islice(it, start, stop[, step]): the items taken, as a TV_ITER; an
 * iterator argument is consumed up to the last item taken, as islice does. */
static tvar *do_islice(tracer *tr, tvar **args, int nargs)
{
    long long b[3] = {0, -1, 1};
    int nb = nargs - 1;
    for (int i = 0; i < nb; i++) {
        long long v;
        int slot = nb == 1 ? 1 : i;
        if (cdy_tv_none(args[1 + i]))
            continue;
        if (!cdy_const_int(args[1 + i], &v) || v < 0 || (slot == 2 && v < 1)) {
            cdy_tr_stop(tr, SLICE_BOUNDS);
            return NULL;
        }
        b[slot] = v;
    }
    tvar *it = cdy_iterate(tr, args[0]);
    if (!it)
        return NULL;
    int avail = it->n - it->pos, stop = b[1] < 0 || b[1] > avail ? avail : (int)b[1], m = 0;
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(avail + 1));
    if (!items) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    int last = -1;
    for (long long k = b[0]; k < stop; k += b[2])
        items[m++] = it->items[it->pos + (last = (int)k)];
    if (it == args[0])
        it->pos += b[1] >= 0 && b[1] <= avail ? (int)b[1] : avail;   /* consumed through stop */
    (void)last;
    return cdy_tv_seq(tr, TV_ITER, items, m);
}

/* product(*its) (no repeat) / combinations(it, r): tuples of the items, in itertools' order. */
static tvar *do_product(tracer *tr, tvar **args, int nargs, int comb)
{
    tvar *pools[8];
    long long r = 0;
    int npool = comb ? 1 : nargs;
    if (npool > 8 || (comb && (nargs != 2 || !cdy_const_int(args[1], &r) || r < 0 || r > 8))) {
        cdy_tr_stop(tr, CALL_ARG_COUNT, comb ? fname_combinations : fname_product, 8, nargs);
        return NULL;
    }
    for (int i = 0; i < npool; i++)
        if (!(pools[i] = drain(tr, args[i])))
            return NULL;
    int width = comb ? (int)r : npool, idx[8] = {0}, total = 0, cap = 1024;
    tvar **rows = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)cap);
    if (comb)
        for (int i = 0; i < width; i++)
            idx[i] = i;
    for (;;) {
        int ok = 1;
        for (int i = 0; i < width; i++)
            ok &= comb ? idx[i] < pools[0]->n : idx[i] < pools[i]->n;
        if (!ok || !rows)
            break;
        tvar *row[8];
        for (int i = 0; i < width; i++)
            row[i] = comb ? pools[0]->items[idx[i]] : pools[i]->items[idx[i]];
        if (total == cap || !(rows[total++] = cdy_tv_seq(tr, TV_TUPLE, row, width))) {
            cdy_tr_stop(tr, ITER_HUGE_CONST);
            return NULL;
        }
        int i = width - 1;   /* advance the rightmost index that can move */
        if (comb) {
            while (i >= 0 && idx[i] == pools[0]->n - width + i)
                i--;
            if (i < 0)
                break;
            idx[i]++;
            for (int j = i + 1; j < width; j++)
                idx[j] = idx[j - 1] + 1;
        }
        else {
            while (i >= 0 && ++idx[i] == pools[i]->n) {
                idx[i] = 0;
                i--;
            }
            if (i < 0)
                break;
        }
        if (!width)
            break;
    }
    return rows ? cdy_tv_seq(tr, TV_ITER, rows, total) : NULL;
}

/* fn(*args) of a functools.lru_cache wrapper fn (fixed by identity): its __wrapped__
 * function traced, as TorchDynamo inlines it (the cache only saves eager's time); NULL
 * when stopped. */
static tvar *call_lru_wrapped(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames)
{
    PyObject *w = cdy_tr_keep(tr, PyObject_GetAttrString(fn, "__wrapped__"));
    tvar *f = w && PyFunction_Check(w) ? cdy_fixed_value(tr, w) : NULL;
    PyErr_Clear();
    if (!f) {
        if (tr->t->status == CDY_TRACE_OK)
            cdy_tr_stop(tr, CALL_UNSUPPORTED, Py_TYPE(fn)->tp_name);
        return NULL;
    }
    return cdy_call(tr, f, args, nargs, kwnames);
}

/* ---- namedtuples ----------------------------------------------------------------------- */

/* 1 if calling namedtuple class cls runs the __new__ that collections.namedtuple made
 * (cls, or a subclass that overrides neither __new__ nor __init__). */
static int namedtuple_plain_new(PyObject *cls)
{
    PyObject *mro = ((PyTypeObject *)cls)->tp_mro, *fields = PyUnicode_FromString("_fields");
    PyObject *nw = PyUnicode_FromString("__new__");
    int r = 0;
    for (Py_ssize_t i = 0; fields && nw && mro && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *b = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (b->tp_dict && PyDict_GetItemWithError(b->tp_dict, fields)) {   /* the generated class */
            PyObject *own = PyDict_GetItemWithError(b->tp_dict, nw);
            r = own && own == _PyType_Lookup((PyTypeObject *)cls, nw) &&
                ((PyTypeObject *)cls)->tp_init == PyBaseObject_Type.tp_init;
            break;
        }
    }
    Py_XDECREF(fields);
    Py_XDECREF(nw);
    PyErr_Clear();
    return r;
}

/* cls(*args, **kw) of a namedtuple class: a TUPLE of class cls, its fields bound as the
 * generated __new__ binds them (defaults from _field_defaults); NULL when stopped (a
 * missing, repeated or unknown field: CALL_UNSUPPORTED, eager raises its TypeError). */
static tvar *make_namedtuple(tracer *tr, PyObject *cls, tvar **args, int nargs, PyObject *kwnames)
{
    PyObject *fields = cdy_tr_keep(tr, PyObject_GetAttrString(cls, "_fields"));
    PyObject *defs = fields ? cdy_tr_keep(tr, PyObject_GetAttrString(cls, "_field_defaults")) : NULL;
    int n = fields && PyTuple_Check(fields) ? (int)PyTuple_GET_SIZE(fields) : -1, np = npos(nargs, kwnames);
    tvar **items = n >= 0 && defs && PyDict_Check(defs) ? cdy_arena_alloc(&tr->t->arena,
                                                          sizeof(tvar *) * (size_t)(n + 1)) : NULL;
    PyErr_Clear();
    int ok = items && np <= n;
    for (int i = 0; ok && i < n; i++)
        items[i] = i < np ? args[i] : NULL;
    for (int k = np; ok && k < nargs; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k - np);
        int i = 0;
        while (i < n && PyUnicode_Compare(PyTuple_GET_ITEM(fields, i), key))
            i++;
        ok = i < n && !items[i];
        if (ok)
            items[i] = args[k];
    }
    for (int i = 0; ok && i < n; i++)
        if (!items[i]) {
            PyObject *d = PyDict_GetItemWithError(defs, PyTuple_GET_ITEM(fields, i));
            ok = d && cdy_is_const(d) && (items[i] = const_tv(tr, Py_NewRef(d)));
        }
    PyErr_Clear();
    tvar *t = ok ? cdy_tv_seq(tr, TV_TUPLE, items, n) : NULL;
    if (!ok)
        cdy_tr_stop(tr, CALL_UNSUPPORTED, ((PyTypeObject *)cls)->tp_name);
    if (t)
        t->obj = cls;
    return t;
}

/* ---- the dispatch -------------------------------------------------------------------- */

/* See trace.h. */
tvar *cdy_call_known(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames,
                     int *handled)
{
    int np = npos(nargs, kwnames);
    *handled = 1;
    if (builtins_init()) {
        cdy_tr_stop_exc(tr, TRACER_INIT);
        return NULL;
    }
    if (is_compiling_query(fn) && !nargs)   /* but eager's branch where it is a graph too */
        return const_tv(tr, Py_NewRef(cdy_optim_eager_branch(tr) ? Py_False : Py_True));
    if (fn == (PyObject *)&PyDict_Type || fn == odict_type || fn == ddict_type)
        return make_dict(tr, fn, args, nargs, kwnames);
    if ((fn == (PyObject *)&PySet_Type || fn == (PyObject *)&PyFrozenSet_Type) && nargs <= 1 &&
        !kwnames && (!nargs || args[0]->kind != TV_CONST || fn == (PyObject *)&PySet_Type))
        return make_set(tr, fn, args, nargs);
    if (PyType_Check(lru_type) && PyObject_TypeCheck(fn, (PyTypeObject *)lru_type))
        return call_lru_wrapped(tr, fn, args, nargs, kwnames);
    if (cdy_is_namedtuple_class(fn) && namedtuple_plain_new(fn))
        return make_namedtuple(tr, fn, args, nargs, kwnames);
    if (fn == (PyObject *)&PyMap_Type && !kwnames)
        return do_map(tr, args, nargs);
    if (fn == (PyObject *)&PyFilter_Type && !kwnames)
        return do_filter(tr, args, nargs);
    if (fn == reduce_fn && !kwnames)
        return do_reduce(tr, args, nargs);
    if (fn == partial_type)
        return make_partial(tr, args, nargs, kwnames);
    if (PyObject_TypeCheck(fn, (PyTypeObject *)partial_type)) {
        tvar *p = frame_partial(tr, fn);
        return p ? cdy_partial_call(tr, p, args, nargs, kwnames) : NULL;
    }
    if ((fn == copy_fn || fn == deepcopy_fn) && nargs == 1 && !kwnames)
        return cdy_copy(tr, args[0], fn == deepcopy_fn);
    if (fn == it_chain && !kwnames)
        return do_chain(tr, args, nargs);
    if ((fn == it_chain_from || (PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) == it_chain &&
                                 !strcmp(((PyCFunctionObject *)fn)->m_ml->ml_name, "from_iterable"))) &&
        nargs == 1 && !kwnames) {   /* chain.from_iterable: a new bound method at each read */
        tvar *outer = drain(tr, args[0]);
        return outer ? do_chain(tr, outer->items, outer->n) : NULL;
    }
    if (fn == it_islice && nargs >= 2 && nargs <= 4 && !kwnames)
        return do_islice(tr, args, nargs);
    if ((fn == it_product || fn == it_combinations) && !kwnames)
        return do_product(tr, args, nargs, fn == it_combinations);
    if (fn == device_t && !kwnames && nargs >= 1) {   /* torch.device("cpu"): a constant */
        int all = 1;
        for (int i = 0; i < nargs; i++)
            all &= args[i]->kind == TV_CONST;
        if (all) {
            PyObject *pa[4];
            for (int i = 0; i < nargs && i < 4; i++)
                pa[i] = args[i]->obj;
            PyObject *d = nargs <= 4 ? PyObject_Vectorcall(fn, pa, (size_t)nargs, NULL) : NULL;
            if (!d) {
                cdy_tr_stop_exc(tr, RAISED_CALL, fname_device);
                return NULL;
            }
            return const_tv(tr, d);
        }
    }
    if (fn == signature_fn && nargs == 1 && !kwnames)
        return do_signature(tr, args[0]);
    if ((fn == dc_fields || fn == dc_is_dc) && nargs == 1 && !kwnames)
        return dataclass_query(tr, fn, args[0]);
    if ((fn == (PyObject *)&PyUnicode_Type || !strcmp(builtin_fn_name(fn), "repr")) && nargs == 1 &&
        !kwnames && (args[0]->kind == TV_OBJ || args[0]->kind == TV_CONST) && PyType_Check(args[0]->obj) &&
        Py_TYPE(args[0]->obj)->tp_repr == PyType_Type.tp_repr)   /* str(cls): fixed by identity */
        return const_tv(tr, PyObject_Repr(args[0]->obj));
    const char *b = builtin_fn_name(fn);
    if (!strcmp(b, "sorted") && np >= 1 && !(np == nargs && args[0]->kind == TV_CONST))
        return do_sorted(tr, args, nargs, kwnames);
    if (!strcmp(b, "min") || !strcmp(b, "max")) {
        tvar *r = do_minmax(tr, b[1] == 'a', args, nargs, kwnames, handled);
        if (*handled)
            return r;
        *handled = 1;
        if (nargs == 2 && !kwnames && (r = cdy_sx_minmax(tr, b[1] == 'a', args[0], args[1])))
            return r;   /* of symbolic ints: a guarded choice */
    }
    if ((!strcmp(b, "any") || !strcmp(b, "all")) && nargs == 1 && !kwnames &&
        args[0]->kind != TV_CONST)
        return do_anyall(tr, b[1] == 'n', args[0]);
    if (!strcmp(b, "callable") && nargs == 1 && !kwnames)
        return const_tv(tr, PyBool_FromLong(is_callable(args[0])));
    if (fn == (PyObject *)&PyZip_Type && kwnames)
        return do_zip(tr, args, nargs, kwnames);
    if (!strcmp(b, "iter") && nargs == 1 && !kwnames)
        return drain(tr, args[0]);
    if (!strcmp(b, "next") && (nargs == 1 || nargs == 2) && !kwnames)
        return do_next(tr, args, nargs);
    *handled = 0;
    return NULL;
}

/* ---- rebuilding ------------------------------------------------------------------------ */

/* 1 if cls is a namedtuple class (a tuple subclass with _fields, made in Python). */
int cdy_is_namedtuple_class(PyObject *cls)
{
    if (!cls || !PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type) ||
        !(((PyTypeObject *)cls)->tp_flags & Py_TPFLAGS_HEAPTYPE))
        return 0;
    PyObject *f = PyObject_GetAttrString(cls, "_fields");
    int r = f && PyTuple_Check(f);
    Py_XDECREF(f);
    PyErr_Clear();
    return r;
}

/* A CDY_RET_CALL of callable fn with positional rets pos[0..np) and keyword rets. */
static cdy_ret *call_ret(tracer *tr, PyObject *fn, cdy_ret **pos, int np, PyObject **keys,
                         cdy_ret **kw, int nk)
{
    cdy_ret *r = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_ret));
    cdy_ret **items = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_ret *) * (size_t)(np + nk + 1));
    if (!r || !items) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    if (np)
        memcpy(items, pos, sizeof(cdy_ret *) * (size_t)np);
    if (nk)
        memcpy(items + np, kw, sizeof(cdy_ret *) * (size_t)nk);
    r->kind = CDY_RET_CALL;
    r->obj = fn;
    r->index = np;
    r->n = np + nk;
    r->items = items;
    r->keys = keys;
    return r;
}

static cdy_ret *made_call(tracer *tr, tvar *v, cdy_ret *(*make_ret)(tracer *, tvar *));

/* See trace.h: a set, partial, OrderedDict / defaultdict or namedtuple the trace made
 * (sets and partials made once: their identity is kept). */
cdy_ret *cdy_made_ret(tracer *tr, tvar *v, cdy_ret *(*make_ret)(tracer *, tvar *))
{
    if (v->kind == TV_SET || v->kind == TV_PARTIAL)
        return cdy_object_ret(tr, v, made_call, make_ret);
    return made_call(tr, v, make_ret);
}

/* The CALL that makes v. */
static cdy_ret *made_call(tracer *tr, tvar *v, cdy_ret *(*make_ret)(tracer *, tvar *))
{
    cdy_ret *a[3];
    if (v->kind == TV_SET || v->kind == TV_DICT) {
        tvar *plain = v->kind == TV_SET ? cdy_tv_seq(tr, TV_LIST, v->items, v->n)
                                        : cdy_container_copy(tr, v);
        if (!plain)
            return NULL;
        plain->obj = NULL;
        plain->store = NULL;
        int np = 0;
        if (v->kind == TV_DICT && v->obj == ddict_type) {   /* defaultdict(factory, items) */
            tvar *f = v->store ? v->store : cdy_tv_const(tr, Py_NewRef(Py_None));
            if (!f || !(a[np++] = make_ret(tr, f)))
                return NULL;
        }
        if (!(a[np] = make_ret(tr, plain)))
            return NULL;
        return call_ret(tr, v->kind == TV_SET ? (PyObject *)&PySet_Type : v->obj, a, np + 1,
                        NULL, NULL, 0);
    }
    int np = v->kind == TV_PARTIAL ? 1 + v->pos : v->n;
    cdy_ret **pos = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_ret *) * (size_t)(np + v->n + 1));
    if (!pos) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    if (v->kind == TV_PARTIAL) {
        if (!(pos[0] = make_ret(tr, v->self)))
            return NULL;
        for (int i = 0; i < v->n; i++)
            if (!(pos[1 + i] = make_ret(tr, v->items[i])))
                return NULL;
        return call_ret(tr, partial_type, pos, np, v->keys, pos + np, v->n - v->pos);
    }
    for (int i = 0; i < v->n; i++)   /* a namedtuple: cls(*items) */
        if (!(pos[i] = make_ret(tr, v->items[i])))
            return NULL;
    return call_ret(tr, v->obj, pos, v->n, NULL, NULL, 0);
}
