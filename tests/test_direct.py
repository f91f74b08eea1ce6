"""The per-call path: cache hits that run without the function's frame (direct calls),
and the thread-count guard (kernels are rebuilt when torch.set_num_threads changes)."""
import sys

import pytest
import torch

import cdynamo
from conftest import assert_same

G = torch.randn(6)


def _stats():
    return cdynamo.stats()


def test_direct_call_skips_the_frame():
    seen = []

    def f(x, y):
        return torch.relu(x * y + 1)
    g = cdynamo.optimize(f)
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    assert_same(f(x, y), g(x, y))          # compiles through the frame
    assert _stats()["direct_calls"] == 0

    def prof(frame, event, arg):
        if event == "call" and frame.f_code is f.__code__:
            seen.append(1)
    sys.setprofile(prof)
    try:
        out = g(x, y)
    finally:
        sys.setprofile(None)
    assert_same(f(x, y), out)
    st = _stats()
    assert st["direct_calls"] == 1 and st["cache_hits"] == 1 and st["frames_compiled"] == 1
    assert seen == []                      # no Python frame of f ran


def test_direct_call_guards_still_checked():
    g = cdynamo.optimize(lambda x: x * 2 + 1)
    for shape in [(3,), (3,), (5,), (5,), (3,)]:
        x = torch.randn(*shape)
        assert_same(x * 2 + 1, g(x))
    st = _stats()
    assert st["frames_compiled"] == 2 and st["recompiles"] == 1
    assert st["direct_calls"] == 3
    x = torch.arange(6, dtype=torch.int64)
    assert_same(x * 2 + 1, g(x))           # dtype guard fails: a third entry
    assert _stats()["frames_compiled"] == 3


def test_direct_call_inputs_from_globals_closures_and_attributes():
    k = torch.randn(6)

    def f(x):
        return x * G + k

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(6), requires_grad=False)

        def forward(self, x):
            return torch.tanh(x * self.w)
    m = M()
    gm, gf = cdynamo.optimize(m), cdynamo.optimize(f)
    x = torch.randn(6)
    for _ in range(3):
        assert_same(f(x), gf(x))
        assert_same(m(x), gm(x), transcendental=True)
    assert _stats()["direct_calls"] == 4
    with torch.no_grad():
        m.w.mul_(2)                        # the parameter is read at each call
    k.add_(1)
    assert_same(m(x), gm(x), transcendental=True)
    assert_same(f(x), gf(x))


def test_defaults_and_keywords_are_bound_for_direct_calls():
    def f(x, y=None, scale=2.0):
        return x * scale if y is None else x * y * scale
    g = cdynamo.optimize(f)
    x, y = torch.randn(3), torch.randn(3)
    calls = [((x,), {}), ((x, y), {}), ((x,), {"y": y}), ((), {"x": x, "y": y}),
             ((x,), {"scale": 3.0}), ((x, y, 3.0), {})]
    for _ in range(2):
        for a, k in calls:
            assert_same(f(*a, **k), g(*a, **k))
    st = _stats()
    # four entries (y None or a tensor, scale 2.0 or 3.0); every hit is direct,
    # two in the first round (calls 3 and 4 bind like call 2) and all six in the second
    assert st["frames_compiled"] == 4 and st["direct_calls"] == 8, st
    with pytest.raises(TypeError, match="multiple values"):
        g(x, x=x)                                  # CPython's own error, from the frame path
    with pytest.raises(TypeError, match="unexpected keyword"):
        g(x, z=1)


def test_calls_the_direct_path_does_not_take():
    def f(x, *rest, scale=2.0):
        return x * scale + len(rest)
    g = cdynamo.optimize(f)
    x = torch.randn(3)
    for _ in range(2):
        assert_same(f(x), g(x))               # *args and keyword-only: the frame path
        assert_same(f(x, 1, scale=3.0), g(x, 1, scale=3.0))
    assert _stats()["direct_calls"] == 0
    assert _stats()["cache_hits"] >= 2


def test_tuple_of_outputs_is_direct():
    def f(x):
        return x + 1, x * 2
    g = cdynamo.optimize(f)
    x = torch.randn(3)
    for _ in range(3):
        r = g(x)
        assert type(r) is tuple and len(r) == 2
        assert_same(f(x), r)
    assert _stats()["direct_calls"] == 2


def test_input_returned_as_is_through_direct_call():
    g = cdynamo.optimize(lambda x: (x * 2, x + 1, x))
    x = torch.randn(3)
    for _ in range(3):
        r = g(x)
        assert_same((x * 2, x + 1, x), r)
        assert r[2] is x
    assert _stats()["direct_calls"] == 2


@pytest.mark.parametrize("fn", [
    lambda x: [x + 1, x * 2],                 # a list
    lambda x: ((y := x * 2), y),              # one output twice
    lambda x: (x + 1, 3),                     # a constant
    lambda x: {"a": x + 1},                   # a dict
])
def test_other_return_structures_keep_the_frame(fn):
    g = cdynamo.optimize(fn)
    x = torch.randn(3)
    for _ in range(3):
        r, e = g(x), fn(x)
        assert type(r) is type(e)
        if isinstance(e, dict):
            assert list(r) == list(e)
            r, e = list(r.values()), list(e.values())
        assert_same(e, r)
    assert _stats()["direct_calls"] == 0


def test_side_effects_keep_the_frame(capsys):
    def f(x):
        print("called")
        return x + 1
    g = cdynamo.optimize(f)
    x = torch.randn(3)
    for _ in range(3):
        assert_same(x + 1, g(x))
    assert capsys.readouterr().out.count("called") == 3
    assert _stats()["direct_calls"] == 0


