"""Training graphs at run time (issue 34): a compiled forward and a compiled backward
as one torch.autograd.Function.

trace/autograd.c writes the backward of a traced graph whose inputs require grad as
Python source; TrainingGraph compiles it with cdynamo.optimize (the backward graph is
compiled like any other frame, at the first backward) and is the callable the frame's
transformed bytecode calls.  Per call: TrainingGraph.__call__, Function.apply and
_Graph.forward run in Python (a few microseconds); the graphs themselves are C.
"""
import os

import torch

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


class _Graph(torch.autograd.Function):
    """forward: the compiled forward graph (the frame's outputs, then the values the
    backward saves); backward: the compiled backward.  Double backward raises
    (once_differentiable), where eager would differentiate again."""

    @staticmethod
    def forward(ctx, tg, *inputs):
        outs = tg.forward(*inputs)
        n = tg.nuser
        ctx.tg = tg
        ctx.save_for_backward(*[inputs[i] for i in tg.saved_inputs], *outs[n:])
        user = outs[:n]
        ctx.mark_non_differentiable(*[user[i] for i in tg.no_grad_outputs])
        return user

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():   # create_graph=True: its gradients would lack history
            raise RuntimeError(
                f"cdynamo: {ctx.tg.name} is a compiled training graph, whose backward is "
                "not differentiable: backward(create_graph=True) / double backward is not "
                "supported (compile with cdynamo.config.compile_backward = False)")
        tg = ctx.tg
        gs = tg.backward(*ctx.saved_tensors, *[grads[i] for i in tg.grad_outputs])
        return (None, *gs)


class TrainingGraph:
    """The callable of a compiled training graph: returns the frame's outputs (a tuple)
    with their autograd history a _Graph node."""

    __slots__ = ("forward", "backward", "nuser", "saved_inputs", "grad_outputs",
                 "no_grad_outputs", "name", "source", "__weakref__")

    def __init__(self, forward, src, consts, name, nuser, saved_inputs, grad_outputs):
        from . import optimize
        self.forward = forward
        self.name = name
        self.nuser = nuser
        self.saved_inputs = saved_inputs
        self.grad_outputs = grad_outputs
        self.no_grad_outputs = tuple(i for i in range(nuser) if i not in grad_outputs)
        self.source = src
        ns = {"torch": torch, "_K": consts, "__name__": "cdynamo_backward"}
        code = compile(_prelude() + "\n\n" + src, f"<backward of {name}>", "exec")
        exec(code, ns)
        ns["backward"].__qualname__ = f"backward_of_{name}"
        self.backward = optimize(ns["backward"])

    @property
    def calls(self):
        """Calls of the forward graph (explain counts the graphs a call ran by it)."""
        return getattr(self.forward, "calls", 0)

    def __call__(self, *inputs):
        return _Graph.apply(self, *inputs)

    def __repr__(self):
        return f"<cdynamo TrainingGraph {self.name}>"
