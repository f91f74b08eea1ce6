"""Optimizer steps compile (issue 34): `cdynamo.optimize(opt.step)`, and opt.step() called
from a frame that runs eagerly, trace the step as its own frame under grad mode off
(torch.optim's _use_grad wrapper: OPTIM_STEP), its arithmetic one graph that updates the
parameters and the state (exp_avg, exp_avg_sq, max_exp_avg_sq, momentum_buffer, step) in
place.  The first step's lazy state init runs eagerly (OPTIM_STATE_MISSING), the second
call compiles, later calls reuse it.  Parameters and state equal eager's after 50 steps
(float32 tolerance); torch._foreach_* ops and addcdiv_ / addcmul_ / lerp_ decompose into
pointwise ops (cdynamo/_optim.py)."""
import copy

import pytest
import torch
import torch.nn as nn

import cdynamo
import cdynamo._support as support

RTOL, ATOL = 1e-4, 1e-5   # as tests/test_training.py: float32 tolerance
EXPECTED_BREAKS = {"OPTIM_STEP", "OPTIM_STATE_MISSING"}

CONFIGS = {
    "sgd": lambda ps, fe: torch.optim.SGD(ps, lr=0.1, foreach=fe),
    "sgd_momentum": lambda ps, fe: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=fe),
    "sgd_nesterov_wd": lambda ps, fe: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                                      weight_decay=1e-2, foreach=fe),
    "sgd_dampening_maximize": lambda ps, fe: torch.optim.SGD(ps, lr=0.1, momentum=0.9,
                                                             dampening=0.1, maximize=True,
                                                             foreach=fe),
    "adam": lambda ps, fe: torch.optim.Adam(ps, lr=1e-2, foreach=fe),
    "adam_amsgrad_wd": lambda ps, fe: torch.optim.Adam(ps, lr=1e-2, amsgrad=True,
                                                       weight_decay=1e-2, foreach=fe),
    "adam_maximize": lambda ps, fe: torch.optim.Adam(ps, lr=1e-2, maximize=True, foreach=fe),
    "adamw": lambda ps, fe: torch.optim.AdamW(ps, lr=1e-2, foreach=fe),
    "adamw_amsgrad": lambda ps, fe: torch.optim.AdamW(ps, lr=1e-2, amsgrad=True,
                                                      weight_decay=0.1, foreach=fe),
}


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _assert_models_and_state_match(me, mc, oe, oc):
    for pe, pc in zip(me.parameters(), mc.parameters()):
        torch.testing.assert_close(pc, pe, rtol=RTOL, atol=ATOL)
        se, sc = oe.state[pe], oc.state[pc]
        assert se.keys() == sc.keys()
        for k in se:
            torch.testing.assert_close(sc[k], se[k], rtol=RTOL, atol=ATOL)


def _run(make, steps=50, sign=1, model=_mlp, x=None, compiled_step=None):
    """steps training steps of two copies of model, eager and with the step optimized."""
    me, mc = model(), model()
    oe, oc = make(me.parameters()), make(mc.parameters())
    step = compiled_step(oc) if compiled_step else cdynamo.optimize(oc.step)
    x = torch.randn(4, 8) if x is None else x
    for _ in range(steps):
        for m, o, st in ((me, oe, oe.step), (mc, oc, step)):
            (sign * m(x).pow(2).mean()).backward()
            st()
            o.zero_grad()
    _assert_models_and_state_match(me, mc, oe, oc)
    return me, mc, oe, oc


