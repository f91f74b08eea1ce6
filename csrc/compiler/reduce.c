/* reduce.c - reduction nodes (kind 'R': sum, mean, amax, amin, prod, argmax,
 * argmin, any, all, count_nonzero, var, std, vector_norm, logsumexp over a dims mask,
 * keepdim): one kernel each, the pointwise prologue of the input recomputed
 * per element inside the reduced loops.  An argmax/argmin right after the
 * amax/amin of the same input and dims (torch.max(x, dim)) shares its kernel:
 * one pass stores both the values and the indices. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/cg.h"

/* How a reduction computes, one row per variant (an op, split by input kind
 * or norm order): X(variant, accumulator, init, update, omp clause, mid,
 * update of a second pass, its clause, result).  accumulator: 'i' the input's
 * C type, 'w' double for float input else int64, 'd' double, 'l' int64, 'b' int,
 * 'f' float.  prod of bfloat16 / float16 in eager's order rounds each product
 * to the dtype, as eager's does (its accumulator is the input's scalar_t: a 1-ulp lower product
 * than double's, 13.4375 not 13.375, is 6% off after an exp).
 * Templates: $e the element, $A the accumulator type, $N the reduced count,
 * $P param arg 3 (correction, norm order), $L / $H the input dtype's lowest /
 * highest value, $O the output's C type, $n the element's row-major index over
 * the reduced dims.  argmax/argmin: a pass for the max/min (NaN if any), a
 * pass for the first index holding it.  MEAN_WF, the mean of var_mean /
 * std_mean, is eager's Welford mean (WelfordOps in double, in the input's
 * order): sum / n but for an inf, which makes every later update inf - inf,
 * so NaN unless the one inf is the last element (all reduced indices at their
 * last, whatever eager's loop order), and for a float64 sum that overflows
 * where the Welford mean does not (then the sum of x / n).  A NULL clause: the reduced loop never
 * runs on several threads. */
/* var / std's second pass: the deviations dv from the first mean, their
 * squares m2 and their sum se, the sum of squares about the true mean m2 -
 * se^2 / n (the mean's rounding corrected: the corrected two-pass algorithm),
 * and exactly 0 where every deviation is the same (equal elements, whose mean
 * sum / n may be off by ulps: eager's Welford gives 0, a float64 row of 1e30
 * gave 1.4e14); NaN stays NaN. */
#define CG_RED_VAR_MID "const double mean = acc / $N.0;\n" \
    "double m2 = 0, se = 0, dlo = INFINITY, dhi = -INFINITY;"
#define CG_RED_VAR_UPD "{ const double dv = (double)$e - mean; m2 += dv * dv; se += dv; " \
    "dlo = dv < dlo ? dv : dlo; dhi = dv > dhi ? dv : dhi; }"
#define CG_RED_VAR_CLAUSE "reduction(+:m2) reduction(+:se) reduction(min:dlo) reduction(max:dhi)"
#define CG_RED_VAR_M2 "(m2 != m2 ? m2 : dlo == dhi ? 0.0 : " \
    "m2 - se * se / $N.0 < 0 ? 0.0 : m2 - se * se / $N.0)"

/* VAR_WF / STD_WF's second pass: eager's Welford update (WelfordOps in
 * double, one element at a time in the reduced loops' order), for a reduction
 * with several outputs whose rows eager reduces serially (fewer than
 * CG_RED_WF_MAX elements): bit for bit eager's variance, so equal variances
 * tie as in eager (argmin over var of 0/1 rows: 0.375 here, 0.37500000000000006
 * in eager for some orders of the same values); the first pass's sum is
 * only the mean partner's. */
#define CG_RED_WF_MID "double wm = 0, m2 = 0, wn = 0;"
#define CG_RED_WF_UPD "{ const double wx = (double)$e, wd = wx - wm; wn += 1.0; " \
    "wm += wd / wn; m2 += wd * (wx - wm); }"

#define CG_RED_VARIANTS(X)                                                   \
    X(SUM, 'w', "0", "acc += ($A)$e;", "reduction(+:acc)", NULL, NULL, NULL, "acc") \
    X(MEAN, 'w', "0", "acc += ($A)$e;", "reduction(+:acc)", NULL, NULL, NULL, "acc / $N.0") \
    X(MEAN_WF, 'w', "0", "acc += ($A)$e;", "reduction(+:acc)",                \
      "const double mean = acc / $N.0;\ndouble ni = 0, s2 = 0;",              \
      "ni += fabs((double)$e) == INFINITY ? ($n == $N - 1 ? 1.0 : 2.0) : 0.0; " \
      "s2 += (double)$e / $N.0;", "reduction(+:ni) reduction(+:s2)",          \
      "fabs(mean) != INFINITY ? mean : ni > 1.0 ? NAN : ni == 0.0 ? s2 : mean") \
    X(PROD, 'w', "1", "acc *= ($A)$e;", "reduction(*:acc)", NULL, NULL, NULL, "acc") \
    X(PROD_BF16, 'f', "1", "acc = cdy_rbf(acc * $e);", NULL, NULL, NULL, NULL, "acc") \
    X(PROD_F16, 'f', "1", "acc = cdy_rh(acc * $e);", NULL, NULL, NULL, NULL, "acc") \
    X(PROD_F32, 'f', "1", "acc *= $e;", NULL, NULL, NULL, NULL, "acc") \
    X(AMAX, 'i', "$L", "acc = $e > acc ? $e : acc;", "reduction(max:acc)", NULL, NULL, NULL, \
      "acc")                                                                 \
    X(AMIN, 'i', "$H", "acc = $e < acc ? $e : acc;", "reduction(min:acc)", NULL, NULL, NULL, \
      "acc")                                                                 \
    X(AMAX_F, 'i', "$L", "acc = $e > acc ? $e : acc; nanf |= $e != $e;",     \
      "reduction(max:acc) reduction(|:nanf)", NULL, NULL, NULL, "nanf ? ($O)NAN : acc") \
    X(AMIN_F, 'i', "$H", "acc = $e < acc ? $e : acc; nanf |= $e != $e;",     \
      "reduction(min:acc) reduction(|:nanf)", NULL, NULL, NULL, "nanf ? ($O)NAN : acc") \
    X(ARGMAX, 'i', "$L", "acc = $e > acc ? $e : acc;", "reduction(max:acc)",          \
      "int64_t idx = $N;", "if ($e == acc) idx = $n < idx ? $n : idx;", "reduction(min:idx)", \
      "idx")                                                                 \
    X(ARGMIN, 'i', "$H", "acc = $e < acc ? $e : acc;", "reduction(min:acc)",          \
      "int64_t idx = $N;", "if ($e == acc) idx = $n < idx ? $n : idx;", "reduction(min:idx)", \
      "idx")                                                                 \
    X(ARGMAX_F, 'i', "$L", "acc = $e > acc ? $e : acc; nanf |= $e != $e;",   \
      "reduction(max:acc) reduction(|:nanf)", "int64_t idx = $N;\nif (nanf) acc = ($A)NAN;", \
      "if (nanf ? $e != $e : $e == acc) idx = $n < idx ? $n : idx;", "reduction(min:idx)", \
      "idx")                                                                 \
    X(ARGMIN_F, 'i', "$H", "acc = $e < acc ? $e : acc; nanf |= $e != $e;",   \
      "reduction(min:acc) reduction(|:nanf)", "int64_t idx = $N;\nif (nanf) acc = ($A)NAN;", \
      "if (nanf ? $e != $e : $e == acc) idx = $n < idx ? $n : idx;", "reduction(min:idx)", \
      "idx")                                                                 \
    X(ANY, 'b', "0", "acc |= $e != 0;", "reduction(|:acc)", NULL, NULL, NULL, "acc") \
    X(ALL, 'b', "1", "acc &= $e != 0;", "reduction(&:acc)", NULL, NULL, NULL, "acc") \
    X(COUNT_NONZERO, 'l', "0", "acc += $e != 0;", "reduction(+:acc)", NULL, NULL, NULL, "acc") \
    X(VAR, 'd', "0", "acc += (double)$e;", "reduction(+:acc)", CG_RED_VAR_MID, CG_RED_VAR_UPD, \
      CG_RED_VAR_CLAUSE, CG_RED_VAR_M2 " / ($N.0 > $P ? $N.0 - $P : 0.0)")   \
    X(STD, 'd', "0", "acc += (double)$e;", "reduction(+:acc)", CG_RED_VAR_MID, CG_RED_VAR_UPD, \
      CG_RED_VAR_CLAUSE, "sqrt(" CG_RED_VAR_M2 " / ($N.0 > $P ? $N.0 - $P : 0.0))") \
    X(VAR_WF, 'd', "0", "acc += (double)$e;", "reduction(+:acc)", CG_RED_WF_MID, CG_RED_WF_UPD, \
      NULL, "m2 / ($N.0 > $P ? $N.0 - $P : 0.0)")                           \
    X(STD_WF, 'd', "0", "acc += (double)$e;", "reduction(+:acc)", CG_RED_WF_MID, CG_RED_WF_UPD, \
      NULL, "sqrt(m2 / ($N.0 > $P ? $N.0 - $P : 0.0))")                     \
    X(NORM2, 'd', "0", "acc += (double)$e * (double)$e;", "reduction(+:acc)", NULL, NULL, NULL, \
      "sqrt(acc)")                                                           \
    X(NORM1, 'd', "0", "acc += fabs((double)$e);", "reduction(+:acc)", NULL, NULL, NULL, "acc") \
    X(NORM0, 'd', "0", "acc += $e != 0;", "reduction(+:acc)", NULL, NULL, NULL, "acc") \
    X(NORMINF, 'd', "0", "acc = fabs((double)$e) > acc ? fabs((double)$e) : acc; "          \
      "nanf |= $e != $e;", "reduction(max:acc) reduction(|:nanf)", NULL, NULL, NULL,      \
      "nanf ? NAN : acc")                                                    \
    X(NORMNINF, 'd', "INFINITY", "acc = fabs((double)$e) < acc ? fabs((double)$e) : acc; " \
      "nanf |= $e != $e;", "reduction(min:acc) reduction(|:nanf)", NULL, NULL, NULL,      \
      "nanf ? NAN : acc")                                                    \
    X(NORMP, 'd', "0", "acc += pow(fabs((double)$e), $P);", "reduction(+:acc)", NULL, NULL, \
      NULL, "pow(acc, 1.0 / $P)")                                            \
    X(LOGSUMEXP, 'd', "(-INFINITY)", "acc = (double)$e > acc ? (double)$e : acc;",          \
      "reduction(max:acc)", "const double m = fabs(acc) == INFINITY ? 0.0 : acc;\ndouble s = 0;", \
      "s += exp((double)$e - m);", "reduction(+:s)", "log(s) + m")                         \
    X(LOGSUMEXP_F32, 'd', "(-INFINITY)", "acc = (double)$e > acc ? (double)$e : acc;",      \
      "reduction(max:acc)", "const double m = fabs(acc) == INFINITY ? 0.0 : acc;\ndouble s = 0;", \
      "s += (double)cdy_vexpf($e - (float)m);", "reduction(+:s)", "log(s) + m")      \
    X(LOGSUMEXP_BF16, 'd', "(-INFINITY)", "acc = (double)$e > acc ? (double)$e : acc;",     \
      "reduction(max:acc)", "const double m = fabs(acc) == INFINITY ? 0.0 : acc;\ndouble s = 0;", \
      "s += (double)cdy_rbf(cdy_vexpf(cdy_rbf($e - (float)m)));", "reduction(+:s)",        \
      "(double)cdy_rbf(logf(cdy_rbf((float)s))) + m")                                      \
    X(LOGSUMEXP_F16, 'd', "(-INFINITY)", "acc = (double)$e > acc ? (double)$e : acc;",      \
      "reduction(max:acc)", "const double m = fabs(acc) == INFINITY ? 0.0 : acc;\ndouble s = 0;", \
      "s += (double)cdy_rh(cdy_vexpf(cdy_rh($e - (float)m)));", "reduction(+:s)",          \
      "(double)cdy_rh(logf(cdy_rh((float)s))) + m")

