/* objects.c - instances of Python classes built in the frame (TV_INST).
 *
 *   cls(*args, **kw)  -> an instance tvar: its __dict__ is a DICT the trace
 *                        owns (self), the contents of a builtin container
 *                        base (dict, OrderedDict, list) another (store);
 *                        __init__ (a dataclass's generated one, a
 *                        ModelOutput's __post_init__, a cache's) is traced
 *   inst.name         -> Python's attribute lookup: data descriptors of the
 *                        class (properties: their getter traced), the
 *                        instance's __dict__, methods bound to the instance,
 *                        class attributes, a Python __getattr__
 *   inst.name = v     -> the class's Python __setattr__ traced, or the store
 *   inst[k], len, in, truth, iteration -> the class's Python dunders traced,
 *                        or the builtin base's behaviour on store
 *   super().m / dict.m(inst, ...) of a builtin base -> on store / __dict__
 * An instance that escapes (returned, stored into an object of the caller)
 * is rebuilt after the graph by _cdy_new_object(cls, attrs, contents):
 * cls.__new__(cls), the builtin base's items, then object.__setattr__ of
 * each attribute: __init__ does not run again.  One that does not escape
 * leaves no trace but the effects its methods had, as in TorchDynamo. */
#include "trace/trace.h"

#include <string.h>

static PyObject *new_object_fn, *odict_type, *str_new, *str_init, *str_getattr, *str_setattr,
    *str_getattribute, *str_dict, *str_class;

/* _cdy_new_object(cls, attrs, contents): see the file comment; new ref or NULL. */
static PyObject *new_object_impl(PyObject *self, PyObject *const *args, Py_ssize_t n)
{
    (void)self;
    if (n != 3 || !PyType_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "_cdy_new_object(cls, attrs, contents)");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    PyObject *empty = PyTuple_New(0);
    PyObject *obj = empty ? cls->tp_new(cls, empty, NULL) : NULL;
    Py_XDECREF(empty);
    if (!obj)
        return NULL;
    PyObject *contents = args[2];
    int bad = 0;
    if (PyDict_Check(contents)) {
        PyObject *base = (PyObject *)cls;   /* the builtin base's __setitem__ (OrderedDict keeps order) */
        for (PyTypeObject *b = cls; b && (b->tp_flags & Py_TPFLAGS_HEAPTYPE); b = b->tp_base)
            base = (PyObject *)b->tp_base;
        PyObject *setitem = PyObject_GetAttrString(base, "__setitem__"), *k, *v;
        Py_ssize_t pos = 0;
        while (setitem && !bad && PyDict_Next(contents, &pos, &k, &v)) {
            PyObject *r = PyObject_CallFunctionObjArgs(setitem, obj, k, v, NULL);
            bad = !r;
            Py_XDECREF(r);
        }
        bad |= !setitem;
        Py_XDECREF(setitem);
    }
    else if (PyList_Check(contents))
        bad = PyList_SetSlice(obj, 0, 0, contents) < 0;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (!bad && PyDict_Next(args[1], &pos, &k, &v))
        bad = PyObject_GenericSetAttr(obj, k, v) < 0;
    if (bad)
        Py_CLEAR(obj);
    return obj;
}

/* One-time lookups; 0 or -1 (error set). */
static int objects_init(void)
{
    if (new_object_fn)
        return 0;
    static PyMethodDef def = {"_cdy_new_object", (PyCFunction)(void (*)(void))new_object_impl,
                              METH_FASTCALL, "an object built in a traced frame, rebuilt from "
                              "its attributes and contents (a C function: not traced)"};
    PyObject *coll = PyImport_ImportModule("collections");
    odict_type = coll ? PyObject_GetAttrString(coll, "OrderedDict") : NULL;
    Py_XDECREF(coll);
    str_new = PyUnicode_InternFromString("__new__");
    str_init = PyUnicode_InternFromString("__init__");
    str_getattr = PyUnicode_InternFromString("__getattr__");
    str_setattr = PyUnicode_InternFromString("__setattr__");
    str_getattribute = PyUnicode_InternFromString("__getattribute__");
    str_dict = PyUnicode_InternFromString("__dict__");
    str_class = PyUnicode_InternFromString("__class__");
    new_object_fn = PyCFunction_New(&def, NULL);
    return new_object_fn && odict_type && str_new && str_init && str_getattr && str_setattr &&
           str_getattribute && str_dict && str_class ? 0 : -1;
}

