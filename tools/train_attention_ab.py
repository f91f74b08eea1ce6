"""tools/train_attention_ab.py THREADS [STEPS ROUNDS]: the transformer stack's training
step (bench._Stack, 4x64 tokens, d=256) with config.fused_attention_training on and off,
compiled in one process and timed interleaved (us per step, forward / backward; one
thread: CPU time, else wall time), so that a loaded machine's swings hit both alike."""
import copy
import sys
import time

import torch

import cdynamo
from cdynamo import bench


def main(threads, steps, rounds):
    torch.set_num_threads(threads)
    clock = time.process_time if threads == 1 else time.perf_counter
    torch.manual_seed(0)
    m_on = bench._Stack()
    m_off = copy.deepcopy(m_on)
    x = torch.randn(4, 64, 256)

    def loss_on(x):
        return m_on(x).pow(2).mean()

    def loss_off(x):
        return m_off(x).pow(2).mean()

    def run(f, m, n):
        fw = bw = 0.0
        for _ in range(n):
            for p in m.parameters():
                p.grad = None
            t0 = clock()
            loss = f(x)
            t1 = clock()
            loss.backward()
            t2 = clock()
            fw += t1 - t0
            bw += t2 - t1
        return fw / n * 1e6, bw / n * 1e6

    variants = []
    for on, f, m in ((True, loss_on, m_on), (False, loss_off, m_off)):
        cdynamo.config.fused_attention_training = on   # read when the frame compiles
        f = cdynamo.optimize(f)
        run(f, m, 3)
        variants.append(("fused" if on else "unfused", f, m))
    cdynamo.config.fused_attention_training = True
    diff = max((a.grad - b.grad).abs().max().item() for a, b in
               zip(m_on.parameters(), m_off.parameters()))
    res = {name: [] for name, _, _ in variants}
    for _ in range(rounds):
        for name, f, m in variants:
            res[name].append(run(f, m, steps))
    print(f"stack training step, {threads} threads, {rounds} x {steps} steps; "
          f"largest gradient difference fused vs unfused {diff:.2e}")
    for name, v in res.items():
        v.sort(key=sum)
        med = v[len(v) // 2]
        print(f"  {name:8s} median fwd {med[0]:8.0f} bwd {med[1]:8.0f} total {sum(med):8.0f}"
              f"   min total {sum(v[0]):8.0f}")


if __name__ == "__main__":
    a = sys.argv[1:]
    main(int(a[0]), int(a[1]) if len(a) > 1 else 10, int(a[2]) if len(a) > 2 else 9)
