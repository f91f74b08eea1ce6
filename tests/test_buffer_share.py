"""A pointwise kernel's output written over an input buffer that dies at that kernel
(compiler/share.c, runtime/compiled.c plan_share; issue 34): the output is made as the
dying input's tensor, as torch.compile's wrapper reuses a dead buffer.  Values equal
eager's; no reuse of a buffer still seen through a view, returned, saved for backward, a
graph input, or read at other addresses."""
import torch
import torch.nn.functional as F

import cdynamo

N = 128


def _compiled():
    return cdynamo._support.compiles[-1]["compiled"]


def _run(fn, *args):
    """fn compiled, called twice, results equal eager's; the compiled graph."""
    ref = fn(*[a.clone() for a in args])
    f = cdynamo.optimize(fn)
    f(*[a.clone() for a in args])
    got = f(*args)
    ref = ref if isinstance(ref, tuple) else (ref,)
    got = got if isinstance(got, tuple) else (got,)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)
    return _compiled()


def _inputs():
    torch.manual_seed(0)
    return torch.randn(N, N), torch.randn(N, N) / 12


def test_dead_matmul_results_are_written_in_place():
    # y = x @ w dies at relu: a takes y's tensor; a and b die at the add: c takes one;
    # three 64 KiB tensors alive at the add before, two now
    def f(x, w):
        a = torch.relu(x @ w)
        b = a @ w
        return a + b

    c = _run(f, *_inputs())
    assert len(c.shared_buffers) == 2, c.shared_buffers
    assert c.peak_buffer_bytes == 2 * N * N * 4, c.peak_buffer_bytes
    assert "may reuse dying buffer" in c.ir_post_fusion
    kernel = c.source[c.source.index("CDY_EXPORT void kernel_0("):].splitlines()[0]
    assert "restrict" not in kernel, kernel   # the pair's pointers may alias


def test_returned_result_takes_a_dying_tensor():
    # the returned relu is the dying matmul result's tensor: a new tensor to the caller
    x, w = _inputs()
    f = cdynamo.optimize(lambda x, w: torch.sigmoid(x @ w) * 3)
    r1, r2 = f(x, w), f(x, w)
    assert len(_compiled().shared_buffers) == 1
    assert r1.data_ptr() != r2.data_ptr()
    torch.testing.assert_close(r1, torch.sigmoid(x @ w) * 3)
    torch.testing.assert_close(r2, r1)


def test_no_reuse_of_a_buffer_seen_through_a_live_view():
    # y.t() is read by the matmul after relu(y): relu must not write over y
    def f(x, w):
        y = x @ w
        yt = y.t()
        z = torch.relu(y)
        return z @ yt

    c = _run(f, *_inputs())
    y_buf = [b for b, _ in c.shared_buffers]
    assert c.shared_buffers == () or all(i not in y_buf for _, i in c.shared_buffers)


def test_no_reuse_of_a_buffer_read_at_other_addresses():
    # y + y.t(): y is read at two strides in one kernel
    c = _run(lambda x, w: (lambda y: y + y.t())(x @ w), *_inputs())
    assert c.shared_buffers == (), c.shared_buffers


def test_no_reuse_of_a_broadcast_or_other_meta():
    # a (1, N) row broadcast into (N, N); a float64 result of a float32 one
    def f(x, w):
        r = (x @ w).sum(0, keepdim=True)
        return torch.tanh(r) + x, torch.exp(x @ w).double()

    c = _run(f, *_inputs())
    assert c.shared_buffers == (), c.shared_buffers


def test_no_reuse_of_inputs_or_returned_buffers():
    x, w = _inputs()
    x0 = x.clone()

    def f(x, w):
        y = x @ w
        return y, torch.relu(y), torch.relu(x) + 1

    c = _run(f, x, w)
    assert c.shared_buffers == (), c.shared_buffers
    assert torch.equal(x, x0)


def test_no_reuse_of_a_tensor_saved_for_backward():
    # gelu's input h is saved for its derivative: the forward's gelu must not write
    # over it; gradients equal eager's
    torch.manual_seed(0)
    x = torch.randn(64, 96)
    w1 = torch.randn(96, 128, requires_grad=True)
    w2 = torch.randn(128, 32, requires_grad=True)

    def loss(x):
        h = x @ w1
        return (F.gelu(h) @ w2 * 0.5 + 1).pow(2).mean()

    grads = []
    for fn in (loss, cdynamo.optimize(loss), cdynamo.optimize(loss)):
        w1.grad = w2.grad = None
        fn(x).backward()
        grads.append((w1.grad.clone(), w2.grad.clone()))
    for got in grads[1:]:
        for a, b in zip(got, grads[0]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_backward_reuses_the_dying_output_gradient():
    # an MLP's backward: the GELU derivative's output is written over the dying matmul
    # result (the gradient of the GELU's output); gradients equal eager's
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    x = torch.randn(4, 32, 64)
    loss = lambda x: m(x).pow(2).mean()  # noqa: E731
    grads = []
    for fn in (loss, cdynamo.optimize(loss), cdynamo.optimize(loss)):
        m.zero_grad(set_to_none=True)
        fn(x).backward()
        grads.append([p.grad.clone() for p in m.parameters()])
    for got in grads[1:]:
        for a, b in zip(got, grads[0]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    bw = [e["compiled"] for e in cdynamo._support.compiles
          if e.get("compiled") is not None and hasattr(e["compiled"], "shared_buffers")]
    assert any(g.shared_buffers for g in bw), "no graph reused a dying buffer"
