"""Differential fuzzing of cdynamo against eager (tools/fuzz.py, program generators in
tools/fuzz_gen.py), plus the saved regressions in tests/fuzz_regressions/.

test_fuzz_campaign runs a bounded seeded campaign over every family (cases in a child
process: a segfault is a CRASH, not a lost test run) and asserts no wrong result, no crash
and no exception mismatch; every case of the seed counts (none is left out).  CDYNAMO_FUZZ_CASES (cases per family) and CDYNAMO_FUZZ_SEED
change the campaign.
"""
import glob
import math
import os
import runpy
import subprocess
import sys

import pytest
import torch

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


def test_fuzz_dynamic_compiles_symbolic_graphs():
    """--dynamic (META dynamic): the program compiles with every argument dim symbolic, so
    the campaign checks kernels with runtime sizes; a short campaign of every family."""
    import cdynamo
    src = fuzz_gen.PRELUDE + (
        "\n\ndef make_inputs():\n    return [torch.arange(12.0).reshape(3, 4)]\n\n\n"
        "def f(a0):\n    return (a0 * 2 + 1).sum(0), a0.t()\n")
    assert fuzz.check_program(src, {"family": "views", "dynamic": True}) == ("ok", "")
    graph = cdynamo._support.compiles[-1]["compiled"]
    assert graph.symbols == ((0, 0), (0, 1))
    s = fuzz.fuzz(SEED, None, plan=campaign_plan(SEED + 1, 3), write=False, do_minimize=False,
                  log=lambda *a: None, dynamic=True)
    assert all(not c[k] for c in s["counts"].values() for k in fuzz.BAD), s["failures"]
    assert sum(c["ok"] for c in s["counts"].values()) >= 20, s["counts"]


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
                       ("t0 = torch.fmax(a0, a1)", False), ("t0 = a0.relu()", False),
                       ("t1 = t0.max()", True), ("t1 = torch.min(a0)", True),
                       ("t0 = a0.max(1)", False)]:
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


def test_fuzz_oracle_calls_again_with_inputs_of_another_seed(monkeypatch):
    """Each program is called a second time with inputs of the next seed (same shapes,
    dtypes, strides; other values): a compiled function that keeps its first result
    (stale values) or writes the second one into the first's buffer (reuse) is wrong."""
    import torch
    src = fuzz_gen.PRELUDE + (
        "\n\ndef make_inputs():\n    g = torch.Generator().manual_seed(7)\n"
        "    return [_fill(g, torch.float32, (3, 4)).t()]\n\n\n"
        "def f(a0):\n    return a0 * 2\n")
    ns = {}
    exec(src, ns)
    a, b = ns["make_inputs"]()[0], fuzz._inputs_of_another_seed(src)()[0]
    assert a.shape == b.shape and a.stride() == b.stride() and not torch.equal(a, b)
    assert fuzz.check_program(src, {"family": "pointwise"}) == ("ok", "")

    def stale(f):
        memo = []
        return lambda *args: memo[0] if memo else memo.append(f(*args)) or memo[0]

    def reuse(f):
        memo = []
        return lambda *args: memo[0].copy_(f(*args)) if memo else \
            memo.append(f(*args)) or memo[0]

    monkeypatch.setattr(cdynamo, "optimize", stale)
    st, detail = fuzz.check_program(src, {"family": "pointwise"})
    assert st == "wrong" and detail.startswith("values:") and "second call" in detail, detail
    monkeypatch.setattr(cdynamo, "optimize", reuse)
    st, detail = fuzz.check_program(src, {"family": "pointwise"})
    assert st == "wrong" and detail.startswith("reuse:"), detail


