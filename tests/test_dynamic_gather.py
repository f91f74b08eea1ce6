"""Dynamic shapes (issue 32): torch.gather, index_select and embedding keep sizes symbolic
(each GATHER node's sizes: its source's kept dims, its index's), torch.diff's result follows
its input, and an index into an expanded dim ranges over that dim's symbolic size, so
sequence sweeps of BERT and GPT-2 from configs, and batch sweeps of transformers' masks
without a cache, compile twice and every call equals eager.
Out-of-range indices raise eager's error type at a size the graph was not compiled at."""
import pytest
import torch

import cdynamo
from conftest import assert_same, sweep_compiles

SEQS = [5, 8, 13, 40, 100]


def _sweep(fn, make, seqs=SEQS):
    return sweep_compiles(fn, make, seqs)


POS = torch.arange(512).unsqueeze(0)
TT = torch.zeros(1, 512, dtype=torch.long)
TAB = torch.randn(512, 16)


def test_gather_of_a_buffer_by_sliced_positions():
    """BERT's token type ids: gather(buffer.expand(1, -1), 1, position_ids[:, :s])."""
    def f(ids):
        b, s = ids.shape
        p = POS[:, :s]
        t = torch.gather(TT.expand(p.shape[0], -1), dim=1, index=p).expand(b, s)
        return torch.nn.functional.embedding(ids, TAB) + torch.nn.functional.embedding(t, TAB)
    assert _sweep(f, lambda s: (torch.randint(0, 512, (2, s)),)) == 2


def test_gather_index_sizes_symbolic():
    """torch.gather's result has its index's sizes; the index's kept dim equals the input's."""
    def f(x, idx):
        return torch.gather(x, 1, idx) * 2.0 + 1.0
    assert _sweep(f, lambda s: (torch.randn(s, 32), torch.randint(0, 32, (s, 4)))) == 2


def test_gather_of_a_pointwise_source():
    """The producer of the source fuses with the gather (its GATHER leaves carry the map)."""
    def f(x, idx):
        return torch.gather(torch.relu(x) + 1.0, 1, idx)
    assert _sweep(f, lambda s: (torch.randn(3, s), torch.randint(0, 2, (3, 7)))) == 2


def test_index_select_of_a_symbolic_source():
    def f(x, idx):
        return torch.index_select(x, 0, idx) + 1.0
    assert _sweep(f, lambda s: (torch.randn(s, 8), torch.randint(0, 5, (s,)))) == 2


def test_embedding_then_layer_norm_reads_the_gather_at_runtime_strides():
    """A realized embedding read by a row kernel's prologue: strides follow the size."""
    w, b = torch.randn(16), torch.randn(16)
    def f(ids):
        e = torch.nn.functional.embedding(ids, TAB) + torch.nn.functional.embedding(
            POS[:, :ids.shape[1]], TAB)
        return torch.nn.functional.layer_norm(e, (16,), w, b)
    assert _sweep(f, lambda s: (torch.randint(0, 512, (2, s)),)) == 2


def test_diff_with_prepend_along_a_symbolic_dim():
    """masking_utils' find_packed_sequence_indices: diff(p, prepend=p[:, :1] - 1, dim=-1)."""
    def f(p):
        d = torch.diff(p, prepend=p[:, :1] - 1, dim=-1)
        return (d != 1).cumsum(-1) + p
    assert _sweep(f, lambda s: (torch.arange(s).unsqueeze(0).expand(2, -1).contiguous(),)) == 2


def test_take_along_dim_is_a_gather():
    def f(x, idx):
        return torch.take_along_dim(x, idx, dim=1) + 1.0
    assert _sweep(f, lambda s: (torch.randn(s, 32), torch.randint(0, 32, (s, 4)))) == 2


def test_take_along_dim_broadcast_stays_extern_and_equal():
    def f(x, idx):
        return torch.take_along_dim(x, idx, dim=1) + 1.0
    assert _sweep(f, lambda s: (torch.randn(s, 32), torch.randint(0, 32, (1, 4)))) <= 5


