/* rewrite.c - what the rewrites of a finished trace share (attention.c's
 * hand-written attention, lower_linear.c's linear + activation): who reads
 * a value, which call defines it, and dropping a value no step computes. */
#include <string.h>

#include "trace/trace.h"

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
