/* frame/guards.h - sources (where a value read by a trace lives at frame
 * entry), guards (what must hold for an entry to run), the global torch
 * state a trace may depend on: made by the tracer, checked by the frame
 * hook (frame/guards.c, frame/state.c). */
#ifndef CDY_FRAME_GUARDS_H
#define CDY_FRAME_GUARDS_H

#include "module.h"

/* ---- sources: where a value read by the trace lives at frame entry ------- */
typedef enum {
    CDY_SRC_LOCAL,    /* frame->localsplus[slot] (an argument) */
    CDY_SRC_GLOBAL,   /* f_globals[name], falling back to builtins */
    CDY_SRC_DEREF,    /* closure cell `slot` of the function (free variable) */
} cdy_src_kind;

#define CDY_MAX_ATTRS 24
typedef struct {
    int kind;                        /* cdy_src_kind */
    int slot;                        /* LOCAL: localsplus index; DEREF: closure index */
    PyObject *name;                  /* GLOBAL: the name (owned str) */
    PyObject *dict;                  /* GLOBAL: the globals dict (owned); NULL: the frame's */
    int nattrs;                      /* then one step per attrs[]: */
    PyObject *attrs[CDY_MAX_ATTRS];  /* owned: attribute name, or item key */
    char item[CDY_MAX_ATTRS];        /* 1: step is obj[key] (a dict item), 0: getattr,
                                        2: key[obj] (a converter: a float read as a 0-dim
                                        float64 tensor, trace/build_optim.c) */
} cdy_src;

void cdy_src_copy(cdy_src *dst, const cdy_src *src);   /* new references */
/* 1 if a and b name the same place (kind, slot, name, steps). */
int cdy_src_equal(const cdy_src *a, const cdy_src *b);
void cdy_src_clear(cdy_src *s);
/* Value of s in the frame's context; new reference, or NULL (error set). */
struct _PyInterpreterFrame;
PyObject *cdy_src_fetch(const cdy_src *s, PyObject *const *locals,
                        PyObject *globals, PyObject *builtins, PyObject *closure);
/* Readable name for logs: "x", "G['w']", "x.weight". Writes into buf. */
void cdy_src_name(const cdy_src *s, PyCodeObject *code, char *buf, size_t n);

/* ---- guards -------------------------------------------------------------- */
#define CDY_GUARD_KINDS(X)                                    \
    X(TENSOR, "tensor: type, dtype, device, layout, requires_grad, sizes, strides") \
    X(CONST, "value: exact type and ==")                      \
    X(ID, "identity of the object")                           \
    X(TYPE, "exact type (nn.Module arguments: what is read from them is guarded)") \
    X(LEN, "exact type (list/tuple) and length: the items have guards of their own") \
    X(KEYS, "a dict with exactly these keys, in order: the values have guards of their own") \
    X(GRAD_MODE, "torch.is_grad_enabled() is off")                \
    X(NUM_THREADS, "the OpenMP thread count the kernels were built for") \
    /* t5: */                                                 \
    X(CONTAINS, "`key in obj` (a dict or collections.abc.Mapping) gives the traced answer") \
    X(HASATTR, "hasattr(obj, name) gives the traced answer (an object guarded by type)") \
    X(STATE, "global torch state (default dtype, autocast, modes) is what the trace saw") \
    X(CALL, "a torch state query (expect, no arguments) gives the traced answer (dtype)") \
    X(SAME, "`src is other` gives the traced answer (requires_grad): two sources are one object or not") \
    X(SYM, "the relations between symbolic sizes the trace relied on hold (issue 32)")

typedef enum {
#define CDY_X(e, d) CDY_GUARD_##e,
    CDY_GUARD_KINDS(CDY_X)
#undef CDY_X
} cdy_guard_kind;

typedef struct {
    int kind;
    cdy_src src;
    char desc[96];          /* name for messages, e.g. "x" */
    PyObject *expect;       /* CONST: value; ID: object; TENSOR: exact type */
    PyObject *dtype;        /* TENSOR: torch.dtype (singleton) */
    cdy_src *other;         /* SAME: the second source (owned: PyMem, its references) */
    int requires_grad;
    unsigned dyn;           /* TENSOR: dims whose size is a symbol (issue 32): not
                               compared, but >= 2; with any, contiguous strides
                               instead of equal ones */
    struct cdy_symguard *sym;   /* SYM: the symbolic shapes and sources (owned) */
    int ndim;
    int carry;              /* made inside a call the top frame breaks at: the resumed
                             * trace keeps it (it decides whether the call breaks) */
    int64_t sizes[CDY_MAX_NDIM];
    int64_t strides[CDY_MAX_NDIM];
    /* a cache of what a global source (G['torch'].maximum) read last time it
     * held: the dict version tag of the globals and of each module walked
     * through, and the modules; equal tags mean the same dicts, unchanged */
    int memo_n;                             /* 0: nothing cached; -1: not memoizable */
    uint64_t memo_ver[CDY_MAX_ATTRS + 1];
    PyObject *memo_obj[CDY_MAX_ATTRS + 1];  /* borrowed: held by the unchanged dicts */
} cdy_guard;

