/* stream.c - streamed (non-temporal) stores for kernels that move more data
 * than the last-level cache holds.
 *
 * A plain store to a line that is not in cache first reads the line (the
 * read for ownership), so a kernel writing 16 MB moves 32 MB for its output
 * and evicts 16 MB of cached data.  A non-temporal store writes whole lines
 * past the caches.  When a kernel moves more than the cache holds, its
 * output cannot stay cached for the next reader anyway (glibc's memcpy too
 * switches to non-temporal stores above a fraction of the cache), so
 * such a kernel computes each block of its output into a small buffer on
 * its stack (in L1) and copies that to memory with cdy_stream (the
 * prologue's helper: whole 64-byte lines by non-temporal stores, the ragged
 * ends plainly).  Each thread ends with cdy_sfence() (store fence) before
 * the kernel's threads join, so the results are visible to whoever reads
 * them next.  x86-64 only: elsewhere kernels always store plainly.
 */
#include <stdio.h>
#include <string.h>

#include "compiler/cg.h"

/* Bytes of the largest cache level of CPU 0 from sysfs, or 0 if unknown. */
static int64_t cg_llc_bytes_read(void)
{
    int64_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], text[32];
        long level = 0;
        long long size = 0;
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        int ok = fscanf(f, "%ld", &level) == 1;
        fclose(f);
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = ok ? fopen(path, "r") : NULL;
        if (!f)
            continue;
        text[0] = 0;
        ok = fscanf(f, "%lld%31s", &size, text) >= 1;
        fclose(f);
        char unit = text[0];
        size *= unit == 'K' ? 1024LL : unit == 'M' ? 1024LL * 1024 : unit == 'G' ? 1LL << 30 : 1;
        if (ok && level >= best_level && size > 0) {
            best_level = (int)level;
            best = size;
        }
    }
    return best;
}

int64_t cdy_stream_auto_bytes(void)
{
#if defined(__x86_64__)
    static int64_t cached = -1;
    if (cached < 0)
        cached = cg_llc_bytes_read() / 4 * 3;
    return cached;
#else
    return 0;
#endif
}

int cg_streams(const cg_ctx *c, int64_t bytes)
{
#if defined(__x86_64__)
    return c->stream_bytes > 0 && bytes > c->stream_bytes;
#else
    (void)c;
    (void)bytes;
    return 0;
#endif
}

void cg_stream_open(cg_ctx *c, int ind, const char *nt, const char *clauses, int stream)
{
    cdy_buf *b = &c->src;
    cg_indent(b, ind);
    if (!stream) {
        cdy_buf_printf(b, "#pragma omp parallel for num_threads(%s) schedule(static)%s\n", nt,
                       clauses);
        return;
    }
    cdy_buf_printf(b, "#pragma omp parallel num_threads(%s)\n", nt);
    cg_indent(b, ind);
    cdy_buf_puts(b, "{\n");
    cg_indent(b, ind);
    cdy_buf_printf(b, "#pragma omp for schedule(static) nowait%s\n", clauses);
}

void cg_stream_close(cg_ctx *c, int ind, int par)
{
    cdy_buf *b = &c->src;
    cg_indent(b, ind);
    cdy_buf_puts(b, "cdy_sfence();\n");
    if (par) {
        cg_indent(b, ind);
        cdy_buf_puts(b, "}\n");
    }
}

void cg_stream_ir(cg_ctx *c, cdy_buf *b, int64_t bytes)
{
    if (cg_streams(c, bytes))
        cdy_buf_printf(b, "  stores: streamed (non-temporal, through an L1 block): %lld bytes "
                          "moved, above the threshold of %lld\n",
                       (long long)bytes, (long long)c->stream_bytes);
}