@pytest.mark.parametrize("foreach", [False, True], ids=["for_loop", "foreach"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_step_50_steps_matches_eager(name, foreach):
    """Per optimizer config: params and state equal eager's after 50 steps; one graph for
    the step, at most one recompile (the call after the lazy state init), and only the
    two planned breaks."""
    _run(lambda ps: CONFIGS[name](ps, foreach), sign=-1 if "maximize" in name else 1)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1, (st, support.breaks)
    assert st["recompiles"] <= 1, st
    assert {b["code"] for b in support.breaks} <= EXPECTED_BREAKS, support.breaks


def test_step_graph_updates_params_and_state_in_place():
    """The step's graph reads the params, their .grad and the state's tensors, and writes
    the params and state back in place (the same tensor objects as eager's)."""
    me, mc, oe, oc = _run(lambda ps: torch.optim.AdamW(ps, lr=1e-2), steps=3)
    p = next(mc.parameters())
    ids = {k: id(v) for k, v in oc.state[p].items()}
    ptr = p.data_ptr()
    x = torch.randn(4, 8)
    mc(x).sum().backward()
    cdynamo.optimize(oc.step)()
    assert p.data_ptr() == ptr
    assert {k: id(v) for k, v in oc.state[p].items()} == ids
    assert oc.state[p]["step"].item() == 4.0


def test_explain_shows_the_step_compiled():
    """explain of opt.step: the wrapper's recorded break (OPTIM_STEP) and the step's graph."""
    m = _mlp()
    o = torch.optim.Adam(m.parameters(), lr=1e-2)
    m(torch.randn(4, 8)).sum().backward()
    o.step()   # the lazy init, eagerly
    e = cdynamo.explain(o.step)()
    assert e.graph_count == 1, str(e)
    assert [b["code"] for b in e.break_reasons] == ["OPTIM_STEP"], str(e)
    assert e.op_count > 0
    assert any(f.get("code") not in ("OPTIM_STEP", "NO_TENSOR_OPS") for f in e.eager_frames) \
        is False, str(e)


def test_train_step_running_eagerly_compiles_its_optimizer_step():
    """A train_step whose forward/backward runs eagerly (a training frame breaks at
    backward): the opt.step() it calls is still traced as its own frame and compiled."""
    me, mc = _mlp(), _mlp()
    oe = torch.optim.AdamW(me.parameters(), lr=1e-2)
    oc = torch.optim.AdamW(mc.parameters(), lr=1e-2)

    def train_step(m, o, x):
        loss = m(x).pow(2).sum()
        loss.backward()
        o.step()
        o.zero_grad()
        return loss

    ts = cdynamo.optimize(train_step)
    x = torch.randn(4, 8)
    for _ in range(50):
        torch.testing.assert_close(ts(mc, oc, x), train_step(me, oe, x), rtol=RTOL, atol=ATOL)
    _assert_models_and_state_match(me, mc, oe, oc)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["recompiles"] <= 1, (st, support.breaks)
    assert any(b["code"] == "OPTIM_STATE_MISSING" and b["function"] == "step"
               for b in support.breaks), support.breaks


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_cnn_50_steps_matches_eager(opt):
    """The bench's CNN (conv, BatchNorm in train mode): steps compiled.  SGD: eager's
    results.  AdamW: our sqrt is correctly rounded, ATen's vectorized one is an ulp off on
    some elements (tests/conftest.py TRANSCENDENTAL), and this problem is ill-conditioned
    under Adam: in eager alone, one weight moved by one ulp moves the weights by 5e-4
    after 10 steps and 6.7e-4 after 50 (measured); so AdamW is held to atol 2e-3 (lr 1e-3),
    the SGD case to float32 tolerance."""
    from cdynamo.bench import _CNN

    def cnn():
        torch.manual_seed(0)
        return _CNN().train()

    make = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
            "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3)}[opt]
    rtol, atol = (RTOL, ATOL) if opt == "sgd" else (1e-2, 2e-3)
    x = torch.randn(4, 3, 16, 16)
    me, mc = cnn(), cnn()
    oe, oc = make(me.parameters()), make(mc.parameters())
    step = cdynamo.optimize(oc.step)
    for _ in range(50):
        for m, o, st in ((me, oe, oe.step), (mc, oc, step)):
            m(x).pow(2).mean().backward()
            st()
            o.zero_grad()
    for pe, pc in zip(me.parameters(), mc.parameters()):
        torch.testing.assert_close(pc, pe, rtol=rtol, atol=atol)
        for k in oe.state[pe]:
            torch.testing.assert_close(oc.state[pc][k], oe.state[pe][k], rtol=rtol, atol=atol)
    assert cdynamo.stats()["frames_compiled"] == 1, support.breaks


def test_changed_lr_recompiles_and_is_used():
    """lr is a constant of the step's graph (guarded): a new lr recompiles and takes
    effect, as in eager."""
    me, mc = _mlp(), _mlp()
    oe = torch.optim.SGD(me.parameters(), lr=0.1, momentum=0.9)
    oc = torch.optim.SGD(mc.parameters(), lr=0.1, momentum=0.9)
    step = cdynamo.optimize(oc.step)
    x = torch.randn(4, 8)
    for i in range(10):
        if i == 5:
            for o in (oe, oc):
                o.param_groups[0]["lr"] = 0.01
        for m, o, st in ((me, oe, oe.step), (mc, oc, step)):
            m(x).pow(2).mean().backward()
            st()
            o.zero_grad()
    _assert_models_and_state_match(me, mc, oe, oc)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 2 and st["recompiles"] == 2, st


def test_param_groups_with_different_lr():
    def make(ps):
        ps = list(ps)
        return torch.optim.Adam([{"params": ps[:2], "lr": 1e-2},
                                 {"params": ps[2:], "lr": 1e-3, "weight_decay": 0.1}])
    _run(make)
    assert cdynamo.stats()["frames_compiled"] == 1, support.breaks


@pytest.mark.parametrize("foreach", [False, True], ids=["for_loop", "foreach"])
def test_lr_as_tensor(foreach):
    """lr a tensor: Adam's for-loop path and SGD's foreach path read it in the graph."""
    if foreach:
        make = lambda ps: torch.optim.SGD(ps, lr=torch.tensor(0.1), momentum=0.9, foreach=True)
    else:
        make = lambda ps: torch.optim.Adam(ps, lr=torch.tensor(1e-2), foreach=False)
    _run(make)
    assert cdynamo.stats()["frames_compiled"] == 1, support.breaks


def test_sgd_tensor_lr_for_loop_compiles_bit_for_bit():
    """SGD's for-loop path with a tensor lr (add_(grad, alpha=-lr): torch reads the tensor
    as a number) compiles; eager's fma(grad, -lr, param), bit for bit (_optim._fma_alpha)."""
    me, mc, oe, oc = _run(lambda ps: torch.optim.SGD(ps, lr=torch.tensor(0.1), foreach=False),
                          steps=5)
    assert cdynamo.stats()["frames_compiled"] == 1, support.breaks
    for pe, pc in zip(me.parameters(), mc.parameters()):
        assert torch.equal(pc, pe)


def test_state_dict_round_trip():
    """state_dict of an optimizer stepped by compiled code loads into a fresh optimizer
    whose compiled steps continue as eager's."""
    me, mc, oe, oc = _run(lambda ps: torch.optim.AdamW(ps, lr=1e-2, amsgrad=True), steps=10)
    mc2 = copy.deepcopy(mc)
    oc2 = torch.optim.AdamW(mc2.parameters(), lr=1e-2, amsgrad=True)
    oc2.load_state_dict(oc.state_dict())
    step = cdynamo.optimize(oc2.step)
    x = torch.randn(4, 8)
    for _ in range(10):
        for m, o, st in ((me, oe, oe.step), (mc2, oc2, step)):
            m(x).pow(2).mean().backward()
            st()
            o.zero_grad()
    _assert_models_and_state_match(me, mc2, oe, oc2)


def test_step_hook_still_runs():
    """A step pre-hook (the wrapper's hook dicts are no longer empty) runs at each step."""
    seen = []
    me, mc = _mlp(), _mlp()
    oe = torch.optim.SGD(me.parameters(), lr=0.1, momentum=0.9)
    oc = torch.optim.SGD(mc.parameters(), lr=0.1, momentum=0.9)
    oc.register_step_pre_hook(lambda o, a, k: seen.append(1))
    step = cdynamo.optimize(oc.step)
    x = torch.randn(4, 8)
    for _ in range(5):
        for m, o, st in ((me, oe, oe.step), (mc, oc, step)):
            m(x).pow(2).mean().backward()
            st()
            o.zero_grad()
    assert len(seen) == 5
    _assert_models_and_state_match(me, mc, oe, oc)


def test_step_called_under_no_grad_from_an_optimized_function():
    """opt.step() under torch.no_grad() inside an optimized function: the caller's trace
    stops in the inlined wrapper (its hook dicts are torch globals read without a source:
    ATTR_NO_SOURCE) and resumes after the call, which runs eagerly; the step it calls is
    traced as its own frame and compiles."""
    me, mc = _mlp(), _mlp()
    oe = torch.optim.Adam(me.parameters(), lr=1e-2)
    oc = torch.optim.Adam(mc.parameters(), lr=1e-2)

    def step(o, x):
        o.step()
        return x * 2

    f = cdynamo.optimize(step)
    x = torch.randn(4, 8)
    for _ in range(5):
        for m, o, st in ((me, oe, step), (mc, oc, f)):
            m(x).pow(2).mean().backward()
            with torch.no_grad():
                torch.testing.assert_close(st(o, x), x * 2)
            o.zero_grad()
    _assert_models_and_state_match(me, mc, oe, oc)
    codes = {b["code"] for b in support.breaks}
    assert codes == {"ATTR_NO_SOURCE", "OPTIM_STATE_MISSING"}, support.breaks
    assert any(b["function"] == "step" for b in support.breaks)   # the step frame traced
    assert cdynamo.stats()["frames_compiled"] >= 2


def test_torch_optim_function_is_not_run_while_tracing():
    """A torch.optim function called with no tensor argument is traced, not called at
    trace time (once, on the real optimizer: the step then never happened again)."""
    me, mc = _mlp(), _mlp()
    oe = torch.optim.SGD(me.parameters(), lr=0.1)
    oc = torch.optim.SGD(mc.parameters(), lr=0.1)
    raw = type(oc).step.__wrapped__.__wrapped__   # SGD.step without its wrappers
    assert raw.__module__ == "torch.optim.sgd"
    f = cdynamo.optimize(lambda: raw(oc))
    x = torch.randn(4, 8)
    for _ in range(4):
        for m, o, st in ((me, oe, oe.step), (mc, oc, f)):
            m(x).pow(2).mean().backward()
            with torch.no_grad():
                st()
            o.zero_grad()
    _assert_models_and_state_match(me, mc, oe, oc)


def test_grad_attribute_read_and_guarded():
    """p.grad of a frame's tensor: None is a guarded constant, a tensor an input; a grad
    that appears later recompiles."""
    def f(p):
        if p.grad is None:
            return p * 2
        return p - 0.1 * p.grad

    p = nn.Parameter(torch.randn(3))
    g = cdynamo.optimize(f)
    with torch.no_grad():
        torch.testing.assert_close(g(p), p * 2)
        p.grad = torch.ones(3)
        torch.testing.assert_close(g(p), p - 0.1)
        p.grad = torch.full((3,), 2.0)
        torch.testing.assert_close(g(p), p - 0.2)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 2 and st["recompiles"] == 1, st


def test_grad_of_a_tensor_made_in_the_frame_breaks():
    with torch.no_grad():
        out = cdynamo.optimize(lambda a: (a * 2).grad is None)(torch.ones(2))
    assert out is True
    assert "TENSOR_ATTR" in {b["code"] for b in support.breaks}


@pytest.mark.parametrize("fn", ["add_alpha", "sub", "mul_scalar", "addcdiv", "addcmul",
                                "lerp", "maximum", "sqrt", "neg", "div_list", "pow"])
def test_foreach_ops_equal_eager(fn):
    """torch._foreach_* ops in user code: per-tensor pointwise ops, eager's results."""
    ops = {
        "add_alpha": lambda a, b: torch._foreach_add_(a, b, alpha=0.5),
        "sub": lambda a, b: torch._foreach_sub_(a, 1.5),
        "mul_scalar": lambda a, b: torch._foreach_mul_(a, [2.0, 3.0]),
        "addcdiv": lambda a, b: torch._foreach_addcdiv_(a, b, [t.abs() + 1 for t in b], 0.3),
        "addcmul": lambda a, b: torch._foreach_addcmul_(a, b, b, [0.1, 0.2]),
        "lerp": lambda a, b: torch._foreach_lerp_(a, b, 0.7),
        "maximum": lambda a, b: torch._foreach_maximum_(a, b),
        "sqrt": lambda a, b: torch._foreach_sqrt_([t.abs() for t in a]),
        "neg": lambda a, b: torch._foreach_neg_(a),
        "div_list": lambda a, b: torch._foreach_div_(a, [t.abs() + 1 for t in b]),
        "pow": lambda a, b: a.__setitem__(0, torch._foreach_pow(a, 2)[0]),
    }

    def f(a0, a1, b0, b1):
        a, b = [a0, a1], [b0, b1]
        ops[fn](a, b)
        return a[0] + 0, a[1] + 0

    args = [torch.randn(3, 4), torch.randn(5), torch.randn(3, 4), torch.randn(5)]
    ae, ac = [t.clone() for t in args], [t.clone() for t in args]
    with torch.no_grad():
        oe = f(*ae)
        oc = cdynamo.optimize(f)(*ac)
    torch.testing.assert_close(oc, oe)
    torch.testing.assert_close(ac, ae)
    assert cdynamo.stats()["frames_compiled"] == 1, support.breaks


def test_record_function_block_is_traced_without_a_profiler():
    def f(x):
        with torch.autograd.profiler.record_function("mine"):
            return x * 2 + 1

    x = torch.randn(4)
    torch.testing.assert_close(cdynamo.optimize(f)(x), x * 2 + 1)
    assert cdynamo.stats()["graph_breaks"] == 0, support.breaks
    cdynamo.reset()
    with torch.profiler.profile() as prof:
        torch.testing.assert_close(cdynamo.optimize(f)(x), x * 2 + 1)
    assert "CONTEXT_STATE" in {b["code"] for b in support.breaks}
    assert any(e.name == "mine" for e in prof.events())


def test_step_compiles_after_torch_compile_disabled_init_group():
    """torch.compile (once called in the process) wraps every optimizer class's
    _init_group in torch._dynamo.disable: the wrapped function is traced instead."""
    torch.compile(torch.optim.Adam([nn.Parameter(torch.ones(1))]).step)   # patches classes
    assert "_torchdynamo_orig_callable" in torch.optim.Adam.__dict__["_init_group"].__dict__
    _run(lambda ps: torch.optim.Adam(ps, lr=1e-2))
    assert cdynamo.stats()["frames_compiled"] == 1, support.breaks


# ---- lr schedulers: a tensor lr, a changing float lr (issue 34) ----------------------------

def _linear():
    torch.manual_seed(0)
    return nn.Linear(8, 4)


def _run_scheduled(make, sched, steps=30, model=_linear):
    """steps training steps of two copies of model, each optimizer's lr scheduler stepped
    after the optimizer, eager and with the step optimized."""
    me, mc = model(), model()
    oe, oc = make(me.parameters()), make(mc.parameters())
    se, sc = sched(oe), sched(oc)
    step = cdynamo.optimize(oc.step)
    x = torch.randn(4, 8)
    for _ in range(steps):
        for m, o, st, s in ((me, oe, oe.step, se), (mc, oc, step, sc)):
            m(x).pow(2).mean().backward()
            st()
            o.zero_grad()
            s.step()
    _assert_models_and_state_match(me, mc, oe, oc)
    return me, mc, oe, oc


def _bitwise(me, mc, oe, oc):
    """Parameters and optimizer state of the two copies equal bit for bit."""
    for pe, pc in zip(me.parameters(), mc.parameters()):
        assert torch.equal(pc, pe)
        for k in oe.state[pe]:
            assert torch.equal(oc.state[pc][k], oe.state[pe][k]), k


STEP_LR = lambda o: torch.optim.lr_scheduler.StepLR(o, 2, 0.5)

# Adam / AdamW with a tensor lr and foreach=True: eager raises ValueError unless
# capturable=True, which eager does not run on CPU, so only their for-loop path is tested.
TENSOR_LR = {
    "sgd_momentum-for_loop": (lambda ps: torch.optim.SGD(ps, lr=torch.tensor(0.1), momentum=0.9,
                                                         foreach=False), True),
    "sgd_momentum-foreach": (lambda ps: torch.optim.SGD(ps, lr=torch.tensor(0.1), momentum=0.9,
                                                        foreach=True), True),
    "adam-for_loop": (lambda ps: torch.optim.Adam(ps, lr=torch.tensor(0.01), foreach=False), False),
    "adamw-for_loop": (lambda ps: torch.optim.AdamW(ps, lr=torch.tensor(0.01), foreach=False),
                       False),
}


@pytest.mark.parametrize("name", sorted(TENSOR_LR))
def test_step_lr_scheduler_with_tensor_lr_compiles_once(name):
    """lr a 0-dim tensor (torch.compile's way to schedule a compiled step): the scheduler
    fill_s it in place, the step's graph reads it, one compile for 30 steps.  SGD is eager's
    bits (add_ / _foreach_add_ with alpha=-lr: eager's fma; its foreach path is traced down
    eager's branch, not the multiply-then-add it takes under a compiler), Adam / AdamW within
    float32 tolerance (as with a float lr: their sqrt / div fuse)."""
    make, bitwise = TENSOR_LR[name]
    me, mc, oe, oc = _run_scheduled(make, STEP_LR)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["recompiles"] == 1, (st, support.breaks)
    assert oc.param_groups[0]["lr"].item() == oe.param_groups[0]["lr"].item() < 0.1 / 2 ** 14
    if bitwise:
        _bitwise(me, mc, oe, oc)


@pytest.mark.parametrize("op", ["add_", "sub_", "add", "sub"])
@pytest.mark.parametrize("adtype", [torch.float32, torch.float64])
def test_add_with_tensor_alpha_is_eager_bits(op, adtype):
    """x.add_(y, alpha=t) with a 0-dim tensor t: a graph op (no break), eager's float32 bits:
    t read as a number, cast to float32, one fma."""
    def f(x, y, a):
        r = getattr(x, op)(y, alpha=a)
        return r * 1

    torch.manual_seed(0)
    x, y = torch.randn(1000), torch.randn(1000)
    a = torch.tensor(-0.1234567, dtype=adtype)
    xe, xc = x.clone(), x.clone()
    with torch.no_grad():
        oe = f(xe, y, a)
        oc = cdynamo.optimize(f)(xc, y, a)
    assert torch.equal(oc, oe) and torch.equal(xc, xe)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["graph_breaks"] == 0, support.breaks


SCHEDULERS = {
    "step": STEP_LR,
    "cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10),
    "onecycle_lr_only": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, 1.0, total_steps=40,
                                                                      cycle_momentum=False),
}
FLOAT_LR = {
    "sgd_momentum-for_loop": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=False),
    "sgd_momentum-foreach": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True),
    "adam-for_loop": lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=False),
    "adamw-default": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
}


