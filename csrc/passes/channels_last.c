/* channels_last.c - a layout choice for oneDNN: float32, bfloat16 and
 * float16 2-d convolutions in channels_last.
 *
 * oneDNN runs a float32 2-d convolution several times faster on
 * channels_last (NHWC) tensors than on contiguous NCHW ones when the
 * channel counts are small (a 3->32 conv on 8x3x32x32: 1.3 ms against
 * 0.2 ms on this project's machine).  Eager keeps NCHW; the graph may not
 * change what the program sees, so the pass keeps the conv's result meta
 * and moves only the internal data.  The traced extern y = conv2d(x, w, ...)
 * (NCHW-contiguous float32 x and w) becomes
 *
 *   xc = strided_copy(x) in channels_last    (a copy kernel, fused with x's producers)
 *   wc = strided_copy(w) in channels_last    (the weight, a few KB)
 *   yc = conv2d(xc, wc, bias, ...)           (extern: torch, channels_last result)
 *   y  = strided_copy(yc) with eager's strides
 *
 * y is what the program sees.  Its consumers read yc through y's view
 * strides inside their own kernels (batch norm, relu, pooling fuse there),
 * so y itself needs no buffer unless it is returned or passed to another
 * extern.  oneDNN returns channels_last for channels_last input and weight
 * (should torch ever return other strides, the runtime copies its result
 * into them).  A conv whose input is already channels_last is traced as an
 * extern with a channels_last result (trace/build_conv.c). */
#include <string.h>

#include "passes/passes.h"

static PyObject *conv_fn, *channels_last, *contiguous_fn, *kw_memory_format;

/* Resolve torch.conv2d (F.conv2d), torch.channels_last and Tensor.contiguous
 * once; 0 or -1 (cleared: no rewrite). */
static int cl_init(void)
{
    if (conv_fn)
        return 0;
    PyObject *tensor = PyObject_GetAttrString(cdy_torch, "Tensor");
    PyObject *conv = PyObject_GetAttrString(cdy_torch, "conv2d");
    PyObject *cl = PyObject_GetAttrString(cdy_torch, "channels_last");
    PyObject *cont = tensor ? PyObject_GetAttrString(tensor, "contiguous") : NULL;
    PyObject *kw = Py_BuildValue("(s)", "memory_format");
    Py_XDECREF(tensor);
    if (!conv || !cl || !cont || !kw) {
        Py_XDECREF(conv);
        Py_XDECREF(cl);
        Py_XDECREF(cont);
        Py_XDECREF(kw);
        PyErr_Clear();
        return -1;
    }
    conv_fn = conv;
    channels_last = cl;
    contiguous_fn = cont;
    kw_memory_format = kw;
    return 0;
}

/* m's strides set to the channels_last order (C innermost, then W, H, N). */
static void cl_strides(cdy_meta *m)
{
    m->strides[1] = 1;
    m->strides[3] = m->sizes[1];
    m->strides[2] = m->strides[3] * m->sizes[3];
    m->strides[0] = m->strides[2] * m->sizes[2];
}

/* 1 if meta m is a 4-d tensor, contiguous in NCHW and not also channels_last. */
static int cl_nchw(const cdy_meta *m)
{
    return m->ndim == 4 && m->sizes[1] > 1 && cdy_meta_contiguous(m);
}

/* 1 if meta m is 4-d, dense channels_last and not also NCHW-contiguous. */
static int cl_is_cl(const cdy_meta *m)
{
    cdy_meta c = *m;
    cl_strides(&c);
    return m->ndim == 4 && !cl_nchw(m) && !memcmp(c.strides, m->strides, sizeof(int64_t) * 4);
}

/* 1 for the dtypes whose convs the pass moves: float32, and bfloat16 /
 * float16, where oneDNN's channels_last kernels are faster still (bfloat16
 * 3->32 on 8x3x32x32: 200 us NCHW, 148 channels_last; float16 32->64 on
 * 8x32x16x16: 25 ms, 5 ms, one core of this project's machine). */
static int cl_dtype(int dt)
{
    return dt == CDY_DT_FLOAT32 || dt == CDY_DT_BFLOAT16 || dt == CDY_DT_FLOAT16;
}

/* 1 if call p is a conv2d of NCHW x and w of one cl_dtype (its first two arguments,
 * positional) whose extern node has an NCHW (or channels_last) meta,
 * over at least two pixels: the calls the pass rewrites. */
static int cl_wants(const cdy_trace *t, const cdy_pynode *p)
{
    int slot[7];
    if (p->fn != conv_fn || p->value < 0 || p->item >= 0 || p->nargs < 2 || p->ref[0] < 0 ||
        p->ref[1] < 0 || cdy_pynode_bind(p, "input weight bias stride padding dilation groups",
                                         slot) || slot[0] != 0 || slot[1] != 1)
        return 0;
    const cdy_graph *g = &t->graph;
    const cdy_value *y = &g->values[p->value];
    const cdy_meta *om = &y->meta, *xm = &g->values[p->ref[0]].meta;
    const cdy_meta *wm = &g->values[p->ref[1]].meta;
    return cdy_value_is_extern(y) && cl_dtype(om->dtype) && xm->dtype == om->dtype &&
           wm->dtype == om->dtype && (cl_nchw(om) || cl_is_cl(om)) && cl_nchw(xm) &&
           cl_nchw(wm) && xm->sizes[2] * xm->sizes[3] >= 2;
}

