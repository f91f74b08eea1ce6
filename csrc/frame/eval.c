/* eval.c - the PEP 523 frame hook, per-code cache entries, and the
 * OptimizedFunction wrapper that turns the hook on for the calls it makes.
 *
 * The hook is installed interpreter-wide only while at least one optimized
 * call runs (3.11 stops inlining Python calls while any hook is set), and it
 * acts only on threads whose thread-local state says an optimized call is in
 * progress.  For a fresh frame of a traceable code object it checks the
 * guards of each cache entry; a hit calls the entry's transformed code (a
 * function made from it, so CPython builds and clears that shadow frame)
 * with the frame's argument slots; a miss traces and compiles.  Anything we
 * do not handle runs _PyEval_EvalFrameDefault on the frame untouched.     */
#define Py_BUILD_CORE 1
#define CDY_PC_FRAME 1   /* pyver/pycompat.h's frame internals */
#include "frame/frame.h"
#include "frame/dynamic.h"
#include "pipeline.h"
#include "runtime/runtime.h"
#include "trace/reasons.h"
#include "pyver/pycompat.h"
#undef Py_BUILD_CORE

#include <string.h>
#include <time.h>

extern PyObject *cdy_module_type;    /* torch.nn.Module (trace/vars.c) */

_Thread_local cdy_tls cdy_tls_state;
_Thread_local const void *cdy_graph_failed;
cdy_stats_t cdy_stats;

enum { CODE_NEW = 0, CODE_TRACE, CODE_SKIP, CODE_SHADOW };

typedef struct cdy_entry {
    struct cdy_entry *next;
    cdy_guards guards;
    PyObject *shadow_fn;     /* NULL: this entry runs the frame eagerly */
    PyObject *globals;       /* where fn_name was stored */
    PyObject *fn_name;
    int backend;
    PyObject *compiled;      /* the compiled graph the transformed code calls, or NULL */
    PyObject *direct;        /* the compiled graph, when a hit can call it without a frame */
    int ninputs;             /* then its inputs' sources (owned copies) */
    cdy_src *inputs;
    int rerun_noted;         /* an eager rerun of its frame was recorded (explain) */
    uintptr_t inst;          /* id of the nn.Module the frame ran on (its first
                                argument), 0 for other frames: the recompile limit
                                counts entries per module instance */
} cdy_entry;

typedef struct cdy_extra {
    int state;
    int nentries;
    int limit_warned;
    int nargslots;
    int forced;              /* handed to optimize: traced wherever it lives */
    int nframed;             /* entries without a frame-free call (direct == NULL) */
    cdy_entry *entries;
    PyObject *eager_record;  /* the latest record of its frame running eagerly, or NULL */
    int result_slot;         /* a resume function's (frame/resume.c) local slot of the
                                breaking call's result, or -1 */
    PyCodeObject *code;      /* borrowed: the extra dies with the code */
    struct cdy_extra *prev, *next;   /* all extras, for reset() */
} cdy_extra;

static Py_ssize_t extra_index = -1;
static cdy_extra *all_extras;
static int active_calls;
static _PyFrameEvalFunction saved_eval;
static PyObject *skip_prefixes;      /* tuple of str */

/* ---- cache entries ----------------------------------------------------- */

/* Free an entry and drop its compiled function from the globals. */
static void entry_free(cdy_entry *e)
{
    if (e->globals && e->fn_name) {
        if (PyDict_DelItem(e->globals, e->fn_name))
            PyErr_Clear();
    }
    cdy_guards_free(&e->guards);
    for (int i = 0; i < e->ninputs; i++)
        cdy_src_clear(&e->inputs[i]);
    PyMem_Free(e->inputs);
    Py_XDECREF(e->direct);
    Py_XDECREF(e->compiled);
    Py_XDECREF(e->shadow_fn);
    Py_XDECREF(e->globals);
    Py_XDECREF(e->fn_name);
    PyMem_Free(e);
}

/* Free every entry of x. */
static void extra_clear_entries(cdy_extra *x)
{
    while (x->entries) {
        cdy_entry *e = x->entries;
        x->entries = e->next;
        entry_free(e);
    }
    x->nentries = 0;
    x->nframed = 0;
    x->limit_warned = 0;
    Py_CLEAR(x->eager_record);
}

/* Destructor CPython calls when the code object dies (p is NULL when only
 * another extra index, e.g. TorchDynamo's, was set on the code). */
static void extra_free(void *p)
{
    cdy_extra *x = p;
    if (!x)
        return;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    extra_clear_entries(x);
    if (x->prev)
        x->prev->next = x->next;
    else if (all_extras == x)
        all_extras = x->next;
    if (x->next)
        x->next->prev = x->prev;
    PyMem_Free(x);
    PyErr_Restore(et, ev, tb);
}

/* 1 if co is a generator, coroutine or module-level code: never traced. */
static int code_is_skipped_by_flags(PyCodeObject *co)
{
    const int noflags = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE;
    return (co->co_flags & noflags) || !(co->co_flags & CO_OPTIMIZED);
}

static int code_is_skipped_by_file(PyCodeObject *co);

/* 1 if the code is never traced: by its flags, or its file (torch, stdlib). */
static int code_is_skipped(PyCodeObject *co)
{
    if (code_is_skipped_by_flags(co))
        return 1;
    return code_is_skipped_by_file(co);
}

/* 1 if co's file is one whose code is never traced (torch, stdlib). */
static int code_is_skipped_by_file(PyCodeObject *co)
{
    if (!skip_prefixes)
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(skip_prefixes); i++) {
        Py_ssize_t r = PyUnicode_Tailmatch(co->co_filename, PyTuple_GET_ITEM(skip_prefixes, i),
                                           0, PY_SSIZE_T_MAX, -1);
        if (r < 0)
            PyErr_Clear();
        if (r > 0)
            return 1;
    }
    return 0;
}

/* The extra state of co, created on first sight; NULL on failure. */
/* The state of a code object the hook has not met before: skipped where
 * its file or flags say so, else traced. */
static int first_state(PyCodeObject *co)
{
    return code_is_skipped(co) || code_is_skipped_by_flags(co) ? CODE_SKIP : CODE_TRACE;
}

static cdy_extra *get_extra(PyCodeObject *co, int state_if_new)
{
    void *p = NULL;
    if (_PyCode_GetExtra((PyObject *)co, extra_index, &p))
        return NULL;
    if (p)
        return p;
    cdy_extra *x = PyMem_Calloc(1, sizeof(cdy_extra));
    if (!x)
        return NULL;
    x->code = co;
    x->result_slot = -1;
    x->nargslots = cdy_code_nargslots(co);
    x->state = state_if_new >= 0 ? state_if_new : first_state(co);
    if (x->state == CODE_TRACE && code_is_skipped_by_flags(co))
        x->state = CODE_SKIP;
    if (_PyCode_SetExtra((PyObject *)co, extra_index, x)) {
        PyMem_Free(x);
        return NULL;
    }
    x->next = all_extras;
    if (all_extras)
        all_extras->prev = x;
    all_extras = x;
    return x;
}

/* ---- eager frames, for explain ------------------------------------------ */

/* While explain runs (explain_collect(True)): the records of the frames that
 * ran eagerly, each once; NULL otherwise. */
static PyObject *explain_seen;

/* Note, while explain collects, that x's frame ran eagerly (for its latest
 * recorded reason: a frame that broke, was skipped or hit the recompile
 * limit on an earlier call runs eagerly again without a new record). */
