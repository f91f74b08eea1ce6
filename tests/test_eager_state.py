"""What eager's state is after a compiled call, where the trace could get it wrong.
Torch's generators after a compiled call are as eager leaves them: the trace draws
nothing (a random factory without tensor arguments runs for real when traced: its
generator's state is put back), and a graph that raises after drawing is rerun eagerly
from the state before it, training graphs included.  An input's storage_offset() is its
own, not its fake's."""
import pytest
import torch
from torch.testing import assert_close

import cdynamo


def _draws(fn, *args, gen=None):
    """fn(*args) from seed 0 (its exception's type, or its result), then the next draw."""
    torch.manual_seed(0)
    if gen is not None:
        gen.manual_seed(1)
    try:
        out = fn(*args)
    except Exception as e:  # noqa: BLE001
        out = type(e)
    nxt = (gen if gen is not None else torch.default_generator)
    return out, torch.rand(4, generator=nxt)


def test_first_call_leaves_the_default_generator_as_eager():
    def f(x):
        return x * torch.rand(8, 8) + torch.randn(8, 8)
    x = torch.randn(8, 8)
    want, want_next = _draws(f, x)
    g = cdynamo.optimize(f)
    for _ in range(3):   # the compiling call, then cached calls
        got, got_next = _draws(g, x)
        assert_close(got, want)
        assert torch.equal(got_next, want_next)
    assert cdynamo.stats()["frames_compiled"] >= 1


def test_first_call_leaves_a_given_generator_as_eager():
    def f(x, gen):
        return x + torch.randint(0, 100, (8,), generator=gen)
    x = torch.zeros(8, dtype=torch.int64)
    gen = torch.Generator()
    want, want_next = _draws(f, x, gen, gen=gen)
    g = cdynamo.optimize(f)
    for _ in range(2):
        got, got_next = _draws(g, x, gen, gen=gen)
        assert torch.equal(got, want)
        assert torch.equal(got_next, want_next)


@pytest.mark.parametrize("grad", [False, True])
def test_graph_raising_after_a_draw_reruns_from_the_state_before(grad):
    def f(x):
        y = (x * torch.rand(8, 8)).sum()
        return y + torch.linalg.cholesky(-torch.eye(3)).sum()   # not positive-definite: raises
    x = torch.randn(8, 8, requires_grad=grad)
    want, want_next = _draws(f, x)
    assert isinstance(want, type) and issubclass(want, RuntimeError)
    g = cdynamo.optimize(f)
    before = cdynamo.stats()["eager_reruns"]
    for _ in range(3):
        got, got_next = _draws(g, x)
        assert got is want
        assert torch.equal(got_next, want_next)
    assert cdynamo.stats()["eager_reruns"] - before >= 2


def _sdpa_drop(x):
    q = x.view(2, 4, 8)
    return torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.5)


_DRAWS = {   # every spelling the one detector (cdy_pynode_draws_rng) must see as a draw
    "dropout_train": lambda x: torch.nn.functional.dropout(x, 0.5, training=True),  # bernoulli.p
    "bernoulli_p": lambda x: torch.ops.aten.bernoulli.p(x, 0.5),
    "bernoulli_method": lambda x: x.detach().clamp(0, 1).bernoulli(),
    "randn_like": lambda x: x + torch.randn_like(x),
    "native_dropout": lambda x: torch.ops.aten.native_dropout.default(x, 0.5, True)[0],
    "sdpa_dropout": _sdpa_drop,
}


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("kind", sorted(_DRAWS))
def test_rerun_after_a_raise_restores_every_kind_of_draw(kind, grad):
    """A graph whose only draw is dropout's bernoulli.p (the C operator call of training
    dropout), attention's dropout or another extern spelling puts the default generator
    back before its eager rerun: the state after the raise is eager's (stop 48: draws_rng
    knew neither bernoulli.p nor attention's dropout_p, and the rerun drew twice)."""
    draw = _DRAWS[kind]

    def f(x):
        y = (draw(x) * 2).sum()
        return y + torch.linalg.cholesky(-torch.eye(3)).sum()   # raises after the draw
    x = torch.randn(8, 8, requires_grad=grad)
    want, want_next = _draws(f, x)
    assert want is torch.linalg.LinAlgError
    g = cdynamo.optimize(f)
    before = cdynamo.stats()["eager_reruns"]
    for _ in range(2):
        got, got_next = _draws(g, x)
        assert got is want
        assert torch.equal(got_next, want_next)
    # no derivative formula (NO_DERIVATIVE): with grad the frame runs eagerly
    compiled = not (grad and kind in ("native_dropout", "randn_like"))
    assert (cdynamo.stats()["eager_reruns"] - before >= 1) == compiled


def test_storage_offset_of_an_input_is_eager_s():
    """A fake sits at offset 0 whatever its input's offset: storage_offset() stops the trace
    (NEEDS_DATA) and the frame runs eagerly, rather than giving 0 (fuzz finding of stop 48)."""
    from cdynamo import _support
    v = torch.arange(100.0)[1:]
    assert cdynamo.optimize(lambda t: t.storage_offset())(v) == 1
    f = lambda t: t.as_strided((3, 8), (2, 7), t.storage_offset()) * 2   # noqa: E731
    assert_close(cdynamo.optimize(f)(v), f(v))
    assert "NEEDS_DATA" in [b["code"] for b in _support.breaks]
