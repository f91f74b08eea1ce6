/* mempool.c - the tensors a compiled graph makes, from a pool of blocks.
 *
 * torch.empty_like called through the Python API costs 0.7-0.9 us per
 * tensor (argument parsing, dispatch); a glibc allocation of many MB is
 * mmap()ed and page-faulted again on every call once eager's frees have
 * trimmed the heap.  Here a graph's tensor is a block of our own memory,
 * handed to torch through the DLPack exchange API that torch publishes for
 * C consumers (torch.Tensor.__dlpack_c_exchange_api__: a capsule holding a
 * table of C functions; managed_tensor_to_py_object_no_sync wraps a
 * DLManagedTensorVersioned as a torch.Tensor, about 0.25 us).  When torch
 * frees the tensor's storage it calls the block's deleter, which puts the
 * block back on its size class's free list, so the next call reuses memory
 * that is already mapped.  The free lists hold at most cdy_mempool_limit
 * bytes (cdynamo.config.output_pool_mb); a block over that is freed.
 *
 * A storage torch makes from DLPack cannot grow (resize_ to more elements
 * raises "not resizable"); a pool tensor's can, as empty_like's: its
 * storage is marked resizable with torch's CPU allocator (mp_grow), so a
 * resize_ / out= that needs more bytes takes them from torch's allocator,
 * copies, and drops the block's DataPtr, whose deleter puts the block back.
 * torch has no C entry that sets these two fields: they are written at
 * the offsets c10/core/StorageImpl.h gives them, which mp_grow_init checks
 * at import on a torch tensor and a pool tensor (data pointer, size,
 * resizable flag, allocator all where expected, else growing stays off and
 * the error stays).  A tensor of no elements is torch's own
 * (cdy_mempool_takes).  output_pool_mb = 0 turns the pool off.
 *
 * The deleter may run on any thread, with or without the GIL: the lists
 * are guarded by a mutex of their own.  Only the DLPack 1.x ABI is used;
 * its structs are declared below from the DLPack specification.          */
#include "runtime/runtime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

/* ---- the DLPack 1.x ABI (dlpack.h, major version 1) ---------------------- */
typedef struct { uint32_t major, minor; } dl_version;
typedef struct { int32_t device_type, device_id; } dl_device;
typedef struct { uint8_t code, bits; uint16_t lanes; } dl_dtype;
typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} dl_tensor;
typedef struct dl_managed {
    dl_version version;
    void *manager_ctx;
    void (*deleter)(struct dl_managed *self);
    uint64_t flags;
    dl_tensor dl_tensor;
} dl_managed;
typedef struct dl_api_header {
    dl_version version;
    struct dl_api_header *prev_api;
} dl_api_header;
typedef struct {
    dl_api_header header;
    void *managed_tensor_allocator;
    void *managed_tensor_from_py_object_no_sync;
    int (*managed_tensor_to_py_object_no_sync)(dl_managed *tensor, void **out_py_object);
    int (*dltensor_from_py_object_no_sync)(void *py_object, dl_tensor *out);
    void *current_work_stream;
} dl_exchange_api;

enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_BOOL = 6, DL_CPU = 1 };

/* ---- blocks ------------------------------------------------------------------ */
#define MP_ALIGN 64          /* torch's CPU allocator alignment */
#define MP_CLASSES 256       /* size classes: 64 B, then 4 per power of two */
/* A block of at least MP_PAGE_MIN data bytes has its data in an allocation of
 * its own, starting on a page; from MP_HUGE on, on a 2 MB boundary, with the
 * kernel asked for transparent huge pages (madvise: the mode distributions
 * ship).  gelu(layer_norm(x)) of 4096x1024 floats, its kernel writing a 16 MB
 * output: 1.15 ms at page offset 0, 1.19 ms at offset 320 (the data after
 * the block's header), 1.13 ms in huge pages (a Zen 4, a C harness). */
#define MP_PAGE_MIN ((size_t)64 << 10)
#define MP_PAGE 4096
#define MP_HUGE ((size_t)2 << 20)

typedef struct mp_block {
    dl_managed mt;           /* first: the deleter gets &mt */
    int64_t shape[CDY_MAX_NDIM], strides[CDY_MAX_NDIM];
    struct mp_block *next;   /* free list link */
    void *data;              /* after the header, or its own allocation (MP_PAGE_MIN) */
    size_t cap;              /* data bytes the block holds */
    int cls;
    int train;               /* taken by a training graph (cdy_mempool_train): its free list */
} mp_block;

