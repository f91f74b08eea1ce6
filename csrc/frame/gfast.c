/* frame/gfast.c - a snapshot of the containers a guard list's sources read
 * through, taken after a check that held: each dict's version tag, each
 * instance's type and its version tag.  While they are unchanged a source's
 * value is the object it was, so its guard gets it without the walk, and an
 * ID or small-constant guard on it holds without a check (issue 34: the
 * guards of bert's module tree walked hundreds of nn.Module dicts a call).
 *
 * A read is taken in only where an unchanged container fixes its result: an
 * exact dict's item (str or int key), an instance attribute found in the
 * instance's own dict where the type has no data descriptor of that name
 * (gf_instance_wins) and reads
 * attributes generically (object's __getattribute__, nn.Module's
 * __getattr__ on a miss, an exact module; a transformers config, whose
 * Python __getattribute__ gf_hf_config recognizes: object's read of the name
 * its class's attribute_map maps to, the map's version tag snapshotted too);
 * anything else (another Python __getattribute__, a property, a converter)
 * is walked as before.  Python
 * 3.13 stores an attribute of an instance whose dict shares the instance's
 * inline values without changing the dict's version tag: there only dicts
 * with their own table are taken in. */
#include "frame/frame.h"
#include "pyver/pycompat.h"

#include <string.h>

enum { GF_LOCAL, GF_DEREF, GF_GLOBALS, GF_BUILTINS, GF_DICT, GF_STEP };
enum { GF_NONE, GF_ITEMS, GF_ATTRS, GF_CLASS };

typedef struct {
    int parent;           /* node index, -1 for a root */
    int kind;             /* GF_LOCAL..GF_DICT: a root; GF_STEP */
    int slot;             /* LOCAL / DEREF roots */
    int item;             /* STEP: 1 parent[key], 0 parent.key */
    PyObject *key;        /* STEP: the key (borrowed from a guard's source); DICT: the dict */
    PyObject *obj;        /* the value: held by the unchanged parent; a LOCAL or DEREF
                             root holds it (its address is not reused while compared) */
    int cmode;            /* how the children read obj: GF_ITEMS, GF_ATTRS, GF_NONE;
                             GF_CLASS: obj is a class, read through its MRO */
    PyObject *dict;       /* ATTRS: obj's instance dict (compared only) */
    Py_ssize_t dictoff;   /* ATTRS: byte offset of obj's dict pointer in obj */
    PyTypeObject *tp;     /* ATTRS: obj's type */
    unsigned int tag;     /* ATTRS: its version tag */
    uint64_t ver;         /* the version tag of the dict the children read */
    PyObject *amap;       /* ATTRS of a transformers config (gf_hf_config): the class's
                             attribute_map (held by the type while its tag holds) */
    uint64_t amap_ver;    /* its version tag */
    PyObject *ga[2];      /* the config's __getattribute__ functions (held by the types) */
    PyObject *ga_code[2]; /* their code objects when taken in */
    int ok;               /* the last verify found it unchanged */
} gf_node;

struct cdy_gfast {
    int n, cap;
    gf_node *nodes;
    int nguards;
    int *gnode;           /* per guard: the node of its source's value, or -1 */
    char *settled;        /* per guard: holds while its node does */
    PyObject **held;      /* per guard: its value from verify to release (new refs), or NULL */
    int *table, tcap;     /* building: node lookup by (parent, key) */
    int streak;           /* consecutive checks that found a changed container */
    int nbad;             /* nodes the last verify found changed */
};

/* Free f and its arrays. */
void cdy_gfast_free(cdy_gfast *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n; i++)
        if (f->nodes[i].kind == GF_LOCAL || f->nodes[i].kind == GF_DEREF)
            Py_DECREF(f->nodes[i].obj);
    PyMem_Free(f->nodes);
    PyMem_Free(f->gnode);
    PyMem_Free(f->settled);
    PyMem_Free(f->held);
    PyMem_Free(f->table);
    PyMem_Free(f);
}

