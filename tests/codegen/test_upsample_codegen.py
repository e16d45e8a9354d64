"""RESIZE_NEAREST_NEIGHBOR, RESIZE_BILINEAR, TRANSPOSE_CONV and GELU in generated C: C == numpy reference == TFLite
Micro, bit for bit (GELU, which TFLite Micro lacks: C == reference == TFLite's own interpreter, which verify_project
runs in TFLite Micro's place).

Graphs: tests/random_nets.upsample_model — a conv, the op, then a conv or a CONCAT (the op writing into its channel
slice): nearest resizes up, down, with half-pixel centres and aligned corners (non-integer factors), bilinear resizes
in TFLite's three coordinate modes, transpose convolutions with SAME's crop, VALID, PyTorch's k3/p1/output_padding 1
crop (top and left), stride 1 with a fused ReLU, and unequal strides; exact and tanh GELU. Each is checked by
`verify_project` (host build, run_int8, TFLite Micro on the project's model.tflite, an ASan/UBSan build).
"""

from __future__ import annotations

import pytest
from litert_oracle import assert_project_equals_litert
from random_nets import UPSAMPLES, upsample_model

from kilobyte.codegen import compile_graph
from kilobyte.driver.verify import verify_project
from kilobyte.errors import UnsupportedOpError
from kilobyte.ir import GraphBuilder, Op, QParams, ResizeAttrs
from kilobyte.schedule.estimate import estimate_resources
from kilobyte.schedule.plan_types import PlanOptions

OPTIONS = {"default": PlanOptions(),
           "dsp-no-rules": PlanOptions(kernels="dsp", concat_in_place=False, alias_reshape=False)}
KERNEL = {Op.RESIZE_NEAREST_NEIGHBOR: "kb_resize_nearest", Op.RESIZE_BILINEAR: "kb_resize_bilinear",
          Op.TRANSPOSE_CONV: "kb_transpose_conv", Op.GELU: "kb_lut"}
DSP_KINDS = ("nearest-align", "bilinear-plain", "tconv-torch", "gelu-tanh")


CASES = [(k, "default") for k in UPSAMPLES] + [(k, "dsp-no-rules") for k in DSP_KINDS]


@pytest.mark.parametrize("kind, options", CASES)
def test_c_equals_reference_equals_tflm(tmp_path, kind, options):
    graph = upsample_model(kind, seed=len(kind))
    result = compile_graph(graph, tmp_path / "m", OPTIONS[options])
    text = (result.out_dir / "src" / "model.c").read_text()
    op = UPSAMPLES[kind][1]
    assert text.count(f"{KERNEL[op]}(") >= 1
    assert estimate_resources(result.graph, OPTIONS[options]).families == tuple(result.manifest["kernels"])
    if UPSAMPLES[kind][3] == "concat" and options == "default":  # the op writes straight into its concat slice
        node = next(n for n in result.graph.nodes if n.op is op)
        y = node.outputs[0]
        assert result.plan.placements[y].channel_stride > result.graph.tensors[y].shape[-1]
    report = verify_project(result.out_dir, n_random=3, sanitize=options == "default")
    assert report.inputs == 3 and report.engines[2:] == (("tflm",) if op is not Op.GELU else ("tflite",))
    assert report.ok, "; ".join(report.mismatches)
    if op is Op.GELU:  # the test's own oracle too, not only verify_project's
        assert_project_equals_litert(result.out_dir)


def test_resize_with_other_output_params_is_a_one_line_error(tmp_path):
    b = GraphBuilder("requant")
    x = b.input((1, 4, 4, 3), "int8", qparams=QParams.per_tensor(0.1, 0))
    graph = b.build([b.node(Op.RESIZE_NEAREST_NEIGHBOR, [x], ResizeAttrs((8, 8)), dtype="int8",
                            qparams=QParams.per_tensor(0.2, 0))])
    with pytest.raises(UnsupportedOpError) as err:
        compile_graph(graph, tmp_path / "m")
    assert "\n" not in str(err.value) and "share quantisation params" in str(err.value)
