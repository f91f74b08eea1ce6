"""Result metas computed in C (csrc/trace/meta.c) for cat / concat / concatenate /
stack, clamp, masked_fill, eval batch_norm, adaptive_avg_pool2d, softmax / log_softmax,
the mse / l1 / smooth_l1 losses, conv2d, max_pool2d, embedding, and the reductions any,
all, count_nonzero, var, std, vector norms, logsumexp, prod, argmax and argmin, flip /
fliplr / flipud, scaled_dot_product_attention, group_norm, F.normalize,
cumsum, tril / triu, roll, addmm, cross_entropy, zeros_like / ones_like / empty_like /
full_like, repeat, gather and avg_pool2d: torch's own metas for these are Python refs behind
torch._disable_dynamo, whose first call imports torch._dynamo (about 1 s per process),
or call torch._check or elementwise_dtypes, which import sympy (about 0.35 s). Every layout here must give eager's sizes,
strides, dtype and values, whether the C rule covers it or torch's meta runs."""
import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import assert_same, run_python


def _g():
    return torch.Generator().manual_seed(7)


def _layouts4(n, c, h, w, g):
    """4-d tensors of sizes (n, c, h, w) in several layouts."""
    yield torch.randn(n, c, h, w, generator=g)
    yield torch.randn(n, c, h, w, generator=g).contiguous(memory_format=torch.channels_last)
    yield torch.randn(n, w, h, c, generator=g).permute(0, 3, 2, 1)
    yield torch.randn(n, c, h, 2 * w, generator=g)[..., ::2]
    yield torch.randn(1, c, h, w, generator=g).expand(n, c, h, w)


def _compiled_equals_eager(fn, *args):
    expected = fn(*args)
    cdynamo.reset()
    with torch.no_grad():
        actual = cdynamo.optimize(fn)(*args)
    assert_same(expected, actual)
    st = cdynamo.stats()
    assert st["frames_compiled"] == 1 and st["graph_breaks"] == 0, st


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 1, 4, 5), (2, 1, 1, 1), (1, 3, 1, 1),
                                   (3, 4), (6,), (2, 3, 2, 2, 2)])
def test_cat_and_stack_layouts(shape):
    g = _g()
    pieces = [torch.randn(shape, generator=g), torch.randn(shape, generator=g)]
    perm = list(range(len(shape)))[::-1]
    odd = [torch.randn(shape[::-1], generator=g).permute(*perm), pieces[1]]
    for xs in (pieces, odd):
        for d in range(-len(shape), len(shape)):
            _compiled_equals_eager(lambda a, b, d=d: torch.cat([a, b], d) * 2, *xs)
            _compiled_equals_eager(lambda a, b, d=d: torch.cat((a, b), dim=d) + 1, *xs)
        for d in range(-len(shape) - 1, len(shape) + 1):
            _compiled_equals_eager(lambda a, b, d=d: torch.stack([a, b], d) * 2, *xs)
    if len(shape) == 4:   # channels_last pieces (the C rule leaves them to torch)
        cl = [p.contiguous(memory_format=torch.channels_last) for p in pieces]
        _compiled_equals_eager(lambda a, b: torch.cat([a, b], 1) * 2, *cl)
        _compiled_equals_eager(lambda a, b: torch.cat([a, b], 1) * 2, cl[0], pieces[1])


def test_cat_spellings_dtypes_and_three_pieces():
    g = _g()
    a, b, c = (torch.randn(2, k, 3, generator=g) for k in (1, 2, 3))
    _compiled_equals_eager(lambda x, y, z: torch.concat([x, y, z], 1) - 1, a, b, c)
    _compiled_equals_eager(lambda x, y, z: torch.concatenate([x, y, z], axis=1) - 1, a, b, c)
    i = torch.randint(0, 9, (2, 4, 3), generator=g)
    _compiled_equals_eager(lambda x, y: torch.cat([x, y], 1) * 2, i, i + 1)   # int64
    _compiled_equals_eager(lambda x, y: torch.cat([x, y], 1) * 2, b, i)      # mixed: torch's meta
    u = torch.randint(0, 255, (1, 3, 8, 8), generator=g, dtype=torch.uint8)
    _compiled_equals_eager(lambda x, y: torch.cat([x, y], dim=1), u, u.flip(-1))