/* 1 if keys a and b are equal (same object, or equal exact str / int). */
static int gf_same_key(PyObject *a, PyObject *b)
{
    if (a == b)
        return 1;
    if (PyUnicode_CheckExact(a) && PyUnicode_CheckExact(b))
        return PyUnicode_Compare(a, b) == 0;
    if (PyLong_CheckExact(a) && PyLong_CheckExact(b))
        return PyObject_RichCompareBool(a, b, Py_EQ) == 1;
    return 0;
}

/* Hash slot start for (parent, kind, slot/key): a mix of the parent and the key's hash. */
static size_t gf_hash(int parent, int kind, int slot, PyObject *key)
{
    Py_hash_t h = key && (PyUnicode_CheckExact(key) || PyLong_CheckExact(key))
                      ? PyObject_Hash(key) : (Py_hash_t)(uintptr_t)key;
    if (h == -1)
        PyErr_Clear();
    return (size_t)h * 1000003u ^ (size_t)(parent + 2) * 7919u ^ (size_t)(kind * 31 + slot);
}

/* 1 if node nd is (parent, kind, slot, item, key). */
static int gf_match(const gf_node *nd, int parent, int kind, int slot, int item, PyObject *key)
{
    return nd->parent == parent && nd->kind == kind && nd->slot == slot && nd->item == item &&
           (nd->key == key || (key && nd->key && gf_same_key(nd->key, key)));
}

/* The node (parent, kind, slot, item, key), made with value obj when new; its index or -1 (no memory). */
static int gf_node_get(cdy_gfast *f, int parent, int kind, int slot, int item, PyObject *key,
                       PyObject *obj)
{
    size_t mask = (size_t)f->tcap - 1, h = gf_hash(parent, kind, slot, key) & mask;
    for (; f->table[h] >= 0; h = (h + 1) & mask)
        if (gf_match(&f->nodes[f->table[h]], parent, kind, slot, item, key))
            return f->table[h];
    if (f->n == f->cap || 2 * (f->n + 1) > f->tcap)
        return -1;
    gf_node *nd = &f->nodes[f->n];
    memset(nd, 0, sizeof(*nd));
    nd->parent = parent;
    nd->kind = kind;
    nd->slot = slot;
    nd->item = item;
    nd->key = key;
    nd->obj = obj;
    nd->ok = 1;
    if (kind == GF_LOCAL || kind == GF_DEREF)
        Py_INCREF(obj);
    f->table[h] = f->n;
    return f->n++;
}

/* 1 if f is the Python function module.qualname. */
static int gf_is_function(PyObject *f, const char *module, const char *qualname)
{
    if (!PyFunction_Check(f))
        return 0;
    PyObject *m = ((PyFunctionObject *)f)->func_module, *q = ((PyFunctionObject *)f)->func_qualname;
    return m && q && PyUnicode_Check(m) && PyUnicode_Check(q) &&
           PyUnicode_CompareWithASCIIString(m, module) == 0 &&
           PyUnicode_CompareWithASCIIString(q, qualname) == 0;
}

/* 1 if f is one of transformers' config __getattribute__ functions: index 0
 * PreTrainedConfig's (a name in the class's attribute_map reads the mapped
 * name), 1 HeterogeneousConfigMixin's (reads as object's while the instance
 * has no _heterogeneity_spec); -1 neither. */
static int gf_hf_getattribute(PyObject *f)
{
    if (gf_is_function(f, "transformers.configuration_utils", "PreTrainedConfig.__getattribute__") ||
        gf_is_function(f, "transformers.configuration_utils", "PretrainedConfig.__getattribute__"))
        return 0;
    if (gf_is_function(f, "transformers.integrations.heterogeneity.configuration_utils",
                       "HeterogeneousConfigMixin.__getattribute__"))
        return 1;
    return -1;
}

/* Node nd (an instance of tp, its instance dict d) as a transformers config:
 * tp's MRO defines __getattribute__ only as PreTrainedConfig's (first),
 * optionally HeterogeneousConfigMixin's, and object's; no __getattr__; the
 * class's attribute_map an exact dict the instance does not shadow; no
 * _heterogeneity_spec in the instance or its classes (transformers versions
 * whose mixin has no __getattribute__ check it in PreTrainedConfig's, and
 * raise for a None one).  Then reading name is object's read of
 * attribute_map.get(name, name) (gf_read); records the functions, their code
 * and the map in nd; 1, or 0 (no error left). */