static void explain_note(const cdy_extra *x)
{
    if (explain_seen && x && x->eager_record &&
        PySequence_Contains(explain_seen, x->eager_record) == 0 &&
        PyList_Append(explain_seen, x->eager_record))
        PyErr_Clear();
}

/* Record that co's frame runs eagerly (cdy_record_eager: explain's
 * eager_frames, with frame_location the function's FILE:LINE, where location
 * is the stop's), kept as its latest reason. */
static void record_eager(PyCodeObject *co, const char *reason, int code, PyObject *file,
                         int line)
{
    PyObject *r = cdy_record_eager(reason, code, file, line, PyUnicode_AsUTF8(co->co_name));
    PyObject *where = r && PyDict_Check(r) ? PyUnicode_FromFormat("%U:%d", co->co_filename,
                                                                   co->co_firstlineno) : NULL;
    if (where && PyDict_SetItemString(r, "frame_location", where))   /* the function's place */
        PyErr_Clear();
    Py_XDECREF(where);
    cdy_extra *x = r ? get_extra(co, -1) : NULL;
    if (x) {
        Py_XSETREF(x->eager_record, r);
        explain_note(x);
    } else {
        Py_XDECREF(r);
    }
    PyErr_Clear();
}

/* A fresh frame of x's code, which is skipped, runs: explain notes it (a frame
 * skipped for having no tensor op on an earlier call), and user code skipped
 * for its flags (a generator expression a frame that runs eagerly iterates) is
 * recorded the first time (GENERATOR_CODE); torch's and the stdlib's are not. */
static void note_skipped(cdy_extra *x)
{
    PyCodeObject *co = x->code;
    if (!x->eager_record && code_is_skipped_by_flags(co) && !code_is_skipped_by_file(co)) {
        record_eager(co, cdy_rt_GENERATOR_CODE, CDY_R_GENERATOR_CODE, co->co_filename,
                     co->co_firstlineno);
        return;
    }
    explain_note(x);
}

/* ---- logging helpers ------------------------------------------------------- */

/* Recompile log: function, place, and the first failing guard. */
static void log_recompile(PyCodeObject *co, const char *why)
{
    if (!cdy_log_on("recompiles"))
        return;
    cdy_log("recompiles", "Recompiling function %s in %s:%d\n"
            "    triggered by the following guard failure(s):\n    - %s",
            PyUnicode_AsUTF8(co->co_name), PyUnicode_AsUTF8(co->co_filename),
            co->co_firstlineno, why);
}

/* The per-entry logs: guards, bytecode, output code. */
static void log_new_entry(PyCodeObject *co, cdy_entry *e, PyObject *code, PyObject *compiled)
{
    if (cdy_log_on("guards")) {
        PyObject *txt = cdy_guards_text(&e->guards);
        if (txt)
            cdy_log("guards", "GUARDS for %s (%s:%d):\n%s", PyUnicode_AsUTF8(co->co_name),
                    PyUnicode_AsUTF8(co->co_filename), co->co_firstlineno, PyUnicode_AsUTF8(txt));
        Py_XDECREF(txt);
        PyErr_Clear();
    }
    if (code && cdy_log_on("bytecode")) {
        PyObject *r = cdy_py_call("log_bytecode", "OO", (PyObject *)co, code);
        Py_XDECREF(r);
        PyErr_Clear();
    }
    if (compiled && cdy_log_on("output_code")) {
        PyObject *src = PyObject_GetAttrString(compiled, "source");
        if (src && PyUnicode_Check(src))
            cdy_log("output_code", "Output code of %s (%s):\n%s", PyUnicode_AsUTF8(e->fn_name),
                    PyUnicode_AsUTF8(co->co_name), PyUnicode_AsUTF8(src));
        Py_XDECREF(src);
        PyErr_Clear();
    }
}

/* ---- conversion: trace + compile + transformed code --------------------- */

/* Seconds on the monotonic clock. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Tell the package about a new compiled entry (explain, debug directory). */
static void report_compile(PyCodeObject *co, cdy_trace *t, cdy_entry *e, PyObject *code,
                           PyObject *compiled, double seconds)
{
    int nodes = 0;
    for (int v = 0; v < t->graph.nvalues; v++)
        nodes += t->graph.values[v].kind == CDY_VAL_NODE;
    PyObject *graph = cdy_graph_text(t, co);
    PyObject *guards = cdy_guards_text(&e->guards);
    PyObject *src = compiled ? PyObject_GetAttrString(compiled, "source") : NULL;
    PyErr_Clear();
    PyObject *info = Py_BuildValue(
        "{s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:s,s:d,s:i,s:i,s:O}", "name", e->fn_name, "code",
        (PyObject *)co, "new_code", code ? code : Py_None, "graph", graph ? graph : Py_None,
        "guards", guards ? guards : Py_None, "source", src ? src : Py_None, "compiled",
        compiled ? compiled : Py_None, "backend", e->backend == CDY_BACKEND_EAGER ? "eager" : "c",
        "compile_time_s", seconds, "op_count", nodes, "num_inputs", t->graph.ninputs,
        "globals", e->globals);
    if (info) {
        PyObject *r = cdy_py_call("on_compile", "O", info);
        Py_XDECREF(r);
    }
    Py_XDECREF(info);
    Py_XDECREF(graph);
    Py_XDECREF(guards);
    Py_XDECREF(src);
    PyErr_Clear();
}

/* _C.start_standby(): start the standby compiler (compiler/cc.c) for the
 * first build, when cdynamo.optimize makes a function to compile. */
PyObject *cdy_py_start_standby(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *cc, *dir;
    cdy_cc_opts opts;
    if (!cdy_pipeline_cc_opts(&opts, &cc, &dir))
        cdy_cc_standby(&opts);
    Py_XDECREF(cc);
    Py_XDECREF(dir);
    PyErr_Clear();
    Py_RETURN_NONE;
}

/* Order guards cheapest first, keeping trace order within a kind: constant,
 * type and identity checks fail fast, so an entry for another layer or
 * setting is rejected before its tensors are read. */
static void sort_guards(cdy_guards *gs)
{
    for (int i = 1; i < gs->n; i++) {
        cdy_guard g = gs->items[i];
        int j = i;
        while (j > 0 && gs->items[j - 1].kind == CDY_GUARD_TENSOR && g.kind != CDY_GUARD_TENSOR) {
            gs->items[j] = gs->items[j - 1];
            j--;
        }
        gs->items[j] = g;
    }
}

/* Make t's guards into a new entry (moved); NULL on OOM. */
static cdy_entry *entry_new(cdy_trace *t, int backend)
{
    cdy_entry *e = PyMem_Calloc(1, sizeof(cdy_entry));
    if (!e)
        return NULL;
    e->guards = t->guards;
    memset(&t->guards, 0, sizeof(t->guards));
    sort_guards(&e->guards);
    e->backend = backend;
    return e;
}

/* 1 if t returns the tuple of its graph's outputs in order, the compiled
 * graph's own result, and stores nothing. */
static int returns_outs(const cdy_trace *t)
{
    const cdy_ret *r = t->ret;
    if (!r || r->kind != CDY_RET_TUPLE || r->n != t->graph.noutputs || t->nstores || t->nafter ||
        !t->graph.noutputs)
        return 0;
    for (int i = 0; i < r->n; i++)
        if (r->items[i]->kind != CDY_RET_OUTPUT || r->items[i]->index != i)
            return 0;
    return 1;
}

