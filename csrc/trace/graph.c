/* graph.c - the readable text of a traced graph (logs, debug dir, explain). */
#include "trace/record.h"

/* Append "float32[4, 8] stride=[8, 1]" for meta m. */
static void meta_text(cdy_buf *b, const cdy_meta *m)
{
    cdy_buf_printf(b, "%s[", cdy_dtype_table[m->dtype].name);
    for (int d = 0; d < m->ndim; d++)
        cdy_buf_printf(b, "%s%lld", d ? ", " : "", (long long)m->sizes[d]);
    cdy_buf_puts(b, "] stride=[");
    for (int d = 0; d < m->ndim; d++)
        cdy_buf_printf(b, "%s%lld", d ? ", " : "", (long long)m->strides[d]);
    cdy_buf_puts(b, "]");
}

/* One line per value: %N = op(args) : meta  # line; then the outputs. New str. */
PyObject *cdy_graph_text(const cdy_trace *t, PyCodeObject *co)
{
    const cdy_graph *g = &t->graph;
    cdy_buf b = {0};
    int nodes = 0;
    for (int v = 0; v < g->nvalues; v++)
        nodes += g->values[v].kind == CDY_VAL_NODE;
    cdy_buf_printf(&b, "graph of %s (%s:%d): %d inputs, %d ops, %d outputs\n",
                   PyUnicode_AsUTF8(co->co_name), PyUnicode_AsUTF8(co->co_filename),
                   co->co_firstlineno, g->ninputs, nodes, g->noutputs);
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *val = &g->values[v];
        if (val->kind == CDY_VAL_INPUT) {
            char name[96];
            cdy_src_name(&t->input_srcs[val->input_index], co, name, sizeof(name));
            cdy_buf_printf(&b, "  %%%d = input %s : ", v, name);
            meta_text(&b, &val->meta);
            cdy_buf_puts(&b, "\n");
        }
        else if (val->kind == CDY_VAL_SCALAR) {
            if (val->meta.dtype == CDY_DT_FLOAT64)
                cdy_buf_printf(&b, "  %%%d = scalar %.17g : float64\n", v, val->f);
            else
                cdy_buf_printf(&b, "  %%%d = scalar %lld : %s\n", v, (long long)val->i,
                               cdy_dtype_table[val->meta.dtype].name);
        }
        else {
            cdy_buf_printf(&b, "  %%%d = %s(", v, cdy_op_table[val->op].name);
            for (int a = 0; a < val->nargs; a++)
                cdy_buf_printf(&b, "%s%%%d", a ? ", " : "", val->args[a]);
            cdy_buf_puts(&b, ") : ");
            meta_text(&b, &val->meta);
            cdy_buf_printf(&b, "  compute=%s  # %s:%d\n", cdy_dtype_table[val->compute_dtype].name,
                           PyUnicode_AsUTF8(co->co_filename), val->source_line);
        }
    }
    cdy_buf_puts(&b, "  return (");
    for (int i = 0; i < g->noutputs; i++)
        cdy_buf_printf(&b, "%s%%%d", i ? ", " : "", g->outputs[i]);
    cdy_buf_puts(&b, ")\n");
    for (int w = 0; w < t->nwriteback; w++)   /* trace/mutate.c */
        cdy_buf_printf(&b, "  mutates input %d: written back from %%%d\n", t->writeback[2 * w],
                       g->outputs[t->writeback[2 * w + 1]]);
    for (int i = 0; i < t->nstores; i++)
        cdy_buf_printf(&b, "  stores attribute .%s after the call\n",
                       PyUnicode_AsUTF8(t->stores[i].name));
    PyErr_Clear();
    return cdy_buf_str(&b);
}
