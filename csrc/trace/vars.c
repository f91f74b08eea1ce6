/* vars.c - symbolic values of the tracer: constants, fake tensors, objects,
 * containers; the sources they are read from and the guards that reading
 * them implies; attribute access on tensors, modules and user objects.     */
#include "trace/trace.h"
#include "pyver/pycompat.h"

#include <string.h>

PyObject *cdy_module_type, *cdy_parameter_type;
static PyObject *empty_strided, *meta_kw, *meta_str, *torch_size_type, *dtype_type, *device_type;
static PyObject *sequential_type, *modulelist_type, *moduledict_type;
static PyObject *finfo_type, *iinfo_type, *memory_format_type, *layout_type;
static PyObject *str_dict, *str_modules, *str_parameters, *str_buffers;

/* Look up the torch objects this file needs; 0 or -1. */
int cdy_vars_init(void)
{
    if (empty_strided)
        return 0;
    PyObject *nn = PyImport_ImportModule("torch.nn");
    if (!nn)
        return -1;
    cdy_module_type = PyObject_GetAttrString(nn, "Module");
    cdy_parameter_type = PyObject_GetAttrString(nn, "Parameter");
    sequential_type = PyObject_GetAttrString(nn, "Sequential");
    modulelist_type = PyObject_GetAttrString(nn, "ModuleList");
    moduledict_type = PyObject_GetAttrString(nn, "ModuleDict");
    Py_DECREF(nn);
    torch_size_type = PyObject_GetAttrString(cdy_torch, "Size");
    dtype_type = PyObject_GetAttrString(cdy_torch, "dtype");
    device_type = PyObject_GetAttrString(cdy_torch, "device");
    finfo_type = PyObject_GetAttrString(cdy_torch, "finfo");
    memory_format_type = PyObject_GetAttrString(cdy_torch, "memory_format");
    layout_type = PyObject_GetAttrString(cdy_torch, "layout");
    iinfo_type = PyObject_GetAttrString(cdy_torch, "iinfo");
    meta_str = PyUnicode_FromString("meta");
    meta_kw = Py_BuildValue("(ss)", "dtype", "device");
    str_dict = PyUnicode_InternFromString("__dict__");
    str_modules = PyUnicode_InternFromString("_modules");
    str_parameters = PyUnicode_InternFromString("_parameters");
    str_buffers = PyUnicode_InternFromString("_buffers");
    empty_strided = PyObject_GetAttrString(cdy_torch, "empty_strided");
    if (!cdy_module_type || !cdy_parameter_type || !sequential_type || !modulelist_type ||
        !moduledict_type || !torch_size_type || !dtype_type || !meta_str || !meta_kw ||
        !str_dict || !empty_strided)
        return -1;
    return 0;
}

/* ---- basic values ------------------------------------------------------- */

/* A zeroed tvar of kind from the arena; NULL when stopped. */
tvar *cdy_tv_new(tracer *tr, int kind)
{
    tvar *v = cdy_arena_alloc(&tr->t->arena, sizeof(tvar));
    if (v)
        v->kind = kind;
    else
        cdy_tr_stop(tr, OUT_OF_MEMORY);
    if (v && kind == TV_TENSOR)
        cdy_mut_register(tr, v);
    return v;
}

/* A constant tvar holding o (a new reference, kept by the trace). */
tvar *cdy_tv_const(tracer *tr, PyObject *o)
{
    if (!cdy_tr_keep(tr, o)) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    tvar *v = cdy_tv_new(tr, TV_CONST);
    if (v)
        v->obj = o;
    return v;
}

/* A TUPLE/LIST/ITER tvar over a copy of items[0..n). */
tvar *cdy_tv_seq(tracer *tr, int kind, tvar **items, int n)
{
    tvar **copy = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
    tvar *v = copy ? cdy_tv_new(tr, kind) : NULL;
    if (!v)
        return NULL;
    if (n)
        memcpy(copy, items, sizeof(tvar *) * (size_t)n);
    v->items = copy;
    v->n = n;
    return v;
}

/* 1 if o is a value we treat as a constant (guarded by value). */
int cdy_is_const(PyObject *o)
{
    if (o == Py_None || o == Py_Ellipsis || o == Py_NotImplemented || PyBool_Check(o) ||
        PyLong_CheckExact(o) || PyFloat_CheckExact(o) || PyUnicode_CheckExact(o) ||
        PyBytes_CheckExact(o) || PyComplex_CheckExact(o) ||
        PyRange_Check(o) || (PyObject *)Py_TYPE(o) == dtype_type ||
        (PyObject *)Py_TYPE(o) == device_type || cdy_is_info_type((PyObject *)Py_TYPE(o)) ||
        (PyObject *)Py_TYPE(o) == memory_format_type || (PyObject *)Py_TYPE(o) == layout_type ||
        cdy_is_enum_member(o))
        return 1;
    if (PyFrozenSet_CheckExact(o)) {
        Py_ssize_t pos = 0;
        PyObject *k;
        Py_hash_t h;
        while (cdy_pc_set_next(o, &pos, &k, &h))
            if (!cdy_is_const(k))
                return 0;
        return 1;
    }
    if (PySlice_Check(o)) {
        PySliceObject *s = (PySliceObject *)o;
        return cdy_is_const(s->start) && cdy_is_const(s->stop) && cdy_is_const(s->step);
    }
    if (PyTuple_CheckExact(o) || (PyObject *)Py_TYPE(o) == torch_size_type) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++)
            if (!cdy_is_const(PyTuple_GET_ITEM(o, i)))
                return 0;
        return 1;
    }
    return 0;
}

/* 1 if o is a member of an Enum class (an immutable singleton of its class: its
 * value, name, ==, hash and `is` are fixed; a guard on it is exact type and ==). */
int cdy_is_enum_member(PyObject *o)
{
    static PyObject *enum_meta;
    if (!enum_meta) {
        PyObject *en = PyImport_ImportModule("enum");
        enum_meta = en ? PyObject_GetAttrString(en, "EnumMeta") : NULL;
        Py_XDECREF(en);
        if (!enum_meta) {
            PyErr_Clear();
            return 0;
        }
    }
    PyTypeObject *tp = Py_TYPE(o);
    return PyType_IsSubtype(Py_TYPE(tp), (PyTypeObject *)enum_meta) &&
           (PyObject *)tp != enum_meta && !PyType_Check(o);
}

/* 1 if o is an nn.ModuleList or nn.Sequential (indexed by int through its _modules). */
int cdy_is_module_list(PyObject *o)
{
    return PyObject_TypeCheck(o, (PyTypeObject *)modulelist_type) ||
           PyObject_TypeCheck(o, (PyTypeObject *)sequential_type);
}

/* 1 if t is torch.finfo or torch.iinfo: pure functions of a dtype, immutable results. */
int cdy_is_info_type(PyObject *t)
{
    return t && (t == finfo_type || t == iinfo_type);
}

/* 1 if o is torch or one of its submodules (whose attributes we do not guard). */
int cdy_is_torch_module(PyObject *o)
{
    if (!PyModule_Check(o))
        return 0;
    const char *n = PyModule_GetName(o);
    if (!n) {
        PyErr_Clear();
        return 0;
    }
    return !strcmp(n, "torch") || !strncmp(n, "torch.", 6);
}

/* 1 if fn is defined by torch (its __module__ is torch or torch.*). */
int cdy_is_torch_callable(PyObject *fn)
{
    PyObject *m = PyObject_GetAttrString(fn, "__module__");
    int r = 0;
    if (m && PyUnicode_Check(m)) {
        const char *n = PyUnicode_AsUTF8(m);
        r = n && (!strcmp(n, "torch") || !strncmp(n, "torch.", 6));
    }
    Py_XDECREF(m);
    PyErr_Clear();
    return r;
}

/* ---- sources ----------------------------------------------------------------- */

/* A zeroed source of kind, in the arena. */
cdy_src *cdy_src_new(tracer *tr, int kind)
{
    cdy_src *s = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_src));
    if (s)
        s->kind = kind;
    else
        cdy_tr_stop(tr, OUT_OF_MEMORY);
    return s;
}

/* base followed by one more step (getattr name, or [key] when item). */
cdy_src *cdy_src_step(tracer *tr, const cdy_src *base, PyObject *key, int item)
{
    if (!base || base->nattrs >= CDY_MAX_ATTRS)
        return NULL;
    cdy_src *s = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_src));
    if (!s || !cdy_tr_keep(tr, Py_NewRef(key)))
        return NULL;
    *s = *base;
    s->attrs[s->nattrs] = key;
    s->item[s->nattrs++] = (char)item;
    return s;
}

/* ---- graph values ------------------------------------------------------------ */

