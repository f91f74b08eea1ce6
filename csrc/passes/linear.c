/* linear.c - linear layers on oneDNN's packed weights (a backend choice).
 *
 * cdy_pass_pack_linear: linear(x, w, b) whose weight is a graph input (a
 * module's parameter, the same tensor on every call) becomes an extern node
 * calling a runtime/linear.c PackedLinear instead of torch's linear: it keeps
 * w in oneDNN's packed layout between calls and times both forms on its
 * first call (MKL repacks w on every call; with few rows that costs as much
 * as the product).  Only float32, contiguous, with grad mode off (the pack
 * has no autograd; grad mode is guarded), and weights of at least 64 x 64
 * (the packed call's fixed cost is some 20 us);
 * cdynamo.config.pack_linear_weights turns it off.
 *
 * cdy_pass_linear_relu (C backend): y = relu(z) whose z is such a
 * PackedLinear's result, read by nothing else, becomes one call of the
 * PackedLinear with the relu, which oneDNN applies to each tile of the
 * product as it writes it (0-14 us on this project's machine, 64-256 rows).
 * A relu kernel reads z back where oneDNN's threads left it, split otherwise
 * than its own (an MLP's relu on 64 x 512: 11.7 us after the linear against
 * 3.2 us alone).  GELU stays a kernel: oneDNN's fused gelu made the product
 * slower than the product and our kernel after it (256 x 256 -> 1024: 1369
 * against 1086 us, and a 4-block transformer 1.35x -> 1.13-1.27x over eager). */
#include <string.h>

#include "passes/passes.h"

static PyObject *linear_fn;   /* torch.nn.functional.linear (torch._C._nn.linear) */

/* 1 if meta m is a contiguous float32 tensor of at least `nd` dims. */
static int ll_f32(const cdy_meta *m, int nd)
{
    return m->dtype == CDY_DT_FLOAT32 && m->ndim >= nd && cdy_meta_contiguous(m);
}

/* The tensor value of argument slot s of call p (-1 when absent); 1 for an
 * absent or None argument, 0 for any other (*v set when a tensor). */
static int ll_arg(const cdy_pynode *p, int s, int *v)
{
    *v = s >= 0 ? p->ref[s] : -1;
    return s < 0 || *v >= 0 || (p->ref[s] == -1 && p->cst[s] == Py_None);
}

/* 1 if call p is F.linear(input, weight[, bias]) that the packed form takes:
 * x, w (a graph input, 2-d, at least 64 x 64) and b float32 and contiguous;
 * their values in xwb[0..2] (b -1 when absent). */
static int ll_wants(const cdy_trace *t, const cdy_pynode *p, int *xwb)
{
    int slot[3];
    if (p->fn != linear_fn || p->value < 0 || p->item >= 0 ||
        !cdy_value_is_extern(&t->graph.values[p->value]) ||
        cdy_pynode_bind(p, "input weight bias", slot) || slot[0] < 0 || slot[1] < 0 ||
        !ll_arg(p, slot[0], &xwb[0]) || !ll_arg(p, slot[1], &xwb[1]) ||
        !ll_arg(p, slot[2], &xwb[2]) || xwb[0] < 0 || xwb[1] < 0)
        return 0;
    const cdy_graph *g = &t->graph;
    const cdy_value *x = &g->values[xwb[0]], *w = &g->values[xwb[1]];
    return w->kind == CDY_VAL_INPUT && w->meta.ndim == 2 && ll_f32(&w->meta, 2) &&
           w->meta.sizes[0] >= 64 && w->meta.sizes[1] >= 64 && ll_f32(&x->meta, 2) &&
           (xwb[2] < 0 || ll_f32(&g->values[xwb[2]].meta, 1));
}

/* Make call p (value y) pl(x, w, b or None): its node reads (x, w[, b]); 0 or -1. */
static int ll_rewrite(cdy_trace *t, cdy_pynode *p, PyObject *pl, const int *xwb)
{
    int *ref = cdy_arena_alloc(&t->arena, sizeof(int) * 4);
    PyObject **cst = cdy_arena_alloc(&t->arena, sizeof(PyObject *) * 4);
    cdy_pyseq *seq = cdy_arena_alloc(&t->arena, sizeof(cdy_pyseq) * 4);
    if (!ref || !cst || !seq || cdy_trace_guard_grad_mode(t, 0))
        return -1;
    memcpy(ref, xwb, sizeof(int) * 3);
    cst[2] = xwb[2] < 0 ? Py_None : NULL;
    p->fn = pl;
    p->nargs = 3;
    p->ref = ref;
    p->cst = cst;
    p->seq = seq;
    p->kwnames = NULL;
    cdy_value *y = &t->graph.values[p->value];
    cdy_value_set_extern(y, xwb, xwb[2] < 0 ? 2 : 3, y->compute_dtype);
    return 0;
}

/* The value of cdynamo.config.pack_linear_weights: 0 off, 1 on (timed), 2 "always". */
static int ll_config(void)
{
    PyObject *on = cdy_config_get("pack_linear_weights");
    int enabled = on && PyObject_IsTrue(on) == 1;
    int always = on && PyUnicode_Check(on) && PyUnicode_CompareWithASCIIString(on, "always") == 0;
    Py_XDECREF(on);
    PyErr_Clear();
    return enabled ? 1 + always : 0;
}

int cdy_pass_pack_linear(cdy_trace *t)
{
    int done = 0, mode;
    if (t->grad_enabled || t->status != CDY_TRACE_OK)
        return 0;
    if (!linear_fn) {
        PyObject *f = PyImport_ImportModule("torch.nn.functional");
        linear_fn = f ? PyObject_GetAttrString(f, "linear") : NULL;
        Py_XDECREF(f);
    }
    for (int pn = 0; linear_fn && pn < t->npynodes; pn++) {
        int xwb[3];
        if (!ll_wants(t, &t->pynodes[pn], xwb) || !(mode = ll_config()))
            continue;
        PyObject *pl = cdy_trace_keep(t, cdy_packed_linear_new(mode == 2));
        if (pl && !ll_rewrite(t, &t->pynodes[pn], pl, xwb))
            done++;
    }
    PyErr_Clear();
    return done;
}

void cdy_pass_pack_linear_per_rows(cdy_trace *t)
{
    for (int pn = 0; pn < t->npynodes; pn++)
        cdy_packed_linear_set_per_rows(t->pynodes[pn].fn);
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
int cdy_pass_linear_relu(cdy_trace *t)
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