#define MP_HEADER ((sizeof(mp_block) + MP_ALIGN - 1) & ~(size_t)(MP_ALIGN - 1))

static const dl_exchange_api *api;          /* NULL: torch has no exchange API */
/* Reading a tensor's data pointer and meta without Python calls
 * (cdy_mempool_read): torch's dltensor_from_py_object_no_sync, and the exact
 * types it is used on (torch.Tensor, torch.nn.Parameter: no subclass that
 * could define shape or stride in Python); NULL: not available. */
static int (*mp_dl_read)(void *py_object, dl_tensor *out);
static PyTypeObject *mp_read_types[2];
static uint32_t mp_dl_keys[CDY_DT_COUNT];   /* mp_dl_key of each cdynamo dtype's DLPack type */
static pthread_mutex_t mp_lock = PTHREAD_MUTEX_INITIALIZER;
/* Free lists: [0] blocks last taken by inference graphs, [1] by training
 * graphs (cdy_mempool_train), which cdy_mempool_trim_train empties. */
static mp_block *mp_free[2][MP_CLASSES];
static int64_t mp_limit = (int64_t)256 << 20;
static int64_t mp_cached;                   /* bytes on the free lists */
static int64_t mp_cached_train;             /* of those, on the training lists */
static int64_t mp_held, mp_peak;            /* bytes of all blocks (live and free), their maximum */
static long long mp_hits, mp_misses, mp_live;

/* Size class of n data bytes and its capacity in *cap. */
static int mp_class(size_t n, size_t *cap)
{
    if (n <= MP_ALIGN) {
        *cap = MP_ALIGN;
        return 0;
    }
    int e = 63 - __builtin_clzll((unsigned long long)(n - 1));   /* 2^e < n <= 2^(e+1) */
    size_t step = (size_t)1 << (e - 2);
    size_t q = (n - ((size_t)1 << e) + step - 1) / step;          /* 1..4 */
    *cap = (((size_t)1 << e) + q * step + MP_ALIGN - 1) & ~(size_t)(MP_ALIGN - 1);
    return (e - 6) * 4 + (int)q;
}

/* DLPack type of cdynamo dtype d. */
static dl_dtype mp_dltype(int d)
{
    const cdy_dtype_info *i = &cdy_dtype_table[d];
    dl_dtype t = {DL_INT, (uint8_t)(8 * i->size), 1};
    if (d == CDY_DT_BFLOAT16)
        t.code = DL_BFLOAT;
    else if (i->is_float)
        t.code = DL_FLOAT;
    else if (!i->is_int)
        t.code = DL_BOOL;
    else if (d == CDY_DT_UINT8)
        t.code = DL_UINT;
    return t;
}

/* n rounded up to a multiple of a (a power of two): aligned_alloc's size
 * must be a multiple of its alignment (C11; glibc lets it pass,
 * AddressSanitizer aborts). */
static size_t mp_round(size_t n, size_t a)
{
    return (n + a - 1) & ~(a - 1);
}

/* A new block of capacity cap (class cls); NULL if out of memory. */
static mp_block *mp_new(int cls, size_t cap)
{
    mp_block *b;
    if (cap < MP_PAGE_MIN) {
        if (!(b = aligned_alloc(MP_ALIGN, mp_round(MP_HEADER + cap, MP_ALIGN))))
            return NULL;
        b->data = (char *)b + MP_HEADER;
    } else {
        size_t align = cap >= MP_HUGE ? MP_HUGE : MP_PAGE;
        if (!(b = malloc(sizeof *b)))
            return NULL;
        if (!(b->data = aligned_alloc(align, mp_round(cap, align)))) {
            free(b);
            return NULL;
        }
#ifdef MADV_HUGEPAGE
        if (align == MP_HUGE)
            madvise(b->data, cap & ~(MP_HUGE - 1), MADV_HUGEPAGE);   /* a hint: failure is harmless */
#endif
    }
    b->cap = cap;
    b->cls = cls;
    return b;
}

/* Free block b and its data (an allocation of its own from MP_PAGE_MIN on). */
static void mp_free_block(mp_block *b)
{
    if (b->cap >= MP_PAGE_MIN)
        free(b->data);
    free(b);
}

