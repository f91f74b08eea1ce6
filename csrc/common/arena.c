/* arena.c - bump allocation for one compilation, released by one call. */
#include <stdlib.h>
#include <string.h>

#include "cdynamo.h"

struct cdy_arena_block {
    cdy_arena_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

/* Zeroed, 16-byte aligned memory from a; NULL when out of memory. */
void *cdy_arena_alloc(cdy_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    cdy_arena_block *b = a->head;
    if (!b || b->used + n > b->cap) {
        size_t cap = n > 65536 ? n : 65536;
        b = malloc(sizeof(*b) + cap);
        if (!b)
            return NULL;
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

/* Copy of s in a. */
char *cdy_arena_strdup(cdy_arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = cdy_arena_alloc(a, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* Release every block of a. */
void cdy_arena_free(cdy_arena *a)
{
    cdy_arena_block *b = a->head;
    while (b) {
        cdy_arena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}
