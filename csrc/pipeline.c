/* pipeline.c - the order of compilation, in one function (cdy_pipeline, as
 * QBE's func()): trace the frame, the graph passes, then for the C backend
 * the passes of its own, schedule and emit the kernels, build them, load
 * them.  Each stage is a call; after each the graph (or the plan) is checked
 * (a failed check is an internal error: the frame runs eagerly, debug builds
 * abort) and, with the `stages` log topic on (CDYNAMO_LOGS=stages), dumped.
 * The frame hook (frame/eval.c) runs it for a frame it has no entry for and
 * makes the cache entry of its result (guards, transformed bytecode). */
#include "pipeline.h"
#include "sym/trace_shapes.h"
#include "runtime/runtime.h"
#include "passes/passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fn_counter;   /* the N of __compiled_fn_N, one per compiled frame */

/* Record a failure whose message is p->err, or text when given; -1.  No
 * exception is left set. */
static int pp_fail(cdy_pipe *p, const char *text)
{
    if (text)
        snprintf(p->err, sizeof(p->err), "%s", text);
    PyErr_Clear();
    p->failed = 1;
    return -1;
}

/* Record a failure of `what` with the pending exception's message: "what:
 * message" ("unknown error" when none is set); -1. */
static int pp_fail_exc(cdy_pipe *p, const char *what)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *s = ev ? PyObject_Str(ev) : NULL;
    snprintf(p->err, sizeof(p->err), "%s: %s", what, s ? PyUnicode_AsUTF8(s) : "unknown error");
    Py_XDECREF(s);
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
    return pp_fail(p, NULL);
}

/* A failed check (r != 0, its fault in p->err) after stage `what`: an
 * internal error (debug builds abort); r. */
static int pp_checked(cdy_pipe *p, int r, const char *what)
{
    if (!r)
        return 0;
    CDY_ASSERT(0, what);
    char fault[CDY_ERRLEN];
    snprintf(fault, sizeof(fault), "%s", p->err);
    snprintf(p->err, sizeof(p->err), "internal error: invalid %s: %.400s", what, fault);
    p->failed = 1;
    return r;
}

/* Stage `name` of graph t done (n rewrites): its dump, then the graph's check; 0 or -1. */
static int pp_graph_done(cdy_pipe *p, cdy_trace *t, const char *name, int n)
{
    if (cdy_log_on("stages")) {
        PyObject *txt = cdy_graph_text(t, p->code);
        cdy_log("stages", "%s: graph after %s (%d rewrites):\n%s", p->name, name, n,
                txt ? PyUnicode_AsUTF8(txt) : "?");
        Py_XDECREF(txt);
        PyErr_Clear();
    }
    char what[64];
    snprintf(what, sizeof(what), "graph after %s", name);
    return pp_checked(p, cdy_graph_check(&t->graph, p->err, sizeof(p->err)), what);
}

/* Run graph pass `pass` (stage `name`) on t; 0, or -1 when the graph is invalid after it. */
static int pp_pass(cdy_pipe *p, cdy_trace *t, const char *name, int (*pass)(cdy_trace *))
{
    return pp_graph_done(p, t, name, pass(t));
}

/* 1 when the traced frame compiles: no stop, and a tensor op (or a frame
 * handed to optimize, or torch modes on: it runs through its entry); then
 * its name is taken and p->single set. */
static int pp_compiles(cdy_pipe *p, const cdy_trace *t)
{
    int nodes = 0;
    for (int v = 0; v < t->graph.nvalues; v++)
        nodes += t->graph.values[v].kind == CDY_VAL_NODE;
    if (t->status != CDY_TRACE_OK || (!nodes && !p->forced && !t->modes_on && !t->brk))
        return 0;
    snprintf(p->name, sizeof(p->name), "__compiled_fn_%d", fn_counter++);
    p->compiles = 1;
    p->single = t->ret && t->graph.noutputs == 1 && t->ret->kind == CDY_RET_OUTPUT &&
                !t->nstores && !t->nafter;
    return 1;
}

/* The compiler options of cdynamo.config (cc, cache_dir, standby_compiler)
 * into *opts, its strings owned by the new references *cc and *dir (the
 * caller drops them); 0, or -1 when cc or cache_dir is not a string. */
int cdy_pipeline_cc_opts(cdy_cc_opts *opts, PyObject **cc, PyObject **dir)
{
    *cc = cdy_config_get("cc");
    *dir = cdy_config_get("cache_dir");
    PyObject *sb = cdy_config_get("standby_compiler");
    int standby = sb ? PyObject_IsTrue(sb) : 1;
    Py_XDECREF(sb);
    PyErr_Clear();
    if (!*cc || !*dir || !PyUnicode_Check(*cc) || !PyUnicode_Check(*dir))
        return -1;
    *opts = (cdy_cc_opts){PyUnicode_AsUTF8(*cc), PyUnicode_AsUTF8(*dir), NULL,
                          standby ? cdy_codegen_prefix() : NULL};
    return opts->cc && opts->cache_dir ? 0 : -1;
}

