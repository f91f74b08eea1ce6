/* sym/trace_shapes.c - the symbolic shapes of a finished trace (its graph,
 * its pins, its mutated inputs), and their log (CDYNAMO_LOGS=dynamic). */
#include "sym/trace_shapes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 if input source s is a frame argument or an item of one (not a module's
 * attribute: parameters and buffers keep static sizes, as torch.compile's). */
static int ts_argument(const cdy_src *s)
{
    if (s->kind != CDY_SRC_LOCAL)
        return 0;
    for (int i = 0; i < s->nattrs; i++)
        if (!s->item[i])
            return 0;
    return 1;
}

/* The graph value of input position pos, or -1. */
static int ts_input_value(const cdy_graph *g, int pos)
{
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v].kind == CDY_VAL_INPUT && g->values[v].input_index == pos)
            return v;
    return -1;
}

/* 'm' if fn is torch's mm / bmm / matmul (function, Tensor method or
 * operator.matmul), 'l' for F.linear or a PackedLinear, 's' for the encoder
 * layer's fast path (its result src's sizes), 'b' addmm, 'B' baddbmm, 'k' torch.cat /
 * concat / concatenate, else 0 (sym.h's extern kinds). */
/* 's' (its first argument's sizes) for a scan extern: torch.cumsum /
 * cumprod and their Tensor methods (any keywords: dim, dtype); else 0. */
static char ts_scan_kind(PyObject *fn)
{
    static PyObject *fns[4];
    static int tried;
    if (!tried) {
        tried = 1;
        PyObject *T = PyObject_GetAttrString(cdy_torch, "Tensor");
        const char *n[] = {"cumsum", "cumprod"};
        for (int i = 0; i < 2; i++) {
            fns[i] = PyObject_GetAttrString(cdy_torch, n[i]);
            fns[2 + i] = T ? PyObject_GetAttrString(T, n[i]) : NULL;
        }
        Py_XDECREF(T);
        PyErr_Clear();
    }
    for (int i = 0; i < 4; i++)
        if (fns[i] && fn == fns[i])
            return 's';
    return 0;
}

static char ts_extern_kind(PyObject *fn)
{
    static const char kinds[17] = "mmmmmmmlmsbbkkkBB";   /* per fns[i] */
    static PyObject *fns[sizeof(kinds)];
    static int tried;
    if (!tried) {
        tried = 1;
        PyObject *F = PyImport_ImportModule("torch.nn.functional");
        PyObject *T = PyObject_GetAttrString(cdy_torch, "Tensor");
        const char *tn[] = {"mm", "bmm", "matmul"};
        const char *mn[] = {"mm", "bmm", "matmul", "__matmul__"};
        for (int i = 0; i < 3; i++)
            fns[i] = PyObject_GetAttrString(cdy_torch, tn[i]);
        for (int i = 0; T && i < 4; i++)
            fns[3 + i] = PyObject_GetAttrString(T, mn[i]);
        fns[7] = F ? PyObject_GetAttrString(F, "linear") : NULL;
        PyObject *op = PyImport_ImportModule("operator");
        fns[8] = op ? PyObject_GetAttrString(op, "matmul") : NULL;
        fns[9] = PyObject_GetAttrString(cdy_torch, "_transformer_encoder_layer_fwd");
        fns[10] = PyObject_GetAttrString(cdy_torch, "addmm");
        fns[11] = T ? PyObject_GetAttrString(T, "addmm") : NULL;
        const char *cn[] = {"cat", "concat", "concatenate"};
        for (int i = 0; i < 3; i++)
            fns[12 + i] = PyObject_GetAttrString(cdy_torch, cn[i]);
        fns[15] = PyObject_GetAttrString(cdy_torch, "baddbmm");
        fns[16] = T ? PyObject_GetAttrString(T, "baddbmm") : NULL;
        Py_XDECREF(op);
        Py_XDECREF(F);
        Py_XDECREF(T);
        PyErr_Clear();
    }
    for (int i = 0; i < (int)sizeof(kinds); i++)
        if (fns[i] && fn == fns[i])
            return kinds[i];
    return !strcmp(Py_TYPE(fn)->tp_name, "cdynamo._C.PackedLinear") ? 'l' : 0;
}

/* torch.diff / Tensor.diff pynode pn (input, n=1, dim=-1, prepend=None,
 * append=None) with n and dim constants, the rest tensors or None: '0' + its
 * dim (normalized, by the input's rank nd), sym.h's extern kinds; else 0. */
