/* contexts.c - `with` blocks in traced code (BEFORE_WITH) and the torch
 * context managers they use.
 *
 *   with torch.no_grad() / enable_grad() / set_grad_enabled(b) /
 *        inference_mode(b) / torch.autocast(..., enabled=False):
 *       a block that leaves the trace's state as it is (no_grad while grad
 *       mode is off, autocast off while it is off) is traced as its body,
 *       guarded on that state; one that changes it stops the trace (the
 *       frame runs eagerly): the graph has no state changes inside it.
 *   with torch.autocast("cpu", dtype=..., enabled=...) that changes the
 *       CPU autocast state, entered while autocast is off when the frame
 *       starts (guarded): the trace's autocast state (t->autocast_state)
 *       changes for the block and is restored by its __exit__; the ops in
 *       it get eager's autocast casts as graph nodes (autocast.c), so the
 *       graph runs with the state unchanged and an exception inside it
 *       leaves the state as eager's exit does.  torch calls that read the
 *       state while tracing (is_autocast_enabled, torch.autocast(dtype=None))
 *       see the trace's.  Under an autocast that is on when the frame
 *       starts such a block stops the trace (the graph's externs would get
 *       the outer autocast's casts at run time).
 *   with torch.autograd.profiler.record_function(name): traced as its body while no
 *       profiler runs (torch.optim's step wrapper opens one); under a profiler it
 *       stops the trace.
 *   with <a Python context manager> (a class with Python __enter__ and
 *       __exit__, contextlib.nullcontext, ...): __enter__ and __exit__ are
 *       traced as calls.
 * A `with` block whose body raises is not traced (WITH_EXCEPT_START is not
 * handled): the frame runs eagerly. */
#include "trace/trace.h"

#include <string.h>

static PyObject *noop_exit_fn, *ac_exit_fn, *no_grad_t, *enable_grad_t, *set_grad_t, *inference_t, *autocast_t;
static PyObject *record_fn_t, *profiler_on_fn;   /* record_function, torch.autograd._profiler_enabled */

/* _cdy_noop_exit(*args): the __exit__ of a context that changes nothing; None. */
static PyObject *noop_exit_impl(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self, (void)args, (void)n;
    Py_RETURN_NONE;
}

/* One-time lookups; 0 or -1 (error set). */
static int contexts_init(void)
{
    if (noop_exit_fn)
        return 0;
    static PyMethodDef def = {"_cdy_noop_exit", (PyCFunction)(void (*)(void))noop_exit_impl,
                              METH_FASTCALL, "the __exit__ of a traced context that changes nothing"};
    no_grad_t = PyObject_GetAttrString(cdy_torch, "no_grad");
    enable_grad_t = PyObject_GetAttrString(cdy_torch, "enable_grad");
    set_grad_t = PyObject_GetAttrString(cdy_torch, "set_grad_enabled");
    inference_t = PyObject_GetAttrString(cdy_torch, "inference_mode");
    autocast_t = PyObject_GetAttrString(cdy_torch, "autocast");
    static PyMethodDef ac_def = {"_cdy_autocast_exit", (PyCFunction)(void (*)(void))noop_exit_impl,
                                 METH_FASTCALL, "the __exit__ of an autocast block entered in a trace"};
    PyObject *prof = PyImport_ImportModule("torch.autograd.profiler");
    record_fn_t = prof ? PyObject_GetAttrString(prof, "record_function") : NULL;
    PyObject *ag = prof ? PyImport_ImportModule("torch.autograd") : NULL;
    profiler_on_fn = ag ? PyObject_GetAttrString(ag, "_profiler_enabled") : NULL;
    Py_XDECREF(ag);
    Py_XDECREF(prof);
    if (!record_fn_t || !profiler_on_fn) {   /* none in this torch: nothing to trace through */
        Py_CLEAR(record_fn_t);
        Py_CLEAR(profiler_on_fn);
        PyErr_Clear();
    }
    ac_exit_fn = PyCFunction_New(&ac_def, NULL);
    noop_exit_fn = PyCFunction_New(&def, NULL);
    return noop_exit_fn && ac_exit_fn && no_grad_t && enable_grad_t && set_grad_t && inference_t && autocast_t
               ? 0 : -1;
}

/* See trace.h. */
int cdy_is_noop_exit(PyObject *fn)
{
    return fn && fn == noop_exit_fn;
}

/* See trace.h. */
int cdy_ac_live_set(tracer *tr)
{
    int live = cdy_state_read(CDY_STATE_AUTOCAST);
    if ((live & 0xff01) == (tr->t->autocast_state & 0xff01))
        return -1;
    cdy_state_set_cpu_autocast(tr->t->autocast_state);
    return live;
}

/* See trace.h. */
void cdy_ac_live_restore(int saved)
{
    if (saved >= 0)
        cdy_state_set_cpu_autocast(saved);
}

/* See trace.h: the call of an autocast block's __exit__ restores the state
 * its __enter__ replaced; None.  *handled 0 for any other fn. */
