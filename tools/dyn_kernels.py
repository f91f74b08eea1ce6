"""Symbolic kernels (issue 32) against static kernels of the same sizes, side by side in one
run: per workload, compile once with every dim of the arguments symbolic
(cdynamo._C._dyn_test) and once static at each size; time the two compiled graphs' calls at
that size (interleaved rounds: the median round's and the best round's ratio; on a busy
machine the best rounds say more) and each compile's wall time.  Also checks both against eager.

    PYTHONPATH=python python tools/dyn_kernels.py [--quick] [--only NAME] [--threads N]
                                                  [--cpu-time]

--cpu-time times the calling thread's CPU time (time.thread_time) instead of wall time: on a
loaded host (other jobs preempting this one) the only steady clock; it counts this thread
alone, so use it with --threads 1 (the OpenMP workers' time is not in it).
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import cdynamo
from cdynamo import _C

LN_W, LN_B = torch.randn(1024), torch.randn(1024)
W1, B1, W2, B2 = torch.randn(1024, 256), torch.randn(1024), torch.randn(256, 1024), torch.randn(256)


def pointwise_chain(x):
    return (torch.sigmoid(x * 1.5 + 0.5) * x).tanh() - x


def row_sum(x):
    return x.sum(-1)


def softmax(x):
    return torch.softmax(x, -1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (1024,), w, b)


def mlp(x, w1, b1, w2, b2):
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)


def causal_softmax(x):
    """tril's IOTA index operands in a kernel, then softmax (issue 32's masks)."""
    return x.tril().softmax(-1)


def repeat_kv(x):
    """GQA's repeat_kv: an expand load, its copy loaded as a reshape."""
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, 2, s, d).reshape(b, h * 2, s, d) * 0.5


# name: (fn, make(size) -> args, sizes)
WORKLOADS = {
    "pointwise_chain": (pointwise_chain, lambda n: (torch.randn(n, 1024),), [8, 256, 4096]),
    "row_sum": (row_sum, lambda n: (torch.randn(n, 1024),), [8, 256, 4096]),
    "softmax": (softmax, lambda n: (torch.randn(n, 1000),), [8, 256, 4096]),
    "layer_norm": (layer_norm, lambda n: (torch.randn(n, 1024), LN_W, LN_B), [8, 256, 4096]),
    "mlp": (mlp, lambda n: (torch.randn(n, 256), W1, B1, W2, B2), [8, 64, 512]),
    "causal_softmax": (causal_softmax, lambda n: (torch.randn(4, n, n),), [16, 128, 512]),
    "square_softmax": (softmax, lambda n: (torch.randn(4, n, n),), [16, 128, 512]),
    "repeat_kv": (repeat_kv, lambda n: (torch.randn(2, 4, n, 64),), [16, 128, 1024]),
}


def compile_graph(fn, args, symbolic):
    """(CompiledGraph, compile seconds) of fn at args, symbolic or static."""
    cdynamo.reset()
    _C._dyn_test(symbolic)
    try:
        t0 = time.perf_counter()
        cdynamo.optimize(fn)(*args)
        dt = time.perf_counter() - t0
    finally:
        _C._dyn_test(False)
    return cdynamo._support.compiles[-1]["compiled"], dt


CLOCK = time.perf_counter     # --cpu-time: time.thread_time


def time_calls(g, args, calls):
    t0 = CLOCK()
    for _ in range(calls):
        g(*args)
    return (CLOCK() - t0) / calls


def run(name, quick):
    fn, make, sizes = WORKLOADS[name]
    if quick:
        sizes = sizes[:2]
    sym, t_sym = compile_graph(fn, make(sizes[0]), True)
    if not sym.symbols:
        print(f"{name}: compiled static (no symbolic kernels)")
        return
    for n in sizes:
        args = make(n)
        static, t_static = compile_graph(fn, args, False)
        want = fn(*args)
        torch.testing.assert_close(sym(*args), want, rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(static(*args), want, rtol=1e-3, atol=1e-3)
        one = time_calls(static, args, 3)
        calls = max(3, min(2000, int(0.02 / max(one, 1e-7))))
        ts, td = [], []
        for _ in range(7 if quick else 15):      # interleaved rounds: the same machine state
            ts.append(time_calls(static, args, calls))
            td.append(time_calls(sym, args, calls))
        s, d = statistics.median(ts), statistics.median(td)
        print(f"{name:16s} n={n:5d}  static {s * 1e6:9.1f} us  symbolic {d * 1e6:9.1f} us  "
              f"ratio {d / s:5.2f} (of the best rounds {min(td) / min(ts):5.2f})   "
              f"compile static {t_static * 1e3:6.0f} ms  symbolic {t_sym * 1e3:6.0f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", action="append")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--cpu-time", action="store_true")
    a = ap.parse_args()
    if a.cpu_time:
        global CLOCK
        CLOCK = time.thread_time
    if a.threads:
        torch.set_num_threads(a.threads)
    cdynamo.config.standby_compiler = False
    print(f"torch threads {torch.get_num_threads()}, clock "
          f"{'thread CPU time' if a.cpu_time else 'wall'}")
    for name in a.only or WORKLOADS:
        run(name, a.quick)


if __name__ == "__main__":
    with torch.no_grad():
        main()
