"""One test per fusion kind: the number of kernels, externs and buffers of the
compiled graph, read from its generated C and plan, with the result equal to eager."""
import math
import re

import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import _flatten, assert_same, check


def _compiled():
    """The CompiledGraph of the last compile (C backend)."""
    return cdynamo._support.compiles[-1]["compiled"]


def _kernels(c):
    return c.source.count("CDY_EXPORT void kernel_")


def _externs(c):
    return sum(1 for ln in c.ir_post_fusion.splitlines() if ln.startswith("extern %"))


def test_pointwise_chain_is_one_kernel():
    x, y = torch.randn(64, 128), torch.randn(128)
    check(lambda x, y: torch.sigmoid(x * y + 1).relu() - x.abs() / 2, x, y, transcendental=True)
    c = _compiled()
    assert _kernels(c) == 1 and _externs(c) == 0 and c.num_kernels == 1
    # only the output is a buffer: every intermediate is recomputed in registers
    assert "store out_ptr0" in c.ir_post_fusion and "out_ptr1" not in c.source


def test_outputs_of_one_iteration_space_share_a_kernel():
    x = torch.randn(32, 32)
    check(lambda x: (x + 1, x * 2, (x > 0).float()), x)
    c = _compiled()
    assert _kernels(c) == 1 and "out_ptr2" in c.source


def test_outputs_of_different_iteration_spaces_get_a_kernel_each():
    x, y = torch.randn(8, 1), torch.randn(1, 16)
    check(lambda x, y: (x * 2, x * y), x, y)
    c = _compiled()
    assert _kernels(c) == 2
    assert "is a separate kernel: its iteration space" in c.ir_post_fusion


def test_reduction_fuses_its_pointwise_prologue():
    x, y = torch.randn(64, 256), torch.randn(64, 256)
    check(lambda x, y: (x * y + 1).exp().sum(-1), x, y, transcendental=True)
    c = _compiled()
    assert _kernels(c) == 1 and _externs(c) == 0
    assert "reduction" in c.ir_post_fusion and "fuses:" in c.ir_post_fusion


def test_reduction_then_epilogue_is_two_kernels():
    x = torch.randn(64, 256)
    check(lambda x: x - x.mean(-1, keepdim=True), x)
    c = _compiled()
    assert _kernels(c) == 2 and _externs(c) == 0
    # the mean is read by the second kernel only: scratch memory, not a tensor per call
    assert c.scratch_bytes == 64 * 4


def test_buffer_read_by_an_extern_or_returned_is_a_tensor():
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    check(lambda x, w: (x - x.amax(-1, keepdim=True)) @ w, x, w)
    c = _compiled()
    assert _externs(c) == 1 and c.scratch_bytes == 16 * 4   # amax: scratch; x - amax: mm's arg
    p = torch.rand(16, 32) + 0.5          # sums far from 0: the quotient is well conditioned
    check(lambda p: (p.sum(-1), p / p.sum(-1, keepdim=True)), p)
    assert _compiled().scratch_bytes == 64                   # returned sum: a tensor


def test_buffers_live_from_their_first_step_to_their_last_read():
    # six matmuls, each followed by a relu kernel: 12 tensors of 64 KB are made per call,
    # but at most two are alive at once (a step's operand and its result), as in eager
    x, w = torch.randn(128, 128), torch.randn(128, 128) / 12

    def chain(x, w):
        for _ in range(6):
            x = torch.relu(x @ w)
        return x

    check(chain, x, w)
    c = _compiled()
    assert _externs(c) == 6 and _kernels(c) == 6
    assert c.peak_buffer_bytes == 2 * 128 * 128 * 4, c.peak_buffer_bytes


def test_extern_epilogue_bias_gelu_is_one_kernel():
    x, w, b = torch.randn(32, 64), torch.randn(64, 96), torch.randn(96)
    check(lambda x, w, b: F.gelu(x @ w + b), x, w, b, transcendental=True)
    c = _compiled()
    assert _externs(c) == 1 and _kernels(c) == 1
    kernel = c.source[c.source.index("CDY_EXPORT void kernel_"):]
    assert "add" in kernel and "gelu" in kernel