/* Outputs per block of an outer reduction (see cg_red_block_body), at most. */
#define CG_RED_BLOCK 64
/* A kernel that also stores its producer (cg_red_pick_producers) takes its
 * last outer loop whole, up to this many outputs (8 KiB of double
 * accumulators): the producer's loads and store then run along contiguous
 * rows; blocks of 64 columns hopped a page per row (4 arrays of 256 x 1024
 * floats, 1 thread: 1.2x the two separate kernels' time). */
#define CG_RED_ROW_BLOCK 1024

typedef enum {
#define CG_X(v, a, i, u, c, m, u2, c2, r) CG_RED_##v,
    CG_RED_VARIANTS(CG_X)
#undef CG_X
    CG_RED_COUNT
} cg_red_variant;

typedef struct {
    char acc;
    const char *init, *update, *clause, *mid, *update2, *clause2, *result;
} cg_red_code;

static const cg_red_code cg_red_codes[] = {
#define CG_X(v, a, i, u, c, m, u2, c2, r) [CG_RED_##v] = {a, i, u, c, m, u2, c2, r},
    CG_RED_VARIANTS(CG_X)
#undef CG_X
};

/* The variables the mid statement of a two-pass variant declares for the
 * second pass and the result ("type name", comma-separated): arrays of them
 * in block mode (cg_red_block_body). */
static const char *const cg_red_state[CG_RED_COUNT] = {
    [CG_RED_ARGMAX] = "int64_t idx", [CG_RED_ARGMIN] = "int64_t idx",
    [CG_RED_ARGMAX_F] = "int64_t idx", [CG_RED_ARGMIN_F] = "int64_t idx",
    [CG_RED_MEAN_WF] = "double mean,double ni,double s2",
    [CG_RED_VAR] = "double mean,double m2,double se,double dlo,double dhi",
    [CG_RED_STD] = "double mean,double m2,double se,double dlo,double dhi",
    [CG_RED_VAR_WF] = "double wm,double m2,double wn", [CG_RED_STD_WF] = "double wm,double m2,double wn",
    [CG_RED_LOGSUMEXP] = "double m,double s", [CG_RED_LOGSUMEXP_F32] = "double m,double s",
    [CG_RED_LOGSUMEXP_BF16] = "double m,double s", [CG_RED_LOGSUMEXP_F16] = "double m,double s",
};

/* The second pass of argmax/argmin outside block mode: the test of the
 * element sought; the first one found ends the pass (goto found: a scan
 * that stops beats a vector min of int64 indices without AVX-512). */
static const char *const cg_red_find[CG_RED_COUNT] = {
    [CG_RED_ARGMAX] = "$e == acc", [CG_RED_ARGMIN] = "$e == acc",
    [CG_RED_ARGMAX_F] = "nanf ? $e != $e : $e == acc",
    [CG_RED_ARGMIN_F] = "nanf ? $e != $e : $e == acc",
};

/* The order p of a vector_norm node as a variant. */
static int cg_red_norm_variant(double p)
{
    if (p == 2)
        return CG_RED_NORM2;
    if (p == 1)
        return CG_RED_NORM1;
    if (p == 0)
        return CG_RED_NORM0;
    if (isinf(p))
        return p > 0 ? CG_RED_NORMINF : CG_RED_NORMNINF;
    return CG_RED_NORMP;
}

/* The param (arg 3) of node val as a double; 0 when it has none. */
static double cg_red_param(const cdy_graph *g, const cdy_value *val)
{
    if (val->nargs < 4)
        return 0;
    const cdy_value *p = &g->values[val->args[3]];
    return cdy_dtype_table[p->meta.dtype].is_float ? p->f : (double)p->i;
}

/* The variants of each reduction op (ops.def's vf vi columns): for float and
 * for integer / bool inputs. */
