"""Reliability: injected faults in the compile / kernel-cache path, concurrency
(threads and processes), memory (refcounts, RSS, reset releasing code), and the
unloading of kernel libraries (no -z nodelete).

Every fault must give exactly ONE CdynamoWarning naming the cause and run the
frame eagerly with correct results; a bad cache entry must be rebuilt.
"""
import gc
import os
import re
import stat
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest
import torch

import cdynamo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rel_fn(x, y):
    return torch.relu(x * y + 1.5) - y


def args(n=37):
    torch.manual_seed(0)
    return torch.randn(n, 5), torch.randn(n, 5)


def cdy_warnings(rec):
    return [str(w.message) for w in rec if issubclass(w.category, cdynamo.CdynamoWarning)]


def run_calls(f, *a, calls=3):
    """Call f `calls` times; returns (last result, CdynamoWarning messages)."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        for _ in range(calls):
            out = f(*a)
    return out, cdy_warnings(rec)


def expect_one_fallback(pattern):
    """optimize(rel_fn) must warn once (matching pattern), fall back, and be correct."""
    x, y = args()
    out, msgs = run_calls(cdynamo.optimize(rel_fn), x, y)
    torch.testing.assert_close(out, rel_fn(x, y), rtol=0, atol=0)
    assert len(msgs) == 1, msgs
    assert re.search(pattern, msgs[0]), msgs[0]
    assert "running it eagerly" in msgs[0]
    assert cdynamo.stats()["fallbacks"] == 1
    assert cdynamo.stats()["frames_compiled"] == 0
    return msgs[0]


def kernel_files(cache):
    return sorted(p for p in os.listdir(cache) if re.fullmatch(r"k[0-9a-f]{32}\.so", p))


def temp_files(cache):
    return sorted(p for p in os.listdir(cache) if ".tmp" in p)


def wrapper(tmp_path, body, name="cc.sh"):
    """A compiler wrapper script: `--version` goes to gcc, the rest to body."""
    p = tmp_path / name
    p.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then exec gcc --version; fi\n" + body)
    p.chmod(0o755)
    return str(p)


# ---------------------------------------------------------------- faults


def test_compiler_missing(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "cc", "/nonexistent/cc")
    expect_one_fallback(r"C compiler '/nonexistent/cc' not found")


def test_compiler_error(monkeypatch, tmp_path, fresh_cdynamo):
    cc = wrapper(tmp_path, 'echo "kernel.c:1:1: error: injected compile error" >&2\nexit 1\n')
    monkeypatch.setattr(cdynamo.config, "cc", cc)
    expect_one_fallback(r"C compiler failed \(exit 1\): .*injected compile error")
    assert kernel_files(fresh_cdynamo) == [] and temp_files(fresh_cdynamo) == []
    assert not [p for p in os.listdir(fresh_cdynamo) if p.endswith(".c")]


def many_kernels(x):
    """24 kernels: a source this long is compiled in parts at once, one per CPU."""
    for _ in range(8):
        x = torch.relu(x - x.mean(-1, keepdim=True)) + x.amax(0)
    return x


def test_compile_in_parts(monkeypatch, tmp_path, fresh_cdynamo):
    # the wrapper logs each run's arguments: one `-c` run per part, then one link
    log = tmp_path / "runs.txt"
    cc = wrapper(tmp_path, f'echo "$@" >> {log}\nexec gcc "$@"\n')
    monkeypatch.setattr(cdynamo.config, "cc", cc)
    x = torch.randn(64, 32)
    torch.testing.assert_close(cdynamo.optimize(many_kernels)(x), many_kernels(x))
    assert "24 kernels" in str(cdynamo._support.compiles[-1]["compiled"])
    runs = log.read_text().splitlines()
    # the standby compiler optimize() started (its source comes down a pipe, /dev/fd/3):
    # a source built in parts does not use it
    standby = [r for r in runs if "/dev/fd/3" in r]
    assert len(standby) == 1 and cdynamo.stats()["standby_builds"] == 0, runs
    runs = [r for r in runs if r not in standby]
    parts = [r for r in runs if " -c " in r]
    ncpu = len(os.sched_getaffinity(0))           # one part per CPU we may run on
    assert len(parts) == min(ncpu, 4) if ncpu > 1 else not parts, runs
    assert len(runs) == len(parts) + 1
    assert temp_files(fresh_cdynamo) == [] and len(kernel_files(fresh_cdynamo)) == 1


def test_compiler_error_in_a_part(monkeypatch, tmp_path, fresh_cdynamo):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: one compiler run, no parts")
    cc = wrapper(tmp_path, 'case "$*" in *".1.c -o"*) echo "part.c:1:1: error: injected in '
                 'part 1" >&2; exit 1;; esac\nexec gcc "$@"\n')
    monkeypatch.setattr(cdynamo.config, "cc", cc)
    x = torch.randn(64, 32)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = cdynamo.optimize(many_kernels)(x)
    torch.testing.assert_close(out, many_kernels(x))
    msgs = [str(m.message) for m in w if "cdynamo" in str(m.message)]
    assert len(msgs) == 1 and re.search(r"C compiler failed \(exit 1\): .*injected in part 1",
                                        msgs[0]), msgs
    assert temp_files(fresh_cdynamo) == [] and kernel_files(fresh_cdynamo) == []


def test_compiler_killed(monkeypatch, tmp_path, fresh_cdynamo):
    cc = wrapper(tmp_path, "kill -9 $$\n")
    monkeypatch.setattr(cdynamo.config, "cc", cc)
    expect_one_fallback(r"killed by signal 9")
    assert temp_files(fresh_cdynamo) == []


def test_bad_extra_flags(monkeypatch, tmp_path, fresh_cdynamo):
    # the wrapper adds a flag gcc rejects
    cc = wrapper(tmp_path, 'exec gcc "$@" -fno-such-flag-cdynamo\n')
    monkeypatch.setattr(cdynamo.config, "cc", cc)
    expect_one_fallback(r"C compiler failed \(exit 1\): .*fno-such-flag-cdynamo")
    assert temp_files(fresh_cdynamo) == []


def test_cache_dir_cannot_be_created(monkeypatch, tmp_path):
    # tests run as root, where chmod does not stop writes: a path under a file does
    (tmp_path / "afile").write_text("x")
    monkeypatch.setattr(cdynamo.config, "cache_dir", str(tmp_path / "afile" / "sub"))
    expect_one_fallback(r"cannot create cache dir .*afile/sub: Not a directory")


def test_cache_full_simulated(monkeypatch, tmp_path, fresh_cdynamo):
    cc = wrapper(tmp_path, 'echo "/usr/bin/ld: final link failed: No space left on device" >&2\n'
                 "exit 1\n")
    monkeypatch.setattr(cdynamo.config, "cc", cc)
    expect_one_fallback(r"No space left on device")
    assert temp_files(fresh_cdynamo) == []


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_cache_full_tmpfs(monkeypatch, tiny_tmpfs):
    cache = tiny_tmpfs / "cache"
    cache.mkdir(mode=0o700)
    # fill the file system up
    fd = os.open(tiny_tmpfs / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096) > 0:
            pass
    except OSError:
        pass
    os.close(fd)
    monkeypatch.setattr(cdynamo.config, "cache_dir", str(cache))
    expect_one_fallback(r"No space left on device")
    assert os.listdir(cache) == []
    # space again: it compiles (a new frame, after reset)
    os.unlink(tiny_tmpfs / "filler")
    cdynamo.reset()
    x, y = args()
    out, msgs = run_calls(cdynamo.optimize(rel_fn), x, y)
    assert msgs == [] and cdynamo.stats()["frames_compiled"] == 1
    torch.testing.assert_close(out, rel_fn(x, y), rtol=0, atol=0)
    assert len(kernel_files(cache)) == 1


def test_cache_dir_created_private(monkeypatch, tmp_path):
    cache = tmp_path / "new" / "deeper" / "cache"
    monkeypatch.setattr(cdynamo.config, "cache_dir", str(cache))
    old = os.umask(0)   # even with a permissive umask
    try:
        x, y = args()
        out, msgs = run_calls(cdynamo.optimize(rel_fn), x, y)
    finally:
        os.umask(old)
    assert msgs == []
    for d in (tmp_path / "new", tmp_path / "new" / "deeper", cache):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
    (so,) = kernel_files(cache)
    assert stat.S_IMODE(os.stat(cache / so).st_mode) & 0o022 == 0


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_cache_dir_group_other_writable_refused(monkeypatch, fresh_cdynamo, mode):
    # a kernel is already in the cache; once the dir is not private it is not loaded
    x, y = args()
    cdynamo.optimize(rel_fn)(x, y)
    assert len(kernel_files(fresh_cdynamo)) == 1
    cdynamo.reset()
    os.chmod(fresh_cdynamo, mode)
    msg = expect_one_fallback(r"cache dir .* is writable by group or others \(mode %03o\); "
                              r"refusing" % mode)
    assert cdynamo.stats()["disk_cache_hits"] == 0


def test_cache_dir_other_owner_refused(monkeypatch, fresh_cdynamo):
    if os.geteuid() != 0:
        pytest.skip("needs root to chown")
    os.chown(fresh_cdynamo, 4242, -1)
    expect_one_fallback(r"cache dir .* is owned by uid 4242, not by us")


def _first_compile(cache):
    x, y = args()
    out, msgs = run_calls(cdynamo.optimize(rel_fn), x, y, calls=1)
    assert msgs == []
    (so,) = kernel_files(cache)
    cdynamo.reset()
    gc.collect()
    return cache / so


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "elf-header-only",
                                    "group-writable", "symlink"])
def test_bad_cache_entry_rebuilt(fresh_cdynamo, damage, tmp_path):
    so = _first_compile(fresh_cdynamo)
    data = so.read_bytes()
    if damage == "garbage":
        so.write_bytes(os.urandom(len(data)))
    elif damage == "truncated":
        so.write_bytes(data[: len(data) // 3])
    elif damage == "empty":
        so.write_bytes(b"")
    elif damage == "elf-header-only":
        so.write_bytes(data[:64])
    elif damage == "group-writable":
        so.chmod(0o666)
    elif damage == "symlink":
        other = tmp_path / "elsewhere.so"
        other.write_bytes(data)
        so.unlink()
        so.symlink_to(other)
    x, y = args()
    out, msgs = run_calls(cdynamo.optimize(rel_fn), x, y)
    torch.testing.assert_close(out, rel_fn(x, y), rtol=0, atol=0)
    assert len(msgs) == 1, msgs
    assert re.search(r"bad kernel cache entry .*k[0-9a-f]{32}\.so \(.*\) was rebuilt", msgs[0])
    s = cdynamo.stats()
    assert s["frames_compiled"] == 1 and s["fallbacks"] == 0
    assert s["disk_cache_hits"] == 0 and s["kernels_compiled"] >= 1
    assert not so.is_symlink() and so.read_bytes()[:4] == b"\x7fELF"
    assert stat.S_IMODE(os.stat(so).st_mode) & 0o022 == 0
    assert kernel_files(fresh_cdynamo) == [so.name] and temp_files(fresh_cdynamo) == []
    # and now it is a good disk hit again
    cdynamo.reset()
    out, msgs = run_calls(cdynamo.optimize(rel_fn), x, y)
    assert msgs == [] and cdynamo.stats()["disk_cache_hits"] == 1


def test_corrupt_cache_entry_new_process(fresh_cdynamo):
    """A process compiles; the entry is truncated; a new process rebuilds it."""
    code = textwrap.dedent("""
        import warnings, torch, cdynamo
        def rel_fn(x, y):
            return torch.relu(x * y + 1.5) - y
        torch.manual_seed(0)
        x, y = torch.randn(37, 5), torch.randn(37, 5)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            out = cdynamo.optimize(rel_fn)(x, y)
        msgs = [str(w.message) for w in rec if issubclass(w.category, cdynamo.CdynamoWarning)]
        assert torch.equal(out, rel_fn(x, y))
        print(len(msgs), cdynamo.stats()["frames_compiled"], cdynamo.stats()["disk_cache_hits"])
        print(msgs)
    """)
    env = dict(os.environ, CDYNAMO_CACHE_DIR=str(fresh_cdynamo),
               PYTHONPATH=os.path.join(ROOT, "python"))

    def run():
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout.splitlines()[:2]

    assert run()[0] == "0 1 0"
    (so,) = kernel_files(fresh_cdynamo)
    so = fresh_cdynamo / so
    so.write_bytes(so.read_bytes()[:200])
    first, second = run()
    assert first == "1 1 0", (first, second)
    assert "was rebuilt" in second and "truncated" in second
    assert so.read_bytes()[:4] == b"\x7fELF"
    assert run()[0] == "0 1 1"


def test_dlopen_failure(monkeypatch, tmp_path, fresh_cdynamo):
    # a library that links but cannot be loaded: an undefined data symbol
    hdr = tmp_path / "undef.h"
    hdr.write_text("extern int cdy_injected_missing_symbol;\n"
                   "int *cdy_injected_ref = &cdy_injected_missing_symbol;\n")
    cc = wrapper(tmp_path, f'exec gcc -include {hdr} "$@"\n')
    monkeypatch.setattr(cdynamo.config, "cc", cc)
    expect_one_fallback(r"cannot be loaded: dlopen failed: .*undefined symbol: "
                        r"cdy_injected_missing_symbol")
    # the library that cannot load never entered the cache
    assert os.listdir(fresh_cdynamo) == []


def test_fault_then_recovery_same_process(monkeypatch, fresh_cdynamo):
    monkeypatch.setattr(cdynamo.config, "cc", "/nonexistent/cc")
    expect_one_fallback("not found")
    monkeypatch.setattr(cdynamo.config, "cc", "gcc")
    cdynamo.reset()
    x, y = args()
    out, msgs = run_calls(cdynamo.optimize(rel_fn), x, y)
    assert msgs == [] and cdynamo.stats()["frames_compiled"] == 1
    torch.testing.assert_close(out, rel_fn(x, y), rtol=0, atol=0)


# ---------------------------------------------------------------- library unloading


def mapped_kernels(cache):
    with open("/proc/self/maps") as f:
        return {line.split()[-1] for line in f
                if line.rstrip().endswith(".so") and str(cache) in line}


def test_reset_unloads_kernel_libraries(fresh_cdynamo):
    """Without -z nodelete, reset() really unmaps kernel libraries; libgomp (torch's
    libgomp.so.1, which kernels bind to) stays, so OpenMP workers never lose their code.
    Large tensors so that the kernels run parallel regions on every iteration."""
    torch.manual_seed(1)
    x = torch.randn(1 << 17)
    y = torch.randn(1 << 17)
    expected = rel_fn(x, y)
    # 200 rounds of load (disk hit after the first) / run / reset / gc
    for i in range(200):
        f = cdynamo.optimize(rel_fn)
        torch.testing.assert_close(f(x, y), expected, rtol=0, atol=0)
        assert len(mapped_kernels(fresh_cdynamo)) == 1
        del f
        cdynamo.reset()
        gc.collect()
        assert mapped_kernels(fresh_cdynamo) == set(), i
    # distinct kernels (shapes are specialised): all unloaded after reset
    # (dynamic=False: automatic dynamic shapes would make one symbolic kernel serve them all)
    for n in range(1, 21):
        cdynamo.optimize(rel_fn, dynamic=False)(x[: n * 1000], y[: n * 1000])
    assert len(mapped_kernels(fresh_cdynamo)) >= 8   # the recompile limit caps entries
    cdynamo.reset()
    gc.collect()
    assert mapped_kernels(fresh_cdynamo) == set()
    gomp = [l for l in open("/proc/self/maps") if "libgomp" in l]
    assert gomp, "libgomp must stay mapped"


# ---------------------------------------------------------------- concurrency


def test_threads_different_shapes(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "cache_size_limit", 16)
    opt = cdynamo.optimize(rel_fn)
    shapes = [(3,), (4, 5), (2, 3, 4), (0, 3), (1, 7), (6, 1, 2), (100,), (33, 3)]
    errors = []
    barrier = threading.Barrier(len(shapes))

    def work(shape):
        try:
            g = torch.Generator().manual_seed(sum(shape) + len(shape))
            x = torch.randn(shape, generator=g)
            y = torch.randn(shape, generator=g)
            expected = rel_fn(x, y)
            barrier.wait()
            for _ in range(25):
                torch.testing.assert_close(opt(x, y), expected, rtol=0, atol=0)
        except BaseException as e:   # noqa: BLE001 - reported below
            errors.append((shape, repr(e)))

    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        threads = [threading.Thread(target=work, args=(s,)) for s in shapes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert cdy_warnings(rec) == []
    assert cdynamo.stats()["frames_compiled"] == len(shapes)


def test_two_processes_same_kernel(tmp_path, fresh_cdynamo):
    go = tmp_path / "go"
    code = textwrap.dedent(f"""
        import os, sys, time, torch, cdynamo
        def rel_fn(x, y):
            return torch.relu(x * y + 1.5) - y
        torch.manual_seed(0)
        x, y = torch.randn(37, 5), torch.randn(37, 5)
        open({str(tmp_path)!r} + "/ready" + sys.argv[1], "w").close()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.001)
        out = cdynamo.optimize(rel_fn)(x, y)
        assert torch.equal(out, rel_fn(x, y))
        s = cdynamo.stats()
        print("OK", s["frames_compiled"], s["kernels_compiled"], s["disk_cache_hits"])
    """)
    env = dict(os.environ, CDYNAMO_CACHE_DIR=str(fresh_cdynamo),
               PYTHONPATH=os.path.join(ROOT, "python"))
    procs = [subprocess.Popen([sys.executable, "-W", "error::RuntimeWarning", "-c", code,
                               str(i)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    deadline = time.time() + 120
    while not all((tmp_path / f"ready{i}").exists() for i in range(2)):
        assert time.time() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.005)
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.startswith("OK 1 "), out
    assert len(kernel_files(fresh_cdynamo)) == 1
    assert temp_files(fresh_cdynamo) == []
    assert len([p for p in os.listdir(fresh_cdynamo) if p.endswith(".c")]) == 1
    assert len(os.listdir(fresh_cdynamo)) == 2


# ---------------------------------------------------------------- memory


def test_input_refcounts_unchanged():
    x, y = args()
    opt = cdynamo.optimize(rel_fn)
    opt(x, y)
    before = (sys.getrefcount(x), sys.getrefcount(y))
    for _ in range(1000):
        out = opt(x, y)
    assert (sys.getrefcount(x), sys.getrefcount(y)) == before
    assert sys.getrefcount(out) == 2
    assert cdynamo.stats()["frames_compiled"] == 1


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="ASan's quarantine holds freed memory: RSS grows by design")
def test_rss_flat():
    def small(x, y):
        return x * y + 1.0

    x, y = torch.randn(8), torch.randn(8)
    opt = cdynamo.optimize(small)
    for _ in range(20000):   # warm-up: caches, allocator pools
        opt(x, y)
    gc.collect()
    start = _rss()
    for _ in range(100000):
        opt(x, y)
    gc.collect()
    growth = _rss() - start
    assert cdynamo.stats()["frames_compiled"] == 1
    assert growth < 2 * 1024 * 1024, f"RSS grew by {growth / 1024:.0f} KiB over 100k calls"


def test_reset_releases_compiled_code(fresh_cdynamo):
    ns = {"torch": torch, "__name__": "cdy_reset_mod"}
    exec("def g(x):\n    return torch.sigmoid(x) * 2.0\n", ns)
    opt = cdynamo.optimize(ns["g"])
    x = torch.randn(10)
    opt(x)
    names = [k for k in ns if k.startswith("__compiled_fn_")]
    assert len(names) == 1 and cdynamo.stats()["frames_compiled"] == 1
    assert len(mapped_kernels(fresh_cdynamo)) == 1
    cdynamo.reset()
    gc.collect()
    assert [k for k in ns if k.startswith("__compiled_fn_")] == []
    assert mapped_kernels(fresh_cdynamo) == set()
    torch.testing.assert_close(opt(x), torch.sigmoid(x) * 2.0)
    assert cdynamo.stats()["frames_compiled"] == 1   # compiled again after the reset
    assert len([k for k in ns if k.startswith("__compiled_fn_")]) == 1


def test_fallback_warning_names_the_function(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "cc", "/nonexistent/cc")
    ns = {"torch": torch}
    exec("def cdy_named_fn(x):\n    return x + 1\n", ns)
    name = ns["cdy_named_fn"].__code__.co_name
    # make the low byte of the name's refcount a UTF-8 continuation byte (0x90); an immortal
    # name (3.12+ interns code names as immortal objects) keeps its refcount
    keep = []
    for _ in range(256):
        if (sys.getrefcount(name) - 1) & 0xFF == 0x90:
            break
        keep.append(name)
    x = torch.ones(3)
    out, msgs = run_calls(cdynamo.optimize(ns["cdy_named_fn"]), x, calls=1)
    assert torch.equal(out, x + 1)
    assert len(msgs) == 1 and "could not compile cdy_named_fn:" in msgs[0], msgs


def test_scratch_memory_of_a_graph_used_by_threads_at_once():
    # the reduction result lives in the graph's scratch block; big kernels run without
    # the GIL, so calls from several threads overlap and must not share that block
    def f(x):
        return torch.exp(x - x.amax(-1, keepdim=True))

    g = cdynamo.optimize(f)
    xs = [torch.randn(64, 4096) + i for i in range(4)]
    refs = [f(x) for x in xs]
    g(xs[0])
    assert cdynamo._support.compiles[-1]["compiled"].scratch_bytes == 64 * 4
    errors = []

    def worker(i):
        try:
            for _ in range(30):
                torch.testing.assert_close(g(xs[i]), refs[i])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_compiler_crash_is_retried_at_O2(monkeypatch, tmp_path, fresh_cdynamo):
    """An internal compiler error (a GCC bug at -O3) builds the file again at -O2:
    no fallback, no warning, one library in the cache."""
    log = tmp_path / "runs.txt"
    cc = wrapper(tmp_path, f'echo "$@" >> {log}\ncase "$*" in *-O2*) exec gcc "$@";; esac\n'
                 'echo "k.c:3:1: internal compiler error: Segmentation fault" >&2; exit 1\n')
    monkeypatch.setattr(cdynamo.config, "cc", cc)
    monkeypatch.setattr(cdynamo.config, "standby_compiler", False)
    x = torch.randn(64, 32)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = cdynamo.optimize(many_kernels)(x)
    torch.testing.assert_close(out, many_kernels(x))
    assert [str(m.message) for m in w if "cdynamo" in str(m.message)] == []
    assert cdynamo.stats()["fallbacks"] == 0 and cdynamo.stats()["frames_compiled"] == 1
    assert any("-O2" in r for r in log.read_text().splitlines())
    assert temp_files(fresh_cdynamo) == [] and len(kernel_files(fresh_cdynamo)) == 1
