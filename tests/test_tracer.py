"""The tracer: inlined user code, Python values as constants, control flow on Python
values and shapes, builtins, tensor attributes, torch / F calls with keywords, return
structures, guards, and graph breaks (eager results, recorded reasons, nested frames
still compiled, fullgraph, no re-tracing)."""
import math
import os
import time

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import assert_same


def one_graph(fn, *args, transcendental=False, **kwargs):
    """fn gives eager's result (twice, the second from the cache) and compiles to exactly
    one graph with no graph break; inputs are left alone. Returns the compile record."""
    snapshots = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    expected = fn(*args, **kwargs)
    opt = cdynamo.optimize(fn)
    for _ in range(2):
        assert_same(expected, opt(*args, **kwargs), transcendental)
    for a, c in zip(args, snapshots):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, c, rtol=0, atol=0)
    st = cdynamo.stats()
    breaks = cdynamo._support.breaks
    assert st["graph_breaks"] == 0 and st["fallbacks"] == 0, (st, breaks)
    assert st["frames_compiled"] == 1, st
    assert st["cache_hits"] == 1, st
    assert [c["function"] for c in cdynamo._support.compiles] == [fn.__name__]
    return cdynamo._support.compiles[0]


X = torch.randn(4, 6)
Y = torch.randn(4, 6)


# --------------------------------------------------------------------------- inlining

def _scaled(x, alpha=2.0, beta=0.5):
    return x * alpha + beta


def _total(*args):
    acc = args[0]
    for a in args[1:]:
        acc = acc + a
    return acc


def _kw(x, **kwargs):
    out = x
    if "scale" in kwargs:
        out = out * kwargs["scale"]
    if kwargs.get("shift") is not None:
        out = out + kwargs["shift"]
    return out, len(kwargs)


def _kwonly(x, *, mode="relu", k=1):
    if mode == "relu":
        return torch.relu(x) * k
    return torch.tanh(x) * k


def test_inline_defaults_and_keywords():
    def f(x):
        return _scaled(x) + _scaled(x, 3.0) + _scaled(x, beta=-1.0) + _scaled(x, beta=1, alpha=4)
    one_graph(f, X)


def test_inline_star_args():
    def f(x, y):
        parts = (x, y, x * y)
        return _total(x, y) - _total(*parts) + _total(x)
    one_graph(f, X, Y)


def test_inline_star_star_kwargs():
    def f(x, y):
        a, n1 = _kw(x, scale=3.0)
        b, n2 = _kw(x, scale=2, shift=y)
        c, n3 = _kw(y, shift=y * 2)
        d, n0 = _kw(x)
        return a + b + c + d, n0 + n1 + n2 + n3
    one_graph(f, X, Y)


# Regression (failed at 6046313): a call with **dict (DICT_MERGE) breaks the graph
def test_call_with_double_star_dict():
    def f(x):
        opts = {"scale": 3.0}
        return _kw(x, **opts)[0]
    one_graph(f, X)


# Regression (failed at 6046313): the **kwargs dict of a compiled frame is guarded by identity
# (ID_MATCH kwargs): recompiles on every call
def test_kwargs_frame_cache_hit():
    opt = cdynamo.optimize(_kw)
    for _ in range(3):
        assert_same(_kw(X, scale=2.0), opt(X, scale=2.0))
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["cache_hits"] == 2, st


# Regression (failed at 6046313): the *args tuple of a compiled frame is guarded by identity
# (ID_MATCH args): recompiles on every call
def test_varargs_frame_cache_hit():
    opt = cdynamo.optimize(_total)
    for _ in range(3):
        assert_same(_total(X, Y), opt(X, Y))
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["cache_hits"] == 2, st


def test_inline_keyword_only():
    def f(x):
        return _kwonly(x) + _kwonly(x, mode="tanh", k=3) + _kwonly(x, k=2)
    one_graph(f, X)


def test_outer_function_defaults_and_keyword_only():
    def f(x, y=None, scale=1.5, *, neg=False):
        out = x * scale
        if y is not None:
            out = out + y
        if neg:
            out = -out
        return out
    one_graph(f, X, Y, scale=2.0, neg=True)
    cdynamo.reset()
    one_graph(f, X)


