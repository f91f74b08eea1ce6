/* build_views.c - builders of views (BUILD rows of ops/callables.def).
 *
 * An aliasing view (slicing, select, permute, expand, reshape when torch
 * gives a view, ...) becomes a VIEW node; a copy whose elements are its
 * input's at other indices (flip, clone, contiguous) a VIEW_COPY node.  Both
 * carry strides and an element offset into a base that is never a VIEW
 * (cdy_value.view_*): views of views compose, from torch's own result on the
 * fakes (its strides and storage offset), so they match eager by
 * construction.  A call whose result is not what the lowering expects (a
 * reshape that copies, a dtype view) returns NULL: it stays an extern. */
#include "trace/trace.h"

#include <string.h>

/* 1 if o is a tensor. */
static int is_tensor(PyObject *o)
{
    return PyObject_TypeCheck(o, (PyTypeObject *)cdy_tensor_type);
}

/* Storage offset of fake t, or -1 (error cleared). */
static long long fake_offset(PyObject *t)
{
    PyObject *r = PyObject_CallMethod(t, "storage_offset", NULL);
    long long so = r ? PyLong_AsLongLong(r) : -1;
    Py_XDECREF(r);
    if (so < 0)
        PyErr_Clear();
    return so;
}

/* t._base when t is a view, else t; new reference, NULL on error (cleared). */
static PyObject *view_root(PyObject *t)
{
    PyObject *b = PyObject_GetAttrString(t, "_base");
    if (!b) {
        PyErr_Clear();
        return NULL;
    }
    if (b == Py_None) {
        Py_DECREF(b);
        return Py_NewRef(t);
    }
    return b;
}

/* 1 if out is a view of self's storage (torch's view tracking says so). */
static int is_alias_of(PyObject *out, PyObject *self)
{
    PyObject *iv = PyObject_CallMethod(out, "_is_view", NULL);
    int view = iv == Py_True;
    Py_XDECREF(iv);
    PyErr_Clear();
    if (!view)
        return 0;
    PyObject *a = view_root(out), *b = view_root(self);
    int same = a && a == b;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return same;
}

/* Graph values of the call's tensor args (in lists too), args[0] first,
 * into argv; their count, or -1 when there are too many. */
static int view_args(const cdy_build_call *call, int *argv)
{
    int n = 0;
    for (int i = 0; i < call->nargs; i++) {
        tvar *a = call->args[i];
        int seq = a->kind == TV_TUPLE || a->kind == TV_LIST, cnt = seq ? a->n : 1;
        for (int j = 0; j < cnt; j++) {
            tvar *it = seq ? a->items[j] : a;
            if (it->kind != TV_TENSOR)
                continue;
            if (n == CDY_MAX_NODE_ARGS)
                return -1;
            argv[n++] = it->value;
        }
    }
    return n;
}

void cdy_view_load_map(tracer *tr, int p, int *base, int64_t *strides, int64_t *off)
{
    const cdy_value *pv = &tr->t->graph.values[p];
    int is_view = pv->kind == CDY_VAL_NODE && cdy_op_table[pv->op].kind == 'V';
    *base = is_view ? pv->view_base : p;
    *off = is_view ? pv->view_offset : 0;
    memcpy(strides, is_view ? pv->view_strides : pv->meta.strides, sizeof(int64_t) * CDY_MAX_NDIM);
}

/* A new kind V node (see trace.h) over argv[0..n) with meta m; its value, or
 * -1 when stopped. */
int cdy_view_value(tracer *tr, int alias, const int *argv, int n, const cdy_meta *m, int base,
                   const int64_t *strides, int64_t off)
{
    int v = cdy_node_add(tr, alias ? CDY_OP_VIEW : CDY_OP_VIEW_COPY, argv, n, m, m->dtype);
    if (v < 0)
        return -1;
    cdy_value *gv = &tr->t->graph.values[v];
    gv->view_base = base;
    gv->view_offset = off;
    memcpy(gv->view_strides, strides, sizeof(int64_t) * CDY_MAX_NDIM);
    return v;
}

