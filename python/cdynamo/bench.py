"""Side-by-side benchmark: eager PyTorch vs torch.compile (inductor) vs cdynamo.

Run as ``python -m cdynamo.bench [--quick] [--threads N] [--filter NAME] [--no-inductor]
[--json PATH] [--plot PATH]``.  See ``--help``.

For each workload the harness
  1. runs eager once for the reference result (seeded inputs),
  2. builds each compiled system fresh (cold caches) and times its first call; the
     compile time is ``first call - steady call``,
  3. checks every system's output against eager (torch.testing.assert_close),
  4. measures the steady-state time per call of all systems INTERLEAVED: each round
     runs one batch (~2-10 ms) of every system in turn (rotating the order); the
     reported number is the median over rounds of the per-call time of a batch,
  5. for pointwise and reduction workloads, converts the time into GB/s (bytes read +
     written / median time) and a share of the copy bandwidth, measured (a 64 MB torch
     copy) just before and just after that workload's rounds, the larger of the two: the
     host's bandwidth drifts within minutes.

Once per run it also measures the warm start of each compiler: the first call of a small
pointwise function in a new process whose disk cache a previous process filled.

A system that fails (cannot be imported, raises, or gives a wrong result) is reported in
its row (ok = false, error = message) and the run goes on.  With ``--isolate`` every
workload runs in a child process, so even a crash (segfault) in a compiled system is
attributed to that system and the row is re-run without it.

This module is NOT imported by ``import cdynamo``; it only imports cdynamo lazily.
New workloads: append a ``Workload`` to ``WORKLOADS`` (module-level function, input
factory, kind tag such as "overhead", "pointwise", "reduction", "model").
"""
from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import math
import traceback
import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

SYSTEMS = ("eager", "inductor", "cdynamo")
ROW_MARKER = "CDYNAMO_BENCH_ROW "


# --------------------------------------------------------------------------- workloads

@dataclass
class Workload:
    """One benchmark case.

    fn           a plain module-level function taking the tensors from make_inputs()
    make_inputs  zero-argument factory returning a tuple of inputs (called after
                 torch.manual_seed(0))
    kind         tag: "overhead" (tiny, per-call cost), "pointwise" and "reduction"
                 (GB/s is reported), "model", ...
    quick_inputs optional smaller factory used with --quick
    rtol, atol   optional tolerances for torch.testing.assert_close (default: its own)
    """
    name: str
    fn: Callable[..., Any]
    make_inputs: Callable[[], tuple]
    kind: str = "pointwise"
    quick_inputs: Optional[Callable[[], tuple]] = None
    rtol: Optional[float] = None
    atol: Optional[float] = None
    description: str = ""
    #: None when the workload can run, else why not (an optional dependency missing)
    requires: Optional[Callable[[], Optional[str]]] = None
    #: a training step: fn returns a loss; each system's call is then its compiled fn,
    #: loss.backward() and the loss with the parameters' gradients (compared to eager's),
    #: the gradients reset first; train_params() gives the parameters
    train_params: Optional[Callable[[], list]] = None

    def inputs(self, quick: bool) -> tuple:
        factory = self.quick_inputs if (quick and self.quick_inputs) else self.make_inputs
        return tuple(factory())


def add1(x):
    return x + 1


def pointwise_chain(x, y):
    return torch.relu(x * y + 1.0)


def sigmoid_tanh(x, y):
    return torch.sigmoid(x) * torch.tanh(y)


def where_cmp(x, y):
    return torch.where(x > y, x, y * 2)


def maximum(x, y):
    return torch.maximum(x, y)


def neg(x):
    return -x


def broadcast_add(x, y):
    return x + y


def mul2(x):
    return x * 2


def int64_arith(a, b):
    return a * 3 - b


def _f32(*shape):
    return lambda: (torch.randn(*shape), torch.randn(*shape))


def _u8(*shape, n=2):
    return lambda: tuple(torch.randint(0, 256, shape, dtype=torch.uint8) for _ in range(n))


def _i64(*shape):
    return lambda: tuple(torch.randint(-1000, 1000, shape, dtype=torch.int64) for _ in range(2))


def _channels_last():
    return (torch.randn(8, 32, 56, 56).contiguous(memory_format=torch.channels_last),)


def _channels_last_quick():
    return (torch.randn(2, 32, 56, 56).contiguous(memory_format=torch.channels_last),)


# --- the seeds' cases: image flips, uint8 ops, losses, softmax (torch.compile loses to eager)

def hflip(x):
    return x.flip(-1)


def vflip(x):
    return x.flip(-2)


def cat_u8(x, y):
    return torch.cat([x, y], dim=1)


def smooth_l1(x, y):
    return torch.nn.functional.smooth_l1_loss(x, y)


def softmax(x):
    return torch.softmax(x, dim=-1)


def layernorm_gelu(x, w, b):
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b))


def row_sum(x):
    return x.sum(dim=-1)


def _img_u8(channels_last=False, sliced=False):
    def make():
        x = torch.randint(0, 256, (1, 3, 224, 256 if sliced else 224), dtype=torch.uint8)
        if sliced:
            x = x[..., 16:240]
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return (x,)
    return make


def _ln_inputs(rows, cols):
    return lambda: (torch.randn(rows, cols), torch.randn(cols), torch.randn(cols))


# --- models: built once per process, called through a module-level function

_MODELS: dict = {}


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                               torch.nn.GELU(), torch.nn.Linear(512, 10)).eval()


class _CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32)
        self.c2, self.b2 = torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.BatchNorm2d(64)
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = torch.nn.functional.relu(self.b1(self.c1(x)))
        x = torch.nn.functional.max_pool2d(x, 2)
        x = torch.nn.functional.relu(self.b2(self.c2(x)))
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


