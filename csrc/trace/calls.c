/* calls.c - what a traced call does.
 *
 *   torch op we lower     -> a pointwise graph node (fused into C kernels)
 *   any other torch op    -> an extern node: run through torch at run time
 *   tensor query (size()) -> a constant, exact under the tensor's guard
 *   Python function       -> inlined: traced in a nested frame
 *   nn.Module             -> its forward, inlined (no hooks allowed)
 *   pure builtins         -> evaluated on constants; len/isinstance/... on tvars
 * Everything else stops the trace with a reason (a graph break).          */
#include "trace/trace.h"
#include "pyver/pycompat.h"

#include <stdint.h>
#include <string.h>

static PyObject *op_funcs[32], *builtins_mod, *str_inplace, *str_forward;
static PyObject *global_hook_dicts[4], *is_grad_enabled_fn;

/* operator.<name> (cached by slot), borrowed; NULL with error. */
PyObject *cdy_operator_fn(int slot, const char *name)
{
    if (!op_funcs[slot]) {
        PyObject *m = PyImport_ImportModule("operator");
        op_funcs[slot] = m ? PyObject_GetAttrString(m, name) : NULL;
        Py_XDECREF(m);
    }
    return op_funcs[slot];
}

/* One-time lookups; 0 or -1. */
int cdy_calls_init(void)
{
    if (builtins_mod)
        return 0;
    builtins_mod = PyImport_ImportModule("builtins");
    str_inplace = PyUnicode_InternFromString("inplace");
    str_forward = PyUnicode_InternFromString("forward");
    is_grad_enabled_fn = PyObject_GetAttrString(cdy_torch, "is_grad_enabled");
    PyObject *mm = PyImport_ImportModule("torch.nn.modules.module");
    static const char *hooks[4] = {"_global_forward_hooks", "_global_forward_pre_hooks",
                                   "_global_backward_hooks", "_global_backward_pre_hooks"};
    for (int i = 0; mm && i < 4; i++) {
        global_hook_dicts[i] = PyObject_GetAttrString(mm, hooks[i]);
        PyErr_Clear();
    }
    Py_XDECREF(mm);
    cdy_optim_wrapper_code();   /* read now, while the hook is off (frame/eval.c reads it) */
    return builtins_mod && str_inplace && str_forward ? 0 : -1;
}

/* ---- tensor ops ------------------------------------------------------------- */

/* Graph value for a pointwise argument: a tensor's value or a new scalar; -1 if not one. */
static int arg_value(tracer *tr, tvar *a)
{
    if (a->kind == TV_TENSOR)
        return a->value;
    if (a->kind != TV_CONST)
        return -1;
    PyObject *o = a->obj;
    if (PyBool_Check(o))
        return cdy_scalar_bool(tr, o == Py_True);
    if (PyLong_CheckExact(o)) {
        long long i = PyLong_AsLongLong(o);
        if (i == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        return cdy_scalar_int(tr, i);
    }
    if (PyFloat_CheckExact(o))
        return cdy_scalar_float(tr, PyFloat_AS_DOUBLE(o));
    return -1;
}

/* A new list (as_list) or tuple of the objects of items[0..n), each a constant; NULL
 * (no error set) when one is not a constant or out of memory. */
static PyObject *const_items(tvar *const *items, int n, int as_list)
{
    for (int i = 0; i < n; i++)
        if (items[i]->kind != TV_CONST)
            return NULL;
    PyObject *s = as_list ? PyList_New(n) : PyTuple_New(n);
    for (int i = 0; s && i < n; i++) {
        if (as_list)
            PyList_SET_ITEM(s, i, Py_NewRef(items[i]->obj));
        else
            PyTuple_SET_ITEM(s, i, Py_NewRef(items[i]->obj));
    }
    PyErr_Clear();
    return s;
}

/* A list/tuple tvar a of constants (x[:, [True, False]], tensordot's dims=([1], [0]),
 * torch.tensor([[1.0, 2.0]])) as a Python list/tuple of its kind the trace keeps
 * (borrowed), else NULL (no error). */
static PyObject *const_seq(tracer *tr, const tvar *a)
{
    if ((a->kind != TV_TUPLE && a->kind != TV_LIST) || a->obj)
        return NULL;
    PyObject *s = const_items(a->items, a->n, a->kind == TV_LIST);
    return s ? cdy_tr_keep(tr, s) : NULL;
}

/* The Python value of argument a for a call on fakes: tensors are their
 * fakes; a list/tuple of tensors and constants (or lists / tuples of
 * constants) becomes a real list/tuple. */
static PyObject *fake_arg(tracer *tr, tvar *a)
{
    if (a->by_type)
        return NULL;   /* its state is not guarded: torch must not see it */
    if (a->kind == TV_TENSOR || a->kind == TV_CONST || a->kind == TV_OBJ)
        return a->obj;
    if (a->kind == TV_TUPLE || a->kind == TV_LIST) {
        PyObject *s = a->kind == TV_TUPLE ? PyTuple_New(a->n) : PyList_New(a->n);
        for (int i = 0; s && i < a->n; i++) {
            tvar *it = a->items[i];
            PyObject *o = it->kind == TV_TENSOR || it->kind == TV_CONST ? it->obj
                                                                        : const_seq(tr, it);
            if (!o) {
                Py_DECREF(s);
                return NULL;
            }
            if (a->kind == TV_TUPLE)
                PyTuple_SET_ITEM(s, i, Py_NewRef(o));
            else
                PyList_SET_ITEM(s, i, Py_NewRef(o));
        }
        return cdy_tr_keep(tr, s);
    }
    return NULL;
}

/* Record the call for the eager backend and for extern nodes; 0 or -1. */
static int add_pynode(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames,
                      int value)
{
    cdy_trace *t = tr->t;
    if (t->npynodes == t->cap_pynodes) {
        int cap = t->cap_pynodes ? 2 * t->cap_pynodes : 16;
        cdy_pynode *p = PyMem_Realloc(t->pynodes, sizeof(cdy_pynode) * (size_t)cap);
        if (!p)
            return cdy_tr_stop(tr, OUT_OF_MEMORY);
        t->pynodes = p;
        t->cap_pynodes = cap;
    }
    cdy_pynode *p = &t->pynodes[t->npynodes++];
    memset(p, 0, sizeof(*p));
    p->item = -1;
    p->fn = fn;
    p->nargs = nargs;
    p->kwnames = kwnames;
    p->value = value;
    p->opaque = fn && cdy_libop_is(fn);
    p->ref = cdy_arena_alloc(&t->arena, sizeof(int) * (size_t)(nargs + 1));
    p->cst = cdy_arena_alloc(&t->arena, sizeof(PyObject *) * (size_t)(nargs + 1));
    p->seq = cdy_arena_alloc(&t->arena, sizeof(cdy_pyseq) * (size_t)(nargs + 1));
    if (!p->ref || !p->cst || !p->seq)
        return cdy_tr_stop(tr, OUT_OF_MEMORY);
    for (int i = 0; i < nargs; i++) {
        tvar *a = args[i];
        p->ref[i] = -1;
        if (a->kind == TV_TENSOR)
            p->ref[i] = a->value;
        else if (a->kind == TV_TUPLE || a->kind == TV_LIST) {
            cdy_pyseq *s = &p->seq[i];
            s->is_list = a->kind == TV_LIST;
            s->n = a->n;
            s->ref = cdy_arena_alloc(&t->arena, sizeof(int) * (size_t)(a->n + 1));
            s->cst = cdy_arena_alloc(&t->arena, sizeof(PyObject *) * (size_t)(a->n + 1));
            if (!s->ref || !s->cst)
                return cdy_tr_stop(tr, OUT_OF_MEMORY);
            for (int j = 0; j < a->n; j++) {
                s->ref[j] = a->items[j]->kind == TV_TENSOR ? a->items[j]->value : -1;
                s->cst[j] = a->items[j]->obj ? a->items[j]->obj : const_seq(tr, a->items[j]);
            }
            p->ref[i] = -2;
        }
        else
            p->cst[i] = a->obj;
    }
    return 0;
}

/* Tensor values among args (and inside list/tuple args), into out[]; count or -1. */
static int tensor_args(tvar **args, int nargs, int *out)
{
    int n = 0;
    for (int i = 0; i < nargs; i++) {
        tvar *a = args[i];
        int cnt = (a->kind == TV_TUPLE || a->kind == TV_LIST) ? a->n : 1;
        for (int j = 0; j < cnt; j++) {
            tvar *it = (a->kind == TV_TUPLE || a->kind == TV_LIST) ? a->items[j] : a;
            if (it->kind != TV_TENSOR)
                continue;
            if (n == CDY_MAX_NODE_ARGS)
                return -1;
            out[n++] = it->value;
        }
    }
    return n;
}

/* Method names that read tensor data or leave the graph: never traced
 * (storage_offset: a fake is at offset 0, whatever its input's offset). */
static int data_dependent(const char *name)
{
    static const char *names[] = {"item", "tolist", "numpy", "data_ptr", "__bool__", "__int__",
                                  "__float__", "__index__", "nonzero", "unique", "cuda",
                                  "backward", "register_hook", "retain_grad", "storage",
                                  "untyped_storage", "storage_offset", "__array__", "__repr__",
                                  "__str__", NULL};
    for (int i = 0; names[i]; i++)
        if (!strcmp(name, names[i]))
            return 1;
    return 0;
}

/* Tensor methods whose result is a Python value fixed by the tensor's meta. */
static int meta_query(const char *name)
{
    static const char *names[] = {"size", "dim", "ndimension", "numel", "nelement", "stride",
                                  "is_contiguous", "is_floating_point", "is_complex",
                                  "element_size", "__len__", "get_device", "is_signed", NULL};
    for (int i = 0; names[i]; i++)
        if (!strcmp(name, names[i]))
            return 1;
    return 0;
}

/* 1 (and stop with ERROR: eager raises, so the frame runs eagerly) when
 * torch's CPU kernel rejects what its meta function accepted (the op's
 * flags): a bool tensor operand (abs/relu/neg: BOOL_TENSOR_RAISES), any bool
 * operand (sub: BOOL_RAISES), a number that overflows the integer result
 * dtype (where: SCALAR_RANGE). */
static int eager_rejects(tracer *tr, int op, const int *argv, int nargs, PyObject *out,
                         const char *what)
{
    const cdy_value *vals = tr->t->graph.values;
    int any_bool_tensor = 0, any_bool = 0;
    for (int i = 0; i < nargs; i++) {
        int b = vals[argv[i]].meta.dtype == CDY_DT_BOOL;
        any_bool |= b;   /* sub also rejects a Python bool: it becomes a bool tensor */
        any_bool_tensor |= b && vals[argv[i]].kind != CDY_VAL_SCALAR;
    }
    if ((cdy_op_has(op, CDY_OPF_BOOL_TENSOR_RAISES) && any_bool_tensor) ||
        (cdy_op_has(op, CDY_OPF_BOOL_RAISES) && any_bool))
        return cdy_tr_stop(tr, BOOL_OPERAND, what) < 0;
    if (cdy_op_has(op, CDY_OPF_SCALAR_RANGE)) {
        cdy_meta m;
        if (cdy_read_meta(tr, out, &m))
            return 1;
        static const long long lo[] = {0, 0, -128, -32768, -2147483648LL, INT64_MIN};
        static const long long hi[] = {1, 255, 127, 32767, 2147483647LL, INT64_MAX};
        for (int i = 1; i < nargs && m.dtype <= CDY_DT_INT64; i++) {
            const cdy_value *a = &vals[argv[i]];
            if (a->kind == CDY_VAL_SCALAR && a->meta.dtype != CDY_DT_FLOAT64 &&
                (a->i < lo[m.dtype] || a->i > hi[m.dtype]))
                return cdy_tr_stop(tr, SCALAR_OVERFLOW, what, (long long)a->i,
                                   cdy_dtype_table[m.dtype].name) < 0;
        }
    }
    return 0;
}

/* Item it of a drawing call's fake result (fn), as the real call makes it: a
 * clone when the fake is an argument's own fake (torch's decomposition of
 * native_dropout(x, 0, True) returns x, where the CPU kernel returns a new
 * dense tensor); borrowed (kept by the trace), NULL + error. */
static PyObject *fresh_item(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *it)
{
    for (int j = 0; j < nargs; j++)
        if (args[j]->kind == TV_TENSOR && args[j]->obj == it && cdy_fn_draws_rng(fn))
            return cdy_tr_keep(tr, PyObject_CallMethod(it, "clone", NULL));
    return it;
}

/* A call returning a tuple/list of tensors `out` (fakes): one call pynode and
 * an extern node per item; a TUPLE/LIST tvar of them.  NULL when stopped. */
static tvar *multi_call(tracer *tr, PyObject *fn, const char *what, tvar **args, int nargs,
                        PyObject *kwnames, PyObject *out)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(out);
    int argv[CDY_MAX_NODE_ARGS], ntensors = tensor_args(args, nargs, argv);
    if (ntensors < 0 || n > 64) {
        cdy_tr_stop(tr, TOO_MANY_TENSORS, what);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyObject_TypeCheck(PySequence_Fast_ITEMS(out)[i], (PyTypeObject *)cdy_tensor_type) &&
            PySequence_Fast_ITEMS(out)[i] != Py_None) {   /* (out, None): need_weights=False */
            cdy_tr_stop(tr, NON_TENSOR_SEQ, what);
            return NULL;
        }
    if (add_pynode(tr, fn, args, nargs, kwnames, -1))
        return NULL;
    int base = tr->t->npynodes - 1;
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
    if (!items)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        int idx;
        if (PySequence_Fast_ITEMS(out)[i] == Py_None) {
            if (!(items[i] = cdy_tv_const(tr, Py_NewRef(Py_None))))
                return NULL;
            continue;
        }
        PyObject *it = fresh_item(tr, fn, args, nargs, PySequence_Fast_ITEMS(out)[i]);
        if (!it) {
            cdy_tr_stop_exc(tr, PY_ERROR);
            return NULL;
        }
        tvar *v = cdy_tensor_node(tr, it, &idx);
        if (!v || add_pynode(tr, NULL, NULL, 0, NULL, idx))
            return NULL;
        cdy_value *gv = &tr->t->graph.values[idx];
        cdy_value_set_extern(gv, argv, ntensors, gv->meta.dtype);
        tr->t->pynodes[tr->t->npynodes - 1].item = (int)i;
        tr->t->pynodes[tr->t->npynodes - 1].base = base;
        items[i] = v;
    }
    tvar *r = cdy_tv_seq(tr, PyList_Check(out) ? TV_LIST : TV_TUPLE, items, (int)n);
    if (r && PyTuple_Check(out) && !PyTuple_CheckExact(out))
        r->obj = (PyObject *)Py_TYPE(out);   /* torch.return_types.*: .values, .indices */
    return r;
}

