/* lower.c - the registry of composite lowerings (see trace.h).  The tables
 * live in the area files; this file resolves their names to callables once,
 * at the first trace.  The node-building API they use is in vars.c. */
#include "trace/trace.h"

static PyObject *lower_fns;    /* {callable: table << 16 | row} */
static PyObject *lower_next;   /* {callable: a later table's row, tried when the first gives NULL} */

/* Every area's table, in lookup order (an earlier registration wins). */
static const cdy_lowering *const all_tables[] = {
    cdy_lowerings_views, cdy_lowerings_rows, cdy_lowerings_reduce, cdy_lowerings_pool,
    cdy_lowerings_conv, cdy_lowerings_factory, cdy_lowerings_index, cdy_lowerings_linear, NULL,
};

/* Module path of where-letter w ('m', Tensor, is resolved by put_row), or NULL. */
static const char *where_module(char w)
{
    switch (w) {
    case 't': return "torch";
    case 'f': return "torch.nn.functional";
    case 'n': return "torch._C._nn";
    case 's': return "torch.special";
    case 'l': return "torch.linalg";
    case 'o': return "operator";
    default: return NULL;
    }
}

/* Register obj.<name> (when it exists and is callable) as row `code`; a callable
 * another table registered first gets `code` as its second lowering; 0 or -1. */
static int put_attr(PyObject *obj, const char *name, long code)
{
    PyObject *f = PyObject_GetAttrString(obj, name);
    if (!f || !PyCallable_Check(f)) {
        Py_XDECREF(f);
        PyErr_Clear();
        return 0;
    }
    PyObject *k = PyLong_FromLong(code);
    PyObject *had = k ? PyDict_SetDefault(lower_fns, f, k) : NULL;
    int r = had ? 0 : -1;
    if (had && had != k && PyLong_AsLong(had) >> 16 != code >> 16 &&   /* another table's */
        PyDict_SetDefault(lower_next, f, k) == NULL)
        r = -1;
    Py_XDECREF(k);
    Py_DECREF(f);
    return r;
}

/* Register one row of table t (row i) everywhere its `where` says; 0 or -1. */
static int put_row(PyObject *torch, int t, int i)
{
    const cdy_lowering *row = &all_tables[t][i];
    long code = (long)t << 16 | i;
    for (const char *w = row->where; *w; w++) {
        PyObject *obj = NULL;
        if (*w == 'm')
            obj = PyObject_GetAttrString(torch, "Tensor");
        else if (where_module(*w))
            obj = PyImport_ImportModule(where_module(*w));
        if (!obj) {
            PyErr_Clear();
            continue;
        }
        int r = put_attr(obj, row->name, code);
        Py_DECREF(obj);
        if (r)
            return -1;
    }
    return 0;
}

/* Resolve every table's names to callables; 0 or -1 with an error set. */
int cdy_lower_init(PyObject *torch)
{
    if (lower_fns)
        return 0;
    if (!(lower_fns = PyDict_New()) || !(lower_next = PyDict_New()))
        return -1;
    for (int t = 0; all_tables[t]; t++)
        for (int i = 0; all_tables[t][i].name; i++)
            if (put_row(torch, t, i))
                return -1;
    return 0;
}

/* The lowering that dict d (lower_fns or lower_next) holds for fn, or NULL. */
static cdy_lower_fn find_in(PyObject *d, PyObject *fn)
{
    PyObject *k = d ? PyDict_GetItemWithError(d, fn) : NULL;
    if (!k) {
        PyErr_Clear();   /* unhashable callables are simply not registered */
        return NULL;
    }
    long code = PyLong_AsLong(k);
    return all_tables[code >> 16][code & 0xffff].fn;
}

tvar cdy_not_lowered;

/* r as the protocol reads it: 1 when lowering `what` did not lower the
 * call (CDY_NOT_LOWERED, or NULL without a stop or an exception), else 0
 * (a result; or NULL: stopped, LOWER_FAILED when nothing said why). */
int cdy_lower_declined(tracer *tr, tvar *r, const char *what)
{
    if (r == CDY_NOT_LOWERED)
        return 1;
    if (r || cdy_tr_stopped(tr))
        return 0;
    if (PyErr_Occurred()) {
        CDY_ASSERT(0, "a lowering failed with an exception and no stop");
        cdy_tr_stop_exc(tr, LOWER_FAILED, what);
        return 0;
    }
    return 1;
}

/* A callable registered by two tables: the first table's lowering, then,
 * when it declines, the second's. */
static tvar *lower_chain(tracer *tr, const cdy_lower_call *call)
{
    cdy_lower_fn first = find_in(lower_fns, call->fn), second = find_in(lower_next, call->fn);
    tvar *r = first ? first(tr, call) : CDY_NOT_LOWERED;
    if (!cdy_lower_declined(tr, r, call->what) || !second)
        return r;
    return second(tr, call);
}

/* The lowering registered for callable fn, or NULL. */
cdy_lower_fn cdy_lower_find(PyObject *fn)
{
    if (!lower_fns)
        return NULL;
    cdy_lower_fn f = find_in(lower_fns, fn);
    return f && find_in(lower_next, fn) ? lower_chain : f;
}
