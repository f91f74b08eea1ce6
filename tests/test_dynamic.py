"""Dynamic shapes (issue 32), milestone 1: symbolic sizes of a trace's graph.

CDYNAMO_LOGS=dynamic logs what dynamic=True would keep symbolic in each compiled graph: the
symbols (each input dim of a frame argument, sizes 0 and 1 excepted), which of them specialize
and why (an op without a symbolic rule, a size the code read as a number, layer_norm's
normalized_shape, broadcasting against a constant), the relations between symbols the graph
relies on, and each output's sizes as expressions.  Compilation itself is unchanged (static
kernels): every call still matches eager."""
import re

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import assert_same


def symbolic_log(capfd, fn, *args):
    """Run cdynamo.optimize(fn)(*args) with the dynamic log on: (result, the log's lines
    without their prefix and graph name)."""
    expected = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    capfd.readouterr()
    cdynamo._C.set_log_topics({"dynamic"})
    try:
        out = cdynamo.optimize(fn)(*args)
    finally:
        cdynamo._C.set_log_topics(set())
    err = capfd.readouterr().err
    lines = [re.sub(r"^\[cdynamo:dynamic\] __compiled_fn_\d+: ", "", l)
             for l in err.splitlines() if l.startswith("[cdynamo:dynamic]")]
    assert_same(expected, out)
    return lines


def outputs(lines):
    return [l.split(": ", 1)[1] for l in lines if re.match(r"\s+output \d+: ", l)]


def test_pointwise_reduction_softmax_cat_stay_symbolic(capfd):
    def f(x, b):
        h = torch.relu(x * 2.0 + b)
        return h.sum(dim=1), torch.softmax(h, dim=-1), torch.cat([h, x], 0), h.amax(0, True)

    lines = symbolic_log(capfd, f, torch.randn(8, 16), torch.randn(16))
    assert lines[0].startswith("with the arguments' dims symbolic, 3 of 3 symbols stay symbolic")
    assert "  s0 = dim 0 of 'x' (hint 8)" in lines
    assert "  s1 = dim 1 of 'x' (hint 16)" in lines
    assert "  s2 = dim 0 of 'b' (hint 16)" in lines
    assert "  relation s1 == s2" in lines          # broadcasting relied on x's dim 1 == b's
    assert "  guards: s0 >= 2, s1 >= 2, s2 >= 2, inputs with symbols contiguous, relations" in lines
    assert outputs(lines) == ["[s0]", "[s0, s1]", "[2*s0, s1]", "[1, s1]"]


def test_sizes_zero_and_one_stay_static(capfd):
    lines = symbolic_log(capfd, lambda x, y: x + y, torch.randn(1, 5, 3), torch.randn(0, 1, 1))
    assert lines[0].startswith("with the arguments' dims symbolic, 2 of 2 symbols")
    assert outputs(lines) == ["[0, s0, s1]"]


def test_shape_read_specializes(capfd):
    def f(x):
        return x * x.shape[0]

    lines = symbolic_log(capfd, f, torch.randn(6, 4))
    assert lines[0].startswith("with the arguments' dims symbolic, 0 of 2 symbols")
    assert any(re.match(r"  s0 = dim 0 of 'x' \(hint 6\): specialized: the code read \.shape", l)
               for l in lines), lines
    assert outputs(lines) == ["[6, 4]"]


def test_size_call_specializes_that_dim(capfd):
    lines = symbolic_log(capfd, lambda x: x.view(x.size(0), -1) + 1, torch.randn(3, 4, 5))
    # x.size(0) is a number: s0 specializes, and the -1 is then 4*5 (s1, s2 symbolic)
    assert outputs(lines) == ["[3, s1*s2]"]
    assert "2 of 3 symbols" in lines[0]
    assert any(l.startswith("  s0 = dim 0 of 'x' (hint 3): specialized: the code read the size")
               for l in lines), lines
    lines = symbolic_log(capfd, lambda x: x * len(x) + x.dim(), torch.randn(3, 4))
    assert outputs(lines) == ["[3, s1]"]


def test_layer_norm_normalized_dims_specialize(capfd):
    w, b = torch.randn(32), torch.randn(32)

    def f(x):
        return F.layer_norm(x, (32,), w, b)

    lines = symbolic_log(capfd, f, torch.randn(2, 7, 32))
    assert "2 of 3 symbols" in lines[0]
    # weight and bias passed as arguments: their sizes are normalized_shape's too
    lines2 = symbolic_log(capfd, lambda x, w, b: F.layer_norm(x, (32,), w, b),
                          torch.randn(2, 32), w, b)
    assert "1 of 4 symbols" in lines2[0] and outputs(lines2) == ["[s0, 32]"]
    assert any("s2 = dim 2 of 'x' (hint 32): specialized: layer_norm's normalized_shape" in l
               for l in lines), lines
    assert outputs(lines) == ["[s0, s1, 32]"]


