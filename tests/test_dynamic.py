"""Dynamic shapes (issue 32), milestone 1: symbolic sizes of a trace's graph.

CDYNAMO_LOGS=dynamic logs what dynamic=True would keep symbolic in each compiled graph: the
symbols (each input dim of a frame argument, sizes 0 and 1 excepted), which of them specialize
and why (an op without a symbolic rule, a size the code read as a number, layer_norm's
normalized_shape, broadcasting against a constant), the relations between symbols the graph
relies on, and each output's sizes as expressions.  Compilation itself is unchanged (static
kernels): every call still matches eager."""
import re

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import assert_same, sweep_compiles


def symbolic_log(capfd, fn, *args):
    """Run cdynamo.optimize(fn)(*args) with the dynamic log on: (result, the log's lines
    without their prefix and graph name)."""
    expected = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    capfd.readouterr()
    cdynamo._C.set_log_topics({"dynamic"})
    try:
        out = cdynamo.optimize(fn)(*args)
    finally:
        cdynamo._C.set_log_topics(set())
    err = capfd.readouterr().err
    lines = [re.sub(r"^\[cdynamo:dynamic\] __compiled_fn_\d+: ", "", l)
             for l in err.splitlines() if l.startswith("[cdynamo:dynamic]")]
    assert_same(expected, out)
    return lines


def outputs(lines):
    return [l.split(": ", 1)[1] for l in lines if re.match(r"\s+output \d+: ", l)]


def test_pointwise_reduction_softmax_cat_stay_symbolic(capfd):
    def f(x, b):
        h = torch.relu(x * 2.0 + b)
        return h.sum(dim=1), torch.softmax(h, dim=-1), torch.cat([h, x], 0), h.amax(0, True)

    lines = symbolic_log(capfd, f, torch.randn(8, 16), torch.randn(16))
    assert lines[0].startswith("with the arguments' dims symbolic, 3 of 3 symbols stay symbolic")
    assert "  s0 = dim 0 of 'x' (hint 8)" in lines
    assert "  s1 = dim 1 of 'x' (hint 16)" in lines
    assert "  s2 = dim 0 of 'b' (hint 16)" in lines
    assert "  relation s1 == s2" in lines          # broadcasting relied on x's dim 1 == b's
    assert "  guards: s0 >= 2, s1 >= 2, s2 >= 2, inputs with symbols at torch.empty strides, relations" in lines
    assert outputs(lines) == ["[s0]", "[s0, s1]", "[2*s0, s1]", "[1, s1]"]


def test_sizes_zero_and_one_stay_static(capfd):
    lines = symbolic_log(capfd, lambda x, y: x + y, torch.randn(1, 5, 3), torch.randn(0, 1, 1))
    assert lines[0].startswith("with the arguments' dims symbolic, 2 of 2 symbols")
    assert outputs(lines) == ["[0, s0, s1]"]


def test_shape_read_specializes(capfd):
    def f(x):
        return x / x.shape[0]

    # x.shape[0] divides a tensor: a number, so dim 0 specializes; dim 1 was only read
    # as part of x.shape and stays symbolic
    lines = symbolic_log(capfd, f, torch.randn(6, 4))
    assert lines[0].startswith("with the arguments' dims symbolic, 1 of 2 symbols")
    assert any(re.match(r"  s0 = dim 0 of 'x' \(hint 6\): specialized: the code read the size "
                        r"and used it in BINARY_OP", l) for l in lines), lines
    assert outputs(lines) == ["[6, s1]"]


def test_size_times_a_tensor_stays_symbolic(capfd):
    # t * n for a size n: the kernel's scalar is n's expression (trace/symint.c)
    lines = symbolic_log(capfd, lambda x: x * x.shape[0] + len(x), torch.randn(6, 4))
    assert outputs(lines) == ["[s0, s1]"]
    assert "2 of 2 symbols" in lines[0]
    assert sweep_compiles(lambda x: x * x.shape[0] + 2 * x.size(1),
                          lambda n: (torch.randn(n, n + 1),), [3, 5, 8, 13]) == 2


