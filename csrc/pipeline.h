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
    int failed;              /* a stage failed: err says which and why */
    char err[CDY_ERRLEN];
} cdy_pipe;
/* Trace the frame of p->code and compile what it traced, stage by stage
 * (see pipeline.c); 0, or -1 with p->failed and p->err set.  t keeps the
 * trace (status, reason, guards) for the hook's entry. */
int cdy_pipeline(cdy_pipe *p, cdy_trace *t, PyObject *const *locals, PyObject *globals,
                 PyObject *builtins, PyObject *closure);
/* The compiler options of cdynamo.config into *opts, strings owned by *cc and
 * *dir (new references, dropped by the caller); 0, or -1 when not strings. */
int cdy_pipeline_cc_opts(cdy_cc_opts *opts, PyObject **cc, PyObject **dir);

#endif /* CDY_PIPELINE_H */
