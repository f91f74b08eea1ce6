"""tools/train_step_dist.py WORKLOAD THREADS: per-step time distribution (p10/p50/p90/mean, us) and minor
page faults per step of a training workload under eager, cdynamo and torch.compile in one process,
interleaved rounds of 10 steps (12 rounds), first with Python's garbage collector on, then off.
With CDYNAMO_HEAP_KEEP_MB set, glibc keeps freed heap memory mapped for all three."""
import gc, sys, time, resource, torch, cdynamo
from cdynamo import bench
torch.set_num_threads(int(sys.argv[2]))
name = sys.argv[1]
w = [w for w in bench.WORKLOADS if w.name == name][0]
inputs = w.inputs(True)
flt = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
steps = {}
for s, mk in (("eager", lambda f: f), ("cdy", cdynamo.optimize), ("tc", torch.compile)):
    steps[s] = bench._train_step(mk(w.fn), w.train_params())
    for _ in range(5): steps[s](*inputs)
def pct(xs, p): xs = sorted(xs); return xs[min(len(xs) - 1, int(p * len(xs)))]
for gcmode in ("gc-on", "gc-off"):
    if gcmode == "gc-off": gc.collect(); gc.disable()
    ts = {s: [] for s in steps}; fl = {s: 0 for s in steps}
    for r in range(12):
        for s, st in steps.items():
            f0 = flt()
            for _ in range(10):
                t = time.perf_counter(); st(*inputs); ts[s].append((time.perf_counter() - t) * 1e6)
            fl[s] += flt() - f0
    for s in steps:
        x = ts[s]
        print(f"{gcmode} {s:6s} p10 {pct(x,.1):7.0f} p50 {pct(x,.5):7.0f} p90 {pct(x,.9):7.0f} mean {sum(x)/len(x):7.0f}  faults/step {fl[s]/len(x):6.0f}", flush=True)
    gc.enable()
