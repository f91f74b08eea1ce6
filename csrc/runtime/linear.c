/* linear.c - PackedLinear: a linear layer whose weight is kept packed.
 *
 * For every call, torch's linear (MKL's sgemm) copies the weight into its
 * blocked panel layout before multiplying: with few rows (a T5 layer on 32
 * tokens) that copy costs as much as the product.  A PackedLinear is the
 * extern of one graph node linear(x, w, b) (passes/linear.c): it keeps
 * w packed in oneDNN's layout (torch.ops.mkldnn._reorder_linear_weight) and
 * multiplies with torch.ops.mkldnn._linear_pointwise.
 *
 * The pack is reused while the call's weight is the same tensor object, at
 * the same data pointer, with the same version counter (an in-place update,
 * `w.data = ...`, a load_state_dict repack it); a weight that is new on
 * PLIN_GIVE_UP calls in a row (an argument rather than a parameter) goes
 * back to torch's linear.  Which of the two is faster depends on the shape
 * and the machine, so the first call of each (rows, in, out, bias, threads,
 * relu) times both on the call's own tensors (plin_decide) and the
 * choice is kept for the process (cdynamo.config.pack_linear_weights =
 * "always" skips the timing).  The tracer uses it only with grad mode off.
 * stats() counts packed_linear_calls and weight_packs.
 *
 * A relu read only by the linear's result becomes part of it (passes/linear.c,
 * cdy_rewrite_linear_relu): oneDNN applies it to each tile of the product as
 * it writes it; torch's form applies it in place after torch's linear. */
#include "runtime/runtime.h"

#include <time.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int choice;         /* -1 undecided, 0 torch's linear, 1 the packed weight */
    PyObject *weight;   /* the tensor the pack was made from (held: its address stays its own) */
    PyObject *packed;   /* the pack, or NULL */
    PyObject *data;     /* weight.data_ptr() and weight._version when packed */
    PyObject *version;
    int streak;         /* calls in a row that had to pack a changed weight */
    int relu;           /* 1: relu applied to the result */
    int always;         /* 1: config "always": the pack, never timed */
    int per_rows;       /* 1: in a graph of runtime sizes: the choice is remade when the rows change */
    long long rows;     /* the rows of x that choice was made for */
    long long pack_rows;   /* the rows the pack was made for (oneDNN's blocking hint), or -1 */
    long long last_rows;   /* per_rows: the rows of the call before, or -1 */
    int row_changes;    /* per_rows: calls in a row whose rows differed from the call before's */
} cdy_plin;

/* A weight packed anew on this many calls in a row is a new tensor on every
 * call (an argument, not a parameter): torch's linear from then on. */
#define PLIN_GIVE_UP 3

/* In a graph of runtime sizes the pack is remade for the call's rows, as a
 * static graph at those rows packs it (oneDNN picks the weight's blocking for
 * the rows it is given: 256 x 1024 packed for 8 rows is AB16b32a, for 512
 * AB16b64a, which multiplies 512 rows faster); but not while the rows change
 * on this many calls in a row (one pack then serves all, as before). */
#define PLIN_ROW_CHURN 4

static PyObject *linear_fn, *pointwise_op, *reorder_op, *empty_list, *empty_str;
static PyObject *attr_str[2];   /* oneDNN's post-op: "none", "relu" */
static PyObject *relu_fn;       /* torch.relu_ */
static PyObject *choices;   /* {(rows, in, out, bias, threads): bool} */
static PyObject *num_threads_fn;

/* Resolve torch's callables once; 1 when the packed path exists, else 0. */
static int plin_available(void)
{
    static int state = -1;
    if (state >= 0)
        return state;
    state = 0;
    PyObject *ops = PyObject_GetAttrString(cdy_torch, "ops");
    PyObject *mk = ops ? PyObject_GetAttrString(ops, "mkldnn") : NULL;
    PyObject *lp = mk ? PyObject_GetAttrString(mk, "_linear_pointwise") : NULL;
    PyObject *rw = mk ? PyObject_GetAttrString(mk, "_reorder_linear_weight") : NULL;
    PyObject *lpd = lp ? PyObject_GetAttrString(lp, "default") : NULL;
    PyObject *rwd = rw ? PyObject_GetAttrString(rw, "default") : NULL;
    pointwise_op = lpd ? PyObject_GetAttrString(lpd, "_op") : NULL;   /* the C++ entry */
    reorder_op = rwd ? PyObject_GetAttrString(rwd, "_op") : NULL;
    PyObject *nn = PyImport_ImportModule("torch.nn.functional");
    linear_fn = nn ? PyObject_GetAttrString(nn, "linear") : NULL;
    num_threads_fn = PyObject_GetAttrString(cdy_torch, "get_num_threads");
    attr_str[0] = PyUnicode_InternFromString("none");
    attr_str[1] = PyUnicode_InternFromString("relu");
    empty_str = PyUnicode_InternFromString("");
    relu_fn = PyObject_GetAttrString(cdy_torch, "relu_");
    empty_list = PyList_New(0);
    choices = PyDict_New();
    Py_XDECREF(ops);
    Py_XDECREF(mk);
    Py_XDECREF(lp);
    Py_XDECREF(rw);
    Py_XDECREF(lpd);
    Py_XDECREF(rwd);
    Py_XDECREF(nn);
    state = pointwise_op && reorder_op && linear_fn && num_threads_fn && attr_str[0] &&
            attr_str[1] && empty_str && relu_fn && empty_list && choices;
    PyErr_Clear();
    return state;
}

