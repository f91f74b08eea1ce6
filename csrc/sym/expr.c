/* sym/expr.c - symbolic size expressions: canonical polynomials over atoms
 * (symbols and floor divisions by constants), interned in a cdy_symtab. */
#include "sym/sym.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cdy_symtab_init(cdy_symtab *tab)
{
    memset(tab, 0, sizeof(*tab));
}

void cdy_symtab_free(cdy_symtab *tab)
{
    free(tab->exprs);
    memset(tab, 0, sizeof(*tab));
}

/* -1, 0, 1 as term a orders before, with, after term b (factors only). */
static int sx_term_cmp(const cdy_sym_term *a, const cdy_sym_term *b)
{
    if (a->nf != b->nf)
        return a->nf < b->nf ? -1 : 1;
    for (int i = 0; i < a->nf; i++)
        if (a->f[i] != b->f[i])
            return a->f[i] < b->f[i] ? -1 : 1;
    return 0;
}

/* Sort the n terms t, merge equal ones, drop zeros: the count left, or -1
 * on overflow. */
static int sx_normalize(cdy_sym_term *t, int nt)
{
    for (int i = 1; i < nt; i++)
        for (int j = i; j > 0 && sx_term_cmp(&t[j - 1], &t[j]) > 0; j--) {
            cdy_sym_term tmp = t[j];
            t[j] = t[j - 1];
            t[j - 1] = tmp;
        }
    int n = 0;
    for (int i = 0; i < nt; i++) {
        if (n && sx_term_cmp(&t[n - 1], &t[i]) == 0) {
            if (__builtin_add_overflow(t[n - 1].coef, t[i].coef, &t[n - 1].coef))
                return -1;
        } else {
            t[n++] = t[i];
        }
        if (t[n - 1].coef == 0)
            n--;
    }
    return n;
}

/* The id of the polynomial of the n terms t (normalized here), or -1. */
static int sx_intern_terms(cdy_symtab *tab, cdy_sym_term *t, int n);

/* 1 if a and b are the same canonical polynomial. */
static int sx_equal(const cdy_sym_poly *a, const cdy_sym_poly *b)
{
    if (a->nt != b->nt)
        return 0;
    for (int i = 0; i < a->nt; i++)
        if (a->t[i].coef != b->t[i].coef || sx_term_cmp(&a->t[i], &b->t[i]))
            return 0;
    return 1;
}

/* The id of canonical p (added when new), or -1. */
static int sx_intern(cdy_symtab *tab, const cdy_sym_poly *p)
{
    for (int i = 0; i < tab->nexprs; i++)
        if (sx_equal(&tab->exprs[i], p))
            return i;
    if (tab->nexprs == tab->cap) {
        int cap = tab->cap ? 2 * tab->cap : 64;
        cdy_sym_poly *e = realloc(tab->exprs, (size_t)cap * sizeof(*e));
        if (!e)
            return -1;
        tab->exprs = e;
        tab->cap = cap;
    }
    tab->exprs[tab->nexprs] = *p;
    return tab->nexprs++;
}

static int sx_intern_terms(cdy_symtab *tab, cdy_sym_term *t, int n)
{
    n = sx_normalize(t, n);
    if (n < 0 || n > CDY_SYM_MAX_TERMS)
        return -1;
    cdy_sym_poly p = {0};
    p.nt = n;
    memcpy(p.t, t, (size_t)n * sizeof(p.t[0]));
    return sx_intern(tab, &p);
}

/* The expression of atom a alone. */
static int sx_atom_expr(cdy_symtab *tab, int a)
{
    cdy_sym_poly p = {0};
    p.nt = 1;
    p.t[0].coef = 1;
    p.t[0].nf = 1;
    p.t[0].f[0] = a;
    return sx_intern(tab, &p);
}

int cdy_sym_new(cdy_symtab *tab, int64_t hint)
{
    if (tab->nsyms == CDY_SYM_MAX_SYMS || tab->natoms == CDY_SYM_MAX_ATOMS)
        return -1;
    int k = tab->nsyms++;
    tab->hint[k] = hint;
    tab->atoms[tab->natoms] = (cdy_sym_atom){-1, k, 0};
    return sx_atom_expr(tab, tab->natoms++);
}

