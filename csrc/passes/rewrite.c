/* rewrite.c - what the graph passes share (see passes.h): who reads a value,
 * which call defines it, dropping a value no step computes, making room for
 * new values and calls, binding a call's arguments by name. */
#include <string.h>

#include "passes/passes.h"
#include "sym/sym.h"

/* users[v] := the distinct readers of each value v: nodes (args, view
 * bases), calls' tensor arguments their node does not list, and the graph's
 * outputs.  users has t->graph.nvalues zeroed entries. */
void cdy_trace_users(const cdy_trace *t, int *users)
{
    const cdy_graph *g = &t->graph;
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *val = &g->values[v];
        if (val->kind != CDY_VAL_NODE)
            continue;
        int seen[CDY_MAX_NODE_ARGS + 2], n = 0;
        for (int i = 0; i < val->nargs; i++)
            seen[n++] = val->args[i];
        if (cdy_op_table[val->op].kind == 'V')
            seen[n++] = val->view_base;
        for (int i = 0; i < n; i++) {
            int dup = 0;
            for (int j = 0; j < i; j++)
                dup |= seen[j] == seen[i];
            if (!dup && seen[i] >= 0)
                users[seen[i]]++;
        }
    }
    for (int o = 0; o < g->noutputs; o++)
        users[g->outputs[o]]++;
    for (int n = 0; n < t->npynodes; n++) {   /* a call reading a value its node does not */
        const cdy_pynode *p = &t->pynodes[n];
        const cdy_value *val = p->value >= 0 ? &g->values[p->value] : NULL;
        for (int i = 0; i < p->nargs; i++) {
            int r = p->ref[i], listed = 0;
            for (int j = 0; val && r >= 0 && j < val->nargs; j++)
                listed |= val->args[j] == r;
            if (r >= 0 && !listed)
                users[r]++;
            for (int j = 0; r == -2 && j < p->seq[i].n; j++)
                if (p->seq[i].ref[j] >= 0)
                    users[p->seq[i].ref[j]] += val == NULL;
        }
    }
}

/* pynode_of[v] := the call that defines value v, or -1 (the last one wins,
 * as in the runtime).  pynode_of has t->graph.nvalues entries. */
void cdy_trace_pynode_of(const cdy_trace *t, int *pynode_of)
{
    for (int v = 0; v < t->graph.nvalues; v++)
        pynode_of[v] = -1;
    for (int n = 0; n < t->npynodes; n++)
        if (t->pynodes[n].value >= 0)
            pynode_of[t->pynodes[n].value] = n;
}

/* Leave value v (if >= 0) an unused scalar: no step computes it. */
void cdy_value_drop(cdy_graph *g, int v)
{
    if (v < 0)
        return;
    cdy_value *val = &g->values[v];
    memset(&val->meta, 0, sizeof(val->meta));
    val->meta.dtype = CDY_DT_FLOAT64;
    val->kind = CDY_VAL_SCALAR;
    val->nargs = 0;
    val->f = 0.0;
    val->i = 0;
}

/* The float value of scalar value v in *out; 0 when v is not a number. */
int cdy_value_number(const cdy_graph *g, int v, double *out)
{
    const cdy_value *s = &g->values[v];
    if (s->kind != CDY_VAL_SCALAR || s->meta.dtype == CDY_DT_BOOL)
        return 0;
    *out = s->meta.dtype == CDY_DT_FLOAT64 ? s->f : (double)s->i;
    return 1;
}

/* v moved up by n when it is `at` or later (references below at stay). */
static int rw_shift(int v, int at, int n)
{
    return v >= at ? v + n : v;
}