/* The builtin type cls's instances are built on: object, dict, OrderedDict or
 * list; NULL when it is another (str, tuple, a C extension's type...). */
static PyTypeObject *builtin_base(PyTypeObject *cls)
{
    PyObject *mro = cls->tp_mro;
    for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *b = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (b->tp_flags & Py_TPFLAGS_HEAPTYPE)
            continue;
        if (b == &PyBaseObject_Type || b == &PyDict_Type || b == &PyList_Type ||
            (PyObject *)b == odict_type)
            return b;
        return NULL;
    }
    return NULL;
}

/* See trace.h. */
int cdy_obj_buildable(PyObject *cls)
{
    if (!PyType_Check(cls) || objects_init()) {
        PyErr_Clear();
        return 0;
    }
    PyTypeObject *tp = (PyTypeObject *)cls, *base;
    if (!(tp->tp_flags & Py_TPFLAGS_HEAPTYPE) || Py_TYPE(cls)->tp_call != PyType_Type.tp_call ||
        PyType_IsSubtype(tp, (PyTypeObject *)PyExc_BaseException) ||
        PyType_IsSubtype(tp, (PyTypeObject *)cdy_module_type) ||
        PyType_IsSubtype(tp, (PyTypeObject *)cdy_tensor_type) || !(base = builtin_base(tp)))
        return 0;
    return _PyType_Lookup(tp, str_new) == _PyType_Lookup(base, str_new);
}

/* The class of instance tvar v (borrowed). */
static PyTypeObject *cls_of(const tvar *v)
{
    return (PyTypeObject *)v->obj;
}

/* 1 if fn (found on a class) is a Python function: a method we trace. */
static int python_fn(PyObject *fn)
{
    return fn && PyFunction_Check(fn);
}

/* fn(inst, *args) traced (fn a Python function found on inst's class). */
static tvar *call_with_self(tracer *tr, PyObject *fn, tvar *inst, tvar **args, int nargs,
                            PyObject *kwnames)
{
    tvar **all = cdy_prepend(tr, inst, args, nargs);
    return all ? cdy_inline(tr, fn, all, nargs + 1, kwnames) : NULL;
}

/* A constant str tvar for name. */
static tvar *name_tv(tracer *tr, PyObject *name)
{
    return cdy_tv_const(tr, Py_NewRef(name));
}

/* ---- building --------------------------------------------------------------- */

/* See trace.h. */
tvar *cdy_obj_new(tracer *tr, PyObject *cls, tvar **args, int nargs, PyObject *kwnames)
{
    PyTypeObject *tp = (PyTypeObject *)cls, *base = builtin_base(tp);
    tvar *inst = cdy_tv_new(tr, TV_INST);
    tvar *attrs = inst ? cdy_tv_new(tr, TV_DICT) : NULL;
    if (!attrs || !cdy_tr_keep(tr, Py_NewRef(cls)))
        return NULL;
    inst->obj = cls;
    inst->self = attrs;
    if (base != &PyBaseObject_Type &&
        !(inst->store = cdy_tv_new(tr, base == &PyList_Type ? TV_LIST : TV_DICT)))
        return NULL;
    PyObject *init = _PyType_Lookup(tp, str_init);
    if (python_fn(init)) {
        tvar *r = call_with_self(tr, init, inst, args, nargs, kwnames);
        if (!r)
            return NULL;
        if (r->kind != TV_CONST || r->obj != Py_None) {
            cdy_tr_stop(tr, INIT_RETURNED);
            return NULL;
        }
        return inst;
    }
    if (init == _PyType_Lookup(base, str_init) &&
        cdy_obj_call_builtin(tr, init, inst, args, nargs, kwnames))
        return inst;
    if (tr->t->status == CDY_TRACE_OK)
        cdy_tr_stop(tr, CONSTRUCT, tp->tp_name);
    return NULL;
}

/* ---- attributes ----------------------------------------------------------------- */

/* getattr(inst, name) by object.__getattribute__'s rules; *missing set (and
 * NULL returned, not stopped) when the lookup ends in AttributeError. */
