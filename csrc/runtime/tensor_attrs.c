/* tensor_attrs.c - reading a tensor's dtype, shape, data pointer... on the
 * per-call path without PyObject_GetAttr: the C function that implements the
 * attribute on the tensor's type (a getset's getter, a METH_NOARGS method) is
 * looked up once per type and called directly.  A cache entry is valid while
 * the type keeps its version tag: CPython gives a type a new tag whenever it
 * or a base class changes, so a patched attribute is resolved again. */
#include "runtime/runtime.h"

#define TA_TYPES 4

typedef struct {
    PyTypeObject *type;              /* borrowed; the tag check makes a reused address harmless */
    unsigned int version;
    PyGetSetDef *get[CDY_TA_COUNT];  /* getset, or */
    PyMethodDef *meth[CDY_TA_COUNT]; /* method callable without arguments; both NULL: generic path */
} ta_entry;

static ta_entry ta_cache[TA_TYPES];
static int ta_next;

/* Interned name of attribute a. */
static PyObject *ta_name(int a)
{
    PyObject *names[CDY_TA_COUNT] = {
#define CDY_X(n) cdy_str.n,
        CDY_TENSOR_ATTRS(CDY_X)
#undef CDY_X
    };
    return names[a];
}

/* 1 if method descriptor d is a C function we can call with no arguments
 * directly: METH_NOARGS, or METH_VARARGS | METH_KEYWORDS (an empty tuple). */
static int ta_callable_bare(PyObject *d)
{
    int flags = ((PyMethodDescrObject *)d)->d_method->ml_flags & ~METH_COEXIST;
    return flags == METH_NOARGS || flags == (METH_VARARGS | METH_KEYWORDS);
}

/* The resolved entry of tp, resolving it now; NULL when tp has no valid
 * version tag to validate an entry with. */
static const ta_entry *ta_lookup(PyTypeObject *tp)
{
    for (int i = 0; i < TA_TYPES; i++)
        if (ta_cache[i].type == tp && ta_cache[i].version == tp->tp_version_tag &&
            PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG))
            return &ta_cache[i];
    ta_entry e = {tp, 0, {NULL}, {NULL}};
    for (int a = 0; a < CDY_TA_COUNT; a++) {
        PyObject *d = _PyType_Lookup(tp, ta_name(a));   /* borrowed; assigns a version tag */
        if (d && Py_IS_TYPE(d, &PyGetSetDescr_Type))
            e.get[a] = ((PyGetSetDescrObject *)d)->d_getset;
        else if (d && Py_IS_TYPE(d, &PyMethodDescr_Type) && ta_callable_bare(d))
            e.meth[a] = ((PyMethodDescrObject *)d)->d_method;
    }
    if (!PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG))
        return NULL;
    e.version = tp->tp_version_tag;
    ta_entry *slot = &ta_cache[ta_next];
    ta_next = (ta_next + 1) % TA_TYPES;
    *slot = e;
    return slot;
}

/* v.<attr>, a new reference or NULL with an error (see runtime/runtime.h). */
PyObject *cdy_tensor_attr(PyObject *v, int attr)
{
    const ta_entry *e = ta_lookup(Py_TYPE(v));
    if (e && e->get[attr])
        return e->get[attr]->get(v, e->get[attr]->closure);
    if (e && e->meth[attr]) {
        const PyMethodDef *m = e->meth[attr];
        if ((m->ml_flags & ~METH_COEXIST) == METH_NOARGS)
            return m->ml_meth(v, NULL);
        return ((PyCFunctionWithKeywords)(void (*)(void))m->ml_meth)(v, cdy_empty_tuple, NULL);
    }
    PyObject *r = PyObject_GetAttr(v, ta_name(attr));
    if (r && (attr == CDY_TA_data_ptr || attr == CDY_TA_stride || attr == CDY_TA_storage_offset))
        Py_SETREF(r, PyObject_CallNoArgs(r));
    return r;
}