/* 1 if word w[0..n) names a random function (cdy_name_draws_rng). */
static int rng_word(const char *w, size_t n)
{
    static const char *const words[] = {
        "rand", "randn", "randint", "randperm", "random", "uniform", "normal", "bernoulli",
        "multinomial", "poisson", "binomial", "exponential", "geometric", "cauchy", "dropout",
        "rrelu", "gumbel", "dirichlet", "gamma", NULL};
    for (int i = 0; words[i]; i++)
        if (strlen(words[i]) == n && !strncmp(w, words[i], n))
            return 1;
    return 0;
}

int cdy_name_draws_rng(const char *name)
{
    for (const char *c = name; c && *c;) {
        size_t n = 0;
        while ((c[n] >= 'a' && c[n] <= 'z') || (c[n] >= 'A' && c[n] <= 'Z'))
            n++;
        if (n && rng_word(c, n))
            return 1;
        c += n ? n : 1;
    }
    return 0;
}

int cdy_fn_draws_rng(PyObject *fn)
{
    PyObject *nm = fn ? PyObject_GetAttrString(fn, "__name__") : NULL;
    int hit = nm && PyUnicode_Check(nm) && cdy_name_draws_rng(PyUnicode_AsUTF8(nm));
    Py_XDECREF(nm);
    PyErr_Clear();
    return hit;
}

/* See record.h. */
int cdy_pynode_arg_at(const cdy_pynode *p, int pos, const char *name)
{
    int nkw = p->kwnames ? (int)PyTuple_GET_SIZE(p->kwnames) : 0, npos = p->nargs - nkw;
    int at = pos < npos ? pos : -1;
    for (int k = 0; k < nkw; k++) {
        const char *n = PyUnicode_AsUTF8(PyTuple_GET_ITEM(p->kwnames, k));
        if (n && !strcmp(n, name))
            at = npos + k;
    }
    PyErr_Clear();
    return at;
}

int cdy_pynode_draws_rng(const cdy_pynode *p)
{
    if (!p->fn)
        return 0;
    if (cdy_fn_draws_rng(p->fn))
        return 1;
    PyObject *nm = PyObject_GetAttrString(p->fn, "__name__");
    int sdpa = nm && PyUnicode_Check(nm) &&
               PyUnicode_CompareWithASCIIString(nm, "scaled_dot_product_attention") == 0;
    Py_XDECREF(nm);
    PyErr_Clear();
    int at = sdpa ? cdy_pynode_arg_at(p, 4, "dropout_p") : -1;
    if (at < 0)
        return 0;                          /* not attention, or no dropout_p: none */
    PyObject *d = p->ref[at] == -1 ? p->cst[at] : NULL;
    int zero = d && (d == Py_None || (PyNumber_Check(d) && PyObject_Not(d) == 1));
    PyErr_Clear();
    return !zero;
}

/* The generators a fake call of fn may draw from, each with its state (a
 * list of (generator, state) pairs; new ref), or Py_None when it cannot
 * draw: a call with a tensor argument runs on meta fakes, which draw
 * nothing, but one without (torch.rand(8, 8)) runs for real and would
 * advance torch's default generator (when cdy_fn_draws_rng), or a generator
 * it is given, at trace time; NULL + error. */
static PyObject *fake_rng_save(PyObject *fn, tvar **args, int nargs)
{
    static PyObject *gen_type, *dflt;
    if (!gen_type && (!(gen_type = PyObject_GetAttrString(cdy_torch, "Generator")) ||
                      !(dflt = PyObject_GetAttrString(cdy_torch, "default_generator"))))
        return NULL;
    for (int i = 0; i < nargs; i++)
        if (args[i]->kind == TV_TENSOR)
            return Py_NewRef(Py_None);
    PyObject *l = PyList_New(0);
    for (int i = cdy_fn_draws_rng(fn) ? -1 : 0; l && i < nargs; i++) {
        PyObject *g = i < 0 ? dflt : args[i]->obj;
        if (!g || (i >= 0 && !PyObject_TypeCheck(g, (PyTypeObject *)gen_type)))
            continue;
        PyObject *st = PyObject_CallMethod(g, "get_state", NULL);
        PyObject *pair = st ? PyTuple_Pack(2, g, st) : NULL;
        Py_XDECREF(st);
        if (!pair || PyList_Append(l, pair))
            Py_CLEAR(l);
        Py_XDECREF(pair);
    }
    return l;
}

/* Put back the generator states fake_rng_save took (saved: stolen); 0 or
 * -1 + error (a pending error is kept). */
static int fake_rng_restore(PyObject *saved)
{
    int rc = 0;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    for (Py_ssize_t i = 0; PyList_Check(saved) && i < PyList_GET_SIZE(saved); i++) {
        PyObject *pair = PyList_GET_ITEM(saved, i);
        PyObject *r = PyObject_CallMethod(PyTuple_GET_ITEM(pair, 0), "set_state", "O",
                                          PyTuple_GET_ITEM(pair, 1));
        rc |= r ? 0 : -1;
        Py_XDECREF(r);
    }
    Py_DECREF(saved);
    if (et) {
        PyErr_Clear();
        PyErr_Restore(et, ev, tb);
    }
    return et ? 0 : rc;
}

/* fn(*args) run on the fakes (tensors are their fakes): its result, kept by
 * the trace, or NULL with the trace stopped (ERROR when torch raised).  The
 * generators it may draw from are as they were (fake_rng_save). */
static PyObject *fake_call(tracer *tr, PyObject *fn, const char *what, tvar **args, int nargs,
                           PyObject *kwnames)
{
    PyObject *pyargs[CDY_MAX_CALL_ARGS];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (int i = 0; i < nargs; i++)
        if (!(pyargs[i] = fake_arg(tr, args[i]))) {
            cdy_tr_stop(tr, BAD_OP_ARG, what, i);
            return NULL;
        }
    PyObject *rng = fake_rng_save(fn, args, nargs);
    if (!rng) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    PyObject *out = PyObject_Vectorcall(fn, pyargs, (size_t)(nargs - nkw), kwnames);
    if (fake_rng_restore(rng)) {
        Py_CLEAR(out);
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    if (!out) {
        cdy_tr_stop_torch(tr, what);
        return NULL;
    }
    if (!cdy_tr_keep(tr, out)) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    return out;
}

/* The arg a call gave back itself (its fake result is that arg's fake), as
 * eager's does: no-op conversions (x.to(x.dtype), x.float() of a float
 * tensor, x.contiguous() of a contiguous one, x.type_as(y) of y's type),
 * dropout in eval, positive / conj / resolve_conj of a real tensor, ...  Not
 * an in-place op (named x_) or one given out=: those are mutations. */
static tvar *returned_arg(const char *what, tvar **args, int nargs, PyObject *kwnames,
                          PyObject *out)
{
    const char *dot = strrchr(what, '.');
    const char *name = dot ? dot + 1 : what;
    size_t len = strlen(name);
    if (!len || name[len - 1] == '_')
        return NULL;
    for (Py_ssize_t k = 0; kwnames && k < PyTuple_GET_SIZE(kwnames); k++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, k), "out") == 0)
            return NULL;
    for (int i = 0; i < nargs; i++)
        if (args[i]->kind == TV_TENSOR && args[i]->obj == out)
            return args[i];
    return NULL;
}

/* A graph node op(argv[0..nargs)) whose fake result is out, computed in its
 * own dtype; its tensor variable (index in *idx), or NULL. */
static tvar *op_node(tracer *tr, PyObject *out, int op, const int *argv, int nargs, int *idx)
{
    tvar *v = cdy_tensor_node(tr, out, idx);
    if (!v)
        return NULL;
    cdy_value *gv = &tr->t->graph.values[*idx];
    gv->op = op;
    gv->nargs = nargs;
    memcpy(gv->args, argv, sizeof(int) * (size_t)nargs);
    gv->compute_dtype = gv->meta.dtype;
    return v;
}
/* The global state (CDY_STATE_*) torch function `what` reads, or -1:
 * torch.get_default_dtype(), torch.is_autocast_enabled(...),
 * torch.get_autocast_dtype(...) and the like give constants that hold only
 * while that state does. */
static int state_query(const char *what)
{
    if (strstr(what, "default_dtype"))
        return CDY_STATE_DEFAULT_DTYPE;
    return strstr(what, "autocast") ? CDY_STATE_AUTOCAST : -1;
}

/* 1 if torch function `name` called with no argument reads global state
 * that no other guard covers: its answer is guarded by calling it again
 * (a CALL guard) on every call of the compiled code. */
static int state_call_query(const char *name)
{
    static const char *names[] = {"is_inference_mode_enabled", "are_deterministic_algorithms_enabled",
                                  "is_deterministic_algorithms_warn_only_enabled",
                                  "_get_deterministic_algorithms", "get_num_threads",
                                  "get_num_interop_threads", "is_anomaly_enabled",
                                  "is_anomaly_check_nan_enabled", "get_float32_matmul_precision",
                                  "get_default_device", "_get_default_device", "initial_seed", NULL};
    for (int i = 0; names[i]; i++)
        if (!strcmp(name, names[i]))
            return 1;
    return 0;
}

/* A CALL guard: fn() keeps giving answer; 0, or -1 when stopped. */
static int guard_call(tracer *tr, PyObject *fn, const char *what, PyObject *answer)
{
    cdy_src none = {0};
    char desc[96];
    snprintf(desc, sizeof(desc), "%s()", what);
    cdy_guard *g = cdy_guards_add(&tr->t->guards, CDY_GUARD_CALL, &none, desc);
    if (!g)
        return cdy_tr_stop_exc(tr, PY_ERROR);
    g->expect = Py_NewRef(fn);
    g->dtype = Py_NewRef(answer);
    return 0;
}

/* 1 if torch function `name` (a qualname) changes global state: it would
 * run once, while tracing, and never in the compiled code (set_default_dtype,
 * set_num_threads, manual_seed, use_deterministic_algorithms, ...). */
