/* autograd.c - the backward of a training graph (issue 34).
 *
 * A frame whose inputs require grad under grad mode traces as any other (the
 * fakes do not require grad; trace/vars.c notes which inputs do).  Its
 * backward is built here from the traced graph, walked in reverse: each node
 * that carries a gradient adds, for each argument that needs one, its op's
 * derivative formula (the grad column of ops/ops.def, in derivatives.yaml's
 * words: grad, result, self and the op's parameter names) as a Python
 * expression over torch, summed back to the argument's shape and cast to its
 * dtype.  Views map the gradient back onto their base by their strides;
 * externs use torch's own ops (linear and the matmul family, cross_entropy),
 * any other a vector-Jacobian product through torch's autograd at run time.
 *
 * The result is the text of a Python function
 *     def backward(<saved values>, <gradients of the outputs>): ...
 *         return (<gradients of the inputs that get one>)
 *     GRAD_INPUTS = (<the inputs that get one>); NINPUTS = <inputs>
 * that python/cdynamo/_autograd.py compiles with cdynamo like any other
 * function (the backward graph is just another graph), and the forward graph
 * gains the node values the backward reads as outputs after the frame's
 * (saved); the graph inputs it reads are saved by the runtime's
 * autograd.Function.  Cheap pointwise values over saved values are
 * recomputed in the backward instead of saved (ag_recompute).
 */
#include "trace/record.h"
#include "trace/reasons.h"

#include <stdio.h>
#include <string.h>

/* The gradient of a view that is a box of its base: the base narrowed to
 * [a, a + len) along dim d (written in the base's dims as `piece`), or, when
 * its base's pieces do not tile it, `fallback` (a view_scatter). */
typedef struct {
    int base, d;
    int64_t a, len;
    char *piece, *fallback;
    int pre, pn;                  /* piece[0..pre): the box's gradient in the base's memory
                                   * order, sizes psz[0..pn) (dims > 1); pre -1: none */
    int64_t psz[CDY_MAX_NDIM];
} ag_piece;

#define AG_MAX_PIECES 64

typedef struct {
    cdy_trace *t;
    cdy_graph *g;
    cdy_buf body;           /* the statements, in reverse graph order */
    char *needs;            /* per value: it carries a gradient */
    char *has_g;            /* per value: g<v> is assigned */
    char *used;             /* per value: the backward reads it */
    char *recompute;        /* per value: recomputed in the backward, not saved */
    PyObject *consts;       /* _K: constants of extern calls */
    int stopped;
    ag_piece pieces[AG_MAX_PIECES];   /* gradients of slice views, held until their base */
    int npieces;
} ag_state;

static int ag_multi(ag_state *s, int v, const cdy_pynode *item);
static PyObject *ag_const_arg(const cdy_pynode *p, int pos, const char *name);

/* Functions of the backward's prelude (python/cdynamo/_grad_formulas.py); any
 * other function a formula calls is torch's. */
static const char *const ag_helpers[] = {
    "gelu_backward", "hardswish_backward", "mish_backward", "cross_entropy_backward",
    "vjp", "view_scatter", "gather_backward", "norm_backward", "nll_loss_backward",
    "sdpa_backward", "conv_backward", "batch_norm_backward", "max_pool2d_backward",
    "adaptive_max_pool2d_backward", "layer_norm_backward", "softmax_backward", "pow_backward",
    "pow_backward_exponent", NULL};

int cdy_autograd_on(void)
{
    return cdy_config_flag("compile_backward");
}

int cdy_autograd_note_input(cdy_trace *t, int index)
{
    if (index >= t->ninput_rg) {
        int n = index + 16;
        unsigned char *a = PyMem_Realloc(t->input_rg, (size_t)n);
        if (!a)
            return -1;
        memset(a + t->ninput_rg, 0, (size_t)(n - t->ninput_rg));
        t->input_rg = a;
        t->ninput_rg = n;
    }
    t->input_rg[index] = 1;
    t->training = 1;
    return 0;
}

void cdy_backward_clear(cdy_backward *bw)
{
    Py_CLEAR(bw->src);
    Py_CLEAR(bw->consts);
    Py_CLEAR(bw->saved_inputs);
    Py_CLEAR(bw->grad_outputs);
}

/* Stop the trace at value v's line with `code` and its template's one
 * argument `what`; -1. */
static int ag_stop(ag_state *s, int v, cdy_reason code, const char *what)
{
    cdy_trace *t = s->t;
    if (s->stopped || t->status != CDY_TRACE_OK)
        return -1;
    s->stopped = 1;
    snprintf(t->reason, sizeof(t->reason), cdy_reasons[code].tmpl, what);
    t->status = CDY_TRACE_UNSUPPORTED;
    t->reason_code = (int)code;
    const cdy_value *x = v >= 0 ? &s->g->values[v] : NULL;
    t->reason_line = x && x->kind == CDY_VAL_NODE ? x->source_line : 0;
    if (x && x->kind == CDY_VAL_NODE && x->source_code)
        t->reason_file = x->source_code->co_filename;
    return -1;
}

/* NO_DERIVATIVE for node v: its op's name, or `what` when given. */
static int ag_no_formula(ag_state *s, int v, const char *what)
{
    char name[96];
    snprintf(name, sizeof(name), "%s", what ? what : cdy_op_table[s->g->values[v].op].name);
    return ag_stop(s, v, CDY_R_NO_DERIVATIVE, name);
}

/* The signature (ops.def's sig column) of pointwise op `op`, or NULL. */
static const char *ag_sig(int op)
{
    static const char *const sigs[CDY_OP_COUNT] = {
#define CDY_PW(E, name, n, kind, flags, rule, to, sig, check, tf, ti, tb, tn, grad) \
    [CDY_OP_##E] = sig,
#include "ops/ops.def"
    };
    return op >= 0 && op < CDY_OP_COUNT ? sigs[op] : NULL;
}

static int ag_is_float(int dt)
{
    return dt >= 0 && dt < CDY_DT_COUNT && cdy_dtype_table[dt].is_float;
}

static const cdy_pynode *ag_pynode(const ag_state *s, int v);
static void ag_fn_name(PyObject *fn, char *out, size_t n);

/* The callable's name of extern node v into fn (n bytes), 1; 0 if v is no
 * extern call. */
static int ag_extern_name(const ag_state *s, int v, char *fn, size_t n)
{
    if (cdy_op_table[s->g->values[v].op].kind != 'E')
        return 0;
    const cdy_pynode *p = ag_pynode(s, v);
    if (!p)
        return 0;
    ag_fn_name(p->fn, fn, n);
    return 1;
}

/* 1 if node v is dropout's noise (bernoulli.p, trace/build_dropout.c). */
static int ag_is_noise(const ag_state *s, int v)
{
    char fn[64];
    return ag_extern_name(s, v, fn, sizeof(fn)) && !strcmp(fn, "bernoulli.p");
}

/* 1 if node v is an extern whose result carries no gradient (dropout's noise
 * bernoulli.p, detach: ag_extern gives their arguments none): a product with
 * it then saves no operand for its gradient (bert_train: the 64 KiB input of
 * each dropout after a linear, which eager does not keep either). */
static int ag_no_grad_extern(const ag_state *s, int v)
{
    char fn[64];
    return ag_extern_name(s, v, fn, sizeof(fn)) &&
           (!strcmp(fn, "bernoulli.p") || !strcmp(fn, "detach"));
}

/* Which values carry a gradient: inputs that require grad, and float nodes
 * over one that does (a view also through its base), but for
 * ag_no_grad_extern's. */
static void ag_mark_needs(ag_state *s)
{
    const cdy_graph *g = s->g;
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *x = &g->values[v];
        if (x->kind == CDY_VAL_INPUT)
            s->needs[v] = x->input_index < s->t->ninput_rg && s->t->input_rg[x->input_index] &&
                          ag_is_float(x->meta.dtype);
        if (x->kind != CDY_VAL_NODE || !ag_is_float(x->meta.dtype) || ag_no_grad_extern(s, v))
            continue;
        for (int a = 0; a < x->nargs; a++)
            s->needs[v] |= s->needs[x->args[a]];
        if (cdy_op_table[x->op].kind == 'V' || cdy_op_table[x->op].kind == 'G')
            s->needs[v] |= s->needs[x->view_base];
    }
}

/* A Python literal of scalar value x into b. */
static void ag_literal(cdy_buf *b, const cdy_value *x)
{
    if (x->meta.dtype == CDY_DT_BOOL)
        cdy_buf_puts(b, x->i ? "True" : "False");
    else if (x->meta.dtype != CDY_DT_FLOAT64)
        cdy_buf_printf(b, "%lld", (long long)x->i);
    else if (x->f != x->f)
        cdy_buf_puts(b, "float('nan')");
    else if (x->f > 1.7976931348623157e308 || x->f < -1.7976931348623157e308)
        cdy_buf_puts(b, x->f > 0 ? "float('inf')" : "float('-inf')");
    else
        cdy_buf_printf(b, "%.17g", x->f);
}

/* Value v as the backward reads it: a literal (scalar) or v<N> (marked used). */
static void ag_value(ag_state *s, cdy_buf *b, int v)
{
    const cdy_value *x = &s->g->values[v];
    if (x->kind == CDY_VAL_SCALAR) {
        cdy_buf_puts(b, "(");
        ag_literal(b, x);
        cdy_buf_puts(b, ")");
        return;
    }
    s->used[v] = 1;
    cdy_buf_printf(b, "v%d", v);
}

/* A tuple literal of n int64s into b. */
static void ag_tuple(cdy_buf *b, const int64_t *a, int n)
{
    cdy_buf_puts(b, "(");
    for (int i = 0; i < n; i++)
        cdy_buf_printf(b, "%lld, ", (long long)a[i]);
    cdy_buf_puts(b, ")");
}

/* Append ".reshape(sizes).permute(perm)" to e. */
static void ag_reshape_permute(cdy_buf *e, const int64_t *sizes, int n, const int64_t *perm,
                               int pn)
{
    cdy_buf_puts(e, ".reshape(");
    ag_tuple(e, sizes, n);
    cdy_buf_puts(e, ").permute(");
    ag_tuple(e, perm, pn);
    cdy_buf_puts(e, ")");
}

/* Reduction node x: the dims it reduces (mask over its input's dims). */
static unsigned ag_reduced_mask(const ag_state *s, const cdy_value *x)
{
    const cdy_value *in = &s->g->values[x->args[0]];
    const cdy_value *m = &s->g->values[x->args[1]];
    unsigned all = in->meta.ndim ? (unsigned)((1u << in->meta.ndim) - 1) : 0;
    return (unsigned)m->i & all;
}

/* Reduction node x's words: kept shape (dims reduced set to 1), dims tuple,
 * count of reduced elements. */
static void ag_reduce_word(const ag_state *s, const cdy_value *x, const char *w, cdy_buf *b)
{
    const cdy_meta *in = &s->g->values[x->args[0]].meta;
    unsigned mask = ag_reduced_mask(s, x);
    int64_t kept[CDY_MAX_NDIM], dims[CDY_MAX_NDIM], n = 1;
    int nd = 0;
    for (int d = 0; d < in->ndim; d++) {
        kept[d] = mask >> d & 1 ? 1 : in->sizes[d];
        if (mask >> d & 1) {
            dims[nd++] = d;
            n *= in->sizes[d];
        }
    }
    if (!strcmp(w, "dims"))
        ag_tuple(b, dims, nd);
    else if (!strcmp(w, "numel_reduced"))
        cdy_buf_printf(b, "%lld", (long long)n);
    else
        ag_tuple(b, kept, in->ndim);
}

/* The parameter names of op x's canonical arguments into names (up to 8,
 * each at most 31 chars): the signature's (flags `-` skipped), else by
 * arity; reductions: input dims_mask keepdim param.  Returns the count. */
static int ag_param_names(const char *sig, int kind, int n, char names[8][32])
{
    static const char *const dflt[4][3] = {
        {"input"}, {"input"}, {"input", "other"}, {"condition", "input", "other"}};
    static const char *const red[4] = {"input", "dims_mask", "keepdim", "param"};
    int k = 0;
    if (kind == 'R') {
        for (; k < 4; k++)
            snprintf(names[k], 32, "%s", red[k]);
        return k;
    }
    if (!sig) {
        for (; n >= 1 && n <= 3 && k < n; k++)
            snprintf(names[k], 32, "%s", dflt[n][k]);
        return k;
    }
    for (const char *p = sig; *p && k < 8;) {
        while (*p == ' ')
            p++;
        int skip = *p == '-';
        p += *p == '-' || *p == '#' || *p == '*';
        int len = 0;
        while (p[len] && p[len] != ' ' && p[len] != '=')
            len++;
        if (len && !skip)
            snprintf(names[k++], 32, "%.*s", len, p);
        p += len;
        while (*p && *p != ' ')
            p++;
    }
    return k;
}

