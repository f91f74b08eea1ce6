/* build_rows.c - builders of row ops and losses (BUILD rows of ops/callables.def).
 *
 * softmax / log_softmax, layer_norm, group_norm and batch_norm (eval) become one row node each
 * (kind 'N', see csrc/compiler/rows.c); mse_loss, l1_loss and smooth_l1_loss
 * become pointwise nodes plus a sum/mean reduction (one fused kernel).  A
 * call that is not lowered exactly returns NULL without stopping the trace:
 * it then runs through torch (an extern node). */
#include <math.h>
#include <string.h>

#include "trace/trace.h"

/* The graph value of tensor tvar t. */
static const cdy_value *lr_val(tracer *tr, const tvar *t)
{
    return &tr->t->graph.values[t->value];
}

/* 1 if t is a constant finite Python float or int; its value in *out. */
static int lr_num(const tvar *t, double *out)
{
    long long i;
    if (cdy_const_int(t, &i)) {
        *out = (double)i;
        return 1;
    }
    if (!t || t->kind != TV_CONST || !PyFloat_CheckExact(t->obj))
        return 0;
    *out = PyFloat_AS_DOUBLE(t->obj);
    return isfinite(*out);
}

/* 1 if t is a float32/float64 tensor. */
static int lr_float_tensor(tracer *tr, const tvar *t)
{
    if (!t || t->kind != TV_TENSOR)
        return 0;
    int dt = lr_val(tr, t)->meta.dtype;
    return dt == CDY_DT_FLOAT32 || dt == CDY_DT_FLOAT64;
}

/* The meta of x when g and x are float32 / float64 tensors of one dtype and
 * the same sizes (a row gradient's grad and its forward tensor), else NULL. */
static const cdy_meta *lr_grad_pair(tracer *tr, const tvar *g, const tvar *x)
{
    if (!lr_float_tensor(tr, g) || !lr_float_tensor(tr, x))
        return NULL;
    const cdy_meta *gm = &lr_val(tr, g)->meta, *xm = &lr_val(tr, x)->meta;
    if (gm->dtype != xm->dtype || gm->ndim != xm->ndim ||
        memcmp(gm->sizes, xm->sizes, sizeof(int64_t) * (size_t)xm->ndim))
        return NULL;
    return xm;
}

/* 1 if t is a tensor a row kernel computes in float32 / float64: a float32,
 * float64, bfloat16 or float16 one (the last two load widened and store
 * rounded once, as eager's softmax / norm kernels compute in float32). */
static int lr_row_tensor(tracer *tr, const tvar *t)
{
    return lr_float_tensor(tr, t) ||
           (t && t->kind == TV_TENSOR && cdy_dtype_lowp(lr_val(tr, t)->meta.dtype));
}

/* 1 if value v depends on value w (is w, or reads it through nodes). */
static int lr_depends(const cdy_graph *g, int v, int w)
{
    if (v == w)
        return 1;
    if (v < w || g->values[v].kind != CDY_VAL_NODE || cdy_op_table[g->values[v].op].kind == 'E')
        return 0;
    for (int a = 0; a < g->values[v].nargs; a++)
        if (lr_depends(g, g->values[v].args[a], w))
            return 1;
    return 0;
}

/* Add a row node op(args) whose meta is torch's result; the call's result
 * tvar, or NULL (stopped, or the result is not a float tensor of the input's dtype). */
static tvar *lr_row_node(tracer *tr, const cdy_build_call *call, int op, const int *args,
                         int nargs)
{
    cdy_meta m;
    if (!PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type) ||
        cdy_read_meta(tr, call->out, &m))
        return NULL;
    if (m.dtype != tr->t->graph.values[args[0]].meta.dtype)
        return NULL;
    int v = cdy_node_add(tr, op, args, nargs, &m, m.dtype);
    return v < 0 ? NULL : cdy_build_result(tr, call, v);
}

/* ---- softmax, log_softmax ---------------------------------------------- */

