"""Differential tests of factories, tril / triu and as_strided against eager PyTorch.

Factories (zeros / ones / full / empty, their *_like and Tensor.new_* forms,
arange) are FILL / IOTA nodes of the loop IR: a factory read only by kernels is a
constant expression inside them (no buffer, no torch call); a returned one is a
kernel writing the buffer with eager's dtype and strides.  tril / triu are
where(col - row <= k, x, 0) over two index operands, fused with producers and
consumers.  as_strided is a VIEW node.  Kernel / extern counts check the fusion."""
import pytest
import torch

import cdynamo
from conftest import assert_same, make_tensor
from test_views import last, n_externs, n_kernels

DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8, torch.bool]


def make(dtype, shape=(2, 5, 7), seed=0):
    return make_tensor(dtype, shape, seed, high=100)



def run(fn, *args, backend="c"):
    """fn compiled equals fn eager (values, dtype, shape, strides) on two calls."""
    expected = fn(*args)
    opt = cdynamo.optimize(fn, backend=backend)
    for _ in range(2):
        assert_same(expected, opt(*args))
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["fallbacks"] == 0, st


def run_meta(fn, *args):
    """For uninitialized results (empty): same shape, dtype, strides as eager."""
    expected = fn(*args)
    actual = cdynamo.optimize(fn)(*args)
    for e, a in zip(expected, actual):
        assert (a.shape, a.dtype, a.stride()) == (e.shape, e.dtype, e.stride())
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["fallbacks"] == 0, st


# ---- tril / triu ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("k", [-2, 0, 1, 4])
@pytest.mark.parametrize("tri", ["tril", "triu"])
def test_tri_dtypes_k(dtype, k, tri):
    x = make(dtype)
    run(lambda t: getattr(torch, tri)(t, k), x)
    assert n_externs() == 0 and n_kernels() == 1


@pytest.mark.parametrize("shape", [(5, 7), (7, 5), (2, 3, 4, 6), (0, 3), (3, 0), (1, 1),
                                   (4, 1), (1, 6), (2, 0, 3)])
@pytest.mark.parametrize("k", [-9, -1, 2, 9])
def test_tri_shapes(shape, k):
    x = make(torch.float32, shape)
    run(lambda t: (torch.tril(t, k), torch.triu(t, diagonal=k)), x)
    assert n_externs() == 0


def test_tri_methods_and_layouts():
    x = make(torch.float32, (2, 3, 6, 5))
    for t in (x, x.transpose(-1, -2), x.contiguous(memory_format=torch.channels_last),
              x[:, 1:, ::2, 1:]):
        run(lambda u: (u.tril(), u.triu(1), u.tril(diagonal=-1)), t)
        assert n_externs() == 0


def test_tril_fused_one_kernel():
    x = make(torch.float32, (6, 6))
    run(lambda t: torch.tril(t * 2) + 1, x)
    assert n_externs() == 0 and n_kernels() == 1
    y = make(torch.float32, (3, 6, 6), seed=1)
    run(lambda t, u: torch.relu(torch.triu(t - u, -1)) * u, x, y)
    assert n_externs() == 0 and n_kernels() == 1


def test_causal_mask_one_kernel_no_input():
    def mask(x):
        T = x.shape[-1]
        return torch.triu(torch.full((T, T), float("-inf")), 1)

    run(mask, make(torch.float32, (4, 8)))
    assert n_externs() == 0 and n_kernels() == 1
    sig = [l for l in last()["source"].splitlines() if "void kernel_0(" in l][0]
    assert "in_ptr" not in sig and sig.count("out_ptr") == 1


def test_causal_mask_into_softmax():
    def attn(s):
        T = s.shape[-1]
        m = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        return torch.softmax(s + m, dim=-1)

    run(attn, make(torch.float32, (2, 8, 8)))
    assert n_externs() == 0


def test_tri_eager_backend():
    x = make(torch.float64, (5, 5))
    run(lambda t: torch.tril(t, 1) + torch.arange(5), x, backend="eager")


# ---- arange ------------------------------------------------------------------------

ARANGES = {
    "end": lambda: torch.arange(10),
    "start_end": lambda: torch.arange(2, 11),
    "step": lambda: torch.arange(1, 20, 3),
    "neg_step": lambda: torch.arange(10, 0, -1),
    "neg_step_ragged": lambda: torch.arange(10, -3, -4),
    "float_step": lambda: torch.arange(0, 1, 0.25),
    "float_start": lambda: torch.arange(-3.5, 4, 0.5, dtype=torch.float64),
    "float_end": lambda: torch.arange(1.0, 2.5),
    "f32": lambda: torch.arange(5, dtype=torch.float32),
    "u8": lambda: torch.arange(10, dtype=torch.uint8),
    "i32": lambda: torch.arange(-5, 5, dtype=torch.int32),
    "i32_step": lambda: torch.arange(-5, 50, 7, dtype=torch.int32),
    "f64_neg": lambda: torch.arange(3, -3, -0.75, dtype=torch.float64),
    "kw": lambda: torch.arange(start=2, end=9, step=2),
    "empty": lambda: torch.arange(0),
    "empty2": lambda: torch.arange(5, 5),
    "one": lambda: torch.arange(1),
    "big_f32": lambda: torch.arange(100000, dtype=torch.float32),
    "device": lambda: torch.arange(4, device="cpu", requires_grad=False),
}