/* A new graph value; NULL when stopped. */
cdy_value *cdy_graph_add(tracer *tr, int kind, int *index)
{
    cdy_graph *g = &tr->t->graph;
    if (g->nvalues == g->cap_values) {
        int cap = g->cap_values ? 2 * g->cap_values : 32;
        cdy_value *v = PyMem_Realloc(g->values, sizeof(cdy_value) * (size_t)cap);
        if (!v) {
            cdy_tr_stop(tr, OUT_OF_MEMORY);
            return NULL;
        }
        g->values = v;
        g->cap_values = cap;
    }
    cdy_value *v = &g->values[g->nvalues];
    memset(v, 0, sizeof(*v));
    v->kind = kind;
    *index = g->nvalues++;
    return v;
}

/* Read meta (dtype, sizes, strides) of a (fake) tensor; 0, or -1 if unsupported. */
int cdy_read_meta(tracer *tr, PyObject *x, cdy_meta *m)
{
    PyObject *dt = PyObject_GetAttr(x, cdy_str.dtype);
    PyObject *size = dt ? PyObject_GetAttr(x, cdy_str.shape) : NULL;
    PyObject *stride = size ? PyObject_CallMethodNoArgs(x, cdy_str.stride) : NULL;
    int r = -1;
    if (!stride) {
        cdy_tr_stop_exc(tr, READ_META);
        goto done;
    }
    m->dtype = cdy_dtype_from_obj(dt);
    m->ndim = (int)PyTuple_GET_SIZE(size);
    if (m->dtype == CDY_DT_NONE) {
        PyObject *s = PyObject_Str(dt);
        cdy_tr_stop(tr, DTYPE, s ? PyUnicode_AsUTF8(s) : "?");
        Py_XDECREF(s);
        goto done;
    }
    if (m->ndim > CDY_MAX_NDIM) {
        cdy_tr_stop(tr, TOO_MANY_DIMS, CDY_MAX_NDIM);
        goto done;
    }
    for (int d = 0; d < m->ndim; d++) {
        m->sizes[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(size, d));
        m->strides[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, d));
    }
    r = 0;
done:
    Py_XDECREF(dt);
    Py_XDECREF(size);
    Py_XDECREF(stride);
    return r;
}

/* A fake (meta) tensor with x's sizes, strides and dtype; new ref or NULL. */
static PyObject *make_fake(PyObject *x, PyObject *dtype)
{
    PyObject *size = PyObject_GetAttr(x, cdy_str.shape);
    PyObject *stride = size ? PyObject_CallMethodNoArgs(x, cdy_str.stride) : NULL;
    PyObject *dt = dtype ? Py_NewRef(dtype) : (stride ? PyObject_GetAttr(x, cdy_str.dtype) : NULL);
    PyObject *r = NULL;
    if (stride && dt) {
        PyObject *args[4] = {size, stride, dt, meta_str};
        r = PyObject_Vectorcall(empty_strided, args, 2, meta_kw);
    }
    Py_XDECREF(size);
    Py_XDECREF(stride);
    Py_XDECREF(dt);
    return r;
}

/* A new meta tensor with meta m, kept by the trace; NULL when stopped. */
PyObject *cdy_fake_from_meta(tracer *tr, const cdy_meta *m)
{
    PyObject *size = PyTuple_New(m->ndim), *stride = PyTuple_New(m->ndim), *r = NULL;
    for (int d = 0; size && stride && d < m->ndim; d++) {
        PyTuple_SET_ITEM(size, d, PyLong_FromLongLong(m->sizes[d]));
        PyTuple_SET_ITEM(stride, d, PyLong_FromLongLong(m->strides[d]));
    }
    if (size && stride && !PyErr_Occurred()) {
        PyObject *args[4] = {size, stride, cdy_dtype_obj(m->dtype), meta_str};
        r = PyObject_Vectorcall(empty_strided, args, 2, meta_kw);
    }
    Py_XDECREF(size);
    Py_XDECREF(stride);
    if (!r || !cdy_tr_keep(tr, r)) {
        cdy_tr_stop_exc(tr, MAKE_FAKE);
        return NULL;
    }
    return r;
}

/* 1 if tensor x lives on the meta device. */
static int is_meta(PyObject *x)
{
    PyObject *m = PyObject_GetAttrString(x, "is_meta");
    int r = m == Py_True;
    Py_XDECREF(m);
    PyErr_Clear();
    return r;
}

/* A TENSOR tvar for a new graph node whose result is `out`. */
tvar *cdy_tensor_node(tracer *tr, PyObject *out, int *index)
{
    if (!is_meta(out)) {   /* e.g. a factory call made a real tensor: keep only its meta */
        PyObject *fake = make_fake(out, NULL);
        if (!fake) {
            cdy_tr_stop_exc(tr, MAKE_FAKE);
            return NULL;
        }
        out = fake;
        if (!cdy_tr_keep(tr, out))
            return NULL;
    }
    cdy_meta m;
    if (cdy_read_meta(tr, out, &m))
        return NULL;
    if ((*index = cdy_node_add(tr, CDY_OP_EXTERN, NULL, 0, &m, m.dtype)) < 0)
        return NULL;
    return cdy_tensor_tvar(tr, out, *index);
}

/* A TENSOR tvar for graph value `value` whose fake is `fake`; NULL when stopped. */
tvar *cdy_tensor_tvar(tracer *tr, PyObject *fake, int value)
{
    tvar *v = cdy_tv_new(tr, TV_TENSOR);
    if (!v)
        return NULL;
    v->obj = fake;
    v->value = value;
    v->tp = (PyTypeObject *)cdy_tensor_type;
    return v;
}

/* See trace.h: the one place the tracer names the cast op. */
int cdy_node_cast(tracer *tr, int v, const cdy_meta *m, int dt)
{
    return cdy_node_add(tr, CDY_OP_CAST, &v, 1, m, dt);
}

/* A new node computing op over args with meta m; its value number or -1. */
int cdy_node_add(tracer *tr, int op, const int *args, int nargs, const cdy_meta *m, int cdt)
{
    int idx;
    if (CDY_TR_CHECK(tr, nargs >= 0 && nargs <= CDY_MAX_NODE_ARGS, NODE_ARGS, nargs))
        return -1;
    cdy_value *gv = cdy_graph_add(tr, CDY_VAL_NODE, &idx);
    if (!gv)
        return -1;
    gv->meta = *m;
    gv->op = op;
    gv->nargs = nargs;
    if (nargs)
        memcpy(gv->args, args, sizeof(int) * (size_t)nargs);
    gv->compute_dtype = cdt;
    gv->source_line = PyCode_Addr2Line(tr->co, tr->pc * 2);
    gv->source_code = tr->co;
    return idx;
}

/* A new scalar value of dtype dt holding i or f; its number or -1. */
static int scalar_add(tracer *tr, int dt, long long i, double f)
{
    int idx;
    cdy_value *v = cdy_graph_add(tr, CDY_VAL_SCALAR, &idx);
    if (!v)
        return -1;
    v->meta.dtype = dt;
    v->i = i;
    v->f = f;
    return idx;
}

int cdy_scalar_int(tracer *tr, long long i)
{
    return scalar_add(tr, CDY_DT_INT64, i, 0);
}

int cdy_scalar_float(tracer *tr, double f)
{
    return scalar_add(tr, CDY_DT_FLOAT64, 0, f);
}

int cdy_scalar_bool(tracer *tr, int b)
{
    return scalar_add(tr, CDY_DT_BOOL, b != 0, 0);
}

/* ---- wrapping values read from the frame ----------------------------------- */

/* The memo entry of src's description, if this trace wrapped it already. */
static tvar *memo_find(tracer *tr, const char *desc)
{
    tv_memo *m = (tv_memo *)tr->t->memo;
    for (int i = 0; i < tr->t->nmemo; i++)
        if (!strcmp(m[i].key, desc))
            return m[i].var;
    return NULL;
}

/* Remember that desc was wrapped as v. */
static void memo_add(tracer *tr, const char *desc, tvar *v)
{
    cdy_trace *t = tr->t;
    if (t->nmemo == t->cap_memo) {
        int cap = t->cap_memo ? 2 * t->cap_memo : 64;
        tv_memo *m = cdy_arena_alloc(&t->arena, sizeof(tv_memo) * (size_t)cap);
        if (!m)
            return;
        if (t->nmemo)
            memcpy(m, t->memo, sizeof(tv_memo) * (size_t)t->nmemo);
        t->memo = m;
        t->cap_memo = cap;
    }
    tv_memo *m = (tv_memo *)t->memo;
    m[t->nmemo].key = cdy_arena_strdup(&t->arena, desc);
    m[t->nmemo++].var = v;
}

