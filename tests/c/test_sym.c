/* test_sym.c - the symbolic size expressions and a graph's symbolic shapes
 * (csrc/sym/), without Python. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sym/sym.h"

static int failures, checks;

#define CHECK(c)                                                                  \
    do {                                                                          \
        checks++;                                                                 \
        if (!(c)) {                                                               \
            failures++;                                                           \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
        }                                                                         \
    } while (0)

static const char *txt(const cdy_symtab *t, int e)
{
    static char buf[4][128];
    static int i;
    i = (i + 1) % 4;
    cdy_sym_print(t, e, buf[i], sizeof(buf[i]));
    return buf[i];
}

/* Canonical forms: equal expressions have one id; arithmetic and printing. */
static void test_expr(void)
{
    cdy_symtab t;
    cdy_symtab_init(&t);
    int s0 = cdy_sym_new(&t, 8), s1 = cdy_sym_new(&t, 5);
    int c64 = cdy_sym_const(&t, 64), c3 = cdy_sym_const(&t, 3);
    int a = cdy_sym_add(&t, cdy_sym_mul(&t, s0, c64), c3);
    int b = cdy_sym_add(&t, c3, cdy_sym_mul(&t, c64, s0));
    CHECK(a == b && a >= 0);
    CHECK(!strcmp(txt(&t, a), "3 + 64*s0"));
    CHECK(cdy_sym_eval(&t, a, NULL) == 515);
    int64_t vals[2] = {2, 7};
    CHECK(cdy_sym_eval(&t, a, vals) == 131);
    int p = cdy_sym_mul(&t, s0, s1), q = cdy_sym_mul(&t, s1, s0);
    CHECK(p == q && !strcmp(txt(&t, p), "s0*s1"));
    CHECK(cdy_sym_symbols(&t, p).w[0] == 3 && cdy_sym_symbols(&t, c3).w[0] == 0);
    /* x - x is 0 */
    int neg = cdy_sym_mul(&t, cdy_sym_const(&t, -1), p);
    int64_t c = -1;
    CHECK(cdy_sym_is_const(&t, cdy_sym_add(&t, p, neg), &c) && c == 0);
    /* floor division: exact divides the coefficients, else an atom */
    int e = cdy_sym_floordiv(&t, cdy_sym_mul(&t, s0, c64), 16);
    CHECK(e == cdy_sym_mul(&t, s0, cdy_sym_const(&t, 4)));
    int f = cdy_sym_floordiv(&t, s1, 2);
    CHECK(f >= 0 && f != s1 && cdy_sym_eval(&t, f, NULL) == 2);
    CHECK(f == cdy_sym_floordiv(&t, s1, 2));
    CHECK(!strcmp(txt(&t, f), "((s1) / 2)"));
    /* a floor division is one factor of a product in C: s0*((s1) / 2), not (s0*s1) / 2;
     * a numerator that may be negative rounds down, not toward zero */
    CHECK(!strcmp(txt(&t, cdy_sym_mul(&t, s0, f)), "s0*((s1) / 2)"));
    int fn = cdy_sym_floordiv(&t, cdy_sym_add(&t, s1, cdy_sym_const(&t, -5)), 2);
    CHECK(!strcmp(txt(&t, fn), "(((-5 + s1) >= 0 ? (-5 + s1) : (-5 + s1) - 1) / 2)"));
    CHECK(cdy_sym_eval(&t, f, vals) == 3);
    /* exact division: by a constant, a monomial; not where a term lacks a factor */
    int ps = cdy_sym_mul(&t, p, c64);                          /* 64*s0*s1 */
    CHECK(cdy_sym_div_exact(&t, ps, cdy_sym_mul(&t, s1, cdy_sym_const(&t, 4))) ==
          cdy_sym_mul(&t, s0, cdy_sym_const(&t, 16)));
    CHECK(cdy_sym_div_exact(&t, cdy_sym_add(&t, ps, s0), s0) ==
          cdy_sym_add(&t, cdy_sym_mul(&t, s1, c64), cdy_sym_const(&t, 1)));
    CHECK(cdy_sym_div_exact(&t, a, s0) < 0);                   /* 3 + 64*s0 */
    CHECK(cdy_sym_div_exact(&t, ps, cdy_sym_const(&t, 128)) < 0);
    CHECK(cdy_sym_div_exact(&t, ps, cdy_sym_add(&t, s0, s1)) < 0);
    /* hints substituted */
    int h = cdy_sym_subst_hints(&t, a, &(cdy_sym_mask){{1}});
    CHECK(cdy_sym_is_const(&t, h, &c) && c == 515);
    CHECK(cdy_sym_subst_hints(&t, p, &(cdy_sym_mask){{1}}) == cdy_sym_mul(&t, cdy_sym_const(&t, 8), s1));
    /* overflow is -1, never a wrong coefficient */
    int big = cdy_sym_mul(&t, s0, cdy_sym_const(&t, INT64_MAX / 2));
    CHECK(cdy_sym_mul(&t, big, c3) == -1);
    cdy_symtab_free(&t);
}

