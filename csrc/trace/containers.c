/* containers.c - dict and list values of the trace and their methods.
 *
 * A container the trace made (a display, a comprehension, dict(...), a
 * **kwargs) is changed in place: every reference shares its tvar.  One read
 * from the frame (a list or dict argument, an attribute: it has a source and
 * a guard on its length or keys) is changed in the trace's copy too, and is
 * marked: its final contents are written into the caller's object after the
 * graph (cdy_mut_container, trace/mutate.c), as TorchDynamo replays side
 * effects.  Keys are constants or objects fixed by identity. */
#include "trace/trace.h"

#include <string.h>

/* ---- storage ------------------------------------------------------------ */

/* Make c's arrays its own with room for n items; 0, or -1 when stopped. */
int cdy_seq_reserve(tracer *tr, tvar *c, int n)
{
    if (c->cap > 0 && n <= c->cap)
        return 0;
    int cap = c->cap > 0 ? 2 * c->cap : 8;
    while (cap < n)
        cap *= 2;
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)cap);
    PyObject **keys = c->kind == TV_DICT ? cdy_arena_alloc(&tr->t->arena, sizeof(PyObject *) *
                                                           (size_t)cap) : NULL;
    if (!items || (c->kind == TV_DICT && !keys))
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    if (c->n) {
        memcpy(items, c->items, sizeof(tvar *) * (size_t)c->n);
        if (keys)
            memcpy(keys, c->keys, sizeof(PyObject *) * (size_t)c->n);
    }
    c->items = items;
    if (keys)
        c->keys = keys;
    c->cap = cap;
    return 0;
}

/* Record that c changed: a container of the frame gets its contents written back. */
static int changed(tracer *tr, tvar *c)
{
    return c->src ? cdy_mut_container(tr, c) : 0;
}

/* The key object of k: a constant, or an object fixed by identity; NULL (no stop) otherwise. */
PyObject *cdy_key_of(const tvar *k)
{
    if (k->kind == TV_CONST)
        return k->obj;
    if (k->kind == TV_OBJ && !k->by_type && k->obj)
        return k->obj;
    return NULL;
}

/* The position of key in dict d, -1 when absent, -2 when stopped (the key's == raised). */
int cdy_dict_find(tracer *tr, tvar *d, PyObject *key)
{
    for (int i = 0; i < d->n; i++) {
        if (d->keys[i] == key)
            return i;
        int eq = PyObject_RichCompareBool(d->keys[i], key, Py_EQ);
        if (eq < 0) {
            cdy_tr_stop_exc(tr, RAISED_DICT_KEY);
            return -2;
        }
        if (eq)
            return i;
    }
    return -1;
}

/* d[key] = v (a new key goes last, an existing one keeps its place); 0 or -1. */
int cdy_dict_set(tracer *tr, tvar *d, PyObject *key, tvar *v)
{
    int i = cdy_dict_find(tr, d, key);
    if (i == -2)
        return -1;
    if (i < 0) {
        if (PyObject_Hash(key) == -1)
            return cdy_tr_stop_exc(tr, RAISED_DICT_KEY);
        if (cdy_seq_reserve(tr, d, d->n + 1))
            return -1;
        i = d->n++;
        d->keys[i] = key;
    }
    else if (cdy_seq_reserve(tr, d, d->n))
        return -1;
    d->items[i] = v;
    return changed(tr, d);
}

/* Remove item i of c (a DICT or LIST); 0 or -1. */
static int remove_at(tracer *tr, tvar *c, int i)
{
    if (cdy_seq_reserve(tr, c, c->n))
        return -1;
    memmove(c->items + i, c->items + i + 1, sizeof(tvar *) * (size_t)(c->n - i - 1));
    if (c->kind == TV_DICT)
        memmove(c->keys + i, c->keys + i + 1, sizeof(PyObject *) * (size_t)(c->n - i - 1));
    c->n--;
    return changed(tr, c);
}

