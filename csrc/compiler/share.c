/* share.c - a pointwise kernel's output written over an input that dies there.
 * (Also a column sum's stored producer, bfuse: reduce.c cg_red_store_once.)
 *
 * As torch.compile's wrapper reuses a dead buffer in place: when a pointwise
 * kernel reads a buffer at exactly the addresses it writes one of its outputs
 * (same meta, contiguous, same strides and offset in the kernel: element i
 * is loaded in the iteration that stores element i, and every load of an
 * iteration comes before its stores, cg_emit_body), and no later step of the
 * program touches that input, the output may take the input's memory
 * (cdy_plan.buffer_share).  The runtime (runtime/compiled.c plan_share)
 * makes the output the input's tensor when its own checks hold too (the
 * input a tensor made per call: by a kernel, or by a matmul extern; its
 * readers kernels or matmuls).  The pair's two pointer parameters are
 * declared without `restrict` (cg_share_param).  Static sizes only. */
#include <stdlib.h>
#include <string.h>
#include "cg.h"

/* 1 if buffers a and b of the plan have one meta, contiguous and of
 * nonzero size (every element at its own address). */
static int sh_same_dense(const cdy_plan *p, int a, int b)
{
    const cdy_meta *x = &p->buffers[a], *y = &p->buffers[b];
    if (x->ndim != y->ndim || x->dtype != y->dtype || !cdy_meta_contiguous(x) ||
        cdy_meta_numel(x) == 0)
        return 0;
    for (int d = 0; d < x->ndim; d++)
        if (x->sizes[d] != y->sizes[d] || (x->sizes[d] > 1 && x->strides[d] != y->strides[d]))
            return 0;
    return 1;
}

/* 1 if operands i (a load) and o (a store) of k walk the same addresses of
 * equal-meta buffers, and i's buffer is no other operand's. */
static int sh_ops_match(const cg_ctx *c, const kir_kernel *k, int i, int o)
{
    const cg_operand *in = &k->ops[i], *out = &k->ops[o];
    if (in->buffer < c->g->ninputs || out->buffer < c->g->ninputs || in->dtype != out->dtype ||
        in->offset || out->offset || in->sym_off || out->sym_off ||
        c->val_buf[in->value] != in->buffer || c->val_buf[out->value] != out->buffer ||
        !sh_same_dense(c->plan, in->buffer, out->buffer))
        return 0;
    for (int d = 0; d < k->grp.ndim; d++)
        if (in->stride[d] != out->stride[d])
            return 0;
    for (int p = 0; p < k->nops; p++)
        if (p != i && k->ops[p].buffer == in->buffer)
            return 0;
    return 1;
}

/* The one output operand of kernel k that may be written over an input, -2
 * for any of a pointwise kernel's, -1 none: a pointwise kernel (not a piece
 * or a plain copy), or a column sum storing its producer in one pass
 * (cg_red_store_once); no gather, index operand or status; static sizes. */
static int sh_kernel_out(const cg_ctx *c, const kir_kernel *k)
{
    int red = k->kind == CDY_KIR_REDUCE ? cg_red_store_once(k) : -1;
    if (c->sym || (k->kind != CDY_KIR_POINTWISE && red < 0) || k->piece >= 0 || k->nidx ||
        k->status || k->copy_unit || k->copy_row)
        return -1;
    for (int p = 0; p < k->nops; p++)
        if (cg_is_gather(c->g, k->ops[p].value))
            return -1;
    return red >= 0 ? red : -2;
}

/* Note in last[] that program step s touches value v's buffer (none: -1). */
static void sh_touch_value(const cg_ctx *c, int *last, int s, int v)
{
    if (v >= 0 && v < c->g->nvalues && c->val_buf[v] >= 0)
        last[c->val_buf[v]] = s;
}

/* last[b]: the last step of the program touching buffer b (a kernel's
 * operand, an extern's or view's argument or result), c->prog.n for graph
 * outputs and for the base of a view torch makes (its memory is seen through
 * the view after the base's last step), -1 for none. */
static void sh_last_steps(const cg_ctx *c, int *last)
{
    const cdy_graph *g = c->g;
    for (int s = 0; s < c->prog.n; s++) {
        const kir_kernel *k = &c->prog.k[s];
        if (k->kind == CDY_KIR_EXTERN || k->kind == CDY_KIR_VIEW) {
            const cdy_value *x = &g->values[k->node];
            for (int a = 0; a < x->nargs; a++)
                sh_touch_value(c, last, s, x->args[a]);
            sh_touch_value(c, last, s, k->node);
            continue;
        }
        for (int p = 0; p < k->nops; p++)
            if (k->ops[p].buffer >= 0)
                last[k->ops[p].buffer] = s;
    }
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *x = &g->values[v];
        if (cg_is_view(g, v) && cdy_value_is_alias(x))
            sh_touch_value(c, last, c->prog.n, x->view_base);
        if (cdy_value_is_alias(x))   /* an alias's own buffer shares memory we cannot see */
            sh_touch_value(c, last, c->prog.n, v);
    }
    for (int o = 0; o < g->noutputs; o++)
        sh_touch_value(c, last, c->prog.n, g->outputs[o]);
}

/* Pair one output of pointwise step s with an input dying there: sets
 * k->share_out / share_in and plan->buffer_share. */
static void sh_pair(cg_ctx *c, kir_kernel *k, int s, const int *last, const char *taken,
                    int only)
{
    for (int o = 0; o < k->nops; o++) {
        if (!k->ops[o].is_out || (only >= 0 && o != only) ||
            c->plan->buffer_share[k->ops[o].buffer] >= 0)
            continue;
        for (int i = 0; i < k->nops; i++) {
            int b = k->ops[i].buffer;
            if (k->ops[i].is_out || b < 0 || last[b] != s || taken[b] || !sh_ops_match(c, k, i, o))
                continue;
            k->share_out = o;
            k->share_in = i;
            c->plan->buffer_share[k->ops[o].buffer] = b;
            return;
        }
    }
}

int cg_share(cg_ctx *c, cdy_plan *plan)
{
    int nb = c->nbuffers;
    plan->buffer_share = malloc(sizeof(int) * ((size_t)nb + 1));
    int *last = cdy_arena_alloc(&c->arena, sizeof(int) * ((size_t)nb + 1));
    char *taken = cdy_arena_alloc(&c->arena, (size_t)nb + 1);
    if (!plan->buffer_share || !last || !taken)
        return cg_fail(c, "out of memory");
    for (int b = 0; b < nb; b++) {
        plan->buffer_share[b] = -1;
        last[b] = -1;
        taken[b] = 0;
    }
    sh_last_steps(c, last);
    for (int s = 0; s < c->prog.n; s++) {
        kir_kernel *k = &c->prog.k[s];
        k->share_out = k->share_in = -1;
        int only = sh_kernel_out(c, k);
        if (only == -1)
            continue;
        sh_pair(c, k, s, last, taken, only);
        if (k->share_in >= 0)
            taken[k->ops[k->share_in].buffer] = 1;
    }
    return 0;
}

int cg_share_param(const kir_kernel *k, int o)
{
    return k->share_in >= 0 && (o == k->share_in || o == k->share_out);
}