static int state_setter(const char *name)
{
    static const char *prefixes[] = {"set_", "_set_", "use_", "manual_seed", "seed",
                                     "autocast_", "clear_autocast", "_push", "_pop",
                                     "_enter", "_exit", "init_", NULL};
    const char *dot = strrchr(name, '.');
    const char *n = dot ? dot + 1 : name;
    for (int i = 0; prefixes[i]; i++)
        if (!strncmp(n, prefixes[i], strlen(prefixes[i])))
            return 1;
    return 0;
}

/* Call fn(*args) where args hold tensors: run it on the fakes for the
 * output meta; add a pointwise node for op when it is one we lower, else an
 * extern node.  `query`: the result is a constant (size(), dim(), ...). */
static tvar *tensor_call(tracer *tr, int op, PyObject *fn, const char *what, tvar **args,
                         int nargs, PyObject *kwnames, int query)
{
    if (nargs > CDY_MAX_CALL_ARGS) {
        cdy_tr_stop(tr, OP_TOO_MANY_ARGS, what);
        return NULL;
    }
    int dropout;
    tvar *dr = cdy_dropout_train(tr, fn, args, nargs, kwnames, &dropout);   /* issue 34 */
    if (dropout)
        return dr;
    if (kwnames && PyTuple_GET_SIZE(kwnames) == 1 &&
        PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, 0), str_inplace) == 0 &&
        args[nargs - 1]->kind == TV_CONST && args[nargs - 1]->obj == Py_False) {
        nargs--;                      /* F.relu(x, inplace=False) is relu(x) */
        kwnames = NULL;
    }
    if (op == CDY_OP_NONE && !query && !kwnames && nargs == 2 && args[0]->kind == TV_TENSOR &&
        args[1]->kind == TV_TENSOR)
        op = cdy_callable_binary_op(fn);   /* torch.min(a, b) is torch.minimum(a, b) */
    tvar *acargs[CDY_MAX_CALL_ARGS];
    int ac_handled = 0;
    if (!query) {
        memcpy(acargs, args, sizeof(tvar *) * (size_t)nargs);
        args = acargs;
        if (cdy_autocast_args(tr, what, args, nargs, &ac_handled))
            return NULL;
    }
    tvar *bound[CDY_MAX_NODE_ARGS];
    int nbound = op != CDY_OP_NONE && !query ? cdy_op_bind(tr, &op, args, nargs, kwnames, bound)
                                             : -1;
    /* a lowered pointwise op's or reduction's meta, or a matmul's or layer
     * norm's, comes from C rules when they cover the call */
    PyObject *out = nbound >= 0 ? cdy_meta_pointwise(tr, op, fn, bound, nbound) : NULL;
    if (!out && nbound >= 0 && tr->t->status == CDY_TRACE_OK)
        out = cdy_meta_reduce(tr, op, bound, nbound);
    if (!out && op == CDY_OP_NONE && !query && tr->t->status == CDY_TRACE_OK)
        out = cdy_meta_extern(tr, fn, args, nargs, kwnames);
    int c_meta = out != NULL;
    if (tr->t->status != CDY_TRACE_OK)
        return NULL;
    if (!out) {
        /* torch.is_autocast_enabled() and the like answer the trace's autocast state */
        int live = state_query(what) == CDY_STATE_AUTOCAST ? cdy_ac_live_set(tr) : -1;
        out = fake_call(tr, fn, what, args, nargs, kwnames);
        cdy_ac_live_restore(live);
        if (!out)
            return NULL;
    }
    tvar *same = c_meta ? NULL : returned_arg(what, args, nargs, kwnames, out);
    if (same) {
        cdy_tr_sym_layout(tr, what, same);
        return same;
    }
    if (query || (!PyObject_TypeCheck(out, (PyTypeObject *)cdy_tensor_type) &&
                  !PyTuple_Check(out) && !PyList_Check(out) && cdy_is_const(out))) {
        /* a value fixed by the (guarded) meta and constants: a constant */
        if (!cdy_is_const(out)) {
            cdy_tr_stop(tr, NON_CONST_RESULT, what);
            return NULL;
        }
        tvar *sized = kwnames ? NULL : cdy_sx_query(tr, what, args, nargs, out);
        if (sized || cdy_tr_stopped(tr))   /* a size read: a symbolic int (trace/symint.c) */
            return sized;
        cdy_tr_pin_query(tr, what, args, nargs);
        if (fn == is_grad_enabled_fn && cdy_guard_grad_mode(tr, out == Py_True))
            return NULL;
        int state = state_query(what);
        if (state >= 0 && cdy_guard_state(tr, state))
            return NULL;
        if (nargs == 0 && state_call_query(what) && guard_call(tr, fn, what, out))
            return NULL;
        return cdy_tv_const(tr, Py_NewRef(out));
    }
    if (op == CDY_OP_NONE && cdy_callable_builds(fn)) {
        cdy_build_call call = {fn, what, args, nargs, kwnames, out, CDY_OP_NONE};
        int sym = cdy_callable_symbolic(fn);
        if (!sym) {
            char why[160];
            snprintf(why, sizeof(why), "a builder without a symbolic rule (%s) read them", what);
            cdy_tr_pin_tensors(tr, args, nargs, cdy_sx_where(tr, why));
        }
        tvar *r = cdy_callable_build(tr, &call);
        if (sym == 2 && tr->t->status == CDY_TRACE_OK)
            cdy_tr_sym_view(tr, &call, r);
        if (sym == 3 && tr->t->status == CDY_TRACE_OK)
            cdy_tr_sym_copy(tr, &call, r);
        if (sym == 4 && tr->t->status == CDY_TRACE_OK)
            cdy_tr_sym_split(tr, &call, r);
        if (sym == 7 && tr->t->status == CDY_TRACE_OK)
            cdy_tr_sym_getitem(tr, &call, r);
        if (!cdy_build_declined(tr, r, what))
            return r;
    }
    /* an extern under autocast that autocast.c did not cast for */
    /* an extern under autocast that autocast.c did not cast for (named) */
    int unhandled = tr->t->autocast_on && !ac_handled && !tr->t->autocast_unhandled;
    if (PyTuple_Check(out) || PyList_Check(out)) {
        if (unhandled)
            tr->t->autocast_unhandled = cdy_arena_strdup(&tr->t->arena, what);
        return multi_call(tr, fn, what, args, nargs, kwnames, out);
    }
    if (!PyObject_TypeCheck(out, (PyTypeObject *)cdy_tensor_type)) {
        cdy_tr_stop(tr, NON_TENSOR_RESULT, what, Py_TYPE(out)->tp_name);
        return NULL;
    }
    int pointwise = nbound >= 0;
    int argv[CDY_MAX_NODE_ARGS];
    if (pointwise)
        for (int i = 0; i < nbound && pointwise; i++)
            pointwise = (argv[i] = arg_value(tr, bound[i])) >= 0;
    if (tr->t->status != CDY_TRACE_OK)
        return NULL;
    if (!pointwise) {
        if (unhandled)
            tr->t->autocast_unhandled = cdy_arena_strdup(&tr->t->arena, what);
        return cdy_extern_node(tr, fn, what, args, nargs, kwnames, out);
    }
    if (eager_rejects(tr, op, argv, nbound, out, what))
        return NULL;
    /* a cast is x.to(dtype), whose meta keeps x's strides as eager's copy does */
    if (!c_meta && !cdy_op_has(op, CDY_OPF_KEEP_STRIDES) &&
        !(out = cdy_meta_cpu_layout(tr, op, fn, bound, nbound, NULL, out)))
        return NULL;
    int idx;
    tvar *v = op_node(tr, out, op, argv, nbound, &idx);
    if (!v)
        return NULL;
    cdy_value *gv = &tr->t->graph.values[idx];
    if (cdy_op_table[op].kind == 'C' &&
        (gv->compute_dtype = cdy_result_dtype(bound[0]->obj, bound[1]->obj)) < 0) {
        cdy_tr_stop(tr, COMPARE_DTYPE, what);
        return NULL;
    }
    if (add_pynode(tr, fn, args, nargs, kwnames, idx))
        return NULL;
    return v;
}

/* An extern node for fn(*args) whose result on the fakes is out (see trace.h). */
tvar *cdy_extern_node(tracer *tr, PyObject *fn, const char *what, tvar **args, int nargs,
                      PyObject *kwnames, PyObject *out)
{
    int argv[CDY_MAX_NODE_ARGS], ntensors = tensor_args(args, nargs, argv);
    if (ntensors < 0) {
        cdy_tr_stop(tr, TOO_MANY_TENSOR_ARGS, what, CDY_MAX_NODE_ARGS);
        return NULL;
    }
    if (!(out = cdy_meta_cpu_layout(tr, CDY_OP_EXTERN, fn, args, nargs, kwnames, out)))
        return NULL;
    int idx;
    tvar *v = op_node(tr, out, CDY_OP_EXTERN, argv, ntensors, &idx);
    if (!v)
        return NULL;
    return add_pynode(tr, fn, args, nargs, kwnames, idx) ? NULL : v;
}

int cdy_tv_none(const tvar *t)
{
    return !t || (t->kind == TV_CONST && t->obj == Py_None);
}

int cdy_const_int(const tvar *t, long long *out)
{
    if (!t || t->kind != TV_CONST || !PyLong_CheckExact(t->obj))
        return 0;
    int ovf = 0;
    *out = PyLong_AsLongLongAndOverflow(t->obj, &ovf);
    if (ovf || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* The result tvar of lowered call `call` (node v), its pynode recorded. */
tvar *cdy_build_result(tracer *tr, const cdy_build_call *call, int v)
{
    if (add_pynode(tr, call->fn, call->args, call->nargs, call->kwnames, v))
        return NULL;
    return cdy_tensor_tvar(tr, call->out, v);
}

/* The TUPLE tvar of lowered call `call` whose result items are nodes vs[0..n):
 * one pynode for the call, an item pynode per node (as multi_call). */
tvar *cdy_build_result_multi(tracer *tr, const cdy_build_call *call, const int *vs, int n)
{
    if (!PySequence_Check(call->out) || PySequence_Size(call->out) != n ||
        add_pynode(tr, call->fn, call->args, call->nargs, call->kwnames, -1))
        return NULL;
    int base = tr->t->npynodes - 1;
    tvar **items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1));
    if (!items) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        PyObject *fake = cdy_tr_keep(tr, PySequence_GetItem(call->out, i));
        if (!fake) {
            cdy_tr_stop_exc(tr, INTERNAL_IN, call->what);
            return NULL;
        }
        if (add_pynode(tr, NULL, NULL, 0, NULL, vs[i]))
            return NULL;
        tr->t->pynodes[tr->t->npynodes - 1].item = i;
        tr->t->pynodes[tr->t->npynodes - 1].base = base;
        if (!(items[i] = cdy_tensor_tvar(tr, fake, vs[i])))
            return NULL;
    }
    tvar *r = cdy_tv_seq(tr, TV_TUPLE, items, n);
    if (r && PyTuple_Check(call->out) && !PyTuple_CheckExact(call->out))
        r->obj = (PyObject *)Py_TYPE(call->out);
    return r;
}

/* name read from namedtuple TUPLE v that is not a field: a function of its class bound to
 * v (a method of a namedtuple subclass), or a constant of the class (_fields); NULL (no
 * stop) otherwise. */
static tvar *namedtuple_class_attr(tracer *tr, tvar *v, PyObject *name)
{
    PyObject *a = _PyType_Lookup((PyTypeObject *)v->obj, name);
    if (a && cdy_is_const(a))
        return cdy_tv_const(tr, Py_NewRef(a));
    tvar *b = a && PyFunction_Check(a) && cdy_tr_keep(tr, Py_NewRef(a)) ? cdy_tv_new(tr, TV_BOUND)
                                                                         : NULL;
    if (b) {
        b->obj = a;
        b->self = v;
    }
    return b;
}

/* Item `name` of TUPLE v made from a torch.return_types result or a namedtuple
 * (v->obj its type: a field of its __match_args__, else a class attribute), or NULL (not stopped) when none. */
