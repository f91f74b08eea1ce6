"""Differential tests of the lowered reductions (sum, mean, amax, amin, prod)
against eager PyTorch: dims (last, first, middle, tuples, None), keepdim,
dtypes, non-contiguous and channels_last inputs, NaN, empty reductions, a
fused pointwise prologue, and softmax / layer norm written by hand."""
import pytest
import torch

import cdynamo
from conftest import assert_same

FLOAT_TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-9, atol=1e-12)}
DIMS = [-1, 0, 1, (0, 2), (2, 0), [1, 2], None]
OPS = ["sum", "mean", "amax", "amin", "prod"]


def make(dtype, shape=(3, 5, 7), seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.3
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 2).to(dtype)
    lo = 0 if dtype == torch.uint8 else -5
    return torch.randint(lo, 6, shape, generator=g, dtype=dtype)


def graph():
    return cdynamo._support.compiles[-1]["graph"] if cdynamo._support.compiles else ""


def compare(expected, actual):
    assert actual.dtype == expected.dtype, (expected.dtype, actual.dtype)
    assert actual.shape == expected.shape, (expected.shape, actual.shape)
    if expected.dtype.is_floating_point:
        torch.testing.assert_close(actual, expected, equal_nan=True, **FLOAT_TOL[expected.dtype])
    else:
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def run(fn, *args, lowered=None):
    """fn compiled equals fn eager (or raises the same); returns the graph text.
    lowered: an op name that must be a graph node, with no extern."""
    try:
        expected = fn(*args)
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            cdynamo.optimize(fn)(*args)
        return None
    opt = cdynamo.optimize(fn)
    for _ in range(2):
        out = opt(*args)
        if isinstance(expected, tuple):
            for e, a in zip(expected, out):
                compare(e, a)
        else:
            compare(expected, out)
    g = graph()
    if lowered:
        assert f"= {lowered}(" in g, g
        assert "extern" not in g, g
    return g


def lam(src):
    """A function from source text (no closures: its constants are literals)."""
    return eval(src, {"torch": torch})  # noqa: S307 - test code


def allowed(op, dim):
    """prod takes one int dim; amax/amin take no None."""
    if op == "prod":
        return isinstance(dim, int)
    return True


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_dims_keepdim(op, dim, keepdim):
    x = make(torch.float32)
    if dim is None:
        f = lam(f"lambda x: torch.{op}(x, dim=None, keepdim={keepdim}) * 2")
    else:
        f = lam(f"lambda x: x.{op}({dim!r}, {keepdim}) * 2")
    run(f, x, lowered=op if allowed(op, dim) and not (dim is None and op in ("amax", "amin")) else None)


@pytest.mark.parametrize("op", OPS)
def test_all_dims(op):
    x = make(torch.float64, (4, 6))

    run(lam(f"lambda x: x.{op}() + 1"), x, lowered=op)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32,
                                   torch.uint8, torch.int8, torch.bool])
@pytest.mark.parametrize("dim", [-1, 0])
def test_dtypes(op, dtype, dim):
    x = make(dtype, (6, 9), seed=3)

    f = lam(f"lambda x: x.{op}(dim={dim})")
    lowered = op if (op != "mean" or dtype.is_floating_point) else None
    run(f, x, lowered=lowered)


def test_int_sum_wraps():
    x = torch.full((4, 3), 2**62, dtype=torch.int64)
    run(lambda x: x.sum(0), x, lowered="sum")
    run(lambda x: x.prod(0), torch.full((70, 2), 3, dtype=torch.int64), lowered="prod")


@pytest.mark.parametrize("op", OPS)
def test_noncontiguous(op):
    x = make(torch.float32, (6, 8, 10))
    xt = x.transpose(0, 2)                 # strides (1, 10, 80)
    xs = x[:, ::2, 1::3]
    for inp in (xt, xs):
        for dim in (-1, 0, 1):
            run(lam(f"lambda t: t.{op}({dim}, True)"), inp, lowered=op)
            run(lam(f"lambda t: torch.{op}(t, {dim})"), inp, lowered=op)


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
def test_channels_last(op):
    x = make(torch.float32, (2, 3, 5, 4)).to(memory_format=torch.channels_last)
    for dim in (1, (2, 3), -1, (0, 1, 2, 3)):
        for keepdim in (False, True):
            run(lam(f"lambda t: t.{op}({dim!r}, keepdim={keepdim}) + 1"), x, lowered=op)


