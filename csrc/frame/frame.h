/* frame/frame.h - the frame hook (eval.c): per-thread state, backends, the
 * OptimizedFunction type, the transformed bytecode (bytecode.c). */
#ifndef CDY_FRAME_H
#define CDY_FRAME_H

#include "module.h"
#include "trace/record.h"
#include "pipeline.h"

/* ---- bytecode -------------------------------------------------------------- */
/* The transformed code: call global `fn_name` with the graph inputs and
 * rebuild the return value.  New reference or NULL (exception set). */
PyObject *cdy_bytecode_build(PyCodeObject *orig, const cdy_trace *t, PyObject *fn_name,
                             int single, int call_graph, PyObject *globals);
/* The resume function of break b of code orig going on at code unit `at`
 * (b->next, or a jump's b->target), with globals (frame/resume.c;
 * cached until cdy_resume_reset); new reference or NULL (exception set). */
PyObject *cdy_resume_fn(PyCodeObject *orig, const cdy_break *b, PyObject *globals, int at);
void cdy_resume_reset(void);
/* The callable that calls a resume function of a code with free variables:
 * caller(fn, closure, *args) makes fn's code a function closing over closure
 * and calls it with args (borrowed; NULL with an exception). */
PyObject *cdy_resume_caller(void);
/* Note that co is a resume function whose breaking call's result is its
 * local slot `slot` (frame/eval.c: a number there that changes makes it
 * eager rather than recompile per value); 0 or -1 with an exception. */
int cdy_frame_mark_resume(PyCodeObject *co, int slot);
/* Number of argument slots of code (positional, kw-only, *args, **kwargs). */
int cdy_code_nargslots(PyCodeObject *co);

/* ---- frame hook and per-code cache ----------------------------------------- */
typedef struct {
    int enabled;             /* an optimized function runs on this thread */
    int backend;             /* CDY_BACKEND_* */
    int fullgraph;
    int dynamic;             /* optimize(dynamic=): -1 None (automatic), 0 False, 1 True */
} cdy_tls;

extern _Thread_local cdy_tls cdy_tls_state;
extern PyTypeObject cdy_optimized_type;
int cdy_frame_init(PyObject *module);
PyObject *cdy_frame_reset(void);
/* Mark the code of Python function fn as traced wherever it lives, as a function handed
 * to optimize is (an optimizer's step, run by torch.optim's no_grad wrapper); 0 or -1. */
int cdy_frame_force_code(PyObject *fn);
/* The code of torch.optim's _use_grad wrapper (trace/build_optim.c): resolved at the
 * first trace (borrowed; NULL before, or when this torch has none); peek: never resolves. */
PyObject *cdy_optim_wrapper_code(void);
/* The guards of the entries compiled so far for the code being traced (n of them), for
 * cdy_optim_float_input's policy (trace/build_optim.c); set around a compile. */
void cdy_optim_set_prev(const cdy_guards *const *prev, int n);
PyObject *cdy_optim_wrapper_code_peek(void);
/* The policy of Python ints as symbols for the compile about to trace (trace/symint.c):
 * the guards of the code's entries so far (n), optimize's dynamic= mode (-1 None, 0
 * False, 1 True) and config.automatic_dynamic_shapes; set around a compile. */
void cdy_sx_int_policy(const cdy_guards *const *prev, int n, int mode, int automatic);
/* A frame of that wrapper, running eagerly, is about to call func: func's code is traced
 * as its own frame (grad mode off) from now on; never fails (trace/build_optim.c). */
void cdy_optim_force_step(PyFunctionObject *wrapper);

/* _C.start_standby(): start a standby compiler for the first build (frame/eval.c). */
PyObject *cdy_py_start_standby(PyObject *self, PyObject *unused);

#endif /* CDY_FRAME_H */
