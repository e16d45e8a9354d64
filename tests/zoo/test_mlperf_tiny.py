"""The MLPerf Tiny reference model shapes in the zoo: their published sizes, imported exactly, quantised, compiled
and bit-exact with TFLite Micro on the host and on QEMU Cortex-M7 with both kernel sets.

Oracles: PyTorch (float import), the published MACs / parameter counts of the reference models, TFLite Micro and
the numpy reference (generated C on host and emulated Cortex-M).
"""

from __future__ import annotations

import numpy as np
import pytest

from kilobyte import zoo
from kilobyte.analysis import profile
from kilobyte.codegen import compile_graph
from kilobyte.driver.verify import verify_project
from kilobyte.schedule.plan_types import PlanOptions


def _kws() -> tuple[int, int]:
    """(MACs, params) of DS-CNN (small) counted by hand from its layer list: a 10x4/2 conv to 25x5x64, four
    depthwise 3x3 + pointwise 64 pairs, FC 64 -> 12 (BN folded into the convs' biases)."""
    px = 25 * 5
    macs = px * 64 * 40 + 4 * (px * 64 * 9 + px * 64 * 64) + 64 * 12
    params = (40 * 64 + 64) + 4 * ((9 * 64 + 64) + (64 * 64 + 64)) + (64 * 12 + 12)
    return macs, params


def _autoencoder() -> tuple[int, int]:
    sizes = [640] + [128] * 4 + [8] + [128] * 4 + [640]
    return sum(a * b for a, b in zip(sizes, sizes[1:])), sum(a * b + b for a, b in zip(sizes, sizes[1:]))


def _resnet8() -> tuple[int, int]:
    convs = [(32 * 32, 3, 16, 9), (32 * 32, 16, 16, 9), (32 * 32, 16, 16, 9),  # stem, stack 1
             (16 * 16, 16, 32, 9), (16 * 16, 32, 32, 9), (16 * 16, 16, 32, 1),  # stack 2 and its projection
             (8 * 8, 32, 64, 9), (8 * 8, 64, 64, 9), (8 * 8, 32, 64, 1)]  # stack 3
    macs = sum(px * cin * cout * k for px, cin, cout, k in convs) + 64 * 10
    params = sum(cin * cout * k + cout for _, cin, cout, k in convs) + 64 * 10 + 10
    return macs, params


HAND_COUNTED = {"kws-dscnn": _kws(), "ad-autoencoder": _autoencoder(), "ic-resnet8": _resnet8()}


@pytest.mark.parametrize("name", sorted(HAND_COUNTED))
def test_sizes_match_the_layer_lists(name):
    from kilobyte.api import load

    p = profile(load(name).graph)
    assert (p.macs, p.params) == HAND_COUNTED[name]


@pytest.mark.parametrize("name", zoo.names("mlperf-tiny"))
def test_float_import_equals_pytorch(name):
    torch = pytest.importorskip("torch")
    from kilobyte.api import load
    from kilobyte.interp import run_float

    model = load(name)
    x = torch.randn(model.input_shape_nchw, generator=torch.Generator().manual_seed(0))
    want = model.module(x).detach().numpy()
    got = run_float(model.graph, x.numpy().transpose(0, 2, 3, 1))[model.graph.outputs[0]]
    # folded BN reorders float32 rounding: compare on the scale of the outputs (untrained, they reach ~1e3)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from random_nets import quantized

    from kilobyte.api import load

    cache = {}

    def get(name, kernels):
        if (name, kernels) not in cache:
            qgraph, unseen = quantized(load(name).graph, seed=len(name), n=4)
            cache[name, kernels] = (compile_graph(qgraph, tmp_path_factory.mktemp(name), PlanOptions(
                kernels=kernels, patch="auto"), model_name=name), unseen)
        return cache[name, kernels]

    return get


@pytest.mark.parametrize("name", zoo.names("mlperf-tiny"))
def test_compiled_c_equals_reference_equals_tflm(name, compiled):
    result, _ = compiled(name, "portable")
    report = verify_project(result.out_dir, n_random=3, sanitize=False)
    assert report.ok and report.engines == ("c-host", "reference", "tflm"), report.mismatches


@pytest.mark.parametrize("name", zoo.names("mlperf-tiny"))
def test_bit_exact_on_qemu_cortex_m7(name, compiled):
    from random_nets import inputs_for

    from kilobyte.interp import run_int8
    from kilobyte.targets.cortexm import build_firmware, have_tools, run_qemu

    assert have_tools(), "arm-none-eabi-gcc and qemu-system-arm are needed (see .ci/run)"
    for kernels in ("portable", "dsp"):
        result, unseen = compiled(name, kernels)
        build = build_firmware(result.out_dir, "cortex-m7")
        assert build.kernels == kernels
        for x in inputs_for(result.graph, unseen, seed=3)[:2]:
            want = run_int8(result.graph, x)[result.graph.outputs[0]].reshape(-1)
            np.testing.assert_array_equal(run_qemu(build, x).output, want, err_msg=f"{name} {kernels}")
