/* bytecode.c - build the transformed code object of a cache entry:
 *
 *     RESUME 0
 *     LOAD_GLOBAL   (NULL + __compiled_fn_N)
 *     LOAD_FAST     <each graph input>          (or LOAD_GLOBAL/LOAD_ATTR chains)
 *     CALL n                                      (the version's call sequence)
 *     RETURN_VALUE                                when the result is one tensor
 *     STORE_FAST ___outs; <attribute stores>; <calls for effect; POP_TOP>;
 *     <rebuild the return value>; RETURN_VALUE   otherwise
 *     or, after a graph break (trace/breaks.c):
 *     return resume(*<locals>, *<stack below the call>, <the breaking call>)
 *
 * Its arguments are every argument slot of the original code, positionally
 * (the hook passes the frame's localsplus), so it has no star-args, then
 * the contents of the original's closure cells (free variables).  The
 * instructions go into an instruction list (pyver/asm.h) through the
 * version's emitter (pyver/emit.h) where versions differ (the call
 * protocol, LOAD_ATTR's oparg); the assembler writes the caches, the
 * location table (every instruction on the return's line), the (empty)
 * exception table and the stack size. */
#include "frame/frame.h"
#include "pyver/emit.h"

#include <string.h>

typedef struct {
    cdy_asm a;             /* the instructions */
    PyObject *consts;      /* list */
    PyObject *names;       /* list */
    int outs_slot;
    int objs_slot;         /* first of the locals holding the objects the frame built */
    int cell_base;         /* first parameter holding a closure cell's contents */
    int failed;
} bc_writer;

/* Append op(arg) (the result of an emitter call: < 0 is out of memory). */
static void emit(bc_writer *w, int op, int arg)
{
    w->failed |= cdy_asm_add(&w->a, op, arg) < 0;
}

/* Record the result r of an emitter call. */
static void emitted(bc_writer *w, int r)
{
    w->failed |= r < 0;
}

/* Index of obj in the list (by identity for consts, equality for names); appends. */
static int list_index(bc_writer *w, PyObject *list, PyObject *obj, int by_identity)
{
    Py_ssize_t n = PyList_GET_SIZE(list);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyList_GET_ITEM(list, i);
        if (it == obj)
            return (int)i;
        if (!by_identity && PyUnicode_Check(it) && PyUnicode_Compare(it, obj) == 0)
            return (int)i;
    }
    if (PyList_Append(list, obj)) {
        w->failed = 1;
        return 0;
    }
    return (int)n;
}

static void emit_const(bc_writer *w, PyObject *obj);

/* Push the value of source s. */
static void emit_source(bc_writer *w, const cdy_src *s)
{
    if (s->kind == CDY_SRC_LOCAL)
        emit(w, CDY_PY_LOAD_FAST, s->slot);
    else if (s->kind == CDY_SRC_DEREF)
        emit(w, CDY_PY_LOAD_FAST, w->cell_base + s->slot);
    else if (s->kind == CDY_SRC_GLOBAL && !s->dict)
        emitted(w, cdy_emit_load_global(&w->a, list_index(w, w->names, s->name, 0), 0));
    else if (s->kind == CDY_SRC_GLOBAL) {   /* another module's global: dict[name] */
        emit_const(w, s->dict);
        emit_const(w, s->name);
        emit(w, CDY_PY_BINARY_SUBSCR, 0);
    }
    else
        w->failed = 1;
    for (int i = 0; i < s->nattrs; i++) {
        if (s->item[i] == 2) {   /* key[obj]: the converter under the value */
            emit_const(w, s->attrs[i]);
            emit(w, CDY_PY_SWAP, 2);
            emit(w, CDY_PY_BINARY_SUBSCR, 0);
        }
        else if (s->item[i]) {
            emit_const(w, s->attrs[i]);
            emit(w, CDY_PY_BINARY_SUBSCR, 0);
        }
        else
            emitted(w, cdy_emit_load_attr(&w->a, list_index(w, w->names, s->attrs[i], 0)));
    }
}

/* Push a constant. */
static void emit_const(bc_writer *w, PyObject *obj)
{
    emit(w, CDY_PY_LOAD_CONST, list_index(w, w->consts, obj, 1));
}

static void emit_call(bc_writer *w, const cdy_ret *r);