static tvar *generic_getattr(tracer *tr, tvar *inst, PyObject *name, int *missing)
{
    PyTypeObject *cls = cls_of(inst);
    *missing = 0;
    if (!PyUnicode_Compare(name, str_class))
        return cdy_wrap(tr, (PyObject *)cls, NULL, 0);
    if (!PyUnicode_Compare(name, str_dict))
        return inst->self;
    PyObject *d = _PyType_Lookup(cls, name);
    if (d && PyObject_TypeCheck(d, &PyProperty_Type)) {
        PyObject *g = cdy_tr_keep(tr, PyObject_GetAttrString(d, "fget"));   /* the getter, traced */
        if (!g || g == Py_None) {
            PyErr_Clear();
            *missing = 1;
            return NULL;
        }
        if (cdy_tr_guard_class_attr(tr, inst, name, d))
            return NULL;
        return call_with_self(tr, g, inst, NULL, 0, NULL);
    }
    int slot = d && Py_IS_TYPE(d, &PyMemberDescr_Type);
    if (d && !slot && Py_TYPE(d)->tp_descr_set) {
        cdy_tr_stop(tr, OBJ_DESCRIPTOR, PyUnicode_AsUTF8(name), Py_TYPE(d)->tp_name);
        return NULL;
    }
    int i = cdy_dict_find(tr, inst->self, name);
    if (i == -2)
        return NULL;
    if (i >= 0)
        return inst->self->items[i];
    if (slot) {
        *missing = 1;
        return NULL;
    }
    if (d) {
        if (PyFunction_Check(d)) {
            tvar *b = cdy_tv_new(tr, TV_BOUND);
            if (b) {
                b->obj = d;
                b->self = inst;
            }
            return b;
        }
        if (PyObject_TypeCheck(d, &PyClassMethod_Type) || PyObject_TypeCheck(d, &PyStaticMethod_Type)) {
            PyObject *fn = cdy_tr_keep(tr, PyObject_GetAttrString(d, "__func__"));
            tvar *f = fn ? cdy_wrap(tr, fn, NULL, 0) : NULL;
            if (!f || PyObject_TypeCheck(d, &PyStaticMethod_Type))
                return f;
            tvar *c = cdy_wrap(tr, (PyObject *)cls, NULL, 0), *b = c ? cdy_tv_new(tr, TV_BOUND) : NULL;
            if (b) {
                b->obj = fn;
                b->self = c;
            }
            return b;
        }
        if (PyObject_TypeCheck(d, &PyMethodDescr_Type) || PyObject_TypeCheck(d, &PyWrapperDescr_Type)) {
            tvar *b = cdy_tv_new(tr, TV_BMETH);   /* a method of the builtin base */
            if (b) {
                b->obj = d;
                b->self = inst;
            }
            return b;
        }
        if (Py_TYPE(d)->tp_descr_get) {
            cdy_tr_stop(tr, OBJ_DESCRIPTOR, PyUnicode_AsUTF8(name), Py_TYPE(d)->tp_name);
            return NULL;
        }
        return cdy_fixed_value(tr, d);   /* a class attribute: fixed with the class */
    }
    PyObject *ga = _PyType_Lookup(cls, str_getattr);
    if (python_fn(ga)) {
        tvar *n = name_tv(tr, name);
        return n ? call_with_self(tr, ga, inst, &n, 1, NULL) : NULL;
    }
    *missing = 1;
    return NULL;
}

/* See trace.h. */
tvar *cdy_obj_getattr(tracer *tr, tvar *inst, PyObject *name)
{
    PyObject *gab = _PyType_Lookup(cls_of(inst), str_getattribute);
    if (python_fn(gab)) {   /* the class's own __getattribute__, traced */
        tvar *n = name_tv(tr, name);
        return n ? call_with_self(tr, gab, inst, &n, 1, NULL) : NULL;
    }
    int missing;
    tvar *r = generic_getattr(tr, inst, name, &missing);
    if (missing)
        cdy_tr_stop(tr, OBJ_NO_ATTR, cls_of(inst)->tp_name, PyUnicode_AsUTF8(name));
    return r;
}

/* See trace.h: the lookup traced; an AttributeError it raises is "no". */
int cdy_obj_hasattr(tracer *tr, tvar *inst, PyObject *name, tvar **value)
{
    int missing = 0;
    tvar *r;
    PyObject *gab = _PyType_Lookup(cls_of(inst), str_getattribute);
    if (python_fn(gab)) {
        tvar *n = name_tv(tr, name);
        r = n ? call_with_self(tr, gab, inst, &n, 1, NULL) : NULL;
    }
    else
        r = generic_getattr(tr, inst, name, &missing);
    if (!r && !missing && cdy_exc_catch(tr, PyExc_AttributeError))
        missing = 1;
    if (value)
        *value = r;
    return missing ? 0 : r ? 1 : -1;
}