def test_size_read_into_view_stays_symbolic(capfd):
    # x.size(0) only gives view a size: its expression is the view's (trace/symint.c)
    lines = symbolic_log(capfd, lambda x: x.view(x.size(0), -1) + 1, torch.randn(3, 4, 5))
    assert outputs(lines) == ["[s0, s1*s2]"]
    assert "3 of 3 symbols" in lines[0]
    lines = symbolic_log(capfd, lambda x: x / len(x) + x.dim(), torch.randn(3, 4))
    assert outputs(lines) == ["[3, s1]"]
    assert any(l.startswith("  s0 = dim 0 of 'x' (hint 3): specialized: the code read the size")
               for l in lines), lines

    def g(x):
        b, t, c = x.shape
        h = x.reshape(b * t, c).view(b, t, 2, c // 2).transpose(1, 2)
        return h.reshape(b, 2, t * (c // 2)) * 2.0

    lines = symbolic_log(capfd, g, torch.randn(3, 5, 8))
    assert outputs(lines) == ["[s0, 2, s1*((s2) / 2)]"], lines
    assert "  relation s0*s1*s2 == 2*s0*s1*((s2) / 2)" in lines, lines   # c % 2 == 0


def test_layer_norm_normalized_dims_specialize(capfd):
    w, b = torch.randn(32), torch.randn(32)

    def f(x):
        return F.layer_norm(x, (32,), w, b)

    lines = symbolic_log(capfd, f, torch.randn(2, 7, 32))
    assert "2 of 3 symbols" in lines[0]
    # weight and bias passed as arguments: their sizes are normalized_shape's too
    lines2 = symbolic_log(capfd, lambda x, w, b: F.layer_norm(x, (32,), w, b),
                          torch.randn(2, 32), w, b)
    assert "1 of 4 symbols" in lines2[0] and outputs(lines2) == ["[s0, 32]"]
    assert any("s2 = dim 2 of 'x' (hint 32): specialized: layer_norm's normalized_shape" in l
               for l in lines), lines
    assert outputs(lines) == ["[s0, s1, 32]"]


def test_matmul_and_linear(capfd):
    lin = torch.nn.Linear(16, 8)

    def f(x, y):
        return torch.mm(x, y).relu(), lin(x @ y)

    with torch.no_grad():
        lines = symbolic_log(capfd, f, torch.randn(5, 12), torch.randn(12, 16))
    # y's dim 1 meets the Linear's static 16: specialized; x's 12 == y's 12 a relation
    assert "  relation s1 == s2" in lines
    assert any(l.startswith("  s3 = dim 1 of 'y' (hint 16): specialized") for l in lines), lines
    assert outputs(lines) == ["[s0, 16]", "[s0, 8]"]


def test_bmm_batch_and_rows(capfd):
    def f(q, k):
        return torch.softmax(torch.bmm(q, k.transpose(1, 2)) * 0.5, dim=-1)

    lines = symbolic_log(capfd, f, torch.randn(3, 6, 4), torch.randn(3, 5, 4))
    assert "6 of 6 symbols" in lines[0]
    assert "  relation s0 == s3" in lines and "  relation s2 == s5" in lines
    assert outputs(lines) == ["[s0, s1, s4]"]


def test_views_follow_their_source(capfd):
    def f(x):
        a = x.permute(2, 0, 1).unsqueeze(0) * 2
        b = x.reshape(-1, 4) + 1
        c = x.flatten(1) - 1
        d = x.view(-1) * 3
        return a, b, c, d, x.transpose(0, 1).squeeze() + 0

    lines = symbolic_log(capfd, f, torch.randn(3, 5, 4))
    assert outputs(lines) == ["[1, 4, s0, s1]", "[s0*s1, 4]", "[s0, 4*s1]", "[4*s0*s1]",
                              "[s1, s0, 4]"]
    # reshape(-1, 4) put x's last dim to 4: it specialized
    assert any(l.startswith("  s2 = dim 2 of 'x' (hint 4): specialized") for l in lines), lines


def test_views_without_a_rule_specialize(capfd):
    lines = symbolic_log(capfd, lambda x: x[:, :2] + x.view(3, 10)[:, :2], torch.randn(3, 10))
    assert "0 of 2 symbols" in lines[0]
    assert outputs(lines) == ["[3, 2]"]


def test_mutated_input_specializes(capfd):
    def f(x):
        x.add_(1)
        return x * 2

    lines = symbolic_log(capfd, f, torch.randn(4, 3))
    assert outputs(lines) == ["[4, 3]", "[4, 3]"]   # the result and x's new value
    assert any("an input the graph mutates" in l for l in lines), lines


def test_module_parameters_are_not_symbols(capfd):
    m = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 3))
    with torch.no_grad():
        lines = symbolic_log(capfd, m, torch.randn(9, 10))
    assert lines[0].startswith("with the arguments' dims symbolic, 1 of 2 symbols"), lines
    assert outputs(lines) == ["[s0, 3]"]


def test_overlapping_input_specializes(capfd):
    """A transposed input keeps its sizes symbolic (its layout guarded: issue 32's
    non-contiguous inputs); an expanded one (stride 0: it overlaps) specializes."""
    lines = symbolic_log(capfd, lambda x, y: x * 2 + y, torch.randn(5, 3).t(), torch.randn(3, 5))
    assert outputs(lines) == ["[s0, s1]"]
    lines = symbolic_log(capfd, lambda x, y: x * 2 + y, torch.randn(5).expand(3, 5),
                         torch.randn(3, 5))
    assert outputs(lines) == ["[3, 5]"]
    assert any("a non-contiguous input that overlaps" in l for l in lines), lines


def test_graph_passes_keep_pins(capfd):
    """The attention rewrite drops the scores a size was read from: everything specializes
    (what the read depended on is unknown); channels_last's inserted values shift the pins."""
    def attn(q, k, v):
        s = (q @ k.transpose(-2, -1)) * 0.125
        return torch.softmax(s, dim=-1) @ v, s.shape[-1]

    q = torch.randn(2, 4, 8, 16)
    with torch.no_grad():
        lines = symbolic_log(capfd, attn, q, q.clone(), q.clone())
    assert "0 of 12 symbols" in lines[0]
    assert any("a pinned value a graph pass removed" in l for l in lines), lines
    conv = torch.nn.Conv2d(3, 4, 3)
    with torch.no_grad():
        lines = symbolic_log(capfd, lambda x: conv(x).relu() + x.shape[0], torch.randn(2, 3, 8, 8))
    assert outputs(lines) == ["[2, 4, 6, 6]"]


def test_log_off_by_default(capfd):
    capfd.readouterr()
    cdynamo.optimize(lambda x: x + 1)(torch.randn(3))
    assert "[cdynamo:dynamic]" not in capfd.readouterr().err


# ---- the policy: automatic dynamic, dynamic=True/False, mark_dynamic (frame/dynamic.c) ----

def compiles():
    return cdynamo.stats()["frames_compiled"]


def sweep(fn, make, sizes, **opts):
    """Call optimize(fn, **opts) on make(n) for each n, each result checked against eager;
    the number of compiles."""
    of = cdynamo.optimize(fn, **opts)
    before = compiles()
    for n in sizes:
        args = make(n)
        expected = fn(*[a.clone() for a in args])
        assert_same(expected, of(*args))
    return compiles() - before


def pointwise(x, b):
    return torch.relu(x * 2.0 + b) - b.sigmoid()


def test_batch_sweep_compiles_twice():
    n = sweep(pointwise, lambda n: (torch.randn(n, 16), torch.randn(16)), range(1, 65))
    assert n == 2   # size 1 (static), then at size 2 one symbolic entry for 2..64
    n = sweep(pointwise, lambda n: (torch.randn(n, 16), torch.randn(16)), range(2, 65))
    assert n == 0   # the symbolic entry serves them (and the static ones theirs)


def test_batch_sweep_from_two_compiles_twice():
    cdynamo.reset()
    n = sweep(pointwise, lambda n: (torch.randn(n, 16), torch.randn(16)), range(2, 65))
    assert n == 2
    # the newest entry serves first: size 2 runs the symbolic entry's kernels too
    assert cdynamo._C.cache_entry_count(pointwise.__code__) == 2


def test_broadcast_and_two_symbols_compile_twice():
    def f(x, y):
        return (x - y) * (x + 1.0)
    n = sweep(f, lambda n: (torch.randn(n, 3, 5), torch.randn(n, 1, 5)), [2, 3, 4, 7, 31])
    assert n == 2
    n = sweep(f, lambda n: (torch.randn(4, n), torch.randn(1, n)), [5, 6, 9, 100])
    assert n <= 2


@pytest.mark.parametrize("name,fn", [
    ("sum", lambda x: x.sum(dim=1) * 2.0),
    ("amax", lambda x: x.amax(0, keepdim=True) + x),
    ("softmax", lambda x: torch.softmax(x * 0.5, dim=-1)),
    ("layer_norm", lambda x: F.layer_norm(x, (16,)) + 1.0),
    ("matmul", lambda x: (x @ torch.ones(16, 4)).relu()),
    ("view", lambda x: x.view(-1) * 2.0),
    ("cat", lambda x: torch.cat([x, x * 2.0], 0).exp()),
])
def test_sweep_matches_eager(name, fn):
    """Every graph kind over a batch sweep: each call equals eager; compiles stay within the
    recompile limit (what cannot take runtime sizes compiles static per size, as before)."""
    n = sweep(fn, lambda n: (torch.randn(n, 16),), [2, 3, 5, 8, 13, 21])
    assert 1 <= n <= cdynamo.config.cache_size_limit


def test_dynamic_true_compiles_once():
    n = sweep(pointwise, lambda n: (torch.randn(n, 16), torch.randn(16)), [5, 9, 33, 2],
              dynamic=True)
    assert n == 1
    # the symbols' sizes: 16 of b and dim 1 of x are symbols too (related)
    n = sweep(pointwise, lambda n: (torch.randn(3, n), torch.randn(n)), [7, 8, 64],
              dynamic=True)
    assert n == 0


def test_dynamic_false_compiles_per_size():
    n = sweep(pointwise, lambda n: (torch.randn(n, 4), torch.randn(4)), [2, 3, 4, 5],
              dynamic=False)
    assert n == 4


def test_config_automatic_off(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "automatic_dynamic_shapes", False)
    n = sweep(pointwise, lambda n: (torch.randn(n, 4), torch.randn(4)), [2, 3, 4])
    assert n == 3
    with pytest.raises(AttributeError, match="automatic_dynamic_shapes"):
        cdynamo.config.automatic_dynamic_shape = True
    with pytest.raises(TypeError):
        cdynamo.config.automatic_dynamic_shapes = "yes"


def test_bad_dynamic_argument():
    with pytest.raises(TypeError, match="dynamic must be None, True or False"):
        cdynamo.optimize(pointwise, dynamic="auto")


def marked(n, dims=0, torch_api=False):
    x = torch.randn(n, 16)
    if torch_api:
        torch._dynamo.mark_dynamic(x, dims)
    else:
        cdynamo.mark_dynamic(x, dims)
    return x, torch.randn(16)


@pytest.mark.parametrize("torch_api", [False, True])
def test_mark_dynamic_first_compile_symbolic(torch_api):
    n = sweep(pointwise, lambda n: marked(n, 0, torch_api), [6, 7, 40])
    assert n == 1
    # unmarked tensors of other sizes still hit the symbolic entry (its guards are >= 2)
    n = sweep(pointwise, lambda n: (torch.randn(n, 16), torch.randn(16)), [3, 9])
    assert n == 0


def test_mark_dynamic_ignored_under_dynamic_false():
    n = sweep(pointwise, lambda n: marked(n), [6, 7], dynamic=False)
    assert n == 2


def test_mark_dynamic_arguments():
    x = torch.randn(2, 3, 4)
    cdynamo.mark_dynamic(x, [0, -1])
    assert x._dynamo_dynamic_indices == {0, 2}
    with pytest.raises(IndexError):
        cdynamo.mark_dynamic(x, 3)
    with pytest.raises(TypeError):
        cdynamo.mark_dynamic([1, 2], 0)
    with pytest.raises(TypeError):
        cdynamo.mark_dynamic(x, "0")


def test_sizes_zero_and_one_specialize():
    n = sweep(pointwise, lambda n: (torch.randn(n, 16), torch.randn(16)), [4, 5, 6], dynamic=True)
    assert n == 1
    n = sweep(pointwise, lambda n: (torch.randn(n, 16), torch.randn(16)), [1, 0, 1, 0])
    assert n == 2   # one static entry each
    # a marked dim of size 1 stays static
    x = torch.randn(1, 16)
    cdynamo.mark_dynamic(x, 0)
    assert_same(pointwise(x, torch.ones(16)), cdynamo.optimize(pointwise)(x, torch.ones(16)))


def test_relation_guard_fails_then_recompiles():
    """x + y with both dims symbolic relies on x's dim 0 == y's: a call where they differ
    (broadcasting y's size 1 instead) misses the symbolic entry and recompiles; right."""
    def f(x, y):
        return x * y + 1.0
    of = cdynamo.optimize(f, dynamic=True)
    for n in (3, 4, 9):
        x, y = torch.randn(n), torch.randn(n)
        assert_same(f(x, y), of(x, y))
    assert compiles() == 1
    x, y = torch.randn(5), torch.randn(6)
    with pytest.raises(RuntimeError) as eager_err:
        f(x, y)
    with pytest.raises(type(eager_err.value)):
        of(x, y)
    x, y = torch.randn(7), torch.randn(1)   # size 1: static entry
    assert_same(f(x, y), of(x, y))
    x, y = torch.randn(12), torch.randn(12)
    before = compiles()
    assert_same(f(x, y), of(x, y))
    assert compiles() == before


def test_relation_guard_text():
    def f(x, y):
        return x * y + 1.0
    of = cdynamo.optimize(f, dynamic=True)
    of(torch.randn(3), torch.randn(3))
    txt = cdynamo.explain(f)(torch.randn(3), torch.randn(3))
    # explain compiles its own copy: its guards carry the symbolic sizes
    text = str(txt)
    assert "size=[>=2], contiguous" in text, text
    assert "SYMBOLIC: 2 symbols; relations s0 == s1" in text, text


def test_non_contiguous_input_misses_symbolic_entry():
    of = cdynamo.optimize(pointwise)
    for n in (4, 5, 6):
        x, b = torch.randn(n, 16), torch.randn(16)
        assert_same(pointwise(x, b), of(x, b))
    assert compiles() == 2
    x = torch.randn(16, 7).t()   # [7, 16], not contiguous: another (symbolic) entry
    assert_same(pointwise(x, b), of(x, b))
    assert compiles() == 3
    x = torch.randn(16, 9).t()   # the same layout at another size: that entry
    assert_same(pointwise(x, b), of(x, b))
    assert compiles() == 3
    x = torch.randn(10, 16)      # contiguous: the first symbolic entry
    assert_same(pointwise(x, b), of(x, b))
    assert compiles() == 3


def test_size_one_dim_strides_follow_eager_on_a_symbolic_entry():
    """clone() keeps its input's strides, a size-1 dim's too: a symbolic entry serves only
    inputs with torch.empty's strides (fuzz finding aliasing_wrong_1048b8cdda: a (2, 1)
    permuted input gave the clone (1, 1) for eager's (1, 2), and its t[0] came back a
    copy); another layout of the same sizes compiles static and matches eager."""
    def f(a):
        t = a.clone()
        return t, t[0]

    def check(a):
        e, c = f(a), of(a)
        assert_same(e, c)
        assert c[0].stride() == e[0].stride()
        assert c[1].data_ptr() == c[0].data_ptr()
    of = cdynamo.optimize(f, dynamic=True)
    check(torch.arange(2, dtype=torch.int32).view(1, 2).permute(1, 0))   # (2, 1), strides (1, 2)
    for n in (3, 5):
        check(torch.arange(n, dtype=torch.int32).view(n, 1))            # strides (1, 1)
    n_sym = compiles()
    check(torch.arange(5, dtype=torch.int32).view(1, 5).permute(1, 0))   # (5, 1), strides (1, 5)
    assert compiles() == n_sym + 1
    check(torch.arange(7, dtype=torch.int32).view(7, 1))
    assert compiles() == n_sym + 1


def test_symbolic_guard_reads_views_and_parameters():
    """The symbolic entry's guard reads sizes and strides through torch's DLPack read
    (torch.Tensor, nn.Parameter; else the attributes): views with a storage offset stay on
    it, rows not contiguous specialize, parameters get a symbolic entry of their own."""
    of = cdynamo.optimize(pointwise)
    b = torch.randn(16)
    for n in (4, 5):
        x = torch.randn(n, 16)
        assert_same(pointwise(x, b), of(x, b))
    assert compiles() == 2
    base = torch.randn(40, 16)
    for x in (base[3:10], base[1:], base[30:32]):
        assert_same(pointwise(x, b), of(x, b))
    assert compiles() == 2                 # all on the symbolic entry
    x = base.reshape(-1)[:5 * 17].as_strided((5, 16), (17, 1))   # rows 17 apart
    assert_same(pointwise(x, b), of(x, b))
    assert compiles() == 3
    for n in (4, 5, 6):                    # nn.Parameter: a type of its own, one symbolic entry
        x = torch.nn.Parameter(torch.randn(n, 16), requires_grad=False)
        assert_same(pointwise(x, b), of(x, b))
    assert compiles() == 4


def recompile_log(capfd, fn, calls, **opts):
    capfd.readouterr()
    cdynamo._C.set_log_topics({"recompiles"})
    try:
        of = cdynamo.optimize(fn, **opts)
        for args in calls:
            assert_same(fn(*args), of(*args))
    finally:
        cdynamo._C.set_log_topics(set())
    return [l.split("] ", 1)[1] for l in capfd.readouterr().err.splitlines()
            if l.startswith("[cdynamo:recompiles]")]


def test_log_names_the_dim_that_became_dynamic(capfd):
    b = torch.randn(16)
    lines = recompile_log(capfd, pointwise, [(torch.randn(8, 16), b), (torch.randn(16, 16), b)])
    assert "dimension 0 of 'x' became dynamic: 8 -> 16" in lines, lines
    assert any(re.match(r"__compiled_fn_\d+: s0 = dim 0 of 'x' is symbolic", l) for l in lines)


def test_log_names_what_specialized(capfd):
    def f(x):
        return x.view(x.size(0), -1) + 1.0
    lines = recompile_log(capfd, f, [(torch.randn(3, 4, 5),), (torch.randn(3, 4, 6),)],
                          dynamic=None)
    assert "dimension 2 of 'x' became dynamic: 5 -> 6" in lines, lines

    def g(x):
        return x / x.size(0) + 1.0
    lines = recompile_log(capfd, g, [(torch.randn(3, 4),), (torch.randn(3, 7),)], dynamic=True)
    assert any(re.match(r"__compiled_fn_\d+: s0 = dim 0 of 'x' specialized to 3: the code read "
                        r"the size", l) for l in lines), lines
    assert any(re.match(r"__compiled_fn_\d+: s1 = dim 1 of 'x' is symbolic", l) for l in lines)


def test_log_says_why_static(capfd):
    def f(x):
        return torch.sort(x, dim=-1).values * 2.0
    lines = recompile_log(capfd, f, [(torch.randn(2, 8),), (torch.randn(3, 8),)])
    assert "dimension 0 of 'x' became dynamic: 2 -> 3" in lines, lines
    assert any(re.match(r"__compiled_fn_\d+: compiled with static sizes: ", l) for l in lines), \
        lines


def test_recompile_limit_still_applies(monkeypatch):
    """A graph that cannot take runtime sizes recompiles per size up to the limit, then runs
    eagerly with the warning; a graph that can needs two entries and never reaches it."""
    monkeypatch.setattr(cdynamo.config, "cache_size_limit", 3)

    def f(x):
        return torch.sort(x, dim=-1).values * 2.0
    with pytest.warns(cdynamo.CdynamoWarning, match="cache_size_limit"):
        n = sweep(f, lambda n: (torch.randn(n, 8),), range(2, 10))
    assert n == 3
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", cdynamo.CdynamoWarning)
        assert sweep(pointwise, lambda n: (torch.randn(n, 16), torch.randn(16)),
                     range(2, 40)) == 2


def test_module_batch_sweep():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    om = cdynamo.optimize(m)
    before = compiles()
    with torch.no_grad():
        for n in (1, 2, 3, 8, 17, 64):
            x = torch.randn(n, 16)
            torch.testing.assert_close(om(x), m(x))
    assert compiles() - before <= cdynamo.config.cache_size_limit


# ---- symbolic Python ints: sizes the code reads (trace/symint.c) ----

def heads_view(x):
    b, t, c = x.shape
    q = x.view(b, t, 4, c // 4).transpose(1, 2)
    return (q * 2.0).transpose(1, 2).reshape(b, t, c) + x.size(-1)


def flat_rows(x):
    n = x.numel() // x.shape[-1]
    return torch.relu(x.reshape(n, x.shape[-1]) - 1.0).view(len(x), -1, x.size(2))


def test_size_reads_into_views_stay_symbolic(capfd):
    lines = symbolic_log(capfd, heads_view, torch.randn(3, 5, 16))
    assert "3 of 3 symbols" in lines[0], lines     # c: x.size(-1) added to a tensor is a
    assert outputs(lines) == ["[s0, s1, s2]"], lines   # runtime number of the kernel
    lines = symbolic_log(capfd, flat_rows, torch.randn(3, 5, 16))
    assert "3 of 3 symbols" in lines[0], lines     # numel() // shape[-1]: an exact quotient
    assert outputs(lines) == ["[s0, s1, s2]"], lines


@pytest.mark.parametrize("fn", [heads_view, flat_rows])
def test_size_reads_into_views_sweep(fn):
    # every call equal to eager's; how often it compiles depends on the kernels taking the
    # views' runtime sizes (compiler/symk.c), the trace keeps them symbolic (test above)
    cdynamo.reset()
    assert sweep(fn, lambda n: (torch.randn(n, 5, 16),), [1, 2, 3, 4, 7, 16, 33]) <= 7
    cdynamo.reset()
    assert sweep(fn, lambda n: (torch.randn(3, n, 16),), [2, 3, 9, 17]) <= 4


def layernorm_gelu(x, w, b):
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b))