@pytest.mark.parametrize("how", list(ARANGES))
def test_arange(how):
    fn = ARANGES[how]
    run(lambda x: (fn(), x + 1), torch.ones(3))
    assert n_externs() == 0


@pytest.mark.parametrize("args", [(0, 1, 0.1), (0.1, 2.0, 0.3), (1e8, 1e8 + 64, 1.0)])
def test_arange_inexact_stays_extern(args):
    """Values that are not exact in float32 fall back to torch (ATen's scalar and
    vector paths round them differently): still equal to eager, bit for bit."""
    run(lambda x: torch.arange(*args) + x, torch.zeros(1))
    assert n_externs() == 1
    expected = torch.arange(*args)
    actual = cdynamo.optimize(lambda: torch.arange(*args) * 1)()
    assert torch.equal(actual, expected)


def test_arange_in_expression_one_kernel():
    x = make(torch.float32, (4, 9))
    run(lambda t: t + torch.arange(t.shape[-1]), x)
    assert n_externs() == 0 and n_kernels() == 1
    run(lambda t: t * torch.arange(0.5, 4.5, dtype=torch.float64).view(4, 1), x)
    assert n_externs() == 0
    run(lambda t: (torch.arange(36) % 7).view(4, 9) == t.to(torch.int64), x)
    assert n_externs() == 0


def test_arange_reduced():
    run(lambda x: (torch.arange(12, dtype=torch.float32) * x).sum(), torch.randn(12))
    assert n_externs() == 0
    run(lambda x: torch.cat([x, torch.arange(3, dtype=torch.float32)]), torch.randn(5))
    assert n_externs() == 0


# ---- zeros / ones / full / empty -----------------------------------------------------

SIZES = {
    "ints": lambda x, f, *a, **k: f(3, 4, *a, **k),
    "tuple": lambda x, f, *a, **k: f((3, 4), *a, **k),
    "list": lambda x, f, *a, **k: f([2, 3, 4], *a, **k),
    "size": lambda x, f, *a, **k: f(x.shape, *a, **k),
    "scalar": lambda x, f, *a, **k: f((), *a, **k),
    "empty": lambda x, f, *a, **k: f((0, 3), *a, **k),
    "one": lambda x, f, *a, **k: f((1,), *a, **k),
}


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("dtype", DTYPES + [None], ids=str)
def test_zeros_ones(size, dtype):
    x = make(torch.float32, (2, 3))
    s = SIZES[size]
    run(lambda t: (s(t, torch.zeros, dtype=dtype), s(t, torch.ones, dtype=dtype)), x)
    assert n_externs() == 0


@pytest.mark.parametrize("size", ["tuple", "size", "scalar", "empty"])
@pytest.mark.parametrize("value", [0, 7, -3, 1.5, float("-inf"), float("nan"), True, False,
                                   2 ** 40])
def test_full_inferred_dtype(size, value):
    x = make(torch.float32, (2, 3))
    run(lambda t: SIZES[size](t, torch.full, value), x)
    assert n_externs() == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("value", [0, 1, 200, 2.0])
def test_full_dtype(dtype, value):
    if dtype == torch.bool and value not in (0, 1):
        value = True
    run(lambda t: torch.full((2, 5), value, dtype=dtype) + t, make(dtype, (2, 5)))
    assert n_externs() == 0


def test_full_inexact_value_stays_extern():
    run(lambda t: torch.full((3,), 2.5, dtype=torch.int32) + t, torch.ones(3, dtype=torch.int32))
    assert n_externs() == 1


def test_factories_feeding_kernels_need_no_buffer():
    x = make(torch.float32, (4, 6))

    def f(t):
        return t * torch.ones(4, 6) + torch.zeros_like(t) - torch.full((6,), 0.5)

    run(f, x)
    assert n_externs() == 0 and n_kernels() == 1
    src = last()["source"]
    sig = [l for l in src.splitlines() if "void kernel_0(" in l][0]
    assert sig.count("in_ptr") == 1 and sig.count("out_ptr") == 1


def test_factory_returned_with_eager_dtype_and_strides():
    x = make(torch.float32, (2, 3, 4, 5)).contiguous(memory_format=torch.channels_last)
    run(lambda t: (torch.zeros(2, 3), torch.ones_like(t), torch.full((3,), 1),
                   torch.full_like(t, 2, dtype=torch.float64), torch.arange(4.0)), x)
    assert n_externs() == 0


def test_empty():
    x = make(torch.float32, (2, 3, 4, 5)).contiguous(memory_format=torch.channels_last)
    run_meta(lambda t: (torch.empty(3, 4), torch.empty((2,), dtype=torch.int32),
                        torch.empty_like(t), t.new_empty((4, 2))), x)
    assert n_externs() == 0


