#!/usr/bin/env python
"""Differential fuzzer for cdynamo: random straight-line programs, eager vs backend "c".

    python tools/fuzz.py --seed S --cases N [--family F[,F...]] [--time T]
                         [--findings DIR] [--no-minimize] [--minimize-per-bucket K]
                         [--json FILE] [--show] [-v]
    python tools/fuzz.py --report DIR      (DIR/FINDINGS.md from the finding files in DIR)

Families (tools/fuzz_gen.py): pointwise, reductions (and scans), rows (softmax,
log_softmax, layer_norm, group_norm and their consumers), views, indexing, inplace,
aliasing, exceptions, special (NaN payloads, inf, -0.0, extremes), state (autocast,
default dtype), dtypes (all dtypes; complex must be right or a clean fallback), breaks
(graph breaks and control flow: .item(), data-dependent ifs, loops, try / except, with),
args (Python number arguments drawn per seed), train (inputs requiring grad: each
input's .grad after a backward with seeded output gradients is compared too).

The oracle is eager PyTorch: each program runs eagerly and under cdynamo.optimize on
fresh copies of its inputs; values (exact for integers and bool, dtype-aware tolerances
for floats with a float64 reference as tie-breaker, row-normwise in programs that
normalize, NaNs equal, an element as far off as eager's own result moves when every op
rounds one ulp the other way (_RoundingNoise; not in programs with rounding, comparison
or selection ops) or each float sum is moved by the error bound of another summation
order (_SumOrder), the sign of a NaN not read by signbit / copysign), dtypes, shapes,
strides, aliasing (outputs that are inputs, share their storage, or each other's), the
exception type, and the inputs' state after the call (values, shape, strides, offset)
must all match, also on a second call with inputs of the next seed (the cache-hit path),
which must leave the first call's results as they were.  Cases run in a child process (--worker) so that a segfault or a hang
is recorded as a CRASH with its program and the campaign goes on.  A failing program is
minimized (statements, returns and inputs dropped while it fails the same way) and
written once per distinct bug to the findings directory (default /work/wt/fuzz_findings,
or $CDYNAMO_FUZZ_FINDINGS) as a self-contained file: the program, META, and a
test_case() that tests/test_fuzz.py can run (copy it to tests/fuzz_regressions/ once
the bug is fixed).

Prints, per family: cases, ok, fallback (eager fallback or graph break), wrong, crash,
exc (exception mismatch), and raises (eager and cdynamo raised the same exception).
Exit status 1 when any case is wrong, crashed or mismatched its exception.
"""
import argparse
import contextlib
import gc
import hashlib
import json
import math
import os
import random
import re
import select
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

import torch

TOOLS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TOOLS)
sys.path.insert(0, TOOLS)
import fuzz_gen  # noqa: E402

REGRESSION_DIR = os.path.join(ROOT, "tests", "fuzz_regressions")
FINDINGS_DIR = os.environ.get("CDYNAMO_FUZZ_FINDINGS", "/work/wt/fuzz_findings")
BAD = ("wrong", "crash", "exc")
COLUMNS = ["cases", "ok", "fallback", "wrong", "crash", "exc", "raises"]

# relative / absolute tolerance per float dtype
TOL = {torch.float64: (1e-7, 1e-9), torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3),
       torch.bfloat16: (1.6e-2, 1.6e-2), torch.complex64: (1e-5, 1e-5),
       torch.complex128: (1e-7, 1e-9)}


# The least precise float dtype a program reads or names below float64 (set per program):
# its float64 / complex128 results carry that dtype's rounding (float32 layer_norm, then
# log_softmax(dtype=torch.float64)), so they are compared with its tolerance.
_PROG_TOL = [None]
_LOW_DTYPES = ((re.compile(r"bfloat16"), torch.bfloat16),
               (re.compile(r"float16|\.half\(\)"), torch.float16),
               (re.compile(r"float32|\.float\(\)|complex64"), torch.float32))


def _program_tol(source):
    """The tolerance of the least precise float dtype below float64 that the program's
    make_inputs and f name (None: none)."""
    text = source[source.find("\ndef make_inputs("):]
    for rx, dt in _LOW_DTYPES:
        if rx.search(text):
            return TOL[dt]
    return None


def _tol(dtype):
    """(rtol, atol) for results of dtype, float64's widened to the program's _PROG_TOL."""
    rtol, atol = TOL.get(dtype, (1e-5, 1e-5))
    if dtype in (torch.float64, torch.complex128) and _PROG_TOL[0]:
        rtol, atol = max(rtol, _PROG_TOL[0][0]), max(atol, _PROG_TOL[0][1])
    return rtol, atol


class Mismatch(Exception):
    """A difference from eager: category (values, dtype, shape, strides, alias, inputs,
    structure, exc) and detail."""

    def __init__(self, category, detail):
        super().__init__(f"{category}: {detail}")
        self.category = category


# ---------------------------------------------------------------- the oracle


def _flatten(out, path="out"):
    """(path, leaf) pairs and a structure string of a result."""
    if isinstance(out, (tuple, list)):
        pairs, parts = [], []
        for i, o in enumerate(out):
            p, s = _flatten(o, f"{path}[{i}]")
            pairs += p
            parts.append(s)
        return pairs, f"{type(out).__name__}({','.join(parts)})"
    if isinstance(out, torch.Tensor):
        return [(path, out)], "T"
    return [(path, out)], type(out).__name__


def _is_float(t):
    return t.dtype.is_floating_point or t.dtype.is_complex


def _close(e, c):
    """Boolean mask of elements of c equal to e within e's dtype tolerance (NaN == NaN)."""
    if not _is_float(e):
        return torch.eq(e, c)
    rtol, atol = _tol(e.dtype)
    e64, c64 = e.to(torch.complex128 if e.is_complex() else torch.float64), \
        c.to(torch.complex128 if c.is_complex() else torch.float64)
    return torch.isclose(c64, e64, rtol=rtol, atol=atol, equal_nan=True)


def _within_reference(e, c, r):
    """Where c differs from e: c must be at most about as far from the float64
    reference r as eager is (reordered sums, fused low-precision chains)."""
    if r is None or not isinstance(r, torch.Tensor) or r.shape != e.shape or not _is_float(e):
        return False
    cplx = e.is_complex() or r.is_complex()
    to = torch.complex128 if cplx else torch.float64
    e64, c64, r64 = e.to(to), c.to(to), r.to(to)
    rtol, atol = _tol(e.dtype)
    err_c = (c64 - r64).abs()
    err_e = torch.nan_to_num((e64 - r64).abs(), nan=0.0, posinf=0.0)
    mag = r64.abs().nan_to_num(nan=0.0, posinf=0.0)
    # eager's usual relative error over the tensor (its 90th percentile) too: an
    # element where eager happens to round onto the reference does not make c's
    # usual error there wrong; one element where eager cancels does not excuse all
    rel = (err_e / (mag + atol)).flatten()
    rel_e = rel.kthvalue(max(1, math.ceil(0.9 * rel.numel()))).values if rel.numel() else 0.0
    lim = 4 * err_e + 4 * rel_e * mag + atol + rtol * mag
    if _NORM_PROG[0] and not cplx and mag.ndim:     # normwise per row (_NORM_OPS)
        lim = lim + rtol * mag.amax(dim=-1, keepdim=True)
    ok = err_c <= lim
    ok |= torch.isnan(c64.abs()) & torch.isnan(e64.abs())          # both NaN
    ok |= (c64 == e64)                                               # same inf
    # eager overflowed (NaN / inf) where the float64 reference is finite: c may follow r
    ok |= ~torch.isfinite(e64.abs()) & torch.isfinite(r64.abs()) & ~torch.isfinite(c64.abs())
    if not cplx and not _ZERO_SIGN_FREE[0]:
        # a zero of the other sign than eager's must be the reference's sign
        zero = (e64 == 0) & (c64 == 0) & (torch.signbit(e64) != torch.signbit(c64))
        ok &= ~zero | (torch.signbit(c64) == torch.signbit(r64))
    return bool(ok.all())


# Ops whose result's zero sign eager leaves to the loop path an element takes: ATen's
# vectorized maximum / minimum / amax / amin / clamp with tensor bounds return the
# second operand of two equal zeros (vmaxps), the scalar tail and non-contiguous loops
# the first (std::max), so torch.maximum(-0.0, 0.0) is 0.0 or -0.0 by the element's
# position in one call (checked: fmax, fmin, relu, hardtanh, clamp with number bounds,
# max / min over a dim are consistent; max() / min() of a whole tensor are not: ATen's
# reduce-all folds vector lanes, so of +0 and -0 in a 15-element tensor either comes
# back by where each sits, checked).  A program using one: zeros of either sign are
# equal (set per program).
_ZERO_SIGN_OPS = re.compile(r"\b(maximum|minimum|amax|amin)\b|"
                            r"(\btorch\.(clamp|clip|clamp_min|clamp_max|max|min)\(\w+, |"
                            r"\b[abt]\d+\.(clamp|clip|clamp_min|clamp_max|max|min)\()"
                            r"(min=|max=)?[abt]\d+\b|"
                            r"\b[abt]\d+\.(max|min)\(\)|\btorch\.(max|min)\([abt]\d+\)")
_ZERO_SIGN_FREE = [False]

# A program that reads a float32 result's bits (`.view(torch.int32)`): int32 outputs that
# differ are compared as the float32 values they hold (set per program).
_BITVIEW = [False]


