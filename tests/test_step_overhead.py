"""Per-step overhead of compiled training steps (issue 34): what a warm step runs in Python,
and that the guards made cheaper still see every change a user can make between steps.

- dropout's noise (torch.ops.aten.bernoulli.p, an extern) is called through the C operator
  its OpOverload holds (runtime/compiled.c direct_fn), not OpOverload.__call__;
- a CONTAINS guard on a transformers GeneralInterface (ALL_ATTENTION_FUNCTIONS) reads its
  two dicts in C (frame/guards.c gi_contains), not Mapping.__contains__ over its Python
  __getitem__.
Each change below must give a recompile (or a guard read anew) and eager's result."""
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import cdynamo


def _frames(fn, *args):
    """Names of the Python frames one call of fn(*args) runs (sys.setprofile)."""
    seen = []

    def prof(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_qualname if sys.version_info >= (3, 11)
                        else frame.f_code.co_name)
    sys.setprofile(prof)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return seen


# ---- dropout's noise: the OpOverload's C operator ----------------------------------------

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.drop = nn.Dropout(0.3)
        self.w = nn.Parameter(torch.randn(16))

    def forward(self, x):
        return (self.drop(self.lin(x)) * self.w).pow(2).sum()


def _step(f, m, x, seed):
    for p in m.parameters():
        p.grad = None
    torch.manual_seed(seed)
    loss = f(x)
    loss.backward()
    return loss.detach(), [None if p.grad is None else p.grad.clone() for p in m.parameters()]


def _same_step(opt, m, x, seed=0):
    le, ge = _step(m, m, x, seed)
    after = torch.rand(3)
    lc, gc = _step(opt, m, x, seed)
    assert torch.equal(torch.rand(3), after)   # the same draws as eager's
    torch.testing.assert_close(lc, le, rtol=1e-5, atol=1e-5)
    for a, b in zip(gc, ge):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_dropout_noise_runs_no_python_frame_and_draws_eagers_mask():
    torch.manual_seed(0)
    m, x = Net().train(), torch.randn(8, 16)
    opt = cdynamo.optimize(m)
    for seed in range(3):
        _same_step(opt, m, x, seed)
    names = _frames(lambda: opt(x).backward())
    assert not [n for n in names if "OpOverload" in n], names
    assert cdynamo.stats()["recompiles"] == 0


def _set_p(m):
    m.drop.p = 0.5


def _dropout_off(m):
    m.drop.p = 0.0


def _freeze_w(m):
    m.w.requires_grad_(False)


def _freeze_lin(m):
    m.lin.weight.requires_grad_(False)


def _w_double(m):
    m.w.data = m.w.data.double()


def _w_replaced(m):
    m.w = nn.Parameter(torch.randn(16))


def _w_other_shape(m):
    m.w = nn.Parameter(torch.randn(1))


def _eval(m):
    m.eval()


_STEP_CHANGES = {"dropout p": _set_p, "dropout p 0": _dropout_off, "requires_grad of w": _freeze_w,
                 "requires_grad of a linear's weight": _freeze_lin, "dtype of w": _w_double,
                 "w replaced": _w_replaced, "w of another shape": _w_other_shape, "eval": _eval}


@pytest.mark.parametrize("change", list(_STEP_CHANGES))
def test_training_step_change_between_steps(change):
    """After warm steps, one change to the module: the next steps give eager's loss, grads
    and draws (a recompile where the change is in the guards)."""
    torch.manual_seed(0)
    m, x = Net().train(), torch.randn(8, 16)
    opt = cdynamo.optimize(m)
    for seed in range(3):
        _same_step(opt, m, x, seed)
    _STEP_CHANGES[change](m)
    for seed in range(3, 5):
        _same_step(opt, m, x, seed)


# ---- `key in GeneralInterface` in C ---------------------------------------------------------

def _registry():
    generic = pytest.importorskip("transformers.utils.generic")

    class Reg(generic.GeneralInterface):
        _global_mapping = {"a": torch.sin}
    return Reg, Reg()


def _pick(x, reg):
    if "b" in reg:
        return reg["b"](x) + 1
    return reg["a"](x)


class _NotADict(dict):
    pass


def _override_getitem(tp, reg):
    tp.__getitem__ = lambda self, k: {"b": torch.tanh}[k]


_REG_CHANGES = {
    "registered": lambda tp, reg: tp.register("b", torch.cos),
    "set locally": lambda tp, reg: reg.__setitem__("b", torch.cos),
    "global dict replaced": lambda tp, reg: setattr(tp, "_global_mapping", {"b": torch.cos}),
    "local dict replaced": lambda tp, reg: setattr(reg, "_local_mapping", {"b": torch.exp}),
    "local dict of a subclass": lambda tp, reg: setattr(reg, "_local_mapping",
                                                        _NotADict(b=torch.exp)),
    "class __getitem__ replaced": _override_getitem,
    "class property shadows the local dict": lambda tp, reg: setattr(
        tp, "_local_mapping", property(lambda s: {"b": torch.cos})),
}


@pytest.mark.parametrize("change", list(_REG_CHANGES))
def test_general_interface_contains_sees_changes(change):
    """`"b" in reg` is False while warm; each change makes it True (or reads it another
    way): a recompile and eager's result."""
    tp, reg = _registry()
    opt = cdynamo.optimize(_pick)
    x = torch.randn(5)
    for _ in range(3):
        torch.testing.assert_close(opt(x, reg), _pick(x, reg))
    before = cdynamo.stats()["recompiles"]
    _REG_CHANGES[change](tp, reg)
    for _ in range(2):
        torch.testing.assert_close(opt(x, reg), _pick(x, reg))
    assert cdynamo.stats()["recompiles"] == before + 1


