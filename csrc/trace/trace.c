/* trace.c - the symbolic bytecode interpreter: the loop and one handler per
 * semantic operation (pyver/sops.def).  The per-version layer (pyver/)
 * decodes each raw instruction of CPython 3.11, 3.12 or 3.13 into semantic
 * operations; nothing here names a raw opcode.  Values are tvars
 * (trace/vars.c); calls are in trace/calls.c.  A frame's trace ends at
 * RETURN_VALUE, or stops with a reason: the frame then runs eagerly (a
 * graph break).                                                          */
#include "trace/trace.h"
#include "pyver/pyver.h"

#include <stdarg.h>
#include <string.h>

#define MAX_INSTRUCTIONS 500000

/* ---- failure ------------------------------------------------------------- */

/* The fault a test asked for (cdy_trace_inject), made on purpose so that
 * tests reach the paths that catch tracer bugs. */
static struct {
    int kind;   /* CDY_INJECT_* */
    int op;     /* CDY_INJECT_STEP: the opcode that fails */
} inject;

int cdy_trace_inject(int kind, int op)
{
    if (kind < CDY_INJECT_NONE || kind > CDY_INJECT_GRAPH)
        return -1;
    inject.kind = kind;
    inject.op = op;
    return 0;
}

/* Append ": ExcType: message" of the pending exception (cleared) to buf. */
static void append_exception(char *buf, size_t size)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    PyObject *s = ev ? PyObject_Str(ev) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
    size_t n = strlen(buf);
    snprintf(buf + n, size - n, ": %s: %.300s", et ? ((PyTypeObject *)et)->tp_name : "error",
             msg ? msg : "?");
    Py_XDECREF(s);
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    PyErr_Clear();
}

/* Log (topic debug) the reason and the traced frames it stopped in, innermost first. */
static void log_stop_stack(tracer *tr)
{
    char buf[2048];
    size_t n = (size_t)snprintf(buf, sizeof(buf), "stop [%s] %s", cdy_reason_code(tr->t->reason_code),
                                tr->t->reason);
    for (tracer *f = tr; f && n < sizeof(buf); f = f->parent)
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "\n    at %s:%d in %s",
                              PyUnicode_AsUTF8(f->co->co_filename), PyCode_Addr2Line(f->co, f->pc * 2),
                              PyUnicode_AsUTF8(f->co->co_qualname));
    PyErr_Clear();
    cdy_log("debug", "%s", buf);
}

int cdy_tr_stop_at(tracer *tr, cdy_reason code, int exc, const char *fmt, ...)
{
    cdy_trace *t = tr->t;
    if (t->status != CDY_TRACE_OK) {
        if (exc)
            PyErr_Clear();
        return -1;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->reason, sizeof(t->reason), fmt, ap);
    va_end(ap);
    cdy_reason_cat cat = cdy_reasons[code].cat;
    PyObject *e = NULL;   /* the exception the traced code may catch (trace/exceptions.c) */
    if (exc && cat == CDY_RCAT_USER && cdy_exc_raisable(code) && PyErr_Occurred()) {
        PyObject *et, *tb;
        PyErr_Fetch(&et, &e, &tb);
        PyErr_NormalizeException(&et, &e, &tb);
        PyErr_Restore(Py_NewRef(et), e ? Py_NewRef(e) : NULL, tb);
        Py_XDECREF(et);
        e = cdy_tr_keep(tr, e);
    }
    if (exc)
        append_exception(t->reason, sizeof(t->reason));
    t->status = cat == CDY_RCAT_USER || cat == CDY_RCAT_FALLBACK ? CDY_TRACE_ERROR
                                                                  : CDY_TRACE_UNSUPPORTED;
    t->reason_code = (int)code;
    const tracer *top = tr;
    while (top->parent)
        top = top->parent;
    t->stop_top_pc = top->pc_start;
    t->stop_top_count = top->ninstr;
    t->reason_line = PyCode_Addr2Line(tr->co, tr->pc * 2);
    t->reason_file = tr->co->co_filename;
    if (cat == CDY_RCAT_USER && cdy_exc_raisable(code) && cdy_exc_begin(tr, code, e)) {
        /* the traced code may catch it: what the raise depends on is pinned now,
         * the rest when it leaves the top frame (cdy_exc_escaped) */
        cdy_sx_pin_frame(tr, "the code read the size and an exception was raised");
        return -1;
    }
    cdy_sx_pin_all(tr, "the code read the size and the trace stopped");
    if (cdy_log_on("debug") && !(cat == CDY_RCAT_USER && cdy_exc_raisable(code)))
        log_stop_stack(tr);
    return -1;
}

int cdy_tr_stop_torch(tracer *tr, const char *what)
{
    if (PyErr_ExceptionMatches(PyExc_NotImplementedError))
        return cdy_tr_stop_exc(tr, NO_META_KERNEL, what);
    return cdy_tr_stop_exc(tr, TORCH_RAISED, what);
}

int cdy_tr_stopped(const tracer *tr)
{
    return tr->t->status != CDY_TRACE_OK;
}

/* Keep a new reference alive for the trace's life; returns it borrowed (NULL stays NULL). */
PyObject *cdy_tr_keep(tracer *tr, PyObject *o)
{
    if (!o)
        return NULL;
    int r = PyList_Append(tr->t->keep, o);
    Py_DECREF(o);
    return r ? NULL : o;
}

/* ---- stack ------------------------------------------------------------------ */

