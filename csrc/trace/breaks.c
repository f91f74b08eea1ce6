/* breaks.c - resuming after a graph break (issue 31), the tracer's side.
 *
 * A trace that stops (an UNSUPPORTED reason) while the top frame executes a
 * CALL - the call itself is unsupported, or a function inlined by it stops -
 * is traced a second time, and that trace ends just before the CALL
 * (cdy_brk_capture): the graph so far, with every tensor the frame still
 * holds (its locals, the stack below the call, the callable and its
 * arguments) as an output, is described in t->brk.  The frame hook then
 * builds transformed code that runs the graph, makes the call eagerly and
 * continues in a resume function (frame/resume.c, frame/bytecode.c).
 *
 * What is not resumed runs the whole frame eagerly, as before, with the
 * break's reason and a "no resume" note (the graph_breaks log says why):
 * fullgraph=True, config.resume_after_break off, a training graph (grad mode
 * with inputs that require grad), a code with cell variables, or with free
 * variables that makes functions (the resume function closes over the
 * frame's cells otherwise), a break that is neither a CALL nor a
 * data-dependent conditional jump, a break inside a loop or a try / with block
 * (an exception table entry covers it), values the transformed code cannot
 * rebuild (iterators, bound tensor methods on the stack, ...).          */
#include "trace/trace.h"
#include "pyver/asm.h"

#include <string.h>

/* Append " (no resume: why)" to t's reason and log it. */
static void no_resume(cdy_trace *t, PyCodeObject *co, const char *why)
{
    size_t n = strlen(t->reason);
    snprintf(t->reason + n, sizeof(t->reason) - n, " (no resume: %s)", why);
    if (cdy_log_on("graph_breaks"))
        cdy_log("graph_breaks", "cannot resume after the graph break in %s at %s:%d: %s",
                PyUnicode_AsUTF8(co->co_name), PyUnicode_AsUTF8(co->co_filename),
                PyCode_Addr2Line(co, t->stop_top_pc * 2), why);
    PyErr_Clear();
}

/* The CALL of decoded instruction d: its oparg, *kw_tos set when 3.13's
 * CALL_KW takes the keyword names from the stack; -1 when d is no CALL. */
static int call_of(const cdy_pv_instr *d, int *kw_tos)
{
    *kw_tos = 0;
    for (int i = 0; i < d->nsops; i++) {
        int sop = d->sops[i].sop;
        if (sop == CDY_SOP_KW_NAMES_TOS)
            *kw_tos = 1;
        else if (sop == CDY_SOP_CALL && i == d->nsops - 1)
            return d->sops[i].arg;
        else if (sop != CDY_SOP_NOP)
            return -1;
    }
    return -1;
}

/* The conditional jump a data-dependent break at d stops on: d itself (a
 * POP_JUMP_IF_FALSE / TRUE), or the one after d when d ends in 3.13's
 * TO_BOOL (TO_BOOL, or COMPARE_OP with its bool flag: the trace.c loop runs
 * the ops before the TO_BOOL first); its decoding
 * in *j, 0; -1 when d is neither. */
static int jump_of(const cdy_pv_code *c, const cdy_pv_instr *d, cdy_pv_instr *j)
{
    int sop = d->nsops ? d->sops[d->nsops - 1].sop : -1;
    if (sop == CDY_SOP_TO_BOOL) {
        if (cdy_pv_decode(c, d->next, j) || !j->nsops)
            return -1;
        sop = j->sops[j->nsops - 1].sop;
    }
    else
        *j = *d;
    return (sop == CDY_SOP_POP_JUMP_IF_FALSE || sop == CDY_SOP_POP_JUMP_IF_TRUE) &&
           j->nsops == 1 && j->jump >= 0 ? 0 : -1;
}

/* co's code units in c; the bytes object that holds them (the caller's
 * reference), or NULL with the error cleared. */
static PyObject *code_units(PyCodeObject *co, cdy_pv_code *c)
{
    PyObject *bytes = PyCode_GetCode(co);
    if (!bytes) {
        PyErr_Clear();
        return NULL;
    }
    *c = (cdy_pv_code){co, (const unsigned char *)PyBytes_AS_STRING(bytes),
                       (int)(PyBytes_GET_SIZE(bytes) / 2)};
    return bytes;
}

/* 1 if co makes a function (which may close over a free variable: the
 * resume function's free slots move, frame/resume.c, and LOAD_CLOSURE's
 * would have to follow). */
static int makes_function(PyCodeObject *co)
{
    cdy_pv_code c;
    PyObject *bytes = code_units(co, &c);
    if (!bytes)
        return 1;
    cdy_pv_instr d;
    int bad = 0;
    for (int at = 0; !bad && at < c.ncode && !cdy_pv_decode(&c, at, &d); at = d.next)
        bad = d.op == CDY_PY_MAKE_FUNCTION;
    Py_DECREF(bytes);
    return bad;
}