def test_clamp_and_masked_fill_layouts_and_dtypes():
    g = _g()
    for x in _layouts4(2, 3, 4, 5, g):
        m = torch.rand(x.shape, generator=g) > 0.5
        _compiled_equals_eager(lambda t: torch.clamp(t, -0.5, 0.5) * 2, x)
        _compiled_equals_eager(lambda t: t.clamp(max=0.25) + 1, x)
        _compiled_equals_eager(lambda t: t.clamp(min=-0.25) + 1, x)
        _compiled_equals_eager(lambda t, k: t.masked_fill(k, 0.0) * 2, x, m)
        _compiled_equals_eager(lambda t, k: t.masked_fill(k[0, 0], -1.5) + 1, x, m)   # broadcast mask
    small = torch.randn(4, 1, generator=g)
    big_mask = torch.rand(3, 4, 5, generator=g) > 0.5
    _compiled_equals_eager(lambda t, k: t.masked_fill(k, 2.0), small, big_mask)   # result grows
    i = torch.arange(-6, 6).view(3, 4)
    _compiled_equals_eager(lambda t: torch.clamp(t, 0, 2.5), i)       # an int tensor and a float bound
    _compiled_equals_eager(lambda t: torch.clamp(t, min=0.5), i)
    _compiled_equals_eager(lambda t: torch.clamp(t, max=3) * 2, i)
    _compiled_equals_eager(lambda t: torch.clip(t, -2, 2) * 2, i)
    _compiled_equals_eager(lambda t, k: t.masked_fill(k, 7) - 1, i, i > 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eval_batch_norm_layouts(dtype):
    g = _g()
    c = 3
    rm, rv = torch.randn(c, generator=g).to(dtype), torch.rand(c, generator=g).to(dtype) + 0.5
    w, b = torch.randn(c, generator=g).to(dtype), torch.randn(c, generator=g).to(dtype)
    xs = list(_layouts4(2, c, 4, 5, g)) + [torch.randn(2, c, 7, generator=g),
                                           torch.randn(5, c, generator=g),
                                           torch.randn(2, 4, c, generator=g).transpose(1, 2)]
    for x in xs:
        x = x.to(dtype)
        _compiled_equals_eager(lambda t: F.batch_norm(t, rm, rv, w, b, False, 0.1, 1e-5) * 2, x)
        _compiled_equals_eager(lambda t: F.batch_norm(t, rm, rv) + 1, x)
    bn = torch.nn.BatchNorm2d(c).eval()
    _compiled_equals_eager(lambda t: torch.relu(bn(t)), xs[1].to(torch.float32))


def test_adaptive_avg_pool2d_layouts():
    g = _g()
    for x in list(_layouts4(2, 3, 6, 8, g)) + [torch.randn(3, 6, 8, generator=g)]:
        for size in (1, (1, 1), 2, (3, 4), (None, 2), [2, None], (9, 12)):   # (9, 12): larger
            _compiled_equals_eager(lambda t, s=size: F.adaptive_avg_pool2d(t, s) * 2, x)


SOFTMAXES = [lambda t, d: F.softmax(t, d), lambda t, d: F.log_softmax(t, dim=d),
             lambda t, d: torch.softmax(t, d), lambda t, d: t.log_softmax(d),
             lambda t, d: t.softmax(d, dtype=torch.float64),
             lambda t, d: torch.special.log_softmax(t, d, dtype=torch.float32),
             lambda t, d: F.softmax(t, d, dtype=torch.float64)]


@pytest.mark.parametrize("case", range(len(SOFTMAXES)))
def test_softmax_spellings_layouts_and_dtypes(case):
    g = _g()
    fn = SOFTMAXES[case]
    xs = list(_layouts4(2, 3, 4, 5, g)) + [torch.randn(5, 4, generator=g).t(),
                                           torch.randn(7, generator=g).double()]
    for x in xs:
        for d in (-1, 0, x.dim() - 1):
            _compiled_equals_eager(lambda t, d=d: fn(t, d) * 2, x)


@pytest.mark.parametrize("loss", ["mse", "l1", "smooth_l1"])
def test_loss_reductions_and_layouts(loss):
    g = _g()
    f = {"mse": F.mse_loss, "l1": F.l1_loss, "smooth_l1": F.smooth_l1_loss}[loss]
    a = torch.randn(4, 6, generator=g)
    for x, y in ((a, torch.randn(4, 6, generator=g)), (a, torch.randn(6, 4, generator=g).t()),
                 (torch.randn(6, 4, generator=g).t(), torch.randn(6, 4, generator=g).t()),
                 (a.double(), a.double().flip(0))):
        for red in ("mean", "sum", "none"):
            _compiled_equals_eager(lambda p, q, r=red: f(p, q, reduction=r) * 2, x, y)
        _compiled_equals_eager(lambda p, q: f(p, q) + 1, x, y)
    if loss == "smooth_l1":
        _compiled_equals_eager(lambda p, q: F.smooth_l1_loss(p, q, beta=0.5) * 2, a, a.flip(1))
        _compiled_equals_eager(lambda p, q: F.smooth_l1_loss(p, q, reduction="sum", beta=0.0),
                               a, a.flip(1))


CONV_ARGS = [dict(), dict(padding=1), dict(stride=2), dict(stride=(2, 1), padding=(0, 2), dilation=2),
             dict(padding=[1, 0], dilation=(1, 2)), dict(groups=2, padding=1), dict(bias=False)]


@pytest.mark.parametrize("case", range(len(CONV_ARGS)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_conv2d_shapes_and_layouts(case, dtype):
    g = _g()
    kw = dict(CONV_ARGS[case])
    groups = kw.get("groups", 1)
    w = torch.randn(6, 4 // groups, 3, 3, generator=g).to(dtype)
    b = None if kw.pop("bias", True) is False else torch.randn(6, generator=g).to(dtype)
    for x in (torch.randn(2, 4, 9, 11, generator=g),
              torch.randn(2, 4, 9, 11, generator=g).contiguous(memory_format=torch.channels_last),
              torch.randn(2, 4, 9, 22, generator=g)[..., ::2]):
        x = x.to(dtype)
        _compiled_equals_eager(lambda t: torch.relu(F.conv2d(t, w, b, **kw)) * 2, x)
        if not kw:
            _compiled_equals_eager(lambda t: torch.conv2d(t, w, b) + 1, x)
    # a channels_last weight: eager's result is channels_last too
    wc = w.contiguous(memory_format=torch.channels_last)
    _compiled_equals_eager(lambda t: F.conv2d(t, wc, b, **kw) * 2,
                           torch.randn(2, 4, 9, 11, generator=g).to(dtype))


POOL_ARGS = [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
             dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0)),
             dict(kernel_size=3, stride=2, ceil_mode=True),
             dict(kernel_size=2, stride=3, padding=1, ceil_mode=True),
             dict(kernel_size=3, stride=1, padding=1, dilation=2),
             dict(kernel_size=[2, 3], stride=None)]


@pytest.mark.parametrize("case", range(len(POOL_ARGS)))
def test_max_pool2d_shapes_and_layouts(case):
    g = _g()
    kw = POOL_ARGS[case]
    xs = list(_layouts4(2, 3, 9, 11, g))[:4] + [torch.randn(3, 9, 11, generator=g)]
    for x in xs:
        _compiled_equals_eager(lambda t: F.max_pool2d(t, **kw) * 2, x)
    args = [kw["kernel_size"], kw.get("stride") or [], kw.get("padding", 0), kw.get("dilation", 1),
            kw.get("ceil_mode", False)]
    _compiled_equals_eager(lambda t: torch.max_pool2d(t, *args) + 1, xs[0])


def test_conv_and_pool_parameter_errors_as_eager():
    # an empty tuple for a conv or pooling parameter is eager's RuntimeError,
    # not a default (max_pool2d(padding=()) once compiled to a result)
    from conftest import check_raises
    x, w = torch.randn(1, 2, 8, 8), torch.randn(3, 2, 3, 3)
    check_raises(lambda t: F.conv2d(t, w, stride=()), x)
    check_raises(lambda t: F.conv2d(t, w, padding=[]), x)
    check_raises(lambda t: F.max_pool2d(t, 2, padding=()), x)
    check_raises(lambda t: F.max_pool2d(t, 2, dilation=()), x)
    _compiled_equals_eager(lambda t: torch.max_pool2d(t, 2, ()) * 2, x)   # its default stride
    _compiled_equals_eager(lambda t: F.adaptive_avg_pool2d(t, [3, None]) * 2, x)


def test_embedding_indices_and_dtypes():
    g = _g()
    w = torch.randn(10, 4, generator=g)
    idx = torch.randint(0, 10, (3, 5), generator=g)
    for i in (idx, idx.t(), idx[0], idx[1, 2], idx.int()):
        _compiled_equals_eager(lambda t, v: F.embedding(t, v) * 2, i, w)
        _compiled_equals_eager(lambda t, v: F.embedding(t, v, padding_idx=0) + 1, i, w.double())
    emb = torch.nn.Embedding(10, 4)
    _compiled_equals_eager(lambda t: emb(t).sum(-1), idx)


REDUCTIONS = [lambda t, d, k: t.prod(d, keepdim=k), lambda t, d, k: t.var(d, keepdim=k),
              lambda t, d, k: torch.std(t, d, keepdim=k, correction=0),
              lambda t, d, k: (t > 0).any(d, keepdim=k), lambda t, d, k: (t > 0).all(d, keepdim=k),
              lambda t, d, k: torch.count_nonzero(t > 0, d),
              lambda t, d, k: torch.linalg.vector_norm(t, 2, d, k),
              lambda t, d, k: t.norm(dim=d, keepdim=k), lambda t, d, k: torch.norm(t, 1, d, k),
              lambda t, d, k: t.argmax(d, keepdim=k), lambda t, d, k: torch.argmin(t, d, k)]


@pytest.mark.parametrize("case", range(len(REDUCTIONS)))
def test_reductions_layouts_and_dtypes(case):
    g = _g()
    fn = REDUCTIONS[case]
    for x in list(_layouts4(2, 3, 4, 5, g))[:4]:
        for d, k in ((-1, False), (1, True), ((2, 3), False), ((0, 2), True)):
            if case in (0, 9, 10) and isinstance(d, tuple):
                continue                  # prod, argmax and argmin take one dim
            _compiled_equals_eager(lambda t, d=d, k=k: fn(t, d, k) * 2, x)
        if case in (9, 10):               # and None: every dim
            _compiled_equals_eager(lambda t: fn(t, None, False) * 2, x)
            _compiled_equals_eager(lambda t: fn(t, None, True) * 2, x)
    i = torch.randint(-3, 4, (3, 5), generator=g)
    if case in (0, 3, 4, 5, 9, 10):   # integer inputs: prod in int64, the bool ones as they are
        _compiled_equals_eager(lambda t: fn(t, -1, False) * 2, i)
    if case in (0, 9, 10):            # what eager rejects, the compiled function rejects
        from conftest import check_raises
        check_raises(lambda t: fn(t, (1,), False), x)
        if case == 0:
            check_raises(lambda t: t.prod(None), x)
    u = torch.randint(0, 3, (3, 5), generator=g, dtype=torch.uint8)
    _compiled_equals_eager(lambda t: t.any(-1), u)      # uint8 in, uint8 out
    _compiled_equals_eager(lambda t: t.all(0), u)


def test_flip_spellings_and_layouts():
    g = _g()
    xs = list(_layouts4(2, 3, 4, 5, g)) + [
        torch.randn(2, 3, 4, 10, generator=g).contiguous(memory_format=torch.channels_last)[..., ::2],
        torch.randn(2, 1, 4, 5, generator=g).transpose(1, 3), torch.randn(5, 8, generator=g).t()[:, ::2]]
    for x in xs:
        _compiled_equals_eager(lambda t: t.flip(-1) * 2, x)
        _compiled_equals_eager(lambda t: torch.flip(t, [0, 1]) + 1, x)
        _compiled_equals_eager(lambda t: t.flip(0, -1) - 1, x)
        _compiled_equals_eager(lambda t: torch.fliplr(t) * 2, x)
        _compiled_equals_eager(lambda t: t.flipud() * 2, x)
    u = torch.randint(0, 255, (1, 3, 8, 8), generator=g, dtype=torch.uint8)
    _compiled_equals_eager(lambda t: t.flip(-1), u)


def test_flip_errors_as_eager():
    from conftest import check_raises
    check_raises(lambda t: t.flip(0, 0), torch.randn(3, 4))       # duplicate dims
    check_raises(lambda t: t.flip(2), torch.randn(3, 4))          # out of range
    check_raises(lambda t: torch.fliplr(t), torch.randn(3))       # fliplr needs 2 dims


def _qkv(kind, b, h, l, e, g, dtype=torch.float32):
    if kind == "bhle":
        return torch.randn(b, h, l, e, generator=g, dtype=dtype)
    if kind == "blhe":      # the usual heads split: (B, L, H, E) transposed
        return torch.randn(b, l, h, e, generator=g, dtype=dtype).transpose(1, 2)
    return torch.randn(b, h, l, 2 * e, generator=g, dtype=dtype)[..., ::2]     # sliced


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("qk", ["bhle", "blhe", "sliced"])
def test_sdpa_layouts_masks_and_shapes(qk, dtype):
    g = _g()
    for (b, h, l, s, e) in [(2, 4, 16, 16, 8), (2, 4, 16, 24, 8), (1, 1, 5, 7, 4), (2, 3, 1, 9, 8)]:
        q, k, v = (_qkv(qk, b, h, n, e, g, dtype) for n in (l, s, s))
        bias = torch.randn(b, 1, l, s, generator=g, dtype=dtype)
        keep = torch.rand(l, s, generator=g) > 0.3
        keep[:, 0] = True
        cases = [lambda q, k, v: F.scaled_dot_product_attention(q, k, v) * 2,
                 lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=l == s,
                                                                scale=0.3) + 1,
                 lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=bias) * 2,
                 lambda q, k, v: F.scaled_dot_product_attention(q, k, v, keep, 0.0) * 2]
        for fn in cases:
            _compiled_equals_eager(fn, q, k, v)
    # eager's math path (contiguous results): a head size of v's own, a strided last dim
    q, k = _qkv("blhe", 2, 4, 16, 8, g), _qkv("blhe", 2, 4, 16, 8, g)
    sdpa2 = lambda q, k, v: F.scaled_dot_product_attention(q, k, v) * 2
    _compiled_equals_eager(sdpa2, q, k, _qkv("blhe", 2, 4, 16, 12, g))
    _compiled_equals_eager(sdpa2, q, _qkv("sliced", 2, 4, 16, 8, g), k)
    _compiled_equals_eager(sdpa2, q, k, torch.randn(2, 12, 16, 4, generator=g).permute(0, 3, 2, 1))


