"""Linear layers with a packed weight (runtime/linear.c, trace/lower_linear.c): results
equal to eager's, the pack made again whenever the weight changes, grad mode and
cdynamo.config.pack_linear_weights respected."""
import pytest
import torch

import cdynamo


def _mlp(seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(),
                               torch.nn.Linear(256, 64)).eval().to(dtype)


def _close(actual, expected):
    # oneDNN's product sums in another order than MKL's
    assert actual.shape == expected.shape and actual.stride() == expected.stride()
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.fixture
def always(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "pack_linear_weights", "always")


def test_packed_linear_matches_eager_and_packs_each_weight_once(always):
    m, x = _mlp(), torch.randn(4, 8, 128)
    opt = cdynamo.optimize(m)
    with torch.no_grad():
        for _ in range(3):
            _close(opt(x), m(x))
    st = cdynamo.stats()
    assert st["packed_linear_calls"] == 6 and st["weight_packs"] == 2, st
    assert st["graph_breaks"] == 0 and st["frames_compiled"] == 1, st


def test_a_changed_weight_is_packed_again(always):
    m, x = _mlp(), torch.randn(16, 128)
    opt = cdynamo.optimize(m)
    with torch.no_grad():
        _close(opt(x), m(x))
        m[0].weight.mul_(0.5)                          # in place: its version counter moves
        _close(opt(x), m(x))
        m[2].weight.data = torch.randn(64, 256)        # new data under the same Parameter
        _close(opt(x), m(x))
        m.load_state_dict(_mlp(seed=1).state_dict())   # copy_ into every parameter
        _close(opt(x), m(x))
        _close(opt(x), m(x))                           # unchanged: the packs are reused
    assert cdynamo.stats()["weight_packs"] == 2 + 1 + 1 + 2


def test_grad_mode_runs_torchs_linear(always):
    m, x = _mlp(), torch.randn(16, 128)
    opt = cdynamo.optimize(m)
    y = opt(x)                # parameters require grad: autograd, eager (a graph break)
    y.sum().backward()
    assert y.requires_grad and m[0].weight.grad is not None
    assert cdynamo.stats()["packed_linear_calls"] == 0
    with torch.no_grad():     # the eager entry is for grad mode only: this one compiles
        _close(opt(x), m(x))
    assert cdynamo.stats()["packed_linear_calls"] == 2 and cdynamo.stats()["frames_compiled"] == 1
    assert opt(x).requires_grad                      # grad mode again: the first entry
    assert cdynamo.stats()["packed_linear_calls"] == 2


def test_config_off_small_and_float64_layers_keep_torchs_linear(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "pack_linear_weights", False)
    m, x = _mlp(), torch.randn(16, 128)
    with torch.no_grad():
        _close(cdynamo.optimize(m)(x), m(x))
        monkeypatch.setattr(cdynamo.config, "pack_linear_weights", "always")
        small = torch.nn.Linear(32, 16).eval()        # below 64 x 64: not worth a pack
        xs = torch.randn(8, 32)
        # through a function: optimize(small) itself would mark nn.Linear.forward (torch's
        # code, shared by every Linear) as traced for the rest of the process
        torch.testing.assert_close(cdynamo.optimize(lambda x: small(x))(xs), small(xs),
                                   rtol=0, atol=0)
        m64 = _mlp(dtype=torch.float64)
        torch.testing.assert_close(cdynamo.optimize(m64)(x.double()), m64(x.double()))
    assert cdynamo.stats()["packed_linear_calls"] == 0


def test_timed_choice_gives_eager_results(monkeypatch):
    # True: the first call times both forms and keeps the faster; either way eager's values
    m, x = _mlp(), torch.randn(32, 128)
    opt = cdynamo.optimize(m)
    with torch.no_grad():
        for _ in range(3):
            _close(opt(x), m(x))
    st = cdynamo.stats()
    # each layer keeps its choice: 0 or 3 packed calls per layer
    assert st["weight_packs"] <= 2 and st["packed_linear_calls"] in (0, 3, 6), st


def test_a_weight_new_on_every_call_goes_back_to_torchs_linear(always):
    # an argument, not a parameter: packing it on every call would cost a pack per call
    x = torch.randn(16, 128)
    opt = cdynamo.optimize(lambda x, w: torch.nn.functional.linear(x, w))
    with torch.no_grad():
        for i in range(6):
            w = torch.randn(96, 128)
            _close(opt(x, w), torch.nn.functional.linear(x, w))
    st = cdynamo.stats()
    assert st["weight_packs"] == 4 and st["packed_linear_calls"] == 4, st   # then unpacked
    assert st["frames_compiled"] == 1, st
