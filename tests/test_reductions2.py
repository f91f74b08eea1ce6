"""Differential tests of the reductions lowered besides sum/mean/amax/amin/prod:
argmax/argmin, max/min (with and without a dim: values and indices from one
kernel), any/all, count_nonzero, var/std (and var_mean/std_mean), vector norms
(torch.linalg.vector_norm, torch.norm, Tensor.norm) and F.normalize, against
eager PyTorch: dtypes, dims, keepdim, layouts, NaN, ties, empty inputs, fused
prologues, kernel counts."""
import math

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import check
from test_reductions import graph, lam, make, run

INTS = [torch.uint8, torch.int32, torch.int64]
FLOATS = [torch.float32, torch.float64]
ALL = [torch.bool] + INTS + FLOATS

# var/std with correction >= N warn about the degrees of freedom (eager and compiled alike);
# a frame that cdynamo fails to compile (it warns and runs eagerly) fails the test
pytestmark = [pytest.mark.filterwarnings("ignore:.*degrees of freedom"),
              pytest.mark.filterwarnings("error::cdynamo.CdynamoWarning")]


def source():
    return cdynamo._support.compiles[-1]["source"]


def kernels():
    return source().count("CDY_EXPORT void kernel_")


def with_nan(x, seed=3):
    """x with about one element in eight NaN (several per row)."""
    g = torch.Generator().manual_seed(seed)
    x = x.clone()
    x[torch.rand(x.shape, generator=g) < 0.125] = float("nan")
    return x


def layouts(x):
    """x contiguous, transposed, channels_last-like permuted, sliced, expanded."""
    return [x, x.transpose(0, 2), x.permute(1, 2, 0).contiguous().permute(2, 0, 1),
            x[:, ::2], x[:, :1].expand(x.shape)]


# ---- argmax / argmin -----------------------------------------------------------

@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", INTS + FLOATS)
@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_arg_dims_dtypes(op, dtype, dim, keepdim):
    x = make(dtype, (4, 5, 6))      # ints in [-5, 6): many ties
    run(lam(f"lambda t: t.{op}({dim}, keepdim={keepdim})"), x, lowered=op)
    run(lam(f"lambda t: torch.{op}(t, dim={dim}, keepdim={keepdim})"), x, lowered=op)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_nan_ties_layouts(op):
    x = make(torch.float32, (6, 7, 8))
    x = torch.where(x > 1, torch.full_like(x, 2.0), x)     # ties at the max
    for t in layouts(with_nan(x)) + layouts(x.round()):
        for dim in (None, 0, 1, 2):
            run(lam(f"lambda t: t.{op}({dim})"), t, lowered=op)
    allnan = torch.full((3, 4), float("nan"))
    run(lam(f"lambda t: t.{op}(1)"), allnan, lowered=op)
    inf = torch.full((3, 4), -math.inf if op == "argmax" else math.inf)
    run(lam(f"lambda t: t.{op}(1)"), inf, lowered=op)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_raises_and_edge(op):
    run(lam(f"lambda t: t.{op}(1)"), torch.randn(3, 0))          # eager raises
    run(lam(f"lambda t: t.{op}()"), torch.randn(0, 4))           # eager raises
    run(lam(f"lambda t: t.{op}(0)"), torch.randn(3, 0), lowered=op)   # empty result
    run(lam(f"lambda t: t.{op}(1)"), torch.rand(3, 4) > 0.5)     # bool: eager raises
    run(lam(f"lambda t: t.{op}()"), torch.tensor(2.5), lowered=op)
    run(lam(f"lambda t: t.{op}(0)"), torch.tensor(2.5), lowered=op)


def test_arg_fused_prologue():
    x = make(torch.float32, (16, 32))
    y = make(torch.float32, (32,), seed=1)
    run(lambda a, b: (a * 2 - b).argmax(1), x, y, lowered="argmax")
    assert kernels() == 1
    run(lambda a: (a * a).argmin(), x, lowered="argmin")
    assert kernels() == 1


# ---- max / min -------------------------------------------------------------------

@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_minmax_dim(op, dtype, dim, keepdim):
    x = make(dtype, (4, 5, 6))
    g = run(lam(f"lambda t: torch.{op}(t, {dim}, keepdim={keepdim})"), x)
    assert "extern" not in g and f"= arg{op}(" in g, g
    assert kernels() == 1
    run(lam(f"lambda t: t.{op}(dim={dim}, keepdim={keepdim})"), x)
    assert "extern" not in graph()


@pytest.mark.parametrize("op", ["max", "min"])
def test_minmax_nan_layouts(op):
    x = make(torch.float32, (6, 7, 8)).round()       # ties
    for t in layouts(with_nan(x)) + layouts(x):
        for dim in (0, 1, 2):
            run(lam(f"lambda t: torch.{op}(t, {dim})"), t)
            assert "extern" not in graph()


