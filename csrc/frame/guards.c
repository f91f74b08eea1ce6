/* guards.c - sources (where a traced value lives at frame entry) and the
 * guards that must hold for a cache entry to be reused. */
#include "frame/frame.h"
#include "runtime/runtime.h"
#include "pyver/pycompat.h"
#include "frame/dynamic.h"

#include <string.h>

_Static_assert(CDY_SYM_TOKEN_MAX >= CDY_SYM_MAX_SYMS, "the token holds every symbol's value");

/* ---- sources ------------------------------------------------------------- */

/* Copy src into dst, taking new references to the names. */
void cdy_src_copy(cdy_src *dst, const cdy_src *src)
{
    *dst = *src;
    Py_XINCREF(dst->name);
    Py_XINCREF(dst->dict);
    for (int i = 0; i < dst->nattrs; i++)
        Py_INCREF(dst->attrs[i]);
}

/* Drop the references a source holds. */
void cdy_src_clear(cdy_src *s)
{
    Py_CLEAR(s->name);
    Py_CLEAR(s->dict);
    for (int i = 0; i < s->nattrs; i++)
        Py_CLEAR(s->attrs[i]);
    s->nattrs = 0;
}

/* The base object of s (new ref) or NULL with an error set. */
static PyObject *src_base(const cdy_src *s, PyObject *const *locals, PyObject *globals,
                          PyObject *builtins, PyObject *closure)
{
    PyObject *v = NULL;
    switch (s->kind) {
    case CDY_SRC_LOCAL:
        v = locals[s->slot];
        if (!v)
            PyErr_Format(PyExc_UnboundLocalError, "local slot %d is unbound", s->slot);
        break;
    case CDY_SRC_GLOBAL:
        v = PyDict_GetItemWithError(s->dict ? s->dict : globals, s->name);
        if (!v && !PyErr_Occurred())
            v = PyDict_GetItemWithError(builtins, s->name);
        if (!v && !PyErr_Occurred())
            PyErr_Format(PyExc_NameError, "name '%U' is not defined", s->name);
        break;
    case CDY_SRC_DEREF:
        if (closure && s->slot < PyTuple_GET_SIZE(closure)) {
            v = PyCell_GET(PyTuple_GET_ITEM(closure, s->slot));
            if (!v)
                PyErr_SetString(PyExc_NameError, "free variable is empty");
        }
        else
            PyErr_SetString(PyExc_SystemError, "closure cell missing");
        break;
    }
    Py_XINCREF(v);
    return v;
}

/* Step i of s from v (borrowed): a new reference, or NULL with an error set. */
static PyObject *src_step(const cdy_src *s, int i, PyObject *v)
{
    PyObject *key = s->attrs[i], *next;
    if (s->item[i] == 2) {   /* key[v]: a converter (cdynamo._optim.FLOAT_AS_TENSOR) */
        if (!PyFloat_CheckExact(v)) {   /* the guard: a float, by exact type */
            PyErr_SetString(PyExc_TypeError, "not a float");
            return NULL;
        }
        return PyObject_GetItem(key, v);
    }
    if (!s->item[i] && Py_IS_TYPE(v, &PyModule_Type) && PyUnicode_READ_CHAR(key, 0) != '_') {
        /* a module's plain attribute is its dict's item (the module type
         * defines only dunder names); a miss goes the generic way, to a
         * module __getattr__ */
        next = PyDict_GetItemWithError(PyModule_GetDict(v), key);
        if (next)
            return Py_NewRef(next);
        return PyErr_Occurred() ? NULL : PyObject_GetAttr(v, key);
    }
    if (!s->item[i])
        return PyObject_GetAttr(v, key);
    if (!PyDict_CheckExact(v))
        return PyObject_GetItem(v, key);
    next = PyDict_GetItemWithError(v, key);
    if (!next && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, key);
    return Py_XNewRef(next);
}

/* Value of s at frame entry; new reference or NULL with an error set. */
PyObject *cdy_src_fetch(const cdy_src *s, PyObject *const *locals, PyObject *globals,
                        PyObject *builtins, PyObject *closure)
{
    PyObject *v = src_base(s, locals, globals, builtins, closure);
    for (int i = 0; v && i < s->nattrs; i++)
        Py_SETREF(v, src_step(s, i, v));
    return v;
}

/* The objects the last source fetched in one check of a guard list walked
 * through (objs[0] its base, objs[i] after i steps; new references): the
 * next source with the same first steps starts from there.  The guards of a
 * module's forward read hundreds of sources 10-20 steps deep that share
 * their first steps (self._modules['block']._modules['0']...). */
typedef struct {
    const cdy_src *src;     /* NULL: nothing held */
    int n;                  /* objs[0..n] are held */
    PyObject *objs[CDY_MAX_ATTRS + 1];
    const cdy_src *pre_src; /* the source whose value is pre (from the snapshot, gfast.c) */
    PyObject *pre;          /* borrowed, or NULL */
} fetch_memo;

/* Drop what m holds past objs[keep] (keep -1: everything). */
static void memo_drop(fetch_memo *m, int keep)
{
    for (int i = keep + 1; m->src && i <= m->n; i++)
        Py_CLEAR(m->objs[i]);
    if (m->src)
        m->n = keep;
    if (keep < 0)
        m->src = NULL;
}

/* 1 if step keys a and b are the same (attribute names, dict keys). */
static int same_key(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (PyUnicode_CheckExact(a) && PyUnicode_CheckExact(b))
        return PyUnicode_Compare(a, b) == 0;
    return 0;
}

/* The number of first steps s and t share, or -1 when their bases differ. */
static int common_steps(const cdy_src *s, const cdy_src *t)
{
    if (s->kind != t->kind || s->slot != t->slot || s->name != t->name || s->dict != t->dict)
        return -1;
    int k = 0, n = s->nattrs < t->nattrs ? s->nattrs : t->nattrs;
    while (k < n && s->item[k] == t->item[k] && same_key(s->attrs[k], t->attrs[k]))
        k++;
    return k;
}

int cdy_src_equal(const cdy_src *a, const cdy_src *b)
{
    if (a->kind != b->kind || a->slot != b->slot || a->dict != b->dict ||
        a->nattrs != b->nattrs || (a->name != b->name && (!a->name || !b->name ||
                                                          !same_key(a->name, b->name))))
        return 0;
    for (int k = 0; k < a->nattrs; k++)
        if (a->item[k] != b->item[k] || !same_key(a->attrs[k], b->attrs[k]))
            return 0;
    return 1;
}

