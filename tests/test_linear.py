"""Linear layers with a packed weight (runtime/linear.c, passes/linear.c): results
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


def _calls_match_eager(fn, x, calls=3):
    """Call cdynamo.optimize(fn)(x) `calls` times without grad, each result (a tensor or
    a tuple of them) equal to eager's; cdynamo.stats() after."""
    opt = cdynamo.optimize(fn)
    with torch.no_grad():
        expected = fn(x)
        for _ in range(calls):
            out = opt(x)
            if isinstance(out, tuple):
                assert len(out) == len(expected)
                for a, e in zip(out, expected):
                    _close(a, e)
            else:
                _close(out, expected)
    return cdynamo.stats()


@pytest.fixture
def always(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "pack_linear_weights", "always")


def test_packed_linear_matches_eager_and_packs_each_weight_once(always):
    st = _calls_match_eager(_mlp(), torch.randn(4, 8, 128))
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
    y = opt(x)                # parameters require grad: a training graph, torch's linear
    y.sum().backward()
    assert y.requires_grad and m[0].weight.grad is not None
    assert cdynamo.stats()["packed_linear_calls"] == 0
    with torch.no_grad():     # the training entry is for grad mode only: this one packs
        _close(opt(x), m(x))
    # the forward and backward graphs of grad mode, then the no_grad graph
    assert cdynamo.stats()["packed_linear_calls"] == 2 and cdynamo.stats()["frames_compiled"] == 3
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
    st = _calls_match_eager(_mlp(), torch.randn(32, 128))
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


# ---- a relu folded into the packed linear (cdy_rewrite_linear_relu) ----

@pytest.mark.parametrize("inplace", [False, True])
def test_a_relu_read_only_by_the_linear_is_part_of_it(always, inplace):
    # in place: the next layer reads the relu'd tensor, as in eager
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(inplace=inplace),
                            torch.nn.Linear(256, 64, bias=False)).eval()
    st = _calls_match_eager(m, torch.randn(2, 16, 128))
    # no kernel: oneDNN applies the relu; without the fold it is one kernel
    assert st["kernels_compiled"] == 0 and st["disk_cache_hits"] == 0, st
    assert st["packed_linear_calls"] == 6 and st["frames_compiled"] == 1, st


def test_a_gelu_and_a_shared_linear_result_stay_kernels(always):
    # GELU: oneDNN's fused form is slower than the product and our kernel after it;
    # relu(h) + h reads h twice
    lin = torch.nn.Linear(128, 128).eval()
    x = torch.randn(32, 128)

    def f(x):
        h = lin(x)
        return torch.relu(h) + h, torch.nn.functional.gelu(lin(h))

    st = _calls_match_eager(f, x, calls=2)
    assert st["kernels_compiled"] == 2 and st["packed_linear_calls"] == 4, st


def test_a_folded_relu_on_torchs_linear(always):
    # a weight new on every call goes back to torch's linear: relu then runs in place
    x = torch.randn(16, 128)
    F = torch.nn.functional
    opt = cdynamo.optimize(lambda x, w, b: F.relu(F.linear(x, w, b)))
    with torch.no_grad():
        for _ in range(6):
            w, b = torch.randn(96, 128), torch.randn(96)
            _close(opt(x, w, b), F.relu(F.linear(x, w, b)))
    st = cdynamo.stats()
    assert st["packed_linear_calls"] == 4 and st["kernels_compiled"] == 0, st


def test_timed_choice_with_a_relu_gives_eager_results():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 256), torch.nn.ReLU()).eval()
    assert _calls_match_eager(m, torch.randn(64, 256))["kernels_compiled"] == 0


# ---- matmul family: result meta computed in C (trace/meta.c, cdy_meta_extern) ----

def _layouts(shape, seed):
    """Tensors of `shape`: contiguous, transposed last two dims, sliced with a
    step, batch dims permuted, expanded from a size-1 first dim."""
    g = torch.Generator().manual_seed(seed)
    yield torch.randn(shape, generator=g)
    if len(shape) >= 2:
        yield torch.randn(shape[:-2] + (shape[-1], shape[-2]), generator=g).transpose(-1, -2)
        yield torch.randn(shape[:-1] + (2 * shape[-1],), generator=g)[..., ::2]
    if len(shape) >= 3:
        yield torch.randn((shape[1], shape[0]) + shape[2:], generator=g).transpose(0, 1)
        yield torch.randn((1,) + shape[1:], generator=g).expand(shape)


