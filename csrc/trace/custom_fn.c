/* custom_fn.c - calls of a custom torch.autograd.Function's apply.
 *
 *   Fn.apply(*args) under no_grad -> Fn.forward(ctx, *args) inlined, ctx a
 *                                    cdynamo._autograd.FunctionCtxNoGrad (its
 *                                    save_for_backward & co. do nothing);
 *                                    a setup_context-style Function:
 *                                    Fn.forward(*args) inlined
 *   with grad mode on               -> AUTOGRAD_FUNCTION: the call runs eagerly
 *                                    (a graph break), so its backward is kept
 *   under a functorch transform, or a forward that is not a Python function
 *                                 -> AUTOGRAD_FUNCTION_FORM: runs eagerly
 *
 * Under no_grad eager's apply runs forward with grad off and gives its outputs
 * no grad_fn: the ctx is dropped with the call, and setup_context (which only
 * fills the ctx) changes nothing the caller sees, so it is not traced.  The
 * entry is guarded on grad mode staying off.                               */
#include "trace/trace.h"

#include <string.h>

static PyObject *apply_fn;        /* torch.autograd.Function.apply's function */
static PyObject *ctx_cls;         /* cdynamo._autograd.FunctionCtxNoGrad */
static PyObject *setup_defined;   /* torch.autograd.function._is_setup_context_defined */
static PyObject *transforms_on;   /* torch._C._are_functorch_transforms_active */

/* The lookups above, once; 0 or -1 with an exception. */
static int cfn_init(void)
{
    if (ctx_cls)
        return 0;
    PyObject *fm = PyImport_ImportModule("torch.autograd.function");
    PyObject *fc = fm ? PyObject_GetAttrString(fm, "Function") : NULL;
    PyObject *ap = fc ? PyObject_GetAttrString(fc, "apply") : NULL;
    apply_fn = ap && PyMethod_Check(ap) ? Py_NewRef(PyMethod_GET_FUNCTION(ap)) : NULL;
    setup_defined = fm ? PyObject_GetAttrString(fm, "_is_setup_context_defined") : NULL;
    PyObject *tc = PyObject_GetAttrString(cdy_torch, "_C");
    transforms_on = tc ? PyObject_GetAttrString(tc, "_are_functorch_transforms_active") : NULL;
    PyObject *am = PyImport_ImportModule("cdynamo._autograd");
    PyObject *cc = am ? PyObject_GetAttrString(am, "FunctionCtxNoGrad") : NULL;
    Py_XDECREF(fm);
    Py_XDECREF(fc);
    Py_XDECREF(ap);
    Py_XDECREF(tc);
    Py_XDECREF(am);
    if (!apply_fn || !setup_defined || !transforms_on || !cc) {
        Py_XDECREF(cc);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "torch.autograd.Function.apply not found");
        return -1;
    }
    ctx_cls = cc;
    return 0;
}

/* 1 if func bound to self is Fn.apply of a subclass Fn of torch.autograd.Function;
 * 0 if not; -1 with an exception. */
static int is_function_apply(PyObject *func, PyObject *self)
{
    if (!self || !PyType_Check(self) || !PyFunction_Check(func))
        return 0;
    if (cfn_init())
        return -1;
    return func == apply_fn;
}

/* 1 if cls defines setup_context (forward takes no ctx); 0; -1 with an exception. */
static int has_setup_context(PyObject *cls)
{
    PyObject *sc = PyObject_GetAttrString(cls, "setup_context");
    PyObject *r = sc ? PyObject_CallOneArg(setup_defined, sc) : NULL;
    int on = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(sc);
    Py_XDECREF(r);
    return on;
}

/* 1 if a functorch transform (vmap, grad, ...) is active; 0; -1 with an exception. */
static int functorch_active(void)
{
    PyObject *r = PyObject_CallNoArgs(transforms_on);
    int on = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    return on;
}

/* A fresh FunctionCtxNoGrad; NULL when stopped. */
static tvar *new_ctx(tracer *tr)
{
    if (!cdy_obj_buildable(ctx_cls)) {   /* (its first call sets objects.c up) */
        cdy_tr_stop(tr, CONSTRUCT, ((PyTypeObject *)ctx_cls)->tp_name);
        return NULL;
    }
    return cdy_obj_new(tr, ctx_cls, NULL, 0, NULL);
}

/* Fn.forward(ctx, *args) (or Fn.forward(*args) for a setup_context-style Fn)
 * inlined under no_grad; NULL when stopped. */
static tvar *inline_forward(tracer *tr, PyObject *cls, int new_style, tvar **args, int nargs,
                            PyObject *kwnames)
{
    PyObject *fwd = cdy_tr_keep(tr, PyObject_GetAttrString(cls, "forward"));
    if (!fwd) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    if (!PyFunction_Check(fwd)) {
        cdy_tr_stop(tr, AUTOGRAD_FUNCTION_FORM, ((PyTypeObject *)cls)->tp_name);
        return NULL;
    }
    if (new_style)
        return cdy_inline_result(tr, fwd, args, nargs, kwnames);
    tvar **all = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(nargs + 2));
    if (!all) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    if (!(all[0] = new_ctx(tr)))
        return NULL;
    memcpy(all + 1, args, sizeof(tvar *) * (size_t)nargs);
    return cdy_inline_result(tr, fwd, all, nargs + 1, kwnames);
}

/* See trace.h. */
tvar *cdy_cfn_apply(tracer *tr, PyObject *func, PyObject *self, tvar **args, int nargs,
                    PyObject *kwnames, int *handled)
{
    int is = is_function_apply(func, self);
    *handled = is != 0;
    if (is <= 0) {
        if (is < 0)
            cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    PyObject *cls = self;
    const char *name = ((PyTypeObject *)cls)->tp_name;
    if (tr->t->grad_enabled) {
        cdy_tr_stop(tr, AUTOGRAD_FUNCTION, name);
        return NULL;
    }
    int ft = functorch_active(), ns = ft ? 0 : has_setup_context(cls);
    if (ft < 0 || ns < 0) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    if (ft) {
        cdy_tr_stop(tr, AUTOGRAD_FUNCTION_FORM, name);
        return NULL;
    }
    if (cdy_guard_grad_mode(tr, 0))
        return NULL;
    return inline_forward(tr, cls, ns, args, nargs, kwnames);
}
