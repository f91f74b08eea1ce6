"""tools/train_opcmp.py WORKLOAD THREADS: a training workload's step under torch.profiler, eager / torch.compile / cdynamo (inductor's kernels named by enable_kernel_profile): median step and the op table sorted by self CPU time, 10 steps each."""
import sys, time, torch
import cdynamo
from cdynamo import bench
name, th = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(th)
import torch._inductor.config as ic
ic.fallback_random = True
ic.cpp.enable_kernel_profile = True
w = [w for w in bench.WORKLOADS if w.name == name][0]
inputs = w.inputs(True)
for sysname, mk in (("eager", lambda f: f), ("tc", torch.compile), ("cdy", cdynamo.optimize)):
    params = w.train_params()
    step = bench._train_step(mk(w.fn), params)
    for _ in range(4):
        step(*inputs)
    ts = []
    for _ in range(20):
        t = time.perf_counter(); step(*inputs); ts.append(time.perf_counter() - t)
    ts.sort()
    print(f"== {name} {sysname} {th} threads: median {ts[10]*1e6:.0f} us, min {ts[0]*1e6:.0f}")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        for _ in range(10):
            step(*inputs)
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=28, max_name_column_width=60))