/* Push v (NULL means a failure already recorded); 0 or -1. */
static int push(tracer *tr, tvar *v)
{
    if (!v)
        return -1;
    if (CDY_TR_CHECK(tr, tr->sp < tr->stack_cap, STACK_OVERFLOW))
        return -1;
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

/* ---- loads and stores ---------------------------------------------------------- */

/* LOAD_FAST slot: the top frame's arguments are wrapped (and guarded) on first use. */
static int op_load_fast(tracer *tr, int slot)
{
    if (CDY_TR_CHECK(tr, slot < tr->nlocals, BAD_LOCAL_SLOT))
        return -1;
    if (tr->locals[slot] && tr->locals[slot]->kind == TV_NULL)   /* deleted, or cleared (PEP 709) */
        return cdy_tr_stop(tr, UNBOUND_LOCAL,
                           PyUnicode_AsUTF8(PyTuple_GET_ITEM(tr->co->co_localsplusnames, slot)));
    if (!tr->locals[slot]) {
        PyObject *o = tr->frame_locals && slot < cdy_code_nargslots(tr->co) ? tr->frame_locals[slot] : NULL;
        if (!o)
            return cdy_tr_stop(tr, UNBOUND_LOCAL,
                               PyUnicode_AsUTF8(PyTuple_GET_ITEM(tr->co->co_localsplusnames, slot)));
        cdy_src *s = cdy_src_new(tr, CDY_SRC_LOCAL);
        if (!s)
            return -1;
        s->slot = slot;
        tr->locals[slot] = cdy_wrap(tr, o, s, 1);
    }
    return push(tr, tr->locals[slot]);
}

/* LOAD_FAST_AND_CLEAR slot (3.12+, an inlined comprehension saving the
 * outer binding of its variable): push the value, or the NULL of an unbound
 * slot, and unbind the slot; the STORE_FAST after the loop puts it back. */
static int op_load_fast_and_clear(tracer *tr, int slot)
{
    if (CDY_TR_CHECK(tr, slot < tr->nlocals, BAD_LOCAL_SLOT))
        return -1;
    tvar *v = tr->locals[slot];
    int arg_unread = !v && tr->frame_locals && slot < cdy_code_nargslots(tr->co) &&
                     tr->frame_locals[slot];
    if (arg_unread) {   /* an argument not read yet: its value, wrapped and guarded */
        if (op_load_fast(tr, slot))
            return -1;
        v = pop(tr);
    }
    tr->locals[slot] = &tr->null_var;
    return push(tr, v ? v : &tr->null_var);
}

/* LOAD_GLOBAL co_names[idx] from the function's globals (then builtins). */
static int op_load_global(tracer *tr, int idx)
{
    PyObject *name = PyTuple_GET_ITEM(tr->co->co_names, idx);
    PyObject *o = PyDict_GetItemWithError(tr->globals, name), *dict = tr->globals;
    if (!o && !PyErr_Occurred()) {
        o = PyDict_GetItemWithError(tr->builtins, name);
        dict = tr->builtins;
    }
    if (!o) {
        if (PyErr_Occurred())
            return cdy_tr_stop_exc(tr, READ_GLOBAL);
        return cdy_tr_stop(tr, NAME_ERROR, PyUnicode_AsUTF8(name));
    }
    if (!tr->guard_globals)   /* torch's own code: its globals are not guarded */
        return push(tr, cdy_wrap(tr, o, NULL, 0));
    cdy_src *s = cdy_src_new(tr, CDY_SRC_GLOBAL);
    if (!s)
        return -1;
    s->name = name;
    if (tr->parent)   /* an inlined function: its own module's globals, or its builtins
                       * for a builtin (a resume rebuilds it as dict[name]) */
        s->dict = dict;
    return push(tr, cdy_wrap(tr, o, s, 1));
}

/* IMPORT_NAME: an absolute import of a module already in sys.modules (the
 * import statement then only looks it up); the module is not guarded, like
 * torch's own globals.  Importing anything else stops the trace. */
static int op_import_name(tracer *tr, int oparg)
{
    PyObject *name = PyTuple_GET_ITEM(tr->co->co_names, oparg);
    tvar *fromlist = pop(tr), *level = pop(tr);
    if (level->kind != TV_CONST || !PyLong_Check(level->obj) || PyLong_AsLong(level->obj) != 0 ||
        fromlist->kind != TV_CONST)
        return cdy_tr_stop(tr, RELATIVE_IMPORT, PyUnicode_AsUTF8(name));
    PyObject *mods = PyImport_GetModuleDict(), *key = name;
    PyObject *mod = PyDict_GetItemWithError(mods, name);   /* the whole dotted name is imported */
    if (mod && (fromlist->obj == Py_None || !PyObject_IsTrue(fromlist->obj))) {
        /* `import a.b` binds the top package a */
        Py_ssize_t dot = PyUnicode_FindChar(name, '.', 0, PyUnicode_GET_LENGTH(name), 1);
        key = cdy_tr_keep(tr, dot > 0 ? PyUnicode_Substring(name, 0, dot) : Py_NewRef(name));
        mod = key ? PyDict_GetItemWithError(mods, key) : NULL;
    }
    if (!mod || !PyModule_Check(mod)) {
        PyErr_Clear();
        return cdy_tr_stop(tr, IMPORT_NEW_MODULE, PyUnicode_AsUTF8(name));
    }
    if (!tr->guard_globals)   /* torch's own code: like its globals, not guarded */
        return push(tr, cdy_wrap(tr, mod, NULL, 0));
    cdy_src *s = cdy_src_new(tr, CDY_SRC_GLOBAL);   /* sys.modules[key], guarded by identity */
    if (!s)
        return -1;
    s->name = key;
    s->dict = mods;
    return push(tr, cdy_wrap(tr, mod, s, 1));
}

/* The value of free variable idx of a real closure (the function's own cells):
 * wrapped from its source (the frame's closure, or fn.__closure__[i].cell_contents of
 * an inlined function read from the frame); NULL when stopped. */
static tvar *closure_value(tracer *tr, int idx)
{
    if (!tr->closure || idx >= PyTuple_GET_SIZE(tr->closure)) {
        cdy_tr_stop(tr, CELL_MISSING);
        return NULL;
    }
    PyObject *o = PyCell_GET(PyTuple_GET_ITEM(tr->closure, idx));
    if (!o) {
        cdy_tr_stop(tr, UNBOUND_FREE);
        return NULL;
    }
    const cdy_src *s = NULL;
    if (!tr->parent) {
        cdy_src *d = cdy_src_new(tr, CDY_SRC_DEREF);
        if (!d)
            return NULL;
        d->slot = idx;
        s = d;
    }
    else if (tr->func_src && !(tr->func_src_soft && cdy_fixed_by_convention(o))) {
        /* an inlined function read from the frame: fn.__closure__[i].cell_contents */
        static PyObject *closure_str, *contents_str;
        if ((!closure_str && !(closure_str = PyUnicode_InternFromString("__closure__"))) ||
            (!contents_str && !(contents_str = PyUnicode_InternFromString("cell_contents")))) {
            cdy_tr_stop_exc(tr, PY_ERROR);
            return NULL;
        }
        PyObject *key = cdy_tr_keep(tr, PyLong_FromLong(idx));
        const cdy_src *c = key ? cdy_src_step(tr, tr->func_src, closure_str, 0) : NULL;
        c = c ? cdy_src_step(tr, c, key, 1) : NULL;
        s = c ? cdy_src_step(tr, c, contents_str, 0) : NULL;
        if (!s) {
            cdy_tr_stop(tr, CELL_TOO_DEEP);
            return NULL;
        }
    }
    /* else: a method or a function the trace made: its cells are fixed with it */
    if (!s && cdy_fixed_by_convention(o))
        return cdy_fixed_value(tr, o);
    return cdy_wrap(tr, o, s, s != NULL);
}

/* The cell (a TV_CELL: its value in self, NULL while unbound) of slot, a cell or free
 * variable of tr's frame, made on first use (MAKE_CELL, LOAD_CLOSURE); NULL when stopped.
 * A cell of a real closure is marked by src: storing into it is not traced. */
static tvar *cell_of(tracer *tr, int slot)
{
    int first_free = tr->co->co_nlocalsplus - tr->co->co_nfreevars;
    if (slot >= first_free && tr->cells)
        return tr->cells[slot - first_free];
    tvar *c = tr->locals[slot];
    if (c && c->kind == TV_CELL)
        return c;
    if (slot >= first_free) {
        tvar *v = closure_value(tr, slot - first_free);
        if (!v)
            return NULL;
        c = cdy_tv_new(tr, TV_CELL);
        if (c) {
            c->self = v;
            c->src = v->src ? v->src : (const cdy_src *)tr;   /* not ours to store into */
        }
    }
    else {
        if (!tr->locals[slot] && tr->frame_locals && slot < cdy_code_nargslots(tr->co)) {
            if (op_load_fast(tr, slot))   /* an argument made a cell: wrapped as any argument */
                return NULL;
            pop(tr);
        }
        tvar *v = tr->locals[slot];
        if ((c = cdy_tv_new(tr, TV_CELL)))
            c->self = v && v->kind != TV_NULL ? v : NULL;   /* null_var: unbound */
    }
    if (c)
        tr->locals[slot] = c;
    return c;
}

/* LOAD_DEREF / LOAD_CLASSDEREF: the value of a cell of this frame, of a cell the trace made
 * (a closure it made), or of the function's own closure. */
static int op_load_deref(tracer *tr, int oparg)
{
    int first_free = tr->co->co_nlocalsplus - tr->co->co_nfreevars;
    if (oparg >= first_free && !tr->cells && !(tr->locals[oparg] && tr->locals[oparg]->kind == TV_CELL))
        return push(tr, closure_value(tr, oparg - first_free));
    tvar *c = cell_of(tr, oparg);
    if (!c)
        return -1;
    if (!c->self && oparg < first_free)
        return cdy_tr_stop(tr, UNBOUND_LOCAL,
                           PyUnicode_AsUTF8(PyTuple_GET_ITEM(tr->co->co_localsplusnames, oparg)));
    if (!c->self)
        return cdy_tr_stop(tr, UNBOUND_FREE);
    return push(tr, c->self);
}

/* STORE_DEREF / DELETE_DEREF (v NULL): into a cell of this frame or one the trace made. */
static int op_store_deref(tracer *tr, int oparg, tvar *v)
{
    tvar *c = oparg < tr->nlocals ? cell_of(tr, oparg) : NULL;
    if (!c)
        return tr->t->status == CDY_TRACE_OK ? cdy_tr_stop(tr, STORE_FREE_VAR) : -1;
    if (c->src)
        return cdy_tr_stop(tr, STORE_FREE_VAR);
    c->self = v;
    return 0;
}

/* See trace.h. */
tvar *cdy_tr_cell_value(tracer *tr, tvar *c)
{
    if (!c->self)
        cdy_tr_stop(tr, UNBOUND_FREE);
    return c->self;
}

/* See trace.h: the class comes from the function's __class__ cell, self from its first slot. */
tvar *cdy_tr_super(tracer *tr)
{
    int first_free = tr->co->co_nlocalsplus - tr->co->co_nfreevars;
    PyObject *cls = NULL;
    for (int i = first_free; i < tr->co->co_nlocalsplus && !tr->cells && tr->closure; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(tr->co->co_localsplusnames, i),
                                             "__class__") == 0 &&
            i - first_free < PyTuple_GET_SIZE(tr->closure))
            cls = PyCell_GET(PyTuple_GET_ITEM(tr->closure, i - first_free));
    if (!cls || !PyType_Check(cls) || tr->co->co_argcount < 1 || first_free < 1) {
        cdy_tr_stop(tr, SUPER_OUTSIDE_METHOD);
        return NULL;
    }
    if (!tr->locals[0] && op_load_fast(tr, 0))
        return NULL;
    tvar *self = tr->locals[0] ? tr->locals[0] : pop(tr);
    if (self->kind == TV_CELL && !(self = self->self)) {   /* self captured by a closure */
        cdy_tr_stop(tr, SUPER_OUTSIDE_METHOD);
        return NULL;
    }
    tvar *v = cdy_tv_new(tr, TV_SUPER);
    if (!v || !cdy_tr_keep(tr, Py_NewRef(cls)))
        return NULL;
    v->obj = cls;
    v->self = self;
    return v;
}

/* LOAD_CLOSURE slot: the cell of a cell or free variable of this frame. */
static int op_load_closure(tracer *tr, int oparg)
{
    return push(tr, cell_of(tr, oparg));
}

/* Set attribute `flag` of the trace-made function f (MAKE_FUNCTION's flags,
 * SET_FUNCTION_ATTRIBUTE's oparg) to v: 8 closure cells, 4 annotations
 * (ignored), 1 constant defaults; keyword-only defaults stop the trace.
 * 0 or -1. */
static int func_attr(tracer *tr, tvar *f, int flag, tvar *v)
{
    switch (flag) {
    case 8:
        if (v->kind != TV_TUPLE)
            return cdy_tr_stop(tr, MAKE_FUNCTION);
        f->items = v->items;   /* the closure tuple's items (the arena's, never changed) */
        f->n = v->n;
        return 0;
    case 4:
        return 0;
    case 1:
        if (v->kind != TV_CONST)
            return cdy_tr_stop(tr, MAKE_FUNCTION);
        return PyFunction_SetDefaults(f->obj, v->obj) ? cdy_tr_stop_exc(tr, MAKE_FUNCTION_FAILED) : 0;
    default:
        return cdy_tr_stop(tr, MAKE_FUNCTION);
    }
}

/* MAKE_FUNCTION flags: a function value of the code on top, with the
 * attributes below it that flags names (3.11, 3.12; 3.13's flags are 0 and
 * SET_FUNCTION_ATTRIBUTE follows). */
static int op_make_function(tracer *tr, int oparg)
{
    tvar *code = pop(tr);
    if (code->kind != TV_CONST || !PyCode_Check(code->obj))
        return cdy_tr_stop(tr, MAKE_FUNCTION);
    PyObject *fn = cdy_tr_keep(tr, PyFunction_New(code->obj, tr->globals));
    if (!fn)
        return cdy_tr_stop_exc(tr, MAKE_FUNCTION_FAILED);
    tvar *f = cdy_tv_seq(tr, TV_FUNC, NULL, 0);
    if (!f)
        return -1;
    f->obj = fn;
    for (int flag = 8; flag >= 1; flag >>= 1)   /* closure on top, defaults lowest */
        if ((oparg & flag) && func_attr(tr, f, flag, pop(tr)))
            return -1;
    return push(tr, f);
}

/* SET_FUNCTION_ATTRIBUTE flag (3.13): pop the function and the value below
 * it; set the attribute; push the function. */
static int op_set_function_attribute(tracer *tr, int flag)
{
    tvar *f = pop(tr), *v = pop(tr);
    if (f->kind != TV_FUNC)
        return cdy_tr_stop(tr, MAKE_FUNCTION);
    return func_attr(tr, f, flag, v) ? -1 : push(tr, f);
}

/* Push the call pair of attribute value v (a plain callable): with the
 * call protocol's NULL below it (3.11, 3.12) or above it (3.13). */
static int push_unbound(tracer *tr, tvar *v)
{
    if (CDY_PV_NULL_BELOW_CALLABLE)
        return push(tr, &tr->null_var) ? -1 : push(tr, v);
    return push(tr, v) ? -1 : push(tr, &tr->null_var);
}

/* LOAD_METHOD: a Tensor or container method becomes (METHOD, self); other
 * attributes the attribute and a NULL, in the version's order. */
static int op_load_method(tracer *tr, PyObject *name)
{
    tvar *base = pop(tr);
    if (base->kind == TV_TENSOR || base->kind == TV_DICT || base->kind == TV_LIST ||
        base->kind == TV_SET) {
        tvar *m = cdy_tv_new(tr, TV_METHOD);
        if (!m)
            return -1;
        m->obj = name;
        m->self = base;
        return push(tr, m) || push(tr, base);
    }
    tvar *v = cdy_get_attr(tr, base, name);
    return v ? push_unbound(tr, v) : -1;
}

/* LOAD_SUPER_ATTR (3.12+): pop super, class, self; the attribute co_names[idx]
 * of super() (flags bit 1: super(class, self)), as LOAD_METHOD (bit 0) or
 * LOAD_ATTR.  The zero-argument form finds its class and self as 3.11's
 * super() call does (cdy_tr_super). */
static int op_load_super_attr(tracer *tr, int idx, int flags)
{
    tvar *self = pop(tr), *cls = pop(tr), *fn = pop(tr);
    tvar *args[2] = {cls, self};
    tvar *sup = cdy_call(tr, fn, args, flags & 2 ? 2 : 0, NULL);
    if (!sup)
        return -1;
    PyObject *name = PyTuple_GET_ITEM(tr->co->co_names, idx);
    if (flags & 1)
        return push(tr, sup) ? -1 : op_load_method(tr, name);
    return push(tr, cdy_get_attr(tr, sup, name));
}

/* ---- calls and operators -------------------------------------------------------------- */