def test_fuzz_oracle_whole_max_zero_sign_and_inert_autocast():
    """max() of a whole tensor holding +0 and -0 is either in eager by the zeros'
    places (ATen's reduce-all lanes), so its zero sign is not compared; a program
    whose eager result autocast leaves unchanged (layer_norm / group_norm of float32)
    is checked against the float64 reference without autocast, as without the state."""
    import torch
    import torch.nn.functional as F
    signs = set()
    for n in (9, 15, 17):
        for k in range(n):
            x = torch.zeros(n)
            x[k] = -0.0
            signs.add(bool(torch.signbit(x.max())))
    assert signs == {True, False}
    ins = lambda: [torch.randn(6, 5, generator=torch.Generator().manual_seed(3)),
                   torch.randn(5, 5, generator=torch.Generator().manual_seed(4))]
    gn = lambda a, b: F.group_norm(F.layer_norm(a, (5,)), 5)
    mm = lambda a, b: a @ b
    for fn, inert in ((gn, True), (mm, False)):
        with fuzz.state_ctx({"autocast": "bfloat16"}):
            exp = fn(*ins())
        assert fuzz._autocast_inert(fn, ins, {"autocast": "bfloat16"}, exp) is inert
    for name in ("case_state_wrong_09f3fe8d25.py", "case_state_wrong_aa5d9c8fef.py"):
        with open(os.path.join(ROOT, "tests", "fuzz_regressions", name)) as fh:
            text = fh.read()
        meta = runpy.run_path(os.path.join(ROOT, "tests", "fuzz_regressions", name))["META"]
        assert fuzz.check_program(text, meta)[0] in ("ok", "fallback"), name


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


def test_findings_report_lists_each_file_or_says_none_is_open(tmp_path):
    """--report's FINDINGS.md: an entry per finding file (name, family, symptom, the
    program without its prelude), and a line saying none is open for an empty directory."""
    fuzz.findings_report(str(tmp_path))
    text = (tmp_path / "FINDINGS.md").read_text()
    assert text.rstrip().endswith("No finding is open.")
    (tmp_path / "views_wrong_0123456789.py").write_text(
        "# cdynamo fuzz finding (tools/fuzz.py), family views, wrong\n"
        "# signature: wrong/strides/t\n"
        "# wrong: strides: out: eager (1, 2), cdynamo (2, 1)\n"
        "import torch\n\ndef make_inputs():\n    return [torch.zeros(2, 2)]\n\n\n"
        "def f(a0):\n    return a0.t()\n\nMETA = {}\n")
    fuzz.findings_report(str(tmp_path))
    text = (tmp_path / "FINDINGS.md").read_text()
    assert "### views_wrong_0123456789.py\n- family: views, wrong\n" in text
    assert "- symptom: `wrong: strides: out: eager (1, 2), cdynamo (2, 1)`" in text
    assert "def f(a0):\n    return a0.t()\n```" in text and "No finding is open" not in text


def test_oracle_compares_float_bits_as_floats_but_integers_exactly():
    # a float32 result 1 ulp from eager's, read through .view(torch.int32), is not wrong;
    # a genuine integer (a denormal's bits) that differs by one still is
    e = torch.tensor([2.5, -1e-3], dtype=torch.float32)
    c = torch.nextafter(e, torch.tensor(math.inf))
    assert fuzz._bitview_close(e.view(torch.int32), c.view(torch.int32)).all()
    assert not fuzz._bitview_close(torch.tensor([5, 7], dtype=torch.int32),
                                   torch.tensor([6, 7], dtype=torch.int32))[0]
    assert not fuzz._bitview_close(torch.tensor([2.5]).view(torch.int32),
                                   torch.tensor([-2.5]).view(torch.int32))[0]


def test_generator_skips_median_over_a_stride_0_dim():
    # torch 2.13's median / nanmedian over a dim of stride 0 give garbage in eager itself
    x = torch.randn(3, 1).expand(3, 4)
    assert fuzz_gen._median_over_dim(x, "t0", 1) == []
    assert fuzz_gen._median_over_dim(x, "t0", 0) == ["torch.median(t0, 0)[0]",
                                                     "t0.nanmedian(0).values"]


