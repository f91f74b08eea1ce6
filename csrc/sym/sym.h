/* sym/sym.h - symbolic sizes (issue 32): a small expression language over the
 * symbols s0, s1, ... (input dimensions), and the symbolic shapes of a graph.
 *
 * Python-free (the compiler and tests/c use it).  An expression is a
 * polynomial with int64 coefficients over atoms: a symbol, or the floor
 * division of an expression by a positive constant that does not divide it
 * exactly.  Expressions are interned in a table (cdy_symtab): equal
 * expressions have equal ids, so "the same size" is an id comparison.  Every
 * operation returns an id, or -1 when the table is full, a coefficient
 * overflows or a limit below is reached: the caller then specializes (treats
 * the sizes involved as the constants they are at the hints). */
#ifndef CDY_SYM_H
#define CDY_SYM_H

#include <stdint.h>

#include "cdynamo.h"

#define CDY_SYM_MAX_SYMS 256     /* symbols of one graph (a bit each in a cdy_sym_mask):
                                  * a deep model's KV cache has two per layer */
#define CDY_SYM_MAX_ATOMS 384    /* symbols and floor-division atoms */
#define CDY_SYM_MAX_TERMS 8      /* terms of one expression */
#define CDY_SYM_MAX_FACTORS 4    /* atoms of one term */

/* A set of symbols, a bit each (k: word k / 64, bit k % 64). */
#define CDY_SYM_MASK_WORDS (CDY_SYM_MAX_SYMS / 64)
typedef struct {
    uint64_t w[CDY_SYM_MASK_WORDS];
} cdy_sym_mask;

static inline int cdy_sym_mask_has(const cdy_sym_mask *m, int k)
{
    return (int)(m->w[k >> 6] >> (k & 63) & 1);
}
static inline void cdy_sym_mask_set(cdy_sym_mask *m, int k)
{
    m->w[k >> 6] |= (uint64_t)1 << (k & 63);
}
/* *m |= *o. */
static inline void cdy_sym_mask_or(cdy_sym_mask *m, const cdy_sym_mask *o)
{
    for (int i = 0; i < CDY_SYM_MASK_WORDS; i++)
        m->w[i] |= o->w[i];
}
/* 1 if m and o share a symbol. */
static inline int cdy_sym_mask_meets(const cdy_sym_mask *m, const cdy_sym_mask *o)
{
    for (int i = 0; i < CDY_SYM_MASK_WORDS; i++)
        if (m->w[i] & o->w[i])
            return 1;
    return 0;
}
/* The number of symbols in m. */
static inline int cdy_sym_mask_count(const cdy_sym_mask *m)
{
    int n = 0;
    for (int i = 0; i < CDY_SYM_MASK_WORDS; i++)
        n += __builtin_popcountll(m->w[i]);
    return n;
}

typedef struct {
    int64_t coef;
    int nf;
    int f[CDY_SYM_MAX_FACTORS];  /* atom ids, ascending (repeats: powers) */
} cdy_sym_term;

typedef struct {
    int nt;                      /* terms, canonical order; none: the constant 0 */
    cdy_sym_term t[CDY_SYM_MAX_TERMS];
} cdy_sym_poly;

typedef struct {
    int expr;                    /* -1: symbol `sym`; else floor(expr / div) */
    int sym;
    int64_t div;
} cdy_sym_atom;

typedef struct {
    int nsyms;
    int64_t hint[CDY_SYM_MAX_SYMS];   /* the example's value of each symbol */
    int natoms;
    cdy_sym_atom atoms[CDY_SYM_MAX_ATOMS];
    int nexprs, cap;
    cdy_sym_poly *exprs;              /* interned (malloc'd) */
} cdy_symtab;

void cdy_symtab_init(cdy_symtab *tab);
void cdy_symtab_free(cdy_symtab *tab);
/* A new symbol whose example value is hint: its expression id, or -1. */
int cdy_sym_new(cdy_symtab *tab, int64_t hint);
/* The expression of symbol k / of the constant c: an id, or -1. */
int cdy_sym_var(cdy_symtab *tab, int k);
int cdy_sym_const(cdy_symtab *tab, int64_t c);
/* a + b, a * b, floor(a / c) for a constant c > 0: an id, or -1. */
int cdy_sym_add(cdy_symtab *tab, int a, int b);
int cdy_sym_mul(cdy_symtab *tab, int a, int b);
int cdy_sym_floordiv(cdy_symtab *tab, int a, int64_t c);
/* a / b when b divides a exactly (b a constant, or a single term whose
 * factors every term of a has): an id; else -1. */