@pytest.mark.parametrize("sched", sorted(SCHEDULERS))
@pytest.mark.parametrize("name", sorted(FLOAT_LR))
def test_scheduler_with_float_lr_compiles_at_most_twice(name, sched, capfd):
    """A float lr that a scheduler changes: the first change recompiles once with
    param_groups[i]['lr'] a graph input (a 0-dim float64 tensor read per call, guarded a
    float), and the recompile log says so; 30 steps, at most two compiles, eager's values
    (SGD's bit for bit: add_ / _foreach_add_ with alpha=-lr is eager's fma)."""
    cdynamo._C.set_log_topics({"recompiles"})
    try:
        me, mc, oe, oc = _run_scheduled(FLOAT_LR[name], SCHEDULERS[sched])
    finally:
        cdynamo._C.set_log_topics(set())
    st = cdynamo.stats()
    assert 1 <= st["frames_compiled"] <= 2 and st["recompiles"] <= 2, (st, support.breaks)
    assert type(oc.param_groups[0]["lr"]) is float
    assert oc.param_groups[0]["lr"] == oe.param_groups[0]["lr"]
    assert "'self.param_groups[0]['lr']' changed since an earlier compile: read per call as " \
           "a 0-dim float64 tensor" in capfd.readouterr().err
    if name.startswith("sgd"):
        _bitwise(me, mc, oe, oc)


