/* build_pool.c - composite lowerings: pooling and nearest upsample
 * (BUILD rows of ops/callables.def).  Each call becomes one windowed node
 * (kind 'W', see cdynamo.h) whose meta is torch's result on the fakes
 * (call->out: output sizes and strides, ceil_mode included); anything not
 * reproduced exactly (indices, other modes, dtypes eager rejects, unusual
 * argument forms) returns NULL: the call stays an extern. */
#include "trace/trace.h"

#include <string.h>

#define LP_PAIR_MAX 0x7fffffffLL

/* An int constant o (not a bool) into *x; 0, or -1 when it is not one. */
static int lp_int(PyObject *o, int64_t *x)
{
    if (!o || !PyLong_CheckExact(o))
        return -1;
    long long i = PyLong_AsLongLong(o);
    if (i == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    *x = i;
    return 0;
}

/* Item i of a constant tuple/list or of a TUPLE/LIST tvar v, or NULL. */
static PyObject *lp_item(tvar *v, int i)
{
    if (v->kind == TV_CONST)
        return (PyTuple_Check(v->obj) || PyList_Check(v->obj)) ? PySequence_Fast_ITEMS(v->obj)[i]
                                                                : NULL;
    return v->items[i]->kind == TV_CONST ? v->items[i]->obj : NULL;
}

/* Length of the constant sequence v, or -1 when v is no sequence. */
static int lp_len(tvar *v)
{
    if (v->kind == TV_TUPLE || v->kind == TV_LIST)
        return v->n;
    if (v->kind == TV_CONST && (PyTuple_Check(v->obj) || PyList_Check(v->obj)))
        return (int)PySequence_Fast_GET_SIZE(v->obj);
    return -1;
}

/* A pooling size argument v (an int, or a sequence of 1 or 2 ints) into
 * *h, *w; absent, None or an empty sequence: (dh, dw).  0 or -1. */
static int lp_pair(tvar *v, int64_t dh, int64_t dw, int64_t *h, int64_t *w)
{
    *h = dh;
    *w = dw;
    if (!v || (v->kind == TV_CONST && v->obj == Py_None))
        return 0;
    int n = lp_len(v);
    if (n < 0 && lp_int(v->kind == TV_CONST ? v->obj : NULL, h) == 0)
        *w = *h;
    else if (n == 0)
        return 0;
    else if (n < 1 || n > 2 || lp_int(lp_item(v, 0), h) || lp_int(lp_item(v, n - 1), w))
        return -1;
    return *h >= 0 && *w >= 0 && *h <= LP_PAIR_MAX && *w <= LP_PAIR_MAX ? 0 : -1;
}

/* The pair scalar (h << 32 | w) as a new graph value; -1 when stopped. */
static int lp_pair_value(tracer *tr, int64_t h, int64_t w)
{
    return cdy_scalar_int(tr, (long long)((uint64_t)h << 32 | (uint64_t)w));
}

/* 1 if tvar v is absent, None or False. */
static int lp_off(tvar *v)
{
    return !v || (v->kind == TV_CONST && (v->obj == Py_None || v->obj == Py_False));
}

/* 1 if v is a constant str equal to s. */
static int lp_str_is(tvar *v, const char *s)
{
    if (!v || v->kind != TV_CONST || !PyUnicode_Check(v->obj))
        return 0;
    const char *u = PyUnicode_AsUTF8(v->obj);
    if (!u)
        PyErr_Clear();
    return u && !strcmp(u, s);
}

/* Read the result's meta into *m when call's input x is a tensor and its
 * result a tensor of rank 3 or 4 and of a dtype in `dts` (a bit per
 * cdy_dtype); 0, or -1 (not lowerable; stopped only on errors). */
static int lp_meta(tracer *tr, const cdy_build_call *call, tvar *x, unsigned dts, cdy_meta *m)
{
    if (!x || x->kind != TV_TENSOR ||
        !PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type))
        return -1;
    if (cdy_read_meta(tr, call->out, m))
        return -1;
    const cdy_meta *im = &tr->t->graph.values[x->value].meta;
    if ((m->ndim != 3 && m->ndim != 4) || im->ndim != m->ndim || im->dtype != m->dtype)
        return -1;
    return (dts >> m->dtype) & 1 ? 0 : -1;
}