class _Block(torch.nn.Module):
    """A pre-norm transformer block, written out by hand."""

    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        a = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        y = (a.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


class _Stack(torch.nn.Module):
    def __init__(self, n=4):
        super().__init__()
        self.blocks = torch.nn.ModuleList([_Block() for _ in range(n)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def _t5():
    from transformers import T5Config, T5Model   # noqa: PLC0415 (optional dependency)
    return T5Model(T5Config()).eval()   # t5-small's shape, random weights: no download


def _model(name, build):
    if name not in _MODELS:
        torch.manual_seed(0)
        _MODELS[name] = build().eval()   # inference: BatchNorm uses its running stats
    return _MODELS[name]


def mlp(x):
    return _MODELS["mlp"](x)


def mlp_loss(x, y):
    return torch.nn.functional.cross_entropy(_MODELS["mlp"](x), y)


def transformer_stack_loss(x):
    return _MODELS["stack"](x).pow(2).mean()


def _train_step(f, params):
    """One training step of loss function f: gradients reset, f's loss backward; returns
    the loss and the gradients.  Seeded, so that dropout draws the same masks in every
    system's steps."""
    def step(*inputs):
        torch.manual_seed(0)
        for p in params:
            p.grad = None
        loss = f(*inputs)
        loss.backward()
        return (loss.detach(), *[p.grad for p in params])
    return step


def cnn(x):
    return _MODELS["cnn"](x)


def _train_inputs(name, build, make):
    """Inputs of a training workload whose model is in train mode (BatchNorm's batch
    statistics, dropout)."""
    def f():
        if name not in _MODELS:
            torch.manual_seed(0)
            _MODELS[name] = build().train()
        return make()
    return f


def cnn_train_loss(x, y):
    return torch.nn.functional.cross_entropy(_MODELS["cnn_train"](x), y)


def _bert_classifier():
    from transformers import BertConfig, BertForSequenceClassification   # noqa: PLC0415
    return BertForSequenceClassification(BertConfig(
        vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=128, num_labels=2))


def bert_train_loss(ids, y):
    return torch.nn.functional.cross_entropy(_MODELS["bert_train"](input_ids=ids).logits, y)


def transformer_stack(x):
    return _MODELS["stack"](x)


def t5_small(ids):
    return _MODELS["t5"](input_ids=ids, decoder_input_ids=ids).last_hidden_state


# ---- the transformers group: models of issue 31 (cdynamo/_hf_models.py), small configs,
# random weights; skipped with the reason when transformers is not installed
_HF: dict = {}


def _hf_available() -> Optional[str]:
    from ._hf_models import available   # noqa: PLC0415
    why = available()
    return None if why is None else f"skipped: {why}"


def _hf_workload(name: str) -> "Workload":
    from . import _hf_models   # noqa: PLC0415 (imports no transformers)
    build, inputs, result = _hf_models.MODELS[name]
    keys = list(inputs())   # the forward's keyword arguments (their tensors need no transformers)

    def make():
        if name not in _HF:
            _HF[name] = build()
        return tuple(inputs().values())

    def fn(*tensors):
        return result(_HF[name](**dict(zip(keys, tensors))))

    fn.__name__ = fn.__qualname__ = f"hf_{name}"
    return Workload(f"hf_{name}", fn, make, kind="transformers", rtol=1e-4, atol=1e-4,
                    requires=_hf_available,
                    description=f"transformers {name}, small config, random weights: "
                                f"forward({', '.join(keys)})")


def _model_inputs(name, build, make):
    def f():
        _model(name, build)
        return make()
    return f


WORKLOADS: list[Workload] = [
    Workload("add1_8", add1, lambda: (torch.randn(8),), kind="overhead",
             description="x + 1, 8 float32: per-call overhead"),
    Workload("pointwise_chain", pointwise_chain, _f32(4096, 1024),
             quick_inputs=_f32(1024, 1024),
             description="relu(x*y + 1.0), 4M float32 (quick: 1M)"),
    Workload("pointwise_chain_small", pointwise_chain, _f32(64, 1024),
             description="relu(x*y + 1.0), 64x1024 float32"),
    Workload("sigmoid_tanh", sigmoid_tanh, _f32(1024, 1024), quick_inputs=_f32(256, 1024),
             rtol=1e-5, atol=1e-5,
             description="sigmoid(x) * tanh(y), 1M float32 (quick: 256K)"),
    Workload("where_cmp", where_cmp, _f32(1024, 1024), quick_inputs=_f32(256, 1024),
             description="where(x > y, x, y*2), 1M float32 (quick: 256K)"),
    Workload("maximum_u8", maximum, _u8(1, 3, 224, 224),
             description="maximum(x, y), uint8 1x3x224x224"),
    Workload("neg_u8", neg, _u8(1, 3, 224, 224, n=1),
             description="-x, uint8 1x3x224x224 (wraps)"),
    Workload("broadcast_add", broadcast_add, lambda: (torch.randn(64, 1), torch.randn(1, 1024)),
             description="(64,1) + (1,1024) float32"),
    Workload("channels_last_mul", mul2, _channels_last, quick_inputs=_channels_last_quick,
             description="x*2, channels_last 8x32x56x56 float32 (quick: 2x32x56x56)"),
    Workload("hflip_u8", hflip, _img_u8(), description="x.flip(-1), uint8 1x3x224x224"),
    Workload("vflip_u8", vflip, _img_u8(), description="x.flip(-2), uint8 1x3x224x224"),
    Workload("hflip_u8_cl", hflip, _img_u8(channels_last=True),
             description="x.flip(-1), uint8 1x3x224x224 channels_last"),
    Workload("vflip_u8_cl", vflip, _img_u8(channels_last=True),
             description="x.flip(-2), uint8 1x3x224x224 channels_last"),
    Workload("hflip_u8_sliced", hflip, _img_u8(sliced=True),
             description="x[..., 16:240].flip(-1), uint8 1x3x224x224 view"),
    Workload("cat_u8", cat_u8, _u8(1, 3, 224, 224),
             description="cat([x, y], dim=1), uint8 1x3x224x224"),
    Workload("smooth_l1_20", smooth_l1, _f32(20), kind="reduction",
             description="smooth_l1_loss(x, y), 20 float32 (mean)"),
    Workload("smooth_l1_4m", smooth_l1, _f32(4 * 1024 * 1024), quick_inputs=_f32(1024 * 1024),
             kind="reduction", rtol=1e-4, atol=1e-6,
             description="smooth_l1_loss(x, y), 4M float32 (mean; quick: 1M)"),
    Workload("softmax", softmax, lambda: (torch.randn(8, 128, 128),), kind="reduction",
             description="softmax(x, -1), 8x128x128 float32 (T5 attention shape)"),
    Workload("layernorm_gelu", layernorm_gelu, _ln_inputs(4096, 1024),
             quick_inputs=_ln_inputs(1024, 1024), kind="reduction", rtol=1e-4, atol=1e-5,
             description="gelu(layer_norm(x)), 4096x1024 float32 (quick: 1024x1024)"),
    Workload("row_sum", row_sum, lambda: (torch.randn(4096, 1024),), kind="reduction",
             quick_inputs=lambda: (torch.randn(1024, 1024),), rtol=1e-4, atol=1e-4,
             description="x.sum(-1), 4096x1024 float32 (quick: 1024x1024)"),
    Workload("mlp", mlp, _model_inputs("mlp", _mlp, lambda: (torch.randn(64, 256),)), kind="model",
             rtol=1e-4, atol=1e-5, description="MLP 256-512-512-10 (ReLU, GELU), batch 64"),
    Workload("cnn", cnn, _model_inputs("cnn", _CNN, lambda: (torch.randn(8, 3, 32, 32),)),
             kind="model", rtol=1e-4, atol=1e-5,
             description="CNN: 2x (conv3x3, BatchNorm eval, ReLU), pool, linear; 8x3x32x32"),
    Workload("transformer_stack", transformer_stack,
             _model_inputs("stack", _Stack, lambda: (torch.randn(4, 64, 256),)), kind="model",
             rtol=1e-4, atol=1e-4,
             description="4 pre-norm transformer blocks, d=256, 4 heads; 4x64 tokens"),
    Workload("t5_small", t5_small,
             _model_inputs("t5", _t5, lambda: (torch.randint(0, 32000, (1, 32)),)), kind="model",
             rtol=1e-4, atol=1e-4,
             description="T5-small from its config (transformers; random weights), 32 tokens"),
    Workload("mlp_train", mlp_loss,
             _model_inputs("mlp", _mlp, lambda: (torch.randn(64, 256), torch.randint(0, 10, (64,)))),
             kind="training", rtol=1e-4, atol=1e-5,
             train_params=lambda: list(_MODELS["mlp"].parameters()),
             description="MLP 256-512-512-10 training step: cross_entropy, backward; batch 64"),
    Workload("transformer_stack_train", transformer_stack_loss,
             _model_inputs("stack", _Stack, lambda: (torch.randn(4, 64, 256),)), kind="training",
             rtol=1e-4, atol=1e-4, train_params=lambda: list(_MODELS["stack"].parameters()),
             description="4 transformer blocks (d=256) training step: mean square, backward"),
    Workload("cnn_train", cnn_train_loss,
             _train_inputs("cnn_train", _CNN, lambda: (torch.randn(8, 3, 32, 32),
                                                      torch.randint(0, 10, (8,)))),
             kind="training", rtol=1e-4, atol=1e-5,
             train_params=lambda: list(_MODELS["cnn_train"].parameters()),
             description="CNN training step: 2x (conv3x3, BatchNorm train mode, ReLU), pools, "
                         "linear, cross_entropy, backward; 8x3x32x32"),
    Workload("bert_train", bert_train_loss,
             _train_inputs("bert_train", _bert_classifier,
                           lambda: (torch.randint(0, 512, (4, 64)), torch.randint(0, 2, (4,)))),
             kind="training", rtol=1e-4, atol=1e-4, requires=_hf_available,
             train_params=lambda: list(_MODELS["bert_train"].parameters()),
             description="transformers BertForSequenceClassification (d=64, 2 layers) in train "
                         "mode (dropout 0.1) training step: cross_entropy, backward; 4x64 "
                         "tokens"),
    Workload("int64_arith", int64_arith, _i64(1024, 1024), quick_inputs=_i64(256, 1024),
             description="a*3 - b, 1M int64 (quick: 256K)"),
]


WORKLOADS += [_hf_workload(n) for n in ("bert", "gpt2", "llama", "t5", "vit", "resnet",
                                         "whisper_encoder")]


# ---- the bfloat16 group (issue 33): the float workloads and models above with their
# float inputs and weights in bfloat16 (what CPU inference serves in); eager's bfloat16 is
# the reference, compared within bfloat16's tolerance.  --filter bf16 runs the group.
_BF16 = torch.bfloat16
_BF16_TOL = 2e-2   # a few bfloat16 ulps (eps 2^-8): rounding points of fused / library ops


def _bf16(x):
    return x.to(_BF16) if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def _bf16_inputs(factory):
    return None if factory is None else (lambda: tuple(_bf16(t) for t in factory()))


def _bf16_model(key, build):
    def f():
        return build().to(_BF16)
    return key, f


def mlp_bf16(x):
    return _MODELS["mlp_bf16"](x)


def transformer_stack_bf16(x):
    return _MODELS["stack_bf16"](x)


def cnn_bf16(x):
    return _MODELS["cnn_bf16"](x)


def _bf16_hf_workload(name: str) -> "Workload":
    from . import _hf_models   # noqa: PLC0415 (imports no transformers)
    build, inputs, result = _hf_models.MODELS[name]
    keys = list(inputs())
    key = f"{name}_bf16"

    def make():
        if key not in _HF:
            _HF[key] = build().to(_BF16)
        return tuple(_bf16(t) for t in inputs().values())

    def fn(*tensors):
        return result(_HF[key](**dict(zip(keys, tensors))))

    fn.__name__ = fn.__qualname__ = f"hf_{name}_bf16"
    return Workload(f"bf16_hf_{name}", fn, make, kind="model", rtol=_BF16_TOL, atol=_BF16_TOL,
                    requires=_hf_available,
                    description=f"transformers {name} in bfloat16, small config, random weights")


def _bf16_workloads() -> list:
    by_name = {w.name: w for w in WORKLOADS}
    out = []
    for n in ("pointwise_chain", "sigmoid_tanh", "softmax", "layernorm_gelu", "row_sum"):
        w = by_name[n]
        out.append(Workload(f"bf16_{n}", w.fn, _bf16_inputs(w.make_inputs), kind=w.kind,
                            quick_inputs=_bf16_inputs(w.quick_inputs), rtol=_BF16_TOL,
                            atol=_BF16_TOL, description=w.description.replace("float32", "bfloat16")))
    for n, fn, key, build, make, desc in (
            ("mlp", mlp_bf16, "mlp_bf16", _mlp, lambda: (torch.randn(64, 256),), "MLP"),
            ("cnn", cnn_bf16, "cnn_bf16", _CNN, lambda: (torch.randn(8, 3, 32, 32),), "CNN"),
            ("transformer_stack", transformer_stack_bf16, "stack_bf16", _Stack,
             lambda: (torch.randn(4, 64, 256),), "4 pre-norm transformer blocks")):
        k, b = _bf16_model(key, build)
        out.append(Workload(f"bf16_{n}", fn, _bf16_inputs(_model_inputs(k, b, make)),
                            kind="model", rtol=_BF16_TOL, atol=_BF16_TOL,
                            description=f"{desc} in bfloat16 (as {n})"))
    out += [_bf16_hf_workload(n) for n in ("bert", "gpt2", "llama", "t5", "vit")]
    return out


WORKLOADS += _bf16_workloads()


#: what --quick runs when no --filter is given: one of each kind, and a seed's small case
QUICK = ("add1_8", "pointwise_chain_small", "maximum_u8", "softmax", "mlp")


def _is_bf16(w: Workload) -> bool:
    return w.name.startswith("bf16_")


def select_workloads(filters: Optional[list[str]], quick: bool = False) -> list[Workload]:
    """Workloads whose name contains any of the (comma separated, repeatable) filters;
    with no filter, all of them but the bfloat16 group, or the QUICK subset under --quick."""
    pats = [p.strip() for f in (filters or []) for p in f.split(",") if p.strip()]
    if not pats:
        return [w for w in WORKLOADS if not _is_bf16(w) and (not quick or w.name in QUICK)]
    # the bfloat16 group only for a filter naming it (--filter bf16, bf16_mlp, ...), the
    # training steps only for one naming train (--filter train, mlp_train): --filter mlp
    # stays the float32 inference workload
    return [w for w in WORKLOADS
            if any(p in w.name and (not _is_bf16(w) or "bf16" in p) and
                   (w.train_params is None or "train" in p) for p in pats)]


# --------------------------------------------------------------------------- utilities

def _err(e: BaseException, limit: int = 2000) -> str:
    msg = f"{type(e).__name__}: {e}"
    return msg if len(msg) <= limit else msg[:limit] + " ..."


def _nbytes(obj) -> int:
    """Bytes of the tensors in obj (nested tuples/lists), each storage counted once."""
    seen, total = set(), 0

    def walk(o):
        nonlocal total
        if isinstance(o, torch.Tensor):
            key = (o.untyped_storage().data_ptr(), o.data_ptr(), o.numel())
            if key not in seen:
                seen.add(key)
                total += o.numel() * o.element_size()
        elif isinstance(o, (tuple, list)):
            for i in o:
                walk(i)
        elif isinstance(o, dict):
            for i in o.values():
                walk(i)
    walk(obj)
    return total


def _strides(obj):
    if isinstance(obj, torch.Tensor):
        return tuple(obj.stride())
    if isinstance(obj, (tuple, list)):
        return tuple(_strides(o) for o in obj)
    return None


def _fmt_us(v: Optional[float]) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _fmt(v: Optional[float], spec: str) -> str:
    return "-" if v is None else format(v, spec)


class Progress:
    """A one-line text progress bar on stderr (one line per update when not a tty)."""

    def __init__(self, total: int, enabled: bool = True):
        self.total, self.done, self.enabled = max(total, 1), 0, enabled
        self.tty = sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self._last_len = 0

    def update(self, msg: str, advance: int = 0):
        self.done += advance
        if not self.enabled:
            return
        width = 24
        filled = int(width * min(self.done, self.total) / self.total)
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"{time.perf_counter() - self.t0:6.1f}s  {msg}")
        if self.tty:
            pad = max(0, self._last_len - len(line))
            sys.stderr.write("\r" + line + " " * pad)
            self._last_len = len(line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def close(self):
        if self.enabled and self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


class Phase:
    """Records the current phase in a file (child processes of --isolate) so that the parent
    can tell which system was running when the child crashed."""

    def __init__(self, path: Optional[str]):
        self.f = open(path, "w") if path else None

    def __call__(self, system: str, what: str):
        if self.f:
            self.f.seek(0)
            self.f.write(f"{system}\t{what}")
            self.f.truncate()
            self.f.flush()


# --------------------------------------------------------------------------- machine

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gcc_version() -> Optional[str]:
    cc = os.environ.get("CDYNAMO_CC", "gcc")
    try:
        out = subprocess.run([cc, "-dumpfullversion"], capture_output=True, text=True, timeout=10)
        return f"{cc} {out.stdout.strip()}" if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


_BW_ARRAYS: list = []   # the 64 MB arrays of the bandwidth measurements, made once


def _bw_arrays():
    if not _BW_ARRAYS:
        n = (64 << 20) // 4
        _BW_ARRAYS.extend([torch.empty(n), torch.rand(n), torch.rand(n)])
    return _BW_ARRAYS


def _best_gbps(fn, moved: int, reps: int) -> float:
    fn()
    return moved / min(_timed(fn) for _ in range(reps)) / 1e9


def copy_gbps(reps: int = 3) -> float:
    """Copy bandwidth now: torch's copy of a 64 MB float32 array, best of `reps` (GB/s,
    bytes read + written)."""
    a, b, _ = _bw_arrays()
    return round(_best_gbps(lambda: a.copy_(b), 2 * a.numel() * 4, reps), 2)


def measure_bandwidth(quick: bool) -> dict:
    """Copy and triad bandwidth with torch on 64 MB float32 arrays, best of a few runs.
    copy: b -> a (2 x 64 MB moved); triad: a = b + 3*c (3 x 64 MB moved).  GB = 1e9 bytes."""
    a, b, c = _bw_arrays()
    reps = 3 if quick else 7
    triad = _best_gbps(lambda: torch.add(b, c, alpha=3.0, out=a), 3 * a.numel() * 4, reps)
    return {"copy_gbps": copy_gbps(reps), "triad_gbps": round(triad, 2), "array_mb": 64,
            "runs": reps}


def compute_gflops(reps: int = 15) -> float:
    """The host's compute speed now: a 256x256 float32 matmul (L2-resident, torch's BLAS, the
    bench's threads), the median of reps batches of 10, in GFLOP/s.  A shared host's speed
    drifts (by half, for minutes, with no steal time in the VM); with the copy bandwidth, this
    tells a run on a slowed host from one on a normal one."""
    a, b = torch.rand(256, 256), torch.rand(256, 256)
    out = torch.empty(256, 256)
    torch.mm(a, b, out=out)
    t = statistics.median(_timed(lambda: [torch.mm(a, b, out=out) for _ in range(10)])
                          for _ in range(reps))
    return round(10 * 2 * 256 ** 3 / t / 1e9, 1)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def machine_info(bandwidth: Optional[dict], cdynamo_error: Optional[str]) -> dict:
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count()
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "cores_available": affinity,
        "threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "compiler": gcc_version(),
        "bandwidth_gbps": bandwidth,
        "cdynamo_available": cdynamo_error is None,
        "cdynamo_error": cdynamo_error,
    }


# --------------------------------------------------------------------------- systems

def load_cdynamo():
    """(module, None) or (None, error message).  Imports cdynamo._C explicitly first, so a
    missing/unbuilt C core is reported as such."""
    try:
        import cdynamo._C  # noqa: F401
    except Exception as e:  # noqa: BLE001
        return None, "import cdynamo._C failed: " + _err(e)
    try:
        import cdynamo
    except Exception as e:  # noqa: BLE001
        return None, "import cdynamo failed: " + _err(e)
    if not callable(getattr(cdynamo, "optimize", None)):
        return None, "cdynamo has no callable optimize()"
    return cdynamo, None


def probe_cdynamo_subprocess() -> Optional[str]:
    """None if `import cdynamo._C` works in a child process, else the reason (--isolate: the
    parent never imports the C core, so that it cannot crash the parent)."""
    code = ("import sys\ntry:\n import cdynamo._C, cdynamo\n"
            "except Exception as e:\n print(f'{type(e).__name__}: {e}'); sys.exit(1)\n")
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=300)
    except (OSError, subprocess.SubprocessError) as e:
        return "probe failed: " + _err(e)
    if p.returncode == 0:
        return None
    if p.returncode < 0:
        return f"import cdynamo._C crashed (signal {-p.returncode})"
    return "import cdynamo._C failed: " + (p.stdout.strip() or p.stderr.strip()[-500:])


class Systems:
    """Builds the callables of each system for one function, with fresh caches."""

    def __init__(self, args, cache_root: str, load: bool = True):
        self.args = args
        self.cache_root = cache_root
        self.enabled = {"eager": True, "inductor": not args.no_inductor,
                        "cdynamo": not args.no_cdynamo}
        self.skip_reason = {"inductor": "disabled (--no-inductor)",
                            "cdynamo": "disabled (--no-cdynamo)"}
        self.cdynamo = None
        self.cdynamo_error = None
        if self.enabled["cdynamo"] and load:
            os.environ["CDYNAMO_CACHE_DIR"] = os.path.join(cache_root, "cdynamo-import")
            self.cdynamo, self.cdynamo_error = load_cdynamo()
        elif self.enabled["cdynamo"]:
            self.cdynamo_error = probe_cdynamo_subprocess()
        self.inductor_compile_total = 0.0
        self.counter = 0

    def fresh_caches(self):
        """A new cache directory for each compiler, and in-process caches dropped."""
        self.counter += 1
        tag = str(self.counter)
        if self.enabled["inductor"]:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(self.cache_root, "inductor", tag)
            try:
                torch._dynamo.reset()
                from torch._inductor.utils import clear_caches
                clear_caches()
            except Exception:  # noqa: BLE001
                pass
        if self.cdynamo is not None:
            d = os.path.join(self.cache_root, "cdynamo", tag)
            os.environ["CDYNAMO_CACHE_DIR"] = d
            cfg = getattr(self.cdynamo, "config", None)
            if cfg is not None and hasattr(cfg, "cache_dir"):
                try:
                    cfg.cache_dir = d
                except Exception:  # noqa: BLE001
                    pass
            reset = getattr(self.cdynamo, "reset", None)
            if callable(reset):
                reset()

    def build(self, system: str, fn):
        if system == "eager":
            return fn
        if system == "inductor":
            # random ops through torch's generator, as eager draws them (inductor's own
            # Philox draws other dropout masks: bert_train's results would differ)
            import torch._inductor.config as inductor_config   # noqa: PLC0415
            inductor_config.fallback_random = True
            return torch.compile(fn)
        if system == "cdynamo":
            if self.cdynamo is None:
                raise RuntimeError(self.cdynamo_error or "cdynamo not loaded")
            return self.cdynamo.optimize(fn)
        raise ValueError(system)

    def stats(self) -> Optional[dict]:
        st = getattr(self.cdynamo, "stats", None) if self.cdynamo else None
        if not callable(st):
            return None
        try:
            s = st()
            return dict(s) if not isinstance(s, dict) else s
        except Exception as e:  # noqa: BLE001
            return {"error": _err(e)}


def warm_up(systems: Systems, progress: Progress) -> dict:
    """Pay one-time costs (imports, first compiler start) on a throwaway function so that
    per-workload compile times measure compilation, not process start-up."""
    out: dict = {"inductor": None, "cdynamo": None}
    x = torch.randn(3, 5)

    def _warm(a):
        return a * 2 - 1

    for s in ("inductor", "cdynamo"):
        if not systems.enabled[s] or (s == "cdynamo" and systems.cdynamo is None):
            continue
        progress.update(f"warm-up {s}")
        systems.fresh_caches()
        try:
            f = systems.build(s, _warm)
            out[s] = round(_timed(lambda: f(x)), 4)
        except Exception as e:  # noqa: BLE001
            out[s] = None
            if systems.args.verbose:
                traceback.print_exc()
            sys.stderr.write(f"\nwarning: {s} warm-up failed: {_err(e, 300)}\n")
    return out


#: a new process's first call of f(x, y) (source `body`, inputs `inputs`) compiled by
#: `build`, imports excluded; checked against eager within `tol`
FIRST_CALL_SCRIPT = """
import sys, time
import torch
{imp}
def f(x, y):
    return {body}
x, y = {inputs}
g = {build}
t0 = time.perf_counter()
out = g(x, y)
t1 = time.perf_counter()
torch.testing.assert_close(out, f(x, y){tol})
print("FIRST_CALL", t1 - t0)
"""

#: warm start: a small pointwise function
WARM_START_FN = dict(body="torch.sigmoid(x * y + 1) * y",
                     inputs="torch.randn(1024), torch.randn(1024)", tol="")

#: cold start: a first compile with a matmul, whose torch meta function (Python) imports
#: sympy and torch.fx's symbolic shapes on its first call in a process (0.35-0.95 s), a
#: cost the warm-up above does not see once inductor has paid it in this process;
#: cdynamo computes its shape in C (trace/meta.c)
COLD_START_FN = dict(body="torch.relu(x @ y + 1).sum(-1)",
                     inputs="torch.randn(64, 64), torch.randn(64, 64)",
                     tol=", rtol=1e-4, atol=1e-4")

FIRST_CALL_SYSTEMS = {
    "inductor": ("", "torch.compile(f)"),
    "cdynamo": ("import cdynamo", "cdynamo.optimize(f)"),
}


def _first_calls(systems: Systems, progress: Progress, what: str, fn: dict,
                 runs: int) -> dict:
    """Seconds of the first call of fn (FIRST_CALL_SCRIPT's fields) in the last of `runs`
    new processes sharing one compiler disk cache (fresh for this measurement).  Under
    --quick inductor's is not measured (its new processes take 20-30 s in all)."""
    out: dict = {"inductor": None, "cdynamo": None}
    for s, (imp, build) in FIRST_CALL_SYSTEMS.items():
        if not systems.enabled[s] or (s == "cdynamo" and systems.cdynamo_error):
            continue
        if s == "inductor" and systems.args.quick:
            continue
        progress.update(f"{what} {s}")
        env = dict(os.environ)
        root = os.path.join(systems.cache_root, what.replace(" ", "_"))
        env["CDYNAMO_CACHE_DIR"] = os.path.join(root, "cdynamo")
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(root, "inductor")
        code = FIRST_CALL_SCRIPT.format(imp=imp, build=build, **fn)
        times = []
        for _ in range(runs):
            try:
                p = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                   text=True, env=env, timeout=600)
            except (OSError, subprocess.SubprocessError) as e:
                sys.stderr.write(f"\nwarning: {s} {what} failed: {_err(e, 300)}\n")
                break
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("FIRST_CALL ")]
            if p.returncode != 0 or not line:
                sys.stderr.write(f"\nwarning: {s} {what} failed: "
                                 f"{(p.stderr or p.stdout).strip()[-300:]}\n")
                break
            times.append(float(line[0].split()[1]))
        if len(times) == runs:
            out[s] = round(times[-1], 4)
    return out


