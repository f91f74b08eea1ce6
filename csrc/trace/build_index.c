/* build_index.c - builders of indexing (BUILD rows of ops/callables.def).
 * embedding, index_select, gather, take_along_dim and tensor indexing (x[idx],
 * x[:, idx], x[i0, i1] with slices / None / Ellipsis / ints) become one GATHER node (kind 'G', see cdynamo.h and
 * csrc/compiler/gather.c) whose meta is torch's result on the fakes
 * (call->out).  An index tensor whose dims do not end the result's is read
 * through a VIEW placing its dims where the result has them.  Anything not
 * reproduced exactly (bool / uint8 masks, lists, more than two index
 * tensors, embedding's max_norm, a result shape other than ours) returns
 * NULL without stopping: the call stays an extern. */
#include <string.h>

#include "trace/trace.h"
#include "sym/sym.h"

/* Error kinds of a gather code (code & 15; the runtime's messages). */
enum { LI_ERR_SELF = 1, LI_ERR_GATHER = 2, LI_ERR_INDEX = 3, LI_ERR_DIM1 = 4 };
#define LI_WRAP 16
#define LI_MAX_IDX 2
_Static_assert(LI_MAX_IDX <= CDY_SYM_MAX_GIDX, "a gather map's idim holds every index");

/* What a GATHER node reads: out dim d of the result is element off + sum
 * o_d * st[d] + sum_i j_i * gst[i] of value base; index i (a value of the
 * result's rank or right-aligned to it) gives j_i, size gsz[i], code[i]. */
typedef struct {
    int base;
    int64_t off;
    int64_t st[CDY_MAX_NDIM];
    int k;
    int idx[LI_MAX_IDX];
    int64_t gst[LI_MAX_IDX], gsz[LI_MAX_IDX], code[LI_MAX_IDX];
} li_gather;

/* The graph value of tensor tvar t. */
static const cdy_value *li_val(tracer *tr, const tvar *t)
{
    return &tr->t->graph.values[t->value];
}

/* 1 if t is absent or None. */
static int li_none(const tvar *t)
{
    return !t || (t->kind == TV_CONST && t->obj == Py_None);
}

/* 1 if t is absent, None or False. */
static int li_off(const tvar *t)
{
    return li_none(t) || (t->kind == TV_CONST && t->obj == Py_False);
}

/* 1 if t is an int64 / int32 tensor (an index eager reads as positions). */
static int li_index_tensor(tracer *tr, const tvar *t)
{
    if (!t || t->kind != TV_TENSOR)
        return 0;
    int dt = li_val(tr, t)->meta.dtype;
    return dt == CDY_DT_INT64 || dt == CDY_DT_INT32;
}

/* Base, strides and offset of the loads of value p (a view: its own; any
 * other tensor: itself, its strides, 0). */
static void li_map(tracer *tr, int p, int *base, int64_t *strides, int64_t *off)
{
    const cdy_value *pv = &tr->t->graph.values[p];
    int is_view = pv->kind == CDY_VAL_NODE && cdy_op_table[pv->op].kind == 'V';
    *base = is_view ? pv->view_base : p;
    *off = is_view ? pv->view_offset : 0;
    memcpy(strides, is_view ? pv->view_strides : pv->meta.strides, sizeof(int64_t) * CDY_MAX_NDIM);
}

/* Torch's result meta into *m when it is one tensor of x's dtype; 0 or -1. */
static int li_out_meta(tracer *tr, const cdy_build_call *call, const tvar *x, cdy_meta *m)
{
    if (!PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type) ||
        cdy_read_meta(tr, call->out, m))
        return -1;
    return m->dtype == li_val(tr, x)->meta.dtype ? 0 : -1;
}

/* Index tensor t read in a result of meta m whose dims [p, p + t.ndim) are
 * t's: t itself when those dims end the result (or t is 0-d), else a VIEW
 * of t of the result's rank with 1s around them.  Its value number, or -1 (stopped). */
