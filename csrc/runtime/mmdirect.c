/* mmdirect.c - a graph's torch.matmul extern called as the mm / bmm it reaches.
 *
 * torch.matmul(a, b) is a composite: per call it makes views of its
 * operands and of the product (expand, reshape, view, _unsafe_view: each a
 * dispatcher call, a tenth of a small training step's matmul time) before
 * and after the one mm or bmm that multiplies.  Where a graph's shapes are
 * static the runtime knows at compile time which of its branches a matmul
 * takes (ATen's _matmul_impl: mm for two matrices; mm on a (rows, k) view of
 * a stack times a matrix whose batch dims fold into its rows; bmm on
 * (batch, n, m) views of two stacks of the same batch whose batch dims fold
 * into one) and the views it makes (their strides follow from the metas,
 * which the guards and the run's buffers fix).  mmd_plan keeps them; a call
 * then makes the same views without the dispatcher (_reinterpret_tensor,
 * as compiled.c's extern-view aliases) and calls the same mm / bmm on the
 * same memory, writing the same result (torch.equal) with the same strides.
 * Broadcast batches, folds that copy, and dims of size 1 (whose strides the
 * metas do not fix) keep torch.matmul.  A view made so has no autograd link:
 * a call whose operand needs grad under grad mode runs torch.matmul. */
#include "runtime/runtime.h"

static PyObject *mmd_mm, *mmd_bmm;        /* torch.mm, torch.bmm */
static PyObject *mmd_reinterpret;         /* torch._C._dynamo.guards._reinterpret_tensor or NULL */
static PyObject *mmd_grad_enabled;        /* torch.is_grad_enabled */
static PyObject *mmd_kw_out;              /* ("out",) */
static int mmd_on = 1;                    /* _C.set_matmul_direct: plans are made */

/* See runtime.h: look up the torch functions; 0 or -1 with error (the views' function may
 * be missing: plans needing views are then not made). */
int cdy_mmd_init(PyObject *torch)
{
    mmd_mm = PyObject_GetAttrString(torch, "mm");
    mmd_bmm = PyObject_GetAttrString(torch, "bmm");
    mmd_grad_enabled = PyObject_GetAttrString(torch, "is_grad_enabled");
    mmd_kw_out = Py_BuildValue("(s)", "out");
    if (!mmd_mm || !mmd_bmm || !mmd_grad_enabled || !mmd_kw_out)
        return -1;
    PyObject *c = PyObject_GetAttrString(torch, "_C");
    PyObject *dyn = c ? PyObject_GetAttrString(c, "_dynamo") : NULL;
    PyObject *g = dyn ? PyObject_GetAttrString(dyn, "guards") : NULL;
    mmd_reinterpret = g ? PyObject_GetAttrString(g, "_reinterpret_tensor") : NULL;
    PyErr_Clear();
    Py_XDECREF(g);
    Py_XDECREF(dyn);
    Py_XDECREF(c);
    return 0;
}

/* 1 when every dim of m has at least 2 elements (each stride then is the
 * tensor's own, fixed by the meta). */
static int mmd_sizes_fixed(const cdy_meta *m)
{
    for (int d = 0; d < m->ndim; d++)
        if (m->sizes[d] < 2)
            return 0;
    return 1;
}

/* 1 when dims [0, upto] of m merge into one without a copy (each stride is
 * the next dim's stride times its size: ATen's should_fold test). */
static int mmd_merges(const cdy_meta *m, int upto)
{
    for (int d = 0; d < upto; d++)
        if (m->strides[d] != m->strides[d + 1] * m->sizes[d + 1])
            return 0;
    return 1;
}

/* The view (sizes, strides, 0) of m's last n dims, the dims before them
 * merged into its first (n = 2: (rows, k); n = 3: (batch, n, m)) with the
 * innermost merged dim's stride; contig: contiguous strides instead. */