/* Insert v at position i of list l; 0 or -1. */
static int list_insert(tracer *tr, tvar *l, int i, tvar *v)
{
    if (cdy_seq_reserve(tr, l, l->n + 1))
        return -1;
    memmove(l->items + i + 1, l->items + i, sizeof(tvar *) * (size_t)(l->n - i));
    l->items[i] = v;
    l->n++;
    return changed(tr, l);
}

/* Append the items of iterable v to list l; 0 or -1. */
int cdy_list_extend(tracer *tr, tvar *l, tvar *v)
{
    tvar *it = cdy_iterate(tr, v);
    if (!it)
        return -1;
    int m = it->n - it->pos;
    if (cdy_seq_reserve(tr, l, l->n + m))
        return -1;
    memcpy(l->items + l->n, it->items + it->pos, sizeof(tvar *) * (size_t)m);
    l->n += m;
    if (it != v)
        it->pos = it->n;
    return changed(tr, l);
}

/* ---- equality of items ------------------------------------------------------ */

/* a == b for items of a container: 1 / 0, -1 stopped.  Equal tvars are the same
 * value; constants and objects fixed by identity compare as Python does; a
 * tensor or an object guarded by type cannot be compared at trace time. */
int cdy_items_equal(tracer *tr, tvar *a, tvar *b)
{
    if (a == b)
        return 1;
    PyObject *ka = cdy_key_of(a), *kb = cdy_key_of(b);
    if (ka && kb) {
        int r = PyObject_RichCompareBool(ka, kb, Py_EQ);
        static const char eq[] = "==";
        return r < 0 ? cdy_tr_stop_exc(tr, RAISED_OPERATOR, eq) : r;
    }
    if (a->kind == TV_TENSOR || b->kind == TV_TENSOR)
        return cdy_tr_stop(tr, IN_TENSORS);
    if ((a->kind == TV_NULL || b->kind == TV_NULL) || a->by_type || b->by_type)
        return cdy_tr_stop(tr, IN_BY_TYPE);
    if (a->kind == TV_INST || b->kind == TV_INST)
        return 0;   /* an object built here is only itself (no __eq__ of its own: see objects.c) */
    return cdy_tr_stop(tr, IN_OP);
}

/* The index of the first item of l equal to x, -1 when none, -2 stopped. */
static int list_index(tracer *tr, tvar *l, tvar *x)
{
    for (int i = 0; i < l->n; i++) {
        int eq = cdy_items_equal(tr, l->items[i], x);
        if (eq < 0)
            return -2;
        if (eq)
            return i;
    }
    return -1;
}

/* ---- dict methods --------------------------------------------------------------- */

static tvar *none_tv(tracer *tr)
{
    return cdy_tv_const(tr, Py_NewRef(Py_None));
}

/* The key object of argument k, or NULL with the trace stopped. */
static PyObject *key_arg(tracer *tr, tvar *k)
{
    PyObject *key = cdy_key_fixed(tr, k);
    if (!key)
        cdy_tr_stop(tr, DICT_KEY_NON_CONST);
    return key;
}

/* d[key] of a defaultdict d whose key is missing: factory() stored and returned. */
static tvar *dict_missing(tracer *tr, tvar *d, PyObject *key)
{
    if (!d->store) {
        PyObject *k = cdy_tr_keep(tr, PyObject_Repr(key));
        cdy_tr_stop(tr, KEY_ERROR_NAMED, k ? PyUnicode_AsUTF8(k) : "?");
        return NULL;
    }
    tvar *v = cdy_call(tr, d->store, NULL, 0, NULL);
    return v && !cdy_dict_set(tr, d, key, v) ? v : NULL;
}

/* d.update(other) / dict(other): other a dict, a view of items, a mapping read from the
 * frame, or an iterable of pairs; 0 or -1. */
