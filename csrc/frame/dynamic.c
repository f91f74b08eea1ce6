/* frame/dynamic.c - dynamic shapes at the frame hook (issue 32): the policy
 * that picks a compile's symbolic dims, its log, and the guards of an entry
 * compiled with symbolic sizes (frame/dynamic.h).
 *
 * Automatic dynamic (optimize(dynamic=None), config.automatic_dynamic_shapes)
 * works as torch.compile's: a frame compiles with static sizes first; when a
 * later call misses every entry and a tensor input's size differs from an
 * earlier entry's guard on the same source, the recompile asks for those
 * dims symbolic (and keeps asking for dims an earlier entry had symbolic).
 * Sizes 0 and 1 never become symbols (sym/infer.c).  Whatever the symbolic
 * compile cannot keep symbolic comes back specialized, guarded as before. */
#include "frame/dynamic.h"
#include "runtime/runtime.h"
#include "sym/trace_shapes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The graph value of t's input position i, or -1. */
static int dy_input_value(const cdy_trace *t, int i)
{
    for (int v = 0; v < t->graph.nvalues; v++)
        if (t->graph.values[v].kind == CDY_VAL_INPUT && t->graph.values[v].input_index == i)
            return v;
    return -1;
}

/* The first TENSOR guard of gs on source s, or NULL. */
static cdy_guard *dy_tensor_guard(const cdy_guards *gs, const cdy_src *s)
{
    for (int i = 0; i < gs->n; i++)
        if (gs->items[i].kind == CDY_GUARD_TENSOR && cdy_src_equal(&gs->items[i].src, s))
            return &gs->items[i];
    return NULL;
}

/* The dims of input source s (meta m) whose size differs from an earlier
 * entry's guard on s of the same rank, or that were symbolic there; *was
 * (may be NULL) gets the earlier sizes of the first entry that differs (-1:
 * symbolic there, or unchanged). */
static unsigned dy_changed(const cdy_dyn_ctx *c, const cdy_src *s, const cdy_meta *m,
                           int64_t *was)
{
    unsigned bits = 0;
    for (int d = 0; was && d < m->ndim; d++)
        was[d] = -1;
    for (int e = 0; e < c->nprev; e++) {
        const cdy_guard *g = dy_tensor_guard(c->prev[e], s);
        if (!g || g->ndim != m->ndim)
            continue;
        unsigned b = g->dyn;
        for (int d = 0; d < m->ndim; d++)
            if (!(g->dyn >> d & 1) && g->sizes[d] != m->sizes[d]) {
                b |= 1u << d;
                if (was)
                    was[d] = g->sizes[d];
            }
        bits |= b;
    }
    return bits;
}

/* 1 when no earlier entry guards a tensor at source s (an input this
 * recompile sees first: a KV cache that prefill created). */
static int dy_new_source(const cdy_dyn_ctx *c, const cdy_src *s)
{
    for (int e = 0; e < c->nprev; e++)
        if (dy_tensor_guard(c->prev[e], s))
            return 0;
    return c->nprev > 0;
}

/* The earlier sizes (>= 2) of the dims of t's inputs that changed since an
 * earlier entry (dy_changed's "was"), into was[0..return). */
static int dy_moved_sizes(const cdy_dyn_ctx *c, const cdy_trace *t, int64_t *was, int cap)
{
    int n = 0;
    for (int i = 0; i < t->graph.ninputs; i++) {
        int v = dy_input_value(t, i);
        if (v < 0)
            continue;
        const cdy_meta *m = &t->graph.values[v].meta;
        int64_t w[CDY_MAX_NDIM];
        unsigned ch = dy_changed(c, &t->input_srcs[i], m, w);
        for (int d = 0; d < m->ndim && n < cap; d++)
            if (ch >> d & 1 && w[d] >= 2 && w[d] != m->sizes[d])
                was[n++] = w[d];
    }
    return n;
}

