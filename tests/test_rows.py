"""Differential tests of the row kernels (softmax, log_softmax, layer_norm,
group_norm: kind 'N' nodes, csrc/compiler/rows.c) and of the losses lowered to
pointwise nodes plus a reduction (csrc/trace/build_rows.c), against eager
PyTorch: dtypes, shapes, every dim, non-contiguous inputs, fused producers,
-inf/NaN rows, empty tensors; kernel and extern counts of the generated code."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import check

DTYPES = [torch.float32, torch.float64]


def make(shape, dtype=torch.float32, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def last():
    r = cdynamo._support.compiles[-1]
    return r["graph"], r["source"]


def lowered(op, kernels=None):
    """The last compile has node `op`, no extern and (optionally) `kernels` kernels."""
    g, src = last()
    assert f"= {op}(" in g, g
    assert "extern" not in g, g
    if kernels is not None:
        assert src.count("CDY_EXPORT void kernel_") == kernels, src


# ---- softmax / log_softmax ------------------------------------------------

SOFTMAX_FNS = {
    "torch.softmax": lambda x, d: torch.softmax(x, d),
    "F.softmax": lambda x, d: F.softmax(x, dim=d),
    "Tensor.softmax": lambda x, d: x.softmax(d),
    "special.softmax": lambda x, d: torch.special.softmax(x, d),
    "torch.log_softmax": lambda x, d: torch.log_softmax(x, d),
    "F.log_softmax": lambda x, d: F.log_softmax(x, d),
    "Tensor.log_softmax": lambda x, d: x.log_softmax(dim=d),
    "special.log_softmax": lambda x, d: torch.special.log_softmax(x, d),
}


@pytest.mark.parametrize("name", list(SOFTMAX_FNS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_spellings(name, dtype):
    fn = SOFTMAX_FNS[name]
    check(lambda x: fn(x, -1), make((6, 33), dtype))
    lowered("row_log_softmax" if "log" in name else "row_softmax", kernels=1)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7,), (1,), (3, 1), (1, 5), (2, 3, 4), (2, 1, 3, 5), (3, 4, 5, 6)])
def test_softmax_every_dim(log, dtype, shape):
    x = make(shape, dtype)
    op = torch.log_softmax if log else torch.softmax
    for d in range(-len(shape), len(shape)):
        check(lambda t: op(t, d), x)
        lowered("row_log_softmax" if log else "row_softmax", kernels=1)
        cdynamo.reset()


@pytest.mark.parametrize("log", [False, True])
def test_softmax_noncontiguous(log):
    op = F.log_softmax if log else F.softmax
    xt = make((12, 40)).t()
    for d in (0, 1, -1):
        check(lambda t: op(t, d), xt)
        cdynamo.reset()
    xc = make((2, 6, 5, 7)).to(memory_format=torch.channels_last)
    for d in range(4):
        check(lambda t: op(t, d), xc)
        lowered("row_log_softmax" if log else "row_softmax", kernels=1)
        cdynamo.reset()
    xp = make((4, 5, 6)).permute(2, 0, 1)
    check(lambda t: op(t, 1), xp)


def test_softmax_fused_prologue_one_kernel():
    x = make((2, 4, 16, 16))
    mask = torch.zeros(16, 16).masked_fill(torch.ones(16, 16).triu(1).bool(), float("-inf"))
    check(lambda t, m: torch.softmax(t * 0.5 + m, -1), x, mask)
    lowered("row_softmax", kernels=1)
    g, src = last()
    assert "= mul(" in g and "= add(" in g, g
    check(lambda t, m: F.log_softmax((t - 1).relu() + m, dim=-1), x, mask)
    lowered("row_log_softmax", kernels=1)


def test_softmax_attention_scores():
    q, k = make((2, 4, 8, 16)), make((2, 4, 8, 16), seed=1)
    check(lambda a, b: torch.softmax(a @ b.transpose(-2, -1) * 0.25, dim=-1), q, k)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_special_values(log, dtype):
    x = make((6, 9), dtype)
    x[0] = float("-inf")                 # all -inf: NaN row
    x[1, 3] = float("nan")               # NaN propagates to the row
    x[2, 0] = float("inf")
    x[3, 1:] = float("-inf")             # one finite element
    x[4, 2] = float("-inf")
    x[5] = 0
    op = torch.log_softmax if log else torch.softmax
    check(lambda t: op(t, 1), x)
    check(lambda t: op(t, 0), x)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_float32_exp_range(log):
    """float32 softmax's exp(x - max) over the whole range below 0: results
    equal eager's within float32 tolerance, masked (-inf) entries and
    differences past -87.34 (exp under 2^-126) are exactly 0 as eager's zeros,
    and log_softmax keeps eager's finite values down to -100 and -inf."""
    d = torch.linspace(-104.0, 0.0, 4001)
    x = torch.stack([d, d.flip(0), d * 0.5]).contiguous()
    x[1, ::7] = float("-inf")
    op = torch.log_softmax if log else torch.softmax
    f = cdynamo.optimize(lambda t: op(t, -1))
    y, e = f(x), op(x, -1)
    torch.testing.assert_close(y, e, rtol=1.3e-6, atol=1e-6 if log else 1e-10)
    if not log:
        assert torch.equal(y[1, ::7], torch.zeros_like(y[1, ::7]))
        assert (y[e == 0] == 0).all()
        small = (x - x.amax(-1, keepdim=True)) > -87.0
        torch.testing.assert_close(y[small], e[small], rtol=2e-6, atol=0)
    else:
        assert torch.equal(torch.isinf(y), torch.isinf(e))


