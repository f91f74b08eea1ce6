"""The op registry (csrc/ops/ops.def) and the table of torch callables
(csrc/ops/callables.def): one place per op.

Every graph op is one row of ops.def; the layers expand the columns they read
(binding: signature and check; meta: the dtype rule; the compiler: C templates,
reduction variants, flags).  What is left in C code is what one op does that
no column says, so no op is named (CDY_OP_<E>) in more than two C files."""
import operator
import pathlib
import re

import pytest
import torch
import torch.nn.functional as F

import cdynamo

CSRC = pathlib.Path(__file__).resolve().parent.parent / "csrc"
ROW = re.compile(r"^CDY_(PW|RED|NODE)\((\w+), \"(\w+)\"", re.M)


def registry_rows():
    """(row kind, enum, name) of every row of ops.def, in order."""
    return ROW.findall((CSRC / "ops" / "ops.def").read_text())


def test_every_op_is_one_row():
    rows = registry_rows()
    enums = [e for _, e, _ in rows]
    names = [n for _, _, n in rows]
    assert len(rows) > 80
    assert len(set(enums)) == len(enums), "an op has two rows"
    assert len(set(names)) == len(names), "two ops share a name"


def test_no_op_named_in_more_than_two_c_files():
    """Knowledge of one op is its row plus at most two C files (typically the
    builder that makes it and the emitter or pass that reads it); the headers
    (cdynamo.h's contract, ops/ops.h) and the .def tables do not count."""
    sources = {p: p.read_text() for p in CSRC.rglob("*.c")}
    spread = {}
    for _, enum, _ in registry_rows():
        word = re.compile(r"\bCDY_OP_%s\b" % enum)
        files = sorted(str(p.relative_to(CSRC)) for p, text in sources.items()
                       if word.search(text))
        if len(files) > 2:
            spread[enum] = files
    assert not spread, f"ops named in more than two C files: {spread}"


def table():
    cdynamo.optimize(lambda x: x + 1)(torch.ones(2))   # the table resolves at the first trace
    return {entry[0]: entry[1:] for entry in cdynamo._C.callable_table()}


def test_pointwise_ops_and_reductions_are_torch_functions_and_methods():
    """The implicit rows: torch.<name> and Tensor.<name> of every pointwise op and
    reduction of ops.def map to it (names this torch lacks are skipped)."""
    t = table()
    checked = 0
    for kind, enum, name in registry_rows():
        if kind == "NODE":
            continue
        for home in (torch, torch.Tensor):
            fn = getattr(home, name, None)
            if callable(fn):
                assert t[fn][0] == name, (home, name, t[fn])
                checked += 1
    assert checked > 120


@pytest.mark.parametrize("fn, op", [
    (F.relu, "relu"), (operator.floordiv, "floor_divide"), (torch.Tensor.__pow__, "pow"),
    (torch.special.expit, "sigmoid"), (torch.clip, "clamp"), (abs, "abs"),
    (torch.Tensor.divide, "div"), (torch._C._nn.gelu, "gelu")])
def test_other_spellings_of_ops(fn, op):
    assert table()[fn][0] == op


def test_meta_build_and_contiguous_rows():
    t = table()
    op, meta, builders, contiguous = t[torch.cat]
    assert (op, builders, contiguous) == (None, 1, 0) and meta >= 0
    assert t[operator.getitem][2] == 2          # a view, else a gathered load
    assert t[torch.Tensor.float][0] == "float"
    assert t[F.logsigmoid] == (None, -1, 0, 1)
    assert torch.nn.functional.elu not in t    # no row: an extern call
