"""Paper figures (MCUNetV2 Table 1 / Sec. 2, thesis Sec. 4.1): MobileNetV2 at 224², width 1.0, int8 memory.

The zoo model goes through the PyTorch frontend and `prepare_for_inference`; the analysis must reproduce the
published MACs and params, the first-conv memory (3·224² + 32·112² = 539 kB), the analytic per-layer peak and the
input patch 75² of a 7-pixel output patch of the first five blocks (down to 28²).
"""

import pytest

pytest.importorskip("torch")

from kilobyte.analysis import group_blocks, input_region, profile  # noqa: E402
from kilobyte.frontends import from_torch  # noqa: E402
from kilobyte.transforms import prepare_for_inference  # noqa: E402
from kilobyte.zoo import create  # noqa: E402


@pytest.fixture(scope="module")
def graph():
    module, shape = create("mobilenetv2")
    assert shape == (1, 3, 224, 224)
    return prepare_for_inference(from_torch(module, shape))


@pytest.fixture(scope="module")
def prof(graph):
    return profile(graph)


def test_inference_graph_has_no_training_ops(graph):
    assert {n.op.value for n in graph.nodes} <= {"CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "MEAN", "RESHAPE",
                                                  "FULLY_CONNECTED"}


def test_macs_and_params(prof):
    assert abs(prof.macs - 300.8e6) <= 0.005 * 300.8e6  # incl. the 1280 head conv and the 1000-class classifier
    assert abs(prof.params - 3.50e6) <= 0.01 * 3.50e6  # BN folded: one bias per channel instead of gamma + beta
    assert prof.layers[-1].macs == 1280 * 1000


def test_first_conv_memory(prof):
    first = prof.layers[0]
    assert (first.op, first.out_shape) == ("CONV_2D", (1, 112, 112, 32))
    assert first.in_bytes + first.out_bytes == 3 * 224 * 224 + 32 * 112 * 112 == 551_936  # "539 kB"


def test_analytic_peak_is_block_2_depthwise(prof, graph):
    # Block 2 (16 -> 24, stride 2): expand 1x1 to 96·112², depthwise s2 to 96·56². With no in-place depthwise the
    # depthwise holds its input and output: 96·112² + 96·56² (the expand conv needs 16·112² + 96·112² = 1372 kB).
    assert prof.peak_bytes == 96 * 112 * 112 + 96 * 56 * 56 == 1_505_280
    peak = graph.node(prof.peak_layer)
    assert peak.op.value == "DEPTHWISE_CONV_2D" and peak.attrs.stride == (2, 2)
    expand = prof.layers[[l.name for l in prof.layers].index(prof.peak_layer) - 1]
    assert expand.live_bytes == 16 * 112 * 112 + 96 * 112 * 112 == 1_404_928


def test_receptive_field_of_first_five_blocks(graph):
    blocks = group_blocks(graph)
    assert len(blocks[0]) == 1  # the stem conv is block 0; then one block per inverted-residual block
    stage_end = graph.node(blocks[4][-1])  # first conv + 4 inverted-residual blocks
    assert graph.tensors[stage_end.outputs[0]].shape == (1, 28, 28, 32)
    first_28 = next(n for n in graph.nodes if graph.tensors[n.outputs[0]].shape[1:3] == (28, 28))
    # 7 -> dw3 s2: 15 -> dw3 s1: 17 -> dw3 s2: 35 -> dw3 s1: 37 -> conv3 s2: 75
    assert input_region(graph, stage_end, 7) == input_region(graph, first_28, 7) == 75
