#!/usr/bin/env python
"""Differential fuzzer for cdynamo: random elementwise programs, eager vs backend "c".

    python tools/fuzz.py --seed S --cases N [--time T] [--out DIR] [--no-write] [-v]

Each case is a random DAG of 1-8 supported ops over 1-3 input tensors (random dtype,
broadcast shapes of 0-4 dims with sizes 0-7 and now and then a large one, random
layouts: contiguous, transposed, sliced with a step, expanded) and Python scalars.
The function's source is exec'd into a fresh module namespace, run eagerly and
under cdynamo.optimize(backend="c"), and compared: when eager raises, cdynamo must
raise the same exception type; else values (exact for integers and bool; for float32
results of transcendental ops rtol 1e-5 / atol 1e-6; NaNs equal), dtype, shape and
strides must match.  Every failing program is written to
tests/fuzz_regressions/case_<hash>.py, a self-contained pytest test.

Prints `fuzz: N cases, K ops, F failures` (exit status 1 when F > 0).
"""
import argparse
import hashlib
import os
import random
import sys
import tempfile
import textwrap
import time
import traceback
import warnings

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REGRESSION_DIR = os.path.join(ROOT, "tests", "fuzz_regressions")

DTYPES = ["float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"]
LAYOUTS = ["contig", "contig", "contig", "transpose", "step", "expand"]
UNARY = ["neg", "abs", "exp", "log", "sqrt", "relu", "sigmoid", "tanh"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
TRANSCENDENTAL = {"exp", "log", "sqrt", "sigmoid", "tanh", "div"}
OPERATOR = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=",
            "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


# ---------------------------------------------------------------- running a case



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


# ---------------------------------------------------------------- generation


def rand_shape(rng):
    """An output shape: 0-4 dims, sizes 0-7 (mostly 1-5), now and then large."""
    nd = rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 4])
    shape = [rng.choice([1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 0]) if rng.random() < 0.97 else 1
             for _ in range(nd)]
    if 0 in shape and rng.random() < 0.7:   # keep empty tensors rare-ish
        shape = [s or 3 for s in shape]
    if nd and rng.random() < 0.06:
        shape[rng.randrange(nd)] = rng.choice([257, 1000, 4099, 20000])
    return shape


def input_shape(rng, out):
    """A shape that broadcasts to out: a suffix of it with some dims set to 1."""
    nd = rng.randint(0, len(out)) if rng.random() < 0.3 else len(out)
    sh = out[len(out) - nd:]
    return [1 if rng.random() < 0.2 else s for s in sh]


def rand_scalar(rng):
    return rng.choice([2, -3, 0, 1, 7, 0.5, -1.25, 3.0, 1e3, True, False])


class Program:
    def __init__(self, rng):
        self.rng = rng
        out = rand_shape(rng)
        nin = rng.randint(1, 3)
        self.inputs = [(rng.choice(DTYPES), input_shape(rng, out), rng.choice(LAYOUTS),
                        rng.randrange(1 << 30)) for _ in range(nin)]
        self.names = [f"a{i}" for i in range(nin)]
        self.inexact = {n: False for n in self.names}
        self.lines = []
        self.ops = 0
        self.any_inexact = False
        for _ in range(rng.randint(1, 8)):
            self.add_op()
        nret = 1 if rng.random() < 0.8 else 2
        rets = self.names[-nret:] if len(self.names) >= nret else self.names[-1:]
        self.ret = rets[0] if len(rets) == 1 else "(" + ", ".join(rets) + ",)"

    def pick(self, exact=False):
        pool = [n for n in self.names if not (exact and self.inexact[n])]
        if not pool:
            return None
        # prefer recent values so that the DAG has depth
        return pool[-1] if self.rng.random() < 0.5 else self.rng.choice(pool)

    def operand(self, exact=False, scalar_ok=True):
        if scalar_ok and self.rng.random() < 0.25:
            return repr(rand_scalar(self.rng)), False
        n = self.pick(exact)
        if n is None:
            return repr(rand_scalar(self.rng)), False
        return n, self.inexact[n]

    def emit(self, expr, inexact):
        name = f"t{len(self.names)}"
        self.lines.append(f"{name} = {expr}")
        self.names.append(name)
        self.inexact[name] = inexact
        self.any_inexact |= inexact
        self.ops += 1

    def add_op(self):
        rng = self.rng
        kind = rng.random()
        if kind < 0.3:
            op = rng.choice(UNARY)
            a = self.pick()
            inexact = self.inexact[a] or op in TRANSCENDENTAL
            form = rng.randrange(3)
            if op == "neg" and form == 0:
                expr = f"-{a}"
            elif op == "relu" and form == 2:
                expr = f"torch.relu({a})"
            elif form == 1 and op != "relu":
                expr = f"{a}.{op}()"
            else:
                expr = f"torch.{op}({a})"
            self.emit(expr, inexact)
        elif kind < 0.75:
            op = rng.choice(BINARY)
            scalar_ok = op not in ("maximum", "minimum")
            a, ia = self.operand(scalar_ok=False)
            b, ib = self.operand(scalar_ok=scalar_ok)
            if rng.random() < 0.2 and scalar_ok and op in OPERATOR:
                a, b, ia, ib = b, a, ib, ia      # scalar on the left: radd etc.
            inexact = ia or ib or op in TRANSCENDENTAL
            form = rng.randrange(3)
            if op in OPERATOR and (form == 0 or a[0] not in "at"):
                expr = f"{a} {OPERATOR[op]} {b}"
            elif form == 1 and a[0] in "at":
                expr = f"{a}.{op}({b})"
            else:
                expr = f"torch.{op}({a}, {b})"
            self.emit(expr, inexact)
        elif kind < 0.9:
            op = rng.choice(COMPARE)
            a, _ = self.operand(exact=True, scalar_ok=False)
            b, _ = self.operand(exact=True)
            if a[0] not in "at":
                a, b = b, a
            if a[0] not in "at":
                return
            form = rng.randrange(2)
            expr = f"{a} {OPERATOR[op]} {b}" if form == 0 else f"torch.{op}({a}, {b})"
            self.emit(expr, False)
        else:
            c = self.pick(exact=True)
            if c is None:
                return
            if rng.random() < 0.5:
                thr, _ = self.operand(exact=True)
                self.emit(f"{c} > {thr}" if c[0] in "at" else f"{thr} > {c}", False)
                c = self.names[-1]
            a, ia = self.operand(scalar_ok=False)
            b, ib = self.operand()
            self.emit(f"torch.where({c}, {a}, {b})", ia or ib)

    def source(self):
        body = "\n".join("    " + line for line in self.lines + [f"return {self.ret}"])
        # an integer input's transcendental op runs in float32 (torch's default dtype)
        f32 = self.any_inexact and any(dt != "float64" for dt, *_ in self.inputs)
        return (f"INEXACT = {self.any_inexact}\nINEXACT32 = {f32}\n\n\n"
                f"def f({', '.join(f'a{i}' for i in range(len(self.inputs)))}):\n{body}\n")


