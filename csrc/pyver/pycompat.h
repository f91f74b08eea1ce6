/* pycompat.h - the CPython internals cdynamo reads that move between
 * versions, each behind one inline function.  Checked against each
 * version's own headers (Include/internal/pycore_frame.h, pycore_code.h,
 * cpython/dictobject.h, cpython/pystate.h) and Python/frame.c, pystate.c,
 * ceval.c of 3.11, 3.12 and 3.13:
 *
 *   what                      3.11            3.12               3.13
 *   frame's code              f_code          f_code             f_executable
 *   frame's function          f_func          f_funcobj          f_funcobj
 *   frame not started yet     prev_instr ==   prev_instr ==      instr_ptr ==
 *                             code - 1        code - 1           code
 *   a hook that does not      the caller      the hook clears    the hook clears and pops:
 *   evaluate the frame        clears it       and pops it        _PyEval_FrameClearAndPop
 *   dict version              ma_version_tag  (deprecated, still bumped on every change)
 *   _PyTraceback_Add          cpython/traceback.h                internal (still exported)
 *   _PyMethodWrapper_Type     cpython/descrobject.h              internal
 *   a static type's dict      tp_dict         NULL for builtins: PyType_GetDict
 *   PyObject_HasAttr          clears any error                   reports unraisable ones
 *   _PySet_NextEntry          cpython/setobject.h                internal (still exported)
 *   PyWeakref_GetObject       (borrowed)                         deprecated: PyWeakref_GetRef
 *   _PyObject_GetDictPtr      exported by all three (cpython/object.h); from 3.12 on an
 *                             instance with a managed dict gets its dict materialized
 *
 * The frame part needs CPython's internal headers: a file that wants it
 * defines Py_BUILD_CORE and CDY_PC_FRAME before including anything (only
 * frame/eval.c does).                                                    */
#ifndef CDY_PYCOMPAT_H
#define CDY_PYCOMPAT_H

#include "pyver/pyver.h"

/* Kinds of co_localspluskinds' bytes (Include/internal/pycore_code.h). */
#define CDY_PC_FAST_LOCAL 0x20
#define CDY_PC_FAST_CELL 0x40
#define CDY_PC_FAST_FREE 0x80

/* The CO_FAST_* kind bits of local slot i of co (0 out of range). */
static inline int cdy_pc_local_kind(PyCodeObject *co, int i)
{
    PyObject *k = co->co_localspluskinds;
    return k && i >= 0 && i < PyBytes_GET_SIZE(k) ? (unsigned char)PyBytes_AS_STRING(k)[i] : 0;
}

/* The version tag of dict d: equal tags mean d has not changed.  3.12
 * deprecates the field for extensions but still bumps it on every change
 * (dictobject.c's _PyDict_NotifyEvent / DICT_NEXT_VERSION). */
static inline uint64_t cdy_pc_dict_version(PyObject *d)
{
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    return ((PyDictObject *)d)->ma_version_tag;
#pragma GCC diagnostic pop
}

#if CDY_PY >= 313
/* moved from cpython/traceback.h to internal/pycore_traceback.h in 3.13, still exported */
PyAPI_FUNC(void) _PyTraceback_Add(const char *, const char *, int);
#endif

#if CDY_PY >= 313
/* moved to internal/pycore_setobject.h in 3.13, still exported */
PyAPI_FUNC(int) _PySet_NextEntry(PyObject *set, Py_ssize_t *pos, PyObject **key, Py_hash_t *hash);
#endif

/* The next item of set s after *pos (borrowed key, its hash): 1, or 0 at the end. */
static inline int cdy_pc_set_next(PyObject *s, Py_ssize_t *pos, PyObject **key, Py_hash_t *hash)
{
    return _PySet_NextEntry(s, pos, key, hash);
}

/* The referent of weak reference ref, a new reference (None when it is dead):
 * 3.13 deprecates PyWeakref_GetObject (a borrowed reference) for
 * PyWeakref_GetRef. */
static inline PyObject *cdy_pc_weakref_get(PyObject *ref)
{
#if CDY_PY >= 313
    PyObject *o = NULL;
    if (PyWeakref_GetRef(ref, &o) <= 0) {
        PyErr_Clear();
        return Py_NewRef(Py_None);
    }
    return o;
#else
    return Py_NewRef(PyWeakref_GetObject(ref));
#endif
}

/* Add a traceback entry "File file, line line, in fn" to the pending exception. */
static inline void cdy_pc_traceback_add(const char *fn, const char *file, int line)
{
    _PyTraceback_Add(fn, file, line);
}

/* The dict of type tp (borrowed: the type keeps it).  3.12 leaves tp_dict
 * NULL on static builtin types (dict, object, ...; their dicts live in the
 * interpreter): PyType_GetDict (3.12+) returns it. */