/* Push the value described by r (outputs come from ___outs). */
static void emit_ret(bc_writer *w, const cdy_ret *r)
{
    switch (r->kind) {
    case CDY_RET_OUTPUT: {
        PyObject *k = PyLong_FromLong(r->index);
        if (!k) {
            w->failed = 1;
            return;
        }
        emit(w, CDY_PY_LOAD_FAST, w->outs_slot);
        emit_const(w, k);
        Py_DECREF(k);
        emit(w, CDY_PY_BINARY_SUBSCR, 0);
        break;
    }
    case CDY_RET_CONST:
        emit_const(w, r->obj);
        break;
    case CDY_RET_SOURCE:
        emit_source(w, r->src);
        break;
    case CDY_RET_DICT: {
        PyObject *keys = PyTuple_New(r->n);
        for (int i = 0; keys && i < r->n; i++)
            PyTuple_SET_ITEM(keys, i, Py_NewRef(r->keys[i]));
        if (!keys) {
            w->failed = 1;
            return;
        }
        for (int i = 0; i < r->n; i++)
            emit_ret(w, r->items[i]);
        emit_const(w, keys);
        Py_DECREF(keys);
        emit(w, CDY_PY_BUILD_CONST_KEY_MAP, r->n);
        break;
    }
    case CDY_RET_CALL:
        emit_call(w, r);
        break;
    case CDY_RET_OBJECT:   /* made once, before the stores and the return value */
        emit(w, CDY_PY_LOAD_FAST, w->objs_slot + r->index);
        break;
    default:
        for (int i = 0; i < r->n; i++)
            emit_ret(w, r->items[i]);
        emit(w, r->kind == CDY_RET_TUPLE ? CDY_PY_BUILD_TUPLE : CDY_PY_BUILD_LIST, r->n);
    }
}

/* Push r->obj(*positionals, **keywords): an object the traced frame built. */
static void emit_call(bc_writer *w, const cdy_ret *r)
{
    emitted(w, cdy_emit_const_callable(&w->a, list_index(w, w->consts, r->obj, 1)));
    for (int i = 0; i < r->n; i++)
        emit_ret(w, r->items[i]);
    int kw = -1;
    if (r->n > r->index) {
        PyObject *names = PyTuple_New(r->n - r->index);
        for (int i = 0; names && i < r->n - r->index; i++)
            PyTuple_SET_ITEM(names, i, Py_NewRef(r->keys[i]));
        if (!names) {
            w->failed = 1;
            return;
        }
        kw = list_index(w, w->consts, names, 1);
        Py_DECREF(names);
    }
    emitted(w, cdy_emit_call(&w->a, r->n, kw));
}

/* operator.call (borrowed, cached), or NULL with an error. */
static PyObject *operator_call(void)
{
    static PyObject *fn;
    if (!fn) {
        PyObject *m = PyImport_ImportModule("operator");
        fn = m ? PyObject_GetAttrString(m, "call") : NULL;
        Py_XDECREF(m);
    }
    return fn;
}

/* Push the result of the breaking call of b (callable(*args), keyword
 * arguments last): a constant callable is called directly, another one
 * through operator.call. */
static void emit_break_call(bc_writer *w, const cdy_break *b)
{
    int direct = b->callable->kind == CDY_RET_CONST;
    PyObject *fn = direct ? b->callable->obj : operator_call();
    if (!fn) {
        w->failed = 1;
        return;
    }
    emitted(w, cdy_emit_const_callable(&w->a, list_index(w, w->consts, fn, 1)));
    if (!direct)
        emit_ret(w, b->callable);
    for (int i = 0; i < b->nargs; i++)
        emit_ret(w, b->args[i]);
    int kw = b->kwnames ? list_index(w, w->consts, b->kwnames, 1) : -1;
    emitted(w, cdy_emit_call(&w->a, b->nargs + !direct, kw));
}

/* Push the resume function and the locals and stack values it takes; a
 * resume function of a code with free variables is a closure over the
 * frame's cells, so it is called through cdy_resume_call(fn, closure, ...),
 * which makes it (frame/resume.c).  The number of arguments pushed. */
static int emit_resume_args(bc_writer *w, PyCodeObject *orig, const cdy_break *b,
                            PyObject *resume)
{
    int n = orig->co_nlocals;   /* locals only: free variables are read from the cells */
    if (orig->co_nfreevars) {
        emitted(w, cdy_emit_const_callable(&w->a, list_index(w, w->consts, cdy_resume_caller(), 1)));
        emit_const(w, resume);
        emit(w, CDY_PY_LOAD_FAST, w->cell_base + orig->co_nfreevars);
        n += 2;
    }
    else
        emitted(w, cdy_emit_const_callable(&w->a, list_index(w, w->consts, resume, 1)));
    for (int i = 0; i < orig->co_nlocals; i++) {
        if (b->locals[i])
            emit_ret(w, b->locals[i]);
        else
            emit_const(w, Py_None);
    }
    for (int i = 0; i < b->nbelow; i++)
        if (b->below[i]) {
            emit_ret(w, b->below[i]);
            n++;
        }
    return n;
}