static const unsigned char cg_red_of[CDY_OP_COUNT][2] = {
#define CDY_RED(E, name, n, flags, rule, sig, check, vf, vi, pair, grad) \
    [CDY_OP_##E] = {CG_RED_##vf, CG_RED_##vi},
#include "ops/ops.def"
};

/* 1 if eager's loop for reduction node val multiplies along the reduced dims
 * in order: its input's innermost dim (the smallest stride of a dim over 1)
 * is not reduced (one output lane at a time), or fewer than 64 elements are
 * (an inner run shorter than 4 vectors of 16 or 32 halves is a scalar loop).
 * A longer inner reduction runs in 4 vectors of lanes, products shorter. */
static int cg_red_in_order(const cdy_graph *g, const cdy_value *val)
{
    const cdy_meta *m = &g->values[val->args[0]].meta;
    int64_t mask = g->values[val->args[1]].i, rn = 1;
    int in = -1;
    for (int d = 0; d < m->ndim; d++) {
        if (m->sizes[d] > 1 && (in < 0 || llabs(m->strides[d]) < llabs(m->strides[in])))
            in = d;
        rn *= (mask >> d) & 1 ? m->sizes[d] : 1;
    }
    return rn < 64 || (in >= 0 && !((mask >> in) & 1));
}

/* The count of elements node val reduces, from its input's sizes (a
 * symbolic dim is at least 2: sizes 0 and 1 are specialized). */
static int64_t cg_red_count(const cdy_graph *g, const cdy_value *val)
{
    const cdy_meta *m = &g->values[val->args[0]].meta;
    int64_t mask = g->values[val->args[1]].i, rn = 1;
    for (int d = 0; d < m->ndim; d++)
        rn *= (mask >> d) & 1 ? m->sizes[d] : 1;
    return rn;
}

/* The variant computing reduction node v: its op's, NORMP by the order p,
 * NORM1 for a norm (order not 0) of one element, |x| exactly as eager's
 * (pow(pow(|x|, 3), 1 / 3.) is off by an ulp, sqrt(x * x) overflows),
 * LOGSUMEXP's float32 twin for float32 input and rounding twins for bfloat16
 * / float16 (eager's composite rounds x - max, exp, the sum and log to the
 * input's dtype, each step: matched exactly, not once at the end), PROD's
 * rounding twins for bfloat16 / float16 / float32 where eager multiplies in
 * order in the input's type (a float32 product overflows to inf where a double
 * one would not: 3.4e38 * 4.2 * 1e-40; else double: eager's lane order is not
 * reproduced, and rounding in order would be further off than it). */
static int cg_red_variant_of(const cdy_graph *g, int v)
{
    const cdy_value *val = &g->values[v];
    int idt = g->values[val->args[0]].meta.dtype, flt = cdy_dtype_table[idt].is_float;
    int r = cg_red_of[val->op][!flt];
    if (r == CG_RED_NORMP) {
        r = cg_red_norm_variant(cg_red_param(g, val));
        return r != CG_RED_NORM0 && cg_red_count(g, val) == 1 ? CG_RED_NORM1 : r;
    }
    if (r == CG_RED_PROD && (cdy_dtype_lowp(idt) || idt == CDY_DT_FLOAT32) && cg_red_in_order(g, val))
        return idt == CDY_DT_BFLOAT16 ? CG_RED_PROD_BF16
               : idt == CDY_DT_FLOAT16 ? CG_RED_PROD_F16 : CG_RED_PROD_F32;
    if (r == CG_RED_LOGSUMEXP && cdy_dtype_lowp(idt))
        return idt == CDY_DT_BFLOAT16 ? CG_RED_LOGSUMEXP_BF16 : CG_RED_LOGSUMEXP_F16;
    return r == CG_RED_LOGSUMEXP && idt == CDY_DT_FLOAT32 ? CG_RED_LOGSUMEXP_F32 : r;
}

/* Check node v's args: a tensor input, an int dims mask within its rank, a
 * bool keepdim, a number param (4-arg ops); 0 or -1 with a message. */
static int cg_check_red_args(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    const char *name = cdy_op_table[val->op].name;
    for (int a = 0; a < val->nargs; a++)
        if (val->args[a] < 0 || val->args[a] >= v)
            return cg_fail(c, "value %d (%s): arg %d is not earlier in the graph", v, name, a);
    const cdy_value *in = &c->g->values[val->args[0]];
    const cdy_value *mk = &c->g->values[val->args[1]];
    const cdy_value *kd = &c->g->values[val->args[2]];
    if (in->kind == CDY_VAL_SCALAR || mk->kind != CDY_VAL_SCALAR || kd->kind != CDY_VAL_SCALAR ||
        cdy_dtype_table[mk->meta.dtype].is_float || cdy_dtype_table[kd->meta.dtype].is_float)
        return cg_fail(c, "value %d (%s): args must be a tensor, an int mask and a bool", v, name);
    if (val->nargs > 3 && c->g->values[val->args[3]].kind != CDY_VAL_SCALAR)
        return cg_fail(c, "value %d (%s): arg 3 must be a number", v, name);
    if (mk->i < 0 || mk->i >= ((int64_t)1 << in->meta.ndim))
        return cg_fail(c, "value %d (%s): dims mask %lld out of range", v, name, (long long)mk->i);
    return 0;
}

/* Check reduction node v: its args (cg_check_red_args), the result's sizes
 * and dtype those of torch's reduction. */
int cg_check_reduce(cg_ctx *c, int v)
{
    const cdy_value *val = &c->g->values[v];
    const char *name = cdy_op_table[val->op].name;
    if (cg_check_meta(c, v, &val->meta) || cg_check_red_args(c, v))
        return -1;
    const cdy_meta *im = &c->g->values[val->args[0]].meta, *om = &val->meta;
    int64_t mask = c->g->values[val->args[1]].i;
    int keep = c->g->values[val->args[2]].i != 0, od = 0;
    for (int d = 0; d < im->ndim; d++) {
        int red = (int)((mask >> d) & 1);
        if (red && !keep)
            continue;
        if (od >= om->ndim || om->sizes[od] != (red ? 1 : im->sizes[d]))
            return cg_fail(c, "value %d (%s): result sizes are not the reduction's", v, name);
        od++;
    }
    if (od != om->ndim)
        return cg_fail(c, "value %d (%s): result rank %d, expected %d", v, name, om->ndim, od);
    int want = cdy_op_reduce_dtype(val->op, im->dtype);
    if (want == CDY_DT_NONE || om->dtype != want)
        return cg_fail(c, "value %d (%s): dtype %s -> %s is not supported", v, name,
                       cdy_dtype_table[im->dtype].name, cdy_dtype_table[om->dtype].name);
    return 0;
}

/* The amax/amin node whose kernel argmax/argmin node v shares (the node just
 * before it, over the same input, dims and keepdim), or -1. */
static int cg_red_partner(const cdy_graph *g, int v)
{
    if (v < 1 || v >= g->nvalues || g->values[v].kind != CDY_VAL_NODE ||
        g->values[v - 1].kind != CDY_VAL_NODE)
        return -1;
    const cdy_value *a = &g->values[v], *p = &g->values[v - 1];
    int want = cdy_op_table[a->op].pair;
    if (want < 0 || p->op != want || p->nargs != 3 || a->nargs != 3 || p->args[0] != a->args[0])
        return -1;
    for (int i = 1; i < 3; i++)
        if (g->values[p->args[i]].i != g->values[a->args[i]].i)
            return -1;
    return v - 1;
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

/* The C literal of the lowest (is_max) or highest value of dtype dt. */
static const char *cg_red_init(int dt, int is_max)
{
    static const char *lo[] = {"0", "0", "(-128)", "(-32768)", "(-2147483647 - 1)",
                               "(-9223372036854775807LL - 1)", "(-INFINITY)", "(-INFINITY)",
                               "(-INFINITY)", "(-INFINITY)"};
    static const char *hi[] = {"1", "255", "127", "32767", "2147483647",
                               "9223372036854775807LL", "INFINITY", "INFINITY", "INFINITY",
                               "INFINITY"};
    return is_max ? lo[dt] : hi[dt];
}

/* What the templates of one reduction kernel expand to. */
typedef struct {
    const char *e, *acct, *param, *octype, *lin;
    int idt;
    int64_t rnumel;
    const char *rn_text;         /* symbolic sizes: the reduced count's C (cdy_rn), else NULL */
} cg_red_env;

/* Append template t expanded in env (see CG_RED_VARIANTS); a line after
 * the first starts at indentation ind. */
static void cg_red_expand(cdy_buf *b, const char *t, const cg_red_env *env, int ind)
{
    for (const char *p = t; *p; p++) {
        if (*p == '\n') {
            cdy_buf_puts(b, "\n");
            cg_indent(b, ind);
            continue;
        }
        if (*p != '$' || !p[1]) {
            char ch[2] = {*p, 0};
            cdy_buf_puts(b, ch);
            continue;
        }
        switch (*++p) {
        case 'e': cdy_buf_puts(b, env->e); break;
        case 'A': cdy_buf_puts(b, env->acct); break;
        case 'N':
            if (env->rn_text && p[1] == '.' && p[2] == '0') {   /* $N.0: as a double */
                cdy_buf_printf(b, "(double)%s", env->rn_text);
                p += 2;
            }
            else if (env->rn_text)
                cdy_buf_puts(b, env->rn_text);
            else
                cdy_buf_printf(b, "%lld", (long long)env->rnumel);
            break;
        case 'P': cdy_buf_puts(b, env->param); break;
        case 'L': cdy_buf_puts(b, cg_red_init(env->idt, 1)); break;
        case 'H': cdy_buf_puts(b, cg_red_init(env->idt, 0)); break;
        case 'O': cdy_buf_puts(b, env->octype); break;
        case 'n': cdy_buf_puts(b, env->lin); break;
        default: break;
        }
    }
}

/* Append template t expanded in env as lines at indentation ind. */
static void cg_red_lines(cdy_buf *b, const char *t, const cg_red_env *env, int ind)
{
    cg_indent(b, ind);
    cg_red_expand(b, t, env, ind);
    cdy_buf_puts(b, "\n");
}

/* The accumulator's C type for code rc over input dtype idt. */
static const char *cg_red_acct(const cg_red_code *rc, int idt)
{
    switch (rc->acc) {
    case 'i': return cdy_dtype_table[idt].cctype;
    case 'w': return cdy_dtype_table[idt].is_float ? "double" : "int64_t";
    case 'd': return "double";
    case 'l': return "int64_t";
    case 'f': return "float";
    default: return "int";
    }
}

/* The row-major index of the element over reduced loops rn (their order is
 * the dims' order: cg_build_nest keeps ties of the zero output strides in dim
 * order); NULL on out of memory. */
static char *cg_red_linear(cg_ctx *c, const cg_nest *rn)
{
    cdy_buf b = {0};
    int64_t st = 1;
    if (c->sym && rn->sym) {             /* runtime sizes: Horner over the loops' sizes */
        char *h = "0";
        for (int d = 0; d < rn->ndim && h; d++)
            h = d ? cg_strf(c, "(%s) * %s + r%d", h, cg_sym_size_text(c, rn, d), d)
                  : cg_strf(c, "r%d", d);
        return h;
    }
    for (int d = rn->ndim - 1; d >= 0 && !(c->sym && rn->sym); d--) {
        if (st == 1)
            cdy_buf_printf(&b, "%sr%d", b.len ? " + " : "", d);
        else
            cdy_buf_printf(&b, "%sr%d * %lldLL", b.len ? " + " : "", d, (long long)st);
        st *= rn->size[d];
    }
    char *s = cdy_buf_take(&b);
    char *r = cg_strf(c, "%s", s && *s ? s : "0");
    free(s);
    return r;
}

/* One reduction kernel being emitted: its node(s), loops and parameters. */
#define CG_RED_LANES 16   /* partial sums of a float32 row sum (cg_red_lanes) */
#define CG_RED_CHUNK 256  /* elements a float lane set sums before its flush into double */

typedef struct {
    int v;                       /* the node whose variant runs */
    int nout;
    int outs[2];                 /* outputs: [partner amax/amin,] v */
    int in;                      /* the value whose sizes the loops walk: v's input, or the
                                  * producer pstore when v reads it through a reshape */
    int64_t mask;                /* the dims of `in` reduced */
    int pstore;                  /* the pointwise value this kernel also computes and stores
                                  * as it reads it (cg_red_pick_producers), or -1 */
    int ngout;                   /* the kernel's group: outs, then pstore */
    int gouts[3];
    cg_operand *ops;
    int nops, first;
    cg_nest *on, *rn;
    int64_t inumel, onumel;
    int par_out, par_in;
    int block;                   /* outer reduction: the last outer loop runs in blocks */
    int bw;                      /* ... of this many outputs (cg_red_block_width) */
    int rsplit;                  /* block mode, rows split across the threads: per-thread
                                  * partial sums of every column, then combined
                                  * (cg_red_use_rsplit) */
    int copy;                    /* which copy of the loops (symbolic: parallel 0, serial 1):
                                  * argmax's label found<copy> is unique in the kernel */
    int lanes;                   /* the first pass sums float lanes (cg_red_lanes) */
    int prefetch;                /* ... prefetching the row ahead (cg_red_prefetches) */
    int variant;
    cg_red_env env;
    /* symbolic sizes (symk.c): the reduced count's expression (-1: a constant),
     * the parallel loop (par_out / par_in as sym_par says) when par_cond holds,
     * float lanes when lanes_cond holds (NULL: never), decided per call */
    int rnumel_expr;
    int sym_par_out, sym_par_in;
    const char *par_cond, *lanes_cond;
} cg_red_kernel;

/* Per dim d of kernel r's input space, the dim of v's result it walks (odim[d],
 * -1 for a reduced one without keepdim).  Through a reshape (r->in is not v's
 * input) the kept dims are the last ones of both. */
static void cg_red_out_dims(const cdy_graph *g, const cg_red_kernel *r, int *odim)
{
    const cdy_value *val = &g->values[r->v];
    const cdy_meta *im = &g->values[r->in].meta;
    int keep = g->values[val->args[2]].i != 0, reshaped = r->in != val->args[0];
    for (int d = 0, od = 0; d < im->ndim; d++) {
        int red = (int)((r->mask >> d) & 1);
        odim[d] = reshaped ? (red ? -1 : val->meta.ndim - (im->ndim - d))
                           : (red && !keep ? -1 : od);
        od += !red || keep;
    }
}

/* Operands, outer and reduced loop nests of kernel r (outputs r->outs, and
 * r->pstore stored with its own strides); 0 or -1. */
static int cg_red_setup(cg_ctx *c, cg_red_kernel *r)
{
    const cdy_graph *g = c->g;
    const cdy_value *val = &g->values[r->v];
    const cdy_meta *im = &g->values[r->in].meta;
    int keep = g->values[val->args[2]].i != 0, odim[CDY_MAX_NDIM];
    int64_t osz[CDY_MAX_NDIM], rsz[CDY_MAX_NDIM];
    r->ops = cdy_arena_alloc(&c->arena, sizeof(cg_operand) * CG_MAX_OPS);
    r->on = cdy_arena_alloc(&c->arena, sizeof(cg_nest));
    r->rn = cdy_arena_alloc(&c->arena, sizeof(cg_nest));
    if (!r->ops || !r->on || !r->rn)
        return cg_fail(c, "out of memory");
    r->ngout = r->nout;
    for (int j = 0; j < r->nout; j++)
        r->gouts[j] = r->outs[j];
    if (r->pstore >= 0)
        r->gouts[r->ngout++] = r->pstore;
    cg_group grp = {im->ndim, im->sizes, r->ngout, r->gouts};
    cg_mark_live(c, &grp);
    if (r->in != val->args[0])   /* the reshape of pstore: not loaded, pstore computed */
        c->live[val->args[0]] = 0;
    if ((r->nops = cg_operands(c, &grp, r->ops)) < 0)
        return -1;
    r->first = cg_first_out(r->ops, r->nops);
    cg_red_out_dims(g, r, odim);
    r->env.rnumel = r->inumel = 1;
    for (int d = 0; d < im->ndim; d++) {
        int red = (int)((r->mask >> d) & 1);
        r->inumel *= im->sizes[d];
        r->env.rnumel *= red ? im->sizes[d] : 1;
        osz[d] = red ? 1 : im->sizes[d];
        rsz[d] = red ? im->sizes[d] : 1;
        for (int j = 0; j < r->nout; j++) {
            const cdy_meta *om = &g->values[r->outs[j]].meta;
            r->ops[r->first + j].stride[d] =
                red || om->sizes[odim[d]] == 1 ? 0 : om->strides[odim[d]];
        }
    }
    r->onumel = cdy_meta_numel(&val->meta);
    cg_group og = {im->ndim, osz, r->ngout, r->gouts}, rg = {im->ndim, rsz, r->ngout, r->gouts};
    cg_build_nest(&og, r->ops, r->nops, r->on);
    cg_build_nest(&rg, r->ops, r->nops, r->rn);
    return c->sym ? cg_sym_red_nests(c, r->in, r->mask, keep, r->ops, r->nops, r->on, r->rn,
                                     &r->rnumel_expr)
                  : 0;
}

/* Print reduction kernel kk in the post-fusion IR. */
void cg_print_reduce(cg_ctx *c, const kir_kernel *kk)
{
    const cg_red_kernel *r = kk->x;
    int k = kk->number;
    const cdy_graph *g = c->g;
    const cdy_value *val = &g->values[r->v];
    const cdy_meta *im = &g->values[r->in].meta;
    cdy_buf *ir = &c->ir_post;
    const char *name = cdy_op_table[val->op].name;
    cdy_buf_printf(ir, "kernel_%d: reduction %%%d %s of %%%d ", k, r->v, name, r->in);
    cg_ir_dims(ir, im->sizes, im->ndim);
    cdy_buf_printf(ir, " over dims mask 0x%llx%s -> ", (long long)r->mask,
                   g->values[val->args[2]].i ? " keepdim" : "");
    cg_ir_dims(ir, val->meta.sizes, val->meta.ndim);
    if (r->nout > 1)
        cdy_buf_printf(ir, " (and its values %%%d in the same pass)", r->outs[0]);
    cdy_buf_puts(ir, "; outer loops ");
    cg_ir_dims(ir, r->on->size, r->on->ndim);
    cdy_buf_puts(ir, ", reduced loops ");
    cg_ir_dims(ir, r->rn->size, r->rn->ndim);
    cdy_buf_printf(ir, ", accumulator %s%s", r->env.acct,
                   cg_red_codes[r->variant].update2 ? ", two passes" : "");
    if (r->block)
        cdy_buf_printf(ir, ", outer reduction: the last outer loop in blocks of %d innermost "
                       "(accumulator arrays)", r->bw);
    if (r->rsplit)
        cdy_buf_puts(ir, ", rows split across the threads (partial sums per thread, combined "
                         "per column)");
    if (r->pstore >= 0)
        cdy_buf_printf(ir, "; its input's producer %%%d computed here and stored as it is "
                           "summed (no kernel of its own)%s", r->pstore,
                       r->in != val->args[0] ? ", the reshape between them bypassed" : "");
    cdy_buf_puts(ir, "\n");
    cg_ir_fuses(c, ir, kk);
    for (int o = 0; o < r->nops; o++) {
        cdy_buf_puts(ir, r->ops[o].is_out ? "  store " : "  load  ");
        cg_ir_param(ir, r->ops, r->nops, o);
        cdy_buf_puts(ir, "\n");
    }
    cdy_buf_printf(ir, "  parallel: %s\n",
                   r->par_out ? "yes: omp parallel for over the outer loop"
                   : r->par_in ? "yes: omp parallel for reduction over the reduced loop"
                               : "no: small, too few outputs, or an index reduction");
    cdy_buf_printf(&c->ir_dec, "  kernel_%d is a separate kernel: reduction %%%d %s (values "
                               "before it are realized first; its prologue is fused)\n",
                   k, r->v, name);
    if (r->pstore >= 0)
        cdy_buf_printf(&c->ir_dec, "  %%%d has no kernel of its own: kernel_%d computes and "
                                   "stores it in its pass (each element once, on the thread "
                                   "summing its row)\n", r->pstore, k);
}

/* Block variables (CG_RV_*): the accumulator (and NaN flag), the state of
 * a two-pass variant (cg_red_state). */
enum { CG_RV_ACC = 1, CG_RV_STATE = 2 };

/* In block mode, emit for block element j the copies of the variables in
 * `which`: `T name = name_b[j];` (mode 'l'), `name_b[j] = name;` ('s'), or
 * the arrays `T name_b[r->bw];` ('d'). */
static void cg_red_block_vars(cg_ctx *c, const cg_red_kernel *r, int ind, int which, char mode)
{
    char types[8][16], names[8][16];
    int n = 0;
    if (which & CG_RV_ACC) {
        snprintf(types[n], sizeof(types[0]), "%s", r->env.acct);
        snprintf(names[n++], sizeof(names[0]), "acc");
        if (strstr(cg_red_codes[r->variant].update, "nanf")) {
            snprintf(types[n], sizeof(types[0]), "int");
            snprintf(names[n++], sizeof(names[0]), "nanf");
        }
    }
    const char *st = which & CG_RV_STATE ? cg_red_state[r->variant] : NULL;
    for (const char *p = st; p && *p && n < 8; n++) {
        int k = (int)strcspn(p, ","), sp = k;
        while (sp > 0 && p[sp - 1] != ' ')
            sp--;
        snprintf(types[n], sizeof(types[0]), "%.*s", sp > 0 ? sp - 1 : 0, p);
        snprintf(names[n], sizeof(names[0]), "%.*s", k - sp, p + sp);
        p += k + (p[k] == ',');
    }
    cg_indent(&c->src, ind);
    for (int i = 0; i < n; i++) {
        const char *sep = i ? " " : "";
        if (mode == 'l')
            cdy_buf_printf(&c->src, "%s%s %s = %s_b[j];", sep, types[i], names[i], names[i]);
        else if (mode == 's')
            cdy_buf_printf(&c->src, "%s%s_b[j] = %s;", sep, names[i], names[i]);
        else
            cdy_buf_printf(&c->src, "%s%s %s_b[%d];", sep, types[i], names[i], r->bw);
    }
    cdy_buf_puts(&c->src, "\n");
}

/* 1 if pass `pass` of kernel r sums float32 (bfloat16, float16) elements over an innermost
 * reduced loop that runs on one thread and whose length is a multiple of
 * CG_RED_LANES: then CG_RED_LANES independent float partial sums let it
 * vectorize without one long dependency chain (a single accumulator made the
 * row sum latency-bound).  Each lane adds at most CG_RED_CHUNK / CG_RED_LANES
 * floats before it is flushed into a double lane, so the result stays within
 * eager's cascaded float sum's accuracy; summing every element in double cost
 * two conversions per 8 floats and ran 1.3-1.6x slower than eager on a
 * 4096x1024 row sum, and float lanes over the whole row lost accuracy. */
static int cg_red_lanes(const cg_red_kernel *r, int pass)
{
    int v = r->variant;
    int64_t n = r->rn->ndim > 0 ? r->rn->size[r->rn->ndim - 1] : 0;
    return !pass && !r->block && (v == CG_RED_SUM || v == CG_RED_MEAN) &&
           (r->env.idt == CDY_DT_FLOAT32 || cdy_dtype_lowp(r->env.idt)) &&
           !(r->par_in && r->rn->ndim == 1) &&
           n >= 2 * CG_RED_LANES && n % CG_RED_LANES == 0;
}

/* Float lane row sums over an input of this many bytes or more prefetch the
 * row CG_RED_PREFETCH_ROWS ahead, chunk by chunk: a 4 KiB row is one page, too
 * short for Zen 3's hardware prefetcher to run ahead (4096x1024 floats on a
 * 2-core Zen 3, C harness medians: 417 -> 254 us at 2 rows ahead, 297 at 1).
 * On CPUs with AVX-512 the prefetches cost time: the hardware runs ahead by
 * itself and they take load slots (C harness medians, prefetch -> none: a
 * 2-core Zen 4, 4096x1024 floats 122 -> 97 us, 16384x1024 1678 -> 1410; a
 * 16-core Xeon, 2 threads 303 -> 292 and 1252 -> 1214, 16 threads 39 -> 33
 * and 382 -> 381), so they are compiled only where __AVX512F__ is not
 * defined (CG_RED_PREFETCH_IF), the CPU gcc builds for (-march=native). */
#define CG_RED_PREFETCH_BYTES (4 << 20)
#define CG_RED_PREFETCH_ROWS 2
#define CG_RED_PREFETCH_IF "#ifndef __AVX512F__\n"

/* 1 if kernel r's float lane sums prefetch the row CG_RED_PREFETCH_ROWS
 * ahead: a single reduced dim, outer loops, not parallel inside, a large input. */
static int cg_red_prefetches(const cg_red_kernel *r)
{
    return r->on->ndim > 0 && r->rn->ndim == 1 && !r->par_in &&
           r->inumel * 4 >= CG_RED_PREFETCH_BYTES;
}

/* Emit the prefetch of the current chunk (r0b..r0e) of the row
 * CG_RED_PREFETCH_ROWS ahead in the last outer loop, for each input read
 * contiguously along a single reduced dim (r->prefetch). */
static void cg_red_prefetch(cg_ctx *c, const cg_red_kernel *r, int ind)
{
    cdy_buf *b = &c->src;
    int lo = r->on->ndim - 1;
    if (!r->prefetch)
        return;
    for (int o = 0; o < r->nops; o++) {
        int64_t s = r->on->stride[o][lo];
        if (r->ops[o].is_out || s == 0 || r->rn->stride[o][0] != 1)
            continue;
        int es = cdy_dtype_table[r->ops[o].dtype].size;
        cdy_buf_puts(b, CG_RED_PREFETCH_IF);
        cg_indent(b, ind);
        cdy_buf_printf(b, "if (i%d + %d < %lldLL) {\n", lo, CG_RED_PREFETCH_ROWS,
                       (long long)r->on->size[lo]);
        cg_indent(b, ind + 1);
        cdy_buf_puts(b, "const int64_t r0 = r0b;\n");
        cg_indent(b, ind + 1);
        cdy_buf_printf(b, "const char *pf = (const char *)&in_ptr%d[", o);
        cg_red_offset(b, r->on, r->rn, o);
        cdy_buf_printf(b, " + %lldLL];\n", (long long)(CG_RED_PREFETCH_ROWS * s));
        cg_indent(b, ind + 1);
        if (r->rn->size[0] % CG_RED_CHUNK == 0)   /* whole chunks: a constant count, unrolled */
            cdy_buf_printf(b, "for (int64_t l = 0; l < %d; l += 64) __builtin_prefetch(pf + l, 0, 2);\n",
                           CG_RED_CHUNK * es);
        else
            cdy_buf_printf(b, "for (int64_t l = 0; l < (r0e - r0b) * %d; l += 64) "
                              "__builtin_prefetch(pf + l, 0, 2);\n", es);
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n#endif\n");
    }
}

/* Emit one pass over the reduced loops of r at indentation ind: the loads,
 * the prologue, `update` (clause: its OpenMP reduction, or NULL).  In block
 * mode the innermost loop is over the block (j, the last outer loop's index
 * i<last> = ib + j), the accumulators read from and written to arrays. */
static int cg_red_pass(cg_ctx *c, const cg_red_kernel *r, int pass, int ind)
{
    const cg_red_code *rc = &cg_red_codes[r->variant];
    const char *update = pass ? rc->update2 : rc->update, *clause = pass ? rc->clause2 : rc->clause;
    const char *find = pass && !r->block ? cg_red_find[r->variant] : NULL;
    cdy_buf *b = &c->src;
    if (find)
        clause = NULL;
    const cdy_graph *g = c->g;
    const cg_nest *rn = r->rn;
    int oind = ind, last = r->on->ndim - 1, lanes = pass ? 0 : r->lanes, rl = rn->ndim - 1;
    for (int d = 0; d < rn->ndim; d++, ind++) {
        int outer = d == 0 && r->par_in && clause, inner = d == rn->ndim - 1 && clause &&
                                                           !r->block;
        if (inner && lanes) {   /* float lanes per chunk, flushed into double lanes */
            const char *n = cg_sym_size_text(c, rn, d);
            cg_indent(b, ind);
            cdy_buf_printf(b, "double accv[%d] = {0};\n", CG_RED_LANES);
            cg_indent(b, ind);
            cdy_buf_printf(b, "for (int64_t r%db = 0; r%db < %s; r%db += %d) {\n", d, d, n, d,
                           CG_RED_CHUNK);
            cg_indent(b, ++ind);
            cdy_buf_printf(b, "float accf[%d] = {0};\n", CG_RED_LANES);
            cg_indent(b, ind);
            cdy_buf_printf(b, "const int64_t r%de = r%db + %d < %s ? r%db + %d : %s;\n", d, d,
                           CG_RED_CHUNK, n, d, CG_RED_CHUNK, n);
            cg_red_prefetch(c, r, ind);
            cg_indent(b, ind);
            cdy_buf_printf(b, "for (int64_t r%dc = r%db; r%dc < r%de; r%dc += %d) {\n", d, d, d, d, d,
                           CG_RED_LANES);
            cg_indent(b, ++ind);
            cdy_buf_puts(b, "#pragma omp simd\n");
            cg_indent(b, ind);
            cdy_buf_printf(b, "for (int64_t r%dj = 0; r%dj < %d; r%dj++) {\n", d, d,
                           CG_RED_LANES, d);
            cg_indent(b, ind + 1);
            cdy_buf_printf(b, "const int64_t r%d = r%dc + r%dj;\n", d, d, d);
            cg_indent(b, ind + 1);
            /* -0.0f: x + -0.0f is x for every x, so GCC drops the add (x + 0.0f
             * is not: -0.0f + 0.0f is 0.0f); the lane's value is the same */
            cdy_buf_puts(b, "float acc = -0.0f;   /* this element's share of lane r");
            cdy_buf_printf(b, "%dj */\n", d);
            continue;
        }
        cg_indent(b, outer || inner ? ind : 0);
        if (outer)
            cdy_buf_printf(b, "#pragma omp parallel for%s num_threads(NTHREADS) schedule(static) "
                              "%s\n", rn->ndim == 1 ? " simd" : "", clause);
        else if (inner)
            cdy_buf_printf(b, "#pragma omp simd %s\n", clause);
        cg_indent(b, ind);
        if (r->rsplit && d == 0)
            cdy_buf_puts(b, "for (int64_t r0 = rlo; r0 < rhi; r0++) {\n");
        else
            cdy_buf_printf(b, "for (int64_t r%d = 0; r%d < %s; r%d++) {\n", d, d,
                           cg_sym_size_text(c, rn, d), d);
    }
    if (r->block) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "#pragma omp simd\n");
        cg_indent(b, ind);
        cdy_buf_printf(b, "for (int64_t j = 0; j < nb; j++) {\n");
        cg_indent(b, ++ind);
        cdy_buf_printf(b, "const int64_t i%d = ib + j;\n", last);
    }
    cg_indent(b, ind);
    cdy_buf_puts(b, "{\n");
    ind++;
    if (r->block)
        cg_red_block_vars(c, r, ind, pass ? CG_RV_ACC | CG_RV_STATE : CG_RV_ACC, 'l');
    for (int o = 0; o < r->nops; o++) {
        if (r->ops[o].is_out)
            continue;
        cg_indent(b, ind);
        cdy_buf_printf(b, "const %s x%d = %s(in_ptr%d[", cdy_dtype_table[r->ops[o].dtype].cctype, o,
                       cg_ld(r->ops[o].dtype), o);
        cg_red_offset(b, r->on, rn, o);
        cdy_buf_puts(b, "]);\n");
    }
    for (int u = 0; u < g->nvalues; u++)
        if ((!c->in_group[u] || u == r->pstore) && c->live[u] &&
            g->values[u].kind == CDY_VAL_NODE && !cg_is_leaf(c, u) && cg_emit_node(c, u, ind))
            return -1;
    if (r->pstore >= 0 && !pass) {   /* the producer's store: each element visited once */
        int o = r->first + r->nout;
        cg_indent(b, ind);
        cdy_buf_printf(b, "out_ptr%d[", r->nout);
        cg_red_offset(b, r->on, rn, o);
        cdy_buf_printf(b, "] = %s(t%d);\n", cg_st(r->ops[o].dtype), r->pstore);
    }
    if (find) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "if (");
        cg_red_expand(b, find, &r->env, ind);
        cdy_buf_puts(b, ") {\n");
        cg_indent(b, ind + 1);
        cdy_buf_puts(b, "idx = ");
        cg_red_expand(b, "$n", &r->env, ind);
        cdy_buf_puts(b, ";\n");
        cg_indent(b, ind + 1);
        cdy_buf_printf(b, "goto found%d;\n", r->copy);
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n");
    } else {
        cg_red_env env = r->env;
        if (lanes)
            env.acct = "float";   /* the element's share, added to a float lane */
        cg_red_lines(b, update, &env, ind);
    }
    if (r->block)
        cg_red_block_vars(c, r, ind, pass ? CG_RV_STATE : CG_RV_ACC, 's');
    if (lanes) {
        cg_indent(b, ind);
        cdy_buf_printf(b, "accf[r%dj] += acc;\n", rl);
    }
    while (--ind >= oind) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n");
        if (lanes && ind == oind + rl + 1) {   /* closed a chunk: flush its float lanes */
            cg_indent(b, ind);
            cdy_buf_puts(b, "#pragma omp simd\n");
            cg_indent(b, ind);
            cdy_buf_printf(b, "for (int j = 0; j < %d; j++)\n", CG_RED_LANES);
            cg_indent(b, ind + 1);
            cdy_buf_puts(b, "accv[j] += (double)accf[j];\n");
        }
        if (lanes && ind == oind + rl) {   /* closed the row: add up the double lanes */
            cg_indent(b, ind);
            cdy_buf_printf(b, "for (int j = 0; j < %d; j++)\n", CG_RED_LANES);
            cg_indent(b, ind + 1);
            cdy_buf_puts(b, "acc += accv[j];\n");
        }
    }
    if (find) {
        cg_indent(b, oind);
        cdy_buf_printf(b, "found%d:;\n", r->copy);
    }
    return 0;
}

