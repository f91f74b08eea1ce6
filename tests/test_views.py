"""Differential tests of lowered views and movement ops against eager PyTorch:
flip / fliplr / flipud, clone / contiguous (VIEW_COPY nodes, computed by
kernels), and aliasing views (slicing, select, narrow, permute, transpose,
expand, squeeze / unsqueeze, view / reshape / flatten / unflatten, ...: VIEW
nodes, loads with their own strides and offset inside the fused kernels, or
torch views of their realized base when they are outputs).  Kernel / extern
counts check what is fused; aliasing checks mutate outputs in place."""
import pytest
import torch

import cdynamo
from conftest import assert_same, make_tensor, run_one_graph

DTYPES = [torch.uint8, torch.int64, torch.float32, torch.float64, torch.bool]


def make(dtype, shape=(2, 3, 5, 7), seed=0):
    return make_tensor(dtype, shape, seed)


def layouts(dtype):
    """Inputs of one dtype: contiguous, channels_last, transposed, sliced, expanded."""
    x = make(dtype)
    big = make(dtype, (3, 4, 9, 11), seed=1)
    return {
        "contiguous": x,
        "channels_last": x.contiguous(memory_format=torch.channels_last),
        "transposed": make(dtype, (2, 3, 7, 5)).transpose(2, 3),
        "sliced": big[1:, :3, 2:7, 3:10],
        "expanded": make(dtype, (1, 3, 1, 7)).expand(2, 3, 5, 7),
    }


def last():
    return cdynamo._support.compiles[-1]


def n_kernels():
    return last()["source"].count("CDY_EXPORT void kernel_")


def n_externs():
    return last()["graph"].count("extern")


run = run_one_graph


# ---- flip ------------------------------------------------------------------------

FLIPS = {
    "last": lambda x: x.flip(-1),
    "h": lambda x: torch.flip(x, dims=(-2,)),
    "hw": lambda x: torch.flip(x, (2, 3)),
    "all": lambda x: x.flip(0, 1, 2, 3),
    "first": lambda x: x.flip([0]),
    "fliplr": lambda x: torch.fliplr(x),
    "flipud": lambda x: x.flipud(),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed", "sliced",
                                    "expanded"])
@pytest.mark.parametrize("how", list(FLIPS))
def test_flip(dtype, layout, how):
    x = layouts(dtype)[layout]
    run(FLIPS[how], x)
    assert n_externs() == 0 and n_kernels() == 1


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced"])
def test_flip_seed_shapes_u8(layout):
    x = torch.randint(0, 256, (1, 3, 224, 224), dtype=torch.uint8)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "sliced":
        x = x[:, :, 10:200, 5:]
    run(lambda t: (t.flip(-1), t.flip(-2)), x)
    assert n_externs() == 0


def test_flip_fused_with_pointwise_one_kernel():
    x = make(torch.float32)
    run(lambda t: t.flip(-1) + 1, x)
    assert n_externs() == 0 and n_kernels() == 1
    run(lambda t, u: torch.relu(t.flip(1) * u), x, make(torch.float32, seed=2))
    assert n_externs() == 0 and n_kernels() == 1


def test_flip_of_flip_and_of_computed():
    x = make(torch.float32)
    run(lambda t: t.flip(-1).flip(0, -1) * 2, x)
    assert n_externs() == 0 and n_kernels() == 1
    run(lambda t: (t * 2).flip(-1) - 1, x)
    assert n_externs() == 0
    run(lambda t: t.flip(-1).sum(-1), x)
    assert n_externs() == 0


def test_flip_size_one_and_empty():
    run(lambda t: t.flip(1, 2), make(torch.float32, (2, 1, 5, 1)))
    run(lambda t: t.flip(0), torch.zeros(0, 3))


# ---- clone / contiguous -----------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed", "sliced",
                                    "expanded"])
def test_clone_contiguous(dtype, layout):
    x = layouts(dtype)[layout]
    run(lambda t: (t.clone(), t.contiguous(), torch.clone(t)), x)
    assert n_externs() == 0
    run(lambda t: t.clone(memory_format=torch.contiguous_format), x)


def test_contiguous_of_contiguous_is_the_input():
    x = make(torch.float32)
    f = cdynamo.optimize(lambda t: t.contiguous())
    assert f(x) is x


# ---- aliasing views in kernels ------------------------------------------------------