def test_oracle_norm_programs_compare_against_the_rows_magnitude():
    """In a program that calls layer_norm / group_norm, a float result may be off by
    rtol of its last-dim row's largest magnitude (the float32 mean's rounding scaled by
    rstd * w: eager is exact there only by luck), but no more; other programs keep the
    element's own tolerance."""
    for text, norm in [("t0 = F.layer_norm(a0, (8,), a1)", True),
                       ("t0 = F.group_norm(a0, 4, a1, a2)", True),
                       ("t0 = torch.nn.functional.layer_norm(a0, (4,))", True),
                       ("t0 = F.softmax(a0, dim=0)", False), ("t0 = a0.norm()", False)]:
        assert bool(fuzz._NORM_OPS.search(text)) is norm, text
    r = torch.tensor([[4.016042e35, 3.0e38, -2.0e38], [1.0, 2.0, 3.0]], dtype=torch.float64)
    e = r.float()
    c = e.clone()
    c[0, 0] = 4.015945e35            # 2.4e-5 off: within 1e-5 of its row's 3e38
    saved = fuzz._NORM_PROG[0]           # set per program by the last check_program
    try:
        fuzz._NORM_PROG[0] = False
        with pytest.raises(fuzz.Mismatch, match="values"):
            fuzz.compare_results(e, c, r)
        fuzz._NORM_PROG[0] = True
        fuzz.compare_results(e, c, r)
        c[1, 0] = 1.001               # 1e-3 off, its row's largest is 3: still wrong
        with pytest.raises(fuzz.Mismatch, match="values"):
            fuzz.compare_results(e, c, r)
    finally:
        fuzz._NORM_PROG[0] = saved


def test_oracle_leaves_the_sign_of_a_nan_out_of_sign_reads(monkeypatch):
    """IEEE 754 leaves the sign of a NaN made by arithmetic open (eager's vector and scalar
    loops differ): a program reading signs (signbit, copysign) whose values differ passes
    when it passes with NaNs' signs taken out of those reads; a sign that differs on a
    number is still wrong."""
    src = fuzz_gen.PRELUDE + (
        "\n\ndef make_inputs():\n"
        "    return [torch.tensor([float('nan'), -float('nan'), 1.5, -2.0])]\n\n\n"
        "def f(a0):\n    t0 = torch.signbit(a0)\n    t1 = a0.copysign(a0)\n"
        "    return t0, t1.signbit()\n")
    assert "(torch.signbit(a0) & ~torch.isnan(a0))" in fuzz._nan_sign_free(src)
    assert "a0.copysign(a0.nan_to_num(0.0))" in fuzz._nan_sign_free(src)
    assert fuzz.check_program(src, {"family": "special"}) == ("ok", "")

    real = cdynamo.optimize

    def flip_nan_signs(f):
        opt = real(f)
        return lambda *a: opt(*[torch.where(x.isnan(), -x, x) for x in a])

    def flip_all_signs(f):
        opt = real(f)
        return lambda *a: opt(*[-x for x in a])

    monkeypatch.setattr(cdynamo, "optimize", flip_nan_signs)
    assert fuzz.check_program(src, {"family": "special"}) == ("ok", "")
    monkeypatch.setattr(cdynamo, "optimize", flip_all_signs)
    st, detail = fuzz.check_program(src, {"family": "special"})
    assert st == "wrong" and detail.startswith("values"), detail


def _nudged(real):
    """optimize whose compiled function runs on inputs moved one ulp up or down at random."""
    def wrap(f):
        opt = real(f)

        def run(*a):
            g = torch.Generator().manual_seed(99)
            return opt(*[torch.nextafter(x, torch.where(torch.rand(x.shape, generator=g) < 0.5,
                                                        math.inf, -math.inf))
                         for x in a])
        return run
    return wrap


def _prog(body, inputs="torch.randn(5, 5, generator=g, dtype=torch.float64).float()"):
    """A fuzz program of one input a0 whose f runs body (lines joined by newlines)."""
    body = body.replace("\n", "\n    ")
    return fuzz_gen.PRELUDE + (
        "\n\ndef make_inputs():\n    g = torch.Generator().manual_seed(3)\n"
        f"    return [{inputs}]\n\n\ndef f(a0):\n    {body}\n")


