"""Shared fixtures and helpers for the cdynamo test suite.

Every test gets a fresh on-disk kernel cache (cdynamo.config.cache_dir and the
CDYNAMO_CACHE_DIR environment variable point at a per-test temp dir) and a
cdynamo.reset() before and after it, so counters in cdynamo.stats() start at 0.
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import cdynamo

# ops whose float32 result may differ by an ulp or so from ATen's vectorized versions
TRANSCENDENTAL = {"exp", "log", "sqrt", "sigmoid", "tanh", "div", "truediv"}


@pytest.fixture(autouse=True)
def fresh_cdynamo(tmp_path, monkeypatch):
    cache = tmp_path / "cdynamo_cache"
    cache.mkdir()
    monkeypatch.setenv("CDYNAMO_CACHE_DIR", str(cache))
    monkeypatch.setattr(cdynamo.config, "cache_dir", str(cache))
    monkeypatch.setattr(cdynamo.config, "cache_size_limit", cdynamo.config.cache_size_limit)
    # every test draws the same random inputs whatever ran before it (and with -k, -x)
    torch.manual_seed(0)
    cdynamo.reset()
    yield cache
    cdynamo.reset()


def _flatten(out):
    if isinstance(out, (tuple, list)):
        res = []
        for o in out:
            res.extend(_flatten(o))
        return res
    return [out]


def make_tensor(dtype, shape, seed=0, low=0, high=200):
    """A reproducible tensor for differential tests: bool coin flips, floats drawn as
    float64 normals then cast, integers uniform in [low, high)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return torch.randint(low, high, shape, generator=g, dtype=dtype)


def assert_same(expected, actual, transcendental=False):
    """Compare an eager result with a compiled one: structure, types, dtype, shape,
    stride and values (exact for integer/bool dtypes)."""
    assert type(actual) is type(expected), (type(expected), type(actual))
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for e, a in zip(expected, actual):
            assert_same(e, a, transcendental)
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected
        return
    assert actual.dtype == expected.dtype, (expected.dtype, actual.dtype)
    assert actual.shape == expected.shape, (expected.shape, actual.shape)
    if expected.numel() > 1:
        assert actual.stride() == expected.stride(), (expected.stride(), actual.stride())
    if expected.dtype.is_floating_point:
        if transcendental and expected.dtype == torch.float32:
            # rtol: eager's and our vectorized float32 exp / tanh / erf / GELU are each a
            # few ulp from the exact value and not the same few; atol as the float32
            # default's (1e-5): a result near zero made by cancellation (3 tanh(x) + 1,
            # then times a sum of 24 such values) differs by a few ulp of its operands
            # (3.4e-6 seen on a Zen 4 host, where eager's AVX-512 tanh is 0.8 ulp from
            # float64 and ours 2)
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
        else:
            torch.testing.assert_close(actual, expected, equal_nan=True)
    else:
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def check(fn, *args, backend="c", transcendental=False, calls=2, compiled=True, **kwargs):
    """Run fn eagerly and under cdynamo.optimize(fn, backend=backend) `calls` times;
    every compiled result must equal eager's. With compiled=True the frame must really
    have been compiled (no fallback, no graph break). Returns cdynamo.stats()."""
    snapshots = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    expected = fn(*args, **kwargs)
    opt = cdynamo.optimize(fn, backend=backend)
    for _ in range(calls):
        actual = opt(*args, **kwargs)
        assert_same(expected, actual, transcendental)
    # inputs must not have been modified
    for a, c in zip(args, snapshots):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, c, rtol=0, atol=0, equal_nan=True)
    st = cdynamo.stats()
    if compiled:
        assert st["frames_compiled"] >= 1, st
        assert st["fallbacks"] == 0 and st["graph_breaks"] == 0, st
        if backend == "c" and calls > 1:
            assert st["cache_hits"] >= calls - 1, st
    return st


def sweep_compiles(fn, make, sizes):
    """From a fresh cdynamo, call optimize(fn) at make(s) for each s under no_grad: every
    result equals eager's; returns the number of frames compiled."""
    cdynamo.reset()
    opt = cdynamo.optimize(fn)
    with torch.no_grad():
        for s in sizes:
            args = make(s)
            assert_same(fn(*args), opt(*args))
    return cdynamo.stats()["frames_compiled"]


def run_one_graph(fn, *args):
    """fn compiled equals fn eager (values, dtype, shape, strides) on two calls, with no
    graph break and no fallback; the optimized function."""
    expected = fn(*args)
    opt = cdynamo.optimize(fn)
    for _ in range(2):
        assert_same(expected, opt(*args))
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["fallbacks"] == 0, st
    return opt


def check_raises(fn, *args, backend="c"):
    """fn raises eagerly: the optimized fn must raise the same exception type.
    Returns (eager_exc, compiled_exc)."""
    with pytest.raises(Exception) as eager:
        fn(*args)
    opt = cdynamo.optimize(fn, backend=backend)
    with pytest.raises(Exception) as comp:
        opt(*args)
    assert type(comp.value) is type(eager.value), (eager.value, comp.value)
    return eager.value, comp.value


def run_python(code, env_extra=None, cache_dir=None, timeout=120):
    """Run `code` in a fresh interpreter that imports cdynamo the same way this one does."""
    env = dict(os.environ)
    paths = [os.path.dirname(os.path.dirname(os.path.abspath(cdynamo.__file__)))]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("CDYNAMO_LOGS", None)
    if cache_dir is not None:
        env["CDYNAMO_CACHE_DIR"] = str(cache_dir)
    if env_extra:
        env.update(env_extra)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def assert_traces_without_torch_meta(code):
    """In a fresh interpreter, `code` (defining zero-argument `compiled` and
    `eager`, and optionally TOL, assert_close's tolerances) compiles one graph
    without torch importing torch.fx's symbolic shapes (sympy: 0.35-0.95 s on
    the first torch meta function that calls torch._check in a process), and
    compiled() equals eager().  The import is checked before any
    torch.testing call, which imports it itself."""
    p = run_python("import sys, torch, cdynamo\nTOL = {}\n" + textwrap.dedent(code) + """
with torch.no_grad():
    out = compiled()
    print("IMPORTED", "torch.fx.experimental.symbolic_shapes" in sys.modules)
    print("GRAPHS", len(cdynamo._support.compiles))
    torch.testing.assert_close(out, eager(), **TOL)
""")
    assert p.returncode == 0, p.stderr
    assert "IMPORTED False" in p.stdout, p.stdout
    assert "GRAPHS 1" in p.stdout, p.stdout