def test_extern_prologue_is_realized_by_one_kernel():
    x, w = torch.randn(32, 64), torch.randn(64, 16)
    check(lambda x, w: torch.relu(x * 2 + 1) @ w, x, w)
    c = _compiled()
    assert _externs(c) == 1 and _kernels(c) == 1


def test_value_used_by_two_iteration_spaces_is_recomputed_not_stored():
    x, y = torch.randn(16, 1), torch.randn(1, 8)

    def f(x, y):
        a = x + 1
        return a * 3, a * y

    check(f, x, y)
    c = _compiled()
    assert _kernels(c) == 2
    assert "recomputed in 2 kernels" in c.ir_post_fusion


def test_kernel_order_follows_what_each_kernel_loads():
    # a*b shares a's iteration space but reads b, realized by a later group:
    # it must not join a's kernel, which runs before b exists
    x, y = torch.randn(8, 16), torch.randn(16)

    def f(x, y):
        a = x * 2
        b = y + 1
        return a, b, a * b

    check(f, x, y)
    check(f, x, y)
    c = _compiled()
    assert _kernels(c) == 3


def test_residual_stream_is_realized_not_recomputed_by_every_norm():
    # x = x + f(x) through a stack: each layer norm would recompute every
    # earlier add from the graph's inputs; a value read by a norm and by the
    # next add whose recomputation loads 3+ buffers is stored once instead
    x = torch.randn(4, 8, 32)
    w = [torch.randn(32, 32) for _ in range(4)]

    def f(x, w0, w1, w2, w3):
        for w in (w0, w1, w2, w3):
            x = x + F.layer_norm(x, (32,)) @ w
        return x

    check(f, x, *w)
    c = _compiled()
    # no kernel loads more than three buffers
    for line in c.ir_post_fusion.split("kernel_")[1:]:
        assert line.count("  load  ") <= 3, line


def _with_threads(count):
    n = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(n)


@pytest.fixture
def two_threads():
    yield from _with_threads(2)


@pytest.mark.parametrize("n,dtype,par", [
    (65536, torch.uint8, False),      # 128 KB moved by a one-op kernel: one thread
    (150528, torch.uint8, True),      # 294 KB
    (32768, torch.float32, True),     # 256 KB
    (16384, torch.float32, False),    # under the element threshold
])
def test_cheap_kernels_go_parallel_above_256_kb(two_threads, n, dtype, par):
    x = torch.arange(n).to(dtype)
    assert_same(-x, cdynamo.optimize(lambda t: -t)(x))
    post = _compiled().ir_post_fusion
    assert ("parallel: yes" in post) == par, post
    if not par:
        assert "parallel: no" in post
    assert ("#pragma omp parallel" in _compiled().source) == par


def test_heavier_kernels_go_parallel_at_the_element_threshold(two_threads):
    x = torch.randn(40000)
    assert_same(torch.exp(x) * 2 + 1, cdynamo.optimize(lambda t: torch.exp(t) * 2 + 1)(x),
                transcendental=True)
    assert "parallel: yes" in _compiled().ir_post_fusion


@pytest.fixture
def sixteen_threads():
    yield from _with_threads(16)


_U8 = torch.arange(3 * 224 * 224).reshape(1, 3, 224, 224).to(torch.uint8)


@pytest.mark.parametrize("fn,args", [
    (lambda t: -t, (_U8,)),                               # 294 KB moved: cheap
    (lambda t: t.flip(-2), (_U8,)),                       # a row copy
    (lambda a, b: torch.cat([a, b]), (_U8, _U8)),         # 588 KB
    (lambda t: -t, (torch.randn(1 << 20),)),              # 8 MB
    (lambda t: torch.exp(t) * 2 + 1, (torch.randn(40000),)),   # not cheap
])
def test_parallel_kernels_take_the_whole_team(sixteen_threads, fn, args):
    # a smaller team makes libgomp end the threads it leaves out, and torch's next op at
    # the full team starts them again (~750 us a call between two linears on 16 cores)
    assert_same(fn(*args), cdynamo.optimize(fn)(*args), transcendental=True)
    c = _compiled()
    assert "#define NTHREADS 16" in c.source
    teams = re.findall(r"num_threads\(([^)]*)\)", c.source)
    assert teams and set(teams) == {"NTHREADS"}, teams
    if "parallel: yes" in c.ir_post_fusion:
        assert "16 threads" in c.ir_post_fusion and "of 16 threads" not in c.ir_post_fusion


