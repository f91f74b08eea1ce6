"""Regression tests for issue 28, items 9 (clamp with NaN bounds), 17 (output
strides where the layout is ambiguous) and 22 (repro.py for every graph)."""
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

import cdynamo


def _bits(t):
    """t's float elements as integers (NaN payloads and signs compared exactly)."""
    t = t.contiguous()
    if t.dtype == torch.float32:
        return t.view(torch.int32)
    if t.dtype == torch.float64:
        return t.view(torch.int64)
    return t


def _run_both(f, *args):
    """(eager result or exception, compiled result or exception) on clones of args."""
    out = []
    for run in (f, cdynamo.optimize(f)):
        a = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
        try:
            out.append((run(*a), None))
        except Exception as e:  # noqa: BLE001 - compared below
            out.append((None, e))
    return out


def _assert_bitwise(f, *args):
    (e, ee), (c, ce) = _run_both(f, *args)
    assert type(ee) is type(ce), (ee, ce)
    if ee is not None:
        assert str(ee) == str(ce)
        return
    assert e.dtype == c.dtype and e.shape == c.shape and e.stride() == c.stride()
    assert torch.equal(_bits(e), _bits(c)), (e, c)


# ---- item 9: clamp ---------------------------------------------------------

def _special(dtype, shape=(40, 33)):
    x = torch.randn(shape, dtype=torch.float64).to(dtype)
    x[1, 4] = math.nan
    x[2, :7] = -0.0
    x[3, 2] = -math.nan
    x[4, 1] = math.inf
    x[4, 2] = -math.inf
    return x


BOUNDS = (None, 0.0, -0.0, 0.5, -0.5, math.nan, -math.nan, math.inf, -math.inf)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clamp_nan_bounds_bitwise(dtype):
    x = _special(dtype)
    for lo, hi in itertools.product(BOUNDS, BOUNDS):
        if lo is None and hi is None:
            continue
        cdynamo.reset()
        _assert_bitwise(lambda x, lo=lo, hi=hi: torch.clamp(x, lo, hi), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "small"])