/* 1 if a source reads an argument slot (or no local at all) of co. */
static int src_in_args(const cdy_src *s, PyCodeObject *co)
{
    return s->kind != CDY_SRC_LOCAL || s->slot < co->co_argcount;
}

/* 1 if hits of an entry with guards gs for t can skip the frame: co takes
 * only positional-or-keyword parameters, and every guard and graph input
 * reads them, globals or closure cells. */
static int direct_ok(PyCodeObject *co, const cdy_trace *t, const cdy_guards *gs)
{
    if (cdy_code_nargslots(co) != co->co_argcount)
        return 0;
    for (int i = 0; i < gs->n; i++)
        if (!src_in_args(&gs->items[i].src, co))
            return 0;
    for (int i = 0; i < t->graph.ninputs; i++)
        if (!src_in_args(&t->input_srcs[i], co))
            return 0;
    return 1;
}

/* Let e's hits call compiled directly with t's inputs (on OOM they keep the frame). */
static void entry_set_direct(cdy_entry *e, const cdy_trace *t, PyObject *compiled)
{
    int n = t->graph.ninputs;
    e->inputs = PyMem_Calloc((size_t)(n ? n : 1), sizeof(cdy_src));
    if (!e->inputs)
        return;
    for (int i = 0; i < n; i++)
        cdy_src_copy(&e->inputs[i], &t->input_srcs[i]);
    e->ninputs = n;
    e->direct = Py_NewRef(compiled);
}

/* Guard that the OpenMP thread count stays n (kernels are built for it); 0 or -1. */
static int guard_threads(cdy_entry *e, int n)
{
    cdy_src none = {0};
    cdy_guard *g = cdy_guards_add(&e->guards, CDY_GUARD_NUM_THREADS, &none, "num_threads");
    if (!g)
        return -1;
    g->ndim = n;
    sort_guards(&e->guards);
    return 0;
}

/* Fill e with the compiled code of t (the pipeline's result p: its callable
 * is taken); on failure e stays an eager entry and a warning names the cause. */
static void entry_compile(cdy_entry *e, cdy_trace *t, cdy_frame *frame, double t0, cdy_pipe *p)
{
    PyCodeObject *co = cdy_pc_frame_code(frame);
    char err[CDY_ERRLEN] = "";
    int call_graph = t->graph.noutputs > 0;
    PyObject *compiled = p->compiled, *code = NULL;
    p->compiled = NULL;
    if (p->failed) {
        snprintf(err, sizeof(err), "%s", p->err);
        goto fail;
    }
    if (compiled && p->threads && guard_threads(e, p->threads))
        goto pyfail;
    e->fn_name = PyUnicode_FromString(p->name);
    e->globals = Py_NewRef(frame->f_globals);
    if (!e->fn_name || (compiled && PyDict_SetItem(e->globals, e->fn_name, compiled)))
        goto pyfail;
    code = cdy_bytecode_build(co, t, e->fn_name, p->single, call_graph, frame->f_globals);
    if (!code)
        goto pyfail;
    e->shadow_fn = PyFunction_New(code, frame->f_globals);
    if (!e->shadow_fn)
        goto pyfail;
    if (!get_extra((PyCodeObject *)code, CODE_SHADOW))
        goto pyfail;
    e->compiled = Py_XNewRef(compiled);
    if ((p->single || returns_outs(t)) && direct_ok(co, t, &e->guards))
        entry_set_direct(e, t, compiled);
    cdy_stats.frames_compiled++;
    log_new_entry(co, e, code, compiled);
    report_compile(co, t, e, code, compiled, now_s() - t0);
    Py_XDECREF(compiled);
    Py_DECREF(code);
    return;
pyfail:
    {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyObject *s = ev ? PyObject_Str(ev) : NULL;
        snprintf(err, sizeof(err), "building the transformed code failed: %s",
                 s ? PyUnicode_AsUTF8(s) : "unknown error");
        Py_XDECREF(s);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        PyErr_Clear();
    }
fail:
    Py_XDECREF(compiled);
    Py_XDECREF(code);
    Py_CLEAR(e->shadow_fn);
    cdy_stats.fallbacks++;
    record_eager(co, err, CDY_R_COMPILE_FAILED, co->co_filename, co->co_firstlineno);
    PyObject *r = cdy_py_call("warn_fallback", "Os", co->co_name, err);
    Py_XDECREF(r);
    PyErr_Clear();
}

/* Report a trace that stopped: stats, the recorded break (explain), the
 * break log; raise Unsupported under fullgraph for a stop other than the
 * user's or torch's exception (returns -1 then). */
static int report_trace_stop(cdy_trace *t, PyCodeObject *co)
{
    cdy_stats.graph_breaks++;
    cdy_stats.fallbacks++;
    PyObject *file = t->reason_file ? t->reason_file : co->co_filename;
    const char *fn = PyUnicode_AsUTF8(co->co_name);
    cdy_record_break(t->reason, t->reason_code, file, t->reason_line, fn);
    record_eager(co, t->reason, t->reason_code, file, t->reason_line);
    if (cdy_log_on("graph_breaks"))
        cdy_log("graph_breaks", "Graph break in %s at %s:%d: [%s] %s (the frame runs eagerly)",
                fn, PyUnicode_AsUTF8(file), t->reason_line, cdy_reason_code(t->reason_code),
                t->reason);
    if (cdy_tls_state.fullgraph && t->status == CDY_TRACE_UNSUPPORTED) {
        PyObject *r = cdy_py_call("raise_unsupported", "sOis", t->reason, file, t->reason_line,
                                  cdy_reason_code(t->reason_code));
        Py_XDECREF(r);
        return -1;
    }
    return 0;
}

/* Report a graph break the frame resumes after (trace/breaks.c): stats,
 * the recorded break (explain), the break log. */
static void report_resumed_break(cdy_trace *t, PyCodeObject *co)
{
    cdy_stats.graph_breaks++;
    PyObject *file = t->reason_file ? t->reason_file : co->co_filename;
    const char *fn = PyUnicode_AsUTF8(co->co_name);
    cdy_record_break(t->reason, t->reason_code, file, t->reason_line, fn);
    if (cdy_log_on("graph_breaks"))
        cdy_log("graph_breaks", "Graph break in %s at %s:%d: [%s] %s (resumed after the call)",
                fn, PyUnicode_AsUTF8(file), t->reason_line, cdy_reason_code(t->reason_code),
                t->reason);
    PyErr_Clear();
}

/* A frame with no tensor op, skipped from now on: explain's eager_frames
 * name it, with the stop that ended its trace if one did. */
static void report_skip(cdy_trace *t, PyCodeObject *co)
{
    int stopped = t->status != CDY_TRACE_OK;
    PyObject *file = stopped && t->reason_file ? t->reason_file : co->co_filename;
    int line = stopped ? t->reason_line : co->co_firstlineno;
    const char *reason = stopped ? t->reason : cdy_rt_NO_TENSOR_OPS;
    int code = stopped ? t->reason_code : (int)CDY_R_NO_TENSOR_OPS;
    record_eager(co, reason, code, file, line);
    if (cdy_log_on("debug"))
        cdy_log("debug", "skipping %s (%s:%d): no tensor ops; [%s] %s",
                PyUnicode_AsUTF8(co->co_name), PyUnicode_AsUTF8(co->co_filename),
                co->co_firstlineno, cdy_reason_code(code), reason);
}

