"""Objects guarded by type, and the recompile limit counted per nn.Module instance.

An instance of a plain Python class read from an argument (a cache object that a model makes
anew for each call) is guarded by its type; what the trace reads from it has guards of its own:
attributes, hasattr(), len() and truth through its Python __len__. The tests compare with
eager on instances whose state differs, and count compiles."""
import dataclasses
import math
import sys
import warnings

import pytest
import torch

import cdynamo
from cdynamo import _support


class State:
    def __init__(self, scale, items=()):
        self.scale = scale
        self.items = list(items)


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def test_new_object_each_call_reuses_the_entry():
    def f(st, x):
        return x * st.scale + len(st.items)

    opt = cdynamo.optimize(f)
    x = torch.randn(8)
    for _ in range(5):
        st = State(2.0, [1, 2])   # a new object with the same state: no recompile
        torch.testing.assert_close(opt(st, x), f(st, x))
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["recompiles"] == 0, st
    assert st["cache_hits"] == 4, st


def test_object_state_change_recompiles():
    def f(st, x):
        return x * st.scale + len(st.items)

    opt = cdynamo.optimize(f)
    x = torch.randn(8)
    for st in (State(2.0, [1]), State(3.0, [1]), State(2.0, [1, 2, 3]), State(2.0, [1])):
        torch.testing.assert_close(opt(st, x), f(st, x))
    st = cdynamo.stats()
    assert st["recompiles"] == 2 and st["cache_hits"] == 1, st


def test_object_attribute_tensor_is_guarded():
    def f(st, x):
        return x + st.scale

    opt = cdynamo.optimize(f)
    for n in (4, 4, 6):
        st, x = State(torch.randn(n)), torch.randn(n)
        torch.testing.assert_close(opt(st, x), f(st, x))
    assert cdynamo.stats()["recompiles"] == 1


def test_hasattr_absent_then_present():
    def f(st, x):
        if hasattr(st, "bias"):
            return x + st.bias
        return x * st.scale

    opt = cdynamo.optimize(f)
    x = torch.randn(5)
    a = State(2.0)
    torch.testing.assert_close(opt(a, x), f(a, x))
    b = State(2.0)
    b.bias = 10.0
    torch.testing.assert_close(opt(b, x), f(b, x))
    torch.testing.assert_close(opt(State(2.0), x), x * 2.0)
    st = cdynamo.stats()
    assert st["recompiles"] == 1 and st["graph_breaks"] == 0, (st, _support.breaks)


def test_getattr_default_on_absent_attribute():
    def f(st, x):
        return x * getattr(st, "gain", 3.0)

    opt = cdynamo.optimize(f)
    x = torch.randn(5)
    torch.testing.assert_close(opt(State(1.0), x), x * 3.0)
    g = State(1.0)
    g.gain = -1.0
    torch.testing.assert_close(opt(g, x), -x)


def test_len_and_truth_through_python_len():
    def f(s, x):
        if s:
            return x + len(s)
        return x - 1

    opt = cdynamo.optimize(f)
    x = torch.randn(5)
    for n in (3, 3, 0, 5):
        torch.testing.assert_close(opt(Sized(n), x), f(Sized(n), x))
    assert cdynamo.stats()["recompiles"] == 2   # n = 0 and n = 5: each guard on n fails once


def test_identity_of_two_objects_of_one_class_is_guarded():
    def f(a, b, x):
        return x + 1 if a is b else x - 1

    opt = cdynamo.optimize(f)
    x = torch.randn(4)
    s, t = State(1.0), State(1.0)
    torch.testing.assert_close(opt(s, s, x), x + 1)
    torch.testing.assert_close(opt(s, t, x), x - 1)   # `a is b` changed: a SAME guard fails
    torch.testing.assert_close(opt(t, t, x), x + 1)   # the first entry again
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["recompiles"] == 1 and st["cache_hits"] == 1, st


def test_plain_object_is_not_passed_to_torch():
    def f(st, x):
        return torch.add(x, st) if isinstance(st, torch.Tensor) else x * st.scale

    x = torch.randn(3)
    torch.testing.assert_close(cdynamo.optimize(f)(State(4.0), x), x * 4.0)


class Stack(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.ReLU() for _ in range(n)])

    def forward(self, x):
        return x + len(self.layers)


