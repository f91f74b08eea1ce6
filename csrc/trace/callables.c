/* callables.c - the torch callables of ops/callables.def, resolved to their
 * objects once (at the first trace), and the torch.dtype objects.
 *
 * Each callable that a row names gets one record: the graph op it computes
 * (OP rows, and the implicit rows of ops.def's pointwise ops and reductions),
 * the C meta rule of an extern (META rows: meta.c numbers its rules by their
 * rows), the builders that turn it into graph nodes (BUILD rows: the first,
 * and a second tried when the first declines), and whether its CPU kernel's
 * result is contiguous (CONTIGUOUS rows).  Tensor methods are also looked up
 * by name (OP rows of where-letter m). */
#include "trace/trace.h"

#include <string.h>

/* The builders the table names, cdy_build_<FN> (trace/build_*.c). */
#define CDY_CALL_BUILD(where, name, FN, OP) \
    tvar *cdy_build_##FN(tracer *tr, const cdy_build_call *call);
#include "ops/callables.def"

enum { CC_OP, CC_META, CC_BUILD, CC_CONTIGUOUS };

/* One row of callables.def. */
typedef struct {
    const char *where, *name;
    int action;            /* CC_* */
    int op;                /* OP: the op; META: the op its rule binds as; BUILD: the op made */
    cdy_build_fn build;    /* BUILD */
} cc_row;

static const cc_row cc_rows[] = {
#define CDY_CALL_OP(where, name, OP) {where, name, CC_OP, CDY_OP_##OP, NULL},
#define CDY_CALL_META(where, name, RULE, OP) {where, name, CC_META, CDY_OP_##OP, NULL},
#define CDY_CALL_BUILD(where, name, FN, OP) {where, name, CC_BUILD, CDY_OP_##OP, cdy_build_##FN},
#define CDY_CALL_CONTIGUOUS(where, name) {where, name, CC_CONTIGUOUS, CDY_OP_NONE, NULL},
#include "ops/callables.def"
    {NULL, NULL, 0, 0, NULL},
};

/* What the table says of one callable. */
typedef struct {
    int op;                    /* CDY_OP_NONE: no OP row */
    int meta, meta_op;         /* the number of its META row among the META rows, or -1 */
    cdy_build_fn build[2];     /* its builders, in the order tried (NULL: none) */
    int build_op[2];
    int contiguous;            /* an extern whose CPU result is contiguous */
} cc_rec;

static PyObject *cc_index;      /* {callable: record number} */
static PyObject *cc_methods;    /* {Tensor method name: op} */
static cc_rec *cc_recs;
static int cc_nrecs, cc_cap;
static PyObject *dtype_objs[CDY_DT_COUNT];

/* The module (or torch.Tensor) where-letter w names, a new reference; NULL
 * (no error) for a module this torch lacks. */
static PyObject *cc_home(PyObject *torch, char w)
{
    static const struct { char w; const char *module; } homes[] = {
        {'t', "torch"}, {'f', "torch.nn.functional"}, {'n', "torch._C._nn"},
        {'s', "torch.special"}, {'l', "torch.linalg"}, {'o', "operator"}, {'b', "builtins"},
        {'c', "cdynamo._autograd"},
    };
    if (w == 'm')
        return PyObject_GetAttrString(torch, "Tensor");
    if (w == 'a') {
        PyObject *ops = PyObject_GetAttrString(torch, "ops");
        PyObject *aten = ops ? PyObject_GetAttrString(ops, "aten") : NULL;
        Py_XDECREF(ops);
        if (!aten)
            PyErr_Clear();
        return aten;
    }
    for (size_t i = 0; i < sizeof(homes) / sizeof(homes[0]); i++)
        if (homes[i].w == w) {
            PyObject *m = PyImport_ImportModule(homes[i].module);
            if (!m)
                PyErr_Clear();
            return m;
        }
    return NULL;
}

/* The record of callable f, made empty when new; NULL with an error set. */
static cc_rec *cc_rec_of(PyObject *f)
{
    PyObject *k = PyDict_GetItemWithError(cc_index, f);
    if (k)
        return &cc_recs[PyLong_AsLong(k)];
    if (PyErr_Occurred())
        return NULL;
    if (cc_nrecs == cc_cap) {
        int cap = cc_cap ? 2 * cc_cap : 256;
        cc_rec *r = PyMem_Realloc(cc_recs, sizeof(cc_rec) * (size_t)cap);
        if (!r) {
            PyErr_NoMemory();
            return NULL;
        }
        cc_recs = r;
        cc_cap = cap;
    }
    PyObject *n = PyLong_FromLong(cc_nrecs);
    int bad = !n || PyDict_SetItem(cc_index, f, n);
    Py_XDECREF(n);
    if (bad)
        return NULL;
    cc_rec *r = &cc_recs[cc_nrecs++];
    *r = (cc_rec){CDY_OP_NONE, -1, CDY_OP_NONE, {NULL, NULL}, {CDY_OP_NONE, CDY_OP_NONE}, 0};
    return r;
}

