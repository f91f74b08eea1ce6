"""tools/train_profile.py WORKLOAD THREADS [--source]: the per-kernel profile of a training
workload's compiled graphs (cdynamo.profile_report over 30 steps after 3 warm-up steps),
the number of kernels the report lists, and with --source the backward's generated source.
On a quiet many-core machine this says where a step's time goes beyond the matmuls."""
import gc
import sys

import torch

import cdynamo
from cdynamo import _autograd, bench


def main(name, threads, source):
    torch.set_num_threads(threads)
    w = [w for w in bench.WORKLOADS if w.name == name][0]
    inputs, params = w.inputs(True), w.train_params()
    step = bench._train_step(cdynamo.optimize(w.fn), params)
    for _ in range(3):
        step(*inputs)
    if source:
        for tg in (o for o in gc.get_objects() if isinstance(o, _autograd.TrainingGraph)):
            print(tg.source)
    cdynamo.config.profile_kernels = True
    for _ in range(30):
        step(*inputs)
    cdynamo.config.profile_kernels = False
    report = cdynamo.profile_report()   # printed by it
    print(f"{name}: {sum('.kernel_' in line for line in report.splitlines())} kernels "
          f"profiled, {threads} threads")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), "--source" in sys.argv[3:])
