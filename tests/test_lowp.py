"""bfloat16 and float16 (issue 33): differential tests of the lowered kernels
against eager PyTorch in both dtypes.  Loads widen to float32, math runs in
float32, every node of a low-precision dtype rounds its result to the dtype
(round to nearest even, NaN kept NaN) as eager's per-op kernels do, and stores
write the 16 bits.  Values within the dtype's tolerance (assert_same's
torch.testing defaults for the dtype; most are bit-exact), dtypes and strides
equal, one graph and no fallback; the kernels are lowered (no extern)."""
import math

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import assert_same, check

LOWP = [torch.bfloat16, torch.float16]


def make(shape, dtype, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def specials(dtype):
    """NaN, +-inf, +-0, the dtype's largest and smallest normal / subnormal
    values and their neighbours, values that overflow it, ties of its rounding."""
    fi = torch.finfo(dtype)
    tiny, big = fi.tiny, fi.max
    sub = tiny * fi.eps   # the smallest subnormal
    v = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1.0, -1.0, 0.5, 3.0,
         big, -big, tiny, -tiny, sub, -sub, 2 * sub, tiny / 2, big * 0.99, 1e-3, -7.25,
         1 + fi.eps / 2, 1 + 3 * fi.eps / 2, 100.0, -100.0]
    return torch.tensor(v, dtype=torch.float32).to(dtype)


def bits(t):
    """A tensor's 16-bit patterns, every NaN as one pattern."""
    b = t.view(torch.int16).clone()
    b[torch.isnan(t)] = 0x7fff
    return b


def lowered():
    g = cdynamo._support.compiles[-1]["graph"]
    assert "extern" not in g, g


# ---- conversions: exact, round to nearest even -----------------------------

@pytest.mark.parametrize("dtype", LOWP)
def test_float32_to_lowp_rounds_as_eager_bit_for_bit(dtype):
    g = torch.Generator().manual_seed(1)
    # random bit patterns: every exponent, ties, subnormals, NaN payloads, infs
    x = torch.randint(-2**31, 2**31 - 1, (4096,), generator=g, dtype=torch.int64)
    x = x.to(torch.int32).view(torch.float32)
    # NaNs whose payload is all below the 16-bit result's (they must stay NaN, not
    # become inf), signaling and negative, first: on the vector loops
    lownan = torch.tensor([0x7f800001, -0x7fffff, 0x7f80ffff, -0x7f0001, 0x7fbfffff,
                           0x7f808000, -0x3fffff, 0x7f800100], dtype=torch.int32)
    x = torch.cat([lownan.repeat(8).view(torch.float32), x, specials(torch.float32), specials(dtype).float(),
                   torch.tensor([65520.0, 65519.99, 3.3961776e38, 3.3895314e38, 6.1e-5, 5.96e-8,
                                 2.98e-8, 2.99e-8, 9.2e-41, 1e-45])])
    fn = lambda t: t.to(dtype)
    opt = cdynamo.optimize(fn)
    out, exp = opt(x), fn(x)
    assert out.dtype == dtype
    assert torch.equal(bits(out), bits(exp))
    assert torch.isnan(out).sum() == torch.isnan(exp).sum()
    lowered()


@pytest.mark.parametrize("dtype", LOWP)
def test_lowp_widens_exactly(dtype):
    g = torch.Generator().manual_seed(2)
    x = torch.randint(-2**15, 2**15 - 1, (4096,), generator=g, dtype=torch.int16).view(dtype)
    fn = lambda t: t.float()
    out, exp = cdynamo.optimize(fn)(x), fn(x)
    assert out.dtype == torch.float32
    same = (out == exp) | (torch.isnan(out) & torch.isnan(exp))
    assert bool(same.all())
    assert torch.equal(torch.signbit(out[~torch.isnan(out)]), torch.signbit(exp[~torch.isnan(exp)]))


@pytest.mark.parametrize("dtype", LOWP)
@pytest.mark.parametrize("to", [torch.int64, torch.int32, torch.uint8, torch.bool, torch.float64,
                                torch.bfloat16, torch.float16])
def test_casts(dtype, to):
    x = make((7, 9), dtype, scale=20.0)
    check(lambda t: (t * 1.5).to(to), x)


# ---- pointwise -------------------------------------------------------------

UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": lambda t: torch.log(t.abs()),
    "sqrt": lambda t: t.abs().sqrt(), "rsqrt": lambda t: t.abs().rsqrt(), "sigmoid": torch.sigmoid,
    "tanh": torch.tanh, "relu": torch.relu, "gelu": F.gelu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu, "erf": torch.erf,
    "sin": torch.sin, "floor": torch.floor, "round": torch.round, "reciprocal": torch.reciprocal,
    "square": torch.square, "sign": torch.sign, "softplus": F.softplus, "mish": F.mish,
    "hardswish": F.hardswish, "leaky_relu": F.leaky_relu, "isnan": torch.isnan,
    "isinf": torch.isinf, "nan_to_num": torch.nan_to_num, "clamp": lambda t: t.clamp(-0.1, 0.3),
}