/* The identity of the nn.Module code co runs on (its first argument in
 * locals), or 0. */
static uintptr_t code_instance(PyCodeObject *co, PyObject *const *locals)
{
    PyObject *self = co->co_argcount > 0 ? locals[0] : NULL;
    return self && cdy_module_type && PyObject_TypeCheck(self, (PyTypeObject *)cdy_module_type)
               ? (uintptr_t)self : 0;
}

/* The identity of the nn.Module a frame runs on, or 0. */
static uintptr_t frame_instance(cdy_frame *frame)
{
    return code_instance(cdy_pc_frame_code(frame), frame->localsplus);
}

/* The first entry of x for backend whose guards hold, or NULL; *first gets
 * the first entry of the backend (for messages).  The entries made for the
 * same nn.Module instance are tried first: a stack of layers that differ in
 * a constant (layer_idx) finds its own entry without failing the others. */
static cdy_entry *find_entry(cdy_extra *x, int backend, PyObject *const *locals,
                             PyObject *globals, PyObject *builtins, PyObject *closure,
                             uintptr_t inst, cdy_entry **first)
{
    *first = NULL;
    for (int pass = inst ? 0 : 1; pass < 2; pass++)
        for (cdy_entry *e = x->entries; e; e = e->next) {
            if (e->backend != backend || (inst && (pass == 0) != (e->inst == inst)))
                continue;
            *first = *first ? *first : e;
            if (cdy_guards_check(&e->guards, locals, globals, builtins, closure, NULL, 0) > 0)
                return e;
        }
    return NULL;
}

/* 1 if the SYM guard token (runtime.h) was set by one of e's guards. */
static int entry_owns_token(const cdy_entry *e)
{
    for (int i = 0; cdy_sym_tok.owner && i < e->guards.n; i++)
        if (e->guards.items[i].kind == CDY_GUARD_SYM &&
            cdy_sym_tok.owner == (const void *)&e->guards.items[i].sym->s)
            return 1;
    return 0;
}

/* The dynamic-shapes policy's view of a compile of frame (x's entries so far
 * into prev, which has room for x->nentries). */
static cdy_dyn_ctx dyn_ctx(cdy_extra *x, cdy_frame *frame, int mode, const cdy_guards **prev)
{
    cdy_dyn_ctx c = {.mode = mode, .prev = prev, .locals = frame->localsplus,
                     .globals = frame->f_globals, .builtins = frame->f_builtins,
                     .closure = cdy_pc_frame_func(frame)->func_closure};
    for (cdy_entry *e = x->entries; e; e = e->next)
        prev[c.nprev++] = &e->guards;
    PyObject *v = mode == -1 ? cdy_config_get("automatic_dynamic_shapes") : NULL;
    c.automatic = v ? PyObject_IsTrue(v) == 1 : 0;
    Py_XDECREF(v);
    PyErr_Clear();
    return c;
}

/* e (an eager entry: its trace stopped) matches any size of the dims that
 * changed since the code's earlier entries (cdy_dyn_relax_eager); logged. */
static void relax_eager(cdy_entry *e, const cdy_dyn_ctx *c, PyCodeObject *co)
{
    int i;
    unsigned bits = cdy_dyn_relax_eager(&e->guards, c, &i);
    if (!bits || !cdy_log_on("recompiles"))
        return;
    cdy_log("recompiles", "%s (%s:%d) runs eagerly at any size of '%s' (dims mask 0x%x): "
            "its trace stopped where it cannot resume", PyUnicode_AsUTF8(co->co_name),
            PyUnicode_AsUTF8(co->co_filename), co->co_firstlineno, e->guards.items[i].desc, bits);
}

/* Trace and compile the frame into a new entry of x (prepended).  Returns
 * the entry, or NULL when the frame should run eagerly without one; -1 in
 * *raise when an exception is set for the caller (fullgraph). */
static cdy_entry *convert_frame(cdy_frame *frame, cdy_extra *x, int *raise)
{
    PyCodeObject *co = cdy_pc_frame_code(frame);
    cdy_trace *t = PyMem_Calloc(1, sizeof(cdy_trace));
    if (!t)
        return NULL;
    cdy_tls saved = cdy_tls_state;
    cdy_tls_state.enabled = 0;   /* no recursion into the hook while tracing or compiling */
    double t0 = now_s();
    PyObject *closure = cdy_pc_frame_func(frame)->func_closure;
    const cdy_guards *prev[x->nentries + 1];
    cdy_dyn_ctx dyn = dyn_ctx(x, frame, saved.dynamic, prev);
    cdy_pipe p = {.code = co, .backend = saved.backend, .forced = x->forced,
                  .dyn_of = dyn.mode ? cdy_dyn_policy : NULL, .dyn_ctx = &dyn};
    cdy_optim_set_prev(prev, dyn.nprev);   /* a scheduled lr that changed: an input */
    cdy_sx_int_policy(prev, dyn.nprev, dyn.mode, dyn.automatic);   /* ints that changed */
    cdy_pipeline(&p, t, frame->localsplus, frame->f_globals, frame->f_builtins, closure);
    cdy_optim_set_prev(NULL, 0);
    cdy_sx_int_policy(NULL, 0, 0, 0);
    if (t->status == CDY_TRACE_OK)
        cdy_dyn_log(&dyn, t, &p, co);
    cdy_entry *e = NULL;
    int nodes = 0;
    for (int v = 0; v < t->graph.nvalues; v++)
        nodes += t->graph.values[v].kind == CDY_VAL_NODE;
    if (!nodes && !x->forced && !t->modes_on) {
        /* a frame with no tensor op (a helper the hook met on its own, or before
         * its break: a frame handed to optimize resumes after such a break, others
         * do not - a chain of breaks on numpy values or library objects would
         * make a resume function per call): there is nothing to compile; run
         * it, and its later calls, untouched */
        if (t->brk)
            t->status = CDY_TRACE_UNSUPPORTED;   /* report_skip names the break */
        x->state = CODE_SKIP;
        report_skip(t, co);
    }
    else if (t->status != CDY_TRACE_OK) {
        /* a graph break; or the user's code (or torch on the fakes) raises for
         * these inputs: eager raises it, with the user's traceback.  The
         * entry keeps us from tracing it again */
        if (report_trace_stop(t, co))
            *raise = 1;
        else if ((e = entry_new(t, saved.backend)))
            relax_eager(e, &dyn, co);
    }
    else if ((e = entry_new(t, saved.backend))) {
        if (t->brk)
            report_resumed_break(t, co);
        int relaxed = cdy_dyn_apply(&e->guards, t, &p);
        if (relaxed < 0)
            PyErr_Clear();   /* out of memory for the relations' guard: the compiled
                                graph checks them too (a miss reruns eagerly) */
        if (relaxed >= 0)   /* symbolic dims: batched with their sizes free (the SYM guard
                             * checks them >= 2 and the tensors contiguous) */
            cdy_guards_batch(&e->guards, frame->localsplus, frame->f_globals, frame->f_builtins,
                             closure);
        entry_compile(e, t, frame, t0, &p);
    }
    Py_XDECREF(p.compiled);   /* a frame that does not become an entry */
    cdy_pipe_sym_clear(&p);
    if (e) {
        e->inst = frame_instance(frame);
        e->next = x->entries;
        x->entries = e;
        x->nentries++;
        x->nframed += !e->direct;
    }
    cdy_trace_free(t);
    PyMem_Free(t);
    cdy_tls_state = saved;
    return e;
}

