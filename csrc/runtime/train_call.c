/* runtime/train_call.c - the per-call path of a compiled training graph
 * (issue 34) in C: what python/cdynamo/_autograd.py's TrainingGraph,
 * _Graph.forward and _Graph.backward did in Python per call.
 *
 *   _train_apply(tg, *inputs)     the frame's call: torch.autograd.Function's C
 *                                 apply on _Graph (Function.apply's Python
 *                                 wrapper only where functorch transforms are on)
 *   _train_forward(ctx, tg, *in)  _Graph.forward: the compiled forward, the
 *                                 saved tensors, the non-differentiable outputs
 *   _train_backward(ctx, *grads)  _Graph.backward, and the apply of its
 *                                 backward node class (_train_backward_apply,
 *                                 an instance method: the engine calls it)
 *
 * _train_setup(apply, slow_apply, functorch_active, is_grad_enabled) gives the
 * torch callables once, at _autograd's import; _train_set_pool(on) says
 * whether the graphs' tensors come from the output pool (runtime/mempool.c;
 * cdynamo.config.training_output_pool, default off: the pool would keep the
 * step's activations between steps, which eager returns to torch's allocator;
 * off, tensors under TC_POOL_SMALL bytes still come from it). */
#include "runtime/runtime.h"

/* Training graphs' tensors under this many bytes come from the output pool even
 * with cdynamo.config.training_output_pool off: their bytes are few (bench:
 * at most a few KiB of blocks), their allocation through torch ~1 us each. */
#define TC_POOL_SMALL ((int64_t)1 << 10)

/* Where training graphs' tensors come from (_train_set_pool):
 * TC_TORCH  those of TC_POOL_SMALL bytes or more from torch's allocator;
 * TC_STEP   all from the pool's training lists, which the end of each
 *           backward empties (the step's activations go back to the C
 *           allocator there, as eager's do; blocks freed after it, such as
 *           the gradients a step's zero_grad drops, serve the next forward);
 * TC_POOL   all from the pool, kept between steps. */
enum { TC_TORCH = 0, TC_STEP = 1, TC_POOL = 2 };

static struct {
    PyObject *apply;              /* _FunctionBase.apply bound to _Graph (C) */
    PyObject *slow_apply;         /* _Graph.apply (torch's Python wrapper) */
    PyObject *functorch_active;   /* torch._C._are_functorch_transforms_active */
    PyObject *grad_enabled;       /* torch.is_grad_enabled */
    int pool;                     /* TC_TORCH, TC_STEP or TC_POOL */
    PyObject *s_forward, *s_backward, *s_nuser, *s_saved_inputs, *s_grad_outputs,
        *s_no_grad_outputs, *s_tg, *s_saved_tensors, *s_to_save,
        *s_non_differentiable, *s_name, *s_maybe_clear_saved_tensors, *s_grad_inputs,
        *s_ninputs, *s_input_outputs;
} tc;

/* The truth of calling f with no arguments; -1 + error. */
static int tc_call_truth(PyObject *f)
{
    PyObject *r = PyObject_CallNoArgs(f);
    if (!r)
        return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

/* _train_setup(apply, slow_apply, functorch_active, is_grad_enabled): None. */
static PyObject *tc_setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "_train_setup takes 4 arguments");
        return NULL;
    }
    PyObject **slots[] = {&tc.apply, &tc.slow_apply, &tc.functorch_active, &tc.grad_enabled};
    for (int i = 0; i < 4; i++) {
        Py_INCREF(args[i]);
        Py_XSETREF(*slots[i], args[i]);
    }
    Py_RETURN_NONE;
}

/* _train_set_pool(mode): None (mode TC_TORCH, TC_STEP or TC_POOL). */
static PyObject *tc_set_pool(PyObject *self, PyObject *arg)
{
    long mode = PyLong_AsLong(arg);
    if (mode == -1 && PyErr_Occurred())
        return NULL;
    if (mode < TC_TORCH || mode > TC_POOL) {
        PyErr_SetString(PyExc_ValueError, "_train_set_pool: mode 0, 1 or 2");
        return NULL;
    }
    if (mode != TC_STEP)
        cdy_mempool_trim_train();
    tc.pool = (int)mode;
    Py_RETURN_NONE;
}

