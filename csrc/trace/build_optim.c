/* build_optim.c - torch.optim step functions inside a trace (issue 34).
 *
 * A Python function of torch.optim (sgd(), _single_tensor_adam(), the
 * decorators' wrappers) is traced inline as user code is: called as a torch
 * callable it would run at trace time on the real optimizer (its side effects
 * then happen once, while tracing, and never again). */
#include <string.h>

#include "trace/trace.h"

/* See trace.h. */
int cdy_optim_inlined(PyObject *fn)
{
    if (!PyFunction_Check(fn))
        return 0;
    PyObject *m = ((PyFunctionObject *)fn)->func_module;
    const char *n = m && PyUnicode_Check(m) ? PyUnicode_AsUTF8(m) : NULL;
    if (!n) {
        PyErr_Clear();
        return 0;
    }
    return !strcmp(n, "torch.optim") || !strncmp(n, "torch.optim.", 12);
}
