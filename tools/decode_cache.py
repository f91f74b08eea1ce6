"""tools/decode_cache.py {eager,cd,tc} [f32|q8]: a decode-like loop over a preallocated KV
cache (issue 32): an attention block f(q, kc[:, :, :n], vc[:, :, :n], x) (B=1, H=8, D=64,
cache length 128) for n = 1..64, then o @ wo (512 x 512) and an RMSNorm; q8: an int8 cache
dequantized inside the function.  Prints the compiles (cdynamo's frames, torch.compile's
unique graphs), the first pass's wall time (with the compiles; every step checked against
eager) and the per-call CPU time (1 thread, min of 7 rounds of 5 x 64 steps)."""
import sys, time, torch
torch.set_num_threads(1)
which = sys.argv[1]
B, H, D, L = 1, 8, 64, 128
torch.manual_seed(0)
VARIANT = sys.argv[2] if len(sys.argv) > 2 else "f32"
if VARIANT == "q8":
    kc = torch.randint(-127, 127, (B, H, L, D), dtype=torch.int8); vc = torch.randint(-127, 127, (B, H, L, D), dtype=torch.int8)
else:
    kc = torch.randn(B, H, L, D); vc = torch.randn(B, H, L, D)
ks = torch.rand(1, H, 1, D) / 100; vs = torch.rand(1, H, 1, D) / 100
wo = torch.randn(H * D, H * D) / 23; g = torch.randn(H * D)
def block(q, k, v, x):
    if VARIANT == "q8":
        k = k.float() * ks
        v = v.float() * vs
    s = (q @ k.transpose(-1, -2)) * 0.125
    p = torch.softmax(s, -1)
    o = (p @ v).transpose(1, 2).reshape(B, 1, H * D)
    h = x + o @ wo
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * g
q = torch.randn(B, H, 1, D); x = torch.randn(B, 1, H * D)
if which == "eager":
    f = block
elif which == "tc":
    import torch._dynamo
    f = torch.compile(block)
else:
    import cdynamo
    f = cdynamo.optimize(block)
def compiles():
    if which == "tc":
        from torch._dynamo.utils import counters
        return counters["stats"]["unique_graphs"]
    if which == "eager":
        return 0
    return cdynamo.stats()["frames_compiled"]
ns = range(1, 65)
# round 0: includes compiles; check values
t0 = time.perf_counter()
for n in ns:
    out = f(q, kc[:, :, :n], vc[:, :, :n], x)
    ref = block(q, kc[:, :, :n], vc[:, :, :n], x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
first = time.perf_counter() - t0
best = None
for r in range(7):
    t0 = time.thread_time()
    for rep in range(5):
        for n in ns:
            f(q, kc[:, :, :n], vc[:, :, :n], x)
    t = (time.thread_time() - t0) / (5 * len(ns))
    best = t if best is None else min(best, t)
print(f"{VARIANT} {which}: compiles {compiles()}, first pass (64 steps, with compiles) {first:.2f} s, per call {best*1e6:.1f} us (CPU, min of 7)")
