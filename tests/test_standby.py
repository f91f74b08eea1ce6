"""The standby compiler (csrc/compiler/cc.c): the compiler for the next build is
started ahead of its source, by cdynamo.optimize and after each build in one run,
and the build writes the source down its stdin.  Results are eager's either way;
a standby that dies or fails is replaced by an ordinary run, silently."""
import glob
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch

import cdynamo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cmdlines():
    for p in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            cmd = open(p, "rb").read().replace(b"\0", b" ").decode(errors="replace")
            stat = open(p[:-len("cmdline")] + "stat").read()
        except OSError:
            continue
        yield int(p.split("/")[2]), int(stat.rsplit(")", 1)[1].split()[1]), cmd


def standby_pids(cache=None):
    """pids of this process's standby compiler (the driver, whose source is /dev/fd/3, and
    its cc1); with cache, of any process's standby writing in that cache dir."""
    procs = list(_cmdlines())
    if cache is not None:
        return [pid for pid, _, cmd in procs if str(cache) + "/standby." in cmd]
    drivers = [pid for pid, ppid, cmd in procs if ppid == os.getpid() and "/dev/fd/3" in cmd]
    return drivers + [pid for pid, ppid, _ in procs if ppid in drivers]


def wait_for(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        time.sleep(0.02)
    return cond()


def fa(x):
    return torch.relu(x * 2 - 1)


def fb(x, y):
    return (x + y).sum(-1)


def fc(x):
    return torch.sigmoid(x) * x


def cdy_warnings(rec):
    return [str(w.message) for w in rec if issubclass(w.category, cdynamo.CdynamoWarning)]


def test_builds_use_the_standby(fresh_cdynamo):
    x, y = torch.randn(33, 17), torch.randn(33, 17)
    f = cdynamo.optimize(fa)                  # starts one: the first build uses it
    assert wait_for(lambda: standby_pids())
    torch.testing.assert_close(f(x), fa(x))
    assert cdynamo.stats()["standby_builds"] == 1
    g = cdynamo.optimize(fb)                  # the one started after that build
    torch.testing.assert_close(g(x, y), fb(x, y))
    st = cdynamo.stats()
    assert st["standby_builds"] == 2 and st["kernels_compiled"] >= 2
    assert st["disk_cache_hits"] == 0 and st["fallbacks"] == 0
    # only the kernel libraries and their sources are left in the cache dir
    names = os.listdir(fresh_cdynamo)
    assert all(n.startswith("k") and n.endswith((".so", ".c")) for n in names), names


def test_standby_built_library_is_the_cached_one(fresh_cdynamo, tmp_path):
    # a new process finds the library the standby built (same key as an ordinary build)
    x = torch.randn(8, 5)
    cdynamo.optimize(fc)(x)
    assert cdynamo.stats()["standby_builds"] == 1
    code = textwrap.dedent(f"""
        import sys, torch, cdynamo
        sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})
        from test_standby import fc
        x = torch.randn(8, 5)
        torch.testing.assert_close(cdynamo.optimize(fc)(x), fc(x))
        st = cdynamo.stats()
        assert st["disk_cache_hits"] == 1 and st["kernels_compiled"] == 0, st
    """)
    env = dict(os.environ, CDYNAMO_CACHE_DIR=str(fresh_cdynamo))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


def test_standby_off(fresh_cdynamo, monkeypatch):
    x = torch.randn(16)
    cdynamo.optimize(fa)                      # one is started ...
    assert wait_for(lambda: standby_pids())
    monkeypatch.setattr(cdynamo.config, "standby_compiler", False)
    torch.testing.assert_close(cdynamo.optimize(fa)(x), fa(x))
    torch.testing.assert_close(cdynamo.optimize(fc)(x), fc(x))
    st = cdynamo.stats()
    assert st["standby_builds"] == 0 and st["frames_compiled"] == 2
    # ... and closed by the first build without it: it exits
    assert wait_for(lambda: not standby_pids())


def test_standby_killed_builds_the_ordinary_way(fresh_cdynamo):
    x = torch.randn(40, 3)
    f = cdynamo.optimize(fa)
    assert wait_for(lambda: standby_pids())
    for pid in standby_pids():
        os.kill(pid, signal.SIGKILL)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        torch.testing.assert_close(f(x), fa(x))
    assert cdy_warnings(rec) == []
    st = cdynamo.stats()
    assert st["standby_builds"] == 0 and st["frames_compiled"] == 1 and st["fallbacks"] == 0
    assert not [n for n in os.listdir(fresh_cdynamo) if ".tmp" in n]
    # a new one was started after that build, and is used
    torch.testing.assert_close(cdynamo.optimize(fc)(x), fc(x))
    assert cdynamo.stats()["standby_builds"] == 1


def test_standby_that_fails_is_silent(fresh_cdynamo, monkeypatch, tmp_path):
    # a compiler that fails whenever its source is the standby's pipe
    cc = tmp_path / "cc.sh"
    cc.write_text('#!/bin/sh\ncase "$*" in */dev/fd/3*) exit 1;; esac\nexec gcc "$@"\n')
    cc.chmod(0o755)
    monkeypatch.setattr(cdynamo.config, "cc", str(cc))
    x = torch.randn(7, 9)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        torch.testing.assert_close(cdynamo.optimize(fa)(x), fa(x))
        torch.testing.assert_close(cdynamo.optimize(fc)(x), fc(x))
    assert cdy_warnings(rec) == []
    st = cdynamo.stats()
    assert st["standby_builds"] == 0 and st["frames_compiled"] == 2 and st["fallbacks"] == 0
    assert not [n for n in os.listdir(fresh_cdynamo) if ".tmp" in n]


def test_cache_dir_change(fresh_cdynamo, monkeypatch, tmp_path):
    # a standby started for one cache dir builds for the next: its library is moved
    other = tmp_path / "other_cache"
    x = torch.randn(12)
    torch.testing.assert_close(cdynamo.optimize(fa)(x), fa(x))
    assert wait_for(lambda: standby_pids())   # started for the next build
    monkeypatch.setattr(cdynamo.config, "cache_dir", str(other))
    torch.testing.assert_close(cdynamo.optimize(fc)(x), fc(x))
    assert cdynamo.stats()["standby_builds"] == 2
    for d in (fresh_cdynamo, other):
        names = os.listdir(d)
        assert len(names) == 2 and all(n.startswith("k") and n.endswith((".so", ".c"))
                                       for n in names), names


def test_standby_dir_removed(fresh_cdynamo, monkeypatch, tmp_path):
    # the dir a standby writes in is gone when it is used: the build is redone ordinarily
    import shutil
    first = tmp_path / "first_cache"
    monkeypatch.setattr(cdynamo.config, "cache_dir", str(first))
    x = torch.randn(6)
    torch.testing.assert_close(cdynamo.optimize(fa)(x), fa(x))
    assert wait_for(lambda: standby_pids(first))
    shutil.rmtree(first)
    monkeypatch.setattr(cdynamo.config, "cache_dir", str(fresh_cdynamo))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        torch.testing.assert_close(cdynamo.optimize(fc)(x), fc(x))
    assert cdy_warnings(rec) == []
    st = cdynamo.stats()
    assert st["standby_builds"] == 1 and st["frames_compiled"] == 2 and st["fallbacks"] == 0
    assert [n for n in os.listdir(fresh_cdynamo) if n.endswith(".so")]


def test_nothing_left_when_the_process_ends(tmp_path):
    cache = tmp_path / "cache"
    code = textwrap.dedent("""
        import torch, cdynamo
        x = torch.randn(64)
        for f in (lambda a: a + 1, lambda a: a * a - 2):
            torch.testing.assert_close(cdynamo.optimize(f)(x), f(x))
        assert cdynamo.stats()["standby_builds"] == 2
    """)
    env = dict(os.environ, CDYNAMO_CACHE_DIR=str(cache))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    # the standby started after the last build reads the end of its source, fails, exits
    assert wait_for(lambda: not standby_pids(cache))
    names = sorted(os.listdir(cache))
    assert len(names) == 4 and all(n.startswith("k") and n.endswith((".so", ".c"))
                                   for n in names), names


@pytest.mark.parametrize("threads", [4])
def test_builds_from_threads(fresh_cdynamo, threads):
    import threading
    # one code object each: lambdas sharing one code object would let automatic dynamic
    # shapes serve later threads from an earlier thread's entry when the threads happen to
    # run one after another (a loaded host), and compile fewer frames than threads
    fns = [eval(f"lambda a: a * {k} + {k}") for k in range(threads)]
    xs = [torch.randn(10 + k) for k in range(threads)]
    errors = []

    def run(k):
        try:
            torch.testing.assert_close(cdynamo.optimize(fns[k])(xs[k]), fns[k](xs[k]))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    st = cdynamo.stats()
    assert st["frames_compiled"] == threads and 1 <= st["standby_builds"] <= threads
