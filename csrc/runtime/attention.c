/* attention.c - a training graph's attention calls, cdynamo._autograd's
 * attention_forward and attention_grads (passes/attention.c, trace/autograd.c),
 * without a Python frame or a small aten op on their fused path: torch's CPU
 * flash kernels are called through their C++ entries (the op overloads'
 * _op), and the checks that decide whether those kernels give eager's values
 * read the log-sum-exp's memory (every row's finite; the backward: its first
 * element not the forward's NaN mark).  torch.isfinite(lse).all() forked the
 * thread pool four times per call (isfinite's eq, abs, ne, then all): at 16
 * threads some 80 us a forward, where this loop reads B x H x L floats.
 * Every other case (not exact CPU float32 tensors, a last dim not unit-strided,
 * empty, rows that are not finite) is the Python forms' in _autograd.py
 * (_attention_forward_py, _attention_grads_py, _attention_unfused). */
#include <math.h>

#include "runtime/runtime.h"

static struct {
    int state;                    /* 0 unresolved, 1 ready, -1 not available */
    PyObject *fwd_op, *bwd_op;    /* torch's flash forward / backward, the C++ entries */
    PyObject *py_fwd, *py_bwd;    /* _autograd's Python forms */
    PyObject *py_unfused;         /* _autograd._attention_unfused(q, k, v, scale) */
    PyObject *kw_scale;           /* ("scale",) */
    PyObject *zero;               /* dropout_p 0.0 */
} at;

/* The _op of torch.ops.aten.<name>.default, or NULL (error set). */
static PyObject *at_aten_op(PyObject *aten, const char *name)
{
    PyObject *pk = PyObject_GetAttrString(aten, name);
    PyObject *ov = pk ? PyObject_GetAttrString(pk, "default") : NULL;
    PyObject *op = ov ? PyObject_GetAttrString(ov, "_op") : NULL;
    Py_XDECREF(pk);
    Py_XDECREF(ov);
    return op;
}

/* Resolve the callables once (cdynamo._autograd imports _C: not at _C's init);
 * 1 ready, 0 the Python forms only (the flash ops missing), -1 error. */
static int at_resolve(void)
{
    if (at.state)
        return at.state > 0;
    PyObject *ag = PyImport_ImportModule("cdynamo._autograd");
    if (!ag)
        return -1;
    at.py_fwd = PyObject_GetAttrString(ag, "_attention_forward_py");
    at.py_bwd = at.py_fwd ? PyObject_GetAttrString(ag, "_attention_grads_py") : NULL;
    at.py_unfused = at.py_bwd ? PyObject_GetAttrString(ag, "_attention_unfused") : NULL;
    Py_DECREF(ag);
    if (!at.py_unfused)
        return -1;
    PyObject *ops = PyObject_GetAttrString(cdy_torch, "ops");
    PyObject *aten = ops ? PyObject_GetAttrString(ops, "aten") : NULL;
    at.fwd_op = aten ? at_aten_op(aten, "_scaled_dot_product_flash_attention_for_cpu") : NULL;
    at.bwd_op = at.fwd_op ? at_aten_op(aten, "_scaled_dot_product_flash_attention_for_cpu_backward")
                          : NULL;
    Py_XDECREF(ops);
    Py_XDECREF(aten);
    at.kw_scale = Py_BuildValue("(s)", "scale");
    at.zero = PyFloat_FromDouble(0.0);
    if (!at.kw_scale || !at.zero)
        return -1;
    PyErr_Clear();
    at.state = at.fwd_op && at.bwd_op ? 1 : -1;
    return at.state > 0;
}

/* x's meta and data if x is a CPU float32 tensor of ndim dims (0: any) whose
 * last dim is unit-strided (what the flash kernels read in place); else 0. */
static int at_read(PyObject *x, int ndim, cdy_meta *m, void **data)
{
    return cdy_mempool_read(x, m, data) && m->dtype == CDY_DT_FLOAT32 && m->ndim >= 1 &&
           (!ndim || m->ndim == ndim) && m->strides[m->ndim - 1] == 1;
}

static int64_t at_numel(const cdy_meta *m)
{
    int64_t n = 1;
    for (int d = 0; d < m->ndim; d++)
        n *= m->sizes[d];
    return n;
}

/* 1 if every element of float32 tensor m at data is finite (a dense one,
 * strides a permutation of contiguous ones as the flash kernel's lse: one
 * pass over its memory). */
static int at_all_finite(const cdy_meta *m, const float *data)
{
    int64_t n = at_numel(m);
    int dense = 1;
    for (int d = 0; d < m->ndim; d++)
        dense &= m->strides[d] >= 0;
    if (dense && cdy_mempool_extent(m) == n) {
        int all = 1;
        for (int64_t i = 0; i < n; i++)
            all &= isfinite(data[i]) != 0;
        return all;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0, r = i;
        for (int d = m->ndim - 1; d >= 0; d--) {
            off += (r % m->sizes[d]) * m->strides[d];
            r /= m->sizes[d];
        }
        if (!isfinite(data[off]))
            return 0;
    }
    return 1;
}

/* torch's flash forward of (q, k, v) with is_causal and scale: its result
 * tuple (out, lse, ...), or NULL (error set). */
static PyObject *at_flash_fwd(PyObject *q, PyObject *k, PyObject *v, PyObject *causal,
                              PyObject *scale)
{
    PyObject *args[6] = {q, k, v, at.zero, causal, scale};
    return PyObject_Vectorcall(at.fwd_op, args, 5, at.kw_scale);
}

/* 1 if tuple r is (out, lse, ...) with lse's every element finite (eager's
 * values: attention_forward's rule), 0 if not, -1 when lse cannot be read. */
