"""tools/train_op_shapes.py {eager|cdy} THREADS [OPS]: the aten ops of 10 training steps of
transformer_stack_train by input shapes (torch.profiler, record_shapes), each with its
calls and self CPU ms; OPS (comma-separated, e.g. aten::addmm,aten::fill_) keeps those
only.  Run both systems to compare one op's calls shape by shape (issue 34: addmm)."""
import sys

import torch
from torch.profiler import profile

import cdynamo
from cdynamo import bench


def main(mode, threads, names):
    torch.set_num_threads(threads)
    w = [w for w in bench.WORKLOADS if w.name == "transformer_stack_train"][0]
    inputs, params = w.inputs(True), w.train_params()
    step = bench._train_step(cdynamo.optimize(w.fn) if mode == "cdy" else w.fn, params)
    for _ in range(5):
        step(*inputs)
    with profile(record_shapes=True) as p:
        for _ in range(10):
            step(*inputs)
    for e in p.key_averages(group_by_input_shape=True):
        if not names or e.key in names:
            print(f"{mode:5s} {e.key:50s} n={e.count:4d} self={e.self_cpu_time_total / 1e3:8.2f} ms "
                  f"shapes={e.input_shapes}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",") if len(sys.argv) > 3 else None)
