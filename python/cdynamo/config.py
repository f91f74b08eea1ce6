"""cdynamo configuration. Read when a frame is compiled, never per call.

Environment variables set the defaults: CDYNAMO_CC, CDYNAMO_CACHE_DIR, CDYNAMO_DISABLE,
CDYNAMO_DEBUG, CDYNAMO_OUTPUT_POOL_MB, CDYNAMO_STREAM_STORE_BYTES, CDYNAMO_STANDBY_COMPILER.
"""
import numbers
import os
import sys
import types

#: cache entries per code object before cdynamo stops recompiling it and runs it eagerly
cache_size_limit = 8

#: cache entries per code object in all: for a module's method, cache_size_limit counts the
#: entries made for one module instance (each layer of a stack may need its own)
accumulated_cache_size_limit = 64

#: C compiler command used for the generated kernels
cc = os.environ.get("CDYNAMO_CC", "gcc")


def _default_cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cdynamo")


#: where compiled kernels (.so) are cached; created private to the user (0700)
cache_dir = os.environ.get("CDYNAMO_CACHE_DIR") or _default_cache_dir()

#: CDYNAMO_DISABLE=1: optimize() returns the function unchanged
disable = os.environ.get("CDYNAMO_DISABLE", "") not in ("", "0")

#: OpenMP threads for new kernels; None follows torch.get_num_threads()
num_threads = None

#: with grad mode off, a float32 linear layer whose weight is a parameter keeps that weight
#: packed in oneDNN's layout between calls when timing shows it faster (MKL repacks it on
#: every call); False: torch's linear always; "always": packed without timing first
pack_linear_weights = True

#: a frame whose inputs require grad while grad mode is on compiles a forward and a
#: backward graph (the ops' derivative formulas, a torch.autograd.Function); False: such
#: frames run eagerly (reason AUTOGRAD)
compile_backward = True

#: in such a training graph, hand-written attention (float32, no mask) is one call of
#: torch's CPU flash kernel in the forward and one of its backward (passes/attention.c);
#: False: the matmuls and the softmax as written, differentiated one by one
fused_attention_training = True

#: with fused_attention_training on, the flash kernels serve attention whose query length
#: is at least this; shorter sequences take the lean unfused chain (q, k and v copied into
#: contiguous heads by the graph's kernels, torch's bmm, the softmax row kernels), as do
#: all with fused_attention_training off; 0: flash whenever it applies.  128: at 1 thread
#: the two tie at 64 tokens and flash leads by ~3% from 128 (host, CPU time); at 16 threads
#: (device, the stack's step, tools/train_attention_ab.py) they tie within 2% at 32, 64, 128
#: and 512 tokens, the lean chain 6% ahead at 256 (docs/bench/device-2026-11-30-stop50)
attention_flash_min_len = 128

#: CDYNAMO_DEBUG=1: write each compile's graph, IR, C code, guards, bytecode and a
#: repro.py under <debug_dir>/run_<date>-pid_<pid>/<function>_<n>/
debug = os.environ.get("CDYNAMO_DEBUG", "") not in ("", "0")

#: root of the debug directories; None: ./cdynamo_debug in the current directory
debug_dir = None

#: after each build of kernels in one compiler run, start the compiler for the next build
#: at once, parsing the part of the source every file shares and then waiting for the rest
#: (12-20 ms off a 60-120 ms build); an idle gcc and cc1 (about 21 MB resident) per process.
#: CDYNAMO_STANDBY_COMPILER=0 or False: each build starts its compiler itself
standby_compiler = os.environ.get("CDYNAMO_STANDBY_COMPILER", "") != "0"

#: at a graph break on a call, compile the graph up to it, make the call eagerly and go on
#: in a resume function that is traced and compiled in turn (issue 31); False: the whole
#: frame of a break runs eagerly
resume_after_break = True

#: optimize(dynamic=None): a frame whose cache entries all fail only because a tensor
#: input's size changed recompiles once with those dims symbolic (as torch.compile's
#: automatic_dynamic_shapes; sizes 0 and 1 stay specialized); False: every size is static
#: unless dynamic=True or mark_dynamic asks otherwise
automatic_dynamic_shapes = True



