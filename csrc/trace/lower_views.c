/* lower_views.c - composite lowerings: views (registered in cdy_lowerings_views). */
#include "trace/trace.h"

/* X(name, where, lowering): see cdy_lowering in trace.h. */
#define CDY_LOWER_VIEWS(X)

const cdy_lowering cdy_lowerings_views[] = {
#define CDY_X(name, where, fn) {name, where, fn},
    CDY_LOWER_VIEWS(CDY_X)
#undef CDY_X
    {NULL, NULL, NULL},
};