def measure_warm_start(systems: Systems, progress: Progress) -> dict:
    """Seconds of the first call of a small pointwise function in a new process whose
    compiler disk cache is already filled (a second process after a first one): the
    time a restarted program waits before compiled code runs.  Imports are excluded."""
    return _first_calls(systems, progress, "warm start", WARM_START_FN, 2)


def measure_cold_start(systems: Systems, progress: Progress) -> dict:
    """Seconds of the first call of a small function with a matmul, a pointwise op and a
    reduction in a new process with an empty disk cache: one-time start-up and the
    compile together, what a new program waits for first.  Imports are excluded."""
    return _first_calls(systems, progress, "cold start", COLD_START_FN, 1)


# --------------------------------------------------------------------------- one workload

def empty_row(w: Workload) -> dict:
    none = {s: None for s in SYSTEMS}
    return {
        "name": w.name, "kind": w.kind, "description": w.description,
        "ok": dict(none), "error": dict(none),
        "compile_s": {"inductor": None, "cdynamo": None},
        "us": dict(none),
        "speedup": {"inductor": None, "cdynamo": None},
        "gbps": None, "bw_share": None, "copy_gbps": None,
        "bytes": None, "batch": dict(none), "rounds": None, "notes": [],
        "cdynamo_stats": None, "capture": None, "peak_bytes": None,
    }