/* cdy_src_fetch through m (NULL: without one). */
static PyObject *memo_fetch(fetch_memo *m, const cdy_src *s, PyObject *const *locals,
                            PyObject *globals, PyObject *builtins, PyObject *closure)
{
    if (!m)
        return cdy_src_fetch(s, locals, globals, builtins, closure);
    if (m->pre && s == m->pre_src)
        return Py_NewRef(m->pre);
    int k = m->src ? common_steps(m->src, s) : -1;
    if (k > m->n)
        k = m->n;
    memo_drop(m, k);
    if (k < 0) {
        if (!(m->objs[0] = src_base(s, locals, globals, builtins, closure)))
            return NULL;
        k = 0;
    }
    m->src = s;
    m->n = k;
    for (int i = k; i < s->nattrs; i++) {
        PyObject *next = src_step(s, i, m->objs[i]);
        if (!next)
            return NULL;
        m->objs[i + 1] = next;
        m->n = i + 1;
    }
    return Py_NewRef(m->objs[s->nattrs]);
}

/* Readable name of s: "x", "G['w']", "x.weight". */
void cdy_src_name(const cdy_src *s, PyCodeObject *code, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    if (s->kind == CDY_SRC_LOCAL && code) {
        PyObject *nm = PyTuple_GetItem(code->co_localsplusnames, s->slot);
        len = (size_t)snprintf(buf, n, "%s", nm ? PyUnicode_AsUTF8(nm) : "?");
    }
    else if (s->kind == CDY_SRC_GLOBAL)
        len = (size_t)snprintf(buf, n, "G['%s']", PyUnicode_AsUTF8(s->name));
    else if (s->kind == CDY_SRC_DEREF && code) {
        int first_free = code->co_nlocalsplus - code->co_nfreevars;
        PyObject *nm = PyTuple_GetItem(code->co_localsplusnames, first_free + s->slot);
        len = (size_t)snprintf(buf, n, "%s", nm ? PyUnicode_AsUTF8(nm) : "?");
    }
    PyErr_Clear();
    for (int i = 0; i < s->nattrs && len < n; i++) {
        PyObject *k = s->attrs[i];   /* a key hashed by identity (a tensor): named by address */
        if (s->item[i] == 2) {
            len += (size_t)snprintf(buf + len, n - len, " (a float64 tensor)");
            continue;
        }
        int by_id = s->item[i] && !PyUnicode_Check(k) && !PyLong_Check(k) && !PyFloat_Check(k) &&
                    !PyTuple_Check(k) && !PyBytes_Check(k) && k != Py_None;
        PyObject *r = by_id ? PyUnicode_FromFormat("<%s object at %p>", Py_TYPE(k)->tp_name, k)
                    : s->item[i] ? PyObject_Repr(k) : NULL;
        if (s->item[i])
            len += (size_t)snprintf(buf + len, n - len, "[%s]", r ? PyUnicode_AsUTF8(r) : "?");
        else
            len += (size_t)snprintf(buf + len, n - len, ".%s", PyUnicode_AsUTF8(s->attrs[i]));
        Py_XDECREF(r);
    }
    PyErr_Clear();
}

/* ---- guard lists ----------------------------------------------------------- */

/* Free every guard and the list's storage. */
void cdy_guards_free(cdy_guards *gs)
{
    for (int i = 0; i < gs->n; i++) {
        cdy_guard *g = &gs->items[i];
        cdy_src_clear(&g->src);
        Py_CLEAR(g->expect);
        Py_CLEAR(g->dtype);
        if (g->sym) {
            cdy_symguard_free(g->sym);
            g->sym = NULL;
        }
        if (g->other) {
            cdy_src_clear(g->other);
            PyMem_Free(g->other);
            g->other = NULL;
        }
    }
    PyMem_Free(gs->items);
    gs->items = NULL;
    gs->n = gs->cap = 0;
    Py_CLEAR(gs->tensor_check);
    cdy_gfast_free(gs->fast);
    gs->fast = NULL;
}

/* Append a zeroed guard of kind on src; NULL with MemoryError on failure. */
cdy_guard *cdy_guards_add(cdy_guards *gs, int kind, const cdy_src *src, const char *desc)
{
    if (gs->n == gs->cap) {
        int cap = gs->cap ? 2 * gs->cap : 8;
        cdy_guard *items = PyMem_Realloc(gs->items, sizeof(cdy_guard) * (size_t)cap);
        if (!items) {
            PyErr_NoMemory();
            return NULL;
        }
        gs->items = items;
        gs->cap = cap;
    }
    cdy_guard *g = &gs->items[gs->n++];
    memset(g, 0, sizeof(*g));
    g->kind = kind;
    cdy_src_copy(&g->src, src);
    snprintf(g->desc, sizeof(g->desc), "%s", desc);
    return g;
}

/* Read an int64 tuple (torch.Size or stride tuple) into out; -1 on error. */
static int read_int_tuple(PyObject *t, int64_t *out, int max, int *n)
{
    if (!PyTuple_Check(t))
        return -1;
    Py_ssize_t len = PyTuple_GET_SIZE(t);
    if (len > max)
        return -1;
    for (Py_ssize_t i = 0; i < len; i++) {
        out[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, i));
        if (out[i] == -1 && PyErr_Occurred())
            return -1;
    }
    *n = (int)len;
    return 0;
}

