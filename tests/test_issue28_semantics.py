"""Issue 28, tracer semantics: global torch state (autocast, default dtype)
guarded, live dict views, out-of-range indexing that eager raises for, and
guards on what per-call objects depend on (namedtuple methods, closures)."""
import collections
import contextlib
import functools

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from torch.testing import assert_close


def same(expected, actual):
    """Values, dtypes and strides as eager (nested tuples / lists too)."""
    if isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected)
        for e, a in zip(expected, actual):
            same(e, a)
    elif isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype, (expected.dtype, actual.dtype)
        assert actual.shape == expected.shape
        assert actual.stride() == expected.stride(), (expected.stride(), actual.stride())
        assert_close(actual, expected, equal_nan=True)
    else:
        assert actual == expected, (expected, actual)


@contextlib.contextmanager
def log_topics(*topics):
    cdynamo._C.set_log_topics(set(topics))
    try:
        yield
    finally:
        cdynamo._C.set_log_topics(set())


@contextlib.contextmanager
def default_dtype(dt):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dt)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


# ---- item 4: autocast ----------------------------------------------------------

AUTOCASTS = {
    "torch.autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "torch.amp.autocast": lambda: torch.amp.autocast("cpu", dtype=torch.bfloat16),
    "float16": lambda: torch.autocast("cpu", dtype=torch.float16),
}


@pytest.mark.parametrize("n", [4, 256])
@pytest.mark.parametrize("spelling", sorted(AUTOCASTS))
def test_autocast_around_compiled_matmul(n, spelling):
    f = lambda x, w: x @ w + 1
    x, w = torch.randn(n, n), torch.randn(n, n)
    g = cdynamo.optimize(f)
    with AUTOCASTS[spelling]():
        e = f(x, w)
        c = g(x, w)
    same(e, c)
    assert e.dtype != torch.float32


def test_autocast_toggles_between_entries():
    f = lambda x, w: torch.relu(F.linear(x, w)) * 2
    x, w = torch.randn(8, 16), torch.randn(32, 16)
    g = cdynamo.optimize(f)
    same(f(x, w), g(x, w))                      # compiled, autocast off
    with torch.autocast("cpu", dtype=torch.bfloat16):
        same(f(x, w), g(x, w))                  # autocast on: a new entry, its casts traced
        same(f(x, w), g(x, w))
    same(f(x, w), g(x, w))                      # back to the float32 entry
    st = cdynamo.stats()
    assert st["recompiles"] == 1, st
    assert st["frames_compiled"] == 2, st


def test_autocast_recompile_log_names_it(capfd):
    f = lambda x, w: x @ w
    g = cdynamo.optimize(f)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    g(x, w)
    capfd.readouterr()
    with log_topics("recompiles"), torch.autocast("cpu", dtype=torch.bfloat16):
        same(f(x, w), g(x, w))
    err = capfd.readouterr().err
    assert "the autocast state changed" in err and "CPU autocast on" in err, err


def test_pointwise_graph_compiles_under_autocast():
    # autocast changes no pointwise op: such a graph compiles under it too
    f = lambda x: torch.sigmoid(x) * 3 + 1
    x = torch.randn(16)
    g = cdynamo.optimize(f)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        same(f(x), g(x))
        same(f(x), g(x))
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["frames_compiled"] == 1, st


def test_autocast_inside_traced_function():
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
        return y + 1

    def h(x, w):
        with torch.cpu.amp.autocast(dtype=torch.bfloat16):
            return x @ w

    x, w = torch.randn(4, 4), torch.randn(4, 4)
    for fn in (f, h):
        cdynamo.reset()
        same(fn(x, w), cdynamo.optimize(fn)(x, w))
    assert not torch.is_autocast_enabled("cpu")


def test_autocast_decorated_function_inlined():
    @torch.autocast("cpu", dtype=torch.bfloat16)
    def inner(x, w):
        return x @ w

    def f(x, w):
        return inner(x * 2, w) + 1

    x, w = torch.randn(4, 4), torch.randn(4, 4)
    same(f(x, w), cdynamo.optimize(f)(x, w))
    assert not torch.is_autocast_enabled("cpu")