LAYOUTS = {
    "contiguous": lambda x: x,
    "channels_last": lambda x: x.contiguous(memory_format=torch.channels_last),
    "transposed": lambda x: x.transpose(1, 3),
    "sliced": lambda x: x[:, 1:, ::2],
    "expanded": lambda x: x[:, :1].expand(2, 3, 4, 5),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_like(layout, dtype):
    x = LAYOUTS[layout](make(dtype, (2, 3, 4, 5)))
    run(lambda t: (torch.zeros_like(t), torch.ones_like(t), torch.full_like(t, 1),
                   torch.ones_like(t, dtype=torch.float64),
                   torch.zeros_like(t, memory_format=torch.contiguous_format)), x)
    assert n_externs() == 0
    run_meta(lambda t: (torch.empty_like(t),), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.uint8], ids=str)
def test_new_factories(dtype):
    x = make(dtype, (3, 4))
    run(lambda t: (t.new_zeros(2, 3), t.new_ones((4,)), t.new_full((2, 2), 5),
                   t.new_zeros((3,), dtype=torch.float64), t + t.new_ones(4)), x)
    assert n_externs() == 0


def test_unlowered_factory_arguments_stay_extern():
    run(lambda t: torch.zeros(3, requires_grad=False, device="cpu", layout=torch.strided) + t,
        torch.ones(3))
    assert n_externs() == 0
    f = cdynamo.optimize(lambda t: torch.rand(3) * 0 + t)
    assert torch.equal(f(torch.ones(3)), torch.ones(3))
    assert n_externs() == 1


# ---- as_strided -------------------------------------------------------------------


def test_as_strided():
    big = make(torch.float32, (40,))
    x = big[3:19].view(4, 4)

    def f(t):
        return (t.as_strided((2, 3), (1, 2)) * 2,
                torch.as_strided(t[1:], (3, 2), (2, 1)) + 1,
                t.t().as_strided((2, 2), (4, 1)),
                torch.as_strided(t, (2, 2), (1, 1), storage_offset=None))

    run(f, x)
    assert n_externs() == 0
    run(f, big[5:21].view(4, 4))
    run(f, make(torch.float32, (4, 4)))


def test_as_strided_storage_offset():
    """An explicit storage offset is absolute (eager reads the storage): kept extern."""
    big = make(torch.int64, (40,))
    f = lambda t: t.as_strided((2, 2), (1, 1), 2) + 1
    run(f, big[:16].view(4, 4))
    run(f, big[:16].view(4, 4) * 1)


def test_as_strided_out_of_bounds_raises():
    f = lambda t: t.as_strided((10, 10), (10, 1)) + 1
    with pytest.raises(RuntimeError):
        f(torch.randn(4, 4))
    with pytest.raises(RuntimeError):
        with pytest.warns(Warning):
            cdynamo.optimize(f)(torch.randn(4, 4))


# ---- eye, .T / .mT / .H / .mH -------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES + [None], ids=str)
def test_eye(dtype):
    run(lambda t: (torch.eye(3, dtype=dtype), torch.eye(2, 5, dtype=dtype),
                   torch.eye(4, m=3, dtype=dtype), torch.eye(0, dtype=dtype),
                   torch.eye(3, 0, dtype=dtype)), torch.ones(1))
    assert n_externs() == 0


def test_eye_fused():
    run(lambda t: t * torch.eye(6) + 1, make(torch.float32, (6, 6)))
    assert n_externs() == 0 and n_kernels() == 1


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (1, 5), (4, 1)])
def test_transpose_attrs(shape):
    x = make(torch.float32, shape)

    def f(t):
        r = [t.mT + 1, t.mH, (t * 2).mT]
        if t.ndim == 2:
            r += [t.T * 1, t.H - 1, t.T]
        return r

    run(f, x)
    assert n_externs() == 0


def test_transpose_attrs_errors_as_eager():
    for attr in ["mT", "H", "mH"]:
        with pytest.raises(RuntimeError):
            cdynamo.optimize(lambda t: getattr(t, attr) + 1)(torch.randn(3))


# ---- linspace ----------------------------------------------------------------------

LINSPACES = [(0, 1, 5), (-3, 3, 7), (2, 2, 1), (5, 9, 1), (1.5, -2.5, 9), (0, 10, 6), (0, 0, 0),
             (0, 100, 101), (0, 10, 4), (0, 1, 11)]


@pytest.mark.parametrize("args", LINSPACES, ids=str)
@pytest.mark.parametrize("dtype", [None, torch.float64, torch.int64, torch.int32], ids=str)
def test_linspace(args, dtype):
    """Exact values are lowered; others (0.1 steps, fractional integer steps) stay
    torch's, bit for bit either way."""
    f = lambda t: torch.linspace(*args, dtype=dtype) + t
    run(f, torch.zeros((), dtype=dtype or torch.float32))
    expected = torch.linspace(*args, dtype=dtype)
    actual = cdynamo.optimize(lambda: torch.linspace(*args, dtype=dtype) * 1)()
    assert torch.equal(actual, expected)
    exact = args not in [(0, 10, 4), (0, 1, 11)] and not (
        dtype in (torch.int64, torch.int32) and args in [(0, 1, 5), (1.5, -2.5, 9)])
    assert n_externs() == (0 if exact else 1)