/* See trace.h: object.__setattr__(inst, name, v). */
int cdy_obj_set_plain(tracer *tr, tvar *inst, PyObject *name, tvar *v)
{
    PyObject *d = _PyType_Lookup(cls_of(inst), name);
    if (d && PyObject_TypeCheck(d, &PyProperty_Type)) {
        PyObject *fset = PyObject_GetAttrString(d, "fset");
        int r = -1;
        if (!fset || fset == Py_None)
            cdy_tr_stop(tr, OBJ_NO_ATTR, cls_of(inst)->tp_name, PyUnicode_AsUTF8(name));
        else if (cdy_tr_keep(tr, Py_NewRef(fset)))
            r = call_with_self(tr, fset, inst, &v, 1, NULL) ? 0 : -1;
        Py_XDECREF(fset);
        PyErr_Clear();
        return r;
    }
    if (d && !Py_IS_TYPE(d, &PyMemberDescr_Type) && Py_TYPE(d)->tp_descr_set)
        return cdy_tr_stop(tr, OBJ_DESCRIPTOR, PyUnicode_AsUTF8(name), Py_TYPE(d)->tp_name);
    return cdy_dict_set(tr, inst->self, name, v);
}

/* See trace.h. */
int cdy_obj_setattr(tracer *tr, tvar *inst, PyObject *name, tvar *v)
{
    PyObject *sa = _PyType_Lookup(cls_of(inst), str_setattr);
    if (python_fn(sa)) {
        tvar *a[2] = {name_tv(tr, name), v};
        return a[0] && call_with_self(tr, sa, inst, a, 2, NULL) ? 0 : -1;
    }
    if (sa != _PyType_Lookup(&PyBaseObject_Type, str_setattr))
        return cdy_tr_stop(tr, STORE_ATTR_SETATTR);
    return cdy_obj_set_plain(tr, inst, name, v);
}

/* See trace.h: del inst.name (the class's Python __delattr__ traced, else object's). */
int cdy_obj_delattr(tracer *tr, tvar *inst, PyObject *name)
{
    static PyObject *s_delattr;
    if (!s_delattr && !(s_delattr = PyUnicode_InternFromString("__delattr__")))
        return cdy_tr_stop_exc(tr, PY_ERROR);
    PyObject *da = _PyType_Lookup(cls_of(inst), s_delattr);
    if (python_fn(da)) {
        tvar *n = name_tv(tr, name);
        return n && call_with_self(tr, da, inst, &n, 1, NULL) ? 0 : -1;
    }
    PyObject *d = _PyType_Lookup(cls_of(inst), name);
    if (da != _PyType_Lookup(&PyBaseObject_Type, s_delattr) ||
        (d && !Py_IS_TYPE(d, &PyMemberDescr_Type) && Py_TYPE(d)->tp_descr_set))
        return cdy_tr_stop(tr, OBJ_DESCRIPTOR, PyUnicode_AsUTF8(name), Py_TYPE(da)->tp_name);
    int i = cdy_dict_find(tr, inst->self, name);
    if (i == -1)
        return cdy_tr_stop(tr, OBJ_NO_ATTR, cls_of(inst)->tp_name, PyUnicode_AsUTF8(name));
    tvar *k = i >= 0 ? name_tv(tr, name) : NULL;
    return k ? cdy_container_delitem(tr, inst->self, k) : -1;
}

/* ---- special methods ------------------------------------------------------------- */

/* See trace.h. */
tvar *cdy_obj_dunder(tracer *tr, tvar *inst, const char *name, tvar **args, int nargs, int *handled)
{
    PyObject *fn = PyObject_GetAttrString((PyObject *)cls_of(inst), name);
    *handled = python_fn(fn);
    if (!*handled) {
        Py_XDECREF(fn);
        PyErr_Clear();
        return NULL;
    }
    if (!cdy_tr_keep(tr, fn))
        return NULL;
    return call_with_self(tr, fn, inst, args, nargs, NULL);
}

/* A builtin base's method `name` on inst's contents; NULL when stopped. */
static tvar *store_method(tracer *tr, tvar *inst, const char *name, tvar **args, int nargs,
                          PyObject *kwnames)
{
    if (!inst->store) {
        cdy_tr_stop(tr, OBJ_NO_ATTR, cls_of(inst)->tp_name, name);
        return NULL;
    }
    return cdy_container_method(tr, inst->store, name, args, nargs, kwnames);
}

