"""The per-version opcode tables (csrc/pyver/opcodes_3xx.def) agree with the running interpreter.

cdynamo._C.opcode_table() / opcode_info() / stack_effect() / decode() expose the table of the
Python version the extension was built for; every column is checked against `dis`: numbers,
inline cache entries, jump directions and targets, stack effects, and the decoding of real code
(offsets and opargs with EXTENDED_ARG applied).
"""
import dis
import inspect
import sys

import pytest
import torch

import cdynamo
from cdynamo import _C


def test_table_is_this_version():
    assert _C.PY_TABLE_VERSION == sys.version_info[0] * 100 + sys.version_info[1]


def test_opcode_numbers_match_interpreter():
    t = _C.opcode_table()
    assert t, "empty opcode table"
    wrong = {name: (num, dis.opmap.get(name)) for name, num in t.items()
             if dis.opmap.get(name) != num}
    assert not wrong, f"opcode numbers differ from Python {sys.version_info[:2]}: {wrong}"


def real_opcodes():
    """The opcodes code objects can hold after CPython deoptimizes them (co_code)."""
    return {name: num for name, num in dis.opmap.items()
            if num < 256 and not name.startswith("INSTRUMENTED_")}


def test_every_opcode_is_in_the_table():
    missing = set(real_opcodes()) - set(_C.opcode_table())
    assert not missing, f"opcodes of Python {sys.version_info[:2]} missing from the table: {missing}"


def test_core_opcodes_handled():
    t = _C.opcode_table()
    core = {"LOAD_FAST", "STORE_FAST", "LOAD_CONST", "LOAD_GLOBAL", "LOAD_ATTR",
            "BINARY_OP", "COMPARE_OP", "CALL", "RETURN_VALUE", "BUILD_TUPLE", "POP_TOP"}
    assert core <= set(t), core - set(t)


def test_no_duplicate_numbers():
    t = _C.opcode_table()
    assert len(set(t.values())) == len(t)


def cache_entries(name, num):
    c = dis._inline_cache_entries
    return c.get(name, 0) if isinstance(c, dict) else c[num]


def test_inline_caches_match_interpreter():
    wrong = {name: (caches, cache_entries(name, num))
             for name, num, caches, sop, jdir in _C.opcode_info()
             if caches != cache_entries(name, num)}
    assert not wrong, wrong


def test_jump_directions_match_interpreter():
    for name, num, caches, sop, jdir in _C.opcode_info():
        jrel = num in dis.hasjrel
        assert (jdir != 0) == jrel, name
        if jrel:
            assert (jdir < 0) == ("BACKWARD" in name), name


@pytest.mark.parametrize("jump", [False, True])
def test_stack_effects_match_interpreter(jump):
    wrong = []
    for name, num, caches, sop, jdir in _C.opcode_info():
        if name in ("CACHE", "RESERVED", "ENTER_EXECUTOR", "INTERPRETER_EXIT"):
            continue
        opargs = [0, 1, 2, 3, 4, 5, 8, 16, 17, 31, 32, 33, 255, 256, 257, 0x1234]
        for oparg in opargs if num >= dis.HAVE_ARGUMENT else [None]:
            try:
                want = dis.stack_effect(num, oparg, jump=jump)
            except ValueError:
                continue
            got = _C.stack_effect(num, oparg or 0, jump)
            if got != want:
                wrong.append((name, oparg, got, want))
    assert not wrong, wrong


