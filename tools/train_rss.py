"""tools/train_rss.py WORKLOAD MODE(eager|cdynamo|step|pool|tc): steady-state RSS high-water (VmHWM after clear_refs 5) and minor faults per whole training step, fresh process per mode (issue 34)"""
import sys, os, torch, resource, cdynamo
from cdynamo import bench
torch.set_num_threads(int(os.environ.get("NT", "2")))
name, mode = sys.argv[1], sys.argv[2]
w = [w for w in bench.WORKLOADS if w.name == name][0]
inp = w.inputs(True); params = w.train_params()
f = w.fn if mode == "eager" else torch.compile(w.fn) if mode == "tc" else cdynamo.optimize(w.fn)
cdynamo.config.training_output_pool = {"pool": True, "step": "step"}.get(mode, False)
def status(k):
    for l in open("/proc/self/status"):
        if l.startswith(k): return int(l.split()[1]) / 1024
def step():
    for p in params: p.grad = None
    f(*inp).backward()
for _ in range(10): step()
open("/proc/self/clear_refs", "w").write("5")
r0 = status("VmRSS:"); m0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(30): step()
m1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
st = cdynamo._C.output_pool_stats(); print(st)
print(f"{name:24s} {mode:8s} rss before {r0:8.2f} MiB  hwm {status('VmHWM:'):8.2f}  hwm-before {status('VmHWM:')-r0:6.2f}  rss after {status('VmRSS:'):8.2f}  faults/step {(m1-m0)/30:7.1f}")