static int li_index_value(tracer *tr, const tvar *t, const cdy_meta *m, int p)
{
    const cdy_meta tm = li_val(tr, t)->meta;
    if (p + tm.ndim == m->ndim || tm.ndim == 0)
        return t->value;
    int base;
    int64_t st[CDY_MAX_NDIM], off;
    li_map(tr, t->value, &base, st, &off);
    cdy_meta vm = {.dtype = tm.dtype, .ndim = m->ndim};
    int64_t vst[CDY_MAX_NDIM] = {0};
    signed char map[CDY_MAX_NDIM] = {0};
    for (int d = 0; d < vm.ndim; d++) {
        int td = d - p, in = td >= 0 && td < tm.ndim;
        vm.sizes[d] = in ? tm.sizes[td] : 1;
        vm.strides[d] = in ? tm.strides[td] : 0;
        vst[d] = in ? st[td] : 0;
        map[d] = (signed char)(in ? td : -1);
    }
    int argv[1] = {t->value};
    int v = cdy_view_value(tr, 1, argv, 1, &vm, base, vst, off);
    if (v >= 0)
        cdy_tr_sym_dims(tr, v, t->value, map);   /* its sizes are t's (sym/infer.c) */
    return v;
}

/* A new GATHER node described by gth with meta m; its value, or -1 (stopped). */
static int li_gather_node(tracer *tr, const cdy_meta *m, const li_gather *gth)
{
    int args[CDY_MAX_NODE_ARGS], k = gth->k;
    for (int i = 0; i < k; i++) {
        args[i] = gth->idx[i];
        args[k + i] = cdy_scalar_int(tr, (long long)gth->gst[i]);
        args[2 * k + i] = cdy_scalar_int(tr, (long long)gth->gsz[i]);
        args[3 * k + i] = cdy_scalar_int(tr, (long long)gth->code[i]);
    }
    for (int a = 0; a < 4 * k; a++)
        if (args[a] < 0)
            return -1;
    int v = cdy_node_add(tr, CDY_OP_GATHER, args, 4 * k, m, m->dtype);
    if (v < 0)
        return -1;
    cdy_value *gv = &tr->t->graph.values[v];
    gv->view_base = gth->base;
    gv->view_offset = gth->off;
    memcpy(gv->view_strides, gth->st, sizeof(gth->st));
    return v;
}

/* The GATHER node described by gth with result meta m, as the call's
 * result; NULL when stopped.  An empty result with indices to check (a source
 * dim of size 0 elsewhere) is declined, NULL with no stop: a kernel walks the
 * result's elements and would check none, where eager checks every index, so
 * torch's own op runs (an extern). */
static tvar *li_node(tracer *tr, const cdy_build_call *call, const cdy_meta *m,
                     const li_gather *gth)
{
    for (int i = 0; i < gth->k && cdy_meta_numel(m) == 0; i++)
        if (cdy_meta_numel(&tr->t->graph.values[gth->idx[i]].meta) > 0)
            return NULL;
    int v = li_gather_node(tr, m, gth);
    return v < 0 ? NULL : cdy_build_result(tr, call, v);
}

/* A one-index gather of a source of sizes psz (rank pndim) along its dim
 * sd (size psz[sd]): result dims [od, od + nd) are the index's, the others
 * the source's other dims in order; od < 0: result dim d is source dim d
 * (torch.gather).  idx: the index value, read at the result's elements. */
#define LI_PUSH_MAX 8
typedef struct {
    const cdy_meta *m;
    const int64_t *psz;
    int pndim, sd, od, nd, idx;
    int64_t code;
    int pushed;              /* pointwise nodes rebuilt so far (LI_PUSH_MAX at most) */
    int src;                 /* the source's value (its sizes: psz) */
    signed char map[CDY_MAX_NDIM];   /* each GATHER's sizes (kind 'g', sym.h) */
} li_plan;

/* The gather of plan p reading value v (of the source's sizes, or
 * broadcast to them from the right) into *g. */