def _pool_stats(reset: bool = False) -> Optional[dict]:
    """cdynamo's output pool counters (_C.output_pool_stats), its high-water mark reset
    first if reset; None without cdynamo."""
    try:
        from cdynamo import _C   # noqa: PLC0415
        if reset:
            _C.reset_output_pool_peak()
        return _C.output_pool_stats()
    except Exception:  # noqa: BLE001
        return None


def step_peak_bytes(f, inputs, pool: bool = False) -> Optional[int]:
    """Peak memory of one call of f (a training step), in bytes above what is alive when
    it starts, measured the same way for every system: torch's CPU allocations and frees
    in the call (torch.profiler's memory events, profile_memory=True), summed in time
    order, their highest point.  Two calls are profiled and the second measured, so that
    the frees of the first call's tensors (the gradients the step resets) have known
    sizes.  cdynamo's graphs (pool: f is cdynamo's) take their tensors from its own pool
    (runtime/mempool.c), which torch's allocator does not see: to that peak are added
    the free blocks the pool holds when the call starts (memory eager would have
    returned) and the growth of the pool's blocks (live and free) to their high-water
    mark in the call; the two peaks added, an upper bound.  Copies made once at compile time (cdynamo's packed
    linear weights) are not in it.  None if the profiler fails."""
    from torch.profiler import ProfilerActivity, profile, record_function  # noqa: PLC0415
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            f(*inputs)
            ps = _pool_stats(reset=True) if pool else None
            with record_function("bench_measured_step"):
                f(*inputs)
            after = _pool_stats() if pool else None
        ev = prof.profiler.kineto_results.events()
        mark = next(e for e in ev if e.name() == "bench_measured_step")
        mem = [e for e in ev if e.name() == "[memory]"
               and mark.start_ns() <= e.start_ns() <= mark.end_ns()]
    except Exception:  # noqa: BLE001  (a measurement aid: never fail the row for it)
        return None
    run = peak = 0
    for e in sorted(mem, key=lambda e: e.start_ns()):
        run += e.nbytes()
        peak = max(peak, run)
    if ps is not None and after is not None and "peak_bytes" in after:
        peak += ps["cached_bytes"] + after["peak_bytes"] - ps["held_bytes"]
    return peak