/* CALL oparg, with the pending KW_NAMES.  Below the arguments is the call
 * pair: [NULL, callable] or [method, self] (3.11, 3.12), [callable, NULL]
 * or [method, self] (3.13); a NULL in the lower slot names the upper one as
 * the callable, else the lower one is called with the upper one (unless
 * NULL) as its first argument. */
static int op_call(tracer *tr, int oparg)
{
    if (CDY_TR_CHECK(tr, oparg + 2 <= tr->sp, STACK_UNDERFLOW))
        return -1;
    tvar *lower = peek(tr, oparg + 2), *upper = peek(tr, oparg + 1);
    tvar *callable, **args;
    int nargs;
    if (lower->kind != TV_NULL && upper->kind != TV_NULL) {
        callable = lower;
        args = &tr->stack[tr->sp - oparg - 1];
        nargs = oparg + 1;
    }
    else {
        callable = lower->kind != TV_NULL ? lower : upper;
        args = &tr->stack[tr->sp - oparg];
        nargs = oparg;
    }
    PyObject *kw = tr->kwnames;
    tr->kwnames = NULL;
    tr->sx_op_callable = callable;   /* its result goes on the stack (trace/symint.c) */
    tvar *r = cdy_call(tr, callable, args, nargs, kw);
    tr->sp -= oparg + 2;
    return push(tr, r);
}

/* CALL_FUNCTION_EX: f(*args) or f(*args, **kwargs) with known containers. */
static int op_call_ex(tracer *tr, int oparg)
{
    tvar *kw = (oparg & 1) ? pop(tr) : NULL, *pos = pop(tr), *upper = pop(tr), *lower = pop(tr);
    tvar *fn = lower->kind == TV_NULL ? upper : lower;   /* the call pair (see op_call) */
    tvar *it = cdy_iterate(tr, pos);
    if (!it)
        return -1;
    if (kw && kw->kind != TV_DICT)
        return cdy_tr_stop(tr, KWARGS_MAPPING);
    int np = it->n - it->pos, nk = kw ? kw->n : 0;
    tvar **args = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(np + nk + 1));
    if (!args)
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    if (np)
        memcpy(args, it->items + it->pos, sizeof(tvar *) * (size_t)np);
    PyObject *names = NULL;
    if (nk) {
        names = PyTuple_New(nk);
        for (int i = 0; names && i < nk; i++) {
            PyTuple_SET_ITEM(names, i, Py_NewRef(kw->keys[i]));
            args[np + i] = kw->items[i];
        }
        if (!cdy_tr_keep(tr, names))
            return cdy_tr_stop(tr, OUT_OF_MEMORY);
    }
    tr->sx_op_callable = fn;   /* its result goes on the stack (trace/symint.c) */
    return push(tr, cdy_call(tr, fn, args, np + nk, names));
}

/* a <sym> b (sym= when inplace) with a a set (trace/sets.c); NULL when stopped. */
static tvar *op_set_binary(tracer *tr, const char *sym, int inplace, tvar **args)
{
    if (inplace && strlen(sym) == 1 && strchr("|&-^", sym[0]))
        return cdy_set_inplace(tr, sym, args[0], args[1]);
    int handled;
    tvar *r = cdy_set_operator(tr, sym, args[0], args[1], &handled);
    if (!handled)
        cdy_tr_stop(tr, OPERATOR_UNSUPPORTED, sym);
    return r;
}

/* A tuple of constants as a TUPLE of constant tvars (to join a TUPLE); NULL when stopped. */
static tvar *const_tuple_items(tracer *tr, tvar *c)
{
    int n = (int)PyTuple_GET_SIZE(c->obj);
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
    for (int i = 0; items && i < n; i++)
        if (!(items[i] = cdy_tv_const(tr, Py_NewRef(PyTuple_GET_ITEM(c->obj, i)))))
            return NULL;
    return items ? cdy_tv_seq(tr, TV_TUPLE, items, n) : NULL;
}

/* a + b for two tuples or two lists (a tuple of constants joins a TUPLE), a * k / k * a
 * for one and a constant int: the new sequence; *handled 0 for other operands. */
static tvar *seq_binary(tracer *tr, int base, tvar **args, int *handled)
{
    tvar *a = args[0], *b = args[1];
    *handled = 0;
    if (base == 0) {   /* + */
        int ct_a = a->kind == TV_CONST && PyTuple_CheckExact(a->obj) && b->kind == TV_TUPLE;
        int ct_b = b->kind == TV_CONST && PyTuple_CheckExact(b->obj) && a->kind == TV_TUPLE;
        if ((ct_a && !(a = const_tuple_items(tr, a))) || (ct_b && !(b = const_tuple_items(tr, b)))) {
            *handled = 1;
            return NULL;
        }
        if (a->kind != b->kind || (a->kind != TV_TUPLE && a->kind != TV_LIST))
            return NULL;
        *handled = 1;
        int n = a->n + b->n;
        tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
        if (!items) {
            cdy_tr_stop(tr, OUT_OF_MEMORY);
            return NULL;
        }
        if (a->n)
            memcpy(items, a->items, sizeof(tvar *) * (size_t)a->n);
        if (b->n)
            memcpy(items + a->n, b->items, sizeof(tvar *) * (size_t)b->n);
        return cdy_tv_seq(tr, a->kind, items, n);
    }
    long long k;
    if (base != 5 || !(((a->kind == TV_TUPLE || a->kind == TV_LIST) && cdy_const_int(b, &k)) ||
                       ((b->kind == TV_TUPLE || b->kind == TV_LIST) && cdy_const_int(a, &k))))
        return NULL;   /* not seq * int */
    *handled = 1;
    tvar *s = a->kind == TV_TUPLE || a->kind == TV_LIST ? a : b;
    if (k < 0)
        k = 0;
    if (k * s->n > 1000000) {
        cdy_tr_stop(tr, ITER_HUGE_CONST);
        return NULL;
    }
    int n = (int)(k * s->n);
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
    for (int i = 0; items && i < n; i++)
        items[i] = s->items[i % s->n];
    if (!items)
        cdy_tr_stop(tr, OUT_OF_MEMORY);
    return items ? cdy_tv_seq(tr, s->kind, items, n) : NULL;
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
        return cdy_tr_stop(tr, BINARY_OP, oparg);
    tvar *args[2];
    args[1] = pop(tr);
    args[0] = pop(tr);
    if (inplace && args[0]->kind == TV_TENSOR) {   /* functionalized (trace/mutate.c) */
        PyObject *fn = cdy_operator_fn(base, names[base]);
        return fn ? push(tr, cdy_mut_binary(tr, names[base], fn, syms[base], args))
                  : cdy_tr_stop_exc(tr, PY_ERROR);
    }
    int list_iadd = inplace && args[0]->kind == TV_LIST &&
                    (args[1]->kind == TV_LIST || args[1]->kind == TV_TUPLE);
    if (list_iadd && base == 0)   /* list += iterable extends the list itself: its aliases see it */
        return cdy_list_extend(tr, args[0], args[1]) ? -1 : push(tr, args[0]);
    if (args[0]->kind == TV_SET)
        return push(tr, op_set_binary(tr, syms[base], inplace, args));
    int handled;
    tvar *dr = base == 7 ? cdy_dict_or(tr, args[0], args[1], inplace, &handled) : NULL;
    if (base == 7 && handled)   /* dict | dict, dict |= mapping */
        return push(tr, dr);
    tvar *sr = seq_binary(tr, base, args, &handled);   /* tuple / list + and * */
    if (handled)
        return push(tr, sr);
    PyObject *fn = cdy_operator_fn(base, names[base]);
    if (!fn)
        return cdy_tr_stop_exc(tr, PY_ERROR);
    return push(tr, cdy_call_operator(tr, fn, syms[base], args, 2));
}

/* COMPARE_OP oparg (3.11: 0 < 1 <= 2 == 3 != 4 > 5 >=) */
static int op_compare(tracer *tr, int oparg)
{
    static const char *names[] = {"lt", "le", "eq", "ne", "gt", "ge"};
    static const char *syms[] = {"<", "<=", "==", "!=", ">", ">="};
    if (oparg < 0 || oparg > 5)
        return cdy_tr_stop(tr, COMPARE_OP, oparg);
    PyObject *fn = cdy_operator_fn(16 + oparg, names[oparg]);
    tvar *args[2];
    args[1] = pop(tr);
    args[0] = pop(tr);
    if (!fn)
        return cdy_tr_stop_exc(tr, PY_ERROR);
    if (args[0]->kind == TV_SET)
        return push(tr, op_set_binary(tr, syms[oparg], 0, args));
    if (args[0]->kind == TV_INST || args[1]->kind == TV_INST)
        return push(tr, cdy_obj_compare(tr, oparg, args));
    return push(tr, cdy_call_operator(tr, fn, syms[oparg], args, 2));
}

/* UNARY_NEGATIVE / UNARY_NOT / UNARY_INVERT / UNARY_POSITIVE (semantic op
 * sop) on the top value. */
static int op_unary(tracer *tr, int sop)
{
    tvar *a = pop(tr);
    if (sop == CDY_SOP_UNARY_NOT) {
        int t = cdy_truth(tr, a);
        return t < 0 ? -1 : push(tr, cdy_tv_const(tr, PyBool_FromLong(!t)));
    }
    const char *name = sop == CDY_SOP_UNARY_NEGATIVE ? "neg" : sop == CDY_SOP_UNARY_INVERT ? "invert" : "pos";
    int slot = sop == CDY_SOP_UNARY_NEGATIVE ? 24 : sop == CDY_SOP_UNARY_INVERT ? 25 : 26;
    PyObject *fn = cdy_operator_fn(slot, name);
    if (!fn)
        return cdy_tr_stop_exc(tr, PY_ERROR);
    return push(tr, cdy_call_operator(tr, fn, name, &a, 1));
}

/* The interned string "__getitem__". */
static PyObject *getitem_name(void)
{
    static PyObject *s;
    if (!s)
        s = PyUnicode_InternFromString("__getitem__");
    return s;
}

/* ml[i] on an nn.ModuleList/Sequential read from the frame: the item of its _modules dict
 * (guarded by its keys, so a negative index stays right); NULL when stopped. */