/* return resume_at(at)(*locals, *stack below the break[, result of the
 * call on the stack]); 0, or -1 with an exception. */
static int emit_resume(bc_writer *w, PyCodeObject *orig, const cdy_break *b, PyObject *globals,
                       int at)
{
    PyObject *resume = cdy_resume_fn(orig, b, globals, at);
    if (!resume)
        return -1;
    int n = emit_resume_args(w, orig, b, resume);
    Py_DECREF(resume);   /* co_consts keeps it */
    if (!b->jump_op) {
        emit_break_call(w, b);
        n++;
    }
    emitted(w, cdy_emit_call(&w->a, n, -1));
    emit(w, CDY_PY_RETURN_VALUE, 0);
    return 0;
}

/* The end of the transformed code of a break (trace/breaks.c): return
 * resume(*locals, *stack below the call, call's result) - the locals and the
 * stack are rebuilt before the call runs, the resume function
 * (frame/resume.c) goes on after it.  For a data-dependent jump: its
 * condition's truth (operator.truth) picks one of two resume functions. */
static int emit_break(bc_writer *w, PyCodeObject *orig, const cdy_break *b, PyObject *globals)
{
    if (!b->jump_op)
        return emit_resume(w, orig, b, globals, b->next);
    static PyObject *truth;
    if (!truth) {
        PyObject *m = PyImport_ImportModule("operator");
        truth = m ? PyObject_GetAttrString(m, "truth") : NULL;
        Py_XDECREF(m);
        if (!truth)
            return -1;
    }
    emitted(w, cdy_emit_const_callable(&w->a, list_index(w, w->consts, truth, 1)));
    emit_ret(w, b->cond);
    emitted(w, cdy_emit_call(&w->a, 1, -1));
    int j = cdy_asm_add_jump(&w->a, b->jump_op, -1);
    w->failed |= j < 0;
    if (j < 0 || emit_resume(w, orig, b, globals, b->next))
        return -1;
    w->a.ins[j].target = w->a.n;
    return emit_resume(w, orig, b, globals, b->target);
}

/* Number of argument slots: positional, keyword-only, *args, **kwargs. */
int cdy_code_nargslots(PyCodeObject *co)
{
    int n = co->co_argcount + co->co_kwonlyargcount;
    if (co->co_flags & CO_VARARGS)
        n++;
    if (co->co_flags & CO_VARKEYWORDS)
        n++;
    return n;
}

/* Arguments the transformed code takes after the argument slots: the
 * contents of each closure cell, then the closure (eval.c's call_shadow). */
static int nclosure(PyCodeObject *orig)
{
    return orig->co_nfreevars ? orig->co_nfreevars + 1 : 0;
}

/* The transformed code's local names: the argument slots, one ___cellN per
 * free variable and ___closure (the closure tuple: a resume function closes
 * over it), the original's other locals, ___outs, one ___objN per object the
 * frame built.  New list or NULL. */
static PyObject *new_varnames(PyCodeObject *orig, int nargslots, int nobjects)
{
    PyObject *orig_vars = PyObject_GetAttrString((PyObject *)orig, "co_varnames");
    PyObject *v = orig_vars ? PySequence_List(orig_vars) : NULL;
    Py_XDECREF(orig_vars);
    for (int i = 0; v && i < orig->co_nfreevars; i++) {
        PyObject *nm = PyUnicode_FromFormat("___cell%d", i);
        if (!nm || PyList_Insert(v, nargslots + i, nm))
            Py_CLEAR(v);
        Py_XDECREF(nm);
    }
    if (v && orig->co_nfreevars) {
        PyObject *nm = PyUnicode_FromString("___closure");
        if (!nm || PyList_Insert(v, nargslots + orig->co_nfreevars, nm))
            Py_CLEAR(v);
        Py_XDECREF(nm);
    }
    PyObject *outs = PyUnicode_FromString("___outs");
    if (!outs || (v && PyList_Append(v, outs)))
        Py_CLEAR(v);
    Py_XDECREF(outs);
    for (int i = 0; v && i < nobjects; i++) {
        PyObject *nm = PyUnicode_FromFormat("___obj%d", i);
        if (!nm || PyList_Append(v, nm))
            Py_CLEAR(v);
        Py_XDECREF(nm);
    }
    return v;
}

/* The code object of w's instructions, all on source line `line`: orig's
 * replace() with the written parts (pyver/asm.h); new ref or NULL. */