int cdy_dict_update(tracer *tr, tvar *d, tvar *other)
{
    if (other->kind == TV_INST && other->store && other->store->kind == TV_DICT)
        other = other->store;
    if (other->kind == TV_DICT) {
        for (int i = 0; i < other->n; i++)
            if (cdy_dict_set(tr, d, other->keys[i], other->items[i]))
                return -1;
        return 0;
    }
    tvar *it = cdy_iterate(tr, other);
    if (!it)
        return -1;
    for (int i = it->pos; i < it->n; i++) {
        tvar *p = cdy_iterate(tr, it->items[i]);
        if (!p)
            return -1;
        if (p->n - p->pos != 2)
            return cdy_tr_stop(tr, DICT_UPDATE_PAIR);
        PyObject *key = key_arg(tr, p->items[p->pos]);
        if (!key || cdy_dict_set(tr, d, key, p->items[p->pos + 1]))
            return -1;
    }
    if (it != other)
        it->pos = it->n;
    return 0;
}

/* See trace.h.  A plain dict | a plain dict is a plain dict (dict.__or__ copies self
 * as a dict); |= updates d as dict.update does, for any dict class. */
tvar *cdy_dict_or(tracer *tr, tvar *d, tvar *other, int inplace, int *handled)
{
    *handled = d->kind == TV_DICT && (inplace || (other->kind == TV_DICT && !d->obj && !other->obj));
    if (!*handled)
        return NULL;
    tvar *r = inplace ? d : cdy_container_copy(tr, d);
    return r && !cdy_dict_update(tr, r, other) ? r : NULL;
}

/* A live view (keys 0, values 1, items 2) of dict d. */
static tvar *dict_view(tracer *tr, tvar *d, int which)
{
    tvar *view = cdy_tv_new(tr, TV_VIEW);
    if (view) {
        view->self = d;
        view->pos = which;
    }
    return view;
}

/* Number of positional arguments among nargs with kwnames. */
static int npos(int nargs, PyObject *kwnames)
{
    return nargs - (kwnames ? (int)PyTuple_GET_SIZE(kwnames) : 0);
}

/* A fresh copy of container c (same kind and class), not tied to c's source. */
tvar *cdy_container_copy(tracer *tr, tvar *c)
{
    tvar *r = cdy_tv_seq(tr, c->kind, c->items, c->n);
    if (!r)
        return NULL;
    r->obj = c->obj;
    r->store = c->store;
    if (c->kind == TV_DICT) {
        r->keys = cdy_arena_alloc(&tr->t->arena, sizeof(PyObject *) * (size_t)(c->n + 1));
        if (!r->keys) {
            cdy_tr_stop(tr, OUT_OF_MEMORY);
            return NULL;
        }
        if (c->n)
            memcpy(r->keys, c->keys, sizeof(PyObject *) * (size_t)c->n);
    }
    return r;
}

