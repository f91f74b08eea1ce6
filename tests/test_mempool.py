"""The pool behind the tensors a compiled graph makes (csrc/runtime/mempool.c).

A graph's outputs are blocks of cdynamo's own memory handed to torch through the DLPack
exchange API; when torch frees one, the block goes back to a free list and the next call
reuses it. These tests check that a block is reused only once nothing can see it any more
(no output, view or other tensor sharing its storage), that results, dtypes and strides are
eager's, and that config.output_pool_mb bounds and turns off the pool."""
import gc
import os
import subprocess
import sys
import threading
import warnings

import pytest
import torch

import cdynamo
from cdynamo import _C

pytestmark = pytest.mark.skipif(not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"),
                                reason="this torch has no DLPack exchange API: the pool is off")


@pytest.fixture(autouse=True)
def pool_default():
    cdynamo.config.output_pool_mb = 256
    yield
    cdynamo.config.output_pool_mb = 256


def _stats():
    return _C.output_pool_stats()


def test_a_freed_output_is_reused_by_the_next_call():
    f = cdynamo.optimize(lambda x: x * 2 + 1)
    x = torch.randn(1000)
    torch.testing.assert_close(f(x), x * 2 + 1)
    gc.collect()
    del_before = _stats()
    for _ in range(5):
        torch.testing.assert_close(f(x), x * 2 + 1)
    s = _stats()
    assert s["enabled"]
    assert s["hits"] - del_before["hits"] == 5
    assert s["misses"] == del_before["misses"]
    # this test's outputs are all back; blocks of earlier tests (a tensor a failed or
    # skipped test's traceback still holds) may be live: counted, not ours
    assert s["live"] == del_before["live"]
    assert s["cached_bytes"] >= 4000


def test_outputs_alive_at_once_never_share_memory():
    f = cdynamo.optimize(lambda x: x + 1)
    xs = [torch.full((256,), float(i)) for i in range(6)]
    ys = [f(x) for x in xs]
    assert len({y.data_ptr() for y in ys}) == 6
    for i, y in enumerate(ys):
        torch.testing.assert_close(y, xs[i] + 1)


def test_a_view_keeps_its_block_from_being_reused():
    f = cdynamo.optimize(lambda x: x * 3)
    x = torch.arange(64, dtype=torch.float32)
    gc.collect()
    base = _stats()["live"]
    row = f(x)[10:20]   # the output itself is dropped; its storage lives in the view
    gc.collect()
    for _ in range(4):
        f(torch.zeros(64))
    torch.testing.assert_close(row, torch.arange(10, 20, dtype=torch.float32) * 3)
    assert _stats()["live"] == base + 1


def test_pooled_outputs_have_eagers_dtype_strides_and_values():
    def g(a, b):
        return a > b, a.to(torch.int8) * 3, a.double() - 1, (a * 2).to(torch.uint8), a + b

    f = cdynamo.optimize(g)
    a = torch.randn(2, 3, 5, 7).contiguous(memory_format=torch.channels_last) * 20
    b = torch.randn(2, 3, 5, 7)
    for _ in range(3):
        got, exp = f(a, b), g(a, b)
        for x, y in zip(got, exp):
            assert x.dtype == y.dtype and x.stride() == y.stride()
            torch.testing.assert_close(x, y)
    assert _stats()["hits"] > 0


def test_zero_size_and_scalar_outputs():
    f = cdynamo.optimize(lambda x: (x + 1, x.sum() * 2))
    for _ in range(3):
        e = torch.empty(0, 4)
        y, s = f(e)
        assert y.shape == (0, 4)
        torch.testing.assert_close(s, torch.tensor(0.0))
    x = torch.randn(3, 4)
    torch.testing.assert_close(f(x)[1], x.sum() * 2)


def test_a_tensor_freed_on_another_thread_returns_to_the_pool():
    f = cdynamo.optimize(lambda x: x - 1)
    x = torch.randn(4096)
    gc.collect()
    base = _stats()["live"]
    box = [f(x)]
    assert _stats()["live"] == base + 1
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    before = _stats()
    assert before["live"] == base
    torch.testing.assert_close(f(x), x - 1)
    assert _stats()["hits"] == before["hits"] + 1


