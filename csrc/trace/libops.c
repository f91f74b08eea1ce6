/* libops.c - torch.library operators outside aten / prims: torch.ops.<ns>.<name>
 * (an OpOverloadPacket), torch.ops.<ns>.<name>.<overload> (an OpOverload) and
 * the CustomOpDef that torch.library.custom_op returns.  The tracer makes such
 * a call an opaque extern node (trace/calls.c): its result's meta comes from
 * running the op on the fakes (meta tensors: the op's Meta kernel, which is the
 * fake impl given to register_fake; without one torch raises and the trace
 * stops, TORCH_RAISED, as before), and at run time the op itself runs with the
 * frame hook off (cdy_pynode.opaque, runtime/compiled.c), so its Python
 * implementation is never compiled as a frame of its own (a data-dependent
 * body, transformers' grouped_mm_fallback, would break there every call).
 * An op whose schema mutates an input (Tensor(a!)) or returns an alias of
 * one (Tensor(a)) is not opaque: the trace stops (LIBOP_MUTATES /
 * LIBOP_ALIAS) and the frame runs the op eagerly.
 * Under symbolic sizes (issue 32) an op's result sizes follow a rule that
 * cdy_libop_size_map finds by a second run of its fake at moved sizes; the
 * runtime checks the real result's sizes against it (runtime/compiled.c's
 * sym_extern_result: a mismatch raises and the frame reruns eagerly). */
#include "trace/trace.h"
#include "frame/frame.h"

#include <string.h>

static PyObject *overload_type, *packet_type, *customop_type;

/* Look up the op classes; 0 (a class torch lacks stays NULL). */
int cdy_libops_init(void)
{
    if (overload_type)
        return 0;
    PyObject *ops = PyImport_ImportModule("torch._ops");
    overload_type = ops ? PyObject_GetAttrString(ops, "OpOverload") : NULL;
    packet_type = ops ? PyObject_GetAttrString(ops, "OpOverloadPacket") : NULL;
    Py_XDECREF(ops);
    PyErr_Clear();
    PyObject *co = PyImport_ImportModule("torch._library.custom_ops");
    customop_type = co ? PyObject_GetAttrString(co, "CustomOpDef") : NULL;
    Py_XDECREF(co);
    PyErr_Clear();
    return 0;
}

/* 1 if o is an instance of class t (NULL: no such class). */
static int is_a(PyObject *o, PyObject *t)
{
    return t && PyType_Check(t) && PyObject_TypeCheck(o, (PyTypeObject *)t);
}

/* Append overload ov's schema to list l; 0 or -1 (error set). */
static int add_schema(PyObject *l, PyObject *ov)
{
    PyObject *s = ov ? PyObject_GetAttrString(ov, "_schema") : NULL;
    int r = s ? PyList_Append(l, s) : -1;
    Py_XDECREF(s);
    return r;
}

/* The schemas of fn's overloads (a new list; a packet's every overload), or
 * NULL with no error when fn is not a library op or they cannot be read. */
static PyObject *op_schemas(PyObject *fn)
{
    int ov = is_a(fn, overload_type), pk = !ov && is_a(fn, packet_type);
    int co = !ov && !pk && is_a(fn, customop_type);
    if (!ov && !pk && !co)
        return NULL;
    PyObject *l = PyList_New(0), *names = NULL;
    int bad = !l;
    if (!bad && ov)
        bad = add_schema(l, fn);
    if (!bad && co) {
        PyObject *o = PyObject_GetAttrString(fn, "_opoverload");
        bad = add_schema(l, o);
        Py_XDECREF(o);
    }
    if (!bad && pk && !(bad = !(names = PyObject_CallMethod(fn, "overloads", NULL)))) {
        PyObject *seq = PySequence_Fast(names, "overloads");
        for (Py_ssize_t i = 0; seq && !bad && i < PySequence_Fast_GET_SIZE(seq); i++) {
            PyObject *o = PyObject_GetAttr(fn, PySequence_Fast_ITEMS(seq)[i]);
            bad = add_schema(l, o);
            Py_XDECREF(o);
        }
        bad |= !seq;
        Py_XDECREF(seq);
    }
    Py_XDECREF(names);
    if (bad || PyList_GET_SIZE(l) == 0) {
        Py_XDECREF(l);
        PyErr_Clear();
        return NULL;
    }
    return l;
}

