/* trace.c - the symbolic bytecode interpreter.
 *
 * Runs a function's 3.11 bytecode over symbolic values (tvars): tensors are
 * fake tensors on torch's meta device, so every op's output dtype, sizes and
 * strides come from torch itself; Python scalars, strings, None and tuples of
 * them are constants; modules and functions are objects.  Each value read
 * from the frame (an argument, a global, an attribute of a module) gets a
 * source and a guard.  Tensor ops become graph nodes.  Anything else stops
 * the trace with a reason: the frame then runs eagerly.                    */
#include "internal.h"
#include "frame/opcodes.h"
#include "trace/trace.h"

#include <stdarg.h>
#include <string.h>

#define MAX_INSTRUCTIONS 200000

typedef enum { TV_NULL, TV_CONST, TV_TENSOR, TV_TUPLE, TV_LIST, TV_OBJ, TV_METHOD } tv_kind;

typedef struct tvar {
    int kind;
    PyObject *obj;        /* CONST value; OBJ object; TENSOR fake tensor; METHOD name (borrowed: keep list) */
    int value;            /* TENSOR: graph value number */
    const cdy_src *src;   /* where it lives at frame entry; NULL when the trace made it */
    struct tvar *self;    /* METHOD: the tensor */
    int n;
    struct tvar **items;  /* TUPLE, LIST */
} tvar;

typedef struct {
    PyObject *name;
    tvar *var;
} global_memo;

typedef struct {
    cdy_trace *t;
    PyCodeObject *co;
    PyObject *const *frame_locals;
    PyObject *globals, *builtins, *closure;
    PyObject *bytes;          /* co_code */
    const unsigned char *code;
    int ncode;                /* code units */
    int pc;                   /* current instruction (code units) */
    tvar **locals;
    int nlocals;
    tvar **stack;
    int sp, stack_cap;
    PyObject *kwnames;
    global_memo *gmemo;
    int ngmemo;
    tvar null_var;
} tracer;

static PyObject *empty_strided, *meta_kw, *meta_str, *result_type_fn, *torch_mod;
static PyObject *tensor_type, *parameter_type;

/* ---- failure ------------------------------------------------------------- */

/* Stop the trace with status and a formatted reason; returns -1. */
static int stop(tracer *tr, int status, const char *fmt, ...)
{
    cdy_trace *t = tr->t;
    if (t->status != CDY_TRACE_OK)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->reason, sizeof(t->reason), fmt, ap);
    va_end(ap);
    t->status = status;
    t->reason_line = PyCode_Addr2Line(tr->co, tr->pc * 2);
    return -1;
}

/* Stop with the pending Python exception's text as the reason; -1. */
static int stop_exc(tracer *tr, int status, const char *what)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    PyObject *s = ev ? PyObject_Str(ev) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
    stop(tr, status, "%s: %s: %s", what, et ? ((PyTypeObject *)et)->tp_name : "error",
         msg ? msg : "?");
    Py_XDECREF(s);
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    PyErr_Clear();
    return -1;
}

/* ---- allocation ---------------------------------------------------------------- */

/* Keep a new reference alive for the trace's life; returns it borrowed. */
static PyObject *keep(tracer *tr, PyObject *o)
{
    if (!o)
        return NULL;
    int r = PyList_Append(tr->t->keep, o);
    Py_DECREF(o);
    return r ? NULL : o;
}

/* A zeroed tvar of kind from the arena. */
static tvar *tv_new(tracer *tr, int kind)
{
    tvar *v = cdy_arena_alloc(&tr->t->arena, sizeof(tvar));
    if (v)
        v->kind = kind;
    else
        stop(tr, CDY_TRACE_UNSUPPORTED, "out of memory");
    return v;
}

/* A constant tvar holding a new reference o (kept). */
static tvar *tv_const(tracer *tr, PyObject *o)
{
    if (!keep(tr, o)) {
        stop_exc(tr, CDY_TRACE_UNSUPPORTED, "internal error");
        return NULL;
    }
    tvar *v = tv_new(tr, TV_CONST);
    if (v)
        v->obj = o;
    return v;
}

/* A new graph value; NULL on OOM. */
static cdy_value *graph_add(tracer *tr, int kind, int *index)
{
    cdy_graph *g = &tr->t->graph;
    if (g->nvalues == g->cap_values) {
        int cap = g->cap_values ? 2 * g->cap_values : 32;
        cdy_value *v = PyMem_Realloc(g->values, sizeof(cdy_value) * (size_t)cap);
        if (!v) {
            stop(tr, CDY_TRACE_UNSUPPORTED, "out of memory");
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

/* ---- constants and sources -------------------------------------------------- */

/* 1 if o is a constant we guard by value: None, bool, int, float, str, tuples of them. */
static int is_const(PyObject *o)
{
    if (o == Py_None || o == Py_Ellipsis || PyBool_Check(o) || PyLong_CheckExact(o) ||
        PyFloat_CheckExact(o) || PyUnicode_CheckExact(o))
        return 1;
    if (PyTuple_CheckExact(o)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++)
            if (!is_const(PyTuple_GET_ITEM(o, i)))
                return 0;
        return 1;
    }
    return 0;
}

/* 1 if o is torch or one of its submodules (whose attributes we do not guard). */
static int is_torch_module(PyObject *o)
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

/* Readable name of a source, for guard messages. */
static void src_desc(tracer *tr, const cdy_src *s, char *buf, size_t n)
{
    cdy_src_name(s, tr->co, buf, n);
}

/* A source extending base with attribute name; arena-allocated. */
static cdy_src *src_attr(tracer *tr, const cdy_src *base, PyObject *name)
{
    if (base->nattrs >= CDY_MAX_ATTRS)
        return NULL;
    cdy_src *s = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_src));
    if (!s)
        return NULL;
    *s = *base;
    s->attrs[s->nattrs++] = name;   /* names are kept alive by co_names / keep list */
    return s;
}

/* The fake (meta) tensor mirroring real tensor x; new ref or NULL. */
static PyObject *make_fake(PyObject *x, PyObject *dtype)
{
    PyObject *size = PyObject_GetAttr(x, cdy_str.shape);
    PyObject *stride = size ? PyObject_CallMethodNoArgs(x, cdy_str.stride) : NULL;
    PyObject *r = NULL;
    if (stride) {
        PyObject *args[4] = {size, stride, dtype, meta_str};
        r = PyObject_Vectorcall(empty_strided, args, 2, meta_kw);
    }
    Py_XDECREF(size);
    Py_XDECREF(stride);
    return r;
}