/* Emit the stores of kernel r's outputs at indentation ind: the result of
 * its variant, and the partner amax/amin's value (acc). */
static void cg_red_stores(cg_ctx *c, const cg_red_kernel *r, int ind)
{
    cdy_buf *b = &c->src;
    for (int j = 0; j < r->nout; j++) {
        int odt = c->g->values[r->outs[j]].meta.dtype;
        cg_indent(b, ind);
        cdy_buf_printf(b, "out_ptr%d[", j);
        cg_red_offset(b, r->on, r->rn, r->first + j);
        cdy_buf_printf(b, "] = %s((%s)(", cg_st(odt), cdy_dtype_table[odt].cctype);
        if (r->outs[j] == r->v)
            cg_red_expand(b, cg_red_codes[r->variant].result, &r->env, ind);
        else
            cdy_buf_puts(b, "acc");
        cdy_buf_puts(b, "));\n");
    }
}

/* Emit the body of kernel r per output element at indentation ind: the
 * accumulator, the pass(es), the stores. */
static int cg_red_body(cg_ctx *c, const cg_red_kernel *r, int ind)
{
    cdy_buf *b = &c->src;
    const cg_red_code *rc = &cg_red_codes[r->variant];
    cg_indent(b, ind);
    cdy_buf_printf(b, "%s acc = ", r->env.acct);
    cg_red_expand(b, rc->init, &r->env, ind);
    cdy_buf_puts(b, ";\n");
    if (strstr(rc->update, "nanf")) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "int nanf = 0;\n");
    }
    if (cg_red_pass(c, r, 0, ind))
        return -1;
    if (rc->mid)
        cg_red_lines(b, rc->mid, &r->env, ind);
    if (rc->update2 && cg_red_pass(c, r, 1, ind))
        return -1;
    cg_red_stores(c, r, ind);
    return 0;
}

