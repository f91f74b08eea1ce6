/* build_dropout.c - dropout in training mode inside a training trace (issue 34).
 *
 * F.dropout(x, p, training=True) / torch.dropout(x, p, True) is otherwise an
 * extern whose mask the backward cannot see.  In a trace that compiles a
 * backward it is traced instead as eager's CPU kernel computes it
 * (ATen's _dropout_impl): noise = bernoulli(x, 1 - p) (an extern drawing
 * from torch's generator at the call's place, so a seed gives eager's mask),
 * x * (noise / (1 - p)) (graph nodes, whose derivative is mul's).  The
 * Python spelling is cdynamo._autograd.dropout_train, traced inline.
 * F.scaled_dot_product_attention with dropout likewise: eager's CPU math path
 * (sdpa_dropout_train), its weights' mask drawn as dropout's. */
#include <string.h>

#include "trace/trace.h"

static PyObject *f_dropout, *t_dropout, *dropout_train, *f_sdpa, *sdpa_train;

/* Resolve F.dropout, torch.dropout and the inline spelling once; 0 or -1 (cleared). */
static int dt_init(void)
{
    if (dropout_train)
        return 0;
    PyObject *f = PyImport_ImportModule("torch.nn.functional");
    PyObject *t = PyImport_ImportModule("torch");
    PyObject *a = PyImport_ImportModule("cdynamo._autograd");
    PyObject *fd = f ? PyObject_GetAttrString(f, "dropout") : NULL;
    PyObject *td = t ? PyObject_GetAttrString(t, "dropout") : NULL;
    PyObject *dt = a ? PyObject_GetAttrString(a, "dropout_train") : NULL;
    PyObject *fs = f ? PyObject_GetAttrString(f, "scaled_dot_product_attention") : NULL;
    PyObject *st = a ? PyObject_GetAttrString(a, "sdpa_dropout_train") : NULL;
    Py_XDECREF(f);
    Py_XDECREF(t);
    Py_XDECREF(a);
    if (!fd || !td || !dt || !fs || !st) {
        Py_XDECREF(fd);
        Py_XDECREF(td);
        Py_XDECREF(dt);
        Py_XDECREF(fs);
        Py_XDECREF(st);
        PyErr_Clear();
        return -1;
    }
    f_dropout = fd, t_dropout = td, f_sdpa = fs, sdpa_train = st, dropout_train = dt;
    return 0;
}

/* 1 if t is absent (then dflt) or the constant True. */
static int dt_true(const tvar *t, int dflt)
{
    return t ? t->kind == TV_CONST && t->obj == Py_True : dflt;
}

/* 1 if constant t is a float in (0, 1) (a dropout probability that draws). */
static int dt_prob(const tvar *t)
{
    double p = t && t->kind == TV_CONST && PyFloat_Check(t->obj) ? PyFloat_AsDouble(t->obj) : 0;
    return p > 0 && p < 1;
}

/* F.scaled_dot_product_attention with dropout_p in (0, 1): *handled 1 and
 * sdpa_dropout_train traced inline (its arguments as given); a causal call
 * with a mask (eager raises) or enable_gqa stays an extern. */
static tvar *dt_sdpa(tracer *tr, tvar **args, int nargs, PyObject *kwnames, int *handled)
{
    tvar *s[8] = {0};
    if (cdy_bind_names("query key value attn_mask dropout_p is_causal scale enable_gqa", args,
                       nargs, kwnames, s) ||
        !dt_prob(s[4]) || (s[7] && !(s[7]->kind == TV_CONST && s[7]->obj == Py_False)) ||
        (s[5] && !(s[5]->kind == TV_CONST && PyBool_Check(s[5]->obj))) ||
        (s[5] && s[5]->obj == Py_True && !cdy_tv_none(s[3])))
        return NULL;
    for (int i = 0; i < 3; i++)
        if (!s[i] || s[i]->kind != TV_TENSOR ||
            !cdy_dtype_table[tr->t->graph.values[s[i]->value].meta.dtype].is_float)
            return NULL;
    *handled = 1;
    return cdy_inline(tr, sdpa_train, args, nargs, kwnames);
}

tvar *cdy_dropout_train(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames,
                        int *handled)
{
    *handled = 0;
    if (!tr->t->training || dt_init())
        return NULL;
    if (fn == f_sdpa)
        return dt_sdpa(tr, args, nargs, kwnames, handled);
    if (fn != f_dropout && fn != t_dropout)
        return NULL;
    tvar *s[4] = {0};
    int f = fn == f_dropout;
    if (cdy_bind_names(f ? "input p training inplace" : "input p train", args, nargs, kwnames,
                       s) ||
        !s[0] || s[0]->kind != TV_TENSOR || !dt_true(s[2], f) || (f && s[3] && !cdy_tv_none(s[3]) &&
                                                              s[3]->obj != Py_False))
        return NULL;
    const cdy_meta *m = &tr->t->graph.values[s[0]->value].meta;
    if (!cdy_dtype_table[m->dtype].is_float || cdy_meta_numel(m) == 0)
        return NULL;
    double p = 0.5;
    if (s[1] && (s[1]->kind != TV_CONST || !PyFloat_Check(s[1]->obj) ||
                 (p = PyFloat_AsDouble(s[1]->obj), 0)))
        return NULL;
    if (!(p > 0 && p < 1))
        return NULL;
    tvar *a[2] = {s[0], s[1] ? s[1] : cdy_tv_const(tr, PyFloat_FromDouble(0.5))};
    if (!a[1])
        return NULL;
    *handled = 1;
    return cdy_inline(tr, dropout_train, a, 2, NULL);
}