/* The dims of a new input (dy_new_source; not a Parameter) at source s
 * whose size is one of was[0..nwas): the size of a dim that has just
 * changed elsewhere moved into it (prefill's length 6 is the first decode
 * step's cache length while input_ids went 6 -> 1), so it will change too. */
static unsigned dy_moved(const cdy_dyn_ctx *c, const cdy_src *s, const cdy_meta *m,
                         const int64_t *was, int nwas)
{
    if (!nwas || !dy_new_source(c, s))
        return 0;
    PyObject *v = cdy_src_fetch(s, c->locals, c->globals, c->builtins, c->closure);
    PyObject *pt = v ? PyObject_GetAttrString((PyObject *)Py_TYPE(v), "__name__") : NULL;
    int param = pt && PyUnicode_Check(pt) && PyUnicode_CompareWithASCIIString(pt, "Parameter") == 0;
    Py_XDECREF(pt);
    Py_XDECREF(v);
    PyErr_Clear();
    unsigned bits = 0;
    for (int d = 0; !param && d < m->ndim; d++)
        for (int k = 0; k < nwas; k++)
            if (m->sizes[d] == was[k])
                bits |= 1u << d;
    return bits;
}

/* The dims mark_dynamic (or torch._dynamo.mark_dynamic) marked on the
 * tensor at source s (its _dynamo_dynamic_indices), a bit each. */
static unsigned dy_marked(const cdy_dyn_ctx *c, const cdy_src *s, int ndim)
{
    PyObject *v = cdy_src_fetch(s, c->locals, c->globals, c->builtins, c->closure);
    PyObject *ix = v ? PyObject_GetAttrString(v, "_dynamo_dynamic_indices") : NULL;
    PyObject *it = ix ? PyObject_GetIter(ix) : NULL, *d;
    unsigned bits = 0;
    while (it && (d = PyIter_Next(it))) {
        long k = PyLong_Check(d) ? PyLong_AsLong(d) : -1;
        if (k >= 0 && k < ndim)
            bits |= 1u << k;
        Py_DECREF(d);
    }
    Py_XDECREF(it);
    Py_XDECREF(ix);
    Py_XDECREF(v);
    PyErr_Clear();
    return bits;
}

int cdy_dyn_policy(void *ctx, const cdy_trace *t, unsigned *dyn)
{
    const cdy_dyn_ctx *c = ctx;
    unsigned any = 0;
    int64_t was[32];
    int nwas = 0;
    if (c->mode == 1)
        cdy_sym_dyn_all(t, dyn);
    if (c->mode == -1 && c->automatic && t->input_srcs)
        nwas = dy_moved_sizes(c, t, was, 32);
    for (int i = 0; i < t->graph.ninputs; i++) {
        int v = dy_input_value(t, i);
        if (c->mode != 1)
            dyn[i] = 0;
        if (v < 0 || !t->input_srcs || c->mode == 0) {
            dyn[i] = 0;
            continue;
        }
        const cdy_meta *m = &t->graph.values[v].meta;
        if (c->mode == -1 && c->automatic)
            dyn[i] |= dy_changed(c, &t->input_srcs[i], m, NULL) |
                      dy_moved(c, &t->input_srcs[i], m, was, nwas);
        dyn[i] |= dy_marked(c, &t->input_srcs[i], m->ndim);
        for (int d = 0; d < 32; d++)   /* no such dim, or a size 0 / 1: static */
            if (d >= m->ndim || m->sizes[d] < 2)
                dyn[i] &= ~(1u << d);
        any |= dyn[i];
    }
    for (int i = 0; c->mode != 0 && i < t->nints; i++)   /* Python ints as symbols */
        any |= !t->ints[i].pinned;
    return any != 0;
}