static char ts_diff_kind(const cdy_pynode *pn, const cdy_graph *g)
{
    static PyObject *fns[2];
    static int tried;
    if (!tried++) {
        PyObject *T = PyObject_GetAttrString(cdy_torch, "Tensor");
        fns[0] = PyObject_GetAttrString(cdy_torch, "diff");
        fns[1] = T ? PyObject_GetAttrString(T, "diff") : NULL;
        Py_XDECREF(T);
        PyErr_Clear();
    }
    if (!pn->fn || (pn->fn != fns[0] && pn->fn != fns[1]) || pn->nargs < 1 || pn->ref[0] < 0)
        return 0;
    static const char *names[] = {"input", "n", "dim", "prepend", "append"};
    int npos = pn->nargs - (pn->kwnames ? (int)PyTuple_GET_SIZE(pn->kwnames) : 0);
    long dim = -1;
    for (int i = 1; i < pn->nargs; i++) {
        int slot = i;
        if (i >= npos) {
            const char *kw = PyUnicode_AsUTF8(PyTuple_GET_ITEM(pn->kwnames, i - npos));
            for (slot = 0; kw && slot < 5 && strcmp(kw, names[slot]); slot++)
                ;
        }
        int cst = pn->ref[i] == -1, tensor = pn->ref[i] >= 0;
        if (slot >= 5 || (slot < 3 && !(cst && PyLong_CheckExact(pn->cst[i]))) ||
            (slot >= 3 && !tensor && !(cst && pn->cst[i] == Py_None)))
            return (char)(PyErr_Clear(), 0);
        if (slot == 2)
            dim = PyLong_AsLong(pn->cst[i]);
    }
    int nd = g->values[pn->ref[0]].meta.ndim;
    dim += dim < 0 ? nd : 0;
    PyErr_Clear();
    return dim >= 0 && dim < nd && dim < 8 ? (char)('0' + dim) : 0;
}

/* Attribute name of module mod (a new reference, kept by the caller for
 * the process), or NULL with the error cleared. */
static PyObject *ts_module_attr(const char *mod, const char *name)
{
    PyObject *m = PyImport_ImportModule(mod);
    PyObject *a = m ? PyObject_GetAttrString(m, name) : NULL;
    Py_XDECREF(m);
    PyErr_Clear();
    return a;
}

/* 1 if pynode pn is F.scaled_dot_product_attention(q, k, v, ...) whose
 * tensors are q, k, v and at most the attn_mask (the result has q's sizes
 * but v's last; torch computes any causal mask from the actual sizes). */
static int ts_sdpa(const cdy_pynode *pn)
{
    static PyObject *fn;
    static int tried;
    if (!tried++)
        fn = ts_module_attr("torch.nn.functional", "scaled_dot_product_attention");
    int npos = pn->nargs - (pn->kwnames ? (int)PyTuple_GET_SIZE(pn->kwnames) : 0);
    if (!fn || pn->fn != fn || npos < 3)
        return 0;
    int tensors = 0;
    for (int i = 0; i < pn->nargs; i++) {
        const char *kw = i >= npos ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(pn->kwnames, i - npos))
                                   : NULL;
        if (pn->ref[i] == -2 || (i < 3 && pn->ref[i] < 0))
            return 0;
        if (pn->ref[i] >= 0 && i >= 3 && !(i == 3 && !kw) && !(kw && !strcmp(kw, "attn_mask")))
            return 0;
        tensors += pn->ref[i] >= 0;
    }
    PyErr_Clear();
    return tensors <= 4;
}

/* 'a' if pynode pn is the graph pass's fused attention (cdynamo._attention.
 * attention(q, k, v[, attn_mask=m], scale=c)) or torch's
 * scaled_dot_product_attention (ts_sdpa): sym.h's extern kinds; else 0. */
static char ts_attention_kind(const cdy_pynode *pn)
{
    static PyObject *fn;
    static int tried;
    if (!tried++)
        fn = ts_module_attr("cdynamo._attention", "attention");
    if (ts_sdpa(pn))
        return 'a';
    if (!fn || pn->fn != fn || pn->nargs < 4 || pn->nargs > 5)
        return 0;
    for (int i = 0; i < pn->nargs - 1; i++)
        if (pn->ref[i] < 0)
            return 0;
    return 'a';
}

/* 'L' when opaque library op pn of t has a size rule (cdy_libop_size_map: into
 * (*lmap)[pn->value], the table allocated for t's values on first use), else
 * 'U' (sym.h's extern kinds). */