/* Method name of dict d; *handled 0 when it is not one handled here. */
static tvar *dict_method(tracer *tr, tvar *d, const char *name, tvar **args, int nargs,
                         PyObject *kwnames, int *handled)
{
    int np = npos(nargs, kwnames);
    *handled = 1;
    if ((!strcmp(name, "get") || !strcmp(name, "__getitem__") || !strcmp(name, "pop") ||
         !strcmp(name, "setdefault")) && np >= 1 && np <= 2 && np == nargs) {
        PyObject *key = key_arg(tr, args[0]);
        int i = key ? cdy_dict_find(tr, d, key) : -2;
        if (i == -2)
            return NULL;
        if (name[0] == 'g')   /* get */
            return i >= 0 ? d->items[i] : np == 2 ? args[1] : none_tv(tr);
        if (name[0] == '_' && np == 1)   /* __getitem__ */
            return i >= 0 ? d->items[i] : dict_missing(tr, d, key);
        if (name[0] == 'p') {   /* pop */
            if (i < 0 && np == 1) {
                PyObject *k = cdy_tr_keep(tr, PyObject_Repr(key));
                cdy_tr_stop(tr, KEY_ERROR_NAMED, k ? PyUnicode_AsUTF8(k) : "?");
                return NULL;
            }
            if (i < 0)
                return args[1];
            tvar *v = d->items[i];
            return remove_at(tr, d, i) ? NULL : v;
        }
        if (name[0] == 's') {   /* setdefault */
            if (i >= 0)
                return d->items[i];
            tvar *v = np == 2 ? args[1] : none_tv(tr);
            return v && !cdy_dict_set(tr, d, key, v) ? v : NULL;
        }
    }
    if ((!strcmp(name, "keys") || !strcmp(name, "values") || !strcmp(name, "items")) && !nargs)
        return dict_view(tr, d, name[0] == 'k' ? 0 : name[0] == 'v' ? 1 : 2);
    if (!strcmp(name, "update") && np <= 1) {
        if (np && cdy_dict_update(tr, d, args[0]))
            return NULL;
        for (int k = np; k < nargs; k++)
            if (cdy_dict_set(tr, d, PyTuple_GET_ITEM(kwnames, k - np), args[k]))
                return NULL;
        return none_tv(tr);
    }
    if (!strcmp(name, "clear") && !nargs) {
        d->n = 0;
        return changed(tr, d) ? NULL : none_tv(tr);
    }
    if (!strcmp(name, "copy") && !nargs)
        return cdy_container_copy(tr, d);
    if (!strcmp(name, "popitem") && !nargs) {
        if (!d->n) {
            cdy_tr_stop(tr, KEY_ERROR);
            return NULL;
        }
        tvar *p[2] = {cdy_tv_const(tr, Py_NewRef(d->keys[d->n - 1])), d->items[d->n - 1]};
        tvar *r = p[0] ? cdy_tv_seq(tr, TV_TUPLE, p, 2) : NULL;
        return r && !remove_at(tr, d, d->n - 1) ? r : NULL;
    }
    if (!strcmp(name, "__setitem__") && nargs == 2) {
        PyObject *key = key_arg(tr, args[0]);
        return key && !cdy_dict_set(tr, d, key, args[1]) ? none_tv(tr) : NULL;
    }
    if (!strcmp(name, "__delitem__") && nargs == 1) {
        PyObject *key = key_arg(tr, args[0]);
        int i = key ? cdy_dict_find(tr, d, key) : -2;
        if (i == -1)
            cdy_tr_stop(tr, KEY_ERROR);
        return i >= 0 && !remove_at(tr, d, i) ? none_tv(tr) : NULL;
    }
    if (!strcmp(name, "__contains__") && nargs == 1) {
        PyObject *key = key_arg(tr, args[0]);
        int i = key ? cdy_dict_find(tr, d, key) : -2;
        return i == -2 ? NULL : cdy_tv_const(tr, PyBool_FromLong(i >= 0));
    }
    if (!strcmp(name, "__len__") && !nargs)
        return cdy_tv_const(tr, PyLong_FromLong(d->n));
    if (!strcmp(name, "move_to_end") && np >= 1 && nargs <= 2) {   /* OrderedDict */
        PyObject *key = key_arg(tr, args[0]);
        int last = nargs == 2 ? cdy_truth(tr, args[1]) : 1;
        int i = key && last >= 0 ? cdy_dict_find(tr, d, key) : -2;
        if (i == -1)
            cdy_tr_stop(tr, KEY_ERROR);
        if (i < 0)
            return NULL;
        tvar *v = d->items[i];
        if (remove_at(tr, d, i) || cdy_seq_reserve(tr, d, d->n + 1))
            return NULL;
        int at = last ? d->n : 0;
        memmove(d->items + at + 1, d->items + at, sizeof(tvar *) * (size_t)(d->n - at));
        memmove(d->keys + at + 1, d->keys + at, sizeof(PyObject *) * (size_t)(d->n - at));
        d->items[at] = v;
        d->keys[at] = key;
        d->n++;
        return none_tv(tr);
    }
    *handled = 0;
    return NULL;
}

