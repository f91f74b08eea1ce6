"""Dynamic shapes (issue 32) of non-contiguous inputs: a slice of a preallocated cache
(buf[:, :, :n]), x[:, :n] of a wider buffer, a transposed tensor whose sizes change.

Their sizes become symbolic like a contiguous input's; the strides are expressions of
the sizes where the example is dense inside the next dim, else the example's literal
strides (a gap), and the entry's guards check that a call's input has that layout
(cdy_strides_follow).  Each sweep compiles at most twice; results equal eager's, values
and strides, views of the input alias it as eager's do."""
import re

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from cdynamo import _C
from conftest import assert_same


def compiles():
    return cdynamo.stats()["frames_compiled"]


def _check(e, c, arg):
    """Outputs c equal eager's e: values, sizes, strides, and aliasing of arg."""
    es, cs = (e, c) if isinstance(e, tuple) else ((e,), (c,))
    assert_same(e, c)
    for a, b in zip(es, cs):
        assert a.stride() == b.stride(), (a.stride(), b.stride())
        sa = a.untyped_storage().data_ptr() == arg.untyped_storage().data_ptr()
        sb = b.untyped_storage().data_ptr() == arg.untyped_storage().data_ptr()
        assert sa == sb
        assert not sa or a.data_ptr() == b.data_ptr()


def sweep(fn, make, sizes, **opts):
    """optimize(fn, **opts) over make(n) for n in sizes, each call against eager: the
    number of compiles."""
    cdynamo.reset()
    of = cdynamo.optimize(fn, **opts)
    before = compiles()
    for n in sizes:
        args = make(n)
        _check(fn(*args), of(*args), args[0])
    return compiles() - before


BUF = torch.randn(2, 4, 128, 16)       # (B, H, max_len, D): a preallocated KV cache
WIDE = torch.randn(3, 512)


def attend(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2) * 0.25, -1) @ v


@pytest.mark.parametrize("name,fn,make", [
    ("cache_pointwise", lambda k: (k * 2.0 + 1).sum(-1), lambda n: (BUF[:, :, :n],)),
    ("cache_attention", lambda k, q: attend(q, k, k),
     lambda n: (BUF[:, :, :n], torch.randn(2, 4, 1, 16))),
    ("cache_batch1", lambda k, q: torch.softmax(q @ k.transpose(-1, -2), -1),
     lambda n: (torch.randn(1, 4, 128, 16)[:, :, :n], torch.randn(1, 4, 1, 16))),
    ("columns", lambda x: torch.relu(x) + x.exp(), lambda n: (WIDE[:, :n],)),
    ("columns_reduce", lambda x: (x.sum(1), x.amax(0), x.mean(-1)), lambda n: (WIDE[:, :n],)),
    ("columns_softmax", lambda x: x.softmax(-1), lambda n: (WIDE[:, :n],)),
    ("columns_clone", lambda x: x.clone(), lambda n: (WIDE[:, :n],)),
    ("columns_at_offset", lambda x: x * 3, lambda n: (WIDE[1:, 7:7 + n],)),
    ("columns_step", lambda x: x + 1, lambda n: (WIDE[:, :2 * n:2],)),
    ("broadcast", lambda x, y: x * y + y.t().sum(), lambda n: (WIDE[:, :n], torch.randn(1, n))),
    ("transposed", lambda x: x * 2 + x.sin(), lambda n: (torch.randn(n, 16).t(),)),
    ("transposed_rows", lambda x: x * 2 + x.sin(), lambda n: (torch.randn(16, n).t(),)),
    ("permuted_3d", lambda x: x.relu() * 2, lambda n: (torch.randn(n, 3, 5).permute(2, 0, 1),)),
    ("views", lambda x: (x[:, 1:], x.t(), x, x[1], x.reshape(-1)), lambda n: (WIDE[:, :n],)),
    ("flatten", lambda x: x.flatten(0, 1) + 1, lambda n: (BUF[:, :, :n],)),
    ("layer_norm", lambda x: F.layer_norm(x, (16,)), lambda n: (BUF[:, :, :n],)),
    ("cat", lambda x: torch.cat([x, x * 2], 2), lambda n: (BUF[:, :, :n],)),
])
def test_growing_non_contiguous_input_compiles_twice(name, fn, make):
    # "views" from 3: at 2, x[:, 1:] has a size 1 (a contiguous input compiles 3 times too)
    assert sweep(fn, make, range(3 if name == "views" else 1, 65)) <= 2


def test_dynamic_true_and_mark_dynamic():
    assert sweep(lambda x: x.softmax(-1), lambda n: (WIDE[:, :n],), range(2, 65),
                 dynamic=True) == 1

    def marked(n):
        x = WIDE[:, :n]
        torch._dynamo.mark_dynamic(x, 1)
        return (x,)
    assert sweep(lambda x: x * 2 - 1, marked, range(2, 40)) == 1


def test_gap_closing_is_another_entry():
    """buf[:, :n] with n the buffer's width is contiguous: the entry's guard (a gap
    stays a gap) refuses it, and it compiles on its own; the sliced sizes after it
    stay on the symbolic entry."""
    assert sweep(lambda x: x * 2, lambda n: (WIDE[:, :n],), [3, 4, 5, 512, 6, 511]) == 3


def test_the_log_names_the_dynamic_dim(capfd):
    cdynamo.reset()
    of = cdynamo.optimize(lambda k: k * 2.0)
    capfd.readouterr()
    _C.set_log_topics({"dynamic"})
    try:
        for n in (3, 4, 5):
            of(BUF[:, :, :n])
    finally:
        _C.set_log_topics(set())
    err = capfd.readouterr().err
    assert "dimension 2 of 'k' became dynamic: 3 -> 4" in err, err
    assert re.search(r"s0 = dim 2 of 'k' is symbolic", err), err


def test_mutated_slice_still_matches_eager():
    def f(x):
        x.add_(1)
        return x * 2
    cdynamo.reset()
    of = cdynamo.optimize(f)
    for n in range(2, 12):
        a, b = WIDE.clone(), WIDE.clone()
        assert_same(f(a[:, :n]), of(b[:, :n]))
        assert_same(a, b)


@pytest.fixture
def dyn():
    _C._dyn_test(True)
    yield
    _C._dyn_test(False)


def test_graph_refuses_another_layout(dyn):
    """The graph itself (called directly) checks each call's layout: a slice of another
    width, a contiguous tensor and an overlapping one are refused, never run."""
    def f(x):
        return x * 2 + 1
    big = torch.randn(600, 700)
    x = big[:7, :9]
    cdynamo.optimize(f)(x)
    g = cdynamo._support.compiles[-1]["compiled"]
    assert g.symbols
    for m, n in [(2, 2), (5, 300), (300, 257), (600, 699)]:   # 300 x 257: parallel loops
        x = big[:m, :n]
        assert_same(g(x), f(x))
    for bad in (torch.randn(5, 6), torch.randn(5, 800)[:, :6], torch.randn(6).expand(5, 6)):
        with pytest.raises(RuntimeError, match="symbolic sizes do not cover"):
            g(bad)