@pytest.mark.parametrize("dtype", LOWP)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, dtype):
    op = UNARY[name]
    fn = lambda t: op(t)   # a frame cdynamo sees (a builtin has none)
    check(fn, make((9, 33), dtype))
    cdynamo.reset()
    check(fn, specials(dtype))   # gelu: float16 at +inf as the installed torch, bfloat16 NaN


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_special_values_per_dtype(approximate, dtype):
    # eager's +-inf / NaN results differ per dtype and mode (float16 exact: inf at +inf
    # with torch 2.13 here, NaN on the device machine with torch 2.11;
    # bfloat16 / float32 exact, vectorized: NaN); 40 elements reach the vector loops,
    # layer_norm's epilogue the row kernel's
    v = [float("inf"), -float("inf"), float("nan"), 3e38, -3e38, 65504.0, -65504.0, -1e4,
         -0.0, 0.0, -10.0, -6.0, 1.0, -1.0]
    x = torch.tensor(v * 3, dtype=torch.float64)[:40].to(dtype)
    check(lambda t: F.gelu(t, approximate=approximate), x)
    cdynamo.reset()
    check(lambda t: F.gelu(F.layer_norm(t, t.shape[-1:]), approximate=approximate) + F.gelu(t),
          x.reshape(4, 10).nan_to_num(posinf=5.0, neginf=-5.0))


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=0.3), "maximum": torch.maximum,
    "minimum": torch.minimum, "pow": lambda a, b: a.abs() ** b, "atan2": torch.atan2,
    "floor_divide": torch.floor_divide, "remainder": torch.remainder,
    "lt": torch.lt, "eq": torch.eq, "ge": torch.ge, "where": lambda a, b: torch.where(a > b, a, b),
    "chain": lambda a, b: ((a * b + a) / (b.abs() + 1)).exp() - a.sigmoid() * b,
}


@pytest.mark.parametrize("dtype", LOWP)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, dtype):
    op = BINARY[name]
    fn = lambda a, b: op(a, b)
    check(fn, make((9, 33), dtype, 1), make((33,), dtype, 2))
    cdynamo.reset()
    s = specials(dtype)
    check(fn, s[:, None], s[None, :])


@pytest.mark.parametrize("dtype", LOWP)
def test_scalars_compute_in_float32_as_eager(dtype):
    # eager multiplies / adds a bfloat16 tensor by a Python float in float32
    # (opmath), not by the scalar rounded to bfloat16; comparisons round it
    x = make((64,), dtype)
    fns = [lambda t: t * 0.1, lambda t: t + 0.1, lambda t: t / 3.0, lambda t: t - 1e-3,
           lambda t: 0.1 * t + 0.7, lambda t: t > 0.1, lambda t: t == 0.1,
           lambda t: torch.where(t > 0, t, 0.3), lambda t: t.clamp(min=0.1),
           lambda t: t ** 2, lambda t: t * 3]
    for fn in fns:
        cdynamo.reset()
        check(fn, x)
        check(fn, torch.full((8,), 0.1).to(dtype))


@pytest.mark.parametrize("dtype", LOWP)
@pytest.mark.parametrize("sdt", [torch.float32, torch.float64, torch.int64])
def test_zero_dim_tensor_divisor_and_factor_read_unrounded(sdt, dtype):
    # eager's reduced-float mul / div kernels (true, trunc, floor; floor_divide) read a 0-dim
    # tensor second operand at its original value in float32 (3.0043 stays 3.0043, 257 stays
    # 257), where other ops and a first operand round it to the dtype: -3 / 3.0043 truncates
    # to -0.0 in eager, to -1 if the divisor were rounded to bfloat16's 3.0 (fz50's finding)
    x = (make((256,), dtype, scale=10.0) * 4).to(dtype)
    x[:2] = torch.tensor([-3.0, -3.96875])
    s = torch.tensor(257 if sdt == torch.int64 else 3.0042927265167236, dtype=sdt)
    fns = [lambda t, c: t * c, lambda t, c: t / c, lambda t, c: c * t, lambda t, c: t + c,
           lambda t, c: torch.div(t, c, rounding_mode="trunc"),
           lambda t, c: torch.div(t, c, rounding_mode="floor"),
           lambda t, c: torch.floor_divide(t, c), lambda t, c: (t * c).exp() / c]
    for fn in fns:
        cdynamo.reset()
        check(fn, x, s)