def test_autocast_query_is_guarded():
    def f(x):
        if torch.is_autocast_enabled("cpu"):
            return x + 1
        return x - 1

    g = cdynamo.optimize(f)
    x = torch.randn(4)
    same(f(x), g(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        same(f(x), g(x))
    assert cdynamo.stats()["recompiles"] == 1


def test_autocast_setter_in_traced_code_is_not_dropped():
    def f(x):
        torch.set_autocast_enabled("cpu", True)
        y = x @ x
        torch.set_autocast_enabled("cpu", False)
        return y

    x = torch.randn(4, 4)
    e = f(x)
    c = cdynamo.optimize(f)(x)
    same(e, c)
    assert not torch.is_autocast_enabled("cpu")


# ---- item 14: default dtype -------------------------------------------------------

DEFAULT_DTYPE_FNS = {
    "ones * float": lambda x: torch.ones(3) * 0.1 + x.sum(),
    "zeros": lambda x: torch.zeros(2, 3) + x.long().sum(),
    "full float": lambda x: torch.full((3,), 1.5) + x.long(),
    "int tensor * float": lambda x: x.long() * 0.5,
    "int true div": lambda x: x.long() / 2,
    "int exp": lambda x: torch.exp(x.long()),
    "arange float": lambda x: torch.arange(0.0, 3.0) + x.long(),
    "tensor of floats": lambda x: torch.tensor([1.5, 2.5, 3.5]) + x.long(),
    "empty dtype": lambda x: x.long() + (1 if torch.empty(2).dtype == torch.float32 else 2),
    "get_default_dtype": lambda x: x.to(torch.get_default_dtype()),
    "finfo()": lambda x: x.long() + torch.finfo().bits,
}


@pytest.mark.parametrize("name", sorted(DEFAULT_DTYPE_FNS))
def test_default_dtype_change_recompiles(name, capfd):
    f = DEFAULT_DTYPE_FNS[name]
    x = torch.arange(3.0)
    g = cdynamo.optimize(f)
    same(f(x), g(x))
    capfd.readouterr()
    with default_dtype(torch.float64), log_topics("recompiles"):
        same(f(x), g(x))
        same(f(x), g(x))
    err = capfd.readouterr().err
    assert "torch.get_default_dtype() changed" in err and "torch.float64" in err, err
    same(f(x), g(x))
    st = cdynamo.stats()
    assert st["recompiles"] == 1, st


def test_default_dtype_not_guarded_when_unused():
    f = lambda x: x * 0.5 + x.exp()
    x = torch.randn(3)
    g = cdynamo.optimize(f)
    same(f(x), g(x))
    with default_dtype(torch.float64):
        same(f(x), g(x))
    assert cdynamo.stats()["recompiles"] == 0


def test_set_default_dtype_in_traced_code_runs():
    def f(x):
        torch.set_default_dtype(torch.float64)
        y = torch.ones(2) + x
        torch.set_default_dtype(torch.float32)
        return y

    x = torch.randn(2)
    e = f(x)
    c = cdynamo.optimize(f)(x)
    same(e, c)
    assert torch.get_default_dtype() == torch.float32


def test_global_setters_in_traced_code_take_effect():
    def f(x):
        torch.manual_seed(123)
        return x + 1

    x = torch.randn(3)
    cdynamo.optimize(f)(x)
    a = torch.rand(4)
    torch.manual_seed(123)
    assert torch.equal(a, torch.rand(4))


def test_state_guards_listed():
    f = lambda x, w: torch.ones(4) + x @ w
    ex = cdynamo.explain(f)(torch.randn(4, 4), torch.randn(4, 4))
    text = "\n".join(ex.guards) if isinstance(ex.guards, list) else str(ex.guards)
    assert "torch.get_default_dtype() is torch.float32" in text, text
    assert "the autocast state is CPU autocast off" in text, text


# ---- item 15: dict views are live; list and dict aliasing ---------------------------

def _dv_len_values(x):
    d = {3: x}
    values = d.values()
    d[3] = x + 1
    d[4] = x + 2
    return len(values)


def _dv_keys_in(x):
    d = {"a": x}
    ks = d.keys()
    d["b"] = 1
    return x + ("b" in ks) + ("c" in ks) + len(ks)


def _dv_items_loop(x):
    d = {"a": x}
    it = d.items()
    d["b"] = x * 2
    d["a"] = x * 3
    s = x
    for k, v in it:
        s = s + v
    return s


def _dv_values_sum(x):
    d = {"a": x}
    vs = d.values()
    d["a"] = x * 3
    return sum(vs) + 1


def _dv_list_of_items(x):
    d = {"a": x}
    view = d.items()
    d["z"] = x - 1
    return [v for _, v in list(view)], type(d.keys()) is type({}.keys())


def _dv_pop(x):
    d = {"a": x, "b": x + 1}
    vs = d.values()
    d.pop("a")
    return x + len(vs), list(vs)[0]


def _dv_truth(x):
    d = {}
    ks = d.keys()
    d[1] = x
    return x + 1 if ks else x - 1


def _alias_append(x):
    a = [x]
    b = a
    b.append(x + 1)
    return len(a), a[1]


def _alias_setitem(x):
    a = [x, x]
    b = a
    b[0] = x * 5
    return a[0]


def _alias_dict(x):
    d = {"a": x}
    e = d
    e["b"] = x + 1
    return len(d), d["b"]


def _alias_iadd(x):
    a = [x]
    b = a
    a += [x + 1]
    a += (x + 2,)
    return len(b), b[2]


def _alias_iadd_list(x):
    a = [x]
    b = a
    a += [x + 1]
    return len(b)


def _alias_slice_store(x):
    a = [x, x + 1]
    b = a
    a[0:1] = []
    return len(b)


@pytest.mark.parametrize("fn", [_dv_len_values, _dv_keys_in, _dv_items_loop, _dv_values_sum,
                                _dv_list_of_items, _dv_pop, _dv_truth, _alias_append,
                                _alias_setitem, _alias_dict, _alias_iadd, _alias_iadd_list,
                                _alias_slice_store],
                         ids=lambda f: f.__name__)
def test_dict_views_and_aliases(fn):
    x = torch.randn(3)
    same(fn(x), cdynamo.optimize(fn)(x))


def test_dict_view_compiles():
    x = torch.randn(3)
    for fn in (_dv_len_values, _dv_items_loop, _alias_iadd):
        cdynamo.reset()
        same(fn(x), cdynamo.optimize(fn)(x))
        st = cdynamo.stats()
        assert st["graph_breaks"] == 0 and st["fallbacks"] == 0, (fn.__name__, st)


# ---- item 18: an unused index op with an index out of range raises as in eager -------

def _raises_like_eager(f, *args):
    a1 = [a.clone() for a in args]
    a2 = [a.clone() for a in args]
    with pytest.raises(Exception) as e:
        f(*a1)
    with pytest.raises(Exception) as c:
        cdynamo.optimize(f)(*a2)
    assert type(c.value) is type(e.value), (e.value, c.value)
    for p, q in zip(a1, a2):
        assert torch.equal(p, q)


INDEX_OPS = {
    "getitem": lambda x, i: x[i],
    "index_select": lambda x, i: x.index_select(0, i),
    "gather": lambda x, i: torch.gather(x, 0, i),
    "embedding": lambda x, i: F.embedding(i, x.view(3, 1)),
    "take": lambda x, i: torch.take(x, i),
    "index_add": lambda x, i: x.index_add(0, i, torch.ones(1)),
    "scatter": lambda x, i: x.scatter(0, i, torch.ones(1)),
    "index_fill": lambda x, i: x.index_fill(0, i, 1.0),
}


@pytest.mark.parametrize("idx", [5, -4])
@pytest.mark.parametrize("op", sorted(INDEX_OPS))
def test_unused_index_out_of_range_raises(op, idx):
    g = INDEX_OPS[op]

    def f(x, i):
        y = g(x, i)
        return x + 1

    _raises_like_eager(f, torch.randn(3), torch.tensor([idx]))


@pytest.mark.parametrize("op", sorted(INDEX_OPS))
def test_used_index_out_of_range_raises(op):
    g = INDEX_OPS[op]
    _raises_like_eager(lambda x, i: g(x, i) * 2, torch.randn(3), torch.tensor([0, 5]))


def test_unused_index_2d_and_negative_in_range():
    x = torch.randn(3, 4)
    _raises_like_eager(lambda x, i: (x[i, 0], x + 1)[1], x, torch.tensor([3]))
    _raises_like_eager(lambda x, i: (x[:, i], x + 1)[1], x, torch.tensor([4]))
    # in range (negative wraps): no exception, and the frame still compiles
    f = lambda x, i: (x[i], x.index_select(0, i + 3), x * 2)[2]
    same(f(x, torch.tensor([-1])), cdynamo.optimize(f)(x, torch.tensor([-1])))
    assert cdynamo.stats()["graph_breaks"] == 0


def test_unused_index_checked_on_every_call():
    f = lambda x, i: (x[i], x + 1)[1]
    g = cdynamo.optimize(f)
    x = torch.randn(3)
    same(f(x, torch.tensor([2])), g(x, torch.tensor([2])))
    with pytest.raises(IndexError):
        g(x, torch.tensor([3]))
    same(f(x, torch.tensor([0])), g(x, torch.tensor([0])))
    assert cdynamo.stats()["frames_compiled"] == 1


# ---- item 23: per-call objects are guarded by what the code depends on ------------------

P2 = collections.namedtuple("P2", "a b")


class Q2(P2):
    def total(self):
        return self.a + self.b


class Holder:
    def __init__(self, s):
        self.s = s

    def m(self, t):
        return t * self.s


def _apply(fn, x):
    return fn(x) + 1


def _nt_after_break(x):
    p = Q2(x, x * 2)
    print("", end="")
    return p.total()


def _closure_after_break(x):
    k = 3
    h = lambda t: t * k
    print("", end="")
    return _apply(h, x)


def _lambda_after_break(x):
    print("", end="")
    return _apply(lambda t: t * 2, x)


def _method_after_break(x):
    c = Holder(2)
    print("", end="")
    return _apply(c.m, x)


def _closure_inlined(x):
    k = 3
    return _apply(lambda t: t * k, x)


@pytest.mark.parametrize("fn", [_nt_after_break, _closure_after_break, _lambda_after_break,
                                _method_after_break, _closure_inlined], ids=lambda f: f.__name__)
def test_per_call_objects_do_not_recompile(fn):
    g = cdynamo.optimize(fn)
    for _ in range(4):
        x = torch.randn(3)
        same(fn(x), g(x))
    st = cdynamo.stats()
    assert st["recompiles"] == 0, st
    assert st["frames_compiled"] >= 1, st


def test_per_call_functions_still_guarded():
    """What the code depends on is guarded: code, cells, defaults, self's state."""
    def mk_closure(k):
        return lambda t: t * k

    def mk_default(k):
        return lambda t, k=k: t * k

    def other(t):
        return t - 100

    g = cdynamo.optimize(_apply)
    x = torch.randn(3)
    for k in (2, 3, 2):
        same(_apply(mk_closure(k), x), g(mk_closure(k), x))
        same(_apply(mk_closure(x * k), x), g(mk_closure(x * k), x))
    cdynamo.reset()
    for k in (2, 3):
        same(_apply(mk_default(k), x), g(mk_default(k), x))
        same(_apply(other, x), g(other, x))
    cdynamo.reset()
    for k in (2, 3):
        same(_apply(Holder(k).m, x), g(Holder(k).m, x))
        same(_apply(Holder(x * k).m, x), g(Holder(x * k).m, x))


def test_namedtuple_argument_fields_guarded():
    h = lambda p: p.total() * 2
    g = cdynamo.optimize(h)
    x = torch.randn(3)
    for b in (2, 3, x, x * 2):
        same(h(Q2(x, b)), g(Q2(x, b)))
    st = cdynamo.stats()
    assert st["recompiles"] == 2, st   # b = 2, b = 3, b a tensor (one entry for both)


def test_per_call_closure_recompile_log(capfd):
    def mk(k):
        return lambda t: t * k

    g = cdynamo.optimize(_apply)
    x = torch.randn(3)
    g(mk(2), x)
    capfd.readouterr()
    with log_topics("recompiles"):
        same(_apply(mk(3), x), g(mk(3), x))
    err = capfd.readouterr().err
    assert "fn.__closure__[0].cell_contents" in err, err


# ---- other global state the compiled code would bypass: torch function / dispatch modes ----

from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode


class _DoubleAdds(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        r = func(*args, **(kwargs or {}))
        return r * 2 if func in (torch.Tensor.add, torch.add) else r


class _DoubleAddsDispatch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        r = func(*args, **(kwargs or {}))
        return r * 2 if func is torch.ops.aten.add.Tensor else r


@pytest.mark.parametrize("compiled_first", [True, False])
@pytest.mark.parametrize("mode", [_DoubleAdds, _DoubleAddsDispatch], ids=lambda m: m.__name__)
def test_modes_are_guarded(mode, compiled_first):
    f = lambda x: x.add(1) * 3
    g = cdynamo.optimize(f)
    x = torch.randn(3)
    if compiled_first:
        same(f(x), g(x))
    with mode():
        same(f(x), g(x))
        same(f(x), g(x))
    same(f(x), g(x))


def test_default_device_context_is_guarded():
    f = lambda x: torch.ones(3) + x
    g = cdynamo.optimize(f)
    x = torch.randn(3)
    same(f(x), g(x))
    with torch.device("meta"):
        e = f(x.to("meta"))
        c = g(x.to("meta"))
        assert c.device == e.device
    same(f(x), g(x))


def test_in_tuple_of_objects_compares_objects():
    # seen in a mode's __torch_function__: `func in (torch.Tensor.add, torch.add)`
    def f(x, fn):
        return x + 1 if fn in (torch.Tensor.add, torch.add) else x - 1

    g = cdynamo.optimize(f)
    x = torch.randn(3)
    for fn in (torch.add, torch.mul, torch.Tensor.add):
        same(f(x, fn), g(x, fn))


def test_state_queries_are_guarded():
    def f(x):
        return x + 1 if torch.are_deterministic_algorithms_enabled() else x - 1

    def h(x):
        return x * torch.get_num_threads()

    g, gh = cdynamo.optimize(f), cdynamo.optimize(h)
    x = torch.randn(3)
    n = torch.get_num_threads()
    try:
        same(f(x), g(x))
        torch.use_deterministic_algorithms(True)
        same(f(x), g(x))
        torch.use_deterministic_algorithms(False)
        same(f(x), g(x))
        same(h(x), gh(x))
        torch.set_num_threads(1 if n != 1 else 2)
        same(h(x), gh(x))
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(n)
    assert cdynamo.stats()["recompiles"] == 2


def _iter_list_set_ahead(x):
    a = [x, x]
    out = []
    for v in a:
        if len(out) == 0:
            a[1] = v * 10
        out.append(v)
    return out


def _iter_list_append(x):
    a = [x]
    out = []
    for v in a:
        if len(a) < 3:
            a.append(v + 1)
        out.append(v)
    return out


def _builtins_over_views(x):
    d = {"b": 1, "a": 2}
    e = {"b": x, "a": x * 2}
    return x + max(d.values()) + len(tuple(d)), sum(e.values()), torch.stack(list(e.values()))


@pytest.mark.parametrize("fn", [_iter_list_set_ahead, _iter_list_append, _builtins_over_views],
                         ids=lambda f: f.__name__)
def test_list_iteration_is_live(fn):
    x = torch.randn(3)
    same(fn(x), cdynamo.optimize(fn)(x))
    assert cdynamo.stats()["graph_breaks"] == 0


def test_state_stops_have_reason_codes():
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):   # a float32 op of autocast's (issue 33)
        ex = cdynamo.explain(lambda x, w: torch.nn.functional.mse_loss(x @ w, w))(x, w)
    assert [r["code"] for r in ex.break_reasons] == ["AUTOCAST_OPS"], ex.break_reasons
    cdynamo.reset()
    with _DoubleAdds():
        ex = cdynamo.explain(lambda x: x + 1)(x)
    assert "TORCH_MODE" in [r["code"] for r in ex.break_reasons], ex.break_reasons

    def f(x):
        torch.manual_seed(0)
        return x + 1

    cdynamo.reset()
    ex = cdynamo.explain(f)(x)
    assert [r["code"] for r in ex.break_reasons] == ["STATE_SETTER"], ex.break_reasons