static tvar *module_list_item(tracer *tr, tvar *ml, tvar *i)
{
    static PyObject *str_modules;
    if (!str_modules && !(str_modules = PyUnicode_InternFromString("_modules")))
        return NULL;
    tvar *mods = cdy_get_attr(tr, ml, str_modules);
    if (!mods)
        return NULL;
    long k = PyLong_AsLong(i->obj);
    if (mods->kind != TV_DICT || (k == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        cdy_tr_stop(tr, INDEX_MODULE_CONTAINER);
        return NULL;
    }
    if (k < 0)
        k += mods->n;
    if (k < 0 || k >= mods->n) {
        cdy_tr_stop(tr, MODULE_INDEX_RANGE, PyLong_AsLong(i->obj));
        return NULL;
    }
    return mods->items[k];
}

/* 1 if v is a non-empty list of int constants (no bools). */
static int int_list(const tvar *v)
{
    if (v->kind != TV_LIST || v->n == 0)
        return 0;
    for (int k = 0; k < v->n; k++)
        if (v->items[k]->kind != TV_CONST || !PyLong_CheckExact(v->items[k]->obj))
            return 0;
    return 1;
}

/* torch.tensor(l) of int list l: the int64 index tensor torch's indexing makes of it; NULL
 * when stopped. */
static tvar *index_tensor_of(tracer *tr, tvar *l)
{
    static PyObject *tensor_fn;
    if (!tensor_fn && !(tensor_fn = PyObject_GetAttrString(cdy_torch, "tensor"))) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    tvar *fn = cdy_wrap(tr, tensor_fn, NULL, 0);
    return fn ? cdy_call(tr, fn, &l, 1, NULL) : NULL;
}

/* Index i of a tensor with its int lists (x[[0, 2]], x[..., [-2], :]) made the index
 * tensors torch's indexing reads them as; i itself when it has none; NULL when stopped. */
static tvar *list_index(tracer *tr, tvar *i)
{
    if (int_list(i))
        return index_tensor_of(tr, i);
    if (i->kind != TV_TUPLE)
        return i;
    tvar **items = NULL;
    for (int k = 0; k < i->n; k++) {
        if (!int_list(i->items[k]))
            continue;
        if (!items && (items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)i->n)))
            memcpy(items, i->items, sizeof(tvar *) * (size_t)i->n);
        if (!items) {
            cdy_tr_stop(tr, OUT_OF_MEMORY);
            return NULL;
        }
        if (!(items[k] = index_tensor_of(tr, i->items[k])))
            return NULL;
    }
    return items ? cdy_tv_seq(tr, TV_TUPLE, items, i->n) : i;
}

/* BINARY_SUBSCR: containers with constant keys, tensor indexing (an extern),
 * constant folding. */
static int op_subscr(tracer *tr)
{
    tvar *i = pop(tr), *s = pop(tr);
    if (i->kind == TV_CONST && (s->kind == TV_TUPLE || s->kind == TV_LIST)) {
        if (PySlice_Check(i->obj)) {
            Py_ssize_t start, stop, step, n;
            if (PySlice_Unpack(i->obj, &start, &stop, &step) < 0)
                return cdy_tr_stop_exc(tr, RAISED_SLICE);
            n = PySlice_AdjustIndices(s->n, &start, &stop, step);
            tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
            for (Py_ssize_t k = 0; items && k < n; k++)
                items[k] = s->items[start + k * step];
            return push(tr, items ? cdy_tv_seq(tr, s->kind, items, (int)n) : NULL);
        }
        if (!PyLong_Check(i->obj))
            return cdy_tr_stop(tr, SEQ_INDEX_TYPE);
        long k = PyLong_AsLong(i->obj);
        if (k < 0)
            k += s->n;
        if (k < 0 || k >= s->n)
            return cdy_tr_stop(tr, SEQ_INDEX_RANGE);
        return push(tr, s->items[k]);
    }
    if (s->kind == TV_DICT) {
        tvar *m = cdy_tv_new(tr, TV_METHOD);
        if (!m || !(m->obj = cdy_tr_keep(tr, PyUnicode_FromString("__getitem__"))))
            return -1;
        m->self = s;
        tvar *args[2] = {s, i};
        return push(tr, cdy_call(tr, m, args, 2, NULL));
    }
    int by_tensor;
    tvar *st = cdy_optim_state_item(tr, s, i, &by_tensor);   /* optimizer.state[p] */
    if (by_tensor)
        return push(tr, st);
    tvar *ga = cdy_generic_alias(tr, s, i, &by_tensor);   /* cast(list[Tensor], x) */
    if (by_tensor)
        return push(tr, ga);
    if (s->kind == TV_INST)
        return push(tr, cdy_obj_special(tr, s, "__getitem__", &i, 1));
    if (s->kind == TV_OBJ && s->fixed && (i->kind == TV_CONST || (i->kind == TV_OBJ && i->fixed))) {
        PyObject *v = PyObject_GetItem(s->obj, i->obj);   /* an item of a fixed object */
        if (!v)
            return cdy_tr_stop_exc(tr, RAISED_SUBSCRIPT);
        tvar *r = cdy_fixed_value(tr, v);
        Py_DECREF(v);
        return push(tr, r);
    }
    if (s->kind == TV_OBJ && s->src && i->kind == TV_CONST &&
        (PyList_Check(s->obj) || PyDict_Check(s->obj) || PyTuple_Check(s->obj))) {
        PyObject *v = PyObject_GetItem(s->obj, i->obj);   /* a container read from the frame */
        if (!v)
            return cdy_tr_stop_exc(tr, RAISED_SUBSCRIPT);
        const cdy_src *src = cdy_src_step(tr, s->src, i->obj, 1);
        tvar *r = src ? cdy_wrap(tr, v, src, 1) : NULL;
        Py_DECREF(v);
        return push(tr, r);
    }
    if (s->kind == TV_OBJ && s->src && i->kind == TV_CONST && PyLong_CheckExact(i->obj) &&
        cdy_is_module_list(s->obj))
        return push(tr, module_list_item(tr, s, i));
    if (s->kind == TV_OBJ && s->src && i->kind == TV_CONST && PySlice_Check(i->obj) &&
        cdy_is_module_list(s->obj)) {   /* layers[:n]: its modules (iterated, indexed) */
        tvar *it = cdy_iterate(tr, s);
        tvar *l = it ? cdy_tv_seq(tr, TV_LIST, it->items, it->n) : NULL;
        if (!l)
            return -1;
        push(tr, l);
        push(tr, i);
        return op_subscr(tr);
    }
    PyObject *gi = s->kind == TV_OBJ && s->src ? _PyType_Lookup(Py_TYPE(s->obj), getitem_name()) : NULL;
    if (gi && PyFunction_Check(gi) && !PyObject_TypeCheck(s->obj, (PyTypeObject *)cdy_module_type)) {
        /* a user class's __getitem__, inlined (module containers: the operator path) */
        tvar *b = cdy_tv_new(tr, TV_BOUND), *args[1] = {i};
        if (!b)
            return -1;
        b->obj = gi;
        b->self = s;
        return push(tr, cdy_call(tr, b, args, 1, NULL));
    }
    PyObject *fn = cdy_operator_fn(27, "getitem");
    if (!fn)
        return cdy_tr_stop_exc(tr, PY_ERROR);
    if (s->kind == TV_TENSOR && !(i = list_index(tr, i)))
        return -1;
    tvar *args[2] = {s, i};
    return push(tr, cdy_call_operator(tr, fn, "[]", args, 2));
}

/* ---- containers --------------------------------------------------------------------- */

/* STORE_SUBSCR: container[key] = value on a list or dict the trace made. */
static int op_store_subscr(tracer *tr)
{
    tvar *k = pop(tr), *c = pop(tr), *v = pop(tr);
    if (c->kind == TV_TENSOR)
        return cdy_mut_setitem(tr, c, k, v);   /* functionalized (trace/mutate.c) */
    if (c->kind == TV_INST) {
        tvar *a[2] = {k, v};
        return cdy_obj_special(tr, c, "__setitem__", a, 2) ? 0 : -1;
    }
    if (c->kind == TV_DICT) {   /* a dict of the caller: written back after the graph */
        PyObject *key = cdy_key_of(k);
        return key ? cdy_dict_set(tr, c, key, v) : cdy_tr_stop(tr, DICT_KEY_NON_CONST);
    }
    if (c->kind == TV_LIST)
        return cdy_seq_setitem(tr, c, k, v);
    return cdy_tr_stop(tr, STORE_ITEM);
}

/* DELETE_SUBSCR: del c[k] on a dict, list or instance built in the frame. */
static int op_delete_subscr(tracer *tr)
{
    tvar *k = pop(tr), *c = pop(tr);
    if (c->kind == TV_INST)
        return cdy_obj_special(tr, c, "__delitem__", &k, 1) ? 0 : -1;
    return cdy_container_delitem(tr, c, k);
}

/* BUILD_SET n / SET_ADD i / SET_UPDATE i (semantic op sop; trace/sets.c). */
static int op_set(tracer *tr, int sop, int oparg)
{
    if (sop == CDY_SOP_BUILD_SET) {
        if (CDY_TR_CHECK(tr, oparg <= tr->sp, STACK_UNDERFLOW))
            return -1;
        tr->sp -= oparg;
        return push(tr, cdy_set_build(tr, &tr->stack[tr->sp], oparg));
    }
    tvar *v = pop(tr), *s = peek(tr, oparg);
    if (CDY_TR_CHECK(tr, s->kind == TV_SET, BAD_STACK_VALUE, "set"))
        return -1;
    return sop == CDY_SOP_SET_ADD ? cdy_set_add(tr, s, v) : cdy_set_update(tr, s, v);
}

/* UNPACK_EX counts: a, *b, c = iterable (before: low byte, after: high byte). */
static int op_unpack_ex(tracer *tr, int oparg)
{
    int before = oparg & 0xff, after = oparg >> 8;
    tvar *it = cdy_iterate(tr, pop(tr));
    if (!it)
        return -1;
    int n = it->n - it->pos;
    if (n < before + after)
        return cdy_tr_stop(tr, UNPACK_COUNT, n, before + after);
    tvar **x = it->items + it->pos;
    for (int i = n - 1; i >= n - after; i--)
        if (push(tr, x[i]))
            return -1;
    if (push(tr, cdy_tv_seq(tr, TV_LIST, x + before, n - before - after)))
        return -1;
    for (int i = before - 1; i >= 0; i--)
        if (push(tr, x[i]))
            return -1;
    return 0;
}

/* BUILD_TUPLE / BUILD_LIST n (a tuple of constants is a constant). */
static int op_build(tracer *tr, int n, int kind)
{
    if (CDY_TR_CHECK(tr, n <= tr->sp, STACK_UNDERFLOW))
        return -1;
    tvar **items = &tr->stack[tr->sp - n];
    tr->sp -= n;
    int all_const = 1;
    for (int i = 0; i < n; i++)
        all_const &= items[i]->kind == TV_CONST;
    if (kind == TV_TUPLE && all_const) {
        PyObject *t = PyTuple_New(n);
        for (int i = 0; t && i < n; i++)
            PyTuple_SET_ITEM(t, i, Py_NewRef(items[i]->obj));
        return push(tr, t ? cdy_tv_const(tr, t) : NULL);
    }
    return push(tr, cdy_tv_seq(tr, kind, items, n));
}

/* The index of a key equal to key among keys[0..n), -1 if none, -2 on an error. */
static int dict_key_index(PyObject **keys, int n, PyObject *key)
{
    for (int j = 0; j < n; j++) {
        int eq = keys[j] == key ? 1 : PyObject_RichCompareBool(keys[j], key, Py_EQ);
        if (eq)
            return eq < 0 ? -2 : j;
    }
    return -1;
}

