/* state.c - global torch state that changes what ops return, read without
 * a Python call: the default dtype (factories, integer -> float promotion),
 * autocast (which ops run in which dtype), and the torch function and
 * dispatch mode stacks (torch.device(...) as a context, TorchDispatchMode,
 * FlopCounterMode: Python code that sees, and may change, every op).
 *
 * A trace that depends on such state guards it (CDY_GUARD_STATE), and the
 * guard is checked on every call of the compiled code, so the readers must
 * cost nanoseconds: they call the C++ functions torch's own Python bindings
 * call (c10::get_default_dtype_as_scalartype, at::autocast::is_autocast_enabled
 * and get_autocast_dtype, the mode stacks' stack_len), found in the torch
 * libraries the process already loaded.  Where they are missing, or disagree
 * once with torch's Python functions, the Python functions are used instead
 * (about 0.1-0.3 us each). */
#include "frame/guards.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* c10::DeviceType values of the devices whose autocast state is read. */
enum { ST_DEV_CPU = 0, ST_DEV_CUDA = 1 };

static signed char (*st_default_fast)(void);
static _Bool (*st_autocast_on_fast)(signed char);
static signed char (*st_autocast_dtype_fast)(signed char);
static int64_t (*st_fn_modes_fast)(void), (*st_dispatch_modes_fast)(void);
static PyObject *st_get_default_dtype, *st_is_autocast, *st_get_autocast_dtype;
static PyObject *st_fn_modes, *st_dispatch_modes;
static PyObject *st_dev_name[2];          /* "cpu", "cuda" */
static PyObject *st_dtypes;               /* {torch.dtype: c10::ScalarType value} */

/* torch.dtype names by c10::ScalarType value (the floating ones a default
 * or autocast dtype can be). */
#define ST_DTYPES(X) X(5, float16) X(6, float32) X(7, float64) X(15, bfloat16)

/* The c10::ScalarType value of a torch.dtype (borrowed; may be NULL): -2 for
 * another dtype, -1 for none (error cleared). */
static int st_dtype_code(PyObject *dt)
{
    PyObject *c = dt && st_dtypes ? PyDict_GetItemWithError(st_dtypes, dt) : NULL;
    PyErr_Clear();
    return c ? (int)PyLong_AsLong(c) : dt ? -2 : -1;
}

/* The default dtype through torch.get_default_dtype(). */
static int st_default_slow(void)
{
    PyObject *dt = PyObject_CallNoArgs(st_get_default_dtype);
    int r = st_dtype_code(dt);
    Py_XDECREF(dt);
    PyErr_Clear();
    return r;
}

/* fn(device) for a device index of st_dev_name: a new reference or NULL (cleared). */
static PyObject *st_call_dev(PyObject *fn, int dev)
{
    PyObject *r = fn ? PyObject_CallOneArg(fn, st_dev_name[dev]) : NULL;
    PyErr_Clear();
    return r;
}

/* The autocast state through torch's Python functions (see cdy_state_read). */
static int st_autocast_slow(void)
{
    int v = 0;
    for (int dev = 0; dev < 2; dev++) {
        PyObject *on = st_call_dev(st_is_autocast, dev);
        PyObject *dt = st_call_dev(st_get_autocast_dtype, dev);
        v |= (on == Py_True) << dev | (st_dtype_code(dt) & 0xff) << (8 + 8 * dev);
        Py_XDECREF(on);
        Py_XDECREF(dt);
    }
    return v;
}

/* The autocast state through the C++ functions. */
static int st_autocast_fast(void)
{
    int v = 0;
    for (int dev = 0; dev < 2; dev++)
        v |= (int)st_autocast_on_fast((signed char)dev) << dev |
             (st_autocast_dtype_fast((signed char)dev) & 0xff) << (8 + 8 * dev);
    return v;
}

