"""Observability: the debug directory (CDYNAMO_DEBUG=1), standalone repro scripts,
the fusion log, cdynamo.explain and cdynamo.profile_report.

Everything here runs at compile time or on request, never on the per-call path.
"""
import inspect
import os
import re
import sys
import time

from . import config

#: when this process first wrote a debug directory (names the run directory)
_RUN_START = time.time()
#: (run directory, function name) -> compiles written so far
_counts = {}

NO_IR = "backend eager: no IR (the graph runs as torch ops; see graph.txt)\n"


# --------------------------------------------------------------------------- debug dir

def run_dir():
    """The debug directory of this process: <debug_dir>/run_<date>-pid_<pid>."""
    base = config.debug_dir or os.path.join(os.getcwd(), "cdynamo_debug")
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.localtime(_RUN_START))
    return os.path.join(base, f"run_{stamp}-pid_{os.getpid()}")


def _safe(name):
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "fn"


def bytecode_text(orig, new):
    """ORIGINAL / MODIFIED BYTECODE listings, with the headers of the bytecode log."""
    from ._support import _dis
    head = f"{orig.co_name} {orig.co_filename} line {orig.co_firstlineno}"
    modified = _dis(new) if new is not None else "(no modified code)\n"
    return f"ORIGINAL BYTECODE {head}\n{_dis(orig)}\nMODIFIED BYTECODE {head}\n{modified}"


def write_debug_dir(info, rec):
    """Write graph, IR, output code, guards, bytecode and repro.py of one compile
    under run_dir()/<function>_<n>/; returns that directory."""
    code = info["code"]
    root = run_dir()
    key = (root, code.co_name)
    n = _counts.get(key, 0)
    _counts[key] = n + 1
    d = os.path.join(root, f"{_safe(code.co_name)}_{n}")
    os.makedirs(d, exist_ok=True)
    files = {
        "graph.txt": info.get("graph") or "",
        "ir_pre_fusion.txt": rec.get("ir_pre") or NO_IR,
        "ir_post_fusion.txt": rec.get("ir_post") or NO_IR,
        "output_code.c": info.get("source") or f"/* backend {info.get('backend')}: no C code */\n",
        "guards.txt": info.get("guards") or "",
        "bytecode.txt": bytecode_text(code, info.get("new_code")),
        "repro.py": repro_script(info),
    }
    for fname, text in files.items():
        with open(os.path.join(d, fname), "w") as f:
            f.write(text)
    rec["debug_dir"] = d
    return d


# --------------------------------------------------------------------------- graph text

_META = r"(\w+)\[([^\]]*)\] stride=\[([^\]]*)\]"
_INPUT = re.compile(r"^\s*%(\d+) = input (.+?) : " + _META)
_SCALAR = re.compile(r"^\s*%(\d+) = scalar (\S+) : (\w+)")
_NODE = re.compile(r"^\s*%(\d+) = (\w+)\(([^)]*)\) : " + _META)
_RETURN = re.compile(r"^\s*return \((.*)\)")
_WRITEBACK = re.compile(r"^\s*mutates input (\d+): written back from %(\d+)")
_STORE = re.compile(r"^\s*stores attribute \.")


def _ints(s):
    return [int(p) for p in s.split(",") if p.strip()]


def parse_graph(text):
    """The graph text as dicts: inputs, scalars, nodes (in order) and outputs.
    Raises ValueError on a line it does not understand."""
    g = {"inputs": [], "scalars": {}, "nodes": [], "outputs": [], "writeback": []}
    for line in (text or "").splitlines():
        if not line.startswith("  "):
            continue          # header
        m = _INPUT.match(line)
        if m:
            g["inputs"].append({"value": int(m[1]), "name": m[2], "dtype": m[3],
                                "sizes": _ints(m[4]), "strides": _ints(m[5])})
            continue
        m = _SCALAR.match(line)
        if m:
            g["scalars"][int(m[1])] = (m[2], m[3])
            continue
        m = _NODE.match(line)
        if m:
            args = [int(a.strip().lstrip("%")) for a in m[3].split(",") if a.strip()]
            g["nodes"].append({"value": int(m[1]), "op": m[2], "args": args, "dtype": m[4],
                               "sizes": _ints(m[5])})
            continue
        m = _RETURN.match(line)
        if m:
            g["outputs"] = [int(a.strip().lstrip("%")) for a in m[1].split(",") if a.strip()]
            continue
        m = _WRITEBACK.match(line)
        if m:
            g["writeback"].append((int(m[1]), int(m[2])))
            continue
        if _STORE.match(line):
            continue          # a Python attribute store: not part of the tensor program
        raise ValueError(f"unrecognised graph line: {line.strip()!r}")
    return g