/* Check a TENSOR guard on v: 1 holds, 0 fails (message in why). */
static int check_tensor(const cdy_guard *g, PyObject *v, char *why, size_t n)
{
    if ((PyObject *)Py_TYPE(v) != g->expect) {
        snprintf(why, n, "tensor '%s' type mismatch. expected %s, actual %s", g->desc,
                 ((PyTypeObject *)g->expect)->tp_name, Py_TYPE(v)->tp_name);
        return 0;
    }
    int ok = 1;
    PyObject *dt = cdy_tensor_attr(v, CDY_TA_dtype);
    PyObject *rg = dt ? cdy_tensor_attr(v, CDY_TA_requires_grad) : NULL;
    PyObject *cpu = rg ? cdy_tensor_attr(v, CDY_TA_is_cpu) : NULL;
    PyObject *lay = cpu ? cdy_tensor_attr(v, CDY_TA_layout) : NULL;
    PyObject *shape = lay ? cdy_tensor_attr(v, CDY_TA_shape) : NULL;
    PyObject *stride = shape ? cdy_tensor_attr(v, CDY_TA_stride) : NULL;
    int64_t sz[CDY_MAX_NDIM], st[CDY_MAX_NDIM];
    int nd = -1, nd2 = -1;
    if (!stride) {
        PyErr_Clear();
        snprintf(why, n, "tensor '%s' properties could not be read", g->desc);
        ok = 0;
    }
    else if (dt != g->dtype) {
        PyObject *a = n ? PyObject_Str(g->dtype) : NULL, *b = n ? PyObject_Str(dt) : NULL;
        snprintf(why, n, "tensor '%s' dtype mismatch. expected %s, actual %s", g->desc,
                 a ? PyUnicode_AsUTF8(a) : "?", b ? PyUnicode_AsUTF8(b) : "?");
        Py_XDECREF(a);
        Py_XDECREF(b);
        ok = 0;
    }
    else if (cpu != Py_True) {
        snprintf(why, n, "tensor '%s' device mismatch. expected cpu", g->desc);
        ok = 0;
    }
    else if (lay != cdy_strided_layout) {
        snprintf(why, n, "tensor '%s' layout mismatch. expected torch.strided", g->desc);
        ok = 0;
    }
    else if ((rg == Py_True) != g->requires_grad) {
        snprintf(why, n, "tensor '%s' requires_grad mismatch. expected %s, actual %s",
                 g->desc, g->requires_grad ? "True" : "False", rg == Py_True ? "True" : "False");
        ok = 0;
    }
    else if (read_int_tuple(shape, sz, CDY_MAX_NDIM, &nd) ||
             read_int_tuple(stride, st, CDY_MAX_NDIM, &nd2) || nd != g->ndim) {
        PyErr_Clear();
        snprintf(why, n, "tensor '%s' rank mismatch. expected %d, actual %d", g->desc, g->ndim, nd);
        ok = 0;
    }
    else if (g->dyn)
        ok = cdy_dyn_check_tensor(g, sz, st, why, n);
    else {
        for (int d = 0; ok && d < nd; d++)
            if (sz[d] != g->sizes[d]) {
                snprintf(why, n, "tensor '%s' size mismatch at index %d. expected %lld, actual %lld",
                         g->desc, d, (long long)g->sizes[d], (long long)sz[d]);
                ok = 0;
            }
        for (int d = 0; ok && d < nd; d++)
            if (st[d] != g->strides[d]) {
                snprintf(why, n, "tensor '%s' stride mismatch at index %d. expected %lld, actual %lld",
                         g->desc, d, (long long)g->strides[d], (long long)st[d]);
                ok = 0;
            }
    }
    Py_XDECREF(dt);
    Py_XDECREF(rg);
    Py_XDECREF(cpu);
    Py_XDECREF(lay);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    return ok;
}

/* 1 if v's repr is cheap and short (numbers, str, None, small tuples). */
int cdy_guard_value_is_small(PyObject *v)
{
    if (v == Py_None || PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v))
        return 1;
    if (PyUnicode_CheckExact(v))
        return PyUnicode_GET_LENGTH(v) < 200;
    if (PyTuple_CheckExact(v) && PyTuple_GET_SIZE(v) < 16) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); i++)
            if (!cdy_guard_value_is_small(PyTuple_GET_ITEM(v, i)))
                return 0;
        return 1;
    }
    return 0;
}

/* Check a CONST guard on v: exact type and equal value. */
static int check_const(const cdy_guard *g, PyObject *v, char *why, size_t n)
{
    int eq = 0;
    if (Py_TYPE(v) == Py_TYPE(g->expect)) {
        eq = PyObject_RichCompareBool(v, g->expect, Py_EQ);
        if (eq < 0) {
            PyErr_Clear();
            eq = 0;
        }
    }
    if (!eq && n) {   /* the message only when asked for; never the repr of a big value */
        PyObject *a = PyObject_Repr(g->expect);
        PyObject *b = cdy_guard_value_is_small(v) ? PyObject_Repr(v)
                                                  : PyUnicode_FromFormat("<%s>", Py_TYPE(v)->tp_name);
        snprintf(why, n, "value mismatch for '%s'. expected %s, actual %s", g->desc,
                 a ? PyUnicode_AsUTF8(a) : "?", b ? PyUnicode_AsUTF8(b) : "?");
        Py_XDECREF(a);
        Py_XDECREF(b);
        PyErr_Clear();
    }
    return eq;
}

/* The value of g's global source from its memo when no dict on the way
 * changed since it was filled (borrowed), else NULL. */
static PyObject *memo_lookup(const cdy_guard *g, PyObject *globals)
{
    const cdy_src *s = &g->src;
    if (g->memo_n <= 0)
        return NULL;
    PyObject *d = s->dict ? s->dict : globals;
    if (cdy_pc_dict_version(d) != g->memo_ver[0])
        return NULL;
    for (int i = 0; i < s->nattrs; i++) {
        PyObject *md = PyModule_GetDict(g->memo_obj[i]);
        if (cdy_pc_dict_version(md) != g->memo_ver[i + 1])
            return NULL;
    }
    return g->memo_obj[s->nattrs];
}

/* Read g's global source by walking its dicts, and remember the walk in
 * its memo (borrowed value).  Only a name in the globals dict itself whose
 * every step is a plain attribute of an exact module, found in the
 * module's dict, is walked; otherwise NULL, and the memo is marked unusable
 * (-1) so the general fetch serves this guard from then on. */
static PyObject *memo_fill(cdy_guard *g, PyObject *globals)
{
    const cdy_src *s = &g->src;
    g->memo_n = -1;
    PyObject *d = s->dict ? s->dict : globals;
    PyObject *v = PyDict_CheckExact(d) ? PyDict_GetItemWithError(d, s->name) : NULL;
    if (!v) {
        PyErr_Clear();
        return NULL;
    }
    g->memo_ver[0] = cdy_pc_dict_version(d);
    for (int i = 0; i < s->nattrs; i++) {
        if (s->item[i] || !Py_IS_TYPE(v, &PyModule_Type) ||
            PyUnicode_READ_CHAR(s->attrs[i], 0) == '_')
            return NULL;
        PyObject *md = PyModule_GetDict(v);
        g->memo_obj[i] = v;
        g->memo_ver[i + 1] = cdy_pc_dict_version(md);
        if (!(v = PyDict_GetItemWithError(md, s->attrs[i]))) {
            PyErr_Clear();
            return NULL;
        }
    }
    g->memo_obj[s->nattrs] = v;
    g->memo_n = s->nattrs + 1;
    return v;
}

/* An ID guard on a global source through its memo: 1 holds, 0 fails, -1
 * when the memo cannot serve it (the caller checks it the general way). */
static int check_global_id(const cdy_guard *g, PyObject *globals, char *why, size_t n)
{
    if (g->kind != CDY_GUARD_ID || g->src.kind != CDY_SRC_GLOBAL || g->memo_n < 0)
        return -1;
    PyObject *v = memo_lookup(g, globals);
    if (!v && !(v = memo_fill((cdy_guard *)g, globals)))   /* the memo is a cache, not guard state */
        return -1;
    if (v != g->expect)
        snprintf(why, n, "'%s' is not the same object (identity changed)", g->desc);
    return v == g->expect;
}

/* 1 if f is transformers' GeneralInterface.__getitem__ (by module and
 * qualname, its code the one first seen: a replaced __code__ is not). */
