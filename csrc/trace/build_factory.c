/* build_factory.c - composite lowerings: factories and tril / triu
 * (BUILD rows of ops/callables.def).
 *
 * zeros / ones / full / empty (and *_like, Tensor.new_*) become a FILL node
 * with torch's result meta (sizes, dtype, strides: *_like keeps dense
 * layouts as torch says); arange becomes IOTA * step + start computed in
 * int64 (integer dtypes) or double (float dtypes, as ATen's CPU kernel:
 * only when every value is exact, so its scalar and vector paths agree),
 * linspace likewise when its values are exact;
 * tril / triu become where(col - row <= k (>= k), x, 0) over two IOTAs,
 * eye (row == col) converted to the result dtype.
 * The nodes are pointwise: a factory read only by kernels is a constant
 * expression inside them, with no buffer and no torch call.  Anything else
 * (random factories, other devices, requires_grad, pin_memory, generators,
 * out=, values that do not convert exactly) returns NULL: an extern. */
#include "trace/trace.h"

#include <math.h>
#include <string.h>

/* 1 if PyObject_Str(o) is s (errors cleared: 0). */
static int str_is(PyObject *o, const char *s)
{
    PyObject *r = PyObject_Str(o);
    const char *u = r ? PyUnicode_AsUTF8(r) : NULL;
    int eq = u && strcmp(u, s) == 0;
    Py_XDECREF(r);
    PyErr_Clear();
    return eq;
}

/* 1 if keyword `name` with value a is one a lowered factory accepts:
 * dtype / memory_format / the call's own arguments (the result's meta says
 * what they did), device cpu, layout strided, requires_grad and
 * pin_memory False. */
static int kw_ok(PyObject *name, tvar *a)
{
    static const char *free_names[] = {"dtype", "memory_format", "size", "fill_value", "input",
                                       "diagonal", "start", "end", "step", "steps", "n", "m", NULL};
    const char *n = PyUnicode_AsUTF8(name);
    if (!n) {
        PyErr_Clear();
        return 0;
    }
    int none = a->kind == TV_CONST && a->obj == Py_None;
    for (int i = 0; free_names[i]; i++)
        if (strcmp(n, free_names[i]) == 0)
            return 1;
    if (strcmp(n, "requires_grad") == 0 || strcmp(n, "pin_memory") == 0)
        return none || (a->kind == TV_CONST && a->obj == Py_False);
    if (a->kind != TV_CONST && a->kind != TV_OBJ)
        return 0;
    if (strcmp(n, "device") == 0)
        return none || str_is(a->obj, "cpu");
    if (strcmp(n, "layout") == 0)
        return none || str_is(a->obj, "torch.strided");
    return 0;
}

/* 1 if every keyword of the call is accepted (kw_ok). */
static int kwargs_ok(const cdy_build_call *call)
{
    int nkw = call->kwnames ? (int)PyTuple_GET_SIZE(call->kwnames) : 0;
    for (int i = 0; i < nkw; i++)
        if (!kw_ok(PyTuple_GET_ITEM(call->kwnames, i), call->args[call->nargs - nkw + i]))
            return 0;
    return 1;
}

/* The argument named `name` (keyword) or else positional `pos` (-1: none);
 * NULL when absent. */
static tvar *arg_at(const cdy_build_call *call, int pos, const char *name)
{
    int nkw = call->kwnames ? (int)PyTuple_GET_SIZE(call->kwnames) : 0;
    for (int i = 0; i < nkw; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(call->kwnames, i), name) == 0)
            return call->args[call->nargs - nkw + i];
    return pos >= 0 && pos < call->nargs - nkw ? call->args[pos] : NULL;
}

/* 1 if a is a constant Python number (bool, int, float). */
static int is_number(const tvar *a)
{
    return a && a->kind == TV_CONST && (PyLong_Check(a->obj) || PyFloat_Check(a->obj));
}

/* A scalar graph value for number a (bool, int64 or float64); -1 when it
 * is none or does not fit. */
