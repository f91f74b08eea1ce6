"""Kernels with runtime sizes (issue 32): one compiled graph serves every size of its
symbolic dims.

cdynamo._C._dyn_test(True) compiles every frame with every dim of its argument tensors
symbolic (as dynamic=True will); the test compiles once at an example size, then calls the
CompiledGraph itself at other sizes (the frame's own guards are dynp's side) and compares
with eager: values (dtype-aware), dtype, sizes and strides, and that nothing recompiled.
What the symbolic path does not cover compiles static (CompiledGraph.symbols is None) and
the dynamic log says why."""
import re

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from cdynamo import _C

SIZES_2D = [(2, 2), (3, 5), (7, 1 + 16), (8, 15), (17, 33), (64, 64), (5, 4099),
            (300, 257)]   # 300 * 257 is above the parallel threshold (CG_PARALLEL_NUMEL)


@pytest.fixture
def dyn():
    _C._dyn_test(True)
    yield
    _C._dyn_test(False)


def _graph():
    return cdynamo._support.compiles[-1]["compiled"]


def _compile(fn, *args):
    """Compile fn at args under the test hook; its CompiledGraph."""
    out = cdynamo.optimize(fn)(*args)
    _same(out, fn(*args))
    return _graph()


def _same(got, want):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.stride() == want.stride()
    if want.dtype == torch.bfloat16:
        torch.testing.assert_close(got.float(), want.float(), atol=1e-2, rtol=1e-2)
    else:
        torch.testing.assert_close(got, want, equal_nan=True)


def _sweep(fn, make, sizes):
    """Compile fn once at make(*sizes[0]), then call its graph at every size."""
    g = _compile(fn, *make(*sizes[0]))
    assert g.symbols, "the graph compiled with static sizes"
    ncompiles = len(cdynamo._support.compiles)
    for s in sizes:
        args = make(*s)
        _same(g(*args), fn(*args))
    assert len(cdynamo._support.compiles) == ncompiles == 1
    return g


def test_pointwise_chain_every_size(dyn):
    def f(x, y):
        return torch.sigmoid(x * 2 + y).tanh() - x.abs()
    g = _sweep(f, lambda n, m: (torch.randn(n, m), torch.randn(n, m)), SIZES_2D)
    assert "cdy_s" in g.source and "n0" in g.source
    assert g.calls == len(SIZES_2D) + 1      # the compiling call, then the sweep


def test_pointwise_broadcast_bias(dyn):
    def f(x, b):
        return torch.relu(x + b) * 0.5
    _sweep(f, lambda n, m: (torch.randn(n, m), torch.randn(m)), SIZES_2D)


def test_pointwise_3d_broadcast_middle(dyn):
    def f(x, y):
        return x * y + 1
    _sweep(f, lambda a, b: (torch.randn(a, 3, b), torch.randn(a, 1, b)),
           [(2, 4), (5, 9), (33, 17), (64, 2)])


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.int64, torch.bfloat16])
def test_pointwise_dtypes(dyn, dtype):
    def f(x, y):
        return torch.where(x > y, x - y, y * 2)
    def make(n, m):
        if dtype.is_floating_point:
            return torch.randn(n, m).to(dtype), torch.randn(n, m).to(dtype)
        return torch.randint(-50, 50, (n, m), dtype=dtype), torch.randint(-50, 50, (n, m), dtype=dtype)
    _sweep(f, make, SIZES_2D)


def test_casts_and_mixed_dtypes(dyn):
    def f(x, i):
        return (x.to(torch.float64) * i).to(torch.float32) + i.to(torch.float32)
    _sweep(f, lambda n, m: (torch.randn(n, m), torch.randint(0, 9, (n, m), dtype=torch.int32)),
           SIZES_2D)


def test_multiple_outputs(dyn):
    def f(x):
        y = x.exp()
        return y, y + x, (y * x).neg()
    _sweep(f, lambda n, m: (torch.randn(n, m),), SIZES_2D)


def test_one_dim_flat_loop_above_threshold(dyn):
    def f(x):
        return x * x + 3
    _sweep(f, lambda n, m: (torch.randn(n * m),), SIZES_2D)


RED_SIZES = SIZES_2D + [(2, 100000), (1000, 48), (4, 32), (9, 16)]   # lanes: multiples of 16


@pytest.mark.parametrize("name,fn", [
    ("row_sum", lambda x: x.sum(-1)),
    ("row_mean_prologue", lambda x: (x * 2 + 1).mean(-1)),
    ("col_mean", lambda x: x.mean(0)),
    ("amax_keepdim_then_add", lambda x: x.amax(-1, keepdim=True) + x),
    ("amin_cols", lambda x: x.amin(0)),
    ("var_rows", lambda x: x.var(-1)),
    ("std_cols_keepdim", lambda x: x.std(0, keepdim=True)),
    ("sum_all", lambda x: x.sum()),
    ("logsumexp_rows", lambda x: torch.logsumexp(x, -1)),
])
def test_reductions_every_size(dyn, name, fn):
    _sweep(fn, lambda n, m: (torch.randn(n, m),), RED_SIZES)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.bfloat16])
