"""tools/bias_fuse_ab.py OLD NEW THREADS [ROUNDS]: the GELU backward + bias-gradient kernels of
transformer_stack_train's backward, as two checkouts generate them (OLD: a pointwise kernel,
then the column sum; NEW: one kernel computing, storing and summing), compiled with the
generated files' flags and timed interleaved through ctypes at THREADS OpenMP threads on
random inputs (256 x 1024 floats); checks the outputs are bit for bit the same.  OLD / NEW are
checkouts with their extension built (setup.py build_ext --inplace)."""
import ctypes
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

GEN = r'''
import sys, torch, cdynamo
from cdynamo import bench
torch.set_num_threads(int(sys.argv[1]))
w = [w for w in bench.WORKLOADS if w.name == "transformer_stack_train"][0]
inputs, params = w.inputs(True), w.train_params()
step = bench._train_step(cdynamo.optimize(w.fn), params)
for _ in range(2):
    step(*inputs)
rec = [r for r in cdynamo._support.compiles if r["function"] == "backward"][-1]
open(sys.argv[2], "w").write(rec["source"])
'''
FLAGS = ("-O3 -march=native -fopenmp -shared -fPIC -std=c11 -fwrapv -ffp-contract=off "
         "-fno-math-errno -fno-loop-unroll-and-jam -nostdlib").split()


def build(checkout, threads, tmp, tag):
    src, so = os.path.join(tmp, tag + ".c"), os.path.join(tmp, tag + ".so")
    env = dict(os.environ, PYTHONPATH=os.path.join(checkout, "python"))
    subprocess.run([sys.executable, "-c", GEN, str(threads), src], cwd=checkout, env=env,
                   check=True)
    subprocess.run(["gcc", *FLAGS, src, "-o", so, "-lgcc", "-lgomp"], check=True)
    kernels, fused = [], None
    for line in open(src):
        if line.startswith("/* fused:"):
            fused = line.split("fused:")[1].split("(")[0].strip().split(", ")
        elif line.startswith("CDY_EXPORT") and fused is not None:
            kernels.append((line.split()[2].split("(")[0], fused, line.count("_ptr")))
            fused = None
    return ctypes.CDLL(so), kernels


def gelu_steps(lib, kernels):
    """Per GELU backward: the list of (function, nparams) that compute it and its sum."""
    out = []
    for i, (name, fused, n) in enumerate(kernels):
        if "gelu_exact_grad" in fused or "abs" in fused:
            steps = [(getattr(lib, name), n)]
            if "sum" not in fused:
                steps.append((getattr(lib, kernels[i + 1][0]), kernels[i + 1][2]))
            out.append(("x" if "gelu_exact_grad" in fused else "y", steps))
    return out


def main(old, new, threads, rounds):
    rng = np.random.default_rng(0)
    x = [rng.standard_normal(256 * 1024).astype(np.float32) for _ in range(3)]
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)   # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        sides = [gelu_steps(*build(c, threads, tmp, t)) for c, t in ((old, "old"), (new, "new"))]
        for k, ((form, so), (_, sn)) in enumerate(zip(*sides)):
            bufs = {}

            def run(steps, tag):
                nin = steps[0][1] - (1 if len(steps) == 2 else 2)
                p = bufs.setdefault(tag, np.zeros(256 * 1024, np.float32))
                s = bufs.setdefault(tag + "s", np.zeros(1024, np.float32))
                if len(steps) == 2:
                    steps[0][0](*[ptr(a) for a in x[:nin]], ptr(p))
                    steps[1][0](ptr(p), ptr(s))
                else:
                    steps[0][0](*[ptr(a) for a in x[:nin]], ptr(s), ptr(p))
            run(so, "o")
            run(sn, "n")
            same = np.array_equal(bufs["o"], bufs["n"]) and np.array_equal(bufs["os"], bufs["ns"])
            t = {"o": [], "n": []}
            for _ in range(rounds):
                for tag, steps in (("o", so), ("n", sn)):
                    t0 = time.perf_counter()
                    for _ in range(50):
                        run(steps, tag)
                    t[tag].append((time.perf_counter() - t0) / 50 * 1e6)
            med = {k2: sorted(v)[len(v) // 2] for k2, v in t.items()}
            print(f"gelu backward {k} ({form} form), {threads} threads: old {len(so)} kernels "
                  f"{med['o']:.1f} us, new {len(sn)} kernel {med['n']:.1f} us (median of "
                  f"{rounds}), outputs bit-identical: {same}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 9)