@pytest.mark.parametrize("op", ["amax", "amin"])
def test_nan(op):
    x = make(torch.float32, (4, 6))
    x[1, 3] = float("nan")
    x[2, 0] = float("inf")
    x[3, :] = float("-inf")
    for dim in (-1, 0):
        run(lam(f"lambda t: t.{op}({dim})"), x, lowered=op)
    run(lam(f"lambda t: t.{op}((0, 1))"), x, lowered=op)
    y = make(torch.float64, (4, 6))
    y[0, 0] = float("nan")
    run(lam(f"lambda t: t.{op}(-1)"), y, lowered=op)


def test_nan_sum():
    x = make(torch.float32, (4, 6))
    x[1, 3] = float("nan")
    x[2, 0] = float("inf")
    run(lambda t: t.sum(-1), x, lowered="sum")
    run(lambda t: t.mean(0), x, lowered="mean")


def test_empty():
    x = torch.randn(3, 0)
    run(lambda t: t.sum(-1) + 1, x, lowered="sum")
    run(lambda t: t.prod(-1) + 1, x, lowered="prod")
    run(lambda t: t.mean(-1) + 1, x, lowered="mean")
    run(lambda t: t.sum(0) + 1, x, lowered="sum")
    run(lambda t: t.amax(0) + 1, x, lowered="amax")
    run(lambda t: t.amax(-1), x)          # eager raises


def test_zero_dim():
    x = torch.tensor(3.5)
    for op in ("sum", "mean", "amax", "amin"):
        run(lam(f"lambda t: t.{op}() * 2"), x, lowered=op)
        run(lam(f"lambda t: t.{op}(0) * 2"), x, lowered=op)


def test_extern_cases():
    x = make(torch.float32, (4, 6))
    g = run(lambda t: t.sum(-1, dtype=torch.float64), x)
    assert "extern" in g, g
    g = run(lambda t: torch.max(t, t.flip(0)) + 1, x)     # elementwise max: maximum, fused
    assert "= maximum(" in g and "extern" not in g, g
    xn = x.clone()
    xn[1, 2] = float("nan")
    run(lambda t: torch.min(t, t.flip(1)) * 2, xn)          # NaN propagates as eager's
    run(lambda t: t.mean(-1), make(torch.int64, (4, 6)))   # eager raises


def test_large_parallel():
    x = torch.randn(4096, 1024)
    run(lambda t: t.sum(-1), x, lowered="sum")
    run(lambda t: t.sum(), x, lowered="sum")
    run(lambda t: t.amax(0), x, lowered="amax")
    run(lambda t: t.mean((0, 1)), torch.randn(1000, 1000), lowered="mean")
    xd = torch.randn(512, 2048, dtype=torch.float64)
    run(lambda t: t.sum(-1), xd, lowered="sum")
    run(lambda t: t.sum(), xd, lowered="sum")


def test_fused_prologue():
    x = make(torch.float32, (64, 256))
    y = make(torch.float32, (64, 256), seed=1)
    g = run(lambda a, b: (a * b + 1).sum(-1), x, y, lowered="sum")
    assert "= mul(" in g and "= add(" in g
    src = cdynamo._support.compiles[-1]["source"]
    assert src.count("void kernel_") == 1, src
    kern = src[src.index("void kernel_"):]
    assert "in_ptr0" in kern and "in_ptr1" in kern and "x0 * x1" in kern, kern


def test_broadcast_prologue():
    x = make(torch.float32, (5, 7))
    b = make(torch.float32, (7,), seed=2)
    run(lambda a, c: (a - c).abs().amax(0), x, b, lowered="amax")
    run(lambda a, c: ((a + c) * (a > 0)).sum((0, 1), keepdim=True), x, b, lowered="sum")


def test_chained_reductions():
    x = make(torch.float32, (4, 5, 6))
    run(lambda t: t.sum(-1).amax(-1) + t.mean(), x, lowered="sum")


def test_hand_softmax():
    x = torch.randn(8, 128, 128)

    def sm(x):
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)

    out = cdynamo.optimize(sm)(x)
    torch.testing.assert_close(out, torch.softmax(x, -1), rtol=0, atol=1e-6)
    g = graph()
    assert "= amax(" in g and "= sum(" in g and "extern" not in g, g


