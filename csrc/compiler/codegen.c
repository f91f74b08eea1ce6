/* codegen.c - lower a graph to C kernels, through the kernel IR (kir.h).
 *
 * cdy_codegen: check the graph, number the buffers, then
 *   schedule  cut the graph into steps (cg_schedule): segments of pointwise
 *             nodes between boundaries, each grouped by iteration space; per
 *             group one kernel (cg_sched_pointwise: mark the live values, pick
 *             parameters, build a loop nest: order dims by the first output's
 *             strides, drop size-1 dims, coalesce; decide parallel, team,
 *             vectorized, streamed: cg_sched_loops); the special kinds' kernels
 *             by their schedulers; extern and view steps;
 *   print     ir_pre and ir_post from the graph and the IR;
 *   emit      per step its kind's emitter (a pointwise kernel: one C function
 *             that loads the inputs, recomputes every fused node per element
 *             and stores the outputs), and the plan's kernels and steps.
 * Every size and stride is a constant in the C text: a graph is specialised
 * to its inputs' meta, and guards check it; cdy_codegen_sym's kernels take
 * the sizes of symbolic dims at run time instead (symk.c).
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/cg.h"

/* The C expression templates of the pointwise ops, per dtype class of the
 * compute dtype (ops.def's tf ti tb tn columns: float, integer, bool, float
 * with a number arg 1).  Scalar parameters (a slope, a clamp bound, gelu's
 * mode) are literals, so GCC folds the tests on them. */
typedef struct {
    const char *flt, *integer, *boolean, *number;
} cg_template;