def test_layernorm_shape_read_batch_sweep_compiles_twice():
    # x.shape[-1] only reaches normalized_shape: it pins dim -1 (static anyway), not the batch
    cdynamo.reset()
    w, b = torch.randn(64), torch.randn(64)
    assert sweep(layernorm_gelu, lambda n: (torch.randn(n, 64), w, b), range(1, 40)) == 2


def test_size_compare_is_a_guard_and_a_flip_recompiles(capfd):
    # x.shape[0] > 3 is neither true nor false at every size: the entry keeps it as a guard
    # (not a pin of the size), so sizes on one side share a graph; the other side recompiles
    def f(x):
        if x.shape[0] > 3:
            return x + 1.0
        return x.view(x.size(0), -1) - 1.0

    cdynamo.reset()
    sizes = (2, 3, 4, 5, 6, 9, 3, 2, 7)
    lines = recompile_log(capfd, f, [(torch.randn(n, 4),) for n in sizes])
    assert compiles() == 3, lines     # 2 (static), 3 (s0 > 3 False), 4 (s0 > 3 True)
    assert "    - size comparison s0 > 3 is False does not hold (its sides are 4 and 3)" in lines
    assert sum(l.startswith("Recompiling function f") for l in lines) == 2, lines


def test_many_size_comparisons_all_stay_guards(capfd):
    # 40 comparisons of a size (a long model's checks): every one is a guard of the one
    # symbolic entry (no fixed cap that would specialize the size past 32 of them), and a
    # size on the other side of one of them recompiles, never a wrong result
    def f(x):
        n = x.shape[0]
        out = x * 1.0
        for k in range(40):
            if n > k + 3:
                out = out + 1.0
        return out

    cdynamo.reset()
    sizes = (50, 60, 70, 80, 99, 20, 75)
    lines = recompile_log(capfd, f, [(torch.randn(n, 4),) for n in sizes])
    # 50 (static), 60 (every s0 > k + 3 True: serves 70.. 99 and 75), 20 (some False: the
    # guard that failed is named)
    assert compiles() == 3, lines
    assert any("size comparison s0 > 20 is True does not hold (its sides are 20 and 20)" in l
               for l in lines), lines
    cdynamo.reset()
    log = symbolic_log(capfd, f, torch.randn(64, 4))
    cdynamo.reset()
    cdynamo.optimize(f)(torch.randn(48, 4))
    log = symbolic_log(capfd, f, torch.randn(64, 4))
    assert sum(l.startswith("  guard s0 > ") for l in log) == 40, log