@pytest.mark.parametrize("op", ["gather", "index_select", "embedding", "take_along_dim"])
def test_out_of_range_index_raises_eager_error_at_a_new_size(op):
    def f(x, idx):
        if op == "gather":
            return torch.gather(x, 1, idx)
        if op == "take_along_dim":
            return x.take_along_dim(idx, dim=1)
        if op == "index_select":
            return torch.index_select(x, 0, idx.flatten())
        return torch.nn.functional.embedding(idx, x)
    def make(s, bad=False):
        x = torch.randn(s, 6)
        idx = torch.randint(0, 3, (s, 2))
        if bad:
            idx[1, 1] = 50
        return x, idx
    cdynamo.reset()
    opt = cdynamo.optimize(f)
    for s in (5, 8, 13):
        args = make(s)
        assert_same(f(*args), opt(*args))
    assert cdynamo.stats()["frames_compiled"] == 2
    args = make(21, bad=True)
    if op == "take_along_dim":   # eager (torch 2.13, CPU) reads unchecked (in the storage
        # here): the kernel's error reruns the frame eagerly, whose result is eager's
        assert_same(f(*args), opt(*args))
    else:
        with pytest.raises(Exception) as want:
            f(*args)
        with pytest.raises(want.type):
            opt(*args)
    assert cdynamo.stats()["frames_compiled"] == 2


def _hf(name):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if name == "bert":
        m = transformers.BertModel(transformers.BertConfig(
            vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128)).eval()
        return lambda ids: m(input_ids=ids).last_hidden_state
    m = transformers.GPT2Model(transformers.GPT2Config(
        vocab_size=512, n_embd=64, n_layer=2, n_head=4, n_positions=256)).eval()
    return lambda ids: m(input_ids=ids, use_cache=False).last_hidden_state


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_transformers_model_sequence_sweep_compiles_twice(name):
    fn = _hf(name)
    assert _sweep(fn, lambda s: (torch.randint(3, 512, (2, s)),), [5, 8, 13, 31, 64]) == 2


def test_outputs_equal_only_at_the_hint_are_separate_kernels():
    """A sequence length hinted 2 equals the batch 2: [2, s] and [s, 2] outputs are grouped
    by their size expressions, not the hints' sizes (GPT-2's sweep 1, 2, 3, ...)."""
    def f(x, y):
        return x + 1.0, y * 2.0
    assert _sweep(f, lambda s: (torch.randn(2, s), torch.randn(s, 2)), [1, 2, 3, 5, 8]) == 2


def test_gpt2_sweep_from_length_one():
    fn = _hf("gpt2")
    assert _sweep(fn, lambda s: (torch.randint(3, 512, (2, s)),), [1, 2, 3, 4, 6]) == 2


ROW = torch.randn(1, 8)


@pytest.mark.parametrize("name", ["advanced", "index_select", "two_indices"])
def test_index_into_an_expanded_dim_ranges_over_its_symbolic_size(name):
    """masking_utils' packed-sequence mask (no cache): position_ids.expand(batch, -1) indexed
    by arange(batch): the index's range is the expanded dim's size at every batch (the batch
    stays symbolic, it was pinned: one compile per batch), checked against eager's error at
    a size the graph was not compiled at, for an index of b and of -b - 1."""
    def f(x, i):
        p = ROW.expand(x.shape[0], -1)
        if name == "advanced":
            g = p[i]
        elif name == "index_select":
            g = torch.index_select(p, 0, i)
        else:
            g = p[i, i.remainder(8)]
        return g * x[:, :1]
    def make(b, bad=None):
        i = torch.arange(b).flip(0)
        if bad is not None:
            i[1] = bad
        return torch.randn(b, 8), i
    cdynamo.reset()
    opt = cdynamo.optimize(f)
    for b in (2, 3, 5, 9):
        args = make(b)
        assert_same(f(*args), opt(*args))
    assert cdynamo.stats()["frames_compiled"] == 2
    for bad in (11, -12) if name != "index_select" else (11,):
        args = make(11, bad)
        with pytest.raises(Exception) as want:
            f(*args)
        with pytest.raises(want.type):
            opt(*args)
    args = make(11, -11 if name != "index_select" else 10)   # in range: wraps (advanced)
    assert_same(f(*args), opt(*args))
    assert cdynamo.stats()["frames_compiled"] == 2


def test_packed_sequence_mask_keeps_the_batch_symbolic():
    """A LLaMA-style causal mask of transformers without a cache: a batch sweep and a
    sequence sweep each compile twice."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    m = transformers.LlamaModel(transformers.LlamaConfig(
        hidden_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=100)).eval()
    fn = lambda ids: m(input_ids=ids, use_cache=False).last_hidden_state   # noqa: E731
    assert _sweep(fn, lambda b: (torch.randint(1, 100, (b, 9)),), [2, 3, 4, 7]) == 2
    assert _sweep(fn, lambda s: (torch.randint(1, 100, (3, s)),), [5, 8, 13]) == 2
