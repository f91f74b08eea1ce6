/* lower_linear.c - composite lowerings: F.linear with a packed weight
 * (registered in cdy_lowerings_linear).
 *
 * linear(x, w, b) whose weight is a graph input (a module's parameter,
 * the same tensor on every call) becomes an extern node calling a
 * runtime/linear.c PackedLinear instead of torch's linear: it keeps w in
 * oneDNN's packed layout between calls and times both forms on its first
 * call (MKL repacks w on every call; with few rows that costs as much as
 * the product).  Only float32, contiguous, with grad mode off (the pack has
 * no autograd; grad mode is guarded), and weights of at least 64 x 64 (the
 * packed call's fixed cost is some 20 us); cdynamo.config.pack_linear_weights
 * turns it off. */
#include "trace/trace.h"

/* 1 if meta m is a contiguous float32 tensor of at least `nd` dims. */
static int ll_f32(const cdy_meta *m, int nd)
{
    return m->dtype == CDY_DT_FLOAT32 && m->ndim >= nd && cdy_meta_contiguous(m);
}

/* F.linear(input, weight, bias): see above; NULL (not lowered, or stopped). */
static tvar *lower_linear(tracer *tr, const cdy_lower_call *call)
{
    tvar *s[3];
    if (tr->t->grad_enabled ||
        cdy_bind_names("input weight bias", call->args, call->nargs, call->kwnames, s) ||
        !s[0] || !s[1] || s[0]->kind != TV_TENSOR || s[1]->kind != TV_TENSOR ||
        !PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type))
        return NULL;
    const cdy_graph *g = &tr->t->graph;
    const cdy_value *x = &g->values[s[0]->value], *w = &g->values[s[1]->value];
    int has_b = s[2] && s[2]->kind == TV_TENSOR;
    if ((s[2] && !has_b && !(s[2]->kind == TV_CONST && s[2]->obj == Py_None)) ||
        w->kind != CDY_VAL_INPUT || w->meta.ndim != 2 || !ll_f32(&w->meta, 2) ||
        w->meta.sizes[0] < 64 || w->meta.sizes[1] < 64 || !ll_f32(&x->meta, 2) ||
        (has_b && !ll_f32(&g->values[s[2]->value].meta, 1)))
        return NULL;
    PyObject *on = cdy_config_get("pack_linear_weights");
    int enabled = on && PyObject_IsTrue(on) == 1;
    int always = on && PyUnicode_Check(on) && PyUnicode_CompareWithASCIIString(on, "always") == 0;
    Py_XDECREF(on);
    PyErr_Clear();
    PyObject *pl = enabled ? cdy_tr_keep(tr, cdy_packed_linear_new(always)) : NULL;
    if (!pl) {
        PyErr_Clear();
        return NULL;
    }
    if (cdy_guard_grad_mode(tr, 0))
        return NULL;
    tvar *args[3] = {s[0], s[1], has_b ? s[2] : cdy_tv_const(tr, Py_NewRef(Py_None))};
    return args[2] ? cdy_extern_node(tr, pl, call->what, args, 3, NULL, call->out) : NULL;
}

/* X(name, where, lowering): see cdy_lowering in trace.h. */
#define CDY_LOWER_LINEAR(X)              \
    X("linear", "fn", lower_linear)

CDY_LOWERING_TABLE(cdy_lowerings_linear, CDY_LOWER_LINEAR);