def graph_ops(text):
    """Op names of the graph text's nodes, in order."""
    try:
        return [n["op"] for n in parse_graph(text)["nodes"]]
    except ValueError:
        return re.findall(r"^\s*%\d+ = (?!input |scalar )(\w+)\(", text or "", re.M)


# --------------------------------------------------------------------------- repro

#: where a traced callable may live, tried in order when its own module and
#: qualname do not name it (the repro spells each call as `<namespace>.<name>`)
_NAMESPACES = ("torch", "torch.Tensor", "torch.nn.functional", "torch.linalg", "torch.special",
               "torch.fft", "operator", "math", "builtins", "torch._C._nn",
               "torch._C._VariableFunctions", "torch._C._linalg", "torch._C._special")


def _resolve(path):
    """The object a dotted path names (importing its module), or None."""
    import importlib
    parts = path.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        try:
            for a in parts[k:]:
                obj = getattr(obj, a)
        except AttributeError:
            return None
        return obj
    return None


def _same_callable(a, b):
    if a is b:
        return True
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # noqa: BLE001
        return False


def fn_spelling(fn):
    """A dotted Python expression naming callable fn (torch.Tensor.sum,
    torch.nn.functional.layer_norm, operator.add, ...); raises ValueError."""
    name = getattr(fn, "__name__", None)
    cands = [f"{ns}.{name}" for ns in _NAMESPACES] if name else []
    mod, qual = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if mod and qual and "<" not in qual:
        cands.append(f"{mod}.{qual}")
    for c in cands:
        if _same_callable(_resolve(c), fn):
            return c
    raise ValueError(f"callable {fn!r} has no torch spelling in the repro generator")


def _literal(c):
    """Python source for constant c (numbers, strings, None, slices, dtypes,
    memory formats, devices, sizes, tuples / lists of them, small tensors);
    raises ValueError."""
    import math
    import torch
    if c is None or c is Ellipsis or isinstance(c, (bool, int, str)):
        return repr(c)
    if isinstance(c, float):
        if math.isnan(c):
            return 'float("-nan")' if math.copysign(1.0, c) < 0 else 'float("nan")'
        if math.isinf(c):
            return 'float("inf")' if c > 0 else 'float("-inf")'
        return repr(c)
    if isinstance(c, complex):
        return f"complex({_literal(c.real)}, {_literal(c.imag)})"
    if isinstance(c, slice):
        return f"slice({_literal(c.start)}, {_literal(c.stop)}, {_literal(c.step)})"
    if isinstance(c, (torch.dtype, torch.memory_format, torch.layout)):
        return str(c)
    if isinstance(c, torch.device):
        return f"torch.device({str(c)!r})"
    if isinstance(c, torch.Size):
        return f"torch.Size({_literal(tuple(c))})"
    if isinstance(c, tuple):
        items = [_literal(x) for x in c]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(c, list):
        return "[" + ", ".join(_literal(x) for x in c) + "]"
    if isinstance(c, torch.Tensor) and c.numel() <= 4096 and c.layout == torch.strided:
        vals = c.detach().cpu().contiguous().reshape(-1).tolist()
        return (f"torch.tensor({_literal(vals)}, dtype={c.dtype}).reshape({_literal(tuple(c.shape))})"
                f".as_strided({_literal(tuple(c.shape))}, {_literal(c.stride())})"
                if c.numel() else f"torch.empty({_literal(tuple(c.shape))}, dtype={c.dtype})")
    raise ValueError(f"constant of type {type(c).__name__} has no literal in the repro generator")