VIEWS = {
    "slice": lambda x: x[1:, :, 1:4],
    "slice_step": lambda x: x[:, ::2, 1::3],
    "slice_neg": lambda x: x[-1:, :-1, -4:-1],
    "int_index": lambda x: x[1],
    "int_neg": lambda x: x[:, -1, 2],
    "ellipsis_none": lambda x: x[..., None, 2:],
    "select": lambda x: x.select(2, -1),
    "narrow": lambda x: torch.narrow(x, 3, 2, 4),
    "permute": lambda x: x.permute(3, 1, 0, 2),
    "transpose": lambda x: x.transpose(1, -1),
    "swapaxes": lambda x: torch.swapaxes(x, 0, 2),
    "movedim": lambda x: x.movedim(0, -1),
    "t": lambda x: x[0, 0].t(),
    "expand": lambda x: x[:, :1].expand(2, 4, 5, 7),
    "broadcast_to": lambda x: torch.broadcast_to(x[0], (3, 3, 5, 7)),
    "squeeze": lambda x: x[:, :1].squeeze(1),
    "unsqueeze": lambda x: x.unsqueeze(-2),
    "view": lambda x: x.view(6, 35),
    "reshape": lambda x: x.reshape(2, -1),
    "flatten": lambda x: x.flatten(1),
    "unflatten": lambda x: x.unflatten(-1, (1, 7)),
    "diagonal": lambda x: x[0, 0, :, :5].diagonal(),
}


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.float32, torch.float64],
                         ids=str)
@pytest.mark.parametrize("how", list(VIEWS))
def test_view_then_pointwise(dtype, how):
    x = make(dtype)
    view = VIEWS[how]
    run(lambda t: view(t) * 2 + 1, x)
    assert n_externs() == 0 and n_kernels() == 1


@pytest.mark.parametrize("how", list(VIEWS))
@pytest.mark.parametrize("layout", ["channels_last", "transposed", "sliced"])
def test_view_then_pointwise_layouts(how, layout):
    x = layouts(torch.float32)[layout]
    view = VIEWS[how]
    try:
        expected = view(x)
    except RuntimeError:   # view() of a non-contiguous layout: eager raises
        return
    assert expected is not None
    run(lambda t: view(t) - 0.5, x)


@pytest.mark.parametrize("how", list(VIEWS))
def test_view_as_output(how):
    x = make(torch.float32)
    run(VIEWS[how], x)


def test_views_chained_and_mixed():
    x, y = make(torch.float32), make(torch.float32, (7, 5), seed=3)
    run(lambda a, b: a[1].permute(2, 0, 1)[2:, ::2] * b.t()[:, None, 1:2], x, y)
    assert n_externs() == 0 and n_kernels() == 1
    run(lambda a: (a * 2).t()[1:] + 1, y)
    assert n_externs() == 0
    run(lambda a: a.t()[1:].sum(0), y)
    assert n_externs() == 0
    run(lambda a: (a[:, 1:].flip(0) + a[:, :-1]).transpose(0, 1).contiguous(), y)
    assert n_externs() == 0


def test_view_of_flip_output():
    y = make(torch.float32, (7, 5))
    run(lambda a: a.flip(0).t(), y)
    run(lambda a: (a.flip(0)[1:], a.flip(1).t() + 1), y)


def test_reshape_that_copies_stays_correct():
    y = make(torch.float32, (7, 5))
    run(lambda a: a.t().reshape(35) * 2, y)
    run(lambda a: a.t().reshape(35), y)


def test_advanced_index_stays_extern():
    y = make(torch.float32, (7, 5))
    run(lambda a: a[[0, 2, 2]] + 1, y)
    assert n_externs() >= 1


# ---- aliasing semantics ---------------------------------------------------------------


@pytest.mark.parametrize("how", ["slice", "int_index", "select", "permute", "transpose",
                                 "view", "unsqueeze", "narrow", "t"])
def test_view_output_aliases_input(how):
    view = VIEWS[how]
    xe, xc = make(torch.float32), make(torch.float32)
    ye = view(xe)
    yc = cdynamo.optimize(view)(xc)
    assert yc.data_ptr() == ye.data_ptr() - xe.data_ptr() + xc.data_ptr()
    ye.add_(1)
    yc.add_(1)
    assert_same(xe, xc)
    assert_same(ye, yc)


def test_view_output_of_computed_aliases_other_output():
    def f(a):
        b = a * 2
        return b, b.t()[1:]
    xe = make(torch.float32, (4, 6))
    be, ve = f(xe)
    bc, vc = cdynamo.optimize(f)(xe)
    assert_same((be, ve), (bc, vc))
    ve.add_(1)
    vc.add_(1)
    assert_same(be, bc)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool, torch.int16, torch.float32],
                         ids=str)
