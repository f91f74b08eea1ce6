/* sets.c - sets the trace makes ({a, b}, set comprehensions, set(...),
 * set operations).  A TV_SET holds its members as tvars (items[], in the
 * order they came) and a real Python set of their key objects (obj): the
 * members are constants or objects fixed by identity, so membership, the
 * operators and the iteration order are Python's own.  A set read from the
 * frame is an object guarded by identity: `k in s` on it adds a CONTAINS
 * guard (trace/vars.c); changing it stops the trace. */
#include "trace/trace.h"
#include "pyver/pycompat.h"

#include <string.h>

/* The tvar of member key k of set s (its key object), or NULL. */
static tvar *member(tvar *s, PyObject *k)
{
    for (int i = 0; i < s->n; i++)
        if (cdy_key_of(s->items[i]) == k)
            return s->items[i];
    return NULL;
}

/* Add v to set s (nothing when an equal member is there); 0 or -1 (stopped). */
int cdy_set_add(tracer *tr, tvar *s, tvar *v)
{
    PyObject *k = cdy_key_fixed(tr, v);
    if (!k)
        return cdy_tr_stop(tr, SET_MEMBER);
    int has = PySet_Contains(s->obj, k);
    if (has < 0)
        return cdy_tr_stop_exc(tr, RAISED_SET, Py_TYPE(k)->tp_name);
    if (has)
        return 0;
    if (PySet_Add(s->obj, k) < 0)
        return cdy_tr_stop_exc(tr, RAISED_SET, Py_TYPE(k)->tp_name);
    if (cdy_seq_reserve(tr, s, s->n + 1))
        return -1;
    s->items[s->n++] = v;
    return 0;
}

/* A new empty TV_SET; NULL when stopped. */
static tvar *new_set(tracer *tr)
{
    tvar *s = cdy_tv_new(tr, TV_SET);
    PyObject *real = s ? cdy_tr_keep(tr, PySet_New(NULL)) : NULL;
    if (!real) {
        if (s)
            cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    s->obj = real;
    return s;
}

/* Add every item of iterable v to set s; 0 or -1. */
int cdy_set_update(tracer *tr, tvar *s, tvar *v)
{
    if (v->kind == TV_SET) {
        for (int i = 0; i < v->n; i++)
            if (cdy_set_add(tr, s, v->items[i]))
                return -1;
        return 0;
    }
    tvar *it = cdy_iterate(tr, v);
    if (!it)
        return -1;
    for (int i = it->pos; i < it->n; i++)
        if (cdy_set_add(tr, s, it->items[i]))
            return -1;
    if (it != v)
        it->pos = it->n;
    return 0;
}

/* See trace.h: BUILD_SET / set(iterable). */
tvar *cdy_set_build(tracer *tr, tvar **items, int n)
{
    tvar *s = new_set(tr);
    for (int i = 0; s && i < n; i++)
        if (cdy_set_add(tr, s, items[i]))
            return NULL;
    return s;
}

/* set(iterable) / frozenset(iterable); NULL when stopped. */
tvar *cdy_set_from(tracer *tr, tvar *iterable)
{
    tvar *s = new_set(tr);
    return s && (!iterable || !cdy_set_update(tr, s, iterable)) ? s : NULL;
}

/* The members of s in Python's iteration order, as a TV_ITER (or a TV_LIST when list). */
tvar *cdy_set_items(tracer *tr, tvar *s, int kind)
{
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(s->n + 1));
    if (!items) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *k;
    Py_hash_t h;
    int n = 0;
    while (cdy_pc_set_next(s->obj, &pos, &k, &h) && n < s->n)
        if (!(items[n++] = member(s, k))) {
            cdy_tr_stop(tr, SET_MEMBER);
            return NULL;
        }
    return cdy_tv_seq(tr, kind, items, n);
}

/* A set of the members of s for which keep(in other) holds (or all of s and then
 * other's, for union); NULL when stopped. */
static tvar *combine(tracer *tr, tvar *s, tvar *other, char op)
{
    tvar *o = other->kind == TV_SET ? other : cdy_set_from(tr, other);
    tvar *r = o ? new_set(tr) : NULL;
    if (!r)
        return NULL;
    tvar *a = cdy_set_items(tr, s, TV_LIST), *b = cdy_set_items(tr, o, TV_LIST);
    if (!a || !b)
        return NULL;
    for (int i = 0; i < a->n; i++) {
        int in = PySet_Contains(o->obj, cdy_key_of(a->items[i]));
        if (in < 0) {
            cdy_tr_stop_exc(tr, RAISED_IN);
            return NULL;
        }
        int keep = op == '|' || (op == '&' && in) || ((op == '-' || op == '^') && !in);
        if (keep && cdy_set_add(tr, r, a->items[i]))
            return NULL;
    }
    for (int i = 0; (op == '|' || op == '^') && i < b->n; i++) {
        int in = PySet_Contains(s->obj, cdy_key_of(b->items[i]));
        if (in < 0) {
            cdy_tr_stop_exc(tr, RAISED_IN);
            return NULL;
        }
        if (!in && cdy_set_add(tr, r, b->items[i]))
            return NULL;
    }
    return r;
}