/* softmax-like call with args bound to (input, dim, dtype): a row node. */
static tvar *lr_softmax_bound(tracer *tr, const cdy_build_call *call, int op, tvar **s)
{
    long long dim;
    if (!s[0] || s[0]->kind != TV_TENSOR)
        return NULL;
    cdy_meta im = lr_val(tr, s[0])->meta;
    int nd = im.ndim;
    if (cdy_tv_none(s[1]))   /* F.softmax's legacy implicit dim */
        dim = (nd == 0 || nd == 1 || nd == 3) ? 0 : 1;
    else if (!cdy_const_int(s[1], &dim))
        return NULL;
    if (nd == 0 || dim < -nd || dim >= nd)
        return NULL;
    dim = dim < 0 ? dim + nd : dim;
    int in = s[0]->value;
    if (!cdy_tv_none(s[2])) {
        int dt = s[2]->kind == TV_CONST ? cdy_dtype_from_obj(s[2]->obj) : CDY_DT_NONE;
        if (dt != CDY_DT_FLOAT32 && dt != CDY_DT_FLOAT64)
            return NULL;
        if (dt != im.dtype) {
            im.dtype = dt;
            if ((in = cdy_node_cast(tr, in, &im, dt)) < 0)
                return NULL;
        }
    } else if (!lr_row_tensor(tr, s[0]))
        return NULL;
    int args[2] = {in, cdy_scalar_int(tr, dim)};
    return args[1] < 0 ? NULL : lr_row_node(tr, call, op, args, 2);
}

/* torch.softmax / Tensor.softmax / torch.special.softmax style: (input, dim, dtype). */
static tvar *lr_softmax_t(tracer *tr, const cdy_build_call *call, int op)
{
    tvar *s[3];
    if (cdy_bind_names("input dim dtype", call->args, call->nargs, call->kwnames, s))
        return NULL;
    return lr_softmax_bound(tr, call, op, s);
}

/* F.softmax style: (input, dim, _stacklevel, dtype). */
static tvar *lr_softmax_f(tracer *tr, const cdy_build_call *call, int op)
{
    tvar *s[4];
    if (cdy_bind_names("input dim _stacklevel dtype", call->args, call->nargs, call->kwnames, s))
        return NULL;
    tvar *b[3] = {s[0], s[1], s[3]};
    return lr_softmax_bound(tr, call, op, b);
}

/* torch.softmax / log_softmax, Tensor's, torch.special's (call->op: SOFTMAX or LOG_SOFTMAX). */
tvar *cdy_build_softmax(tracer *tr, const cdy_build_call *call)
{
    return lr_softmax_t(tr, call, call->op);
}

/* F.softmax / F.log_softmax (call->op: SOFTMAX or LOG_SOFTMAX). */
tvar *cdy_build_f_softmax(tracer *tr, const cdy_build_call *call)
{
    return lr_softmax_f(tr, call, call->op);
}

/* ---- layer_norm, group_norm -------------------------------------------- */

/* The value of optional affine tensor t (weight or bias) of a norm over
 * input x: a tensor of x's dtype, or a SCALAR placeholder when absent; -1
 * when not lowerable (or stopped).  realized: t must be an input or an
 * extern result that x does not read (group_norm indexes it per channel). */
static int lr_affine(tracer *tr, const tvar *t, const tvar *x, int realized)
{
    if (cdy_tv_none(t))
        return cdy_scalar_float(tr, 0.0);
    if (t->kind != TV_TENSOR || lr_val(tr, t)->meta.dtype != lr_val(tr, x)->meta.dtype)
        return -1;
    const cdy_value *w = lr_val(tr, t);
    if (realized && ((w->kind == CDY_VAL_NODE && cdy_op_table[w->op].kind != 'E') ||
                     lr_depends(&tr->t->graph, x->value, t->value)))
        return -1;
    return t->value;
}

/* A norm row node op(x, weight, bias, eps, param) from bound slots
 * s = (input, shape/groups, weight, bias, eps). */
static tvar *lr_norm(tracer *tr, const cdy_build_call *call, int op, tvar **s, long long param)
{
    double eps = 1e-5;
    if (!lr_row_tensor(tr, s[0]) || (s[4] && !lr_num(s[4], &eps)))
        return NULL;
    int g = op == CDY_OP_GROUP_NORM;
    int args[5] = {s[0]->value, lr_affine(tr, s[2], s[0], g), lr_affine(tr, s[3], s[0], g),
                   cdy_scalar_float(tr, eps), cdy_scalar_int(tr, param)};
    for (int a = 1; a < 5; a++)
        if (args[a] < 0)
            return NULL;
    return lr_row_node(tr, call, op, args, 5);
}

