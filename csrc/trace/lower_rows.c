/* lower_rows.c - composite lowerings: rows (registered in cdy_lowerings_rows).
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

/* 1 if value v depends on value w (is w, or reads it through nodes). */
static int lr_depends(const cdy_graph *g, int v, int w)
{
    if (v == w)
        return 1;
    if (v < w || g->values[v].kind != CDY_VAL_NODE || g->values[v].op == CDY_OP_EXTERN)
        return 0;
    for (int a = 0; a < g->values[v].nargs; a++)
        if (lr_depends(g, g->values[v].args[a], w))
            return 1;
    return 0;
}

/* Add a row node op(args) whose meta is torch's result; the call's result
 * tvar, or NULL (stopped, or the result is not a float tensor of the input's dtype). */
static tvar *lr_row_node(tracer *tr, const cdy_lower_call *call, int op, const int *args,
                         int nargs)
{
    cdy_meta m;
    if (!PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type) ||
        cdy_read_meta(tr, call->out, &m))
        return NULL;
    if (m.dtype != tr->t->graph.values[args[0]].meta.dtype)
        return NULL;
    int v = cdy_node_add(tr, op, args, nargs, &m, m.dtype);
    return v < 0 ? NULL : cdy_lower_result(tr, call, v);
}

/* ---- softmax, log_softmax ---------------------------------------------- */

/* softmax-like call with args bound to (input, dim, dtype): a row node. */
static tvar *lr_softmax_bound(tracer *tr, const cdy_lower_call *call, int op, tvar **s)
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
            if ((in = cdy_node_add(tr, CDY_OP_CAST, &in, 1, &im, dt)) < 0)
                return NULL;
        }
    } else if (!lr_float_tensor(tr, s[0]))
        return NULL;
    int args[2] = {in, cdy_scalar_int(tr, dim)};
    return args[1] < 0 ? NULL : lr_row_node(tr, call, op, args, 2);
}

/* torch.softmax / Tensor.softmax / torch.special.softmax style: (input, dim, dtype). */
static tvar *lr_softmax_t(tracer *tr, const cdy_lower_call *call, int op)
{
    tvar *s[3];
    if (cdy_bind_names("input dim dtype", call->args, call->nargs, call->kwnames, s))
        return NULL;
    return lr_softmax_bound(tr, call, op, s);
}

/* F.softmax style: (input, dim, _stacklevel, dtype). */
static tvar *lr_softmax_f(tracer *tr, const cdy_lower_call *call, int op)
{
    tvar *s[4];
    if (cdy_bind_names("input dim _stacklevel dtype", call->args, call->nargs, call->kwnames, s))
        return NULL;
    tvar *b[3] = {s[0], s[1], s[3]};
    return lr_softmax_bound(tr, call, op, b);
}

static tvar *lower_softmax(tracer *tr, const cdy_lower_call *call)
{
    return lr_softmax_t(tr, call, CDY_OP_SOFTMAX);
}

static tvar *lower_log_softmax(tracer *tr, const cdy_lower_call *call)
{
    return lr_softmax_t(tr, call, CDY_OP_LOG_SOFTMAX);
}

static tvar *lower_f_softmax(tracer *tr, const cdy_lower_call *call)
{
    return lr_softmax_f(tr, call, CDY_OP_SOFTMAX);
}

static tvar *lower_f_log_softmax(tracer *tr, const cdy_lower_call *call)
{
    return lr_softmax_f(tr, call, CDY_OP_LOG_SOFTMAX);
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
    if (realized && ((w->kind == CDY_VAL_NODE && w->op != CDY_OP_EXTERN) ||
                     lr_depends(&tr->t->graph, x->value, t->value)))
        return -1;
    return t->value;
}

/* A norm row node op(x, weight, bias, eps, param) from bound slots
 * s = (input, shape/groups, weight, bias, eps). */
static tvar *lr_norm(tracer *tr, const cdy_lower_call *call, int op, tvar **s, long long param)
{
    double eps = 1e-5;
    if (!lr_float_tensor(tr, s[0]) || (s[4] && !lr_num(s[4], &eps)))
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
static tvar *lower_layer_norm(tracer *tr, const cdy_lower_call *call)
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
    if (!lr_float_tensor(tr, s[0]) || k < 0 || k > lr_val(tr, s[0])->meta.ndim)
        return NULL;
    return lr_norm(tr, call, CDY_OP_LAYER_NORM, s, k);
}

/* F.group_norm / torch.group_norm(input, num_groups, weight, bias, eps). */
static tvar *lower_group_norm(tracer *tr, const cdy_lower_call *call)
{
    tvar *s[6];
    long long groups;
    if (cdy_bind_names("input num_groups weight bias eps cudnn_enabled", call->args,
                       call->nargs, call->kwnames, s) || !cdy_const_int(s[1], &groups))
        return NULL;
    if (!lr_float_tensor(tr, s[0]))
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
    return lr_norm(tr, call, CDY_OP_GROUP_NORM, s, groups);
}