/* Read meta (dtype, sizes, strides) of a (fake) tensor; 0, or -1 if unsupported. */
static int read_meta(tracer *tr, PyObject *x, cdy_meta *m)
{
    PyObject *dt = PyObject_GetAttr(x, cdy_str.dtype);
    PyObject *size = dt ? PyObject_GetAttr(x, cdy_str.shape) : NULL;
    PyObject *stride = size ? PyObject_CallMethodNoArgs(x, cdy_str.stride) : NULL;
    int r = -1;
    if (!stride) {
        stop_exc(tr, CDY_TRACE_UNSUPPORTED, "reading tensor meta");
        goto done;
    }
    m->dtype = cdy_dtype_from_obj(dt);
    m->ndim = (int)PyTuple_GET_SIZE(size);
    if (m->dtype == CDY_DT_NONE) {
        PyObject *s = PyObject_Str(dt);
        stop(tr, CDY_TRACE_UNSUPPORTED, "dtype %s is not supported", s ? PyUnicode_AsUTF8(s) : "?");
        Py_XDECREF(s);
        goto done;
    }
    if (m->ndim > CDY_MAX_NDIM) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "tensors of more than %d dims are not supported", CDY_MAX_NDIM);
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

/* A tensor read from the frame at src: guard it, make it a graph input. */
static tvar *wrap_tensor(tracer *tr, PyObject *x, const cdy_src *src)
{
    char desc[96];
    src_desc(tr, src, desc, sizeof(desc));
    if (!src || src->kind == CDY_SRC_DEREF) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "tensor '%s' from a closure cell is not supported", desc);
        return NULL;
    }
    PyObject *cpu = PyObject_GetAttr(x, cdy_str.is_cpu);
    PyObject *lay = cpu ? PyObject_GetAttr(x, cdy_str.layout) : NULL;
    PyObject *rg = lay ? PyObject_GetAttr(x, cdy_str.requires_grad) : NULL;
    PyObject *dt = rg ? PyObject_GetAttr(x, cdy_str.dtype) : NULL;
    tvar *v = NULL;
    if (!dt)
        stop_exc(tr, CDY_TRACE_UNSUPPORTED, "reading tensor properties");
    else if (cpu != Py_True)
        stop(tr, CDY_TRACE_UNSUPPORTED, "tensor '%s' is not on the CPU", desc);
    else if (lay != cdy_strided_layout)
        stop(tr, CDY_TRACE_UNSUPPORTED, "tensor '%s' is not strided (sparse or mkldnn)", desc);
    else if (rg == Py_True)
        stop(tr, CDY_TRACE_UNSUPPORTED, "tensor '%s' requires grad: autograd is not supported", desc);
    else {
        cdy_meta m;
        PyObject *fake = make_fake(x, dt);
        int idx;
        cdy_value *gv;
        cdy_guard *g;
        if (!fake)
            stop_exc(tr, CDY_TRACE_UNSUPPORTED, "making a fake tensor");
        else if (keep(tr, fake) && !read_meta(tr, fake, &m) && (gv = graph_add(tr, CDY_VAL_INPUT, &idx)) &&
                 (g = cdy_guards_add(&tr->t->guards, CDY_GUARD_TENSOR, src, desc)) &&
                 (v = tv_new(tr, TV_TENSOR))) {
            gv->meta = m;
            gv->input_index = tr->t->graph.ninputs++;
            g->expect = Py_NewRef((PyObject *)Py_TYPE(x));
            g->dtype = Py_NewRef(dt);
            g->requires_grad = 0;
            g->ndim = m.ndim;
            memcpy(g->sizes, m.sizes, sizeof(m.sizes));
            memcpy(g->strides, m.strides, sizeof(m.strides));
            v->obj = fake;
            v->value = idx;
            v->src = src;
        }
        else if (tr->t->status == CDY_TRACE_OK)
            stop_exc(tr, CDY_TRACE_UNSUPPORTED, "internal error");
    }
    Py_XDECREF(cpu);
    Py_XDECREF(lay);
    Py_XDECREF(rg);
    Py_XDECREF(dt);
    return v;
}

/* A tvar for object o read from the frame at src, with its guard.
 * guard=0 skips the guard (attributes of torch modules). */
static tvar *wrap(tracer *tr, PyObject *o, const cdy_src *src, int guard)
{
    PyTypeObject *tp = Py_TYPE(o);
    if ((PyObject *)tp == tensor_type || (PyObject *)tp == parameter_type)
        return wrap_tensor(tr, o, src);
    if (PyObject_TypeCheck(o, (PyTypeObject *)tensor_type)) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "tensor subclass %s is not supported", tp->tp_name);
        return NULL;
    }
    int konst = is_const(o);
    if (guard && src) {
        char desc[96];
        src_desc(tr, src, desc, sizeof(desc));
        cdy_guard *g = cdy_guards_add(&tr->t->guards, konst ? CDY_GUARD_CONST : CDY_GUARD_ID, src, desc);
        if (!g) {
            stop_exc(tr, CDY_TRACE_UNSUPPORTED, "internal error");
            return NULL;
        }
        g->expect = Py_NewRef(o);
    }
    tvar *v = konst ? tv_const(tr, Py_NewRef(o)) : NULL;
    if (!konst && keep(tr, Py_NewRef(o)) && (v = tv_new(tr, TV_OBJ)))
        v->obj = o;
    if (v)
        v->src = src;
    return v;
}

/* ---- stack ------------------------------------------------------------------------ */

/* Push v (NULL means a failure already recorded); 0 or -1. */
static int push(tracer *tr, tvar *v)
{
    if (!v)
        return -1;
    if (tr->sp == tr->stack_cap)
        return stop(tr, CDY_TRACE_UNSUPPORTED, "stack overflow in trace");
    tr->stack[tr->sp++] = v;
    return 0;
}

static tvar *pop(tracer *tr)
{
    return tr->sp > 0 ? tr->stack[--tr->sp] : &tr->null_var;
}

static tvar *peek(tracer *tr, int i)
{
    return tr->sp >= i ? tr->stack[tr->sp - i] : &tr->null_var;
}

/* ---- tensor ops ---------------------------------------------------------------- */