def test_many_relations_all_stay_guards():
    # 66 relations (every pair of 12 inputs broadcast against each other): no cap specializes
    # them, so a sweep compiles twice; unequal sizes fall through to a recompile
    def f(a, b, c, d, e, g, h, i, j, k, l, m):
        xs = (a, b, c, d, e, g, h, i, j, k, l, m)
        out = a * 0.0
        for p in range(12):
            for q in range(p + 1, 12):
                out = out + xs[p] * xs[q]
        return out

    cdynamo.reset()
    assert sweep(f, lambda n: tuple(torch.randn(n) for _ in range(12)), (5, 6, 7, 8, 9, 17)) == 2
    of = cdynamo.optimize(f)
    xs = [torch.randn(7) for _ in range(11)] + [torch.randn(1)]   # m broadcasts: a new graph
    assert_same(f(*xs), of(*xs))


def test_size_compare_decided_by_the_range_needs_no_guard(capfd):
    # symbols are >= 2: each of these holds at every size, so the sweep compiles twice and
    # the dynamic log counts them
    def f(x, y):
        out = x * 2.0
        if x.shape[0] > 1 and x.size(0) != 0 and len(x) >= 1 and not x.shape[0] == 0:
            out = out + 1.0
        if x.shape[0] + 4 < 3 or y.shape[1] - 1 <= 0:
            out = out - 100.0
        if x.numel() >= 2 * x.shape[1]:
            out = out + y.sum()
        return out

    cdynamo.reset()
    assert sweep(f, lambda n: (torch.randn(n, 3), torch.randn(2, n)), range(2, 30)) == 2
    cdynamo.reset()
    lines = symbolic_log(capfd, f, torch.randn(6, 3), torch.randn(2, 6))
    assert "  7 comparisons of sizes hold at every size >= 2 (no guard)" in lines, lines
    assert not any("guard s" in l for l in lines), lines


