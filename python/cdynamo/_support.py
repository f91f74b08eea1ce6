"""Slow-path helpers the C core calls: logging, warnings, graph-break records.

Nothing here runs on the per-call path of a compiled function.
"""
import dis
import io
import sys
import warnings

import torch

from . import config

TOPICS = ("recompiles", "graph_breaks", "guards", "bytecode", "output_code", "fusion", "debug",
          "stages", "dynamic")


class Unsupported(RuntimeError):
    """Raised under fullgraph=True when a frame cannot be compiled as one graph;
    .code is the stop's reason code (cdynamo.stop_reasons())."""

    def __init__(self, msg, code=None):
        super().__init__(msg)
        self.code = code


class CdynamoWarning(RuntimeWarning):
    """cdynamo fell back to eager execution; the message says why."""


#: graph breaks seen since the last reset: dicts with reason, code, category, filename,
#: line, function
breaks = []
#: frames that ran eagerly since the last reset (a trace stopped, nothing to compile,
#: compiling failed, the recompile limit): dicts as in breaks
eager = []


def parse_topics(spec):
    """Topics named in a CDYNAMO_LOGS value ("recompiles,guards", "+cdynamo", "all").
    Raises ValueError for a name that is not a topic, listing the topics (as TORCH_LOGS)."""
    names = {t.strip() for t in (spec or "").split(",") if t.strip()}
    every = {"all", "+cdynamo"}
    bad = sorted(names - set(TOPICS) - every)
    if bad:
        raise ValueError(f"CDYNAMO_LOGS={spec!r}: unknown topic{'s' if len(bad) > 1 else ''} "
                         f"{', '.join(bad)}; the topics are: {', '.join(TOPICS)} "
                         f"(comma separated; 'all' or '+cdynamo' for every one)")
    if names & every:
        names = (names - every) | set(TOPICS)
    return names


#: log topics on in this process (see set_log_topics)
topics = frozenset()


def set_log_topics(names):
    """Turn on exactly these log topics, in Python and in the C core."""
    global topics
    from . import _C
    topics = frozenset(names)
    _C.set_log_topics(topics)


def log_on(topic):
    return topic in topics


def log(topic, text):
    """Write text to stderr, each line prefixed with its topic."""
    out = "".join(f"[cdynamo:{topic}] {line}\n" for line in str(text).splitlines())
    sys.stderr.write(out)
    sys.stderr.flush()


def _dis(code):
    buf = io.StringIO()
    dis.dis(code, file=buf)
    return buf.getvalue()


def log_bytecode(orig, new):
    """ORIGINAL / MODIFIED BYTECODE listings of a transformed code object."""
    head = f"{orig.co_name} {orig.co_filename} line {orig.co_firstlineno}"
    log("bytecode", f"ORIGINAL BYTECODE {head}\n{_dis(orig)}\nMODIFIED BYTECODE {head}\n{_dis(new)}")


def warn_fallback(fn_name, reason):
    """One warning per distinct cause; the frame runs eagerly."""
    warnings.warn(f"cdynamo: could not compile {fn_name}: {reason}; running it eagerly",
                  CdynamoWarning, stacklevel=2)


def warn_cache(reason):
    """The kernel cache needed a repair (e.g. a corrupt entry was rebuilt); the
    compiled code is used as normal."""
    warnings.warn(f"cdynamo: {reason}", CdynamoWarning, stacklevel=2)


def warn_cache_limit(code, filename, why):
    warnings.warn(
        f"cdynamo: {code.co_name} ({filename}:{code.co_firstlineno}) hit the recompile limit "
        f"(cdynamo.config.cache_size_limit = {config.cache_size_limit}, counted per "
        f"nn.Module instance for a module's method; accumulated_cache_size_limit = {config.accumulated_cache_size_limit} in all); running "
        f"it eagerly from now on. Last guard failure: {why}", CdynamoWarning, stacklevel=2)


def _record(reason, filename, line, fn_name, code, category):
    return {"reason": reason, "code": code, "category": category, "filename": filename,
            "line": line, "function": fn_name}