/* ---- global torch state a trace may depend on (frame/state.c) ----------- */
typedef enum { CDY_STATE_DEFAULT_DTYPE, CDY_STATE_AUTOCAST, CDY_STATE_MODES } cdy_state_kind;
/* Resolve the readers; 0 or -1 (error set). */
int cdy_state_init(PyObject *torch);
/* The current value of state `which`, as a small int: DEFAULT_DTYPE its
 * c10::ScalarType; AUTOCAST CPU's and CUDA's enabled bits (1, 2) and their
 * autocast dtypes (bits 8-15, 16-23); MODES the lengths of the torch
 * function mode stack (bits 0-14) and of the dispatch mode stack (from bit
 * 15).  No Python call where torch's C++
 * readers were found; never fails. */
int cdy_state_read(int which);
/* The c10::ScalarType value of torch.dtype dt among the floating ones
 * autocast takes; -2 another dtype, -1 none (NULL). */
int cdy_state_dtype_code(PyObject *dt);
/* Set the live CPU autocast state (enabled bit, dtype) to v's (an AUTOCAST
 * value); never fails (errors cleared). */
void cdy_state_set_cpu_autocast(int v);
/* Readable text of value v of state `which` into buf. */
void cdy_state_text(int which, int v, char *buf, size_t n);

typedef struct cdy_gfast cdy_gfast;
typedef struct {
    int n, cap;
    cdy_guard *items;
    PyObject *tensor_check;  /* torch's C++ TensorGuards(...).check for the TENSOR
                                guards, all at once (cdy_guards_batch), or NULL */
    cdy_gfast *fast;         /* the containers the sources read through at the last
                                check that held (frame/gfast.c), or NULL */
} cdy_guards;

/* ---- the snapshot of a guard list's containers (frame/gfast.c) ----------- */
/* A snapshot of the dicts and types gs's sources read through now (after a
 * check that held); prev (may be NULL) is freed.  NULL when out of memory. */
cdy_gfast *cdy_gfast_build(const cdy_guards *gs, cdy_gfast *prev, PyObject *const *locals,
                           PyObject *globals, PyObject *builtins, PyObject *closure);
void cdy_gfast_free(cdy_gfast *f);
/* Compare the snapshot with the frame's objects; the number of changed
 * nodes.  Holds each guard's value until cdy_gfast_release.  Never fails. */
int cdy_gfast_verify(cdy_gfast *f, PyObject *const *locals, PyObject *globals,
                     PyObject *builtins, PyObject *closure);
/* Guard i's value as verified (borrowed; NULL: walk its source), and in
 * *settled whether the guard holds without a check. */
PyObject *cdy_gfast_value(const cdy_gfast *f, int guard, int *settled);
void cdy_gfast_release(cdy_gfast *f);
/* 1 if the last verify found a change and the snapshot should be taken again. */
int cdy_gfast_stale(const cdy_gfast *f);
/* 1 if tp reads attributes as nn.Module does (object's __getattribute__,
 * nn.Module's own __getattr__ on a miss). */
int cdy_guard_module_getattr(PyTypeObject *tp);

void cdy_guards_free(cdy_guards *gs);
/* Append a guard on s; returns it (zeroed apart from kind/src) or NULL (MemoryError). */
cdy_guard *cdy_guards_add(cdy_guards *gs, int kind, const cdy_src *src, const char *desc);
/* 1 if every guard holds for this frame, 0 if one fails (its message into
 * why when why != NULL), -1 on an internal error (exception set). */
int cdy_guards_check(const cdy_guards *gs, PyObject *const *locals, PyObject *globals,
                     PyObject *builtins, PyObject *closure, char *why, size_t whylen);
/* Let gs check its TENSOR guards in one call of torch's C++ TensorGuards
 * (torch._C._dynamo.guards), recorded from the values the guards read in
 * this frame state; without it (older torch, an error, a disagreement with
 * the guards), each is checked on its own as before.  Never fails. */
void cdy_guards_batch(cdy_guards *gs, PyObject *const *locals, PyObject *globals,
                      PyObject *builtins, PyObject *closure);
/* 1 if v's repr is cheap and short enough for a guard message. */
int cdy_guard_value_is_small(PyObject *v);
/* The guard list as text, one guard a line (new str). */
PyObject *cdy_guards_text(const cdy_guards *gs);

#endif /* CDY_FRAME_GUARDS_H */