/* A new view node (alias: VIEW, else VIEW_COPY) with torch's result meta m,
 * reading base at strides/off; the call's result tvar, or NULL. */
static tvar *view_node(tracer *tr, const cdy_build_call *call, int alias, const cdy_meta *m,
                       int base, const int64_t *strides, int64_t off)
{
    int argv[CDY_MAX_NODE_ARGS], n = view_args(call, argv);
    if (n < 1)
        return NULL;
    int v = cdy_view_value(tr, alias, argv, n, m, base, strides, off);
    return v < 0 ? NULL : cdy_build_result(tr, call, v);
}

/* reshape(x, sizes) that copies (x's layout allows no view): traced as
 * x.contiguous().view(sizes), so its sizes stay a view's (symbolic with
 * sympins.c's maps); NULL (an extern) for keyword arguments. */
static tvar *reshape_copy(tracer *tr, const cdy_build_call *call)
{
    const char *dot = strrchr(call->what, '.');
    if (strcmp(dot ? dot + 1 : call->what, "reshape") || call->kwnames || call->nargs < 2)
        return NULL;
    PyObject *fc = cdy_tr_keep(tr, PyObject_GetAttrString(cdy_tensor_type, "contiguous"));
    PyObject *fv = cdy_tr_keep(tr, PyObject_GetAttrString(cdy_tensor_type, "view"));
    tvar **a = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)call->nargs);
    if (!fc || !fv || !a) {
        PyErr_Clear();
        return NULL;
    }
    tvar *c = cdy_call_torch(tr, fc, "Tensor.contiguous", call->args, 1, NULL);
    if (!c || c->kind != TV_TENSOR)
        return NULL;
    memcpy(a, call->args, sizeof(tvar *) * (size_t)call->nargs);
    a[0] = c;
    return cdy_call_torch(tr, fv, "Tensor.view", a, call->nargs, NULL);
}

/* An aliasing view of args[0]: a VIEW node whose strides and offset are
 * torch's (the fakes share the base's storage).  args[0] itself when torch
 * returned it; NULL (an extern) when the result is not a view of args[0]. */
tvar *cdy_build_view(tracer *tr, const cdy_build_call *call)
{
    if (call->nargs < 1 || call->args[0]->kind != TV_TENSOR || !is_tensor(call->out))
        return NULL;
    tvar *self = call->args[0];
    if (call->out == self->obj)
        return self;
    if (!is_alias_of(call->out, self->obj))
        return reshape_copy(tr, call);
    cdy_meta m;
    if (cdy_read_meta(tr, call->out, &m))
        return NULL;
    const cdy_value *pv = &tr->t->graph.values[self->value];
    if (m.dtype != pv->meta.dtype)
        return NULL;
    int base = self->value;
    long long so = fake_offset(call->out), base_so = fake_offset(self->obj);
    if (so < 0 || base_so < 0)
        return NULL;
    if (pv->kind == CDY_VAL_NODE && cdy_op_has(pv->op, CDY_OPF_ALIAS)) {
        base = pv->view_base;
        base_so -= pv->view_offset;
    }
    return view_node(tr, call, 1, &m, base, m.strides, so - base_so);
}

/* as_strided(input, size, stride, storage_offset=None): a VIEW (torch's
 * strides and offset).  An explicit storage_offset is absolute in the
 * storage, which the fakes of inputs do not share (their offset is 0, not
 * guarded): NULL (an extern) unless it is absent or None. */
tvar *cdy_build_as_strided(tracer *tr, const cdy_build_call *call)
{
    tvar *slot[4];
    if (cdy_bind_names("input size stride storage_offset", call->args, call->nargs,
                       call->kwnames, slot) ||
        (slot[3] && !(slot[3]->kind == TV_CONST && slot[3]->obj == Py_None)))
        return NULL;
    return cdy_build_view(tr, call);
}