def test_softmax_subnormal_results_as_eager():
    """float32 softmax's results under 2^-126 (x - max in [-104, -87.34]) are eager's
    subnormals, not flushed to 0: log(softmax(x)) stays finite (-88.5, not -inf) and a
    comparison with 0 agrees (fuzz: atan2(s, s) read 0 where eager's was pi / 4)."""
    x = torch.tensor([[0.0, 88.5, 3.0, 1.0], [-12.45, 77.08, -118.0, -246.4]])
    for f in (lambda t: torch.softmax(t, -1), lambda t: torch.softmax(t, -1).log(),
              lambda t: (torch.softmax(t, -1) > 0).sum(-1)):
        e, y = f(x), cdynamo.optimize(f)(x)
        torch.testing.assert_close(y, e, rtol=1.3e-6, atol=0)
    d = -torch.linspace(87.0, 104.5, 20001)
    x = torch.stack([torch.zeros_like(d), d], 1)
    e, y = torch.softmax(x, -1), cdynamo.optimize(lambda t: torch.softmax(t, -1))(x)
    ulp = (e.view(torch.int32).long() - y.view(torch.int32).long()).abs()
    assert int(ulp.max()) <= 1, int(ulp.max())


@pytest.mark.parametrize("log", [False, True])
def test_softmax_empty_and_scalar(log):
    op = torch.log_softmax if log else torch.softmax
    check(lambda t: op(t, 1), make((3, 0)))
    check(lambda t: op(t, 0), make((0, 4)))
    check(lambda t: op(t, -1), make(()))      # 0-d: runs through torch


@pytest.mark.parametrize("log", [False, True])
def test_softmax_dtype_arg(log):
    op = torch.log_softmax if log else torch.softmax
    check(lambda t: op(t, -1, dtype=torch.float64), make((5, 7)))
    lowered("row_log_softmax" if log else "row_softmax", kernels=1)
    check(lambda t: op(t, 0, dtype=torch.float32), make((5, 7), torch.float64))
    check(lambda t: F.softmax(t, -1, dtype=torch.float64), make((5, 7)))
    check(lambda t: t.softmax(-1, torch.float32), make((5, 7), torch.float64))


def test_softmax_implicit_dim_and_module():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(lambda t: F.softmax(t), make((3, 4, 5)))
        check(lambda t: F.log_softmax(t, _stacklevel=5), make((3, 4)))
    m = torch.nn.Softmax(dim=-1)
    check(lambda t: m(t), make((4, 6)))
    lowered("row_softmax", kernels=1)


def test_softmax_large_parallel():
    check(lambda t: torch.softmax(t, -1), make((1, 8, 128, 128)))
    check(lambda t: torch.softmax(t, 1), make((1, 8, 128, 128)))
    check(lambda t: torch.log_softmax(t, -1), make((4, 20000)))
    check(lambda t: torch.softmax(t, 0), make((40000,)))