static void li_leaf(tracer *tr, int v, const li_plan *p, li_gather *g)
{
    int64_t xs[CDY_MAX_NDIM], ls[CDY_MAX_NDIM];
    const cdy_meta vm = tr->t->graph.values[v].meta;
    int shift = p->pndim - vm.ndim;
    memset(g, 0, sizeof(*g));
    li_map(tr, v, &g->base, xs, &g->off);
    for (int d = 0; d < p->pndim; d++) {
        int vd = d - shift;
        ls[d] = vd < 0 || vm.sizes[vd] == 1 ? 0 : xs[vd];
    }
    for (int d = 0, xd = 0; d < p->m->ndim; d++) {
        if (p->od < 0) {
            g->st[d] = d == p->sd ? 0 : ls[d];
            continue;
        }
        if (xd == p->sd)
            xd++;
        g->st[d] = d >= p->od && d < p->od + p->nd ? 0 : ls[xd++];
    }
    g->k = 1;   /* the range: the source's dim sd (li_push's map), expanded or not */
    g->gst[0] = ls[p->sd];
    g->gsz[0] = p->psz[p->sd];
    g->code[0] = p->code;
    g->idx[0] = p->idx;
}

/* 1 if value v is a pointwise node over exactly the source's sizes (a
 * gather of it is the same op over gathers of its args). */
static int li_pushable(tracer *tr, int v, const li_plan *p)
{
    const cdy_value *val = &tr->t->graph.values[v];
    if (val->kind != CDY_VAL_NODE || p->pushed >= LI_PUSH_MAX)
        return 0;
    char kind = cdy_op_table[val->op].kind;
    if (kind != 'U' && kind != 'B' && kind != 'C' && kind != 'T')
        return 0;
    if (val->meta.ndim != p->pndim)
        return 0;
    for (int d = 0; d < p->pndim; d++)
        if (val->meta.sizes[d] != p->psz[d])
            return 0;
    return 1;
}

/* Value v read at the gathered elements of plan p, as a value of the
 * result's sizes: a pointwise node becomes its op over its args read there
 * (the producers of the source fuse with the gather), anything else a
 * GATHER of it.  Its number, or -1 (stopped). */
static int li_push(tracer *tr, int v, li_plan *p)
{
    cdy_meta nm = *p->m;
    nm.dtype = tr->t->graph.values[v].meta.dtype;
    if (!li_pushable(tr, v, p)) {
        li_gather g;
        li_leaf(tr, v, p, &g);
        int gv = li_gather_node(tr, &nm, &g);
        signed char idim[CDY_SYM_MAX_GIDX] = {(signed char)(p->sd + 1)};
        if (gv >= 0 && cdy_tr_sym_gathered(tr, gv, p->src, p->map, idim))
            return -1;   /* its sizes: the source's kept dims, the index's (sym/infer.c) */
        return gv;
    }
    p->pushed++;
    const cdy_value val = tr->t->graph.values[v];   /* a copy: adding nodes may move it */
    int args[CDY_MAX_NODE_ARGS];
    for (int a = 0; a < val.nargs; a++) {
        int av = val.args[a];
        args[a] = tr->t->graph.values[av].kind == CDY_VAL_SCALAR ? av : li_push(tr, av, p);
        if (args[a] < 0)
            return -1;
    }
    return cdy_node_add(tr, val.op, args, val.nargs, &nm, val.compute_dtype);
}

/* A one-index gather of src x along its dim sd, result meta m, index t at
 * result dims [od, od + nd) (od < 0: torch.gather's mapping, t of the
 * result's rank), as the call's result; NULL when stopped or not lowered. */