/* t.mT / t.mH (ndim >= 2), t.T / t.H (ndim 2) of a real tensor (every
 * dtype cdynamo traces): the call Tensor.transpose(t, -2, -1), which
 * build_view makes a VIEW; t.mT / t.mH of a 0-d t: t itself, as eager's
 * (deprecated there: "the identity in these cases").  NULL when stopped;
 * *not_attr set for any other name or rank (torch's own attribute then
 * raises or warns as eager). */
tvar *cdy_transpose_attr(tracer *tr, tvar *t, const char *n, int *not_attr)
{
    int nd = tr->t->graph.values[t->value].meta.ndim;
    *not_attr = 0;
    if ((!strcmp(n, "mT") || !strcmp(n, "mH")) && nd == 0)
        return t;
    int m = (!strcmp(n, "mT") || !strcmp(n, "mH")) && nd >= 2;
    *not_attr = !m && !((!strcmp(n, "T") || !strcmp(n, "H")) && nd == 2);
    if (*not_attr)
        return NULL;
    PyObject *fn = cdy_tr_keep(tr, PyObject_GetAttrString(cdy_tensor_type, "transpose"));
    tvar *a[3] = {t, cdy_tv_const(tr, PyLong_FromLong(-2)), cdy_tv_const(tr, PyLong_FromLong(-1))};
    if (!fn || !a[1] || !a[2]) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    return cdy_call_extern(tr, fn, n, a, 3);
}

int cdy_int_items(tvar *a, int *dims, int *n, int cap)
{
    if (a->kind == TV_CONST && PyLong_Check(a->obj)) {
        if (*n == cap)
            return -1;
        dims[(*n)++] = (int)PyLong_AsLong(a->obj);
        return PyErr_Occurred() ? (PyErr_Clear(), -1) : 0;
    }
    if (a->kind == TV_CONST && (PyTuple_Check(a->obj) || PyList_Check(a->obj))) {
        PyObject *f = PySequence_Fast(a->obj, "dims");
        for (Py_ssize_t i = 0; f && i < PySequence_Fast_GET_SIZE(f); i++) {
            PyObject *it = PySequence_Fast_GET_ITEM(f, i);
            if (!PyLong_Check(it) || *n == cap) {
                Py_DECREF(f);
                return -1;
            }
            dims[(*n)++] = (int)PyLong_AsLong(it);
        }
        Py_XDECREF(f);
        return f && !PyErr_Occurred() ? 0 : (PyErr_Clear(), -1);
    }
    if (a->kind == TV_TUPLE || a->kind == TV_LIST) {
        for (int i = 0; i < a->n; i++)
            if (cdy_int_items(a->items[i], dims, n, cap) || a->items[i]->kind != TV_CONST)
                return -1;
        return 0;
    }
    return -1;
}

/* A copy of args[0] reading it with dims[0..nflip) reversed: a VIEW_COPY
 * with torch's result meta (its strides: eager's layout).  args[0] itself
 * when torch returned it (contiguous of a contiguous tensor). */
static tvar *build_copy(tracer *tr, const cdy_build_call *call, const int *dims, int nflip)
{
    if (call->nargs < 1 || call->args[0]->kind != TV_TENSOR || !is_tensor(call->out))
        return NULL;
    tvar *self = call->args[0];
    if (call->out == self->obj)
        return self;
    if (is_alias_of(call->out, self->obj))
        return NULL;
    cdy_meta m;
    if (cdy_read_meta(tr, call->out, &m))
        return NULL;
    const cdy_meta *pm = &tr->t->graph.values[self->value].meta;
    if (m.dtype != pm->dtype || m.ndim != pm->ndim ||
        memcmp(m.sizes, pm->sizes, sizeof(int64_t) * (size_t)m.ndim))
        return NULL;
    int base;
    int64_t st[CDY_MAX_NDIM], off;
    cdy_view_load_map(tr, self->value, &base, st, &off);
    for (int i = 0; i < nflip; i++) {
        int d = dims[i] < 0 ? dims[i] + m.ndim : dims[i];
        if (d < 0 || d >= m.ndim)
            return NULL;
        if (m.sizes[d] > 1) {
            off += (m.sizes[d] - 1) * st[d];
            st[d] = -st[d];
        }
    }
    return view_node(tr, call, 0, &m, base, st, off);
}

