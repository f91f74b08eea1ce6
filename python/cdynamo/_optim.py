"""Optimizer steps inside a trace (issue 34): what torch.optim's step functions call, as
Python the tracer inlines (trace/build_optim.c routes the calls here), so that the step's
arithmetic becomes pointwise graph nodes that fuse, instead of externs or breaks.

- torch._foreach_<op>(tensors, ...) is the per-tensor op over the list (eager's meaning:
  a list of tensors, a list of scalars, one scalar, or one 0-dim tensor for every item).
- torch.optim's _get_value(step_t) (eager: step_t.item(), a Python float): a float64
  0-dim tensor, so the bias corrections are eager's double arithmetic, as graph nodes.
- Tensor.addcdiv_ (value a number or a 0-dim tensor: under a compiler torch.optim
  keeps the step count a tensor, _get_value) and addcmul_ with a 0-dim tensor value:
  as ATen's CPU kernels compute them, in pointwise ops (addcdiv bit for bit).
  lerp_ / add_ with a number alpha other than 1 stay torch's kernels (see METHODS);
  add / sub (and in place) of float32 with a 0-dim tensor alpha (SGD's add_(grad,
  alpha=-lr) with a tensor lr) are eager's fma, computed in float64 (_fma_alpha).
Anything else falls back to the op itself (an extern, or a recorded break).  Calls made
by this file's own code are not routed again (its fallbacks are the ops themselves).
Nothing here runs on the per-call path: the tracer reads it while tracing."""
import functools

import torch

_T = torch.Tensor


def _at(o, i):
    """Item i of a foreach operand: of a list/tuple, else the operand itself."""
    if isinstance(o, (list, tuple)):
        return o[i]
    return o


def _scalar_at(o, i):
    """Item i of a foreach `scalars` operand, which may also be a 1-D tensor."""
    if isinstance(o, (list, tuple)):
        return o[i]
    if isinstance(o, _T) and o.dim() == 1:
        return o[i]
    return o


def _same_float(*ts):
    """All tensors of one floating dtype (the decompositions keep eager's dtype then)."""
    d = ts[0].dtype
    if not d.is_floating_point:
        return False
    for t in ts:
        if t.dtype != d:
            return False
    return True


def _number_or_scalar_tensor(v, dtype):
    """v is a Python number, or a 0-dim tensor of dtype or float64 (a number kept as a
    tensor: _get_value's)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return True
    return isinstance(v, _T) and v.dim() == 0 and (v.dtype == dtype or v.dtype == torch.float64)


def _scalar(v, dtype):
    """v as eager's kernels use a Python number: cast to the tensor's dtype first."""
    return v.to(dtype) if isinstance(v, _T) else v


def get_value(x):
    """torch.optim's _get_value: eager reads the step count as a Python float
    (x.item()); traced, a float64 0-dim tensor, so the bias corrections are computed in
    double as eager's are, and the graph does not depend on the count's value."""
    if isinstance(x, _T):
        return x.to(torch.float64)
    return x


class _FloatAsTensor:
    """FLOAT_AS_TENSOR[x]: float x as a 0-dim float64 tensor, the last step of the source
    of an optimizer's lr that a scheduler changes (trace/build_optim.c: a graph input read
    per call; the source's step checks that x is a float, frame/guards.c).  A partial of
    torch's C function, so that no Python frame runs (the frame hook would catch it)."""
    __slots__ = ()
    __getitem__ = functools.partial(torch.scalar_tensor, dtype=torch.float64)

    def __repr__(self):
        return "cdynamo._optim.FLOAT_AS_TENSOR"


FLOAT_AS_TENSOR = _FloatAsTensor()


def lr_input_ok(opt, group):
    """Whether the step of optimizer opt for param group `group` takes its lr as a 0-dim
    tensor with eager's results (read while tracing): SGD (for-loop and foreach paths),
    Adam / AdamW on the for-loop path (foreach False or None: the CPU's default; their
    foreach path raises for a tensor lr unless capturable).  Others keep a float lr a
    guarded constant."""
    if type(opt) is torch.optim.SGD:
        return True
    if type(opt) in (torch.optim.Adam, torch.optim.AdamW):
        return group.get("foreach") is not True and not group.get("capturable") and \
            not group.get("fused") and not group.get("differentiable")
    return False