def test_sdpa_errors_as_eager():
    from conftest import check_raises
    q = torch.randn(2, 4, 16, 8)
    check_raises(lambda q: F.scaled_dot_product_attention(q, q[..., :6], q), q)
    check_raises(lambda q: F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(3, 16)), q)
    check_raises(lambda q: F.scaled_dot_product_attention(q, q, q.double()), q)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_group_norm_and_normalize_layouts(dtype):
    g = _g()
    for x in _layouts4(2, 6, 5, 4, g):
        x = x.to(dtype)
        w, b = torch.randn(6, generator=g, dtype=dtype), torch.randn(6, generator=g, dtype=dtype)
        for groups in (1, 2, 3, 6):
            _compiled_equals_eager(lambda x, w, b, k=groups: F.group_norm(x, k, w, b) * 2, x, w, b)
        _compiled_equals_eager(lambda x: torch.group_norm(x, 3, None, None, 1e-3) + 1, x)
        for d in (1, -1, 0):
            _compiled_equals_eager(lambda x, d=d: F.normalize(x, dim=d) * 2, x)
        _compiled_equals_eager(lambda x: F.normalize(x, p=1.0, dim=2, eps=1e-3) + 1, x)
    x = torch.randn(2, 6, 5, generator=g, dtype=dtype)
    _compiled_equals_eager(lambda x: F.group_norm(x, 2) * 2, x)
    _compiled_equals_eager(lambda x: F.normalize(x) * 2, x)
    from conftest import check_raises
    check_raises(lambda x: F.group_norm(x, 4), x)         # 6 channels in 4 groups
    check_raises(lambda x: F.normalize(x, dim=3), x)