def test_reduction_dtypes(dyn, dtype):
    def f(x):
        return x.sum(-1), x.amax(0)
    def make(n, m):
        if dtype.is_floating_point:
            return (torch.randn(n, m).to(dtype),)
        return (torch.randint(-50, 50, (n, m), dtype=dtype),)
    _sweep(f, make, RED_SIZES)


def test_reduction_3d_middle_dim(dyn):
    def f(x):
        return x.sum(1) * 2, x.mean((0, 2), keepdim=True)
    _sweep(f, lambda a, b: (torch.randn(a, 5, b),), [(2, 3), (7, 16), (33, 5), (64, 64)])


@pytest.mark.parametrize("name,fn", [
    ("softmax", lambda x: torch.softmax(x, -1)),
    ("log_softmax_prologue", lambda x: torch.log_softmax(x * 2 - 1, -1)),
    ("softmax_epilogue", lambda x: F.gelu(torch.softmax(x, -1)) + x),
])
def test_softmax_every_size(dyn, name, fn):
    _sweep(fn, lambda n, m: (torch.randn(n, m),), RED_SIZES)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_softmax_dtypes(dyn, dtype):
    _sweep(lambda x: torch.softmax(x, -1), lambda n, m: (torch.randn(n, m).to(dtype),), RED_SIZES)


def test_layer_norm_batch_and_sequence(dyn):
    w, b = torch.randn(48), torch.randn(48)
    def f(x, w, b):
        return torch.relu(F.layer_norm(x, (48,), w, b)) * 2
    g = _sweep(f, lambda n, m: (torch.randn(n, m, 48), w, b),
               [(2, 3), (7, 16), (33, 5), (64, 64), (2, 700)])
    # normalized_shape is a constant (its sizes were read as numbers): those dims specialize
    assert all(dim != 2 for inp, dim in g.symbols if inp == 0)


@pytest.mark.parametrize("name,fn", [
    ("softmax_middle", lambda x: torch.softmax(x, 1)),
    ("log_softmax_first", lambda x: torch.log_softmax(x * 2, 0)),
    ("softmax_first_epilogue", lambda x: torch.softmax(x, 0) * x + 1),
])
def test_softmax_over_a_dim_not_innermost(dyn, name, fn):
    g = _sweep(fn, lambda a, b: (torch.randn(a, 16, b),),
               [(4, 32), (2, 2), (3, 7), (33, 5), (17, 64), (2, 4099), (300, 40)])
    assert "jb" in g.source          # column mode: blocks of columns


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_softmax_columns_dtypes(dyn, dtype):
    _sweep(lambda x: torch.softmax(x, 0), lambda n, m: (torch.randn(n, m).to(dtype),),
           [(16, 32), (2, 9), (33, 17), (1000, 48), (5, 4099)])


@pytest.mark.parametrize("name,fn", [
    ("argmax_rows", lambda x: x.argmax(-1)),
    ("argmin_cols", lambda x: x.argmin(0)),
    ("argmax_all", lambda x: x.argmax()),
    ("amax_argmax_paired", lambda x: (x.amax(-1), x.argmax(-1))),
    ("argmax_keepdim_prologue", lambda x: (x * 2 - 1).abs().argmax(0, keepdim=True)),
])
@pytest.mark.parametrize("ties", [False, True])
def test_argmax_argmin_every_size(dyn, name, fn, ties):
    # ties: values in {0, 1, 2}, so the first index of the extreme value decides
    make = (lambda n, m: (torch.randint(0, 3, (n, m)).float(),)) if ties else \
        (lambda n, m: (torch.randn(n, m),))
    _sweep(fn, make, RED_SIZES)


