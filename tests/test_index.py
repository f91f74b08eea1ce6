"""Differential tests of the lowered indexing ops against eager PyTorch:
embedding, index_select, gather and tensor indexing (x[idx], x[:, idx],
x[i0, i1], mixed with slices / None / Ellipsis / ints) become GATHER nodes
(gathered loads inside fused pointwise kernels, csrc/compiler/gather.c).
Out-of-range indices must raise eager's exception type from the compiled
kernel (the status convention), and a later in-range call must still work.
Kernel / extern counts check what is fused."""
import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import assert_same, check_raises, make_tensor, run_one_graph

SRC_DTYPES = [torch.float32, torch.float64, torch.int64, torch.uint8, torch.bool]
IDX_DTYPES = [torch.int64, torch.int32]


def make(dtype, shape, seed=0):
    return make_tensor(dtype, shape, seed)


def idx(n, shape, dtype=torch.int64, seed=0, neg=False):
    g = torch.Generator().manual_seed(seed)
    lo = -n if neg else 0
    return torch.randint(lo, n, shape, generator=g, dtype=torch.int64).to(dtype)


def last():
    return cdynamo._support.compiles[-1]


def n_kernels():
    src = last()["source"]
    return src.count("CDY_EXPORT void kernel_") + src.count("CDY_EXPORT int kernel_")


def n_status_kernels():
    return last()["source"].count("CDY_EXPORT int kernel_")


def n_externs():
    return last()["graph"].count("extern")


run = run_one_graph


def lowered():
    """The last compile has a gathered load and no extern."""
    assert "gather_load" in last()["graph"], last()["graph"]
    assert n_externs() == 0, last()["graph"]


def raises_like_eager(fn, bad, good):
    """fn(*bad) raises eager's exception type (and message) compiled too, and
    the same compiled function then gives eager's result on good."""
    with pytest.raises(Exception) as eager:
        fn(*bad)
    opt = cdynamo.optimize(fn)
    assert_same(fn(*good), opt(*good))
    with pytest.raises(type(eager.value)) as comp:
        opt(*bad)
    assert str(comp.value) == str(eager.value)
    assert_same(fn(*good), opt(*good))
    assert cdynamo.stats()["graph_breaks"] == 0


# ---- embedding -------------------------------------------------------------

@pytest.mark.parametrize("dtype", SRC_DTYPES)
@pytest.mark.parametrize("idt", IDX_DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), (2, 3, 4)])
def test_embedding(dtype, idt, shape):
    w = make(dtype, (10, 7))
    run(lambda w, i: F.embedding(i, w), w, idx(10, shape, idt))
    lowered()


@pytest.mark.parametrize("idt", IDX_DTYPES)
def test_torch_embedding_and_padding_idx(idt):
    w, i = make(torch.float32, (10, 16)), idx(10, (3, 4), idt)
    run(lambda w, i: torch.embedding(w, i) + 1, w, i)
    lowered()
    cdynamo.reset()
    run(lambda w, i: F.embedding(i, w, padding_idx=2), w, i)
    lowered()


def test_embedding_sliced_and_transposed_weight():
    big = make(torch.float32, (20, 30))
    run(lambda w, i: F.embedding(i, w[3:15, 2:20:2]), big, idx(12, (6,)))
    lowered()
    cdynamo.reset()
    run(lambda w, i: F.embedding(i, w.t()), make(torch.float64, (8, 12)), idx(12, (2, 3)))
    lowered()


def test_embedding_max_norm_stays_extern():
    w = make(torch.float32, (10, 4)) * 3

    def f(w, i):
        return F.embedding(i, w, max_norm=1.0) * 2

    w1, w2 = w.clone(), w.clone()
    i = idx(10, (5,))
    expected = f(w1, i)
    actual = cdynamo.optimize(f)(w2, i)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(w2, w1)   # the renorm mutated the weight as in eager
    assert "gather_load" not in last()["graph"]


def test_embedding_scale_pos_is_one_kernel():
    w, pos = make(torch.float32, (100, 64)), make(torch.float32, (16, 64), seed=1)

    def f(w, ids, pos):
        return F.embedding(ids, w) * 8.0 + pos

    run(f, w, idx(100, (4, 16)), pos)
    lowered()
    assert n_kernels() == 1 and n_status_kernels() == 1


