"""tools/train_faults.py WORKLOAD THREADS SYSTEMS(eager,cdynamo,step,pool,tc) [steps]: minor faults per step split into grad reset / forward / backward, and thread CPU time (issue 34)"""
import sys, time, resource, torch
import cdynamo
from cdynamo import bench
name, th, systems = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
steps = int(sys.argv[4]) if len(sys.argv) > 4 else 30
torch.set_num_threads(th)
w = [w for w in bench.WORKLOADS if w.name == name][0]
inp = w.inputs(True); params = w.train_params()
def flt(): return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def run(f, n, pool=False):
    cdynamo.config.training_output_pool = pool
    a = b = c = 0; tf = tb = 0.0
    for _ in range(n):
        m0 = flt()
        for p in params: p.grad = None
        t0 = time.thread_time(); m1 = flt(); loss = f(*inp); m2 = flt(); t1 = time.thread_time()
        loss.backward(); m3 = flt(); t2 = time.thread_time()
        a += m1 - m0; b += m2 - m1; c += m3 - m2; tf += t1 - t0; tb += t2 - t1
    return a / n, b / n, c / n, tf / n * 1e6, tb / n * 1e6
fs = {}
for s in systems:
    if s == "eager": fs[s] = (w.fn, False)
    elif s in ("cdynamo", "step", "pool"):
        cf = cf if "cf" in dir() else cdynamo.optimize(w.fn)
        fs[s] = (cf, {"cdynamo": False, "step": "step", "pool": True}[s])
    elif s == "tc": fs[s] = (torch.compile(w.fn), False)
for s, (f, pool) in fs.items(): run(f, 5, pool)
res = {s: [] for s in fs}
for r in range(5):
    for s, (f, pool) in fs.items(): res[s].append(run(f, steps, pool))
for s, v in res.items():
    m = [sorted(x[i] for x in v)[len(v) // 2] for i in range(5)]
    print(f"{name:24s} {s:8s} faults reset {m[0]:7.1f} fwd {m[1]:7.1f} bwd {m[2]:7.1f}  cpu us fwd {m[3]:8.0f} bwd {m[4]:8.0f}")
print("maxrss MiB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
