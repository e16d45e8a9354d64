"""Acceptance (code generator): int8 MEAN as `.tflite` files have it, compiled to C, gives the same bytes as the numpy
reference (`mean_int8`, TFLite Micro's QuantizedMeanOrSum) and TFLite Micro.

Graphs: tests/random_nets.mean_model (built int8 directly, so the params are chosen rather than calibrated): a 3x3
conv, a MEAN with its own output scale and zero point over (H, W) — 7x7, 5x5 with 70 channels (more than one of
kb_mean's 64-channel passes), 1x3, 1x1, 112x112 (n = 12544) — with keepdims false or true (then a RESHAPE), an FC
head; two MEANs concatenated (each written into its slice of the concat); and means over H alone, over C, over
(W, C). Each is compiled with the default plan and with the DSP kernel set without in-place rules, and checked by
`verify_project` (host build, run_int8, TFLM on the project's model.tflite, an ASan/UBSan build). An axis set that
is not one contiguous run is refused with a one-line error naming the node and its axes.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from random_nets import mean_model

from kilobyte.codegen import compile_graph
from kilobyte.driver.verify import verify_project
from kilobyte.errors import UnsupportedOpError
from kilobyte.schedule.estimate import estimate_resources
from kilobyte.schedule.plan_types import PlanOptions

CASES = {
    "7x7": dict(),
    "7x7-keepdims": dict(keepdims=True),
    "5x5x70": dict(hw=(5, 5), cout=70),
    "1x3": dict(hw=(1, 3), cin=2, cout=16),
    "1x1": dict(hw=(1, 1)),
    "112x112": dict(hw=(112, 112), cin=1, cout=8),
    "concat": dict(branches=2),
    "concat-keepdims": dict(branches=2, keepdims=True, hw=(6, 5)),
    "over-h": dict(head=False, axes=(1,)),
    "over-c": dict(head=False, axes=(-1,), keepdims=True),
    "over-wc": dict(head=False, axes=(2, 3)),
}
OPTIONS = {"default": PlanOptions(),
           "dsp-no-rules": PlanOptions(kernels="dsp", concat_in_place=False, alias_reshape=False)}


@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("case", list(CASES))
def test_mean_c_equals_reference_equals_tflm(tmp_path, case, options):
    graph, _ = mean_model(len(case), **CASES[case])
    result = compile_graph(graph, tmp_path / "m", OPTIONS[options])
    text = (result.out_dir / "src" / "model.c").read_text()
    means = [n for n in result.graph.nodes if n.op.value == "MEAN"]
    assert text.count("kb_mean(&p, ") == len(means) > 0
    assert "mean" in result.manifest["kernels"]
    assert estimate_resources(result.graph, OPTIONS[options]).families == tuple(result.manifest["kernels"])
    if case.startswith("concat") and options == "default":  # the MEANs write straight into their concat slices
        c = graph.tensors[means[0].outputs[0]].shape[-1]
        assert all(result.plan.placements[m.outputs[0]].channel_stride == 2 * c for m in means)
        assert len(re.findall(rf"\.out_cstride = {2 * c}, ", text)) == 2
        assert "kb_copy_channels" not in text
    report = verify_project(result.out_dir, n_random=3, sanitize=case in ("7x7", "concat", "over-wc"))
    assert report.engines == ("c-host", "reference", "tflm") and report.inputs == 3
    assert report.ok, "; ".join(report.mismatches)


def test_unsupported_axes_are_one_line_errors(tmp_path):
    graph, _ = mean_model(0, hw=(4, 5), head=False, axes=(1, 3))  # H and C reduced, W (5) kept between them
    with pytest.raises(UnsupportedOpError) as err:
        compile_graph(graph, tmp_path / "m")
    msg = str(err.value)
    assert "\n" not in msg and "'mean_0'" in msg and "(1, 3)" in msg and "contiguous" in msg
    graph, _ = mean_model(0, hw=(4, 1), head=False, axes=(1, 3))  # W is 1: H, W, C is one run after all
    assert "kb_mean(&p, " in (compile_graph(graph, tmp_path / "ok").out_dir / "src" / "model.c").read_text()


def test_mean_is_bit_exact_at_extreme_inputs(tmp_path):
    """All-max and all-min inputs drive every conv output and mean to its clamp."""
    from kilobyte.codegen import HostModel
    from kilobyte.interp import run_int8

    graph, _ = mean_model(7, hw=(9, 9), cout=40)
    result = compile_graph(graph, tmp_path / "m")
    host = HostModel(result.out_dir)
    for v in (-128, 127, 0):
        x = np.full(graph.tensors[graph.inputs[0]].shape, v, np.int8)
        assert np.array_equal(host(x), run_int8(graph, x)[graph.outputs[0]])