def test_size_compare_between_two_symbols_guards_their_relation(capfd):
    def f(x, y):
        if x.shape[0] >= y.shape[0]:
            return x.sum(0) * y.sum(0)
        return x.mean(0) - y.mean(0)

    cdynamo.reset()
    pairs = [(5, 3), (6, 4), (9, 2), (3, 5), (4, 7), (8, 8), (2, 9)]
    lines = recompile_log(capfd, f, [(torch.randn(a, 4), torch.randn(b, 4)) for a, b in pairs])
    assert compiles() == 3, lines    # static, then one per side of s0 >= s2
    assert any(l.startswith("    - size comparison s0 >= s") and "is True does not hold" in l
               for l in lines), lines


def test_size_compare_feeding_a_tensor_op_pins(capfd):
    # a comparison of a tensor with a size is a graph op reading the size as a number
    def f(x):
        return torch.where(x > x.shape[0] / 4.0, x, -x)

    cdynamo.reset()
    n = sweep(f, lambda n: (torch.arange(float(n * 3)).reshape(n, 3),), range(2, 9))
    assert n == 7


def test_isinstance_of_a_size_and_len_of_a_shape_do_not_pin():
    # transformers' mask code: isinstance(offset, Tensor), len(mask.shape) == 4
    def f(x):
        s = x.shape[0]
        if isinstance(s, torch.Tensor):
            s = s.item()
        if len(x.shape) == 4 or len(x.size()) != 2:
            return x
        return x.reshape(s, -1) + 1.0

    cdynamo.reset()
    assert sweep(f, lambda n: (torch.randn(n, 6),), range(2, 30)) == 2


