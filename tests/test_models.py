"""Whole models under cdynamo.optimize(module): MLP, CNN, hand-written transformer
blocks, nn.TransformerEncoderLayer and a small T5 from transformers, compared with
eager; plus the module view returned by optimize (state_dict, train/eval, hooks,
parameters as inputs, grad mode)."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import cdynamo


def close(actual, expected, **kw):
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5, **kw)


def run_model(model, *args, calls=2, one_graph=True, **kwargs):
    """Eager vs optimize(model) under no_grad, `calls` times; returns the last output."""
    with torch.no_grad():
        expected = model(*args, **kwargs)
        opt = cdynamo.optimize(model)
        for _ in range(calls):
            out = opt(*args, **kwargs)
            close(out, expected)
    st = cdynamo.stats()
    if one_graph:
        assert st["frames_compiled"] == 1, st
        assert st["graph_breaks"] == 0 and st["fallbacks"] == 0, (st, cdynamo._support.breaks)
        assert len(cdynamo._support.compiles) == 1, [c["function"] for c in cdynamo._support.compiles]
        if calls > 1:
            assert st["cache_hits"] >= calls - 1, st
            assert st["recompiles"] == 0, st
    return out


# --------------------------------------------------------------------------- models

def make_mlp():
    return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(),
                         nn.Linear(32, 5))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 2)
        x = torch.relu(self.bn2(self.conv2(x)))
        x = self.pool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


def make_cnn():
    m = CNN()
    # non-trivial running statistics so that eval-mode BatchNorm matters
    with torch.no_grad():
        for bn in (m.bn1, m.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
    return m.eval()


class Block(nn.Module):
    """Pre-norm transformer block written by hand."""

    def __init__(self, dim=32, heads=4, hidden=64):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q = q.view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.heads, self.head_dim).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * self.scale
        att = att.softmax(dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


class Stack(nn.Module):
    def __init__(self, n=3, dim=32):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(n)])
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.ln_f(x)


def test_mlp():
    torch.manual_seed(0)
    run_model(make_mlp(), torch.randn(6, 12))


def test_cnn_eval_batchnorm():
    torch.manual_seed(0)
    m = make_cnn()
    run_model(m, torch.randn(2, 3, 16, 16))
    graph = cdynamo._support.compiles[0]["graph"]
    assert "extern(" in graph  # conv, batch_norm, pooling go through torch


def test_transformer_block():
    torch.manual_seed(0)
    run_model(Block().eval(), torch.randn(2, 7, 32))


def test_transformer_stack_modulelist():
    torch.manual_seed(0)
    run_model(Stack(n=3).eval(), torch.randn(2, 5, 32))


def test_nn_transformer_encoder_layer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                       batch_first=True).eval()
    x = torch.randn(2, 6, 32)
    run_model(layer, x, one_graph=False)


def test_t5_small():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.T5Config(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                num_heads=4)
    model = transformers.T5Model(cfg).eval()
    input_ids = torch.randint(0, 512, (2, 9))
    decoder_input_ids = torch.randint(0, 512, (2, 5))
    with torch.no_grad():
        expected = model(input_ids=input_ids, decoder_input_ids=decoder_input_ids)
        opt = cdynamo.optimize(model)
        for i in range(3):
            out = opt(input_ids=input_ids, decoder_input_ids=decoder_input_ids)
            close(out.last_hidden_state, expected.last_hidden_state)
            close(out.encoder_last_hidden_state, expected.encoder_last_hidden_state)
            # the decoder's cache, filled by the compiled layers' replayed attribute stores
            for name in ("self_attention_cache", "cross_attention_cache"):
                got_c, want_c = (getattr(o.past_key_values, name) for o in (out, expected))
                assert len(got_c.layers) == len(want_c.layers) == 2
                for g, w in zip(got_c.layers, want_c.layers):
                    close(g.keys, w.keys)
                    close(g.values, w.values)
            if i == 0:
                compiled = cdynamo.stats()["frames_compiled"]
        # the cache objects are new on every call: guarded by type, no recompiles after the first
        assert cdynamo.stats()["frames_compiled"] == compiled


# --------------------------------------------------------------------------- module view

def test_state_dict_and_parameters_shared():
    torch.manual_seed(0)
    m = make_mlp()
    opt = cdynamo.optimize(m)
    assert isinstance(opt, nn.Sequential)
    assert type(opt).__name__ == type(m).__name__
    sd, osd = m.state_dict(), opt.state_dict()
    assert list(sd) == list(osd)
    for k in sd:
        assert osd[k] is sd[k] or osd[k].data_ptr() == sd[k].data_ptr(), k
    for (n1, p1), (n2, p2) in zip(m.named_parameters(), opt.named_parameters()):
        assert n1 == n2 and p1 is p2
    assert opt[0] is m[0]


def test_train_eval_reflected_in_original():
    m = make_cnn()
    opt = cdynamo.optimize(m)
    assert not m.training and not opt.training
    opt.train()
    assert m.training and m.bn1.training
    opt.eval()
    assert not m.training and not m.bn1.training
    m.train()
    assert opt.training


def test_forward_hook_runs():
    torch.manual_seed(0)
    m = make_mlp()
    opt = cdynamo.optimize(m)
    seen = []

    def hook(mod, inputs, output):
        seen.append(output.shape)
        return output * 2

    opt.register_forward_hook(hook)
    x = torch.randn(3, 12)
    with torch.no_grad():
        out = opt(x)
        out2 = opt(x)
    assert seen == [torch.Size([3, 5])] * 2
    # the hook is shared with the original module (same __dict__)
    with torch.no_grad():
        expected = m(x)
    close(out, expected)
    close(out2, expected)
    assert len(seen) == 3


def test_inplace_weight_update_seen_without_recompile():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = cdynamo.optimize(m)
    x = torch.randn(4, 8)
    with torch.no_grad():
        first = opt(x)
        close(first, m(x))
        m[2].weight.mul_(2)
        m[0].bias.add_(0.5)
        second = opt(x)
        expected = m(x)
    close(second, expected)
    assert not torch.allclose(first, second)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["recompiles"] == 0, st
    assert st["cache_hits"] >= 1, st


def test_param_replaced_by_new_tensor():
    # assigning a new Parameter of the same shape: still the right result
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
    opt = cdynamo.optimize(m)
    x = torch.randn(4, 8)
    with torch.no_grad():
        opt(x)
        m[0].weight = nn.Parameter(torch.randn(8, 8))
        close(opt(x), m(x))


class TrainAware(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.fc(x)
        if self.training:
            return y * 2
        return y - 1


def test_train_eval_switch_recompiles():
    torch.manual_seed(0)
    m = TrainAware().eval()
    opt = cdynamo.optimize(m)
    x = torch.randn(4, 8)
    with torch.no_grad():
        close(opt(x), m(x))
        assert cdynamo.stats()["frames_compiled"] == 1
        opt.train()
        close(opt(x), m(x))
        st = cdynamo.stats()
        assert st["frames_compiled"] == 2 and st["recompiles"] == 1, st
        opt.eval()
        close(opt(x), m(x))  # the eval entry is still cached
        opt.train()
        close(opt(x), m(x))
    st = cdynamo.stats()
    assert st["frames_compiled"] == 2 and st["graph_breaks"] == 0, st
    assert st["cache_hits"] >= 2, st


def test_batchnorm_train_mode_updates_running_stats():
    import copy
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU()).eval()
    ref = copy.deepcopy(m)
    opt = cdynamo.optimize(m)
    x = torch.randn(6, 8)
    with torch.no_grad():
        close(opt(x), ref(x))
        m.train()
        ref.train()
        for _ in range(2):
            close(opt(x), ref(x))
    close(m[1].running_mean, ref[1].running_mean)
    close(m[1].running_var, ref[1].running_var)
    assert int(m[1].num_batches_tracked) == int(ref[1].num_batches_tracked) == 2


def test_grad_enabled_gives_eager_results():
    torch.manual_seed(0)
    m = make_mlp()
    opt = cdynamo.optimize(m)
    x = torch.randn(3, 12)
    expected = m(x)
    for _ in range(2):
        out = opt(x)
        close(out, expected)
        assert out.requires_grad == expected.requires_grad
    # backward works as in eager
    out.sum().backward()
    g = m[0].weight.grad.clone()
    m.zero_grad()
    expected.sum().backward()
    close(g, m[0].weight.grad)


def test_grad_enabled_no_param_grad():
    # inputs that do not require grad through a model whose params do not either
    torch.manual_seed(0)
    m = make_mlp().requires_grad_(False)
    opt = cdynamo.optimize(m)
    x = torch.randn(3, 12)
    expected = m(x)
    out = opt(x)
    close(out, expected)
    assert out.requires_grad == expected.requires_grad is False


def test_t5_tiny_attention_compiles():
    """A small T5 (transformers; random weights): eager's result, as one graph."""
    tr = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = tr.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                      num_decoder_layers=2, num_heads=4)
    model = tr.T5Model(cfg).eval()
    ids = torch.randint(0, 100, (1, 8))

    def f(ids):
        return model(input_ids=ids, decoder_input_ids=ids).last_hidden_state

    with torch.no_grad():
        expected = f(ids)
        opt = cdynamo.optimize(f)
        for _ in range(3):
            close(opt(ids), expected)
    # the whole model is one graph (issue 31): no break, one compile of f
    assert not cdynamo._support.breaks, cdynamo._support.breaks
    done = [(c["function"], c["op_count"]) for c in cdynamo._support.compiles]
    assert len(done) == 1 and done[0][0] == "f" and done[0][1] > 100, done