def test_argmax_nan_and_int(dyn):
    def make(n, m):
        x = torch.randn(n, m)
        x[n // 2, m // 3] = float("nan")
        return (x,)
    _sweep(lambda x: (x.argmax(-1), x.argmin(0)), make, RED_SIZES)
    cdynamo.reset()
    _sweep(lambda x: x.argmax(-1), lambda n, m: (torch.randint(-9, 9, (n, m), dtype=torch.int64),),
           RED_SIZES)


def test_relation_between_inputs_holds(dyn):
    def f(x, y):
        return x + y
    g = _sweep(f, lambda n, m: (torch.randn(n, m), torch.randn(n, m)), SIZES_2D[:3])
    # the graph relied on x and y having equal sizes: other sizes are refused, not guessed
    with pytest.raises(RuntimeError, match="symbolic sizes do not cover"):
        g(torch.randn(4, 6), torch.randn(4, 7))
    with pytest.raises(RuntimeError, match="symbolic sizes do not cover"):
        g(torch.randn(4, 1), torch.randn(4, 1))    # sizes 1 are never symbols


@pytest.mark.parametrize("name,fn", [
    ("transpose_add", lambda x: x.transpose(0, 1) + 1),             # output keeps the permuted layout
    ("transpose_plus_contig", lambda x: x.t() * 2 + x.t().exp()),
    ("unsqueeze_bcast", lambda x: x.unsqueeze(1) * x.unsqueeze(0).sigmoid()),
    ("squeeze_unsqueeze", lambda x: x.unsqueeze(0).squeeze(0).t() - 1),
])
def test_permutation_views_loaded(dyn, name, fn):
    g = _sweep(fn, lambda n, m: (torch.randn(n, m),),
               [(5, 6), (2, 2), (3, 17), (64, 9), (300, 257), (2, 4099)])


@pytest.mark.parametrize("perm", [(0, 2, 1), (2, 0, 1), (1, 2, 0), (2, 1, 0)])
def test_permute_3d_with_broadcast_bias(dyn, perm):
    def f(x, b):
        return torch.relu(x.permute(*perm) * 2) + b
    def make(a, c):
        x = torch.randn(a, 3, c)
        return x, torch.randn(x.permute(*perm).shape[-1])
    # the bias's size follows one dim of x: only shapes where it is static vary freely
    g = _compile(f, *make(4, 5))
    for s in [(4, 5), (2, 2), (7, 9), (33, 64), (300, 65)]:
        args = make(*s)
        try:
            got = g(*args)
        except RuntimeError as e:      # a relation the graph relied on (the bias's size)
            assert "symbolic sizes do not cover" in str(e)
            continue
        _same(got, f(*args))


def test_permuted_buffer_feeds_reduction_and_softmax(dyn):
    def f(x):
        y = x.transpose(0, 1) * 2          # a buffer dense in the transposed order
        return y.sum(-1), torch.softmax(y, -1), y.amax(0)
    _sweep(f, lambda n, m: (torch.randn(n, m),), RED_SIZES)


@pytest.mark.parametrize("name,fn,make", [
    ("transposed_matmul_arg", lambda a, b: a.t() @ b,
     lambda n, m: (torch.randn(n, m), torch.randn(n, 5))),
    ("output_transpose", lambda x: (x + 1).t(), lambda n, m: (torch.randn(n, m),)),
    ("output_permute_of_3d", lambda x: (x * 2).permute(2, 0, 1),
     lambda n, m: (torch.randn(n, 3, m),)),
])
def test_realized_views_take_runtime_layouts(dyn, name, fn, make):
    # views torch realizes (an extern's argument, an output) with symbolic sizes: as_strided
    # of their base at the actual sizes
    cdynamo.reset()
    _sweep(fn, make, SIZES_2D)


def test_realized_attention_heads_take_runtime_layouts(dyn):
    # heads of a row (x.view(b, t, h, d) of a split piece), transposes, and the reshape back
    cdynamo.reset()

    def heads(x, w):
        q, k = (x @ w).split(8, dim=-1)
        q = q.view(x.shape[0], x.shape[1], 2, 4).transpose(1, 2)
        k = k.view(x.shape[0], x.shape[1], 2, 4).transpose(1, 2)
        y = (q @ k.transpose(-2, -1)).softmax(-1) @ q
        return y.transpose(1, 2).reshape(x.shape[0], x.shape[1], 8), k
    w = torch.randn(6, 16)
    _sweep(heads, lambda n, m: (torch.randn(n, m, 6), w), [(2, 3), (3, 2), (5, 7), (17, 33)])


def test_static_base_view_with_symbolic_operand(dyn):
    w = torch.randn(8, 16)
    def f(x, w):
        return x * w[1:3, 4:12].sum(0) + 1     # a view of a static base (offset, strides)
    cdynamo.reset()
    g = _compile(f, torch.randn(5, 8), w)
    # the slice's constant starts and stops are guarded within w's dims, which stay symbolic
    # (the view's offset and strides expressions of them), as does x's dim 0
    assert g.symbols == ((0, 0), (1, 0), (1, 1))
    for n in (2, 3, 64, 1000):
        x = torch.randn(n, 8)
        _same(g(x, w), f(x, w))
    for w2 in (torch.randn(3, 12), torch.randn(9, 20)):
        _same(g(x, w2), f(x, w2))


def test_overlapping_input_specializes(dyn):
    def f(x):
        return x * 2 + 1
    g = _compile(f, torch.randn(5).expand(6, 5))
    assert g.symbols is None


def test_transposed_input_runs_at_every_size(dyn):
    """A transposed input: its strides are expressions of its sizes (guarded dense in
    the example's order); its graph runs every size, a contiguous input is refused."""
    def f(x):
        return x * 2 + 1
    g = _sweep(f, lambda n, m: (torch.randn(m, n).t(),), SIZES_2D)
    with pytest.raises(RuntimeError, match="symbolic sizes do not cover"):
        g(torch.randn(5, 6))


def test_non_contiguous_call_is_refused(dyn):
    def f(x):
        return x * 2 + 1
    g = _sweep(f, lambda n, m: (torch.randn(n, m),), SIZES_2D[:2])
    with pytest.raises(RuntimeError, match="symbolic sizes do not cover"):
        g(torch.randn(5, 6).t())


def test_unsupported_kind_compiles_static_with_reason(dyn, capfd):
    def f(x):
        return F.group_norm(x + 1, 2)    # group_norm: static, with the reason
    _C.set_log_topics({"dynamic"})
    try:
        g = _compile(f, torch.randn(4, 6, 5))
    finally:
        _C.set_log_topics(set())
    assert g.symbols is None
    # its builder reads the sizes (the symbols specialize), so the log names that
    assert re.search(r"__compiled_fn_\d+: static sizes: every symbolic size specialized: a "
                     r"builder without a symbolic rule \(group_norm\) read them at "
                     r"test_dynamic_kernels.py:\d+ in f \(value \d+, dim 0\)",
                     capfd.readouterr().err)


CAT_SIZES = [(4, 6), (2, 2), (3, 5), (17, 33), (300, 257), (2, 4099)]


@pytest.mark.parametrize("name,fn,make", [
    ("cat0_fused", lambda x, y: torch.cat([x, y * 2], 0) + 1,
     lambda n, m: (torch.randn(n, m), torch.randn(n + 3, m))),
    ("cat1", lambda x, y: torch.cat([x, y], 1).sigmoid(),
     lambda n, m: (torch.randn(n, m), torch.randn(n, m + 1))),
    ("cat_neg_dim_three", lambda x, y: torch.cat([x, y.exp(), x], -1),
     lambda n, m: (torch.randn(n, m), torch.randn(n, 2))),
    ("stack1", lambda x, y: torch.stack([x, y], 1) * 3,
     lambda n, m: (torch.randn(n, m), torch.randn(n, m))),
    ("stack0_int", lambda x, y: torch.stack([x, y + 1]),
     lambda n, m: (torch.randint(-9, 9, (n, m)), torch.randint(-9, 9, (n, m)))),
    ("cat_transposed_pieces", lambda x, y: torch.cat([x.t(), y.t()], 0) - 1,
     lambda n, m: (torch.randn(n, m), torch.randn(n, m + 1))),
])
def test_cat_stack_every_size(dyn, name, fn, make):
    _sweep(fn, make, CAT_SIZES)


def test_kv_cache_append_along_a_symbolic_dim(dyn):
    # decoding: past [b, h, s, d] + one new token [b, h, 1, d] -> s + 1, then a row softmax
    def f(past, new, q):
        k = torch.cat([past, new], dim=-2)
        return k, torch.softmax((q * k).sum(-1), -1)
    def make(b, s):
        return torch.randn(b, 4, s, 8), torch.randn(b, 4, 1, 8), torch.randn(b, 4, 1, 8)
    g = _sweep(f, make, [(2, 5), (2, 2), (3, 6), (2, 63), (5, 700), (2, 4099)])
    assert "out_ptr0 += " in g.source          # the new token's window: a runtime offset


def test_linear_relu_linear_batch_sweep(dyn):
    w1, b1, w2, b2 = torch.randn(32, 16), torch.randn(32), torch.randn(8, 32), torch.randn(8)
    def f(x, w1, b1, w2, b2):
        return F.linear(torch.relu(F.linear(x, w1, b1)), w2, b2).sigmoid()
    _sweep(f, lambda n, m: (torch.randn(n, 16), w1, b1, w2, b2),
           [(b, 0) for b in (2, 3, 7, 16, 63, 64, 1000)])


def test_matmul_then_pointwise(dyn):
    def f(a, b):
        return torch.relu(a @ b) + 1
    _sweep(f, lambda n, m: (torch.randn(n, m), torch.randn(m, n)), SIZES_2D[:6])


def test_static_graph_unchanged_without_hook():
    def f(x):
        return x * 2 + 1
    g = _compile(f, torch.randn(4, 6))
    assert g.symbols is None
    assert "cdy_s" not in g.source


def test_layer_norm_streams_its_stores_when_large(dyn, monkeypatch):
    monkeypatch.setattr(cdynamo.config, "stream_store_bytes", 65536)
    w, b = torch.randn(256), torch.randn(256)
    def f(x, w, b):
        return F.layer_norm(x, (256,), w, b)
    g = _sweep(f, lambda n, m: (torch.randn(n, 256), w, b), [(4, 0), (300, 0), (1000, 0), (3, 0)])
    assert "cdy_stream(" in g.source      # the streamed variant, chosen per call by its bytes


def test_frame_hands_its_symbol_values_to_the_graph():
    # the entry's SYM guard reads the symbols once and the graph it calls takes them (no
    # second read); a direct call afterwards, on other tensors, still checks everything
    def f(x, y):
        return x * y + 1
    opt = cdynamo.optimize(f, dynamic=True)
    for n, m in [(4, 5), (2, 2), (7, 33), (300, 257), (4, 5)]:
        x, y = torch.randn(n, m), torch.randn(n, m)
        _same(opt(x, y), f(x, y))
    assert len(cdynamo._support.compiles) == 1
    g = _graph()
    assert g.symbols
    opt(torch.randn(3, 3), torch.randn(3, 3))
    with pytest.raises(RuntimeError, match="symbolic sizes do not cover"):
        g(torch.randn(4, 6), torch.randn(4, 7))
    x, y = torch.randn(6, 2), torch.randn(6, 2)
    _same(g(x, y), f(x, y))
    # a guard that fails on a relation falls through to a recompile, never a wrong call
    a, b = torch.randn(5, 3), torch.randn(1, 3)
    _same(opt(a, b), f(a, b))


def test_batched_guard_of_a_symbolic_entry_still_refuses_what_it_does_not_cover():
    # the TENSOR guards run batched with the symbols' sizes free; the SYM guard checks the
    # sizes >= 2 and the inputs contiguous: other calls get another entry, never this one
    def f(x, y):
        return x * y - 2
    opt = cdynamo.optimize(f, dynamic=True)
    x, y = torch.randn(4, 6), torch.randn(4, 6)
    _same(opt(x, y), f(x, y))
    g = _graph()
    assert g.symbols
    for a, b in [(torch.randn(6, 5).t(), torch.randn(5, 6)),        # not contiguous
                 (torch.randn(1, 6), torch.randn(1, 6)),            # a size 1
                 (torch.randn(3, 6).double(), torch.randn(3, 6).double()),   # another dtype
                 (torch.randn(7, 9), torch.randn(7, 9))]:
        _same(opt(a, b), f(a, b))
    assert g.calls == 2      # the compiling call and the last one


@pytest.mark.parametrize("name,fn,make", [
    ("qkv_split_last", lambda x, w: (lambda q, k, v: torch.softmax(q * k, -1) + v)(
        *F.linear(x, w).split(64, -1)),
     lambda n, m: (torch.randn(n, 32), torch.randn(192, 32))),
    ("chunk_last_glu", lambda x: (lambda a, b: a * torch.sigmoid(b))(*x.chunk(2, -1)),
     lambda n, m: (torch.randn(n, m, 16),)),
    # the piece's window starts at a symbolic offset: 2 * (inner dims' sizes)
    ("chunk_middle_symbolic_inner", lambda x: (lambda a, b: a - b.exp())(*x.chunk(2, 1)),
     lambda n, m: (torch.randn(n, 4, m),)),
    ("split_then_transpose", lambda x: (lambda a, b: a.transpose(0, 1) + b.transpose(0, 1))(
        *x.split(3, -1)), lambda n, m: (torch.randn(n, 6),)),
])
def test_split_pieces_loaded_at_their_offset(dyn, name, fn, make):
    g = _sweep(fn, make, [(5, 3), (2, 2), (7, 9), (300, 17), (4099, 2)])
    assert any(dim == 0 for inp, dim in g.symbols)


def _repeat_kv(x):
    """GQA's repeat_kv (transformers' text): the expand materialized by reshape, the copy
    loaded as a reshape."""
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, 2, s, d).reshape(b, h * 2, s, d)