/* Later reads of src give v (an attribute store, trace/mutate.c); 0 or -1. */
int cdy_memo_set(tracer *tr, const cdy_src *src, tvar *v)
{
    char desc[CDY_DESC_LEN] = "";
    cdy_src_name(src, tr->t->top_code, desc, sizeof(desc));
    tv_memo *m = (tv_memo *)tr->t->memo;
    for (int i = 0; i < tr->t->nmemo; i++)
        if (!strcmp(m[i].key, desc)) {
            m[i].var = v;
            return 0;
        }
    int n = tr->t->nmemo;
    memo_add(tr, desc, v);
    return tr->t->nmemo > n ? 0 : cdy_tr_stop(tr, OUT_OF_MEMORY);
}

/* A tensor read from the frame at src: guard it, make it a graph input. */
static tvar *wrap_tensor(tracer *tr, PyObject *x, const cdy_src *src, const char *desc)
{
    if (!src) {
        cdy_tr_stop(tr, TENSOR_NO_SOURCE, desc);
        return NULL;
    }
    PyObject *cpu = PyObject_GetAttr(x, cdy_str.is_cpu);
    PyObject *lay = cpu ? PyObject_GetAttr(x, cdy_str.layout) : NULL;
    PyObject *rg = lay ? PyObject_GetAttr(x, cdy_str.requires_grad) : NULL;
    PyObject *dt = rg ? PyObject_GetAttr(x, cdy_str.dtype) : NULL;
    tvar *v = NULL;
    if (!dt)
        cdy_tr_stop_exc(tr, READ_TENSOR_PROPS);
    else if (cpu != Py_True)
        cdy_tr_stop(tr, NOT_CPU, desc);
    else if (lay != cdy_strided_layout)
        cdy_tr_stop(tr, NOT_STRIDED, desc);
    else if (rg == Py_True && tr->t->grad_enabled && !cdy_autograd_on()) {
        if (!cdy_guard_grad_mode(tr, 1))   /* the eager entry is for grad mode only */
            cdy_tr_stop(tr, AUTOGRAD, desc);
    }
    else {
        cdy_meta m;
        PyObject *fake = make_fake(x, dt);
        int idx;
        cdy_value *gv;
        cdy_guard *g;
        if (!fake)
            cdy_tr_stop_exc(tr, MAKE_FAKE);
        else if (cdy_tr_keep(tr, fake) && !cdy_read_meta(tr, fake, &m) &&
                 (gv = cdy_graph_add(tr, CDY_VAL_INPUT, &idx)) &&
                 (g = cdy_guards_add(&tr->t->guards, CDY_GUARD_TENSOR, src, desc)) &&
                 (v = cdy_tv_new(tr, TV_TENSOR))) {
            gv->meta = m;
            gv->input_index = tr->t->graph.ninputs++;
            g->expect = Py_NewRef((PyObject *)Py_TYPE(x));
            g->dtype = Py_NewRef(dt);
            g->requires_grad = rg == Py_True;
            g->ndim = m.ndim;
            memcpy(g->sizes, m.sizes, sizeof(m.sizes));
            memcpy(g->strides, m.strides, sizeof(m.strides));
            tr->t->any_requires_grad |= rg == Py_True;
            if (rg == Py_True && tr->t->grad_enabled &&
                cdy_autograd_note_input(tr->t, gv->input_index))
                cdy_tr_stop(tr, OUT_OF_MEMORY);
            v->obj = fake;
            v->value = idx;
            v->src = src;
            v->tp = Py_TYPE(x);
            v->requires_grad = rg == Py_True;
        }
        else if (tr->t->status == CDY_TRACE_OK)
            cdy_tr_stop_exc(tr, PY_ERROR);
    }
    Py_XDECREF(cpu);
    Py_XDECREF(lay);
    Py_XDECREF(rg);
    Py_XDECREF(dt);
    return v;
}

/* 1 if every key of tuple kt is a constant or an object compared by identity (a class,
 * a function, a typing form: the KEYS guard's == on it is identity). */
static int keys_fixed(PyObject *kt)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kt); i++) {
        PyObject *k = PyTuple_GET_ITEM(kt, i);
        PyTypeObject *t = Py_TYPE(k);
        if (!cdy_is_const(k) && !PyType_Check(k) && !PyFunction_Check(k) &&
            !(t->tp_richcompare == PyBaseObject_Type.tp_richcompare &&
              t->tp_hash == PyBaseObject_Type.tp_hash))
            return 0;
    }
    return 1;
}

/* A list, tuple or dict read from the frame at src: a symbolic container
 * whose items are wrapped from item sources, guarded by type and length
 * (or keys); so reading it never goes stale, and equal containers reuse
 * the entry.  Big containers, or dicts with non-constant keys: identity. */
static tvar *wrap_container(tracer *tr, PyObject *o, const cdy_src *src, const char *desc)
{
    int is_dict = PyDict_CheckExact(o);
    Py_ssize_t n = is_dict ? PyDict_GET_SIZE(o) : PySequence_Fast_GET_SIZE(o);
    PyObject *keys = is_dict ? PyDict_Keys(o) : NULL, *kt = keys ? PyList_AsTuple(keys) : NULL;
    Py_XDECREF(keys);
    if (n > 256 || (is_dict && (!kt || !keys_fixed(kt)))) {
        Py_XDECREF(kt);
        PyErr_Clear();
        cdy_guard *g = cdy_guards_add(&tr->t->guards, CDY_GUARD_ID, src, desc);
        tvar *v = g && cdy_tr_keep(tr, Py_NewRef(o)) ? cdy_tv_new(tr, TV_OBJ) : NULL;
        if (g)
            g->expect = Py_NewRef(o);
        if (v) {
            v->obj = o;
            v->src = src;
        }
        return v;
    }
    cdy_guard *g = cdy_guards_add(&tr->t->guards, is_dict ? CDY_GUARD_KEYS : CDY_GUARD_LEN, src, desc);
    if (!g) {
        Py_XDECREF(kt);
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    g->expect = is_dict ? kt : Py_NewRef((PyObject *)Py_TYPE(o));
    g->ndim = (int)n;
    tvar *v = cdy_tv_new(tr, is_dict ? TV_DICT : PyList_CheckExact(o) ? TV_LIST : TV_TUPLE);
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
    PyObject **ks = cdy_arena_alloc(&tr->t->arena, sizeof(PyObject *) * (size_t)(n + 1));
    if (!v || !items || !ks)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = is_dict ? PyTuple_GET_ITEM(kt, i) : cdy_tr_keep(tr, PyLong_FromSsize_t(i));
        PyObject *item = is_dict ? PyDict_GetItemWithError(o, key) : PySequence_Fast_ITEMS(o)[i];
        const cdy_src *is = key && item ? cdy_src_step(tr, src, key, 1) : NULL;
        if (!is || !(items[i] = cdy_wrap(tr, item, is, 1))) {
            if (tr->t->status == CDY_TRACE_OK)
                cdy_tr_stop(tr, CONTAINER_TOO_DEEP, desc);
            return NULL;
        }
        ks[i] = key;
    }
    v->items = items;
    v->keys = is_dict ? ks : NULL;
    v->n = (int)n;
    v->src = src;
    return v;
}

/* See trace.h. */
int cdy_is_plain_instance(PyObject *o)
{
    static PyObject *abc_meta;
    if (!abc_meta) {
        PyObject *abc = PyImport_ImportModule("abc");
        abc_meta = abc ? PyObject_GetAttrString(abc, "ABCMeta") : NULL;
        Py_XDECREF(abc);
        PyErr_Clear();
    }
    PyTypeObject *tp = Py_TYPE(o);
    if (Py_TYPE(tp) != &PyType_Type && (PyObject *)Py_TYPE(tp) != abc_meta)
        return 0;
    for (PyTypeObject *b = tp; b && b != &PyBaseObject_Type; b = b->tp_base)
        if (!(b->tp_flags & Py_TPFLAGS_HEAPTYPE))
            return 0;
    PyObject *mro = tp->tp_mro;
    for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *b = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (b != &PyBaseObject_Type && !(b->tp_flags & Py_TPFLAGS_HEAPTYPE))
            return 0;
    }
    return 1;
}

/* collections.OrderedDict, resolved once (borrowed; NULL if it cannot be). */
PyObject *cdy_ordered_dict_type(void)
{
    static PyObject *odict;
    if (!odict) {
        PyObject *co = PyImport_ImportModule("collections");
        odict = co ? PyObject_GetAttrString(co, "OrderedDict") : NULL;
        Py_XDECREF(co);
        PyErr_Clear();
    }
    return odict;
}

/* 1 if o is an instance of a Python subclass of dict or OrderedDict (a
 * transformers ModelOutput): classes but object, dict and OrderedDict are
 * Python classes of metaclass type.  Guarded by type: its items and
 * attributes are read through their own sources (out[0], out.logits). */
