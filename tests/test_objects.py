"""Plain Python objects and idioms of HuggingFace models in traced code: torch.finfo/iinfo,
a Tensor method read as an attribute, attributes stored and read back in one trace,
`key in mapping` with a CONTAINS guard, zero-argument super(), a user __getitem__.
Each test compares with eager and asserts one graph with no graph break."""
from collections.abc import MutableMapping

import pytest
import torch

import cdynamo
from cdynamo import _support


def one_graph(expect_frames=1):
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["fallbacks"] == 0, (st, _support.breaks)
    assert st["frames_compiled"] == expect_frames, st
    return st


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_finfo_min_folds(dtype):
    def f(x):
        return torch.where(x > 0, x, torch.finfo(x.dtype).min)

    x = torch.randn(4, 8).to(dtype)
    torch.testing.assert_close(cdynamo.optimize(f)(x), f(x))
    one_graph()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_iinfo_max_folds(dtype):
    def f(x):
        return torch.clamp(x, max=torch.iinfo(x.dtype).max - 1) + 0

    x = torch.randint(0, 100, (16,)).to(dtype)
    torch.testing.assert_close(cdynamo.optimize(f)(x), f(x))
    one_graph()


def test_tensor_method_read_as_attribute():
    def f(x, shape):
        return x.transpose(1, 2).reshape(*shape, -1) * 2

    x = torch.randn(2, 3, 4, 5)
    opt = cdynamo.optimize(f)
    torch.testing.assert_close(opt(x, (2, 4)), f(x, (2, 4)))
    torch.testing.assert_close(opt(x, (2, 4)), f(x, (2, 4)))
    one_graph()


class Box:
    pass


def test_stored_attribute_read_back():
    def f(o, x):
        o.scale = x.dtype   # a new attribute: the real object has none while tracing
        o.count = 3
        return x.to(o.scale) * o.count

    o = Box()
    x = torch.randn(5)
    out = cdynamo.optimize(f)(o, x)
    torch.testing.assert_close(out, x * 3)
    assert o.scale == torch.float32 and o.count == 3   # the stores are replayed
    one_graph()


class Registry(MutableMapping):
    """Like transformers' AttentionInterface: a class-wide mapping and a local one."""
    _global_mapping = {"a": 1}

    def __init__(self):
        self._local_mapping = {}

    def __getitem__(self, key):
        if key in self._local_mapping:
            return self._local_mapping[key]
        return self._global_mapping[key]

    def __setitem__(self, key, value):
        self._local_mapping.update({key: value})

    def __delitem__(self, key):
        del self._local_mapping[key]

    def __iter__(self):
        return iter({**self._global_mapping, **self._local_mapping})

    def __len__(self):
        return len(self._global_mapping.keys() | self._local_mapping.keys())


REG = Registry()


def test_in_mapping_guarded_and_recompiles():
    def f(x):
        if "b" in REG:
            return x + 1
        return x - 1

    x = torch.randn(6)
    opt = cdynamo.optimize(f)
    torch.testing.assert_close(opt(x), x - 1)
    torch.testing.assert_close(opt(x), x - 1)
    st = one_graph()
    assert st["recompiles"] == 0
    REG["b"] = 2
    try:
        torch.testing.assert_close(opt(x), x + 1)   # the CONTAINS guard fails: recompile
    finally:
        del REG["b"]
    assert cdynamo.stats()["recompiles"] == 1
    torch.testing.assert_close(opt(x), x - 1)


def test_in_plain_dict_attribute():
    class Holder:
        def __init__(self):
            self.table = {object(): 1}   # keys that are not constants: the dict is a plain object

    h = Holder()
    key = next(iter(h.table))

    def f(x):
        return x * 2 if "missing" in h.table else x * 3

    x = torch.randn(3)
    torch.testing.assert_close(cdynamo.optimize(f)(x), x * 3)
    one_graph()
    assert key in h.table


class Base:
    def scale(self, x):
        return x * 2


class Child(Base):
    def scale(self, x):
        return super().scale(x) + 1


def test_zero_argument_super():
    def f(c, x):
        return c.scale(x)

    x = torch.randn(7)
    torch.testing.assert_close(cdynamo.optimize(f)(Child(), x), x * 2 + 1)
    one_graph()


class Table:
    def __init__(self, w):
        self.w = w

    def __getitem__(self, k):
        return self.w * k


def test_user_getitem_inlined():
    def f(t, x):
        return x + t[3]

    x = torch.randn(4)
    opt = cdynamo.optimize(f)
    torch.testing.assert_close(opt(Table(2.0), x), x + 6.0)
    one_graph()


def test_getattr_mapping_get_through_super():
    class Interface(Registry):
        def get_interface(self, name, default):
            if name not in self:
                return default
            return super().get(name, default)

    reg = Interface()

    def f(x):
        return x * reg.get_interface("a", 5)

    x = torch.randn(3)
    torch.testing.assert_close(cdynamo.optimize(f)(x), x * 1)
    one_graph()


class Flags:
    def __init__(self):
        self.flags = {0: False}


def test_dict_item_store_replayed():
    def f(c, x):
        c.flags[1] = True
        c.flags[0] = c.flags.get(1)
        return x * 2 if c.flags[0] else x

    x = torch.randn(5)
    opt = cdynamo.optimize(f)
    c = Flags()
    torch.testing.assert_close(opt(c, x), x * 2)
    assert c.flags == {0: True, 1: True}   # the stores are done after the graph
    one_graph()
    c2 = Flags()   # different keys on the second object: guarded
    c2.flags = {0: False, 1: False, 2: 0}
    torch.testing.assert_close(opt(c2, x), x * 2)
    assert c2.flags == {0: True, 1: True, 2: 0}


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)])

    def forward(self, x):
        if type(self).__name__ != "Scaled":   # type(obj) and a class attribute
            return x
        return self.layer[-1](self.layer[1](self.layer[0](x)))


def test_type_of_object_and_module_list_index():
    torch.manual_seed(0)
    m = Scaled().eval()
    x = torch.randn(3, 4)
    with torch.no_grad():
        expected = m(x)
        opt = cdynamo.optimize(m)
        torch.testing.assert_close(opt(x), expected)
        one_graph()
        m.layer.append(torch.nn.Linear(4, 5))   # layer[-1] is another module now: guarded
        torch.testing.assert_close(opt(x), m(x))
    assert opt(x).shape == (3, 5)