@pytest.mark.parametrize("dtype", LOWP)
def test_mixed_dtypes_promote_as_eager(dtype):
    a, f = make((8, 16), dtype), make((8, 16), torch.float32, 1)
    other = torch.float16 if dtype == torch.bfloat16 else torch.bfloat16
    check(lambda x, y: (x + y, x * y.double(), y - x, x + 2, x.to(other) + x,
                        x + torch.arange(16), torch.arange(16) * x, x > y), a, f)


@pytest.mark.parametrize("dtype", LOWP)
def test_views_and_strides(dtype):
    x = make((6, 8, 10), dtype)
    check(lambda t: (t.transpose(0, 2) * 2, t[1:5, ::2] + 1, t.permute(2, 0, 1).contiguous(),
                     t.reshape(-1)[3:40].exp(), t.unsqueeze(0).expand(3, -1, -1, -1) * 1,
                     t.flip(1) - t, t.t() if t.dim() == 2 else t.mT.relu()), x)
    check(lambda t: t.mT * 2, x.transpose(1, 2))


@pytest.mark.parametrize("dtype", LOWP)
def test_cat_stack_pad(dtype):
    x, y = make((4, 6), dtype), make((4, 3), dtype, 1)
    f32 = make((4, 6), torch.float32, 2)
    check(lambda a, b: (torch.cat([a, b], 1), torch.cat([a * 2, b.exp()], 1),
                        torch.stack([a, a.t().t()], 0) + 0, F.pad(a, (1, 2), value=0.3) + 0,
                        F.pad(a, (1, 1, 2, 0)) * 2), x, y)
    check(lambda a, b: torch.cat([a, b]), x, f32)


@pytest.mark.parametrize("dtype", LOWP)
def test_gather_index_where(dtype):
    x = make((10, 12), dtype)
    idx = torch.tensor([0, 9, 3, 3])
    check(lambda t, i: (t[i] * 2, t[:, i] + 1, torch.gather(t, 1, i.expand(10, 4)) * 1,
                        torch.index_select(t, 0, i).exp(), t.masked_fill(t < 0, float("-inf")),
                        torch.where(t > 0, t, torch.zeros((), dtype=t.dtype))), x, idx)


# ---- reductions: float32 accumulation, one rounding ----------------------------

REDUCTIONS = {
    "sum": lambda t: (t.sum(), t.sum(-1), t.sum(0), t.sum((0, 2), keepdim=True)),
    "mean": lambda t: (t.mean(), t.mean(-1), t.mean(1)),
    "amax": lambda t: (t.amax(-1), t.amin(0), t.max(), t.max(-1).values),
    "argmax": lambda t: (t.argmax(-1), t.argmin(0)),
    "var": lambda t: (t.var(-1), t.std(0), t.var(1, correction=0)),
    "prod": lambda t: (t.prod(-1),),
    "norm": lambda t: (t.norm(dim=-1), torch.linalg.vector_norm(t, 1, dim=0)),
    "logsumexp": lambda t: (t.logsumexp(-1),),
    "sum_dtype": lambda t: (t.sum(-1, dtype=torch.float32), t.float().sum(0)),
    "fused": lambda t: ((t * 2).exp().sum(-1), (t - t.mean(-1, keepdim=True)).sum(-1)),
}


@pytest.mark.parametrize("dtype", LOWP)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions(name, dtype):
    check(REDUCTIONS[name], make((5, 64, 7), dtype, scale=0.5))


@pytest.mark.parametrize("dtype", LOWP)
def test_sum_accumulates_in_float32(dtype):
    # 4096 ones then small values: a bfloat16 accumulator would stop at 256
    x = torch.ones(4096, dtype=dtype)
    out = check(lambda t: t.sum(), x)
    assert cdynamo.optimize(lambda t: t.sum())(x).item() == 4096.0
    check(lambda t: t.amax(), specials(dtype))
    cdynamo.reset()
    check(lambda t: t.sum(), specials(dtype))


# ---- rows: softmax / log_softmax / layer_norm / group_norm in float32 --------

ROWS = {
    "softmax": lambda t: torch.softmax(t, -1),
    "softmax0": lambda t: torch.softmax(t, 0),
    "log_softmax": lambda t: torch.log_softmax(t, -1),
    "layer_norm": lambda t: F.layer_norm(t, t.shape[-1:]),
    "layer_norm_wb": lambda t: F.layer_norm(t, t.shape[-1:], torch.linspace(0.5, 2, t.shape[-1], dtype=t.dtype),
                                            torch.linspace(-1, 1, t.shape[-1], dtype=t.dtype)),
    "group_norm": lambda t: F.group_norm(t, 2),
    "softmax_epilogue": lambda t: torch.softmax(t * 0.125, -1) * 2 + 1,
    "layer_norm_gelu": lambda t: F.gelu(F.layer_norm(t, t.shape[-1:])),
}