static const cg_template cg_templates[CDY_OP_COUNT] = {
#define CDY_PW(E, name, n, kind, flags, rule, to, sig, check, tf, ti, tb, tn, grad) \
    [CDY_OP_##E] = {tf, ti, tb, tn},
#include "ops/ops.def"
};

/* Write a formatted message into the caller's err buffer; returns -1. */
int cg_fail(cg_ctx *c, const char *fmt, ...)
{
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* A formatted string in the arena; NULL on out of memory. */
char *cg_strf(cg_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *s = cdy_arena_alloc(&c->arena, (size_t)n + 1);
    if (!s)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* Whether dt names a row of the dtype table. */
static int cg_dtype_ok(int dt)
{
    return dt >= 0 && dt < CDY_DT_COUNT;
}

/* Check a tensor meta's dtype, rank and sizes; 0 or -1 with a message. */
int cg_check_meta(cg_ctx *c, int v, const cdy_meta *m)
{
    if (!cg_dtype_ok(m->dtype))
        return cg_fail(c, "value %d: dtype %d is not supported", v, m->dtype);
    if (m->ndim < 0 || m->ndim > CDY_MAX_NDIM)
        return cg_fail(c, "value %d: ndim %d is not supported (max %d)", v,
                       m->ndim, CDY_MAX_NDIM);
    for (int d = 0; d < m->ndim; d++)
        if (m->sizes[d] < 0)
            return cg_fail(c, "value %d: negative size at dim %d", v, d);
    return 0;
}

/* Check that node v's sizes are the broadcast of its tensor args' sizes. */
static int cg_check_broadcast(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    const cdy_meta *m = &val->meta;
    for (int d = 0; d < m->ndim; d++) {
        int64_t want = 1;
        for (int a = 0; a < val->nargs; a++) {
            const cdy_value *arg = &c->g->values[val->args[a]];
            if (arg->kind == CDY_VAL_SCALAR)
                continue;
            int ad = d - (m->ndim - arg->meta.ndim);
            if (ad < 0)
                continue;
            int64_t s = arg->meta.sizes[ad];
            if (s == 1)
                continue;
            if (want != 1 && s != want)
                return cg_fail(c, "value %d (%s): arg sizes do not broadcast at dim %d",
                               v, cdy_op_table[val->op].name, d);
            want = s;
        }
        if (m->sizes[d] != want)
            return cg_fail(c, "value %d (%s): size %lld at dim %d is not the broadcast "
                           "of its args (%lld)", v, cdy_op_table[val->op].name,
                           (long long)m->sizes[d], d, (long long)want);
    }
    return 0;
}

/* 1 if node v is an extern op. */
int cg_is_extern(const cdy_graph *g, int v)
{
    return g->values[v].kind == CDY_VAL_NODE && cdy_op_table[g->values[v].op].kind == 'E';
}

/* 1 if node v is of a special kind (CG_SPECIAL_KINDS). */
int cg_is_special(const cdy_graph *g, int v)
{
    if (g->values[v].kind != CDY_VAL_NODE)
        return 0;
    switch (cdy_op_table[g->values[v].op].kind) {
#define CG_X(kind, check, emit) case kind:
    CG_SPECIAL_KINDS(CG_X)
#undef CG_X
        return 1;
    default:
        return 0;
    }
}

/* Check special node v: its meta, its args earlier in the graph (for every
 * kind), then its kind's checker; 0 or -1. */
static int cg_check_special(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    if (cg_check_meta(c, v, &val->meta))
        return -1;
    if (val->nargs < 0 || val->nargs > CDY_MAX_NODE_ARGS)
        return cg_fail(c, "value %d (%s): %d args", v, cdy_op_table[val->op].name, val->nargs);
    for (int a = 0; a < val->nargs; a++)
        if (val->args[a] < 0 || val->args[a] >= v)
            return cg_fail(c, "value %d (%s): arg %d is not earlier in the graph", v,
                           cdy_op_table[val->op].name, a);
    switch (cdy_op_table[val->op].kind) {
#define CG_X(kind, check, emit) case kind: return check(c, v);
    CG_SPECIAL_KINDS(CG_X)
#undef CG_X
    default:
        return cg_fail(c, "value %d: no checker for its kind", v);
    }
}

/* Schedule special node v with its kind's scheduler; 0 or -1. */
static int cg_sched_special(cg_ctx *c, int v)
{
    static const char kinds[] = "RNKW";
    static const int steps[] = {CDY_KIR_REDUCE, CDY_KIR_ROWS, CDY_KIR_CAT, CDY_KIR_WINDOW};
    const char *at = strchr(kinds, cdy_op_table[c->g->values[v].op].kind);
    if (c->sym && cg_sym_check_step(c, at ? steps[at - kinds] : CDY_KIR_CAT, v))
        return -1;
    switch (cdy_op_table[c->g->values[v].op].kind) {
#define CG_X(kind, check, sched) case kind: return sched(c, v);
    CG_SPECIAL_KINDS(CG_X)
#undef CG_X
    default:
        return cg_fail(c, "value %d: no scheduler for its kind", v);
    }
}

/* Check one node: op, arity, args earlier in the graph, dtypes, ranks. */
static int cg_check_node(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    if (val->op < 0 || val->op >= CDY_OP_COUNT)
        return cg_fail(c, "value %d: op %d is not supported", v, val->op);
    const cdy_op_info *oi = &cdy_op_table[val->op];
    if (oi->kind == 'E') {            /* run by torch: only its tensor args matter here */
        if (val->nargs < 0 || val->nargs > CDY_MAX_NODE_ARGS)
            return cg_fail(c, "value %d (extern): %d tensor args", v, val->nargs);
        for (int a = 0; a < val->nargs; a++)
            if (val->args[a] < 0 || val->args[a] >= v)
                return cg_fail(c, "value %d (extern): arg %d is not earlier in the graph", v, a);
        return cg_check_meta(c, v, &val->meta);
    }
    if (oi->kind == 'V')
        return cg_check_view(c, v);
    if (oi->kind == 'I')
        return cg_check_index(c, v);
    if (oi->kind == 'G')
        return cg_check_gather(c, v);
    if (oi->nargs >= 0 && val->nargs != oi->nargs)
        return cg_fail(c, "value %d (%s): %d args, expected %d", v, oi->name,
                       val->nargs, oi->nargs);
    if (cg_is_special(c->g, v))
        return cg_check_special(c, v);
    if (!cg_dtype_ok(val->compute_dtype))
        return cg_fail(c, "value %d (%s): compute dtype %d is not supported", v,
                       oi->name, val->compute_dtype);
    if (cg_check_meta(c, v, &val->meta))
        return -1;
    for (int a = 0; a < val->nargs; a++) {
        int av = val->args[a];
        if (av < 0 || av >= v)
            return cg_fail(c, "value %d (%s): arg %d refers to value %d (not earlier "
                           "in the graph)", v, oi->name, a, av);
        const cdy_value *arg = &c->g->values[av];
        if (arg->kind != CDY_VAL_SCALAR && arg->meta.ndim > val->meta.ndim)
            return cg_fail(c, "value %d (%s): arg %d has more dims than the result",
                           v, oi->name, a);
    }
    return cg_check_broadcast(c, v);
}

/* Check the whole graph and its outputs; 0 or -1 with a message. */
static int cg_check_graph(cg_ctx *c)
{
    const cdy_graph *g = c->g;
    if (g->nvalues < 0 || (g->nvalues > 0 && !g->values) || g->ninputs < 0 ||
        g->noutputs < 0 || (g->noutputs > 0 && !g->outputs))
        return cg_fail(c, "malformed graph");
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *val = &g->values[v];
        switch (val->kind) {
        case CDY_VAL_INPUT:
            if (val->input_index < 0 || val->input_index >= g->ninputs)
                return cg_fail(c, "value %d: input index %d out of range (%d inputs)",
                               v, val->input_index, g->ninputs);
            if (cg_check_meta(c, v, &val->meta))
                return -1;
            break;
        case CDY_VAL_SCALAR:
            if (!cg_dtype_ok(val->meta.dtype))
                return cg_fail(c, "value %d: scalar dtype %d is not supported", v,
                               val->meta.dtype);
            break;
        case CDY_VAL_NODE:
            if (cg_check_node(c, v))
                return -1;
            break;
        default:
            return cg_fail(c, "value %d: unknown kind %d", v, val->kind);
        }
    }
    for (int o = 0; o < g->noutputs; o++) {
        int v = g->outputs[o];
        if (v < 0 || v >= g->nvalues)
            return cg_fail(c, "output %d refers to value %d (out of range)", o, v);
        if (g->values[v].kind == CDY_VAL_SCALAR)
            return cg_fail(c, "output %d is a constant, not a tensor", o);
    }
    return 0;
}

/* 1 if v is a pointwise node that kernels would recompute (not realized, not
 * a view, not special or extern). */
static int cg_recomputed(const cdy_graph *g, const char *real, int v)
{
    return g->values[v].kind == CDY_VAL_NODE && !real[v] && !cg_is_view(g, v) &&
           !cg_is_special(g, v) && !cg_is_extern(g, v);
}

/* What a kernel recomputes to get v: the number of nodes (v and its
 * unrealized pointwise producers) in *nodes and of the realized values they
 * load in *leaves, each counted up to 8; stack/stamp: nvalues ints each. */
static void cg_recompute_cost(const cdy_graph *g, const char *real, int v, int *stack,
                              int *stamp, int *nodes, int *leaves)
{
    int top = 0;
    *nodes = *leaves = 0;
    stack[top++] = v;
    stamp[v] = v;
    while (top > 0 && *nodes < 8 && *leaves < 8) {
        const cdy_value *u = &g->values[stack[--top]];
        ++*nodes;
        for (int a = 0; a < u->nargs; a++) {
            int w = u->args[a];
            if (w < 0 || stamp[w] == v || g->values[w].kind == CDY_VAL_SCALAR)
                continue;
            stamp[w] = v;
            if (cg_recomputed(g, real, w))
                stack[top++] = w;
            else
                ++*leaves;
        }
    }
}

/* Realize the pointwise values that kernels would otherwise recompute at a
 * cost:
 *  - a value that a much larger iteration space reads through broadcasting
 *    and that takes two or more ops (batch norm's per-channel scale and
 *    shift): recomputing it per element of the consumer would repeat its
 *    work numel(consumer)/numel(value) times;
 *  - a value read by two or more nodes, one of them with a kernel of its own
 *    (a reduction, a row op...), whose recomputation loads three or more
 *    buffers: a residual stream x = x + f(x) through a stack of blocks,
 *    which every layer norm would otherwise recompute from the start;
 *  - a value read by two or more nodes whose recomputation loads eight or
 *    more buffers: the same stream into RMSNorm (x.pow(2).mean(), x * r:
 *    pointwise readers), which would otherwise make each norm's kernels load
 *    every earlier block's output (a 32-layer model: more than a kernel's
 *    CDY_MAX_KARGS parameters).
 * A small kernel computes such a value once into scratch memory. */
static int cg_realize_broadcast(cg_ctx *c, char *real)
{
    const cdy_graph *g = c->g;
    size_t nv = (size_t)g->nvalues + 1;
    int64_t *reader = cdy_arena_alloc(&c->arena, sizeof(int64_t) * nv);
    int *stack = cdy_arena_alloc(&c->arena, sizeof(int) * nv);
    int *stamp = cdy_arena_alloc(&c->arena, sizeof(int) * nv);
    int *nread = cdy_arena_alloc(&c->arena, sizeof(int) * nv);
    char *by_special = cdy_arena_alloc(&c->arena, nv);
    if (!reader || !stack || !stamp || !nread || !by_special)
        return cg_fail(c, "out of memory");
    for (size_t v = 0; v < nv; v++) {
        reader[v] = 0;
        stamp[v] = -1;
        nread[v] = 0;
        by_special[v] = 0;
    }
    for (int u = 0; u < g->nvalues; u++) {   /* the largest space that reads each value */
        const cdy_value *uv = &g->values[u];
        if (uv->kind != CDY_VAL_NODE || cg_is_view(g, u) || cg_is_extern(g, u))
            continue;
        int64_t work = cdy_meta_numel(&uv->meta);
        for (int a = 0; a < uv->nargs; a++) {
            int w = uv->args[a];
            int64_t n = w >= 0 && g->values[w].kind != CDY_VAL_SCALAR
                            ? cdy_meta_numel(&g->values[w].meta) : 0;
            work = n > work ? n : work;
        }
        for (int a = 0; a < uv->nargs; a++) {
            int w = uv->args[a];
            if (w < 0)
                continue;
            reader[w] = work > reader[w] ? work : reader[w];
            nread[w]++;
            by_special[w] |= (char)cg_is_special(g, u);
        }
    }
    for (int v = 0; v < g->nvalues; v++) {
        if (!cg_recomputed(g, real, v))
            continue;
        int nodes, leaves;
        cg_recompute_cost(g, real, v, stack, stamp, &nodes, &leaves);
        if ((reader[v] >= 4096 && cdy_meta_numel(&g->values[v].meta) * 8 <= reader[v] &&
             nodes >= 2) ||
            (nread[v] >= 2 && (leaves >= 8 || (by_special[v] && leaves >= 3))))
            real[v] = 1;
    }
    return 0;
}

/* Fill the plan's buffers and outputs.  Realized values get a buffer: the
 * inputs, extern results, reduction results, graph outputs and the tensors an extern reads;
 * every other node is recomputed inside the kernels that need it. */
static int cg_plan_buffers(cg_ctx *c, cdy_plan *plan)
{
    const cdy_graph *g = c->g;
    int nbuf = g->ninputs;
    char *real = cdy_arena_alloc(&c->arena, (size_t)g->nvalues + 1);
    if (!real)
        return cg_fail(c, "out of memory");
    for (int o = 0; o < g->noutputs; o++)
        real[g->outputs[o]] = 1;
    for (int v = 0; v < g->nvalues; v++)
        if (cg_is_special(g, v))
            real[v] = 1;
    for (int v = 0; v < g->nvalues; v++)
        if (cg_is_extern(g, v)) {
            real[v] = 1;
            for (int a = 0; a < g->values[v].nargs; a++)
                real[g->values[v].args[a]] = 1;
        }
    cg_view_mark_real(c, real);
    cg_index_mark_real(c, real);
    cg_gather_mark_real(c, real);
    if (cg_realize_broadcast(c, real))
        return -1;
    for (int v = 0; v < g->nvalues; v++)
        c->val_buf[v] = g->values[v].kind == CDY_VAL_NODE && real[v] ? nbuf++ : -1;
    plan->buffers = calloc((size_t)nbuf + 1, sizeof(cdy_meta));
    plan->outputs = calloc((size_t)g->noutputs + 1, sizeof(int));
    plan->value_buffer = calloc((size_t)g->nvalues + 1, sizeof(int));
    plan->buffer_alloc = calloc((size_t)nbuf + 1, 1);
    c->cap_steps = 4 * g->nvalues + 8;    /* kernels and externs together */
    plan->steps = calloc((size_t)c->cap_steps, sizeof(cdy_step));
    plan->kernels = calloc((size_t)c->cap_steps, sizeof(cdy_kernel_desc));
    if (!plan->buffers || !plan->outputs || !plan->value_buffer || !plan->buffer_alloc ||
        !plan->steps || !plan->kernels)
        return cg_fail(c, "out of memory");
    plan->nvalues = g->nvalues;
    plan->ninputs = g->ninputs;
    plan->nbuffers = c->nbuffers = nbuf;
    char *seen = cdy_arena_alloc(&c->arena, (size_t)g->ninputs + 1);
    if (!seen)
        return cg_fail(c, "out of memory");
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *val = &g->values[v];
        if (val->kind == CDY_VAL_INPUT) {
            if (seen[val->input_index])
                return cg_fail(c, "input index %d is used by two values", val->input_index);
            seen[val->input_index] = 1;
            c->val_buf[v] = val->input_index;
            plan->buffers[val->input_index] = val->meta;
        } else if (val->kind == CDY_VAL_NODE && c->val_buf[v] >= 0) {
            plan->buffers[c->val_buf[v]] = val->meta;
            plan->buffer_alloc[c->val_buf[v]] = !cg_is_extern(g, v) && !cg_view_is_alias(g, v);
        }
    }
    for (int v = 0; v < g->nvalues; v++)
        plan->value_buffer[v] = c->val_buf[v];
    for (int i = 0; i < g->ninputs; i++)
        if (!seen[i])
            return cg_fail(c, "graph input %d has no value", i);
    plan->noutputs = g->noutputs;
    for (int o = 0; o < g->noutputs; o++)
        plan->outputs[o] = c->val_buf[g->outputs[o]];
    return 0;
}

/* Whether two metas have the same rank and sizes (one iteration space). */
static int cg_same_sizes(const cdy_meta *a, int ndim, const int64_t *sizes)
{
    if (a->ndim != ndim)
        return 0;
    for (int d = 0; d < ndim; d++)
        if (a->sizes[d] != sizes[d])
            return 0;
    return 1;
}

/* The highest group (gid, -1: none) holding a realized value that node v
 * reads through the nodes it recomputes; stack: scratch of nvalues ints. */
static int cg_dep_group(cg_ctx *c, int v, const int *gid, int *stack, int *stamp)
{
    const cdy_graph *g = c->g;
    int top = 0, need = -1;
    stack[top++] = v;
    stamp[v] = v;
    while (top > 0) {
        int x = stack[--top], view = cg_is_view(g, x);
        const cdy_value *u = &g->values[x];
        if (u->kind != CDY_VAL_NODE)
            continue;
        int gather = !view && cg_is_gather(g, x);
        for (int a = 0; a < (view ? 1 : u->nargs + gather); a++) {
            /* a view loads its base; a gather its base and its index tensors */
            int w = view || a == u->nargs ? u->view_base : u->args[a];
            if (w < 0 || stamp[w] == v)
                continue;
            stamp[w] = v;
            if (c->val_buf[w] >= 0)
                need = gid[w] > need ? gid[w] : need;
            else
                stack[top++] = w;
        }
    }
    return need;
}

/* Group the realized pointwise nodes among values [lo, hi) by sizes, in
 * order: a node joins the first group of its sizes that comes no earlier
 * than every group it reads, so emitting the groups in order computes each
 * value before it is loaded.  Returns the number of groups (in *groups,
 * arena memory), or -1. */
static int cg_group_outputs(cg_ctx *c, int lo, int hi, cg_group **groups)
{
    const cdy_graph *g = c->g;
    size_t nv = (size_t)g->nvalues + 1;
    cg_group *gr = cdy_arena_alloc(&c->arena, sizeof(cg_group) * ((size_t)(hi - lo) + 1));
    int *gid = cdy_arena_alloc(&c->arena, sizeof(int) * nv);
    int *stack = cdy_arena_alloc(&c->arena, sizeof(int) * nv);
    int *stamp = cdy_arena_alloc(&c->arena, sizeof(int) * nv);
    if (!gr || !gid || !stack || !stamp)
        return cg_fail(c, "out of memory");
    for (size_t v = 0; v < nv; v++)
        gid[v] = stamp[v] = -1;
    int ng = 0;
    for (int v = lo; v < hi; v++) {
        const cdy_value *val = &g->values[v];
        if (val->kind != CDY_VAL_NODE || c->val_buf[v] < 0 || cg_is_extern(g, v) ||
            cg_is_special(g, v) || c->done[v] || cg_view_is_alias(g, v))
            continue;
        int k = cg_dep_group(c, v, gid, stack, stamp);
        k = k < 0 ? 0 : k;
        while (k < ng && !(cg_same_sizes(&val->meta, gr[k].ndim, gr[k].sizes) &&
                           cg_sym_same_dims(c, v, gr[k].outs[0])))
            k++;
        if (k == ng) {
            gr[k].ndim = val->meta.ndim;
            gr[k].sizes = val->meta.sizes;
            gr[k].outs = cdy_arena_alloc(&c->arena, sizeof(int) * (size_t)(hi - lo));
            if (!gr[k].outs)
                return cg_fail(c, "out of memory");
            ng++;
        }
        gr[k].outs[gr[k].nout++] = v;
        gid[v] = k;
    }
    *groups = gr;
    return ng;
}

/* 1 if v is loaded from a buffer by the current kernel (an input, an extern
 * result, or a value an earlier kernel realized). */
int cg_is_leaf(cg_ctx *c, int v)
{
    return c->val_buf[v] >= 0 && !c->in_group[v];
}

/* Mark in c->live every value the group's outputs depend on, down to leaves. */
void cg_mark_live(cg_ctx *c, const cg_group *grp)
{
    const cdy_graph *g = c->g;
    memset(c->live, 0, (size_t)g->nvalues);
    memset(c->in_group, 0, (size_t)g->nvalues);
    int top = 0;
    for (int i = 0; i < grp->nout; i++) {
        c->live[grp->outs[i]] = 1;
        c->in_group[grp->outs[i]] = 1;
        if (grp->outs[i] > top)
            top = grp->outs[i];
    }
    for (int v = top; v >= 0; v--) {
        const cdy_value *val = &g->values[v];
        if (!c->live[v] || val->kind != CDY_VAL_NODE || cg_is_leaf(c, v) || cg_is_view(g, v))
            continue;
        for (int a = 0; a < val->nargs; a++)
            c->live[val->args[a]] = 1;
    }
}

/* Strides of a tensor seen from an iteration space of rank ndim: dims align
 * from the right, a missing dim or a dim of size 1 has stride 0. */
void cg_broadcast_strides(const cdy_meta *m, int ndim, int64_t *out)
{
    int shift = ndim - m->ndim;
    for (int d = 0; d < ndim; d++) {
        int md = d - shift;
        out[d] = (md < 0 || m->sizes[md] == 1) ? 0 : m->strides[md];
    }
}

/* Collect the kernel's parameters: live inputs by buffer number, then the
 * outputs.  Sets c->param.  Returns the count, or -1. */
int cg_operands(cg_ctx *c, const cg_group *grp, cg_operand *ops)
{
    const cdy_graph *g = c->g;
    int n = 0, nbuffers = c->nbuffers;
    for (int b = 0; b < nbuffers; b++)
        c->param[b] = -1;
    for (int v = 0; v < g->nvalues; v++) {
        if (!c->live[v] || !cg_is_leaf(c, v))
            continue;
        c->param[c->val_buf[v]] = -2;         /* numbered below, in buffer order */
    }
    for (int b = 0; b < nbuffers; b++)
        if (c->param[b] == -2)
            c->param[b] = n++;
    n = 0;
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *val = &g->values[v];
        if (!c->live[v] || !cg_is_leaf(c, v))
            continue;
        int p = c->param[c->val_buf[v]];
        if (p >= CG_MAX_OPS)
            return cg_fail(c, "kernel needs more than %d parameters", CDY_MAX_KARGS);
        ops[p].buffer = c->val_buf[v];
        ops[p].value = v;
        ops[p].dtype = val->meta.dtype;
        ops[p].is_out = 0;
        cg_broadcast_strides(&val->meta, grp->ndim, ops[p].stride);
        ops[p].offset = 0;
        if (p + 1 > n)
            n = p + 1;
    }
    for (int v = 0; v < g->nvalues; v++) {
        if (!c->live[v] || cg_is_leaf(c, v) || !(cg_is_view(g, v) || cg_is_gather(g, v)))
            continue;
        if (n >= CG_MAX_OPS)
            return cg_fail(c, "kernel needs more than %d parameters", CDY_MAX_KARGS);
        cg_view_operand(c, grp, v, &ops[n]);
        c->vparam[v] = n++;
    }
    for (int i = 0; i < grp->nout; i++) {
        if (n >= CG_MAX_OPS)
            return cg_fail(c, "kernel needs more than %d parameters", CDY_MAX_KARGS);
        const cdy_value *val = &g->values[grp->outs[i]];
        ops[n].buffer = c->val_buf[grp->outs[i]];
        ops[n].value = grp->outs[i];
        ops[n].dtype = val->meta.dtype;
        ops[n].is_out = 1;
        cg_broadcast_strides(&val->meta, grp->ndim, ops[n].stride);
        ops[n].offset = 0;
        c->param[ops[n].buffer] = n;
        n++;
    }
    return n;
}

