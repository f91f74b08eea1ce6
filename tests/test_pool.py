"""Differential tests of the lowered pooling and nearest-upsample ops (kind 'W':
max_pool2d, avg_pool2d, adaptive_avg_pool2d, adaptive_max_pool2d,
upsample_nearest2d) against eager PyTorch: every parameter that matters,
dtypes, 3-D / 4-D, contiguous / channels_last / non-contiguous inputs, odd
sizes, NaN and -inf, fused pointwise producers, the cases that stay extern,
kernel counts, and a small CNN."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import cdynamo
from conftest import assert_same, make_tensor


def graph():
    return cdynamo._support.compiles[-1]["graph"] if cdynamo._support.compiles else ""


def source():
    return cdynamo._support.compiles[-1]["source"] if cdynamo._support.compiles else ""


def run(fn, *args, lowered=None, extern=False):
    """fn compiled equals fn eager (values, dtype, sizes, strides) or raises
    the same; returns the graph text.  lowered: an op name that must be a
    graph node with no extern left; extern: the call must stay an extern."""
    try:
        expected = fn(*args)
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            cdynamo.optimize(fn)(*args)
        return None
    cdynamo.reset()
    n = len(cdynamo._support.compiles)
    opt = cdynamo.optimize(fn)
    for _ in range(2):
        assert_same(expected, opt(*args))
    assert len(cdynamo._support.compiles) > n, "not compiled"
    g = graph()
    if lowered:
        assert f"= {lowered}(" in g, g
        assert "extern" not in g, g
    if extern:
        assert "extern" in g, g
    return g


def make(shape, dtype=torch.float32, seed=0):
    return make_tensor(dtype, shape, seed, low=0 if dtype == torch.uint8 else -100, high=100)


def layouts(x):
    """x (4-D) contiguous, channels_last, and a strided (sliced, transposed) view."""
    return [x, x.contiguous(memory_format=torch.channels_last),
            x.transpose(2, 3)[:, :, 1:, ::2]]


# ---- max_pool2d ------------------------------------------------------------------

MAX_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0)),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=2, stride=3, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=1, padding=1, dilation=2),
    dict(kernel_size=(2, 3), stride=(2, 1), padding=(1, 1), dilation=(3, 1), ceil_mode=True),
    dict(kernel_size=[2], stride=[]),
    dict(kernel_size=5, stride=2, padding=2),
]


@pytest.mark.parametrize("kw", MAX_CASES)
def test_max_pool2d_params(kw):
    x = make((2, 3, 11, 9))
    for inp in layouts(x):
        run(lambda t: F.max_pool2d(t, **kw), inp, lowered="max_pool2d")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32,
                                   torch.int16, torch.int8, torch.uint8])
def test_max_pool2d_dtypes(dtype):
    x = make((2, 5, 8, 7), dtype)
    run(lambda t: F.max_pool2d(t, 3, 2, 1, ceil_mode=True), x, lowered="max_pool2d")
    run(lambda t: F.max_pool2d(t, 2), x.contiguous(memory_format=torch.channels_last),
        lowered="max_pool2d")


def test_max_pool2d_3d_and_callables():
    x = make((4, 10, 7))
    run(lambda t: F.max_pool2d(t, 2, 1), x, lowered="max_pool2d")
    run(lambda t: torch.max_pool2d(t, (3, 3), (2, 2), (1, 1), (1, 1), True), x,
        lowered="max_pool2d")
    run(lambda t: torch.max_pool2d(t, 2), make((1, 2, 5, 5)), lowered="max_pool2d")
    m = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
    run(m, make((2, 4, 13, 13)), lowered="max_pool2d")
    m = nn.MaxPool2d((2, 3), dilation=(2, 1))
    run(m, make((1, 3, 9, 10)), lowered="max_pool2d")


def test_max_pool2d_nan_inf():
    x = make((2, 3, 8, 8))
    x[0, 0, 0, 0] = float("nan")
    x[0, 1, 3, 4] = float("nan")
    x[1, 2, 5:8, 5:8] = float("-inf")
    x[1, 0, 6, 6] = float("inf")
    for inp in layouts(x):
        run(lambda t: F.max_pool2d(t, 2), inp, lowered="max_pool2d")
        run(lambda t: F.max_pool2d(t, 3, 2, 1), inp, lowered="max_pool2d")
    y = torch.full((1, 1, 4, 4), float("-inf"))
    run(lambda t: F.max_pool2d(t, 2, padding=1), y, lowered="max_pool2d")
    z = torch.full((1, 2, 4, 4), float("nan"), dtype=torch.float64)
    run(lambda t: F.max_pool2d(t, 2), z, lowered="max_pool2d")


def test_max_pool2d_fused_one_kernel():
    x = make((2, 8, 16, 16))
    run(lambda t: F.max_pool2d(F.relu(t), 2), x, lowered="max_pool2d")
    src = source()
    assert src.count("CDY_EXPORT void kernel_") == 1, src
    b = make((8, 1, 1), seed=1)
    w = make((8, 1, 1), seed=2)
    run(lambda t, w, b: F.max_pool2d(torch.relu(t * w + b), 3, 2, 1), x, w, b,
        lowered="max_pool2d")
    assert source().count("CDY_EXPORT void kernel_") == 1
    xc = x.contiguous(memory_format=torch.channels_last)
    run(lambda t, w, b: F.max_pool2d(torch.relu(t * w + b), 2), xc, w, b,
        lowered="max_pool2d")
    assert source().count("CDY_EXPORT void kernel_") == 1
    assert "#pragma omp simd" in source()


def test_max_pool2d_extern_cases():
    x = make((2, 3, 8, 8))
    # indices: a tuple result, stays an extern
    run(lambda t: F.max_pool2d(t, 2, return_indices=True), x, extern=True)
    run(lambda t: F.max_pool2d(t, 2, return_indices=True)[0] + 1, x, extern=True)
    # bool: eager raises, and so does the compiled function
    run(lambda t: F.max_pool2d(t, 2), x > 0)
    # 5-D is not a 2-D pool input: eager raises
    run(lambda t: F.max_pool2d(t, 2), make((1, 2, 3, 4, 4)))


def test_max_pool2d_uses_and_outputs():
    x = make((2, 3, 10, 10))

    def f(t):
        r = torch.relu(t)
        p = F.max_pool2d(r, 2)
        return p * 2, r, F.max_pool2d(p, 2, 1)

    run(f, x)
    g = graph()
    assert g.count("= max_pool2d(") == 2 and "extern" not in g, g


# ---- avg_pool2d -------------------------------------------------------------------

AVG_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), ceil_mode=True),
    dict(kernel_size=2, stride=3, padding=1, ceil_mode=True, count_include_pad=True),
    dict(kernel_size=3, padding=1, divisor_override=5),
    dict(kernel_size=(2, 4), stride=1, padding=(1, 2), ceil_mode=True, divisor_override=3),
    dict(kernel_size=[3, 3], stride=None),
]


@pytest.mark.parametrize("kw", AVG_CASES)
def test_avg_pool2d_params(kw):
    x = make((2, 3, 11, 9))
    for inp in layouts(x):
        run(lambda t: F.avg_pool2d(t, **kw), inp, lowered="avg_pool2d")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_avg_pool2d_dtypes(dtype):
    x = make((2, 4, 9, 8), dtype)
    run(lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True), x, lowered="avg_pool2d")
    run(lambda t: F.avg_pool2d(t, 3, 2, 1, count_include_pad=False), x, lowered="avg_pool2d")
    run(lambda t: F.avg_pool2d(t, 2, divisor_override=3),
        x.contiguous(memory_format=torch.channels_last), lowered="avg_pool2d")
    run(lambda t: F.avg_pool2d(-t, (1, 2), 1, (0, 1)), x, lowered="avg_pool2d")


def test_avg_pool2d_module_3d_and_extern():
    run(nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False), make((2, 6, 15, 14)),
        lowered="avg_pool2d")
    run(lambda t: F.avg_pool2d(t, 2), make((3, 7, 5)), lowered="avg_pool2d")
    # int32 avg_pool2d: eager raises
    run(lambda t: F.avg_pool2d(t, 2), make((1, 2, 4, 4), torch.int32))
    x = make((1, 2, 4, 4))
    x[0, 0, 0, 0] = float("nan")
    run(lambda t: F.avg_pool2d(t, 2, 1), x, lowered="avg_pool2d")


# ---- adaptive pooling ---------------------------------------------------------------

ADAPTIVE_SIZES = [1, (1, 1), 2, (3, 5), (None, 4), (7, None), (5, 5), (11, 9), (4, 6), (13, 20)]


@pytest.mark.parametrize("size", ADAPTIVE_SIZES)
def test_adaptive_avg_pool2d(size):
    x = make((2, 3, 11, 9))
    for inp in layouts(x):
        run(lambda t: F.adaptive_avg_pool2d(t, size), inp, lowered="adaptive_avg_pool2d")


@pytest.mark.parametrize("size", ADAPTIVE_SIZES)
def test_adaptive_max_pool2d(size):
    x = make((2, 3, 11, 9))
    x[1, 1, 4, 4] = float("nan")
    for inp in layouts(x):
        run(lambda t: F.adaptive_max_pool2d(t, size), inp, lowered="adaptive_max_pool2d")


def test_adaptive_modules_dtypes_and_extern():
    run(nn.AdaptiveAvgPool2d((1, 1)), make((4, 64, 7, 7)), lowered="adaptive_avg_pool2d")
    run(nn.AdaptiveAvgPool2d(3), make((2, 8, 10, 10), torch.float64),
        lowered="adaptive_avg_pool2d")
    run(nn.AdaptiveMaxPool2d((2, 3)), make((3, 7, 8)), lowered="adaptive_max_pool2d")
    run(lambda t: torch._C._nn.adaptive_avg_pool2d(t, (2, 2)), make((1, 3, 6, 6)),
        lowered="adaptive_avg_pool2d")
    big = make((1, 64, 56, 56)).contiguous(memory_format=torch.channels_last)
    run(lambda t: F.adaptive_avg_pool2d(t, 1).flatten(1), big)
    run(lambda t: F.adaptive_avg_pool2d(t * 3 + 1, (1, 1)), make((2, 32, 56, 56)),
        lowered="adaptive_avg_pool2d")
    assert source().count("CDY_EXPORT void kernel_") == 1
    run(lambda t: F.adaptive_max_pool2d(t, 2, return_indices=True), make((1, 2, 5, 5)),
        extern=True)
    # integer adaptive pooling: eager raises
    run(lambda t: F.adaptive_avg_pool2d(t, 2), make((1, 2, 4, 4), torch.int64))


# ---- nearest upsample ----------------------------------------------------------------

UPSAMPLE_CASES = [
    dict(scale_factor=2),
    dict(scale_factor=2.0),
    dict(scale_factor=3),
    dict(scale_factor=1.7),
    dict(scale_factor=0.5),
    dict(scale_factor=(2, 1.5)),
    dict(scale_factor=0.3),
    dict(scale_factor=2.5, recompute_scale_factor=True),
    dict(size=(17, 5)),
    dict(size=13),
    dict(size=(22, 18)),
    dict(size=(11, 9)),
    dict(size=(4, 3)),
]


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("kw", UPSAMPLE_CASES)
def test_upsample_nearest(kw, mode):
    x = make((2, 3, 11, 9))
    for inp in layouts(x):
        run(lambda t: F.interpolate(t, mode=mode, **kw), inp, lowered="upsample_nearest2d")


def test_upsample_scales_many_sizes():
    """Source indices computed in float exactly as ATen's nearest_idx."""
    for h in (3, 7, 10, 13, 29):
        x = make((1, 2, h, h + 2), seed=h)
        for s in (1.1, 1.3, 2.2, 3.3, 0.7, 1.0 / 3.0, 2.9999):
            run(lambda t: F.interpolate(t, scale_factor=s), x, lowered="upsample_nearest2d")
            run(lambda t: F.interpolate(t, scale_factor=s, mode="nearest-exact"), x,
                lowered="upsample_nearest2d")


