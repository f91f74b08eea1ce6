"""The per-call path of a compiled training graph (issue 34, runtime/train_call.c): the
frame's call, _Graph's forward and backward and the backward node's apply are C, so a
training step runs no Python of cdynamo's or torch.autograd.function's; what it computes is
test_training.py's (eager's losses and gradients)."""
import sys

import pytest
import torch

import cdynamo
from cdynamo import _autograd, _C


def _python_calls(fn):
    """(file, function) of every Python function call while fn() runs."""
    seen = []

    def prof(frame, event, arg):
        if event == "call":
            seen.append((frame.f_code.co_filename, frame.f_code.co_name))
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def test_training_step_runs_no_python_of_the_function_path():
    m = _mlp()
    x = torch.randn(4, 8)
    f = cdynamo.optimize(lambda x: m(x).relu().sum())
    for _ in range(2):       # compile the forward, then the backward
        m.zero_grad()
        f(x).backward()

    def step():
        m.zero_grad()
        f(x).backward()
    calls = _python_calls(step)
    files = {c[0] for c in calls}
    assert _autograd.__file__ not in files, calls
    assert not any(c[0].endswith("autograd/function.py") for c in calls), calls
    # not even the backward's optimized frame: it returns its graph's outputs as they
    # come, so its guards and graph run without a frame (frame/eval.c direct_call)
    assert [c for c in calls if c[0].startswith("<backward of")] == [], calls
    m2 = _mlp()
    m2(x).relu().sum().backward()
    for p, q in zip(m.parameters(), m2.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)


def test_compiled_callable_is_the_c_apply_bound_to_its_graph():
    m = _mlp()
    f = cdynamo.optimize(lambda x: m(x).sum())
    f(torch.randn(2, 8))
    recs = [r for r in cdynamo._support.compiles if isinstance(r["compiled"], _autograd._Call)]
    assert recs
    c = recs[-1]["compiled"]
    assert c.func is _C._train_apply and isinstance(c.args[0], _autograd.TrainingGraph)
    assert c.calls == c.args[0].calls >= 1
    assert "TrainingGraph" in repr(c)


def test_non_differentiable_outputs_and_none_gradients():
    w = torch.randn(5, requires_grad=True)
    b = torch.randn(5)          # needs no grad: its gradient is None

    def fn(x):
        y = x * w + b
        return y.sum(), y.argmax()
    x = torch.randn(5, requires_grad=True)
    s, i = cdynamo.optimize(fn)(x)
    assert not i.requires_grad and s.requires_grad
    s.backward()
    torch.testing.assert_close(x.grad, w.detach())
    torch.testing.assert_close(w.grad, x.detach())


def test_double_backward_error_names_the_graph():
    x = torch.randn(4, requires_grad=True)
    y = cdynamo.optimize(lambda x: (x.sin() * 2).sum())(x)
    with pytest.raises(RuntimeError, match="compiled training graph.*create_graph"):
        torch.autograd.grad(y, x, create_graph=True)


def test_c_functions_reject_bad_arguments():
    with pytest.raises(TypeError):
        _C._train_forward()
    with pytest.raises(TypeError):
        _C._train_backward()
    with pytest.raises(TypeError):
        _C._train_setup(1)
