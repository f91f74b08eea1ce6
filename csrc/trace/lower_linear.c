/* lower_linear.c - composite lowerings: F.linear with a packed weight
 * (BUILD rows of ops/callables.def).
 *
 * linear(x, w, b) whose weight is a graph input (a module's parameter,
 * the same tensor on every call) becomes an extern node calling a
 * runtime/linear.c PackedLinear instead of torch's linear: it keeps w in
 * oneDNN's packed layout between calls and times both forms on its first
 * call (MKL repacks w on every call; with few rows that costs as much as
 * the product).  Only float32, contiguous, with grad mode off (the pack has
 * no autograd; grad mode is guarded), and weights of at least 64 x 64 (the
 * packed call's fixed cost is some 20 us); cdynamo.config.pack_linear_weights
 * turns it off.
 *
 * A rewrite of the finished trace, before the C backend compiles it
 * (cdy_rewrite_linear_relu): y = relu(z) whose z is such a PackedLinear's
 * result, read by nothing else, becomes one call of the PackedLinear with
 * the relu, which oneDNN applies to each tile of the product as it writes
 * it (0-14 us on this project's machine, 64-256 rows).  A relu kernel reads
 * z back where oneDNN's threads left it, split otherwise than its own (an
 * MLP's relu on 64 x 512: 11.7 us after the linear against 3.2 us alone).
 * GELU stays a kernel: oneDNN's fused gelu made the product slower than
 * the product and our kernel after it (256 x 256 -> 1024: 1369 against
 * 1086 us, and a 4-block transformer 1.35x -> 1.13-1.27x over eager). */
#include <string.h>

#include "trace/trace.h"

/* 1 if meta m is a contiguous float32 tensor of at least `nd` dims. */
static int ll_f32(const cdy_meta *m, int nd)
{
    return m->dtype == CDY_DT_FLOAT32 && m->ndim >= nd && cdy_meta_contiguous(m);
}

/* F.linear(input, weight, bias): see above; NULL (not lowered, or stopped). */
tvar *cdy_build_linear(tracer *tr, const cdy_lower_call *call)
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

/* ---- linear + relu --------------------------------------------------------- */

/* 1 if metas a and b have the same dtype, sizes and strides. */
static int la_same_meta(const cdy_meta *a, const cdy_meta *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d] || a->strides[d] != b->strides[d])
            return 0;
    return 1;
}

/* 1 if value y is relu(z) of a float32 z; *z set. */
static int la_relu(const cdy_graph *g, int y, int *z)
{
    const cdy_value *yv = &g->values[y];
    if (yv->kind != CDY_VAL_NODE || yv->meta.dtype != CDY_DT_FLOAT32 ||
        yv->op != CDY_OP_RELU || yv->nargs != 1)
        return 0;
    *z = yv->args[0];
    return 1;
}

/* Fold y = relu(z) into z's PackedLinear where y alone reads z: the linear's
 * call defines y, y's node is its extern, z an unused scalar; the
 * number folded.  Never fails: what it cannot fold stays as traced. */
int cdy_rewrite_linear_relu(cdy_trace *t)
{
    cdy_graph *g = &t->graph;
    size_t nv = (size_t)g->nvalues + 1;
    int *users = PyMem_Calloc(nv, sizeof(int)), *pynode_of = PyMem_Calloc(nv, sizeof(int));
    int done = 0;
    if (!users || !pynode_of)
        goto out;
    cdy_trace_users(t, users);
    cdy_trace_pynode_of(t, pynode_of);
    for (int y = 0; y < g->nvalues; y++) {
        int z;
        if (!la_relu(g, y, &z))
            continue;
        cdy_value *yv = &g->values[y], *zv = &g->values[z];
        int pz = pynode_of[z], py = pynode_of[y];
        if (!cdy_value_is_extern(zv) || users[z] != 1 || pz < 0 ||
            t->pynodes[pz].item >= 0 || (py >= 0 && t->pynodes[py].item >= 0) ||
            !la_same_meta(&zv->meta, &yv->meta) ||
            cdy_packed_linear_set_relu(t->pynodes[pz].fn))
            continue;
        if (py >= 0) {   /* y's own call (the last call of a value is its) becomes the linear's */
            t->pynodes[py] = t->pynodes[pz];   /* the arrays are the trace arena's */
            t->pynodes[py].value = y;
        } else {
            t->pynodes[pz].value = y;
        }
        cdy_value_set_extern(yv, zv->args, zv->nargs, zv->compute_dtype);
        cdy_value_drop(g, z);
        done++;
    }
out:
    PyMem_Free(users);
    PyMem_Free(pynode_of);
    PyErr_Clear();
    return done;
}