def test_upsample_module_dtypes_fusion_extern():
    run(nn.Upsample(scale_factor=2, mode="nearest"), make((2, 4, 6, 5)),
        lowered="upsample_nearest2d")
    run(nn.Upsample(size=(9, 7)), make((1, 3, 4, 4), torch.float64),
        lowered="upsample_nearest2d")
    run(lambda t: F.interpolate(t, scale_factor=2), make((1, 3, 5, 5), torch.uint8),
        lowered="upsample_nearest2d")
    run(lambda t: torch._C._nn.upsample_nearest2d(t, None, [2.0, 3.0]), make((1, 2, 4, 4)),
        lowered="upsample_nearest2d")
    run(lambda t: torch._C._nn.upsample_nearest2d(t, [7, 9], None), make((1, 2, 4, 4)),
        lowered="upsample_nearest2d")
    run(lambda t, u: F.interpolate(torch.sigmoid(t), scale_factor=2) + u,
        make((2, 3, 5, 5)), make((2, 3, 10, 10), seed=1))
    g = graph()
    assert "= upsample_nearest2d(" in g and "extern" not in g, g
    # other modes and 1-D / 3-D inputs stay extern
    run(lambda t: F.interpolate(t, scale_factor=2, mode="bilinear"), make((1, 2, 4, 4)),
        extern=True)
    run(lambda t: F.interpolate(t, scale_factor=2), make((1, 2, 4)), extern=True)
    # int64 nearest upsample: eager raises
    run(lambda t: F.interpolate(t, scale_factor=2), make((1, 2, 4, 4), torch.int64))