# A program that normalizes (layer_norm / group_norm): a float result's element is
# accurate only against its row's magnitude, not its own.  Its error is the mean's
# rounding times rstd * w: about eps * |mean| / std of the row's scale where the mean
# is large against the spread (f2: |mean| / std = 208, eager's own ATen kernel, same
# scale-and-bias fold, is as far off at other elements), and of an element near the
# mean, all of its size (f16: x = 0 near a mean of -0.003, output 1e-3 of the row's).
# Eager is exact there only by luck (2-element groups, integer rows summed exactly),
# so its error does not bound ours: such a program's float results also pass within
# rtol of the largest magnitude of their last-dim row (set per program).
_NORM_OPS = re.compile(r"\b(layer_norm|group_norm)\(")
_NORM_PROG = [False]


def _bitview_close(e, c):
    """Elements of int32 c holding the bits of a float32 value within float32's tolerance
    of e's: same sign, both normal numbers (a genuine small integer is a denormal's bits
    and stays compared exactly), within float32's TOL."""
    ef, cf = e.view(torch.float32).double(), c.view(torch.float32).double()
    tiny = torch.finfo(torch.float32).tiny
    normal = torch.isfinite(ef) & torch.isfinite(cf) & (ef.abs() >= tiny) & (cf.abs() >= tiny)
    rtol, atol = TOL[torch.float32]
    return normal & (torch.signbit(ef) == torch.signbit(cf)) & torch.isclose(cf, ef, rtol, atol)


def compare_results(exp, act, ref=None):
    pe, se = _flatten(exp)
    pa, sa = _flatten(act)
    if se != sa:
        raise Mismatch("structure", f"eager {se}, cdynamo {sa}")
    pr = dict(_flatten(ref)[0]) if ref is not None else {}
    for (path, e), (_, c) in zip(pe, pa):
        if not isinstance(e, torch.Tensor):
            if isinstance(e, float) and isinstance(c, float):
                if not (e == c or (e != e and c != c) or abs(e - c) <= 1e-5 * (1 + abs(e))):
                    raise Mismatch("values", f"{path}: eager {e!r}, cdynamo {c!r}")
            elif e != c:
                raise Mismatch("values", f"{path}: eager {e!r}, cdynamo {c!r}")
            continue
        compare_tensor(path, e, c, pr.get(path))


def compare_tensor(path, e, c, ref=None, strides=True):
    if c.dtype != e.dtype:
        raise Mismatch("dtype", f"{path}: eager {e.dtype}, cdynamo {c.dtype}")
    if c.shape != e.shape:
        raise Mismatch("shape", f"{path}: eager {tuple(e.shape)}, cdynamo {tuple(c.shape)}")
    if strides and e.numel() > 1:
        es = [st for st, n in zip(e.stride(), e.shape) if n != 1]
        cs = [st for st, n in zip(c.stride(), c.shape) if n != 1]
        if es != cs:
            raise Mismatch("strides", f"{path}: eager {e.stride()}, cdynamo {c.stride()}")
    if e.numel() == 0:
        return
    ok = _close(e, c)
    if e.dtype.is_floating_point and not _ZERO_SIGN_FREE[0]:
        # -0.0 is not 0.0 (1 / x, atan2, copysign tell them apart)
        zero = (e == 0) & (c == 0)
        ok &= ~zero | (torch.signbit(e) == torch.signbit(c))
    if bool(ok.all()):
        return
    if _BITVIEW[0] and e.dtype == torch.int32 and bool((ok | _bitview_close(e, c)).all()):
        return
    if _is_float(e) and _within_reference(e, c, ref):
        return
    bad = (~ok).nonzero()[0].tolist()
    ev, cv = e[tuple(bad)].item(), c[tuple(bad)].item()
    raise Mismatch("values", f"{path}: {int((~ok).sum())}/{e.numel()} differ, at {bad}: "
                   f"eager {ev!r}, cdynamo {cv!r} ({e.dtype})")


def _storage(t):
    st = t.untyped_storage()
    return st.data_ptr() if st.nbytes() else None


def alias_signature(out, inputs):
    """Which outputs are inputs, share an input's storage (at which byte offset from the
    input's data), or share storage with an earlier output."""
    # an empty tensor's data pointer means nothing: not compared
    leaves = [(p, t) for p, t in _flatten(out)[0] if isinstance(t, torch.Tensor) and t.numel()]
    sig = []
    for i, (p, t) in enumerate(leaves):
        st = _storage(t)
        for k, a in enumerate(inputs):
            if not isinstance(a, torch.Tensor):
                continue
            if t is a:
                sig.append(f"{p} is input {k}")
            elif st is not None and st == _storage(a):
                sig.append(f"{p} shares input {k}'s storage at {t.data_ptr() - a.data_ptr():+d}")
        for j, (q, u) in enumerate(leaves[:i]):
            if t is u:
                sig.append(f"{p} is {q}")
            elif st is not None and st == _storage(u):
                sig.append(f"{p} shares {q}'s storage at {t.data_ptr() - u.data_ptr():+d}")
    return sig


def compare_inputs(ins_e, ins_c, when):
    for k, (e, c) in enumerate(zip(ins_e, ins_c)):
        if not isinstance(e, torch.Tensor):      # a Python number argument
            continue
        if (e.shape, e.stride(), e.storage_offset()) != (c.shape, c.stride(), c.storage_offset()):
            raise Mismatch("inputs", f"{when}: input {k} is {tuple(e.shape)}/{e.stride()}"
                           f"+{e.storage_offset()} in eager, {tuple(c.shape)}/{c.stride()}"
                           f"+{c.storage_offset()} under cdynamo")
        try:
            compare_tensor(f"input {k} {when}", e, c, strides=False)
        except Mismatch as m:
            raise Mismatch("inputs", str(m)) from None


@contextlib.contextmanager
def state_ctx(state):
    old = torch.get_default_dtype()
    try:
        if state.get("seed") is not None:   # the random family: eager and cdynamo draw alike
            torch.manual_seed(state["seed"])
        if state.get("default_dtype"):
            torch.set_default_dtype(getattr(torch, state["default_dtype"]))
        if state.get("autocast"):
            with torch.autocast("cpu", dtype=getattr(torch, state["autocast"])):
                yield
        else:
            yield
    finally:
        torch.set_default_dtype(old)


def _inputs_of_another_seed(source):
    """The program's make_inputs with each generator seed one higher (the same shapes,
    dtypes and strides, other values), or None if it has no seeded generator."""
    text, n = re.subn(r"manual_seed\((\d+)\)", lambda m: f"manual_seed({int(m.group(1)) + 1})",
                      source)
    if not n:
        return None
    ns = {"__name__": "cdynamo_fuzz_inputs"}
    exec(compile(text, "<cdynamo-fuzz-inputs>", "exec"), ns)
    return ns["make_inputs"]


def _grown(n):
    """A size n >= 2 moved up by 1..3, the same way for every tensor (so sizes that were
    equal stay equal and broadcasting still lines up); 0 and 1 kept (they specialize)."""
    return n if n < 2 else n + 1 + (n * 7) % 3


def _regrow(t, gen):
    """A tensor like t (dtype, dim order, expanded dims, storage offset, a step in its
    innermost dim) with every size >= 2 _grown, its values drawn from t's own values."""
    shape = [_grown(n) for n in t.shape]
    flat = t.detach().reshape(-1)
    keep = [i for i in range(t.dim()) if t.stride(i) != 0 or t.shape[i] <= 1]
    base_shape = [shape[i] if i in keep else 1 for i in range(t.dim())]
    order = sorted(range(t.dim()), key=lambda i: (-(t.stride(i) or math.inf), i))
    alloc = [base_shape[i] for i in order]
    step = 2 if t.dim() and t.stride(order[-1]) > 1 and alloc[-1] > 1 else 1
    if alloc:
        alloc[-1] *= step
    n = math.prod(alloc)
    off = t.storage_offset()
    if flat.numel():
        vals = flat[torch.randint(flat.numel(), (n + off,), generator=gen)]
    else:
        vals = torch.zeros(n + off, dtype=t.dtype)
    u = vals[off:].view(alloc) if alloc else vals[off:].view(())
    if step > 1:
        u = u[..., ::step]
    inv = [order.index(i) for i in range(t.dim())]
    u = u.permute(inv) if t.dim() else u
    return u.expand(shape)


def _inputs_at_other_sizes(make_inputs):
    """make_inputs with every input dim of size >= 2 grown (see _grown), other values, the
    same layouts; None if two inputs share storage (a layout this cannot rebuild) or
    nothing would change.  Deterministic: a finding replays."""
    ins = make_inputs()
    tens = [t for t in ins if isinstance(t, torch.Tensor)]
    owned = [_storage(t) for t in tens if _storage(t) is not None]
    if len(set(owned)) < len(owned):
        return None
    if not any(n >= 2 for t in tens for n in t.shape):
        return None

    def other():
        gen = torch.Generator().manual_seed(12345)
        return [_regrow(t, gen) if isinstance(t, torch.Tensor) else t for t in make_inputs()]
    return other


def _snapshot(out):
    """The tensors of a result, each as (tensor, a copy, its shape, its strides)."""
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _snapshot(o)]
    if isinstance(out, torch.Tensor):
        return [(out, out.clone(), tuple(out.shape), out.stride())]
    return []