/* A length (an int64) returned by fn() (NULL: 0); 1 << 14 on an error. */
static int64_t st_call_len(PyObject *fn)
{
    PyObject *r = fn ? PyObject_CallNoArgs(fn) : NULL;
    int64_t n = r ? PyLong_AsLongLong(r) : fn ? 1 << 14 : 0;
    Py_XDECREF(r);
    PyErr_Clear();
    return n;
}

/* The mode stacks' lengths (capped), function modes in bits 0-14, dispatch
 * modes from bit 15. */
static int st_modes(void)
{
    int64_t f = st_fn_modes_fast ? st_fn_modes_fast() : st_call_len(st_fn_modes);
    int64_t d = st_fn_modes_fast ? st_dispatch_modes_fast() : st_call_len(st_dispatch_modes);
    f = f < 0 || f > 0x7fff ? 0x7fff : f;
    d = d < 0 || d > 0x7fff ? 0x7fff : d;
    return (int)(f | d << 15);
}

int cdy_state_read(int which)
{
    if (which == CDY_STATE_DEFAULT_DTYPE)
        return st_default_fast ? st_default_fast() : st_default_slow();
    if (which == CDY_STATE_MODES)
        return st_modes();
    return st_autocast_on_fast ? st_autocast_fast() : st_autocast_slow();
}

/* See guards.h. */
int cdy_state_dtype_code(PyObject *dt)
{
    return st_dtype_code(dt);
}

/* See guards.h: torch.set_autocast_enabled("cpu", ...) and
 * torch.set_autocast_dtype("cpu", ...) from v's CPU bits. */
void cdy_state_set_cpu_autocast(int v)
{
    PyObject *t = PyImport_ImportModule("torch"), *dt = NULL, *key, *code;
    Py_ssize_t pos = 0;
    while (st_dtypes && PyDict_Next(st_dtypes, &pos, &key, &code))
        if (PyLong_AsLong(code) == ((v >> 8) & 0xff))
            dt = key;
    PyObject *r = t ? PyObject_CallMethod(t, "set_autocast_enabled", "OO", st_dev_name[ST_DEV_CPU],
                                          v & 1 ? Py_True : Py_False) : NULL;
    Py_XDECREF(r);
    r = t && dt ? PyObject_CallMethod(t, "set_autocast_dtype", "OO", st_dev_name[ST_DEV_CPU], dt)
                : NULL;
    Py_XDECREF(r);
    Py_XDECREF(t);
    PyErr_Clear();
}

/* dlsym of name in the torch library `lib` (torch/lib/<lib>) if the process
 * has it loaded; NULL otherwise. */
static void *st_symbol(const char *libdir, const char *lib, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", libdir, lib);
    void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    void *f = h ? dlsym(h, name) : NULL;
    (void)dlerror();
    return f;   /* h stays open: torch's libraries live as long as the process */
}

/* Resolve the C++ readers; keep them only if they agree with the Python ones. */
static void st_resolve_fast(PyObject *torch)
{
    PyObject *file = PyObject_GetAttrString(torch, "__file__");
    const char *f = file && PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : NULL;
    const char *slash = f ? strrchr(f, '/') : NULL;
    char dir[4000];
    PyErr_Clear();
    if (slash && (size_t)(slash - f) + 5 < sizeof(dir)) {
        snprintf(dir, sizeof(dir), "%.*s/lib", (int)(slash - f), f);
        *(void **)&st_default_fast = st_symbol(dir, "libc10.so", "_ZN3c1031get_default_dtype_as_scalartypeEv");
        *(void **)&st_autocast_on_fast =
            st_symbol(dir, "libtorch_cpu.so", "_ZN2at8autocast19is_autocast_enabledEN3c1010DeviceTypeE");
        *(void **)&st_autocast_dtype_fast =
            st_symbol(dir, "libtorch_cpu.so", "_ZN2at8autocast18get_autocast_dtypeEN3c1010DeviceTypeE");
        *(void **)&st_fn_modes_fast =
            st_symbol(dir, "libtorch_cpu.so", "_ZN2at4impl22PythonTorchFunctionTLS9stack_lenEv");
        *(void **)&st_dispatch_modes_fast =
            st_symbol(dir, "libc10.so", "_ZN3c104impl20TorchDispatchModeTLS9stack_lenEv");
    }
    Py_XDECREF(file);
    if (!st_dispatch_modes_fast)
        st_fn_modes_fast = NULL;
    if (st_fn_modes_fast) {   /* the C++ and the Python readers must agree */
        int64_t (*fast)(void) = st_fn_modes_fast;
        int v = st_modes();
        st_fn_modes_fast = NULL;
        st_fn_modes_fast = v == st_modes() ? fast : NULL;
    }
    if (st_default_fast && st_default_fast() != st_default_slow())
        st_default_fast = NULL;
    if (!st_autocast_on_fast || !st_autocast_dtype_fast || st_autocast_fast() != st_autocast_slow())
        st_autocast_on_fast = NULL;
}