/* Graph value for an argument: a tensor's value or a new scalar; -1 if unsupported. */
static int arg_value(tracer *tr, tvar *a)
{
    if (a->kind == TV_TENSOR)
        return a->value;
    if (a->kind != TV_CONST)
        return -1;
    PyObject *o = a->obj;
    int idx;
    cdy_value *v;
    if (PyBool_Check(o)) {
        if (!(v = graph_add(tr, CDY_VAL_SCALAR, &idx)))
            return -1;
        v->meta.dtype = CDY_DT_BOOL;
        v->i = o == Py_True;
    }
    else if (PyLong_CheckExact(o)) {
        long long i = PyLong_AsLongLong(o);
        if (i == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        if (!(v = graph_add(tr, CDY_VAL_SCALAR, &idx)))
            return -1;
        v->meta.dtype = CDY_DT_INT64;
        v->i = i;
    }
    else if (PyFloat_CheckExact(o)) {
        if (!(v = graph_add(tr, CDY_VAL_SCALAR, &idx)))
            return -1;
        v->meta.dtype = CDY_DT_FLOAT64;
        v->f = PyFloat_AS_DOUBLE(o);
    }
    else
        return -1;
    return idx;
}

/* The dtype torch computes a comparison in: torch.result_type(a, b). */
static int compare_dtype(tracer *tr, PyObject *a, PyObject *b)
{
    PyObject *args[2] = {a, b};
    PyObject *dt = PyObject_Vectorcall(result_type_fn, args, 2, NULL);
    if (!dt) {
        PyErr_Clear();
        return CDY_DT_NONE;
    }
    int d = cdy_dtype_from_obj(dt);
    Py_DECREF(dt);
    return d;
}

/* Record the call for the eager backend; 0 or -1. */
static int add_pynode(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames, int value)
{
    cdy_trace *t = tr->t;
    if (t->npynodes == t->cap_pynodes) {
        int cap = t->cap_pynodes ? 2 * t->cap_pynodes : 16;
        cdy_pynode *p = PyMem_Realloc(t->pynodes, sizeof(cdy_pynode) * (size_t)cap);
        if (!p)
            return stop(tr, CDY_TRACE_UNSUPPORTED, "out of memory");
        t->pynodes = p;
        t->cap_pynodes = cap;
    }
    cdy_pynode *p = &t->pynodes[t->npynodes++];
    p->fn = fn;
    p->nargs = nargs;
    p->kwnames = kwnames;
    p->value = value;
    p->ref = cdy_arena_alloc(&t->arena, sizeof(int) * (size_t)(nargs + 1));
    p->cst = cdy_arena_alloc(&t->arena, sizeof(PyObject *) * (size_t)(nargs + 1));
    if (!p->ref || !p->cst)
        return stop(tr, CDY_TRACE_UNSUPPORTED, "out of memory");
    for (int i = 0; i < nargs; i++) {
        p->ref[i] = args[i]->kind == TV_TENSOR ? args[i]->value : -1;
        p->cst[i] = args[i]->kind == TV_TENSOR ? NULL : args[i]->obj;
    }
    return 0;
}

/* Call fn(*args) where some args are tensors: run it on the fake tensors
 * for the output meta, and add a graph node for op.  NULL when stopped. */
static tvar *tensor_call(tracer *tr, int op, PyObject *fn, const char *what, tvar **args,
                         int nargs, PyObject *kwnames)
{
    PyObject *pyargs[16];
    if (nargs > 16) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "%s: too many arguments", what);
        return NULL;
    }
    for (int i = 0; i < nargs; i++) {
        if (args[i]->kind != TV_TENSOR && args[i]->kind != TV_CONST) {
            stop(tr, CDY_TRACE_UNSUPPORTED, "%s: argument %d is not a tensor or a constant", what, i);
            return NULL;
        }
        pyargs[i] = args[i]->obj;
    }
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *out = PyObject_Vectorcall(fn, pyargs, (size_t)(nargs - nkw), kwnames);
    if (!out) {
        int unsupported = PyErr_ExceptionMatches(PyExc_NotImplementedError);
        stop_exc(tr, unsupported ? CDY_TRACE_UNSUPPORTED : CDY_TRACE_ERROR, what);
        return NULL;
    }
    if (!keep(tr, out)) {
        stop_exc(tr, CDY_TRACE_UNSUPPORTED, "internal error");
        return NULL;
    }
    if (!PyObject_TypeCheck(out, (PyTypeObject *)tensor_type)) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "%s returned %s, not a tensor", what, Py_TYPE(out)->tp_name);
        return NULL;
    }
    if (op == CDY_OP_NONE) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "%s has no lowering in cdynamo", what);
        return NULL;
    }
    if (nkw) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "%s: keyword arguments are not supported", what);
        return NULL;
    }
    if (nargs != cdy_op_table[op].nargs) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "%s: %d arguments, expected %d", what, nargs,
             cdy_op_table[op].nargs);
        return NULL;
    }
    cdy_meta m;
    if (read_meta(tr, out, &m))
        return NULL;
    int argv[4];
    for (int i = 0; i < nargs; i++)
        if ((argv[i] = arg_value(tr, args[i])) < 0) {
            if (tr->t->status == CDY_TRACE_OK)
                stop(tr, CDY_TRACE_UNSUPPORTED, "%s: argument %d is not a tensor or number", what, i);
            return NULL;
        }
    int compute = m.dtype;
    if (cdy_op_table[op].kind == 'C' && (compute = compare_dtype(tr, pyargs[0], pyargs[1])) < 0) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "%s: unsupported comparison dtype", what);
        return NULL;
    }
    int idx;
    cdy_value *gv = graph_add(tr, CDY_VAL_NODE, &idx);
    tvar *v = gv ? tv_new(tr, TV_TENSOR) : NULL;
    if (!v)
        return NULL;
    gv->meta = m;
    gv->op = op;
    gv->nargs = nargs;
    memcpy(gv->args, argv, sizeof(int) * (size_t)nargs);
    gv->compute_dtype = compute;
    gv->source_line = PyCode_Addr2Line(tr->co, tr->pc * 2);
    v->obj = out;
    v->value = idx;
    if (add_pynode(tr, fn, args, nargs, kwnames, idx))
        return NULL;
    return v;
}

/* ---- constant folding ------------------------------------------------------------ */

/* Result of calling fn on constants, as a constant; NULL when stopped. */
static tvar *fold_call(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames)
{
    PyObject *pyargs[16];
    if (nargs > 16) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "too many arguments");
        return NULL;
    }
    for (int i = 0; i < nargs; i++)
        pyargs[i] = args[i]->obj;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *r = PyObject_Vectorcall(fn, pyargs, (size_t)(nargs - nkw), kwnames);
    if (!r) {
        stop_exc(tr, CDY_TRACE_ERROR, "constant expression");
        return NULL;
    }
    if (!is_const(r)) {
        Py_DECREF(r);
        stop(tr, CDY_TRACE_UNSUPPORTED, "constant expression gave a non-constant");
        return NULL;
    }
    return tv_const(tr, r);
}