static tvar *li_one(tracer *tr, const cdy_build_call *call, const tvar *x, int sd,
                    const tvar *t, const cdy_meta *m, int od, int nd, int64_t code)
{
    const cdy_meta xm = li_val(tr, x)->meta;
    if (od >= 0 && m->ndim != xm.ndim - 1 + nd)
        return NULL;
    if (cdy_meta_numel(m) == 0 && cdy_meta_numel(&li_val(tr, t)->meta) > 0)
        return NULL;   /* indices to check, no element to walk: see li_node */
    li_plan p = {m, xm.sizes, xm.ndim, sd, od, nd, -1, code, 0, x->value, {0}};
    for (int d = 0, xd = 0; d < m->ndim; d++) {   /* as li_leaf walks the dims */
        if (od < 0) {
            p.map[d] = (signed char)(d == sd ? -2 : d);
            continue;
        }
        xd += xd == sd;
        p.map[d] = (signed char)(d >= od && d < od + nd ? -2 : xd++);
    }
    if ((p.idx = od < 0 ? t->value : li_index_value(tr, t, m, od)) < 0)
        return NULL;
    int v = li_push(tr, x->value, &p);
    return v < 0 ? NULL : cdy_build_result(tr, call, v);
}

/* F.embedding(input, weight, padding_idx, max_norm, ...) and
 * torch.embedding(weight, indices, ...): rows of a 2-D weight; padding_idx
 * does not change the forward; max_norm (renorms the weight) stays extern. */
static tvar *li_embedding(tracer *tr, const cdy_build_call *call, tvar *w, tvar *ids)
{
    cdy_meta m;
    if (!w || w->kind != TV_TENSOR || !li_index_tensor(tr, ids) ||
        li_val(tr, w)->meta.ndim != 2 || li_out_meta(tr, call, w, &m) ||
        m.ndim != li_val(tr, ids)->meta.ndim + 1)
        return NULL;
    return li_one(tr, call, w, 0, ids, &m, 0, li_val(tr, ids)->meta.ndim, LI_ERR_SELF);
}

/* F.embedding (input, weight, padding_idx, max_norm, norm_type, ...). */
tvar *cdy_build_f_embedding(tracer *tr, const cdy_build_call *call)
{
    tvar *s[8];
    if (cdy_bind_names("input weight padding_idx max_norm norm_type scale_grad_by_freq sparse",
                       call->args, call->nargs, call->kwnames, s) || !li_none(s[3]))
        return NULL;
    return li_embedding(tr, call, s[1], s[0]);
}

/* torch.embedding (weight, indices, padding_idx, scale_grad_by_freq, sparse). */
tvar *cdy_build_embedding(tracer *tr, const cdy_build_call *call)
{
    tvar *s[8];
    if (cdy_bind_names("weight indices padding_idx scale_grad_by_freq sparse",
                       call->args, call->nargs, call->kwnames, s))
        return NULL;
    return li_embedding(tr, call, s[0], s[1]);
}

/* torch.index_select / Tensor.index_select (input, dim, index): a 0-d or
 * 1-d index along any dim.  Eager's errors: dim 1 of a tensor of rank > 1
 * goes through its "INDICES element" path, the rest "out of range in self". */
tvar *cdy_build_index_select(tracer *tr, const cdy_build_call *call)
{
    tvar *s[8];
    cdy_meta m;
    long long dim;
    if (cdy_bind_names("input dim index", call->args, call->nargs, call->kwnames, s) ||
        !s[0] || s[0]->kind != TV_TENSOR || !cdy_const_int(s[1], &dim) || !li_index_tensor(tr, s[2]) ||
        li_val(tr, s[2])->meta.ndim > 1 || li_out_meta(tr, call, s[0], &m))
        return NULL;
    int n = li_val(tr, s[0])->meta.ndim;
    if (dim < 0)
        dim += n;
    if (n < 1 || dim < 0 || dim >= n || m.ndim != n)
        return NULL;
    int64_t code = (dim == 1 && n > 1 ? LI_ERR_DIM1 : LI_ERR_SELF) | dim << 8;
    return li_one(tr, call, s[0], (int)dim, s[2], &m, (int)dim, 1, code);
}