def _same_snapshot(snap):
    """Whether each tensor of a _snapshot still has the values, shape and strides it had."""
    for t, copy, shape, stride in snap:
        if tuple(t.shape) != shape or t.stride() != stride or t.dtype != copy.dtype:
            return False
        a, b = t.detach(), copy
        if a.is_complex():
            a, b = torch.view_as_real(a.resolve_conj()), torch.view_as_real(b.resolve_conj())
        same = (a == b) | (a != a) & (b != b)
        if not bool(same.all()):
            return False
    return True


def _call(fn, args):
    try:
        return fn(*args), None
    except Exception as e:    # noqa: BLE001
        return None, e


def _upcast(t):
    if isinstance(t, torch.Tensor):
        if t.dtype in (torch.float16, torch.bfloat16, torch.float32):
            return t.double()
        if t.dtype == torch.complex64:
            return t.to(torch.complex128)
    return t


def check_program(source, meta):
    """Run the program eagerly and under cdynamo; returns (status, detail) with status ok,
    fallback, raises, wrong or exc.  A program whose values differ and that reads the
    sign of a value (signbit, copysign) passes if it passes with the sign of NaNs taken
    out of those reads: IEEE 754 does not say which sign a NaN made by arithmetic has
    (of two NaN operands, x86 returns the first; eager's vector and scalar loops order
    them differently)."""
    status, detail = _check_program_once(source, meta)
    if status == "wrong" and detail.startswith("values"):
        canon = _nan_sign_free(source)
        if canon != source:
            status2, detail2 = _check_program_once(canon, meta)
            if status2 == "ok":
                return status2, detail2
    return status, detail


_SIGNBIT = [(re.compile(r"\btorch\.signbit\((\w+)\)"), r"(torch.signbit(\1) & ~torch.isnan(\1))"),
            (re.compile(r"\b(\w+)\.signbit\(\)"), r"(torch.signbit(\1) & ~torch.isnan(\1))"),
            (re.compile(r"\btorch\.copysign\((\w+), (\w+)\)"), r"torch.copysign(\1, \2.nan_to_num(0.0))"),
            (re.compile(r"\b(\w+)\.copysign\((\w+)\)"), r"\1.copysign(\2.nan_to_num(0.0))")]


def _nan_sign_free(source):
    """source with f's sign reads made blind to the sign of a NaN: signbit(x) is False
    where x is NaN, copysign(x, y) takes + where y is NaN."""
    head, sep, body = source.partition("\ndef f(")
    if not sep:
        return source
    for pat, rep in _SIGNBIT:
        body = pat.sub(rep, body)
    return head + sep + body


def _check_program_once(source, meta):
    """check_program without the NaN-sign rule."""
    import cdynamo
    ns = {"__name__": "cdynamo_fuzz_case"}
    exec(compile(source, "<cdynamo-fuzz>", "exec"), ns)
    f, make_inputs = ns["f"], ns["make_inputs"]
    _ZERO_SIGN_FREE[0] = bool(_ZERO_SIGN_OPS.search(source.split("\ndef f(", 1)[-1]))
    _BITVIEW[0] = ".view(torch.int32)" in source.split("\ndef f(", 1)[-1]
    _NORM_PROG[0] = bool(_NORM_OPS.search(source.split("\ndef f(", 1)[-1]))
    _STEP_PROG[0] = bool(_STEP_OPS.search(source.split("\ndef f(", 1)[-1].split("\nMETA = ")[0]))
    _PROG_TOL[0] = _program_tol(source)
    cdynamo.reset()
    # META dynamic: every dim of the tensor arguments symbolic (kernels with runtime sizes)
    opt = cdynamo.optimize(f, dynamic=True) if meta.get("dynamic") else cdynamo.optimize(f)
    raised = False
    states = meta.get("states") or [{}]
    # then once more, with inputs of another seed (same shapes, dtypes, strides): the
    # compiled code's cache-hit path, and the first call's results must not change
    calls = [(make_inputs, st, f"call {si + 1} ({st})" if st else "after the call")
             for si, st in enumerate(states)]
    other = _inputs_of_another_seed(source)
    if other is not None:
        calls.append((other, states[-1], "after a second call (inputs of another seed)"))
    # dynamic: a call at other sizes (every dim >= 2 grown): the symbolic kernels' own path
    resized = _inputs_at_other_sizes(make_inputs) if meta.get("dynamic") else None
    if resized is not None:
        calls.append((resized, states[-1], "after a call at other sizes (every dim >= 2 grown)"))
    first = None
    with warnings.catch_warnings(record=True) as warns:
        warnings.simplefilter("always")
        for make_inputs, state, when in calls:
            ins_e, ins_c = make_inputs(), make_inputs()
            with state_ctx(state):
                exp, err_e = _call(f, ins_e)
            gen_e = torch.default_generator.get_state()
            with state_ctx(state):
                act, err_c = _call(opt, ins_c)
            # a seeded call leaves the default generator where eager's left it: a graph
            # that raised reran eagerly from the state before it, the trace drew nothing
            if state.get("seed") is not None and \
                    not torch.equal(torch.default_generator.get_state(), gen_e):
                return "wrong", f"generator: its state differs from eager's ({when})"
            if err_e is not None or err_c is not None:
                if err_e is None:
                    return "exc", (f"exc: cdynamo raised {type(err_c).__name__} where eager "
                                   f"returned: {str(err_c)[:300]}")
                if err_c is None:
                    return "exc", (f"exc: eager raised {type(err_e).__name__} "
                                   f"({str(err_e)[:200]}); cdynamo returned")
                if type(err_c) is not type(err_e):
                    return "exc", (f"exc: eager raised {type(err_e).__name__} ({str(err_e)[:200]}); "
                                   f"cdynamo {type(err_c).__name__} ({str(err_c)[:200]})")
                raised = True
                try:
                    compare_inputs(ins_e, ins_c, f"after the exception ({type(err_e).__name__})")
                except Mismatch as m:
                    return "wrong", str(m)
                continue
            try:
                ref, sum_order = None, False
                try:
                    compare_results(exp, act)
                except Mismatch as m0:
                    if m0.category != "values":
                        raise
                    box = []
                    try:
                        ref = _values_retry(source, f, make_inputs, state, exp, act, box)
                    except Mismatch as m1:
                        # an element eager itself moves as far when each op rounds
                        # its result one ulp the other way is ill-conditioned: c may
                        # differ from eager that much (rounding only the ops after
                        # the program's last step op)
                        if m1.category != "values":
                            raise
                        ref = box[0] if box else None
                        try:
                            perts = _eager_perturbed(f, make_inputs, state)
                            if not perts:
                                raise
                            compare_results(_within_sensitivity(exp, perts, act), act, ref)
                        except Mismatch as m2:
                            # a float sum's order is free (eager's cascade, cdynamo's
                            # row order): eager with each sum moved by the bound of any
                            # order's error (_SumOrder)
                            if m2.category != "values":
                                raise
                            perts = _eager_sum_orders(f, make_inputs, state)
                            if not perts:
                                raise
                            compare_results(_within_sensitivity(exp, perts, act), act, ref)
                            sum_order = True
                sa, se = alias_signature(act, ins_c), alias_signature(exp, ins_e)
                if sa != se:
                    raise Mismatch("alias", f"eager {se}, cdynamo {sa}")
                compare_inputs(ins_e, ins_c, when)
                if meta.get("train"):
                    _compare_grads(source, f, make_inputs, state, exp, act, ins_e, ins_c,
                                   sum_order)
                if first is None:
                    first = _snapshot(act)
            except Mismatch as m:
                return "wrong", str(m) + (f" ({when})" if make_inputs in (other, resized) else "")
        if first is not None and not _same_snapshot(first):
            return "wrong", ("reuse: the first call's result changed in a later call "
                             "(an output buffer reused?)")
    st = cdynamo.stats()
    fell = (st["frames_compiled"] == 0 or st["graph_breaks"] or st["fallbacks"] or
            any(issubclass(w.category, cdynamo.CdynamoWarning) for w in warns))
    if raised:
        return "raises", ""
    if fell:
        # "[CODE ...] reasons": the stop codes of the frames that ran eagerly first
        codes = [b.get("code") or "?" for b in cdynamo._support.eager]
        # no frame ran eagerly: its breaks were resumed after (issue 31), each a graph more
        codes = codes or [f"{b.get('code') or '?'}(resumed)" for b in cdynamo._support.breaks]
        reasons = [str(w.message)[:200] for w in warns if issubclass(w.category, cdynamo.CdynamoWarning)]
        reasons += [str(b.get("reason"))[:200] for b in cdynamo._support.breaks]
        if not reasons:
            reasons = [f"stats {dict((k, v) for k, v in st.items() if v)}"]
        return "fallback", f"[{' '.join(dict.fromkeys(codes)) or '?'}] " + \
            "; ".join(dict.fromkeys(reasons))
    return "ok", ""


def _grad_leaves(out):
    """The float tensors of a result that carry a gradient (backward's roots)."""
    return [t for _, t in _flatten(out)[0] if isinstance(t, torch.Tensor) and
            t.requires_grad and t.is_floating_point()]