def test_scheduled_lr_input_is_guarded_a_float():
    """After lr became a graph input, an lr that is no longer a float (a tensor put in its
    place) fails the guard and recompiles; values stay eager's."""
    me, mc = _linear(), _linear()
    oe = torch.optim.SGD(me.parameters(), lr=0.1, momentum=0.9)
    oc = torch.optim.SGD(mc.parameters(), lr=0.1, momentum=0.9)
    step = cdynamo.optimize(oc.step)
    x = torch.randn(4, 8)
    for i in range(8):
        for o in (oe, oc):
            o.param_groups[0]["lr"] = 0.1 / (i + 1) if i < 6 else torch.tensor(0.01)
        for m, o, st in ((me, oe, oe.step), (mc, oc, step)):
            m(x).pow(2).mean().backward()
            st()
            o.zero_grad()
    _assert_models_and_state_match(me, mc, oe, oc)
    st = cdynamo.stats()
    # the first call initializes the state (eager), the second already sees lr changed (an
    # input), the seventh a tensor
    assert st["frames_compiled"] == 2 and st["recompiles"] == 2, (st, support.breaks)


def test_float_lr_of_other_optimizers_stays_a_constant():
    """Adam with foreach=True (its foreach path rejects a tensor lr): a changed lr
    recompiles with the new constant, as before."""
    _run_scheduled(lambda ps: torch.optim.Adam(ps, lr=0.01, foreach=True), STEP_LR, steps=6)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 3, (st, support.breaks)


