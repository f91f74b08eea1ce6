/* test_compiler.c - build graphs by hand, compile them with cdy_codegen and
 * cdy_cc_build, run the kernels through dlopen and compare against a plain C
 * reference.  No Python.  Exit status 0 when every check passes. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "sym/sym.h"
#include <unistd.h>

#include "cdynamo.h"
#include "compiler/cg.h"

static int failures, checks;
static char cache_dir[256];

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        checks++;                                                          \
        if (!(cond)) {                                                     \
            failures++;                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);           \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

/* ---- graph building ------------------------------------------------------- */

#define TG_MAX 32
typedef struct {
    cdy_graph g;
    cdy_value vals[TG_MAX];
    int outs[TG_MAX];
} tgraph;

/* Start an empty graph. */
static void tg_init(tgraph *t)
{
    memset(t, 0, sizeof(*t));
    t->g.values = t->vals;
    t->g.cap_values = TG_MAX;
    t->g.outputs = t->outs;
}

/* Contiguous strides for sizes. */
static void contiguous(int ndim, const int64_t *sizes, int64_t *strides)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= sizes[d] > 1 ? sizes[d] : 1;
    }
}

/* Add an input; strides NULL means contiguous.  Returns its value number. */
static int tg_input(tgraph *t, int dtype, int ndim, const int64_t *sizes, const int64_t *strides)
{
    int v = t->g.nvalues++;
    cdy_value *x = &t->vals[v];
    x->kind = CDY_VAL_INPUT;
    x->meta.dtype = dtype;
    x->meta.ndim = ndim;
    if (ndim > 0)
        memcpy(x->meta.sizes, sizes, sizeof(int64_t) * (size_t)ndim);
    if (strides)
        memcpy(x->meta.strides, strides, sizeof(int64_t) * (size_t)ndim);
    else
        contiguous(ndim, sizes, x->meta.strides);
    x->input_index = t->g.ninputs++;
    return v;
}

/* Add a scalar constant (float64 when is_float, else int64). */
static int tg_scalar(tgraph *t, int is_float, double f, int64_t i)
{
    int v = t->g.nvalues++;
    cdy_value *x = &t->vals[v];
    x->kind = CDY_VAL_SCALAR;
    x->meta.dtype = is_float ? CDY_DT_FLOAT64 : CDY_DT_INT64;
    x->f = f;
    x->i = i;
    return v;
}

/* Add a node; its sizes are the broadcast of the args, its strides contiguous. */
static int tg_node(tgraph *t, int op, int compute, int out, int a, int b, int c)
{
    int v = t->g.nvalues++;
    cdy_value *x = &t->vals[v];
    int args[3] = {a, b, c};
    x->kind = CDY_VAL_NODE;
    x->op = op;
    x->nargs = cdy_op_table[op].nargs;
    x->compute_dtype = compute;
    x->meta.dtype = out;
    x->source_line = 10 + v;
    for (int i = 0; i < x->nargs; i++) {
        x->args[i] = args[i];
        const cdy_meta *m = &t->vals[args[i]].meta;
        if (m->ndim > x->meta.ndim)
            x->meta.ndim = m->ndim;
    }
    for (int d = 0; d < x->meta.ndim; d++)
        x->meta.sizes[d] = 1;
    for (int i = 0; i < x->nargs; i++) {
        const cdy_meta *m = &t->vals[args[i]].meta;
        for (int d = 0; d < m->ndim; d++) {
            int od = d + x->meta.ndim - m->ndim;
            if (m->sizes[d] != 1)
                x->meta.sizes[od] = m->sizes[d];
        }
    }
    contiguous(x->meta.ndim, x->meta.sizes, x->meta.strides);
    return v;
}

/* Mark v as a graph output. */
static void tg_output(tgraph *t, int v)
{
    t->outs[t->g.noutputs++] = v;
}

/* ---- compiling and running ------------------------------------------------ */

typedef struct {
    cdy_plan plan;
    void *lib;
    void *bufs[TG_MAX];
    int owned[TG_MAX];
} tcompiled;

/* Elements of storage a meta needs (0 if empty). */
static int64_t storage_elems(const cdy_meta *m)
{
    int64_t n = 1;
    for (int d = 0; d < m->ndim; d++) {
        if (m->sizes[d] == 0)
            return 0;
        n += (m->sizes[d] - 1) * m->strides[d];
    }
    return n;
}

/* The stream_bytes tc_build generates with (0: plain stores). */
static int64_t tc_stream_bytes;

/* Codegen + build + dlopen; 0 on success.  *disk_hit reports the cache. */
static int tc_build(tgraph *t, int nthreads, tcompiled *tc, int *disk_hit)
{
    char err[CDY_ERRLEN], so[512];
    memset(tc, 0, sizeof(*tc));
    if (cdy_codegen(&t->g, nthreads, tc_stream_bytes, &tc->plan, err, sizeof(err))) {
        fprintf(stderr, "codegen: %s\n", err);
        return -1;
    }
    cdy_cc_opts opts = {"gcc", cache_dir, NULL, cdy_codegen_prefix()};
    int hit = 0;
    if (cdy_cc_build(tc->plan.source, &opts, so, sizeof(so), &hit, err, sizeof(err))) {
        fprintf(stderr, "build: %s\n", err);
        cdy_plan_free(&tc->plan);
        return -1;
    }
    if (disk_hit)
        *disk_hit = hit;
    tc->lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!tc->lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        cdy_plan_free(&tc->plan);
        return -1;
    }
    return 0;
}

/* Call a kernel with nargs pointer arguments. */
static void call_kernel(void *fn, int nargs, void **a)
{
    typedef void (*f1)(void *);
    typedef void (*f2)(void *, void *);
    typedef void (*f3)(void *, void *, void *);
    typedef void (*f4)(void *, void *, void *, void *);
    typedef void (*f5)(void *, void *, void *, void *, void *);
    typedef void (*f6)(void *, void *, void *, void *, void *, void *);
    typedef void (*f7)(void *, void *, void *, void *, void *, void *, void *);
    typedef void (*f8)(void *, void *, void *, void *, void *, void *, void *, void *);
    union { void *p; f1 a; f2 b; f3 c; f4 d; f5 e; f6 f; f7 g; f8 h; } u = {fn};
    switch (nargs) {
    case 1: u.a(a[0]); break;
    case 2: u.b(a[0], a[1]); break;
    case 3: u.c(a[0], a[1], a[2]); break;
    case 4: u.d(a[0], a[1], a[2], a[3]); break;
    case 5: u.e(a[0], a[1], a[2], a[3], a[4]); break;
    case 6: u.f(a[0], a[1], a[2], a[3], a[4], a[5]); break;
    case 7: u.g(a[0], a[1], a[2], a[3], a[4], a[5], a[6]); break;
    case 8: u.h(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]); break;
    default: fprintf(stderr, "call_kernel: %d args unsupported\n", nargs); failures++;
    }
}

/* Allocate the output buffers (filled with 0x5a bytes) and run every kernel.
 * inputs[i] is the data of graph input i. */
static void tc_run(tcompiled *tc, void **inputs)
{
    cdy_plan *p = &tc->plan;
    for (int b = 0; b < p->nbuffers; b++) {
        if (b < p->ninputs) {
            tc->bufs[b] = inputs[b];
            continue;
        }
        const cdy_meta *m = &p->buffers[b];
        size_t n = (size_t)storage_elems(m) * (size_t)cdy_dtype_table[m->dtype].size;
        tc->bufs[b] = malloc(n + 1);
        memset(tc->bufs[b], 0x5a, n + 1);
        tc->owned[b] = 1;
    }
    for (int k = 0; k < p->nkernels; k++) {
        void *fn = dlsym(tc->lib, p->kernels[k].symbol);
        CHECK(fn != NULL, "symbol %s missing", p->kernels[k].symbol);
        if (!fn)
            continue;
        void *a[CDY_MAX_KARGS];
        for (int i = 0; i < p->kernels[k].nargs; i++)
            a[i] = tc->bufs[p->kernels[k].args[i]];
        call_kernel(fn, p->kernels[k].nargs, a);
    }
}

/* Data pointer of graph output o. */
static void *tc_out(tcompiled *tc, int o)
{
    return tc->bufs[tc->plan.outputs[o]];
}

/* Release everything of tc. */
static void tc_free(tcompiled *tc)
{
    for (int b = 0; b < TG_MAX; b++)
        if (tc->owned[b])
            free(tc->bufs[b]);
    if (tc->lib)
        dlclose(tc->lib);
    cdy_plan_free(&tc->plan);
}

/* Bitwise float equality (NaN == NaN; -0 != +0). */
static int same_f32(float a, float b)
{
    return memcmp(&a, &b, sizeof(a)) == 0 || (isnan(a) && isnan(b));
}

static int same_f64(double a, double b)
{
    return memcmp(&a, &b, sizeof(a)) == 0 || (isnan(a) && isnan(b));
}

/* Deterministic pseudo-random float in [-2, 2). */
static float rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 16384.0f - 2.0f;
}

/* ---- tests ------------------------------------------------------------------ */