class Pair(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.short, self.long = Stack(2), Stack(3)

    def forward(self, x):
        y = self.short(x)
        print("graph break", end="")   # the submodules' forwards are compiled on their own
        return y, self.long(x)


def test_len_of_module_list_is_guarded(capsys):
    # one entry of Stack.forward must not serve a Stack of another length
    m = Pair()
    x = torch.randn(4)
    got, want = cdynamo.optimize(m)(x), m(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


class Layer(torch.nn.Module):
    def __init__(self, idx):
        super().__init__()
        self.shift = float(idx)   # a float constant per instance (an int would become a symbol)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x)) + self.shift


class Deep(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = torch.nn.ModuleList([Layer(i) for i in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
            print("graph break", end="")   # each layer's forward is a frame of its own
        return x


def test_recompile_limit_counts_per_module_instance(capsys):
    torch.manual_seed(0)
    m = Deep(12).eval()   # 12 entries for Layer.forward: one per shift
    x = torch.randn(2, 8)
    opt = cdynamo.optimize(m)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error")   # no recompile-limit warning
        for _ in range(3):
            torch.testing.assert_close(opt(x), m(x))
    st = cdynamo.stats()
    assert st["frames_compiled"] == 12 and st["recompiles"] == 11, st


def test_accumulated_limit_caps_all_instances(monkeypatch, capsys):
    monkeypatch.setattr(cdynamo.config, "accumulated_cache_size_limit", 4)
    torch.manual_seed(0)
    m = Deep(6).eval()
    x = torch.randn(2, 8)
    with pytest.warns(cdynamo.CdynamoWarning, match="accumulated_cache_size_limit = 4"), \
            torch.no_grad():
        torch.testing.assert_close(cdynamo.optimize(m)(x), m(x))
    assert cdynamo.stats()["frames_compiled"] == 4


def _is_compiling():
    try:
        import torch   # noqa: F811 (a local import of a loaded module: IMPORT_NAME)
        return torch.compiler.is_compiling()
    except Exception:
        return False


def test_import_of_loaded_module_in_traced_code():
    def f(x):
        import torch.nn.functional as F
        from torch import nn   # noqa: F401 (IMPORT_FROM)
        if _is_compiling():   # true under cdynamo, as under torch.compile: libraries take
            return x * 2      # the paths they keep for compilers (transformers does)
        return F.relu(x) + 1

    x = torch.randn(6)
    torch.testing.assert_close(f(x), torch.relu(x) + 1)
    torch.testing.assert_close(cdynamo.optimize(f)(x), x * 2)
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["frames_compiled"] == 1, (st, _support.breaks)


def test_import_of_unloaded_module_is_a_graph_break():
    def f(x):
        import cdynamo_no_such_module_xyz   # noqa: F401
        return x + 1

    with pytest.raises(ModuleNotFoundError):
        cdynamo.optimize(f)(torch.randn(2))
    assert any(b["code"] == "IMPORT_NEW_MODULE" for b in _support.breaks), _support.breaks


def _nest(depth):
    m = torch.nn.Linear(4, 4)
    for _ in range(depth):
        m = torch.nn.Sequential(m)
    return m


def test_deep_module_attribute_chain_is_one_graph():
    # self._modules['0']._modules['0']... ._parameters['weight']: 2 steps a level
    torch.manual_seed(0)
    m = _nest(9).eval()
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(cdynamo.optimize(m)(x), m(x))
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["frames_compiled"] == 1, (st, _support.breaks)


# ---- objects built in the frame and returned (TV_INST: trace/objects.c) ---------------

@dataclasses.dataclass
class Output:
    last: torch.Tensor
    extra: object = None
    note: str = ""


class Counted:
    made = 0

    def __init__(self, x):
        Counted.made += 1
        self.x = x


def test_returned_dataclass_is_built_after_the_graph():
    def f(x):
        y = torch.relu(x) * 2
        return Output(last=y + 1, extra=(y, 3), note="n")

    x = torch.randn(4, 4)
    got, want = cdynamo.optimize(f)(x), f(x)
    assert type(got) is Output and got.note == "n" and got.extra[1] == 3
    torch.testing.assert_close(got.last, want.last)
    torch.testing.assert_close(got.extra[0], want.extra[0])
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["frames_compiled"] == 1, (st, _support.breaks)


def test_built_object_inside_a_returned_tuple_with_kwargs_dict():
    def f(x):
        kw = {"extra": x.sum()}
        o = Output(x * 3, **kw)
        return o, isinstance(o, Output), 7

    x = torch.randn(5)
    got, want = cdynamo.optimize(f)(x), f(x)
    torch.testing.assert_close(got[0].last, want[0].last)
    torch.testing.assert_close(got[0].extra, want[0].extra)
    assert got[1:] == (True, 7)
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["frames_compiled"] == 1, (st, _support.breaks)


def test_built_object_returned_twice_is_one_object():
    def f(x):
        o = Output(x + 1)
        return o, o

    x = torch.randn(3)
    got = cdynamo.optimize(f)(x)
    assert got[0] is got[1]
    torch.testing.assert_close(got[0].last, x + 1)
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["frames_compiled"] == 1, (st, _support.breaks)


def test_built_object_used_in_the_frame_is_traced():
    def f(x):
        o = Output(x + 1)
        o.note = "changed"
        return o.last * 2, o.note

    x = torch.randn(3)
    got = cdynamo.optimize(f)(x)
    torch.testing.assert_close(got[0], (x + 1) * 2)
    assert got[1] == "changed"
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["frames_compiled"] == 1, (st, _support.breaks)


def test_built_object_not_returned_still_runs_its_init():
    def f(x):
        Counted(x)   # __init__ has a side effect: the frame must not drop it
        return x + 1

    before = Counted.made
    x = torch.randn(3)
    opt = cdynamo.optimize(f)
    for _ in range(3):
        torch.testing.assert_close(opt(x), x + 1)
    assert Counted.made == before + 3
    # the store into the class runs type.__setattr__: the frame runs eagerly
    assert any(b["code"] == "STORE_ATTR_SETATTR" for b in _support.breaks), _support.breaks


def test_imported_module_attribute_is_guarded(monkeypatch):
    import types
    mod = types.ModuleType("cdynamo_test_imported_mod")
    mod.scale = 2.0
    monkeypatch.setitem(sys.modules, mod.__name__, mod)

    def f(x):
        import cdynamo_test_imported_mod as m   # noqa: F401 (in sys.modules: a lookup)
        import math
        return x * m.scale + math.e

    x = torch.randn(4)
    opt = cdynamo.optimize(f)
    torch.testing.assert_close(opt(x), x * 2.0 + math.e)
    monkeypatch.setattr(mod, "scale", -1.0)   # the attribute read is guarded: a recompile
    torch.testing.assert_close(opt(x), -x + math.e)
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["recompiles"] == 1, (st, _support.breaks)


def test_len_of_built_object_without_len_raises_as_eager():
    def f(x):
        o = Output(x)
        return x + len(o)

    with pytest.raises(TypeError):   # eager raises: Output has no len()
        f(torch.randn(2))
    with pytest.raises(TypeError):
        cdynamo.optimize(f)(torch.randn(2))
    assert any(b["code"] == "OBJ_NO_LEN" for b in _support.breaks)


def test_sum_over_generator_of_tensors():
    def f(x):
        y = x + 1
        return sum(y * i for i in range(3)) + sum([x, y], torch.ones(3))

    x = torch.randn(3)
    torch.testing.assert_close(cdynamo.optimize(f)(x), f(x))
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["frames_compiled"] == 1, (st, _support.breaks)


def _with_defaults(func):
    def wrapper(x, *args, **kwargs):   # a decorator that reads the wrapped function's code
        if "scale" in func.__code__.co_varnames:
            kwargs["scale"] = 2.0
        return func(x, *args, **kwargs)
    return wrapper


@_with_defaults
def _scaled(x, scale=1.0):
    return x * scale


def test_code_of_a_closure_function_is_read():
    def f(x):
        return _scaled(x) + 1

    x = torch.randn(4)
    torch.testing.assert_close(cdynamo.optimize(f)(x), x * 2.0 + 1)
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0, (st, _support.breaks)


class Nest(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Sequential(Layer(1), Layer(2))
        self.b = torch.nn.Sequential(Layer(3), Layer(4))

    def forward(self, x):
        return self.b(self.a(x))


def test_deep_guard_failure_names_its_source(capfd):
    # guards that share their first steps reuse the objects those steps read; a later
    # guard that fails still reports its own source
    torch.manual_seed(0)
    m = Nest().eval()
    x = torch.randn(2, 8)
    opt = cdynamo.optimize(m)
    with torch.no_grad():
        torch.testing.assert_close(opt(x), m(x))
        m.b[1].shift = 7.0   # the same modules, one constant changed deep inside
        capfd.readouterr()
        cdynamo._C.set_log_topics({"recompiles"})
        try:
            torch.testing.assert_close(opt(x), m(x))
        finally:
            cdynamo._C.set_log_topics(set())
    err = capfd.readouterr().err
    assert "self._modules['b']._modules['1'].shift'. expected 4.0, actual 7.0" in err, err
    assert cdynamo.stats()["recompiles"] == 1


def test_forward_replaced_on_the_class_after_optimize():
    """An optimized module calls its class's forward as it is at the call: a forward
    replaced on the class after optimize (a function: compiled; a staticmethod or other
    descriptor: bound and called) gives eager's result, as torch.compile's module does."""
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x) + 1

    m = Block()
    om = cdynamo.optimize(m)
    x = torch.randn(2, 4)
    for _ in range(3):
        torch.testing.assert_close(om(x), m(x))
    Block.forward = lambda self, x: self.lin(x) * 2
    before = cdynamo.stats()["frames_compiled"]
    for _ in range(3):
        torch.testing.assert_close(om(x), m(x))
    assert cdynamo.stats()["frames_compiled"] == before + 1
    Block.forward = staticmethod(lambda x: x - 5)
    torch.testing.assert_close(om(x), x - 5)
    del Block.forward                     # nn.Module's own forward: eager's error
    with pytest.raises(NotImplementedError):
        m(x)
    with pytest.raises(NotImplementedError):
        om(x)