def test_clamp_family_nan_bounds(dtype, layout):
    x = _special(dtype)
    x = {"contiguous": x, "transposed": x.t(), "sliced": x[:, ::2], "small": x[3, :5]}[layout]
    fns = {
        "clamp_nan_max": lambda x: torch.clamp(x, min=0.5, max=math.nan),
        "clip_nan_min": lambda x: torch.clip(x, min=math.nan),
        "clamp_max_nan": lambda x: torch.clamp_max(x, math.nan),
        "clamp_min_negnan": lambda x: torch.clamp_min(x, -math.nan),
        "method_clamp_max_negnan": lambda x: x.clamp_max(-math.nan),
        "clamp__nan": lambda x: x.clamp_(min=0.5, max=math.nan) * 1,
        "clamp_min__nan": lambda x: x.clamp_min_(math.nan),
        "fused": lambda x: torch.clamp(x * 2, max=math.nan) + 1,
        "hardtanh_nan": lambda x: F.hardtanh(x, math.nan, 1.0),
        "hardtanh__nan": lambda x: F.hardtanh_(x, -1.0, math.nan),
        "min_gt_max": lambda x: torch.clamp(x, min=1.0, max=-1.0),
        "min_gt_max_zeros": lambda x: torch.clamp(x, min=0.0, max=-0.0),
        "signed_zero": lambda x: torch.clamp(x, min=0.0) + torch.clamp_max(x, -0.0),
    }
    for name, f in fns.items():
        cdynamo.reset()
        _assert_bitwise(f, x)
    # tensor bounds holding NaNs and signed zeros (x's own, flipped), next to a NaN scalar
    lo, hi = x.flip(0), x.flip(-1) + 1
    for f in (lambda x, lo, hi: torch.clamp(x, lo, hi) + torch.clamp(x, max=math.nan),
              lambda x, lo, hi: torch.clamp(x, hi, lo) * torch.clamp_min(x, math.nan),
              lambda x, lo, hi: (torch.clamp(x, min=lo), torch.clamp(x, max=math.nan)),
              lambda x, lo, hi: (torch.clamp(x.long(), lo, hi), x.clamp_max(math.nan))):
        cdynamo.reset()
        (e, ee), (c, ce) = _run_both(f, x, lo, hi)
        assert ee is None and ce is None, (ee, ce)
        torch.testing.assert_close(c, e, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_clamp_integer_inputs(dtype):
    x = torch.randint(0, 6, (37,), dtype=dtype)
    cases = [
        lambda x: torch.clamp(x, 0.5, 2.5),          # float bounds: promoted to float
        lambda x: torch.clamp(x, min=math.nan),      # float result, all NaN
        lambda x: torch.clamp(x, max=math.nan),
        lambda x: torch.clamp_min(x, math.nan),
        lambda x: torch.clamp(x, 3, 1),              # min > max: max
        lambda x: torch.clamp(x, min=-1000),         # eager raises for 8-bit x
        lambda x: torch.clamp(x, -255, 3),           # uint8: -255 wraps to 1
        lambda x: torch.clamp(x, -256),              # uint8: raises
        lambda x: torch.clamp_max(x, 1000),
        lambda x: torch.clamp_min(x, 2 ** 63),       # raises for every integer dtype
        lambda x: torch.clamp(x, max=-2 ** 63),
        lambda x: torch.clamp(x, min=True),
        lambda x: F.hardtanh(x, -0.5, 2.0),          # uint8: raises (negative limit)
        lambda x: F.hardtanh(x, 1.5, 3.5),
        lambda x: F.hardtanh(x, math.nan, 1.0),
        lambda x: F.relu6(x),
        lambda x: x.clamp_(0.5, 2.5),                # in place: float can't be cast
    ]
    for f in cases:
        cdynamo.reset()
        _assert_bitwise(f, x)




# ---- item 17: output strides where the layout is ambiguous ---------------------

def _strided(dtype, sizes, strides):
    """A tensor of dtype with exactly these sizes and strides (values 1..10)."""
    need = 1 + sum((s - 1) * t for s, t in zip(sizes, strides))
    store = torch.randn(need, dtype=torch.float64).abs() * 9 + 1
    store = store > 5 if dtype == torch.bool else store.to(dtype)
    return store.as_strided(sizes, strides)


def _assert_strides(f, *args):
    e = f(*args)
    c = cdynamo.optimize(f)(*args)
    es = e if isinstance(e, (tuple, list)) else (e,)
    cs = c if isinstance(c, (tuple, list)) else (c,)
    for x, y in zip(es, cs):
        assert x.dtype == y.dtype
        assert x.stride() == y.stride(), (x.shape, x.stride(), y.stride())
        torch.testing.assert_close(y, x, equal_nan=True)


def test_promoted_input_votes_with_its_converted_copy():
    # eager converts the expanded uint8 input to float32 first (a contiguous copy), which
    # then decides the layout: (64, 1), not b's transposed order
    a = torch.randint(0, 5, (3, 1), dtype=torch.uint8).expand(3, 64)
    b = torch.randn(64, 3).t()
    for f in (lambda a, b: a.lt(b), lambda a, b: a + b, lambda a, b: torch.maximum(a, b),
              lambda a, b: torch.where(b > 0, a, b), lambda a, b: a.double() * b):
        cdynamo.reset()
        _assert_strides(f, a, b)
    x = _strided(torch.int32, (2, 3, 4), (1, 0, 2))
    y = _strided(torch.float32, (2, 3, 4), (12, 1, 3))
    for f in (lambda x, y: x * y, lambda x, y: x.eq(y), lambda x, y: x / 2 + y):
        cdynamo.reset()
        _assert_strides(f, x, y)


@pytest.mark.parametrize("sizes,strides", [
    ((1, 1, 1, 4), (4, 4, 1, 1)), ((1, 2), (1, 1)), ((3, 1, 2), (1, 5, 3)),
    ((2, 1, 3), (0, 1, 1)), ((2, 3, 4), (1, 0, 2)), ((4, 3), (1, 8)), ((3, 64), (1, 0))])
def test_cast_keeps_layout_as_to_does(sizes, strides):
    x = _strided(torch.float64, sizes, strides)
    fns = (lambda x: x.float(), lambda x: x.to(torch.float32), lambda x: x.int(),
           lambda x: x.bool(), lambda x: (x * 2).float(), lambda x: x.long() + 1)
    for f in fns:
        cdynamo.reset()
        _assert_strides(f, x)


def test_scalar_parameters_are_not_iterator_operands():
    # pow(x, number) and clamp(x, numbers) iterate over x alone (a contiguous x with
    # odd size-1 strides gets contiguous strides), x + number over x and a 0-d operand
    x = _strided(torch.float32, (1, 1, 2, 1), (2, 2, 1, 2))
    xi = _strided(torch.uint8, (4, 4, 1, 2), (8, 2, 2, 1))
    for f, a in ((lambda x: x ** 2, x), (lambda x: torch.pow(x, 3.0), x), (lambda x: x + 1, x),
                 (lambda x: torch.clamp(x, 0.5, 2.0), x), (lambda x: x.clamp(min=1.5), xi),
                 (lambda x: x ** 2, xi), (lambda x: x.lt(2.5), xi)):
        cdynamo.reset()
        _assert_strides(f, a)


def _layout_input(rng, shape, dtype):
    nd = len(shape)
    kind = rng.choice(["contig", "t", "perm", "slice", "expand", "size1"])
    if kind == "perm" and nd >= 2:
        p = list(range(nd))
        rng.shuffle(p)
        base = torch.empty([shape[i] for i in p]).permute(*[p.index(i) for i in range(nd)])
    elif kind == "t" and nd >= 2:
        base = torch.empty(shape[:-2] + [shape[-1], shape[-2]]).transpose(-1, -2)
    elif kind == "slice":
        d = rng.randrange(nd)
        big = list(shape)
        big[d] *= 2
        base = torch.empty(big)[(slice(None),) * d + (slice(None, None, 2),)]
    elif kind == "expand":
        base = torch.empty([1 if rng.random() < 0.5 else n for n in shape]).expand(shape)
    else:
        base = torch.empty(shape)
    return _strided(dtype, base.shape, base.stride())


def test_random_pointwise_programs_strides_match_eager():
    import random
    rng = random.Random(28)
    dtypes = [torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8, torch.bool]
    unary = [lambda x: x + 1, lambda x: x * 2.5, lambda x: x.float(), lambda x: x.double(),
             lambda x: x.to(torch.int32), lambda x: torch.isnan(x), lambda x: x.bool(),
             lambda x: torch.exp(x.float()), lambda x: x ** 2 if x.dtype != torch.bool else x,
             lambda x: x.clamp(min=1.5) if x.dtype != torch.bool else x]
    binary = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a.lt(b), lambda a, b: a == b,
              lambda a, b: torch.where(a > 1, a, b), lambda a, b: a / b,
              lambda a, b: torch.where(b > 1, 1.0, a), lambda a, b: a >= b]
    checked = 0
    for _ in range(120):
        shape = [rng.choice([1, 1, 2, 3, 4]) for _ in range(rng.randint(2, 4))]
        shapes = [[1 if rng.random() < 0.3 else n for n in shape] for _ in range(rng.choice([1, 2, 3]))]
        ins = [_layout_input(rng, s, rng.choice(dtypes)) for s in shapes]
        prog = [(rng.random() < 0.4, rng.randrange(10), rng.randrange(10), rng.randrange(10))
                for _ in range(rng.randint(1, 3))]

        def f(*xs, prog=prog):
            vals = list(xs)
            for is_un, k, i, j in prog:
                if is_un:
                    vals.append(unary[k % len(unary)](vals[i % len(vals)]))
                else:
                    vals.append(binary[k % len(binary)](vals[i % len(vals)], vals[j % len(vals)]))
            return vals[len(xs):]
        try:
            e = f(*ins)
        except RuntimeError:
            continue
        cdynamo.reset()
        c = cdynamo.optimize(f)(*ins)
        for x, y in zip(e, c):
            assert x.dtype == y.dtype
            if x.numel() > 1:
                assert x.stride() == y.stride(), (prog, [(t.dtype, t.shape, t.stride()) for t in ins])
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("xs,ws,pad", [
    ((1, 1, 1, 1), (8, 1, 1, 1), 1), ((1, 1, 1, 1), (8, 1, 3, 3), 1), ((2, 1, 1, 1), (8, 1, 1, 1), 1),
    ((2, 2, 1, 1), (8, 2, 1, 1), 1), ((1, 3, 1, 1), (8, 3, 1, 1), 0), ((16, 2, 1, 1), (4, 2, 1, 1), 1)])