/* out = a + b over contiguous float32 vectors; second build is a disk hit. */
static void test_contiguous_add(void)
{
    tgraph t;
    tg_init(&t);
    int64_t n[1] = {1000};
    int a = tg_input(&t, CDY_DT_FLOAT32, 1, n, NULL);
    int b = tg_input(&t, CDY_DT_FLOAT32, 1, n, NULL);
    tg_output(&t, tg_node(&t, CDY_OP_ADD, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, b, 0));
    tcompiled tc;
    int hit = -1;
    if (tc_build(&t, 4, &tc, &hit)) {
        CHECK(0, "contiguous add: build failed");
        return;
    }
    CHECK(hit == 0, "first build should not be a disk hit");
    CHECK(strstr(tc.plan.source, "#pragma GCC ivdep") != NULL, "flat loop should be ivdep");
    CHECK(strstr(tc.plan.source, "omp parallel") == NULL, "1000 elements: no OpenMP");
    CHECK(strstr(tc.plan.source, "const float *restrict in_ptr0") != NULL, "typed signature");
    CHECK(strstr(tc.plan.source, "/* fused: add") != NULL, "fused comment");
    CHECK(tc.plan.nbuffers == 3 && tc.plan.nkernels == 1 && tc.plan.kernels[0].nargs == 3,
          "plan shape");
    float x[1000], y[1000];
    unsigned s = 1;
    for (int i = 0; i < 1000; i++) {
        x[i] = rnd(&s);
        y[i] = rnd(&s);
    }
    void *in[2] = {x, y};
    tc_run(&tc, in);
    const float *o = tc_out(&tc, 0);
    int bad = 0;
    for (int i = 0; i < 1000; i++)
        bad += !same_f32(o[i], x[i] + y[i]);
    CHECK(bad == 0, "contiguous add: %d mismatches", bad);
    tc_free(&tc);
    if (tc_build(&t, 4, &tc, &hit) == 0) {
        CHECK(hit == 1, "second build should be a disk hit");
        tc_free(&tc);
    }
}

/* relu(a * b + 1.0) with a (64,1), b (1,1024); also a*b as a second output. */
static void test_broadcast(void)
{
    tgraph t;
    tg_init(&t);
    int64_t sa[2] = {64, 1}, sb[2] = {1, 1024};
    int a = tg_input(&t, CDY_DT_FLOAT32, 2, sa, NULL);
    int b = tg_input(&t, CDY_DT_FLOAT32, 2, sb, NULL);
    int one = tg_scalar(&t, 1, 1.0, 0);
    int m = tg_node(&t, CDY_OP_MUL, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, b, 0);
    int ad = tg_node(&t, CDY_OP_ADD, CDY_DT_FLOAT32, CDY_DT_FLOAT32, m, one, 0);
    int r = tg_node(&t, CDY_OP_RELU, CDY_DT_FLOAT32, CDY_DT_FLOAT32, ad, 0, 0);
    tg_node(&t, CDY_OP_EXP, CDY_DT_FLOAT32, CDY_DT_FLOAT32, r, 0, 0);   /* dead */
    tg_output(&t, r);
    tg_output(&t, m);
    tg_output(&t, r);                                                   /* repeated */
    tg_output(&t, a);                                                   /* an input */
    tcompiled tc;
    if (tc_build(&t, 4, &tc, NULL)) {
        CHECK(0, "broadcast: build failed");
        return;
    }
    cdy_plan *p = &tc.plan;
    CHECK(p->nkernels == 1, "one kernel for one iteration space, got %d", p->nkernels);
    CHECK(p->nbuffers == 4, "2 inputs + 2 distinct node outputs, got %d", p->nbuffers);
    CHECK(p->noutputs == 4 && p->outputs[0] == p->outputs[2] && p->outputs[3] == 0,
          "output mapping");
    CHECK(strstr(p->source, "/* exp") == NULL, "dead node emitted");
    CHECK(strstr(p->source, "omp parallel") != NULL, "65536 elements: OpenMP");
    float x[64], y[1024];
    unsigned s = 7;
    for (int i = 0; i < 64; i++)
        x[i] = rnd(&s);
    for (int i = 0; i < 1024; i++)
        y[i] = rnd(&s);
    void *in[2] = {x, y};
    tc_run(&tc, in);
    const float *o0 = tc_out(&tc, 0), *o1 = tc_out(&tc, 1);
    int bad = 0;
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 1024; j++) {
            float mm = x[i] * y[j], v = mm + 1.0f;
            v = v < 0 ? 0 : v;
            bad += !same_f32(o0[i * 1024 + j], v) + !same_f32(o1[i * 1024 + j], mm);
        }
    CHECK(bad == 0, "broadcast: %d mismatches", bad);
    CHECK(tc_out(&tc, 3) == (void *)x, "input output is the input buffer");
    tc_free(&tc);
}

/* x is a transposed view (sizes 32x48, strides 1,32); y contiguous; x - y.
 * Also a channels_last 4-D add that must coalesce to one flat loop. */
static void test_noncontiguous(void)
{
    tgraph t;
    tg_init(&t);
    int64_t sz[2] = {32, 48}, st[2] = {1, 32};
    int x = tg_input(&t, CDY_DT_FLOAT64, 2, sz, st);
    int y = tg_input(&t, CDY_DT_FLOAT64, 2, sz, NULL);
    tg_output(&t, tg_node(&t, CDY_OP_SUB, CDY_DT_FLOAT64, CDY_DT_FLOAT64, x, y, 0));
    tcompiled tc;
    if (tc_build(&t, 2, &tc, NULL) == 0) {
        double xd[32 * 48], yd[32 * 48];
        for (int i = 0; i < 32 * 48; i++) {
            xd[i] = i * 0.5;
            yd[i] = i * 0.25 - 3;
        }
        void *in[2] = {xd, yd};
        tc_run(&tc, in);
        const double *o = tc_out(&tc, 0);
        int bad = 0;
        for (int i = 0; i < 32; i++)
            for (int j = 0; j < 48; j++)
                bad += !same_f64(o[i * 48 + j], xd[i + j * 32] - yd[i * 48 + j]);
        CHECK(bad == 0, "transposed: %d mismatches", bad);
        tc_free(&tc);
    } else {
        CHECK(0, "transposed: build failed");
    }

    tg_init(&t);
    int64_t s4[4] = {2, 3, 4, 5}, cl[4] = {60, 1, 15, 3};
    int a = tg_input(&t, CDY_DT_FLOAT32, 4, s4, cl);
    int b = tg_input(&t, CDY_DT_FLOAT32, 4, s4, cl);
    int n = tg_node(&t, CDY_OP_MUL, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, b, 0);
    memcpy(t.vals[n].meta.strides, cl, sizeof(cl));
    tg_output(&t, n);
    if (tc_build(&t, 2, &tc, NULL) == 0) {
        CHECK(strstr(tc.plan.source, "loops: 120 */") != NULL, "channels_last should be flat");
        float fa[120], fb[120];
        for (int i = 0; i < 120; i++) {
            fa[i] = (float)i * 0.1f;
            fb[i] = 3.0f - (float)i;
        }
        void *in[2] = {fa, fb};
        tc_run(&tc, in);
        const float *o = tc_out(&tc, 0);
        int bad = 0;
        for (int i = 0; i < 120; i++)
            bad += !same_f32(o[i], fa[i] * fb[i]);
        CHECK(bad == 0, "channels_last: %d mismatches", bad);
        tc_free(&tc);
    } else {
        CHECK(0, "channels_last: build failed");
    }
}

/* 0-d: exp(x * 2.0) and sigmoid/tanh/log/sqrt/abs/neg on a float64 vector. */
static void test_zero_dim_and_math(void)
{
    tgraph t;
    tg_init(&t);
    int x = tg_input(&t, CDY_DT_FLOAT32, 0, NULL, NULL);
    int two = tg_scalar(&t, 1, 2.0, 0);
    int m = tg_node(&t, CDY_OP_MUL, CDY_DT_FLOAT32, CDY_DT_FLOAT32, x, two, 0);
    tg_output(&t, tg_node(&t, CDY_OP_EXP, CDY_DT_FLOAT32, CDY_DT_FLOAT32, m, 0, 0));
    tcompiled tc;
    if (tc_build(&t, 1, &tc, NULL) == 0) {
        float v = 0.3f;
        void *in[1] = {&v};
        tc_run(&tc, in);
        CHECK(same_f32(*(float *)tc_out(&tc, 0), expf(v * 2.0f)), "0-d exp");
        tc_free(&tc);
    } else {
        CHECK(0, "0-d: build failed");
    }

    tg_init(&t);
    int64_t n[1] = {9};
    int a = tg_input(&t, CDY_DT_FLOAT64, 1, n, NULL);
    int ops[6] = {CDY_OP_SIGMOID, CDY_OP_TANH, CDY_OP_LOG, CDY_OP_SQRT, CDY_OP_ABS, CDY_OP_NEG};
    for (int i = 0; i < 6; i++)
        tg_output(&t, tg_node(&t, ops[i], CDY_DT_FLOAT64, CDY_DT_FLOAT64, a, 0, 0));
    if (tc_build(&t, 1, &tc, NULL) == 0) {
        double d[9] = {-2.5, -0.0, 0.0, 0.5, 3.0, INFINITY, -INFINITY, NAN, 1e-300};
        void *in[1] = {d};
        tc_run(&tc, in);
        int bad = 0;
        for (int i = 0; i < 9; i++) {
            bad += !same_f64(((double *)tc_out(&tc, 0))[i], 1.0 / (1.0 + exp(-d[i])));
            bad += !same_f64(((double *)tc_out(&tc, 1))[i], tanh(d[i]));
            bad += !same_f64(((double *)tc_out(&tc, 2))[i], log(d[i]));
            bad += !same_f64(((double *)tc_out(&tc, 3))[i], sqrt(d[i]));
            bad += !same_f64(((double *)tc_out(&tc, 4))[i], fabs(d[i]));
            bad += !same_f64(((double *)tc_out(&tc, 5))[i], -d[i]);
        }
        CHECK(bad == 0, "float64 math: %d mismatches", bad);
        tc_free(&tc);
    } else {
        CHECK(0, "math: build failed");
    }
}