static int gf_hf_config(gf_node *nd, PyTypeObject *tp, PyObject *d)
{
    static PyObject *s_ga, *s_gattr, *s_amap, *s_spec;
    if (!s_ga && (!(s_ga = PyUnicode_InternFromString("__getattribute__")) ||
                  !(s_gattr = PyUnicode_InternFromString("__getattr__")) ||
                  !(s_amap = PyUnicode_InternFromString("attribute_map")) ||
                  !(s_spec = PyUnicode_InternFromString("_heterogeneity_spec")))) {
        Py_CLEAR(s_ga);
        PyErr_Clear();
        return 0;
    }
    PyObject *mro = tp->tp_mro;
    if (!PyType_HasFeature(tp, Py_TPFLAGS_HEAPTYPE) || !mro || !PyTuple_Check(mro) ||
        _PyType_Lookup(tp, s_gattr))
        return 0;
    int n = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *b = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        PyObject *f = b == &PyBaseObject_Type ? NULL : PyDict_GetItemWithError(b->tp_dict, s_ga);
        if (!f)
            continue;
        int which = gf_hf_getattribute(f);
        if (which != n || n == 2)   /* PreTrainedConfig's first, then at most the mixin's */
            return 0;
        nd->ga[n] = f;
        nd->ga_code[n] = PyFunction_GET_CODE(f);
        n++;
    }
    PyObject *amap = _PyType_Lookup(tp, s_amap);
    PyObject *spec = PyDict_GetItemWithError(d, s_spec);
    if (!n || !amap || !PyDict_CheckExact(amap) || PyDict_GetItemWithError(d, s_amap) || spec ||
        _PyType_Lookup(tp, s_spec) || PyErr_Occurred()) {
        PyErr_Clear();
        nd->ga[0] = nd->ga[1] = NULL;
        return 0;
    }
    nd->amap = amap;
    nd->amap_ver = cdy_pc_dict_version(amap);
    return 1;
}

/* 1 while the config functions and map nd recorded are unchanged (nd's type tag holds). */
static int gf_hf_config_ok(const gf_node *nd)
{
    for (int i = 0; i < 2; i++)
        if (nd->ga[i] && PyFunction_GET_CODE(nd->ga[i]) != nd->ga_code[i])
            return 0;
    return cdy_pc_dict_version(nd->amap) == nd->amap_ver;
}

/* The name a read of key from node nd reads: attribute_map's value for a
 * transformers config (gf_hf_config; borrowed), key otherwise; NULL when the
 * read is not taken in. */
static PyObject *gf_mapped_key(const gf_node *nd, PyObject *key)
{
    if (!nd->amap)
        return key;
    if (PyUnicode_CompareWithASCIIString(key, "attribute_map") == 0)
        return NULL;
    PyObject *m = PyDict_GetItemWithError(nd->amap, key);
    if (!m) {
        PyErr_Clear();
        return key;
    }
    return PyUnicode_CheckExact(m) ? m : NULL;
}

/* Make node nd's children read it by mode (GF_ITEMS / GF_ATTRS): records
 * what fixes their reads; 0 when they cannot be taken in. */
static int gf_set_mode(gf_node *nd, int mode)
{
    PyObject *o = nd->obj;
    if (nd->cmode != GF_NONE)
        return nd->cmode == mode;
    if (mode == GF_ITEMS) {
        if (!PyDict_CheckExact(o))
            return 0;
        nd->ver = cdy_pc_dict_version(o);
        nd->cmode = GF_ITEMS;
        return 1;
    }
    if (mode == GF_CLASS) {   /* a class whose metaclass is type: its attributes are its MRO's */
        if (!Py_IS_TYPE(o, &PyType_Type) ||
            !PyType_HasFeature((PyTypeObject *)o, Py_TPFLAGS_VALID_VERSION_TAG))
            return 0;
        nd->tp = (PyTypeObject *)o;
        nd->tag = nd->tp->tp_version_tag;
        nd->cmode = GF_CLASS;
        return 1;
    }
    PyTypeObject *tp = Py_TYPE(o);
    if (PyType_Check(o))
        return 0;
    int generic = tp->tp_getattro == PyObject_GenericGetAttr || tp == &PyModule_Type ||
                  cdy_guard_module_getattr(tp);
    PyObject **dp = _PyObject_GetDictPtr(o);
    if (!dp || !*dp || !PyDict_CheckExact(*dp) || !PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG))
        return 0;
