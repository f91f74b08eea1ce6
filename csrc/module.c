/* module.c - the cdynamo._C module: initialisation, counters, and the
 * slow-path bridges to the Python package (config, logs, warnings).       */
#include "frame/frame.h"
#include "runtime/runtime.h"
#include "trace/reasons.h"
#include "pyver/pyver.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

cdy_strs_t cdy_str;
PyObject *cdy_torch;
PyObject *cdy_tensor_type;
PyObject *cdy_strided_layout;
PyObject *cdy_empty_tuple;

static PyObject *support_mod;   /* cdynamo._support, imported on first use */
static PyObject *config_mod;    /* cdynamo.config */
static PyObject *log_topics;    /* frozenset of enabled topic names */

/* cdynamo._support (borrowed) or NULL with error. */
static PyObject *support(void)
{
    if (!support_mod)
        support_mod = PyImport_ImportModule("cdynamo._support");
    return support_mod;
}

/* Call cdynamo._support.<name>(*Py_BuildValue(fmt, ...)) with the frame
 * hook off on this thread (cdynamo's own Python is never traced); new ref
 * or NULL. */
PyObject *cdy_py_call(const char *name, const char *fmt, ...)
{
    PyObject *mod = support();
    PyObject *fn = mod ? PyObject_GetAttrString(mod, name) : NULL;
    if (!fn)
        return NULL;
    cdy_tls saved = cdy_tls_state;
    cdy_tls_state.enabled = 0;
    va_list ap;
    va_start(ap, fmt);
    PyObject *args = Py_VaBuildValue(fmt[0] ? fmt : "()", ap);
    va_end(ap);
    PyObject *r = NULL;
    if (args && !PyTuple_Check(args)) {
        PyObject *t = PyTuple_Pack(1, args);
        Py_SETREF(args, t);
    }
    if (args)
        r = PyObject_Call(fn, args, NULL);
    Py_XDECREF(args);
    Py_DECREF(fn);
    cdy_tls_state = saved;
    return r;
}

/* 1 if topic is enabled. */
int cdy_log_on(const char *topic)
{
    if (!log_topics || PySet_GET_SIZE(log_topics) == 0)
        return 0;
    PyObject *s = PyUnicode_FromString(topic);
    int r = s ? PySet_Contains(log_topics, s) : 0;
    Py_XDECREF(s);
    if (r < 0)
        PyErr_Clear();
    return r > 0;
}

/* Log text under topic through cdynamo._support.log; errors are swallowed. */
void cdy_log(const char *topic, const char *fmt, ...)
{
    if (!cdy_log_on(topic))
        return;
    va_list ap;
    va_start(ap, fmt);
    PyObject *text = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (text) {
        PyObject *r = cdy_py_call("log", "sO", topic, text);
        Py_XDECREF(r);
        Py_DECREF(text);
    }
    PyErr_Clear();
    PyErr_Restore(et, ev, tb);
}

/* The text of b as a new str (b is emptied), or NULL with an error set. */
PyObject *cdy_buf_str(cdy_buf *b)
{
    char *s = cdy_buf_take(b);
    if (!s)
        return PyErr_NoMemory();
    PyObject *r = PyUnicode_FromString(s);
    free(s);
    return r;
}

/* cdynamo.config.<name>, new ref or NULL with error. */
PyObject *cdy_config_get(const char *name)
{
    if (!config_mod)
        config_mod = PyImport_ImportModule("cdynamo.config");
    return config_mod ? PyObject_GetAttrString(config_mod, name) : NULL;
}

/* 1 if cdynamo.config.<name> is true; 0 when false, unset or unreadable (errors cleared). */
int cdy_config_flag(const char *name)
{
    PyObject *v = cdy_config_get(name);
    int on = v ? PyObject_IsTrue(v) : 0;
    Py_XDECREF(v);
    PyErr_Clear();
    return on > 0;
}

/* Call the package's hook (record_break / record_eager) with a frame's
 * reason, its code and category, and the user's FILE:LINE; what it returns
 * (new ref), or NULL with errors dropped. */
static PyObject *record_frame(const char *hook, const char *reason, int code,
                              PyObject *filename, int line, const char *fn)
{
    int known = code > 0 && code < CDY_R_COUNT;
    PyObject *r = cdy_py_call(hook, "sOisss", reason, filename, line, fn, cdy_reason_code(code),
                              cdy_reason_cat_name(cdy_reasons[known ? code : 0].cat));
    PyErr_Clear();
    return r;
}

/* Hand a graph-break reason to the package (explain, stats). */
void cdy_record_break(const char *reason, int code, PyObject *filename, int line, const char *fn)
{
    Py_XDECREF(record_frame("record_break", reason, code, filename, line, fn));
}

/* Hand a frame that runs eagerly to the package (explain's eager_frames); the
 * record made (new ref), or NULL. */
PyObject *cdy_record_eager(const char *reason, int code, PyObject *filename, int line,
                           const char *fn)
{
    return record_frame("record_eager", reason, code, filename, line, fn);
}