/* Deleter torch calls when the tensor's storage dies: back to the free list. */
static void mp_release(dl_managed *mt)
{
    mp_block *b = (mp_block *)mt;
    pthread_mutex_lock(&mp_lock);
    mp_live--;
    int keep = b->cls < MP_CLASSES && mp_cached + (int64_t)b->cap <= mp_limit;
    if (keep) {
        b->next = mp_free[b->train][b->cls];
        mp_free[b->train][b->cls] = b;
        mp_cached += (int64_t)b->cap;
        mp_cached_train += b->train ? (int64_t)b->cap : 0;
    } else {
        mp_held -= (int64_t)b->cap;
    }
    pthread_mutex_unlock(&mp_lock);
    if (!keep)
        mp_free_block(b);
}

/* The first block of free list [k][cls], unlinked; NULL if empty.  Lock held. */
static mp_block *mp_pop(int k, int cls)
{
    mp_block *b = mp_free[k][cls];
    if (b) {
        mp_free[k][cls] = b->next;
        mp_cached -= (int64_t)b->cap;
        mp_cached_train -= k ? (int64_t)b->cap : 0;
    }
    return b;
}

_Thread_local int cdy_mempool_train;

/* A block of class cls (capacity cap): from the free lists (this kind's
 * first), else new; NULL if out of memory. */
static mp_block *mp_take(int cls, size_t cap)
{
    int k = cdy_mempool_train != 0;
    pthread_mutex_lock(&mp_lock);
    mp_block *b = cls < MP_CLASSES ? mp_pop(k, cls) : NULL;
    if (!b && cls < MP_CLASSES)
        b = mp_pop(!k, cls);
    if (b) {
        b->train = k;
        mp_hits++;
    } else {
        mp_misses++;
    }
    mp_live++;
    pthread_mutex_unlock(&mp_lock);
    if (b)
        return b;
    b = mp_new(cls, cap);
    pthread_mutex_lock(&mp_lock);
    if (b) {
        b->train = k;
        mp_held += (int64_t)cap;
        mp_peak = mp_held > mp_peak ? mp_held : mp_peak;
    } else {
        mp_live--;
    }
    pthread_mutex_unlock(&mp_lock);
    return b;
}

/* Free cached blocks of the lists k0..1, largest first, while they hold more
 * than limit bytes (k0 = 0: all lists; 1: the training lists). */
static void mp_trim_from(int k0, int64_t limit)
{
    mp_block *drop = NULL;
    pthread_mutex_lock(&mp_lock);
    for (int k = 1; k >= k0; k--)
        for (int c = MP_CLASSES - 1; c >= 0; c--) {
            mp_block *b;
            while ((k0 ? mp_cached_train : mp_cached) > limit && (b = mp_pop(k, c))) {
                mp_held -= (int64_t)b->cap;
                b->next = drop;
                drop = b;
            }
        }
    pthread_mutex_unlock(&mp_lock);
    while (drop) {
        mp_block *n = drop->next;
        mp_free_block(drop);
        drop = n;
    }
}

/* Free every cached block while the lists hold more than limit bytes. */
static void mp_trim(int64_t limit)
{
    mp_trim_from(0, limit);
}

/* See runtime.h. */
void cdy_mempool_trim_train(void)
{
    mp_trim_from(1, 0);
}

static void mp_read_init(PyObject *torch, PyTypeObject *tensor);

/* ---- growing: a pool tensor's storage resizable, as torch's own ------------- */
/* Byte offsets in torch's objects (torch/csrc/autograd/python_variable.h,
 * c10/core/TensorImpl.h, c10/core/StorageImpl.h; 64-bit): THPVariable's
 * at::Tensor after PyObject_HEAD; TensorImpl's storage_ after the
 * intrusive_ptr_target (vtable, counts); StorageImpl's data_ptr_ (data,
 * deleter, context, device), size_bytes_, the resizable_ flag after
 * size_bytes_is_heap_allocated_, allocator_ after the flags and
 * materialize_fn_.  mp_grow_init checks them all. */
#define MP_VAR_IMPL sizeof(PyObject)
enum { MP_TI_STORAGE = 16, MP_SI_DATA = 16, MP_SI_BYTES = 48,
       MP_SI_HEAP = 56, MP_SI_RESIZABLE = 57, MP_SI_ALLOC = 72 };
