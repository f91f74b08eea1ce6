/* build_optim.c - torch.optim step functions inside a trace (issue 34).
 *
 * A Python function of torch.optim (sgd(), _single_tensor_adam(), the
 * decorators' wrappers) or torch.utils._foreach_utils (the device queries of
 * foreach=None's default) is traced inline as user code is: called as a torch
 * callable it would run at trace time on the real optimizer (its side effects
 * then happen once, while tracing, and never again). */
#include <string.h>

#include "frame/frame.h"
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
    return !strcmp(n, "torch.optim") || !strncmp(n, "torch.optim.", 12) ||
           !strcmp(n, "torch.utils._foreach_utils");   /* the step's device queries */
}

/* See trace.h. */
tvar *cdy_tensor_grad(tracer *tr, tvar *t, PyObject *name)
{
    if (!t->src || tr->t->graph.values[t->value].kind != CDY_VAL_INPUT) {
        cdy_tr_stop(tr, TENSOR_ATTR, PyUnicode_AsUTF8(name));   /* a tensor the trace made: its
                                                                * grad is autograd's, not modelled */
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
        cdy_tr_stop(tr, TENSOR_ATTR, PyUnicode_AsUTF8(name));
    Py_DECREF(g);
    return v;
}

/* A CONTAINS guard: key is still not in dict d (read from the frame), so that the
 * first call after the lazy initialization traces again; 0, or -1 when stopped. */
static int state_absent_guard(tracer *tr, tvar *d, PyObject *key)
{
    cdy_guard *g = cdy_tr_guard_expect(tr, CDY_GUARD_CONTAINS, d, key);
    if (!g)
        return -1;
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
    if (opt_init() || in_optim_file(tr))
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

static PyObject *use_grad_code;   /* torch.optim's _use_grad_for_differentiable wrapper's code */

/* See frame.h. */
PyObject *cdy_optim_wrapper_code_peek(void)
{
    return use_grad_code;
}

/* See frame.h: the code of the wrapper torch.optim's _use_grad_for_differentiable
 * makes; borrowed, NULL (error cleared) when this torch has none. */
PyObject *cdy_optim_wrapper_code(void)
{
    if (use_grad_code)
        return use_grad_code;
    PyObject *m = PyImport_ImportModule("torch.optim.optimizer");
    PyObject *deco = m ? PyObject_GetAttrString(m, "_use_grad_for_differentiable") : NULL;
    PyObject *w = deco ? PyObject_CallOneArg(deco, deco) : NULL;   /* wraps any function */
    PyObject *co = w && PyFunction_Check(w) ? PyFunction_GET_CODE(w) : NULL;
    use_grad_code = Py_XNewRef(co);
    Py_XDECREF(m);
    Py_XDECREF(deco);
    Py_XDECREF(w);
    PyErr_Clear();
    return use_grad_code;
}

/* The function fn (a _use_grad wrapper) closes over as `func`; borrowed or NULL. */
static PyObject *wrapped_func(PyObject *fn)
{
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    PyObject *cl = PyFunction_GET_CLOSURE(fn);
    if (!cl || !PyTuple_Check(cl))
        return NULL;
    int first_free = co->co_nlocalsplus - co->co_nfreevars;
    for (int i = 0; i < co->co_nfreevars && i < PyTuple_GET_SIZE(cl); i++) {
        PyObject *nm = PyTuple_GET_ITEM(co->co_localsplusnames, first_free + i);
        if (PyUnicode_CompareWithASCIIString(nm, "func") == 0) {
            PyObject *f = PyCell_GET(PyTuple_GET_ITEM(cl, i));
            return f && PyFunction_Check(f) ? f : NULL;
        }
    }
    return NULL;
}

/* See trace.h. */
tvar *cdy_optim_use_grad(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames,
                         int *handled)
{
    PyObject *ug = PyFunction_Check(fn) ? cdy_optim_wrapper_code() : NULL;
    *handled = ug && PyFunction_GET_CODE(fn) == ug;
    if (!*handled)
        return NULL;
    PyObject *func = wrapped_func(fn);
    if (!func) {
        cdy_tr_stop(tr, CALL_UNSUPPORTED,
                    PyUnicode_AsUTF8(((PyFunctionObject *)fn)->func_qualname));
        return NULL;
    }
    /* the wrapper sets grad mode (off) and back, which a trace does not model: the
     * step runs as its own frame, traced under the mode the wrapper set when it calls
     * it (the wrapper runs eagerly; under no_grad already as well: its globals, the
     * hook dicts, are read without a source in an inlined call) */
    if (cdy_frame_force_code(func)) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    cdy_tr_stop(tr, OPTIM_STEP, PyUnicode_AsUTF8(((PyFunctionObject *)func)->func_qualname));
    return NULL;
}

/* See trace.h. */
int cdy_is_dict_view_name(PyObject *name)
{
    const char *n = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    PyErr_Clear();
    return n && (!strcmp(n, "values") || !strcmp(n, "keys") || !strcmp(n, "items"));
}

/* See trace.h. */
tvar *cdy_empty_dict_view(tracer *tr, tvar *callable, int nargs, PyObject *kwnames, int *handled)
{
    PyObject *fn = callable->obj, *self;
    const cdy_src *s = callable->src;
    *handled = 0;
    if (nargs || kwnames || !s || s->nattrs < 1 || s->item[s->nattrs - 1] ||
        !PyCFunction_Check(fn) || !(self = PyCFunction_GET_SELF(fn)) || !PyDict_Check(self) ||
        PyDict_CheckExact(self) || PyDict_GET_SIZE(self) != 0)
        return NULL;
    if (!cdy_is_dict_view_name(s->attrs[s->nattrs - 1]))
        return NULL;
    *handled = 1;   /* an empty hooks OrderedDict's view: guarded empty, iterated as () */
    cdy_src *base = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_src));
    if (!base) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    *base = *s;
    base->nattrs--;
    char desc[CDY_DESC_LEN] = "";
    cdy_src_name(base, tr->t->top_code, desc, sizeof(desc));
    cdy_guard *g = cdy_guards_add(&tr->t->guards, CDY_GUARD_LEN, base, desc);
    if (!g) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    g->expect = Py_NewRef((PyObject *)Py_TYPE(self));
    g->ndim = 0;
    return cdy_tv_const(tr, PyTuple_New(0));
}