tvar *cdy_seq_field(tracer *tr, tvar *v, PyObject *name)
{
    if (v->kind != TV_TUPLE || !v->obj || !PyType_Check(v->obj))
        return NULL;
    PyObject *fields = PyObject_GetAttrString(v->obj, "__match_args__");
    tvar *r = NULL;
    for (Py_ssize_t i = 0; fields && PyTuple_Check(fields) && i < PyTuple_GET_SIZE(fields) &&
                           i < v->n; i++)
        if (PyUnicode_Compare(PyTuple_GET_ITEM(fields, i), name) == 0)
            r = v->items[i];
    Py_XDECREF(fields);
    PyErr_Clear();
    return r || !cdy_is_namedtuple_class(v->obj) ? r : namedtuple_class_attr(tr, v, name);
}

/* fn(*args) with tensor args as an extern node (see trace.h). */
tvar *cdy_call_extern(tracer *tr, PyObject *fn, const char *what, tvar **args, int nargs)
{
    return tensor_call(tr, CDY_OP_NONE, fn, what, args, nargs, NULL, 0);
}

/* fn(*args, **kw) traced as a torch call: lowered or extern (see trace.h). */
tvar *cdy_call_torch(tracer *tr, PyObject *fn, const char *what, tvar **args, int nargs,
                     PyObject *kwnames)
{
    return tensor_call(tr, CDY_OP_NONE, fn, what, args, nargs, kwnames, 0);
}

/* Record fn(*args) as the call that computes value v (see trace.h). */
int cdy_add_pynode(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames, int v)
{
    return add_pynode(tr, fn, args, nargs, kwnames, v);
}

/* A Python value equal to v for a comparison decided at trace time (new reference): a
 * constant; a class fixed by identity whose metaclass compares by identity; an immutable
 * tuple fixed by identity whose items are constants (sys.version_info, a namedtuple); a
 * TUPLE or LIST of such.  NULL (no error set) for anything else. */
static PyObject *cmp_operand(const tvar *v, int depth)
{
    if (v->kind == TV_CONST)
        return Py_NewRef(v->obj);
    if (v->kind == TV_OBJ && !v->by_type && v->obj) {
        PyObject *o = v->obj;
        if (PyType_Check(o) && Py_TYPE(o)->tp_richcompare == PyBaseObject_Type.tp_richcompare)
            return Py_NewRef(o);
        if (!PyTuple_Check(o) || Py_TYPE(o)->tp_richcompare != PyTuple_Type.tp_richcompare)
            return NULL;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); i++)
            if (!cdy_is_const(PyTuple_GET_ITEM(o, i)))
                return NULL;
        return Py_NewRef(o);
    }
    if ((v->kind != TV_TUPLE && v->kind != TV_LIST) || v->obj || depth > 16)
        return NULL;
    PyObject *r = v->kind == TV_TUPLE ? PyTuple_New(v->n) : PyList_New(v->n);
    for (int i = 0; r && i < v->n; i++) {
        PyObject *x = cmp_operand(v->items[i], depth + 1);
        if (!x) {
            Py_DECREF(r);
            return NULL;
        }
        if (v->kind == TV_TUPLE)
            PyTuple_SET_ITEM(r, i, x);
        else
            PyList_SET_ITEM(r, i, x);
    }
    PyErr_Clear();
    return r;
}

/* fn(*pa) worked out while tracing: its constant result (NULL when stopped: the call
 * raised, or gave no constant). */
static tvar *fold_operator(tracer *tr, PyObject *fn, const char *sym, PyObject *const *pa,
                           size_t n)
{
    PyObject *r = PyObject_Vectorcall(fn, pa, n, NULL);
    if (!r) {
        cdy_tr_stop_exc(tr, RAISED_OPERATOR, sym);
        return NULL;
    }
    if (!cdy_is_const(r)) {
        Py_DECREF(r);
        cdy_tr_stop(tr, OPERATOR_NON_CONST, sym);
        return NULL;
    }
    return cdy_tv_const(tr, r);
}

/* a <sym> b for a comparison (< <= == != > >=) whose operands cmp_operand gives: its
 * constant result, *handled 1 (NULL when stopped: the comparison raised, or gave no
 * constant); *handled 0 for other operators and operands. */
static tvar *fold_compare(tracer *tr, PyObject *fn, const char *sym, tvar **args, int *handled)
{
    static const char *cmp[] = {"<", "<=", "==", "!=", ">", ">=", NULL};
    int is_cmp = 0;
    for (int i = 0; cmp[i]; i++)
        is_cmp |= !strcmp(sym, cmp[i]);
    PyObject *a = is_cmp ? cmp_operand(args[0], 0) : NULL;
    PyObject *b = a ? cmp_operand(args[1], 0) : NULL;
    *handled = b != NULL;
    if (!b) {
        Py_XDECREF(a);
        return NULL;
    }
    PyObject *pa[2] = {a, b};
    tvar *r = fold_operator(tr, fn, sym, pa, 2);
    Py_DECREF(a);
    Py_DECREF(b);
    return r;
}

/* Operator fn on tensors/constants: constants fold, tensors trace. */
tvar *cdy_call_operator(tracer *tr, PyObject *fn, const char *sym, tvar **args, int nargs)
{
    int all_const = 1, any_tensor = 0;
    for (int i = 0; i < nargs; i++) {
        all_const &= args[i]->kind == TV_CONST;
        any_tensor |= args[i]->kind == TV_TENSOR;
    }
    if (all_const) {
        PyObject *pa[3];
        for (int i = 0; i < nargs; i++)
            pa[i] = args[i]->obj;
        return fold_operator(tr, fn, sym, pa, (size_t)nargs);
    }
    if (!any_tensor) {
        int handled;
        tvar *r = nargs == 2 ? fold_compare(tr, fn, sym, args, &handled) : NULL;
        if (nargs != 2 || !handled)
            cdy_tr_stop(tr, OPERATOR_UNSUPPORTED, sym);
        return r;
    }
    return tensor_call(tr, cdy_callable_op(fn), fn, sym, args, nargs, NULL, 0);
}

/* ---- inlining Python functions ------------------------------------------------ */

/* Bind args/kwnames to the parameters of code co (with func's defaults) into
 * locals[]; 0, or -1 when stopped. */
static int bind_args(tracer *tr, tracer *sub, PyFunctionObject *func, tvar **args, int nargs,
                     PyObject *kwnames)
{
    PyCodeObject *co = (PyCodeObject *)func->func_code;
    int npos = co->co_argcount, nkwo = co->co_kwonlyargcount;
    int nkw = kwnames ? (int)PyTuple_GET_SIZE(kwnames) : 0, npass = nargs - nkw;
    int slot_var = npos + nkwo, slot_kw = slot_var + !!(co->co_flags & CO_VARARGS);
    tvar **L = sub->locals;
    for (int i = 0; i < npass && i < npos; i++)
        L[i] = args[i];
    if (npass > npos) {
        if (!(co->co_flags & CO_VARARGS))
            return cdy_tr_stop(tr, CALL_ARG_COUNT, PyUnicode_AsUTF8(co->co_name), npos, npass);
        if (!(L[slot_var] = cdy_tv_seq(tr, TV_TUPLE, args + npos, npass - npos)))
            return -1;
    }
    else if (co->co_flags & CO_VARARGS && !(L[slot_var] = cdy_tv_seq(tr, TV_TUPLE, NULL, 0)))
        return -1;
    tvar *kwdict = NULL;
    if (co->co_flags & CO_VARKEYWORDS) {
        if (!(kwdict = cdy_tv_new(tr, TV_DICT)))
            return -1;
        kwdict->items = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(nkw + 1));
        kwdict->keys = cdy_arena_alloc(&tr->t->arena, sizeof(PyObject *) * (size_t)(nkw + 1));
        if (!kwdict->items || !kwdict->keys)
            return cdy_tr_stop(tr, OUT_OF_MEMORY);
        L[slot_kw] = kwdict;
    }
    for (int k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int slot = -1;
        for (int i = co->co_posonlyargcount; i < npos + nkwo && slot < 0; i++)
            if (PyUnicode_Compare(PyTuple_GET_ITEM(co->co_localsplusnames, i), name) == 0)
                slot = i;
        if (slot >= 0)
            L[slot] = args[npass + k];
        else if (kwdict) {
            kwdict->keys[kwdict->n] = name;
            kwdict->items[kwdict->n++] = args[npass + k];
        }
        else
            return cdy_tr_stop(tr, CALL_UNEXPECTED_KWARG, PyUnicode_AsUTF8(co->co_name),
                               PyUnicode_AsUTF8(name));
    }
    PyObject *defs = func->func_defaults, *kwdefs = func->func_kwdefaults;
    int ndefs = defs ? (int)PyTuple_GET_SIZE(defs) : 0;
    for (int i = 0; i < npos + nkwo; i++) {
        if (L[i])
            continue;
        PyObject *d = NULL;
        if (i < npos && i >= npos - ndefs)
            d = PyTuple_GET_ITEM(defs, i - (npos - ndefs));
        else if (i >= npos && kwdefs)
            d = PyDict_GetItemWithError(kwdefs, PyTuple_GET_ITEM(co->co_localsplusnames, i));
        if (!d)
            return cdy_tr_stop(tr, CALL_MISSING_ARG, PyUnicode_AsUTF8(co->co_name),
                               PyUnicode_AsUTF8(PyTuple_GET_ITEM(co->co_localsplusnames, i)));
        if (!(L[i] = cdy_wrap(tr, d, NULL, 0)))
            return -1;
    }
    return 0;
}

static tvar *inline_call_at(tracer *tr, PyObject *fobj, tvar **args, int nargs,
                            PyObject *kwnames, const cdy_src *func_src, int soft, tvar **cells);

/* Trace a call of Python function func inline (cells: the closure of a
 * function the trace made); its return value, or NULL.  A generator runs to
 * the end and returns an iterator over what it yielded. */
static tvar *inline_call_cells(tracer *tr, PyObject *fobj, tvar **args, int nargs,
                               PyObject *kwnames, const cdy_src *func_src, tvar **cells)
{
    return inline_call_at(tr, fobj, args, nargs, kwnames, func_src, 0, cells);
}

/* inline_call_cells, func_src soft: where a function fixed by convention (a module's
 * forward, reached through its class) lives; only its cells holding objects not fixed by
 * convention are read through it (and guarded). */
static tvar *inline_call_at(tracer *tr, PyObject *fobj, tvar **args, int nargs,
                            PyObject *kwnames, const cdy_src *func_src, int soft, tvar **cells)
{
    PyFunctionObject *func = (PyFunctionObject *)fobj;
    PyCodeObject *co = (PyCodeObject *)func->func_code;
    const int noflags = CO_COROUTINE | CO_ASYNC_GENERATOR;
    if (co->co_flags & noflags) {
        cdy_tr_stop(tr, CALL_GENERATOR, PyUnicode_AsUTF8(co->co_qualname));
        return NULL;
    }
    if (tr->depth >= CDY_MAX_INLINE_DEPTH) {
        cdy_tr_stop(tr, INLINE_TOO_DEEP, CDY_MAX_INLINE_DEPTH);
        return NULL;
    }
    tracer sub;
    memset(&sub, 0, sizeof(sub));
    sub.t = tr->t;
    sub.parent = tr;
    sub.depth = tr->depth + 1;
    sub.co = co;
    sub.globals = func->func_globals;
    sub.builtins = func->func_builtins;
    sub.closure = func->func_closure;
    sub.cells = cells;
    sub.func_src = func_src;
    sub.func_src_soft = soft;
    if ((co->co_flags & CO_GENERATOR) && !(sub.yielded = cdy_tv_seq(tr, TV_LIST, NULL, 0)))
        return NULL;
    sub.guard_globals = !cdy_is_torch_callable(fobj);
    sub.null_var.kind = TV_NULL;
    sub.nlocals = co->co_nlocalsplus;
    sub.locals = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(sub.nlocals + 1));
    if (!sub.locals || !cdy_tr_keep(tr, Py_NewRef(fobj))) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    cdy_sx_passed(tr, args, nargs);   /* its frame's uses of them pin them there */
    if (bind_args(tr, &sub, func, args, nargs, kwnames) || cdy_tr_run_frame(&sub))
        return NULL;
    if (!sub.retval)
        cdy_tr_stop(tr, NO_RETURN);
    return sub.retval;
}

