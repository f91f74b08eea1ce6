"""Write the generated C of the bench's single-kernel workloads for a machine of
N threads (default 16) into kernels/, with manifest.json: each workload's eager
function (its source), its inputs (dtype, sizes, strides, storage offset) and its
kernel's parameters.  Run where cdynamo runs (CPython 3.11 - 3.13); run.py times the
kernels against eager torch on the machine of N cores (see run.sh).

    python make.py [N] [--streamed]

Kernels store plainly, as cdynamo generates them for a CPU whose last-level cache
holds these workloads (the device's 300 MB L3; cdynamo.config.stream_store_bytes);
--streamed adds a variant <name>_nt of each kernel that can stream its stores,
generated with every store streamed (stream_store_bytes = 1)."""
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


def generate(w, args):
    """The C of workload w on args, or "" when it is not one kernel."""
    with tempfile.TemporaryDirectory() as d:
        cdynamo.reset()
        cdynamo.config.debug = True
        cdynamo.config.debug_dir = d
        cdynamo.optimize(w.fn)(*args)
        cdynamo.config.debug = False
        srcs = glob.glob(os.path.join(d, "**", "output_code.c"), recursive=True)
        src = open(srcs[0]).read() if len(srcs) == 1 else ""
    return src if len(SIG.findall(src)) == 1 and "kernel_1(" not in src else ""


def main():
    pos = [a for a in sys.argv[1:] if not a.startswith("--")]
    nthreads = int(pos[0]) if pos else 16
    variants = [("", 0)] + ([("_nt", 1)] if "--streamed" in sys.argv else [])
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
        for suffix, stream in variants:
            cdynamo.config.stream_store_bytes = stream
            src = generate(w, args)
            if not src:
                print(f"{w.name}: not one kernel, skipped")
                break
            if stream and "cdy_stream(&" not in src:
                continue
            params = [p.split()[-1] for p in SIG.search(src).group(1).split(",")]
            with open(os.path.join(out, w.name + suffix + ".c"), "w") as f:
                f.write(src)
            manifest.append({"name": w.name + suffix, "fn": inspect.getsource(w.fn),
                             "fn_name": w.fn.__name__, "inputs": [tensor_spec(a) for a in args],
                             "params": params, "rtol": w.rtol, "atol": w.atol})
            print(f"{w.name + suffix}: {len(params)} parameters, NTHREADS {nthreads}")
    with open(os.path.join(here, "kernels", "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
