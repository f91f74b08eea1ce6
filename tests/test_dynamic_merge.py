"""Dynamic shapes (issue 32): a pointwise kernel whose loop merged two dims that are adjacent
only at the hints (x[:, :2] at sequence 2 is dense) walks them as two loops at every size, and
a getitem's int index after a slice (x[:, 0], i[0, :, 0]) keeps its symbolic rule: each
sweep compiles twice, every call equal to eager."""
import torch

from conftest import sweep_compiles


def test_loops_merged_only_at_the_hints_are_split():
    def f(x):
        return x[:, :2] + 1, x * 3, x[:, :2].t() * x[:2, :2]
    assert sweep_compiles(f, lambda s: (torch.randn(2, s),), [1, 2, 3, 4, 7, 12]) == 2

def test_int_index_after_a_slice_keeps_the_other_dims_symbolic():
    def f(x):
        return x[:, 0] * 2, x[0, :] + 1, x[:, :, 0] - 1
    assert sweep_compiles(f, lambda s: (torch.randn(3, s, 4),), [5, 8, 13, 20]) == 2