def test_softmax_eager_backend():
    check(lambda t: torch.softmax(t * 2, -1) + 1, make((4, 6)), backend="eager")
    check(lambda t: F.layer_norm(t, (6,)) * 2, make((4, 6)), backend="eager")
    check(lambda a, b: F.mse_loss(a, b) + 1, make((4, 6)), make((4, 6), seed=1), backend="eager")


def test_softmax_then_pointwise():
    check(lambda t: torch.softmax(t, -1) * 2 + 1, make((4, 6)))
    _, src = last()
    assert src.count("CDY_EXPORT void kernel_") == 1, src      # epilogue fused
    check(lambda t: (torch.softmax(t, -1), torch.log_softmax(t, 0)), make((4, 6)))


# ---- pointwise epilogue fused into the row kernel's final pass ---------------------

def test_epilogue_fusion():
    x, w, b, r = make((4, 6, 32)), make((32,), seed=1), make((32,), seed=2), make((4, 6, 32), seed=3)
    check(lambda t, w, b, r: F.gelu(F.layer_norm(t, (32,), w, b)) + r, x, w, b, r)
    lowered("row_layer_norm", kernels=1)

    def two(t, r):
        y = torch.softmax(t, 1)        # column mode
        return y * r, y

    check(two, x, r)
    lowered("row_softmax", kernels=1)
    check(lambda t, r: torch.log_softmax(t, -1).exp() > r, x[0].t(), make((32, 6), seed=7))
    lowered("row_log_softmax", kernels=1)
    g = make((2, 8, 5, 5))
    gw = make((8,), seed=4)
    check(lambda t, w: torch.relu(F.group_norm(t, 4, w)) * 3, g, gw)
    lowered("row_group_norm", kernels=1)
    check(lambda t, w: F.group_norm(t, 4, w) + w.reshape(8, 1, 1), g, gw)   # per-channel arg
    check(lambda t, w: F.group_norm(t, 4, w) + w[:5], g, gw)
    bn_m, bn_v = make((8,), seed=5), make((8,), seed=6).abs() + 0.5
    check(lambda t, m, v: torch.relu(F.batch_norm(t, m, v, None, None, False, 0.1, 1e-5)) - 1,
          g, bn_m, bn_v)
    lowered("reciprocal", kernels=1)   # batch norm is pointwise: relu and - 1 fuse into it


def test_epilogue_not_fused_when_it_reads_later_values():
    x = make((4, 16))

    def f(t):
        y = torch.softmax(t, -1)
        z = y.sum(-1, keepdim=True)        # a reduction after the row op
        return y / z + y.amax(-1, keepdim=True)

    check(f, x)
    check(lambda t: F.layer_norm(t, (16,)) + F.layer_norm(t * 2, (16,)), x)
    check(lambda t: F.layer_norm(torch.softmax(t, -1), (16,)) * 2, x)



def test_epilogue_node_is_computed_by_one_row_kernel_only():
    """A pointwise node fused into a norm's epilogue (the norm left unstored: only the
    epilogue reads it) is not fused again into a later row kernel's epilogue, which
    would read the norm's unwritten buffer (fuzz f14: segfault)."""
    x, w = make((8,), torch.float64), make((8,), torch.float64, seed=1)

    def f(a, w):
        t = F.layer_norm(a, (8,), w, eps=1e-5)
        F.softmax(w, dim=0)                    # unused: its own row kernel
        return t ** 7

    check(f, x, w)
    g = make((2, 8, 5), seed=2)
    check(lambda t, w: (F.group_norm(t, 4, w), torch.softmax(w, 0))[0] * 3, g, make((8,), seed=3))


# ---- layer_norm -------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,nshape", [((10,), (10,)), ((4, 7), (7,)), ((3, 5, 8), (8,)),
                                          ((3, 5, 8), (5, 8)), ((2, 3, 4, 5), (3, 4, 5)),
                                          ((4, 1), (1,)), ((2, 3), (2, 3))])
@pytest.mark.parametrize("affine", ["none", "weight", "both", "bias"])
def test_layer_norm(dtype, shape, nshape, affine):
    x = make(shape, dtype) + 3
    w = make(nshape, dtype, seed=1) if affine in ("weight", "both") else None
    b = make(nshape, dtype, seed=2) if affine in ("bias", "both") else None
    check(lambda t, w, b: F.layer_norm(t, nshape, w, b), x, w, b)
    lowered("row_layer_norm", kernels=1)
    cdynamo.reset()
    check(lambda t, w, b: torch.layer_norm(t, list(nshape), w, b, 1e-3), x, w, b)


