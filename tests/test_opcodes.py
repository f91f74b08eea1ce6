"""The C tracer's opcode table must agree with the running interpreter's opcodes.

Needs cdynamo._C.opcode_table(), expected to return a mapping {opname: opcode number} of the
opcodes the tracer handles for this Python version. Skipped while the C core does not expose it.
"""
import dis
import sys

import pytest

import cdynamo

HAS_TABLE = hasattr(cdynamo._C, "opcode_table")
pytestmark = pytest.mark.skipif(
    not HAS_TABLE, reason="cdynamo._C.opcode_table() is not exposed by the C core yet")


def table():
    t = cdynamo._C.opcode_table()
    return dict(t)


def test_opcode_numbers_match_interpreter():
    t = table()
    assert t, "empty opcode table"
    wrong = {name: (num, dis.opmap.get(name)) for name, num in t.items()
             if dis.opmap.get(name) != num}
    assert not wrong, f"opcode numbers differ from Python {sys.version_info[:2]}: {wrong}"


def test_core_opcodes_handled():
    t = table()
    core = {"LOAD_FAST", "STORE_FAST", "LOAD_CONST", "LOAD_GLOBAL", "LOAD_ATTR",
            "BINARY_OP", "COMPARE_OP", "CALL", "RETURN_VALUE", "BUILD_TUPLE", "POP_TOP"}
    core &= set(dis.opmap)
    assert core <= set(t), core - set(t)


def test_no_duplicate_numbers():
    t = table()
    assert len(set(t.values())) == len(t)