/* ---- list methods ---------------------------------------------------------------- */

/* A Python int argument as an index of a sequence of n items (negative from the end);
 * -1 when out of range (with clamp: clamped, as list.insert does), -2 stopped. */
static int index_arg(tracer *tr, tvar *a, int n, int clamp)
{
    long long i;
    if (!cdy_const_int(a, &i))
        return cdy_tr_stop(tr, SEQ_INDEX_TYPE), -2;
    if (i < 0)
        i += n;
    if (clamp)
        return i < 0 ? 0 : i > n ? n : (int)i;
    return i < 0 || i >= n ? -1 : (int)i;
}

/* list.sort(key=..., reverse=...) / sorted(): the items of l ordered by
 * their keys (constants; the key function traced per item), stable as
 * Python's sort; 0 or -1. */
int cdy_list_sort(tracer *tr, tvar *l, tvar *key, int reverse)
{
    static PyObject *first;
    if (!first) {
        PyObject *op = PyImport_ImportModule("operator");
        first = op ? PyObject_CallMethod(op, "itemgetter", "i", 0) : NULL;
        Py_XDECREF(op);
        if (!first)
            return cdy_tr_stop_exc(tr, PY_ERROR);
    }
    PyObject *pairs = PyList_New(l->n);
    if (!pairs)
        return cdy_tr_stop_exc(tr, PY_ERROR);
    for (int i = 0; i < l->n; i++) {
        tvar *k = key && !cdy_tv_none(key) ? cdy_call(tr, key, &l->items[i], 1, NULL) : l->items[i];
        PyObject *ko = k ? cdy_key_of(k) : NULL;
        if (!ko) {
            Py_DECREF(pairs);
            return k ? cdy_tr_stop(tr, SORT_KEY) : -1;
        }
        PyList_SET_ITEM(pairs, i, Py_BuildValue("(On)", ko, (Py_ssize_t)i));
    }
    PyObject *kw = Py_BuildValue("{s:O,s:O}", "key", first, "reverse", reverse ? Py_True : Py_False);
    PyObject *sort = PyObject_GetAttrString(pairs, "sort"), *empty = PyTuple_New(0);
    PyObject *ok = kw && sort && empty ? PyObject_Call(sort, empty, kw) : NULL;
    Py_XDECREF(kw);
    Py_XDECREF(sort);
    Py_XDECREF(empty);
    if (!ok) {
        Py_DECREF(pairs);
        return cdy_tr_stop_exc(tr, RAISED_SORT);
    }
    Py_DECREF(ok);
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(l->n + 1));
    for (int i = 0; items && i < l->n; i++)
        items[i] = l->items[PyLong_AsSsize_t(PyTuple_GET_ITEM(PyList_GET_ITEM(pairs, i), 1))];
    Py_DECREF(pairs);
    if (!items)
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    if (cdy_seq_reserve(tr, l, l->n))
        return -1;
    memcpy(l->items, items, sizeof(tvar *) * (size_t)l->n);
    return changed(tr, l);
}

/* The value of keyword `name` among a call's keyword arguments, or NULL. */
tvar *cdy_kwarg(tvar **args, int nargs, PyObject *kwnames, const char *name)
{
    int np = npos(nargs, kwnames);
    for (int k = np; k < nargs; k++)
        if (!PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, k - np), name))
            return args[k];
    return NULL;
}