/* clone / contiguous: a copy in torch's result layout. */
tvar *cdy_build_clone(tracer *tr, const cdy_build_call *call)
{
    return build_copy(tr, call, NULL, 0);
}

/* flip(input, dims) / Tensor.flip(*dims). */
tvar *cdy_build_flip(tracer *tr, const cdy_build_call *call)
{
    int dims[CDY_MAX_NDIM], n = 0;
    for (int i = 1; i < call->nargs; i++)   /* positional dims, then dims= */
        if (cdy_int_items(call->args[i], dims, &n, CDY_MAX_NDIM))
            return NULL;
    if (n == 0)
        return NULL;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (dims[i] == dims[j])
                return NULL;
    return build_copy(tr, call, dims, n);
}

/* fliplr(input): flip dim 1. */
tvar *cdy_build_fliplr(tracer *tr, const cdy_build_call *call)
{
    static const int d1[1] = {1};
    return call->nargs == 1 ? build_copy(tr, call, d1, 1) : NULL;
}

/* flipud(input): flip dim 0. */
tvar *cdy_build_flipud(tracer *tr, const cdy_build_call *call)
{
    static const int d0[1] = {0};
    return call->nargs == 1 ? build_copy(tr, call, d0, 1) : NULL;
}

/* cat / stack of a list of tensors along dim (named dim_name): a CAT or
 * STACK node with args (pieces, dim), torch's result meta.  NULL (an extern)
 * for more than 7 pieces, a dim that is not a constant int, pieces of
 * another rank (cat's legacy empty 1-D pieces), or other arguments. */
static tvar *build_pieces(tracer *tr, const cdy_build_call *call, int op, const char *sig)
{
    tvar *slot[2];
    if (cdy_bind_names(sig, call->args, call->nargs, call->kwnames, slot) || !slot[0] ||
        (slot[0]->kind != TV_LIST && slot[0]->kind != TV_TUPLE) || slot[0]->n < 1 ||
        slot[0]->n > CDY_MAX_NODE_ARGS - 1 || !is_tensor(call->out))
        return NULL;
    long d = 0;
    if (slot[1]) {
        if (slot[1]->kind != TV_CONST || !PyLong_CheckExact(slot[1]->obj))
            return NULL;
        d = PyLong_AsLong(slot[1]->obj);
        if (d == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return NULL;
        }
    }
    cdy_meta m;
    if (cdy_read_meta(tr, call->out, &m))
        return NULL;
    if (d < 0)
        d += m.ndim;
    if (d < 0 || d >= m.ndim)
        return NULL;
    int argv[CDY_MAX_NODE_ARGS], n = slot[0]->n;
    for (int i = 0; i < n; i++) {
        tvar *it = slot[0]->items[i];
        if (it->kind != TV_TENSOR ||
            tr->t->graph.values[it->value].meta.ndim != m.ndim - (op == CDY_OP_STACK))
            return NULL;
        argv[i] = it->value;
    }
    if ((argv[n] = cdy_scalar_int(tr, d)) < 0)
        return NULL;
    int v = cdy_node_add(tr, op, argv, n + 1, &m, m.dtype);
    return v < 0 ? NULL : cdy_build_result(tr, call, v);
}

/* torch.cat / torch.concat (CAT) and torch.stack (STACK)(tensors, dim=0). */
tvar *cdy_build_cat(tracer *tr, const cdy_build_call *call)
{
    return build_pieces(tr, call, call->op, "tensors dim");
}

/* torch.concatenate(tensors, axis=0). */
tvar *cdy_build_concatenate(tracer *tr, const cdy_build_call *call)
{
    return build_pieces(tr, call, call->op, "tensors axis");
}

/* 1 if scalar value sv converts exactly to dtype dt (any value for floats;
 * an integer in range for integer dtypes, 0 or 1 for bool). */