tvar *cdy_ctx_exit_call(tracer *tr, PyObject *fn, int *handled)
{
    *handled = fn && fn == ac_exit_fn;
    if (!*handled)
        return NULL;
    cdy_trace *t = tr->t;
    if (CDY_TR_CHECK(tr, t->ac_depth > 0, STACK_UNDERFLOW))
        return NULL;
    t->autocast_state = t->ac_saved[--t->ac_depth];
    t->autocast_on = t->autocast_state & 1;
    return cdy_tv_const(tr, Py_NewRef(Py_None));
}

/* See trace.h: torch.no_grad() and its kin called with constant arguments: the
 * context object, made now (fixed: `with` reads its mode). */
tvar *cdy_ctx_construct(tracer *tr, PyObject *cls, tvar **args, int nargs, PyObject *kwnames,
                        int *handled)
{
    *handled = 0;
    if (contexts_init()) {
        PyErr_Clear();
        return NULL;
    }
    if (cls != no_grad_t && cls != enable_grad_t && cls != set_grad_t && cls != inference_t &&
        cls != autocast_t && (!record_fn_t || cls != record_fn_t))
        return NULL;
    *handled = 1;
    PyObject **pa = cdy_arena_alloc(&tr->t->arena, sizeof(PyObject *) * (size_t)(nargs + 1));
    if (!pa) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    for (int i = 0; i < nargs; i++) {
        if (args[i]->kind != TV_CONST) {
            cdy_tr_stop(tr, CONTEXT_ARGS, ((PyTypeObject *)cls)->tp_name);
            return NULL;
        }
        pa[i] = args[i]->obj;
    }
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    /* set_grad_enabled(b) sets the mode when made: read b instead, make no_grad/enable_grad */
    if (cls == set_grad_t) {
        int on = nargs - nkw == 1 ? PyObject_IsTrue(pa[0]) : -1;
        if (on < 0) {
            PyErr_Clear();
            cdy_tr_stop(tr, CONTEXT_ARGS, ((PyTypeObject *)cls)->tp_name);
            return NULL;
        }
        cls = on ? enable_grad_t : no_grad_t;
        nargs = 0;
        nkw = 0;
        kwnames = NULL;
    }
    int live = cls == autocast_t ? cdy_ac_live_set(tr) : -1;   /* dtype=None reads it */
    PyObject *o = cdy_tr_keep(tr, PyObject_Vectorcall(cls, pa, (size_t)(nargs - nkw), kwnames));
    cdy_ac_live_restore(live);
    if (!o) {
        cdy_tr_stop_exc(tr, RAISED_CALL, ((PyTypeObject *)cls)->tp_name);
        return NULL;
    }
    tvar *v = cdy_tv_new(tr, TV_OBJ);
    if (v) {
        v->obj = o;
        v->fixed = 1;
    }
    return v;
}

/* The grad mode a torch grad context sets (1 / 0), or -1 when cm is none. */
static int grad_context_mode(PyObject *cm)
{
    if (PyObject_TypeCheck(cm, (PyTypeObject *)no_grad_t))
        return 0;
    if (PyObject_TypeCheck(cm, (PyTypeObject *)enable_grad_t))
        return 1;
    if (PyObject_TypeCheck(cm, (PyTypeObject *)inference_t)) {
        PyObject *m = PyObject_GetAttrString(cm, "mode");
        int on = m ? PyObject_IsTrue(m) : -1;
        Py_XDECREF(m);
        PyErr_Clear();
        return on < 0 ? -1 : !on;   /* inference_mode(True) turns grad off */
    }
    return -1;
}

/* The CPU autocast state word autocast block cm sets over state s; -1 when
 * cm is a CUDA block that is on, -2 unreadable. */
static int autocast_block_state(PyObject *cm, int s)
{
    PyObject *en = PyObject_GetAttrString(cm, "_enabled");
    PyObject *dev = en ? PyObject_GetAttrString(cm, "device") : NULL;
    PyObject *dt = dev ? PyObject_GetAttrString(cm, "fast_dtype") : NULL;
    int on = en ? PyObject_IsTrue(en) : -1;
    int cpu = dev && PyUnicode_Check(dev) ? PyUnicode_CompareWithASCIIString(dev, "cpu") == 0 : -1;
    int code = dt ? cdy_state_dtype_code(dt) : -2;
    Py_XDECREF(en);
    Py_XDECREF(dev);
    Py_XDECREF(dt);
    PyErr_Clear();
    if (on < 0 || cpu < 0)
        return -2;
    if (!cpu)
        return on ? -1 : s;        /* another device's block, off: changes nothing here */
    if (code < 0)
        return on ? -2 : (s & ~0xff01);   /* a dtype autocast has no code for: off anyway */
    return (s & ~0xff01) | on | code << 8;
}

/* `with cm` for a torch.autocast cm: 1 when it changes nothing, 2 when the
 * trace enters its state (its exit is ac_exit_fn), -1 stopped. */
