"""tools/train_view_parents.py WORKLOAD: per training step, the view / allocation ops torch.profiler records under a cdynamo step, by their parent chain (which of them our graphs call, which torch calls inside mm / linear / attention)."""
import sys, torch, cdynamo, collections
from cdynamo import bench
from torch.profiler import profile, ProfilerActivity
torch.set_num_threads(1)
name = sys.argv[1]
w = [w for w in bench.WORKLOADS if w.name == name][0]
inputs = w.inputs(True)
step = bench._train_step(cdynamo.optimize(w.fn), w.train_params())
for _ in range(4): step(*inputs)
with profile(activities=[ProfilerActivity.CPU]) as p:
    for _ in range(5): step(*inputs)
cnt = collections.Counter()
for e in p.events():
    if e.name in ("aten::as_strided", "aten::transpose", "aten::view", "aten::reshape", "aten::t", "aten::expand", "aten::slice", "aten::empty", "aten::detach", "aten::resolve_conj", "aten::narrow", "aten::permute", "aten::empty_like", "aten::empty_strided"):
        chain = []; q = e.cpu_parent
        while q is not None and len(chain) < 3:
            chain.append(q.name); q = q.cpu_parent
        cnt[(e.name, " < ".join(chain))] += 1
for (n, ch), k in sorted(cnt.items(), key=lambda x: -x[1]):
    print(f"{k/5:6.1f}  {n:20s} < {ch}")
