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
