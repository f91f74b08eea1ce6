/* tools/colsum_ab.c - a bias gradient's column sum at NTHREADS, the two forms
 * compiler/reduce.c generates (issue 34, transformer_stack_train's backward):
 *   cols  the columns split across the threads in blocks (cg_red_block_width):
 *         each thread reads its columns' lines from every row;
 *   rows  the rows split across the threads (cg_red_use_rsplit): per-thread
 *         partial sums of every column, then each column's partials added.
 * Each timed call follows a producer kernel that writes the input as the
 * generated pointwise kernels do (a static schedule over blocks of 4096
 * elements), so the input sits in the cores' caches as in the backward.
 * Prints per shape the mean us of producer + sum minus the producer alone,
 * and the largest difference between the two forms' sums.
 *
 *   gcc -O3 -march=native -fopenmp -DNTHREADS=16 tools/colsum_ab.c -o /tmp/colsum_ab
 *   OMP_PROC_BIND=close /tmp/colsum_ab [calls per run, default 2000]
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef NTHREADS
#define NTHREADS 16
#endif
#define BLOCK 64

static void produce(const float *restrict a, float *restrict g, int64_t n, float s)
{
    #pragma omp parallel for num_threads(NTHREADS) schedule(static)
    for (int64_t ib = 0; ib < (n + 4095) / 4096; ib++) {
        const int64_t lo = ib * 4096, hi = lo + 4096 < n ? lo + 4096 : n;
        for (int64_t i = lo; i < hi; i++)
            g[i] = a[i] * s;
    }
}

/* the column split: blocks of bw columns (a multiple of 16, at most 64) */
static void sum_cols(const float *restrict x, float *restrict out, int64_t rows, int64_t w)
{
    int64_t per = ((w + NTHREADS - 1) / NTHREADS + 15) / 16 * 16;
    const int64_t bw = per < 16 ? 16 : per > BLOCK ? BLOCK : per;
    #pragma omp parallel for num_threads(NTHREADS) schedule(static)
    for (int64_t ib = 0; ib < w; ib += bw) {
        const int64_t nb = w - ib < bw ? w - ib : bw;
        double acc_b[BLOCK];
        for (int64_t j = 0; j < nb; j++)
            acc_b[j] = 0;
        for (int64_t r = 0; r < rows; r++) {
            #pragma omp simd
            for (int64_t j = 0; j < nb; j++)
                acc_b[j] += (double)x[ib + j + r * w];
        }
        for (int64_t j = 0; j < nb; j++)
            out[ib + j] = (float)acc_b[j];
    }
}

/* the row split (the form reduce.c's cg_red_rsplit_nest emits) */
static void sum_rows(const float *restrict x, float *restrict out, int64_t rows, int64_t w)
{
    double (*part)[w] = malloc(sizeof(double) * NTHREADS * (size_t)w);
    #pragma omp parallel num_threads(NTHREADS)
    {
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < NTHREADS; t++) {
            const int64_t rlo = t * rows / NTHREADS, rhi = (t + 1) * rows / NTHREADS;
            for (int64_t ib = 0; ib < w; ib += BLOCK) {
                const int64_t nb = w - ib < BLOCK ? w - ib : BLOCK;
                double acc_b[BLOCK];
                for (int64_t j = 0; j < nb; j++)
                    acc_b[j] = 0;
                for (int64_t r = rlo; r < rhi; r++) {
                    #pragma omp simd
                    for (int64_t j = 0; j < nb; j++)
                        acc_b[j] += (double)x[ib + j + r * w];
                }
                for (int64_t j = 0; j < nb; j++)
                    part[t][ib + j] = acc_b[j];
            }
        }
        #pragma omp for schedule(static)
        for (int64_t i = 0; i < w; i++) {
            double acc = part[0][i];
            for (int64_t t = 1; t < NTHREADS; t++)
                acc += part[t][i];
            out[i] = (float)acc;
        }
    }
    free(part);
}

/* mean us per call of producer + f (f NULL: the producer alone), best of 7 runs of n */
static double time_us(void (*f)(const float *, float *, int64_t, int64_t), const float *a,
                      float *g, float *out, int64_t rows, int64_t w, int n)
{
    double best = 1e30;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = omp_get_wtime();
        for (int k = 0; k < n; k++) {
            produce(a, g, rows * w, 1.0f + (float)(k & 1));
            if (f)
                f(g, out, rows, w);
        }
        double t = (omp_get_wtime() - t0) / n * 1e6;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 2000;
    static const int64_t shapes[][2] = {{256, 256}, {256, 768}, {256, 1024}, {1024, 256}};
    printf("NTHREADS %d: us per column sum after its producer (best of 7 x %d)\n", NTHREADS, reps);
    fflush(stdout);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], w = shapes[s][1], n = rows * w;
        float *a = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
        float *o1 = malloc(sizeof(float) * (size_t)w), *o2 = malloc(sizeof(float) * (size_t)w);
        for (int64_t i = 0; i < n; i++)
            a[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
        double p = time_us(NULL, a, g, o1, rows, w, reps);
        double c = time_us(sum_cols, a, g, o1, rows, w, reps);
        double r = time_us(sum_rows, a, g, o2, rows, w, reps);
        double c2 = time_us(sum_cols, a, g, o1, rows, w, reps);
        double r2 = time_us(sum_rows, a, g, o2, rows, w, reps);
        double diff = 0;
        for (int64_t i = 0; i < w; i++)
            diff = fmax(diff, fabs((double)o1[i] - (double)o2[i]));
        printf("%5lld x %-5lld producer %7.2f  cols %7.2f %7.2f  rows %7.2f %7.2f  max|diff| %g\n",
               (long long)rows, (long long)w, p, c - p, c2 - p, r - p, r2 - p, diff);
        fflush(stdout);
        free(a), free(g), free(o1), free(o2);
    }
    return 0;
}
