/* passes/passes.h - graph passes: rewrites of a finished trace (its graph and
 * the calls it records), run by the pipeline (pipeline.c) between tracing and
 * scheduling.  A pass reads and writes only the trace's data (cdy_trace:
 * graph, pynodes, guards), never the tracer's symbolic state; it never fails:
 * what it cannot handle stays as traced.  Each returns the number of
 * rewrites it made. */
#ifndef CDY_PASSES_H
#define CDY_PASSES_H

#include "trace/record.h"
#include "runtime/runtime.h"

/* ---- every backend (what tracing used to decide) ---- */
/* F.linear with a float32 parameter weight -> a runtime PackedLinear (the
 * weight kept in oneDNN's packed layout; linear.c). */
int cdy_pass_pack_linear(cdy_trace *t);
/* t's graph compiled with runtime sizes: its PackedLinears choose per rows of
 * their input (cdy_packed_linear_set_per_rows). */
void cdy_pass_pack_linear_per_rows(cdy_trace *t);
/* A float32 NCHW conv2d -> its input and weight copied to channels_last
 * around it, its result copied back to eager's strides (channels_last.c). */
int cdy_pass_channels_last(cdy_trace *t);

/* ---- the C backend ---- */
/* Hand-written attention (matmul, scale, [mask,] softmax, matmul) -> one
 * call of the fused attention (attention.c). */
int cdy_pass_attention(cdy_trace *t);
/* The same in a training graph's forward, before its backward is built:
 * unmasked float32 chains whose query is at least attention_flash_min_len
 * long, with fused_attention_training on; every other chain the lean one
 * (q, k, v copied into contiguous heads before its matmuls) (attention.c). */
int cdy_pass_attention_train(cdy_trace *t);
/* relu read only by a PackedLinear's result -> applied by the PackedLinear
 * (linear.c). */
int cdy_pass_linear_relu(cdy_trace *t);

/* ---- what the passes share (rewrite.c) ---- */
void cdy_trace_users(const cdy_trace *t, int *users);          /* readers per value */
void cdy_trace_pynode_of(const cdy_trace *t, int *pynode_of);  /* defining call per value, or -1 */
void cdy_value_drop(cdy_graph *g, int v);                      /* v: an unused scalar */
int cdy_value_number(const cdy_graph *g, int v, double *out);  /* 1 if v is a number */
/* Make room for n values before value `at` (values from `at` on move up by n,
 * every reference to them follows: node args, view bases, outputs, the calls'
 * tensor arguments and results); the new values are zeroed.  0, or -1 when
 * out of memory (nothing changed). */
int cdy_trace_insert_values(cdy_trace *t, int at, int n);
/* Make room for n calls before call `at` (later calls' item bases follow);
 * the new calls are zeroed with item -1.  0, or -1 (nothing changed). */
int cdy_trace_insert_pynodes(cdy_trace *t, int at, int n);
/* Bind call p's arguments by parameter names sig (space-separated, at most
 * 8): slot[i] := the index into p's arguments filling parameter i, or -1;
 * 0, or -1 when an argument fits no parameter or two. */
int cdy_pynode_bind(const cdy_pynode *p, const char *sig, int *slot);
/* Keep o alive with the trace (its keep list); o, or NULL (o consumed). */
PyObject *cdy_trace_keep(cdy_trace *t, PyObject *o);

#endif /* CDY_PASSES_H */