int cdy_sym_var(cdy_symtab *tab, int k)
{
    for (int a = 0; a < tab->natoms; a++)
        if (tab->atoms[a].expr < 0 && tab->atoms[a].sym == k)
            return sx_atom_expr(tab, a);
    return -1;
}

int cdy_sym_const(cdy_symtab *tab, int64_t c)
{
    cdy_sym_poly p = {0};
    if (c) {
        p.nt = 1;
        p.t[0].coef = c;
    }
    return sx_intern(tab, &p);
}

int cdy_sym_add(cdy_symtab *tab, int a, int b)
{
    if (a < 0 || b < 0)
        return -1;
    const cdy_sym_poly *x = &tab->exprs[a], *y = &tab->exprs[b];
    cdy_sym_term t[2 * CDY_SYM_MAX_TERMS];
    memcpy(t, x->t, (size_t)x->nt * sizeof(t[0]));
    memcpy(t + x->nt, y->t, (size_t)y->nt * sizeof(t[0]));
    return sx_intern_terms(tab, t, x->nt + y->nt);
}

/* The product of terms a and b into *r; 0, or -1 (overflow, too many factors). */
static int sx_term_mul(const cdy_sym_term *a, const cdy_sym_term *b, cdy_sym_term *r)
{
    if (a->nf + b->nf > CDY_SYM_MAX_FACTORS || __builtin_mul_overflow(a->coef, b->coef, &r->coef))
        return -1;
    int i = 0, j = 0;
    r->nf = 0;
    while (i < a->nf || j < b->nf)
        r->f[r->nf++] = j >= b->nf || (i < a->nf && a->f[i] <= b->f[j]) ? a->f[i++] : b->f[j++];
    return 0;
}

int cdy_sym_mul(cdy_symtab *tab, int a, int b)
{
    if (a < 0 || b < 0)
        return -1;
    const cdy_sym_poly *x = &tab->exprs[a], *y = &tab->exprs[b];
    cdy_sym_term t[CDY_SYM_MAX_TERMS * CDY_SYM_MAX_TERMS];
    int n = 0;
    for (int i = 0; i < x->nt; i++)
        for (int j = 0; j < y->nt; j++)
            if (sx_term_mul(&x->t[i], &y->t[j], &t[n++]))
                return -1;
    return sx_intern_terms(tab, t, n);
}

/* floor(a / c) of integers, c > 0. */
static int64_t sx_floordiv(int64_t a, int64_t c)
{
    int64_t q = a / c;
    return (a % c != 0 && a < 0) ? q - 1 : q;
}

int cdy_sym_floordiv(cdy_symtab *tab, int a, int64_t c)
{
    if (a < 0 || c <= 0)
        return -1;
    if (c == 1)
        return a;
    cdy_sym_poly p = tab->exprs[a];
    int64_t k;
    if (cdy_sym_is_const(tab, a, &k))
        return cdy_sym_const(tab, sx_floordiv(k, c));
    int exact = 1;
    for (int i = 0; i < p.nt; i++)
        exact &= p.t[i].coef % c == 0;
    if (exact) {
        for (int i = 0; i < p.nt; i++)
            p.t[i].coef /= c;
        return sx_intern(tab, &p);
    }
    for (int i = 0; i < tab->natoms; i++)
        if (tab->atoms[i].expr == a && tab->atoms[i].div == c)
            return sx_atom_expr(tab, i);
    if (tab->natoms == CDY_SYM_MAX_ATOMS)
        return -1;
    tab->atoms[tab->natoms] = (cdy_sym_atom){a, -1, c};
    return sx_atom_expr(tab, tab->natoms++);
}

int cdy_sym_is_const(const cdy_symtab *tab, int e, int64_t *c)
{
    const cdy_sym_poly *p = &tab->exprs[e];
    if (p->nt > 1 || (p->nt == 1 && p->t[0].nf))
        return 0;
    *c = p->nt ? p->t[0].coef : 0;
    return 1;
}