/* uint8: a - b, a * b and a + 300 wrap modulo 256. */
static void test_uint8_wrap(void)
{
    tgraph t;
    tg_init(&t);
    int64_t n[1] = {256};
    int a = tg_input(&t, CDY_DT_UINT8, 1, n, NULL);
    int b = tg_input(&t, CDY_DT_UINT8, 1, n, NULL);
    int k = tg_scalar(&t, 0, 0, 300);
    tg_output(&t, tg_node(&t, CDY_OP_SUB, CDY_DT_UINT8, CDY_DT_UINT8, a, b, 0));
    tg_output(&t, tg_node(&t, CDY_OP_MUL, CDY_DT_UINT8, CDY_DT_UINT8, a, b, 0));
    tg_output(&t, tg_node(&t, CDY_OP_ADD, CDY_DT_UINT8, CDY_DT_UINT8, a, k, 0));
    tg_output(&t, tg_node(&t, CDY_OP_NEG, CDY_DT_UINT8, CDY_DT_UINT8, a, 0, 0));
    tcompiled tc;
    if (tc_build(&t, 1, &tc, NULL)) {
        CHECK(0, "uint8: build failed");
        return;
    }
    uint8_t x[256], y[256];
    for (int i = 0; i < 256; i++) {
        x[i] = (uint8_t)i;
        y[i] = (uint8_t)(255 - i * 7);
    }
    void *in[2] = {x, y};
    tc_run(&tc, in);
    const uint8_t *o0 = tc_out(&tc, 0), *o1 = tc_out(&tc, 1), *o2 = tc_out(&tc, 2),
                  *o3 = tc_out(&tc, 3);
    int bad = 0;
    for (int i = 0; i < 256; i++) {
        bad += o0[i] != (uint8_t)(x[i] - y[i]);
        bad += o1[i] != (uint8_t)(x[i] * y[i]);
        bad += o2[i] != (uint8_t)(x[i] + 44);
        bad += o3[i] != (uint8_t)(256 - x[i]);
    }
    CHECK(bad == 0, "uint8 wrap: %d mismatches", bad);
    tc_free(&tc);
}

/* lt(a, b), eq(a, 0.5) -> bool; where(lt, a, 0.0); bool add stays 0/1. */
static void test_bool_and_where(void)
{
    tgraph t;
    tg_init(&t);
    int64_t n[2] = {3, 50};
    int a = tg_input(&t, CDY_DT_FLOAT32, 2, n, NULL);
    int b = tg_input(&t, CDY_DT_FLOAT32, 2, n, NULL);
    int half = tg_scalar(&t, 1, 0.5, 0);
    int zero = tg_scalar(&t, 1, 0.0, 0);
    int lt = tg_node(&t, CDY_OP_LT, CDY_DT_FLOAT32, CDY_DT_BOOL, a, b, 0);
    int eq = tg_node(&t, CDY_OP_EQ, CDY_DT_FLOAT32, CDY_DT_BOOL, a, half, 0);
    int w = tg_node(&t, CDY_OP_WHERE, CDY_DT_FLOAT32, CDY_DT_FLOAT32, lt, a, zero);
    int or_ = tg_node(&t, CDY_OP_ADD, CDY_DT_BOOL, CDY_DT_BOOL, lt, lt, 0);
    tg_output(&t, lt);
    tg_output(&t, eq);
    tg_output(&t, w);
    tg_output(&t, or_);
    tcompiled tc;
    if (tc_build(&t, 1, &tc, NULL)) {
        CHECK(0, "bool: build failed");
        return;
    }
    float x[150], y[150];
    unsigned s = 3;
    for (int i = 0; i < 150; i++) {
        x[i] = i % 10 == 0 ? 0.5f : rnd(&s);
        y[i] = rnd(&s);
    }
    void *in[2] = {x, y};
    tc_run(&tc, in);
    const uint8_t *o0 = tc_out(&tc, 0), *o1 = tc_out(&tc, 1), *o3 = tc_out(&tc, 3);
    const float *o2 = tc_out(&tc, 2);
    int bad = 0;
    for (int i = 0; i < 150; i++) {
        bad += o0[i] != (x[i] < y[i]);
        bad += o1[i] != (x[i] == 0.5f);
        bad += !same_f32(o2[i], x[i] < y[i] ? x[i] : 0.0f);
        bad += o3[i] != (x[i] < y[i]);
    }
    CHECK(bad == 0, "bool/where: %d mismatches", bad);
    tc_free(&tc);
}

/* maximum / minimum propagate NaN from either side. */
static void test_nan_maximum(void)
{
    tgraph t;
    tg_init(&t);
    int64_t n[1] = {6};
    int a = tg_input(&t, CDY_DT_FLOAT32, 1, n, NULL);
    int b = tg_input(&t, CDY_DT_FLOAT32, 1, n, NULL);
    tg_output(&t, tg_node(&t, CDY_OP_MAXIMUM, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, b, 0));
    tg_output(&t, tg_node(&t, CDY_OP_MINIMUM, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, b, 0));
    tg_output(&t, tg_node(&t, CDY_OP_RELU, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, 0, 0));
    tcompiled tc;
    if (tc_build(&t, 1, &tc, NULL)) {
        CHECK(0, "nan: build failed");
        return;
    }
    float x[6] = {NAN, 1, 2, NAN, -1, -0.0f}, y[6] = {1, NAN, 3, NAN, -2, 5};
    float mx[6] = {NAN, NAN, 3, NAN, -1, 5}, mn[6] = {NAN, NAN, 2, NAN, -2, -0.0f};
    float rl[6] = {NAN, 1, 2, NAN, 0, -0.0f};
    void *in[2] = {x, y};
    tc_run(&tc, in);
    int bad = 0;
    for (int i = 0; i < 6; i++) {
        bad += !same_f32(((float *)tc_out(&tc, 0))[i], mx[i]);
        bad += !same_f32(((float *)tc_out(&tc, 1))[i], mn[i]);
        bad += !same_f32(((float *)tc_out(&tc, 2))[i], rl[i]);
    }
    CHECK(bad == 0, "maximum/minimum/relu NaN: %d mismatches", bad);
    tc_free(&tc);
}

/* A 1-D input of 1<<20 elements: OpenMP blocks; also special literals. */
static void test_large_parallel(int64_t stream_bytes)
{
    tgraph t;
    tg_init(&t);
    int64_t n[1] = {1 << 20};
    int a = tg_input(&t, CDY_DT_FLOAT32, 1, n, NULL);
    int c = tg_scalar(&t, 1, -0.0, 0);
    int inf = tg_scalar(&t, 1, -INFINITY, 0);
    int m = tg_node(&t, CDY_OP_MUL, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, c, 0);
    tg_output(&t, m);
    tg_output(&t, tg_node(&t, CDY_OP_MAXIMUM, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, inf, 0));
    tcompiled tc;
    tc_stream_bytes = stream_bytes;
    int rc = tc_build(&t, 4, &tc, NULL);
    tc_stream_bytes = 0;
    if (rc) {
        CHECK(0, "large: build failed");
        return;
    }
    CHECK((strstr(tc.plan.source, "cdy_stream(&out_ptr1") != NULL) == (stream_bytes > 0),
          "large: streamed stores exactly when stream_bytes (%lld) is set",
          (long long)stream_bytes);
    CHECK(strstr(tc.plan.source, "num_threads(NTHREADS)") != NULL, "OpenMP pragma missing");
    CHECK(strstr(tc.plan.source, "#define NTHREADS 4") != NULL, "nthreads not in source");
    float *x = malloc(sizeof(float) << 20);
    unsigned s = 11;
    for (int i = 0; i < 1 << 20; i++)
        x[i] = rnd(&s);
    void *in[1] = {x};
    tc_run(&tc, in);
    const float *o0 = tc_out(&tc, 0), *o1 = tc_out(&tc, 1);
    int bad = 0;
    for (int i = 0; i < 1 << 20; i++)
        bad += !same_f32(o0[i], x[i] * -0.0f) + !same_f32(o1[i], x[i]);
    CHECK(bad == 0, "large: %d mismatches", bad);
    free(x);
    tc_free(&tc);
}

/* The prologue's cdy_stream copies n bytes exactly for every alignment of
 * its destination and every length around a line: non-temporal stores for
 * whole lines, plain copies for the ends, nothing written outside; its AVX
 * form and, built with extra_flags (-mno-avx), its SSE2 form. */
static void test_stream_helper(const char *extra_flags)
{
    static char src[65536];
    char err[CDY_ERRLEN], so[512];
    int hit;
    const char *kernel = CDY_CC_KERNEL_MARK
        "void kernel_0(char *d, const char *s, int64_t n) { cdy_stream(d, s, n); "
        "cdy_sfence(); }\n";
    cdy_buf helpers = {0};
    cg_emit_helpers(&helpers, kernel);
    CHECK(helpers.data && strstr(helpers.data, "cdy_stream(") &&
          !strstr(helpers.data, "cdy_vexpf("), "stream helper: helpers chosen");
    snprintf(src, sizeof(src), "#include <stdint.h>\n%s%s%s\n%s", cg_prologue_libm,
             cg_prologue_math, helpers.data ? helpers.data : "", kernel);
    cdy_buf_free(&helpers);
    cdy_cc_opts opts = {"gcc", cache_dir, extra_flags, NULL};
    CHECK(cdy_cc_build(src, &opts, so, sizeof(so), &hit, err, sizeof(err)) == 0,
          "stream helper build (%s): %s", extra_flags ? extra_flags : "", err);
    void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    void (*f)(char *, const char *, int64_t) = NULL;
    *(void **)&f = lib ? dlsym(lib, "kernel_0") : NULL;
    CHECK(f != NULL, "stream helper: kernel_0 missing");
    static char dst[1024] __attribute__((aligned(64))), ref[1024], s0[1024];
    int bad = 0;
    for (int i = 0; i < 1024; i++)
        s0[i] = (char)(i * 7 + 3);
    for (int off = 0; f && off < 64; off++)
        for (int n = 0; n <= 300; n += n < 140 ? 1 : 37) {
            memset(dst, 0x5a, sizeof(dst));
            memcpy(ref, dst, sizeof(ref));
            memcpy(ref + off, s0 + 5, (size_t)n);
            f(dst + off, s0 + 5, n);
            bad += memcmp(dst, ref, sizeof(dst)) != 0;
        }
    CHECK(bad == 0, "stream helper (%s): %d (offset, length) pairs wrong",
          extra_flags ? extra_flags : "", bad);
    if (lib)
        dlclose(lib);
}