/* Rows of x for a weight of `in` columns (x's elements / in). */
static long long plin_rows(PyObject *x, long long in)
{
    PyObject *n = PyObject_CallMethod(x, "numel", NULL);
    long long r = n ? PyLong_AsLongLong(n) : -1;
    Py_XDECREF(n);
    return r < 0 || in <= 0 ? -1 : r / in;
}

/* 1 when p's pack is w's (same object, data pointer and version: data and
 * ver, w's) and was made for `rows` where that matters (plin_pack). */
static int plin_pack_fits(const cdy_plin *p, PyObject *w, PyObject *data, PyObject *ver,
                          long long rows)
{
    if (!p->packed || p->weight != w || PyObject_RichCompareBool(data, p->data, Py_EQ) != 1 ||
        PyObject_RichCompareBool(ver, p->version, Py_EQ) != 1)
        return 0;
    return !p->per_rows || rows == p->pack_rows || p->row_changes >= PLIN_ROW_CHURN;
}

/* The pack of weight w for input x, made anew unless the one held is still
 * w's (same object, data pointer and version) and, in a graph of runtime
 * sizes, made for x's rows (PLIN_ROW_CHURN).  Borrowed, or NULL. */
static PyObject *plin_pack(cdy_plin *p, PyObject *x, PyObject *w)
{
    PyObject *data = cdy_tensor_attr(w, CDY_TA_data_ptr);
    PyObject *ver = data ? cdy_tensor_attr(w, CDY_TA__version) : NULL;
    PyObject *shape = ver ? cdy_tensor_attr(w, CDY_TA_shape) : NULL;
    long long rows = shape ? plin_rows(x, PyLong_AsLongLong(PyTuple_GET_ITEM(shape, 1))) : -1;
    Py_XDECREF(shape);
    if (!ver || rows < 0) {
        if (ver && !PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "PackedLinear: input and weight do not match");
        Py_XDECREF(data);
        Py_XDECREF(ver);
        return NULL;
    }
    int same = p->packed && p->weight == w;
    if (plin_pack_fits(p, w, data, ver, rows)) {
        Py_DECREF(data);
        Py_DECREF(ver);
        p->streak = 0;
        return p->packed;
    }
    PyObject *r = PyLong_FromLongLong(rows);   /* the pack's batch hint */
    PyObject *av[2] = {w, r};
    PyObject *pk = r ? PyObject_Vectorcall(reorder_op, av, 2, NULL) : NULL;
    Py_XDECREF(r);
    if (!pk) {
        Py_DECREF(data);
        Py_DECREF(ver);
        return NULL;
    }
    cdy_stats.weight_packs++;
    /* a weight new on this call (not the same one packed for other rows) */
    same = same && PyObject_RichCompareBool(data, p->data, Py_EQ) == 1 &&
           PyObject_RichCompareBool(ver, p->version, Py_EQ) == 1;
    p->streak = same ? 0 : p->streak + (p->packed != NULL);
    p->pack_rows = rows;
    Py_XSETREF(p->packed, pk);
    Py_XSETREF(p->weight, Py_NewRef(w));
    Py_XSETREF(p->data, data);
    Py_XSETREF(p->version, ver);
    return pk;
}

/* x @ w.T + b (then relu) through the pack (args: x, w, b or None); new ref or NULL.
 * The call holds its own reference to the pack: torch releases the GIL,
 * and another thread may replace p's. */
static PyObject *plin_packed_call(cdy_plin *p, PyObject *const *args)
{
    PyObject *pk = plin_pack(p, args[0], args[1]);
    if (!pk)
        return NULL;
    Py_INCREF(pk);
    PyObject *av[6] = {args[0], pk, args[2], attr_str[p->relu], empty_list, empty_str};
    PyObject *r = PyObject_Vectorcall(pointwise_op, av, 6, NULL);
    Py_DECREF(pk);
    return r;
}