static int ag_is_ident(int c)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static int ag_is_helper(const char *w)
{
    for (int i = 0; ag_helpers[i]; i++)
        if (!strcmp(w, ag_helpers[i]))
            return 1;
    return 0;
}

static int ag_realized_costly(const ag_state *s, int v);

/* 1 if node v's result is at hand for its derivative at no cost to the
 * backward's peak: saved anyway (ag_realized_costly: an extern reads it).
 * Even the graph's last node of its op, whose derivative comes first in the
 * backward where the most saved tensors are alive: the derivative's kernel
 * writes its output over the dying gradient it reads (compiler/share.c), so
 * holding the result up to it is no more than eager's peak
 * (transformer_stack_train's last GELU: 5.97 MiB against eager's 6.97; 7.95
 * before the buffer reuse). */
static int ag_result_free(const ag_state *s, int v)
{
    return ag_realized_costly(s, v);
}

/* The substitution of word w (not a call, attribute or keyword) of node v's
 * formula into b; 0, or -1 for a word the formula cannot mean. */
static int ag_word(ag_state *s, int v, const char *w, char names[8][32], int nn, cdy_buf *b)
{
    const cdy_value *x = &s->g->values[v];
    int red = cdy_op_table[x->op].kind == 'R';
    if (!strcmp(w, "True") || !strcmp(w, "False") || !strcmp(w, "None"))
        cdy_buf_puts(b, w);
    else if (!strcmp(w, "grad"))
        cdy_buf_printf(b, "g%d", v);
    else if (!strcmp(w, "result"))
        ag_value(s, b, v);
    else if (!strcmp(w, "result_if_free")) {   /* the result where ag_result_free, else None */
        if (ag_result_free(s, v))
            ag_value(s, b, v);
        else
            cdy_buf_puts(b, "None");
    }
    else if (red && !strcmp(w, "grad_kept")) {
        cdy_buf_printf(b, "g%d.reshape(", v);
        ag_reduce_word(s, x, "kept", b);
        cdy_buf_puts(b, ")");
    } else if (red && !strcmp(w, "result_kept")) {
        ag_value(s, b, v);
        cdy_buf_puts(b, ".reshape(");
        ag_reduce_word(s, x, "kept", b);
        cdy_buf_puts(b, ")");
    } else if (!strcmp(w, "self_sizes") && x->nargs > 0) {   /* no need to save self */
        const cdy_meta *m = &s->g->values[x->args[0]].meta;
        ag_tuple(b, m->sizes, m->ndim);
    } else if (red && (!strcmp(w, "dims") || !strcmp(w, "numel_reduced")))
        ag_reduce_word(s, x, w, b);
    else {
        int a = !strcmp(w, "self") ? 0 : -1;
        for (int i = 0; a < 0 && i < nn; i++)
            a = !strcmp(w, names[i]) ? i : -1;
        if (a < 0 || a >= x->nargs)
            return -1;
        ag_value(s, b, x->args[a]);
    }
    return 0;
}

/* Formula text f[0..len) of node v with its words substituted, into b; 0 or -1. */
static int ag_subst(ag_state *s, int v, const char *f, size_t len, char names[8][32], int nn,
                    cdy_buf *b)
{
    size_t i = 0;
    char prev = 0;
    while (i < len) {
        char c = f[i];
        if ((c >= '0' && c <= '9') || (c == '.' && i + 1 < len && f[i + 1] >= '0' && f[i + 1] <= '9')) {
            size_t j = i;
            while (j < len && (ag_is_ident(f[j]) || f[j] == '.' ||
                               ((f[j] == '-' || f[j] == '+') && (f[j - 1] == 'e' || f[j - 1] == 'E'))))
                j++;
            cdy_buf_printf(b, "%.*s", (int)(j - i), f + i);
            prev = f[j - 1];
            i = j;
            continue;
        }
        if (!ag_is_ident(c)) {
            cdy_buf_printf(b, "%c", c);
            if (c != ' ')
                prev = c;
            i++;
            continue;
        }
        size_t j = i;
        while (j < len && ag_is_ident(f[j]))
            j++;
        char w[64];
        snprintf(w, sizeof(w), "%.*s", (int)(j - i), f + i);
        size_t k = j;
        while (k < len && f[k] == ' ')
            k++;
        int call = k < len && f[k] == '(';
        int kwarg = k < len && f[k] == '=' && !(k + 1 < len && f[k + 1] == '=');
        if (prev == '.' || kwarg)
            cdy_buf_puts(b, w);
        else if (call)
            cdy_buf_printf(b, "%s%s", ag_is_helper(w) ? "" : "torch.", w);
        else if (ag_word(s, v, w, names, nn, b))
            return -1;
        prev = 'a';
        i = j;
    }
    return 0;
}

/* ag_add's bcast: a matmul's operand gradient.  Its leading dims of size 1
 * are dropped, not summed (eager folds a stack times a matrix into one mm:
 * a gradient of -0.0 stays -0.0, where a sum over one element gives 0.0). */
#define AG_BCAST_MM 2

/* Add contribution expr (over node v's shape) to the gradient of argument
 * value a, summed to a's shape when `bcast` (pointwise broadcasting, as
 * eager's sum_to: leading dims summed even of size 1; AG_BCAST_MM above) and
 * cast to a's dtype. */
static void ag_add(ag_state *s, int v, int a, const char *expr, int bcast)
{
    const cdy_meta *r = &s->g->values[v].meta, *m = &s->g->values[a].meta;
    cdy_buf e = {0};
    cdy_buf_printf(&e, "(%s)", expr);
    int lead = r->ndim - m->ndim;
    if (bcast && m->ndim == 0 && r->ndim > 0)
        cdy_buf_puts(&e, ".sum()");
    else if (bcast && lead >= 0) {
        int64_t dims[CDY_MAX_NDIM];
        int nd = 0;
        for (int d = 0; d < r->ndim; d++)
            if ((d < lead || (m->sizes[d - lead] == 1 && r->sizes[d] != 1)) &&
                (bcast != AG_BCAST_MM || r->sizes[d] != 1))
                dims[nd++] = d;
        if (nd) {
            cdy_buf_puts(&e, ".sum(");
            ag_tuple(&e, dims, nd);
            cdy_buf_puts(&e, ", keepdim=True)");
        }
        if (nd || lead) {
            cdy_buf_puts(&e, ".reshape(");
            ag_tuple(&e, m->sizes, m->ndim);
            cdy_buf_puts(&e, ")");
        }
    }
    if (m->dtype != r->dtype)
        cdy_buf_printf(&e, ".to(torch.%s)", cdy_dtype_table[m->dtype].name);
    if (s->has_g[a])
        cdy_buf_printf(&s->body, "    g%d = g%d + %s\n", a, a, e.data ? e.data : "");
    else
        cdy_buf_printf(&s->body, "    g%d = %s\n", a, e.data ? e.data : "");
    s->has_g[a] = 1;
    cdy_buf_free(&e);
}

/* Node v of a graph op with a grad column: its formulas per argument. */
static int ag_formula(ag_state *s, int v)
{
    const cdy_value *x = &s->g->values[v];
    const char *f = cdy_op_table[x->op].grad;
    int kind = cdy_op_table[x->op].kind;
    char names[8][32];
    int nn = 0;
    if (!f)
        return ag_no_formula(s, v, NULL);
    const char *arrow = strstr(f, "=>");
    if (arrow) {   /* "names => formulas": the node's own parameter names */
        char sig[128];
        snprintf(sig, sizeof(sig), "%.*s", (int)(arrow - f), f);
        nn = ag_param_names(sig, 0, 0, names);
        f = arrow + 2;
    } else
        nn = ag_param_names(ag_sig(x->op), kind, x->nargs, names);
    for (int a = 0; a < x->nargs; a++) {
        const char *end = strchr(f, ';');
        size_t len = end ? (size_t)(end - f) : strlen(f);
        while (len && *f == ' ')
            f++, len--;
        int a_v = x->args[a];
        if (s->needs[a_v] && (len == 0 || !strncmp(f, "none", 4)))
            return ag_no_formula(s, v, NULL);
        if (s->needs[a_v]) {
            cdy_buf e = {0};
            int bad = ag_subst(s, v, f, len, names, nn, &e);
            if (!bad)
                ag_add(s, v, a_v, e.data ? e.data : "", strchr("UBCT", kind) != NULL);
            cdy_buf_free(&e);
            if (bad)
                return ag_no_formula(s, v, NULL);
        }
        if (!end)
            break;
        f = end + 1;
    }
    return 0;
}

/* Dims of (sizes, strides) with size > 1 sorted by stride, largest first,
 * into order; their count, or -1 when a stride is not positive or a dim's
 * stride does not clear the span of the dims inside it (they may overlap). */
static int ag_sorted_dims(const int64_t *sizes, const int64_t *strides, int ndim, int *order)
{
    int n = 0;
    for (int d = 0; d < ndim; d++)
        if (sizes[d] > 1)
            order[n++] = d;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strides[order[j]] > strides[order[j - 1]]; j--) {
            int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    int64_t ext = 1;   /* the span of the dims inside this one, from the innermost */
    for (int i = n - 1; i >= 0; i--) {
        if (strides[order[i]] <= 0 || strides[order[i]] < ext)
            return -1;
        ext += (sizes[order[i]] - 1) * strides[order[i]];
    }
    return n;
}

/* (sizes, strides) of dims order[0..n) merged where contiguous in memory, into
 * ms / mt; the merged count. */
static int ag_merge(const int64_t *sizes, const int64_t *strides, const int *order, int n,
                    int64_t *ms, int64_t *mt)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        int64_t sz = sizes[order[i]], st = strides[order[i]];
        if (m && mt[m - 1] == sz * st) {
            ms[m - 1] *= sz;
            mt[m - 1] = st;
        } else {
            ms[m] = sz;
            mt[m++] = st;
        }
    }
    return m;
}

/* The gradient of a view that covers exactly its base's elements: permuted
 * to memory order, reshaped to the base's dims in memory order, permuted
 * back.  e is the view's gradient (stride-0 dims already summed).  Returns
 * e's length before the last reshape when e there is the view's gradient
 * permuted to the memory order and the base's dims are in memory order (a
 * cat of such pieces can skip the reshapes: ag_cat_in_memory_order), else -1. */
static int ag_view_same(cdy_buf *e, const int64_t *vs, const int *vo, int vn, const cdy_meta *b,
                         const int *bo, int bn)
{
    int64_t nt[CDY_MAX_NDIM], perm[CDY_MAX_NDIM], bsz[CDY_MAX_NDIM], inv[CDY_MAX_NDIM];
    int pos[CDY_MAX_NDIM], k = 0, ident = 1, bident = 1;
    for (int d = 0; d < CDY_MAX_NDIM; d++)
        pos[d] = -1;
    for (int i = 0; i < vn; i++)    /* the view's dims of size > 1 in its own order */
        pos[vo[i]] = 0;
    for (int d = 0; d < CDY_MAX_NDIM; d++)
        if (pos[d] == 0) {
            pos[d] = k;
            nt[k++] = vs[d];
        }
    for (int i = 0; i < vn; i++) {
        perm[i] = pos[vo[i]];
        ident &= perm[i] == i;
    }
    for (int i = 0; i < bn; i++)
        bsz[i] = b->sizes[bo[i]];
    int rank[CDY_MAX_NDIM], r = 0;  /* base dims of size > 1 in its own order -> memory rank */
    for (int d = 0; d < b->ndim; d++)
        for (int i = 0; i < bn; i++)
            if (bo[i] == d)
                rank[r++] = i;
    for (int i = 0; i < bn; i++) {
        inv[i] = rank[i];
        bident &= rank[i] == i;
    }
    if (!ident)
        ag_reshape_permute(e, nt, k, perm, vn);
    if (!bident)
        ag_reshape_permute(e, bsz, bn, inv, bn);
    int pre = !ident && bident ? (int)e->len : -1;
    cdy_buf_puts(e, ".reshape(");
    ag_tuple(e, b->sizes, b->ndim);
    cdy_buf_puts(e, ")");
    return pre;
}

