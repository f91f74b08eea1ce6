/* meta.c - the result meta of lowered pointwise ops, computed in C as CPU's
 * TensorIterator computes it: broadcast sizes, torch's type promotion, and
 * the output strides (the "fast setup" layouts, else input strides ordered
 * dimension by dimension).
 *
 * Why: in torch 2.13 the meta functions of pointwise ops are Python refs, and
 * the first of them in a process imports torch._dynamo (about 1.2 s); each
 * later one costs tens of microseconds.  A function of pointwise ops is now
 * traced without running torch at all, so a warm start from the disk cache
 * takes milliseconds.  Anything these rules do not cover (other ops, a cast
 * with dtype=, empty tensors, arguments torch would reject) returns "not
 * handled" and the tracer runs torch's meta function as before.
 *
 * The same holds for sum / mean / amax / amin over dims (cdy_meta_reduce):
 * their torch metas are Python too, and the first one in a process imports
 * sympy and torch.fx's symbolic shapes (about 0.35 s) through torch._check. */
#include "trace/trace.h"

#include <string.h>

/* The result dtype rule of each pointwise op is ops.def's rule column (0: not
 * computed here); a reduction's is too, through cdy_op_reduce_dtype. */
#define mt_rule(op) (cdy_op_table[op].rule)

/* One operand of the iteration: sizes and element strides (0-dim for a number). */
typedef struct {
    int ndim;
    const int64_t *sizes, *strides;
} mt_operand;

/* The sizes and strides of a number's 0-dim operand (never read, never NULL). */
static const int64_t mt_no_dims[1];

/* 1 if the operand's dims, innermost first in `order` (n of them), are
 * dense in that order: each stride the product of the sizes before it (size-1
 * dims ignored, as torch's contiguity flags ignore them). */
static int mt_dense_in_order(const mt_operand *o, const int *order, int n)
{
    int64_t expect = 1;
    for (int k = 0; k < n; k++) {
        int d = order[k];
        if (o->sizes[d] == 1)
            continue;
        if (o->strides[d] != expect)
            return 0;
        expect *= o->sizes[d];
    }
    return 1;
}

/* 1 if the operand's strides are those of a contiguous tensor. */
static int mt_contiguous(const mt_operand *o)
{
    int order[CDY_MAX_NDIM];
    for (int k = 0; k < o->ndim; k++)
        order[k] = o->ndim - 1 - k;
    return mt_dense_in_order(o, order, o->ndim);
}

/* Canonical channels_last strides of 4-d sizes s into st. */
static void mt_channels_last_strides(const int64_t *s, int64_t *st)
{
    st[1] = 1;
    st[3] = s[1] > 1 ? s[1] : 1;
    st[2] = st[3] * (s[3] > 1 ? s[3] : 1);
    st[0] = st[2] * (s[2] > 1 ? s[2] : 1);
}

/* 1 if the operand is channels_last-contiguous (4-d). */
static int mt_channels_last(const mt_operand *o)
{
    static const int order[4] = {1, 3, 2, 0};   /* innermost first */
    return o->ndim == 4 && mt_dense_in_order(o, order, 4);
}

/* 1 if the operand's elements are dense and do not overlap, in some order. */
static int mt_dense(const mt_operand *o)
{
    int idx[CDY_MAX_NDIM], n = 0;
    for (int d = 0; d < o->ndim; d++)
        if (o->sizes[d] != 1)
            idx[n++] = d;
    for (int i = 1; i < n; i++)                 /* sort by stride, ascending */
        for (int j = i; j > 0 && o->strides[idx[j - 1]] > o->strides[idx[j]]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    return mt_dense_in_order(o, idx, n);
}

/* Broadcast the operands' sizes into m (sizes, ndim) and say whether every
 * operand has the same shape (TensorIterator's all_ops_same_shape_); 0, or -1
 * when the sizes do not broadcast. */
static int mt_shape(const mt_operand *ops, int n, cdy_meta *m, int *same)
{
    int has_scalars = 0, has_tensors = 0;
    m->ndim = 0;
    *same = 1;
    for (int i = 0; i < n; i++) {
        const mt_operand *o = &ops[i];
        if (o->ndim == 0)
            has_scalars = 1;
        else
            has_tensors = 1;
        if (has_scalars && has_tensors)
            *same = 0;
        if (m->ndim == 0) {
            m->ndim = o->ndim;
            memcpy(m->sizes, o->sizes, sizeof(int64_t) * (size_t)o->ndim);
            continue;
        }
        int nd = o->ndim > m->ndim ? o->ndim : m->ndim;
        int64_t out[CDY_MAX_NDIM];
        for (int d = 0; d < nd; d++) {
            int a = d - (nd - m->ndim), b = d - (nd - o->ndim);
            int64_t sa = a >= 0 ? m->sizes[a] : 1, sb = b >= 0 ? o->sizes[b] : 1;
            if (sa != sb && sa != 1 && sb != 1)
                return -1;
            if (sa != sb || o->ndim != m->ndim)
                *same = 0;
            out[d] = sa == 1 ? sb : sa;
        }
        m->ndim = nd;
        memcpy(m->sizes, out, sizeof(int64_t) * (size_t)nd);
    }
    return 0;
}

/* Operand o's stride on iteration dim d of an ndim-dim space (0 where broadcast). */
static int64_t mt_stride(const mt_operand *o, const cdy_meta *m, int d)
{
    int od = d - (m->ndim - o->ndim);
    if (od < 0 || (o->sizes[od] == 1 && m->sizes[d] != 1))
        return 0;
    return o->strides[od];
}

/* TensorIterator's comparison of dims a and b: 1 to swap, -1 to keep, 0 undecided. */
static int mt_should_swap(const mt_operand *ops, int n, const cdy_meta *m, int a, int b)
{
    for (int i = 0; i < n; i++) {
        int64_t s0 = mt_stride(&ops[i], m, a), s1 = mt_stride(&ops[i], m, b);
        if (s0 == 0 || s1 == 0)
            continue;
        if (s0 < s1)
            return -1;
        if (s0 > s1)
            return 1;
        if (m->sizes[a] > m->sizes[b])
            return 1;
    }
    return 0;
}

/* Output strides by TensorIterator's reorder_dimensions: dims sorted fastest
 * first by the inputs' strides (insertion sort with undecided comparisons),
 * contiguous when that order is the reverse of the dims. */
static void mt_reorder_strides(const mt_operand *ops, int n, cdy_meta *m)
{
    int perm[CDY_MAX_NDIM], nd = m->ndim;
    for (int i = 0; i < nd; i++)
        perm[i] = nd - 1 - i;
    for (int i = 1; i < nd; i++) {
        int d1 = i;
        for (int d0 = i - 1; d0 >= 0; d0--) {
            int c = mt_should_swap(ops, n, m, perm[d0], perm[d1]);
            if (c > 0) {
                int t = perm[d0];
                perm[d0] = perm[d1];
                perm[d1] = t;
                d1 = d0;
            } else if (c < 0) {
                break;
            }
        }
    }
    int inverted = 1;
    for (int i = 0; i < nd; i++)
        inverted &= perm[i] == nd - 1 - i;
    if (inverted) {
        cdy_canonical_strides(nd, m->sizes, m->strides);
        return;
    }
    int64_t next = 1;
    for (int i = 0; i < nd; i++) {
        m->strides[perm[i]] = next;
        next *= m->sizes[perm[i]];
    }
}

/* Sizes and strides of the result of an elementwise op over ops, as CPU's
 * TensorIterator allocates it; 0, or -1 when the sizes do not broadcast. */
static int mt_layout(const mt_operand *ops, int n, cdy_meta *m)
{
    int same;
    if (mt_shape(ops, n, m, &same))
        return -1;
    if (same) {
        int contiguous = 1, channels_last = 1, dense = 1;
        for (int i = 0; i < n; i++) {
            contiguous &= mt_contiguous(&ops[i]);
            channels_last &= mt_channels_last(&ops[i]);
            dense &= mt_dense(&ops[i]);
            if (i > 0)
                dense &= !memcmp(ops[i].strides, ops[0].strides,
                                 sizeof(int64_t) * (size_t)ops[0].ndim);
        }
        if (contiguous) {
            cdy_canonical_strides(m->ndim, m->sizes, m->strides);
            return 0;
        }
        if (channels_last) {
            mt_channels_last_strides(m->sizes, m->strides);
            return 0;
        }
        if (dense) {
            memcpy(m->strides, ops[0].strides, sizeof(int64_t) * (size_t)m->ndim);
            return 0;
        }
    }
    mt_reorder_strides(ops, n, m);
    return 0;
}

/* The strides `o.to(other dtype)` gives the copy of operand o into st (torch's
 * preserve_format: o's own where o is non-overlapping and dense, else the
 * dense strides in o's dim order as infer_dense_strides sorts it, stride-0
 * dims ambiguous as in TensorIterator). */
static void mt_converted_strides(const mt_operand *o, int64_t *st)
{
    if (mt_dense(o)) {
        memcpy(st, o->strides, sizeof(int64_t) * (size_t)o->ndim);
        return;
    }
    cdy_meta c;
    c.ndim = o->ndim;
    memcpy(c.sizes, o->sizes, sizeof(int64_t) * (size_t)o->ndim);
    mt_reorder_strides(o, 1, &c);
    memcpy(st, c.strides, sizeof(int64_t) * (size_t)o->ndim);
}

/* The dtype CPU's TensorIterator converts op's tensor inputs to before it
 * picks the output's layout (promote_inputs_to_common_dtype: each input of
 * another dtype becomes a temporary `.to(common)`, whose strides then vote):
 * the result dtype; a comparison's: its inputs' result_type; a unary
 * test's (isnan, ...): its input's. */
static int mt_common_dtype(int op, tvar **args, int nops, const cdy_meta *m)
{
    if (mt_rule(op) != 'B')
        return m->dtype;
    return nops == 2 ? cdy_result_dtype(args[0]->obj, args[1]->obj) : CDY_DT_NONE;
}

/* Replace, in ops, the strides of each tensor input that CPU's iterator
 * converts to the common dtype by its converted copy's (mt_converted_strides,
 * into conv); where's condition is bool already. */
static void mt_promote_operands(int op, tvar **args, int nops, const cdy_value *vals,
                                const cdy_meta *m, mt_operand *ops,
                                int64_t conv[][CDY_MAX_NDIM])
{
    int common = mt_common_dtype(op, args, nops, m);
    if (common == CDY_DT_NONE)
        return;
    for (int i = mt_rule(op) == 'W'; i < nops; i++) {
        if (args[i]->kind != TV_TENSOR || ops[i].ndim == 0 ||
            vals[args[i]->value].meta.dtype == common)
            continue;
        mt_converted_strides(&ops[i], conv[i]);
        ops[i].strides = conv[i];
    }
}

/* 1 if a is a Python number constant. */
static int mt_number(const tvar *a)
{
    return a->kind == TV_CONST &&
           (PyBool_Check(a->obj) || PyLong_CheckExact(a->obj) || PyFloat_CheckExact(a->obj));
}

/* 1 if m is float32 or float64. */
static int mt_float(const cdy_meta *m)
{
    return m->dtype == CDY_DT_FLOAT32 || m->dtype == CDY_DT_FLOAT64;
}

/* 1 if t is absent, None or the constant False. */
static int mt_false(const tvar *t)
{
    return cdy_tv_none(t) || (t->kind == TV_CONST && t->obj == Py_False);
}

/* The dtype a constant dtype argument t names, or CDY_DT_NONE. */
static int mt_dtype_arg(const tvar *t)
{
    return t->kind == TV_CONST ? cdy_dtype_from_obj(t->obj) : CDY_DT_NONE;
}

/* A loss's reduction argument t: absent, 'mean'; a constant string, it;
 * else NULL. */
static const char *mt_reduction(const tvar *t)
{
    return !t ? "mean"
              : t->kind == TV_CONST && PyUnicode_Check(t->obj) ? PyUnicode_AsUTF8(t->obj) : NULL;
}

/* The result dtype of op over the bound args by its rule, or CDY_DT_NONE. */
static int mt_dtype(int op, tvar **args, int n, const cdy_value *vals)
{
    int rule = mt_rule(op);
    if (rule == 'K')
        return cdy_op_table[op].to;
    if (rule == 'B')
        return CDY_DT_BOOL;
    int x = vals[args[0]->value].meta.dtype;
    if (rule == 'A' || rule == 'M')
        return x;
    if (rule == 'T') {
        int lo = cdy_result_dtype(args[0]->obj, args[1]->obj);
        return lo != x ? lo : cdy_result_dtype(args[0]->obj, args[2]->obj);
    }
    if (rule == 'W') {
        if (x != CDY_DT_BOOL)
            return CDY_DT_NONE;                /* eager rejects a non-bool condition */
        return cdy_result_dtype(args[1]->obj, args[2]->obj);
    }
    int r = n == 1 ? x : cdy_result_dtype(args[0]->obj, args[1]->obj);
    if (r == CDY_DT_NONE)
        return r;
    if (rule == 'F' && !cdy_dtype_table[r].is_float) {
        int dflt = cdy_dtype_take(PyObject_CallMethod(cdy_torch, "get_default_dtype", NULL));
        return dflt == CDY_DT_FLOAT32 || dflt == CDY_DT_FLOAT64 ? dflt : CDY_DT_NONE;
    }
    if (rule == 'L' && r == CDY_DT_BOOL)
        return CDY_DT_INT64;
    return r;
}

/* 1 if fn is a function of the operator module (which takes a number first). */
static int mt_operator_fn(PyObject *fn)
{
    PyObject *mod = PyObject_GetAttrString(fn, "__module__");
    int r = mod && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "_operator") == 0;
    Py_XDECREF(mod);
    PyErr_Clear();
    return r;
}