@pytest.mark.parametrize("dtype", LOWP)
@pytest.mark.parametrize("name", sorted(ROWS))
def test_rows(name, dtype):
    x = make((3, 4, 80), dtype)
    check(ROWS[name], x)
    cdynamo.reset()
    check(ROWS[name], x.transpose(1, 2))


@pytest.mark.parametrize("dtype", LOWP)
def test_rows_special_values(dtype):
    s = specials(dtype)
    x = torch.stack([s, s.flip(0), torch.full_like(s, 2.0), s.nan_to_num()])
    for fn in (lambda t: torch.softmax(t, -1), lambda t: torch.log_softmax(t, -1),
               lambda t: F.layer_norm(t, t.shape[-1:])):
        cdynamo.reset()
        check(fn, x)


# ---- the lowered kernels really run -----------------------------------------

@pytest.mark.parametrize("dtype", LOWP)
def test_lowered_kernels_read_and_write_16_bits(dtype):
    x = make((16, 32), dtype)
    check(lambda t: (torch.softmax(t, -1) * t).sum(-1), x)
    lowered()
    src = cdynamo._support.compiles[-1]["source"]
    assert "const uint16_t *restrict in_ptr0" in src
    name = "cdy_bf2f" if dtype == torch.bfloat16 else "cdy_h2f"
    assert name + "(in_ptr0[" in src


@pytest.mark.parametrize("dtype", LOWP)
def test_no_dtype_fallback(dtype):
    x = make((4, 8), dtype)
    ex = cdynamo.explain(lambda t: torch.softmax(t @ t.t(), -1).sum())(x)
    assert ex.graph_count == 1 and ex.graph_break_count == 0, ex.break_reasons
    assert not any("dtype" in str(r) for r in ex.break_reasons)


# ---- autocast (CPU): eager's casts traced into the graph -------------------------

class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)
        self.ln = torch.nn.LayerNorm(32)

    def forward(self, x):
        h = F.gelu(self.ln(self.fc1(x)))
        a = torch.softmax(h @ h.transpose(-1, -2) * 0.1, -1)
        return self.fc2(a @ h) + x[..., :8], torch.bmm(h, h.transpose(1, 2)).sum(-1)


def _autocast_check(fn, *args, dtype):
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        want = fn(*args)
        opt = cdynamo.optimize(fn)
        for _ in range(2):
            assert_same(want, opt(*args))
    return opt


@pytest.mark.parametrize("dtype", LOWP)
def test_autocast_around_optimized_function(dtype):
    torch.manual_seed(0)
    net = _Net().eval()
    x = torch.randn(2, 5, 16)
    opt = _autocast_check(lambda t: net(t), x, dtype=dtype)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["fallbacks"] == 0 and st["graph_breaks"] == 0, st
    g = cdynamo._support.compiles[-1]["graph"]
    assert dtype.__repr__().split(".")[1] in g, g   # the casts are graph nodes
    # autocast off: the guard on the autocast state fails, a float32 graph follows
    with torch.no_grad():
        assert_same(net(x), opt(x))
    assert cdynamo.stats()["recompiles"] == 1


@pytest.mark.parametrize("dtype", LOWP)
def test_autocast_policy_ops(dtype):
    a, b, c = make((4, 8), torch.float32), make((8, 6), torch.float32, 1), make((4, 6), torch.float32, 2)
    d = make((8, 6), torch.float64, 3)
    fn = lambda x, y, z, w: (torch.mm(x, y), torch.addmm(z, x, y), torch.matmul(x, y) + 1,
                             F.linear(x, y.t(), z[0]), torch.baddbmm(z[None], x[None], y[None]),
                             x @ w.float(), torch.mm(x.double(), w), torch.softmax(x, -1),
                             F.layer_norm(x, (8,)), x.sum(-1), torch.cat([x, x.to(dtype)]))
    _autocast_check(fn, a, b, c, d, dtype=dtype)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["fallbacks"] == 0, st