/* Index of the first output operand. */
int cg_first_out(const cg_operand *ops, int nops)
{
    int k = 0;
    while (k < nops && !ops[k].is_out)
        k++;
    return k;
}

/* Build the loop nest: dims of size 1 dropped, the rest ordered by the first
 * output's strides (largest outermost, ties by dim order), then adjacent
 * dims merged when every operand walks them as one. */
void cg_build_nest(const cg_group *grp, const cg_operand *ops, int nops, cg_nest *nest)
{
    int order[CDY_MAX_NDIM], n = 0;
    const cg_operand *first = &ops[cg_first_out(ops, nops)];
    memset(nest, 0, sizeof(*nest));
    for (int d = 0; d < grp->ndim; d++) {
        if (grp->sizes[d] == 0) {             /* empty: one loop that never runs */
            nest->ndim = 1;
            return;
        }
        if (grp->sizes[d] != 1)
            order[n++] = d;
    }
    for (int i = 1; i < n; i++) {             /* stable insertion sort, descending */
        int d = order[i], j = i;
        while (j > 0 && first->stride[order[j - 1]] < first->stride[d]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = d;
    }
    for (int i = 0; i < n; i++) {
        int d = order[i], k = nest->ndim;
        int merge = k > 0;
        for (int o = 0; o < nops && merge; o++)
            merge = nest->stride[o][k - 1] == ops[o].stride[d] * grp->sizes[d];
        if (merge) {
            nest->size[k - 1] *= grp->sizes[d];
            nest->gmask[k - 1] |= 1u << d;
            for (int o = 0; o < nops; o++)
                nest->stride[o][k - 1] = ops[o].stride[d];
        } else {
            nest->size[k] = grp->sizes[d];
            nest->gmask[k] = 1u << d;
            for (int o = 0; o < nops; o++)
                nest->stride[o][k] = ops[o].stride[d];
            nest->ndim++;
        }
    }
}

/* Append n levels of indentation. */
void cg_indent(cdy_buf *b, int n)
{
    for (int i = 0; i < n; i++)
        cdy_buf_puts(b, "    ");
}

/* Append operand o's terms in nest, " + "-separated: <var><d> * stride for
 * each loop d with a nonzero stride; *any says whether a term came before. */
void cg_offset_terms(cdy_buf *b, const cg_nest *nest, int o, char var, int *any)
{
    for (int d = 0; d < nest->ndim; d++) {
        int64_t s = nest->stride[o][d];
        if (s == 0)
            continue;
        cdy_buf_puts(b, *any ? " + " : "");
        if (nest->sym && nest->sstride[o][d] >= 0)
            cdy_buf_printf(b, "%c%d * st%s%d_%d", var, d, nest->pfx ? nest->pfx : "", o, d);
        else if (s == 1)
            cdy_buf_printf(b, "%c%d", var, d);
        else
            cdy_buf_printf(b, "%c%d * %lldLL", var, d, (long long)s);
        *any = 1;
    }
}

/* Append the element offset of operand o in the nest: sum of i_d * stride. */
static void cg_emit_offset(cdy_buf *b, const cg_nest *nest, int o)
{
    int any = 0;
    cg_offset_terms(b, nest, o, 'i', &any);
    if (!any)
        cdy_buf_puts(b, "0");
}

/* C literal for scalar value v (its own dtype, before any cast). */
char *cg_scalar_literal(cg_ctx *c, const cdy_value *val)
{
    if (!cdy_dtype_table[val->meta.dtype].is_float) {
        if (val->meta.dtype == CDY_DT_BOOL)
            return cg_strf(c, "%d", val->i != 0);
        if (val->i == INT64_MIN)
            return cg_strf(c, "(-9223372036854775807LL - 1)");
        return cg_strf(c, val->i < 0 ? "(%lldLL)" : "%lldLL", (long long)val->i);
    }
    double f = val->f;
    if (isnan(f))                       /* the sign of a NaN is kept, as torch's fill keeps it */
        return cg_strf(c, signbit(f) ? "(-NAN)" : "NAN");
    if (isinf(f))
        return cg_strf(c, f < 0 ? "(-INFINITY)" : "INFINITY");
    char tmp[40];
    snprintf(tmp, sizeof(tmp), "%.17g", f);
    const char *dot = strpbrk(tmp, ".e") ? "" : ".0";
    return cg_strf(c, signbit(f) ? "(%s%s)" : "%s%s", tmp, dot);
}

/* Expression e (dtype from) converted to dtype to (not bool).  A rounding
 * conversion (float64 to float32, float to an integer) goes through the
 * helpers cdy_rnd32 / cdy_toi32 / cdy_toi64 (mathlib.c), which GCC cannot
 * fold into a later widening: a float to a narrow int through int32, as
 * torch's conversions do (-1.0 -> 255 for uint8). */
static char *cg_convert(cg_ctx *c, const char *e, int from, int to)
{
    const cdy_dtype_info *fd = &cdy_dtype_table[from], *td = &cdy_dtype_table[to];
    if (cdy_dtype_lowp(to))
        return cg_strf(c, "%s((float)(%s))", to == CDY_DT_BFLOAT16 ? "cdy_rbf" : "cdy_rh", e);
    if (fd->is_float && to == CDY_DT_FLOAT32 && from != to && !cdy_dtype_lowp(from))
        return cg_strf(c, "cdy_rnd32(%s)", e);
    if (fd->is_float && to == CDY_DT_INT64)
        return cg_strf(c, "cdy_toi64(%s)", e);
    if (fd->is_float && to == CDY_DT_INT32)
        return cg_strf(c, "cdy_toi32(%s)", e);
    if (fd->is_float && td->is_int)
        return cg_strf(c, "(%s)cdy_toi32(%s)", td->cctype, e);
    return cg_strf(c, "(%s)(%s)", td->cctype, e);
}

const char *cg_ld(int dt)
{
    return dt == CDY_DT_BFLOAT16 ? "cdy_bf2f" : dt == CDY_DT_FLOAT16 ? "cdy_h2f" : "";
}

const char *cg_st(int dt)
{
    return dt == CDY_DT_BFLOAT16 ? "cdy_f2bf" : dt == CDY_DT_FLOAT16 ? "cdy_f2h" : "";
}

int cg_opmath(int cdt)
{
    return cdy_dtype_lowp(cdt) ? CDY_DT_FLOAT32 : cdt;
}

/* Expression for value v converted from dtype `from` to dtype `to`:
 * a cast to bool is a test against zero. */
char *cg_cast(cg_ctx *c, const char *e, int from, int to)
{
    if (from == to)
        return cg_strf(c, "%s", e);
    if (to == CDY_DT_BOOL)
        return cg_strf(c, "(%s != 0)", e);
    return cg_convert(c, e, from, to);
}

/* Name of value v inside the kernel body (input local, node local, literal). */
char *cg_value_expr(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    const char *se = val->kind == CDY_VAL_SCALAR ? cg_sym_scalar_text(c, v) : NULL;
    if (se)
        return cg_strf(c, "%s", se);
    if (val->kind == CDY_VAL_SCALAR)
        return cg_scalar_literal(c, val);
    if (cg_is_leaf(c, v))
        return cg_strf(c, "x%d", c->param[c->val_buf[v]]);
    return cg_strf(c, "t%d", v);
}

/* The dtype node val computes in (CDY_OPF_ARG_DTYPE: its arg 0's). */
static int cg_compute_dtype(cg_ctx *c, const cdy_value *val)
{
    if (cdy_op_has(val->op, CDY_OPF_ARG_DTYPE) && val->nargs > 0)
        return c->g->values[val->args[0]].meta.dtype;
    return val->compute_dtype;
}

/* The dtype arg a of node val (computing in ldt) is converted to before the
 * math: eager's TensorIterator casts a tensor operand to the common dtype, so
 * in bfloat16 / float16 an integer or float32 tensor rounds to it first; a
 * Python number reaches the float32 (opmath) math unrounded in mul / div and
 * the ops' parameters, rounded to the dtype in the CDY_OPF_LOWP_NUMBER ops (add,
 * sub, pow, remainder, fmod) and comparisons (checked against torch 2.13's kernels).
 * A 0-dim tensor as arg 1 of mul / div / div's rounding modes is read unrounded
 * too (CDY_OPF_OPMATH_SCALAR1: their reduced-float kernels take the scalar
 * operand's original value, BinaryOpsKernel.cpp); as arg 0 it rounds. */
static int cg_lowp_arg_dtype(cg_ctx *c, const cdy_value *val, int a, int ldt)
{
    if (!cdy_dtype_lowp(ldt))
        return ldt;
    const cdy_value *av = &c->g->values[val->args[a]];
    if (av->kind != CDY_VAL_SCALAR)
        return a == 1 && av->meta.ndim == 0 && cdy_op_has(val->op, CDY_OPF_OPMATH_SCALAR1)
                   ? CDY_DT_FLOAT32 : ldt;
    if (cdy_op_has(val->op, CDY_OPF_LOWP_NUMBER) || cdy_op_table[val->op].kind == 'C')
        return ldt;
    return CDY_DT_FLOAT32;
}

/* Pick the template of node val for compute dtype cdt; NULL if none.  A
 * number arg 1 takes the op's number template (pow's x * x, sqrt, 1 / x ...),
 * but a float16 result: eager's pow(Half, Scalar) is std::pow for every
 * exponent (PowKernel.cpp), so pow(-inf, 0.5) is inf there, not sqrt's NaN
 * (pow is the one op with a number template). */
static const char *cg_template_for(cg_ctx *c, const cdy_value *val, int cdt)
{
    const cg_template *t = &cg_templates[val->op];
    const cdy_dtype_info *di = &cdy_dtype_table[cdt];
    int number = di->is_float && t->number && val->nargs > 1 &&
                 c->g->values[val->args[1]].kind == CDY_VAL_SCALAR;
    if (number && val->meta.dtype == CDY_DT_FLOAT16)
        return "cdy_powf_h($0, $1)";
    if (number)
        return t->number;
    if (di->is_float)
        return t->flt;
    if (cdt == CDY_DT_BOOL)
        return t->boolean;
    return t->integer;
}

/* 1 if node val's GELU is eager's at +inf = inf (the template's $h): float16
 * where oneDNN has no float16 GELU (probed: cdy_gelu_f16_inf), and an input of
 * one element or not contiguous, which eager's gelu gives ATen's own kernel
 * (x/2 (1 + erf)); a contiguous one of more elements goes to oneDNN, whose
 * AVX-512 form gives NaN (use_mkldnn in Activation.cpp; float16 on AVX512-FP16). */
static int cg_gelu_inf(cg_ctx *c, const cdy_value *val, int ldt)
{
    if (ldt == CDY_DT_FLOAT16 && cdy_gelu_f16_inf())
        return 1;     /* no oneDNN float16 GELU here: ATen's kernel on every path */
    const cdy_meta *x = &c->g->values[val->args[0]].meta;
    return (ldt == CDY_DT_FLOAT32 || ldt == CDY_DT_BFLOAT16 || ldt == CDY_DT_FLOAT16) &&
           (cdy_meta_numel(x) <= 1 || !cdy_meta_contiguous(x));
}

/* Expand template t with args a[] of a node computed in compute_dtype into b;
 * inf: $h names the GELU that keeps +inf. */
static void cg_expand(cdy_buf *b, const char *t, const char *const *a, int compute_dtype, int inf)
{
    int f32 = compute_dtype == CDY_DT_FLOAT32;
    for (const char *p = t; *p; p++) {
        if (*p != '$' || !p[1]) {
            char ch[2] = {*p, 0};
            cdy_buf_puts(b, ch);
            continue;
        }
        p++;
        if (*p >= '0' && *p <= '2')
            cdy_buf_puts(b, a[*p - '0']);
        else if (*p == 'f')
            cdy_buf_puts(b, f32 ? "f" : "");
        else if (*p == 'v')
            cdy_buf_puts(b, f32 ? "cdy_v" : "");
        else if (*p == 'h')
            cdy_buf_puts(b, inf ? "_h" : "");
        else if (*p == 'T')
            cdy_buf_puts(b, cdy_dtype_table[compute_dtype].cctype);
    }
}

/* Append `T tV = <expression ex computed in dtype from>;` converted to v's dtype
 * (cg_convert): to bool is a test against zero. */
static void cg_emit_assign(cg_ctx *c, int v, const char *ex, int from, const char *tmpl)
{
    const cdy_value *val = &c->g->values[v];
    const cdy_op_info *oi = &cdy_op_table[val->op];
    int out = val->meta.dtype;
    const cdy_dtype_info *od = &cdy_dtype_table[out];
    cdy_buf_printf(&c->src, "%s t%d = ", od->cctype, v);
    if (out == CDY_DT_BOOL && from != CDY_DT_BOOL)
        cdy_buf_printf(&c->src, "(%s) != 0;", ex);
    else if (from == out && od->size >= 4)
        cdy_buf_printf(&c->src, "%s;", ex);
    else if (out == CDY_DT_BOOL && oi->kind != 'C' && strcmp(tmpl, "$0") != 0)
        cdy_buf_printf(&c->src, "(%s) != 0;", ex);   /* e.g. bool add: 1 + 1 */
    else if (from == out)
        cdy_buf_printf(&c->src, "(%s)(%s);", od->cctype, ex);
    else {
        char *cv = cg_convert(c, ex, from, out);
        cdy_buf_printf(&c->src, "%s;", cv ? cv : "0");
        if (!cv)
            cg_fail(c, "out of memory");
    }
}

/* Emit `T tV = <op expression>;` for node v at indentation ind. */
int cg_emit_node(cg_ctx *c, int v, int ind)
{
    if (cg_is_view(c->g, v))
        return cg_emit_view(c, v, ind);
    if (cdy_op_table[c->g->values[v].op].kind == 'K')
        return cg_emit_cat_value(c, v, ind);
    if (cdy_op_table[c->g->values[v].op].kind == 'I')
        return cg_emit_index(c, v, ind);
    if (cg_is_gather(c->g, v))
        return cg_emit_gather(c, v, ind);
    const cdy_value *val = &c->g->values[v];
    const cdy_op_info *oi = &cdy_op_table[val->op];
    int ldt = cg_compute_dtype(c, val), cdt = cg_opmath(ldt);
    const char *tmpl = cg_template_for(c, val, cdt);
    if (!tmpl)
        return cg_fail(c, "value %d: %s is not supported in dtype %s", v, oi->name,
                       cdy_dtype_table[cdt].name);
    const char *args[3] = {"", "", ""};
    for (int a = 0; a < val->nargs && a < 3; a++) {
        int av = val->args[a];
        int adt = c->g->values[av].meta.dtype;
        char *e = cg_value_expr(c, av);
        int mask = (a == 0 && cdy_op_has(val->op, CDY_OPF_MASK0)) ||
                   (a == 1 && cdy_op_has(val->op, CDY_OPF_MASK1));
        int to = mask ? CDY_DT_BOOL : cg_lowp_arg_dtype(c, val, a, ldt);
        args[a] = e ? cg_cast(c, e, adt, to) : NULL;
        if (!args[a])
            return cg_fail(c, "out of memory");
    }
    cdy_buf expr = {0};
    cg_expand(&expr, tmpl, args, cdt, val->op == CDY_OP_GELU && cg_gelu_inf(c, val, ldt));
    char *ex = cdy_buf_take(&expr);
    if (!ex)
        return cg_fail(c, "out of memory");
    cg_indent(&c->src, ind);
    cg_emit_assign(c, v, ex, oi->kind == 'C' ? CDY_DT_BOOL : cdt, tmpl);
    if (val->source_line > 0)
        cdy_buf_printf(&c->src, "  /* %s, line %d */\n", oi->name, val->source_line);
    else
        cdy_buf_printf(&c->src, "  /* %s */\n", oi->name);
    free(ex);
    return 0;
}

/* Emit the per-element body of pointwise kernel k: loads, the fused nodes in
 * order, stores (into the L1 blocks cdy_st<o>[stage] when stage is given, see
 * stream.c). */
static int cg_emit_body(cg_ctx *c, const kir_kernel *k, int ind, const char *stage)
{
    const cg_operand *ops = k->ops;
    const cg_nest *nest = k->nest;
    int nops = k->nops;
    for (int o = 0; o < nops; o++) {
        if (ops[o].is_out)
            continue;
        if (cg_is_gather(c->g, ops[o].value) && !cg_is_leaf(c, ops[o].value)) {
            cg_gather_emit_base(c, nest, o, ind);
            continue;
        }
        cg_indent(&c->src, ind);
        cdy_buf_printf(&c->src, "const %s x%d = %s(in_ptr%d[", cdy_dtype_table[ops[o].dtype].cctype,
                       o, cg_ld(ops[o].dtype), o);
        cg_emit_offset(&c->src, nest, o);
        cdy_buf_puts(&c->src, "]);\n");
    }
    for (int i = 0; i < k->nfused; i++)
        if (cg_emit_node(c, k->fused[i], ind))
            return -1;
    int first = cg_first_out(ops, nops);
    for (int o = first; o < nops; o++) {
        cg_indent(&c->src, ind);
        if (stage)
            cdy_buf_printf(&c->src, "cdy_st%d[%s", o - first, stage);
        else {
            cdy_buf_printf(&c->src, "out_ptr%d[", o - first);
            cg_emit_offset(&c->src, nest, o);
        }
        cdy_buf_printf(&c->src, "] = %s(t%d);\n", cg_st(ops[o].dtype), ops[o].value);
    }
    return 0;
}

/* Whether every operand walks the innermost loop with stride 0 or 1, and
 * every output with stride 1 (so the loop vectorizes). */
static int cg_inner_contiguous(const cg_operand *ops, int nops, const cg_nest *nest)
{
    int d = nest->ndim - 1;
    for (int o = 0; o < nops; o++) {
        int64_t s = nest->stride[o][d];
        if (s != 1 && (ops[o].is_out || s != 0))
            return 0;
    }
    return 1;
}

int64_t cg_moved(const cg_operand *ops, int nops, const cg_nest *nest, int64_t numel)
{
    int64_t bytes = 0;
    for (int o = 0; o < nops; o++) {
        int moves = 0;
        for (int d = 0; d < nest->ndim; d++)
            moves |= nest->stride[o][d] != 0;
        if (moves)
            bytes += cdy_dtype_table[ops[o].dtype].size;
    }
    return numel * bytes;
}

/* 1 if the parallel loop over nest collapses its two outer loops (a short
 * outer loop of a nest of three or more). */
static int cg_collapses(const cg_ctx *c, const cg_nest *nest)
{
    return nest->ndim >= 3 && nest->size[0] < 4 * (int64_t)c->nthreads;
}

/* Why kernel k runs on one thread (the rule that decided), or NULL: it runs
 * in parallel. */
static const char *cg_serial_why(const cg_ctx *c, const kir_kernel *k)
{
    if (k->nest->ndim == 0)
        return "one element";
    if (c->nthreads <= 1)
        return "generated for 1 thread";
    if (k->numel < CG_PARALLEL_NUMEL)
        return "elements below the threshold";
    if (k->nfused <= CG_PARALLEL_CHEAP_OPS && k->moved < CG_PARALLEL_BYTES)
        return "a cheap kernel moving fewer bytes than the threshold";
    return NULL;
}

/* 1 if kernel k streams its stores (stream.c): every output contiguous along
 * the innermost loop, which in a nest of several loops is at least
 * CG_STREAM_ROW bytes of each output; no gathers (their checks end per row);
 * more than the threshold moved. */
static int cg_loops_stream(const cg_ctx *c, const kir_kernel *k)
{
    const cg_nest *nest = k->nest;
    int last = nest->ndim - 1;
    if (last < 0 || k->status)
        return 0;
    for (int o = cg_first_out(k->ops, k->nops); o < k->nops; o++) {
        int64_t size = cdy_dtype_table[k->ops[o].dtype].size;
        if (nest->stride[o][last] != 1 || (last > 0 && nest->size[last] * size < CG_STREAM_ROW))
            return 0;
    }
    return cg_streams(c, k->moved);
}

void cg_sched_loops(cg_ctx *c, kir_kernel *k)
{
    k->moved = cg_moved(k->ops, k->nops, k->nest, k->numel);
    k->serial = cg_serial_why(c, k);
    k->parallel = k->serial == NULL;
    k->threads = "NTHREADS";   /* the whole team (cg.h: no team cut to a kernel's bytes) */
    k->collapse = cg_collapses(c, k->nest);
    k->vector = k->nest->ndim > 0 && cg_inner_contiguous(k->ops, k->nops, k->nest);
    k->status = cg_kernel_gathers(c);
    k->stream = cg_loops_stream(c, k);
    if (k->piece < 0)
        cg_view_sched_copy(c, k);
}

void cg_ir_stream(cg_ctx *c, cdy_buf *b, const kir_kernel *k)
{
    if (k->stream)
        cg_stream_ir(c, b, k->moved);
}

/* Elements per L1 block of a streaming flat loop: CG_STREAM_STAGE bytes over
 * the outputs' element sizes, a power of two in [64, 1024]. */
static int cg_stage_elems(const cg_operand *ops, int nops)
{
    int64_t per = 0;
    for (int o = cg_first_out(ops, nops); o < nops; o++)
        per += cdy_dtype_table[ops[o].dtype].size;
    int n = 1024;
    while (n > 64 && n * per > CG_STREAM_STAGE)
        n /= 2;
    return n;
}

/* Emit the stores of a streamed block: each output's cdy_st<o> to where the
 * innermost loop variable, i<last>, is sb. */
static void cg_emit_stream_calls(cg_ctx *c, const cg_operand *ops, int nops,
                                 const cg_nest *nest, int ind)
{
    int first = cg_first_out(ops, nops), last = nest->ndim - 1;
    for (int o = first; o < nops; o++) {
        cg_indent(&c->src, ind);
        cdy_buf_printf(&c->src, "{ const int64_t i%d = sb; cdy_stream(&out_ptr%d[", last,
                       o - first);
        cg_emit_offset(&c->src, nest, o);
        cdy_buf_printf(&c->src, "], cdy_st%d, (se - sb) * (int64_t)sizeof(cdy_st%d[0])); }\n",
                       o - first, o - first);
    }
}

/* Emit the opening of a flat loop over n elements in blocks of CG_BLOCK:
 * `for (ib ...) {` and the block's bounds lo, hi. */
static void cg_emit_blocks_open(cdy_buf *b, int64_t n)
{
    cdy_buf_printf(b, "    for (int64_t ib = 0; ib < %lldLL; ib++) {\n"
                      "        const int64_t lo = ib * %dLL;\n"
                      "        const int64_t hi = lo + %dLL < %lldLL ? lo + %dLL : %lldLL;\n",
                   (long long)((n + CG_BLOCK - 1) / CG_BLOCK), CG_BLOCK, CG_BLOCK,
                   (long long)n, CG_BLOCK, (long long)n);
}

/* cg_emit_blocks_open for the size of loop 0 of nest (a runtime size n0 when
 * symbolic). */
static void cg_emit_blocks_open_nest(cdy_buf *b, const cg_nest *nest)
{
    if (!nest->sym || nest->ssize[0] < 0) {
        cg_emit_blocks_open(b, nest->size[0]);
        return;
    }
    cdy_buf_printf(b, "    for (int64_t ib = 0; ib < (n0 + %dLL) / %dLL; ib++) {\n"
                      "        const int64_t lo = ib * %dLL;\n"
                      "        const int64_t hi = lo + %dLL < n0 ? lo + %dLL : n0;\n",
                   CG_BLOCK - 1, CG_BLOCK, CG_BLOCK, CG_BLOCK, CG_BLOCK);
}

/* Emit kernel k's flat loop over its elements in blocks of CG_BLOCK (the
 * parallel loop when it is parallel) whose stores go through L1 blocks of
 * cg_stage_elems written by cdy_stream, then the fence; 0 or -1. */
static int cg_emit_flat_stream(cg_ctx *c, const kir_kernel *k)
{
    cdy_buf *b = &c->src;
    const cg_operand *ops = k->ops;
    int nops = k->nops, se = cg_stage_elems(ops, nops), first = cg_first_out(ops, nops);
    if (k->parallel)
        cg_stream_open(c, 1, k->threads, "", 1);
    cg_emit_blocks_open(b, k->nest->size[0]);
    cdy_buf_printf(b, "        for (int64_t sb = lo; sb < hi; sb += %d) {\n"
                      "            const int64_t se = sb + %d < hi ? sb + %d : hi;\n", se, se, se);
    for (int o = first; o < nops; o++)
        cdy_buf_printf(b, "            %s cdy_st%d[%d] __attribute__((aligned(64)));\n",
                       cdy_dtype_table[ops[o].dtype].ctype, o - first,
                       se);
    cdy_buf_puts(b, "            #pragma GCC ivdep\n"
                    "            for (int64_t i0 = sb; i0 < se; i0++) {\n");
    if (cg_emit_body(c, k, 4, "i0 - sb"))
        return -1;
    cdy_buf_puts(b, "            }\n");
    cg_emit_stream_calls(c, ops, nops, k->nest, 3);
    cdy_buf_puts(b, "        }\n    }\n");
    cg_stream_close(c, 1, k->parallel);
    return 0;
}

/* Emit kernel k's nest of several loops whose innermost one stores through L1
 * blocks (at most cg_stage_elems long) written by cdy_stream, the outer loop
 * parallel when it is parallel, then the fence; 0 or -1. */
static int cg_emit_nest_stream(cg_ctx *c, const kir_kernel *k)
{
    cdy_buf *b = &c->src;
    const cg_operand *ops = k->ops;
    const cg_nest *nest = k->nest;
    int nops = k->nops, last = nest->ndim - 1, ind = 1, first = cg_first_out(ops, nops);
    long long m = (long long)nest->size[last];
    int blk = cg_stage_elems(ops, nops);
    blk = m < blk ? (int)m : blk;
    if (k->parallel)
        cg_stream_open(c, 1, k->threads, k->collapse ? " collapse(2)" : "", 1);
    for (int d = 0; d < last; d++, ind++) {
        cg_indent(b, ind);
        cdy_buf_printf(b, "for (int64_t i%d = 0; i%d < %lldLL; i%d++) {\n", d, d,
                       (long long)nest->size[d], d);
    }
    cg_indent(b, ind);
    cdy_buf_printf(b, "for (int64_t sb = 0; sb < %lldLL; sb += %d) {\n", m, blk);
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "const int64_t se = sb + %d < %lldLL ? sb + %d : %lldLL;\n", blk, m, blk,
                   m);
    for (int o = first; o < nops; o++) {
        cg_indent(b, ind + 1);
        cdy_buf_printf(b, "%s cdy_st%d[%d] __attribute__((aligned(64)));\n",
                       cdy_dtype_table[ops[o].dtype].ctype, o - first,
                       blk);
    }
    if (k->vector) {
        cg_indent(b, ind + 1);
        cdy_buf_puts(b, "#pragma GCC ivdep\n");
    }
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "for (int64_t i%d = sb; i%d < se; i%d++) {\n", last, last, last);
    const char *stage = cg_strf(c, "i%d - sb", last);
    if (!stage)
        return cg_fail(c, "out of memory");
    if (cg_emit_body(c, k, ind + 2, stage))
        return -1;
    cg_indent(b, ind + 1);
    cdy_buf_puts(b, "}\n");
    cg_emit_stream_calls(c, ops, nops, nest, ind + 1);
    for (; ind > 0; ind--) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n");
    }
    cg_stream_close(c, 1, k->parallel);
    return 0;
}

