/* optable.c - which Python callables and Tensor methods are which graph op.
 *
 * Every pointwise and reduction op of CDY_OPS is reachable as torch.<name>,
 * torch.Tensor.<name> and the method <name>; the aliases below add the other
 * spellings users write.  Built once, at the first trace, by looking the names up in torch.        */
#include "internal.h"
#include "trace/trace.h"

#include <string.h>

/* X(op, "module path", "attribute"): function aliases */
#define CDY_FN_ALIASES(X)                                   \
    X(RELU, "torch.nn.functional", "relu")                  \
    X(SIGMOID, "torch.nn.functional", "sigmoid")            \
    X(TANH, "torch.nn.functional", "tanh")                  \
    X(SIGMOID, "torch.special", "expit")                    \
    X(EXP, "torch.special", "exp")                          \
    X(DIV, "torch", "true_divide")                          \
    X(DIV, "torch", "divide")                               \
    X(MUL, "torch", "multiply")                             \
    X(SUB, "torch", "subtract")                             \
    X(NEG, "torch", "negative")                             \
    X(ABS, "torch", "absolute")                             \
    X(GT, "torch", "greater")                               \
    X(GE, "torch", "greater_equal")                         \
    X(LT, "torch", "less")                                  \
    X(LE, "torch", "less_equal")                            \
    X(NE, "torch", "not_equal")                             \
    X(ABS, "builtins", "abs")                               \
    X(ADD, "operator", "add")                               \
    X(SUB, "operator", "sub")                               \
    X(MUL, "operator", "mul")                               \
    X(DIV, "operator", "truediv")                           \
    X(NEG, "operator", "neg")                               \
    X(EQ, "operator", "eq")                                 \
    X(NE, "operator", "ne")                                 \
    X(LT, "operator", "lt")                                 \
    X(LE, "operator", "le")                                 \
    X(GT, "operator", "gt")                                 \
    X(GE, "operator", "ge")                                 \
    X(DIV_FLOOR, "operator", "floordiv")                    \
    X(REMAINDER, "operator", "mod")                         \
    X(POW, "operator", "pow")                               \
    X(BITWISE_AND, "operator", "and_")                      \
    X(BITWISE_OR, "operator", "or_")                        \
    X(BITWISE_XOR, "operator", "xor")                       \
    X(BITWISE_NOT, "operator", "invert")                    \
    X(SIGN, "torch", "sgn")                                 \
    X(TRUNC, "torch", "fix")                                \
    X(CLAMP, "torch", "clip")                               \
    X(EXPM1, "torch.special", "expm1")                      \
    X(LOG1P, "torch.special", "log1p")                      \
    X(ERF, "torch.special", "erf")                          \
    X(ROUND, "torch.special", "round")                      \
    X(LEAKY_RELU, "torch.nn.functional", "leaky_relu")      \
    X(HARDTANH, "torch.nn.functional", "hardtanh")          \
    X(RELU6, "torch.nn.functional", "relu6")                \
    X(GELU, "torch.nn.functional", "gelu")                  \
    X(SILU, "torch.nn.functional", "silu")                  \
    X(HARDSWISH, "torch.nn.functional", "hardswish")        \
    X(HARDSIGMOID, "torch.nn.functional", "hardsigmoid")    \
    X(SOFTPLUS, "torch.nn.functional", "softplus")          \
    X(MISH, "torch.nn.functional", "mish")                  \
    X(LEAKY_RELU, "torch._C._nn", "leaky_relu")             \
    X(HARDTANH, "torch._C._nn", "hardtanh")                 \
    X(GELU, "torch._C._nn", "gelu")                         \
    X(SILU, "torch._C._nn", "silu")                         \
    X(HARDSWISH, "torch._C._nn", "hardswish")               \
    X(HARDSIGMOID, "torch._C._nn", "hardsigmoid")           \
    X(SOFTPLUS, "torch._C._nn", "softplus")                 \
    X(MISH, "torch._C._nn", "mish")

/* X(op, "method"): method aliases */
#define CDY_METHOD_ALIASES(X)                               \
    X(DIV, "true_divide")                                   \
    X(DIV, "divide")                                        \
    X(MUL, "multiply")                                      \
    X(SUB, "subtract")                                      \
    X(NEG, "negative")                                      \
    X(ABS, "absolute")                                      \
    X(GT, "greater")                                        \
    X(GE, "greater_equal")                                  \
    X(LT, "less")                                           \
    X(LE, "less_equal")                                     \
    X(NE, "not_equal")                                      \
    X(ABS, "__abs__")                                       \
    X(NEG, "__neg__")                                       \
    X(DIV_FLOOR, "__floordiv__")                            \
    X(REMAINDER, "__mod__")                                 \
    X(POW, "__pow__")                                       \
    X(BITWISE_AND, "__and__")                               \
    X(BITWISE_OR, "__or__")                                 \
    X(BITWISE_XOR, "__xor__")                               \
    X(BITWISE_NOT, "__invert__")                            \
    X(SIGN, "sgn")                                          \
    X(TRUNC, "fix")                                         \
    X(CLAMP, "clip")