static int lr_pw(tracer *tr, int op, int a, int b, const cdy_meta *m, int dt, int cdt);

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
    int v = cdy_node_add(tr, CDY_OP_VIEW, &t, 1, &m, m.dtype);
    if (v < 0)
        return -1;
    cdy_value *gv = &tr->t->graph.values[v];
    gv->view_base = t;
    gv->view_offset = 0;
    memcpy(gv->view_strides, m.strides, sizeof m.strides);
    return v;
}

/* F.batch_norm(input, running_mean, running_var, weight, bias, training,
 * momentum, eps) with training=False: pointwise nodes computing as ATen's
 * eval kernel does, alpha = 1 / sqrt(var + eps) * weight and beta = bias -
 * mean * alpha per channel, then x * alpha + beta.  alpha and beta are small
 * and broadcast, so the compiler computes them once (cg_realize_broadcast)
 * and the per-element part fuses with its producers and consumers (relu,
 * pooling, a residual add).  Training mode (it updates the running stats)
 * stays extern. */
static tvar *lower_batch_norm(tracer *tr, const cdy_lower_call *call)
{
    tvar *s[8];
    double eps = 1e-5;
    cdy_meta om;
    if (cdy_bind_names("input running_mean running_var weight bias training momentum eps",
                       call->args, call->nargs, call->kwnames, s) ||
        !s[5] || s[5]->kind != TV_CONST || s[5]->obj != Py_False ||
        !lr_float_tensor(tr, s[0]) || (s[7] && !lr_num(s[7], &eps)) ||
        cdy_tv_none(s[1]) || cdy_tv_none(s[2]) ||
        !PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type) ||
        cdy_read_meta(tr, call->out, &om))
        return NULL;
    const cdy_meta *im = &lr_val(tr, s[0])->meta;
    int nd = im->ndim, dt = im->dtype, ch[4];
    if (nd < 2 || om.dtype != dt)
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
    int e = cdy_scalar_float(tr, eps), zero = cdy_scalar_float(tr, 0.0);
    int v = lr_pw(tr, CDY_OP_ADD, ch[1], e, &pm, dt, dt);
    v = v < 0 ? v : lr_pw(tr, CDY_OP_SQRT, v, -1, &pm, dt, dt);
    int alpha = v < 0 ? v : lr_pw(tr, CDY_OP_RECIPROCAL, v, -1, &pm, dt, dt);
    if (alpha >= 0 && ch[2] >= 0)
        alpha = lr_pw(tr, CDY_OP_MUL, alpha, ch[2], &pm, dt, dt);
    int ma = alpha < 0 ? alpha : lr_pw(tr, CDY_OP_MUL, ch[0], alpha, &pm, dt, dt);
    int beta = ma < 0 ? ma : lr_pw(tr, CDY_OP_SUB, ch[3] >= 0 ? ch[3] : zero, ma, &pm, dt, dt);
    int y = beta < 0 ? beta : lr_pw(tr, CDY_OP_MUL, s[0]->value, alpha, &om, dt, dt);
    y = y < 0 ? y : lr_pw(tr, CDY_OP_ADD, y, beta, &om, dt, dt);
    return y < 0 ? NULL : cdy_lower_result(tr, call, y);
}

/* ---- losses -------------------------------------------------------------- */

/* A pointwise node op(a, b) (b < 0: unary) with sizes m and dtype dt
 * (computing in cdt); its value or -1. */
static int lr_pw(tracer *tr, int op, int a, int b, const cdy_meta *m, int dt, int cdt)
{
    cdy_meta mm = *m;
    mm.dtype = dt;
    int args[2] = {a, b};
    return cdy_node_add(tr, op, args, b < 0 ? 1 : 2, &mm, cdt);
}

/* The elementwise loss between x and y (value numbers) over sizes m:
 * kind 'm' (x-y)^2, 'l' |x-y|, 's' smooth l1 with beta; its value or -1. */