# group_norm over groups of one element: rounding noise times 1 / sqrt(eps)
_ILL = ("F.group_norm(a0.softmax(0) * 3, 5, torch.full((5,), 50.0), "
        "torch.full((5,), 0.75))")


def test_oracle_allows_ill_conditioned_elements_only(monkeypatch):
    """An element that eager itself moves as far when each op rounds its result one ulp
    the other way (group_norm over groups of one element: the output is rounding noise
    times 1 / sqrt(eps)) may differ that much; a well-conditioned program computed on
    inputs one ulp off passes anyway, one off by 1e-3 is wrong, and a program with a step
    op (round) gets no allowance."""
    real = cdynamo.optimize

    def off(f):
        opt = real(f)
        return lambda *a: opt(*a) * 1.001

    ill = _prog("return " + _ILL)
    ns = {}
    exec(ill, ns)
    e = ns["f"](*ns["make_inputs"]())
    monkeypatch.setattr(cdynamo, "optimize", _nudged(real))
    c = cdynamo.optimize(ns["f"])(*ns["make_inputs"]())
    assert not torch.allclose(e, c, rtol=1.3e-6, atol=1e-5)   # the nudge shows
    # under autocast there is no float64 reference to excuse it (where autocast is
    # taken to have cast something: group_norm of float32 is inert, its reference kept)
    auto = {"family": "state", "states": [{"autocast": "bfloat16"}]}
    monkeypatch.setattr(fuzz, "_autocast_inert", lambda *a: False)
    assert fuzz.check_program(ill, auto)[0] == "ok"
    monkeypatch.setattr(fuzz, "_PERTURB_RUNS", 0)
    assert fuzz.check_program(ill, auto)[0] == "wrong"
    monkeypatch.setattr(fuzz, "_PERTURB_RUNS", 4)
    assert fuzz.check_program(_prog("return a0.exp() * 2"), {"family": "pointwise"})[0] == "ok"
    monkeypatch.setattr(cdynamo, "optimize", off)
    st, detail = fuzz.check_program(_prog("return a0.exp() * 2"), {"family": "pointwise"})
    assert st == "wrong" and detail.startswith("values"), detail
    monkeypatch.setattr(cdynamo, "optimize", _nudged(real))
    half = _prog("return torch.round(a0)", "torch.tensor([0.5, 2.5, -1.5, 3.5])")
    st, detail = fuzz.check_program(half, {"family": "pointwise"})
    assert st == "wrong" and detail.startswith("values"), detail