static int at_fwd_exact(PyObject *r)
{
    cdy_meta m;
    void *data;
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) < 2 ||
        !cdy_mempool_read(PyTuple_GET_ITEM(r, 1), &m, &data) || m.dtype != CDY_DT_FLOAT32)
        return -1;
    return at_all_finite(&m, data);
}

/* 1 if q, k, v (4-d) are what the fused forward takes: CPU float32, last
 * dims unit-strided, q and k not empty, q's and v's last dims equal. */
static int at_fusable(PyObject *q, PyObject *k, PyObject *v)
{
    cdy_meta mq, mk, mv;
    void *d;
    return at_read(q, 4, &mq, &d) && at_read(k, 4, &mk, &d) && at_read(v, 4, &mv, &d) &&
           at_numel(&mq) && at_numel(&mk) && mq.sizes[3] == mv.sizes[3];
}

/* _C.attention_forward(q, k, v, scale) -> (y, lse): see
 * _autograd._attention_forward_py, whose values it gives. */
static PyObject *at_forward(PyObject *self, PyObject *const *args, Py_ssize_t nargsf,
                            PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    int ok = at_resolve();
    if (ok < 0)
        return NULL;
    if (!ok || n != 4 || kwnames || !at_fusable(args[0], args[1], args[2]))
        return PyObject_Vectorcall(at.py_fwd, args, nargsf, kwnames);
    PyObject *r = at_flash_fwd(args[0], args[1], args[2], Py_False, args[3]);
    int exact = r ? at_fwd_exact(r) : 0;
    if (exact > 0) {
        PyObject *two = PyTuple_GetSlice(r, 0, 2);
        Py_DECREF(r);
        return two;
    }
    Py_XDECREF(r);
    if (!r)
        return NULL;
    return exact < 0 ? PyObject_Vectorcall(at.py_fwd, args, nargsf, kwnames)
                     : PyObject_Vectorcall(at.py_unfused, args, 4, NULL);
}

/* 1 if lse is a float32 tensor whose first element is a number: the forward
 * took the flash kernel (attention_forward marks the unfused path with NaN);
 * 0 if not, -1 when it cannot be read. */
static int at_lse_fused(PyObject *lse)
{
    cdy_meta m;
    void *data;
    if (!cdy_mempool_read(lse, &m, &data) || m.dtype != CDY_DT_FLOAT32)
        return -1;
    return at_numel(&m) > 0 && !isnan(*(const float *)data);
}

/* torch's flash backward: its (grad_q, grad_k, grad_v), or NULL (error set). */
static PyObject *at_flash_bwd(PyObject *const *a, PyObject *out, PyObject *lse)
{
    PyObject *args[10] = {a[0], a[1], a[2], a[3], out, lse, at.zero, a[5], a[4]};
    return PyObject_Vectorcall(at.bwd_op, args, 8, at.kw_scale);
}

/* The backward without a saved forward (sdpa_backward's call: 6 args): the
 * flash forward recomputed, then its backward where that is exact; NULL with
 * no error set: the Python form decides. */
static PyObject *at_grads_recompute(PyObject *const *a)
{
    cdy_meta m;
    void *d;
    if (!at_fusable(a[1], a[2], a[3]) || !at_read(a[0], 0, &m, &d))
        return NULL;
    PyObject *r = at_flash_fwd(a[1], a[2], a[3], a[5], a[4]);
    if (!r || at_fwd_exact(r) <= 0) {
        Py_XDECREF(r);
        return NULL;
    }
    PyObject *g = at_flash_bwd(a, PyTuple_GET_ITEM(r, 0), PyTuple_GET_ITEM(r, 1));
    Py_DECREF(r);
    return g;
}

/* _C.attention_grads(grad, q, k, v, scale, is_causal[, out, lse]): see
 * _autograd._attention_grads_py, whose values it gives. */
static PyObject *at_grads(PyObject *self, PyObject *const *args, Py_ssize_t nargsf,
                          PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    int ok = at_resolve();
    if (ok < 0)
        return NULL;
    cdy_meta m;
    void *d;
    int fast = ok && !kwnames && (n == 6 || n == 8) && PyBool_Check(args[5]);
    for (int i = 0; fast && n == 8 && i < 7; i++)
        fast = i == 4 || i == 5 || at_read(args[i], 0, &m, &d);
    if (fast && n == 8 && at_lse_fused(args[7]) > 0)
        return at_flash_bwd(args, args[6], args[7]);
    if (fast && n == 6) {
        PyObject *g = at_grads_recompute(args);
        if (g || PyErr_Occurred())
            return g;
    }
    return PyObject_Vectorcall(at.py_bwd, args, nargsf, kwnames);
}

static PyMethodDef at_methods[] = {
    {"attention_forward", (PyCFunction)(void (*)(void))at_forward, METH_FASTCALL | METH_KEYWORDS,
     "attention_forward(q, k, v, scale) -> (y, lse): cdynamo._autograd.attention_forward"},
    {"attention_grads", (PyCFunction)(void (*)(void))at_grads, METH_FASTCALL | METH_KEYWORDS,
     "attention_grads(grad, q, k, v, scale, is_causal, out=None, lse=None): "
     "cdynamo._autograd.attention_grads"},
    {NULL, NULL, 0, NULL},
};

/* See runtime.h. */
int cdy_attention_init(PyObject *m)
{
    for (PyMethodDef *d = at_methods; d->ml_name; d++) {
        PyObject *f = PyCFunction_NewEx(d, NULL, NULL);
        if (!f || PyModule_AddObject(m, d->ml_name, f) < 0) {
            Py_XDECREF(f);
            return -1;
        }
    }
    return 0;
}