/* cdynamo.config.stream_store_bytes: an int >= 0 as it is, else (None) the
 * machine's default, cdy_stream_auto_bytes(). */
static int64_t pp_stream_bytes(void)
{
    PyObject *v = cdy_config_get("stream_store_bytes");
    long long n = v && PyLong_Check(v) ? PyLong_AsLongLong(v) : -1;
    Py_XDECREF(v);
    PyErr_Clear();
    return n >= 0 ? (int64_t)n : cdy_stream_auto_bytes();
}

/* The threads the kernels are built for (cdynamo's num_threads(), read by
 * pp_cc_opts); p->threads is set to it when it follows torch.get_num_threads()
 * (config.num_threads None). */
static int pp_threads(cdy_pipe *p)
{
    int n = p->nthreads;
    PyObject *pinned = cdy_config_get("num_threads");
    p->threads = pinned == Py_None ? n : 0;
    Py_XDECREF(pinned);
    PyErr_Clear();
    return n;
}

static int pp_dyn_test;   /* tests: no dyn given means every argument dim (issue 32) */

void cdy_pipeline_set_dyn_test(int flag)
{
    pp_dyn_test = flag;
}

void cdy_pipe_sym_clear(cdy_pipe *p)
{
    if (p->sym)
        cdy_sym_shapes_free(p->sym);
    free(p->sym);
    p->sym = NULL;
    p->has_sym = 0;
}

/* The dyn mask of t's inputs into dyn: p->dyn's, under the test hook every
 * argument dim, else the policy's (p->dyn_of); NULL when sizes are static. */
static const unsigned *pp_dyn(const cdy_pipe *p, const cdy_trace *t, unsigned *dyn)
{
    if (p->dyn)
        return p->dyn;
    if (pp_dyn_test) {
        cdy_sym_dyn_all(t, dyn);
        return dyn;
    }
    if (p->dyn_of)
        return p->dyn_of(p->dyn_ctx, t, dyn) ? dyn : NULL;
    return NULL;
}

/* Symbolic shapes of t's graph under dyn into *s when a symbol stays live
 * (1), else 0 with p->sym_why (s freed). */
static int pp_sym_shapes(cdy_pipe *p, const cdy_trace *t, const unsigned *dyn, cdy_sym_shapes *s)
{
    if (cdy_sym_trace_shapes(t, dyn, s) == 0 && cdy_sym_any_live(s))
        return 1;
    snprintf(p->sym_why, sizeof(p->sym_why), "every symbolic size specialized%s%s",
             s->tab.nsyms ? ": " : "", s->tab.nsyms ? s->info[0].why : "");
    cdy_sym_shapes_free(s);
    return 0;
}

/* Try the symbolic compile of t (issue 32): 1 with *plan and *s (the shapes
 * the plan's kernels read) when a symbol stays live and every step takes
 * runtime sizes; else 0 with p->sym_why (the caller compiles static). */
static int pp_codegen_sym(cdy_pipe *p, cdy_trace *t, int nth, cdy_plan *plan, cdy_sym_shapes *s)
{
    unsigned dbuf[t->graph.ninputs + 1];
    const unsigned *dyn = pp_dyn(p, t, dbuf);
    if (!dyn || !pp_sym_shapes(p, t, dyn, s))
        return 0;
    char err[CDY_ERRLEN];
    if (cdy_codegen_sym(&t->graph, nth, pp_stream_bytes(), s, plan, err, sizeof(err)) == 0) {
        cdy_pass_pack_linear_per_rows(t);
        return 1;
    }
    snprintf(p->sym_why, sizeof(p->sym_why), "%s", err);
    cdy_sym_shapes_free(s);
    return 0;
}

/* The entry's copy of the shapes of a symbolic compile (a second inference,
 * deterministic: the same shapes) into p->sym (only for a caller that gave
 * p->dyn: the test hook's compiled graph guards itself); 0 or -1. */
static int pp_sym_out(cdy_pipe *p, const cdy_trace *t)
{
    unsigned dbuf[t->graph.ninputs + 1];
    p->sym = calloc(1, sizeof(*p->sym));
    if (!p->sym || cdy_sym_trace_shapes(t, pp_dyn(p, t, dbuf), p->sym)) {
        cdy_pipe_sym_clear(p);
        return pp_fail(p, "out of memory");
    }
    p->has_sym = 1;
    return 0;
}