/* The extent in elements of (sizes, strides) from offset 0: 1 + the last element. */
static int64_t ag_extent(const int64_t *sizes, const int64_t *strides, int ndim, int64_t off)
{
    int64_t e = off + 1;
    for (int d = 0; d < ndim; d++)
        e += sizes[d] > 0 ? (sizes[d] - 1) * strides[d] : 0;
    return e;
}

/* 1 if the view (sizes vs, strides vt, offset off, stride-0 dims summed
 * away; memory order vo[0..vn)) covers exactly its base b narrowed along one
 * dim d to [a, a + len): *e (the view's gradient) then becomes that box's
 * gradient in the base's dims (as ag_view_same), *d, *a, *len, *pre (as
 * ag_view_same returns) set. */
static int ag_box(const int64_t *vs, const int64_t *vt, const int *vo, int vn, int64_t off,
                  const cdy_meta *b, cdy_buf *e, int *d, int64_t *a, int64_t *len, int *pre)
{
    int64_t vm[CDY_MAX_NDIM], vmt[CDY_MAX_NDIM], numel = 1, bnumel = cdy_meta_numel(b);
    if (bnumel < 1)     /* (the divisions below) */
        return 0;
    int nv = ag_merge(vs, vt, vo, vn, vm, vmt);
    for (int i = 0; i < vn; i++)
        numel *= vs[vo[i]];
    for (int k = 0; k < b->ndim; k++) {
        int64_t sz = b->sizes[k], st = b->strides[k];
        if (sz < 2 || st < 1 || off % st || bnumel % sz || numel % (bnumel / sz))
            continue;
        cdy_meta box = *b;
        box.sizes[k] = numel / (bnumel / sz);
        int64_t start = off / st;
        if (box.sizes[k] < 1 || box.sizes[k] >= sz || start + box.sizes[k] > sz)
            continue;
        int bo[CDY_MAX_NDIM];
        int64_t bm[CDY_MAX_NDIM], bmt[CDY_MAX_NDIM];
        int bn = ag_sorted_dims(box.sizes, box.strides, box.ndim, bo);
        if (bn < 0 || ag_merge(box.sizes, box.strides, bo, bn, bm, bmt) != nv ||
            memcmp(vm, bm, sizeof(int64_t) * (size_t)nv) || memcmp(vmt, bmt, sizeof(int64_t) * (size_t)nv))
            continue;
        *pre = ag_view_same(e, vs, vo, vn, &box, bo, bn);
        *d = k;
        *a = start;
        *len = box.sizes[k];
        return 1;
    }
    return 0;
}

/* Hold piece (base, d, a, len, piece, fallback) until base's turn; 0, or -1
 * when the list is full (the caller adds the fallback now). */
static int ag_hold_piece(ag_state *s, int base, int d, int64_t a, int64_t len, const char *piece,
                         const char *fallback, int pre, const int64_t *psz, int pn)
{
    if (s->npieces == AG_MAX_PIECES)
        return -1;
    char *p = cdy_arena_strdup(&s->t->arena, piece), *f = cdy_arena_strdup(&s->t->arena, fallback);
    if (!p || !f)
        return -1;
    ag_piece *h = &s->pieces[s->npieces++];
    *h = (ag_piece){base, d, a, len, p, f, pre, pn, {0}};
    memcpy(h->psz, psz, sizeof(int64_t) * (size_t)pn);
    return 0;
}

/* The first of the memory-order dims psz[0..pn) that base dim d of sizes
 * (dim d's size len) spans, when each base dim > 1 is a run of them (the
 * runs' products its sizes); -1 otherwise. */
static int ag_group_of(const int64_t *sizes, int ndim, int d, int64_t len, const int64_t *psz,
                       int pn)
{
    int j = 0, at = -1;
    for (int k = 0; k < ndim; k++) {
        int64_t want = k == d ? len : sizes[k], p = 1;
        if (want == 1)
            continue;
        if (k == d)
            at = j;
        while (p < want && j < pn)
            p *= psz[j++];
        if (p != want)
            return -1;
    }
    return j == pn ? at : -1;
}

/* The tiling pieces mine[0..n) of base v as one torch.cat of their gradients
 * in the base's memory order (attention's q / k / v head views of one
 * projection: the heads' gradients permuted back, concatenated along the
 * heads, one kernel that reads them as strided views), then reshaped to the
 * base (a view): into e, 1; 0 (e untouched) when a piece is not so. */
static int ag_cat_in_memory_order(const ag_state *s, int v, const ag_piece *mine, int n,
                                  cdy_buf *e)
{
    const cdy_meta *b = &s->g->values[v].meta;
    int at = -1;
    for (int i = 0; i < n; i++) {
        const ag_piece *p = &mine[i];
        if (p->pre < 0 || p->pn != mine[0].pn)
            return 0;
        int g = ag_group_of(b->sizes, b->ndim, p->d, p->len, p->psz, p->pn);
        if (g < 0 || (i && g != at))
            return 0;
        at = g;
        for (int j = 0; j < p->pn; j++)
            if (j != g && p->psz[j] != mine[0].psz[j])
                return 0;
    }
    cdy_buf_puts(e, "torch.cat([");
    for (int i = 0; i < n; i++)
        cdy_buf_printf(e, "%s%.*s", i ? ", " : "", mine[i].pre, mine[i].piece);
    cdy_buf_printf(e, "], %d).reshape(", at);
    ag_tuple(e, b->sizes, b->ndim);
    cdy_buf_puts(e, ")");
    return 1;
}

/* Piece p of base v's gradient added to g<v> as the piece zero-padded to the
 * base's sizes along its dim (F.pad: one kernel writing the base's elements
 * once), where its view_scatter filled zeros and then wrote them again
 * through an in-place copy the graph functionalizes into a clone: two
 * base-sized tensors alive at once (bert_train: the pooler's x[:, 0]). */
static void ag_add_padded(ag_state *s, int v, const ag_piece *p)
{
    const cdy_meta *b = &s->g->values[v].meta;
    cdy_buf e = {0};
    cdy_buf_printf(&e, "torch.nn.functional.pad(%s, (", p->piece);
    for (int k = b->ndim - 1; k > p->d; k--)
        cdy_buf_puts(&e, "0, 0, ");
    cdy_buf_printf(&e, "%lld, %lld))", (long long)p->a,
                   (long long)(b->sizes[p->d] - p->a - p->len));
    ag_add(s, v, v, e.data ? e.data : p->fallback, 0);
    cdy_buf_free(&e);
}

/* Base v's held pieces into g<v>: when they are two or more along one dim
 * that tile it ([0, size) without gaps or overlaps; a split's or chunk's
 * pieces), one torch.cat of them (no zeros, no scatters, no adds); else each
 * one's view_scatter.  The list keeps the others. */
static void ag_flush_pieces(ag_state *s, int v)
{
    ag_piece mine[AG_MAX_PIECES];
    int n = 0, k = 0;
    for (int i = 0; i < s->npieces; i++) {
        if (s->pieces[i].base == v)
            mine[n++] = s->pieces[i];
        else
            s->pieces[k++] = s->pieces[i];
    }
    s->npieces = k;
    if (!n)
        return;
    for (int i = 1; i < n; i++)     /* by start */
        for (int j = i; j > 0 && mine[j].a < mine[j - 1].a; j--) {
            ag_piece t = mine[j];
            mine[j] = mine[j - 1];
            mine[j - 1] = t;
        }
    int tiles = n >= 2;
    int64_t at = 0;
    for (int i = 0; i < n && tiles; i++) {
        tiles = mine[i].d == mine[0].d && mine[i].a == at;
        at += mine[i].len;
    }
    const cdy_meta *b = &s->g->values[v].meta;
    if (tiles && at == b->sizes[mine[0].d]) {
        cdy_buf e = {0};
        if (ag_cat_in_memory_order(s, v, mine, n, &e)) {
            ag_add(s, v, v, e.data ? e.data : "", 0);
            cdy_buf_free(&e);
            return;
        }
        cdy_buf_puts(&e, "torch.cat([");
        for (int i = 0; i < n; i++)
            cdy_buf_printf(&e, "%s%s", i ? ", " : "", mine[i].piece);
        cdy_buf_printf(&e, "], %d)", mine[0].d);
        ag_add(s, v, v, e.data ? e.data : "", 0);
        cdy_buf_free(&e);
        return;
    }
    for (int i = 0; i < n; i++)
        ag_add_padded(s, v, &mine[i]);
}

/* View node v (VIEW, VIEW_COPY): its gradient onto its base. */
static int ag_view(ag_state *s, int v)
{
    const cdy_value *x = &s->g->values[v];
    const cdy_meta *b = &s->g->values[x->view_base].meta;
    int64_t vs[CDY_MAX_NDIM], vt[CDY_MAX_NDIM], zero[CDY_MAX_NDIM];
    int nz = 0, vo[CDY_MAX_NDIM], bo[CDY_MAX_NDIM];
    cdy_buf e = {0};
    if (!cdy_meta_numel(&x->meta) || !cdy_meta_numel(b)) {  /* nothing flows: zeros */
        cdy_buf_printf(&e, "g%d.new_zeros(", v);
        ag_tuple(&e, b->sizes, b->ndim);
        cdy_buf_puts(&e, ")");
        ag_add(s, v, x->view_base, e.data ? e.data : "", 0);
        cdy_buf_free(&e);
        return 0;
    }
    cdy_buf_printf(&e, "g%d", v);
    for (int d = 0; d < x->meta.ndim; d++) {
        vs[d] = x->meta.sizes[d];
        vt[d] = x->view_strides[d];
        if (vt[d] == 0 && vs[d] > 1) {   /* an expanded dim: its gradient is the sum */
            zero[nz++] = d;
            vs[d] = 1;
        }
    }
    if (nz) {
        cdy_buf_puts(&e, ".sum(");
        ag_tuple(&e, zero, nz);
        cdy_buf_puts(&e, ", keepdim=True)");
    }
    int vn = ag_sorted_dims(vs, vt, x->meta.ndim, vo);
    int bn = ag_sorted_dims(b->sizes, b->strides, b->ndim, bo);
    int rc = 0, held = 0;
    if (vn < 0 || bn < 0)
        rc = ag_no_formula(s, v, "a view with overlapping or negative strides");
    else {
        int64_t m1[CDY_MAX_NDIM], t1[CDY_MAX_NDIM], m2[CDY_MAX_NDIM], t2[CDY_MAX_NDIM];
        int n1 = ag_merge(vs, vt, vo, vn, m1, t1), n2 = ag_merge(b->sizes, b->strides, bo, bn, m2, t2);
        int same = x->view_offset == 0 && n1 == n2 && !memcmp(m1, m2, sizeof(int64_t) * (size_t)n1) &&
                   !memcmp(t1, t2, sizeof(int64_t) * (size_t)n1);
        if (same)
            ag_view_same(&e, vs, vo, vn, b, bo, bn);
        else {   /* a part of the base: written into zeros shaped as the base's storage */
            cdy_buf w = {0}, box = {0};
            cdy_buf_printf(&w, "view_scatter(%s, ", e.data ? e.data : "");
            ag_tuple(&w, b->sizes, b->ndim);
            cdy_buf_puts(&w, ", ");
            ag_tuple(&w, b->strides, b->ndim);
            cdy_buf_puts(&w, ", ");
            ag_tuple(&w, vs, x->meta.ndim);
            cdy_buf_puts(&w, ", ");
            ag_tuple(&w, vt, x->meta.ndim);
            int64_t ext = ag_extent(b->sizes, b->strides, b->ndim, 0);
            int64_t vext = ag_extent(vs, vt, x->meta.ndim, x->view_offset);
            cdy_buf_printf(&w, ", %lld, %lld)", (long long)x->view_offset,
                           (long long)(ext > vext ? ext : vext));
            int d, pre;
            int64_t a, len, psz[CDY_MAX_NDIM];
            for (int i = 0; i < vn; i++)
                psz[i] = vs[vo[i]];
            cdy_buf_puts(&box, e.data ? e.data : "");
            held = ag_box(vs, vt, vo, vn, x->view_offset, b, &box, &d, &a, &len, &pre) &&
                   !ag_hold_piece(s, x->view_base, d, a, len, box.data ? box.data : "",
                                  w.data ? w.data : "", pre, psz, vn);
            cdy_buf_free(&box);
            cdy_buf_free(&e);
            e = w;
        }
    }
    if (!rc && !held)
        ag_add(s, v, x->view_base, e.data ? e.data : "", 0);
    cdy_buf_free(&e);
    return rc;
}