def test_oracle_allowance_starts_after_the_last_step_op(monkeypatch):
    """In a program with step ops only the ops from the last one on are perturbed: an
    ill-conditioned op after a clamp, a floor division or a comparison keeps its
    allowance (the device's float64 sinc of ~1e18 after a floor division,
    tools/fuzz_findings/pointwise_wrong_971046200d.py); the same op followed by a step
    op gets none, and the steps are found in the calls, not the source's text."""
    auto = {"family": "state", "states": [{"autocast": "bfloat16"}]}
    monkeypatch.setattr(fuzz, "_autocast_inert", lambda *a: False)   # no float64 reference
    monkeypatch.setattr(cdynamo, "optimize", _nudged(cdynamo.optimize))
    for before in ("a0 = a0.clamp(-100.0, 100.0)",
                   "a0 = a0 + torch.div(a0, 1e6, rounding_mode='floor') * 0",
                   "a0 = torch.where(a0 > 100, a0 * 2, a0)",
                   "a0 = a0 + (a0 // 1e6) * 0"):
        st, detail = fuzz.check_program(_prog(before + "\nreturn " + _ILL), auto)
        assert st == "ok", (before, detail)
    for after in ("return ({}).clamp(-1e9, 1e9)", "return torch.where(({}) > 1e9, 0.0, {})",
                  "t = {}\nreturn t + (t // 1e9) * 0"):
        st, detail = fuzz.check_program(_prog(after.format(_ILL, _ILL)), auto)
        assert st == "wrong" and detail.startswith("values"), (after, detail)
    # the calls are counted in f alone (make_inputs' own calls would shift the start)
    src = _prog("a0 = a0.clamp(-100.0, 100.0)\nreturn a0.exp() * 3 + a0.sin() * 2",
                "torch.randn(5, 5, generator=g).clamp(-2, 2)" + ".add(0)" * 6)
    ns = {}
    exec(src, ns)
    e = ns["f"](*ns["make_inputs"]())
    perts = fuzz._eager_perturbed(ns["f"], ns["make_inputs"], {})
    assert len(perts) == 4 and all(not torch.equal(p, e) for p in perts)
    steps = fuzz._StepCalls()
    with steps:
        x = torch.ones(3)
        y = (x.exp() > 0).float() * x.sin()
        x.round().cos()
    assert (steps.n, steps.last) == (8, 6)     # ones exp gt float sin mul round cos
    calls = [(torch.Tensor.__rfloordiv__, ()), (torch.Tensor.__imod__, ()),
             (torch.Tensor.to, (x, torch.int64)), (torch.div, ()),
             (torch.Tensor.to, (x, torch.float16)), (torch.sin, ())]
    assert [fuzz._is_step_call(f, a, {}) for f, a in calls] == \
        [True, True, True, False, False, False]
    assert fuzz._is_step_call(torch.div, (x, 2), {"rounding_mode": "trunc"})
    del y


def test_oracle_takes_eager_scalar_loops_for_intermediates(monkeypatch):
    """Where eager's vector and scalar loops disagree on an intermediate (Sleef's vector
    fmod is NaN for 1 % 9e-41 in float32, the scalar loop's is the remainder), either is
    right: _ScalarLoops runs every op on inner-stride-2 copies; a third value is wrong."""
    a = torch.ones(64)
    b = torch.full((64,), 9.18e-41)
    with fuzz._ScalarLoops():
        r = (a * 1) % (b * 1)
    torch.testing.assert_close(r, torch.remainder(a[:1], b[:1]).expand(64))
    src = _prog("t = (a0 > -100).float() % (a0 * 0 + 9.18e-41)\nreturn 1 / t",
                "torch.randn(64, generator=g)")
    assert fuzz.check_program(src, {"family": "special"}) == ("ok", "")
    real = cdynamo.optimize
    for wrong in (0.25, 3.0):
        monkeypatch.setattr(cdynamo, "optimize",
                            lambda f, w=wrong: lambda *a: torch.full_like(real(f)(*a), w))
        st, detail = fuzz.check_program(src, {"family": "special"})
        assert st == "wrong" and detail.startswith("values"), (wrong, detail)


