/* reduce.c - reduction nodes (kind 'R': sum, mean, amax, amin, prod over a
 * dims mask, keepdim): one kernel each, the pointwise prologue of the input
 * recomputed per element inside the reduced loops. */
#include <stdio.h>
#include <string.h>

#include "compiler/cg.h"

/* Check reduction node v: a tensor input, an int dims mask within its rank,
 * a bool keepdim, the result's sizes and dtype those of torch's reduction. */
int cg_check_reduce(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    const char *name = cdy_op_table[val->op].name;
    if (cg_check_meta(c, v, &val->meta))
        return -1;
    for (int a = 0; a < 3; a++)
        if (val->args[a] < 0 || val->args[a] >= v)
            return cg_fail(c, "value %d (%s): arg %d is not earlier in the graph", v, name, a);
    const cdy_value *in = &c->g->values[val->args[0]];
    const cdy_value *mk = &c->g->values[val->args[1]];
    const cdy_value *kd = &c->g->values[val->args[2]];
    if (in->kind == CDY_VAL_SCALAR || mk->kind != CDY_VAL_SCALAR || kd->kind != CDY_VAL_SCALAR ||
        cdy_dtype_table[mk->meta.dtype].is_float || cdy_dtype_table[kd->meta.dtype].is_float)
        return cg_fail(c, "value %d (%s): args must be a tensor, an int mask and a bool", v, name);
    const cdy_meta *im = &in->meta, *om = &val->meta;
    if (mk->i < 0 || mk->i >= ((int64_t)1 << im->ndim))
        return cg_fail(c, "value %d (%s): dims mask %lld out of range", v, name, (long long)mk->i);
    int od = 0;
    for (int d = 0; d < im->ndim; d++) {
        int red = (int)((mk->i >> d) & 1);
        if (red && !kd->i)
            continue;
        if (od >= om->ndim || om->sizes[od] != (red ? 1 : im->sizes[d]))
            return cg_fail(c, "value %d (%s): result sizes are not the reduction's", v, name);
        od++;
    }
    if (od != om->ndim)
        return cg_fail(c, "value %d (%s): result rank %d, expected %d", v, name, om->ndim, od);
    int idt = im->dtype, odt = om->dtype, want = idt;
    if ((val->op == CDY_OP_SUM || val->op == CDY_OP_PROD) && !cdy_dtype_table[idt].is_float)
        want = CDY_DT_INT64;
    if (odt != want || (val->op == CDY_OP_MEAN && !cdy_dtype_table[idt].is_float))
        return cg_fail(c, "value %d (%s): dtype %s -> %s is not supported", v, name,
                       cdy_dtype_table[idt].name, cdy_dtype_table[odt].name);
    return 0;
}

/* Append operand o's offset in a reduction kernel: outer loops i<d>, reduced loops r<d>. */
static void cg_red_offset(cdy_buf *b, const cg_nest *on, const cg_nest *rn, int o)
{
    int any = 0;
    cg_offset_terms(b, on, o, 'i', &any);
    cg_offset_terms(b, rn, o, 'r', &any);
    if (!any)
        cdy_buf_puts(b, "0");
}

/* The C literal amax (is_max) / amin starts from in dtype dt. */
static const char *cg_red_init(int dt, int is_max)
{
    static const char *lo[] = {"0", "0", "(-128)", "(-32768)", "(-2147483647 - 1)",
                               "(-9223372036854775807LL - 1)", "(-INFINITY)", "(-INFINITY)"};
    static const char *hi[] = {"1", "255", "127", "32767", "2147483647",
                               "9223372036854775807LL", "INFINITY", "INFINITY"};
    return is_max ? lo[dt] : hi[dt];
}

/* Emit reduction node v as kernel k: a loop nest over the kept dims (outer,
 * parallel when large), an accumulator per output element, a loop nest over
 * the reduced dims whose body computes the reduction's input expression
 * inline from leaves (the pointwise prologue is fused, never realized). */