# ---- Tensor methods --------------------------------------------------------------

def addcdiv_(self, tensor1, tensor2, value=1):
    if isinstance(tensor1, _T) and isinstance(tensor2, _T) and \
            _same_float(self, tensor1, tensor2) and _number_or_scalar_tensor(value, self.dtype):
        return self.add_(_scalar(value, self.dtype) * tensor1 / tensor2)   # ATen: self + value * t1 / t2
    return self.addcdiv_(tensor1, tensor2, value=value)


def addcmul_(self, tensor1, tensor2, value=1):
    if isinstance(value, _T) and isinstance(tensor1, _T) and isinstance(tensor2, _T) and \
            _same_float(self, tensor1, tensor2) and _number_or_scalar_tensor(value, self.dtype):
        return self.add_(_scalar(value, self.dtype) * tensor1 * tensor2)   # ATen: self + value * t1 * t2
    return self.addcmul_(tensor1, tensor2, value=value)


def addcdiv(self, tensor1, tensor2, value=1):
    if isinstance(tensor1, _T) and isinstance(tensor2, _T) and \
            _same_float(self, tensor1, tensor2) and _number_or_scalar_tensor(value, self.dtype):
        return self + _scalar(value, self.dtype) * tensor1 / tensor2
    return self.addcdiv(tensor1, tensor2, value=value)


def addcmul(self, tensor1, tensor2, value=1):
    if isinstance(value, _T) and isinstance(tensor1, _T) and isinstance(tensor2, _T) and \
            _same_float(self, tensor1, tensor2) and _number_or_scalar_tensor(value, self.dtype):
        return self + _scalar(value, self.dtype) * tensor1 * tensor2
    return self.addcmul(tensor1, tensor2, value=value)


def _is_one(alpha):
    """alpha is the number 1 (a tensor alpha is left to torch, which reads it as a number)."""
    return isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha == 1


def _tensor_alpha(self, other, alpha):
    """alpha is a 0-dim floating tensor (a tensor lr: SGD's add_(grad, alpha=-lr)) and self,
    other float32 tensors: the case _fma_alpha computes as eager does."""
    return isinstance(alpha, _T) and alpha.dim() == 0 and alpha.dtype.is_floating_point and \
        isinstance(other, _T) and self.dtype == torch.float32 and other.dtype == torch.float32


def _fma_alpha(self, other, alpha):
    """self + alpha * other as ATen's CPU add kernel computes it for float32: alpha read as a
    number (alpha.item()) cast to float32, then fma(other, alpha, self) per element, one
    rounding (its vector loop's vec::fmadd; its scalar tail rounds the same: checked against
    torch for sizes 4..1000).  The generated C has no fma (-ffp-contract=off), so in float64:
    other * alpha is exact there (24 + 24 significant bits), the sum rounds to float64 and then
    to float32, which is fma's float32 rounding except where the float64 sum lands exactly
    on a float32 rounding midpoint (double rounding: about 2^-28 of the elements)."""
    a = alpha.to(torch.float32).to(torch.float64)
    return (self.to(torch.float64) + other.to(torch.float64) * a).to(torch.float32)


def add_(self, other, alpha=1):
    if _is_one(alpha):   # a + 1 * b is a + b, bit for bit
        return self.add_(other)
    if _tensor_alpha(self, other, alpha):
        return self.copy_(_fma_alpha(self, other, alpha))
    return self.add_(other, alpha=alpha)


def sub_(self, other, alpha=1):
    if _is_one(alpha):
        return self.sub_(other)
    if _tensor_alpha(self, other, alpha):   # ATen's sub is add with -alpha
        return self.copy_(_fma_alpha(self, other, -alpha))
    return self.sub_(other, alpha=alpha)


def add(self, other, alpha=1):
    if _is_one(alpha):
        return self.add(other)
    if _tensor_alpha(self, other, alpha) and other.shape == self.shape:
        return _fma_alpha(self, other, alpha)
    return self.add(other, alpha=alpha)


def sub(self, other, alpha=1):
    if _is_one(alpha):
        return self.sub(other)
    if _tensor_alpha(self, other, alpha) and other.shape == self.shape:
        return _fma_alpha(self, other, -alpha)
    return self.sub(other, alpha=alpha)