def _check(w: Workload, out, expected) -> Optional[str]:
    """None if out matches eager, else a message."""
    kw = {}
    if w.rtol is not None or w.atol is not None:
        kw = {"rtol": w.rtol if w.rtol is not None else 1.3e-6,
              "atol": w.atol if w.atol is not None else 1e-5}
    try:
        torch.testing.assert_close(out, expected, **kw)
    except Exception as e:  # noqa: BLE001
        return "wrong result: " + _err(e, 600)
    return None


def run_workload(w: Workload, systems: Systems, args, progress: Progress,
                 phase: Phase, skip: Optional[dict] = None) -> dict:
    """Compile, check and time one workload on all systems; never raises for a system's
    failure.  skip: {system: reason} for systems not to run (crashed before, budget).
    Models run as inference, under torch.no_grad(), for every system alike."""
    why = w.requires() if w.requires else None
    if why:   # an optional group whose dependency is missing: every system skipped
        row = empty_row(w)
        for s in SYSTEMS:
            row["error"][s] = why
        return row
    with (torch.no_grad() if w.kind in ("model", "transformers") else contextlib.nullcontext()):
        return _run_workload(w, systems, args, progress, phase, skip)


def _dynamo_counts() -> Optional[dict]:
    """torch.compile's graph and graph-break counters so far (torch._dynamo's), or None."""
    try:
        from torch._dynamo.utils import counters   # noqa: PLC0415
        return {"graphs": int(counters["stats"]["unique_graphs"]),
                "breaks": int(sum(counters["graph_break"].values()))}
    except Exception:  # noqa: BLE001
        return None


def _capture_row(row: dict, s: str, before: Optional[dict]) -> None:
    """Graphs, graph breaks (and cdynamo's recompiles) of system s's compile of this row."""
    if s == "cdynamo":
        st = row.get("cdynamo_stats") or {}
        got = {"graphs": st.get("frames_compiled"), "breaks": st.get("graph_breaks"),
               "recompiles": st.get("recompiles")}
    else:
        after = _dynamo_counts()
        got = ({k: after[k] - before[k] for k in after} if after and before else None)
    if got is not None:
        row["capture"] = dict(row.get("capture") or {}, **{s: got})


#: workloads whose cdynamo call is split into its parts (cdynamo.overhead_breakdown)
BREAKDOWN = ("add1_8", "neg_u8", "maximum_u8", "smooth_l1_20")


def _breakdown(systems: Systems, f, inputs, quick: bool) -> Optional[dict]:
    """cdynamo.overhead_breakdown of the compiled callable f (µs per call per part)."""
    fn = getattr(systems.cdynamo, "overhead_breakdown", None)
    if fn is None:
        return None
    try:
        d = fn(f, *inputs, calls=2000 if quick else 20000)
    except Exception:  # noqa: BLE001  (a measurement aid: never fail the row for it)
        return None
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in d.items()}


def _run_workload(w: Workload, systems: Systems, args, progress: Progress,
                  phase: Phase, skip: Optional[dict] = None) -> dict:
    row = empty_row(w)
    skip = dict(skip or {})
    torch.manual_seed(0)
    inputs = w.inputs(args.quick)

    params = w.train_params() if w.train_params else None
    eager_fn = _train_step(w.fn, params) if params is not None else w.fn

    # eager reference
    phase("eager", "reference")
    try:
        expected = eager_fn(*inputs)
        eager_fn(*inputs)
        row["ok"]["eager"] = True
    except Exception as e:  # noqa: BLE001
        row["ok"]["eager"] = False
        row["error"]["eager"] = _err(e)
        for s in ("inductor", "cdynamo"):
            row["error"][s] = "not run: eager failed"
        return row
    row["bytes"] = _nbytes(inputs) + _nbytes(expected)
    exp_strides = _strides(expected)

    callables = {"eager": eager_fn}
    for s in ("inductor", "cdynamo"):
        if s in skip:
            row["error"][s] = skip[s]
            continue
        if not systems.enabled[s]:
            row["error"][s] = systems.skip_reason[s]
            continue
        if (s == "inductor" and args.inductor_budget is not None
                and systems.inductor_compile_total >= args.inductor_budget):
            row["error"][s] = (f"skipped: inductor compile budget of {args.inductor_budget:g}s "
                               f"spent (--inductor-budget)")
            continue
        if s == "cdynamo" and systems.cdynamo is None:
            row["ok"][s] = False
            row["error"][s] = systems.cdynamo_error
            continue
        progress.update(f"{w.name}: {s} compile")
        systems.fresh_caches()
        counts0 = _dynamo_counts() if s == "inductor" else None
        try:
            phase(s, "build")
            f = systems.build(s, w.fn)
            if params is not None:
                f = _train_step(f, params)
            phase(s, "first call (compile)")
            t0 = time.perf_counter()
            out = f(*inputs)
            t_first = time.perf_counter() - t0
            if s == "inductor":
                systems.inductor_compile_total += t_first
            phase(s, "check")
            msg = _check(w, out, expected)
            if msg is None:
                phase(s, "steady calls")
                f(*inputs)
                steady = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    out = f(*inputs)
                    steady.append(time.perf_counter() - t0)
                msg = _check(w, out, expected)
                if msg is not None:
                    msg = "later call: " + msg
            if msg is not None:
                row["ok"][s] = False
                row["error"][s] = msg
                continue
            # clamped: without a compile the difference is timer noise around zero
            row["compile_s"][s] = round(max(0.0, t_first - statistics.median(steady)), 4)
            if _strides(out) != exp_strides:
                row["notes"].append(f"{s}: output strides {_strides(out)} differ from eager "
                                    f"{exp_strides}")
            row["ok"][s] = True
            callables[s] = f
        except Exception as e:  # noqa: BLE001
            if args.verbose:
                traceback.print_exc()
            row["ok"][s] = False
            row["error"][s] = _err(e)
        finally:
            if s == "cdynamo":
                row["cdynamo_stats"] = systems.stats()
            if w.kind == "transformers" and row["ok"].get(s):
                _capture_row(row, s, counts0)

    # steady state, interleaved
    progress.update(f"{w.name}: timing {', '.join(callables)}")
    names = list(callables)
    batch, est = {}, {}
    for s in names:
        phase(s, "calibrate")
        f = callables[s]
        # a first estimate from single calls, refined on a small batch (timer resolution)
        e1 = min(_timed(lambda: f(*inputs)) for _ in range(3))
        n = int(min(max(1, 1e-3 / max(e1, 1e-9)), 1_000_000))
        est[s] = min(_timed(lambda: [f(*inputs) for _ in range(n)]) for _ in range(2)) / n
        batch[s] = int(min(max(1, args.batch_ms * 1e-3 / max(est[s], 1e-9)), 1_000_000))
    round_cost = sum(batch[s] * est[s] for s in names)
    rounds = args.rounds
    if round_cost > 0:
        rounds = max(3, min(rounds, int(args.max_time_per_workload / round_cost)))
    per_call = {s: [] for s in names}
    # the host's memory bandwidth drifts (a shared VM: copy 16-20 GB/s within minutes), so a
    # memory-bound workload's share of it uses a copy measured just before and just after its
    # rounds, the larger of the two
    memory_bound = w.kind in ("pointwise", "reduction") and bool(row["bytes"])
    copy_ref = copy_gbps() if memory_bound else None
    gc_was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for s in order:
                phase(s, "timing")
                f, n = callables[s], batch[s]
                it = range(n)
                # one untimed call first: a batch of one (a model) would otherwise time a
                # call on the caches the previous system left, which favours a system
                # sharing eager's weights over one keeping its own (packed) copy; steady
                # state is this system's own calls in a row, as a user's loop runs them
                f(*inputs)
                t0 = time.perf_counter()
                for _ in it:
                    f(*inputs)
                per_call[s].append((time.perf_counter() - t0) / n)
    finally:
        if gc_was:
            gc.enable()
    phase("", "done")
    for s in names:
        row["us"][s] = round(statistics.median(per_call[s]) * 1e6, 3)
        row["batch"][s] = batch[s]
    row["rounds"] = rounds
    for s in ("inductor", "cdynamo"):
        if row["us"][s]:
            row["speedup"][s] = round(row["us"]["eager"] / row["us"][s], 3)
    if w.name in BREAKDOWN and "cdynamo" in callables:
        row["breakdown_us"] = _breakdown(systems, callables["cdynamo"], inputs, args.quick)
    if w.kind == "training":
        row["peak_bytes"] = {s: step_peak_bytes(callables[s], inputs, pool=s == "cdynamo")
                             if s in callables else None for s in SYSTEMS}
    if memory_bound:
        bw = max(copy_ref, copy_gbps()) if copy_ref else args.copy_gbps
        row["copy_gbps"] = bw
        row["gbps"] = {s: (round(row["bytes"] / (row["us"][s] * 1e-6) / 1e9, 2)
                           if row["us"][s] else None) for s in SYSTEMS}
        if bw:
            row["bw_share"] = {s: (round(g / bw, 3) if g is not None else None)
                               for s, g in row["gbps"].items()}
    return row