#if CDY_PY >= 313
    if (((PyDictObject *)*dp)->ma_values)   /* shares the inline values: stores skip its tag */
        return 0;
#endif
    if (!generic && !gf_hf_config(nd, tp, *dp))
        return 0;
    nd->dict = *dp;
    nd->dictoff = (char *)dp - (char *)o;
    nd->tp = tp;
    nd->tag = tp->tp_version_tag;
    nd->ver = cdy_pc_dict_version(*dp);
    nd->cmode = GF_ATTRS;
    return 1;
}

/* obj.__class__ when obj's node fixes its type and the type's __class__ is
 * object's (borrowed), else NULL. */
static PyObject *gf_class_of(gf_node *nd, PyObject *key)
{
    static PyObject *obj_class;
    if (!obj_class)
        obj_class = _PyType_Lookup(&PyBaseObject_Type, key);   /* immortal with object */
    if (PyType_Check(nd->obj) || !gf_set_mode(nd, GF_ATTRS) || _PyType_Lookup(nd->tp, key) != obj_class)
        return NULL;
    return (PyObject *)nd->tp;
}

/* cls.key for a class node (its metaclass type, which has no attribute key):
 * the MRO's value when reading it gives that very object (a plain value, a
 * function, a property); borrowed, or NULL. */
static PyObject *gf_class_attr(gf_node *nd, PyObject *key)
{
    if (!Py_IS_TYPE(nd->obj, &PyType_Type) || _PyType_Lookup(&PyType_Type, key))
        return NULL;
    PyObject *v = _PyType_Lookup((PyTypeObject *)nd->obj, key);   /* assigns a version tag */
    if (!v || !gf_set_mode(nd, GF_CLASS))
        return NULL;
    return !Py_TYPE(v)->tp_descr_get || Py_IS_TYPE(v, &PyFunction_Type) ||
           Py_IS_TYPE(v, &PyProperty_Type) ? v : NULL;
}

/* 1 if an instance attribute wins over class attribute c (NULL: none) in
 * object's read: c is no data descriptor, by a static type (one that cannot
 * gain a __set__ later: a dataclass's default, a function).  The class's
 * version tag fixes which c it is. */
static int gf_instance_wins(PyObject *c)
{
    return !c || (!PyType_HasFeature(Py_TYPE(c), Py_TPFLAGS_HEAPTYPE) && !Py_TYPE(c)->tp_descr_set);
}

/* The value of step (item, key) from node nd's object when the snapshot can
 * fix it (borrowed), else NULL (no error left). */
static PyObject *gf_read(gf_node *nd, int item, PyObject *key)
{
    if ((item != 0 && item != 1) || !(PyUnicode_CheckExact(key) || (item && PyLong_CheckExact(key))))
        return NULL;
    if (!item && PyType_Check(nd->obj))
        return gf_class_attr(nd, key);
    if (!item && (!gf_set_mode(nd, GF_ATTRS) || !(key = gf_mapped_key(nd, key))))
        return NULL;
    if (!item && PyUnicode_CompareWithASCIIString(key, "__class__") == 0)
        return gf_class_of(nd, key);
    if (!item && !gf_instance_wins(_PyType_Lookup(Py_TYPE(nd->obj), key)))
        return NULL;   /* a class attribute could win over the instance's: walked */
    if (!gf_set_mode(nd, item ? GF_ITEMS : GF_ATTRS))
        return NULL;
    PyObject *v = PyDict_GetItemWithError(item ? nd->obj : nd->dict, key);
    PyErr_Clear();
    return v;
}

/* The root node of s (made when new), or -1 when s's base is not taken in
 * (a bare local or free variable: read directly). */