def sample_functions():
    """Functions whose code uses most of what ordinary code compiles to."""
    import torch.nn.functional as F

    def calls(x, y, *args, k=1, **kw):
        z = torch.relu(x * y + 1.0).sum(dim=-1)
        w = F.gelu(x, approximate="tanh")
        d = {"a": x, **kw}
        return z, w, x.view(-1), max(*args, k), d

    def flow(x, n):
        acc = 0
        for i in range(n):
            if i % 2 and x is not None:
                acc += i
            elif not i:
                continue
            else:
                acc -= 1
        while acc > 100:
            acc //= 2
        return acc if acc else -acc

    def comps(xs):
        a = [v * 2 for v in xs if v]
        b = {k: v for k, v in enumerate(xs)}
        c = {v for v in xs}
        return a, b, c, xs[1:3], f"{len(xs)!r:>4} {a}"

    def closures(x):
        def inner(y, s=2):
            return x + y * s
        return inner(1), (lambda q: q + x)(2)

    class K:
        def m(self, v):
            return super().__repr__() + str(v)

    def unpack(t):
        a, *b = t
        (c, d), e = (1, 2), 3
        t[0:2] = [9, 9]
        t[1:2] += [1]
        del t[0]
        return a, b, c, d, e

    def big(x):
        s = 0
        s += x; s += x; s += x; s += x; s += x; s += x; s += x; s += x  # noqa: E702
        return [x] * 300 + list(range(300))

    def exc(x):
        try:
            return 1 / x
        except ZeroDivisionError as e:
            return str(e)
        finally:
            x = None

    def withs(x):
        with torch.no_grad():
            return x + 1

    return [calls, flow, comps, closures, K.m, unpack, big, exc, withs]


def code_objects(fn):
    todo, out = [fn.__code__], []
    while todo:
        co = todo.pop()
        out.append(co)
        todo.extend(c for c in co.co_consts if inspect.iscode(c))
    return out


def dis_instructions(co):
    return [i for i in dis.get_instructions(co) if i.opname not in ("EXTENDED_ARG", "CACHE")]


@pytest.mark.parametrize("fn", sample_functions(), ids=lambda f: f.__qualname__)
def test_decode_matches_dis(fn):
    for co in code_objects(fn):
        ours = _C.decode(co)
        theirs = dis_instructions(co)
        assert [(o, n, a) for o, n, a, j, s in ours] == \
            [(i.offset, i.opname, i.arg or 0) for i in theirs], co.co_name
        for (off, name, arg, jump, sops), ins in zip(ours, theirs):
            assert sops, f"{name} decodes to no semantic op"
            if ins.opcode in dis.hasjrel:
                target = getattr(ins, "jump_target", None)
                assert jump == (ins.argval if target is None else target), (name, off)
            else:
                assert jump is None


def semantic(fn):
    return [s for co in code_objects(fn) for *_, sops in _C.decode(co) for s in sops]


def test_semantic_names_no_raw_call_protocol():
    """The tracer's ops are version-free: no PRECALL, LOAD_METHOD is semantic, jumps are JUMP /
    POP_JUMP_IF_*, 3.13's superinstructions are split."""
    names = {s[0] for f in sample_functions() for s in semantic(f)}
    assert "LOAD_METHOD" in names and "CALL" in names and "POP_JUMP_IF_FALSE" in names
    for raw in ("PRECALL", "LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST", "RETURN_CONST",
                "BINARY_SLICE", "POP_JUMP_FORWARD_IF_FALSE", "JUMP_FORWARD", "CALL_KW"):
        assert raw not in names


def test_for_iter_exit_skips_end_for():
    def loop(xs):
        for v in xs:
            pass
        return 1
    for off, name, arg, jump, sops in _C.decode(loop.__code__):
        if name == "FOR_ITER":
            skip = {11: 0, 12: 1, 13: 2}[sys.version_info[1]]
            assert sops[0][3] == jump + 2 * skip


def test_unhandled_opcode_is_a_graph_break_with_a_code():
    def f(x):
        match x.shape:      # MATCH_SEQUENCE: no tracer handler -> OPCODE stop
            case (n,):
                return x + n
        return x

    e = cdynamo.explain(f)(torch.ones(3))
    assert e.graph_break_count >= 1 or e.eager_frames
    codes = {b.code for b in e.break_reasons} | {f.code for f in e.eager_frames}
    assert "OPCODE" in codes, codes
