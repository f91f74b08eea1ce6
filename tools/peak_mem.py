"""Prints eager vs cdynamo peak memory (MiB) of one training step per bench workload,
measured as the bench does (cdynamo.bench.step_peak_bytes)."""
import sys
import torch
import cdynamo
from cdynamo import bench

import os
torch.set_num_threads(int(os.environ.get("NT", "1")))
names = sys.argv[1:] or ["mlp_train", "transformer_stack_train", "cnn_train", "bert_train"]
W = {w.name: w for w in bench.WORKLOADS}
for n in names:
    w = W[n]
    torch.manual_seed(0)
    inputs = w.inputs(False)
    params = w.train_params()
    eager = bench._train_step(w.fn, params)
    eager(*inputs); eager(*inputs)
    pe = bench.step_peak_bytes(eager, inputs)
    ref = eager(*inputs)
    f = bench._train_step(cdynamo.optimize(w.fn), params)
    out = f(*inputs); f(*inputs)
    pc = bench.step_peak_bytes(f, inputs, pool=True)
    ok = all(torch.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in zip(ref, f(*inputs)))
    print(f"{n:26s} eager {pe/2**20:7.3f} MiB  cdynamo {pc/2**20:7.3f} MiB  ok={ok}", flush=True)