MATMUL_CASES = [
    ("matmul", lambda a, b: a @ b, (5,), (5,)), ("matmul", lambda a, b: a @ b, (3, 5), (5,)),
    ("matmul", lambda a, b: torch.matmul(a, b), (5,), (5, 4)),
    ("matmul", lambda a, b: a.matmul(b), (3, 5), (5, 4)),
    ("matmul", lambda a, b: a @ b, (2, 3, 5), (5, 4)), ("matmul", lambda a, b: a @ b, (2, 3, 5), (5,)),
    ("matmul", lambda a, b: a @ b, (5,), (2, 5, 4)),
    ("matmul", lambda a, b: a @ b, (2, 1, 3, 5), (4, 5, 2)),
    ("matmul", lambda a, b: a @ b, (1, 3, 5), (2, 5, 4)), ("matmul", lambda a, b: a @ b, (3, 5), (2, 5, 4)),
    ("mm", lambda a, b: torch.mm(a, b), (3, 5), (5, 4)), ("mm", lambda a, b: a.mm(b), (3, 5), (5, 4)),
    ("bmm", lambda a, b: torch.bmm(a, b), (2, 3, 5), (2, 5, 4)),
    ("linear", lambda a, b: torch.nn.functional.linear(a, b), (2, 3, 5), (4, 5)),
    ("linear", lambda a, b: torch.nn.functional.linear(a, b, b[:, 0] * 2), (3, 5), (4, 5)),
    ("linear", lambda a, b: torch.nn.functional.linear(a, b, None), (5,), (4, 5)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", range(len(MATMUL_CASES)))
def test_matmul_meta_in_c(case, dtype):
    """Compiled matmul / mm / bmm / linear over every operand layout: eager's
    values, sizes, strides (contiguous, as CPU's kernels give for every
    layout) and dtype, with a fused epilogue, and one graph."""
    _, fn, sa, sb = MATMUL_CASES[case]
    for a in _layouts(sa, 1):
        for b in _layouts(sb, 2):
            a, b = a.to(dtype), b.to(dtype)
            def f(x, y):
                return fn(x, y) * 2 + 1
            expected = f(a, b)
            cdynamo.reset()
            with torch.no_grad():
                actual = cdynamo.optimize(f)(a, b)
            assert actual.shape == expected.shape and actual.stride() == expected.stride()
            assert actual.dtype == expected.dtype
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
            st = cdynamo.stats()
            assert st["frames_compiled"] == 1 and st["graph_breaks"] == 0, st


def test_matmul_meta_errors_as_eager():
    """Shapes or dtypes the C rules do not accept go to torch's meta, which
    raises eager's error type."""
    from conftest import check_raises
    check_raises(lambda a, b: a @ b, torch.randn(3, 5), torch.randn(4, 2))
    check_raises(lambda a, b: torch.bmm(a, b), torch.randn(2, 3, 5), torch.randn(3, 5, 4))
    check_raises(lambda a, b: a @ b, torch.randn(2, 3, 5), torch.randn(3, 5, 4))
    check_raises(lambda a, b: a @ b, torch.randn(3, 5), torch.randn(5, 4, dtype=torch.float64))
    check_raises(lambda a, b: torch.nn.functional.linear(a, b, torch.randn(3)),
                 torch.randn(3, 5), torch.randn(4, 5))


def test_matmul_trace_needs_no_torch_meta():
    """Tracing a function of matmul, mm, bmm and a linear layer runs no torch
    meta function (sympy is not imported)."""
    from conftest import assert_traces_without_torch_meta
    assert_traces_without_torch_meta("""
        lin = torch.nn.Linear(6, 4)
        def f(x, y, z):
            return torch.relu(x @ y + 1).sum(-1) + torch.mm(x, y)[:, 0] + lin(x @ y).sum(-1) \\
                + torch.bmm(z, z).sum((0, 2))[:5]
        x, y, z = torch.randn(5, 7), torch.randn(7, 6), torch.randn(2, 7, 7)
        compiled, eager = lambda: cdynamo.optimize(f)(x, y, z), lambda: f(x, y, z)
        TOL = dict(rtol=1e-5, atol=1e-5)
        """)


def test_symbolic_graph_chooses_per_rows_as_static_graphs_do():
    """A graph of runtime sizes (issue 32) chooses torch's linear or the pack for each
    call's rows, as a static graph compiled at those rows does (the process's timing of
    that shape), not once at the compiling call's rows; a static graph's choice stays."""
    from cdynamo import _C
    w, b = torch.randn(256, 128), torch.randn(256)

    def f(x, w, b):
        return torch.nn.functional.linear(x, w, b).relu()

    def plins(g):
        return list({id(s[1]): s[1] for s in g.program
                     if type(s[1]).__name__ == "PackedLinear"}.values())
    _C._dyn_test(True)
    try:
        with torch.no_grad():
            cdynamo.optimize(f)(torch.randn(8, 128), w, b)
    finally:
        _C._dyn_test(False)
    sym = cdynamo._support.compiles[-1]["compiled"]
    assert sym.symbols
    (pl,) = plins(sym)
    assert pl.per_rows and pl.decided_rows == 8
    with torch.no_grad():
        for rows in (64, 8, 3, 64):
            x = torch.randn(rows, 128)
            _close(sym(x, w, b), f(x, w, b))
            assert pl.decided_rows == rows
        cdynamo.reset()
        cdynamo.optimize(f)(torch.randn(64, 128), w, b)
        static = cdynamo._support.compiles[-1]["compiled"]
        assert not static.symbols
        (spl,) = plins(static)
        assert not spl.per_rows and spl.decided_rows == 64
        assert spl.uses_packed_weight == pl.uses_packed_weight   # the same (rows, ...) key


def _plins(g):
    return list({id(s[1]): s[1] for s in g.program
                 if type(s[1]).__name__ == "PackedLinear"}.values())


@pytest.mark.parametrize("threads", [1, 16])
def test_symbolic_graph_packs_as_static_graphs_do(threads):
    """A graph of runtime sizes decides as a static graph compiled at the call's sizes
    and thread count does: the same choice (torch's linear or the pack) and a pack made
    for the call's rows (oneDNN blocks the weight for the rows it is told: 256 x 1024
    packed for 8 rows, AB16b32a, multiplied 512 rows slower than its pack for 512,
    AB16b64a).  The decisions are what is compared (16 threads on a 2-core host too)."""
    from cdynamo import _C
    w1, b1 = torch.randn(1024, 256) / 16, torch.randn(1024)
    w2, b2 = torch.randn(256, 1024) / 32, torch.randn(256)

    def mlp(x, w1, b1, w2, b2):
        return torch.nn.functional.linear(torch.nn.functional.gelu(
            torch.nn.functional.linear(x, w1, b1)), w2, b2)

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            cdynamo.reset()
            _C._dyn_test(True)
            try:
                cdynamo.optimize(mlp)(torch.randn(8, 256), w1, b1, w2, b2)
            finally:
                _C._dyn_test(False)
            sym = cdynamo._support.compiles[-1]["compiled"]
            assert sym.symbols
            spls = _plins(sym)
            assert len(spls) == 2 and all(p.per_rows for p in spls)
            for rows in (512, 64, 8, 512):
                args = (torch.randn(rows, 256), w1, b1, w2, b2)
                for _ in range(2):
                    torch.testing.assert_close(sym(*args), mlp(*args), rtol=1e-4, atol=1e-4)
                cdynamo.reset()
                cdynamo.optimize(mlp)(*args)
                static = cdynamo._support.compiles[-1]["compiled"]
                assert not static.symbols
                tpls = _plins(static)
                torch.testing.assert_close(static(*args), mlp(*args), rtol=1e-4, atol=1e-4)
                for sp, tp in zip(spls, tpls):
                    assert not tp.per_rows and tp.decided_rows == sp.decided_rows == rows
                    assert sp.uses_packed_weight == tp.uses_packed_weight
                    if sp.uses_packed_weight:
                        assert sp.pack_rows == tp.pack_rows == rows
    finally:
        torch.set_num_threads(old)


def test_symbolic_graph_keeps_one_pack_while_rows_change_every_call(monkeypatch):
    """Rows changing on every call (PLIN_ROW_CHURN calls in a row) stop the pack being
    remade for each call's rows: one pack serves them all (results still eager's); rows
    that settle get their own pack again."""
    from cdynamo import _C
    monkeypatch.setattr(cdynamo.config, "pack_linear_weights", "always")
    w, b = torch.randn(256, 128), torch.randn(256)

    def f(x, w, b):
        return torch.nn.functional.linear(x, w, b)
    _C._dyn_test(True)
    try:
        with torch.no_grad():
            cdynamo.optimize(f)(torch.randn(8, 128), w, b)
    finally:
        _C._dyn_test(False)
    sym = cdynamo._support.compiles[-1]["compiled"]
    (pl,) = _plins(sym)
    assert pl.pack_rows == 8
    packs = []
    with torch.no_grad():
        for rows in (16, 24, 16, 24, 16, 24, 24, 24):
            x = torch.randn(rows, 128)
            _close(sym(x, w, b), f(x, w, b))
            packs.append(pl.pack_rows)
    assert packs[:3] == [16, 24, 16]     # remade for each call's rows
    assert packs[3:6] == [16] * 3        # the 4th change in a row on: kept
    assert packs[6:] == [24, 24]         # the rows settled: remade for them