@pytest.mark.parametrize("op", ["max", "min"])
def test_minmax_all(op):
    amax = "amax" if op == "max" else "amin"
    for dtype in ALL:
        x = make(dtype, (5, 6))
        run(lam(f"lambda t: torch.{op}(t) * 1"), x, lowered=amax)
        run(lam(f"lambda t: t.{op}()"), x, lowered=amax)
    run(lam(f"lambda t: t.{op}()"), with_nan(make(torch.float64, (5, 6))), lowered=amax)
    run(lam(f"lambda t: t.{op}()"), torch.randn(0, 3))               # eager raises
    run(lam(f"lambda t: torch.{op}(t, 1)"), torch.randn(3, 0))       # eager raises


def test_minmax_fused_one_kernel():
    x = make(torch.float32, (64, 128))
    g = run(lambda t: torch.max(t * 2, 1), x)
    assert "= mul(" in g and "= amax(" in g and "= argmax(" in g and "extern" not in g, g
    assert kernels() == 1
    assert "out_ptr1" in source()
    run(lambda t: t.min(-1, keepdim=True)[1] + 1, x)
    assert kernels() == 2 and "extern" not in graph()


def test_minmax_binary_still_elementwise():
    x = make(torch.float32, (4, 5))
    y = make(torch.float32, (4, 5), seed=1)
    run(lambda a, b: torch.max(a, b), x, y)
    run(lambda a, b: torch.min(a, b) + 1, x, y)
    run(lambda a, b: a.max(b), x, y)


def test_minmax_eager_backend():
    x = make(torch.float32, (4, 5))
    check(lambda t: t.max(1)[0] + t.min(1)[1], x, backend="eager")
    check(lambda t: torch.var_mean(t, 1)[1] * 2, x, backend="eager")


# ---- any / all / count_nonzero ---------------------------------------------------

@pytest.mark.parametrize("op", ["any", "all"])
@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_any_all(op, dtype, dim, keepdim):
    x = make(dtype, (4, 5, 6))
    if dtype != torch.bool:
        x = x * (make(torch.bool, (4, 5, 6), seed=2) | (torch.arange(6) < 5))
    if dim is None and keepdim:
        pytest.skip("any/all take keepdim only with a dim")
    src = f"lambda t: t.{op}()" if dim is None else f"lambda t: t.{op}({dim}, keepdim={keepdim})"
    run(lam(src), x, lowered=op)
    run(lam(f"lambda t: torch.{op}(t * 2, dim=1)"), x.to(torch.float32), lowered=op)


def test_any_all_edge():
    run(lambda t: (t > 0).all(-1), torch.randn(3, 0), lowered="all")
    run(lambda t: (t > 0).any(-1), torch.randn(3, 0), lowered="any")
    run(lambda t: t.any(), torch.tensor([0.0, float("nan")]), lowered="any")
    run(lambda t: t.all(0), torch.zeros(4, 3, dtype=torch.uint8).t(), lowered="all")
    run(lambda t: torch.any(t), torch.tensor(0, dtype=torch.uint8), lowered="any")


@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2), (1, 2, 0)])
def test_count_nonzero(dim):
    for dtype in ALL:
        x = make(dtype, (4, 5, 6))
        src = "lambda t: torch.count_nonzero(t)" if dim is None else \
            f"lambda t: t.count_nonzero({dim})"
        run(lam(src), x, lowered="count_nonzero")
    run(lambda t: torch.count_nonzero(t - 1, dim=1), with_nan(make(torch.float32, (3, 8))),
        lowered="count_nonzero")


# ---- var / std --------------------------------------------------------------------

@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("kw", ["", "keepdim=True", "correction=0", "correction=2, keepdim=True",
                                "unbiased=False", "correction=1.5", "correction=40"])
def test_var_std(op, dtype, dim, kw):
    x = make(dtype, (4, 5, 6))
    sep = ", " if kw else ""
    src = f"lambda t: t.{op}({kw})" if dim is None else f"lambda t: t.{op}({dim}{sep}{kw})"
    if dim is None and "keepdim" in kw:
        src = f"lambda t: torch.{op}(t, None{sep}{kw})"
    run(lam(src), x, lowered=op)