static int pad_value_exact(const cdy_value *sv, int dt)
{
    static const double lo[] = {0, 0, -128, -32768, -2147483648.0, -9223372036854775808.0};
    static const double hi[] = {1, 255, 127, 32767, 2147483647.0, 9223372036854775807.0};
    if (cdy_dtype_table[dt].is_float)
        return 1;
    double f = sv->meta.dtype == CDY_DT_FLOAT64 ? sv->f : (double)sv->i;
    return dt <= CDY_DT_INT64 && f == (double)(long long)f && f >= lo[dt] && f < hi[dt] + 1 &&
           (dt != CDY_DT_INT64 || sv->meta.dtype != CDY_DT_FLOAT64 || (f > -9.2e18 && f < 9.2e18));
}

/* Constant pad from bound slots (input, pad, mode, value):
 * F.pad(input, pad, mode='constant', value=None),
 * constant_pad_nd(input, pad, value=0): a PAD node (args input and value;
 * the pad before each dim in view_strides), torch's result meta.  NULL (an
 * extern) for other modes or a value that is not a number. */
static tvar *build_pad_slots(tracer *tr, const cdy_build_call *call, tvar **slot)
{
    int pads[2 * CDY_MAX_NDIM], np = 0;
    if (!slot[0] || slot[0]->kind != TV_TENSOR || !slot[1] || !is_tensor(call->out) ||
        cdy_int_items(slot[1], pads, &np, 2 * CDY_MAX_NDIM) || np % 2)
        return NULL;
    if (slot[2] && !(slot[2]->kind == TV_CONST && PyUnicode_Check(slot[2]->obj) &&
                     PyUnicode_CompareWithASCIIString(slot[2]->obj, "constant") == 0))
        return NULL;
    tvar *val = slot[3];
    int sv = !val || (val->kind == TV_CONST && val->obj == Py_None) ? cdy_scalar_int(tr, 0) :
             val->kind != TV_CONST || !(PyLong_Check(val->obj) || PyFloat_Check(val->obj)) ? -2 :
             PyBool_Check(val->obj) ? cdy_scalar_bool(tr, val->obj == Py_True) :
             PyFloat_Check(val->obj) ? cdy_scalar_float(tr, PyFloat_AS_DOUBLE(val->obj)) :
             cdy_scalar_int(tr, PyLong_AsLongLong(val->obj));
    if (PyErr_Occurred())
        PyErr_Clear();
    cdy_meta m;
    if (sv < 0 || cdy_read_meta(tr, call->out, &m))
        return NULL;
    const cdy_meta *xm = &tr->t->graph.values[slot[0]->value].meta;
    if (xm->ndim != m.ndim || np / 2 > m.ndim || xm->dtype != m.dtype)
        return NULL;
    if (!pad_value_exact(&tr->t->graph.values[sv], m.dtype))
        return NULL;
    int64_t lo[CDY_MAX_NDIM] = {0};
    for (int k = 0; k < np / 2; k++)
        lo[m.ndim - 1 - k] = pads[2 * k];
    for (int d = 0; d < m.ndim; d++)
        if (m.sizes[d] - xm->sizes[d] - lo[d] != (d >= m.ndim - np / 2 ? pads[2 * (m.ndim - 1 - d) + 1] : 0))
            return NULL;
    int argv[2] = {slot[0]->value, sv};
    int v = cdy_node_add(tr, CDY_OP_PAD, argv, 2, &m, m.dtype);
    if (v < 0)
        return NULL;
    memcpy(tr->t->graph.values[v].view_strides, lo, sizeof(lo));
    return cdy_build_result(tr, call, v);
}

/* F.pad(input, pad, mode, value). */
tvar *cdy_build_pad(tracer *tr, const cdy_build_call *call)
{
    tvar *slot[4];
    if (cdy_bind_names("input pad mode value", call->args, call->nargs, call->kwnames, slot))
        return NULL;
    return build_pad_slots(tr, call, slot);
}