/* BUILD_MAP n / BUILD_CONST_KEY_MAP n: a dict with constant keys. */
static int op_build_map(tracer *tr, int n, int const_keys)
{
    tvar *d = cdy_tv_new(tr, TV_DICT);
    tvar *keys = const_keys ? pop(tr) : NULL;
    if (!d)
        return -1;
    d->items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
    d->keys = cdy_arena_alloc(&tr->t->arena, sizeof(PyObject *) * (size_t)(n + 1));
    if (!d->items || !d->keys || n * (2 - const_keys) > tr->sp)
        return cdy_tr_stop(tr, BAD_DICT_DISPLAY);
    tvar **base = &tr->stack[tr->sp - n * (2 - const_keys)];
    int m = 0;
    for (int i = 0; i < n; i++) {
        tvar *k = const_keys ? NULL : base[2 * i];
        PyObject *key = const_keys ? PyTuple_GET_ITEM(keys->obj, i) : k->obj;
        if (!const_keys && k->kind != TV_CONST)
            return cdy_tr_stop(tr, DICT_KEY_NON_CONST);
        int j = dict_key_index(d->keys, m, key);
        if (j == -2)
            return cdy_tr_stop_exc(tr, PY_ERROR);
        if (j < 0)   /* a repeated key keeps its first place and takes the last value */
            d->keys[j = m++] = key;
        d->items[j] = const_keys ? base[i] : base[2 * i + 1];
    }
    d->n = m;
    tr->sp -= n * (2 - const_keys);
    return push(tr, d);
}

/* UNPACK_SEQUENCE n */
static int op_unpack(tracer *tr, int n)
{
    tvar *it = cdy_iterate(tr, pop(tr));
    if (!it)
        return -1;
    if (it->n - it->pos != n)
        return cdy_tr_stop(tr, UNPACK_COUNT, it->n - it->pos, n);
    for (int i = it->n - 1; i >= it->pos; i--)
        if (push(tr, it->items[i]))
            return -1;
    return 0;
}

/* 1 if v is None, 0 if not, -1 when unknown. */
static int is_none(tracer *tr, tvar *v)
{
    if (v->kind == TV_CONST || v->kind == TV_OBJ)
        return v->obj == Py_None;
    if (v->kind == TV_NULL)
        return cdy_tr_stop(tr, IS_NONE);
    return 0;
}

/* 1 if v is a mutable object the trace made (none of the caller's objects is it): an
 * object, container or function built here, a tensor an op made. */
static int made_here(const tvar *v)
{
    return !v->src && (v->kind == TV_INST || v->kind == TV_SET || v->kind == TV_LIST ||
                       v->kind == TV_DICT || v->kind == TV_PARTIAL || v->kind == TV_FUNC ||
                       v->kind == TV_TENSOR);
}

/* IS_OP: identity tests the trace can decide. */
static int op_is(tracer *tr, int invert)
{
    tvar *b = pop(tr), *a = pop(tr);
    int r;
    if (b->kind == TV_CONST && b->obj == Py_None)
        r = is_none(tr, a);
    else if (a->kind == TV_CONST && a->obj == Py_None)
        r = is_none(tr, b);
    else if (a == b)
        r = 1;
    else if (made_here(a) || made_here(b))
        r = 0;   /* an object the trace made is no other value */
    else if (a->src && b->src && a->kind == b->kind && (a->kind == TV_TENSOR || a->by_type || b->by_type))
        r = cdy_same_object(tr, a, b);   /* two of the caller's values: guarded either way */
    else if ((a->kind == TV_OBJ && a->fixed && b->src && (b->by_type || b->kind == TV_TENSOR)) ||
             (b->kind == TV_OBJ && b->fixed && a->src && (a->by_type || a->kind == TV_TENSOR)))
        r = cdy_is_fixed(tr, a->src ? a : b, a->src ? b : a);   /* identity not guarded yet */
    else if ((a->by_type || b->by_type) && a->obj && b->obj && Py_TYPE(a->obj) == Py_TYPE(b->obj))
        return cdy_tr_stop(tr, IS_BY_TYPE);
    else if ((a->kind == TV_OBJ || a->kind == TV_CONST) && (b->kind == TV_OBJ || b->kind == TV_CONST))
        r = a->obj == b->obj;   /* by type: different classes, never the same object */
    else if (a->kind != b->kind)
        r = 0;
    else
        return cdy_tr_stop(tr, IS_OP);
    if (r < 0)
        return -1;
    return push(tr, cdy_tv_const(tr, PyBool_FromLong(r != invert)));
}

/* CONTAINS_OP: `k in container` for constants and trace-made containers. */
static int op_contains(tracer *tr, int invert)
{
    tvar *c = pop(tr), *k = pop(tr);
    int r = -1;
    if (c->kind == TV_VIEW && c->pos == 0)
        c = c->self;                      /* `k in d.keys()` is `k in d` */
    else if (c->kind == TV_VIEW && !(c = cdy_view_list(tr, c)))
        return -1;
    if (c->kind == TV_INST) {
        tvar *b = cdy_obj_special(tr, c, "__contains__", &k, 1);
        int t = b ? cdy_truth(tr, b) : -1;
        return t < 0 ? -1 : push(tr, cdy_tv_const(tr, PyBool_FromLong(t != invert)));
    }
    if (c->kind == TV_SET) {
        tvar *b = cdy_set_method(tr, c, "__contains__", &k, 1, NULL);
        return b ? push(tr, cdy_tv_const(tr, PyBool_FromLong((b->obj == Py_True) != invert))) : -1;
    }
    if ((k->kind == TV_CONST || (k->kind == TV_OBJ && k->fixed)) &&
        (c->kind == TV_CONST || (c->kind == TV_OBJ && c->fixed)))
        r = PySequence_Contains(c->obj, k->obj);
    else if ((k->kind == TV_CONST || (k->kind == TV_OBJ && !k->by_type)) &&
             cdy_torch_global_seq(tr, c))   /* type(p) in _foreach_supported_types */
        r = PySequence_Contains(c->obj, k->obj);
    else if (cdy_key_of(k) && c->kind == TV_DICT) {
        r = cdy_dict_find(tr, c, cdy_key_of(k));
        if (r == -2)
            return -1;
        r = r >= 0;
    }
    else if (c->kind == TV_TUPLE || c->kind == TV_LIST) {
        r = 0;
        for (int i = 0; i < c->n && !r; i++) {
            tvar *it = c->items[i];
            int fixed_it = it->kind == TV_CONST || (it->kind == TV_OBJ && !it->by_type);
            int fixed_k = k->kind == TV_CONST || (k->kind == TV_OBJ && !k->by_type);
            if (it == k)
                r = 1;
            else if (fixed_it && fixed_k)   /* values fixed by their guards (identity, value) */
                r = PyObject_RichCompareBool(it->obj, k->obj, Py_EQ) == 1;
            else if (it->kind == TV_OBJ || k->kind == TV_OBJ)
                return cdy_tr_stop(tr, IN_BY_TYPE);
            else if (it->kind == TV_TENSOR || k->kind == TV_TENSOR)
                return cdy_tr_stop(tr, IN_TENSORS);
        }
    }
    else if (k->kind == TV_CONST && c->kind == TV_OBJ && c->src)
        r = cdy_contains_guarded(tr, c, k);   /* a dict or Mapping read from the frame */
    if (r == -2)
        return -1;
    if (r < 0) {
        PyErr_Clear();
        return cdy_tr_stop(tr, IN_OP);
    }
    return push(tr, cdy_tv_const(tr, PyBool_FromLong(r != invert)));
}

/* str / repr / ascii (conv 1 / 2 / 3) of x, a new reference (x itself for 0); NULL on error. */
static PyObject *convert(PyObject *x, int conv)
{
    return conv == 1 ? PyObject_Str(x) : conv == 2 ? PyObject_Repr(x)
         : conv == 3 ? PyObject_ASCII(x) : Py_NewRef(x);
}

/* CONVERT_VALUE conv (3.13's f-string conversion) of a constant. */
static int op_convert(tracer *tr, int conv)
{
    tvar *v = pop(tr);
    if (v->kind != TV_CONST)
        return cdy_tr_stop(tr, FSTRING_VALUE);
    PyObject *x = convert(v->obj, conv);
    return x ? push(tr, cdy_tv_const(tr, x)) : cdy_tr_stop_exc(tr, RAISED_FORMAT);
}

/* FORMAT_VALUE flags (conversion flags & 3, a spec on top when flags & 4) on
 * constants (f-strings). */
static int op_format(tracer *tr, int oparg)
{
    tvar *spec = (oparg & 4) ? pop(tr) : NULL, *v = pop(tr);
    if (v->kind != TV_CONST || (spec && spec->kind != TV_CONST))
        return cdy_tr_stop(tr, FSTRING_VALUE);
    PyObject *x = convert(v->obj, oparg & 3);
    PyObject *s = x ? PyObject_Format(x, spec ? spec->obj : NULL) : NULL;
    Py_XDECREF(x);
    if (!s)
        return cdy_tr_stop_exc(tr, RAISED_FORMAT);
    return push(tr, cdy_tv_const(tr, s));
}

/* ---- return ----------------------------------------------------------------------- */