/* The pynode (torch call) that defines extern value v, or NULL. */
static const cdy_pynode *ag_pynode(const ag_state *s, int v)
{
    for (int i = 0; i < s->t->npynodes; i++)
        if (s->t->pynodes[i].value == v && s->t->pynodes[i].item < 0)
            return &s->t->pynodes[i];
    return NULL;
}

/* The item pynode that defines value v (an output of a multi-output
 * call), or NULL. */
static const cdy_pynode *ag_item_pynode(const ag_state *s, int v)
{
    for (int i = 0; i < s->t->npynodes; i++)
        if (s->t->pynodes[i].value == v && s->t->pynodes[i].item >= 0)
            return &s->t->pynodes[i];
    return NULL;
}

/* Argument i of call p as the backward writes it, into b: a value, a
 * constant (_K[k]) or a sequence of them. */
static int ag_call_arg(ag_state *s, const cdy_pynode *p, int i, cdy_buf *b)
{
    if (p->ref[i] >= 0) {
        ag_value(s, b, p->ref[i]);
        return 0;
    }
    if (p->ref[i] == -1) {
        if (PyList_Append(s->consts, p->cst[i]))
            return -1;
        cdy_buf_printf(b, "_K[%zd]", PyList_GET_SIZE(s->consts) - 1);
        return 0;
    }
    const cdy_pyseq *q = &p->seq[i];
    cdy_buf_puts(b, q->is_list ? "[" : "(");
    for (int k = 0; k < q->n; k++) {
        if (q->ref[k] >= 0) {
            if (s->needs[q->ref[k]])
                return 1;          /* a gradient through a sequence: not written */
            ag_value(s, b, q->ref[k]);
        } else {
            if (PyList_Append(s->consts, q->cst[k]))
                return -1;
            cdy_buf_printf(b, "_K[%zd]", PyList_GET_SIZE(s->consts) - 1);
        }
        cdy_buf_puts(b, ", ");
    }
    cdy_buf_puts(b, q->is_list ? "]" : ")");
    return 0;
}

/* The name of callable fn (its __name__), into out. */
static void ag_fn_name(PyObject *fn, char *out, size_t n)
{
    PyObject *nm = fn ? PyObject_GetAttrString(fn, "__name__") : NULL;
    snprintf(out, n, "%s", nm && PyUnicode_Check(nm) ? PyUnicode_AsUTF8(nm) : "?");
    Py_XDECREF(nm);
    PyErr_Clear();
}

/* linear(x, w[, b]): b's gradient (a column sum, first: its kernel reads g<v> right
 * after the kernel that wrote it, from the same cores' caches, before the matmuls
 * pass over other data), then x's and w's (torch's matmuls). */
static void ag_linear(ag_state *s, int v, const int *r, int n)
{
    const cdy_meta *w = &s->g->values[r[1]].meta, *x = &s->g->values[r[0]].meta;
    long long o = w->sizes[0], i = w->sizes[1], rows = 1;   /* rows: not -1 (0 elements) */
    for (int d = 0; d + 1 < x->ndim; d++)
        rows *= x->sizes[d];
    char e[192];
    if (n == 3 && r[2] >= 0 && s->needs[r[2]])
        snprintf(e, sizeof(e), "g%d.reshape(%lld, %lld).sum(0)", v, rows, o), ag_add(s, v, r[2], e, 0);
    if (s->needs[r[0]])
        snprintf(e, sizeof(e), "g%d @ v%d", v, r[1]), ag_add(s, v, r[0], e, 0), s->used[r[1]] = 1;
    if (s->needs[r[1]])
        snprintf(e, sizeof(e), "g%d.reshape(%lld, %lld).t() @ v%d.reshape(%lld, %lld)", v, rows, o,
                 r[0], rows, i),
            ag_add(s, v, r[1], e, 0), s->used[r[0]] = 1;
}

/* 1 if torch.matmul would copy stack a (its batch dims, those before the
 * last two, do not merge into one: attention's q / k / v, views of the qkv
 * projection with head and batch strides apart), where its matrices are
 * row- or column-major. */
static int ag_mm_copies(const ag_state *s, int a)
{
    const cdy_meta *m = &s->g->values[a].meta;
    int n = m->ndim;
    if (n < 4 || (m->strides[n - 1] != 1 && m->strides[n - 2] != 1))
        return 0;
    int64_t inner = -1;      /* stride the next batch dim out must have */
    for (int d = n - 3; d >= 0; d--) {
        if (m->sizes[d] == 1)
            continue;
        if (inner >= 0 && m->strides[d] != inner)
            return 1;
        inner = m->strides[d] * m->sizes[d];
    }
    return 0;
}

/* Stack a as a matmul operand into e: v<a>, or (where torch.matmul would
 * copy it through ATen's strided copy, about twice as slow) a contiguous
 * copy in its own memory order, which the backward's graph makes with one
 * of its own copy kernels (runs of the inner dim). */
static void ag_mm_operand(ag_state *s, int a, char *e, size_t n)
{
    const cdy_meta *m = &s->g->values[a].meta;
    s->used[a] = 1;
    if (!ag_mm_copies(s, a))
        snprintf(e, n, "v%d", a);
    else if (m->strides[m->ndim - 1] == 1)
        snprintf(e, n, "v%d.contiguous()", a);
    else
        snprintf(e, n, "v%d.transpose(-1, -2).contiguous().transpose(-1, -2)", a);
}

/* Stack v's gradient (read by both of its matmul's gradients) made
 * contiguous once, where it arrives permuted (attention's p @ v: the
 * gradient of y.transpose(1, 2)'s copy), so that neither matmul copies it
 * through ATen; contiguous() of a contiguous gradient is that gradient. */
static void ag_mm_grad_ready(ag_state *s, int v)
{
    cdy_buf_printf(&s->body, "    g%d = g%d.contiguous()\n", v, v);
}

/* 1 if operand a's matrices are column-major (its last dim strided, the one
 * before it unit: k.transpose(-2, -1) of attention, w.t()). */
static int ag_col_major(const ag_state *s, int a)
{
    const cdy_meta *m = &s->g->values[a].meta;
    int n = m->ndim;
    return n >= 2 && m->sizes[n - 1] > 1 && m->sizes[n - 2] > 1 && m->strides[n - 1] != 1 &&
           m->strides[n - 2] == 1;
}

/* a @ b (mm, bmm, matmul of two matrices or stacks): both gradients,
 * summed over broadcast batch dims.  An operand whose matrices are
 * column-major gets its gradient as the transpose of a row-major product
 * ((g^T @ a)^T for b, (b @ g^T)^T for a): the gradient is then laid out as
 * the operand's memory (k's gradient in attention reaches the cat of the qkv
 * gradients in rows, not transposed; w.t()'s reaches w's as w's layout). */
static void ag_matmul(ag_state *s, int v, const int *r)
{
    char e[320], o[96];
    if (s->g->values[v].meta.ndim >= 4 && s->needs[r[0]] && s->needs[r[1]])
        ag_mm_grad_ready(s, v);
    if (s->needs[r[0]]) {
        ag_mm_operand(s, r[1], o, sizeof(o));
        if (ag_col_major(s, r[0]))
            snprintf(e, sizeof(e), "(%s @ g%d.transpose(-1, -2)).transpose(-1, -2)", o, v);
        else
            snprintf(e, sizeof(e), "g%d @ %s.transpose(-1, -2)", v, o);
        ag_add(s, v, r[0], e, AG_BCAST_MM);
    }
    if (s->needs[r[1]]) {
        ag_mm_operand(s, r[0], o, sizeof(o));
        const cdy_meta *ma = &s->g->values[r[0]].meta, *mb = &s->g->values[r[1]].meta;
        char fa[160], fg[40];
        if (ma->ndim >= 3 && mb->ndim == 2) {   /* a stack times a matrix: one mm, as eager */
            snprintf(fa, sizeof(fa), "%s.reshape(-1, %lld)", o, (long long)mb->sizes[0]);
            snprintf(fg, sizeof(fg), "g%d.reshape(-1, %lld)", v, (long long)mb->sizes[1]);
        } else {
            snprintf(fa, sizeof(fa), "%s", o);
            snprintf(fg, sizeof(fg), "g%d", v);
        }
        if (ag_col_major(s, r[1]))
            snprintf(e, sizeof(e), "(%s.transpose(-1, -2) @ %s).transpose(-1, -2)", fg, fa);
        else
            snprintf(e, sizeof(e), "%s.transpose(-1, -2) @ %s", fa, fg);
        ag_add(s, v, r[1], e, ma->ndim >= 3 && mb->ndim == 2 ? 0 : AG_BCAST_MM);   /* folded: b's shape */
    }
}

/* torch's own ops for the gradients of the externs with a formula here
 * (positional tensor arguments r[0..n), values or -1): 0, or 1 when fn
 * with these arguments has none. */
static int ag_extern_known(ag_state *s, int v, const char *fn, int n, const int *r)
{
    const cdy_meta *m0 = n > 0 && r[0] >= 0 ? &s->g->values[r[0]].meta : NULL;
    const cdy_meta *m1 = n > 1 && r[1] >= 0 ? &s->g->values[r[1]].meta : NULL;
    if (!m0 || !m1)
        return 1;
    int lin = !strcmp(fn, "linear") && (n == 2 || n == 3) && m1->ndim == 2;
    int mm = n == 2 && !strcmp(fn, "mm") && m0->ndim == 2 && m1->ndim == 2;
    int bmm = n == 2 && !strcmp(fn, "bmm") && m0->ndim == 3 && m1->ndim == 3;
    int mat = n == 2 && (!strcmp(fn, "matmul") || !strcmp(fn, "__matmul__")) &&
              m0->ndim >= 2 && m1->ndim >= 2;
    if (lin)
        ag_linear(s, v, r, n);
    else if (mm || bmm || mat)
        ag_matmul(s, v, r);
    else
        return 1;
    return 0;
}

/* reshape-like extern v (the elements of its first argument in row-major
 * order, kept: reshape, view, flatten, contiguous, clone; other arguments
 * no tensors that need a gradient): its gradient reshaped; 1 when fn is
 * other. */
static int ag_same_elems(ag_state *s, int v, const char *fn, const cdy_pynode *p)
{
    static const char *const names[] = {"reshape", "view", "flatten", "unflatten",
                                        "contiguous", "clone", NULL};
    int known = 0;
    for (int k = 0; names[k]; k++)
        known |= !strcmp(fn, names[k]);
    if (!known || p->nargs < 1 || p->ref[0] < 0)
        return 1;
    for (int i = 1; i < p->nargs; i++)
        if (p->ref[i] >= 0 && s->needs[p->ref[i]])
            return 1;
    const cdy_meta *m = &s->g->values[p->ref[0]].meta;
    if (cdy_meta_numel(m) != cdy_meta_numel(&s->g->values[v].meta))
        return 1;
    cdy_buf e = {0};
    cdy_buf_printf(&e, "g%d.reshape(", v);
    ag_tuple(&e, m->sizes, m->ndim);
    cdy_buf_puts(&e, ")");
    ag_add(s, v, p->ref[0], e.data ? e.data : "", 0);
    cdy_buf_free(&e);
    return 0;
}

/* A loss call f(input, target[, reduction=...]): its reduction (0 mean,
 * 1 sum, 2 none), or -1 for other arguments. */
static int ag_loss_reduction(const cdy_pynode *p)
{
    int nkw = p->kwnames ? (int)PyTuple_GET_SIZE(p->kwnames) : 0;
    if (p->nargs - nkw != 2 || nkw > 1)
        return -1;
    if (!nkw)
        return 0;
    const char *k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(p->kwnames, 0));
    PyObject *r = p->ref[2] == -1 ? p->cst[2] : NULL;
    const char *rs = r && PyUnicode_Check(r) ? PyUnicode_AsUTF8(r) : NULL;
    PyErr_Clear();
    if (!k || strcmp(k, "reduction") || !rs)
        return -1;
    return !strcmp(rs, "mean") ? 0 : !strcmp(rs, "sum") ? 1 : !strcmp(rs, "none") ? 2 : -1;
}

