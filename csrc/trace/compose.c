/* compose.c - decompositions: the formulas of composite torch ops as graph
 * ops of ops/ops.def, for the builders of trace/build_*.c (which bind the
 * call's arguments and check what the formula needs).  One place per formula:
 * what the compiler fuses, and what training's derivatives will read.
 * Each function adds its nodes in a fixed order and returns the value of the
 * result, or -1 when stopped. */
#include "trace/trace.h"

/* A pointwise node op(a, b) (b < 0: unary) with sizes m and dtype dt
 * (computing in cdt); its value or -1. */
static int cp_pw(tracer *tr, int op, int a, int b, const cdy_meta *m, int dt, int cdt)
{
    cdy_meta mm = *m;
    mm.dtype = dt;
    int args[2] = {a, b};
    return cdy_node_add(tr, op, args, b < 0 ? 1 : 2, &mm, cdt);
}

/* batch_norm in eval mode as ATen's kernel computes it: per channel (metas
 * pm, [C, 1, ..]) alpha = 1 / sqrt(var + eps) * weight and beta = bias -
 * mean * alpha, then x * alpha + beta over om; ch = (mean, var, weight, bias)
 * channel values, -2 for an absent weight or bias.  In bfloat16 / float16
 * all of it is float32 (ATen's reduced-float kernel: alpha and beta in
 * float, one rounding of x * alpha + beta to the dtype). */
int cdy_compose_batch_norm(tracer *tr, int x, const int *ch, double eps, const cdy_meta *pm,
                           const cdy_meta *om, int dt)
{
    if (cdy_dtype_lowp(dt)) {
        int y = cdy_compose_batch_norm(tr, x, ch, eps, pm, om, CDY_DT_FLOAT32);
        cdy_meta m = *om;
        m.dtype = dt;
        return y < 0 ? y : cdy_node_cast(tr, y, &m, dt);
    }
    int e = cdy_scalar_float(tr, eps), zero = cdy_scalar_float(tr, 0.0);
    int v = cp_pw(tr, CDY_OP_ADD, ch[1], e, pm, dt, dt);
    v = v < 0 ? v : cp_pw(tr, CDY_OP_SQRT, v, -1, pm, dt, dt);
    int alpha = v < 0 ? v : cp_pw(tr, CDY_OP_RECIPROCAL, v, -1, pm, dt, dt);
    if (alpha >= 0 && ch[2] >= 0)
        alpha = cp_pw(tr, CDY_OP_MUL, alpha, ch[2], pm, dt, dt);
    int ma = alpha < 0 ? alpha : cp_pw(tr, CDY_OP_MUL, ch[0], alpha, pm, dt, dt);
    int beta = ma < 0 ? ma : cp_pw(tr, CDY_OP_SUB, ch[3] >= 0 ? ch[3] : zero, ma, pm, dt, dt);
    int y = beta < 0 ? beta : cp_pw(tr, CDY_OP_MUL, x, alpha, om, dt, dt);
    return y < 0 ? y : cp_pw(tr, CDY_OP_ADD, y, beta, om, dt, dt);
}

/* The elementwise loss between x and y over sizes m: kind 'm' (x-y)^2,
 * 'l' |x-y|, 's' smooth l1 with beta (|d| < beta ? 0.5 d^2 / beta : |d| -
 * 0.5 beta). */
int cdy_compose_loss(tracer *tr, int kind, int x, int y, const cdy_meta *m, double beta)
{
    int dt = m->dtype, d = cp_pw(tr, CDY_OP_SUB, x, y, m, dt, dt);
    if (d < 0)
        return -1;
    if (kind == 'm')
        return cp_pw(tr, CDY_OP_MUL, d, d, m, dt, dt);
    int z = cp_pw(tr, CDY_OP_ABS, d, -1, m, dt, dt);
    if (z < 0 || kind == 'l' || beta == 0)
        return z;
    int bv = cdy_scalar_float(tr, beta), half = cdy_scalar_float(tr, 0.5);
    int hb = cdy_scalar_float(tr, 0.5 * beta);
    if (bv < 0 || half < 0 || hb < 0)
        return -1;
    int lt = cp_pw(tr, CDY_OP_LT, z, bv, m, CDY_DT_BOOL, dt);
    int q = lt < 0 ? -1 : cp_pw(tr, CDY_OP_MUL, half, z, m, dt, dt);
    q = q < 0 ? -1 : cp_pw(tr, CDY_OP_MUL, q, z, m, dt, dt);
    q = q < 0 ? -1 : cp_pw(tr, CDY_OP_DIV, q, bv, m, dt, dt);
    int l = q < 0 ? -1 : cp_pw(tr, CDY_OP_SUB, z, hb, m, dt, dt);
    if (l < 0)
        return -1;
    int args[3] = {lt, q, l};
    return cdy_node_add(tr, CDY_OP_WHERE, args, 3, m, dt);
}

/* The loss elements l (rank ndim) reduced over every dim by mean (else sum)
 * to om; -1 also when om is not 0-d. */
int cdy_compose_loss_reduce(tracer *tr, int l, int ndim, int mean, const cdy_meta *om)
{
    int args[3] = {l, cdy_scalar_int(tr, (1LL << ndim) - 1), cdy_scalar_bool(tr, 0)};
    if (args[1] < 0 || args[2] < 0 || om->ndim != 0)
        return -1;
    return cdy_node_add(tr, mean ? CDY_OP_MEAN : CDY_OP_SUM, args, 3, om, om->dtype);
}

/* A node op(a, s) (s a scalar value) with meta m computed in cdt; -1 when s is. */
static int cp_scalar(tracer *tr, int op, int a, int s, const cdy_meta *m, int cdt)
{
    int args[2] = {a, s};
    return s < 0 ? -1 : cdy_node_add(tr, op, args, 2, m, cdt);
}

/* x * step + start (scalar values; -2: left out) over meta m computed in cdt. */
int cdy_compose_affine(tracer *tr, int x, int step, int start, const cdy_meta *m, int cdt)
{
    if (x >= 0 && step != -2)
        x = cp_scalar(tr, CDY_OP_MUL, x, step, m, cdt);
    if (x >= 0 && start != -2)
        x = cp_scalar(tr, CDY_OP_ADD, x, start, m, cdt);
    return x;
}

/* F.normalize's x / norm.clamp_min(eps) (norm: the vector norm with keepdim,
 * meta nm; the result's meta om). */
int cdy_compose_normalize(tracer *tr, int x, int norm, double eps, const cdy_meta *nm,
                          const cdy_meta *om)
{
    int a[2] = {norm, cdy_scalar_float(tr, eps)}, c;
    if (a[1] < 0 || (c = cdy_node_add(tr, CDY_OP_CLAMP_MIN, a, 2, nm, nm->dtype)) < 0)
        return -1;
    a[0] = x;
    a[1] = c;
    return cdy_node_add(tr, CDY_OP_DIV, a, 2, om, om->dtype);
}