def _backward(out, ins, seed=7):
    """Backward from the result's float tensors with seeded gradients (float64 draws cast
    to each root's dtype); the inputs' .grad (None for a number or a tensor without
    one), or the exception backward raised."""
    roots = _grad_leaves(out)
    g = torch.Generator().manual_seed(seed)
    grads = [torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype) for t in roots]
    if not roots:
        return [None] * len(ins)
    try:
        torch.autograd.backward(roots, [gr.to(t.dtype) for gr, t in zip(grads, roots)])
    except Exception as e:    # noqa: BLE001
        return e
    return [a.grad if isinstance(a, torch.Tensor) else None for a in ins]


def _grad_reference(source, f, make_inputs, state):
    """The inputs' gradients of f run on float64 copies of them (the program's own casts
    made float64, _precise_f), the roots' gradients drawn as _backward draws them;
    None if that raises."""
    fp = _precise_f(source, f)
    ins = [a.detach().to(torch.float64).requires_grad_(a.requires_grad)
           if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in make_inputs()]
    st = dict(state)
    st["default_dtype"] = "float64"
    with state_ctx(st):
        out, err = _call(fp, ins)
    if err is not None:
        return None
    gr = _backward(out, ins)
    return None if isinstance(gr, Exception) else gr


def _compare_grads(source, f, make_inputs, state, exp, act, ins_e, ins_c, sum_order=False):
    """Backward through eager's and cdynamo's results (the same seeded root gradients):
    each input's .grad must match (None or not, dtype, shape, values within the float
    tolerance, a float64 run of the program as tie-breaker).  Raises Mismatch "grads";
    nothing to compare when eager's backward raises (an in-place write over a saved
    value, which cdynamo's functionalized graph need not repeat).  sum_order: the
    forward matched only with its float sums taken in another order (_SumOrder: a
    selection or step on a sum that cancels to rounding noise went the other way); the
    gradients then get the same allowance, from backwards through those orders'
    runs (_grads_sum_orders): an element may differ from eager's by twice what one
    of them moves it, or equal one of them."""
    ge = _backward(exp, ins_e)
    if isinstance(ge, Exception):
        return
    gc_ = _backward(act, ins_c)
    if isinstance(gc_, Exception):
        raise Mismatch("grads", f"cdynamo's backward raised {type(gc_).__name__} where "
                                f"eager's did not: {str(gc_)[:300]}")
    ref = orders = None
    for k, (e, c) in enumerate(zip(ge, gc_)):
        if (e is None) != (c is None):
            raise Mismatch("grads", f"input {k}'s grad is {'None' if e is None else 'set'} in "
                                    f"eager, {'None' if c is None else 'set'} under cdynamo")
        if e is None:
            continue
        try:
            compare_tensor(f"grad of input {k}", e, c, strides=False)
        except Mismatch as m:
            if m.category != "values":
                raise Mismatch("grads", str(m)) from None
            if ref is None:
                ref = _grad_reference(source, f, make_inputs, state) or [None] * len(ge)
            try:
                compare_tensor(f"grad of input {k}", e, c, ref[k], strides=False)
            except Mismatch as m2:
                if not sum_order or m2.category != "values":
                    raise Mismatch("grads", str(m2)) from None
                if orders is None:
                    orders = _grads_sum_orders(f, make_inputs, state)
                try:
                    if not orders:
                        raise
                    alt = _within_sensitivity(e, [o[k] for o in orders], c)
                    compare_tensor(f"grad of input {k}", alt, c, ref[k], strides=False)
                except Mismatch as m3:
                    raise Mismatch("grads", str(m3)) from None


def _values_retry(source, f, make_inputs, state, exp, act, box):
    """Compare exp and act again with the float64 reference as tie-breaker and eager's
    other loop layouts as alternatives; returns the reference (also put in box);
    raises Mismatch."""
    ref_state = state
    if state.get("autocast"):      # no float64 reference for autocast's casts ...
        ref_state = {k: v for k, v in state.items() if k != "autocast"}
        if not _autocast_inert(f, make_inputs, state, exp):     # ... where it cast
            compare_results(exp, act)
    ref = _reference(_precise_f(source, f), make_inputs, ref_state)
    if ref is None:
        compare_results(exp, act)
    box.append(ref)
    try:
        compare_results(exp, act, ref)
    except Mismatch as m2:
        # where eager's own result depends on its inputs' layout (its
        # vectorized loop and its scalar one disagree), either is right
        if m2.category != "values":
            raise
        either, last = exp, m2
        for alt_of in (lambda: _eager_other_layout(f, make_inputs, state),
                       lambda: _eager_other_layout(f, make_inputs, state, contiguous=True),
                       lambda: _eager_scalar_loops(f, make_inputs, state)):
            alt = alt_of()
            if alt is None:
                continue
            either = _either(either, alt, act)
            try:
                compare_results(either, act, ref)
                return ref
            except Mismatch as m3:
                last = m3
        raise last
    return ref


def _autocast_inert(f, make_inputs, state, exp):
    """Whether f's eager result under state's autocast (exp) is f's eager result
    without it, bit for bit (NaNs equal), same dtypes and shapes: autocast cast nothing
    that mattered (layer_norm / group_norm of float32 inputs run in float32 under CPU
    autocast), so the float64 reference of f without autocast is f's reference."""
    plain = {k: v for k, v in state.items() if k != "autocast"}
    with state_ctx(plain):
        out, err = _call(f, make_inputs())
    if err is not None:
        return False
    (pe, se), (po, so) = _flatten(exp), _flatten(out)
    if se != so:
        return False
    for (_, a), (_, b) in zip(pe, po):
        if not isinstance(a, torch.Tensor):
            if a != b and not (a != a and b != b):
                return False
            continue
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        try:
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
        except AssertionError:
            return False
    return True


_PERTURB_RUNS = 4

# Ops whose result jumps when an operand moves by one ulp at the wrong place (rounding,
# comparisons, selections, integer casts, indices): in a program using one, only the ops
# from its last step op on are perturbed for the ill-conditioning allowance (round(2.5)
# perturbed is 2 or 3, which would excuse a wrong rounding rule at an exact half); a
# program whose source names one that its calls (_is_step_call) do not show gets none.
_STEP_OPS = re.compile(
    r"\b(floor|ceil|round|trunc|frac|fix|sign|sgn|signbit|heaviside|eq|ne|lt|le|gt|ge|"
    r"greater|less|equal|where|masked_fill_?|masked_select|arg(max|min)|sort|argsort|"
    r"msort|topk|kthvalue|median|nanmedian|mode|cummax|cummin|max|min|aminmax|"
    r"remainder|fmod|floor_divide|div|bitwise_\w+|logical_\w+|isnan|isinf|isfinite|"
    r"isposinf|isneginf|isclose|nan_to_num|count_nonzero|any|all|bool|long|int|short|"
    r"byte|char|unique\w*|nonzero|bucketize|searchsorted|histc|index_\w+|gather|"
    r"scatter\w*|take|put_?|clamp\w*|clip_?|hardtanh|relu6|threshold|step)\b|"
    r"//|%|[<>]=?|==|!=|\bto\(torch\.(u?int\d+|bool|long)")
_STEP_PROG = [False]


# The same ops as torch calls (func.__name__ without underscores, an r / i dunder prefix
# dropped): comparisons, floor division and modulo as operators, casts to integers.
_STEP_CALLS = re.compile(
    r"(floor|ceil|round|trunc|frac|fix|sign|sgn|signbit|heaviside|eq|ne|lt|le|gt|ge|"
    r"greater\w*|less\w*|not_equal|equal|where|masked_fill|masked_scatter|masked_select|"
    r"argmax|argmin|sort|argsort|msort|topk|kthvalue|median|nanmedian|mode|cummax|cummin|"
    r"max|min|amax|amin|aminmax|maximum|minimum|fmax|fmin|remainder|fmod|floor_divide|"
    r"floordiv|mod|bitwise_\w+|logical_\w+|isnan|isinf|isfinite|isposinf|isneginf|"
    r"isclose|allclose|nan_to_num|count_nonzero|any|all|bool|long|int|short|byte|char|"
    r"unique\w*|nonzero|bucketize|searchsorted|histc|index_\w+|gather|scatter\w*|take|"
    r"put|clamp\w*|clip|hardtanh|relu6|threshold|step|item|tolist|sgn|dropout|"
    r"\w*pool\w*|\w*unpool\w*)_?")


def _is_step_call(func, args, kwargs):
    """Whether a torch call's result may jump when a float operand moves by one ulp."""
    name = getattr(func, "__name__", "") or ""
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        if name[:1] in "ri" and _STEP_CALLS.fullmatch(name[1:]):
            return True
    if _STEP_CALLS.fullmatch(name):
        return True
    kw = kwargs or {}
    if name in ("div", "divide", "div_", "divide_") and kw.get("rounding_mode") is not None:
        return True
    if name in ("to", "type", "new_tensor", "new_full", "full_like", "new_empty"):
        dts = [a for a in list(args[1:]) + list(kw.values()) if isinstance(a, torch.dtype)]
        return any(not (d.is_floating_point or d.is_complex) for d in dts)
    return False


class _StepCalls(torch.overrides.TorchFunctionMode):
    """Counts a program's torch calls and records the index of its last step call
    (_is_step_call): calls after it cannot move any step op's operands."""

    def __init__(self):
        super().__init__()
        self.n, self.last = 0, -1      # last: -1 without a step call

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if _is_step_call(func, args, kwargs):
            self.last = self.n
        self.n += 1
        return func(*args, **(kwargs or {}))