/* cross_entropy / nll_loss of (N, C) scores and (N,) class targets with
 * reduction red: the input's gradient (the prelude's formulas); 1 when the
 * arguments are other. */
static int ag_loss(ag_state *s, int v, const char *fn, const cdy_pynode *p, int red)
{
    static const char *const reds[] = {"mean", "sum", "none"};
    int x = p->ref[0], t = p->ref[1];
    if (x < 0 || t < 0 || s->g->values[x].meta.ndim != 2 || s->g->values[t].meta.ndim != 1 ||
        s->g->values[t].meta.dtype != CDY_DT_INT64)
        return ag_no_formula(s, v, fn);
    char e[128];
    snprintf(e, sizeof(e), "%s_backward(g%d, v%d, v%d, '%s')", fn, v, x, t, reds[red]);
    s->used[x] = s->used[t] = 1;
    if (s->needs[x])
        ag_add(s, v, x, e, 0);
    return 0;
}

/* 1 if constant c is absent-like for sdpa's keyword `name` (dropout_p 0,
 * enable_gqa False) or a keyword the formula reads (attn_mask, is_causal,
 * scale). */
static int ag_sdpa_kw(const char *name, PyObject *c)
{
    if (!strcmp(name, "attn_mask") || !strcmp(name, "is_causal") || !strcmp(name, "scale"))
        return 1;
    if (!strcmp(name, "dropout_p"))
        return c && PyNumber_Check(c) && PyObject_Not(c) == 1;
    if (!strcmp(name, "enable_gqa"))
        return c == Py_False;
    return 0;
}

/* Add e<v>[i], item i of the attention gradients' call of node v, to the
 * gradient of q / k / v (ref[0..3)) where it is needed. */
static void ag_add_items(ag_state *s, int v, const int *ref)
{
    for (int i = 0; i < 3; i++)
        if (s->needs[ref[i]]) {
            char e[32];
            snprintf(e, sizeof(e), "e%d[%d]", v, i);
            ag_add(s, v, ref[i], e, 0);
        }
}

/* F.scaled_dot_product_attention(q, k, v[, attn_mask], keywords) without
 * dropout, q k v of one batch shape: their gradients (sdpa_backward of the
 * prelude: the attention recomputed, its softmax's derivative); 1 when the
 * call is other. */
static int ag_sdpa(ag_state *s, int v, const cdy_pynode *p)
{
    int nkw = p->kwnames ? (int)PyTuple_GET_SIZE(p->kwnames) : 0, npos = p->nargs - nkw;
    if (npos < 3 || npos > 4)
        return 1;
    for (int i = 0; i < 3; i++)
        if (p->ref[i] < 0 || s->g->values[p->ref[i]].meta.ndim != s->g->values[v].meta.ndim)
            return 1;
    const cdy_meta *q = &s->g->values[p->ref[0]].meta;
    for (int i = 1; i < 3; i++)
        for (int d = 0; d + 2 < q->ndim; d++)
            if (s->g->values[p->ref[i]].meta.sizes[d] != q->sizes[d])
                return 1;
    for (int i = 3; i < p->nargs; i++) {
        const char *name = i < npos ? "attn_mask"
                                    : PyUnicode_AsUTF8(PyTuple_GET_ITEM(p->kwnames, i - npos));
        if (!name || !ag_sdpa_kw(name, p->ref[i] == -1 ? p->cst[i] : NULL) ||
            (p->ref[i] >= 0 && s->needs[p->ref[i]]) || p->ref[i] == -2)
            return 1;
    }
    cdy_buf call = {0};
    cdy_buf_printf(&call, "    e%d = sdpa_backward(g%d, ", v, v);
    int rc = 0;
    for (int i = 0; !rc && i < p->nargs; i++) {
        if (i >= npos)
            cdy_buf_printf(&call, "%s=", PyUnicode_AsUTF8(PyTuple_GET_ITEM(p->kwnames, i - npos)));
        rc = ag_call_arg(s, p, i, &call);
        cdy_buf_puts(&call, ", ");
    }
    cdy_buf_puts(&call, ")\n");
    if (!rc)
        cdy_buf_puts(&s->body, call.data ? call.data : "");
    cdy_buf_free(&call);
    if (rc)
        return rc < 0 ? ag_stop(s, v, CDY_R_OUT_OF_MEMORY, "") : 1;
    ag_add_items(s, v, p->ref);
    return 0;
}

/* 1 if fn is module mod's attribute name (looked up once into *cache;
 * errors cleared: 0). */
static int ag_is_attr(PyObject *fn, PyObject **cache, const char *mod, const char *name)
{
    if (!*cache) {
        PyObject *m = PyImport_ImportModule(mod);
        *cache = m ? PyObject_GetAttrString(m, name) : NULL;
        Py_XDECREF(m);
        PyErr_Clear();
    }
    return *cache && fn == *cache;
}

/* 1 if fn is the training attention rewrite's call
 * (cdynamo._autograd.attention_forward, passes/attention.c). */
static int ag_train_attention(PyObject *fn)
{
    static PyObject *att;
    return ag_is_attr(fn, &att, "cdynamo._autograd", "attention_forward");
}

/* A copy of attention result y (B, H, L, E) that holds y's elements in y's
 * memory order as (B, L, H, E), contiguous (y.transpose(1, 2).reshape(..)'s,
 * which the next linear's weight gradient saves anyway: the backward reads
 * y as its transpose, and y itself is not saved); or -1. */
static int ag_attention_copy(const ag_state *s, int y)
{
    const cdy_meta *m = &s->g->values[y].meta;
    for (int w = 0; w < s->g->nvalues && m->ndim == 4; w++) {
        const cdy_value *x = &s->g->values[w];
        if (!cdy_value_is_copy(x) || x->view_base != y ||
            x->view_offset != 0 || x->meta.ndim != 4 || !cdy_meta_contiguous(&x->meta))
            continue;
        int ok = 1;
        for (int d = 0; d < 4; d++) {
            int e = d == 1 ? 2 : d == 2 ? 1 : d;
            ok &= x->meta.sizes[d] == m->sizes[e] && x->view_strides[d] == m->strides[e] &&
                  x->view_strides[d] == x->meta.strides[d];
        }
        if (ok)
            return w;
    }
    return -1;
}

/* Item v of attention_forward(q, k, v, scale) -> (y, lse): y's gradient
 * carries to q, k and v by one call of _attention_grads (torch's flash
 * backward from the saved y and lse); lse has none.  0, or -1 (stopped). */
static int ag_attention_items(ag_state *s, int v, const cdy_pynode *item)
{
    const cdy_pynode *b = &s->t->pynodes[item->base];
    int lse = -1;
    for (int i = 0; i < s->t->npynodes; i++)
        if (s->t->pynodes[i].item == 1 && s->t->pynodes[i].base == item->base)
            lse = s->t->pynodes[i].value;
    if (item->item != 0)
        return 0;
    if (lse < 0 || b->nargs != 4)
        return ag_no_formula(s, v, "attention_forward");
    cdy_buf call = {0};
    cdy_buf_printf(&call, "    e%d = _attention_grads(g%d, ", v, v);
    int rc = 0;
    for (int i = 0; !rc && i < 4; i++) {
        rc = ag_call_arg(s, b, i, &call);
        cdy_buf_puts(&call, ", ");
    }
    cdy_buf_puts(&call, "False, ");
    int c = ag_attention_copy(s, v);
    ag_value(s, &call, c >= 0 ? c : v);
    cdy_buf_puts(&call, c >= 0 ? ".transpose(1, 2), " : ", ");
    ag_value(s, &call, lse);
    cdy_buf_puts(&call, ")\n");
    if (!rc)
        cdy_buf_puts(&s->body, call.data ? call.data : "");
    cdy_buf_free(&call);
    if (rc)
        return ag_stop(s, v, CDY_R_OUT_OF_MEMORY, "");
    ag_add_items(s, v, b->ref);
    return 0;
}

/* 1 if fn is the attention rewrite's call (cdynamo._attention.attention,
 * passes/attention.c: F.scaled_dot_product_attention's arguments). */
static int ag_fused_attention(PyObject *fn)
{
    static PyObject *att;
    return ag_is_attr(fn, &att, "cdynamo._attention", "attention");
}

/* Argument i of call p (-1: absent, written None) into b, as ag_call_arg. */
static int ag_opt_arg(ag_state *s, const cdy_pynode *p, int i, cdy_buf *b)
{
    if (i < 0) {
        cdy_buf_puts(b, "None");
        return 0;
    }
    return ag_call_arg(s, p, i, b);
}

/* The gradients of a call whose formula (a prelude function) returns one per
 * tensor argument at[0..n) (absent: -1; None where mask is False): call,
 * then each added to its argument.  The call's text is in `call` (it ends
 * with the arguments after the mask). */
static void ag_masked(ag_state *s, int v, const int *at, int n, const cdy_pynode *p,
                      const char *call)
{
    cdy_buf_printf(&s->body, "    e%d = %s\n", v, call);
    for (int k = 0; k < n; k++)
        if (at[k] >= 0 && p->ref[at[k]] >= 0 && s->needs[p->ref[at[k]]]) {
            char e[32];
            snprintf(e, sizeof(e), "e%d[%d]", v, k);
            ag_add(s, v, p->ref[at[k]], e, 0);
        }
}

/* conv1d / conv2d / conv3d(input, weight, bias, stride, padding, dilation,
 * groups): torch's convolution_backward for the gradients that are needed
 * (conv_backward of the prelude); 1 when the call is other (padding given
 * as a string: the vjp). */
static int ag_conv(ag_state *s, int v, const cdy_pynode *p)
{
    static const char *const names[] = {"input", "weight", "bias", "stride", "padding",
                                        "dilation", "groups"};
    int at[7];
    for (int k = 0; k < 7; k++)
        at[k] = cdy_pynode_arg_at(p, k, names[k]);
    if (at[0] < 0 || at[1] < 0 || p->ref[at[0]] < 0 || p->ref[at[1]] < 0)
        return 1;
    PyObject *pad = ag_const_arg(p, 4, "padding");
    if (!pad || PyUnicode_Check(pad) || (at[2] >= 0 && p->ref[at[2]] == -2))
        return 1;
    for (int k = 3; k < 7; k++)
        if (at[k] >= 0 && p->ref[at[k]] >= 0)
            return 1;                      /* a tensor where a number goes */
    cdy_buf c = {0};
    cdy_buf_puts(&c, "conv_backward(g");
    cdy_buf_printf(&c, "%d, (", v);
    for (int k = 0; k < 3; k++)
        cdy_buf_puts(&c, at[k] >= 0 && p->ref[at[k]] >= 0 && s->needs[p->ref[at[k]]] ? "True, "
                                                                                     : "False, ");
    cdy_buf_puts(&c, ")");
    int rc = 0;
    for (int k = 0; !rc && k < 7; k++) {
        cdy_buf_puts(&c, ", ");
        rc = k == 2 ? 0 : ag_opt_arg(s, p, at[k], &c);
        if (k == 2)   /* the bias: only whether there is one */
            cdy_buf_puts(&c, at[2] >= 0 && p->ref[at[2]] >= 0 ? "True" : "False");
    }
    cdy_buf_puts(&c, ")");
    if (!rc)
        ag_masked(s, v, at, 3, p, c.data);
    cdy_buf_free(&c);
    return rc < 0 ? ag_stop(s, v, CDY_R_OUT_OF_MEMORY, "") : rc;
}

/* F.batch_norm(input, running_mean, running_var, weight, bias, training,
 * momentum, eps) in training mode: the gradients of input, weight and bias
 * from the batch statistics (batch_norm_backward of the prelude, fused like
 * layer_norm's); the running statistics the forward's extern updated are
 * not read.  1 when the call is other (eval mode: the vjp). */