# --------------------------------------------------------------------------- isolation

def _child_cmd() -> list[str]:
    spec = globals().get("__spec__")
    if spec is not None and getattr(spec, "name", None):
        return [sys.executable, "-m", spec.name]
    return [sys.executable, os.path.abspath(__file__)]


def run_isolated(w: Workload, args, systems: Systems, progress: Progress) -> dict:
    """Runs one workload in a child process; a crash is attributed to the system that was
    running (from the phase file) and the workload is re-run without it."""
    skip: dict = {}
    crashes: dict = {}
    for _attempt in range(len(SYSTEMS)):
        with tempfile.NamedTemporaryFile("r", suffix=".phase", delete=False) as pf:
            phase_path = pf.name
        cmd = _child_cmd() + ["--_child", w.name, "--_phase-file", phase_path,
                              "--_copy-gbps", str(args.copy_gbps or 0),
                              "--rounds", str(args.rounds), "--batch-ms", str(args.batch_ms),
                              "--max-time-per-workload", str(args.max_time_per_workload)]
        if args.quick:
            cmd.append("--quick")
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        if args.no_cdynamo:
            cmd.append("--no-cdynamo")
        if args.verbose:
            cmd.append("--verbose")
        over_budget = (args.inductor_budget is not None
                       and systems.inductor_compile_total >= args.inductor_budget)
        if args.no_inductor or over_budget:
            cmd.append("--no-inductor")
        for s, reason in skip.items():
            cmd += ["--_skip", f"{s}={reason}"]
        progress.update(f"{w.name}: child process")
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, text=True)
        try:
            with open(phase_path) as f:
                last = f.read()
        finally:
            os.unlink(phase_path)
        row = None
        for line in proc.stdout.splitlines():
            if line.startswith(ROW_MARKER):
                row = json.loads(line[len(ROW_MARKER):])
        if row is not None and proc.returncode == 0:
            if over_budget and not args.no_inductor:
                row["error"]["inductor"] = (f"skipped: inductor compile budget of "
                                            f"{args.inductor_budget:g}s spent")
            if row["compile_s"].get("inductor"):
                systems.inductor_compile_total += row["compile_s"]["inductor"]
            for s, msg in crashes.items():
                row["ok"][s] = False
                row["error"][s] = msg
            return row
        system, _, what = last.partition("\t")
        how = (f"signal {-proc.returncode}" if proc.returncode < 0
               else f"exit code {proc.returncode}")
        msg = f"crashed ({how}) during {what or 'start-up'}"
        if system not in ("inductor", "cdynamo") or system in skip:
            row = empty_row(w)
            row["ok"]["eager"] = False
            row["error"]["eager"] = f"child process {msg} (phase: {system or '?'})"
            return row
        crashes[system] = msg
        skip[system] = f"not run after crash: {msg}"
    row = empty_row(w)
    row["error"]["eager"] = "gave up after repeated crashes"
    return row


# --------------------------------------------------------------------------- output

#: the host's compute speed at the end of a run differing from the start's by more than this
#: share (of the larger) says the host's speed moved during the run (a shared host slowed
#: down or recovered), so its rows were timed at different speeds
HOST_SPEED_DRIFT = 0.2


def host_speed_change(cp: dict) -> Optional[float]:
    """The compute speed's change from the run's start to its end, as a share of the larger
    of the two (negative: slower at the end); None when either is missing."""
    a, b = cp.get("start"), cp.get("end")
    if not a or not b:
        return None
    return (b - a) / max(a, b)


def host_speed_note(cp: dict) -> str:
    """A warning for the compute line when the host's speed moved during the run, else ''."""
    d = host_speed_change(cp)
    if d is None or abs(d) <= HOST_SPEED_DRIFT:
        return ""
    return (f" (the host {'slowed' if d < 0 else 'sped up'} by {abs(d) * 100:.0f}% during "
            f"the run: a shared host's speed moved; rows timed at different speeds)")


