"""Float reference interpreter: each op against PyTorch (the oracle), NHWC vs NCHW handled here by hand."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kilobyte.interp import run_float
from kilobyte.ir import (
    Activation,
    ConvAttrs,
    DepthwiseAttrs,
    GraphBuilder,
    MeanAttrs,
    Op,
    PadAttrs,
    PoolAttrs,
    SoftmaxAttrs,
)


def nhwc(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy().transpose(0, 2, 3, 1)


@settings(max_examples=40)
@given(c=st.integers(1, 6), o=st.integers(1, 6), k=st.sampled_from([1, 3, 5]), s=st.integers(1, 2),
       pads=st.tuples(*[st.integers(0, 2)] * 4), h=st.integers(6, 12), w=st.integers(6, 12), dw=st.booleans(),
       act=st.sampled_from(list(Activation)))
def test_conv_and_depthwise_match_torch(c, o, k, s, pads, h, w, dw, act):
    torch.manual_seed(0)
    x = torch.randn(1, c, h, w)
    t, b, left, r = pads
    xp = torch.nn.functional.pad(x, (left, r, t, b))
    builder = GraphBuilder()
    i = builder.input((1, h, w, c))
    if dw:
        weight, bias = torch.randn(c, 1, k, k), torch.randn(c)
        ref = torch.nn.functional.conv2d(xp, weight, bias, stride=s, groups=c)
        y = builder.node(Op.DEPTHWISE_CONV_2D, [i], DepthwiseAttrs((s, s), pads, activation=act),
                         params={"weight": weight.numpy().transpose(1, 2, 3, 0), "bias": bias.numpy()})
    else:
        weight, bias = torch.randn(o, c, k, k), torch.randn(o)
        ref = torch.nn.functional.conv2d(xp, weight, bias, stride=s)
        y = builder.node(Op.CONV_2D, [i], ConvAttrs((s, s), pads, activation=act),
                         params={"weight": weight.numpy().transpose(0, 2, 3, 1), "bias": bias.numpy()})
    ref = {Activation.NONE: ref, Activation.RELU: ref.relu(), Activation.RELU6: ref.clamp(0, 6)}[act]
    out = run_float(builder.build([y]), nhwc(x))[y]
    np.testing.assert_allclose(out, nhwc(ref), atol=1e-4)


def test_pools_mean_pad_softmax_fc_match_torch():
    torch.manual_seed(1)
    x = torch.randn(1, 3, 9, 7)
    b = GraphBuilder()
    i = b.input((1, 9, 7, 3))
    mx = b.node(Op.MAX_POOL_2D, [i], PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1)))
    av = b.node(Op.AVG_POOL_2D, [i], PoolAttrs((3, 3), (2, 2), (1, 1, 1, 1)))
    pd = b.node(Op.PAD, [i], PadAttrs(((0, 0), (1, 2), (0, 1), (0, 0))))
    mn = b.node(Op.MEAN, [i], MeanAttrs((1, 2), False))
    fcw, fcb = torch.randn(4, 3), torch.randn(4)
    fc = b.node(Op.FULLY_CONNECTED, [mn], params={"weight": fcw.numpy(), "bias": fcb.numpy()})
    sm = b.node(Op.SOFTMAX, [fc], SoftmaxAttrs(1.0))
    out = run_float(b.build([mx, av, pd, sm]), nhwc(x))
    F = torch.nn.functional
    np.testing.assert_allclose(out[mx], nhwc(F.max_pool2d(x, 3, 2, 1)), atol=1e-5)
    np.testing.assert_allclose(out[av], nhwc(F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)), atol=1e-5)
    np.testing.assert_allclose(out[pd], nhwc(F.pad(x, (0, 1, 1, 2))), atol=1e-6)
    ref = F.softmax(F.linear(x.mean((2, 3)), fcw, fcb), dim=1)
    np.testing.assert_allclose(out[sm], ref.numpy(), atol=1e-5)
