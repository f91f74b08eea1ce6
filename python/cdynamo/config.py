"""cdynamo configuration. Read when a frame is compiled, never per call.

Environment variables set the defaults: CDYNAMO_CC, CDYNAMO_CACHE_DIR, CDYNAMO_DISABLE,
CDYNAMO_DEBUG.
"""
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

#: CDYNAMO_DEBUG=1: write each compile's graph, IR, C code, guards, bytecode and a
#: repro.py under <debug_dir>/run_<date>-pid_<pid>/<function>_<n>/
debug = os.environ.get("CDYNAMO_DEBUG", "") not in ("", "0")

#: root of the debug directories; None: ./cdynamo_debug in the current directory
debug_dir = None


class _Config(types.ModuleType):
    """The config module, with profile_kernels as a property that sets the C runtime's flag."""

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
