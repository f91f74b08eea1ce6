/* buf.c - a growable string; an allocation failure sets oom and drops text. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdynamo.h"

/* Make room for n more bytes plus a NUL; 0 on success. */
static int buf_reserve(cdy_buf *b, size_t n)
{
    if (b->oom)
        return -1;
    if (b->len + n + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->oom = 1;
        return -1;
    }
    b->data = d;
    b->cap = cap;
    return 0;
}

/* Append formatted text. */
void cdy_buf_printf(cdy_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || buf_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Append a string. */
void cdy_buf_puts(cdy_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (buf_reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n + 1);
    b->len += n;
}

/* Hand over the text (caller frees); b is empty afterwards. NULL if oom. */
char *cdy_buf_take(cdy_buf *b)
{
    char *d = b->oom ? NULL : b->data;
    if (b->oom)
        free(b->data);
    else if (!d)
        d = calloc(1, 1);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
    return d;
}

/* Free the text. */
void cdy_buf_free(cdy_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}
