"""cdynamo: a JIT compiler for PyTorch programs on the CPU, written in C.

    @cdynamo.optimize
    def f(x, y):
        return torch.relu(x * y + 1.0)

The first call traces the function's bytecode into a graph, compiles it to
C with OpenMP, and patches the bytecode to call the compiled code; later
calls whose guards pass run the compiled code straight from C.
"""
import functools
import os
import sysconfig
import types

import torch

from . import config
from ._support import CdynamoWarning, Unsupported, parse_topics
from . import _support, _C

__all__ = ["optimize", "disable", "reset", "stats", "config", "Unsupported", "CdynamoWarning",
           "explain", "profile_report", "set_profile_kernels",
           "overhead_breakdown", "stop_reasons", "mark_dynamic"]

_support.set_log_topics(parse_topics(os.environ.get("CDYNAMO_LOGS", "")))
config.output_pool_mb = config.output_pool_mb   # the environment's size, to the C runtime
if config.heap_keep_mb is not None:
    config.heap_keep_mb = config.heap_keep_mb   # CDYNAMO_HEAP_KEEP_MB, to glibc
# Frames from these files are never traced: torch's and the standard library's,
# and _attention.py and _autograd.py, which compiled graphs call (the rest of
# cdynamo's own Python never runs under the hook: the hook is off while tracing).
_C.set_skip_prefixes((os.path.dirname(torch.__file__) + os.sep,
                      sysconfig.get_paths()["stdlib"] + os.sep, "<frozen ",
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "_attention.py"),
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "_autograd.py")))

_BACKENDS = ("c", "eager")


def optimize(fn_or_module=None, *, backend="c", fullgraph=False, dynamic=None):
    """Compile fn (a function or callable) with cdynamo; usable bare or with arguments.

    backend: "c" (generate and compile C) or "eager" (trace, then run the graph
    with torch ops: isolates tracer bugs from compiler bugs).
    fullgraph: raise cdynamo.Unsupported instead of falling back to eager.
    dynamic: None (automatic: a size that changes between calls becomes symbolic at the
    recompile, config.automatic_dynamic_shapes), True (every dim of every tensor argument
    symbolic from the first compile), False (every size static and guarded).  Sizes 0 and 1
    always specialize; mark_dynamic(t, dim) marks dims of one tensor.
    """
    if backend not in _BACKENDS:
        raise ValueError(f"cdynamo.optimize: unknown backend {backend!r}; expected one of {_BACKENDS}")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise TypeError(f"cdynamo.optimize: dynamic must be None, True or False, got {dynamic!r}")
    if fn_or_module is None:
        return lambda fn: optimize(fn, backend=backend, fullgraph=fullgraph, dynamic=dynamic)
    if not callable(fn_or_module):
        raise TypeError(f"cdynamo.optimize expects a function or nn.Module, got "
                        f"{type(fn_or_module).__name__}: {fn_or_module!r}")
    if config.disable:
        return fn_or_module
    if backend == "c":
        _C.start_standby()    # the compiler starts while the first call traces
    if isinstance(fn_or_module, torch.nn.Module):
        return _optimize_module(fn_or_module, backend, bool(fullgraph), dynamic)
    wrapper = _C.OptimizedFunction(fn_or_module, backend, bool(fullgraph), dynamic=dynamic)
    return _wraps(wrapper, fn_or_module)


def _wraps(wrapper, fn):
    """wrapper with fn's functools.wraps attributes (__name__, __qualname__, __doc__,
    __module__, __annotations__, __dict__'s contents, __wrapped__): inspect.signature and
    the like see fn through it, as through torch.compile's wrappers.  A module's __dict__
    (its parameters, training flag...) is not copied: the wrapper would hold stale copies."""
    functools.update_wrapper(wrapper, fn, updated=() if isinstance(fn, torch.nn.Module)
                             else functools.WRAPPER_UPDATES)
    return wrapper


#: (module class, backend, fullgraph) -> the subclass optimize(module) returns instances
#: of: made once per class, so that modules optimized twice (or by explain) share their
#: type and the guards on it, and compiled entries
_module_classes = {}