def test_cumsum_tril_triu_roll_layouts_and_dtypes():
    g = _g()
    for x in _layouts4(2, 3, 4, 5, g):
        for t in (x, (x * 3).long(), x > 0, (x * 3).int()):
            for d in (0, 2, -1):
                _compiled_equals_eager(lambda t, d=d: torch.cumsum(t, d) * 2, t)
            _compiled_equals_eager(lambda t: t.cumsum(dim=1) + 1, t)
            _compiled_equals_eager(lambda t: torch.tril(t) * 2, t)
            _compiled_equals_eager(lambda t: t.triu(1) * 2, t)
            _compiled_equals_eager(lambda t: torch.triu(t, diagonal=-1) * 2, t)
            _compiled_equals_eager(lambda t: torch.roll(t, 1, 2) * 2, t)
            _compiled_equals_eager(lambda t: t.roll((1, -2), (0, 3)) * 2, t)
            _compiled_equals_eager(lambda t: torch.roll(t, 3) * 2, t)
        _compiled_equals_eager(lambda x: torch.cumsum(x, 1, dtype=torch.float64) * 2, x)
        _compiled_equals_eager(lambda x: torch.cumsum((x * 3).int(), 1, dtype=torch.int64), x)
    from conftest import check_raises
    check_raises(lambda t: torch.tril(t), torch.randn(5))
    check_raises(lambda t: torch.cumsum(t, 2), torch.randn(3, 4))
    check_raises(lambda t: torch.roll(t, (1, 2), 0), torch.randn(3, 4))
    check_raises(lambda t: torch.roll(t, 1, 5), torch.randn(3, 4))