def test_hand_layer_norm():
    x = torch.randn(16, 64, 256)
    w = torch.randn(256)
    b = torch.randn(256)

    def ln(x, w, b):
        m = x.mean(-1, keepdim=True)
        c = x - m
        v = (c * c).mean(-1, keepdim=True)
        return c / torch.sqrt(v + 1e-5) * w + b

    out = cdynamo.optimize(ln)(x, w, b)
    ref = torch.nn.functional.layer_norm(x, (256,), w, b, eps=1e-5)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    g = graph()
    assert "= mean(" in g and "extern" not in g, g


# ---- result meta computed in C (trace/meta.c, cdy_meta_reduce) ----------------

LAYOUTS = {
    "contiguous": lambda t: t,
    "channels_last": lambda t: t.to(memory_format=torch.channels_last),
    "permuted": lambda t: t.permute(3, 1, 0, 2).contiguous().permute(2, 1, 3, 0),
    "transposed": lambda t: t.permute(3, 2, 1, 0).contiguous().permute(3, 2, 1, 0),
    "sliced": lambda t: torch.cat([t, t], -1)[..., ::2],
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduction_result_strides_as_eager(layout, op, keepdim):
    """sum / mean / amax / amin results get their meta from C rules: sizes,
    dtype and strides (contiguous, whatever the input's layout) as eager's,
    for every dims spelling, a fused prologue and integer sums (int64)."""
    x = LAYOUTS[layout](make(torch.float32, (2, 3, 4, 5)))
    for dim in [1, -1, (0, 2), (1, 2, 3), (3, 0), None]:
        if dim is None and op in ("amax", "amin"):
            dim = (0, 1, 2, 3)
        fn = lambda t, d=dim: getattr(t * 2 + 1, op)(dim=d, keepdim=keepdim)  # noqa: E731
        cdynamo.reset()
        out, expected = cdynamo.optimize(fn)(x), fn(x)
        compare(expected, out)
        assert out.stride() == expected.stride(), (dim, out.stride(), expected.stride())
        assert f"= {op}(" in graph() and "extern" not in graph(), graph()
    if op == "sum":
        for dt in (torch.int32, torch.uint8, torch.bool):
            xi = LAYOUTS[layout](make(dt, (2, 3, 4, 5)))
            out = cdynamo.optimize(lambda t: t.sum((1, 3), keepdim=keepdim))(xi)
            compare(xi.sum((1, 3), keepdim=keepdim), out)
            assert out.dtype == torch.int64


def test_reduction_trace_needs_no_torch_meta():
    """Tracing a function of sums, means, amax and amin runs no torch meta
    function (sympy is not imported)."""
    from conftest import assert_traces_without_torch_meta
    assert_traces_without_torch_meta("""
        def f(x):
            return (x * 2).sum(-1) + x.mean((0, 1), keepdim=True).amax(-1, keepdim=True) - x.amin(1).sum()
        x = torch.randn(4, 5, 6)
        compiled, eager = lambda: cdynamo.optimize(f)(x), lambda: f(x)
        """)


def test_float32_prod_in_order_overflows_as_eager():
    """device fuzz dtypes_wrong_7978366328: a float32 prod along an outer dim (eager
    multiplies in order, in float32) accumulated in double: 3.4e38 * 4.2 * 1e-40 gave 0.14
    where eager gives inf, and 3.4e38 * 3.8 * -0.0 gave -0.0 where eager gives NaN."""
    col = torch.tensor([[3.4e38, 3.4e38, -1.5], [4.2, 3.76, 2.0], [1e-40, -0.0, 0.5]])
    x = col.repeat_interleave(8, dim=1)   # (3, 24): the reduced dim is the outer one
    got = cdynamo.optimize(lambda t: t.prod(0))(x)
    torch.testing.assert_close(got, x.prod(0), equal_nan=True)
    assert torch.isinf(got[0]) and torch.isnan(got[8])
    short = col.t().contiguous()           # rows of 3: eager's scalar loop, in order
    torch.testing.assert_close(cdynamo.optimize(lambda t: t.prod(-1))(short), short.prod(-1),
                               equal_nan=True)
