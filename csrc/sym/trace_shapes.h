/* sym/trace_shapes.h - symbolic shapes of a trace (sym/trace_shapes.c). */
#ifndef CDY_SYM_TRACE_SHAPES_H
#define CDY_SYM_TRACE_SHAPES_H

#include "sym/sym.h"
#include "trace/record.h"

/* The symbolic shapes of t's graph with input i's dims dyn[i] symbolic,
 * t's pins and its mutated inputs specializing (cdy_sym_infer's contract). */
int cdy_sym_trace_shapes(const cdy_trace *t, const unsigned *dyn, cdy_sym_shapes *out);
/* dyn for dynamic=True: every dim of a frame argument's tensor (or of an item
 * of one), none of a module's parameters and buffers. */
void cdy_sym_dyn_all(const cdy_trace *t, unsigned *dyn);
/* Log (topic "dynamic") what stays symbolic in t's graph under dynamic=True:
 * the symbols, why each one that specialized did, relations, output sizes. */
void cdy_sym_trace_log(const cdy_trace *t, const char *name);

#endif /* CDY_SYM_TRACE_SHAPES_H */
