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
 * LIBOP_ALIAS) and the frame runs the op eagerly.                        */
#include "trace/trace.h"

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

/* See trace.h: 0 when fn is not a library op outside aten or is one that is
 * opaque, -1 (stopped: LIBOP_MUTATES / LIBOP_ALIAS) otherwise. */
int cdy_libop_check(tracer *tr, PyObject *fn, const char *what)
{
    PyObject *l = op_schemas(fn);
    if (!l)
        return 0;
    int r = 0;
    for (Py_ssize_t i = 0; r == 0 && i < PyList_GET_SIZE(l); i++) {
        PyObject *s = PyList_GET_ITEM(l, i);
        if (builtin_schema(s))
            break;
        PyObject *m = PyObject_GetAttrString(s, "is_mutable");
        int mut = m ? PyObject_IsTrue(m) : -1;
        Py_XDECREF(m);
        int alias = mut == 0 ? returns_alias(s) : 0;
        PyErr_Clear();
        if (mut != 0)   /* unreadable counts as mutating: never a wrong result */
            r = stop_schema(tr, 0, what, s);
        else if (alias != 0)
            r = stop_schema(tr, 1, what, s);
    }
    Py_DECREF(l);
    return r;
}