/* _C._inject_trace_fault(kind, op=0): see cdy_trace_inject (tests only). */
static PyObject *py_inject_trace_fault(PyObject *self, PyObject *args)
{
    int kind, op = 0;
    if (!PyArg_ParseTuple(args, "i|i", &kind, &op))
        return NULL;
    if (cdy_trace_inject(kind, op)) {
        PyErr_SetString(PyExc_ValueError, "unknown fault kind");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* _C._dyn_test(flag): see cdy_pipeline_set_dyn_test (tests only). */
static PyObject *py_dyn_test(PyObject *self, PyObject *flag)
{
    int on = PyObject_IsTrue(flag);
    if (on < 0)
        return NULL;
    cdy_pipeline_set_dyn_test(on);
    Py_RETURN_NONE;
}

/* _C.stop_reasons() -> {code: (category, template)} of trace/reasons.def */
static PyObject *py_stop_reasons(PyObject *self, PyObject *unused)
{
    PyObject *d = PyDict_New();
    for (int i = 1; d && i < CDY_R_COUNT; i++) {
        PyObject *v = Py_BuildValue("(ss)", cdy_reason_cat_name(cdy_reasons[i].cat),
                                    cdy_reasons[i].tmpl);
        if (!v || PyDict_SetItemString(d, cdy_reasons[i].code, v))
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

/* _C.stats() -> dict of counters */
static PyObject *py_stats(PyObject *self, PyObject *unused)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
#define CDY_X(n)                                                   \
    {                                                              \
        PyObject *v = PyLong_FromLongLong(cdy_stats.n);             \
        if (!v || PyDict_SetItemString(d, #n, v)) {                \
            Py_XDECREF(v);                                         \
            Py_DECREF(d);                                          \
            return NULL;                                           \
        }                                                          \
        Py_DECREF(v);                                              \
    }
    CDY_STATS(CDY_X)
#undef CDY_X
    return d;
}

/* _C.reset(): drop all cache entries and counters. */
static PyObject *py_reset(PyObject *self, PyObject *unused)
{
    return cdy_frame_reset();
}

/* _C.set_log_topics(iterable of str) */
static PyObject *py_set_log_topics(PyObject *self, PyObject *arg)
{
    PyObject *s = PyFrozenSet_New(arg);
    if (!s)
        return NULL;
    Py_XSETREF(log_topics, s);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"stats", py_stats, METH_NOARGS, "counters of the frame hook and compiler"},
    {"_inject_trace_fault", py_inject_trace_fault, METH_VARARGS,
     "tests only: (kind, op) 0 none, 1 opcode op fails without a stop, 2 no return value, "
     "3 an invalid graph"},
    {"_dyn_test", py_dyn_test, METH_O,
     "tests only: while true, every frame compiles with every dim of its argument tensors "
     "symbolic (as dynamic=True); a graph whose kernels take runtime sizes has .symbols"},
    {"stop_reasons", py_stop_reasons, METH_NOARGS,
     "{code: (category, message template)} of every reason a trace stops"},
    {"reset", py_reset, METH_NOARGS, "forget every compiled entry and reset counters"},
    {"set_log_topics", py_set_log_topics, METH_O, "enable log topics"},
    {"set_output_pool_bytes", cdy_mempool_py_set_limit, METH_O,
     "cache at most n bytes of freed graph tensors for reuse (0: no pool)"},
    {"set_matmul_direct", cdy_mmd_py_set, METH_O,
     "graphs compiled from now call torch.matmul's mm / bmm directly (default True); "
     "returns the flag before"},
    {"set_heap_keep", cdy_mempool_py_heap_keep, METH_O,
     "glibc keeps n bytes of freed heap memory mapped (config.heap_keep_mb)"},
    {"output_pool_stats", cdy_mempool_py_stats, METH_NOARGS, "the tensor pool's counters"},
    {"reset_output_pool_peak", cdy_mempool_py_reset_peak, METH_NOARGS,
     "the pool's high-water mark of held bytes starts again at the bytes held now"},
    {"clear_output_pool", cdy_mempool_py_clear, METH_NOARGS,
     "free the pool's cached blocks and zero its counters"},
    {"callable_table", cdy_callables_py_table, METH_NOARGS,
     "[(callable, op, meta rule row, builders, contiguous)] of ops/callables.def, as resolved"},
    {"start_standby", cdy_py_start_standby, METH_NOARGS,
     "start the compiler for the next build ahead of its source (config.standby_compiler)"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "cdynamo._C", "cdynamo's C core", -1, module_methods,
};

/* Intern the hot-path attribute names; 0 or -1. */
static int init_strings(void)
{
#define CDY_S(f) (cdy_str.f = PyUnicode_InternFromString(#f))
    if (!CDY_S(data_ptr) || !CDY_S(dtype) || !CDY_S(shape) || !CDY_S(stride) ||
        !CDY_S(requires_grad) || !CDY_S(layout) || !CDY_S(is_cpu) || !CDY_S(_version) ||
        !CDY_S(storage_offset))
        return -1;
#undef CDY_S
    return 0;
}

PyMODINIT_FUNC PyInit__C(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    if (init_strings())
        goto fail;
    cdy_torch = PyImport_ImportModule("torch");
    if (!cdy_torch)
        goto fail;
    cdy_tensor_type = PyObject_GetAttrString(cdy_torch, "Tensor");
    cdy_strided_layout = PyObject_GetAttrString(cdy_torch, "strided");
    cdy_empty_tuple = PyTuple_New(0);
    if (!cdy_tensor_type || !cdy_strided_layout || !cdy_empty_tuple || cdy_runtime_init(cdy_torch) ||
        cdy_mempool_init(cdy_torch) || cdy_state_init(cdy_torch))
        goto fail;
    if (PyType_Ready(&cdy_compiled_type) < 0)
        goto fail;
    Py_INCREF(&cdy_compiled_type);
    if (PyModule_AddObject(m, "CompiledGraph", (PyObject *)&cdy_compiled_type) < 0)
        goto fail;
    if (cdy_frame_init(m) || cdy_pyver_init(m) || cdy_train_call_init(m) ||
        cdy_attention_init(m))
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
