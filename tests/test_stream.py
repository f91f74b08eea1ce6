"""Streamed (non-temporal) stores (csrc/compiler/stream.c): a kernel moving more than
cdynamo.config.stream_store_bytes writes its outputs through L1 blocks with non-temporal
stores. The tests force the threshold down so small tensors take that path, and check the
results against eager: block tails, misaligned outputs, several outputs of different
dtypes, one thread, row kernels (layer norm, group norm, epilogues)."""
import glob
import os
import platform

import re

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import assert_same, check, run_python

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="kernels stream their stores on x86-64 only")


def _compiled():
    return cdynamo._support.compiles[-1]["compiled"]


def _streams(c):
    """Whether the kernels of compiled graph c stream, by their C and by their IR (which
    must agree)."""
    in_c = "cdy_stream(&out_ptr" in c.source
    in_ir = "stores: streamed (non-temporal" in c.ir_post_fusion
    assert in_c == in_ir, c.ir_post_fusion
    if in_c:
        assert "cdy_sfence();" in c.source
    return in_c


@pytest.fixture
def stream_all(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "stream_store_bytes", 1)


@pytest.mark.parametrize("n", [2, 63, 1025, 3 * 4096 + 17, 100003])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.uint8],
                         ids=str)
def test_flat_kernels_stream_every_length(stream_all, n, dtype):
    x = torch.arange(n).to(dtype)
    check(lambda t: t * 3 + 1, x)
    assert _streams(_compiled())


def test_outputs_of_several_dtypes_stream_together(stream_all):
    x, y = torch.randn(70001), torch.randn(70001)
    check(lambda a, b: (torch.relu(a * b + 1), a > b, (a * 2).double()), x, y)
    c = _compiled()
    assert _streams(c) and "cdy_stream(&out_ptr2" in c.source


def test_an_in_place_update_of_a_view_is_exact(stream_all):
    # x[3:] *= 2; += 1: kernels on a view 3 floats into its base, copied back by torch
    # (cdy_stream's own unaligned heads and tails: tests/c, test_stream_helper)
    def f(x):
        x[3:].mul_(2).add_(1)
        return x
    base = torch.randn(50001)
    expected = f(base.clone())
    got = cdynamo.optimize(f)(base.clone())
    assert_same(expected, got)
    assert _streams(_compiled())


def test_one_thread_streams_and_fences(stream_all, monkeypatch):
    monkeypatch.setattr(cdynamo.config, "num_threads", 1)
    check(lambda t: torch.sigmoid(t) * 2, torch.randn(40000), transcendental=True)
    c = _compiled()
    assert _streams(c) and "#pragma omp parallel" not in c.source


@pytest.mark.parametrize("cols", [300, 1000, 1024])
def test_layer_norm_streams_its_epilogue(stream_all, cols):
    x, w, b = torch.randn(33, cols), torch.randn(cols), torch.randn(cols)
    check(lambda x, w, b: torch.relu(F.layer_norm(x, (cols,), w, b)) * 2, x, w, b)
    c = _compiled()
    # the norm itself is not stored; its epilogue's result streams (a float32 store is
    # written `(t8)`: cg_st's conversion is empty)
    assert _streams(c) and re.search(r"cdy_st1\[rl\] = \(?t\d", c.source)


@pytest.mark.parametrize("epi", [F.gelu, torch.exp, torch.tanh, F.silu,
                                 lambda y: torch.sigmoid(y) * 3])
def test_a_transcendental_epilogue_keeps_plain_stores(stream_all, epi):
    # compute-bound: streaming the final pass's stores costs more than the reads for
    # ownership they save (rows.c, cg_row_streams); the IR says why
    x, w, b = torch.randn(33, 1024), torch.randn(1024), torch.randn(1024)
    check(lambda x, w, b: epi(F.layer_norm(x, (1024,), w, b)), x, w, b, transcendental=True)
    c = _compiled()
    assert not _streams(c)
    assert "stores: plain, not streamed: its epilogue is transcendental" in c.ir_post_fusion


def test_group_norm_silu_keeps_plain_stores(stream_all):
    x = torch.randn(4, 8, 32, 32)
    check(lambda x: F.silu(F.group_norm(x, 2)), x, transcendental=True)
    c = _compiled()
    assert not _streams(c)
    assert "stores: plain, not streamed: its epilogue is transcendental" in c.ir_post_fusion


def test_layer_norm_and_its_epilogue_both_stored(stream_all):
    x, w, b = torch.randn(40, 1024, dtype=torch.float64), torch.randn(1024,
                                                                      dtype=torch.float64), None
    def f(x, w):
        y = F.layer_norm(x, (1024,), w)
        return y, torch.relu(y) * 2
    check(f, x, w)
    c = _compiled()
    assert _streams(c) and "cdy_stream(&out_ptr1" in c.source


