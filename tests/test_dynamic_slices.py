"""Dynamic shapes (issue 32): slices with symbolic or constant bounds, extern cat / addmm and
views of a split piece keep sizes symbolic, so sequence sweeps of transformers-style code
compile twice (the first size, then once symbolic) and every call equals eager.
Phi-3's fused qkv projection sliced at constant offsets, its pieces expanded by repeat_kv, too.

The patterns are those of transformers' models: BERT's `position_ids[:, 0:seq_length]` of a
buffer, LLaMA's rotate_half (`x[..., : h // 2]`, `x[..., h // 2:]`) and its rotary cat under
`dim=-1`, a KV cache's cat with an empty legacy piece, GPT-2's Conv1D (addmm) whose output is
split and viewed to heads."""
import pytest
import torch

import cdynamo
from conftest import assert_same, sweep_compiles

SEQS = [5, 8, 13, 40, 100]


def _sweep(fn, make, seqs=SEQS):
    return sweep_compiles(fn, make, seqs)


BUF = torch.arange(512, dtype=torch.float32).unsqueeze(0)
WQKV = torch.randn(8, 24)


def test_buffer_sliced_to_a_sequence_length():
    def f(x):
        b, s = x.shape[:2]
        return x * BUF[:, 0:s].unsqueeze(-1)
    assert _sweep(f, lambda s: (torch.randn(2, s, 8),)) == 2