# ---- models ----------------------------------------------------------------------------

class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.avg = nn.AvgPool2d(3, 1, 1, count_include_pad=False)
        self.up = nn.Upsample(scale_factor=2)
        self.gap = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.c1(x)))
        x = self.avg(x)
        x = F.max_pool2d(F.relu(self.c2(x)), 3, 2, 1, ceil_mode=True)
        x = self.up(x)
        x = torch.flatten(self.gap(x), 1)
        return self.fc(x)


@pytest.mark.parametrize("channels_last", [False, True])
def test_small_cnn(channels_last):
    torch.manual_seed(0)
    m = SmallCNN().eval()
    x = make((2, 3, 32, 32))
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        expected = m(x)
        opt = cdynamo.optimize(m)
        for _ in range(2):
            torch.testing.assert_close(opt(x), expected)
    g = graph()
    for op in ("max_pool2d", "avg_pool2d", "upsample_nearest2d", "adaptive_avg_pool2d"):
        assert f"= {op}(" in g, g


def test_large_parallel():
    x = make((4, 64, 56, 56))
    run(lambda t: F.max_pool2d(t, 3, 2, 1), x, lowered="max_pool2d")
    run(lambda t: F.max_pool2d(t, 3, 2, 1), x.contiguous(memory_format=torch.channels_last),
        lowered="max_pool2d")
    run(lambda t: F.adaptive_avg_pool2d(t, (7, 7)), x, lowered="adaptive_avg_pool2d")
    run(lambda t: F.interpolate(t, scale_factor=2), x, lowered="upsample_nearest2d")


def test_eager_backend_and_ir():
    x = make((2, 4, 9, 9))
    for f in (lambda t: F.max_pool2d(F.relu(t), 3, 2, 1), lambda t: F.avg_pool2d(t * 2, 2),
              lambda t: F.adaptive_avg_pool2d(t, 3), lambda t: F.interpolate(t, scale_factor=1.5)):
        cdynamo.reset()
        assert_same(f(x), cdynamo.optimize(f, backend="eager")(x))
    cdynamo.reset()
    cdynamo.optimize(lambda t: F.max_pool2d(F.relu(t), 2))(x)
    ir = cdynamo._support.compiles[-1].get("ir_post", "")
    if ir:
        assert "window" in ir and "relu" in ir, ir