int cdy_sym_div_exact(cdy_symtab *tab, int a, int b);
/* 1 and *c set when e is a constant, else 0. */
int cdy_sym_is_const(const cdy_symtab *tab, int e, int64_t *c);
/* The value of e with symbol k = vals[k] (vals NULL: the hints). */
int64_t cdy_sym_eval(const cdy_symtab *tab, int e, const int64_t *vals);
/* The symbols e reads, a bit each. */
cdy_sym_mask cdy_sym_symbols(const cdy_symtab *tab, int e);
/* e with the symbols of mask replaced by their hints: an id, or -1. */
int cdy_sym_subst_hints(cdy_symtab *tab, int e, const cdy_sym_mask *mask);
/* Whether e <op> 0 (op Py_LT .. Py_GE) holds at every value of the
 * symbols >= 2: 1 always, 0 never, -1 it depends (or unknown).  May add
 * expressions to tab. */
int cdy_sym_cmp_decided(cdy_symtab *tab, int e, int op);
/* e <op> 0 at the value x of e (op Py_LT .. Py_GE): 1 or 0. */
int cdy_sym_cmp_holds(int64_t x, int op);
/* e as C text ("s0*64 + 3", symbols named s<k>) into buf; the length
 * written, truncated to len - 1. */
int cdy_sym_print(const cdy_symtab *tab, int e, char *buf, int len);

/* ---- the symbolic shapes of a graph (sym/infer.c) ----------------------------
 * Which input dimensions are symbols is the caller's choice (dyn: per graph
 * input, a bit per dim; a dim of size 0 or 1 never is).  Sizes then follow
 * the graph's ops by their rules: pointwise broadcasting, reductions, row
 * ops (softmax, log_softmax, layer_norm), cat / stack.  A value whose size
 * some op has no rule for, or which the trace read as a Python number (a
 * pin), specializes the symbols of that size: they become the example's
 * values, and the reason is kept for the log.  Two symbolic sizes that
 * broadcasting, cat or a reduction's pairing needs equal become a relation
 * (a guard of the entry); a symbol against a constant specializes. */
typedef struct cdy_sym_pin_s {
    int value;                   /* graph value the trace read sizes of */
    unsigned dims;               /* its dims, a bit each */
    const char *why;             /* static text: what read them */
} cdy_sym_pin;

/* A view node whose sizes follow its source's by a known function (the
 * tracer records it for the view builder's calls it knows; a view without
 * one specializes).  kind 'p': a permutation of the source's dims with size-1
 * dims added or dropped (transpose, permute, unsqueeze, squeeze, ...): out
 * dim d is source dim map[d], or a new size 1 (-1); 'r': view / reshape to
 * the node's constant sizes but dim a (-1: none), which is the source's
 * element count over theirs; 'f': flatten of source dims a..b into out dim a; 's': a piece
 * of a split along dim a (its size a constant, the source's specialized);
 * 'e': out dim d is source dim map[d], or the node's constant size (-1): an
 * embedding's rows over its indices (a gather node); 'z' (src -1): dim d is
 * symbolic int sx[d], or the node's constant size (arange(n)'s IOTA node);
 * 'x': expand: out dim d is source dim map[d] (bit d of a: the call gave a
 * constant for it) or (-1) symbolic int sx[d] / the node's constant size;
 * 'c': a getitem of slices / None / Ellipsis / ints, or narrow: out dim d is
 * a new 1 (-1) or source dim map[d], whole, or cut to symbolic int sx[d]
 * elements (the trace guarded the cut within the dim) or to the node's
 * constant size (bit d of a); source dim j starts at symbolic int st[j]
 * (0: at 0; an int index's dim, dropped, too);
 * 'g': advanced indexing's gather node: out dim d is source dim map[d], the
 * broadcast of its index args' sizes (-2, right-aligned), or its constant
 * size (-1); index arg i ranges over source dim idim[i] - 1 (0: unknown,
 * the trace pinned what the range reads); 'k' (src -1): an int scalar
 * value (a node's operand) that is symbolic int sx[0]. */
#define CDY_SYM_MAX_GIDX 2
typedef struct cdy_sym_view_s {
    int value, src;
    char kind;
    int a, b;
    signed char map[CDY_MAX_NDIM];
    int sx[CDY_MAX_NDIM];        /* 'r': 1 + the symbolic int (cdy_sym_sx) of out dim d's
                                  * size argument, or 0: the constant size */
    int st[CDY_MAX_NDIM];        /* 'c': per source dim, the symbolic int of its start */
    signed char idim[CDY_SYM_MAX_GIDX];   /* 'g' (above) */
} cdy_sym_view;