def test_general_interface_contains_runs_no_python_frame_when_warm():
    tp, reg = _registry()
    opt = cdynamo.optimize(_pick)
    x = torch.randn(5)
    for _ in range(3):
        opt(x, reg)
    names = _frames(opt, x, reg)
    assert "Mapping.__contains__" not in names and "GeneralInterface.__getitem__" not in names, \
        names


def test_attention_registry_change_between_bert_steps():
    """BERT's attention reads ALL_ATTENTION_FUNCTIONS: a function set locally under 'sdpa'
    between steps is the one the next steps run (eager's loss and grads)."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=32,
                                  max_position_embeddings=32, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0, attn_implementation="sdpa")
    bert = transformers.BertModel(cfg).train()
    ids = torch.randint(0, 64, (2, 8))
    loss = lambda: bert(input_ids=ids).last_hidden_state.pow(2).mean()  # noqa: E731
    opt = cdynamo.optimize(loss)

    def check():
        outs = []
        for f in (loss, opt):
            bert.zero_grad()
            v = f()
            v.backward()
            outs.append((v.detach(), [p.grad.clone() for p in bert.parameters()
                                      if p.grad is not None]))
        torch.testing.assert_close(outs[1][0], outs[0][0], rtol=1e-4, atol=1e-5)
        for a, b in zip(outs[1][1], outs[0][1]):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)

    for _ in range(2):
        check()
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def doubled(*a, **k):
        out, w = sdpa(*a, **k)
        return out * 2, w
    ALL_ATTENTION_FUNCTIONS["sdpa"] = doubled
    try:
        check()
        check()
    finally:
        del ALL_ATTENTION_FUNCTIONS["sdpa"]
    check()


# ---- where a step's time goes: the phase clocks of training graphs (tools/train_phases.py) --

def test_phase_timing_splits_training_backward_from_forward():
    """CompiledGraph.phase_timing's bank 1 (bwd_*) holds the compiled backward's phases, bank 0
    the forward's; train_fwd / train_bwd are the whole _train_forward / _train_backward, at
    least the exclusive phases inside them; overhead_breakdown's parts are unchanged."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    x = torch.randn(8, 16)
    m(x).pow(2).mean().backward()
    grads = [p.grad.clone() for p in m.parameters()]              # eager's
    f = cdynamo.optimize(lambda x: m(x).pow(2).mean())
    for _ in range(2):
        for p in m.parameters():
            p.grad = None
        f(x).backward()
    parts = ("inputs", "alloc", "kernels", "externs", "free", "result")
    for clock in (True, "cpu"):
        cdynamo._C.CompiledGraph.phase_timing(clock)
        try:
            for p in m.parameters():
                p.grad = None
            f(x).backward()
        finally:
            ns = cdynamo._C.CompiledGraph.phase_timing(False)
        assert ns["bwd_kernels"] > 0 and ns["kernels"] > 0, ns       # both graphs ran kernels
        assert ns["bwd_externs"] > 0 and ns["externs"] > 0, ns       # the linears' mm / addmm
        assert ns["bwd_train_fwd"] == ns["bwd_train_bwd"] == 0, ns   # totals in bank 0
        assert ns["train_fwd"] >= sum(ns[p] for p in parts), ns
        assert ns["train_bwd"] >= sum(ns["bwd_" + p] for p in ("guards",) + parts), ns
    for p, g in zip(m.parameters(), grads):
        torch.testing.assert_close(p.grad, g)
    assert cdynamo._C.CompiledGraph.phase_timing(False)["kernels"] == ns["kernels"]  # off: kept


# ---- config.heap_keep_mb: glibc keeps the step's freed memory mapped ---------------------

_HEAP_STEP = r"""
import resource, sys, torch, torch.nn as nn
import cdynamo
torch.set_num_threads(1)
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                  nn.Linear(1024, 256))
x = torch.randn(2048, 256)
def grads(f):
    for p in m.parameters():
        p.grad = None
    f(x).pow(2).mean().backward()
    return [p.grad for p in m.parameters()]
want = grads(m)
f = cdynamo.optimize(lambda x: m(x))
for _ in range(3):
    grads(f)
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    got = grads(f)
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 10
for g, w in zip(got, want):
    torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
print("FAULTS", faults, cdynamo.config.heap_keep_mb)
"""


def _heap_step(env):
    import os
    import subprocess
    r = subprocess.run([sys.executable, "-c", _HEAP_STEP], capture_output=True, text=True,
                       env={**os.environ, **env}, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("FAULTS")][-1].split()
    return float(line[1]), line[2]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_heap_keep_mb_steps_match_eager():
    """With CDYNAMO_HEAP_KEEP_MB the setting is read from the environment and applied, and
    the steps' gradients are eager's (own process: the setting is process-wide and
    one-way).  What it saves (minor page faults per warm step: the bench's
    transformer_stack_train ~2000 -> 0 on the 3.11 host, not on 3.12's) is measured by
    tools/train_phases.py and tools/train_faults.py, not asserted here."""
    _, keep_default = _heap_step({"CDYNAMO_HEAP_KEEP_MB": ""})
    _, keep = _heap_step({"CDYNAMO_HEAP_KEEP_MB": "256"})
    assert keep_default == "None" and keep == "256.0"


def test_heap_keep_mb_checks_its_value():
    with pytest.raises(ValueError, match="heap_keep_mb"):
        cdynamo.config.heap_keep_mb = -1
    with pytest.raises(ValueError, match="heap_keep_mb"):
        cdynamo.config.heap_keep_mb = True
    if cdynamo.config.heap_keep_mb is None:
        cdynamo.config.heap_keep_mb = None          # unset stays unset (no mallopt)
        assert cdynamo.config.heap_keep_mb is None
