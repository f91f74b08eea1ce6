/* tables.c - the dtype and op tables, expanded from the X-macros in cdynamo.h. */
#include "cdynamo.h"

const cdy_dtype_info cdy_dtype_table[CDY_DT_COUNT] = {
#define CDY_X(e, n, st, ct, sz, f, i) {n, st, ct, sz, f, i},
    CDY_DTYPES(CDY_X)
#undef CDY_X
};

const cdy_op_info cdy_op_table[CDY_OP_COUNT] = {
#define CDY_X(e, n, a, k) {n, a, k},
    CDY_OPS(CDY_X)
#undef CDY_X
};

/* Number of elements of a tensor with meta m (1 for 0-d). */
int64_t cdy_meta_numel(const cdy_meta *m)
{
    int64_t n = 1;
    for (int d = 0; d < m->ndim; d++)
        n *= m->sizes[d];
    return n;
}

/* 1 if m is contiguous (row-major; the strides of size-1 dims do not matter). */
int cdy_meta_contiguous(const cdy_meta *m)
{
    int64_t st = 1;
    for (int d = m->ndim - 1; d >= 0; d--) {
        if (m->sizes[d] != 1 && m->strides[d] != st)
            return 0;
        st *= m->sizes[d];
    }
    return 1;
}