/* 1 if fn is a pure function of constants we may evaluate at trace time. */
static int foldable_fn(PyObject *fn)
{
    static const char *builtins[] = {"abs", "min", "max", "len", "float", "int", "bool", "round",
                                     "pow", "divmod", "str", NULL};
    if (!PyCFunction_Check(fn))
        return fn == (PyObject *)&PyFloat_Type || fn == (PyObject *)&PyLong_Type ||
               fn == (PyObject *)&PyBool_Type || fn == (PyObject *)&PyUnicode_Type;
    PyObject *self = PyCFunction_GET_SELF(fn);
    if (!self || !PyModule_Check(self))
        return 0;
    const char *mod = PyModule_GetName(self);
    if (!mod) {
        PyErr_Clear();
        return 0;
    }
    if (!strcmp(mod, "math"))
        return 1;
    if (strcmp(mod, "builtins"))
        return 0;
    const char *name = ((PyCFunctionObject *)fn)->m_ml->ml_name;
    for (int i = 0; builtins[i]; i++)
        if (!strcmp(name, builtins[i]))
            return 1;
    return 0;
}

/* ---- opcode handlers ---------------------------------------------------------------- */

/* 1 if any of args is a tensor. */
static int any_tensor(tvar **args, int n)
{
    for (int i = 0; i < n; i++)
        if (args[i]->kind == TV_TENSOR)
            return 1;
    return 0;
}

/* 1 if all of args are constants. */
static int all_const(tvar **args, int n)
{
    for (int i = 0; i < n; i++)
        if (args[i]->kind != TV_CONST)
            return 0;
    return 1;
}

/* Short text naming a callable, for reasons. */
static void callable_name(PyObject *fn, char *buf, size_t n)
{
    PyObject *q = PyObject_GetAttrString(fn, "__qualname__");
    if (!q) {
        PyErr_Clear();
        q = PyObject_Repr(fn);
    }
    snprintf(buf, n, "%s", q && PyUnicode_Check(q) ? PyUnicode_AsUTF8(q) : "?");
    Py_XDECREF(q);
    PyErr_Clear();
}

/* Apply callable to args (an operator, function or method); NULL when stopped. */
static tvar *do_call(tracer *tr, tvar *callable, tvar **args, int nargs, PyObject *kwnames)
{
    char name[128];
    if (callable->kind == TV_METHOD) {
        int op = cdy_optable_method(callable->obj);
        PyObject *fn = keep(tr, PyObject_GetAttr(tensor_type, callable->obj));
        snprintf(name, sizeof(name), "Tensor.%s", PyUnicode_AsUTF8(callable->obj));
        if (!fn) {
            stop_exc(tr, CDY_TRACE_UNSUPPORTED, name);
            return NULL;
        }
        if (op == CDY_OP_WHERE && nargs == 3) {   /* x.where(cond, y) is where(cond, x, y) */
            tvar *re[3] = {args[1], args[0], args[2]};
            PyObject *tw = PyObject_GetAttrString(torch_mod, "where");
            if (!keep(tr, tw)) {
                stop_exc(tr, CDY_TRACE_UNSUPPORTED, name);
                return NULL;
            }
            return tensor_call(tr, op, tw, name, re, 3, kwnames);
        }
        return tensor_call(tr, op, fn, name, args, nargs, kwnames);
    }
    if (callable->kind != TV_OBJ && callable->kind != TV_CONST) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "call of a value that is not a known function");
        return NULL;
    }
    PyObject *fn = callable->obj;
    callable_name(fn, name, sizeof(name));
    if (any_tensor(args, nargs))
        return tensor_call(tr, cdy_optable_fn(fn), fn, name, args, nargs, kwnames);
    if (all_const(args, nargs) && foldable_fn(fn))
        return fold_call(tr, fn, args, nargs, kwnames);
    stop(tr, CDY_TRACE_UNSUPPORTED, "call to %s is not supported", name);
    return NULL;
}

/* Binary operator `fn` (an operator.* function) on the two top values. */
static int binary(tracer *tr, PyObject *fn, const char *opname)
{
    tvar *b = pop(tr), *a = pop(tr);
    tvar *args[2] = {a, b};
    if (all_const(args, 2))
        return push(tr, fold_call(tr, fn, args, 2, NULL));
    if (!any_tensor(args, 2))
        return stop(tr, CDY_TRACE_UNSUPPORTED, "operator %s on non-constant, non-tensor values", opname);
    return push(tr, tensor_call(tr, cdy_optable_fn(fn), fn, opname, args, 2, NULL));
}

static PyObject *op_funcs[32];   /* operator.* by BINARY_OP / COMPARE_OP code */

/* operator.<name>, cached by slot; borrowed. */
static PyObject *operator_fn(int slot, const char *name)
{
    if (!op_funcs[slot]) {
        PyObject *m = PyImport_ImportModule("operator");
        op_funcs[slot] = m ? PyObject_GetAttrString(m, name) : NULL;
        Py_XDECREF(m);
    }
    return op_funcs[slot];
}

/* BINARY_OP oparg */
static int op_binary(tracer *tr, int oparg)
{
    static const char *names[] = {"add", "and_", "floordiv", "lshift", "matmul", "mul", "mod",
                                  "or_", "pow", "rshift", "sub", "truediv", "xor"};
    static const char *syms[] = {"+", "&", "//", "<<", "@", "*", "%", "|", "**", ">>", "-", "/", "^"};
    int inplace = oparg >= CDY_NB_INPLACE_FIRST;
    int base = inplace ? oparg - CDY_NB_INPLACE_FIRST : oparg;
    if (base < 0 || base > 12)
        return stop(tr, CDY_TRACE_UNSUPPORTED, "binary operator %d", oparg);
    if (inplace && (peek(tr, 2)->kind == TV_TENSOR))
        return stop(tr, CDY_TRACE_UNSUPPORTED, "in-place operator %s= on a tensor", syms[base]);
    PyObject *fn = operator_fn(base, names[base]);
    if (!fn)
        return stop_exc(tr, CDY_TRACE_UNSUPPORTED, "internal error");
    return binary(tr, fn, syms[base]);
}

/* COMPARE_OP oparg (3.11: 0 < 1 <= 2 == 3 != 4 > 5 >=) */
static int op_compare(tracer *tr, int oparg)
{
    static const char *names[] = {"lt", "le", "eq", "ne", "gt", "ge"};
    static const char *syms[] = {"<", "<=", "==", "!=", ">", ">="};
    if (oparg < 0 || oparg > 5)
        return stop(tr, CDY_TRACE_UNSUPPORTED, "comparison %d", oparg);
    PyObject *fn = operator_fn(16 + oparg, names[oparg]);
    if (!fn)
        return stop_exc(tr, CDY_TRACE_UNSUPPORTED, "internal error");
    return binary(tr, fn, syms[oparg]);
}

