"""Differential fuzzing of cdynamo against eager (tools/fuzz.py), plus the saved
regressions in tests/fuzz_regressions/ (known bugs there are xfail strict)."""
import glob
import os
import runpy
import sys

import pytest

import cdynamo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import fuzz  # noqa: E402

FUZZ_CASES = int(os.environ.get("CDYNAMO_FUZZ_CASES", "400"))
FUZZ_SEED = int(os.environ.get("CDYNAMO_FUZZ_SEED", "20240607"))


def test_fuzz_seeded(tmp_path):
    lines = []
    s = fuzz.fuzz(FUZZ_SEED, FUZZ_CASES, out_dir=str(tmp_path / "regressions"), log=lines.append)
    print(f"fuzz: {s['cases']} cases, {s['ops']} ops, {s['failures']} failures, "
          f"known bugs hit: {s['known']}, {s['seconds']:.1f} s")
    assert s["cases"] == FUZZ_CASES
    assert s["failures"] == 0, "\n".join(lines)


def _regressions():
    params = []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "fuzz_regressions", "case_*.py"))):
        reason = runpy.run_path(path).get("XFAIL")
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(path, marks=marks, id=os.path.basename(path)[:-3]))
    return params


@pytest.mark.parametrize("path", _regressions())
def test_fuzz_regression(path):
    case = runpy.run_path(path)
    fuzz.run_case(case["SOURCE"], case["INPUTS"], cdynamo)