/* Kinds of the ops that torch.<name> / Tensor.<name> map to and cdy_op_bind
 * binds: pointwise (U B C T) and reductions (R). */
#define OPTABLE_KINDS "UBCTR"

static PyObject *fn_ops;       /* {callable: op int} */
static PyObject *method_ops;   /* {name: op int} */
static PyObject *dtype_objs[CDY_DT_COUNT];

/* Map key -> op in dict d; 0 or -1. */
static int put(PyObject *d, PyObject *key, int op)
{
    PyObject *v = PyLong_FromLong(op);
    int r = v ? PyDict_SetItem(d, key, v) : -1;
    Py_XDECREF(v);
    return r;
}

/* Add module_path.attr -> op, quietly skipping names this torch lacks and
 * attributes that are not callables (torch.float, torch.bool are dtypes). */
static int put_fn(const char *module_path, const char *attr, int op)
{
    PyObject *m = PyImport_ImportModule(module_path);
    PyObject *f = m ? PyObject_GetAttrString(m, attr) : NULL;
    int r = 0;
    if (f && PyCallable_Check(f))
        r = put(fn_ops, f, op);
    else
        PyErr_Clear();
    Py_XDECREF(m);
    Py_XDECREF(f);
    return r;
}

/* Add method name -> op, and torch.Tensor.<name> -> op. */
static int put_method(PyObject *tensor_type, const char *name, int op)
{
    PyObject *s = PyUnicode_FromString(name);
    int r = s ? put(method_ops, s, op) : -1;
    PyObject *f = r == 0 ? PyObject_GetAttr(tensor_type, s) : NULL;
    if (f)
        r = put(fn_ops, f, op);
    else
        PyErr_Clear();
    Py_XDECREF(f);
    Py_XDECREF(s);
    return r;
}

/* Build the tables; 0 or -1 with an error set. */
int cdy_optable_init(PyObject *torch)
{
    if (fn_ops)
        return 0;
    fn_ops = PyDict_New();
    method_ops = PyDict_New();
    if (!fn_ops || !method_ops)
        return -1;
    PyObject *tensor = PyObject_GetAttrString(torch, "Tensor");
    if (!tensor)
        return -1;
    int r = 0;
    for (int op = 0; op < CDY_OP_COUNT && !r; op++) {
        if (!strchr(OPTABLE_KINDS, cdy_op_table[op].kind))
            continue;   /* built by a lowering (lower_*.c), never bound by name */
        r |= put_fn("torch", cdy_op_table[op].name, op);
        r |= put_method(tensor, cdy_op_table[op].name, op);
    }
#define CDY_X(op, mod, attr) r |= put_fn(mod, attr, CDY_OP_##op);
    CDY_FN_ALIASES(CDY_X)
#undef CDY_X
#define CDY_X(op, name) r |= put_method(tensor, name, CDY_OP_##op);
    CDY_METHOD_ALIASES(CDY_X)
#undef CDY_X
    Py_DECREF(tensor);
    for (int d = 0; d < CDY_DT_COUNT && !r; d++)
        if (!(dtype_objs[d] = PyObject_GetAttrString(torch, cdy_dtype_table[d].name)))
            r = -1;
    return r ? -1 : 0;
}

/* Look key up in d; the op, or CDY_OP_NONE. */
static int lookup(PyObject *d, PyObject *key)
{
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (!v) {
        PyErr_Clear();   /* unhashable callables are simply not ops */
        return CDY_OP_NONE;
    }
    return (int)PyLong_AsLong(v);
}

/* The op a callable computes, or CDY_OP_NONE. */
int cdy_optable_fn(PyObject *callable)
{
    return lookup(fn_ops, callable);
}

/* The op a Tensor method name computes, or CDY_OP_NONE. */
int cdy_optable_method(PyObject *name)
{
    return lookup(method_ops, name);
}

/* The cdy_dtype of a torch.dtype object, or CDY_DT_NONE. */
int cdy_dtype_from_obj(PyObject *dtype)
{
    for (int d = 0; d < CDY_DT_COUNT; d++)
        if (dtype_objs[d] == dtype)
            return d;
    return CDY_DT_NONE;
}

/* The torch.dtype object of cdy_dtype dt (borrowed; the table is built at init). */
PyObject *cdy_dtype_obj(int dt)
{
    return dtype_objs[dt];
}

/* The cdy_dtype of dt, a new reference to a torch.dtype (consumed; NULL
 * allowed), or CDY_DT_NONE.  Leaves no error set. */
int cdy_dtype_take(PyObject *dt)
{
    if (!dt) {
        PyErr_Clear();
        return CDY_DT_NONE;
    }
    int d = cdy_dtype_from_obj(dt);
    Py_DECREF(dt);
    return d;
}

/* torch.result_type(a, b) as a cdy_dtype, or CDY_DT_NONE. */
int cdy_result_dtype(PyObject *a, PyObject *b)
{
    PyObject *fn = PyObject_GetAttrString(cdy_torch, "result_type");
    PyObject *args[2] = {a, b};
    PyObject *dt = fn ? PyObject_Vectorcall(fn, args, 2, NULL) : NULL;
    Py_XDECREF(fn);
    return cdy_dtype_take(dt);
}
