/* build_reduce.c - builders of reductions (BUILD rows of ops/callables.def).
 *
 * torch.max/min: no dim, the amax/amin of every element; with a dim, two
 * nodes (amax/amin for the values, argmax/argmin for the indices, adjacent:
 * the compiler computes both in one kernel); with a tensor, elementwise: not
 * lowered here.  var_mean/std_mean: var/std and mean nodes.  torch.norm,
 * Tensor.norm, torch.linalg.vector_norm: a vector_norm node.  F.normalize:
 * x / vector_norm(x, keepdim).clamp_min(eps) (compose.c).  Arguments are bound by the
 * reduction ops' signatures in opbind.c (cdy_op_bind): what they reject runs
 * as an extern call. */
#include "trace/trace.h"

#include <string.h>

/* Graph values of canonical reduction args canon[0..n) (a tensor, an int
 * mask, a bool keepdim, a float param) into argv; 0, or -1 when stopped. */
static int red_argv(tracer *tr, tvar **canon, int n, int *argv)
{
    argv[0] = canon[0]->value;
    for (int i = 1; i < n; i++) {
        PyObject *o = canon[i]->obj;
        if (PyBool_Check(o))
            argv[i] = cdy_scalar_bool(tr, o == Py_True);
        else if (PyFloat_Check(o))
            argv[i] = cdy_scalar_float(tr, PyFloat_AS_DOUBLE(o));
        else
            argv[i] = cdy_scalar_int(tr, PyLong_AsLongLong(o));
        if (argv[i] < 0)
            return -1;
    }
    return 0;
}

/* A node op(argv[0..n)) with the meta of `fake`; its value, or -1 when stopped. */
static int red_node(tracer *tr, int op, const int *argv, int n, PyObject *fake)
{
    cdy_meta m;
    if (cdy_read_meta(tr, fake, &m))
        return -1;
    return cdy_node_add(tr, op, argv, n, &m, m.dtype);
}

/* 1 if x (canon[0]) has no element in the dims of mask canon[1]. */
static int red_empty(tracer *tr, tvar **canon)
{
    const cdy_meta *m = &tr->t->graph.values[canon[0]->value].meta;
    long long mask = PyLong_AsLongLong(canon[1]->obj);
    for (int d = 0; d < m->ndim; d++)
        if ((mask >> d & 1) && m->sizes[d] == 0)
            return 1;
    return 0;
}

/* 1 if o is a tuple of n tensors. */
static int red_tensors(PyObject *o, int n)
{
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (!PyObject_TypeCheck(PyTuple_GET_ITEM(o, i), (PyTypeObject *)cdy_tensor_type))
            return 0;
    return 1;
}

/* torch.max / torch.min and the methods (call->op: AMAX or AMIN; with a dim,
 * the indices are the reduction paired with it): see the file comment. */
tvar *cdy_build_minmax(tracer *tr, const cdy_build_call *call)
{
    tvar *slot[3], *canon[CDY_MAX_NODE_ARGS];
    int op = call->op, argv[3], v;
    if (cdy_bind_names("input dim keepdim", call->args, call->nargs, call->kwnames, slot) ||
        !slot[0] || slot[0]->kind != TV_TENSOR || (slot[1] && slot[1]->kind == TV_TENSOR))
        return NULL;
    if (cdy_op_bind(tr, &op, call->args, call->nargs, call->kwnames, canon) != 3 ||
        red_empty(tr, canon))
        return NULL;
    int with_dim = slot[1] && !(slot[1]->kind == TV_CONST && slot[1]->obj == Py_None);
    if (with_dim ? !red_tensors(call->out, 2)
                 : !PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type))
        return NULL;
    if (red_argv(tr, canon, 3, argv))
        return NULL;
    if (!with_dim)
        return (v = red_node(tr, op, argv, 3, call->out)) < 0 ? NULL
                                                               : cdy_build_result(tr, call, v);
    int vs[2];
    if ((vs[0] = red_node(tr, op, argv, 3, PyTuple_GET_ITEM(call->out, 0))) < 0 ||
        (vs[1] = red_node(tr, cdy_op_paired(call->op), argv, 3,
                          PyTuple_GET_ITEM(call->out, 1))) < 0)
        return NULL;
    return cdy_build_result_multi(tr, call, vs, 2);
}

/* var_mean / std_mean (call->op: VAR or STD): (var or std, mean) of the same
 * reduction; the mean is MEAN_WF, eager's Welford mean (NaN where an inf is
 * not the last element). */
tvar *cdy_build_moments(tracer *tr, const cdy_build_call *call)
{
    tvar *canon[CDY_MAX_NODE_ARGS];
    int op = call->op, argv[4], vs[2];
    if (!red_tensors(call->out, 2) ||
        cdy_op_bind(tr, &op, call->args, call->nargs, call->kwnames, canon) != 4)
        return NULL;
    if (red_argv(tr, canon, 4, argv) ||
        (vs[0] = red_node(tr, op, argv, 4, PyTuple_GET_ITEM(call->out, 0))) < 0 ||
        (vs[1] = red_node(tr, CDY_OP_MEAN_WF, argv, 3, PyTuple_GET_ITEM(call->out, 1))) < 0)
        return NULL;
    return cdy_build_result_multi(tr, call, vs, 2);
}

/* A vector_norm node (op) over canonical args [x, ord, dim, keepdim]
 * (positional); its value, -1 when not lowerable (no stop), or -1 with the
 * trace stopped. */
