"""CDYNAMO_LOGS topics: bytecode, output_code, guards, graph_breaks (read at import, so each
test runs a fresh interpreter), plus in-process set_log_topics with capfd."""
import re

import torch

import cdynamo
from conftest import run_python

SCRIPT = """
import torch, cdynamo
def f(x, y):
    return torch.relu(x * y + 1.0), 3
g = cdynamo.optimize(f)
a, b = torch.randn(4, 5), torch.randn(5)
torch.testing.assert_close(g(a, b)[0], torch.relu(a * b + 1.0))
torch.testing.assert_close(g(a, b)[0], torch.relu(a * b + 1.0))
def h(x):
    print("side effect")
    return x + 1
cdynamo.config.resume_after_break = False   # h's break runs its whole frame eagerly
cdynamo.optimize(h)(torch.randn(3))
print("DONE")
"""
F_LINE = SCRIPT.splitlines().index("def f(x, y):") + 1
H_LINE = SCRIPT.splitlines().index("def h(x):") + 1


def run(topics, tmp_path):
    r = run_python(SCRIPT, {"CDYNAMO_LOGS": topics}, cache_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "DONE" in r.stdout
    return r.stderr.splitlines()


def topic_lines(lines, topic):
    prefix = f"[cdynamo:{topic}] "
    return [l[len(prefix):] for l in lines if l.startswith(prefix)]


def test_bytecode_log(tmp_path):
    lines = run("bytecode", tmp_path)
    body = topic_lines(lines, "bytecode")
    assert body, lines
    # every cdynamo line is a bytecode line
    assert all(l.startswith("[cdynamo:bytecode] ") for l in lines if l.startswith("[cdynamo:"))
    text = "\n".join(body)
    assert f"ORIGINAL BYTECODE f <string> line {F_LINE}" in body
    assert f"MODIFIED BYTECODE f <string> line {F_LINE}" in body
    orig = text.split("MODIFIED BYTECODE")[0]
    mod = text.split("MODIFIED BYTECODE")[1]
    assert "LOAD_ATTR" in orig and "(relu)" in orig and "BINARY_OP" in orig
    # dis shows the call protocol's NULL before the callable (3.11, 3.12) or after it (3.13)
    assert re.search(r"LOAD_GLOBAL\s+\d+ \((NULL \+ __compiled_fn_\d+|__compiled_fn_\d+ \+ NULL)\)",
                     mod), mod
    assert "(relu)" not in mod and "RETURN_VALUE" in mod
    # one compile of f -> exactly one pair; h graph-breaks and is not rewritten
    assert text.count("ORIGINAL BYTECODE") == 1
    assert "BYTECODE h " not in text


def test_output_code_log(tmp_path):
    lines = run("output_code", tmp_path)
    body = topic_lines(lines, "output_code")
    text = "\n".join(body)
    assert all(l.startswith("[cdynamo:output_code] ") for l in lines if l.startswith("[cdynamo:"))
    assert "void kernel_0(" in text
    assert re.search(r"void kernel_0\(const float \*restrict in_ptr0, const float \*restrict "
                     r"in_ptr1, float \*restrict out_ptr0\)", text), text
    assert "typedef __INT64_TYPE__ int64_t;" in text and "#define NTHREADS" in text
    # the C is printed once, for the one compile
    assert text.count("void kernel_0(") == 1


def test_guards_log(tmp_path):
    lines = run("guards", tmp_path)
    body = topic_lines(lines, "guards")
    assert f"GUARDS for f (<string>:{F_LINE}):" in body
    assert ("TENSOR_MATCH: x: Tensor, torch.float32, device=cpu, requires_grad=False, "
            "size=[4, 5], stride=[5, 1]") in body
    assert ("TENSOR_MATCH: y: Tensor, torch.float32, device=cpu, requires_grad=False, "
            "size=[5], stride=[1]") in body
    assert any(l.startswith("ID_MATCH: G['torch']") for l in body), body


def test_graph_breaks_log(tmp_path):
    lines = run("graph_breaks", tmp_path)
    body = topic_lines(lines, "graph_breaks")
    # the line saying why the frame does not resume after the break, then the break
    assert len(body) == 2, body
    assert body[0] == (f"cannot resume after the graph break in h at <string>:{H_LINE + 1}: "
                       "config.resume_after_break is off")
    assert body[1].startswith(f"Graph break in h at <string>:{H_LINE + 1}: ")
    assert "[PRINT] " in body[1] and "(no resume: config.resume_after_break is off)" in body[1]


def test_stages_log(tmp_path):
    """CDYNAMO_LOGS=stages: the graph after each pass of the pipeline (pipeline.c), in
    order, then the kernels after scheduling; only for the frame that compiles."""
    body = topic_lines(run("stages", tmp_path), "stages")
    text = "\n".join(body)
    heads = [l.split(": ", 1)[1] for l in body if l.startswith("__compiled_fn_")]
    assert heads == ["graph after pack_linear (0 rewrites):", "graph after channels_last "
                     "(0 rewrites):", "graph after attention (0 rewrites):",
                     "graph after linear_relu (0 rewrites):", "kernels after scheduling:"], heads
    assert "relu(" in text and "kernel_0:" in text and "fuses:" in text


def test_all_topics_and_unknown(tmp_path):
    lines = run("all", tmp_path)
    topics = {m.group(1) for l in lines for m in [re.match(r"\[cdynamo:(\w+)\] ", l)] if m}
    assert {"bytecode", "output_code", "guards", "graph_breaks"} <= topics
    lines = run("bytecode , guards", tmp_path / "2")
    topics = {m.group(1) for l in lines for m in [re.match(r"\[cdynamo:(\w+)\] ", l)] if m}
    assert topics == {"bytecode", "guards"}


def test_logs_silent_on_cache_hit(capfd):
    f = cdynamo.optimize(lambda x: x * 2)
    x = torch.randn(3)
    f(x)
    capfd.readouterr()
    cdynamo._C.set_log_topics({"bytecode", "output_code", "guards", "recompiles"})
    try:
        f(x)
        f(x)
    finally:
        cdynamo._C.set_log_topics(set())
    assert "[cdynamo:" not in capfd.readouterr().err


def test_set_log_topics_in_process(capfd):
    cdynamo._C.set_log_topics({"output_code"})
    try:
        cdynamo.optimize(lambda x: torch.sigmoid(x) - 1)(torch.randn(3, dtype=torch.float64))
    finally:
        cdynamo._C.set_log_topics(set())
    err = capfd.readouterr().err
    assert "[cdynamo:output_code] " in err
    assert "double" in err and "void kernel_0(" in err
    cdynamo.optimize(lambda x: torch.sigmoid(x) + 1)(torch.randn(3))
    assert "[cdynamo:" not in capfd.readouterr().err
