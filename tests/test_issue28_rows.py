"""Issue 28, row kernels: views of a row kernel's input or result (same-shape
views, reshape, mT, [:], flips, clones, gathers) with every consumer kind,
NaN payloads in softmax / reductions, NaN and fully masked rows through the
attention rewrite, and layer_norm / group_norm rounded as eager's kernels
(constant rows give exact zeros, inf weights give eager's NaN / inf)."""
import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import check

NAN = float("nan")
INF = float("inf")

ROW_OPS = {
    "softmax": lambda x: x.softmax(-1),
    "log_softmax": lambda x: x.log_softmax(-1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "group_norm": lambda x: F.group_norm(x, 1),
}

# same-shape views of a (3, 4) tensor, and views that read it elsewhere than
# element for element (flips, clones, a transpose of a square one)
SAME_SHAPE_VIEWS = {
    "view": lambda t: t.view(3, 4),
    "reshape": lambda t: t.reshape(3, -1),
    "slice_all": lambda t: t[:],
    "view_as": lambda t: t.view_as(t),
    "flip0": lambda t: t.flip(0),
    "flip1": lambda t: t.flip(1),
    "clone": lambda t: t.clone(),
    "narrow_all": lambda t: t.narrow(0, 0, 3),
}


def _x(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


# ---- item 1: a same-shape view of a row kernel's result or input -------------

@pytest.mark.parametrize("view", list(SAME_SHAPE_VIEWS))
@pytest.mark.parametrize("op", list(ROW_OPS))
def test_same_shape_view_of_row_result_returned(op, view):
    r, v = ROW_OPS[op], SAME_SHAPE_VIEWS[view]
    check(lambda x: v(r(x)), _x(3, 4))


@pytest.mark.parametrize("view", ["view", "slice_all", "flip0", "flip1", "clone"])
@pytest.mark.parametrize("op", ["softmax", "layer_norm"])
def test_same_shape_view_of_row_result_read_by_pointwise(op, view):
    r, v = ROW_OPS[op], SAME_SHAPE_VIEWS[view]
    check(lambda x: v(r(x)) + 1, _x(3, 4))
    cdynamo.reset()
    check(lambda x: (r(x), v(r(x)) * 2), _x(3, 4))


@pytest.mark.parametrize("view", ["view", "flip0", "clone"])
def test_same_shape_view_of_row_result_read_by_row_kernel_and_extern(view):
    v = SAME_SHAPE_VIEWS[view]
    check(lambda x: v(x.softmax(-1)).log_softmax(-1), _x(3, 4))
    cdynamo.reset()
    check(lambda x: F.layer_norm(v(F.layer_norm(x, (4,))), (4,)), _x(3, 4))
    cdynamo.reset()
    check(lambda x: v(x.softmax(-1)).cumsum(0), _x(3, 4))   # an extern


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm"])
def test_transpose_of_square_row_result(op):
    r = ROW_OPS[op]
    check(lambda x: r(x).mT, _x(3, 3))
    cdynamo.reset()
    check(lambda x: r(x).t() + 1, _x(3, 3))
    cdynamo.reset()
    check(lambda x: r(x).transpose(1, 2), _x(2, 4, 4))


def test_issue_snippets_views_of_row_results():
    x = torch.randn(3, 4)
    check(lambda x: x.softmax(-1).view(3, 4), x)
    cdynamo.reset()
    check(lambda x: F.layer_norm(x, (4,)).reshape(3, -1), x)
    cdynamo.reset()
    check(lambda x: x.log_softmax(-1).mT, torch.randn(3, 3))
    cdynamo.reset()
    check(lambda x: x.softmax(-1)[:] + 1, x)
    cdynamo.reset()
    check(lambda x: x.softmax(-1).clone(), torch.randn(3, 2))


@pytest.mark.parametrize("view", ["view", "reshape", "slice_all", "clone", "flip0"])
@pytest.mark.parametrize("op", list(ROW_OPS))
def test_same_shape_view_of_row_input_beside_it(op, view):
    r, v = ROW_OPS[op], SAME_SHAPE_VIEWS[view]
    x = _x(3, 4)
    check(lambda x: (r(x), v(x)), x)
    out = cdynamo.optimize(lambda x: (r(x), v(x)))(x)
    if view in ("view", "reshape", "slice_all"):   # eager's is a view of x
        assert out[1].data_ptr() == x.data_ptr() and out[1]._base is not None


def test_view_of_row_input_alias_snippet():
    x = torch.randn(3, 4)
    check(lambda x: (x.softmax(-1), x.view(3, 4)), x)
    out = cdynamo.optimize(lambda x: (x.softmax(-1), x.view(3, 4)))(x)
    assert out[1].data_ptr() == x.data_ptr()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape,view", [
    ((2, 3, 4), lambda t: t.view(2, 3, 4)),
    ((2, 3, 4), lambda t: t.reshape(6, 4).view(2, 3, 4)),
    ((2, 3, 4), lambda t: t.flip(1)),
    ((2, 3, 4), lambda t: t.flip(0, 2)),
    ((2, 4, 3, 5), lambda t: t.flip(2)),
    ((2, 4, 3, 5), lambda t: t[:, :, :]),
])
def test_views_of_row_results_in_more_dims(shape, view, dtype):
    for r in (lambda x: x.softmax(-1), lambda x: x.softmax(1), lambda x: F.layer_norm(x, x.shape[-2:])):
        cdynamo.reset()
        check(lambda x: view(r(x)), _x(*shape, dtype=dtype))
        cdynamo.reset()
        check(lambda x: view(r(x)) * 3 - 1, _x(*shape, dtype=dtype))