# Regression (failed at 6046313): `for r in rest` over the frame's own *args tuple: 'iterating over
# this kind of value'
def test_iterate_own_varargs():
    def f(x, *rest):
        for r in rest:
            x = x + r
        return x
    one_graph(f, X, Y)


def test_closure_free_variables():
    k = 3.0
    names = ("a", "b")

    def inner(x):
        return x * k + len(names)

    def f(x):
        return inner(x) * k
    one_graph(f, X)


# Regression (failed at 04e87a6): a tensor in a closure cell was unsupported
def test_closure_tensor_cell():
    w = torch.randn(6)

    def f(x):
        return x * w
    one_graph(f, X)


def test_nested_calls():
    def c(x):
        return torch.sigmoid(x) + 1

    def b(x, n):
        return c(x) * n

    def a(x):
        return b(x, 2) + b(-x, 3)

    def f(x):
        return a(x) - c(x)
    one_graph(f, X)


def test_nested_function_defined_inside():
    def f(x):
        def g(t):
            return t * 2 + 1
        return g(x)
    one_graph(f, X)


class Scaler:
    def __init__(self, factor, bias):
        self.factor = factor
        self.bias = bias
        self.name = "scaler"

    @property
    def double(self):
        return self.factor * 2

    def apply(self, x, extra=0.0):
        return x * self.factor + self.bias + extra

    def both(self, x):
        return self.apply(x) + self.apply(x, extra=self.double)

    @staticmethod
    def sq(x):
        return x * x

    @classmethod
    def make_const(cls):
        return 7


def test_user_object_methods_and_properties():
    s = Scaler(1.5, torch.randn(6))

    def f(x, obj):
        out = obj.both(x) + obj.sq(x)
        if obj.name == "scaler":
            out = out + obj.double
        return out
    one_graph(f, X, s)


# Regression (failed at 6046313): a classmethod called through an instance (obj.make_const()) is
# guarded by the identity of the bound method, a new object on every access: recompiles on every
# call
def test_classmethod_via_instance_cache_hit():
    s = Scaler(1.5, 0.0)

    def f(x, obj):
        return x * obj.make_const()
    one_graph(f, X, s)


# Regression (failed at 6046313): a staticmethod called through its class (Scaler.sq(x)): 'call to
# Scaler.sq is not supported', and the broken frame is re-traced on every call
def test_staticmethod_via_class():
    def f(x):
        return Scaler.sq(x) + 1
    one_graph(f, X)


def test_bound_method_of_user_object():
    s = Scaler(2.0, 1.0)

    def f(x):
        fn = s.apply
        return fn(x) + fn(x, 2.0)
    one_graph(f, X)


# --------------------------------------------------------------------------- Python values

def test_python_scalars_arithmetic():
    def f(x, n, r, flag, nothing, name):
        a = n * 3 + 1 - n // 2 + n % 3 + 2 ** n + (-n)
        b = r / 2 + r * r - abs(-r) + round(r, 1) + float(n) + int(r)
        c = (n > 1) + (r <= 0.5) + (n == 2) + (n != 3) + (not flag) + (flag and n > 0)
        out = x * a + b - c
        if nothing is None and name == "abc" and name + "d" == "abcd" and len(name) == 3:
            out = out + 1
        if flag:
            out = out * 2
        return out
    one_graph(f, X, 5, 0.25, True, None, "abc")


def test_tuples_and_lists():
    def f(x, y, ws):
        t = (x, y, 3)
        lst = [x, y]
        lst.append(x * 2)
        lst2 = lst + [y * 3]
        a, b, n = t
        out = a + b * n + lst2[-1] + lst2[1:3][0] + lst[::-1][0] + ws[1] * len(ws)
        out = out + len(t) + len(lst2) + t[-1]
        for item in lst:
            out = out + item
        for w in (1.5, 2.5):
            out = out * w
        if 3 in (1, 2, 3) and 4 not in [1, 2]:
            out = out - 1
        return out, (n, n + 1), [n * 2]
    one_graph(f, X, Y, [0.5, 2.0])