/* Schedule and emit t's graph: the plan (kernels as C, steps), checked; with
 * symbolic dims (p->dyn) and a plan that takes them, *sym holds the shapes
 * (*has_sym set). */
static int pp_codegen(cdy_pipe *p, cdy_trace *t, cdy_plan *plan, cdy_sym_shapes *sym,
                      int *has_sym)
{
    if (cdy_log_on("dynamic"))
        cdy_sym_trace_log(t, p->name);
    int nth = pp_threads(p);
    *has_sym = sym && pp_codegen_sym(p, t, nth, plan, sym);
    if (sym && !*has_sym && p->sym_why[0] && cdy_log_on("dynamic"))
        cdy_log("dynamic", "%s: static sizes: %s", p->name, p->sym_why);
    if (!*has_sym && cdy_codegen(&t->graph, nth, pp_stream_bytes(), plan, p->err, sizeof(p->err)))
        return pp_fail(p, NULL);
    if (*has_sym && (p->dyn || p->dyn_of) && pp_sym_out(p, t))
        return -1;
    if (plan->nkernels == 0)
        p->threads = 0;                    /* no kernel: nothing built for a thread count */
    if (cdy_log_on("stages"))
        cdy_log("stages", "%s: kernels after scheduling:\n%s", p->name, plan->ir_post);
    return pp_checked(p, cdy_plan_check(plan, p->err, sizeof(p->err)), "plan");
}

/* The C backend's settings: the compiler options of cdynamo.config into
 * *opts (strings owned by *cc and *dir, dropped by the caller) and the
 * threads to build for (p->nthreads); 0 or -1. */
static int pp_cc_opts(cdy_pipe *p, cdy_cc_opts *opts, PyObject **cc, PyObject **dir)
{
    int bad = cdy_pipeline_cc_opts(opts, cc, dir);
    PyObject *nth = cdy_py_call("num_threads", "");
    p->nthreads = nth ? (int)PyLong_AsLong(nth) : 0;
    Py_XDECREF(nth);
    if (bad || !nth)
        return pp_fail(p, "cdynamo.config.cc / cache_dir are not strings");
    PyErr_Clear();
    return 0;
}

/* Build the plan's C into a shared object at so_path (a graph of extern
 * calls only needs none: so_path ""); 0 or -1. */
static int pp_build(cdy_pipe *p, const cdy_plan *plan, const cdy_cc_opts *opts, char *so_path,
                    size_t n)
{
    int disk_hit = 0;
    so_path[0] = 0;
    if (plan->nkernels == 0)
        return 0;
    if (cdy_cc_build(plan->source, opts, so_path, n, &disk_hit, p->err, sizeof(p->err)))
        return pp_fail(p, NULL);
    if (disk_hit == 1)
        cdy_stats.disk_cache_hits++;
    else
        cdy_stats.kernels_compiled += plan->nkernels;
    cdy_stats.standby_builds += disk_hit == 2;
    return 0;
}

/* Load: the callable running the plan's steps with the kernels of so_path. */
static int pp_load(cdy_pipe *p, cdy_trace *t, const cdy_plan *plan, const char *so_path,
                   cdy_sym_shapes *sym)
{
    cdy_run_record r = cdy_run_record_of(t);
    p->compiled = cdy_compiled_from_plan_sym(plan, so_path[0] ? so_path : NULL, p->name,
                                             p->single, &r, sym);
    return p->compiled ? 0 : pp_fail_exc(p, "loading the compiled kernels failed");
}

/* The eager backend: the traced calls run through torch. */
static int pp_eager(cdy_pipe *p, cdy_trace *t)
{
    cdy_run_record r = cdy_run_record_of(t);
    p->compiled = cdy_compiled_eager(&r, p->name, p->single);
    return p->compiled ? 0 : pp_fail(p, "eager backend failed");
}

/* The pairs (output j, input k) of the first nuser outputs of t's graph that are its
 * inputs themselves, flat in a new tuple; NULL + error. */
static PyObject *pp_input_outputs(const cdy_trace *t, int nuser)
{
    PyObject *l = PyList_New(0);
    for (int j = 0; l && j < nuser && j < t->graph.noutputs; j++) {
        const cdy_value *val = &t->graph.values[t->graph.outputs[j]];
        if (val->kind != CDY_VAL_INPUT)
            continue;
        PyObject *a = PyLong_FromLong(j), *b = PyLong_FromLong(val->input_index);
        if (!a || !b || PyList_Append(l, a) || PyList_Append(l, b))
            Py_CLEAR(l);
        Py_XDECREF(a);
        Py_XDECREF(b);
    }
    PyObject *r = l ? PyList_AsTuple(l) : NULL;
    Py_XDECREF(l);
    return r;
}