/* The operands of a call whose meta these rules can compute, into ops: the
 * data args (tensors, and numbers where every spelling of the op takes one),
 * not the op's number parameters (a slope, gelu's mode); their count, or -1. */
static int mt_operands(int op, PyObject *fn, tvar **args, int n, const cdy_value *vals,
                       mt_operand *ops)
{
    char kind = cdy_op_table[op].kind;
    /* clamp's bounds (rule T), pow's number exponent and clamp_min / clamp_max's
     * number bound (NUMBER_PARAM1) are not
     * operands of eager's iterator (it is unary over x converted to the result
     * dtype) */
    int unary = mt_rule(op) == 'A' || kind == 'U' || mt_rule(op) == 'T' ||
                (cdy_op_has(op, CDY_OPF_NUMBER_PARAM1) && n == 2 && args[0]->kind == TV_TENSOR &&
                 mt_number(args[1]));
    int ndata = unary ? 1 : kind == 'T' ? 3 : 2;
    int ntensors = 0;
    for (int i = 0; i < n; i++) {
        tvar *a = args[i];
        if (i >= ndata) {
            if (!mt_number(a))
                return -1;
        } else if (a->kind == TV_TENSOR) {
            const cdy_meta *m = &vals[a->value].meta;
            if (cdy_meta_numel(m) == 0)
                return -1;                     /* empty results: leave them to torch */
            ops[i] = (mt_operand){m->ndim, m->sizes, m->strides};
            ntensors++;
        } else if (!mt_number(a) || mt_rule(op) == 'S' || (i == 0 && !mt_operator_fn(fn))) {
            return -1;                         /* torch.add(2, x) raises; 2 + x does not */
        } else {
            ops[i] = (mt_operand){0, mt_no_dims, mt_no_dims};
        }
    }
    return ntensors && n >= ndata ? ndata : -1;
}

/* A fake of pointwise op `op` over its bound args (called as fn), its meta
 * computed here; a new meta tensor (kept by the trace), or NULL with no
 * error when these rules do not cover the call (run torch's meta instead).
 * NULL with the trace stopped on an internal error. */
PyObject *cdy_meta_pointwise(tracer *tr, int op, PyObject *fn, tvar **args, int n)
{
    mt_operand ops[CDY_MAX_NODE_ARGS];
    const cdy_value *vals = tr->t->graph.values;
    if (op < 0 || op >= CDY_OP_COUNT || !cdy_op_pointwise(op) || !mt_rule(op) || n < 1 ||
        n > CDY_MAX_NODE_ARGS)
        return NULL;
    int nops = mt_operands(op, fn, args, n, vals, ops);
    if (nops < 0)
        return NULL;
    cdy_meta m;
    memset(&m, 0, sizeof(m));
    m.dtype = mt_dtype(op, args, n, vals);
    if (m.dtype == CDY_DT_NONE)
        return NULL;
    int rule = mt_rule(op);
    if (rule == 'K') {                      /* a cast is x.to(dtype): its copy's layout */
        m.ndim = ops[0].ndim;
        memcpy(m.sizes, ops[0].sizes, sizeof(int64_t) * (size_t)m.ndim);
        mt_converted_strides(&ops[0], m.strides);
        return cdy_fake_from_meta(tr, &m);
    }
    int64_t conv[CDY_MAX_NODE_ARGS][CDY_MAX_NDIM];
    mt_promote_operands(op, args, nops, vals, &m, ops, conv);
    if (mt_layout(ops, nops, &m))
        return NULL;
    /* pow(number, tensor) allocates its result contiguous (torch's pow.Scalar
     * meta passes no strides), whatever the exponent's layout */
    if (rule == 'M' || (op == CDY_OP_POW && args[0]->kind != TV_TENSOR))
        cdy_canonical_strides(m.ndim, m.sizes, m.strides);
    return cdy_fake_from_meta(tr, &m);
}

/* A fake of a reduction over its bound args (x, dims mask, keepdim; var, std
 * and vector_norm a fourth, their correction or order): the reduced dims
 * dropped or kept as 1, contiguous (torch allocates every reduction result
 * so, whatever x's layout: checked by test_reductions and test_meta_c over
 * permuted, channels_last and sliced inputs); the dtype by the op's rule
 * (ops.def, cdy_op_reduce_dtype).  NULL with no error outside these
 * rules (other ops, a 0-d or empty input: torch's meta decides).  prod's and
 * argmax's dims are one int or absent (argmax: or None) by their binding
 * (opbind.c), so the mask says what eager accepts. */
PyObject *cdy_meta_reduce(tracer *tr, int op, tvar **args, int n)
{
    if (op < 0 || op >= CDY_OP_COUNT || cdy_op_table[op].kind != 'R')
        return NULL;
    int four = cdy_op_table[op].nargs == 4;
    if (n != 3 + four || args[0]->kind != TV_TENSOR || args[1]->kind != TV_CONST ||
        !PyLong_Check(args[1]->obj) || args[2]->kind != TV_CONST)
        return NULL;
    const cdy_meta *x = &tr->t->graph.values[args[0]->value].meta;
    long long mask = PyLong_AsLongLong(args[1]->obj);
    if (mask == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    int is_float = cdy_dtype_table[x->dtype].is_float;
    if (x->ndim == 0 || x->ndim > CDY_MAX_NDIM || cdy_meta_numel(x) == 0 || (four && !is_float))
        return NULL;
    cdy_meta m;
    memset(&m, 0, sizeof(m));
    for (int d = 0; d < x->ndim; d++)
        if (!(mask >> d & 1))
            m.sizes[m.ndim++] = x->sizes[d];
        else if (args[2]->obj == Py_True)
            m.sizes[m.ndim++] = 1;
    cdy_canonical_strides(m.ndim, m.sizes, m.strides);
    if ((m.dtype = cdy_op_reduce_dtype(op, x->dtype)) == CDY_DT_NONE)
        return NULL;
    return cdy_fake_from_meta(tr, &m);
}

/* ---- extern calls: matmul family, layer_norm; then (below) cat, stack, norms,
 * pooling, softmax, losses, conv2d, embedding ----------------------------------
 * The callables are the META rows of ops/callables.def; their rules: */
typedef enum {
    MT_MATMUL = 'M', MT_MM = '2', MT_BMM = '3', MT_LINEAR = 'L', MT_LAYER_NORM = 'N',
    MT_CAT = 'C', MT_CONCATENATE = 'c', MT_STACK = 'S', MT_BATCH_NORM = 'B',
    MT_ADAPTIVE_AVG_POOL2D = 'A', MT_SOFTMAX_F = 'X', MT_SOFTMAX = 'x', MT_LOSS = 'Q',
    MT_SMOOTH_L1_LOSS = 'H', MT_CONV2D = 'V', MT_MAX_POOL2D_F = 'P', MT_MAX_POOL2D = 'p',
    MT_EMBEDDING = 'E', MT_VECTOR_NORM = 'v', MT_NORM = 'n', MT_FLIP = 'F', MT_FLIPLR = 'R',
    MT_FLIPUD = 'U', MT_SDPA = 'D', MT_GROUP_NORM_F = 'G', MT_GROUP_NORM = 'g',
    MT_NORMALIZE = 'Z', MT_CUMSUM = 'Y', MT_TRIL = 'T', MT_ROLL = 'O', MT_ADDMM = 'a',
    MT_CROSS_ENTROPY = 'K', MT_LIKE = 'z', MT_FULL_LIKE = 'f', MT_REPEAT = 'r', MT_GATHER = 'q',
    MT_AVG_POOL2D = 'W', MT_INDEX_FILL = 'i', MT_ADAPTIVE_AVG_POOL2D_BW = 'b',
    MT_MAX_POOL2D_IDX = 'I', MT_MAX_POOL2D_BW = 'J', MT_CONV_BW = 'k', MT_AS_STRIDED_SCATTER = 's',
    MT_ENCODER_LAYER = 'e',
    MT_LN_INPUT_GRAD = 'l', MT_SOFTMAX_INPUT_GRAD = 'm', MT_LN_GRAD_XHAT = 'h',
    MT_ATTENTION_GRADS = 'o',
} mt_rule_kind;

/* The rule of each META row, in the table's order (callables.c numbers them so). */
static const char mt_rules[] = {
#define CDY_CALL_META(where, name, RULE, OP) MT_##RULE,
#include "ops/callables.def"
};

/* The rule of callable fn (mt_rule_kind), or 0; the op it binds as in *op. */
static int mt_ext_kind(PyObject *fn, int *op)
{
    int row = cdy_callable_meta(fn, op);
    return row >= 0 && row < (int)sizeof(mt_rules) ? mt_rules[row] : 0;
}

/* Broadcast batch dims a[0..na) and b[0..nb) (right-aligned) into out;
 * their count, or -1 when they do not broadcast. */
static int mt_batch(const int64_t *a, int na, const int64_t *b, int nb, int64_t *out)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t x = i < n - na ? 1 : a[i - (n - na)], y = i < n - nb ? 1 : b[i - (n - nb)];
        if (x != y && x != 1 && y != 1)
            return -1;
        out[i] = x == 1 ? y : x;
    }
    return n;
}

/* Result sizes of matmul-family kind over a and b into m (sizes, ndim);
 * 0, or -1 outside the rules (torch then decides, and raises its errors). */
static int mt_mm_sizes(int kind, const cdy_meta *a, const cdy_meta *b, cdy_meta *m)
{
    int na = a->ndim, nb = b->ndim;
    if (kind == MT_MM || kind == MT_BMM) {
        int nd = kind == MT_MM ? 2 : 3;
        if (na != nd || nb != nd || a->sizes[nd - 1] != b->sizes[nd - 2] ||
            (nd == 3 && a->sizes[0] != b->sizes[0]))
            return -1;
        memcpy(m->sizes, a->sizes, sizeof(int64_t) * (size_t)nd);
        m->sizes[nd - 1] = b->sizes[nd - 1];
        m->ndim = nd;
        return 0;
    }
    if (kind == MT_LINEAR) {   /* linear(x, w): x [..., k], w [n, k] -> [..., n] */
        if (nb != 2 || a->sizes[na - 1] != b->sizes[1])
            return -1;
        memcpy(m->sizes, a->sizes, sizeof(int64_t) * (size_t)na);
        m->sizes[na - 1] = b->sizes[0];
        m->ndim = na;
        return 0;
    }
    /* matmul: a 1-d a is a row [1, k] and a 1-d b a column [k, 1], whose dim
     * is then dropped; the dims before the last two broadcast */
    int64_t k_a = a->sizes[na - 1], k_b = b->sizes[nb == 1 ? 0 : nb - 2];
    int nbat = k_a != k_b ? -1 : mt_batch(a->sizes, na > 2 ? na - 2 : 0, b->sizes,
                                          nb > 2 ? nb - 2 : 0, m->sizes);
    if (nbat < 0)
        return -1;
    m->ndim = nbat;
    if (na > 1)
        m->sizes[m->ndim++] = a->sizes[na - 2];
    if (nb > 1)
        m->sizes[m->ndim++] = b->sizes[nb - 1];
    return 0;
}

/* The i-th int of layer_norm's normalized_shape ns (a constant or traced
 * tuple / list of ints; torch rejects a bare int) into *v; its length, or -1
 * when ns is none of these.  i < 0: only the length. */
static int mt_shape_item(const tvar *ns, int i, long long *v)
{
    if (ns->kind == TV_CONST && (PyTuple_Check(ns->obj) || PyList_Check(ns->obj))) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(ns->obj);
        if (i < 0 || i >= n)
            return (int)n;
        PyObject *o = PySequence_Fast_GET_ITEM(ns->obj, i);
        tvar t = {.kind = TV_CONST, .obj = o};
        return cdy_const_int(&t, v) ? (int)n : -1;
    }
    if (ns->kind == TV_TUPLE || ns->kind == TV_LIST)
        return i < 0 || i >= ns->n ? ns->n : cdy_const_int(ns->items[i], v) ? ns->n : -1;
    return -1;
}

/* A fake for layer_norm(input, normalized_shape[, weight[, bias[, eps]]])
 * given positionally: a contiguous float32 / float64 input whose trailing
 * sizes are normalized_shape, weight and bias None or of exactly those sizes
 * and the input's dtype, eps a number: the input's sizes, contiguous (CPU's
 * kernel allocates so for a contiguous input), its dtype.  NULL with no
 * error otherwise. */
