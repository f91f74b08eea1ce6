"""cdynamo configuration. Read when a frame is compiled, never per call.

Environment variables set the defaults: CDYNAMO_CC, CDYNAMO_CACHE_DIR, CDYNAMO_DISABLE.
"""
import os

#: cache entries per code object before cdynamo stops recompiling it and runs it eagerly
cache_size_limit = 8

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
