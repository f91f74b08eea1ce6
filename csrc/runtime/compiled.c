/* compiled.c - CompiledGraph: the callable that the patched bytecode calls.
 *
 * C backend: allocates the output buffers through torch.empty_strided with
 * the meta eager would give, reads every buffer's data pointer and calls the
 * kernels of a dlopen()ed shared object through libffi (cifs prepared once,
 * at load).  Eager backend: replays the traced torch calls.  Both take the
 * graph inputs positionally and return one tensor or a tuple of tensors.   */
#include "internal.h"

#include <dlfcn.h>
#include <ffi.h>
#include <string.h>
#include <time.h>

/* Work (elements) above which the GIL is released around a kernel call. */
#define CDY_RELEASE_GIL_NUMEL 65536

typedef struct {
    void (*fn)(void);
    ffi_cif cif;
    ffi_type **atypes;
    int nargs;
    int *args;            /* buffer numbers */
    int64_t work;         /* largest buffer numel it touches */
    char symbol[48];      /* kernel name in the shared object */
    long long prof_calls; /* profiled calls (cdy_rt_profile_kernels on) */
    long long prof_ns;    /* their total wall time */
} rt_kernel;

/* Time every kernel call (set by CompiledGraph.set_profile_kernels); read
 * once per call of a compiled graph. */
static int cdy_rt_profile_kernels;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *name;
    int eager;            /* 1: replay pynodes */
    int single;           /* return outputs[0] itself, not a tuple */
    int ninputs, nbuffers, noutputs;
    int *outputs;         /* buffer (C) or value (eager) numbers */
    /* C backend */
    void *dl;
    int nkernels;
    rt_kernel *kernels;
    PyObject ***alloc_args; /* per buffer >= ninputs: {sizes, strides, dtype} */
    /* eager backend */
    int nvalues, npynodes;
    cdy_pynode *pynodes;  /* own copies of the arrays */
    PyObject *keep;       /* objects the pynodes refer to */
    int *value_input;     /* per value: input position or -1 */
    PyObject *source;     /* generated C (str) or None */
    PyObject *ir_pre;     /* loop IR before / after fusion (str), NULL for eager */
    PyObject *ir_post;
    long long calls;
} cdy_compiled;

static PyObject *empty_strided;   /* torch.empty_strided */
static PyObject *kw_dtype;        /* ("dtype",) */
static PyObject *dtype_objs[CDY_DT_COUNT];

/* Look up torch objects the runtime needs; 0 or -1 with error. */
int cdy_runtime_init(PyObject *torch)
{
    empty_strided = PyObject_GetAttrString(torch, "empty_strided");
    kw_dtype = Py_BuildValue("(s)", "dtype");
    if (!empty_strided || !kw_dtype)
        return -1;
    for (int d = 0; d < CDY_DT_COUNT; d++) {
        dtype_objs[d] = PyObject_GetAttrString(torch, cdy_dtype_table[d].name);
        if (!dtype_objs[d])
            return -1;
    }
    return 0;
}

/* Data pointer of tensor t, or NULL with error set. */
static void *tensor_ptr(PyObject *t)
{
    PyObject *p = PyObject_CallMethodNoArgs(t, cdy_str.data_ptr);
    if (!p)
        return NULL;
    void *v = PyLong_AsVoidPtr(p);
    Py_DECREF(p);
    if (!v && PyErr_Occurred())
        return NULL;
    return v ? v : (void *)(uintptr_t)1;   /* zero-size tensors may have no storage */
}