/* Emit the loop nest around the body; a flat parallel loop is split into
 * blocks so each thread gets contiguous chunks. */
int cg_emit_loops(cg_ctx *c, const kir_kernel *k)
{
    cdy_buf *b = &c->src;
    const cg_nest *nest = k->nest;
    int par = k->parallel, ind = 1;
    if (nest->ndim == 0) {
        cdy_buf_puts(b, "    {\n");
        cg_gather_emit_flags(c, 2);
        if (cg_emit_body(c, k, 2, NULL))
            return -1;
        cg_gather_emit_report(c, 2);
        cdy_buf_puts(b, "    }\n");
        return 0;
    }
    if (k->stream)
        return nest->ndim == 1 ? cg_emit_flat_stream(c, k) : cg_emit_nest_stream(c, k);
    if (par && nest->ndim == 1) {
        cg_stream_open(c, 1, k->threads, "", 0);
        cg_emit_blocks_open_nest(b, nest);
        cg_gather_emit_flags(c, 2);
        if (k->vector)
            cdy_buf_puts(b, "        #pragma GCC ivdep\n");
        cdy_buf_puts(b, "        for (int64_t i0 = lo; i0 < hi; i0++) {\n");
        if (cg_emit_body(c, k, 3, NULL))
            return -1;
        cdy_buf_puts(b, "        }\n");
        cg_gather_emit_report(c, 2);
        cdy_buf_puts(b, "    }\n");
        return 0;
    }
    for (int d = 0; d < nest->ndim; d++, ind++) {
        if (d == 0 && par)
            cg_stream_open(c, ind, k->threads, k->collapse ? " collapse(2)" : "", 0);
        if (d == nest->ndim - 1)
            cg_gather_emit_flags(c, ind);
        if (d == nest->ndim - 1 && k->vector) {
            cg_indent(b, ind);
            cdy_buf_puts(b, "#pragma GCC ivdep\n");
        }
        cg_indent(b, ind);
        cdy_buf_printf(b, "for (int64_t i%d = 0; i%d < %s; i%d++) {\n", d, d,
                       cg_sym_size_text(c, nest, d), d);
    }
    if (cg_emit_body(c, k, ind, NULL))
        return -1;
    for (int inner = 1; --ind > 0; inner = 0) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n");
        if (inner)
            cg_gather_emit_report(c, ind);
    }
    return 0;
}

