"""A cat of plain pieces (inputs, views, extern results) is copied by one kernel by rows of
its output, each row written whole (compiler/views.c cg_emit_cat_rows); a column sum of the
cat's result over its leading dims (the qkv linear's bias gradient in attention's backward:
the q/k/v gradients gathered by a cat, then g.reshape(R, 3 * D).sum(0)) is computed by that
kernel (reduce.c cg_red_cat_sum): its separate kernel is gone.  Values as eager's, in every
float dtype; the sums' accuracy that of the separate sum kernel (double accumulators, the
rows in order on one thread, in fixed ranges combined in order on several)."""
import pytest
import torch
import torch.nn as nn

import cdynamo
import cdynamo._support as support


def _last(name):
    return [r for r in support.compiles if r["function"] == name][-1]


def _kernels(src):
    return src.count("CDY_EXPORT void kernel_")


def _pieces(dt, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(4, 6, 3, 5, generator=g).to(dt)
    b = torch.randn(4, 3, 6, 5, generator=g).to(dt)     # read as b.transpose(1, 2)
    c = torch.randn(4, 6, 5, 2, generator=g).to(dt)     # read as c.transpose(2, 3)
    return a, b, c


def cat_bias(a, b, c):
    y = torch.cat([a, b.transpose(1, 2), c.transpose(2, 3)], 2)
    return y, y.reshape(24, 40).sum(0)


def cat_bias_rows_of_one_dim(a, b, c):
    y = torch.cat([a, b.transpose(1, 2), c.transpose(2, 3)], 2)
    return y, y.sum(0)


def cat_sum_over_cat_dim(a, b, c):
    y = torch.cat([a, b.transpose(1, 2), c.transpose(2, 3)], 2)
    return y, y.sum((0, 1, 2))


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fn", [cat_bias, cat_bias_rows_of_one_dim])
def test_cat_computes_the_column_sum_of_its_rows(fn, dt, threads, monkeypatch):
    """cat then a sum over the rows of its leading dims: one kernel writes the cat and its
    column sum (the sum's kernel is gone), on one thread or with the rows in fixed ranges
    across 4; values as eager's (bfloat16 / float16: summed in double, rounded once)."""
    monkeypatch.setattr(cdynamo.config, "num_threads", threads)
    cdynamo.reset()
    args = _pieces(dt)
    want = fn(*args)
    got = cdynamo.optimize(fn)(*args)
    tol = {} if dt in (torch.float32, torch.float64) else {"rtol": 1e-2, "atol": 1e-2}
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride()
        torch.testing.assert_close(g, w, **tol)
    rec = _last(fn.__name__)
    assert "the column sum" in rec["ir_post"] and "computed here" in rec["ir_post"], rec["ir_post"]
    assert _kernels(rec["source"]) == 1, rec["source"]


def test_cat_column_sum_is_the_separate_sums_bits_on_one_thread(monkeypatch):
    """float32 on one thread: the rows added in order in double, as the sum kernel does
    alone (a sum of the cat's copy compiled without the cat gives the same bits)."""
    monkeypatch.setattr(cdynamo.config, "num_threads", 1)
    a, b, c = (t * 1e3 for t in _pieces(torch.float32, seed=5))
    y, s = cdynamo.optimize(cat_bias)(a, b, c)
    alone = cdynamo.optimize(lambda t: t.reshape(24, 40).sum(0))(y.clone())
    assert torch.equal(s, alone)
    torch.testing.assert_close(s, y.double().reshape(24, 40).sum(0).float())


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
def test_cat_column_sum_in_ranges_across_threads(dt, monkeypatch):
    """A cat big enough for several threads (4): the rows cut into 4 fixed ranges, each
    range's partial sums in double added in range order; values as eager's and the same
    on every call."""
    monkeypatch.setattr(cdynamo.config, "num_threads", 4)
    cdynamo.reset()
    g = torch.Generator().manual_seed(2)
    a = torch.randn(8, 130, 2, 33, generator=g).to(dt)
    b = torch.randn(8, 2, 130, 33, generator=g).to(dt)
    c = torch.randn(8, 130, 33, 1, generator=g).to(dt)

    def f(a, b, c):
        y = torch.cat([a, b.transpose(1, 2), c.transpose(2, 3)], 2)
        return y, y.reshape(1040, 165).sum(0)
    want = f(a, b, c)
    fc = cdynamo.optimize(f)
    got = fc(a, b, c)
    tol = {} if dt == torch.float32 else {"rtol": 1e-2, "atol": 1e-2}
    for x, w in zip(got, want):
        torch.testing.assert_close(x, w, **tol)
    assert torch.equal(fc(a, b, c)[1], got[1])
    rec = _last("f")
    assert "4 ranges); the column sum" in rec["ir_post"], rec["ir_post"]
    assert _kernels(rec["source"]) == 1, rec["source"]


def test_cat_sum_over_the_cat_dim_stays_its_own_kernel():
    """A sum that also reduces the cat dim (its columns are not the rows' elements) keeps its
    own kernel; values as eager's."""
    cdynamo.reset()
    args = _pieces(torch.float32)
    want = cat_sum_over_cat_dim(*args)
    got = cdynamo.optimize(cat_sum_over_cat_dim)(*args)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    rec = _last("cat_sum_over_cat_dim")
    assert "the column sum" not in rec["ir_post"], rec["ir_post"]
    assert _kernels(rec["source"]) == 2, rec["source"]


def test_attention_qkv_bias_gradient_in_the_cat_kernel():
    """Self-attention with one qkv linear (q, k, v split from its output): the backward
    gathers the three gradients with a cat whose kernel also computes the qkv bias's
    gradient; gradients as eager's, one kernel fewer than cat and sum apart."""
    torch.manual_seed(0)

    class Attn(nn.Module):
        def __init__(self, d=32, h=4):
            super().__init__()
            self.h, self.qkv, self.out = h, nn.Linear(d, 3 * d), nn.Linear(d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).split(d, dim=2)
            q, k, v = (z.reshape(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
            a = torch.softmax(q @ k.transpose(-1, -2) * 0.25, -1) @ v
            return self.out(a.transpose(1, 2).reshape(b, t, d))

    m = Attn()
    mc = Attn()
    mc.load_state_dict(m.state_dict())
    x = torch.randn(2, 16, 32)
    m(x).pow(2).sum().backward()
    cdynamo.optimize(mc)(x).pow(2).sum().backward()
    for p, q in zip(m.parameters(), mc.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
    rec = _last("backward")
    assert "the column sum" in rec["ir_post"], rec["ir_post"]
    assert any("concat_pieces, sum" in ln for ln in rec["source"].splitlines()
               if ln.startswith("/* fused:")), rec["source"]


@pytest.mark.parametrize("threads", [1, 2])
def test_transformer_stack_backward_kernels(threads, monkeypatch):
    """bench's transformer_stack_train (4 pre-norm blocks, one qkv linear each): each
    block's q/k/v gradients are gathered by one kernel that also computes the qkv bias's
    gradient, so the backward has no kernel summing the [256, 768] cat; with the layer_norm
    row kernels' sums (rows.c cg_row_pick_sums) 25 kernels on one thread, 52 before both;
    the loss and gradients as eager's."""
    from cdynamo import bench
    monkeypatch.setattr(cdynamo.config, "num_threads", threads)
    cdynamo.reset()
    w = [w for w in bench.WORKLOADS if w.name == "transformer_stack_train"][0]
    inputs, params = w.inputs(True), w.train_params()
    want = [t.clone() for t in bench._train_step(w.fn, params)(*inputs)]
    got = bench._train_step(cdynamo.optimize(w.fn), params)(*inputs)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
    src = _last("backward")["source"]
    fused = [ln for ln in src.splitlines() if ln.startswith("/* fused:")]
    assert sum("concat_pieces, sum" in ln for ln in fused) == 4, fused
    assert not any("concat_pieces " in ln for ln in fused), fused   # none without its sum
    if threads == 1:
        assert _kernels(src) == 25, fused


def test_cat_of_few_rows_keeps_a_loop_per_piece_across_threads(monkeypatch):
    """A parallel cat whose dims before the cat dim hold fewer rows than threads (2 rows, 4
    threads) keeps the per-piece loops (every thread has work); values as eager's."""
    monkeypatch.setattr(cdynamo.config, "num_threads", 4)
    cdynamo.reset()
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(2, 3000, 16, generator=g), torch.randn(2, 1000, 16, generator=g)

    def few_rows(a, b):
        return torch.cat([a, b], 1)
    torch.testing.assert_close(cdynamo.optimize(few_rows)(a, b), few_rows(a, b))
    rec = _last("few_rows")
    assert "concat_pieces" in rec["ir_post"] and "by rows" not in rec["ir_post"], rec["ir_post"]
