"""tools/train_matmul_ab.py WORKLOAD THREADS ROUNDS: per-step p10/p50/p90 of a training workload compiled by cdynamo with
the direct matmul forms (runtime/mmdirect.c) and without (_C.set_matmul_direct(False) before compiling), and by
torch.compile (its own random numbers: for dropout workloads use the bench), interleaved rounds of 10 steps."""
import sys, time, types, torch, cdynamo
from cdynamo import bench, _C
torch.set_num_threads(int(sys.argv[2]))
name, rounds = sys.argv[1], int(sys.argv[3])
w = [w for w in bench.WORKLOADS if w.name == name][0]
inputs = w.inputs(True)
steps = {}
for vname, flag in (("cdy", True), ("cdy_nodirect", False)):
    _C.set_matmul_direct(flag)
    fn = types.FunctionType(w.fn.__code__.replace(), w.fn.__globals__, w.fn.__name__)
    steps[vname] = bench._train_step(cdynamo.optimize(fn), w.train_params())
    for _ in range(4): steps[vname](*inputs)
_C.set_matmul_direct(True)
steps["tc"] = bench._train_step(torch.compile(w.fn), w.train_params())
for _ in range(4): steps["tc"](*inputs)
def pct(xs, p): xs = sorted(xs); return xs[min(len(xs) - 1, int(p * len(xs)))]
ts = {s: [] for s in steps}
for r in range(rounds):
    for s, st in steps.items():
        for _ in range(10):
            t = time.perf_counter(); st(*inputs); ts[s].append((time.perf_counter() - t) * 1e6)
tc = pct(ts["tc"], .5)
for s in steps:
    x = ts[s]
    print(f"{name} {s:13s} p10 {pct(x,.1):7.0f} p50 {pct(x,.5):7.0f} p90 {pct(x,.9):7.0f} mean {sum(x)/len(x):7.0f}  p50/tc {pct(x,.5)/tc:.3f}", flush=True)
