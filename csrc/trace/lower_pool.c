/* lower_pool.c - composite lowerings: pool (registered in cdy_lowerings_pool). */
#include "trace/trace.h"

/* X(name, where, lowering): see cdy_lowering in trace.h. */
#define CDY_LOWER_POOL(X)

const cdy_lowering cdy_lowerings_pool[] = {
#define CDY_X(name, where, fn) {name, where, fn},
    CDY_LOWER_POOL(CDY_X)
#undef CDY_X
    {NULL, NULL, NULL},
};
