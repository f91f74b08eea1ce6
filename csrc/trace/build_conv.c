/* build_conv.c - builder of convolutions whose input is channels_last
 * (BUILD rows of ops/callables.def).
 *
 * CPU's conv2d returns a channels_last result where suggest_memory_format()
 * says so for the input (or the weight), while torch's meta kernel says
 * NCHW: such a call is an extern whose result meta and fake are corrected to
 * channels_last, as the CPU kernel makes it.  Every other conv stays a plain
 * extern; the layout choice for oneDNN (NCHW float32 convs run on
 * channels_last copies) is a graph pass, passes/channels_last.c. */
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

/* 1 if meta m is 4-d, dense channels_last and not also NCHW-contiguous. */
static int lc_cl(const cdy_meta *m)
{
    cdy_meta c = *m;
    lc_cl_strides(&c);
    return m->ndim == 4 && !lc_nchw(m) && !memcmp(c.strides, m->strides, sizeof(int64_t) * 4);
}

static int lc_busy;   /* inside cdy_build_conv2d's own call of the conv */

/* The conv on a channels_last input, traced as an extern whose result is
 * channels_last as the CPU kernel makes it (the meta kernel's result, call->out,
 * is NCHW): meta and fake corrected; NULL (stopped or not). */
static tvar *lc_cl_input(tracer *tr, const cdy_build_call *call)
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
 * groups) of a float32 channels_last input: lc_cl_input; else NULL (a plain
 * extern: see the top of this file). */
tvar *cdy_build_conv2d(tracer *tr, const cdy_build_call *call)
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
    return NULL;
}