static int is_dict_subclass_instance(PyObject *o)
{
    PyObject *odict = cdy_ordered_dict_type();
    PyTypeObject *tp = Py_TYPE(o);
    if (!PyDict_Check(o) || PyDict_CheckExact(o) || Py_TYPE(tp) != &PyType_Type ||
        !(tp->tp_flags & Py_TPFLAGS_HEAPTYPE))
        return 0;
    PyObject *mro = tp->tp_mro;
    for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); i++) {
        PyObject *b = PyTuple_GET_ITEM(mro, i);
        if (b != (PyObject *)&PyBaseObject_Type && b != (PyObject *)&PyDict_Type && b != odict &&
            !(((PyTypeObject *)b)->tp_flags & Py_TPFLAGS_HEAPTYPE))
            return 0;
    }
    return 1;
}

/* 1 if o is an instance of a namedtuple class (or a Python subclass of
 * one): a tuple whose classes but tuple and object are Python classes of
 * metaclass type, with _fields.  Guarded by type: its fields are read
 * through their own sources (p.a), as a plain instance's attributes. */
static int is_namedtuple_instance(PyObject *o)
{
    PyTypeObject *tp = Py_TYPE(o);
    if (!PyTuple_Check(o) || PyTuple_CheckExact(o) || Py_TYPE(tp) != &PyType_Type)
        return 0;
    PyObject *mro = tp->tp_mro;
    for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *b = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (b != &PyBaseObject_Type && b != &PyTuple_Type && !(b->tp_flags & Py_TPFLAGS_HEAPTYPE))
            return 0;
    }
    static PyObject *str_fields;
    if (!str_fields && !(str_fields = PyUnicode_InternFromString("_fields")))
        return 0;
    PyObject *f = _PyType_Lookup(tp, str_fields);
    return f && PyTuple_Check(f);
}

/* 1 if guards already hold a guard of kind on src expecting o. */
static int has_guard(tracer *tr, int kind, const cdy_src *src, PyObject *o)
{
    const cdy_guards *gs = &tr->t->guards;
    for (int i = 0; i < gs->n; i++)
        if (gs->items[i].kind == kind && gs->items[i].expect == o &&
            cdy_src_equal(&gs->items[i].src, src))
            return 1;
    return 0;
}

/* Add a guard of kind on src.name (expect: the value to match), unless an equal one is
 * there; 0 or -1 (stopped). */
static int guard_step(tracer *tr, const cdy_src *src, const char *name, int kind, PyObject *expect)
{
    PyObject *key = cdy_tr_keep(tr, PyUnicode_InternFromString(name));
    const cdy_src *s = key ? cdy_src_step(tr, src, key, 0) : NULL;
    if (s && has_guard(tr, kind, s, expect))
        return 0;
    char desc[CDY_DESC_LEN] = "";
    if (s)
        cdy_src_name(s, tr->t->top_code, desc, sizeof(desc));
    cdy_guard *g = s ? cdy_guards_add(&tr->t->guards, kind, s, desc) : NULL;
    if (!g)
        return cdy_tr_stop(tr, SOURCE_TOO_DEEP, name);
    g->expect = Py_NewRef(expect);
    return 0;
}

/* See trace.h: an ID guard on type(inst).<name> (steps __class__, name), once. */
int cdy_tr_guard_class_attr(tracer *tr, tvar *inst, PyObject *name, PyObject *expect)
{
    if (!inst->src || inst->src->nattrs + 2 > CDY_MAX_ATTRS)
        return 0;   /* made by the trace (its class is fixed), or a path too deep to guard */
    PyObject *cls = cdy_tr_keep(tr, PyUnicode_InternFromString("__class__"));
    const cdy_src *c = cls ? cdy_src_step(tr, inst->src, cls, 0) : NULL;
    if (!c)
        return cdy_tr_stop(tr, SOURCE_TOO_DEEP, PyUnicode_AsUTF8(name));
    return guard_step(tr, c, PyUnicode_AsUTF8(name), CDY_GUARD_ID, expect);
}

/* A Python function read from the frame at src (not a global: one made
 * anew on each call, a closure or a lambda passed in): guarded by what a
 * call of it depends on, not by identity: its type and code, its globals,
 * constant defaults (its cells are read through their own sources, see
 * op_load_deref).  NULL (not stopped) when it has defaults that are not
 * constants: the caller guards it by identity. */
static tvar *wrap_function(tracer *tr, PyObject *o, const cdy_src *src, const char *desc)
{
    PyFunctionObject *f = (PyFunctionObject *)o;
    PyObject *defs = f->func_defaults ? f->func_defaults : Py_None;
    if ((defs != Py_None && !cdy_is_const(defs)) ||
        (f->func_kwdefaults && PyDict_GET_SIZE(f->func_kwdefaults)))
        return NULL;
    cdy_guard *g = cdy_guards_add(&tr->t->guards, CDY_GUARD_TYPE, src, desc);
    if (!g) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    g->expect = Py_NewRef((PyObject *)Py_TYPE(o));
    PyObject *kwdefs = f->func_kwdefaults ? f->func_kwdefaults : Py_None;
    if (guard_step(tr, src, "__code__", CDY_GUARD_ID, f->func_code) ||
        guard_step(tr, src, "__globals__", CDY_GUARD_ID, f->func_globals) ||
        guard_step(tr, src, "__defaults__", defs == Py_None ? CDY_GUARD_ID : CDY_GUARD_CONST, defs) ||
        (kwdefs == Py_None ? guard_step(tr, src, "__kwdefaults__", CDY_GUARD_ID, Py_None)
                           : guard_step(tr, src, "__kwdefaults__", CDY_GUARD_LEN,
                                        (PyObject *)Py_TYPE(kwdefs))))
        return NULL;
    tvar *v = cdy_tr_keep(tr, Py_NewRef(o)) ? cdy_tv_new(tr, TV_OBJ) : NULL;
    if (v) {
        v->obj = o;
        v->src = src;
    }
    return v;
}

/* A bound method of a Python function read from the frame at src: a BOUND
 * of its function (by identity) and its self (wrapped from src.__self__,
 * so a per-call object is guarded as any argument is); NULL when stopped. */
static tvar *wrap_method(tracer *tr, PyObject *o, const cdy_src *src, const char *desc)
{
    cdy_guard *g = cdy_guards_add(&tr->t->guards, CDY_GUARD_TYPE, src, desc);
    if (!g) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    g->expect = Py_NewRef((PyObject *)Py_TYPE(o));
    PyObject *fn = PyMethod_GET_FUNCTION(o), *self = PyMethod_GET_SELF(o);
    PyObject *key = cdy_tr_keep(tr, PyUnicode_InternFromString("__self__"));
    const cdy_src *ss = key ? cdy_src_step(tr, src, key, 0) : NULL;
    if (!ss) {
        cdy_tr_stop(tr, SELF_SOURCE_TOO_DEEP);
        return NULL;
    }
    if (guard_step(tr, src, "__func__", CDY_GUARD_ID, fn) || !cdy_tr_keep(tr, Py_NewRef(fn)))
        return NULL;
    tvar *st = cdy_wrap(tr, self, ss, 1);
    tvar *b = st ? cdy_tv_new(tr, TV_BOUND) : NULL;
    if (b) {
        b->obj = fn;
        b->self = st;
    }
    return b;
}

/* A tvar for object o read from the frame at src, with its guard (none when
 * guard is 0: attributes of torch modules and torch's own globals). */
