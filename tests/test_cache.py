"""Cache entries, guards and recompiles, the recompile limit and the on-disk kernel cache."""
import ctypes
import json
import os
import shutil
import subprocess
import sys
import warnings

import pytest
import torch

import cdynamo
from conftest import assert_same, run_python


def body(x, y):
    return torch.relu(x * y + 1.0) - y


def entries(opt):
    return cdynamo._C.cache_entry_count(opt.__wrapped__.__code__)


def test_second_call_is_a_cache_hit():
    x, y = torch.randn(16, 8), torch.randn(16, 8)
    f = cdynamo.optimize(body)
    assert_same(body(x, y), f(x, y))
    st1 = cdynamo.stats()
    assert st1["frames_compiled"] == 1 and st1["kernels_compiled"] >= 1
    assert st1["cache_misses"] == 1 and st1["cache_hits"] == 0
    x2, y2 = torch.randn(16, 8), torch.randn(16, 8)  # same meta, new values
    assert_same(body(x2, y2), f(x2, y2))
    st2 = cdynamo.stats()
    assert st2["frames_compiled"] == st1["frames_compiled"]
    assert st2["kernels_compiled"] == st1["kernels_compiled"]
    assert st2["cache_hits"] == st1["cache_hits"] + 1
    assert st2["recompiles"] == 0
    assert entries(f) == 1


def test_kernel_written_to_config_cache_dir(fresh_cdynamo):
    x = torch.randn(5)
    cdynamo.optimize(lambda a: a * 3 + 1)(x)
    files = os.listdir(fresh_cdynamo)
    assert any(n.endswith(".so") for n in files), files