@pytest.mark.parametrize("name,fn", [
    ("expand_sizes_read", lambda x: x.unsqueeze(2).expand(
        x.shape[0], x.shape[1], 3, x.shape[2], x.shape[3]) * 2),
    ("expand_minus_one", lambda x: x.unsqueeze(2).expand(-1, -1, 3, -1, -1) + 1),
    ("expand_new_leading_dim", lambda x: x.expand(2, *x.shape) - x),
    ("repeat_kv", lambda x: _repeat_kv(x) * 0.5),
    ("repeat_kv_softmax", lambda x: _repeat_kv(x).softmax(-1)),
])
def test_expand_loads_take_runtime_sizes(dyn, name, fn):
    _sweep(fn, lambda n, m: (torch.randn(n, 3, m, 8),),
           [(2, 5), (3, 2), (7, 9), (2, 33), (64, 100)])


def test_expand_to_a_constant_size_of_a_symbolic_dim_specializes(dyn):
    """expand(4, ...) of a symbolic dim: eager checks the size, so the dim is a constant."""
    def f(x):
        return x.expand(4, x.shape[1]) + 1
    x = torch.randn(4, 6)
    opt = cdynamo.optimize(f)
    _same(opt(x), f(x))
    with pytest.raises(RuntimeError):
        f(torch.randn(5, 6))
    with pytest.raises(RuntimeError):
        opt(torch.randn(5, 6))