/* 1 if schema s names an op of torch's own (aten::, prims::). */
static int builtin_schema(PyObject *s)
{
    PyObject *n = PyObject_GetAttrString(s, "name");
    const char *c = n && PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : NULL;
    int r = !c || !strncmp(c, "aten::", 6) || !strncmp(c, "prims::", 7);
    Py_XDECREF(n);
    PyErr_Clear();
    return r;
}

/* See trace.h: 1 if fn is a library op outside aten / prims. */
int cdy_libop_is(PyObject *fn)
{
    if (!is_a(fn, overload_type) && !is_a(fn, packet_type) && !is_a(fn, customop_type))
        return 0;
    PyObject *l = op_schemas(fn);
    int r = l && !builtin_schema(PyList_GET_ITEM(l, 0));
    Py_XDECREF(l);
    return r;
}

/* 1 if schema s returns an alias of an input (a return with alias info), -1 unread. */
static int returns_alias(PyObject *s)
{
    PyObject *rets = PyObject_GetAttrString(s, "returns");
    PyObject *seq = rets ? PySequence_Fast(rets, "returns") : NULL;
    int r = seq ? 0 : -1;
    for (Py_ssize_t i = 0; seq && r == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *ai = PyObject_GetAttrString(PySequence_Fast_ITEMS(seq)[i], "alias_info");
        r = ai ? ai != Py_None : -1;
        Py_XDECREF(ai);
    }
    Py_XDECREF(seq);
    Py_XDECREF(rets);
    return r;
}

/* Stop for op `what` with schema s: LIBOP_ALIAS when alias, else LIBOP_MUTATES; -1. */
static int stop_schema(tracer *tr, int alias, const char *what, PyObject *s)
{
    PyObject *str = PyObject_Str(s);
    const char *c = str ? PyUnicode_AsUTF8(str) : NULL;
    PyErr_Clear();
    c = c ? c : "?";
    int r = alias ? cdy_tr_stop(tr, LIBOP_ALIAS, what, c) : cdy_tr_stop(tr, LIBOP_MUTATES, what, c);
    Py_XDECREF(str);
    return r;
}

/* 1 if schema s mutates an input (is_mutable; unreadable counts as mutating:
 * never a wrong result), else 0; error cleared. */
static int schema_mutates(PyObject *s)
{
    PyObject *m = PyObject_GetAttrString(s, "is_mutable");
    int mut = m ? PyObject_IsTrue(m) != 0 : 1;
    Py_XDECREF(m);
    PyErr_Clear();
    return mut;
}

/* 1 if every schema of list l mutates an input (schema_mutates), else 0. */
static int all_mutate(PyObject *l)
{
    int all = 1;
    for (Py_ssize_t i = 0; all && i < PyList_GET_SIZE(l); i++)
        all = schema_mutates(PyList_GET_ITEM(l, i));
    return all;
}

/* See trace.h: 0 when fn is not a library op or is one that is opaque (outside
 * aten / prims) or functional (aten / prims), -1 (stopped: LIBOP_MUTATES /
 * LIBOP_ALIAS) otherwise.  An aten overload that writes an input
 * (torch.ops.aten.mul_.Tensor, normal_.default, add.out) stops too: the
 * tracer would take it for its functional form and drop the write (a packet
 * stops when every overload writes: aten.mul_, not aten.add with its .out). */
int cdy_libop_check(tracer *tr, PyObject *fn, const char *what)
{
    PyObject *l = op_schemas(fn);
    if (!l)
        return 0;
    int r = 0;
    for (Py_ssize_t i = 0; r == 0 && i < PyList_GET_SIZE(l); i++) {
        PyObject *s = PyList_GET_ITEM(l, i);
        if (builtin_schema(s)) {
            if (all_mutate(l))
                r = stop_schema(tr, 0, what, s);
            break;
        }
        int mut = schema_mutates(s);
        int alias = mut == 0 ? returns_alias(s) : 0;
        PyErr_Clear();
        if (mut)
            r = stop_schema(tr, 0, what, s);
        else if (alias != 0)
            r = stop_schema(tr, 1, what, s);
    }
    Py_DECREF(l);
    return r;
}

/* A probe's size for hint size n >= 2: distinct hints stay distinct, no
 * probe size is a hint size of 2..1000 by chance of n + c. */
static int64_t lo_moved(int64_t n)
{
    return 2 * n + 1001;
}

