"""tools/train_split.py WORKLOADS THREADS: per-step split on one workload: eager / cdynamo forward and backward, cdynamo
with cdynamo.config.training_output_pool on ("cdy+pool"), and the compiled graphs alone (tg.forward, tg.backward called
directly, under no_grad: their tensors come from the output pool, as cdy+pool's do) -> the per-call Python cost, and what
allocating the training graphs' tensors through torch costs (cdynamo vs cdy+pool).  "faults": minor page faults per
backward (fresh memory first touched: mmap / trim churn of the allocator)."""
import sys, time, gc, resource, torch
import cdynamo
from cdynamo import bench, _autograd
names = sys.argv[1].split(",")
torch.set_num_threads(int(sys.argv[2]))
seen = set()
# one thread: CPU time (what the step computes, robust on a loaded host); else wall time
clock = time.process_time if int(sys.argv[2]) == 1 else time.perf_counter


def med(xs):
    xs = sorted(xs); return xs[len(xs) // 2]
for name in names:
    w = [w for w in bench.WORKLOADS if w.name == name][0]
    inp = w.inputs(True); params = w.train_params()
    def run(f, n, pool=False):
        cdynamo.config.training_output_pool = pool
        fw = bw = flt = 0.0
        for _ in range(n):
            for p in params: p.grad = None
            t0 = clock(); loss = f(*inp); t1 = clock()
            m0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            loss.backward(); t2 = clock()
            flt += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - m0
            fw += t1 - t0; bw += t2 - t1
        cdynamo.config.training_output_pool = False
        return fw / n * 1e6, bw / n * 1e6, flt / n
    cf = cdynamo.optimize(w.fn)
    for f in (w.fn, cf): run(f, 30)
    tgs = [o for o in gc.get_objects()
           if isinstance(o, _autograd.TrainingGraph) and id(o) not in seen]
    seen.update(id(o) for o in tgs)
    rec = {}
    for tg in tgs:
        fwd, bwd = tg.forward, tg.backward
        def rf(*a, tg=tg, fwd=fwd): rec.setdefault(("f", id(tg)), (fwd, a)); return fwd(*a)
        def rb(*a, tg=tg, bwd=bwd): rec.setdefault(("b", id(tg)), (bwd, a)); return bwd(*a)
        tg.forward, tg.backward = rf, rb
    run(cf, 1)
    for tg in tgs:
        if ("f", id(tg)) in rec:
            tg.forward, tg.backward = rec[("f", id(tg))][0], rec[("b", id(tg))][0]
    def raw(n):
        t0 = clock()
        for _ in range(n):
            for k, (g, a) in rec.items():
                if k[0] == "f":
                    with torch.no_grad(): g(*a)
        t1 = clock()
        for _ in range(n):
            for k, (g, a) in rec.items():
                if k[0] == "b":
                    with torch.no_grad(): g(*a)
        t2 = clock()
        return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6, 0.0
    raw(20)
    res = {"eager": [], "cdynamo": [], "cdy+pool": [], "graphs": []}
    for r in range(9):
        res["eager"].append(run(w.fn, 50)); res["cdynamo"].append(run(cf, 50))
        res["cdy+pool"].append(run(cf, 50, True)); res["graphs"].append(raw(50))
    print(f"{name}: {len(tgs)} training graphs; us per step (median of 9 x 50)")
    for k, v in res.items():
        a, b, c = (med([x[i] for x in v]) for i in range(3))
        print(f"  {k:8s} fwd {a:8.1f}  bwd {b:8.1f}  total {a + b:8.1f}  faults {c:6.1f}")
    # python-only cost of the call path: forward/backward with trivial graphs
    sys.stdout.flush()