def test_group_norm_streams(stream_all):
    x = torch.randn(4, 8, 32, 32)
    check(lambda x: F.group_norm(x, 2), x)
    assert _streams(_compiled())


def test_softmax_keeps_plain_stores(stream_all):
    # softmax stores its exps and reads them back to scale them: streamed, that read
    # would go to memory
    check(lambda x: torch.softmax(x, -1), torch.randn(64, 512), transcendental=True)
    assert not _streams(_compiled())


def test_zero_turns_streaming_off(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "stream_store_bytes", 0)
    check(lambda t: t * 3 + 1, torch.randn(1 << 20))
    assert not _streams(_compiled())


def _largest_cache_bytes():
    best = (0, 0)
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            level = int(open(os.path.join(d, "level")).read())
            text = open(os.path.join(d, "size")).read().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        size = int(text.rstrip("KMG")) * scale
        best = max(best, (level, size))
    return best[1]


def test_the_default_threshold_is_three_quarters_of_the_last_level_cache():
    llc = _largest_cache_bytes()
    if not llc:
        pytest.skip("no cache sizes in sysfs")
    threshold = llc // 4 * 3
    small = torch.randn(1024)
    check(lambda t: t + 1, small)
    assert not _streams(_compiled())
    # a flat kernel moving just over the threshold: one input and one output
    n = threshold // 8 + 1024
    if n * 8 > (1 << 30):
        pytest.skip("a last-level cache too large to exceed in a test")
    check(lambda t: t - 1, torch.zeros(n), calls=1)
    c = _compiled()
    assert _streams(c)
    assert f"above the threshold of {threshold}\n" in c.ir_post_fusion


@pytest.mark.parametrize("shape", [(3, 67, 129), (8, 3, 96, 100)])
def test_nests_stream_their_innermost_loop(stream_all, shape):
    # per-channel normalization: a nest of an outer loop over channels (a broadcast
    # operand) and rows of at least CG_STREAM_ROW bytes
    x = torch.randn(shape)
    c_dim = 0 if len(shape) == 3 else 1
    view = (-1,) + (1,) * (len(shape) - 1 - c_dim)
    m, s = torch.randn(shape[c_dim]), torch.rand(shape[c_dim]) + 1
    check(lambda x, m, s: (x - m.view(view)) / s.view(view), x, m, s, transcendental=True)
    assert _streams(_compiled())


def test_a_strided_copy_streams_rows_with_ragged_ends(stream_all):
    # rows of 300 floats (1200 bytes): every row starts and ends inside a cache line
    # another row (maybe another thread) writes plainly
    check(lambda x: x.permute(0, 2, 1).contiguous() * 2, torch.randn(5, 300, 700))
    assert _streams(_compiled())


def test_short_rows_keep_plain_stores(stream_all):
    # 16-float rows: 64 bytes, under CG_STREAM_ROW
    check(lambda x: x.permute(1, 0).contiguous() + 1, torch.randn(16, 5000))
    assert not _streams(_compiled())


def test_cat_pieces_stream_into_their_windows(stream_all):
    # pieces with producers get a kernel each (a cat of plain tensors is one copy kernel);
    # the second piece starts 3 floats into the output: its lines are off alignment
    check(lambda a, b: torch.cat([a * 2, b + 1]), torch.randn(3), torch.randn(40001))
    assert _streams(_compiled())
    check(lambda a, b: torch.cat([a - 1, b * 3], dim=1), torch.randn(64, 70),
          torch.randn(64, 130))


def test_the_environment_sets_the_default():
    code = "import cdynamo; print(cdynamo.config.stream_store_bytes)"
    for env, want in (("0", "0"), ("4096", "4096"), ("", "None"), ("junk", "None")):
        out = run_python(code, env_extra={"CDYNAMO_STREAM_STORE_BYTES": env})
        assert out.stdout.strip().splitlines()[-1] == want, out


@pytest.mark.parametrize("bad", [-1, 1.5, "4096", True])
def test_a_bad_threshold_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="stream_store_bytes must be None or an int >= 0"):
        cdynamo.config.stream_store_bytes = bad
    assert cdynamo.config.stream_store_bytes is None


def test_the_threshold_reads_back():
    try:
        cdynamo.config.stream_store_bytes = 4096
        assert cdynamo.config.stream_store_bytes == 4096
    finally:
        cdynamo.config.stream_store_bytes = None