def test_rotate_half_slices_of_a_static_dim():
    def f(x):
        h = x.shape[-1]
        return torch.cat((-x[..., h // 2:], x[..., : h // 2]), dim=-1) * 2
    assert _sweep(f, lambda s: (torch.randn(2, 4, s, 16),)) == 2


def test_constant_slices():
    def f(x):
        return x[:, :3] + x[:, 2:5].exp() + x[..., :4].sum(-1, keepdim=True)[:, :3]
    assert _sweep(f, lambda s: (torch.randn(s, 8, 6),)) == 2


def test_stop_from_another_tensor_guards_within_the_dim():
    """x[:, :y.shape[1]]: the stop is guarded <= x's dim; a longer y clamps (eager's result) and
    recompiles."""
    def f(x, y):
        return x[:, : y.shape[1]] * 2
    cdynamo.reset()
    opt = cdynamo.optimize(f)
    for n, m in [(20, 5), (30, 8), (40, 13), (17, 16)]:
        x, y = torch.randn(2, n), torch.randn(2, m)
        assert_same(f(x, y), opt(x, y))
    assert cdynamo.stats()["frames_compiled"] == 2
    x, y = torch.randn(2, 6), torch.randn(2, 9)    # the stop past the dim: clamped
    assert_same(f(x, y), opt(x, y))
    assert cdynamo.stats()["frames_compiled"] == 3


def test_slice_start_inside_a_dim_keeps_both_dims_symbolic():
    def f(x):
        return x[:, 1:] * 3
    cdynamo.reset()
    opt = cdynamo.optimize(f)
    for b, n in [(2, 7), (3, 8), (5, 9), (9, 30)]:
        x = torch.randn(b, n)
        assert_same(f(x), opt(x))
    assert cdynamo.stats()["frames_compiled"] == 2


# issue 32: slices starting at a size, from the end, between sizes; narrow; int indices
# counted from the end.  Each keeps the dims symbolic: the view's size is an expression
# (stop - start, guarded as the example had it: within the dim, >= 2 or == 1) and its offset
# too (kernels and realized views take it per call).
@pytest.mark.parametrize("name,fn,make", [
    ("start_at_a_size", lambda x, y: x[:, y.shape[1]:] * 2,
     lambda s: (torch.randn(2, s + 6), torch.randn(2, s))),
    ("constant_start", lambda x: x[:, 3:] * 2, lambda s: (torch.randn(2, s, 3),)),
    ("negative_start", lambda x: x[:, -3:] * 2, lambda s: (torch.randn(2, s),)),
    ("stop_from_the_end", lambda x: x[:, :-1] * 2, lambda s: (torch.randn(3, s, 2),)),
    ("between_sizes", lambda x, y: x[:, y.shape[1]: 2 * y.shape[1]] + 1,
     lambda s: (torch.randn(3, 3 * s), torch.randn(2, s))),
    ("size_from_the_end", lambda x, y: x[:, -y.shape[1]:] * 2,
     lambda s: (torch.randn(2, s + 4), torch.randn(2, s))),
    ("rows_and_cols", lambda x: x[2:, 1:-1].exp() + x[:-2, 2:].sum(0),
     lambda s: (torch.randn(s, s),)),
    ("narrow_start_at_a_size", lambda x, y: x.narrow(1, y.shape[1], 4) * 2,
     lambda s: (torch.randn(2, s + 6), torch.randn(2, s))),
    ("narrow_length_a_size", lambda x, y: torch.narrow(x, -1, 2, y.shape[1]) * 2,
     lambda s: (torch.randn(2, s + 6), torch.randn(2, s))),
    ("narrow_from_the_end", lambda x: x.narrow(1, -3, 2) * 2, lambda s: (torch.randn(2, s),)),
    ("int_index_last", lambda x: x[:, -1] * 2 + x[:, -2:].sum(1), lambda s: (torch.randn(2, s, 3),)),
    ("int_index_at_a_size", lambda x, y: x[:, y.shape[1]] * 2,
     lambda s: (torch.randn(2, s + 3, 4), torch.randn(2, s))),
    ("last_token_then_transpose", lambda x: x[:, -1:, :].transpose(1, 2) + 1,
     lambda s: (torch.randn(2, s, 3),)),
    ("start_slice_then_reshape", lambda x: x[:, 2:].reshape(-1) * 2,
     lambda s: (torch.randn(2, s),)),
    # Phi-3's fused qkv: an extern's result sliced at offsets of its static last dim
    ("fused_qkv_slices", lambda x: (x @ WQKV)[..., 8:16] * (x @ WQKV)[..., 16:].exp(),
     lambda s: (torch.randn(2, s, 8),)),
])
def test_slices_at_symbolic_positions_compile_twice(name, fn, make):
    assert _sweep(fn, make) == 2


@pytest.mark.parametrize("name,fn,make", [
    ("view_returned", lambda x, y: x[:, y.shape[1]:], lambda s: (torch.randn(2, s + 6), torch.randn(2, s))),
    ("extern_argument", lambda x, y: x[:, y.shape[1]:, :] @ y.t()[:3],
     lambda s: (torch.randn(2, s + 6, 3), torch.randn(4, s))),
    ("static_buffer_at_a_size", lambda x, y: x * BUF[:, y.shape[1]: y.shape[1] + 4],
     lambda s: (torch.randn(2, 4), torch.randn(2, s))),
])
def test_views_at_a_symbolic_offset_realized_or_of_a_static_base(name, fn, make):
    """A view at an offset from sizes returned (torch realizes it), passed to an extern, or of a
    static buffer whose sizes stay constants: its offset is the expression per call."""
    assert _sweep(fn, make) == 2


@pytest.mark.parametrize("name,fn,pairs", [
    # the start past the dim: an empty result (eager's), a guard that recompiles
    ("start_past_the_dim", lambda x, y: x[:, y.shape[1]:] * 2, [(9, 3), (12, 5), (20, 8), (4, 6), (3, 9)]),
    # -3 on a dim of 2: clamped to the start
    ("negative_start_clamped", lambda x, y: x[:, -3:] * 2, [(2, 2), (5, 2), (9, 2), (2, 2)]),
    ("negative_size_start_clamped", lambda x, y: x[:, -y.shape[1]:] + 1,
     [(9, 3), (12, 5), (20, 8), (4, 6), (3, 9), (5, 7)]),
    ("narrow_at_the_end", lambda x, y: x.narrow(1, y.shape[1], 2) + 1, [(9, 3), (12, 5), (7, 5)]),
])
def test_empty_or_clamped_slices_equal_eager(name, fn, pairs):
    cdynamo.reset()
    opt = cdynamo.optimize(fn)
    with torch.no_grad():
        for n, m in pairs:
            x, y = torch.randn(3, n), torch.randn(2, m)
            assert_same(fn(x, y), opt(x, y))
    assert cdynamo.stats()["frames_compiled"] <= 4


EMB = torch.randn(40, 4)


@pytest.mark.parametrize("name,fn", [
    ("advanced_index", lambda x, y: x[:, y.shape[1]:][:, [0, 2]] * 2),
    ("gather", lambda x, y: torch.gather(x[:, y.shape[1]:], 1, torch.tensor([[1, 0], [2, 2]])) + 1),
    ("embedding_of_a_static_slice", lambda x, y: torch.nn.functional.embedding(
        torch.tensor([[0, 3]]), EMB[y.shape[1] // 4:]) + 1),
    ("index_select", lambda x, y: x[:, y.shape[1]:].index_select(1, torch.tensor([2, 0])) * 2),
    ("unfold", lambda x, y: x[:, y.shape[1]:].unfold(1, 2, 1) * 2),
    ("expand", lambda x, y: x[:, -1:].expand(2, 5) * 2),
])
def test_views_of_views_at_a_symbolic_offset_equal_eager(name, fn):
    """Gathers, advanced indexing and views without a symbolic rule over a view at an offset
    from sizes: each call equals eager (they read the offset per call or specialize)."""
    cdynamo.reset()
    opt = cdynamo.optimize(fn)
    with torch.no_grad():
        for s in SEQS:
            x, y = torch.randn(2, s + 6), torch.randn(2, s)
            assert_same(fn(x, y), opt(x, y))


CAUSAL = torch.full((64, 64), float("-inf")).triu(1)


def test_decode_steps_with_positions_and_mask_from_the_cache_length_compile_twice():
    """A decode loop: the cache grows a token per step; positions arange(past, past + q), the
    mask rows of a static causal buffer from past, the keys' last w as a window, the last
    token's row: 2 compiles over 20 steps (the prompt, then every step symbolic)."""
    w = torch.randn(8, 8)

    def step(x, cache):
        past, q = cache.shape[1], x.shape[1]
        k = torch.cat([cache, x @ w], dim=1)
        pos = torch.arange(past, past + q)
        m = CAUSAL[past: past + q, : past + q]
        att = (x @ k.transpose(1, 2) + m).softmax(-1)
        h = att @ k + pos.unsqueeze(-1)
        return h[:, -1:], k, k[:, -4:]

    cdynamo.reset()
    opt = cdynamo.optimize(step)
    cache = ce = torch.zeros(1, 0, 8)
    with torch.no_grad():
        for i in range(20):
            x = torch.randn(1, 6 if i == 0 else 1, 8)   # the prompt, then a token per step
            h, cache, win = opt(x, cache)
            he, ce, wine = step(x, ce)
            assert_same((he, ce, wine), (h, cache, win))
    assert cdynamo.stats()["frames_compiled"] == 2


E = torch.tensor([])


@pytest.mark.parametrize("name,fn", [
    ("kv_cache_cat_empty_piece", lambda x, y: torch.cat([E, x * 2], dim=-2) + 1),
    ("cat_dim_keyword", lambda x, y: torch.cat([x, y], dim=1) * 2),
])
def test_extern_cat_keeps_sizes_symbolic(name, fn):
    assert _sweep(fn, lambda s: (torch.randn(2, s, 4), torch.randn(2, s + 1, 4))) == 2


W, B = torch.randn(16, 48), torch.randn(48)


def test_addmm_split_heads():
    """GPT-2's Conv1D and attention's split to heads: addmm, view back, split, view(b, t, h, d),
    transpose."""
    def f(x):
        b, t, c = x.shape
        h = torch.addmm(B, x.view(-1, c), W).view(b, t, 48)
        q, k, v = h.split(16, dim=2)
        q = q.view(b, t, 4, 4).transpose(1, 2)
        k = k.view(b, t, 4, 4).transpose(1, 2)
        v = v.view(b, t, 4, 4).transpose(1, 2)
        return (q * k).sum(-1, keepdim=True) * v
    cdynamo.reset()
    opt = cdynamo.optimize(f)
    for s in SEQS:
        x = torch.randn(2, s, 16)
        # the matmul's sums may add in another order (values ~10: float32's 1e-6 relative)
        torch.testing.assert_close(opt(x), f(x), rtol=1e-5, atol=1e-4)
    assert cdynamo.stats()["frames_compiled"] == 2


def test_int_index_zero_keeps_the_other_dims_symbolic():
    """BERT's pooler: hidden_states[:, 0] over a sequence sweep."""
    assert _sweep(lambda x: torch.tanh(x[:, 0] * 2), lambda s: (torch.randn(2, s, 8),)) == 2


def test_int_index_inside_a_dim_keeps_the_batch_symbolic():
    """x[:, -1] (the last token's logits): a batch sweep compiles twice (a sweep over the
    indexed dim too: test_slices_at_symbolic_positions_compile_twice)."""
    def f(x):
        return x[:, -1] + x[:, 1, :2].sum()
    cdynamo.reset()
    opt = cdynamo.optimize(f)
    for b in [2, 3, 5, 9]:
        x = torch.randn(b, 7, 4)
        assert_same(f(x), opt(x))
    assert cdynamo.stats()["frames_compiled"] == 2


@pytest.mark.parametrize("name,fn", [
    ("int_index_last", lambda x: x[-1]),
    ("slice_from_1", lambda x: x[1:]),
    ("split_piece_dim0", lambda x: x.split(2, dim=0)[1]),
])
def test_returned_view_at_a_symbolic_offset_read_by_a_kernel(name, fn):
    """A view returned (torch realizes it at its offset) and read by a kernel: the kernel reads
    from the realized view's pointer, not its offset again (a fuzz finding: garbage values)."""
    def f(x):
        v = fn(x)
        return v.sin(), v
    x = torch.arange(20.).view(5, 4)
    cdynamo.reset()
    out = cdynamo.optimize(f, dynamic=True)(x)
    assert_same(f(x), out)


QKV = torch.randn(128, 32) * 0.1


def fused_qkv_attention(h):
    """Phi-3's attention: one qkv projection sliced at constant offsets of its static last dim,
    each piece viewed to heads; k and v go through repeat_kv (a None index, an expand, a
    reshape: a copy of a view at the piece's offset) into two matmuls."""
    b, t, _ = h.shape
    x = torch.nn.functional.linear(h, QKV)
    q = x[..., :64].view(b, t, -1, 16).transpose(1, 2)
    k = x[..., 64:96].view(b, t, -1, 16).transpose(1, 2)
    v = x[..., 96:].view(b, t, -1, 16).transpose(1, 2)
    k = k[:, :, None, :, :].expand(b, 2, 2, t, 16).reshape(b, 4, t, 16)
    v = v[:, :, None, :, :].expand(b, 2, 2, t, 16).reshape(b, 4, t, 16)
    a = torch.matmul(q, k.transpose(2, 3)).softmax(-1)
    return torch.matmul(a, v).transpose(1, 2).reshape(b, t, 64)


def test_fused_qkv_slices_at_an_offset_sequence_sweep(capfd):
    """The expand of a view at a constant offset keeps that offset constant: the copy's kernel
    loads it at every size (it compiled static per length: 'a kernel loads a view at an offset
    of a base with a symbolic size')."""
    cdynamo.reset()
    capfd.readouterr()
    cdynamo._C.set_log_topics({"dynamic"})
    try:
        assert _sweep(fused_qkv_attention, lambda s: (torch.randn(2, s, 32),)) == 2
    finally:
        cdynamo._C.set_log_topics(set())
    assert "static sizes" not in capfd.readouterr().err


def test_fused_qkv_slices_at_an_offset_batch_sweep():
    assert _sweep(fused_qkv_attention, lambda n: (torch.randn(n, 7, 32),), [2, 3, 5, 8, 13]) == 2


def test_phi3_sequence_sweep_compiles_twice():
    """transformers' Phi-3 from a config (fused qkv and gate_up projections), with and without
    a cache: a sequence sweep compiles twice and every call equals eager."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    m = transformers.Phi3ForCausalLM(transformers.Phi3Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=100, max_position_embeddings=128,
        pad_token_id=0)).eval()
    for cache in (False, True):
        fn = lambda ids: m(input_ids=ids, use_cache=cache).logits   # noqa: E731
        assert _sweep(fn, lambda s: (torch.randint(1, 100, (2, s)),), [5, 8, 13, 21, 40]) == 2


@pytest.mark.parametrize("name,fn", [
    ("reshape_loaded", lambda h: torch.nn.functional.linear(h, QKV)[..., 96:].reshape(-1, 32) * 2),
    ("reshape_returned", lambda h: torch.nn.functional.linear(h, QKV)[..., 96:].reshape(-1, 32)),
    ("flatten_summed", lambda h: torch.nn.functional.linear(h, QKV)[..., 64:96].flatten(0, 1).sum(-1)),
    ("heads_flattened", lambda h: torch.nn.functional.linear(h, QKV).view(
        h.shape[0], h.shape[1], 4, 32)[..., 8:24].reshape(-1, 16) + 1),   # through the source view
])
def test_flatten_of_a_piece_at_an_offset(name, fn):
    """A view whose dim walks several dims of its dense base as one (the batch and sequence
    of a piece of the fused projection, flattened) at a constant offset: its stride is the
    inner dim's at every size, its size their product."""
    assert _sweep(fn, lambda s: (torch.randn(2, s, 32),), [5, 8, 13, 40]) == 2
    assert _sweep(fn, lambda n: (torch.randn(n, 3, 32),), [2, 5, 9]) == 2


def test_flatten_adjacent_only_at_the_example_is_not_merged():
    """x[:, :y.shape[1]].reshape(-1, 8) is a view only where the cut is the whole dim (at the
    first sizes): the kernel does not walk its batch and sequence as one at other sizes."""
    def f(x, y):
        return x[:, : y.shape[1]].reshape(-1, 8) * 2
    cdynamo.reset()
    opt = cdynamo.optimize(f)
    for n, m in [(5, 5), (8, 8), (13, 13), (20, 7), (9, 3), (6, 6)]:
        x, y = torch.randn(2, n, 8), torch.randn(2, m)
        assert_same(f(x, y), opt(x, y))


# fuzzer findings (fzdyn): a floor division of sizes printed into C as one factor of a
# product (`s2*((s1) / 2)`, it was `s2*(s1) / 2` = (s2*s1) / 2), rounding down when negative
@pytest.mark.parametrize("name,fn,shapes", [
    ("index_at_half_of_a_cut", lambda x: x[2:-1][x[2:-1].size(0) // 2] * 1,
     [(6, 3, 4), (9, 5, 3), (7, 2, 5)]),
    ("narrow_of_a_row_by_half", lambda x: x[3].narrow(0, 1, x[3].shape[0] - x[3].shape[0] // 2) * 1,
     [(6, 3, 4), (5, 5, 3), (7, 4, 5)]),
    ("narrow_start_at_half", lambda x: x[3].narrow(0, x[3].shape[0] // 2, 2) * 1,
     [(6, 3, 4), (5, 5, 3), (7, 4, 5)]),
    ("index_and_slice_by_floor_divisions", lambda x: x[x.shape[0] // 2, :, x.shape[2] // 3:] * 1,
     [(5, 3, 7), (4, 3, 5), (7, 5, 8)]),
    ("negative_floor_division_in_a_length",
     lambda x: x.narrow(1, 0, x.shape[1] + (x.shape[1] - 7) // 2) * 1, [(2, 3), (3, 5), (2, 4)]),
    ("negative_floor_division_at_the_start",
     lambda x: x[:, x.shape[1] + (x.shape[1] - 7) // 3:] * 1, [(2, 3), (3, 5), (2, 4), (2, 9)]),
])
def test_floor_divisions_of_sizes_in_kernels_equal_eager(name, fn, shapes):
    cdynamo.reset()
    opt = cdynamo.optimize(fn, dynamic=True)
    for sh in shapes:
        x = torch.arange(float(torch.Size(sh).numel())).view(sh)
        assert_same(fn(x), opt(x))


def test_input_transposed_in_place_under_dynamic_restrides_at_each_size():
    """a0.t_() on an argument: the restride after the graph has the traced sizes, so the
    argument's sizes are pinned (one compile a size), not replayed at other sizes."""
    def f(a0):
        a0.t_()
        return a0 * 1
    cdynamo.reset()
    opt = cdynamo.optimize(f, dynamic=True)
    for sh in [(7, 3), (9, 4), (5, 6)]:
        x = torch.randn(sh)
        y = x.clone()
        assert_same(f(y), opt(x))
        assert x.shape == y.shape and x.stride() == y.stride()


@pytest.mark.parametrize("name,fn", [
    ("index_view_detach", lambda a: a[-1].view(1).detach()),
    ("slice_index_view_slice_detach", lambda a: a[:][-1].view(1)[a[-1].dim():].detach()),
    ("index_unsqueeze_detach", lambda a: a[-2].unsqueeze(0).detach()),
])
def test_detached_view_at_an_offset_from_sizes_aliases_the_input(name, fn):
    """fuzz views_wrong_e833784530: a view at an offset from sizes (a[-1]) with a size-1 dim
    is realized by as_strided with stride 0 there; an extern (detach) of it kept torch's
    strides, but the result was copied to the traced strides for the size-1 dim's stride
    alone, so it no longer aliased the input.  Now it is a view of the input as in eager."""
    cdynamo.reset()
    opt = cdynamo.optimize(fn, dynamic=True)
    for n in (8, 8, 5, 11):
        a = torch.arange(n, dtype=torch.int16)
        e, r = fn(a), opt(a)
        assert_same(e, r)
        assert r.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
        assert r.storage_offset() == e.storage_offset()
        a[-1 if name != "index_unsqueeze_detach" else -2] = 99
        assert r.tolist() == e.tolist() == [99]


@pytest.mark.parametrize("shapes", [[(6, 2, 8), (7, 5, 11), (6, 3, 4)],
                                    [(6, 5, 8), (6, 2, 8), (7, 8, 3)]])
def test_contiguous_of_a_cut_follows_eager_at_every_size(shapes):
    """fuzz views_wrong_4ed6b3d22a: a0[:, n // 3:] is whole at n == 2, where contiguous()
    returns its input; at n == 5 eager copies.  The symbolic graph kept the example's
    choice (a view with the input's strides).  A cut's sizes now pin at contiguous()."""
    def f(a0):
        return a0[:, a0.shape[1] // 3:].contiguous()
    cdynamo.reset()
    opt = cdynamo.optimize(f, dynamic=True)
    for sh in shapes:
        a = torch.arange(torch.Size(sh).numel()).reshape(sh)
        e, r = f(a), opt(a)
        assert_same(e, r)
        assert r.stride() == e.stride()
        assert (r.data_ptr() == a.data_ptr()) == (e.data_ptr() == a.data_ptr())


def test_contiguous_of_a_transpose_stays_symbolic():
    """Only a cut pins at contiguous(): a transpose's layout follows the order of its dims."""
    def f(a0):
        return a0.transpose(1, 2).contiguous() * 2
    cdynamo.reset()
    opt = cdynamo.optimize(f, dynamic=True)
    for sh in [(3, 4, 5), (4, 6, 7), (5, 7, 9)]:
        a = torch.randn(sh)
        e, r = f(a), opt(a)
        assert_same(e, r)
        assert r.stride() == e.stride()
    assert cdynamo.stats()["frames_compiled"] == 1


def test_contiguous_after_an_added_dim_stays_symbolic():
    """x[:, :, None] cuts nothing (a 'c' view of whole dims): repeat_kv's expand and
    reshape (a contiguous() inside the reshape) keep their sizes symbolic."""
    def f(x):
        b, h, s, d = x.shape
        return x[:, :, None, :, :].expand(b, h, 2, s, d).reshape(b, h * 2, s, d) * 0.5
    cdynamo.reset()
    opt = cdynamo.optimize(f, dynamic=True)
    for s in (16, 40, 9):
        x = torch.randn(2, 4, s, 8)
        assert_same(f(x), opt(x))
    assert cdynamo.stats()["frames_compiled"] == 1


def test_contiguous_of_a_cut_from_a_constant_start_stays_symbolic():
    """x[:, 1:] never covers its dim (a constant start past 0): whether contiguous()
    copies it does not change with the sizes, so the sizes stay symbolic."""
    def f(x):
        return x[:, 1:].contiguous() * 2
    cdynamo.reset()
    opt = cdynamo.optimize(f, dynamic=True)
    for sh in [(3, 4, 5), (4, 6, 7), (5, 7, 9)]:
        x = torch.randn(sh)
        e, r = f(x), opt(x)
        assert_same(e, r)
        assert r.stride() == e.stride()
    assert cdynamo.stats()["frames_compiled"] == 1