def _scalar_literal(value, dtype):
    if dtype == "bool":
        return "True" if value not in ("0", "False") else "False"
    if dtype.startswith("float"):
        if value in ("inf", "-inf", "nan", "-nan"):
            return f"float({value!r})"
        return repr(float(value))
    return str(int(value))


def _arg_source(arg, names, g):
    """Source of one program argument (see compiled.program)."""
    kind = arg[0]
    if kind == "v":
        if arg[1] in names:
            return names[arg[1]]
        if arg[1] in g["scalars"]:
            return _scalar_literal(*g["scalars"][arg[1]])
        raise ValueError(f"a call reads %{arg[1]}, which no earlier call defines")
    if kind == "c":
        return _literal(arg[1])
    items = [_arg_source(a, names, g) for a in arg[2]]
    if arg[1]:
        return "[" + ", ".join(items) + "]"
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


#: operator-module callables written as Python operators (the tracer takes the
#: operator itself, the way the user wrote it, not always a call of operator.<name>)
_BINOPS = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
           "pow": "**", "matmul": "@", "and_": "&", "or_": "|", "xor": "^", "lshift": "<<",
           "rshift": ">>", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_UNOPS = {"neg": "-", "pos": "+", "invert": "~", "inv": "~"}


def _call_source(fn, parts, kwnames):
    """Source of the call fn(*parts) (the last len(kwnames) parts keywords)."""
    import operator
    nkw = len(kwnames) if kwnames else 0
    pos, kw = parts[:len(parts) - nkw], parts[len(parts) - nkw:]
    name = getattr(fn, "__name__", "")
    if name == "_cdy_setitem" and len(pos) == 3 and not nkw:   # mutate.c: a copy with [k] = v
        return f"{pos[0]}.clone()", f"[{pos[1]}] = {pos[2]}"
    if name == "_cdy_relayout" and len(pos) == 3 and not nkw:  # a copy in a given layout
        return f"{pos[0]}.new_empty_strided({pos[1]}, {pos[2]}).copy_({pos[0]})", None
    if name == "_cdy_scatter" and len(pos) == 5 and not nkw:   # a write through a view
        return f"torch.as_strided_scatter({', '.join(pos)})", None   # (root's clone: offset 0)
    if not nkw and getattr(operator, name, None) is fn:
        if name in _BINOPS and len(pos) == 2:
            return f"({pos[0]} {_BINOPS[name]} {pos[1]})", None
        if name in _UNOPS and len(pos) == 1:
            return f"({_UNOPS[name]}{pos[0]})", None
        if name == "getitem" and len(pos) == 2:
            return f"{pos[0]}[{pos[1]}]", None
        if name.startswith("i") and name[1:] in _BINOPS and len(pos) == 2:
            return pos[0], f"{_BINOPS[name[1:]]}= {pos[1]}"    # x += y: an in-place statement
    spelled = fn_spelling(fn)
    if spelled.startswith("torch.Tensor.") and pos:     # a method: self.name(...)
        rest = pos[1:] + [f"{k}={v}" for k, v in zip(kwnames or (), kw)]
        return f"{pos[0]}.{spelled[len('torch.Tensor.'):]}({', '.join(rest)})", None
    parts = pos + [f"{k}={v}" for k, v in zip(kwnames or (), kw)]
    return f"{spelled}({', '.join(parts)})", None


