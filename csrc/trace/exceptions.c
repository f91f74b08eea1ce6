/* exceptions.c - Python exceptions raised and caught inside the traced code.
 *
 * A `raise` in traced code, or an operation that eager would make raise
 * (a missing dict key, a list index out of range, a missing attribute, a
 * StopIteration: the USER stops that name a Python exception), does not stop
 * the trace at once: the trace's status becomes RAISING with the exception
 * (a real exception object: its arguments are constants) and the failing
 * step unwinds.  Each traced frame, innermost first, looks the instruction
 * up in its exception table (co_exceptiontable, CPython 3.11's encoding,
 * which 3.12 and 3.13 keep): a handler there gets the stack cut to its
 * depth, the exception pushed, and the trace goes on at its target, as
 * CPython's own unwinding does; PUSH_EXC_INFO, CHECK_EXC_MATCH, POP_EXCEPT,
 * RERAISE and RAISE_VARARGS are traced.  An exception that leaves the top
 * frame stops the trace with its USER reason: the frame runs eagerly and
 * eager raises it.  Side effects traced before the raise stay, as eager's
 * do.  `with` blocks that see an exception (WITH_EXCEPT_START) stop.
 * Symbolic sizes: a raise pins only what its instruction's operands hold
 * (cdy_sx_pin_frame); one that leaves the top frame pins every size. */
#include "trace/trace.h"

#include <string.h>

/* The Python exception type USER reason `code` stands for, or NULL when it
 * stands for none the trace may raise (the stop is then final). */
static PyObject *exc_type_of(int code)
{
    switch (code) {
    case CDY_R_KEY_ERROR: case CDY_R_KEY_ERROR_NAMED:
        return PyExc_KeyError;
    case CDY_R_SEQ_INDEX_RANGE: case CDY_R_LIST_ASSIGN_RANGE:
        return PyExc_IndexError;
    case CDY_R_OBJ_NO_ATTR:
        return PyExc_AttributeError;
    case CDY_R_STOP_ITERATION:
        return PyExc_StopIteration;
    case CDY_R_ZIP_STRICT: case CDY_R_VALUE_NOT_IN_LIST: case CDY_R_UNPACK_COUNT:
    case CDY_R_DICT_UPDATE_PAIR:
        return PyExc_ValueError;
    case CDY_R_OBJ_NO_LEN: case CDY_R_REDUCE_EMPTY: case CDY_R_SEQ_INDEX_TYPE:
    case CDY_R_INIT_RETURNED:
        return PyExc_TypeError;
    default:
        return NULL;
    }
}

/* 1 if USER reason `code` with the pending Python exception (exc) is one the trace
 * may raise into the traced code: the Python errors of plain Python operations. */
static int raisable_exc(int code)
{
    return code == CDY_R_RAISED_ATTR || code == CDY_R_RAISED_CALL || code == CDY_R_RAISED_DICT_KEY ||
           code == CDY_R_RAISED_SUBSCRIPT || code == CDY_R_RAISED_LEN || code == CDY_R_RAISED_IN ||
           code == CDY_R_RAISED_OPERATOR || code == CDY_R_RAISED_TRUTH || code == CDY_R_RAISED_FORMAT ||
           code == CDY_R_RAISED_ISINSTANCE || code == CDY_R_RAISED_SLICE;
}

/* See trace.h. */
int cdy_exc_begin(tracer *tr, int code, PyObject *e)
{
    cdy_trace *t = tr->t;
    if (!e && exc_type_of(code)) {
        PyObject *msg = cdy_tr_keep(tr, PyUnicode_FromString(t->reason));
        e = msg ? PyObject_CallOneArg(exc_type_of(code), msg) : NULL;
        if (!e || !cdy_tr_keep(tr, e)) {
            PyErr_Clear();
            return 0;
        }
    }
    if (!e)
        return 0;
    t->exc = e;
    t->status = CDY_TRACE_RAISING;
    return 1;
}

/* See trace.h. */
int cdy_exc_raisable(int code)
{
    return exc_type_of(code) != NULL || raisable_exc(code);
}

/* See trace.h. */
int cdy_exc_raise(tracer *tr, PyObject *e)
{
    cdy_trace *t = tr->t;
    if (t->status != CDY_TRACE_OK)
        return -1;
    PyObject *s = PyObject_Str(e);
    snprintf(t->reason, sizeof(t->reason), "%s: %.300s", Py_TYPE(e)->tp_name,
             s && PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : "?");
    Py_XDECREF(s);
    PyErr_Clear();
    t->reason_code = CDY_R_RAISED;
    t->reason_line = PyCode_Addr2Line(tr->co, tr->pc * 2);
    t->reason_file = tr->co->co_filename;
    t->exc = e;
    t->status = CDY_TRACE_RAISING;
    return -1;
}