@pytest.mark.parametrize("name,fn", [
    ("arange_last", lambda x: x + torch.arange(x.shape[-1])),
    ("arange_float_scale", lambda x: x * torch.arange(x.shape[-1], dtype=torch.float32)),
    ("arange_rows", lambda x: x - torch.arange(x.shape[0]).unsqueeze(1) * 0.5),
    ("causal_mask_of_aranges", lambda x: x.masked_fill(
        torch.arange(x.shape[-1]).unsqueeze(0) > torch.arange(x.shape[-2]).unsqueeze(1), -1e9)),
])
def test_arange_index_operands_take_runtime_sizes(dyn, name, fn):
    g = _sweep(fn, lambda n, m: (torch.randn(n, m),), SIZES_2D)
    assert "iota" in g.source


@pytest.mark.parametrize("name,fn", [
    ("triu_1", lambda x: x.triu(1) + 1),
    ("tril_minus_1", lambda x: torch.tril(x, -1) * 2),
    ("tril_then_softmax", lambda x: x.tril().softmax(-1)),
    ("causal_fill_of_triu_mask", lambda x: x.masked_fill((x > 9).triu(1), float("-inf"))),
    ("where_scalar", lambda x: torch.where(x > 0, x, 0.0)),
])
def test_tri_masks_take_runtime_sizes(dyn, name, fn):
    """tril / triu lower to two IOTAs over the input's last two dims (and a where)."""
    _sweep(fn, lambda n, m: (torch.randn(2, n, m),), SIZES_2D)