/* Renumber every reference of t to values from `at` on by n. */
static void rw_renumber(cdy_trace *t, int at, int n)
{
    cdy_graph *g = &t->graph;
    for (int v = 0; v < g->nvalues; v++) {
        cdy_value *val = &g->values[v];
        if (val->kind != CDY_VAL_NODE)
            continue;
        for (int a = 0; a < val->nargs; a++)
            val->args[a] = rw_shift(val->args[a], at, n);
        char k = cdy_op_table[val->op].kind;
        if (k == 'V' || k == 'G')
            val->view_base = rw_shift(val->view_base, at, n);
    }
    for (int o = 0; o < g->noutputs; o++)
        g->outputs[o] = rw_shift(g->outputs[o], at, n);
    for (int i = 0; i < t->npins; i++)
        t->pins[i].value = rw_shift(t->pins[i].value, at, n);
    for (int i = 0; i < t->nsymviews; i++) {
        t->symviews[i].value = rw_shift(t->symviews[i].value, at, n);
        t->symviews[i].src = rw_shift(t->symviews[i].src, at, n);
    }
    for (int i = 0; i < t->nsx; i++)      /* sizes the code read: of these values */
        if (t->sx[i].op == 'd')
            t->sx[i].value = rw_shift(t->sx[i].value, at, n);
    for (int i = 0; i < t->npynodes; i++) {
        cdy_pynode *p = &t->pynodes[i];
        p->value = rw_shift(p->value, at, n);
        for (int a = 0; a < p->nargs; a++) {
            p->ref[a] = rw_shift(p->ref[a], at, n);
            for (int j = 0; p->ref[a] == -2 && j < p->seq[a].n; j++)
                p->seq[a].ref[j] = rw_shift(p->seq[a].ref[j], at, n);
        }
    }
}

int cdy_trace_insert_values(cdy_trace *t, int at, int n)
{
    cdy_graph *g = &t->graph;
    if (g->nvalues + n > g->cap_values) {
        cdy_value *v = PyMem_Realloc(g->values, sizeof(cdy_value) * (size_t)(g->nvalues + n));
        if (!v)
            return -1;
        g->values = v;
        g->cap_values = g->nvalues + n;
    }
    rw_renumber(t, at, n);
    memmove(&g->values[at + n], &g->values[at], sizeof(cdy_value) * (size_t)(g->nvalues - at));
    memset(&g->values[at], 0, sizeof(cdy_value) * (size_t)n);
    g->nvalues += n;
    return 0;
}

int cdy_trace_insert_pynodes(cdy_trace *t, int at, int n)
{
    if (t->npynodes + n > t->cap_pynodes) {
        cdy_pynode *p = PyMem_Realloc(t->pynodes, sizeof(cdy_pynode) * (size_t)(t->npynodes + n));
        if (!p)
            return -1;
        t->pynodes = p;
        t->cap_pynodes = t->npynodes + n;
    }
    for (int i = 0; i < t->npynodes; i++)
        if (t->pynodes[i].item >= 0)
            t->pynodes[i].base = rw_shift(t->pynodes[i].base, at, n);
    memmove(&t->pynodes[at + n], &t->pynodes[at], sizeof(cdy_pynode) * (size_t)(t->npynodes - at));
    memset(&t->pynodes[at], 0, sizeof(cdy_pynode) * (size_t)n);
    for (int i = at; i < at + n; i++)
        t->pynodes[i].item = -1;
    t->npynodes += n;
    return 0;
}

int cdy_pynode_bind(const cdy_pynode *p, const char *sig, int *slot)
{
    char names[8][24];
    int np = 0;
    for (const char *s = sig; *s && np < 8;) {
        int len = (int)strcspn(s, " ");
        snprintf(names[np++], sizeof(names[0]), "%.*s", len, s);
        s += len + (s[len] == ' ');
    }
    int nkw = p->kwnames ? (int)PyTuple_GET_SIZE(p->kwnames) : 0, npos = p->nargs - nkw;
    if (npos < 0 || npos > np)
        return -1;
    for (int i = 0; i < np; i++)
        slot[i] = i < npos ? i : -1;
    for (int k = 0; k < nkw; k++) {
        const char *kw = PyUnicode_AsUTF8(PyTuple_GET_ITEM(p->kwnames, k));
        int i = 0;
        while (kw && i < np && strcmp(names[i], kw))
            i++;
        if (!kw || i == np || slot[i] >= 0) {
            PyErr_Clear();
            return -1;
        }
        slot[i] = npos + k;
    }
    return 0;
}

PyObject *cdy_trace_keep(cdy_trace *t, PyObject *o)
{
    if (!o || PyList_Append(t->keep, o)) {
        Py_XDECREF(o);
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(o);
    return o;
}
