"""Regression tests for the wrong results the issue-28 fuzz campaigns found
(tools/fuzz_findings/FINDINGS.md): each class fixed at its root, tested on the
minimized program and on the general form of the bug."""
import math

import pytest
import torch

import cdynamo


def _bits(t):
    """t's elements as integers where float (signed zeros, NaN payloads compared)."""
    t = t.contiguous()
    if t.dtype == torch.float32:
        return t.view(torch.int32)
    if t.dtype == torch.float64:
        return t.view(torch.int64)
    return t


def _assert_bitwise(f, *args):
    """f compiled gives eager's result bit for bit: dtype, shape, strides, values."""
    e = f(*[a.clone() for a in args])
    c = cdynamo.optimize(f)(*[a.clone() for a in args])
    es = e if isinstance(e, tuple) else (e,)
    cs = c if isinstance(c, tuple) else (c,)
    assert len(es) == len(cs)
    for x, y in zip(es, cs):
        assert (x.dtype, x.shape, x.stride()) == (y.dtype, y.shape, y.stride())
        assert torch.equal(_bits(x), _bits(y)), (x, y)


# ---- rounding conversions that GCC folded away ------------------------------
# GCC 12 folds (double)(float)x back to x in vectors of equal lane counts (the
# SLP-vectorized and epilogue loops of small fixed sizes), and, with the
# generated files' no-trapping-math, (float)(int)x into trunc(x) (-0.0 for x in
# (-1, 0)).  Every size 1..40 takes another mix of vector and scalar code.

def _near_float(n):
    """float64 values most of which float32 rounds up or down, and -0.0 / NaN."""
    x = torch.arange(n, dtype=torch.float64) * 0.1 + 1e-9
    x[::5] = -x[::5]
    if n > 3:
        x[3] = -0.0
    return x


ROUND_TRIPS = {
    "lt": lambda x: x.lt(x.to(torch.float32)),
    "ge": lambda x: x >= x.float(),
    "eq": lambda x: x == x.float(),
    "ne": lambda x: x.float() != x,
    "sub": lambda x: x.float().double() - x,
    "finding_fb0b352123": lambda x: x.float() * torch.atan(x.lt(x.float())),
}


@pytest.mark.parametrize("n", range(1, 41))
@pytest.mark.parametrize("name", sorted(ROUND_TRIPS))
def test_float64_float32_round_trip_is_kept(name, n):
    _assert_bitwise(ROUND_TRIPS[name], _near_float(n))


TRUNC_TRIPS = {
    "tanh_int": lambda x: x.int().tanh(),                      # finding 384a972ce9
    "int_float": lambda x: x.int().float(),
    "long_double": lambda x: x.double().long().double(),
    "floordiv": lambda x: x.long() // x,                        # finding 20d180b77b
    "where": lambda x: torch.where(x.long() > 0, x, x.long()),  # finding 2288be8b13
}


@pytest.mark.parametrize("n", [1, 5, 8, 13, 33, 257])
@pytest.mark.parametrize("name", sorted(TRUNC_TRIPS))
def test_float_int_float_is_not_trunc(name, n):
    """(float)(int)x is +0.0 for x in (-1, 0) (trunc gives -0.0), and INT_MIN for x
    out of the int's range (as eager's conversions on x86), not x."""
    x = torch.linspace(-0.99, 0.99, n, dtype=torch.float32)
    if n > 4:
        x[1], x[2], x[3] = -3e9, 3e9, -0.0
    _assert_bitwise(TRUNC_TRIPS[name], x)


# ---- layer_norm / group_norm rows whose moments overflow --------------------
# eager's moments (ATen's RowwiseMoments: Welford per lane, merged) are NaN for a
# row holding inf or NaN, and NaN or inf (rstd 0) for rows of |x| whose squares
# overflow, depending on where the large values sit; a row that may overflow
# takes eager's moments, computed element by element as ATen does.

SPECIAL = [math.nan, -math.nan, math.inf, -math.inf, -0.0, 1e-30, 1e19, -1e19, 5e18, 1e20,
           -1e20, 1e30, -1e30, 3.4e38, 1e160, -1e160, 1e300]


def _special_rows(dtype, rows, n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, n, generator=g, dtype=torch.float64)
    for r in range(rows):
        for _ in range(int(torch.randint(0, 4, (), generator=g))):
            i = int(torch.randint(0, n, (), generator=g))
            x[r, i] = SPECIAL[int(torch.randint(0, len(SPECIAL), (), generator=g))]
    return x.to(dtype)