static int gi_is_getitem(PyObject *f)
{
    static PyObject *code;   /* held */
    if (!f || !PyFunction_Check(f))
        return 0;
    PyFunctionObject *fn = (PyFunctionObject *)f;
    if (!fn->func_module || !PyUnicode_Check(fn->func_module) || !PyUnicode_Check(fn->func_qualname) ||
        PyUnicode_CompareWithASCIIString(fn->func_module, "transformers.utils.generic") ||
        PyUnicode_CompareWithASCIIString(fn->func_qualname, "GeneralInterface.__getitem__"))
        return 0;
    if (!code)
        code = Py_NewRef(fn->func_code);
    return fn->func_code == code;
}

/* Interned names and collections.abc.Mapping.__contains__ for
 * gi_contains; 0, or -1 (no error set). */
static int gi_init(PyObject **names, PyObject **map_contains)
{
    static const char *const s[] = {"__contains__", "__getitem__", "_local_mapping",
                                    "_global_mapping"};
    if (*map_contains)
        return 0;
    for (int i = 0; i < 4; i++)
        if (!names[i] && !(names[i] = PyUnicode_InternFromString(s[i]))) {
            PyErr_Clear();
            return -1;
        }
    PyObject *abc = PyImport_ImportModule("collections.abc");
    PyObject *m = abc ? PyObject_GetAttrString(abc, "Mapping") : NULL;
    *map_contains = m && PyType_Check(m) ? Py_XNewRef(_PyType_Lookup((PyTypeObject *)m, names[0]))
                                          : NULL;
    Py_XDECREF(m);
    Py_XDECREF(abc);
    PyErr_Clear();
    return *map_contains ? 0 : -1;
}

/* key in v for a transformers GeneralInterface v (ALL_ATTENTION_FUNCTIONS:
 * Mapping.__contains__ over GeneralInterface's Python __getitem__, two
 * frames a check) read as that __getitem__ reads it, in C: key in
 * v._local_mapping, else in v._global_mapping, both exact dicts read by the
 * generic lookup with no descriptor on the class.  1 / 0, or -1 with no
 * error set when v is not one or reads otherwise (the caller asks Python). */
static int gi_contains(PyObject *v, PyObject *key)
{
    static PyObject *names[4], *map_contains;
    PyTypeObject *tp = Py_TYPE(v);
    if (!PyUnicode_CheckExact(key) || gi_init(names, &map_contains) ||
        tp->tp_getattro != PyObject_GenericGetAttr ||
        _PyType_Lookup(tp, names[0]) != map_contains || !gi_is_getitem(_PyType_Lookup(tp, names[1])))
        return -1;
    for (int i = 2; i < 4; i++) {
        PyObject *ca = _PyType_Lookup(tp, names[i]);
        if (ca && Py_TYPE(ca)->tp_descr_get)
            return -1;
        PyObject *d = PyObject_GetAttr(v, names[i]);
        int r = d && PyDict_CheckExact(d) ? PyDict_Contains(d, key) : -1;
        Py_XDECREF(d);
        if (r < 0) {
            PyErr_Clear();
            return -1;
        }
        if (r)
            return 1;
    }
    return 0;
}

/* Check a CONTAINS guard on v: (key in v) == the traced answer (requires_grad). */
static int check_contains(const cdy_guard *g, PyObject *v, char *why, size_t n)
{
    int r = gi_contains(v, g->expect);
    if (r < 0)
        r = PySequence_Contains(v, g->expect);
    PyErr_Clear();
    if (r != g->requires_grad)
        snprintf(why, n, "'%s' in '%s' is no longer %s", PyUnicode_Check(g->expect) ?
                 PyUnicode_AsUTF8(g->expect) : "key", g->desc, g->requires_grad ? "True" : "False");
    return r == g->requires_grad;
}

extern PyObject *cdy_module_type;    /* torch.nn.Module (trace/vars.c) */

/* 1 if tp reads attributes as nn.Module does: object's __getattribute__,
 * then nn.Module's own __getattr__ (not an override) on a miss. */
int cdy_guard_module_getattr(PyTypeObject *tp)
{
    static PyObject *mod_getattr, *obj_getattribute, *s_getattr, *s_getattribute;
    if (!s_getattr) {
        s_getattr = PyUnicode_InternFromString("__getattr__");
        s_getattribute = PyUnicode_InternFromString("__getattribute__");
        if (!s_getattr || !s_getattribute) {
            PyErr_Clear();
            Py_CLEAR(s_getattr);
            return 0;
        }
        obj_getattribute = _PyType_Lookup(&PyBaseObject_Type, s_getattribute);
    }
    if (!mod_getattr && cdy_module_type)   /* held: a patched nn.Module.__getattr__ then differs */
        mod_getattr = Py_XNewRef(_PyType_Lookup((PyTypeObject *)cdy_module_type, s_getattr));
    return mod_getattr && obj_getattribute && PyType_HasFeature(tp, Py_TPFLAGS_HEAPTYPE) &&
           _PyType_Lookup(tp, s_getattr) == mod_getattr &&
           _PyType_Lookup(tp, s_getattribute) == obj_getattribute;
}

/* hasattr(v, name) for an nn.Module v without running nn.Module.__getattr__
 * (a Python call raising a formatted AttributeError on a miss): the generic
 * lookup, then name in v.__dict__'s _parameters, _buffers, _modules, as
 * that __getattr__ reads them.  1 / 0, or -1 when v's type reads attributes
 * another way (the caller asks Python). */
static int module_has_attr(PyObject *v, PyObject *name)
{
    static const char *const dicts[] = {"_parameters", "_buffers", "_modules"};
    if (!PyUnicode_CheckExact(name) || !cdy_guard_module_getattr(Py_TYPE(v)))
        return -1;
    PyObject *r = _PyObject_GenericGetAttrWithDict(v, name, NULL, 1);
    if (r || PyErr_Occurred()) {   /* found; or an error other than AttributeError */
        Py_XDECREF(r);
        PyErr_Clear();
        return r != NULL;
    }
    PyObject *d = PyObject_GenericGetDict(v, NULL);
    int has = 0;
    for (int i = 0; d && PyDict_Check(d) && !has && i < 3; i++) {
        PyObject *sub = PyDict_GetItemString(d, dicts[i]);   /* borrowed */
        has = sub ? PySequence_Contains(sub, name) : 0;
        if (has < 0)
            has = 0;   /* hasattr's answer to an error from __getattr__: False */
    }
    Py_XDECREF(d);
    PyErr_Clear();
    return has;
}

/* Check a HASATTR guard on v: hasattr(v, name) == the traced answer (requires_grad). */
static int check_hasattr(const cdy_guard *g, PyObject *v, char *why, size_t n)
{
    int r = module_has_attr(v, g->expect);
    if (r < 0)
        r = cdy_pc_has_attr(v, g->expect);
    if (r != g->requires_grad)
        snprintf(why, n, "hasattr(%s, '%s') is no longer %s", g->desc, PyUnicode_AsUTF8(g->expect),
                 g->requires_grad ? "True" : "False");
    return r == g->requires_grad;
}