/* inline_call_cells for a function with its own (real) closure. */
static tvar *inline_call(tracer *tr, PyObject *fobj, tvar **args, int nargs, PyObject *kwnames,
                         const cdy_src *func_src)
{
    PyObject *orig = cdy_optim_undisable(fobj);   /* torch.compile disabled _init_group */
    if (orig != fobj)
        return inline_call_cells(tr, orig, args, nargs, kwnames, NULL, NULL);
    return inline_call_cells(tr, fobj, args, nargs, kwnames, func_src, NULL);
}

/* See trace.h. */
tvar *cdy_inline_result(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames)
{
    return inline_call(tr, fn, args, nargs, kwnames, NULL);
}

/* See trace.h. */
tvar *cdy_inline(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *r = inline_call(tr, fn, args, nargs, kwnames, NULL);
    cdy_sx_pin_deep(tr, r, "the code read the size and returned it to the tracer");
    return r;   /* its caller uses the value in C: no symbolic int follows it */
}

/* A constant tuple for v when it is a sequence of constants (so pure builtins such
 * as all/any/sum/min/max can fold over it; const_items); else v itself. */
static tvar *as_const_seq(tracer *tr, tvar *v)
{
    tvar *l = v->kind == TV_VIEW ? cdy_view_list(tr, v) : NULL;   /* what the view shows now */
    if (l)
        v = l;
    else if (v->kind == TV_VIEW)
        return v;
    if (v->kind != TV_TUPLE && v->kind != TV_LIST && v->kind != TV_ITER)
        return v;
    int start = v->kind == TV_ITER ? v->pos : 0;
    PyObject *t = const_items(v->items + start, v->n - start, 0);
    tvar *c = t ? cdy_tv_const(tr, t) : NULL;
    return c ? c : v;
}

/* 1 if module m has no hooks of its own and no global module hooks are set. */
static int module_has_hooks(PyObject *m)
{
    static const char *own[] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                "_backward_pre_hooks", NULL};
    PyObject **dp = _PyObject_GetDictPtr(m);
    for (int i = 0; dp && *dp && own[i]; i++) {
        PyObject *d = PyDict_GetItemString(*dp, own[i]);
        if (d && PyDict_Check(d) && PyDict_GET_SIZE(d) > 0)
            return 1;
    }
    for (int i = 0; i < 4; i++)
        if (global_hook_dicts[i] && PyDict_Check(global_hook_dicts[i]) &&
            PyDict_GET_SIZE(global_hook_dicts[i]) > 0)
            return 1;
    return 0;
}


/* first followed by args[0..nargs), in the trace's arena (a call of any
 * length); NULL when stopped. */
static tvar **prepend_arg(tracer *tr, tvar *first, tvar **args, int nargs)
{
    return cdy_prepend(tr, first, args, nargs);
}

/* See trace.h. */
tvar **cdy_prepend(tracer *tr, tvar *first, tvar **args, int nargs)
{
    tvar **all = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(nargs + 1));
    if (!all) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    all[0] = first;
    if (nargs)
        memcpy(all + 1, args, sizeof(tvar *) * (size_t)nargs);
    return all;
}
/* Where module mod's forward fwd lives (mod.forward.__func__), when fwd has a closure
 * (a decorator's wrapper installed on the class) and mod a source short enough for its
 * cells' contents to be read through it; else NULL. */
static const cdy_src *forward_src(tracer *tr, tvar *mod, PyObject *fwd)
{
    static PyObject *str_func;
    PyCodeObject *co = (PyCodeObject *)PyFunction_GET_CODE(fwd);
    if (!mod->src || !co->co_nfreevars || mod->src->nattrs > CDY_MAX_ATTRS - 12)
        return NULL;
    if (!str_func && !(str_func = PyUnicode_InternFromString("__func__"))) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *bound = PyObject_GetAttr(mod->obj, str_forward);
    int same = bound && PyMethod_Check(bound) && PyMethod_GET_FUNCTION(bound) == fwd;
    Py_XDECREF(bound);
    PyErr_Clear();
    const cdy_src *m = same ? cdy_src_step(tr, mod->src, str_forward, 0) : NULL;
    return m ? cdy_src_step(tr, m, str_func, 0) : NULL;
}

/* Call of an nn.Module: its forward inlined with the module as self. */
static tvar *call_module(tracer *tr, tvar *mod, tvar **args, int nargs, PyObject *kwnames)
{
    if (module_has_hooks(mod->obj)) {
        cdy_tr_stop(tr, MODULE_HOOKS, Py_TYPE(mod->obj)->tp_name);
        return NULL;
    }
    PyObject *fwd = _PyType_Lookup(Py_TYPE(mod->obj), str_forward);
    if (!fwd || !PyFunction_Check(fwd)) {
        PyErr_Clear();
        cdy_tr_stop(tr, MODULE_NO_FORWARD, Py_TYPE(mod->obj)->tp_name);
        return NULL;
    }
    tvar **all = prepend_arg(tr, mod, args, nargs);
    return all ? inline_call_at(tr, fwd, all, nargs + 1, kwnames, forward_src(tr, mod, fwd), 1,
                                NULL) : NULL;
}

/* ---- builtins and container methods -------------------------------------------- */

/* Python type that a tvar's value has (borrowed). */
static PyObject *tvar_type(tvar *v)
{
    return cdy_tvar_type(v);
}

/* See trace.h. */
PyObject *cdy_tvar_type(tvar *v)
{
    static PyObject *partial_type;
    if (!partial_type) {
        PyObject *ft = PyImport_ImportModule("functools");
        partial_type = ft ? PyObject_GetAttrString(ft, "partial") : NULL;
        Py_XDECREF(ft);
        PyErr_Clear();
    }
    switch (v->kind) {
    case TV_TENSOR: return (PyObject *)v->tp;
    case TV_TUPLE: return v->obj && PyType_Check(v->obj) && PyType_IsSubtype(
                              (PyTypeObject *)v->obj, &PyTuple_Type) ? v->obj
                                                                     : (PyObject *)&PyTuple_Type;
    case TV_LIST: return (PyObject *)&PyList_Type;
    case TV_DICT: return v->obj ? v->obj : (PyObject *)&PyDict_Type;
    case TV_INST: return v->obj;
    case TV_SET: return (PyObject *)&PySet_Type;
    case TV_PARTIAL: return partial_type ? partial_type : (PyObject *)&PyBaseObject_Type;
    case TV_BMETH: return (PyObject *)&PyCFunction_Type;
    case TV_VIEW: return (PyObject *)(v->pos == 0 ? &PyDictKeys_Type : v->pos == 1 ? &PyDictValues_Type
                                                                   : &PyDictItems_Type);
    default: return v->obj ? (PyObject *)Py_TYPE(v->obj) : (PyObject *)&PyBaseObject_Type;
    }
}

/* type(v): an object read from the frame gives v.__class__ (a source: the class is guarded by
 * identity, so its attributes can be read); otherwise the type fixed by v's guard or value. */
static tvar *type_of(tracer *tr, tvar *v)
{
    static PyObject *str_class;
    if (!str_class && !(str_class = PyUnicode_InternFromString("__class__")))
        return NULL;
    PyObject *tp = tvar_type(v);
    if (v->kind == TV_OBJ && v->src &&
        _PyType_Lookup(Py_TYPE(v->obj), str_class) == _PyType_Lookup(&PyBaseObject_Type, str_class)) {
        const cdy_src *src = cdy_src_step(tr, v->src, str_class, 0);
        if (src)
            return cdy_wrap(tr, tp, src, 1);
    }
    if (v->kind == TV_NULL || v->kind == TV_METHOD || v->kind == TV_BOUND || v->kind == TV_ITER ||
        v->kind == TV_CELL || v->kind == TV_FUNC || v->kind == TV_SUPER ||
        (v->kind == TV_TUPLE && v->obj)) {
        cdy_tr_stop(tr, TYPE_OF_VALUE);
        return NULL;
    }
    tvar *r = cdy_tr_keep(tr, Py_NewRef(tp)) ? cdy_tv_new(tr, TV_OBJ) : NULL;
    if (r)
        r->obj = tp;
    return r;
}

/* See trace.h. */
cdy_guard *cdy_tr_guard_expect(tracer *tr, int kind, tvar *obj, PyObject *expect)
{
    char desc[CDY_DESC_LEN] = "";
    cdy_src_name(obj->src, tr->t->top_code, desc, sizeof(desc));
    cdy_guard *g = cdy_guards_add(&tr->t->guards, kind, obj->src, desc);
    if (!g) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    g->expect = Py_NewRef(expect);
    g->requires_grad = 0;
    return g;
}

/* A HASATTR guard: obj (guarded by type) has no attribute name; 0, or -1 when stopped. */
static int cdy_guard_absent(tracer *tr, tvar *obj, PyObject *name)
{
    return cdy_tr_guard_expect(tr, CDY_GUARD_HASATTR, obj, name) ? 0 : -1;
}

/* See trace.h. */
tvar *cdy_call_dunder(tracer *tr, tvar *self, const char *name)
{
    PyObject *fn = PyObject_GetAttrString((PyObject *)Py_TYPE(self->obj), name);
    tvar *f = fn && PyFunction_Check(fn) && cdy_tr_keep(tr, fn) ? cdy_tv_new(tr, TV_OBJ) : NULL;
    if (!f) {
        if (fn && !PyFunction_Check(fn))
            Py_DECREF(fn);
        PyErr_Clear();
        if (tr->t->status == CDY_TRACE_OK)
            cdy_tr_stop(tr, GUARDED_BY_TYPE, name, Py_TYPE(self->obj)->tp_name);
        return NULL;
    }
    f->obj = fn;
    return cdy_call(tr, f, &self, 1, NULL);
}

/* 1 if fn is a pure builtin or math function we may evaluate on constants. */
static int foldable_fn(PyObject *fn)
{
    static const char *ok[] = {"abs", "min", "max", "len", "round", "pow", "divmod", "sum",
                               "all", "any", "sorted", "hash", "repr", "ascii", "format",
                               "chr", "ord", "bin", "hex", "oct", NULL};
    if (fn == (PyObject *)&PyFloat_Type || fn == (PyObject *)&PyLong_Type ||
        fn == (PyObject *)&PyBool_Type || fn == (PyObject *)&PyUnicode_Type ||
        fn == (PyObject *)&PyTuple_Type || fn == (PyObject *)&PyRange_Type ||
        fn == (PyObject *)&PySlice_Type || cdy_is_info_type(fn))
        return 1;
    if (!PyCFunction_Check(fn))
        return 0;
    PyObject *self = PyCFunction_GET_SELF(fn);
    if (self && (PyUnicode_CheckExact(self) || PyTuple_Check(self) || PyBytes_CheckExact(self)) &&
        cdy_is_const(self))
        return 1;   /* a method of a str, bytes, tuple or torch.Size constant: pure */
    if (!self || !PyModule_Check(self))
        return 0;
    const char *mod = PyModule_GetName(self);
    if (!mod) {
        PyErr_Clear();
        return 0;
    }
    if (!strcmp(mod, "math"))
        return 1;
    if (strcmp(mod, "builtins"))
        return 0;
    const char *name = ((PyCFunctionObject *)fn)->m_ml->ml_name;
    for (int i = 0; ok[i]; i++)
        if (!strcmp(name, ok[i]))
            return 1;
    return 0;
}

/* 1 if builtin fn iterates its first argument (sum, min, max, all, any, sorted). */
static int iterating_builtin(PyObject *fn)
{
    static const char *names[] = {"sum", "min", "max", "all", "any", "sorted", NULL};
    if (!PyCFunction_Check(fn) || PyCFunction_GET_SELF(fn) != builtins_mod)
        return 0;
    for (int i = 0; names[i]; i++)
        if (!strcmp(((PyCFunctionObject *)fn)->m_ml->ml_name, names[i]))
            return 1;
    return 0;
}

/* Name of builtin function fn, or "" if it is not a builtins function. */
static const char *builtin_name(PyObject *fn)
{
    if (PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) == builtins_mod)
        return ((PyCFunctionObject *)fn)->m_ml->ml_name;
    if (fn == (PyObject *)&PyTuple_Type)
        return "tuple";
    if (fn == (PyObject *)&PyList_Type)
        return "list";
    if (fn == (PyObject *)&PyEnum_Type)
        return "enumerate";
    if (fn == (PyObject *)&PyZip_Type)
        return "zip";
    if (fn == (PyObject *)&PyReversed_Type)
        return "reversed";
    return "";
}