/* Int64 with INT64_MIN scalar (wraps), int32 abs of INT32_MIN, zero-size. */
static void test_ints_and_empty(void)
{
    tgraph t;
    tg_init(&t);
    int64_t n[1] = {4};
    int a = tg_input(&t, CDY_DT_INT64, 1, n, NULL);
    int b = tg_input(&t, CDY_DT_INT32, 1, n, NULL);
    int k = tg_scalar(&t, 0, 0, INT64_MIN);
    tg_output(&t, tg_node(&t, CDY_OP_ADD, CDY_DT_INT64, CDY_DT_INT64, a, k, 0));
    tg_output(&t, tg_node(&t, CDY_OP_ABS, CDY_DT_INT32, CDY_DT_INT32, b, 0, 0));
    tg_output(&t, tg_node(&t, CDY_OP_MUL, CDY_DT_INT64, CDY_DT_INT64, a, b, 0));
    tcompiled tc;
    if (tc_build(&t, 1, &tc, NULL) == 0) {
        int64_t x[4] = {0, -1, INT64_MAX, 5};
        int32_t y[4] = {INT32_MIN, -3, 2, 0};
        void *in[2] = {x, y};
        tc_run(&tc, in);
        const int64_t *o0 = tc_out(&tc, 0), *o2 = tc_out(&tc, 2);
        const int32_t *o1 = tc_out(&tc, 1);
        int bad = 0;
        for (int i = 0; i < 4; i++) {
            bad += o0[i] != (int64_t)((uint64_t)x[i] + (uint64_t)INT64_MIN);
            bad += o1[i] != (y[i] == INT32_MIN ? INT32_MIN : abs(y[i]));
            bad += o2[i] != (int64_t)((uint64_t)x[i] * (uint64_t)(int64_t)y[i]);
        }
        CHECK(bad == 0, "ints: %d mismatches", bad);
        tc_free(&tc);
    } else {
        CHECK(0, "ints: build failed");
    }

    tg_init(&t);
    int64_t z[2] = {0, 5}, one[1] = {5};
    int e = tg_input(&t, CDY_DT_FLOAT32, 2, z, NULL);
    int f = tg_input(&t, CDY_DT_FLOAT32, 1, one, NULL);
    tg_output(&t, tg_node(&t, CDY_OP_ADD, CDY_DT_FLOAT32, CDY_DT_FLOAT32, e, f, 0));
    if (tc_build(&t, 4, &tc, NULL) == 0) {
        CHECK(tc.plan.nkernels == 1, "zero-size kernel still emitted");
        float fv[5] = {0};
        void *in[2] = {NULL, fv};
        tc_run(&tc, in);
        tc_free(&tc);
    } else {
        CHECK(0, "zero-size: build failed");
    }
}

/* 3-D, input permuted (no coalescing), small outer dim: collapse(2). */
static void test_collapse(void)
{
    tgraph t;
    tg_init(&t);
    int64_t sz[3] = {2, 300, 100}, st[3] = {1, 2, 600};
    int a = tg_input(&t, CDY_DT_FLOAT32, 3, sz, st);
    int b = tg_input(&t, CDY_DT_FLOAT32, 3, sz, NULL);
    tg_output(&t, tg_node(&t, CDY_OP_DIV, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, b, 0));
    tcompiled tc;
    if (tc_build(&t, 4, &tc, NULL)) {
        CHECK(0, "collapse: build failed");
        return;
    }
    CHECK(strstr(tc.plan.source, "collapse(2)") != NULL, "collapse(2) expected");
    float *x = malloc(sizeof(float) * 60000), *y = malloc(sizeof(float) * 60000);
    unsigned s = 5;
    for (int i = 0; i < 60000; i++) {
        x[i] = rnd(&s);
        y[i] = rnd(&s);
    }
    void *in[2] = {x, y};
    tc_run(&tc, in);
    const float *o = tc_out(&tc, 0);
    int bad = 0;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 300; j++)
            for (int k = 0; k < 100; k++)
                bad += !same_f32(o[i * 30000 + j * 100 + k],
                                 x[i + j * 2 + k * 600] / y[i * 30000 + j * 100 + k]);
    CHECK(bad == 0, "collapse: %d mismatches", bad);
    free(x);
    free(y);
    tc_free(&tc);
}

/* Two iteration spaces give two kernels. */
static void test_two_groups(void)
{
    tgraph t;
    tg_init(&t);
    int64_t sa[2] = {4, 8}, sb[1] = {8};
    int a = tg_input(&t, CDY_DT_FLOAT32, 2, sa, NULL);
    int b = tg_input(&t, CDY_DT_FLOAT32, 1, sb, NULL);
    int nb = tg_node(&t, CDY_OP_NEG, CDY_DT_FLOAT32, CDY_DT_FLOAT32, b, 0, 0);
    int s = tg_node(&t, CDY_OP_ADD, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, nb, 0);
    tg_output(&t, s);
    tg_output(&t, nb);
    tcompiled tc;
    if (tc_build(&t, 1, &tc, NULL)) {
        CHECK(0, "groups: build failed");
        return;
    }
    CHECK(tc.plan.nkernels == 2, "two kernels expected, got %d", tc.plan.nkernels);
    float x[32], y[8];
    for (int i = 0; i < 32; i++)
        x[i] = (float)i;
    for (int i = 0; i < 8; i++)
        y[i] = (float)(i * i);
    void *in[2] = {x, y};
    tc_run(&tc, in);
    int bad = 0;
    for (int i = 0; i < 32; i++)
        bad += !same_f32(((float *)tc_out(&tc, 0))[i], x[i] + -y[i % 8]);
    for (int i = 0; i < 8; i++)
        bad += !same_f32(((float *)tc_out(&tc, 1))[i], -y[i]);
    CHECK(bad == 0, "groups: %d mismatches", bad);
    tc_free(&tc);
}

/* Unsupported graphs and failing builds return -1 with a message. */
static void test_errors(void)
{
    char err[CDY_ERRLEN], so[512];
    cdy_plan plan;
    tgraph t;
    tg_init(&t);
    int64_t n[1] = {4};
    int a = tg_input(&t, CDY_DT_INT32, 1, n, NULL);
    tg_output(&t, tg_node(&t, CDY_OP_DIV, CDY_DT_INT32, CDY_DT_INT32, a, a, 0));
    CHECK(cdy_codegen(&t.g, 1, 0, &plan, err, sizeof(err)) == -1 && err[0],
          "integer div should fail");
    t.vals[a].meta.dtype = 42;
    CHECK(cdy_codegen(&t.g, 1, 0, &plan, err, sizeof(err)) == -1 && strstr(err, "dtype"),
          "bad dtype: %s", err);
    t.vals[a].meta.dtype = CDY_DT_INT32;
    t.vals[a].meta.ndim = 9;
    CHECK(cdy_codegen(&t.g, 1, 0, &plan, err, sizeof(err)) == -1 && strstr(err, "ndim"),
          "ndim 9: %s", err);
    CHECK(plan.source == NULL && plan.buffers == NULL, "failed plan is empty");

    int hit;
    cdy_cc_opts bad = {"cdy-no-such-compiler-xyz", cache_dir, NULL, NULL};
    CHECK(cdy_cc_build("int x;", &bad, so, sizeof(so), &hit, err, sizeof(err)) == -1 &&
              strstr(err, "not found"), "missing compiler: %s", err);
    cdy_cc_opts good = {"gcc", cache_dir, NULL, NULL};
    CHECK(cdy_cc_build("int f( {", &good, so, sizeof(so), &hit, err, sizeof(err)) == -1 &&
              strstr(err, "C compiler failed (exit"), "syntax error: %s", err);
    cdy_cc_opts ro = {"gcc", "/proc/cdy-cannot-create/x", NULL, NULL};
    CHECK(cdy_cc_build("int y;", &ro, so, sizeof(so), &hit, err, sizeof(err)) == -1 && err[0],
          "unwritable dir should fail");
    cdy_cc_opts extra = {"gcc", cache_dir, "-DCDY_TEST_FLAG=1", NULL};
    CHECK(cdy_cc_build("int z = CDY_TEST_FLAG;", &extra, so, sizeof(so), &hit, err,
                       sizeof(err)) == 0 && hit == 0, "extra flags: %s", err);
}

/* 1 when cache_dir holds a compile part's file ("<key>.<pid>.<n>.tmp.c.<j>.c/.o"). */
static int parts_left(void)
{
    DIR *d = opendir(cache_dir);
    int found = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        found |= strstr(e->d_name, ".tmp.c.") != NULL;
    if (d)
        closedir(d);
    return found;
}

/* A source of many kernels is compiled in parts at once (one per CPU): every
 * kernel and the prologue's helper are in the library and the parts' files
 * are gone; a part that fails fails the build with the compiler's message. */
static void test_parts(void)
{
    static char src[16384];
    char err[CDY_ERRLEN], so[512], name[32];
    int hit, n = snprintf(src, sizeof(src), "static inline int twice(int x) { return 2 * x; }\n");
    for (int k = 0; k < 24; k++)
        n += snprintf(src + n, sizeof(src) - (size_t)n,
                      "\n" CDY_CC_KERNEL_MARK "int kernel_%d(void) { return twice(%d); }\n", k, k);
    cdy_cc_opts opts = {"gcc", cache_dir, NULL, NULL};
    CHECK(cdy_cc_build(src, &opts, so, sizeof(so), &hit, err, sizeof(err)) == 0 && !hit,
          "parts build: %s", err);
    void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    int ok = lib != NULL;
    for (int k = 0; ok && k < 24; k++) {
        snprintf(name, sizeof(name), "kernel_%d", k);
        int (*f)(void) = (int (*)(void))dlsym(lib, name);
        ok = f && f() == 2 * k;
    }
    CHECK(ok, "every kernel of a parts build is in its library");
    if (lib)
        dlclose(lib);
    CHECK(!parts_left(), "a parts build leaves no part files");
    snprintf(src + n, sizeof(src) - (size_t)n, "\n" CDY_CC_KERNEL_MARK "int kernel_x(void) {\n");
    CHECK(cdy_cc_build(src, &opts, so, sizeof(so), &hit, err, sizeof(err)) == -1 &&
              strstr(err, "C compiler failed (exit"), "a failing part: %s", err);
    CHECK(!parts_left(), "a failed parts build leaves no part files");
}