/* Emit the body of kernel r in block mode at indentation ind (inside the
 * outer loops but the last, which it runs in blocks of r->bw): arrays
 * of accumulators, one pass over the reduced loops with the block innermost
 * (contiguous: it vectorizes), the stores. */
static int cg_red_block_body(cg_ctx *c, const cg_red_kernel *r, int ind)
{
    cdy_buf *b = &c->src;
    const cg_red_code *rc = &cg_red_codes[r->variant];
    int last = r->on->ndim - 1;
    const char *n = cg_sym_size_text(c, r->on, last);
    cg_indent(b, ind);
    cdy_buf_printf(b, "const int64_t nb = %s - ib < %d ? %s - ib : %d;\n", n, r->bw, n, r->bw);
    cg_red_block_vars(c, r, ind, CG_RV_ACC | CG_RV_STATE, 'd');
    cg_indent(b, ind);
    cdy_buf_printf(b, "for (int64_t j = 0; j < nb; j++) {\n");
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "%s acc = ", r->env.acct);
    cg_red_expand(b, rc->init, &r->env, ind + 1);
    cdy_buf_printf(b, ";%s\n", strstr(rc->update, "nanf") ? " int nanf = 0;" : "");
    cg_red_block_vars(c, r, ind + 1, CG_RV_ACC, 's');
    cg_indent(b, ind);
    cdy_buf_puts(b, "}\n");
    if (cg_red_pass(c, r, 0, ind))
        return -1;
    if (rc->update2) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "for (int64_t j = 0; j < nb; j++) {\n");
        cg_red_block_vars(c, r, ind + 1, CG_RV_ACC, 'l');
        cg_red_lines(b, rc->mid, &r->env, ind + 1);
        cg_red_block_vars(c, r, ind + 1, CG_RV_ACC | CG_RV_STATE, 's');
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n");
        if (cg_red_pass(c, r, 1, ind))
            return -1;
    }
    cg_indent(b, ind);
    cdy_buf_puts(b, "for (int64_t j = 0; j < nb; j++) {\n");
    cg_indent(b, ind + 1);
    if (r->rsplit) {             /* this thread's partial sums of the block's columns */
        cdy_buf_puts(b, "part[t][ib + j] = acc_b[j];\n");
    } else {
        cdy_buf_printf(b, "const int64_t i%d = ib + j;\n", last);
        cg_red_block_vars(c, r, ind + 1, CG_RV_ACC | CG_RV_STATE, 'l');
        cg_red_stores(c, r, ind + 1);
    }
    cg_indent(b, ind);
    cdy_buf_puts(b, "}\n");
    return 0;
}

