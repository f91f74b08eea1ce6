/* trace.h - the tracer's own tables (optable.c), shared with trace.c. */
#ifndef CDY_TRACE_H
#define CDY_TRACE_H

#include "internal.h"

int cdy_optable_init(PyObject *torch);
int cdy_optable_fn(PyObject *callable);     /* op or CDY_OP_NONE */
int cdy_optable_method(PyObject *name);     /* op or CDY_OP_NONE */
int cdy_dtype_from_obj(PyObject *dtype);    /* cdy_dtype or CDY_DT_NONE */
PyObject *cdy_dtype_obj(int dtype);         /* borrowed */

#endif