/* F.layer_norm / torch.layer_norm(input, normalized_shape, weight, bias, eps). */
tvar *cdy_build_layer_norm(tracer *tr, const cdy_build_call *call)
{
    tvar *s[6];
    if (cdy_bind_names("input normalized_shape weight bias eps cudnn_enable", call->args,
                       call->nargs, call->kwnames, s) || !s[1])
        return NULL;
    long long k;
    if (s[1]->kind == TV_CONST && (PyTuple_Check(s[1]->obj) || PyList_Check(s[1]->obj)))
        k = PySequence_Size(s[1]->obj);
    else if (s[1]->kind == TV_TUPLE || s[1]->kind == TV_LIST)
        k = s[1]->n;
    else if (!cdy_const_int(s[1], &k) || (k = 1) != 1)
        return NULL;
    if (!lr_row_tensor(tr, s[0]) || k < 0 || k > lr_val(tr, s[0])->meta.ndim)
        return NULL;
    return lr_norm(tr, call, call->op, s, k);
}

/* cdynamo._autograd.softmax_input_grad(grad, result, dim), the backward's
 * softmax input gradient: one row node (result, grad, dim) over float32 /
 * float64 tensors of one dtype and sizes. */
tvar *cdy_build_softmax_input_grad(tracer *tr, const cdy_build_call *call)
{
    tvar *s[3];
    long long dim;
    if (cdy_bind_names("grad result dim", call->args, call->nargs, call->kwnames, s) ||
        !cdy_const_int(s[2], &dim))
        return NULL;
    const cdy_meta *ym = lr_grad_pair(tr, s[0], s[1]);
    int nd = ym ? ym->ndim : 0;
    if (nd == 0 || dim < -nd || dim >= nd)
        return NULL;
    int args[3] = {s[1]->value, s[0]->value, cdy_scalar_int(tr, dim < 0 ? dim + nd : dim)};
    if (args[2] < 0)
        return NULL;
    return lr_row_node(tr, call, call->op, args, 3);
}

/* cdynamo._autograd.layer_norm_grad_xhat(grad, input, eps, normalized): grad
 * times layer_norm(input)'s xhat, the weight gradient's terms: one row node
 * (input, SCALAR, grad, eps, normalized) over float32 / float64 tensors of one
 * dtype and sizes. */
tvar *cdy_build_ln_grad_xhat(tracer *tr, const cdy_build_call *call)
{
    tvar *s[4];
    double eps;
    long long k;
    if (cdy_bind_names("grad input eps normalized", call->args, call->nargs, call->kwnames, s) ||
        !s[2] || !lr_num(s[2], &eps) || !cdy_const_int(s[3], &k))
        return NULL;
    const cdy_meta *im = lr_grad_pair(tr, s[0], s[1]);
    if (!im || k < 1 || k > im->ndim)
        return NULL;
    int args[5] = {s[1]->value, cdy_scalar_float(tr, 0.0), s[0]->value, cdy_scalar_float(tr, eps),
                   cdy_scalar_int(tr, k)};
    if (args[1] < 0 || args[3] < 0 || args[4] < 0)
        return NULL;
    return lr_row_node(tr, call, call->op, args, 5);
}

/* cdynamo._autograd.layer_norm_input_grad(grad, input, weight, eps, normalized),
 * the backward's layer_norm input gradient: one row node (input, weight,
 * grad, eps, normalized) over float32 / float64 tensors of one dtype, grad of
 * the input's sizes, weight absent or of the normalized sizes. */
tvar *cdy_build_ln_input_grad(tracer *tr, const cdy_build_call *call)
{
    tvar *s[5];
    double eps;
    long long k;
    if (cdy_bind_names("grad input weight eps normalized", call->args, call->nargs,
                       call->kwnames, s) || !s[3] || !lr_num(s[3], &eps) ||
        !cdy_const_int(s[4], &k))
        return NULL;
    const cdy_meta *im = lr_grad_pair(tr, s[0], s[1]);
    if (!im || k < 1 || k > im->ndim)
        return NULL;
    int w = lr_affine(tr, s[2], s[1], 0);
    if (w < 0)
        return NULL;
    const cdy_value *wv = &tr->t->graph.values[w];
    if (wv->kind != CDY_VAL_SCALAR &&
        (wv->meta.ndim != k || memcmp(wv->meta.sizes, im->sizes + (im->ndim - k),
                                      sizeof(int64_t) * (size_t)k)))
        return NULL;
    int args[5] = {s[1]->value, w, s[0]->value, cdy_scalar_float(tr, eps), cdy_scalar_int(tr, k)};
    if (args[3] < 0 || args[4] < 0)
        return NULL;
    return lr_row_node(tr, call, call->op, args, 5);
}

