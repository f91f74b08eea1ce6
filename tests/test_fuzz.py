"""Differential fuzzing of cdynamo against eager (tools/fuzz.py, program generators in
tools/fuzz_gen.py), plus the saved regressions in tests/fuzz_regressions/.

test_fuzz_campaign runs a bounded seeded campaign over every family (cases in a child
process: a segfault is a CRASH, not a lost test run) and asserts no wrong result, no crash
and no exception mismatch; every case of the seed counts (none is left out).  CDYNAMO_FUZZ_CASES (cases per family) and CDYNAMO_FUZZ_SEED
change the campaign.
"""
import glob
import os
import runpy
import subprocess
import sys

import pytest

import cdynamo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import fuzz  # noqa: E402
import fuzz_gen  # noqa: E402

CASES_PER_FAMILY = int(os.environ.get("CDYNAMO_FUZZ_CASES", "20"))
SEED = int(os.environ.get("CDYNAMO_FUZZ_SEED", "2024"))

def campaign_plan(seed, per_family):
    """Cases 0.. of each family, per_family of them."""
    return [(fam, seed, i) for fam in fuzz_gen.FAMILIES for i in range(per_family)]


def test_fuzz_campaign(tmp_path):
    lines = []
    s = fuzz.fuzz(SEED, None, plan=campaign_plan(SEED, CASES_PER_FAMILY),
                  findings_dir=str(tmp_path / "findings"), write=False, do_minimize=False,
                  log=lines.append)
    print(fuzz.format_counts(s["counts"]))
    bad = {fam: {k: c[k] for k in fuzz.BAD if c[k]} for fam, c in s["counts"].items()}
    bad = {fam: v for fam, v in bad.items() if v}
    if bad:
        fails = "\n".join(f"{r['family']}#{r['case']} {r['status']}: {r['detail'][:300]}\n"
                          f"{r['source'].split('def make_inputs():')[1]}" for r in s["failures"])
        pytest.fail(f"{bad}\n{fails}")
    assert all(c["cases"] >= min(CASES_PER_FAMILY, 15) for c in s["counts"].values()), s["counts"]


def test_fuzz_oracle_catches_differences():
    """The oracle itself: a wrong value, a lost alias, a changed input and a different
    exception type are all caught (a broken oracle would pass every campaign)."""
    import torch
    with pytest.raises(fuzz.Mismatch, match="values"):
        fuzz.compare_results(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0]))
    with pytest.raises(fuzz.Mismatch, match="strides"):
        fuzz.compare_results(torch.zeros(2, 3), torch.zeros(3, 2).t())
    fuzz.compare_results(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]))
    x = torch.zeros(3)
    assert fuzz.alias_signature(x[1:], [x]) == ["out shares input 0's storage at +4"]
    assert fuzz.alias_signature(x, [x]) == ["out is input 0"]
    with pytest.raises(fuzz.Mismatch, match="inputs"):
        fuzz.compare_inputs([torch.zeros(2)], [torch.ones(2)], "after the call")
    src = fuzz_gen.PRELUDE + (
        "\n\ndef make_inputs():\n    return [torch.arange(4.0)]\n\n\n"
        "def f(a0):\n    return a0 * 2 + 1, a0[1:]\n")
    assert fuzz.check_program(src, {"family": "views"}) == ("ok", "")


def test_fuzz_oracle_zero_signs_and_reference():
    """The zero sign is compared except in programs with ops whose zero sign eager
    leaves to the element's loop path (maximum / minimum / amax / amin, clamp with
    tensor bounds); the reference of a program casting to float32 computes in float64."""
    import torch
    e, c = torch.tensor([-0.0, 1.0]), torch.tensor([0.0, 1.0])
    with pytest.raises(fuzz.Mismatch, match="values"):
        fuzz.compare_results(e, c)
    for text, free in [("t0 = torch.maximum(a0, a1)", True), ("t0 = a0.amin(1)", True),
                       ("t0 = torch.clamp(a0, t1, t2)", True), ("t0 = a1.clamp_min(t0)", True),
                       ("t0 = torch.clamp(a0, min=0.5)", False), ("t0 = torch.max(a0, 1)", False),
                       ("t0 = torch.fmax(a0, a1)", False), ("t0 = a0.relu()", False)]:
        assert bool(fuzz._ZERO_SIGN_OPS.search(text)) is free, text
    fuzz._ZERO_SIGN_FREE[0] = True
    try:
        fuzz.compare_results(e, c)
    finally:
        fuzz._ZERO_SIGN_FREE[0] = False
    src = "import torch\n\n\ndef f(a0):\n    return a0.float().sum() + a0.to(torch.float32)[0]\n"
    f = fuzz._precise_f(src, None)
    x = torch.tensor([2147483646, -2, -2147483647], dtype=torch.int32)
    assert f(x).dtype == torch.float64 and f(x).item() == -3.0 + 2147483646


def test_fuzz_oracle_accepts_either_layout_of_eager():
    """An element where eager's vectorized loop and its scalar one disagree
    (torch.remainder(1.0, 5e-324): NaN in the vector body, 0.0 in the tail and in a
    strided loop) may be either value; elsewhere values still count."""
    import torch
    src = fuzz_gen.PRELUDE + (
        "\n\ndef make_inputs():\n    return [torch.ones(37, dtype=torch.float64)]\n\n\n"
        "def f(a0):\n    return torch.remainder(a0, 5e-324) + a0\n")
    ns = {}
    exec(src, ns)
    exp = ns["f"](*ns["make_inputs"]())
    alt = fuzz._eager_other_layout(ns["f"], ns["make_inputs"], {})
    assert exp.isnan().any() and not alt.isnan().any()
    good = torch.ones(37, dtype=torch.float64)
    fuzz.compare_results(fuzz._either(exp, alt, good), good)
    bad = good.clone()
    bad[36] = 2.0               # the tail, where eager's two layouts agree
    with pytest.raises(fuzz.Mismatch, match="values"):
        fuzz.compare_results(fuzz._either(exp, alt, bad), bad)


def _regressions():
    params = []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "fuzz_regressions", "case_*.py"))):
        with open(path) as fh:
            text = fh.read()
        marks = []
        if "\nXFAIL = " in text:      # the first fuzzer's format
            reason = runpy.run_path(path).get("XFAIL")
            if reason:
                marks = [pytest.mark.xfail(strict=True, reason=reason)]
        params.append(pytest.param(path, marks=marks, id=os.path.basename(path)[:-3]))
    return params


@pytest.mark.parametrize("path", _regressions())
def test_fuzz_regression(path):
    with open(path) as fh:
        text = fh.read()
    if "\nSOURCE = " in text:       # the first fuzzer's format: INPUTS and SOURCE
        case = runpy.run_path(path)
        fuzz.run_case(case["SOURCE"], case["INPUTS"], cdynamo)
        return
    if "\nMETA = " not in text:     # written by hand (a crash that shows later): its own process
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), CDYNAMO_ROOT=ROOT)
        r = subprocess.run([sys.executable, path], env=env, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0, f"rc {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        return
    meta = runpy.run_path(path)["META"]
    status, detail = fuzz.check_program(text, meta)
    assert status in ("ok", "fallback", "raises"), detail