def test_addmm_cross_entropy_and_logsumexp():
    g = _g()
    a, b = torch.randn(5, 3, generator=g), torch.randn(3, 4, generator=g)
    for c in (torch.randn(4, generator=g), torch.randn(5, 4, generator=g),
              torch.randn(4, 5, generator=g).t(), torch.randn(1, 1, generator=g)):
        _compiled_equals_eager(lambda c, a, b: torch.addmm(c, a, b) * 2, c, a, b)
        _compiled_equals_eager(lambda c, a, b: torch.addmm(c, a.t().contiguous().t(), b,
                                                           beta=0.5, alpha=2) + 1, c, a, b)
    x = torch.randn(6, 10, generator=g)
    t = torch.randint(0, 10, (6,), generator=g)
    w = torch.rand(10, generator=g)
    _compiled_equals_eager(lambda x, t: F.cross_entropy(x, t) * 2, x, t)
    _compiled_equals_eager(lambda x, t, w: F.cross_entropy(x, t, w, reduction="sum",
                                                           label_smoothing=0.1) + 1, x, t, w)
    x3, t3 = torch.randn(2, 10, 3, generator=g), torch.randint(0, 10, (2, 3), generator=g)
    _compiled_equals_eager(lambda x, t: F.cross_entropy(x, t, ignore_index=1) * 2, x3, t3)
    _compiled_equals_eager(lambda x, t: F.cross_entropy(x, t, reduction="none") * 2, x3, t3)
    for x in _layouts4(2, 3, 4, 5, g):
        _compiled_equals_eager(lambda x: torch.logsumexp(x, -1) * 2, x)
        _compiled_equals_eager(lambda x: x.logsumexp((1, 2), keepdim=True) + 1, x)
    from conftest import check_raises
    check_raises(lambda a, b: torch.addmm(torch.randn(3), a, b), a, b)
    check_raises(lambda a, b: torch.addmm(torch.randn(4), a, b, 2), a, b)    # beta: keyword-only
    check_raises(lambda a: torch.cumsum(a, 1, torch.float64), a)           # dtype: keyword-only
    check_raises(lambda a: torch.gather(a, 1, torch.zeros(5, 1, dtype=torch.long), False), a)
    check_raises(lambda x, t: F.cross_entropy(x, t[:3]), torch.randn(6, 10), t)