/* F.group_norm / torch.group_norm(input, num_groups, weight, bias, eps). */
tvar *cdy_build_group_norm(tracer *tr, const cdy_build_call *call)
{
    tvar *s[6];
    long long groups;
    if (cdy_bind_names("input num_groups weight bias eps cudnn_enabled", call->args,
                       call->nargs, call->kwnames, s) || !cdy_const_int(s[1], &groups))
        return NULL;
    if (!lr_row_tensor(tr, s[0]))
        return NULL;
    const cdy_meta *im = &lr_val(tr, s[0])->meta;
    if (im->ndim < 2 || im->ndim >= CDY_MAX_NDIM || groups <= 0 || im->sizes[1] % groups)
        return NULL;
    int64_t per = im->sizes[1] / groups;   /* elements per group */
    for (int d = 2; d < im->ndim; d++)
        per *= im->sizes[d];
    if (per == 1)        /* eager's variance of one element is rounding noise times 1/sqrt(eps) */
        return NULL;
    if (!cdy_meta_contiguous(im))   /* eager's result follows the input's memory format, the meta's not */
        return NULL;
    return lr_norm(tr, call, call->op, s, groups);
}

/* Per-channel value t ([C]) seen as [C, 1, ..] (rank nd - 1) so that it
 * broadcasts against an input of rank nd whose channels are dim 1: a view
 * node (t itself when nd == 2); its value or -1.  t is never a view. */
static int lr_channels(tracer *tr, int t, int nd)
{
    cdy_meta m = tr->t->graph.values[t].meta;
    if (nd == 2)
        return t;
    for (int d = 1; d < nd - 1; d++) {
        m.sizes[d] = 1;
        m.strides[d] = 1;
    }
    m.ndim = nd - 1;
    return cdy_view_value(tr, 1, &t, 1, &m, t, m.strides, 0);
}

/* 1 if ATen's batch_norm takes its vectorized kernel for the bound slots s
 * (input, mean, var, weight, bias): input contiguous or 4-d channels_last,
 * the parameters contiguous.  In bfloat16 / float16 the other path rounds
 * 1 / sqrt(var + eps) to the dtype (results ulps apart): it stays extern. */
static int lr_bn_fast_path(tracer *tr, tvar **s)
{
    cdy_meta m = lr_val(tr, s[0])->meta;
    int ok = cdy_meta_contiguous(&m);
    if (!ok && m.ndim == 4) {
        int64_t st[4] = {m.sizes[1] * m.sizes[2] * m.sizes[3], 1, m.sizes[1] * m.sizes[3], m.sizes[1]};
        ok = 1;
        for (int d = 0; d < 4; d++)
            ok &= m.sizes[d] == 1 || m.strides[d] == st[d];
    }
    for (int a = 1; a < 5 && ok; a++)
        ok = cdy_tv_none(s[a]) || cdy_meta_contiguous(&lr_val(tr, s[a])->meta);
    return ok;
}

/* F.batch_norm(input, running_mean, running_var, weight, bias, training,
 * momentum, eps) with training=False: pointwise nodes computing as ATen's
 * eval kernel does, alpha = 1 / sqrt(var + eps) * weight and beta = bias -
 * mean * alpha per channel, then x * alpha + beta.  alpha and beta are small
 * and broadcast, so the compiler computes them once (cg_realize_broadcast)
 * and the per-element part fuses with its producers and consumers (relu,
 * pooling, a residual add); in bfloat16 / float16 in float32, rounded
 * once (cdy_compose_batch_norm).  Training mode (it updates the running
 * stats) stays extern. */
tvar *cdy_build_batch_norm(tracer *tr, const cdy_build_call *call)
{
    tvar *s[8];
    double eps = 1e-5;
    cdy_meta om;
    if (cdy_bind_names("input running_mean running_var weight bias training momentum eps",
                       call->args, call->nargs, call->kwnames, s) ||
        !s[5] || s[5]->kind != TV_CONST || s[5]->obj != Py_False ||
        !lr_row_tensor(tr, s[0]) || (s[7] && !lr_num(s[7], &eps)) ||
        cdy_tv_none(s[1]) || cdy_tv_none(s[2]) ||
        !PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type) ||
        cdy_read_meta(tr, call->out, &om))
        return NULL;
    const cdy_meta *im = &lr_val(tr, s[0])->meta;
    int nd = im->ndim, dt = im->dtype, ch[4];
    if (nd < 2 || om.dtype != dt || (cdy_dtype_lowp(dt) && !lr_bn_fast_path(tr, s)))
        return NULL;
    for (int a = 1; a < 5; a++) {
        int t = lr_affine(tr, s[a], s[0], 1);
        if (t < 0 || (ch[a - 1] = cdy_tv_none(s[a]) ? -2 : lr_channels(tr, t, nd)) == -1)
            return NULL;
    }
    const cdy_meta *cm = &lr_val(tr, s[2])->meta;   /* var: [C] */
    if (cm->ndim != 1 || cm->sizes[0] != im->sizes[1])
        return NULL;
    cdy_meta pm = tr->t->graph.values[ch[1]].meta;   /* [C, 1, ..], contiguous */
    for (int d = pm.ndim - 1, st = 1; d >= 0; st *= (int)pm.sizes[d], d--)
        pm.strides[d] = st;
    int y = cdy_compose_batch_norm(tr, s[0]->value, ch, eps, &pm, &om, dt);
    return y < 0 ? NULL : cdy_build_result(tr, call, y);
}