/* f(*args) with the graphs' tensors where tc.pool says; a backward (bwd)
 * in TC_STEP then empties the training lists. */
static PyObject *tc_call(PyObject *f, PyObject *const *args, Py_ssize_t n, int bwd)
{
    int64_t old = cdy_mempool_bypass;
    int old_train = cdy_mempool_train;
    cdy_mempool_bypass = tc.pool == TC_TORCH ? TC_POOL_SMALL : 0;
    cdy_mempool_train = tc.pool == TC_STEP;
    PyObject *r = PyObject_Vectorcall(f, args, (size_t)n, NULL);
    cdy_mempool_bypass = old;
    cdy_mempool_train = old_train;
    if (bwd && tc.pool == TC_STEP)
        cdy_mempool_trim_train();
    return r;
}

/* outs (a tuple, stolen) with each user output that is an input itself (tg.input_outputs:
 * pairs output j, input k) made that input, as eager returns it, where the Function gave
 * a view of it (its node's gradient for that output is then zero: the identity's path
 * runs beside it); NULL + error. */
static PyObject *tc_inputs_as_themselves(PyObject *outs, PyObject *tg, PyObject *const *in,
                                         Py_ssize_t n)
{
    PyObject *io = PyObject_GetAttr(tg, tc.s_input_outputs);
    if (!io || !PyTuple_Check(io) || PyTuple_GET_SIZE(io) == 0 || !PyTuple_Check(outs)) {
        Py_XDECREF(io);
        PyErr_Clear();   /* no pairs: the outputs as they are */
        return outs;
    }
    PyObject *r = PyTuple_GetSlice(outs, 0, PyTuple_GET_SIZE(outs));
    Py_DECREF(outs);
    for (Py_ssize_t p = 0; r && p + 1 < PyTuple_GET_SIZE(io); p += 2) {
        Py_ssize_t j = PyLong_AsSsize_t(PyTuple_GET_ITEM(io, p));
        Py_ssize_t k = PyLong_AsSsize_t(PyTuple_GET_ITEM(io, p + 1));
        if (j >= 0 && j < PyTuple_GET_SIZE(r) && k >= 0 && k < n)
            Py_SETREF(((PyTupleObject *)r)->ob_item[j], Py_NewRef(in[k]));
    }
    Py_DECREF(io);
    if (r && PyErr_Occurred())
        Py_CLEAR(r);
    return r;
}

/* _train_apply(tg, *inputs): the outputs of _Graph.apply(tg, *inputs), an output that
 * is an input the input itself (tc_inputs_as_themselves). */
static PyObject *tc_apply(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (!tc.apply) {
        PyErr_SetString(PyExc_RuntimeError, "cdynamo: _train_setup was not called");
        return NULL;
    }
    int ft = tc_call_truth(tc.functorch_active);
    if (ft < 0)
        return NULL;
    PyObject *outs = PyObject_Vectorcall(ft ? tc.slow_apply : tc.apply, args, nargs, NULL);
    return outs && nargs >= 1 ? tc_inputs_as_themselves(outs, args[0], args + 1, nargs - 1)
                              : outs;
}

/* A new tuple of seq[i] for each int i of idx (a tuple), then tail[k..]
 * (tail a tuple or NULL); NULL + error. */
static PyObject *tc_pick(PyObject *const *seq, Py_ssize_t nseq, PyObject *idx,
                         PyObject *tail, Py_ssize_t k)
{
    if (!PyTuple_Check(idx)) {
        PyErr_SetString(PyExc_TypeError, "cdynamo: training graph index list is not a tuple");
        return NULL;
    }
    Py_ssize_t ni = PyTuple_GET_SIZE(idx), nt = tail ? PyTuple_GET_SIZE(tail) - k : 0;
    PyObject *r = PyTuple_New(ni + (nt > 0 ? nt : 0));
    if (!r)
        return NULL;
    for (Py_ssize_t j = 0; j < ni; j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(idx, j));
        if (i < 0 || i >= nseq) {
            Py_DECREF(r);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_IndexError, "cdynamo: training graph index out of range");
            return NULL;
        }
        Py_INCREF(seq[i]);
        PyTuple_SET_ITEM(r, j, seq[i]);
    }
    for (Py_ssize_t j = 0; j < nt; j++) {
        PyObject *o = PyTuple_GET_ITEM(tail, k + j);
        Py_INCREF(o);
        PyTuple_SET_ITEM(r, ni + j, o);
    }
    return r;
}