def test_like_factories_layouts_and_dtypes():
    g = _g()
    xs = list(_layouts4(2, 3, 4, 5, g))
    for x in xs:
        for t in (x, (x * 3).long()):
            _compiled_equals_eager(lambda t: torch.zeros_like(t) + t, t)
            _compiled_equals_eager(lambda t: torch.ones_like(t, dtype=torch.float64) * 2, t)
            _compiled_equals_eager(lambda t: torch.full_like(t, 2.5) + t, t)
            _compiled_equals_eager(lambda t: torch.full_like(t, 3, dtype=torch.int32) * 2, t)
            _compiled_equals_eager(lambda t: torch.empty_like(t).fill_(1) * 2, t)
            _compiled_equals_eager(
                lambda t: torch.zeros_like(t, memory_format=torch.preserve_format) + 1, t)
            _compiled_equals_eager(    # another memory format: torch's meta
                lambda t: torch.ones_like(t, memory_format=torch.contiguous_format) + 1, t)
    from conftest import check_raises
    check_raises(lambda t: torch.zeros_like(t, torch.float64), xs[0])


def test_repeat_gather_and_avg_pool2d():
    g = _g()
    for x in _layouts4(2, 3, 8, 10, g):
        _compiled_equals_eager(lambda x: x.repeat(1, 2, 1, 1) * 2, x)
        _compiled_equals_eager(lambda x: x.repeat((2, 1, 1, 3)) + 1, x)
        _compiled_equals_eager(lambda x: x.repeat(2, 1, 1, 1, 1) * 2, x)
        for idx in (torch.randint(0, 10, (2, 3, 8, 4), generator=g),
                    torch.randint(0, 10, (2, 8, 3, 4), generator=g).transpose(1, 2),
                    torch.randint(0, 10, (1, 2, 5, 6), generator=g)):
            _compiled_equals_eager(lambda x, i: torch.gather(x, 3, i) * 2, x, idx)
            _compiled_equals_eager(lambda x, i: x.gather(-1, i) + 1, x, idx)
        _compiled_equals_eager(lambda x: torch.gather(x, 1, torch.zeros(2, 1, 8, 10,
                                                                         dtype=torch.long)), x)
        for args in ((2,), (3, 2, 1), ((3, 2), (2, 1), (1, 0), True), (2, None, 0, False, False),
                     (3, 1, 1, False, True, 2)):
            _compiled_equals_eager(lambda x, a=args: F.avg_pool2d(x, *a) * 2, x)
    _compiled_equals_eager(lambda x: F.avg_pool2d(x, 2) * 2, torch.randn(3, 8, 10, generator=g))
    from conftest import check_raises
    x = torch.randn(2, 3, 8, 10, generator=g)
    check_raises(lambda x: x.repeat(2, 2), x)                             # fewer sizes than dims
    check_raises(lambda x: torch.gather(x, 3, torch.zeros(2, 4, 8, 3, dtype=torch.long)), x)
    check_raises(lambda x: F.avg_pool2d(x, 2, padding=2), x)             # padding > kernel / 2