/* A training graph (trace/autograd.c): the forward compiled without the
 * graph passes (their rewrites assume grad mode off: packed weights, fused
 * attention), then made a torch.autograd.Function with the backward's
 * source (cdynamo._autograd.TrainingGraph); 0 or -1. */
static int pp_training(cdy_pipe *p, cdy_trace *t, cdy_backward *bw)
{
    p->single = 0;                         /* the Function returns a tuple */
    int rc;
    if (p->backend == CDY_BACKEND_EAGER)
        rc = pp_eager(p, t);
    else {
        cdy_plan plan;
        cdy_cc_opts opts;
        PyObject *cc = NULL, *dir = NULL;
        char so_path[4096];
        memset(&plan, 0, sizeof(plan));
        int has_sym = 0;
        rc = pp_cc_opts(p, &opts, &cc, &dir) || pp_codegen(p, t, &plan, NULL, &has_sym) ||
             pp_build(p, &plan, &opts, so_path, sizeof(so_path)) ||
             pp_load(p, t, &plan, so_path, NULL);
        cdy_plan_free(&plan);
        Py_XDECREF(cc);
        Py_XDECREF(dir);
    }
    if (rc)
        return -1;
    if (cdy_log_on("stages"))
        cdy_log("stages", "%s: backward:\n%s", p->name, PyUnicode_AsUTF8(bw->src));
    PyObject *io = pp_input_outputs(t, bw->nuser);
    PyObject *tg = io ? cdy_py_call("training_graph", "OOOsiOOO", p->compiled, bw->src,
                                    bw->consts, p->name, bw->nuser, bw->saved_inputs,
                                    bw->grad_outputs, io)
                      : NULL;
    Py_XDECREF(io);
    Py_CLEAR(p->compiled);
    if (!tg)
        return pp_fail_exc(p, "making the training graph failed");
    p->compiled = tg;
    return 0;
}

int cdy_pipeline(cdy_pipe *p, cdy_trace *t, PyObject *const *locals, PyObject *globals,
                 PyObject *builtins, PyObject *closure)
{
    cdy_trace_run(t, p->code, locals, globals, builtins, closure);
    cdy_backward bw = {0};
    if (t->status == CDY_TRACE_OK && t->training && t->grad_enabled) {
        if (p->backend != CDY_BACKEND_EAGER)
            cdy_pass_attention_train(t);   /* flash or lean attention, before the backward reads the chain */
        cdy_autograd_build(t, &bw);        /* a stop (NO_DERIVATIVE, ...) runs the frame eagerly */
    }
    if (!pp_compiles(p, t)) {
        cdy_backward_clear(&bw);
        return 0;                          /* a stop or no tensor op: the hook says why */
    }
    if (bw.src) {
        int rc = pp_graph_done(p, t, "autograd", 0) || pp_training(p, t, &bw);
        cdy_backward_clear(&bw);
        return rc ? -1 : 0;
    }
    CDY_ASSERT(t->ret || t->brk, "a trace with no return value reached compilation");
    if (!t->ret && !t->brk)                /* the tracer rejects it (NO_RETURN): never read it */
        return pp_fail(p, "internal error: the trace has no return value");
    if (pp_pass(p, t, "pack_linear", cdy_pass_pack_linear) ||
        pp_pass(p, t, "channels_last", cdy_pass_channels_last))
        return -1;
    if (t->graph.noutputs == 0)
        return 0;                          /* no graph to call */
    if (p->backend == CDY_BACKEND_EAGER)
        return pp_eager(p, t);
    cdy_plan plan;
    cdy_cc_opts opts;
    PyObject *cc = NULL, *dir = NULL;
    char so_path[4096];
    memset(&plan, 0, sizeof(plan));
    cdy_sym_shapes sym;
    int has_sym = 0;
    memset(&sym, 0, sizeof(sym));
    int rc = pp_cc_opts(p, &opts, &cc, &dir) ||
             pp_pass(p, t, "attention", cdy_pass_attention) ||
             pp_pass(p, t, "linear_relu", cdy_pass_linear_relu) ||
             pp_codegen(p, t, &plan, &sym, &has_sym) ||
             pp_build(p, &plan, &opts, so_path, sizeof(so_path)) ||
             pp_load(p, t, &plan, so_path, has_sym ? &sym : NULL);
    if (has_sym)
        cdy_sym_shapes_free(&sym);         /* not taken: the load failed (or zeroed: a no-op) */
    if (rc)
        cdy_pipe_sym_clear(p);
    cdy_plan_free(&plan);
    Py_XDECREF(cc);
    Py_XDECREF(dir);
    return rc ? -1 : 0;
}
