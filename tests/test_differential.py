"""Differential tests: cdynamo's compiled output must equal eager PyTorch's
(values, dtype, shape, strides) over ops x dtypes x layouts x scalars."""
import math

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import TRANSCENDENTAL, assert_same, check, check_raises

DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
          torch.uint8, torch.bool]

UNARY = {
    "neg": lambda x: -x,
    "abs": lambda x: torch.abs(x),
    "exp": lambda x: torch.exp(x),
    "log": lambda x: torch.log(x),
    "sqrt": lambda x: torch.sqrt(x),
    "relu": lambda x: torch.relu(x),
    "sigmoid": lambda x: torch.sigmoid(x),
    "tanh": lambda x: torch.tanh(x),
}

BINARY = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "truediv": lambda x, y: x / y,
    "maximum": lambda x, y: torch.maximum(x, y),
    "minimum": lambda x, y: torch.minimum(x, y),
    "eq": lambda x, y: x == y,
    "ne": lambda x, y: x != y,
    "lt": lambda x, y: x < y,
    "le": lambda x, y: x <= y,
    "gt": lambda x, y: x > y,
    "ge": lambda x, y: x >= y,
}


def make(shape, dtype, seed=0, positive=False):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        t = torch.randn(shape, generator=g, dtype=dtype)
        return t.abs() + 0.1 if positive else t
    lo, hi = (1, 100) if positive else (-50, 50)
    if dtype == torch.uint8:
        lo, hi = (1, 255) if positive else (0, 255)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def _eager_ok(fn, *args):
    try:
        fn(*args)
        return True
    except Exception:  # noqa: BLE001
        return False




def _unary_params():
    for op in UNARY:
        for dt in DTYPES:
            marks = []
            yield pytest.param(op, dt, marks=marks, id=f"{op}-{dt}")


@pytest.mark.parametrize("op,dtype", list(_unary_params()))
def test_unary_ops_dtypes(op, dtype):
    fn = UNARY[op]
    x = make((7, 9), dtype, positive=op in ("log", "sqrt"))
    if not _eager_ok(fn, x):
        check_raises(fn, x)
        return
    st = check(fn, x, transcendental=op in TRANSCENDENTAL)
    assert st["frames_compiled"] == 1 and st["cache_hits"] >= 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_ops_dtypes(op, dtype):
    fn = BINARY[op]
    x = make((6, 11), dtype, seed=1)
    y = make((6, 11), dtype, seed=2, positive=op == "truediv")
    if not _eager_ok(fn, x, y):
        check_raises(fn, x, y)
        return
    st = check(fn, x, y, transcendental=op in TRANSCENDENTAL)
    assert st["frames_compiled"] == 1


# --- the three spellings: operator / torch.* / method ------------------------------------

SPELLINGS = [
    ("add_fn", lambda x, y: torch.add(x, y)),
    ("add_m", lambda x, y: x.add(y)),
    ("sub_fn", lambda x, y: torch.sub(x, y)),
    ("sub_m", lambda x, y: x.sub(y)),
    ("mul_fn", lambda x, y: torch.mul(x, y)),
    ("mul_m", lambda x, y: x.mul(y)),
    ("div_fn", lambda x, y: torch.div(x, y)),
    ("div_m", lambda x, y: x.div(y)),
    ("neg_fn", lambda x, y: torch.neg(x)),
    ("neg_m", lambda x, y: x.neg()),
    ("abs_m", lambda x, y: x.abs()),
    ("exp_m", lambda x, y: x.exp()),
    ("log_m", lambda x, y: y.log()),
    ("sqrt_m", lambda x, y: y.sqrt()),
    ("relu_m", lambda x, y: x.relu()),
    ("relu_F", lambda x, y: F.relu(x)),
    ("sigmoid_m", lambda x, y: x.sigmoid()),
    ("sigmoid_F", lambda x, y: F.sigmoid(x)),
    ("tanh_m", lambda x, y: x.tanh()),
    ("tanh_F", lambda x, y: F.tanh(x)),
    ("maximum_m", lambda x, y: x.maximum(y)),
    ("minimum_m", lambda x, y: x.minimum(y)),
    ("eq_fn", lambda x, y: torch.eq(x, y)),
    ("ne_m", lambda x, y: x.ne(y)),
    ("lt_fn", lambda x, y: torch.lt(x, y)),
    ("le_m", lambda x, y: x.le(y)),
    ("gt_m", lambda x, y: x.gt(y)),
    ("ge_fn", lambda x, y: torch.ge(x, y)),
    ("where_fn", lambda x, y: torch.where(x > 0, x, y)),
    ("where_m", lambda x, y: x.where(x > y, y)),
]