@pytest.mark.parametrize("op", ["var", "std"])
def test_var_std_forms(op):
    x = make(torch.float32, (6, 7, 8))
    run(lam(f"lambda t: t.{op}(1, True)"), x, lowered=op)
    run(lam(f"lambda t: t.{op}(1, False, True)"), x, lowered=op)
    run(lam(f"lambda t: t.{op}(False)"), x, lowered=op)
    run(lam(f"lambda t: torch.{op}(t, dim=[0, 1], unbiased=True)"), x, lowered=op)
    for t in layouts(x) + layouts(with_nan(x)):
        run(lam(f"lambda t: t.{op}(-1)"), t, lowered=op)
    run(lam(f"lambda t: (t * 3 + 1).{op}(0)"), x, lowered=op)
    run(lam(f"lambda t: t.{op}(1)"), torch.randn(3, 1), lowered=op)       # N=1: nan
    run(lam(f"lambda t: t.{op}(1)"), torch.randn(3, 0), lowered=op)       # empty: nan
    run(lam(f"lambda t: t.{op}()"), torch.tensor(1.5), lowered=op)
    run(lam(f"lambda t: t.{op}(1)"), torch.full((2, 5), math.inf), lowered=op)
    run(lam(f"lambda t: t.{op}(1)"), make(torch.int64, (3, 4)))          # eager raises
    run(lam(f"lambda t: t.{op}(1, correction=1, unbiased=True)"), x)    # eager raises