def repro_function(g, program):
    """Python source of `fn`: the traced calls (compiled.program, what backend
    "eager" replays) as torch calls over the graph's inputs (raises ValueError)."""
    names = {}
    params = []
    for i, inp in enumerate(g["inputs"]):
        names[inp["value"]] = f"in{i}"
        params.append(f"in{i}")
    lines = [f"def fn({', '.join(params)}):"]
    for inp, p in zip(g["inputs"], params):
        lines.append(f"    # {p}: {inp['name']} {inp['dtype']}{inp['sizes']} stride={inp['strides']}")
    for n, (value, fn, args, kwnames, item, base) in enumerate(program):
        inplace = None
        if item >= 0:
            src = f"r{base}[{item}]"
        else:
            src, inplace = _call_source(fn, [_arg_source(a, names, g) for a in args], kwnames)
        target = f"r{n}" if value < 0 else f"v{value}"
        lines.append(f"    {target} = {src}")
        if inplace:
            lines.append(f"    {target}{'' if inplace.startswith('[') else ' '}{inplace}")
        if value >= 0:
            names[value] = target
    outs = []
    for o in g["outputs"]:
        if o not in names:
            raise ValueError(f"output %{o} is not defined by a traced call")
        outs.append(names[o])
    for inp, v in g["writeback"]:       # mutated inputs, as the eager backend writes them back
        if inp >= len(params) or v not in names:
            raise ValueError(f"input {inp} is written back from an unknown value %{v}")
        lines.append(f"    {params[inp]}.copy_({names[v]})")
    lines.append(f"    return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    return "\n".join(lines) + "\n"


def _user_source(code):
    try:
        return inspect.getsource(code)
    except (OSError, TypeError):
        return None


_REPRO_TEMPLATE = '''\
#!/usr/bin/env python3
"""Standalone repro of {name}: {where}, written by cdynamo.

Rebuilds the graph's inputs (same dtype, sizes and strides, random values), runs the graph
(its traced torch calls, as backend "eager" replays them) eagerly, under cdynamo
backend="eager" and under backend="c", each on fresh inputs, and compares the results
(values, dtypes, strides) and the inputs after the call.  Prints "repro: OK" and exits 0
when they match; prints the mismatch and exits 1 otherwise.
"""
import builtins  # noqa: F401  (calls below may be spelled through these modules)
import math  # noqa: F401
import operator  # noqa: F401
import os
import sys
import tempfile

try:
    import cdynamo
except ImportError:
    sys.path.insert(0, {pkg_parent!r})
    import cdynamo
import torch
import torch.nn.functional  # noqa: F401

GRAPH = {graph!r}

# the user's source, for reference (the repro runs the graph below, not this):
{user_source}
{fn_source}
# (name, dtype, sizes, strides) of each input
INPUTS = {inputs!r}


def make_input(dtype, sizes, strides, zero_ints=False):
    """A tensor with these dtype, sizes and strides; its whole storage holds random values
    (integers small and non-negative, as indices need them; all 0 where zero_ints)."""
    dt = getattr(torch, dtype)
    t = torch.empty_strided(sizes, strides, dtype=dt)
    n = 0 if 0 in sizes else 1 + sum((s - 1) * st for s, st in zip(sizes, strides))
    if dt.is_floating_point:
        fill = torch.randn(n, dtype=dt)
    elif dt == torch.bool:
        fill = torch.randint(0, 2, (n,)).bool()
    elif zero_ints:
        fill = torch.zeros(n, dtype=dt)
    else:
        fill = torch.randint(0, 3, (n,), dtype=dt)
    if n:
        t.as_strided((n,), (1,), 0).copy_(fill)
    return t


def make_inputs(zero_ints=False):
    """The inputs, the same values on every call (each run may mutate its own)."""
    torch.manual_seed(0)
    return [make_input(dt, sz, st, zero_ints) for _, dt, sz, st in INPUTS]


def compare(got, expected):
    """Raise AssertionError where got differs from expected (values, dtypes, strides)."""
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    flat = lambda x: [t for y in x for t in flat(y)] if isinstance(x, (tuple, list)) else [x]
    for g, e in zip(flat(got), flat(expected)):
        if isinstance(e, torch.Tensor) and e.numel() > 1 and g.stride() != e.stride():
            raise AssertionError(f"strides {{g.stride()}} where eager gives {{e.stride()}}")


def eager_inputs():
    """(zero_ints, exception): which inputs eager runs fn on (random integers may be out
    of range as indices: then all-zero ones), or the exception eager raises on both."""
    raised = None
    for zero_ints in (False, True):
        try:
            fn(*make_inputs(zero_ints))
            return zero_ints, None
        except Exception as e:  # noqa: BLE001
            raised = e
    return True, raised


def run_backend(backend, zero_ints):
    """(inputs after the call, result) of fn under cdynamo's backend, or None after
    printing why there is none."""
    cdynamo.reset()
    mine = make_inputs(zero_ints)
    got = cdynamo.optimize(fn, backend=backend)(*mine)
    if cdynamo.stats()["frames_compiled"] < 1:
        print(f"repro: backend {{backend}}: cdynamo did not compile fn (it ran eagerly)")
        return None
    return mine, got


def check_raises(raised, zero_ints):
    """Where eager raises: every backend must raise the same type; 0 or 1."""
    ok = True
    for backend in ("eager", "c"):
        try:
            run_backend(backend, zero_ints)
            print(f"repro: backend {{backend}} returned where eager raised {{raised!r}}")
            ok = False
        except Exception as e:  # noqa: BLE001
            if type(e) is not type(raised):
                print(f"repro: backend {{backend}} raised {{e!r}} where eager raised {{raised!r}}")
                ok = False
    print("repro: OK (eager and cdynamo raise " + type(raised).__name__ + ")" if ok else "")
    return 0 if ok else 1


def main():
    if not os.environ.get("CDYNAMO_CACHE_DIR"):
        cdynamo.config.cache_dir = tempfile.mkdtemp(prefix="cdynamo-repro-")
    if getattr(fn, "not_generated", False):
        fn()                              # raises NotImplementedError with the reason
    zero_ints, raised = eager_inputs()
    if raised is not None:
        return check_raises(raised, zero_ints)
    args = make_inputs(zero_ints)
    expected = fn(*args)
    ok = True
    for backend in ("eager", "c"):
        try:
            r = run_backend(backend, zero_ints)
        except Exception as e:  # noqa: BLE001
            print(f"repro: backend {{backend}} raised {{type(e).__name__}}: {{e}}")
            ok = False
            continue
        if r is None:
            ok = False
            continue
        try:
            compare(r[1], expected)
            compare(r[0], args)
        except AssertionError as e:
            print(f"repro: MISMATCH backend {{backend}} vs eager PyTorch:\\n{{e}}")
            ok = False
    if ok:
        print("repro: OK")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
'''


def repro_script(info):
    """Source of a standalone repro.py for one compile (see _REPRO_TEMPLATE)."""
    code = info["code"]
    where = f"{code.co_name} at {code.co_filename}:{code.co_firstlineno}"
    src = _user_source(code)
    user = "\n".join("# " + l for l in (src or "(source not available)\n").splitlines())
    inputs = []
    try:
        g = parse_graph(info.get("graph"))
        inputs = [(i["name"], i["dtype"], i["sizes"], i["strides"]) for i in g["inputs"]]
        program = getattr(info.get("compiled"), "program", None)
        if program is None:
            raise ValueError("the compiled graph has no program")
        fn_source = repro_function(g, program)
    except ValueError as e:
        fn_source = (f"def fn(*args):\n    raise NotImplementedError("
                     f"{('cannot re-generate the graph: ' + str(e))!r})\n\n\n"
                     f"fn.not_generated = True\n")
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return _REPRO_TEMPLATE.format(name=info.get("name"), where=where, pkg_parent=pkg_parent,
                                  graph=info.get("graph") or "", user_source=user,
                                  fn_source=fn_source, inputs=inputs)


# --------------------------------------------------------------------------- fusion log

def fusion_lines(name, ir_post):
    """Fusion log lines from a post-fusion IR text: what each kernel fuses, what was not
    fused and why, which loops are (not) vectorized or parallel and why."""
    if not ir_post:
        return [f"{name}: backend eager: no fusion (the graph runs as torch ops)"]
    out = []
    kernel = None
    for line in ir_post.splitlines():
        s = line.strip()
        m = re.match(r"(kernel_\d+): iteration space (\[[^\]]*\]) \((\d+) elements\).*: "
                     r"(\[[^\]]*\])$", s)
        if m:
            kernel = m[1]
            out.append(f"{name}.{kernel}: iteration space {m[2]}, loops {m[4]} after coalescing")
        elif s.startswith("# loop IR after fusion:"):
            out.append(f"{name}: {s[len('# loop IR after fusion: '):].split(';')[0]}")
        elif s.startswith("fuses:") and kernel:
            out.append(f"{name}.{kernel}: fused nodes:{s[len('fuses:'):]}")
        elif s.startswith("vectorized: no") and kernel:
            out.append(f"{name}.{kernel}: inner loop NOT vectorized:{s[len('vectorized: no:'):]}")
        elif s.startswith("vectorized: yes") and kernel:
            out.append(f"{name}.{kernel}: inner loop vectorized:{s[len('vectorized: yes:'):]}")
        elif s.startswith("parallel:") and kernel:
            out.append(f"{name}.{kernel}: {s}")
        elif s == "fusion decisions:":
            kernel = None
        elif kernel is None and s and not s.startswith("#"):
            if "separate kernel" in s:
                out.append(f"{name}: not fused: {s}")
            else:
                out.append(f"{name}: {s}")
    return out


# --------------------------------------------------------------------------- explain

class BreakReason(dict):
    """A graph break (or a frame that ran eagerly): reason, code (its code in
    cdynamo.stop_reasons()), category, filename, line, function, location
    ("FILE:LINE"); readable as attributes or as dict items."""

    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k) from None


