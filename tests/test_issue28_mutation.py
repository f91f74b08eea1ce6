"""Issue 28, mutation items: in-place writes through views of inputs with a
storage offset (7), outputs that view mutated inputs (8), metadata-only
in-place ops (12), inputs' state after an exception (13), can_cast for
in-place ops and out= (19), in-place ops on expanded inputs (20)."""
import operator

import pytest
import torch

import cdynamo

BACKENDS = ["c", "eager"]


def _call(fn, args):
    try:
        return fn(*args), None
    except Exception as e:   # noqa: BLE001 - compared with eager's below
        return None, e


def check_exc_and_inputs(f, make, backend="c"):
    """f on fresh inputs eagerly and compiled: the same exception type and
    message (or none), inputs left identical (values, strides, storage)."""
    cdynamo.reset()
    a1 = make()
    a2 = [a.clone() if isinstance(a, torch.Tensor) else a for a in a1]
    r1, e1 = _call(f, a1)
    r2, e2 = _call(cdynamo.optimize(f, backend=backend), a2)
    assert type(e1) is type(e2), (e1, e2)
    assert str(e1) == str(e2)
    for p, q in zip(a1, a2):
        if isinstance(p, torch.Tensor):
            torch.testing.assert_close(q, p, rtol=0, atol=0, equal_nan=True)
            assert p.stride() == q.stride()
    if e1 is None:
        torch.testing.assert_close(r2, r1, equal_nan=True)
    return r1, r2


# ---- item 13: inputs' state after an exception inside the compiled graph ----

def _floordiv(x, d):
    x.mul_(2)
    return x // d


def _floordiv_then_mutate(x, d):
    x.mul_(2)
    y = x // d
    x.add_(1)
    return y


def _mod_tuple(x, d):
    x.mul_(2)
    return x % d, 1          # not the graph's outputs as they come: the frame path


def _index_oob(x, i):
    x.mul_(2)
    y = x[i]
    x.add_(1)
    return y


def _index_select_oob(x, i):
    x.mul_(2)
    y = x.index_select(0, i) + 1
    x.add_(1)
    return y


def _gather_oob(x, i):
    x.mul_(2)
    y = torch.gather(x, 0, i)
    x.add_(1)
    return y.sum()


def _two_inputs(x, y, d):
    x.add_(1)
    z = y.mul_(3) // d
    return z, x