def test_these_ops_trace_without_torch_meta(tmp_path):
    # a fresh process compiles a function of all of them without importing
    # torch._dynamo or torch.fx's symbolic shapes (sympy)
    code = """
import sys, torch, cdynamo
import torch.nn.functional as F
torch.set_grad_enabled(False)
bn = torch.nn.BatchNorm2d(4).eval()
conv_w = torch.randn(5, 4, 3, 3)
def f(x, y, m):
    a = torch.cat([x, y], 1).clamp(-1, 1)
    b = torch.stack([x, y], 0).sum(0)
    c = F.adaptive_avg_pool2d(bn(a[:, :4]), 1)
    d = F.softmax(b, -1) + x.log_softmax(1)
    e = F.mse_loss(x, y) + F.smooth_l1_loss(x, y, reduction="sum") + F.l1_loss(x, y)
    h = F.max_pool2d(torch.relu(F.conv2d(x, conv_w, padding=1)), 2)
    k = F.embedding(m.flatten()[:6].long(), conv_w.flatten(1)) * 2
    r = x.var(-1) + x.std(1).sum() + x.norm(dim=-1) + (x > 0).any(-1).float() + x.flip(-1)[..., 0]
    q = x.flatten(2).transpose(1, 2).reshape(2, 36, 2, 2).transpose(1, 2)
    s = F.scaled_dot_product_attention(q, q, q, is_causal=True) * 2
    n = F.group_norm(x, 2) + F.normalize(y, dim=1) + torch.cumsum(x, 2) + torch.tril(y)
    o = torch.roll(x, 1, 3) + torch.logsumexp(y, -1, keepdim=True) + F.cross_entropy(
        x.flatten(2)[..., 0], m.flatten(1).sum(1) % 4) + torch.addmm(y[0, 0], x[0, 0], y[0, 1])
    p = (x.prod(1) + y.argmax(1), torch.argmin(x, 2, keepdim=True) * 2,
         torch.zeros_like(x) + torch.ones_like(y) * torch.full_like(x, 2) + x.repeat(1, 1, 1, 2)[..., :6],
         torch.gather(x, 3, m[:, :4].long()) + F.avg_pool2d(y, 2).sum())
    return a.masked_fill(m, 0.5) * 2, b + 1, c, d, e, h, k, r, s, n, o, *p
x, y = torch.randn(2, 4, 6, 6), torch.randn(2, 4, 6, 6)
m = torch.rand(2, 8, 6, 6) > 0.5
out = cdynamo.optimize(f)(x, y, m)
print("DYNAMO", "torch._dynamo" in sys.modules)
print("SYMPY", "torch.fx.experimental.symbolic_shapes" in sys.modules)
print("GRAPHS", len(cdynamo._support.compiles))
ref = f(x, y, m)
for o, r in zip(out, ref):
    torch.testing.assert_close(o, r)
    assert o.stride() == r.stride(), (o.stride(), r.stride())
"""
    r = run_python(code, cache_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "DYNAMO False" in r.stdout and "SYMPY False" in r.stdout, r.stdout
    assert "GRAPHS 1" in r.stdout, r.stdout


@pytest.mark.parametrize("base", [0, 2, 1.5, 1])
def test_pow_of_a_number_is_contiguous(base):
    """pow(number, x) / number ** x: eager allocates the result contiguous
    whatever x's layout (torch's pow.Scalar meta; fuzz finding 615464d610),
    also under autocast; pow(x, number) and x ** y keep x's layout."""
    g = _g()

    def fn(x, y):
        return base ** x, torch.pow(x, 2), x ** y, (base ** x).abs()
    for x in _layouts4(2, 3, 4, 5, g):
        y = torch.rand(x.shape, generator=g)
        for ac in (False, True):
            cdynamo.reset()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=ac):
                assert_same(fn(x, y), cdynamo.optimize(fn)(x, y), transcendental=True)