/* Check a STATE guard: global state g->ndim still has value g->sizes[0]. */
static int check_state(const cdy_guard *g, char *why, size_t n)
{
    int now = cdy_state_read(g->ndim);
    if (now == g->sizes[0])
        return 1;
    if (n) {
        char was[128], is[128];
        cdy_state_text(g->ndim, (int)g->sizes[0], was, sizeof(was));
        cdy_state_text(g->ndim, now, is, sizeof(is));
        snprintf(why, n, "%s changed: it was %s when compiled, it is now %s", g->desc, was, is);
    }
    return 0;
}

/* Check a CALL guard: g->expect() == g->dtype (the traced answer). */
static int check_call(const cdy_guard *g, char *why, size_t n)
{
    PyObject *r = PyObject_CallNoArgs(g->expect);
    int ok = r && (r == g->dtype || PyObject_RichCompareBool(r, g->dtype, Py_EQ) == 1);
    if (!ok && n) {
        PyObject *a = PyObject_Repr(g->dtype), *b = r ? PyObject_Repr(r) : NULL;
        snprintf(why, n, "%s changed: it gave %s when compiled, it gives %s now", g->desc,
                 a ? PyUnicode_AsUTF8(a) : "?", b ? PyUnicode_AsUTF8(b) : "an error");
        Py_XDECREF(a);
        Py_XDECREF(b);
    }
    Py_XDECREF(r);
    PyErr_Clear();
    return ok;
}

/* Tensor v's sizes and strides into sz and st: its number of dims, or -1
 * (an error left set).  Through torch's DLPack read when it takes v
 * (cdy_mempool_read: no torch.Size or tuple made; softmax over n x 1024 at
 * n = 2..16, one thread: the symbolic entry's call 0.33 -> 0.15 us over the
 * static entry's), else the shape and stride attributes. */
static int sym_read_dims(PyObject *v, int64_t *sz, int64_t *st)
{
    cdy_meta am;
    void *data;
    if (cdy_mempool_read(v, &am, &data)) {
        memcpy(sz, am.sizes, sizeof(int64_t) * (size_t)am.ndim);
        memcpy(st, am.strides, sizeof(int64_t) * (size_t)am.ndim);
        return am.ndim;
    }
    PyObject *shape = cdy_tensor_attr(v, CDY_TA_shape);
    PyObject *stride = shape ? cdy_tensor_attr(v, CDY_TA_stride) : NULL;
    int nd = -1, nd2 = -1;
    nd = !stride || read_int_tuple(shape, sz, CDY_MAX_NDIM, &nd) ||
         read_int_tuple(stride, st, CDY_MAX_NDIM, &nd2) || nd != nd2 ? -1 : nd;
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    return nd;
}

/* The value of int symbol k of sg (a Python int: input -1) into *val: 0, or
 * -1 (why) when it is no exact int >= 2. */
static int sym_read_int(const cdy_symguard *sg, int k, PyObject *const *locals, PyObject *globals,
                        PyObject *builtins, PyObject *closure, int64_t *val, char *why, size_t n,
                        fetch_memo *m)
{
    int i = sg->s.info[k].dim, of = 0;
    PyObject *v = i < sg->nints ? memo_fetch(m, &sg->int_srcs[i], locals, globals, builtins,
                                             closure) : NULL;
    long long x = v && PyLong_CheckExact(v) ? PyLong_AsLongLongAndOverflow(v, &of) : 0;
    Py_XDECREF(v);
    PyErr_Clear();
    if (!of && x >= 2 && x <= ((long long)1 << 53)) {
        *val = x;
        return 0;
    }
    if (n)
        snprintf(why, n, "symbol s%d is the int %lld: 0, 1 and negative ints are not symbolic",
                 k, x);
    return -1;
}

/* Check a SYM guard: the symbols' values read from the inputs' sizes (through
 * m), then its relations; 1 holds, 0 fails. */
static int check_sym(const cdy_guard *g, PyObject *const *locals, PyObject *globals,
                     PyObject *builtins, PyObject *closure, char *why, size_t n, fetch_memo *m)
{
    const cdy_symguard *sg = g->sym;
    int64_t vals[CDY_SYM_MAX_SYMS], sz[CDY_MAX_NDIM], st[CDY_MAX_NDIM];
    PyObject *objs[CDY_SYM_MAX_SYMS];
    cdy_sym_mask live = cdy_sym_live(&sg->s);
    int nd = -1, at = -1;                  /* the sizes in sz are input at's */
    PyObject *v = NULL;
    for (int k = 0; k < sg->s.tab.nsyms; k++) {
        vals[k] = sg->s.tab.hint[k];
        objs[k] = NULL;
        if (!cdy_sym_mask_has(&live, k))
            continue;
        if (sg->s.info[k].input < 0) {     /* a Python int */
            if (sym_read_int(sg, k, locals, globals, builtins, closure, &vals[k], why, n, m)) {
                Py_XDECREF(v);
                return 0;
            }
            continue;
        }
        if (sg->s.info[k].input != at) {   /* each input's shape and strides read once */
            at = sg->s.info[k].input;
            Py_XDECREF(v);
            v = memo_fetch(m, &sg->srcs[at], locals, globals, builtins, closure);
            nd = v ? sym_read_dims(v, sz, st) : -1;
            if (nd >= 0 && !(sg->imeta ? cdy_strides_follow(&sg->imeta[at], nd, sz, st)
                                       : cdy_strides_canonical(nd, sz, st)))
                nd = -2;                   /* the example's layout: the graph relies on it */
        }
        if (nd <= sg->s.info[k].dim || sz[sg->s.info[k].dim] < 2) {
            Py_XDECREF(v);
            PyErr_Clear();
            if (n)   /* a miss with no message wanted (cdy_guards_check): no formatting */
                snprintf(why, n, nd == -2 ? "symbol s%d's input does not have its example's "
                                            "layout (its symbolic entry relies on it)" :
                                 nd < 0 ? "the sizes of symbol s%d's input could not be read" :
                                          "symbol s%d is %lld: sizes 0 and 1 are not symbolic",
                         k, nd < 0 ? 0LL : (long long)sz[sg->s.info[k].dim]);
            return 0;
        }
        vals[k] = sz[sg->s.info[k].dim];
        objs[k] = v;                       /* borrowed: the frame's locals hold it */
    }
    Py_XDECREF(v);
    if (!cdy_symguard_relations(sg, vals, why, n))
        return 0;
    cdy_sym_tok.owner = &sg->s;            /* for the graph the frame calls (runtime.h) */
    cdy_sym_tok.nsyms = sg->s.tab.nsyms;
    memcpy(cdy_sym_tok.vals, vals, sizeof(int64_t) * (size_t)sg->s.tab.nsyms);
    memcpy(cdy_sym_tok.objs, objs, sizeof(PyObject *) * (size_t)sg->s.tab.nsyms);
    return 1;
}

