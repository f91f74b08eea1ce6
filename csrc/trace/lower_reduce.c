/* lower_reduce.c - composite lowerings: reduce (registered in cdy_lowerings_reduce). */
#include "trace/trace.h"

/* X(name, where, lowering): see cdy_lowering in trace.h. */
#define CDY_LOWER_REDUCE(X)

const cdy_lowering cdy_lowerings_reduce[] = {
#define CDY_X(name, where, fn) {name, where, fn},
    CDY_LOWER_REDUCE(CDY_X)
#undef CDY_X
    {NULL, NULL, NULL},
};