def test_embedding_weight_producer_fused():
    # the weight's pointwise producers are computed at the gathered rows only: one kernel
    w, b = make(torch.float32, (50, 32)), make(torch.float32, (32,), seed=1)
    run(lambda w, i: F.embedding(i, w * 2 + 1).relu(), w, idx(50, (3, 5)))
    lowered()
    assert n_kernels() == 1
    cdynamo.reset()
    run(lambda w, b, i: F.embedding(i, torch.where(w > 0, w, b)) - 1, w, b, idx(50, (7,)))
    lowered()
    assert n_kernels() == 1


def test_gather_and_index_select_of_computed_sources():
    x, y = make(torch.float64, (5, 6)), make(torch.float64, (1, 6), seed=1)
    run(lambda x, y, i: torch.gather(x * y + 1, 1, i), x, y, idx(6, (5, 3)))
    lowered()
    assert n_kernels() == 1
    cdynamo.reset()
    run(lambda x, y, i: (x - y).index_select(1, i).exp(), x, y, idx(6, (4,)))
    lowered()
    cdynamo.reset()
    # a computed source also returned: computed in full once, and again at the gathered rows
    run(lambda x, y, i: (torch.index_select(x + y, 0, i), x + y), x, y, idx(5, (4,)))
    cdynamo.reset()
    f = lambda x, y, i: torch.gather(x * y, 1, i)
    raises_like_eager(f, (x, y, torch.tensor([[6]])), (x, y, torch.tensor([[5]])))


def test_embedding_feeding_reduction():
    w = make(torch.float32, (50, 32))
    run(lambda w, i: F.embedding(i, w).sum(-1), w, idx(50, (3, 5)))
    assert n_externs() == 0


def test_nn_embedding_layernorm_linear():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(100, 32, padding_idx=0),
                                torch.nn.LayerNorm(32), torch.nn.Linear(32, 8)).eval()
    ids = idx(100, (2, 9))
    with torch.no_grad():
        expected = model(ids)
        opt = cdynamo.optimize(model)
        for _ in range(2):
            torch.testing.assert_close(opt(ids), expected)
    assert cdynamo.stats()["graph_breaks"] == 0
    assert "gather_load" in last()["graph"]


def test_embedding_out_of_range():
    w = make(torch.float32, (10, 4))
    f = lambda w, i: F.embedding(i, w) * 2
    raises_like_eager(f, (w, torch.tensor([1, 10])), (w, torch.tensor([1, 9])))
    cdynamo.reset()
    raises_like_eager(f, (w, torch.tensor([-1, 2])), (w, torch.tensor([0, 2])))


# ---- index_select ------------------------------------------------------------

@pytest.mark.parametrize("dtype", SRC_DTYPES)
@pytest.mark.parametrize("idt", IDX_DTYPES)
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_index_select(dtype, idt, dim):
    x = make(dtype, (4, 5, 6))
    i = idx(x.shape[dim], (7,), idt)
    run(lambda x, i: torch.index_select(x, dim, i), x, i)
    lowered()


@pytest.mark.parametrize("shape", [(), (0,), (1,)])
@pytest.mark.parametrize("dim", [0, 1])
def test_index_select_0d_and_empty(shape, dim):
    x = make(torch.float32, (4, 5))
    run(lambda x, i: x.index_select(dim, i), x, idx(4, shape))
    lowered()


@pytest.mark.parametrize("layout", ["transposed", "sliced", "channels_last"])
def test_index_select_layouts(layout):
    base = make(torch.float32, (3, 4, 5, 6))
    x = {"transposed": base.transpose(1, 3),
         "sliced": make(torch.float32, (5, 6, 7, 8))[1:4, ::2, 2:7, 1:7],
         "channels_last": base.contiguous(memory_format=torch.channels_last)}[layout]
    for dim in range(4):
        cdynamo.reset()
        run(lambda x, i: x.index_select(dim, i) * 2, x, idx(x.shape[dim], (3,)))
        lowered()


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_select_out_of_range(dim):
    x = make(torch.float32, (4, 5, 6))
    f = lambda x, i: torch.index_select(x, dim, i)
    n = x.shape[dim]
    raises_like_eager(f, (x, torch.tensor([0, n])), (x, torch.tensor([0, n - 1])))
    cdynamo.reset()
    raises_like_eager(f, (x, torch.tensor([-1], dtype=torch.int32)),
                      (x, torch.tensor([1], dtype=torch.int32)))