#define LP_FLOATS (1u << CDY_DT_FLOAT32 | 1u << CDY_DT_FLOAT64)
#define LP_LOWP (1u << CDY_DT_BFLOAT16 | 1u << CDY_DT_FLOAT16)   /* max windows only */
#define LP_INTS (1u << CDY_DT_UINT8 | 1u << CDY_DT_INT8 | 1u << CDY_DT_INT16 | \
                 1u << CDY_DT_INT32 | 1u << CDY_DT_INT64)

/* A windowed node op over x with scalar args sc[0..ns) and meta m, as the
 * call's result; NULL when stopped. */
static tvar *lp_node(tracer *tr, const cdy_build_call *call, int op, tvar *x, const int *sc,
                     int ns, const cdy_meta *m)
{
    int args[CDY_MAX_NODE_ARGS];
    args[0] = x->value;
    for (int i = 0; i < ns; i++) {
        if (sc[i] < 0)
            return NULL;
        args[i + 1] = sc[i];
    }
    int v = cdy_node_add(tr, op, args, ns + 1, m, m->dtype);
    return v < 0 ? NULL : cdy_build_result(tr, call, v);
}

/* F.max_pool2d / torch.max_pool2d / nn.MaxPool2d: kernel, stride (default:
 * the kernel), padding, dilation; ceil_mode is in the result's sizes.
 * return_indices=True (a tuple result) stays extern. */
tvar *cdy_build_max_pool2d(tracer *tr, const cdy_build_call *call)
{
    tvar *s[8];
    cdy_meta m;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    if (cdy_bind_names("input kernel_size stride padding dilation ceil_mode return_indices",
                       call->args, call->nargs, call->kwnames, s) ||
        !lp_off(s[6]) || lp_meta(tr, call, s[0], LP_FLOATS | LP_INTS | LP_LOWP, &m) ||
        !s[1] || lp_pair(s[1], -1, -1, &kh, &kw) || kh < 1 || kw < 1 ||
        lp_pair(s[2], kh, kw, &sh, &sw) || lp_pair(s[3], 0, 0, &ph, &pw) ||
        lp_pair(s[4], 1, 1, &dh, &dw) || sh < 1 || sw < 1 || dh < 1 || dw < 1)
        return NULL;
    int sc[4] = {lp_pair_value(tr, kh, kw), lp_pair_value(tr, sh, sw),
                 lp_pair_value(tr, ph, pw), lp_pair_value(tr, dh, dw)};
    return lp_node(tr, call, call->op, s[0], sc, 4, &m);
}

/* F.avg_pool2d / nn.AvgPool2d: kernel, stride (default: the kernel),
 * padding, count_include_pad, divisor_override (> 0; packed in flags). */
tvar *cdy_build_avg_pool2d(tracer *tr, const cdy_build_call *call)
{
    tvar *s[8];
    cdy_meta m;
    int64_t kh, kw, sh, sw, ph, pw, div = 0;
    if (cdy_bind_names("input kernel_size stride padding ceil_mode count_include_pad "
                       "divisor_override", call->args, call->nargs, call->kwnames, s) ||
        lp_meta(tr, call, s[0], LP_FLOATS | 1u << CDY_DT_INT64, &m) ||
        !s[1] || lp_pair(s[1], -1, -1, &kh, &kw) || kh < 1 || kw < 1 ||
        lp_pair(s[2], kh, kw, &sh, &sw) || lp_pair(s[3], 0, 0, &ph, &pw) || sh < 1 || sw < 1)
        return NULL;
    int cip = 1;
    if (s[5] && !(s[5]->kind == TV_CONST && PyBool_Check(s[5]->obj)))
        return NULL;
    if (s[5])
        cip = s[5]->obj == Py_True;
    if (s[6] && !(s[6]->kind == TV_CONST && s[6]->obj == Py_None) &&
        (s[6]->kind != TV_CONST || lp_int(s[6]->obj, &div) || div < 1 || div > LP_PAIR_MAX))
        return NULL;
    int sc[4] = {lp_pair_value(tr, kh, kw), lp_pair_value(tr, sh, sw),
                 lp_pair_value(tr, ph, pw), cdy_scalar_int(tr, (long long)(div << 1 | cip))};
    return lp_node(tr, call, call->op, s[0], sc, 4, &m);
}

/* F.adaptive_avg_pool2d / nn.AdaptiveAvgPool2d: the output size (None
 * entries included) is the result's. */