static int gf_root(cdy_gfast *f, const cdy_src *s, PyObject *const *locals, PyObject *globals,
                   PyObject *builtins, PyObject *closure)
{
    if ((s->kind == CDY_SRC_LOCAL || s->kind == CDY_SRC_DEREF) && !s->nattrs)
        return -1;
    if (s->kind == CDY_SRC_LOCAL)
        return locals[s->slot] ? gf_node_get(f, -1, GF_LOCAL, s->slot, 0, NULL, locals[s->slot]) : -1;
    if (s->kind == CDY_SRC_DEREF) {
        if (!closure || s->slot >= PyTuple_GET_SIZE(closure))
            return -1;
        PyObject *v = PyCell_GET(PyTuple_GET_ITEM(closure, s->slot));
        return v ? gf_node_get(f, -1, GF_DEREF, s->slot, 0, NULL, v) : -1;
    }
    PyObject *d = s->dict ? s->dict : globals;
    int g = gf_node_get(f, -1, s->dict ? GF_DICT : GF_GLOBALS, 0, 0, s->dict, d);
    if (g < 0 || !gf_set_mode(&f->nodes[g], GF_ITEMS))
        return -1;
    PyObject *v = PyDict_GetItemWithError(d, s->name);
    if (v)
        return gf_node_get(f, g, GF_STEP, 0, 1, s->name, v);
    PyErr_Clear();
    int b = s->dict ? -1 : gf_node_get(f, -1, GF_BUILTINS, 0, 0, NULL, builtins);
    if (b < 0 || !gf_set_mode(&f->nodes[b], GF_ITEMS))
        return -1;
    v = PyDict_GetItemWithError(builtins, s->name);
    PyErr_Clear();
    return v ? gf_node_get(f, b, GF_STEP, 0, 1, s->name, v) : -1;
}

/* The node of s's value, walking (and making) the nodes of its steps; -1 when a step is not taken in. */
static int gf_source(cdy_gfast *f, const cdy_src *s, PyObject *const *locals, PyObject *globals,
                     PyObject *builtins, PyObject *closure)
{
    int at = gf_root(f, s, locals, globals, builtins, closure);
    for (int i = 0; at >= 0 && i < s->nattrs; i++) {
        PyObject *v = gf_read(&f->nodes[at], s->item[i], s->attrs[i]);
        at = v ? gf_node_get(f, at, GF_STEP, 0, s->item[i], s->attrs[i], v) : -1;
    }
    return at;
}

/* 1 if guard g holds whenever its source's value is the object it was at a
 * check that held: identity, or a constant too small to change. */
static int gf_settles(const cdy_guard *g)
{
    return g->kind == CDY_GUARD_ID ||
           (g->kind == CDY_GUARD_CONST && cdy_guard_value_is_small(g->expect));
}

/* Allocate f's arrays for gs: node room for every step of every source. */
static cdy_gfast *gf_alloc(const cdy_guards *gs)
{
    cdy_gfast *f = PyMem_Calloc(1, sizeof(cdy_gfast));
    if (!f)
        return NULL;
    int cap = 8;
    for (int i = 0; i < gs->n; i++)
        cap += gs->items[i].src.nattrs + 3;
    f->cap = cap;
    for (f->tcap = 16; f->tcap < 2 * cap; f->tcap *= 2)
        ;
    f->nodes = PyMem_Calloc((size_t)cap, sizeof(gf_node));
    f->gnode = PyMem_Calloc((size_t)gs->n + 1, sizeof(int));
    f->settled = PyMem_Calloc((size_t)gs->n + 1, 1);
    f->held = PyMem_Calloc((size_t)gs->n + 1, sizeof(PyObject *));
    f->table = PyMem_Malloc(sizeof(int) * (size_t)f->tcap);
    if (!f->nodes || !f->gnode || !f->settled || !f->held || !f->table) {
        cdy_gfast_free(f);
        return NULL;
    }
    memset(f->table, 0xff, sizeof(int) * (size_t)f->tcap);
    f->nguards = gs->n;
    return f;
}