/* Describe v as the return structure; tensors made by the graph become outputs. */
static cdy_ret *make_ret(tracer *tr, tvar *v)
{
    cdy_trace *t = tr->t;
    cdy_ret *r = cdy_arena_alloc(&t->arena, sizeof(cdy_ret));
    if (!r) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    switch (v->kind) {
    case TV_TENSOR:
        if (cdy_mut_is_input(tr, v)) {   /* a mutated input: the caller's tensor, written back */
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
    case TV_INST:
        return cdy_obj_ret(tr, v, make_ret);
    case TV_SET:
    case TV_PARTIAL:
        return cdy_made_ret(tr, v, make_ret);
    case TV_TUPLE:
    case TV_LIST:
    case TV_DICT:
        if (v->src && v->src->kind != CDY_SRC_DEREF) {   /* the caller's own object */
            r->kind = CDY_RET_SOURCE;
            r->src = v->src;
            return r;
        }
        if ((v->kind == TV_DICT && v->obj) || (v->kind == TV_TUPLE && cdy_is_namedtuple_class(v->obj)))
            return cdy_made_ret(tr, v, make_ret);
        r->kind = v->kind == TV_TUPLE ? CDY_RET_TUPLE : v->kind == TV_LIST ? CDY_RET_LIST
                                                                           : CDY_RET_DICT;
        r->n = v->n;
        r->keys = v->keys;
        r->items = cdy_arena_alloc(&t->arena, sizeof(cdy_ret *) * (size_t)(v->n + 1));
        if (!r->items) {
            cdy_tr_stop(tr, OUT_OF_MEMORY);
            return NULL;
        }
        for (int i = 0; i < v->n; i++)
            if (!(r->items[i] = make_ret(tr, v->items[i])))
                return NULL;
        return r;
    default:
        cdy_tr_stop(tr, RETURN_VALUE_KIND);
        return NULL;
    }
}


/* make_ret for trace/breaks.c: describe v for the transformed code. */
cdy_ret *cdy_tr_make_ret(tracer *tr, tvar *v)
{
    return make_ret(tr, v);
}

/* RETURN_VALUE: an inlined frame hands its value back; the top frame ends the trace. */
static int op_return(tracer *tr)
{
    tvar *v = pop(tr);
    if (tr->parent && tr->yielded) {   /* a generator: the caller iterates its values */
        tr->retval = cdy_tv_seq(tr, TV_ITER, tr->yielded->items, tr->yielded->n);
        return tr->retval ? 1 : -1;
    }
    if (tr->parent) {
        tr->retval = v;
        return 1;
    }
    cdy_trace *t = tr->t;
    if (inject.kind == CDY_INJECT_NO_RETURN)
        return 1;
    t->graph.outputs = cdy_arena_alloc(&t->arena, sizeof(int) * (size_t)(cdy_tv_count_tensors(v) +
                                                                         cdy_mut_extra_outputs(tr) + 1));
    if (!t->graph.outputs)
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    t->return_line = PyCode_Addr2Line(tr->co, tr->pc * 2);
    t->ret = make_ret(tr, v);
    return t->ret && !cdy_mut_finish(tr, make_ret) ? 1 : -1;
}

/* ---- the interpreter loop -------------------------------------------------------------- */

/* The name of raw opcode op for messages ("?" when the table does not know it). */
static const char *opcode_name(int op)
{
    const char *n = cdy_pv_opname(op);
    return n ? n : "?";
}

/* Jump to code unit target; -1 if out of range. */
static int jump(tracer *tr, int target, int *next)
{
    if (CDY_TR_CHECK(tr, target >= 0 && target < tr->ncode, BAD_JUMP))
        return -1;
    *next = target;
    return 0;
}

/* POP_JUMP_IF_{FALSE,TRUE,NONE,NOT_NONE}: pop and go to s->target when it holds. */
static int op_pop_jump(tracer *tr, const cdy_sinstr *s, int *next)
{
    int on_none = s->sop == CDY_SOP_POP_JUMP_IF_NONE || s->sop == CDY_SOP_POP_JUMP_IF_NOT_NONE;
    int when = s->sop == CDY_SOP_POP_JUMP_IF_TRUE || s->sop == CDY_SOP_POP_JUMP_IF_NONE;
    tvar *v = pop(tr);
    int c = on_none ? is_none(tr, v) : cdy_truth(tr, v);
    if (c < 0)
        return -1;
    return c == when ? jump(tr, s->target, next) : 0;
}

/* FOR_ITER: next item, or pop the iterator and continue at target (past the loop). */
static int op_for_iter(tracer *tr, int target, int *next)
{
    tvar *it = peek(tr, 1);
    if (it->kind != TV_ITER)
        return cdy_tr_stop(tr, FOR_ITER_NON_ITER);
    if (it->self && it->self->kind == TV_LIST) {   /* a list's iterator sees its changes */
        it->items = it->self->items;
        it->n = it->self->n;
    }
    if (it->pos < it->n)
        return push(tr, it->items[it->pos++]);
    pop(tr);
    return jump(tr, target, next);
}

/* KW_NAMES_TOS (3.13's CALL_KW): the keyword names are the constant tuple on top. */
static int op_kw_names_tos(tracer *tr)
{
    tvar *names = pop(tr);
    if (CDY_TR_CHECK(tr, names->kind == TV_CONST && PyTuple_Check(names->obj), BAD_KW_NAMES))
        return -1;
    tr->kwnames = names->obj;
    return 0;
}

/* TO_BOOL: the truth of the top value, as a constant. */
static int op_to_bool(tracer *tr)
{
    int c = cdy_truth(tr, pop(tr));
    return c < 0 ? -1 : push(tr, cdy_tv_const(tr, PyBool_FromLong(c)));
}

/* LIST_EXTEND / LIST_APPEND (sop) arg: pop v; extend / append the list arg items down. */
static int op_list_add(tracer *tr, int sop, int oparg)
{
    tvar *v = pop(tr), *l = peek(tr, oparg);
    tvar *src = sop == CDY_SOP_LIST_APPEND ? cdy_tv_seq(tr, TV_TUPLE, &v, 1) : cdy_iterate(tr, v);
    if (!src || l->kind != TV_LIST)
        return cdy_tr_stop(tr, LIST_EXTEND);
    int n = l->n + src->n - src->pos;
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
    if (!items)
        return -1;
    memcpy(items, l->items, sizeof(tvar *) * (size_t)l->n);
    memcpy(items + l->n, src->items + src->pos, sizeof(tvar *) * (size_t)(src->n - src->pos));
    l->items = items;
    l->n = n;
    return 0;
}

/* DICT_MERGE (f(**d): merge d into the dict being built) / DICT_UPDATE ({..., **d}). */
static int op_dict_merge(tracer *tr, int oparg)
{
    tvar *src = pop(tr), *dst = peek(tr, oparg);
    if (src->kind != TV_DICT || dst->kind != TV_DICT || dst->src)
        return cdy_tr_stop(tr, DOUBLE_STAR_MAPPING);
    for (int i = 0; i < src->n; i++) {
        tvar *k = cdy_tv_const(tr, Py_NewRef(src->keys[i]));
        if (!k || push(tr, src->items[i]) || push(tr, dst) || push(tr, k) || op_store_subscr(tr))
            return -1;
    }
    return 0;
}

/* BUILD_SLICE n (2 or 3) of constant bounds. */
static int op_build_slice(tracer *tr, int n)
{
    tvar *c = n == 3 ? pop(tr) : NULL, *b = pop(tr), *a = pop(tr);
    if (a->kind != TV_CONST || b->kind != TV_CONST || (c && c->kind != TV_CONST))
        return cdy_tr_stop(tr, SLICE_BOUNDS);
    return push(tr, cdy_tv_const(tr, PySlice_New(a->obj, b->obj, c ? c->obj : NULL)));
}

/* SWAP n: exchange the top item with the n-th. */
static int op_swap(tracer *tr, int n)
{
    if (CDY_TR_CHECK(tr, n >= 1 && n <= tr->sp, STACK_UNDERFLOW))
        return -1;
    tvar *a = tr->stack[tr->sp - 1];
    tr->stack[tr->sp - 1] = tr->stack[tr->sp - n];
    tr->stack[tr->sp - n] = a;
    return 0;
}

/* BUILD_STRING n: the concatenation of n constant strings. */
static int op_build_string(tracer *tr, int n)
{
    PyObject *parts = PyTuple_New(n);
    for (int i = n - 1; parts && i >= 0; i--) {
        tvar *s = pop(tr);
        if (s->kind != TV_CONST || !PyUnicode_Check(s->obj)) {
            Py_DECREF(parts);
            return cdy_tr_stop(tr, FSTRING_PART);
        }
        PyTuple_SET_ITEM(parts, i, Py_NewRef(s->obj));
    }
    PyObject *empty = PyUnicode_FromString("");
    PyObject *r = parts && empty ? PyUnicode_Join(empty, parts) : NULL;
    Py_XDECREF(parts);
    Py_XDECREF(empty);
    return push(tr, r ? cdy_tv_const(tr, r) : NULL);
}

/* JUMP_IF_FALSE_OR_POP / JUMP_IF_TRUE_OR_POP (3.11). */
static int op_jump_or_pop(tracer *tr, const cdy_sinstr *s, int *next)
{
    int c = cdy_truth(tr, peek(tr, 1));
    if (c < 0)
        return -1;
    if (c == (s->sop == CDY_SOP_JUMP_IF_TRUE_OR_POP))
        return jump(tr, s->target, next);
    pop(tr);
    return 0;
}

/* YIELD_VALUE: collect the value; the generator is resumed with None. */
static int op_yield(tracer *tr)
{
    tvar *v = pop(tr), *y = tr->yielded;
    if (!y)
        return cdy_tr_stop(tr, YIELD);
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(y->n + 1));
    if (!items)
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    if (y->n)
        memcpy(items, y->items, sizeof(tvar *) * (size_t)y->n);
    items[y->n++] = v;
    y->items = items;
    return push(tr, cdy_tv_const(tr, Py_NewRef(Py_None)));
}

/* SEND (yield from, in a generator run to its end): pop the value sent (None:
 * the generator is resumed with None); the iterator's next item (YIELD_VALUE
 * collects it), or, when it is exhausted, its value (None) at s->target: in
 * place of the iterator (3.11), or above it for END_SEND (s->arg2, 3.12+). */
static int op_send(tracer *tr, const cdy_sinstr *s, int *next)
{
    pop(tr);
    tvar *it = peek(tr, 1);
    if (it->kind != TV_ITER)
        return cdy_tr_stop(tr, FOR_ITER_NON_ITER);
    if (it->pos < it->n)
        return push(tr, it->items[it->pos++]);
    tvar *none = cdy_tv_const(tr, Py_NewRef(Py_None));
    if (!none)
        return -1;
    if (s->arg2 ? push(tr, none) : (tr->stack[tr->sp - 1] = none, 0))
        return -1;
    return jump(tr, s->target, next);
}

/* Loads, stores and stack moves of semantic op s; 0, -1, or 2: not one of them. */
static int step_data(tracer *tr, const cdy_sinstr *s)
{
    PyObject *names = tr->co->co_names;
    int a = s->arg;
    switch (s->sop) {
    case CDY_SOP_NOP: case CDY_SOP_COPY_FREE_VARS:
        return 0;
    case CDY_SOP_MAKE_CELL:
        return cell_of(tr, a) ? 0 : -1;
    case CDY_SOP_PUSH_NULL:
        return push(tr, &tr->null_var);
    case CDY_SOP_POP_TOP:
        pop(tr);
        return 0;
    case CDY_SOP_COPY:
        return push(tr, peek(tr, a));
    case CDY_SOP_SWAP:
        return op_swap(tr, a);
    case CDY_SOP_LOAD_FAST:
        return op_load_fast(tr, a);
    case CDY_SOP_STORE_FAST:
        if (CDY_TR_CHECK(tr, a < tr->nlocals, BAD_LOCAL_SLOT))
            return -1;
        tr->locals[a] = pop(tr);
        return 0;
    case CDY_SOP_STORE_DEREF:
        return op_store_deref(tr, a, pop(tr));
    case CDY_SOP_DELETE_DEREF:
        return op_store_deref(tr, a, NULL);
    case CDY_SOP_DELETE_FAST:   /* unbound (NULL would read the frame's argument again) */
        if (CDY_TR_CHECK(tr, a < tr->nlocals, BAD_LOCAL_SLOT))
            return -1;
        tr->locals[a] = &tr->null_var;
        return 0;
    case CDY_SOP_LOAD_FAST_AND_CLEAR:
        return op_load_fast_and_clear(tr, a);
    case CDY_SOP_LOAD_CONST:
        return push(tr, cdy_tv_const(tr, Py_NewRef(PyTuple_GET_ITEM(tr->co->co_consts, a))));
    case CDY_SOP_LOAD_GLOBAL:
        return op_load_global(tr, a);
    case CDY_SOP_LOAD_DEREF:
        return op_load_deref(tr, a);
    case CDY_SOP_LOAD_CLOSURE:
        return op_load_closure(tr, a);
    case CDY_SOP_LOAD_ATTR:
        return push(tr, cdy_get_attr(tr, pop(tr), PyTuple_GET_ITEM(names, a)));
    case CDY_SOP_LOAD_METHOD:
        return op_load_method(tr, PyTuple_GET_ITEM(names, a));
    case CDY_SOP_LOAD_SUPER_ATTR:
        return op_load_super_attr(tr, a, s->arg2);
    case CDY_SOP_STORE_ATTR: {   /* replayed after the graph (trace/mutate.c) */
        tvar *obj = pop(tr), *v = pop(tr);
        return cdy_mut_store_attr(tr, obj, PyTuple_GET_ITEM(names, a), v);
    }
    case CDY_SOP_IMPORT_NAME:
        return op_import_name(tr, a);
    case CDY_SOP_IMPORT_FROM:   /* from m import name: the module stays on the stack */
        return push(tr, cdy_get_attr(tr, peek(tr, 1), PyTuple_GET_ITEM(names, a)));
    default:
        return 2;
    }
}

