"""Where a training step's torch-allocator peak is: the memory events of one step (as
bench.step_peak_bytes), the running total, and the ops around the peak."""
import sys
import torch
import cdynamo
from cdynamo import bench
from torch.profiler import profile, ProfilerActivity, record_function

import os
torch.set_num_threads(int(os.environ.get("NT", "1")))
name, system = sys.argv[1], sys.argv[2]
win = int(sys.argv[3]) if len(sys.argv) > 3 else 12
w = {w.name: w for w in bench.WORKLOADS}[name]
torch.manual_seed(0)
inputs = w.inputs(False)
params = w.train_params()
f = w.fn if system == "eager" else cdynamo.optimize(w.fn)
f = bench._train_step(f, params)
f(*inputs); f(*inputs)
with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
    f(*inputs)
    with record_function("bench_measured_step"):
        f(*inputs)
ev = prof.profiler.kineto_results.events()
mark = next(e for e in ev if e.name() == "bench_measured_step")
inside = [e for e in ev if mark.start_ns() <= e.start_ns() <= mark.end_ns()]
mem = sorted([e for e in inside if e.name() == "[memory]"], key=lambda e: e.start_ns())
ops = [e for e in inside if e.name() != "[memory]" and e.name() != "bench_measured_step"]
run = peak = 0; at = 0; tot = []
for i, e in enumerate(mem):
    run += e.nbytes(); tot.append(run)
    if run > peak:
        peak, at = run, i
def where(t):
    c = [o for o in ops if o.start_ns() <= t <= o.end_ns()]
    c.sort(key=lambda o: o.start_ns())
    return " > ".join(o.name() for o in c[-3:])
print(f"{name} {system}: peak {peak/2**20:.3f} MiB at event {at}/{len(mem)}")
for i in range(max(0, at - win), min(len(mem), at + 4)):
    e = mem[i]
    print(f"{'*' if i == at else ' '} {i:4d} {e.nbytes()/1024:+10.1f} KiB  total {tot[i]/2**20:7.3f}  {where(e.start_ns())}")
fb = next((i for i, e in enumerate(mem) if "Backward" in where(e.start_ns())), None)
if fb is not None:
    print(f"total at the backward's start: {tot[fb - 1]/2**20:.3f} MiB (event {fb})")
