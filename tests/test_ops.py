"""Differential tests of the lowered pointwise ops against eager PyTorch:
every op over dtypes, broadcasting, Python scalars, non-contiguous inputs and
NaN/inf edge values; where eager raises, cdynamo raises the same type; and a
check per op that it was lowered (a graph node named after it), not extern."""
import math

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import assert_same

EDGE = [0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 1.5, -2.5, 2.5, 88.7, -88.7, 100.0, -100.0,
        float("inf"), float("-inf"), float("nan"), 3.0, -3.0, 7.0, -7.0]
DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool]


def make(dtype, n=64, seed=0, edge=True, lo=-10, hi=10):
    """A 1-D tensor of dtype with random values (and edge values for floats)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) > 0.5
    if dtype.is_floating_point:
        x = torch.randn(n, generator=g, dtype=torch.float64) * 4
        if edge:
            x[:len(EDGE)] = torch.tensor(EDGE, dtype=torch.float64)
        return x.to(dtype)
    if dtype == torch.uint8:
        lo = 0
    return torch.randint(lo, hi, (n,), generator=g, dtype=dtype)


def run_both(fn, *args, transcendental=True):
    """Run fn eagerly and compiled: the same result, or the same exception type.
    Returns the compiled graph text (None when eager raised)."""
    try:
        expected = fn(*args)
    except Exception as e:  # noqa: BLE001 - any eager error must be mirrored
        with pytest.raises(type(e)):
            cdynamo.optimize(fn)(*args)
        return None
    opt = cdynamo.optimize(fn)
    for _ in range(2):
        assert_same(expected, opt(*args), transcendental)
    return cdynamo._support.compiles[-1]["graph"] if cdynamo._support.compiles else ""


def assert_lowered(graph, name):
    """The graph has a node `= name(` and no extern node."""
    assert graph is not None
    assert f"= {name}(" in graph, graph
    assert "extern" not in graph, graph


def close64(expected, actual):
    torch.testing.assert_close(actual, expected, rtol=1e-7, atol=1e-12, equal_nan=True)


# ---- unary ops ---------------------------------------------------------------

UNARY = {
    "sign": torch.sign, "expm1": torch.expm1, "log1p": torch.log1p, "log2": torch.log2,
    "log10": torch.log10, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "erf": torch.erf,
    "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc,
    "relu6": F.relu6, "silu": F.silu, "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid,
    "mish": F.mish, "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not,
    "isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite,
    "exp": torch.exp, "log": torch.log, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
}
# (op, dtype) pairs where the op stays extern on purpose (eager raises there)
NOT_LOWERED = {("floor", torch.bool), ("ceil", torch.bool), ("round", torch.bool),
               ("trunc", torch.bool), ("bitwise_not", torch.float32),
               ("bitwise_not", torch.float64)}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, dtype):
    op = UNARY[name]
    x = make(dtype)
    graph = run_both(lambda x: op(x), x)
    if graph is not None and (name, dtype) not in NOT_LOWERED:
        assert_lowered(graph, name)


@pytest.mark.parametrize("name", ["sin", "round", "floor", "sign", "isinf", "silu"])
def test_unary_noncontiguous(name):
    x = make(torch.float32, 96).reshape(8, 12).t()[::2]
    assert_lowered(run_both(lambda x: UNARY[name](x) + 1, x), name)


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "erf", "expm1", "log1p",
                                  "sin", "silu", "mish"])
def test_unary_float64_precision(name):
    x = make(torch.float64, 256, seed=3)
    y = cdynamo.optimize(lambda x: UNARY[name](x))(x)
    close64(UNARY[name](x), y)


def test_round_half_to_even():
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 1e30, -0.0])
    assert_lowered(run_both(lambda x: torch.round(x), x, transcendental=False), "round")


def test_round_decimals_stays_extern():
    x = make(torch.float32)
    run_both(lambda x: torch.round(x, decimals=2), x)
    assert "extern" in cdynamo._support.compiles[-1]["graph"]


# ---- vectorized float32 math: accuracy over the whole range -------------------

@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "erf"])
def test_vector_math_accuracy(name):
    g = torch.Generator().manual_seed(7)
    bits = torch.randint(-2**31, 2**31 - 1, (1 << 18,), generator=g, dtype=torch.int64)
    rnd = bits.to(torch.int32).view(torch.float32)
    dense = torch.linspace(-120, 120, 1 << 16)
    edge = torch.tensor(EDGE + [88.72, -87.3, -103.9, -104.5, 1e-45, 3.92, 0.625, 1.0])
    x = torch.cat([rnd, dense, edge])
    y = cdynamo.optimize(lambda x: UNARY[name](x))(x)
    e = UNARY[name](x)
    torch.testing.assert_close(y, e, rtol=1e-5, atol=1e-6, equal_nan=True)
    # specials exactly as eager: inf/nan/overflow/underflow
    special = ~torch.isfinite(e) | (e == 0) | (e.abs() == 1)
    assert torch.equal(torch.isnan(y[special]), torch.isnan(e[special]))
    ok = ~torch.isnan(e[special])
    assert torch.equal(y[special][ok], e[special][ok])


def test_tanh_just_below_one_is_not_rounded_to_one():
    # e / (e + 2) with e = expm1(2|x|): e + 2 drops the 2 once e passes 2^25 (|x| > 8.66),
    # which made tanh(9) exactly 1 (log(tanh(9)) 0, sqrt of it 0, where eager has -6e-8
    # and NaN); the values up to |x| = 9.0109 round to 1 - 2^-24 as eager's and float64's
    x = torch.tensor([8.0, 8.5, 8.6, 8.7, 8.9, 9.0, -9.0, 9.005, 9.02, 9.5, 20.0, -20.0])
    y = cdynamo.optimize(lambda t: torch.tanh(t))(x)
    assert torch.equal(y, torch.tanh(x))
    assert torch.equal(y, torch.tanh(x.double()).float())
    f = lambda t: torch.tanh(t).log().sqrt()
    assert_same(f(x), cdynamo.optimize(f)(x), transcendental=True)


def test_gelu_float32_accuracy():
    """float32 exact GELU over random bit patterns and a dense grid: within
    4.5e-7 of float64 (the rational fit: 3.7e-7; eager: 1.2e-6), as
    eager within 2e-6, and eager's infinities, NaNs and signed zeros."""
    g = torch.Generator().manual_seed(11)
    bits = torch.randint(-2**31, 2**31 - 1, (1 << 18,), generator=g, dtype=torch.int64)
    x = torch.cat([bits.to(torch.int32).view(torch.float32), torch.linspace(-14, 14, 1 << 18),
                   torch.tensor(EDGE + [1e-45, -1e-45, 13.2, -13.2, 3e38, -3e38])])
    y = cdynamo.optimize(lambda x: F.gelu(x))(x)
    e = F.gelu(x)
    torch.testing.assert_close(y, e, rtol=1.3e-6, atol=2e-6, equal_nan=True)
    fin = torch.isfinite(x) & (x < 2.0 ** 127)    # from 2^127 eager's AVX-512 kernel overflows
    xd = x[fin].double()
    exact = xd * 0.5 * torch.special.erfc(-xd * 0.5 ** 0.5)
    assert (y[fin].double() - exact).abs().max().item() < 4.5e-7
    assert torch.equal(torch.isnan(y), torch.isnan(e))
    z = x == 0
    assert torch.equal(torch.signbit(y[z]), torch.signbit(e[z]))