@pytest.mark.parametrize("dtype", LOWP)
def test_autocast_fp32_ops_run_eagerly(dtype):
    # eager's CPU autocast runs mse_loss / prod in float32: not traced (AUTOCAST_OPS)
    x, y = make((4, 8), dtype), make((4, 8), dtype, 1)
    fn = lambda s, t: (F.mse_loss(s, t), s.prod(-1))
    opt = cdynamo.optimize(fn)
    assert_same(fn(x, y), opt(x, y))          # compiled outside autocast: bfloat16 results
    with torch.autocast("cpu", dtype=dtype):  # the autocast guard fails; eager's float32
        want = fn(x, y)
        assert want[0].dtype == torch.float32
        assert_same(want, opt(x, y))
    assert any(b["code"] == "AUTOCAST_OPS" for b in cdynamo._support.breaks), cdynamo._support.breaks


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "vit"])
def test_autocast_transformers_models(name):
    pytest.importorskip("transformers")
    import warnings   # noqa: PLC0415
    from cdynamo._hf_models import MODELS   # noqa: PLC0415
    build, inputs, result = MODELS[name]
    model, kw = build(), inputs()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = result(model(**kw))
        opt = cdynamo.optimize(model)
        got = result(opt(**kw))
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    st = cdynamo.stats()
    assert st["fallbacks"] == 0 and st["graph_breaks"] == 0, (st, cdynamo._support.breaks)


# ---- autocast entered inside the optimized function: traced ----------------------

def _one_graph():
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["fallbacks"] == 0 and st["graph_breaks"] == 0, (
        st, cdynamo._support.breaks)


@pytest.mark.parametrize("dtype", LOWP)
def test_autocast_block_inside_function(dtype):
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 8)

    def fn(x):
        y = x * 2
        with torch.autocast("cpu", dtype=dtype):
            h = lin(y)
            inner_on = torch.is_autocast_enabled("cpu")
            inner_dt = torch.get_autocast_dtype("cpu")
            with torch.autocast("cpu", enabled=False):   # float32 again
                off = torch.is_autocast_enabled("cpu")
                z = torch.mm(h.float(), h.float().t())
            w = torch.mm(h, h.t()) + torch.softmax(h, -1).sum()
        return (h, z, w, y @ y.t(), inner_on, inner_dt, off, torch.is_autocast_enabled("cpu"),
                torch.get_autocast_dtype("cpu"))

    x = torch.randn(4, 16)
    with torch.no_grad():
        want = fn(x)
        opt = cdynamo.optimize(fn)
        for _ in range(2):
            assert_same(want, opt(x))
    assert want[0].dtype == dtype and want[1].dtype == torch.float32 and want[4] is True
    _one_graph()
    assert not torch.is_autocast_enabled("cpu")


def test_autocast_block_dtype_none_reads_the_traced_state():
    # torch.autocast("cpu") inside a float16 block takes float16 (the state, as traced)
    def fn(a, b):
        with torch.autocast("cpu", dtype=torch.float16):
            with torch.autocast("cpu"):
                return torch.mm(a, b), torch.get_autocast_dtype("cpu")

    a, b = make((4, 8), torch.float32), make((8, 3), torch.float32, 1)
    with torch.no_grad():
        want = fn(a, b)
        assert want[0].dtype == torch.float16
        assert_same(want, cdynamo.optimize(fn)(a, b))
    _one_graph()


def test_autocast_block_under_outer_autocast_runs_eagerly():
    # under an autocast on when the frame starts a block that changes it is not traced
    def fn(a, b):
        with torch.autocast("cpu", enabled=False):
            return torch.mm(a, b)

    a, b = make((4, 8), torch.float32), make((8, 3), torch.float32, 1)
    opt = cdynamo.optimize(fn)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = fn(a, b)
        assert want.dtype == torch.float32
        assert_same(want, opt(a, b))
        assert torch.is_autocast_enabled("cpu")
    assert any(b["code"] == "CONTEXT_STATE" for b in cdynamo._support.breaks)
    with torch.no_grad():   # autocast off at the start: traced, the same float32 mm
        assert_same(fn(a, b), opt(a, b))


def test_autocast_block_that_raises_restores_the_state():
    lin = torch.nn.Linear(16, 8)

    def fn(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return lin(x) @ y

    opt = cdynamo.optimize(fn)
    x, y = torch.randn(4, 16), torch.randn(8, 3)
    with torch.no_grad():
        assert_same(fn(x, y), opt(x, y))
        with pytest.raises(RuntimeError):
            opt(x, torch.randn(5, 3))
    assert not torch.is_autocast_enabled("cpu")
    assert torch.get_autocast_dtype("cpu") == torch.bfloat16


class _AutocastForward(torch.nn.Module):
    """An nn module whose forward runs its body under CPU autocast."""

    def __init__(self, body, dtype=torch.bfloat16):
        super().__init__()
        self.body, self.dtype = body, dtype

    def forward(self, *args, **kw):
        with torch.autocast("cpu", dtype=self.dtype):
            return self.body(*args, **kw)


@pytest.mark.parametrize("dtype", LOWP)
def test_autocast_inside_forward_of_torch_modules(dtype):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                              torch.nn.Linear(64, 32), torch.nn.Softmax(-1))
    conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                               torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 6 * 6, 10))
    for body, x in ((mlp, torch.randn(2, 5, 32)), (conv, torch.randn(2, 3, 8, 8)),
                    (_Net(), torch.randn(2, 5, 16))):
        cdynamo.reset()
        m = _AutocastForward(body, dtype).eval()
        with torch.no_grad():
            want = m(x)
            opt = cdynamo.optimize(m)
            for _ in range(2):
                got = opt(x)
                assert_same(want, got)
        _one_graph()


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama", "vit"])
def test_autocast_inside_forward_of_transformers_models(name):
    pytest.importorskip("transformers")
    import warnings   # noqa: PLC0415
    from cdynamo._hf_models import MODELS   # noqa: PLC0415
    build, inputs, result = MODELS[name]
    model, kw = _AutocastForward(build()).eval(), inputs()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = result(model(**kw))
        got = result(cdynamo.optimize(model)(**kw))
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    _one_graph()
    assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("name", ["bert", "llama", "vit"])