/* The value of atom a with the symbols' values vals (NULL: hints). */
static int64_t sx_atom_eval(const cdy_symtab *tab, int a, const int64_t *vals)
{
    const cdy_sym_atom *at = &tab->atoms[a];
    if (at->expr < 0)
        return vals ? vals[at->sym] : tab->hint[at->sym];
    return sx_floordiv(cdy_sym_eval(tab, at->expr, vals), at->div);
}

int64_t cdy_sym_eval(const cdy_symtab *tab, int e, const int64_t *vals)
{
    const cdy_sym_poly *p = &tab->exprs[e];
    int64_t r = 0;
    for (int i = 0; i < p->nt; i++) {
        int64_t t = p->t[i].coef;
        for (int f = 0; f < p->t[i].nf; f++)
            t *= sx_atom_eval(tab, p->t[i].f[f], vals);
        r += t;
    }
    return r;
}

/* Bounds of expression e over symbols >= 2: lo / hi, each finite or not
 * (*lo_inf: -inf, *hi_inf: +inf); doubles, so magnitudes past 2^52 count
 * as unknown (both infinite). */
static void sx_bounds(const cdy_symtab *tab, int e, double *lo, int *lo_inf, double *hi,
                      int *hi_inf, int depth);

/* The least value of atom a over symbols >= 2, or 0 with *inf (unbounded below). */
static double sx_atom_min(const cdy_symtab *tab, int a, int *inf, int depth)
{
    const cdy_sym_atom *at = &tab->atoms[a];
    *inf = 0;
    if (at->expr < 0)
        return 2.0;
    double lo, hi;
    int li, hinf;
    if (depth > 8) {
        *inf = 1;
        return 0;
    }
    sx_bounds(tab, at->expr, &lo, &li, &hi, &hinf, depth + 1);
    *inf = li;
    return li ? 0 : __builtin_floor(lo / (double)at->div);
}

static void sx_bounds(const cdy_symtab *tab, int e, double *lo, int *lo_inf, double *hi,
                      int *hi_inf, int depth)
{
    const cdy_sym_poly *p = &tab->exprs[e];
    *lo = *hi = 0;
    *lo_inf = *hi_inf = 0;
    for (int i = 0; i < p->nt; i++) {
        double m = (double)p->t[i].coef;
        int neg_atom = 0;
        for (int f = 0; f < p->t[i].nf; f++) {
            int inf;
            double a = sx_atom_min(tab, p->t[i].f[f], &inf, depth);
            neg_atom |= inf || a < 0;
            m *= a;
        }
        if (p->t[i].nf == 0) {            /* the constant */
            *lo += m;
            *hi += m;
        } else if (neg_atom) {            /* a factor that may be negative */
            *lo_inf = *hi_inf = 1;
        } else if (p->t[i].coef > 0) {    /* grows without bound, from m */
            *lo += m;
            *hi_inf = 1;
        } else {
            *hi += m;
            *lo_inf = 1;
        }
    }
    if (__builtin_fabs(*lo) > 4e15 || __builtin_fabs(*hi) > 4e15)
        *lo_inf = *hi_inf = 1;
}

int cdy_sym_cmp_holds(int64_t x, int op)
{
    switch (op) {
    case 0: return x < 0;     /* Py_LT */
    case 1: return x <= 0;    /* Py_LE */
    case 2: return x == 0;    /* Py_EQ */
    case 3: return x != 0;    /* Py_NE */
    case 4: return x > 0;     /* Py_GT */
    default: return x >= 0;   /* Py_GE */
    }
}

/* e with each symbol s replaced by s + 2 (so its symbols range over >= 0),
 * or -1 (a floor-division atom, or no room). */
static int sx_shift2(cdy_symtab *tab, int e)
{
    const cdy_sym_poly p = tab->exprs[e];   /* a copy: the table may grow */
    int r = cdy_sym_const(tab, 0), two = cdy_sym_const(tab, 2);
    for (int i = 0; i < p.nt && r >= 0; i++) {
        int term = cdy_sym_const(tab, p.t[i].coef);
        for (int f = 0; f < p.t[i].nf && term >= 0; f++) {
            const cdy_sym_atom *a = &tab->atoms[p.t[i].f[f]];
            if (a->expr >= 0)
                return -1;
            term = cdy_sym_mul(tab, term, cdy_sym_add(tab, cdy_sym_var(tab, a->sym), two));
        }
        r = term < 0 ? -1 : cdy_sym_add(tab, r, term);
    }
    return r;
}

