"""The instruction-list assembler (csrc/pyver/asm.c): code object -> instructions -> code object.

Decoding then encoding must give the same code object (instructions with their EXTENDED_ARG
prefixes and caches, positions, exception table, stack size) for real code: every function of
several stdlib and torch.nn modules. Rewritten lists (NOPs inserted, so that every jump, handler
and location moves, and jumps need EXTENDED_ARG) must encode to code that runs the same.
"""
import collections
import dis
import functools
import importlib
import inspect
import json
import sys

import pytest
import torch

from cdynamo import _C

MODULES = ["json.encoder", "json.decoder", "collections", "functools", "dataclasses", "inspect",
           "typing", "argparse", "re._compiler", "enum", "ast", "os", "textwrap",
           "torch.nn.modules.module", "torch.nn.modules.linear", "torch.nn.modules.conv",
           "torch.nn.modules.activation", "torch.nn.modules.transformer", "torch.nn.functional",
           "torch._tensor"]


def module_codes(name):
    mod = importlib.import_module(name)
    todo = []
    for obj in vars(mod).values():
        if inspect.isfunction(obj) and obj.__module__ == mod.__name__:
            todo.append(obj.__code__)
        elif inspect.isclass(obj) and obj.__module__ == mod.__name__:
            todo.extend(v.__code__ for v in vars(obj).values() if inspect.isfunction(v))
    out = []
    while todo:
        co = todo.pop()
        out.append(co)
        todo.extend(c for c in co.co_consts if inspect.iscode(c))
    return out


def differences(a, b):
    d = [f for f in ("co_code", "co_exceptiontable", "co_stacksize") if getattr(a, f) != getattr(b, f)]
    if list(a.co_positions()) != list(b.co_positions()):
        d.append("co_positions")
    return d


@pytest.mark.parametrize("name", MODULES)
def test_round_trip_is_identical(name):
    codes = module_codes(name)
    assert len(codes) > 5
    bad = {}
    for co in codes:
        new = _C.asm_encode(_C.asm_decode(co), co)
        d = differences(co, new)
        if d:
            bad[co.co_qualname] = d
    assert not bad, bad


def insert_nops(ins, at, n):
    """The instruction list with n NOPs before index `at` (they take the position and handler of
    the instruction before them); targets and handlers at or after `at` move by n."""
    def moved(i):
        return i + n if i >= at else i
    out = [(op, arg, moved(t) if t >= 0 else t, *pos, moved(h) if h >= 0 else h, dep, lasti)
           for op, arg, t, *pos, h, dep, lasti in
           ((x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9]) for x in ins)]
    prev = out[at - 1]
    nop = ("NOP", 0, -1, prev[3], prev[4], prev[5], prev[6], prev[7], prev[8], prev[9])
    return out[:at] + [nop] * n + out[at:]