/* ---- losses -------------------------------------------------------------- */

/* Broadcast sizes of metas a and b into m (contiguous strides); 0, or -1 if they do not. */
static int lr_broadcast(const cdy_meta *a, const cdy_meta *b, cdy_meta *m)
{
    m->ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t st = 1;
    for (int d = m->ndim - 1; d >= 0; d--) {
        int da = d - (m->ndim - a->ndim), db = d - (m->ndim - b->ndim);
        int64_t sa = da >= 0 ? a->sizes[da] : 1, sb = db >= 0 ? b->sizes[db] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return -1;
        m->sizes[d] = sa == 1 ? sb : sa;
        m->strides[d] = st;
        st *= m->sizes[d] ? m->sizes[d] : 1;
    }
    return 0;
}

/* A loss call bound to (input, target, size_average, reduce, reduction, extra):
 * the elementwise loss, reduced by sum or mean. */
static tvar *lr_loss(tracer *tr, const cdy_build_call *call, int kind, tvar **s, double beta)
{
    if (!lr_float_tensor(tr, s[0]) || !lr_float_tensor(tr, s[1]) || !cdy_tv_none(s[2]) ||
        !cdy_tv_none(s[3]) || !PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type))
        return NULL;
    const cdy_meta *xm = &lr_val(tr, s[0])->meta, *ym = &lr_val(tr, s[1])->meta;
    const char *red = "mean";
    if (s[4] && (s[4]->kind != TV_CONST || !PyUnicode_Check(s[4]->obj) ||
                 !(red = PyUnicode_AsUTF8(s[4]->obj))))
        return NULL;
    int mean = !strcmp(red, "mean"), none = !strcmp(red, "none");
    cdy_meta m, om;
    if ((!mean && !none && strcmp(red, "sum")) || xm->dtype != ym->dtype ||
        lr_broadcast(xm, ym, &m) || cdy_read_meta(tr, call->out, &om) || om.dtype != xm->dtype)
        return NULL;
    m.dtype = xm->dtype;
    if (none)
        m = om;       /* torch's result: its strides */
    int l = cdy_compose_loss(tr, kind, s[0]->value, s[1]->value, &m, beta);
    if (l < 0 || (!none && (l = cdy_compose_loss_reduce(tr, l, m.ndim, mean, &om)) < 0))
        return NULL;
    return cdy_build_result(tr, call, l);
}

/* F.mse_loss / F.l1_loss(input, target, size_average, reduce, reduction, weight). */
static tvar *lr_loss_plain(tracer *tr, const cdy_build_call *call, int kind)
{
    tvar *s[6];
    if (cdy_bind_names("input target size_average reduce reduction weight", call->args,
                       call->nargs, call->kwnames, s) || !cdy_tv_none(s[5]))
        return NULL;
    return lr_loss(tr, call, kind, s, 0);
}

tvar *cdy_build_mse_loss(tracer *tr, const cdy_build_call *call)
{
    return lr_loss_plain(tr, call, 'm');
}

tvar *cdy_build_l1_loss(tracer *tr, const cdy_build_call *call)
{
    return lr_loss_plain(tr, call, 'l');
}

/* F.smooth_l1_loss(input, target, size_average, reduce, reduction, beta). */
tvar *cdy_build_smooth_l1_loss(tracer *tr, const cdy_build_call *call)
{
    tvar *s[6];
    double beta = 1.0;
    if (cdy_bind_names("input target size_average reduce reduction beta", call->args,
                       call->nargs, call->kwnames, s) || (s[5] && !lr_num(s[5], &beta)) ||
        beta < 0)
        return NULL;
    return lr_loss(tr, call, 's', s, beta);
}