/* a <op> b for sets (| & - ^, comparisons); *handled 0 when they are not sets. */
tvar *cdy_set_operator(tracer *tr, const char *sym, tvar *a, tvar *b, int *handled)
{
    *handled = a->kind == TV_SET && (b->kind == TV_SET || (b->kind == TV_CONST &&
                                                           PyAnySet_Check(b->obj)));
    if (!*handled)
        return NULL;
    if (strlen(sym) == 1 && strchr("|&-^", sym[0]))
        return combine(tr, a, b, sym[0]);
    tvar *bb = b->kind == TV_SET ? b : cdy_set_from(tr, b);
    if (!bb)
        return NULL;
    static const char *cmps[] = {"<", "<=", "==", "!=", ">", ">="};
    for (int i = 0; i < 6; i++)
        if (!strcmp(sym, cmps[i])) {
            PyObject *r = PyObject_RichCompare(a->obj, bb->obj, i == 0 ? Py_LT : i == 1 ? Py_LE
                                               : i == 2 ? Py_EQ : i == 3 ? Py_NE : i == 4 ? Py_GT
                                               : Py_GE);
            if (!r) {
                cdy_tr_stop_exc(tr, RAISED_OPERATOR, sym);
                return NULL;
            }
            return cdy_tv_const(tr, r);
        }
    cdy_tr_stop(tr, OPERATOR_UNSUPPORTED, sym);
    return NULL;
}

/* s op= other in place (|= &= -= ^=): s keeps its identity; NULL when stopped. */
tvar *cdy_set_inplace(tracer *tr, const char *sym, tvar *s, tvar *other)
{
    tvar *r = combine(tr, s, other, sym[0]);
    if (!r)
        return NULL;
    if (PySet_Clear(s->obj) < 0) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    s->n = 0;
    return cdy_set_update(tr, s, r) ? NULL : s;
}

/* Method name of set s; NULL when stopped. */
tvar *cdy_set_method(tracer *tr, tvar *s, const char *name, tvar **args, int nargs,
                     PyObject *kwnames)
{
    if (kwnames && PyTuple_GET_SIZE(kwnames)) {
        cdy_tr_stop(tr, METHOD_UNSUPPORTED, name, "set");
        return NULL;
    }
    if (!strcmp(name, "add") && nargs == 1)
        return cdy_set_add(tr, s, args[0]) ? NULL : cdy_tv_const(tr, Py_NewRef(Py_None));
    if (!strcmp(name, "update")) {
        for (int i = 0; i < nargs; i++)
            if (cdy_set_update(tr, s, args[i]))
                return NULL;
        return cdy_tv_const(tr, Py_NewRef(Py_None));
    }
    if ((!strcmp(name, "discard") || !strcmp(name, "remove")) && nargs == 1) {
        PyObject *k = cdy_key_fixed(tr, args[0]);
        tvar *m = k ? member(s, k) : NULL;
        int has = k ? PySet_Contains(s->obj, k) : 0;
        if (!m && has == 1) {   /* an equal member of another object: find it */
            for (int i = 0; i < s->n && !m; i++)
                if (PyObject_RichCompareBool(cdy_key_of(s->items[i]), k, Py_EQ) == 1)
                    m = s->items[i];
        }
        if (!k || has < 0 || (!m && name[0] == 'r')) {
            PyErr_Clear();
            if (k && !m)
                cdy_tr_stop(tr, KEY_ERROR);
            else
                cdy_tr_stop(tr, SET_MEMBER);
            return NULL;
        }
        if (m) {
            if (PySet_Discard(s->obj, cdy_key_of(m)) < 0 || cdy_seq_reserve(tr, s, s->n)) {
                cdy_tr_stop_exc(tr, PY_ERROR);
                return NULL;
            }
            int w = 0;
            for (int i = 0; i < s->n; i++)
                if (s->items[i] != m)
                    s->items[w++] = s->items[i];
            s->n = w;
        }
        return cdy_tv_const(tr, Py_NewRef(Py_None));
    }
    if (!strcmp(name, "clear") && !nargs) {
        PySet_Clear(s->obj);
        s->n = 0;
        return cdy_tv_const(tr, Py_NewRef(Py_None));
    }
    if (!strcmp(name, "copy") && !nargs)
        return cdy_set_from(tr, s);
    static const char *ops[][2] = {{"union", "|"}, {"intersection", "&"}, {"difference", "-"},
                                   {"symmetric_difference", "^"}};
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, ops[i][0])) {
            tvar *r = cdy_set_from(tr, s);
            for (int k = 0; r && k < nargs; k++)
                r = combine(tr, r, args[k], ops[i][1][0]);
            return r;
        }
    static const char *cmps[][2] = {{"issubset", "<="}, {"issuperset", ">="}};
    for (int i = 0; i < 2 && nargs == 1; i++)
        if (!strcmp(name, cmps[i][0])) {
            tvar *o = args[0]->kind == TV_SET ? args[0] : cdy_set_from(tr, args[0]);
            int h;
            return o ? cdy_set_operator(tr, cmps[i][1], s, o, &h) : NULL;
        }
    if (!strcmp(name, "isdisjoint") && nargs == 1) {
        tvar *r = combine(tr, s, args[0], '&');
        return r ? cdy_tv_const(tr, PyBool_FromLong(r->n == 0)) : NULL;
    }
    if (!strcmp(name, "__contains__") && nargs == 1) {
        PyObject *k = cdy_key_fixed(tr, args[0]);
        int has = k ? PySet_Contains(s->obj, k) : -1;
        if (has < 0) {
            PyErr_Clear();
            cdy_tr_stop(tr, SET_MEMBER);
            return NULL;
        }
        return cdy_tv_const(tr, PyBool_FromLong(has));
    }
    if (!strcmp(name, "__len__") && !nargs)
        return cdy_tv_const(tr, PyLong_FromLong(s->n));
    cdy_tr_stop(tr, METHOD_UNSUPPORTED, name, "set");
    return NULL;
}