static void *mp_grow;       /* torch's CPU allocator; NULL: pool tensors do not grow */

/* StorageImpl of tensor object obj (a THPVariable). */
static char *mp_storage_of(PyObject *obj)
{
    char *impl = *(char **)((char *)obj + MP_VAR_IMPL);
    return impl ? *(char **)(impl + MP_TI_STORAGE) : NULL;
}

/* Whether tensor obj's StorageImpl is where MP_TI_STORAGE says (the one
 * obj.untyped_storage()._cdata names: nothing else is read before that
 * holds) and holds data (bytes long), resizable flag r, allocator a. */
static int mp_grow_matches(PyObject *obj, void *data, int64_t bytes, int r, void *a)
{
    PyObject *s = PyObject_CallMethod(obj, "untyped_storage", NULL);
    PyObject *c = s ? PyObject_GetAttrString(s, "_cdata") : NULL;
    void *want = c && PyLong_Check(c) ? PyLong_AsVoidPtr(c) : NULL;
    Py_XDECREF(c);
    Py_XDECREF(s);
    PyErr_Clear();
    char *st = want ? mp_storage_of(obj) : NULL;
    return st && st == want && *(void **)(st + MP_SI_DATA) == data && *(int64_t *)(st + MP_SI_BYTES) == bytes &&
           st[MP_SI_HEAP] == 0 && st[MP_SI_RESIZABLE] == r && *(void **)(st + MP_SI_ALLOC) == a;
}

/* Mark pool tensor obj's storage (data pointer data) resizable with torch's
 * CPU allocator; a storage not laid out as checked is left alone. */
static void mp_make_growable(PyObject *obj, void *data)
{
    char *st = mp_storage_of(obj);
    if (st && *(void **)(st + MP_SI_DATA) == data) {
        *(void **)(st + MP_SI_ALLOC) = mp_grow;
        st[MP_SI_RESIZABLE] = 1;
    }
}

/* torch's CPU allocator (c10::GetCPUAllocator in the loaded libc10), or NULL. */
static void *mp_cpu_allocator(void)
{
    void *h = dlopen("libc10.so", RTLD_LAZY | RTLD_NOLOAD);
    void *(*get)(void) = NULL;
    if (h)
        *(void **)&get = dlsym(h, "_ZN3c1015GetCPUAllocatorEv");
    (void)dlerror();
    return get ? get() : NULL;   /* h stays open: libc10 lives as long as the process */
}

/* Turn growing on if a torch tensor's storage and a pool tensor's have the
 * layout the offsets say (torch.empty: resizable, the CPU allocator; a pool
 * block: neither); the probe's block is freed and the counters start at 0. */
static void mp_grow_init(PyObject *torch)
{
    void *a = mp_cpu_allocator(), *data = NULL, *pdata = NULL;
    cdy_meta m = {.ndim = 1, .dtype = CDY_DT_FLOAT32, .sizes = {16}, .strides = {1}};
    PyObject *t = a && mp_dl_read ? PyObject_CallMethod(torch, "empty", "i", 16) : NULL;
    PyObject *p = t && cdy_mempool_read(t, NULL, &data) ? cdy_mempool_tensor(&m, &pdata) : NULL;
    if (p && Py_TYPE(p) == Py_TYPE(t) && mp_grow_matches(t, data, 64, 1, a) &&
        mp_grow_matches(p, pdata, 64, 0, NULL))
        mp_grow = a;
    Py_XDECREF(p);
    Py_XDECREF(t);
    PyErr_Clear();
    mp_trim(0);
    pthread_mutex_lock(&mp_lock);
    mp_hits = mp_misses = 0;
    mp_peak = mp_held;
    pthread_mutex_unlock(&mp_lock);
}

/* DLPack type t as one number (code, bits, lanes). */
static uint32_t mp_dl_key(dl_dtype t)
{
    return (uint32_t)t.code << 24 | (uint32_t)t.bits << 16 | t.lanes;
}

