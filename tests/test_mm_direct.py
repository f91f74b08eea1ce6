"""A static graph's torch.matmul extern called as the mm / bmm it reaches (issue 34,
runtime/mmdirect.c): the same product on the same memory as torch.matmul (torch.equal, same
strides), without torch.matmul's own views (no aten::matmul, expand, _unsafe_view in the
profile); broadcast batches, folds that copy and dims of size 1 keep torch.matmul."""
import pytest
import torch
from torch.profiler import profile, ProfilerActivity

import cdynamo


def _ops(fn, *args):
    """aten op name -> calls while fn(*args) runs once."""
    with profile(activities=[ProfilerActivity.CPU]) as p:
        fn(*args)
    return {e.key: e.count for e in p.key_averages()}


def _stack(*shape, perm=None):
    torch.manual_seed(sum(shape))
    t = torch.randn(*shape)
    return t.permute(*perm) if perm else t


# (a, b, direct): a @ b inside a graph with a kernel on each side
CASES = {
    "mm": (lambda: _stack(24, 40), lambda: _stack(40, 56), "aten::mm"),
    "mm_t": (lambda: _stack(24, 40), lambda: _stack(56, 40).t(), "aten::mm"),
    "fold3": (lambda: _stack(3, 24, 40), lambda: _stack(40, 56), "aten::mm"),
    "fold4": (lambda: _stack(2, 3, 24, 40), lambda: _stack(56, 40).t(), "aten::mm"),
    "fold_rows_t": (lambda: _stack(3, 40, 24).transpose(1, 2), lambda: _stack(40, 56), None),
    "bmm3": (lambda: _stack(3, 24, 40), lambda: _stack(3, 40, 56), "aten::bmm"),
    "bmm4": (lambda: _stack(2, 3, 24, 40), lambda: _stack(2, 3, 56, 40).transpose(-1, -2),
             "aten::bmm"),
    "bmm4_perm": (lambda: _stack(2, 24, 3, 40, perm=(0, 2, 1, 3)), lambda: _stack(2, 3, 40, 56),
                  None),
    "broadcast": (lambda: _stack(3, 24, 40), lambda: _stack(1, 40, 56), None),
    "size1": (lambda: _stack(1, 24, 40), lambda: _stack(1, 40, 56), None),
    "mat_stack": (lambda: _stack(24, 40), lambda: _stack(3, 40, 56), None),
}


def _pair(case):
    fa, fb, _ = CASES[case]
    return fa(), fb()


@pytest.mark.parametrize("case", sorted(CASES))
def test_product_equals_torch_matmul(case):
    a, b = _pair(case)

    def f(x, y):
        return x @ y.relu(), torch.matmul(x, y) * 2.0

    g = cdynamo.optimize(f)
    for _ in range(2):
        got = g(a, b)
        want = f(a, b)
        for o, e in zip(got, want):
            assert torch.equal(o, e)
            assert o.stride() == e.stride()


@pytest.mark.parametrize("case", sorted(CASES))
def test_direct_call_skips_torch_matmul(case):
    a, b = _pair(case)
    direct = CASES[case][2]

    def f(x, y):
        return x @ y.relu() + 1.0

    g = cdynamo.optimize(f)
    g(a, b)
    ops = _ops(g, a, b)
    if direct:
        assert ops.get(direct, 0) == 1, ops
        for name in ("aten::matmul", "aten::expand", "aten::_unsafe_view", "aten::reshape"):
            assert ops.get(name, 0) == 0, (name, ops)
    else:
        assert ops.get("aten::matmul", 0) == 1, ops


def test_operand_needing_grad_keeps_torch_matmul():
    """A view made without the dispatcher has no autograd link: with grad mode on and an
    operand that needs grad, torch.matmul runs (and its gradient is eager's)."""
    a = torch.randn(3, 24, 40, requires_grad=True)
    w = torch.randn(40, 56)

    def f(x, y):
        return torch.matmul(x, y)

    with torch.no_grad():
        g = cdynamo.optimize(f)
        got = g(a, w)
        assert torch.equal(got, f(a, w))
        assert not got.requires_grad
        assert _ops(g, a, w).get("aten::matmul", 0) == 0


def test_training_step_matmuls_go_direct():
    """A training step (issue 34's workload's shapes, smaller): its forward's and backward's
    matmuls of folding stacks run as mm / bmm; losses and gradients are eager's."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 32)
    q0 = torch.randn(2, 4, 16, 8)

    def loss(x, q):
        h = lin(x)
        s = (q @ q.transpose(-1, -2)).softmax(-1) @ q
        return (h @ lin.weight).pow(2).mean() + s.pow(2).mean()

    x = torch.randn(2, 16, 32)
    ref_q = q0.clone().requires_grad_()
    lin.zero_grad()
    loss(x, ref_q).backward()
    want = (ref_q.grad.clone(), lin.weight.grad.clone())
    f = cdynamo.optimize(loss)
    q = q0.clone().requires_grad_()
    for _ in range(3):
        lin.zero_grad()
        q.grad = None
        f(x, q).backward()
    torch.testing.assert_close(q.grad, want[0])
    torch.testing.assert_close(lin.weight.grad, want[1])
    lin.zero_grad()
    q.grad = None
    ops = _ops(lambda: f(x, q).backward())
    assert ops.get("aten::matmul", 0) == 0, ops
    assert ops.get("aten::bmm", 0) >= 6, ops


def test_switch_off_keeps_torch_matmul():
    """_C.set_matmul_direct(False): graphs compiled from then call torch.matmul (A/B)."""
    from cdynamo import _C
    a, b = _pair("bmm4")
    was = _C.set_matmul_direct(False)
    try:
        g = cdynamo.optimize(lambda x, y: x @ y + 1.0)
        got = g(a, b)
        ops = _ops(g, a, b)
    finally:
        _C.set_matmul_direct(was)
    assert was is True
    assert torch.equal(got, a @ b + 1.0)
    assert ops.get("aten::matmul", 0) == 1, ops


def test_training_step_bit_identical_to_torch_matmul():
    """The same training step compiled with and without the direct forms gives bit-identical
    losses and gradients (the backward's matmuls write pool tensors through out=)."""
    from cdynamo import _C
    torch.manual_seed(1)
    from cdynamo.bench import _Block
    block = _Block(d=64, heads=4)   # transformer_stack_train's block, hand-written attention
    x = torch.randn(4, 32, 64)
    params = list(block.parameters())
    runs, counts = [], []
    for on in (False, True):
        cdynamo.reset()
        was = _C.set_matmul_direct(on)
        try:
            f = cdynamo.optimize(lambda x: block(x).pow(2).mean())
            got = []
            for _ in range(3):
                for p in params:
                    p.grad = None
                loss = f(x)
                loss.backward()
                got.append([loss.detach()] + [p.grad.clone() for p in params])
            counts.append(_ops(lambda: f(x).backward()))
        finally:
            _C.set_matmul_direct(was)
        runs.append(got)
    for off, on in zip(*runs[:2]):
        for a, b in zip(off, on):
            assert torch.equal(a, b)
    assert counts[0].get("aten::matmul", 0) >= 10, counts[0]    # forward and backward
    assert counts[1].get("aten::matmul", 0) == 0, counts[1]