def test_oracle_allows_another_order_of_an_ill_conditioned_float_sum(monkeypatch):
    """A float32 sum whose terms cancel (1e30 and -1e30 among numbers near 1) is as right in
    any order: eager's cascade and a kernel's row order differ by up to (n - 1) * u *
    sum(|x|) (fuzz findings dtypes_wrong_b05dd5e0cc, special_wrong_70500e8abd).  The oracle
    moves each eager sum by that bound (_SumOrder) and takes what is within twice the
    movement; a well-conditioned sum computed wrong (an element dropped, 1e-3 off) is still
    wrong, and so is a cancelling sum off by far more than the bound."""
    real = cdynamo.optimize
    col = ("torch.tensor([1.0, 1.6558, 5.3927, 1e30, -3.6176, 2.5, -1e30, -3.0063])"
           ".view(8, 1).expand(8, 3).contiguous()")   # eager sums columns in a cascade

    def seq(f):                      # the terms summed in row order, in float32
        def run(a):
            acc = torch.zeros(a.shape[1:])
            for r in a:
                acc = acc + r
            return acc / a.shape[0]
        return run
    ill = _prog("return a0.mean(0)", col)
    ns = {}
    exec(ill, ns)
    e = ns["f"](*ns["make_inputs"]())
    c = seq(None)(*ns["make_inputs"]())
    assert not torch.equal(e, c)     # the two orders differ (0.0 and -0.376)
    monkeypatch.setattr(cdynamo, "optimize", seq)
    assert fuzz.check_program(ill, {"family": "dtypes"})[0] in ("ok", "fallback")   # not compiled
    moved = fuzz._eager_sum_orders(ns["f"], ns["make_inputs"], {})
    assert len(moved) == 4 and all((p - e).abs().max() > 1e22 for p in moved)
    monkeypatch.setattr(cdynamo, "optimize", lambda f: lambda a: seq(f)(a) + 1e24)
    st, detail = fuzz.check_program(ill, {"family": "dtypes"})
    assert st == "wrong" and detail.startswith("values"), detail
    well = _prog("return a0.sum(0) * 2")
    for wrong in (lambda a: a[1:].sum(0) * 2, lambda a: a.sum(0) * 2 * (1 + 1e-3)):
        monkeypatch.setattr(cdynamo, "optimize", lambda f, w=wrong: w)
        st, detail = fuzz.check_program(well, {"family": "reductions"})
        assert st == "wrong" and detail.startswith("values"), detail


_SELECT_ON_NOISE = fuzz_gen.PRELUDE + '''

def make_inputs():
    g = torch.Generator().manual_seed(578262147)
    a0 = _fill(g, torch.float32, (1, 4)).expand(5, 4).requires_grad_()
    a1 = _fill(g, torch.float32, (3,)).requires_grad_()
    return [a0, a1]


def f(a0, a1):
    t0 = F.layer_norm(a0, (4,))
    t2 = (t0 - t0 * 0.5).sum()
    return torch.where(t2 > 0, t0, t2), a1 * 3
'''


def test_oracle_grads_of_a_selection_on_a_cancelled_sum(monkeypatch):
    """A where chosen by the sign of a sum that cancels to rounding noise (eager -5e-7,
    within the (n - 1) * u * sum(|x|) bound of any summation order) may go either way:
    the forward is accepted through _SumOrder, and so are the gradients of the other
    branch, from backwards through the same sum orders' runs (gbw's finding,
    tests/fuzz_regressions/case_train_wrong_890503650f.py).  Not a blanket allowance:
    the gradient of an input the selection does not reach is still compared exactly,
    and the other branch's gradients under eager's own forward value are wrong."""
    meta = {"family": "train", "train": True}

    def other_order(f, a1_grad=0.0):
        def run(a0, a1):
            t0 = F.layer_norm(a0, (4,))
            t2 = (t0 - t0 * 0.5).sum() + 1e-6       # summed in another order: > 0
            a1w = a1 * a1_grad
            return torch.where(t2 > 0, t0, t2), a1 * 3 + (a1w - a1w.detach())
        return run
    import torch.nn.functional as F
    monkeypatch.setattr(cdynamo, "optimize", other_order)
    assert fuzz.check_program(_SELECT_ON_NOISE, meta)[0] == "fallback"     # not compiled
    # a1's gradient off by 1e-3: the sum orders do not move it
    monkeypatch.setattr(cdynamo, "optimize", lambda f: other_order(f, a1_grad=1e-3))
    st, detail = fuzz.check_program(_SELECT_ON_NOISE, meta)
    assert st == "wrong" and "grad of input 1" in detail, detail

    def grads_only(f):       # eager's forward value, the other branch's gradients
        def run(a0, a1):
            e = f(a0, a1)
            alt = F.layer_norm(a0, (4,))
            return (e[0].detach() + (alt - alt.detach()),) + tuple(e[1:])
        return run
    monkeypatch.setattr(cdynamo, "optimize", grads_only)
    st, detail = fuzz.check_program(_SELECT_ON_NOISE, meta)
    assert st == "wrong" and "grad of input 0" in detail, detail