/* Tuple of the ints in a[0..n). */
static PyObject *int_tuple(const int64_t *a, int n)
{
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *v = PyLong_FromLongLong(a[i]);
        if (!v) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* Result of a call: outputs[0] when single, else a tuple; steals nothing. */
static PyObject *make_result(cdy_compiled *c, PyObject **vals)
{
    if (c->single) {
        PyObject *v = vals[c->outputs[0]];
        Py_INCREF(v);
        return v;
    }
    PyObject *t = PyTuple_New(c->noutputs);
    for (int i = 0; t && i < c->noutputs; i++) {
        PyObject *v = vals[c->outputs[i]];
        Py_INCREF(v);
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* Call every kernel of c on the buffers' data pointers ptrs. */
static void run_kernels(cdy_compiled *c, void **ptrs)
{
    for (int k = 0; k < c->nkernels; k++) {
        rt_kernel *kn = &c->kernels[k];
        void *avals[CDY_MAX_KARGS];
        for (int a = 0; a < kn->nargs; a++)
            avals[a] = &ptrs[kn->args[a]];
        if (kn->work >= CDY_RELEASE_GIL_NUMEL) {
            Py_BEGIN_ALLOW_THREADS
            ffi_call(&kn->cif, kn->fn, NULL, avals);
            Py_END_ALLOW_THREADS
        }
        else
            ffi_call(&kn->cif, kn->fn, NULL, avals);
    }
}

/* Monotonic clock in nanoseconds. */
static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* run_kernels, timing each ffi_call into the kernel's prof_calls / prof_ns. */
static void run_kernels_profiled(cdy_compiled *c, void **ptrs)
{
    for (int k = 0; k < c->nkernels; k++) {
        rt_kernel *kn = &c->kernels[k];
        void *avals[CDY_MAX_KARGS];
        long long t0, t1;
        for (int a = 0; a < kn->nargs; a++)
            avals[a] = &ptrs[kn->args[a]];
        if (kn->work >= CDY_RELEASE_GIL_NUMEL) {
            Py_BEGIN_ALLOW_THREADS
            t0 = now_ns();
            ffi_call(&kn->cif, kn->fn, NULL, avals);
            t1 = now_ns();
            Py_END_ALLOW_THREADS
        }
        else {
            t0 = now_ns();
            ffi_call(&kn->cif, kn->fn, NULL, avals);
            t1 = now_ns();
        }
        kn->prof_calls++;
        kn->prof_ns += t1 - t0;
    }
}

/* Run the kernels on args; the C backend's vectorcall. */
static PyObject *run_c(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    cdy_compiled *c = (cdy_compiled *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != c->ninputs || kw) {
        PyErr_Format(PyExc_TypeError, "%U expects %d tensors, got %zd", c->name, c->ninputs, nargs);
        return NULL;
    }
    PyObject *stackbufs[16];
    void *stackptrs[16];
    PyObject **bufs = c->nbuffers <= 16 ? stackbufs : PyMem_Calloc((size_t)c->nbuffers, sizeof(PyObject *));
    void **ptrs = c->nbuffers <= 16 ? stackptrs : PyMem_Calloc((size_t)c->nbuffers, sizeof(void *));
    PyObject *res = NULL;
    int i = 0;
    if (!bufs || !ptrs) {
        PyErr_NoMemory();
        goto done;
    }
    for (; i < c->ninputs; i++) {
        bufs[i] = args[i];
        Py_INCREF(args[i]);
        if (!(ptrs[i] = tensor_ptr(args[i]))) {
            i++;
            goto done;
        }
    }
    for (; i < c->nbuffers; i++) {
        bufs[i] = PyObject_Vectorcall(empty_strided, c->alloc_args[i], 2, kw_dtype);
        if (!bufs[i] || !(ptrs[i] = tensor_ptr(bufs[i]))) {
            i++;
            goto done;
        }
    }
    if (__builtin_expect(cdy_rt_profile_kernels, 0))
        run_kernels_profiled(c, ptrs);
    else
        run_kernels(c, ptrs);
    c->calls++;
    res = make_result(c, bufs);
done:
    for (int j = 0; bufs && j < i; j++)
        Py_XDECREF(bufs[j]);
    if (bufs != stackbufs)
        PyMem_Free(bufs);
    if (ptrs != stackptrs)
        PyMem_Free(ptrs);
    return res;
}

/* Replay the traced torch calls; the eager backend's vectorcall. */
static PyObject *run_eager(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    cdy_compiled *c = (cdy_compiled *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != c->ninputs || kw) {
        PyErr_Format(PyExc_TypeError, "%U expects %d tensors, got %zd", c->name, c->ninputs, nargs);
        return NULL;
    }
    PyObject **vals = PyMem_Calloc((size_t)c->nvalues + 1, sizeof(PyObject *));
    PyObject *res = NULL;
    if (!vals)
        return PyErr_NoMemory();
    for (int v = 0; v < c->nvalues; v++)
        if (c->value_input[v] >= 0) {
            vals[v] = args[c->value_input[v]];
            Py_INCREF(vals[v]);
        }
    for (int n = 0; n < c->npynodes; n++) {
        cdy_pynode *p = &c->pynodes[n];
        PyObject *av[16];
        for (int a = 0; a < p->nargs; a++)
            av[a] = p->ref[a] >= 0 ? vals[p->ref[a]] : p->cst[a];
        Py_ssize_t nkw = p->kwnames ? PyTuple_GET_SIZE(p->kwnames) : 0;
        PyObject *r = PyObject_Vectorcall(p->fn, av, (size_t)(p->nargs - nkw), p->kwnames);
        if (!r)
            goto done;
        Py_XSETREF(vals[p->value], r);
    }
    c->calls++;
    res = make_result(c, vals);
done:
    for (int v = 0; v < c->nvalues; v++)
        Py_XDECREF(vals[v]);
    PyMem_Free(vals);
    return res;
}

/* Release everything a compiled graph owns. */
static void compiled_dealloc(PyObject *self)
{
    cdy_compiled *c = (cdy_compiled *)self;
    for (int k = 0; c->kernels && k < c->nkernels; k++) {
        PyMem_Free(c->kernels[k].atypes);
        PyMem_Free(c->kernels[k].args);
    }
    PyMem_Free(c->kernels);
    for (int b = 0; c->alloc_args && b < c->nbuffers; b++)
        for (int j = 0; c->alloc_args[b] && j < 3; j++)
            Py_XDECREF(c->alloc_args[b][j]);
    for (int b = 0; c->alloc_args && b < c->nbuffers; b++)
        PyMem_Free(c->alloc_args[b]);
    PyMem_Free(c->alloc_args);
    for (int n = 0; c->pynodes && n < c->npynodes; n++) {
        PyMem_Free(c->pynodes[n].ref);
        PyMem_Free(c->pynodes[n].cst);
    }
    PyMem_Free(c->pynodes);
    PyMem_Free(c->value_input);
    PyMem_Free(c->outputs);
    Py_XDECREF(c->keep);
    Py_XDECREF(c->name);
    Py_XDECREF(c->source);
    Py_XDECREF(c->ir_pre);
    Py_XDECREF(c->ir_post);
    if (c->dl)
        dlclose(c->dl);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *compiled_repr(PyObject *self)
{
    cdy_compiled *c = (cdy_compiled *)self;
    return PyUnicode_FromFormat("<cdynamo compiled graph %U: %s, %d inputs, %d outputs, %d kernels>",
                                c->name, c->eager ? "eager" : "C", c->ninputs, c->noutputs,
                                c->nkernels);
}

static PyObject *compiled_get_source(PyObject *self, void *closure)
{
    PyObject *s = ((cdy_compiled *)self)->source;
    return Py_NewRef(s ? s : Py_None);
}

static PyObject *compiled_get_calls(PyObject *self, void *closure)
{
    return PyLong_FromLongLong(((cdy_compiled *)self)->calls);
}

static PyObject *compiled_get_nkernels(PyObject *self, void *closure)
{
    return PyLong_FromLong(((cdy_compiled *)self)->nkernels);
}

static PyObject *compiled_get_ir_pre(PyObject *self, void *closure)
{
    PyObject *s = ((cdy_compiled *)self)->ir_pre;
    return Py_NewRef(s ? s : Py_None);
}

static PyObject *compiled_get_ir_post(PyObject *self, void *closure)
{
    PyObject *s = ((cdy_compiled *)self)->ir_post;
    return Py_NewRef(s ? s : Py_None);
}

/* [(kernel symbol, calls, total ns)] of the calls profiled so far (new list). */
static PyObject *compiled_get_kernel_profile(PyObject *self, void *closure)
{
    cdy_compiled *c = (cdy_compiled *)self;
    PyObject *l = PyList_New(c->nkernels);
    for (int k = 0; l && k < c->nkernels; k++) {
        rt_kernel *kn = &c->kernels[k];
        PyObject *t = Py_BuildValue("(sLL)", kn->symbol, kn->prof_calls, kn->prof_ns);
        if (!t) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, k, t);
    }
    return l;
}

/* CompiledGraph.reset_kernel_profile(): zero the profile counters. */
static PyObject *compiled_reset_profile(PyObject *self, PyObject *unused)
{
    cdy_compiled *c = (cdy_compiled *)self;
    for (int k = 0; k < c->nkernels; k++)
        c->kernels[k].prof_calls = c->kernels[k].prof_ns = 0;
    Py_RETURN_NONE;
}

/* CompiledGraph.set_profile_kernels(flag): turn kernel timing on or off for
 * every compiled graph; returns the previous setting. */
static PyObject *compiled_set_profile(PyObject *unused, PyObject *flag)
{
    int on = PyObject_IsTrue(flag);
    if (on < 0)
        return NULL;
    int old = cdy_rt_profile_kernels;
    cdy_rt_profile_kernels = on;
    return PyBool_FromLong(old);
}

static PyMethodDef compiled_methods[] = {
    {"reset_kernel_profile", compiled_reset_profile, METH_NOARGS,
     "zero this graph's per-kernel call counts and times"},
    {"set_profile_kernels", compiled_set_profile, METH_O | METH_STATIC,
     "time every kernel call of every compiled graph (True/False); returns the old value"},
    {NULL},
};

static PyGetSetDef compiled_getset[] = {
    {"source", compiled_get_source, NULL, "generated C source (C backend)", NULL},
    {"ir_pre_fusion", compiled_get_ir_pre, NULL, "loop IR before fusion (C backend)", NULL},
    {"ir_post_fusion", compiled_get_ir_post, NULL,
     "kernels after fusion: loops, nodes, loads/stores, vectorization, parallelism", NULL},
    {"kernel_profile", compiled_get_kernel_profile, NULL,
     "[(kernel symbol, calls, total ns)] while profiling is on", NULL},
    {"calls", compiled_get_calls, NULL, "number of calls", NULL},
    {"num_kernels", compiled_get_nkernels, NULL, "number of kernels", NULL},
    {NULL},
};

PyTypeObject cdy_compiled_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdynamo._C.CompiledGraph",
    .tp_basicsize = sizeof(cdy_compiled),
    .tp_dealloc = compiled_dealloc,
    .tp_repr = compiled_repr,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(cdy_compiled, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_getset = compiled_getset,
    .tp_methods = compiled_methods,
};

/* A new, empty compiled graph object. */
static cdy_compiled *compiled_new(const char *name, int single)
{
    cdy_compiled *c = PyObject_New(cdy_compiled, &cdy_compiled_type);
    if (!c)
        return NULL;
    memset((char *)c + sizeof(PyObject), 0, sizeof(*c) - sizeof(PyObject));
    c->name = PyUnicode_FromString(name);
    c->single = single;
    if (!c->name) {
        Py_DECREF(c);
        return NULL;
    }
    return c;
}

/* Resolve and prepare kernel k of plan from the library c->dl; 0 or -1. */
static int load_kernel(cdy_compiled *c, const cdy_plan *plan, int k)
{
    const cdy_kernel_desc *d = &plan->kernels[k];
    rt_kernel *kn = &c->kernels[k];
    kn->fn = (void (*)(void))dlsym(c->dl, d->symbol);
    if (!kn->fn) {
        PyErr_Format(PyExc_RuntimeError, "kernel %s missing from the shared object", d->symbol);
        return -1;
    }
    kn->nargs = d->nargs;
    snprintf(kn->symbol, sizeof(kn->symbol), "%s", d->symbol);
    kn->atypes = PyMem_Calloc((size_t)d->nargs + 1, sizeof(ffi_type *));
    kn->args = PyMem_Calloc((size_t)d->nargs + 1, sizeof(int));
    if (!kn->atypes || !kn->args) {
        PyErr_NoMemory();
        return -1;
    }
    for (int a = 0; a < d->nargs; a++) {
        kn->atypes[a] = &ffi_type_pointer;
        kn->args[a] = d->args[a];
        int64_t n = cdy_meta_numel(&plan->buffers[d->args[a]]);
        if (n > kn->work)
            kn->work = n;
    }
    if (ffi_prep_cif(&kn->cif, FFI_DEFAULT_ABI, (unsigned)d->nargs, &ffi_type_void, kn->atypes) != FFI_OK) {
        PyErr_SetString(PyExc_RuntimeError, "ffi_prep_cif failed");
        return -1;
    }
    return 0;
}

/* Prebuilt (sizes, strides, dtype) for allocating buffer b; 0 or -1. */
static int prepare_alloc(cdy_compiled *c, const cdy_meta *m, int b)
{
    PyObject **a = PyMem_Calloc(3, sizeof(PyObject *));
    if (!a) {
        PyErr_NoMemory();
        return -1;
    }
    c->alloc_args[b] = a;
    a[0] = int_tuple(m->sizes, m->ndim);
    a[1] = int_tuple(m->strides, m->ndim);
    a[2] = Py_NewRef(dtype_objs[m->dtype]);
    return a[0] && a[1] ? 0 : -1;
}

/* The C-backend callable for plan, loading so_path.  New ref or NULL. */
PyObject *cdy_compiled_from_plan(const cdy_plan *plan, const char *so_path, const char *name,
                                 int single)
{
    cdy_compiled *c = compiled_new(name, single);
    if (!c)
        return NULL;
    c->dl = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    if (!c->dl) {
        const char *e = dlerror();
        PyErr_Format(PyExc_OSError, "dlopen failed: %s", e ? e : so_path);
        goto fail;
    }
    c->ninputs = plan->ninputs;
    c->nbuffers = plan->nbuffers;
    c->noutputs = plan->noutputs;
    c->nkernels = plan->nkernels;
    c->outputs = PyMem_Calloc((size_t)plan->noutputs + 1, sizeof(int));
    c->kernels = PyMem_Calloc((size_t)plan->nkernels + 1, sizeof(rt_kernel));
    c->alloc_args = PyMem_Calloc((size_t)plan->nbuffers + 1, sizeof(PyObject **));
    if (!c->outputs || !c->kernels || !c->alloc_args) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(c->outputs, plan->outputs, sizeof(int) * (size_t)plan->noutputs);
    for (int k = 0; k < plan->nkernels; k++)
        if (load_kernel(c, plan, k))
            goto fail;
    for (int b = plan->ninputs; b < plan->nbuffers; b++)
        if (prepare_alloc(c, &plan->buffers[b], b))
            goto fail;
    c->source = PyUnicode_FromString(plan->source ? plan->source : "");
    c->ir_pre = PyUnicode_FromString(plan->ir_pre ? plan->ir_pre : "");
    c->ir_post = PyUnicode_FromString(plan->ir_post ? plan->ir_post : "");
    if (!c->source || !c->ir_pre || !c->ir_post)
        goto fail;
    c->vectorcall = run_c;
    return (PyObject *)c;
fail:
    Py_DECREF(c);
    return NULL;
}

/* The eager-backend callable replaying t's calls.  New ref or NULL. */
PyObject *cdy_compiled_eager(const cdy_trace *t, const char *name, int single)
{
    cdy_compiled *c = compiled_new(name, single);
    if (!c)
        return NULL;
    c->eager = 1;
    c->ninputs = t->graph.ninputs;
    c->nvalues = t->graph.nvalues;
    c->noutputs = t->graph.noutputs;
    c->npynodes = t->npynodes;
    c->keep = Py_NewRef(t->keep);
    c->outputs = PyMem_Calloc((size_t)c->noutputs + 1, sizeof(int));
    c->value_input = PyMem_Calloc((size_t)c->nvalues + 1, sizeof(int));
    c->pynodes = PyMem_Calloc((size_t)c->npynodes + 1, sizeof(cdy_pynode));
    if (!c->outputs || !c->value_input || !c->pynodes)
        goto oom;
    memcpy(c->outputs, t->graph.outputs, sizeof(int) * (size_t)c->noutputs);
    for (int v = 0; v < c->nvalues; v++) {
        const cdy_value *val = &t->graph.values[v];
        c->value_input[v] = val->kind == CDY_VAL_INPUT ? val->input_index : -1;
    }
    for (int n = 0; n < c->npynodes; n++) {
        const cdy_pynode *s = &t->pynodes[n];
        cdy_pynode *d = &c->pynodes[n];
        *d = *s;
        d->ref = PyMem_Calloc((size_t)s->nargs + 1, sizeof(int));
        d->cst = PyMem_Calloc((size_t)s->nargs + 1, sizeof(PyObject *));
        if (!d->ref || !d->cst)
            goto oom;
        memcpy(d->ref, s->ref, sizeof(int) * (size_t)s->nargs);
        memcpy(d->cst, s->cst, sizeof(PyObject *) * (size_t)s->nargs);
    }
    c->vectorcall = run_eager;
    return (PyObject *)c;
oom:
    PyErr_NoMemory();
    Py_DECREF(c);
    return NULL;
}
