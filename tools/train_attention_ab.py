"""tools/train_attention_ab.py THREADS [STEPS ROUNDS [LENGTHS]]: the transformer stack's
training step (bench._Stack, batch 4, d=256, 4 heads) with its attention on torch's flash
kernels and on the lean unfused chain (config.attention_flash_min_len 0 and above the
length), compiled in one process and timed interleaved (us per step, forward / backward;
one thread: CPU time, else wall time), so that a loaded machine's swings hit both alike.
LENGTHS: comma-separated sequence lengths (default 64); one table per length, the
threshold for attention_flash_min_len read off where flash starts to win."""
import copy
import sys
import time

import torch

import cdynamo
from cdynamo import bench


def _run(clock, f, m, x, n):
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


def one_length(threads, steps, rounds, length):
    clock = time.process_time if threads == 1 else time.perf_counter
    torch.manual_seed(0)
    m_flash = bench._Stack()
    m_lean = copy.deepcopy(m_flash)
    x = torch.randn(4, length, 256)
    def loss_flash(x):   # two functions: one code object each, one compile each
        return m_flash(x).pow(2).mean()

    def loss_lean(x):
        return m_lean(x).pow(2).mean()

    variants = []
    for name, min_len, f, m in (("flash", 0, loss_flash, m_flash),
                                ("lean", length + 1, loss_lean, m_lean)):
        cdynamo.config.attention_flash_min_len = min_len   # read when the frame compiles
        f = cdynamo.optimize(f)
        _run(clock, f, m, x, 3)
        src = f(x).grad_fn.tg.source
        assert ("_attention_grads(" in src) == (name == "flash"), (name, src)
        variants.append((name, f, m))
    cdynamo.config.attention_flash_min_len = 0
    diff = max((a.grad - b.grad).abs().max().item() for a, b in
               zip(m_flash.parameters(), m_lean.parameters()))
    res = {name: [] for name, _, _ in variants}
    for _ in range(rounds):
        for name, f, m in variants:
            res[name].append(_run(clock, f, m, x, steps))
    print(f"stack training step, L={length}, {threads} threads, {rounds} x {steps} steps; "
          f"largest gradient difference flash vs lean {diff:.2e}")
    for name, v in res.items():
        v.sort(key=sum)
        med = v[len(v) // 2]
        print(f"  {name:6s} median fwd {med[0]:8.0f} bwd {med[1]:8.0f} total {sum(med):8.0f}"
              f"   min total {sum(v[0]):8.0f}")


def main(threads, steps, rounds, lengths):
    torch.set_num_threads(threads)
    for length in lengths:
        one_length(threads, steps, rounds, length)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(int(a[0]), int(a[1]) if len(a) > 1 else 10, int(a[2]) if len(a) > 2 else 9,
         [int(s) for s in a[3].split(",")] if len(a) > 3 else [64])
