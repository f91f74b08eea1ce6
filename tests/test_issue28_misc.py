"""Regression tests for issue 28, items 9 (clamp with NaN bounds), 17 (output
strides where the layout is ambiguous) and 22 (repro.py for every graph)."""
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

import cdynamo


def _bits(t):
    """t's float elements as integers (NaN payloads and signs compared exactly)."""
    t = t.contiguous()
    if t.dtype == torch.float32:
        return t.view(torch.int32)
    if t.dtype == torch.float64:
        return t.view(torch.int64)
    return t


def _run_both(f, *args):
    """(eager result or exception, compiled result or exception) on clones of args."""
    out = []
    for run in (f, cdynamo.optimize(f)):
        a = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
        try:
            out.append((run(*a), None))
        except Exception as e:  # noqa: BLE001 - compared below
            out.append((None, e))
    return out


def _assert_bitwise(f, *args):
    (e, ee), (c, ce) = _run_both(f, *args)
    assert type(ee) is type(ce), (ee, ce)
    if ee is not None:
        assert str(ee) == str(ce)
        return
    assert e.dtype == c.dtype and e.shape == c.shape and e.stride() == c.stride()
    assert torch.equal(_bits(e), _bits(c)), (e, c)


# ---- item 9: clamp ---------------------------------------------------------

def _special(dtype, shape=(40, 33)):
    x = torch.randn(shape, dtype=torch.float64).to(dtype)
    x[1, 4] = math.nan
    x[2, :7] = -0.0
    x[3, 2] = -math.nan
    x[4, 1] = math.inf
    x[4, 2] = -math.inf
    return x


BOUNDS = (None, 0.0, -0.0, 0.5, -0.5, math.nan, -math.nan, math.inf, -math.inf)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clamp_nan_bounds_bitwise(dtype):
    x = _special(dtype)
    for lo, hi in itertools.product(BOUNDS, BOUNDS):
        if lo is None and hi is None:
            continue
        cdynamo.reset()
        _assert_bitwise(lambda x, lo=lo, hi=hi: torch.clamp(x, lo, hi), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "small"])
def test_clamp_family_nan_bounds(dtype, layout):
    x = _special(dtype)
    x = {"contiguous": x, "transposed": x.t(), "sliced": x[:, ::2], "small": x[3, :5]}[layout]
    fns = {
        "clamp_nan_max": lambda x: torch.clamp(x, min=0.5, max=math.nan),
        "clip_nan_min": lambda x: torch.clip(x, min=math.nan),
        "clamp_max_nan": lambda x: torch.clamp_max(x, math.nan),
        "clamp_min_negnan": lambda x: torch.clamp_min(x, -math.nan),
        "method_clamp_max_negnan": lambda x: x.clamp_max(-math.nan),
        "clamp__nan": lambda x: x.clamp_(min=0.5, max=math.nan) * 1,
        "clamp_min__nan": lambda x: x.clamp_min_(math.nan),
        "fused": lambda x: torch.clamp(x * 2, max=math.nan) + 1,
        "hardtanh_nan": lambda x: F.hardtanh(x, math.nan, 1.0),
        "hardtanh__nan": lambda x: F.hardtanh_(x, -1.0, math.nan),
        "min_gt_max": lambda x: torch.clamp(x, min=1.0, max=-1.0),
        "min_gt_max_zeros": lambda x: torch.clamp(x, min=0.0, max=-0.0),
        "signed_zero": lambda x: torch.clamp(x, min=0.0) + torch.clamp_max(x, -0.0),
    }
    for name, f in fns.items():
        cdynamo.reset()
        _assert_bitwise(f, x)
    # tensor bounds holding NaNs and signed zeros (x's own, flipped), next to a NaN scalar
    lo, hi = x.flip(0), x.flip(-1) + 1
    for f in (lambda x, lo, hi: torch.clamp(x, lo, hi) + torch.clamp(x, max=math.nan),
              lambda x, lo, hi: torch.clamp(x, hi, lo) * torch.clamp_min(x, math.nan),
              lambda x, lo, hi: (torch.clamp(x, min=lo), torch.clamp(x, max=math.nan)),
              lambda x, lo, hi: (torch.clamp(x.long(), lo, hi), x.clamp_max(math.nan))):
        cdynamo.reset()
        (e, ee), (c, ce) = _run_both(f, x, lo, hi)
        assert ee is None and ce is None, (ee, ce)
        torch.testing.assert_close(c, e, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_clamp_integer_inputs(dtype):
    x = torch.randint(0, 6, (37,), dtype=dtype)
    cases = [
        lambda x: torch.clamp(x, 0.5, 2.5),          # float bounds: promoted to float
        lambda x: torch.clamp(x, min=math.nan),      # float result, all NaN
        lambda x: torch.clamp(x, max=math.nan),
        lambda x: torch.clamp_min(x, math.nan),
        lambda x: torch.clamp(x, 3, 1),              # min > max: max
        lambda x: torch.clamp(x, min=-1000),         # eager raises for 8-bit x
        lambda x: torch.clamp(x, -255, 3),           # uint8: -255 wraps to 1
        lambda x: torch.clamp(x, -256),              # uint8: raises
        lambda x: torch.clamp_max(x, 1000),
        lambda x: torch.clamp_min(x, 2 ** 63),       # raises for every integer dtype
        lambda x: torch.clamp(x, max=-2 ** 63),
        lambda x: torch.clamp(x, min=True),
        lambda x: F.hardtanh(x, -0.5, 2.0),          # uint8: raises (negative limit)
        lambda x: F.hardtanh(x, 1.5, 3.5),
        lambda x: F.hardtanh(x, math.nan, 1.0),
        lambda x: F.relu6(x),
        lambda x: x.clamp_(0.5, 2.5),                # in place: float can't be cast
    ]
    for f in cases:
        cdynamo.reset()
        _assert_bitwise(f, x)


