/* layout.c - channels_last for the buffers the program never sees.
 *
 * The tracer gives every value eager's strides.  A convolution lowered to
 * channels_last (csrc/trace/build_conv.c) hands its consumers an NCHW copy
 * that reads a channels_last buffer: batch norm, relu and pooling fused
 * after it would then iterate NCHW while their loads jump by C elements,
 * and the next convolution's channels_last input would be a transpose of
 * the pooling result.  This pass runs before buffers are planned and gives
 * a node channels_last strides when
 *   - it is a 4-d pointwise node or a window node (kind 'W') whose meta is
 *     NCHW-contiguous,
 *   - its input (the first arg of its sizes; a window node's arg 0) is read
 *     through channels_last strides: a copy node's view strides or a
 *     buffer's meta, and
 *   - it is free: not a graph output, not an extern's argument, not the
 *     input of a reduction, row or cat node (their emitters read metas),
 *     and every view of it is an identity copy (strided_copy reading it
 *     with its own strides), whose view strides then follow; a copy that
 *     now has v's strides is v itself (an aliasing view: no kernel, and
 *     torch's contiguous() returns v when an extern needs it).
 * Values are visited in order, so a chain conv -> mul -> add -> relu ->
 * max_pool -> copy turns channels_last link by link.  Kernels index every
 * buffer by its meta, so the change is invisible in results. */
#include <string.h>

#include "compiler/cg.h"

/* 1 if strides st over 4-d sizes sz are dense channels_last (C > 1). */
static int lay_is_cl(const int64_t *sz, const int64_t *st)
{
    return sz[1] > 1 && st[1] == 1 && (sz[3] == 1 || st[3] == sz[1]) &&
           (sz[2] == 1 || st[2] == sz[1] * sz[3]) &&
           (sz[0] == 1 || st[0] == sz[1] * sz[2] * sz[3]);
}

/* 1 if meta m is 4-d and contiguous (NCHW), with C > 1 and H*W > 1. */
static int lay_is_nchw(const cdy_meta *m)
{
    return m->ndim == 4 && m->sizes[1] > 1 && m->sizes[2] * m->sizes[3] > 1 &&
           cdy_meta_contiguous(m);
}

/* 1 if view node u reads its base b element for element (same sizes,
 * strides equal to b's meta strides, offset 0). */
static int lay_identity_view(const cdy_graph *g, int u)
{
    const cdy_value *uv = &g->values[u];
    const cdy_meta *bm = &g->values[uv->view_base].meta;
    return !cg_view_is_alias(g, u) && uv->view_offset == 0 && uv->meta.ndim == bm->ndim &&
           !memcmp(uv->meta.sizes, bm->sizes, sizeof(int64_t) * (size_t)bm->ndim) &&
           !memcmp(uv->view_strides, bm->strides, sizeof(int64_t) * (size_t)bm->ndim);
}

/* Mark in pinned[] the values whose strides must stay eager's. */
static void lay_pin(const cdy_graph *g, char *pinned)
{
    for (int o = 0; o < g->noutputs; o++)
        pinned[g->outputs[o]] = 1;
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *val = &g->values[v];
        if (val->kind != CDY_VAL_NODE) {
            pinned[v] = 1;
            continue;
        }
        if ((cg_is_view(g, v) && !lay_identity_view(g, v)) || cg_is_gather(g, v))
            pinned[val->view_base] = 1;   /* read through strides fixed at trace time */
        char k = cdy_op_table[val->op].kind;
        if (cg_is_extern(g, v) || (cg_is_special(g, v) && k != 'W')) {
            pinned[v] |= cg_is_extern(g, v);
            for (int a = 0; a < val->nargs; a++)
                if (val->args[a] >= 0)
                    pinned[val->args[a]] = 1;
        }
    }
}

/* The strides node v's input is read through (see the header), or NULL. */
static const int64_t *lay_source(const cdy_graph *g, int v)
{
    const cdy_value *val = &g->values[v];
    int special = cg_is_special(g, v);
    for (int a = 0; a < val->nargs; a++) {
        int w = val->args[a];
        if (w < 0 || g->values[w].kind == CDY_VAL_SCALAR)
            continue;
        const cdy_value *wv = &g->values[w];
        if (!special && (wv->meta.ndim != 4 ||
                         memcmp(wv->meta.sizes, val->meta.sizes, sizeof(int64_t) * 4)))
            continue;
        if (wv->meta.ndim != 4)
            return NULL;
        return cg_is_view(g, w) && !cg_view_is_alias(g, w) ? wv->view_strides
                                                                         : wv->meta.strides;
    }
    return NULL;
}

/* Whether node v may turn channels_last: free, NCHW, read from channels_last. */
static int lay_wants_cl(const cdy_graph *g, const char *pinned, int v)
{
    const cdy_value *val = &g->values[v];
    if (pinned[v] || cg_is_view(g, v) || !lay_is_nchw(&val->meta) ||
        (cg_is_special(g, v) && cdy_op_table[val->op].kind != 'W'))
        return 0;
    const int64_t *src = lay_source(g, v);
    int a0 = val->args[0];
    const int64_t *ssz = cg_is_special(g, v) ? g->values[a0].meta.sizes : val->meta.sizes;
    return src && lay_is_cl(ssz, src);
}

/* Give the free nodes of c->g that read channels_last data channels_last
 * strides (c->g becomes an arena copy when any changes); 0 or -1. */
int cg_layout(cg_ctx *c)
{
    const cdy_graph *g0 = c->g;
    char *pinned = cdy_arena_alloc(&c->arena, (size_t)g0->nvalues + 1);
    if (!pinned)
        return cg_fail(c, "out of memory");
    memset(pinned, 0, (size_t)g0->nvalues + 1);
    lay_pin(g0, pinned);
    cdy_graph *g = NULL;
    for (int v = 0; v < g0->nvalues; v++) {
        if (!lay_wants_cl(g ? g : g0, pinned, v))
            continue;
        if (!g) {   /* copy on first change: the caller's graph stays as traced */
            g = cdy_arena_alloc(&c->arena, sizeof(cdy_graph));
            cdy_value *vals = cdy_arena_alloc(&c->arena, sizeof(cdy_value) * (size_t)g0->nvalues);
            if (!g || !vals)
                return cg_fail(c, "out of memory");
            memcpy(vals, g0->values, sizeof(cdy_value) * (size_t)g0->nvalues);
            *g = *g0;
            g->values = vals;
        }
        cdy_meta *m = &g->values[v].meta;
        int64_t old[4];
        memcpy(old, m->strides, sizeof old);
        m->strides[1] = 1;
        m->strides[3] = m->sizes[1];
        m->strides[2] = m->sizes[1] * m->sizes[3];
        m->strides[0] = m->strides[2] * m->sizes[2];
        for (int u = v + 1; u < g->nvalues; u++)   /* identity copies follow */
            if (cg_is_view(g, u) && g->values[u].view_base == v) {
                cdy_value *uv = &g->values[u];
                memcpy(uv->view_strides, m->strides, sizeof old);
                if (!memcmp(uv->meta.strides, m->strides, sizeof old))
                    cg_view_make_alias(g, u);   /* a copy into v's own layout: v itself */
            }
    }
    if (g)
        c->g = g;
    return 0;
}
