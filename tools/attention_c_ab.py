"""tools/attention_c_ab.py THREADS STEPS {--c|--py}: the transformer stack's training step
(transformer_stack_train) with the attention calls runtime/attention.c's C functions (--c,
what cdynamo uses) or _autograd.py's Python forms (--py, the path before them: a
torch.isfinite(lse).all() per forward, lse.reshape(-1)[0].isnan() per backward): median
and min us per step (one thread: CPU time, else wall time) and the aten ops one step runs.
The callable is bound when the graph is compiled, so each mode is its own process: run
the two alternately, several rounds, e.g.
    for r in 1 2 3; do for m in --py --c; do python tools/attention_c_ab.py 16 60 $m; done; done
"""
import collections
import sys
import time

import torch
from torch.profiler import profile

import cdynamo
from cdynamo import _autograd, bench


def main(threads, steps, mode):
    if mode == "--py":
        _autograd.attention_forward = _autograd._attention_forward_py
        _autograd.attention_grads = _autograd._attention_grads_py
    torch.set_num_threads(threads)
    clock = time.process_time if threads == 1 else time.perf_counter
    w = [w for w in bench.WORKLOADS if w.name == "transformer_stack_train"][0]
    inputs, params = w.inputs(True), w.train_params()
    step = bench._train_step(cdynamo.optimize(w.fn), params)
    for _ in range(5):
        step(*inputs)
    ts = []
    for _ in range(steps):
        t = clock()
        step(*inputs)
        ts.append((clock() - t) * 1e6)
    ts.sort()
    with profile() as p:
        step(*inputs)
    ops = collections.Counter(e.name for e in p.events() if e.name.startswith("aten::"))
    print(f"{mode[2:]:3s} {threads} threads: median {ts[len(ts) // 2]:8.0f} us  min {ts[0]:8.0f} us "
          f"per step; {sum(ops.values())} aten ops a step")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else "--c")
