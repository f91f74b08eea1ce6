/* resume.c - the resume function of a graph break (issue 31; the trace's
 * side is trace/breaks.c, the call of it frame/bytecode.c).
 *
 * For a break at the CALL at code unit b->pc of code orig, the resume code is
 * orig's own instructions (pyver/asm.h decodes them: jumps, positions and
 * the exception table move with them) behind a prologue:
 *
 *     RESUME 0
 *     DELETE_FAST  <each local unbound at the break>
 *     LOAD_FAST / PUSH_NULL  <each stack value below the call pair>
 *     LOAD_FAST    ___stackN  (the call's result; none after a jump)
 *     JUMP_FORWARD <the instruction after the CALL, or either target of a
 *                   data-dependent conditional jump: one function each>
 *
 * Its parameters, all positional: every local slot of orig (an unbound one
 * gets None, deleted by the prologue), then the stack values (the NULLs of
 * call protocols are pushed by the prologue, not passed), then the result.
 * A code with free variables keeps them: its resume function closes over
 * the frame's own cells (made per call by cdy_resume_caller; the prologue
 * starts with COPY_FREE_VARS, and the DEREF instructions' slots move past
 * the stack parameters), so a call at the break that rebinds one of them is
 * seen after it, as in eager.
 * The frame hook meets its frames like any other: traced, compiled, cached
 * per code object.  One function per (code, break, stack and locals shape,
 * globals), kept until cdynamo.reset(): the cache entries of its code
 * survive recompiles of the frame that calls it.                        */
#include "frame/frame.h"
#include "pyver/emit.h"

#include <string.h>

static PyObject *resume_cache;   /* dict: key tuple -> function */

/* See frame.h: drop every resume function. */
void cdy_resume_reset(void)
{
    Py_CLEAR(resume_cache);
}

/* caller(fn, closure, *args): fn's code closing over closure, called. */
static PyObject *resume_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs < 2 || !PyFunction_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "cdynamo: resume caller takes (function, closure, *args)");
        return NULL;
    }
    PyFunctionObject *tmpl = (PyFunctionObject *)args[0];
    PyObject *fn = PyFunction_NewWithQualName(tmpl->func_code, tmpl->func_globals,
                                              tmpl->func_qualname);
    if (!fn)
        return NULL;
    PyObject *r = NULL;
    if (!PyFunction_SetClosure(fn, args[1]))
        r = PyObject_Vectorcall(fn, args + 2, (size_t)(nargs - 2), NULL);
    Py_DECREF(fn);
    return r;
}

static PyMethodDef resume_call_def = {"_cdynamo_resume", (PyCFunction)(void (*)(void))resume_call,
                                      METH_FASTCALL, "call a resume function closing over a closure"};

/* See frame.h (borrowed; made once). */
PyObject *cdy_resume_caller(void)
{
    static PyObject *caller;
    if (!caller)
        caller = PyCFunction_New(&resume_call_def, NULL);
    return caller;
}

/* The cache key of b's resume function for orig and globals; new ref or NULL. */
static PyObject *resume_key(PyCodeObject *orig, const cdy_break *b, PyObject *globals, int at,
                            int result)
{
    PyObject *nulls = PyBytes_FromStringAndSize(NULL, b->nbelow);
    PyObject *unbound = PyBytes_FromStringAndSize(NULL, b->nlocals);
    PyObject *key = NULL;
    if (nulls && unbound) {
        for (int i = 0; i < b->nbelow; i++)
            PyBytes_AS_STRING(nulls)[i] = b->below[i] ? '1' : '0';
        for (int i = 0; i < b->nlocals; i++)
            PyBytes_AS_STRING(unbound)[i] = b->locals[i] ? '1' : '0';
        key = Py_BuildValue("(OiiOON)", (PyObject *)orig, at, result, nulls, unbound,
                            PyLong_FromVoidPtr(globals));
    }
    Py_XDECREF(nulls);
    Py_XDECREF(unbound);
    return key;
}

/* Index in orig's instruction list of the instruction at code unit pc; -1. */
static int instr_index(PyCodeObject *orig, int pc)
{
    PyObject *bytes = PyCode_GetCode(orig);
    if (!bytes)
        return -1;
    cdy_pv_code c = {orig, (const unsigned char *)PyBytes_AS_STRING(bytes),
                     (int)(PyBytes_GET_SIZE(bytes) / 2)};
    cdy_pv_instr d;
    int idx = 0, at = 0;
    while (at < pc && !cdy_pv_decode(&c, at, &d)) {
        at = d.next;
        idx++;
    }
    Py_DECREF(bytes);
    if (at != pc)
        PyErr_Format(PyExc_ValueError, "cdynamo: no instruction starts at offset %d", 2 * pc);
    return at == pc ? idx : -1;
}

/* Number of stack values the resume function takes (the call's result too). */
static int nstack_args(const cdy_break *b, int result)
{
    int n = result;
    for (int i = 0; i < b->nbelow; i++)
        n += b->below[i] != NULL;
    return n;
}

/* Fill prologue slot *k of a (opened by cdy_asm_insert) with op(arg). */
static void put(cdy_asm *a, int *k, int op, int arg, int target)
{
    cdy_asm_ins *q = &a->ins[(*k)++];
    q->op = op;
    q->arg = arg;
    q->target = target;
    q->line = q->end_line = q->col = q->end_col = -1;
    q->handler = -1;
    q->depth = q->lasti = 0;
}

