"""Exceptions raised and caught inside traced code under dynamic shapes (issue 32, Gemma-2's
attention registry: `Mapping.get` catching the KeyError of a `MutableMapping.__getitem__`):
a caught exception keeps the frame's symbolic sizes symbolic (a sweep compiles twice) and
pins only the ints the raise could depend on (the raising frame's stack and locals), so the
path taken at other sizes is eager's; an exception that leaves the frame pins every size."""
import collections.abc

import pytest
import torch

import cdynamo
from conftest import sweep_compiles, assert_same


class Registry(collections.abc.MutableMapping):
    """transformers' GeneralInterface: a class-wide mapping and a local one."""
    _global = {"relu": torch.relu}

    def __init__(self):
        self._local = {}

    def __getitem__(self, key):
        if key in self._local:
            return self._local[key]
        return self._global[key]

    def __setitem__(self, key, value):
        self._local[key] = value

    def __delitem__(self, key):
        del self._local[key]

    def __iter__(self):
        return iter({**self._global, **self._local})

    def __len__(self):
        return len(self._global) + len(self._local)


REG = Registry()


def _default(x):
    return x * 2


def test_caught_key_error_in_a_callee_keeps_sizes_symbolic():
    def f(x):
        n = x.shape[0]   # read before the raise
        fn = REG.get("eager", _default)   # Mapping.get: try self[key] except KeyError
        return fn(x).reshape(n, -1)[:, :3] + n

    assert sweep_compiles(f, lambda n: (torch.randn(n, 8),), [4, 5, 6, 9, 13, 4]) == 2
    assert cdynamo.stats()["fallbacks"] == 0


def test_caught_key_error_then_found_key():
    def f(x):
        n = x.shape[1]
        a = REG.get("eager", _default)
        b = REG.get("relu", _default)
        return a(x)[:, : n - 1] + b(x)[:, 1:] + n

    assert sweep_compiles(f, lambda n: (torch.randn(3, n),), [4, 5, 7, 11]) == 2


TABLE = [10, 20, 30, 40, 50]
BY_SIZE = {3: 1.5, 5: 2.5}


def test_index_error_on_a_size_follows_the_size():
    def f(x):
        try:
            v = TABLE[x.shape[0]]
        except IndexError:
            v = -1
        return x * v

    # sizes past the table's end raise, the others do not: each result is eager's
    sweep_compiles(f, lambda n: (torch.randn(n, 2),), [2, 3, 7, 8, 4, 9, 2])


def test_key_error_on_a_size_follows_the_size():
    def lookup(d, k):
        return d[k]

    def f(x):
        n = x.shape[0]
        try:
            s = lookup(BY_SIZE, n)
        except KeyError:
            s = 0.25
        return x * s

    sweep_compiles(f, lambda n: (torch.randn(n, 2),), [3, 4, 5, 6, 3, 7, 5])


def test_key_error_on_an_int_argument_follows_the_int():
    def f(x, k):
        try:
            s = BY_SIZE[k]
        except KeyError:
            s = 0.5
        return x * s + k

    x = torch.randn(4)
    sweep_compiles(f, lambda k: (x, k), [3, 4, 5, 6, 7, 3, 5])


def test_caught_error_with_a_size_in_the_handler():
    def f(x):
        n = x.shape[-1]
        try:
            w = {}["w"]
        except KeyError as e:
            w = len(e.args) + n
        return x[..., : n - 1] * w

    assert sweep_compiles(f, lambda n: (torch.randn(2, n),), [4, 5, 6, 8]) == 2


def test_exception_leaving_the_frame_after_size_reads_is_eagers():
    def f(x):
        n = x.shape[0]
        y = x[: n - 1] * 2
        return y + BY_SIZE[n]

    opt = cdynamo.optimize(f)
    with torch.no_grad():
        for n in (3, 5, 4, 3, 6, 5):
            if n in BY_SIZE:
                assert_same(f(torch.ones(n, 2)), opt(torch.ones(n, 2)))
            else:
                with pytest.raises(KeyError):
                    opt(torch.ones(n, 2))


def test_caught_key_error_then_the_registry_gains_the_key():
    reg = Registry()

    def f(x, r):
        return r.get("gelu", _default)(x) + x.shape[0]

    opt = cdynamo.optimize(f)
    with torch.no_grad():
        for n in (3, 4, 5):
            x = torch.randn(n)
            assert_same(f(x, reg), opt(x, reg))
        reg["gelu"] = torch.nn.functional.gelu
        x = torch.randn(6)
        assert_same(f(x, reg), opt(x, reg))


def _use_registry(registry):
    """transformers' use_experts_implementation: a class decorator whose forward, installed
    on the class, looks the implementation up in a registry held by its closure."""
    def wrap(cls):
        original = cls.forward

        def forward(self, *args):
            impl = self.impl
            if impl != "eager" and impl not in registry:
                raise KeyError(impl)
            return registry.get(impl, original)(self, *args)
        cls.forward = forward
        return cls
    return wrap


class ExpertsRegistry(Registry):
    _global = {"double": lambda self, x: (x @ self.w) * 2}


CLOSURE_REG = ExpertsRegistry()


@_use_registry(CLOSURE_REG)
class Experts(torch.nn.Module):
    def __init__(self, impl):
        super().__init__()
        self.impl = impl
        self.w = torch.nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        return x @ self.w


class Block(torch.nn.Module):
    def __init__(self, impl):
        super().__init__()
        self.experts = Experts(impl)

    def forward(self, x):
        return self.experts(x) + 1


def test_registry_in_a_class_forwards_closure_is_read_through_a_source():
    """The registry of a forward reached through its module's class (no source of its own
    before: `in` stopped the trace) is read as module.forward.__func__.__closure__[i]:
    one graph, and a key registered later is seen (the CONTAINS guard recompiles)."""
    m = Block("double").eval()
    x = torch.randn(3, 8)
    with torch.no_grad():
        opt = cdynamo.optimize(m)
        assert_same(m(x), opt(x))
        assert_same(m(x), opt(x))
        st = cdynamo.stats()
        assert st["graph_breaks"] == 0 and st["fallbacks"] == 0 and st["frames_compiled"] == 1, st
        m.experts.impl = "scaled"
        CLOSURE_REG["scaled"] = lambda self, x: x * 3
        try:
            assert_same(m(x), opt(x))
        finally:
            del CLOSURE_REG["scaled"]
        m.experts.impl = "eager"
        assert_same(m(x), opt(x))
    assert cdynamo.stats()["graph_breaks"] == 0