def _env_number(name, conv, default):
    """Environment variable name as conv (int or float), at least 0; default when unset
    or not a number."""
    v = os.environ.get(name, "")
    try:
        return max(conv(0), conv(v)) if v else default
    except ValueError:
        return default


def _count(name, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"cdynamo.config.{name} must be an int, got {type(v).__name__}: {v!r}")
    if v < 0:
        raise ValueError(f"cdynamo.config.{name} must be >= 0, got {v}")
    return int(v)


def _flag(name, v):
    if isinstance(v, bool) or (isinstance(v, numbers.Integral) and v in (0, 1)):
        return bool(v)
    raise TypeError(f"cdynamo.config.{name} must be True or False, got {type(v).__name__}: {v!r}")


def _path(name, v, none_ok):
    if v is None and none_ok:
        return None
    if isinstance(v, (str, os.PathLike)) and os.fspath(v):
        return os.fspath(v)
    raise TypeError(f"cdynamo.config.{name} must be a path (str){' or None' if none_ok else ''}, "
                    f"got {type(v).__name__}: {v!r}")


def _threads(name, v):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"cdynamo.config.{name} must be None or an int, got {type(v).__name__}: {v!r}")
    if v < 1:
        raise ValueError(f"cdynamo.config.{name} must be None or >= 1, got {v}")
    return int(v)


def _pack(name, v):
    if v is True or v is False or v == "always":
        return v
    raise ValueError(f"cdynamo.config.{name} must be True, False or 'always', got {v!r}")


#: the settings kept in the module's globals, each with the check (and conversion) of a
#: value assigned to it: a wrong type raises TypeError, a value out of range ValueError
_CHECKS = {
    "cache_size_limit": _count,
    "accumulated_cache_size_limit": _count,
    "cc": lambda n, v: _path(n, v, False),
    "cache_dir": lambda n, v: _path(n, v, False),
    "disable": _flag,
    "num_threads": _threads,
    "pack_linear_weights": _pack,
    "compile_backward": _flag,
    "fused_attention_training": _flag,
    "attention_flash_min_len": _count,
    "debug": _flag,
    "debug_dir": lambda n, v: _path(n, v, True),
    "standby_compiler": _flag,
    "resume_after_break": _flag,
    "automatic_dynamic_shapes": _flag,
}