# ---- binary ops -----------------------------------------------------------------

BINARY = {
    "floor_divide": lambda a, b: a // b, "remainder": lambda a, b: a % b,
    "fmod": torch.fmod, "pow": lambda a, b: a ** b,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor, "bitwise_and": lambda a, b: a & b,
    "bitwise_or": lambda a, b: a | b, "bitwise_xor": lambda a, b: a ^ b,
}
# integer division with a tensor divisor stays extern (a zero would raise in eager)
TENSOR_DIVISOR_EXTERN = {"floor_divide", "remainder", "fmod"}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_tensor_tensor(name, dtype):
    op = BINARY[name]
    a, b = make(dtype, seed=1), make(dtype, seed=2)
    if name == "pow" and not dtype.is_floating_point and dtype != torch.bool:
        b = b.abs() % 5
    if name in TENSOR_DIVISOR_EXTERN and not dtype.is_floating_point:
        b = torch.where(b == 0, torch.ones_like(b), b)
    graph = run_both(lambda a, b: op(a, b), a, b)
    lowered = dtype.is_floating_point or name not in TENSOR_DIVISOR_EXTERN
    lowered &= not (name.startswith("bitwise") and dtype.is_floating_point)
    lowered &= not (name == "pow" and dtype == torch.bool)
    if graph is not None and lowered:
        assert_lowered(graph, name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32,
                                   torch.uint8], ids=str)
@pytest.mark.parametrize("name", ["floor_divide", "remainder", "fmod"])
@pytest.mark.parametrize("scalar", [3, -3, 1, -1, 2.5, -0.75])
def test_division_by_scalar(name, dtype, scalar):
    op = BINARY[name]
    a = make(dtype, 128, lo=-100, hi=100)
    if dtype == torch.int64:
        a[0] = -2**63
    assert_lowered(run_both(lambda a: op(a, scalar), a, transcendental=False), name)