/* ---- the hook ------------------------------------------------------------- */

/* 1 if g is a functools.partial whose first argument is m: a training graph's
 * callable (cdynamo._autograd._Call of _train_apply and its TrainingGraph,
 * which runtime/train_call.c marks when its forward raised). */
static int partial_of(const void *g, const void *m)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);   /* the graph's exception stays pending */
    PyObject *args = PyObject_GetAttrString((PyObject *)g, "args");
    int hit = args && PyTuple_Check(args) && PyTuple_GET_SIZE(args) >= 1 &&
              (const void *)PyTuple_GET_ITEM(args, 0) == m;
    Py_XDECREF(args);
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
    return hit;
}

/* 1 if the call that just returned NULL failed inside compiled graph g
 * with an Exception (not a KeyboardInterrupt or the like); the mark is
 * consumed.  Inputs are then as before the call: a graph writes its mutated
 * inputs back only after its last step. */
static int graph_raised(const void *g)
{
    int hit = g && cdy_graph_failed && PyErr_ExceptionMatches(PyExc_Exception) &&
              (cdy_graph_failed == g || partial_of(g, cdy_graph_failed));
    if (hit)
        cdy_graph_failed = NULL;
    return hit;
}

/* Record (once per entry: explain's eager_frames) that entry e's frame of
 * code co runs again eagerly because its graph raised the pending exception. */
static void note_rerun(cdy_entry *e, PyCodeObject *co)
{
    if (e->rerun_noted) {
        explain_note(get_extra(co, -1));
        PyErr_Clear();
        return;
    }
    e->rerun_noted = 1;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    char msg[CDY_ERRLEN];
    snprintf(msg, sizeof(msg), cdy_rt_EAGER_RERUN,
             et && PyType_Check(et) ? ((PyTypeObject *)et)->tp_name : "?");
    record_eager(co, msg, CDY_R_EAGER_RERUN, co->co_filename, co->co_firstlineno);
    PyErr_Restore(et, ev, tb);
}

/* fn(*args) run eagerly after its compiled graph raised: eager's mutations
 * of the inputs up to the raising op, and eager's exception (or result).
 * The graph's exception is dropped; nested frames run eagerly too. */
static PyObject *rerun_eagerly(PyObject *fn, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames)
{
    PyErr_Clear();
    cdy_stats.eager_reruns++;
    cdy_tls saved = cdy_tls_state;
    cdy_tls_state.enabled = 0;
    PyObject *r = PyObject_Vectorcall(fn, args, nargsf, kwnames);
    cdy_tls_state = saved;
    cdy_graph_failed = NULL;
    return r;
}

/* Call entry e's transformed code with frame's arguments (and the contents
 * of its closure cells, then the closure itself); its result, or NULL with
 * an error. */
static PyObject *call_shadow(cdy_frame *frame, cdy_extra *x, cdy_entry *e)
{
    int nfree = cdy_pc_frame_code(frame)->co_nfreevars;
    if (!nfree)
        return PyObject_Vectorcall(e->shadow_fn, frame->localsplus, (size_t)x->nargslots, NULL);
    PyObject *closure = cdy_pc_frame_func(frame)->func_closure;
    PyObject *stack[64], **args = stack;
    int n = x->nargslots + nfree + 1;   /* the closure last: resume functions close over it */
    if (n > 64 && !(args = PyMem_Malloc(sizeof(PyObject *) * (size_t)n)))
        return PyErr_NoMemory();
    memcpy(args, frame->localsplus, sizeof(PyObject *) * (size_t)x->nargslots);
    for (int i = 0; i < nfree; i++) {
        PyObject *v = closure && i < PyTuple_GET_SIZE(closure) ? PyCell_GET(PyTuple_GET_ITEM(closure, i)) : NULL;
        args[x->nargslots + i] = v ? v : Py_None;
    }
    args[n - 1] = closure ? closure : Py_None;
    PyObject *r = PyObject_Vectorcall(e->shadow_fn, args, (size_t)n, NULL);
    if (args != stack)
        PyMem_Free(args);
    return r;
}

/* The hook's result r for a frame it did not evaluate (it ran other code
 * for it, or raised): the frame is released first (pyver/pycompat.h). */
static PyObject *not_evaluated(PyThreadState *ts, cdy_frame *frame, PyObject *r)
{
    cdy_pc_frame_discard(ts, frame);
    return r;
}

/* Run entry e for frame: its transformed code, or the frame itself; the
 * frame itself, eagerly, when the compiled graph raised (the transformed
 * code calls it first: nothing of the frame has run). */
static PyObject *run_entry(PyThreadState *ts, cdy_frame *frame, cdy_extra *x,
                           cdy_entry *e, int throwflag)
{
    if (!e->shadow_fn) {
        explain_note(x);
        return _PyEval_EvalFrameDefault(ts, frame, throwflag);
    }
    cdy_graph_failed = NULL;
    PyObject *r = call_shadow(frame, x, e);
    if (r || !graph_raised(e->compiled))
        return not_evaluated(ts, frame, r);
    note_rerun(e, cdy_pc_frame_code(frame));
    PyErr_Clear();
    cdy_stats.eager_reruns++;
    cdy_tls saved = cdy_tls_state;
    cdy_tls_state.enabled = 0;
    r = _PyEval_EvalFrameDefault(ts, frame, throwflag);
    cdy_tls_state = saved;
    cdy_graph_failed = NULL;
    return r;
}

/* A non-negative integer setting of cdynamo.config (dflt when unset or bad). */
static long config_count(const char *name, long dflt)
{
    PyObject *v = cdy_config_get(name);
    long n = v ? PyLong_AsLong(v) : dflt;
    Py_XDECREF(v);
    PyErr_Clear();
    return n < 0 ? dflt : n;
}

/* 1 when the frame may not get another entry: it has cache_size_limit
 * entries for its nn.Module instance (for all calls, if it is not a
 * module's method), or accumulated_cache_size_limit in all.  So each layer
 * of a stack of identical modules (a different layer_idx each) gets its
 * entries, as under TorchDynamo, while a guard that fails on every call
 * still ends in eager execution. */
static int over_limit(const cdy_extra *x, cdy_frame *frame)
{
    uintptr_t inst = frame_instance(frame);
    int same = 0;
    for (const cdy_entry *e = x->entries; e; e = e->next)
        same += e->inst == inst;
    return same >= config_count("cache_size_limit", 8) ||
           x->nentries >= config_count("accumulated_cache_size_limit", 64);
}

/* 1 (the code runs eagerly from now on, recorded) when x is a resume function
 * with entries whose breaking call returned a number this time: it changes
 * between calls (.item(), time.time()), and a number is a graph constant, so
 * each value would compile anew up to the recompile limit. */