static PyObject *mt_layer_norm(tracer *tr, tvar **args, int nargs)
{
    if (nargs > 5 || args[0]->kind != TV_TENSOR ||
        (nargs == 5 && !(args[4]->kind == TV_CONST &&
                         (PyFloat_CheckExact(args[4]->obj) || PyLong_CheckExact(args[4]->obj)))))
        return NULL;
    const cdy_meta *x = &tr->t->graph.values[args[0]->value].meta;
    long long v;
    int k = mt_shape_item(args[1], -1, &v);
    if (k < 1 || k > x->ndim || (x->dtype != CDY_DT_FLOAT32 && x->dtype != CDY_DT_FLOAT64) ||
        cdy_meta_numel(x) == 0 || !cdy_meta_contiguous(x))
        return NULL;
    for (int i = 0; i < k; i++)
        if (mt_shape_item(args[1], i, &v) != k || v != x->sizes[x->ndim - k + i])
            return NULL;
    for (int a = 2; a < nargs && a < 4; a++) {
        if (cdy_tv_none(args[a]))
            continue;
        if (args[a]->kind != TV_TENSOR)
            return NULL;
        const cdy_meta *w = &tr->t->graph.values[args[a]->value].meta;
        if (w->dtype != x->dtype || w->ndim != k ||
            memcmp(w->sizes, x->sizes + x->ndim - k, sizeof(int64_t) * (size_t)k))
            return NULL;
    }
    cdy_meta m = *x;
    cdy_canonical_strides(m.ndim, m.sizes, m.strides);
    return cdy_fake_from_meta(tr, &m);
}

/* ---- cat, stack, batch_norm, adaptive_avg_pool2d -----------------------------
 * Their torch metas are Python refs and decompositions behind
 * torch._disable_dynamo, whose first call in a process imports torch._dynamo
 * (about 1 s): the first compile of a function with a cat took 0.4-1.0 s
 * against 0.03.  Each rule below takes the common case and leaves the rest
 * (mixed dtypes, empty or channels_last pieces, keywords it does not know)
 * to torch. */

/* 1 if torch suggests channels_last for a 4-d (or channels_last_3d for a
 * 5-d) tensor of meta m: its strides, walked over C, the spatial dims
 * innermost first, then N, never fall below the extent of the dims walked
 * before (a size-1 dim counts its stride alone), C's stride is not 0, and N's
 * does not equal C's where that extent did not grow (the N111 ambiguity). */
static int mt_suggests_cl(const cdy_meta *m)
{
    static const int o4[] = {1, 3, 2, 0}, o5[] = {1, 4, 3, 2, 0};
    const int *order = m->ndim == 4 ? o4 : m->ndim == 5 ? o5 : NULL;
    if (!order || m->strides[1] == 0)
        return 0;
    int64_t min = 0;
    for (int k = 0; k < m->ndim; k++) {
        int d = order[k];
        if (m->sizes[d] == 0 || m->strides[d] < min || (d == 0 && min == m->strides[1]))
            return 0;
        min = m->strides[d] * (m->sizes[d] > 1 ? m->sizes[d] : 1);
    }
    return 1;
}

int cdy_meta_suggests_cl(const cdy_meta *m)
{
    return m->ndim == 4 && mt_suggests_cl(m);
}

/* The tensor meta of traced variable t, or NULL when t is not a non-empty
 * tensor of at most CDY_MAX_NDIM dims. */
static const cdy_meta *mt_tensor(tracer *tr, const tvar *t)
{
    const cdy_meta *m = t->kind == TV_TENSOR ? &tr->t->graph.values[t->value].meta : NULL;
    return m && m->ndim <= CDY_MAX_NDIM && cdy_meta_numel(m) > 0 ? m : NULL;
}

/* A fake for cat (stack: stack) of the pieces bound by sig ("tensors dim"):
 * pieces of one dtype and rank, of any strides, one at least that torch
 * would not call channels_last (then the result is, as torch allocates it,
 * contiguous: cat_compute_output_memory_format returns contiguous at the
 * first piece that suggests it), of equal sizes but along dim (stack: all
 * equal, each unsqueezed at dim). */
static PyObject *mt_cat(tracer *tr, tvar **args, int nargs, PyObject *kwnames, const char *sig,
                        int stack)
{
    tvar *s[2];
    long long d = 0;
    if (cdy_bind_names(sig, args, nargs, kwnames, s) || !s[0] ||
        (s[0]->kind != TV_LIST && s[0]->kind != TV_TUPLE) || s[0]->n < 1 ||
        (s[1] && !cdy_const_int(s[1], &d)))
        return NULL;
    const cdy_meta *p0 = mt_tensor(tr, s[0]->items[0]);
    int nd = p0 ? p0->ndim + stack : 0;
    if (!p0 || p0->ndim < 1 || nd > CDY_MAX_NDIM || (d < 0 && (d += nd) < 0) || d >= nd)
        return NULL;
    cdy_meta m;
    int ncl = 0;
    memset(&m, 0, sizeof(m));
    m.ndim = nd;
    m.dtype = p0->dtype;
    for (int i = 0; i < s[0]->n; i++) {
        const cdy_meta *p = mt_tensor(tr, s[0]->items[i]);
        if (!p || p->ndim != p0->ndim || p->dtype != p0->dtype)
            return NULL;
        cdy_meta u = *p;   /* the piece as cat sees it: stack's unsqueezed view */
        if (stack) {
            for (int k = nd - 1; k > d; k--) {
                u.sizes[k] = u.sizes[k - 1];
                u.strides[k] = u.strides[k - 1];
            }
            u.sizes[d] = 1;
            u.strides[d] = d < p->ndim ? p->sizes[d] * p->strides[d] : 1;
            u.ndim = nd;
        }
        ncl += mt_suggests_cl(&u);
        for (int k = 0; k < nd; k++)
            if (k != d && u.sizes[k] != (i ? m.sizes[k] : (m.sizes[k] = u.sizes[k])))
                return NULL;
        m.sizes[d] += u.sizes[d];
    }
    if (ncl == s[0]->n)
        return NULL;   /* every piece channels_last: so is the result (not covered) */
    cdy_canonical_strides(nd, m.sizes, m.strides);
    return cdy_fake_from_meta(tr, &m);
}

/* m's strides in the memory format torch suggests for x (m: a result of
 * x's rank allocated with x.suggest_memory_format()): channels_last where x
 * is a 4-d tensor it suggests that for, else contiguous; -1 for a 5-d
 * channels_last_3d one (not covered). */
static int mt_suggested_strides(const cdy_meta *x, cdy_meta *m)
{
    if (mt_suggests_cl(x)) {
        if (m->ndim != 4)
            return -1;
        mt_channels_last_strides(m->sizes, m->strides);
        return 0;
    }
    cdy_canonical_strides(m->ndim, m->sizes, m->strides);
    return 0;
}

/* 1 if t is None, absent (NULL), or a 1-d float tensor of c elements and dtype dt. */
static int mt_channel_vec(tracer *tr, const tvar *t, int64_t c, int dt)
{
    if (cdy_tv_none(t))
        return 1;
    const cdy_meta *m = mt_tensor(tr, t);
    return m && m->ndim == 1 && m->sizes[0] == c && m->dtype == dt;
}

/* m's strides as CPU's batch_norm allocates its result for x and the
 * parameters s[1..4] (batch_norm_cpu): where x is contiguous or
 * channels_last-contiguous and every parameter contiguous, that format
 * (contiguous where x is both, as an (N, C, 1, 1) x is), else x's suggested
 * one; -1 for channels_last_3d (torch decides). */
static int mt_batch_norm_strides(tracer *tr, tvar **s, const cdy_meta *x, cdy_meta *m)
{
    mt_operand o = {x->ndim, x->sizes, x->strides};
    int params = 1;
    for (int a = 1; a < 5; a++) {
        const cdy_meta *p = cdy_tv_none(s[a]) ? NULL : mt_tensor(tr, s[a]);
        params &= !p || p->sizes[0] < 2 || p->strides[0] == 1;
    }
    static const int cl3d[5] = {1, 4, 3, 2, 0};   /* innermost first */
    if (params && mt_contiguous(&o)) {
        cdy_canonical_strides(m->ndim, m->sizes, m->strides);
        return 0;
    }
    if (params && x->ndim == 5 && mt_dense_in_order(&o, cl3d, 5))
        return -1;
    if (params && mt_channels_last(&o)) {
        mt_channels_last_strides(m->sizes, m->strides);
        return 0;
    }
    return mt_suggested_strides(x, m);
}

/* 1 if batch_norm's training argument t is absent or a constant bool; *train
 * its value. */
static int mt_bn_training(const tvar *t, int *train)
{
    *train = t && t->kind == TV_CONST && t->obj == Py_True;
    return !t || (t->kind == TV_CONST && PyBool_Check(t->obj));
}

/* A fake for F.batch_norm(input, running_mean, running_var, weight, bias,
 * training, momentum, eps): a float32 / float64 input of 2+ dims, the running
 * stats (and weight / bias, when given) 1-d of its channels and dtype (in
 * training mode the running stats may be None, and more than one value per
 * channel, else F.batch_norm raises and torch decides): the input's sizes and
 * dtype, the memory format CPU's kernel allocates (the same in both modes). */
static PyObject *mt_batch_norm(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[8];
    int train;
    if (cdy_bind_names("input running_mean running_var weight bias training momentum eps",
                       args, nargs, kwnames, s) ||
        !s[0] || !s[1] || !s[2] || !mt_bn_training(s[5], &train) ||
        (s[6] && !mt_number(s[6]) && !cdy_tv_none(s[6])) || (s[7] && !mt_number(s[7])))
        return NULL;
    const cdy_meta *x = mt_tensor(tr, s[0]);
    if (!x || x->ndim < 2 || (x->dtype != CDY_DT_FLOAT32 && x->dtype != CDY_DT_FLOAT64) ||
        (train && cdy_meta_numel(x) / x->sizes[1] < 2))
        return NULL;
    for (int a = 1; a < 5; a++)
        if ((a < 3 && !train && s[a]->kind != TV_TENSOR) ||
            !mt_channel_vec(tr, s[a], x->sizes[1], x->dtype))
            return NULL;
    cdy_meta m = *x;
    return mt_batch_norm_strides(tr, s, x, &m) ? NULL : cdy_fake_from_meta(tr, &m);
}

/* Item i (0 or 1) of t when t is a pair (a constant or traced tuple / list
 * of two): the item itself, or for a constant one *tmp made to hold it;
 * NULL when t is not a pair. */
static const tvar *mt_pair_item(const tvar *t, int i, tvar *tmp)
{
    if (t->kind == TV_CONST && (PyTuple_Check(t->obj) || PyList_Check(t->obj)) &&
        PySequence_Fast_GET_SIZE(t->obj) == 2) {
        *tmp = (tvar){.kind = TV_CONST, .obj = PySequence_Fast_GET_ITEM(t->obj, i)};
        return tmp;
    }
    return (t->kind == TV_TUPLE || t->kind == TV_LIST) && t->n == 2 ? t->items[i] : NULL;
}

/* One output size of adaptive_avg_pool2d: a positive int, or None (the
 * input's size in); -1 otherwise. */
static int64_t mt_pool_size(const tvar *t, int64_t in)
{
    long long v;
    if (cdy_tv_none(t))
        return in;
    return cdy_const_int(t, &v) && v > 0 ? v : -1;
}

/* A fake for F.adaptive_avg_pool2d(input, output_size) over a 3-d or 4-d
 * float32 / float64 input: output_size an int or a pair of ints / None; the
 * last two sizes replaced, the input's suggested memory format (the 1x1
 * case, a mean, restrides its result the same way). */
static PyObject *mt_adaptive_avg_pool2d(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[2];
    if (cdy_bind_names("input output_size", args, nargs, kwnames, s) || !s[0] || !s[1])
        return NULL;
    const cdy_meta *x = mt_tensor(tr, s[0]);
    if (!x || (x->ndim != 3 && x->ndim != 4) ||
        (x->dtype != CDY_DT_FLOAT32 && x->dtype != CDY_DT_FLOAT64))
        return NULL;
    cdy_meta m = *x;
    int64_t *hw = &m.sizes[m.ndim - 2];
    if (s[1]->kind == TV_CONST && PyLong_CheckExact(s[1]->obj)) {
        hw[0] = hw[1] = mt_pool_size(s[1], 0);
    } else {
        for (int i = 0; i < 2; i++) {
            tvar tmp;
            const tvar *e = mt_pair_item(s[1], i, &tmp);
            if (!e)
                return NULL;
            hw[i] = mt_pool_size(e, hw[i]);
        }
    }
    if (hw[0] < 1 || hw[1] < 1)
        return NULL;
    return mt_suggested_strides(x, &m) ? NULL : cdy_fake_from_meta(tr, &m);
}

/* A fake for softmax / log_softmax with args bound to (input, dim, dtype): a
 * non-empty float32 / float64 input, dim a constant int in range, dtype None,
 * absent, float32 or float64: the input's sizes in that dtype (else the
 * input's), contiguous whatever the input's layout (CPU's kernel allocates
 * so: checked over channels_last, transposed, sliced and expanded inputs). */