/* UNARY_NEGATIVE / UNARY_NOT on the top value. */
static int op_unary(tracer *tr, int neg)
{
    tvar *a = pop(tr);
    PyObject *fn = neg ? operator_fn(24, "neg") : operator_fn(25, "not_");
    if (!fn)
        return stop_exc(tr, CDY_TRACE_UNSUPPORTED, "internal error");
    if (a->kind == TV_CONST)
        return push(tr, fold_call(tr, fn, &a, 1, NULL));
    if (a->kind == TV_TENSOR && neg)
        return push(tr, tensor_call(tr, CDY_OP_NEG, fn, "-", &a, 1, NULL));
    if (a->kind == TV_TENSOR)
        return stop(tr, CDY_TRACE_UNSUPPORTED, "'not' on a tensor is data-dependent control flow");
    return stop(tr, CDY_TRACE_UNSUPPORTED, "unary operator on a non-constant value");
}

/* LOAD_FAST slot: arguments are wrapped (and guarded) on first use. */
static int op_load_fast(tracer *tr, int slot)
{
    if (slot >= tr->nlocals)
        return stop(tr, CDY_TRACE_UNSUPPORTED, "bad local slot");
    if (!tr->locals[slot]) {
        PyObject *o = slot < cdy_code_nargslots(tr->co) ? tr->frame_locals[slot] : NULL;
        if (!o)
            return stop(tr, CDY_TRACE_ERROR, "local variable referenced before assignment");
        cdy_src *s = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_src));
        if (!s)
            return stop(tr, CDY_TRACE_UNSUPPORTED, "out of memory");
        s->kind = CDY_SRC_LOCAL;
        s->slot = slot;
        tr->locals[slot] = wrap(tr, o, s, 1);
    }
    return push(tr, tr->locals[slot]);
}

/* LOAD_GLOBAL name (memoized so each global is guarded once). */
static int op_load_global(tracer *tr, int oparg)
{
    PyObject *name = PyTuple_GET_ITEM(tr->co->co_names, oparg >> 1);
    if ((oparg & 1) && push(tr, &tr->null_var))
        return -1;
    for (int i = 0; i < tr->ngmemo; i++)
        if (tr->gmemo[i].name == name)
            return push(tr, tr->gmemo[i].var);
    PyObject *o = PyDict_GetItemWithError(tr->globals, name);
    if (!o && !PyErr_Occurred())
        o = PyDict_GetItemWithError(tr->builtins, name);
    if (!o) {
        if (PyErr_Occurred())
            return stop_exc(tr, CDY_TRACE_UNSUPPORTED, "reading a global");
        return stop(tr, CDY_TRACE_ERROR, "name '%s' is not defined", PyUnicode_AsUTF8(name));
    }
    cdy_src *s = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_src));
    global_memo *gm = cdy_arena_alloc(&tr->t->arena, sizeof(global_memo) * (size_t)(tr->ngmemo + 1));
    if (!s || !gm)
        return stop(tr, CDY_TRACE_UNSUPPORTED, "out of memory");
    s->kind = CDY_SRC_GLOBAL;
    s->name = name;
    tvar *v = wrap(tr, o, s, 1);
    if (!v)
        return -1;
    if (tr->ngmemo)
        memcpy(gm, tr->gmemo, sizeof(global_memo) * (size_t)tr->ngmemo);
    gm[tr->ngmemo].name = name;
    gm[tr->ngmemo].var = v;
    tr->gmemo = gm;
    tr->ngmemo++;
    return push(tr, v);
}

/* LOAD_DEREF of a free variable (a closure cell). */
static int op_load_deref(tracer *tr, int oparg)
{
    int first_free = (int)(tr->co->co_nlocalsplus - tr->co->co_nfreevars);
    int idx = oparg - first_free;
    if (idx < 0 || !tr->closure || idx >= PyTuple_GET_SIZE(tr->closure))
        return stop(tr, CDY_TRACE_UNSUPPORTED, "cell variables of this frame are not supported");
    PyObject *o = PyCell_GET(PyTuple_GET_ITEM(tr->closure, idx));
    if (!o)
        return stop(tr, CDY_TRACE_ERROR, "free variable referenced before assignment");
    cdy_src *s = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_src));
    if (!s)
        return stop(tr, CDY_TRACE_UNSUPPORTED, "out of memory");
    s->kind = CDY_SRC_DEREF;
    s->slot = idx;
    return push(tr, wrap(tr, o, s, 1));
}

/* Attribute of a tensor that is a constant under the tensor's guard. */
static tvar *tensor_attr(tracer *tr, tvar *t, PyObject *name)
{
    const char *n = PyUnicode_AsUTF8(name);
    static const char *ok[] = {"shape", "dtype", "ndim", "device", "is_cuda", "is_floating_point",
                               "layout", NULL};
    for (int i = 0; ok[i]; i++)
        if (!strcmp(n, ok[i])) {
            PyObject *v = PyObject_GetAttr(t->obj, name);
            if (!v) {
                stop_exc(tr, CDY_TRACE_ERROR, "tensor attribute");
                return NULL;
            }
            if (!strcmp(n, "device")) {   /* the fake says meta; the real tensor is on the cpu */
                Py_DECREF(v);
                v = PyObject_CallMethod(torch_mod, "device", "s", "cpu");
            }
            if (!keep(tr, v)) {
                stop_exc(tr, CDY_TRACE_UNSUPPORTED, "internal error");
                return NULL;
            }
            tvar *r = tv_new(tr, is_const(v) ? TV_CONST : TV_OBJ);
            if (r)
                r->obj = v;
            return r;
        }
    stop(tr, CDY_TRACE_UNSUPPORTED, "tensor attribute '%s' is not supported", n);
    return NULL;
}

/* getattr(base, name) as a tvar. */
static tvar *get_attr(tracer *tr, tvar *base, PyObject *name)
{
    if (base->kind == TV_TENSOR)
        return tensor_attr(tr, base, name);
    if (base->kind != TV_OBJ) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "attribute '%s' of a %s value", PyUnicode_AsUTF8(name),
             base->kind == TV_CONST ? "constant" : "non-object");
        return NULL;
    }
    if (!PyModule_Check(base->obj)) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "attribute '%s' of a %s object is not supported",
             PyUnicode_AsUTF8(name), Py_TYPE(base->obj)->tp_name);
        return NULL;
    }
    PyObject *o = PyObject_GetAttr(base->obj, name);
    if (!o) {
        stop_exc(tr, CDY_TRACE_ERROR, "attribute");
        return NULL;
    }
    int torch_attr = is_torch_module(base->obj);
    const cdy_src *s = base->src ? src_attr(tr, base->src, name) : NULL;
    if (!s && !torch_attr) {
        Py_DECREF(o);
        stop(tr, CDY_TRACE_UNSUPPORTED, "attribute '%s' of an unguardable module", PyUnicode_AsUTF8(name));
        return NULL;
    }
    tvar *v = wrap(tr, o, s, !torch_attr);
    Py_DECREF(o);
    return v;
}