def _tensor_args(args, kwargs):
    """The tensors among a torch call's arguments (and in its list / tuple arguments)."""
    return [t for a in list(args) + list((kwargs or {}).values())
            for t in (a if isinstance(a, (tuple, list)) else [a]) if isinstance(t, torch.Tensor)]


def _shares_memory(out, tens):
    """Whether strided tensor out shares its storage with a strided tensor of tens (a
    view or an in-place result of an argument, not memory of its own)."""
    mine = out.untyped_storage().data_ptr()
    return any(t.layout == torch.strided and t.untyped_storage().data_ptr() == mine
               for t in tens)


class _RoundingNoise(torch.overrides.TorchFunctionMode):
    """Moves each float result of a torch call that owns its memory (not a view or an
    in-place result of an argument) by one ulp up or down at random: one run of the
    program under another, equally valid, rounding of every op; with after=k, only
    the results of the k-th call on (k: the program's last step call, whose own
    result may move by an ulp: no step op sees a moved operand, so a rounding or a
    comparison that went the other way is never excused)."""

    def __init__(self, seed, after=0):
        super().__init__()
        self.g = torch.Generator().manual_seed(seed)
        self.n, self.after = 0, after

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.n += 1
        if self.n - 1 < self.after:
            return out
        return self._nudge(out, args, kwargs)

    def _nudge(self, out, args, kwargs):
        if isinstance(out, (tuple, list)):
            return type(out)(self._nudge(o, args, kwargs) for o in out) \
                if not hasattr(out, "_fields") else type(out)(*(self._nudge(o, args, kwargs) for o in out))
        if not (isinstance(out, torch.Tensor) and out.dtype.is_floating_point and
                out.numel() and out.layout == torch.strided):
            return out
        if _shares_memory(out, _tensor_args(args, kwargs)):
            return out
        up = torch.rand(out.shape, generator=self.g) < 0.5
        to = torch.where(up, math.inf, -math.inf).to(out.dtype)
        with torch.no_grad():
            return torch.where(torch.isfinite(out) & (out != 0), torch.nextafter(out, to), out)


def _eager_perturbed(f, make_inputs, state):
    """f run eagerly _PERTURB_RUNS times with the float result of every op from its
    last step op on moved by one ulp at random (_RoundingNoise): how far eager's own
    outputs move under other roundings; [] when a run raises."""
    outs = []
    steps = _StepCalls()
    if not _eager_under(steps, f, make_inputs, state)[1] or (_STEP_PROG[0] and steps.last < 0):
        return []     # raised, or the source names a step op that the calls did not show
    for k in range(_PERTURB_RUNS):
        out, ran = _eager_under(_RoundingNoise(1000 + k, max(steps.last, 0)), f, make_inputs,
                                state)
        if not ran:
            return []
        outs.append(out)
    return outs


# Float reductions whose result is a sum in an order the implementation chooses (ATen:
# a cascade over the reduced dim; cdynamo's kernels: their loop order, in double).
_SUM_OPS = {"sum", "mean", "nansum", "nanmean"}
# the unit roundoff of the sum's accumulation: float16 / bfloat16 sum in float32
_SUM_U = {torch.float64: 2.0 ** -53}


class _SumOrder(torch.overrides.TorchFunctionMode):
    """Moves each float sum's result (_SUM_OPS) up or down at random by the bound of the
    error of summing its n terms in any order, (n - 1) * u * sum(|x|) (mean: divided by
    n; u the accumulation's unit roundoff): one run of the program with every sum taken
    in another order, as far as an order can move it.  Every sum of the program is moved,
    before a step op too: the order is unspecified, what a step op does with it is as
    right as eager's."""

    def __init__(self, seed):
        super().__init__()
        self.g = torch.Generator().manual_seed(seed)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = (getattr(func, "__name__", "") or "").rstrip("_")
        if name not in _SUM_OPS:
            return out
        x = args[0] if args else kwargs.get("input")
        if not (isinstance(out, torch.Tensor) and isinstance(x, torch.Tensor) and
                out.dtype.is_floating_point and x.dtype.is_floating_point and
                out.numel() and x.numel() and out.layout == torch.strided):
            return out
        n = x.numel() // out.numel()
        kw = {k: v for k, v in kwargs.items() if k not in ("dtype", "input", "out")}
        with torch.no_grad():
            try:
                mag = func(x.detach().double().abs(), *args[1:], **kw)
            except Exception:    # noqa: BLE001
                return out
            if mag.shape != out.shape or n < 2:
                return out
            u = _SUM_U.get(x.dtype, 2.0 ** -24)
            bound = (n - 1) * u * mag
            up = torch.rand(out.shape, generator=self.g) < 0.5
            moved = out.double() + torch.where(up, bound, -bound)
            keep = ~torch.isfinite(out) | ~torch.isfinite(moved)
            res = torch.where(keep, out, moved.to(out.dtype))
        # the moved value, with the sum's own gradient (a backward through another order)
        return res + (out - out.detach()) if out.requires_grad else res


def _eager_sum_orders(f, make_inputs, state):
    """f run eagerly _PERTURB_RUNS times with each float sum moved by the bound of
    another summation order (_SumOrder: eager's own result where f has none); [] when
    a run raises."""
    outs = []
    for k in range(_PERTURB_RUNS):
        out, ran = _eager_under(_SumOrder(2000 + k), f, make_inputs, state)
        if not ran:
            return []
        outs.append(out)
    return outs


def _grads_sum_orders(f, make_inputs, state):
    """The inputs' gradients of f run eagerly under each summation order that
    _eager_sum_orders runs (the same seeds: the same sums moved the same way), backward
    from the same seeded root gradients (_backward); [] when a run or backward raises."""
    outs = []
    for k in range(_PERTURB_RUNS):
        ins = make_inputs()
        with state_ctx(state):
            try:
                with _SumOrder(2000 + k):
                    out, err = _call(f, ins)
            except Exception:    # noqa: BLE001
                return []
        gr = _backward(out, ins) if err is None else err
        if isinstance(gr, Exception):
            return []
        outs.append(gr)
    return outs


def _eager_under(mode, f, make_inputs, state):
    """f run eagerly on fresh inputs inside torch function mode `mode`: (its result,
    True), or (None, False) if f or the mode raised."""
    ins = make_inputs()
    with state_ctx(state):
        try:
            with mode:
                out, err = _call(f, ins)
        except Exception:    # noqa: BLE001
            return None, False
    return (out, True) if err is None else (None, False)


def _within_sensitivity(exp, perts, act):
    """exp with the float elements taken from act where act differs from exp by at most
    twice as much as eager's results on one-ulp-perturbed inputs (perts) do, or equals
    one of them (structure and dtypes as exp's)."""
    if isinstance(exp, (tuple, list)):
        if not isinstance(act, (tuple, list)) or len(act) != len(exp) or \
                any(not isinstance(p, (tuple, list)) or len(p) != len(exp) for p in perts):
            return exp
        return type(exp)(_within_sensitivity(e, [p[i] for p in perts], c)
                         for i, (e, c) in enumerate(zip(exp, act)))
    if not (isinstance(exp, torch.Tensor) and isinstance(act, torch.Tensor)) or \
            not exp.dtype.is_floating_point or exp.shape != act.shape or \
            exp.dtype != act.dtype or not exp.numel() or \
            any(not isinstance(p, torch.Tensor) or p.shape != exp.shape for p in perts):
        return exp
    e64, c64 = exp.double(), act.double()
    sens = torch.zeros_like(e64)
    near = torch.zeros(exp.shape, dtype=torch.bool)
    for p in perts:
        p64 = p.double()
        d = (p64 - e64).abs()
        sens = torch.maximum(sens, torch.where(torch.isfinite(d), d, torch.zeros_like(d)))
        near |= _close(p, act)
    take = ~_close(exp, act) & (((c64 - e64).abs() <= 2 * sens) | near)
    if not bool(take.any()):
        return exp
    out = exp.clone()
    if out.stride() != exp.stride():
        return exp
    out[take] = act[take]
    return out


_PRECISE = [(r"\btorch\.(float32|float16|bfloat16|float|half)\b", "torch.float64"),
            (r"\.(float|half|bfloat16)\(\)", ".double()")]


def _precise_f(source, f):
    """f with the program's own casts to float32 / float16 / bfloat16 made float64
    casts, for the reference: a float64 input cast back to float32 inside the
    program would make the reference as inexact as eager (a float32 sum of
    2^31 - 2, -2 and -2^31 is 0 in eager, -2 exactly)."""
    text = source
    for pat, rep in _PRECISE:
        text = re.sub(pat, rep, text)
    if text == source:
        return f
    ns = {"__name__": "cdynamo_fuzz_reference"}
    try:
        exec(compile(text, "<cdynamo-fuzz-reference>", "exec"), ns)
    except Exception:    # noqa: BLE001
        return f
    return ns.get("f", f)


def _eager_other_layout(f, make_inputs, state, contiguous=False):
    """f run eagerly on copies of the inputs whose innermost dim has stride 2 (no input
    loop takes ATen's vectorized path), or with contiguous=True on contiguous copies (the
    vectorized path, for inputs that were not: eager's gelu(inf) is NaN there, inf in its
    scalar loop), or None (inputs that share memory: the copies would not; f raised)."""
    ins = make_inputs()
    tens = [a for a in ins if isinstance(a, torch.Tensor)]
    ptrs = [a.untyped_storage().data_ptr() for a in tens if a.numel()]
    if len(set(ptrs)) != len(ptrs):
        return None
    alt = []
    for a in ins:
        if isinstance(a, torch.Tensor):
            a = a.clone(memory_format=torch.contiguous_format) if contiguous else _stride2(a)
        alt.append(a)
    with state_ctx(state):
        out, err = _call(f, alt)
    return None if err is not None else out


