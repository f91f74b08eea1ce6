/* compiled.c - CompiledGraph: the callable that the patched bytecode calls.
 *
 * C backend: makes the output buffers with the meta eager would give, from
 * the block pool (runtime/mempool.c) or else through torch.empty_like /
 * empty_strided (buffers only kernels read live in one block of
 * scratch memory the graph keeps between calls), reads every buffer's data
 * pointer and calls the kernels of a dlopen()ed shared object through libffi (cifs prepared once,
 * at load).  Eager backend: replays the traced torch calls.  Both take the
 * graph inputs positionally and return one tensor or a tuple of tensors.   */
#include "runtime/runtime.h"
#include "pyver/pycompat.h"
#include "sym/sym.h"
#include "frame/frame.h"

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
    int status;           /* returns int, takes int64_t err[4] last (cdy_kernel_desc) */
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
    PyObject **buf_meta;  /* per non-input buffer: (sizes, strides, dtype) */
    PyObject **buf_tmpl;  /* per buffer: a tensor of its meta to empty_like, or NULL */
    cdy_meta *buf_cmeta;  /* per buffer: its meta (for the pool) */
    char *buf_pool;       /* per buffer: BUF_POOL may come from the pool (strides >= 0),
                           * | BUF_MMOUT its extern is a matmul that may write a pool tensor */
    char *buf_alloc;      /* per buffer: allocated by us (else made by an extern) */
    int64_t *scratch_off; /* per buffer: byte offset in the scratch block, -1: a tensor
                           * (symbolic graphs: 0, its offset per call in sym_soff) */
    size_t scratch_bytes; /* size of the scratch block (0: none; symbolic: per call) */
    void *scratch;        /* the block, kept between calls; NULL until first used */
    size_t scratch_cap;   /* its size */
    int scratch_busy;     /* a call is using it (another thread gets its own block) */
    int nsteps;
    cdy_step *steps;
    /* buffer lifetimes (plan_lifetimes): the tensors step s needs made are
     * make_list[make_at[s] .. make_at[s+1]) (s = 0 also those no step touches),
     * the ones no later step reads drop_list[drop_at[s] .. drop_at[s+1]) */
    int *make_at, *make_list, *drop_at, *drop_list;
    int *buf_share;       /* per buffer: the buffer whose tensor it is when made (its
                           * kernel writes it over that dying input: plan_share), or -1 */
    /* donated inputs (cdy_donated_args) no later step reads, not returned:
     * in_drop_list[in_drop_at[s] .. in_drop_at[s+1]) */
    int *in_drop_at, *in_drop_list;
    int64_t peak_bytes;   /* most bytes of per-call tensors alive at once (outputs included) */
    int *value_buffer;    /* graph value -> buffer (C backend) */
    int *pynode_of;       /* graph value -> index in pynodes, or -1 */
    /* eager backend */
    int nvalues, npynodes;
    int multi;            /* a multi-output extern: calls need a stash for its result */
    cdy_pynode *pynodes;  /* own copies of the arrays */
    PyObject **call_fn;   /* per pynode: what a call runs (owned; NULL for an item):
                           * its fn, or the C operator behind an OpOverload */
    PyObject *keep;       /* objects the pynodes refer to */
    int *value_input;     /* per value: input position or -1 */
    PyObject *source;     /* generated C (str) or None */
    PyObject *ir_pre;     /* loop IR before / after fusion (str), NULL for eager */
    PyObject *ir_post;
    int nkir;             /* the kernel IR's summary (own copy of the plan's; C backend) */
    cdy_kir *kir;
    int *kir_values;      /* the summary's outs and fused values */
    int *kir_ops;         /* per fused value (kir_values' layout), its op */
    long long calls;
    /* mutated inputs (trace/mutate.c): after the call, input wb[2i] <- output wb[2i+1] */
    int nwb;
    int *wb;
    int64_t *in_bytes;    /* per input: bytes its elements span (overlap check) */
    /* per graph value: the user's code and line of the op (for errors), or NULL / 0 */
    int nwhere;
    PyObject **where_code;
    int *where_line;
    int uses_rng;         /* an extern draws from torch's default generator */
    int nrv;              /* outputs returned as views of mutated inputs (trace/mutate.c) */
    cdy_review *rv;
    /* symbolic sizes (issue 32): the graph's shapes (owned; NULL: static), per buffer
     * its graph value (-1: none), per input position its value and example meta */
    cdy_sym_shapes *sym;
    int *buf_value;       /* -1 also for a buffer of static sizes (its plan meta holds) */
    int *in_value;        /* -1 also for an input of static sizes (not read per call) */
    cdy_meta *in_meta;
    cdy_sym_mask sym_live;    /* cdy_sym_live(sym) */
    /* the sizes cache (sym_cache): at the symbols' values sym_at (valid when
     * sym_ok), each buffer's meta (of a buffer with a value) and each input's
     * sizes (of an input with a value) and element count: a call at the sizes
     * of the call before evaluates no expression */
    int sym_ok;
    int64_t sym_at[CDY_SYM_MAX_SYMS];
    cdy_meta *sym_bmeta, *sym_imeta;
    int64_t *sym_inumel;
    int64_t *sym_soff;    /* per scratch buffer: its offset in the scratch block */
    /* extern views made as aliases (static graphs; alias_learn): per buffer, NULL
     * or (sizes, strides, offset from its base's) of the view its extern step
     * makes of buffer alias_src[b]; alias_sp[b]: its storage, on the first call */
    PyObject **alias;
    int *alias_src;
    void **alias_sp;
    int alias_learning;   /* this call records the views (the first call) */
    PyObject **mmd;       /* per buffer: its matmul extern's direct form (cdy_mmd_plan), or NULL */
    size_t sym_scratch;   /* the block's size at sym_at (0: no scratch buffer) */
} cdy_compiled;

enum { BUF_POOL = 1, BUF_MMOUT = 2 };

static PyObject *empty_strided;   /* torch.empty_strided */
/* torch._C._dynamo.guards._empty_strided_cpu(sizes, strides, dtype), or NULL:
 * the allocator torch.compile's CPU wrapper code calls.  It takes the tuple
 * (two int tuples and a dtype) as is, no keyword parsing and no dispatch,
 * and returns at::detail::empty_strided_cpu's tensor: the one the dispatcher
 * would reach through torch.empty_strided, from torch's CPU allocator (so
 * torch.profiler's memory events see it).  0.37 us per call against
 * empty_like(template) 0.73 us and empty_strided 0.93 us (1 thread, CPU time,
 * allocation and free included). */
static PyObject *empty_fast;
/* torch._C._dynamo.guards._reinterpret_tensor(base, sizes, strides, offset_increment),
 * or NULL: a tensor on base's storage, made without the dispatcher (0.67 us
 * against reshape 1.03, transpose 1.23, as_strided 1.35), with no view link
 * to base (no _base, its own version counter): used only for the views an
 * extern step makes that no output can reach (alias_learn). */
static PyObject *reinterpret_fn;
static PyObject *str_is_view, *str_untyped_storage;
static PyObject *tensor_type;     /* torch.Tensor */
static PyObject *mm_fns[5];       /* operator.matmul, torch.matmul, mm, bmm, Tensor.__matmul__ */
static PyObject *kw_out;          /* ("out",) */
static PyObject *empty_like;      /* torch.empty_like */
static PyObject *kw_dtype;        /* ("dtype",) */
static PyObject *dtype_objs[CDY_DT_COUNT];
static PyObject *get_rng_state;   /* torch.default_generator.clone_state: a copy of its
                                   * state that allocates no tensor (get_state's 5 KiB
                                   * byte tensor would count in a training step's peak) */
static PyObject *set_rng_state;   /* torch.default_generator.set_state */

/* The matmul callables an extern may be (mm_fns); 0 or -1 with error. */
static int mm_fns_init(PyObject *torch)
{
    PyObject *op = PyImport_ImportModule("operator");
    PyObject *tensor = PyObject_GetAttrString(torch, "Tensor");
    if (!op || !tensor) {
        Py_XDECREF(op);
        Py_XDECREF(tensor);
        return -1;
    }
    mm_fns[0] = PyObject_GetAttrString(op, "matmul");
    mm_fns[1] = PyObject_GetAttrString(torch, "matmul");
    mm_fns[2] = PyObject_GetAttrString(torch, "mm");
    mm_fns[3] = PyObject_GetAttrString(torch, "bmm");
    mm_fns[4] = PyObject_GetAttrString(tensor, "__matmul__");
    Py_DECREF(op);
    Py_DECREF(tensor);
    for (int i = 0; i < 5; i++)
        if (!mm_fns[i])
            return -1;
    return 0;
}

/* Set empty_fast when torch has it and it makes a tensor of the meta asked
 * for (a probe), and reinterpret_fn when torch has it; errors cleared:
 * without them, empty_meta calls empty_strided and no view is an alias. */
static void empty_fast_init(PyObject *torch)
{
    PyObject *c = PyObject_GetAttrString(torch, "_C");
    PyObject *dyn = c ? PyObject_GetAttrString(c, "_dynamo") : NULL;
    PyObject *g = dyn ? PyObject_GetAttrString(dyn, "guards") : NULL;
    PyObject *fn = g ? PyObject_GetAttrString(g, "_empty_strided_cpu") : NULL;
    PyObject *f32 = PyObject_GetAttrString(torch, "float32");
    PyObject *meta = fn && f32 ? Py_BuildValue("((ii)(ii)O)", 2, 3, 1, 2, f32) : NULL;
    PyObject *t = meta ? PyObject_Call(fn, meta, NULL) : NULL;
    PyObject *st = t ? PyObject_CallMethod(t, "stride", NULL) : NULL;
    if (st && PyObject_RichCompareBool(st, PyTuple_GET_ITEM(meta, 1), Py_EQ) == 1)
        empty_fast = Py_NewRef(fn);
    PyErr_Clear();
    Py_XDECREF(st);
    Py_XDECREF(t);
    Py_XDECREF(meta);
    Py_XDECREF(f32);
    Py_XDECREF(fn);
    reinterpret_fn = g ? PyObject_GetAttrString(g, "_reinterpret_tensor") : NULL;
    tensor_type = PyObject_GetAttrString(torch, "Tensor");
    str_is_view = PyUnicode_InternFromString("_is_view");
    str_untyped_storage = PyUnicode_InternFromString("untyped_storage");
    if (!str_is_view || !str_untyped_storage)
        Py_CLEAR(reinterpret_fn);
    PyErr_Clear();
    Py_XDECREF(g);
    Py_XDECREF(dyn);
    Py_XDECREF(c);
}

/* A new tensor of meta (a tuple: sizes, strides as int tuples, dtype) from
 * torch's CPU allocator: empty_fast's, or, where that is missing or fails,
 * torch.empty_strided's (whose error then stands); NULL with error. */
static PyObject *empty_meta(PyObject *meta)
{
    if (empty_fast) {
        PyObject *t = PyObject_Call(empty_fast, meta, NULL);
        if (t)
            return t;
        PyErr_Clear();
    }
    return PyObject_Vectorcall(empty_strided, PySequence_Fast_ITEMS(meta), 2, kw_dtype);
}