/* See trace.h: name's special method on inst (Python dunder traced, else the
 * builtin base's behaviour); NULL when stopped. */
tvar *cdy_obj_special(tracer *tr, tvar *inst, const char *name, tvar **args, int nargs)
{
    int handled;
    tvar *r = cdy_obj_dunder(tr, inst, name, args, nargs, &handled);
    if (handled || tr->t->status != CDY_TRACE_OK)
        return r;
    return store_method(tr, inst, name, args, nargs, NULL);
}

/* See trace.h. */
int cdy_obj_truth(tracer *tr, tvar *inst)
{
    int handled;
    tvar *r = cdy_obj_dunder(tr, inst, "__bool__", NULL, 0, &handled);
    if (!handled && tr->t->status == CDY_TRACE_OK)
        r = cdy_obj_dunder(tr, inst, "__len__", NULL, 0, &handled);
    if (handled)
        return r ? cdy_truth(tr, r) : -1;
    if (tr->t->status != CDY_TRACE_OK)
        return -1;
    return inst->store ? inst->store->n > 0 : 1;
}

/* See trace.h. */
tvar *cdy_obj_iter(tracer *tr, tvar *inst)
{
    int handled;
    tvar *r = cdy_obj_dunder(tr, inst, "__iter__", NULL, 0, &handled);
    if (handled)
        return r ? cdy_iterate(tr, r) : NULL;
    if (tr->t->status != CDY_TRACE_OK)
        return NULL;
    if (!inst->store) {
        cdy_tr_stop(tr, ITER_VALUE);
        return NULL;
    }
    return cdy_iterate(tr, inst->store);
}

/* See trace.h: == and != through the class's Python __eq__ / __ne__, else identity;
 * other comparisons through their Python dunder. */
tvar *cdy_obj_compare(tracer *tr, int oparg, tvar **args)
{
    static const char *names[] = {"__lt__", "__le__", "__eq__", "__ne__", "__gt__", "__ge__"};
    static const char *swapped[] = {"__gt__", "__ge__", "__eq__", "__ne__", "__lt__", "__le__"};
    int handled = 0;
    tvar *r = NULL;
    if (args[0]->kind == TV_INST)
        r = cdy_obj_dunder(tr, args[0], names[oparg], &args[1], 1, &handled);
    if (!handled && tr->t->status == CDY_TRACE_OK && args[1]->kind == TV_INST)
        r = cdy_obj_dunder(tr, args[1], swapped[oparg], &args[0], 1, &handled);
    if (handled || tr->t->status != CDY_TRACE_OK) {
        if (r && r->kind == TV_CONST && r->obj == Py_NotImplemented && (oparg == 2 || oparg == 3))
            return cdy_tv_const(tr, PyBool_FromLong((args[0] == args[1]) == (oparg == 2)));
        return r;
    }
    if (oparg == 2 || oparg == 3)
        return cdy_tv_const(tr, PyBool_FromLong((args[0] == args[1]) == (oparg == 2)));
    cdy_tr_stop(tr, OPERATOR_UNSUPPORTED, names[oparg]);
    return NULL;
}

/* ---- builtin methods on instances and containers -------------------------------- */

