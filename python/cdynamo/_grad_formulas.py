"""The prelude of every generated backward (trace/autograd.c): derivative formulas
that take more than one expression, by the names ops/ops.def's grad column calls.

Its text is compiled into each backward's namespace (with `torch` and `_K`), not
imported: cdynamo traces these functions inline as the user's own code, so the
backward graph fuses them with the rest.  Keep them traceable: torch ops,
arithmetic, branches on constants.
"""


def gelu_backward(grad, x, approximate, y=None):
    """gelu's derivative; approximate 0: the exact (erf) form, 1: tanh.  y: the
    forward's result gelu(x) where the backward has it at no cost to its peak (saved
    for the next linear's weight gradient: ops.def's result_if_free; the derivative's
    output takes the memory of the dying gradient it reads, compiler/share.c, so even
    the graph's last GELU holds y at no cost), else None: the derivative then reads x
    only, as eager's GeluBackward0."""
    if approximate == 0:
        # Phi(x) as gelu(x) / x where y is at hand: the forward's GELU (a rational
        # function) in place of an erf (one thread, 262144 floats: 407 -> 135 us).
        # |x| >= 5.5: Phi 0 or 1 (GELU's tail is 0 there, as eager's erf rounds);
        # 0.5 at x = 0.  torch.where on x > 0, not a bool .to(): GCC does not
        # vectorize that uint8 -> float conversion.
        if isinstance(y, torch.Tensor) and y.dtype == x.dtype and \
                x.dtype in (torch.float32, torch.float64):
            cdf = torch.where(x.abs() < 5.5, torch.where(x == 0, 0.5, y / x),
                              torch.where(x > 0, 1.0, 0.0))
            pdf = torch.exp(-0.5 * x * x) * 0.3989422804014327
            return grad * (cdf + x * pdf)
        # else Phi(x) + x phi(x) as one op of x alone (_gelu_exact_grad, ops.def
        # GELU_EXACT_GRAD: Phi by the forward GELU's rational function, one division,
        # no erf; 233 -> 187 us where it replaced gelu(x) recomputed for gelu(x) / x,
        # two divisions).  bfloat16 / float16 in float32, rounded once at the end, as
        # eager's kernel (a low-precision y is not read: it would round Phi).
        if x.dtype in (torch.float32, torch.float64):
            return grad * _gelu_exact_grad(x)
        return (grad.float() * _gelu_exact_grad(x.float())).to(grad.dtype)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = torch.tanh(inner)
    return grad * (0.5 * (1.0 + t) +
                   0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * x * x))


def hardswish_backward(grad, x):
    return torch.where(x < -3.0, 0.0, torch.where(x <= 3.0, grad * (x / 3.0 + 0.5), grad))


def mish_backward(grad, x):
    sp = torch.nn.functional.softplus(x)
    t = torch.tanh(sp)
    return grad * (t + x * torch.sigmoid(x) * (1.0 - t * t))


def pow_backward(grad, x, e):
    """pow's gradient for its base, as eager computes it: grad * (e * x ** (e - 1)) in that
    order, exactly 0 where the exponent is 0 (not 0 * x ** -1: -0.0, or nan at x == 0)."""
    if isinstance(e, torch.Tensor):
        return torch.where(e == 0, 0.0, grad * (e * torch.pow(x, e - 1)))
    if e == 0:
        return torch.zeros_like(grad)
    return grad * (e * torch.pow(x, e - 1))


def pow_backward_exponent(grad, x, e, y):
    """pow's gradient for a tensor exponent (y: the result), as eager computes it:
    grad * (y * log(x)), with 0 in place of y * log(x) where x == 0 and e >= 0."""
    return grad * torch.where((x == 0) & (e >= 0), 0.0, y * torch.log(x))


def softmax_backward(grad, y, dim):
    """softmax's gradient for its input from its result y: float32 / float64 one row
    kernel (_softmax_input_grad, cdynamo._autograd.softmax_input_grad: the row's sum of
    grad * y and the gradient in one kernel, where the formula made two)."""
    if y.dtype in (torch.float32, torch.float64) and grad.dtype == y.dtype:
        return _softmax_input_grad(grad, y, dim)
    return y * (grad - (grad * y).sum(dim, keepdim=True))