static inline PyObject *cdy_pc_type_dict(PyTypeObject *tp)
{
#if CDY_PY >= 312
    PyObject *d = PyType_GetDict(tp);
    Py_XDECREF(d);
    return d;
#else
    return tp->tp_dict;
#endif
}

/* PyObject_HasAttr as 3.11 and 3.12 have it: 1 or 0, any error cleared (3.13's
 * reports an error other than AttributeError as unraisable before clearing it). */
static inline int cdy_pc_has_attr(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (!v) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(v);
    return 1;
}

/* The same with a C string name. */
static inline int cdy_pc_has_attr_string(PyObject *o, const char *name)
{
    PyObject *v = PyObject_GetAttrString(o, name);
    if (!v) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(v);
    return 1;
}

/* The type of bound slot wrappers ((1).__add__): _PyMethodWrapper_Type, which
 * 3.13 no longer declares for extensions; found once from an instance. */
static inline PyTypeObject *cdy_pc_method_wrapper_type(void)
{
    static PyTypeObject *tp;
    if (!tp) {
        PyObject *w = PyObject_GetAttrString(Py_None, "__repr__");
        if (!w) {
            PyErr_Clear();
            return &PyMethodDescr_Type;   /* a type no bound wrapper has */
        }
        tp = Py_TYPE(w);
        Py_DECREF(w);
    }
    return tp;
}

/* ---- frames (Py_BUILD_CORE) ---------------------------------------------- */
#ifdef CDY_PC_FRAME
#include <internal/pycore_frame.h>
#if CDY_PY >= 313
#include <internal/pycore_ceval.h>   /* _PyEval_FrameClearAndPop */
#endif

typedef _PyInterpreterFrame cdy_frame;

/* The code object frame f runs (borrowed). */
static inline PyCodeObject *cdy_pc_frame_code(cdy_frame *f)
{
#if CDY_PY >= 313
    return (PyCodeObject *)f->f_executable;
#else
    return f->f_code;
#endif
}

/* The function object of frame f (borrowed). */
static inline PyFunctionObject *cdy_pc_frame_func(cdy_frame *f)
{
#if CDY_PY >= 312
    return (PyFunctionObject *)f->f_funcobj;
#else
    return f->f_func;
#endif
}

/* 1 if frame f has not run an instruction yet (a fresh call). */
static inline int cdy_pc_frame_fresh(cdy_frame *f)
{
#if CDY_PY >= 313
    return f->instr_ptr == _PyCode_CODE(cdy_pc_frame_code(f));
#else
    return f->prev_instr == _PyCode_CODE(cdy_pc_frame_code(f)) - 1;
#endif
}

/* 1 if frame f is a plain call's frame on the thread's stack (not a
 * generator's, not a frame object's). */
static inline int cdy_pc_frame_on_thread(cdy_frame *f)
{
    return f->owner == FRAME_OWNED_BY_THREAD;
}

/* 1 if the hook may run something else for fresh frame f and then
 * discard it with cdy_pc_frame_discard (no frame object refers to it). */
static inline int cdy_pc_frame_discardable(cdy_frame *f)
{
    return f->frame_obj == NULL;
}

/* A PEP 523 hook that did not evaluate fresh frame f (it ran other code
 * for it) releases it: 3.11's caller (_PyEval_Vector) clears and pops the
 * frame itself; from 3.12 on the evaluator does, so the hook must. */
static inline void cdy_pc_frame_discard(PyThreadState *ts, cdy_frame *f)
{
#if CDY_PY >= 313
    _PyEval_FrameClearAndPop(ts, f);
#elif CDY_PY == 312
    /* Python/frame.c _PyFrame_ClearExceptCode (no frame object: see
     * cdy_pc_frame_discardable), the code, then pystate.c
     * _PyThreadState_PopFrame; neither is exported by 3.12 */
    for (int i = 0; i < f->stacktop; i++)
        Py_XDECREF(f->localsplus[i]);
    Py_XDECREF(f->f_locals);
    Py_DECREF(f->f_funcobj);
    Py_DECREF(f->f_code);
    PyObject **base = (PyObject **)f;
    _PyStackChunk *chunk = ts->datastack_chunk;
    if (base == &chunk->data[0]) {   /* the frame opened this chunk: free it */
        _PyStackChunk *prev = chunk->previous;
        ts->datastack_top = &prev->data[prev->top];
        ts->datastack_chunk = prev;
        ts->datastack_limit = (PyObject **)((char *)prev + prev->size);
        PyObjectArenaAllocator arena;
        PyObject_GetArenaAllocator(&arena);
        arena.free(arena.ctx, chunk, chunk->size);
    }
    else
        ts->datastack_top = base;
#else
    (void)ts, (void)f;
#endif
}
#endif /* CDY_PC_FRAME */

#endif