# ---- gather ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", SRC_DTYPES)
@pytest.mark.parametrize("idt", IDX_DTYPES)
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_gather(dtype, idt, dim):
    x = make(dtype, (4, 5, 6))
    shape = [3, 4, 5]          # smaller than x along the other dims, as eager allows
    shape[dim] = 8
    i = idx(x.shape[dim], tuple(shape), idt)
    run(lambda x, i: torch.gather(x, dim, i), x, i)
    lowered()
    cdynamo.reset()
    run(lambda x, i: x.gather(dim, i), x, i)
    lowered()


def test_gather_index_producer_fused_and_transposed_source():
    x = make(torch.float32, (6, 5)).t()
    i = idx(6, (5, 4))
    run(lambda x, i: torch.gather(x, 1, (i * 7 + 1) % 6) + 1, x, i)
    lowered()
    assert n_kernels() == 1


def test_gather_empty_and_0d():
    x = make(torch.float32, (4, 5))
    run(lambda x, i: torch.gather(x, 1, i), x, idx(5, (0, 3)))
    run(lambda x, i: torch.gather(x, 0, i), make(torch.float32, ()), torch.tensor(0))


def test_gather_out_of_range():
    x = make(torch.float32, (4, 5))
    f = lambda x, i: torch.gather(x, 1, i) + 1
    raises_like_eager(f, (x, torch.tensor([[0, 5]])), (x, torch.tensor([[0, 4]])))
    cdynamo.reset()
    raises_like_eager(f, (x, torch.tensor([[-1, 2]])), (x, torch.tensor([[1, 2]])))


# ---- tensor indexing -------------------------------------------------------------

INDEXINGS = {
    "x[i]": lambda x, i, j: x[i],
    "x[:, i]": lambda x, i, j: x[:, i],
    "x[..., i]": lambda x, i, j: x[..., i],
    "x[i, j]": lambda x, i, j: x[i, j],
    "x[i, :, j]": lambda x, i, j: x[i, :, j],
    "x[:, i, j]": lambda x, i, j: x[:, i, j],
    "x[None, i]": lambda x, i, j: x[None, i],
    "x[1, :, i]": lambda x, i, j: x[1, :, i],
    "x[i, 1, j]": lambda x, i, j: x[i, 1, j],
    "x[1:3, i]": lambda x, i, j: x[1:3, i],
    "x[i, ::2]": lambda x, i, j: x[i, ::2],
    "x[-1, i, None]": lambda x, i, j: x[-1, i, None],
    "x[i[:, None], j]": lambda x, i, j: x[i[:, None], j],
}


@pytest.mark.parametrize("name", list(INDEXINGS))
@pytest.mark.parametrize("idt", IDX_DTYPES)
def test_getitem(name, idt):
    f = INDEXINGS[name]
    x = make(torch.float32, (4, 5, 6))
    i = idx(4, (3,), idt, neg=True)          # negative indices wrap as in eager
    j = idx(4, (3,), idt, seed=1, neg=True)
    run(f, x, i, j)
    lowered()


@pytest.mark.parametrize("dtype", SRC_DTYPES)
def test_getitem_dtypes_and_2d_index(dtype):
    x = make(dtype, (6, 5))
    run(lambda x, i: x[i] , x, idx(6, (2, 3)))
    lowered()
    cdynamo.reset()
    run(lambda x, i: x[:, i], x.t().contiguous().t(), idx(6, (2, 3)) % 5)
    lowered()


def test_getitem_consumers_fused():
    x = make(torch.float32, (8, 16))
    run(lambda x, i, y: x[i] * 2 + y, x, idx(8, (4,)), make(torch.float32, (4, 16), seed=2))
    lowered()
    assert n_kernels() == 1


def test_getitem_bool_mask_and_list_are_correct():
    x = make(torch.float32, (4, 5))
    m = x > 0
    expected = x[m]
    opt = cdynamo.optimize(lambda x, m: x[m])
    torch.testing.assert_close(opt(x, m), expected)
    cdynamo.reset()
    run(lambda x: x[[0, 2, 3]] + 1, x)


