/* check: the generated float32 GELU on this CPU (AVX-512 or not) against
 * float64 and against torch's F.gelu (ref.bin: float x, float y pairs) */
#include "prologue.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static float bf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t fb(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
__attribute__((noinline)) static void run(const float *x, float *y, long n)
{
    #pragma omp simd
    for (long i = 0; i < n; i++) y[i] = cdy_vgelu_exactf(x[i]);
}
int main(int argc, char **argv)
{
#ifdef __AVX512F__
    printf("AVX-512 form\n");
#else
    printf("AVX2 form\n");
#endif
    enum { N = 1 << 16 };
    static float xs[N], ys[N];
    double emax = 0, xe = 0;
    for (int s = 0; s < 2; s++)
        for (uint32_t u0 = 0x3b800000u; u0 < 0x41800000u; u0 += N) {
            for (int i = 0; i < N; i++) xs[i] = bf((u0 + i) | (s ? 0x80000000u : 0));
            run(xs, ys, N);
            for (int i = 0; i < N; i++) {
                double x = xs[i], ex = x * 0.5 * erfc(-x * 0.70710678118654752440);
                double e = ys[i] - ex; e = e < 0 ? -e : e;
                if (e > emax) emax = e, xe = x;
            }
        }
    printf("max error against float64 on 2^-8 <= |x| < 16: %.3g at %.9g\n", emax, xe);
    FILE *f = argc > 1 ? fopen(argv[1], "rb") : NULL;
    if (!f) { printf("usage: check REF.BIN (from mkref.py)\n"); return 1; }
    fseek(f, 0, SEEK_END); long n = ftell(f) / 8; fseek(f, 0, SEEK_SET);
    float *xy = malloc(n * 8), *x = malloc(n * 4), *y = malloc(n * 4);
    if (fread(xy, 8, n, f) != (size_t)n) return 1;
    for (long i = 0; i < n; i++) x[i] = xy[2 * i];
    run(x, y, n);
    long nan_mis = 0, zero_sign = 0, inf_mis = 0; double dmax = 0, xd = 0;
    for (long i = 0; i < n; i++) {
        float e = xy[2 * i + 1], g = y[i];
        if ((e != e) != (g != g)) { if (nan_mis++ < 5) printf("NaN mismatch x=%g eager %g ours %g\n", x[i], e, g); continue; }
        if (e != e) continue;
        if (__builtin_isinf(e) || __builtin_isinf(g)) { if (e != g && inf_mis++ < 5) printf("inf mismatch x=%g eager %g ours %g\n", x[i], e, g); continue; }
        /* -2^-149: -0 in the AVX2 form, +0 in torch's (mathlib.c says so) */
        if (e == 0 && g == 0 && (fb(e) >> 31) != (fb(g) >> 31) && fb(x[i]) != 0x80000001u)
            if (zero_sign++ < 5) printf("zero sign x=%a eager %g ours %g\n", x[i], e, g);
        double d = (double)g - e; d = d < 0 ? -d : d;
        if (d > dmax) dmax = d, xd = x[i];
    }
    printf("against torch (%ld inputs): max |diff| %.3g at %.9g; NaN mismatches %ld, inf mismatches %ld, zero-sign mismatches %ld\n",
           n, dmax, xd, nan_mis, inf_mis, zero_sign);
    int ok = emax < 4.5e-7 && dmax < 2e-6 && !nan_mis && !inf_mis && !zero_sign;
    printf("%s\n", ok ? "OK" : "FAILED (bounds: 4.5e-7 from float64, 2e-6 from torch, specials equal)");
    return !ok;
}
