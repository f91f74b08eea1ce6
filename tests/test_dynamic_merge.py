"""Dynamic shapes (issue 32): a pointwise kernel whose loop merged two dims that are adjacent
only at the hints (x[:, :2] at sequence 2 is dense) walks them as two loops at every size, and
a getitem's int index after a slice (x[:, 0], i[0, :, 0]) keeps its symbolic rule: each
sweep compiles twice, every call equal to eager."""
import torch

import cdynamo
from conftest import assert_same


def _sweep(fn, make, seqs):
    cdynamo.reset()
    opt = cdynamo.optimize(fn)
    with torch.no_grad():
        for s in seqs:
            args = make(s)
            assert_same(fn(*args), opt(*args))
    return cdynamo.stats()["frames_compiled"]


def test_loops_merged_only_at_the_hints_are_split():
    def f(x):
        return x[:, :2] + 1, x * 3, x[:, :2].t() * x[:2, :2]
    assert _sweep(f, lambda s: (torch.randn(2, s),), [1, 2, 3, 4, 7, 12]) == 2


def test_int_index_after_a_slice_keeps_the_other_dims_symbolic():
    def f(x):
        return x[:, 0] * 2, x[0, :] + 1, x[:, :, 0] - 1
    assert _sweep(f, lambda s: (torch.randn(3, s, 4),), [5, 8, 13, 20]) == 2