def test_transformers_models_in_bfloat16(name):
    pytest.importorskip("transformers")
    import warnings   # noqa: PLC0415
    from cdynamo._hf_models import MODELS   # noqa: PLC0415
    build, inputs, result = MODELS[name]
    model = build().to(torch.bfloat16)
    kw = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in inputs().items()}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = result(model(**kw))
        got = result(cdynamo.optimize(model)(**kw))
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["fallbacks"] == 0 and st["graph_breaks"] == 0, st
    assert not any(b["code"] == "DTYPE" for b in cdynamo._support.breaks)


@pytest.mark.parametrize("dtype", LOWP)
def test_factories(dtype):
    x = make((5, 300), dtype)
    check(lambda t: (t + torch.arange(300, dtype=t.dtype), torch.zeros_like(t) + 1,
                     t * torch.linspace(0, 2, 300, dtype=t.dtype), torch.full((5, 1), 0.1, dtype=t.dtype) * t,
                     torch.arange(0, 3, 0.25, dtype=t.dtype) + 0), x, compiled=False)


@pytest.mark.parametrize("dtype", LOWP)
@pytest.mark.parametrize("cl", [False, True])
def test_batch_norm_eval_lowered(dtype, cl):
    # ATen's reduced-float kernel: alpha / beta in float32, x * alpha + beta rounded once
    g = torch.Generator().manual_seed(4)
    mean, var = torch.randn(8, generator=g).to(dtype), (torch.rand(8, generator=g) + 0.1).to(dtype)
    w, b = torch.randn(8, generator=g).to(dtype), torch.randn(8, generator=g).to(dtype)
    x = make((4, 8, 5, 7), dtype, 5)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    f = lambda t: (torch.relu(F.batch_norm(t, mean, var, w, b, False, 0.1, 1e-5)),
                   F.batch_norm(t, mean, var, None, None, False, 0.1, 1e-3),
                   F.batch_norm(t[:, :, 0, 0], mean, var, w, b, False))
    want = f(x)
    got = cdynamo.optimize(f)(x)
    assert_same(want, got)
    # the strided 2-d input takes ATen's other path (1 / sqrt rounded to the dtype): extern
    assert cdynamo._support.compiles[-1]["graph"].count("extern") == 1


@pytest.mark.parametrize("dtype", LOWP)
@pytest.mark.parametrize("cl", [False, True])
def test_max_pools_lowered_bit_exact(dtype, cl):
    x = make((2, 16, 9, 11), dtype, 6, scale=3.0)
    x[0, 1, 2, 3], x[1, 2, 0, 0], x[1, 3, 4, 4] = float("nan"), float("inf"), -float("inf")
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    f = lambda t: (F.max_pool2d(torch.relu(t * 2), 2), F.max_pool2d(t, 3, 2, 1, ceil_mode=True),
                   F.adaptive_max_pool2d(t, (3, 4)), F.max_pool2d(t, 2, dilation=2))
    want = f(x)
    got = cdynamo.optimize(f)(x)
    for e, a in zip(want, got):
        assert e.dtype == a.dtype and e.stride() == a.stride()
        assert torch.equal(bits(e), bits(a))
    assert "extern" not in cdynamo._support.compiles[-1]["graph"]


@pytest.mark.parametrize("dtype", LOWP)
def test_cnn_in_low_precision_fuses_around_channels_last_convs(dtype):
    # conv2d in channels_last (oneDNN), batch norm / relu / max pool lowered around it
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                              torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
                              torch.nn.ReLU()).eval()
    for m in net:
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2)
    net = net.to(dtype)
    x = make((2, 3, 12, 12), dtype, 7, scale=1.0)
    with torch.no_grad():
        want = net(x)
        got = cdynamo.optimize(net)(x)
    assert got.dtype == dtype and got.stride() == want.stride()
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    _one_graph()
    graph = cdynamo._support.compiles[-1]["graph"]
    assert graph.count("extern") == 2, graph   # the two convs; norms and pool lowered