/* LOAD_METHOD: a Tensor method becomes (METHOD, self); other attributes (NULL, attr). */
static int op_load_method(tracer *tr, PyObject *name)
{
    tvar *base = pop(tr);
    if (base->kind == TV_TENSOR) {
        tvar *m = tv_new(tr, TV_METHOD);
        if (!m)
            return -1;
        m->obj = name;
        m->self = base;
        return push(tr, m) || push(tr, base);
    }
    if (push(tr, &tr->null_var))
        return -1;
    return push(tr, get_attr(tr, base, name));
}

/* CALL oparg, with the pending KW_NAMES. */
static int op_call(tracer *tr, int oparg)
{
    tvar *meth = peek(tr, oparg + 2);
    tvar *callable;
    tvar **args;
    int nargs;
    if (meth->kind != TV_NULL) {
        callable = meth;
        args = &tr->stack[tr->sp - oparg - 1];
        nargs = oparg + 1;
    }
    else {
        callable = peek(tr, oparg + 1);
        args = &tr->stack[tr->sp - oparg];
        nargs = oparg;
    }
    PyObject *kw = tr->kwnames;
    tr->kwnames = NULL;
    tvar *r = do_call(tr, callable, args, nargs, kw);
    tr->sp -= oparg + 2;
    return push(tr, r);
}

/* BUILD_TUPLE / BUILD_LIST n */
static int op_build(tracer *tr, int n, int kind)
{
    if (n > tr->sp)
        return stop(tr, CDY_TRACE_UNSUPPORTED, "stack underflow");
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
    tvar *v = items ? tv_new(tr, kind) : NULL;
    if (!v)
        return -1;
    memcpy(items, &tr->stack[tr->sp - n], sizeof(tvar *) * (size_t)n);
    tr->sp -= n;
    v->n = n;
    v->items = items;
    if (kind == TV_TUPLE && all_const(items, n)) {   /* a tuple of constants is a constant */
        PyObject *t = PyTuple_New(n);
        for (int i = 0; t && i < n; i++)
            PyTuple_SET_ITEM(t, i, Py_NewRef(items[i]->obj));
        return push(tr, t ? tv_const(tr, t) : NULL);
    }
    return push(tr, v);
}

/* UNPACK_SEQUENCE n */
static int op_unpack(tracer *tr, int n)
{
    tvar *s = pop(tr);
    if ((s->kind == TV_TUPLE || s->kind == TV_LIST) && s->n == n) {
        for (int i = n - 1; i >= 0; i--)
            if (push(tr, s->items[i]))
                return -1;
        return 0;
    }
    if (s->kind == TV_CONST && PyTuple_Check(s->obj) && PyTuple_GET_SIZE(s->obj) == n) {
        for (int i = n - 1; i >= 0; i--)
            if (push(tr, tv_const(tr, Py_NewRef(PyTuple_GET_ITEM(s->obj, i)))))
                return -1;
        return 0;
    }
    return stop(tr, CDY_TRACE_UNSUPPORTED, "unpacking a value that is not a tuple or list of length %d", n);
}

/* BINARY_SUBSCR: tuple/list with a constant index, or constant folding. */
static int op_subscr(tracer *tr)
{
    tvar *i = pop(tr), *s = pop(tr);
    if (i->kind == TV_CONST && (s->kind == TV_TUPLE || s->kind == TV_LIST) && PyLong_CheckExact(i->obj)) {
        long k = PyLong_AsLong(i->obj);
        if (k < 0)
            k += s->n;
        if (k < 0 || k >= s->n)
            return stop(tr, CDY_TRACE_ERROR, "index out of range");
        return push(tr, s->items[k]);
    }
    if (i->kind == TV_CONST && s->kind == TV_CONST) {
        PyObject *r = PyObject_GetItem(s->obj, i->obj);
        if (!r)
            return stop_exc(tr, CDY_TRACE_ERROR, "subscript");
        return push(tr, tv_const(tr, r));
    }
    return stop(tr, CDY_TRACE_UNSUPPORTED, "subscript of a %s is not supported",
                s->kind == TV_TENSOR ? "tensor" : "value");
}

/* Truth value of v for a branch: 0/1, or -1 when stopped. */
static int truth(tracer *tr, tvar *v)
{
    if (v->kind == TV_TENSOR)
        return stop(tr, CDY_TRACE_UNSUPPORTED, "data-dependent branch on a tensor value");
    if (v->kind == TV_TUPLE || v->kind == TV_LIST)
        return v->n > 0;
    if (v->kind == TV_CONST || v->kind == TV_OBJ) {
        int r = PyObject_IsTrue(v->obj);
        if (r < 0)
            return stop_exc(tr, CDY_TRACE_ERROR, "truth value");
        return r;
    }
    return stop(tr, CDY_TRACE_UNSUPPORTED, "branch on an unsupported value");
}

/* 1 if v is None, 0 if not, -1 when unknown. */
static int is_none(tracer *tr, tvar *v)
{
    if (v->kind == TV_CONST || v->kind == TV_OBJ)
        return v->obj == Py_None;
    if (v->kind == TV_TENSOR || v->kind == TV_TUPLE || v->kind == TV_LIST)
        return 0;
    return stop(tr, CDY_TRACE_UNSUPPORTED, "'is None' on an unsupported value");
}

/* ---- return value ---------------------------------------------------------------------- */

/* Describe v as the return structure; tensors made by the graph become outputs. */
static cdy_ret *make_ret(tracer *tr, tvar *v)
{
    cdy_trace *t = tr->t;
    cdy_ret *r = cdy_arena_alloc(&t->arena, sizeof(cdy_ret));
    if (!r) {
        stop(tr, CDY_TRACE_UNSUPPORTED, "out of memory");
        return NULL;
    }
    switch (v->kind) {
    case TV_TENSOR:
        if (v->src) {
            r->kind = CDY_RET_SOURCE;
            r->src = v->src;
            return r;
        }
        r->kind = CDY_RET_OUTPUT;
        for (int i = 0; i < t->graph.noutputs; i++)
            if (t->graph.outputs[i] == v->value) {
                r->index = i;
                return r;
            }
        r->index = t->graph.noutputs;
        t->graph.outputs[t->graph.noutputs++] = v->value;
        return r;
    case TV_CONST:
        r->kind = CDY_RET_CONST;
        r->obj = v->obj;
        return r;
    case TV_OBJ:
        r->kind = v->src && v->src->kind != CDY_SRC_DEREF ? CDY_RET_SOURCE : CDY_RET_CONST;
        r->src = v->src;
        r->obj = v->obj;
        return r;
    case TV_TUPLE:
    case TV_LIST:
        r->kind = v->kind == TV_TUPLE ? CDY_RET_TUPLE : CDY_RET_LIST;
        r->n = v->n;
        r->items = cdy_arena_alloc(&t->arena, sizeof(cdy_ret *) * (size_t)(v->n + 1));
        if (!r->items) {
            stop(tr, CDY_TRACE_UNSUPPORTED, "out of memory");
            return NULL;
        }
        for (int i = 0; i < v->n; i++)
            if (!(r->items[i] = make_ret(tr, v->items[i])))
                return NULL;
        return r;
    default:
        stop(tr, CDY_TRACE_UNSUPPORTED, "returning this kind of value is not supported");
        return NULL;
    }
}