/* torch.gather / Tensor.gather (input, dim, index): index of input's rank,
 * the result its shape; out[.., i_dim, ..] = input[.., index[..], ..]. */
tvar *cdy_build_gather(tracer *tr, const cdy_build_call *call)
{
    tvar *s[8];
    cdy_meta m;
    long long dim;
    if (cdy_bind_names("input dim index sparse_grad", call->args, call->nargs, call->kwnames,
                       s) ||
        !s[0] || s[0]->kind != TV_TENSOR || !cdy_const_int(s[1], &dim) || !li_off(s[3]) ||
        !li_index_tensor(tr, s[2]) || li_out_meta(tr, call, s[0], &m))
        return NULL;
    const cdy_meta xm = li_val(tr, s[0])->meta, im = li_val(tr, s[2])->meta;
    if (dim < 0)
        dim += xm.ndim;
    if (xm.ndim < 1 || dim < 0 || dim >= xm.ndim || im.ndim != xm.ndim || m.ndim != xm.ndim)
        return NULL;
    return li_one(tr, call, s[0], (int)dim, s[2], &m, -1, 0, LI_ERR_GATHER | dim << 8);
}

/* torch.take_along_dim / Tensor.take_along_dim (input, indices, dim): with a
 * dim and no broadcast (indices of input's sizes but along dim) it is
 * torch.gather (eager gathers after broadcasting); else the extern. */
tvar *cdy_build_take_along_dim(tracer *tr, const cdy_build_call *call)
{
    tvar *s[8];
    cdy_meta m;
    long long dim;
    if (cdy_bind_names("input indices dim", call->args, call->nargs, call->kwnames, s) ||
        !s[0] || s[0]->kind != TV_TENSOR || !cdy_const_int(s[2], &dim) ||
        !li_index_tensor(tr, s[1]) || li_out_meta(tr, call, s[0], &m))
        return NULL;
    const cdy_meta xm = li_val(tr, s[0])->meta, im = li_val(tr, s[1])->meta;
    if (dim < 0)
        dim += xm.ndim;
    if (xm.ndim < 1 || dim < 0 || dim >= xm.ndim || im.ndim != xm.ndim || m.ndim != xm.ndim)
        return NULL;
    for (int d = 0; d < xm.ndim; d++)
        if ((d != dim && im.sizes[d] != xm.sizes[d]) || m.sizes[d] != im.sizes[d])
            return NULL;
    return li_one(tr, call, s[0], (int)dim, s[1], &m, -1, 0, LI_ERR_GATHER | dim << 8);
}

/* ---- x[index]: tensor indexing ------------------------------------------ */

/* One dim of x after the basic part of an index (ints, slices, None): a
 * plain dim (size, stride) or advanced (index tensor adv, over x's size and
 * stride there). */
typedef struct {
    int adv;                 /* index tensor number, or -1 */
    int64_t size, stride;
    int xd;                  /* x's dim it walks whole (all of it, in order), or -1 */
} li_dim;

typedef struct {
    int n;                   /* dims after the basic part */
    li_dim dims[CDY_MAX_NDIM];
    int64_t off;
    int nadv;
    const tvar *adv[LI_MAX_IDX];
    int advpos[LI_MAX_IDX];  /* their position in dims[] */
    unsigned pin;            /* x's dims an int or a partial slice reads the size of */
} li_basic;

/* Apply constant slice sl (Python semantics, step > 0) to a dim of size n
 * and stride st into *d, adding its start to *off; 0 or -1. */
static int li_slice(PyObject *sl, int64_t n, int64_t st, li_dim *d, int64_t *off)
{
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(sl, &start, &stop, &step) < 0) {
        PyErr_Clear();
        return -1;
    }
    if (step <= 0)
        return -1;
    PySliceObject *o = (PySliceObject *)sl;
    int whole = (o->start == Py_None || (PyLong_Check(o->start) && !PyLong_AsLong(o->start))) &&
                o->stop == Py_None && step == 1;
    Py_ssize_t len = PySlice_AdjustIndices((Py_ssize_t)n, &start, &stop, step);
    PyErr_Clear();
    d->xd = whole ? 0 : -1;   /* the caller sets the dim */
    d->adv = -1;
    d->size = len;
    d->stride = st * step;
    *off += len > 0 ? start * st : 0;
    return 0;
}