typedef struct {
    int rc;
    char so[512];
} tbuild;

/* Thread body: build one fixed source into the cache. */
static void *build_thread(void *arg)
{
    tbuild *b = arg;
    char err[CDY_ERRLEN];
    int hit;
    cdy_cc_opts opts = {"gcc", cache_dir, NULL, NULL};
    b->rc = cdy_cc_build("int cdy_concurrent(void) { return 42; }\n", &opts, b->so,
                         sizeof(b->so), &hit, err, sizeof(err));
    return NULL;
}

/* Concurrent builds of one source all succeed and yield a loadable .so; a
 * corrupt cached file is rebuilt rather than reported as a hit. */
static void test_concurrent_and_corrupt(void)
{
    pthread_t th[4];
    tbuild b[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, build_thread, &b[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    int ok = 1;
    for (int i = 0; i < 4; i++)
        ok &= b[i].rc == 0 && strcmp(b[i].so, b[0].so) == 0;
    CHECK(ok, "concurrent builds");
    void *lib = dlopen(b[0].so, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib && dlsym(lib, "cdy_concurrent"), "concurrently built .so loads");
    if (lib)
        dlclose(lib);

    unlink(b[0].so);                   /* still mapped (nodelete): replace, never truncate */
    int fd = open(b[0].so, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        CHECK(write(fd, "junk", 4) == 4, "write junk");
        close(fd);
    }
    char err[CDY_ERRLEN], so[512];
    int hit = -1;
    cdy_cc_opts opts = {"gcc", cache_dir, NULL, NULL};
    CHECK(cdy_cc_build("int cdy_concurrent(void) { return 42; }\n", &opts, so, sizeof(so),
                       &hit, err, sizeof(err)) == 0 && hit == 0, "corrupt .so rebuilt: %s", err);
}

/* No temporary files may be left in the cache dir. */
static void check_and_clean_cache(void)
{
    DIR *d = opendir(cache_dir);
    if (!d)
        return;
    struct dirent *e;
    char path[600];
    int tmp = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (strstr(e->d_name, "tmp"))
            tmp++;
        snprintf(path, sizeof(path), "%s/%s", cache_dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    CHECK(tmp == 0, "%d temporary files left in the cache", tmp);
    rmdir(cache_dir);
    char *slash = strrchr(cache_dir, '/');
    for (int i = 0; i < 2 && slash; i++) {
        *slash = 0;
        rmdir(cache_dir);
        slash = strrchr(cache_dir, '/');
    }
}


/* Integer floor_divide / remainder / fmod / trunc division by -3 and by -1
 * (INT64_MIN / -1 wraps as in torch instead of trapping). */
static void test_int_division(void)
{
    static const int ops[4] = {CDY_OP_DIV_FLOOR, CDY_OP_REMAINDER, CDY_OP_FMOD, CDY_OP_DIV_TRUNC};
    tgraph t;
    tg_init(&t);
    int64_t n[1] = {64};
    int a = tg_input(&t, CDY_DT_INT64, 1, n, NULL);
    int m3 = tg_scalar(&t, 0, 0, -3), m1 = tg_scalar(&t, 0, 0, -1);
    for (int k = 0; k < 6; k++)     /* floordiv, remainder, fmod by -3, -1; trunc by -1 */
        tg_output(&t, tg_node(&t, ops[k < 4 ? k / 2 : k == 4 ? 2 : 3], CDY_DT_INT64,
                              CDY_DT_INT64, a, k % 2 || k == 5 ? m1 : m3, 0));
    tcompiled tc;
    if (tc_build(&t, 1, &tc, NULL)) {
        CHECK(0, "int division: build failed");
        return;
    }
    int64_t x[64];
    for (int i = 0; i < 64; i++)
        x[i] = i - 32;
    x[0] = INT64_MIN;
    void *in[1] = {x};
    tc_run(&tc, in);
    int bad = 0;
    for (int i = 0; i < 64; i++) {
        int64_t q = x[i] / -3, r = x[i] % -3;
        int64_t fq = q, pr = r;
        if (r != 0 && r > 0)        /* divisor negative: Python-style results */
            fq = q - 1, pr = r - 3;
        const int64_t *o[6];
        for (int k = 0; k < 6; k++)
            o[k] = tc_out(&tc, k);
        bad += o[0][i] != fq || o[2][i] != pr || o[4][i] != r;
        bad += o[1][i] != (int64_t)(0 - (uint64_t)x[i]) || o[3][i] != 0 ||
               o[5][i] != (int64_t)(0 - (uint64_t)x[i]);
    }
    CHECK(bad == 0, "int division: %d mismatches", bad);
    tc_free(&tc);
}

/* Casts and tests: float32 -> uint8 goes through int32 (-1 -> 255, 300 -> 44),
 * -> int64 truncates, -> bool is != 0; isnan reads the float; masked_fill. */
static void test_casts(void)
{
    tgraph t;
    tg_init(&t);
    int64_t n[1] = {8};
    int a = tg_input(&t, CDY_DT_FLOAT32, 1, n, NULL);
    int nan = tg_node(&t, CDY_OP_ISNAN, CDY_DT_BOOL, CDY_DT_BOOL, a, 0, 0);
    tg_output(&t, tg_node(&t, CDY_OP_TO_BYTE, CDY_DT_UINT8, CDY_DT_UINT8, a, 0, 0));
    tg_output(&t, tg_node(&t, CDY_OP_CAST, CDY_DT_INT64, CDY_DT_INT64, a, 0, 0));
    tg_output(&t, tg_node(&t, CDY_OP_TO_BOOL, CDY_DT_BOOL, CDY_DT_BOOL, a, 0, 0));
    tg_output(&t, nan);
    tg_output(&t, tg_node(&t, CDY_OP_MASKED_FILL, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, nan,
                          tg_scalar(&t, 1, 7.5, 0)));
    tcompiled tc;
    if (tc_build(&t, 1, &tc, NULL)) {
        CHECK(0, "casts: build failed");
        return;
    }
    float x[8] = {-1.0f, 300.0f, -2.5f, 3.7f, NAN, 0.0f, -0.0f, 255.9f};
    static const uint8_t u8[8] = {255, 44, 254, 3, 0, 0, 0, 255};
    static const int64_t i64[8] = {-1, 300, -2, 3, INT64_MIN, 0, 0, 255};
    static const uint8_t b[8] = {1, 1, 1, 1, 1, 0, 0, 1};
    void *in[1] = {x};
    tc_run(&tc, in);
    const uint8_t *o0 = tc_out(&tc, 0), *o2 = tc_out(&tc, 2), *o3 = tc_out(&tc, 3);
    const int64_t *o1 = tc_out(&tc, 1);
    const float *o4 = tc_out(&tc, 4);
    int bad = 0;
    for (int i = 0; i < 8; i++)
        bad += o0[i] != u8[i] || o1[i] != i64[i] || o2[i] != b[i] || o3[i] != (i == 4) ||
               !same_f32(o4[i], i == 4 ? 7.5f : x[i]);
    CHECK(bad == 0, "casts: %d mismatches", bad);
    tc_free(&tc);
}

/* Float32 exp/tanh/erf/sigmoid from the vectorizable prologue: within a few
 * ulp of double libm over [-110, 110], specials exact, and the loop vectorizes. */
static void test_vector_math(void)
{
    static const int ops[4] = {CDY_OP_EXP, CDY_OP_TANH, CDY_OP_ERF, CDY_OP_SIGMOID};
    tgraph t;
    tg_init(&t);
    int64_t n[1] = {1 << 16};
    int a = tg_input(&t, CDY_DT_FLOAT32, 1, n, NULL);
    for (int k = 0; k < 4; k++)
        tg_output(&t, tg_node(&t, ops[k], CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, 0, 0));
    tcompiled tc;
    if (tc_build(&t, 1, &tc, NULL)) {
        CHECK(0, "vector math: build failed");
        return;
    }
    CHECK(strstr(tc.plan.source, "cdy_vexpf(") && strstr(tc.plan.source, "cdy_verff("),
          "vector math: prologue functions used");
    static float x[1 << 16];
    for (int i = 0; i < (1 << 16); i++)
        x[i] = -110.0f + 220.0f * (float)i / (float)(1 << 16);
    const float sp[8] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-30f, 88.8f, -104.5f};
    memcpy(x, sp, sizeof(sp));
    void *in[1] = {x};
    tc_run(&tc, in);
    double worst = 0;
    int bad = 0;
    for (int i = 0; i < (1 << 16); i++) {
        double ref[4] = {exp(x[i]), tanh(x[i]), erf(x[i]), 1 / (1 + exp(-(double)x[i]))};
        for (int k = 0; k < 4; k++) {
            float got = ((const float *)tc_out(&tc, k))[i], want = (float)ref[k];
            if (isnan(want) || isinf(want))
                bad += !(isnan(want) ? isnan(got) : got == want);
            else if (fabsf(want) < 1e-37f)      /* underflow: 0 or a denormal */
                bad += !(fabsf(got - want) <= 1e-37f);
            else if (fabs(got - ref[k]) / fabs(ref[k]) > worst)
                worst = fabs(got - ref[k]) / fabs(ref[k]);
        }
    }
    CHECK(bad == 0, "vector math: %d special values differ", bad);
    CHECK(worst < 3.0e-7, "vector math: max relative error %g (> ~2.5 ulp)", worst);
    tc_free(&tc);
}

/* Add reduction node op of input x over dims mask (keepdim or not); the
 * result's dtype out, contiguous. */
static int tg_reduce(tgraph *t, int op, int out, int x, int64_t mask, int keepdim)
{
    int m = tg_scalar(t, 0, 0, mask);
    int k = tg_scalar(t, 0, 0, keepdim);
    t->vals[k].meta.dtype = CDY_DT_BOOL;
    int v = t->g.nvalues++;
    cdy_value *r = &t->vals[v];
    const cdy_meta *im = &t->vals[x].meta;
    r->kind = CDY_VAL_NODE;
    r->op = op;
    r->nargs = 3;
    r->args[0] = x;
    r->args[1] = m;
    r->args[2] = k;
    r->compute_dtype = out;
    r->meta.dtype = out;
    for (int d = 0; d < im->ndim; d++) {
        if (!((mask >> d) & 1))
            r->meta.sizes[r->meta.ndim++] = im->sizes[d];
        else if (keepdim)
            r->meta.sizes[r->meta.ndim++] = 1;
    }
    contiguous(r->meta.ndim, r->meta.sizes, r->meta.strides);
    return v;
}

/* x - sum(x * x, -1, keepdim) over [64, 1024] (parallel, prologue fused),
 * amax(x, 0) with a NaN column, sum of int32 over all dims -> int64, prod
 * over an empty dim, and a malformed reduction rejected. */
static void test_reductions(void)
{
    enum { R = 64, C = 1024 };
    tgraph t;
    tg_init(&t);
    int64_t sz[2] = {R, C}, isz[2] = {3, 5}, esz[2] = {2, 0};
    int a = tg_input(&t, CDY_DT_FLOAT32, 2, sz, NULL);
    int ia = tg_input(&t, CDY_DT_INT32, 2, isz, NULL);
    int ea = tg_input(&t, CDY_DT_FLOAT64, 2, esz, NULL);
    int sq = tg_node(&t, CDY_OP_MUL, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, a, 0);
    int s = tg_reduce(&t, CDY_OP_SUM, CDY_DT_FLOAT32, sq, 2, 1);
    tg_output(&t, tg_node(&t, CDY_OP_SUB, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, s, 0));
    tg_output(&t, tg_reduce(&t, CDY_OP_AMAX, CDY_DT_FLOAT32, a, 1, 0));
    tg_output(&t, tg_reduce(&t, CDY_OP_SUM, CDY_DT_INT64, ia, 3, 0));
    tg_output(&t, tg_reduce(&t, CDY_OP_PROD, CDY_DT_FLOAT64, ea, 2, 0));
    tcompiled tc;
    if (tc_build(&t, 2, &tc, NULL)) {
        CHECK(0, "reductions: build failed");
        return;
    }
    CHECK(tc.plan.nkernels == 5, "reductions: %d kernels, expected 5", tc.plan.nkernels);
    CHECK(strstr(tc.plan.source, "reduction(+:acc)") != NULL, "reductions: no simd reduction");
    float *x = malloc(sizeof(float) * R * C);
    int32_t xi[15];
    double xe[1] = {0};
    unsigned st = 5;
    for (int i = 0; i < R * C; i++)
        x[i] = rnd(&st);
    x[3 * C + 7] = NAN;
    for (int i = 0; i < 15; i++)
        xi[i] = i % 2 ? 2000000000 : -7;
    void *in[3] = {x, xi, xe};
    tc_run(&tc, in);
    const float *o0 = tc_out(&tc, 0), *o1 = tc_out(&tc, 1);
    const int64_t *o2 = tc_out(&tc, 2);
    const double *o3 = tc_out(&tc, 3);
    int bad = 0;
    for (int r = 0; r < R; r++) {
        double acc = 0;
        for (int cc = 0; cc < C; cc++)
            acc += (double)(x[r * C + cc] * x[r * C + cc]);
        for (int cc = 0; cc < C; cc++) {
            float want = x[r * C + cc] - (float)acc, got = o0[r * C + cc];
            bad += r == 3 ? got == got : fabsf(got - want) > 1e-5f * fabsf(want) + 1e-5f;
        }
    }
    for (int cc = 0; cc < C; cc++) {
        float m = -INFINITY;
        for (int r = 0; r < R; r++)
            m = x[r * C + cc] > m ? x[r * C + cc] : m;
        bad += cc == 7 ? o1[cc] == o1[cc] : !same_f32(o1[cc], m);
    }
    int64_t isum = 0;
    for (int i = 0; i < 15; i++)
        isum += xi[i];
    CHECK(bad == 0, "reductions: %d mismatches", bad);
    CHECK(o2[0] == isum, "reductions: int sum %lld, expected %lld", (long long)o2[0],
          (long long)isum);
    CHECK(o3[0] == 1.0 && o3[1] == 1.0, "reductions: empty prod %g %g", o3[0], o3[1]);
    free(x);
    tc_free(&tc);

    tgraph e;                             /* result sizes that are not the reduction's */
    tg_init(&e);
    int b = tg_input(&e, CDY_DT_FLOAT32, 2, sz, NULL);
    int r = tg_reduce(&e, CDY_OP_SUM, CDY_DT_FLOAT32, b, 1, 0);
    e.vals[r].meta.sizes[0] = 3;
    tg_output(&e, r);
    cdy_plan plan;
    char err[CDY_ERRLEN];
    CHECK(cdy_codegen(&e.g, 1, 0, &plan, err, sizeof(err)) == -1 && strstr(err, "reduction"),
          "reductions: bad sizes accepted (%s)", err);
}

/* torch.max(x, 1) as adjacent amax + argmax nodes sharing one kernel (ties,
 * a NaN row), argmin over dim 0 (an outer reduction, in blocks: ties, a NaN
 * column), var with correction 0 over dim 1, and var of ints rejected. */
static void test_index_reductions(void)
{
    enum { R = 48, C = 200 };
    tgraph t;
    tg_init(&t);
    int64_t sz[2] = {R, C};
    int a = tg_input(&t, CDY_DT_FLOAT32, 2, sz, NULL);
    int mx = tg_reduce(&t, CDY_OP_AMAX, CDY_DT_FLOAT32, a, 2, 0);
    int ix = t.g.nvalues++;
    t.vals[ix] = t.vals[mx];
    t.vals[ix].op = CDY_OP_ARGMAX;
    t.vals[ix].meta.dtype = t.vals[ix].compute_dtype = CDY_DT_INT64;
    tg_output(&t, mx);
    tg_output(&t, ix);
    tg_output(&t, tg_reduce(&t, CDY_OP_ARGMIN, CDY_DT_INT64, a, 1, 0));
    int corr = tg_scalar(&t, 1, 0.0, 0);
    int vr = tg_reduce(&t, CDY_OP_VAR, CDY_DT_FLOAT32, a, 2, 0);
    t.vals[vr].args[3] = corr;
    t.vals[vr].nargs = 4;
    tg_output(&t, vr);
    tcompiled tc;
    if (tc_build(&t, 2, &tc, NULL)) {
        CHECK(0, "index reductions: build failed");
        return;
    }
    CHECK(tc.plan.nkernels == 3, "index reductions: %d kernels, expected 3", tc.plan.nkernels);
    CHECK(strstr(tc.plan.source, "acc_b[") != NULL, "index reductions: no outer block");
    float *x = malloc(sizeof(float) * R * C);
    unsigned st = 9;
    for (int i = 0; i < R * C; i++)
        x[i] = rnd(&st);
    x[5 * C + 10] = x[5 * C + 20] = 100;
    x[7 * C + 30] = x[7 * C + 40] = NAN;
    x[10 * C + 3] = x[20 * C + 3] = -100;
    x[15 * C + 4] = NAN;
    void *in[1] = {x};
    tc_run(&tc, in);
    const float *val = tc_out(&tc, 0), *var = tc_out(&tc, 3);
    const int64_t *idx = tc_out(&tc, 1), *amin = tc_out(&tc, 2);
    int bad = 0;
    for (int r = 0; r < R; r++) {
        int best = 0;
        double sum = 0, m2 = 0;
        for (int cc = 1; cc < C; cc++)
            best = x[r * C + best] != x[r * C + best] ? best
                   : x[r * C + cc] != x[r * C + cc] || x[r * C + cc] > x[r * C + best] ? cc : best;
        for (int cc = 0; cc < C; cc++)
            sum += x[r * C + cc];
        for (int cc = 0; cc < C; cc++)
            m2 += (x[r * C + cc] - sum / C) * (x[r * C + cc] - sum / C);
        bad += idx[r] != best || !(same_f32(val[r], x[r * C + best]) ||
                                   (r == 7 && val[r] != val[r]));
        bad += r == 7 ? var[r] == var[r] : fabsf(var[r] - (float)(m2 / C)) > 1e-5f;
    }
    for (int cc = 0; cc < C; cc++) {
        int best = 0;
        for (int r = 1; r < R; r++)
            best = x[best * C + cc] != x[best * C + cc] ? best
                   : x[r * C + cc] != x[r * C + cc] || x[r * C + cc] < x[best * C + cc] ? r : best;
        bad += amin[cc] != best;
    }
    CHECK(bad == 0, "index reductions: %d mismatches", bad);
    CHECK(idx[5] == 10 && idx[7] == 30 && amin[3] == 10 && amin[4] == 15,
          "index reductions: ties/NaN %lld %lld %lld %lld", (long long)idx[5], (long long)idx[7],
          (long long)amin[3], (long long)amin[4]);
    free(x);
    tc_free(&tc);

    tgraph e;                             /* var of an int input: torch raises */
    tg_init(&e);
    int b = tg_input(&e, CDY_DT_INT32, 2, sz, NULL);
    int c0 = tg_scalar(&e, 1, 1.0, 0);
    int ev = tg_reduce(&e, CDY_OP_VAR, CDY_DT_INT32, b, 1, 0);
    e.vals[ev].args[3] = c0;
    e.vals[ev].nargs = 4;
    tg_output(&e, ev);
    cdy_plan plan;
    char err[CDY_ERRLEN];
    CHECK(cdy_codegen(&e.g, 1, 0, &plan, err, sizeof(err)) == -1 && strstr(err, "dtype"),
          "index reductions: int var accepted (%s)", err);
}

/* A file's prologue holds the helpers its kernels call, with the helpers
 * those call, and no other: names match as whole identifiers only. */
static void test_helpers_chosen(void)
{
    static const struct {
        const char *kernel, *in, *out;
    } cases[] = {
        {"out[i] = in[i] + 1;", "", "static inline"},
        {"t = cdy_verff(x);", "cdy_verff( cdy_vexpf( cdy_vexpm1_core( cdy_fbits(", "cdy_vlogf("},
        {"t = cdy_vgelu_exactf(x);", "cdy_vgelu_exactf( cdy_bitsf(", "gelu_exact( cdy_vexpf("},
        {"t = gelu_exact(x);", "gelu_exact(", "cdy_vgelu_exactf( cdy_fbits("},
        {"t = cdy_iremainder(a, b);", "cdy_iremainder( cdy_ifmod(", "cdy_ifloordiv( cdy_ipow("},
        {"t = cdy_vexp_negf(x);", "cdy_vexp_negf( cdy_scale2n( cdy_vexpm1_core(", "cdy_vexpf("},
        {"t = my_cdy_vlogf(x) + cdy_vlogf_2;", "", "cdy_vlogf("},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cdy_buf b = {0};
        cg_emit_helpers(&b, cases[i].kernel);
        const char *text = b.data ? b.data : "";
        char want[256];
        snprintf(want, sizeof want, "%s", cases[i].in);
        for (char *tok = strtok(want, " "); tok; tok = strtok(NULL, " "))
            CHECK(strstr(text, tok) != NULL, "helpers of '%s': %s missing", cases[i].kernel, tok);
        snprintf(want, sizeof want, "%s", cases[i].out);
        for (char *tok = strtok(want, " "); tok; tok = strtok(NULL, " "))
            CHECK(strstr(text, tok) == NULL, "helpers of '%s': %s not wanted", cases[i].kernel,
                  tok);
        cdy_buf_free(&b);
    }
}

/* Source i of the standby test: the prefix, then one function. */
static char *sb_source(const char *prefix, int i)
{
    size_t n = strlen(prefix) + 256;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s" CDY_CC_KERNEL_MARK "int cdy_sb_%d(void) { return %d; }\n", prefix,
                 i, 40 + i);
    return s;
}

/* Whether library so exports cdy_sb_<i> returning 40 + i. */
static int sb_loads(const char *so, int i)
{
    char name[32];
    snprintf(name, sizeof name, "cdy_sb_%d", i);
    void *lib = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    int (*f)(void) = NULL;
    *(void **)&f = lib ? dlsym(lib, name) : NULL;
    int ok = f && f() == 40 + i;
    if (lib)
        dlclose(lib);
    return ok;
}

/* A standby compiler builds the next source that starts with the prefix
 * (hit 2); a forked child never uses its parent's (it builds the ordinary
 * way), and the parent's is still used after the fork; without a prefix
 * every build is ordinary. */
static void test_standby_fork(void)
{
    const char *prefix = cdy_codegen_prefix();
    cdy_cc_opts opts = {"gcc", cache_dir, NULL, prefix}, off = {"gcc", cache_dir, NULL, NULL};
    char *src[4], so[512], err[CDY_ERRLEN];
    for (int i = 0; i < 4; i++)
        src[i] = sb_source(prefix, i);
    CHECK(prefix && src[0] && src[1] && src[2] && src[3], "standby sources");
    if (!prefix || !src[0] || !src[1] || !src[2] || !src[3])
        goto out;
    int hit = -1;
    cdy_cc_standby(&opts);
    CHECK(cdy_cc_build(src[0], &opts, so, sizeof so, &hit, err, sizeof err) == 0 && hit == 2 &&
          sb_loads(so, 0), "standby build: hit %d %s", hit, err);
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        int h = -1;
        int rc = cdy_cc_build(src[1], &opts, so, sizeof so, &h, err, sizeof err);
        _exit(rc == 0 && h == 0 && sb_loads(so, 1) ? 0 : 1);
    }
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
          WEXITSTATUS(status) == 0, "a forked child builds the ordinary way");
    hit = -1;
    CHECK(cdy_cc_build(src[2], &opts, so, sizeof so, &hit, err, sizeof err) == 0 && hit == 2 &&
          sb_loads(so, 2), "the parent's standby after the fork: hit %d %s", hit, err);
    hit = -1;
    CHECK(cdy_cc_build(src[3], &off, so, sizeof so, &hit, err, sizeof err) == 0 && hit == 0 &&
          sb_loads(so, 3), "no prefix, no standby: hit %d %s", hit, err);