def _optimized_class(cls, backend, fullgraph, dynamic=None):
    """The subclass of cls whose forward is compiled (see _optimize_module)."""
    key = (cls, backend, fullgraph, dynamic)
    sub = _module_classes.get(key)
    if sub is None:
        # owner: a forward replaced on cls later is called (and compiled) instead
        forward = _wraps(_C.OptimizedFunction(cls.forward, backend, fullgraph, dynamic=dynamic,
                                              owner=cls), cls.forward)
        sub = type(cls.__name__, (cls,), {
            "forward": forward,
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            # the original module, held by the view (its __dict__ is the original's)
            "__slots__": ("_cdynamo_orig_mod",),
            "_cdynamo_options": (backend, fullgraph, dynamic),
            "__reduce_ex__": _reduce_optimized_module,
        })
        _module_classes[key] = sub
    return sub


def _optimize_module(mod, backend, fullgraph, dynamic=None):
    """The module, seen through a subclass whose forward is compiled.

    The returned object shares the original's __dict__: the same parameters,
    buffers, submodules, state_dict and training flag, and nn.Module.__call__
    still runs its hooks before the (compiled) forward.
    """
    mod = _orig_module(mod)
    opt = object.__new__(_optimized_class(type(mod), backend, fullgraph, dynamic))
    object.__setattr__(opt, "__dict__", mod.__dict__)
    object.__setattr__(opt, "_cdynamo_orig_mod", mod)
    return opt


def _orig_module(mod):
    """The module an optimized module views (mod itself when it is not one)."""
    while hasattr(type(mod), "_cdynamo_options"):
        mod = mod._cdynamo_orig_mod
    return mod


def _reduce_optimized_module(self, proto):
    """Pickle (and copy.deepcopy) an optimized module as its original module and the
    options: it loads as an optimized module again, as torch.compile's OptimizedModule."""
    return (_rebuild_optimized_module, (self._cdynamo_orig_mod,) + type(self)._cdynamo_options)


def _rebuild_optimized_module(mod, backend="c", fullgraph=False, dynamic=None):
    """cdynamo.optimize(mod) for a module loaded by pickle / torch.load or deep-copied."""
    return optimize(mod, backend=backend, fullgraph=fullgraph, dynamic=dynamic)