/* Bounds of e by its shifted form (sx_shift2): a polynomial over symbols
 * >= 0 whose non-constant coefficients all have one sign is bounded by its
 * constant on that side; 0, or -1 (undecided). */
static int sx_shift_bounds(cdy_symtab *tab, int e, double *lo, int *lo_inf, double *hi,
                           int *hi_inf)
{
    int f = sx_shift2(tab, e);
    if (f < 0)
        return -1;
    const cdy_sym_poly *p = &tab->exprs[f];
    int pos = 0, neg = 0;
    double k = 0;
    for (int i = 0; i < p->nt; i++) {
        if (p->t[i].nf == 0)
            k = (double)p->t[i].coef;
        else if (p->t[i].coef > 0)
            pos = 1;
        else
            neg = 1;
    }
    if (pos && neg)
        return -1;
    *lo = *hi = k;
    *lo_inf = neg;
    *hi_inf = pos;
    return 0;
}

int cdy_sym_cmp_decided(cdy_symtab *tab, int e, int op)
{
    double lo, hi;
    int li, hinf;
    int64_t c;
    if (cdy_sym_is_const(tab, e, &c))
        return cdy_sym_cmp_holds(c, op);
    if (sx_shift_bounds(tab, e, &lo, &li, &hi, &hinf))
        sx_bounds(tab, e, &lo, &li, &hi, &hinf, 0);
    int pos = !li && lo > 0, nonneg = !li && lo >= 0;     /* e > 0 / e >= 0 everywhere */
    int negv = !hinf && hi < 0, nonpos = !hinf && hi <= 0;
    switch (op) {
    case 0: return negv ? 1 : nonneg ? 0 : -1;
    case 1: return nonpos ? 1 : pos ? 0 : -1;
    case 2: return pos || negv ? 0 : -1;
    case 3: return pos || negv ? 1 : -1;
    case 4: return pos ? 1 : nonpos ? 0 : -1;
    default: return nonneg ? 1 : negv ? 0 : -1;
    }
}

/* The symbols atom a reads. */
static void sx_atom_symbols(const cdy_symtab *tab, int a, cdy_sym_mask *m)
{
    const cdy_sym_atom *at = &tab->atoms[a];
    if (at->expr < 0) {
        cdy_sym_mask_set(m, at->sym);
        return;
    }
    cdy_sym_mask o = cdy_sym_symbols(tab, at->expr);
    cdy_sym_mask_or(m, &o);
}

cdy_sym_mask cdy_sym_symbols(const cdy_symtab *tab, int e)
{
    const cdy_sym_poly *p = &tab->exprs[e];
    cdy_sym_mask m = {{0}};
    for (int i = 0; i < p->nt; i++)
        for (int f = 0; f < p->t[i].nf; f++)
            sx_atom_symbols(tab, p->t[i].f[f], &m);
    return m;
}

/* Atom a with the symbols of mask replaced by their hints: an id, or -1. */
static int sx_atom_subst(cdy_symtab *tab, int a, const cdy_sym_mask *mask)
{
    cdy_sym_atom at = tab->atoms[a];
    if (at.expr < 0)
        return cdy_sym_mask_has(mask, at.sym) ? cdy_sym_const(tab, tab->hint[at.sym])
                                              : sx_atom_expr(tab, a);
    return cdy_sym_floordiv(tab, cdy_sym_subst_hints(tab, at.expr, mask), at.div);
}

