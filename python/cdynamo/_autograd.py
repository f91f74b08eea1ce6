"""Training graphs at run time (issue 34): a compiled forward and a compiled backward
as one torch.autograd.Function.

trace/autograd.c writes the backward of a traced graph whose inputs require grad as
Python source; TrainingGraph compiles it with cdynamo.optimize (the backward graph is
compiled like any other frame, at the first backward) and its callable() is what
the frame's transformed bytecode calls.  Per call no Python runs but the backward's
optimized frame: the call, _Graph's forward and backward and the backward node's apply
are C (runtime/train_call.c).
"""
import functools
import os

import torch

from . import _C

_PRELUDE = None


def _prelude():
    global _PRELUDE
    if _PRELUDE is None:
        with open(os.path.join(os.path.dirname(__file__), "_grad_formulas.py")) as f:
            _PRELUDE = f.read()
    return _PRELUDE


def dropout_train(x, p):
    """F.dropout(x, p, training=True) as eager's CPU kernel computes it (ATen's
    _dropout_impl), traced inline in training graphs (trace/build_dropout.c): the noise
    drawn by torch's bernoulli at the call's place (a seed gives eager's mask), scaled by
    1 / (1 - p), times x; differentiable as a product."""
    noise = torch.ops.aten.bernoulli.p(x, 1 - p)
    return x * (noise / (1 - p))


def sdpa_dropout_train(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                       scale=None, enable_gqa=False):
    """F.scaled_dot_product_attention with dropout as eager's CPU math path computes it
    (its fused kernels take no dropout), traced inline in training graphs: scores scaled
    by sqrt(scale) on each side, the mask added, a softmax that gives 0 for rows masked
    entirely, dropout_train's mask drawn on the weights, then the product with value."""
    s = (scale if scale is not None else query.shape[-1] ** -0.5) ** 0.5
    a = (query * s) @ (key.transpose(-2, -1) * s)
    if is_causal:
        keep = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool).tril()
        a = a.masked_fill(keep.logical_not(), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            a = a.masked_fill(attn_mask.logical_not(), float("-inf"))
        else:
            a = a + attn_mask
    w = torch.where(a.amax(-1, keepdim=True) == float("-inf"), 0.0, torch.softmax(a, -1))
    return dropout_train(w, dropout_p) @ value


def layer_norm_input_grad(grad, x, w, eps, n):
    """layer_norm(x, x.shape[-n:], w, b, eps)'s gradient for x (w None: no weight): what
    the backward's prelude calls, one row kernel (trace/build_rows.c, compiler/rows.c: the
    rows' moments, the sums of grad * w and of it times xhat, then the gradient, in one
    pass per row over memory); this eager form runs where the builder declines."""
    dims = tuple(range(x.dim() - n, x.dim()))
    mu = x.mean(dims, keepdim=True)
    xc = x - mu
    rstd = torch.rsqrt((xc * xc).mean(dims, keepdim=True) + eps)
    xhat = xc * rstd
    gh = grad * w if w is not None else grad
    # the means negated (exactly) and added: eager's +0 where gh's row is all zeros
    return rstd * ((gh + (-gh).mean(dims, keepdim=True)) +
                   xhat * (-(gh * xhat)).mean(dims, keepdim=True))


def layer_norm_grad_xhat(grad, x, eps, n):
    """grad times layer_norm(x, x.shape[-n:], eps=eps) (xhat): the terms of the weight's
    gradient, which the backward's prelude sums; computed by the input gradient's row
    kernel where there is one (compiler/rows.c); this eager form runs where the builder
    declines."""
    return grad * torch.nn.functional.layer_norm(x, x.shape[x.dim() - n:], None, None, eps)


def gelu_exact_grad(x):
    """The exact GELU's derivative Phi(x) + x phi(x) of a float x: what the backward's
    prelude calls, one pointwise op (ops.def GELU_EXACT_GRAD: no erf, x read alone); this
    eager form runs where the call is not traced."""
    cdf = 0.5 * (1.0 + torch.erf(x * 0.7071067811865476))
    return cdf + x * (torch.exp(-0.5 * x * x) * 0.3989422804014327)


def softmax_input_grad(grad, y, dim):
    """softmax's gradient for its input given its result y: what the backward's prelude
    calls, one row kernel (trace/build_rows.c, compiler/rows.c); this eager form runs
    where the builder declines."""
    return y * (grad - (grad * y).sum(dim, keepdim=True))


def _heads_major(x):
    """x (B, H, L, E) copied into (B, L, H, E) memory, seen as (B, H, L, E): the layout
    torch's CPU flash kernels give attention's gradients (trace/meta.c mt_heads_major)."""
    r = torch.empty((x.shape[0], x.shape[2], x.shape[1], x.shape[3]), dtype=x.dtype)
    r = r.transpose(1, 2)
    r.copy_(x)
    return r


def _last_unit(t):
    return t if t.stride(-1) == 1 else t.contiguous()


def _attention_forward_py(q, k, v, scale):
    """softmax(q @ k^T * scale) @ v and its rows' log-sum-exp (B, H, L) in (B, L, H)
    memory, what a training graph's attention becomes (passes/attention.c; 4-d float32
    q, k, v, no mask): torch's CPU flash kernel where it gives eager's values, else
    eager's unfused ops and a log-sum-exp of NaN, which tells attention_grads to
    differentiate those ops.  The flash kernel's values are eager's (up to rounding)
    when every row's log-sum-exp is finite: a row of scores with +inf, NaN (dropped
    from the kernel's max, kept in its sum) or only -inf entries (eager's softmax:
    NaN; the kernel: zeros) has an infinite or NaN one.  That check reads the B x H x L
    log-sum-exp only, where _attention._fused_is_exact's reads q and k (a copy of each
    first: torch.aminmax of a head view)."""
    if q.numel() and k.numel() and q.shape[-1] == v.shape[-1]:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            _last_unit(q), _last_unit(k), _last_unit(v), 0.0, False, scale=scale)[:2]
        if bool(torch.isfinite(lse).all()):
            return out, lse
    return _attention_unfused(q, k, v, scale)