def test_direct_call_errors_propagate():
    g = cdynamo.optimize(lambda x, i: x[i] * 2)
    x, i = torch.randn(5), torch.tensor([0, 4])
    assert_same(x[i] * 2, g(x, i))
    assert_same(x[i] * 2, g(x, i))
    with pytest.raises(IndexError):
        g(x, torch.tensor([0, 7]))
    assert_same(x[i] * 2, g(x, i))


@pytest.fixture
def threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_thread_count_is_guarded(threads, capfd):
    g = cdynamo.optimize(lambda x: x * 3)
    x = torch.randn(100_000)
    torch.set_num_threads(1)
    capfd.readouterr()
    cdynamo._C.set_log_topics({"recompiles", "guards"})
    try:
        assert_same(x * 3, g(x))
        torch.set_num_threads(2)
        assert_same(x * 3, g(x))
    finally:
        cdynamo._C.set_log_topics(set())
    err = capfd.readouterr().err
    assert "NUM_THREADS: torch.get_num_threads() == 1" in err
    assert "NUM_THREADS: torch.get_num_threads() == 2" in err
    assert ("torch.get_num_threads() changed: the kernels were built for 1 threads, "
            "it is now 2") in err
    st = _stats()
    assert st["frames_compiled"] == 2 and st["recompiles"] == 1
    torch.set_num_threads(1)
    assert_same(x * 3, g(x))
    assert _stats()["frames_compiled"] == 2       # the 1-thread entry is still there


def test_pinned_thread_count_has_no_guard(threads, monkeypatch):
    monkeypatch.setattr(cdynamo.config, "num_threads", 1)
    g = cdynamo.optimize(lambda x: x * 5)
    x = torch.randn(100_000)
    torch.set_num_threads(1)
    assert_same(x * 5, g(x))
    torch.set_num_threads(2)
    assert_same(x * 5, g(x))
    assert _stats()["frames_compiled"] == 1 and _stats()["recompiles"] == 0


def test_overhead_breakdown_parts():
    g = cdynamo.optimize(lambda x: x * 2 + 1)
    x = torch.randn(64)
    b = cdynamo.overhead_breakdown(g, x, calls=200)
    assert set(b) == {"guards", "inputs", "alloc", "kernels", "result", "other", "total",
                      "direct"}
    assert b["direct"] is True
    for k in ("guards", "inputs", "alloc", "kernels", "result"):
        assert 0 < b[k] < b["total"], (k, b)
    assert abs(sum(b[k] for k in ("guards", "inputs", "alloc", "kernels", "result", "other"))
               - b["total"]) < 1e-6
    assert _stats()["direct_calls"] == 201     # the second warm-up call and the timed ones


def test_overhead_breakdown_frame_path():
    def f(x, *rest):
        return x - 1
    g = cdynamo.optimize(f)
    b = cdynamo.overhead_breakdown(g, torch.randn(8), calls=100)
    assert b["direct"] is False and b["guards"] > 0 and b["kernels"] > 0


def test_tensor_guards_recompile_in_inference_mode(capfd):
    g = cdynamo.optimize(lambda x: x * 2)
    x = torch.randn(4)
    assert_same(x * 2, g(x))
    cdynamo._C.set_log_topics({"recompiles"})
    try:
        with torch.inference_mode():
            y = torch.randn(4)
            assert_same(y * 2, g(y))
    finally:
        cdynamo._C.set_log_topics(set())
    err = capfd.readouterr().err
    assert "Recompiling function <lambda>" in err and "dispatch key set mismatch" in err, err
    assert _stats()["recompiles"] == 1
    assert_same(x * 2, g(x))                    # the first entry still serves normal tensors
    assert _stats()["frames_compiled"] == 2


def test_same_tensor_twice_is_another_entry():
    g = cdynamo.optimize(lambda x, y: x * y + 1)
    x, y = torch.randn(5), torch.randn(5)
    assert_same(x * y + 1, g(x, y))
    assert_same(x * x + 1, g(x, x))
    assert _stats()["recompiles"] == 1


def test_patched_global_function_is_seen():
    g = cdynamo.optimize(lambda a, b: torch.maximum(a, b))
    a, b = torch.randn(6), torch.randn(6)
    for _ in range(3):
        assert_same(torch.maximum(a, b), g(a, b))
    orig = torch.maximum
    torch.maximum = torch.minimum
    try:
        assert_same(torch.minimum(a, b), g(a, b))
    finally:
        torch.maximum = orig
    assert_same(torch.maximum(a, b), g(a, b))
    assert _stats()["recompiles"] == 1


def test_more_tensors_than_one_batch_use_the_per_tensor_guards(capfd):
    # 33 tensor arguments: beyond what one TensorGuards call is given (32), so the
    # entry keeps checking each tensor itself; results and recompile messages stay right
    n = 33
    src = "def f(" + ", ".join(f"a{i}" for i in range(n)) + "):\n    return " + \
        " + ".join(f"a{i}" for i in range(n)) + "\n"
    ns = {}
    exec(src, ns)
    f = ns["f"]
    g = cdynamo.optimize(f)
    xs = [torch.randn(4) for _ in range(n)]
    assert_same(f(*xs), g(*xs))
    assert_same(f(*xs), g(*xs))
    assert _stats()["direct_calls"] == 1
    ys = xs[:-1] + [torch.randn(5)]
    cdynamo._C.set_log_topics({"recompiles"})
    try:
        with pytest.raises(RuntimeError):
            g(*ys)                              # eager's own broadcast error
    finally:
        cdynamo._C.set_log_topics(set())
    assert "tensor 'a32' size mismatch at index 0. expected 4, actual 5" in capfd.readouterr().err