def test_layer_norm_variants():
    x = make((6, 32))
    check(lambda t: F.layer_norm(t * 2 + 1, (32,), eps=0.1), x)
    lowered("row_layer_norm", kernels=1)
    check(lambda t: F.layer_norm(t.t(), (6,)), x)
    ln = torch.nn.LayerNorm(32)
    with torch.no_grad():
        ln.weight.copy_(make((32,), seed=3))
        ln.bias.copy_(make((32,), seed=4))
    with torch.no_grad():
        check(lambda t: ln(t), x)
    check(lambda t: F.layer_norm(t, (0,)), make((3, 0)))
    check(lambda t: F.layer_norm(t, (4,)), make((0, 4)))
    check(lambda t: F.layer_norm(t, (16,)), torch.full((3, 16), 5.0))    # zero variance
    y = make((4, 16))
    y[1, 3] = float("nan")
    y[2, 0] = float("inf")
    check(lambda t: F.layer_norm(t, (16,)), y)
    check(lambda t: F.layer_norm(t, (1024,)), make((64, 1024)) * 100 + 1000)
    check(lambda t: F.layer_norm(t, (20000,)), make((3, 20000)) + 50)


def test_layer_norm_channels_last():
    x = make((2, 4, 3, 5)).to(memory_format=torch.channels_last)
    check(lambda t: F.layer_norm(t, (3, 5)), x)
    check(lambda t: F.layer_norm(t, (5,)), x)


# ---- group_norm ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 6), (2, 6, 5), (3, 6, 4, 5), (1, 6, 2, 3, 2)])
@pytest.mark.parametrize("groups", [1, 2, 3, 6])
@pytest.mark.parametrize("affine", [False, True])
def test_group_norm(dtype, shape, groups, affine):
    x = make(shape, dtype) + 1
    w = make((6,), dtype, seed=1) if affine else None
    b = make((6,), dtype, seed=2) if affine else None
    check(lambda t, w, b: F.group_norm(t, groups, w, b), x, w, b)
    if x[0, : 6 // groups].numel() > 1:     # one element per group stays extern
        lowered("row_group_norm", kernels=1)


def test_group_norm_variants():
    x = make((2, 8, 5, 5))
    w, b = make((8,), seed=1), make((8,), seed=2)
    check(lambda t, w, b: F.group_norm(t * 2 - 1, 4, w, b, eps=1e-2), x, w, b)
    lowered("row_group_norm", kernels=1)
    # channels_last input: not lowered (eager's result is channels_last, the meta kernel's
    # contiguous; the extern keeps the meta's strides: a pre-existing tracer limitation)
    xc = x.to(memory_format=torch.channels_last)
    torch.testing.assert_close(cdynamo.optimize(lambda t, w: F.group_norm(t, 2, w))(xc, w),
                               F.group_norm(xc, 2, w))
    check(lambda t: torch.group_norm(t, 4), x)
    gn = torch.nn.GroupNorm(4, 8)
    with torch.no_grad():
        gn.weight.copy_(w)
        gn.bias.copy_(b)
        check(lambda t: gn(t), x)
    check(lambda t, w: F.group_norm(t, 2, w * 2), x, w)          # weight computed: correct
    check(lambda t: F.group_norm(t, 2), make((0, 8, 3)))
    check(lambda t: F.group_norm(t, 2), make((2, 8, 0)))
    check(lambda t: F.group_norm(t, 4), make((16, 64, 32, 32)))


# ---- losses -------------------------------------------------------------------

LOSSES = {
    "mse": lambda a, b, r: F.mse_loss(a, b, reduction=r),
    "l1": lambda a, b, r: F.l1_loss(a, b, reduction=r),
    "smooth_l1": lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r),
    "smooth_l1_b0": lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.0),
    "smooth_l1_b05": lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.5),
    "smooth_l1_b3": lambda a, b, r: F.smooth_l1_loss(a, b, None, None, r, 3),
}


