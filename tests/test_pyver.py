"""Constructs whose bytecode differs between Python 3.11, 3.12 and 3.13, traced in one graph on
every version (csrc/pyver/: the opcode tables and the semantic ops the tracer runs).

3.12 inlines comprehensions (PEP 709: LOAD_FAST_AND_CLEAR), has BINARY_SLICE / STORE_SLICE,
RETURN_CONST, LOAD_SUPER_ATTR, CALL_INTRINSIC_1, LOAD_ATTR's method bit and COMPARE_OP's
oparg >> 4; 3.13 has CALL_KW, TO_BOOL, LOAD_FAST_LOAD_FAST / STORE_FAST_STORE_FAST /
STORE_FAST_LOAD_FAST, SET_FUNCTION_ATTRIBUTE, LOAD_FAST on cells for closures, CONVERT_VALUE /
FORMAT_SIMPLE / FORMAT_WITH_SPEC and the call protocol's NULL above the callable. Each
function runs compiled and is compared with eager, with one graph and no break.
"""
import dis
import sys

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from cdynamo import _support

X = torch.linspace(-2, 2, 12).reshape(3, 4)


def one_graph():
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["fallbacks"] == 0, (st, _support.breaks)
    assert st["frames_compiled"] == 1, (st, _support.breaks)


def check(fn, *args):
    cdynamo.reset()
    opt = cdynamo.optimize(fn)
    for _ in range(2):
        got, want = opt(*args), fn(*args)
        assert type(got) is type(want)
        if isinstance(want, torch.Tensor):
            torch.testing.assert_close(got, want)
        elif isinstance(want, (list, tuple)):
            assert len(got) == len(want)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w) if isinstance(w, torch.Tensor) else None
                assert isinstance(w, torch.Tensor) or g == w
        else:
            assert got == want
    one_graph()


def test_list_comprehension():          # 3.12+: inlined, LOAD_FAST_AND_CLEAR
    def f(x):
        parts = [x * i for i in range(3)]
        return sum(parts) + len([1 for _ in parts])
    check(f, X)


def test_comprehension_variable_shadows_an_argument():
    def f(x, i):
        ys = [x + i for i in range(2)]
        return ys[0] * ys[1] + i        # i is the argument again after the comprehension
    check(f, X, 5)


def test_comprehension_variable_unbound_after():
    def f(x):
        ys = {k: x * k for k in (1, 2)}
        return ys[1] + ys[2]
    check(f, X)


def test_nested_comprehension_and_generator_expression():
    def f(x):
        rows = [[x[i, j] * 2 for j in range(2)] for i in range(2)]
        return torch.stack([torch.stack(r) for r in rows]) + sum(v for v in (1, 2))
    check(f, X)


def test_slices_load_and_store():       # 3.12+: BINARY_SLICE / STORE_SLICE
    def f(x, n):
        y = x[1:n] * 2
        z = x.clone()
        z[0:1] = y[:1]
        return y, z[:, 1:3]
    check(f, X, 3)


def test_slice_inplace_store_back():    # x[a:b] += v: the slice form of the store-back pattern
    def f(x):
        y = x.clone()
        y[1:3] += 1.0
        y[0] *= 2.0
        return y
    check(f, X)


def test_return_const_and_keywords():   # RETURN_CONST; CALL_KW (3.13) / KW_NAMES (3.11, 3.12)
    def g(x, *, scale=1.0, bias=0.0):
        return x * scale + bias

    def f(x, flag):
        if flag is None:
            return None
        return F.softmax(g(x, scale=2.0, bias=1.0), dim=-1)
    check(f, X, 1)


def test_super_method_call():           # 3.12+: LOAD_SUPER_ATTR
    class Base(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x)

    class Child(Base):
        def forward(self, x):
            return super().forward(x) * 2 + super().forward(-x)
    check(Child(), X)


def test_closures_and_lambdas():        # 3.13: LOAD_FAST on a cell, SET_FUNCTION_ATTRIBUTE
    def f(x, k):
        def scaled(y, s=2.0):
            return y * s + k
        add = lambda y: y + k  # noqa: E731
        return add(scaled(x)), scaled(x, 3.0)
    check(f, X, 1.5)