# ---------------------------------------------------------------- regression files


def case_hash(source, inputs):
    return hashlib.sha1((source + repr(inputs)).encode()).hexdigest()[:12]


def regression_text(source, inputs, error, xfail=None):
    """A regression file: data only; tests/test_fuzz.py runs it with this file's run_case."""
    err = "\n".join("# " + line for line in error.strip().splitlines()[-12:])
    return (
        f'"""cdynamo fuzz regression (tools/fuzz.py), run by tests/test_fuzz.py.\n'
        f'Failure when found:"""\n{err}\n\n'
        f"#: a reason string marks a known cdynamo bug (xfail strict); None when fixed\n"
        f"XFAIL = {xfail!r}\n"
        f"INPUTS = {inputs!r}\n"
        f"SOURCE = {source!r}\n")


def write_regression(source, inputs, error, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"case_{case_hash(source, inputs)}.py")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write(regression_text(source, inputs, error))
    return path


# ---------------------------------------------------------------- driver

#: known cdynamo bugs (each has an xfail regression in tests/fuzz_regressions/): a failure
#: whose message matches is counted as "known", not as a new failure (--strict: failures)
KNOWN = [
    (r"^\('strides', ",
     "BUG layout: output strides differ from TensorIterator's (broadcast expanded/permuted inputs)"),
]


def known_bug(msg):
    import re
    for pat, name in KNOWN:
        if re.search(pat, msg):
            return name
    return None



def fuzz(seed, cases, time_limit=None, out_dir=REGRESSION_DIR, write=True, verbose=False,
         log=print, strict=False):
    """Run up to `cases` cases (or until time_limit seconds); returns a summary dict."""
    import cdynamo
    rng = random.Random(seed)
    t0 = time.time()
    summary = {"cases": 0, "ops": 0, "failures": 0, "raises": 0, "files": [], "known": {}}
    own_cache = None
    if not os.environ.get("CDYNAMO_CACHE_DIR"):
        own_cache = tempfile.mkdtemp(prefix="cdynamo-fuzz-")
        cdynamo.config.cache_dir = own_cache
    i = 0
    while (cases is None or i < cases) and (time_limit is None or time.time() - t0 < time_limit):
        i += 1
        prog = Program(rng)
        src, inputs = prog.source(), prog.inputs
        summary["cases"] += 1
        summary["ops"] += prog.ops
        cdynamo.reset()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", cdynamo.CdynamoWarning)   # a fallback is a failure
                res = run_case(src, inputs, cdynamo)
            summary["raises"] += res == "raises"
        except BaseException as e:   # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            known = None if strict else known_bug(str(e))
            if known:
                summary["known"][known] = summary["known"].get(known, 0) + 1
                continue
            summary["failures"] += 1
            tb = traceback.format_exc()
            log(f"FAIL case {i}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}\n"
                f"  inputs={inputs}\n" + textwrap.indent(src, "    "))
            if write:
                summary["files"].append(write_regression(src, inputs, tb, out_dir))
        if verbose:
            log(f"case {i}: ok ({prog.ops} ops)")
    cdynamo.reset()
    summary["seconds"] = time.time() - t0
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cases", type=int, default=None, help="number of cases (default 200 "
                    "unless --time is given)")
    ap.add_argument("--time", type=float, default=None, help="stop after T seconds")
    ap.add_argument("--out", default=REGRESSION_DIR, help="where failing cases are written")
    ap.add_argument("--no-write", action="store_true", help="do not write regression files")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--strict", action="store_true", help="count known bugs as failures")
    a = ap.parse_args(argv)
    if a.cases is None and a.time is None:
        a.cases = 200
    sys.path.insert(0, os.path.join(ROOT, "python"))
    s = fuzz(a.seed, a.cases, a.time, a.out, not a.no_write, a.verbose, strict=a.strict)
    print(f"fuzz: {s['cases']} cases, {s['ops']} ops, {s['failures']} failures "
          f"({s['raises']} cases where eager raises; {sum(s['known'].values())} hit known bugs; "
          f"{s['seconds']:.1f} s; seed {a.seed})")
    for name, n in sorted(s["known"].items()):
        print(f"  known: {n:4d} x {name}")
    for p in s["files"]:
        print(f"  wrote {os.path.relpath(p, ROOT)}")
    return 1 if s["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