static PyObject *mt_softmax(tracer *tr, tvar **s)
{
    long long d;
    const cdy_meta *x = s[0] ? mt_tensor(tr, s[0]) : NULL;
    if (!x || x->ndim < 1 || !s[1] || !cdy_const_int(s[1], &d) || d < -x->ndim ||
        d >= x->ndim || (x->dtype != CDY_DT_FLOAT32 && x->dtype != CDY_DT_FLOAT64))
        return NULL;
    cdy_meta m = *x;
    if (!cdy_tv_none(s[2])) {
        m.dtype = mt_dtype_arg(s[2]);
        if (m.dtype != CDY_DT_FLOAT32 && m.dtype != CDY_DT_FLOAT64)
            return NULL;
    }
    cdy_canonical_strides(m.ndim, m.sizes, m.strides);
    return cdy_fake_from_meta(tr, &m);
}

/* A fake for F.mse_loss / F.l1_loss (sig ends in weight, which must be None)
 * or F.smooth_l1_loss (beta set: sig ends in beta, a number >= 0): input and target
 * non-empty float32 / float64 tensors of one dtype and the same sizes, no
 * legacy size_average / reduce, reduction 'mean' or 'sum' (absent: 'mean'):
 * a 0-dim result; 'none': the elementwise layout of the two. */
static PyObject *mt_loss(tracer *tr, tvar **args, int nargs, PyObject *kwnames, const char *sig,
                         int beta)
{
    tvar *s[6];
    if (cdy_bind_names(sig, args, nargs, kwnames, s) || !s[0] || !s[1])
        return NULL;
    const cdy_meta *x = mt_tensor(tr, s[0]), *y = mt_tensor(tr, s[1]);
    const char *red = mt_reduction(s[4]);
    if (!x || !y || x->dtype != y->dtype || x->ndim != y->ndim ||
        memcmp(x->sizes, y->sizes, sizeof(int64_t) * (size_t)x->ndim) ||
        (x->dtype != CDY_DT_FLOAT32 && x->dtype != CDY_DT_FLOAT64) ||
        !cdy_tv_none(s[2]) || !cdy_tv_none(s[3]) ||
        (!cdy_tv_none(s[5]) && !(beta && mt_number(s[5]) && PyFloat_AsDouble(s[5]->obj) >= 0)) || !red) {
        PyErr_Clear();
        return NULL;
    }
    cdy_meta m;
    memset(&m, 0, sizeof(m));
    m.dtype = x->dtype;
    if (!strcmp(red, "none")) {
        mt_operand ops[2] = {{x->ndim, x->sizes, x->strides}, {y->ndim, y->sizes, y->strides}};
        if (mt_layout(ops, 2, &m))
            return NULL;
    } else if (strcmp(red, "mean") && strcmp(red, "sum")) {
        return NULL;
    }
    return cdy_fake_from_meta(tr, &m);
}

/* The two ints of a 2-d conv or pool parameter t into v: absent (NULL) or
 * None, dflt for both (dflt < 0: not allowed); an int, both; a pair of ints
 * (mt_pair_item).  0, or -1 for anything else (an empty tuple too, which
 * eager rejects). */
static int mt_pair(const tvar *t, int64_t dflt, int64_t v[2])
{
    long long a;
    if (cdy_tv_none(t)) {
        v[0] = v[1] = dflt;
        return dflt >= 0 ? 0 : -1;
    }
    if (cdy_const_int(t, &a)) {
        v[0] = v[1] = a;
        return 0;
    }
    for (int i = 0; i < 2; i++) {
        tvar tmp;
        const tvar *e = mt_pair_item(t, i, &tmp);
        if (!e || !cdy_const_int(e, &a))
            return -1;
        v[i] = a;
    }
    return 0;
}

/* A fake for torch.conv2d / F.conv2d(input, weight, bias, stride, padding,
 * dilation, groups): a batched 4-d float32 / float64 input, a 4-d weight of
 * its dtype whose channels times groups are the input's, a bias None or 1-d
 * of the output channels, int or pair parameters (no padding string): the
 * output sizes of torch's conv shape formula, channels_last where the input
 * or the weight is (as CPU's kernels return it, float32 and float64; torch's
 * meta says contiguous, which a float64 or channels_last-weight conv, run
 * as an extern, then gave the user), else contiguous. */
static PyObject *mt_conv2d(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[7];
    int64_t st[2], pad[2], dil[2];
    long long groups = 1;
    if (cdy_bind_names("input weight bias stride padding dilation groups", args, nargs,
                       kwnames, s) || !s[0] || !s[1] || mt_pair(s[3], 1, st) ||
        mt_pair(s[4], 0, pad) || mt_pair(s[5], 1, dil) || (s[6] && !cdy_const_int(s[6], &groups)))
        return NULL;
    const cdy_meta *x = mt_tensor(tr, s[0]), *w = mt_tensor(tr, s[1]);
    if (!x || !w || x->ndim != 4 || w->ndim != 4 || w->dtype != x->dtype || groups < 1 ||
        (x->dtype != CDY_DT_FLOAT32 && x->dtype != CDY_DT_FLOAT64) ||
        x->sizes[1] != w->sizes[1] * groups || w->sizes[0] % groups ||
        !mt_channel_vec(tr, s[2], w->sizes[0], x->dtype))
        return NULL;
    cdy_meta m = *x;
    m.sizes[1] = w->sizes[0];
    for (int i = 0; i < 2; i++) {
        int64_t span = x->sizes[2 + i] + 2 * pad[i] - dil[i] * (w->sizes[2 + i] - 1) - 1;
        if (st[i] < 1 || pad[i] < 0 || dil[i] < 1 || span < 0)
            return NULL;
        m.sizes[2 + i] = span / st[i] + 1;
    }
    if (mt_suggests_cl(x) || mt_suggests_cl(w))
        mt_channels_last_strides(m.sizes, m.strides);
    else
        cdy_canonical_strides(4, m.sizes, m.strides);
    return cdy_fake_from_meta(tr, &m);
}

/* A pool's stride sd into st: absent, None or empty means the kernel k; a
 * pair as mt_pair.  0 or -1. */
static int mt_pool_stride(const tvar *sd, const int64_t *k, int64_t *st)
{
    if (!sd || (sd->kind == TV_CONST && (sd->obj == Py_None ||
                                         (PyTuple_Check(sd->obj) && !PyTuple_GET_SIZE(sd->obj)) ||
                                         (PyList_Check(sd->obj) && !PyList_GET_SIZE(sd->obj)))) ||
        ((sd->kind == TV_TUPLE || sd->kind == TV_LIST) && sd->n == 0)) {
        st[0] = k[0];
        st[1] = k[1];
        return 0;
    }
    return mt_pair(sd, -1, st);
}

static PyObject *mt_pool(tracer *tr, const tvar *t, const int64_t *k, const int64_t *st,
                         const int64_t *pad, const int64_t *dil, int ceil);

/* A fake for F.max_pool2d (torch_fn: torch.max_pool2d) without indices over
 * a 3-d or 4-d float32 / float64 input: kernel_size, stride (absent: the
 * kernel), padding, dilation ints or pairs, ceil_mode a bool, padding at most
 * half the dilated kernel: the output sizes of torch's pooling formula, the
 * input's suggested memory format. */
static PyObject *mt_max_pool2d(tracer *tr, tvar **args, int nargs, PyObject *kwnames,
                               int torch_fn)
{
    tvar *s[7] = {NULL};   /* the torch_fn form binds 6 names: s[6] stays NULL */
    int64_t k[2], st[2], pad[2], dil[2];
    if (cdy_bind_names(torch_fn ? "input kernel_size stride padding dilation ceil_mode"
                                : "input kernel_size stride padding dilation ceil_mode return_indices",
                       args, nargs, kwnames, s) ||
        !s[0] || !s[1] || mt_pair(s[1], -1, k) || (s[5] && !(s[5]->kind == TV_CONST &&
                                                            PyBool_Check(s[5]->obj))) ||
        (s[6] && !(s[6]->kind == TV_CONST && s[6]->obj == Py_False)))
        return NULL;
    if (mt_pool_stride(s[2], k, st) || mt_pair(s[3], 0, pad) || mt_pair(s[4], 1, dil))
        return NULL;
    return mt_pool(tr, s[0], k, st, pad, dil, s[5] && s[5]->obj == Py_True);
}

/* The fake of a 2-d pool of input t (3-d or 4-d float32 / float64) with
 * kernel k, stride st, padding pad, dilation dil (pairs) and ceil_mode ceil:
 * torch's pooling output size per spatial dim (a padding at most half the
 * dilated kernel, as eager requires), the input's suggested memory format;
 * NULL with no error for anything else. */
static PyObject *mt_pool(tracer *tr, const tvar *t, const int64_t *k, const int64_t *st,
                         const int64_t *pad, const int64_t *dil, int ceil)
{
    const cdy_meta *x = mt_tensor(tr, t);
    if (!x || (x->ndim != 3 && x->ndim != 4) || !mt_float(x))
        return NULL;
    cdy_meta m = *x;
    for (int i = 0; i < 2; i++) {
        int64_t in = x->sizes[x->ndim - 2 + i], eff = dil[i] * (k[i] - 1) + 1;
        if (k[i] < 1 || st[i] < 1 || dil[i] < 1 || pad[i] < 0 || 2 * pad[i] > eff)
            return NULL;
        int64_t num = in + 2 * pad[i] - eff + (ceil ? st[i] - 1 : 0);
        if (num < 0)
            return NULL;
        int64_t out = num / st[i] + 1;
        if (ceil && (out - 1) * st[i] >= in + pad[i])
            out--;
        if (out < 1)
            return NULL;
        m.sizes[x->ndim - 2 + i] = out;
    }
    return mt_suggested_strides(x, &m) ? NULL : cdy_fake_from_meta(tr, &m);
}

/* A fake for F.avg_pool2d(input, kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override): as max_pool2d's (mt_pool, no
 * dilation), count_include_pad a bool, divisor_override None or a nonzero
 * int. */
static PyObject *mt_avg_pool2d(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[7];
    long long dv;
    int64_t k[2], st[2], pad[2], dil[2] = {1, 1};
    if (cdy_bind_names("input kernel_size stride padding ceil_mode count_include_pad "
                       "divisor_override", args, nargs, kwnames, s) ||
        !s[0] || !s[1] || mt_pair(s[1], -1, k) || mt_pair(s[3], 0, pad) ||
        (s[4] && !(s[4]->kind == TV_CONST && PyBool_Check(s[4]->obj))) ||
        (s[5] && !(s[5]->kind == TV_CONST && PyBool_Check(s[5]->obj))) ||
        (!cdy_tv_none(s[6]) && !(cdy_const_int(s[6], &dv) && dv != 0)))
        return NULL;
    if (mt_pool_stride(s[2], k, st))
        return NULL;
    return mt_pool(tr, s[0], k, st, pad, dil, s[4] && s[4]->obj == Py_True);
}

/* A fake for F.embedding(input, weight, padding_idx, max_norm, ...): a
 * non-empty int64 / int32 index tensor, a 2-d float32 / float64 weight, no
 * max_norm (it renormalizes the weight in place): the index's sizes and the
 * weight's row length, contiguous, the weight's dtype. */
static PyObject *mt_embedding(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[7];
    if (cdy_bind_names("input weight padding_idx max_norm norm_type scale_grad_by_freq sparse",
                       args, nargs, kwnames, s) || !s[0] || !s[1] || !cdy_tv_none(s[3]))
        return NULL;
    const cdy_meta *i = mt_tensor(tr, s[0]), *w = mt_tensor(tr, s[1]);
    if (!i || !w || w->ndim != 2 || i->ndim + 1 > CDY_MAX_NDIM ||
        (i->dtype != CDY_DT_INT64 && i->dtype != CDY_DT_INT32) ||
        (w->dtype != CDY_DT_FLOAT32 && w->dtype != CDY_DT_FLOAT64))
        return NULL;
    cdy_meta m = *i;
    m.sizes[m.ndim++] = w->sizes[1];
    m.dtype = w->dtype;
    cdy_canonical_strides(m.ndim, m.sizes, m.strides);
    return cdy_fake_from_meta(tr, &m);
}

/* A fake for a vector norm: torch.linalg.vector_norm's args (torch.norm's
 * when norm: cdy_norm_args) bound as the lowering binds them, then the
 * reduction rule (cdy_meta_reduce) of op; NULL with no error otherwise. */
static PyObject *mt_vector_norm(tracer *tr, tvar **args, int nargs, PyObject *kwnames, int norm,
                                int op)
{
    tvar *pos[4], *canon[CDY_MAX_NODE_ARGS];
    PyObject *r = NULL;
    if (norm ? !cdy_norm_args(tr, args, nargs, kwnames, pos) &&
                   cdy_op_bind(tr, &op, pos, 4, NULL, canon) == 4
             : cdy_op_bind(tr, &op, args, nargs, kwnames, canon) == 4)
        r = cdy_meta_reduce(tr, op, canon, 4);
    if (!r && tr->t->status == CDY_TRACE_OK)
        PyErr_Clear();
    return r;
}

/* A fake for flip (MT_FLIP: torch.flip(input, dims), Tensor.flip(*dims) or
 * (dims), given positionally), fliplr (MT_FLIPLR, 2+ dims) or flipud (MT_FLIPUD, 1+
 * dims) of a non-empty tensor, the dims in range and distinct: as torch's
 * empty_like(x) with preserve_format, x's strides (those of its size-1
 * dims too) where x is dense and non-overlapping, else dense strides in the
 * order of x's (a sliced transposed input gives a transposed result). */
