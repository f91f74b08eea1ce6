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
