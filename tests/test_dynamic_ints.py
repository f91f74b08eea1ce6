"""Python ints as symbols (issue 32's automatic dynamic ints): an int argument (or an
attribute read through a guarded source) whose value changed since an earlier entry becomes
an int symbol at the recompile instead of a value guard; its uses follow the symbolic-int
rules (arithmetic, comparisons as guards, slices, a tensor's scalar operand); 0, 1 and
negative ints specialize; a use without a rule keeps the value guard."""
import pytest
import torch

import cdynamo
from conftest import sweep_compiles


def _log(capfd, fn, calls):
    """Run optimize(fn) on each args tuple of calls with the recompiles log on, checking
    each result against eager: the log's lines."""
    cdynamo.reset()
    opt = cdynamo.optimize(fn)
    capfd.readouterr()
    cdynamo._C.set_log_topics({"recompiles"})
    try:
        with torch.no_grad():
            for args in calls:
                torch.testing.assert_close(opt(*args), fn(*args))
    finally:
        cdynamo._C.set_log_topics(set())
    return capfd.readouterr().err


X = torch.randn(4, 64)


def test_int_scale_and_slice_sweep_compiles_twice():
    def f(x, n):
        return x * n + x[:, :n].sum()
    assert sweep_compiles(f, lambda n: (X, n), [3, 5, 7, 9, 20, 33, 64]) == 2


def test_int_added_to_a_tensor_compiles_twice():
    def f(x, n):
        return x + n - 1
    assert sweep_compiles(f, lambda n: (X, n), [2, 3, 17, 1000]) == 2


def test_int_arithmetic_and_arange_compile_twice():
    def f(x, n):
        m = n * 2 + 1
        return torch.arange(n, m).float() * 2 + x[0, 0]
    assert sweep_compiles(f, lambda n: (X, n), [3, 5, 8, 30]) == 2


def test_int_comparison_is_a_guard():
    def f(x, n):
        if n > 10:
            return x[:n * 2] - n
        return x[:n] + n
    xs = torch.randn(40, 3)
    # 3: static; 5: symbolic with n <= 10; 12: the comparison fails, symbolic with n > 10
    assert sweep_compiles(f, lambda n: (xs, n), [3, 5, 7, 12, 15, 4, 18]) == 3


def test_zero_one_and_negative_ints_specialize(capfd):
    def f(x, n):
        return x * n + x[:, :n].sum()
    err = _log(capfd, f, [(X, n) for n in [3, 5, 1, 0, 100, 65, -3, 9]])
    assert "int 'n' became dynamic: its value changed since an earlier entry (value 5)" in err
    assert "s0 = int 'n' is symbolic" in err
    assert "symbol s0 is the int 1: 0, 1 and negative ints are not symbolic" in err
    assert "symbol s0 is the int -3" in err


def test_recompile_log_names_the_int(capfd):
    def f(x, n):
        return x + n
    err = _log(capfd, f, [(X, 3), (X, 4), (X, 5), (X, 6)])
    assert "value mismatch for 'n'. expected 3, actual 4" in err
    assert "int 'n' became dynamic" in err
    assert err.count("Recompiling function") == 1


def test_int_attribute_of_an_argument_object():
    class Cfg:
        def __init__(self, k):
            self.k = k

    def f(x, c):
        return x[:, :c.k] * c.k
    assert sweep_compiles(f, lambda k: (X, Cfg(k)), [3, 5, 9, 40]) == 2


def test_int_returned_or_used_without_a_rule_stays_guarded():
    def f(x, n):
        return x + 1, n + 1           # the returned int needs its value: a value guard
    assert sweep_compiles(f, lambda n: (X, n), [3, 5, 7]) == 3

    def g(x, n):
        return x + float(n)           # float(): no rule, the value is guarded
    assert sweep_compiles(g, lambda n: (X, n), [3, 5, 7]) == 3


def test_dynamic_false_keeps_ints_static():
    def f(x, n):
        return x * n
    cdynamo.reset()
    opt = cdynamo.optimize(f, dynamic=False)
    with torch.no_grad():
        for n in [3, 5, 7]:
            torch.testing.assert_close(opt(X, n), f(X, n))
    assert cdynamo.stats()["frames_compiled"] == 3


