"""The Python-free layers' own C tests (tests/c/run.sh: the compiler, the symbolic sizes),
run by the suite so that CI runs them: a C file that links only with the tracer, or a
failing C check, fails here."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (cdynamo itself needs it)")
def test_c_tests_build_and_pass():
    r = subprocess.run(["sh", "tests/c/run.sh"], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    lines = [ln for ln in out.splitlines() if "checks," in ln]
    assert len(lines) >= 2 and all(ln.endswith(" 0 failures") for ln in lines), out[-4000:]
