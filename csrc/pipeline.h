/* pipeline.h - the order of compilation (pipeline.c). */
#ifndef CDY_PIPELINE_H
#define CDY_PIPELINE_H

#include "module.h"
#include "trace/record.h"

/* ---- the compile pipeline (pipeline.c) -------------------------------------- */
/* What a compiled graph runs on: C kernels, or the traced calls through torch. */
enum { CDY_BACKEND_C = 0, CDY_BACKEND_EAGER = 1 };

typedef struct {
    /* in */
    PyCodeObject *code;      /* the frame's code */
    int backend;             /* CDY_BACKEND_* */
    int forced;              /* handed to optimize: compiled even without a tensor op */
    const unsigned *dyn;     /* per graph input (position), a bit per dim that is
                                symbolic (issue 32); NULL: every size static */
    /* or, when dyn is NULL: the frame hook's policy (frame/dynamic.c) fills the
     * mask from the finished trace (t->graph.ninputs entries); 1 when a bit is
     * set, 0: every size static.  Pure: called more than once per compile */
    int (*dyn_of)(void *ctx, const cdy_trace *t, unsigned *dyn);
    void *dyn_ctx;
    /* out */
    int compiles;            /* the trace compiles: no stop, and a tensor op (or forced,
                                or torch modes on); name and single are set */
    char name[64];           /* __compiled_fn_N, the global the transformed code calls */
    int single;              /* the compiled graph returns its one output itself */
    PyObject *compiled;      /* new reference: the graph's callable; NULL: none (no
                                outputs) or failed */
    int threads;             /* the kernels follow torch.get_num_threads(), built for this
                                many threads (guard it); 0: not */
    int nthreads;            /* the threads the kernels are built for */
    int has_sym;             /* p->dyn given and the graph compiled with runtime sizes:
                                sym holds its
                                shapes (the caller owns it: cdy_sym_shapes_free, or
                                moves it into its entry's guard, cdy_sym_guard); the
                                compiled graph holds a copy of its own */
    struct cdy_sym_shapes_s *sym;   /* malloc'd when has_sym, else NULL */
    char sym_why[CDY_ERRLEN];/* dyn given but no symbol stayed: why ("" when it did) */
    int failed;              /* a stage failed: err says which and why */
    char err[CDY_ERRLEN];
} cdy_pipe;
/* Trace the frame of p->code and compile what it traced, stage by stage
 * (see pipeline.c); 0, or -1 with p->failed and p->err set.  t keeps the
 * trace (status, reason, guards) for the hook's entry. */
int cdy_pipeline(cdy_pipe *p, cdy_trace *t, PyObject *const *locals, PyObject *globals,
                 PyObject *builtins, PyObject *closure);
/* Tests (issue 32): with flag set, a pipeline given no dyn makes every dim of
 * the frame's argument tensors symbolic (as dynamic=True). */
void cdy_pipeline_set_dyn_test(int flag);
/* Free p->sym (after a pipeline run, when the caller did not take it). */
void cdy_pipe_sym_clear(cdy_pipe *p);
/* The compiler options of cdynamo.config into *opts, strings owned by *cc and
 * *dir (new references, dropped by the caller); 0, or -1 when not strings. */
int cdy_pipeline_cc_opts(cdy_cc_opts *opts, PyObject **cc, PyObject **dir);

#endif /* CDY_PIPELINE_H */