def rewritten(fn, n=300):
    """fn with n NOPs in the middle of its code: every jump across the middle needs an
    EXTENDED_ARG, handlers and locations move."""
    co = fn.__code__
    ins = _C.asm_decode(co)
    new = _C.asm_encode(insert_nops(ins, len(ins) // 2, n), co)
    assert len(new.co_code) >= len(co.co_code) + 2 * n
    out = type(fn)(new, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    out.__kwdefaults__ = fn.__kwdefaults__
    return out


def loops(n):
    acc = []
    for i in range(n):
        if i % 3 == 0:
            continue
        while len(acc) < i:
            acc.append(i * 2)
        if i > 40:
            break
    return acc, [v + 1 for v in acc if v % 2 == 0], {k: k * k for k in range(5)}


def handlers(x):
    out = []
    for v in (x, 0, "a", None):
        try:
            out.append(10 / v)
        except ZeroDivisionError:
            out.append("zero")
        except TypeError as e:
            out.append(type(e).__name__)
        finally:
            out.append("f")
    with open(__file__) as f:
        out.append(len(f.readline()) > 0)
    return out


def gen(n):
    for i in range(n):
        if i % 2:
            yield i
    yield from range(3)


def calls(a, *args, k=2, **kw):
    d = dict(kw, z=k)
    s = sorted(args, key=lambda v: -v)
    return functools.reduce(lambda p, q: p + q, s, a), d, max(a, k, key=abs), f"{a!r:>5}{k}"


@pytest.mark.parametrize("fn,args", [(loops, (60,)), (handlers, (4.0,)), (calls, (1, 5, 3, 9)),
                                     (json.dumps, ({"a": [1, 2.5, None]},))],
                         ids=["loops", "handlers", "calls", "json.dumps"])
def test_rewritten_code_runs_the_same(fn, args):
    new = rewritten(fn)
    assert new(*args) == fn(*args)


def test_rewritten_generator_runs_the_same():
    assert list(rewritten(gen)(9)) == list(gen(9))


def test_rewritten_torch_module_forward():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0,
                                             batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    want = layer(x)
    cls = type(layer)
    orig = cls.forward
    try:
        cls.forward = rewritten(orig)
        got = layer(x)
    finally:
        cls.forward = orig
    torch.testing.assert_close(got, want)


def test_jump_direction_is_chosen_by_the_target():
    """A JUMP_FORWARD whose target lies behind it is encoded as JUMP_BACKWARD."""
    def f(xs):
        n = 0
        for x in xs:
            n += x
        return n
    ins = _C.asm_decode(f.__code__)
    back = [i for i, x in enumerate(ins) if x[0] == "JUMP_BACKWARD"]
    assert back
    swapped = [("JUMP_FORWARD",) + x[1:] if i in back else x for i, x in enumerate(ins)]
    new = _C.asm_encode(swapped, f.__code__)
    assert new.co_code == f.__code__.co_code


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.11 has backward conditional jumps")
def test_conditional_jump_backward_is_rejected():
    def f(x):
        if x:
            return 1
        return 2
    ins = _C.asm_decode(f.__code__)
    j = next(i for i, x in enumerate(ins) if x[0] == "POP_JUMP_IF_FALSE")
    bad = list(ins)
    bad[j] = bad[j][:2] + (0,) + bad[j][3:]
    with pytest.raises(ValueError, match="cannot jump backward"):
        _C.asm_encode(bad, f.__code__)


def test_inconsistent_stack_is_rejected():
    def f(x):
        return x
    ins = _C.asm_decode(f.__code__)
    r = next(i for i, x in enumerate(ins) if x[0] == "RETURN_VALUE")
    underflow = ins[:r] + [("POP_TOP",) + ins[r][1:]] * 3 + ins[r:]
    with pytest.raises(ValueError, match="underflow"):
        _C.asm_encode(underflow, f.__code__)


def test_replace_keywords_and_stack_size():
    """Fields come from the template, overridden by keywords; co_stacksize is computed."""
    def f(a, b):
        return (a, b, a, b)
    ins = _C.asm_decode(f.__code__)
    new = _C.asm_encode(ins, f.__code__, co_name="g", co_qualname="g")
    assert new.co_name == "g" and new.co_stacksize == f.__code__.co_stacksize
    assert new.co_varnames == f.__code__.co_varnames


def test_positions_with_long_and_missing_forms():
    """Every location form: short, one-line, long (columns past 127, several lines), no column,
    no position."""
    def f(x):
        y = (x +
             1)
        return y
    ins = _C.asm_decode(f.__code__)
    line = f.__code__.co_firstlineno
    forms = [(line + 1, line + 3, 200, 300), (line + 2, line + 2, -1, -1), (-1, -1, -1, -1),
             (line + 1, line + 1, 5, 9), (line + 2, line + 2, 90, 100)]
    out = [x[:3] + forms[i % len(forms)] + x[7:] for i, x in enumerate(ins)]
    new = _C.asm_encode(out, f.__code__)
    got = [p for p in _C.asm_decode(new)]
    assert [g[3:7] for g in got] == [o[3:7] for o in out]
    assert new.co_code == f.__code__.co_code
    assert f(2) == type(f)(new, f.__globals__)(2)