/* Items of getitem's index i into it[] (a tuple's items, or i itself); their count or -1. */
static int li_items(tvar *i, tvar **it)
{
    if (i->kind == TV_TUPLE) {
        if (i->n > CDY_MAX_NDIM + 4)
            return -1;
        memcpy(it, i->items, sizeof(tvar *) * (size_t)i->n);
        return i->n;
    }
    it[0] = i;
    return 1;
}

/* Walk getitem's index items over x (meta xm, load strides xs): ints
 * select, slices narrow, None adds a dim, Ellipsis skips, int tensors are
 * advanced.  Fills *b; 0, or -1 when an item is not one of these. */
static int li_basic_walk(tracer *tr, tvar **it, int n, const cdy_meta *xm, const int64_t *xs,
                         li_basic *b)
{
    int xd = 0, used = 0, ell = -1;
    for (int i = 0; i < n; i++) {
        if (it[i]->kind == TV_CONST && it[i]->obj == Py_Ellipsis) {
            if (ell >= 0)
                return -1;
            ell = i;
        } else if (!(it[i]->kind == TV_CONST && it[i]->obj == Py_None))
            used++;
    }
    if (used > xm->ndim)
        return -1;
    for (int i = 0; i < n; i++) {
        tvar *t = it[i];
        long long k;
        if (b->n >= CDY_MAX_NDIM)
            return -1;
        li_dim *d = &b->dims[b->n];
        if (t->kind == TV_CONST && t->obj == Py_Ellipsis) {
            for (int e = 0; e < xm->ndim - used; e++, xd++) {
                if (b->n >= CDY_MAX_NDIM)
                    return -1;
                b->dims[b->n++] = (li_dim){-1, xm->sizes[xd], xs[xd], xd};
            }
        } else if (t->kind == TV_CONST && t->obj == Py_None) {
            *d = (li_dim){-1, 1, 0, -1};
            b->n++;
        } else if (cdy_const_int(t, &k)) {
            if (k < 0)
                k += xm->sizes[xd];
            if (k < 0 || k >= xm->sizes[xd])
                return -1;
            b->pin |= 1u << xd;   /* the index's range and offset read the size */
            b->off += k * xs[xd++];
        } else if (t->kind == TV_CONST && PySlice_Check(t->obj)) {
            if (li_slice(t->obj, xm->sizes[xd], xs[xd], d, &b->off))
                return -1;
            d->xd = d->xd < 0 ? -1 : xd;
            b->pin |= d->xd < 0 ? 1u << xd : 0;   /* a part of the dim: its bounds read it */
            xd++;
            b->n++;
        } else if (li_index_tensor(tr, t) && b->nadv < LI_MAX_IDX) {
            *d = (li_dim){b->nadv, xm->sizes[xd], xs[xd], xd};
            xd++;
            b->advpos[b->nadv] = b->n;
            b->adv[b->nadv++] = t;
            b->n++;
        } else
            return -1;
    }
    for (; xd < xm->ndim; xd++) {
        if (b->n >= CDY_MAX_NDIM)
            return -1;
        b->dims[b->n++] = (li_dim){-1, xm->sizes[xd], xs[xd], xd};
    }
    return 0;
}

