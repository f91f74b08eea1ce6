"""Issue 28, the trace-failure protocol: every way a trace stops names a code of one
table (csrc/trace/reasons.def); a step that fails without a reason, a trace with no
return value and an invalid graph are recorded internal errors, never a crash (item 3);
every frame that falls back is a recorded break in explain (item 21).  Tests match
reason codes, not message text."""
import dis
import os
import re

import pytest
import torch

import cdynamo
from cdynamo import _C, _support

from conftest import assert_same, check_raises

HERE = os.path.abspath(__file__)
CSRC = os.path.join(os.path.dirname(HERE), "..", "csrc")
CATEGORIES = {"unsupported", "user_error", "fallback", "limit", "internal", "skip"}


def codes():
    return [b["code"] for b in _support.breaks]


def line_of(fn, text):
    """The line of fn's source that contains text."""
    import inspect
    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, l in enumerate(src) if text in l)


# --------------------------------------------------------------------------- the table

def test_reason_table_is_well_formed():
    table = cdynamo.stop_reasons()
    assert len(table) > 100
    for code, (cat, tmpl) in table.items():
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", code), code
        assert cat in CATEGORIES, (code, cat)
        assert tmpl, code
    assert table["STEP_FAILED"][0] == "internal" and table["NO_RETURN"][0] == "internal"
    assert table["TORCH_RAISED"][0] == "fallback" and table["NAME_ERROR"][0] == "user_error"


def _stop_calls():
    """(file, line, text) of every cdy_tr_stop / cdy_tr_stop_exc call in csrc/."""
    out = []
    for root, _, files in os.walk(CSRC):
        for f in files:
            if not f.endswith(".c"):
                continue
            path = os.path.join(root, f)
            src = open(path).read()
            for m in re.finditer(r"\bcdy_tr_stop(?:_exc)?\(", src):
                end = src.index(";", m.end())
                out.append((f, src.count("\n", 0, m.start()) + 1, src[m.start():end]))
    return out


def test_every_stop_names_a_code_of_the_table():
    table = cdynamo.stop_reasons()
    calls = _stop_calls()
    assert len(calls) > 150
    for f, line, text in calls:
        m = re.match(r"cdy_tr_stop(?:_exc)?\(\s*[^,()]+,\s*([A-Z][A-Z0-9_]*)\s*([,)])", text)
        assert m, f"{f}:{line}: a stop must name a code of reasons.def: {text}"
        assert m.group(1) in table, f"{f}:{line}: unknown code {m.group(1)}"
        # no reason text at call sites: the template is the table's (arguments only)
        rest = text[m.end():].lstrip()
        assert not rest.startswith('"'), f"{f}:{line}: reason text at a call site: {text}"
        assert not re.search(r'"[^"]*%[^"]*"', text), f"{f}:{line}: a format at a call site"


def test_every_code_of_the_table_is_used():
    """No dead codes: each code is named outside the table, in C (a stop, CDY_TR_CHECK,
    CDY_R_CODE) or in the Python layer (the SKIP codes the hook records)."""
    sources = []
    for root in (CSRC, os.path.join(os.path.dirname(HERE), "..", "python", "cdynamo")):
        for r, _, files in os.walk(root):
            sources += [open(os.path.join(r, f)).read() for f in files
                        if f.endswith((".c", ".h", ".def", ".py")) and f != "reasons.def"]
    text = "\n".join(sources)
    dead = [c for c in cdynamo.stop_reasons()
            if not re.search(r"(?<![A-Za-z0-9_])(CDY_R_)?" + c + r"(?![A-Za-z0-9_])", text)]
    assert not dead, f"codes of reasons.def no code uses: {dead}"


# --------------------------------------------------------------------------- categories

def prints(x):
    y = x * 2
    print("", end="")
    return y + 1


def test_unsupported_code_in_explain_and_fullgraph():
    x = torch.randn(5)
    e = cdynamo.explain(prints)(x)
    assert_same(prints(x), e.out)
    assert e.graph_break_count == 1
    b = e.break_reasons[0]
    assert (b.code, b.category) == ("PRINT", "unsupported")
    assert b.location == f"{HERE}:{line_of(prints, 'print(')}"
    assert "[PRINT]" in str(e)
    cdynamo.reset()
    with pytest.raises(cdynamo.Unsupported) as exc:
        cdynamo.optimize(prints, fullgraph=True)(x)
    assert exc.value.code == "PRINT"


def name_error(x):
    y = x + 1
    return y + undefined_name_of_issue28  # noqa: F821


def test_user_error_is_a_recorded_break():
    check_raises(name_error, torch.randn(3))
    assert codes() == ["NAME_ERROR"]
    assert _support.breaks[0]["category"] == "user_error"
    assert _support.breaks[0]["line"] == line_of(name_error, "undefined_name")
    assert cdynamo.stats()["graph_breaks"] == 1


def _recurse(x, n):
    return x if n == 0 else _recurse(x + 1, n - 1)


def deep(x):
    return _recurse(x * 2, 60)


def test_limit_code():
    x = torch.randn(3)
    e = cdynamo.explain(deep)(x)
    assert_same(deep(x), e.out)
    assert e.break_reasons[0].code == "INLINE_TOO_DEEP"
    assert e.break_reasons[0].category == "limit"


def two_ops(x):
    y = x + 1
    return y * 2


@pytest.mark.parametrize("kind,code", [(1, "STEP_FAILED"), (2, "NO_RETURN"), (3, "GRAPH_INVALID")],
                         ids=["step", "no_return", "graph"])