static int lr_loss_elems(tracer *tr, int kind, int x, int y, const cdy_meta *m, double beta)
{
    int dt = m->dtype, d = lr_pw(tr, CDY_OP_SUB, x, y, m, dt, dt);
    if (d < 0)
        return -1;
    if (kind == 'm')
        return lr_pw(tr, CDY_OP_MUL, d, d, m, dt, dt);
    int z = lr_pw(tr, CDY_OP_ABS, d, -1, m, dt, dt);
    if (z < 0 || kind == 'l' || beta == 0)
        return z;
    int bv = cdy_scalar_float(tr, beta), half = cdy_scalar_float(tr, 0.5);
    int hb = cdy_scalar_float(tr, 0.5 * beta);
    if (bv < 0 || half < 0 || hb < 0)
        return -1;
    int lt = lr_pw(tr, CDY_OP_LT, z, bv, m, CDY_DT_BOOL, dt);
    int q = lt < 0 ? -1 : lr_pw(tr, CDY_OP_MUL, half, z, m, dt, dt);
    q = q < 0 ? -1 : lr_pw(tr, CDY_OP_MUL, q, z, m, dt, dt);
    q = q < 0 ? -1 : lr_pw(tr, CDY_OP_DIV, q, bv, m, dt, dt);
    int l = q < 0 ? -1 : lr_pw(tr, CDY_OP_SUB, z, hb, m, dt, dt);
    if (l < 0)
        return -1;
    int args[3] = {lt, q, l};
    return cdy_node_add(tr, CDY_OP_WHERE, args, 3, m, dt);
}

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
static tvar *lr_loss(tracer *tr, const cdy_lower_call *call, int kind, tvar **s, double beta)
{
    if (!lr_float_tensor(tr, s[0]) || !lr_float_tensor(tr, s[1]) || !cdy_tv_none(s[2]) ||
        !cdy_tv_none(s[3]) || !PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type))
        return NULL;
    const cdy_meta *xm = &lr_val(tr, s[0])->meta, *ym = &lr_val(tr, s[1])->meta;
    const char *red = "mean";
    if (s[4] && (s[4]->kind != TV_CONST || !PyUnicode_Check(s[4]->obj) ||
                 !(red = PyUnicode_AsUTF8(s[4]->obj))))
        return NULL;
    int rop = !strcmp(red, "mean") ? CDY_OP_MEAN : !strcmp(red, "sum") ? CDY_OP_SUM
              : !strcmp(red, "none") ? CDY_OP_NONE : -2;
    cdy_meta m, om;
    if (rop == -2 || xm->dtype != ym->dtype || lr_broadcast(xm, ym, &m) ||
        cdy_read_meta(tr, call->out, &om) || om.dtype != xm->dtype)
        return NULL;
    m.dtype = xm->dtype;
    if (rop == CDY_OP_NONE)
        m = om;       /* torch's result: its strides */
    int l = lr_loss_elems(tr, kind, s[0]->value, s[1]->value, &m, beta);
    if (l < 0)
        return NULL;
    if (rop != CDY_OP_NONE) {
        int args[3] = {l, cdy_scalar_int(tr, (1LL << m.ndim) - 1), cdy_scalar_bool(tr, 0)};
        if (args[1] < 0 || args[2] < 0 || om.ndim != 0 ||
            (l = cdy_node_add(tr, rop, args, 3, &om, om.dtype)) < 0)
            return NULL;
    }
    return cdy_lower_result(tr, call, l);
}

/* F.mse_loss / F.l1_loss(input, target, size_average, reduce, reduction, weight). */
static tvar *lr_loss_plain(tracer *tr, const cdy_lower_call *call, int kind)
{
    tvar *s[6];
    if (cdy_bind_names("input target size_average reduce reduction weight", call->args,
                       call->nargs, call->kwnames, s) || !cdy_tv_none(s[5]))
        return NULL;
    return lr_loss(tr, call, kind, s, 0);
}

static tvar *lower_mse_loss(tracer *tr, const cdy_lower_call *call)
{
    return lr_loss_plain(tr, call, 'm');
}

static tvar *lower_l1_loss(tracer *tr, const cdy_lower_call *call)
{
    return lr_loss_plain(tr, call, 'l');
}

/* F.smooth_l1_loss(input, target, size_average, reduce, reduction, beta). */
static tvar *lower_smooth_l1_loss(tracer *tr, const cdy_lower_call *call)
{
    tvar *s[6];
    double beta = 1.0;
    if (cdy_bind_names("input target size_average reduce reduction beta", call->args,
                       call->nargs, call->kwnames, s) || (s[5] && !lr_num(s[5], &beta)) ||
        beta < 0)
        return NULL;
    return lr_loss(tr, call, 's', s, beta);
}

/* X(name, where, lowering): see cdy_lowering in trace.h. */
#define CDY_LOWER_ROWS(X)                                  \
    X("softmax", "f", lower_f_softmax)                     \
    X("log_softmax", "f", lower_f_log_softmax)             \
    X("softmax", "tsm", lower_softmax)                     \
    X("log_softmax", "tsm", lower_log_softmax)             \
    X("layer_norm", "tf", lower_layer_norm)                \
    X("group_norm", "tf", lower_group_norm)                \
    X("batch_norm", "f", lower_batch_norm)                 \
    X("mse_loss", "f", lower_mse_loss)                     \
    X("l1_loss", "f", lower_l1_loss)                       \
    X("smooth_l1_loss", "f", lower_smooth_l1_loss)

CDY_LOWERING_TABLE(cdy_lowerings_rows, CDY_LOWER_ROWS);