#: stop codes (trace/reasons.def) of reasons a frame runs eagerly that the user can act on:
#: warned of once per function and place (other graph breaks are not: CDYNAMO_LOGS=
#: graph_breaks and explain show them)
ACTIONABLE = frozenset({"AUTOGRAD", "NO_DERIVATIVE", "DTYPE"})
#: (function, filename, line) already warned of since the last reset
_warned = set()


def record_break(reason, filename, line, fn_name, code="", category=""):
    """Record a frame's graph break (explain); warn once per function when it runs
    eagerly for a reason the user can act on (grad mode without compiled backward or an op
    without a derivative, a dtype: ACTIONABLE)."""
    breaks.append(_record(reason, filename, line, fn_name, code, category))
    if code in ACTIONABLE and (fn_name, filename, line) not in _warned:
        _warned.add((fn_name, filename, line))
        warnings.warn(f"cdynamo: {fn_name} runs eagerly, not compiled: {reason} (at "
                      f"{filename}:{line}; shown once per function, CDYNAMO_LOGS=graph_breaks "
                      f"logs every graph break)", CdynamoWarning, stacklevel=2)


def record_eager(reason, filename, line, fn_name, code="", category=""):
    """Record a frame that runs eagerly (explain's eager_frames); the record."""
    r = _record(reason, filename, line, fn_name, code, category)
    eager.append(r)
    return r


def raise_unsupported(reason, filename, line, code=None):
    raise Unsupported(f"{reason} (at {filename}:{line})", code)


def num_threads():
    n = config.num_threads
    return int(n) if n else torch.get_num_threads()


#: compiled entries since the last reset, as dicts (see on_compile); each keeps its
#: CompiledGraph ("compiled") alive until reset, for explain and profile_report
compiles = []
#: code object -> its entries in compiles, for explain on cached functions
by_code = {}


def clear():
    """Forget recorded breaks and compiles (cdynamo.reset)."""
    breaks.clear()
    eager.clear()
    _warned.clear()
    compiles.clear()
    by_code.clear()


def on_compile(info):
    """Called by the C core once per new compiled entry with its graph text, guards,
    original and new code, generated source, backend, compile time and op count.
    Records it, then writes the fusion / debug logs and the debug directory."""
    code = info["code"]
    compiled = info.get("compiled")
    rec = {k: info.get(k) for k in ("name", "graph", "guards", "backend", "compile_time_s",
                                    "op_count", "num_inputs", "source", "compiled")}
    rec |= {"code": code, "function": code.co_name, "filename": code.co_filename,
            "firstlineno": code.co_firstlineno,
            "ir_pre": getattr(compiled, "ir_pre_fusion", None),
            "ir_post": getattr(compiled, "ir_post_fusion", None)}
    compiles.append(rec)
    by_code.setdefault(code, []).append(rec)
    try:
        if log_on("fusion") or config.debug:
            from . import _debug   # not before: its import is 2-10 ms of a first compile
        head = f"{rec['name']} ({code.co_name}, {code.co_filename}:{code.co_firstlineno})"
        if log_on("fusion"):
            log("fusion", "\n".join(_debug.fusion_lines(head, rec["ir_post"])))
        if config.debug:
            d = _debug.write_debug_dir(info, rec)
            if log_on("debug"):
                log("debug", f"{head}: wrote {d}")
        if log_on("debug"):
            log("debug", f"{head}: backend {rec['backend']}, {rec['op_count']} ops, "
                         f"{rec['num_inputs']} inputs, compiled in "
                         f"{rec['compile_time_s'] * 1e3:.2f} ms\n"
                         f"{rec['graph'] or ''}{rec['ir_post'] or ''}")
    except Exception as e:  # noqa: BLE001  (the C core clears errors: say it here)
        warnings.warn(f"cdynamo: writing debug output for {rec['name']} failed: "
                      f"{type(e).__name__}: {e}", CdynamoWarning, stacklevel=2)


def training_graph(forward, src, consts, name, nuser, saved_inputs, grad_outputs,
                   input_outputs=()):
    """The callable of a training graph (trace/autograd.c): its compiled forward and the
    backward's source, made into a torch.autograd.Function (cdynamo._autograd);
    input_outputs: pairs (output, input) of the outputs that are inputs themselves."""
    from . import _autograd
    return _autograd.TrainingGraph(forward, src, consts, name, nuser, saved_inputs,
                                   grad_outputs, input_outputs).callable()