def test_truth_tests_and_compares():    # 3.13: TO_BOOL, COMPARE_OP's bool bit
    def f(x, n, items):
        out = x
        if n > 2 and items:
            out = out + 1
        if not items or n == 7:
            out = out - 1
        return out * (2 if n >= 3 else 3)
    check(f, X, 3, [1])


def test_superinstructions_and_swaps():  # 3.13: LOAD_FAST_LOAD_FAST, STORE_FAST_STORE_FAST
    def f(x, y):
        a, b = y, x
        a, b = b * 2, a + 1
        return a - b
    check(f, X, X + 1)


def test_fstrings_in_traced_code():      # 3.13: CONVERT_VALUE, FORMAT_SIMPLE, FORMAT_WITH_SPEC
    def f(x, name):
        key = f"{name!r}:{len(name):>3}{name}"
        d = {key: x}
        return d[f"{name!r}:{len(name):>3}{name}"] + 1
    check(f, X, "ab")


def test_unary_positive_and_list_to_tuple():   # 3.12+: CALL_INTRINSIC_1 5 and 6
    def f(x, xs):
        t = (*xs, 3)
        return +x * t[-1] + t[0]
    check(f, X, [1, 2])


def test_star_args_call():               # CALL_FUNCTION_EX's callable and NULL on each version
    def g(a, b, scale=1.0):
        return (a - b) * scale

    def f(x):
        args = (x, x * 2)
        kw = {"scale": 3.0}
        return g(*args, **kw)
    check(f, X)


def test_for_loop_exit_skips_end_for():
    def f(x, ns):
        acc = x
        for n in ns:
            acc = acc + n
        for i in range(2):
            acc = acc * 2
        return acc
    check(f, X, [1, 2, 3])


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.12's opcodes")
def test_the_functions_use_the_new_opcodes():
    """The tests above do exercise what they name on this version."""
    seen = set()
    todo = [fn.__code__ for fn in (test_list_comprehension, test_slices_load_and_store,
                                   test_return_const_and_keywords,
                                   test_super_method_call, test_closures_and_lambdas,
                                   test_truth_tests_and_compares, test_superinstructions_and_swaps,
                                   test_fstrings_in_traced_code)]
    while todo:
        c = todo.pop()
        seen |= {i.opname for i in dis.get_instructions(c)}
        todo.extend(k for k in c.co_consts if hasattr(k, "co_code"))
    want = {"LOAD_FAST_AND_CLEAR", "BINARY_SLICE", "STORE_SLICE", "LOAD_SUPER_ATTR"}
    if sys.version_info >= (3, 13):
        want |= {"CALL_KW", "TO_BOOL", "LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST",
                 "SET_FUNCTION_ATTRIBUTE", "CONVERT_VALUE", "FORMAT_WITH_SPEC", "FORMAT_SIMPLE"}
    assert want <= seen, want - seen


def test_frame_path_releases_the_frame():
    """A cache hit that runs the transformed code instead of the frame releases the frame (from
    3.12 the hook must: pyver/pycompat.h's cdy_pc_frame_discard): the arguments' references
    come back, nothing grows."""
    def g(x, o, *rest):          # *args: no direct call, every hit takes the frame path
        return x + 1
    cdynamo.reset()
    opt = cdynamo.optimize(g)
    x, o = torch.randn(8), object()
    for _ in range(3):
        opt(x, o)
    rx, ro = sys.getrefcount(x), sys.getrefcount(o)
    for _ in range(2000):
        opt(x, o, 1, 2)
    assert (sys.getrefcount(x), sys.getrefcount(o)) == (rx, ro)
    st = cdynamo.stats()
    assert st["cache_hits"] >= 2000 and st["direct_calls"] == 0, st


def test_frame_path_across_stack_chunks():
    """Hits at every depth of a deep Python recursion: some frames open a new chunk of the
    thread's frame stack, which releasing them must free (3.12)."""
    def leaf(x, *, k=1.0):
        return x * k + 1
    cdynamo.reset()
    opt = cdynamo.optimize(leaf)
    x = torch.randn(4)

    def down(n):
        if n == 0:
            return opt(x)
        a = b = c = d = e = f = n  # noqa: F841  (a bigger frame moves the chunk boundaries)
        return down(n - 1)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)
    try:
        for depth in range(0, 2000, 7):
            torch.testing.assert_close(down(depth), x + 1)
    finally:
        sys.setrecursionlimit(old)
    assert cdynamo.stats()["cache_hits"] >= 280