/* Look up torch objects the runtime needs; 0 or -1 with error. */
int cdy_runtime_init(PyObject *torch)
{
    empty_strided = PyObject_GetAttrString(torch, "empty_strided");
    empty_like = PyObject_GetAttrString(torch, "empty_like");
    kw_dtype = Py_BuildValue("(s)", "dtype");
    PyObject *gen = PyObject_GetAttrString(torch, "default_generator");
    get_rng_state = gen ? PyObject_GetAttrString(gen, "clone_state") : NULL;
    set_rng_state = gen ? PyObject_GetAttrString(gen, "set_state") : NULL;
    Py_XDECREF(gen);
    kw_out = Py_BuildValue("(s)", "out");
    empty_fast_init(torch);
    if (!empty_strided || !empty_like || !kw_dtype || !get_rng_state || !set_rng_state || !kw_out ||
        mm_fns_init(torch) || cdy_mmd_init(torch))
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
    void *v;
    if (cdy_mempool_read(t, NULL, &v))
        return v;
    PyObject *p = cdy_tensor_attr(t, CDY_TA_data_ptr);
    if (!p)
        return NULL;
    v = PyLong_AsVoidPtr(p);
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

/* The output that review r of c gives: args[r->input] itself, or a view of
 * it with r's sizes, strides and offset from its first element.  New ref. */
static PyObject *review_tensor(const cdy_review *r, PyObject *const *args)
{
    PyObject *x = args[r->input];
    if (r->same)
        return Py_NewRef(x);
    PyObject *sz = int_tuple(r->sizes, r->ndim), *st = int_tuple(r->strides, r->ndim);
    PyObject *base = sz && st ? PyObject_CallMethod(x, "storage_offset", NULL) : NULL;
    PyObject *off = base ? PyLong_FromLongLong(PyLong_AsLongLong(base) + r->offset) : NULL;
    PyObject *v = off ? PyObject_CallMethod(x, "as_strided", "OOO", sz, st, off) : NULL;
    Py_XDECREF(sz);
    Py_XDECREF(st);
    Py_XDECREF(base);
    Py_XDECREF(off);
    return v;
}

/* res (steals it) with the outputs that view mutated inputs replaced by
 * views of the inputs themselves, as eager returns them; NULL on error. */
static PyObject *apply_reviews(cdy_compiled *c, PyObject *const *args, PyObject *res)
{
    for (int i = 0; res && i < c->nrv; i++) {
        PyObject *v = review_tensor(&c->rv[i], args);
        if (!v)
            Py_CLEAR(res);
        else if (c->single)
            Py_SETREF(res, v);
        else
            PyTuple_SetItem(res, c->rv[i].output, v);   /* a tuple made by make_result */
    }
    return res;
}

/* A fresh list/tuple for sequence argument s, items from vals or constants. */
static PyObject *build_seq(const cdy_pyseq *s, PyObject *const *vals, const int *map)
{
    PyObject *r = s->is_list ? PyList_New(s->n) : PyTuple_New(s->n);
    for (int i = 0; r && i < s->n; i++) {
        PyObject *v = s->ref[i] >= 0 ? vals[map ? map[s->ref[i]] : s->ref[i]] : s->cst[i];
        if (s->is_list)
            PyList_SET_ITEM(r, i, Py_NewRef(v));
        else
            PyTuple_SET_ITEM(r, i, Py_NewRef(v));
    }
    return r;
}

/* Call fn with pynode p's arguments from vals (graph values, through map
 * when given) or its constants; new ref or NULL. */
static PyObject *call_pynode(PyObject *fn, const cdy_pynode *p, PyObject *const *vals,
                             const int *map)
{
    PyObject *av[32], *tmp[32];
    int ntmp = 0;
    PyObject *r = NULL;
    for (int a = 0; a < p->nargs && a < 32; a++) {
        if (p->ref[a] >= 0)
            av[a] = vals[map ? map[p->ref[a]] : p->ref[a]];
        else if (p->ref[a] == -2) {
            if (!(av[a] = tmp[ntmp++] = build_seq(&p->seq[a], vals, map)))
                goto done;
        }
        else
            av[a] = p->cst[a];
    }
    Py_ssize_t nkw = p->kwnames ? PyTuple_GET_SIZE(p->kwnames) : 0;
    int hook = cdy_tls_state.enabled;
    if (p->opaque)   /* a torch.library op: its Python body runs as eager code */
        cdy_tls_state.enabled = 0;
    r = PyObject_Vectorcall(fn, av, (size_t)(p->nargs - nkw), p->kwnames);
    cdy_tls_state.enabled = hook;
done:
    for (int i = 0; i < ntmp; i++)
        Py_XDECREF(tmp[i]);
    return r;
}

/* Result of pynode n (new ref): its call, or item `item` of its base call's
 * result, which is made once per run and kept in stash[base]. */
static PyObject *pynode_result(cdy_compiled *c, int n, PyObject *const *vals, const int *map,
                               PyObject **stash)
{
    const cdy_pynode *p = &c->pynodes[n];
    if (p->item < 0)
        return call_pynode(c->call_fn[n], p, vals, map);
    if (!stash[p->base] &&
        !(stash[p->base] = call_pynode(c->call_fn[p->base], &c->pynodes[p->base], vals, map)))
        return NULL;
    return PySequence_GetItem(stash[p->base], p->item);
}

/* 1 with an error set when extern result r's dtype is not the traced one
 * (torch's meta function and its CPU kernel disagree, e.g. pow of a bool
 * tensor by a bool gives int64 on meta, bool on the CPU): the graph fails and
 * its frame reruns eagerly, instead of kernels reading the bytes as another
 * dtype.  0 when they agree. */
static int extern_dtype_differs(PyObject *r, PyObject *dtype)
{
    PyObject *got = cdy_tensor_attr(r, CDY_TA_dtype);
    if (!got)
        return 1;
    int differs = got != dtype;
    if (differs)
        PyErr_Format(PyExc_RuntimeError, "cdynamo: an extern op returned %R where its traced "
                     "meta has %R", got, dtype);
    Py_DECREF(got);
    return differs;
}

/* Matmul pynode p (BUF_MMOUT) as torch.matmul(a, b, out=t), t a new pool
 * tensor of buffer ob's meta (a training step's: its block returns to the
 * pool's training lists); new ref or NULL with error. */
static PyObject *matmul_out(cdy_compiled *c, const cdy_pynode *p, PyObject **bufs, int ob)
{
    void *ptr;
    PyObject *t = cdy_mempool_tensor(&c->buf_cmeta[ob], &ptr);
    if (!t)
        return NULL;
    PyObject *av[3] = {bufs[c->value_buffer[p->ref[0]]], bufs[c->value_buffer[p->ref[1]]], t};
    PyObject *r = NULL;
    int rc = c->mmd && c->mmd[ob] ? cdy_mmd_call(c->mmd[ob], av[0], av[1], t, &r) : 0;
    if (rc == 0)
        r = PyObject_Vectorcall(mm_fns[1], av, 2, kw_out);
    Py_DECREF(t);
    return r;
}

/* Extern step st's result (new ref or NULL with error): a matmul's into a
 * pool tensor (BUF_MMOUT, a training step), or through its direct form
 * (c->mmd), else the pynode's call. */
static PyObject *extern_result(cdy_compiled *c, const cdy_step *st, PyObject **bufs,
                               PyObject **stash)
{
    int ob = st->out_buffer;
    const cdy_pynode *p = &c->pynodes[c->pynode_of[st->index]];
    if ((c->buf_pool[ob] & BUF_MMOUT) && cdy_mempool_train &&
        cdy_mempool_takes(&c->buf_cmeta[ob]))
        return matmul_out(c, p, bufs, ob);
    PyObject *r = NULL;
    int rc = c->mmd && c->mmd[ob]
                 ? cdy_mmd_call(c->mmd[ob], bufs[c->value_buffer[p->ref[0]]],
                                bufs[c->value_buffer[p->ref[1]]], NULL, &r)
                 : 0;
    if (rc)
        return r;
    return pynode_result(c, c->pynode_of[st->index], bufs, c->value_buffer, stash);
}

static void sym_meta_at(const cdy_compiled *c, int b, const int64_t *sv, cdy_meta *m);
static int sym_read_meta(PyObject *x, cdy_meta *m, void **data);

/* Symbolic graphs: extern result *r for buffer b checked against the
 * buffer's meta at the symbols' values sv (dtype, sizes: else RuntimeError,
 * the frame reruns eagerly) and made contiguous (the kernels' layout) when
 * torch chose other strides; 0, or -1 with *r dropped. */
static int sym_extern_result(cdy_compiled *c, int b, const int64_t *sv, PyObject **r)
{
    cdy_meta want, got;
    sym_meta_at(c, b, sv, &want);
    if (sym_read_meta(*r, &got, NULL)) {
        Py_CLEAR(*r);
        return -1;
    }
    int same = got.ndim == want.ndim && got.dtype == want.dtype;
    for (int d = 0; same && d < got.ndim; d++)
        same = got.sizes[d] == want.sizes[d];
    if (!same) {
        Py_CLEAR(*r);
        PyErr_Format(PyExc_RuntimeError, "cdynamo: %U: an extern op's result differs from its "
                     "symbolic meta", c->name);
        return -1;
    }
    for (int d = 0; same && d < got.ndim; d++)
        same = got.sizes[d] == 1 || got.strides[d] == want.strides[d];
    if (same)
        return 0;
    PyObject *t = NULL;
    if (cdy_meta_contiguous(&want))
        t = PyObject_CallMethod(*r, "contiguous", NULL);
    else {                                 /* the permuted layout the kernels read */
        PyObject *sz = int_tuple(want.sizes, want.ndim), *st = int_tuple(want.strides, want.ndim);
        PyObject *a[3] = {sz, st, dtype_objs[want.dtype]};
        PyObject *e = sz && st ? PyObject_Vectorcall(empty_strided, a, 2, kw_dtype) : NULL;
        t = e ? PyObject_CallMethod(e, "copy_", "O", *r) : NULL;
        Py_XDECREF(e);
        Py_XDECREF(sz);
        Py_XDECREF(st);
    }
    Py_SETREF(*r, t);
    return t ? 0 : -1;
}

/* Data pointer of tensor t's storage; NULL (error cleared) if unknown. */
static void *storage_ptr(PyObject *t)
{
    PyObject *st = PyObject_CallMethodNoArgs(t, str_untyped_storage);
    PyObject *p = st ? PyObject_CallMethod(st, "data_ptr", NULL) : NULL;
    void *v = p ? PyLong_AsVoidPtr(p) : NULL;
    Py_XDECREF(p);
    Py_XDECREF(st);
    PyErr_Clear();
    return v;
}

/* 1 when t._is_view(), else 0 (error cleared). */
static int is_view(PyObject *t)
{
    PyObject *r = PyObject_CallMethodNoArgs(t, str_is_view);
    int v = r == Py_True;
    Py_XDECREF(r);
    PyErr_Clear();
    return v;
}

/* t.storage_offset(), or -1 (error cleared). */
static long long storage_offset(PyObject *t)
{
    PyObject *r = cdy_tensor_attr(t, CDY_TA_storage_offset);
    long long v = r ? PyLong_AsLongLong(r) : -1;
    Py_XDECREF(r);
    PyErr_Clear();
    return v;
}

/* Start recording, on c's first call, which extern steps make views that
 * could be aliases (static graphs without written-back or re-viewed inputs). */
static void alias_begin(cdy_compiled *c)
{
    if (c->alias || c->sym || c->nwb || c->nrv || !reinterpret_fn || !tensor_type)
        return;
    c->alias = PyMem_Calloc((size_t)c->nbuffers + 1, sizeof(PyObject *));
    c->alias_src = PyMem_Calloc((size_t)c->nbuffers + 1, sizeof(int));
    c->alias_sp = PyMem_Calloc((size_t)c->nbuffers + 1, sizeof(void *));
    c->alias_learning = c->alias && c->alias_src && c->alias_sp;
}

/* 1 when pynode p's arguments after the first are constants (a view's
 * layout then depends only on its base's, which the guards fix). */
static int rest_constant(const cdy_pynode *p)
{
    for (int a = 1; a < p->nargs; a++) {
        if (p->ref[a] >= 0)
            return 0;
        for (int j = 0; p->ref[a] == -2 && j < p->seq[a].n; j++)
            if (p->seq[a].ref[j] >= 0)
                return 0;
    }
    return 1;
}

/* First call: when extern step st's result r (a plain tensor needing no
 * grad) is a view of its first argument, a buffer of c (same storage), its
 * other arguments constants, keep its sizes, strides and offset from that
 * buffer's in c->alias[out]. */
static void alias_learn(cdy_compiled *c, const cdy_step *st, PyObject **bufs, PyObject *r)
{
    const cdy_pynode *p = &c->pynodes[c->pynode_of[st->index]];
    int ob = st->out_buffer;
    if (p->item >= 0 || p->nargs < 1 || p->ref[0] < 0 || p->ref[0] >= c->nvalues ||
        !rest_constant(p))
        return;
    int b = c->value_buffer[p->ref[0]];
    PyObject *base = b >= 0 && b != ob ? bufs[b] : NULL;
    if (!base || (PyObject *)Py_TYPE(r) != tensor_type || !is_view(r))
        return;
    PyObject *rg = cdy_tensor_attr(r, CDY_TA_requires_grad);
    void *sp = rg == Py_False ? storage_ptr(r) : NULL;
    Py_XDECREF(rg);
    PyErr_Clear();
    long long off = storage_offset(r), boff = storage_offset(base);
    if (!sp || sp != storage_ptr(base) || off < 0 || boff < 0)
        return;
    PyObject *shape = cdy_tensor_attr(r, CDY_TA_shape);
    PyObject *sz = shape ? PySequence_Tuple(shape) : NULL;
    PyObject *strd = sz ? cdy_tensor_attr(r, CDY_TA_stride) : NULL;
    if (strd && PyTuple_CheckExact(strd))
        c->alias[ob] = Py_BuildValue("(OOL)", sz, strd, off - boff);
    if (c->alias[ob]) {
        c->alias_src[ob] = b;
        c->alias_sp[ob] = sp;
    }
    Py_XDECREF(strd);
    Py_XDECREF(sz);
    Py_XDECREF(shape);
    PyErr_Clear();
}

/* End of the first call (ok: it succeeded, its outputs in bufs): keep the
 * recorded views no output can reach: none when it failed, else those on a
 * storage no output shares other than their base itself (the alias has no
 * view link and its own version counter). */
static void alias_end(cdy_compiled *c, PyObject **bufs, int ok)
{
    c->alias_learning = 0;
    for (int i = 0; i < c->noutputs; i++) {
        PyObject *o = ok ? bufs[c->outputs[i]] : NULL;
        void *sp = o ? storage_ptr(o) : NULL;
        for (int b = 0; sp && b < c->nbuffers; b++)
            if (c->alias[b] && c->alias_sp[b] == sp && o != bufs[c->alias_src[b]])
                Py_CLEAR(c->alias[b]);
    }
    for (int b = 0; !ok && b < c->nbuffers; b++)
        Py_CLEAR(c->alias[b]);
}

/* Extern step making buffer ob, a recorded view (c->alias[ob]): the view
 * as an alias of its base, or NULL (error cleared) where its base needs
 * grad or the call fails: the step then calls torch. */
static PyObject *alias_make(const cdy_compiled *c, int ob, PyObject **bufs)
{
    PyObject *base = bufs[c->alias_src[ob]];
    PyObject *rg = base ? cdy_tensor_attr(base, CDY_TA_requires_grad) : NULL;
    PyObject *m = c->alias[ob], *r = NULL;
    if (rg == Py_False) {
        PyObject *a[4] = {base, PyTuple_GET_ITEM(m, 0), PyTuple_GET_ITEM(m, 1),
                          PyTuple_GET_ITEM(m, 2)};
        r = PyObject_Vectorcall(reinterpret_fn, a, 4, NULL);
    }
    Py_XDECREF(rg);
    if (!r)
        PyErr_Clear();
    return r;
}

/* The base value of view value v that sym_view makes from its layout, or -1
 * (v's step calls torch). */
static int sym_view_base(const cdy_compiled *c, int v)
{
    return c->sym && c->sym->vlay && v >= 0 && v < c->sym->nvalues ? c->sym->vlay[v][0] - 1 : -1;
}

/* Symbolic graphs: view value v (sym.h's vlay: a layout at every size) of
 * its base's realized buffer at the symbols' values sv, through
 * Tensor.as_strided; new ref, or NULL with an error. */
static PyObject *sym_view(cdy_compiled *c, int v, int ndim, PyObject **bufs, const int64_t *sv)
{
    const int *lay = c->sym->vlay[v];
    const cdy_symtab *tab = &c->sym->tab;
    int b = c->value_buffer[lay[0] - 1];
    PyObject *base = b >= 0 ? bufs[b] : NULL;
    if (!base) {
        PyErr_Format(PyExc_RuntimeError, "cdynamo: %U: a view's base is not realized", c->name);
        return NULL;
    }
    int64_t sz[CDY_MAX_NDIM], st[CDY_MAX_NDIM];
    for (int d = 0; d < ndim; d++) {
        sz[d] = cdy_sym_eval(tab, c->sym->dims[v][d], sv);
        st[d] = cdy_sym_eval(tab, lay[2 + d], sv);
    }
    PyObject *o = cdy_tensor_attr(base, CDY_TA_storage_offset);
    long long off = o ? PyLong_AsLongLong(o) + cdy_sym_eval(tab, lay[1], sv) : -1;
    Py_XDECREF(o);
    PyObject *szt = int_tuple(sz, ndim), *stt = int_tuple(st, ndim);
    PyObject *r = szt && stt && !PyErr_Occurred()
                      ? PyObject_CallMethod(base, "as_strided", "OOL", szt, stt, off) : NULL;
    Py_XDECREF(szt);
    Py_XDECREF(stt);
    return r;
}

/* 1 if stride tuple got equals meta's (sizes, strides, dtype) strides in
 * every dim of size other than 1 (a size-1 dim's stride is never read: a
 * copy for it would only break the result's aliasing), 0 if not, -1 with an
 * error. */
static int strides_agree(PyObject *got, PyObject *meta)
{
    PyObject *sz = PyTuple_GET_ITEM(meta, 0), *want = PyTuple_GET_ITEM(meta, 1);
    Py_ssize_t n = PyTuple_Check(got) ? PyTuple_GET_SIZE(got) : -1;
    if (n != PyTuple_GET_SIZE(want) || n != PyTuple_GET_SIZE(sz))
        return PyObject_RichCompareBool(got, want, Py_EQ);
    for (Py_ssize_t d = 0; d < n; d++) {
        long long k = PyLong_AsLongLong(PyTuple_GET_ITEM(sz, d));
        if (k == -1 && PyErr_Occurred())
            return -1;
        int eq = k == 1 ? 1 : PyObject_RichCompareBool(PyTuple_GET_ITEM(got, d),
                                                          PyTuple_GET_ITEM(want, d), Py_EQ);
        if (eq != 1)
            return eq;
    }
    return 1;
}

/* Run extern step st: call torch, keep the result as its buffer (copied to
 * the traced strides if torch chose others; symbolic graphs: sv, made
 * contiguous).  0, or -1 with error set. */
static int run_extern(cdy_compiled *c, const cdy_step *st, PyObject **bufs, void **ptrs,
                      PyObject **stash, const int64_t *sv)
{
    int v = st->index;
    if (sv && sym_view_base(c, v) >= 0) {
        PyObject *w = sym_view(c, v, c->buf_cmeta[st->out_buffer].ndim, bufs, sv);
        bufs[st->out_buffer] = w;
        ptrs[st->out_buffer] = w ? tensor_ptr(w) : NULL;
        return ptrs[st->out_buffer] ? 0 : -1;
    }
    PyObject *r = !sv && c->alias && c->alias[st->out_buffer]
                      ? alias_make(c, st->out_buffer, bufs) : NULL;
    if (!r)
        r = sv ? pynode_result(c, c->pynode_of[st->index], bufs, c->value_buffer, stash)
               : extern_result(c, st, bufs, stash);
    if (!r)
        return -1;
    int sym = sv && c->buf_value[st->out_buffer] >= 0;   /* a symbolic size: contiguous */
    if (sym && sym_extern_result(c, st->out_buffer, sv, &r))
        return -1;
    PyObject *meta = sym ? NULL : c->buf_meta[st->out_buffer];
    if (!meta) {
        bufs[st->out_buffer] = r;
        ptrs[st->out_buffer] = tensor_ptr(r);
        return ptrs[st->out_buffer] ? 0 : -1;
    }
    if (extern_dtype_differs(r, PyTuple_GET_ITEM(meta, 2))) {
        Py_DECREF(r);
        return -1;
    }
    PyObject *got = cdy_tensor_attr(r, CDY_TA_stride);
    int same = got ? strides_agree(got, meta) : -1;
    Py_XDECREF(got);
    if (same == 0) {   /* torch picked other strides than the meta run: copy */
        PyObject *t = empty_meta(meta);
        PyObject *ok = t ? PyObject_CallMethod(t, "copy_", "O", r) : NULL;
        Py_XDECREF(ok);
        Py_SETREF(r, ok ? t : NULL);
        if (!ok)
            Py_XDECREF(t);
    }
    if (!r || same < 0) {
        Py_XDECREF(r);
        return -1;
    }
    if (c->alias_learning)
        alias_learn(c, st, bufs, r);
    bufs[st->out_buffer] = r;
    ptrs[st->out_buffer] = tensor_ptr(r);
    return ptrs[st->out_buffer] ? 0 : -1;
}

int cdy_phase_on;
long long cdy_phase_ns[2][CDY_PHASE_COUNT];
int cdy_phase_bank;
static clockid_t phase_clock = CLOCK_MONOTONIC;   /* the thread's CPU clock: phase_timing("cpu") */

long long cdy_now_ns(void)
{
    struct timespec ts;
    clock_gettime(phase_clock, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
#define now_ns cdy_now_ns

/* Raise eager's exception for a gathering kernel's error slot err (index,
 * size, code: kind | dim << 8 | value << CDY_ERR_VALUE_SHIFT, see
 * compiler/gather.c); *value gets the graph value that failed.  -1. */
static int index_error(const int64_t *err, int *value)
{
    long long i = (long long)err[1], n = (long long)err[2];
    int kind = (int)(err[3] & 15), dim = (int)((err[3] >> 8) & 0xffffff);
    *value = (int)(err[3] >> CDY_ERR_VALUE_SHIFT);
    if (kind == 1)
        PyErr_SetString(PyExc_IndexError, "index out of range in self");
    else if (kind == 4)
        PyErr_Format(PyExc_RuntimeError, "INDICES element is out of DATA bounds, id=%lld "
                     "axis_dim=%lld", i, n);
    else
        PyErr_Format(kind == 2 ? PyExc_RuntimeError : PyExc_IndexError,
                     "index %lld is out of bounds for dimension %d with size %lld", i, dim, n);
    return -1;
}

/* Call kernel kn on the buffers' data pointers ptrs; with profiling on, add
 * the call and its time to kn's counters.  0, or -1 with an exception set
 * when a gathering kernel reports an index out of range. */
/* Call kernel kn, of no status and at most 6 pointer arguments, directly:
 * 0, or -1 when it takes another form (libffi then).  Every parameter of a
 * kernel is a pointer, so the cast prototype passes them as the definition
 * takes them (x86-64 and AArch64 pass all object pointers alike). */
static int call_plain(const rt_kernel *kn, void **ptrs)
{
    typedef void *P;
#define A(i) ptrs[kn->args[i]]
    switch (kn->status ? -1 : kn->nargs) {
    case 1: ((void (*)(P))kn->fn)(A(0)); return 0;
    case 2: ((void (*)(P, P))kn->fn)(A(0), A(1)); return 0;
    case 3: ((void (*)(P, P, P))kn->fn)(A(0), A(1), A(2)); return 0;
    case 4: ((void (*)(P, P, P, P))kn->fn)(A(0), A(1), A(2), A(3)); return 0;
    case 5: ((void (*)(P, P, P, P, P))kn->fn)(A(0), A(1), A(2), A(3), A(4)); return 0;
    case 6: ((void (*)(P, P, P, P, P, P))kn->fn)(A(0), A(1), A(2), A(3), A(4), A(5)); return 0;
    default: return -1;
    }
#undef A
}

/* call_plain for a kernel with runtime sizes: its pointers, then sv. */
static int call_plain_sym(const rt_kernel *kn, void **ptrs, const int64_t *sv)
{
    typedef void *P;
    typedef const int64_t *S;
#define A(i) ptrs[kn->args[i]]
    switch (kn->status ? -1 : kn->nargs) {
    case 1: ((void (*)(P, S))kn->fn)(A(0), sv); return 0;
    case 2: ((void (*)(P, P, S))kn->fn)(A(0), A(1), sv); return 0;
    case 3: ((void (*)(P, P, P, S))kn->fn)(A(0), A(1), A(2), sv); return 0;
    case 4: ((void (*)(P, P, P, P, S))kn->fn)(A(0), A(1), A(2), A(3), sv); return 0;
    case 5: ((void (*)(P, P, P, P, P, S))kn->fn)(A(0), A(1), A(2), A(3), A(4), sv); return 0;
    default: return -1;
    }
#undef A
}

/* Run kernel kn (sv: the symbols' values of a symbolic graph, NULL; big: its
 * inputs are large, the GIL is released around it). */
static int run_kernel(rt_kernel *kn, void **ptrs, const int64_t *sv, int big, int *failed)
{
    void *avals[CDY_MAX_KARGS + 2];
    int64_t err[4] = {0, 0, 0, 0}, *errp = err;
    ffi_arg rc = 0;
    int prof = __builtin_expect(cdy_rt_profile_kernels, 0);
    if (!sv && !prof && kn->work < CDY_RELEASE_GIL_NUMEL && call_plain(kn, ptrs) == 0)
        return 0;
    if (sv && !prof && !big && call_plain_sym(kn, ptrs, sv) == 0)
        return 0;
    for (int a = 0; a < kn->nargs; a++)
        avals[a] = &ptrs[kn->args[a]];
    avals[kn->nargs] = &errp;
    avals[kn->nargs + kn->status] = &sv;   /* symbolic kernels: the symbols' values last */
    long long t0 = prof ? now_ns() : 0;
    if (sv ? big : kn->work >= CDY_RELEASE_GIL_NUMEL) {
        Py_BEGIN_ALLOW_THREADS
        ffi_call(&kn->cif, kn->fn, &rc, avals);
        Py_END_ALLOW_THREADS
    }
    else
        ffi_call(&kn->cif, kn->fn, &rc, avals);
    if (prof) {
        kn->prof_calls++;
        kn->prof_ns += now_ns() - t0;
    }
    return kn->status && (int)rc ? index_error(err, failed) : 0;
}

/* The scratch block of `need` bytes for one call: the graph's own
 * (allocated at first use, again when a call needs more) unless another
 * call holds it, then a fresh one; NULL with MemoryError. */
static void *scratch_take(cdy_compiled *c, size_t need)
{
    if (!c->scratch_busy && c->scratch && c->scratch_cap < need) {
        PyMem_Free(c->scratch);
        c->scratch = NULL;
    }
    if (!c->scratch_busy && !c->scratch && (c->scratch = PyMem_Malloc(need)))
        c->scratch_cap = need;
    void *block = c->scratch_busy ? PyMem_Malloc(need) : c->scratch;
    if (!block)
        return PyErr_NoMemory();
    if (block == c->scratch)
        c->scratch_busy = 1;
    return block;
}

/* Give back a block from scratch_take (NULL: none was taken). */
static void scratch_give(cdy_compiled *c, void *block)
{
    if (block == c->scratch)
        c->scratch_busy = 0;
    else
        PyMem_Free(block);
}

/* 0 when no mutated input overlaps another input in memory (the graph
 * treats them as distinct), else -1 with RuntimeError. */
static int check_overlap(cdy_compiled *c, PyObject *const *args)
{
    for (int w = 0; w < c->nwb; w++) {
        int i = c->wb[2 * w];
        char *pi = tensor_ptr(args[i]);
        for (int j = 0; pi && j < c->ninputs; j++) {
            char *pj = j == i ? NULL : tensor_ptr(args[j]);
            if (!pj && PyErr_Occurred())
                return -1;
            if (pj && c->in_bytes[i] && c->in_bytes[j] && pi < pj + c->in_bytes[j] &&
                pj < pi + c->in_bytes[i]) {
                PyErr_Format(PyExc_RuntimeError, "cdynamo: %U mutates input %d, which overlaps "
                             "input %d in memory; the compiled graph assumes they are distinct "
                             "(call this function with non-aliasing tensors, or cdynamo.disable it)",
                             c->name, i, j);
                return -1;
            }
        }
        if (!pi)
            return -1;
    }
    return 0;
}

/* Copy each mutated input's final value into the input (eager's in-place
 * semantics); 0 or -1. */
static int write_back(cdy_compiled *c, PyObject *const *args, PyObject **vals)
{
    static PyObject *str_copy;
    if (!str_copy && !(str_copy = PyUnicode_InternFromString("copy_")))
        return -1;
    for (int w = 0; w < c->nwb; w++) {
        PyObject *src = vals[c->outputs[c->wb[2 * w + 1]]], *dst = args[c->wb[2 * w]];
        if (src == dst)
            continue;
        PyObject *r = PyObject_CallMethodOneArg(dst, str_copy, src);
        if (!r)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* Symbolic graphs: buffer b's meta at the symbols' values sv into *m: its
 * plan meta where its sizes are static, else dense in the order of the plan
 * meta's strides (cdy_meta_dense_order: contiguous, or the permutation the
 * kernels were compiled for, symk.c). */
static void sym_meta(const cdy_compiled *c, int b, const int64_t *sv, cdy_meta *m)
{
    *m = c->buf_cmeta[b];
    int v = c->buf_value[b], order[CDY_MAX_NDIM];
    if (v < 0)
        return;
    const cdy_meta hm = *m;                /* the hints' */
    int n = cdy_meta_contiguous(m) ? -1 : cdy_meta_dense_order(m, order);
    for (int d = 0; d < m->ndim; d++)
        m->sizes[d] = cdy_sym_eval(&c->sym->tab, c->sym->dims[v][d], sv);
    int64_t st = 1;
    for (int i = n - 1; i >= 0; i--) {
        m->strides[order[i]] = st;
        st *= m->sizes[order[i]];
    }
    for (int d = 0; d < m->ndim && n >= 0; d++) {  /* a size 1: the sizes inside it, as eager's */
        for (int i = 0; hm.sizes[d] == 1 && i < n; i++)
            m->strides[d] = i == 0 ? 1 : m->strides[d];
        for (int i = 0; hm.sizes[d] == 1 && i < n; i++)
            if (hm.strides[order[i]] < hm.strides[d])
                m->strides[d] *= m->sizes[order[i]];
    }
    for (int d = m->ndim - 1; d >= 0 && n < 0; d--) {   /* contiguous */
        m->strides[d] = st;
        st *= m->sizes[d] > 1 ? m->sizes[d] : 1;
    }
}

/* 1 when c's sizes cache holds the symbols' values sv. */
static int sym_cached(const cdy_compiled *c, const int64_t *sv)
{
    if (!c->sym_ok)
        return 0;
    for (int k = 0; k < c->sym->tab.nsyms; k++)   /* a few symbols: no memcmp call */
        if (c->sym_at[k] != sv[k])
            return 0;
    return 1;
}

/* Make c's sizes cache hold the symbols' values sv: 0, or -1 with why (n
 * bytes) when sv breaks one of the graph's relations (the cache then holds
 * nothing). */
static int sym_cache(cdy_compiled *c, const int64_t *sv, char *why, size_t n)
{
    if (sym_cached(c, sv))
        return 0;
    c->sym_ok = 0;
    if (!cdy_sym_relations_hold(c->sym, sv, why, n))
        return -1;
    for (int b = 0; b < c->nbuffers; b++)
        if (c->buf_value[b] >= 0)
            sym_meta(c, b, sv, &c->sym_bmeta[b]);
    for (int i = 0; i < c->ninputs; i++) {
        cdy_meta *m = &c->sym_imeta[i];
        int v = c->in_value[i];
        *m = c->in_meta[i];
        for (int d = 0; v >= 0 && d < m->ndim; d++)
            m->sizes[d] = cdy_sym_eval(&c->sym->tab, c->sym->dims[v][d], sv);
        c->sym_inumel[i] = v >= 0 ? cdy_meta_numel(m) : 0;
    }
    c->sym_scratch = 0;
    for (int b = 0; b < c->nbuffers; b++)
        if (c->scratch_off[b] >= 0) {
            const cdy_meta *m = c->buf_value[b] >= 0 ? &c->sym_bmeta[b] : &c->buf_cmeta[b];
            int64_t extent = 1;
            for (int d = 0; d < m->ndim; d++)
                extent += (m->sizes[d] - 1) * m->strides[d];
            c->sym_soff[b] = (int64_t)c->sym_scratch;
            c->sym_scratch += ((size_t)extent * (size_t)cdy_dtype_table[m->dtype].size + 63) &
                              ~(size_t)63;
        }
    memcpy(c->sym_at, sv, sizeof(int64_t) * (size_t)c->sym->tab.nsyms);
    c->sym_ok = 1;
    return 0;
}

/* sym_meta through the sizes cache when it holds sv. */
static void sym_meta_at(const cdy_compiled *c, int b, const int64_t *sv, cdy_meta *m)
{
    if (sym_cached(c, sv) && c->buf_value[b] >= 0)
        *m = c->sym_bmeta[b];
    else
        sym_meta(c, b, sv, m);
}

/* A new contiguous tensor for buffer b at the symbols' values sv, its data
 * pointer in *ptr; NULL with an error. */
static PyObject *sym_buffer(cdy_compiled *c, int b, const int64_t *sv, void **ptr)
{
    cdy_meta m;
    sym_meta_at(c, b, sv, &m);
    if (cdy_mempool_takes(&m))
        return cdy_mempool_tensor(&m, ptr);
    PyObject *sz = int_tuple(m.sizes, m.ndim), *st = int_tuple(m.strides, m.ndim);
    PyObject *meta = sz && st ? PyTuple_Pack(3, sz, st, dtype_objs[m.dtype]) : NULL;
    PyObject *t = meta ? empty_meta(meta) : NULL;
    Py_XDECREF(meta);
    Py_XDECREF(sz);
    Py_XDECREF(st);
    if (t && !(*ptr = tensor_ptr(t)))
        Py_CLEAR(t);
    return t;
}

/* Input x's meta (sizes, strides, dtype) into *m and, when data is not
 * NULL, its data pointer into *data (NULL: not read, tensor_ptr's to do);
 * 0, or -1 with an error. */
static int sym_read_meta(PyObject *x, cdy_meta *m, void **data)
{
    void *p;
    if (cdy_mempool_read(x, m, &p)) {
        if (data)
            *data = p;
        return 0;
    }
    if (data)
        *data = NULL;
    PyObject *sh = cdy_tensor_attr(x, CDY_TA_shape);
    PyObject *st = sh ? cdy_tensor_attr(x, CDY_TA_stride) : NULL;
    PyObject *dt = st ? cdy_tensor_attr(x, CDY_TA_dtype) : NULL;
    int rc = -1;
    if (dt && PyTuple_Check(sh) && PyTuple_Check(st) && PyTuple_GET_SIZE(sh) <= CDY_MAX_NDIM &&
        PyTuple_GET_SIZE(st) == PyTuple_GET_SIZE(sh)) {
        m->ndim = (int)PyTuple_GET_SIZE(sh);
        m->dtype = -1;
        for (int k = 0; k < CDY_DT_COUNT; k++)
            if (dtype_objs[k] == dt)
                m->dtype = k;
        for (int d = 0; d < m->ndim; d++) {
            m->sizes[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(sh, d));
            m->strides[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(st, d));
        }
        rc = PyErr_Occurred() ? -1 : 0;
    }
    else if (dt)
        PyErr_SetString(PyExc_TypeError, "cdynamo: a compiled graph's input is not a tensor");
    Py_XDECREF(sh);
    Py_XDECREF(st);
    Py_XDECREF(dt);
    return rc;
}

/* 1 if actual meta a of input i keeps what the symbolic graph relies on
 * (ndim, dtype, every size the value of its expression at sv), else 0 with
 * why. */
static int sym_input_ok(const cdy_compiled *c, int i, const cdy_meta *a, const int64_t *sv,
                        char *why, size_t n)
{
    const cdy_meta *ex = &c->in_meta[i];
    if (a->ndim != ex->ndim || a->dtype != ex->dtype) {
        snprintf(why, n, "input %d changed ndim or dtype", i);
        return 0;
    }
    for (int d = 0; c->in_value[i] >= 0 && d < a->ndim; d++) {
        int64_t want = c->sym_imeta[i].sizes[d];   /* sym_cache's, at sv */
        if (a->sizes[d] != want) {
            snprintf(why, n, "input %d's size %d is %lld, its expression gives %lld", i, d,
                     (long long)a->sizes[d], (long long)want);
            return 0;
        }
    }
    return 1;
}

/* The symbols' values of a call on args into sv (each live symbol from its
 * input's dim), checked against the graph's symbolic shapes (sizes >= 2,
 * contiguous inputs, relations, every input size), *big set when an input
 * has CDY_RELEASE_GIL_NUMEL elements or more, the data pointers read on the
 * way into inptr (when not NULL; NULL where none was read); 0, or -1 with
 * RuntimeError when the graph does not cover these inputs. */
static int sym_values(cdy_compiled *c, PyObject *const *args, int64_t *sv, int *big,
                      void **inptr)
{
    const cdy_sym_shapes *s = c->sym;
    cdy_meta am[c->ninputs ? c->ninputs : 1];
    char why[256] = "";
    cdy_sym_mask live = c->sym_live;
    *big = 0;
    for (int i = 0; i < c->ninputs; i++) {
        if (inptr)
            inptr[i] = NULL;
        if (c->in_value[i] >= 0 && sym_read_meta(args[i], &am[i], inptr ? &inptr[i] : NULL))
            return -1;
    }
    int checked = -1;   /* the input last checked contiguous (symbols go input by input) */
    for (int k = 0; k < s->tab.nsyms; k++) {
        sv[k] = s->tab.hint[k];
        if (!cdy_sym_mask_has(&live, k))
            continue;
        if (s->info[k].input < 0) {   /* a Python int: only the frame's SYM guard reads it */
            snprintf(why, sizeof(why), "symbol s%d is a Python int of the frame, read by its "
                     "guards only", k);
            break;
        }
        const cdy_meta *a = &am[s->info[k].input];
        sv[k] = s->info[k].dim < a->ndim ? a->sizes[s->info[k].dim] : 0;
        int contig = checked == s->info[k].input ||
                     cdy_strides_follow(&c->in_meta[s->info[k].input], a->ndim, a->sizes,
                                        a->strides);
        checked = contig ? s->info[k].input : -1;
        if (sv[k] < 2 || !contig)
            snprintf(why, sizeof(why), "input %d: size %lld of dim %d (symbols are >= 2) or not "
                     "its example's layout", s->info[k].input, (long long)sv[k], s->info[k].dim);
    }
    if (!why[0])
        sym_cache(c, sv, why, sizeof(why));
    for (int i = 0; !why[0] && i < c->ninputs; i++)
        if (c->in_value[i] >= 0)
            sym_input_ok(c, i, &am[i], sv, why, sizeof(why));
    for (int i = 0; !why[0] && i < c->ninputs; i++)
        *big |= c->sym_inumel[i] >= CDY_RELEASE_GIL_NUMEL;
    if (!why[0])
        return 0;
    PyErr_Format(PyExc_RuntimeError, "cdynamo: %U: its symbolic sizes do not cover this call: %s",
                 c->name, why);
    return -1;
}

cdy_sym_token cdy_sym_tok;

/* 1 if the frame's SYM guard token (runtime.h) is for graph c called on
 * args: the same symbols (inputs, dims, hints; pinned alike) and, for each
 * live one, its input the tensor the guard read; else 0. */
static int sym_token_matches(const cdy_compiled *c, PyObject *const *args)
{
    const cdy_sym_shapes *s = c->sym, *t = cdy_sym_tok.owner;
    if (!t || t->tab.nsyms != s->tab.nsyms || cdy_sym_tok.nsyms != s->tab.nsyms)
        return 0;
    for (int k = 0; k < s->tab.nsyms; k++) {
        const cdy_sym_info *a = &s->info[k], *b = &t->info[k];
        if (a->input != b->input || a->dim != b->dim || a->pinned != b->pinned ||
            s->tab.hint[k] != t->tab.hint[k] || a->input >= c->ninputs ||
            (!a->pinned && a->input >= 0 && args[a->input] != cdy_sym_tok.objs[k]))
            return 0;
    }
    return 1;
}

/* The symbols' values of a call from the frame whose guards hold (the
 * token's: they checked sizes >= 2, contiguity, the relations and every
 * static size) into sv, and *big; 1, or 0 when the token does not match
 * (sym_values then reads and checks).  The token is used up either way. */
static int sym_values_guarded(cdy_compiled *c, PyObject *const *args, int64_t *sv, int *big)
{
    int ok = sym_token_matches(c, args);
    cdy_sym_tok.owner = NULL;
    if (!ok)
        return 0;
    memcpy(sv, cdy_sym_tok.vals, sizeof(int64_t) * (size_t)c->sym->tab.nsyms);
    char why[8];
    if (sym_cache(c, sv, why, 0))
        return 0;   /* not expected: the guards checked the relations */
    *big = 0;
    for (int i = 0; i < c->ninputs; i++)
        *big |= c->sym_inumel[i] >= CDY_RELEASE_GIL_NUMEL;
    return 1;
}

/* Allocate the tensors step s needs made (make_list); 0 or -1 with error. */
static int make_bufs(cdy_compiled *c, int s, PyObject **bufs, void **ptrs, const int64_t *sv)
{
    for (int j = c->make_at[s]; j < c->make_at[s + 1]; j++) {
        int b = c->make_list[j];
        if (sv) {
            if (!(bufs[b] = sym_buffer(c, b, sv, &ptrs[b])))
                return -1;
            continue;
        }
        if (c->buf_share[b] >= 0 && bufs[c->buf_share[b]]) {   /* the dying input's tensor */
            bufs[b] = Py_NewRef(bufs[c->buf_share[b]]);
            ptrs[b] = ptrs[c->buf_share[b]];
            continue;
        }
        if (c->buf_pool[b] && cdy_mempool_takes(&c->buf_cmeta[b])) {
            if (!(bufs[b] = cdy_mempool_tensor(&c->buf_cmeta[b], &ptrs[b])))
                return -1;
            continue;
        }
        bufs[b] = c->buf_tmpl[b] ? PyObject_CallOneArg(empty_like, c->buf_tmpl[b])
                                 : empty_meta(c->buf_meta[b]);
        if (!bufs[b] || !(ptrs[b] = tensor_ptr(bufs[b])))
            return -1;
    }
    return 0;
}

/* 1 when the running Python frame is at line `line` of file `file` (the
 * transformed code's frame that called the graph, already at the op). */
static int frame_is_at(PyObject *file, int line)
{
    PyFrameObject *f = PyEval_GetFrame();
    if (!f)
        return 0;
    PyCodeObject *fc = PyFrame_GetCode(f);
    int at = PyFrame_GetLineNumber(f) == line &&
             PyUnicode_Compare(fc->co_filename, file) == 0;
    Py_DECREF(fc);
    return at;
}

/* Add the user's line of graph value v (the op that raised the pending
 * exception) to the exception's traceback, as a frame of the user's
 * function: an error of a compiled call then names the line that failed
 * (unless the calling frame, the function's transformed code, is there). */
static void add_user_frame(const cdy_compiled *c, int v)
{
    if (v < 0 || v >= c->nwhere || !c->where_code[v] || !PyErr_Occurred())
        return;
    PyCodeObject *co = (PyCodeObject *)c->where_code[v];
    if (frame_is_at(co->co_filename, c->where_line[v]))
        return;
    const char *name = PyUnicode_AsUTF8(co->co_qualname);
    const char *file = name ? PyUnicode_AsUTF8(co->co_filename) : NULL;
    if (!file) {   /* keep the op's exception, not this one */
        PyErr_Clear();
        return;
    }
    cdy_pc_traceback_add(name, file, c->where_line[v]);
}

/* A copy of torch's default generator (clone_state) when c draws from it (a
 * graph that raises is rerun eagerly: the rerun must draw what eager draws),
 * else Py_None; new reference, NULL on error. */
static PyObject *rng_save(const cdy_compiled *c)
{
    return c->uses_rng ? PyObject_CallNoArgs(get_rng_state) : Py_NewRef(Py_None);
}

/* End of a call of c: res, or NULL with the error set and, when no input
 * was written yet, c marked failed (frame/eval.c reruns the frame eagerly)
 * and the generator state rng put back.  Steals rng. */
static PyObject *call_end(cdy_compiled *c, PyObject *res, int wrote, PyObject *rng)
{
    if (!res && !wrote && rng) {
        cdy_graph_failed = c;
        if (rng != Py_None) {
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            PyObject *st = PyObject_CallMethod(rng, "get_state", NULL);
            PyObject *r = st ? PyObject_CallOneArg(set_rng_state, st) : NULL;
            Py_XDECREF(st);
            Py_XDECREF(r);
            if (!r)
                cdy_graph_failed = NULL;   /* no rerun from another state */
            PyErr_Clear();
            PyErr_Restore(et, ev, tb);
        }
    }
    Py_XDECREF(rng);
    return res;
}

_Thread_local PyObject *const *cdy_donated_args;

/* 1 when this call of c takes its inputs' references from args (donated:
 * cdy_donated_args, which it clears) and may drop them mid-call. */
static int take_donation(const cdy_compiled *c, PyObject *const *args)
{
    int d = args == cdy_donated_args && c->in_drop_at && !c->nwb && !c->nrv;
    cdy_donated_args = NULL;
    return d;
}

/* Drop the donated inputs no step after s reads; 1 if one was dropped. */
static int drop_donated(const cdy_compiled *c, int s, PyObject **bufs)
{
    for (int j = c->in_drop_at[s]; j < c->in_drop_at[s + 1]; j++)
        Py_CLEAR(bufs[c->in_drop_list[j]]);
    return c->in_drop_at[s] < c->in_drop_at[s + 1];
}

/* End of a call's references to bufs[0..n): released, or, for donated inputs
 * (donated: args is the caller's array) of a call that failed before
 * dropping any (ok == 0, wrote == 0), put back into args. */
static void release_bufs(const cdy_compiled *c, PyObject **bufs, int n, PyObject *const *args,
                         int donated, int restore)
{
    for (int j = 0; bufs && j < n; j++)
        if (donated && restore && j < c->ninputs)
            ((PyObject **)args)[j] = bufs[j];
        else
            Py_XDECREF(bufs[j]);
}

/* Run the steps on args; the C backend's vectorcall. */
static PyObject *run_c(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    cdy_compiled *c = (cdy_compiled *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != c->ninputs || kw) {
        PyErr_Format(PyExc_TypeError, "%U expects %d tensors, got %zd", c->name, c->ninputs, nargs);
        return NULL;
    }
    int donated = take_donation(c, args);
    if (!c->calls)
        alias_begin(c);
    int64_t symvals[CDY_SYM_MAX_SYMS];
    const int64_t *sv = c->sym ? symvals : NULL;
    int big = 0;                           /* symbolic: the GIL is released around kernels */
    void *inptr[16], **inp = c->sym && c->ninputs <= 16 ? inptr : NULL;   /* sym_values' reads */
    long long t0 = cdy_phase_start();
    for (int j = 0; inp && j < c->ninputs; j++)
        inp[j] = NULL;
    if (c->sym && !sym_values_guarded(c, args, symvals, &big) &&
        sym_values(c, args, symvals, &big, inp))
        return call_end(c, NULL, 0, Py_NewRef(Py_None));   /* the frame reruns eagerly */
    if (c->sym)
        cdy_phase_add(CDY_PHASE_guards, &t0);   /* the symbolic sizes' checks */
    PyObject *stackbufs[16];
    void *stackptrs[16];
    PyObject **bufs = c->nbuffers <= 16 ? stackbufs : PyMem_Calloc((size_t)c->nbuffers, sizeof(PyObject *));
    void **ptrs = c->nbuffers <= 16 ? stackptrs : PyMem_Calloc((size_t)c->nbuffers, sizeof(void *));
    PyObject *res = NULL, **stash = NULL, *rng = NULL;
    void *scratch = NULL;
    int i = 0, wrote = 0;
    rng = rng_save(c);
    t0 = cdy_phase_start();
    if (c->multi)
        stash = PyMem_Calloc((size_t)c->npynodes, sizeof(PyObject *));
    if (!bufs || !ptrs || (c->multi && !stash) || !rng) {
        if (rng)
            PyErr_NoMemory();
        goto done;
    }
    if (c->nwb && check_overlap(c, args))
        goto done;
    for (; i < c->ninputs; i++) {
        bufs[i] = args[i];
        if (donated)
            ((PyObject **)args)[i] = NULL;
        else
            Py_INCREF(args[i]);
        if (!(ptrs[i] = inp && inp[i] ? inp[i] : tensor_ptr(bufs[i]))) {
            i++;
            goto done;
        }
    }
    cdy_phase_add(CDY_PHASE_inputs, &t0);
    for (int b = i; b < c->nbuffers; b++)
        bufs[b] = NULL;
    i = c->nbuffers;
    size_t need = c->sym ? c->sym_scratch : c->scratch_bytes;   /* sym_cache's, at sv */
    if (need && !(scratch = scratch_take(c, need)))
        goto done;
    for (int b = c->ninputs; b < c->nbuffers; b++)
        if (c->buf_alloc[b] == CDY_BUF_UNUSED)
            ptrs[b] = NULL;
        else if (scratch && c->scratch_off[b] >= 0)
            ptrs[b] = (char *)scratch + (c->sym ? c->sym_soff[b] : c->scratch_off[b]);
    if (make_bufs(c, 0, bufs, ptrs, sv))
        goto done;
    cdy_phase_add(CDY_PHASE_alloc, &t0);
    for (int s = 0; s < c->nsteps; s++) {
        const cdy_step *st = &c->steps[s];
        int failed = st->kind == CDY_STEP_KERNEL ? -1 : st->index;
        if (st->kind == CDY_STEP_KERNEL ? run_kernel(&c->kernels[st->index], ptrs, sv, big, &failed)
                                        : run_extern(c, st, bufs, ptrs, stash, sv)) {
            add_user_frame(c, failed);
            goto done;
        }
        cdy_phase_add(st->kind == CDY_STEP_KERNEL ? CDY_PHASE_kernels : CDY_PHASE_externs, &t0);
        for (int j = c->drop_at[s]; j < c->drop_at[s + 1]; j++)
            Py_CLEAR(bufs[c->drop_list[j]]);
        if (donated && drop_donated(c, s, bufs))
            wrote = 1;   /* an input is gone: no rerun from the arguments */
        cdy_phase_add(CDY_PHASE_free, &t0);
        if (c->make_at[s + 1] < c->make_at[s + 2]) {
            if (make_bufs(c, s + 1, bufs, ptrs, sv))
                goto done;
            cdy_phase_add(CDY_PHASE_alloc, &t0);
        }
    }
    wrote = 1;   /* from here on an input may be written: a rerun would write it again */
    if (c->nwb && write_back(c, args, bufs))
        goto done;
    cdy_phase_add(CDY_PHASE_kernels, &t0);
    c->calls++;
    res = make_result(c, bufs);
    if (c->nrv)
        res = apply_reviews(c, args, res);
done:
    if (c->alias_learning)
        alias_end(c, bufs, res && i == c->nbuffers);
    release_bufs(c, bufs, i, args, donated, !res && !wrote);
    for (int n = 0; stash && n < c->npynodes; n++)
        Py_XDECREF(stash[n]);
    PyMem_Free(stash);
    scratch_give(c, scratch);
    if (bufs != stackbufs)
        PyMem_Free(bufs);
    if (ptrs != stackptrs)
        PyMem_Free(ptrs);
    cdy_phase_add(CDY_PHASE_result, &t0);
    return call_end(c, res, wrote, rng);
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
    PyObject **stash = PyMem_Calloc((size_t)c->npynodes + 1, sizeof(PyObject *));
    PyObject *res = NULL, *rng = rng_save(c);
    int wrote = 0;
    if (!vals || !stash || !rng) {
        PyMem_Free(vals);
        PyMem_Free(stash);
        return rng ? call_end(c, PyErr_NoMemory(), 0, rng) : NULL;
    }
    for (int v = 0; v < c->nvalues; v++)
        if (c->value_input[v] >= 0) {
            vals[v] = args[c->value_input[v]];
            Py_INCREF(vals[v]);
        }
    if (c->nwb && check_overlap(c, args))
        goto done;
    for (int n = 0; n < c->npynodes; n++) {
        if (c->pynodes[n].value < 0)
            continue;   /* a multi-output call: made when its first item is needed */
        PyObject *r = pynode_result(c, n, vals, NULL, stash);
        if (!r) {
            add_user_frame(c, c->pynodes[n].value);
            goto done;
        }
        Py_XSETREF(vals[c->pynodes[n].value], r);
    }
    wrote = 1;
    if (c->nwb && write_back(c, args, vals))
        goto done;
    c->calls++;
    res = make_result(c, vals);
    if (c->nrv)
        res = apply_reviews(c, args, res);
done:
    for (int v = 0; v < c->nvalues; v++)
        Py_XDECREF(vals[v]);
    for (int n = 0; n < c->npynodes; n++)
        Py_XDECREF(stash[n]);
    PyMem_Free(vals);
    PyMem_Free(stash);
    return call_end(c, res, wrote, rng);
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
    for (int b = 0; c->buf_meta && b < c->nbuffers; b++) {
        Py_XDECREF(c->buf_meta[b]);
        Py_XDECREF(c->buf_tmpl[b]);
    }
    PyMem_Free(c->buf_meta);
    PyMem_Free(c->buf_tmpl);
    for (int b = 0; c->alias && b < c->nbuffers; b++)
        Py_XDECREF(c->alias[b]);
    PyMem_Free(c->alias);
    for (int b = 0; c->mmd && b < c->nbuffers; b++)
        Py_XDECREF(c->mmd[b]);
    PyMem_Free(c->mmd);
    PyMem_Free(c->alias_src);
    PyMem_Free(c->alias_sp);
    PyMem_Free(c->buf_cmeta);
    PyMem_Free(c->buf_pool);
    PyMem_Free(c->buf_alloc);
    PyMem_Free(c->scratch_off);
    PyMem_Free(c->scratch);
    PyMem_Free(c->steps);
    PyMem_Free(c->make_at);
    PyMem_Free(c->buf_share);
    PyMem_Free(c->make_list);
    PyMem_Free(c->drop_at);
    PyMem_Free(c->drop_list);
    PyMem_Free(c->in_drop_at);
    PyMem_Free(c->in_drop_list);
    PyMem_Free(c->value_buffer);
    PyMem_Free(c->pynode_of);
    for (int n = 0; c->pynodes && n < c->npynodes; n++) {
        cdy_pynode *p = &c->pynodes[n];
        for (int a = 0; p->seq && a < p->nargs; a++) {
            PyMem_Free(p->seq[a].ref);
            PyMem_Free(p->seq[a].cst);
        }
        PyMem_Free(p->seq);
        PyMem_Free(p->ref);
        PyMem_Free(p->cst);
    }
    PyMem_Free(c->pynodes);
    for (int n = 0; c->call_fn && n < c->npynodes; n++)
        Py_XDECREF(c->call_fn[n]);
    PyMem_Free(c->call_fn);
    PyMem_Free(c->value_input);
    PyMem_Free(c->outputs);
    PyMem_Free(c->wb);
    PyMem_Free(c->in_bytes);
    for (int v = 0; c->where_code && v < c->nwhere; v++)
        Py_XDECREF(c->where_code[v]);
    PyMem_Free(c->where_code);
    PyMem_Free(c->where_line);
    PyMem_Free(c->rv);
    Py_XDECREF(c->keep);
    Py_XDECREF(c->name);
    Py_XDECREF(c->source);
    Py_XDECREF(c->ir_pre);
    Py_XDECREF(c->ir_post);
    PyMem_Free(c->kir);
    PyMem_Free(c->kir_values);
    PyMem_Free(c->kir_ops);
    if (c->sym)
        cdy_sym_shapes_free(c->sym);
    PyMem_Free(c->sym);
    PyMem_Free(c->buf_value);
    PyMem_Free(c->in_value);
    PyMem_Free(c->in_meta);
    PyMem_Free(c->sym_bmeta);
    PyMem_Free(c->sym_imeta);
    PyMem_Free(c->sym_inumel);
    PyMem_Free(c->sym_soff);
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

/* One argument of a traced call as data: ("v", value), ("c", constant) or,
 * for a sequence, ("s", is_list, (items...)); new ref or NULL. */
static PyObject *program_arg(int ref, PyObject *cst, const cdy_pyseq *seq)
{
    if (ref >= 0)
        return Py_BuildValue("(si)", "v", ref);
    if (ref == -2 && !seq)
        return Py_BuildValue("(sO)", "c", Py_None);
    if (ref != -2)
        return Py_BuildValue("(sO)", "c", cst ? cst : Py_None);
    PyObject *items = PyTuple_New(seq->n);
    for (int i = 0; items && i < seq->n; i++) {
        PyObject *it = program_arg(seq->ref[i], seq->cst[i], NULL);
        if (!it) {
            Py_CLEAR(items);
            break;
        }
        PyTuple_SET_ITEM(items, i, it);
    }
    return items ? Py_BuildValue("(siN)", "s", seq->is_list, items) : NULL;
}

/* The traced calls (what backend "eager" replays) as data for the repro
 * generator: a tuple of (value, fn, args, kwnames, item, base) per call,
 * args as program_arg gives them; value -1 for a multi-output call, whose
 * results other calls take as item `item` of call `base`. */
static PyObject *compiled_get_program(PyObject *self, void *closure)
{
    cdy_compiled *c = (cdy_compiled *)self;
    PyObject *r = PyTuple_New(c->npynodes);
    for (int n = 0; r && n < c->npynodes; n++) {
        const cdy_pynode *p = &c->pynodes[n];
        PyObject *args = PyTuple_New(p->nargs);
        for (int a = 0; args && a < p->nargs; a++) {
            PyObject *x = program_arg(p->ref[a], p->cst ? p->cst[a] : NULL,
                                      p->seq ? &p->seq[a] : NULL);
            if (!x) {
                Py_CLEAR(args);
                break;
            }
            PyTuple_SET_ITEM(args, a, x);
        }
        PyObject *row = args ? Py_BuildValue("(iONOii)", p->value, p->fn ? p->fn : Py_None, args,
                                             p->kwnames ? p->kwnames : Py_None, p->item, p->base)
                             : NULL;
        if (!row) {
            Py_CLEAR(r);
            break;
        }
        PyTuple_SET_ITEM(r, n, row);
    }
    return r;
}

static PyObject *compiled_get_calls(PyObject *self, void *closure)
{
    return PyLong_FromLongLong(((cdy_compiled *)self)->calls);
}

static PyObject *compiled_get_nkernels(PyObject *self, void *closure)
{
    return PyLong_FromLong(((cdy_compiled *)self)->nkernels);
}

static PyObject *compiled_get_scratch_bytes(PyObject *self, void *closure)
{
    return PyLong_FromSize_t(((cdy_compiled *)self)->scratch_bytes);
}

static PyObject *compiled_get_peak_bytes(PyObject *self, void *closure)
{
    return PyLong_FromLongLong(((cdy_compiled *)self)->peak_bytes);
}

/* ((output buffer, input buffer), ...): the outputs made as a dying input's tensor. */
static PyObject *compiled_get_shared(PyObject *self, void *closure)
{
    cdy_compiled *c = (cdy_compiled *)self;
    (void)closure;
    PyObject *t = PyList_New(0);
    for (int b = 0; t && c->buf_share && b < c->nbuffers; b++) {
        PyObject *e = c->buf_share[b] >= 0 ? Py_BuildValue("(ii)", b, c->buf_share[b]) : NULL;
        if (c->buf_share[b] >= 0 && (!e || PyList_Append(t, e)))
            Py_CLEAR(t);
        Py_XDECREF(e);
    }
    PyObject *r = t ? PyList_AsTuple(t) : NULL;
    Py_XDECREF(t);
    return r;
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

/* A tuple of the n ints (or int64s) at a. */
static PyObject *kir_tuple(const void *a, int n, int wide)
{
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) {
        PyObject *x = wide ? PyLong_FromLongLong(((const int64_t *)a)[i])
                           : PyLong_FromLong(((const int *)a)[i]);
        if (!x) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

/* The names of flags f (CDY_KIRF_*), a tuple. */
static PyObject *kir_flags(unsigned f)
{
    static const char *names[] = {"two_pass", "blocks", "columns", "unstored", "copy_units",
                                  "copy_rows", "lanes", "prefetch"};
    PyObject *l = PyList_New(0);
    for (int i = 0; l && i < 8; i++) {
        PyObject *s = f >> i & 1 ? PyUnicode_FromString(names[i]) : NULL;
        if (s && PyList_Append(l, s))
            Py_CLEAR(l);
        Py_XDECREF(s);
    }
    PyObject *t = l ? PyList_AsTuple(l) : NULL;
    Py_XDECREF(l);
    return t;
}

/* Step s of the summary as a dict (new), op names from c->kir_ops. */
static PyObject *kir_dict(const cdy_compiled *c, const cdy_kir *s)
{
    PyObject *ops = PyTuple_New(s->nfused);
    const int *op = c->kir_ops + (s->fused - c->kir_values);
    for (int i = 0; ops && i < s->nfused; i++)
        PyTuple_SET_ITEM(ops, i, PyUnicode_FromString(cdy_op_table[op[i]].name));
    PyObject *none = Py_None;
    PyObject *d = ops ? Py_BuildValue(
        "{s:s,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:i,s:O,s:i,s:O,s:O,s:O,s:O,s:N,s:s}",
        "kind", cdy_kir_kind_names[s->kind],
        "kernel", s->kernel >= 0 ? PyLong_FromLong(s->kernel) : Py_NewRef(none),
        "node", s->node >= 0 ? PyLong_FromLong(s->node) : Py_NewRef(none),
        "piece", s->piece >= 0 ? PyLong_FromLong(s->piece) : Py_NewRef(none),
        "sizes", kir_tuple(s->sizes, s->ndim, 1), "loops", kir_tuple(s->loops, s->nloops, 1),
        "reduced_loops", kir_tuple(s->rloops, s->nrloops, 1),
        "outputs", kir_tuple(s->outs, s->nout, 0), "fused", kir_tuple(s->fused, s->nfused, 0),
        "ops", ops, "params", s->nparams, "parallel", s->parallel ? Py_True : Py_False,
        "threads", s->threads, "collapse", s->collapse ? Py_True : Py_False,
        "vectorized", s->vector ? Py_True : Py_False, "streams", s->stream ? Py_True : Py_False,
        "status", s->status ? Py_True : Py_False, "flags", kir_flags(s->flags),
        "serial", s->serial) : NULL;
    return d;
}

/* The kernel IR's summary: a list of a dict per step of the schedule (new). */
static PyObject *compiled_get_kernel_ir(PyObject *self, void *closure)
{
    cdy_compiled *c = (cdy_compiled *)self;
    if (!c->kir)
        Py_RETURN_NONE;
    PyObject *l = PyList_New(c->nkir);
    for (int i = 0; l && i < c->nkir; i++) {
        PyObject *d = kir_dict(c, &c->kir[i]);
        if (!d)
            Py_CLEAR(l);
        else
            PyList_SET_ITEM(l, i, d);
    }
    return l;
}

/* Keep a copy of plan's kernel IR summary (and the ops of its fused values,
 * from r's graph) in c; 0 or -1 (MemoryError). */
static int copy_kir(cdy_compiled *c, const cdy_plan *plan, const cdy_run_record *r)
{
    size_t nv = 1;
    for (int i = 0; i < plan->nkir; i++)
        nv += (size_t)(plan->kir[i].nout + plan->kir[i].nfused);
    c->kir = PyMem_Malloc(sizeof(cdy_kir) * (size_t)(plan->nkir + 1));
    c->kir_values = PyMem_Malloc(sizeof(int) * nv);
    c->kir_ops = PyMem_Calloc(nv, sizeof(int));
    if (!c->kir || !c->kir_values || !c->kir_ops) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(c->kir, plan->kir, sizeof(cdy_kir) * (size_t)plan->nkir);
    int *vals = c->kir_values;
    for (int i = 0; i < plan->nkir; i++) {
        cdy_kir *s = &c->kir[i];
        memcpy(vals, s->outs, sizeof(int) * (size_t)s->nout);
        s->outs = vals;
        vals += s->nout;
        memcpy(vals, s->fused, sizeof(int) * (size_t)s->nfused);
        for (int j = 0; j < s->nfused; j++)
            c->kir_ops[vals - c->kir_values + j] = r->graph->values[vals[j]].op;
        s->fused = vals;
        vals += s->nfused;
    }
    c->nkir = plan->nkir;
    return 0;
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

/* CompiledGraph.phase_timing(flag): turn per-call phase timing on (zeroing
 * the sums) or off; returns {phase: total ns} accumulated so far. */
/* The phase clocks' sums as a dict: name -> ns (bank 0), "bwd_" name -> ns
 * (bank 1: inside training graphs' backwards); NULL + error. */
static PyObject *phase_dict(void)
{
    static const char *names[] = {
#define CDY_X(n) #n,
        CDY_PHASES(CDY_X)
#undef CDY_X
    };
    PyObject *d = PyDict_New();
    for (int bank = 0; d && bank < 2; bank++)
        for (int p = 0; d && p < CDY_PHASE_COUNT; p++) {
            PyObject *v = PyLong_FromLongLong(cdy_phase_ns[bank][p]);
            PyObject *k = PyUnicode_FromFormat("%s%s", bank ? "bwd_" : "", names[p]);
            if (!v || !k || PyDict_SetItem(d, k, v))
                Py_CLEAR(d);
            Py_XDECREF(v);
            Py_XDECREF(k);
        }
    return d;
}

/* phase_timing(flag): the sums so far (phase_dict); a true flag zeroes them
 * and turns the clocks on ("cpu": the calling thread's CPU clock, for a
 * loaded host at one thread), a false one turns them off. */
static PyObject *compiled_phase_timing(PyObject *unused, PyObject *flag)
{
    int cpu = PyUnicode_Check(flag) && PyUnicode_CompareWithASCIIString(flag, "cpu") == 0;
    int on = PyObject_IsTrue(flag);
    if (on < 0)
        return NULL;
    PyObject *d = phase_dict();
    if (on) {
        memset(cdy_phase_ns, 0, sizeof(cdy_phase_ns));
        phase_clock = cpu ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
    }
    cdy_phase_on = on;
    return d;
}

static PyMethodDef compiled_methods[] = {
    {"phase_timing", compiled_phase_timing, METH_O | METH_STATIC,
     "time the phases of each call (runtime.h's CDY_PHASES; 'cpu': the thread's CPU "
     "clock) on/off; returns the nanoseconds summed so far (bwd_*: in training backwards)"},
    {"reset_kernel_profile", compiled_reset_profile, METH_NOARGS,
     "zero this graph's per-kernel call counts and times"},
    {"set_profile_kernels", compiled_set_profile, METH_O | METH_STATIC,
     "time every kernel call of every compiled graph (True/False); returns the old value"},
    {NULL},
};

/* The live symbols as ((input, dim), ...), or None (static sizes). */
static PyObject *compiled_get_symbols(PyObject *self, void *closure)
{
    cdy_compiled *c = (cdy_compiled *)self;
    (void)closure;
    if (!c->sym)
        Py_RETURN_NONE;
    cdy_sym_mask live = cdy_sym_live(c->sym);
    PyObject *t = PyList_New(0);
    for (int k = 0; t && k < c->sym->tab.nsyms; k++) {
        PyObject *e = cdy_sym_mask_has(&live, k) ? Py_BuildValue("(ii)", c->sym->info[k].input,
                                                     c->sym->info[k].dim) : NULL;
        if (cdy_sym_mask_has(&live, k) && (!e || PyList_Append(t, e)))
            Py_CLEAR(t);
        Py_XDECREF(e);
    }
    PyObject *r = t ? PyList_AsTuple(t) : NULL;
    Py_XDECREF(t);
    return r;
}

static PyGetSetDef compiled_getset[] = {
    {"symbols", compiled_get_symbols, NULL,
     "the dims its kernels take at run time, ((input, dim), ...), or None (static sizes)",
     NULL},
    {"source", compiled_get_source, NULL, "generated C source (C backend)", NULL},
    {"ir_pre_fusion", compiled_get_ir_pre, NULL, "loop IR before fusion (C backend)", NULL},
    {"kernel_ir", compiled_get_kernel_ir, NULL,
     "the kernel IR's summary: per step of the schedule a dict of its kind, what it fuses and "
     "stores, its loops and decisions (C backend; None for eager)", NULL},
    {"ir_post_fusion", compiled_get_ir_post, NULL,
     "kernels after fusion: loops, nodes, loads/stores, vectorization, parallelism", NULL},
    {"kernel_profile", compiled_get_kernel_profile, NULL,
     "[(kernel symbol, calls, total ns)] while profiling is on", NULL},
    {"calls", compiled_get_calls, NULL, "number of calls", NULL},
    {"program", compiled_get_program, NULL,
     "the traced torch calls as data: (value, fn, args, kwnames, item, base) each", NULL},
    {"num_kernels", compiled_get_nkernels, NULL, "number of kernels", NULL},
    {"scratch_bytes", compiled_get_scratch_bytes, NULL,
     "bytes of the block holding the buffers only kernels read (no tensors made per call)",
     NULL},
    {"shared_buffers", compiled_get_shared, NULL,
     "((output buffer, input buffer), ...): outputs a kernel writes over an input that dies "
     "there, made as that input's tensor (compiler/share.c)", NULL},
    {"peak_buffer_bytes", compiled_get_peak_bytes, NULL,
     "most bytes of the tensors a call makes (kernel outputs, extern results) alive at once",
     NULL},
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
    kn->status = d->status;
    kn->atypes = PyMem_Calloc((size_t)d->nargs + 3, sizeof(ffi_type *));
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
    kn->atypes[d->nargs] = &ffi_type_pointer;   /* status kernels: the error slot */
    kn->atypes[d->nargs + kn->status] = &ffi_type_pointer;   /* symbolic: the symbols */
    if (ffi_prep_cif(&kn->cif, FFI_DEFAULT_ABI,
                     (unsigned)(d->nargs + kn->status + (c->sym != NULL)),
                     kn->status ? &ffi_type_sint : &ffi_type_void, kn->atypes) != FFI_OK) {
        PyErr_SetString(PyExc_RuntimeError, "ffi_prep_cif failed");
        return -1;
    }
    return 0;
}

/* Buffers up to this many bytes are allocated with empty_like(template)
 * where torch has no empty_fast. */
#define CDY_TEMPLATE_BYTES (1 << 20)

/* A template for allocating buffer b: a tensor of its meta that
 * torch.empty_like copies with the same strides, or NULL (error cleared).
 * empty_like parses one argument where empty_strided parses two int lists
 * and a keyword (about 4K instructions less per buffer and call); the
 * template costs its own bytes once, so only small buffers get one. */
static PyObject *make_template(cdy_compiled *c, const cdy_meta *m, int b)
{
    if (cdy_meta_numel(m) * (int64_t)cdy_dtype_table[m->dtype].size > CDY_TEMPLATE_BYTES)
        return NULL;
    PyObject *t = PyObject_Vectorcall(empty_strided, PySequence_Fast_ITEMS(c->buf_meta[b]), 2,
                                      kw_dtype);
    PyObject *probe = t ? PyObject_CallOneArg(empty_like, t) : NULL;
    PyObject *got = probe ? PyObject_CallMethodNoArgs(probe, cdy_str.stride) : NULL;
    int same = got ? PyObject_RichCompareBool(got, PyTuple_GET_ITEM(c->buf_meta[b], 1), Py_EQ)
                   : 0;
    Py_XDECREF(got);
    Py_XDECREF(probe);
    if (same != 1)
        Py_CLEAR(t);
    PyErr_Clear();
    return t;
}

/* Prebuilt (sizes, strides, dtype) of buffer b, for allocating or checking it. */
static int prepare_meta(cdy_compiled *c, const cdy_meta *m, int b)
{
    PyObject *sz = int_tuple(m->sizes, m->ndim), *st = int_tuple(m->strides, m->ndim);
    if (sz && st)
        c->buf_meta[b] = PyTuple_Pack(3, sz, st, dtype_objs[m->dtype]);
    Py_XDECREF(sz);
    Py_XDECREF(st);
    return c->buf_meta[b] ? 0 : -1;
}

/* Call visit(ctx, b) for each buffer b that pynode n's call (for an item,
 * the call it is an item of) passes to torch. */
static void pynode_arg_buffers(const cdy_compiled *c, int n, void (*visit)(void *, int),
                               void *ctx)
{
    const cdy_pynode *p = &c->pynodes[n];
    if (p->item >= 0)
        p = &c->pynodes[p->base];
    for (int a = 0; a < p->nargs; a++) {
        int cnt = p->ref[a] == -2 ? p->seq[a].n : 1;
        for (int j = 0; j < cnt; j++) {
            int v = p->ref[a] == -2 ? p->seq[a].ref[j] : p->ref[a];
            if (v >= 0 && v < c->nvalues && c->value_buffer[v] >= 0)
                visit(ctx, c->value_buffer[v]);
        }
    }
}

/* pynode_arg_buffers visitor: mark buffer b in the char array ctx. */
static void mark_buffer(void *ctx, int b)
{
    ((char *)ctx)[b] = 1;
}

/* Lay out the scratch block: every buffer we allocate that no output and no
 * extern call (torch) sees is only read and written by kernels, so it needs
 * memory, not a tensor.  0, or -1 with MemoryError. */
static int plan_scratch(cdy_compiled *c, const cdy_plan *plan)
{
    char *tensor = PyMem_Calloc((size_t)c->nbuffers + 1, 1);
    c->scratch_off = PyMem_Calloc((size_t)c->nbuffers + 1, sizeof(int64_t));
    if (!tensor || !c->scratch_off) {
        PyMem_Free(tensor);
        PyErr_NoMemory();
        return -1;
    }
    for (int o = 0; o < c->noutputs; o++)
        tensor[c->outputs[o]] = 1;
    for (int s = 0; s < c->nsteps; s++)
        if (c->steps[s].kind == CDY_STEP_EXTERN) {
            int base = sym_view_base(c, c->steps[s].index);
            pynode_arg_buffers(c, c->pynode_of[c->steps[s].index], mark_buffer, tensor);
            if (base >= 0 && c->value_buffer[base] >= 0)
                tensor[c->value_buffer[base]] = 1;   /* sym_view makes a view of it */
        }
    for (int b = 0; b < c->nbuffers; b++) {
        const cdy_meta *m = &plan->buffers[b];
        c->scratch_off[b] = -1;
        if (b < c->ninputs || c->buf_alloc[b] != 1 || tensor[b] || cdy_meta_numel(m) == 0)
            continue;
        if (c->sym) {                      /* laid out at each call's sizes (sym_cache) */
            c->scratch_off[b] = 0;
            continue;
        }
        int64_t extent = 1;
        for (int d = 0; d < m->ndim; d++)
            extent += (m->sizes[d] - 1) * m->strides[d];
        c->scratch_off[b] = (int64_t)c->scratch_bytes;
        c->scratch_bytes += ((size_t)extent * (size_t)cdy_dtype_table[m->dtype].size + 63) & ~(size_t)63;
    }
    PyMem_Free(tensor);
    return 0;
}

/* The first and last step touching each buffer, being filled by step_spans. */
typedef struct {
    int *first, *last;
    int step;
} spans;

/* Note that step sp->step touches buffer b (b < 0: none). */
static void touch(void *ctx, int b)
{
    spans *sp = ctx;
    if (b < 0)
        return;
    if (sp->first[b] > sp->step)
        sp->first[b] = sp->step;
    if (sp->last[b] < sp->step)
        sp->last[b] = sp->step;
}

/* first[] / last[]: the first and last step that touches each buffer (a
 * kernel's argument, an extern's result or a tensor its call reads);
 * nsteps / -1 for none. */
static void step_spans(cdy_compiled *c, int *first, int *last)
{
    spans sp = {first, last, 0};
    for (int b = 0; b < c->nbuffers; b++) {
        first[b] = c->nsteps;
        last[b] = -1;
    }
    for (; sp.step < c->nsteps; sp.step++) {
        const cdy_step *st = &c->steps[sp.step];
        if (st->kind == CDY_STEP_KERNEL) {
            const rt_kernel *kn = &c->kernels[st->index];
            for (int a = 0; a < kn->nargs; a++)
                touch(&sp, kn->args[a]);
            continue;
        }
        touch(&sp, st->out_buffer);
        pynode_arg_buffers(c, c->pynode_of[st->index], touch, &sp);
        int base = sym_view_base(c, st->index);
        if (base >= 0 && c->value_buffer[base] >= 0)
            touch(&sp, c->value_buffer[base]);   /* sym_view reads it */
    }
}

/* Counting sort of buffers b with slot[b] >= 0 into at[0..nslots] / list; 0 or -1. */
static int bucket(const int *slot, int nbuf, int nslots, int **at, int **list)
{
    *at = PyMem_Calloc((size_t)nslots + 2, sizeof(int));
    *list = PyMem_Calloc((size_t)nbuf + 1, sizeof(int));
    if (!*at || !*list)
        return -1;
    for (int b = 0; b < nbuf; b++)
        if (slot[b] >= 0)
            (*at)[slot[b] + 1]++;
    for (int s = 0; s < nslots + 1; s++)
        (*at)[s + 1] += (*at)[s];
    int *fill = PyMem_Calloc((size_t)nslots + 1, sizeof(int));
    if (!fill)
        return -1;
    for (int b = 0; b < nbuf; b++)
        if (slot[b] >= 0)
            (*list)[(*at)[slot[b]] + fill[slot[b]]++] = b;
    PyMem_Free(fill);
    return 0;
}

/* The last buffer of the chain taking b's tensor (plan_share), b if none. */
static int share_holder(const cdy_compiled *c, int b)
{
    for (int n = 0; n < c->nbuffers; n++) {
        int next = -1;
        for (int o = c->ninputs; o < c->nbuffers && next < 0; o++)
            if (c->buf_share[o] == b)
                next = o;
        if (next < 0)
            return b;
        b = next;
    }
    return b;
}

/* 1 if step s is an extern whose pynode is a matmul (mm_fns) of one
 * result: a new tensor, no alias of its arguments. */
static int step_is_matmul(const cdy_compiled *c, int s)
{
    const cdy_step *st = &c->steps[s];
    int n = st->kind == CDY_STEP_EXTERN ? c->pynode_of[st->index] : -1;
    if (n < 0 || c->pynodes[n].item >= 0)
        return 0;
    for (int i = 0; i < 5; i++)
        if (c->pynodes[n].fn == mm_fns[i])
            return 1;
    return 0;
}

/* foreign[b] = 1 for every buffer an extern other than a matmul reads or
 * makes, or a symbolic view is made of: its tensor may be seen by torch
 * after the step that reads it (an alias, a saved reference). */
static void share_foreign(const cdy_compiled *c, char *foreign)
{
    for (int s = 0; s < c->nsteps; s++) {
        const cdy_step *st = &c->steps[s];
        if (st->kind != CDY_STEP_EXTERN || step_is_matmul(c, s))
            continue;
        if (st->out_buffer >= 0)
            foreign[st->out_buffer] = 1;
        if (c->pynode_of[st->index] >= 0)
            pynode_arg_buffers(c, c->pynode_of[st->index], mark_buffer, foreign);
        int base = sym_view_base(c, st->index);
        if (base >= 0 && c->value_buffer[base] >= 0)
            foreign[c->value_buffer[base]] = 1;
    }
    for (int o = 0; o < c->noutputs; o++)
        foreign[c->outputs[o]] = 1;   /* an input that is returned does not die */
}

/* buf_share: the plan's pairs (compiler/share.c) whose input is a tensor
 * made per call (by a kernel or a matmul), seen by kernels and matmuls
 * only, last touched by the step that first touches the output, an output
 * we make as a tensor of the same meta: the output is made as the input's
 * tensor (in place, as eager's x.add_(y) on a dead x).  0 or -1. */
static int plan_share(cdy_compiled *c, const cdy_plan *plan)
{
    int nb = c->nbuffers, rc = -1;
    int *first = PyMem_Calloc((size_t)nb + 1, sizeof(int));
    int *last = PyMem_Calloc((size_t)nb + 1, sizeof(int));
    char *foreign = PyMem_Calloc((size_t)nb + 1, 1);
    c->buf_share = PyMem_Calloc((size_t)nb + 1, sizeof(int));
    if (!first || !last || !foreign || !c->buf_share) {
        PyErr_NoMemory();
        goto done;
    }
    step_spans(c, first, last);
    share_foreign(c, foreign);
    for (int b = 0; b < nb; b++) {
        int in = plan->buffer_share && !c->sym && b >= c->ninputs ? plan->buffer_share[b] : -1;
        c->buf_share[b] = -1;
        if (in < c->ninputs || in >= nb || foreign[in] || c->buf_alloc[b] != 1 ||
            c->scratch_off[b] >= 0 || c->scratch_off[in] >= 0 ||
            c->buf_alloc[in] == CDY_BUF_UNUSED || last[in] != first[b] || first[b] >= c->nsteps ||
            c->steps[first[b]].kind != CDY_STEP_KERNEL)
            continue;
        c->buf_share[b] = in;
    }
    rc = 0;
done:
    PyMem_Free(first);
    PyMem_Free(last);
    PyMem_Free(foreign);
    return rc;
}

/* The most bytes of per-call tensors alive at once: the tensors we make
 * and the extern results that are not views (r's graph says which steps
 * make views), each from slot born[b] of make_at to slot drop[b] of
 * drop_at (-1: kept); -1 with MemoryError. */
static int64_t peak_bytes(const cdy_compiled *c, const cdy_plan *plan, const cdy_run_record *r,
                          const int *born, const int *drop)
{
    int ns = c->nsteps;
    int64_t *made = PyMem_Calloc((size_t)ns + 1, sizeof(int64_t));
    int64_t *freed = PyMem_Calloc((size_t)ns + 1, sizeof(int64_t));
    char *view = PyMem_Calloc((size_t)c->nbuffers + 1, 1);
    int64_t live = 0, peak = -1;
    if (!made || !freed || !view) {
        PyErr_NoMemory();
        goto done;
    }
    for (int s = 0; s < ns; s++)
        if (c->steps[s].kind == CDY_STEP_EXTERN)
            view[c->steps[s].out_buffer] = cdy_value_is_alias(&r->graph->values[c->steps[s].index]);
    for (int b = c->ninputs; b < c->nbuffers; b++) {
        const cdy_meta *m = &plan->buffers[b];
        int64_t bytes = cdy_meta_numel(m) * cdy_dtype_table[m->dtype].size;
        if (born[b] < 0 || view[b] || c->buf_share[b] >= 0)
            continue;
        made[born[b]] += bytes;
        int last = share_holder(c, b);   /* the memory goes with the last buffer taking it */
        if (drop[last] >= 0)
            freed[drop[last]] += bytes;
    }
    peak = 0;
    for (int s = 0; s <= ns; s++) {
        live += made[s];
        peak = live > peak ? live : peak;
        live -= freed[s];
    }
done:
    PyMem_Free(made);
    PyMem_Free(freed);
    PyMem_Free(view);
    return peak;
}

/* Buffer lifetimes: a tensor we allocate is made just before the first step
 * that touches it, and every tensor not returned is released after the last
 * step that touches it, so a call holds only the buffers still needed (as
 * eager frees a temporary when its last reference goes) and the allocator
 * reuses freed memory for later buffers.  0, or -1 with MemoryError. */
static int plan_lifetimes(cdy_compiled *c, const cdy_plan *plan, const cdy_run_record *r)
{
    int nb = c->nbuffers, ns = c->nsteps, rc = -1;
    int *first = PyMem_Calloc((size_t)nb + 1, sizeof(int));
    int *last = PyMem_Calloc((size_t)nb + 1, sizeof(int));
    int *born = PyMem_Calloc((size_t)nb + 1, sizeof(int));
    int *drop = PyMem_Calloc((size_t)nb + 1, sizeof(int));
    int *make = PyMem_Calloc((size_t)nb + 1, sizeof(int));
    if (!first || !last || !born || !drop || !make) {
        PyErr_NoMemory();
        goto done;
    }
    step_spans(c, first, last);
    for (int b = 0; b < nb; b++) {
        int tensor = b >= c->ninputs && c->scratch_off[b] < 0 && c->buf_alloc[b] != CDY_BUF_UNUSED;
        born[b] = tensor ? (first[b] < ns ? first[b] : 0) : -1;   /* touched by no step: at 0 */
        drop[b] = tensor && last[b] >= 0 ? last[b] : -1;
    }
    for (int b = 0; b < c->ninputs; b++)   /* donated inputs: after their last step */
        drop[b] = last[b] >= 0 ? last[b] : 0;
    for (int o = 0; o < c->noutputs; o++)
        drop[c->outputs[o]] = -1;
    for (int b = 0; b < nb; b++)   /* made by us: before its first step (extern results: by it) */
        make[b] = c->buf_alloc[b] ? born[b] : -1;
    if (bucket(make, nb, ns + 1, &c->make_at, &c->make_list) ||
        bucket(drop, c->ninputs, ns, &c->in_drop_at, &c->in_drop_list)) {
        PyErr_NoMemory();
        goto done;
    }
    for (int b = 0; b < c->ninputs; b++)
        drop[b] = -1;
    if (bucket(drop, nb, ns, &c->drop_at, &c->drop_list)) {
        PyErr_NoMemory();
        goto done;
    }
    c->peak_bytes = peak_bytes(c, plan, r, born, drop);
    rc = c->peak_bytes < 0 ? -1 : 0;
done:
    PyMem_Free(first);
    PyMem_Free(last);
    PyMem_Free(born);
    PyMem_Free(drop);
    PyMem_Free(make);
    return rc;
}

/* The pynode of extern step s if it is a matmul (step_is_matmul) of two
 * positional graph tensors, b[0] and b[1] their buffers, in a static graph
 * and not an alias; else NULL. */
static const cdy_pynode *matmul_of_two(const cdy_compiled *c, const cdy_run_record *r, int s,
                                       int b[2])
{
    if (!step_is_matmul(c, s) || c->sym || cdy_value_is_alias(&r->graph->values[c->steps[s].index]))
        return NULL;
    const cdy_pynode *p = &c->pynodes[c->pynode_of[c->steps[s].index]];
    if (p->kwnames || p->nargs != 2)
        return NULL;
    for (int a = 0; a < 2; a++) {
        int v = p->ref[a];
        b[a] = v >= 0 && v < r->graph->nvalues ? c->value_buffer[v] : -1;
        if (b[a] < 0)
            return NULL;
    }
    return p;
}

/* 1 if extern step s is a matmul of two graph tensors of at least 2 dims
 * and buffer ob's dtype whose result ob (contiguous, not a view, not empty,
 * static sizes) torch.matmul may write into a tensor given as out=. */
static int matmul_out_fits(const cdy_compiled *c, const cdy_plan *plan, const cdy_run_record *r,
                           int s, int ob)
{
    const cdy_meta *m = &plan->buffers[ob];
    int b[2];
    if (!matmul_of_two(c, r, s, b) || !(c->buf_pool[ob] & BUF_POOL) || !cdy_meta_contiguous(m) ||
        cdy_meta_numel(m) == 0)
        return 0;
    for (int a = 0; a < 2; a++)
        if (plan->buffers[b[a]].dtype != m->dtype || plan->buffers[b[a]].ndim < 2)
            return 0;
    return 1;
}

/* 1 if extern step s making buffer ob is a matmul (torch.matmul, @: not mm
 * or bmm themselves) of two graph tensors, the static graph's only call of
 * that name: its direct form (cdy_mmd_plan) may replace it. */
static int matmul_direct_fits(const cdy_compiled *c, const cdy_run_record *r, int s, int ob)
{
    int b[2];
    const cdy_pynode *p = matmul_of_two(c, r, s, b);
    return p && (p->fn == mm_fns[0] || p->fn == mm_fns[1] || p->fn == mm_fns[4]) && b[0] != ob &&
           b[1] != ob;
}

/* Mark the buffers whose extern is a matmul that may write a pool tensor
 * (BUF_MMOUT: a training step's, runtime/train_call.c TC_STEP), and keep
 * the matmuls' direct forms (c->mmd); 0 or -1 with MemoryError. */
static int plan_matmul_out(cdy_compiled *c, const cdy_plan *plan, const cdy_run_record *r)
{
    c->mmd = PyMem_Calloc((size_t)c->nbuffers + 1, sizeof(PyObject *));
    if (!c->mmd) {
        PyErr_NoMemory();
        return -1;
    }
    for (int s = 0; s < c->nsteps; s++) {
        int ob = c->steps[s].out_buffer;
        if (c->steps[s].kind != CDY_STEP_EXTERN || ob < c->ninputs || ob >= c->nbuffers ||
            c->pynode_of[c->steps[s].index] < 0)
            continue;
        if (matmul_out_fits(c, plan, r, s, ob))
            c->buf_pool[ob] |= BUF_MMOUT;
        if (matmul_direct_fits(c, r, s, ob)) {
            const cdy_pynode *p = &c->pynodes[c->pynode_of[c->steps[s].index]];
            c->mmd[ob] = cdy_mmd_plan(&plan->buffers[c->value_buffer[p->ref[0]]],
                                      &plan->buffers[c->value_buffer[p->ref[1]]],
                                      &plan->buffers[ob]);
        }
    }
    return 0;
}

/* Keep each node's user code and line (add_user_frame); 0 or -1. */
static int copy_where(cdy_compiled *c, const cdy_run_record *r)
{
    c->nwhere = r->graph->nvalues;
    c->where_code = PyMem_Calloc((size_t)c->nwhere + 1, sizeof(PyObject *));
    c->where_line = PyMem_Calloc((size_t)c->nwhere + 1, sizeof(int));
    if (!c->where_code || !c->where_line) {
        PyErr_NoMemory();
        return -1;
    }
    for (int v = 0; v < c->nwhere; v++) {
        const cdy_value *val = &r->graph->values[v];
        if (val->kind == CDY_VAL_NODE && val->source_code && val->source_line > 0) {
            c->where_code[v] = Py_NewRef((PyObject *)val->source_code);
            c->where_line[v] = val->source_line;
        }
    }
    return 0;
}

/* What a call of fn runs (new ref): the C operator an exact
 * torch._ops.OpOverload holds (its __call__ is `self._op(*args, **kwargs)`,
 * a Python frame per call: dropout's torch.ops.aten.bernoulli.p), else fn. */
static PyObject *direct_fn(PyObject *fn)
{
    static PyObject *overload_tp, *s_op;
    static int tried;
    if (!tried) {
        tried = 1;
        PyObject *m = PyImport_ImportModule("torch._ops");
        overload_tp = m ? PyObject_GetAttrString(m, "OpOverload") : NULL;
        s_op = PyUnicode_InternFromString("_op");
        Py_XDECREF(m);
        PyErr_Clear();
    }
    if (!overload_tp || !s_op || (PyObject *)Py_TYPE(fn) != overload_tp)
        return Py_NewRef(fn);
    PyObject *op = PyObject_GetAttr(fn, s_op);
    if (op && PyCallable_Check(op))
        return op;
    Py_XDECREF(op);
    PyErr_Clear();
    return Py_NewRef(fn);
}

/* Copy the trace's calls (pynodes) into c, owning the arrays; 0 or -1. */
static int copy_pynodes(cdy_compiled *c, const cdy_run_record *r)
{
    c->npynodes = r->npynodes;
    c->keep = Py_NewRef(r->keep);
    c->pynodes = PyMem_Calloc((size_t)c->npynodes + 1, sizeof(cdy_pynode));
    c->call_fn = PyMem_Calloc((size_t)c->npynodes + 1, sizeof(PyObject *));
    c->pynode_of = PyMem_Calloc((size_t)r->graph->nvalues + 1, sizeof(int));
    if (!c->pynodes || !c->call_fn || !c->pynode_of)
        goto oom;
    for (int v = 0; v < r->graph->nvalues; v++)
        c->pynode_of[v] = -1;
    for (int n = 0; n < c->npynodes; n++) {
        const cdy_pynode *s = &r->pynodes[n];
        cdy_pynode *d = &c->pynodes[n];
        *d = *s;
        c->uses_rng |= cdy_pynode_draws_rng(s);   /* 0 for an item of a multi-output call */
        c->call_fn[n] = s->fn ? direct_fn(s->fn) : NULL;
        d->ref = PyMem_Calloc((size_t)s->nargs + 1, sizeof(int));
        d->cst = PyMem_Calloc((size_t)s->nargs + 1, sizeof(PyObject *));
        if (!d->ref || !d->cst)
            goto oom;
        memcpy(d->ref, s->ref, sizeof(int) * (size_t)s->nargs);
        memcpy(d->cst, s->cst, sizeof(PyObject *) * (size_t)s->nargs);
        d->seq = PyMem_Calloc((size_t)s->nargs + 1, sizeof(cdy_pyseq));
        if (!d->seq)
            goto oom;
        for (int a = 0; a < s->nargs; a++) {
            if (s->ref[a] != -2)
                continue;
            cdy_pyseq *q = &d->seq[a];
            *q = s->seq[a];
            q->ref = PyMem_Calloc((size_t)q->n + 1, sizeof(int));
            q->cst = PyMem_Calloc((size_t)q->n + 1, sizeof(PyObject *));
            if (!q->ref || !q->cst)
                goto oom;
            memcpy(q->ref, s->seq[a].ref, sizeof(int) * (size_t)q->n);
            memcpy(q->cst, s->seq[a].cst, sizeof(PyObject *) * (size_t)q->n);
        }
        if (s->value >= 0)
            c->pynode_of[s->value] = n;
        else
            c->multi = 1;
    }
    return 0;
oom:
    PyErr_NoMemory();
    return -1;
}

/* Copy r's mutated inputs (writeback pairs), the inputs' byte spans and
 * the outputs that view mutated inputs; 0 or -1. */
static int copy_writeback(cdy_compiled *c, const cdy_run_record *r)
{
    if (r->nreview) {
        if (!(c->rv = PyMem_Calloc((size_t)r->nreview, sizeof(cdy_review)))) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(c->rv, r->review, sizeof(cdy_review) * (size_t)r->nreview);
        c->nrv = r->nreview;
    }
    if (!r->nwriteback)
        return 0;
    c->nwb = r->nwriteback;
    c->wb = PyMem_Calloc((size_t)(2 * c->nwb), sizeof(int));
    c->in_bytes = PyMem_Calloc((size_t)c->ninputs + 1, sizeof(int64_t));
    if (!c->wb || !c->in_bytes) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(c->wb, r->writeback, sizeof(int) * (size_t)(2 * c->nwb));
    for (int v = 0; v < r->graph->nvalues; v++) {
        const cdy_value *val = &r->graph->values[v];
        if (val->kind != CDY_VAL_INPUT || val->input_index >= c->ninputs)
            continue;
        int64_t span = 1;
        for (int d = 0; d < val->meta.ndim; d++) {
            int64_t st = val->meta.strides[d] < 0 ? -val->meta.strides[d] : val->meta.strides[d];
            span = val->meta.sizes[d] == 0 ? 0 : span ? span + (val->meta.sizes[d] - 1) * st : 0;
        }
        c->in_bytes[val->input_index] = span * cdy_dtype_table[val->meta.dtype].size;
    }
    return 0;
}

/* The C-backend callable for plan, loading so_path (NULL: no kernels) and
 * calling r's extern nodes through torch.  New ref or NULL. */
PyObject *cdy_compiled_from_plan(const cdy_plan *plan, const char *so_path, const char *name,
                                 int single, const cdy_run_record *r)
{
    return cdy_compiled_from_plan_sym(plan, so_path, name, single, r, NULL);
}

/* Symbolic graphs: take *sym (zeroed) and the buffers' and inputs' values; 0 or -1. */
static int sym_take(cdy_compiled *c, const cdy_plan *plan, const cdy_run_record *r,
                    cdy_sym_shapes *sym)
{
    c->sym = PyMem_Malloc(sizeof(*sym));
    c->buf_value = PyMem_Malloc(sizeof(int) * ((size_t)plan->nbuffers + 1));
    c->in_value = PyMem_Malloc(sizeof(int) * ((size_t)plan->ninputs + 1));
    c->in_meta = PyMem_Calloc((size_t)plan->ninputs + 1, sizeof(cdy_meta));
    c->sym_bmeta = PyMem_Calloc((size_t)plan->nbuffers + 1, sizeof(cdy_meta));
    c->sym_imeta = PyMem_Calloc((size_t)plan->ninputs + 1, sizeof(cdy_meta));
    c->sym_inumel = PyMem_Calloc((size_t)plan->ninputs + 1, sizeof(int64_t));
    c->sym_soff = PyMem_Calloc((size_t)plan->nbuffers + 1, sizeof(int64_t));
    if (!c->sym || !c->buf_value || !c->in_value || !c->in_meta || !c->sym_bmeta ||
        !c->sym_imeta || !c->sym_inumel || !c->sym_soff) {
        PyMem_Free(c->sym);
        c->sym = NULL;
        PyErr_NoMemory();
        return -1;
    }
    *c->sym = *sym;
    memset(sym, 0, sizeof(*sym));
    c->sym_live = cdy_sym_live(c->sym);
    for (int b = 0; b < plan->nbuffers; b++)
        c->buf_value[b] = -1;
    for (int i = 0; i < plan->ninputs; i++)
        c->in_value[i] = -1;
    for (int v = 0; v < plan->nvalues && v < c->sym->nvalues; v++) {
        const cdy_value *val = &r->graph->values[v];
        int64_t k;
        int symbolic = 0;
        for (int d = 0; d < val->meta.ndim; d++)
            symbolic |= !cdy_sym_is_const(&c->sym->tab, c->sym->dims[v][d], &k);
        if (plan->value_buffer[v] >= 0 && symbolic)
            c->buf_value[plan->value_buffer[v]] = v;
        /* an input of static sizes is read per call no more than a static graph's: the
         * entry's guards check it */
        if (val->kind == CDY_VAL_INPUT && val->input_index < plan->ninputs && symbolic) {
            c->in_value[val->input_index] = v;
            c->in_meta[val->input_index] = val->meta;
        }
    }
    return 0;
}

PyObject *cdy_compiled_from_plan_sym(const cdy_plan *plan, const char *so_path, const char *name,
                                     int single, const cdy_run_record *r, cdy_sym_shapes *sym)
{
    cdy_compiled *c = compiled_new(name, single);
    if (!c)
        return NULL;
    if (sym && sym_take(c, plan, r, sym))
        goto fail;
    c->dl = so_path ? dlopen(so_path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (so_path && !c->dl) {
        const char *e = dlerror();
        PyErr_Format(PyExc_OSError, "dlopen failed: %s", e ? e : so_path);
        goto fail;
    }
    c->ninputs = plan->ninputs;
    c->nvalues = plan->nvalues;
    c->nbuffers = plan->nbuffers;
    c->noutputs = plan->noutputs;
    c->nkernels = plan->nkernels;
    c->outputs = PyMem_Calloc((size_t)plan->noutputs + 1, sizeof(int));
    c->kernels = PyMem_Calloc((size_t)plan->nkernels + 1, sizeof(rt_kernel));
    c->buf_meta = PyMem_Calloc((size_t)plan->nbuffers + 1, sizeof(PyObject *));
    c->buf_tmpl = PyMem_Calloc((size_t)plan->nbuffers + 1, sizeof(PyObject *));
    c->buf_alloc = PyMem_Calloc((size_t)plan->nbuffers + 1, 1);
    c->buf_cmeta = PyMem_Calloc((size_t)plan->nbuffers + 1, sizeof(cdy_meta));
    c->buf_pool = PyMem_Calloc((size_t)plan->nbuffers + 1, 1);
    c->nsteps = plan->nsteps;
    c->steps = PyMem_Calloc((size_t)plan->nsteps + 1, sizeof(cdy_step));
    c->value_buffer = PyMem_Calloc((size_t)plan->nvalues + 1, sizeof(int));
    if (!c->outputs || !c->kernels || !c->buf_meta || !c->buf_tmpl || !c->buf_alloc ||
        !c->buf_cmeta || !c->buf_pool || !c->steps || !c->value_buffer) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(c->outputs, plan->outputs, sizeof(int) * (size_t)plan->noutputs);
    memcpy(c->steps, plan->steps, sizeof(cdy_step) * (size_t)plan->nsteps);
    memcpy(c->value_buffer, plan->value_buffer, sizeof(int) * (size_t)plan->nvalues);
    memcpy(c->buf_alloc, plan->buffer_alloc, (size_t)plan->nbuffers);
    for (int k = 0; k < plan->nkernels; k++)
        if (load_kernel(c, plan, k))
            goto fail;
    for (int b = plan->ninputs; b < plan->nbuffers; b++) {
        if (prepare_meta(c, &plan->buffers[b], b))
            goto fail;
        c->buf_cmeta[b] = plan->buffers[b];
        c->buf_pool[b] = BUF_POOL;
        for (int d = 0; d < plan->buffers[b].ndim; d++)
            c->buf_pool[b] &= plan->buffers[b].strides[d] >= 0;
    }
    if (copy_pynodes(c, r) || copy_where(c, r) || plan_scratch(c, plan) || copy_writeback(c, r) ||
        plan_share(c, plan) || plan_lifetimes(c, plan, r) || copy_kir(c, plan, r))
        goto fail;
    if (plan_matmul_out(c, plan, r))
        goto fail;
    for (int b = plan->ninputs; !c->sym && !empty_fast && b < plan->nbuffers; b++)
        if (c->buf_alloc[b] == 1 && c->scratch_off[b] < 0)
            c->buf_tmpl[b] = make_template(c, &plan->buffers[b], b);
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

/* The eager-backend callable replaying r's calls.  New ref or NULL. */
PyObject *cdy_compiled_eager(const cdy_run_record *r, const char *name, int single)
{
    cdy_compiled *c = compiled_new(name, single);
    if (!c)
        return NULL;
    c->eager = 1;
    c->ninputs = r->graph->ninputs;
    c->nvalues = r->graph->nvalues;
    c->noutputs = r->graph->noutputs;
    if (copy_pynodes(c, r) || copy_where(c, r) || copy_writeback(c, r))
        goto fail;
    c->outputs = PyMem_Calloc((size_t)c->noutputs + 1, sizeof(int));
    c->value_input = PyMem_Calloc((size_t)c->nvalues + 1, sizeof(int));
    if (!c->outputs || !c->value_input)
        goto oom;
    memcpy(c->outputs, r->graph->outputs, sizeof(int) * (size_t)c->noutputs);
    for (int v = 0; v < c->nvalues; v++) {
        const cdy_value *val = &r->graph->values[v];
        c->value_input[v] = val->kind == CDY_VAL_INPUT ? val->input_index : -1;
    }
    c->vectorcall = run_eager;
    return (PyObject *)c;
oom:
    PyErr_NoMemory();
fail:
    Py_DECREF(c);
    return NULL;
}