typedef struct {
    cdy_graph g;
    cdy_value v[64];
} tg;

static int tg_input(tg *t, int ndim, const int64_t *sizes)
{
    int n = t->g.nvalues++;
    cdy_value *v = &t->v[n];
    memset(v, 0, sizeof(*v));
    v->kind = CDY_VAL_INPUT;
    v->input_index = t->g.ninputs++;
    v->meta.dtype = CDY_DT_FLOAT32;
    v->meta.ndim = ndim;
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        v->meta.sizes[d] = sizes[d];
        v->meta.strides[d] = st;
        st *= sizes[d];
    }
    return n;
}

static int tg_scalar(tg *t, int64_t i)
{
    int n = t->g.nvalues++;
    memset(&t->v[n], 0, sizeof(t->v[n]));
    t->v[n].kind = CDY_VAL_SCALAR;
    t->v[n].meta.dtype = CDY_DT_INT64;
    t->v[n].i = i;
    return n;
}

static int tg_node(tg *t, int op, int ndim, const int64_t *sizes, int nargs, const int *args)
{
    int n = tg_input(t, ndim, sizes);
    t->g.ninputs--;
    cdy_value *v = &t->v[n];
    v->kind = CDY_VAL_NODE;
    v->op = op;
    v->nargs = nargs;
    memcpy(v->args, args, (size_t)nargs * sizeof(int));
    return n;
}

static void tg_init(tg *t)
{
    memset(t, 0, sizeof(*t));
    t->g.values = t->v;
    t->g.cap_values = 64;
}