/* Partial sums of a row-split column sum (cg_red_use_rsplit) on the calling
 * thread's stack, at most (NTHREADS x columns doubles). */
#define CG_RED_RSPLIT_BYTES (128 << 10)

/* 1 if block-mode kernel r splits its rows across the threads: a static float32
 * (bfloat16, float16) sum or mean of one reduced dim into one kept dim too narrow
 * for a block of CG_RED_BLOCK columns per thread, with at least 4 rows per thread.
 * Split by columns, each thread read its few columns' lines from every row
 * (mostly written by other cores: a bias's gradient, 256 x 256 floats at 16
 * threads, 4096 lines moved between cores); split by rows, each sums its own
 * rows (the rows the producer's static schedule wrote on that core), and only
 * the partial rows move (256 lines).  The order of the additions depends on
 * NTHREADS only, in double; float64 inputs keep the column split. */
static int cg_red_use_rsplit(const cg_ctx *c, const cg_red_kernel *r)
{
    int v = r->variant;
    if (c->sym || !r->block || !r->par_out || r->on->ndim != 1 || r->rn->ndim != 1 ||
        (v != CG_RED_SUM && v != CG_RED_MEAN) ||
        (r->env.idt != CDY_DT_FLOAT32 && !cdy_dtype_lowp(r->env.idt)))
        return 0;
    int64_t w = r->on->size[0], rows = r->rn->size[0], nt = c->nthreads;
    return nt >= 2 && rows >= 4 * nt && w <= (int64_t)CG_RED_BLOCK * nt &&
           nt * w * 8 <= CG_RED_RSPLIT_BYTES;
}

/* Emit row-split kernel r at indentation ind: per thread t (one iteration of an
 * `omp for` over NTHREADS), its rows [rlo, rhi) summed in blocks of columns into
 * part[t]; after the loop's barrier, each column's partials added in t order
 * and stored, the columns spread over the threads.  0 or -1. */
static int cg_red_rsplit_nest(cg_ctx *c, const cg_red_kernel *r, int ind)
{
    cdy_buf *b = &c->src;
    long long w = (long long)r->on->size[0], rows = (long long)r->rn->size[0];
    cg_indent(b, ind);
    cdy_buf_printf(b, "%s part[NTHREADS][%lld];\n", r->env.acct, w);
    cg_indent(b, ind);
    cdy_buf_puts(b, "#pragma omp parallel num_threads(NTHREADS)\n");
    cg_indent(b, ind);
    cdy_buf_puts(b, "{\n");
    cg_indent(b, ind + 1);
    cdy_buf_puts(b, "#pragma omp for schedule(static)\n");
    cg_indent(b, ind + 1);
    cdy_buf_puts(b, "for (int64_t t = 0; t < NTHREADS; t++) {\n");
    cg_indent(b, ind + 2);
    cdy_buf_printf(b, "const int64_t rlo = t * %lldLL / NTHREADS, rhi = (t + 1) * %lldLL / "
                      "NTHREADS;\n", rows, rows);
    cg_indent(b, ind + 2);
    cdy_buf_printf(b, "for (int64_t ib = 0; ib < %lldLL; ib += %d) {\n", w, r->bw);
    if (cg_red_block_body(c, r, ind + 3))
        return -1;
    cg_indent(b, ind + 2);
    cdy_buf_puts(b, "}\n");
    cg_indent(b, ind + 1);
    cdy_buf_puts(b, "}\n");
    cg_indent(b, ind + 1);
    cdy_buf_puts(b, "#pragma omp for schedule(static)\n");
    cg_indent(b, ind + 1);
    cdy_buf_printf(b, "for (int64_t i0 = 0; i0 < %lldLL; i0++) {\n", w);
    cg_indent(b, ind + 2);
    cdy_buf_printf(b, "%s acc = part[0][i0];\n", r->env.acct);
    cg_indent(b, ind + 2);
    cdy_buf_puts(b, "for (int64_t t = 1; t < NTHREADS; t++)\n");
    cg_indent(b, ind + 3);
    cdy_buf_puts(b, "acc += part[t][i0];\n");
    cg_red_stores(c, r, ind + 2);
    cg_indent(b, ind + 1);
    cdy_buf_puts(b, "}\n");
    cg_indent(b, ind);
    cdy_buf_puts(b, "}\n");
    return 0;
}

/* Outputs per block of kernel r in block mode: CG_RED_BLOCK, or fewer where
 * its one outer loop is the parallel one and CG_RED_BLOCK-wide blocks would
 * leave threads idle (a bias's gradient, the column sums of 256 x 256 floats:
 * 4 blocks of 64 for 16 threads, each thread reading 256 rows, most of them
 * written by other cores): a multiple of 16 (a 64-byte line of floats), at
 * least 16, so that every thread has a block.  Each output's sum runs over
 * the rows in the same order whatever the width. */
static int cg_red_block_width(const cg_ctx *c, const cg_red_kernel *r)
{
    if (!r->block || !r->par_out || r->on->ndim != 1 || c->nthreads < 2)
        return CG_RED_BLOCK;
    int64_t per = (r->on->size[0] + c->nthreads - 1) / c->nthreads;
    per = (per + 15) / 16 * 16;
    return per < 16 ? 16 : per > CG_RED_BLOCK ? CG_RED_BLOCK : (int)per;
}

/* 1 if kernel r reduces an outer dim: the last outer loop contiguous for
 * the first output and for some input (zero or one for the others), the
 * reduced loops not; then it runs in blocks (cg_red_block_body). */
static int cg_red_use_block(const cg_red_kernel *r)
{
    int last = r->on->ndim - 1, unit = 0;
    if (last < 0 || r->rn->ndim == 0 || r->par_in ||
        r->on->stride[r->first][last] != 1 || r->on->size[last] < 2)
        return 0;
    for (int o = 0; o < r->first; o++) {
        int64_t s = r->on->stride[o][last], rs = r->rn->stride[o][r->rn->ndim - 1];
        if (s != 0 && s != 1)
            return 0;
        unit |= s == 1 && rs != 1;
    }
    return unit;
}

int cg_red_store_once(const kir_kernel *k)
{
    const cg_red_kernel *r = k->kind == CDY_KIR_REDUCE ? k->x : NULL;
    if (!r || r->pstore < 0 || (k->flags & CDY_KIRF_TWO_PASS))
        return -1;
    return r->first + r->nout;
}

/* The kernel record k of reduction r (number), common to both paths. */
static int cg_red_record(cg_ctx *c, kir_kernel *k, cg_red_kernel *r, int number)
{
    const cdy_graph *g = c->g;
    const cg_red_code *rc = &cg_red_codes[r->variant];
    k->number = number;
    k->node = r->v;
    k->grp = (cg_group){g->values[r->in].meta.ndim, g->values[r->in].meta.sizes,
                        r->ngout, r->gouts};
    k->ops = r->ops;
    k->nops = r->nops;
    k->nest = r->on;
    k->numel = r->inumel;
    k->parallel = r->par_out || r->par_in;
    k->collapse = r->par_out && r->on->ndim >= 2 && r->on->size[0] < 4 * (int64_t)c->nthreads;
    k->threads = "NTHREADS";
    k->status = cg_kernel_gathers(c);
    k->rnest = r->rn;
    k->flags = (rc->update2 ? CDY_KIRF_TWO_PASS : 0) | (r->block ? CDY_KIRF_BLOCKS : 0) |
               (r->lanes ? CDY_KIRF_LANES : 0) | (r->prefetch ? CDY_KIRF_PREFETCH : 0) |
               (r->rsplit ? CDY_KIRF_ROW_SPLIT : 0);
    k->x = r;
    return cg_kir_fuse(c, k);
}