def test_views_of_row_results_of_non_contiguous_input():
    x = torch.randn(4, 3).t()                 # (3, 4), strides (1, 3)
    for op in ROW_OPS.values():
        for v in SAME_SHAPE_VIEWS.values():
            cdynamo.reset()
            check(lambda x: v(op(x)), x)


# ---- item 2: a norm's result read by a pointwise op and a gather -------------

def test_layer_norm_read_by_pointwise_and_index_select():
    def f(x, i):
        t = F.layer_norm(x, (5,))
        return t * 2, t.index_select(0, i)
    check(f, torch.randn(4, 5), torch.tensor([2]))


@pytest.mark.parametrize("gather", [
    lambda t, i: t.index_select(0, i),
    lambda t, i: t.index_select(1, i),
    lambda t, i: t[i],
    lambda t, i: torch.gather(t, 1, i.view(1, -1).expand(4, -1)),
])
@pytest.mark.parametrize("op", list(ROW_OPS))
def test_row_result_read_by_epilogue_and_gather(op, gather):
    r = ROW_OPS[op]

    def f(x, i):
        t = r(x)
        return t * 2, gather(t, i)
    check(f, torch.randn(4, 5), torch.tensor([2, 0]))


# ---- item 5: the fuzzer's program with an unused softmax ---------------------

def test_fuzz_program_with_unused_softmax():
    def f(a1, a3, a4, a5, a6):
        t1 = torch.nan_to_num(a1)
        t3 = t1[a3]
        t5 = t1.softmax(dim=-1)   # noqa: F841 - unused, as in the fuzzer's program
        t8 = torch.amin(t3, dim=0, keepdim=True)
        t9 = t8.index_select(0, a5)   # noqa: F841
        t10 = a4.diagonal(1, 0, 1)
        t11 = torch.gather(t10, 0, a6)   # noqa: F841
        return torch.cummax(t10, -1)[1]
    check(f, torch.tensor([-1.2]), torch.zeros(2, 2, dtype=torch.long), torch.randn(32, 2),
          torch.zeros(5, dtype=torch.int32), torch.zeros(1, dtype=torch.long))


def test_row_op_on_one_element_beside_same_shape_view_of_input():
    # the shape the fuzzer's program reduced to: a (1,) softmax and a (1,) view of another input
    check(lambda a, b: (a.softmax(-1), b.diagonal(1, 0, 1)), torch.tensor([0.5]), torch.randn(32, 2))
    cdynamo.reset()
    check(lambda a, b: (F.layer_norm(a, (1,)), b.diagonal(1, 0, 1) + 1), torch.tensor([0.5]),
          torch.randn(32, 2))