@pytest.mark.parametrize("name,fn", SPELLINGS, ids=[s[0] for s in SPELLINGS])
def test_spellings(name, fn):
    x = make((5, 8), torch.float32, seed=3)
    y = make((5, 8), torch.float32, seed=4, positive=True)
    st = check(fn, x, y, transcendental=True)
    assert st["frames_compiled"] == 1
    assert st["graph_breaks"] == 0 and st["fallbacks"] == 0


def fused(x, y):
    a = torch.relu(x * y + 1.0)
    b = torch.sigmoid(a - y) / (torch.exp(-x.abs()) + 1)
    c = torch.where(a > b, torch.tanh(a), torch.maximum(b, x))
    return c * 2 - torch.sqrt(a + 1)


# --- shapes / broadcasting / layouts ------------------------------------------------------

def _layout_cases():
    r = lambda *s: make(s, torch.float32, seed=len(s) + sum(s))  # noqa: E731
    base = r(8, 12)
    big = r(6, 10)
    nchw = r(2, 3, 4, 5)
    return [
        ("0d", r(), r()),
        ("0d_with_2d", r(), r(3, 4)),
        ("1d", r(17), r(17)),
        ("2d", r(4, 5), r(4, 5)),
        ("bcast_64x1_1x1024", r(64, 1), r(1, 1024)),
        ("bcast_3x1x5_4x1", r(3, 1, 5), r(4, 1)),
        ("bcast_row", r(4, 5), r(5)),
        ("transposed", base.t(), r(12, 8)),
        ("both_transposed", base.t(), base.t()),
        ("sliced_step", big[::2, 1::3], r(3, 3)),
        ("expanded", r(1, 7).expand(5, 7), r(5, 7)),
        ("expanded_both", r(5, 1).expand(5, 7), r(1, 7).expand(5, 7)),
        ("channels_last", nchw.to(memory_format=torch.channels_last),
         r(2, 3, 4, 5).to(memory_format=torch.channels_last)),
        ("channels_last_mixed", nchw.to(memory_format=torch.channels_last), r(2, 3, 4, 5)),
        ("contig_mixed_channels_last", r(2, 3, 4, 5), nchw.to(memory_format=torch.channels_last)),
        ("permuted_3d", r(3, 4, 5).permute(2, 0, 1), r(5, 3, 4)),
        ("zero_size", r(0, 5), r(0, 5)),
        ("zero_size_bcast", r(0, 1), r(1, 6)),
        ("storage_offset", r(10, 10)[2:7, 3:9], r(5, 6)),
    ]


LAYOUTS = _layout_cases()