def print_table(rows: list[dict], machine: dict, startup: Optional[dict] = None,
                file=sys.stdout, warm_start: Optional[dict] = None,
                cold_start: Optional[dict] = None, first_calls_note: Optional[str] = None):
    bw = machine.get("bandwidth_gbps") or {}
    print(f"cdynamo bench | {machine['cpu_model']} | {machine['cores']} cores, "
          f"{machine['threads']} threads | torch {machine['torch_version']} | "
          f"python {machine['python_version']}", file=file)
    if bw:
        print(f"memory bandwidth (torch, 64 MB): copy {bw.get('copy_gbps')} GB/s, "
              f"triad {bw.get('triad_gbps')} GB/s", file=file)
    cp = machine.get("compute_gflops") or {}
    if cp:
        print(f"compute (torch, 256x256 float32 matmul, median): {cp.get('start')} GFLOP/s at "
              f"the start, {cp.get('end')} at the end{host_speed_note(cp)}", file=file)
    st = {k: v for k, v in (startup or {}).items() if v is not None}
    if st:
        print("one-time start-up (first compile in this process, not in 'comp s'): "
              + ", ".join(f"{k} {v:.2f} s" for k, v in st.items()), file=file)
    cs = {k: v for k, v in (cold_start or {}).items() if v is not None}
    if cs:
        print("cold start (first call in a new process, empty disk cache, imports excluded; "
              "matmul, relu, sum): " + ", ".join(f"{k} {v:.2f} s" for k, v in cs.items()),
              file=file)
    ws = {k: v for k, v in (warm_start or {}).items() if v is not None}
    if ws:
        print("warm start (first call in a new process, disk cache filled, imports excluded): "
              + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in ws.items()), file=file)
    if first_calls_note and (cs or ws):
        print(f"  ({first_calls_note})", file=file)
    head = ["workload", "kind", "eager us", "inductor us", "cdynamo us", "ind x", "cdy x",
            "ind comp s", "cdy comp s", "GB/s e/i/c", "%copy cdy", "peak MB e/i/c", "status"]
    body = []
    for r in rows:
        g = r.get("gbps") or {}
        share = (r.get("bw_share") or {}).get("cdynamo")
        gb = "/".join(_fmt(g.get(s), ".1f") for s in SYSTEMS) if g else "-"
        pk = r.get("peak_bytes") or {}
        mb = "/".join(_fmt(None if pk.get(s) is None else pk[s] / 2**20, ".2f")
                      for s in SYSTEMS) if pk else "-"
        status = []
        for s in SYSTEMS:
            if r["ok"].get(s) is False:
                status.append(f"{s}:FAIL")
            elif r["ok"].get(s) is None and r["error"].get(s) and s != "eager":
                status.append(f"{s}:skip")
        body.append([r["name"], r["kind"], _fmt_us(r["us"]["eager"]),
                     _fmt_us(r["us"]["inductor"]), _fmt_us(r["us"]["cdynamo"]),
                     _fmt(r["speedup"]["inductor"], ".2f"), _fmt(r["speedup"]["cdynamo"], ".2f"),
                     _fmt(r["compile_s"]["inductor"], ".3f"),
                     _fmt(r["compile_s"]["cdynamo"], ".3f"),
                     gb, "-" if share is None else f"{share * 100:.0f}%", mb,
                     " ".join(status) or "ok"])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    fmt_row = lambda cells: "  ".join(  # noqa: E731
        (c.ljust(wd) if i in (0, 1, len(cells) - 1) else c.rjust(wd))
        for i, (c, wd) in enumerate(zip(cells, widths)))
    print(fmt_row(head), file=file)
    print("  ".join("-" * wd for wd in widths), file=file)
    for b in body:
        print(fmt_row(b), file=file)
    print("us = median microseconds per call (interleaved rounds); x = eager/compiled; "
          "comp s = first call - steady call (cold caches)", file=file)
    if any(r.get("peak_bytes") for r in rows):
        print("peak MB = a training step's peak memory above what is alive at its start (MiB; "
              "the second of two profiled steps): torch's CPU allocations and frees "
              "(torch.profiler profile_memory, in time order); for cdynamo plus its output "
              "pool's free blocks at the start and the pool's growth in the step "
              "(bench.step_peak_bytes; compile-time copies not counted)", file=file)
    if any(r.get("copy_gbps") for r in rows):
        print("%copy = cdynamo's GB/s over a 64 MB copy's, measured just before and after "
              "the workload's rounds (the larger)", file=file)
    caps = [r for r in rows if r.get("capture")]
    if caps:
        print("graphs / graph breaks of each compile (transformers group; cdynamo's recompiles "
              "over its first and 6 steady calls):", file=file)
        for r in caps:
            c = r["capture"]
            parts = [f"{s} {c[s]['graphs']} graph(s), {c[s]['breaks']} break(s)"
                     + (f", {c[s]['recompiles']} recompile(s)" if c[s].get("recompiles") is not None
                        else "") for s in ("inductor", "cdynamo") if c.get(s)]
            print(f"  {r['name']}: " + "; ".join(parts), file=file)
    parts = [(r["name"], r["breakdown_us"], r["us"]["eager"]) for r in rows
             if r.get("breakdown_us")]
    if parts:
        print("cdynamo per-call cost by part (cdynamo.overhead_breakdown, us per call; "
              "phase clocks on):", file=file)
        for name, b, eager in parts:
            print(f"  {name}: guards {b['guards']:.2f}, inputs {b['inputs']:.2f}, "
                  f"alloc {b['alloc']:.2f}, kernels {b['kernels']:.2f}, "
                  f"result {b['result']:.2f}, other {b['other']:.2f} = {b['total']:.2f}"
                  f"{' (direct call)' if b.get('direct') else ''}; eager {_fmt_us(eager)}",
                  file=file)
    # identical errors are grouped: one line per (system, message) with the rows it hit
    groups: dict = {}
    for r in rows:
        for s in SYSTEMS:
            e = r["error"].get(s)
            if e:
                groups.setdefault((s, e.splitlines()[0]), []).append(r["name"])
    notes = [(r["name"], n) for r in rows for n in r.get("notes", [])]
    if groups or notes:
        print("\nerrors / skipped:", file=file)
        for (s, first), names in groups.items():
            where = (f"all {len(names)} workloads" if len(names) == len(rows) and len(rows) > 1
                     else ", ".join(names))
            print(f"  {s:9s} {first[:200]}\n            [{where}]", file=file)
        for name, n in notes:
            print(f"  note      {name}: {n[:200]}", file=file)


def _label_x(v: float) -> str:
    return f"{v:.1f}x" if v >= 10 else f"{v:.2f}x"


def _label_s(v: float) -> str:
    return f"{v:.1f}s" if v >= 1 else f"{v * 1e3:.0f}ms" if v >= 0.01 else f"{v * 1e3:.1f}ms"


def plot_caption(machine: Optional[dict], config: Optional[dict] = None) -> str:
    """The plot's caption: machine, threads, torch and python versions, the host's compute
    speed at the start and end, and what kind of run it was."""
    m = machine or {}
    head = [f"{m.get('cpu_model', '?')}, {m.get('cores', '?')} cores, "
            f"{m.get('threads', '?')} threads",
            f"torch {m.get('torch_version', '?')}", f"python {m.get('python_version', '?')}"]
    tail = []
    if config is not None:
        tail.append("--quick run" if config.get("quick") else "full run")
    cp = m.get("compute_gflops") or {}
    if cp.get("start") and cp.get("end"):
        tail.append(f"host compute {cp['start']:g} GFLOP/s at the start, {cp['end']:g} at the "
                    f"end{' (the host speed moved)' if host_speed_note(cp) else ''}")
    return "cdynamo bench: " + " | ".join(head) + ("\n" + " | ".join(tail) if tail else "")