/* The compiled forward's outputs (a tuple: the frame's outputs, then the
 * values the backward saves), or NULL + error; a forward that raised before
 * writing an input (compiled.c's call_end marks it) marks tg, the entry's
 * graph, so frame/eval.c reruns the frame eagerly, as for other graphs. */
static PyObject *tc_run_forward(PyObject *tg, PyObject *const *in, Py_ssize_t n)
{
    PyObject *fwd = PyObject_GetAttr(tg, tc.s_forward);
    if (!fwd)
        return NULL;
    cdy_graph_failed = NULL;
    PyObject *outs = tc_call(fwd, in, n, 0);
    if (!outs && cdy_graph_failed == fwd)
        cdy_graph_failed = tg;
    Py_DECREF(fwd);
    if (outs && !PyTuple_Check(outs))
        Py_SETREF(outs, PySequence_Tuple(outs));
    return outs;
}

/* ctx saves tg.saved_inputs' inputs and outs[nuser:], and marks the user
 * outputs tg.no_grad_outputs names non-differentiable; 0 or -1.  What
 * FunctionCtx.save_for_backward / mark_non_differentiable do (they are Python:
 * self.to_save = tensors, self.non_differentiable = args), without their frames. */
static int tc_save(PyObject *ctx, PyObject *tg, PyObject *const *in, Py_ssize_t n,
                   PyObject *outs, PyObject *user, Py_ssize_t nuser)
{
    PyObject *idx = PyObject_GetAttr(tg, tc.s_saved_inputs);
    PyObject *save = idx ? tc_pick(in, n, idx, outs, nuser) : NULL;
    Py_XDECREF(idx);
    int rc = !save || PyObject_SetAttr(ctx, tc.s_to_save, save) ? -1 : 0;
    Py_XDECREF(save);
    if (rc)
        return -1;
    PyObject *ng = PyObject_GetAttr(tg, tc.s_no_grad_outputs);
    if (!ng)
        return -1;
    if (PyTuple_Check(ng) && PyTuple_GET_SIZE(ng) == 0) {
        Py_DECREF(ng);
        return 0;
    }
    PyObject *marks = tc_pick(&PyTuple_GET_ITEM(user, 0), PyTuple_GET_SIZE(user), ng, NULL, 0);
    Py_DECREF(ng);
    rc = !marks || PyObject_SetAttr(ctx, tc.s_non_differentiable, marks) ? -1 : 0;
    Py_XDECREF(marks);
    return rc;
}

/* _train_forward(ctx, tg, *inputs): the frame's outputs (a tuple). */
static PyObject *tc_forward(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2) {
        PyErr_SetString(PyExc_TypeError, "_train_forward takes ctx, tg, *inputs");
        return NULL;
    }
    PyObject *ctx = args[0], *tg = args[1];
    PyObject *const *in = args + 2;
    Py_ssize_t n = nargs - 2;
    long long t0 = cdy_phase_start();
    PyObject *outs = tc_run_forward(tg, in, n);
    if (!outs)
        return NULL;
    PyObject *nu = PyObject_GetAttr(tg, tc.s_nuser);
    Py_ssize_t nuser = nu ? PyLong_AsSsize_t(nu) : -1;
    Py_XDECREF(nu);
    PyObject *user = NULL;
    if (nuser >= 0 && nuser <= PyTuple_GET_SIZE(outs))
        user = PyTuple_GetSlice(outs, 0, nuser);
    else if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "cdynamo: training graph has too few outputs");
    if (!user || PyObject_SetAttr(ctx, tc.s_tg, tg) ||
        tc_save(ctx, tg, in, n, outs, user, nuser)) {
        Py_DECREF(outs);
        Py_XDECREF(user);
        return NULL;
    }
    Py_DECREF(outs);
    cdy_phase_add(CDY_PHASE_train_fwd, &t0);
    return user;
}