/* 1 if code unit pc of co lies in a try or with block (an exception handler
 * covers it); -1 when co cannot be decoded. */
static int in_handler_block(PyCodeObject *co, int pc)
{
    cdy_pv_code c;
    PyObject *bytes = code_units(co, &c);
    if (!bytes)
        return -1;
    cdy_asm a = {0};
    int idx = 0, r = -1;
    cdy_pv_instr d;
    for (int at = 0; at < pc && !cdy_pv_decode(&c, at, &d); at = d.next)
        idx++;
    if (!cdy_asm_from_code(co, &a) && idx < a.n)
        r = a.ins[idx].handler >= 0;
    cdy_asm_free(&a);
    Py_DECREF(bytes);
    return r;
}

/* 1 if an instruction at or after code unit pc of co jumps back to pc or
 * before it: the break is in a loop (TorchDynamo skips such frames too). */
static int in_loop(PyCodeObject *co, int pc)
{
    cdy_pv_code c;
    PyObject *bytes = code_units(co, &c);
    if (!bytes)
        return 1;
    cdy_pv_instr d;
    int back = 0;
    for (int at = pc; !back && at < c.ncode && !cdy_pv_decode(&c, at, &d); at = d.next)
        back = d.jump >= 0 && d.jump <= pc;
    Py_DECREF(bytes);
    return back;
}

/* Why the stop of finished trace t in code co cannot be resumed after, or NULL. */
static const char *why_not(cdy_trace *t, PyCodeObject *co)
{
    if (cdy_tls_state.fullgraph)
        return "fullgraph=True";
    if (t->meta_factory)
        return "the graph makes a tensor on the meta device";
    if (t->training && t->grad_enabled)
        return "a training graph (forward and backward) does not resume yet";
    PyObject *on = cdy_config_get("resume_after_break");
    int off = on && !PyObject_IsTrue(on);
    Py_XDECREF(on);
    PyErr_Clear();
    if (off)
        return "config.resume_after_break is off";
    if (co->co_ncellvars)
        return "the frame has cell variables (a function it makes closes over them)";
    if (co->co_nfreevars && makes_function(co))
        return "the frame has free variables and makes a function";
    cdy_pv_code c;
    PyObject *bytes = code_units(co, &c);
    if (!bytes)
        return "its bytecode cannot be read";
    cdy_pv_instr d, j;
    int kw_tos, call = cdy_pv_decode(&c, t->stop_top_pc, &d) ? -1 : call_of(&d, &kw_tos);
    int jump = call < 0 && t->stop_top_pc == d.start ? jump_of(&c, &d, &j) : -1;
    Py_DECREF(bytes);
    if (call < 0 && jump < 0)
        return "the break is not at a call or a conditional jump";
    if (in_loop(co, t->stop_top_pc))
        return "the break is inside a loop (a resume function per iteration would nest frames)";
    int h = in_handler_block(co, t->stop_top_pc);
    if (h)
        return h < 0 ? "its bytecode cannot be decoded" : "the break is inside a try or with block";
    return NULL;
}

/* See trace.h: 1 if t stopped at a break its frame can resume after; else
 * 0, with the reason why not appended to a break's reason. */
int cdy_brk_resumable(cdy_trace *t, PyCodeObject *co)
{
    if (t->status != CDY_TRACE_UNSUPPORTED || t->stop_top_count <= 0 ||
        cdy_reasons[t->reason_code].cat != CDY_RCAT_UNSUPPORTED)
        return 0;
    const char *why = why_not(t, co);
    if (why)
        no_resume(t, co, why);
    return !why;
}

/* See trace.h: the second trace could not end at the break (t): first is
 * restored; say why. */
void cdy_brk_log_no_resume(cdy_trace *t, cdy_trace *first, PyCodeObject *co)
{
    char why[CDY_ERRLEN];
    snprintf(why, sizeof(why), "%s", t->status == CDY_TRACE_OK ? "the trace did not reach the break again"
                                                                : t->reason);
    no_resume(first, co, why);
}

/* The description of v for the transformed code: a tensor the frame read is
 * read again from its source (the same object); NULL when stopped. */
static cdy_ret *brk_ret(tracer *tr, tvar *v)
{
    if (v->kind == TV_TENSOR && v->src && v->src->kind != CDY_SRC_DEREF) {
        cdy_ret *r = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_ret));
        if (!r) {
            cdy_tr_stop(tr, OUT_OF_MEMORY);
            return NULL;
        }
        r->kind = CDY_RET_SOURCE;
        r->src = v->src;
        return r;
    }
    return cdy_tr_make_ret(tr, v);
}