unsigned cdy_dyn_relax_eager(cdy_guards *gs, const cdy_dyn_ctx *c, int *src_of_first)
{
    unsigned first = 0;
    *src_of_first = -1;
    for (int i = 0; c->mode != 0 && i < gs->n; i++) {
        cdy_guard *g = &gs->items[i];
        if (g->kind != CDY_GUARD_TENSOR || g->dyn ||
            !cdy_strides_contiguous(g->ndim, g->sizes, g->strides))
            continue;   /* a symbolic check asks for contiguous strides */
        cdy_meta m;
        m.ndim = g->ndim;
        memcpy(m.sizes, g->sizes, sizeof(int64_t) * (size_t)g->ndim);
        unsigned bits = c->mode == 1 ? ~0u
                      : c->automatic ? dy_changed(c, &g->src, &m, NULL) : 0;
        bits |= dy_marked(c, &g->src, g->ndim);
        for (int d = 0; d < 32; d++)
            if (d >= g->ndim || g->sizes[d] < 2)
                bits &= ~(1u << d);
        g->dyn = bits;
        if (bits && *src_of_first < 0) {
            *src_of_first = i;
            first = bits;
        }
    }
    return first;
}

/* The log topic of the dynamic-shapes lines: "dynamic", else "recompiles",
 * or NULL when neither is on. */
static const char *dy_topic(void)
{
    return cdy_log_on("dynamic") ? "dynamic" : cdy_log_on("recompiles") ? "recompiles" : NULL;
}

/* Log the dims of input i (source s, meta m) that the policy made dynamic. */
static void dy_log_input(const cdy_dyn_ctx *c, const cdy_trace *t, int i, const cdy_meta *m,
                         unsigned dyn, PyCodeObject *co, const char *topic)
{
    char name[128];
    int64_t was[CDY_MAX_NDIM];
    cdy_src_name(&t->input_srcs[i], co, name, sizeof(name));
    unsigned changed = c->mode == -1 && c->automatic
                           ? dy_changed(c, &t->input_srcs[i], m, was) : 0;
    unsigned marked = dy_marked(c, &t->input_srcs[i], m->ndim);
    int64_t moved[32];
    int nmoved = c->mode == -1 && c->automatic ? dy_moved_sizes(c, t, moved, 32) : 0;
    unsigned born = dy_moved(c, &t->input_srcs[i], m, moved, nmoved);
    for (int d = 0; d < m->ndim; d++) {
        if (!(dyn >> d & 1))
            continue;
        if (marked >> d & 1)
            cdy_log(topic, "dimension %d of '%s' is dynamic: marked by mark_dynamic (size %lld)",
                    d, name, (long long)m->sizes[d]);
        else if ((changed >> d & 1) && was[d] < 0)
            cdy_log(topic, "dimension %d of '%s' stays dynamic: symbolic in an earlier entry "
                    "(size %lld)", d, name, (long long)m->sizes[d]);
        else if (changed >> d & 1)
            cdy_log(topic, "dimension %d of '%s' became dynamic: %lld -> %lld", d, name,
                    (long long)was[d], (long long)m->sizes[d]);
        else if (born >> d & 1)
            cdy_log(topic, "dimension %d of '%s' became dynamic: a new input whose size %lld is "
                    "that of a dim that just changed", d, name, (long long)m->sizes[d]);
    }
}

/* Log int symbol k of compile p (a Python int of t, sym.h). */
static void dy_log_int(const cdy_pipe *p, const cdy_trace *t, int k, PyCodeObject *co,
                       const char *topic)
{
    const cdy_sym_shapes *s = p->sym;
    char name[128] = "?";
    if (t->int_srcs && s->info[k].dim < t->nints)
        cdy_src_name(&t->int_srcs[s->info[k].dim], co, name, sizeof(name));
    if (s->info[k].pinned)
        cdy_log(topic, "%s: s%d = int '%s' specialized to %lld: %s", p->name, k, name,
                (long long)s->tab.hint[k], s->info[k].why);
    else
        cdy_log(topic, "%s: s%d = int '%s' is symbolic", p->name, k, name);
}