def test_two_threads_keep_nthreads_for_cheap_kernels(two_threads):
    assert_same(-_U8, cdynamo.optimize(lambda t: -t)(_U8))
    src = _compiled().source
    assert "num_threads(NTHREADS)" in src and "#define NTHREADS 2" in src


def _heads(b=2, t=16, h=4, d=8, seed=0):
    """q, k, v as a transformer splits them: views of one (b, t, 3*h*d) projection."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(b, t, 3 * h * d, generator=g)
    return [z.view(b, t, h, d).transpose(1, 2) for z in qkv.split(h * d, dim=-1)]


def _close(expected, actual):
    # the fused attention's online softmax rounds differently from matmul + softmax + matmul
    for e, a in zip(_flatten(expected), _flatten(actual)):
        assert a.shape == e.shape and a.dtype == e.dtype and a.stride() == e.stride()
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


def _attention_matches_eager(fn, *args):
    expected = fn(*args)
    opt = cdynamo.optimize(fn)
    for _ in range(2):
        _close(expected, opt(*args))
    st = cdynamo.stats()
    assert st["graph_breaks"] == 0 and st["fallbacks"] == 0 and st["frames_compiled"] == 1, st
    return _compiled()


@pytest.mark.parametrize("form", ["mul", "div", "rmul", "unscaled"])
def test_hand_written_attention_is_one_fused_attention_call(form):
    q, k, v = _heads()

    def attn(q, k, v):
        s = q @ k.transpose(-2, -1)
        s = {"mul": lambda: s * 0.125, "div": lambda: s / 8.0, "rmul": lambda: 0.125 * s,
             "unscaled": lambda: s}[form]()
        return torch.softmax(s, dim=-1) @ v

    c = _attention_matches_eager(attn, q, k, v)
    # one extern (scaled_dot_product_attention) and no kernel: no scores, no softmax
    assert _externs(c) == 1 and _kernels(c) == 0


def test_attention_with_an_additive_mask_passes_it_as_attn_mask():
    q, k, v = _heads()
    mask = torch.zeros(16, 16).masked_fill(torch.ones(16, 16).triu(1).bool(), float("-inf"))

    def attn(q, k, v, mask):
        a = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        return (a + mask).softmax(-1).matmul(v)

    c = _attention_matches_eager(attn, q, k, v, mask)
    assert _externs(c) == 1 and _kernels(c) == 0


def test_attention_whose_weights_are_returned_is_left_unfused():
    q, k, v = _heads()

    def attn(q, k, v):
        p = (q @ k.transpose(-2, -1) * 0.125).softmax(-1)
        return p @ v, p

    c = _attention_matches_eager(attn, q, k, v)
    assert _externs(c) == 2 and _kernels(c) == 1   # both matmuls and the softmax kernel stay


def test_attention_over_untransposed_keys_or_three_dims_is_left_unfused():
    q, k, v = _heads()
    kt = k.transpose(-2, -1).contiguous()   # not a view of a (.., S, E) tensor
    c = _attention_matches_eager(lambda q, kt, v: (q @ kt * 0.125).softmax(-1) @ v, q, kt, v)
    assert _externs(c) == 2
    cdynamo.reset()
    q3, k3, v3 = (z.reshape(8, 16, 8) for z in (q, k, v))
    c = _attention_matches_eager(lambda q, k, v: (q @ k.transpose(1, 2)).softmax(-1) @ v, q3, k3, v3)
    assert _externs(c) == 2


def test_hugging_face_eager_attention_is_one_fused_attention_call():
    # transformers' eager_attention_forward: softmax in float32 then .to(query.dtype), dropout
    # in eval, a (b, 1, t, t) additive mask; .to / dropout return their input: no nodes at all
    q, k, v = _heads()
    mask = torch.zeros(2, 1, 16, 16)
    mask[..., 8:] = torch.finfo(torch.float32).min

    def attn(q, k, v, mask):
        w = torch.matmul(q, k.transpose(2, 3)) * 0.25 + mask
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        w = F.dropout(w, p=0.1, training=False)
        return torch.matmul(w, v).transpose(1, 2).contiguous()

    c = _attention_matches_eager(attn, q, k, v, mask)
    assert _externs(c) == 1 and _kernels(c) == 1   # the attention; the transposing copy


def test_no_op_conversions_are_their_input():
    x = torch.randn(8, 16)
    check(lambda x: x.to(torch.float32).float().contiguous().type_as(x) * 2, x)
    c = _compiled()
    assert _externs(c) == 0 and _kernels(c) == 1
    check(lambda x: F.dropout(x, 0.5, training=False) + 1, x)
    assert _externs(_compiled()) == 0
    opt = cdynamo.optimize(lambda x: x.contiguous())   # eager returns x itself
    assert opt(x) is x and opt(x) is x


@pytest.mark.parametrize("heads_first", [False, True])
def test_fused_attention_result_keeps_the_kernels_layout(heads_first):
    # torch's CPU attention returns its result in the query's memory order: for heads split
    # from (b, t, h, d) the result's transpose(1, 2) is contiguous already, so transformers'
    # attn.transpose(1, 2).contiguous() costs no copy kernel and no runtime copy
    q, k, v = _heads()
    if heads_first:
        q, k, v = (z.contiguous() for z in (q, k, v))

    def attn(q, k, v):
        y = F.scaled_dot_product_attention(q, k, v, scale=0.3)
        return y, y.transpose(1, 2).contiguous().view(2, 16, 32)

    c = _attention_matches_eager(attn, q, k, v)
    assert _externs(c) == 1
    assert _kernels(c) == (1 if heads_first else 0)


def test_norm_read_only_by_its_epilogue_is_not_stored():
    # gelu(layer_norm(x)): the normalized rows feed only the fused gelu, so the
    # kernel writes the gelu output alone (one store stream, not two)
    x, w, b = torch.randn(8, 64), torch.randn(64), torch.randn(64)
    check(lambda x, w, b: F.gelu(F.layer_norm(x, (64,), w, b)), x, w, b, transcendental=True)
    c = _compiled()
    assert _kernels(c) == 1
    assert "(not stored) out_ptr0" in c.ir_post_fusion
    kernel = c.source[c.source.index("CDY_EXPORT void kernel_"):]
    assert "out_ptr0[" not in kernel and "out_ptr1[" in kernel
    # and it gets no memory: no scratch, only the returned gelu is allocated
    assert c.scratch_bytes == 0 and c.peak_buffer_bytes == 8 * 64 * 4


def _ln_returned(x):
    y = F.layer_norm(x, (64,))
    return y, F.gelu(y)


def _ln_reduced(x):
    y = F.layer_norm(x, (64,))
    return F.gelu(y) + y.amax()


def _gn_returned(x):
    y = F.group_norm(x.view(2, 4, 64), 2)
    return y, y * 2


@pytest.mark.parametrize("fn", [_ln_returned, _ln_reduced, _gn_returned,
                                lambda x: torch.softmax(x, -1) * 2], ids=lambda f: f.__name__)
def test_row_result_is_stored_when_something_else_reads_it(fn):
    x = torch.randn(8, 64)
    check(fn, x, transcendental=True)
    c = _compiled()
    assert "(not stored)" not in c.ir_post_fusion
    kernel = c.source[c.source.index("CDY_EXPORT void kernel_"):]
    assert "out_ptr0[" in kernel


# ---- the same decisions read from the kernel IR (data, not C text) --------------------------

def _steps(kind=None):
    """The kernel IR's summary of the last compile: a dict per step of the schedule."""
    steps = _compiled().kernel_ir
    return [s for s in steps if kind is None or s["kind"] == kind]


