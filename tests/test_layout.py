"""Convolutions in channels_last (csrc/trace/build_conv.c) and the layout pass
that lets the kernels after them follow (csrc/compiler/layout.c): results and
the strides the program sees are eager's."""
import pytest
import torch
import torch.nn.functional as F

import cdynamo
from conftest import check


def _compiled():
    return cdynamo._support.compiles[-1]["compiled"]


def _graph():
    return cdynamo._support.compiles[-1]["graph"]


def run(fn, *args):
    """fn compiled and eager on args: results equal, strides equal; the compiled result."""
    with torch.no_grad():
        want = fn(*args)
        got = cdynamo.optimize(fn)(*args)
        got = cdynamo.optimize(fn)(*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
        assert g.stride() == w.stride(), (g.stride(), w.stride())
    return got


def make(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


W1, B1, W2 = make(16, 3, 3, 3, seed=1), make(16, seed=2), make(8, 16, 3, 3, seed=3)


def test_conv_result_keeps_eager_strides():
    run(lambda x: F.conv2d(x, W1, B1, padding=1), make(2, 3, 12, 12))
    g = _graph()
    # input and weight copied to channels_last, the result copied back
    assert g.count("strided_copy(") == 3 and "stride=[432, 1, 36, 3]" in g, g


def test_conv_relu_pool_follow_channels_last():
    def f(x):
        y = F.max_pool2d(F.relu(F.conv2d(x, W1, B1, padding=1)), 2)
        return F.conv2d(y, W2)
    run(f, make(2, 3, 16, 16))
    ir = _compiled().ir_post_fusion
    # the pooling kernel runs channels_last (its buffer is internal) and vectorizes
    # over channels; the second conv reads that buffer as it is: no copy kernel
    assert "max_pool2d of %7 [2, 16, 16, 16] -> [2, 16, 8, 8] strides [1024, 1, 128, 16]" in ir, ir
    assert "omp simd over blocks of channels" in ir, ir
    assert ir.count("fuses: %14 strided_copy") == 0, ir


def test_pooled_result_returned_keeps_nchw():
    run(lambda x: F.max_pool2d(F.relu(F.conv2d(x, W1, B1, padding=1)), 2), make(2, 3, 8, 8))


@pytest.mark.parametrize("make_view", [
    lambda y: y.flatten(1), lambda y: y[:, :4], lambda y: y.permute(0, 2, 3, 1),
    lambda y: y.view(2, 16, -1).sum(-1), lambda y: y.mean((2, 3)), lambda y: y.softmax(1),
])
def test_conv_result_through_views_and_reductions(make_view):
    run(lambda x: make_view(F.relu(F.conv2d(x, W1, B1, padding=1)) * 2), make(2, 3, 6, 6))


def test_batch_norm_module_model():
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                            torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                            torch.nn.Conv2d(8, 16, 3, padding=1, groups=2),
                            torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                            torch.nn.Linear(16, 4)).eval()
    torch.manual_seed(0)
    for mod in m:
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-1, 1)
            mod.running_var.uniform_(0.5, 2)
    run(m, make(4, 3, 16, 16))
    assert cdynamo.stats()["graph_breaks"] == 0


def test_channels_last_input_gives_a_channels_last_result_as_eager():
    # torch's meta kernel says NCHW, the CPU kernel returns channels_last
    x = make(2, 3, 8, 8).to(memory_format=torch.channels_last)
    y = run(lambda x: F.conv2d(x, W1, B1), x)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert "strided_copy(" not in _graph()
    run(lambda x: F.conv2d(x, W1, B1).relu().flatten(2), x)   # a view of it, as eager's


def test_float64_and_stride_args():
    run(lambda x: F.conv2d(x, W1.double(), None, stride=2), make(2, 3, 9, 9).double())
    run(lambda x: F.conv2d(x, W1, B1, stride=(2, 1), padding=(0, 2), dilation=2),
        make(1, 3, 11, 10))