/* constant_pad_nd(input, pad, value). */
tvar *cdy_build_constant_pad_nd(tracer *tr, const cdy_build_call *call)
{
    tvar *s3[3];
    if (cdy_bind_names("input pad value", call->args, call->nargs, call->kwnames, s3))
        return NULL;
    tvar *slot[4] = {s3[0], s3[1], NULL, s3[2]};
    return build_pad_slots(tr, call, slot);
}

/* A call returning several views of args[0] along dim (split, chunk,
 * unbind...): a TUPLE of VIEW nodes, item i recorded as the call
 * narrow(x, dim, start, len) (select(x, dim, i) when `sel`) that makes the
 * same view, so a realized item runs just that.  NULL (externs) when an item
 * is not such a view. */
static tvar *multi_view(tracer *tr, const cdy_build_call *call, tvar *dimv, int sel)
{
    PyObject *out = call->out;
    if (call->nargs < 1 || call->args[0]->kind != TV_TENSOR || !PyTuple_Check(out) ||
        PyTuple_GET_SIZE(out) < 1 || PyTuple_GET_SIZE(out) > 64)
        return NULL;
    tvar *self = call->args[0];
    const cdy_meta *sm = &tr->t->graph.values[self->value].meta;
    long d = 0;
    if (dimv && (dimv->kind != TV_CONST || !PyLong_CheckExact(dimv->obj) ||
                 ((d = PyLong_AsLong(dimv->obj)) == -1 && PyErr_Occurred()))) {
        PyErr_Clear();
        return NULL;
    }
    if (d < 0)
        d += sm->ndim;
    if (d < 0 || d >= sm->ndim)
        return NULL;
    PyObject *fn = PyObject_GetAttrString(cdy_tensor_type, sel ? "select" : "narrow");
    if (!cdy_tr_keep(tr, fn)) {
        PyErr_Clear();
        return NULL;
    }
    int n = (int)PyTuple_GET_SIZE(out);
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
    if (!items)
        return NULL;
    long long start = 0;
    for (int i = 0; i < n; i++) {
        PyObject *it = PyTuple_GET_ITEM(out, i);
        PyObject *shape = is_tensor(it) ? PyObject_GetAttrString(it, "shape") : NULL;
        long long len = sel ? 1 : shape && PyTuple_GET_SIZE(shape) == sm->ndim ?
                        PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d)) : -1;
        Py_XDECREF(shape);
        if (len < 0) {
            PyErr_Clear();
            return NULL;
        }
        tvar *a[4] = {self, cdy_tv_const(tr, PyLong_FromLong(d)),
                      cdy_tv_const(tr, PyLong_FromLongLong(sel ? i : start)),
                      sel ? NULL : cdy_tv_const(tr, PyLong_FromLongLong(len))};
        if (!a[1] || !a[2] || (!sel && !a[3]))
            return NULL;
        cdy_build_call ic = {fn, call->what, a, sel ? 3 : 4, NULL, it, CDY_OP_NONE};
        if (!(items[i] = cdy_build_view(tr, &ic)) || items[i] == self)
            return NULL;   /* earlier items are dead nodes: the call becomes an extern */
        start += len;
    }
    return cdy_tv_seq(tr, TV_TUPLE, items, n);
}

/* split / chunk / tensor_split / split_with_sizes(input, sizes, dim=0). */
tvar *cdy_build_split(tracer *tr, const cdy_build_call *call)
{
    tvar *slot[3];
    if (cdy_bind_names("input sizes dim", call->args, call->nargs, call->kwnames, slot) ||
        !slot[1])
        return NULL;
    return multi_view(tr, call, slot[2], 0);
}

/* unbind(input, dim=0). */
tvar *cdy_build_unbind(tracer *tr, const cdy_build_call *call)
{
    tvar *slot[2];
    if (cdy_bind_names("input dim", call->args, call->nargs, call->kwnames, slot))
        return NULL;
    return multi_view(tr, call, slot[1], 1);
}
