"""The float32 exact GELU of the kernels' prologue (mathlib.c, cdy_vgelu_exactf) has four
forms: an AVX-512 and an AVX2 tail (each as that ISA's eager rounds zeros and overflows), and
its rational function in Knuth's adapted form (AMD Zen, by GCC's __znverN__) or by Horner's
rule (elsewhere). A machine compiles one of them; this builds all four from the prologue
this machine generates and checks each against float64 (x Phi(x), where eager is 1.2e-6
away), so a CI host of either vendor tests the forms of the other."""
import ctypes
import platform
import shutil
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import cdynamo

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64" or not shutil.which("gcc"),
                                reason="x86-64 forms, built with gcc")

MARK = "/* -- kernel -- */"
ZEN = ["-U__znver%d__" % i for i in range(1, 6)]
HARNESS = """
CDY_EXPORT void gelu_run(const float *restrict x, float *restrict y, long n)
{
    #pragma omp simd
    for (long i = 0; i < n; i++) y[i] = cdy_vgelu_exactf(x[i]);
}
"""


def _prologue():
    cdynamo.optimize(lambda x: F.gelu(x))(torch.randn(64))
    src = cdynamo._support.compiles[-1]["compiled"].source
    assert MARK in src and "cdy_vgelu_exactf" in src
    return src[:src.index(MARK)]


def _avx512_builds():
    out = subprocess.run(["gcc", "-march=native", "-dM", "-E", "-"], input="",
                         capture_output=True, text=True).stdout
    return "__AVX512F__" in out


@pytest.mark.parametrize("adapted", [True, False], ids=["adapted", "horner"])
@pytest.mark.parametrize("isa", ["native", "avx2"])
def test_every_gelu_form_is_within_bounds_of_float64(tmp_path, adapted, isa):
    if isa == "native" and not _avx512_builds():
        pytest.skip("this machine's form is the AVX2 one, tested as avx2")
    src = tmp_path / "g.c"
    src.write_text(_prologue() + HARNESS)
    lib = tmp_path / "g.so"
    flags = ["-O3", "-march=native", "-fopenmp-simd", "-shared", "-fPIC", "-std=c11",
             "-fwrapv", "-ffp-contract=off", "-fno-math-errno"]
    flags += ["-mno-avx512f"] if isa == "avx2" else []
    flags += ["-DCDY_GELU_ADAPTED=1"] if adapted else ZEN
    subprocess.run(["gcc", *flags, str(src), "-o", str(lib)], check=True)
    run = ctypes.CDLL(str(lib)).gelu_run
    x = np.concatenate([np.linspace(-12, 12, 1 << 20, dtype=np.float32),
                        np.float32(2.0) ** np.arange(-30, 4, dtype=np.float32) * -1,
                        np.array([0.0, -0.0, np.nan, 5.8, -5.8, 5.79, -5.81], np.float32)])
    y = np.empty_like(x)
    run(x.ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p),
        ctypes.c_long(x.size))
    xd = torch.from_numpy(x).double()
    ref = (xd * 0.5 * torch.special.erfc(-xd * 0.70710678118654752440)).numpy()
    fin = np.isfinite(x)
    err = np.abs(y[fin].astype(np.float64) - ref[fin])
    assert err.max() < 4.5e-7, (err.max(), x[fin][err.argmax()])
    assert np.isnan(y[~fin]).all()
    # h is exactly 0 from |x| = 5.5425944 (eager's zeros): x Phi(x) is x above, a zero below
    assert y[x == np.float32(5.8)][0] == np.float32(5.8) and y[x == np.float32(-5.81)][0] == 0


def test_gelu_is_zero_where_eagers_is():
    """Eager's 0.5 x (1 + erf(x / sqrt 2)) is exactly 0 for x <= -5.5425944 (erf rounds
    to -1); ours (x Phi(x) from erfc) was -8e-8 down to -1e-8 up to -5.8, which
    0 ** gelu(x) turned into inf where eager gives 1 (found by the fuzzer). Every float
    in [-40, -5.3] and [5.3, 40]: where ours is zero, one of eager's loops (vectorized or
    strided) is, with the same sign, in every dtype."""
    lo = int(np.array(5.3, np.float32).view(np.int32))
    hi = int(np.array(40.0, np.float32).view(np.int32))
    b = torch.arange(lo, hi, dtype=torch.int32).view(torch.float32)
    x = torch.cat([-b, b])
    f = cdynamo.optimize(lambda t: F.gelu(t))
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        xx = x.to(dt)
        y, e = f(xx), F.gelu(xx)
        es = F.gelu(torch.empty(2 * len(xx), dtype=dt)[::2].copy_(xx))
        zero_differs = ((y == 0) != (e == 0)) & ((y == 0) != (es == 0))
        assert not zero_differs.any(), (dt, xx[zero_differs][:5])
        sign = (y == 0) & (e == 0) & (torch.signbit(y) != torch.signbit(e))
        assert not sign.any(), (dt, xx[sign][:5])
        if dt != torch.float64:     # float64 is libm erf: no zeros there
            assert (y[xx.float() <= -5.5425944] == 0).all(), dt


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_gelu_at_inf_follows_the_kernel_eager_picks(dtype):
    """Eager's float32 / bfloat16 gelu of a contiguous input of more than one element is
    oneDNN's (NaN at +inf on this machine kind); one element or a strided input takes
    ATen's own kernel (inf) (found by the fuzzer: a one-element gelu(inf) gave NaN where
    eager gives inf). float16 goes to oneDNN too on CPUs with AVX512-FP16 (the device
    machine: NaN at n >= 2), to ATen's kernel elsewhere (inf); the trace probes eager.
    Ours follows per node."""
    inf = float("inf")
    for n in (1, 2, 17):
        for x in (torch.full((n,), inf, dtype=dtype), torch.full((2 * n,), inf, dtype=dtype)[::2]):
            cdynamo.reset()
            e = F.gelu(x)
            c = cdynamo.optimize(lambda t: F.gelu(t) * 1)(x)
            torch.testing.assert_close(c, e * 1, equal_nan=True, rtol=0, atol=0)
