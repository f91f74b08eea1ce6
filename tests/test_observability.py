"""Observability: the debug directory, repro.py, log topics, explain, kernel profiling,
and the eager backend as a tracer-vs-compiler bisection tool."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import cdynamo
from cdynamo import _support

HERE = os.path.abspath(__file__)
PKG = os.path.dirname(os.path.dirname(os.path.abspath(cdynamo.__file__)))


def fused(x, y):
    return torch.relu(x * y + 1.0)


def two_spaces(x, y, z):
    a = torch.relu(x * y + 1.0)
    b = torch.where(z > 0, z, 0.5)       # z is transposed: inner loop not unit stride
    return a, b, y * 2                   # y * 2 has another iteration space: second kernel


def helper(x):
    return x * 2


def with_break(x):
    y = helper(x) + 1                    # helper: traced on its own (graph 1)
    print("side effect")                 # unsupported: graph break
    return torch.cumsum(y, 0) * 3


def inputs():
    torch.manual_seed(0)
    return torch.randn(4, 8), torch.randn(4, 8)


def inputs3():
    torch.manual_seed(0)
    return torch.randn(4, 8), torch.randn(8), torch.randn(8, 4).t()


def _run_dir(tmp_path):
    root = tmp_path / "cdynamo_debug"
    runs = list(root.iterdir())
    assert len(runs) == 1, runs
    assert runs[0].name.startswith("run_") and f"-pid_{os.getpid()}" in runs[0].name
    return runs[0]


@pytest.fixture
def debug_on(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cdynamo.config, "debug", True)
    monkeypatch.setattr(cdynamo.config, "debug_dir", None)
    return tmp_path


# --------------------------------------------------------------------------- debug dir

def test_debug_dir_files(debug_on):
    f = cdynamo.optimize(fused)
    x, y = inputs()
    torch.testing.assert_close(f(x, y), fused(x, y))
    d = _run_dir(debug_on) / "fused_0"
    names = {p.name for p in d.iterdir()}
    assert names == {"graph.txt", "ir_pre_fusion.txt", "ir_post_fusion.txt", "output_code.c",
                     "guards.txt", "bytecode.txt", "repro.py"}
    graph = (d / "graph.txt").read_text()
    for op in ("mul", "add", "relu", "float32"):
        assert op in graph
    code = (d / "output_code.c").read_text()
    assert "void kernel_0(" in code
    assert "/* fused: mul, add, relu" in code
    assert "TENSOR_MATCH" in (d / "guards.txt").read_text()
    bc = (d / "bytecode.txt").read_text()
    assert f"ORIGINAL BYTECODE fused {HERE} line" in bc
    assert f"MODIFIED BYTECODE fused {HERE} line" in bc
    pre = (d / "ir_pre_fusion.txt").read_text()
    assert "= mul(%0, %1) over [4, 8]" in pre and "relu(" in pre
    post = (d / "ir_post_fusion.txt").read_text()
    assert "kernel_0:" in post and "fuses: %2 mul, %4 add, %5 relu" in post
    assert "vectorized: yes" in post and "parallel: no" in post


def test_debug_dir_counts_compiles_per_function(debug_on):
    f = cdynamo.optimize(fused)
    f(*inputs())
    f(torch.randn(3, 5), torch.randn(3, 5))          # new sizes: recompile
    run = _run_dir(debug_on)
    assert {p.name for p in run.iterdir()} == {"fused_0", "fused_1"}
    assert "[3, 5]" in (run / "fused_1" / "graph.txt").read_text()


def test_debug_dir_config_debug_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(cdynamo.config, "debug", True)
    monkeypatch.setattr(cdynamo.config, "debug_dir", str(tmp_path / "elsewhere"))
    cdynamo.optimize(fused)(*inputs())
    runs = list((tmp_path / "elsewhere").iterdir())
    assert len(runs) == 1 and (runs[0] / "fused_0" / "output_code.c").exists()


def test_debug_dir_off_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cdynamo.config, "debug", False)
    cdynamo.optimize(fused)(*inputs())
    assert not (tmp_path / "cdynamo_debug").exists()


def test_debug_dir_eager_backend(debug_on):
    cdynamo.optimize(fused, backend="eager")(*inputs())
    d = _run_dir(debug_on) / "fused_0"
    assert "backend eager: no IR" in (d / "ir_pre_fusion.txt").read_text()
    assert "backend eager: no IR" in (d / "ir_post_fusion.txt").read_text()
    assert "relu" in (d / "graph.txt").read_text()


def test_ir_post_explains_fusion_and_vectorization(debug_on):
    f = cdynamo.optimize(two_spaces)
    f(*inputs3())
    post = (_run_dir(debug_on) / "two_spaces_0" / "ir_post_fusion.txt").read_text()
    assert "kernel_0:" in post and "kernel_1:" in post
    assert "kernel_1 is a separate kernel: its iteration space [8] differs" in post
    assert "vectorized: no: non-unit stride inner loop" in post


def test_env_debug_subprocess(tmp_path):
    env = dict(os.environ, CDYNAMO_DEBUG="1", PYTHONPATH=PKG,
               CDYNAMO_CACHE_DIR=str(tmp_path / "cache"))
    code = textwrap.dedent("""
        import torch, cdynamo
        assert cdynamo.config.debug
        @cdynamo.optimize
        def g(x):
            return x.exp() + 1
        g(torch.randn(10))
    """)
    subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, check=True, timeout=120)
    runs = list((tmp_path / "cdynamo_debug").iterdir())
    assert len(runs) == 1 and (runs[0] / "g_0" / "repro.py").exists()


# --------------------------------------------------------------------------- repro.py

def _run_repro(path, tmp_path):
    env = dict(os.environ, PYTHONPATH=PKG, CDYNAMO_CACHE_DIR=str(tmp_path / "repro_cache"))
    return subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True,
                          timeout=180)


@pytest.mark.parametrize("fn,make", [(fused, inputs), (two_spaces, inputs3)],
                         ids=["fused", "two_spaces"])
def test_repro_runs(debug_on, fn, make):
    cdynamo.optimize(fn)(*make())
    repro = _run_dir(debug_on) / f"{fn.__name__}_0" / "repro.py"
    r = _run_repro(repro, debug_on)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "repro: OK" in r.stdout


def test_repro_dtypes_and_scalars(debug_on):
    def simple(a, b, m):
        return torch.where(m, a * 2 - b, torch.maximum(a, b)), torch.ne(a, b)
    a = torch.randint(-5, 5, (6, 5), dtype=torch.int32)
    b = torch.randint(-5, 5, (5,), dtype=torch.int32)
    m = torch.rand(6, 5) > 0.5
    cdynamo.optimize(simple)(a, b, m)
    r = _run_repro(_run_dir(debug_on) / "simple_0" / "repro.py", debug_on)
    assert r.returncode == 0 and "repro: OK" in r.stdout, r.stdout + r.stderr


def test_repro_reports_mismatch(debug_on):
    """A repro whose graph disagrees with eager exits 1 and prints the mismatch."""
    cdynamo.optimize(fused)(*inputs())
    repro = _run_dir(debug_on) / "fused_0" / "repro.py"
    text = repro.read_text()
    # make the eager reference differ from what cdynamo compiles
    text = text.replace("    expected = fn(*args)\n", "    expected = fn(*args)\n"
                        "    expected = tuple(e + 1 for e in expected)\n")
    repro.write_text(text)
    r = _run_repro(repro, debug_on)
    assert r.returncode == 1 and "MISMATCH" in r.stdout, r.stdout + r.stderr


# --------------------------------------------------------------------------- logs

def _logs(topics, code, tmp_path):
    env = dict(os.environ, CDYNAMO_LOGS=topics, PYTHONPATH=PKG,
               CDYNAMO_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("CDYNAMO_DEBUG", None)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stderr


PROGRAM = """
    import torch, cdynamo
    @cdynamo.optimize
    def two_spaces(x, y, z):
        a = torch.relu(x * y + 1.0)
        b = torch.where(z > 0, z, 0.5)
        return a, b, y * 2
    two_spaces(torch.randn(4, 8), torch.randn(8), torch.randn(8, 4).t())
