/* sym/guards.c - the guards of a graph with symbolic sizes: what a call's
 * inputs must satisfy for the graph's symbolic shapes to hold (sym.h).
 *
 * Per input: its static dims (and its specialized symbols) equal the
 * example's; per live symbol: the size of its input dim is >= 2 (0 and 1
 * change broadcasting and are never symbols); per relation: both sides equal
 * at the symbols' values; per input with a symbol: torch.empty's strides
 * for its sizes, size-1 dims' too (what the trace's layouts relied on: an
 * op keeping its input's layout copies them), or for a non-contiguous
 * example its layout (cdy_strides_follow: dense dims stay dense, gaps keep
 * their strides); an overlapping input's dims specialize,
 * sym/trace_shapes.c).  Values themselves are not guarded. */
#include "sym/sym.h"

#include <stdio.h>
#include <string.h>

/* 1 if input value v (example meta ex, actual meta a) keeps its static
 * sizes, else 0 with why. */
static int sg_static_dims(const cdy_sym_shapes *s, int v, const cdy_meta *ex, const cdy_meta *a,
                          const char *name, char *why, size_t n)
{
    for (int d = 0; d < ex->ndim; d++) {
        int64_t c;
        if (!cdy_sym_is_const(&s->tab, s->dims[v][d], &c) || a->sizes[d] == ex->sizes[d])
            continue;
        snprintf(why, n, "tensor '%s' size mismatch at index %d. expected %lld, actual %lld", name,
                 d, (long long)ex->sizes[d], (long long)a->sizes[d]);
        return 0;
    }
    return 1;
}

/* The example meta of g's input at position pos, or NULL. */
static const cdy_meta *sg_input_meta(const cdy_graph *g, int pos)
{
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v].kind == CDY_VAL_INPUT && g->values[v].input_index == pos)
            return &g->values[v].meta;
    return NULL;
}

int cdy_sym_guard(const cdy_sym_shapes *s, const cdy_graph *g, const cdy_meta *actual,
                  const char *const *names, int64_t *vals, char *why, size_t n)
{
    cdy_sym_mask live = cdy_sym_live(s);
    for (int k = 0; k < s->tab.nsyms; k++)
        vals[k] = s->tab.hint[k];
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *val = &g->values[v];
        if (val->kind != CDY_VAL_INPUT)
            continue;
        const cdy_meta *a = &actual[val->input_index];
        const char *name = names ? names[val->input_index] : "?";
        if (a->ndim != val->meta.ndim || a->dtype != val->meta.dtype) {
            snprintf(why, n, "tensor '%s' ndim or dtype changed", name);
            return 1;
        }
        if (!sg_static_dims(s, v, &val->meta, a, name, why, n))
            return 1;
    }
    for (int k = 0; k < s->tab.nsyms; k++) {
        if (!cdy_sym_mask_has(&live, k))
            continue;
        const cdy_meta *a = &actual[s->info[k].input];
        vals[k] = a->sizes[s->info[k].dim];
        if (vals[k] < 2) {
            snprintf(why, n, "dimension %d of '%s' is %lld: sizes 0 and 1 are not symbolic",
                     s->info[k].dim, names ? names[s->info[k].input] : "?", (long long)vals[k]);
            return 1;
        }
        const cdy_meta *ex = sg_input_meta(g, s->info[k].input);
        if (!ex || !cdy_strides_follow(ex, a->ndim, a->sizes, a->strides)) {
            snprintf(why, n, "tensor '%s' does not have its example's layout (torch.empty's "
                     "strides, or the strides of a non-contiguous example; the trace relied on "
                     "it)", names ? names[s->info[k].input] : "?");
            return 1;
        }
    }
    return !cdy_sym_relations_hold(s, vals, why, n);
}

/* See sym.h. */
int cdy_sym_relations_hold(const cdy_sym_shapes *s, const int64_t *vals, char *why, size_t n)
{
    for (int r = 0; r < s->nrel; r++) {
        int64_t x = cdy_sym_eval(&s->tab, s->rel[r][0], vals);
        int64_t y = cdy_sym_eval(&s->tab, s->rel[r][1], vals);
        if (x == y)
            continue;
        if (n) {
            char ta[96], tb[96];
            cdy_sym_print(&s->tab, s->rel[r][0], ta, sizeof(ta));
            cdy_sym_print(&s->tab, s->rel[r][1], tb, sizeof(tb));
            snprintf(why, n, "relation %s == %s does not hold: %lld != %lld", ta, tb,
                     (long long)x, (long long)y);
        }
        return 0;
    }
    for (int r = 0; r < s->ncmp; r++) {
        const cdy_sym_cmp_rel *c = &s->cmp[r];
        if (cdy_sym_cmp_holds(cdy_sym_eval(&s->tab, c->expr, vals), c->op) == c->truth)
            continue;
        if (n) {
            char t[160];
            cdy_sym_cmp_text(s, r, t, sizeof(t));
            snprintf(why, n, "size comparison %s does not hold (its sides are %lld and %lld)", t,
                     (long long)cdy_sym_eval(&s->tab, c->a, vals),
                     (long long)cdy_sym_eval(&s->tab, c->b, vals));
        }
        return 0;
    }
    return 1;
}

void cdy_sym_cmp_text(const cdy_sym_shapes *s, int r, char *buf, size_t n)
{
    static const char *const ops[] = {"<", "<=", "==", "!=", ">", ">="};
    const cdy_sym_cmp_rel *c = &s->cmp[r];
    char a[72], b[72];
    cdy_sym_print(&s->tab, c->a, a, sizeof(a));
    cdy_sym_print(&s->tab, c->b, b, sizeof(b));
    snprintf(buf, n, "%s %s %s is %s", a, ops[c->op >= 0 && c->op < 6 ? c->op : 0], b,
             c->truth ? "True" : "False");
}