@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_losses(loss, reduction, dtype):
    fn = LOSSES[loss]
    a, b = make((7, 9), dtype), make((7, 9), dtype, seed=1)
    check(lambda x, y: fn(x, y, reduction), a, b)
    g, src = last()
    assert "extern" not in g, g
    assert src.count("CDY_EXPORT void kernel_") == 1, src
    if reduction != "none":
        assert f"= {reduction}(" in g, g


@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_losses_broadcast_and_edges(loss, reduction):
    fn = LOSSES[loss]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(lambda x, y: fn(x, y, reduction), make((4, 5)), make((5,), seed=1))
        check(lambda x, y: fn(x, y, reduction), make((4, 1)), make((3, 1, 5), seed=1))
    check(lambda x, y: fn(x, y, reduction), make((0, 3)), make((0, 3), seed=1))
    check(lambda x, y: fn(x, y, reduction), make(()), make((), seed=1))
    check(lambda x, y: fn(x, y, reduction), make((6, 4)).t(), make((4, 6), seed=1))
    check(lambda x, y: fn(x * 2, y + 1, reduction), make((300, 200)), make((300, 200), seed=1))


def test_losses_modules_and_values():
    a, b = make((4, 8)), make((4, 8), seed=1)
    for m in (torch.nn.MSELoss(), torch.nn.L1Loss(reduction="sum"),
              torch.nn.SmoothL1Loss(beta=0.25), torch.nn.SmoothL1Loss(reduction="none")):
        check(lambda x, y: m(x, y), a, b)
        cdynamo.reset()
    a[0, 0] = float("nan")
    a[1, 1] = float("inf")
    for r in ("none", "mean"):
        check(lambda x, y: F.smooth_l1_loss(x, y, reduction=r), a, b)
    check(lambda x, y: F.mse_loss(x, y), make((1 << 20,)), make((1 << 20,), seed=1))


def test_mse_loss_one_kernel():
    check(lambda x, y: F.mse_loss(x, y), make((64, 64)), make((64, 64), seed=1))
    g, src = last()
    assert "= mean(" in g and "extern" not in g, g
    assert src.count("CDY_EXPORT void kernel_") == 1, src


def test_losses_not_lowered_stay_correct():
    a, b = make((4, 5)), make((4, 5), seed=1)
    check(lambda x, y: F.mse_loss(x, y.double()), a, b)                  # mixed dtypes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(lambda x, y: F.l1_loss(x, y, size_average=False), a, b)    # legacy args


# ---- batch_norm (eval) ----------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 6), (2, 6, 7), (2, 6, 4, 5), (1, 6, 2, 3, 2), (3, 6, 1, 1)])
@pytest.mark.parametrize("affine", [False, True])
def test_batch_norm_eval(dtype, shape, affine):
    x = make(shape, dtype)
    rm, rv = make((6,), dtype, seed=1), make((6,), dtype, seed=2).abs() + 0.1
    w = make((6,), dtype, seed=3) if affine else None
    b = make((6,), dtype, seed=4) if affine else None
    check(lambda t, m, v, w, b: F.batch_norm(t, m, v, w, b, False, 0.1, 1e-3), x, rm, rv, w, b)
    lowered("reciprocal", kernels=1)   # pointwise; scale and shift recomputed (small input)


def test_batch_norm_module_and_fusion():
    bn = torch.nn.BatchNorm2d(8).eval()
    with torch.no_grad():
        bn.running_mean.copy_(make((8,), seed=1))
        bn.running_var.copy_(make((8,), seed=2).abs() + 0.5)
        bn.weight.copy_(make((8,), seed=3))
        bn.bias.copy_(make((8,), seed=4))
        x = make((2, 8, 6, 6))
        check(lambda t: torch.relu(bn(t * 2 + 1)), x)
        g, src = last()
        assert "= reciprocal(" in g and "extern" not in g, g
        assert src.count("CDY_EXPORT void kernel_") == 1, src
        # a large input: the per-channel scale and shift get a kernel of their own,
        # computed once, instead of once per element
        check(lambda t: torch.relu(bn(t)), make((16, 8, 32, 32)))
        lowered("reciprocal", kernels=2)
        r = cdynamo._support.compiles[-1]["compiled"].ir_post_fusion
        assert "iteration space [8, 1, 1]" in r, r
        # channels_last and fused into max pooling: one kernel after the scale/shift one
        xl = make((4, 8, 32, 32)).to(memory_format=torch.channels_last)
        check(lambda t: F.max_pool2d(torch.relu(bn(t)), 2), xl)
        lowered("reciprocal", kernels=2)


