"""A newcomer's first hour (issue 35): optimized objects behave like torch.compile's
(signature, functools.wraps attributes, pickle / torch.save / deepcopy, one subclass per
module class, explain and disable of optimized objects), mistakes raise errors that name
the valid choices, fallbacks the user can act on warn once, a runtime error of a compiled
graph names the user's FILE:LINE, and the README's install text is true."""
import copy
import functools
import inspect
import io
import os
import pickle
import re
import sys
import traceback
import warnings

import pytest
import torch

import cdynamo
from cdynamo import _support
from conftest import run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class MLP(torch.nn.Module):
    """A small MLP (module-level: pickle finds its class)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x, scale: float = 1.0):
        """Two layers."""
        return self.fc2(torch.relu(self.fc1(x))) * scale


def scaled(x, y: int = 2):
    """x * y + 1."""
    return x * y + 1


def entries(fn):
    return cdynamo._C.cache_entry_count(fn.__code__)


# --------------------------------------------------------------------------- objects

def test_signature_of_function_and_module_forward():
    opt = cdynamo.optimize(scaled)
    assert inspect.signature(opt) == inspect.signature(scaled)
    om = cdynamo.optimize(MLP())
    # transformers' generate reads inspect.signature(model.forward)
    assert str(inspect.signature(om.forward)) == "(x, scale: float = 1.0)"
    assert list(inspect.signature(om.forward).parameters) == ["x", "scale"]
    assert inspect.signature(om.forward) == inspect.signature(MLP().forward)


def test_wraps_attributes():
    def f(x):
        """doc of f"""
        return x + 1
    f.custom = {"k": 1}
    f.__annotations__["x"] = torch.Tensor
    for wrapper in (cdynamo.optimize(f), cdynamo.disable(f)):
        assert wrapper.__name__ == "f"
        assert wrapper.__qualname__ == f.__qualname__
        assert wrapper.__doc__ == "doc of f"
        assert wrapper.__module__ == __name__
        assert wrapper.__wrapped__ is f
        assert wrapper.custom is f.custom
        assert wrapper.__annotations__ == {"x": torch.Tensor}
    om = cdynamo.optimize(MLP())
    assert type(om).forward.__name__ == "forward"
    assert type(om).forward.__doc__ == "Two layers."
    assert type(om).forward.__wrapped__ is MLP.forward


def test_pickle_and_torch_save_round_trip_to_an_optimized_module():
    m = MLP().eval()
    om = cdynamo.optimize(m)
    x = torch.randn(3, 8)
    with torch.no_grad():
        ref = m(x)
        for load in (lambda: pickle.loads(pickle.dumps(om)), lambda: _torch_save_load(om)):
            back = load()
            # as torch.compile's OptimizedModule: it loads as an optimized module of a copy
            assert isinstance(back, MLP) and type(back) is type(om)
            assert back._cdynamo_orig_mod is not m
            assert back.fc1.weight is not m.fc1.weight
            torch.testing.assert_close(back(x), ref)
    assert cdynamo.stats()["recompiles"] == 0


def _torch_save_load(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


def test_deepcopy_is_optimized_copy():
    m = MLP().eval()
    om = cdynamo.optimize(m)
    c = copy.deepcopy(om)
    assert type(c) is type(om)
    assert c.fc1.weight is not m.fc1.weight
    torch.testing.assert_close(c.fc1.weight, m.fc1.weight)
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x))
        c(x)
    assert cdynamo.stats()["frames_compiled"] == 1
    # the copy's parameters are its own
    with torch.no_grad():
        c.fc2.bias.add_(1.0)
    assert not torch.equal(c.fc2.bias, m.fc2.bias)


def test_optimizing_a_module_twice_does_not_recompile():
    m = MLP().eval()
    x = torch.randn(2, 8)
    with torch.no_grad():
        a = cdynamo.optimize(m)
        a(x)
        b = cdynamo.optimize(m)
        b(x)
        cdynamo.optimize(a)(x)          # an optimized module optimized again
    assert type(a) is type(b)
    st = cdynamo.stats()
    assert st["recompiles"] == 0 and st["frames_compiled"] == 1, st
    assert entries(MLP.forward) == 1


def test_explain_of_optimized_module_adds_no_entry():
    om = cdynamo.optimize(MLP().eval())
    x = torch.randn(2, 8)
    with torch.no_grad():
        om(x)
        for _ in range(3):
            e = cdynamo.explain(om)(x)
            assert e.graph_count == 1
    assert entries(MLP.forward) == 1
    assert cdynamo.stats()["recompiles"] == 0


def test_disable_of_optimized_function_does_not_compile():
    d = cdynamo.disable(cdynamo.optimize(scaled))
    x = torch.randn(4)
    torch.testing.assert_close(d(x), scaled(x))
    assert d.__name__ == "scaled" and d.__wrapped__ is scaled
    assert cdynamo.stats()["frames_compiled"] == 0 and entries(scaled) == 0
    dm = cdynamo.disable(cdynamo.optimize(MLP().eval()))
    with torch.no_grad():
        dm(torch.randn(2, 8))
    assert cdynamo.stats()["frames_compiled"] == 0


# --------------------------------------------------------------------------- mistakes

def test_config_rejects_bad_values_and_names(monkeypatch):
    cfg = cdynamo.config
    with pytest.raises(TypeError, match="cache_size_limit must be an int"):
        cfg.cache_size_limit = "a"
    with pytest.raises(ValueError, match=">= 0"):
        cfg.cache_size_limit = -1
    with pytest.raises(TypeError):
        cfg.debug = "yes"
    with pytest.raises(ValueError):
        cfg.pack_linear_weights = "sometimes"
    with pytest.raises(AttributeError, match="cache_size_limit.*output_pool_mb"):
        cfg.cache_size_limt = 4
    with pytest.raises(AttributeError, match="no setting 'cache_size_limt'"):
        cfg.cache_size_limt
    assert not hasattr(cfg, "cache_size_limt")
    monkeypatch.setattr(cfg, "cache_size_limit", 3)
    assert cfg.cache_size_limit == 3
    monkeypatch.setattr(cfg, "debug_dir", None)


def test_unknown_log_topic_raises():
    with pytest.raises(ValueError, match="unknown topic recompile;.*recompiles, graph_breaks"):
        _support.parse_topics("recompile")
    assert _support.parse_topics("recompiles , guards") == {"recompiles", "guards"}
    assert _support.parse_topics("all") == set(_support.TOPICS)
    r = run_python("import cdynamo", {"CDYNAMO_LOGS": "graph_break"})
    assert r.returncode != 0
    assert "unknown topic graph_break" in r.stderr and "graph_breaks" in r.stderr


def test_explain_none_names_what_it_got():
    with pytest.raises(TypeError, match="got NoneType"):
        cdynamo.explain(None)


def test_overhead_breakdown_of_plain_function_raises():
    with pytest.raises(TypeError, match="cdynamo.optimize"):
        cdynamo.overhead_breakdown(scaled, torch.randn(4), calls=10)


def test_explain_runs_a_wraps_decorated_function_as_decorated():
    calls = []

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(x):
            calls.append(1)
            return fn(x) * 10
        return wrapper

    @deco
    def f(x):
        return x + 1

    x = torch.ones(3)
    e = cdynamo.explain(f)(x)
    torch.testing.assert_close(e.out, (x + 1) * 10)
    assert calls == [1]


# --------------------------------------------------------------------------- warnings

def test_grad_mode_trains_compiled_without_a_warning():
    m = cdynamo.optimize(MLP())         # parameters require grad, grad mode on
    x = torch.randn(2, 8)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            m(x).sum().backward()
    assert not [i for i in w if issubclass(i.category, cdynamo.CdynamoWarning)]
    assert cdynamo.stats()["frames_compiled"] == 2      # the forward and the backward


def test_grad_mode_fallback_warns_once_per_function(monkeypatch):
    """A training frame that runs eagerly for a reason the user can act on (an op without
    a derivative formula; compile_backward off) warns once per function."""
    f = cdynamo.optimize(lambda a: torch.prod(a, 1).sum())
    x = torch.randn(2, 8, requires_grad=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            f(x).backward()
    msgs = [str(i.message) for i in w if issubclass(i.category, cdynamo.CdynamoWarning)]
    assert len(msgs) == 1, msgs
    assert "prod has no derivative formula" in msgs[0] and "runs eagerly" in msgs[0]
    monkeypatch.setattr(cdynamo.config, "compile_backward", False)
    m = cdynamo.optimize(MLP())
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            m(torch.randn(2, 8)).sum().backward()
    msgs = [str(i.message) for i in w if issubclass(i.category, cdynamo.CdynamoWarning)]
    assert len(msgs) == 1, msgs
    assert "requires grad and grad mode is on" in msgs[0] and "runs eagerly" in msgs[0]


def test_unsupported_dtype_warns_once_ordinary_break_does_not():
    def c(x):
        return x * 2

    def brk(x):
        if x.sum() > 0:        # a data-dependent branch: an ordinary graph break
            return x + 1
        return x - 1

    oc, ob = cdynamo.optimize(c), cdynamo.optimize(brk)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            oc(torch.ones(3, dtype=torch.complex64))
            ob(torch.ones(3))
    msgs = [str(i.message) for i in w if issubclass(i.category, cdynamo.CdynamoWarning)]
    assert len(msgs) == 1, msgs
    assert "complex64 is not supported" in msgs[0]
    assert cdynamo.stats()["graph_breaks"] >= 2


# --------------------------------------------------------------------------- runtime errors

def gather_rows(x, idx):
    y = x * 2
    return y[idx] + 1          # GATHER_LINE


def embed(w, idx):
    return torch.nn.functional.embedding(idx, w) * 3    # EMBED_LINE


def _line(marker):
    with open(__file__) as f:
        return next(i for i, l in enumerate(f, 1) if l.rstrip().endswith(marker) and "def" not in l)


@pytest.mark.parametrize("backend", ["c", "eager"])
@pytest.mark.parametrize("fn,marker", [(gather_rows, "# GATHER_LINE"), (embed, "# EMBED_LINE")])
def test_runtime_error_names_user_line(fn, marker, backend):
    opt = cdynamo.optimize(fn, backend=backend)
    x, good, bad = torch.randn(5, 3), torch.tensor([0, 4]), torch.tensor([0, 7])
    torch.testing.assert_close(opt(x, good), fn(x, good))
    opt(x, good)
    with pytest.raises(IndexError) as eager_err:
        fn(x, bad)
    with pytest.raises(IndexError) as err:
        opt(x, bad)
    assert str(err.value) == str(eager_err.value)
    text = "".join(traceback.format_exception(err.value))
    assert f'File "{__file__}", line {_line(marker)}, in {fn.__name__}' in text, text
    assert cdynamo.stats()["frames_compiled"] == 1


# --------------------------------------------------------------------------- README

def _readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def _ci_run_packages():
    """The system and Python packages .ci/run installs, read from the script."""
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        text = f.read()
    apt = set(re.findall(r"need\+=\(([\w.+-]+)\)", text))
    pip_line = next(l.split() for l in text.splitlines()
                    if "-m pip install" in l and "torch==" in l)
    pip = [re.sub(r"[\"']", "", a) for a in pip_line[pip_line.index("off") + 1:]]
    return apt, pip


def test_readme_install_text_is_true():
    text = _readme()
    # users get torch's CPU build from PyTorch's CPU index, pinned; the default index works too
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in text
    assert re.search(r"`pip install torch==2\.13\.0` from the default index works too: it gets "
                     r"the CUDA build", text)
    apt, pip = _ci_run_packages()
    assert apt == {"libffi-dev", "gcc", "g++"}, apt
    assert "torch==2.13.0" in pip and "transformers==5.23.0" in pip, pip
    install = text[text.index("What `.ci/run` installs"):text.index("## Quick example")]
    for pkg in sorted(apt) + pip:
        assert f"`{pkg}`" in install or pkg in install.split("```")[-2], pkg
    # what .ci/run does about the index, and why
    assert "default package index (PyPI), because that is the one index" in install
    # the design document is the repository's own
    assert "../shared/" not in text
    assert "docs/DESIGN.md" in text and os.path.isfile(os.path.join(ROOT, "docs", "DESIGN.md"))
    with open(os.path.join(ROOT, "docs", "DESIGN.md")) as f:
        design = f.read()
    assert "../shared" not in design
    # every file of csrc/ is named in its layout (the layout is today's)
    csrc = os.path.join(ROOT, "csrc")
    files = [f for _, _, fs in os.walk(csrc) for f in fs if f.endswith((".c", ".h", ".def"))]
    assert len(files) > 40
    missing = [f for f in files if f not in design]
    assert not missing, f"docs/DESIGN.md does not name {missing}"


# --------------------------------------------------------------------------- bench

def test_readme_lists_every_bench_option():
    r = run_python("import sys; from cdynamo import bench; sys.argv = ['b', '--help']; "
                   "bench.parse_args()")
    opts = set(re.findall(r"(--[a-z][a-z-]+)", r.stdout)) - {"--help"}
    assert {"--max-time-per-workload", "--no-progress", "--quick", "--plot"} <= opts, opts
    text = _readme()
    bench_part = text[text.index("## Benchmark"):text.index("## Environment variables")]
    missing = [o for o in sorted(opts) if f"`{o}" not in bench_part]
    assert not missing, missing


def test_bench_quick_settings():
    from cdynamo import bench
    a = bench.parse_args(["--quick"])
    assert a.rounds == 5 and a.max_time_per_workload == 0.5 and a.inductor_budget == 30.0
    names = [w.name for w in bench.select_workloads(None, quick=True)]
    assert names == list(bench.QUICK) and len(names) == 5
    # --filter still picks others under --quick
    assert [w.name for w in bench.select_workloads(["t5"], quick=True)] == ["t5_small", "hf_t5"]


def test_host_speed_line_warns_only_when_speed_moved():
    from cdynamo import bench
    machine = {"cpu_model": "CPU", "cores": 2, "threads": 2, "torch_version": "2.13.0",
               "python_version": "3.11"}
    lines = {}
    for start, end in ((195.4, 181.6), (1.0, 1.1), (190.0, 90.0), (90.0, 190.0)):
        buf = io.StringIO()
        bench.print_table([], dict(machine, compute_gflops={"start": start, "end": end}),
                          file=buf)
        lines[(start, end)] = next(l for l in buf.getvalue().splitlines()
                                   if l.startswith("compute"))
    assert lines[(195.4, 181.6)].endswith("181.6 at the end"), lines
    assert lines[(1.0, 1.1)].endswith("1.1 at the end"), lines
    assert "slowed by 53% during the run" in lines[(190.0, 90.0)]
    assert "sped up by 53% during the run" in lines[(90.0, 190.0)]
    assert "slowed shared host shows here" not in "".join(lines.values())


def test_plot_caption_and_picture(tmp_path):
    from cdynamo import bench
    machine = {"cpu_model": "AMD EPYC", "cores": 2, "threads": 2, "torch_version": "2.13.0+cpu",
               "python_version": "3.11.7", "compute_gflops": {"start": 190.0, "end": 185.0}}
    cap = bench.plot_caption(machine, {"quick": True})
    for part in ("AMD EPYC", "2 cores, 2 threads", "torch 2.13.0+cpu", "python 3.11.7",
                 "--quick run", "190 GFLOP/s"):
        assert part in cap, cap
    row = {"name": "w", "kind": "pointwise", "ok": {"eager": True, "inductor": False,
                                                     "cdynamo": True},
           "us": {"eager": 10.0, "inductor": None, "cdynamo": 5.0},
           "speedup": {"inductor": None, "cdynamo": 2.0},
           "compile_s": {"inductor": None, "cdynamo": 0.03}}
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert bench.write_plot(str(tmp_path / "p.png"), [row], machine) is False
        return
    assert bench.write_plot(str(tmp_path / "p.png"), [row], machine, {"quick": True})
    assert (tmp_path / "p.png").stat().st_size > 10000


def test_bound_forward_of_optimized_module_counts_as_optimized():
    om = cdynamo.optimize(MLP().eval())
    x = torch.randn(2, 8)
    with torch.no_grad():
        b = cdynamo.overhead_breakdown(om.forward, x, calls=20)
        assert b["total"] > 0
        e = cdynamo.explain(om.forward)(x)
    assert e.graph_count == 1 and entries(MLP.forward) == 1
    d = cdynamo.disable(MLP())
    assert "_parameters" not in vars(d)      # a module's state is not copied into the wrapper


class _Box:
    pass


def gather_and_store(x, idx, box):
    box.seen = 1               # an attribute store: the call takes the frame path
    y = x * 2
    return y[idx] + 1          # STORE_GATHER_LINE


def test_runtime_error_on_frame_path_names_user_line_once():
    opt = cdynamo.optimize(gather_and_store)
    x, box = torch.randn(5, 3), _Box()
    opt(x, torch.tensor([0, 1]), box)
    opt(x, torch.tensor([0, 1]), box)
    assert cdynamo.stats()["direct_calls"] == 0
    with pytest.raises(IndexError) as err:
        opt(x, torch.tensor([0, 9]), box)
    text = "".join(traceback.format_exception(err.value))
    where = f'File "{__file__}", line {_line("# STORE_GATHER_LINE")}, in gather_and_store'
    assert text.count(where) == 1, text