/* The RuntimeError of a backward under grad mode (create_graph=True). */
static PyObject *tc_double_backward_error(PyObject *tg)
{
    PyObject *name = PyObject_GetAttr(tg, tc.s_name);
    if (name)
        PyErr_Format(PyExc_RuntimeError,
                     "cdynamo: %S is a compiled training graph, whose backward is not "
                     "differentiable: backward(create_graph=True) / double backward is not "
                     "supported (compile with cdynamo.config.compile_backward = False)", name);
    Py_XDECREF(name);
    return NULL;
}

/* tg.backward(*ctx.saved_tensors, *[grads[i] for i in tg.grad_outputs]) with
 * its arguments donated (cdy_donated_args): ctx's saved tensors are released
 * first (ctx.maybe_clear_saved_tensors: unless the graph is retained,
 * backward(retain_graph=True)), so the compiled backward frees each saved
 * tensor after its last use, as eager's nodes do. */
static PyObject *tc_run_backward(PyObject *ctx, PyObject *tg, PyObject *const *grads,
                                 Py_ssize_t ng)
{
    PyObject *saved = PyObject_GetAttr(ctx, tc.s_saved_tensors);
    PyObject *go = saved ? PyObject_GetAttr(tg, tc.s_grad_outputs) : NULL;
    PyObject *picked = go ? tc_pick(grads, ng, go, NULL, 0) : NULL;
    PyObject *bwd = picked ? PyObject_GetAttr(tg, tc.s_backward) : NULL;
    PyObject *gs = NULL;
    if (bwd && !PyTuple_Check(saved))
        PyErr_SetString(PyExc_TypeError, "cdynamo: saved_tensors is not a tuple");
    Py_ssize_t ns = bwd && PyTuple_Check(saved) ? PyTuple_GET_SIZE(saved) : -1;
    Py_ssize_t n = ns < 0 ? 0 : ns + PyTuple_GET_SIZE(picked);
    PyObject **all = ns < 0 ? NULL : PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
    if (ns >= 0 && !all)
        PyErr_NoMemory();
    for (Py_ssize_t i = 0; all && i < n; i++)
        all[i] = Py_NewRef(i < ns ? PyTuple_GET_ITEM(saved, i) : PyTuple_GET_ITEM(picked, i - ns));
    Py_CLEAR(saved);
    Py_CLEAR(picked);
    PyObject *cl = all ? PyObject_CallMethodNoArgs(ctx, tc.s_maybe_clear_saved_tensors) : NULL;
    if (!cl && all && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();   /* a torch without it: ctx keeps them until the engine releases them */
        cl = Py_NewRef(Py_None);
    }
    if (cl) {
        int bank = cdy_phase_bank;
        cdy_phase_bank = 1;   /* the phase clocks of the backward's calls apart */
        cdy_donated_args = all;
        gs = tc_call(bwd, all, n, 1);
        cdy_donated_args = NULL;
        cdy_phase_bank = bank;
    }
    Py_XDECREF(cl);
    for (Py_ssize_t i = 0; all && i < n; i++)
        Py_XDECREF(all[i]);
    PyMem_Free(all);
    Py_XDECREF(saved);
    Py_XDECREF(go);
    Py_XDECREF(picked);
    Py_XDECREF(bwd);
    return gs;
}

/* (None, then per graph input its gradient from gs, or None): gs holds the
 * gradients of tg.grad_inputs' inputs, of tg.ninputs; NULL + error. */