NORM_SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 24, 32, 33, 64, 129, 300, 1030]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", NORM_SIZES)
def test_layer_norm_overflowing_rows_as_eager(dtype, n):
    x = _special_rows(dtype, 40, n, n)
    w = torch.randn(n, dtype=dtype)
    _assert_close_nan(lambda x: torch.nn.functional.layer_norm(x, (n,)), x)
    _assert_close_nan(lambda x, w: torch.nn.functional.layer_norm(x, (n,), w, w, eps=0.1), x, w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [2, 6, 8, 16, 18, 40, 160])
def test_group_norm_overflowing_groups_as_eager(dtype, n):
    x = _special_rows(dtype, 24, n, 100 + n).view(6, 4, n)
    w = torch.randn(4, dtype=dtype)
    _assert_close_nan(lambda x: torch.nn.functional.group_norm(x, 2), x)
    _assert_close_nan(lambda x, w: torch.nn.functional.group_norm(x, 1, w, w), x, w)


def _assert_close_nan(f, *args):
    """Where eager is NaN or +-inf compiled is the same; elsewhere close."""
    e = f(*[a.clone() for a in args])
    c = cdynamo.optimize(f)(*[a.clone() for a in args])
    assert (e.dtype, e.shape, e.stride()) == (c.dtype, c.shape, c.stride())
    assert torch.equal(e.isnan(), c.isnan()), (e[e.isnan() != c.isnan()], c[e.isnan() != c.isnan()])
    fin = ~e.isnan()
    torch.testing.assert_close(c[fin], e[fin], rtol=1e-5, atol=1e-5)


# ---- output strides: the CPU kernel's, not torch's meta's ---------------------
# torch 2.13's metas of pointwise ops are Python refs whose stride rule is not
# TensorIterator's: with broadcast / expanded operands of mixed layouts or
# dtypes the CPU picks other strides; log_sigmoid's and rrelu's CPU kernels
# allocate contiguous results where the meta keeps the input's layout.

def _layout(shape, layout, dtype, seed):
    g = torch.Generator().manual_seed(seed)

    def fill(s):
        if dtype == torch.bool:
            return torch.rand(s, generator=g) > 0.5
        if dtype.is_floating_point:
            return torch.randn(s, generator=g, dtype=torch.float64).to(dtype)
        return torch.randint(1, 5, s, generator=g).to(dtype)
    nd = len(shape)
    if layout == "transpose":
        return fill(shape[::-1]).permute(*range(nd)[::-1])
    if layout == "step":
        return fill(shape[:-1] + (shape[-1] * 2 + 1,))[..., 1::2]
    if layout == "expand":
        return fill(tuple(1 if i % 2 == 0 else s for i, s in enumerate(shape))).expand(shape)
    return fill(shape)


STRIDE_CASES = [   # (op, [(shape, layout, dtype), ...]) where eager's layout is not the meta's
    ("logical_and", [((7, 1, 5), "step", torch.float32), ((7, 3, 5), "transpose", torch.int64)]),
    ("logical_or", [((1, 7, 1), "step", torch.float64), ((3, 7, 2), "transpose", torch.float64)]),
    ("logical_xor", [((1,), "contig", torch.int32), ((5, 4), "transpose", torch.uint8)]),
    ("xlogy", [((3, 7), "contig", torch.uint8), ((3, 7), "transpose", torch.int64)]),
    ("xlogy", [((4, 2), "transpose", torch.bool), ((3, 7, 4, 2), "step", torch.int64)]),
    ("copysign", [((4, 3, 5, 5), "step", torch.float64), ((1, 1, 5, 5), "transpose", torch.int64)]),
    ("copysign", [((4, 1, 2), "expand", torch.int32), ((4, 1, 2), "transpose", torch.int32)]),
    ("logaddexp", [((3,), "contig", torch.float64), ((7, 5, 3), "transpose", torch.float64)]),
    ("special.xlog1py", [((4, 4, 2), "contig", torch.int64), ((4, 4, 2), "transpose", torch.int64)]),
    ("F.logsigmoid", [((3, 7, 4), "transpose", torch.float32)]),
    ("F.rrelu", [((3, 7), "transpose", torch.float32)]),
]


def _fn(name):
    mod = torch.nn.functional if name.startswith("F.") else \
        torch.special if name.startswith("special.") else torch
    f = getattr(mod, name.split(".")[-1])
    if name == "F.rrelu":
        return lambda *a: f(*a, training=False)
    return lambda *a: f(*a)