static PyObject *mt_flip(tracer *tr, tvar **args, int nargs, PyObject *kwnames, int kind)
{
    int dims[CDY_MAX_NDIM], n = 0;
    const cdy_meta *x = nargs >= 1 && !kwnames ? mt_tensor(tr, args[0]) : NULL;
    if (!x || x->ndim < (kind == MT_FLIPLR ? 2 : 1) || (kind != MT_FLIP && nargs != 1))
        return NULL;
    for (int i = 1; i < nargs; i++)
        if (cdy_int_items(args[i], dims, &n, CDY_MAX_NDIM))
            return NULL;
    unsigned seen = 0;
    for (int i = 0; i < n; i++) {
        int d = dims[i] < 0 ? dims[i] + x->ndim : dims[i];
        if (d < 0 || d >= x->ndim || (seen >> d & 1))
            return NULL;
        seen |= 1u << d;
    }
    cdy_meta m;
    return cdy_meta_empty_like(x, &m) ? NULL : cdy_fake_from_meta(tr, &m);
}

int cdy_meta_empty_like(const cdy_meta *x, cdy_meta *m)
{
    mt_operand o = {x->ndim, x->sizes, x->strides};
    *m = *x;
    return !mt_dense(&o) && mt_layout(&o, 1, m) ? -1 : 0;
}

/* ---- sdpa, group_norm, normalize, cumsum, tril / triu, roll, addmm,
 * cross_entropy -------------------------------------------------------------
 * The same story: their torch metas are Python decompositions or refs (behind
 * torch._disable_dynamo, or calling torch._check), and the first compile of a
 * function with any of them took about 1 s where it takes 0.03.  Layouts as
 * eager's CPU kernels allocate their results (checked by test_meta_c). */

/* 1 if a tensor of sizes a (na dims) broadcasts to sizes b (nb dims). */
static int mt_broadcasts_to(const int64_t *a, int na, const int64_t *b, int nb)
{
    if (na > nb)
        return 0;
    for (int i = 1; i <= na; i++)
        if (a[na - i] != 1 && a[na - i] != b[nb - i])
            return 0;
    return 1;
}

/* 1 if the bound args of F.scaled_dot_product_attention (query key value
 * attn_mask dropout_p is_causal scale enable_gqa) are a call these rules
 * cover: q, k, v 4-d float32 / float64 tensors of one dtype, batch and heads
 * equal, q's and k's head size equal, k and v of one length; no dropout, no
 * gqa, is_causal a bool (and then no mask), a mask None or a bool / q-dtype
 * tensor that broadcasts to (B, H, L, S), scale None or a number.  *flash:
 * whether CPU's flash kernel runs it (last dims of stride 1, v's head size
 * q's), which allocates its output like the query (torch.empty_like); eager's
 * math path (a head size of v's own, a strided last dim) returns a
 * contiguous result: both checked against eager by test_meta_c. */
static int mt_sdpa_covered(tracer *tr, tvar **s, int *flash)
{
    if (!s[0] || !s[1] || !s[2] || !mt_false(s[7]) ||
        (s[4] && !(mt_number(s[4]) && PyFloat_AsDouble(s[4]->obj) == 0.0)) ||
        (s[5] && !(s[5]->kind == TV_CONST && PyBool_Check(s[5]->obj))) ||
        (!cdy_tv_none(s[6]) && !mt_number(s[6])))
        return 0;
    const cdy_meta *q = mt_tensor(tr, s[0]), *k = mt_tensor(tr, s[1]), *v = mt_tensor(tr, s[2]);
    const cdy_meta *qkv[3] = {q, k, v};
    *flash = 1;
    for (int i = 0; i < 3; i++) {
        if (!qkv[i] || qkv[i]->ndim != 4 || qkv[i]->dtype != q->dtype ||
            qkv[i]->sizes[0] != q->sizes[0] || qkv[i]->sizes[1] != q->sizes[1])
            return 0;
        *flash &= qkv[i]->strides[3] == 1 || qkv[i]->sizes[3] == 1;
    }
    if (!mt_float(q) || k->sizes[3] != q->sizes[3] || v->sizes[2] != k->sizes[2])
        return 0;
    *flash &= v->sizes[3] == q->sizes[3];
    if (!cdy_tv_none(s[3])) {
        const cdy_meta *a = mt_tensor(tr, s[3]);
        int64_t target[4] = {q->sizes[0], q->sizes[1], q->sizes[2], k->sizes[2]};
        if ((s[5] && s[5]->obj == Py_True) || !a ||
            (a->dtype != CDY_DT_BOOL && a->dtype != q->dtype) ||
            !mt_broadcasts_to(a->sizes, a->ndim, target, 4))
            return 0;
    }
    return 1;
}

/* A fake for F.scaled_dot_product_attention in mt_sdpa_covered's cases: the
 * size (B, H, L, v's head size), q's dtype; torch.empty_like(q)'s strides
 * where the flash kernel runs, else contiguous.  The CPU flash kernel returns
 * its result in the query's memory order (a (B, H, L, E) view of (B, L, H, E)
 * heads, as transformers makes q, gives a result whose transpose(1, 2) is
 * already contiguous), while torch's meta function says contiguous: the node
 * gets the kernel's strides, so the runtime does not copy the result into the
 * meta's and the usual transpose(1, 2).contiguous() after it is free. */
static PyObject *mt_sdpa(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[8];
    int flash;
    cdy_meta m;
    if (nargs > 6 ||   /* scale and enable_gqa are keyword-only */
        cdy_bind_names("query key value attn_mask dropout_p is_causal scale enable_gqa", args,
                       nargs, kwnames, s) || !mt_sdpa_covered(tr, s, &flash) ||
        cdy_meta_empty_like(mt_tensor(tr, s[0]), &m)) {
        PyErr_Clear();
        return NULL;
    }
    if (!flash) {
        m.sizes[3] = mt_tensor(tr, s[2])->sizes[3];
        cdy_canonical_strides(4, m.sizes, m.strides);
    }
    return cdy_fake_from_meta(tr, &m);
}

/* A fake for F.group_norm(input, num_groups, weight, bias, eps) (torch.group_norm
 * with cudnn_enabled when g): a float32 / float64 input of 2+ dims whose
 * channels the groups divide, weight and bias None or 1-d of the channels and
 * the input's dtype, eps a number: the input's sizes and dtype in its
 * suggested memory format. */
static PyObject *mt_group_norm(tracer *tr, tvar **args, int nargs, PyObject *kwnames, int g)
{
    tvar *s[6];
    long long groups;
    if (cdy_bind_names(g ? "input num_groups weight bias eps cudnn_enabled"
                         : "input num_groups weight bias eps", args, nargs, kwnames, s) ||
        !s[0] || !s[1] || !cdy_const_int(s[1], &groups) || (s[4] && !mt_number(s[4])))
        return NULL;
    const cdy_meta *x = mt_tensor(tr, s[0]);
    if (!x || x->ndim < 2 || !mt_float(x) || groups <= 0 || x->sizes[1] % groups ||
        !mt_channel_vec(tr, s[2], x->sizes[1], x->dtype) ||
        !mt_channel_vec(tr, s[3], x->sizes[1], x->dtype))
        return NULL;
    cdy_meta m = *x;
    return mt_suggested_strides(x, &m) ? NULL : cdy_fake_from_meta(tr, &m);
}

/* A fake for F.normalize(input, p, dim, eps, out) with no out: a dense
 * float32 / float64 input of 1+ dims, dim in range, p and eps numbers: the
 * input's meta (x over its broadcast norm: TensorIterator keeps a dense
 * operand's strides).  Others: torch's meta. */
static PyObject *mt_normalize(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[5];
    long long d = 1;
    if (cdy_bind_names("input p dim eps out", args, nargs, kwnames, s) || !s[0] ||
        !cdy_tv_none(s[4]) || (s[1] && !mt_number(s[1])) || (s[3] && !mt_number(s[3])) ||
        (s[2] && !cdy_const_int(s[2], &d)))
        return NULL;
    const cdy_meta *x = mt_tensor(tr, s[0]);
    mt_operand o = {x ? x->ndim : 0, x ? x->sizes : NULL, x ? x->strides : NULL};
    if (!x || x->ndim < 1 || !mt_float(x) || d < -x->ndim || d >= x->ndim || !mt_dense(&o))
        return NULL;
    return cdy_fake_from_meta(tr, x);
}

/* A fake for cumsum(input, dim, dtype): a tensor of 1+ dims, dim in range,
 * no dtype= or a float32 / float64 / int64 one: the input's sizes,
 * contiguous (CPU's kernel allocates so for every layout), the dtype given,
 * else int64 for an integer or bool input, else the input's. */
static PyObject *mt_cumsum(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[3];
    long long d;
    if (nargs > 2 ||   /* dtype is keyword-only */
        cdy_bind_names("input dim dtype", args, nargs, kwnames, s) || !s[0] || !s[1] ||
        !cdy_const_int(s[1], &d))
        return NULL;
    const cdy_meta *x = mt_tensor(tr, s[0]);
    if (!x || x->ndim < 1 || d < -x->ndim || d >= x->ndim)
        return NULL;
    cdy_meta m = *x;
    if (!cdy_tv_none(s[2])) {
        m.dtype = mt_dtype_arg(s[2]);
        if (!mt_float(&m) && m.dtype != CDY_DT_INT64)
            return NULL;
    } else if (!cdy_dtype_table[x->dtype].is_float) {
        m.dtype = CDY_DT_INT64;
    }
    cdy_canonical_strides(m.ndim, m.sizes, m.strides);
    return cdy_fake_from_meta(tr, &m);
}

/* A fake for tril / triu(input, diagonal): a tensor of 2+ dims, an int
 * diagonal: its meta with contiguous strides (CPU's kernel allocates so). */
static PyObject *mt_tril(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[2];
    long long diag;
    if (cdy_bind_names("input diagonal", args, nargs, kwnames, s) || !s[0] ||
        (s[1] && !cdy_const_int(s[1], &diag)))
        return NULL;
    const cdy_meta *x = mt_tensor(tr, s[0]);
    if (!x || x->ndim < 2)
        return NULL;
    cdy_meta m = *x;
    cdy_canonical_strides(m.ndim, m.sizes, m.strides);
    return cdy_fake_from_meta(tr, &m);
}

/* A fake for index_fill(input, dim, index, value): dim an int in range, index
 * a tensor of at most one dim, value a number or a 0-d tensor: the input's
 * meta in the layout of input.clone() (preserve_format), which eager fills
 * (torch's meta says contiguous for a non-dense input). */
static PyObject *mt_index_fill(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[4];
    long long dim;
    if (cdy_bind_names("input dim index value", args, nargs, kwnames, s) || !s[0] || !s[1] ||
        !s[2] || !s[3] || !cdy_const_int(s[1], &dim) || s[2]->kind != TV_TENSOR)
        return NULL;
    const cdy_meta *x = mt_tensor(tr, s[0]);
    const cdy_meta *ix = &tr->t->graph.values[s[2]->value].meta;
    const cdy_meta *v = s[3]->kind == TV_TENSOR ? &tr->t->graph.values[s[3]->value].meta : NULL;
    int nd = x && x->ndim > 0 ? x->ndim : 1;
    if (!x || dim < -nd || dim >= nd || ix->ndim > 1 || ix->dtype != CDY_DT_INT64 ||
        (v ? v->ndim != 0 : !mt_number(s[3])))
        return NULL;
    cdy_meta m;
    return cdy_meta_empty_like(x, &m) ? NULL : cdy_fake_from_meta(tr, &m);
}

/* A fake for roll(input, shifts, dims): shifts and dims ints or equally long
 * int sequences, the dims in range: the input's meta in its suggested memory
 * format; no dims (a roll of the flattened input): contiguous. */
static PyObject *mt_roll(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[3];
    int sh[CDY_MAX_NDIM], dims[CDY_MAX_NDIM], nsh = 0, nd = 0;
    if (cdy_bind_names("input shifts dims", args, nargs, kwnames, s) || !s[0] || !s[1] ||
        cdy_int_items(s[1], sh, &nsh, CDY_MAX_NDIM) || nsh < 1)
        return NULL;
    const cdy_meta *x = mt_tensor(tr, s[0]);
    if (!x || x->ndim < 1)
        return NULL;
    cdy_meta m = *x;
    if (cdy_tv_none(s[2])) {
        if (nsh != 1)
            return NULL;
        cdy_canonical_strides(m.ndim, m.sizes, m.strides);
        return cdy_fake_from_meta(tr, &m);
    }
    if (cdy_int_items(s[2], dims, &nd, CDY_MAX_NDIM) || nd != nsh)
        return NULL;
    for (int i = 0; i < nd; i++)
        if (dims[i] < -x->ndim || dims[i] >= x->ndim)
            return NULL;
    return mt_suggested_strides(x, &m) ? NULL : cdy_fake_from_meta(tr, &m);
}

/* A fake for torch.addmm(input, mat1, mat2, beta, alpha): 2-d float32 /
 * float64 matrices of one dtype whose inner sizes agree, an input of that
 * dtype broadcasting to the product's sizes, numbers beta and alpha: the
 * product's sizes, contiguous (for every operand layout, as mm). */