def test_bench_bf16_group_runs_when_named():
    from cdynamo import bench   # noqa: PLC0415
    group = [w.name for w in bench.select_workloads(["bf16"])]
    assert "bf16_softmax" in group and "bf16_hf_llama" in group and "bf16_mlp" in group
    assert all(n.startswith("bf16_") for n in group)
    assert [w.name for w in bench.select_workloads(["mlp"])] == ["mlp"]
    assert not any(w.name.startswith("bf16_") for w in bench.select_workloads(None))
    w = next(w for w in bench.WORKLOADS if w.name == "bf16_softmax")
    (x,) = w.inputs(quick=True)
    assert x.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", LOWP)
def test_prod_rounds_each_product_in_eager_order(dtype):
    # eager multiplies a half prod in the dtype, in order where its loop is scalar or
    # outer: bit-equal products (an exp after it would magnify an ulp to percents)
    x = make((8, 3, 1, 700), dtype, seed=3)
    f = lambda t: (t.prod(1), t[..., :40].prod(-1), t.prod(1).exp())
    exp, act = f(x), cdynamo.optimize(f)(x)
    for e, a in zip(exp, act):
        assert torch.equal(e, a)


@pytest.mark.parametrize("dtype", LOWP)
@pytest.mark.parametrize("shape,dims", [((7, 1000), 1), ((1000, 7), 0), ((5, 5, 1000), (0, 2)),
                                        ((3, 4, 300), -1), ((2, 70000), 1)])
def test_logsumexp_rounds_each_step_as_eager(dtype, shape, dims):
    # eager's composite logsumexp rounds x - max, exp, the sum and log to the dtype, each
    # step; rounding once at the end is a bfloat16 ulp off on rows of ~1000 (fuzz finding,
    # stop 44). 70000 halves sum past float16's max: inf, as eager.
    f = lambda t: (torch.logsumexp(t, dims), torch.logsumexp(t * 3, dims, keepdim=True))
    for seed, scale in [(0, 0.1), (1, 1.0), (2, 10.0)]:
        x = make(shape, dtype, seed=seed, scale=scale)
        exp, act = f(x), cdynamo.optimize(f)(x)
        for e, a in zip(exp, act):
            assert torch.equal(e, a), (e.float() - a.float()).abs().max()
        cdynamo.reset()


@pytest.mark.parametrize("dtype", LOWP)
def test_layer_norm_of_equal_values_keeps_eagers_zero_sign(dtype):
    # ATen's half layer_norm computes fma(x, rstd, -mean * rstd): over a row of equal
    # values that is the rounding error of -mean * rstd, a zero of its sign (-0 here)
    x = torch.full((4, 1), -3.3, dtype=torch.float64).to(dtype).expand(4, 7).contiguous()
    x[1:] = torch.tensor([[0.7], [1e-3], [1e4]], dtype=torch.float64).to(dtype)
    f = lambda t: (F.layer_norm(t, (7,), eps=1e-5),)
    exp, act = f(x)[0], cdynamo.optimize(f)(x)[0]
    assert torch.equal(exp, act) and torch.equal(torch.signbit(exp), torch.signbit(act))