def test_dicts():
    def f(x, cfg):
        d = {"a": x, "b": x * 2, "n": 3}
        out = (d["a"] + d["b"]) * cfg["scale"] * d["n"]
        for key, val in {"p": 2, "q": 3}.items():
            out = out + val * len(key)
        for key in d:
            out = out + len(key)
        for v in {"u": 1.5, "v": 2.5}.values():
            out = out - v
        if "b" in d and "z" not in d:
            out = out * 2
        return out + len(d) + cfg["bias"] + d.get("n", 0) + d.get("missing", 1)
    one_graph(f, X, {"scale": 3.0, "bias": 0.5})


# Regression (failed at 6046313): dict.get on a dict argument: 'call to dict.get is not supported'
def test_dict_argument_get():
    def f(x, cfg):
        return x * cfg.get("scale", 1.0)
    one_graph(f, X, {"scale": 3.0})


# Regression (failed at 6046313): a frame that graph-breaks on a dict argument (cfg.get /
# cfg.items) is re-traced, and the break recorded again, on every call, even with the very same
# dict object
def test_broken_frame_with_dict_argument_not_retraced():
    def f(x, cfg):
        return x * cfg.get("scale", 1.0)
    cfg = {"scale": 2.0}
    opt = cdynamo.optimize(f)
    for _ in range(3):
        assert_same(f(X, cfg), opt(X, cfg))
    assert cdynamo.stats()["graph_breaks"] <= 1, cdynamo.stats()


# Regression (failed at 6046313): item assignment on a Python list/dict (STORE_SUBSCR) breaks the
# graph
def test_store_subscr_on_python_containers():
    def f(x):
        d = {"a": x}
        d["b"] = x * 2
        return d["a"] + d["b"]
    one_graph(f, X)


# Regression (failed at 6046313): len() of a list argument is not guarded: after appending to the
# same list object the compiled code returns the stale length (wrong result)
def test_len_of_mutated_list_argument():
    def f(x, lst):
        return x + len(lst)
    opt = cdynamo.optimize(f)
    lst = [1.0, 2.0]
    assert_same(f(X, lst), opt(X, lst))
    lst.append(3.0)
    assert_same(f(X, lst), opt(X, lst))  # eager X + 3, compiled X + 2


# Regression (failed at 6046313): a dict argument is guarded by identity (ID_MATCH): an equal but
# new dict on every call recompiles every call
def test_equal_dict_argument_cache_hit():
    def f(x, cfg):
        return x * cfg["scale"]
    opt = cdynamo.optimize(f)
    for _ in range(3):
        assert_same(f(X, {"scale": 2.0}), opt(X, {"scale": 2.0}))
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["cache_hits"] == 2, st


def test_ranges_and_slices():
    def f(x):
        out = x
        r = range(1, 10, 3)
        for i in r:
            out = out + i
        out = out * len(r) + r[1] + list(range(3))[-1]
        sl = slice(1, 3)
        return out[sl], out[:, ::2], out[..., -1], out[None, 1:, 2]
    one_graph(f, X)


def test_min_max_builtins_math():
    def f(x):
        n = x.shape[0]
        m = x.shape[1]
        a = min(n, m) + max(n, m, 2) + abs(-n) + round(2.5) + int(2.7) + float(3) + 2 ** 3
        s = math.sqrt(16.0) + math.pi + math.floor(2.5) + math.exp(0.0)
        return x * a + s
    one_graph(f, X)


def test_isinstance_getattr_hasattr():
    s = Scaler(2.0, 0.5)

    def f(x, obj, val):
        out = x
        if isinstance(obj, Scaler):
            out = out * getattr(obj, "factor")
        if isinstance(x, torch.Tensor):
            out = out + 1
        if isinstance(val, int) and not isinstance(val, str):
            out = out + val
        if hasattr(obj, "bias") and not hasattr(obj, "nope"):
            out = out + getattr(obj, "bias", 0.0) + getattr(obj, "nope", 5)
        return out
    one_graph(f, X, s, 3)


# Regression (failed at 6046313): isinstance with a tuple of types: 'call to isinstance is not
# supported'
def test_isinstance_tuple_of_types():
    def f(x, val):
        if isinstance(val, (int, float)):
            return x + val
        return x
    one_graph(f, X, 3)


