"""TRANSPOSE, STRIDED_SLICE, TILE and REDUCE_MAX in generated C: C == numpy reference == TFLite Micro, bit for bit.

Graphs: tests/random_nets.movement_model — a conv, the op, then a conv, an FC or a CONCAT (the op writing straight
into its channel slice, so `kb_strided_copy` / `kb_reduce_max` see an output pixel stride larger than the row): an
NCHW -> NHWC transpose reading the graph input (a PyTorch export's head), H <-> W and back-to-NCHW transposes, a 2-D
transpose, channel / reversed / every-second-row slices, tiles, and maxima over (H, W), C and (H, C). Each is compiled
with the default plan and with the DSP kernel set without in-place rules, and checked by `verify_project` (host build,
run_int8, TFLite Micro on the project's model.tflite, an ASan/UBSan build). TFLite Micro has no TILE: those projects
are held equal to TFLite's own interpreter instead, which verify_project runs in TFLite Micro's place.
"""

from __future__ import annotations

import numpy as np
import pytest
from litert_oracle import assert_project_equals_litert
from random_nets import MOVEMENTS, movement_model

from kilobyte.codegen import HostModel, compile_graph
from kilobyte.driver.verify import verify_project
from kilobyte.errors import UnsupportedOpError
from kilobyte.interp import run_int8
from kilobyte.ir import GraphBuilder, Op, QParams, TransposeAttrs
from kilobyte.ops.movement import byte_strides, collapse
from kilobyte.schedule.estimate import estimate_resources
from kilobyte.schedule.plan_types import PlanOptions

OPTIONS = {"default": PlanOptions(),
           "dsp-no-rules": PlanOptions(kernels="dsp", concat_in_place=False, alias_reshape=False)}
KERNEL = {Op.TRANSPOSE: "kb_strided_copy", Op.STRIDED_SLICE: "kb_strided_copy", Op.TILE: "kb_strided_copy",
          Op.REDUCE_MAX: "kb_reduce_max"}


@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("kind", list(MOVEMENTS))
def test_c_equals_reference_equals_tflm(tmp_path, kind, options):
    graph = movement_model(kind, seed=len(kind))
    result = compile_graph(graph, tmp_path / "m", OPTIONS[options])
    text = (result.out_dir / "src" / "model.c").read_text()
    op = MOVEMENTS[kind][1]
    moves = [n for n in result.graph.nodes if n.op in KERNEL]
    calls = 4 if kind == "tile-hwc" else 1  # (repeat, H, repeat, W, repeat, C): the two outer axes become calls
    assert text.count(f"{KERNEL[op]}(&p, ") == calls * len(moves) > 0
    assert "movement" in result.manifest["kernels"]
    assert estimate_resources(result.graph, OPTIONS[options]).families == tuple(result.manifest["kernels"])
    if MOVEMENTS[kind][3] == "concat" and options == "default":  # written straight into the concat slice
        assert "kb_copy_channels" not in text or op is Op.TILE  # the tiled tensor itself is copied in
        assert any(result.plan.placements[n.outputs[0]].channel_stride > result.graph.tensors[n.outputs[0]].shape[-1]
                   for n in moves)
    report = verify_project(result.out_dir, n_random=3, sanitize=options == "default")
    assert report.inputs == 3 and report.engines[2:] == (("tflm",) if op is not Op.TILE else ("tflite",))
    assert report.ok, "; ".join(report.mismatches)
    if op is Op.TILE:  # the test's own oracle too, not only verify_project's
        assert_project_equals_litert(result.out_dir)


def test_extreme_inputs_through_the_nchw_head(tmp_path):
    """All-min, all-max and zero inputs through the head transpose: every conv output at its clamp."""
    graph = movement_model("transpose-nchw-head", seed=4)
    host = HostModel(compile_graph(graph, tmp_path / "m").out_dir)
    for v in (-128, 127, 0):
        x = np.full(graph.tensors[graph.inputs[0]].shape, v, np.int8)
        assert np.array_equal(host(x), run_int8(graph, x)[graph.outputs[0]])


def test_strides_collapse_to_long_rows():
    """A channel slice of a dense map reads rows of its channels; a reversed axis keeps its negative step."""
    assert byte_strides((1, 7, 6, 12), 12) == [504, 72, 12, 1]
    slice_c = [(1, 504, 126), (7, 72, 18), (6, 12, 3), (3, 2, 1)]  # channels 2:8:2 of (1, 7, 6, 12)
    assert collapse(slice_c) == [(42, 12, 3), (3, 2, 1)]
    rows = [(1, 504, 216), (3, 144, 72), (6, 12, 12), (12, 1, 1)]  # rows 0::2, W and C whole
    assert collapse(rows) == [(3, 144, 72), (72, 1, 1)]
    assert collapse([(4, -3, 1)]) == [(4, -3, 1)]


def test_rank_five_is_a_one_line_error(tmp_path):
    q = QParams.per_tensor(0.1, 0)
    b = GraphBuilder("rank5")
    x = b.input((1, 2, 3, 4, 5), "int8", qparams=q)
    graph = b.build([b.node(Op.TRANSPOSE, [x], TransposeAttrs((0, 1, 2, 4, 3)), dtype="int8", qparams=q)])
    with pytest.raises(UnsupportedOpError) as err:
        compile_graph(graph, tmp_path / "m")
    assert "\n" not in str(err.value) and "'transpose_0'" in str(err.value) and "rank 5" in str(err.value)


def test_other_output_params_are_one_line_errors(tmp_path):
    b = GraphBuilder("requant")
    x = b.input((1, 4, 4, 3), "int8", qparams=QParams.per_tensor(0.1, 0))
    graph = b.build([b.node(Op.TRANSPOSE, [x], TransposeAttrs((0, 2, 1, 3)), dtype="int8",
                            qparams=QParams.per_tensor(0.2, 0))])
    with pytest.raises(UnsupportedOpError) as err:
        compile_graph(graph, tmp_path / "m")
    assert "\n" not in str(err.value) and "'transpose_0'" in str(err.value)