/* Emit the kernel mark (CDY_CC_KERNEL_MARK), the gather helper when kernel k
 * gathers, the comment naming the fused ops and outputs. */
void cg_emit_mark(cg_ctx *c, const kir_kernel *k)
{
    cdy_buf *b = &c->src;
    const cg_nest *nest = k->nest;
    cdy_buf_puts(b, "\n" CDY_CC_KERNEL_MARK);
    if (k->status)
        cdy_buf_puts(b, cg_gather_helper);
    cdy_buf_puts(b, "/* fused:");
    for (int i = 0; i < k->nfused; i++)
        cdy_buf_printf(b, "%s %s", i ? "," : "", cdy_op_table[c->g->values[k->fused[i]].op].name);
    cdy_buf_puts(b, "  (outputs:");
    for (int i = 0; i < k->grp.nout; i++)
        cdy_buf_printf(b, "%s buf%d", i ? "," : "", c->val_buf[k->grp.outs[i]]);
    cdy_buf_puts(b, ")\n * loops:");
    for (int d = 0; d < nest->ndim; d++)
        cdy_buf_printf(b, " %lld", (long long)nest->size[d]);
    if (nest->ndim == 0)
        cdy_buf_puts(b, " none (one element)");
    cdy_buf_puts(b, " */\n");
}