/* Calls, operators and containers of semantic op s; 0, -1, or 2: not one of them. */
static int step_ops(tracer *tr, const cdy_sinstr *s)
{
    int a = s->arg;
    switch (s->sop) {
    case CDY_SOP_KW_NAMES:
        tr->kwnames = PyTuple_GET_ITEM(tr->co->co_consts, a);
        return 0;
    case CDY_SOP_KW_NAMES_TOS:
        return op_kw_names_tos(tr);
    case CDY_SOP_CALL:
        return op_call(tr, a);
    case CDY_SOP_CALL_FUNCTION_EX:
        return op_call_ex(tr, a);
    case CDY_SOP_BINARY_OP:
        return op_binary(tr, a);
    case CDY_SOP_COMPARE_OP:
        return op_compare(tr, a);
    case CDY_SOP_IS_OP:
        return op_is(tr, a);
    case CDY_SOP_CONTAINS_OP:
        return op_contains(tr, a);
    case CDY_SOP_TO_BOOL:
        return op_to_bool(tr);
    case CDY_SOP_UNARY_NEGATIVE: case CDY_SOP_UNARY_NOT: case CDY_SOP_UNARY_INVERT:
    case CDY_SOP_UNARY_POSITIVE:
        return op_unary(tr, s->sop);
    case CDY_SOP_BINARY_SUBSCR:
        return op_subscr(tr);
    case CDY_SOP_STORE_SUBSCR:
        return op_store_subscr(tr);
    case CDY_SOP_BUILD_SLICE:
        return op_build_slice(tr, a);
    case CDY_SOP_BUILD_TUPLE:
        return op_build(tr, a, TV_TUPLE);
    case CDY_SOP_BUILD_LIST:
        return op_build(tr, a, TV_LIST);
    case CDY_SOP_BUILD_MAP:
        return op_build_map(tr, a, 0);
    case CDY_SOP_BUILD_CONST_KEY_MAP:
        return op_build_map(tr, a, 1);
    case CDY_SOP_BUILD_STRING:
        return op_build_string(tr, a);
    case CDY_SOP_LIST_TO_TUPLE: {
        tvar *l = pop(tr);
        return push(tr, l->kind == TV_LIST ? cdy_tv_seq(tr, TV_TUPLE, l->items, l->n) : NULL);
    }
    case CDY_SOP_LIST_EXTEND: case CDY_SOP_LIST_APPEND:
        return op_list_add(tr, s->sop, a);
    case CDY_SOP_DICT_MERGE: case CDY_SOP_DICT_UPDATE:
        return op_dict_merge(tr, a);
    case CDY_SOP_MAP_ADD: {   /* a dict display of many items: d[k] = v, d below them */
        tvar *v = pop(tr), *k = pop(tr), *d = peek(tr, a);
        return push(tr, v) || push(tr, d) || push(tr, k) ? -1 : op_store_subscr(tr);
    }
    case CDY_SOP_UNPACK_SEQUENCE:
        return op_unpack(tr, a);
    case CDY_SOP_UNPACK_EX:
        return op_unpack_ex(tr, a);
    case CDY_SOP_DELETE_SUBSCR:
        return op_delete_subscr(tr);
    case CDY_SOP_DELETE_ATTR: {   /* del obj.name: an object built in the frame */
        tvar *o = pop(tr);
        if (o->kind != TV_INST)
            return cdy_tr_stop(tr, DELETE_ATTR);
        return cdy_obj_delattr(tr, o, PyTuple_GET_ITEM(tr->co->co_names, a));
    }
    case CDY_SOP_BUILD_SET: case CDY_SOP_SET_ADD: case CDY_SOP_SET_UPDATE:
        return op_set(tr, s->sop, a);
    case CDY_SOP_LOAD_ASSERTION_ERROR:
        return push(tr, cdy_wrap(tr, PyExc_AssertionError, NULL, 0));
    case CDY_SOP_FORMAT_VALUE:
        return op_format(tr, a);
    case CDY_SOP_MAKE_FUNCTION:
        return op_make_function(tr, a);
    case CDY_SOP_SET_FUNCTION_ATTRIBUTE:
        return op_set_function_attribute(tr, a);
    case CDY_SOP_CONVERT_VALUE:
        return op_convert(tr, a);
    default:
        return 2;
    }
}

/* Control flow of semantic op s (sets *next); 1 = returned, 0, -1, or 2: not one of them. */
static int step_flow(tracer *tr, const cdy_sinstr *s, int *next)
{
    switch (s->sop) {
    case CDY_SOP_GET_ITER:
        return push(tr, cdy_iterate(tr, pop(tr)));
    case CDY_SOP_FOR_ITER:
        return op_for_iter(tr, s->target, next);
    case CDY_SOP_JUMP:
        return jump(tr, s->target, next);
    case CDY_SOP_POP_JUMP_IF_FALSE: case CDY_SOP_POP_JUMP_IF_TRUE:
    case CDY_SOP_POP_JUMP_IF_NONE: case CDY_SOP_POP_JUMP_IF_NOT_NONE:
        return op_pop_jump(tr, s, next);
    case CDY_SOP_JUMP_IF_FALSE_OR_POP: case CDY_SOP_JUMP_IF_TRUE_OR_POP:
        return op_jump_or_pop(tr, s, next);
    case CDY_SOP_RETURN_VALUE:
        return op_return(tr);
    case CDY_SOP_RETURN_GENERATOR:   /* a generator run to the end: its first POP_TOP eats this */
        if (!tr->yielded)
            return cdy_tr_stop(tr, GENERATOR);
        return push(tr, cdy_tv_const(tr, Py_NewRef(Py_None)));
    case CDY_SOP_YIELD_VALUE:
        return op_yield(tr);
    case CDY_SOP_GET_YIELD_FROM_ITER:   /* yield from x: x's items, one SEND at a time */
        return push(tr, cdy_iterate(tr, pop(tr)));
    case CDY_SOP_SEND:
        return op_send(tr, s, next);
    case CDY_SOP_BEFORE_WITH:
        return cdy_op_before_with(tr);
    case CDY_SOP_PUSH_EXC_INFO:
        return cdy_exc_push_info(tr);
    case CDY_SOP_POP_EXCEPT:
        return cdy_exc_pop_except(tr);
    case CDY_SOP_CHECK_EXC_MATCH:
        return cdy_exc_check_match(tr);
    case CDY_SOP_RAISE_VARARGS:
        return cdy_exc_raise_varargs(tr, s->arg);
    case CDY_SOP_RERAISE:
        return cdy_exc_reraise(tr, s->arg);
    default:
        return 2;
    }
}

/* Execute semantic op s of the raw instruction d; sets *next.  1 = returned,
 * 0 = go on, -1 = stopped.  A semantic op without a handler stops the trace
 * (OPCODE, naming the raw instruction): a graph break, never a crash. */
static int step_sx(tracer *tr, const cdy_pv_instr *d, const cdy_sinstr *s, int *next);

/* step with the symbolic ints' hook around it (trace/symint.c). */
static int step(tracer *tr, const cdy_pv_instr *d, const cdy_sinstr *s, int *next)
{
    cdy_sx_ctx ctx;
    cdy_sx_pre(tr, s->sop, s->arg, &ctx);
    int r = step_sx(tr, d, s, next);
    cdy_sx_post(tr, &ctx, r);
    return r;
}

/* One semantic op s of d (see step). */
static int step_sx(tracer *tr, const cdy_pv_instr *d, const cdy_sinstr *s, int *next)
{
    int r = step_data(tr, s);
    if (r == 2)
        r = step_ops(tr, s);
    if (r == 2)
        r = step_flow(tr, s, next);
    if (r != 2)
        return r;
    char name[64];
    if (s->sop == CDY_SOP_CALL_INTRINSIC_1 || s->sop == CDY_SOP_CALL_INTRINSIC_2)
        snprintf(name, sizeof(name), "%s %d", opcode_name(d->op), s->arg);
    else
        snprintf(name, sizeof(name), "%s", opcode_name(d->op));
    return cdy_tr_stop(tr, OPCODE, name);
}

/* After instruction op failed or stopped: a failure with no recorded stop
 * (a bug: some path forgot its reason) becomes STEP_FAILED, with the pending
 * Python exception's text if there is one, so that no trace ends "failed"
 * without a reason, or "succeeded" after a failure.  -1. */
static int step_failed(tracer *tr, int op)
{
    if (cdy_tr_stopped(tr))
        return -1;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    CDY_ASSERT(inject.kind == CDY_INJECT_STEP, "an opcode failed without recording a stop");
    if (!et)
        return cdy_tr_stop(tr, STEP_FAILED, opcode_name(op));
    PyErr_Restore(et, ev, tb);
    return cdy_tr_stop_exc(tr, STEP_FAILED, opcode_name(op));
}

/* Run the semantic ops of decoded instruction d; *next is where to go on.
 * 1 = returned, 0 = go on, -1 = failed or stopped (the caller unwinds or
 * reports it). */
static int run_instr(tracer *tr, const cdy_pv_instr *d, int *next)
{
    if (!d->nsops)
        return cdy_tr_stop(tr, OPCODE, opcode_name(d->op));
    if (inject.kind == CDY_INJECT_STEP && d->op == inject.op)
        return -1;
    for (int i = 0; i < d->nsops; i++) {
        int r = step(tr, d, &d->sops[i], next);
        if (r < 0 || cdy_tr_stopped(tr))
            return -1;
        if (r)
            return r;
    }
    return 0;
}

/* See trace.h: decode the instruction k instructions after the current one. */
int cdy_tr_peek_instr(const tracer *tr, int k, cdy_pv_instr *out)
{
    cdy_pv_code c = {tr->co, tr->code, tr->ncode};
    int pc = tr->pc_start;
    if (cdy_pv_decode(&c, pc, out))
        return -1;
    for (int i = 0; i < k; i++)
        if (cdy_pv_decode(&c, out->next, out))
            return -1;
    return 0;
}

/* End the trace before the top frame's instruction d, the break it resumes
 * after (trace/breaks.c); an instruction ending in TO_BOOL (3.13's COMPARE_OP
 * with its bool flag) runs its other ops first.  0, or -1 when stopped. */
static int break_here(tracer *tr, const cdy_pv_instr *d)
{
    if (d->nsops > 1 && d->sops[d->nsops - 1].sop == CDY_SOP_TO_BOOL) {
        cdy_pv_instr head = *d;
        int next = d->next;
        head.nsops--;
        if (run_instr(tr, &head, &next))
            return step_failed(tr, d->op);
    }
    return cdy_brk_capture(tr, d) ? -1 : 0;
}