class ExplainOutput:
    """What cdynamo.explain(fn)(*args) found: graphs, graph breaks, ops, guards."""

    def __init__(self, graphs, breaks, out, eager=()):
        self.graphs = [g["graph"] for g in graphs]
        self.graph_count = len(graphs)
        self.break_reasons = [BreakReason(b, location=f"{b['filename']}:{b['line']}")
                              for b in breaks]
        #: every frame that ran eagerly in the call: a stopped trace (as in
        #: break_reasons), a frame with nothing to compile (NO_TENSOR_OPS),
        #: COMPILE_FAILED, RECOMPILE_LIMIT, EAGER_RERUN (a compiled graph raised: the
        #: frame ran again eagerly), GENERATOR_CODE; frame_location: the function's place
        self.eager_frames = [BreakReason(b, location=f"{b['filename']}:{b['line']}")
                             for b in eager]
        self.graph_break_count = len(self.break_reasons)
        self.ops_per_graph = [graph_ops(g["graph"]) for g in graphs]
        self.op_count = sum(g["op_count"] for g in graphs)
        self.guards = [l for g in graphs for l in (g["guards"] or "").splitlines() if l.strip()]
        self.compile_time_s = sum(g["compile_time_s"] for g in graphs)
        self.compiled_names = [g["name"] for g in graphs]
        self.out = out

    def __str__(self):
        s = [f"Graph Count: {self.graph_count}",
             f"Graph Break Count: {self.graph_break_count}",
             f"Op Count: {self.op_count}",
             "Break Reasons:"]
        for i, b in enumerate(self.break_reasons, 1):
            s += [f"  Break Reason {i}:", f"    Reason: [{b.get('code', '')}] {b.reason}",
                  f"    User Stack: {b.location} in {b.get('function', '?')}"]
        s.append("Eager Frames:")
        for b in self.eager_frames:
            s.append(f"  {b.get('function', '?')} ({b.location}): [{b.get('code', '')}] {b.reason}")
        s.append("Ops per Graph:")
        for i, ops in enumerate(self.ops_per_graph, 1):
            s.append(f"  Ops {i} ({self.compiled_names[i - 1]}):")
            s += [f"    {op}" for op in ops]
        s.append("Guards:")
        s += [f"  {g}" for g in self.guards]
        s.append(f"Compile Time: {self.compile_time_s:.4f} s")
        return "\n".join(s) + "\n"

    __repr__ = __str__