static PyObject *mmd_view(const cdy_meta *m, int n, int contig)
{
    int64_t sz[3], st[3];
    int lead = m->ndim - n;
    sz[0] = 1;
    for (int d = 0; d <= lead; d++)
        sz[0] *= m->sizes[d];
    for (int k = 1; k < n; k++)
        sz[k] = m->sizes[lead + k];
    for (int k = 0; k < n; k++)
        st[k] = m->strides[lead + k];
    for (int k = n - 1; contig && k >= 0; k--)
        st[k] = k == n - 1 ? 1 : st[k + 1] * sz[k + 1];
    if (n == 2)
        return Py_BuildValue("((LL)(LL)i)", (long long)sz[0], (long long)sz[1],
                             (long long)st[0], (long long)st[1], 0);
    return Py_BuildValue("((LLL)(LLL)i)", (long long)sz[0], (long long)sz[1], (long long)sz[2],
                         (long long)st[0], (long long)st[1], (long long)st[2], 0);
}

/* m's full view with contiguous strides (sizes, strides, 0): the product's
 * shape, as ATen's _unsafe_view of the mm / bmm result gives it. */
static PyObject *mmd_full(const cdy_meta *m)
{
    PyObject *sz = PyTuple_New(m->ndim), *st = PyTuple_New(m->ndim);
    int64_t s = 1;
    for (int d = m->ndim - 1; sz && st && d >= 0; d--) {
        PyTuple_SET_ITEM(sz, d, PyLong_FromLongLong(m->sizes[d]));
        PyTuple_SET_ITEM(st, d, PyLong_FromLongLong(s));
        s *= m->sizes[d];
    }
    PyObject *r = sz && st && !PyErr_Occurred() ? Py_BuildValue("(OOi)", sz, st, 0) : NULL;
    Py_XDECREF(sz);
    Py_XDECREF(st);
    return r;
}

/* The plan (fn, view of a, of b, of an out= tensor, of the product: each
 * None when the tensor is used as it is); NULL with error. */
static PyObject *mmd_build(PyObject *fn, PyObject *va, PyObject *vb, PyObject *vo, PyObject *vf)
{
    PyObject *r = va && vb && vo && vf ? PyTuple_Pack(5, fn, va, vb, vo, vf) : NULL;
    Py_XDECREF(va);
    Py_XDECREF(vb);
    Py_XDECREF(vo);
    Py_XDECREF(vf);
    return r;
}

/* A stack a (>= 3 dims) times a matrix b, product o: mm on a's (rows, k)
 * view into o's (rows, n) one, or NULL when a's rows do not fold. */
static PyObject *mmd_plan_fold(const cdy_meta *a, const cdy_meta *b, const cdy_meta *o)
{
    if (!mmd_sizes_fixed(a) || !mmd_sizes_fixed(b) || !mmd_merges(a, a->ndim - 2))
        return NULL;
    return mmd_build(mmd_mm, mmd_view(a, 2, 0), Py_NewRef(Py_None), mmd_view(o, 2, 1),
                     mmd_full(o));
}

/* Two stacks of the same batch: bmm on their (batch, n, m) views (the
 * stacks themselves at 3 dims), or NULL where a batch is broadcast or a
 * stack's batch dims do not merge. */
static PyObject *mmd_plan_batch(const cdy_meta *a, const cdy_meta *b, const cdy_meta *o)
{
    int n = a->ndim;
    if (!mmd_sizes_fixed(a) || !mmd_sizes_fixed(b))
        return NULL;
    for (int d = 0; d < n - 2; d++)
        if (a->sizes[d] != b->sizes[d])
            return NULL;
    if (n == 3)
        return mmd_build(mmd_bmm, Py_NewRef(Py_None), Py_NewRef(Py_None), Py_NewRef(Py_None),
                         Py_NewRef(Py_None));
    if (!mmd_merges(a, n - 3) || !mmd_merges(b, n - 3))
        return NULL;
    return mmd_build(mmd_bmm, mmd_view(a, 3, 0), mmd_view(b, 3, 0), mmd_view(o, 3, 1),
                     mmd_full(o));
}

