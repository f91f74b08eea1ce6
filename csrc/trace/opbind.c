/* opbind.c - binding a call's arguments to a lowered op's canonical ones.
 *
 * The tracer calls cdy_op_bind when a torch call maps to an op of ops.def:
 * it returns the op's canonical positional arguments (tensors and numbers,
 * in the order the op's C template expects), or -1 when this particular
 * call cannot be lowered (then it runs as an extern op, still correct).
 *
 * Binding is table driven (ops/ops.def): an op's signature (its sig column,
 * default "input" / "input other" / "condition input other") says which
 * parameter each positional or keyword argument fills and what the defaults
 * are; then its flags and its check (ob_check) reject the dtypes and values
 * that the kernel cannot reproduce exactly (eager raises, or returns an
 * alias).                                                                    */
#include "trace/trace.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OB_MAX_PARAMS 8

/* The check of each op beyond its flags and signature (ops.def's check column). */
typedef enum {
    OB_CHECK_NONE, OB_CHECK_DIV_MODE, OB_CHECK_DIVISION, OB_CHECK_POW, OB_CHECK_ROUND,
    OB_CHECK_BOUNDS, OB_CHECK_CLAMP, OB_CHECK_GELU, OB_CHECK_MASKED_FILL, OB_CHECK_CAST,
    OB_CHECK_REDUCE, OB_CHECK_VAR, OB_CHECK_NORM
} ob_check_kind;

/* An op's signature and check (ops.def's sig and check columns): parameters
 * in the order of the call.  `name`: a tensor or a number, passed on;
 * `#name`: a Python number, passed on, `=v` its default; `-name`: a flag that
 * must be absent, None or False (dropped); `*name`: read by the op's check
 * (dropped; absent is NULL). */
typedef struct {
    const char *sig;
    ob_check_kind check;
} ob_row;