/* A symbolic Python int of the trace (trace/symint.c): a size the code read
 * (dim `dim` of graph value `value`) or an expression over such: op 'd' that
 * size, 'k' the constant c, '+' / '*' nodes a and b (indices of earlier
 * nodes), '/' floor(a / c) for c > 0, 'i' the trace's Python int `dim` (cdy_sym_int;
 * c its value), 'q' a // b (a rule only where b
 * divides a as polynomials, so at every size); 'S' a slice's bounds (a the
 * start's node, b the stop's, 0 for a constant or None: a tensor index's
 * rule reads them, any other use pins both). */
typedef struct cdy_sym_sx_s {
    char op;
    int a, b;
    int value, dim;
    int64_t c;
} cdy_sym_sx;

/* A Python int the trace read from a guarded source (an argument, an
 * attribute) as a symbol (issue 32's automatic dynamic ints): its value at
 * the trace (>= 2), and whether a use the trace has no rule for pinned it
 * (its CONST guard then stays).  sx op 'i' (dim: the index of the int) reads
 * it; unpinned, it is a symbol whose cdy_sym_info has input -1, dim the
 * index. */
typedef struct cdy_sym_int_s {
    int64_t value;
    int pinned;
    const char *why;             /* what pinned it (the trace's text), or NULL */
} cdy_sym_int;

/* A comparison the trace decided on symbolic ints (trace/symint.c): sx
 * nodes a <op> b (op Py_LT .. Py_GE) was `truth` at the example's sizes.
 * The trace went on with that constant; sym/infer.c either finds it true at
 * every size of the symbols' range (nothing to guard), keeps it as a guard
 * of the entry (cdy_sym_cmp_rel), or specializes the sizes it reads. */
typedef struct cdy_sym_cmp_s {
    int a, b;
    char op, truth;
    const char *where;           /* static text: the code that compared (or NULL) */
} cdy_sym_cmp;

/* A comparison kept as a guard: a <op> b (op Py_LT .. Py_GE) is truth;
 * expr is a - b (the three are expression ids). */
typedef struct {
    int expr, a, b;
    char op, truth;
} cdy_sym_cmp_rel;

/* What the trace knows beyond the graph (sym/trace_shapes.c fills it). */
typedef struct {
    const cdy_sym_pin *pins;     /* sizes read as numbers */
    int npins;
    const char *ext;             /* per value: an extern's kind (below), or NULL */
    const cdy_sym_view *views;   /* view maps */
    int nviews;
    const cdy_sym_sx *sx;        /* the symbolic ints the view maps name */
    int nsx;
    const cdy_sym_cmp *cmps;     /* comparisons the trace decided */
    int ncmps;
    const char *ext_names;       /* per value 32 chars: an extern's function name (logs), or NULL */
    const struct cdy_sym_int_s *ints;  /* Python ints the trace read as symbols (below) */
    int nints;
    const int (*lmap)[CDY_MAX_NDIM];   /* per value (may be NULL): extern kind 'L' (a
                                  * torch.library op), per output dim 1 + value *
                                  * CDY_MAX_NDIM + dim of the argument dim its size
                                  * follows, 0 its constant size (trace/libops.c) */
} cdy_sym_hints;
#define CDY_SYM_EXT_NAME 32

typedef struct {
    int input, dim;              /* the symbol is dim `dim` of graph input `input`; input
                                  * -1: the trace's Python int `dim` (cdy_sym_int) */
    int pinned;                  /* specialized: its hint is guarded as a value */
    char why[192];               /* why it specialized */
} cdy_sym_info;

/* A view whose offset from its source is an expression: out dim d is source
 * dim map[d] (-1: a new 1) and source dim j starts at expression start[j]
 * (-1: at 0), so its offset is the source's plus each start times that
 * dim's stride (compiler/symk.c). */
typedef struct {
    int src;
    signed char map[CDY_MAX_NDIM];
    int start[CDY_MAX_NDIM];
} cdy_sym_vsrc;