@pytest.mark.parametrize("name", ["floor_divide", "remainder", "fmod"])
def test_integer_division_by_zero_raises(name):
    a = make(torch.int64)
    run_both(lambda a: BINARY[name](a, 0), a)
    run_both(lambda a, b: BINARY[name](a, b), a, torch.zeros_like(a))


@pytest.mark.parametrize("name", ["floor_divide", "remainder", "fmod"])
def test_float_division_edges(name):
    vals = torch.tensor([0.0, -0.0, 1.0, -1.0, 5.5, -5.5, float("inf"), float("-inf"),
                         float("nan"), 1e-30, 7.0, -7.0], dtype=torch.float64)
    a = vals.repeat_interleave(len(vals))
    b = vals.repeat(len(vals))
    op = BINARY[name]
    for dt in (torch.float32, torch.float64):
        assert_lowered(run_both(lambda a, b: op(a, b), a.to(dt), b.to(dt),
                                transcendental=False), name)


def test_floor_divide_spellings():
    a, b = make(torch.float32, seed=1), make(torch.float32, seed=2)
    assert_lowered(run_both(lambda a, b: torch.floor_divide(a, b), a, b), "floor_divide")
    assert_lowered(run_both(lambda a, b: a.floor_divide(b), a, b), "floor_divide")
    assert_lowered(run_both(lambda a, b: torch.remainder(a, b), a, b), "remainder")
    # torch.div(rounding_mode=...) is exact too, but runs as an extern op for now
    run_both(lambda a, b: torch.div(a, b, rounding_mode="floor"), a, b)
    run_both(lambda a, b: torch.div(a, b, rounding_mode="trunc"), a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32,
                                   torch.uint8, torch.bool], ids=str)
@pytest.mark.parametrize("exp", [2, 3, 0, 1, -1, -2, 0.5, -0.5, 2.5, -1.5])
def test_pow_scalar(dtype, exp):
    x = make(dtype, lo=-6, hi=6)
    graph = run_both(lambda x: x ** exp, x)
    if graph is not None and not (isinstance(exp, int) and exp < 0 and not dtype.is_floating_point):
        assert_lowered(graph, "pow")


def test_pow_scalar_base_and_broadcast():
    x = make(torch.float32).reshape(8, 8)
    e = make(torch.float32, 8, seed=5, edge=False)
    assert_lowered(run_both(lambda x: 2 ** x, x), "pow")
    assert_lowered(run_both(lambda x, e: torch.pow(x, e), x, e), "pow")
    i, j = torch.arange(-4, 4).reshape(8, 1), torch.arange(8)
    assert_lowered(run_both(lambda i, j: i ** j, i, j), "pow")


@pytest.mark.parametrize("name", ["logical_and", "bitwise_and", "bitwise_xor", "logical_or"])
def test_mixed_dtype_broadcast(name):
    a = make(torch.int32, 48).reshape(6, 8)
    b = make(torch.bool, 8, seed=4)
    assert_lowered(run_both(lambda a, b: BINARY[name](a, b), a, b), name)
    if name.startswith("bitwise"):
        assert_lowered(run_both(lambda a: BINARY[name](a, 5), a), name)


# ---- activations and clamps with scalar parameters -----------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", ["leaky", "leaky_kw", "hardtanh", "hardtanh_kw", "gelu",
                                  "gelu_tanh", "softplus", "softplus_kw", "clamp", "clamp_min",
                                  "clamp_max", "clamp_none", "clip", "clamp_kw_min"])
def test_parametrized_activation(case, dtype):
    fns = {
        "leaky": (lambda x: F.leaky_relu(x), "leaky_relu"),
        "leaky_kw": (lambda x: F.leaky_relu(x, negative_slope=0.2), "leaky_relu"),
        "hardtanh": (lambda x: F.hardtanh(x), "hardtanh"),
        "hardtanh_kw": (lambda x: F.hardtanh(x, min_val=-2.0, max_val=0.5), "hardtanh"),
        "gelu": (lambda x: F.gelu(x), "gelu"),
        "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), "gelu"),
        "softplus": (lambda x: F.softplus(x), "softplus"),
        "softplus_kw": (lambda x: F.softplus(x, beta=2.0, threshold=5.0), "softplus"),
        "clamp": (lambda x: torch.clamp(x, -1.5, 2), "clamp"),
        "clamp_min": (lambda x: x.clamp_min(0.5), "clamp_min"),
        "clamp_max": (lambda x: torch.clamp_max(x, 3), "clamp_max"),
        "clamp_none": (lambda x: x.clamp(min=None, max=2), "clamp"),
        "clip": (lambda x: x.clip(-3, 3), "clamp"),
        "clamp_kw_min": (lambda x: torch.clamp(x, min=1), "clamp"),
    }
    fn, name = fns[case]
    graph = run_both(fn, make(dtype))
    if graph is not None and dtype != torch.bool and (
            dtype.is_floating_point or name.startswith(("clamp", "hardtanh"))):
        assert_lowered(graph, name)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("spelling", ["F", "method", "module", "negative_lambd"])