/* Write the prologue (see the file comment) in front of orig's instructions in a. */
static int write_prologue(cdy_asm *a, PyCodeObject *orig, const cdy_break *b, int target,
                          int result)
{
    int nunbound = 0, nloc = orig->co_nlocals, nfree = orig->co_nfreevars;
    for (int i = 0; i < nloc; i++)
        nunbound += !b->locals[i];
    int len = 2 + (nfree > 0) + result + nunbound + b->nbelow;
    if (cdy_asm_insert(a, 0, len))
        return -1;
    int k = 0, arg = nloc;
    if (nfree)
        put(a, &k, CDY_PY_COPY_FREE_VARS, nfree, -1);
    put(a, &k, CDY_PY_RESUME, 0, -1);
    for (int i = 0; i < nloc; i++)
        if (!b->locals[i])
            put(a, &k, CDY_PY_DELETE_FAST, i, -1);
    for (int i = 0; i < b->nbelow; i++)
        put(a, &k, b->below[i] ? CDY_PY_LOAD_FAST : CDY_PY_PUSH_NULL, b->below[i] ? arg++ : 0, -1);
    if (result)
        put(a, &k, CDY_PY_LOAD_FAST, arg, -1);
    put(a, &k, CDY_PY_JUMP_FORWARD, 0, len + target);
    return 0;
}

/* code.replace() arguments of the resume code; new dict or NULL. */
static PyObject *resume_kw(PyCodeObject *orig, const cdy_break *b, int result)
{
    PyObject *names = PyObject_GetAttrString((PyObject *)orig, "co_varnames");
    PyObject *v = names ? PySequence_List(names) : NULL, *kw = NULL;
    Py_XDECREF(names);
    int nstack = nstack_args(b, result);
    for (int i = 0; v && i < nstack; i++) {
        PyObject *nm = PyUnicode_FromFormat("___stack%d", i);
        if (!nm || PyList_Append(v, nm))
            Py_CLEAR(v);
        Py_XDECREF(nm);
    }
    PyObject *vt = v ? PyList_AsTuple(v) : NULL;
    int line = PyCode_Addr2Line(orig, b->pc * 2);
    PyObject *name = PyUnicode_FromFormat("__resume_%U_at_%d", orig->co_name, line);
    PyObject *qual = PyUnicode_FromFormat("%U.__resume_at_%d", orig->co_qualname, line);
    PyObject *freevars = PyObject_GetAttrString((PyObject *)orig, "co_freevars");
    if (vt && name && qual && freevars)
        kw = Py_BuildValue("{s:n,s:i,s:i,s:n,s:i,s:O,s:O,s:O,s:O}", "co_argcount", PyTuple_GET_SIZE(vt),
                           "co_posonlyargcount", 0, "co_kwonlyargcount", 0, "co_nlocals",
                           PyTuple_GET_SIZE(vt), "co_flags",
                           orig->co_flags & ~(CO_VARARGS | CO_VARKEYWORDS), "co_varnames", vt,
                           "co_name", name, "co_qualname", qual, "co_freevars", freevars);
    Py_XDECREF(freevars);
    Py_XDECREF(v);
    Py_XDECREF(vt);
    Py_XDECREF(name);
    Py_XDECREF(qual);
    return kw;
}

/* The resume code of break b in orig; new ref or NULL (exception set). */
static PyObject *resume_code(PyCodeObject *orig, const cdy_break *b, int at, int result)
{
    cdy_asm a = {0};
    PyObject *kw = NULL, *code = NULL;
    int target = instr_index(orig, at);
    if (target < 0 || cdy_asm_from_code(orig, &a))
        goto done;
    int shift = nstack_args(b, result);   /* free slots move past the stack parameters */
    for (int i = 0; i < a.n; i++) {
        int op = a.ins[i].op;
        if ((op == CDY_PY_LOAD_DEREF || op == CDY_PY_STORE_DEREF || op == CDY_PY_DELETE_DEREF) &&
            a.ins[i].arg >= orig->co_nlocals)
            a.ins[i].arg += shift;
        else if (op == CDY_PY_COPY_FREE_VARS)   /* the prologue copies them */
            a.ins[i].op = CDY_PY_NOP;
    }
    if (write_prologue(&a, orig, b, target, result)) {
        PyErr_NoMemory();
        goto done;
    }
    if ((kw = resume_kw(orig, b, result)))
        code = cdy_asm_to_code(&a, orig, kw);
done:
    cdy_asm_free(&a);
    Py_XDECREF(kw);
    return code;
}

/* See frame.h: the resume function of break b of orig (cached); new ref or NULL. */
PyObject *cdy_resume_fn(PyCodeObject *orig, const cdy_break *b, PyObject *globals, int at)
{
    int result = !b->jump_op;   /* a call's result is on the stack after it */
    if (!resume_cache && !(resume_cache = PyDict_New()))
        return NULL;
    PyObject *key = resume_key(orig, b, globals, at, result);
    if (!key)
        return NULL;
    PyObject *fn = PyDict_GetItemWithError(resume_cache, key);
    if (fn || PyErr_Occurred()) {
        Py_DECREF(key);
        return Py_XNewRef(fn);
    }
    PyObject *code = resume_code(orig, b, at, result);
    if (code && result &&
        cdy_frame_mark_resume((PyCodeObject *)code, (int)((PyCodeObject *)code)->co_argcount - 1))
        Py_CLEAR(code);
    fn = code ? PyFunction_New(code, globals) : NULL;
    Py_XDECREF(code);
    if (fn && PyDict_SetItem(resume_cache, key, fn))
        Py_CLEAR(fn);
    Py_DECREF(key);
    return fn;
}
