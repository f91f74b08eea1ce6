/* module.h - what every Python-facing part of cdynamo._C shares (module.c):
 * Python.h and the supported CPython versions, the counters of stats(),
 * the hooks into the Python package (logs, config, recorded breaks), the
 * interned strings and torch objects read on hot paths.  The Python-free
 * contract of graphs and plans is cdynamo.h's. */
#ifndef CDY_MODULE_H
#define CDY_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "cdynamo.h"

#include "pyver/pyver.h"   /* the Python versions cdynamo supports (3.11 - 3.13) */

/* ---- counters (GIL-protected) --------------------------------------------- */
#define CDY_STATS(X) X(frames_seen) X(frames_compiled) X(cache_hits) X(cache_misses) \
    X(recompiles) X(graph_breaks) X(fallbacks) X(kernels_compiled) X(disk_cache_hits) \
    X(standby_builds) X(direct_calls) X(packed_linear_calls) X(weight_packs) X(eager_reruns)
typedef struct {
#define CDY_X(n) long long n;
    CDY_STATS(CDY_X)
#undef CDY_X
} cdy_stats_t;
extern cdy_stats_t cdy_stats;

/* ---- hooks into the Python package (slow paths only) ---------------------- */
/* Calls cdynamo._support.<name>(*args); returns new ref or NULL (error set). */
PyObject *cdy_py_call(const char *name, const char *fmt, ...);
/* 1 if log topic is on (set by cdynamo at import through _C.set_log_topics). */
int cdy_log_on(const char *topic);
/* Emit text under a topic through the package's logger; never fails. */
void cdy_log(const char *topic, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The package's config value (new ref) or NULL with error set. */
PyObject *cdy_config_get(const char *name);
/* 1 if the package's config flag is true (0 when false, unset or unreadable). */
int cdy_config_flag(const char *name);
/* Record a graph break / fallback reason for stats and explain; code is a
 * cdy_reason (trace/reasons.h). */
void cdy_record_break(const char *reason, int code, PyObject *filename, int line, const char *fn);
/* Record a frame that runs eagerly (explain's eager_frames); code as above; the
 * record (new ref) or NULL. */
PyObject *cdy_record_eager(const char *reason, int code, PyObject *filename, int line,
                           const char *fn);

/* The text of b as a new str (b is emptied), or NULL with an error set. */
PyObject *cdy_buf_str(cdy_buf *b);

/* interned strings used on hot paths */
typedef struct {
    PyObject *data_ptr, *dtype, *shape, *stride, *requires_grad, *layout, *is_cpu, *_version,
        *storage_offset;
} cdy_strs_t;
extern cdy_strs_t cdy_str;
extern PyObject *cdy_torch;           /* the torch module */
extern PyObject *cdy_tensor_type;     /* torch.Tensor */
extern PyObject *cdy_strided_layout;  /* torch.strided */
extern PyObject *cdy_empty_tuple;     /* () */

#endif /* CDY_MODULE_H */