/* sum(iterable[, start]) over symbolic items with a tensor among them: start + a0 + a1 ...
 * through the traced `+`, as Python's sum adds them; *handled 0 when no item is a tensor
 * (then it folds on constants, or stops). */
static tvar *sum_items(tracer *tr, tvar **args, int nargs, int *handled)
{
    tvar *it = cdy_iterate(tr, args[0]);
    if (!it)
        return NULL;
    int any_tensor = 0;
    for (int i = it->pos; i < it->n; i++)
        any_tensor |= it->items[i]->kind == TV_TENSOR;
    if (!any_tensor) {
        *handled = 0;
        return NULL;
    }
    PyObject *add = cdy_operator_fn(0, "add");
    tvar *acc = nargs == 2 ? args[1] : cdy_tv_const(tr, PyLong_FromLong(0));
    for (int i = it->pos; acc && add && i < it->n; i++) {
        tvar *pair[2] = {acc, it->items[i]};
        acc = cdy_call_operator(tr, add, "+", pair, 2);
    }
    it->pos = it->n;   /* consumed */
    if (!add)
        cdy_tr_stop_exc(tr, PY_ERROR);
    return add ? acc : NULL;
}

/* The class tvar v stands for when it is one fixed by identity (borrowed), else NULL. */
static PyObject *fixed_class(const tvar *v)
{
    return (v->kind == TV_OBJ || v->kind == TV_CONST) && !v->by_type && v->obj &&
           PyType_Check(v->obj) ? v->obj : NULL;
}

/* issubclass(a, b) of classes fixed by identity (b a class or a tuple of them): a
 * constant; NULL when stopped (CALL_UNSUPPORTED for other operands, or it raised). */
static tvar *do_issubclass(tracer *tr, tvar **args)
{
    PyObject *a = fixed_class(args[0]), *b = fixed_class(args[1]);
    if (a && !b && args[1]->kind == TV_TUPLE && !args[1]->obj) {
        b = cdy_tr_keep(tr, PyTuple_New(args[1]->n));
        for (int i = 0; b && i < args[1]->n; i++) {
            PyObject *c = fixed_class(args[1]->items[i]);
            if (!c) {
                b = NULL;
                break;
            }
            PyTuple_SET_ITEM(b, i, Py_NewRef(c));
        }
    }
    PyErr_Clear();
    if (!a || !b) {
        static const char name[] = "issubclass";
        cdy_tr_stop(tr, CALL_UNSUPPORTED, name);
        return NULL;
    }
    int r = PyObject_IsSubclass(a, b);
    if (r < 0) {
        cdy_tr_stop_exc(tr, RAISED_ISINSTANCE);
        return NULL;
    }
    return cdy_tv_const(tr, PyBool_FromLong(r));
}

/* len(d) of a dict subclass instance d guarded by type, whose length is
 * dict's (a ModelOutput's): a constant, guarded (LEN); NULL when stopped. */
static tvar *by_type_dict_len(tracer *tr, tvar *d)
{
    static const char *const what = "len()";
    Py_ssize_t n = PyDict_GET_SIZE(d->obj);
    cdy_guard *g = n <= INT_MAX ? cdy_tr_guard_expect(tr, CDY_GUARD_LEN, d, (PyObject *)Py_TYPE(d->obj))
                               : NULL;
    if (!g) {
        if (tr->t->status == CDY_TRACE_OK)
            cdy_tr_stop(tr, GUARDED_BY_TYPE, what, Py_TYPE(d->obj)->tp_name);
        return NULL;
    }
    g->ndim = (int)n;
    return cdy_tv_const(tr, PyLong_FromSsize_t(n));
}

/* Builtins that take symbolic values; NULL with no stop when fn is not one. */
static tvar *call_builtin(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames,
                          int *handled)
{
    const char *n = builtin_name(fn);
    int nkw = kwnames ? (int)PyTuple_GET_SIZE(kwnames) : 0;
    *handled = 1;
    if (!strcmp(n, "len") && nargs == 1) {
        tvar *a = args[0];
        long k = -1;
        if (a->by_type && a->src && PyDict_Check(a->obj) && Py_TYPE(a->obj)->tp_as_mapping &&
            Py_TYPE(a->obj)->tp_as_mapping->mp_length == PyDict_Type.tp_as_mapping->mp_length)
            return by_type_dict_len(tr, a);
        if (a->by_type)   /* the length is the instance's: its __len__, traced */
            return cdy_call_dunder(tr, a, "__len__");
        if (a->kind == TV_INST) {
            int h;
            tvar *r = cdy_obj_dunder(tr, a, "__len__", NULL, 0, &h);
            if (h || tr->t->status != CDY_TRACE_OK)
                return r;
            if (a->store)
                return cdy_tv_const(tr, PyLong_FromLong(a->store->n));
            cdy_tr_stop(tr, OBJ_NO_LEN, ((PyTypeObject *)a->obj)->tp_name);
            return NULL;
        }
        if (a->kind == TV_TUPLE || a->kind == TV_LIST || a->kind == TV_DICT || a->kind == TV_SET)
            k = a->n;
        else if (a->kind == TV_VIEW)
            k = a->self->n;
        else if (a->kind == TV_TENSOR || a->kind == TV_CONST || a->kind == TV_OBJ)
            k = PyObject_Length(a->obj);
        if (a->kind == TV_CONST)
            cdy_sx_taken(tr, a);   /* a size tuple's length is its ndim at every size */
        if (k < 0) {
            cdy_tr_stop_exc(tr, RAISED_LEN);
            return NULL;
        }
        int sx = a->kind == TV_TENSOR ? cdy_sx_dim(tr, a, 0) : 0;
        if (sx)   /* dim 0: a symbolic int (trace/symint.c) */
            return cdy_sx_tag(tr, cdy_tv_const(tr, PyLong_FromLong(k)), sx);
        if (a->kind == TV_TENSOR)
            cdy_tr_pin(tr, a->value, 1, "the code read len()");
        return cdy_tv_const(tr, PyLong_FromLong(k));
    }
    if (!strcmp(n, "isinstance") && nargs == 2 && (args[1]->obj || args[1]->kind == TV_TUPLE)) {
        PyObject *cls = args[1]->obj ? Py_NewRef(args[1]->obj) : PyTuple_New(args[1]->n);
        for (int i = 0; !args[1]->obj && cls && i < args[1]->n; i++)
            PyTuple_SET_ITEM(cls, i, Py_NewRef(args[1]->items[i]->obj ? args[1]->items[i]->obj : Py_None));
        int r = cls ? PyObject_IsSubclass(tvar_type(args[0]), cls) : -1;
        Py_XDECREF(cls);
        cdy_sx_taken(tr, args[0]);   /* the type of a symbolic int is int at every size */
        if (r < 0) {
            cdy_tr_stop_exc(tr, RAISED_ISINSTANCE);
            return NULL;
        }
        return cdy_tv_const(tr, PyBool_FromLong(r));
    }
    if (!strcmp(n, "issubclass") && nargs == 2 && !nkw)
        return do_issubclass(tr, args);
    if ((!strcmp(n, "getattr") || !strcmp(n, "hasattr")) && nargs >= 2 && !nkw &&
        args[1]->kind == TV_CONST && PyUnicode_Check(args[1]->obj) && args[0]->kind == TV_FUNC) {
        int stored = args[0]->store ? cdy_dict_find(tr, args[0]->store, args[1]->obj) : -1;
        int has = stored >= 0 || cdy_pc_has_attr(args[0]->obj, args[1]->obj);
        if (stored == -2)
            return NULL;
        if (!strcmp(n, "hasattr"))
            return cdy_tv_const(tr, PyBool_FromLong(has));
        if (!has && nargs == 3)
            return args[2];
        return cdy_func_attr(tr, args[0], args[1]->obj);
    }
    if ((!strcmp(n, "getattr") || !strcmp(n, "hasattr")) && nargs >= 2 && !nkw &&
        args[1]->kind == TV_CONST && PyUnicode_Check(args[1]->obj) && args[0]->kind == TV_INST) {
        tvar *val = NULL;
        int has = cdy_obj_hasattr(tr, args[0], args[1]->obj, &val);
        if (has < 0)
            return NULL;
        if (!strcmp(n, "hasattr"))
            return cdy_tv_const(tr, PyBool_FromLong(has));
        if (!has && nargs == 3)
            return args[2];
        return has ? val : cdy_obj_getattr(tr, args[0], args[1]->obj);
    }
    if ((!strcmp(n, "getattr") || !strcmp(n, "hasattr")) && nargs >= 2 && !nkw &&
        args[1]->kind == TV_CONST && PyUnicode_Check(args[1]->obj)) {
        PyObject *probe = args[0]->obj;
        int has = probe ? cdy_pc_has_attr(probe, args[1]->obj) : 0;
        int is_has = !strcmp(n, "hasattr");
        /* an object guarded by type: absent stays absent (a guard), present is read (its guard) */
        if (args[0]->by_type && !has && (is_has || nargs == 3) &&
            cdy_guard_absent(tr, args[0], args[1]->obj))
            return NULL;
        if (args[0]->by_type && has && is_has)
            return cdy_get_attr(tr, args[0], args[1]->obj) ? cdy_tv_const(tr, Py_NewRef(Py_True))
                                                           : NULL;
        if (is_has)
            return cdy_tv_const(tr, PyBool_FromLong(has));
        if (!has && nargs == 3)
            return args[2];
        return cdy_get_attr(tr, args[0], args[1]->obj);
    }
    if ((!strcmp(n, "tuple") || !strcmp(n, "list")) && nargs <= 1) {
        tvar *it = nargs ? cdy_iterate(tr, args[0]) : cdy_tv_seq(tr, TV_ITER, NULL, 0);
        return it ? cdy_tv_seq(tr, n[0] == 't' ? TV_TUPLE : TV_LIST, it->items + it->pos,
                               it->n - it->pos) : NULL;
    }
    if (!strcmp(n, "reversed") && nargs == 1) {
        tvar *it = cdy_iterate(tr, args[0]);
        if (!it)
            return NULL;
        tvar **rev = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(it->n + 1));
        for (int i = 0; rev && i < it->n - it->pos; i++)
            rev[i] = it->items[it->n - 1 - i];
        return rev ? cdy_tv_seq(tr, TV_ITER, rev, it->n - it->pos) : NULL;
    }
    if (!strcmp(n, "enumerate") && nargs >= 1 && !nkw) {
        tvar *it = cdy_iterate(tr, args[0]);
        long start = nargs > 1 && args[1]->kind == TV_CONST ? PyLong_AsLong(args[1]->obj) : 0;
        if (!it)
            return NULL;
        int m = it->n - it->pos;
        tvar **pairs = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(m + 1));
        for (int i = 0; pairs && i < m; i++) {
            tvar *p[2] = {cdy_tv_const(tr, PyLong_FromLong(start + i)), it->items[it->pos + i]};
            if (!p[0] || !(pairs[i] = cdy_tv_seq(tr, TV_TUPLE, p, 2)))
                return NULL;
        }
        return pairs ? cdy_tv_seq(tr, TV_ITER, pairs, m) : NULL;
    }
    if (!strcmp(n, "zip") && nargs >= 1 && !nkw && nargs <= 8) {
        tvar *its[8];
        int m = 1 << 30;
        for (int i = 0; i < nargs; i++) {
            if (!(its[i] = cdy_iterate(tr, args[i])))
                return NULL;
            if (its[i]->n - its[i]->pos < m)
                m = its[i]->n - its[i]->pos;
        }
        tvar **tuples = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(m + 1));
        for (int k = 0; tuples && k < m; k++) {
            tvar *row[8];
            for (int i = 0; i < nargs; i++)
                row[i] = its[i]->items[its[i]->pos + k];
            if (!(tuples[k] = cdy_tv_seq(tr, TV_TUPLE, row, nargs)))
                return NULL;
        }
        return tuples ? cdy_tv_seq(tr, TV_ITER, tuples, m) : NULL;
    }
    if (!strcmp(n, "sum") && nargs >= 1 && nargs - nkw <= 2 && args[0]->kind != TV_CONST &&
        (!nkw || (nkw == 1 && nargs == 2 && !PyUnicode_CompareWithASCIIString(
                                                  PyTuple_GET_ITEM(kwnames, 0), "start"))))
        return sum_items(tr, args, nargs, handled);
    if (!strcmp(n, "delattr") && nargs == 2 && !nkw && args[1]->kind == TV_CONST &&
        PyUnicode_Check(args[1]->obj) && args[0]->kind == TV_INST)
        return cdy_obj_delattr(tr, args[0], args[1]->obj) ? NULL : cdy_tv_const(tr, Py_NewRef(Py_None));
    if (!strcmp(n, "setattr") && nargs == 3 && !nkw && args[1]->kind == TV_CONST &&
        PyUnicode_Check(args[1]->obj))   /* as obj.name = v */
        return cdy_mut_store_attr(tr, args[0], args[1]->obj, args[2]) ? NULL
                                                                       : cdy_tv_const(tr, Py_NewRef(Py_None));
    if (!strcmp(n, "print")) {
        cdy_tr_stop(tr, PRINT);
        return NULL;
    }
    *handled = 0;
    return NULL;
}

