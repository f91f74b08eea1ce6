/* frame/dynamic.h - dynamic shapes at the frame hook (issue 32): which input
 * dims a compile makes symbolic (the policy: dynamic=True, automatic dynamic
 * after a size change, mark_dynamic), and the guards of a cache entry whose
 * graph compiled with symbolic sizes (frame/dynamic.c). */
#ifndef CDY_FRAME_DYNAMIC_H
#define CDY_FRAME_DYNAMIC_H

#include "frame/guards.h"
#include "pipeline.h"
#include "sym/sym.h"
#include "trace/record.h"

/* What the policy reads for one compile of a frame. */
typedef struct {
    int mode;                       /* optimize(dynamic=): -1 None (automatic), 0 False, 1 True */
    int automatic;                  /* config.automatic_dynamic_shapes */
    const cdy_guards *const *prev;  /* the guards of the code's entries so far */
    int nprev;
    PyObject *const *locals;        /* the frame, to read mark_dynamic's marks */
    PyObject *globals, *builtins, *closure;
} cdy_dyn_ctx;

/* cdy_pipe.dyn_of (pipeline.h): the dims of t's graph inputs to make
 * symbolic into dyn (t->graph.ninputs masks): dynamic=True every dim of a
 * frame argument's tensor; automatic dynamic the dims whose size differs from
 * an earlier entry's guard on the same source (or was symbolic there); with
 * either, the dims mark_dynamic marked (_dynamo_dynamic_indices).  1 when a
 * bit is set, else 0.  Pure. */
int cdy_dyn_policy(void *ctx, const cdy_trace *t, unsigned *dyn);

/* Log (topics dynamic, else recompiles) the dims of t's inputs that the
 * policy made dynamic and why ("dimension 0 of 'x' became dynamic: 8 -> 16"),
 * then what the compile p did with them: the symbols, the ones that
 * specialized and why, or why it compiled with static sizes. */
void cdy_dyn_log(const cdy_dyn_ctx *c, const cdy_trace *t, const cdy_pipe *p, PyCodeObject *co);

/* The guards of an entry whose graph compiled with symbolic sizes: the
 * shapes (relations) and the sources of the graph's inputs. */
typedef struct cdy_symguard {
    cdy_sym_shapes s;
    int nin;
    cdy_src *srcs;          /* per graph input (owned copies) */
    cdy_meta *imeta;        /* per graph input, its example's meta (owned): the layout
                             * its strides must follow (cdy_strides_follow) */
    int nints;
    cdy_src *int_srcs;      /* per Python int of the trace (owned copies): an int
                             * symbol k (input -1) is int_srcs[info[k].dim] */
} cdy_symguard;

/* Relax gs (the entry's guards, from trace t) for the symbolic shapes *p->sym
 * (taken: p->sym is NULL after): the TENSOR guard of each graph input with a
 * live symbol stops comparing that dim (>= 2, the example's layout), and a SYM guard
 * checks the relations.  1 when relaxed, 0 when nothing was (no symbol
 * lives), -1 on an error (exception set; gs unchanged or fully relaxed). */
int cdy_dyn_apply(cdy_guards *gs, const cdy_trace *t, cdy_pipe *p);

/* The TENSOR guards of gs, an entry that runs eagerly (its trace stopped: a
 * graph break it cannot resume after), stop comparing the dims the policy
 * of c would make symbolic (>= 2, contiguous): a size that changes per call
 * (a decoding step's length) would trace the frame again on every call, to
 * stop again.  Eager is right at any size.  The dims of the first guard
 * relaxed (its index in *src_of_first, else -1), or 0. */
unsigned cdy_dyn_relax_eager(cdy_guards *gs, const cdy_dyn_ctx *c, int *src_of_first);

/* TENSOR guard g with symbolic dims against actual sizes sz and strides st
 * (same rank): 1 holds, else 0 with why. */
int cdy_dyn_check_tensor(const cdy_guard *g, const int64_t *sz, const int64_t *st, char *why,
                         size_t n);
/* 1 when sg's relations hold at the symbols' values vals, else 0 with why. */
int cdy_symguard_relations(const cdy_symguard *sg, const int64_t *vals, char *why, size_t n);
void cdy_symguard_free(cdy_symguard *sg);
/* Guard text (guards log, explain). */
void cdy_symguard_text(const cdy_symguard *sg, cdy_buf *b);
void cdy_dyn_tensor_text(const cdy_guard *g, cdy_buf *b);

#endif /* CDY_FRAME_DYNAMIC_H */