def _reachable_codes(fn):
    """fn's code and the codes of functions it names through its globals (transitively)."""
    fn = getattr(fn, "forward", fn) if not inspect.isfunction(fn) else fn
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    code = getattr(fn, "__code__", None)
    if code is None:
        return set()
    glb = getattr(fn, "__globals__", {})
    seen, todo = set(), [code]
    while todo:
        co = todo.pop()
        if co in seen:
            continue
        seen.add(co)
        for c in co.co_consts:
            if hasattr(c, "co_code"):
                todo.append(c)
        for n in co.co_names:
            f = glb.get(n)
            if inspect.isfunction(f):
                todo.append(f.__code__)
    return seen


def explain(fn, args, kwargs):
    """Run fn once under cdynamo; an ExplainOutput of the graphs it ran and its breaks."""
    from . import _support, optimize, _is_optimized, _innermost
    # an optimized function or module runs as it is (its own backend, its cache entries);
    # anything else is optimized, as it is: a functools.wraps decorator's wrapper runs,
    # not the function it wraps
    run = fn if _is_optimized(fn) else optimize(fn)
    target = _innermost(fn)
    n_c, n_b, n_e = len(_support.compiles), len(_support.breaks), len(_support.eager)
    before = {id(r["compiled"]): r["compiled"].calls for r in _support.compiles
              if r.get("compiled") is not None}
    from . import _C
    outer = _C.explain_collect(True)      # an explain inside fn's call: resumed after
    try:
        out = run(*args, **kwargs)
    finally:
        seen = _C.explain_collect(False)
        if outer:
            _C.explain_collect(True)
    graphs = [r for r in _support.compiles[:n_c] if r.get("compiled") is not None and
              r["compiled"].calls > before.get(id(r["compiled"]), 0)]
    graphs += _support.compiles[n_c:]
    breaks = list(_support.breaks[n_b:])
    eager = list(_support.eager[n_e:])
    if not breaks and not eager:
        # nothing new was recorded (fn ran from the cache): report the breaks already
        # recorded for the functions it reaches
        where = {(c.co_filename, c.co_name) for c in _reachable_codes(target)}
        breaks = [b for b in _support.breaks[:n_b] if (b["filename"], b["function"]) in where]
        eager = [b for b in _support.eager[:n_e] if (b["filename"], b["function"]) in where]
    # every frame that ran eagerly: new records, and the frames that ran eagerly for a
    # reason recorded on an earlier call (a break, a skip, the recompile limit)
    eager += [r for r in seen if all(r is not e for e in eager)]
    return ExplainOutput(graphs, breaks, out, eager)