typedef struct cdy_sym_shapes_s {
    cdy_symtab tab;
    cdy_sym_info info[CDY_SYM_MAX_SYMS];
    int nvalues;
    int (*dims)[CDY_MAX_NDIM];   /* per value, per dim: its size's expression (malloc'd) */
    int nrel, caprel;
    int (*rel)[2];               /* expression pairs the trace relied on being equal
                                  * (malloc'd, grows) */
    int ncmp, capcmp;            /* comparisons the range does not decide: guards */
    cdy_sym_cmp_rel *cmp;        /* (malloc'd, grows) */
    int ncmp_range;              /* comparisons the symbols' range decided (no guard) */
    int runs;                    /* passes over the graph until no new pin */
    int *sval;                   /* per value (malloc'd, may be NULL): 1 + the expression
                                  * of an int scalar the trace made from sizes (kind 'k'),
                                  * 0: its literal */
    unsigned char *const_off;    /* per value (malloc'd, may be NULL): 1 when a view's
                                  * element offset from its base moves by no symbol (its
                                  * maps, sym_view's kinds, start every dim at a constant
                                  * index: a split's pieces, permutations, reshapes), 0
                                  * when unknown; non-views 1 (sym/infer.c) */
    unsigned char *cut;          /* per value (malloc'd, may be NULL): bit d when dim d is
                                  * a slice of its source's dim (a 'c' map's cut: its size
                                  * within the dim's, guarded), 0 else */
    cdy_sym_vsrc *vsrc;          /* per value (malloc'd, may be NULL): a 'p' or 'c' view's
                                  * source, map and starts (src -1: none) */
    unsigned char *moves;        /* per value (malloc'd, may be NULL: unknown): 1 when a
                                  * view or gather, or a view it is made from, starts a dim
                                  * at a position that moves with the symbols (its offset
                                  * is then no constant, even over a static base) */
    int (*grange)[CDY_SYM_MAX_GIDX]; /* per value (malloc'd, may be NULL): 1 + the expression
                                  * of the size gather index i is checked against (its
                                  * 'g' map's source dim idim[i] - 1: an expanded dim's
                                  * too, whose stride tells no base dim), 0: unknown */
    int (*vlay)[CDY_MAX_NDIM + 2]; /* per value (malloc'd by the compiler, may be NULL): a
                                  * view torch realizes, at the symbols' values: [0] 1 + its
                                  * base value (0: none), [1] its offset's expression, [2 + d]
                                  * dim d's stride expression (the base's elements) */
} cdy_sym_shapes;

/* Symbolic sizes of g's values (see above), with h's pins and views (h may
 * be NULL); h->ext names the externs the caller knows, per value: 'm' mm /
 * bmm / matmul of two tensors of 2 or more dims (batch dims broadcast), 'l'
 * linear(x, weight[, bias]), 'a' the fused attention (q, k, v[, mask]), 's'
 * a result of its first argument's sizes (the encoder layer's fast path, cumsum),
 * 'b' addmm(bias, x, w), 'B' baddbmm(bias, b1, b2), 'k' torch.cat of its args (one rank), '0' + d
 * torch.diff along dim d (input, prepend / append tensors: one rank), 'L' a
 * torch.library op whose result dims follow h->lmap ('U' one without such a
 * rule: specializes with that reason); other
 * externs specialize what they read.  Fills
 * *out (free with cdy_sym_shapes_free).  0, or -1 (memory): then every
 * symbol specialized. */
int cdy_sym_infer(const cdy_graph *g, const unsigned *dyn, const cdy_sym_hints *h,
                  cdy_sym_shapes *out);
void cdy_sym_shapes_free(cdy_sym_shapes *s);
/* The symbols that stayed symbolic, a bit each. */
cdy_sym_mask cdy_sym_live(const cdy_sym_shapes *s);
/* 1 if a symbol stayed symbolic. */
int cdy_sym_any_live(const cdy_sym_shapes *s);

/* ---- guards (sym/guards.c) ---------------------------------------------------
 * Whether inputs of metas actual[input position] (names[i] for the text, may
 * be NULL) satisfy the guards of s (g's symbolic shapes): ndim and dtype,
 * static and specialized sizes equal to the example's, each live symbol's
 * size >= 2 with its input contiguous, the relations.  0 with vals[k] the
 * symbols' values (specialized ones: their hints); else 1 and why. */
int cdy_sym_guard(const cdy_sym_shapes *s, const cdy_graph *g, const cdy_meta *actual,
                  const char *const *names, int64_t *vals, char *why, size_t n);

/* 1 if every relation and comparison guard of s holds for the symbols'
 * values vals; else 0 and (n > 0) the first that does not in why. */
int cdy_sym_relations_hold(const cdy_sym_shapes *s, const int64_t *vals, char *why, size_t n);

/* Comparison guard r of s as text ("s0 + 8 > 9 is True") into buf. */
void cdy_sym_cmp_text(const cdy_sym_shapes *s, int r, char *buf, size_t n);

#endif /* CDY_SYM_H */