def mark_dynamic(t, dim):
    """Mark dim (an int or a list of ints, negative counting from the end) of tensor t
    dynamic: a frame compiled with t as an input makes those dims symbolic from its first
    compile (unless optimize(dynamic=False)).  Stored on the tensor as torch's
    _dynamo_dynamic_indices, so torch._dynamo.mark_dynamic's marks count too.  Sizes 0 and 1
    still specialize; a dim the compiled code cannot keep symbolic specializes (the dynamic
    log says why)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"cdynamo.mark_dynamic expects a tensor, got {type(t).__name__}")
    dims = [dim] if isinstance(dim, int) else list(dim)
    marked = set(getattr(t, "_dynamo_dynamic_indices", ()))
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise TypeError(f"cdynamo.mark_dynamic: dim must be an int or a list of ints, got {d!r}")
        if not -t.dim() <= d < t.dim():
            raise IndexError(f"cdynamo.mark_dynamic: dim {d} out of range for a tensor of "
                             f"{t.dim()} dims")
        marked.add(d % t.dim())
    t._dynamo_dynamic_indices = marked


def _is_optimized(fn):
    """Whether fn was made by optimize: an optimized function or module, or a method
    bound from one (an optimized module's forward)."""
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    if isinstance(fn, _C.OptimizedFunction):
        return fn._enabled
    return isinstance(fn, torch.nn.Module) and hasattr(type(fn), "_cdynamo_options")


def _innermost(fn):
    """What fn runs under optimize / disable wrappers: the function or module itself."""
    while True:
        if isinstance(fn, _C.OptimizedFunction):
            fn = fn._orig_fn
        elif isinstance(fn, torch.nn.Module) and hasattr(type(fn), "_cdynamo_options"):
            fn = _orig_module(fn)
        else:
            return fn


def disable(fn):
    """Run fn without cdynamo, also when called from an optimized function.  Handed an
    optimized function or module, runs what it wraps (as torch._dynamo.disable does)."""
    if not callable(fn):
        raise TypeError(f"cdynamo.disable expects a callable, got {type(fn).__name__}: {fn!r}")
    fn = _innermost(fn)
    return _wraps(_C.OptimizedFunction(fn, "c", False, False), fn)


def reset():
    """Forget all compiled code and counters; free the tensor pool's cached blocks."""
    _C.reset()
    _C.clear_output_pool()
    _support.clear()


def stop_reasons():
    """{code: (category, message template)} of every reason a trace stops or a frame
    runs eagerly (the table csrc/trace/reasons.def).  Categories: unsupported,
    user_error, fallback (torch raised while tracing), limit, internal, skip.  The
    codes are what explain's break_reasons[i].code, Unsupported.code and the
    graph_breaks log name."""
    return _C.stop_reasons()


def stats():
    """Counters: frames_seen, frames_compiled, cache_hits, cache_misses, recompiles,
    graph_breaks, fallbacks, kernels_compiled, disk_cache_hits, standby_builds (kernel
    libraries built by a compiler started ahead, after the previous build), direct_calls (cache hits
    that called the compiled graph without running the function's frame),
    packed_linear_calls (linear layers run on a packed weight, see
    config.pack_linear_weights) and weight_packs (weights packed, once each until the
    weight changes)."""
    return _C.stats()


def explain(fn):
    """explain(fn)(*args, **kwargs): run fn once under cdynamo and return an ExplainOutput
    with graph_count, graph_break_count, break_reasons (reason, filename, line, location),
    op_count, ops_per_graph, guards, compile_time_s and out (fn's result).  print() it
    for a summary.  Functions already compiled for these inputs report their cached graphs."""
    from . import _debug
    if not callable(fn):
        raise TypeError(f"cdynamo.explain expects a function, an nn.Module or an optimized "
                        f"one, got {type(fn).__name__}: {fn!r:.80}")

    def run(*args, **kwargs):
        return _debug.explain(fn, args, kwargs)
    return run


def set_profile_kernels(flag=True):
    """Time every kernel call of compiled graphs (same as cdynamo.config.profile_kernels = flag)."""
    config.profile_kernels = bool(flag)


def _fold_phases(ns):
    """The runtime's phase clocks (CompiledGraph.phase_timing: finer, and a bank for training
    backwards) as overhead_breakdown's exclusive parts: kernels with the extern calls and the
    buffers freed between steps; the training totals, which include the rest, left out."""
    out = dict.fromkeys(("guards", "inputs", "alloc", "kernels", "result"), 0)
    for k, v in ns.items():
        k = k.removeprefix("bwd_")
        if k in ("externs", "free"):
            k = "kernels"
        if k in out:
            out[k] += v
    return out


def overhead_breakdown(fn, *args, calls=20000):
    """Where the time of a call of the optimized fn(*args) goes, in µs per call.

    Calls fn(*args) twice (compiling it if needed), then `calls` times with the
    runtime's phase clocks on, and returns a dict: guards (checking the cache
    entry's guards), inputs (reading the input tensors' data pointers), alloc
    (allocating the outputs and intermediate buffers), kernels (the generated
    kernels and extern torch calls), result (building the result, releasing
    buffers), other (the rest: the Python call, argument passing, the frame when
    the call is not direct), total, and direct (whether the calls skipped the
    function's frame).  The clocks cost about 0.1 µs per call, included in total."""
    import time
    if not _is_optimized(fn):
        raise TypeError(f"cdynamo.overhead_breakdown expects a function or module returned by "
                        f"cdynamo.optimize, got {type(fn).__name__}: {fn!r:.80} (not optimized: "
                        f"its calls run no compiled graph to time)")
    fn(*args)
    fn(*args)
    before = stats()["direct_calls"]
    _C.CompiledGraph.phase_timing(True)
    try:
        t = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        total = time.perf_counter() - t
    finally:
        ns = _C.CompiledGraph.phase_timing(False)
    ns = _fold_phases(ns)
    out = {k: v / calls / 1000.0 for k, v in ns.items()}
    out["total"] = total / calls * 1e6
    out["other"] = out["total"] - sum(ns.values()) / calls / 1000.0
    out["direct"] = stats()["direct_calls"] - before == calls
    return out


def profile_report(file=None):
    """Print (to file, default stdout) and return a table of the kernels timed while
    cdynamo.config.profile_kernels was on: kernel, fused ops, calls, total and mean µs,
    largest total first.  Counts run from the compile (or reset) of each graph."""
    from . import _debug
    return _debug.profile_report(file)