tvar *cdy_wrap(tracer *tr, PyObject *o, const cdy_src *src, int guard)
{
    char desc[CDY_DESC_LEN] = "";
    if (src) {
        cdy_src_name(src, tr->t->top_code, desc, sizeof(desc));
        tvar *seen = memo_find(tr, desc);
        if (seen)
            return seen;
    }
    PyTypeObject *tp = Py_TYPE(o);
    tvar *v;
    if (src && guard && (PyList_CheckExact(o) || PyDict_CheckExact(o) ||
                         (PyTuple_CheckExact(o) && !cdy_is_const(o)))) {
        v = wrap_container(tr, o, src, desc);
    }
    else if (PyObject_TypeCheck(o, (PyTypeObject *)cdy_tensor_type)) {
        if ((PyObject *)tp != cdy_tensor_type && (PyObject *)tp != cdy_parameter_type) {
            cdy_tr_stop(tr, TENSOR_SUBCLASS, tp->tp_name);
            return NULL;
        }
        v = wrap_tensor(tr, o, src, desc);
    }
    else if (src && guard && src->kind != CDY_SRC_GLOBAL && PyFunction_Check(o) &&
             (v = wrap_function(tr, o, src, desc)))
        ;
    else if (tr->t->status != CDY_TRACE_OK)
        return NULL;
    else if (src && guard && (src->kind != CDY_SRC_GLOBAL || src->nattrs) && PyMethod_Check(o) &&
             PyFunction_Check(PyMethod_GET_FUNCTION(o))) {
        /* an attribute read makes a new bound method each time (a global's
         * attribute too: G['Signature'].from_callable), never the same object */
        if (!(v = wrap_method(tr, o, src, desc)))
            return NULL;
    }
    else if (src && guard && PyFloat_CheckExact(o) && (v = cdy_optim_float_input(tr, o, src)))
        ;   /* an optimizer's lr that changed: a graph input (a 0-dim float64 tensor) */
    else if (tr->t->status != CDY_TRACE_OK)
        return NULL;
    else {
        int konst = cdy_is_const(o);
        /* an nn.Module (self, or a submodule read from one) is guarded by
         * type: one entry serves every instance, since each attribute read
         * from it has its own guard; so is an instance of a plain class
         * reached from an argument (a cache object made anew for each call);
         * globals stay guarded by identity */
        int by_type = !konst && src &&
                      (((src->kind == CDY_SRC_LOCAL || src->nattrs) &&
                        PyObject_TypeCheck(o, (PyTypeObject *)cdy_module_type)) ||
                       (src->kind == CDY_SRC_LOCAL &&
                        (cdy_is_plain_instance(o) || is_namedtuple_instance(o) ||
                         is_dict_subclass_instance(o))));
        if (guard && src) {
            cdy_guard *g = cdy_guards_add(&tr->t->guards, konst ? CDY_GUARD_CONST :
                                          by_type ? CDY_GUARD_TYPE : CDY_GUARD_ID, src, desc);
            if (!g) {
                cdy_tr_stop_exc(tr, PY_ERROR);
                return NULL;
            }
            g->expect = Py_NewRef(by_type ? (PyObject *)tp : o);
        }
        v = konst ? cdy_tv_const(tr, Py_NewRef(o)) : NULL;
        if (v && guard && src && PyLong_CheckExact(o))   /* an int whose value changed */
            v = cdy_sx_int_input(tr, v, o, src);
        if (!konst && cdy_tr_keep(tr, Py_NewRef(o)) && (v = cdy_tv_new(tr, TV_OBJ))) {
            v->obj = o;
            v->by_type = by_type && guard;
        }
        if (v)
            v->src = src;
    }
    if (v && src)
        memo_add(tr, desc, v);
    return v;
}

/* ---- functions the trace made ------------------------------------------------------ */

/* See trace.h. */
int cdy_fixed_by_convention(PyObject *o)
{
    static PyObject *field_t, *sig_t, *param_t;
    if (!field_t) {
        PyObject *dc = PyImport_ImportModule("dataclasses"), *in = PyImport_ImportModule("inspect");
        field_t = dc ? PyObject_GetAttrString(dc, "Field") : NULL;
        sig_t = in ? PyObject_GetAttrString(in, "Signature") : NULL;
        param_t = in ? PyObject_GetAttrString(in, "Parameter") : NULL;
        Py_XDECREF(dc);
        Py_XDECREF(in);
        PyErr_Clear();
    }
    PyObject *t = (PyObject *)Py_TYPE(o);
    return PyType_Check(o) || PyFunction_Check(o) || PyCFunction_Check(o) || PyCode_Check(o) ||
           (field_t && t == field_t) || (sig_t && t == sig_t) || (param_t && t == param_t) ||
           PyObject_TypeCheck(o, &PyProperty_Type);
}

/* The attribute dict of function tvar f (its store: a DICT the trace owns), made on use. */
static tvar *func_dict(tracer *tr, tvar *f)
{
    if (!f->store && (f->store = cdy_tv_new(tr, TV_DICT)))
        f->store->obj = NULL;
    return f->store;
}

/* See trace.h: f.name for a function the trace made (def / lambda): what the trace
 * stored (functools.wraps' __wrapped__, __name__, ...), else the function object's own
 * (fixed with it: its code, name, defaults). */
tvar *cdy_func_attr(tracer *tr, tvar *f, PyObject *name)
{
    if (!PyUnicode_CompareWithASCIIString(name, "__dict__"))
        return func_dict(tr, f);
    int i = f->store ? cdy_dict_find(tr, f->store, name) : -1;
    if (i == -2)
        return NULL;
    if (i >= 0)
        return f->store->items[i];
    PyObject *v = PyObject_GetAttr(f->obj, name);
    if (!v) {
        cdy_tr_stop_exc(tr, RAISED_ATTR);
        return NULL;
    }
    tvar *r = cdy_fixed_value(tr, v);
    Py_DECREF(v);
    return r;
}

/* See trace.h: f.name = v on a function the trace made. */
int cdy_func_setattr(tracer *tr, tvar *f, PyObject *name, tvar *v)
{
    tvar *d = func_dict(tr, f);
    return d ? cdy_dict_set(tr, d, name, v) : -1;
}

/* ---- identity of values read from the frame ---------------------------------------- */

/* The real object at src now (the top frame's context); new reference, or NULL (error). */
static PyObject *real_at(tracer *tr, const cdy_src *src)
{
    tracer *top = tr;
    while (top->parent)
        top = top->parent;
    return cdy_src_fetch(src, top->frame_locals, top->globals, top->builtins, top->closure);
}

/* See trace.h. */
int cdy_same_object(tracer *tr, tvar *a, tvar *b)
{
    PyObject *x = real_at(tr, a->src), *y = x ? real_at(tr, b->src) : NULL;
    int same = x && y && x == y;
    Py_XDECREF(x);
    Py_XDECREF(y);
    if (PyErr_Occurred())
        return cdy_tr_stop_exc(tr, PY_ERROR);
    char da[CDY_DESC_LEN / 2] = "", db[CDY_DESC_LEN / 2] = "", desc[96];
    cdy_src_name(a->src, tr->t->top_code, da, sizeof(da));
    cdy_src_name(b->src, tr->t->top_code, db, sizeof(db));
    snprintf(desc, sizeof(desc), "%.40s is %.40s", da, db);
    cdy_guard *g = cdy_guards_add(&tr->t->guards, CDY_GUARD_SAME, a->src, desc);
    cdy_src *o = g ? PyMem_Calloc(1, sizeof(cdy_src)) : NULL;
    if (!o)
        return cdy_tr_stop_exc(tr, PY_ERROR);
    cdy_src_copy(o, b->src);
    g->other = o;
    g->requires_grad = same;
    return same;
}

/* See trace.h. */
int cdy_is_fixed(tracer *tr, tvar *v, tvar *fixed)
{
    PyObject *x = real_at(tr, v->src);
    int same = x && x == fixed->obj;
    Py_XDECREF(x);
    if (PyErr_Occurred())
        return cdy_tr_stop_exc(tr, PY_ERROR);
    if (!same)
        return cdy_tr_stop(tr, IS_BY_TYPE);
    char desc[CDY_DESC_LEN] = "";   /* it is that object: guarded by identity from now on */
    cdy_src_name(v->src, tr->t->top_code, desc, sizeof(desc));
    cdy_guard *g = cdy_guards_add(&tr->t->guards, CDY_GUARD_ID, v->src, desc);
    if (!g)
        return cdy_tr_stop_exc(tr, PY_ERROR);
    g->expect = Py_NewRef(fixed->obj);
    return 1;
}

/* See trace.h. */
PyObject *cdy_key_fixed(tracer *tr, tvar *k)
{
    PyObject *key = cdy_key_of(k);
    if (key || k->kind != TV_OBJ || !k->by_type || !k->src || !k->obj)
        return key;
    char desc[CDY_DESC_LEN] = "";   /* its identity decides: guard it, from now on */
    cdy_src_name(k->src, tr->t->top_code, desc, sizeof(desc));
    cdy_guard *g = cdy_guards_add(&tr->t->guards, CDY_GUARD_ID, k->src, desc);
    if (!g) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    g->expect = Py_NewRef(k->obj);
    k->by_type = 0;
    return k->obj;
}

/* ---- attributes ------------------------------------------------------------------ */

/* A Tensor method read as an attribute (LOAD_ATTR, e.g. before a call with *args): a
 * METHOD whose self is not among the call's arguments (pos = 1); NULL if name is not one. */
static tvar *tensor_bound_method(tracer *tr, tvar *t, PyObject *name)
{
    PyObject *d = _PyType_Lookup((PyTypeObject *)cdy_tensor_type, name);
    if (!d || !(PyObject_TypeCheck(d, &PyMethodDescr_Type) || PyFunction_Check(d)))
        return NULL;
    tvar *m = cdy_tv_new(tr, TV_METHOD);
    if (!m)
        return NULL;
    m->obj = name;
    m->self = t;
    m->pos = 1;
    return m;
}