def test_limit_bounds_the_cached_bytes_and_zero_turns_the_pool_off():
    f = cdynamo.optimize(lambda x: x * 0.5)
    x = torch.randn(256, 1024)                  # 1 MB output
    ys = [f(x) for _ in range(8)]
    cdynamo.config.output_pool_mb = 2
    del ys
    s = _stats()
    assert 0 < s["cached_bytes"] <= 2 << 20
    cdynamo.config.output_pool_mb = 0
    s = _stats()
    assert s["cached_bytes"] == 0 and not s["enabled"]
    before = s["hits"] + s["misses"]
    y = f(x)
    torch.testing.assert_close(y, x * 0.5)
    assert _stats()["hits"] + _stats()["misses"] == before
    y.resize_(512, 1024)                         # an ordinary storage grows
    assert y.shape == (512, 1024)


def _grow_ops(y, make, a, b):
    """resize_ bigger, then out= (a + b) and set_() on y as eager would run them; make(n)
    gives a fresh tensor of n elements.  Returns what eager's results are compared on."""
    prefix = y[:16].clone()
    y.resize_(8)                                 # shrinking keeps the storage
    y.resize_(1000)                              # growing copies into a bigger one
    assert y.shape == (1000,) and y.untyped_storage().nbytes() >= 4000
    grown = y[:16].clone()
    z = make(16)
    with pytest.warns(UserWarning, match="resized"):
        torch.add(a, b, out=z)                   # out= of a larger result grows z
    w = torch.empty(0)
    v = make(16)
    w.set_(v.untyped_storage(), 0, (4,), (1,))   # w shares v's storage ...
    w.resize_(2000)                              # ... and grows it for both
    assert w.data_ptr() == v.data_ptr() and v.untyped_storage().nbytes() >= 8000
    v.set_(torch.arange(5.0))                    # v leaves its storage; w keeps it
    return prefix, grown, z, w[:16], v


def test_a_pooled_output_grows_as_in_eager():
    """A graph's output is a pool block whose storage grows as torch's do (mempool.c
    mp_grow): resize_ bigger, out= of a larger result, set_() onto it and growing it;
    the block goes back to the pool when torch drops it, so the counters balance."""
    gc.collect()
    _C.clear_output_pool()
    s0 = _stats()
    assert s0["growable"]                        # torch's storage layout checked at import
    f = cdynamo.optimize(lambda x: x + 2)
    x = torch.randn(16)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    got = _grow_ops(f(x), lambda n: f(torch.randn(n)), a, b)
    want = _grow_ops(x + 2, lambda n: torch.randn(n) + 2, a, b)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], got[0])   # resize_ kept the values
    torch.testing.assert_close(got[2], want[2])
    assert got[2].shape == want[2].shape == (64, 64)
    torch.testing.assert_close(got[4], want[4])
    s1 = _stats()
    assert s1["misses"] + s1["hits"] > 0 and s1["live"] == s0["live"]   # every block came back
    del got
    gc.collect()
    s2 = _stats()
    assert s2["live"] == s0["live"] and s2["held_bytes"] == s0["held_bytes"] + s2["cached_bytes"]
    _C.clear_output_pool()
    assert _stats()["held_bytes"] == s0["held_bytes"]


def test_a_grown_output_after_a_graph_break_is_eagers():
    """out= onto a pool tensor of the wrong size inside a compiled function (the out= call
    a graph break, as for any out= that resizes) grows it as eager does."""
    def g(a, b, o):
        torch.add(a, b, out=o)
        return o * 2

    f = cdynamo.optimize(lambda x: x + 2)
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    for o_c, o_e in ((f(torch.randn(4)), torch.randn(4) + 2),
                     (f(torch.randn(3, 3)).t(), (torch.randn(3, 3) + 2).t())):
        with pytest.warns(UserWarning, match="resized"):
            r_c = cdynamo.optimize(g)(a, b, o_c)
        with pytest.warns(UserWarning, match="resized"):
            r_e = g(a, b, o_e)
        torch.testing.assert_close(r_c, r_e)
        torch.testing.assert_close(o_c, o_e)
        assert o_c.stride() == o_e.stride()


