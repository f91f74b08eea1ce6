/* symk.c - kernels with runtime sizes (issue 32).
 *
 * A graph compiled with symbolic sizes (cdy_codegen_sym, c->sym) is
 * scheduled at the example's sizes (the hints) as every graph is; then each
 * pointwise kernel's nest gets, per loop, the expression of its size and,
 * per operand, of its stride (cg_sym_nest), which the emitters print as the
 * locals n<d> / st<o>_<d> computed at the kernel's top from the symbols'
 * values (`const int64_t *cdy_s`, the kernel's last parameter).  The
 * decisions that read sizes become run-time ones: the parallel loop runs
 * under a condition on the actual element count (the kernel has a parallel
 * and a serial copy of its loops); streamed stores and memcpy copies are off.
 *
 * What holds at every size is what this file relies on: an operand is
 * contiguous (inputs with a symbol are guarded contiguous, the runtime
 * allocates buffers contiguous), a dim of size 1 is a constant (symbols are
 * >= 2), so the nest's ordering and coalescing made at the hints hold at
 * every size.  Anything else (a view or gather load, an index operand, a
 * special kind's kernel, a realized view with a symbolic size) fails the
 * symbolic compile with its reason; the caller then compiles the static
 * graph (every symbol specialized). */
#include <stdio.h>
#include <string.h>

#include "compiler/cg.h"

int cg_sym_unsupported(cg_ctx *c, const char *what)
{
    return c->sym ? cg_fail(c, "symbolic sizes: %s", what) : 0;
}

/* 1 if expressions a and b are equal at every size: the same id, or a
 * relation of the graph's guards. */
static int sk_same(const cdy_sym_shapes *s, int a, int b)
{
    if (a == b)
        return 1;
    for (int r = 0; r < s->nrel; r++)
        if ((s->rel[r][0] == a && s->rel[r][1] == b) || (s->rel[r][0] == b && s->rel[r][1] == a))
            return 1;
    return 0;
}

/* 1 if meta m has the contiguous strides of its sizes (dims of size 1 free). */
static int sk_contiguous(const cdy_meta *m)
{
    int64_t st = 1;
    for (int d = m->ndim - 1; d >= 0; d--) {
        if (m->sizes[d] != 1 && m->strides[d] != st)
            return 0;
        st *= m->sizes[d];
    }
    return 1;
}

/* Operand o's stride expressions per iteration dim (gexp: the group's dim
 * expressions) into st; 0, or -1 with a message. */
static int sk_op_strides(cg_ctx *c, const kir_kernel *k, int o, const int *gexp, int *st)
{
    cdy_sym_shapes *s = c->sym;
    const cg_operand *op = &k->ops[o];
    const cdy_meta *m = &c->g->values[op->value].meta;
    int shift = k->grp.ndim - m->ndim, zero = cdy_sym_const(&s->tab, 0);
    if (op->buffer < 0 || op->offset || cg_is_view(c->g, op->value) ||
        cg_is_gather(c->g, op->value))
        return cg_sym_unsupported(c, "a kernel loads a view, a gather or an index");
    if (!sk_contiguous(m))
        return cg_sym_unsupported(c, "a kernel operand is not contiguous");
    for (int d = 0; d < k->grp.ndim; d++) {
        int md = d - shift;
        if (md < 0 || m->sizes[md] == 1) {
            st[d] = zero;
            continue;
        }
        if (!sk_same(s, s->dims[op->value][md], gexp[d]))
            return cg_sym_unsupported(c, "an operand's size differs from the kernel's");
        int e = cdy_sym_const(&s->tab, 1);
        for (int j = md + 1; j < m->ndim && e >= 0; j++)
            e = cdy_sym_mul(&s->tab, e, s->dims[op->value][j]);
        if (e < 0)
            return cg_sym_unsupported(c, "a stride's expression is too large");
        st[d] = e;
    }
    return zero < 0 ? cg_sym_unsupported(c, "out of expression space") : 0;
}

/* The expression id, or -1 when it is a constant (the literal holds). */
static int sk_live(const cdy_sym_shapes *s, int e)
{
    int64_t v;
    return cdy_sym_is_const(&s->tab, e, &v) ? -1 : e;
}

/* The group's dim expressions (every output's equal) into gexp; 0 or -1. */
static int sk_group(cg_ctx *c, const kir_kernel *k, int *gexp)
{
    const cdy_sym_shapes *s = c->sym;
    for (int d = 0; d < k->grp.ndim; d++)
        gexp[d] = s->dims[k->grp.outs[0]][d];
    for (int i = 1; i < k->grp.nout; i++)
        for (int d = 0; d < k->grp.ndim; d++)
            if (!sk_same(s, s->dims[k->grp.outs[i]][d], gexp[d]))
                return cg_sym_unsupported(c, "outputs of one kernel differ in size");
    return 0;
}