/* Emit kernel k's signature and opening lines: the symbolic sizes' locals,
 * then the operands' offsets added to their pointers.  With part set, a
 * static helper kernel_<number>_<part> of the same parameters instead, which
 * the kernel calls with its pointers already offset (no offsets added). */
void cg_emit_signature(cg_ctx *c, const kir_kernel *k, const char *part)
{
    cg_emit_signature_x(c, k, part, "");
}

void cg_emit_signature_x(cg_ctx *c, const kir_kernel *k, const char *part, const char *extra)
{
    cdy_buf *b = &c->src;
    const cg_operand *ops = k->ops;
    int nops = k->nops;
    const char *ret = k->status ? "int" : "void";
    if (part)
        cdy_buf_printf(b, "static __attribute__((noinline)) %s kernel_%d_%s(", ret, k->number,
                       part);
    else
        cdy_buf_printf(b, "CDY_EXPORT %s kernel_%d(", ret, k->number);
    int first = cg_first_out(ops, nops);
    for (int o = 0; o < nops; o++) {
        const char *ct = cdy_dtype_table[ops[o].dtype].ctype;
        if (o)
            cdy_buf_puts(b, ", ");
        const char *rs = cg_share_param(k, o) ? "" : "restrict ";
        if (ops[o].is_out)
            cdy_buf_printf(b, "%s *%sout_ptr%d", ct, rs, o - first);
        else
            cdy_buf_printf(b, "const %s *%sin_ptr%d", ct, rs, o);
    }
    cdy_buf_puts(b, k->status ? ", int64_t *restrict cdy_err" : "");
    cdy_buf_puts(b, c->sym ? ", const int64_t *restrict cdy_s" : "");
    cdy_buf_printf(b, "%s)\n{\n", extra);
    if (c->sym)
        cg_sym_emit_locals(c, k);
    for (int o = 0; o < nops && !part; o++)
        if (ops[o].sym_off && c->sym)
            cdy_buf_printf(b, "    %s_ptr%d += %s;\n", o < first ? "in" : "out",
                           o < first ? o : o - first, cg_sym_expr_text(c, ops[o].sym_off - 1));
        else if (ops[o].offset)
            cdy_buf_printf(b, "    %s_ptr%d += %lldLL;\n", o < first ? "in" : "out",
                           o < first ? o : o - first, (long long)ops[o].offset);
}

/* Emit the kernel mark, the comment and the signature of kernel k. */
void cg_emit_header(cg_ctx *c, const kir_kernel *k)
{
    cg_emit_mark(c, k);
    cg_emit_signature(c, k, NULL);
}

/* ---- IR dumps: text for the debug directory and the fusion log ---------- */

/* Append "[a, b, c]" for n sizes. */
void cg_ir_dims(cdy_buf *b, const int64_t *a, int n)
{
    cdy_buf_puts(b, "[");
    for (int d = 0; d < n; d++)
        cdy_buf_printf(b, "%s%lld", d ? ", " : "", (long long)a[d]);
    cdy_buf_puts(b, "]");
}

/* Append value v as an operand: %N for tensors, the literal for scalars. */
static void cg_ir_operand(cg_ctx *c, cdy_buf *b, int v)
{
    const cdy_value *val = &c->g->values[v];
    if (val->kind != CDY_VAL_SCALAR) {
        cdy_buf_printf(b, "%%%d", v);
        return;
    }
    char *lit = cg_scalar_literal(c, val);
    cdy_buf_puts(b, lit ? lit : "?");
}

/* Write the pre-fusion IR: every graph node as its own elementwise loop. */
static void cg_ir_pre(cg_ctx *c)
{
    const cdy_graph *g = c->g;
    cdy_buf *b = &c->ir_pre;
    cdy_buf_printf(b, "# loop IR before fusion: one elementwise loop per graph node; "
                      "%%N is value N of graph.txt\n");
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *val = &g->values[v];
        if (val->kind == CDY_VAL_INPUT) {
            cdy_buf_printf(b, "%%%d = input %d : %s", v, val->input_index,
                           cdy_dtype_table[val->meta.dtype].name);
            cg_ir_dims(b, val->meta.sizes, val->meta.ndim);
            cdy_buf_puts(b, " strides ");
            cg_ir_dims(b, val->meta.strides, val->meta.ndim);
            cdy_buf_puts(b, "\n");
        } else if (val->kind == CDY_VAL_NODE) {
            cdy_buf_printf(b, "%%%d = %s(", v, cdy_op_table[val->op].name);
            for (int a = 0; a < val->nargs; a++) {
                cdy_buf_puts(b, a ? ", " : "");
                cg_ir_operand(c, b, val->args[a]);
            }
            cdy_buf_printf(b, ") over ");
            cg_ir_dims(b, val->meta.sizes, val->meta.ndim);
            cdy_buf_printf(b, " : %s (compute %s)", cdy_dtype_table[val->meta.dtype].name,
                           cdy_dtype_table[val->compute_dtype].name);
            if (val->source_line > 0)
                cdy_buf_printf(b, "  # line %d", val->source_line);
            cdy_buf_puts(b, "\n");
        }
    }
    cdy_buf_puts(b, "outputs:");
    for (int o = 0; o < g->noutputs; o++)
        cdy_buf_printf(b, "%s %%%d", o ? "," : "", g->outputs[o]);
    cdy_buf_puts(b, "\n");
}

/* Append operand o's C name, plan buffer and graph value: "in_ptr0 = buf0 (%0)". */
void cg_ir_param(cdy_buf *b, const cg_operand *ops, int nops, int o)
{
    int first = cg_first_out(ops, nops);
    if (ops[o].is_out)
        cdy_buf_printf(b, "out_ptr%d = buf%d (%%%d)", o - first, ops[o].buffer, ops[o].value);
    else
        cdy_buf_printf(b, "in_ptr%d = buf%d (%%%d)", o, ops[o].buffer, ops[o].value);
}

/* Append why kernel k's inner loop is or is not vectorized (k->vector). */
static void cg_ir_vector(cdy_buf *b, const kir_kernel *k)
{
    const cg_nest *nest = k->nest;
    if (nest->ndim == 0) {
        cdy_buf_puts(b, "  vectorized: no: no loop (one element)\n");
        return;
    }
    int d = nest->ndim - 1;
    if (k->vector) {
        cdy_buf_printf(b, "  vectorized: yes: inner loop (%lld elements) has unit or zero "
                          "stride for every operand (#pragma GCC ivdep, gcc -O3)\n",
                       (long long)nest->size[d]);
        return;
    }
    cdy_buf_printf(b, "  vectorized: no: non-unit stride inner loop (%lld elements):",
                   (long long)nest->size[d]);
    int n = 0;
    for (int o = 0; o < k->nops; o++) {
        int64_t s = nest->stride[o][d];
        if (s == 1 || (!k->ops[o].is_out && s == 0))
            continue;
        cdy_buf_puts(b, n++ ? "," : "");
        cdy_buf_puts(b, " ");
        cg_ir_param(b, k->ops, k->nops, o);
        cdy_buf_printf(b, " stride %lld", (long long)s);
    }
    cdy_buf_puts(b, "\n");
}

/* Append whether kernel k runs on several threads and why (k->parallel). */
static void cg_ir_parallel(cg_ctx *c, cdy_buf *b, const kir_kernel *k)
{
    if (!k->parallel)
        cdy_buf_printf(b, "  parallel: no: %s (%lld elements; thresholds %d elements, %d bytes "
                          "for kernels of <= %d ops)\n", k->serial, (long long)k->numel,
                       CG_PARALLEL_NUMEL, CG_PARALLEL_BYTES, CG_PARALLEL_CHEAP_OPS);
    else {
        if (k->nest->ndim == 1)
            cdy_buf_printf(b, "  parallel: yes: omp parallel for over blocks of %d elements, ",
                           CG_BLOCK);
        else
            cdy_buf_printf(b, "  parallel: yes: omp parallel for over the outer loop%s, ",
                           k->collapse ? " (collapse(2))" : "");
        cdy_buf_printf(b, "%d threads\n", c->nthreads);
    }
}

/* Append "  fuses: %v op, ..." for the nodes kernel k computes and count
 * them in val_nk/val_k0 for the decisions. */
void cg_ir_fuses(cg_ctx *c, cdy_buf *b, const kir_kernel *k)
{
    cdy_buf_puts(b, "  fuses:");
    for (int i = 0; i < k->nfused; i++) {
        int v = k->fused[i];
        cdy_buf_printf(b, "%s %%%d %s", i ? "," : "", v, cdy_op_table[c->g->values[v].op].name);
        if (c->val_nk[v]++ == 0)
            c->val_k0[v] = k->number;
    }
    cdy_buf_puts(b, k->nfused ? "\n" : " (no nodes)\n");
}

/* Print pointwise kernel k in the post-fusion IR (a cat / stack / pad piece:
 * the window it fills). */
void cg_print_pointwise(cg_ctx *c, const kir_kernel *k)
{
    cdy_buf *b = &c->ir_post;
    const cg_nest *nest = k->nest;
    if (k->sep_from >= 0) {
        cdy_buf_printf(&c->ir_dec, "  kernel_%d is a separate kernel: its iteration space ",
                       k->number);
        cg_ir_dims(&c->ir_dec, k->grp.sizes, k->grp.ndim);
        cdy_buf_printf(&c->ir_dec, " differs from kernel_%d's ", k->sep_from);
        cg_ir_dims(&c->ir_dec, k->sep_grp->sizes, k->sep_grp->ndim);
        cdy_buf_puts(&c->ir_dec, "\n");
    }
    if (k->piece >= 0) {
        cdy_buf_printf(b, "kernel_%d: %s %%%d: %%%d ", k->number,
                       cdy_op_table[c->g->values[k->node].op].name, k->node, k->piece);
        cg_ir_dims(b, k->grp.sizes, k->grp.ndim);
        cdy_buf_printf(b, " into its window at element %lld; loops ",
                       (long long)k->ops[cg_first_out(k->ops, k->nops)].offset);
        cg_ir_dims(b, nest->size, nest->ndim);
        cdy_buf_puts(b, "\n");
        cg_ir_fuses(c, b, k);
        cg_ir_stream(c, b, k);
        return;
    }
    cdy_buf_printf(b, "kernel_%d: iteration space ", k->number);
    cg_ir_dims(b, k->grp.sizes, k->grp.ndim);
    cdy_buf_printf(b, " (%lld elements); loops after dropping size-1 dims, ordering by the "
                      "first output's strides and coalescing: ", (long long)k->numel);
    cg_ir_dims(b, nest->size, nest->ndim);
    cdy_buf_puts(b, "\n");
    cg_ir_fuses(c, b, k);
    for (int o = 0; o < k->nops; o++) {
        cdy_buf_puts(b, k->ops[o].is_out ? "  store " : "  load  ");
        cg_ir_param(b, k->ops, k->nops, o);
        cdy_buf_printf(b, " %s strides ",
                       cdy_dtype_table[k->ops[o].dtype].name);
        cg_ir_dims(b, nest->stride[o], nest->ndim);
        if (k->ops[o].offset)
            cdy_buf_printf(b, " offset %lld", (long long)k->ops[o].offset);
        if (o == k->share_out)
            cdy_buf_printf(b, " (may reuse dying buffer %d in place)", k->ops[k->share_in].buffer);
        cdy_buf_puts(b, "\n");
    }
    cg_ir_vector(b, k);
    cg_ir_parallel(c, b, k);
    cg_ir_stream(c, b, k);
    cg_view_print_copy(c, b, k);
}