/* Fill value c as a copy node of value src in channels_last, reading src
 * where its own loads do (a view's base, strides, offset), on like's line. */
static void cl_copy_node(cdy_graph *g, int c, int src, const cdy_value *like)
{
    const cdy_value *s = &g->values[src];
    cdy_value *v = &g->values[c];
    int view = s->kind == CDY_VAL_NODE && cdy_op_table[s->op].kind == 'V';
    v->kind = CDY_VAL_NODE;
    v->meta = s->meta;
    cl_strides(&v->meta);
    v->nargs = 1;
    v->args[0] = src;
    v->compute_dtype = v->meta.dtype;
    v->source_line = like->source_line;
    v->source_code = like->source_code;
    cdy_value_set_copy(v, view ? s->view_base : src, view ? s->view_strides : s->meta.strides,
                       view ? s->view_offset : 0);
}

/* The arrays of a call of n arguments (trace arena); 0 or -1. */
static int cl_call_arrays(cdy_trace *t, int n, int **ref, PyObject ***cst, cdy_pyseq **seq)
{
    *ref = cdy_arena_alloc(&t->arena, sizeof(int) * (size_t)(n + 1));
    *cst = cdy_arena_alloc(&t->arena, sizeof(PyObject *) * (size_t)(n + 1));
    *seq = cdy_arena_alloc(&t->arena, sizeof(cdy_pyseq) * (size_t)(n + 1));
    return *ref && *cst && *seq ? 0 : -1;
}

/* Fill call q as `src.contiguous(memory_format=torch.channels_last)` defining
 * value v, with the arrays in a (ref, cst, seq of two arguments). */
static void cl_copy_call(cdy_pynode *q, int src, int v, int *ref, PyObject **cst,
                         cdy_pyseq *seq)
{
    q->fn = contiguous_fn;
    q->nargs = 2;
    q->kwnames = kw_memory_format;
    q->value = v;
    q->ref = ref;
    q->cst = cst;
    q->seq = seq;
    ref[0] = src;
    ref[1] = -1;
    cst[1] = channels_last;
}

/* Rewrite the conv of call number pn (cl_wants) as described at the top:
 * three values and three calls before its own; 0, or -1 when out of memory
 * (then nothing changed). */
static int cl_rewrite(cdy_trace *t, int pn)
{
    int *ref[3];
    PyObject **cst[3];
    cdy_pyseq *seq[3];
    int y0 = t->pynodes[pn].value, nargs = t->pynodes[pn].nargs;
    for (int i = 0; i < 3; i++)
        if (cl_call_arrays(t, i < 2 ? 2 : nargs, &ref[i], &cst[i], &seq[i]))
            return -1;
    if (cdy_trace_insert_values(t, y0, 3) || cdy_trace_insert_pynodes(t, pn, 3))
        return -1;
    cdy_graph *g = &t->graph;
    cdy_pynode *p = &t->pynodes[pn + 3];   /* the conv's call: now y's */
    int xc = y0, wc = y0 + 1, yc = y0 + 2, y = y0 + 3, x = p->ref[0], w = p->ref[1];
    cl_copy_node(g, xc, x, &g->values[y]);
    cl_copy_node(g, wc, w, &g->values[y]);
    g->values[yc] = g->values[y];            /* the conv, on the copies, channels_last */
    cl_strides(&g->values[yc].meta);
    g->values[yc].args[0] = xc;
    g->values[yc].args[1] = wc;
    cdy_value *yv = &g->values[y];           /* y: a copy of yc with eager's strides */
    yv->nargs = 1;
    yv->args[0] = yc;
    yv->compute_dtype = yv->meta.dtype;
    cdy_value_set_copy(yv, yc, g->values[yc].meta.strides, 0);
    cl_copy_call(&t->pynodes[pn], x, xc, ref[0], cst[0], seq[0]);
    cl_copy_call(&t->pynodes[pn + 1], w, wc, ref[1], cst[1], seq[1]);
    cdy_pynode *q = &t->pynodes[pn + 2];     /* yc's call: the conv on the copies */
    *q = *p;
    q->value = yc;
    q->ref = ref[2];
    memcpy(q->ref, p->ref, sizeof(int) * (size_t)nargs);
    q->ref[0] = xc;
    q->ref[1] = wc;
    return 0;
}

int cdy_pass_channels_last(cdy_trace *t)
{
    int done = 0;
    if (cl_init())
        return 0;
    for (int pn = 0; pn < t->npynodes; pn++)
        if (cl_wants(t, &t->pynodes[pn])) {
            if (cl_rewrite(t, pn))
                break;
            done++;
            pn += 3;
        }
    PyErr_Clear();
    return done;
}