static int norm_node(tracer *tr, int op, tvar **pos, PyObject *fake)
{
    tvar *canon[CDY_MAX_NODE_ARGS];
    int argv[4];
    if (!PyObject_TypeCheck(fake, (PyTypeObject *)cdy_tensor_type) ||
        cdy_op_bind(tr, &op, pos, 4, NULL, canon) != 4 || red_argv(tr, canon, 4, argv))
        return -1;
    return red_node(tr, op, argv, 4, fake);
}

/* torch.linalg.vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None)
 * (call->op: the vector norm's op). */
tvar *cdy_build_vector_norm(tracer *tr, const cdy_build_call *call)
{
    tvar *canon[CDY_MAX_NODE_ARGS];
    int op = call->op, argv[4], v;
    if (!PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type) ||
        cdy_op_bind(tr, &op, call->args, call->nargs, call->kwnames, canon) != 4 ||
        red_argv(tr, canon, 4, argv) || (v = red_node(tr, op, argv, 4, call->out)) < 0)
        return NULL;
    return cdy_build_result(tr, call, v);
}

/* The vector norm order of torch.norm's p (a number, None or 'fro' with at
 * most 2 dims: 2) as a constant tvar; NULL when torch.norm is not a vector norm. */
static tvar *norm_order(tracer *tr, tvar *p, tvar *dim)
{
    if (p && p->kind == TV_CONST && PyUnicode_Check(p->obj)) {
        const char *ps = PyUnicode_AsUTF8(p->obj);
        if (!ps) {
            PyErr_Clear();
            return NULL;
        }
        if (strcmp(ps, "fro") ||
            (dim && (dim->kind == TV_TUPLE || dim->kind == TV_LIST) && dim->n > 2) ||
            (dim && dim->kind == TV_CONST && PySequence_Check(dim->obj) &&
             PySequence_Size(dim->obj) > 2))
            return NULL;
        p = NULL;
    }
    if (cdy_tv_none(p))
        return cdy_tv_const(tr, PyFloat_FromDouble(2.0));
    return p;
}

int cdy_norm_args(tracer *tr, tvar **args, int nargs, PyObject *kwnames, tvar **pos)
{
    tvar *slot[6];
    if (cdy_bind_names("input p dim keepdim out dtype", args, nargs, kwnames, slot) ||
        !slot[0] || !cdy_tv_none(slot[4]) || !cdy_tv_none(slot[5]))
        return -1;
    pos[0] = slot[0];
    pos[1] = norm_order(tr, slot[1], slot[2]);
    pos[2] = slot[2] ? slot[2] : cdy_tv_const(tr, Py_NewRef(Py_None));
    pos[3] = slot[3] ? slot[3] : cdy_tv_const(tr, Py_NewRef(Py_False));
    return pos[1] && pos[2] && pos[3] ? 0 : -1;
}

/* torch.norm(input, p='fro', dim=None, keepdim=False, out=None, dtype=None),
 * Tensor.norm: vector norms (see norm_order); the rest stays extern. */
tvar *cdy_build_norm(tracer *tr, const cdy_build_call *call)
{
    tvar *pos[4];
    if (cdy_norm_args(tr, call->args, call->nargs, call->kwnames, pos))
        return NULL;
    int v = norm_node(tr, call->op, pos, call->out);
    return v < 0 ? NULL : cdy_build_result(tr, call, v);
}

/* Meta m reduced over the dims of mask, keepdim, contiguous. */
static void red_keep_meta(const cdy_meta *m, long long mask, cdy_meta *out)
{
    *out = *m;
    int64_t st = 1;
    for (int d = m->ndim - 1; d >= 0; d--) {
        if (mask >> d & 1)
            out->sizes[d] = 1;
        out->strides[d] = st;
        st *= out->sizes[d];
    }
}

/* F.normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
 * input / vector_norm(input, p, dim, keepdim=True).clamp_min(eps). */
tvar *cdy_build_normalize(tracer *tr, const cdy_build_call *call)
{
    tvar *slot[5], *canon[CDY_MAX_NODE_ARGS];
    if (cdy_bind_names("input p dim eps out", call->args, call->nargs, call->kwnames, slot) ||
        !slot[0] || slot[0]->kind != TV_TENSOR || !cdy_tv_none(slot[4]) ||
        (slot[3] && !(slot[3]->kind == TV_CONST && PyFloat_CheckExact(slot[3]->obj))) ||
        !PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type))
        return NULL;
    tvar *pos[4] = {slot[0], slot[1], slot[2], cdy_tv_const(tr, Py_NewRef(Py_True))};
    if ((!pos[1] && !(pos[1] = cdy_tv_const(tr, PyFloat_FromDouble(2.0)))) ||
        (!pos[2] && !(pos[2] = cdy_tv_const(tr, PyLong_FromLong(1)))) || !pos[3])
        return NULL;
    if (pos[2]->kind != TV_CONST || !PyLong_CheckExact(pos[2]->obj))
        return NULL;   /* F.normalize takes one int dim */
    int op = call->op, argv[4], v;
    if (cdy_op_bind(tr, &op, pos, 4, NULL, canon) != 4 || red_argv(tr, canon, 4, argv))
        return NULL;
    const cdy_meta *im = &tr->t->graph.values[slot[0]->value].meta;
    cdy_meta nm, om;
    red_keep_meta(im, PyLong_AsLongLong(canon[1]->obj), &nm);
    if (cdy_read_meta(tr, call->out, &om))
        return NULL;
    double eps = slot[3] ? PyFloat_AS_DOUBLE(slot[3]->obj) : 1e-12;
    if ((v = cdy_node_add(tr, op, argv, 4, &nm, nm.dtype)) < 0 ||
        (v = cdy_compose_normalize(tr, slot[0]->value, v, eps, &nm, &om)) < 0)
        return NULL;
    return cdy_build_result(tr, call, v);
}
