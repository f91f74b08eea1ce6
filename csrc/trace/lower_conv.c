/* lower_conv.c - composite lowerings: convolutions in channels_last
 * (BUILD rows of ops/callables.def).
 *
 * oneDNN runs a float32 2-d convolution several times faster on
 * channels_last (NHWC) tensors than on contiguous NCHW ones when the
 * channel counts are small (a 3->32 conv on 8x3x32x32: 1.3 ms against
 * 0.2 ms on this project's machine).  Eager keeps NCHW; the graph may not
 * change what the program sees, so the lowering keeps the result's meta and
 * moves only the internal data:
 *
 *   xc = strided_copy(x) in channels_last    (a copy kernel, fused with x's producers)
 *   wc = strided_copy(w) in channels_last    (the weight, a few KB)
 *   yc = conv2d(xc, wc, bias, ...)           (extern: torch, channels_last result)
 *   y  = strided_copy(yc) with eager's strides
 *
 * y is what the program sees.  Its consumers read yc through y's view
 * strides inside their own kernels (batch norm, relu, pooling fuse there),
 * so y itself needs no buffer unless it is returned or passed to another
 * extern.  A conv whose input is already channels_last is a plain extern
 * whose result is channels_last, as the CPU kernel makes it (torch's meta
 * kernel says NCHW); one that is not a float32 4-d conv with NCHW-contiguous
 * input and weight stays a plain extern. */
#include <string.h>

#include "trace/trace.h"

static PyObject *channels_last, *contiguous_fn, *str_memory_format;

/* Resolve torch.channels_last and Tensor.contiguous once; 0 or -1 (cleared). */
static int lc_init(void)
{
    if (channels_last)
        return 0;
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *cl = torch ? PyObject_GetAttrString(torch, "channels_last") : NULL;
    PyObject *tensor = torch ? PyObject_GetAttrString(torch, "Tensor") : NULL;
    PyObject *cont = tensor ? PyObject_GetAttrString(tensor, "contiguous") : NULL;
    PyObject *name = PyUnicode_InternFromString("memory_format");
    Py_XDECREF(torch);
    Py_XDECREF(tensor);
    if (!cl || !cont || !name) {
        Py_XDECREF(cl);
        Py_XDECREF(cont);
        Py_XDECREF(name);
        PyErr_Clear();
        return -1;
    }
    channels_last = cl;
    contiguous_fn = cont;
    str_memory_format = name;
    return 0;
}

/* 1 if meta m is a 4-d tensor, contiguous in NCHW and not also channels_last. */
static int lc_nchw(const cdy_meta *m)
{
    return m->ndim == 4 && m->sizes[1] > 1 && cdy_meta_contiguous(m);
}

/* m's strides set to the channels_last order (C innermost, then W, H, N). */
static void lc_cl_strides(cdy_meta *m)
{
    m->strides[1] = 1;
    m->strides[3] = m->sizes[1];
    m->strides[2] = m->strides[3] * m->sizes[3];
    m->strides[0] = m->strides[2] * m->sizes[2];
}

/* A copy node (VIEW_COPY) of value src with meta m, reading src at the
 * strides/offset its own loads use; its value or -1. */
static int lc_copy_node(tracer *tr, int src, const cdy_meta *m)
{
    int base;
    int64_t st[CDY_MAX_NDIM], off;
    cdy_view_load_map(tr, src, &base, st, &off);
    return cdy_view_value(tr, 0, &src, 1, m, base, st, off);
}

/* Tensor tvar t copied to channels_last: the node, its fake, the call that
 * makes it recorded for the eager backend; NULL (stopped or not). */
static tvar *lc_to_cl(tracer *tr, tvar *t)
{
    cdy_meta m = tr->t->graph.values[t->value].meta;
    lc_cl_strides(&m);
    PyObject *kw = cdy_tr_keep(tr, PyTuple_Pack(1, str_memory_format));   /* the pynode's */
    PyObject *argv[2] = {t->obj, channels_last};
    PyObject *fake = kw ? cdy_tr_keep(tr, PyObject_Vectorcall(contiguous_fn, argv, 1, kw)) : NULL;
    int v = fake ? lc_copy_node(tr, t->value, &m) : -1;
    tvar *r = v >= 0 ? cdy_tensor_tvar(tr, fake, v) : NULL;
    tvar *cl = r ? cdy_tv_const(tr, Py_NewRef(channels_last)) : NULL;
    tvar *args[2] = {t, cl};
    if (cl && cdy_add_pynode(tr, contiguous_fn, args, 2, kw, v))
        r = NULL;
    if (!fake)
        PyErr_Clear();
    return r;
}