@pytest.mark.parametrize("name,x,y", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_layouts_fused(name, x, y):
    st = check(fused, x, y, transcendental=True)
    assert st["frames_compiled"] == 1


@pytest.mark.parametrize("name,x,y", LAYOUTS, ids=[c[0] for c in LAYOUTS])
def test_layouts_add(name, x, y):
    check(lambda a, b: a + b, x, y)


def test_channels_last_output_stride_unary():
    x = make((2, 3, 4, 5), torch.float32).to(memory_format=torch.channels_last)
    check(lambda a: torch.relu(a) * 2, x)


def test_broadcast_shape_mismatch_raises():
    e, c = check_raises(lambda a, b: a + b, torch.randn(3, 4), torch.randn(5))
    assert isinstance(c, RuntimeError)


# --- Python scalars ------------------------------------------------------------------------

SCALAR_FNS = [
    ("1-x", lambda x: 1 - x),
    ("x-1", lambda x: x - 1),
    ("2.0/x", lambda x: 2.0 / x),
    ("x/2", lambda x: x / 2),
    ("x*True", lambda x: x * True),
    ("False+x", lambda x: False + x),
    ("x+2.5", lambda x: x + 2.5),
    ("3*x", lambda x: 3 * x),
    ("x>0.5", lambda x: x > 0.5),
    ("2<=x", lambda x: 2 <= x),
    ("x==3", lambda x: x == 3),
    ("where_scalars", lambda x: torch.where(x > 1, x, 0)),
    ("where_float_scalars", lambda x: torch.where(x > 1, 1.5, -2.5)),
    ("big_int", lambda x: x * 1000000),
    ("neg_float", lambda x: x * -0.25 + x),
]


def _scalar_params():
    for name, fn in SCALAR_FNS:
        for dt in [torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8,
                   torch.bool]:
            marks = []
            yield pytest.param(name, fn, dt, marks=marks, id=f"{name}-{dt}")


@pytest.mark.parametrize("name,fn,dtype", list(_scalar_params()))
def test_python_scalars(name, fn, dtype):
    x = make((4, 6), dtype, seed=5, positive=True)
    if not _eager_ok(fn, x):
        check_raises(fn, x)
        return
    check(fn, x, transcendental=True)


@pytest.mark.parametrize("fn", [lambda x: torch.add(x, x, alpha=2),
                                lambda x: torch.maximum(x, torch.tensor(1.0))],
                         ids=["add_alpha", "tensor_ctor"])
def test_outside_scope_falls_back_correctly(fn):
    x = make((4, 6), torch.float32)
    st = check(fn, x, compiled=False)
    # whatever cdynamo does with it, the result is eager's and nothing is compiled wrongly
    assert st["frames_seen"] == 2


def test_int_tensor_float_scalar_promotes():
    x = torch.arange(-5, 7, dtype=torch.int32)
    out = cdynamo.optimize(lambda a: a * 0.5 + 1)(x)
    assert out.dtype == torch.float32
    assert_same(x * 0.5 + 1, out)


def test_int_tensor_true_div_promotes():
    x = torch.arange(-5, 7, dtype=torch.int64)
    y = torch.tensor([3] * 12, dtype=torch.int64)
    check(lambda a, b: a / b, x, y)
    cdynamo.reset()
    check(lambda a: a / 4, x)


def test_mixed_dtype_tensors_promote():
    a = make((4, 5), torch.int32)
    b = make((4, 5), torch.float64)
    c = make((4, 5), torch.uint8)
    d = make((4, 5), torch.int8)
    check(lambda p, q, r, s: (p + q, p * r, r - s, s * 1.5, r + True), a, b, c, d)


def test_zero_dim_tensor_does_not_promote():
    x = make((4, 5), torch.float32)
    s = torch.tensor(2.0, dtype=torch.float64)
    i = torch.tensor(3, dtype=torch.int64)
    check(lambda a, b, c: (a * b, a + c, c * 2.5, b + c), x, s, i)


def test_uint8_wraparound():
    x = torch.tensor([0, 1, 128, 200, 255], dtype=torch.uint8)
    y = torch.tensor([255, 255, 200, 100, 1], dtype=torch.uint8)
    check(lambda a, b: (a + b, a - b, a * b, -a, b + 100, a - 1), x, y)


def test_int8_overflow():
    x = torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8)
    check(lambda a: (a + a, a * 3, -a, a.abs(), a - 1), x)


def test_int_div_by_zero_true_div():
    x = torch.tensor([-2, 0, 3], dtype=torch.int64)
    y = torch.tensor([0, 0, 0], dtype=torch.int64)
    check(lambda a, b: a / b, x, y)


# --- NaN / inf ---------------------------------------------------------------------------