static PyObject *mt_addmm(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[5];
    if (nargs > 3 ||   /* beta and alpha are keyword-only */
        cdy_bind_names("input mat1 mat2 beta alpha", args, nargs, kwnames, s) || !s[0] ||
        !s[1] || !s[2] || (s[3] && !mt_number(s[3])) || (s[4] && !mt_number(s[4])))
        return NULL;
    const cdy_meta *c = mt_tensor(tr, s[0]), *a = mt_tensor(tr, s[1]), *b = mt_tensor(tr, s[2]);
    if (!c || !a || !b || a->ndim != 2 || b->ndim != 2 || !mt_float(a) ||
        b->dtype != a->dtype || c->dtype != a->dtype || a->sizes[1] != b->sizes[0])
        return NULL;
    cdy_meta m;
    memset(&m, 0, sizeof(m));
    m.ndim = 2;
    m.dtype = a->dtype;
    m.sizes[0] = a->sizes[0];
    m.sizes[1] = b->sizes[1];
    if (!mt_broadcasts_to(c->sizes, c->ndim, m.sizes, 2))
        return NULL;
    cdy_canonical_strides(2, m.sizes, m.strides);
    return cdy_fake_from_meta(tr, &m);
}

/* A fake for F.cross_entropy(input, target, weight, size_average,
 * ignore_index, reduce, reduction, label_smoothing) with class indices: a
 * float32 / float64 input (N, C, d...), an int64 target (N, d...), weight
 * None or 1-d of C in the input's dtype, no legacy size_average / reduce,
 * reduction 'mean' or 'sum' (absent: 'mean'), an int ignore_index, a number
 * label_smoothing: a 0-d result of the input's dtype. */
static PyObject *mt_cross_entropy(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[8];
    long long ign;
    if (cdy_bind_names("input target weight size_average ignore_index reduce reduction "
                       "label_smoothing", args, nargs, kwnames, s) || !s[0] || !s[1] ||
        !cdy_tv_none(s[3]) || !cdy_tv_none(s[5]) || (s[4] && !cdy_const_int(s[4], &ign)) ||
        (s[7] && !mt_number(s[7])))
        return NULL;
    const char *red = mt_reduction(s[6]);
    const cdy_meta *x = mt_tensor(tr, s[0]), *t = mt_tensor(tr, s[1]);
    if (!red || (strcmp(red, "mean") && strcmp(red, "sum")) || !x || !t || x->ndim < 2 ||
        !mt_float(x) || t->dtype != CDY_DT_INT64 || t->ndim != x->ndim - 1 ||
        t->sizes[0] != x->sizes[0] || memcmp(t->sizes + 1, x->sizes + 2,
                                             sizeof(int64_t) * (size_t)(t->ndim - 1)) ||
        !mt_channel_vec(tr, s[2], x->sizes[1], x->dtype)) {
        PyErr_Clear();
        return NULL;
    }
    cdy_meta m;
    memset(&m, 0, sizeof(m));
    m.dtype = x->dtype;
    return cdy_fake_from_meta(tr, &m);
}

/* A fake for zeros_like / ones_like / empty_like(input, *, dtype, layout,
 * device, requires_grad, memory_format) (full_like: input, fill_value a
 * number): no layout, device or pin_memory, requires_grad False,
 * memory_format absent or torch.preserve_format: torch.empty_like(input)'s
 * meta (cdy_meta_empty_like) in dtype= when given, else the input's. */
static PyObject *mt_like(tracer *tr, tvar **args, int nargs, PyObject *kwnames, int full)
{
    tvar *s[8];
    cdy_meta m;
    if (nargs != 1 + full ||
        cdy_bind_names(full ? "input fill_value dtype layout device pin_memory requires_grad "
                              "memory_format"
                            : "input dtype layout device pin_memory requires_grad memory_format",
                       args, nargs, kwnames, s) || !s[0])
        return NULL;
    tvar **o = s + full;   /* o[1]: dtype, o[2..5]: layout device pin_memory requires_grad */
    if ((full && !mt_number(s[1])) || !cdy_tv_none(o[2]) || !cdy_tv_none(o[3]) ||
        !mt_false(o[4]) || !mt_false(o[5]))
        return NULL;
    if (o[6] && !cdy_tv_none(o[6])) {
        PyObject *pf = PyObject_GetAttrString(cdy_torch, "preserve_format");
        int ok = pf && o[6]->kind == TV_CONST && o[6]->obj == pf;
        Py_XDECREF(pf);
        PyErr_Clear();
        if (!ok)
            return NULL;
    }
    const cdy_meta *x = mt_tensor(tr, s[0]);
    if (!x || cdy_meta_empty_like(x, &m))
        return NULL;
    if (!cdy_tv_none(o[1]) && (m.dtype = mt_dtype_arg(o[1])) == CDY_DT_NONE)
        return NULL;
    return cdy_fake_from_meta(tr, &m);
}

/* A fake for cdynamo._autograd.layer_norm_input_grad(grad, input, weight, eps,
 * normalized) / softmax_input_grad(grad, result, dim) / layer_norm_grad_xhat(grad,
 * input, eps, normalized) (their parameters' names): grad and input float32 / float64 tensors of one dtype and sizes;
 * the input's sizes, contiguous.  NULL with no error otherwise. */
static PyObject *mt_input_grad(tracer *tr, tvar **args, int nargs, PyObject *kwnames,
                               const char *names)
{
    tvar *s[5];
    if (cdy_bind_names(names, args, nargs, kwnames, s) || !s[0] || !s[1])
        return NULL;
    const cdy_meta *g = mt_tensor(tr, s[0]), *x = mt_tensor(tr, s[1]);
    if (!g || !x || g->dtype != x->dtype || g->ndim != x->ndim ||
        (x->dtype != CDY_DT_FLOAT32 && x->dtype != CDY_DT_FLOAT64) ||
        memcmp(g->sizes, x->sizes, sizeof(int64_t) * (size_t)x->ndim))
        return NULL;
    cdy_meta m = *x;
    cdy_canonical_strides(m.ndim, m.sizes, m.strides);
    return cdy_fake_from_meta(tr, &m);
}

/* Meta m of x's sizes and dtype, dense with dims 1 and 2 swapped in memory
 * ((B, H, L, E) sizes of (B, L, H, E) memory: what torch's CPU flash kernels
 * allocate for attention's heads). */
static void mt_heads_major(const cdy_meta *x, cdy_meta *m)
{
    *m = *x;
    int64_t sz[4] = {x->sizes[0], x->sizes[2], x->sizes[1], x->sizes[3]}, st[4];
    cdy_canonical_strides(4, sz, st);
    m->strides[0] = st[0];
    m->strides[1] = st[2];
    m->strides[2] = st[1];
    m->strides[3] = st[3];
}

/* A fake for cdynamo._autograd.attention_grads(grad, query, key, value, scale,
 * is_causal[, out, lse]): 4-d float32 tensors of one batch and heads, q, k and
 * v of one head size, k and v of one length, grad q's sizes, scale a number,
 * is_causal a bool (out and lse not read): the gradients of q, k and v, each
 * heads-major (mt_heads_major). */
static PyObject *mt_attention_grads(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[8];
    if (cdy_bind_names("grad query key value scale is_causal out lse", args, nargs, kwnames, s) ||
        !s[0] || !s[1] || !s[2] || !s[3] || !s[4] || !mt_number(s[4]) || !s[5] ||
        s[5]->kind != TV_CONST || !PyBool_Check(s[5]->obj))
        return NULL;
    const cdy_meta *m[4] = {mt_tensor(tr, s[0]), mt_tensor(tr, s[1]), mt_tensor(tr, s[2]),
                            mt_tensor(tr, s[3])};
    if (!m[1])
        return NULL;
    for (int i = 0; i < 4; i++) {
        if (!m[i] || m[i]->ndim != 4 || m[i]->dtype != CDY_DT_FLOAT32 ||
            m[i]->sizes[0] != m[1]->sizes[0] || m[i]->sizes[1] != m[1]->sizes[1] ||
            m[i]->sizes[3] != m[1]->sizes[3])
            return NULL;
    }
    if (m[0]->sizes[2] != m[1]->sizes[2] || m[2]->sizes[2] != m[3]->sizes[2])
        return NULL;
    PyObject *r[3];
    for (int i = 0; i < 3; i++) {
        cdy_meta g;
        mt_heads_major(m[i + 1], &g);
        if (!(r[i] = cdy_fake_from_meta(tr, &g)))
            return NULL;
    }
    return cdy_tr_keep(tr, PyTuple_Pack(3, r[0], r[1], r[2]));
}

/* A fake for Tensor.repeat(*sizes) (or a sequence of sizes): at least as
 * many positive ints as the tensor has dims: the sizes times the tensor's
 * (its dims aligned to the right), contiguous, its dtype. */
static PyObject *mt_repeat(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    int r[CDY_MAX_NDIM], n = 0;
    const cdy_meta *x = nargs >= 2 && !kwnames ? mt_tensor(tr, args[0]) : NULL;
    if (!x)
        return NULL;
    for (int i = 1; i < nargs; i++)
        if (cdy_int_items(args[i], r, &n, CDY_MAX_NDIM) ||
            (nargs > 2 && args[i]->kind == TV_CONST && !PyLong_Check(args[i]->obj)))
            return NULL;
    if (n < x->ndim)
        return NULL;
    cdy_meta m;
    memset(&m, 0, sizeof(m));
    m.ndim = n;
    m.dtype = x->dtype;
    for (int i = 0; i < n; i++) {
        int xi = i - (n - x->ndim);
        if (r[i] < 1)
            return NULL;
        m.sizes[i] = (int64_t)r[i] * (xi >= 0 ? x->sizes[xi] : 1);
    }
    cdy_canonical_strides(n, m.sizes, m.strides);
    return cdy_fake_from_meta(tr, &m);
}

/* A fake for gather(input, dim, index, sparse_grad): an int64 index of the
 * input's rank, no larger than the input in the dims other than dim, dim in
 * range, no sparse_grad: the index's sizes, contiguous (CPU's kernel
 * allocates so for every index layout), the input's dtype. */
static PyObject *mt_gather(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[4];
    long long d;
    if (nargs > 3 ||   /* sparse_grad is keyword-only */
        cdy_bind_names("input dim index sparse_grad", args, nargs, kwnames, s) || !s[0] ||
        !s[1] || !s[2] || !cdy_const_int(s[1], &d) || !mt_false(s[3]))
        return NULL;
    const cdy_meta *x = mt_tensor(tr, s[0]), *i = mt_tensor(tr, s[2]);
    if (!x || !i || i->dtype != CDY_DT_INT64 || i->ndim != x->ndim || x->ndim < 1 ||
        d < -x->ndim || d >= x->ndim)
        return NULL;
    d = d < 0 ? d + x->ndim : d;
    for (int k = 0; k < x->ndim; k++)
        if (k != d && i->sizes[k] > x->sizes[k])
            return NULL;
    cdy_meta m = *i;
    m.dtype = x->dtype;
    cdy_canonical_strides(m.ndim, m.sizes, m.strides);
    return cdy_fake_from_meta(tr, &m);
}

/* ---- the backward ops of training graphs (issue 34) --------------------------
 * Their torch metas are Python (_meta_registrations.py); their first
 * torch._check imports torch.fx's symbolic shapes, sympy and torch._dynamo
 * (~800 modules, 60-70 MB of peak RSS), so the backward of a CNN would cost
 * more memory than eager's step.  The rules take the calls the generated
 * backwards make (python/cdynamo/_grad_formulas.py, trace/autograd.c). */

/* 1 if tensors a and b are float32 / float64 of one dtype and rank n. */
static int mt_same_float(const cdy_meta *a, const cdy_meta *b, int n)
{
    return a && b && mt_float(a) && a->dtype == b->dtype && a->ndim == n && b->ndim == n;
}

/* A fake for aten._adaptive_avg_pool2d_backward(grad_output, self): a 3-d or
 * 4-d self and a grad of its rank, dtype and leading sizes: self's sizes and
 * dtype, self's suggested memory format (CPU's kernel resizes its result so). */
static PyObject *mt_adaptive_avg_pool2d_bw(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    if (nargs != 2 || kwnames)
        return NULL;
    const cdy_meta *g = mt_tensor(tr, args[0]), *x = mt_tensor(tr, args[1]);
    if (!x || (x->ndim != 3 && x->ndim != 4) || !mt_same_float(g, x, x->ndim) ||
        memcmp(g->sizes, x->sizes, sizeof(int64_t) * (size_t)(x->ndim - 2)))
        return NULL;
    cdy_meta m = *x;
    return mt_suggested_strides(x, &m) ? NULL : cdy_fake_from_meta(tr, &m);
}

/* A fake for aten.max_pool2d_with_indices(self, kernel_size, stride, padding,
 * dilation, ceil_mode): (the pool as torch.max_pool2d's, its int64 indices
 * of the same sizes and layout). */