def _small_causal_lm(kind):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)).eval()
    if kind == "opt":   # builds its positions from torch.ones(b, past + s) and cumsum
        return transformers.OPTForCausalLM(transformers.OPTConfig(
            vocab_size=256, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=128, word_embed_proj_dim=32)).eval()
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=256, n_embd=32, n_layer=2, n_head=4, n_positions=128,
        bos_token_id=0, eos_token_id=0)).eval()


@pytest.mark.parametrize("kind", ["llama", "gpt2", "opt"])
def test_causal_lm_generate_compiles_each_graph_at_most_twice(kind, capfd):
    """A transformers causal LM's greedy generate() with its DynamicCache, 64 new tokens: the
    KV cache grows a token per step; the cache length is compared (mask sizes, isinstance of
    the offset) and goes into attention. Two compiles: prefill, and the first decode step
    with the cache length already symbolic (the cache is a new input whose length is the
    prompt's, which has just changed: 6 -> 1 token)."""
    model = _small_causal_lm(kind)
    ids = torch.randint(3, 256, (1, 6))
    kw = dict(max_new_tokens=64, min_new_tokens=64, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        ref = model.generate(ids, **kw)
        cdynamo.reset()
        forward = model.forward
        model.forward = cdynamo.optimize(forward)
        try:
            capfd.readouterr()
            cdynamo._C.set_log_topics({"recompiles"})
            try:
                out = model.generate(ids, **kw)
            finally:
                cdynamo._C.set_log_topics(set())
            first = compiles()
            lines = capfd.readouterr().err.splitlines()
            again = model.generate(ids, **kw)
        finally:
            model.forward = forward
    assert torch.equal(out, ref) and torch.equal(again, ref)
    assert first == 2, lines
    assert compiles() == first      # the second generation reuses every graph
    assert cdynamo.stats()["fallbacks"] == 0
    assert any("dimension 2 of 'kwargs['past_key_values'].layers[0].keys' became dynamic: a "
               "new input whose size 6 is that of a dim that just changed" in l
               for l in lines), lines


def test_fill_factories_and_cumsum_keep_symbolic_sizes(capfd):
    """torch.ones / zeros / full / new_zeros with sizes read from a tensor, and cumsum over
    them (OPT's positions: ones(b, past + s).cumsum(1)): one symbolic compile after the
    static one; *_like keeps pinning (its input's sizes), still right."""
    def f(x, c):
        past = c.shape[1]
        m = torch.ones(x.shape[0], past + x.shape[1])
        pos = (torch.cumsum(m, dim=1) * m - 1).long()
        z = torch.full((x.shape[0], past), 2.0) + c.new_zeros(c.shape[0], past)
        return pos, torch.zeros(x.shape[0], past) + c * z, m.cumsum(1).sum(1)

    def like(x, c):
        return torch.ones_like(c) * c + x

    for fn, expected in ((f, 2), (like, 2)):
        cdynamo.reset()
        n = sweep(fn, lambda n: (torch.randn(2, 1), torch.randn(2, n)), range(4, 12))
        assert n == expected, fn.__name__
    cdynamo.reset()
    lines = symbolic_log(capfd, f, torch.randn(2, 1), torch.randn(2, 7))
    assert not any("specialized" in l for l in lines), lines


def test_new_input_takes_a_changed_size_symbolic():
    """The policy's rule in small: a recompile whose new tensor input has a dim of the size
    another input's dim had before it changed makes that dim symbolic; other dims and
    unrelated sizes stay static. Every call equals eager."""
    def f(x, cache=None):
        if cache is None:
            return x.sum(-1, keepdim=True) * 2.0
        return torch.cat([cache, x], 1).softmax(1)

    of = cdynamo.optimize(f)
    x6 = torch.randn(3, 6)
    assert_same(f(x6), of(x6))
    for n in range(6, 12):
        c, x = torch.randn(3, n), torch.randn(3, 1)
        assert_same(f(x, c), of(x, c))
    assert compiles() == 2

    cdynamo.reset()   # a new input with no size in common with the change: static first
    of = cdynamo.optimize(f)
    assert_same(f(x6), of(x6))
    for n in range(9, 12):
        c, x = torch.randn(3, n), torch.randn(3, 1)
        assert_same(f(x, c), of(x, c))
    assert compiles() == 3


def test_size_read_escaping_uses_specialize():
    """Every use of a size read that sym/infer.c cannot follow pins it: results match eager
    at every size (a wrong pin-free value would show here as a mismatch)."""
    class Box:
        pass

    box = Box()

    def returned(x):
        return x + 1.0, x.shape[0], x.size()

    def stored(x):
        box.n = x.shape[0]
        return x * 2.0

    def looped(x):
        acc = x[0] * 0.0
        for i in range(x.shape[0]):
            acc = acc + x[i]
        return acc

    def arith(x):
        return x * (x.shape[0] * 2 + 1) - float(x.size(1))

    def starred(x):
        return torch.zeros(*x.shape) + x

    def factory(x):
        return torch.ones(x.shape[0], x.shape[1]) + x

    def keyed(x):
        return {x.shape[0]: x + 1.0}

    def sliced(x):
        n = x.shape[1] // 2
        return x[:, :n] * 2.0

    for fn in (returned, stored, looped, arith, starred, factory, keyed, sliced):
        cdynamo.reset()
        of = cdynamo.optimize(fn)
        for n in (2, 3, 5, 4, 2, 7):
            x = torch.randn(n, n + 1)
            expected = fn(x.clone())
            got = of(x)
            if fn is keyed:
                assert list(got) == list(expected)
                expected, got = list(expected.values()), list(got.values())
            assert_same(expected, got)
            if fn is stored:
                assert box.n == n


def test_size_read_through_inlined_call_stays_symbolic(capfd):
    def split_heads(t, b, s):
        return t.view(b, s, 2, -1).transpose(1, 2)

    def f(x):
        b, s, _ = x.shape
        return split_heads(x, b, s).sum(-1)

    cdynamo.reset()
    sweep(f, lambda n: (torch.randn(n, 3, 8),), [1, 2, 3, 5, 9])
    lines = symbolic_log(capfd, f, torch.randn(3, 4, 8))
    assert outputs(lines) == ["[s0, 2, s1]"], lines   # b, s passed through split_heads

    def g(x):   # the same helper, its size compared inside: pinned there, still right
        b, s, _ = x.shape
        h = split_heads(x, b, s)
        return h * 2.0 if b > 2 else h

    cdynamo.reset()
    sweep(g, lambda n: (torch.randn(n, 3, 8),), [1, 2, 3, 5, 9])


def test_encoder_layer_batch_sweep():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True).eval()
    cdynamo.reset()
    of = cdynamo.optimize(layer)
    before = compiles()
    with torch.no_grad():
        for n in (1, 2, 3, 5, 8, 13):
            x = torch.randn(n, 6, 32)
            torch.testing.assert_close(of(x), layer(x), rtol=1e-4, atol=1e-4)
    assert compiles() - before == 2   # its fast path: one extern of src's sizes