/* See frame.h. */
void cdy_optim_force_step(PyFunctionObject *wrapper)
{
    PyObject *func = wrapped_func((PyObject *)wrapper);
    if (func && cdy_frame_force_code(func))
        PyErr_Clear();
}

/* See trace.h. */
int cdy_torch_global_seq(tracer *tr, const tvar *c)
{
    return !tr->guard_globals && c->kind == TV_OBJ && !c->src && !c->by_type && c->obj &&
           (PyList_CheckExact(c->obj) || PyTuple_CheckExact(c->obj));
}

/* See trace.h. */
PyObject *cdy_optim_undisable(PyObject *fobj)
{
    if (!PyFunction_Check(fobj))
        return fobj;
    PyObject *d = ((PyFunctionObject *)fobj)->func_dict;
    PyObject *w = d && PyDict_Check(d) ? PyDict_GetItemString(d, "_torchdynamo_orig_callable")
                                       : NULL;
    PyObject *dis = d && PyDict_Check(d) ? PyDict_GetItemString(d, "_torchdynamo_disable") : NULL;
    return w && dis == Py_True && cdy_optim_inlined(w) ? w : fobj;
}

/* ---- a scheduled lr: a float of param_groups read per call -------------------------- */

static const cdy_guards *const *optim_prev;   /* the compiling code's entries' guards */
static int optim_nprev;

/* See trace.h. */
void cdy_optim_set_prev(const cdy_guards *const *prev, int n)
{
    optim_prev = prev;
    optim_nprev = n;
}

/* 1 if src ends in ...param_groups[i]['lr'] (an optimizer's parameter group's lr). */
static int is_group_lr(const cdy_src *src)
{
    int n = src->nattrs;
    return n >= 3 && src->item[n - 1] == 1 && PyUnicode_Check(src->attrs[n - 1]) &&
           PyUnicode_CompareWithASCIIString(src->attrs[n - 1], "lr") == 0 &&
           src->item[n - 2] == 1 && PyLong_CheckExact(src->attrs[n - 2]) && !src->item[n - 3] &&
           PyUnicode_CompareWithASCIIString(src->attrs[n - 3], "param_groups") == 0;
}

/* 1 if an earlier entry guarded src a float other than o (the value changed), or read it
 * as a graph input already (a later recompile for another reason keeps it one). */