def _ln_xhat(x, eps, n):
    dims = tuple(range(x.dim() - n, x.dim()))
    mu = x.mean(dims, keepdim=True)
    xc = x - mu
    rstd = torch.rsqrt((xc * xc).mean(dims, keepdim=True) + eps)
    return xc * rstd, rstd, dims


def layer_norm_backward(grad, mask, x, w, eps, n):
    """layer_norm's gradients (input, weight, bias; None where mask says so) in one
    call (trace/autograd.c ag_layer_norm).  float32 / float64: the input's gradient is
    one row kernel (_ln_input_grad, cdynamo._autograd.layer_norm_input_grad), which also
    writes grad * xhat for the weight's (_ln_grad_xhat), and the two column sums (the
    compiler computes them in that row kernel, compiler/rows.c cg_row_pick_sums): 1
    kernel per layer_norm where the formula below made 8 (transformer_stack training).  Else the rows' mean and rstd computed once for all three, the rest fused
    by the compiler around them."""
    lead = tuple(range(x.dim() - n))
    if x.dtype in (torch.float32, torch.float64) and grad.dtype == x.dtype and n >= 1:
        gx = gw = gb = None
        wt = w if isinstance(w, torch.Tensor) else None
        if mask[0]:
            gx = _ln_input_grad(grad, x, wt, eps, n)
        if mask[1]:
            gx_hat = _ln_grad_xhat(grad, x, eps, n)
            gw = gx_hat.sum(lead) if lead else gx_hat
        if mask[2]:
            gb = grad.sum(lead) if lead else grad
        return gx, gw, gb
    xhat, rstd, dims = _ln_xhat(x, eps, n)
    gx = gw = gb = None
    if mask[0]:
        gh = grad * w if isinstance(w, torch.Tensor) else grad
        # the means negated (exactly) and added: eager's +0 where gh's row is all zeros
        gx = rstd * ((gh + (-gh).mean(dims, keepdim=True)) +
                     xhat * (-(gh * xhat)).mean(dims, keepdim=True))
    if mask[1]:
        gw = (grad * xhat).sum(lead) if lead else grad * xhat
    if mask[2]:
        gb = grad.sum(lead) if lead else grad
    return gx, gw, gb


def nll_loss_backward(grad, x, target, reduction):
    """F.nll_loss(x, target)'s gradient for x (N, C), class targets, ignore_index -100."""
    valid = target != -100
    onehot = (torch.arange(x.shape[1]) == target.unsqueeze(1)).to(x.dtype)
    if reduction == "mean":
        scale = valid.to(x.dtype) / valid.sum() * grad
    elif reduction == "sum":
        scale = valid.to(x.dtype) * grad
    else:
        scale = valid.to(x.dtype) * grad
    return -onehot * scale.unsqueeze(1)


def cross_entropy_backward(grad, x, target, reduction):
    """F.cross_entropy(x, target)'s gradient for x (N, C), class targets, ignore_index
    -100: softmax(x) - onehot(target), scaled as the reduction says."""
    valid = target != -100
    onehot = (torch.arange(x.shape[1]) == target.unsqueeze(1)).to(x.dtype)
    if reduction == "mean":
        scale = valid.to(x.dtype) / valid.sum() * grad
    else:
        scale = valid.to(x.dtype) * grad
    return (torch.softmax(x, 1) - onehot) * scale.unsqueeze(1)


def view_scatter(grad, base_sizes, base_strides, sizes, strides, offset, extent):
    """The gradient of a view that is part of its base: grad written where the view
    reads, zeros elsewhere, as the base's sizes and strides."""
    z = grad.new_zeros((extent,))
    z.as_strided(sizes, strides, offset).copy_(grad)
    return z.as_strided(base_sizes, base_strides)