int cdy_sym_subst_hints(cdy_symtab *tab, int e, const cdy_sym_mask *mask)
{
    if (e < 0)
        return e;
    cdy_sym_mask reads = cdy_sym_symbols(tab, e);
    if (!cdy_sym_mask_meets(&reads, mask))
        return e;
    cdy_sym_poly p = tab->exprs[e];   /* a copy: interning may move the table */
    int r = cdy_sym_const(tab, 0);
    for (int i = 0; i < p.nt && r >= 0; i++) {
        int t = cdy_sym_const(tab, p.t[i].coef);
        for (int f = 0; f < p.t[i].nf; f++)
            t = cdy_sym_mul(tab, t, sx_atom_subst(tab, p.t[i].f[f], mask));
        r = cdy_sym_add(tab, r, t);
    }
    return r;
}

/* Atom a as C text at the end of buf (used, len): a parenthesized floor
 * division, so that it binds as one factor in a product (`s2*((s1) / 2)`,
 * not `(s2*s1) / 2`); a numerator not provably >= 0 is moved down by
 * div - 1 where negative, as C's `/` truncates toward zero. */
static int sx_atom_print(const cdy_symtab *tab, int a, char *buf, int used, int len)
{
    const cdy_sym_atom *at = &tab->atoms[a];
    if (at->expr < 0)
        return used + snprintf(buf + used, (size_t)(len - used), "s%d", at->sym);
    double lo, hi;
    int li, hinf;
    sx_bounds(tab, at->expr, &lo, &li, &hi, &hinf, 0);
    char ex[448];
    cdy_sym_print(tab, at->expr, ex, sizeof(ex));
    long long dv = (long long)at->div;
    if (!li && lo >= 0)
        return used + snprintf(buf + used, (size_t)(len - used), "((%s) / %lld)", ex, dv);
    return used + snprintf(buf + used, (size_t)(len - used),
                           "(((%s) >= 0 ? (%s) : (%s) - %lld) / %lld)", ex, ex, ex, dv - 1, dv);
}

int cdy_sym_print(const cdy_symtab *tab, int e, char *buf, int len)
{
    const cdy_sym_poly *p = &tab->exprs[e];
    int used = 0;
    if (len <= 0)
        return 0;
    buf[0] = 0;
    if (!p->nt)
        used = snprintf(buf, (size_t)len, "0");
    for (int i = 0; i < p->nt && used < len; i++) {
        const cdy_sym_term *t = &p->t[i];
        int64_t c = t->coef;
        const char *sep = !i ? (c < 0 ? "-" : "") : (c < 0 ? " - " : " + ");
        int64_t m = c < 0 ? -c : c;
        used += snprintf(buf + used, (size_t)(len - used), "%s", sep);
        if (m != 1 || !t->nf)
            used += used < len ? snprintf(buf + used, (size_t)(len - used), "%lld%s",
                                          (long long)m, t->nf ? "*" : "") : 0;
        for (int f = 0; f < t->nf && used < len; f++) {
            used = sx_atom_print(tab, t->f[f], buf, used, len);
            if (f + 1 < t->nf && used < len)
                used += snprintf(buf + used, (size_t)(len - used), "*");
        }
    }
    return used < len ? used : len - 1;
}

/* Term a over single term b into *r (b's factors a sub-multiset of a's, its
 * coefficient dividing a's); 0, or -1. */
static int sx_term_div(const cdy_sym_term *a, const cdy_sym_term *b, cdy_sym_term *r)
{
    if (b->coef == 0 || a->coef % b->coef)
        return -1;
    r->coef = a->coef / b->coef;
    r->nf = 0;
    int j = 0;
    for (int i = 0; i < a->nf; i++) {
        if (j < b->nf && a->f[i] == b->f[j])
            j++;
        else
            r->f[r->nf++] = a->f[i];
    }
    return j == b->nf ? 0 : -1;
}

int cdy_sym_div_exact(cdy_symtab *tab, int a, int b)
{
    if (a < 0 || b < 0)
        return -1;
    const cdy_sym_poly *x = &tab->exprs[a], *y = &tab->exprs[b];
    if (y->nt != 1)
        return -1;
    cdy_sym_term t[CDY_SYM_MAX_TERMS];
    for (int i = 0; i < x->nt; i++)
        if (sx_term_div(&x->t[i], &y->t[0], &t[i]))
            return -1;
    int q = sx_intern_terms(tab, t, x->nt);
    return q >= 0 && cdy_sym_mul(tab, q, b) == a ? q : -1;
}