/* torch's linear(x, w, b), then relu in place; new ref or NULL. */
static PyObject *plin_torch_call(cdy_plin *p, PyObject *const *args)
{
    PyObject *r = PyObject_Vectorcall(linear_fn, args, 3, NULL);
    if (!r || !p->relu)
        return r;
    PyObject *y = PyObject_Vectorcall(relu_fn, &r, 1, NULL);
    Py_DECREF(r);
    return y;
}

/* Best of three timed calls each of torch's linear (best[0]) and the packed
 * one (best[1]), in ns, taken alternately after a warm-up call of each (which
 * makes the pack), so that a drift of the host's speed hits both alike; 0, or
 * -1 on an error (cleared). */
static int plin_time(cdy_plin *p, PyObject *const *args, long long best[2])
{
    best[0] = best[1] = -1;
    for (int i = 0; i < 8; i++) {
        int packed = i & 1;
        long long t0 = cdy_now_ns();
        PyObject *r = packed ? plin_packed_call(p, args) : plin_torch_call(p, args);
        long long dt = cdy_now_ns() - t0;
        if (!r) {
            PyErr_Clear();
            return -1;
        }
        Py_DECREF(r);
        if (i >= 2 && (best[packed] < 0 || dt < best[packed]))
            best[packed] = dt;
    }
    return 0;
}

/* Set p->choice for this call's shape: the process's earlier answer, or time
 * both now and take the pack unless torch's linear wins by more than 5%.  The
 * timing sees the weight hot in cache; in a model's steady state it is not
 * (a model's weights outgrow L2), and there torch's linear adds a copy of it
 * into MKL's panels on every call: a 4-block transformer (d = 256, 256
 * tokens) gave 1.33-1.34x over eager with every pack against 1.07-1.32x when
 * the pack had to win by 5% in this timing.  0, or -1 with an error. */
static int plin_decide(cdy_plin *p, PyObject *const *args)
{
    PyObject *shape = cdy_tensor_attr(args[1], CDY_TA_shape);
    PyObject *nt = shape ? PyObject_CallNoArgs(num_threads_fn) : NULL;
    long long out = shape ? PyLong_AsLongLong(PyTuple_GET_ITEM(shape, 0)) : -1;
    long long in = shape ? PyLong_AsLongLong(PyTuple_GET_ITEM(shape, 1)) : -1;
    long long rows = plin_rows(args[0], in);
    PyObject *key = nt && rows >= 0 ? Py_BuildValue("(LLLOOi)", rows, in, out,
                                                     args[2] == Py_None ? Py_False : Py_True, nt,
                                                     p->relu)
                                     : NULL;
    Py_XDECREF(shape);
    Py_XDECREF(nt);
    if (!key)
        return -1;
    p->rows = rows;
    PyObject *known = PyDict_GetItemWithError(choices, key);
    if (known)
        p->choice = known == Py_True;
    else if (!PyErr_Occurred()) {
        long long t[2];
        p->choice = plin_time(p, args, t) == 0 && t[1] * 20 <= t[0] * 21;
        if (PyDict_SetItem(choices, key, p->choice ? Py_True : Py_False))
            p->choice = -1;
    }
    Py_DECREF(key);
    return p->choice < 0 ? -1 : 0;
}

/* The rows of x (its leading dims' product), or -1 when they cannot be read. */
static long long plin_lead_rows(PyObject *x)
{
    PyObject *shape = cdy_tensor_attr(x, CDY_TA_shape);
    if (!shape) {
        PyErr_Clear();
        return -1;
    }
    long long rows = 1;
    Py_ssize_t n = PyTuple_GET_SIZE(shape);
    for (Py_ssize_t d = 0; d + 1 < n; d++)
        rows *= PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
    Py_DECREF(shape);
    PyErr_Clear();
    return n < 1 ? -1 : rows;
}

/* A graph of runtime sizes' call at x's rows: count a change of rows from the
 * call before (PLIN_ROW_CHURN), and make the choice anew when they differ
 * from those it was made for (or cannot be read: decided anew, which reports
 * the error). */
static void plin_see_rows(cdy_plin *p, PyObject *x)
{
    long long rows = plin_lead_rows(x);
    p->row_changes = p->last_rows >= 0 && rows != p->last_rows ? p->row_changes + 1 : 0;
    p->last_rows = rows;
    if (p->choice >= 0 && !p->always && (rows < 0 || rows != p->rows))
        p->choice = -1;
}

/* PackedLinear(x, w, b): x @ w.T + b as torch's linear computes it.  In a graph
 * of runtime sizes (per_rows) the choice is the one a static graph makes at the
 * call's rows, each shape's timed once for the process (plin_decide's dict):
 * made once at the compiling call's rows, an MLP compiled at 8 rows multiplied
 * 64 with 8 rows' choice; and so is the pack (plin_pack, PLIN_ROW_CHURN). */
