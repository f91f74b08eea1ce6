"""Regression tests for the wrong results the issue-28 fuzz campaigns found
(tools/fuzz_findings/FINDINGS.md): each class fixed at its root, tested on the
minimized program and on the general form of the bug."""
import math

import pytest
import torch

import cdynamo


def _bits(t):
    """t's elements as integers where float (signed zeros, NaN payloads compared)."""
    t = t.contiguous()
    if t.dtype == torch.float32:
        return t.view(torch.int32)
    if t.dtype == torch.float64:
        return t.view(torch.int64)
    return t


def _assert_bitwise(f, *args):
    """f compiled gives eager's result bit for bit: dtype, shape, strides, values."""
    e = f(*[a.clone() for a in args])
    c = cdynamo.optimize(f)(*[a.clone() for a in args])
    es = e if isinstance(e, tuple) else (e,)
    cs = c if isinstance(c, tuple) else (c,)
    assert len(es) == len(cs)
    for x, y in zip(es, cs):
        assert (x.dtype, x.shape, x.stride()) == (y.dtype, y.shape, y.stride())
        assert torch.equal(_bits(x), _bits(y)), (x, y)


# ---- rounding conversions that GCC folded away ------------------------------
# GCC 12 folds (double)(float)x back to x in vectors of equal lane counts (the
# SLP-vectorized and epilogue loops of small fixed sizes), and, with the
# generated files' no-trapping-math, (float)(int)x into trunc(x) (-0.0 for x in
# (-1, 0)).  Every size 1..40 takes another mix of vector and scalar code.

def _near_float(n):
    """float64 values most of which float32 rounds up or down, and -0.0 / NaN."""
    x = torch.arange(n, dtype=torch.float64) * 0.1 + 1e-9
    x[::5] = -x[::5]
    if n > 3:
        x[3] = -0.0
    return x


ROUND_TRIPS = {
    "lt": lambda x: x.lt(x.to(torch.float32)),
    "ge": lambda x: x >= x.float(),
    "eq": lambda x: x == x.float(),
    "ne": lambda x: x.float() != x,
    "sub": lambda x: x.float().double() - x,
    "finding_fb0b352123": lambda x: x.float() * torch.atan(x.lt(x.float())),
}


@pytest.mark.parametrize("n", range(1, 41))
@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_float64_float32_round_trip_is_kept(name, n):
    _assert_bitwise(ROUND_TRIPS[name], _near_float(n))


TRUNC_TRIPS = {
    "tanh_int": lambda x: x.int().tanh(),                      # finding 384a972ce9
    "int_float": lambda x: x.int().float(),
    "long_double": lambda x: x.double().long().double(),
    "floordiv": lambda x: x.long() // x,                        # finding 20d180b77b
    "where": lambda x: torch.where(x.long() > 0, x, x.long()),  # finding 2288be8b13
}


@pytest.mark.parametrize("n", [1, 5, 8, 13, 33, 257])
@pytest.mark.parametrize("name", sorted(TRUNC_TRIPS))
def test_float_int_float_is_not_trunc(name, n):
    """(float)(int)x is +0.0 for x in (-1, 0) (trunc gives -0.0), and INT_MIN for x
    out of the int's range (as eager's conversions on x86), not x."""
    x = torch.linspace(-0.99, 0.99, n, dtype=torch.float32)
    if n > 4:
        x[1], x[2], x[3] = -3e9, 3e9, -0.0
    _assert_bitwise(TRUNC_TRIPS[name], x)