/* Count tensors in v (bound for the output array). */
static int count_tensors(tvar *v)
{
    if (v->kind == TV_TENSOR)
        return 1;
    int n = 0;
    if (v->kind == TV_TUPLE || v->kind == TV_LIST)
        for (int i = 0; i < v->n; i++)
            n += count_tensors(v->items[i]);
    return n;
}

/* RETURN_VALUE: finish the trace. */
static int op_return(tracer *tr)
{
    tvar *v = pop(tr);
    cdy_trace *t = tr->t;
    t->graph.outputs = cdy_arena_alloc(&t->arena, sizeof(int) * (size_t)(count_tensors(v) + 1));
    if (!t->graph.outputs)
        return stop(tr, CDY_TRACE_UNSUPPORTED, "out of memory");
    t->return_line = PyCode_Addr2Line(tr->co, tr->pc * 2);
    t->ret = make_ret(tr, v);
    return t->ret ? 1 : -1;
}

/* ---- the interpreter loop -------------------------------------------------------------- */

/* Opcode name for messages. */
static void opcode_name(int op, char *buf, size_t n)
{
    PyObject *dis = PyImport_ImportModule("dis");
    PyObject *names = dis ? PyObject_GetAttrString(dis, "opname") : NULL;
    PyObject *nm = names ? PySequence_GetItem(names, op) : NULL;
    snprintf(buf, n, "%s", nm && PyUnicode_Check(nm) ? PyUnicode_AsUTF8(nm) : "?");
    Py_XDECREF(dis);
    Py_XDECREF(names);
    Py_XDECREF(nm);
    PyErr_Clear();
}

/* Jump to code unit target; -1 if out of range. */
static int jump(tracer *tr, int target, int *next)
{
    if (target < 0 || target >= tr->ncode)
        return stop(tr, CDY_TRACE_UNSUPPORTED, "jump out of range");
    *next = target;
    return 0;
}

/* Execute the instruction at tr->pc; sets *next.  1 = returned, 0 = go on, -1 = stopped. */
static int step(tracer *tr, int op, int oparg, int *next)
{
    int nx = *next, c;
    switch (op) {
    case CDY_NOP: case CDY_RESUME: case CDY_PRECALL: case CDY_CACHE: case CDY_COPY_FREE_VARS:
        return 0;
    case CDY_PUSH_NULL:
        return push(tr, &tr->null_var);
    case CDY_POP_TOP:
        pop(tr);
        return 0;
    case CDY_LOAD_FAST:
        return op_load_fast(tr, oparg);
    case CDY_STORE_FAST:
        if (oparg >= tr->nlocals)
            return stop(tr, CDY_TRACE_UNSUPPORTED, "bad local slot");
        tr->locals[oparg] = pop(tr);
        return 0;
    case CDY_DELETE_FAST:
        tr->locals[oparg] = NULL;
        return 0;
    case CDY_LOAD_CONST:
        return push(tr, tv_const(tr, Py_NewRef(PyTuple_GET_ITEM(tr->co->co_consts, oparg))));
    case CDY_LOAD_GLOBAL:
        return op_load_global(tr, oparg);
    case CDY_LOAD_DEREF:
        return op_load_deref(tr, oparg);
    case CDY_LOAD_ATTR:
        return push(tr, get_attr(tr, pop(tr), PyTuple_GET_ITEM(tr->co->co_names, oparg)));
    case CDY_LOAD_METHOD:
        return op_load_method(tr, PyTuple_GET_ITEM(tr->co->co_names, oparg));
    case CDY_KW_NAMES:
        tr->kwnames = PyTuple_GET_ITEM(tr->co->co_consts, oparg);
        return 0;
    case CDY_CALL:
        return op_call(tr, oparg);
    case CDY_BINARY_OP:
        return op_binary(tr, oparg);
    case CDY_COMPARE_OP:
        return op_compare(tr, oparg);
    case CDY_UNARY_NEGATIVE:
        return op_unary(tr, 1);
    case CDY_UNARY_NOT:
        return op_unary(tr, 0);
    case CDY_BUILD_TUPLE:
        return op_build(tr, oparg, TV_TUPLE);
    case CDY_BUILD_LIST:
        return op_build(tr, oparg, TV_LIST);
    case CDY_UNPACK_SEQUENCE:
        return op_unpack(tr, oparg);
    case CDY_BINARY_SUBSCR:
        return op_subscr(tr);
    case CDY_COPY:
        return push(tr, peek(tr, oparg));
    case CDY_SWAP: {
        if (oparg > tr->sp)
            return stop(tr, CDY_TRACE_UNSUPPORTED, "stack underflow");
        tvar *a = tr->stack[tr->sp - 1];
        tr->stack[tr->sp - 1] = tr->stack[tr->sp - oparg];
        tr->stack[tr->sp - oparg] = a;
        return 0;
    }
    case CDY_IS_OP: {
        tvar *b = pop(tr), *a = pop(tr);
        int r;
        if (b->kind == TV_CONST && b->obj == Py_None)
            r = is_none(tr, a);
        else if (a->kind == TV_CONST && a->obj == Py_None)
            r = is_none(tr, b);
        else if ((a->kind == TV_OBJ || a->kind == TV_CONST) && (b->kind == TV_OBJ || b->kind == TV_CONST))
            r = a->obj == b->obj;
        else
            return stop(tr, CDY_TRACE_UNSUPPORTED, "'is' on these values is not supported");
        if (r < 0)
            return -1;
        return push(tr, tv_const(tr, PyBool_FromLong(r != oparg)));
    }
    case CDY_JUMP_FORWARD:
        return jump(tr, nx + oparg, next);
    case CDY_JUMP_BACKWARD:
        return jump(tr, nx - oparg, next);
    case CDY_POP_JUMP_FORWARD_IF_FALSE: case CDY_POP_JUMP_BACKWARD_IF_FALSE:
    case CDY_POP_JUMP_FORWARD_IF_TRUE: case CDY_POP_JUMP_BACKWARD_IF_TRUE:
        if ((c = truth(tr, pop(tr))) < 0)
            return -1;
        if (c == (op == CDY_POP_JUMP_FORWARD_IF_TRUE || op == CDY_POP_JUMP_BACKWARD_IF_TRUE))
            return jump(tr, op == CDY_POP_JUMP_FORWARD_IF_FALSE || op == CDY_POP_JUMP_FORWARD_IF_TRUE
                                ? nx + oparg : nx - oparg, next);
        return 0;
    case CDY_POP_JUMP_FORWARD_IF_NONE: case CDY_POP_JUMP_BACKWARD_IF_NONE:
    case CDY_POP_JUMP_FORWARD_IF_NOT_NONE: case CDY_POP_JUMP_BACKWARD_IF_NOT_NONE:
        if ((c = is_none(tr, pop(tr))) < 0)
            return -1;
        if (c == (op == CDY_POP_JUMP_FORWARD_IF_NONE || op == CDY_POP_JUMP_BACKWARD_IF_NONE))
            return jump(tr, op == CDY_POP_JUMP_FORWARD_IF_NONE || op == CDY_POP_JUMP_FORWARD_IF_NOT_NONE
                                ? nx + oparg : nx - oparg, next);
        return 0;
    case CDY_JUMP_IF_FALSE_OR_POP: case CDY_JUMP_IF_TRUE_OR_POP:
        if ((c = truth(tr, peek(tr, 1))) < 0)
            return -1;
        if (c == (op == CDY_JUMP_IF_TRUE_OR_POP))
            return jump(tr, nx + oparg, next);
        pop(tr);
        return 0;
    case CDY_RETURN_VALUE:
        return op_return(tr);
    default: {
        char name[64];
        opcode_name(op, name, sizeof(name));
        return stop(tr, CDY_TRACE_UNSUPPORTED, "opcode %s is not supported", name);
    }
    }
}