/* Log what compile p did with the symbols it was asked for. */
static void dy_log_result(const cdy_pipe *p, const cdy_trace *t, PyCodeObject *co,
                          const char *topic)
{
    if (!p->has_sym || !p->sym) {
        cdy_log(topic, "%s: compiled with static sizes: %s", p->name,
                p->sym_why[0] ? p->sym_why : "no symbol requested");
        return;
    }
    const cdy_sym_shapes *s = p->sym;
    for (int k = 0; k < s->tab.nsyms; k++) {
        char name[128] = "?";
        if (s->info[k].input < 0) {
            dy_log_int(p, t, k, co, topic);
            continue;
        }
        if (t->input_srcs && s->info[k].input < t->graph.ninputs)
            cdy_src_name(&t->input_srcs[s->info[k].input], co, name, sizeof(name));
        if (s->info[k].pinned)
            cdy_log(topic, "%s: s%d = dim %d of '%s' specialized to %lld: %s", p->name, k,
                    s->info[k].dim, name, (long long)s->tab.hint[k], s->info[k].why);
        else
            cdy_log(topic, "%s: s%d = dim %d of '%s' is symbolic", p->name, k, s->info[k].dim,
                    name);
    }
}

void cdy_dyn_log(const cdy_dyn_ctx *c, const cdy_trace *t, const cdy_pipe *p, PyCodeObject *co)
{
    const char *topic = dy_topic();
    if (!topic || c->mode == 0 || !t->input_srcs || p->failed || !p->name[0])
        return;
    unsigned dbuf[t->graph.ninputs + 1];
    if (!cdy_dyn_policy((void *)c, t, dbuf))
        return;
    for (int i = 0; c->mode != 1 && i < t->graph.ninputs; i++) {
        int v = dy_input_value(t, i);
        if (v >= 0 && dbuf[i])
            dy_log_input(c, t, i, &t->graph.values[v].meta, dbuf[i], co, topic);
    }
    for (int i = 0; t->int_srcs && i < t->nints; i++) {
        char name[128];
        cdy_src_name(&t->int_srcs[i], co, name, sizeof(name));
        if (t->ints[i].pinned)
            cdy_log(topic, "int '%s' stays static (value %lld): %s", name,
                    (long long)t->ints[i].value, t->ints[i].why ? t->ints[i].why : "pinned");
        else
            cdy_log(topic, "int '%s' became dynamic: %s (value %lld)", name,
                    c->mode == 1 ? "dynamic=True" : "its value changed since an earlier entry",
                    (long long)t->ints[i].value);
    }
    dy_log_result(p, t, co, topic);
}

void cdy_symguard_free(cdy_symguard *sg)
{
    if (!sg)
        return;
    cdy_sym_shapes_free(&sg->s);
    for (int i = 0; i < sg->nin; i++)
        cdy_src_clear(&sg->srcs[i]);
    PyMem_Free(sg->srcs);
    PyMem_Free(sg->imeta);
    for (int i = 0; i < sg->nints; i++)
        cdy_src_clear(&sg->int_srcs[i]);
    PyMem_Free(sg->int_srcs);
    PyMem_Free(sg);
}