@pytest.mark.parametrize("dtype", LOWP + [torch.float32])
@pytest.mark.parametrize("n", [8, 15, 16, 40, 300])
def test_norm_rows_whose_moments_overflow(dtype, n):
    # rows holding values whose squares overflow float32 (1e30 in bfloat16), inf, NaN:
    # eager's reduced-type RowwiseMoments (16 halves a vector, two float lane sets) gives NaN
    # where a lane merge computes inf * 0; a row shorter than 16 is all its scalar tail
    g = torch.Generator().manual_seed(n)
    x = torch.randn(6, n, generator=g, dtype=torch.float64)
    x[0, -1] = -1e30
    x[1, 0] = 3e20
    x[2, n // 2] = math.inf
    x[3, 1] = math.nan
    x[4, :] = 2e30
    x = x.to(dtype) if dtype != torch.float16 else x.clamp(-6e4, 6e4).to(dtype)
    for fn in (lambda t: F.layer_norm(t, t.shape[-1:]),
               lambda t: F.layer_norm(t, t.shape[-1:], torch.ones(n, dtype=t.dtype)),
               lambda t: F.group_norm(t.reshape(3, 2, n), 2)):
        cdynamo.reset()
        check(fn, x)


@pytest.mark.parametrize("dtype", LOWP)
def test_selected_nan_keeps_its_sign_bits(dtype):
    """A NaN of the input that where / a bool-promoting where / clone passes
    through keeps its bits as in eager (bfloat16 stores used to write 0x7fc0,
    losing the sign copysign and signbit then see); fuzz finding 7f395897cc."""
    pats = [-63, 0x7fc1, -1, 0x7fff, -0x1ff] if dtype == torch.bfloat16 else [0x7e01, -0x1ff, -1]
    x = torch.tensor([1.0, -2.0, 0.25] + [0.0] * len(pats), dtype=dtype)
    x.view(torch.int16)[3:] = torch.tensor(pats, dtype=torch.int16)
    m = torch.zeros(x.shape, dtype=torch.bool)

    def fn(x, m):
        w = torch.where(x > 0.5, m, x)
        return w.view(torch.int16), torch.where(m, 1.0, x).view(torch.int16), torch.signbit(w)
    out = cdynamo.optimize(fn)(x, m)
    for a, e in zip(out, fn(x, m)):
        assert torch.equal(a, e), (a, e)


@pytest.mark.parametrize("dtype", LOWP)
def test_every_pattern_through_a_rounding_chain_keeps_its_bits(dtype):
    """Every 16-bit pattern but the signaling NaNs (cdynamo quiets those) through
    where and a per-op rounded multiply-add, on the vector loops: the bits equal
    eager's (bfloat16's rounding runs on 32-bit lanes, cdy_bfr32; its NaN case
    is a mask blend there, so a chain of roundings stays vectorized)."""
    x = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
    nbits = 7 if dtype == torch.bfloat16 else 10   # mantissa bits; the top one is quiet
    b = x.view(torch.int16).to(torch.int32) & 0xffff
    sig = x.isnan() & ((b >> (nbits - 1)) & 1 == 0)
    x = x[~sig]
    m = torch.zeros(x.shape, dtype=torch.bool)

    def fn(x, m):
        w = torch.where(x > 0.5, m, x)
        return w.view(torch.int16), torch.signbit(w), w * 0.5 + 1.0
    out = cdynamo.optimize(fn)(x, m)
    exp = fn(x, m)
    for a, e in zip(out[:2], exp[:2]):
        assert torch.equal(a, e), (a != e).nonzero()
    # computed NaNs: eager's payloads vary by kernel (0xffff, 0x7fc0); NaN-ness only
    assert torch.equal(bits(out[2]), bits(exp[2])), (bits(out[2]) != bits(exp[2])).nonzero()


@pytest.mark.parametrize("n", [1, 7, 40])
def test_float16_gelu_at_inf_follows_installed_torch(n):
    """Exact GELU of a float16 +inf: torch 2.13's float16 kernel gives inf here, torch
    2.11's NaN on the lead's device machine; cdynamo asks the installed torch once (opbind.c,
    ob_probe_gelu_f16_inf) and gives its answer on scalar and vector paths
    (fuzz findings 0953a215ef, 1ff4138c37)."""
    x = torch.full((n,), float("inf"), dtype=torch.float16)
    x[::2] = 2.0
    expected = F.gelu(x)
    actual = cdynamo.optimize(lambda t: F.gelu(t * 1))(x)
    assert torch.equal(actual.isnan(), expected.isnan()), (actual, expected)
    assert_same(expected, actual, transcendental=True)


@pytest.mark.parametrize("e", [0.5, -0.5, 2.0, 3.0, -1.0, -2.0, 1.5, 0.0, -3.0])
def test_float16_pow_with_a_number_is_eagers_std_pow(e):
    """Eager's pow(Half tensor, number) is std::pow for every exponent (no sqrt /
    reciprocal shortcut as for float32 / bfloat16): (-inf) ** 0.5 is inf and (-0.) ** 0.5
    is +0; GCC's vectorizer made our powf(x, 0.5f) a vsqrtps (NaN, -0). Found by the
    fuzzer (clamp_max(-inf) ** 0.5)."""
    inf, nan = float("inf"), float("nan")
    vals = torch.tensor([-inf, inf, -0.0, 0.0, -1.0, 1.0, 2.5, -2.5, 65504., 6e-8, 1e-4, 0.3,
                         nan, -3.0, 7.0] * 3, dtype=torch.float16)
    for x in (vals, vals[:1], vals[::2]):
        cdynamo.reset()
        a, b = x ** e, cdynamo.optimize(lambda t: t ** e)(x)
        torch.testing.assert_close(b, a, rtol=0, atol=0, equal_nan=True)
        zero = (a == 0) & (b == 0)
        assert torch.equal(a[zero].signbit(), b[zero].signbit())
