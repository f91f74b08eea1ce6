# cdynamo fuzz finding (tools/fuzz.py), family train, wrong
# signature: wrong/grads/*+layer_norm
# wrong: grads: values: grad of input 0: 1/2 differ, at [0, 0]: eager 0.0, cdynamo -0.0 (torch.float32)
import math
import torch
import torch.nn.functional as F

nan, inf = math.nan, math.inf
_SPECIAL = [nan, -nan, inf, -inf, -0.0, 0.0, 1e-30, -1e-30, 1e30, -1e30, 3.4e38, 1e-40,
            5e-324, 1e300, 65504.0, 6e-8, 1.0, -1.0, 0.5, 2.5, -2.5]
# quiet NaNs with payload bits, positive and negative (signalling NaNs are left out: what
# pow(sNaN, 0) and the like give is up to the C library)
_NAN_BITS = {torch.float32: (torch.int32, [0x7fc00001, 0x7fc12345, -0x3fffff, 0x7fffffff]),
             torch.float64: (torch.int64, [0x7ff8000000000001, 0x7ff8000000000123,
                                           -0x7ffffffffffff]),
             torch.float16: (torch.int16, [0x7e01, 0x7fff, -0x1ff]),
             torch.bfloat16: (torch.int16, [0x7fc1, 0x7fff, -0x3f])}


def _fill(g, dtype, shape, kind="normal", lo=-12, hi=13):
    """A reproducible tensor: kind normal, special (NaNs with payloads and sign, inf,
    -0.0, huge, tiny, integer extremes), index (integers in [lo, hi)) or perm
    (distinct integers in [0, hi), 1-D)."""
    if kind == "index":
        return torch.randint(lo, hi, shape, generator=g).to(dtype)
    if kind == "perm":
        return torch.randperm(hi, generator=g)[:shape[0]].to(dtype)
    if kind == "const":     # every element the same (rows: a variance of 0)
        v = [0.7, -3.3, 1e-3, 1e4, 0.0][int(torch.randint(0, 5, (), generator=g))]
        return torch.full(shape, v, dtype=torch.float64).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * 3
        if kind == "special":
            pick = torch.randint(0, len(_SPECIAL), shape, generator=g)
            x = torch.where(torch.rand(shape, generator=g) < 0.4,
                            torch.tensor(_SPECIAL, dtype=torch.float64)[pick], x)
        if dtype.is_complex:
            x = torch.complex(x, torch.randn(shape, generator=g, dtype=torch.float64))
        x = x.to(dtype)
        if kind == "special" and dtype in _NAN_BITS:
            bits, pats = _NAN_BITS[dtype]
            pick = torch.randint(0, len(pats), shape, generator=g)
            m = torch.rand(shape, generator=g) < 0.15
            xb = x.view(bits)
            xb[m] = torch.tensor(pats, dtype=bits)[pick][m]
        return x
    info = torch.iinfo(dtype)
    x = torch.randint(max(lo, info.min, -100), min(hi, info.max, 100), shape, generator=g)
    if kind == "special":
        ext = torch.tensor([info.min, info.max, 0, 1, info.max - 1, info.min + 1, -1 if info.min else 2])
        pick = torch.randint(0, len(ext), shape, generator=g)
        x = torch.where(torch.rand(shape, generator=g) < 0.4, ext[pick], x)
    return x.to(dtype)


def make_inputs():
    g = torch.Generator().manual_seed(845315847)
    a0 = _fill(g, torch.float32, (4, 1))[2:].requires_grad_()
    return [a0]


def f(a0):
    t0 = F.layer_norm(a0, (1,))
    t1 = t0 * t0
    return t1


META = {'family': 'train', 'train': True}


def test_case():
    import os, sys
    root = os.path.dirname(os.path.abspath(__file__))
    while root != '/' and not os.path.exists(os.path.join(root, 'tools', 'fuzz.py')):
        root = os.path.dirname(root)
    if root == '/':   # outside a checkout: $CDYNAMO_ROOT, else where it was found
        root = os.environ.get('CDYNAMO_ROOT', '/work/main')
    sys.path.insert(0, os.path.join(root, 'tools'))
    import fuzz
    with open(__file__) as fh:
        status, detail = fuzz.check_program(fh.read(), META)
    assert status in ('ok', 'fallback', 'raises'), detail


if __name__ == '__main__':
    test_case()
    print('ok')