/* Read a varint of the exception table at *p (6 bits a byte, 0x40: more). */
static int read_varint(const unsigned char **p, const unsigned char *end)
{
    int v = 0, b;
    do {
        if (*p >= end)
            return -1;
        b = *(*p)++;
        v = (v << 6) | (b & 63);
    } while (b & 64);
    return v;
}

/* The handler of instruction pc in code co: 1 with *target, *depth, *lasti;
 * 0 when none covers pc. */
static int find_handler(PyCodeObject *co, int pc, int *target, int *depth, int *lasti)
{
    PyObject *tab = co->co_exceptiontable;
    if (!tab || !PyBytes_Check(tab))
        return 0;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(tab);
    const unsigned char *end = p + PyBytes_GET_SIZE(tab);
    while (p < end) {
        int start = read_varint(&p, end), len = read_varint(&p, end);
        int tgt = read_varint(&p, end), dl = read_varint(&p, end);
        if (start < 0 || len < 0 || tgt < 0 || dl < 0)
            return 0;
        if (pc >= start && pc < start + len) {
            *target = tgt;
            *depth = dl >> 1;
            *lasti = dl & 1;
            return 1;
        }
    }
    return 0;
}

/* See trace.h. */
int cdy_exc_unwind(tracer *tr, int *next)
{
    cdy_trace *t = tr->t;
    int target, depth, lasti;
    if (t->status != CDY_TRACE_RAISING || !find_handler(tr->co, tr->pc, &target, &depth, &lasti))
        return -1;
    if (depth > tr->sp || depth + lasti + 1 > tr->stack_cap)
        return -1;
    tr->sp = depth;
    tvar *ev = cdy_tv_new(tr, TV_OBJ);
    tvar *li = lasti ? cdy_tv_const(tr, PyLong_FromLong(tr->pc)) : NULL;
    if (!ev || (lasti && !li))
        return -1;
    ev->obj = t->exc;
    ev->fixed = 1;
    if (li)
        tr->stack[tr->sp++] = li;
    tr->stack[tr->sp++] = ev;
    t->status = CDY_TRACE_OK;   /* caught here: the trace goes on in the handler */
    t->reason[0] = 0;
    t->reason_code = 0;
    t->exc = NULL;
    *next = target;
    return 0;
}

/* See trace.h. */
int cdy_exc_catch(tracer *tr, PyObject *type)
{
    cdy_trace *t = tr->t;
    if (t->status != CDY_TRACE_RAISING || !t->exc || !PyErr_GivenExceptionMatches(t->exc, type))
        return 0;
    t->status = CDY_TRACE_OK;
    t->reason[0] = 0;
    t->reason_code = 0;
    t->exc = NULL;
    return 1;
}

/* See trace.h. */
void cdy_exc_escaped(tracer *tr)
{
    cdy_trace *t = tr->t;
    if (t->status != CDY_TRACE_RAISING)
        return;
    cdy_reason_cat cat = cdy_reasons[t->reason_code].cat;
    cdy_sx_pin_all(tr, "the code read the size and the trace stopped");
    t->status = cat == CDY_RCAT_USER || cat == CDY_RCAT_FALLBACK ? CDY_TRACE_ERROR
                                                                  : CDY_TRACE_UNSUPPORTED;
    t->exc = NULL;
}

/* ---- the handler opcodes ------------------------------------------------------------ */

/* The exception value of tvar v (an exception object), or NULL. */
static PyObject *exc_of(tvar *v)
{
    return (v->kind == TV_OBJ || v->kind == TV_CONST) && v->obj && PyExceptionInstance_Check(v->obj)
               ? v->obj : NULL;
}

/* See trace.h: PUSH_EXC_INFO: the handled exception becomes the one on the
 * stack, the previous one goes below it. */
int cdy_exc_push_info(tracer *tr)
{
    if (CDY_TR_CHECK(tr, tr->sp >= 1 && tr->sp + 1 < tr->stack_cap, STACK_UNDERFLOW))
        return -1;
    tvar *v = tr->stack[tr->sp - 1];
    tvar *prev = tr->t->handling ? tr->t->handling : cdy_tv_const(tr, Py_NewRef(Py_None));
    if (!prev)
        return -1;
    tr->stack[tr->sp - 1] = prev;
    tr->stack[tr->sp++] = v;
    tr->t->handling = v;
    return 0;
}

/* See trace.h: POP_EXCEPT. */
int cdy_exc_pop_except(tracer *tr)
{
    if (CDY_TR_CHECK(tr, tr->sp >= 1, STACK_UNDERFLOW))
        return -1;
    tvar *prev = tr->stack[--tr->sp];
    tr->t->handling = prev->kind == TV_CONST && prev->obj == Py_None ? NULL : prev;
    return 0;
}