def test_conv2d_size1_spatial_strides(xs, ws, pad):
    # an (N, C, 1, 1) input is contiguous and channels_last at once; torch suggests
    # contiguous for it and so does the CPU kernel's result (it used to come back
    # channels_last, and with C > 1 the rewrite recursed until the stack overflowed)
    x, w = torch.randn(xs), torch.randn(ws)
    for f in (lambda x, w: F.conv2d(x, w, padding=pad), lambda x, w: F.conv2d(x, w, padding=pad).relu(),
              lambda x, w: F.conv2d(x.double(), w.double(), padding=pad)):
        cdynamo.reset()
        _assert_strides(f, x, w)


@pytest.mark.parametrize("sizes,strides", [
    ((1, 2, 5, 2), (1, 1, 4, 2)), ((16, 2, 1, 2), (4, 1, 64, 2)), ((1, 1, 7, 4), (28, 1, 4, 1)),
    ((2, 3, 4, 1), (12, 1, 3, 3)), ((1, 3, 2, 1), (1, 1, 3, 1))])
def test_batch_norm_eval_strides(sizes, strides):
    # CPU's batch_norm keeps a contiguous or channels_last-contiguous input's format
    # (contiguous first), and only otherwise follows suggest_memory_format()
    x = _strided(torch.float32, sizes, strides)
    c = sizes[1]
    f = lambda x: F.batch_norm(x, torch.zeros(c), torch.ones(c))
    _assert_strides(f, x)
    cdynamo.reset()
    _assert_strides(lambda x: F.batch_norm(x * 2, torch.zeros(c), torch.ones(c)).relu(), x)