int cdy_state_init(PyObject *torch)
{
    st_get_default_dtype = PyObject_GetAttrString(torch, "get_default_dtype");
    st_is_autocast = PyObject_GetAttrString(torch, "is_autocast_enabled");
    st_get_autocast_dtype = PyObject_GetAttrString(torch, "get_autocast_dtype");
    PyObject *C = PyObject_GetAttrString(torch, "_C");
    st_fn_modes = C ? PyObject_GetAttrString(C, "_len_torch_function_stack") : NULL;
    st_dispatch_modes = C ? PyObject_GetAttrString(C, "_len_torch_dispatch_stack") : NULL;
    Py_XDECREF(C);
    st_dev_name[ST_DEV_CPU] = PyUnicode_InternFromString("cpu");
    st_dev_name[ST_DEV_CUDA] = PyUnicode_InternFromString("cuda");
    st_dtypes = PyDict_New();
    if (!st_get_default_dtype || !st_dev_name[0] || !st_dev_name[1] || !st_dtypes)
        return -1;
#define ST_X(code, name)                                                   \
    {                                                                      \
        PyObject *d = PyObject_GetAttrString(torch, #name);                \
        PyObject *c = PyLong_FromLong(code);                               \
        int bad = !d || !c || PyDict_SetItem(st_dtypes, d, c);             \
        Py_XDECREF(d);                                                     \
        Py_XDECREF(c);                                                     \
        if (bad)                                                           \
            return -1;                                                     \
    }
    ST_DTYPES(ST_X)
#undef ST_X
    PyErr_Clear();   /* an older torch without the autocast functions: they read as off */
    st_resolve_fast(torch);
    return 0;
}

/* The name of a c10::ScalarType value among ST_DTYPES. */
static const char *st_dtype_name(int code)
{
    switch (code) {
#define ST_X(c, name) case c: return "torch." #name;
    ST_DTYPES(ST_X)
#undef ST_X
    default: return "another dtype";
    }
}

void cdy_state_text(int which, int v, char *buf, size_t n)
{
    if (which == CDY_STATE_DEFAULT_DTYPE) {
        snprintf(buf, n, "%s", st_dtype_name(v));
        return;
    }
    if (which == CDY_STATE_MODES) {
        snprintf(buf, n, "%d torch function mode%s and %d dispatch mode%s", v & 0x7fff,
                 (v & 0x7fff) == 1 ? "" : "s", v >> 15, v >> 15 == 1 ? "" : "s");
        return;
    }
    size_t len = 0;
    buf[0] = 0;
    for (int dev = 0; dev < 2 && len < n; dev++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s autocast %s (%s)", dev ? ", " : "",
                                dev ? "CUDA" : "CPU", v >> dev & 1 ? "on" : "off",
                                st_dtype_name(v >> (8 + 8 * dev) & 0xff));
}