@pytest.mark.parametrize("c", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("w", [11, 16, 33, 100])
def test_flip_channels_last_unit_reverse(dtype, c, w):
    """hflip of channels_last: rows of C-element units reversed (16-byte shuffles
    when a unit is at most 8 bytes), every tail length."""
    x = (make(dtype, (2, c, 3, w)) if dtype != torch.int16 else
         make(torch.int64, (2, c, 3, w)).to(torch.int16))
    x = x.contiguous(memory_format=torch.channels_last)
    run(lambda t: t.flip(-1), x)
    run(lambda t: t[:, :, 1:, 1:].flip(3), x)
    assert n_externs() == 0


# ---- cat / stack ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [2, 3, 5, 7])
@pytest.mark.parametrize("dim", [0, 1, -1, -3])
def test_cat_pieces(dtype, n, dim):
    base = make(dtype, (2, 3, 4, 5))
    pieces = []
    for i in range(n):
        shape = [2, 3, 4, 5]
        shape[dim] = 1 + i % 3
        pieces.append(make(dtype, tuple(shape), seed=i))
    run(lambda *ps: torch.cat(ps, dim), *pieces)
    assert n_externs() == 0 and n_kernels() == 1      # plain pieces: one kernel
    run(lambda *ps: torch.cat([p + 1 for p in ps], dim), *pieces[:6])
    assert n_externs() == 0 and n_kernels() == min(n, 6)   # a kernel per fused piece
    run(lambda *ps: torch.stack([base] + [p.narrow(dim, 0, 1).expand_as(base) for p in ps], dim),
        *pieces)
    assert n_externs() == 0                           # up to 15 pieces: lowered
    many = (pieces * 15)[:15]                         # 16 pieces: one extern
    run(lambda *ps: torch.stack([base] + [p.narrow(dim, 0, 1).expand_as(base) for p in ps], dim),
        *many)
    assert n_externs() == 1


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed", "sliced",
                                    "expanded"])
def test_cat_layouts_and_producers(layout):
    x = layouts(torch.float32)[layout]
    y = make(torch.float32, seed=4)
    run(lambda a, b: torch.cat([a * 2, b + 1], 1), x, y)
    assert n_externs() == 0 and n_kernels() == 2
    run(lambda a, b: torch.cat((a.flip(-1), torch.relu(b), a[:, :1]), dim=-3) - 1, x, y)
    assert n_externs() == 0
    run(lambda a, b: torch.concat([a, b], dim=0), x, y)
    run(lambda a, b: torch.concatenate([a, b], axis=2), x, y)


def test_cat_promotes_and_broadcast_producers():
    a = make(torch.uint8, (3, 4))
    b = make(torch.int64, (3, 2), seed=1)
    c = make(torch.float32, (3, 1), seed=2)
    run(lambda a, b, c: torch.cat([a, b, c], 1), a, b, c)
    run(lambda a, b, c: torch.cat([a + c, b * c.t()[:, :1]], -1), a, b, c)
    assert n_externs() == 0
    run(lambda a: torch.cat([a.bool(), a > 3]), a)


def test_stack_and_cat_edge_cases():
    a, b = make(torch.float32, (3, 4)), make(torch.float32, (3, 4), seed=1)
    run(lambda a, b: torch.stack([a, b]), a, b)
    run(lambda a, b: torch.stack((a, b), dim=-1), a, b)
    run(lambda a, b: torch.stack([a, b], 2), a, b)
    run(lambda a: torch.cat([a]), a)
    run(lambda a, b: torch.cat([a, b[:0]]), a, b)
    run(lambda a, e: torch.cat([a, e]), a, torch.zeros(0))        # legacy empty piece: extern
    run(lambda *ps: torch.cat(ps, 1), *[a] * 16)                    # more than 15 pieces: extern
    assert n_externs() == 1


def test_cat_output_in_place_and_chain():
    a, b = make(torch.float32, (3, 4)), make(torch.float32, (3, 4), seed=1)
    run(lambda a, b: torch.cat([a, b], 1).sum(-1), a, b)
    run(lambda a, b: torch.cat([a, b], 1).t()[1:] * 3, a, b)