/* Run tr's code from the start until it returns (0) or the trace stops (-1). */
int cdy_tr_run_frame(tracer *tr)
{
    tr->bytes = cdy_tr_keep(tr, PyCode_GetCode(tr->co));
    if (!tr->bytes)
        return cdy_tr_stop_exc(tr, READ_BYTECODE);
    tr->code = (const unsigned char *)PyBytes_AS_STRING(tr->bytes);
    tr->ncode = (int)(PyBytes_GET_SIZE(tr->bytes) / 2);
    tr->stack_cap = tr->co->co_stacksize + 8;
    tr->stack = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)tr->stack_cap);
    if (!tr->stack)
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    cdy_pv_code c = {tr->co, tr->code, tr->ncode};
    cdy_pv_instr d;
    int pc = 0;
    for (int count = 0; count < MAX_INSTRUCTIONS; count++) {
        if (CDY_TR_CHECK(tr, cdy_pv_decode(&c, pc, &d) == 0, RAN_OFF_END))
            return -1;
        tr->pc = d.pc;
        tr->pc_start = d.start;
        tr->ninstr++;
        if (!tr->parent && tr->t->break_at_count == tr->ninstr && tr->t->break_at_pc == d.start)
            return break_here(tr, &d);
        int next = d.next;
        tr->sp_instr = tr->sp;
        int r = run_instr(tr, &d, &next);
        if ((r < 0 || cdy_tr_stopped(tr)) && cdy_exc_unwind(tr, &next) == 0) {
            pc = next;   /* an exception the frame catches: on in its handler */
            continue;
        }
        if (r < 0 || cdy_tr_stopped(tr))
            return step_failed(tr, d.op);
        if (r)
            return 0;
        pc = next;
    }
    return cdy_tr_stop(tr, TRACE_TOO_LONG, MAX_INSTRUCTIONS);
}

/* One-time lookups of torch objects; 0 or -1. */
static int trace_init(void)
{
    return cdy_vars_init() || cdy_calls_init() || cdy_libops_init() ||
           cdy_callables_init(cdy_torch) ? -1 : 0;
}

/* Input sources in input order: the source of each graph input's guard. */
static void collect_input_srcs(cdy_trace *t)
{
    t->input_srcs = cdy_arena_alloc(&t->arena, sizeof(cdy_src) * (size_t)(t->graph.ninputs + 1));
    for (int i = 0, k = 0; t->input_srcs && i < t->guards.n; i++)
        if (t->guards.items[i].kind == CDY_GUARD_TENSOR && k < t->graph.ninputs)
            t->input_srcs[k++] = t->guards.items[i].src;
}

/* Guard that torch.is_grad_enabled() stays `enabled` (once per trace); see trace/record.h. */
int cdy_trace_guard_grad_mode(cdy_trace *t, int enabled)
{
    if (t->grad_guarded)
        return 0;
    PyObject *fn = PyObject_GetAttrString(cdy_torch, "is_grad_enabled");
    cdy_src none = {0};
    cdy_guard *g = fn ? cdy_guards_add(&t->guards, CDY_GUARD_GRAD_MODE, &none, "grad mode") : NULL;
    if (!g) {
        Py_XDECREF(fn);
        return -1;
    }
    g->requires_grad = enabled;
    g->expect = fn;
    t->grad_guarded = 1;
    return 0;
}

/* Guard that torch.is_grad_enabled() stays `enabled` (once per trace); 0 or -1. */
int cdy_guard_grad_mode(tracer *tr, int enabled)
{
    return cdy_trace_guard_grad_mode(tr->t, enabled) ? cdy_tr_stop_exc(tr, PY_ERROR) : 0;
}

/* Guard global state `which` at its current value; see trace.h. */
int cdy_guard_state(tracer *tr, int which)
{
    cdy_guards *gs = &tr->t->guards;
    for (int i = 0; i < gs->n; i++)
        if (gs->items[i].kind == CDY_GUARD_STATE && gs->items[i].ndim == which)
            return 0;
    cdy_src none = {0};
    static const char *names[] = {"torch.get_default_dtype()", "the autocast state",
                                  "the torch function / dispatch mode stack"};
    cdy_guard *g = cdy_guards_add(gs, CDY_GUARD_STATE, &none, names[which]);
    if (!g)
        return cdy_tr_stop_exc(tr, PY_ERROR);
    g->ndim = which;
    g->sizes[0] = cdy_state_read(which);
    return 0;
}

/* 1 if node v's floating dtype may be torch's default dtype: none of its
 * tensor arguments is floating (a factory without dtype=, an integer tensor
 * with a Python float, true division or exp of integers, torch.tensor of
 * floats, ...).  Conservative: an explicit cast of an integer counts too. */
static int dtype_from_default(const cdy_graph *g, const cdy_value *v)
{
    if (v->kind != CDY_VAL_NODE || !cdy_dtype_table[v->meta.dtype].is_float)
        return 0;
    for (int i = 0; i < v->nargs; i++) {
        const cdy_value *a = &g->values[v->args[i]];
        if (a->kind != CDY_VAL_SCALAR && cdy_dtype_table[a->meta.dtype].is_float)
            return 0;
    }
    return 1;
}

/* Guard the global state the finished trace depends on: no torch function
 * or dispatch mode where it has a node; the default dtype where a node's
 * dtype may come from it; autocast where a node runs through
 * torch (an extern: autocast changes the dtypes of matmul, linear, conv, ...
 * and their composites) or whose dtypes autocast changes (autocast.c).  Under
 * CPU autocast a trace with an extern autocast.c did not cast for stops (the
 * frame runs eagerly, its entry guarded on the autocast state).  0 or -1. */
static int guard_global_state(tracer *tr)
{
    const cdy_graph *g = &tr->t->graph;
    int dflt = 0, ext = 0, nodes = 0;
    for (int v = 0; v < g->nvalues; v++) {
        ext |= cdy_value_is_extern(&g->values[v]);
        nodes |= g->values[v].kind == CDY_VAL_NODE;
        dflt |= dtype_from_default(g, &g->values[v]);
    }
    if (nodes && cdy_guard_state(tr, CDY_STATE_MODES))   /* a mode would see every op */
        return -1;
    if (dflt && cdy_guard_state(tr, CDY_STATE_DEFAULT_DTYPE))
        return -1;
    if (!ext && !tr->t->autocast_dep)
        return 0;
    if (cdy_guard_state(tr, CDY_STATE_AUTOCAST))
        return -1;
    if (ext && tr->t->autocast_unhandled)   /* set only under autocast */
        return cdy_tr_stop(tr, AUTOCAST_OPS, tr->t->autocast_unhandled);
    return 0;
}

/* Guard grad mode when an input requires grad (it is off: see wrap_tensor). */
static int guard_grad_mode(tracer *tr)
{
    return tr->t->any_requires_grad ? cdy_guard_grad_mode(tr, tr->t->grad_enabled) : 0;
}

/* The stage boundary after tracing: a graph that fails cdy_graph_check is
 * an internal error (abort in debug builds, GRAPH_INVALID stop in release). */
static void check_graph(tracer *tr)
{
    cdy_trace *t = tr->t;
    char err[256];
    if (t->status != CDY_TRACE_OK)
        return;
    if (inject.kind == CDY_INJECT_GRAPH && t->graph.noutputs > 0)
        t->graph.outputs[0] = t->graph.nvalues;
    if (!cdy_graph_check(&t->graph, err, sizeof(err)))
        return;
    CDY_ASSERT(inject.kind == CDY_INJECT_GRAPH, "the traced graph is invalid");
    cdy_tr_stop(tr, GRAPH_INVALID, err);
}

/* One trace of code from its start (cdy_trace_run traces again to resume after a break). */
static void trace_once(cdy_trace *t, PyCodeObject *code, PyObject *const *locals, PyObject *globals,
                       PyObject *builtins, PyObject *closure)
{
    tracer tr;
    memset(&tr, 0, sizeof(tr));
    tr.t = t;
    tr.co = code;
    tr.null_var.kind = TV_NULL;
    tr.guard_globals = 1;
    t->status = CDY_TRACE_OK;
    t->top_code = code;
    t->keep = PyList_New(0);
    if (!t->keep || trace_init()) {
        cdy_tr_stop_exc(&tr, TRACER_INIT);
        return;
    }
    PyObject *ge = PyObject_CallMethod(cdy_torch, "is_grad_enabled", NULL);
    t->grad_enabled = ge != Py_False;
    Py_XDECREF(ge);
    t->autocast_entry = t->autocast_state = cdy_state_read(CDY_STATE_AUTOCAST);
    t->autocast_on = t->autocast_state & 1;
    t->ac_depth = 0;
    if ((t->modes_on = cdy_state_read(CDY_STATE_MODES) != 0)) {
        /* a mode's Python code sees each op, the fakes' too: run eagerly */
        if (!cdy_guard_state(&tr, CDY_STATE_MODES))
            cdy_tr_stop(&tr, TORCH_MODE);
        return;
    }
    tr.frame_locals = locals;
    tr.globals = globals;
    tr.builtins = builtins;
    tr.closure = closure;
    tr.nlocals = code->co_nlocalsplus;
    tr.locals = cdy_arena_alloc(&t->arena, sizeof(tvar *) * (size_t)(tr.nlocals + 1));
    if (!tr.locals) {
        cdy_tr_stop(&tr, OUT_OF_MEMORY);
        return;
    }
    if (cdy_tr_run_frame(&tr) == 0 && !t->ret && !t->brk)
        cdy_tr_stop(&tr, NO_RETURN);
    cdy_exc_escaped(&tr);
    if (t->status == CDY_TRACE_OK && !guard_grad_mode(&tr))
        guard_global_state(&tr);
    check_graph(&tr);
    collect_input_srcs(t);
    cdy_sx_int_srcs(t);
    if (!t->input_srcs && t->status == CDY_TRACE_OK)
        cdy_tr_stop(&tr, OUT_OF_MEMORY);
    PyErr_Clear();
}

/* Release what a trace holds. */
void cdy_trace_free(cdy_trace *t)
{
    cdy_guards_free(&t->guards);
    PyMem_Free(t->graph.values);
    PyMem_Free(t->pynodes);
    PyMem_Free(t->input_rg);
    t->input_rg = NULL;
    t->graph.values = NULL;
    t->pynodes = NULL;
    cdy_arena_free(&t->arena);
    Py_CLEAR(t->keep);
}

/* Trace code with the frame's arguments; see trace/record.h.  A graph break
 * at a CALL of the top frame that it can resume after (trace/breaks.c) is
 * traced again, ending just before that call: the graph up to the break. */
void cdy_trace_run(cdy_trace *t, PyCodeObject *code, PyObject *const *locals, PyObject *globals,
                   PyObject *builtins, PyObject *closure)
{
    trace_once(t, code, locals, globals, builtins, closure);
    if (!cdy_brk_resumable(t, code))
        return;
    cdy_trace first = *t;   /* kept to restore the first trace when the second cannot resume */
    memset(t, 0, sizeof(*t));
    t->break_at_pc = first.stop_top_pc;
    t->break_at_count = first.stop_top_count;
    trace_once(t, code, locals, globals, builtins, closure);
    if (t->status == CDY_TRACE_OK && t->brk && cdy_guards_carry(&t->guards, &first.guards))
        PyErr_Clear();   /* no memory: the break's call stays eager for these guards */
    if (t->status == CDY_TRACE_OK && t->brk) {
        t->status = CDY_TRACE_OK;
        snprintf(t->reason, sizeof(t->reason), "%s", first.reason);
        t->reason_code = first.reason_code;
        t->reason_line = first.reason_line;
        t->reason_file = first.reason_file;
        cdy_trace_free(&first);
        return;
    }
    cdy_brk_log_no_resume(t, &first, code);
    cdy_trace_free(t);
    *t = first;
}