# pytest rewrites the asserts of this file (into code that loads `x.dim` without calling
# it): the function with asserts is compiled from source, as plain Python would run it
ASSERT_SRC = """
def f(x, name):
    assert x.dim() == 2, f"expected 2-d, got {x.dim()}"
    assert x.shape[1] == 6 and x.ndim == 2
    tag = f"{name}-{x.shape[0]}-{1.5:.2f}"
    if tag == "t-4-1.50":
        return x + 1, tag
    return x - 1, tag
"""


def test_assert_and_fstring():
    ns = {}
    exec(compile(ASSERT_SRC, "<assert_src>", "exec"), ns)
    one_graph(ns["f"], X, "t")


def test_failing_assert_raises_like_eager():
    ns = {}
    exec(compile(ASSERT_SRC, "<assert_src>", "exec"), ns)
    with pytest.raises(AssertionError, match="expected 2-d, got 1"):
        cdynamo.optimize(ns["f"])(torch.randn(3), "t")


# --------------------------------------------------------------------------- control flow

def test_if_while_on_python_values():
    def f(x, n):
        out = x
        i = 0
        while i < n:
            if i % 2 == 0:
                out = out + i
            elif i == 3:
                out = out * 2
            else:
                out = out - 1
            i += 1
        while True:
            out = out * 0.5
            if i > 0:
                break
        return out
    one_graph(f, X, 5)


def test_control_flow_on_shapes():
    def f(x):
        out = x
        if x.shape[0] > 2:
            out = out + 1
        if x.dim() == 2 and x.ndim == 2:
            out = out * 2
        if x.size(1) == 6 and x.size()[0] == 4 and x.size(-1) == 6:
            out = out - 3
        if x.numel() > 100:
            out = out * 0
        n = 0
        while n < x.shape[0]:
            out = out + n
            n += 1
        return out, x.numel(), x.shape, x.size(0)
    one_graph(f, X)


def test_shape_branch_recompiles_for_other_shape():
    def f(x):
        if x.shape[0] > 2:
            return x + 1
        return x - 1
    opt = cdynamo.optimize(f)
    a, b = torch.randn(4, 3), torch.randn(2, 3)
    assert_same(f(a), opt(a))
    assert_same(f(b), opt(b))
    assert_same(f(a), opt(a))
    st = cdynamo.stats()
    assert st["frames_compiled"] == 2 and st["graph_breaks"] == 0, st


def test_for_loops():
    def f(x, ws):
        out = x
        for i in range(3):
            out = out + i
        for w in ws:
            out = out * w
        for a, b in zip([1, 2], (3, 4)):
            out = out + a * b
        for i, w in enumerate([0.5, 2.0]):
            out = out - w * i
        for i, w in enumerate([x, x * 2]):
            out = out + w / (i + 1)
        for k, v in {"p": 2, "q": 3}.items():
            out = out + v
        for t in (x, -x):
            out = out + t
        for a, (b, c) in zip([1, 2], [(3, 4), (5, 6)]):
            out = out + a * b - c
        return out
    one_graph(f, X, (0.5, 2.0))


# Regression (failed at 6046313): iterating a list argument (for / zip / enumerate over it):
# 'iterating over this kind of value' (a tuple argument works)
def test_iterate_list_argument():
    def f(x, ws):
        for i, w in enumerate(ws):
            x = x + w * i
        return x
    one_graph(f, X, [0.5, 2.0])


# --------------------------------------------------------------------------- tensors

def test_tensor_attributes():
    def f(x):
        out = x * 2
        if x.dtype == torch.float32 and x.dtype.is_floating_point:
            out = out + 1
        if x.is_floating_point() and not x.requires_grad:
            out = out + 2
        return out, x.dtype, x.shape, x.ndim, x.device, x.shape[-1]
    one_graph(f, X)


def _crashes(body):
    """Run body (code using cdynamo) in a fresh interpreter; True if it died by a signal."""
    from conftest import run_python
    proc = run_python("import torch, cdynamo\n" + body)
    return proc.returncode < 0 or "Segmentation fault" in proc.stderr, proc


