/* build_optim.c - torch.optim step functions inside a trace (issue 34).
 *
 * A Python function of torch.optim (sgd(), _single_tensor_adam(), the
 * decorators' wrappers) is traced inline as user code is: called as a torch
 * callable it would run at trace time on the real optimizer (its side effects
 * then happen once, while tracing, and never again). */
#include <string.h>

#include "frame/guards.h"
#include "trace/trace.h"

/* See trace.h. */
int cdy_optim_inlined(PyObject *fn)
{
    if (!PyFunction_Check(fn))
        return 0;
    PyObject *m = ((PyFunctionObject *)fn)->func_module;
    const char *n = m && PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : NULL;
    if (!n) {
        PyErr_Clear();
        return 0;
    }
    return !strcmp(n, "torch.optim") || !strncmp(n, "torch.optim.", 12);
}

/* See trace.h. */
tvar *cdy_tensor_grad(tracer *tr, tvar *t, PyObject *name)
{
    if (!t->src || tr->t->graph.values[t->value].kind != CDY_VAL_INPUT) {
        cdy_tr_stop(tr, TENSOR_ATTR, "grad");   /* a tensor the trace made: its grad is None
                                                  * or autograd's, not modelled */
        return NULL;
    }
    tracer *top = tr;
    while (top->parent)
        top = top->parent;
    PyObject *real = cdy_src_fetch(t->src, top->frame_locals, top->globals, top->builtins,
                                   top->closure);
    PyObject *g = real ? PyObject_GetAttr(real, name) : NULL;
    Py_XDECREF(real);
    if (!g) {
        cdy_tr_stop_exc(tr, RAISED_TENSOR_ATTR);
        return NULL;
    }
    cdy_src *src = cdy_src_step(tr, t->src, name, 0);
    tvar *v = src ? cdy_wrap(tr, g, src, 1) : NULL;   /* None: a CONST guard; a tensor: an input */
    if (!src && tr->t->status == CDY_TRACE_OK)
        cdy_tr_stop(tr, TENSOR_ATTR, "grad");
    Py_DECREF(g);
    return v;
}

/* A CONTAINS guard: key is still not in dict d (read from the frame), so that the
 * first call after the lazy initialization traces again; 0, or -1 when stopped. */
static int state_absent_guard(tracer *tr, tvar *d, PyObject *key)
{
    char desc[CDY_DESC_LEN] = "";
    cdy_src_name(d->src, tr->t->top_code, desc, sizeof(desc));
    cdy_guard *g = cdy_guards_add(&tr->t->guards, CDY_GUARD_CONTAINS, d->src, desc);
    if (!g)
        return cdy_tr_stop_exc(tr, PY_ERROR);
    g->expect = Py_NewRef(key);
    g->requires_grad = 0;
    g->carry = 1;
    return 0;
}

/* See trace.h. */
tvar *cdy_optim_state_item(tracer *tr, tvar *d, tvar *key, int *handled)
{
    *handled = d->kind == TV_OBJ && d->src && d->obj && PyDict_Check(d->obj) &&
               key->kind == TV_TENSOR && key->src;
    if (!*handled)
        return NULL;
    tracer *top = tr;
    while (top->parent)
        top = top->parent;
    PyObject *real = cdy_src_fetch(key->src, top->frame_locals, top->globals, top->builtins,
                                   top->closure);
    if (!real) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    PyObject *v = PyDict_GetItemWithError(d->obj, real);   /* no default made: a miss stops */
    if (!v) {
        if (PyErr_Occurred())
            cdy_tr_stop_exc(tr, PY_ERROR);
        else if (!state_absent_guard(tr, d, real))
            cdy_tr_stop(tr, OPTIM_STATE_MISSING);
        Py_DECREF(real);
        return NULL;
    }
    char desc[CDY_DESC_LEN] = "";   /* the key is that tensor object: guarded by identity */
    cdy_src_name(key->src, tr->t->top_code, desc, sizeof(desc));
    cdy_guard *g = cdy_guards_add(&tr->t->guards, CDY_GUARD_ID, key->src, desc);
    cdy_src *src = g ? cdy_src_step(tr, d->src, real, 1) : NULL;
    if (g)
        g->expect = Py_NewRef(real);
    Py_INCREF(v);
    Py_DECREF(real);
    tvar *r = src ? cdy_wrap(tr, v, src, 1) : NULL;
    if (!src && tr->t->status == CDY_TRACE_OK)
        cdy_tr_stop_exc(tr, PY_ERROR);
    Py_DECREF(v);
    return r;
}