static int ag_batch_norm(ag_state *s, int v, const cdy_pynode *p)
{
    static const char *const names[] = {"input", "weight", "bias", "eps"};
    static const int pos[] = {0, 3, 4, 7};
    int at[4];
    for (int k = 0; k < 4; k++)
        at[k] = cdy_pynode_arg_at(p, pos[k], names[k]);
    PyObject *tr = ag_const_arg(p, 5, "training");
    if (tr != Py_True || at[0] < 0 || p->ref[at[0]] < 0 ||
        s->g->values[p->ref[at[0]]].meta.ndim < 2)
        return 1;
    for (int k = 1; k < 4; k++)
        if (at[k] >= 0 && p->ref[at[k]] == -2)
            return 1;
    cdy_buf c = {0};
    cdy_buf_printf(&c, "batch_norm_backward(g%d, (", v);
    for (int k = 0; k < 3; k++)
        cdy_buf_puts(&c, at[k] >= 0 && p->ref[at[k]] >= 0 && s->needs[p->ref[at[k]]] ? "True, "
                                                                                     : "False, ");
    cdy_buf_puts(&c, ")");
    int rc = 0;
    for (int k = 0; !rc && k < 4; k++) {
        cdy_buf_puts(&c, ", ");
        if (k == 3 && at[3] < 0)
            cdy_buf_puts(&c, "1e-05");
        else
            rc = ag_opt_arg(s, p, at[k], &c);
    }
    cdy_buf_puts(&c, ")");
    if (!rc)
        ag_masked(s, v, at, 3, p, c.data);
    cdy_buf_free(&c);
    return rc < 0 ? ag_stop(s, v, CDY_R_OUT_OF_MEMORY, "") : rc;
}

/* Pair value a of a pool node (h << 32 | w) as a Python tuple into b. */
static void ag_pair(const ag_state *s, int a, cdy_buf *b)
{
    int64_t i = s->g->values[a].i;
    cdy_buf_printf(b, "(%lld, %lld)", (long long)(i >> 32), (long long)(i & 0xffffffff));
}

/* 1 if pool node x's output is larger than floor mode gives (ceil_mode). */
static int ag_pool_ceil(const ag_state *s, const cdy_value *x, int max)
{
    const cdy_meta *im = &s->g->values[x->args[0]].meta;
    for (int d = 0; d < 2; d++) {
        int sh = d ? 0 : 32, nd = im->ndim;
        int64_t k = s->g->values[x->args[1]].i >> sh & 0xffffffff;
        int64_t st = s->g->values[x->args[2]].i >> sh & 0xffffffff;
        int64_t pd = s->g->values[x->args[3]].i >> sh & 0xffffffff;
        int64_t dl = max ? s->g->values[x->args[4]].i >> sh & 0xffffffff : 1;
        int64_t in = im->sizes[nd - 2 + d];
        if (st > 0 && (in + 2 * pd - dl * (k - 1) - 1) / st + 1 != x->meta.sizes[nd - 2 + d])
            return 1;
    }
    return 0;
}

/* Pool node v (kind W): its input's gradient by torch's backward op of the
 * pool (the prelude's max_pool2d_backward, given the pool's result, finds the
 * argmax of windows that tile the input in two kernels; else it and
 * adaptive_max_pool2d_backward recompute the indices); upsample has none. */
static int ag_pool(ag_state *s, int v)
{
    const cdy_value *x = &s->g->values[v];
    int in = x->args[0];
    cdy_buf e = {0};
    if (x->op == CDY_OP_MAX_POOL2D || x->op == CDY_OP_AVG_POOL2D) {
        int max = x->op == CDY_OP_MAX_POOL2D;
        cdy_buf_printf(&e, "%s(g%d, ", max ? "max_pool2d_backward"
                                           : "torch.ops.aten.avg_pool2d_backward", v);
        ag_value(s, &e, in);
        for (int a = 1; a < 4 + max; a++) {
            cdy_buf_puts(&e, ", ");
            ag_pair(s, x->args[a], &e);
        }
        cdy_buf_puts(&e, ag_pool_ceil(s, x, max) ? ", True" : ", False");
        if (max) {
            cdy_buf_puts(&e, ", y=");
            ag_value(s, &e, v);
        } else {
            int64_t fl = s->g->values[x->args[4]].i;
            cdy_buf_printf(&e, ", %s, ", fl & 1 ? "True" : "False");
            if (fl >> 1)
                cdy_buf_printf(&e, "%lld", (long long)(fl >> 1));
            else
                cdy_buf_puts(&e, "None");
        }
        cdy_buf_puts(&e, ")");
    } else if (x->op == CDY_OP_ADAPTIVE_AVG_POOL2D) {
        cdy_buf_printf(&e, "torch.ops.aten._adaptive_avg_pool2d_backward(g%d, ", v);
        ag_value(s, &e, in);
        cdy_buf_puts(&e, ")");
    } else if (x->op == CDY_OP_ADAPTIVE_MAX_POOL2D) {
        const cdy_meta *m = &x->meta;
        cdy_buf_printf(&e, "adaptive_max_pool2d_backward(g%d, ", v);
        ag_value(s, &e, in);
        cdy_buf_printf(&e, ", (%lld, %lld))", (long long)m->sizes[m->ndim - 2],
                       (long long)m->sizes[m->ndim - 1]);
    } else
        return ag_no_formula(s, v, NULL);
    if (s->needs[in])
        ag_add(s, v, in, e.data ? e.data : "", 0);
    cdy_buf_free(&e);
    return 0;
}

/* 1 if extern call p (of fn) updates running statistics in place:
 * batch_norm not in eval mode, instance_norm with running statistics. */
static int ag_updates_stats(const cdy_pynode *p, const char *fn)
{
    if (!strcmp(fn, "batch_norm"))
        return ag_const_arg(p, 5, "training") != Py_False;
    if (!strcmp(fn, "instance_norm"))
        return ag_const_arg(p, 1, "running_mean") != Py_None;
    return 0;
}

/* Extern node v: torch's ops for known callables, else a vector-Jacobian
 * product through torch's autograd at run time (vjp of the prelude). */
static int ag_extern(ag_state *s, int v)
{
    const cdy_pynode *p = ag_pynode(s, v);
    char fn[64];
    if (!p) {
        const cdy_pynode *item = ag_item_pynode(s, v);
        if (item)
            return ag_multi(s, v, item);
        return ag_no_formula(s, v, "an extern without a call");
    }
    ag_fn_name(p->fn, fn, sizeof(fn));
    if (!strcmp(fn, "bernoulli.p"))
        return 0;                          /* dropout's noise: no gradient (derivatives.yaml) */
    if (cdy_pynode_draws_rng(p))          /* a recompute would draw again */
        return ag_no_formula(s, v, fn);
    if (!strcmp(fn, "detach"))
        return 0;                          /* no gradient flows through */
    if ((!strcmp(fn, "conv1d") || !strcmp(fn, "conv2d") || !strcmp(fn, "conv3d")) &&
        !ag_conv(s, v, p))
        return 0;
    if (!strcmp(fn, "batch_norm") && !ag_batch_norm(s, v, p))
        return 0;
    if (ag_updates_stats(p, fn))           /* the vjp would update them again */
        return ag_no_formula(s, v, fn);
    if (!ag_same_elems(s, v, fn, p))
        return 0;
    if ((!strcmp(fn, "scaled_dot_product_attention") || ag_fused_attention(p->fn)) &&
        !ag_sdpa(s, v, p))
        return 0;
    int red = ag_loss_reduction(p);
    if (red >= 0 && (!strcmp(fn, "cross_entropy") || !strcmp(fn, "nll_loss")))
        return ag_loss(s, v, fn, p, red);
    int nkw = p->kwnames ? (int)PyTuple_GET_SIZE(p->kwnames) : 0;
    if (!nkw && p->nargs <= 3 && !ag_extern_known(s, v, fn, p->nargs, p->ref))
        return 0;
    cdy_buf call = {0};
    int want[CDY_MAX_NODE_ARGS], nw = 0, rc = 0;
    if (PyList_Append(s->consts, p->fn))
        rc = -1;
    cdy_buf_printf(&call, "    e%d = vjp(_K[%zd], g%d, (", v, PyList_GET_SIZE(s->consts) - 1, v);
    for (int i = 0; !rc && i < p->nargs; i++) {
        rc = ag_call_arg(s, p, i, &call);
        cdy_buf_puts(&call, ", ");
        if (p->ref[i] >= 0 && s->needs[p->ref[i]] && nw < CDY_MAX_NODE_ARGS)
            want[nw++] = i;
    }
    if (rc) {
        cdy_buf_free(&call);
        return rc < 0 ? ag_stop(s, v, CDY_R_OUT_OF_MEMORY, "") : ag_no_formula(s, v, fn);
    }
    cdy_buf_puts(&call, "), ");
    if (nkw && PyList_Append(s->consts, p->kwnames) == 0)
        cdy_buf_printf(&call, "_K[%zd], (", PyList_GET_SIZE(s->consts) - 1);
    else
        cdy_buf_puts(&call, "(), (");
    for (int k = 0; k < nw; k++)
        cdy_buf_printf(&call, "%d, ", want[k]);
    cdy_buf_puts(&call, "))\n");
    cdy_buf_puts(&s->body, call.data ? call.data : "");
    cdy_buf_free(&call);
    for (int k = 0; k < nw; k++) {
        char e[48];
        snprintf(e, sizeof(e), "e%d[%d]", v, k);
        ag_add(s, v, p->ref[want[k]], e, 0);
    }
    return 0;
}

/* The constant argument `name` at position pos of call p (or by keyword):
 * borrowed, Py_None when absent, NULL when it is a tensor. */
static PyObject *ag_const_arg(const cdy_pynode *p, int pos, const char *name)
{
    int at = cdy_pynode_arg_at(p, pos, name);
    return at < 0 ? Py_None : p->ref[at] == -1 ? p->cst[at] : NULL;
}

/* Gather node v made by an embedding call: its padding_idx into *pad (-1:
 * none); 0, or 1 for options whose gradient differs (max_norm renorms the
 * weight in place, scale_grad_by_freq, sparse). */
static int ag_embedding_pad(const ag_state *s, int v, int64_t *pad)
{
    const cdy_pynode *p = ag_pynode(s, v);
    char fn[64];
    *pad = -1;
    ag_fn_name(p ? p->fn : NULL, fn, sizeof(fn));
    if (!p || strcmp(fn, "embedding"))
        return 0;
    /* F.embedding(input, weight, padding_idx, max_norm, norm_type, scale_grad_by_freq,
     * sparse); torch.embedding(weight, input, padding_idx, scale_grad_by_freq, sparse) */
    int f = p->nargs > 0 && p->ref[0] >= 0 && !ag_is_float(s->g->values[p->ref[0]].meta.dtype);
    PyObject *pi = ag_const_arg(p, 2, "padding_idx");
    PyObject *mn = f ? ag_const_arg(p, 3, "max_norm") : Py_None;
    PyObject *sc = ag_const_arg(p, f ? 5 : 3, "scale_grad_by_freq");
    PyObject *sp = ag_const_arg(p, f ? 6 : 4, "sparse");
    if (!pi || mn != Py_None || (sc != Py_None && sc != Py_False) ||
        (sp != Py_None && sp != Py_False))
        return 1;
    if (pi != Py_None) {
        *pad = PyLong_AsLongLong(pi);
        if (*pad < 0)
            *pad += s->g->values[s->g->values[v].view_base].meta.sizes[0];
        PyErr_Clear();
    }
    return 0;
}

/* Gather node v (embedding, index_select, x[idx]) with one index tensor: its
 * gradient onto its base, the gradient's elements added at the storage
 * positions they were loaded from (gather_backward of the prelude). */