/* See trace.h. */
tvar *cdy_obj_call_builtin(tracer *tr, PyObject *descr, tvar *self, tvar **args, int nargs,
                           PyObject *kwnames)
{
    PyTypeObject *owner = PyDescr_TYPE(descr);
    const char *name = PyUnicode_AsUTF8(PyDescr_NAME(descr));
    int nkw = kwnames ? (int)PyTuple_GET_SIZE(kwnames) : 0;
    if (!name)
        return cdy_tr_stop_exc(tr, PY_ERROR), NULL;
    if (self->kind == TV_INST && owner == &PyBaseObject_Type) {
        if (!strcmp(name, "__setattr__") && nargs == 2 && !nkw && args[0]->kind == TV_CONST &&
            PyUnicode_Check(args[0]->obj))
            return cdy_obj_set_plain(tr, self, args[0]->obj, args[1]) ? NULL
                                                                      : cdy_tv_const(tr, Py_NewRef(Py_None));
        if (!strcmp(name, "__getattribute__") && nargs == 1 && !nkw && args[0]->kind == TV_CONST &&
            PyUnicode_Check(args[0]->obj)) {
            int missing;
            tvar *r = generic_getattr(tr, self, args[0]->obj, &missing);
            if (missing)
                cdy_tr_stop(tr, OBJ_NO_ATTR, cls_of(self)->tp_name, PyUnicode_AsUTF8(args[0]->obj));
            return r;
        }
        if (!strcmp(name, "__init__") && !nargs)
            return cdy_tv_const(tr, Py_NewRef(Py_None));
    }
    if (self->kind == TV_INST && self->store && owner != &PyBaseObject_Type) {
        if (!strcmp(name, "__init__")) {   /* dict(mapping, **kw) / list(iterable) */
            tvar *r = !strcmp(owner->tp_name, "list")
                          ? (nargs <= 1 && !nkw && (!nargs || !cdy_list_extend(tr, self->store, args[0]))
                                 ? cdy_tv_const(tr, Py_NewRef(Py_None)) : NULL)
                          : cdy_container_method(tr, self->store, "update", args, nargs, kwnames);
            if (!r && tr->t->status == CDY_TRACE_OK)
                cdy_tr_stop(tr, CONSTRUCT, cls_of(self)->tp_name);
            return r;
        }
        return cdy_container_method(tr, self->store, name, args, nargs, kwnames);
    }
    if (self->kind == TV_DICT || self->kind == TV_LIST || self->kind == TV_SET)
        return cdy_container_method(tr, self, name, args, nargs, kwnames);
    if (self->kind == TV_OBJ && self->src)
        return cdy_frame_builtin(tr, descr, self, args, nargs, kwnames);
    cdy_tr_stop(tr, METHOD_UNSUPPORTED, name, owner->tp_name);
    return NULL;
}

/* See trace.h: a read-only method of dict on an object of the caller (a dict
 * subclass guarded by identity, whose item reads are dict's own): `k in o`
 * with a CONTAINS guard, o[k] through its item source. */
tvar *cdy_frame_builtin(tracer *tr, PyObject *descr, tvar *self, tvar **args, int nargs,
                        PyObject *kwnames)
{
    const char *name = PyUnicode_AsUTF8(PyDescr_NAME(descr));
    PyTypeObject *tp = Py_TYPE(self->obj);
    int getter = name && (!strcmp(name, "get") || !strcmp(name, "__getitem__") ||
                          !strcmp(name, "__contains__"));
    static PyObject *str_getitem;
    if (!str_getitem && !(str_getitem = PyUnicode_InternFromString("__getitem__")))
        return cdy_tr_stop_exc(tr, PY_ERROR), NULL;
    if (!getter || !PyDict_Check(self->obj) || kwnames || nargs < 1 || nargs > 2 ||
        args[0]->kind != TV_CONST ||
        _PyType_Lookup(tp, str_getitem) != _PyType_Lookup(&PyDict_Type, str_getitem)) {
        cdy_tr_stop(tr, METHOD_UNSUPPORTED, name ? name : "?", tp->tp_name);
        return NULL;
    }
    int has = cdy_contains_guarded(tr, self, args[0]);
    if (has < 0) {
        if (has == -1)
            cdy_tr_stop(tr, IN_OP);
        return NULL;
    }
    if (name[2] == 'c')   /* __contains__ */
        return cdy_tv_const(tr, PyBool_FromLong(has));
    if (!has) {
        if (name[0] == 'g')
            return nargs == 2 ? args[1] : cdy_tv_const(tr, Py_NewRef(Py_None));
        cdy_tr_stop(tr, KEY_ERROR);
        return NULL;
    }
    PyObject *v = PyDict_GetItemWithError(self->obj, args[0]->obj);
    const cdy_src *s = v ? cdy_src_step(tr, self->src, args[0]->obj, 1) : NULL;
    if (!s) {
        cdy_tr_stop(tr, SOURCE_TOO_DEEP, name);
        return NULL;
    }
    return cdy_wrap(tr, v, s, 1);
}

/* ---- rebuilding -------------------------------------------------------------------- */

/* An OBJECT ret: objects[index] of the trace; NULL when stopped. */
static cdy_ret *object_ref(tracer *tr, int index)
{
    cdy_ret *r = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_ret));
    if (!r) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    r->kind = CDY_RET_OBJECT;
    r->index = index;
    return r;
}