"""


def test_log_fusion(tmp_path):
    err = _logs("fusion", PROGRAM, tmp_path)
    lines = err.splitlines()
    assert lines and all(l.startswith("[cdynamo:fusion] ") for l in lines), err
    assert "kernel_0: fused nodes: %2 mul, %4 add, %5 relu, %8 gt, %10 where" in err
    assert "not fused: kernel_1 is a separate kernel: its iteration space [8] differs" in err
    assert "kernel_0: inner loop NOT vectorized: non-unit stride inner loop" in err
    assert "kernel_1: inner loop vectorized" in err
    assert "parallel: no" in err


def test_log_debug_topic(tmp_path):
    err = _logs("debug", PROGRAM, tmp_path)
    assert "[cdynamo:debug] __compiled_fn_" in err and " (two_spaces, <string>" in err
    assert "backend c, " in err and "[cdynamo:debug] kernel_0:" in err
    assert "[cdynamo:fusion]" not in err


def test_log_all_topics_say_their_topic(tmp_path):
    err = _logs("+cdynamo", PROGRAM, tmp_path)
    for topic in ("fusion", "debug", "guards", "bytecode", "output_code"):
        assert f"[cdynamo:{topic}] " in err, topic
    assert all(l.startswith("[cdynamo:") for l in err.splitlines() if l.strip()), err


def test_log_fusion_in_process(capfd):
    old = _support.topics
    _support.set_log_topics({"fusion"})
    try:
        cdynamo.optimize(fused)(*inputs())
    finally:
        _support.set_log_topics(old)
    err = capfd.readouterr().err
    name = _support.compiles[-1]["name"]
    assert f"[cdynamo:fusion] {name} (fused" in err
    assert "fused nodes: %2 mul, %4 add, %5 relu" in err
    assert "all outputs share one iteration space: one kernel" in err


def test_no_logs_by_default(capfd):
    old = _support.topics
    _support.set_log_topics(set())
    try:
        cdynamo.optimize(fused)(*inputs())
    finally:
        _support.set_log_topics(old)
    assert "[cdynamo:" not in capfd.readouterr().err


# --------------------------------------------------------------------------- explain

def test_explain_plain_function():
    x, y = inputs()
    e = cdynamo.explain(fused)(x, y)
    torch.testing.assert_close(e.out, fused(x, y))
    assert e.graph_count == 1
    assert e.graph_break_count == 0 and e.break_reasons == []
    assert e.op_count == 3
    assert e.ops_per_graph == [["mul", "add", "relu"]]
    assert any("TENSOR_MATCH" in g and "x" in g for g in e.guards)
    assert e.compile_time_s > 0
    s = str(e)
    assert "Graph Count: 1\nGraph Break Count: 0\nOp Count: 3\n" in s
    assert "Ops per Graph:" in s and "Guards:" in s


def test_explain_graph_break(capsys):
    x = torch.randn(6)
    e = cdynamo.explain(with_break)(x)
    torch.testing.assert_close(e.out, with_break(x))
    assert e.graph_break_count >= 1
    assert e.break_reasons
    lines = {b.line for b in e.break_reasons}
    src = open(HERE).read().splitlines()
    first = src.index("def with_break(x):") + 1
    assert all(b.filename == HERE for b in e.break_reasons)
    assert lines <= set(range(first, first + 4)), lines
    b = e.break_reasons[0]
    assert b.location == f"{HERE}:{b.line}" and b["reason"] == b.reason and b.reason
    assert e.graph_count >= 1 and e.op_count == sum(len(o) for o in e.ops_per_graph)
    assert "mul" in e.ops_per_graph[0]
    assert f"Graph Break Count: {e.graph_break_count}" in str(e)
    assert f"{HERE}:{b.line}" in str(e)


def test_explain_after_compile_reports_cached_graphs():
    f = cdynamo.optimize(fused)
    x, y = inputs()
    f(x, y)
    n = len(_support.compiles)
    e = cdynamo.explain(fused)(x, y)
    assert len(_support.compiles) == n                # no recompile
    assert e.graph_count == 1 and e.op_count == 3 and e.graph_break_count == 0
    e2 = cdynamo.explain(f)(x, y)                     # an optimized wrapper works too
    assert e2.graph_count == 1 and e2.op_count == 3


def test_explain_cached_break():
    x = torch.randn(6)
    cdynamo.explain(with_break)(x)
    e = cdynamo.explain(with_break)(x)
    assert e.graph_break_count >= 1 and e.graph_count >= 1


def test_explain_does_not_reset():
    f = cdynamo.optimize(fused)
    f(*inputs())
    cdynamo.explain(with_break)(torch.randn(3))
    hits = cdynamo.stats()["cache_hits"]
    f(*inputs())
    assert cdynamo.stats()["cache_hits"] == hits + 1
    assert cdynamo.stats()["frames_compiled"] >= 2


# --------------------------------------------------------------------------- profiling

def test_profile_report(monkeypatch, capsys):
    monkeypatch.setattr(cdynamo.config, "profile_kernels", True)
    f = cdynamo.optimize(two_spaces)
    args = inputs3()
    for _ in range(5):
        f(*args)
    g = cdynamo.optimize(fused)
    for _ in range(3):
        g(*inputs())
    text = cdynamo.profile_report()
    assert capsys.readouterr().out == text
    n0, n1 = (r["name"] for r in _support.compiles)
    rows = {l.split()[0]: l for l in text.splitlines()[2:]}
    assert set(rows) == {f"{n0}.kernel_0", f"{n0}.kernel_1", f"{n1}.kernel_0"}
    assert rows[f"{n0}.kernel_0"].split()[-3] == "5"
    assert rows[f"{n0}.kernel_1"].split()[-3] == "5"
    assert rows[f"{n1}.kernel_0"].split()[-3] == "3"
    assert "mul, add, relu" in rows[f"{n1}.kernel_0"]
    assert "kernel" in text.splitlines()[0] and "mean us" in text.splitlines()[0]
    totals = [float(l.split()[-2]) for l in text.splitlines()[2:]]
    assert totals == sorted(totals, reverse=True)
    comp = [r["compiled"] for r in _support.compiles]
    prof = comp[0].kernel_profile
    assert [p[0] for p in prof] == ["kernel_0", "kernel_1"] and all(p[1] == 5 and p[2] > 0
                                                                   for p in prof)


def test_profile_off_counts_nothing(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "profile_kernels", False)
    f = cdynamo.optimize(fused)
    for _ in range(3):
        f(*inputs())
    c = _support.compiles[0]["compiled"]
    assert c.kernel_profile == [("kernel_0", 0, 0)]
    assert "no kernel calls recorded" in cdynamo.profile_report(file=open(os.devnull, "w"))


def test_profile_toggle_and_reset(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "profile_kernels", False)
    f = cdynamo.optimize(fused)
    f(*inputs())
    cdynamo.set_profile_kernels(True)
    assert cdynamo.config.profile_kernels is True
    f(*inputs())
    f(*inputs())
    c = _support.compiles[0]["compiled"]
    assert c.kernel_profile[0][1] == 2
    c.reset_kernel_profile()
    assert c.kernel_profile[0][1:] == (0, 0)


# --------------------------------------------------------------------------- eager backend

@pytest.mark.parametrize("fn,make", [(fused, inputs), (two_spaces, inputs3)],
                         ids=["fused", "two_spaces"])
def test_eager_backend_isolates_tracer_from_compiler(fn, make):
    """backend="eager" traces but runs the graph as torch ops: if it agrees with eager
    PyTorch and backend="c" does not, the bug is in the compiler; if both disagree, in
    the tracer.  Here all three agree."""
    args = make()
    expected = fn(*args)
    got_eager = cdynamo.optimize(fn, backend="eager")(*args)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["fallbacks"] == 0
    assert _support.compiles[-1]["backend"] == "eager"
    assert _support.compiles[-1]["compiled"].ir_post_fusion is None
    cdynamo.reset()
    got_c = cdynamo.optimize(fn, backend="c")(*args)
    assert _support.compiles[-1]["backend"] == "c"
    assert _support.compiles[-1]["compiled"].ir_post_fusion
    torch.testing.assert_close(got_eager, expected, rtol=0, atol=0)
    torch.testing.assert_close(got_c, expected)
    torch.testing.assert_close(got_c, got_eager)