/* Run the bytecode from the start until RETURN_VALUE or a stop. */
static void run(tracer *tr)
{
    int pc = 0, ext = 0;
    for (int count = 0; count < MAX_INSTRUCTIONS; count++) {
        if (pc >= tr->ncode) {
            stop(tr, CDY_TRACE_UNSUPPORTED, "ran off the end of the code");
            return;
        }
        int op = tr->code[2 * pc], oparg = tr->code[2 * pc + 1] | ext;
        tr->pc = pc;
        int next = pc + 1 + cdy_opcode_caches(op);
        if (op == CDY_EXTENDED_ARG) {
            ext = oparg << 8;
            pc = next;
            continue;
        }
        ext = 0;
        int r = step(tr, op, oparg, &next);
        if (r)
            return;
        pc = next;
    }
    stop(tr, CDY_TRACE_UNSUPPORTED, "trace too long (more than %d instructions)", MAX_INSTRUCTIONS);
}

/* One-time lookups of torch objects; 0 or -1. */
static int trace_init(void)
{
    if (empty_strided)
        return 0;
    torch_mod = cdy_torch;
    tensor_type = cdy_tensor_type;
    PyObject *nn = PyImport_ImportModule("torch.nn");
    parameter_type = nn ? PyObject_GetAttrString(nn, "Parameter") : NULL;
    Py_XDECREF(nn);
    result_type_fn = PyObject_GetAttrString(cdy_torch, "result_type");
    meta_str = PyUnicode_FromString("meta");
    meta_kw = Py_BuildValue("(ss)", "dtype", "device");
    empty_strided = PyObject_GetAttrString(cdy_torch, "empty_strided");
    if (!parameter_type || !result_type_fn || !meta_str || !meta_kw || !empty_strided)
        return -1;
    return cdy_optable_init(cdy_torch);
}

/* Trace code with the frame's arguments; see internal.h. */
void cdy_trace_run(cdy_trace *t, PyCodeObject *code, PyObject *const *locals, PyObject *globals,
                   PyObject *builtins, PyObject *closure)
{
    tracer tr;
    memset(&tr, 0, sizeof(tr));
    tr.t = t;
    tr.co = code;
    tr.null_var.kind = TV_NULL;
    t->status = CDY_TRACE_OK;
    t->keep = PyList_New(0);
    if (!t->keep || trace_init()) {
        stop_exc(&tr, CDY_TRACE_UNSUPPORTED, "tracer initialisation");
        return;
    }
    tr.frame_locals = locals;
    tr.globals = globals;
    tr.builtins = builtins;
    tr.closure = closure;
    tr.bytes = PyCode_GetCode(code);
    if (!tr.bytes || !keep(&tr, tr.bytes)) {
        stop_exc(&tr, CDY_TRACE_UNSUPPORTED, "reading the bytecode");
        return;
    }
    tr.code = (const unsigned char *)PyBytes_AS_STRING(tr.bytes);
    tr.ncode = (int)(PyBytes_GET_SIZE(tr.bytes) / 2);
    tr.nlocals = code->co_nlocalsplus;
    tr.locals = cdy_arena_alloc(&t->arena, sizeof(tvar *) * (size_t)(tr.nlocals + 1));
    tr.stack_cap = code->co_stacksize + 8;
    tr.stack = cdy_arena_alloc(&t->arena, sizeof(tvar *) * (size_t)tr.stack_cap);
    if (!tr.locals || !tr.stack) {
        stop(&tr, CDY_TRACE_UNSUPPORTED, "out of memory");
        return;
    }
    run(&tr);
    int nslots = cdy_code_nargslots(code);
    t->input_srcs = cdy_arena_alloc(&t->arena, sizeof(cdy_src) * (size_t)(t->graph.ninputs + 1));
    if (!t->input_srcs && t->status == CDY_TRACE_OK)
        stop(&tr, CDY_TRACE_UNSUPPORTED, "out of memory");
    (void)nslots;
    /* input sources in input order, from the guards (one TENSOR guard per input) */
    for (int i = 0, k = 0; t->input_srcs && i < t->guards.n; i++)
        if (t->guards.items[i].kind == CDY_GUARD_TENSOR && k < t->graph.ninputs)
            t->input_srcs[k++] = t->guards.items[i].src;
    PyErr_Clear();
}

/* Release what a trace holds. */
void cdy_trace_free(cdy_trace *t)
{
    cdy_guards_free(&t->guards);
    PyMem_Free(t->graph.values);
    PyMem_Free(t->pynodes);
    t->graph.values = NULL;
    t->pynodes = NULL;
    cdy_arena_free(&t->arena);
    Py_CLEAR(t->keep);
}