/* Append the fusion decisions: why kernels are separate, which nodes are
 * recomputed in several kernels, which are computed by none. */
static void cg_ir_decisions(cg_ctx *c)
{
    cdy_buf *b = &c->ir_post;
    int ng = c->nkernels;
    cdy_buf_puts(b, "fusion decisions:\n");
    if (ng == 0)
        cdy_buf_puts(b, "  no kernels: every output is an input or an extern result\n");
    if (c->ir_dec.data)
        cdy_buf_puts(b, c->ir_dec.data);
    for (int v = 0; v < c->g->nvalues; v++) {
        if (c->g->values[v].kind != CDY_VAL_NODE || cg_is_extern(c->g, v) ||
            cg_view_is_alias(c->g, v))
            continue;
        const char *op = cdy_op_table[c->g->values[v].op].name;
        if (c->val_nk[v] == 0)
            cdy_buf_printf(b, "  %%%d %s not computed: no output depends on it\n", v, op);
        else if (c->val_nk[v] > 1)
            cdy_buf_printf(b, "  %%%d %s recomputed in %d kernels (first kernel_%d): read by "
                              "outputs of different iteration spaces\n",
                           v, op, c->val_nk[v], c->val_k0[v]);
    }
    if (ng == 1)
        cdy_buf_puts(b, "  all outputs share one iteration space: one kernel\n");
}

/* Write the post-fusion IR: the program's steps in order, then the decisions. */
static void cg_ir_post(cg_ctx *c)
{
    cdy_buf *b = &c->ir_post;
    cdy_buf_printf(b, "# loop IR after fusion, %d thread%s; bufN is a plan buffer, "
                   "%%N a graph value\n", c->nthreads, c->nthreads == 1 ? "" : "s");
    for (int i = 0; i < c->prog.n; i++) {
        const kir_kernel *k = &c->prog.k[i];
        switch (k->kind) {
        case CDY_KIR_VIEW:
            cdy_buf_printf(b, "view %%%d -> buf%d: realized by torch (a view of its realized "
                           "base)\n", k->node, c->val_buf[k->node]);
            break;
        case CDY_KIR_EXTERN:
            cdy_buf_printf(b, "extern %%%d -> buf%d: runs through torch (not lowered); kernels "
                           "before and after it are separate\n", k->node, c->val_buf[k->node]);
            break;
        case CDY_KIR_PAIRED:
            cdy_buf_printf(b, "reduction %%%d %s: computed by the kernel of %%%d\n", k->node,
                           cdy_op_table[c->g->values[k->node].op].name, k->node + 1);
            break;
        case CDY_KIR_PIECES:
            cdy_buf_printf(&c->ir_dec, "  %%%d %s: a kernel per piece (%d pieces), each writing "
                           "its window of the result with its producers fused\n", k->node,
                           cdy_op_table[c->g->values[k->node].op].name,
                           c->g->values[k->node].nargs - 1);
            break;
#define CG_X(kind, emit, print) case kind: print(c, k); break;
        KIR_KINDS(CG_X)
#undef CG_X
        }
    }
    cg_ir_decisions(c);
}

/* ---- the program: steps and kernels ------------------------------------------ */

kir_kernel *cg_kir_add(cg_ctx *c, int kind)
{
    if (c->prog.n == c->prog.cap) {
        int cap = c->prog.cap ? 2 * c->prog.cap : 16;
        kir_kernel *k = realloc(c->prog.k, sizeof(kir_kernel) * (size_t)cap);
        if (!k) {
            cg_fail(c, "out of memory");
            return NULL;
        }
        c->prog.k = k;
        c->prog.cap = cap;
    }
    kir_kernel *k = &c->prog.k[c->prog.n++];
    memset(k, 0, sizeof(*k));
    k->kind = kind;
    k->number = k->node = k->piece = k->sep_from = -1;
    k->share_out = k->share_in = -1;
    return k;
}

/* 0 if the plan has room for one more step, else -1 with a message. */
static int cg_step_room(cg_ctx *c)
{
    return c->nplan_steps < c->cap_steps
               ? 0 : cg_fail(c, "too many steps (more than %d)", c->cap_steps);
}

int cg_kernel_begin(cg_ctx *c)
{
    if (cg_step_room(c))
        return -1;
    c->nplan_steps++;
    return c->nkernels++;
}

/* Schedule the step torch runs for value v (CDY_KIR_EXTERN or CDY_KIR_VIEW); 0 or -1. */
static int cg_sched_torch_step(cg_ctx *c, int kind, int v)
{
    kir_kernel *k = cg_sym_check_step(c, kind, v) || cg_step_room(c) ? NULL : cg_kir_add(c, kind);
    if (!k)
        return -1;
    c->nplan_steps++;
    k->node = v;
    return 0;
}

int cg_kir_fuse(cg_ctx *c, kir_kernel *k)
{
    int n = 0;
    for (int v = 0; v < c->g->nvalues; v++)
        n += c->live[v] && c->g->values[v].kind == CDY_VAL_NODE && !cg_is_leaf(c, v);
    k->fused = cdy_arena_alloc(&c->arena, sizeof(int) * (size_t)(n + 1));
    if (!k->fused)
        return cg_fail(c, "out of memory");
    for (int v = 0; v < c->g->nvalues; v++)
        if (c->live[v] && c->g->values[v].kind == CDY_VAL_NODE && !cg_is_leaf(c, v))
            k->fused[k->nfused++] = v;
    return 0;
}

/* Restore the scratch state the emitters read for kernel k (c->live,
 * in_group, param, vparam, nest) from its record. */
static void cg_kernel_enter(cg_ctx *c, const kir_kernel *k)
{
    size_t nv = (size_t)c->g->nvalues;
    memset(c->live, 0, nv);
    memset(c->in_group, 0, nv);
    for (int i = 0; i < k->grp.nout; i++)
        c->live[k->grp.outs[i]] = c->in_group[k->grp.outs[i]] = 1;
    for (int i = 0; i < k->nfused; i++)
        c->live[k->fused[i]] = 1;
    for (int b = 0; b < c->nbuffers; b++)
        c->param[b] = -1;
    for (int o = 0; o < k->nops + k->nidx; o++) {
        const cg_operand *op = &k->ops[o];
        int v = op->value;
        if (!op->is_out && (op->buffer < 0 || (!cg_is_leaf(c, v) &&
                                               (cg_is_view(c->g, v) || cg_is_gather(c->g, v)))))
            c->vparam[v] = o;
        else if (op->buffer >= 0) {
            c->param[op->buffer] = o;
            c->live[v] |= !op->is_out;
        }
    }
    c->nest = k->kind == CDY_KIR_POINTWISE && k->piece < 0 ? k->nest : NULL;
    c->kern = k;
}

/* Record kernel k (symbol kernel_<number>, parameters its ops' buffers) and its step. */
static void cg_kernel_end(cdy_plan *plan, const kir_kernel *k)
{
    cdy_kernel_desc *kd = &plan->kernels[k->number];
    snprintf(kd->symbol, sizeof(kd->symbol), "kernel_%d", k->number);
    kd->nargs = k->nops;
    for (int o = 0; o < k->nops; o++)
        kd->args[o] = k->ops[o].buffer;
    kd->status = k->status;
    plan->nkernels = k->number + 1;
    plan->steps[plan->nsteps++] = (cdy_step){CDY_STEP_KERNEL, k->number, -1};
}

kir_kernel *cg_sched_pointwise(cg_ctx *c, const cg_group *grp)
{
    cg_operand *ops = cdy_arena_alloc(&c->arena, sizeof(cg_operand) * CG_MAX_OPS);
    cg_nest *nest = cdy_arena_alloc(&c->arena, sizeof(cg_nest));
    int number = cg_kernel_begin(c);
    kir_kernel *k = number < 0 ? NULL : cg_kir_add(c, CDY_KIR_POINTWISE);
    if (!k)
        return NULL;
    if (!ops || !nest) {
        cg_fail(c, "out of memory");
        return NULL;
    }
    k->number = number;
    k->grp = *grp;
    k->ops = ops;
    k->nest = nest;
    cg_mark_live(c, grp);
    k->nops = cg_operands(c, grp, ops);
    k->nidx = k->nops < 0 ? -1 : cg_index_operands(c, grp, ops, k->nops);
    if (k->nidx < 0 || cg_kir_fuse(c, k))
        return NULL;
    cg_build_nest(grp, ops, k->nops + k->nidx, nest);
    if (c->sym && cg_sym_nest(c, k))
        return NULL;
    k->numel = 1;
    for (int d = 0; d < grp->ndim; d++)
        k->numel *= grp->sizes[d];
    cg_sched_loops(c, k);
    if (c->sym)
        cg_sym_sched_loops(c, k);
    return k;
}

int cg_emit_pointwise(cg_ctx *c, const kir_kernel *k)
{
    cg_emit_header(c, k);
    if (k->copy_unit || k->copy_row)
        cg_view_emit_copy(c, k);
    else if (k->par_cond) {                /* runtime sizes: parallel when large enough */
        kir_kernel serial = *k;
        serial.parallel = 0;
        cdy_buf_printf(&c->src, "    if (%s) {\n", k->par_cond);
        if (cg_emit_loops(c, k))
            return -1;
        cdy_buf_puts(&c->src, "    } else {\n");
        if (cg_emit_loops(c, &serial))
            return -1;
        cdy_buf_puts(&c->src, "    }\n");
    }
    else if (cg_emit_loops(c, k))
        return -1;
    cdy_buf_puts(&c->src, k->status ? "    return (int)cdy_err[0];\n}\n" : "}\n");
    return 0;
}

/* The fixed-width integer types of <stdint.h> from the compiler's own macros:
 * the header and the glibc headers it pulls in are 2.7 ms of every compile. */
#define CG_STDINT(X) X(INT8, int8_t) X(INT16, int16_t) X(INT32, int32_t) X(INT64, int64_t) \
    X(UINT8, uint8_t) X(UINT16, uint16_t) X(UINT32, uint32_t) X(UINT64, uint64_t)      \
    X(INTPTR, intptr_t) X(UINTPTR, uintptr_t)
#define CG_TYPEDEF(m, t) "typedef __" #m "_TYPE__ " #t ";\n"

static pthread_mutex_t cg_prefix_lock = PTHREAD_MUTEX_INITIALIZER;
static char *cg_prefix_text;                     /* built once (under cg_prefix_lock) */