def test_arange_and_embedding_of_sizes_stay_symbolic(capfd):
    torch.manual_seed(0)
    emb = torch.nn.Embedding(50, 8)

    def f(ids):
        pos = torch.arange(ids.shape[1])
        return emb(ids) + pos.float().unsqueeze(-1)

    with torch.no_grad():
        lines = symbolic_log(capfd, f, torch.randint(0, 50, (3, 5)))
    assert outputs(lines) == ["[s0, s1, 8]"], lines

    def g(ids):   # arange from a start that is a size: the start a runtime number
        return torch.arange(ids.shape[0], ids.shape[0] + ids.shape[1]) + ids

    lines = symbolic_log(capfd, g, torch.randint(0, 50, (3, 5)))
    assert outputs(lines) == ["[s0, s1]"], lines


def test_size_read_returned_to_a_builtin_specializes():
    # sorted's key function returns sizes to C code: they are numbers there
    def f(x, y):
        a, b = sorted([x, y], key=lambda t: t.shape[0])
        return a * 2.0 + b.sum()

    cdynamo.reset()
    of = cdynamo.optimize(f)
    for n, m in ((2, 5), (3, 6), (7, 4), (2, 9), (8, 3)):
        x, y = torch.randn(n, 4), torch.randn(m, 4)
        assert_same(f(x.clone(), y.clone()), of(x, y))


# ---- advanced indexing, sizes added to tensors, kwargs of sizes (transformers 5.17's masks) ----

def _inner_mask(mask, past):
    """transformers 5.17's sdpa_mask with a padding mask (masking_utils.py inner_mask):
    padding_mask[batch_idx, kv_idx] over aranges broadcast to 4-D, the KV length a size."""
    b, kv = mask.shape[0], past.shape[2] + 1
    batch_idx = torch.arange(b)[:, None, None, None]
    kv_idx = (torch.arange(kv) + 0)[None, None, None, :]
    m = mask[batch_idx, kv_idx]
    return m.expand(b, -1, 1, kv) * 2.0


def test_advanced_index_with_a_symbolic_length_compiles_twice(capfd):
    def make(n):
        return torch.rand(2, n + 1), torch.randn(2, 4, n, 8)

    lines = symbolic_log(capfd, _inner_mask, *make(5))
    assert outputs(lines) == ["[s0, 1, 1, 1 + s4]"], lines
    cdynamo.reset()
    assert sweep(_inner_mask, make, range(3, 20)) == 2
    lines = symbolic_log(capfd, lambda x, i: x[:, i] + 1.0, torch.randn(3, 7),
                         torch.tensor([[0, 6], [2, -1]]))
    assert outputs(lines) == ["[s0, s2, s3]"], lines   # x's rows, the index tensor's dims


def test_advanced_index_at_a_symbolic_size_checks_its_range():
    of = cdynamo.optimize(_inner_mask)
    for n in (4, 5, 6):
        mask, past = torch.rand(2, n + 1), torch.randn(2, 4, n, 8)
        assert_same(_inner_mask(mask, past), of(mask, past))
    mask, past = torch.rand(2, 9), torch.randn(2, 4, 12, 8)   # kv 13 > the mask's 9
    with pytest.raises(IndexError, match="index 9 is out of bounds for dimension 1 with size 9"):
        _inner_mask(mask, past)
    with pytest.raises(IndexError, match="index 9 is out of bounds for dimension 1 with size 9"):
        of(mask, past)


def test_advanced_index_with_an_int_item_pins_that_dim():
    def f(x, i):
        return x[1, i] * 2.0

    n = sweep(f, lambda n: (torch.randn(4, 3, n), torch.tensor([0, 2, 1])), range(2, 12))
    assert n == 2   # dim 0 pinned (4), the last symbolic
    n = sweep(lambda x, i: x[i, :, -1] + 1.0,
              lambda n: (torch.randn(5, 4, n), torch.tensor([4, -5, 0])), range(2, 7))
    assert n == 5   # x[..., -1]'s offset reads the last dim's size: one compile per size


def test_size_added_to_a_tensor_stays_symbolic(capfd):
    def f(x, past):   # sdpa_mask's q_arange = arange(q_length) + q_offset
        q, p = x.shape[1], past.shape[2]
        qa = torch.arange(q) + p
        ka = torch.arange(p + q) - 0
        m = ka[None, :] <= qa[:, None]
        return torch.where(m, x.sum(0)[:, None], 0.0), qa - p, p + torch.arange(q), qa - 2 * p

    def make(n):
        return torch.randn(2, 3), torch.randn(2, 4, n, 8)

    lines = symbolic_log(capfd, f, *make(5))
    assert not [l for l in lines if "specialized" in l], lines
    cdynamo.reset()
    assert sweep(f, make, range(3, 20)) == 2


def test_sizes_through_kwargs_and_a_keyword_check_stay_symbolic():
    """transformers' deprecate_kwarg wrapper: `old in kwargs` and func(*args, **kwargs) with a
    size among the kwargs (sdpa_mask's kv_length)."""
    def inner(x, kv_length=None, kv_offset=0):
        return x[:, :1] * torch.ones(kv_length) + kv_offset

    def wrapped(*args, **kwargs):
        if "old_name" in kwargs:
            kwargs["kv_length"] = kwargs.pop("old_name")
        return inner(*args, **kwargs)

    def f(x, past):
        return wrapped(x, kv_length=past.shape[2] + 1, kv_offset=0)

    cdynamo.reset()
    assert sweep(f, lambda n: (torch.randn(3, 4), torch.randn(1, 2, n, 4)), range(3, 20)) == 2


def test_arange_between_sizes_stays_symbolic_and_guards_its_order():
    def h(x, past):   # positions past .. past + q (a decode step's cache_position)
        p = past.shape[2]
        return x * torch.arange(p, p + x.shape[1]), torch.arange(p, 40)

    cdynamo.reset()
    of = cdynamo.optimize(h)
    assert sweep(h, lambda n: (torch.randn(2, 3), torch.randn(1, 2, n, 4)), range(3, 20)) == 2
    with pytest.raises(RuntimeError, match="upper bound and lower bound inconsistent"):
        of(torch.randn(2, 3), torch.randn(1, 2, 45, 4))   # 40 >= p failed: a recompile, as eager