/* x[B, 64] * w[64] -> sum(dim 1) ; softmax(x) ; cat([x, x], 0): B symbolic. */
static void test_infer_rules(void)
{
    tg t;
    tg_init(&t);
    int x = tg_input(&t, 2, (int64_t[]){8, 64});
    int w = tg_input(&t, 1, (int64_t[]){64});
    int m = tg_node(&t, CDY_OP_MUL, 2, (int64_t[]){8, 64}, 2, (int[]){x, w});
    int mask = tg_scalar(&t, 2), keep = tg_scalar(&t, 0);
    int s = tg_node(&t, CDY_OP_SUM, 1, (int64_t[]){8}, 3, (int[]){m, mask, keep});
    int one = tg_scalar(&t, 1);
    int sm = tg_node(&t, CDY_OP_SOFTMAX, 2, (int64_t[]){8, 64}, 2, (int[]){m, one});
    int zero = tg_scalar(&t, 0);
    int c = tg_node(&t, CDY_OP_CAT, 2, (int64_t[]){16, 64}, 3, (int[]){sm, x, zero});
    unsigned dyn[2] = {3, 1};
    cdy_sym_shapes sh;
    CHECK(cdy_sym_infer(&t.g, dyn, NULL, &sh) == 0);
    CHECK(sh.tab.nsyms == 3);                    /* x's two dims, w's dim */
    CHECK(sh.info[0].input == 0 && sh.info[0].dim == 0 && !sh.info[0].pinned);
    /* x's dim 1 and w's dim 0 broadcast against each other: a relation */
    CHECK(sh.nrel == 1);
    CHECK(!strcmp(txt(&sh.tab, sh.dims[s][0]), "s0"));
    CHECK(!strcmp(txt(&sh.tab, sh.dims[sm][1]), "s1"));
    CHECK(!strcmp(txt(&sh.tab, sh.dims[c][0]), "2*s0"));
    CHECK(cdy_sym_live(&sh).w[0] == 7 && sh.runs == 1);
    cdy_sym_shapes_free(&sh);
    /* a pin (the trace read x.shape[0]) specializes s0, and only it */
    cdy_sym_pin pin = {x, 1, "x.shape read"};
    cdy_sym_hints h = {&pin, 1, NULL, NULL, 0, NULL, 0, NULL, 0, NULL, NULL, 0, NULL};
    CHECK(cdy_sym_infer(&t.g, dyn, &h, &sh) == 0);
    CHECK(sh.info[0].pinned && strstr(sh.info[0].why, "x.shape read"));
    CHECK(!strcmp(txt(&sh.tab, sh.dims[c][0]), "16"));
    CHECK(cdy_sym_live(&sh).w[0] == 6 && sh.runs == 2);
    cdy_sym_shapes_free(&sh);
    /* no dyn: nothing symbolic */
    CHECK(cdy_sym_infer(&t.g, NULL, NULL, &sh) == 0 && sh.tab.nsyms == 0);
    cdy_sym_shapes_free(&sh);
}

/* An op without a rule (an extern) and a layer_norm specialize what they read. */
static void test_infer_specializes(void)
{
    tg t;
    tg_init(&t);
    int x = tg_input(&t, 2, (int64_t[]){8, 32});
    int y = tg_input(&t, 2, (int64_t[]){4, 6});
    int e = tg_node(&t, CDY_OP_EXTERN, 2, (int64_t[]){4, 6}, 1, (int[]){y});
    int none = tg_scalar(&t, 0), eps = tg_scalar(&t, 0), nn = tg_scalar(&t, 1);
    int ln = tg_node(&t, CDY_OP_LAYER_NORM, 2, (int64_t[]){8, 32}, 5,
                     (int[]){x, none, none, eps, nn});
    /* a wrong meta (the rule says 8, the meta 9): specializes, never guesses */
    int bad = tg_node(&t, CDY_OP_RELU, 2, (int64_t[]){9, 32}, 1, (int[]){ln});
    unsigned dyn[2] = {3, 3};
    cdy_sym_shapes sh;
    CHECK(cdy_sym_infer(&t.g, dyn, NULL, &sh) == 0);
    CHECK(sh.tab.nsyms == 4);
    CHECK(sh.info[1].pinned && strstr(sh.info[1].why, "normalized_shape"));
    CHECK(sh.info[2].pinned && sh.info[3].pinned && strstr(sh.info[2].why, "extern"));
    CHECK(sh.info[0].pinned && strstr(sh.info[0].why, "disagrees"));
    CHECK(cdy_sym_live(&sh).w[0] == 0);
    (void)e;
    (void)bad;
    cdy_sym_shapes_free(&sh);
}

/* x[B, 32] @ w[32, 16] (mm) then linear(., W[8, 16], b[8]) and bmm: B symbolic,
 * the inner sizes a relation (both symbolic) or a specialization (a constant). */