/* Find torch's exchange API; without one (older torch) the pool stays off.  0. */
int cdy_mempool_init(PyObject *torch)
{
    PyObject *tensor = PyObject_GetAttrString(torch, "Tensor");
    PyObject *cap = tensor ? PyObject_GetAttrString(tensor, "__dlpack_c_exchange_api__") : NULL;
    const dl_exchange_api *a =
        cap && PyCapsule_CheckExact(cap) ? PyCapsule_GetPointer(cap, "dlpack_exchange_api") : NULL;
    if (a && a->header.version.major == 1 && a->managed_tensor_to_py_object_no_sync)
        api = a;   /* torch keeps the table alive for the process */
    if (api && api->dltensor_from_py_object_no_sync && tensor && PyType_Check(tensor))
        mp_read_init(torch, (PyTypeObject *)tensor);
    if (api)
        mp_grow_init(torch);
    Py_XDECREF(cap);
    Py_XDECREF(tensor);
    PyErr_Clear();
    return 0;
}

/* Turn cdy_mempool_read on for torch.Tensor (tensor) and torch.nn.Parameter
 * (the types are kept alive: torch holds them for the process). */
static void mp_read_init(PyObject *torch, PyTypeObject *tensor)
{
    PyObject *nn = PyObject_GetAttrString(torch, "nn");
    PyObject *param = nn ? PyObject_GetAttrString(nn, "Parameter") : NULL;
    mp_read_types[0] = tensor;
    mp_read_types[1] = param && PyType_Check(param) ? (PyTypeObject *)param : tensor;
    for (int d = 0; d < CDY_DT_COUNT; d++)
        mp_dl_keys[d] = mp_dl_key(mp_dltype(d));
    mp_dl_read = api->dltensor_from_py_object_no_sync;
    Py_XDECREF(param);
    Py_XDECREF(nn);
    PyErr_Clear();
}

/* cdynamo dtype of DLPack type t, or -1 (none of ours). */
static int mp_cdy_dtype(dl_dtype t)
{
    uint32_t key = mp_dl_key(t);
    for (int d = 0; d < CDY_DT_COUNT; d++)
        if (mp_dl_keys[d] == key)
            return d;
    return -1;
}

/* See runtime.h. */
int cdy_mempool_read(PyObject *x, cdy_meta *m, void **data)
{
    PyTypeObject *tp = Py_TYPE(x);
    dl_tensor t;
    if (!mp_dl_read || (tp != mp_read_types[0] && tp != mp_read_types[1]))
        return 0;
    if (mp_dl_read(x, &t)) {
        PyErr_Clear();
        return 0;
    }
    if (t.device.device_type != DL_CPU || t.ndim < 0 || t.ndim > CDY_MAX_NDIM)
        return 0;
    *data = t.data ? t.data : (void *)(uintptr_t)1;   /* zero-size tensors may have no storage */
    if (!m)
        return 1;
    m->ndim = t.ndim;
    m->dtype = mp_cdy_dtype(t.dtype);
    for (int d = 0; d < t.ndim; d++) {
        m->sizes[d] = t.shape[d];
        m->strides[d] = t.strides[d];
    }
    return 1;
}

/* Whether cdy_mempool_tensor may be used. */
_Thread_local int64_t cdy_mempool_bypass;

int cdy_mempool_on(void)
{
    return api && mp_limit > 0;
}

int cdy_mempool_takes(const cdy_meta *m)
{
    int64_t n = cdy_mempool_extent(m);
    return cdy_mempool_on() && n > 0 &&
           (!cdy_mempool_bypass || n * cdy_dtype_table[m->dtype].size < cdy_mempool_bypass);
}

/* Elements that meta m's strides span (0 for no elements); strides must be >= 0. */
int64_t cdy_mempool_extent(const cdy_meta *m)
{
    int64_t extent = 1;
    for (int d = 0; d < m->ndim; d++) {
        if (m->sizes[d] == 0)
            return 0;
        extent += (m->sizes[d] - 1) * m->strides[d];
    }
    return extent;
}

/* A new tensor of meta m (strides >= 0) in a pool block, its data pointer in
 * *data; NULL with error set. */