/* See runtime.h. */
PyObject *cdy_mmd_plan(const cdy_meta *a, const cdy_meta *b, const cdy_meta *o)
{
    PyObject *r = NULL;
    if (!mmd_on || !mmd_mm || a->dtype != b->dtype || a->ndim < 2 || b->ndim < 2 || o->ndim < 2)
        return NULL;
    if (a->ndim == 2 && b->ndim == 2)
        r = mmd_build(mmd_mm, Py_NewRef(Py_None), Py_NewRef(Py_None), Py_NewRef(Py_None),
                      Py_NewRef(Py_None));
    else if (!mmd_reinterpret && (a->ndim > 3 || b->ndim == 2))
        r = NULL;
    else if (a->ndim >= 3 && b->ndim == 2)
        r = mmd_plan_fold(a, b, o);
    else if (a->ndim == b->ndim && a->ndim >= 3)
        r = mmd_plan_batch(a, b, o);
    PyErr_Clear();
    return r;
}

/* 1 when a call of plan on a, b may make its views: none needed, or no
 * operand needs grad, or grad mode is off; 0 otherwise, -1 with error. */
static int mmd_views_ok(PyObject *plan, PyObject *a, PyObject *b)
{
    int views = 0;
    for (int i = 1; i < 5; i++)
        views |= PyTuple_GET_ITEM(plan, i) != Py_None;
    if (!views)
        return 1;
    PyObject *ga = cdy_tensor_attr(a, CDY_TA_requires_grad);
    PyObject *gb = ga ? cdy_tensor_attr(b, CDY_TA_requires_grad) : NULL;
    int rc = -1;
    if (gb && ga == Py_False && gb == Py_False)
        rc = 1;
    else if (gb) {
        PyObject *on = PyObject_CallNoArgs(mmd_grad_enabled);
        rc = on ? on != Py_True : -1;
        Py_XDECREF(on);
    }
    Py_XDECREF(ga);
    Py_XDECREF(gb);
    return rc;
}

/* t, or its view v (a (sizes, strides, offset) tuple) made without the
 * dispatcher; new ref or NULL with error. */
static PyObject *mmd_as(PyObject *t, PyObject *v)
{
    if (v == Py_None)
        return Py_NewRef(t);
    PyObject *args[4] = {t, PyTuple_GET_ITEM(v, 0), PyTuple_GET_ITEM(v, 1),
                         PyTuple_GET_ITEM(v, 2)};
    return PyObject_Vectorcall(mmd_reinterpret, args, 4, NULL);
}

/* See runtime.h. */
int cdy_mmd_call(PyObject *plan, PyObject *a, PyObject *b, PyObject *out, PyObject **r)
{
    int ok = mmd_views_ok(plan, a, b);
    if (ok <= 0)
        return ok;
    PyObject *fn = PyTuple_GET_ITEM(plan, 0);
    PyObject *va = mmd_as(a, PyTuple_GET_ITEM(plan, 1));
    PyObject *vb = va ? mmd_as(b, PyTuple_GET_ITEM(plan, 2)) : NULL;
    PyObject *vo = vb && out ? mmd_as(out, PyTuple_GET_ITEM(plan, 3)) : NULL;
    PyObject *p = NULL;
    *r = NULL;
    if (vb && out && vo) {
        PyObject *args[3] = {va, vb, vo};
        p = PyObject_Vectorcall(fn, args, 2, mmd_kw_out);
        *r = p ? Py_NewRef(out) : NULL;
    }
    else if (vb && !out) {
        PyObject *args[2] = {va, vb};
        p = PyObject_Vectorcall(fn, args, 2, NULL);
        *r = p ? mmd_as(p, PyTuple_GET_ITEM(plan, 4)) : NULL;
    }
    Py_XDECREF(p);
    Py_XDECREF(vo);
    Py_XDECREF(vb);
    Py_XDECREF(va);
    return *r ? 1 : -1;
}

/* See runtime.h. */
PyObject *cdy_mmd_py_set(PyObject *self, PyObject *arg)
{
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0)
        return NULL;
    PyObject *was = PyBool_FromLong(mmd_on);
    mmd_on = on;
    return was;
}
