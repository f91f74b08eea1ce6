/* ops/ops.h - the graph ops of ops/ops.def: their enum, their flags and the
 * columns every layer reads (cdy_op_table, expanded in common/tables.c).
 * Python-free: the compiler and tests/c/ use it.  A layer that needs a column
 * of its own (binding: signatures; the compiler: C templates, reduction
 * variants) expands ops.def itself. */
#ifndef CDY_OPS_H
#define CDY_OPS_H

/* Flags of an op (the flags column of ops.def). */
enum {
    CDY_OPF_FLOAT_ONLY = 1 << 0,        /* lowered for a float input only (binding: a pointwise
                                         * op's x, a reduction's input) */
    CDY_OPF_NO_BOOL = 1 << 1,           /* not lowered for a bool input x */
    CDY_OPF_INTEGRAL = 1 << 2,          /* lowered when every operand is integral or bool */
    CDY_OPF_BOOL_TENSOR_RAISES = 1 << 3, /* eager's CPU kernel raises for a bool tensor operand
                                          * (its meta function does not) */
    CDY_OPF_BOOL_RAISES = 1 << 4,       /* the same for any bool operand, a Python bool too */
    CDY_OPF_SCALAR_RANGE = 1 << 5,      /* eager raises for a number operand out of the integer
                                         * result dtype's range */
    CDY_OPF_ARG_DTYPE = 1 << 6,         /* computes in arg 0's dtype (tests such as isnan,
                                         * casts), converted to the result's on assignment */
    CDY_OPF_MASK0 = 1 << 7,             /* arg 0 is read as bool */
    CDY_OPF_MASK1 = 1 << 8,             /* arg 1 is read as bool */
    CDY_OPF_KEEP_STRIDES = 1 << 9,      /* the result keeps the strides torch's meta gives it
                                         * (x.to(dtype) keeps x's); others are made canonical */
    CDY_OPF_TRANSCENDENTAL = 1 << 10,   /* a library call or polynomial per float element, not
                                         * a few arithmetic ops */
    CDY_OPF_NUMBER_PARAM1 = 1 << 11,    /* a number arg 1 is a parameter (pow's exponent, a clamp_min bound), not
                                         * an operand of eager's iterator */
    CDY_OPF_ONE_DIM = 1 << 12,          /* reduction: dim is one int (a tuple raises) */
    CDY_OPF_NO_NONE_DIM = 1 << 13,      /* reduction: an explicit dim=None raises */
    CDY_OPF_NO_IDENTITY = 1 << 14,      /* reduction: reducing no element raises */
    CDY_OPF_ALIAS = 1 << 15,            /* the result aliases its base (a torch view) */
    /* symbolic sizes (sym/infer.c): */
    CDY_OPF_SYM_ROWS = 1 << 16,         /* row op: the result has arg 0's sizes, any symbolic */
    CDY_OPF_SYM_NORMED = 1 << 17,       /* row op: arg 4 counts the trailing dims normalized
                                         * (numbers of the code: they specialize, with tensor
                                         * args 1 and 2's sizes) */
    CDY_OPF_PIECES = 1 << 18,           /* kind K: args (pieces.., dim), the pieces joined
                                         * along dim (their other sizes equal) */
    CDY_OPF_NEW_DIM = 1 << 19,          /* PIECES: along a new dim of the pieces' count */
    CDY_OPF_LOWP_NUMBER = 1 << 20,      /* a Python number operand rounds to a bfloat16 /
                                         * float16 tensor's dtype before the math, as eager's
                                         * kernel does (others reach float32 math unrounded) */
    CDY_OPF_RECOMPUTE = 1 << 21,        /* cheap: a training graph's backward recomputes it
                                         * (torch.<name> of its arguments; gelu's approximate
                                         * by name) rather than save it (trace/autograd.c) */
    CDY_OPF_SYM_GRAD2 = 1 << 22,        /* SYM_NORMED row op whose arg 2 is a gradient of arg
                                         * 0's sizes, not a bias of the normalized sizes */
    CDY_OPF_OPMATH_SCALAR1 = 1 << 23,   /* a bfloat16 / float16 kernel reads a 0-dim tensor
                                         * arg 1 at float32 precision, unrounded, as eager's
                                         * mul / div kernels do (original_scalar_value) */
};

typedef enum {
#define CDY_PW(E, name, n, kind, flags, rule, to, sig, check, tf, ti, tb, tn, grad) CDY_OP_##E,
#define CDY_RED(E, name, n, flags, rule, sig, check, vf, vi, pair, grad) CDY_OP_##E,
#define CDY_NODE(E, name, n, kind, flags, grad) CDY_OP_##E,
#include "ops/ops.def"
    CDY_OP_COUNT,
    CDY_OP_NONE = -1
} cdy_op;

typedef struct {
    const char *name;      /* ATen-style name (torch.<name> for pointwise ops and reductions) */
    int nargs;             /* canonical args; -1: any number */
    char kind;             /* U B C T pointwise, R reduction, N V K W I G E (see ops.def) */
    char rule;             /* the result dtype rule (ops.def); 0: torch's meta decides */
    int to;                /* a cast's target dtype (cdy_dtype), or CDY_DT_NONE */
    unsigned flags;        /* CDY_OPF_* */
    int pair;              /* reduction whose result this one's first pass computes, or NONE */
    const char *grad;      /* the derivative formula (room for training), or NULL */
} cdy_op_info;

extern const cdy_op_info cdy_op_table[CDY_OP_COUNT];

/* 1 if op has every flag of f. */
static inline int cdy_op_has(int op, unsigned f)
{
    return (cdy_op_table[op].flags & f) == f;
}

/* 1 for pointwise ops (kinds U B C T): element i reads element i of each arg. */
static inline int cdy_op_pointwise(int op)
{
    char k = cdy_op_table[op].kind;
    return k == 'U' || k == 'B' || k == 'C' || k == 'T';
}

/* The reduction whose pair (first pass) is op (ARGMAX for AMAX), or NONE. */
int cdy_op_paired(int op);
/* 1 if eager's float16 exact GELU gives inf at +inf (torch 2.13 here; the
 * lead's device machine, torch 2.11, gives NaN as the float32 kernel): probed
 * once by the first gelu traced (trace/opbind.c), 1 until then. */
int cdy_gelu_f16_inf(void);
/* Record the probe's answer (common/tables.c keeps it: the compiler reads it
 * without the tracer). */
void cdy_set_gelu_f16_inf(int on);

/* The result dtype of reduction op over an input of dtype idt by its rule
 * (torch's), or CDY_DT_NONE when the op does not take that input. */
int cdy_op_reduce_dtype(int op, int idt);

#endif /* CDY_OPS_H */