out:
    for (int i = 0; i < 4; i++)
        free(src[i]);
}

/* ---- the kernel IR: fusion and scheduling decisions as data -------------- */

/* Codegen g for nthreads into *plan (no C built); 0, or -1 (CHECK failed). */
static int kir_plan(tgraph *t, int nthreads, cdy_plan *plan, const char *what)
{
    char err[CDY_ERRLEN];
    int rc = cdy_codegen(&t->g, nthreads, 0, plan, err, sizeof(err));
    CHECK(rc == 0, "%s: codegen failed: %s", what, err);
    return rc;
}

/* 1 if step s computes exactly the ops ops[0..n) (in graph order). */
static int kir_fuses(const cdy_kir *s, const tgraph *t, const int *ops, int n)
{
    if (s->nfused != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (t->vals[s->fused[i]].op != ops[i])
            return 0;
    return 1;
}

/* One kernel fuses a chain; its loops coalesce, vectorize and run in
 * parallel, with the whole team (three ops are not a cheap kernel). */
static void test_kir_fused_chain(void)
{
    tgraph t;
    tg_init(&t);
    int64_t sz[2] = {64, 1024};
    int x = tg_input(&t, CDY_DT_FLOAT32, 2, sz, NULL), y = tg_input(&t, CDY_DT_FLOAT32, 2, sz, NULL);
    int m = tg_node(&t, CDY_OP_MUL, CDY_DT_FLOAT32, CDY_DT_FLOAT32, x, y, 0);
    int a = tg_node(&t, CDY_OP_ADD, CDY_DT_FLOAT32, CDY_DT_FLOAT32, m, tg_scalar(&t, 1, 1.0, 0), 0);
    int r = tg_node(&t, CDY_OP_RELU, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, 0, 0);
    tg_output(&t, r);
    cdy_plan p;
    if (kir_plan(&t, 2, &p, "chain"))
        return;
    const int chain[3] = {CDY_OP_MUL, CDY_OP_ADD, CDY_OP_RELU};
    const cdy_kir *s = &p.kir[0];
    CHECK(p.nkir == 1 && s->kind == CDY_KIR_POINTWISE && s->kernel == 0, "chain: one kernel");
    CHECK(kir_fuses(s, &t, chain, 3) && s->nout == 1 && s->outs[0] == r,
          "chain: fuses mul, add, relu and stores relu");
    CHECK(s->nparams == 3 && s->nloops == 1 && s->loops[0] == 65536, "chain: one loop of 64K");
    CHECK(s->parallel && s->threads == 0 && s->vector && !s->stream && !s->serial,
          "chain: parallel on every thread, vectorized");
    cdy_plan_free(&p);
}

/* The parallel rules as data: few elements, a cheap kernel moving few bytes,
 * one thread; a transposed read does not vectorize. */
static void test_kir_parallel_rules(void)
{
    tgraph t;
    tg_init(&t);
    int64_t small[1] = {1000}, big[1] = {65536}, sq[2] = {256, 256}, tst[2] = {1, 256};
    int a = tg_input(&t, CDY_DT_FLOAT32, 1, small, NULL);
    int b = tg_input(&t, CDY_DT_UINT8, 1, big, NULL);
    int c = tg_input(&t, CDY_DT_FLOAT32, 2, sq, tst);
    tg_output(&t, tg_node(&t, CDY_OP_EXP, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, 0, 0));
    tg_output(&t, tg_node(&t, CDY_OP_NEG, CDY_DT_UINT8, CDY_DT_UINT8, b, 0, 0));
    tg_output(&t, tg_node(&t, CDY_OP_SIN, CDY_DT_FLOAT32, CDY_DT_FLOAT32, c, 0, 0));
    cdy_plan p;
    if (kir_plan(&t, 2, &p, "rules"))
        return;
    CHECK(p.nkir == 3, "rules: three kernels (three iteration spaces), got %d", p.nkir);
    if (p.nkir == 3) {
        CHECK(!p.kir[0].parallel && !strcmp(p.kir[0].serial, "elements below the threshold"),
              "rules: 1000 elements run on one thread");
        CHECK(!p.kir[1].parallel && strstr(p.kir[1].serial, "cheap kernel"),
              "rules: a uint8 neg of 64K elements is cheap");
        CHECK(p.kir[2].parallel && !p.kir[2].vector && p.kir[2].nloops == 2,
              "rules: a transposed read runs in parallel, not vectorized");
    }
    cdy_plan_free(&p);
    if (kir_plan(&t, 1, &p, "rules, one thread"))
        return;
    CHECK(p.nkir == 3 && !p.kir[2].parallel &&
          !strcmp(p.kir[2].serial, "generated for 1 thread"), "rules: one thread");
    cdy_plan_free(&p);
}

/* A reduction is a boundary: its pointwise prologue (x * x) is fused into
 * its kernel, and what reads its result is a kernel after it. */
static void test_kir_reduction_boundary(void)
{
    tgraph t;
    tg_init(&t);
    int64_t sz[2] = {64, 1024};
    int a = tg_input(&t, CDY_DT_FLOAT32, 2, sz, NULL);
    int sq = tg_node(&t, CDY_OP_MUL, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, a, 0);
    int s = tg_reduce(&t, CDY_OP_SUM, CDY_DT_FLOAT32, sq, 2, 1);
    int d = tg_node(&t, CDY_OP_SUB, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, s, 0);
    tg_output(&t, d);
    cdy_plan p;
    if (kir_plan(&t, 2, &p, "reduction"))
        return;
    const int red[2] = {CDY_OP_MUL, CDY_OP_SUM}, after[1] = {CDY_OP_SUB};
    CHECK(p.nkir == 2 && p.kir[0].kind == CDY_KIR_REDUCE && p.kir[0].node == s &&
          p.kir[1].kind == CDY_KIR_POINTWISE, "reduction: reduce kernel, then pointwise");
    if (p.nkir == 2) {
        CHECK(kir_fuses(&p.kir[0], &t, red, 2), "reduction: the prologue is fused");
        CHECK(p.kir[0].nloops == 1 && p.kir[0].loops[0] == 64 && p.kir[0].nrloops == 1 &&
              p.kir[0].rloops[0] == 1024 && !(p.kir[0].flags & CDY_KIRF_TWO_PASS),
              "reduction: 64 rows of 1024, one pass");
        CHECK(kir_fuses(&p.kir[1], &t, after, 1) && p.kir[1].outs[0] == d,
              "reduction: the consumer is a kernel of its own");
    }
    cdy_plan_free(&p);
}

/* A column sum of a realized pointwise value (an output too) computes and
 * stores that value in its own pass on one thread: one REDUCE kernel whose
 * outputs are the sum and the value; on two threads (no row split for 1024
 * columns) the value keeps its kernel. */
static void test_kir_sum_stores_producer(void)
{
    tgraph t;
    tg_init(&t);
    int64_t sz[2] = {64, 1024};
    int a = tg_input(&t, CDY_DT_FLOAT32, 2, sz, NULL), b = tg_input(&t, CDY_DT_FLOAT32, 2, sz, NULL);
    int m = tg_node(&t, CDY_OP_MUL, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, b, 0);
    int s = tg_reduce(&t, CDY_OP_SUM, CDY_DT_FLOAT32, m, 1, 0);
    tg_output(&t, m);
    tg_output(&t, s);
    cdy_plan p;
    if (kir_plan(&t, 1, &p, "producer"))
        return;
    CHECK(p.nkir == 1 && p.kir[0].kind == CDY_KIR_REDUCE && p.kir[0].nout == 2 &&
          p.kir[0].outs[0] == s && p.kir[0].outs[1] == m && p.nkernels == 1,
          "producer: one reduce kernel storing the sum and the product");
    cdy_plan_free(&p);
    if (kir_plan(&t, 2, &p, "producer, two threads"))
        return;
    CHECK(p.nkir == 2 && p.kir[0].kind == CDY_KIR_POINTWISE && p.kir[1].kind == CDY_KIR_REDUCE &&
          p.kir[1].nout == 1, "producer, two threads: the product's kernel, then the sum's");
    cdy_plan_free(&p);
}

/* A small value of two ops that a much larger space reads by broadcasting is
 * realized once (a kernel of its own) rather than recomputed per element; an
 * extern node splits the kernels before and after it into separate steps. */
static void test_kir_realize_and_extern(void)
{
    tgraph t;
    tg_init(&t);
    int64_t row[1] = {1024}, sz[2] = {64, 1024};
    int w = tg_input(&t, CDY_DT_FLOAT32, 1, row, NULL), x = tg_input(&t, CDY_DT_FLOAT32, 2, sz, NULL);
    int e = tg_node(&t, CDY_OP_EXP, CDY_DT_FLOAT32, CDY_DT_FLOAT32, w, 0, 0);
    int s = tg_node(&t, CDY_OP_SQRT, CDY_DT_FLOAT32, CDY_DT_FLOAT32, e, 0, 0);
    int y = tg_node(&t, CDY_OP_MUL, CDY_DT_FLOAT32, CDY_DT_FLOAT32, x, s, 0);
    int v = t.g.nvalues++;                 /* an extern reading y */
    t.vals[v] = (cdy_value){.kind = CDY_VAL_NODE, .meta = t.vals[y].meta, .op = CDY_OP_EXTERN,
                            .nargs = 1, .args = {y}, .compute_dtype = CDY_DT_FLOAT32};
    int z = tg_node(&t, CDY_OP_NEG, CDY_DT_FLOAT32, CDY_DT_FLOAT32, v, 0, 0);
    tg_output(&t, z);
    cdy_plan p;
    if (kir_plan(&t, 2, &p, "realize"))
        return;
    const int small[2] = {CDY_OP_EXP, CDY_OP_SQRT}, big[1] = {CDY_OP_MUL};
    CHECK(p.nkir == 4, "realize: 4 steps, got %d", p.nkir);
    if (p.nkir == 4) {
        CHECK(kir_fuses(&p.kir[0], &t, small, 2) && p.kir[0].outs[0] == s,
              "realize: exp, sqrt realized over [1024]");
        CHECK(kir_fuses(&p.kir[1], &t, big, 1), "realize: the product reads it");
        CHECK(p.kir[2].kind == CDY_KIR_EXTERN && p.kir[2].node == v && p.kir[2].kernel < 0,
              "realize: the extern is a step of its own");
        CHECK(p.kir[3].kind == CDY_KIR_POINTWISE && p.kir[3].kernel == 2,
              "realize: the kernel after it");
    }
    cdy_plan_free(&p);
}

/* Kernels with runtime sizes (compiler/symk.c): relu(a * b + 1), a [s0, s1] and b [s2] (s1 == s2), compiled once at 8 x 16 and run at
 * other sizes with the symbols' values as the kernels' last argument. */
static void test_symbolic_sizes(void)
{
    tgraph t;
    tg_init(&t);
    int64_t sa[2] = {8, 16}, sb[1] = {16};
    int a = tg_input(&t, CDY_DT_FLOAT32, 2, sa, NULL);
    int b = tg_input(&t, CDY_DT_FLOAT32, 1, sb, NULL);
    int one = tg_scalar(&t, 1, 1.0, 0);
    int m = tg_node(&t, CDY_OP_MUL, CDY_DT_FLOAT32, CDY_DT_FLOAT32, a, b, 0);
    int ad = tg_node(&t, CDY_OP_ADD, CDY_DT_FLOAT32, CDY_DT_FLOAT32, m, one, 0);
    int r = tg_node(&t, CDY_OP_RELU, CDY_DT_FLOAT32, CDY_DT_FLOAT32, ad, 0, 0);
    tg_output(&t, r);
    unsigned dyn[2] = {3, 1};
    cdy_sym_shapes sh;
    char err[CDY_ERRLEN], so[512];
    CHECK(cdy_sym_infer(&t.g, dyn, NULL, &sh) == 0 && cdy_sym_live(&sh).w[0] == 7, "symbols");
    cdy_plan plan;
    if (cdy_codegen_sym(&t.g, 2, 0, &sh, &plan, err, sizeof(err))) {
        CHECK(0, "symbolic codegen: %s", err);
        cdy_sym_shapes_free(&sh);
        return;
    }
    CHECK(strstr(plan.source, "const int64_t *restrict cdy_s") && strstr(plan.source, "n0"),
          "sizes are parameters");
    CHECK(strstr(plan.source, ">= 32768LL") != NULL, "the parallel rule is a runtime condition");
    cdy_cc_opts opts = {"gcc", cache_dir, NULL, cdy_codegen_prefix()};
    int hit = 0;
    void *lib = cdy_cc_build(plan.source, &opts, so, sizeof(so), &hit, err, sizeof(err)) ? NULL
                : dlopen(so, RTLD_NOW | RTLD_LOCAL);
    void *fn = lib ? dlsym(lib, plan.kernels[0].symbol) : NULL;
    CHECK(fn && plan.nkernels == 1 && plan.kernels[0].nargs == 3, "built: %s", err);
    static const int64_t sizes[][2] = {{8, 16}, {3, 5}, {2, 100}, {300, 257}};
    for (int c = 0; fn && c < 4; c++) {
        int64_t n = sizes[c][0], k = sizes[c][1], sv[3] = {n, k, k};
        float *x = malloc(sizeof(float) * (size_t)(n * k)), *y = malloc(sizeof(float) * (size_t)k);
        float *o = malloc(sizeof(float) * (size_t)(n * k));
        unsigned seed = 3;
        for (int64_t i = 0; i < n * k; i++)
            x[i] = rnd(&seed);
        for (int64_t i = 0; i < k; i++)
            y[i] = rnd(&seed);
        ((void (*)(const float *, const float *, float *, const int64_t *))fn)(x, y, o, sv);
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < k; j++) {
                float v = x[i * k + j] * y[j] + 1.0f;
                bad += !same_f32(o[i * k + j], v < 0 ? 0 : v);
            }
        CHECK(bad == 0, "symbolic kernel at %lld x %lld: %d mismatches", (long long)n,
              (long long)k, bad);
        free(x);
        free(y);
        free(o);
    }
    if (lib)
        dlclose(lib);
    cdy_plan_free(&plan);
    cdy_sym_shapes_free(&sh);
}

int main(void)
{
    char root[] = "/tmp/cdy_test_XXXXXX";
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 2;
    }
    snprintf(cache_dir, sizeof(cache_dir), "%s/cache/sub", root);
    test_contiguous_add();
    test_broadcast();
    test_noncontiguous();
    test_zero_dim_and_math();
    test_uint8_wrap();
    test_bool_and_where();
    test_nan_maximum();
    test_large_parallel(0);
    test_large_parallel(1);
    test_helpers_chosen();
    test_stream_helper(NULL);
    test_stream_helper("-mno-avx");
    test_ints_and_empty();
    test_two_groups();
    test_collapse();
    test_errors();
    test_concurrent_and_corrupt();
    test_standby_fork();
    test_parts();
    test_int_division();
    test_casts();
    test_vector_math();
    test_reductions();
    test_index_reductions();
    test_kir_fused_chain();
    test_kir_parallel_rules();
    test_kir_reduction_boundary();
    test_kir_sum_stores_producer();
    test_kir_realize_and_extern();
    test_symbolic_sizes();
    if (getenv("CDY_TEST_KEEP"))                 /* keep the generated files to read */
        printf("cache kept in %s\n", cache_dir);
    else
        check_and_clean_cache();
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