PyObject *cdy_mempool_tensor(const cdy_meta *m, void **data)
{
    size_t cap, bytes = (size_t)cdy_mempool_extent(m) * (size_t)cdy_dtype_table[m->dtype].size;
    int cls = mp_class(bytes, &cap);
    mp_block *b = mp_take(cls, cap);
    if (!b)
        return PyErr_NoMemory();
    memset(&b->mt, 0, sizeof b->mt);
    b->mt.version.major = 1;
    b->mt.deleter = mp_release;
    dl_tensor *t = &b->mt.dl_tensor;
    t->data = b->data;
    t->device.device_type = DL_CPU;
    t->ndim = m->ndim;
    t->dtype = mp_dltype(m->dtype);
    memcpy(b->shape, m->sizes, sizeof(int64_t) * (size_t)m->ndim);
    memcpy(b->strides, m->strides, sizeof(int64_t) * (size_t)m->ndim);
    t->shape = b->shape;
    t->strides = b->strides;
    void *obj = NULL;
    if (api->managed_tensor_to_py_object_no_sync(&b->mt, &obj))
        return NULL;   /* torch raised; whether it called the deleter is unknown: the block is left */
    if (mp_grow)
        mp_make_growable(obj, t->data);
    *data = t->data;
    return obj;
}

/* _C.set_output_pool_bytes(n): cache at most n bytes of free blocks (0: no pool). */
PyObject *cdy_mempool_py_set_limit(PyObject *self, PyObject *arg)
{
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "output pool size must be >= 0");
        return NULL;
    }
    pthread_mutex_lock(&mp_lock);
    mp_limit = n;
    pthread_mutex_unlock(&mp_lock);
    mp_trim(n);
    Py_RETURN_NONE;
}

/* _C.set_heap_keep(n): glibc's malloc keeps up to n bytes of freed memory at
 * the top of its heap mapped (M_TRIM_THRESHOLD) and serves allocations up to
 * MP_HEAP_MMAP_MAX bytes from the heap (M_MMAP_THRESHOLD: a fixed threshold,
 * where glibc's dynamic one follows the largest block freed and its trim
 * threshold twice that).  A training step frees its gradients and activations
 * at the top of the heap; glibc then trims them and the next step faults every
 * page in again (transformer_stack_train: ~2000 minor faults a step).  True,
 * or False where the C library is not glibc.  One-way for the process: glibc
 * has no call that brings its dynamic thresholds back. */
#define MP_HEAP_MMAP_MAX ((long long)32 << 20)   /* glibc's largest M_MMAP_THRESHOLD (64-bit) */
PyObject *cdy_mempool_py_heap_keep(PyObject *self, PyObject *arg)
{
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0 || n > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "set_heap_keep: bytes in [0, 2**31)");
        return NULL;
    }
#ifdef __GLIBC__
    if (mallopt(M_MMAP_THRESHOLD, (int)MP_HEAP_MMAP_MAX) == 1 &&
        mallopt(M_TRIM_THRESHOLD, (int)n) == 1)
        Py_RETURN_TRUE;
#endif
    Py_RETURN_FALSE;
}

/* _C.output_pool_stats() -> dict: enabled, hits, misses, live blocks, cached bytes, limit,
 * held bytes (all blocks, live and cached) and their high-water mark since the last reset,
 * cached bytes on the training lists, whether pool tensors grow (mp_grow_init). */
PyObject *cdy_mempool_py_stats(PyObject *self, PyObject *unused)
{
    pthread_mutex_lock(&mp_lock);
    long long h = mp_hits, mi = mp_misses, live = mp_live, cached = mp_cached, lim = mp_limit;
    long long held = mp_held, peak = mp_peak, train = mp_cached_train;
    pthread_mutex_unlock(&mp_lock);
    return Py_BuildValue("{s:O,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:O}", "enabled",
                         cdy_mempool_on() ? Py_True : Py_False, "hits", h, "misses", mi, "live", live,
                         "cached_bytes", cached, "limit_bytes", lim, "held_bytes", held,
                         "peak_bytes", peak, "train_cached_bytes", train, "growable",
                         mp_grow ? Py_True : Py_False);
}

/* _C.reset_output_pool_peak(): the high-water mark of held bytes starts again at the
 * bytes held now (the bench's peak memory of a step). */
PyObject *cdy_mempool_py_reset_peak(PyObject *self, PyObject *unused)
{
    pthread_mutex_lock(&mp_lock);
    mp_peak = mp_held;
    pthread_mutex_unlock(&mp_lock);
    Py_RETURN_NONE;
}

/* _C.clear_output_pool(): free the cached blocks and zero the hit counters. */
PyObject *cdy_mempool_py_clear(PyObject *self, PyObject *unused)
{
    mp_trim(0);
    pthread_mutex_lock(&mp_lock);
    mp_hits = mp_misses = 0;
    pthread_mutex_unlock(&mp_lock);
    Py_RETURN_NONE;
}