@pytest.mark.parametrize("prog", [
    lambda y: y.resize_(100).fill_(1.5) * 2,
    lambda y: y.resize_as_(torch.ones(5, 5)).zero_() + 1,
    lambda y: torch.add(torch.ones(6, 6), 1, out=y) * 3,
    lambda y: torch.cat([torch.ones(7), torch.ones(8)], out=y.view(-1)) + 1,
    lambda y: torch.empty(0).set_(y.untyped_storage(), 0, (2,), (1,)).resize_(64).zero_() + 1,
], ids=["resize_", "resize_as_", "add_out", "cat_out", "set_resize_"])
def test_a_compiled_function_grows_a_pooled_input_as_eager(prog):
    """A compiled function that grows its argument, a graph's pooled output (resize_,
    resize_as_, out= of a larger result, set_() then resize_), gives eager's result and
    leaves the argument as eager does."""
    f = cdynamo.optimize(lambda x: x * 1 + 2)
    y_c, y_e = f(torch.arange(12.0).reshape(3, 4)), torch.arange(12.0).reshape(3, 4) + 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # out= resizing warns, in both
        r_c, r_e = cdynamo.optimize(prog)(y_c), prog(y_e)
    torch.testing.assert_close(r_c, r_e)
    assert y_c.shape == y_e.shape and y_c.stride() == y_e.stride()


def test_reset_frees_the_cached_blocks():
    f = cdynamo.optimize(lambda x: x + 2)
    f(torch.randn(1000))
    assert _stats()["cached_bytes"] > 0
    cdynamo.reset()
    s = _stats()
    assert s["cached_bytes"] == 0 and s["hits"] == 0 and s["misses"] == 0


def test_bad_pool_size_is_a_value_error():
    with pytest.raises(ValueError, match="output_pool_mb"):
        cdynamo.config.output_pool_mb = -1
    with pytest.raises(ValueError):
        _C.set_output_pool_bytes(-5)