/* A SYM guard for the shapes *s (moved in) of t's graph; NULL on OOM. */
static cdy_symguard *dy_symguard_new(const cdy_trace *t, cdy_sym_shapes *s)
{
    int n = t->graph.ninputs;
    cdy_symguard *sg = PyMem_Calloc(1, sizeof(*sg));
    cdy_src *srcs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(cdy_src));
    if (!sg || !srcs) {
        PyMem_Free(sg);
        PyMem_Free(srcs);
        PyErr_NoMemory();
        return NULL;
    }
    for (int i = 0; i < n; i++)
        cdy_src_copy(&srcs[i], &t->input_srcs[i]);
    sg->srcs = srcs;
    sg->nin = n;
    if (!(sg->imeta = PyMem_Calloc((size_t)(n ? n : 1), sizeof(cdy_meta)))) {
        cdy_symguard_free(sg);
        PyErr_NoMemory();
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        int v = dy_input_value(t, i);
        if (v >= 0)
            sg->imeta[i] = t->graph.values[v].meta;
    }
    if (t->nints && t->int_srcs) {
        sg->int_srcs = PyMem_Calloc((size_t)t->nints, sizeof(cdy_src));
        if (!sg->int_srcs) {
            cdy_symguard_free(sg);
            PyErr_NoMemory();
            return NULL;
        }
        for (int i = 0; i < t->nints; i++)
            cdy_src_copy(&sg->int_srcs[i], &t->int_srcs[i]);
        sg->nints = t->nints;
    }
    sg->s = *s;
    memset(s, 0, sizeof(*s));
    return sg;
}

/* The dims of each graph input that hold a live symbol of s into mask. */
static void dy_live_dims(const cdy_sym_shapes *s, int ninputs, unsigned *mask)
{
    cdy_sym_mask live = cdy_sym_live(s);
    memset(mask, 0, sizeof(unsigned) * (size_t)ninputs);
    for (int k = 0; k < s->tab.nsyms; k++)
        if (cdy_sym_mask_has(&live, k) && s->info[k].input >= 0 && s->info[k].input < ninputs)
            mask[s->info[k].input] |= 1u << s->info[k].dim;
}

/* The CONST guard of each live int symbol of s (a Python int of t) becomes a
 * TYPE guard for int (the SYM guard reads its value); 1 when one did. */
static int dy_int_guards(cdy_guards *gs, const cdy_trace *t, const cdy_sym_shapes *s)
{
    cdy_sym_mask live = cdy_sym_live(s);
    int any = 0;
    for (int k = 0; t->int_srcs && k < s->tab.nsyms; k++) {
        if (!cdy_sym_mask_has(&live, k) || s->info[k].input >= 0 || s->info[k].dim >= t->nints)
            continue;
        for (int j = 0; j < gs->n; j++) {
            cdy_guard *g = &gs->items[j];
            if (g->kind != CDY_GUARD_CONST || !g->expect || !PyLong_CheckExact(g->expect) ||
                !cdy_src_equal(&g->src, &t->int_srcs[s->info[k].dim]))
                continue;
            Py_SETREF(g->expect, Py_NewRef((PyObject *)&PyLong_Type));
            g->kind = CDY_GUARD_TYPE;
        }
        any = 1;   /* the SYM guard reads its value per call */
    }
    return any;
}

int cdy_dyn_apply(cdy_guards *gs, const cdy_trace *t, cdy_pipe *p)
{
    cdy_sym_shapes *s = p->sym;
    int n = t->graph.ninputs, relaxed = 0;
    if (!p->has_sym || !s || !t->input_srcs)
        return 0;
    unsigned mask[n + 1];
    dy_live_dims(s, n, mask);
    for (int i = 0; i < n; i++) {
        cdy_guard *g = mask[i] ? dy_tensor_guard(gs, &t->input_srcs[i]) : NULL;
        for (int j = 0; g && j < gs->n; j++)   /* every guard on that source */
            if (gs->items[j].kind == CDY_GUARD_TENSOR &&
                cdy_src_equal(&gs->items[j].src, &t->input_srcs[i])) {
                gs->items[j].dyn |= mask[i];
                relaxed = 1;
            }
    }
    relaxed |= dy_int_guards(gs, t, s);
    if (!relaxed)
        return 0;
    /* a SYM guard also without relations: it reads the symbols' values once, for the
     * relations and for the graph (runtime.h's token: the graph checks no size again) */
    cdy_src none = {0};
    none.kind = CDY_SRC_GLOBAL;
    cdy_guard *g = cdy_guards_add(gs, CDY_GUARD_SYM, &none, "symbolic sizes");
    if (!g || !(g->sym = dy_symguard_new(t, s)))
        return -1;
    cdy_sym_shapes_free(s);   /* the moved-from shell (zeroed) */
    free(s);
    p->sym = NULL;
    return 1;
}