tvar *cdy_view_list(tracer *tr, tvar *view)
{
    tvar *d = view->self;
    tvar **out = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(d->n + 1));
    if (!out) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    for (int i = 0; i < d->n; i++) {
        tvar *k = view->pos == 1 ? NULL : cdy_tv_const(tr, Py_NewRef(d->keys[i]));
        tvar *p[2] = {k, d->items[i]};
        out[i] = view->pos == 0 ? k : view->pos == 1 ? d->items[i] : cdy_tv_seq(tr, TV_TUPLE, p, 2);
        if (!out[i])
            return NULL;
    }
    return cdy_tv_seq(tr, TV_LIST, out, d->n);
}

/* Short text naming a callable, for reasons. */
static void callable_name(PyObject *fn, char *buf, size_t n)
{
    PyObject *q = PyObject_GetAttrString(fn, "__qualname__");
    if (!q) {
        PyErr_Clear();
        q = PyObject_Repr(fn);
    }
    snprintf(buf, n, "%s", q && PyUnicode_Check(q) ? PyUnicode_AsUTF8(q) : "?");
    Py_XDECREF(q);
    PyErr_Clear();
}

/* 1 if v names the CPU as a device (a torch.device, a str, None: no move), 0 another
 * device, -1 when v is no device. */
static int cpu_device(tvar *v)
{
    static PyObject *device_type;
    if (!device_type && !(device_type = PyObject_GetAttrString(cdy_torch, "device")))
        return PyErr_Clear(), -1;
    if (v->kind != TV_CONST && v->kind != TV_OBJ)
        return -1;
    PyObject *d = v->obj, *dev = NULL;
    if (d == Py_None)
        return 1;
    if (PyUnicode_Check(d))
        dev = PyObject_CallOneArg(device_type, d);
    else if (PyObject_TypeCheck(d, (PyTypeObject *)device_type))
        dev = Py_NewRef(d);
    else
        return -1;
    PyObject *type = dev ? PyObject_GetAttrString(dev, "type") : NULL;
    int r = type && PyUnicode_Check(type) ? !PyUnicode_CompareWithASCIIString(type, "cpu") : -1;
    Py_XDECREF(dev);
    Py_XDECREF(type);
    PyErr_Clear();
    return r;
}

/* Tensor.to(...) / .cpu(): a move to the CPU, where the tensor is, is no move: the
 * call without its device (and non_blocking) is traced, and with nothing left
 * (no dtype, copy, memory_format) it is the tensor itself, as eager returns it.
 * *handled 0 when the call names no device. */
static tvar *tensor_to(tracer *tr, const char *name, tvar **args, int nargs, PyObject *kwnames,
                       int *handled)
{
    int nkw = kwnames ? (int)PyTuple_GET_SIZE(kwnames) : 0, np = nargs - nkw;
    *handled = 0;
    if (!strcmp(name, "cpu")) {
        *handled = nargs == 1 + nkw;   /* cpu(memory_format=...) is rare: torch runs it */
        return *handled && !nkw ? args[0] : NULL;
    }
    tvar *keep[CDY_MAX_CALL_ARGS];
    PyObject *names = PyList_New(0);
    int n = 0, moved = 0;
    if (!names)
        return NULL;
    for (int i = 0; i < nargs && n < CDY_MAX_CALL_ARGS; i++) {
        const char *kw = i >= np ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i - np)) : NULL;
        int dev = (!kw && i == 1) || (kw && !strcmp(kw, "device")) ? cpu_device(args[i]) : -1;
        if (dev == 0) {   /* another device: eager moves it; we cannot */
            Py_DECREF(names);
            *handled = 1;
            cdy_tr_stop(tr, DEVICE_MOVE, name);
            return NULL;
        }
        if (dev == 1 || (kw && !strcmp(kw, "non_blocking"))) {
            moved |= dev == 1;
            continue;
        }
        if (!kw && i == 2 && moved && np >= 3 && args[1]->kind != TV_TENSOR) {
            keep[n++] = args[i];   /* to(device, dtype, ...): dtype goes on positionally */
            continue;
        }
        if (kw && PyList_Append(names, PyTuple_GET_ITEM(kwnames, i - np)) < 0) {
            Py_DECREF(names);
            return NULL;
        }
        keep[n++] = args[i];
    }
    if (!moved) {
        Py_DECREF(names);
        return NULL;
    }
    *handled = 1;
    if (n == 1) {   /* only self: x.to("cpu") is x */
        Py_DECREF(names);
        return args[0];
    }
    PyObject *kwt = PyList_GET_SIZE(names) ? PyList_AsTuple(names) : NULL;
    Py_DECREF(names);
    if (kwt && !cdy_tr_keep(tr, kwt))
        return NULL;
    tvar *m = cdy_tv_new(tr, TV_METHOD);
    if (!m || !(m->obj = cdy_tr_keep(tr, PyUnicode_FromString("to"))))
        return NULL;
    m->self = args[0];
    return cdy_call(tr, m, keep, n, kwt);
}

/* A Tensor method call self.name(*args). */
/* x.repeat(*sizes) (args[0] x): cdynamo._autograd.tensor_repeat inlined (views and a
 * copy, so symbolic sizes stay symbolic), when its sizes cover x's dims; else the
 * extern (eager raises).  NULL when stopped. */
static tvar *tensor_repeat(tracer *tr, tvar **args, int nargs)
{
    static PyObject *helper;
    if (!helper) {
        PyObject *am = PyImport_ImportModule("cdynamo._autograd");
        helper = am ? PyObject_GetAttrString(am, "tensor_repeat") : NULL;
        Py_XDECREF(am);
        if (!helper) {
            cdy_tr_stop_exc(tr, PY_ERROR);
            return NULL;
        }
    }
    int nrep = nargs - 1;
    if (nargs == 2 && (args[1]->kind == TV_TUPLE || args[1]->kind == TV_LIST))
        nrep = args[1]->n;
    else if (nargs == 2 && args[1]->kind == TV_CONST && PyTuple_Check(args[1]->obj))
        nrep = (int)PyTuple_GET_SIZE(args[1]->obj);
    int ndim = tr->t->graph.values[args[0]->value].meta.ndim;
    if (nrep < ndim || nrep > CDY_MAX_NDIM / 2) {
        PyObject *fn = cdy_tr_keep(tr, PyObject_GetAttrString(cdy_tensor_type, "repeat"));
        return fn ? tensor_call(tr, CDY_OP_NONE, fn, "Tensor.repeat", args, nargs, NULL, 0) : NULL;
    }
    return inline_call(tr, helper, args, nargs, NULL, NULL);
}

static tvar *tensor_method(tracer *tr, tvar *m, tvar **args, int nargs, PyObject *kwnames)
{
    const char *name = PyUnicode_AsUTF8(m->obj);
    char what[96];
    snprintf(what, sizeof(what), "Tensor.%s", name);
    size_t len = strlen(name);
    if (data_dependent(name)) {
        cdy_tr_stop(tr, NEEDS_DATA, what);
        return NULL;
    }
    int routed;
    tvar *dr = cdy_optim_method(tr, m->obj, args, nargs, kwnames, &routed);   /* addcdiv_ */
    if (routed)
        return dr;
    if (!strcmp(name, "to") || !strcmp(name, "cpu")) {
        int handled;
        tvar *r = tensor_to(tr, name, args, nargs, kwnames, &handled);
        if (handled || tr->t->status != CDY_TRACE_OK)
            return r;
    }
    if (len > 1 && name[len - 1] == '_' && name[len - 2] != '_')
        return cdy_mut_method(tr, m->obj, args, nargs, kwnames);   /* functionalized */
    if (!strcmp(name, "repeat") && !kwnames)
        return tensor_repeat(tr, args, nargs);
    if (!strcmp(name, "__setitem__") && nargs == 3 && !kwnames)
        return cdy_mut_setitem(tr, args[0], args[1], args[2]) ? NULL
                                                              : cdy_tv_const(tr, Py_NewRef(Py_None));
    PyObject *fn = cdy_tr_keep(tr, PyObject_GetAttr(cdy_tensor_type, m->obj));
    if (!fn) {
        cdy_tr_stop_exc(tr, NO_TENSOR_METHOD, what);
        return NULL;
    }
    int op = cdy_callable_method_op(m->obj), self = op >= 0 ? cdy_op_self_pos(op) : 0;
    if (self > 0 && nargs == cdy_op_table[op].nargs && !kwnames) {
        /* self fills the op's `input`: x.where(cond, y) is torch.where(cond, x, y) */
        tvar *re[CDY_MAX_NODE_ARGS];
        for (int i = 0; i < nargs; i++)
            re[i] = i < self ? args[i + 1] : i == self ? args[0] : args[i];
        PyObject *tf = cdy_tr_keep(tr, PyObject_GetAttrString(cdy_torch, cdy_op_table[op].name));
        return tf ? tensor_call(tr, op, tf, what, re, nargs, NULL, 0) : NULL;
    }
    return tensor_call(tr, op, fn, what, args, nargs, kwnames, meta_query(name));
}

/* A METHOD read by LOAD_ATTR (pos = 1): call it with its self prepended.  NULL when stopped. */
static tvar *call_bound_method(tracer *tr, tvar *m, tvar **args, int nargs, PyObject *kwnames)
{
    tvar *um = cdy_tv_new(tr, TV_METHOD);
    tvar **all = um ? prepend_arg(tr, m->self, args, nargs) : NULL;
    if (!all)
        return NULL;
    um->obj = m->obj;
    um->self = m->self;
    return cdy_call(tr, um, all, nargs + 1, kwnames);
}

/* *args with sequences of constants made constants, when that makes every
 * argument a constant (1; *args then points into the trace's arena); else 0
 * (also when stopped: out of memory). */
static int fold_args(tracer *tr, tvar ***args, int nargs)
{
    tvar **conv = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(nargs + 1));
    if (!conv)
        return cdy_tr_stop(tr, OUT_OF_MEMORY), 0;
    for (int i = 0; i < nargs; i++)
        if ((conv[i] = as_const_seq(tr, (*args)[i]))->kind != TV_CONST)
            return 0;
    *args = conv;
    return 1;
}

/* The LIST of the items of list l (a folded call's result, stolen), each a constant;
 * NULL when stopped (an item is not a constant: FOLD_NON_CONST, name). */
static tvar *const_list(tracer *tr, PyObject *l, const char *name)
{
    Py_ssize_t n = PyList_GET_SIZE(l);
    tvar **items = cdy_tr_keep(tr, l) ? cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(n + 1))
                                      : NULL;
    if (!items) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PyList_GET_ITEM(l, i);
        if (!cdy_is_const(o)) {
            cdy_tr_stop(tr, FOLD_NON_CONST, name);
            return NULL;
        }
        if (!(items[i] = cdy_tv_const(tr, Py_NewRef(o))))
            return NULL;
    }
    return cdy_tv_seq(tr, TV_LIST, items, (int)n);
}

/* fn(*args) run now, all arguments constants: its constant result; NULL when
 * stopped (fn raised: eager raises it too; or the result is not a constant). */