static char ts_libop_kind(const cdy_trace *t, const cdy_pynode *pn, int (**lmap)[CDY_MAX_NDIM])
{
    int map[CDY_MAX_NDIM];
    if (!cdy_libop_size_map(t, pn, map))
        return 'U';
    if (!*lmap && !(*lmap = calloc((size_t)t->graph.nvalues, sizeof(**lmap))))
        return 'U';
    memcpy((*lmap)[pn->value], map, sizeof(map));
    return 'L';
}

/* fn's __name__ into buf (CDY_SYM_EXT_NAME chars, for the logs), or "" . */
static void ts_fn_name(PyObject *fn, char *buf)
{
    PyObject *n = PyObject_GetAttrString(fn, "__name__");
    if (!n) {   /* a torch.library CustomOpDef: its qualified name */
        PyErr_Clear();
        n = PyObject_GetAttrString(fn, "_qualname");
    }
    const char *u = n && PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : NULL;
    snprintf(buf, CDY_SYM_EXT_NAME, "%s", u ? u : "");
    Py_XDECREF(n);
    PyErr_Clear();
}

/* 1 if input meta m may have symbolic sizes: torch.empty's strides, or a
 * non-contiguous layout without overlap (permuted, or with gaps: a slice of
 * a bigger buffer), guarded by cdy_strides_follow; a contiguous input whose
 * size-1 dims have other strides and an overlapping one (an expand) stay
 * static. */
static int ts_layout_ok(const cdy_meta *m)
{
    int order[CDY_MAX_NDIM];
    return cdy_meta_canonical(m) ||
           (!cdy_meta_contiguous(m) && cdy_meta_layout_order(m, order) >= 0);
}

int cdy_sym_trace_shapes(const cdy_trace *t, const unsigned *dyn, cdy_sym_shapes *out)
{
    const cdy_graph *g = &t->graph;
    int extra = t->nwriteback + t->nreview + 2 * g->ninputs, n = t->npins + extra;
    cdy_sym_pin pins[n ? n : 1];
    if (t->npins)
        memcpy(pins, t->pins, (size_t)t->npins * sizeof(pins[0]));
    n = t->npins;
    for (int i = 0; i < t->nwriteback; i++)
        pins[n++] = (cdy_sym_pin){ts_input_value(g, t->writeback[2 * i]), ~0u,
                                  "an input the graph mutates"};
    for (int i = 0; i < t->nreview; i++)
        pins[n++] = (cdy_sym_pin){ts_input_value(g, t->review[i].input), ~0u,
                                  "an output viewing a mutated input"};
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v].kind == CDY_VAL_INPUT && !ts_layout_ok(&g->values[v].meta))
            pins[n++] = (cdy_sym_pin){v, ~0u, cdy_meta_contiguous(&g->values[v].meta) ?
                                      "an input whose size-1 dims have other strides than "
                                      "torch.empty's" : "a non-contiguous input that overlaps"};
    int m = 0, removed = 0;
    for (int i = 0; i < n; i++) {
        if (pins[i].value < 0)
            continue;
        removed |= g->values[pins[i].value].kind == CDY_VAL_SCALAR;  /* a graph pass dropped it */
        pins[m++] = pins[i];
    }
    for (int v = 0; removed && v < g->nvalues; v++)   /* what it read is unknown: all */
        if (g->values[v].kind == CDY_VAL_INPUT)
            pins[m++] = (cdy_sym_pin){v, ~0u, "a pinned value a graph pass removed"};
    char ext[g->nvalues ? g->nvalues : 1];
    memset(ext, 0, sizeof(ext));
    char *names = calloc(g->nvalues ? (size_t)g->nvalues : 1, CDY_SYM_EXT_NAME);
    int (*lmap)[CDY_MAX_NDIM] = NULL;
    for (int i = 0; i < t->npynodes; i++) {
        const cdy_pynode *pn = &t->pynodes[i];
        if (pn->value >= 0 && pn->value < g->nvalues && pn->item < 0 && pn->fn &&
            cdy_value_is_extern(&g->values[pn->value])) {
            ext[pn->value] = pn->kwnames ? ts_attention_kind(pn)
                             : ts_sdpa(pn)  ? 'a'
                                            : ts_extern_kind(pn->fn);
            char kw = pn->kwnames && !ext[pn->value] ? ts_extern_kind(pn->fn) : 0;
            if (kw == 'b' || kw == 'B' || kw == 'k')   /* cat's dim=, addmm's beta= / alpha= */
                ext[pn->value] = kw;
            if (!ext[pn->value])
                ext[pn->value] = ts_scan_kind(pn->fn);
            if (!ext[pn->value])
                ext[pn->value] = ts_diff_kind(pn, g);
            if (!ext[pn->value] && pn->opaque)
                ext[pn->value] = ts_libop_kind(t, pn, &lmap);
            if (names)
                ts_fn_name(pn->fn, names + (size_t)pn->value * CDY_SYM_EXT_NAME);
        }
    }
    cdy_sym_hints h = {pins, m, ext, t->symviews, t->nsymviews, t->sx, t->nsx, t->cmps, t->ncmps,
                       names, t->ints, t->nints, (const int (*)[CDY_MAX_NDIM])lmap};
    int r = cdy_sym_infer(g, dyn, &h, out);
    free(names);
    free(lmap);
    return r;
}