static void test_infer_matmul(void)
{
    tg t;
    tg_init(&t);
    int x = tg_input(&t, 2, (int64_t[]){6, 32});
    int w = tg_input(&t, 2, (int64_t[]){32, 16});
    int W = tg_input(&t, 2, (int64_t[]){8, 16});
    int b = tg_input(&t, 1, (int64_t[]){8});
    int mm = tg_node(&t, CDY_OP_EXTERN, 2, (int64_t[]){6, 16}, 2, (int[]){x, w});
    int li = tg_node(&t, CDY_OP_EXTERN, 2, (int64_t[]){6, 8}, 3, (int[]){mm, W, b});
    int q = tg_input(&t, 3, (int64_t[]){3, 6, 4});
    int k = tg_input(&t, 3, (int64_t[]){3, 4, 6});
    int bm = tg_node(&t, CDY_OP_EXTERN, 3, (int64_t[]){3, 6, 6}, 2, (int[]){q, k});
    char ext[16] = {0};
    ext[mm] = 'm';
    ext[li] = 'l';
    ext[bm] = 'm';
    unsigned dyn[6] = {3, 3, 0, 0, 7, 7};
    cdy_sym_shapes sh;
    cdy_sym_hints h = {NULL, 0, ext, NULL, 0, NULL, 0, NULL, 0, NULL, NULL, 0, NULL};
    CHECK(cdy_sym_infer(&t.g, dyn, &h, &sh) == 0);
    CHECK(!strcmp(txt(&sh.tab, sh.dims[li][0]), "s0") && !strcmp(txt(&sh.tab, sh.dims[li][1]), "8"));
    /* w's dim 1 (16) meets W's static 16: specialized; x's 32 and w's 32 a relation */
    CHECK(!sh.info[0].pinned && !sh.info[1].pinned && !sh.info[2].pinned && sh.info[3].pinned);
    CHECK(!strcmp(txt(&sh.tab, sh.dims[bm][0]), "s4") && !strcmp(txt(&sh.tab, sh.dims[bm][2]), "s9"));
    CHECK(sh.nrel == 3);    /* s1 == s2, s4 == s7 (batch), s6 == s8 (inner); s5, s9 free */
    cdy_sym_shapes_free(&sh);
    /* without the kinds, the externs specialize everything they read */
    CHECK(cdy_sym_infer(&t.g, dyn, NULL, &sh) == 0 && cdy_sym_live(&sh).w[0] == 0);
    cdy_sym_shapes_free(&sh);
}

static cdy_meta meta_of(int ndim, const int64_t *sizes)
{
    cdy_meta m = {0};
    m.dtype = CDY_DT_FLOAT32;
    m.ndim = ndim;
    int64_t st = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        m.sizes[d] = sizes[d];
        m.strides[d] = st;
        st *= sizes[d];
    }
    return m;
}

/* x[B, H] + b[H] with everything symbolic: B free, H == b's dim a relation;
 * the guards accept other sizes that keep it, and say why they reject. */
static void test_guards(void)
{
    tg t;
    tg_init(&t);
    int x = tg_input(&t, 2, (int64_t[]){8, 16});
    int b = tg_input(&t, 1, (int64_t[]){16});
    int y = tg_input(&t, 2, (int64_t[]){1, 3});   /* static: sizes 1 and a pinned 3 */
    tg_node(&t, CDY_OP_ADD, 2, (int64_t[]){8, 16}, 2, (int[]){x, b});
    cdy_sym_pin pin = {y, 2, "read"};
    cdy_sym_hints h = {&pin, 1, NULL, NULL, 0, NULL, 0, NULL, 0, NULL, NULL, 0, NULL};
    unsigned dyn[3] = {3, 1, 3};
    cdy_sym_shapes sh;
    CHECK(cdy_sym_infer(&t.g, dyn, &h, &sh) == 0 && sh.nrel == 1 && sh.tab.nsyms == 4);
    const char *names[3] = {"x", "b", "y"};
    int64_t vals[4];
    char why[256] = "";
    cdy_meta a[3] = {meta_of(2, (int64_t[]){64, 7}), meta_of(1, (int64_t[]){7}),
                     meta_of(2, (int64_t[]){1, 3})};
    CHECK(cdy_sym_guard(&sh, &t.g, a, names, vals, why, sizeof(why)) == 0);
    CHECK(vals[0] == 64 && vals[1] == 7 && vals[2] == 7 && vals[3] == 3);
    a[1] = meta_of(1, (int64_t[]){5});
    CHECK(cdy_sym_guard(&sh, &t.g, a, names, vals, why, sizeof(why)) == 1);
    CHECK(!strcmp(why, "relation s1 == s2 does not hold: 7 != 5"));
    a[1] = meta_of(1, (int64_t[]){7});
    a[0] = meta_of(2, (int64_t[]){1, 7});
    CHECK(cdy_sym_guard(&sh, &t.g, a, names, vals, why, sizeof(why)) == 1);
    CHECK(!strcmp(why, "dimension 0 of 'x' is 1: sizes 0 and 1 are not symbolic"));
    a[0] = meta_of(2, (int64_t[]){4, 7});
    a[0].strides[0] = 1;
    a[0].strides[1] = 4;
    CHECK(cdy_sym_guard(&sh, &t.g, a, names, vals, why, sizeof(why)) == 1);
    CHECK(strstr(why, "'x' does not have its example's layout") != NULL);
    a[0] = meta_of(2, (int64_t[]){4, 7});
    a[2] = meta_of(2, (int64_t[]){1, 4});
    CHECK(cdy_sym_guard(&sh, &t.g, a, names, vals, why, sizeof(why)) == 1);
    CHECK(!strcmp(why, "tensor 'y' size mismatch at index 1. expected 3, actual 4"));
    cdy_sym_shapes_free(&sh);
}