static int resume_scalar_changed(cdy_extra *x, cdy_frame *frame)
{
    if (x->result_slot < 0 || !x->nentries)
        return 0;
    PyObject *v = frame->localsplus[x->result_slot];
    if (!v || PyBool_Check(v) || (!PyLong_Check(v) && !PyFloat_Check(v)))
        return 0;
    PyCodeObject *co = x->code;
    char msg[CDY_ERRLEN];
    snprintf(msg, sizeof(msg), cdy_rt_RESUME_SCALAR, Py_TYPE(v)->tp_name);
    x->state = CODE_SKIP;
    cdy_stats.fallbacks++;
    record_eager(co, msg, CDY_R_RESUME_SCALAR, co->co_filename, co->co_firstlineno);
    if (cdy_log_on("recompiles"))
        cdy_log("recompiles", "%s (%s:%d): %s", PyUnicode_AsUTF8(co->co_name),
                PyUnicode_AsUTF8(co->co_filename), co->co_firstlineno, msg);
    PyErr_Clear();
    return 1;
}

/* See frame.h: x's code is a resume function whose call result is in slot `slot`. */
int cdy_frame_mark_resume(PyCodeObject *co, int slot)
{
    cdy_extra *x = get_extra(co, -1);
    if (!x)
        return -1;
    x->result_slot = slot;
    return 0;
}

/* 1 if a SYM guard of e has a Python int symbol (its graph reads the value
 * from the guard's check only, frame/guards.c). */
static int entry_int_syms(const cdy_entry *e)
{
    for (int i = 0; i < e->guards.n; i++) {
        const cdy_guard *g = &e->guards.items[i];
        for (int k = 0; g->kind == CDY_GUARD_SYM && k < g->sym->s.tab.nsyms; k++)
            if (g->sym->s.info[k].input < 0)
                return 1;
    }
    return 0;
}

/* The eval-frame function installed while optimized calls run. */
static PyObject *cdy_eval(PyThreadState *ts, cdy_frame *frame, int throwflag)
{
    if (!cdy_tls_state.enabled || throwflag)
        return _PyEval_EvalFrameDefault(ts, frame, throwflag);
    PyCodeObject *co = cdy_pc_frame_code(frame);
    cdy_extra *x = get_extra(co, -1);
    if (!x) {
        PyErr_Clear();
        return _PyEval_EvalFrameDefault(ts, frame, throwflag);
    }
    if (x->state != CODE_TRACE || !cdy_pc_frame_fresh(frame) || !cdy_pc_frame_on_thread(frame) ||
        !cdy_pc_frame_discardable(frame)) {
        if (x->state == CODE_SKIP && cdy_pc_frame_fresh(frame))
            note_skipped(x);
        if ((PyObject *)co == cdy_optim_wrapper_code_peek())   /* opt.step() from eager code */
            cdy_optim_force_step(cdy_pc_frame_func(frame));
        return _PyEval_EvalFrameDefault(ts, frame, throwflag);
    }
    cdy_stats.frames_seen++;
    PyObject *closure = cdy_pc_frame_func(frame)->func_closure;
    char why[CDY_ERRLEN] = "";
    cdy_entry *first;
    long long t0 = cdy_phase_start();
    cdy_sym_tok.owner = NULL;              /* a SYM guard that holds sets it (runtime.h) */
    cdy_entry *hit = find_entry(x, cdy_tls_state.backend, frame->localsplus, frame->f_globals,
                                frame->f_builtins, closure, frame_instance(frame), &first);
    if (!hit || !entry_owns_token(hit))
        cdy_sym_tok.owner = NULL;
    if (hit) {
        cdy_phase_add(CDY_PHASE_guards, &t0);
        cdy_stats.cache_hits++;
        return run_entry(ts, frame, x, hit, throwflag);
    }
    cdy_stats.cache_misses++;
    if (resume_scalar_changed(x, frame))
        return _PyEval_EvalFrameDefault(ts, frame, throwflag);
    int limit = over_limit(x, frame);
    if (first && ((!limit && cdy_log_on("recompiles")) || (limit && !x->limit_warned)))
        cdy_guards_check(&first->guards, frame->localsplus, frame->f_globals, frame->f_builtins,
                         closure, why, sizeof(why));   /* again, for the message */
    if (limit) {
        cdy_stats.fallbacks++;
        if (!x->limit_warned) {
            x->limit_warned = 1;
            char msg[CDY_ERRLEN];
            snprintf(msg, sizeof(msg), cdy_rt_RECOMPILE_LIMIT, why);
            record_eager(co, msg, CDY_R_RECOMPILE_LIMIT, co->co_filename, co->co_firstlineno);
            PyObject *r = cdy_py_call("warn_cache_limit", "OOs", (PyObject *)co, co->co_filename, why);
            Py_XDECREF(r);
            if (!r)
                return not_evaluated(ts, frame, NULL);   /* warnings turned into errors */
        }
        explain_note(x);
        return _PyEval_EvalFrameDefault(ts, frame, throwflag);
    }
    if (x->nentries > 0) {
        cdy_stats.recompiles++;
        log_recompile(co, why);
    }
    int raise = 0;
    cdy_entry *e = convert_frame(frame, x, &raise);
    if (raise)
        return not_evaluated(ts, frame, NULL);
    if (!e)
        return _PyEval_EvalFrameDefault(ts, frame, throwflag);
    if (entry_int_syms(e)) {   /* the SYM guard gives the graph the Python ints' values */
        char why[8];
        cdy_guards_check(&e->guards, frame->localsplus, frame->f_globals, frame->f_builtins,
                         cdy_pc_frame_func(frame)->func_closure, why, sizeof(why));
        PyErr_Clear();
    }
    return run_entry(ts, frame, x, e, throwflag);
}

/* Install the hook for the first active optimized call. */
static void hook_enter(void)
{
    if (active_calls++ == 0) {
        PyInterpreterState *interp = PyInterpreterState_Get();
        saved_eval = _PyInterpreterState_GetEvalFrameFunc(interp);
        _PyInterpreterState_SetEvalFrameFunc(interp, cdy_eval);
    }
}

/* Remove it after the last one. */
static void hook_exit(void)
{
    if (--active_calls == 0)
        _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), saved_eval);
}

/* ---- OptimizedFunction: the object cdynamo.optimize returns ---------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn;
    PyObject *dict;
    int enable;              /* 0: cdynamo.disable wrapper */
    int backend;
    int fullgraph;
    int dynamic;             /* -1 None (automatic), 0 False, 1 True */
    PyObject *owner;         /* an optimized module's class, or NULL: fn is its forward */
} cdy_optimized;

/* 1 if e's inputs are distinct arguments, each read as it is: a call with
 * donated arguments (cdy_donated_args) may then hand them to the graph. */
static int donatable(const cdy_entry *e)
{
    for (int i = 0; i < e->ninputs; i++) {
        const cdy_src *s = &e->inputs[i];
        if (s->kind != CDY_SRC_LOCAL || s->nattrs)
            return 0;
        for (int j = 0; j < i; j++)
            if (e->inputs[j].slot == s->slot)
                return 0;
    }
    return 1;
}

/* Call entry e's compiled graph with its inputs read from args (the
 * function's arguments) and fn; its result, or NULL with an error. */