def _attention_unfused(q, k, v, scale):
    """attention_forward's eager form: eager's unfused ops, the log-sum-exp all NaN."""
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan")).transpose(1, 2)
    return torch.matmul(torch.softmax(s, -1), v), lse


def _attention_grads_py(grad, q, k, v, scale, is_causal, out=None, lse=None):
    """The gradients of softmax(q @ k^T * scale [causal]) @ v for q, k and v (4-d float32,
    no mask, no dropout), heads-major (trace/meta.c mt_attention_grads): what the
    backward of attention_forward calls with its saved result out and log-sum-exp lse,
    and the prelude's sdpa_backward without them (F.scaled_dot_product_attention).
    torch's CPU flash backward (without out and lse: the attention recomputed by its
    forward kernel first) where it gives eager's values (lse not NaN: as the forward
    decided; recomputed: every row's finite, attention_forward's check), else eager's
    unfused ops."""
    aten = torch.ops.aten
    q, k, v, grad = (_last_unit(t) for t in (q, k, v, grad))
    if lse is None and q.numel() and k.numel() and q.shape[-1] == v.shape[-1]:
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, is_causal, scale=scale)[:2]
        fused = bool(torch.isfinite(lse).all())   # as attention_forward decides
    else:
        fused = lse is not None and lse.numel() > 0 and not bool(lse.reshape(-1)[0].isnan())
    if fused:
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad, q, k, v, _last_unit(out), lse, 0.0, is_causal, scale=scale)
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        s = s.masked_fill(keep.logical_not(), float("-inf"))
    a = torch.softmax(s, -1)
    ga = torch.matmul(grad, v.transpose(-1, -2))
    gs = a * (ga - (ga * a).sum(-1, keepdim=True)) * scale
    return (_heads_major(torch.matmul(gs, k)), _heads_major(torch.matmul(gs.transpose(-1, -2), q)),
            _heads_major(torch.matmul(a.transpose(-1, -2), grad)))


# What training graphs call (passes/attention.c, trace/autograd.c): runtime/attention.c's
# C functions, the fused path without Python frames or small aten ops (its checks read
# the log-sum-exp's memory); every other case is the Python forms' above.
attention_forward = _C.attention_forward
attention_grads = _C.attention_grads


class _Graph(torch.autograd.Function):
    """forward: the compiled forward graph (the frame's outputs, then the values the
    backward saves); backward: the compiled backward.  Both are C (runtime/train_call.c:
    _train_forward, _train_backward), as is the backward node's apply, which the engine
    calls (torch's BackwardCFunction.apply is a Python frame that only finds backward).
    Double backward raises (once_differentiable), where eager would differentiate again."""

    forward = staticmethod(_C._train_forward)
    backward = staticmethod(_C._train_backward)


_Graph._backward_cls.apply = _C._train_backward_apply
# the frame's call: _FunctionBase.apply (C) bound to _Graph; torch's Python Function.apply
# only where functorch transforms are active (it unwraps their dead wrappers)
_C._train_setup(torch._C._FunctionBase.__dict__["apply"].__get__(None, _Graph), _Graph.apply,
                torch._C._are_functorch_transforms_active, torch.is_grad_enabled)