static PyObject *mt_max_pool2d_idx(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    PyObject *out = mt_max_pool2d(tr, args, nargs, kwnames, 1);
    if (!out)
        return NULL;
    cdy_meta m;
    if (cdy_read_meta(tr, out, &m))
        return NULL;
    m.dtype = CDY_DT_INT64;
    PyObject *idx = cdy_fake_from_meta(tr, &m);
    return idx ? cdy_tr_keep(tr, PyTuple_Pack(2, out, idx)) : NULL;
}

/* A fake for aten.max_pool2d_with_indices_backward(grad_output, self,
 * kernel_size, stride, padding, dilation, ceil_mode, indices), positional:
 * a 3-d or 4-d self, grad and int64 indices of its rank and of one shape:
 * self's sizes and dtype in its suggested memory format (the structured
 * kernel's output). */
static PyObject *mt_max_pool2d_bw(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    if (nargs != 8 || kwnames)
        return NULL;
    const cdy_meta *g = mt_tensor(tr, args[0]), *x = mt_tensor(tr, args[1]),
                   *i = mt_tensor(tr, args[7]);
    if (!x || !i || (x->ndim != 3 && x->ndim != 4) || !mt_same_float(g, x, x->ndim) ||
        i->dtype != CDY_DT_INT64 || i->ndim != g->ndim ||
        memcmp(g->sizes, i->sizes, sizeof(int64_t) * (size_t)g->ndim) ||
        memcmp(g->sizes, x->sizes, sizeof(int64_t) * (size_t)(x->ndim - 2)))
        return NULL;
    cdy_meta m = *x;
    return mt_suggested_strides(x, &m) ? NULL : cdy_fake_from_meta(tr, &m);
}

/* 1 if t is a constant or traced tuple / list of n bools; their values in b. */
static int mt_bools(const tvar *t, int n, int *b)
{
    for (int k = 0; k < n; k++) {
        tvar tmp;
        const tvar *e = NULL;
        if (t->kind == TV_CONST && (PyTuple_Check(t->obj) || PyList_Check(t->obj)) &&
            PySequence_Fast_GET_SIZE(t->obj) == n)
            e = (tmp = (tvar){.kind = TV_CONST, .obj = PySequence_Fast_GET_ITEM(t->obj, k)}, &tmp);
        else if ((t->kind == TV_TUPLE || t->kind == TV_LIST) && t->n == n)
            e = t->items[k];
        if (!e || e->kind != TV_CONST || !PyBool_Check(e->obj))
            return 0;
        b[k] = e->obj == Py_True;
    }
    return 1;
}

/* A fake for aten.convolution_backward(grad_output, input, weight, bias_sizes,
 * stride, padding, dilation, transposed=False, output_padding, groups,
 * output_mask), positional, as conv_backward in the prelude calls it: a
 * 3-d..5-d input, weight and grad of one float dtype, each contiguous and
 * none that torch would call channels_last (CPU's kernels then return
 * contiguous gradients), grad's batch and channels the input's and the
 * weight's: (grad_input, grad_weight, grad_bias), each None where output_mask
 * says so, else the input's / weight's sizes contiguous and [C_out]. */
static PyObject *mt_conv_bw(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    int mask[3];
    if (nargs != 11 || kwnames || args[7]->kind != TV_CONST || args[7]->obj != Py_False ||
        !mt_bools(args[10], 3, mask))
        return NULL;
    const cdy_meta *g = mt_tensor(tr, args[0]), *x = mt_tensor(tr, args[1]),
                   *w = mt_tensor(tr, args[2]);
    int n = x ? x->ndim : 0;
    if (n < 3 || n > 5 || !mt_same_float(g, x, n) || !mt_same_float(w, x, n) ||
        g->sizes[0] != x->sizes[0] || g->sizes[1] != w->sizes[0] || mt_suggests_cl(x) ||
        mt_suggests_cl(w) || mt_suggests_cl(g))
        return NULL;
    const cdy_meta *ts[3] = {g, x, w};
    for (int k = 0; k < 3; k++) {
        mt_operand o = {ts[k]->ndim, ts[k]->sizes, ts[k]->strides};
        if (!mt_contiguous(&o))
            return NULL;
    }
    PyObject *r[3] = {Py_None, Py_None, Py_None};
    for (int k = 0; k < 3; k++) {
        if (!mask[k])
            continue;
        cdy_meta m = k == 0 ? *x : *w;
        if (k == 2) {
            m.ndim = 1;
            m.sizes[0] = w->sizes[0];
        }
        cdy_canonical_strides(m.ndim, m.sizes, m.strides);
        if (!(r[k] = cdy_fake_from_meta(tr, &m)))
            return NULL;
    }
    return cdy_tr_keep(tr, PyTuple_Pack(3, r[0], r[1], r[2]));
}

/* A fake for torch.as_strided_scatter(input, src, size, stride,
 * storage_offset), or mutate.c's _cdy_scatter (a write through a view of a
 * contiguous root, as view_scatter's copy into a part of zeros):
 * a contiguous input and a src of its dtype: the input's meta (CPU's kernel
 * clones the input, which keeps a contiguous tensor's strides). */
static PyObject *mt_as_strided_scatter(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *s[5];
    if (cdy_bind_names("input src size stride storage_offset", args, nargs, kwnames, s) ||
        !s[0] || !s[1] || !s[2] || !s[3])
        return NULL;
    const cdy_meta *x = mt_tensor(tr, s[0]), *src = mt_tensor(tr, s[1]);
    if (!x || !src || src->dtype != x->dtype)
        return NULL;
    mt_operand o = {x->ndim, x->sizes, x->strides};
    if (!mt_contiguous(&o))
        return NULL;
    cdy_meta m = *x;
    return cdy_fake_from_meta(tr, &m);
}

/* A fake for torch._transformer_encoder_layer_fwd(src, embed_dim, num_heads,
 * 4 projection tensors, use_gelu, norm_first, eps, 8 norm / ffn tensors[,
 * mask[, mask_type]]), positional, as nn.TransformerEncoderLayer's fast path
 * calls it: a non-empty 3-d float src whose last dim is embed_dim and the 12
 * weights of its dtype: src's sizes, contiguous (CPU's kernel allocates it so
 * whatever src's layout; torch 2.13's meta keeps src's layout, torch 2.11 has
 * none: without this rule its trace stopped there, at each new size). */
static PyObject *mt_encoder_layer(tracer *tr, tvar **args, int nargs, PyObject *kwnames)
{
    static const int weights[12] = {3, 4, 5, 6, 10, 11, 12, 13, 14, 15, 16, 17};
    long long e;
    if (kwnames || nargs < 18 || nargs > 20 || !cdy_const_int(args[1], &e))
        return NULL;
    const cdy_meta *x = mt_tensor(tr, args[0]);
    if (!x || x->ndim != 3 || x->sizes[2] != e || !cdy_dtype_table[x->dtype].is_float)
        return NULL;
    for (int k = 0; k < 12; k++) {
        const cdy_meta *w = mt_tensor(tr, args[weights[k]]);
        if (!w || w->dtype != x->dtype)
            return NULL;
    }
    cdy_meta m = *x;
    cdy_canonical_strides(m.ndim, m.sizes, m.strides);
    return cdy_fake_from_meta(tr, &m);
}

/* A fake for an extern call of a callable of a META row: layer_norm as
 * mt_layer_norm; matmul, mm, bmm (two tensors) or F.linear (input,
 * weight[, bias]) given positionally, when every tensor is a non-empty
 * float32 / float64 tensor of one dtype, of at most CDY_MAX_NDIM dims, a
 * bias 1-d and as long as the weight's rows: the result sizes above, with
 * contiguous strides, the operands' dtype.  NULL with no error otherwise. */
PyObject *cdy_meta_extern(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames)
{
    int op, kind = mt_ext_kind(fn, &op);
    if (cdy_mut_is_scatter(fn))
        return mt_as_strided_scatter(tr, args, nargs, kwnames);
    switch (kind) {
    case MT_CAT: return mt_cat(tr, args, nargs, kwnames, "tensors dim", 0);
    case MT_CONCATENATE: return mt_cat(tr, args, nargs, kwnames, "tensors axis", 0);
    case MT_STACK: return mt_cat(tr, args, nargs, kwnames, "tensors dim", 1);
    case MT_BATCH_NORM: return mt_batch_norm(tr, args, nargs, kwnames);
    case MT_ADAPTIVE_AVG_POOL2D: return mt_adaptive_avg_pool2d(tr, args, nargs, kwnames);
    case MT_SOFTMAX_F: case MT_SOFTMAX: {
        tvar *s[4];
        if (cdy_bind_names(kind == MT_SOFTMAX_F ? "input dim _stacklevel dtype" : "input dim dtype", args,
                           nargs, kwnames, s))
            return NULL;
        if (kind == MT_SOFTMAX_F)
            s[2] = s[3];
        return mt_softmax(tr, s);
    }
    case MT_LOSS: return mt_loss(tr, args, nargs, kwnames,
                             "input target size_average reduce reduction weight", 0);
    case MT_SMOOTH_L1_LOSS: return mt_loss(tr, args, nargs, kwnames,
                             "input target size_average reduce reduction beta", 1);
    case MT_CONV2D: return mt_conv2d(tr, args, nargs, kwnames);
    case MT_MAX_POOL2D_F: case MT_MAX_POOL2D: return mt_max_pool2d(tr, args, nargs, kwnames, kind == MT_MAX_POOL2D);
    case MT_EMBEDDING: return mt_embedding(tr, args, nargs, kwnames);
    case MT_VECTOR_NORM: case MT_NORM: return mt_vector_norm(tr, args, nargs, kwnames, kind == MT_NORM, op);
    case MT_FLIP: case MT_FLIPLR: case MT_FLIPUD: return mt_flip(tr, args, nargs, kwnames, kind);
    case MT_SDPA: return mt_sdpa(tr, args, nargs, kwnames);
    case MT_GROUP_NORM_F: case MT_GROUP_NORM: return mt_group_norm(tr, args, nargs, kwnames, kind == MT_GROUP_NORM);
    case MT_NORMALIZE: return mt_normalize(tr, args, nargs, kwnames);
    case MT_CUMSUM: return mt_cumsum(tr, args, nargs, kwnames);
    case MT_TRIL: return mt_tril(tr, args, nargs, kwnames);
    case MT_INDEX_FILL: return mt_index_fill(tr, args, nargs, kwnames);
    case MT_ROLL: return mt_roll(tr, args, nargs, kwnames);
    case MT_ADDMM: return mt_addmm(tr, args, nargs, kwnames);
    case MT_CROSS_ENTROPY: return mt_cross_entropy(tr, args, nargs, kwnames);
    case MT_LIKE: case MT_FULL_LIKE: return mt_like(tr, args, nargs, kwnames, kind == MT_FULL_LIKE);
    case MT_REPEAT: return mt_repeat(tr, args, nargs, kwnames);
    case MT_GATHER: return mt_gather(tr, args, nargs, kwnames);
    case MT_AVG_POOL2D: return mt_avg_pool2d(tr, args, nargs, kwnames);
    case MT_ADAPTIVE_AVG_POOL2D_BW: return mt_adaptive_avg_pool2d_bw(tr, args, nargs, kwnames);
    case MT_MAX_POOL2D_IDX: return mt_max_pool2d_idx(tr, args, nargs, kwnames);
    case MT_MAX_POOL2D_BW: return mt_max_pool2d_bw(tr, args, nargs, kwnames);
    case MT_CONV_BW: return mt_conv_bw(tr, args, nargs, kwnames);
    case MT_AS_STRIDED_SCATTER: return mt_as_strided_scatter(tr, args, nargs, kwnames);
    case MT_ENCODER_LAYER: return mt_encoder_layer(tr, args, nargs, kwnames);
    case MT_LN_INPUT_GRAD:
        return mt_input_grad(tr, args, nargs, kwnames, "grad input weight eps normalized");
    case MT_SOFTMAX_INPUT_GRAD: return mt_input_grad(tr, args, nargs, kwnames, "grad result dim");
    case MT_LN_GRAD_XHAT: return mt_input_grad(tr, args, nargs, kwnames, "grad input eps normalized");
    case MT_ATTENTION_GRADS: return mt_attention_grads(tr, args, nargs, kwnames);
    }
    if (!kind || kwnames || nargs < 2)
        return NULL;
    if (kind == MT_LAYER_NORM)
        return mt_layer_norm(tr, args, nargs);
    if (nargs > (kind == MT_LINEAR ? 3 : 2))
        return NULL;
    const cdy_meta *ms[3];
    int nt = nargs;
    if (nargs == 3 && cdy_tv_none(args[2]))
        nt = 2;   /* linear without a bias */
    for (int i = 0; i < nt; i++) {
        if (args[i]->kind != TV_TENSOR)
            return NULL;
        ms[i] = &tr->t->graph.values[args[i]->value].meta;
        if (ms[i]->ndim < 1 || ms[i]->ndim > CDY_MAX_NDIM || cdy_meta_numel(ms[i]) == 0 ||
            ms[i]->dtype != ms[0]->dtype ||
            (ms[i]->dtype != CDY_DT_FLOAT32 && ms[i]->dtype != CDY_DT_FLOAT64))
            return NULL;
    }
    cdy_meta m;
    memset(&m, 0, sizeof(m));
    if (nt == 3 && (ms[2]->ndim != 1 || ms[2]->sizes[0] != ms[1]->sizes[0]))
        return NULL;
    if (mt_mm_sizes(kind, ms[0], ms[1], &m) || m.ndim > CDY_MAX_NDIM)
        return NULL;
    cdy_canonical_strides(m.ndim, m.sizes, m.strides);
    m.dtype = ms[0]->dtype;
    return cdy_fake_from_meta(tr, &m);
}