static tvar *fold_call(tracer *tr, PyObject *fn, const char *name, tvar **args, int nargs,
                       PyObject *kwnames)
{
    PyObject **pa = cdy_arena_alloc(&tr->t->arena, sizeof(PyObject *) * (size_t)(nargs + 1));
    if (!pa) {
        cdy_tr_stop(tr, OUT_OF_MEMORY);
        return NULL;
    }
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (int i = 0; i < nargs; i++)
        pa[i] = args[i]->obj;
    PyObject *res = PyObject_Vectorcall(fn, pa, (size_t)(nargs - nkw), kwnames);
    if (!res) {
        cdy_tr_stop_exc(tr, RAISED_CALL, name);
        return NULL;
    }
    if (PyList_CheckExact(res))   /* "a_b".split("_"): a fresh list of constants */
        return const_list(tr, res, name);
    if (!cdy_is_const(res)) {
        Py_DECREF(res);
        cdy_tr_stop(tr, FOLD_NON_CONST, name);
        return NULL;
    }
    return cdy_tv_const(tr, res);
}

/* 1 if fn is a method descriptor of object, dict, OrderedDict, list or set (called
 * unbound: its first argument is self). */
static int builtin_descriptor(PyObject *fn)
{
    PyObject *odict = cdy_ordered_dict_type();
    if (!PyObject_TypeCheck(fn, &PyMethodDescr_Type) && !PyObject_TypeCheck(fn, &PyWrapperDescr_Type))
        return 0;
    PyTypeObject *o = PyDescr_TYPE(fn);
    return o == &PyBaseObject_Type || o == &PyDict_Type || o == &PyList_Type || o == &PySet_Type ||
           (PyObject *)o == odict;
}

/* A call of an OptimizedFunction in traced code: optimize(f) is f, inlined into this
 * trace; disable(f) must run eagerly: a graph break (the frame runs eagerly). */
static tvar *call_optimized(tracer *tr, PyObject *fn, tvar **args, int nargs, PyObject *kwnames)
{
    PyObject *en = PyObject_GetAttrString(fn, "_enabled");
    PyObject *inner = en ? PyObject_GetAttrString(fn, "_orig_fn") : NULL;
    int on = en == Py_True;
    Py_XDECREF(en);
    if (!inner || !cdy_tr_keep(tr, inner)) {
        cdy_tr_stop_exc(tr, PY_ERROR);
        return NULL;
    }
    char name[160];
    callable_name(inner, name, sizeof(name));
    if (!on) {
        cdy_tr_stop(tr, DISABLED_CALL, name);
        return NULL;
    }
    tvar *f = cdy_wrap(tr, inner, NULL, 0);   /* fixed with the wrapper */
    return f ? cdy_call(tr, f, args, nargs, kwnames) : NULL;
}

/* Apply callable to args; see the file comment.  NULL when stopped. */
static tvar *call_dispatch(tracer *tr, tvar *callable, tvar **args, int nargs,
                           PyObject *kwnames);

tvar *cdy_call(tracer *tr, tvar *callable, tvar **args, int nargs, PyObject *kwnames)
{
    int direct = tr->sx_op_callable == callable;   /* the CALL op's own: it goes on the stack */
    tr->sx_op_callable = NULL;
    tvar *r = call_dispatch(tr, callable, args, nargs, kwnames);
    if (!direct)   /* a call the tracer makes for a builtin: its value is used in C */
        cdy_sx_pin_deep(tr, r, "the code read the size and returned it to the tracer");
    return r;
}

/* cdy_call's dispatch on the callable's kind. */
static tvar *call_dispatch(tracer *tr, tvar *callable, tvar **args, int nargs,
                           PyObject *kwnames)
{
    char name[160];
    if (callable->kind == TV_METHOD && callable->pos == 1)
        return call_bound_method(tr, callable, args, nargs, kwnames);
    if (callable->kind == TV_METHOD && callable->self->kind == TV_TENSOR)
        return tensor_method(tr, callable, args, nargs, kwnames);
    if (callable->kind == TV_METHOD && callable->self->kind == TV_INST)
        return cdy_obj_special(tr, callable->self, PyUnicode_AsUTF8(callable->obj), args + 1,
                               nargs - 1);
    if (callable->kind == TV_METHOD)
        return cdy_container_method(tr, callable->self, PyUnicode_AsUTF8(callable->obj), args + 1,
                                    nargs - 1, kwnames);
    if (callable->kind == TV_BMETH)
        return cdy_obj_call_builtin(tr, callable->obj, callable->self, args, nargs, kwnames);
    if (callable->kind == TV_PARTIAL)
        return cdy_partial_call(tr, callable, args, nargs, kwnames);
    if (callable->kind == TV_BOUND && callable->self->kind == TV_OBJ && callable->self->src &&
        cdy_is_environ(callable->self->obj))
        return cdy_environ_call(tr, callable, args, nargs, kwnames);
    if (callable->kind == TV_BOUND) {
        int handled;
        tvar *r = callable->self->kind == TV_OBJ || callable->self->kind == TV_CONST
                      ? cdy_cfn_apply(tr, callable->obj, callable->self->obj, args, nargs, kwnames,
                                      &handled) : NULL;
        if (r || tr->t->status != CDY_TRACE_OK)
            return r;
        tvar **all = prepend_arg(tr, callable->self, args, nargs);
        return all ? inline_call(tr, callable->obj, all, nargs + 1, kwnames, NULL) : NULL;
    }
    if (callable->kind == TV_FUNC) {
        PyCodeObject *fco = (PyCodeObject *)PyFunction_GET_CODE(callable->obj);
        if (callable->n != fco->co_nfreevars) {
            cdy_tr_stop(tr, MADE_CLOSURE);
            return NULL;
        }
        return inline_call_cells(tr, callable->obj, args, nargs, kwnames, NULL,
                                 callable->n ? callable->items : NULL);
    }
    if (callable->kind != TV_OBJ && callable->kind != TV_CONST) {
        cdy_tr_stop(tr, CALL_NON_FUNCTION);
        return NULL;
    }
    PyObject *fn = callable->obj;
    int handled;
    tvar *r = cdy_ctx_exit_call(tr, fn, &handled);
    if (handled)
        return r;
    r = cdy_call_fixed_method(tr, callable, args, nargs, kwnames, &handled);
    if (handled)
        return r;
    callable_name(fn, name, sizeof(name));
    int any_tensor = 0, all_const = 1;
    for (int i = 0; i < nargs; i++) {
        any_tensor |= args[i]->kind == TV_TENSOR;
        all_const &= args[i]->kind == TV_CONST;
        if (args[i]->kind == TV_TUPLE || args[i]->kind == TV_LIST)
            for (int j = 0; j < args[i]->n; j++)
                any_tensor |= args[i]->items[j]->kind == TV_TENSOR;
    }
    if (PyObject_TypeCheck(fn, &cdy_optimized_type))   /* cdynamo.optimize / disable inside */
        return call_optimized(tr, fn, args, nargs, kwnames);
    if (PyObject_TypeCheck(fn, (PyTypeObject *)cdy_module_type))
        return call_module(tr, callable, args, nargs, kwnames);
    if (fn == (PyObject *)&PySuper_Type && nargs == 0 && !kwnames)
        return cdy_tr_super(tr);
    if (fn == (PyObject *)&PyType_Type && nargs == 1 && !kwnames)
        return type_of(tr, args[0]);
    r = cdy_exc_construct(tr, fn, args, nargs, kwnames, &handled);   /* IndexError("...") */
    if (handled)
        return r;
    r = cdy_ctx_construct(tr, fn, args, nargs, kwnames, &handled);   /* torch.no_grad() */
    if (handled)
        return r;
    if (nargs >= 1 && builtin_descriptor(fn))   /* dict.get(d, k), object.__setattr__(o, n, v) */
        return cdy_obj_call_builtin(tr, fn, args[0], args + 1, nargs - 1, kwnames);
    if (PyWeakref_CheckRef(fn) && !nargs && callable->src) {   /* ref(): its referent, fixed */
        PyObject *o = cdy_pc_weakref_get(fn);   /* the weakref is guarded by identity */
        tvar *v = o == Py_None ? cdy_tv_const(tr, Py_NewRef(Py_None)) : cdy_fixed_value(tr, o);
        Py_DECREF(o);
        return v;
    }
    r = cdy_call_known(tr, fn, args, nargs, kwnames, &handled);   /* trace/builtins.c */
    if (handled)
        return r;
    r = call_builtin(tr, fn, args, nargs, kwnames, &handled);
    if (handled)
        return r;
    r = cdy_optim_function(tr, fn, args, nargs, kwnames, &handled);   /* torch._foreach_* */
    if (handled)
        return r;
    r = cdy_optim_use_grad(tr, fn, args, nargs, kwnames, &handled);   /* opt.step() */
    if (handled)
        return r;
    r = cdy_empty_dict_view(tr, callable, nargs, kwnames, &handled);   /* hooks.values() */
    if (handled)
        return r;
    if (cdy_is_info_type(fn) && nargs == 0 && cdy_guard_state(tr, CDY_STATE_DEFAULT_DTYPE))
        return NULL;   /* torch.finfo(): the default dtype's */
    if (foldable_fn(fn) && !all_const && nargs >= 1 && iterating_builtin(fn) &&
        (args[0]->kind == TV_INST || args[0]->kind == TV_SET || args[0]->kind == TV_DICT ||
         (args[0]->kind == TV_OBJ && args[0]->fixed))) {
        tvar **conv = cdy_arena_alloc(&tr->t->arena, sizeof(tvar *) * (size_t)(nargs + 1));
        if (!conv || !(conv[0] = cdy_iterate(tr, args[0])))   /* sum(obj): its items */
            return NULL;
        memcpy(conv + 1, args + 1, sizeof(tvar *) * (size_t)(nargs - 1));
        args = conv;
    }
    if (foldable_fn(fn) && (all_const || fold_args(tr, &args, nargs)))
        return fold_call(tr, fn, name, args, nargs, kwnames);
    if (tr->t->status != CDY_TRACE_OK)
        return NULL;
    if (PyMethod_Check(fn)) {   /* Fn.apply(x) of a custom autograd.Function */
        r = cdy_cfn_apply(tr, PyMethod_GET_FUNCTION(fn), PyMethod_GET_SELF(fn), args, nargs,
                          kwnames, &handled);
        if (handled)
            return r;
    }
    if (PyMethod_Check(fn) && PyFunction_Check(PyMethod_GET_FUNCTION(fn)) &&
        !PyObject_TypeCheck(PyMethod_GET_SELF(fn), (PyTypeObject *)cdy_tensor_type)) {
        /* a bound method (of torch's classes too: _DecoratorContextManager.clone) */
        tvar *self = cdy_wrap(tr, PyMethod_GET_SELF(fn), NULL, 0);
        tvar **all = self ? prepend_arg(tr, self, args, nargs) : NULL;
        return all ? inline_call(tr, PyMethod_GET_FUNCTION(fn), all, nargs + 1, kwnames, NULL)
                   : NULL;
    }
    int meta_op;   /* a callable of a META row (cdynamo._autograd.attention_grads): an extern */
    if ((cdy_is_torch_callable(fn) && !cdy_optim_inlined(fn)) || cdy_libop_is(fn) ||
        cdy_callable_op(fn) != CDY_OP_NONE || cdy_callable_builds(fn) ||
        cdy_callable_meta(fn, &meta_op) >= 0) {
        if (PyType_Check(fn) && !any_tensor) {
            cdy_tr_stop(tr, CONSTRUCT, name);
            return NULL;
        }
        if (!any_tensor && state_setter(name)) {
            cdy_tr_stop(tr, STATE_SETTER, name);
            return NULL;
        }
        if (cdy_libop_check(tr, fn, name))   /* a library op that mutates: eager runs it */
            return NULL;
        tvar *m = cdy_mut_call(tr, fn, args, nargs, kwnames, &handled);   /* in place */
        if (handled)
            return m;
        return tensor_call(tr, cdy_callable_op(fn), fn, name, args, nargs, kwnames, 0);
    }
    if (PyFunction_Check(fn))
        return inline_call(tr, fn, args, nargs, kwnames, callable->src);
    if (PyMethod_Check(fn) && PyFunction_Check(PyMethod_GET_FUNCTION(fn))) {
        tvar *self = cdy_wrap(tr, PyMethod_GET_SELF(fn), NULL, 0);
        tvar **all = self ? prepend_arg(tr, self, args, nargs) : NULL;
        return all ? inline_call(tr, PyMethod_GET_FUNCTION(fn), all, nargs + 1, kwnames, NULL)
                   : NULL;
    }
    if (cdy_obj_buildable(fn))
        return cdy_obj_new(tr, fn, args, nargs, kwnames);
    cdy_tr_stop(tr, CALL_UNSUPPORTED, name);
    return NULL;
}