def write_plot(path: str, rows: list[dict], machine: Optional[dict] = None,
               config: Optional[dict] = None) -> bool:
    """A PNG of two bar charts, per workload and compiled system: the steady-state speed-up
    over eager (bars from 1x, up when faster, down when slower) and the cold compile time,
    both on log scales fitted to the values, each bar labelled with its value (FAIL: an
    error or a wrong result, n/a: not run), the legend above the charts and a caption with
    the machine, its threads and the torch version."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except Exception as e:  # noqa: BLE001
        sys.stderr.write(f"--plot: matplotlib is not importable ({_err(e, 200)}); "
                         f"skipping the plot. `pip install matplotlib` to get it.\n")
        return False
    systems = (("inductor", "tab:orange"), ("cdynamo", "tab:blue"))
    names = [r["name"] for r in rows]
    xs = range(len(rows))
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(9, len(rows) * 0.62 + 2), 10))
    wdt = 0.4
    for ax, key, label, base in ((ax1, "speedup", _label_x, 1.0),
                                 (ax2, "compile_s", _label_s, None)):
        vals = [r[key][s] for r in rows for s, _ in systems if r[key][s]]
        lo, hi = (min(vals), max(vals)) if vals else (1.0, 1.0)
        if base:
            lo, hi = min(lo, base), max(hi, base)
        ymin, ymax = lo / 3.0, hi * 4.0          # room for the labels below and above
        foot = base or ymin
        for i, (s, col) in enumerate(systems):
            for x, r in zip(xs, rows):
                pos, v = x + (i - 0.5) * wdt, r[key][s]
                if not v:
                    ax.text(pos, foot * (1.15 if base is None else 1.0),
                            "FAIL" if r["ok"].get(s) is False else "n/a", ha="center",
                            va="bottom" if base is None else "center", fontsize=7,
                            rotation=90, color=col)
                    continue
                ax.bar(pos, v - foot, wdt, bottom=foot, color=col,
                       label=s if x == next(j for j, q in enumerate(rows) if q[key][s]) else None)
                up = v >= foot
                ax.text(pos, v * (1.08 if up else 0.92), label(v), ha="center",
                        va="bottom" if up else "top", fontsize=7, rotation=90)
        ax.set_yscale("log")
        ax.set_ylim(ymin, ymax)
        unit = "x" if base else " s"
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
            lambda v, _pos, unit=unit: f"{v:g}{unit}"))
        ax.set_xlim(-0.7, len(rows) - 0.3)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
        if ax is ax1:     # eager's own time under each name: the scale of the work
            ax.set_xticklabels([f"{n}\n(eager {_fmt_us(r['us']['eager'])} us)"
                                if r["us"].get("eager") else n for n, r in zip(names, rows)],
                               rotation=35, ha="right", fontsize=8)
        ax.grid(axis="y", which="major", color="0.9", lw=0.6)
        ax.set_axisbelow(True)
        ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, frameon=False,
                  fontsize=9)
    ax1.axhline(1.0, color="0.3", lw=0.8)
    ax1.set_ylabel("speed-up over eager (x, log scale)")
    ax1.set_title("steady-state speed-up over eager PyTorch (higher is better; 1x = eager)",
                  loc="left", fontsize=10)
    ax2.set_ylabel("cold compile time (log scale)")
    ax2.set_title("compile time: first call - steady call, cold caches (lower is better)",
                  loc="left", fontsize=10)
    fig.suptitle(plot_caption(machine, config), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# --------------------------------------------------------------------------- main

def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m cdynamo.bench",
        description="Benchmark eager PyTorch vs torch.compile (inductor) vs cdynamo.")
    p.add_argument("--quick", action="store_true",
                   help="a subset of workloads (one of each kind, unless --filter names "
                        "others), smaller sizes, 5 rounds of at most 0.5 s per workload, "
                        "inductor's cold / warm start not measured and a 30 s inductor "
                        "compile budget (see --inductor-budget)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads(N) and OMP_NUM_THREADS=N for all systems")
    p.add_argument("--filter", action="append", default=None, metavar="NAME",
                   help="substring of workload names; repeatable or comma separated; "
                        "the bfloat16 group runs only when named (--filter bf16)")
    p.add_argument("--no-inductor", action="store_true", help="skip torch.compile")
    p.add_argument("--no-cdynamo", action="store_true", help="skip cdynamo")
    p.add_argument("--json", metavar="PATH", help="write results as JSON")
    p.add_argument("--plot", metavar="PATH", help="write a PNG bar chart (needs matplotlib)")
    p.add_argument("--list", action="store_true", help="list workloads and exit")
    p.add_argument("--dynamic", action="store_true",
                   help="the dynamic-shapes group instead (issue 32): batch sweeps 1..64 of "
                        "pointwise / softmax / layer_norm / mlp / transformer_stack / "
                        "encoder_layer and LLaMA / GPT-2 decodes per token (64 tokens), "
                        "compile counts and per-call times (--filter picks among them)")
    p.add_argument("--isolate", action="store_true",
                   help="run each workload in a child process (survives crashes)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if any system failed (error or wrong result)")
    p.add_argument("--rounds", type=int, default=None, help="timing rounds (default 21, quick 5)")
    p.add_argument("--batch-ms", type=float, default=5.0,
                   help="target milliseconds per timed batch (default 5)")
    p.add_argument("--max-time-per-workload", type=float, default=None,
                   help="seconds of interleaved timing per workload at most (default 3, "
                        "quick 0.5)")
    p.add_argument("--inductor-budget", type=float, default=None, metavar="S",
                   help="stop compiling with inductor once its compile times sum past S seconds"
                        " (default: none; 30 with --quick)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("-v", "--verbose", action="store_true", help="print tracebacks")
    # internal (--isolate children)
    p.add_argument("--_child", help=argparse.SUPPRESS)
    p.add_argument("--_phase-file", dest="phase_file", help=argparse.SUPPRESS)
    p.add_argument("--_copy-gbps", dest="copy_gbps_in", type=float, help=argparse.SUPPRESS)
    p.add_argument("--_skip", action="append", default=[], help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.rounds is None:
        a.rounds = 5 if a.quick else 21
    if a.max_time_per_workload is None:
        a.max_time_per_workload = 0.5 if a.quick else 3.0
    if a.inductor_budget is None and a.quick:
        a.inductor_budget = 30.0
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    faulthandler.enable()
    if args.list:
        for w in WORKLOADS:
            print(f"{w.name:24s} {w.kind:10s} {w.description}")
        return 0
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
        torch.set_num_threads(args.threads)

    cache_root = tempfile.mkdtemp(prefix="cdynamo-bench-")
    if args.dynamic:
        from . import _bench_dynamic   # noqa: PLC0415
        os.environ["CDYNAMO_CACHE_DIR"] = os.path.join(cache_root, "cdynamo")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache_root, "inductor")
        try:
            cd = None if args.no_cdynamo else load_cdynamo()[0]
            return _bench_dynamic.main(args, cd)
        finally:
            shutil.rmtree(cache_root, ignore_errors=True)
    try:
        if args._child:
            return child_main(args, cache_root)
        return parent_main(args, cache_root)
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)


def child_main(args, cache_root: str) -> int:
    ws = [w for w in WORKLOADS if w.name == args._child]
    if not ws:
        print(f"unknown workload {args._child}", file=sys.stderr)
        return 2
    args.copy_gbps = args.copy_gbps_in or None
    phase = Phase(args.phase_file)
    progress = Progress(1, enabled=False)
    phase("", "start-up")
    systems = Systems(args, cache_root)
    if systems.cdynamo is not None:
        cfg = getattr(systems.cdynamo, "config", None)
        for attr in ("threads", "num_threads"):
            if args.threads and cfg is not None and hasattr(cfg, attr):
                setattr(cfg, attr, args.threads)
    warm_up(systems, progress)
    skip = dict(s.split("=", 1) for s in args._skip)
    row = run_workload(ws[0], systems, args, progress, phase, skip=skip)
    sys.stdout.write(ROW_MARKER + json.dumps(row) + "\n")
    sys.stdout.flush()
    return 0


def parent_main(args, cache_root: str) -> int:
    workloads = select_workloads(args.filter, args.quick)
    if not workloads:
        print(f"no workload matches {args.filter}; known: "
              f"{', '.join(w.name for w in WORKLOADS)}", file=sys.stderr)
        return 2
    progress = Progress(len(workloads) + 1, enabled=not args.no_progress)
    progress.update("memory bandwidth")
    bandwidth = measure_bandwidth(args.quick)
    args.copy_gbps = bandwidth["copy_gbps"]
    compute = {"start": compute_gflops()}
    progress.update("memory bandwidth", advance=1)

    systems = Systems(args, cache_root, load=not args.isolate)
    if systems.cdynamo is not None and args.threads:
        cfg = getattr(systems.cdynamo, "config", None)
        for attr in ("threads", "num_threads"):
            if cfg is not None and hasattr(cfg, attr):
                setattr(cfg, attr, args.threads)
    startup = {"inductor": None, "cdynamo": None}
    if not args.isolate:
        startup = warm_up(systems, progress)
    warm_start = measure_warm_start(systems, progress)
    cold_start = measure_cold_start(systems, progress)
    phase = Phase(None)
    rows = []
    t_start = time.perf_counter()
    for w in workloads:
        progress.update(w.name)
        try:
            if args.isolate:
                row = run_isolated(w, args, systems, progress)
            else:
                row = run_workload(w, systems, args, progress, phase)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001  (a harness bug: keep going)
            if args.verbose:
                traceback.print_exc()
            row = empty_row(w)
            row["error"]["eager"] = "harness error: " + _err(e)
        rows.append(row)
        progress.update(w.name + " done", advance=1)
    progress.close()
    compute["end"] = compute_gflops()

    machine = machine_info(bandwidth, systems.cdynamo_error if not args.no_cdynamo else
                           "disabled (--no-cdynamo)")
    machine["compute_gflops"] = dict(compute, change=host_speed_change(compute))
    result = {
        "machine": machine,
        "config": {"quick": args.quick, "threads": torch.get_num_threads(),
                   "rounds": args.rounds, "batch_ms": args.batch_ms,
                   "filters": args.filter, "inductor": not args.no_inductor,
                   "cdynamo": not args.no_cdynamo, "isolate": args.isolate,
                   "inductor_budget_s": args.inductor_budget},
        "startup_s": startup,
        "warm_start_s": warm_start,
        "cold_start_s": cold_start,
        "total_s": round(time.perf_counter() - t_start, 2),
        "rows": rows,
    }
    note = ("inductor's cold and warm start are not measured under --quick: a full run "
            "measures them" if args.quick and not args.no_inductor else None)
    print_table(rows, machine, startup, warm_start=warm_start, cold_start=cold_start,
                first_calls_note=note)
    if args.json:
        d = os.path.dirname(os.path.abspath(args.json))
        os.makedirs(d, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"\nwrote {args.json}")
    if args.plot and write_plot(args.plot, rows, machine, result["config"]):
        print(f"wrote {args.plot}")
    if args.strict and any(v is False for r in rows for v in r["ok"].values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
