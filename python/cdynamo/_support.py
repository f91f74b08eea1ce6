"""Slow-path helpers the C core calls: logging, warnings, graph-break records.

Nothing here runs on the per-call path of a compiled function.
"""
import dis
import io
import sys
import warnings

import torch

from . import config

TOPICS = ("recompiles", "graph_breaks", "guards", "bytecode", "output_code", "fusion")


class Unsupported(RuntimeError):
    """Raised under fullgraph=True when a frame cannot be compiled as one graph."""


class CdynamoWarning(RuntimeWarning):
    """cdynamo fell back to eager execution; the message says why."""


#: graph breaks seen since the last reset: dicts with reason, filename, line, function
breaks = []


def parse_topics(spec):
    """Topics named in a CDYNAMO_LOGS value ("recompiles,guards", "+cdynamo", "all")."""
    names = {t.strip() for t in (spec or "").split(",") if t.strip()}
    if "all" in names or "+cdynamo" in names:
        names |= set(TOPICS)
    return names


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
        f"(cdynamo.config.cache_size_limit = {config.cache_size_limit}); running it eagerly from "
        f"now on. Last guard failure: {why}", CdynamoWarning, stacklevel=2)


def record_break(reason, filename, line, fn_name):
    breaks.append({"reason": reason, "filename": filename, "line": line, "function": fn_name})


def raise_unsupported(reason, filename, line):
    raise Unsupported(f"{reason} (at {filename}:{line})")


def num_threads():
    n = config.num_threads
    return int(n) if n else torch.get_num_threads()


#: compiled entries since the last reset, as dicts (see on_compile)
compiles = []


def on_compile(info):
    """Called by the C core once per new compiled entry with its graph text, guards,
    original and new code, generated source, backend, compile time and op count."""
    compiles.append({k: info[k] for k in ("name", "graph", "guards", "backend",
                                          "compile_time_s", "op_count", "num_inputs")}
                    | {"function": info["code"].co_name, "filename": info["code"].co_filename,
                       "firstlineno": info["code"].co_firstlineno})