NAN = float("nan")
INF = float("inf")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_nan_inf_maximum_minimum_relu(dtype):
    x = torch.tensor([NAN, 1.0, -INF, INF, NAN, 0.0, -0.0, -3.0], dtype=dtype)
    y = torch.tensor([0.0, NAN, 2.0, NAN, NAN, -0.0, 0.0, INF], dtype=dtype)
    check(lambda a, b: (torch.maximum(a, b), torch.minimum(a, b), torch.relu(a),
                        torch.relu(b), a.abs(), -a), x, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_nan_inf_comparisons(dtype):
    x = torch.tensor([NAN, 1.0, -INF, INF, NAN, 0.0], dtype=dtype)
    y = torch.tensor([0.0, NAN, -INF, INF, NAN, -0.0], dtype=dtype)
    check(lambda a, b: (a == b, a != b, a < b, a <= b, a > b, a >= b), x, y)


def test_nan_inf_transcendental():
    x = torch.tensor([NAN, INF, -INF, 0.0, -0.0, -1.0, 100.0, -100.0, 1e-30])
    check(lambda a: (torch.exp(a), torch.log(a), torch.sqrt(a), torch.sigmoid(a),
                     torch.tanh(a), a / 0.0, 1 / a), x, transcendental=True)


def test_signed_zero_relu_neg():
    x = torch.tensor([-0.0, 0.0, -1.0, 1.0])
    expected = (torch.relu(x), -x, x * 0)
    out = cdynamo.optimize(lambda a: (torch.relu(a), -a, a * 0))(x)
    for e, o in zip(expected, out):
        assert torch.equal(torch.signbit(e), torch.signbit(o)), (e, o)


# --- comparisons -> bool -> where --------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8, torch.int32], ids=str)
def test_compare_then_where(dtype):
    x = make((5, 7), dtype, seed=7)
    y = make((5, 7), dtype, seed=8)

    def g(a, b):
        m = a > b
        lt = a <= b
        return torch.where(m, a, b), torch.where(lt, b, a * 2), m, lt

    check(g, x, y)


def test_where_mixed_dtypes_bcast():
    c = make((4, 1), torch.bool)
    a = make((1, 6), torch.int32)
    b = make((4, 6), torch.float64)
    check(lambda m, p, q: torch.where(m, p, q), c, a, b)


def test_bool_tensor_arith():
    a = make((9,), torch.bool, seed=1)
    b = make((9,), torch.bool, seed=2)
    check(lambda p, q: (p == q, p != q, p < q, torch.maximum(p, q), torch.minimum(p, q),
                        p * q, p + 1, p * 1.5), a, b)


# --- outputs: tuples, inputs, constants ---------------------------------------------------

def test_returns_inputs_and_constants():
    x = make((3, 4), torch.float32)
    y = make((3, 4), torch.float32)

    def f(a, b):
        return a + b, a, 3, None, (b, "s"), 2.5

    exp = f(x, y)
    out = cdynamo.optimize(f)(x, y)
    assert_same(exp, out)
    assert out[1] is x
    assert out[4][0] is y


def test_same_value_returned_twice():
    x = make((3, 4), torch.float32)

    def f(a):
        b = a * 2
        return b, b, b + 1

    out = cdynamo.optimize(f)(x)
    assert_same(f(x), out)
    assert out[0] is out[1]


def test_output_does_not_alias_input():
    x = make((3, 4), torch.float32)
    before = x.clone()
    f = cdynamo.optimize(lambda a: a * 1)
    out = f(x)
    assert out.data_ptr() != x.data_ptr()
    out.add_(1)
    assert torch.equal(x, before)
    out2 = f(x)  # compiled path: a fresh buffer, not the one handed out before
    assert out2.data_ptr() != out.data_ptr()
    assert torch.equal(out2, before)
    assert torch.equal(out, before + 1)


def test_repeated_calls_different_values_same_meta():
    f = cdynamo.optimize(fused)
    for seed in range(4):
        x = make((8, 9), torch.float32, seed=seed)
        y = make((8, 9), torch.float32, seed=seed + 10)
        assert_same(fused(x, y), f(x, y), transcendental=True)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["cache_hits"] == 3


def test_large_parallel_tensor():
    x = make((256, 1024), torch.float32)
    y = make((1, 1024), torch.float32, seed=3)
    check(fused, x, y, transcendental=True)


# --- backend="eager": the tracer alone ----------------------------------------------------

@pytest.mark.parametrize("name,x,y", LAYOUTS[::2], ids=[c[0] for c in LAYOUTS[::2]])
def test_eager_backend_layouts(name, x, y):
    st = check(fused, x, y, backend="eager", transcendental=True)
    assert st["frames_compiled"] == 1
    assert st["kernels_compiled"] == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_eager_backend_dtypes(dtype):
    x = make((4, 6), dtype, seed=1)
    y = make((4, 6), dtype, seed=2, positive=True)

    def f(a, b):
        return a + b, a * b, a == b, torch.maximum(a, b), torch.where(a > b, a, b), a - 1

    if not _eager_ok(f, x, y):
        check_raises(f, x, y, backend="eager")
        return
    check(f, x, y, backend="eager")


# --- integer edge cases, out-of-range scalars, other dtypes -------------------------------

EDGE_CASES = [
    ("i64_mul_overflow", lambda x: x * 4, [torch.tensor([2**62, -2**62, 2**63 - 1, -2**63, 5])]),
    ("i64_add_overflow", lambda x: x + x, [torch.tensor([2**62, -2**62, 2**63 - 1, -2**63, 5])]),
    ("i64_neg_abs_min", lambda x: (-x, x.abs()), [torch.tensor([-2**63, 2**63 - 1, 0])]),
    ("i32_plus_big_int", lambda x: x + 2**40, [torch.tensor([2**31 - 1, -2**31, 7],
                                                              dtype=torch.int32)]),
    ("i32_mul_wrap", lambda x: x * 3, [torch.tensor([2**31 - 1, -2**31, 7], dtype=torch.int32)]),
    ("u8_plus_300", lambda x: x + 300, [torch.tensor([0, 5, 255], dtype=torch.uint8)]),
    ("u8_minus_float", lambda x: x - 1.5, [torch.tensor([0, 5, 255], dtype=torch.uint8)]),
    ("u8_cmp_out_of_range", lambda x: (x > -1, x == 256, x < 256.5),
     [torch.tensor([0, 5, 255], dtype=torch.uint8)]),
    ("i8_cmp_200", lambda x: x < 200, [torch.tensor([1, -3, 127], dtype=torch.int8)]),
    ("u8_times_minus1", lambda x: x * -1, [torch.tensor([0, 5, 255], dtype=torch.uint8)]),
    ("u8_vs_i8", lambda x, y: (x == y, x < y, x + y, torch.maximum(x, y)),
     [torch.tensor([255, 1, 128], dtype=torch.uint8),
      torch.tensor([-1, 1, -128], dtype=torch.int8)]),
    ("int_vs_float_cmp", lambda x, y: (x >= y, x == y, torch.minimum(x, y)),
     [torch.tensor([1, 2, 3]), torch.tensor([1.5, 2.0, float("nan")])]),
    ("i16_true_div", lambda x, y: x / y, [torch.tensor([7, -7, 0], dtype=torch.int16),
                                          torch.tensor([2, 2, 0], dtype=torch.int16)]),
    ("0d_int_with_f32", lambda x, y: x + y, [torch.tensor(3), torch.randn(4)]),
    ("0d_f64_with_i32", lambda x, y: x + y, [torch.tensor(3.5, dtype=torch.float64),
                                             torch.tensor([1, 2], dtype=torch.int32)]),
    ("0d_bool_with_u8", lambda x, y: x * y, [torch.tensor(True),
                                             torch.tensor([3, 4], dtype=torch.uint8)]),
    ("where_int_scalars", lambda x: (torch.where(x > 0, 1, 0), torch.where(x > 0, 1, 2.5)),
     [torch.randn(6)]),
    ("where_i32_float_scalar", lambda x: torch.where(x > 0, x, 0.5),
     [torch.tensor([-1, 0, 3], dtype=torch.int32)]),
    ("sigmoid_tanh_saturate", lambda x: (torch.sigmoid(x), torch.tanh(x), torch.exp(x)),
     [torch.tensor([100.0, -100.0, -88.0, 89.0, 20.0, -20.0, 1e-8])]),
    ("int_transcendental", lambda x: (torch.exp(x), torch.sigmoid(x), torch.sqrt(x),
                                      torch.log(x)),
     [torch.tensor([-4, 0, 1, 4], dtype=torch.int32)]),
    ("u8_bool_transcendental", lambda x, y: (torch.exp(x), torch.tanh(y)),
     [torch.tensor([0, 1, 200], dtype=torch.uint8), torch.tensor([True, False])]),
]


@pytest.mark.parametrize("name,fn,args", EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_edge_cases(name, fn, args):
    check(fn, *args, transcendental=True)


def test_where_out_of_range_scalar_raises():
    x = torch.tensor([0, 5, 255], dtype=torch.uint8)
    check_raises(lambda a: torch.where(a > 0, a, 300), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.complex64], ids=str)
def test_other_dtypes_correct(dtype):
    x = torch.randn(5).to(dtype)
    st = check(lambda a: a * 2 + 1, x, compiled=False)
    assert st["frames_seen"] == 2