def test_environment_sets_the_pool_size():
    code = ("import cdynamo; from cdynamo import _C; s = _C.output_pool_stats(); "
            "print(s['limit_bytes'], s['enabled'], cdynamo.config.output_pool_mb)")
    env = dict(os.environ, CDYNAMO_OUTPUT_POOL_MB="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["0", "False", "0.0"]
    env["CDYNAMO_OUTPUT_POOL_MB"] = "1.5"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [str(3 << 19), "True", "1.5"]


def test_large_blocks_start_on_a_page_and_very_large_ones_on_2_mb():
    # small outputs follow the block's header (64-byte aligned, as torch's
    # allocator); from 64 KiB a block's data starts on a page, from 2 MiB on a
    # 2 MiB boundary (transparent huge pages); reused blocks keep their data
    f = cdynamo.optimize(lambda x: x * 2 - 1)
    for n, align in ((1000, 64), (16 << 10, 4096), (1 << 20, 2 << 20)):
        x = torch.randn(n)
        outs = [f(x) for _ in range(3)]          # three blocks alive at once
        for y in outs:
            assert y.data_ptr() % align == 0, (n, hex(y.data_ptr()))
            torch.testing.assert_close(y, x * 2 - 1)
        ptrs = {y.data_ptr() for y in outs}
        del outs, y
        again = f(x)
        assert again.data_ptr() in ptrs          # a freed block comes back
        torch.testing.assert_close(again, x * 2 - 1)


def test_held_bytes_and_their_high_water_mark():
    """held_bytes counts every block (live and free), peak_bytes its maximum since
    reset_output_pool_peak (the bench's training peak memory reads them): two outputs
    alive at once hold two blocks, freed they stay held as free blocks, cleared they go."""
    cdynamo.reset()
    f = cdynamo.optimize(lambda x: x * 2 + 1)
    x = torch.randn(100_000)
    f(x)
    _C.clear_output_pool()
    s0 = _stats()
    _C.reset_output_pool_peak()
    assert _stats()["peak_bytes"] == s0["held_bytes"]
    a, b = f(x), f(x)
    s = _stats()
    assert s["held_bytes"] - s0["held_bytes"] >= 2 * 400_000
    assert s["peak_bytes"] == s["held_bytes"]
    del a, b
    s2 = _stats()
    assert s2["held_bytes"] == s["held_bytes"] and s2["cached_bytes"] >= 2 * 400_000
    _C.clear_output_pool()
    s3 = _stats()
    assert s3["held_bytes"] == s0["held_bytes"] and s3["peak_bytes"] == s["peak_bytes"]


def test_empty_graph_tensors_grow_as_in_eager():
    """A graph's tensor of no elements is torch's own, not a pool block: the idiom
    out=torch.empty(0) (a graph break at the out= call, which grows the tensor the graph
    made) and resize_ of an empty result work as in eager (fz49's campaign: "Trying to
    resize storage that is not resizable")."""
    def f(a, b):
        o = torch.empty(0)
        torch.add(a, b, out=o)
        return o * 2

    def g(a0):
        torch.sum(a0, 0, keepdim=True, out=torch.empty(0, dtype=a0.dtype))
        return a0 + 1

    a, b = torch.randn(3, 4), torch.randn(3, 4)
    torch.testing.assert_close(cdynamo.optimize(f)(a, b), f(a, b))
    torch.testing.assert_close(cdynamo.optimize(g)(a), g(a))
    outs = cdynamo.optimize(lambda t: (torch.empty(0), t[:0] * 2))(a)
    for o in outs:
        o.resize_(5)
        assert o.shape == (5,)


def test_outputs_without_the_pool_are_torchs_seen_by_the_profiler():
    # With the pool off a graph's tensors come from torch's CPU allocator (runtime/compiled.c's
    # empty_meta: torch.compile's _empty_strided_cpu where torch has it): eager's dtypes,
    # strides and values, storage that grows, and torch.profiler's memory events count them.
    from torch.profiler import ProfilerActivity, profile
    cdynamo.config.output_pool_mb = 0

    def fn(x, b):
        return x.t() * 2, (x > 0) & b, x.to(torch.bfloat16) + 1, x.sum(0)
    f = cdynamo.optimize(fn)
    x, b = torch.randn(64, 48), torch.rand(64, 48) > 0.5
    got, want = f(x, b), fn(x, b)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.stride() == w.stride()
        torch.testing.assert_close(g, w)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        ys = f(x, b)
    sizes = sorted(e.nbytes() for e in prof.profiler.kineto_results.events()
                   if e.name() == "[memory]" and e.nbytes() > 0)
    for y in ys:
        assert y.untyped_storage().nbytes() in sizes
    ys[0].resize_(100, 100)
    assert ys[0].shape == (100, 100)


def _ops(f, *args):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        r = f(*args)
    return r, {e.key: e.count for e in prof.key_averages()}


def test_views_only_an_extern_reads_are_remade_as_aliases_after_the_first_call():
    # runtime/compiled.c alias_learn: from the second call on, a view an extern step makes of a
    # buffer, which no output can reach, is torch._C._dynamo.guards._reinterpret_tensor of it
    # (no dispatcher op); values stay eager's.
    if not hasattr(torch._C._dynamo.guards, "_reinterpret_tensor"):
        pytest.skip("this torch has no _reinterpret_tensor")

    def fn(x, w):
        h = (x * 2).reshape(64, 32)
        return torch.mm(h.t(), w).sin()
    f = cdynamo.optimize(fn)
    x, w = torch.randn(4, 16, 32), torch.randn(64, 8)
    first, ops1 = _ops(f, x, w)
    for _ in range(2):
        got, ops = _ops(f, x, w)
        torch.testing.assert_close(got, fn(x, w))
    torch.testing.assert_close(first, fn(x, w))
    views = ("aten::reshape", "aten::view", "aten::t", "aten::transpose", "aten::as_strided")
    assert sum(ops1.get(k, 0) for k in views) > 0
    assert sum(ops.get(k, 0) for k in views) == 0, ops


def test_a_returned_view_keeps_its_view_link_when_an_extern_also_reads_it():
    def fn(x, w):
        h = (x * 2).reshape(64, 32)
        return torch.mm(h, w), h.t()
    f = cdynamo.optimize(fn)
    x, w = torch.randn(4, 16, 32), torch.randn(32, 8)
    for _ in range(3):
        got, want = f(x, w), fn(x, w)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
        assert got[1]._is_view() and got[1]._base is not None
        assert got[1].untyped_storage().data_ptr() == got[1]._base.untyped_storage().data_ptr()
    g1 = got[1]
    g1._base.add_(1)                                  # the view link is torch's: writes show
    torch.testing.assert_close(g1, want[1] + 1)