# ---- torch._foreach_* ----------------------------------------------------------------

def _foreach_add(self, other, alpha=1):
    out = []
    for i in range(len(self)):
        out.append(add(self[i], _at(other, i), alpha=alpha))
    return out


def _foreach_add_(self, other, alpha=1):
    for i in range(len(self)):
        add_(self[i], _at(other, i), alpha=alpha)


def _foreach_sub(self, other, alpha=1):
    out = []
    for i in range(len(self)):
        out.append(sub(self[i], _at(other, i), alpha=alpha))
    return out


def _foreach_sub_(self, other, alpha=1):
    for i in range(len(self)):
        sub_(self[i], _at(other, i), alpha=alpha)


def _foreach_mul(self, other):
    out = []
    for i in range(len(self)):
        out.append(self[i].mul(_at(other, i)))
    return out


def _foreach_mul_(self, other):
    for i in range(len(self)):
        self[i].mul_(_at(other, i))


def _foreach_div(self, other):
    out = []
    for i in range(len(self)):
        out.append(self[i].div(_at(other, i)))
    return out


def _foreach_div_(self, other):
    for i in range(len(self)):
        self[i].div_(_at(other, i))


def _foreach_maximum(self, other):
    out = []
    for i in range(len(self)):
        out.append(torch.maximum(self[i], _at(other, i)))
    return out


def _foreach_maximum_(self, other):
    for i in range(len(self)):
        self[i].copy_(torch.maximum(self[i], _at(other, i)))


def _foreach_pow(self, exponent):
    out = []
    for i in range(len(self)):
        out.append(self[i].pow(_at(exponent, i)))
    return out


def _foreach_addcdiv_(self, tensor1, tensor2, scalars=1):
    for i in range(len(self)):
        addcdiv_(self[i], tensor1[i], tensor2[i], _scalar_at(scalars, i))


def _foreach_addcmul_(self, tensor1, tensor2, scalars=1):
    for i in range(len(self)):
        addcmul_(self[i], tensor1[i], tensor2[i], _scalar_at(scalars, i))


def _foreach_lerp_(self, tensors1, weight):
    for i in range(len(self)):
        self[i].lerp_(tensors1[i], _at(weight, i))


def _foreach_neg(self):
    out = []
    for i in range(len(self)):
        out.append(self[i].neg())
    return out


def _foreach_neg_(self):
    for i in range(len(self)):
        self[i].neg_()


def _foreach_sqrt(self):
    out = []
    for i in range(len(self)):
        out.append(self[i].sqrt())
    return out


def _foreach_sqrt_(self):
    for i in range(len(self)):
        self[i].sqrt_()


def _foreach_reciprocal_(self):
    for i in range(len(self)):
        self[i].reciprocal_()


def _foreach_copy_(self, src, non_blocking=False):
    for i in range(len(self)):
        self[i].copy_(src[i])


def _foreach_zero_(self):
    for i in range(len(self)):
        self[i].zero_()


# Tensor method name -> its decomposition; ALPHA_METHODS only for a call with alpha=
# lerp_ and add/sub with an alpha other than 1 are left to torch's kernels (externs):
# ATen's vectorized lerp and add-with-alpha use fused multiply-adds, which the generated C
# (-ffp-contract=off) does not, so their decompositions are 1 ulp off eager's; addcmul
# likewise, except with a tensor value, which torch's kernel cannot take on the fakes.
# alpha=1 (SGD's momentum update with no dampening) is the plain op, fused; a 0-dim tensor
# alpha with float32 operands is _fma_alpha's float64 arithmetic.
METHODS = {"addcdiv_": addcdiv_, "addcmul_": addcmul_, "addcdiv": addcdiv,
           "addcmul": addcmul}
ALPHA_METHODS = {"add_": add_, "sub_": sub_, "add": add, "sub": sub}   # alpha=1 only
# torch._foreach_* function -> its per-tensor loop (names this torch lacks are left out)
FUNCTIONS = {getattr(torch, n): f for n, f in list(globals().items())
             if n.startswith("_foreach_") and hasattr(torch, n)}
# torch.optim's Python helpers -> ours
try:
    from torch.optim.optimizer import _get_value as _torch_get_value
    FUNCTIONS[_torch_get_value] = get_value
except ImportError:
    pass