EXC_CASES = {
    "floordiv0": (_floordiv, lambda: [torch.arange(1, 5), torch.tensor([1, 0, 1, 1])]),
    "floordiv0_after": (_floordiv_then_mutate, lambda: [torch.arange(1, 5), torch.tensor([1, 0, 1, 1])]),
    "mod0_frame": (_mod_tuple, lambda: [torch.arange(1, 5), torch.tensor([1, 0, 1, 1])]),
    "index_oob": (_index_oob, lambda: [torch.arange(1.0, 5), torch.tensor([7])]),
    "index_select_oob": (_index_select_oob, lambda: [torch.arange(1.0, 5), torch.tensor([7])]),
    "gather_oob": (_gather_oob, lambda: [torch.arange(1.0, 5), torch.tensor([9])]),
    "two_inputs": (_two_inputs, lambda: [torch.arange(4.0), torch.arange(1, 5), torch.tensor([1, 0, 2, 1])]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(EXC_CASES))
def test_inputs_after_exception_are_eagers(name, backend):
    f, make = EXC_CASES[name]
    check_exc_and_inputs(f, make, backend)
    assert cdynamo.stats()["eager_reruns"] == 1


def test_exception_rerun_then_compiled_again():
    f = cdynamo.optimize(_floordiv)
    x = torch.arange(1, 5)
    with pytest.raises(RuntimeError):
        f(x, torch.tensor([1, 0, 1, 1]))
    assert x.tolist() == [2, 4, 6, 8]
    assert f(x, torch.tensor([1, 2, 3, 4])).tolist() == [4, 4, 4, 4]
    assert x.tolist() == [4, 8, 12, 16]
    st = cdynamo.stats()
    assert st["eager_reruns"] == 1 and st["frames_compiled"] == 1, st


# ---- item 19: eager's can_cast rule for in-place ops and out= ----

def _iadd_float(x):
    x += 1.5
    return x


def _slice_iadd_float(x):
    x[1:3] += 1.5
    return x


def _setitem_float(x):
    x[0] = 2.5
    return x


u8 = lambda: torch.arange(5, dtype=torch.uint8)   # noqa: E731
i64 = lambda: torch.arange(5)                        # noqa: E731
f32 = lambda: torch.arange(5.0)                      # noqa: E731
b8 = lambda: torch.tensor([True, False, True, False, True])   # noqa: E731

CAST_CASES = {
    "u8_mul_tensor_float": (lambda x: x.mul_(torch.tensor(2.5)), lambda: [u8()]),
    "u8_mul_float": (lambda x: x.mul_(2.5), lambda: [u8()]),
    "u8_add_f32": (lambda x, y: x.add_(y), lambda: [u8(), f32()]),
    "i64_div": (lambda x: x.div_(2), lambda: [i64()]),
    "i64_sqrt": (lambda x: x.sqrt_(), lambda: [i64()]),
    "i64_clamp_float": (lambda x: x.clamp_(min=0.5), lambda: [i64()]),
    "i64_pow_float": (lambda x: x.pow_(2.5), lambda: [i64()]),
    "i64_sigmoid": (lambda x: x.sigmoid_(), lambda: [i64()]),
    "i64_iadd_float": (_iadd_float, lambda: [i64()]),
    "i64_operator_iadd": (lambda x: operator.iadd(x, 1.5), lambda: [i64()]),
    "i64_slice_iadd_float": (_slice_iadd_float, lambda: [i64()]),
    "bool_add_int": (lambda x: x.add_(1), lambda: [b8()]),
    "out_mul_float": (lambda x, y: torch.mul(x, 2.5, out=y), lambda: [i64(), i64()]),
    "out_add_f32_into_i64": (lambda x, y: torch.add(x, y, out=y), lambda: [f32(), i64()]),
    # the casts eager allows
    "u8_mul_int": (lambda x: x.mul_(2), lambda: [u8()]),
    "i64_div_floor": (lambda x: x.div_(2, rounding_mode="floor"), lambda: [i64()]),
    "bool_logical_and": (lambda x, y: x.logical_and_(y), lambda: [b8(), b8()]),
    "f32_lt": (lambda x, y: x.lt_(y), lambda: [f32(), f32().flip(0)]),
    "i64_copy_f32": (lambda x, y: x.copy_(y), lambda: [i64(), f32() + 0.5]),
    "i64_fill_float": (lambda x: x.fill_(2.5), lambda: [i64()]),
    "i64_fill_tensor_float": (lambda x: x.fill_(torch.tensor(2.5)), lambda: [i64()]),
    "torch_fill_float": (lambda x: torch.fill_(x, 2.5), lambda: [i64()]),
    "i64_setitem_float": (_setitem_float, lambda: [i64()]),
    "out_add_i64_into_f32": (lambda x, y: torch.add(x, y, out=y), lambda: [i64(), f32()]),
    "f32_mul_f64": (lambda x, y: x.mul_(y), lambda: [f32(), f32().double()]),
}


@pytest.mark.parametrize("name", sorted(CAST_CASES))
def test_inplace_can_cast(name):
    f, make = CAST_CASES[name]
    r1, r2 = check_exc_and_inputs(f, make)
    if r1 is not None:
        assert r1.dtype == r2.dtype


# ---- item 7: in-place writes through a view of an input with a storage offset ----

def _fill_slice(x):
    t = x[:, 1:]
    t.fill_(-1.0)
    return x.sum()


def _step_mul(x):
    t = x[:, ::2]
    t.mul_(-1.0)
    return x * 2


def _t_row_add(x):
    t = x.t()[1]
    t.add_(10)
    return x + 0


def _two_views(x):
    t = x[1]
    t.add_(10)
    u = x[:, 0]
    u.mul_(2)
    return x + 0, t + 0, u + 0


def _flat_zero(x):
    y = x.view(-1)
    y[3:5].zero_()
    return x.sum(0)


def _mutate_then_view(x):
    x.add_(1)
    t = x[:, 1:]
    t.mul_(3)
    return x + 1


def _copy_then_mul(x):
    t = x[1:, 1:]
    t.copy_(torch.ones(1, 2))
    x.mul_(2)
    return t * 1


def _setitem_row(x):
    x[0, 1:] = 7.0
    return x.sum()


def _col_iadd(x):
    x[:, 1] += 5
    return x + 1


def _unsqueeze_view(x):
    v = x.unsqueeze(0)[:, :, 1]
    v.sub_(4)
    return x * 1


OFFSET_CASES = {f.__name__: f for f in (_fill_slice, _step_mul, _t_row_add, _two_views, _flat_zero,
                                       _mutate_then_view, _copy_then_mul, _setitem_row, _col_iadd,
                                       _unsqueeze_view)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("offset", [1, 7, 20])
@pytest.mark.parametrize("name", sorted(OFFSET_CASES))
def test_write_through_view_of_offset_input(name, offset, backend):
    f = OFFSET_CASES[name]
    b1 = torch.arange(40.0)
    b2 = b1.clone()
    e = f(b1[offset:offset + 6].view(2, 3))
    c = cdynamo.optimize(f, backend=backend)(b2[offset:offset + 6].view(2, 3))
    torch.testing.assert_close(c, e, rtol=0, atol=0)
    torch.testing.assert_close(b2, b1, rtol=0, atol=0)   # the base storage: the same elements written
    assert cdynamo.stats()["graph_breaks"] == 0


# ---- item 20: in-place ops on expanded (stride 0) inputs ----

def _squeeze_(x):
    x.squeeze_()
    return x + 1


def _setitem0(x):
    x[0] = 5.0
    return x + 1


def _index_fill_(x):
    x.index_fill_(1, torch.tensor([1]), 2.0)
    return x + 1


def _masked_fill_(x):
    x.masked_fill_(torch.tensor([True, False, True, False]), 2.0)
    return x + 1


def _add_(x):
    x.add_(1)
    return x


def _row_iadd(x):
    x[1] += 1
    return x * 2


def _expand_intermediate(x):
    y = x.expand(3, 4)
    y[0] = 5.0
    return x + 1, y * 1


EXPAND_CASES = {f.__name__: f for f in (_squeeze_, _setitem0, _index_fill_, _masked_fill_, _add_,
                                       _row_iadd, _expand_intermediate)}


@pytest.mark.filterwarnings("ignore:Use of .* on expanded tensors is deprecated")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(EXPAND_CASES))
def test_inplace_on_expanded_input(name, backend):
    f = EXPAND_CASES[name]
    base1 = torch.randn(1, 4)
    base2 = base1.clone()
    shape = (1, 4) if f is _expand_intermediate else (3, 4)
    x1, x2 = base1.expand(*shape), base2.expand(*shape)
    r1, e1 = _call(f, [x1])
    r2, e2 = _call(cdynamo.optimize(f, backend=backend), [x2])
    assert type(e1) is type(e2) and str(e1) == str(e2), (e1, e2)
    torch.testing.assert_close(base2, base1, rtol=0, atol=0)
    assert x1.shape == x2.shape and x1.stride() == x2.stride()
    if e1 is None:
        torch.testing.assert_close(r2, r1, rtol=0, atol=0)


# ---- item 12: metadata-only in-place ops change strides, not the storage ----

def _t_(x):
    x.t_()
    return x + 0


def _t_ret(x):
    return x.t_()


def _t_twice(x):
    x.t_()
    x.t_()
    return x + 0


def _transpose_(x):
    x.transpose_(0, 1)
    return x * 2


def _swapdims_(x):
    x.swapdims_(0, 1)
    return x * 2


def _unsqueeze_(x):
    x.unsqueeze_(1)
    return x * 2


def _squeeze_all(x):
    x.squeeze_()
    return x * 2


def _squeeze_dim(x):
    x.squeeze_(1)
    return x * 2


def _t_then_add(x):
    x.t_()
    x.add_(torch.arange(3.0))
    return x * 1


def _add_then_t(x):
    x.add_(torch.arange(3.0))
    x.t_()
    return x * 1


def _t_then_row_fill(x):
    x.t_()
    x[0].fill_(-1)
    return x * 1


def _view_then_t_then_write_view(x):
    v = x[0]
    x.t_()
    v.mul_(10)
    return x + 0, v + 0


def _intermediate_view_t_(x):
    y = x + 1
    z = y[0]
    y.t_()
    z.add_(5)
    return y, z


def _t_returns_x(x):
    x.t_()
    return x, x.sum()


def _t_3d(x):
    return x.t_()


def _resize_(x):
    x.resize_(2, 2)
    return x + 1


def _as_strided_(x):
    x.as_strided_((2, 2), (1, 2))
    return x + 1


SQ = lambda b: b[:9].view(3, 3)              # noqa: E731
OFF = lambda b: b[5:17].view(3, 4)           # noqa: E731
ONE = lambda b: b[5:17].view(3, 1, 4)        # noqa: E731
META_CASES = {
    "t_": (_t_, SQ), "t_offset": (_t_, OFF), "t_ret": (_t_ret, SQ), "t_twice": (_t_twice, SQ),
    "transpose_": (_transpose_, OFF), "swapdims_": (_swapdims_, OFF),
    "unsqueeze_": (_unsqueeze_, OFF), "squeeze_all": (_squeeze_all, ONE),
    "squeeze_dim": (_squeeze_dim, ONE), "t_then_add": (_t_then_add, SQ),
    "add_then_t": (_add_then_t, SQ), "t_then_row_fill": (_t_then_row_fill, OFF),
    "view_t_write_view": (_view_then_t_then_write_view, OFF),
    "intermediate_view_t_": (_intermediate_view_t_, OFF), "t_returns_x": (_t_returns_x, SQ),
    "t_3d_raises": (_t_3d, lambda b: b[:8].view(2, 2, 2)),
    "resize_": (_resize_, SQ), "as_strided_": (_as_strided_, SQ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(META_CASES))
def test_metadata_inplace_ops(name, backend):
    f, mk = META_CASES[name]
    b1 = torch.arange(60.0)
    b2 = b1.clone()
    x1, x2 = mk(b1), mk(b2)
    r1, e1 = _call(f, [x1])
    r2, e2 = _call(cdynamo.optimize(f, backend=backend), [x2])
    assert type(e1) is type(e2) and str(e1) == str(e2), (e1, e2)
    torch.testing.assert_close(b2, b1, rtol=0, atol=0)     # the storage: untouched, or eager's writes
    assert (x2.shape, x2.stride(), x2.storage_offset()) == (x1.shape, x1.stride(), x1.storage_offset())
    if e1 is None:
        o1 = r1 if isinstance(r1, tuple) else (r1,)
        o2 = r2 if isinstance(r2, tuple) else (r2,)
        for p, q in zip(o1, o2):
            torch.testing.assert_close(q, p, rtol=0, atol=0)
            assert q.stride() == p.stride()
            assert (p is x1) == (q is x2)
    if name not in ("resize_", "as_strided_", "t_3d_raises"):
        assert cdynamo.stats()["graph_breaks"] == 0


def test_t_square_input_repeated_calls_follow_its_strides():
    f = cdynamo.optimize(_t_)
    x = torch.arange(9.0).view(3, 3)
    y = x.clone()
    for _ in range(3):
        torch.testing.assert_close(f(x), _t_(y))
        assert x.stride() == y.stride()
    torch.testing.assert_close(x, y)


# ---- item 8: outputs that eager returns as views of (mutated) inputs ----

def _add_then_slice(x):
    x.add_(1)
    return x[1:]


def _view_before_add(x):
    v = x[:, 1]
    x.add_(1)
    return v


def _add_then_t(x):
    x.add_(1)
    return x.t()


def _add_then_view_of_view(x):
    x.add_(1)
    return x[1:][:, ::2]


def _mul_ret_x_and_row(x):
    x.mul_(2)
    return x, x[0]


def _write_row_ret_row(x):
    return x[1].add_(5)


def _write_row_ret_other_row(x):
    x[1].add_(5)
    return x[0]


def _add_then_reshape(x):
    x.add_(1)
    return x.reshape(-1)


def _t_add_row(x):
    x.t_()
    x.add_(1)
    return x[0]


def _add_then_unsqueeze_and_new(x):
    x.add_(1)
    return x.unsqueeze(0), x + 1


def _add_then_expand(x):
    x.add_(1)
    return x[0:1].expand(2, 4)


def _setitem_then_slice(x):
    x[0] = 7.0
    return x[:2]


def _add_then_int_view(x):
    x.add_(1)
    return x.view(torch.int32)


VIEW_OUT_CASES = {f.__name__: f for f in (
    _add_then_slice, _view_before_add, _add_then_t, _add_then_view_of_view, _mul_ret_x_and_row,
    _write_row_ret_row, _write_row_ret_other_row, _add_then_reshape, _t_add_row,
    _add_then_unsqueeze_and_new, _add_then_expand, _setitem_then_slice, _add_then_int_view)}
LAYOUTS = {
    "contig": lambda b: b[:12].view(3, 4),
    "offset": lambda b: b[7:19].view(3, 4),
    "step": lambda b: b[3:27:2].view(3, 4),
    "transposed": lambda b: b[5:17].view(4, 3).t(),
}


def _shares(t, b):
    return t.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("name", sorted(VIEW_OUT_CASES))
def test_outputs_view_mutated_inputs(name, layout, backend):
    f, mk = VIEW_OUT_CASES[name], LAYOUTS[layout]
    if f is _add_then_int_view and layout in ("step", "transposed"):
        pytest.skip("eager refuses the dtype view of this layout")
    b1 = torch.arange(60.0)
    b2 = b1.clone()
    x1, x2 = mk(b1), mk(b2)
    r1 = f(x1)
    r2 = cdynamo.optimize(f, backend=backend)(x2)
    torch.testing.assert_close(b2, b1, rtol=0, atol=0)
    o1 = r1 if isinstance(r1, tuple) else (r1,)
    o2 = r2 if isinstance(r2, tuple) else (r2,)
    for p, q in zip(o1, o2):
        torch.testing.assert_close(q, p, rtol=0, atol=0)
        assert q.stride() == p.stride() and q.dtype == p.dtype
        assert _shares(q, b2) == _shares(p, b1)
        if _shares(p, b1):
            assert q.storage_offset() == p.storage_offset()
        assert (q is x2) == (p is x1)
        assert (q._base is x2) == (p._base is x1) and (q._base is b2) == (p._base is b1)
    for p, q in zip(o1, o2):   # a later write through an output shows in the input's storage
        p.as_strided((1,), (1,)).add_(100)
        q.as_strided((1,), (1,)).add_(100)
    torch.testing.assert_close(b2, b1, rtol=0, atol=0)


def test_closure_tensor_mutated_and_returned_with_a_view():
    def make():
        x = torch.arange(6.0)

        def f(y):
            x.add_(y)
            return x, x[1:]
        return f, x
    f1, a = make()
    f2, b = make()
    e = f1(torch.ones(6))
    c = cdynamo.optimize(f2)(torch.ones(6))
    assert e[0] is a and c[0] is b
    assert c[1]._base is b
    torch.testing.assert_close(b, a)
    torch.testing.assert_close(c[1], e[1])


def test_module_buffer_mutated_and_returned_with_a_view():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", torch.zeros(4))

        def forward(self, x):
            self.buf.add_(x)
            return self.buf[1:], self.buf

    m1, m2 = M(), M()
    e = m1(torch.ones(4))
    c = cdynamo.optimize(m2)(torch.ones(4))
    assert e[0]._base is m1.buf and c[0]._base is m2.buf and c[1] is m2.buf
    c[0].fill_(5)
    e[0].fill_(5)
    torch.testing.assert_close(m2.buf, m1.buf)


def test_extern_raising_at_run_time_leaves_eagers_mutations():
    def f(x, y):
        x.mul_(2)
        return torch.linalg.cholesky(y) + x.sum()

    check_exc_and_inputs(f, lambda: [torch.arange(4.0), -torch.eye(3)])
    assert cdynamo.stats()["eager_reruns"] == 1


def _codes(f, *args):
    n = len(cdynamo._support.breaks)
    try:
        cdynamo.optimize(f)(*args)
    except RuntimeError:
        pass
    return [b["code"] for b in cdynamo._support.breaks[n:]]


def test_mutation_stop_codes():
    assert "MUT_CAST" in _codes(lambda x: x.mul_(2.5), u8())
    assert "MUT_OVERLAP" in _codes(_setitem0, torch.randn(1, 4).expand(3, 4))
    assert "MUT_VIEW_LAYOUT" in _codes(_add_then_slice, torch.arange(24.0)[::2].view(3, 4))


@pytest.mark.parametrize("backend", BACKENDS)
def test_rerun_after_exception_draws_eagers_random_numbers(backend):
    def f(x, d):
        y = torch.randint(0, 5, (3,))
        x.mul_(2)
        return (x + y) // d

    opt = cdynamo.optimize(f, backend=backend)
    opt(torch.arange(3), torch.tensor([1, 1, 2]))   # compiled, no exception
    d = torch.tensor([1, 0, 2])
    x1, x2 = torch.arange(3), torch.arange(3)
    torch.manual_seed(1)
    with pytest.raises(RuntimeError):
        f(x1, d)
    after_eager = torch.rand(4)
    torch.manual_seed(1)
    with pytest.raises(RuntimeError):
        opt(x2, d)
    torch.testing.assert_close(torch.rand(4), after_eager)
    torch.testing.assert_close(x2, x1)
    assert cdynamo.stats()["eager_reruns"] == 1


def test_t_on_module_buffer_and_closure_tensor():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", torch.arange(6.0).view(2, 3))

        def forward(self, x):
            self.buf.t_()
            return self.buf + x

    m1, m2 = M(), M()
    torch.testing.assert_close(cdynamo.optimize(m2)(torch.ones(3, 2)), m1(torch.ones(3, 2)))
    assert m2.buf.stride() == m1.buf.stride() == (1, 3)

    def make():
        x = torch.arange(6.0).view(2, 3)

        def f(y):
            x.t_()
            return x + y
        return f, x
    (f1, a), (f2, b) = make(), make()
    torch.testing.assert_close(cdynamo.optimize(f2)(torch.ones(3, 2)), f1(torch.ones(3, 2)))
    assert a.stride() == b.stride() == (1, 3)
    assert cdynamo.stats()["graph_breaks"] == 0


def test_exception_rerun_with_keyword_arguments():
    opt = cdynamo.optimize(_floordiv)
    x1, x2 = torch.arange(1, 5), torch.arange(1, 5)
    opt(x2, d=torch.tensor([1, 2, 3, 4]))
    _floordiv(x1, d=torch.tensor([1, 2, 3, 4]))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        opt(x2, d=torch.tensor([1, 0, 1, 1]))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        _floordiv(x1, d=torch.tensor([1, 0, 1, 1]))
    torch.testing.assert_close(x2, x1)
    assert cdynamo.stats()["eager_reruns"] == 1


def _setitem_mask(x):
    t = torch.cosh(x)
    t[t > 1.5] = 0.0
    return t


LAYOUT_CASES = {
    "setitem_mask": _setitem_mask,
    "masked_fill_": lambda x: (x * 2).masked_fill_(x > 0.5, 0.0),
    "masked_fill_then_add": lambda x: (x * 2).masked_fill_(x > 0.5, 0.0) + 1,
    "copy_": lambda x: (x * 2).copy_(torch.ones(3, 4)),
    "scatter_": lambda x: (x * 2).scatter_(1, torch.zeros(3, 1, dtype=torch.long), 9.0),
    "add_": lambda x: (x * 2).add_(torch.ones(3, 4)),
    "input_masked_fill_": lambda x: x.masked_fill_(x > 0, 1.0) * 1,
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(LAYOUT_CASES))
def test_inplace_keeps_the_layout_of_its_tensor(name, backend):
    # an in-place op keeps its tensor's strides; the out-of-place op it becomes may not
    # (masked_fill, copy_, scatter give a contiguous result): t[t < 0] = v on a permuted
    # intermediate came back contiguous (fuzz seed 9104, inplace_wrong_6bd343e76d)
    f = LAYOUT_CASES[name]
    x1 = torch.randn(4, 3).t()
    x2 = x1.clone().t().contiguous().t()
    expected = f(x1)
    actual = cdynamo.optimize(f, backend=backend)(x2)
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)
    assert actual.stride() == expected.stride() == (1, 3)
    torch.testing.assert_close(x2, x1, rtol=0, atol=0)
    assert cdynamo.stats()["frames_compiled"] == 1
