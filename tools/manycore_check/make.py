"""Write the generated C of the bench's single-kernel workloads for a machine of
N threads (default 16) into kernels/, with manifest.json: each workload's eager
function (its source), its inputs (dtype, sizes, strides, storage offset) and its
kernel's parameters.  Run where cdynamo runs (CPython 3.11); run.py times the
kernels against eager torch on the machine of N cores (see run.sh)."""
import glob
import inspect
import json
import os
import re
import sys
import tempfile

import torch

import cdynamo
from cdynamo import bench

NAMES = ["pointwise_chain", "sigmoid_tanh", "where_cmp", "maximum_u8", "neg_u8", "hflip_u8",
         "vflip_u8", "channels_last_mul", "softmax", "layernorm_gelu", "row_sum", "int64_arith"]
SIG = re.compile(r"CDY_EXPORT (?:void|int) kernel_0\(([^)]*)\)")


def tensor_spec(t):
    return {"dtype": str(t.dtype).replace("torch.", ""), "size": list(t.shape),
            "stride": list(t.stride()), "offset": t.storage_offset(),
            "storage": t.untyped_storage().nbytes() // t.element_size()}


def main():
    nthreads = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "kernels")
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(nthreads)
    manifest = []
    for w in bench.WORKLOADS:
        if w.name not in NAMES:
            continue
        torch.manual_seed(0)
        args = w.inputs(False)
        with tempfile.TemporaryDirectory() as d:
            cdynamo.reset()
            cdynamo.config.debug = True
            cdynamo.config.debug_dir = d
            cdynamo.optimize(w.fn)(*args)
            cdynamo.config.debug = False
            srcs = glob.glob(os.path.join(d, "**", "output_code.c"), recursive=True)
            src = open(srcs[0]).read() if len(srcs) == 1 else ""
        if len(SIG.findall(src)) != 1 or "kernel_1(" in src:
            print(f"{w.name}: not one kernel, skipped")
            continue
        params = [p.split()[-1] for p in SIG.search(src).group(1).split(",")]
        with open(os.path.join(out, w.name + ".c"), "w") as f:
            f.write(src)
        manifest.append({"name": w.name, "fn": inspect.getsource(w.fn), "fn_name": w.fn.__name__,
                         "inputs": [tensor_spec(a) for a in args], "params": params,
                         "rtol": w.rtol, "atol": w.atol})
        print(f"{w.name}: {len(params)} parameters, NTHREADS {nthreads}")
    with open(os.path.join(here, "kernels", "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