static int number_value(tracer *tr, const tvar *a)
{
    if (!is_number(a))
        return -1;
    if (PyBool_Check(a->obj))
        return cdy_scalar_bool(tr, a->obj == Py_True);
    if (PyFloat_Check(a->obj))
        return cdy_scalar_float(tr, PyFloat_AS_DOUBLE(a->obj));
    long long i = PyLong_AsLongLong(a->obj);
    if (i == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return cdy_scalar_int(tr, i);
}

/* 1 if scalar sv converts exactly to dtype dt (any number for floats; an
 * integer in range for integer dtypes, 0 or 1 for bool). */
static int converts_exactly(const cdy_value *sv, int dt)
{
    static const double lo[] = {0, 0, -128, -32768, -2147483648.0, -9223372036854775808.0};
    static const double hi[] = {1, 255, 127, 32767, 2147483647.0, 9223372036854775807.0};
    if (cdy_dtype_table[dt].is_float)
        return 1;
    if (sv->meta.dtype != CDY_DT_FLOAT64)
        return (double)sv->i >= lo[dt] && (double)sv->i <= hi[dt];
    double f = sv->f;
    return f == floor(f) && f >= lo[dt] && f <= hi[dt] && f > -9.2e18 && f < 9.2e18;
}

/* torch's result meta of the call, when it is a CPU (or meta) tensor that
 * does not require grad; 0 or -1 (not lowerable, not stopped). */
static int result_meta(tracer *tr, const cdy_build_call *call, cdy_meta *m)
{
    PyObject *out = call->out;
    if (!PyObject_TypeCheck(out, (PyTypeObject *)cdy_tensor_type))
        return -1;
    PyObject *dev = PyObject_GetAttrString(out, "device");
    PyObject *rg = PyObject_GetAttrString(out, "requires_grad");
    int ok = dev && rg == Py_False && (str_is(dev, "cpu") || str_is(dev, "meta"));
    tr->t->meta_factory |= ok && str_is(dev, "meta");   /* trace/breaks.c does not resume it */
    Py_XDECREF(dev);
    Py_XDECREF(rg);
    PyErr_Clear();
    if (!ok || !kwargs_ok(call))
        return -1;
    return cdy_read_meta(tr, out, m);
}

/* The call's result: node v, with a meta fake of meta m (a factory ran on
 * the CPU at trace time: its result is a real tensor).  NULL when stopped. */
static tvar *factory_result(tracer *tr, const cdy_build_call *call, int v, const cdy_meta *m)
{
    PyObject *fake = cdy_fake_from_meta(tr, m);
    if (!fake)
        return NULL;
    cdy_build_call c2 = *call;
    c2.out = fake;
    return cdy_build_result(tr, &c2, v);
}

/* A FILL node of value a (NULL: 0) with the call's result meta; NULL (an
 * extern) when a is not a number converting exactly to the result dtype. */
static tvar *build_fill(tracer *tr, const cdy_build_call *call, const tvar *a, int zero)
{
    cdy_meta m;
    if (result_meta(tr, call, &m))
        return NULL;
    int sv = a ? number_value(tr, a) : cdy_scalar_int(tr, zero);
    if (sv < 0 || !converts_exactly(&tr->t->graph.values[sv], m.dtype))
        return NULL;
    int v = cdy_node_add(tr, CDY_OP_FILL, &sv, 1, &m, m.dtype);
    cdy_tr_sym_fill(tr, call, v);
    return v < 0 ? NULL : factory_result(tr, call, v, &m);
}

/* zeros / empty / *_like / new_*: a FILL of 0 (empty: any value is eager's). */
tvar *cdy_build_zeros(tracer *tr, const cdy_build_call *call)
{
    return build_fill(tr, call, NULL, 0);
}

/* ones / ones_like / new_ones: a FILL of 1. */
tvar *cdy_build_ones(tracer *tr, const cdy_build_call *call)
{
    return build_fill(tr, call, NULL, 1);
}

/* full(size, fill_value) / full_like(input, fill_value). */
tvar *cdy_build_full(tracer *tr, const cdy_build_call *call)
{
    tvar *a = arg_at(call, 1, "fill_value");
    return a ? build_fill(tr, call, a, 0) : NULL;
}

/* Tensor.new_full(self, size, fill_value). */
tvar *cdy_build_new_full(tracer *tr, const cdy_build_call *call)
{
    tvar *a = arg_at(call, 2, "fill_value");
    return a ? build_fill(tr, call, a, 0) : NULL;
}

/* Exponent of the lowest set bit of finite x != 0 (x = odd * 2^e). */
static int lsb_exp(double x)
{
    int e;
    double m = frexp(fabs(x), &e);             /* x = m * 2^e, m in [0.5, 1) */
    unsigned long long mi = (unsigned long long)ldexp(m, 53);
    return e - 53 + __builtin_ctzll(mi);
}

/* 1 if start + step * i is exact in dtype dt (a float dtype) and in
 * double, with every partial sum of ATen's scalar and vector paths, for
 * i < n: all are multiples of the lowest bit of start and step and stay
 * below 2^(mantissa - 1) of it. */
static int arange_exact(double start, double step, int64_t n, int dt)
{
    if (!isfinite(start) || !isfinite(step) || n > ((int64_t)1 << 52))
        return 0;
    int e = 2000;
    if (start != 0)
        e = lsb_exp(start);
    if (step != 0 && lsb_exp(step) < e)
        e = lsb_exp(step);
    if (e == 2000)
        return 1;
    double span = fabs(start) + fabs(step) * (double)(n > 0 ? n - 1 : 0);
    int p = dt == CDY_DT_FLOAT32 ? 24 : dt == CDY_DT_BFLOAT16 ? 8 : dt == CDY_DT_FLOAT16 ? 11 : 53;
    return span < ldexp(1.0, e + p - 1) && e + p < 1000 && e > -1000;
}

/* A node op(a, scalar s) with meta m computed in dtype cdt; its number or -1. */
static int scalar_node(tracer *tr, int op, int a, int s, const cdy_meta *m, int cdt)
{
    int args[2] = {a, s};
    return s < 0 ? -1 : cdy_node_add(tr, op, args, 2, m, cdt);
}

/* The call's result start + step * IOTA over 1-D meta m, computed in
 * int64 (integer dtypes) or double and converted to m's dtype; start /
 * step scalar values, -2 when 0 / 1 (left out).  NULL when stopped or not
 * lowerable. */
static tvar *affine_result(tracer *tr, const cdy_build_call *call, const cdy_meta *m, int start,
                           int step, tvar *end, tvar *start_tv)
{
    int cdt = cdy_dtype_table[m->dtype].is_float ? CDY_DT_FLOAT64 : CDY_DT_INT64;
    cdy_meta im = {.dtype = CDY_DT_INT64, .ndim = 1, .sizes = {m->sizes[0]}, .strides = {1}};
    int d0 = cdy_scalar_int(tr, 0);
    int cur = d0 < 0 || start == -1 || step == -1
                  ? -1 : cdy_node_add(tr, CDY_OP_IOTA, &d0, 1, &im, CDY_DT_INT64);
    if (cur >= 0 && end && end->sx && start == -2 && step == -2) {
        int sx[CDY_MAX_NDIM] = {end->sx};   /* arange(n) of a size: n elements */
        cdy_tr_sym_sizes(tr, cur, sx);
        cdy_sx_taken(tr, end);
    } else if (cur >= 0 && end && start_tv && start >= 0 && step == -2 && cdt == CDY_DT_INT64 &&
               (end->sx || start_tv->sx)) {   /* arange(a, b) of sizes: b - a elements from a */
        int sx[CDY_MAX_NDIM] = {cdy_sx_arange_len(tr, start_tv, end)};
        if (sx[0] && (!start_tv->sx || !cdy_tr_sym_scalar(tr, start, start_tv->sx))) {
            cdy_tr_sym_sizes(tr, cur, sx);
            cdy_sx_taken(tr, end);
            cdy_sx_taken(tr, start_tv);
        }
    }
    im.dtype = cdt;
    cur = cdy_compose_affine(tr, cur, step, start, &im, cdt);
    if (cur >= 0 && tr->t->graph.values[cur].meta.dtype != m->dtype)
        cur = cdy_node_cast(tr, cur, m, m->dtype);
    if (cur < 0)
        return NULL;
    tr->t->graph.values[cur].meta = *m;
    return factory_result(tr, call, cur, m);
}

/* arange(end) / arange(start, end[, step]): IOTA * step + start in int64
 * (integer dtypes: int arguments) or double (float dtypes: exact values
 * only), converted to the result dtype; the size is torch's. */
tvar *cdy_build_arange(tracer *tr, const cdy_build_call *call)
{
    int nkw = call->kwnames ? (int)PyTuple_GET_SIZE(call->kwnames) : 0, npos = call->nargs - nkw;
    tvar *start = arg_at(call, npos >= 2 ? 0 : -1, "start");
    tvar *step = arg_at(call, npos >= 3 ? 2 : -1, "step");
    cdy_meta m;
    if ((start && !is_number(start)) || (step && !is_number(step)) ||
        result_meta(tr, call, &m) || m.ndim != 1)
        return NULL;
    int flt = cdy_dtype_table[m.dtype].is_float;
    double fs = start ? PyFloat_Check(start->obj) ? PyFloat_AS_DOUBLE(start->obj)
                                                  : PyLong_AsDouble(start->obj) : 0;
    double fst = step ? PyFloat_Check(step->obj) ? PyFloat_AS_DOUBLE(step->obj)
                                                 : PyLong_AsDouble(step->obj) : 1;
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return NULL;
    }
    if (flt ? !arange_exact(fs, fst, m.sizes[0], m.dtype)
            : ((start && PyFloat_Check(start->obj)) || (step && PyFloat_Check(step->obj)) ||
               fabs(fs) + fabs(fst) * (double)m.sizes[0] > 9.0e18))
        return NULL;
    int sv = fs == 0 ? -2 : number_value(tr, start), tv = fst == 1 ? -2 : number_value(tr, step);
    return affine_result(tr, call, &m, sv, tv, arg_at(call, npos >= 2 ? 1 : 0, "end"), start);
}