@pytest.mark.parametrize("name", ["x[i]", "x[:, i]", "x[i, j]"])
def test_getitem_out_of_range(name):
    f = INDEXINGS[name]
    x = make(torch.float32, (4, 5, 6))
    ok = torch.tensor([0, -4])
    raises_like_eager(f, (x, torch.tensor([1, 7]), ok), (x, torch.tensor([1, 3]), ok))
    cdynamo.reset()
    raises_like_eager(f, (x, torch.tensor([-6]), ok), (x, torch.tensor([-4]), ok))


def test_getitem_0d_index_falls_back_and_two_gathers_in_one_kernel():
    x, y = make(torch.float32, (6, 5)), make(torch.float32, (7, 5), seed=1)
    # x[0-d tensor] reads the index as a number in torch (.item(), data dependent): the frame
    # runs eagerly, with eager's result
    f = lambda x, i: x[i] * 2
    torch.testing.assert_close(cdynamo.optimize(f)(x, torch.tensor(-2)), f(x, torch.tensor(-2)))
    cdynamo.reset()
    run(lambda x, y, i, j: x[i] + y[j], x, y, idx(6, (4,)), idx(7, (4,), seed=3))
    lowered()
    assert n_kernels() == 1


def test_gather_transposed_index_and_bool_source():
    x = make(torch.bool, (5, 6))
    i = idx(6, (4, 5)).t()               # a view as the index
    run(lambda x, i: torch.gather(x, 1, i).logical_not(), x, i)
    lowered()


def test_index_of_sliced_index_and_computed_index():
    x = make(torch.float64, (9, 4))
    i = idx(9, (10,))
    run(lambda x, i: x[i[2:8:2]] + x[(i[:3] + 1) % 9], x, i)
    lowered()


def test_embedding_large_parallel_and_out_of_range():
    w = make(torch.float32, (3000, 64))
    f = lambda w, i: F.embedding(i, w) + 1
    good = idx(3000, (64, 64))
    bad = good.clone()
    bad[40, 3] = 3000
    raises_like_eager(f, (w, bad), (w, good))


# ---- int lists as indices (Falcon's multi-query split: x[..., [-2], :]) ----------------------

@pytest.mark.parametrize("name,fn", [
    ("ellipsis_neg", lambda q: q[..., [-2], :] + 1.0),
    ("ellipsis_last", lambda q: q[..., [-1], :] * q[..., :-2, :].sum(-2, keepdim=True)),
    ("top_level", lambda q: q[[0, 1, 0]] * 2.0),
    ("two_lists", lambda q: q[:, [4, 0], 1:, [1, 2]] - 1.0),
    ("list_and_int", lambda q: q[1, [3, -5]] + 0.5),
])
def test_int_list_index_is_one_graph(name, fn):
    """A list of ints in an index is the int64 index tensor torch reads it as: one graph,
    eager's values (advanced indexing's placement of the indexed dims too)."""
    run_one_graph(fn, torch.randn(2, 5, 6, 4))


def test_int_list_index_out_of_range_raises_like_eager():
    check_raises(lambda q: q[..., [7], :] + 1.0, torch.randn(2, 5, 6, 4))


def test_bool_list_index_falls_back_to_eager():
    """A list of bools is a mask, not indices: not rewritten (a graph break), eager's result."""
    def f(q):
        return q[..., [True, False, True, False]] * 2.0
    q = torch.randn(2, 3, 4)
    torch.testing.assert_close(cdynamo.optimize(f)(q), f(q))


@pytest.mark.parametrize("name,fn", [
    # a nested list is read by torch as a tuple of index lists: x[[0, 1], [2, 0]]
    ("nested_lists", lambda q: q[[[0, 1], [2, 0]]] * 2.0),
    ("tensordot_dims", lambda q: torch.tensordot(q, q, dims=([1], [1])) + 1.0),
    ("tensor_of_rows", lambda q: q + torch.tensor([[1.0, 2.0, 3.0, 4.0]])),
    ("new_tensor_of_rows", lambda q: q + q.new_tensor([[1.0, 2.0, 3.0, 4.0]])),
])
def test_lists_of_constants_inside_call_arguments_are_one_graph(name, fn):
    """Lists of constants nested in a call's arguments (calls.c const_seq) reach torch as
    real lists of their kind: one graph, eager's values (they broke the graph before)."""
    run_one_graph(fn, torch.randn(3, 4))