/* A meta tensor of m's dtype at m's sizes moved (lo_moved; 0 and 1 kept): a
 * new reference, or NULL with an error. */
static PyObject *lo_probe_tensor(const cdy_meta *m)
{
    PyObject *sz = PyTuple_New(m->ndim), *fn = PyObject_GetAttrString(cdy_torch, "empty");
    PyObject *kw = PyDict_New(), *dev = PyUnicode_FromString("meta"), *r = NULL;
    for (int d = 0; sz && d < m->ndim; d++)
        PyTuple_SET_ITEM(sz, d, PyLong_FromLongLong(m->sizes[d] >= 2 ? lo_moved(m->sizes[d])
                                                                        : m->sizes[d]));
    if (sz && fn && kw && dev && !PyDict_SetItemString(kw, "dtype", cdy_dtype_obj(m->dtype)) &&
        !PyDict_SetItemString(kw, "device", dev))
        r = PyObject_Call(fn, sz, kw);
    Py_XDECREF(dev);
    Py_XDECREF(sz);
    Py_XDECREF(fn);
    Py_XDECREF(kw);
    return r;
}

/* pn's call with its tensors as moved meta tensors, the frame hook off: the
 * result (new reference) or NULL with an error. */
static PyObject *lo_probe_call(const cdy_trace *t, const cdy_pynode *pn)
{
    PyObject *av[pn->nargs + 1], *r = NULL;
    int n = 0, ok = 1;
    for (; ok && n < pn->nargs; n++) {
        av[n] = pn->ref[n] >= 0 ? lo_probe_tensor(&t->graph.values[pn->ref[n]].meta)
                                : Py_XNewRef(pn->ref[n] == -1 ? pn->cst[n] : NULL);
        ok = av[n] != NULL;
    }
    if (ok) {
        Py_ssize_t nkw = pn->kwnames ? PyTuple_GET_SIZE(pn->kwnames) : 0;
        int hook = cdy_tls_state.enabled;
        cdy_tls_state.enabled = 0;
        r = PyObject_Vectorcall(pn->fn, av, (size_t)(pn->nargs - nkw), pn->kwnames);
        cdy_tls_state.enabled = hook;
    }
    for (int i = 0; i < n; i++)
        Py_XDECREF(av[i]);
    if (!r && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "an argument the probe cannot rebuild");
    return r;
}

/* 1 + value * CDY_MAX_NDIM + dim of the first tensor argument dim of pn with
 * hint size n, or 0. */
static int lo_source_dim(const cdy_trace *t, const cdy_pynode *pn, int64_t n)
{
    for (int i = 0; i < pn->nargs; i++) {
        const cdy_meta *m = pn->ref[i] >= 0 ? &t->graph.values[pn->ref[i]].meta : NULL;
        for (int d = 0; m && d < m->ndim; d++)
            if (m->sizes[d] == n)
                return 1 + pn->ref[i] * CDY_MAX_NDIM + d;
    }
    return 0;
}

int cdy_libop_size_map(const cdy_trace *t, const cdy_pynode *pn, int *map)
{
    if (!pn->opaque || pn->value < 0 || pn->item >= 0 || pn->value >= t->graph.nvalues)
        return 0;
    for (int i = 0; i < pn->nargs; i++)
        if (pn->ref[i] < -1)   /* a tuple or list argument: not rebuilt */
            return 0;
    const cdy_meta *om = &t->graph.values[pn->value].meta;
    PyObject *r = lo_probe_call(t, pn);
    PyObject *shape = r && PyObject_TypeCheck(r, (PyTypeObject *)cdy_tensor_type) ? PyObject_GetAttrString(r, "shape")
                                                                   : NULL;
    PyObject *seq = shape ? PySequence_Fast(shape, "shape") : NULL;
    int ok = seq && PySequence_Fast_GET_SIZE(seq) == om->ndim;
    for (int d = 0; ok && d < om->ndim; d++) {
        long long got = PyLong_AsLongLong(PySequence_Fast_ITEMS(seq)[d]);
        int64_t hint = om->sizes[d];
        map[d] = got == hint ? 0 : hint >= 2 && got == lo_moved(hint) ? lo_source_dim(t, pn, hint)
                                                                        : -1;
        ok = map[d] >= 0 && !(got != hint && map[d] == 0);
    }
    Py_XDECREF(seq);
    Py_XDECREF(shape);
    Py_XDECREF(r);
    PyErr_Clear();
    return ok;
}