# Regression: at 6046313 x.T / x.mT crashed the interpreter (SIGSEGV, stack overflow):
# tensor_attr (csrc/trace/vars.c) traced the view attributes as a call of builtins.getattr,
# which call_builtin (csrc/trace/calls.c) sends back to cdy_get_attr -> tensor_attr.
# Run in a fresh interpreter so that a crash fails this test only.
def test_tensor_transpose_attributes():
    crashed, proc = _crashes("""
def f(x):
    return x.T * 2, x.mT + 1, getattr(x, "T") - 1
x = torch.randn(4, 6)
opt = cdynamo.optimize(f)
for _ in range(2):
    for e, a in zip(f(x), opt(x)):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
        assert a.stride() == e.stride()
st = cdynamo.stats()
assert st["graph_breaks"] == 0 and st["frames_compiled"] == 1, st
print("OK")
""")
    assert not crashed and proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-2000:]


def test_torch_and_functional_with_keywords():
    def f(x, y):
        a = F.softmax(x, dim=-1)
        b = torch.sum(x, dim=1, keepdim=True)
        c = torch.mean(y, dim=0)
        d = F.layer_norm(x, (6,), eps=1e-5)
        e = torch.clamp(x, min=-0.5, max=0.5)
        g = F.gelu(y, approximate="tanh")
        h = torch.cat([x, y], dim=1)
        i = F.pad(x, (1, 1), value=0.5)
        j = torch.where(x > 0, x, torch.zeros_like(x))
        k = x.sum(dim=-1, keepdim=True) + x.amax(dim=1, keepdim=True)
        m = F.normalize(x, p=2.0, dim=1)
        n = torch.matmul(x, y.transpose(0, 1))
        o = x.to(dtype=torch.float64) * 2
        return a + b + c + d + e + g + j + k + m, h, i, n, o
    one_graph(f, X, Y, transcendental=True)


def test_tensor_methods_and_views():
    def f(x):
        a = x.view(2, 12).reshape(3, 8).permute(1, 0).contiguous()
        b = x.unsqueeze(0).expand(2, 4, 6).flatten(0, 1)
        c = x.chunk(2, dim=1)
        d = x.split([2, 4], dim=1)
        e = x.transpose(0, 1)[1:3, ::2]
        return a, b, c[0] + c[1], d[1], e, x.new_zeros(3), torch.ones(2, 3, dtype=torch.int64)
    one_graph(f, X)


def test_return_structures():
    def f(x, y):
        return {"a": x + y, "b": [x * 2, (y - 1, None)], "n": 3, "s": "str"}, None, 2.5, True, \
            (x.relu(),)
    expected = f(X, Y)
    opt = cdynamo.optimize(f)
    for _ in range(2):
        got = opt(X, Y)
        assert type(got) is tuple and len(got) == 5
        d = got[0]
        assert set(d) == {"a", "b", "n", "s"}
        assert_same(expected[0]["a"], d["a"])
        assert_same(expected[0]["b"], d["b"])
        assert d["n"] == 3 and d["s"] == "str"
        assert got[1] is None and got[2] == 2.5 and got[3] is True
        assert_same(expected[4], got[4])
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["graph_breaks"] == 0 and st["cache_hits"] == 1, st


def test_returns_input_and_aliases():
    def f(x):
        y = x * 2
        return x, y, y, x[0]
    expected = f(X)
    opt = cdynamo.optimize(f)
    got = opt(X)
    assert got[0] is X
    assert got[1] is got[2]
    assert_same(expected, got)
    assert got[3].data_ptr() == X.data_ptr()  # a view of the input, as in eager


# --------------------------------------------------------------------------- guards

GLOBAL_SCALE = 2.0


def _global_fn(x):
    return x + 1


def test_global_constant_guard(monkeypatch):
    def f(x):
        return x * GLOBAL_SCALE
    opt = cdynamo.optimize(f)
    assert_same(X * 2.0, opt(X))
    monkeypatch.setitem(globals(), "GLOBAL_SCALE", 5.0)
    assert_same(X * 5.0, opt(X))
    assert_same(X * 5.0, opt(X))
    st = cdynamo.stats()
    assert st["frames_compiled"] == 2 and st["recompiles"] == 1, st


def test_global_function_guard(monkeypatch):
    def f(x):
        return _global_fn(x) * 2
    opt = cdynamo.optimize(f)
    assert_same((X + 1) * 2, opt(X))
    monkeypatch.setitem(globals(), "_global_fn", lambda x: x - 10)
    assert_same((X - 10) * 2, opt(X))
    st = cdynamo.stats()
    assert st["frames_compiled"] == 2 and st["graph_breaks"] == 0, st