@pytest.mark.parametrize("op", ["var", "std", "var_mean", "std_mean"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_var_of_equal_values_is_zero(op, dtype):
    # equal elements (a stride-0 dim, a constant row): eager's Welford variance is 0
    # exactly; sum / n of 1e30s is off by ulps and its squared deviations were 1.4e14
    g = torch.Generator().manual_seed(5)
    vals = torch.tensor([1e30, -3.7e29, 0.1, 1e-300, 7.123456789e15, 65504.0, 3e38],
                        dtype=torch.float64).to(dtype)
    x = vals[torch.randint(0, 7, (1, 5, 1), generator=g)].expand(6, 5, 9)
    for src in ["lambda t: torch.{op}(t, 0)", "lambda t: torch.{op}(t, (0, 2), keepdim=True)",
                "lambda t: torch.{op}(t, -1, correction=0)", "lambda t: torch.{op}(t, 0, unbiased=False)",
                "lambda t: torch.{op}(t.contiguous(), 2)", "lambda t: torch.{op}(t, (0, 2), correction=2)"]:
        cdynamo.reset()
        check(lam(src.format(op=op)), x)
    cdynamo.reset()
    check(lam(f"lambda t: torch.{op}(t, 0)"), vals[:1].expand(3000, 2).clone())


@pytest.mark.parametrize("op", ["var", "std"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_var_short_rows_bit_equal_to_welford(op, dtype):
    # eager reduces var / std over a dim by Welford, in order: rows of 0s and 1s give
    # 0.375 or 0.37500000000000006 by the order of the same values, and argmin over
    # them breaks the tie by those ulps (fuzz reductions_wrong_93d7d3a12a); rows up to
    # 64 (any length in block mode) are eager's bit for bit, ties fall the same way
    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, 2, (3, 2, 4, 4), generator=g).to(dtype).permute(3, 2, 1, 0)
    y = torch.randn(40, 9, 33, generator=g, dtype=torch.float64).to(dtype)
    cases = [("lambda t: torch.{op}(t, 1, correction=2, keepdim=True)", x),
             ("lambda t: torch.{op}(t, 0)", x), ("lambda t: torch.{op}(t, 3, correction=0)", x),
             ("lambda t: torch.{op}(t, -1)", y), ("lambda t: torch.{op}(t, 0)", y),
             ("lambda t: torch.{op}(t, (0, 1), correction=0)", y.contiguous()),
             ("lambda t: torch.argmin(torch.{op}(t, 1, correction=2), 0)", x)]
    for src, t in cases:
        cdynamo.reset()
        fn = lam(src.format(op=op))
        torch.testing.assert_close(cdynamo.optimize(fn)(t), fn(t), rtol=0, atol=0, msg=src)
    cdynamo.reset()
    fn = lam(f"lambda t: t.{op}(1)")     # longer rows in row mode: the two-pass, close
    long = torch.randn(8, 300, dtype=torch.float64)
    torch.testing.assert_close(cdynamo.optimize(fn)(long), fn(long), rtol=1e-14, atol=0)


def test_var_large_values():
    x = torch.randn(64, 1000, dtype=torch.float32) + 1e4     # cancellation: two passes
    run(lambda t: t.var(-1), x, lowered="var")
    run(lambda t: t.std(), x, lowered="std")


@pytest.mark.parametrize("op", ["var_mean", "std_mean"])
def test_var_mean(op):
    x = make(torch.float32, (4, 5, 6))
    first = op.split("_")[0]
    for src in ["lambda t: torch.{op}(t, 1)", "lambda t: torch.{op}(t, (0, 2), keepdim=True)",
                "lambda t: torch.{op}(t, correction=0)", "lambda t: torch.{op}(t, -1, False)"]:
        g = run(lam(src.format(op=op)), x)
        assert f"= {first}(" in g and "= _cdy_welford_mean(" in g and "extern" not in g, g
    g = run(lam(f"lambda t: torch.{op}(t * 2, 1)[0] + torch.{op}(t, 1)[1]"), x)
    assert "extern" not in g


@pytest.mark.parametrize("op", ["var_mean", "std_mean"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_var_mean_welford_mean_of_inf(op, dtype):
    # eager's var_mean mean is a Welford mean: an inf makes each later update inf - inf
    # (NaN), so the mean is +-inf only when the one inf is the last element (whatever the
    # loop order: every reduced index at its last); torch.mean of the same is inf
    x = make(torch.float64, (3, 4, 5))
    cases = []
    for where in [(2, 3, 4), (0, 0, 0), (1, 2, 3), (2, 3, 0), (0, 3, 4)]:
        for v in [math.inf, -math.inf]:
            t = x.clone()
            t[where] = v
            cases.append(t)
    two = x.clone()
    two[2, 3, 4] = two[0, 0, 4] = math.inf
    cases += [two, torch.full((3, 4, 5), math.inf, dtype=torch.float64)]
    for t in cases:
        t = t.to(dtype)
        for src in ["lambda t: torch.{op}(t, (0, 1))", "lambda t: torch.{op}(t, -1, keepdim=True)",
                    "lambda t: torch.{op}(t, correction=0)", "lambda t: torch.{op}(t.transpose(0, 2), 1)",
                    "lambda t: torch.{op}(t, (0, 2), unbiased=False)",
                    "lambda t: (torch.{op}(t, 1)[1], torch.mean(t, 1))"]:
            cdynamo.reset()
            check(lam(src.format(op=op)), t)


def test_var_mean_float64_sum_overflow():
    # a float64 sum that overflows where eager's Welford mean does not
    x = torch.full((4, 6), 1.5e308, dtype=torch.float64)
    x[1] = -1e300
    run(lambda t: torch.var_mean(t, 1)[1], x)
    run(lambda t: torch.std_mean(t, 1, keepdim=True)[1] * 0.5, x)


# ---- norms ---------------------------------------------------------------------------

ORDS = [2, 1, math.inf, -math.inf, 0, 3, 0.5, -1.5, 2.0]


@pytest.mark.parametrize("ord", ORDS)
@pytest.mark.parametrize("dim", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_vector_norm(ord, dim, keepdim):
    for dtype in FLOATS:
        x = make(dtype, (4, 5, 6))
        x[0, 0, 0] = 0
        fn = lam(f"lambda t: torch.linalg.vector_norm(t, {ord!r}, {dim}, {keepdim})"
                 .replace("inf", "float('inf')"))
        run(fn, x, lowered="vector_norm")


def test_vector_norm_nan_layouts():
    x = with_nan(make(torch.float32, (6, 7, 8)))
    for t in layouts(x) + layouts(x.nan_to_num()):
        for ord in ORDS:
            fn = lam(f"lambda t: torch.linalg.vector_norm(t, {ord!r}, -1)"
                     .replace("inf", "float('inf')"))
            run(fn, t, lowered="vector_norm")
    run(lambda t: torch.linalg.vector_norm(t * 2 + 1), x, lowered="vector_norm")
    assert kernels() == 1


def test_vector_norm_of_one_element_is_abs_exactly():
    """A norm over dims of size 1 is eager's |x| bit for bit (fuzz
    reductions_wrong_a76ad93125: pow(pow(|x|, 3), 1/3) was an ulp off, and the
    == after it flipped); sqrt(x * x) would overflow a float64 1e200."""
    x = torch.tensor([[0.056911590025744335, -6.035013699640922, 2.8051625113874055,
                       1e200, -1e-300, 0.0, math.inf, math.nan]], dtype=torch.float64)
    for t in (x, x.float(), x.reshape(1, 1, 8)):
        for ord in (3, 2, -1.5, 0.5, 0, math.inf):
            for dim in (0, (0, 1) if t.dim() == 3 else 0):
                fn = lam(f"lambda t: torch.linalg.vector_norm(t, {ord!r}, {dim})"
                         .replace("inf", "float('inf')"))
                out = cdynamo.optimize(fn)(t)
                assert torch.equal(out.nan_to_num(7.0), fn(t).nan_to_num(7.0)), (ord, dim, out)
                assert "= vector_norm(" in graph()
    one = torch.tensor([0.1], dtype=torch.float64)
    assert torch.equal(cdynamo.optimize(lambda t: torch.linalg.vector_norm(t, 3))(one),
                       torch.linalg.vector_norm(one, 3))


def test_vector_norm_extern_and_raises():
    x = make(torch.float32, (4, 5))
    run(lambda t: torch.linalg.vector_norm(t, 2, 1, dtype=torch.float64), x)   # extern
    assert "extern" in graph()
    run(lambda t: torch.linalg.vector_norm(t, math.inf, 1), torch.randn(3, 0))  # eager raises
    run(lambda t: torch.linalg.vector_norm(t, 2, 1), torch.randn(3, 0))          # zeros
    run(lambda t: torch.linalg.vector_norm(t), make(torch.int64, (3, 4)))        # eager raises


def test_norm_forms():
    x = make(torch.float32, (4, 5, 6))
    for src in ["lambda t: torch.norm(t)", "lambda t: t.norm()", "lambda t: t.norm(1)",
                "lambda t: t.norm(2, -1)", "lambda t: t.norm(p=3, dim=(0, 1), keepdim=True)",
                "lambda t: torch.norm(t, 'fro', dim=(1, 2))", "lambda t: t.norm(float('inf'), 0)",
                "lambda t: t.norm(0)", "lambda t: torch.norm(t, dim=1)"]:
        run(lam(src), x, lowered="vector_norm")
    run(lambda t: torch.norm(t, "nuc", dim=(0, 1)), x[0])        # stays extern (matrix norm)
    run(lambda t: torch.norm(t, dim=1, dtype=torch.float64), x)


def test_normalize():
    x = make(torch.float32, (8, 16, 4))
    x[0, :, 0] = 0
    for src in ["lambda t: F.normalize(t)", "lambda t: F.normalize(t, dim=-1)",
                "lambda t: F.normalize(t, 1.0, 0)", "lambda t: F.normalize(t * 2, p=3, eps=1e-3)"]:
        fn = eval(src, {"F": F})  # noqa: S307 - test code
        g = run(fn, x, lowered="vector_norm")
        assert "= clamp_min(" in g and "= div(" in g, g
        assert kernels() == 2
    run(lambda t: F.normalize(t, dim=1), x.transpose(0, 2), lowered="vector_norm")


# ---- large inputs: parallel loops -----------------------------------------------------

def test_large_parallel():
    x = torch.randn(2048, 512)
    run(lambda t: t.argmax(1), x, lowered="argmax")
    run(lambda t: t.argmax(), x, lowered="argmax")
    run(lambda t: torch.max(t, 0), x)
    run(lambda t: t.var(), x, lowered="var")
    run(lambda t: t.std(0), x, lowered="std")
    run(lambda t: (t > 4).any(), x, lowered="any")
    run(lambda t: (t > -6).all(1), x, lowered="all")
    run(lambda t: torch.linalg.vector_norm(t, math.inf), x, lowered="vector_norm")
    run(lambda t: torch.linalg.vector_norm(t, 2, 1), x, lowered="vector_norm")


@pytest.mark.parametrize("ord", [2, 1, 3])
def test_large_norm_accuracy(ord):
    """Eager's float32 vector_norm over 1M elements accumulates in float32 (1e-5 to 1e-4
    relative off the exact value); ours accumulates in double: compare with the norm of
    the float64 input rounded to float32, and with eager at the error eager has."""
    x = torch.randn(2048, 512)
    fn = lam(f"lambda t: torch.linalg.vector_norm(t, {ord})")
    out = cdynamo.optimize(fn)(x)
    torch.testing.assert_close(out, fn(x.double()).float())
    torch.testing.assert_close(out, fn(x), rtol=1e-3, atol=0)   # eager: up to 1.2e-4 off


def test_return_types_fields():
    x = make(torch.float32, (6, 8))
    g = run(lambda t: t.max(dim=1).values * 2 + t.min(0).indices.sum(), x)
    assert "extern" not in g and "= argmin(" in g, g
    run(lambda t: torch.max(t * 2, -1, keepdim=True).indices, x)
    run(lambda t: torch.topk(t, 3).values + 1, x)      # an extern's namedtuple result too
    st = check(lambda t: torch.min(t, 1).values - 1, x)
    assert st["graph_breaks"] == 0


# ---- logsumexp ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, -1, (0, 2), [2, 1, 0]])
@pytest.mark.parametrize("keepdim", [False, True])
def test_logsumexp(dtype, dim, keepdim):
    x = make(dtype, (4, 5, 6)) * 20
    run(lam(f"lambda t: torch.logsumexp(t, {dim}, {keepdim})"), x, lowered="logsumexp")
    run(lam(f"lambda t: (t - 1).logsumexp(dim={dim}, keepdim={keepdim})"), x,
        lowered="logsumexp")


def test_logsumexp_edge():
    x = make(torch.float32, (6, 7))
    for t in [with_nan(x), x.t(), torch.full((3, 4), -math.inf), torch.full((3, 4), math.inf),
              torch.tensor([[1.0, math.inf, -math.inf], [-math.inf, -math.inf, 2.0]]),
              torch.randn(3, 0), x * 1000]:
        run(lambda t: t.logsumexp(-1), t, lowered="logsumexp")
    run(lambda t: t.logsumexp(0), make(torch.int64, (3, 4)))     # int: float result, extern
    g = run(lambda t: torch.logsumexp(t * 2, 1), torch.randn(512, 512), lowered="logsumexp")
    assert kernels() == 1, g
    run(lambda t: torch.logsumexp(t, (0, 1)), torch.randn(512, 512), lowered="logsumexp")


# ---- outer reductions: the kept innermost loop runs in blocks of accumulators ----------

OUTER = ["sum", "mean", "prod", "amax", "amin", "any", "all", "count_nonzero", "norm1", "norm2",
         "norminf", "normninf", "norm0", "norm3", "argmax", "argmin", "max", "min", "var", "std",
         "logsumexp"]
FLOAT_ONLY = {"mean", "var", "std", "logsumexp"}


def outer_fn(op, dim, keepdim):
    if op in ("max", "min"):
        return lam(f"lambda t: torch.{op}(t, {dim}, {keepdim})")
    if op in ("var", "std"):
        return lam(f"lambda t: t.{op}({dim}, correction=0, keepdim={keepdim})")
    if op.startswith("norm"):
        p = {"1": 1, "2": 2, "inf": "float('inf')", "ninf": "-float('inf')", "0": 0,
             "3": 3}[op[4:]]
        return lam(f"lambda t: torch.linalg.vector_norm(t * 2, {p}, {dim}, {keepdim})")
    if op == "count_nonzero":
        return lam(f"lambda t: torch.count_nonzero(t, {dim})")
    return lam(f"lambda t: t.{op}({dim}, keepdim={keepdim})")


@pytest.mark.parametrize("op", OUTER)
@pytest.mark.parametrize("shape,dim", [((256, 1000), 0), ((4, 50, 70), 1), ((3, 5, 130), (0, 1)),
                                       ((7, 3), 0)])
def test_outer_reduction(op, shape, dim):
    dtypes = FLOATS if op.startswith("norm") or op in FLOAT_ONLY else ALL
    if op in ("prod", "argmax", "argmin", "max", "min") and not isinstance(dim, int):
        return
    if op in ("argmax", "argmin"):
        dtypes = INTS + FLOATS
    for dtype in dtypes:
        x = make(dtype, shape)
        if dtype.is_floating_point and op != "prod":
            x = with_nan(x) if dtype == torch.float64 else x
        name = "vector_norm" if op.startswith("norm") else "arg" + op if op in ("max", "min") \
            else op
        run(outer_fn(op, dim, dtype == torch.float32), x, lowered=name)
        if shape[-1] >= 64:
            assert "acc_b[" in source(), source()


def test_outer_reduction_prologue():
    x = make(torch.float32, (64, 300))
    b = make(torch.float32, (300,), seed=4)
    run(lambda t, c: ((t - c) * (t > 0)).sum(0), x, b, lowered="sum")
    run(lambda t, c: (t * c).amax(0, keepdim=True), x, b, lowered="amax")
    run(lambda t, c: (t + c).sum(0), x, make(torch.float32, (64, 1), seed=5), lowered="sum")
    run(lambda t: t.sum(1), x.t(), lowered="sum")
    run(lambda t: t.sum(0), torch.randn(2, 3, 64, 80).to(memory_format=torch.channels_last),
        lowered="sum")
    run(lambda t: t.sum(0), make(torch.int64, (512, 700)), lowered="sum")


@pytest.mark.parametrize("shape,dims,lanes", [((64, 1024), -1, True), ((4, 3, 64), (1, 2), True),
                                              ((5, 48), 1, True), ((6, 32, 7), 1, False),
                                              ((2, 16 * 33), -1, True)])
def test_float32_sum_in_lanes(shape, dims, lanes):
    # float32 sums over a reduced loop of a multiple of 16 elements run in 16
    # float partial sums flushed into double every 256 elements: results
    # within eager's accuracy, with a prologue, mean, several reduced dims and
    # a transposed input
    g = torch.Generator().manual_seed(3)
    x = torch.randn(shape, generator=g)
    r = cdynamo.optimize(lambda t: t.sum(dims))(x)
    # (6, 32, 7) over dim 1: the reduced loop is not the innermost one
    assert ("accf[" in cdynamo._support.compiles[-1]["source"]) == lanes
    exact = x.double().sum(dims)
    # no further from the exact sum than eager's cascaded float sum, give or
    # take one rounding of the result
    ours = (r.double() - exact).abs().max().item()
    eager = (x.sum(dims).double() - exact).abs().max().item()
    assert ours <= eager + 2 ** -23 * exact.abs().max().item(), (ours, eager)
    check(lambda t: (t * 2 + 1).mean(dims), x)
    check(lambda t: t.exp().sum(dims, keepdim=True), x, transcendental=True)
    check(lambda t: t.transpose(0, -1).sum(0), x)
    src = cdynamo._support.compiles[-1]["source"]
    assert "kernel_" in src


def test_float32_row_sum_prefetches_rows_ahead():
    # a lane row sum over 4 MiB or more prefetches each chunk of the row two
    # rows ahead (a 4 KiB row is one page: Zen 3's hardware prefetcher stops at
    # it), never past the last row, a constant count for whole chunks, compiled
    # only for CPUs without AVX-512 (where they cost time); a smaller input
    # gets none.  Results within eager's accuracy, last rows too.
    g = torch.Generator().manual_seed(5)

    def sums(x):
        # static sizes: a symbolic row sum (automatic dynamic's recompile) does not prefetch
        r = cdynamo.optimize(lambda t: t.sum(-1), dynamic=False)(x)
        exact = x.double().sum(-1)
        ours = (r.double() - exact).abs().max().item()
        eager = (x.sum(-1).double() - exact).abs().max().item()
        assert ours <= eager + 2 ** -23 * exact.abs().max().item(), (ours, eager)
        return cdynamo._support.compiles[-1]["source"]

    x = torch.randn(1024, 1024, generator=g)
    src = sums(x)
    assert "#ifndef __AVX512F__\n" + " " * 16 + "if (i0 + 2 < 1024LL)" in src, src
    assert "&in_ptr0[i0 * 1024LL + r0 + 2048LL]" in src, src
    assert "for (int64_t l = 0; l < 1024; l += 64) __builtin_prefetch(pf + l, 0, 2);" in src, src
    src = sums(torch.randn(1024, 1040, generator=g))     # a partial last chunk
    assert "l < (r0e - r0b) * 4; l += 64" in src, src
    assert "__builtin_prefetch" not in sums(x[:512].clone())   # 2 MiB: none


@pytest.mark.parametrize("shape", [(256, 256), (1, 256), (3000, 17), (37, 1000), (256, 768),
                                   (512, 129), (2, 40000), (700, 33), (256, 1024)])
def test_column_sums_spread_over_all_threads(shape):
    """Column sums (a bias's gradient) at 16 threads: blocks of outputs narrowed so that
    every thread has one (256 columns: 16 blocks of 16, not 4 of 64), a multiple of 16
    wide, at most 64; odd widths, tails, one row and many rows; sums as eager's (each
    column in double over its rows in order, whatever the block width)."""
    n = torch.get_num_threads()
    torch.set_num_threads(16)
    try:
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(5))
        got = cdynamo.optimize(lambda t: (t * 2).sum(0) + 1, dynamic=False)(x)
        torch.testing.assert_close(got, (x * 2).sum(0) + 1, rtol=1e-5, atol=1e-5)
        got = cdynamo.optimize(lambda t: t.mean(0), dynamic=False)(x)
        torch.testing.assert_close(got, x.mean(0), rtol=1e-5, atol=1e-6)
        src = source()
    finally:
        torch.set_num_threads(n)
    split = shape[0] >= 64 and shape[1] <= 1024 and shape[0] * shape[1] >= 32768
    assert ("part[NTHREADS]" in src) == split, src      # rows split: test_column_sums_row_split
    if "ib += " in src and shape[0] * shape[1] >= 32768 and not split:
        step = int(src.split("ib += ")[1].split(")")[0])
        want = min(64, max(16, -(-(-(-shape[1] // 16)) // 16) * 16))
        assert step == want, (step, want, src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("shape", [(256, 256), (1000, 100), (4, 64, 1024), (3333, 17)])
def test_column_sums_row_split(shape, dtype):
    """float32 / bfloat16 column sums too narrow for a 64-column block per thread (a bias's
    gradient at 16 threads) split their rows across the threads: per-thread partial sums
    in double, then each column's partials added in thread order.  Rows not a multiple of
    the threads, a fused prologue, a mean, several leading dims, a transposed input, NaN and
    inf; float64 keeps the column split (its rounding would follow the thread count)."""
    n = torch.get_num_threads()
    torch.set_num_threads(16)
    try:
        g = torch.Generator().manual_seed(7)
        x = torch.randn(*shape, generator=g).to(dtype)
        c = torch.randn(shape[-1], generator=g).to(dtype)
        lead = tuple(range(len(shape) - 1))
        tol = dict(rtol=1e-5, atol=1e-5) if dtype != torch.bfloat16 else {}
        for fn in (lambda t, b: (t * b + 1).sum(lead), lambda t, b: (t - b).mean(lead)):
            got = cdynamo.optimize(fn, dynamic=False)(x, c)
            torch.testing.assert_close(got, fn(x, c), **tol)
            assert ("part[NTHREADS]" in source()) == (dtype != torch.float64), source()
        if len(shape) == 2:
            xt = torch.randn(shape[1], shape[0], generator=g).to(dtype).t()
            got = cdynamo.optimize(lambda t: t.sum(0), dynamic=False)(xt)
            torch.testing.assert_close(got, xt.sum(0), **tol)
            y = x.clone()
            y[3, 1], y[-1, 2], y[5, 3], y[-2, 3] = float("nan"), float("inf"), float("inf"), -float("inf")
            got = cdynamo.optimize(lambda t: t.sum(0), dynamic=False)(y)
            torch.testing.assert_close(got, y.sum(0), equal_nan=True, **tol)
    finally:
        torch.set_num_threads(n)


def _stores_producer():
    """1 if the last compile's IR has a reduction that computes and stores its input's producer."""
    return "computed here and stored as it is summed" in (cdynamo._support.compiles[-1]["ir_post"] or "")


@pytest.mark.parametrize("threads", [1, 16])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(256, 512), (4, 37, 203), (3, 5, 7)])
def test_column_sum_stores_its_producer(shape, dtype, threads, monkeypatch):
    """A column sum whose input is a realized pointwise value (also returned), read
    directly or through a contiguous reshape merging its leading dims (a linear's bias
    gradient), computes and stores that value in its own pass: one kernel, results as
    eager's.  It does so where each element is visited once on the thread summing its row:
    one thread, or the row split (float32 at 16 threads; float64 keeps the column split
    and a separate producer kernel)."""
    monkeypatch.setattr(cdynamo.config, "num_threads", threads)
    g = torch.Generator().manual_seed(11)
    a = torch.randn(*shape, generator=g).to(dtype)
    b = torch.randn(*shape, generator=g).to(dtype)
    rows = math.prod(shape[:-1])
    split = threads > 1 and dtype == torch.float32 and rows >= 64 and rows * shape[-1] >= 32768
    fused = threads == 1 or split or rows * shape[-1] < 32768
    fns = [lambda x, y: (lambda p: (p, p.sum(tuple(range(p.dim() - 1)))))(torch.sin(x) * y),
           lambda x, y: (lambda p: (p, p.reshape(-1, p.shape[-1]).sum(0, keepdim=True)))(torch.sin(x) * y + 1),
           lambda x, y: (lambda p: (p.reshape(-1, p.shape[-1]).mean(0), p * 2))(x * y - x)]
    for fn in fns:
        cdynamo.reset()
        got = cdynamo.optimize(fn, dynamic=False)(a, b)
        for u, w in zip(got, fn(a, b)):
            torch.testing.assert_close(u, w, rtol=1e-5, atol=1e-5)
        assert _stores_producer() == fused, cdynamo._support.compiles[-1]["ir_post"]
        n = 2 + (fn is fns[2])          # the sum's kernel, p * 2's; the producer's when apart
        assert kernels() == n - fused, source()


@pytest.mark.parametrize("case", ["read_before", "view_read_before", "strided_view",
                                  "non_contiguous", "amax", "int"])
def test_column_sum_keeps_its_producer_apart(case, monkeypatch):
    """The producer keeps its own kernel where the sum may not store it: another node reads
    it (or a view of it) before the sum, the sum reads a view that is not a contiguous
    reshape, the producer is not contiguous, a reduction other than sum / mean, an integer
    producer.  Results as eager's either way."""
    monkeypatch.setattr(cdynamo.config, "num_threads", 1)
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(8, 16, 32, generator=g), torch.randn(8, 16, 32, generator=g)
    if case == "read_before":
        fn = lambda x, y: (lambda p: (p, (p + 1).exp(), p.reshape(-1, 32).sum(0)))(x * y)
    elif case == "view_read_before":
        fn = lambda x, y: (lambda p: (p, p[:, 1:].sum(), p.reshape(-1, 32).sum(0)))(x * y)
    elif case == "strided_view":
        fn = lambda x, y: (lambda p: (p, p[:, ::2].reshape(-1, 32).sum(0)))(x * y)
    elif case == "non_contiguous":
        fn = lambda x, y: (lambda p: (p, p.transpose(1, 2).sum((0, 1))))(x.transpose(1, 2) * y.transpose(1, 2))
    elif case == "amax":
        fn = lambda x, y: (lambda p: (p, p.reshape(-1, 32).amax(0)))(x * y)
    else:
        a, b = (a * 10).to(torch.int32), (b * 10).to(torch.int32)
        fn = lambda x, y: (lambda p: (p, p.reshape(-1, 32).sum(0)))(x * y)
    got = cdynamo.optimize(fn, dynamic=False)(a, b)
    for u, w in zip(got, fn(a, b)):
        torch.testing.assert_close(u, w, rtol=1e-5, atol=1e-5)
    assert not _stores_producer(), cdynamo._support.compiles[-1]["ir_post"]