/* See trace.h: CHECK_EXC_MATCH: exc (kept) matches the class or tuple popped. */
int cdy_exc_check_match(tracer *tr)
{
    if (CDY_TR_CHECK(tr, tr->sp >= 2, STACK_UNDERFLOW))
        return -1;
    tvar *cls = tr->stack[--tr->sp], *v = tr->stack[tr->sp - 1];
    PyObject *e = exc_of(v), *match = NULL;
    if (cls->kind == TV_TUPLE) {
        match = PyTuple_New(cls->n);
        for (int i = 0; match && i < cls->n; i++)
            PyTuple_SET_ITEM(match, i, Py_NewRef(cls->items[i]->obj ? cls->items[i]->obj : Py_None));
    }
    else if (cls->obj)
        match = Py_NewRef(cls->obj);
    if (!e || !match) {
        Py_XDECREF(match);
        return cdy_tr_stop(tr, EXCEPT_CLAUSE);
    }
    int r = PyErr_GivenExceptionMatches(e, match);
    Py_DECREF(match);
    tvar *b = cdy_tv_const(tr, PyBool_FromLong(r));
    if (!b)
        return -1;
    tr->stack[tr->sp++] = b;
    return 0;
}

/* An exception object for `raise v` (v a class: called with no arguments). */
static PyObject *exc_value(tracer *tr, tvar *v)
{
    PyObject *e = exc_of(v);
    if (e)
        return e;
    if ((v->kind == TV_OBJ || v->kind == TV_CONST) && v->obj && PyExceptionClass_Check(v->obj)) {
        e = cdy_tr_keep(tr, PyObject_CallNoArgs(v->obj));
        if (e && PyExceptionInstance_Check(e))
            return e;
        PyErr_Clear();
    }
    cdy_tr_stop(tr, RAISE_VALUE);
    return NULL;
}

/* See trace.h: RAISE_VARARGS argc (0: re-raise the handled exception). */
int cdy_exc_raise_varargs(tracer *tr, int argc)
{
    if (CDY_TR_CHECK(tr, tr->sp >= argc, STACK_UNDERFLOW))
        return -1;
    tvar *cause = argc == 2 ? tr->stack[--tr->sp] : NULL;
    tvar *v = argc >= 1 ? tr->stack[--tr->sp] : tr->t->handling;
    if (!v)
        return cdy_tr_stop(tr, RAISE_VALUE);
    PyObject *e = exc_value(tr, v);
    if (!e)
        return -1;
    if (cause) {
        PyObject *c = cdy_tv_none(cause) ? Py_None : exc_value(tr, cause);
        if (!c)
            return -1;
        PyException_SetCause(e, Py_NewRef(c));
    }
    return cdy_exc_raise(tr, e);
}

/* See trace.h: RERAISE oparg: raise the exception on the stack again. */
int cdy_exc_reraise(tracer *tr, int oparg)
{
    if (CDY_TR_CHECK(tr, tr->sp >= 1 + (oparg != 0), STACK_UNDERFLOW))
        return -1;
    tvar *v = tr->stack[--tr->sp];
    if (oparg)
        tr->sp--;   /* the saved lasti */
    PyObject *e = exc_of(v);
    if (!e)
        return cdy_tr_stop(tr, RAISE_VALUE);
    return cdy_exc_raise(tr, e);
}

/* See trace.h: an exception class called with constant arguments (IndexError("...")):
 * the exception object, made now; NULL (not stopped, *handled 0) for other calls. */
tvar *cdy_exc_construct(tracer *tr, PyObject *cls, tvar **args, int nargs, PyObject *kwnames,
                        int *handled)
{
    *handled = PyExceptionClass_Check(cls) && !kwnames;
    if (!*handled)
        return NULL;
    PyTypeObject *tp = (PyTypeObject *)cls, *b = tp;
    while (b && (b->tp_flags & Py_TPFLAGS_HEAPTYPE))
        b = b->tp_base;
    if (!b || tp->tp_init != b->tp_init || tp->tp_new != b->tp_new) {   /* its own __init__ */
        cdy_tr_stop(tr, CONSTRUCT, tp->tp_name);
        return NULL;
    }
    PyObject **pa = cdy_arena_alloc(&tr->t->arena, sizeof(PyObject *) * (size_t)(nargs + 1));
    if (!pa) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    for (int i = 0; i < nargs; i++) {
        if (args[i]->kind != TV_CONST && !(args[i]->kind == TV_OBJ && !args[i]->by_type)) {
            cdy_tr_stop(tr, CONSTRUCT, tp->tp_name);
            return NULL;
        }
        pa[i] = args[i]->obj;
    }
    PyObject *e = cdy_tr_keep(tr, PyObject_Vectorcall(cls, pa, (size_t)nargs, NULL));
    if (!e) {
        cdy_tr_stop_exc(tr, RAISED_CALL, tp->tp_name);
        return NULL;
    }
    tvar *v = cdy_tv_new(tr, TV_OBJ);
    if (v) {
        v->obj = e;
        v->fixed = 1;
    }
    return v;
}