int cdy_dyn_check_tensor(const cdy_guard *g, const int64_t *sz, const int64_t *st, char *why,
                         size_t n)
{
    for (int d = 0; d < g->ndim; d++) {
        if (g->dyn >> d & 1 ? sz[d] >= 2 : sz[d] == g->sizes[d])
            continue;
        if (g->dyn >> d & 1)
            snprintf(why, n, "dimension %d of '%s' is %lld: sizes 0 and 1 are not symbolic", d,
                     g->desc, (long long)sz[d]);
        else
            snprintf(why, n, "tensor '%s' size mismatch at index %d. expected %lld, actual %lld",
                     g->desc, d, (long long)g->sizes[d], (long long)sz[d]);
        return 0;
    }
    cdy_meta ex = {0};
    ex.ndim = g->ndim;
    memcpy(ex.sizes, g->sizes, sizeof(ex.sizes));
    memcpy(ex.strides, g->strides, sizeof(ex.strides));
    if (cdy_meta_contiguous(&ex) ? !cdy_strides_contiguous(g->ndim, sz, st)
                                 : !cdy_strides_follow(&ex, g->ndim, sz, st)) {
        snprintf(why, n, "tensor '%s' does not have its example's layout (its symbolic entry "
                 "relies on it)", g->desc);
        return 0;
    }
    return 1;
}

int cdy_symguard_relations(const cdy_symguard *sg, const int64_t *vals, char *why, size_t n)
{
    return cdy_sym_relations_hold(&sg->s, vals, why, n);
}

void cdy_symguard_text(const cdy_symguard *sg, cdy_buf *b)
{
    const cdy_sym_shapes *s = &sg->s;
    cdy_buf_printf(b, "SYMBOLIC: %d symbols", s->tab.nsyms);
    for (int r = 0; r < s->nrel; r++) {
        char ta[96], tb[96];
        cdy_sym_print(&s->tab, s->rel[r][0], ta, sizeof(ta));
        cdy_sym_print(&s->tab, s->rel[r][1], tb, sizeof(tb));
        cdy_buf_printf(b, "%s%s == %s", r ? ", " : "; relations ", ta, tb);
    }
    for (int r = 0; r < s->ncmp; r++) {
        char c[160];
        cdy_sym_cmp_text(s, r, c, sizeof(c));
        cdy_buf_printf(b, "%s%s", r ? ", " : "; comparisons ", c);
    }
    cdy_buf_puts(b, "\n");
}

void cdy_dyn_tensor_text(const cdy_guard *g, cdy_buf *b)
{
    PyObject *dt = PyObject_Str(g->dtype);
    cdy_buf_printf(b, "TENSOR_MATCH: %s: %s, %s, device=cpu, requires_grad=%s, size=[", g->desc,
                   ((PyTypeObject *)g->expect)->tp_name, dt ? PyUnicode_AsUTF8(dt) : "?",
                   g->requires_grad ? "True" : "False");
    Py_XDECREF(dt);
    PyErr_Clear();
    for (int d = 0; d < g->ndim; d++) {
        if (g->dyn >> d & 1)
            cdy_buf_printf(b, "%s>=2", d ? ", " : "");
        else
            cdy_buf_printf(b, "%s%lld", d ? ", " : "", (long long)g->sizes[d]);
    }
    cdy_meta ex = {0};
    ex.ndim = g->ndim;
    memcpy(ex.sizes, g->sizes, sizeof(ex.sizes));
    memcpy(ex.strides, g->strides, sizeof(ex.strides));
    cdy_buf_puts(b, cdy_meta_contiguous(&ex) ? "], contiguous\n" : "], the example's layout\n");
}
