"""tools/train_phases.py WORKLOADS THREADS [STEPS] [ROUNDS]: where a compiled training step's time goes,
without the torch profiler (whose per-op records inflate the self time of the graph nodes), from the
runtime's phase clocks (CompiledGraph.phase_timing, runtime.h's CDY_PHASES), in us per step:

  step       the whole bench step (grads reset, loss, backward)
  fwd / bwd  _train_forward / _train_backward whole (runtime/train_call.c)
  out        step - fwd - bwd: torch's Tensor.backward, the autograd engine, AccumulateGrad, the reset
  per graph  guards (the backward frame's guards, bwd only), inputs, alloc (outputs: torch or pool),
             kernels (generated kernels, OpenMP fork/join included), externs (torch calls: mm, attention,
             and their Python argument parsing), free (buffers dropped after their last step: torch's
             frees, munmap / heap trims), result; wrap = fwd (bwd) - its phases: the train_call
             plumbing, the backward frame's call and saved-tensor unpacking
  faults     minor page faults per step

One thread: the clocks are the thread's CPU clock (robust on a loaded host); more: wall clock.  Median over
ROUNDS rounds of STEPS steps."""
import os
import resource
import sys
import time

import torch

import cdynamo
from cdynamo import _C, bench

PARTS = ("guards", "inputs", "alloc", "kernels", "externs", "free", "result")


def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def measure(step, inputs, n, cpu):
    """One round of n steps: a dict of us per step."""
    clock = time.thread_time if cpu else time.perf_counter
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    _C.CompiledGraph.phase_timing("cpu" if cpu else True)
    t0 = clock()
    for _ in range(n):
        step(*inputs)
    t = clock() - t0
    ns = _C.CompiledGraph.phase_timing(False)
    r = {"step": t / n * 1e6,
         "faults": (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / n}
    r.update({k: v / n / 1000.0 for k, v in ns.items()})
    r["out"] = r["step"] - r["train_fwd"] - r["train_bwd"]
    r["fwd_wrap"] = r["train_fwd"] - sum(r[p] for p in PARTS)
    r["bwd_wrap"] = r["train_bwd"] - sum(r["bwd_" + p] for p in PARTS)
    return r


def main():
    names = sys.argv[1].split(",")
    threads = int(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    torch.set_num_threads(threads)
    for name in names:
        w = [w for w in bench.WORKLOADS if w.name == name][0]
        inputs = w.inputs(False)
        step = bench._train_step(cdynamo.optimize(w.fn), w.train_params())
        for _ in range(5):
            step(*inputs)
        rs = [measure(step, inputs, steps, threads == 1) for _ in range(rounds)]
        m = {k: med([r[k] for r in rs]) for k in rs[0]}
        print(f"{name} threads={threads} ({'thread CPU' if threads == 1 else 'wall'} us/step, "
              f"median of {rounds}x{steps}): step {m['step']:.0f} = fwd {m['train_fwd']:.0f} + "
              f"bwd {m['train_bwd']:.0f} + out {m['out']:.0f}; faults {m['faults']:.0f}")
        for g, pre in (("fwd", ""), ("bwd", "bwd_")):
            print(f"  {g}: " + "  ".join(f"{p} {m[pre + p]:.0f}" for p in PARTS) +
                  f"  wrap {m[g + '_wrap']:.0f}")
        sys.stdout.flush()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