static PyObject *tc_spread(PyObject *tg, PyObject *gs)
{
    PyObject *gi = PyObject_GetAttr(tg, tc.s_grad_inputs);
    PyObject *ni = gi ? PyObject_GetAttr(tg, tc.s_ninputs) : NULL;
    Py_ssize_t n = ni ? PyLong_AsSsize_t(ni) : -1;
    PyObject *r = NULL;
    if (n >= 0 && PyTuple_Check(gi) && PyTuple_GET_SIZE(gi) == PyTuple_GET_SIZE(gs))
        r = PyTuple_New(n + 1);
    else if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "cdynamo: backward returned the wrong gradients");
    for (Py_ssize_t i = 0; r && i <= n; i++)
        PyTuple_SET_ITEM(r, i, Py_NewRef(Py_None));
    for (Py_ssize_t k = 0; r && k < PyTuple_GET_SIZE(gi); k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(gi, k));
        if (i < 0 || i >= n) {
            Py_CLEAR(r);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_IndexError, "cdynamo: gradient index out of range");
            break;
        }
        Py_SETREF(PyTuple_GET_ITEM(r, i + 1), Py_NewRef(PyTuple_GET_ITEM(gs, k)));
    }
    Py_XDECREF(gi);
    Py_XDECREF(ni);
    return r;
}

/* _train_backward(ctx, *grads): (None, *gradients of the inputs). */
static PyObject *tc_backward(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "_train_backward takes ctx, *grads");
        return NULL;
    }
    long long t0 = cdy_phase_start();
    PyObject *tg = PyObject_GetAttr(args[0], tc.s_tg);
    if (!tg)
        return NULL;
    int ge = tc.grad_enabled ? tc_call_truth(tc.grad_enabled) : 0;
    PyObject *gs = ge < 0 ? NULL : ge ? tc_double_backward_error(tg)
                                      : tc_run_backward(args[0], tg, args + 1, nargs - 1);
    if (gs && !PyTuple_Check(gs))
        Py_SETREF(gs, PySequence_Tuple(gs));
    PyObject *r = gs ? tc_spread(tg, gs) : NULL;
    Py_XDECREF(gs);
    Py_DECREF(tg);
    cdy_phase_add(CDY_PHASE_train_bwd, &t0);
    return r;
}

static PyMethodDef tc_methods[] = {
    {"_train_set_pool", tc_set_pool, METH_O,
     "_train_set_pool(on): training graphs' tensors from the output pool"},
    {"_train_setup", (PyCFunction)(void (*)(void))tc_setup, METH_FASTCALL,
     "_train_setup(apply, slow_apply, functorch_active, is_grad_enabled)"},
    {"_train_apply", (PyCFunction)(void (*)(void))tc_apply, METH_FASTCALL,
     "_train_apply(tg, *inputs): a compiled training graph's call"},
    {"_train_forward", (PyCFunction)(void (*)(void))tc_forward, METH_FASTCALL,
     "_train_forward(ctx, tg, *inputs): _Graph.forward"},
    {"_train_backward", (PyCFunction)(void (*)(void))tc_backward, METH_FASTCALL,
     "_train_backward(ctx, *grads): _Graph.backward"},
    {NULL, NULL, 0, NULL},
};

/* Interns the attribute names; 0 or -1. */
static int tc_strings(void)
{
#define TC_S(f) (tc.s_##f = PyUnicode_InternFromString(#f))
    return TC_S(forward) && TC_S(backward) && TC_S(nuser) && TC_S(saved_inputs) &&
           TC_S(grad_outputs) && TC_S(no_grad_outputs) && TC_S(tg) && TC_S(saved_tensors) &&
           TC_S(to_save) && TC_S(non_differentiable) && TC_S(name) &&
           TC_S(maybe_clear_saved_tensors) && TC_S(grad_inputs) && TC_S(ninputs) && TC_S(input_outputs) ? 0 : -1;
#undef TC_S
}

int cdy_train_call_init(PyObject *m)
{
    if (tc_strings())
        return -1;
    for (PyMethodDef *d = tc_methods; d->ml_name; d++) {
        PyObject *f = PyCFunction_NewEx(d, NULL, NULL);
        if (!f || PyModule_AddObject(m, d->ml_name, f) < 0) {
            Py_XDECREF(f);
            return -1;
        }
    }
    /* the backward node's apply: an instance method, so the engine's
     * ctx.apply(*grads) passes ctx as the first argument */
    PyObject *bf = PyObject_GetAttrString(m, "_train_backward");
    PyObject *bm = bf ? PyInstanceMethod_New(bf) : NULL;
    Py_XDECREF(bf);
    if (!bm || PyModule_AddObject(m, "_train_backward_apply", bm) < 0) {
        Py_XDECREF(bm);
        return -1;
    }
    return 0;
}