/* Symbolic sizes (symk.c): schedule reduction r with its size-dependent
 * decisions made per call (parallel loop, float lanes; no prefetch, no
 * collapse); the variants that find an index (argmax / argmin) take static
 * sizes.  0 or -1. */
static int cg_red_sched_sym(cg_ctx *c, kir_kernel *k, cg_red_kernel *r, int number)
{
    const cg_red_code *rc = &cg_red_codes[r->variant];
    r->env.rn_text = r->rnumel_expr >= 0 ? "cdy_rn" : NULL;
    const char *in = cg_strf(c, "%s * %s", cg_sym_numel_text(c, r->on), cg_sym_numel_text(c, r->rn));
    const char *out = cg_sym_numel_text(c, r->on);
    r->sym_par_out = c->nthreads > 1 && r->on->ndim > 0;
    r->sym_par_in = c->nthreads > 1 && r->on->ndim == 0 && r->rn->ndim > 0 && rc->clause;
    if (r->sym_par_out)
        r->par_cond = cg_strf(c, "%s >= %dLL && %s >= %dLL", in, CG_PARALLEL_NUMEL, out,
                              c->nthreads);
    else if (r->sym_par_in)
        r->par_cond = cg_strf(c, "%s >= %dLL", in, CG_PARALLEL_NUMEL);
    r->block = cg_red_use_block(r);
    r->bw = CG_RED_BLOCK;
    int v = r->variant, last = r->rn->ndim - 1;
    if (!r->block && (v == CG_RED_SUM || v == CG_RED_MEAN) && last >= 0 &&
        (r->env.idt == CDY_DT_FLOAT32 || cdy_dtype_lowp(r->env.idt))) {
        const char *n = cg_sym_size_text(c, r->rn, last);
        r->lanes_cond = cg_strf(c, "%s >= %dLL && %s %% %dLL == 0", n, 2 * CG_RED_LANES, n,
                                CG_RED_LANES);
    }
    r->par_out = r->par_in = r->lanes = r->prefetch = 0;
    if (cg_red_record(c, k, r, number))
        return -1;
    k->parallel = r->par_cond != NULL;
    k->collapse = 0;
    k->par_cond = r->par_cond;
    return 0;
}

/* Rows eager's Welford reduction runs serially (binary_kernel_reduce: a
 * reduced row of fewer elements than its grain size, 32768). */
#define CG_RED_WF_MAX 32768
/* The longest row a row-mode (not block) kernel reduces by Welford: its
 * division chain is serial per row, 5x the corrected two-pass's time on
 * 4096 rows of 1024 floats (28.5 vs 5.9 ms, eager 26-30 ms, 2 threads);
 * block mode runs 64 rows' chains side by side (3.6 ms for the columns). */
#define CG_RED_WF_ROW 64

/* r's variant, VAR / STD turned into eager's Welford (VAR_WF / STD_WF) where
 * eager computes it so and it is cheap: static sizes, more than one output
 * (one output is eager's two-pass std_var_all_cpu, as VAR / STD), rows under
 * CG_RED_WF_MAX in block mode, up to CG_RED_WF_ROW else. */
static int cg_red_welford(const cg_ctx *c, const cg_red_kernel *r)
{
    int v = r->variant;
    int64_t n = r->env.rnumel;
    if ((v != CG_RED_VAR && v != CG_RED_STD) || c->sym || r->onumel <= 1 ||
        n >= CG_RED_WF_MAX || (n > CG_RED_WF_ROW && !cg_red_use_block(r)))
        return v;
    return v == CG_RED_VAR ? CG_RED_VAR_WF : CG_RED_STD_WF;
}

/* 1 if view u walks its base contiguously from offset 0 (size-1 dims: any stride). */
static int cg_red_dense_view(const cdy_value *u)
{
    return u->view_offset == 0 &&
           cdy_strides_contiguous(u->meta.ndim, u->meta.sizes, u->view_strides);
}

/* The mask over p's dims of reduction v, whose input is a contiguous reshape
 * of contiguous p reducing its leading dims (a linear's bias gradient,
 * g.reshape(R, O).sum(0) of g [B, S, O]), when p's last dims are the view's
 * kept ones and its other dims hold the reduced elements; else 0. */
static int64_t cg_red_reshape_mask(const cdy_graph *g, int v, int p)
{
    const cdy_value *val = &g->values[v], *u = &g->values[val->args[0]];
    const cdy_meta *pm = &g->values[p].meta, *um = &u->meta;
    int64_t mask = g->values[val->args[1]].i, rn = 1, pn = 1;
    int k = 0, j = 0;
    while (k < um->ndim && ((mask >> k) & 1))
        rn *= um->sizes[k++];
    if (k == 0 || k == um->ndim || mask != ((int64_t)1 << k) - 1 || pm->ndim - (um->ndim - k) < 1)
        return 0;
    for (j = 0; j < pm->ndim - (um->ndim - k); j++)
        pn *= pm->sizes[j];
    if (pn != rn)
        return 0;
    for (int d = k; d < um->ndim; d++)
        if (um->sizes[d] != pm->sizes[j + d - k])
            return 0;
    return ((int64_t)1 << j) - 1;
}

/* Fill record r of reduction node v (not the second of a pair), storing
 * pstore (-1: none) read through mask over in's sizes: its operands, nests
 * and decisions (cg_sched_reduce); 0 or -1. */
static int cg_red_plan(cg_ctx *c, int v, int in, int64_t mask, int pstore, cg_red_kernel *r)
{
    const cdy_graph *g = c->g;
    const cdy_value *val = &g->values[v];
    int partner = cg_red_partner(g, v), idt = g->values[val->args[0]].meta.dtype;
    *r = (cg_red_kernel){.v = v, .nout = partner >= 0 ? 2 : 1, .in = in, .mask = mask,
                         .pstore = pstore};
    r->outs[0] = partner >= 0 ? partner : v;
    r->outs[1] = v;
    r->variant = cg_red_variant_of(g, v);
    if (cg_red_setup(c, r))
        return -1;
    r->variant = cg_red_welford(c, r);
    const cg_red_code *rc = &cg_red_codes[r->variant];
    r->env.acct = cg_red_acct(rc, idt);
    r->env.octype = cdy_dtype_table[val->meta.dtype].cctype;
    r->env.idt = idt;
    if (c->sym)
        return 0;
    int big = c->nthreads > 1 && r->inumel >= CG_PARALLEL_NUMEL;
    r->par_out = big && r->on->ndim > 0 && r->onumel >= c->nthreads;
    r->par_in = big && r->on->ndim == 0 && r->rn->ndim > 0 && rc->clause;
    r->block = cg_red_use_block(r);
    r->rsplit = cg_red_use_rsplit(c, r);
    r->bw = r->rsplit ? CG_RED_BLOCK : cg_red_block_width(c, r);
    if (pstore >= 0 && r->block && r->on->size[r->on->ndim - 1] <= CG_RED_ROW_BLOCK)
        r->bw = (int)r->on->size[r->on->ndim - 1];
    r->lanes = cg_red_lanes(r, 0);
    r->prefetch = r->lanes && cg_red_prefetches(r);
    return 0;
}

/* Schedule reduction node v as a kernel: a loop nest over the kept dims
 * (outer, parallel when large), an accumulator per output element, a loop
 * nest over the reduced dims whose body computes the reduction's input
 * expression inline from leaves (the pointwise prologue is fused, never
 * realized; a producer cg_red_pick_producers gave it is also stored).  An
 * amax/amin whose argmax/argmin follows is computed with it (a
 * CDY_KIR_PAIRED step).  0 or -1. */
int cg_sched_reduce(cg_ctx *c, int v)
{
    const cdy_graph *g = c->g;
    if (cg_red_partner(g, v + 1) == v) {
        kir_kernel *p = cg_kir_add(c, CDY_KIR_PAIRED);
        if (p)
            p->node = v;
        return p ? 0 : -1;
    }
    int number = cg_kernel_begin(c);
    kir_kernel *k = number < 0 ? NULL : cg_kir_add(c, CDY_KIR_REDUCE);
    cg_red_kernel *r = cdy_arena_alloc(&c->arena, sizeof(cg_red_kernel));
    if (!k)
        return -1;
    if (!r)
        return cg_fail(c, "out of memory");
    const cdy_value *val = &g->values[v];
    int p = c->red_prod[v], in = val->args[0];
    int64_t mask = g->values[val->args[1]].i;
    if (p >= 0 && p != in)
        mask = cg_red_reshape_mask(g, v, p);
    if (cg_red_plan(c, v, p >= 0 ? p : in, mask, p, r))
        return -1;
    return c->sym ? cg_red_sched_sym(c, k, r, number) : cg_red_record(c, k, r, number);
}

/* 1 if v's input p, reached directly or through a reshape u, may be computed by
 * v's kernel: p a realized pointwise node of float32 / float64 (its value as
 * computed is the stored one), nothing between p and v reads p or u, and p's
 * unrealized producers hold no index, cat or gather node and read no row
 * node (whose epilogue computes p).  stack: nvalues ints. */
static int cg_red_prod_ok(cg_ctx *c, int v, int p, int *stack)
{
    const cdy_graph *g = c->g;
    const cdy_value *pv = &g->values[p];
    int u = g->values[v].args[0], dt = pv->meta.dtype, top = 0;
    if (pv->kind != CDY_VAL_NODE || c->val_buf[p] < 0 || c->done[p] || cg_is_view(g, p) ||
        cg_is_special(g, p) || cg_is_extern(g, p) || cg_is_gather(g, p) ||
        strchr("KI", cdy_op_table[pv->op].kind) || pv->compute_dtype != dt ||
        (dt != CDY_DT_FLOAT32 && dt != CDY_DT_FLOAT64))
        return 0;
    for (int w = p + 1; w < v; w++) {
        const cdy_value *wv = &g->values[w];
        if (w == u || wv->kind != CDY_VAL_NODE)
            continue;
        if ((cg_is_view(g, w) || cg_is_gather(g, w)) && wv->view_base == p)
            return 0;
        for (int a = 0; a < wv->nargs; a++)
            if (wv->args[a] == p || wv->args[a] == u)
                return 0;
    }
    stack[top++] = p;
    while (top > 0) {
        const cdy_value *x = &g->values[stack[--top]];
        for (int a = 0; a < x->nargs; a++) {
            int w = x->args[a];
            const cdy_value *wv = &g->values[w];
            if (wv->kind != CDY_VAL_NODE)
                continue;
            if (cdy_op_table[wv->op].kind == 'N')
                return 0;
            if (c->val_buf[w] >= 0 || cg_is_view(g, w))
                continue;
            if (cg_is_special(g, w) || cg_is_gather(g, w) || strchr("KI", cdy_op_table[wv->op].kind))
                return 0;
            stack[top++] = w;
        }
    }
    return 1;
}