void cdy_sym_dyn_all(const cdy_trace *t, unsigned *dyn)
{
    for (int i = 0; i < t->graph.ninputs; i++)
        dyn[i] = t->input_srcs && ts_argument(&t->input_srcs[i]) ? ~0u : 0;
}

/* Value v's sizes as text ("[s0, 64]") into buf. */
static void ts_sizes(const cdy_sym_shapes *s, const cdy_graph *g, int v, char *buf, size_t n)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < g->values[v].meta.ndim && used < n; d++) {
        char e[96];
        cdy_sym_print(&s->tab, s->dims[v][d], e, sizeof(e));
        used += (size_t)snprintf(buf + used, n - used, "%s%s", d ? ", " : "", e);
    }
    if (used < n)
        snprintf(buf + used, n - used, "]");
}

void cdy_sym_trace_log(const cdy_trace *t, const char *name)
{
    const cdy_graph *g = &t->graph;
    unsigned dyn[g->ninputs ? g->ninputs : 1];
    cdy_sym_shapes s;
    cdy_sym_dyn_all(t, dyn);
    cdy_sym_trace_shapes(t, dyn, &s);
    cdy_sym_mask lm = cdy_sym_live(&s);
    int live = cdy_sym_mask_count(&lm);
    cdy_log("dynamic", "%s: with the arguments' dims symbolic, %d of %d symbols stay symbolic "
            "(%d passes)", name, live, s.tab.nsyms, s.runs);
    for (int k = 0; k < s.tab.nsyms; k++) {
        char src[128] = "?";
        int ik = s.info[k].input < 0;
        if (ik && t->int_srcs)
            cdy_src_name(&t->int_srcs[s.info[k].dim], t->top_code, src, sizeof(src));
        else if (t->input_srcs)
            cdy_src_name(&t->input_srcs[s.info[k].input], t->top_code, src, sizeof(src));
        cdy_log("dynamic", "%s:   s%d = %s %d of '%s' (hint %lld)%s%s", name, k,
                ik ? "int" : "dim", ik ? 0 : s.info[k].dim, src, (long long)s.tab.hint[k], s.info[k].pinned ? ": specialized: " : "",
                s.info[k].pinned ? s.info[k].why : "");
    }
    char gl[512];
    size_t used = 0;
    gl[0] = 0;
    for (int k = 0; k < s.tab.nsyms && used < sizeof(gl); k++)
        if (!s.info[k].pinned)
            used += (size_t)snprintf(gl + used, sizeof(gl) - used, "%ss%d >= 2", used ? ", " : "",
                                     k);
    if (used)
        cdy_log("dynamic", "%s:   guards: %s, inputs with symbols at torch.empty strides, relations", name,
                gl);
    for (int r = 0; r < s.nrel; r++) {
        char a[96], b[96];
        cdy_sym_print(&s.tab, s.rel[r][0], a, sizeof(a));
        cdy_sym_print(&s.tab, s.rel[r][1], b, sizeof(b));
        cdy_log("dynamic", "%s:   relation %s == %s", name, a, b);
    }
    for (int r = 0; r < s.ncmp; r++) {
        char c[160];
        cdy_sym_cmp_text(&s, r, c, sizeof(c));
        cdy_log("dynamic", "%s:   guard %s (a comparison of sizes)", name, c);
    }
    if (s.ncmp_range)
        cdy_log("dynamic", "%s:   %d comparisons of sizes hold at every size >= 2 (no guard)",
                name, s.ncmp_range);
    for (int o = 0; o < g->noutputs; o++) {
        char sz[256];
        ts_sizes(&s, g, g->outputs[o], sz, sizeof(sz));
        cdy_log("dynamic", "%s:   output %d: %s", name, o, sz);
    }
    cdy_sym_shapes_free(&s);
}