@pytest.mark.parametrize("symbolic", [True, False])
def test_masked_softmax_rows_sum_in_64_lane_blocks(symbolic):
    """A row kernel loading a bool mask sums in 64-lane blocks (one byte vector each): in
    16-lane blocks gcc vectorizes the block with 2-float vectors, 2.5x slower."""
    def f(x):
        return x.tril().softmax(-1)
    _C._dyn_test(symbolic)
    try:
        g = _compile(f, torch.randn(4, 128, 128))
    finally:
        _C._dyn_test(False)
    assert bool(g.symbols) == symbolic
    rows = g.source[g.source.index("void kernel_1_rows(") if symbolic else 0:]
    assert "rl < 64; rl++" in rows and "rl < 16; rl++) {" not in rows
    # symbolic: a copy of the loops without tails for rows of whole 64-lane blocks
    assert ("nr0 % 64LL == 0" in g.source) == symbolic
    for b, n in ([(3, 2), (3, 16), (2, 63), (2, 64), (3, 65), (2, 128), (2, 130), (2, 192)]
                 if symbolic else [(4, 128)]):
        x = torch.randn(b, n, n)
        _same(g(x), f(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masked_log_softmax_rows_of_whole_and_partial_blocks(dtype):
    """The symbolic row kernel's two copies (rows of whole lane blocks: 64 floats / 32
    doubles, no tails; others) both equal eager, log_softmax too, parallel or not."""
    def f(x):
        return torch.log_softmax(x.masked_fill(torch.ones_like(x, dtype=torch.bool).triu(1),
                                               float("-inf")), -1)
    _C._dyn_test(True)
    try:
        g = _compile(f, torch.randn(4, 40, 40, dtype=dtype))
    finally:
        _C._dyn_test(False)
    lanes = 64 if dtype == torch.float32 else 32
    assert g.symbols and f"% {lanes}LL == 0" in g.source
    for b, n in [(2, 31), (2, 32), (3, 64), (2, 65), (9, 96), (2, 128), (40, 64)]:
        x = torch.randn(b, n, n, dtype=dtype)
        _same(g(x), f(x))


@pytest.mark.parametrize("name,fn", [
    ("none_middle", lambda x: x[:, None] * 2),
    ("ellipsis_none", lambda x: x[..., None] + x[..., None, :]),
    ("none_first_slices", lambda x: x[None, :, :] - 1),
    ("whole_slices", lambda x: x[:, :].exp()),
])
def test_getitem_keeping_every_dim_takes_runtime_sizes(dyn, name, fn):
    _sweep(fn, lambda n, m: (torch.randn(n, m),), SIZES_2D)


@pytest.mark.parametrize("name,fn", [
    ("int_index", lambda x: x[:, 0] + 1),
    ("bounded_slice", lambda x: x[:, 1:] * 2),
    ("list_index", lambda x: x[:, [0, 1]] - 1),
    ("mask_index", lambda x: x[x > 0]),
])
def test_getitem_with_bounds_or_tensors_still_correct(name, fn):
    """Indexes that read sizes stay exact: every call equals eager's."""
    opt = cdynamo.optimize(fn)
    for n, m in [(3, 4), (5, 6), (7, 9), (2, 33)]:
        x = torch.randn(n, m)
        _same(opt(x), fn(x))


# Row lengths around the 16-lane blocks of the row kernels: no tail, tails of 1, 7, 1 past 32.
TAIL_SIZES = [16, 2, 7, 17, 23, 33, 49, 64, 135]


@pytest.mark.parametrize("name,fn", [
    ("softmax", lambda x: torch.softmax(x, -1)),
    ("log_softmax", lambda x: torch.log_softmax(x, -1)),
    ("softmax_prologue_epilogue", lambda x: torch.softmax(x * 3 - 1, -1) + x),
    ("sum", lambda x: x.sum(-1)),
    ("amax", lambda x: x.amax(-1)),
])
def test_square_rows_with_every_tail(dyn, name, fn):
    """A square input (4, n, n): one graph, every row length's tail in one masked block."""
    g = _sweep(fn, lambda n: (torch.randn(4, n, n),), [(n,) for n in TAIL_SIZES])
    if "softmax" in name:   # a runtime row length ends in a masked block, not a loop to its end
        assert "/ 16 * 16) < " in g.source


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_square_softmax_tails_dtypes(dyn, dtype):
    _sweep(lambda x: torch.softmax(x, -1), lambda n: (torch.randn(4, n, n).to(dtype),),
           [(n,) for n in TAIL_SIZES])


def test_scratch_buffers_follow_each_calls_sizes(dyn):
    """repeat_kv's copy lives in the graph's scratch block, laid out per call: sizes that
    grow, shrink and grow again (the block is reallocated, offsets recomputed)."""
    g = _sweep(_repeat_kv, lambda s: (torch.randn(2, 4, s, 8),),
               [(16,), (300,), (2,), (17,), (1000,), (3,)])
    assert g.symbols and g.scratch_bytes == 0   # per call: no fixed block


def test_parameter_and_subclass_inputs(dyn):
    """Inputs read through torch's DLPack exchange API (torch.Tensor, Parameter) or through
    their attributes (a subclass): the same sizes, the same results."""
    class Sub(torch.Tensor):
        pass

    def f(x, w):
        return torch.softmax(x * w, -1)
    g = _compile(f, torch.randn(5, 16), torch.randn(16))
    for n, m in [(3, 17), (7, 33), (2, 2)]:
        x, w = torch.randn(n, m), torch.nn.Parameter(torch.randn(m), requires_grad=False)
        _same(g(x, w), f(x, w))
        xs = x.as_subclass(Sub)
        _same(g(xs, w), f(x, w))
    assert len(cdynamo._support.compiles) == 1
    with pytest.raises(RuntimeError, match="do not cover"):
        g(torch.randn(3, 17), torch.randn(18))


@pytest.mark.parametrize("name,fn,make,lens", [
    ("softmax", lambda x: torch.softmax(x, -1), lambda n: (torch.randn(4, n, n),),
     [16, 32, 64, 128]),
    ("log_softmax_prologue", lambda x: torch.log_softmax(x * 2 + 1, -1),
     lambda n: (torch.randn(3, n, n),), [16, 32, 64, 128]),
    ("softmax_f64", lambda x: torch.softmax(x, -1),
     lambda n: (torch.randn(4, n, n, dtype=torch.float64),), [8, 16, 32, 64]),
    ("softmax_bf16", lambda x: torch.softmax(x, -1),
     lambda n: (torch.randn(4, n, n).to(torch.bfloat16),), [16, 32, 64, 128]),
    ("tril_softmax", lambda x: x.tril().softmax(-1), lambda n: (torch.randn(4, n, n),),
     [16, 32, 64, 128]),
    ("many_rows", lambda x: torch.softmax(x, -1), lambda n: (torch.randn(2100, n),),
     [16, 32, 64, 128]),   # 2100 rows: parallel from 16 floats a row (CG_PARALLEL_NUMEL)
])
def test_short_rows_get_a_copy_per_exact_length(dyn, name, fn, make, lens):
    """A runtime row length of up to 512 bytes that is whole lane blocks (powers of two
    from one block) runs a copy of the loops at that constant length (the row in
    registers, as the static kernel); the other lengths the runtime loops.  Every length
    equals eager, around each copy's length too."""
    sizes = sorted({2, 3, 1000} | {m + d for m in lens for d in (-1, 0, 1)})
    g = _sweep(fn, make, [(5,)] + [(n,) for n in sizes])
    for m in lens:
        assert f"nr0 == {m}LL" in g.source
    assert f"nr0 == {lens[-1] * 2}LL" not in g.source and f"nr0 == {lens[0] // 2}LL" not in g.source


def test_exact_length_copy_sums_as_the_static_kernel():
    """The exact-length copy is the static kernel's loops: the same sum order, the same bits."""
    def f(x):
        return torch.softmax(x, -1)
    _C._dyn_test(True)
    try:
        g = _compile(f, torch.randn(4, 20, 20))
    finally:
        _C._dyn_test(False)
    for n in (16, 64, 128):
        x = torch.randn(4, n, n)
        cdynamo.reset()
        static = _compile(f, x)
        assert not static.symbols
        assert torch.equal(g(x), static(x))


def test_exact_length_helpers_choose_parallel_rows_per_call(dyn):
    """Each exact-length helper keeps its kernel's runtime choice: parallel rows when the
    call has enough of them (CG_PARALLEL_NUMEL), serial ones else."""
    g = _sweep(lambda x: torch.softmax(x, -1), lambda n, m: (torch.randn(n, m),),
               [(4, 20), (1000, 128), (3, 128), (3000, 16), (5, 16), (700, 64), (1000, 100),
                (5, 5)])
    helper = g.source[g.source.index("_len16("):g.source.index("_len32_rows(")]
    assert "_len128(" in g.source
    if torch.get_num_threads() > 1:
        assert "omp parallel num_threads(NTHREADS)" in helper and ">= 32768LL" in helper


def test_softmax_rows_prefetch_as_the_static_kernel_at_run_time(dyn):
    """A runtime row length: the exp pass prefetches the next row when the rows are 512
    floats or longer and the input 4 MiB or more (the static kernel's test, cg_row_prefetches,
    made per call: cdy_pfn); not the exact-length helpers, not the final pass.  Every size
    around both thresholds equals eager."""
    g = _sweep(lambda x: torch.softmax(x, -1), lambda n, m: (torch.randn(n, m),),
               [(4, 20), (2048, 511), (2048, 512), (2048, 513), (2047, 512), (2049, 512),
                (1024, 1025), (1023, 1024), (3, 4099), (2, 5000), (300, 257)])
    main = g.source[g.source.index("void kernel_0_rows("):]
    assert "cdy_pfn = nr0 >= 512LL && (n0) * nr0 * 4LL >= 4194304LL ? n0 : 0;" in main
    assert main.count("if (i0 + 1 < cdy_pfn) {") == 1
    assert "__builtin_prefetch(pf + 0, 0, 2);" in main
    assert "__builtin_prefetch" not in g.source[:g.source.index("void kernel_0_rows(")]


@pytest.mark.parametrize("make,sizes", [
    (lambda n, m: (torch.randn(n, m),),
     [(4, 20), (2, 16), (3, 16), (2047, 16), (2048, 16), (2049, 16), (33, 1000), (31, 1057),
      (16, 2048), (1000, 100), (7, 7), (5000, 7)]),
    (lambda n, m: (torch.randn(3, n, m), torch.randn(n, m)),   # b broadcast: two outer dims
     [(5, 20), (2, 16), (683, 16), (682, 16), (700, 16), (11, 1000), (13, 999), (2, 4099),
      (7, 7), (1700, 7)]),
])
def test_rows_in_ranges_split_as_schedule_static(dyn, make, sizes):
    """One or two outer dims: each function's loops are one helper over a range of rows
    (<function>_rows(..., cdy_lo, cdy_hi)), which the serial path calls over every row and
    the parallel path once per thread over its schedule(static) share; two outer dims walk
    the flattened range.  Every size around the parallel threshold (32768 elements) and
    row counts not a multiple of the threads equal eager."""
    g = _sweep(lambda *a: torch.softmax(a[0] * 2 if len(a) == 1 else a[0] + a[1], -1), make,
               sizes)
    assert "kernel_0_rows(" in g.source and "kernel_0_len16_rows(" in g.source
    assert g.source.count("for (int64_t r0 = 0; r0 < 16LL; r0++)") == 2   # one copy
    if torch.get_num_threads() > 1:
        assert "omp parallel for" not in g.source
        assert "cdy_q = cdy_n / cdy_nt, cdy_r = cdy_n % cdy_nt;" in g.source
    if make(2, 2)[0].dim() == 3:
        assert "i1 = i1 + 1 < n1 ? i1 + 1 : 0, i0 += i1 == 0" in g.source


@pytest.mark.parametrize("hint", [16, 1000])
def test_runtime_length_rows_sum_in_lanes_not_of_the_compiling_call(hint):
    """A runtime row length sums in one vector's lanes at every length, whatever the
    compiling call's length (compiled at 1000 columns the runtime loops summed in 64
    lanes, at 16 in 16; in memory, 64 lanes ran 1.05-1.15x as long), and each
    exact-length copy in the lanes the static kernel of its length takes: below 512
    floats (the static kernel's 16 lanes) the same sum order, the same bits as the
    static kernel at whole lane blocks; every length equals eager."""
    def f(x):
        return torch.softmax(x, -1)
    _C._dyn_test(True)
    try:
        g = _compile(f, torch.randn(8, hint))
    finally:
        _C._dyn_test(False)
    assert g.symbols
    rows = g.source[g.source.index("void kernel_0_rows("):]
    assert "sum_l[16]" in rows and "sum_l[64]" not in rows
    for n in (64, 128, 256, 384, 512, 1000, 1536):
        x = torch.randn(40, n) * 4
        _same(g(x), f(x))
        if n < 512:
            cdynamo.reset()
            static = _compile(f, x)
            assert not static.symbols and "sum_l[16]" in static.source
            assert torch.equal(g(x), static(x)), n


@pytest.mark.parametrize("n", [2, 16, 128, 1024])
def test_row_copy_is_a_memcpy_a_row_as_the_static_kernel(n):
    """A copy of contiguous rows (GQA's repeat_kv: an expand realized by a reshape) copies
    each row with one memcpy of the call's row bytes, as the static kernel does, parallel
    from the static copy's element count on; every size equals eager."""
    def f(x):
        b, h, s, d = x.shape
        return x[:, :, None, :, :].expand(b, h, 2, s, d).reshape(b, h * 2, s, d) * 0.5
    _C._dyn_test(True)
    try:
        g = _compile(f, torch.randn(2, 4, 16, 64))
    finally:
        _C._dyn_test(False)
    assert g.symbols
    assert "__builtin_memcpy(dst, src, (__SIZE_TYPE__)n2 * 4U);" in g.source
    x = torch.randn(2, 4, n, 64)
    _same(g(x), f(x))
    cdynamo.reset()
    static = _compile(f, x)
    assert not static.symbols and "__builtin_memcpy(dst, src, " in static.source
    assert torch.equal(g(x), static(x))


def test_masked_short_rows_run_the_static_kernels_copy():
    """A masked softmax (tril) of 16 or 32 columns runs its exact-length copy, the static
    kernel's loops (16 lanes), not the runtime loops' masked 64-lane block (4 times the
    exps: 1.14-1.16x the static time on 16 Sapphire Rapids cores): the same bits."""
    def f(x):
        return x.tril().softmax(-1)
    _C._dyn_test(True)
    try:
        g = _compile(f, torch.randn(4, 128, 128))
    finally:
        _C._dyn_test(False)
    assert g.symbols and "nr0 == 16LL" in g.source and "nr0 == 32LL" in g.source
    for n in (16, 32):
        x = torch.randn(4, n, n)
        cdynamo.reset()
        static = _compile(f, x)
        assert not static.symbols
        assert torch.equal(g(x), static(x))
