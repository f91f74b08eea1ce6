"""clamp / clip / clamp_min / clamp_max / hardtanh with NaN bounds equal eager
whatever the installed torch: torch 2.11 ignores a NaN bound given alone to
clamp (clamp(x, min=nan) is x), torch 2.13 fills with NaN; cdynamo asks eager
once (csrc/trace/opbind.c, ob_lone_nan_ignored) and lowers accordingly."""
import math

import pytest
import torch

import cdynamo

nan = math.nan

CASES = {
    "clamp_min_kw": lambda x: torch.clamp(x * 1, min=nan),
    "clamp_max_kw": lambda x: torch.clamp(x * 1, max=nan),
    "clamp_min_none": lambda x: torch.clamp(x * 1, nan, None),
    "clamp_both_nan": lambda x: torch.clamp(x * 1, nan, nan),
    "clamp_nan_hi": lambda x: torch.clamp(x * 1, nan, 1.0),
    "clamp_lo_nan": lambda x: torch.clamp(x * 1, 0.0, nan),
    "clip_min": lambda x: torch.clip(x * 1, min=nan),
    "clip_max": lambda x: x.clip(max=nan) + 1,
    "method_clamp": lambda x: (x + 1).clamp(min=nan),
    "clamp_min_op": lambda x: torch.clamp_min(x * 1, nan),
    "clamp_max_op": lambda x: (x * 1).clamp_max(nan),
    "hardtanh": lambda x: torch.nn.functional.hardtanh(x * 1, nan, 1.0),
    "after_relu": lambda x: torch.clamp(x.clamp_min(0), min=nan, max=None),
}

INPUTS = {
    "float32": lambda: torch.tensor([-2.0, -0.0, 0.5, 3.0, nan, math.inf, -math.inf] * 5),
    "float64": lambda: torch.tensor([-2.0, -0.0, 0.5, 3.0, nan, math.inf] * 5, dtype=torch.float64),
    "float16": lambda: torch.tensor([-2.0, -0.0, 0.5, 3.0, nan] * 5, dtype=torch.float16),
    "int64": lambda: torch.arange(-6, 7).reshape(13, 1).expand(13, 3),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dt", sorted(INPUTS))
def test_nan_bound_matches_eager(case, dt):
    fn = CASES[case]
    x = INPUTS[dt]()
    try:
        want = fn(x)
    except RuntimeError as e:      # eager refuses it: so must the compiled function
        with pytest.raises(type(e)):
            cdynamo.optimize(fn)(x)
        return
    got = cdynamo.optimize(fn)(x)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(got.isnan(), want.isnan())
    assert got.stride() == want.stride()