def test_index_fill_and_pooling_ambiguous_layouts():
    x = torch.randn(4, 5, 6).permute(2, 0, 1)[:, ::2]
    _assert_strides(lambda x, i: x.index_fill(0, i, 1.0), x, torch.tensor([1, 3]))
    for x in (torch.randn(1, 1, 1, 1), torch.randn(2, 3, 1, 1), torch.randn(1, 3, 4, 1).contiguous(
            memory_format=torch.channels_last), torch.randn(2, 1, 4, 4).contiguous(memory_format=torch.channels_last)):
        for f in (lambda x: F.max_pool2d(x, 1), lambda x: F.avg_pool2d(x, 1),
                  lambda x: F.adaptive_avg_pool2d(x, 1), lambda x: F.interpolate(x, scale_factor=2)):
            cdynamo.reset()
            _assert_strides(f, x)


# ---- item 22: repro.py reproduces every graph ------------------------------------

def _pointwise(x, y):
    return torch.where(x > 0, x * y, -y).clamp(min=0.5, max=2.0), x.lt(y.double())


def _reductions(x):
    return x.sum(-1) + x.mean(0).sum(), x.amax(1, keepdim=True), x.var(0), x.argmax(), x.any(1)


def _rows(x, w, b):
    return (x.softmax(-1), x.log_softmax(0), F.layer_norm(x, (5,), w, b),
            F.group_norm(x.view(2, 2, 5), 2))


def _views(x):
    t = x[1:, ::2].t()
    return t + 1, x.view(5, 4).flip(0) * 2, x.permute(1, 0).reshape(-1)[3:] - 1, x.unsqueeze(0).expand(2, 4, 5)


def _indexing(x, i):
    return (x.index_select(0, i) + 1, x[i], torch.gather(x, 1, i.view(-1, 1).expand(-1, 3)),
            x.index_fill(1, i, 2.0), F.embedding(i, x))


def _factories(x):
    return (torch.ones(5) * x, torch.arange(5) + x, torch.full((4, 5), 2.0) - x,
            torch.zeros_like(x) + torch.linspace(0, 1, 5), torch.cat([x, x], 0), torch.stack([x, x]))


def _externs(x, w, b, img, k):
    q = x.view(1, 1, 4, 5)
    return (x @ w, F.linear(x, w.t(), b), torch.relu(F.conv2d(img, k, padding=1)),
            F.max_pool2d(img, 2), F.scaled_dot_product_attention(q, q, q), x.cumsum(0),
            x.sort(-1)[0], x.max(0))


def _mutation(x, y):
    x.add_(1)
    y[0] = 5.0
    z = x * 2
    z += y
    z[:, 1] = 0
    return z


def _mutation_layout(x):
    t = torch.cosh(x)          # x permuted: t too; the write keeps t's strides
    t[t > 1.5] = 0.0
    v = x.contiguous().exp()
    v[1:].mul_(2)              # a write through a view of an intermediate
    return t, v


def _nan_clamp(x):
    return torch.clamp(x, min=0.5, max=math.nan), x.clamp_min(-math.nan), x.clip(max=1.0).double()