# --------------------------------------------------------------------------- profile

_FUSED = re.compile(r"/\* fused: (.*?)  \(outputs:[^)]*\)(?:.|\n)*?void (kernel_\d+)\(")


def kernel_ops(source):
    """{kernel symbol: "op, op, ..."} from the generated C's /* fused: ... */ comments."""
    return {m[2]: m[1] for m in _FUSED.finditer(source or "")}


def profile_rows():
    """(kernel name, fused ops, calls, total ns) of every profiled kernel call since the
    last reset, largest total first."""
    from . import _support
    rows = []
    for r in _support.compiles:
        c = r.get("compiled")
        prof = getattr(c, "kernel_profile", None) if c is not None else None
        if not prof:
            continue
        ops = kernel_ops(r.get("source"))
        for sym, calls, ns in prof:
            if calls:
                rows.append((f"{r['name']}.{sym}", ops.get(sym, "?"), calls, ns))
    rows.sort(key=lambda row: -row[3])
    return rows


def profile_report(file=None):
    """Print (to file, default stdout) and return a table of kernel times."""
    rows = profile_rows()
    if not rows:
        text = ("cdynamo profile: no kernel calls recorded (set cdynamo.config.profile_kernels "
                "= True before calling compiled functions)\n")
    else:
        w = max(len("kernel"), *(len(r[0]) for r in rows))
        wo = min(60, max(len("fused ops"), *(len(r[1]) for r in rows)))
        head = f"{'kernel':<{w}}  {'fused ops':<{wo}}  {'calls':>8}  {'total us':>12}  {'mean us':>10}"
        lines = [head, "-" * len(head)]
        for name, ops, calls, ns in rows:
            ops = ops if len(ops) <= wo else ops[:wo - 3] + "..."
            lines.append(f"{name:<{w}}  {ops:<{wo}}  {calls:>8}  {ns / 1e3:>12.1f}  "
                         f"{ns / 1e3 / calls:>10.2f}")
        text = "\n".join(lines) + "\n"
    (file or sys.stdout).write(text)
    return text