def test_batch_norm_training_stays_extern():
    rm, rv = torch.zeros(4), torch.ones(4)

    def f(t):
        return F.batch_norm(t, rm.clone(), rv.clone(), training=True)

    check(f, make((3, 4, 5)), compiled=False)


# ---- more edge cases ------------------------------------------------------------

def test_softmax_int_input_with_dtype_and_expanded():
    xi = torch.randint(-3, 4, (4, 6))
    check(lambda t: torch.softmax(t, -1, dtype=torch.float32), xi)
    lowered("row_softmax", kernels=1)
    check(lambda t: torch.log_softmax(t, 0, dtype=torch.float64), xi)
    xe = make((1, 6)).expand(4, 6)
    check(lambda t: torch.softmax(t, -1), xe)
    check(lambda t: torch.softmax(t, 0), xe)


def test_layer_norm_fused_weight_and_chain():
    x, w, b = make((5, 12)), make((12,), seed=1), make((12,), seed=2)
    check(lambda t, w, b: F.layer_norm(t + 1, (12,), w * 2, b - 1), x, w, b)
    lowered("row_layer_norm", kernels=1)
    check(lambda t, w, b: torch.softmax(F.layer_norm(t, (12,), w, b), -1).sum(-1), x, w, b)
    check(lambda t: F.layer_norm(t, t.shape[-2:]), make((3, 4, 5)))


def lanes(src, acc="s"):
    """The lane count of sum `acc` in a kernel's source (0: one simd reduction)."""
    for nl in (64, 32, 16, 8):
        if f"{acc}_l[{nl}]" in src:
            return nl
    return 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [100, 512, 1000, 1024, 2100])