static PyObject *run_direct(const cdy_entry *e, PyObject *const *args, PyFunctionObject *fn)
{
    PyObject *stack[16], **in = stack;
    if (e->ninputs > 16 && !(in = PyMem_Malloc(sizeof(PyObject *) * (size_t)e->ninputs)))
        return PyErr_NoMemory();
    int n = 0, donate = args == cdy_donated_args && donatable(e);
    cdy_donated_args = NULL;
    PyObject *r = NULL;
    for (; n < e->ninputs; n++) {
        const cdy_src *s = &e->inputs[n];
        in[n] = s->kind == CDY_SRC_LOCAL && !s->nattrs
                    ? donate ? args[s->slot] : Py_NewRef(args[s->slot])
                    : cdy_src_fetch(s, args, fn->func_globals, fn->func_builtins, fn->func_closure);
        if (donate)
            ((PyObject **)args)[s->slot] = NULL;
        if (!in[n])
            goto done;
    }
    cdy_donated_args = donate ? in : NULL;
    r = PyObject_Vectorcall(e->direct, in, (size_t)n, NULL);
    cdy_donated_args = NULL;
done:
    while (n-- > 0)
        if (donate && !r)   /* the graph put them back (or dropped them): back to the caller */
            ((PyObject **)args)[e->inputs[n].slot] = in[n];
        else
            Py_XDECREF(in[n]);
    if (in != stack)
        PyMem_Free(in);
    return r;
}

#define DIRECT_MAX_ARGS 32

/* Bind a call's arguments to co's co_argcount parameters in out (borrowed):
 * positionals, then keywords by name, then fn's defaults.  1 when every
 * parameter gets exactly one value, else 0 (the frame path then binds them,
 * or raises CPython's TypeError). */
static int bind_args(PyFunctionObject *fn, PyCodeObject *co, PyObject *const *args,
                     Py_ssize_t nargs, PyObject *kwnames, PyObject **out)
{
    int n = co->co_argcount;
    if (nargs > n || n > DIRECT_MAX_ARGS)
        return 0;
    for (int i = 0; i < n; i++)
        out[i] = i < nargs ? args[i] : NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int slot = -1;
        for (int i = co->co_posonlyargcount; i < n && slot < 0; i++) {
            PyObject *pn = PyTuple_GET_ITEM(co->co_localsplusnames, i);
            if (pn == name || PyUnicode_Compare(pn, name) == 0)
                slot = i;
        }
        if (slot < 0 || out[slot])
            return 0;
        out[slot] = args[nargs + k];
    }
    PyObject *defs = fn->func_defaults;
    Py_ssize_t nd = defs ? PyTuple_GET_SIZE(defs) : 0;
    for (int i = 0; i < n; i++) {
        if (out[i])
            continue;
        if (i < n - nd)
            return 0;
        out[i] = PyTuple_GET_ITEM(defs, i - (n - nd));
    }
    return 1;
}

/* The frame-free path of a call of o: when o wraps a function whose cache
 * entries all return their graph's output(s) as they come, the first entry
 * whose guards hold for the arguments runs without a Python frame.  1 with
 * *res set (NULL: an error), or 0: no entry holds (or none can), take the
 * frame path.  A function past its recompile limit takes the frame path at
 * once, so its misses are not checked twice. */
static int direct_call(cdy_optimized *o, PyObject *const *args, size_t nargsf,
                       PyObject *kwnames, PyObject **res)
{
    if (!PyFunction_Check(o->fn))
        return 0;
    PyFunctionObject *fn = (PyFunctionObject *)o->fn;
    PyCodeObject *co = (PyCodeObject *)fn->func_code;
    void *p = NULL;
    if (_PyCode_GetExtra((PyObject *)co, extra_index, &p) || !p) {
        PyErr_Clear();
        return 0;
    }
    cdy_extra *x = p;
    if (x->state != CODE_TRACE || !x->entries || x->nframed || x->limit_warned)
        return 0;
    PyObject *bound[DIRECT_MAX_ARGS], *const *orig_args = args;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (!kwnames && nargs == co->co_argcount)
        ;   /* the common case: the arguments are the parameters */
    else if (bind_args(fn, co, args, nargs, kwnames, bound))
        args = bound;
    else
        return 0;
    long long t0 = cdy_phase_start();
    cdy_entry *first, *e = find_entry(x, o->backend, args, fn->func_globals, fn->func_builtins,
                                      fn->func_closure, code_instance(co, args), &first);
    if (!e)
        return 0;
    cdy_phase_add(CDY_PHASE_guards, &t0);
    cdy_stats.frames_seen++;
    cdy_stats.cache_hits++;
    cdy_stats.direct_calls++;
    cdy_graph_failed = NULL;
    *res = run_direct(e, args, fn);
    if (!*res && graph_raised(e->direct)) {
        note_rerun(e, co);
        *res = rerun_eagerly(o->fn, orig_args, nargsf, kwnames);
    }
    return 1;
}

/* Call fn with the hook on (or off, for disable) on this thread. */
/* Mark the code of function fn as handed to optimize: traced even where
 * its file is skipped (nn.Sequential.forward lives in torch); 0 or -1. */
static int force_code(PyObject *fn)
{
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fn);
    cdy_extra *x = get_extra(co, CODE_TRACE);
    if (!x)
        return -1;
    if (x->state == CODE_SKIP && !code_is_skipped_by_flags(co))
        x->state = CODE_TRACE;
    x->forced = 1;
    return 0;
}

/* See frame.h. */
int cdy_frame_force_code(PyObject *fn)
{
    return PyFunction_Check(fn) ? force_code(fn) : -1;
}

/* 1 when fn's code is no longer marked forced (reset() cleared it). */
static int force_lost(PyObject *fn)
{
    void *p = NULL;
    if (_PyCode_GetExtra(PyFunction_GET_CODE(fn), extra_index, &p) < 0) {
        PyErr_Clear();
        return 1;
    }
    return !p || !((cdy_extra *)p)->forced;
}

/* An optimized module's forward as its class has it now (borrowed), when
 * that is no longer o->fn: the class's forward was replaced after optimize. */
static PyObject *owner_forward_changed(cdy_optimized *o)
{
    static PyObject *name;
    if (!name && !(name = PyUnicode_InternFromString("forward")))
        return NULL;
    PyObject *cur = _PyType_Lookup((PyTypeObject *)o->owner, name);
    return cur && cur != o->fn ? cur : NULL;
}

/* Call the replaced forward cur as eager would: a function is compiled from
 * now on (o->fn becomes it); another descriptor is bound to the module
 * (args[0]) and called as it is. */
static PyObject *call_new_forward(cdy_optimized *o, PyObject *cur, PyObject *const *args,
                                  size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (PyFunction_Check(cur) || nargs < 1) {
        Py_SETREF(o->fn, Py_NewRef(cur));
        return NULL;
    }
    descrgetfunc get = Py_TYPE(cur)->tp_descr_get;
    PyObject *bound = get ? get(cur, args[0], o->owner) : Py_NewRef(cur);
    if (!bound)
        return NULL;
    PyObject *r = PyObject_Vectorcall(bound, args + 1, (size_t)(nargs - 1), kwnames);
    Py_DECREF(bound);
    return r;
}

static PyObject *optimized_call(PyObject *self, PyObject *const *args, size_t nargsf,
                                PyObject *kwnames)
{
    cdy_optimized *o = (cdy_optimized *)self;
    PyObject *r = NULL, *cur = o->owner ? owner_forward_changed(o) : NULL;
    if (cur && (r = call_new_forward(o, cur, args, nargsf, kwnames)) != NULL)
        return r;
    if (cur && o->fn != cur)
        return NULL;   /* the descriptor's call raised */
    /* a direct hit runs no Python frame: the hook is not needed */
    if (o->enable && direct_call(o, args, nargsf, kwnames, &r))
        return r;
    PyObject *inner = PyMethod_Check(o->fn) ? PyMethod_GET_FUNCTION(o->fn) : o->fn;
    if (o->enable && PyFunction_Check(inner) && force_lost(inner) && force_code(inner))
        return NULL;
    cdy_tls saved = cdy_tls_state;
    cdy_tls_state.enabled = o->enable;
    if (o->enable) {
        cdy_tls_state.backend = o->backend;
        cdy_tls_state.fullgraph = o->fullgraph;
        cdy_tls_state.dynamic = o->dynamic;
    }
    hook_enter();
    r = PyObject_Vectorcall(o->fn, args, nargsf, kwnames);
    hook_exit();
    cdy_tls_state = saved;
    return r;
}