/* Attribute of a tensor that is a constant under the tensor's guard. */
static tvar *tensor_attr(tracer *tr, tvar *t, PyObject *name)
{
    const char *n = PyUnicode_AsUTF8(name);
    static const char *consts[] = {"shape", "dtype", "ndim", "is_cuda", "layout", "is_sparse",
                                   "is_quantized", "is_nested", "is_mkldnn", "is_complex",
                                   "is_floating_point", "itemsize", NULL};
    static const char *views[] = {"T", "mT", "H", "mH", "real", NULL};
    int not_tr;
    tvar *tv = cdy_transpose_attr(tr, t, n, &not_tr);
    if (!not_tr)
        return tv;
    for (int i = 0; views[i]; i++)
        if (!strcmp(n, views[i])) {   /* a view: an extern call of operator.attrgetter(name) */
            PyObject *op = PyImport_ImportModule("operator");
            PyObject *ag = op ? PyObject_CallMethod(op, "attrgetter", "O", name) : NULL;
            Py_XDECREF(op);
            if (!cdy_tr_keep(tr, ag)) {
                cdy_tr_stop_exc(tr, PY_ERROR);
                return NULL;
            }
            return cdy_call_extern(tr, ag, n, &t, 1);
        }
    if (!strcmp(n, "device")) {       /* the fake says meta; the real tensor is on the cpu */
        PyObject *d = PyObject_CallMethod(cdy_torch, "device", "s", "cpu");
        if (!d) {
            cdy_tr_stop_exc(tr, PY_ERROR);
            return NULL;
        }
        return cdy_tv_const(tr, d);   /* a constant: its .type, ==, str() fold */
    }
    if (!strcmp(n, "__class__"))   /* its real type, fixed by the tensor's guard */
        return cdy_fixed_value(tr, (PyObject *)t->tp);
    if (!strcmp(n, "is_cpu") || !strcmp(n, "is_meta"))   /* the fake is on meta; the real one on cpu */
        return cdy_tv_const(tr, Py_NewRef(n[3] == 'c' ? Py_True : Py_False));
    if (!strcmp(n, "requires_grad") && tr->t->training &&
        tr->t->graph.values[t->value].kind != CDY_VAL_INPUT) {
        cdy_tr_stop(tr, AUTOGRAD_ATTR, n);
        return NULL;
    }
    if (!strcmp(n, "requires_grad"))
        return cdy_tv_const(tr, Py_NewRef(t->requires_grad ? Py_True : Py_False));
    for (int i = 0; consts[i]; i++)
        if (!strcmp(n, consts[i])) {
            PyObject *v = PyObject_GetAttr(t->obj, name);
            if (!v) {
                cdy_tr_stop_exc(tr, RAISED_TENSOR_ATTR);
                return NULL;
            }
            if (!strcmp(n, "shape"))   /* sizes symbolic ints (trace/symint.c) */
                return cdy_sx_tag_shape(tr, cdy_tv_const(tr, v), t);
            return cdy_tv_const(tr, v);
        }
    if (!strcmp(n, "grad"))
        return cdy_tensor_grad(tr, t, name);
    tvar *bm = tensor_bound_method(tr, t, name);   /* x.reshape read by LOAD_ATTR */
    if (bm || PyErr_Occurred())
        return bm;
    cdy_tr_stop(tr, TENSOR_ATTR, n);
    return NULL;
}

/* Where attribute name of nn.Module/object o lives: its __dict__, or one of a
 * module's _parameters/_buffers/_modules dicts.  Sets *src_out, returns the
 * value (new ref), or NULL with no error when it is not an instance attribute. */
static PyObject *instance_attr(tracer *tr, PyObject *o, const cdy_src *base, PyObject *name,
                               const cdy_src **src_out)
{
    PyObject **dictptr = PyType_Check(o) ? NULL : _PyObject_GetDictPtr(o);
    PyObject *d = dictptr ? *dictptr : NULL;
    if (!d)
        return NULL;   /* classes: read through getattr, which applies descriptors */
    PyObject *v = PyDict_GetItemWithError(d, name);
    if (v) {
        *src_out = cdy_src_step(tr, base, name, 0);
        return Py_NewRef(v);
    }
    if (!PyObject_TypeCheck(o, (PyTypeObject *)cdy_module_type))
        return NULL;
    PyObject *homes[3] = {str_parameters, str_buffers, str_modules};
    for (int i = 0; i < 3; i++) {
        PyObject *h = PyDict_GetItemWithError(d, homes[i]);
        v = h && PyDict_Check(h) ? PyDict_GetItemWithError(h, name) : NULL;
        if (v) {
            const cdy_src *s1 = cdy_src_step(tr, base, homes[i], 0);
            *src_out = s1 ? cdy_src_step(tr, s1, name, 1) : NULL;
            return Py_NewRef(v);
        }
    }
    PyErr_Clear();
    return NULL;
}

/* See trace.h. */
int cdy_contains_guarded(tracer *tr, tvar *c, tvar *k)
{
    static PyObject *mapping_abc;
    if (!mapping_abc) {
        PyObject *abc = PyImport_ImportModule("collections.abc");
        mapping_abc = abc ? PyObject_GetAttrString(abc, "Mapping") : NULL;
        Py_XDECREF(abc);
        if (!mapping_abc) {
            cdy_tr_stop_exc(tr, PY_ERROR);
            return -2;
        }
    }
    int is_map = PyDict_Check(c->obj) ? 1 : PyObject_IsInstance(c->obj, mapping_abc);
    if (is_map != 1) {
        PyErr_Clear();
        return -1;
    }
    int r = PySequence_Contains(c->obj, k->obj);
    if (r < 0) {
        cdy_tr_stop_exc(tr, RAISED_IN);
        return -2;
    }
    char desc[CDY_DESC_LEN] = "";
    cdy_src_name(c->src, tr->t->top_code, desc, sizeof(desc));
    cdy_guard *g = cdy_guards_add(&tr->t->guards, CDY_GUARD_CONTAINS, c->src, desc);
    if (!g) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return -2;
    }
    g->expect = Py_NewRef(k->obj);
    g->requires_grad = r;
    return r;
}

/* The value the trace already holds for base.name (read before, or stored by the traced
 * code: a store is replayed after the graph, so the real object does not show it yet). */
static tvar *stored_attr(tracer *tr, const cdy_src *base, PyObject *name)
{
    char desc[CDY_DESC_LEN] = "";
    const cdy_src *src = cdy_src_step(tr, base, name, 0);
    if (!src)
        return NULL;
    cdy_src_name(src, tr->t->top_code, desc, sizeof(desc));
    return memo_find(tr, desc);
}

/* Attribute name of an object fixed without a guard (a class reached from a value
 * the trace made, a dataclass Field): read now, the result fixed too. */
static tvar *fixed_attr(tracer *tr, PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v) {
        cdy_tr_stop_exc(tr, RAISED_ATTR);
        return NULL;
    }
    if (cdy_is_const(v))
        return cdy_tv_const(tr, v);
    tvar *r = cdy_tr_keep(tr, v) ? cdy_tv_new(tr, TV_OBJ) : NULL;
    if (r) {
        r->obj = v;
        r->fixed = 1;
    }
    return r;
}