# ---- item 6: flips of row results over non-normalized dims ---------------------

_GW, _GB = torch.randn(6), torch.randn(6)


@pytest.mark.parametrize("dims", [(0,), (1,), (2,), (0, 1), (0, 2)])
@pytest.mark.parametrize("op", [
    lambda x: F.layer_norm(x, (5,)),
    lambda x: F.layer_norm(x, (6, 5)),
    lambda x: x.softmax(-1),
    lambda x: x.log_softmax(-1),
    lambda x: x.softmax(1),
    lambda x: F.group_norm(x, 2),
    lambda x: F.group_norm(x, 3, _GW, _GB),
])
def test_flip_of_row_result(op, dims):
    check(lambda x: op(x).flip(dims), torch.randn(4, 6, 5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_flip_of_row_results_4d_and_consumed(dtype):
    x = torch.randn(2, 4, 3, 5, dtype=dtype)
    check(lambda x: F.group_norm(x, 2).flip(0) * 2, x)
    cdynamo.reset()
    check(lambda x: F.layer_norm(x, (3, 5)).flip(1, 3) + x, x)
    cdynamo.reset()
    check(lambda x: x.softmax(2).flip(2).softmax(-1), x)


# ---- item 10: NaN payloads ---------------------------------------------------

NAN_BITS = [0x7FC00001, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FA00000]


def _with_nan(bits, n=8, at=3, rows=2):
    x = torch.randn(rows, n)
    word = torch.tensor([bits - (1 << 32) if bits >= 1 << 31 else bits], dtype=torch.int32)
    x[0, at] = word.view(torch.float32)[0]
    assert x[0, at].isnan()
    return x


def test_softmax_nan_payload_snippet():
    x = torch.tensor([0x7FC00001, 0, 0, 0], dtype=torch.int32).view(torch.float32)
    check(lambda x: torch.softmax(x, -1), x)
    cdynamo.reset()
    check(lambda x: torch.log_softmax(x, -1), x)


@pytest.mark.parametrize("bits", NAN_BITS, ids=hex)
@pytest.mark.parametrize("n", [4, 40, 1030])
def test_row_kernels_propagate_every_nan(bits, n):
    x = _with_nan(bits, n=n, at=n // 2)

    def f(x):
        return (x.softmax(-1), x.log_softmax(-1), F.layer_norm(x, (n,)),
                F.group_norm(x.view(2, 2, -1), 2), x.softmax(0))
    check(f, x)


@pytest.mark.parametrize("bits", NAN_BITS, ids=hex)
def test_reductions_and_attention_propagate_every_nan(bits):
    x = _with_nan(bits, n=40, at=37)

    def f(x):
        return (x.amax(-1), x.amin(-1), x.max(), x.min(), x.argmax(-1), x.argmin(-1),
                x.logsumexp(-1), torch.maximum(x, x.flip(-1)), x.sum(-1))
    check(f, x)
    cdynamo.reset()
    q = x.view(1, 2, 4, 10)
    check(lambda q: torch.softmax(q @ q.transpose(-2, -1), -1) @ q, q)


# ---- item 11: the attention rewrite keeps eager's NaN rows ----------------------

def _attn(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1), -1) @ v


def test_attention_with_nan_query_snippet():
    q = torch.randn(1, 2, 4, 3)
    q[0, 1, 2, 1] = NAN
    check(lambda q: torch.softmax(q @ q.transpose(-2, -1), -1) @ q, q)


@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("value", [NAN, INF, -INF])
@pytest.mark.parametrize("L", [4, 20])
def test_attention_with_special_values(where, value, L):
    qkv = {n: torch.randn(2, 2, L, 8) for n in "qkv"}
    qkv[where][0, 1, 2, 1] = value
    check(_attn, qkv["q"], qkv["k"], qkv["v"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask_kind", ["full_row", "nan", "nan_in_masked_row", "causal", "finfo_min"])
def test_attention_with_mask_rows_like_eager(mask_kind, dtype):
    L = 20
    q, k, v = (torch.randn(2, 2, L, 8, dtype=dtype) for _ in range(3))
    m = torch.zeros(L, L, dtype=dtype)
    if mask_kind == "full_row":
        m[1] = -INF
    elif mask_kind == "nan":
        m[2, 1] = NAN
    elif mask_kind == "nan_in_masked_row":
        m[2] = -INF
        m[2, -1] = NAN
    elif mask_kind == "causal":
        m = m.masked_fill(torch.ones(L, L).triu(1).bool(), -INF)
    else:
        m[:, L // 2:] = torch.finfo(dtype).min

    def f(q, k, v, m):
        return torch.softmax(q @ k.transpose(-2, -1) / 8.0 + m, -1) @ v
    expected = f(q, k, v, m)
    opt = cdynamo.optimize(f)
    for _ in range(2):
        actual = opt(q, k, v, m)
        assert actual.stride() == expected.stride()
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    # still rewritten into one fused attention call (no softmax kernel)
    src = cdynamo._support.compiles[-1]["source"]
    assert "CDY_EXPORT void kernel_" not in src


# ---- item 16: norms rounded as eager's kernels ------------------------------------

def test_layer_norm_of_constant_row_is_zero_snippet():
    check(lambda x: F.layer_norm(x, (7,)), torch.full((7,), 0.7))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [1, 2, 7, 16, 33, 257, 1024, 3001, 10000])
def test_norms_of_constant_rows_are_exact(n, dtype):
    x = torch.empty(4, n, dtype=dtype)
    for r, val in enumerate((0.7, -3.3, 1e-3, 123.456)):
        x[r] = val
    w = torch.full((n,), 2.0, dtype=dtype)
    b = torch.full((n,), 0.5, dtype=dtype)
    cw = torch.tensor([3.0], dtype=dtype)
    cb = torch.tensor([0.25], dtype=dtype)

    def f(x):
        return (F.layer_norm(x, (n,)), F.layer_norm(x, (n,), w, b), F.layer_norm(x, (n,), None, b),
                F.layer_norm(x, (n,), w), F.group_norm(x.view(4, 1, n), 1),
                F.group_norm(x.view(4, 1, n), 1, cw, cb))
    expected = f(x)
    actual = cdynamo.optimize(f)(x)
    for e, a in zip(expected, actual):
        assert torch.equal(a, e), (e, a)


def test_group_norm_inf_weight_snippet():
    w = torch.ones(4)
    w[1] = INF
    check(lambda x, w: F.group_norm(x, 2, w), torch.randn(2, 4, 3), w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("special", [INF, -INF, NAN])
def test_norms_with_special_weight_or_bias(special, dtype):
    x = torch.randn(3, 4, 5, dtype=dtype)
    cw = torch.randn(4, dtype=dtype)
    cw[1] = special
    cb = torch.randn(4, dtype=dtype)
    cb[2] = special
    lw = torch.randn(5, dtype=dtype)
    lw[3] = special
    lb = torch.randn(5, dtype=dtype)
    lb[0] = special

    def f(x, cw, cb, lw, lb):
        return (F.group_norm(x, 2, cw), F.group_norm(x, 2, None, cb), F.group_norm(x, 2, cw, cb),
                F.layer_norm(x, (5,), lw), F.layer_norm(x, (5,), None, lb),
                F.layer_norm(x, (5,), lw, lb))
    check(f, x, cw, cb, lw, lb)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layer_norm_weight_alone_gives_positive_zero(dtype):
    # a constant row normalizes to 0; with a weight and no bias eager adds a zero bias,
    # so a negative weight gives +0.0, not -0.0 (found by tools/fuzz.py, rows family)
    x = torch.full((2, 3), 0.7, dtype=dtype)
    w = torch.tensor([-1.0, 2.0, -3.0], dtype=dtype)
    f = lambda x, w: F.layer_norm(x, (3,), w)
    expected = f(x, w)
    actual = cdynamo.optimize(f)(x, w)
    torch.testing.assert_close(actual, expected)
    assert torch.equal(actual.signbit(), expected.signbit())