def test_layer_norm_sums_in_lanes(dtype, n):
    """Rows of 8 lane blocks or more sum into 64 float / 32 double partial
    sums and a tail; rows of one vector or more into one vector's lanes,
    folded as a tree; shorter rows in one simd reduction.  Results as
    eager's, with a fused prologue and affine."""
    long, vec = (64, 16) if dtype == torch.float32 else (32, 8)
    want = lambda m: long if m >= 8 * long else vec if m >= vec else 0
    x, w, b = make((6, n), dtype) + 3, make((n,), dtype, seed=1), make((n,), dtype, seed=2)
    check(lambda t, w, b: F.gelu(F.layer_norm(t * 2 - 1, (n,), w, b)), x, w, b)
    lowered("row_layer_norm", kernels=1)
    _, src = last()
    nl = want(n)
    assert lanes(src, "s") == lanes(src, "q") == nl, src
    assert (f"r0 = {n // nl * nl}LL; r0 < {n}LL" in src) == (n % nl != 0), src
    check(lambda t: F.layer_norm(t.t(), (n,)), make((n, 6), dtype))     # strided rows
    check(lambda t: F.layer_norm(t, (6,)), make((n, 6), dtype))         # short rows: one sum
    assert lanes(last()[1]) == 0
    check(lambda t: F.layer_norm(t, (4, n // 4)), make((3, 4, n // 4), dtype) * 50 + 7)
    gw, gb = make((6,), dtype, seed=3), make((6,), dtype, seed=4)
    check(lambda t, w, b: F.group_norm(t + 1, 3, w, b), make((2, 6, n // 2), dtype), gw, gb)
    lowered("row_group_norm", kernels=1)
    assert lanes(last()[1]) == want(n // 2)      # lanes over the innermost dim


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_prefetches_next_row(dtype):
    """A layer_norm over 4 MiB or more of long rows prefetches the next row's
    lines (16 per block of 1 KiB) in its final pass, the one with the affine
    map and the fused epilogue, and never past the last row; a smaller
    input, the affine weights and strided rows get none.  Results as
    eager's, the last row included."""
    rows = (4 << 20) // (1024 * dtype.itemsize)
    x, w, b = make((rows, 1024), dtype), make((1024,), dtype, seed=1), make((1024,), dtype, seed=2)
    check(lambda t, w, b: F.gelu(F.layer_norm(t, (1024,), w, b)), x, w, b)
    _, src = last()
    assert src.count("__builtin_prefetch(pf + ") == 16, src
    final = src[src.index("rs = "):]         # the pass after the variance
    assert final.count("__builtin_prefetch(pf + ") == 16 and "gelu" in final, src
    assert f"rb += {1024 // dtype.itemsize}" in final, src
    assert f"if (i0 + 1 < {rows}LL)" in src, src
    assert "&in_ptr0[i0 * 1024LL + r0 + 1024LL]" in src, src
    check(lambda t: F.layer_norm(t, (1024,)), x[: rows // 2].clone())     # 2 MiB: none
    assert "__builtin_prefetch" not in last()[1]
    check(lambda t: F.layer_norm(t.t(), (1024,)), x.reshape(1024, rows).clone())
    assert "__builtin_prefetch" not in last()[1]


@pytest.mark.parametrize("log", [False, True])
def test_softmax_prefetches_next_row(log):
    """Softmax over 4 MiB or more of long rows prefetches the next row in its
    exp pass (the sum), the one with the most arithmetic; none below 4 MiB.
    Results as eager's, the last row included."""
    fn = torch.log_softmax if log else torch.softmax
    x = make((1024, 1024)) * 4
    check(lambda t: fn(t, -1), x)
    _, src = last()
    assert src.count("__builtin_prefetch(pf + ") == 4, src
    assert "if (i0 + 1 < 1024LL)" in src, src
    exp_pass = src[src.index("mx = x0 > mx"):src.index("sum_l[rl]")]
    assert "__builtin_prefetch" in exp_pass, src
    check(lambda t: fn(t, -1), x[:512].clone())
    assert "__builtin_prefetch" not in last()[1]


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(8, 128, 128), (5, 40), (3, 7), (4, 1100)])
def test_softmax_sum_in_lanes(log, shape):
    x = make(shape) * 3
    x[0, 1] = float("-inf")
    fn = torch.log_softmax if log else torch.softmax
    check(lambda t: fn(t, -1), x)
    n = shape[-1]
    assert lanes(last()[1], "sum") == (64 if n >= 512 else 16 if n >= 16 else 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_meta_in_c(dtype):
    """layer_norm's result meta comes from C (trace/meta.c) for a contiguous
    input: eager's values, sizes, strides and dtype with every spelling of
    normalized_shape and of the affine args; shapes torch rejects raise
    eager's error; a non-contiguous input keeps eager's layout."""
    from conftest import check_raises
    x = make((3, 4, 6), dtype)
    w, b = make((4, 6), dtype, seed=1), make((4, 6), dtype, seed=2)
    for fn in (lambda t: F.layer_norm(t, (6,)), lambda t: F.layer_norm(t, [4, 6], w, b),
               lambda t: F.layer_norm(t, [6], w[0], None, 1e-3),
               lambda t: torch.layer_norm(t, (4, 6), None, b, 1e-2),
               lambda t: F.layer_norm(t, t.shape[1:], w, b) * 2):
        cdynamo.reset()
        st = check(fn, x)
        assert st["frames_compiled"] == 1 and st["graph_breaks"] == 0, st
        assert cdynamo.optimize(fn)(x).stride() == fn(x).stride()
    check_raises(lambda t: F.layer_norm(t, (5,)), x)
    check_raises(lambda t: F.layer_norm(t, 6), x)             # torch wants a sequence
    check_raises(lambda t: F.layer_norm(t, (6,), w), x)
    check_raises(lambda t: F.layer_norm(t, (6,), w[0].float() if dtype == torch.float64
                                        else w[0].double()), x)
    xt = x.transpose(0, 2)
    assert cdynamo.optimize(lambda t: F.layer_norm(t, (3,)))(xt).stride() == \
        F.layer_norm(xt, (3,)).stride()


def test_layer_norm_trace_needs_no_torch_meta():
    """Tracing an nn.LayerNorm and a linear layer runs no torch meta function
    (sympy is not imported)."""
    from conftest import assert_traces_without_torch_meta
    assert_traces_without_torch_meta("""
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU())
        x = torch.randn(4, 8)
        compiled, eager = lambda: cdynamo.optimize(m)(x), lambda: m(x)
        """)