/* Comparisons decided by the symbols' range (>= 2): 1 always, 0 never, -1 open. */
static void test_cmp_decided(void)
{
    enum { LT, LE, EQ, NE, GT, GE };
    cdy_symtab t;
    cdy_symtab_init(&t);
    int s0 = cdy_sym_new(&t, 8), s1 = cdy_sym_new(&t, 5);
    int m1 = cdy_sym_const(&t, -1), m3 = cdy_sym_const(&t, -3);
    CHECK(cdy_sym_cmp_decided(&t, cdy_sym_add(&t, s0, m1), GT) == 1);     /* s0 > 1 */
    CHECK(cdy_sym_cmp_decided(&t, s0, EQ) == 0 && cdy_sym_cmp_decided(&t, s0, NE) == 1);
    CHECK(cdy_sym_cmp_decided(&t, s0, LE) == 0 && cdy_sym_cmp_decided(&t, s0, LT) == 0);
    CHECK(cdy_sym_cmp_decided(&t, cdy_sym_add(&t, s0, m3), GT) == -1);    /* s0 > 3 */
    CHECK(cdy_sym_cmp_decided(&t, cdy_sym_add(&t, s0, cdy_sym_mul(&t, s1, m1)), GE) == -1);
    /* s0*s1 - 2*s1 = s1 * (s0 - 2) >= 0, by the shift s -> s + 2 */
    int e = cdy_sym_add(&t, cdy_sym_mul(&t, s0, s1), cdy_sym_mul(&t, s1, cdy_sym_const(&t, -2)));
    CHECK(cdy_sym_cmp_decided(&t, e, GE) == 1 && cdy_sym_cmp_decided(&t, e, GT) == -1);
    CHECK(cdy_sym_cmp_decided(&t, cdy_sym_mul(&t, e, m1), GT) == 0);      /* -e > 0 */
    /* floor(s0 / 2) >= 1 by the interval bound; 7 - s0 both ways */
    CHECK(cdy_sym_cmp_decided(&t, cdy_sym_add(&t, cdy_sym_floordiv(&t, s0, 2), m1), GE) == 1);
    CHECK(cdy_sym_cmp_decided(&t, cdy_sym_add(&t, cdy_sym_const(&t, 7), cdy_sym_mul(&t, s0, m1)),
                              LT) == -1);
    CHECK(cdy_sym_cmp_decided(&t, cdy_sym_const(&t, 0), EQ) == 1);
    CHECK(cdy_sym_cmp_holds(-1, LT) && !cdy_sym_cmp_holds(0, LT) && cdy_sym_cmp_holds(0, GE));
    cdy_symtab_free(&t);
}

