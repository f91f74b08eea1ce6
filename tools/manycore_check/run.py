"""Time the kernels make.py wrote on this machine and check their results against
eager torch.  Each kernel is built twice, for its NTHREADS and for 1 thread, so the
table shows how it scales; eager (and with --inductor, torch.compile) runs at
torch.get_num_threads() threads.  GB/s
counts each input's and the result's bytes once; %copy is that over a 64 MB
torch copy's GB/s (read + write) at the same thread count.  A kernel's time is its
ctypes call (about 0.3 us), not cdynamo's call path (about 1.2 us on a Zen 3 core);
eager's and torch.compile's are whole Python calls."""
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import time

import torch

FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c11", "-fwrapv",
         "-ffp-contract=off", "-fno-math-errno", "-fno-loop-unroll-and-jam", "-nostdlib"]


def make(spec):
    dt = getattr(torch, spec["dtype"])
    if dt.is_floating_point:
        base = torch.randn(spec["storage"], dtype=dt)
    else:
        base = torch.randint(0, 100 if dt != torch.uint8 else 255, (spec["storage"],), dtype=dt)
    return base.as_strided(spec["size"], spec["stride"], spec["offset"])


def batches_us(f, reps, inner):
    """Per-call times (us) of reps batches of inner calls, after three untimed calls
    (eager's first calls after a pause page-fault its new buffers in)."""
    for _ in range(3):
        f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(inner):
            f()
        ts.append((time.perf_counter() - t) / inner * 1e6)
    return ts


def build(src_path, so_path, nthreads=None):
    src = open(src_path).read()
    if nthreads is not None:   # older kernels wrote a cheap kernel's smaller team as a literal
        src = re.sub(r"#define NTHREADS \d+", f"#define NTHREADS {nthreads}", src, count=1)
        src = re.sub(r"num_threads\(\d+\)", f"num_threads({nthreads})", src)
    tmp = so_path[:-3] + ".build.c"
    with open(tmp, "w") as f:
        f.write(src)
    subprocess.run(["gcc", *FLAGS, tmp, "-o", so_path, "-lgcc"], check=True)
    return ctypes.CDLL(so_path).kernel_0


def copy_gbs():
    src = torch.randn(16 << 20)
    dst = torch.empty_like(src)
    ts = batches_us(lambda: dst.copy_(src), 15, 5)
    return 2 * src.numel() * 4 / min(ts) / 1e3


def main():
    kdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernels")
    manifest = json.load(open(os.path.join(kdir, "manifest.json")))
    nth = torch.get_num_threads()
    copy = copy_gbs()
    print(f"torch {torch.__version__}, {nth} threads, {os.cpu_count()} CPUs; "
          f"copy {copy:.1f} GB/s (64 MB, read + write)")
    inductor = "--inductor" in sys.argv
    print(f"{'workload':18s} {'eager med':>10s} {'eager best':>10s} {'kernel':>9s} {'kernel@1':>9s} "
          f"{'x eager':>8s} {'x 1 thr':>8s} {'GB/s':>7s} {'%copy':>6s}  max err"
          + ("   inductor   x ind" if inductor else ""))
    compiled = (None, None)   # (function source, its torch.compile): variants share one
    bad = 0
    for m in manifest:
        src = os.path.join(kdir, m["name"] + ".c")
        kn = build(src, os.path.join(kdir, m["name"] + ".so"))
        k1 = build(src, os.path.join(kdir, m["name"] + "_1.so"), 1)
        ns = {"torch": torch}
        exec(m["fn"], ns)
        fn = ns[m["fn_name"]]
        torch.manual_seed(0)
        args = [make(s) for s in m["inputs"]]
        ref = fn(*args)
        outs = [torch.empty_like(ref) for p in m["params"] if p.startswith("out_ptr")]
        ptrs = [a.data_ptr() for a in args] + [o.data_ptr() for o in outs]
        if len(ptrs) != len(m["params"]):
            print(f"{m['name']:18s} parameters do not match ({m['params']})")
            bad += 1
            continue
        for k in (kn, k1):
            k.argtypes = [ctypes.c_void_p] * len(ptrs)
        res = outs[-1]
        errs = []
        for k in (kn, k1):
            res.zero_()
            k(*ptrs)
            try:
                torch.testing.assert_close(res, ref, rtol=m["rtol"], atol=m["atol"], equal_nan=True)
            except AssertionError as e:
                errs.append(str(e).splitlines()[0])
        if errs:
            print(f"{m['name']:18s} WRONG RESULT: {errs[0]}")
            bad += 1
            continue
        err = (res.double() - ref.double()).abs().max().item() if res.numel() else 0.0
        nbytes = sum(a.untyped_storage().nbytes() for a in args) + ref.numel() * ref.element_size()
        del ref
        t0 = time.perf_counter()
        fn(*args)
        inner = max(1, min(2000, int(0.02 / max(time.perf_counter() - t0, 1e-7))))
        e, c, c1 = [], [], []
        for _ in range(5):
            e += batches_us(lambda: fn(*args), 5, inner)
            c += batches_us(lambda: kn(*ptrs), 5, inner)
            c1 += batches_us(lambda: k1(*ptrs), 2, max(1, inner // 4))
        em, eb, cm, c1m = statistics.median(e), min(e), statistics.median(c), statistics.median(c1)
        gbs = nbytes / cm / 1e3
        tail = ""
        if inductor:
            if compiled[0] != m["fn"]:
                # torch.compile's wrappers share one code object: 8 functions would
                # reach its recompile limit
                torch._dynamo.reset()
                compiled = (m["fn"], torch.compile(fn))
            cf = compiled[1]
            cf(*args)
            im = statistics.median(sum((batches_us(lambda: cf(*args), 5, inner)
                                        for _ in range(3)), []))
            tail = f"  {im:9.1f} {im / cm:7.2f}"
        print(f"{m['name']:18s} {em:10.1f} {eb:10.1f} {cm:9.1f} {c1m:9.1f} {em / cm:8.2f} "
              f"{c1m / cm:8.2f} {gbs:7.1f} {100 * gbs / copy:5.0f}%  {err:.1e}" + tail)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
