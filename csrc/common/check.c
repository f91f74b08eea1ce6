/* check.c - consistency checks of a traced graph and of a compiled plan, run
 * at the stage boundaries (after tracing, before codegen, before the plan is
 * built into a library): a broken invariant found here becomes an internal
 * error with a reason (and aborts debug builds, see CDY_ASSERT), never a
 * crash further on. */
#include "cdynamo.h"

#include <stdio.h>

/* 1 if meta m is well formed (dtype, rank, sizes). */
static int meta_ok(const cdy_meta *m)
{
    if (m->dtype < 0 || m->dtype >= CDY_DT_COUNT || m->ndim < 0 || m->ndim > CDY_MAX_NDIM)
        return 0;
    for (int d = 0; d < m->ndim; d++)
        if (m->sizes[d] < 0)
            return 0;
    return 1;
}

/* Check node value v of g; 0, or -1 with the fault in err. */
static int node_check(const cdy_graph *g, int v, char *err, size_t errlen)
{
    const cdy_value *x = &g->values[v];
    if (x->op < 0 || x->op >= CDY_OP_COUNT || x->nargs < 0 || x->nargs > CDY_MAX_NODE_ARGS) {
        snprintf(err, errlen, "value %d: bad op %d or argument count %d", v, x->op, x->nargs);
        return -1;
    }
    for (int a = 0; a < x->nargs; a++)
        if (x->args[a] < 0 || x->args[a] >= v) {
            snprintf(err, errlen, "value %d (%s): argument %d is value %d, not an earlier one",
                     v, cdy_op_table[x->op].name, a, x->args[a]);
            return -1;
        }
    if (cdy_op_table[x->op].kind == 'V' &&
        (x->view_base < 0 || x->view_base >= v ||
         (g->values[x->view_base].kind == CDY_VAL_NODE &&
          cdy_value_is_alias(&g->values[x->view_base])))) {
        snprintf(err, errlen, "value %d (%s): bad view base %d", v, cdy_op_table[x->op].name,
                 x->view_base);
        return -1;
    }
    return 0;
}

int cdy_graph_check(const cdy_graph *g, char *err, size_t errlen)
{
    int ninputs = 0;
    if (g->nvalues < 0 || (g->nvalues > 0 && !g->values)) {
        snprintf(err, errlen, "no values");
        return -1;
    }
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *x = &g->values[v];
        if (x->kind == CDY_VAL_INPUT) {
            ninputs++;
            if (x->input_index < 0 || x->input_index >= g->ninputs) {
                snprintf(err, errlen, "value %d: input index %d of %d", v, x->input_index,
                         g->ninputs);
                return -1;
            }
        }
        else if (x->kind == CDY_VAL_NODE) {
            if (node_check(g, v, err, errlen))
                return -1;
        }
        else if (x->kind != CDY_VAL_SCALAR) {
            snprintf(err, errlen, "value %d: bad kind %d", v, x->kind);
            return -1;
        }
        if (!meta_ok(&x->meta)) {
            snprintf(err, errlen, "value %d: bad meta (dtype %d, ndim %d)", v, x->meta.dtype,
                     x->meta.ndim);
            return -1;
        }
    }
    if (ninputs != g->ninputs || g->noutputs < 0 || (g->noutputs > 0 && !g->outputs)) {
        snprintf(err, errlen, "%d input values for %d inputs, %d outputs", ninputs, g->ninputs,
                 g->noutputs);
        return -1;
    }
    for (int o = 0; o < g->noutputs; o++)
        if (g->outputs[o] < 0 || g->outputs[o] >= g->nvalues) {
            snprintf(err, errlen, "output %d is value %d of %d", o, g->outputs[o], g->nvalues);
            return -1;
        }
    return 0;
}

/* 1 if buffer number b is one of plan p's. */
static int buffer_ok(const cdy_plan *p, int b)
{
    return b >= 0 && b < p->nbuffers;
}

int cdy_plan_check(const cdy_plan *p, char *err, size_t errlen)
{
    if (p->ninputs < 0 || p->ninputs > p->nbuffers || p->nkernels < 0 || p->nsteps < 0 ||
        (p->nbuffers > 0 && !p->buffers)) {
        snprintf(err, errlen, "bad counts: %d inputs, %d buffers, %d kernels, %d steps",
                 p->ninputs, p->nbuffers, p->nkernels, p->nsteps);
        return -1;
    }
    for (int k = 0; k < p->nkernels; k++) {
        const cdy_kernel_desc *kd = &p->kernels[k];
        if (kd->nargs < 0 || kd->nargs > CDY_MAX_KARGS) {
            snprintf(err, errlen, "kernel %d: %d arguments", k, kd->nargs);
            return -1;
        }
        for (int a = 0; a < kd->nargs; a++)
            if (!buffer_ok(p, kd->args[a])) {
                snprintf(err, errlen, "kernel %d: argument %d is buffer %d of %d", k, a,
                         kd->args[a], p->nbuffers);
                return -1;
            }
    }
    for (int s = 0; s < p->nsteps; s++) {
        const cdy_step *st = &p->steps[s];
        int ok = st->kind == CDY_STEP_KERNEL ? st->index >= 0 && st->index < p->nkernels
                                             : st->kind == CDY_STEP_EXTERN &&
                                                   st->index >= 0 && st->index < p->nvalues &&
                                                   buffer_ok(p, st->out_buffer);
        if (!ok) {
            snprintf(err, errlen, "step %d: kind %d, index %d, buffer %d", s, st->kind,
                     st->index, st->out_buffer);
            return -1;
        }
    }
    for (int o = 0; o < p->noutputs; o++)
        if (!buffer_ok(p, p->outputs[o])) {
            snprintf(err, errlen, "output %d is buffer %d of %d", o, p->outputs[o],
                     p->nbuffers);
            return -1;
        }
    for (int b = 0; b < p->nbuffers; b++)
        if (!meta_ok(&p->buffers[b])) {
            snprintf(err, errlen, "buffer %d: bad meta", b);
            return -1;
        }
    for (int v = 0; p->value_buffer && v < p->nvalues; v++)
        if (p->value_buffer[v] < -1 || p->value_buffer[v] >= p->nbuffers) {
            snprintf(err, errlen, "value %d is buffer %d of %d", v, p->value_buffer[v],
                     p->nbuffers);
            return -1;
        }
    return 0;
}