def test_internal_errors_are_recorded_stops(kind, code):
    """A step that fails without recording a stop, a trace that ends with no return
    value, a graph that fails its check: each an INTERNAL stop with the user's
    FILE:LINE; the frame runs eagerly with eager's values (no crash)."""
    x = torch.randn(4)
    _C._inject_trace_fault(kind, dis.opmap["BINARY_OP"])
    try:
        e = cdynamo.explain(two_ops)(x)
    finally:
        _C._inject_trace_fault(0)
    assert_same(two_ops(x), e.out)
    assert e.graph_count == 0 and e.graph_break_count == 1
    b = e.break_reasons[0]
    assert (b.code, b.category) == (code, "internal")
    assert b.filename == HERE and b.line in (line_of(two_ops, "x + 1"), line_of(two_ops, "y * 2"))
    if kind == 1:
        assert "BINARY_OP" in b.reason
    # the fault gone, the function compiles
    cdynamo.reset()
    assert cdynamo.explain(two_ops)(x).graph_count == 1


# --------------------------------------------------------------------------- item 3

class _H:
    def helper(self, a0, *a):
        return a0 * 2 + len(a)

    def kw(self, a0, *a, **k):
        return a0 * 2 + len(a) + sum(k.values())


class _M(torch.nn.Module):
    def forward(self, a0, *a):
        return a0 - len(a)


_CALLS = {
    "bound_global": "m(y, {args})",
    "method_of_object": "h.helper(y, {args})",
    "star_args": "m(y, *({args},))",
    "kwargs": "mk(y, {args}, **{kwargs})",
    "module": "mod(y, {args})",
    "folded": "y * max({args})",
}


def _make(call, n):
    args = ", ".join(str(i) for i in range(1, n))
    kwargs = "{" + ", ".join(f"'k{i}': {i}" for i in range(n)) + "}"
    src = f"def f(x):\n    y = x + 1\n    return {call.format(args=args, kwargs=kwargs)}\n"
    g = {"m": _H().helper, "mk": _H().kw, "h": _H(), "mod": _M(), "torch": torch}
    exec(compile(src, f"<item3 {n}>", "exec"), g)
    return g["f"]


@pytest.mark.parametrize("n", [31, 32, 33, 64])
@pytest.mark.parametrize("kind", list(_CALLS))
def test_item3_calls_with_many_arguments(kind, n):
    """Item 3: m = H().helper in a global, m(y, 1, ..., 31) after a tensor op crashed
    (a path returned failure without a stop); every call shape with 31..64 arguments
    now traces into one graph with eager's values."""
    f = _make(_CALLS[kind], n)
    x = torch.randn(3)
    opt = cdynamo.optimize(f)
    for _ in range(2):
        assert_same(f(x), opt(x))
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["frames_compiled"] == 1, (st, _support.breaks)


def test_item3_torch_op_with_too_many_arguments_is_a_recorded_limit():
    def f(x):
        y = x + 1
        return torch.add(y, 1, *range(40))
    check_raises(f, torch.randn(3))
    assert codes() == ["OP_TOO_MANY_ARGS"]


# --------------------------------------------------------------------------- item 21

def normal(x):
    return torch.distributions.Normal(0, 1).log_prob(x)


def repeat(x):
    y = x + 1
    return torch.repeat_interleave(torch.tensor([1, 2])) + y.sum()


def close(x):
    y = x + 1
    return torch.allclose(y, y), y


@pytest.mark.parametrize("fn,code,text", [(normal, "CONSTRUCT", "Normal("),
                                          (repeat, "TORCH_RAISED", "repeat_interleave"),
                                          (close, "TORCH_RAISED", "allclose")],
                         ids=["normal", "repeat_interleave", "allclose"])
def test_item21_fallback_is_a_recorded_break(fn, code, text):
    """A frame that falls back after a tracing error (torch raised on the fakes) is a
    break in explain with its code and the user's FILE:LINE, counted."""
    x = torch.randn(3)
    e = cdynamo.explain(fn)(x)
    assert_same(fn(x), e.out)
    assert e.graph_break_count == 1, e
    b = e.break_reasons[0]
    assert b.code == code and b.location == f"{HERE}:{line_of(fn, text)}", b
    if fn is normal:   # a break at a call: the frame resumes after it (issue 31)
        assert fn.__name__ not in [f.function for f in e.eager_frames], str(e)
    else:
        assert [f.code for f in e.eager_frames] == [code]
    assert cdynamo.stats()["graph_breaks"] == 1


def meta_item(x):
    y = x + 1
    m = torch.empty(3, device="meta")
    return y + m.sum().item()


def test_item21_item_on_a_meta_tensor():
    with pytest.raises(RuntimeError):
        cdynamo.explain(meta_item)(torch.randn(3))
    assert codes() == ["NEEDS_DATA"]
    assert _support.breaks[0]["line"] == line_of(meta_item, ".item()")


def _helper_that_breaks(x):
    print("", end="")
    return x + 1


def outer(x):
    y = x * 2
    return _helper_that_breaks(y) - 1


def test_explain_accounts_for_inner_frames_run_eagerly():
    x = torch.randn(3)
    e = cdynamo.explain(outer)(x)
    assert_same(outer(x), e.out)
    got = {(f.function, f.code) for f in e.eager_frames}
    # outer resumes after the call (issue 31): its graph, the helper eager, its resume
    assert got == {("_helper_that_breaks", "PRINT")}, got
    assert e.graph_count == 2 and [b.code for b in e.break_reasons] == ["PRINT"], str(e)
    assert "Eager Frames:" in str(e)