cdy_gfast *cdy_gfast_build(const cdy_guards *gs, cdy_gfast *prev, PyObject *const *locals,
                           PyObject *globals, PyObject *builtins, PyObject *closure)
{
    cdy_gfast *f = gf_alloc(gs);
    for (int i = 0; f && i < gs->n; i++) {
        const cdy_guard *g = &gs->items[i];
        int k = g->kind;
        int fetches = k != CDY_GUARD_GRAD_MODE && k != CDY_GUARD_NUM_THREADS &&
                      k != CDY_GUARD_STATE && k != CDY_GUARD_CALL && k != CDY_GUARD_SYM;
        f->gnode[i] = fetches ? gf_source(f, &g->src, locals, globals, builtins, closure) : -1;
        f->settled[i] = f->gnode[i] >= 0 && gf_settles(g);
    }
    PyErr_Clear();
    if (f) {
        PyMem_Free(f->table);
        f->table = NULL;
        f->streak = prev ? prev->streak : 0;
    }
    cdy_gfast_free(prev);
    return f;
}

/* 1 if root node nd is still the frame's object there (DICT roots are held by the source). */
static int gf_root_ok(const gf_node *nd, PyObject *const *locals, PyObject *globals,
                      PyObject *builtins, PyObject *closure)
{
    switch (nd->kind) {
    case GF_LOCAL:
        return locals[nd->slot] == nd->obj;
    case GF_DEREF:
        return closure && nd->slot < PyTuple_GET_SIZE(closure) &&
               PyCell_GET(PyTuple_GET_ITEM(closure, nd->slot)) == nd->obj;
    case GF_GLOBALS:
        return nd->obj == globals;
    case GF_BUILTINS:
        return nd->obj == builtins;
    default:
        return 1;
    }
}

/* 1 if what node nd's children read is unchanged (nd's object is alive). */
static int gf_container_ok(const gf_node *nd)
{
    PyObject *o = nd->obj;
    if (nd->cmode == GF_ITEMS)
        return Py_IS_TYPE(o, &PyDict_Type) && cdy_pc_dict_version(o) == nd->ver;
    if (nd->cmode == GF_ATTRS) {
        PyTypeObject *tp = nd->tp;
        return Py_TYPE(o) == tp && tp->tp_version_tag == nd->tag &&
               PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG) &&
               *(PyObject **)((char *)o + nd->dictoff) == nd->dict &&
               cdy_pc_dict_version(nd->dict) == nd->ver && (!nd->amap || gf_hf_config_ok(nd));
    }
    if (nd->cmode == GF_CLASS)
        return Py_IS_TYPE(o, &PyType_Type) && nd->tp->tp_version_tag == nd->tag &&
               PyType_HasFeature(nd->tp, Py_TPFLAGS_VALID_VERSION_TAG);
    return 1;
}

int cdy_gfast_verify(cdy_gfast *f, PyObject *const *locals, PyObject *globals,
                     PyObject *builtins, PyObject *closure)
{
    f->nbad = 0;
    for (int i = 0; i < f->n; i++) {
        gf_node *nd = &f->nodes[i];
        nd->ok = nd->parent < 0 ? gf_root_ok(nd, locals, globals, builtins, closure)
                                : f->nodes[nd->parent].ok;
        nd->ok = nd->ok && gf_container_ok(nd);
        f->nbad += !nd->ok;
    }
    f->streak = f->nbad ? f->streak + 1 : 0;
    /* held before any guard runs Python code that could drop them */
    for (int i = 0; i < f->nguards; i++) {
        int at = f->gnode[i];
        f->held[i] = at >= 0 && f->nodes[at].ok && !f->settled[i] ? Py_NewRef(f->nodes[at].obj)
                                                                   : NULL;
    }
    return f->nbad;
}

PyObject *cdy_gfast_value(const cdy_gfast *f, int guard, int *settled)
{
    int at = guard < f->nguards ? f->gnode[guard] : -1;
    *settled = at >= 0 && f->nodes[at].ok && f->settled[guard];
    return guard < f->nguards ? f->held[guard] : NULL;
}

void cdy_gfast_release(cdy_gfast *f)
{
    for (int i = 0; i < f->nguards; i++)
        Py_CLEAR(f->held[i]);
}

int cdy_gfast_stale(const cdy_gfast *f)
{
    /* rebuilt at the 1st, 2nd, 4th, 8th... check in a row that found a change */
    return f->nbad && (f->streak & (f->streak - 1)) == 0;
}