def test_scheduled_float_lr_in_an_optimized_train_step():
    """opt.step() inside an optimized train_step (the step's frame runs through its
    transformed code, which loads the lr input through the converter step): a StepLR
    schedule compiles the step at most twice, SGD's results are eager's bits."""
    def make():
        m = _mlp()
        o = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        return m, o, torch.optim.lr_scheduler.StepLR(o, 2, 0.5)

    (me, oe, se), (mc, oc, sc) = make(), make()
    x = torch.randn(4, 8)

    def train_step(m, o, x):
        loss = m(x).pow(2).mean()
        loss.backward()
        o.step()
        o.zero_grad()
        return loss

    step = cdynamo.optimize(train_step)
    for _ in range(30):
        torch.testing.assert_close(step(mc, oc, x), train_step(me, oe, x))
        se.step()
        sc.step()
    for pe, pc in zip(me.parameters(), mc.parameters()):
        assert torch.equal(pc, pe)
    st = cdynamo.stats()
    assert st["recompiles"] <= 3, (st, support.breaks)


def test_user_code_reading_a_scheduled_lr_gets_a_float():
    """The lr read by user code (to log it) stays a float, guarded: only torch.optim's own
    reads become the graph input."""
    m = _linear()
    o = torch.optim.SGD(m.parameters(), lr=0.1)

    def f(x):
        return x * 2, o.param_groups[0]["lr"]

    g = cdynamo.optimize(f)
    x = torch.randn(3)
    for i in range(4):
        o.param_groups[0]["lr"] = 0.1 / (i + 1)
        y, lr = g(x)
        assert type(lr) is float and lr == 0.1 / (i + 1)
        torch.testing.assert_close(y, x * 2)