def test_cat_u8_seed():
    x = torch.randint(0, 256, (1, 3, 224, 224), dtype=torch.uint8)
    run(lambda a, b: torch.cat([a, b], 1), x, x.flip(-1))
    assert n_externs() == 0 and n_kernels() == 1
    run(lambda a: torch.cat([a, a.flip(-1)], 1), x)
    assert n_externs() == 0 and n_kernels() == 1
    run(lambda a: torch.cat([a, a], 2), x[:, :, 1:, 3:])
    assert n_externs() == 0 and n_kernels() == 1


# ---- constant pad ---------------------------------------------------------------------

import torch.nn.functional as F  # noqa: E402

PADS = [(1, 2), (0, 0, 3, 1), (-1, 2), (2, -3, -1, 1), (1, 1, 1, 1, 1, 1, 1, 1), (-2, -2),
        (0, 0, 0, 0, -1, 1)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed", "sliced",
                                    "expanded"])
@pytest.mark.parametrize("pad", PADS, ids=str)
def test_constant_pad(dtype, layout, pad):
    x = layouts(dtype)[layout]
    value = True if dtype == torch.bool else 3
    run(lambda t: F.pad(t, pad), x)
    assert n_externs() == 0
    run(lambda t: F.pad(t, pad, mode="constant", value=value), x)
    run(lambda t: torch.constant_pad_nd(t, pad, value), x)
    assert n_externs() == 0


@pytest.mark.parametrize("value", [0.5, -2.0, float("inf"), float("nan"), 7])
def test_constant_pad_values_and_producers(value):
    x = make(torch.float32, (3, 4, 5))
    run(lambda t: F.pad(torch.relu(t * 2), (1, -1, 2, 0), value=value) + 1, x)
    assert n_externs() == 0 and n_kernels() == 3
    run(lambda t: F.pad(t.flip(-1).t(), (2, 2), value=value), x[0])
    assert n_externs() == 0


def test_constant_pad_edge_cases():
    x = make(torch.float32, (3, 4))
    run(lambda t: F.pad(t, (-2, -2)), x)                    # cropped to nothing
    run(lambda t: F.pad(t, (1, 1, -3, 0)), x)               # one row left
    run(lambda t: F.pad(t, (0, 0, 0, -3), value=2.0), x)
    run(lambda t: F.pad(t, (-4, 2)), x)                     # crop all, pad: all value
    run(lambda t: F.pad(t, (1, 1), value=1.5), make(torch.int64, (3, 4)))   # inexact: extern
    run(lambda t: F.pad(t, (1, 1), mode="reflect"), x)                      # other mode: extern
    assert n_externs() == 1


# ---- split / chunk / unbind: tuples of views ------------------------------------------


@pytest.mark.parametrize("how", ["split", "split_list", "chunk", "tensor_split", "unbind",
                                 "unbind_neg", "torch_split", "chunk_uneven"])
def test_multi_views(how):
    fns = {
        "split": lambda t: t.split(2, dim=-1),
        "split_list": lambda t: t.split([1, 4, 2], 3),
        "chunk": lambda t: t.chunk(3, 1),
        "tensor_split": lambda t: torch.tensor_split(t, 3, dim=2),
        "unbind": lambda t: t.unbind(1),
        "unbind_neg": lambda t: torch.unbind(t, -2),
        "torch_split": lambda t: torch.split(t, 3, 2),
        "chunk_uneven": lambda t: t.chunk(4, -1),
    }
    f = fns[how]
    x = make(torch.float32)
    run(lambda t: tuple(p * 2 for p in f(t)), x)
    assert n_externs() == 0
    run(lambda t: f(t)[0] + f(t)[-1].sum(), x)
    assert n_externs() == 0
    run(f, x)                                   # items as outputs: torch views of x
    xe, xc = make(torch.float32), make(torch.float32)
    pe, pc = f(xe), cdynamo.optimize(f)(xc)
    pe[-1].add_(1)
    pc[-1].add_(1)
    assert_same(xe, xc)


def test_qkv_split_attention_like():
    x = make(torch.float32, (2, 5, 12))
    def f(t):
        q, k, v = t.chunk(3, dim=-1)
        return (q * k).sum(-1, keepdim=True) * v
    run(f, x)
    assert n_externs() == 0


def test_zero_dim_views():
    x = make(torch.float32, (3, 4))
    run(lambda t: t[1, 2] * t, x)
    run(lambda t: t[1, -1], x)
    run(lambda t: (t[0, 0] + 1, t.flip(0)[2, 3] * 2), x)
    assert n_externs() == 0