/* See trace.h. */
cdy_ret *cdy_object_ret(tracer *tr, tvar *v, cdy_ret *(*make_call)(tracer *, tvar *,
                        cdy_ret *(*)(tracer *, tvar *)), cdy_ret *(*make_ret)(tracer *, tvar *))
{
    cdy_trace *t = tr->t;
    if (v->built > 0)
        return object_ref(tr, v->built - 1);
    if (v->built < 0) {   /* it holds itself */
        cdy_tr_stop(tr, OBJECT_CYCLE);
        return NULL;
    }
    v->built = -1;
    cdy_ret *call = make_call(tr, v, make_ret);   /* inner objects are made first */
    if (!call)
        return NULL;
    if (t->nobjects == t->cap_objects) {
        int cap = t->cap_objects ? 2 * t->cap_objects : 8;
        cdy_ret **o = cdy_arena_alloc(&t->arena, sizeof(cdy_ret *) * (size_t)cap);
        if (!o) {
            cdy_tr_stop(tr, OUT_OF_MEMORY);
            return NULL;
        }
        if (t->nobjects)
            memcpy(o, t->objects, sizeof(cdy_ret *) * (size_t)t->nobjects);
        t->objects = o;
        t->cap_objects = cap;
    }
    t->objects[t->nobjects] = call;
    v->built = ++t->nobjects;
    return object_ref(tr, v->built - 1);
}

/* _cdy_new_object(cls, attrs, contents) for instance inst; NULL when stopped. */
static cdy_ret *inst_call(tracer *tr, tvar *inst, cdy_ret *(*make_ret)(tracer *, tvar *))
{
    cdy_trace *t = tr->t;
    cdy_ret *r = cdy_arena_alloc(&t->arena, sizeof(cdy_ret));
    cdy_ret **items = cdy_arena_alloc(&t->arena, sizeof(cdy_ret *) * 3);
    cdy_ret *cls = cdy_arena_alloc(&t->arena, sizeof(cdy_ret));
    cdy_ret *none = cdy_arena_alloc(&t->arena, sizeof(cdy_ret));
    if (!r || !items || !cls || !none) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    cls->kind = none->kind = CDY_RET_CONST;
    cls->obj = inst->obj;
    none->obj = Py_None;
    items[0] = cls;
    tvar *contents = inst->store ? cdy_container_copy(tr, inst->store) : NULL;
    if (inst->store && !contents)
        return NULL;
    if (contents)
        contents->obj = NULL;   /* a plain dict / list: the helper writes it through the base */
    if (!(items[1] = make_ret(tr, inst->self)) || !(items[2] = contents ? make_ret(tr, contents) : none))
        return NULL;
    r->kind = CDY_RET_CALL;
    r->obj = new_object_fn;
    r->n = r->index = 3;
    r->items = items;
    return r;
}

/* See trace.h. */
cdy_ret *cdy_obj_ret(tracer *tr, tvar *inst, cdy_ret *(*make_ret)(tracer *, tvar *))
{
    return cdy_object_ret(tr, inst, inst_call, make_ret);
}

/* ---- copy.copy / copy.deepcopy ------------------------------------------------------ */

typedef struct {
    int n;
    tvar *from[64], *to[64];   /* deepcopy's memo: each value copied once */
} copy_memo;

static tvar *copy_value(tracer *tr, tvar *v, int deep, copy_memo *m);

/* 1 if instances of cls copy by their __dict__ (object's reduce, no copy hooks, no slots). */
static int copies_by_dict(PyTypeObject *cls)
{
    static const char *hooks[] = {"__copy__", "__deepcopy__", "__reduce__", "__reduce_ex__",
                                  "__getstate__", "__setstate__", "__slots__", NULL};
    for (int i = 0; hooks[i]; i++) {
        PyObject *n = PyUnicode_InternFromString(hooks[i]);
        PyObject *d = n ? _PyType_Lookup(cls, n) : NULL;
        PyObject *base = n ? _PyType_Lookup(&PyBaseObject_Type, n) : NULL;
        Py_XDECREF(n);
        if (d && d != base)
            return 0;
    }
    return cls->tp_dictoffset != 0;
}