def test_kernel_ir_of_a_chain_one_kernel_fusing_every_op(two_threads):
    x, y = torch.randn(64, 1024), torch.randn(1024)
    check(lambda x, y: torch.sigmoid(x * y + 1).relu(), x, y, transcendental=True)
    (k,) = _steps()
    assert (k["kind"], k["kernel"], k["ops"]) == ("pointwise", 0, ("mul", "add", "sigmoid", "relu"))
    assert k["sizes"] == (64, 1024) and k["loops"] == (64, 1024) and k["params"] == 3
    assert k["parallel"] and k["threads"] == 0 and k["vectorized"] and k["serial"] is None
    assert len(k["outputs"]) == 1 and k["outputs"][0] == k["fused"][-1]


def test_kernel_ir_reduction_fuses_its_prologue_and_its_consumer_follows():
    x = torch.randn(64, 256)
    check(lambda x: x - (x * 2).exp().mean(-1, keepdim=True), x, transcendental=True)
    red, after = _steps()
    assert red["kind"] == "reduce" and red["ops"] == ("mul", "exp", "mean")
    assert red["loops"] == (64,) and red["reduced_loops"] == (256,)
    assert after["kind"] == "pointwise" and after["ops"] == ("sub",)
    assert after["kernel"] == red["kernel"] + 1