int cg_emit_reduce(cg_ctx *c, cdy_plan *plan, int v)
{
    int k = cg_kernel_begin(c, plan);
    if (k < 0)
        return -1;
    const cdy_graph *g = c->g;
    const cdy_value *val = &g->values[v];
    int in = val->args[0], op = val->op;
    const cdy_meta *im = &g->values[in].meta, *om = &val->meta;
    int64_t mask = g->values[val->args[1]].i;
    int keep = g->values[val->args[2]].i != 0;
    cg_operand *ops = cdy_arena_alloc(&c->arena, sizeof(cg_operand) * CG_MAX_OPS);
    cg_nest *on = cdy_arena_alloc(&c->arena, sizeof(cg_nest));
    cg_nest *rn = cdy_arena_alloc(&c->arena, sizeof(cg_nest));
    int64_t *osz = cdy_arena_alloc(&c->arena, sizeof(int64_t) * CDY_MAX_NDIM * 2);
    int *outs = cdy_arena_alloc(&c->arena, sizeof(int));
    if (!ops || !on || !rn || !osz || !outs)
        return cg_fail(c, "out of memory");
    int64_t *rsz = osz + CDY_MAX_NDIM;
    outs[0] = v;
    cg_group grp = {im->ndim, im->sizes, 1, outs};
    cg_mark_live(c, &grp);
    int nops = cg_operands(c, &grp, ops);
    if (nops < 0)
        return -1;
    int first = cg_first_out(ops, nops), od = 0;
    int64_t rnumel = 1, inumel = 1, onumel = cdy_meta_numel(om);
    for (int d = 0; d < im->ndim; d++) {
        int red = (int)((mask >> d) & 1);
        inumel *= im->sizes[d];
        if (red) {
            rnumel *= im->sizes[d];
            ops[first].stride[d] = 0;
            osz[d] = 1;
            rsz[d] = im->sizes[d];
            od += keep;
        } else {
            ops[first].stride[d] = om->sizes[od] == 1 ? 0 : om->strides[od];
            od++;
            osz[d] = im->sizes[d];
            rsz[d] = 1;
        }
    }
    cg_group og = {im->ndim, osz, 1, outs}, rg = {im->ndim, rsz, 1, outs};
    cg_build_nest(&og, ops, nops, on);
    cg_build_nest(&rg, ops, nops, rn);
    int odt = om->dtype, flt = cdy_dtype_table[odt].is_float;
    int is_mm = op == CDY_OP_AMAX || op == CDY_OP_AMIN;
    const char *acct = is_mm ? cdy_dtype_table[odt].cctype : flt ? "double" : "int64_t";
    const char *init = is_mm ? cg_red_init(odt, op == CDY_OP_AMAX) : op == CDY_OP_PROD ? "1" : "0";
    const char *clause = op == CDY_OP_PROD ? "reduction(*:acc)"
                         : op == CDY_OP_AMAX ? (flt ? "reduction(max:acc) reduction(|:nanf)"
                                                    : "reduction(max:acc)")
                         : op == CDY_OP_AMIN ? (flt ? "reduction(min:acc) reduction(|:nanf)"
                                                    : "reduction(min:acc)")
                                             : "reduction(+:acc)";
    int big = c->nthreads > 1 && inumel >= CG_PARALLEL_NUMEL;
    int par_out = big && on->ndim > 0 && onumel >= c->nthreads;
    int par_in = big && on->ndim == 0 && rn->ndim > 0;
    cg_emit_header(c, k, &grp, ops, nops, on);

    /* IR */
    cdy_buf *ir = &c->ir_post;
    cdy_buf_printf(ir, "kernel_%d: reduction %%%d %s of %%%d ", k, v, cdy_op_table[op].name, in);
    cg_ir_dims(ir, im->sizes, im->ndim);
    cdy_buf_printf(ir, " over dims mask 0x%llx%s -> ", (long long)mask, keep ? " keepdim" : "");
    cg_ir_dims(ir, om->sizes, om->ndim);
    cdy_buf_puts(ir, "; outer loops ");
    cg_ir_dims(ir, on->size, on->ndim);
    cdy_buf_puts(ir, ", reduced loops ");
    cg_ir_dims(ir, rn->size, rn->ndim);
    cdy_buf_printf(ir, ", accumulator %s\n", acct);
    cg_ir_fuses(c, ir, k);
    for (int o = 0; o < nops; o++) {
        cdy_buf_puts(ir, ops[o].is_out ? "  store " : "  load  ");
        cg_ir_param(ir, ops, nops, o);
        cdy_buf_puts(ir, "\n");
    }
    cdy_buf_printf(ir, "  parallel: %s\n", par_out ? "yes: omp parallel for over the outer loop"
                                          : par_in ? "yes: omp parallel for reduction over the "
                                                     "reduced loop"
                                                   : "no: small, or too few outputs");
    cdy_buf_printf(&c->ir_dec, "  kernel_%d is a separate kernel: reduction %%%d %s (values "
                               "before it are realized first; its prologue is fused)\n",
                   k, v, cdy_op_table[op].name);

    /* C */
    cdy_buf *b = &c->src;
    int ind = 1;
    for (int d = 0; d < on->ndim; d++, ind++) {
        if (d == 0 && par_out) {
            cg_indent(b, ind);
            cdy_buf_printf(b, "#pragma omp parallel for num_threads(NTHREADS) schedule(static)%s\n",
                           on->ndim >= 2 && on->size[0] < 4 * (int64_t)c->nthreads
                               ? " collapse(2)" : "");
        }
        cg_indent(b, ind);
        cdy_buf_printf(b, "for (int64_t i%d = 0; i%d < %lldLL; i%d++) {\n", d, d,
                       (long long)on->size[d], d);
    }
    int oind = ind;
    cg_indent(b, ind);
    cdy_buf_printf(b, "%s acc = %s;\n", acct, init);
    if (is_mm && flt) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "int nanf = 0;\n");
    }
    for (int d = 0; d < rn->ndim; d++, ind++) {
        cg_indent(b, ind);
        if (d == 0 && par_in)
            cdy_buf_printf(b, "#pragma omp parallel for%s num_threads(NTHREADS) schedule(static) %s\n",
                           rn->ndim == 1 ? " simd" : "", clause);
        else if (d == rn->ndim - 1)
            cdy_buf_printf(b, "#pragma omp simd %s\n", clause);
        cg_indent(b, ind);
        cdy_buf_printf(b, "for (int64_t r%d = 0; r%d < %lldLL; r%d++) {\n", d, d,
                       (long long)rn->size[d], d);
    }
    cg_indent(b, ind);
    cdy_buf_puts(b, "{\n");
    ind++;
    for (int o = 0; o < nops; o++) {
        if (ops[o].is_out)
            continue;
        const cdy_meta *m = &g->values[ops[o].value].meta;
        cg_indent(b, ind);
        cdy_buf_printf(b, "const %s x%d = in_ptr%d[", cdy_dtype_table[m->dtype].ctype, o, o);
        cg_red_offset(b, on, rn, o);
        cdy_buf_puts(b, "];\n");
    }
    for (int u = 0; u < g->nvalues; u++)
        if (u != v && c->live[u] && g->values[u].kind == CDY_VAL_NODE && !cg_is_leaf(c, u) &&
            cg_emit_node(c, u, ind))
            return -1;
    char *e = cg_value_expr(c, in);
    if (!e)
        return cg_fail(c, "out of memory");
    cg_indent(b, ind);
    if (op == CDY_OP_SUM || op == CDY_OP_MEAN)
        cdy_buf_printf(b, "acc += (%s)%s;\n", acct, e);
    else if (op == CDY_OP_PROD)
        cdy_buf_printf(b, "acc *= (%s)%s;\n", acct, e);
    else {
        cdy_buf_printf(b, "acc = %s %c acc ? %s : acc;\n", e, op == CDY_OP_AMAX ? '>' : '<', e);
        if (flt) {
            cg_indent(b, ind);
            cdy_buf_printf(b, "nanf |= %s != %s;\n", e, e);
        }
    }
    while (--ind >= oind) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n");
    }
    ind = oind;
    const char *oct = cdy_dtype_table[odt].ctype;
    cg_indent(b, ind);
    cdy_buf_puts(b, "out_ptr0[");
    cg_red_offset(b, on, rn, first);
    if (op == CDY_OP_MEAN)
        cdy_buf_printf(b, "] = (%s)(acc / %lld.0);\n", oct, (long long)rnumel);
    else if (is_mm && flt)
        cdy_buf_printf(b, "] = nanf ? (%s)NAN : acc;\n", oct);
    else
        cdy_buf_printf(b, "] = (%s)acc;\n", oct);
    while (--ind > 0) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n");
    }
    cdy_buf_puts(b, "}\n");
    cg_kernel_end(plan, k, ops, nops);
    return 0;
}