@pytest.mark.parametrize("k", range(len(STRIDE_CASES)))
def test_pointwise_result_has_cpu_strides(k):
    name, specs = STRIDE_CASES[k]
    args = [_layout(s, l, d, i) for i, (s, l, d) in enumerate(specs)]
    f = _fn(name)
    e, c = f(*args), cdynamo.optimize(f)(*args)
    assert (e.dtype, e.shape, e.stride()) == (c.dtype, c.shape, c.stride())
    torch.testing.assert_close(c, e, equal_nan=True)


def test_finding_logsigmoid_chain_strides():
    """FINDINGS.md pointwise_wrong_224c737fe5: the layout flows into later ops."""
    a2 = _layout((4, 7, 3), "contig", torch.float32, 0).permute(2, 1, 0)
    f = lambda a2: torch.nn.functional.logsigmoid(a2.sqrt()).clamp_min(0.5).isinf()  # noqa: E731
    e, c = f(a2), cdynamo.optimize(f)(a2)
    assert e.stride() == c.stride() == (28, 4, 1)


# ---- results that are their input (eager gives back the tensor itself) -------

def _identity_cases():
    def mt0(a0):                       # FINDINGS.md aliasing_wrong_1974190d3f
        a0.sub_(a0, alpha=2)
        return a0.mT

    def mt0_chain(a0):                 # aliasing_wrong_c49838996d
        t0 = a0[-1]
        t0.mul_(t0)
        t2 = t0.to(torch.float32)
        return t2, t2.mT

    def mh0_add_(a0):                  # a0.mT.add_(1) is a0.add_(1)
        return a0.mH.add_(1)

    def positive_abs_(a0):             # inplace_wrong_5634428e77
        t1 = a0.positive()
        t1.abs_()
        return t1

    def conj_real(a0):
        return a0.conj().resolve_conj().resolve_neg()
    return {f.__name__: f for f in (mt0, mt0_chain, mh0_add_, positive_abs_, conj_real)}


@pytest.mark.parametrize("name,shape", [("mt0", ()), ("mt0_chain", (2,)), ("mh0_add_", ()),
                                        ("positive_abs_", ()), ("positive_abs_", (3, 2)),
                                        ("conj_real", ()), ("conj_real", (3, 2))])
def test_result_that_is_the_input_is_the_input(name, shape):
    f = _identity_cases()[name]
    mk = lambda: torch.arange(1, 1 + math.prod(shape), dtype=torch.float32).reshape(shape) - 3  # noqa: E731
    if name == "mt0_chain":
        mk = lambda: torch.arange(7, dtype=torch.float32)[3:5]  # noqa: E731
    xe, xc = mk(), mk()
    e, c = f(xe), cdynamo.optimize(f)(xc)
    es = e if isinstance(e, tuple) else (e,)
    cs = c if isinstance(c, tuple) else (c,)
    for i, (a, b) in enumerate(zip(es, cs)):
        assert (a is xe) == (b is xc)
        assert all((a is p) == (b is q) for p, q in zip(es[:i], cs[:i]))
        assert torch.equal(a, b)
    assert torch.equal(xe, xc)


# ---- index ops with an empty result still check their indices ----------------

INDEX_EMPTY = {
    "index_select_unused": lambda x, i: (x.index_select(0, i), i)[1],   # exc_4b591600fc
    "index_select": lambda x, i: x.index_select(0, i),
    "embedding": lambda x, i: torch.nn.functional.embedding(i, x),
    "getitem": lambda x, i: x[i],
    "gather": lambda x, i: torch.gather(x, 0, i[:, None].expand(2, 0)),
}


@pytest.mark.parametrize("name", sorted(INDEX_EMPTY))
@pytest.mark.parametrize("idx", [[1, 4], [1, 2], [-1, 0]])
def test_index_into_empty_source_checks_indices(name, idx):
    f = INDEX_EMPTY[name]
    for x in (torch.randn(0, 3).permute(1, 0), torch.randn(3, 0)):
        i = torch.tensor(idx)
        out = []
        for run in (f, cdynamo.optimize(f)):
            try:
                out.append(run(x, i))
            except Exception as e:  # noqa: BLE001 - compared below
                out.append(e)
        e, c = out
        assert type(e) is type(c), (e, c)
        if isinstance(e, Exception):
            assert str(e) == str(c)
        else:
            assert (e.shape, e.stride()) == (c.shape, c.stride())