class _Config(types.ModuleType):
    """The config module, with profile_kernels and output_pool_mb as properties that set the
    C runtime's state, and stream_store_bytes as one that checks its value.  Every setting
    checks what is assigned to it, and a name that is not a setting raises AttributeError
    naming the settings (a misspelled one would otherwise be ignored)."""

    def _names(self):
        props = [k for k, v in vars(type(self)).items() if isinstance(v, property)]
        return sorted(list(_CHECKS) + props)

    def __setattr__(self, name, value):
        if name.startswith("_"):
            return super().__setattr__(name, value)
        check = _CHECKS.get(name)
        if check is not None:
            value = check(name, value)
        elif not isinstance(getattr(type(self), name, None), property):
            raise AttributeError(f"cdynamo.config has no setting {name!r}; the settings are: "
                                 f"{', '.join(self._names())}")
        super().__setattr__(name, value)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"cdynamo.config has no setting {name!r}; the settings are: "
                             f"{', '.join(self._names())}")

    @property
    def output_pool_mb(self):
        """MB of freed compiled-graph tensors kept for reuse (CDYNAMO_OUTPUT_POOL_MB, default
        256). The tensors a compiled graph makes come from this pool, through torch's DLPack
        exchange API: a reused block costs no allocation call and no page faults. Such a
        tensor's storage grows as torch's do (resize_, out=: new memory from torch's CPU
        allocator, the block back to the pool); 0 turns the pool off and graphs allocate with torch.empty_like."""
        return self.__dict__.get("_output_pool_mb",
                                 _env_number("CDYNAMO_OUTPUT_POOL_MB", float, 256.0))

    @output_pool_mb.setter
    def output_pool_mb(self, mb):
        from . import _C
        mb = float(mb)
        if mb < 0:
            raise ValueError(f"cdynamo.config.output_pool_mb must be >= 0, got {mb}")
        _C.set_output_pool_bytes(int(mb * (1 << 20)))
        self.__dict__["_output_pool_mb"] = mb

    @property
    def training_output_pool(self):
        """Whether compiled training graphs (forward and backward, issue 34) take their tensors
        from the output pool (output_pool_mb). Default False: they allocate their tensors of
        1 KiB or more with torch, so the step's activations, freed in the backward as their
        last use passes, go back to torch's allocator as eager's do (the pool would keep them
        between steps: a step's peak memory above eager's); smaller ones still come from the
        pool (few bytes; through torch each would cost ~1 us).  "step": all of them (and the
        results of their matmul externs, through out=) from the pool's training free lists,
        which the end of each backward empties: the activations freed in the backward go back
        to the C allocator, and the blocks freed after it (the gradients the next step's
        zero_grad drops) serve the next forward without fresh pages (issue 34: minor page
        faults; host stack step 1160 -> ~600 faults, process RSS high-water not above eager's,
        but bench.step_peak_bytes, which adds torch's and the pool's peaks, counts it higher)."""
        return self.__dict__.get("_training_output_pool", False)

    @training_output_pool.setter
    def training_output_pool(self, on):
        from . import _C
        if on not in (False, True, "step"):
            raise ValueError(f"cdynamo.config.training_output_pool: False, True or 'step', got {on!r}")
        _C._train_set_pool({False: 0, "step": 1, True: 2}[on])
        self.__dict__["_training_output_pool"] = on

    @property
    def stream_store_bytes(self):
        """Kernels that move more than this many bytes (loads plus stores) write their outputs
        with non-temporal stores, past the caches: such an output could not stay cached for its
        next reader anyway, and a plain store would first read each line it writes. None: 3/4
        of this CPU's last-level cache (x86-64; elsewhere never); 0: never. Read when a frame
        is compiled (default: CDYNAMO_STREAM_STORE_BYTES)."""
        return self.__dict__.get("_stream_store_bytes",
                                 _env_number("CDYNAMO_STREAM_STORE_BYTES", int, None))

    @stream_store_bytes.setter
    def stream_store_bytes(self, n):
        if n is not None:
            if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
                raise ValueError("cdynamo.config.stream_store_bytes must be None or an int >= 0, "
                                 f"got {n!r}")
            n = int(n)
        self.__dict__["_stream_store_bytes"] = n

    @property
    def heap_keep_mb(self):
        """MB of freed memory glibc's malloc keeps mapped at the top of its heap between a
        free and the next allocation (M_TRIM_THRESHOLD; allocations up to 32 MiB then come
        from the heap, M_MMAP_THRESHOLD), or None (CDYNAMO_HEAP_KEEP_MB; default None: glibc's
        own dynamic thresholds, untouched).  A training step frees its gradients and
        activations at the heap's top, glibc gives them back to the kernel, and the next step
        faults each page in again: transformer_stack_train ~2000 minor faults a step, eager
        as much, ~5% of a 1-thread host step in the kernel (issue 34).  Process-wide (eager's
        allocations and torch's too) and one-way: glibc has no call that restores its dynamic
        thresholds, so None after a number raises.  Not glibc: no effect."""
        return self.__dict__.get("_heap_keep_mb",
                                 _env_number("CDYNAMO_HEAP_KEEP_MB", float, None))

    @heap_keep_mb.setter
    def heap_keep_mb(self, mb):
        from . import _C
        if mb is None:
            if self.heap_keep_mb is not None:
                raise ValueError("cdynamo.config.heap_keep_mb cannot go back to None: glibc "
                                 "cannot restore its dynamic thresholds")
            return
        if isinstance(mb, bool) or not isinstance(mb, numbers.Real) or not 0 <= mb < 2048:
            raise ValueError(f"cdynamo.config.heap_keep_mb must be None or a number of MB in "
                             f"[0, 2048), got {mb!r}")
        _C.set_heap_keep(int(mb * (1 << 20)))
        self.__dict__["_heap_keep_mb"] = mb

    @property
    def profile_kernels(self):
        """True: time every kernel call (see cdynamo.profile_report)."""
        return self.__dict__.get("_profile_kernels", False)

    @profile_kernels.setter
    def profile_kernels(self, flag):
        from . import _C
        _C.CompiledGraph.set_profile_kernels(bool(flag))
        self.__dict__["_profile_kernels"] = bool(flag)


sys.modules[__name__].__class__ = _Config