def test_closure_cell_guard():
    k = 2.0

    def f(x):
        return x * k

    opt = cdynamo.optimize(f)
    assert_same(X * 2.0, opt(X))
    k = 7.0
    assert_same(X * 7.0, opt(X))
    k = 2.0
    assert_same(X * 2.0, opt(X))
    st = cdynamo.stats()
    assert st["frames_compiled"] == 2 and st["graph_breaks"] == 0, st


def test_closure_function_cell_guard():
    def helper(x):
        return x + 1

    def f(x):
        return helper(x) * 3

    opt = cdynamo.optimize(f)
    assert_same((X + 1) * 3, opt(X))

    def helper(x):  # noqa: F811  (rebinding the cell)
        return x - 1
    assert_same((X - 1) * 3, opt(X))


def test_object_attribute_guard():
    s = Scaler(2.0, 0.0)

    def f(x):
        return s.apply(x)
    opt = cdynamo.optimize(f)
    assert_same(s.apply(X), opt(X))
    s.factor = 3.0
    assert_same(X * 3.0, opt(X))


def test_python_arg_value_guard():
    def f(x, n, mode):
        return x * n if mode == "mul" else x + n
    opt = cdynamo.optimize(f)
    for n, mode in [(2, "mul"), (3, "mul"), (2, "add"), (2, "mul")]:
        assert_same(f(X, n, mode), opt(X, n, mode))
    st = cdynamo.stats()
    assert st["frames_compiled"] == 3 and st["cache_hits"] == 1, st


def test_dtype_and_shape_guard():
    def f(x):
        return x * 2 + 1
    opt = cdynamo.optimize(f)
    for t in (X, X.double(), torch.randn(3, 3), X.t(), torch.arange(6)):
        assert_same(f(t), opt(t))


# --------------------------------------------------------------------------- graph breaks

def _nested_helper(x):
    return torch.tanh(x) * 3 + 1


def _break_if(x):
    y = _nested_helper(x)
    if y.sum() > 0:  # BREAK-LINE
        return y + 1
    return y - 1


def _break_item(x):
    y = _nested_helper(x)
    s = y.sum().item()  # BREAK-LINE
    return y * s


def _break_print(x):
    y = _nested_helper(x)
    print("value", y.shape)  # BREAK-LINE
    return y * 2


def _break_time(x):
    y = _nested_helper(x)
    t = time.time()  # BREAK-LINE
    return y + (t > 0)


def _break_getpid(x):
    y = _nested_helper(x)
    pid = os.getpid()  # BREAK-LINE
    return y + (pid > 0)


BREAKERS = [_break_if, _break_item, _break_print, _break_time, _break_getpid]


def _break_line(fn):
    import inspect
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if "BREAK-LINE" in line:
            return start + i
    raise AssertionError(fn)


@pytest.mark.parametrize("fn", BREAKERS, ids=lambda f: f.__name__)
def test_graph_break(fn, capsys):
    for x in (torch.randn(4, 6), -torch.ones(4, 6) * 5):
        cdynamo.reset()
        expected = fn(x)
        opt = cdynamo.optimize(fn)
        for _ in range(3):
            assert_same(expected, opt(x), transcendental=True)
        st = cdynamo.stats()
        assert st["graph_breaks"] == 1, (st, cdynamo._support.breaks)
        breaks = cdynamo._support.breaks
        assert len(breaks) == 1, breaks
        b = breaks[0]
        assert b["function"] == fn.__name__, b
        assert b["filename"] == __file__, b
        assert b["line"] == _break_line(fn), (b, _break_line(fn))
        assert b["reason"] and b["code"] in cdynamo.stop_reasons(), b
        # the frame resumes after the break (issue 31): its graph up to the break (the
        # nested helper inlined) and its resume function, each compiled once - a number
        # that changes per call (time.time()) makes the resume function eager instead of
        # recompiling per value
        fns = [c["function"] for c in cdynamo._support.compiles]
        assert fns == [fn.__name__, f"__resume_{fn.__name__}_at_{_break_line(fn)}"], fns