static int autocast_block(tracer *tr, PyObject *cm)
{
    cdy_trace *t = tr->t;
    int ns = autocast_block_state(cm, t->autocast_state);
    if (ns < 0)
        return cdy_tr_stop(tr, CONTEXT_STATE, Py_TYPE(cm)->tp_name);
    if (cdy_guard_state(tr, CDY_STATE_AUTOCAST))
        return -1;
    if ((ns & 0xff01) == (t->autocast_state & 0xff01) || (!(ns & 1) && !t->autocast_on))
        return 1;   /* the same state, or off either way (the dtype is read through the state) */
    if ((t->autocast_entry & 1) || t->ac_depth == (int)(sizeof(t->ac_saved) / sizeof(int)))
        return cdy_tr_stop(tr, CONTEXT_STATE, Py_TYPE(cm)->tp_name);
    t->ac_saved[t->ac_depth++] = t->autocast_state;
    t->autocast_state = ns;
    t->autocast_on = ns & 1;
    return 2;
}

/* A torch context cm that changes nothing while tracing: 1 (its state guarded), 2 an
 * autocast block the trace enters, 0 when it is no such context; -1 stopped. */
static int noop_torch_context(tracer *tr, PyObject *cm)
{
    int mode = grad_context_mode(cm);
    if (mode >= 0) {
        if (PyObject_TypeCheck(cm, (PyTypeObject *)inference_t)) {
            PyObject *on = PyObject_CallMethod(cdy_torch, "is_inference_mode_enabled", NULL);
            int inf = on == Py_True;
            Py_XDECREF(on);
            PyErr_Clear();
            if (inf != (mode == 0))
                return cdy_tr_stop(tr, CONTEXT_STATE, Py_TYPE(cm)->tp_name);
        }
        if (mode != tr->t->grad_enabled)
            return cdy_tr_stop(tr, CONTEXT_STATE, Py_TYPE(cm)->tp_name);
        return cdy_guard_grad_mode(tr, mode) ? -1 : 1;
    }
    if (PyObject_TypeCheck(cm, (PyTypeObject *)autocast_t))
        return autocast_block(tr, cm);
    if (record_fn_t && PyObject_TypeCheck(cm, (PyTypeObject *)record_fn_t)) {
        /* a profiler range (torch.optim's step wrapper): nothing while no profiler runs
         * (one started later sees no range for the compiled code) */
        PyObject *on = PyObject_CallNoArgs(profiler_on_fn);
        int prof = on ? PyObject_IsTrue(on) : -1;
        Py_XDECREF(on);
        PyErr_Clear();
        return prof ? cdy_tr_stop(tr, CONTEXT_STATE, Py_TYPE(cm)->tp_name) : 1;
    }
    return 0;
}

/* See trace.h: BEFORE_WITH. */
int cdy_op_before_with(tracer *tr)
{
    if (contexts_init())
        return cdy_tr_stop_exc(tr, TRACER_INIT);
    if (CDY_TR_CHECK(tr, tr->sp >= 1 && tr->sp + 1 < tr->stack_cap, STACK_UNDERFLOW))
        return -1;
    tvar *cm = tr->stack[--tr->sp];
    if ((cm->kind == TV_OBJ || cm->kind == TV_CONST) && cm->obj) {
        int noop = noop_torch_context(tr, cm->obj);
        if (noop < 0)
            return -1;
        if (noop) {
            tvar *ex = cdy_tv_new(tr, TV_OBJ), *none = cdy_tv_const(tr, Py_NewRef(Py_None));
            if (!ex || !none)
                return -1;
            ex->obj = noop == 2 ? ac_exit_fn : noop_exit_fn;
            ex->fixed = 1;
            tr->stack[tr->sp++] = ex;
            tr->stack[tr->sp++] = none;   /* torch's contexts enter as None */
            return 0;
        }
    }
    static PyObject *s_enter, *s_exit;
    if ((!s_enter && !(s_enter = PyUnicode_InternFromString("__enter__"))) ||
        (!s_exit && !(s_exit = PyUnicode_InternFromString("__exit__"))))
        return cdy_tr_stop_exc(tr, PY_ERROR);
    PyObject *cls = cdy_tvar_type(cm);
    PyObject *en = PyType_Check(cls) ? _PyType_Lookup((PyTypeObject *)cls, s_enter) : NULL;
    PyObject *ex = PyType_Check(cls) ? _PyType_Lookup((PyTypeObject *)cls, s_exit) : NULL;
    if (!en || !ex || !PyFunction_Check(en) || !PyFunction_Check(ex) ||
        (cm->kind != TV_INST && !(cm->kind == TV_OBJ && cm->src)))
        return cdy_tr_stop(tr, CONTEXT_MANAGER, ((PyTypeObject *)cls)->tp_name);
    tvar *exit_b = cdy_tv_new(tr, TV_BOUND);
    if (!exit_b)
        return -1;
    exit_b->obj = ex;
    exit_b->self = cm;
    tvar **self = cdy_prepend(tr, cm, NULL, 0);
    tvar *entered = self ? cdy_inline(tr, en, self, 1, NULL) : NULL;
    if (!entered)
        return -1;
    tr->stack[tr->sp++] = exit_b;
    tr->stack[tr->sp++] = entered;
    return 0;
}