/* Method name of list l; *handled 0 when it is not one handled here. */
static tvar *list_method(tracer *tr, tvar *l, const char *name, tvar **args, int nargs,
                         PyObject *kwnames, int *handled)
{
    int np = npos(nargs, kwnames);
    *handled = 1;
    if (!strcmp(name, "append") && nargs == 1) {
        if (cdy_seq_reserve(tr, l, l->n + 1))
            return NULL;
        l->items[l->n++] = args[0];
        return changed(tr, l) ? NULL : none_tv(tr);
    }
    if (!strcmp(name, "extend") && nargs == 1)
        return cdy_list_extend(tr, l, args[0]) ? NULL : none_tv(tr);
    if (!strcmp(name, "insert") && nargs == 2) {
        int i = index_arg(tr, args[0], l->n, 1);
        return i >= 0 && !list_insert(tr, l, i, args[1]) ? none_tv(tr) : NULL;
    }
    if (!strcmp(name, "pop") && nargs <= 1) {
        int i = nargs ? index_arg(tr, args[0], l->n, 0) : l->n - 1;
        if (i == -1 || (!nargs && !l->n)) {
            cdy_tr_stop(tr, SEQ_INDEX_RANGE);
            return NULL;
        }
        tvar *v = i >= 0 ? l->items[i] : NULL;
        return v && !remove_at(tr, l, i) ? v : NULL;
    }
    if ((!strcmp(name, "remove") || !strcmp(name, "index")) && nargs == 1) {
        int i = list_index(tr, l, args[0]);
        if (i == -1)
            cdy_tr_stop(tr, VALUE_NOT_IN_LIST);
        if (i < 0)
            return NULL;
        if (name[0] == 'i')
            return cdy_tv_const(tr, PyLong_FromLong(i));
        return remove_at(tr, l, i) ? NULL : none_tv(tr);
    }
    if (!strcmp(name, "count") && nargs == 1) {
        long c = 0;
        for (int i = 0; i < l->n; i++) {
            int eq = cdy_items_equal(tr, l->items[i], args[0]);
            if (eq < 0)
                return NULL;
            c += eq;
        }
        return cdy_tv_const(tr, PyLong_FromLong(c));
    }
    if (!strcmp(name, "clear") && !nargs) {
        l->n = 0;
        return changed(tr, l) ? NULL : none_tv(tr);
    }
    if (!strcmp(name, "copy") && !nargs)
        return cdy_tv_seq(tr, TV_LIST, l->items, l->n);
    if (!strcmp(name, "reverse") && !nargs) {
        if (cdy_seq_reserve(tr, l, l->n))
            return NULL;
        for (int a = 0, b = l->n - 1; a < b; a++, b--) {
            tvar *t = l->items[a];
            l->items[a] = l->items[b];
            l->items[b] = t;
        }
        return changed(tr, l) ? NULL : none_tv(tr);
    }
    if (!strcmp(name, "sort") && !np) {
        tvar *key = cdy_kwarg(args, nargs, kwnames, "key");
        tvar *rev = cdy_kwarg(args, nargs, kwnames, "reverse");
        int reverse = rev ? cdy_truth(tr, rev) : 0;
        if (reverse < 0 || nargs > (key != NULL) + (rev != NULL)) {
            if (reverse >= 0)
                cdy_tr_stop(tr, METHOD_UNSUPPORTED, name, "list");
            return NULL;
        }
        return cdy_list_sort(tr, l, key, reverse) ? NULL : none_tv(tr);
    }
    if (!strcmp(name, "__len__") && !nargs)
        return cdy_tv_const(tr, PyLong_FromLong(l->n));
    if (!strcmp(name, "__contains__") && nargs == 1) {
        int i = list_index(tr, l, args[0]);
        return i == -2 ? NULL : cdy_tv_const(tr, PyBool_FromLong(i >= 0));
    }
    if (!strcmp(name, "__setitem__") && nargs == 2)
        return cdy_seq_setitem(tr, l, args[0], args[1]) ? NULL : none_tv(tr);
    *handled = 0;
    return NULL;
}