@pytest.mark.parametrize("fn", BREAKERS, ids=lambda f: f.__name__)
def test_graph_break_fullgraph_raises(fn, capsys):
    x = torch.randn(4, 6)
    cdynamo.reset()
    opt = cdynamo.optimize(fn, fullgraph=True)
    with pytest.raises(cdynamo.Unsupported) as exc:
        opt(x)
    cdynamo.reset()
    # the same reason as the non-fullgraph break
    cdynamo.optimize(fn)(x)
    reason = cdynamo._support.breaks[0]["reason"]
    msg = str(exc.value)
    assert reason in msg, (reason, msg)
    assert exc.value.code == cdynamo._support.breaks[0]["code"]
    assert f"{os.path.basename(__file__)}:{_break_line(fn)}" in msg, msg


def test_inplace_mutation_of_input():
    def f(x):
        y = _nested_helper(x)
        x.add_(1)
        return y + x

    x1 = torch.randn(4, 6)
    x2 = x1.clone()
    expected = f(x1)
    opt = cdynamo.optimize(f)
    got = opt(x2)
    assert_same(expected, got, transcendental=True)
    torch.testing.assert_close(x2, x1, rtol=0, atol=0)  # mutated exactly like eager
    for _ in range(2):
        expected = f(x1)
        got = opt(x2)
        assert_same(expected, got, transcendental=True)
        torch.testing.assert_close(x2, x1, rtol=0, atol=0)
    st = cdynamo.stats()   # in-place ops are functionalized: one graph, x written back
    assert st["graph_breaks"] == 0, (st, cdynamo._support.breaks)
    assert st["frames_compiled"] == 1, st


@pytest.mark.parametrize("op", ["add_", "iadd", "setitem", "mul_out"])
def test_inplace_ops_on_input(op):
    def f(x):
        y = x * 2
        if op == "add_":
            x.add_(y)
        elif op == "iadd":
            x += y
        elif op == "setitem":
            x[0] = 0.0
        else:
            torch.mul(y, 3, out=x)
        return x + 1, y

    a = torch.randn(4, 6)
    b = a.clone()
    expected = f(a)
    got = cdynamo.optimize(f)(b)
    assert_same(expected, got)
    torch.testing.assert_close(b, a, rtol=0, atol=0)


def test_inplace_on_local_tensor_gives_eager_result():
    def f(x):
        y = x * 2
        y.mul_(3)
        y += 1
        return y
    a = torch.randn(4, 6)
    assert_same(f(a), cdynamo.optimize(f)(a))


def test_broken_frame_not_retraced():
    def f(x):
        y = x * 2
        if y.sum() > 0:
            return y
        return -y
    opt = cdynamo.optimize(f)
    for _ in range(3):
        assert_same(f(X), opt(X))
    st = cdynamo.stats()
    assert st["graph_breaks"] == 1, st
    assert len(cdynamo._support.breaks) == 1


def test_explain_reports_break():
    out = cdynamo.explain(_break_item)(X)
    assert out.graph_break_count >= 1
    assert out.break_reasons
    assert_same(_break_item(X), out.out, transcendental=True)


def test_explain_one_graph():
    def f(x):
        return torch.relu(x) @ x.transpose(0, 1)
    out = cdynamo.explain(f)(X)
    assert out.graph_count == 1 and out.graph_break_count == 0
    assert out.op_count >= 2


def _make_closure_helper():
    k = 2.0
    w = torch.ones(6)

    def helper(x):
        return x * k + w

    def rebind(new_k, new_w):
        nonlocal k, w
        k, w = new_k, new_w
    return helper, rebind


_closure_helper, _rebind_closure = _make_closure_helper()


def _calls_closure_helper(x):
    return _closure_helper(x) + 1


def test_inlined_function_closure_cells_are_guarded():
    # Regression: the cells of an inlined function were read unguarded, so
    # rebinding them after compiling kept returning the old values.
    opt = cdynamo.optimize(_calls_closure_helper)
    assert_same(_calls_closure_helper(X), opt(X))
    _rebind_closure(5.0, torch.zeros(6))
    try:
        assert_same(_calls_closure_helper(X), opt(X))
        st = cdynamo.stats()
        assert st["recompiles"] == 1 and st["graph_breaks"] == 0, st
    finally:
        _rebind_closure(2.0, torch.ones(6))