/* Attribute name of a Python object (module, nn.Module, user object). */
static tvar *object_attr(tracer *tr, tvar *base, PyObject *name)
{
    PyObject *o = base->obj;
    const cdy_src *src = NULL;
    if (PyModule_Check(o)) {
        PyObject *v = PyObject_GetAttr(o, name);
        if (!v) {
            cdy_tr_stop_exc(tr, RAISED_ATTR);
            return NULL;
        }
        /* torch.X read by user code is guarded by identity (monkeypatching it
         * recompiles); torch's own code reaches its modules with no source */
        int torch_attr = cdy_is_torch_module(o);
        src = base->src ? cdy_src_step(tr, base->src, name, 0) : NULL;
        tvar *r = (src || torch_attr) ? cdy_wrap(tr, v, src, src != NULL) : NULL;
        if (!src && !torch_attr)
            cdy_tr_stop(tr, MODULE_ATTR_UNGUARDABLE, PyUnicode_AsUTF8(name));
        Py_DECREF(v);
        return r;
    }
    /* class attributes that are descriptors: methods, properties */
    PyObject *cls_attr = _PyType_Lookup(Py_TYPE(o), name);
    PyObject *own = PyType_Check(o) && !_PyType_Lookup(Py_TYPE(o), name)
                        ? _PyType_Lookup((PyTypeObject *)o, name) : NULL;
    if (own && Py_IS_TYPE(own, &PyClassMethodDescr_Type)) {
        /* a builtin class's classmethod (itertools.chain.from_iterable, dict.fromkeys): bound
         * anew at each read, so fixed with the class rather than guarded by identity */
        PyObject *v = PyObject_GetAttr(o, name);
        tvar *r = v ? cdy_fixed_value(tr, v) : NULL;
        Py_XDECREF(v);
        if (!r && tr->t->status == CDY_TRACE_OK)
            cdy_tr_stop_exc(tr, RAISED_ATTR);
        return r;
    }
    if (own && PyObject_TypeCheck(own, &PyClassMethod_Type)) {
        /* Cls.method of a classmethod: a new bound method at each read, so not guarded by
         * identity; the function bound to the class (fixed by the class's own guard) */
        PyObject *fn = cdy_tr_keep(tr, PyObject_GetAttrString(own, "__func__"));
        tvar *b = fn ? cdy_tv_new(tr, TV_BOUND) : NULL;
        if (b) {
            b->obj = fn;
            b->self = base;
        }
        return b;
    }
    if (cls_attr && PyFunction_Check(cls_attr) && !PyType_Check(o)) {
        tvar *b = cdy_tv_new(tr, TV_BOUND);
        if (b) {
            b->obj = cls_attr;
            b->self = base;
        }
        return b;
    }
    if (cls_attr && PyObject_TypeCheck(cls_attr, &PyClassMethod_Type) && !PyType_Check(o)) {
        PyObject *fn = PyObject_GetAttrString(cls_attr, "__func__");
        tvar *cls = fn && cdy_tr_keep(tr, fn) ? cdy_wrap(tr, (PyObject *)Py_TYPE(o), NULL, 0) : NULL;
        tvar *b = cls ? cdy_tv_new(tr, TV_BOUND) : NULL;
        if (b) {   /* the class is fixed by o's guard */
            b->obj = fn;
            b->self = cls;
        }
        return b;
    }
    if (cls_attr && PyObject_TypeCheck(cls_attr, &PyProperty_Type)) {
        PyObject *fget = PyObject_GetAttrString(cls_attr, "fget");
        tvar *fn = fget && cdy_tr_keep(tr, fget) ? cdy_tv_new(tr, TV_OBJ) : NULL;
        if (!fn || cdy_tr_guard_class_attr(tr, base, name, cls_attr))
            return NULL;
        fn->obj = fget;
        return cdy_call(tr, fn, &base, 1, NULL);
    }
    if (PyFunction_Check(o) && !PyUnicode_CompareWithASCIIString(name, "__code__"))
        /* a function's code (decorators read co_varnames): taken as fixed, as TorchDynamo does */
        return cdy_tv_const(tr, Py_NewRef(PyFunction_GET_CODE(o)));
    if (!base->src && (base->fixed || PyType_Check(o)))
        return fixed_attr(tr, o, name);
    if (!base->src && !PyUnicode_CompareWithASCIIString(name, "__class__") &&
        _PyType_Lookup(Py_TYPE(o), name) == _PyType_Lookup(&PyBaseObject_Type, name))
        return cdy_wrap(tr, (PyObject *)Py_TYPE(o), NULL, 0);   /* its class: fixed with it */
    if (!base->src) {
        cdy_tr_stop(tr, ATTR_NO_SOURCE, PyUnicode_AsUTF8(name));
        return NULL;
    }
    tvar *stored = stored_attr(tr, base->src, name);
    if (stored)
        return stored;
    PyObject *v = instance_attr(tr, o, base->src, name, &src);
    if (!v && PyErr_Occurred()) {
        cdy_tr_stop_exc(tr, ATTR_READ);
        return NULL;
    }
    if (!v) {   /* class-level value or __getattr__: read it generically */
        v = PyObject_GetAttr(o, name);
        if (!v) {
            cdy_tr_stop_exc(tr, RAISED_ATTR);
            return NULL;
        }
        src = cdy_src_step(tr, base->src, name, 0);
    }
    /* hooks.values of a dict subclass: a new bound method per read, never the same
     * object; unguarded (its one use, cdy_empty_dict_view, guards the dict) */
    int view = PyCFunction_Check(v) && PyCFunction_GET_SELF(v) == o && PyDict_Check(o) &&
               cdy_is_dict_view_name(name);
    tvar *r = src ? cdy_wrap(tr, v, src, !view) : NULL;
    if (!src)
        cdy_tr_stop(tr, ATTR_CHAIN_TOO_LONG);
    Py_DECREF(v);
    return r;
}

/* super().name: the first attribute named name after the method's class in the MRO of
 * self's class (fixed by self's guard, or self built in the frame): a Python function
 * bound to self, a builtin base's method (TV_BMETH), a classmethod bound to the class,
 * a property's value; NULL when stopped. */
static tvar *super_attr(tracer *tr, tvar *sup, PyObject *name)
{
    tvar *self = sup->self;
    PyObject *cls = self->kind == TV_INST ? self->obj
                    : self->kind == TV_OBJ ? (PyObject *)Py_TYPE(self->obj) : NULL;
    PyObject *mro = cls ? ((PyTypeObject *)cls)->tp_mro : NULL;
    Py_ssize_t i = 0, n = mro ? PyTuple_GET_SIZE(mro) : 0;
    while (i < n && PyTuple_GET_ITEM(mro, i) != sup->obj)
        i++;
    for (i++; i < n; i++) {
        PyObject *d = cdy_pc_type_dict((PyTypeObject *)PyTuple_GET_ITEM(mro, i));
        PyObject *f = d ? PyDict_GetItemWithError(d, name) : NULL;
        if (!f)
            continue;
        tvar *b = NULL;
        if (PyFunction_Check(f) || PyObject_TypeCheck(f, &PyMethodDescr_Type) ||
            PyObject_TypeCheck(f, &PyWrapperDescr_Type)) {
            if ((b = cdy_tv_new(tr, PyFunction_Check(f) ? TV_BOUND : TV_BMETH))) {
                b->obj = f;
                b->self = self;
            }
            return b;
        }
        if (PyObject_TypeCheck(f, &PyClassMethod_Type)) {
            PyObject *fn = cdy_tr_keep(tr, PyObject_GetAttrString(f, "__func__"));
            tvar *c = fn ? cdy_wrap(tr, cls, NULL, 0) : NULL;
            if ((b = c ? cdy_tv_new(tr, TV_BOUND) : NULL)) {
                b->obj = fn;
                b->self = c;
            }
            return b;
        }
        if (PyObject_TypeCheck(f, &PyProperty_Type)) {
            PyObject *g = cdy_tr_keep(tr, PyObject_GetAttrString(f, "fget"));
            tvar *fn = g && g != Py_None ? cdy_wrap(tr, g, NULL, 0) : NULL;
            return fn ? cdy_call(tr, fn, &sup->self, 1, NULL) : NULL;
        }
        break;
    }
    PyErr_Clear();
    cdy_tr_stop(tr, SUPER_ATTR, PyUnicode_AsUTF8(name));
    return NULL;
}

/* getattr(base, name) as a tvar; NULL when stopped. */
tvar *cdy_get_attr(tracer *tr, tvar *base, PyObject *name)
{
    if (base->kind == TV_SUPER)
        return super_attr(tr, base, name);
    if (base->kind == TV_INST)
        return cdy_obj_getattr(tr, base, name);
    if (base->kind == TV_PARTIAL)
        return cdy_partial_attr(tr, base, name);
    if (base->kind == TV_FUNC)
        return cdy_func_attr(tr, base, name);
    if (base->kind == TV_TENSOR)
        return tensor_attr(tr, base, name);
    if (base->kind == TV_OBJ)
        return object_attr(tr, base, name);
    if (base->kind == TV_CONST) {   /* e.g. (1.5).real, dtype.is_floating_point */
        PyObject *v = PyObject_GetAttr(base->obj, name);
        if (v && cdy_is_const(v))
            return cdy_tv_const(tr, v);
        if (v && PyCFunction_Check(v) && (PyUnicode_CheckExact(base->obj) ||
                                          PyTuple_Check(base->obj) ||   /* x.shape.numel */
                                          PyBytes_CheckExact(base->obj))) {
            tvar *m = cdy_tr_keep(tr, v) ? cdy_tv_new(tr, TV_OBJ) : NULL;   /* "s".startswith */
            if (m)
                m->obj = v;
            return m;
        }
        Py_XDECREF(v);
        PyErr_Clear();
    }
    tvar *field = cdy_seq_field(tr, base, name);   /* torch.max(x, 1).values */
    if (field)
        return field;
    cdy_tr_stop(tr, ATTR_OF_VALUE, PyUnicode_AsUTF8(name));
    return NULL;
}

/* ---- iteration and truth -------------------------------------------------------- */