/* Symbols past 64 (a deep model's KV cache: two per layer): masks of more
 * than one word, substitution of a high symbol's hint. */
static void test_many_symbols(void)
{
    cdy_symtab t;
    cdy_symtab_init(&t);
    int s3 = -1, s100 = -1, s200 = -1;
    for (int k = 0; k < 201; k++) {
        int e = cdy_sym_new(&t, 2 + k);
        s3 = k == 3 ? e : s3;
        s100 = k == 100 ? e : s100;
        s200 = k == 200 ? e : s200;
    }
    CHECK(t.nsyms == 201 && s3 >= 0 && s100 >= 0 && s200 >= 0);
    int e = cdy_sym_add(&t, cdy_sym_mul(&t, s100, s200), s3);   /* s100*s200 + s3 */
    cdy_sym_mask m = cdy_sym_symbols(&t, e), only100 = {{0}};
    CHECK(cdy_sym_mask_count(&m) == 3 && cdy_sym_mask_has(&m, 100) && cdy_sym_mask_has(&m, 200) &&
          cdy_sym_mask_has(&m, 3) && !cdy_sym_mask_has(&m, 64) && m.w[0] == 8);
    cdy_sym_mask_set(&only100, 100);
    CHECK(cdy_sym_mask_meets(&m, &only100));
    int h = cdy_sym_subst_hints(&t, e, &only100);                /* 102*s200 + s3 */
    CHECK(h == cdy_sym_add(&t, cdy_sym_mul(&t, cdy_sym_const(&t, 102), s200), s3));
    int64_t vals[CDY_SYM_MAX_SYMS];
    for (int k = 0; k < t.nsyms; k++)
        vals[k] = t.hint[k];
    CHECK(cdy_sym_eval(&t, e, vals) == 102 * 202 + 5);
    cdy_symtab_free(&t);
}

/* cdy_strides_follow: a slice of a wider buffer keeps its gap, dense dims follow the
 * sizes, a transposed example's order holds (issue 32's non-contiguous inputs). */
static void test_strides_follow(void)
{
    cdy_meta m = meta_of(2, (int64_t[]){3, 5});
    m.strides[0] = 512;                                   /* buf[:, :5] of a (3, 512) */
    CHECK(cdy_strides_follow(&m, 2, (int64_t[]){3, 9}, (int64_t[]){512, 1}));
    CHECK(!cdy_strides_follow(&m, 2, (int64_t[]){3, 512}, (int64_t[]){512, 1}));  /* no gap */
    CHECK(!cdy_strides_follow(&m, 2, (int64_t[]){3, 9}, (int64_t[]){9, 1}));
    CHECK(!cdy_strides_follow(&m, 2, (int64_t[]){3, 600}, (int64_t[]){512, 1}));  /* overlaps */
    cdy_meta t = meta_of(2, (int64_t[]){4, 6});
    t.strides[0] = 1;                                     /* randn(6, 4).t() */
    t.strides[1] = 4;
    CHECK(cdy_strides_follow(&t, 2, (int64_t[]){7, 6}, (int64_t[]){1, 7}));
    CHECK(!cdy_strides_follow(&t, 2, (int64_t[]){7, 6}, (int64_t[]){6, 1}));
    cdy_meta e = meta_of(2, (int64_t[]){4, 6});
    e.strides[0] = 0;                                     /* an expand overlaps */
    int order[CDY_MAX_NDIM];
    CHECK(cdy_meta_layout_order(&e, order) < 0);
    CHECK(cdy_meta_layout_order(&m, order) == 2 && order[0] == 0 && order[1] == 1);
}

int main(void)
{
    test_many_symbols();
    test_guards();
    test_infer_matmul();
    test_expr();
    test_cmp_decided();
    test_infer_rules();
    test_infer_specializes();
    test_strides_follow();
    printf("test_sym: %d checks, %d failures\n", checks, failures);
    return failures != 0;
}