static const ob_row ob_rows[CDY_OP_COUNT] = {
#define CDY_PW(E, name, n, kind, flags, rule, to, sig, check, tf, ti, tb, tn, grad) \
    [CDY_OP_##E] = {sig, OB_CHECK_##check},
#define CDY_RED(E, name, n, flags, rule, sig, check, vf, vi, pair, grad) \
    [CDY_OP_##E] = {sig, OB_CHECK_##check},
#include "ops/ops.def"
};

/* One parsed parameter of a signature. */
typedef struct {
    char kind;          /* 0 plain, '#', '-', '*' */
    char name[24];
    const char *def;    /* default text, or NULL */
    int deflen;
} ob_param;

/* Parse signature sig into p[]; the count. */
static int ob_parse(const char *sig, ob_param *p)
{
    int n = 0;
    while (*sig && n < OB_MAX_PARAMS) {
        while (*sig == ' ')
            sig++;
        if (!*sig)
            break;
        ob_param *q = &p[n++];
        memset(q, 0, sizeof(*q));
        if (strchr("#-*", *sig))
            q->kind = *sig++;
        size_t k = 0;
        while (*sig && *sig != ' ' && *sig != '=' && k + 1 < sizeof(q->name))
            q->name[k++] = *sig++;
        if (*sig == '=') {
            q->def = ++sig;
            while (*sig && *sig != ' ')
                sig++;
            q->deflen = (int)(sig - q->def);
        }
    }
    return n;
}

/* The signature of op: its row's, else the default by its arity. */
static const char *ob_sig(int op)
{
    if (ob_rows[op].sig)
        return ob_rows[op].sig;
    switch (cdy_op_table[op].nargs) {
    case 1: return "input";
    case 2: return "input other";
    default: return "condition input other";
    }
}

/* The position of parameter `input` in op's signature (where a method call's
 * self goes), 0 when it has none. */
int cdy_op_self_pos(int op)
{
    ob_param p[OB_MAX_PARAMS];
    int np = ob_parse(ob_sig(op), p);
    for (int i = 0; i < np; i++)
        if (!strcmp(p[i].name, "input"))
            return i;
    return 0;
}

/* 1 if v is a Python number constant (bool, int or float). */
static int ob_is_number(const tvar *v)
{
    return v && v->kind == TV_CONST &&
           (PyBool_Check(v->obj) || PyLong_CheckExact(v->obj) || PyFloat_CheckExact(v->obj));
}

/* A constant tvar for default text d (float if it has '.' or 'e'); NULL when stopped. */
static tvar *ob_default(tracer *tr, const char *d, int len)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%.*s", len, d);
    PyObject *o = strpbrk(buf, ".e") ? PyFloat_FromDouble(atof(buf))
                                     : PyLong_FromLongLong(atoll(buf));
    return o ? cdy_tv_const(tr, o) : NULL;
}

/* Fill slot[] (one per parameter) from positional args and kwnames;
 * 0, or -1 when an argument matches no parameter or two. */
static int ob_slots(const ob_param *p, int np, tvar **args, int nargs, PyObject *kwnames,
                    tvar **slot)
{
    int nkw = kwnames ? (int)PyTuple_GET_SIZE(kwnames) : 0, npos = nargs - nkw;
    if (npos > np || npos < 0)
        return -1;
    for (int i = 0; i < np; i++)
        slot[i] = i < npos ? args[i] : NULL;
    for (int k = 0; k < nkw; k++) {
        const char *kw = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        int i = 0;
        while (kw && i < np && strcmp(p[i].name, kw) != 0)
            i++;
        if (!kw || i == np || slot[i])
            return -1;
        slot[i] = args[npos + k];
    }
    return 0;
}

/* Bind args/kwnames to the parameter names of signature sig (the prefixes
 * # - * and defaults are ignored here) into slot[] (NULL when absent);
 * 0, or -1 when an argument fits no parameter or two. */
int cdy_bind_names(const char *sig, tvar **args, int nargs, PyObject *kwnames, tvar **slot)
{
    ob_param p[OB_MAX_PARAMS];
    int np = ob_parse(sig, p);
    return ob_slots(p, np, args, nargs, kwnames, slot);
}

/* Apply the signature: canonical args into out[], `*` params into extra[]
 * (NULL when absent); the count of out, or -1. */
static int ob_apply(tracer *tr, int op, tvar **args, int nargs, PyObject *kwnames,
                    tvar **out, tvar **extra)
{
    ob_param p[OB_MAX_PARAMS];
    tvar *slot[OB_MAX_PARAMS];
    int np = ob_parse(ob_sig(op), p), n = 0, ne = 0;
    if (ob_slots(p, np, args, nargs, kwnames, slot))
        return -1;
    for (int i = 0; i < np; i++) {
        tvar *s = slot[i];
        if (p[i].kind == '-') {
            if (s && !(s->kind == TV_CONST && (s->obj == Py_None || s->obj == Py_False)))
                return -1;
        } else if (p[i].kind == '*') {
            extra[ne++] = s;
        } else if (p[i].kind == '#') {
            if (!s && p[i].def && !(s = ob_default(tr, p[i].def, p[i].deflen)))
                return -1;
            if (!ob_is_number(s))
                return -1;
            out[n++] = s;
        } else {
            if (!s || (s->kind != TV_TENSOR && !ob_is_number(s)))
                return -1;
            out[n++] = s;
        }
    }
    return n;
}

/* The cdy_dtype of a tensor tvar, or CDY_DT_NONE (numbers, unknown dtypes). */
static int ob_dtype(const tvar *v)
{
    if (!v || v->kind != TV_TENSOR)
        return CDY_DT_NONE;
    return cdy_dtype_take(PyObject_GetAttrString(v->obj, "dtype"));
}

/* 1 if v is a float tensor or a Python float. */
static int ob_floaty(const tvar *v)
{
    int d = ob_dtype(v);
    if (d != CDY_DT_NONE)
        return cdy_dtype_table[d].is_float;
    return v && v->kind == TV_CONST && PyFloat_CheckExact(v->obj);
}

/* torch.result_type(a, b) as a cdy_dtype, or CDY_DT_NONE. */
static int ob_result_dtype(const tvar *a, const tvar *b)
{
    return cdy_result_dtype(a->obj, b->obj);
}

/* The value of an integer (or bool) constant v in *i; 0, or -1 if v is not one. */
static int ob_const_int(const tvar *v, long long *i)
{
    if (!v || v->kind != TV_CONST || !(PyBool_Check(v->obj) || PyLong_CheckExact(v->obj)))
        return -1;
    *i = PyLong_AsLongLong(v->obj);
    if (*i == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* Integer division family: lowered for a float result, or an integer one
 * with a nonzero number divisor (a zero divisor raises in eager). */
static int ob_check_division(const tvar *a, const tvar *b)
{
    int rd = ob_result_dtype(a, b);
    long long d;
    if (rd == CDY_DT_NONE)
        return -1;
    if (cdy_dtype_table[rd].is_float)
        return 0;
    return ob_const_int(b, &d) == 0 && d != 0 ? 0 : -1;
}

/* pow: an integer result needs a non-negative exponent and no bool tensors
 * under a tensor exponent (eager raises for those).  A float32 result with a
 * nonzero number exponent that float32 rounds to 0 (|e| < 2^-150) is not
 * lowered: eager's vectorized loop raises to float(e) = 0 (1 for 0, NaN, -2),
 * its scalar loop to the double e (0, NaN, NaN), by the element's position. */
static int ob_check_pow(const tvar *a, const tvar *b)
{
    int rd = ob_result_dtype(a, b);
    long long e;
    if (rd == CDY_DT_NONE)
        return -1;
    if (rd == CDY_DT_FLOAT32 && b->kind == TV_CONST && PyFloat_Check(b->obj)) {
        double v = PyFloat_AS_DOUBLE(b->obj);
        if (v != 0 && (float)v == 0)
            return -1;
    }
    if (cdy_dtype_table[rd].is_float)
        return 0;
    if (b->kind == TV_TENSOR || PyBool_Check(b->obj))   /* x ** True: meta says int64, eager bool */
        return ob_dtype(a) == CDY_DT_BOOL || ob_dtype(b) == CDY_DT_BOOL ? -1 : 0;
    return ob_const_int(b, &e) == 0 && e >= 0 ? 0 : -1;
}

/* masked_fill(x, mask, value): a bool mask, and a value x's dtype holds. */
static int ob_check_masked_fill(tvar **out)
{
    static const long long lo[] = {0, 0, -128, -32768, -2147483648LL, INT64_MIN};
    static const long long hi[] = {1, 255, 127, 32767, 2147483647LL, INT64_MAX};
    int xd = ob_dtype(out[0]);
    long long v;
    if (xd == CDY_DT_NONE || ob_dtype(out[1]) != CDY_DT_BOOL)
        return -1;
    if (cdy_dtype_table[xd].is_float)
        return 0;
    return ob_const_int(out[2], &v) == 0 && v >= lo[xd] && v <= hi[xd] ? 0 : -1;
}

/* 1 if v is a Python float NaN. */
static int ob_is_nan_number(const tvar *v)
{
    return v->kind == TV_CONST && PyFloat_Check(v->obj) && isnan(PyFloat_AS_DOUBLE(v->obj));
}

/* Whether the installed torch's clamp ignores a NaN bound given alone
 * (clamp(x, min=nan) is x in torch 2.11, all NaN in 2.13; a NaN bound with
 * the other bound given, clamp_min and clamp_max fill with NaN in both):
 * eager asked once, with one-element tensors, the answer cached; 0 if the
 * probe fails. */
static int ob_lone_nan_ignored(void)
{
    static int known = -1;
    if (known >= 0)
        return known;
    known = 0;
    int ok = 1;
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *clamp = torch ? PyObject_GetAttrString(torch, "clamp") : NULL;
    PyObject *one = torch ? PyObject_CallMethod(torch, "ones", "i", 1) : NULL;
    PyObject *args = one ? PyTuple_Pack(1, one) : NULL;
    for (int i = 0; i < 2 && ok; i++) {
        PyObject *kw = Py_BuildValue("{s:d}", i ? "max" : "min", (double)NAN);
        PyObject *r = clamp && args && kw ? PyObject_Call(clamp, args, kw) : NULL;
        PyObject *item = r ? PyObject_CallMethod(r, "item", NULL) : NULL;
        ok = item && PyFloat_Check(item) && PyFloat_AS_DOUBLE(item) == 1.0;
        Py_XDECREF(item);
        Py_XDECREF(r);
        Py_XDECREF(kw);
    }
    Py_XDECREF(args);
    Py_XDECREF(one);
    Py_XDECREF(clamp);
    Py_XDECREF(torch);
    PyErr_Clear();
    known = ok;
    return known;
}

/* A number constant for an absent clamp bound: -inf/+inf for a float
 * result, else the range end of the integer result dtype; NULL if none. */
static tvar *ob_open_bound(tracer *tr, tvar *x, tvar *other, int is_max)
{
    static const long long lo[] = {0, 0, -128, -32768, -2147483648LL, INT64_MIN};
    static const long long hi[] = {1, 255, 127, 32767, 2147483647LL, INT64_MAX};
    int xd = ob_dtype(x);
    if (xd == CDY_DT_NONE)
        return NULL;
    if (cdy_dtype_table[xd].is_float || ob_floaty(other))
        return cdy_tv_const(tr, PyFloat_FromDouble(is_max ? INFINITY : -INFINITY));
    if (xd == CDY_DT_BOOL)
        xd = CDY_DT_INT64;
    return cdy_tv_const(tr, PyLong_FromLongLong(is_max ? hi[xd] : lo[xd]));
}

/* 1 if number bound b reaches x's integer kernel as eager converts it,
 * without raising: c10's checked Scalar::to<T> (an int in T's range, or in
 * [-255, 255] for uint8, which wraps as the C cast does), a float bound only
 * for hardtanh (else it promotes the result to float: nothing converted) and
 * then in T's range, no negative hardtanh limit on uint8; 1 for a float x. */
static int ob_bound_fits(const tvar *x, const tvar *b, int hardtanh)
{
    static const double lo[] = {0, -255, -128, -32768, -2147483648.0, -9223372036854775808.0};
    static const double hi[] = {1, 255, 127, 32767, 2147483647.0, 9223372036854775807.0};
    int xd = ob_dtype(x);
    long long i;
    if (xd == CDY_DT_NONE || cdy_dtype_table[xd].is_float || !b)
        return 1;
    if (!ob_is_number(b))
        return 0;
    double low = hardtanh && xd == CDY_DT_UINT8 ? 0 : lo[xd];
    if (!PyFloat_CheckExact(b->obj))        /* an int past int64: eager's conversion raises */
        return ob_const_int(b, &i) == 0 &&
               (xd == CDY_DT_INT64 || ((double)i >= low && (double)i <= hi[xd]));
    if (!hardtanh)
        return 1;
    double f = PyFloat_AsDouble(b->obj);
    if (xd == CDY_DT_UINT8 && f < 0)
        return 0;
    return f >= lo[xd] && f <= hi[xd] && fabs(f) < 9.2e18;   /* NaN: no */
}

/* clamp(x, min, max) with numbers or None: both bounds as numbers in out[1..2]. */
static int ob_check_clamp(tracer *tr, tvar **out, tvar **extra)
{
    for (int i = 0; i < 2; i++)
        if (extra[i] && extra[i]->kind == TV_CONST && extra[i]->obj == Py_None)
            extra[i] = NULL;
    if ((!extra[0] && !extra[1]) || (extra[0] && !ob_is_number(extra[0])) ||
        (extra[1] && !ob_is_number(extra[1])) || ob_dtype(out[0]) == CDY_DT_BOOL ||
        !ob_bound_fits(out[0], extra[0], 0) || !ob_bound_fits(out[0], extra[1], 0))
        return -1;
    for (int i = 0; i < 2; i++)
        if (extra[i] && !extra[1 - i] && ob_is_nan_number(extra[i]) && ob_lone_nan_ignored()) {
            out[1 + i] = ob_open_bound(tr, out[0], extra[i], i);   /* as if absent */
            out[2 - i] = ob_open_bound(tr, out[0], extra[i], 1 - i);
            return out[1] && out[2] ? 3 : -1;
        }
    out[1] = extra[0] ? extra[0] : ob_open_bound(tr, out[0], extra[1], 0);
    out[2] = extra[1] ? extra[1] : ob_open_bound(tr, out[0], extra[0], 1);
    return out[1] && out[2] ? 3 : -1;
}

static int ob_gelu_f16_inf = -1;   /* ob_probe_gelu_f16_inf's answer, -1 unknown
                                    * (handed to the ops table: cdy_set_gelu_f16_inf) */

/* Ask eager once whether gelu of a contiguous float16 +inf is inf (with the GIL
 * held; element 0 of 65: NaN where oneDNN has a float16 GELU, AVX512-FP16 CPUs);
 * 1 if the probe fails (ATen's own kernel's answer). */
static void ob_probe_gelu_f16_inf(void)
{
    if (ob_gelu_f16_inf >= 0)
        return;
    PyObject *torch = PyImport_ImportModule("torch");
    PyObject *f16 = torch ? PyObject_GetAttrString(torch, "float16") : NULL;
    PyObject *kw = f16 ? Py_BuildValue("{s:O}", "dtype", f16) : NULL;
    PyObject *full = torch ? PyObject_GetAttrString(torch, "full") : NULL;
    PyObject *args = Py_BuildValue("((i)d)", 65, (double)INFINITY);   /* vector body */
    PyObject *x = full && args && kw ? PyObject_Call(full, args, kw) : NULL;
    PyObject *nn = x ? PyImport_ImportModule("torch.nn.functional") : NULL;
    PyObject *r = nn ? PyObject_CallMethod(nn, "gelu", "O", x) : NULL;
    PyObject *zero = r ? PyLong_FromLong(0) : NULL;
    PyObject *r0 = zero ? PyObject_GetItem(r, zero) : NULL;   /* a tensor: no sq_item */
    Py_XDECREF(zero);
    PyObject *item = r0 ? PyObject_CallMethod(r0, "item", NULL) : NULL;
    Py_XDECREF(r0);
    ob_gelu_f16_inf = !(item && PyFloat_Check(item) && isnan(PyFloat_AS_DOUBLE(item)));
    cdy_set_gelu_f16_inf(ob_gelu_f16_inf);
    Py_XDECREF(item);
    Py_XDECREF(r);
    Py_XDECREF(nn);
    Py_XDECREF(x);
    Py_XDECREF(args);
    Py_XDECREF(full);
    Py_XDECREF(kw);
    Py_XDECREF(f16);
    Py_XDECREF(torch);
    PyErr_Clear();
}

/* gelu(x, approximate='none'|'tanh'): the mode as a number in out[1]. */
static int ob_check_gelu(tracer *tr, tvar **out, tvar **extra)
{
    int mode = 0;
    if (extra[0]) {
        const char *s = extra[0]->kind == TV_CONST && PyUnicode_Check(extra[0]->obj)
                            ? PyUnicode_AsUTF8(extra[0]->obj) : NULL;
        if (!s || (strcmp(s, "none") && strcmp(s, "tanh")))
            return -1;
        mode = strcmp(s, "tanh") == 0;
    }
    ob_probe_gelu_f16_inf();
    out[1] = cdy_tv_const(tr, PyLong_FromLong(mode));
    return out[1] ? 2 : -1;
}

/* The dtype a conversion op targets: its `to` column, else (CAST) its dtype
 * argument; NONE if unknown. */
static int ob_cast_target(int op, tvar **extra)
{
    if (cdy_op_table[op].to != CDY_DT_NONE)
        return cdy_op_table[op].to;
    return extra[0] && extra[0]->kind == TV_CONST ? cdy_dtype_from_obj(extra[0]->obj)
                                                  : CDY_DT_NONE;
}

/* 1 if every tensor among out[0..n) has an integer or bool dtype and every
 * number is an int or bool. */
static int ob_all_integral(tvar **out, int n)
{
    for (int i = 0; i < n; i++)
        if (ob_floaty(out[i]) || (out[i]->kind == TV_TENSOR && ob_dtype(out[i]) == CDY_DT_NONE))
            return 0;
    return 1;
}

/* Add dim item d (an int constant) of a tensor of ndim dims to *mask;
 * 0, or -1 if d is not an int in range or repeats. */
static int ob_dim_bit(const tvar *d, int ndim, long long *mask)
{
    long long i;
    if (!d || d->kind != TV_CONST || !PyLong_CheckExact(d->obj) || ob_const_int(d, &i))
        return -1;
    int n = ndim > 0 ? ndim : 1;        /* a 0-dim tensor takes dim 0 or -1 */
    if (i < -n || i >= n)
        return -1;
    if (i < 0)
        i += n;
    if (ndim == 0)
        return 0;
    if (*mask & (1LL << i))
        return -1;
    *mask |= 1LL << i;
    return 0;
}

/* 1 if op has no identity (NO_IDENTITY: argmax, argmin, vector_norm) and
 * reduces no element for some output of x (eager raises, or returns what the
 * kernel cannot). */
static int ob_reduce_empty(int op, const cdy_meta *m, long long mask)
{
    if (!cdy_op_has(op, CDY_OPF_NO_IDENTITY))
        return 0;
    for (int d = 0; d < m->ndim; d++)
        if (m->sizes[d] == 0 && (mask >> d & 1))
            return 1;
    return 0;
}

/* Reductions (input, dim, keepdim) -> (input, dims mask, keepdim): dim an
 * int, a non-empty tuple/list of ints, or None/absent (every dim); keepdim a
 * bool.  Inputs the op's flags reject (FLOAT_ONLY: int/bool mean raises in
 * eager, NO_BOOL) and anything else stay extern, and so do the dims eager
 * rejects where the mask could not tell: ONE_DIM ops (argmax / argmin / prod)
 * take one int dim (a tuple raises), NO_NONE_DIM (prod) no explicit None. */
static int ob_check_reduce(tracer *tr, int op, tvar **out, tvar **extra)
{
    tvar *x = out[0], *dim = extra[0], *kd = extra[1];
    if (!x || x->kind != TV_TENSOR || x->value < 0 || x->value >= tr->t->graph.nvalues)
        return -1;
    if (cdy_op_has(op, CDY_OPF_ONE_DIM) && dim &&
        (dim->kind == TV_TUPLE || dim->kind == TV_LIST ||
         (dim->kind == TV_CONST &&
          (PyTuple_Check(dim->obj) || PyList_Check(dim->obj) ||
           (cdy_op_has(op, CDY_OPF_NO_NONE_DIM) && dim->obj == Py_None)))))
        return -1;
    const cdy_meta *m = &tr->t->graph.values[x->value].meta;
    int xd = ob_dtype(x);
    if (xd == CDY_DT_NONE || xd != m->dtype || m->ndim > CDY_MAX_NDIM)
        return -1;
    long long mask = 0;
    if (!dim || (dim->kind == TV_CONST && dim->obj == Py_None)) {
        mask = m->ndim > 0 ? (1LL << m->ndim) - 1 : 0;
    } else if (dim->kind == TV_CONST && (PyTuple_Check(dim->obj) || PyList_Check(dim->obj))) {
        Py_ssize_t n = PySequence_Size(dim->obj);
        if (n <= 0)                       /* dim=(): all dims or none, per op: extern */
            return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *it = PySequence_GetItem(dim->obj, i);
            tvar tmp = {.kind = TV_CONST, .obj = it};
            int bad = !it || ob_dim_bit(&tmp, m->ndim, &mask);
            Py_XDECREF(it);
            if (bad)
                return -1;
        }
    } else if (dim->kind == TV_TUPLE || dim->kind == TV_LIST) {
        if (dim->n <= 0)
            return -1;
        for (int i = 0; i < dim->n; i++)
            if (ob_dim_bit(dim->items[i], m->ndim, &mask))
                return -1;
    } else if (ob_dim_bit(dim, m->ndim, &mask)) {
        return -1;
    }
    if ((kd && !(kd->kind == TV_CONST && PyBool_Check(kd->obj))) || ob_reduce_empty(op, m, mask))
        return -1;
    out[1] = cdy_tv_const(tr, PyLong_FromLongLong(mask));
    out[2] = cdy_tv_const(tr, Py_NewRef(kd && kd->obj == Py_True ? Py_True : Py_False));
    return out[1] && out[2] ? 3 : -1;
}

/* var/std (input, dim, unbiased, keepdim, correction), or the old
 * var(input, unbiased): the reduction's args and the correction as a float
 * in out[3] (unbiased: 1 or 0, default 1); 4, or -1. */
static int ob_check_var(tracer *tr, int op, tvar **out, tvar **extra)
{
    tvar *dim = extra[0], *unb = extra[1], *corr = extra[3];
    if (dim && dim->kind == TV_CONST && PyBool_Check(dim->obj)) {
        if (unb)
            return -1;
        unb = dim;
        dim = NULL;
    }
    if (corr && corr->kind == TV_CONST && corr->obj == Py_None)
        corr = NULL;
    if (unb && unb->kind == TV_CONST && unb->obj == Py_None)
        unb = NULL;
    double c = 1;
    if (unb && corr)
        return -1;
    if (unb) {
        if (unb->kind != TV_CONST || !PyBool_Check(unb->obj))
            return -1;
        c = unb->obj == Py_True;
    } else if (corr) {
        if (!ob_is_number(corr) || PyBool_Check(corr->obj))
            return -1;
        c = PyFloat_AsDouble(corr->obj);
        if (c == -1 && PyErr_Occurred())
            return -1;
    }
    tvar *red[2] = {dim, extra[2]};
    if (ob_check_reduce(tr, op, out, red) != 3)
        return -1;
    out[3] = cdy_tv_const(tr, PyFloat_FromDouble(c));
    return out[3] ? 4 : -1;
}

/* vector_norm (input, ord, dim, keepdim): the reduction's args and the
 * order as a float in out[3] (default 2); 4, or -1. */
static int ob_check_norm(tracer *tr, int op, tvar **out, tvar **extra)
{
    tvar *ord = extra[0];
    double p = 2;
    if (ord && !(ord->kind == TV_CONST && ord->obj == Py_None)) {
        if (!ob_is_number(ord) || PyBool_Check(ord->obj))
            return -1;
        p = PyFloat_AsDouble(ord->obj);
        if (p == -1 && PyErr_Occurred())
            return -1;
    }
    if (isnan(p) || ob_check_reduce(tr, op, out, extra + 1) != 3)
        return -1;
    out[3] = cdy_tv_const(tr, PyFloat_FromDouble(p));
    return out[3] ? 4 : -1;
}

/* The checks of the flags that concern x = out[0] and the operands: 0, or -1
 * when op's flags reject them. */
static int ob_check_flags(int op, tvar **out, int n)
{
    int xd = ob_dtype(out[0]);
    if (cdy_op_has(op, CDY_OPF_FLOAT_ONLY) && (xd == CDY_DT_NONE || !cdy_dtype_table[xd].is_float))
        return -1;
    if (cdy_op_has(op, CDY_OPF_NO_BOOL) && xd == CDY_DT_BOOL)
        return -1;
    return cdy_op_has(op, CDY_OPF_INTEGRAL) && !ob_all_integral(out, n) ? -1 : 0;
}

/* Per-op checks after binding (the op's flags, then its check column): the
 * final count of out, or -1. */
static int ob_check(tracer *tr, int op, tvar **out, int n, tvar **extra)
{
    int xd = ob_dtype(out[0]), ht = cdy_op_table[op].nargs == 3;
    long long d;
    if (ob_check_flags(op, out, n))
        return -1;
    switch (ob_rows[op].check) {
    case OB_CHECK_DIVISION:
        return ob_check_division(out[0], out[1]) ? -1 : n;
    case OB_CHECK_POW:
        return ob_check_pow(out[0], out[1]) ? -1 : n;
    case OB_CHECK_ROUND:
        return extra[0] && (ob_const_int(extra[0], &d) || d != 0) ? -1 : n;
    case OB_CHECK_GELU:
        return ob_check_gelu(tr, out, extra);
    case OB_CHECK_CLAMP:
        return ob_check_clamp(tr, out, extra);
    case OB_CHECK_BOUNDS:      /* clamp_min, clamp_max; hardtanh (ht) has two */
        return !ob_bound_fits(out[0], out[1], ht) || (ht && !ob_bound_fits(out[0], out[2], 1))
                   ? -1 : n;
    case OB_CHECK_MASKED_FILL:
        return ob_check_masked_fill(out) ? -1 : n;
    case OB_CHECK_CAST: {
        int to = ob_cast_target(op, extra);   /* same dtype: eager returns x itself */
        return to == CDY_DT_NONE || xd == CDY_DT_NONE || to == xd ? -1 : n;
    }
    case OB_CHECK_REDUCE:
        return ob_check_reduce(tr, op, out, extra);
    case OB_CHECK_VAR:
        return ob_check_var(tr, op, out, extra);
    case OB_CHECK_NORM:
        return ob_check_norm(tr, op, out, extra);
    default:
        return n;
    }
}

/* The op torch.div computes for rounding_mode r (None, 'floor', 'trunc'):
 * op itself, DIV_FLOOR_MODE or DIV_TRUNC; -1 for another mode. */
static int ob_div_mode(int op, tvar *r)
{
    if (!r || (r->kind == TV_CONST && r->obj == Py_None))
        return op;
    const char *s = r->kind == TV_CONST && PyUnicode_Check(r->obj) ? PyUnicode_AsUTF8(r->obj) : "";
    return !strcmp(s, "floor") ? CDY_OP_DIV_FLOOR_MODE : !strcmp(s, "trunc") ? CDY_OP_DIV_TRUNC : -1;
}

/* Canonical args of *op for a call with args (positional, then the values of
 * kwnames) into out[]; returns their count, or -1 when not lowerable.  *op may
 * change (DIV_MODE): torch.div(..., rounding_mode='floor') is div_floor. */
int cdy_op_bind(tracer *tr, int *opp, tvar **args, int nargs, PyObject *kwnames, tvar **out)
{
    tvar *extra[OB_MAX_PARAMS] = {0};
    int op = *opp;
    if (op < 0 || op >= CDY_OP_COUNT || cdy_op_table[op].kind == 'E' || nargs < 1)
        return -1;
    int n = ob_apply(tr, op, args, nargs, kwnames, out, extra);
    if (n < 1)
        return -1;
    if (ob_rows[op].check == OB_CHECK_DIV_MODE) {
        if ((op = ob_div_mode(op, extra[0])) < 0)
            return -1;
        extra[0] = NULL;
        *opp = op;
    }
    n = ob_check(tr, op, out, n, extra);
    if (n != cdy_op_table[op].nargs) {
        if (PyErr_Occurred())
            PyErr_Clear();
        return -1;
    }
    return n;
}
