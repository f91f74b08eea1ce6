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


def _ints(s):
    return [int(p) for p in s.split(",") if p.strip()]


def parse_graph(text):
    """The graph text as dicts: inputs, scalars, nodes (in order) and outputs.
    Raises ValueError on a line it does not understand."""
    g = {"inputs": [], "scalars": {}, "nodes": [], "outputs": []}
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
        raise ValueError(f"unrecognised graph line: {line.strip()!r}")
    return g


def graph_ops(text):
    """Op names of the graph text's nodes, in order."""
    try:
        return [n["op"] for n in parse_graph(text)["nodes"]]
    except ValueError:
        return re.findall(r"^\s*%\d+ = (?!input |scalar )(\w+)\(", text or "", re.M)


# --------------------------------------------------------------------------- repro

_TORCH_OPS = {"add", "sub", "mul", "div", "maximum", "minimum", "neg", "abs", "exp", "log",
              "sqrt", "relu", "sigmoid", "tanh", "eq", "ne", "lt", "le", "gt", "ge", "where"}


def _scalar_literal(value, dtype):
    if dtype == "bool":
        return "True" if value not in ("0", "False") else "False"
    if dtype.startswith("float"):
        if value in ("inf", "-inf", "nan", "-nan"):
            return f"float({value.lstrip('-') if value == '-nan' else value!r})"
        return repr(float(value))
    return str(int(value))


def repro_function(g):
    """Python source of `fn`, the graph as torch calls (raises ValueError)."""
    names = {}
    params = []
    for i, inp in enumerate(g["inputs"]):
        names[inp["value"]] = f"in{i}"
        params.append(f"in{i}")
    lines = [f"def fn({', '.join(params)}):"]
    for inp, p in zip(g["inputs"], params):
        lines.append(f"    # {p}: {inp['name']} {inp['dtype']}{inp['sizes']} stride={inp['strides']}")
    for n in g["nodes"]:
        if n["op"] not in _TORCH_OPS:
            raise ValueError(f"op {n['op']!r} has no torch spelling in the repro generator")
        args = []
        for a in n["args"]:
            if a in names:
                args.append(names[a])
            elif a in g["scalars"]:
                args.append(_scalar_literal(*g["scalars"][a]))
            else:
                raise ValueError(f"%{n['value']} uses unknown value %{a}")
        names[n["value"]] = f"v{n['value']}"
        lines.append(f"    v{n['value']} = torch.{n['op']}({', '.join(args)})")
    outs = []
    for o in g["outputs"]:
        if o not in names:
            raise ValueError(f"output %{o} is not a tensor of the graph")
        outs.append(names[o])
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
(re-generated from graph.txt as torch calls) eagerly, under cdynamo backend="eager" and
under backend="c", and compares the results.  Prints "repro: OK" and exits 0 when they match;
prints the mismatch and exits 1 otherwise.
"""
import os
import sys
import tempfile

try:
    import cdynamo
except ImportError:
    sys.path.insert(0, {pkg_parent!r})
    import cdynamo
import torch

GRAPH = {graph!r}

# the user's source, for reference (the repro runs the graph below, not this):
{user_source}
{fn_source}
# (name, dtype, sizes, strides) of each input
INPUTS = {inputs!r}


def make_input(dtype, sizes, strides):
    """A tensor with these dtype, sizes and strides; its whole storage holds random values."""
    dt = getattr(torch, dtype)
    t = torch.empty_strided(sizes, strides, dtype=dt)
    n = 0 if 0 in sizes else 1 + sum((s - 1) * st for s, st in zip(sizes, strides))
    if dt.is_floating_point:
        fill = torch.randn(n, dtype=dt)
    elif dt == torch.bool:
        fill = torch.randint(0, 2, (n,)).bool()
    elif dt == torch.uint8:
        fill = torch.randint(0, 10, (n,), dtype=dt)
    else:
        fill = torch.randint(-10, 10, (n,), dtype=dt)
    if n:
        t.as_strided((n,), (1,), 0).copy_(fill)
    return t


def main():
    torch.manual_seed(0)
    if not os.environ.get("CDYNAMO_CACHE_DIR"):
        cdynamo.config.cache_dir = tempfile.mkdtemp(prefix="cdynamo-repro-")
    args = [make_input(dt, sz, st) for _, dt, sz, st in INPUTS]
    expected = fn(*args)
    ok = True
    for backend in ("eager", "c"):
        cdynamo.reset()
        try:
            got = cdynamo.optimize(fn, backend=backend)(*args)
        except Exception as e:  # noqa: BLE001
            print(f"repro: backend {{backend}} raised {{type(e).__name__}}: {{e}}")
            ok = False
            continue
        if cdynamo.stats()["frames_compiled"] < 1:
            print(f"repro: backend {{backend}}: cdynamo did not compile fn (it ran eagerly)")
            ok = False
            continue
        try:
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, equal_nan=True)
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
    try:
        g = parse_graph(info.get("graph"))
        fn_source = repro_function(g)
        inputs = [(i["name"], i["dtype"], i["sizes"], i["strides"]) for i in g["inputs"]]
    except ValueError as e:
        fn_source = (f"def fn(*args):\n    raise NotImplementedError("
                     f"{('cannot re-generate the graph: ' + str(e))!r})\n")
        inputs = []
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
        #: every frame that ran eagerly: a stopped trace (as in break_reasons), a frame
        #: with nothing to compile (NO_TENSOR_OPS), COMPILE_FAILED, RECOMPILE_LIMIT
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
    out = run(*args, **kwargs)
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