def vjp(fn, grad, args, kwnames, want):
    """The gradients of fn(*args) (the last len(kwnames) by keyword) for args[want]:
    torch's autograd on the extern call, run again (any extern op; not traced)."""
    npos = len(args) - len(kwnames)
    leaves = list(args)
    for i in want:
        leaves[i] = args[i].detach().requires_grad_()
    with torch.enable_grad():
        out = fn(*leaves[:npos], **dict(zip(kwnames, leaves[npos:])))
        if not out.requires_grad:
            return tuple(torch.zeros_like(args[i]) for i in want)
        gs = torch.autograd.grad(out, [leaves[i] for i in want], grad, allow_unused=True)
    return tuple(torch.zeros_like(args[i]) if g is None else g for i, g in zip(want, gs))


def gather_backward(grad, pos, base_sizes, base_strides, extent):
    """The gradient of an indexed load: grad's elements added at the storage positions
    pos (int64, broadcast to grad) they were loaded from, as the base's sizes and
    strides."""
    z = grad.new_zeros((extent,))
    z.index_add_(0, pos.expand(grad.shape).reshape(-1), grad.reshape(-1))
    return z.as_strided(base_sizes, base_strides)


def norm_backward(grad, x, norm, p, dims):
    """vector_norm's gradient (grad and norm with the reduced dims kept); 0 where the
    norm is 0, as torch's norm_backward."""
    if p == 2:
        return torch.where(norm == 0, 0.0, grad * x / norm)
    if p == 1:
        return grad * torch.sgn(x)
    if p == float("inf") or p == float("-inf"):
        mask = (x.abs() == norm).to(x.dtype)
        return grad * torch.sgn(x) * mask / mask.sum(dims, keepdim=True)
    return torch.where(norm == 0, 0.0,
                       grad * x * torch.pow(x.abs(), p - 2) / torch.pow(norm, p - 1))