@pytest.mark.parametrize("name,fn", [
    ("clamp_min", lambda a, b: a.clamp_min(0.5)),
    ("clamp_max", lambda a, b: torch.clamp_max(a, float("inf"))),
    ("addcdiv_value", lambda a, b: torch.addcdiv(a, b, a, value=0.5)),
    ("addcmul_value", lambda a, b: torch.addcmul(a, b, a, value=2)),
    ("lerp_number", lambda a, b: torch.lerp(a, b, 0.25)),
    ("lerp_method", lambda a, b: a.lerp(b, 0.25)),
    ("xlogy_number", lambda a, b: torch.xlogy(a, 2.0)),
    ("copysign_number", lambda a, b: torch.copysign(a, -1.0)),
    ("add_number", lambda a, b: a + 1),
])
def test_number_parameters_are_not_operands_of_the_layout(name, fn):
    """A (1, 1, 6) input of strides (1, 1, 1) is contiguous: an op whose number is a
    parameter of eager's iterator (clamp_min's bound, addcdiv's value=, lerp's weight)
    allocates its result contiguous (6, 6, 1); one whose number is a wrapped operand (a + 1,
    xlogy, copysign) orders the strides and keeps (1, 1, 1). Found by the fuzzer: the
    two differed, and a later broadcast op took the other layout."""
    a = torch.randn(6, 1, 1, generator=_g(), dtype=torch.float64).permute(2, 1, 0)
    b = torch.randn(1, 1, 6, generator=_g(), dtype=torch.float64)
    cdynamo.reset()
    assert_same(fn(a, b), cdynamo.optimize(fn)(a, b))


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_fast_path_layouts_and_dtypes(norm_first):
    """nn.TransformerEncoderLayer's eval fast path (torch._transformer_encoder_layer_fwd,
    taken under no_grad): CPU's kernel allocates its result contiguous whatever src's layout
    (torch 2.13's meta keeps src's layout: a stride read of it was wrong); torch 2.11 has no
    meta for it (its trace stopped there, and a batch sweep compiled once per size)."""
    g = _g()
    torch.manual_seed(0)
    with torch.no_grad():
        for dtype in (torch.float32, torch.float64):
            layer = torch.nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True,
                                                     norm_first=norm_first,
                                                     activation="gelu").eval().to(dtype)
            xs = (torch.randn(2, 5, 16, generator=g, dtype=dtype),
                  torch.randn(5, 2, 16, generator=g, dtype=dtype).transpose(0, 1),
                  torch.randn(2, 16, 5, generator=g, dtype=dtype).transpose(1, 2),
                  torch.randn(2, 5, 32, generator=g, dtype=dtype)[..., ::2])
            for x in xs:
                _compiled_equals_eager(lambda x: (layer(x) * 2, layer(x).stride()), x)
                _compiled_equals_eager(lambda x: layer(x).view(-1, 16) + 1, x)
            mask = torch.tensor([[False] * 5, [False, False, False, True, True]])
            _compiled_equals_eager(lambda x, m: layer(x, src_key_padding_mask=m) * 2, xs[1],
                                   mask)