static int ag_gather(ag_state *s, int v)
{
    const cdy_value *x = &s->g->values[v];
    const cdy_meta *b = &s->g->values[x->view_base].meta;
    if (x->nargs != 4 || ag_sorted_dims(b->sizes, b->strides, b->ndim, (int[CDY_MAX_NDIM]){0}) < 0)
        return ag_no_formula(s, v, "an indexed load of several indices or of an overlapping tensor");
    int64_t pad;
    if (ag_embedding_pad(s, v, &pad))
        return ag_no_formula(s, v, "embedding with max_norm, scale_grad_by_freq or sparse");
    const cdy_value *stride = &s->g->values[x->args[1]], *size = &s->g->values[x->args[2]];
    const cdy_value *code = &s->g->values[x->args[3]];
    cdy_buf e = {0};
    int idx = x->args[0];
    cdy_buf_printf(&e, "gather_backward(g%d, ", v);
    if (code->i & 16)
        cdy_buf_printf(&e, "torch.where(v%d < 0, v%d + %lld, v%d)", idx, idx, (long long)size->i, idx);
    else
        cdy_buf_printf(&e, "v%d", idx);
    s->used[idx] = 1;
    cdy_buf_printf(&e, " * %lld + %lld", (long long)stride->i, (long long)x->view_offset);
    for (int d = 0; d < x->meta.ndim; d++) {
        if (!x->view_strides[d])
            continue;
        int64_t shape[CDY_MAX_NDIM];
        for (int k = 0; k < x->meta.ndim; k++)
            shape[k] = k == d ? x->meta.sizes[d] : 1;
        cdy_buf_printf(&e, " + torch.arange(%lld).reshape(", (long long)x->meta.sizes[d]);
        ag_tuple(&e, shape, x->meta.ndim);
        cdy_buf_printf(&e, ") * %lld", (long long)x->view_strides[d]);
    }
    cdy_buf_puts(&e, ", ");
    ag_tuple(&e, b->sizes, b->ndim);
    cdy_buf_puts(&e, ", ");
    ag_tuple(&e, b->strides, b->ndim);
    cdy_buf_printf(&e, ", %lld)", (long long)ag_extent(b->sizes, b->strides, b->ndim, 0));
    if (pad >= 0 && b->ndim == 2)   /* the padding row gets no gradient */
        cdy_buf_printf(&e, " * (torch.arange(%lld) != %lld).unsqueeze(1)", (long long)b->sizes[0],
                       (long long)pad);
    ag_add(s, v, x->view_base, e.data ? e.data : "", 0);
    cdy_buf_free(&e);
    return 0;
}

/* cat / stack node v (pieces, dim): each piece's gradient is its window of
 * the gradient (narrow / select). */
static int ag_cat(ag_state *s, int v)
{
    const cdy_value *x = &s->g->values[v];
    int stack = !strcmp(cdy_op_table[x->op].name, "stack_pieces");
    if (!stack && strcmp(cdy_op_table[x->op].name, "concat_pieces"))
        return ag_no_formula(s, v, NULL);   /* pad_constant */
    int64_t dim = s->g->values[x->args[x->nargs - 1]].i, off = 0;
    if (dim < 0)
        dim += x->meta.ndim;
    char e[128];
    for (int a = 0; a < x->nargs - 1; a++) {
        int p = x->args[a];
        const cdy_meta *m = &s->g->values[p].meta;
        if (stack)
            snprintf(e, sizeof(e), "g%d.select(%lld, %d)", v, (long long)dim, a);
        else
            snprintf(e, sizeof(e), "g%d.narrow(%lld, %lld, %lld)", v, (long long)dim,
                     (long long)off, (long long)(m->ndim > dim ? m->sizes[dim] : 0));
        off += !stack && m->ndim > dim ? m->sizes[dim] : 0;
        if (s->needs[p])
            ag_add(s, v, p, e, 0);
    }
    return 0;
}

/* The int argument `name` at position pos of call p (or by keyword), or dflt. */
static int64_t ag_int_arg(const cdy_pynode *p, int pos, const char *name, int64_t dflt)
{
    int nkw = p->kwnames ? (int)PyTuple_GET_SIZE(p->kwnames) : 0, npos = p->nargs - nkw;
    PyObject *c = NULL;
    if (pos < npos)
        c = p->ref[pos] == -1 ? p->cst[pos] : NULL;
    for (int k = 0; k < nkw; k++) {
        const char *n = PyUnicode_AsUTF8(PyTuple_GET_ITEM(p->kwnames, k));
        if (n && !strcmp(n, name))
            c = p->ref[npos + k] == -1 ? p->cst[npos + k] : NULL;
    }
    int64_t r = c && PyLong_Check(c) ? PyLong_AsLongLong(c) : dflt;
    PyErr_Clear();
    return r;
}

/* Output v (an item) of a multi-output call: when it is the group's last
 * item with a gradient (the first the reverse walk meets), the gradient of the call's input
 * for split / chunk / unbind (the items' gradients, zeros for those without
 * one, concatenated or stacked along dim); other calls have no formula. */
static int ag_multi(ag_state *s, int v, const cdy_pynode *item)
{
    const cdy_pynode *b = &s->t->pynodes[item->base];
    char fn[64];
    if (ag_train_attention(b->fn))
        return ag_attention_items(s, v, item);
    ag_fn_name(b->fn, fn, sizeof(fn));
    int unbind = !strcmp(fn, "unbind");
    int split = !strcmp(fn, "split") || !strcmp(fn, "chunk") || !strcmp(fn, "split_with_sizes");
    int in = b->nargs > 0 ? b->ref[0] : -1;
    if ((!unbind && !split) || in < 0)
        return ag_no_formula(s, v, fn);
    for (int i = 0; i < s->t->npynodes; i++)   /* a later item did it (or will not) */
        if (s->t->pynodes[i].item >= 0 && s->t->pynodes[i].base == item->base &&
            s->t->pynodes[i].value > v && s->has_g[s->t->pynodes[i].value])
            return 0;
    int ndim = s->g->values[in].meta.ndim;
    int64_t dim = ag_int_arg(b, unbind ? 1 : 2, "dim", 0);
    dim += dim < 0 ? ndim : 0;
    cdy_buf e = {0};
    cdy_buf_printf(&e, "torch.%s([", unbind ? "stack" : "cat");
    for (int i = 0; i < s->t->npynodes; i++) {
        const cdy_pynode *it = &s->t->pynodes[i];
        if (it->item < 0 || it->base != item->base)
            continue;
        const cdy_meta *m = &s->g->values[it->value].meta;
        if (s->has_g[it->value])
            cdy_buf_printf(&e, "g%d, ", it->value);
        else {
            cdy_buf_puts(&e, "torch.zeros(");
            ag_tuple(&e, m->sizes, m->ndim);
            cdy_buf_printf(&e, ", dtype=torch.%s), ", cdy_dtype_table[m->dtype].name);
        }
    }
    cdy_buf_printf(&e, "], %lld)", (long long)dim);
    ag_add(s, v, in, e.data ? e.data : "", 0);
    cdy_buf_free(&e);
    return 0;
}

/* layer_norm node v (input, weight, bias, eps, normalized): the gradients of
 * the arguments that need one by one call (layer_norm_backward of the prelude:
 * the rows' statistics once for all three), not three formulas that each
 * recompute them; 0. */
static int ag_layer_norm(ag_state *s, int v)
{
    const cdy_value *x = &s->g->values[v];
    cdy_buf c = {0};
    cdy_buf_printf(&c, "    e%d = layer_norm_backward(g%d, (", v, v);
    for (int k = 0; k < 3; k++) {
        const cdy_value *a = &s->g->values[x->args[k]];
        cdy_buf_puts(&c, a->kind != CDY_VAL_SCALAR && s->needs[x->args[k]] ? "True, " : "False, ");
    }
    cdy_buf_puts(&c, ")");
    for (int k = 0; k < 5; k++) {
        if (k == 2)
            continue;                      /* the bias: no gradient reads it */
        cdy_buf_puts(&c, ", ");
        ag_value(s, &c, x->args[k]);
    }
    cdy_buf_puts(&c, ")\n");
    cdy_buf_puts(&s->body, c.data ? c.data : "");
    cdy_buf_free(&c);
    for (int k = 0; k < 3; k++)
        if (s->g->values[x->args[k]].kind != CDY_VAL_SCALAR && s->needs[x->args[k]]) {
            char e[32];
            snprintf(e, sizeof(e), "e%d[%d]", v, k);
            ag_add(s, v, x->args[k], e, 0);
        }
    return 0;
}

/* Node v's contributions to its arguments' gradients; 0 or -1 (stopped). */
static int ag_node(ag_state *s, int v)
{
    const cdy_value *x = &s->g->values[v];
    int kind = cdy_op_table[x->op].kind;
    if (x->op == CDY_OP_LAYER_NORM)
        return ag_layer_norm(s, v);
    if (kind == 'V')
        return ag_view(s, v);
    if (kind == 'E')
        return ag_extern(s, v);
    if (kind == 'G')
        return ag_gather(s, v);
    if (kind == 'K')
        return ag_cat(s, v);
    if (kind == 'W')
        return ag_pool(s, v);
    return ag_formula(s, v);
}

/* Seed the gradients of the outputs that carry one (go<i>), into `seeds`
 * (the output positions, a tuple); 0 or -1. */
static int ag_seed(ag_state *s, PyObject **seeds)
{
    const cdy_graph *g = s->g;
    *seeds = PyList_New(0);
    for (int i = 0; *seeds && i < g->noutputs; i++) {
        int o = g->outputs[i];
        if (!s->needs[o])
            continue;
        PyObject *n = PyLong_FromLong(i);
        if (!n || PyList_Append(*seeds, n)) {
            Py_XDECREF(n);
            return -1;
        }
        Py_DECREF(n);
        if (s->has_g[o])
            cdy_buf_printf(&s->body, "    g%d = g%d + go%d\n", o, o, i);
        else
            cdy_buf_printf(&s->body, "    g%d = go%d\n", o, i);
        s->has_g[o] = 1;
    }
    return *seeds ? 0 : -1;
}

/* The value of graph input position i, or -1. */
static int ag_input_value(const cdy_graph *g, int i)
{
    for (int v = 0; v < g->nvalues; v++)
        if (g->values[v].kind == CDY_VAL_INPUT && g->values[v].input_index == i)
            return v;
    return -1;
}

/* 1 if graph input i gets a gradient from the backward. */
static int ag_input_has_grad(const ag_state *s, int i)
{
    int v = ag_input_value(s->g, i);
    return v >= 0 && s->needs[v] && s->has_g[v];
}

/* The return statement: the gradients of the inputs that get one, in input
 * order (the backward's graph outputs as they come: the call can skip the
 * frame, frame/eval.c; runtime/train_call.c puts None for the others). */
static void ag_return(ag_state *s)
{
    cdy_buf_puts(&s->body, "    return (");
    for (int i = 0; i < s->g->ninputs; i++)
        if (ag_input_has_grad(s, i))
            cdy_buf_printf(&s->body, "g%d, ", ag_input_value(s->g, i));
    cdy_buf_puts(&s->body, ")\n");
}

/* After the function: GRAD_INPUTS, the graph inputs whose gradients it
 * returns, and NINPUTS, the graph's inputs (python/cdynamo/_autograd.py
 * reads them). */
static void ag_grad_inputs(const ag_state *s, cdy_buf *b)
{
    cdy_buf_puts(b, "\n\nGRAD_INPUTS = (");
    for (int i = 0; i < s->g->ninputs; i++)
        if (ag_input_has_grad(s, i))
            cdy_buf_printf(b, "%d, ", i);
    cdy_buf_printf(b, ")\nNINPUTS = %d\n", s->g->ninputs);
}

/* The op's forward as a torch function of its canonical arguments, for
 * recomputation (CDY_OPF_RECOMPUTE), into b; 0, or 1 when the op is not so. */
static int ag_recompute_fn(int op, cdy_buf *b)
{
    if (!cdy_op_has(op, CDY_OPF_RECOMPUTE))
        return 1;
    cdy_buf_printf(b, "torch.%s%s", strcmp(cdy_op_table[op].name, "gelu") ? "" : "nn.functional.",
                   cdy_op_table[op].name);
    return 0;
}

/* 1 if value a is at hand in the backward without saving more: a scalar, a
 * graph input of dtype dt, a node saved anyway or recomputed before, or
 * dropout's noise (the forward realizes it anyway: saving it in place of
 * noise / (1 - p) spares the forward that tensor, as eager's dropout scales
 * its noise in place; bert_train's forward peak -64 KiB). */
static int ag_at_hand(const ag_state *s, int a, int dt)
{
    const cdy_value *y = &s->g->values[a];
    if (y->kind == CDY_VAL_SCALAR)
        return 1;
    return y->meta.dtype == dt && (y->kind == CDY_VAL_INPUT || s->used[a] || s->recompute[a] ||
                                   ag_is_noise(s, a));
}

/* Used view v made again from its base (an alias; a builder's view has no
 * torch call the runtime could realize it by).  Its offset from the base is
 * relative: as_strided without an offset starts at the base's own, and an
 * offset k > 0 is a slice [k:] of a flat view first (the backward's trace
 * reads no storage_offset(): an input's fake has none of the input's). */