_RANDOM_CALLS = re.compile(r"\w*(rand|dropout|bernoulli|normal|multinomial|poisson|"
                           r"exponential|geometric|cauchy|log_normal|uniform)\w*")


def _stride2(a):
    """a copy of tensor a whose innermost dim has stride 2 (ATen's loops then take their
    scalar path), or a itself (not a tensor, 0-dim, empty)."""
    if not isinstance(a, torch.Tensor) or a.dim() == 0 or not a.numel() or \
            a.layout != torch.strided:
        return a
    b = torch.empty(tuple(a.shape) + (2,), dtype=a.dtype).select(-1, 0)
    b.copy_(a)
    return b


class _ScalarLoops(torch.overrides.TorchFunctionMode):
    """Runs each torch call whose result is a new tensor once more on copies of its
    tensor arguments of inner stride 2 and writes that run's values into the result:
    eager with every op's scalar loop, for intermediates too (Sleef's vector fmod is
    NaN for 1 % 9e-41 in float32 / bfloat16, its scalar loop is not)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not (isinstance(out, torch.Tensor) and out.layout == torch.strided and
                out.numel()) or "out" in kwargs or \
                _RANDOM_CALLS.fullmatch(getattr(func, "__name__", "") or ""):
            return out
        tens = _tensor_args(args, kwargs)
        if _shares_memory(out, tens) or not any(t.dim() and t.numel() for t in tens):
            return out
        try:
            again = func(*[_stride2(a) for a in args],
                         **{k: _stride2(v) for k, v in kwargs.items()})
        except Exception:    # noqa: BLE001
            return out
        if isinstance(again, torch.Tensor) and again.shape == out.shape and \
                again.dtype == out.dtype:
            with torch.no_grad():
                out.copy_(again)
        return out


def _eager_scalar_loops(f, make_inputs, state):
    """f run eagerly under _ScalarLoops (every op's scalar loop), or None if it raised."""
    return _eager_under(_ScalarLoops(), f, make_inputs, state)[0]


def _either(exp, alt, act):
    """exp with the elements where eager's two layouts disagree and cdynamo gives the
    other one's value taken from act (structure and dtypes as exp's)."""
    if isinstance(exp, (tuple, list)):
        if not isinstance(alt, (tuple, list)) or len(alt) != len(exp) or \
                not isinstance(act, (tuple, list)) or len(act) != len(exp):
            return exp
        return type(exp)(_either(e, a, c) for e, a, c in zip(exp, alt, act))
    if not (isinstance(exp, torch.Tensor) and isinstance(alt, torch.Tensor) and
            isinstance(act, torch.Tensor)) or exp.shape != alt.shape or exp.shape != act.shape \
            or exp.dtype != alt.dtype or exp.dtype != act.dtype or not exp.numel():
        return exp
    same = _close(exp, alt)
    if exp.dtype.is_floating_point:
        same &= ~((exp == 0) & (alt == 0)) | (torch.signbit(exp) == torch.signbit(alt))
    take = ~same & _close(alt, act)
    if exp.dtype.is_floating_point:
        take &= ~((alt == 0) & (act == 0)) | (torch.signbit(alt) == torch.signbit(act))
    if not bool(take.any()):
        return exp
    out = exp.clone()
    if out.stride() != exp.stride():      # an overlapping layout: clone would not keep it
        return exp
    out[take] = act[take]
    return out


def _reference(f, make_inputs, state):
    """f on float64 copies of the inputs with float64 the default dtype (None if it raises)."""
    ins = [_upcast(a.clone()) if isinstance(a, torch.Tensor) else a for a in make_inputs()]
    st = dict(state)
    st["default_dtype"] = "float64"
    with state_ctx(st):
        out, err = _call(f, ins)
    return None if err is not None else out


# ---------------------------------------------------------------- child process


def worker_main():
    """Read JSON cases from stdin, write '@@R <json>' results to stdout."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import cdynamo
    if not os.environ.get("CDYNAMO_CACHE_DIR"):
        cdynamo.config.cache_dir = tempfile.mkdtemp(prefix="cdynamo-fuzz-")
    out = sys.stdout
    sys.stdout = sys.stderr
    for line in sys.stdin:
        case = json.loads(line)
        torch.manual_seed(0)
        try:
            status, detail = check_program(case["source"], case["meta"])
        except Exception as e:   # noqa: BLE001  a fuzzer bug, or the program's exec
            status, detail = "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"
        gc.collect()    # damage to Python objects shows up here, in its own case, not a later one
        out.write("@@R " + json.dumps({"id": case["id"], "status": status, "detail": detail}) + "\n")
        out.flush()


class Child:
    """A worker process; run() sends one case and waits for its result, recording a
    segfault or a hang as a crash and starting a fresh worker for the next case."""

    def __init__(self, timeout=120.0, env=None):
        self.timeout = timeout
        self.env = env
        self.p = None
        self.buf = b""
        self.history = []     # (source, meta) of the cases this worker ran

    def start(self):
        self.err = tempfile.TemporaryFile()
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, env=self.env)
        self.buf = b""
        self.history = []

    def _stderr_tail(self):
        try:
            self.err.seek(0)
            data = self.err.read().decode(errors="replace")
            m = re.search(r"ERROR: AddressSanitizer|runtime error:|Fatal Python error", data)
            if m:    # the sanitizer's report from its first line: the frames that matter
                return data[max(0, m.start() - 200):m.start() + 4000]
            return data[-1500:]
        except Exception:    # noqa: BLE001
            return ""

    def run(self, case_id, source, meta):
        if self.p is None or self.p.poll() is not None:
            self.start()
        self.history.append((source, meta))
        msg = json.dumps({"id": case_id, "source": source, "meta": meta}) + "\n"
        try:
            self.p.stdin.write(msg.encode())
            self.p.stdin.flush()
        except BrokenPipeError:
            return self._dead("worker pipe closed")
        fd = self.p.stdout.fileno()
        deadline = time.time() + self.timeout
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                if line.startswith(b"@@R "):
                    res = json.loads(line[4:])
                    if res["id"] == case_id:
                        self.err.seek(0)
                        self.err.truncate()
                        return res["status"], res["detail"]
            left = deadline - time.time()
            if left <= 0:
                self.p.kill()
                self.p.wait()
                self.p = None
                return "crash", f"crash: hang (no result in {self.timeout:.0f} s)"
            r, _, _ = select.select([fd], [], [], left)
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return self._dead("worker died")
                self.buf += chunk

    def _dead(self, what):
        rc = self.p.wait()
        tail = self._stderr_tail()
        self.p = None
        sig = f"signal {-rc}" if rc < 0 else f"exit {rc}"
        return "crash", f"crash: {what} ({sig})\n{tail}"

    def close(self):
        if self.p is not None and self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.p = None


# ---------------------------------------------------------------- minimizing


_CONTINUES = re.compile(r"(else|elif|except|finally)\b")


def split_program(source):
    """(head, input lines, params, body lines, returns) of a generated program."""
    head, rest = source.split("def make_inputs():\n", 1)
    mk, fn = rest.split("\n\n\ndef f(", 1)
    in_lines = [ln[4:] for ln in mk.splitlines()[1:-1]]
    sig, body = fn.split("):\n", 1)
    params = [p for p in sig.split(", ") if p]
    lines = []
    for ln in body.rstrip("\n").splitlines():
        ln = ln[4:]
        # an indented line or else / except / finally continues the statement before it
        if lines and (ln[:1].isspace() or _CONTINUES.match(ln)):
            lines[-1] += "\n" + ln
        else:
            lines.append(ln)
    ret = lines[-1][len("return "):]
    if ret == "None":
        rets = []
    elif ret.startswith("(") and ret.endswith(",)"):
        rets = ret[1:-2].split(", ")
    else:
        rets = [ret]
    seed_line = mk.splitlines()[0]
    return head, seed_line, in_lines, params, lines[:-1], rets


def join_program(head, seed_line, in_lines, params, body, rets):
    used = set(re.findall(r"\b[ab]\d+\b", "\n".join(body + rets)))
    keep_p = [p for p in params if p in used]
    # inputs not passed any more are still made (the generator's draws stay the same)
    ret = "None" if not rets else rets[0] if len(rets) == 1 else "(" + ", ".join(rets) + ",)"
    mk = "\n".join("    " + ln for ln in [seed_line.strip()] + in_lines + [f"return [{', '.join(keep_p)}]"])
    fb = "\n".join("    " + ln.replace("\n", "\n    ") for ln in body + [f"return {ret}"])
    return f"{head}def make_inputs():\n{mk}\n\n\ndef f({', '.join(keep_p)}):\n{fb}\n"


def minimize(source, meta, status, still_fails, budget=60):
    """Drop returns and statements while still_fails(source) (the same status)."""
    head, seed_line, in_lines, params, body, rets = split_program(source)
    best = source
    tries = 0

    def attempt(b, r):
        nonlocal tries
        tries += 1
        cand = join_program(head, seed_line, in_lines, params, b, r)
        return cand if still_fails(cand) else None

    changed = True
    while changed and tries < budget:
        changed = False
        for i in range(len(rets)):
            if len(rets) > 1 and tries < budget:
                r2 = rets[:i] + rets[i + 1:]
                c = attempt(body, r2)
                if c:
                    rets, best, changed = r2, c, True
                    break
        for i in reversed(range(len(body))):
            if tries >= budget:
                break
            b2 = body[:i] + body[i + 1:]
            c = attempt(b2, rets)
            if c:
                body, best, changed = b2, c, True
    if best == source:   # at least drop the unused parameters
        cand = join_program(head, seed_line, in_lines, params, body, rets)
        if cand != source and still_fails(cand):
            best = cand
    # input lines after the last one used (their draws come after all the others)
    text = "\n".join(body + rets)
    last = max([i for i, ln in enumerate(in_lines)
                if re.search(r"\b" + ln.split(" = ")[0] + r"\b", text)] or [-1])
    used_bases = set(re.findall(r"\bb\d+\b", "\n".join(in_lines[:last + 1])))
    trimmed = in_lines[:last + 1]
    if len(trimmed) < len(in_lines) and not used_bases - set(ln.split(" = ")[0] for ln in trimmed):
        cand = join_program(head, seed_line, trimmed, params, body, rets)
        if still_fails(cand):
            best = cand
    return best


# ---------------------------------------------------------------- findings


def op_tokens(source):
    body = source.split("\n\n\ndef f(", 1)[1]
    toks = set(re.findall(r"(?:torch\.|F\.|\.)([a-z_][a-z_0-9]*)\(", body))
    toks |= {m for m in re.findall(r" (\*\*|//|[-+*/%&|^<>]=?|==|!=|<<|>>) ", body)}
    if re.search(r"\] = ", body):
        toks.add("setitem")
    return sorted(toks)


def signature(status, detail, source):
    cat = (detail or "").split(":", 1)[0]
    if status == "crash":
        cat = "crash"
    return f"{status}/{cat}/{'+'.join(op_tokens(source))}"


def finding_text(source, meta, status, detail, sig):
    doc = "\n".join(("# " + ln).rstrip() for ln in f"{status}: {detail}".strip().splitlines()[:200])
    return (f"# cdynamo fuzz finding (tools/fuzz.py), family {meta.get('family')}, {status}\n"
            f"# signature: {sig}\n{doc}\n{source}\n\nMETA = {meta!r}\n\n\n"
            "def test_case():\n"
            "    import os, sys\n"
            "    root = os.path.dirname(os.path.abspath(__file__))\n"
            "    while root != '/' and not os.path.exists(os.path.join(root, 'tools', 'fuzz.py')):\n"
            "        root = os.path.dirname(root)\n"
            "    if root == '/':   # outside a checkout: $CDYNAMO_ROOT, else where it was found\n"
            f"        root = os.environ.get('CDYNAMO_ROOT', {ROOT!r})\n"
            "    sys.path.insert(0, os.path.join(root, 'tools'))\n"
            "    import fuzz\n"
            "    with open(__file__) as fh:\n"
            "        status, detail = fuzz.check_program(fh.read(), META)\n"
            "    assert status in ('ok', 'fallback', 'raises'), detail\n\n\n"
            "if __name__ == '__main__':\n"
            "    test_case()\n"
            "    print('ok')\n")


def write_finding(out_dir, source, meta, status, detail, sig):
    os.makedirs(out_dir, exist_ok=True)
    h = hashlib.sha1(sig.encode()).hexdigest()[:10]
    path = os.path.join(out_dir, f"{meta.get('family')}_{status}_{h}.py")
    if not os.path.exists(path):
        with open(path, "w") as fh:
            fh.write(finding_text(source, meta, status, detail, sig))
    return path


# ---------------------------------------------------------------- driver


def case_program(seed, i, family):
    rng = random.Random(f"{seed}-{family}-{i}")
    return fuzz_gen.generate(rng, family)


def fuzz(seed, cases, families=None, time_limit=None, findings_dir=FINDINGS_DIR,
         write=True, do_minimize=True, log=print, verbose=False, timeout=120.0,
         minimize_per_bucket=4, plan=None, dynamic=False):
    """Run `cases` programs (round-robin over families) in a child process; returns
    {"counts": {family: {column: n}}, "failures": [...], "seconds": s}.  Only the first
    minimize_per_bucket failures of each family / status / category are minimized (a
    known bug hit a thousand times would otherwise take the campaign's time).  plan: a
    list of (family, seed, n) cases to run instead (cases and families are then ignored).
    dynamic: every program compiles with dynamic=True (its META says so: a finding replays
    the same way)."""
    families = families or fuzz_gen.FAMILIES
    if plan is not None:
        families = list(dict.fromkeys(fam for fam, _, _ in plan))
        cases = len(plan)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    own_cache = None
    if not env.get("CDYNAMO_CACHE_DIR"):
        own_cache = tempfile.mkdtemp(prefix="cdynamo-fuzz-cache-")
        env["CDYNAMO_CACHE_DIR"] = own_cache
    child = Child(timeout, env)
    counts = {fam: dict.fromkeys(COLUMNS, 0) for fam in families}
    fell_codes = {fam: {} for fam in families}     # family -> {stop code: fallbacks}
    failures, seen, buckets = [], {}, {}
    t0 = time.time()
    i = 0
    try:
        while (cases is None or i < cases) and (time_limit is None or time.time() - t0 < time_limit):
            if plan is not None:
                fam, cseed, n = plan[i]
            else:
                fam, cseed, n = families[i % len(families)], seed, i // len(families)
            i += 1
            prog = case_program(cseed, n, fam)
            if prog is None:
                continue
            source, meta = prog
            if dynamic:
                meta = dict(meta, dynamic=True)
            status, detail = child.run(i, source, meta)
            if status == "error":   # the program could not even be exec'd: a fuzzer bug
                log(f"fuzzer error in case {fam}#{n}: {detail}")
                continue
            c = counts[fam]
            c["cases"] += 1
            c[status] += 1
            if status == "raises":
                c["ok"] += 1
            if verbose:
                log(f"{fam}#{n}: {status} {detail[:200]}")
            if status == "fallback":
                m = re.match(r"\[([^\]]*)\]", detail)
                for code in (m.group(1).split() if m else ["?"]):
                    fell_codes[fam][code] = fell_codes[fam].get(code, 0) + 1
            if status not in BAD:
                continue
            if status == "crash" and do_minimize:
                source, meta, status, detail = triage_crash(child, source, meta, detail)
            small = source
            bucket = f"{fam}/{status}/{detail.split(':', 1)[0]}"
            buckets[bucket] = buckets.get(bucket, 0) + 1
            if do_minimize and buckets[bucket] <= minimize_per_bucket and \
                    "not reproducible alone" not in detail:
                cat = detail.split(":", 1)[0]

                def still(cand, _s=status, _c=cat, _m=meta):
                    if _s == "crash":     # every try in a fresh worker
                        child.close()
                    st, de = child.run(-1, cand, _m)
                    return st == _s and de.split(":", 1)[0] == _c
                small = minimize(source, meta, status, still, budget=25 if status == "crash" else 60)
                st2, de2 = child.run(-2, small, meta)
                if st2 == status:
                    detail = de2
            sig = signature(status, detail, small)
            first = sig not in seen
            seen[sig] = seen.get(sig, 0) + 1
            rec = {"family": fam, "case": n, "status": status, "detail": detail,
                   "source": small, "meta": meta, "signature": sig, "new": first}
            failures.append(rec)
            if first:
                path = write_finding(findings_dir, small, meta, status, detail, sig) if write else None
                rec["path"] = path
                log(f"{status.upper()} {fam}#{n} ({sig})\n  {detail.splitlines()[0][:300]}\n"
                    + (f"  -> {path}\n" if path else "")
                    + "\n".join("    " + ln for ln in small.split("def make_inputs():")[1].splitlines()))
    finally:
        child.close()
    return {"counts": counts, "failures": failures, "seconds": time.time() - t0,
            "signatures": seen, "fallback_codes": fell_codes}


def findings_report(out_dir):
    """Write out_dir/FINDINGS.md: one entry per finding file (family, status, symptom,
    the '# note:' lines added by hand, and the program without its prelude), or a line
    saying none is open."""
    entries = []
    for name in sorted(os.listdir(out_dir)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(out_dir, name)) as fh:
            text = fh.read()
        head = [ln[2:] for ln in text.splitlines() if ln.startswith("# ")]
        fam = re.search(r"family (\w+), (\w+)", head[0]) if head else None
        notes = [h[len("note: "):] for h in head if h.startswith("note: ")]
        symptom = next((h for h in head[2:] if not h.startswith("note: ") and not h.startswith("  ")), "")
        if "def make_inputs():" in text:
            prog = "def make_inputs():" + text.split("def make_inputs():", 1)[1].split("\n\nMETA = ")[0]
        else:     # written by hand
            prog = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#"))
        meta = re.search(r"\nMETA = (.*)\n", text)
        entries.append(f"### {name}\n- family: {fam.group(1) if fam else '?'}, "
                       f"{fam.group(2) if fam else '?'}" + (f"; state {meta.group(1)}" if meta and
                                                            "states" in meta.group(1) else "")
                       + "\n" + "".join(f"- {n}\n" for n in notes)
                       + f"- symptom: `{symptom[:400]}`\n\n```python\n{prog.strip()}\n```\n")
    header = ""
    if os.path.exists(os.path.join(out_dir, "HEADER.md")):     # a summary written by hand
        with open(os.path.join(out_dir, "HEADER.md")) as fh:
            header = fh.read().rstrip() + "\n\n"
    with open(os.path.join(out_dir, "FINDINGS.md"), "w") as fh:
        fh.write("# cdynamo fuzz findings (tools/fuzz.py), not yet fixed on main\n\n" + header +
                 "Each file is self-contained: `python FILE` runs its test_case() (eager vs "
                 "cdynamo with the fuzzer's oracle); inputs come from the seeded make_inputs() "
                 "(_fill is in the file's prelude). Regenerate this list with "
                 "`tools/fuzz.py --report DIR`.\n\n" +
                 ("\n".join(entries) or "No finding is open.\n"))


def triage_crash(child, source, meta, detail):
    """A crash is rerun alone in a fresh worker.  If it does not crash there, the cases the
    worker ran before it are replayed with it (a crash that needs an earlier program), and
    the finding is the shortest history that crashes, as one program per call."""
    history = list(child.history[:-1])
    child.close()
    st, de = child.run(-3, source, meta)
    if st == "crash":
        return source, meta, "crash", de
    for k in (1, 3, 10):
        if k > len(history):
            break
        prev = history[-k:]
        child.close()
        for src, m in prev:
            child.run(-4, src, m)
        st, de = child.run(-5, source, meta)
        child.close()
        if st == "crash":
            note = "".join(f"\n# -- program {i + 1} of {len(prev)} run before it in the same process:\n"
                           + "\n".join("#   " + ln for ln in src.split("def make_inputs():")[1].splitlines())
                           for i, (src, m) in enumerate(prev))
            return source, meta, "crash", (f"crash: needs the {len(prev)} program(s) run before it in "
                                           f"the same process ({de.splitlines()[0]}){note}")
    return source, meta, "crash", (f"crash: not reproducible alone or after the previous "
                                   f"programs ({detail.splitlines()[0]})")


def format_counts(counts):
    lines = [f"{'family':<12}" + "".join(f"{c:>9}" for c in COLUMNS)]
    tot = dict.fromkeys(COLUMNS, 0)
    for fam, c in counts.items():
        lines.append(f"{fam:<12}" + "".join(f"{c[k]:>9}" for k in COLUMNS))
        for k in COLUMNS:
            tot[k] += c[k]
    lines.append(f"{'total':<12}" + "".join(f"{tot[k]:>9}" for k in COLUMNS))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=None,
                    help="number of cases in all (round-robin over the families; default 200 "
                    "unless --time is given)")
    ap.add_argument("--family", default=None, help="family or comma-separated families "
                    f"({', '.join(fuzz_gen.FAMILIES)})")
    ap.add_argument("--time", type=float, default=None, help="stop after T seconds")
    ap.add_argument("--findings", default=FINDINGS_DIR, help="where failing programs are written")
    ap.add_argument("--no-write", action="store_true", help="write no finding files")
    ap.add_argument("--no-minimize", action="store_true")
    ap.add_argument("--minimize-per-bucket", type=int, default=4, metavar="K",
                    help="minimize only the first K failures of a family / status / category")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a case is a hang")
    ap.add_argument("--show", action="store_true", help="print the generated programs, run nothing")
    ap.add_argument("--json", default=None, help="write the summary (counts, failures) here")
    ap.add_argument("--dynamic", action="store_true",
                    help="compile every program with dynamic=True: every dim of its tensor "
                    "arguments symbolic (the kernels with runtime sizes, checked as always)")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--report", metavar="DIR", default=None,
                    help="write DIR/FINDINGS.md from the finding files in DIR, run nothing")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker_main()
        return 0
    if a.report:
        findings_report(a.report)
        return 0
    if a.cases is None and a.time is None:
        a.cases = 200
    fams = a.family.split(",") if a.family else None
    for fam in fams or []:
        if fam not in fuzz_gen.FAMILIES:
            ap.error(f"unknown family {fam!r}")
    if a.show:
        for i in range(a.cases or 10):
            fam = (fams or fuzz_gen.FAMILIES)[i % len(fams or fuzz_gen.FAMILIES)]
            prog = case_program(a.seed, i // len(fams or fuzz_gen.FAMILIES), fam)
            if prog:
                print(f"# ---- {fam}: {prog[1]}\n" + prog[0].split("def make_inputs():")[1])
        return 0
    s = fuzz(a.seed, a.cases, fams, a.time, a.findings, not a.no_write, not a.no_minimize,
             verbose=a.verbose, timeout=a.timeout, minimize_per_bucket=a.minimize_per_bucket,
             dynamic=a.dynamic)
    print(format_counts(s["counts"]))
    print(f"fuzz: seed {a.seed}, {s['seconds']:.1f} s, {len(s['signatures'])} distinct failures")
    for sig, n in sorted(s["signatures"].items()):
        print(f"  {n:5d} x {sig}")
    print("fallbacks by stop code (a frame's code, per family):")
    for fam, codes in s["fallback_codes"].items():
        if codes:
            top = sorted(codes.items(), key=lambda kv: -kv[1])[:6]
            print(f"  {fam:<12} " + ", ".join(f"{k} {v}" for k, v in top))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"counts": s["counts"], "failures": s["failures"], "seed": a.seed,
                       "dynamic": a.dynamic, "fallback_codes": s["fallback_codes"]}, fh,
                      indent=1)
    return 1 if any(c[k] for c in s["counts"].values() for k in BAD) else 0


# ---------------------------------------------------------------- the first fuzzer's format
# tests/fuzz_regressions/case_*.py files with INPUTS and SOURCE (elementwise programs):
# run by tests/test_fuzz.py through run_case.


def make_input(dtype, shape, layout, seed):
    """A tensor of the given dtype/shape whose strides follow layout."""
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    shape = tuple(shape)

    def fill(sh):
        if dt.is_floating_point:
            return (torch.randn(sh, generator=g, dtype=torch.float64) * 3).to(dt)
        if dt == torch.bool:
            return torch.randint(0, 2, sh, generator=g).bool()
        lo = 0 if dt == torch.uint8 else -12
        return torch.randint(lo, 13, sh, generator=g).to(dt)

    if layout == "transpose" and len(shape) >= 2:
        return fill(shape[::-1]).permute(*reversed(range(len(shape))))
    if layout == "step" and len(shape) >= 1:
        big = fill(shape[:-1] + (shape[-1] * 2 + 1,))
        return big[..., 1::2]
    if layout == "expand" and len(shape) >= 1:
        small = fill(tuple(1 if i % 2 == 0 else s for i, s in enumerate(shape)))
        return small.expand(shape)
    return fill(shape)


def compare(expected, actual, inexact, inexact32=False):
    """Eager result vs compiled result: structure, dtype, shape, strides, values.
    inexact: a transcendental op is upstream; inexact32: one may have run in float32
    (an integer or float32 input), so a float64 result carries float32 rounding."""
    assert type(actual) is type(expected), (type(expected), type(actual))
    if isinstance(expected, tuple):
        assert len(actual) == len(expected)
        for e, a in zip(expected, actual):
            compare(e, a, inexact, inexact32)
        return
    if not isinstance(expected, torch.Tensor):
        assert actual == expected or (actual != actual and expected != expected), (expected, actual)
        return
    assert actual.dtype == expected.dtype, (expected.dtype, actual.dtype)
    assert actual.shape == expected.shape, (expected.shape, actual.shape)
    if expected.numel() > 1:   # the stride of a size-1 dim means nothing: not compared
        es = [st for st, n in zip(expected.stride(), expected.shape) if n != 1]
        acs = [st for st, n in zip(actual.stride(), actual.shape) if n != 1]
        assert acs == es, ("strides", expected.stride(), actual.stride())
    if expected.dtype.is_floating_point:
        if inexact and (expected.dtype == torch.float32 or inexact32):
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, equal_nan=True)
        elif inexact:
            torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-14, equal_nan=True)
        else:
            torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def run_case(source, inputs, cdynamo):
    """Run the program eagerly and compiled (backend "c"); raise AssertionError on a
    mismatch.  inputs: (dtype, shape, layout, seed) tuples."""
    ns = {"torch": torch, "__name__": "cdynamo_fuzz_case"}
    exec(compile(source, "<cdynamo-fuzz>", "exec"), ns)
    fn = ns["f"]
    args = [make_input(*spec) for spec in inputs]
    snap = [a.clone() for a in args]
    try:
        expected = fn(*args)
    except Exception as e:   # eager raises: cdynamo must raise the same type
        err = type(e)
        try:
            cdynamo.optimize(fn, backend="c")(*args)
        except Exception as e2:
            assert type(e2) is err, f"eager raised {err.__name__}, cdynamo {type(e2).__name__}: {e2}"
            return "raises"
        raise AssertionError(f"eager raised {err.__name__}: {e}; cdynamo returned a result")
    actual = cdynamo.optimize(fn, backend="c")(*args)
    compare(expected, actual, ns.get("INEXACT", False), ns.get("INEXACT32", False))
    for a, s in zip(args, snap):
        assert torch.equal(a, s) or (a.is_floating_point() and torch.allclose(a, s, equal_nan=True)), \
            "an input was modified"
    return "ok"



if __name__ == "__main__":
    sys.exit(main())