def _dynsyms(path):
    """(name, version or None, defined) of each dynamic symbol of a shared object
    (readelf's table; version None for an unversioned reference)."""
    out = subprocess.run(["readelf", "--dyn-syms", "-W", path], capture_output=True,
                         text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        f = line.split()
        if len(f) < 8 or not f[0].rstrip(":").isdigit() or f[3] not in ("FUNC", "IFUNC", "NOTYPE"):
            continue
        name, _, ver = f[7].partition("@")
        rows.append((name, ver.lstrip("@") or None, f[6] != "UND"))
    return rows


def _mappings():
    """(start, end, path or "") of each mapping of this process."""
    with open("/proc/self/maps") as m:
        for line in m:
            f = line.split()
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            yield lo, hi, f[5] if len(f) > 5 else ""


def _process_lib(prefix):
    return next((p for _, _, p in _mappings() if os.path.basename(p).startswith(prefix)), None)


def _defined_in(name, paths):
    """Whether the process's dlsym(RTLD_DEFAULT, name) lies in one of the libraries at
    paths (not in an interposer loaded before them, as AddressSanitizer's runtime)."""
    addr = ctypes.cast(getattr(ctypes.CDLL(None), name), ctypes.c_void_p).value
    return any(lo <= addr < hi and p in paths for lo, hi, p in _mappings())


def test_kernel_calls_bind_the_current_library_versions(fresh_cdynamo):
    """Kernels link with -nostdlib, so a reference to libc or libm has no version, and
    the dynamic linker binds that to the oldest one: glibc's SSE2 memcpy@GLIBC_2.2.5,
    libm's compat wrappers of exp, pow, ...  No kernel may name a function that its
    library defines in more than one version (the calls are renamed to one-version
    aliases of the current function)."""
    libs = [_process_lib("libc.so"), _process_lib("libm.so")]
    if None in libs or shutil.which("readelf") is None:
        pytest.skip("needs glibc's libc/libm in the process and readelf")
    versions = {}
    for lib in libs:
        for name, ver, defined in _dynsyms(lib):
            if defined and ver:
                versions.setdefault(name, set()).add(ver)
    several = {n for n, v in versions.items() if len(v) > 1}
    assert "memcpy" in several  # what the test is about: glibc keeps the old memcpy

    def f64(x, y):
        return torch.exp(x) + torch.pow(x, y) + torch.log(y) + torch.hypot(x, y) + torch.lgamma(y)

    def f32(x, y):
        return torch.pow(x, y) + torch.hypot(x, y) + torch.lgamma(y) + torch.exp2(x)

    u8 = torch.randint(0, 255, (3, 224, 224), dtype=torch.uint8)
    a, b = torch.rand(1000, dtype=torch.float64), torch.rand(1000, dtype=torch.float64) + 0.5
    for fn, args in ((lambda x: x.flip(-2), (u8,)), (f64, (a, b)), (f32, (a.float(), b.float()))):
        assert_same(fn(*args), cdynamo.optimize(fn)(*args), transcendental=True)
    sos = [os.path.join(fresh_cdynamo, n) for n in os.listdir(fresh_cdynamo) if n.endswith(".so")]
    assert len(sos) == 3
    for so in sos:
        undefined = {n for n, ver, defined in _dynsyms(so) if not defined and not ver}
        # a name another library defines first (an interposer) binds to that one
        oldest = {n for n in undefined & several if _defined_in(n, libs)}
        assert not oldest, (so, sorted(oldest))


def test_new_shape_recompiles_once():
    f = cdynamo.optimize(body)
    a, b = torch.randn(64, 4), torch.randn(32, 4)
    assert_same(body(a, a), f(a, a))
    assert_same(body(b, b), f(b, b))
    assert_same(body(b, b), f(b, b))
    assert_same(body(a, a), f(a, a))   # the first entry is still there
    st = cdynamo.stats()
    assert st["recompiles"] == 1
    assert st["frames_compiled"] == 2
    assert st["cache_hits"] == 2
    assert entries(f) == 2


@pytest.mark.parametrize("change", ["dtype", "stride", "requires_grad", "ndim", "type"])
def test_meta_change_recompiles(change):
    x = torch.randn(6, 7)
    f = cdynamo.optimize(lambda a: a * 2 + 1)
    f(x)
    if change == "dtype":
        x2 = x.double()
    elif change == "stride":
        x2 = x.t().contiguous().t()
        assert x2.shape == x.shape and x2.stride() != x.stride()
    elif change == "requires_grad":
        x2 = x.clone().requires_grad_(True)
    elif change == "ndim":
        x2 = x.reshape(6, 7, 1)
    else:
        x2 = torch.nn.Parameter(x.clone(), requires_grad=False)
    out = f(x2)
    assert_same(x2 * 2 + 1, out)
    if change == "requires_grad":
        assert out.requires_grad and out.grad_fn is not None
    st = cdynamo.stats()
    assert st["recompiles"] == 1, st
    assert st["cache_misses"] == 2
    # both variants now hit their own entries (or run eagerly, for requires_grad)
    assert_same(x * 2 + 1, f(x))
    assert cdynamo.stats()["recompiles"] == 1


def test_constant_argument_change_recompiles():
    def g(x, n):
        return x * n + n
    f = cdynamo.optimize(g)
    x = torch.randn(4, 4)
    assert_same(g(x, 2), f(x, 2))
    assert_same(g(x, 3), f(x, 3))
    assert cdynamo.stats()["recompiles"] == 1
    assert_same(g(x, 2), f(x, 2))
    assert_same(g(x, 3), f(x, 3))
    st = cdynamo.stats()
    assert st["recompiles"] == 1 and st["cache_hits"] == 2
    # int 2 vs float 2.0 vs bool True: equal under ==, but the result dtypes differ
    xi = torch.arange(6)
    assert_same(g(xi, 2), f(xi, 2))
    assert_same(g(xi, 2.0), f(xi, 2.0))
    assert_same(g(xi, True), f(xi, True))
    assert_same(g(xi, 1), f(xi, 1))


ACT = torch.relu


def uses_global(x):
    return ACT(x) + 1


def test_global_function_identity_guard():
    global ACT
    f = cdynamo.optimize(uses_global)
    x = torch.randn(10)
    try:
        ACT = torch.relu
        assert_same(torch.relu(x) + 1, f(x))
        assert_same(torch.relu(x) + 1, f(x))
        assert cdynamo.stats()["recompiles"] == 0
        ACT = torch.sigmoid
        assert_same(torch.sigmoid(x) + 1, f(x))
        assert cdynamo.stats()["recompiles"] == 1
        ACT = torch.relu
        assert_same(torch.relu(x) + 1, f(x))
        assert cdynamo.stats()["recompiles"] == 1
    finally:
        ACT = torch.relu


SCALE = 2.0


def uses_global_scalar(x):
    return x * SCALE


def test_global_scalar_value_guard():
    global SCALE
    f = cdynamo.optimize(uses_global_scalar)
    x = torch.randn(10)
    try:
        assert_same(x * 2.0, f(x))
        SCALE = 3.0
        assert_same(x * 3.0, f(x))
        assert cdynamo.stats()["recompiles"] == 1
    finally:
        SCALE = 2.0


def uses_torch_attr(x):
    return torch.sigmoid(x) + 1


def test_monkeypatched_torch_function_is_guarded():
    f = cdynamo.optimize(uses_torch_attr)
    x = torch.randn(10)
    f(x)
    orig = torch.sigmoid
    torch.sigmoid = torch.tanh
    try:
        out = f(x)
    finally:
        torch.sigmoid = orig
    assert_same(torch.tanh(x) + 1, out)


def test_cache_size_limit(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "cache_size_limit", 2)

    def g(x):
        return x * 2 + 1
    f = cdynamo.optimize(g, dynamic=False)   # every size its own entry
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for n in (8, 7, 6, 5, 6, 5):
            x = torch.randn(n)
            assert_same(g(x), f(x))
    limit_warnings = [w for w in rec if issubclass(w.category, cdynamo.CdynamoWarning)]
    assert len(limit_warnings) == 1, [str(w.message) for w in rec]
    msg = str(limit_warnings[0].message)
    assert "cache_size_limit" in msg and "g" in msg
    assert entries(f) == 2
    st = cdynamo.stats()
    assert st["frames_compiled"] == 2
    # the first two shapes still run their compiled code
    before = st["cache_hits"]
    for n in (8, 7):
        x = torch.randn(n)
        assert_same(g(x), f(x))
    assert cdynamo.stats()["cache_hits"] == before + 2
    assert cdynamo.stats()["frames_compiled"] == 2


def test_cache_size_limit_warning_names_file(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "cache_size_limit", 1)

    def g(x):
        return x + 1
    f = cdynamo.optimize(g)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        f(torch.randn(3))
        f(torch.randn(4))
    msgs = [str(w.message) for w in rec if issubclass(w.category, cdynamo.CdynamoWarning)]
    assert len(msgs) == 1
    assert f"({__file__}:{g.__code__.co_firstlineno})" in msgs[0], msgs[0]


def test_cache_limit_does_not_trace_cdynamo_internals(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "cache_size_limit", 1)

    def g(x):
        return x + 1
    f = cdynamo.optimize(g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (3, 4, 5):
            f(torch.randn(n))
    pkg = os.path.dirname(cdynamo.__file__)
    internal = [b for b in cdynamo._support.breaks if b["filename"].startswith(pkg)]
    assert internal == []
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["frames_seen"] == 3, st


RECOMPILE_SCRIPT = """
import torch, cdynamo
def f(x):
    return x * 2
g = cdynamo.optimize(f)
g(torch.randn(64))
g(torch.randn(32))
g(torch.randn(32, dtype=torch.float64))
g(torch.randn(64, 2).t())
print("RECOMPILES", cdynamo.stats()["recompiles"])
"""


def test_recompile_log_subprocess(tmp_path):
    r = run_python(RECOMPILE_SCRIPT, {"CDYNAMO_LOGS": "recompiles"}, cache_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "RECOMPILES 3" in r.stdout
    lines = r.stderr.splitlines()
    rec = [l for l in lines if l.startswith("[cdynamo:recompiles] ")]
    text = "\n".join(rec)
    def_line = RECOMPILE_SCRIPT.splitlines().index("def f(x):") + 1
    assert f"Recompiling function f in <string>:{def_line}" in text
    assert "    triggered by the following guard failure(s):" in text
    assert "    - tensor 'x' size mismatch at index 0. expected 64, actual 32" in text
    assert "    - tensor 'x' dtype mismatch. expected torch.float32, actual torch.float64" in text
    assert text.count("Recompiling function f") == 3
    # no other topic is logged
    assert not [l for l in lines if l.startswith("[cdynamo:") and ":recompiles]" not in l]


def test_no_logs_without_env(tmp_path):
    r = run_python(RECOMPILE_SCRIPT, cache_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "[cdynamo:" not in r.stderr


def test_recompile_log_in_process(capfd):
    f = cdynamo.optimize(lambda x: x - 1)
    f(torch.randn(64))
    capfd.readouterr()
    cdynamo._C.set_log_topics({"recompiles"})
    try:
        f(torch.randn(64, dtype=torch.float64))
    finally:
        cdynamo._C.set_log_topics(set())
    err = capfd.readouterr().err
    assert "[cdynamo:recompiles] Recompiling function <lambda>" in err
    assert "tensor 'x' dtype mismatch. expected torch.float32, actual torch.float64" in err


DISK_SCRIPT = """
import json, torch, cdynamo
@cdynamo.optimize
def f(x, y):
    return torch.sigmoid(x * y) + torch.maximum(x, y)
x = torch.linspace(-3, 3, 100).reshape(10, 10)
y = torch.linspace(2, -1, 100).reshape(10, 10)
out = f(x, y)
ref = torch.sigmoid(x * y) + torch.maximum(x, y)
torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
print("STATS" + json.dumps(cdynamo.stats()))
"""


def _stats_of(r):
    assert r.returncode == 0, r.stderr
    line = [l for l in r.stdout.splitlines() if l.startswith("STATS")][0]
    return json.loads(line[5:])


def test_disk_cache_across_processes(tmp_path):
    cache = tmp_path / "shared_cache"
    first = _stats_of(run_python(DISK_SCRIPT, cache_dir=cache))
    assert first["kernels_compiled"] >= 1 and first["disk_cache_hits"] == 0
    assert any(n.endswith(".so") for n in os.listdir(cache))
    second = _stats_of(run_python(DISK_SCRIPT, cache_dir=cache))
    assert second["kernels_compiled"] == 0, second
    assert second["disk_cache_hits"] >= 1, second
    assert second["frames_compiled"] == 1
    # another cache dir starts cold
    third = _stats_of(run_python(DISK_SCRIPT, cache_dir=tmp_path / "other"))
    assert third["kernels_compiled"] >= 1 and third["disk_cache_hits"] == 0


POINTWISE_NO_TORCH_META = """
import sys, torch, cdynamo
@cdynamo.optimize
def f(x, y):
    a = torch.where(x > 0, x * 2.0, -y) + 1
    return torch.sigmoid(a).float() / (y.abs() + 1), (x < y) | (x == 0)
x = torch.randn(4, 6)
y = torch.randn(6, 4).t()
out = f(x, y)
ref = (torch.sigmoid(torch.where(x > 0, x * 2.0, -y) + 1) / (y.abs() + 1), (x < y) | (x == 0))
torch.testing.assert_close(out, ref)
assert out[0].stride() == ref[0].stride(), (out[0].stride(), ref[0].stride())
print("DYNAMO", "torch._dynamo" in sys.modules)
"""


def test_pointwise_trace_runs_no_torch_meta_function(tmp_path):
    # torch 2.13's pointwise meta functions are Python refs whose first call
    # imports torch._dynamo (~1.2 s): C rules give lowered pointwise ops their meta
    r = run_python(POINTWISE_NO_TORCH_META, cache_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "DYNAMO False" in r.stdout, r.stdout


def test_disk_cache_in_process_after_reset():
    x = torch.randn(9)
    g = lambda a: torch.tanh(a) * 3  # noqa: E731
    cdynamo.optimize(g)(x)
    assert cdynamo.stats()["kernels_compiled"] == 1
    cdynamo.reset()
    assert cdynamo.stats()["kernels_compiled"] == 0
    assert_same(g(x), cdynamo.optimize(g)(x), transcendental=True)
    st = cdynamo.stats()
    assert st["kernels_compiled"] == 0 and st["disk_cache_hits"] == 1, st


def test_corrupt_disk_cache_entry_is_not_trusted(tmp_path):
    cache = tmp_path / "cache"
    first = _stats_of(run_python(DISK_SCRIPT, cache_dir=cache))
    assert first["kernels_compiled"] >= 1
    sos = [n for n in os.listdir(cache) if n.endswith(".so")]
    assert sos
    for n in sos:
        (cache / n).write_bytes(b"not an elf file")
    # a broken cached kernel must not crash or give a wrong result: recompile or fall back
    r = run_python("import warnings; warnings.simplefilter('ignore')\n" + DISK_SCRIPT,
                   cache_dir=cache)
    st = _stats_of(r)
    assert st["kernels_compiled"] >= 1 or st["fallbacks"] >= 1, st


def test_reset_clears_cache_entries_and_stats():
    f = cdynamo.optimize(body)
    x = torch.randn(3, 3)
    f(x, x)
    f(x, x)
    assert entries(f) == 1
    cdynamo.reset()
    assert entries(f) == 0
    assert all(v == 0 for v in cdynamo.stats().values())
    assert_same(body(x, x), f(x, x))
    assert cdynamo.stats()["frames_compiled"] == 1 and entries(f) == 1


def test_reset_forgets_that_a_torch_module_was_optimized(monkeypatch):
    # nn.Linear.forward lives in torch, whose files the hook skips; optimize(lin)
    # forces that code.  After reset() the hook treats it as in a fresh process
    # again (a frame of it met on its own runs eagerly), and the optimized module
    # forces it anew on its next call.
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)
    code = torch.nn.Linear.forward.__code__

    def g(x):
        x.tolist()            # a graph break first: lin's frame is met on its own
        return lin(x) * 2

    # g's whole frame runs eagerly at its break (not resumed, where lin would be inlined
    # into the resume function's graph)
    monkeypatch.setattr(cdynamo.config, "resume_after_break", False)

    with torch.no_grad():
        opt = cdynamo.optimize(lin)
        assert_same(lin(x), opt(x))
        assert cdynamo._C.cache_entry_count(code) == 1
        cdynamo.reset()
        gg = cdynamo.optimize(g)
        assert_same(g(x), gg(x))
        assert_same(g(x), gg(x))
        assert cdynamo._C.cache_entry_count(code) == 0
        assert cdynamo.stats()["frames_compiled"] == 0
        assert_same(lin(x), opt(x))
        assert cdynamo._C.cache_entry_count(code) == 1


def test_two_wrappers_of_same_function_share_code_entries():
    a = cdynamo.optimize(body)
    b = cdynamo.optimize(body)
    x = torch.randn(4)
    assert_same(body(x, x), a(x, x))
    assert_same(body(x, x), b(x, x))
    assert cdynamo.stats()["frames_compiled"] == 1