# ---- signed zeros, infinities and NaNs of unary ops ---------------------------

UNARY_SPECIAL = ["neg", "abs", "exp", "log", "sqrt", "relu", "sigmoid", "tanh", "sin", "cos",
                 "floor", "ceil", "round", "trunc", "frac", "sign", "reciprocal", "rsqrt",
                 "expm1", "log1p", "log2", "erf", "square", "sgn", "exp2", "atan", "tan",
                 "F.gelu", "F.silu", "F.softplus", "F.elu", "F.hardtanh", "F.relu6",
                 "F.hardsigmoid", "F.hardswish", "F.mish", "F.leaky_relu"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", UNARY_SPECIAL)
def test_unary_special_values_as_eager(name, dtype):
    """Where eager gives +-0, +-inf or NaN, compiled gives the same (the sign of
    a zero included: erf(-0.0) was +0.0 in the vectorized float32 erf)."""
    mod = torch.nn.functional if name.startswith("F.") else torch
    g = getattr(mod, name.split(".")[-1])
    f = lambda x: g(x)  # noqa: E731
    vals = [-0.0, 0.0, -1e-40, 1e-40, -1e-30, 1e-30, -1e-310, math.inf, -math.inf, math.nan,
            -2.5, 0.5, 88.0, -104.0, 1e30]
    x = torch.tensor(vals * 3, dtype=dtype)
    e, c = f(x), cdynamo.optimize(f)(x)
    assert torch.equal(e.isnan(), c.isnan())
    special = (e == 0) | e.isinf()
    assert torch.equal(e[special], c[special]), (x[special], e[special], c[special])
    assert torch.equal(e[e == 0].signbit(), c[e == 0].signbit()), (x[e == 0], c[e == 0])
    fin = torch.isfinite(e) & ~special
    torch.testing.assert_close(c[fin], e[fin], rtol=1e-5, atol=1e-30)


# ---- an index (iota) of size 1 broadcast into a larger iteration space ---------

BROADCAST_IOTA = {
    "finding_36d1014802": lambda a0: ((a0 + torch.eye(1)) / 2 - torch.tensor([1.0, 2.0])) * 2,
    "arange1": lambda x: x + torch.arange(1),
    "eye1": lambda x: x * torch.eye(1),
    "arange1_3d": lambda x: x + torch.arange(1).view(1, 1, 1),
    "mixed": lambda x: x + torch.arange(3).view(3, 1) + torch.arange(1),
}


@pytest.mark.parametrize("name", sorted(BROADCAST_IOTA))
def test_size1_index_broadcasts_as_zero(name):
    f = BROADCAST_IOTA[name]
    x = torch.tensor([-7], dtype=torch.int8) if name.startswith("finding") else torch.randn(3, 4)
    _assert_bitwise(f, x)


# ---- explain accounts for every frame that ran eagerly -------------------------

def _rerun_fn(x, d):
    x.mul_(2)
    return x // d


def test_explain_lists_an_eager_rerun():
    """A frame whose compiled graph raised runs again eagerly (eager's exception and
    inputs): explain's eager_frames name it (EAGER_RERUN), once per cache entry, by
    the transformed code and by a direct call alike."""
    from cdynamo import _support
    x, d = torch.arange(4), torch.tensor([1, 0, 1, 1])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        cdynamo.explain(_rerun_fn)(x.clone(), d)
    reruns = [b for b in _support.eager if b["code"] == "EAGER_RERUN"]
    assert [b["function"] for b in reruns] == ["_rerun_fn"], _support.eager
    assert "raised RuntimeError" in reruns[0]["reason"], reruns
    cdynamo.reset()
    opt = cdynamo.optimize(_rerun_fn)
    assert torch.equal(opt(x.clone(), torch.ones(4, dtype=torch.long)), x * 2)
    for _ in range(3):                      # direct calls of the cached entry
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            opt(x.clone(), d)
    assert cdynamo.stats()["eager_reruns"] == 3
    assert [b["code"] for b in _support.eager] == ["EAGER_RERUN"]


def _helper_no_tensor(n):
    return n * 2 + 1


def _helper_prints(x):
    print("", end="")
    return x + 1


def _explained(x):
    y = x * 2
    k = _helper_no_tensor(3)
    z = _helper_prints(y)
    return z + sum(i for i in range(k)) + y


def test_explain_lists_every_eager_frame_on_every_call():
    """Each call's explain names every frame that ran eagerly: the first call's
    records, and on later calls (nothing new recorded) the frames that run eagerly
    for a reason recorded before (a break, no tensor ops, a generator expression),
    with the function's place (frame_location) beside the stop's (location)."""
    x = torch.randn(3)
    for call in range(3):
        e = cdynamo.explain(_explained)(x)
        assert_close = torch.testing.assert_close
        assert_close(e.out, _explained(x))
        got = {(b.function, b.code) for b in e.eager_frames}
        # _explained resumes after the call of _helper_prints (issue 31): not eager, and
        # _helper_no_tensor is inlined into its graph (no frame of its own)
        assert {("_helper_prints", "PRINT")} <= got, (call, got)
        assert "_explained" not in {f for f, _ in got}, (call, got)
        where = {b.function: b.get("frame_location") for b in e.eager_frames}
        assert where["_helper_prints"].endswith(
            f"test_issue28_fuzz.py:{_helper_prints.__code__.co_firstlineno}")


# ---- a bound method read from a global's attribute ----------------------------

class _Scaler:
    factor = 3

    @classmethod
    def scale(cls, x):
        return x * cls.factor

    def shift(self, x):
        return x + 1


_scaler = _Scaler()


def _uses_bound_methods(x):
    return _Scaler.scale(x) + _scaler.shift(x)


def test_bound_method_of_a_global_does_not_recompile_each_call():
    """Reading _Scaler.scale makes a new bound method object each time: guarded by its
    function and self, not by identity (transformers' BertModel recompiled 5 frames
    on every call over inspect.Signature.from_callable)."""
    f = cdynamo.optimize(_uses_bound_methods)
    x = torch.randn(4)
    for _ in range(4):
        torch.testing.assert_close(f(x), _uses_bound_methods(x))
    assert cdynamo.stats()["recompiles"] == 0 and cdynamo.stats()["frames_compiled"] == 1
    _Scaler.factor = 5                     # what the code depends on still recompiles
    try:
        torch.testing.assert_close(f(x), _uses_bound_methods(x))
    finally:
        _Scaler.factor = 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("affine", ["none", "weight", "bias", "both"])
@pytest.mark.parametrize("op", ["layer_norm", "group_norm"])
def test_norm_zero_signs_as_eager(op, affine, dtype):
    """Rows of signed zeros (x % x, a row of length 1): eager's layer_norm adds its
    absent bias (+0), so a zero result is +0; group_norm without affine keeps -0
    (fuzz seed 9102: special_wrong_0f2d08519f, views_wrong_50e10c500c)."""
    x = torch.tensor([[-0.0, 0.0, -0.0, -0.0], [-3.0, 3.0, -0.0, 1.0], [-0.0, -0.0, -0.0, -0.0]],
                     dtype=dtype)
    x = torch.cat([x, torch.randn(3, 4, dtype=dtype) % 1e-30]).view(6, 2, 2)
    w = torch.tensor([-1.0, 2.0], dtype=dtype) if affine in ("weight", "both") else None
    b = torch.tensor([0.0, -0.0], dtype=dtype) if affine in ("bias", "both") else None
    if op == "layer_norm":
        fs = [lambda x: torch.nn.functional.layer_norm(x, (2,), w, b),
              lambda x: torch.nn.functional.layer_norm(x.view(6, 4, 1), (1,))]
    else:
        fs = [lambda x: torch.nn.functional.group_norm(x, 1, w, b),
              lambda x: torch.nn.functional.group_norm(x, 2, w, b)]
    for f in fs:
        cdynamo.reset()
        _assert_close_nan(f, x)
        e, c = f(x), cdynamo.optimize(f)(x)
        assert torch.equal(e[e == 0].signbit(), c[e == 0].signbit()), (e, c)


def test_gcc12_slp_crash_compiles():
    """GCC 12's SLP vectorizer segfaults on this kernel (an int64 max over an
    expanded (3, 2) input: a size-2 simd reduction in a loop of 3, -O3
    -march=native -fwrapv); the build is retried at -O2, no fallback (fuzz seed 9103,
    special#451)."""
    def f(a0):
        return torch.logsumexp(a0.max(), 0, keepdim=True).softmax(-1), a0.amax()
    a0 = torch.tensor([[-9223372036854775808, 5]]).expand(3, 2)
    torch.testing.assert_close(cdynamo.optimize(f)(a0), f(a0))
    assert cdynamo.stats()["fallbacks"] == 0 and cdynamo.stats()["frames_compiled"] == 1