static PyObject *make_code(PyCodeObject *orig, bc_writer *w, int nargslots, int line,
                           int nobjects)
{
    PyObject *varnames = new_varnames(orig, nargslots, nobjects), *kw = NULL, *res = NULL;
    if (!varnames)
        return NULL;
    PyObject *vt = PyList_AsTuple(varnames), *ct = PyList_AsTuple(w->consts),
             *nt = PyList_AsTuple(w->names);
    if (vt && ct && nt)
        kw = Py_BuildValue("{s:i,s:i,s:i,s:n,s:i,s:O,s:O,s:O,s:(),s:()}",
                           "co_argcount", nargslots + nclosure(orig), "co_posonlyargcount", 0,
                           "co_kwonlyargcount", 0, "co_nlocals", PyTuple_GET_SIZE(vt),
                           "co_flags", CO_OPTIMIZED | CO_NEWLOCALS, "co_consts", ct,
                           "co_names", nt, "co_varnames", vt, "co_freevars", "co_cellvars");
    Py_XDECREF(vt);
    Py_XDECREF(ct);
    Py_XDECREF(nt);
    Py_DECREF(varnames);
    if (!kw)
        return NULL;
    cdy_asm_set_pos(&w->a, 0, line, line, -1, -1);
    res = cdy_asm_to_code(&w->a, orig, kw);
    Py_DECREF(kw);
    return res;
}

/* The transformed code for trace t; see the file comment. */
PyObject *cdy_bytecode_build(PyCodeObject *orig, const cdy_trace *t, PyObject *fn_name,
                             int single, int call_graph, PyObject *globals)
{
    bc_writer w = {0};
    CDY_ASSERT(t->ret || t->brk, "a trace with no return value reached bytecode building");
    if (!t->ret && !t->brk) {   /* the tracer rejects such a trace (NO_RETURN): never build from NULL */
        PyErr_SetString(PyExc_RuntimeError, "cdynamo: internal error: the trace has no return value");
        return NULL;
    }
    int nargslots = cdy_code_nargslots(orig);
    PyObject *orig_vars = PyObject_GetAttrString((PyObject *)orig, "co_varnames");
    if (!orig_vars)
        return NULL;
    w.outs_slot = (int)PyTuple_GET_SIZE(orig_vars) + nclosure(orig);
    w.objs_slot = w.outs_slot + 1;
    w.cell_base = nargslots;
    Py_DECREF(orig_vars);
    w.consts = PyList_New(0);
    w.names = PyList_New(0);
    PyObject *res = NULL;
    if (!w.consts || !w.names)
        goto done;
    emit(&w, CDY_PY_RESUME, 0);
    if (call_graph) {
        emitted(&w, cdy_emit_load_global(&w.a, list_index(&w, w.names, fn_name, 0), 1));
        for (int i = 0; i < t->graph.ninputs; i++)
            emit_source(&w, &t->input_srcs[i]);
        emitted(&w, cdy_emit_call(&w.a, t->graph.ninputs, -1));
        if (single) {
            emit(&w, CDY_PY_RETURN_VALUE, 0);
            goto built;
        }
        emit(&w, CDY_PY_STORE_FAST, w.outs_slot);
    }
    for (int i = 0; i < t->nobjects; i++) {   /* objects the frame built (trace/objects.c) */
        emit_ret(&w, t->objects[i]);
        emit(&w, CDY_PY_STORE_FAST, w.objs_slot + i);
    }
    for (int i = 0; i < t->nstores; i++) {   /* attribute stores of the frame (trace/mutate.c) */
        emit_ret(&w, t->stores[i].value);
        emit_source(&w, t->stores[i].obj);
        if (t->stores[i].item) {   /* obj[key] = value */
            emit_const(&w, t->stores[i].name);
            emit(&w, CDY_PY_STORE_SUBSCR, 0);
            continue;
        }
        emit(&w, CDY_PY_STORE_ATTR, list_index(&w, w.names, t->stores[i].name, 0));
    }
    for (int i = 0; i < t->nafter; i++) {   /* calls for their effect (trace/mutate.c) */
        emit_ret(&w, t->after[i]);
        emit(&w, CDY_PY_POP_TOP, 0);
    }
    if (t->brk) {
        if (emit_break(&w, orig, t->brk, globals))
            goto done;
        goto built;
    }
    emit_ret(&w, t->ret);
    emit(&w, CDY_PY_RETURN_VALUE, 0);
built:
    if (w.failed) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "cdynamo: could not write the transformed bytecode");
        goto done;
    }
    res = make_code(orig, &w, nargslots, t->return_line > 0 ? t->return_line : orig->co_firstlineno,
                    t->nobjects);
done:
    cdy_asm_free(&w.a);
    Py_XDECREF(w.consts);
    Py_XDECREF(w.names);
    return res;
}
