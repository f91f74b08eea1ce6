"""torch.library ops outside aten (torch.library.custom_op, torch.ops.<ns>.<op>) traced as
opaque extern nodes (csrc/trace/libops.c): the fake impl gives the result's meta, the op
itself runs once per call with its Python body not compiled as a frame of its own; ops
that mutate an input or return an alias, or have no fake impl, break with a reason and
still give eager's results."""
import pytest
import torch

import cdynamo
from cdynamo import _support

CALLS = {"n": 0}


@torch.library.custom_op("cdytest::scale_add", mutates_args=())
def scale_add(x: torch.Tensor, y: torch.Tensor, k: float) -> torch.Tensor:
    CALLS["n"] += 1
    n = int(y.sum().item())   # reads data: a graph break if it were traced
    return x * k + n


@scale_add.register_fake
def _scale_add_fake(x, y, k):
    return torch.empty_like(x)


@torch.library.custom_op("cdytest::two", mutates_args=())
def two(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    CALLS["n"] += 1
    return x + float(x.sum().item() > 1e9), x.sum(0)


@two.register_fake
def _two_fake(x):
    return torch.empty_like(x), x.new_empty(x.shape[1:])


@torch.library.custom_op("cdytest::add_into", mutates_args=("out",))
def add_into(x: torch.Tensor, out: torch.Tensor) -> None:
    CALLS["n"] += 1
    out.add_(x)


@add_into.register_fake
def _add_into_fake(x, out):
    return None


@torch.library.custom_op("cdytest::nofake", mutates_args=())
def nofake(x: torch.Tensor) -> torch.Tensor:
    CALLS["n"] += 1
    return x * 2


@torch.library.custom_op("cdytest::positive", mutates_args=())
def positive(x: torch.Tensor) -> torch.Tensor:
    CALLS["n"] += 1
    return x[x > 0]


@positive.register_fake
def _positive_fake(x):
    n = torch.library.get_ctx().new_dynamic_size()
    return x.new_empty(n)


_LIB = torch.library.Library("cdytest", "FRAGMENT")
_LIB.define("first_rows(Tensor(a) x) -> Tensor(a)")


def _first_rows(x):
    CALLS["n"] += 1
    return x[:1]


_LIB.impl("first_rows", _first_rows, "CompositeExplicitAutograd")
_LIB.impl("first_rows", lambda x: x[:1], "Meta")


def calls_per_run(fn, *args, runs=3):
    """fn compiled, run `runs` times: each result equal to eager's; the op's calls per run."""
    opt = cdynamo.optimize(fn)
    counts = []
    for _ in range(runs):
        CALLS["n"] = 0
        got = opt(*args)
        counts.append(CALLS["n"])
        CALLS["n"] = 0
        want = fn(*args)
        torch.testing.assert_close(got, want)
    return counts


def codes():
    return [b["code"] for b in _support.breaks]


@pytest.mark.parametrize("how", ["packet", "overload", "customopdef", "kwarg"])
def test_custom_op_with_fake_is_one_graph(how):
    op = {"packet": torch.ops.cdytest.scale_add, "overload": torch.ops.cdytest.scale_add.default,
          "customopdef": scale_add, "kwarg": scale_add}[how]

    def f(x, y):
        if how == "kwarg":
            return op(x + 1, y, k=2.0).relu() * 3
        return op(x + 1, y, 2.0).relu() * 3
    x, y = torch.randn(4, 5), torch.ones(3)
    assert calls_per_run(f, x, y) == [1, 1, 1]
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["graph_breaks"] == 0, (st, _support.breaks)
    assert st["fallbacks"] == 0 and st["recompiles"] == 0


def test_custom_op_with_two_results():
    def f(x):
        a, b = two(x * 2)
        return (a - b).sum(1)
    x = torch.randn(3, 4)
    assert calls_per_run(f, x) == [1, 1, 1]
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["graph_breaks"] == 0, (st, _support.breaks)


def test_custom_op_body_runs_eagerly_in_a_new_shape():
    """A new input shape recompiles the caller; the op's body is still never a frame."""
    def f(x, y):
        return scale_add(x.exp(), y, 0.5) + 1
    opt = cdynamo.optimize(f)
    for shape in [(2, 3), (5, 7), (4, 4)]:
        x, y = torch.randn(*shape), torch.ones(2)
        torch.testing.assert_close(opt(x, y), f(x, y))
    assert "NEEDS_DATA" not in codes()
    assert cdynamo.stats()["graph_breaks"] == 0, _support.breaks


def test_mutating_custom_op_breaks_and_stays_correct():
    def f(x):
        o = torch.zeros(x.shape)
        add_into(x + 1, o)
        return o * 2
    x = torch.randn(4, 5)
    assert calls_per_run(f, x) == [1, 1, 1]
    assert "LIBOP_MUTATES" in codes()


@pytest.mark.parametrize("grad", [False, True])
def test_aten_overload_that_writes_its_input_breaks(grad):
    """An aten overload that writes an input (torch.ops.aten.mul_.Tensor, normal_.default,
    add.out) stops the trace (LIBOP_MUTATES) and runs eagerly: taken for its functional
    form the write was dropped (mul_ gave x * 1; normal_'s gradient passed through as 1,
    fuzz finding random_wrong_efd21c41c8).  Functional overloads still compile."""
    def mul(a):
        t = a * 1
        torch.ops.aten.mul_.Tensor(t, 3)
        return t + 1

    def draw(a):
        t = a * 1
        torch.ops.aten.normal_.default(t)
        return t * 2

    def into(a):
        o = torch.zeros(3)
        torch.ops.aten.add.out(a.detach(), 1, out=o)
        return o * 2

    for fn in (mul, draw, into):
        cdynamo.reset()
        res = []
        for run in (fn, cdynamo.optimize(fn)):
            a = torch.ones(3, requires_grad=grad)
            torch.manual_seed(5)
            out = run(a)
            if grad and out.requires_grad:
                out.backward(torch.ones(3))
            res.append((out.detach(), a.grad))
        torch.testing.assert_close(res[1], res[0])
        assert "LIBOP_MUTATES" in codes() or cdynamo.stats()["frames_compiled"] == 0, fn
    cdynamo.reset()
    assert calls_per_run(lambda x: torch.ops.aten.mul.Tensor(x, 3) + 1, torch.ones(3)) == [0, 0, 0]
    assert cdynamo.stats()["frames_compiled"] == 1 and not codes()


def test_aliasing_library_op_breaks_and_stays_correct():
    def f(x):
        return torch.ops.cdytest.first_rows(x * 2) + 1
    x = torch.randn(4, 5)
    assert calls_per_run(f, x) == [1, 1, 1]
    assert "LIBOP_ALIAS" in codes()


def test_custom_op_without_fake_runs_eagerly():
    """No fake impl: torch raises on the fakes, the frame runs eagerly (as before)."""
    def f(x):
        return nofake(x + 1) - 1
    x = torch.randn(4, 5)
    assert calls_per_run(f, x) == [1, 1, 1]
    assert "TORCH_RAISED" in codes()


def test_custom_op_with_data_dependent_size_breaks():
    def f(x):
        return positive(x + 1) * 2
    x = torch.randn(4, 5)
    assert calls_per_run(f, x) == [1, 1, 1]
    assert codes() and codes()[0] == "TORCH_RAISED"
    assert "data-dependent" in _support.breaks[0]["reason"]


def test_custom_op_under_dynamic_shapes():
    def f(x, y):
        return scale_add(x * 2, y, 1.5) - x
    opt = cdynamo.optimize(f, dynamic=True)
    for n in (3, 5, 8, 6):
        x, y = torch.randn(n, 4), torch.ones(2)
        CALLS["n"] = 0
        got = opt(x, y)
        assert CALLS["n"] == 1
        torch.testing.assert_close(got, f(x, y))
    assert cdynamo.stats()["graph_breaks"] == 0, _support.breaks


# ---- issue 32: a library op's result sizes under symbolic shapes ----

@torch.library.custom_op("cdytest::rms", mutates_args=())
def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


@rms.register_fake
def _rms_fake(x, w):
    return torch.empty_like(x)


@torch.library.custom_op("cdytest::pool2", mutates_args=())
def pool2(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0], -1, 2).sum(-1)