/* A copy of the items of container c (deep: each item copied); NULL when stopped. */
static tvar *copy_container(tracer *tr, tvar *c, int deep, copy_memo *m)
{
    tvar *r = c->kind == TV_SET ? cdy_set_from(tr, NULL) : cdy_container_copy(tr, c);
    if (!r)
        return NULL;
    if (m->n < 64) {
        m->from[m->n] = c;
        m->to[m->n++] = r;
    }
    if (c->kind == TV_SET)
        return cdy_set_update(tr, r, c) ? NULL : r;   /* members are constants */
    for (int i = 0; deep && i < r->n; i++)
        if (!(r->items[i] = copy_value(tr, r->items[i], 1, m)))
            return NULL;
    if (r->kind == TV_TUPLE) {   /* a tuple whose items did not change is itself */
        int same = 1;
        for (int i = 0; i < r->n && same; i++)
            same = r->items[i] == c->items[i];
        if (same)
            return c;
    }
    return r;
}

/* A new instance of inst's class with copies of its attributes and contents. */
static tvar *copy_inst(tracer *tr, tvar *inst, tvar *attrs, int deep, copy_memo *m)
{
    tvar *r = cdy_tv_new(tr, TV_INST);
    if (!r)
        return NULL;
    r->obj = inst->obj;
    if (m->n < 64) {
        m->from[m->n] = inst;
        m->to[m->n++] = r;
    }
    if (!(r->self = copy_container(tr, attrs, deep, m)))
        return NULL;
    r->self->src = NULL;
    if (inst->kind == TV_INST && inst->store &&
        !(r->store = copy_container(tr, inst->store, deep, m)))
        return NULL;
    return r;
}

/* An object of the caller (a source) copied: its class's instances copy by __dict__, which
 * is read through its source (guarded: its keys, each value) into a new instance. */
static tvar *copy_frame_object(tracer *tr, tvar *v, int deep, copy_memo *m)
{
    static PyObject *s_dict;
    PyTypeObject *cls = Py_TYPE(v->obj);
    if (!s_dict && !(s_dict = PyUnicode_InternFromString("__dict__")))
        return cdy_tr_stop_exc(tr, PY_ERROR), NULL;
    if (!v->src || !cdy_obj_buildable((PyObject *)cls) || !copies_by_dict(cls) ||
        builtin_base(cls) != &PyBaseObject_Type) {
        cdy_tr_stop(tr, COPY_VALUE, cls->tp_name);
        return NULL;
    }
    PyObject **dp = _PyObject_GetDictPtr(v->obj);
    const cdy_src *ds = cdy_src_step(tr, v->src, s_dict, 0);
    tvar *attrs = dp && *dp && ds ? cdy_wrap(tr, *dp, ds, 1) : NULL;
    if (!attrs || attrs->kind != TV_DICT) {
        if (tr->t->status == CDY_TRACE_OK)
            cdy_tr_stop(tr, COPY_VALUE, cls->tp_name);
        return NULL;
    }
    tvar tmp = *v;
    tmp.obj = (PyObject *)cls;
    tvar *r = copy_inst(tr, &tmp, attrs, deep, m);
    return r;
}

/* copy.copy (deep 0) / copy.deepcopy (deep 1) of v; NULL when stopped. */
static tvar *copy_value(tracer *tr, tvar *v, int deep, copy_memo *m)
{
    for (int i = 0; i < m->n; i++)
        if (m->from[i] == v)
            return m->to[i];
    switch (v->kind) {
    case TV_CONST:
        return v;   /* immutable */
    case TV_TUPLE:
        return deep ? copy_container(tr, v, 1, m) : v;
    case TV_LIST: case TV_DICT: case TV_SET:
        return copy_container(tr, v, deep, m);
    case TV_INST:
        if (!copies_by_dict(cls_of(v))) {
            cdy_tr_stop(tr, COPY_VALUE, cls_of(v)->tp_name);
            return NULL;
        }
        return copy_inst(tr, v, v->self, deep, m);
    case TV_OBJ:
        if (PyType_Check(v->obj) || PyFunction_Check(v->obj) || PyCFunction_Check(v->obj) ||
            PyModule_Check(v->obj))
            return v;   /* copied as themselves, as the copy module does */
        return copy_frame_object(tr, v, deep, m);
    default:
        cdy_tr_stop(tr, COPY_VALUE, Py_TYPE(cdy_tvar_type(v))->tp_name);
        return NULL;
    }
}

/* See trace.h. */
tvar *cdy_copy(tracer *tr, tvar *v, int deep)
{
    copy_memo m;
    m.n = 0;
    return copy_value(tr, v, deep, &m);
}