def test_hardshrink(spelling, dtype):
    """hardshrink (one row of ops.def): torch's, F's, the method and nn.Hardshrink are
    lowered for floats, exactly eager's (the bounds, -0.0, inf, NaN); the dtypes eager
    rejects raise as eager does."""
    fn = {"F": lambda x: F.hardshrink(x),
          "method": lambda x: x.hardshrink(lambd=2.5) * 2,
          "module": torch.nn.Hardshrink(0.5),
          "negative_lambd": lambda x: torch.hardshrink(x, -1.0)}[spelling]
    graph = run_both(fn, make(dtype), transcendental=False)
    if dtype.is_floating_point:
        assert_lowered(graph, "hardshrink")
    else:
        assert graph is None   # eager: "hardshrink_cpu" not implemented for the dtype


def test_clamp_nan_propagates():
    x = torch.tensor([float("nan"), 1.0, -5.0, 5.0, float("inf"), float("-inf")])
    assert_lowered(run_both(lambda x: torch.clamp(x, -1, 1), x, transcendental=False), "clamp")
    assert_lowered(run_both(lambda x: F.hardtanh(x), x, transcendental=False), "hardtanh")
    assert_lowered(run_both(lambda x: F.relu6(x), x, transcendental=False), "relu6")


# ---- masked_fill, casts ---------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("value", [0, -1, 2.5, float("nan"), True])
def test_masked_fill(dtype, value):
    x = make(dtype).reshape(8, 8)
    m = make(torch.bool, 8, seed=9)
    graph = run_both(lambda x, m: x.masked_fill(m, value), x, m)
    if graph is not None and (dtype.is_floating_point or isinstance(value, bool) or
                              (isinstance(value, int) and value >= 0 and dtype != torch.bool)):
        assert_lowered(graph, "masked_fill")


CASTS = {"float": (torch.float32, lambda x: x.float()),
         "double": (torch.float64, lambda x: x.double()),
         "int": (torch.int32, lambda x: x.int()), "long": (torch.int64, lambda x: x.long()),
         "bool": (torch.bool, lambda x: x.bool()), "byte": (torch.uint8, lambda x: x.byte())}


@pytest.mark.parametrize("src", DTYPES, ids=str)
@pytest.mark.parametrize("method", sorted(CASTS))
def test_cast_methods(method, src):
    dst, fn = CASTS[method]
    x = make(src, lo=-300, hi=300) if src != torch.uint8 else make(src, hi=256)
    if src.is_floating_point:
        x = x * 37      # out of range of the narrow ints too
    graph = run_both(fn, x, transcendental=False)
    if dst != src:
        assert_lowered(graph, method)


@pytest.mark.parametrize("dst", [torch.float32, torch.float64, torch.int32, torch.int64,
                                 torch.uint8, torch.int8, torch.int16, torch.bool], ids=str)
def test_to_dtype(dst):
    x = make(torch.float32) * 50
    graph = run_both(lambda x: x.to(dst), x, transcendental=False)
    if dst != torch.float32:
        assert_lowered(graph, "to")
    run_both(lambda x: x.to(dtype=dst), x, transcendental=False)


def test_to_same_dtype_is_the_same_object():
    x = make(torch.float32)

    def f(x):
        return x.to(torch.float32), x.float(), x * 2

    a, b, _ = cdynamo.optimize(f)(x)
    assert a is x and b is x


def test_half_stays_extern():
    x = make(torch.float32)
    run_both(lambda x: x.half().float() + 1, x, transcendental=False)


def test_noncontiguous_cast_and_broadcast():
    x = (make(torch.float64, 96) * 10).reshape(12, 8).t()
    y = make(torch.int32, 12, seed=3)
    assert_lowered(run_both(lambda x, y: x.int() // 3 + y, x, y), "int")


def test_fused_chain_is_one_kernel():
    x = make(torch.float32, 1024).reshape(32, 32)

    def f(x):
        return F.gelu(F.leaky_relu(x, 0.1).clamp(-2, 2)) * torch.isfinite(x)

    run_both(f, x)
    src = cdynamo._support.compiles[-1]["source"]
    assert src.count("CDY_EXPORT void kernel_") == 1