def test_dynamic_true_makes_int_arguments_symbolic():
    def f(x, n):
        return x * n + x[:, :n].sum()
    cdynamo.reset()
    opt = cdynamo.optimize(f, dynamic=True)
    with torch.no_grad():
        for n in [3, 5, 7, 20]:
            torch.testing.assert_close(opt(X, n), f(X, n))
    assert cdynamo.stats()["frames_compiled"] == 1


class _Counter:
    def __init__(self):
        self.n = 0


def test_attribute_store_of_an_int_symbol_replays_its_value():
    # c.n += k: the replayed store computes c.n + k from the call's c.n, not the first
    # call's constant; the slice by c.n stays symbolic
    def f(x, c):
        c.n += x.shape[0]
        return x[:, :c.n] * 2
    cdynamo.reset()
    opt = cdynamo.optimize(f)
    x = torch.randn(2, 50)
    c, ce = _Counter(), _Counter()
    with torch.no_grad():
        for _ in range(12):
            torch.testing.assert_close(opt(x, c), f(x, ce))
            assert c.n == ce.n
    st = cdynamo.stats()
    assert st["frames_compiled"] == 2 and st["eager_reruns"] == 0, st


def test_attribute_store_of_an_int_times_a_constant():
    def f(x, c):
        c.n = c.n * 2 + 1
        return x + c.n
    cdynamo.reset()
    opt = cdynamo.optimize(f)
    c, ce = _Counter(), _Counter()
    c.n = ce.n = 2
    with torch.no_grad():
        for _ in range(6):
            torch.testing.assert_close(opt(X, c), f(X, ce))
            assert c.n == ce.n
    assert cdynamo.stats()["frames_compiled"] == 2


def test_min_max_of_int_symbols_are_guarded_choices():
    def f(x, n):
        return x[:, max(n - 5, 0):] * min(n, 9)
    # 6: static; 7: symbolic (n - 5 >= 0, n <= 9); 10: min's comparison flips; 3: max's
    assert sweep_compiles(f, lambda n: (X, n), [6, 7, 8, 10, 12, 20, 3]) == 4

    def g(x, n):
        return x + min(n, 9) - max(n, 3)
    assert sweep_compiles(g, lambda n: (X, n), [4, 5, 6, 7, 8]) == 2


def test_first_call_of_an_int_symbol_entry_runs_compiled():
    def f(x, n):
        return x * n
    cdynamo.reset()
    opt = cdynamo.optimize(f)
    with torch.no_grad():
        for n in [3, 4]:
            torch.testing.assert_close(opt(X, n), f(X, n))
    st = cdynamo.stats()
    assert st["frames_compiled"] == 2 and st["eager_reruns"] == 0, st


def test_mistral_sliding_window_generate():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.MistralConfig(
        vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        sliding_window=8)
    model = transformers.MistralForCausalLM(cfg).eval()
    ids = torch.randint(3, 256, (1, 6))
    kw = dict(max_new_tokens=24, min_new_tokens=24, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        ref = model.generate(ids, **kw)
        cdynamo.reset()
        model.forward = cdynamo.optimize(model.forward)
        out = model.generate(ids, **kw)
    assert torch.equal(out, ref)
    st = cdynamo.stats()
    # prefill (static), the cache not yet full, the first full step (the cache still
    # contiguous), the cache full (a non-contiguous view, its length specialized): then
    # every later token runs an existing entry (was: a recompile per token)
    assert st["frames_compiled"] <= 4 and st["eager_reruns"] == 0, st


def test_int_symbol_through_keyword_arguments_dict():
    # a call with **kwargs builds a dict (BUILD_CONST_KEY_MAP): its values move with their
    # symbolic ints into the callee
    def inner(x, *, n, k=1):
        return x[:, :n] * k

    def f(x, n):
        extra = {}
        return inner(x, n=n, k=2, **extra)
    assert sweep_compiles(f, lambda n: (X, n), [3, 5, 9, 40]) == 2