int cg_sym_nest(cg_ctx *c, kir_kernel *k)
{
    cg_nest *n = k->nest;
    cdy_sym_shapes *s = c->sym;
    int gexp[CDY_MAX_NDIM], st[CG_MAX_OPS][CDY_MAX_NDIM];
    if (k->nidx)
        return cg_sym_unsupported(c, "a kernel reads an index (arange)");
    if (sk_group(c, k, gexp))
        return -1;
    for (int o = 0; o < k->nops; o++)
        if (sk_op_strides(c, k, o, gexp, st[o]))
            return -1;
    n->sym = 1;
    int prev = -1;
    for (int d = 0; d < n->ndim; d++) {
        int e = cdy_sym_const(&s->tab, 1), last = -1;
        for (int g = 0; g < k->grp.ndim; g++) {
            if (!(n->gmask[d] >> g & 1))
                continue;
            if (g <= prev)
                return cg_sym_unsupported(c, "a kernel's loops are not in memory order");
            prev = last = g;
            e = e < 0 ? -1 : cdy_sym_mul(&s->tab, e, gexp[g]);
        }
        if (e < 0 || (last < 0 && n->size[d] != 0))
            return cg_sym_unsupported(c, "a loop's size has no expression");
        n->ssize[d] = last < 0 ? -1 : sk_live(s, e);
        for (int o = 0; o < k->nops; o++)
            n->sstride[o][d] = last < 0 ? -1 : sk_live(s, st[o][last]);
    }
    return 0;
}

const char *cg_sym_size_text(cg_ctx *c, const cg_nest *nest, int d)
{
    if (nest->sym && nest->ssize[d] >= 0)
        return cg_strf(c, "n%d", d);
    return cg_strf(c, "%lldLL", (long long)nest->size[d]);
}

/* Emit `const int64_t <name> = <expression e>;`. */
static void sk_local(cg_ctx *c, const char *name, int e)
{
    char ex[512];
    cdy_sym_print(&c->sym->tab, e, ex, sizeof(ex));
    cdy_buf_printf(&c->src, "    const int64_t %s = %s;\n", name, ex);
}

void cg_sym_emit_locals(cg_ctx *c, const kir_kernel *k)
{
    const cg_nest *n = k->nest;
    char name[32];
    for (int s = 0; s < c->sym->tab.nsyms; s++)
        cdy_buf_printf(&c->src, "    const int64_t s%d = cdy_s[%d]; (void)s%d;\n", s, s, s);
    for (int d = 0; n && n->sym && d < n->ndim; d++) {
        if (n->ssize[d] >= 0) {
            snprintf(name, sizeof(name), "n%d", d);
            sk_local(c, name, n->ssize[d]);
        }
        for (int o = 0; o < k->nops; o++)
            if (n->sstride[o][d] >= 0 && n->stride[o][d] != 0) {
                snprintf(name, sizeof(name), "st%d_%d", o, d);
                sk_local(c, name, n->sstride[o][d]);
            }
    }
}

void cg_sym_sched_loops(cg_ctx *c, kir_kernel *k)
{
    const cg_nest *n = k->nest;
    k->stream = 0;
    k->copy_unit = 0;
    k->copy_row = 0;
    k->flags &= ~(unsigned)(CDY_KIRF_COPY_UNITS | CDY_KIRF_COPY_ROWS);
    int live = 0;
    for (int d = 0; d < n->ndim; d++)
        live |= n->ssize[d] >= 0;
    if (!live || n->ndim == 0 || c->nthreads <= 1)
        return;                            /* the hints' decision holds at every size */
    cdy_buf t = {0};
    for (int d = 0; d < n->ndim; d++)
        cdy_buf_printf(&t, "%s%s", d ? " * " : "", cg_sym_size_text(c, n, d));
    const char *numel = cg_strf(c, "(%s)", t.data ? t.data : "1");
    cdy_buf_free(&t);
    int64_t per = cg_moved(k->ops, k->nops, n, 1);
    k->par_cond = k->nfused <= CG_PARALLEL_CHEAP_OPS
                      ? cg_strf(c, "%s >= %dLL && %s * %lldLL >= %dLL", numel, CG_PARALLEL_NUMEL,
                                numel, (long long)per, CG_PARALLEL_BYTES)
                      : cg_strf(c, "%s >= %dLL", numel, CG_PARALLEL_NUMEL);
    k->collapse = 0;
    k->parallel = 1;
    k->serial = NULL;
}

int cg_sym_check_step(cg_ctx *c, int kind, int v)
{
    if (!c->sym)
        return 0;
    if (kind == CDY_KIR_EXTERN)
        return 0;                          /* torch takes the sizes (sym/infer.c's extern rules) */
    if (kind != CDY_KIR_VIEW)
        return cg_sym_unsupported(c, cg_strf(c, "%s kernels take static sizes",
                                             cdy_op_table[c->g->values[v].op].name));
    for (int d = 0; d < c->g->values[v].meta.ndim; d++)
        if (sk_live(c->sym, c->sym->dims[v][d]) >= 0)
            return cg_sym_unsupported(c, "a realized view has a symbolic size");
    return 0;
}

/* 1 if every dim of value v is a constant. */
static int sk_static_value(const cg_ctx *c, int v)
{
    for (int d = 0; d < c->g->values[v].meta.ndim; d++)
        if (sk_live(c->sym, c->sym->dims[v][d]) >= 0)
            return 0;
    return 1;
}

int cg_sym_check_plan(cg_ctx *c, const cdy_plan *plan)
{
    for (int v = 0; c->sym && v < c->g->nvalues; v++) {
        int b = c->val_buf[v];
        if (b < 0 || sk_static_value(c, v))
            continue;
        if (!sk_contiguous(&plan->buffers[b]))
            return cg_sym_unsupported(c, "a buffer with a symbolic size is not contiguous");
    }
    return 0;
}