static int lr_changed(const cdy_src *src, PyObject *o)
{
    for (int e = 0; e < optim_nprev; e++) {
        const cdy_guards *gs = optim_prev[e];
        for (int i = 0; i < gs->n; i++) {
            const cdy_guard *g = &gs->items[i];
            if (g->kind == CDY_GUARD_CONST && g->expect && PyFloat_CheckExact(g->expect) &&
                PyFloat_AS_DOUBLE(g->expect) != PyFloat_AS_DOUBLE(o) &&
                cdy_src_equal(&g->src, src))
                return 1;
            if (g->kind == CDY_GUARD_TENSOR && g->src.nattrs == src->nattrs + 1 &&
                g->src.item[src->nattrs] == 2) {
                cdy_src base = g->src;
                base.nattrs--;
                if (cdy_src_equal(&base, src))
                    return 1;
            }
        }
    }
    return 0;
}

static PyObject *float_conv, *lr_ok;   /* cdynamo._optim's FLOAT_AS_TENSOR, lr_input_ok */

/* Read them once; 0, or -1 (error set). */
static int float_init(void)
{
    if (lr_ok)
        return 0;
    PyObject *m = PyImport_ImportModule("cdynamo._optim");
    PyObject *c = m ? PyObject_GetAttrString(m, "FLOAT_AS_TENSOR") : NULL;
    PyObject *f = c ? PyObject_GetAttrString(m, "lr_input_ok") : NULL;
    Py_XDECREF(m);
    if (!f) {
        Py_XDECREF(c);
        return -1;
    }
    float_conv = c, lr_ok = f;
    return 0;
}

/* 1 if the optimizer and the group src (...param_groups[i]['lr']) names take a tensor lr
 * (cdynamo._optim.lr_input_ok, reading them from the top frame), 0 if not, -1 on an error
 * (set). */
static int group_takes_tensor_lr(tracer *tr, const cdy_src *src)
{
    tracer *top = tr;
    while (top->parent)
        top = top->parent;
    cdy_src s = *src;
    s.nattrs -= 1;
    PyObject *group = cdy_src_fetch(&s, top->frame_locals, top->globals, top->builtins,
                                    top->closure);
    s.nattrs -= 2;
    PyObject *opt = group ? cdy_src_fetch(&s, top->frame_locals, top->globals, top->builtins,
                                          top->closure) : NULL;
    PyObject *r = opt ? PyObject_CallFunctionObjArgs(lr_ok, opt, group, NULL) : NULL;
    int ok = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(group);
    Py_XDECREF(opt);
    Py_XDECREF(r);
    return ok;
}

/* 1 if tr traces a function of torch.optim (the step reading its group's lr; user code
 * reading it, to log or branch on it, keeps the float). */
static int in_torch_optim(tracer *tr)
{
    PyObject *m = tr->globals && PyDict_Check(tr->globals)
                      ? PyDict_GetItemString(tr->globals, "__name__") : NULL;   /* borrowed */
    const char *n = m && PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : NULL;
    if (!n)
        PyErr_Clear();
    return n && (!strcmp(n, "torch.optim") || !strncmp(n, "torch.optim.", 12));
}

/* See trace.h. */
tvar *cdy_optim_float_input(tracer *tr, PyObject *o, const cdy_src *src)
{
    if (!is_group_lr(src) || !in_torch_optim(tr) || !lr_changed(src, o))
        return NULL;
    int ok = float_init() ? -1 : group_takes_tensor_lr(tr, src);
    if (ok <= 0) {
        if (ok < 0)
            PyErr_Clear();   /* not known to take one: a constant, as before */
        return NULL;
    }
    PyObject *t = PyObject_GetItem(float_conv, o);
    cdy_src *s = t ? cdy_src_step(tr, src, float_conv, 2) : NULL;
    tvar *v = s ? cdy_wrap(tr, t, s, 1) : NULL;
    Py_XDECREF(t);
    if (!v && tr->t->status == CDY_TRACE_OK)
        cdy_tr_stop_exc(tr, PY_ERROR);
    if (v && cdy_log_on("recompiles")) {
        char d[CDY_DESC_LEN];
        cdy_src_name(src, tr->t->top_code, d, sizeof(d));
        cdy_log("recompiles", "'%s' changed since an earlier compile: read per call as "
                "a 0-dim float64 tensor (a graph input), no longer a constant", d);
    }
    return v;
}

/* See trace.h. */
int cdy_optim_eager_branch(tracer *tr)
{
    if (PyUnicode_CompareWithASCIIString(tr->co->co_name, "_multi_tensor_sgd") != 0 ||
        !tr->globals || !PyDict_Check(tr->globals))
        return 0;
    PyObject *m = PyDict_GetItemString(tr->globals, "__name__");   /* borrowed */
    return m && PyUnicode_Check(m) && PyUnicode_CompareWithASCIIString(m, "torch.optim.sgd") == 0;
}