/* Record what row `row` (the meta-th META row, for META) says of callable f. */
static void cc_apply(cc_rec *r, const cc_row *row, int meta)
{
    switch (row->action) {
    case CC_OP:
        r->op = row->op;
        break;
    case CC_META:
        r->meta = meta;
        r->meta_op = row->op;
        break;
    case CC_BUILD:
        if (!r->build[0] || (!r->build[1] && r->build[0] != row->build)) {
            int i = r->build[0] != NULL;
            r->build[i] = row->build;
            r->build_op[i] = row->op;
        }
        break;
    default:
        r->contiguous = 1;
    }
}

/* Resolve row `row` (the meta-th META row) everywhere its where-letters say:
 * each callable found gets the row's action; an OP row's `m` also maps the
 * method name.  0, or -1 with an error set. */
static int cc_put_row(PyObject *torch, const cc_row *row, int meta)
{
    for (const char *w = row->where; *w; w++) {
        if (*w == 'm' && row->action == CC_OP) {
            PyObject *op = PyLong_FromLong(row->op);
            int bad = !op || PyDict_SetItemString(cc_methods, row->name, op);
            Py_XDECREF(op);
            if (bad)
                return -1;
        }
        PyObject *home = cc_home(torch, *w);
        PyObject *f = home ? PyObject_GetAttrString(home, row->name) : NULL;
        Py_XDECREF(home);
        if (!f || !PyCallable_Check(f)) {
            Py_XDECREF(f);
            PyErr_Clear();      /* a name this torch lacks, or a dtype (torch.float) */
            continue;
        }
        cc_rec *r = cc_rec_of(f);
        Py_DECREF(f);
        if (!r)
            return -1;
        cc_apply(r, row, meta);
    }
    return 0;
}

/* The torch.dtype objects of the dtype table; 0 or -1. */
static int cc_dtypes(PyObject *torch)
{
    for (int d = 0; d < CDY_DT_COUNT; d++)
        if (!(dtype_objs[d] = PyObject_GetAttrString(torch, cdy_dtype_table[d].name)))
            return -1;
    return 0;
}

/* Resolve the table (the implicit OP rows of ops.def first); 0, or -1 with an
 * error set. */
int cdy_callables_init(PyObject *torch)
{
    if (cc_index)
        return 0;
    if (!(cc_index = PyDict_New()) || !(cc_methods = PyDict_New()))
        return -1;
    for (int op = 0; op < CDY_OP_COUNT; op++) {
        cc_row row = {"tm", cdy_op_table[op].name, CC_OP, op, NULL};
        if ((cdy_op_pointwise(op) || cdy_op_table[op].kind == 'R') && cc_put_row(torch, &row, -1))
            return -1;
    }
    int meta = 0;
    for (const cc_row *row = cc_rows; row->name; row++)
        if (cc_put_row(torch, row, row->action == CC_META ? meta++ : -1))
            return -1;
    return cc_dtypes(torch);
}

/* The record of callable fn, or NULL (unhashable callables have none). */
static const cc_rec *cc_find(PyObject *fn)
{
    PyObject *k = cc_index ? PyDict_GetItemWithError(cc_index, fn) : NULL;
    if (!k) {
        PyErr_Clear();
        return NULL;
    }
    return &cc_recs[PyLong_AsLong(k)];
}

int cdy_callable_op(PyObject *fn)
{
    const cc_rec *r = cc_find(fn);
    return r ? r->op : CDY_OP_NONE;
}

int cdy_callable_method_op(PyObject *name)
{
    PyObject *v = cc_methods ? PyDict_GetItemWithError(cc_methods, name) : NULL;
    if (!v) {
        PyErr_Clear();
        return CDY_OP_NONE;
    }
    return (int)PyLong_AsLong(v);
}

int cdy_callable_meta(PyObject *fn, int *op)
{
    const cc_rec *r = cc_find(fn);
    *op = r ? r->meta_op : CDY_OP_NONE;
    return r ? r->meta : -1;
}

int cdy_callable_binary_op(PyObject *fn)
{
    const cc_rec *r = cc_find(fn);
    if (!r || r->build[0] != cdy_build_minmax)
        return CDY_OP_NONE;
    return r->build_op[0] == CDY_OP_AMIN ? CDY_OP_MINIMUM
         : r->build_op[0] == CDY_OP_AMAX ? CDY_OP_MAXIMUM : CDY_OP_NONE;
}

int cdy_callable_builds(PyObject *fn)
{
    const cc_rec *r = cc_find(fn);
    return r && r->build[0];
}

/* 1 if builder b is audited for symbolic sizes: it reads no size of its
 * arguments into the nodes it makes (their sizes follow sym/infer.c's rules). */
static int cc_symbolic_builder(cdy_build_fn b)
{
    return !b || b == cdy_build_softmax || b == cdy_build_f_softmax ||
           b == cdy_build_layer_norm || b == cdy_build_cat || b == cdy_build_concatenate ||
           b == cdy_build_tri ||   /* its IOTAs' sizes: the input's (tri_sym_dims) */
           b == cdy_build_ln_input_grad || b == cdy_build_softmax_input_grad ||
           b == cdy_build_ln_grad_xhat;
}