static PyObject *optimized_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fn", "backend", "fullgraph", "enable", "dynamic", "owner", NULL};
    PyObject *fn, *dynamic = Py_None, *owner = NULL;
    const char *backend = "c";
    int fullgraph = 0, enable = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|sppOO!", kwlist, &fn, &backend, &fullgraph,
                                     &enable, &dynamic, &PyType_Type, &owner))
        return NULL;
    if (dynamic != Py_None && !PyBool_Check(dynamic))
        return PyErr_Format(PyExc_TypeError, "dynamic must be None, True or False, got %R",
                            dynamic);
    if (!PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "expected a callable, got %R", fn);
    int b;
    if (!strcmp(backend, "c"))
        b = CDY_BACKEND_C;
    else if (!strcmp(backend, "eager"))
        b = CDY_BACKEND_EAGER;
    else
        return PyErr_Format(PyExc_ValueError, "unknown backend '%s': expected 'c' or 'eager'",
                            backend);
    /* the function handed to optimize is traced even where its file is
     * skipped (nn.Sequential.forward lives in torch) */
    PyObject *inner = PyMethod_Check(fn) ? PyMethod_GET_FUNCTION(fn) : fn;   /* opt.step */
    if (enable && PyFunction_Check(inner) && force_code(inner))
        return NULL;
    cdy_optimized *o = (cdy_optimized *)type->tp_alloc(type, 0);
    if (!o)
        return NULL;
    o->fn = Py_NewRef(fn);
    o->backend = b;
    o->fullgraph = fullgraph;
    o->dynamic = dynamic == Py_None ? -1 : dynamic == Py_True;
    o->enable = enable;
    o->vectorcall = optimized_call;
    o->owner = Py_XNewRef(owner);
    return (PyObject *)o;
}

static int optimized_traverse(PyObject *self, visitproc visit, void *arg)
{
    cdy_optimized *o = (cdy_optimized *)self;
    Py_VISIT(o->fn);
    Py_VISIT(o->dict);
    Py_VISIT(o->owner);
    return 0;
}

static int optimized_clear(PyObject *self)
{
    cdy_optimized *o = (cdy_optimized *)self;
    Py_CLEAR(o->fn);
    Py_CLEAR(o->dict);
    Py_CLEAR(o->owner);
    return 0;
}

static void optimized_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    optimized_clear(self);
    Py_TYPE(self)->tp_free(self);
}

/* Bind as a method when used on a class attribute. */
static PyObject *optimized_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (!obj || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *optimized_repr(PyObject *self)
{
    cdy_optimized *o = (cdy_optimized *)self;
    return PyUnicode_FromFormat("<cdynamo.%s %R>", o->enable ? "optimize" : "disable", o->fn);
}

static PyObject *optimized_get_fn(PyObject *self, void *c)
{
    return Py_NewRef(((cdy_optimized *)self)->fn);
}

/* True for cdynamo.optimize's wrappers, False for cdynamo.disable's. */
static PyObject *optimized_get_enabled(PyObject *self, void *c)
{
    return PyBool_FromLong(((cdy_optimized *)self)->enable);
}

static PyGetSetDef optimized_getset[] = {
    {"_orig_fn", optimized_get_fn, NULL, "the wrapped callable", NULL},
    {"_enabled", optimized_get_enabled, NULL, "optimize's wrapper (True) or disable's", NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

PyTypeObject cdy_optimized_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdynamo._C.OptimizedFunction",
    .tp_basicsize = sizeof(cdy_optimized),
    .tp_dealloc = optimized_dealloc,
    .tp_repr = optimized_repr,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(cdy_optimized, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_traverse = optimized_traverse,
    .tp_clear = optimized_clear,
    .tp_descr_get = optimized_get,
    .tp_dictoffset = offsetof(cdy_optimized, dict),
    .tp_getset = optimized_getset,
    .tp_new = optimized_new,
};

/* ---- module-level functions ---------------------------------------------------- */

/* Forget every cache entry of every code object (compiled code is released). */
PyObject *cdy_frame_reset(void)
{
    for (cdy_extra *x = all_extras; x; x = x->next) {
        extra_clear_entries(x);
        /* forget what was learnt of the code too: a frame skipped for having
         * no tensor op, a code forced by an optimize() (its next call forces
         * it again); generated code stays shadow */
        if (x->state != CODE_SHADOW)
            x->state = first_state(x->code);
        x->forced = 0;
    }
    memset(&cdy_stats, 0, sizeof(cdy_stats));
    cdy_resume_reset();
    Py_RETURN_NONE;
}

/* _C.explain_collect(on): True starts collecting the records of the frames
 * that run eagerly (explain); False stops and returns them (a list). */
static PyObject *explain_collect(PyObject *self, PyObject *arg)
{
    PyObject *prev = explain_seen;
    explain_seen = NULL;
    if (PyObject_IsTrue(arg) && !(explain_seen = PyList_New(0))) {
        Py_XDECREF(prev);
        return NULL;
    }
    return prev ? prev : PyList_New(0);
}

/* _C.set_skip_prefixes(tuple_of_paths) */
static PyObject *set_skip_prefixes(PyObject *self, PyObject *arg)
{
    if (!PyTuple_Check(arg))
        return PyErr_Format(PyExc_TypeError, "expected a tuple of str");
    Py_XSETREF(skip_prefixes, Py_NewRef(arg));
    Py_RETURN_NONE;
}

/* _C.cache_entry_count(code) -> number of cache entries */
static PyObject *cache_entry_count(PyObject *self, PyObject *arg)
{
    if (!PyCode_Check(arg))
        return PyErr_Format(PyExc_TypeError, "expected a code object");
    void *p = NULL;
    if (_PyCode_GetExtra(arg, extra_index, &p))
        return NULL;
    return PyLong_FromLong(p ? ((cdy_extra *)p)->nentries : 0);
}

static PyMethodDef frame_methods[] = {
    {"set_skip_prefixes", set_skip_prefixes, METH_O, "paths whose code is never traced"},
    {"explain_collect", explain_collect, METH_O,
     "True: collect the records of frames that run eagerly; False: stop, return them"},
    {"cache_entry_count", cache_entry_count, METH_O, "cache entries of a code object"},
    {NULL},
};

/* Register the frame types and functions in module; 0 or -1. */
int cdy_frame_init(PyObject *module)
{
    extra_index = _PyEval_RequestCodeExtraIndex(extra_free);
    if (extra_index < 0) {
        PyErr_SetString(PyExc_RuntimeError, "no code extra index available");
        return -1;
    }
    if (PyType_Ready(&cdy_optimized_type) < 0)
        return -1;
    Py_INCREF(&cdy_optimized_type);
    if (PyModule_AddObject(module, "OptimizedFunction", (PyObject *)&cdy_optimized_type) < 0)
        return -1;
    return PyModule_AddFunctions(module, frame_methods);
}
