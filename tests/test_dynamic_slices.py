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


def test_slice_start_inside_a_symbolic_dim_specializes_that_dim_only():
    def f(x):
        return x[:, 1:] * 3
    cdynamo.reset()
    opt = cdynamo.optimize(f)
    for b in [2, 3, 5, 9]:
        x = torch.randn(b, 7)
        assert_same(f(x), opt(x))
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


def test_int_index_inside_a_dim_specializes_that_dim_only():
    """x[:, -1] (the last token's logits): a batch sweep compiles twice; its indexed dim is a
    number (a sweep over it would compile per length)."""
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
