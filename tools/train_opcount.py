"""tools/train_opcount.py WORKLOAD eager|cdy|tc: torch.profiler op counts and self CPU us per training step (1 thread, 10 steps)."""
import sys, torch, cdynamo
from cdynamo import bench
from torch.profiler import profile, ProfilerActivity
torch.set_num_threads(1)
name = sys.argv[1]; mode = sys.argv[2]
w = [w for w in bench.WORKLOADS if w.name == name][0]
inputs = w.inputs(True)
mk = {"eager": lambda f: f, "cdy": cdynamo.optimize, "tc": torch.compile}[mode]
step = bench._train_step(mk(w.fn), w.train_params())
for _ in range(4): step(*inputs)
with profile(activities=[ProfilerActivity.CPU]) as p:
    for _ in range(10): step(*inputs)
rows = sorted(p.key_averages(), key=lambda e: -e.count)
for e in rows[:40]:
    print(f"{e.key[:60]:60s} {e.count/10:7.1f} {e.self_cpu_time_total/10:9.1f}")
