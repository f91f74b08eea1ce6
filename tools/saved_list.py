"""Lists the tensors a training step saves for its backward (unique storages), eager vs
cdynamo, with their bytes."""
import sys, os
import torch
import cdynamo
from cdynamo import bench

torch.set_num_threads(1)
name = sys.argv[1]
w = {w.name: w for w in bench.WORKLOADS}[name]
torch.manual_seed(0)
inputs = w.inputs(False)
params = w.train_params()
pids = {p.untyped_storage().data_ptr() for p in params}
for sys_ in ("eager", "cdynamo"):
    f = w.fn if sys_ == "eager" else cdynamo.optimize(w.fn)
    for _ in range(2):
        for p in params: p.grad = None
        torch.manual_seed(0); f(*inputs).backward()
    seen = {}
    def pack(t):
        st = t.untyped_storage()
        k = st.data_ptr()
        if k not in pids and k not in {x.untyped_storage().data_ptr() for x in inputs}:
            seen.setdefault(k, (st.nbytes(), tuple(t.shape), str(t.dtype).replace("torch.", ""), t.grad_fn.name() if t.grad_fn else "-"))
        return t
    torch.manual_seed(0)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = f(*inputs)
    tot = sum(v[0] for v in seen.values())
    print(f"{sys_}: {len(seen)} saved storages, {tot/2**20:.3f} MiB")
    if os.environ.get("V"):
        from collections import Counter
        c = Counter((v[0], v[1], v[2]) for v in seen.values())
        for (nb, sh, dt), n in sorted(c.items(), key=lambda kv: -kv[0][0] * kv[1]):
            print(f"   {n:3d} x {nb/1024:8.1f} KiB {dt:8s} {sh}")
    loss.backward()