/* The value of local slot i at the break: its tvar, a source for an argument
 * the trace never read, or NULL when it is unbound; *failed on a stop. */
static cdy_ret *local_ret(tracer *tr, int i, int *failed)
{
    tvar *v = i < tr->co->co_nlocals ? tr->locals[i] : NULL;
    if (v && v->kind == TV_NULL)
        return NULL;
    if (v) {
        cdy_ret *r = brk_ret(tr, v);
        *failed |= !r;
        return r;
    }
    int free = i >= tr->co->co_nlocals;   /* a free variable (the code has no cells) */
    if (!free && (!tr->frame_locals || i >= cdy_code_nargslots(tr->co) || !tr->frame_locals[i]))
        return NULL;
    cdy_src *s = cdy_src_new(tr, free ? CDY_SRC_DEREF : CDY_SRC_LOCAL);
    cdy_ret *r = s ? cdy_arena_alloc(&tr->t->arena, sizeof(cdy_ret)) : NULL;
    if (!r) {
        *failed = 1;
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    s->slot = free ? i - tr->co->co_nlocals : i;
    r->kind = CDY_RET_SOURCE;
    r->src = s;
    return r;
}

/* The callable of a call pair (lower, upper) and the tvar prepended to its
 * arguments (or NULL), as op_call reads them: a bound method (a tensor or
 * container method, a Python method, a builtin method of super()) becomes
 * its function, self first.  NULL when stopped. */
static tvar *pair_callable(tracer *tr, tvar *lower, tvar *upper, tvar **self)
{
    tvar *c = lower->kind == TV_NULL ? upper : lower;
    *self = lower->kind != TV_NULL && upper->kind != TV_NULL ? upper : NULL;
    if (c->kind == TV_NULL) {
        cdy_tr_stop(tr, RESUME_VALUE_KIND);
        return NULL;
    }
    if (c->kind != TV_METHOD && c->kind != TV_BOUND && c->kind != TV_BMETH)
        return c;
    if (!*self)
        *self = c->self;
    PyObject *tp = c->self->kind == TV_TENSOR ? (PyObject *)c->self->tp : cdy_tvar_type(c->self);
    PyObject *fn = c->kind == TV_METHOD ? PyObject_GetAttr(tp, c->obj) : Py_NewRef(c->obj);
    if (!fn) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    return cdy_tv_const(tr, fn);   /* a fixed function, passed as a constant */
}

/* 1 if v holds (at any depth) a list, dict or set the trace made that seen[]
 * already holds (added otherwise): rebuilt twice, it would be two objects. */
static int shared_container(tvar *v, tvar **seen, int *nseen, int cap)
{
    if (!v || (v->kind != TV_LIST && v->kind != TV_DICT && v->kind != TV_SET &&
               v->kind != TV_TUPLE) || (v->src && v->src->kind != CDY_SRC_DEREF))
        return 0;
    if (v->kind != TV_TUPLE) {
        for (int i = 0; i < *nseen; i++)
            if (seen[i] == v)
                return 1;
        if (*nseen >= cap)
            return 1;   /* too many to check: treated as shared */
        seen[(*nseen)++] = v;
    }
    for (int i = 0; v->kind != TV_SET && i < v->n; i++)
        if (shared_container(v->items[i], seen, nseen, cap))
            return 1;
    return 0;
}

/* 1 if a container the trace made is among the break's values twice. */
static int any_shared(tracer *tr, int top)
{
    tvar *seen[256];
    int n = 0;
    for (int i = 0; i < tr->nlocals; i++)
        if (tr->locals[i] && shared_container(tr->locals[i], seen, &n, 256))
            return 1;
    for (int i = 0; i < top; i++)
        if (shared_container(tr->stack[i], seen, &n, 256))
            return 1;
    return 0;
}

/* Count the tensors the break's values may add as graph outputs. */
static int count_outputs(tracer *tr, int top)
{
    int n = cdy_mut_extra_outputs(tr) + 1;
    for (int i = 0; i < tr->nlocals; i++)
        n += tr->locals[i] ? cdy_tv_count_tensors(tr->locals[i]) : 0;
    for (int i = 0; i < top; i++)
        n += cdy_tv_count_tensors(tr->stack[i]);
    return n;
}

/* Describe the call's callable and arguments (stack[base..top)) in b; 0 or -1. */
static int capture_call(tracer *tr, cdy_break *b, int base, int top, int nargs)
{
    tvar *self, *c = pair_callable(tr, tr->stack[base], tr->stack[base + 1], &self);
    if (!c)
        return -1;
    b->nargs = nargs + (self != NULL);
    b->args = cdy_arena_alloc(&tr->t->arena, sizeof(cdy_ret *) * (size_t)(b->nargs + 1));
    if (!b->args)
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    if (!(b->callable = brk_ret(tr, c)))
        return -1;
    int k = 0;
    if (self && !(b->args[k++] = brk_ret(tr, self)))
        return -1;
    for (int i = base + 2; i < top; i++)
        if (!(b->args[k++] = brk_ret(tr, tr->stack[i])))
            return -1;
    return 0;
}

/* Describe the stack below the call pair and the locals in b; 0 or -1. */
static int capture_frame(tracer *tr, cdy_break *b, int base)
{
    cdy_arena *ar = &tr->t->arena;
    b->nbelow = base;
    b->nlocals = tr->nlocals;
    b->below = cdy_arena_alloc(ar, sizeof(cdy_ret *) * (size_t)(base + 1));
    b->locals = cdy_arena_alloc(ar, sizeof(cdy_ret *) * (size_t)(tr->nlocals + 1));
    if (!b->below || !b->locals)
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    for (int i = 0; i < base; i++)
        if (tr->stack[i]->kind != TV_NULL && !(b->below[i] = brk_ret(tr, tr->stack[i])))
            return -1;
    int failed = 0;
    for (int i = 0; i < tr->nlocals && !failed; i++)
        b->locals[i] = local_ret(tr, i, &failed);
    return failed ? -1 : 0;
}

/* End the trace before the data-dependent conditional jump j (at d: j
 * itself or 3.13's TO_BOOL before it) on the top of the stack; 0 or -1. */
static int capture_jump(tracer *tr, const cdy_pv_instr *d, const cdy_pv_instr *j)
{
    cdy_trace *t = tr->t;
    if (tr->sp < 1 || any_shared(tr, tr->sp))
        return cdy_tr_stop(tr, RESUME_VALUE_KIND);
    cdy_break *b = cdy_arena_alloc(&t->arena, sizeof(cdy_break));
    t->graph.outputs = cdy_arena_alloc(&t->arena, sizeof(int) * (size_t)count_outputs(tr, tr->sp));
    if (!b || !t->graph.outputs)
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    b->pc = d->start;
    b->next = j->next;
    b->target = j->jump;
    b->jump_op = j->op;
    if (capture_frame(tr, b, tr->sp - 1) || !(b->cond = brk_ret(tr, tr->stack[tr->sp - 1])))
        return -1;
    t->return_line = PyCode_Addr2Line(tr->co, d->pc * 2);
    if (cdy_mut_finish(tr, cdy_tr_make_ret))
        return -1;
    t->brk = b;
    return 0;
}

/* Specialize the sizes the code read that the code after the break sees: the
 * ints on the frames' stacks (the call's arguments, the values below it) and
 * in the locals and cells, which the resume function receives as constants.
 * A size that only fed the graph (a view's shape, an attention's length)
 * stays symbolic; one stored into an object was pinned at its store. */
static void pin_escaping(tracer *tr, const char *why)
{
    cdy_sx_pin_frame(tr, why);
    for (int i = 0; tr->locals && i < tr->nlocals; i++)
        if (tr->locals[i])
            cdy_sx_pin_deep(tr, tr->locals[i], why);
}

/* See trace.h: end the trace before the top frame's CALL or conditional
 * jump d (t->brk); 0 or -1. */
int cdy_brk_capture(tracer *tr, const cdy_pv_instr *d)
{
    cdy_trace *t = tr->t;
    pin_escaping(tr, "the code read the size before a graph break and kept it");
    int kw_tos, nargs = call_of(d, &kw_tos);
    cdy_pv_instr j;
    cdy_pv_code c = {tr->co, tr->code, tr->ncode};
    if (nargs < 0 && !jump_of(&c, d, &j))
        return capture_jump(tr, d, &j);
    int top = tr->sp - kw_tos;   /* the call's values end below 3.13's names tuple */
    int base = top - nargs - 2;
    if (nargs < 0 || base < 0 || any_shared(tr, top))
        return cdy_tr_stop(tr, RESUME_VALUE_KIND);
    cdy_break *b = cdy_arena_alloc(&t->arena, sizeof(cdy_break));
    t->graph.outputs = cdy_arena_alloc(&t->arena, sizeof(int) * (size_t)count_outputs(tr, tr->sp));
    if (!b || !t->graph.outputs)
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    b->pc = d->start;
    b->next = d->next;
    b->kwnames = kw_tos ? tr->stack[tr->sp - 1]->obj : tr->kwnames;
    if (b->kwnames && !PyTuple_Check(b->kwnames))
        return cdy_tr_stop(tr, BAD_KW_NAMES);
    if (capture_frame(tr, b, base) || capture_call(tr, b, base, top, nargs))
        return -1;
    t->return_line = PyCode_Addr2Line(tr->co, d->pc * 2);
    if (cdy_mut_finish(tr, cdy_tr_make_ret))
        return -1;
    t->brk = b;
    return 0;
}