/* 1 if v is an exact dict whose keys are the items of tuple kt, in order
 * (each key `is` or == its item, as tuple equality compares); no list or
 * tuple made per call. */
static int keys_match(PyObject *v, PyObject *kt)
{
    if (!PyDict_CheckExact(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(kt))
        return 0;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *val;
    while (PyDict_Next(v, &pos, &k, &val)) {
        if (i >= PyTuple_GET_SIZE(kt))
            return 0;
        PyObject *e = PyTuple_GET_ITEM(kt, i++);
        if (k == e)
            continue;
        Py_INCREF(k);   /* == may run Python code that changes the dict */
        int eq = PyObject_RichCompareBool(k, e, Py_EQ);
        Py_DECREF(k);
        if (eq != 1) {
            PyErr_Clear();
            return 0;
        }
    }
    return i == PyTuple_GET_SIZE(kt);
}

/* Check one guard; 1 holds, 0 fails. */
static int check_one(const cdy_guard *g, PyObject *const *locals, PyObject *globals,
                     PyObject *builtins, PyObject *closure, char *why, size_t n, fetch_memo *m)
{
    if (g->kind == CDY_GUARD_GRAD_MODE) {
        PyObject *r = PyObject_CallNoArgs(g->expect);
        int ok = r == (g->requires_grad ? Py_True : Py_False);
        Py_XDECREF(r);
        PyErr_Clear();
        if (!ok)
            snprintf(why, n, "grad mode changed: torch.is_grad_enabled() was %s when compiled",
                     g->requires_grad ? "True" : "False");
        return ok;
    }
    if (g->kind == CDY_GUARD_NUM_THREADS) {
        int now = cdy_cc_max_threads();
        if (now != g->ndim)
            snprintf(why, n, "torch.get_num_threads() changed: the kernels were built for %d "
                     "threads, it is now %d", g->ndim, now);
        return now == g->ndim;
    }
    if (g->kind == CDY_GUARD_STATE)
        return check_state(g, why, n);
    if (g->kind == CDY_GUARD_CALL)
        return check_call(g, why, n);
    if (g->kind == CDY_GUARD_SYM)
        return check_sym(g, locals, globals, builtins, closure, why, n, m);
    int id = check_global_id(g, globals, why, n);
    if (id >= 0)
        return id;
    PyObject *v = memo_fetch(m, &g->src, locals, globals, builtins, closure);
    if (!v) {
        PyErr_Clear();
        snprintf(why, n, "'%s' could not be read", g->desc);
        return 0;
    }
    int ok;
    switch (g->kind) {
    case CDY_GUARD_TENSOR:
        ok = check_tensor(g, v, why, n);
        break;
    case CDY_GUARD_CONST:
        ok = check_const(g, v, why, n);
        break;
    case CDY_GUARD_LEN:
        ok = (PyObject *)Py_TYPE(v) == g->expect && PyObject_Length(v) == g->ndim;
        if (!ok)
            snprintf(why, n, "'%s' is not a %s of length %d", g->desc,
                     ((PyTypeObject *)g->expect)->tp_name, g->ndim);
        PyErr_Clear();
        break;
    case CDY_GUARD_KEYS:
        ok = keys_match(v, g->expect);
        if (!ok)
            snprintf(why, n, "'%s' is not a dict with the same keys", g->desc);
        break;
    case CDY_GUARD_CONTAINS:
        ok = check_contains(g, v, why, n);
        break;
    case CDY_GUARD_HASATTR:
        ok = check_hasattr(g, v, why, n);
        break;
    case CDY_GUARD_SAME: {
        PyObject *w = g->other ? memo_fetch(m, g->other, locals, globals, builtins, closure) : NULL;
        ok = w && (v == w) == g->requires_grad;
        Py_XDECREF(w);
        PyErr_Clear();
        if (!ok)
            snprintf(why, n, "'%s' is %s the other object it was when compiled", g->desc,
                     g->requires_grad ? "no longer" : "now");
        break;
    }
    case CDY_GUARD_TYPE:
        ok = (PyObject *)Py_TYPE(v) == g->expect;
        if (!ok)
            snprintf(why, n, "'%s' type mismatch. expected %s, actual %s", g->desc,
                     ((PyTypeObject *)g->expect)->tp_name, Py_TYPE(v)->tp_name);
        break;
    default:
        ok = v == g->expect;
        if (!ok)
            snprintf(why, n, "'%s' is not the same object (identity changed)", g->desc);
        break;
    }
    Py_DECREF(v);
    return ok;
}

#define GB_STACK 32

/* The values the TENSOR guards of a list read, for one TensorGuards call. */
typedef struct {
    PyObject *stack[GB_STACK];
    PyObject **v;            /* stack, or a heap block for more tensors */
    int n;                   /* new references held */
} batch_vals;

/* Drop the values b holds. */
static void batch_release(batch_vals *b)
{
    while (b->n > 0)
        Py_DECREF(b->v[--b->n]);
    if (b->v && b->v != b->stack)
        PyMem_Free(b->v);
    b->v = NULL;
}

/* Read the values of the TENSOR guards of gs into b (through m, may be NULL):
 * their count, or -1 with none held and no error set when one cannot be read. */
static int batch_values(const cdy_guards *gs, batch_vals *b, PyObject *const *locals,
                        PyObject *globals, PyObject *builtins, PyObject *closure, fetch_memo *m,
                        const cdy_gfast *f)
{
    int cap = 0;
    for (int i = 0; i < gs->n; i++)
        cap += gs->items[i].kind == CDY_GUARD_TENSOR;
    b->n = 0;
    b->v = cap <= GB_STACK ? b->stack : PyMem_Malloc(sizeof(PyObject *) * (size_t)cap);
    if (!b->v)
        return -1;
    for (int i = 0; i < gs->n; i++) {
        const cdy_guard *g = &gs->items[i];
        if (g->kind != CDY_GUARD_TENSOR)
            continue;
        int settled;
        PyObject *v = f ? cdy_gfast_value(f, i, &settled) : NULL;
        v = v ? Py_NewRef(v) : memo_fetch(m, &g->src, locals, globals, builtins, closure);
        if (!v) {
            PyErr_Clear();
            batch_release(b);
            return -1;
        }
        b->v[b->n++] = v;
    }
    return b->n;
}

/* The TENSOR guards of gs through their TensorGuards check: 1 all hold, 0
 * not, -1 the check itself failed (no error left set). */
static int batch_check(const cdy_guards *gs, PyObject *const *locals, PyObject *globals,
                       PyObject *builtins, PyObject *closure, fetch_memo *m, const cdy_gfast *f)
{
    batch_vals b;
    if (batch_values(gs, &b, locals, globals, builtins, closure, m, f) < 0)
        return 0;
    PyObject *r = PyObject_Vectorcall(gs->tensor_check, b.v, (size_t)b.n, NULL);
    batch_release(&b);
    int ok = r == Py_True ? 1 : r == Py_False ? 0 : -1;
    Py_XDECREF(r);
    PyErr_Clear();
    return ok;
}

/* torch._C._dynamo.guards.TensorGuards, or NULL (borrowed; looked up once). */
static PyObject *tensor_guards_type(void)
{
    static PyObject *tp;
    static int tried;
    if (!tried) {
        tried = 1;
        PyObject *m = PyImport_ImportModule("torch._C._dynamo.guards");
        tp = m ? PyObject_GetAttrString(m, "TensorGuards") : NULL;
        Py_XDECREF(m);
        PyErr_Clear();
    }
    return tp;
}

/* f(*b's values, **kw) (kw may be NULL): the result, or NULL with an error set. */
static PyObject *call_values(PyObject *f, const batch_vals *b, PyObject *kw)
{
    PyObject *args = PyTuple_New(b->n), *r = NULL;
    for (int i = 0; args && i < b->n; i++)
        PyTuple_SET_ITEM(args, i, Py_NewRef(b->v[i]));
    if (args)
        r = PyObject_Call(f, args, kw);
    Py_XDECREF(args);
    return r;
}

/* TensorGuards' dynamic_dims_sizes (strides: 1: dynamic_dims_strides) for
 * gs's TENSOR guards: None when no guard has symbolic dims; else per guard
 * its sizes (strides) with None where a symbol's dim makes them vary (every
 * stride of such a tensor: the SYM guard checks it contiguous, its sizes
 * >= 2).  A new reference, or NULL with an error. */
static PyObject *batch_dyn_dims(const cdy_guards *gs, int strides)
{
    int any = 0;
    for (int i = 0; i < gs->n; i++)
        any |= gs->items[i].kind == CDY_GUARD_TENSOR && gs->items[i].dyn;
    if (!any)
        return Py_NewRef(Py_None);
    PyObject *all = PyList_New(0);
    for (int i = 0; all && i < gs->n; i++) {
        const cdy_guard *g = &gs->items[i];
        if (g->kind != CDY_GUARD_TENSOR)
            continue;
        PyObject *l = PyList_New(g->ndim);
        for (int d = 0; l && d < g->ndim; d++) {
            int free_ = strides ? g->dyn != 0 : (int)(g->dyn >> d & 1);
            PyObject *x = free_ ? Py_NewRef(Py_None)
                                : PyLong_FromLongLong(strides ? g->strides[d] : g->sizes[d]);
            if (!x)
                Py_CLEAR(l);
            else
                PyList_SET_ITEM(l, d, x);
        }
        if (!l || PyList_Append(all, l))
            Py_CLEAR(all);
        Py_XDECREF(l);
    }
    return all;
}

void cdy_guards_batch(cdy_guards *gs, PyObject *const *locals, PyObject *globals,
                      PyObject *builtins, PyObject *closure)
{
    PyObject *tp = tensor_guards_type();
    batch_vals b;
    if (!tp || gs->tensor_check)
        return;
    if (batch_values(gs, &b, locals, globals, builtins, closure, NULL, NULL) <= 0) {
        batch_release(&b);
        return;
    }
    PyObject *dsz = batch_dyn_dims(gs, 0), *dst = dsz ? batch_dyn_dims(gs, 1) : NULL;
    PyObject *kw = dst ? Py_BuildValue("{sOsO}", "dynamic_dims_sizes", dsz,
                                       "dynamic_dims_strides", dst) : NULL;
    Py_XDECREF(dsz);
    Py_XDECREF(dst);
    PyObject *tg = kw ? call_values(tp, &b, kw) : NULL;
    batch_release(&b);
    gs->tensor_check = tg ? PyObject_GetAttrString(tg, "check") : NULL;
    Py_XDECREF(tg);
    Py_XDECREF(kw);
    PyErr_Clear();
    /* it must accept what the guards accept now, or it is not used */
    if (gs->tensor_check && batch_check(gs, locals, globals, builtins, closure, NULL, NULL) != 1)
        Py_CLEAR(gs->tensor_check);
}

/* Why the batched tensor check failed although every TENSOR guard holds on
 * its own: torch's own message (dispatch keys: inference mode, a conj/neg
 * view, another device...), into why. */
static void batch_why(const cdy_guards *gs, PyObject *const *locals, PyObject *globals,
                      PyObject *builtins, PyObject *closure, char *why, size_t n)
{
    snprintf(why, n, "a tensor's dispatch keys changed (inference mode, a view kind, ...)");
    batch_vals b;
    if (batch_values(gs, &b, locals, globals, builtins, closure, NULL, NULL) < 0)
        return;
    PyObject *names = PyList_New(0), *m = PyObject_GetAttrString(gs->tensor_check, "__self__");
    for (int i = 0; names && i < gs->n; i++)
        if (gs->items[i].kind == CDY_GUARD_TENSOR) {
            PyObject *s = PyUnicode_FromString(gs->items[i].desc);
            if (!s || PyList_Append(names, s))
                Py_CLEAR(names);
            Py_XDECREF(s);
        }
    PyObject *f = m ? PyObject_GetAttrString(m, "check_verbose") : NULL;
    PyObject *kw = names ? Py_BuildValue("{sO}", "tensor_check_names", names) : NULL;
    PyObject *r = f && kw ? call_values(f, &b, kw) : NULL;
    batch_release(&b);
    if (r && PyUnicode_Check(r))
        snprintf(why, n, "%s", PyUnicode_AsUTF8(r));
    Py_XDECREF(r);
    Py_XDECREF(kw);
    Py_XDECREF(f);
    Py_XDECREF(m);
    Py_XDECREF(names);
    PyErr_Clear();
}

/* The guards of gs in order, the TENSOR ones in one batch when gs has one;
 * see cdy_guards_check. */
static int check_all(const cdy_guards *gs, PyObject *const *locals, PyObject *globals,
                     PyObject *builtins, PyObject *closure, char *why, size_t whylen,
                     fetch_memo *m, const cdy_gfast *f)
{
    int batched = gs->tensor_check != NULL;
    for (int i = 0; i < gs->n; i++) {
        if (batched && gs->items[i].kind == CDY_GUARD_TENSOR)
            continue;
        int settled = 0;
        m->pre = f ? cdy_gfast_value(f, i, &settled) : NULL;
        m->pre_src = &gs->items[i].src;
        int ok = settled || check_one(&gs->items[i], locals, globals, builtins, closure, why,
                                      whylen, m);
        m->pre = NULL;
        if (!ok)
            return 0;
    }
    if (!batched)
        return 1;
    int ok = batch_check(gs, locals, globals, builtins, closure, m, f);
    if (ok == 1)
        return 1;
    for (int i = 0; i < gs->n; i++)   /* the message, or the answer when the call failed */
        if (gs->items[i].kind == CDY_GUARD_TENSOR &&
            !check_one(&gs->items[i], locals, globals, builtins, closure, why, whylen, m))
            return 0;
    if (ok < 0)
        return 1;
    if (whylen)
        batch_why(gs, locals, globals, builtins, closure, why, whylen);
    return 0;
}

/* 1 if all guards hold, 0 if one fails (its message in why, when why is given). */
int cdy_guards_check(const cdy_guards *gs, PyObject *const *locals, PyObject *globals,
                     PyObject *builtins, PyObject *closure, char *why, size_t whylen)
{
    char dummy[1];
    if (!why) {   /* no message wanted: the checks skip formatting when whylen is 0 */
        why = dummy;
        whylen = 0;
    }
    fetch_memo m;
    m.src = NULL;
    m.n = -1;
    m.pre = NULL;
    /* the snapshot is a cache, not guard state; detached while in use (a guard's
     * Python code could check this list again) */
    cdy_guards *mg = (cdy_guards *)gs;
    cdy_gfast *f = mg->fast;
    mg->fast = NULL;
    if (f)
        cdy_gfast_verify(f, locals, globals, builtins, closure);
    int ok = check_all(gs, locals, globals, builtins, closure, why, whylen, &m, f);
    memo_drop(&m, -1);
    if (f)
        cdy_gfast_release(f);
    if (ok == 1 && (!f || cdy_gfast_stale(f)))
        f = cdy_gfast_build(gs, f, locals, globals, builtins, closure);
    if (mg->fast)   /* made by a nested check */
        cdy_gfast_free(mg->fast);
    mg->fast = f;
    return ok;
}

/* One line per guard, readable. */
PyObject *cdy_guards_text(const cdy_guards *gs)
{
    cdy_buf b = {0};
    for (int i = 0; i < gs->n; i++) {
        const cdy_guard *g = &gs->items[i];
        if (g->kind == CDY_GUARD_SYM)
            cdy_symguard_text(g->sym, &b);
        else if (g->kind == CDY_GUARD_TENSOR && g->dyn)
            cdy_dyn_tensor_text(g, &b);
        else if (g->kind == CDY_GUARD_TENSOR) {
            PyObject *dt = PyObject_Str(g->dtype);
            cdy_buf_printf(&b, "TENSOR_MATCH: %s: %s, %s, device=cpu, requires_grad=%s, size=[",
                           g->desc, ((PyTypeObject *)g->expect)->tp_name,
                           dt ? PyUnicode_AsUTF8(dt) : "?", g->requires_grad ? "True" : "False");
            Py_XDECREF(dt);
            for (int d = 0; d < g->ndim; d++)
                cdy_buf_printf(&b, "%s%lld", d ? ", " : "", (long long)g->sizes[d]);
            cdy_buf_puts(&b, "], stride=[");
            for (int d = 0; d < g->ndim; d++)
                cdy_buf_printf(&b, "%s%lld", d ? ", " : "", (long long)g->strides[d]);
            cdy_buf_puts(&b, "]\n");
        }
        else if (g->kind == CDY_GUARD_GRAD_MODE)
            cdy_buf_printf(&b, "GRAD_MODE: torch.is_grad_enabled() is %s\n",
                           g->requires_grad ? "True" : "False");
        else if (g->kind == CDY_GUARD_NUM_THREADS)
            cdy_buf_printf(&b, "NUM_THREADS: torch.get_num_threads() == %d\n", g->ndim);
        else if (g->kind == CDY_GUARD_CALL) {
            PyObject *r = PyObject_Repr(g->dtype);
            cdy_buf_printf(&b, "CALL: %s == %s\n", g->desc, r ? PyUnicode_AsUTF8(r) : "?");
            Py_XDECREF(r);
        }
        else if (g->kind == CDY_GUARD_STATE) {
            char v[128];
            cdy_state_text(g->ndim, (int)g->sizes[0], v, sizeof(v));
            cdy_buf_printf(&b, "STATE: %s is %s\n", g->desc, v);
        }
        else {
            PyObject *r = g->kind == CDY_GUARD_CONST ? PyObject_Repr(g->expect) : NULL;
            if (g->kind == CDY_GUARD_CONST)
                cdy_buf_printf(&b, "CONST_MATCH: %s == %s (type %s)\n", g->desc,
                               r ? PyUnicode_AsUTF8(r) : "?", Py_TYPE(g->expect)->tp_name);
            else if (g->kind == CDY_GUARD_LEN)
                cdy_buf_printf(&b, "LEN_MATCH: type(%s) is %s and len(%s) == %d\n", g->desc,
                               ((PyTypeObject *)g->expect)->tp_name, g->desc, g->ndim);
            else if (g->kind == CDY_GUARD_KEYS) {
                PyObject *kr = PyObject_Repr(g->expect);
                cdy_buf_printf(&b, "DICT_KEYS: %s keys == %s\n", g->desc,
                               kr ? PyUnicode_AsUTF8(kr) : "?");
                Py_XDECREF(kr);
            }
            else if (g->kind == CDY_GUARD_CONTAINS) {
                PyObject *kr = PyObject_Repr(g->expect);
                cdy_buf_printf(&b, "CONTAINS: (%s in %s) is %s\n", kr ? PyUnicode_AsUTF8(kr) : "?",
                               g->desc, g->requires_grad ? "True" : "False");
                Py_XDECREF(kr);
            }
            else if (g->kind == CDY_GUARD_HASATTR)
                cdy_buf_printf(&b, "HASATTR: hasattr(%s, '%s') is %s\n", g->desc,
                               PyUnicode_AsUTF8(g->expect), g->requires_grad ? "True" : "False");
            else if (g->kind == CDY_GUARD_TYPE)
                cdy_buf_printf(&b, "TYPE_MATCH: type(%s) is %s\n", g->desc,
                               ((PyTypeObject *)g->expect)->tp_name);
            else if (g->kind == CDY_GUARD_SAME)
                cdy_buf_printf(&b, "SAME: %s is %s another source\n", g->desc,
                               g->requires_grad ? "the object of" : "not the object of");
            else
                cdy_buf_printf(&b, "ID_MATCH: %s is <%s object at %p>\n", g->desc,
                               Py_TYPE(g->expect)->tp_name, (void *)g->expect);
            Py_XDECREF(r);
        }
    }
    PyErr_Clear();
    return cdy_buf_str(&b);
}