/* torch.linspace(start, end, steps): start + step * i, step = (end - start) /
 * (steps - 1), lowered when every value is exact (ATen's two halves and
 * vector path then agree): float dtypes as arange_exact; integer dtypes
 * from int endpoints in range with an integer step. */
tvar *cdy_build_linspace(tracer *tr, const cdy_build_call *call)
{
    tvar *a = arg_at(call, 0, "start"), *b = arg_at(call, 1, "end");
    cdy_meta m;
    if (!is_number(a) || !is_number(b) || result_meta(tr, call, &m) || m.ndim != 1)
        return NULL;
    int64_t n = m.sizes[0];
    int sa = number_value(tr, a), sb = number_value(tr, b);
    if (sa < 0 || sb < 0)
        return NULL;
    const cdy_value *va = &tr->t->graph.values[sa], *vb = &tr->t->graph.values[sb];
    double fa = va->meta.dtype == CDY_DT_FLOAT64 ? va->f : (double)va->i;
    double fb = vb->meta.dtype == CDY_DT_FLOAT64 ? vb->f : (double)vb->i;
    if (cdy_dtype_table[m.dtype].is_float) {
        double st = n > 1 ? (fb - fa) / (double)(n - 1) : 0;
        float ff[3] = {(float)fa, (float)fb, (float)st};
        if (!arange_exact(fa, st, n, m.dtype) || (n > 1 && fa + st * (double)(n - 1) != fb) ||
            ((m.dtype == CDY_DT_FLOAT32 || cdy_dtype_lowp(m.dtype)) &&
             (ff[0] != fa || ff[1] != fb || ff[2] != st)))
            return NULL;
        return affine_result(tr, call, &m, fa == 0 ? -2 : cdy_scalar_float(tr, fa),
                             st == 1 ? -2 : cdy_scalar_float(tr, st), NULL, NULL);
    }
    if (va->meta.dtype == CDY_DT_FLOAT64 || vb->meta.dtype == CDY_DT_FLOAT64 ||
        !converts_exactly(va, m.dtype) || !converts_exactly(vb, m.dtype) ||
        fabs(fa) > 1e15 || fabs(fb) > 1e15 || (n > 1 && (vb->i - va->i) % (n - 1)))
        return NULL;
    long long st = n > 1 ? (vb->i - va->i) / (n - 1) : 0;
    return affine_result(tr, call, &m, va->i == 0 ? -2 : sa, st == 1 ? -2 : cdy_scalar_int(tr, st),
                         NULL, NULL);
}