static PyObject *plin_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    cdy_plin *p = (cdy_plin *)self;
    if (PyVectorcall_NARGS(nargsf) != 3 || kw) {
        PyErr_SetString(PyExc_TypeError, "PackedLinear expects (input, weight, bias)");
        return NULL;
    }
    if (p->per_rows)
        plin_see_rows(p, args[0]);
    if (p->choice < 0 && plin_decide(p, args))
        return NULL;
    if (p->choice == 0)
        return plin_torch_call(p, args);
    cdy_stats.packed_linear_calls++;
    PyObject *r = plin_packed_call(p, args);
    if (p->streak >= PLIN_GIVE_UP)
        p->choice = 0;
    return r;
}

static void plin_dealloc(PyObject *self)
{
    cdy_plin *p = (cdy_plin *)self;
    Py_XDECREF(p->weight);
    Py_XDECREF(p->packed);
    Py_XDECREF(p->data);
    Py_XDECREF(p->version);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *plin_repr(PyObject *self)
{
    cdy_plin *p = (cdy_plin *)self;
    return PyUnicode_FromFormat("<cdynamo PackedLinear%s: %s>", p->relu ? " + relu" : "",
                                p->choice < 0 ? "not called yet" :
                                p->choice ? "packed weight" : "torch's linear");
}

static PyObject *plin_get_packed(PyObject *self, void *closure)
{
    return PyBool_FromLong(((cdy_plin *)self)->choice == 1);
}

static PyObject *plin_get_relu(PyObject *self, void *closure)
{
    return PyBool_FromLong(((cdy_plin *)self)->relu);
}

static PyObject *plin_get_rows(PyObject *self, void *closure)
{
    cdy_plin *p = (cdy_plin *)self;
    return p->rows < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(p->rows);
}

static PyObject *plin_get_pack_rows(PyObject *self, void *closure)
{
    cdy_plin *p = (cdy_plin *)self;
    return p->pack_rows < 0 || !p->packed ? Py_NewRef(Py_None) : PyLong_FromLongLong(p->pack_rows);
}

static PyObject *plin_get_per_rows(PyObject *self, void *closure)
{
    return PyBool_FromLong(((cdy_plin *)self)->per_rows);
}

static PyGetSetDef plin_getset[] = {
    {"uses_packed_weight", plin_get_packed, NULL, "whether calls use the packed weight", NULL},
    {"relu", plin_get_relu, NULL, "whether relu is applied to the result", NULL},
    {"decided_rows", plin_get_rows, NULL, "the input rows the choice was timed or looked up "
     "for (None: not yet, or \"always\")", NULL},
    {"pack_rows", plin_get_pack_rows, NULL, "the input rows the held pack was made for "
     "(oneDNN's blocking hint; None: no pack)", NULL},
    {"per_rows", plin_get_per_rows, NULL, "whether the choice is remade when the input's rows "
     "change (a graph of runtime sizes)", NULL},
    {NULL},
};

PyTypeObject cdy_packed_linear_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cdynamo._C.PackedLinear",
    .tp_basicsize = sizeof(cdy_plin),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(cdy_plin, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = plin_dealloc,
    .tp_repr = plin_repr,
    .tp_getset = plin_getset,
    .tp_doc = "linear(x, w, b) with w kept in oneDNN's packed layout (see runtime/linear.c)",
};

/* A new PackedLinear, or NULL (no error set) when torch lacks the packed path. */
PyObject *cdy_packed_linear_new(int always)
{
    if (!plin_available() || PyType_Ready(&cdy_packed_linear_type) < 0) {
        PyErr_Clear();
        return NULL;
    }
    cdy_plin *p = PyObject_New(cdy_plin, &cdy_packed_linear_type);
    if (!p) {
        PyErr_Clear();
        return NULL;
    }
    p->vectorcall = plin_call;
    p->choice = always ? 1 : -1;
    p->weight = p->packed = p->data = p->version = NULL;
    p->streak = 0;
    p->relu = 0;
    p->always = always != 0;
    p->per_rows = 0;
    p->rows = p->pack_rows = p->last_rows = -1;
    p->row_changes = 0;
    return (PyObject *)p;
}

void cdy_packed_linear_set_per_rows(PyObject *pl)
{
    if (pl && PyObject_TypeCheck(pl, &cdy_packed_linear_type))
        ((cdy_plin *)pl)->per_rows = 1;
}

/* PackedLinear pl applies relu to its result from now on: 0, or -1
 * (unchanged) when pl is not a PackedLinear without it. */
int cdy_packed_linear_set_relu(PyObject *pl)
{
    if (!PyObject_TypeCheck(pl, &cdy_packed_linear_type) || ((cdy_plin *)pl)->relu)
        return -1;
    ((cdy_plin *)pl)->relu = 1;
    return 0;
}
