/* autocast.c - CPU autocast (torch.autocast("cpu", dtype=...)) in traces.
 *
 * The fakes are meta tensors, which autocast never sees: a call traced under
 * CPU autocast gets the casts eager's AutocastCPU kernel applies as graph
 * nodes (x.to(dtype), traced), so the graph computes what eager runs and its
 * extern calls receive arguments already in the dtype autocast would give
 * them (at run time, still under the guarded autocast state, torch's cast of
 * them is a no-op).  Policies as torch 2.13's autocast_mode.cpp CPU lists:
 * lower_precision_fp ops cast their floating (not float64) tensor arguments
 * to the autocast dtype; the fp32 ops among those cdynamo lowers (losses,
 * prod) stop the trace (AUTOCAST_OPS: the frame runs eagerly); an extern of
 * any other op under autocast stops it too (its kernel may run autocast ops
 * inside).  Either kind of op makes the trace depend on the autocast state
 * (guarded), also when autocast is off. */
#include <string.h>

#include "trace/trace.h"
#include "frame/guards.h"

/* Ops eager's CPU autocast runs in the lower-precision dtype, by the name a
 * call is traced under (its last dotted part; "@" for the operator). */
static const char *const ac_lower[] = {
    "conv1d", "conv2d", "conv3d", "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm", "addbmm",
    "linear", "_convolution", "matmul", "__matmul__", "__rmatmul__", "@", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
    "scaled_dot_product_attention", "_native_multi_head_attention", NULL};

/* Ops eager's CPU autocast runs in float32 that cdynamo may lower (their
 * result dtype changes under autocast), by traced name. */
static const char *const ac_fp32[] = {
    "prod", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "cross_entropy",
    "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
    "cosine_embedding_loss", "hinge_embedding_loss", "margin_ranking_loss", "poisson_nll_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "multilabel_margin_loss",
    "cdist", "avg_pool3d", "max_pool3d", "adaptive_avg_pool3d", "reflection_pad1d",
    "reflection_pad2d", "replication_pad1d", "replication_pad2d", "replication_pad3d",
    "grid_sampler", "trace", "stft", NULL};

/* Ops with no AutocastCPU kernel whose CPU kernels call no autocast op
 * (torch._C._dispatch_has_kernel_for_dispatch_key says the first): as an
 * extern under autocast they compute what eager does. */
static const char *const ac_plain[] = {
    "layer_norm", "group_norm", "batch_norm", "softmax", "log_softmax", "_softmax",
    "embedding", "tensor", "as_tensor", "arange", "zeros", "ones", "full", "empty",
    "zeros_like", "ones_like", "full_like", "empty_like", "cumsum", "cumprod", "topk", "sort",
    "argsort", "index_select", "gather", "scatter", "where", "masked_fill", "triu", "tril",
    "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "pad",
    "constant_pad_nd", "dropout", "erfinv", "clone", "contiguous", "copy", "to", "repeat",
    "repeat_interleave", "flip", "roll", "cat", "stack", "split", "chunk", "unbind", NULL};

/* 1 if name is in the NULL-terminated list l. */
static int ac_in(const char *const *l, const char *name)
{
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], name))
            return 1;
    return 0;
}

/* The cdy_dtype of the CPU autocast dtype in state word s (c10::ScalarType
 * in bits 8-15), or CDY_DT_NONE. */
static int ac_dtype(int s)
{
    switch ((s >> 8) & 0xff) {
    case 5: return CDY_DT_FLOAT16;
    case 6: return CDY_DT_FLOAT32;
    case 7: return CDY_DT_FLOAT64;
    case 15: return CDY_DT_BFLOAT16;
    default: return CDY_DT_NONE;
    }
}

/* A tensor arg a cast to dtype dt as x.to(dt), traced; a itself when eager's
 * autocast leaves it (not floating, float64, already dt); NULL when stopped. */
static tvar *ac_cast(tracer *tr, tvar *a, int dt)
{
    if (a->kind != TV_TENSOR)
        return a;
    int d = tr->t->graph.values[a->value].meta.dtype;
    if (!cdy_dtype_table[d].is_float || d == CDY_DT_FLOAT64 || d == dt)
        return a;
    tvar *m = cdy_tv_new(tr, TV_METHOD);
    tvar *to = cdy_tv_const(tr, Py_NewRef(cdy_dtype_obj(dt)));
    if (!m || !to || !(m->obj = cdy_tr_keep(tr, PyUnicode_FromString("to"))))
        return NULL;
    m->self = a;
    tvar *args[2] = {a, to};   /* a method call's args start with self */
    return cdy_call(tr, m, args, 2, NULL);
}

int cdy_autocast_args(tracer *tr, const char *what, tvar **args, int nargs, int *handled)
{
    const char *dot = strrchr(what, '.');
    const char *name = dot ? dot + 1 : what;
    int lower = ac_in(ac_lower, name), fp32 = !lower && ac_in(ac_fp32, name);
    *handled = ac_in(ac_plain, name);
    if (!lower && !fp32)
        return 0;
    tr->t->autocast_dep = 1;
    if (!tr->t->autocast_on)
        return 0;
    int dt = ac_dtype(tr->t->autocast_state);
    if (fp32 || dt == CDY_DT_NONE)
        return cdy_tr_stop(tr, AUTOCAST_OPS, what);
    for (int i = 0; i < nargs; i++)
        if (!(args[i] = ac_cast(tr, args[i], dt)))
            return -1;
    *handled = 1;
    return 0;
}