/* l[k] = v on a list: an int index or a slice; 0 or -1. */
int cdy_seq_setitem(tracer *tr, tvar *l, tvar *k, tvar *v)
{
    if (k->kind == TV_CONST && PySlice_Check(k->obj)) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(k->obj, &start, &stop, &step) < 0)
            return cdy_tr_stop_exc(tr, RAISED_SLICE);
        Py_ssize_t m = PySlice_AdjustIndices(l->n, &start, &stop, step);
        tvar *it = cdy_iterate(tr, v);
        if (!it)
            return -1;
        int nv = it->n - it->pos;
        if (step != 1 && nv != m)
            return cdy_tr_stop(tr, LIST_ASSIGN_RANGE);
        if (step != 1) {
            if (cdy_seq_reserve(tr, l, l->n))
                return -1;
            for (Py_ssize_t j = 0; j < m; j++)
                l->items[start + j * step] = it->items[it->pos + j];
            return changed(tr, l);
        }
        tvar **vals = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(nv + 1));
        if (!vals || cdy_seq_reserve(tr, l, l->n - (int)m + nv))
            return vals ? -1 : cdy_tr_stop(tr, OUT_OF_MEMORY);
        memcpy(vals, it->items + it->pos, sizeof(tvar *) * (size_t)nv);
        memmove(l->items + start + nv, l->items + start + m,
                sizeof(tvar *) * (size_t)(l->n - start - m));
        memcpy(l->items + start, vals, sizeof(tvar *) * (size_t)nv);
        l->n += nv - (int)m;
        return changed(tr, l);
    }
    int i = index_arg(tr, k, l->n, 0);
    if (i == -1)
        return cdy_tr_stop(tr, LIST_ASSIGN_RANGE);
    if (i < 0 || cdy_seq_reserve(tr, l, l->n))
        return -1;
    l->items[i] = v;
    return changed(tr, l);
}

/* del c[k] on a dict or list (DELETE_SUBSCR); 0 or -1. */
int cdy_container_delitem(tracer *tr, tvar *c, tvar *k)
{
    if (c->kind == TV_DICT) {
        PyObject *key = key_arg(tr, k);
        int i = key ? cdy_dict_find(tr, c, key) : -2;
        if (i == -1)
            return cdy_tr_stop(tr, KEY_ERROR);
        return i < 0 ? -1 : remove_at(tr, c, i);
    }
    if (c->kind != TV_LIST)
        return cdy_tr_stop(tr, STORE_ITEM);
    if (k->kind == TV_CONST && PySlice_Check(k->obj)) {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(k->obj, &start, &stop, &step) < 0)
            return cdy_tr_stop_exc(tr, RAISED_SLICE);
        Py_ssize_t m = PySlice_AdjustIndices(c->n, &start, &stop, step);
        if (cdy_seq_reserve(tr, c, c->n))
            return -1;
        int w = 0;
        for (int i = 0; i < c->n; i++) {
            int hit = 0;
            for (Py_ssize_t j = 0; j < m && !hit; j++)
                hit = i == start + j * step;
            if (!hit)
                c->items[w++] = c->items[i];
        }
        c->n = w;
        return changed(tr, c);
    }
    int i = index_arg(tr, k, c->n, 0);
    if (i == -1)
        return cdy_tr_stop(tr, SEQ_INDEX_RANGE);
    return i < 0 ? -1 : remove_at(tr, c, i);
}

/* See trace.h. */
tvar *cdy_container_method(tracer *tr, tvar *self, const char *name, tvar **args, int nargs,
                           PyObject *kwnames)
{
    int handled = 0;
    tvar *r = NULL;
    if (self->kind == TV_DICT)
        r = dict_method(tr, self, name, args, nargs, kwnames, &handled);
    else if (self->kind == TV_LIST)
        r = list_method(tr, self, name, args, nargs, kwnames, &handled);
    else if (self->kind == TV_SET)
        return cdy_set_method(tr, self, name, args, nargs, kwnames);
    if (handled)
        return r;
    cdy_tr_stop(tr, METHOD_UNSUPPORTED, name,
                self->kind == TV_DICT ? "dict" : self->kind == TV_LIST ? "list" : "value");
    return NULL;
}