/* Broadcast sizes of the advanced index tensors into bs (rank *bn); 0 or -1. */
static int li_adv_shape(tracer *tr, const li_basic *b, int64_t *bs, int *bn)
{
    *bn = 0;
    for (int i = 0; i < b->nadv; i++) {
        const cdy_meta im = li_val(tr, b->adv[i])->meta;
        if (im.ndim > *bn) {
            memmove(bs + (im.ndim - *bn), bs, sizeof(int64_t) * (size_t)*bn);
            for (int d = 0; d < im.ndim - *bn; d++)
                bs[d] = 1;
            *bn = im.ndim;
        }
        for (int d = 0; d < im.ndim; d++) {
            int64_t *o = &bs[*bn - im.ndim + d], s = im.sizes[d];
            if (s != 1 && *o != 1 && s != *o)
                return -1;
            if (*o == 1)
                *o = s;
        }
    }
    return 0;
}

/* A CPU tensor of fake tensor f's sizes, strides and dtype (zeros for an
 * index: every index valid); new reference, or NULL (error set). */
static PyObject *li_cpu_twin(PyObject *torch, PyObject *f, int zero)
{
    PyObject *size = PyObject_CallMethod(f, "size", NULL);
    PyObject *stride = PyObject_CallMethod(f, "stride", NULL);
    PyObject *dtype = PyObject_GetAttrString(f, "dtype");
    PyObject *fn = PyObject_GetAttrString(torch, "empty_strided");
    PyObject *args = size && stride ? PyTuple_Pack(2, size, stride) : NULL;
    PyObject *kw = dtype ? Py_BuildValue("{s:O}", "dtype", dtype) : NULL;
    PyObject *t = fn && args && kw ? PyObject_Call(fn, args, kw) : NULL;
    Py_XDECREF(size);
    Py_XDECREF(stride);
    Py_XDECREF(dtype);
    Py_XDECREF(fn);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    if (t && zero) {
        PyObject *r = PyObject_CallMethod(t, "zero_", NULL);
        if (!r)
            Py_CLEAR(t);
        Py_XDECREF(r);
    }
    return t;
}

/* Strides eager's CPU kernel gives getitem's result, into m: torch's meta
 * kernel (which made m) orders the result's dims otherwise where strides tie
 * (a size-1 dim's stride, an index's layout), so the same getitem runs once
 * on CPU tensors of x's and the items' sizes and strides; *fake: the fake
 * result out restrided so (kept by the trace).  0, or -1 (error cleared, m
 * unchanged). */
static int li_cpu_strides(tracer *tr, PyObject *out, tvar *x, tvar **it, int n, cdy_meta *m,
                          PyObject **fake)
{
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *key = PyTuple_New(n), *cx = torch ? li_cpu_twin(torch, x->obj, 0) : NULL;
    int ok = torch && key && cx;
    for (int i = 0; i < n && ok; i++) {
        long long k;
        PyObject *o = it[i]->kind == TV_TENSOR ? li_cpu_twin(torch, it[i]->obj, 1)
                      : it[i]->kind == TV_CONST ? (Py_INCREF(it[i]->obj), it[i]->obj)
                      : cdy_const_int(it[i], &k) ? PyLong_FromLongLong(k) : NULL;
        ok = o != NULL;
        if (ok)
            PyTuple_SET_ITEM(key, i, o);
    }
    PyObject *r = ok ? PyObject_GetItem(cx, key) : NULL;
    PyObject *st = r ? PyObject_CallMethod(r, "stride", NULL) : NULL;
    ok = st && PyTuple_Check(st) && PyTuple_GET_SIZE(st) == m->ndim;
    int64_t v[CDY_MAX_NDIM];
    for (int d = 0; ok && d < m->ndim; d++) {
        v[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(st, d));
        ok = !(v[d] == -1 && PyErr_Occurred());
    }
    cdy_meta rm = *m;
    if (ok)
        memcpy(rm.strides, v, sizeof(int64_t) * (size_t)m->ndim);
    /* a fresh fake, not a view of out: the result owns its memory (an in-place
     * op on it must not find an alias it cannot re-derive) */
    *fake = ok ? cdy_fake_from_meta(tr, &rm) : NULL;
    ok = *fake != NULL;
    if (ok)
        *m = rm;
    Py_XDECREF(st);
    Py_XDECREF(r);
    Py_XDECREF(cx);
    Py_XDECREF(key);
    Py_XDECREF(torch);
    PyErr_Clear();
    return ok ? 0 : -1;
}