def sdpa_backward(grad, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                  enable_gqa=False):
    """F.scaled_dot_product_attention's gradients for q, k, v (no dropout): the
    attention weights recomputed, then the matmuls' and softmax's derivatives; 4-d
    float32 without a mask, with a scale given (the attention rewrite's call): one extern
    call, torch's flash kernels (_attention_grads, cdynamo._autograd.attention_grads)."""
    if attn_mask is None and scale is not None and q.dim() == 4 and k.dim() == 4 and \
            v.dim() == 4 and grad.dim() == 4 and q.dtype == torch.float32 and \
            k.dtype == torch.float32 and v.dtype == torch.float32 and \
            grad.dtype == torch.float32 and k.shape[0] == q.shape[0] and \
            v.shape[0] == q.shape[0] and k.shape[1] == q.shape[1] and \
            v.shape[1] == q.shape[1] and k.shape[3] == q.shape[3] and \
            v.shape[3] == q.shape[3] and v.shape[2] == k.shape[2] and \
            grad.shape == q.shape:
        return _attention_grads(grad, q, k, v, scale, is_causal)
    s = scale if scale is not None else q.shape[-1] ** -0.5
    scores = (q @ k.transpose(-1, -2)) * s
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(keep.logical_not(), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            scores = scores + attn_mask
    a = torch.softmax(scores, -1)
    gv = a.transpose(-1, -2) @ grad
    ga = grad @ v.transpose(-1, -2)
    gs = a * (ga - (ga * a).sum(-1, keepdim=True)) * s
    return gs @ k, gs.transpose(-1, -2) @ q, gv


def conv_backward(grad, mask, x, w, has_bias, stride, padding, dilation, groups):
    """F.conv{1,2,3}d's gradients (input, weight, bias; None where mask says so):
    torch's convolution_backward.  An argument the call left out is None."""
    nd = w.dim() - 2

    def tup(a, dflt):
        a = dflt if a is None else a
        return (a,) * nd if isinstance(a, int) else tuple(a)
    return torch.ops.aten.convolution_backward(
        grad, x, w, [w.shape[0]] if has_bias else None, tup(stride, 1), tup(padding, 0),
        tup(dilation, 1), False, (0,) * nd, 1 if groups is None else groups, mask)


def batch_norm_backward(grad, mask, x, w, b, eps):
    """F.batch_norm's gradients in training mode (input, weight, bias; None where mask
    says so) from the batch statistics (biased variance).  The input's gradient reads
    the two column sums the weight and bias gradients are (sum(grad), sum(grad * xhat)),
    so the backward is the statistics' two passes, the sums' and one pointwise pass."""
    dims = (0,) + tuple(range(2, x.dim()))
    shape = (1, -1) + (1,) * (x.dim() - 2)
    mu = x.mean(dims, keepdim=True)
    xc = x - mu
    rstd = torch.rsqrt((xc * xc).mean(dims, keepdim=True) + eps)
    xhat = xc * rstd
    gb = grad.sum(dims)
    gw = (grad * xhat).sum(dims)
    gx = None
    if mask[0]:
        inv_n = 1.0 / (x.numel() // x.shape[1])
        scale = rstd if w is None else rstd * w.reshape(shape)
        gx = scale * (grad - gb.reshape(shape) * inv_n - xhat * (gw.reshape(shape) * inv_n))
    return gx, gw if mask[1] else None, gb if mask[2] else None


def max_pool2d_backward(grad, x, kernel, stride, padding, dilation, ceil_mode, y=None):
    """max_pool2d's gradient.  Windows that tile x (stride = kernel, no padding or
    dilation, sizes divisible; y the forward's result): per window the position eager's
    argmax picks (the last NaN if the window has one, else the first element equal to
    the max), found by a min of keys over the window, gets the window's gradient; two
    kernels, no index tensor.  Else the argmax indices recomputed, torch's backward op."""
    kh, kw = kernel
    hh, ww = x.shape[-2], x.shape[-1]
    if (y is not None and x.is_floating_point() and tuple(stride) == (kh, kw) and
            tuple(padding) == (0, 0) and tuple(dilation) == (1, 1) and
            hh % kh == 0 and ww % kw == 0):
        oh, ow = hh // kh, ww // kw
        lead = tuple(x.shape[:-2])
        x6 = x.reshape(lead + (oh, kh, ow, kw))
        pos = (torch.arange(kh, dtype=torch.int32).reshape(kh, 1) * kw +
               torch.arange(kw, dtype=torch.int32)).reshape(kh, 1, kw)
        if kh * kw <= 16:
            # the window's minimum key as an elementwise minimum of its kh * kw strided
            # views: one pointwise kernel over the pooled sizes, where a reduction over
            # the window's two dims runs scalar loops of kw (cnn_train's 2x2 pool of
            # 8x32x32x32 floats, the whole gradient, one thread: 140 -> 112 us; aten's
            # index recompute and backward: 1470 us)
            sel = None
            for a in range(kh):
                for b in range(kw):
                    xq, q = x6[..., a, :, b], a * kw + b
                    kq = torch.where(xq != xq, -1 - q, torch.where(xq == y, q, kh * kw))
                    sel = kq if sel is None else torch.minimum(sel, kq)
            sel = sel.reshape(lead + (oh, 1, ow, 1))
        else:
            key = torch.where(x6 != x6, -1 - pos,
                              torch.where(x6 == y.reshape(lead + (oh, 1, ow, 1)), pos,
                                          kh * kw))
            sel = key.amin((-3, -1), keepdim=True)
        sel = torch.where(sel < 0, -1 - sel, sel)
        g6 = torch.where(pos == sel, grad.reshape(lead + (oh, 1, ow, 1)), 0.0)
        return g6.reshape(x.shape)
    idx = torch.ops.aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation,
                                                 ceil_mode)[1]
    return torch.ops.aten.max_pool2d_with_indices_backward(grad, x, kernel, stride, padding,
                                                           dilation, ceil_mode, idx)


def adaptive_max_pool2d_backward(grad, x, size):
    idx = torch.ops.aten.adaptive_max_pool2d(x, size)[1]
    return torch.ops.aten.adaptive_max_pool2d_backward(grad, x, idx)