/* The symbolic sizes of tri's row IOTA [R, 1] and column IOTA [C] (values
 * row, col; either -1: none): the last two dims of input x (ndim dims). */
static void tri_sym_dims(tracer *tr, int row, int col, int x, int ndim)
{
    signed char rmap[CDY_MAX_NDIM] = {(signed char)(ndim - 2), -1};
    signed char cmap[CDY_MAX_NDIM] = {(signed char)(ndim - 1)};
    if (row >= 0)
        cdy_tr_sym_dims(tr, row, x, rmap);
    if (col >= 0)
        cdy_tr_sym_dims(tr, col, x, cmap);
}

/* tril / triu(input, diagonal=0): where(col - row <= k (tril: call->op LE) /
 * >= k (triu: GE), input, 0) over the last two dims, torch's result meta. */
tvar *cdy_build_tri(tracer *tr, const cdy_build_call *call)
{
    int cmp = call->op;
    tvar *slot[2];
    cdy_meta m;
    if (cdy_bind_names("input diagonal", call->args, call->nargs, call->kwnames, slot) ||
        !slot[0] || slot[0]->kind != TV_TENSOR || (slot[1] && !is_number(slot[1])) ||
        (slot[1] && PyFloat_Check(slot[1]->obj)) ||
        !PyObject_TypeCheck(call->out, (PyTypeObject *)cdy_tensor_type) ||
        cdy_read_meta(tr, call->out, &m) || m.ndim < 2 ||
        m.dtype != tr->t->graph.values[slot[0]->value].meta.dtype)
        return NULL;
    int64_t R = m.sizes[m.ndim - 2], C = m.sizes[m.ndim - 1];
    cdy_meta rm = {.dtype = CDY_DT_INT64, .ndim = 2, .sizes = {R, 1}, .strides = {1, 1}};
    cdy_meta cm = {.dtype = CDY_DT_INT64, .ndim = 1, .sizes = {C}, .strides = {1}};
    cdy_meta dm = {.dtype = CDY_DT_INT64, .ndim = 2, .sizes = {R, C}, .strides = {C, 1}};
    int d0 = cdy_scalar_int(tr, 0);
    int k = slot[1] ? number_value(tr, slot[1]) : cdy_scalar_int(tr, 0);
    int zero = m.dtype == CDY_DT_BOOL ? cdy_scalar_bool(tr, 0) : cdy_scalar_int(tr, 0);
    if (d0 < 0 || k < 0 || zero < 0)
        return NULL;
    if (slot[1] && slot[1]->sx && PyLong_CheckExact(slot[1]->obj) &&
        !cdy_tr_sym_scalar(tr, k, slot[1]->sx))
        cdy_sx_taken(tr, slot[1]);   /* a diagonal from sizes: a runtime number */
    int row = cdy_node_add(tr, CDY_OP_IOTA, &d0, 1, &rm, CDY_DT_INT64);
    int col = row < 0 ? -1 : cdy_node_add(tr, CDY_OP_IOTA, &d0, 1, &cm, CDY_DT_INT64);
    tri_sym_dims(tr, row, col, slot[0]->value, m.ndim);
    int rc[2] = {col, row};
    int diff = col < 0 ? -1 : cdy_node_add(tr, CDY_OP_SUB, rc, 2, &dm, CDY_DT_INT64);
    dm.dtype = CDY_DT_BOOL;
    int mask = diff < 0 ? -1 : scalar_node(tr, cmp, diff, k, &dm, CDY_DT_INT64);
    int wa[3] = {mask, slot[0]->value, zero};
    int v = mask < 0 ? -1 : cdy_node_add(tr, CDY_OP_WHERE, wa, 3, &m, m.dtype);
    return v < 0 ? NULL : cdy_build_result(tr, call, v);
}