@pool2.register_fake
def _pool2_fake(x):
    return x.new_empty(x.shape[0], x.shape[1] // 2)


@torch.library.custom_op("cdytest::lie", mutates_args=())
def lie(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.new_ones(y.shape[0])


@lie.register_fake
def _lie_fake(x, y):     # follows x where the op follows y: equal at the traced sizes
    return x.new_empty(x.shape[0])


def _sweep(fn, make, sizes):
    cdynamo.reset()
    of = cdynamo.optimize(fn)
    before = cdynamo.stats()["frames_compiled"]
    for n in sizes:
        args = make(n)
        torch.testing.assert_close(of(*args), fn(*args))
    return cdynamo.stats()["frames_compiled"] - before


def test_library_op_sizes_follow_its_fake_symbolically(capfd):
    """The fake run at moved sizes maps each result dim to an argument's dim: a sweep
    over the batch compiles twice (it specialized every size before)."""
    w = torch.randn(16)
    capfd.readouterr()
    cdynamo._C.set_log_topics({"dynamic"})
    try:
        n = _sweep(lambda x: rms(x * 2, w) + 1, lambda n: (torch.randn(n, 16),), range(2, 20))
    finally:
        cdynamo._C.set_log_topics(set())
    assert n == 2
    assert "s0 = dim 0 of 'x' is symbolic" in capfd.readouterr().err


def test_library_op_without_a_size_rule_says_why(capfd):
    """x.shape[1] // 2 is no argument's size: the sizes specialize, with the reason."""
    capfd.readouterr()
    cdynamo._C.set_log_topics({"dynamic"})
    try:
        n = _sweep(lambda x: pool2(x + 1) * 2, lambda n: (torch.randn(3, 2 * n),), range(2, 6))
    finally:
        cdynamo._C.set_log_topics(set())
    assert n == 4
    err = capfd.readouterr().err
    assert "its fake's sizes followed no rule (probe): extern cdytest::pool2" in err, err


def test_library_op_result_checked_at_run_time():
    """A fake that follows another argument than the op at other sizes: the real
    result's sizes are checked, the call gives eager's result, never a wrong size."""
    def g(x, y):
        return lie(x, y) + 1
    assert _sweep(g, lambda n: (torch.randn(n), torch.randn(n)), range(4, 9)) == 2
    og = cdynamo.optimize(g)
    x, y = torch.randn(8), torch.randn(3)
    torch.testing.assert_close(og(x, y), g(x, y))