tvar *cdy_build_adaptive_avg_pool2d(tracer *tr, const cdy_build_call *call)
{
    tvar *s[8];
    cdy_meta m;
    if (cdy_bind_names("input output_size", call->args, call->nargs, call->kwnames, s) ||
        lp_meta(tr, call, s[0], LP_FLOATS, &m))
        return NULL;
    return lp_node(tr, call, call->op, s[0], NULL, 0, &m);
}

/* F.adaptive_max_pool2d without indices. */
tvar *cdy_build_adaptive_max_pool2d(tracer *tr, const cdy_build_call *call)
{
    tvar *s[8];
    cdy_meta m;
    if (cdy_bind_names("input output_size return_indices", call->args, call->nargs,
                       call->kwnames, s) ||
        !lp_off(s[2]) || lp_meta(tr, call, s[0], LP_FLOATS | LP_LOWP, &m))
        return NULL;
    return lp_node(tr, call, call->op, s[0], NULL, 0, &m);
}

/* A number constant v as a double into *f; 0 or -1. */
static int lp_number(PyObject *o, double *f)
{
    if (!o || PyBool_Check(o) || !(PyLong_CheckExact(o) || PyFloat_CheckExact(o)))
        return -1;
    *f = PyFloat_AsDouble(o);
    if (*f == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* The scales torch's upsample kernel gets from scale argument v (a number or
 * a sequence of two; absent/None: 0, none); 0 or -1. */
static int lp_scales(tvar *v, double *sh, double *sw)
{
    *sh = *sw = 0;
    if (!v || (v->kind == TV_CONST && v->obj == Py_None))
        return 0;
    int n = lp_len(v);
    if (n < 0) {
        if (v->kind != TV_CONST || lp_number(v->obj, sh))
            return -1;
        *sw = *sh;
    } else if (n != 2 || lp_number(lp_item(v, 0), sh) || lp_number(lp_item(v, 1), sw)) {
        return -1;
    }
    return *sh >= 0 && *sw >= 0 && *sh < 1e300 && *sw < 1e300 ? 0 : -1;
}

/* The upsample node for x with scales (sh, sw) and exact flag. */
static tvar *lp_upsample(tracer *tr, const cdy_build_call *call, tvar *x, double sh, double sw,
                         int exact)
{
    cdy_meta m;
    if (lp_meta(tr, call, x, LP_FLOATS | 1u << CDY_DT_UINT8, &m) || m.ndim != 4)
        return NULL;
    int sc[3] = {cdy_scalar_float(tr, sh), cdy_scalar_float(tr, sw), cdy_scalar_bool(tr, exact)};
    return lp_node(tr, call, call->op, x, sc, 3, &m);
}

/* F.interpolate / nn.Upsample, modes 'nearest' and 'nearest-exact' on a 4-D
 * input: the scale_factor is what torch's kernel uses unless the size is
 * given or recompute_scale_factor is set (then in/out). */
tvar *cdy_build_interpolate(tracer *tr, const cdy_build_call *call)
{
    tvar *s[8];
    double sh, sw;
    if (cdy_bind_names("input size scale_factor mode align_corners recompute_scale_factor "
                       "antialias", call->args, call->nargs, call->kwnames, s) ||
        !lp_off(s[4]) || !lp_off(s[6]) || (s[5] && s[5]->kind != TV_CONST))
        return NULL;
    int exact = lp_str_is(s[3], "nearest-exact");
    if (s[3] && !exact && !lp_str_is(s[3], "nearest"))
        return NULL;
    if (lp_scales(s[2], &sh, &sw))
        return NULL;
    if (s[5] && s[5]->obj == Py_True)
        sh = sw = 0;
    return lp_upsample(tr, call, s[0], sh, sw, exact);
}

/* torch._C._nn.upsample_nearest2d(input, output_size, scale_factors). */
tvar *cdy_build_upsample_nearest2d(tracer *tr, const cdy_build_call *call)
{
    tvar *s[8];
    double sh, sw;
    if (cdy_bind_names("input output_size scale_factors", call->args, call->nargs,
                       call->kwnames, s) || lp_scales(s[2], &sh, &sw) ||
        (s[2] && s[2]->kind == TV_CONST && PyFloat_Check(s[2]->obj)))
        return NULL;
    return lp_upsample(tr, call, s[0], sh, sw, 0);
}