/* ---- the CPU layout of results whose dtype and sizes torch's meta gave ----
 * torch 2.13's metas of pointwise ops are Python refs whose stride rule
 * (prims' compute_elementwise_output_strides) is not TensorIterator's: with
 * broadcast or expanded operands of mixed layouts the CPU kernel picks other
 * strides (logical_and, xlogy, copysign, clamp_min, ...), and a few CPU
 * kernels allocate contiguous results where the meta keeps the input's
 * layout (log_sigmoid).  A result is then given the strides the CPU gives it,
 * so that later kernels and the caller see eager's layout. */

/* 1 if overload `ov` of ATen op packet is tagged pointwise and has a CPU
 * kernel (which builds a TensorIterator over its tensor args); errors cleared. */
static int mt_overload_cpu_pointwise(PyObject *packet, const char *ov)
{
    PyObject *op = PyObject_GetAttrString(packet, ov);
    PyObject *tags = op ? PyObject_GetAttrString(op, "tags") : NULL;
    PyObject *tag = tags ? PyObject_GetAttrString(cdy_torch, "Tag") : NULL;
    PyObject *pw = tag ? PyObject_GetAttrString(tag, "pointwise") : NULL;
    int is_pw = pw ? PySequence_Contains(tags, pw) : -1;
    PyObject *qn = is_pw == 1 ? PyObject_CallMethod(op, "name", NULL) : NULL;
    PyObject *c = qn ? PyObject_GetAttrString(cdy_torch, "_C") : NULL;
    PyObject *cpu = c ? PyObject_CallMethod(c, "_dispatch_has_kernel_for_dispatch_key", "Os", qn,
                                            "CPU") : NULL;
    int r = cpu == Py_True;
    Py_XDECREF(op);
    Py_XDECREF(tags);
    Py_XDECREF(tag);
    Py_XDECREF(pw);
    Py_XDECREF(qn);
    Py_XDECREF(c);
    Py_XDECREF(cpu);
    PyErr_Clear();
    return r;
}

/* 1 if callable fn names (by its __name__) an ATen op whose tensor overload
 * (default, else Tensor) is tagged pointwise and has a CPU kernel, a
 * TensorIterator over its tensor args (its number overloads wrap the number
 * and call it; a CompositeImplicit op's layout is its decomposition's: left
 * to torch's meta).  Not in-place ops (named x_).  Cached per callable. */
static int mt_fn_cpu_pointwise(PyObject *fn)
{
    static PyObject *cache;     /* {callable: bool} */
    if (!cache && !(cache = PyDict_New()))
        goto fail;
    PyObject *hit = PyDict_GetItemWithError(cache, fn);
    if (hit)
        return hit == Py_True;
    if (PyErr_Occurred())
        goto fail;
    PyObject *name = PyObject_GetAttrString(fn, "__name__");
    Py_ssize_t len = name && PyUnicode_Check(name) ? PyUnicode_GetLength(name) : 0;
    if (len && PyUnicode_ReadChar(name, len - 1) == '_')
        Py_CLEAR(name);      /* an in-place op (its result is its input) or a dunder */
    PyObject *ops = name ? PyObject_GetAttrString(cdy_torch, "ops") : NULL;
    PyObject *aten = ops ? PyObject_GetAttrString(ops, "aten") : NULL;
    PyObject *packet = aten ? PyObject_GetAttr(aten, name) : NULL;
    PyErr_Clear();
    int r = packet && (mt_overload_cpu_pointwise(packet, "default") ||
                       mt_overload_cpu_pointwise(packet, "Tensor"));
    Py_XDECREF(name);
    Py_XDECREF(ops);
    Py_XDECREF(aten);
    Py_XDECREF(packet);
    if (PyDict_SetItem(cache, fn, r ? Py_True : Py_False))
        goto fail;
    return r;
fail:
    PyErr_Clear();
    return 0;
}

/* m's strides as CPU's iterator lays out its result over operands ops[0..n)
 * (tensor args targs[i], NULL for numbers), those of a dtype other than
 * common voting with their converted copy's strides (CDY_DT_NONE: none
 * converted; where's condition, first when cond_first, never); 0, or -1
 * when the operands do not broadcast to m's sizes. */
static int mt_layout_as(mt_operand *ops, tvar **targs, int n, int common, int cond_first,
                        const cdy_value *vals, cdy_meta *m)
{
    int64_t conv[CDY_MAX_NODE_ARGS][CDY_MAX_NDIM];
    for (int i = cond_first; common != CDY_DT_NONE && i < n; i++)
        if (targs[i] && ops[i].ndim > 0 && vals[targs[i]->value].meta.dtype != common) {
            mt_converted_strides(&ops[i], conv[i]);
            ops[i].strides = conv[i];
        }
    cdy_meta l = *m;
    if (mt_layout(ops, n, &l) || l.ndim != m->ndim ||
        memcmp(l.sizes, m->sizes, sizeof(int64_t) * (size_t)m->ndim))
        return -1;
    memcpy(m->strides, l.strides, sizeof(int64_t) * (size_t)m->ndim);
    return 0;
}

/* 1 if fn is torch.lerp / Tensor.lerp, whose number weight is a parameter of
 * eager's iterator (lerp.Scalar), not an operand. */
static int mt_fn_lerp(PyObject *fn)
{
    PyObject *name = PyObject_GetAttrString(fn, "__name__");
    int r = name && PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "lerp") == 0;
    Py_XDECREF(name);
    PyErr_Clear();
    return r;
}

/* The operands of extern pointwise call fn(*args) (the tensor args but a
 * keyword out=, positional numbers as 0-dim, as the Scalar overloads of
 * binary ops wrap them) into ops / targs; their count, or -1.  A number by
 * keyword (addcdiv's value=, alpha=) and lerp's weight are parameters of
 * eager's iterator, not operands: counted, a 0-dim operand would send an
 * all-contiguous call down the stride-ordering path (a (1, 1, 6) input of
 * strides (1, 1, 1) then gives (1, 1, 1) where eager allocates contiguous). */
static int mt_extern_operands(tracer *tr, PyObject *fn, tvar **args, int nargs,
                              PyObject *kwnames, mt_operand *ops, tvar **targs)
{
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    int n = 0, lerp = mt_fn_lerp(fn);
    for (int i = 0; i < nargs; i++) {
        tvar *a = args[i];
        int kw = i >= nargs - nkw;
        if (kw && PyUnicode_CompareWithASCIIString(
                      PyTuple_GET_ITEM(kwnames, i - (nargs - nkw)), "out") == 0)
            return -1;
        if (a->kind != TV_TENSOR && (!mt_number(a) || kw || lerp))
            continue;
        if (n == CDY_MAX_NODE_ARGS)
            return -1;
        const cdy_meta *m = a->kind == TV_TENSOR ? &tr->t->graph.values[a->value].meta : NULL;
        if (m && cdy_meta_numel(m) == 0)
            return -1;
        ops[n] = m ? (mt_operand){m->ndim, m->sizes, m->strides}
                   : (mt_operand){0, mt_no_dims, mt_no_dims};
        targs[n++] = m ? a : NULL;
    }
    return n;
}

/* The dtype CPU's iterator converts the operands of an extern pointwise op
 * with result dtype `res` to: res, but for a bool result of two operands
 * (a comparison, logical_and, ...) their result_type. */
static int mt_extern_common(tvar **args, int n, int res)
{
    tvar *data[2];
    int k = 0;
    for (int i = 0; i < n && k < 2; i++)
        if (args[i]->kind == TV_TENSOR || mt_number(args[i]))
            data[k++] = args[i];
    if (res != CDY_DT_BOOL)
        return res;
    return k == 2 ? cdy_result_dtype(data[0]->obj, data[1]->obj) : CDY_DT_NONE;
}

/* m: the meta of tensor x when cdynamo has its dtype and rank; 0, or -1
 * (no error set). */
static int mt_read_out(PyObject *x, cdy_meta *m)
{
    PyObject *dt = PyObject_TypeCheck(x, (PyTypeObject *)cdy_tensor_type)
                       ? PyObject_GetAttrString(x, "dtype") : NULL;
    PyObject *size = dt ? PyObject_GetAttrString(x, "shape") : NULL;
    PyObject *stride = size ? PyObject_CallMethod(x, "stride", NULL) : NULL;
    int r = -1;
    m->dtype = dt ? cdy_dtype_from_obj(dt) : CDY_DT_NONE;
    if (stride && m->dtype != CDY_DT_NONE && PyTuple_GET_SIZE(size) <= CDY_MAX_NDIM) {
        m->ndim = (int)PyTuple_GET_SIZE(size);
        for (int d = 0; d < m->ndim; d++) {
            m->sizes[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(size, d));
            m->strides[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, d));
        }
        r = PyErr_Occurred() ? -1 : 0;
    }
    Py_XDECREF(dt);
    Py_XDECREF(size);
    Py_XDECREF(stride);
    PyErr_Clear();
    return r;
}

/* A pointwise result dense in contiguous (or channels_last) order gets the
 * canonical strides of that order, as CPU's TensorIterator allocates it (the
 * meta function keeps an input's strides on size-1 dims, which then steers
 * later ops' layouts differently from eager).  The fake to use, or NULL. */
static PyObject *mt_canonical(tracer *tr, PyObject *out)
{
    static const char *formats[2] = {"contiguous_format", "channels_last"};
    cdy_meta m;
    if (mt_read_out(out, &m))
        return out;
    for (int f = 0; f < 2 && (f == 0 || m.ndim == 4); f++) {
        PyObject *fmt = PyObject_GetAttrString(cdy_torch, formats[f]);
        PyObject *kw = fmt ? Py_BuildValue("{s:O}", "memory_format", fmt) : NULL;
        PyObject *isc = PyObject_GetAttrString(out, "is_contiguous");
        PyObject *none = PyTuple_New(0);
        PyObject *dense = kw && isc && none ? PyObject_Call(isc, none, kw) : NULL;
        Py_XDECREF(kw);
        Py_XDECREF(isc);
        Py_XDECREF(none);
        Py_XDECREF(fmt);
        Py_XDECREF(dense);
        PyErr_Clear();
        if (dense != Py_True)
            continue;
        /* torch.empty_like(out, memory_format=...)'s strides, computed here: its
         * meta is a Python ref whose first call imports torch.fx and sympy */
        if (f)
            mt_channels_last_strides(m.sizes, m.strides);
        else
            cdy_canonical_strides(m.ndim, m.sizes, m.strides);
        return cdy_fake_from_meta(tr, &m);
    }
    return out;
}

/* out, or a fake of its dtype and sizes with the layout CPU gives the result
 * of fn(*args): op a lowered pointwise op (its operands as the C rules take
 * them, else canonical strides where dense) or an extern (kind E: a pointwise
 * ATen op with a CPU kernel, mt_fn_cpu_pointwise; a contiguous-result
 * kernel, a CONTIGUOUS row of callables.def); NULL with the trace stopped on error. */
PyObject *cdy_meta_cpu_layout(tracer *tr, int op, PyObject *fn, tvar **args, int nargs,
                              PyObject *kwnames, PyObject *out)
{
    cdy_meta m;
    mt_operand ops[CDY_MAX_NODE_ARGS];
    tvar *targs[CDY_MAX_NODE_ARGS];
    const cdy_value *vals = tr->t->graph.values;
    int extern_op = cdy_op_table[op].kind == 'E', n = -1, common = CDY_DT_NONE;
    if (mt_read_out(out, &m) || cdy_meta_numel(&m) == 0 || m.ndim == 0)
        return out;
    if (!extern_op && mt_rule(op) == 'M') {
        cdy_canonical_strides(m.ndim, m.sizes, m.strides);
        return cdy_fake_from_meta(tr, &m);
    }
    if (extern_op && cdy_callable_contiguous(fn)) {
        cdy_canonical_strides(m.ndim, m.sizes, m.strides);
        return cdy_fake_from_meta(tr, &m);
    }
    if (extern_op && mt_fn_cpu_pointwise(fn) &&
        (n = mt_extern_operands(tr, fn, args, nargs, kwnames, ops, targs)) > 0)
        common = mt_extern_common(args, nargs, m.dtype);
    if (!extern_op && (n = mt_operands(op, fn, args, nargs, vals, ops)) > 0) {
        for (int i = 0; i < n; i++)
            targs[i] = args[i]->kind == TV_TENSOR ? args[i] : NULL;
        common = mt_rule(op) == 'B' || (!mt_rule(op) && m.dtype == CDY_DT_BOOL)
                     ? (n == 2 ? cdy_result_dtype(args[0]->obj, args[1]->obj) : CDY_DT_NONE)
                     : m.dtype;
    }
    if (n <= 0 || mt_layout_as(ops, targs, n, common, !extern_op && mt_rule(op) == 'W', vals,
                               &m))
        return extern_op ? out : mt_canonical(tr, out);
    return cdy_fake_from_meta(tr, &m);
}