static void ag_recompute_view(ag_state *s, int v, cdy_buf *pre)
{
    const cdy_value *x = &s->g->values[v];
    long long off = (long long)x->view_offset;
    s->recompute[v] = 1;
    cdy_buf_printf(pre, "    v%d = ", v);
    ag_value(s, pre, x->view_base);
    if (off > 0)
        cdy_buf_printf(pre, ".as_strided((%lld, ), (1, ))[%lld:]", off + 1, off);
    cdy_buf_puts(pre, ".as_strided(");
    ag_tuple(pre, x->meta.sizes, x->meta.ndim);
    cdy_buf_puts(pre, ", ");
    ag_tuple(pre, x->view_strides, x->meta.ndim);
    if (off < 0)
        cdy_buf_printf(pre, ", v%d.storage_offset() + %lld", x->view_base, off);
    cdy_buf_puts(pre, ")\n");
}

/* 1 if node v computes per element more than a few arithmetic ops (gelu,
 * sigmoid, tanh) and an extern of the forward reads it: the forward realizes
 * it anyway, so saving it costs no store, and recomputing it would cost the
 * backward a kernel (transformer_stack_train: four gelus of 262144 floats). */
static int ag_realized_costly(const ag_state *s, int v)
{
    const cdy_graph *g = s->g;
    int op = g->values[v].op;
    if (!cdy_op_has(op, CDY_OPF_TRANSCENDENTAL))
        return 0;
    for (int u = v + 1; u < g->nvalues; u++) {
        const cdy_value *y = &g->values[u];
        if (y->kind != CDY_VAL_NODE || cdy_op_table[y->op].kind != 'E')
            continue;
        for (int a = 0; a < y->nargs; a++)
            if (y->args[a] == v)
                return 1;
    }
    return 0;
}

/* Recompute instead of save (a simple rule, not a min-cut): a used view
 * from its base; a used cheap pointwise node whose arguments are at hand
 * (inputs, values saved anyway: relu(h) when h is saved for another
 * derivative), of its dtype, unless ag_realized_costly.  The definitions go
 * first, in graph order. */
static void ag_recompute(ag_state *s, cdy_buf *pre)
{
    const cdy_graph *g = s->g;
    for (int v = 0; v < g->nvalues; v++) {
        const cdy_value *x = &g->values[v];
        if (x->kind != CDY_VAL_NODE || !s->used[v])
            continue;
        if (cdy_value_is_alias(x)) {
            ag_recompute_view(s, v, pre);
            continue;
        }
        int ok = cdy_op_has(x->op, CDY_OPF_RECOMPUTE) && !ag_realized_costly(s, v);
        for (int a = 0; ok && a < x->nargs; a++)
            ok = ag_at_hand(s, x->args[a], x->meta.dtype) && x->args[a] != v;
        if (!ok)
            continue;
        s->recompute[v] = 1;
        cdy_buf_printf(pre, "    v%d = ", v);
        ag_recompute_fn(x->op, pre);
        cdy_buf_puts(pre, "(");
        int gelu = !strcmp(cdy_op_table[x->op].name, "gelu");
        for (int a = 0; a < x->nargs; a++) {
            const cdy_value *y = &g->values[x->args[a]];
            if (gelu && a == 1)
                cdy_buf_printf(pre, "approximate='%s'", y->i ? "tanh" : "none");
            else
                ag_value(s, pre, x->args[a]);
            cdy_buf_puts(pre, ", ");
        }
        cdy_buf_puts(pre, ")\n");
    }
}

/* A line of generated source: its text, '\n' included (not NUL-terminated). */
typedef struct {
    const char *p;
    int n;
} ag_line;

/* text split into lines, in *out (PyMem); their count, or -1 (no memory). */
static int ag_lines(const char *text, ag_line **out)
{
    int n = 0;
    for (const char *c = text; c && *c; c++)
        n += *c == '\n';
    if (!(*out = PyMem_Calloc((size_t)n + 1, sizeof(ag_line))))
        return -1;
    const char *c = text;
    for (int k = 0; k < n; k++) {
        const char *e = strchr(c, '\n');
        (*out)[k].p = c;
        (*out)[k].n = (int)(e - c + 1);
        c = e + 1;
    }
    return n;
}

/* 1 if c is part of a name. */
static int ag_namech(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* 1 if line l names value v (the name vN, whole). */
static int ag_line_uses(const ag_line *l, int v)
{
    char tok[24];
    int tn = snprintf(tok, sizeof tok, "v%d", v);
    for (int i = 0; i + tn <= l->n; i++)
        if (!memcmp(l->p + i, tok, (size_t)tn) && (i == 0 || !ag_namech(l->p[i - 1])) &&
            (i + tn == l->n || !ag_namech(l->p[i + tn])))
            return 1;
    return 0;
}

/* The recomputations (pre: one "    vN = ..." line each) and the body into out,
 * each recomputation just before the first line that reads it (the last
 * first, so that one it reads goes before it), not all at the top: the
 * backward graph then makes each recomputed tensor when its gradient
 * formula comes, rather than holding them all from its start. */
static void ag_place_recomputes(const char *pre, const char *body, cdy_buf *out)
{
    ag_line *pl = NULL, *bl = NULL, *order = NULL;
    int np = ag_lines(pre, &pl), nb = np < 0 ? -1 : ag_lines(body, &bl), n = nb;
    if (nb >= 0 && (order = PyMem_Calloc((size_t)(np + nb) + 1, sizeof(ag_line))))
        memcpy(order, bl, sizeof(ag_line) * (size_t)nb);
    for (int i = np - 1; order && i >= 0; i--) {
        int v, k = 0;
        if (sscanf(pl[i].p, " v%d =", &v) == 1)
            while (k < n && !ag_line_uses(&order[k], v))
                k++;
        k = k < n ? k : 0;   /* read by no line: first */
        memmove(order + k + 1, order + k, sizeof(ag_line) * (size_t)(n - k));
        order[k] = pl[i];
        n++;
    }
    if (order)
        for (int k = 0; k < n; k++)
            cdy_buf_printf(out, "%.*s", order[k].n, order[k].p);
    else {   /* no memory for the lines: all at the top */
        cdy_buf_puts(out, pre ? pre : "");
        cdy_buf_puts(out, body ? body : "");
    }
    PyMem_Free(pl);
    PyMem_Free(bl);
    PyMem_Free(order);
}

/* The forward graph's outputs gain the saved nodes; the function header
 * (saved inputs, saved nodes, output gradients) and body into src.  0 or -1. */
static int ag_finish(ag_state *s, cdy_backward *bw, PyObject *seeds)
{
    cdy_graph *g = s->g;
    cdy_buf pre = {0}, head = {0};
    ag_recompute(s, &pre);
    int nsave = 0;
    for (int v = 0; v < g->nvalues; v++)
        nsave += s->used[v] && !s->recompute[v] && g->values[v].kind == CDY_VAL_NODE;
    int *outs = cdy_arena_alloc(&s->t->arena, sizeof(int) * (size_t)(g->noutputs + nsave + 1));
    PyObject *ins = PyList_New(0);
    if (!outs || !ins) {
        Py_XDECREF(ins);
        return -1;
    }
    memcpy(outs, g->outputs, sizeof(int) * (size_t)g->noutputs);
    cdy_buf_puts(&head, "def backward(");
    for (int i = 0; i < g->ninputs; i++) {
        int v = ag_input_value(g, i);
        if (v < 0 || !s->used[v])
            continue;
        PyObject *n = PyLong_FromLong(i);
        if (!n || PyList_Append(ins, n))
            s->stopped = 1;
        Py_XDECREF(n);
        cdy_buf_printf(&head, "v%d, ", v);
    }
    int no = g->noutputs;
    for (int v = 0; v < g->nvalues; v++)
        if (s->used[v] && !s->recompute[v] && g->values[v].kind == CDY_VAL_NODE) {
            outs[no++] = v;
            cdy_buf_printf(&head, "v%d, ", v);
        }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(seeds); k++)
        cdy_buf_printf(&head, "go%ld, ", PyLong_AsLong(PyList_GET_ITEM(seeds, k)));
    cdy_buf_puts(&head, "):\n");
    ag_place_recomputes(pre.data, s->body.data, &head);
    ag_grad_inputs(s, &head);
    cdy_buf_free(&pre);
    bw->nuser = g->noutputs;
    g->outputs = outs;
    g->noutputs = no;
    bw->src = cdy_buf_str(&head);
    bw->saved_inputs = PyList_AsTuple(ins);
    bw->grad_outputs = PyList_AsTuple(seeds);
    Py_DECREF(ins);
    return bw->src && bw->saved_inputs && bw->grad_outputs && !s->stopped ? 0 : -1;
}

/* The walk: seeds, nodes in reverse, the return; 0 or -1 (stopped or no memory). */
static int ag_walk(ag_state *s, cdy_backward *bw)
{
    PyObject *seeds = NULL;
    int rc = ag_seed(s, &seeds);
    if (!rc && PyList_GET_SIZE(seeds) == 0) {
        Py_DECREF(seeds);
        return 0;                          /* no output needs a gradient */
    }
    for (int v = s->g->nvalues - 1; !rc && v >= 0; v--) {
        ag_flush_pieces(s, v);   /* every view of v came after it: walked already */
        if (s->g->values[v].kind == CDY_VAL_NODE && s->needs[v] && s->has_g[v])
            rc = ag_node(s, v);
    }
    if (!rc) {
        ag_return(s);
        rc = ag_finish(s, bw, seeds);
    }
    Py_XDECREF(seeds);
    return rc;
}

/* 1 if an in-place update of an input cannot run inside the forward as
 * eager's: an output views the input (other than its new value itself),
 * the input requires grad, or its new value carries a gradient
 * (eager would give the input a history); after the walk (`walked`), or
 * the backward reads the input (it would see the new value).  Updates of
 * buffers (BatchNorm's num_batches_tracked) pass. */
static int ag_bad_mutation(const ag_state *s, int walked)
{
    const cdy_trace *t = s->t;
    for (int r = 0; !walked && r < t->nreview; r++) {   /* only the written value itself */
        int ok = 0;
        for (int w = 0; w < t->nwriteback; w++)
            ok |= t->review[r].same && t->review[r].output == t->writeback[2 * w + 1];
        if (!ok)
            return 1;
    }
    for (int w = 0; w < t->nwriteback; w++) {
        int i = t->writeback[2 * w], v = ag_input_value(s->g, i);
        if (walked ? v >= 0 && s->used[v]
                   : (i < t->ninput_rg && t->input_rg[i]) ||
                         s->needs[s->g->outputs[t->writeback[2 * w + 1]]])
            return 1;
    }
    return 0;
}

/* AUTOGRAD_MUTATION, with what the state holds released; -1. */
static int ag_stop_mutation(ag_state *s)
{
    Py_CLEAR(s->consts);
    cdy_buf_free(&s->body);
    return ag_stop(s, -1, CDY_R_AUTOGRAD_MUTATION, "an input");
}

int cdy_autograd_build(cdy_trace *t, cdy_backward *bw)
{
    memset(bw, 0, sizeof(*bw));
    ag_state s;
    memset(&s, 0, sizeof(s));
    s.t = t;
    s.g = &t->graph;
    int n = t->graph.nvalues + 1;
    char *flags = cdy_arena_alloc(&t->arena, (size_t)n * 4);
    s.consts = PyList_New(0);
    if (!flags || !s.consts) {
        Py_XDECREF(s.consts);
        return ag_stop(&s, -1, CDY_R_OUT_OF_MEMORY, "");
    }
    s.needs = flags, s.has_g = flags + n, s.used = flags + 2 * n, s.recompute = flags + 3 * n;
    ag_mark_needs(&s);
    if (ag_bad_mutation(&s, 0))
        return ag_stop_mutation(&s);
    int rc = ag_walk(&s, bw);
    if (!rc && bw->src && ag_bad_mutation(&s, 1))
        rc = ag_stop(&s, -1, CDY_R_AUTOGRAD_MUTATION, "an input");
    cdy_buf_free(&s.body);
    if (rc || !bw->src) {
        int stopped = s.stopped;
        cdy_backward_clear(bw);
        Py_DECREF(s.consts);
        if (rc && !stopped)
            ag_stop(&s, -1, CDY_R_OUT_OF_MEMORY, "");
        PyErr_Clear();
        return rc ? -1 : 0;
    }
    bw->consts = s.consts;
    return 0;
}