def test_triu_tril_diagonal_from_sizes_stays_symbolic():
    def f(x, past):   # a decode step's mask: triu(full((q, past + q)), diagonal=past + 1)
        p = past.shape[2]
        s = torch.full((x.shape[0], p + x.shape[0]), 1.0)
        return torch.triu(s, diagonal=p + 1) * 2.0, torch.tril(x, -p + 3), x - (-p)

    cdynamo.reset()
    assert sweep(f, lambda n: (torch.randn(4, 9), torch.randn(1, 2, n, 4)), range(3, 20)) == 2


# ---- BLOOM's decoding step: repeat, baddbmm, sizes in a dict display -----------------------

def _alibi_scores(q, k, slopes):
    """BLOOM's attention scores: alibi (slopes x positions) repeated over the batch, then
    baddbmm with the scaled q @ k."""
    kv = k.shape[-1]
    alibi = slopes[:, None, None] * torch.arange(kv)
    alibi = alibi.repeat(q.shape[0] // slopes.shape[0], 1, 1)
    return alibi.baddbmm(batch1=q, batch2=k, beta=1.0, alpha=0.25).softmax(-1)


def test_repeat_and_baddbmm_sizes_stay_symbolic():
    """A growing key length through Tensor.repeat (views and a copy) and baddbmm (its rule:
    bmm's sizes, the bias broadcast): two compiles for the sweep, eager's values."""
    slopes = torch.rand(4)
    n = sweep(_alibi_scores, lambda n: (torch.randn(8, 1, 16), torch.randn(8, 16, n), slopes),
              [5, 6, 7, 9, 12])
    assert n == 2


@pytest.mark.parametrize("reps", [(2, 1, 1), (1, 3, 2), (2, 1, 1, 3), ((3, 1, 2),), (1, 1, 1)])
def test_repeat_forms_match_eager(reps):
    """x.repeat(*sizes) and x.repeat(sizes), more sizes than dims, all ones: symbolic."""
    def f(x):
        return x.repeat(*reps) * 2.0
    n = sweep(f, lambda n: (torch.randn(4, 1, n),), [5, 6, 8])
    assert n == 2


def test_repeat_result_is_a_fresh_tensor():
    """Writing the repeat's result (all ones too) leaves x alone, as in eager (the write
    into the copy's reshaped view does not yet take runtime sizes: static per size)."""
    def f(x):
        r = x.repeat(1, 1, 1)
        r.add_(1.0)
        s = x.repeat(2, 1, 1)
        s.mul_(3.0)
        return r, s, x * 1.0
    n = sweep(f, lambda n: (torch.randn(4, 1, n),), [5, 6, 8])
    assert 1 <= n <= 3


def test_sizes_in_a_dict_display_stay_symbolic():
    """f(x, n=size, **kw) (BUILD_MAP / BUILD_CONST_KEY_MAP of the explicit keywords, then
    DICT_MERGE: transformers' eager_mask calling sdpa_mask) and {'k': size, ...} displays move
    the size, as a merge does: GPT-J's decoding mask."""
    def inner(x, n=None, m=0, **kw):
        return x[:, :1] * torch.ones(n) + m + kw.get("extra", 0)

    def f(x, past):
        p = past.shape[2]
        d = {"n": p + 1, "m": 2}
        return inner(x, n=p, **{"extra": 1}), inner(x, **d)

    cdynamo.reset()
    assert sweep(f, lambda n: (torch.randn(3, 4), torch.randn(1, 2, n, 4)), range(3, 20)) == 2


def test_size_as_a_dict_key_pins_it():
    """A dict key is hashed by its value: {size: ..., 3: ...} has 1 key at size 3, 2 else."""
    def f(x, past):
        d = {past.shape[2]: 1.0, 3: 2.0}
        return x * len(d) + d[3]

    cdynamo.reset()
    sweep(f, lambda n: (torch.randn(3, 4), torch.randn(1, 2, n, 4)), [3, 4, 5, 3, 6, 3])


def test_min_max_of_two_tensors_keep_sizes_symbolic():
    """torch.min(a, b) / torch.max(a, b) / a.min(b) are minimum / maximum (T5's relative
    position buckets): no size pin, eager's NaN propagation."""
    def f(x, past):
        r = torch.arange(past.shape[2])[None, :] - torch.arange(x.shape[0])[:, None]
        r = -torch.min(r, torch.zeros_like(r))
        big = torch.min(r + 7, torch.full_like(r, 9))
        return torch.where(r < 3, r, big), torch.max(x, 1.0 - x), x.min(x * 0.5)

    def make(n):
        x = torch.randn(4, n)
        x[1, 0] = float("nan")
        return x, torch.randn(1, 2, n, 4)

    cdynamo.reset()
    assert sweep(f, make, range(3, 20)) == 2


def test_dict_subclass_argument_is_guarded_by_type():
    """A Python subclass of dict / OrderedDict passed in (a transformers ModelOutput made
    anew each call) is guarded by type, its items by their sources and len() by a LEN
    guard: a new instance reuses the entry, another length recompiles."""
    import collections   # noqa: PLC0415

    class Out(collections.OrderedDict):
        pass

    def f(o):
        return o["a"] * len(o) + (o["b"] if "b" in o else 0)

    cdynamo.reset()
    of = cdynamo.optimize(f)
    for _ in range(3):
        o = Out(a=torch.randn(4))
        assert_same(f(o), of(o))
    assert compiles() == 1
    o = Out(a=torch.randn(4), b=torch.randn(4))
    assert_same(f(o), of(o))
    assert compiles() == 2


def test_list_index_inside_an_index_tuple():
    """x[..., [-2], :] (Falcon's multi-query split): a list of constants inside the index
    tuple is one graph (it broke the graph: BAD_OP_ARG); eager's values at every size (the
    advanced index has no symbolic rule yet: it pins the sizes, each size compiles)."""
    def f(x):
        return x[..., [-2], :] * 2, x[:, [0, 2]] + 1, x[..., [-1, 0], :]

    def g(x):
        return x[..., [x.shape[2] - 2, 0], :] * 2

    cdynamo.reset()
    sweep(f, lambda n: (torch.randn(2, 3, 4, n),), range(3, 9))
    assert cdynamo.stats()["graph_breaks"] == 0
    cdynamo.reset()
    sweep(g, lambda n: (torch.randn(2, 3, n, 4),), range(3, 9))
    assert cdynamo.stats()["graph_breaks"] == 0