REPRO_CASES = {
    "pointwise": (_pointwise, lambda: (torch.randn(4, 5), torch.randn(5, 4).t())),
    "reductions": (_reductions, lambda: (torch.randn(4, 5),)),
    "rows": (_rows, lambda: (torch.randn(4, 5), torch.randn(5), torch.randn(5))),
    "views": (_views, lambda: (torch.randn(4, 5),)),
    "indexing": (_indexing, lambda: (torch.randn(4, 3), torch.tensor([0, 2]))),
    "factories": (_factories, lambda: (torch.randn(4, 5),)),
    "externs": (_externs, lambda: (torch.randn(4, 5), torch.randn(5, 3), torch.randn(3),
                                   torch.randn(1, 2, 4, 4), torch.randn(3, 2, 3, 3))),
    "mutation": (_mutation, lambda: (torch.randn(3, 4), torch.randn(3, 4))),
    "mutation_layout": (_mutation_layout, lambda: (torch.randn(4, 3).t(),)),
    "nan_clamp": (_nan_clamp, lambda: (torch.randn(6),)),
}


@pytest.mark.parametrize("case", list(REPRO_CASES))
def test_repro_reproduces_every_op_family(case, tmp_path, monkeypatch):
    import os
    import subprocess
    import sys
    fn, make = REPRO_CASES[case]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cdynamo.config, "debug", True)
    monkeypatch.setattr(cdynamo.config, "debug_dir", str(tmp_path / "dbg"))
    args = make()
    e = fn(*[a.clone() for a in args])
    c = cdynamo.optimize(fn)(*[a.clone() for a in args])
    torch.testing.assert_close(c, e, equal_nan=True)
    assert cdynamo.stats()["frames_compiled"] >= 1
    repros = sorted((tmp_path / "dbg").glob("run_*/*/repro.py"))
    assert repros
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(cdynamo.__file__)))
    for repro in repros:
        text = repro.read_text()
        assert "fn.not_generated = True" not in text, text
        assert "INPUTS = []" not in text
        env = dict(os.environ, PYTHONPATH=pkg, CDYNAMO_CACHE_DIR=str(tmp_path / "cache"))
        r = subprocess.run([sys.executable, str(repro)], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0 and "repro: OK" in r.stdout, (repro, r.stdout + r.stderr)


def test_repro_inputs_keep_dtypes_shapes_strides(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cdynamo.config, "debug", True)
    monkeypatch.setattr(cdynamo.config, "debug_dir", str(tmp_path / "dbg"))
    x = torch.randn(4, 3).t()
    y = torch.randint(0, 3, (3, 1), dtype=torch.int32).expand(3, 4)
    cdynamo.optimize(lambda x, y: x.sum(1) + y.sum(1))(x, y)
    (repro,) = (tmp_path / "dbg").glob("run_*/*/repro.py")
    text = repro.read_text()
    assert "('x', 'float32', [3, 4], [1, 3])" in text
    assert "('y', 'int32', [3, 4], [1, 0])" in text


@pytest.mark.parametrize("exponent", [False, True])
def test_extern_whose_cpu_dtype_differs_from_its_meta_runs_eagerly(exponent):
    # torch.pow(bool tensor, bool) is int64 on the meta device but bool on the CPU: the
    # kernel after it read the bool's byte as an int64 (1.8e12 for 1); the graph now sees
    # the dtype differ and its frame reruns eagerly (found by tools/fuzz.py, pointwise family)
    t = torch.tensor([True, False, True])
    f = lambda t: torch.pow(t, exponent).double() * 2
    expected = f(t)
    for _ in range(2):
        actual = cdynamo.optimize(f)(t)
        torch.testing.assert_close(actual, expected)
    assert cdynamo.stats()["eager_reruns"] == 2


def test_float64_log1p_of_denormals_is_eagers():
    """Eager's float64 log1p of a denormal x is 2 * (x / (2 + x)) on every path (5e-324 gives
    0, fuzz special_wrong_70c20acde5); libm's is exact.  Bit-equal over denormals and the
    smallest normals, then within tolerance elsewhere."""
    tiny = torch.finfo(torch.float64).tiny
    x = torch.rand(512, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * tiny * 4
    x = torch.cat([x, -x, torch.tensor([5e-324, -5e-324, 1e-323, 1.5e-323, 1e-310, 0.0, -0.0],
                                       dtype=torch.float64)])
    f = cdynamo.optimize(lambda t: torch.log1p(t) * 1)
    got, want = f(x), torch.log1p(x)
    assert torch.equal(got, want)
    assert torch.equal(got.signbit(), want.signbit())
    y = torch.tensor([1e-5, 0.5, -0.99, float("inf"), -1.0, float("nan"), 3e300], dtype=torch.float64)
    torch.testing.assert_close(f(y), torch.log1p(y), equal_nan=True)