int cdy_callable_symbolic(PyObject *fn)
{
    const cc_rec *r = cc_find(fn);
    if (r && r->build[0] == cdy_build_view && !r->build[1])
        return 2;
    if (r && r->build[0] == cdy_build_clone && !r->build[1])
        return 3;
    if (r && r->build[0] == cdy_build_split && !r->build[1])
        return 4;
    if (r && !r->build[1] && (r->build[0] == cdy_build_f_embedding ||
                              r->build[0] == cdy_build_embedding ||
                              r->build[0] == cdy_build_index_select ||
                              r->build[0] == cdy_build_gather ||
                              r->build[0] == cdy_build_take_along_dim))
        return 5;   /* their GATHER nodes' maps (build_index.c li_push) */
    if (r && !r->build[1] && (r->build[0] == cdy_build_zeros || r->build[0] == cdy_build_ones ||
                              r->build[0] == cdy_build_full || r->build[0] == cdy_build_new_full))
        return 6;   /* a fill: its sizes from the call's ints (cdy_tr_sym_fill) */
    if (r && r->build[0] == cdy_build_view && r->build[1] == cdy_build_getitem)
        return 7;   /* a tensor getitem keeping whole dims (cdy_tr_sym_getitem) */
    return r && cc_symbolic_builder(r->build[0]) && cc_symbolic_builder(r->build[1]);
}

int cdy_callable_contiguous(PyObject *fn)
{
    const cc_rec *r = cc_find(fn);
    return r && r->contiguous;
}

tvar cdy_not_lowered;

/* r as the protocol reads it: 1 when builder `what` did not build the call
 * (CDY_NOT_LOWERED, or NULL without a stop or an exception), else 0 (a
 * result; or NULL: stopped, LOWER_FAILED when nothing said why). */
int cdy_build_declined(tracer *tr, tvar *r, const char *what)
{
    if (r == CDY_NOT_LOWERED)
        return 1;
    if (r || cdy_tr_stopped(tr))
        return 0;
    if (PyErr_Occurred()) {
        CDY_ASSERT(0, "a lowering failed with an exception and no stop");
        cdy_tr_stop_exc(tr, LOWER_FAILED, what);
        return 0;
    }
    return 1;
}

/* Run the builders of call->fn: the first, then (when it declines) the second. */
tvar *cdy_callable_build(tracer *tr, const cdy_build_call *call)
{
    const cc_rec *r = cc_find(call->fn);
    if (!r || !r->build[0])
        return CDY_NOT_LOWERED;
    cdy_build_call c = *call;
    c.op = r->build_op[0];
    tvar *v = r->build[0](tr, &c);
    if (!r->build[1] || !cdy_build_declined(tr, v, call->what))
        return v;
    c.op = r->build_op[1];
    return r->build[1](tr, &c);
}

/* The callable table as Python data (_C.callable_table(), for tests and
 * debugging): a list of (callable, op name or None, meta rule number or -1,
 * builder count, contiguous). */
PyObject *cdy_callables_py_table(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    if (cdy_callables_init(cdy_torch))
        return NULL;
    PyObject *list = PyList_New(0), *key, *val;
    Py_ssize_t pos = 0;
    while (list && PyDict_Next(cc_index, &pos, &key, &val)) {
        const cc_rec *r = &cc_recs[PyLong_AsLong(val)];
        PyObject *t = Py_BuildValue(
            "(Oziii)", key, r->op >= 0 ? cdy_op_table[r->op].name : NULL, r->meta,
            (r->build[0] != NULL) + (r->build[1] != NULL), r->contiguous);
        if (!t || PyList_Append(list, t)) {
            Py_XDECREF(t);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(t);
    }
    return list;
}

/* ---- torch.dtype objects ---------------------------------------------------- */

/* The cdy_dtype of a torch.dtype object, or CDY_DT_NONE. */
int cdy_dtype_from_obj(PyObject *dtype)
{
    for (int d = 0; d < CDY_DT_COUNT; d++)
        if (dtype_objs[d] == dtype)
            return d;
    return CDY_DT_NONE;
}

/* The torch.dtype object of cdy_dtype dt (borrowed; the table is built at init). */
PyObject *cdy_dtype_obj(int dt)
{
    return dtype_objs[dt];
}

/* The cdy_dtype of dt, a new reference to a torch.dtype (consumed; NULL
 * allowed), or CDY_DT_NONE.  Leaves no error set. */
int cdy_dtype_take(PyObject *dt)
{
    if (!dt) {
        PyErr_Clear();
        return CDY_DT_NONE;
    }
    int d = cdy_dtype_from_obj(dt);
    Py_DECREF(dt);
    return d;
}

/* torch.result_type(a, b) as a cdy_dtype, or CDY_DT_NONE. */
int cdy_result_dtype(PyObject *a, PyObject *b)
{
    PyObject *fn = PyObject_GetAttrString(cdy_torch, "result_type");
    PyObject *args[2] = {a, b};
    PyObject *dt = fn ? PyObject_Vectorcall(fn, args, 2, NULL) : NULL;
    Py_XDECREF(fn);
    return cdy_dtype_take(dt);
}