def test_matmul_and_linear(capfd):
    lin = torch.nn.Linear(16, 8)

    def f(x, y):
        return torch.mm(x, y).relu(), lin(x @ y)

    with torch.no_grad():
        lines = symbolic_log(capfd, f, torch.randn(5, 12), torch.randn(12, 16))
    # y's dim 1 meets the Linear's static 16: specialized; x's 12 == y's 12 a relation
    assert "  relation s1 == s2" in lines
    assert any(l.startswith("  s3 = dim 1 of 'y' (hint 16): specialized") for l in lines), lines
    assert outputs(lines) == ["[s0, 16]", "[s0, 8]"]


def test_bmm_batch_and_rows(capfd):
    def f(q, k):
        return torch.softmax(torch.bmm(q, k.transpose(1, 2)) * 0.5, dim=-1)

    lines = symbolic_log(capfd, f, torch.randn(3, 6, 4), torch.randn(3, 5, 4))
    assert "6 of 6 symbols" in lines[0]
    assert "  relation s0 == s3" in lines and "  relation s2 == s5" in lines
    assert outputs(lines) == ["[s0, s1, s4]"]


def test_views_follow_their_source(capfd):
    def f(x):
        a = x.permute(2, 0, 1).unsqueeze(0) * 2
        b = x.reshape(-1, 4) + 1
        c = x.flatten(1) - 1
        d = x.view(-1) * 3
        return a, b, c, d, x.transpose(0, 1).squeeze() + 0

    lines = symbolic_log(capfd, f, torch.randn(3, 5, 4))
    assert outputs(lines) == ["[1, 4, s0, s1]", "[s0*s1, 4]", "[s0, 4*s1]", "[4*s0*s1]",
                              "[s1, s0, 4]"]
    # reshape(-1, 4) put x's last dim to 4: it specialized
    assert any(l.startswith("  s2 = dim 2 of 'x' (hint 4): specialized") for l in lines), lines


def test_views_without_a_rule_specialize(capfd):
    lines = symbolic_log(capfd, lambda x: x[:, :2] + x.view(3, 10)[:, :2], torch.randn(3, 10))
    assert "0 of 2 symbols" in lines[0]
    assert outputs(lines) == ["[3, 2]"]


def test_mutated_input_specializes(capfd):
    def f(x):
        x.add_(1)
        return x * 2

    lines = symbolic_log(capfd, f, torch.randn(4, 3))
    assert outputs(lines) == ["[4, 3]", "[4, 3]"]   # the result and x's new value
    assert any("an input the graph mutates" in l for l in lines), lines


def test_module_parameters_are_not_symbols(capfd):
    m = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 3))
    with torch.no_grad():
        lines = symbolic_log(capfd, m, torch.randn(9, 10))
    assert lines[0].startswith("with the arguments' dims symbolic, 1 of 2 symbols"), lines
    assert outputs(lines) == ["[s0, 3]"]


def test_non_contiguous_input_specializes(capfd):
    lines = symbolic_log(capfd, lambda x, y: x * 2 + y, torch.randn(5, 3).t(), torch.randn(3, 5))
    assert outputs(lines) == ["[3, 5]"]
    assert any("a non-contiguous input" in l for l in lines), lines


def test_graph_passes_keep_pins(capfd):
    """The attention rewrite drops the scores a size was read from: everything specializes
    (what the read depended on is unknown); channels_last's inserted values shift the pins."""
    def attn(q, k, v):
        s = (q @ k.transpose(-2, -1)) * 0.125
        return torch.softmax(s, dim=-1) @ v, s.shape[-1]

    q = torch.randn(2, 4, 8, 16)
    with torch.no_grad():
        lines = symbolic_log(capfd, attn, q, q.clone(), q.clone())
    assert "0 of 12 symbols" in lines[0]
    assert any("a pinned value a graph pass removed" in l for l in lines), lines
    conv = torch.nn.Conv2d(3, 4, 3)
    with torch.no_grad():
        lines = symbolic_log(capfd, lambda x: conv(x).relu() + x.shape[0], torch.randn(2, 3, 8, 8))
    assert outputs(lines) == ["[2, 4, 6, 6]"]


def test_log_off_by_default(capfd):
    capfd.readouterr()
    cdynamo.optimize(lambda x: x + 1)(torch.randn(3))
    assert "[cdynamo:dynamic]" not in capfd.readouterr().err