class _Call(functools.partial):
    """A compiled training graph's callable, what the frame's transformed bytecode calls:
    _C._train_apply bound to its TrainingGraph (no Python frame per call)."""

    @property
    def calls(self):
        """Calls of the forward graph (explain counts the graphs a call ran by it)."""
        return self.args[0].calls

    def __repr__(self):
        return repr(self.args[0])


class TrainingGraph:
    """A compiled training graph: the compiled forward, the backward (its source compiled
    with cdynamo.optimize) and what the C per-call path (runtime/train_call.c) reads:
    nuser, saved_inputs, grad_outputs, no_grad_outputs, grad_inputs (tuples of indices:
    the backward returns the gradients of the grad_inputs of the graph's ninputs inputs),
    ninputs, name, input_outputs (pairs output j, input k, flat: the outputs that are
    inputs themselves, returned as the inputs, not the Function's views of them)."""

    __slots__ = ("forward", "backward", "nuser", "saved_inputs", "grad_outputs",
                 "no_grad_outputs", "grad_inputs", "ninputs", "name", "source",
                 "input_outputs", "__weakref__")

    def __init__(self, forward, src, consts, name, nuser, saved_inputs, grad_outputs,
                 input_outputs=()):
        from . import optimize
        self.forward = forward
        self.input_outputs = tuple(input_outputs)
        self.name = name
        self.nuser = nuser
        self.saved_inputs = tuple(saved_inputs)
        self.grad_outputs = tuple(grad_outputs)
        self.no_grad_outputs = tuple(i for i in range(nuser) if i not in grad_outputs)
        self.source = src
        ns = {"torch": torch, "_K": consts, "__name__": "cdynamo_backward",
              "_ln_input_grad": layer_norm_input_grad, "_softmax_input_grad": softmax_input_grad,
              "_ln_grad_xhat": layer_norm_grad_xhat, "_gelu_exact_grad": gelu_exact_grad,
              "_attention_grads": attention_grads}
        code = compile(_prelude() + "\n\n" + src, f"<backward of {name}>", "exec")
        exec(code, ns)
        ns["backward"].__qualname__ = f"backward_of_{name}"
        self.grad_inputs, self.ninputs = tuple(ns["GRAD_INPUTS"]), ns["NINPUTS"]
        self.backward = optimize(ns["backward"])

    @property
    def calls(self):
        """Calls of the forward graph (explain counts the graphs a call ran by it)."""
        return getattr(self.forward, "calls", 0)

    def callable(self):
        """What the frame calls: (outputs...) with their autograd history a _Graph node."""
        return _Call(_C._train_apply, self)

    def __repr__(self):
        return f"<cdynamo TrainingGraph {self.name}>"


class FunctionCtxNoGrad:
    """The ctx a custom torch.autograd.Function's forward gets when the trace inlines
    Function.apply under no_grad (trace/custom_fn.c).  No graph node is made there, so
    the methods that only serve the backward do nothing; attributes set on it stay in
    the trace, as eager's ctx is dropped with its outputs' missing grad_fn."""

    # no needs_input_grad: eager's reads the inputs' requires_grad even under no_grad; a
    # forward that reads it stops the trace (an attribute error: the frame runs eagerly)

    def __init__(self):
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        pass

    def save_for_forward(self, *tensors):
        pass

    def mark_dirty(self, *tensors):
        pass

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        self.materialize_grads = value


def _repeat_sizes(sh, reps, n):
    """tensor_repeat's sizes for n <= 4 dims, by displays only (a traced list.append, a
    cell or a comprehension's closure would pin symbolic sizes; displays move them)."""
    if n == 1:
        (a,), (p,) = sh, reps
        return [1, a], [p, a], [p * a]
    if n == 2:
        (a, b), (p, q) = sh, reps
        return [1, a, 1, b], [p, a, q, b], [p * a, q * b]
    if n == 3:
        (a, b, c), (p, q, r) = sh, reps
        return [1, a, 1, b, 1, c], [p, a, q, b, r, c], [p * a, q * b, r * c]
    (a, b, c, d), (p, q, r, t) = sh, reps
    return ([1, a, 1, b, 1, c, 1, d], [p, a, q, b, r, c, t, d],
            [p * a, q * b, r * c, t * d])


def tensor_repeat(x, *sizes):
    """x.repeat(*sizes) as views and one copy, for the trace to inline (trace/calls.c):
    its sizes stay symbolic where an extern repeat would specialize them.  Each dim d of
    x (left-padded with 1s to len(sizes)) becomes [sizes[d], x_d] expanded, then merged."""
    reps = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    n = len(reps)
    sh = [*((1,) * (n - x.dim())), *x.shape]
    inner, wide, out = _repeat_sizes(sh, reps, n)
    return x.reshape(inner).expand(wide).clone(memory_format=torch.contiguous_format).reshape(out)