/* 1 if meta m is 4-d, dense channels_last and not also NCHW-contiguous. */
static int lc_cl(const cdy_meta *m)
{
    cdy_meta c = *m;
    lc_cl_strides(&c);
    return m->ndim == 4 && !lc_nchw(m) && !memcmp(c.strides, m->strides, sizeof(int64_t) * 4);
}

static int lc_busy;   /* inside lower_conv2d's own call of the conv */

/* The conv on a channels_last input, traced as an extern whose result is
 * channels_last as the CPU kernel makes it (the meta kernel's result, call->out,
 * is NCHW): meta and fake corrected; NULL (stopped or not). */
static tvar *lc_cl_input(tracer *tr, const cdy_lower_call *call)
{
    lc_busy = 1;
    tvar *y = cdy_call_torch(tr, call->fn, call->what, call->args, call->nargs, call->kwnames);
    lc_busy = 0;
    if (!y || y->kind != TV_TENSOR)
        return y;
    PyObject *kw = PyTuple_Pack(1, str_memory_format);
    PyObject *argv[2] = {y->obj, channels_last};
    PyObject *fake = kw ? cdy_tr_keep(tr, PyObject_Vectorcall(contiguous_fn, argv, 1, kw)) : NULL;
    Py_XDECREF(kw);
    if (!fake) {
        cdy_tr_stop_exc(tr, INTERNAL_IN, call->what);
        return NULL;
    }
    lc_cl_strides(&tr->t->graph.values[y->value].meta);
    return cdy_tensor_tvar(tr, fake, y->value);
}

/* torch.conv2d / F.conv2d(input, weight, bias, stride, padding, dilation,
 * groups) on float32: the channels_last rewrite described above for NCHW
 * input and weight; a channels_last input, lc_cl_input. */
tvar *cdy_build_conv2d(tracer *tr, const cdy_lower_call *call)
{
    tvar *s[7];
    if (lc_busy || cdy_bind_names("input weight bias stride padding dilation groups",
                                  call->args, call->nargs, call->kwnames, s) ||
        call->nargs < 2 || s[0] != call->args[0] || s[1] != call->args[1] ||
        s[0]->kind != TV_TENSOR || s[1]->kind != TV_TENSOR || lc_init())
        return NULL;
    cdy_meta om;
    const cdy_meta *xm = &tr->t->graph.values[s[0]->value].meta;
    const cdy_meta *wm = &tr->t->graph.values[s[1]->value].meta;
    if (!PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type) ||
        cdy_read_meta(tr, call->out, &om) || om.dtype != CDY_DT_FLOAT32 ||
        xm->dtype != CDY_DT_FLOAT32 || !(lc_nchw(&om) || lc_cl(&om)))
        return NULL;   /* om: NCHW from torch's meta, channels_last from meta.c's for a
                        * channels_last input or weight (then an extern unless the input is) */
    /* CPU's kernels return channels_last where suggest_memory_format() says so
     * for the input or the weight; a dense channels_last (1, 1, 1, 1) or
     * (N, 1, 1, 1) is also contiguous, and torch suggests contiguous for it */
    if (lc_cl(xm) && cdy_meta_suggests_cl(xm) && (lc_cl(wm) || lc_nchw(wm)))
        return lc_cl_input(tr, call);
    if (!lc_nchw(xm) || !lc_nchw(wm) || xm->sizes[2] * xm->sizes[3] < 2)
        return NULL;   /* an (N, C, 1, 1) input is channels_last already: no rewrite */
    tvar *xc = lc_to_cl(tr, s[0]);
    tvar *wc = xc ? lc_to_cl(tr, s[1]) : NULL;
    if (!wc)
        return NULL;
    tvar *args[CDY_MAX_CALL_ARGS];
    memcpy(args, call->args, sizeof(tvar *) * (size_t)call->nargs);
    args[0] = xc;
    args[1] = wc;
    lc_busy = 1;       /* the rewritten call is a plain extern, never rewritten again */
    tvar *yc = cdy_call_torch(tr, call->fn, call->what, args, call->nargs, call->kwnames);
    lc_busy = 0;
    if (!yc || yc->kind != TV_TENSOR)
        return NULL;
    /* oneDNN returns channels_last for channels_last input and weight (the
     * meta kernel says NCHW): yc's buffer is channels_last, and should torch
     * ever return other strides, the runtime copies its result into them */
    cdy_meta *ymp = &tr->t->graph.values[yc->value].meta;
    lc_cl_strides(ymp);
    cdy_meta ym = *ymp;
    if (memcmp(ym.sizes, om.sizes, sizeof(int64_t) * 4)) {
        cdy_tr_stop(tr, CHANNELS_LAST_SIZES, call->what);
        return NULL;
    }
    int y = cdy_view_value(tr, 0, &yc->value, 1, &om, yc->value, ym.strides, 0);
    return y < 0 ? NULL : cdy_lower_result(tr, call, y);
}