/* eye(n, m=n): (row == col) as the result dtype, over two IOTAs. */
tvar *cdy_build_eye(tracer *tr, const cdy_build_call *call)
{
    cdy_meta m;
    if (result_meta(tr, call, &m) || m.ndim != 2)
        return NULL;
    cdy_meta rm = {.dtype = CDY_DT_INT64, .ndim = 2, .sizes = {m.sizes[0], 1}, .strides = {1, 1}};
    cdy_meta cm = {.dtype = CDY_DT_INT64, .ndim = 1, .sizes = {m.sizes[1]}, .strides = {1}};
    cdy_meta bm = m;
    bm.dtype = CDY_DT_BOOL;
    int d0 = cdy_scalar_int(tr, 0);
    int row = d0 < 0 ? -1 : cdy_node_add(tr, CDY_OP_IOTA, &d0, 1, &rm, CDY_DT_INT64);
    int col = row < 0 ? -1 : cdy_node_add(tr, CDY_OP_IOTA, &d0, 1, &cm, CDY_DT_INT64);
    int rc[2] = {row, col};
    int v = col < 0 ? -1 : cdy_node_add(tr, CDY_OP_EQ, rc, 2, &bm, CDY_DT_INT64);
    if (v >= 0 && m.dtype != CDY_DT_BOOL)
        v = cdy_node_cast(tr, v, &m, m.dtype);
    return v < 0 ? NULL : factory_result(tr, call, v, &m);
}