def test_kernel_ir_norm_epilogue_and_unstored_result():
    x, w, b = torch.randn(8, 64), torch.randn(64), torch.randn(64)
    check(lambda x, w, b: F.gelu(F.layer_norm(x, (64,), w, b)), x, w, b, transcendental=True)
    (k,) = _steps()
    assert k["kind"] == "rows" and k["ops"] == ("row_layer_norm", "gelu")
    assert "unstored" in k["flags"] and len(k["outputs"]) == 2
    assert k["loops"] == (8,) and k["reduced_loops"] == (64,)


def test_kernel_ir_softmax_over_a_strided_dim_runs_in_column_mode():
    x = torch.randn(64, 128)
    check(lambda x: torch.softmax(x, 0), x, transcendental=True)
    (k,) = _steps()
    assert k["kind"] == "rows" and "columns" in k["flags"]


def _max_of_rows(x):
    values, indices = torch.max(x, 1)
    return values, indices


def test_kernel_ir_argmax_shares_the_kernel_of_its_max():
    x = torch.randn(16, 300)
    check(_max_of_rows, x)
    paired, red = _steps()
    assert paired["kind"] == "paired" and paired["kernel"] is None
    assert red["kind"] == "reduce" and red["ops"] == ("amax", "argmax")
    assert len(red["outputs"]) == 2 and "two_pass" in red["flags"]


def test_kernel_ir_extern_splits_the_kernels():
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    check(lambda x, w: torch.relu(((x * 2) @ w) + 1), x, w)
    kinds = [s["kind"] for s in _steps()]
    assert kinds == ["pointwise", "extern", "pointwise"]
    assert [s["kernel"] for s in _steps()] == [0, None, 1]


def test_kernel_ir_cat_plain_pieces_one_kernel_producers_a_kernel_each():
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    check(lambda a, b: torch.cat([a, b], 1), a, b)
    assert [s["kind"] for s in _steps()] == ["cat"]
    check(lambda a, b: torch.cat([a.exp(), b * 2], 1), a, b, transcendental=True)
    steps = _steps()
    assert [s["kind"] for s in steps] == ["pointwise", "pointwise", "pieces"]
    assert steps[0]["ops"] == ("exp", "concat_pieces") and steps[1]["ops"] == ("mul", "concat_pieces")
    assert steps[0]["piece"] is not None and steps[0]["node"] == steps[2]["node"]


@pytest.mark.parametrize("n,dtype,par", [(65536, torch.uint8, False), (150528, torch.uint8, True)])
def test_kernel_ir_cheap_kernel_threshold(two_threads, n, dtype, par):
    x = torch.arange(n).to(dtype)
    assert_same(-x, cdynamo.optimize(lambda t: -t)(x))
    (k,) = _steps()
    assert k["parallel"] == par
    assert (k["serial"] == "a cheap kernel moving fewer bytes than the threshold") != par


def test_kernel_ir_channels_last_flip_is_a_unit_reversing_copy():
    x = _U8.contiguous(memory_format=torch.channels_last)
    assert_same(x.flip(-1), cdynamo.optimize(lambda t: t.flip(-1))(x))
    (k,) = _steps()
    assert k["kind"] == "pointwise" and "copy_units" in k["flags"]


def test_kernel_ir_large_kernels_stream_their_stores(monkeypatch):
    monkeypatch.setattr(cdynamo.config, "stream_store_bytes", 1 << 16)
    x = torch.randn(256, 1024)
    check(lambda x: x * 2 + 1, x)
    (k,) = _steps()
    assert k["streams"]
