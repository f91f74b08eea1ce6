/* lower_rows.c - composite lowerings: rows (registered in cdy_lowerings_rows). */
#include "trace/trace.h"

/* X(name, where, lowering): see cdy_lowering in trace.h. */
#define CDY_LOWER_ROWS(X)

const cdy_lowering cdy_lowerings_rows[] = {
#define CDY_X(name, where, fn) {name, where, fn},
    CDY_LOWER_ROWS(CDY_X)
#undef CDY_X
    {NULL, NULL, NULL},
};