const char *cdy_codegen_prefix(void)
{
    pthread_mutex_lock(&cg_prefix_lock);
    if (!cg_prefix_text) {                       /* built again after an out-of-memory */
        cdy_buf f = {0};
        cdy_buf_puts(&f, "/* generated by cdynamo: elementwise kernels specialised to fixed "
                         "sizes and strides */\n"
                         CG_STDINT(CG_TYPEDEF)
                         "#define CDY_EXPORT __attribute__((visibility(\"default\")))\n");
        cdy_buf_puts(&f, cdy_cc_renames());
        cdy_buf_puts(&f, cg_prologue_libm);
        cdy_buf_puts(&f, cg_prologue_math);
        cg_prefix_text = cdy_buf_take(&f);
    }
    const char *text = cg_prefix_text;
    pthread_mutex_unlock(&cg_prefix_lock);
    return text;
}

/* The file: the prefix, the thread count, the helpers its kernels call, the
 * kernels; NULL when memory is short. */
static char *cg_file(cg_ctx *c, const char *kernels)
{
    const char *prefix = cdy_codegen_prefix();
    if (!prefix)
        return NULL;
    cdy_buf f = {0};
    cdy_buf_puts(&f, prefix);
    cdy_buf_printf(&f, "#define NTHREADS %d\n", c->nthreads);
    cg_emit_helpers(&f, kernels);
    cdy_buf_puts(&f, "\n");
    cdy_buf_puts(&f, kernels);
    return cdy_buf_take(&f);
}

/* Allocate the per-value scratch arrays of c; 0 or -1. */
static int cg_scratch(cg_ctx *c)
{
    size_t nv = (size_t)c->g->nvalues + 1;
    size_t nb = nv + (size_t)c->g->ninputs + 1;
    c->val_buf = cdy_arena_alloc(&c->arena, sizeof(int) * nv);
    c->live = cdy_arena_alloc(&c->arena, nv);
    c->param = cdy_arena_alloc(&c->arena, sizeof(int) * nb);
    c->in_group = cdy_arena_alloc(&c->arena, nv);
    c->val_nk = cdy_arena_alloc(&c->arena, sizeof(int) * nv);
    c->val_k0 = cdy_arena_alloc(&c->arena, sizeof(int) * nv);
    c->done = cdy_arena_alloc(&c->arena, nv);
    c->vparam = cdy_arena_alloc(&c->arena, sizeof(int) * nv);
    c->red_prod = cdy_arena_alloc(&c->arena, sizeof(int) * nv);
    c->nbuffers = 0;
    if (!(c->val_buf && c->live && c->param && c->in_group && c->val_nk && c->val_k0 &&
          c->done && c->vparam && c->red_prod))
        return cg_fail(c, "out of memory");
    for (size_t v = 0; v < nv; v++)
        c->red_prod[v] = -1;
    return 0;
}

/* Schedule the pointwise kernels realizing the values of [lo, hi), one per
 * group of outputs of one iteration space. */
static int cg_sched_segment(cg_ctx *c, int lo, int hi)
{
    cg_group *groups = NULL;
    int ng = cg_group_outputs(c, lo, hi, &groups);
    if (ng < 0)
        return -1;
    for (int i = 0; i < ng; i++) {
        kir_kernel *k = cg_sched_pointwise(c, &groups[i]);
        if (!k)
            return -1;
        if (i > 0) {
            k->sep_from = k->number - i;
            k->sep_grp = &groups[0];
        }
    }
    return 0;
}

/* The schedule: the program's steps in order.  Kernels are scheduled per
 * segment between the steps of torch (externs, realized views) and the
 * special kinds' kernels, so every value a step reads is realized by an
 * earlier step. */
static int cg_schedule(cg_ctx *c)
{
    const cdy_graph *g = c->g;
    int lo = 0;
    for (int v = 0; v < g->nvalues; v++) {
        if ((cg_is_view(g, v) && cg_view_boundary(c, v, lo)) ||
            (cg_is_gather(g, v) && cg_gather_boundary(c, v, lo))) {   /* its base is realized first */
            if (cg_sched_segment(c, lo, v))
                return -1;
            lo = v;
        }
        if (cg_is_view(g, v) && cg_view_is_alias(g, v) && c->val_buf[v] >= 0) {
            if (cg_sched_torch_step(c, CDY_KIR_VIEW, v))
                return -1;
            lo = v + 1;
            continue;
        }
        if (cg_is_special(g, v)) {     /* a boundary: what it reads is realized first */
            /* done: an earlier row kernel computes it (rows.c cg_row_sibling) */
            if (cg_sched_segment(c, lo, v) || (!c->done[v] && cg_sched_special(c, v)))
                return -1;
            lo = v + 1;
            continue;
        }
        if (!cg_is_extern(g, v))
            continue;
        if (cg_sched_segment(c, lo, v) || cg_sched_torch_step(c, CDY_KIR_EXTERN, v))
            return -1;
        lo = v + 1;
    }
    return cg_sched_segment(c, lo, g->nvalues);
}

/* Emit the program: per step, its kind's emitter (kernels) or the plan step
 * torch runs. */
static int cg_emit(cg_ctx *c, cdy_plan *plan)
{
    for (int i = 0; i < c->prog.n; i++) {
        const kir_kernel *k = &c->prog.k[i];
        int rc = 0;
        if (k->kind == CDY_KIR_PAIRED || k->kind == CDY_KIR_PIECES)
            continue;
        if (k->kind == CDY_KIR_EXTERN || k->kind == CDY_KIR_VIEW) {
            plan->steps[plan->nsteps++] = (cdy_step){CDY_STEP_EXTERN, k->node,
                                                     c->val_buf[k->node]};
            continue;
        }
        cg_kernel_enter(c, k);
        switch (k->kind) {
#define CG_X(kind, emit, print) case kind: rc = emit(c, k); break;
        KIR_KINDS(CG_X)
#undef CG_X
        }
        c->nest = NULL;
        c->kern = NULL;
        if (rc)
            return -1;
        cg_kernel_end(plan, k);
    }
    return 0;
}

/* Copy nest n's sizes into *nd / sizes (none when n is NULL). */
static void cg_kir_loops(const cg_nest *n, int *nd, int64_t *sizes)
{
    *nd = n ? n->ndim : 0;
    for (int d = 0; d < *nd; d++)
        sizes[d] = n->size[d];
}

/* Fill summary s of step k; its value lists from *vals (advanced). */
static void cg_kir_step(const kir_kernel *k, cdy_kir *s, int **vals)
{
    *s = (cdy_kir){.kind = k->kind, .kernel = k->number, .node = k->node, .piece = k->piece,
                   .ndim = k->grp.ndim, .nout = k->grp.nout, .nfused = k->nfused,
                   .nparams = k->nops, .parallel = k->parallel, .collapse = k->collapse,
                   .vector = k->vector, .stream = k->stream, .status = k->status,
                   .flags = k->flags, .serial = k->serial};
    for (int d = 0; d < k->grp.ndim; d++)
        s->sizes[d] = k->grp.sizes[d];
    cg_kir_loops(k->nest, &s->nloops, s->loops);
    cg_kir_loops(k->rnest, &s->nrloops, s->rloops);
    if (k->copy_unit || k->copy_row) {       /* a plain copy runs its own loops */
        s->parallel = k->copy_parallel;
        s->collapse = k->copy_collapse;
    }
    const char *nt = k->copy_unit || k->copy_row ? k->copy_threads : k->threads;
    s->threads = !nt || !strcmp(nt, "NTHREADS") ? 0 : atoi(nt);
    s->outs = *vals;
    for (int i = 0; i < k->grp.nout; i++)
        *(*vals)++ = k->grp.outs[i];
    s->fused = *vals;
    for (int i = 0; i < k->nfused; i++)
        *(*vals)++ = k->fused[i];
}

/* The plan's summary of the program (cdy_plan.kir); 0 or -1. */
static int cg_kir_summary(cg_ctx *c, cdy_plan *plan)
{
    size_t nv = 1;
    for (int i = 0; i < c->prog.n; i++)
        nv += (size_t)(c->prog.k[i].grp.nout + c->prog.k[i].nfused);
    plan->kir = calloc((size_t)c->prog.n + 1, sizeof(cdy_kir));
    plan->kir_values = calloc(nv, sizeof(int));
    if (!plan->kir || !plan->kir_values)
        return cg_fail(c, "out of memory");
    int *vals = plan->kir_values;
    for (int i = 0; i < c->prog.n; i++)
        cg_kir_step(&c->prog.k[i], &plan->kir[i], &vals);
    plan->nkir = c->prog.n;
    return 0;
}

/* Run the passes; on failure the caller frees the partial plan. */
static int cg_run(cg_ctx *c, cdy_plan *plan)
{
    const cdy_graph *g = c->g;
    if (cg_check_graph(c) || cg_layout(c))
        return -1;
    if (c->g != g && cg_sym_unsupported(c, "channels_last layouts take static sizes"))
        return -1;
    if (cg_scratch(c) || cg_plan_buffers(c, plan) || cg_sym_check_plan(c, plan))
        return -1;
    c->plan = plan;
    if (cg_red_pick_producers(c) || cg_schedule(c) || cg_share(c, plan))
        return -1;
    cg_ir_pre(c);
    cg_ir_post(c);
    if (cg_emit(c, plan) || cg_kir_summary(c, plan))
        return -1;
    plan->source = c->src.oom ? NULL : cg_file(c, c->src.data ? c->src.data : "");
    plan->ir_pre = cdy_buf_take(&c->ir_pre);
    plan->ir_post = cdy_buf_take(&c->ir_post);
    if (!plan->source || !plan->ir_pre || !plan->ir_post)
        return cg_fail(c, "out of memory");
    return 0;
}

/* Lower g to C kernels and a plan (see cdynamo.h); 0 or -1 with err set. */
int cdy_codegen(const cdy_graph *g, int nthreads, int64_t stream_bytes, cdy_plan *plan,
                char *err, size_t errlen)
{
    return cdy_codegen_sym(g, nthreads, stream_bytes, NULL, plan, err, errlen);
}

int cdy_codegen_sym(const cdy_graph *g, int nthreads, int64_t stream_bytes,
                    cdy_sym_shapes *sym, cdy_plan *plan, char *err, size_t errlen)
{
    cg_ctx c = {.g = g, .nthreads = nthreads < 1 ? 1 : nthreads, .err = err, .errlen = errlen,
                .stream_bytes = stream_bytes < 0 ? 0 : stream_bytes, .sym = sym};
    if (err && errlen)
        err[0] = 0;
    if (!plan)
        return cg_fail(&c, "no plan given");
    memset(plan, 0, sizeof(*plan));
    if (!g)
        return cg_fail(&c, "no graph given");
    plan->nthreads = c.nthreads;
    int rc = cg_run(&c, plan);
    cdy_buf_free(&c.src);
    cdy_buf_free(&c.ir_pre);
    cdy_buf_free(&c.ir_post);
    cdy_buf_free(&c.ir_dec);
    free(c.prog.k);
    cdy_arena_free(&c.arena);
    if (rc)
        cdy_plan_free(plan);
    return rc;
}

/* Free everything a plan owns and zero it; safe on a zeroed plan. */
void cdy_plan_free(cdy_plan *plan)
{
    if (!plan)
        return;
    free(plan->buffers);
    free(plan->kernels);
    free(plan->outputs);
    free(plan->source);
    free(plan->steps);
    free(plan->value_buffer);
    free(plan->buffer_alloc);
    free(plan->buffer_share);
    free(plan->ir_pre);
    free(plan->ir_post);
    free(plan->kir);
    free(plan->kir_values);
    memset(plan, 0, sizeof(*plan));
}
