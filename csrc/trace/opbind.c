/* opbind.c - binding a call's arguments to a lowered op's canonical ones.
 *
 * The tracer calls cdy_op_bind when a torch call maps to an op of CDY_OPS:
 * it returns the op's canonical positional arguments (tensors and numbers,
 * in the order the op's C template expects), or -1 when this particular
 * call cannot be lowered (then it runs as an extern op, still correct).   */
#include "trace/trace.h"

/* Canonical args of `op` for a call with args (positional, then the values of
 * kwnames) into out[]; returns their count, or -1 when not lowerable. */
int cdy_op_bind(tracer *tr, int op, tvar **args, int nargs, PyObject *kwnames, tvar **out)
{
    (void)tr;
    int nkw = kwnames ? (int)PyTuple_GET_SIZE(kwnames) : 0;
    if (op == CDY_OP_NONE || nkw || nargs != cdy_op_table[op].nargs)
        return -1;
    for (int i = 0; i < nargs; i++)
        out[i] = args[i];
    return nargs;
}