/* operator.getitem / Tensor.__getitem__ with one or two int64 / int32 index
 * tensors among ints, slices, None and Ellipsis: torch's advanced indexing
 * (indexed dims replaced by the indices' broadcast shape, in place when the
 * index tensors are adjacent, else first); negative indices wrap. */
tvar *cdy_build_getitem(tracer *tr, const cdy_build_call *call)
{
    tvar *it[CDY_MAX_NDIM + 4];
    cdy_meta m;
    if (call->nargs != 2 || call->kwnames || call->args[0]->kind != TV_TENSOR)
        return NULL;
    tvar *x = call->args[0];
    int n = li_items(call->args[1], it);
    if (n < 0 || li_out_meta(tr, call, x, &m))
        return NULL;
    const cdy_meta xm = li_val(tr, x)->meta;
    li_basic b = {0};
    li_gather gth = {0};
    int64_t xs[CDY_MAX_NDIM], bs[CDY_MAX_NDIM];
    int bn;
    li_map(tr, x->value, &gth.base, xs, &gth.off);
    if (li_basic_walk(tr, it, n, &xm, xs, &b) || b.nadv == 0 || li_adv_shape(tr, &b, bs, &bn))
        return NULL;
    int adjacent = b.nadv == 1 || b.advpos[1] == b.advpos[0] + 1;
    int p = adjacent ? b.advpos[0] : 0, od = 0;
    if (b.n - b.nadv + bn != m.ndim)
        return NULL;
    int64_t sizes[CDY_MAX_NDIM];
    signed char map[CDY_MAX_NDIM];
    for (int d = 0; d <= b.n; d++) {
        if (d == p)
            for (int e = 0; e < bn; e++, od++) {
                sizes[od] = bs[e];
                gth.st[od] = 0;
                map[od] = -2;
            }
        if (d == b.n || b.dims[d].adv >= 0)
            continue;
        sizes[od] = b.dims[d].size;
        map[od] = (signed char)b.dims[d].xd;
        gth.st[od++] = b.dims[d].stride;
    }
    for (int d = 0; d < m.ndim; d++)
        if (sizes[d] != m.sizes[d])
            return NULL;
    cdy_build_call cpu = *call;
    if (li_cpu_strides(tr, call->out, x, it, n, &m, &cpu.out))
        return NULL;
    gth.off += b.off;
    gth.k = b.nadv;
    signed char idim[CDY_SYM_MAX_GIDX] = {0};
    for (int i = 0; i < b.nadv; i++) {
        const li_dim *d = &b.dims[b.advpos[i]];
        int in = li_val(tr, b.adv[i])->meta.ndim;
        gth.gst[i] = d->stride;
        gth.gsz[i] = d->size;
        gth.code[i] = LI_ERR_INDEX | LI_WRAP | (int64_t)i << 8;   /* eager: its number */
        int whole = d->xd >= 0 && d->xd < xm.ndim && xm.sizes[d->xd] == d->size;
        idim[i] = (signed char)(whole ? d->xd + 1 : 0);   /* its range: x's dim (expanded too) */
        if (!whole && d->stride == 0 && d->size >= 2)   /* an expanded dim: a literal range */
            cdy_tr_pin(tr, x->value, d->xd >= 0 ? 1u << d->xd : ~0u, "an index into an expanded dim");
        if ((gth.idx[i] = li_index_value(tr, b.adv[i], &m, p + bn - in)) < 0)
            return NULL;
    }
    tvar *r = li_node(tr, &cpu, &m, &gth);
    if (r && r->kind == TV_TENSOR) {   /* its sizes: x's kept dims, the indices' broadcast */
        cdy_tr_pin(tr, x->value, b.pin, "an int or a partial slice of an indexed dim");
        cdy_tr_sym_gathered(tr, r->value, x->value, map, idim);
    }
    return r;
}