/* See trace.h. */
int cdy_guards_carry(cdy_guards *to, const cdy_guards *from)
{
    for (int i = 0; i < from->n; i++) {
        const cdy_guard *f = &from->items[i];
        if (!f->carry)
            continue;
        cdy_guard *g = cdy_guards_add(to, f->kind, &f->src, f->desc);
        if (!g)
            return -1;
        g->expect = Py_XNewRef(f->expect);
        g->requires_grad = f->requires_grad;
        g->carry = 1;
    }
    return 0;
}

static PyObject *opt_methods, *opt_alpha_methods, *opt_functions;   /* cdynamo._optim's tables */
static PyObject *opt_file;                                          /* and its __file__ */

/* Read cdynamo._optim's tables once; 0, or -1 (error cleared: nothing is routed). */
static int opt_init(void)
{
    if (opt_functions)
        return 0;
    PyObject *m = PyImport_ImportModule("cdynamo._optim");
    PyObject *a = m ? PyObject_GetAttrString(m, "METHODS") : NULL;
    PyObject *b = m ? PyObject_GetAttrString(m, "ALPHA_METHODS") : NULL;
    PyObject *c = m ? PyObject_GetAttrString(m, "FUNCTIONS") : NULL;
    PyObject *f = m ? PyObject_GetAttrString(m, "__file__") : NULL;
    Py_XDECREF(m);
    if (!a || !b || !c || !f || !PyDict_Check(a) || !PyDict_Check(b) || !PyDict_Check(c) ||
        !PyUnicode_Check(f)) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        Py_XDECREF(f);
        PyErr_Clear();
        return -1;
    }
    opt_methods = a, opt_alpha_methods = b, opt_functions = c, opt_file = f;
    return 0;
}

/* 1 if tr traces cdynamo._optim's own code (its calls are the ops themselves). */
static int in_optim_file(tracer *tr)
{
    return PyUnicode_Compare(tr->co->co_filename, opt_file) == 0;
}

/* 1 if kwnames holds "alpha". */
static int has_alpha(PyObject *kwnames)
{
    for (Py_ssize_t k = 0; kwnames && k < PyTuple_GET_SIZE(kwnames); k++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, k), "alpha") == 0)
            return 1;
    return 0;
}

/* See trace.h. */
tvar *cdy_optim_method(tracer *tr, PyObject *name, tvar **args, int nargs, PyObject *kwnames,
                       int *handled)
{
    *handled = 0;
    if (opt_init() || in_optim_file(tr))
        return NULL;
    PyObject *f = PyDict_GetItemWithError(opt_methods, name);
    if (!f && !PyErr_Occurred() && has_alpha(kwnames))
        f = PyDict_GetItemWithError(opt_alpha_methods, name);
    if (!f) {
        PyErr_Clear();
        return NULL;
    }
    *handled = 1;
    return cdy_inline(tr, f, args, nargs, kwnames);
}

/* See trace.h. */
tvar *cdy_optim_function(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames,
                         int *handled)
{
    *handled = 0;
    if (opt_init() || !PyCFunction_Check(fn) || in_optim_file(tr))
        return NULL;
    PyObject *f = PyDict_GetItemWithError(opt_functions, fn);
    if (!f) {
        PyErr_Clear();
        return NULL;
    }
    *handled = 1;
    return cdy_inline(tr, f, args, nargs, kwnames);
}

/* The object tvar v stands for when it is a class (a value fixed by identity or
 * convention), else NULL. */
static PyObject *class_of_tvar(const tvar *v)
{
    if ((v->kind == TV_OBJ || v->kind == TV_CONST) && v->obj && PyType_Check(v->obj))
        return v->obj;
    return NULL;
}

/* See trace.h. */
tvar *cdy_generic_alias(tracer *tr, tvar *cls, tvar *arg, int *handled)
{
    PyObject *c = class_of_tvar(cls), *a = class_of_tvar(arg);
    *handled = c && a && (PyObject *)&PyList_Type == c;
    if (!*handled)
        return NULL;
    PyObject *g = PyObject_GetItem(c, a);   /* list[Tensor]: a types.GenericAlias */
    if (!g) {
        cdy_tr_stop_exc(tr, RAISED_SUBSCRIPT);
        return NULL;
    }
    tvar *r = cdy_fixed_value(tr, g);
    Py_DECREF(g);
    return r;
}