/* The pointwise value reduction v would compute and store (its input, or the
 * base of a contiguous reshape it reads), and its mask over that value's
 * dims, or -1. */
static int cg_red_producer(cg_ctx *c, int v, int64_t *mask, int *stack)
{
    const cdy_graph *g = c->g;
    const cdy_value *val = &g->values[v];
    int u = val->args[0];
    const cdy_value *uv = &g->values[u];
    int variant = cg_red_variant_of(g, v);
    if (c->sym || (variant != CG_RED_SUM && variant != CG_RED_MEAN) ||
        cg_red_partner(g, v) >= 0 || cg_red_partner(g, v + 1) == v || uv->kind != CDY_VAL_NODE)
        return -1;
    *mask = g->values[val->args[1]].i;
    if (!cg_is_view(g, u))
        return cg_red_prod_ok(c, v, u, stack) ? u : -1;
    int p = uv->view_base;
    if (c->val_buf[u] >= 0 || p < 0 || !cg_red_dense_view(uv) ||
        !cdy_meta_contiguous(&g->values[p].meta) ||
        cdy_meta_numel(&g->values[p].meta) != cdy_meta_numel(&uv->meta))
        return -1;
    *mask = cg_red_reshape_mask(g, v, p);
    return *mask && cg_red_prod_ok(c, v, p, stack) ? p : -1;
}

/* 1 if planned kernel r may store its producer: one pass of a sum or mean in
 * blocks, visiting each element once, on the thread that owns its rows (the
 * row split) or on one thread where the producer's kernel ran on one too
 * (generated for one thread, or below the parallel threshold), and not so
 * big that the producer's kernel would stream its stores. */
static int cg_red_may_store(const cg_ctx *c, const cg_red_kernel *r)
{
    int64_t bytes = r->inumel * cdy_dtype_table[c->g->values[r->pstore].meta.dtype].size;
    return r->block && !cg_red_codes[r->variant].update2 && !r->par_in &&
           (r->rsplit || c->nthreads == 1 || (!r->par_out && r->inumel < CG_PARALLEL_NUMEL)) &&
           !cg_streams(c, 2 * bytes);
}

int cg_red_pick_producers(cg_ctx *c)
{
    const cdy_graph *g = c->g;
    int *stack = cdy_arena_alloc(&c->arena, sizeof(int) * ((size_t)g->nvalues + 1));
    cg_red_kernel *r = cdy_arena_alloc(&c->arena, sizeof(cg_red_kernel));
    if (!stack || !r)
        return cg_fail(c, "out of memory");
    for (int v = 0; v < g->nvalues && !c->sym; v++) {
        int64_t mask = 0;
        if (g->values[v].kind != CDY_VAL_NODE || cdy_op_table[g->values[v].op].kind != 'R')
            continue;
        int p = cg_red_producer(c, v, &mask, stack);
        if (p < 0)
            continue;
        if (cg_red_plan(c, v, p, mask, p, r))
            return -1;
        if (cg_red_may_store(c, r)) {
            c->red_prod[v] = p;
            c->done[p] = 1;
        }
    }
    return 0;
}

/* The rows of cat node v's contiguous result that reduction s sums (s a
 * float sum of v's dtype, of v or of a dense reshape of it, over leading dims
 * only), as the count of v's leading dims they span; 0 if none. */
static int cg_red_cat_rows(const cg_ctx *c, int v, int s)
{
    const cdy_graph *g = c->g;
    const cdy_value *sv = &g->values[s], *vv = &g->values[v];
    int u = sv->args[0];
    const cdy_value *uv = &g->values[u];
    if (sv->kind != CDY_VAL_NODE || cdy_op_table[sv->op].kind != 'R' || c->done[s] ||
        c->val_buf[s] < 0 || cg_red_variant_of(g, s) != CG_RED_SUM || cg_red_partner(g, s) >= 0 ||
        cg_red_partner(g, s + 1) == s || sv->meta.dtype != vv->meta.dtype ||
        !cdy_dtype_table[sv->meta.dtype].is_float || !cdy_meta_contiguous(&sv->meta))
        return 0;
    if (u != v && (!cg_is_view(g, u) || uv->view_base != v || c->val_buf[u] >= 0 ||
                   !cg_red_dense_view(uv) ||
                   cdy_meta_numel(&uv->meta) != cdy_meta_numel(&vv->meta)))
        return 0;
    int64_t mask = g->values[sv->args[1]].i, rn = 1, pn = 1;
    int k = 0, j = 0;
    while (k < uv->meta.ndim && ((mask >> k) & 1))
        rn *= uv->meta.sizes[k++];
    if (k == 0 || k == uv->meta.ndim || mask != ((int64_t)1 << k) - 1)
        return 0;
    while (j < vv->meta.ndim && pn < rn)
        pn *= vv->meta.sizes[j++];
    return pn == rn && j < vv->meta.ndim ? j : 0;
}

int cg_red_cat_sum(const cg_ctx *c, int v, int *rows)
{
    const cdy_graph *g = c->g;
    for (int s = v + 1; s < g->nvalues && !c->sym; s++) {
        const cdy_value *sv = &g->values[s];
        if (sv->kind != CDY_VAL_NODE || cdy_op_table[sv->op].kind != 'R' || sv->nargs < 2)
            continue;
        int u = sv->args[0];
        if (u != v && !(cg_is_view(g, u) && g->values[u].view_base == v))
            continue;
        if ((*rows = cg_red_cat_rows(c, v, s)) > 0)
            return s;
    }
    return -1;
}

static int cg_red_emit_nest(cg_ctx *c, const kir_kernel *kk, const cg_red_kernel *rp, int ind0);
static int cg_red_emit_sym(cg_ctx *c, const kir_kernel *kk, const cg_red_kernel *rp);

/* Emit reduction kernel kk (cg_sched_reduce). */
int cg_emit_reduce(cg_ctx *c, const kir_kernel *kk)
{
    const cdy_graph *g = c->g;
    cg_red_kernel r = *(const cg_red_kernel *)kk->x;
    const cdy_value *val = &g->values[r.v];
    r.env.e = cg_value_expr(c, r.in);
    r.env.param = val->nargs > 3 ? cg_scalar_literal(c, &g->values[val->args[3]]) : "0";
    r.env.lin = cg_red_linear(c, r.rn);
    if (!r.env.e || !r.env.param || !r.env.lin)
        return cg_fail(c, "out of memory");
    cg_emit_header(c, kk);
    if (r.rnumel_expr >= 0 && c->sym)
        cdy_buf_printf(&c->src, "    const int64_t cdy_rn = %s;\n",
                       cg_sym_expr_text(c, r.rnumel_expr));
    if (c->sym ? cg_red_emit_sym(c, kk, &r) : cg_red_emit_nest(c, kk, &r, 1))
        return -1;
    cdy_buf_puts(&c->src, "}\n");
    return 0;
}

/* Emit the loops and body of reduction r (its decisions as r says) at
 * indentation ind0; 0 or -1. */
static int cg_red_emit_nest(cg_ctx *c, const kir_kernel *kk, const cg_red_kernel *rp, int ind0)
{
    cg_red_kernel r = *rp;
    cdy_buf *b = &c->src;
    int ind = ind0;
    if (r.rsplit)
        return cg_red_rsplit_nest(c, &r, ind0);
    for (int d = 0; d < r.on->ndim; d++, ind++) {
        if (d == 0 && r.par_out) {
            cg_indent(b, ind);
            cdy_buf_printf(b, "#pragma omp parallel for num_threads(NTHREADS) schedule(static)%s\n",
                           kk->collapse ? " collapse(2)" : "");
        }
        cg_indent(b, ind);
        if (r.block && d == r.on->ndim - 1)
            cdy_buf_printf(b, "for (int64_t ib = 0; ib < %s; ib += %d) {\n",
                           cg_sym_size_text(c, r.on, d), r.bw);
        else
            cdy_buf_printf(b, "for (int64_t i%d = 0; i%d < %s; i%d++) {\n", d, d,
                           cg_sym_size_text(c, r.on, d), d);
    }
    cg_indent(b, ind);
    cdy_buf_puts(b, "{\n");
    if (r.block ? cg_red_block_body(c, &r, ind + 1) : cg_red_body(c, &r, ind + 1))
        return -1;
    for (; ind >= ind0; ind--) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n");
    }
    return 0;
}

/* Emit r's nest with float lanes when r->lanes_cond holds at run time (and
 * this variant may use them), else without; 0 or -1. */
static int cg_red_emit_lanes(cg_ctx *c, const kir_kernel *kk, cg_red_kernel *r)
{
    if (!r->lanes_cond || (r->par_in && r->rn->ndim == 1)) {
        r->lanes = 0;
        return cg_red_emit_nest(c, kk, r, 2);
    }
    cdy_buf_printf(&c->src, "    if (%s) {\n", r->lanes_cond);
    r->lanes = 1;
    if (cg_red_emit_nest(c, kk, r, 2))
        return -1;
    cdy_buf_puts(&c->src, "    } else {\n");
    r->lanes = 0;
    if (cg_red_emit_nest(c, kk, r, 2))
        return -1;
    cdy_buf_puts(&c->src, "    }\n");
    return 0;
}

/* Symbolic sizes: the variants of reduction r chosen per call (parallel when
 * r->par_cond holds, float lanes when r->lanes_cond does); 0 or -1. */
static int cg_red_emit_sym(cg_ctx *c, const kir_kernel *kk, const cg_red_kernel *rp)
{
    cg_red_kernel r = *rp;
    if (r.par_cond) {
        cdy_buf_printf(&c->src, "    if (%s) {\n", r.par_cond);
        r.par_out = r.sym_par_out;
        r.par_in = r.sym_par_in;
        if (cg_red_emit_lanes(c, kk, &r))
            return -1;
        cdy_buf_puts(&c->src, "    } else {\n");
    }
    r.par_out = r.par_in = 0;
    r.copy = 1;
    if (cg_red_emit_lanes(c, kk, &r))
        return -1;
    if (r.par_cond)
        cdy_buf_puts(&c->src, "    }\n");
    return 0;
}