/* The submodules of a Sequential/ModuleList/ModuleDict (values), with sources. */
static tvar *iterate_modules(tracer *tr, tvar *v, int values)
{
    PyObject **dictptr = _PyObject_GetDictPtr(v->obj);
    PyObject *mods = dictptr && *dictptr ? PyDict_GetItemWithError(*dictptr, str_modules) : NULL;
    if (!mods || !PyDict_Check(mods) || !v->src) {
        cdy_tr_stop(tr, ITER_MODULE_NO_SOURCE);
        return NULL;
    }
    int n = (int)PyDict_GET_SIZE(mods);
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
    const cdy_src *ms = cdy_src_step(tr, v->src, str_modules, 0);
    if (!items || !ms)
        return NULL;
    Py_ssize_t pos = 0;
    PyObject *key, *val;
    for (int i = 0; PyDict_Next(mods, &pos, &key, &val); i++) {
        tvar *m = cdy_wrap(tr, val, cdy_src_step(tr, ms, key, 1), 1);
        if (!m)
            return NULL;
        if (values)
            items[i] = m;
        else {   /* (name, module) */
            tvar *pair[2] = {cdy_tv_const(tr, Py_NewRef(key)), m};
            if (!pair[0] || !(items[i] = cdy_tv_seq(tr, TV_TUPLE, pair, 2)))
                return NULL;
        }
    }
    return cdy_tv_seq(tr, TV_ITER, items, n);
}

/* A tvar for o, a value read from a fixed object: a constant, or fixed itself. */
tvar *cdy_fixed_value(tracer *tr, PyObject *o)
{
    if (cdy_is_const(o))
        return cdy_tv_const(tr, Py_NewRef(o));
    tvar *v = cdy_tr_keep(tr, Py_NewRef(o)) ? cdy_tv_new(tr, TV_OBJ) : NULL;
    if (v) {
        v->obj = o;
        v->fixed = 1;
    }
    return v;
}

/* The items of fixed iterable o (read now), as a TV_ITER. */
static tvar *iterate_fixed(tracer *tr, PyObject *o)
{
    PyObject *seq = PySequence_Tuple(o);
    if (!seq || PyTuple_GET_SIZE(seq) > 100000) {
        Py_XDECREF(seq);
        cdy_tr_stop_exc(tr, RAISED_ITER);
        return NULL;
    }
    int n = (int)PyTuple_GET_SIZE(seq);
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
    for (int i = 0; items && i < n; i++)
        if (!(items[i] = cdy_fixed_value(tr, PyTuple_GET_ITEM(seq, i)))) {
            Py_DECREF(seq);
            return NULL;
        }
    Py_DECREF(seq);
    return items ? cdy_tv_seq(tr, TV_ITER, items, n) : NULL;
}

/* iter(x) of a tensor of one dimension or more: eager's iter(x.unbind(0)), traced (its
 * length is the static size of dimension 0); NULL when stopped (ITER_TENSOR for a 0-d
 * tensor: eager raises its TypeError). */
static tvar *iterate_tensor(tracer *tr, tvar *v)
{
    static PyObject *str_unbind;
    if (!str_unbind && !(str_unbind = PyUnicode_InternFromString("unbind")))
        return NULL;
    PyObject *dim = PyObject_GetAttrString(v->obj, "ndim");
    long nd = dim ? PyLong_AsLong(dim) : -1;
    Py_XDECREF(dim);
    PyErr_Clear();
    tvar *m = nd > 0 ? cdy_tv_new(tr, TV_METHOD) : NULL, *zero = m ? cdy_tv_const(tr, PyLong_FromLong(0)) : NULL;
    if (!zero) {
        if (tr->t->status == CDY_TRACE_OK)
            cdy_tr_stop(tr, ITER_TENSOR);
        return NULL;
    }
    m->obj = str_unbind;
    m->self = v;
    tvar *args[2] = {v, zero};
    tvar *parts = cdy_call(tr, m, args, 2, NULL);
    if (parts && parts->kind != TV_TUPLE && parts->kind != TV_LIST) {
        cdy_tr_stop(tr, ITER_TENSOR);
        return NULL;
    }
    return parts ? cdy_tv_seq(tr, TV_ITER, parts->items, parts->n) : NULL;
}

/* An iterator tvar over v's items; NULL when stopped. */
tvar *cdy_iterate(tracer *tr, tvar *v)
{
    if (v->kind == TV_LIST) {   /* live: FOR_ITER reads the list as it is then */
        tvar *it = cdy_tv_seq(tr, TV_ITER, v->items, v->n);
        if (it)
            it->self = v;
        return it;
    }
    if (v->kind == TV_TUPLE)
        return cdy_tv_seq(tr, TV_ITER, v->items, v->n);
    if (v->kind == TV_DICT) {
        tvar **keys = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(v->n + 1));
        for (int i = 0; keys && i < v->n; i++)
            if (!(keys[i] = cdy_tv_const(tr, Py_NewRef(v->keys[i]))))
                return NULL;
        return keys ? cdy_tv_seq(tr, TV_ITER, keys, v->n) : NULL;
    }
    if (v->kind == TV_ITER)
        return v;
    if (v->kind == TV_SET)
        return cdy_set_items(tr, v, TV_ITER);
    if (v->kind == TV_INST)
        return cdy_obj_iter(tr, v);
    if (v->kind == TV_VIEW) {
        tvar *l = cdy_view_list(tr, v);
        return l ? cdy_tv_seq(tr, TV_ITER, l->items, l->n) : NULL;
    }
    if (v->kind == TV_CONST && (PyTuple_Check(v->obj) || PyRange_Check(v->obj) ||
                                PyUnicode_Check(v->obj))) {
        PyObject *seq = PySequence_Tuple(v->obj);
        if (!seq || PyTuple_GET_SIZE(seq) > 100000) {
            Py_XDECREF(seq);
            cdy_tr_stop(tr, ITER_HUGE_CONST);
            return NULL;
        }
        int n = (int)PyTuple_GET_SIZE(seq);
        tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
        for (int i = 0; items && i < n; i++)
            if (!(items[i] = cdy_tv_const(tr, Py_NewRef(PyTuple_GET_ITEM(seq, i))))) {
                Py_DECREF(seq);
                return NULL;
            }
        Py_DECREF(seq);
        return items ? cdy_tv_seq(tr, TV_ITER, items, n) : NULL;
    }
    if (v->kind == TV_OBJ && (PyObject_TypeCheck(v->obj, (PyTypeObject *)sequential_type) ||
                              PyObject_TypeCheck(v->obj, (PyTypeObject *)modulelist_type)))
        return iterate_modules(tr, v, 1);
    if (v->kind == TV_OBJ && PyObject_TypeCheck(v->obj, (PyTypeObject *)moduledict_type))
        return iterate_modules(tr, v, 1);
    if (v->kind == TV_OBJ && v->fixed)
        return iterate_fixed(tr, v->obj);
    if (v->kind == TV_TENSOR)
        return iterate_tensor(tr, v);
    cdy_tr_stop(tr, ITER_VALUE);
    return NULL;
}

/* Truth value of v for a branch: 0/1, or -1 when stopped. */
int cdy_truth(tracer *tr, tvar *v)
{
    if (v->kind == TV_TENSOR)
        return cdy_tr_stop(tr, DATA_DEPENDENT_BRANCH);
    if (v->kind == TV_TUPLE || v->kind == TV_LIST || v->kind == TV_DICT || v->kind == TV_SET)
        return v->n > 0;
    if (v->kind == TV_INST)
        return cdy_obj_truth(tr, v);
    if (v->kind == TV_PARTIAL || v->kind == TV_BMETH || v->kind == TV_FUNC)
        return 1;
    if (v->kind == TV_VIEW)
        return v->self->n > 0;
    if (v->by_type) {   /* the instance's __bool__ or __len__, traced; else always true */
        PyTypeObject *tp = Py_TYPE(v->obj);
        const char *dunder = tp->tp_as_number && tp->tp_as_number->nb_bool ? "__bool__"
                             : (tp->tp_as_mapping && tp->tp_as_mapping->mp_length) ||
                               (tp->tp_as_sequence && tp->tp_as_sequence->sq_length) ? "__len__"
                             : NULL;
        tvar *r = dunder ? cdy_call_dunder(tr, v, dunder) : NULL;
        return !dunder ? 1 : r ? cdy_truth(tr, r) : -1;
    }
    if (v->kind == TV_CONST || v->kind == TV_OBJ) {
        int r = PyObject_IsTrue(v->obj);
        if (r < 0)
            return cdy_tr_stop_exc(tr, RAISED_TRUTH);
        return r;
    }
    if (v->kind == TV_BOUND || v->kind == TV_METHOD)
        return 1;
    return cdy_tr_stop(tr, BRANCH_VALUE);
}
