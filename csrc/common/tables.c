/* tables.c - the dtype table (cdynamo.h's X-macro) and the op table (ops/ops.def). */
#include "cdynamo.h"

const cdy_dtype_info cdy_dtype_table[CDY_DT_COUNT] = {
#define CDY_X(e, n, st, ct, sz, f, i) {n, st, ct, sz, f, i},
    CDY_DTYPES(CDY_X)
#undef CDY_X
};

const cdy_op_info cdy_op_table[CDY_OP_COUNT] = {
#define CDY_PW(E, name, n, kind, flags, rule, to, sig, check, tf, ti, tb, tn, grad) \
    [CDY_OP_##E] = {name, n, kind, rule, CDY_DT_##to, (flags), CDY_OP_NONE, grad},
#define CDY_RED(E, name, n, flags, rule, sig, check, vf, vi, pair, grad) \
    [CDY_OP_##E] = {name, n, 'R', rule, CDY_DT_NONE, (flags), CDY_OP_##pair, grad},
#define CDY_NODE(E, name, n, kind, flags, grad) \
    [CDY_OP_##E] = {name, n, kind, 0, CDY_DT_NONE, (flags), CDY_OP_NONE, grad},
#include "ops/ops.def"
};

const char *const cdy_kir_kind_names[CDY_KIR_COUNT] = {
#define CDY_X(e, n) n,
    CDY_KIR_KINDS(CDY_X)
#undef CDY_X
};

/* The result dtype of reduction op over input dtype idt (ops.def's rule
 * column), or CDY_DT_NONE when the op does not take that input. */
int cdy_op_reduce_dtype(int op, int idt)
{
    int flt = cdy_dtype_table[idt].is_float;
    switch (cdy_op_table[op].rule) {
    case 'I': return flt ? idt : CDY_DT_INT64;
    case 'B': return idt == CDY_DT_UINT8 ? CDY_DT_UINT8 : CDY_DT_BOOL;
    case 'L': return CDY_DT_INT64;
    case 'F': return flt ? idt : CDY_DT_NONE;
    default: return idt;
    }
}

/* Number of elements of a tensor with meta m (1 for 0-d). */
int64_t cdy_meta_numel(const cdy_meta *m)
{
    int64_t n = 1;
    for (int d = 0; d < m->ndim; d++)
        n *= m->sizes[d];
    return n;
}

/* 1 if m is contiguous (row-major; the strides of size-1 dims do not matter). */
int cdy_meta_contiguous(const cdy_meta *m)
{
    return cdy_strides_contiguous(m->ndim, m->sizes, m->strides);
}

/* 1 if strides st walk the nd sizes sz row-major (see cdy_meta_contiguous). */
int cdy_strides_contiguous(int nd, const int64_t *sz, const int64_t *st)
{
    int64_t expect = 1;
    for (int d = nd - 1; d >= 0; d--) {
        if (sz[d] != 1 && st[d] != expect)
            return 0;
        expect *= sz[d];
    }
    return 1;
}

/* 1 if m has the strides torch.empty gives its sizes (contiguous, and each
 * size-1 dim's stride the product of the sizes inside it, 0 counted as 1). */
int cdy_meta_canonical(const cdy_meta *m)
{
    return cdy_strides_canonical(m->ndim, m->sizes, m->strides);
}

/* 1 if strides st are torch.empty's for the nd sizes sz (see cdy_meta_canonical). */
int cdy_strides_canonical(int nd, const int64_t *sz, const int64_t *st)
{
    int64_t expect = 1;
    for (int d = nd - 1; d >= 0; d--) {
        if (st[d] != expect)
            return 0;
        expect *= sz[d] > 1 ? sz[d] : 1;
    }
    return 1;
}

/* torch.empty's strides for the nd sizes sz into st (size 0 and 1 counted as 1). */
void cdy_canonical_strides(int nd, const int64_t *sz, int64_t *st)
{
    int64_t acc = 1;
    for (int d = nd - 1; d >= 0; d--) {
        st[d] = acc;
        acc *= sz[d] > 1 ? sz[d] : 1;
    }
}

/* The dims of m of size other than 1 into order, outermost first (decreasing
 * strides, ties by dim order): their count. */
static int meta_sorted_dims(const cdy_meta *m, int *order)
{
    int n = 0;
    for (int d = 0; d < m->ndim; d++) {
        if (m->sizes[d] == 1)
            continue;
        int j = n++;
        while (j > 0 && m->strides[order[j - 1]] < m->strides[d]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = d;
    }
    return n;
}

/* The dims of m of size other than 1, outermost first (decreasing strides,
 * ties by dim order), into order: their count when m is dense in that order
 * (the innermost's stride 1, each other's the product of the sizes inside
 * it: a permutation of a contiguous layout), else -1. */
int cdy_meta_dense_order(const cdy_meta *m, int *order)
{
    int n = meta_sorted_dims(m, order);
    int64_t st = 1;
    for (int i = n - 1; i >= 0; i--) {
        if (m->strides[order[i]] != st)
            return -1;
        st *= m->sizes[order[i]];
    }
    return n;
}

/* See cdynamo.h. */
int cdy_meta_layout_order(const cdy_meta *m, int *order)
{
    int n = meta_sorted_dims(m, order);
    int64_t extent = 1;
    for (int i = n - 1; i >= 0; i--) {
        if (m->strides[order[i]] < extent || m->sizes[order[i]] < 1)
            return -1;
        extent = m->strides[order[i]] * m->sizes[order[i]];
    }
    return n;
}

/* -1, 0, 1 as a < b, a == b, a > b. */
static int tb_sign(int64_t a, int64_t b)
{
    return (a > b) - (a < b);
}

/* See cdynamo.h. */
int cdy_strides_follow(const cdy_meta *m, int nd, const int64_t *sz, const int64_t *st)
{
    int order[CDY_MAX_NDIM], n;
    if (nd != m->ndim)
        return 0;
    if (cdy_meta_canonical(m))
        return cdy_strides_canonical(nd, sz, st);
    if ((n = cdy_meta_layout_order(m, order)) < 0)
        return 0;
    int64_t hext = 1, ext = 1;   /* the extent inside the dim, at m and at sz */
    for (int i = n - 1; i >= 0; i--) {
        int d = order[i];
        if (sz[d] < 2)
            return 0;
        if (m->strides[d] == hext ? st[d] != ext : st[d] != m->strides[d] || st[d] <= ext)
            return 0;
        hext = m->strides[d] * m->sizes[d];
        ext = st[d] * sz[d];
    }
    for (int d = 0; d < nd; d++)
        if (m->sizes[d] == 1 && (sz[d] != 1 || st[d] != m->strides[d]))
            return 0;
    for (int d = 0; d < nd; d++)
        for (int e = d + 1; e < nd; e++)
            if (tb_sign(st[d], st[e]) != tb_sign(m->strides[d], m->strides[e]))
                return 0;
    return 1;
}

/* The reduction whose pair (first pass) is op (ARGMAX for AMAX), or CDY_OP_NONE. */
int cdy_op_paired(int op)
{
    for (int p = 0; p < CDY_OP_COUNT; p++)
        if (cdy_op_table[p].pair == op && op != CDY_OP_NONE)
            return p;
    return CDY_OP_NONE;
}

static int gelu_f16_inf = 1;   /* eager's float16 GELU at +inf is inf (torch 2.13) until probed */

/* See ops.h. */
int cdy_gelu_f16_inf(void)
{
    return gelu_f16_inf;
}

/* See ops.h. */
void cdy_set_gelu_f16_inf(int on)
{
    gelu_f16_inf = on != 0;
}
