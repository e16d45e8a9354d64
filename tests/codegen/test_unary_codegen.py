"""int8 unary ops in generated C: conv -> LOGISTIC / TANH / ELU / HARD_SWISH / LEAKY_RELU / RELU / RELU6 /
RELU_N1_TO_1 / EXP / LOG -> conv, compiled.

Each model is built int8 with explicit quantisation (GraphBuilder; `quantize()` emits none of these ops), the unary
op with its own output scale and zero point, so its table really requantises. A second shape feeds two unary ops
into a CONCAT, so their `kb_lut` calls write straight into concat slices (pixel strides). Oracles: the numpy
reference and TFLite Micro on the project's model.tflite (TFLite's interpreter for RELU_N1_TO_1, EXP, LOG, which
TFLite Micro has no int8 kernel for), and the host C build (`verify_project`, one ASan/UBSan run).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from random_nets import _int8_weighted

from kilobyte.codegen import compile_graph
from kilobyte.driver.verify import verify_project
from kilobyte.ir import ConcatAttrs, ConvAttrs, GraphBuilder, LeakyReluAttrs, Op, QParams
from kilobyte.schedule.estimate import estimate_resources
from kilobyte.schedule.plan_types import PlanOptions
from kilobyte.targets.tflm import TFLM_MISSING_OPS

UNARY = {  # op -> (attrs, output (scale factor of the input's, zero point)); LOGISTIC's, TANH's fixed by TFLite
    Op.LOGISTIC: (None, None),
    Op.TANH: (None, None),
    Op.ELU: (None, (0.7, 40)),
    Op.HARD_SWISH: (None, (0.6, -90)),
    Op.LEAKY_RELU: (LeakyReluAttrs(0.15), (0.8, 20)),
    Op.RELU: (None, (0.5, -128)),
    Op.RELU6: (None, (1.0, 0)),  # RELU6 keeps its input's params (replaced below)
    Op.RELU_N1_TO_1: (None, None),  # [-1, 1] on 1/127 steps (below)
    Op.EXP: (None, None),  # from the input's range (below)
    Op.LOG: (None, None),
}


def _unary(b: GraphBuilder, op: Op, x: str, ref: QParams) -> str:
    """`op` on `x`, its output quantised relative to `ref` (so concatenated branches can share one)."""
    attrs, out = UNARY[op]
    if op is Op.LOGISTIC:
        qp = QParams.per_tensor(1 / 256, -128)
    elif op is Op.TANH:
        qp = QParams.per_tensor(1 / 128, 0)
    elif op is Op.RELU6:
        qp = b.tensors[x].qparams
    elif op in (Op.RELU_N1_TO_1, Op.EXP, Op.LOG):
        qp = _range_qparams(op, ref)
    else:
        qp = QParams.per_tensor(float(ref.scale[0]) * out[0], out[1])
    return b.node(op, [x], attrs, dtype="int8", qparams=qp)


def _range_qparams(op: Op, ref: QParams) -> QParams:
    """Output params covering what `op` makes of `ref`'s int8 range: [-1, 1]; exp of it; log of its positive part."""
    s, z = float(ref.scale[0]), int(ref.zero_point[0])
    if op is Op.RELU_N1_TO_1:
        return QParams.per_tensor(1 / 127, 0)
    if op is Op.EXP:
        return QParams.per_tensor(float(np.exp(s * (127 - z))) / 255, -128)
    lo, hi = np.log(s), np.log(s * (127 - z))  # LOG: from the smallest positive input up
    return QParams.per_tensor(float(hi - lo) / 255, int(round(-128 - lo / ((hi - lo) / 255))))


def unary_model(op: Op, seed: int, concat: bool = False):
    """int8 input -> 3x3 conv -> op -> 1x1 conv; with `concat`, two such branches -> CONCAT -> 1x1 conv, the ops'
    outputs quantised alike so that each op writes straight into its slice of the concat."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"{op.value.lower()}_{seed}")
    x = b.input((1, 9, 7, 3), "int8", qparams=QParams.per_tensor(0.05, int(rng.integers(-50, 50))))
    ys, ref = [], None
    for _ in range(2 if concat else 1):
        y = _int8_weighted(b, rng, Op.CONV_2D, x, (6, 3, 3, 3), ConvAttrs(padding=(1, 1, 1, 1)), 2.0)
        ref = ref or b.tensors[y].qparams
        ys.append(_unary(b, op, y, ref))
    y = b.node(Op.CONCAT, ys, ConcatAttrs(3), dtype="int8", qparams=b.tensors[ys[0]].qparams) if concat else ys[0]
    y = _int8_weighted(b, rng, Op.CONV_2D, y, (4, 1, 1, b.shape(y)[-1]), ConvAttrs(), 1.0)
    return b.build([y])


@pytest.mark.parametrize("op", list(UNARY), ids=lambda op: op.value.lower())
def test_conv_unary_conv_c_equals_reference_equals_tflm(tmp_path, op):
    graph = unary_model(op, seed=len(op.value))
    result = compile_graph(graph, tmp_path / "m", PlanOptions())
    text = (result.out_dir / "src" / "model.c").read_text()
    assert text.count("kb_lut(") == 1 and "static const int8_t kb_lut_" in text
    assert "lut" in result.manifest["kernels"]
    est = estimate_resources(result.graph, PlanOptions())
    assert est.families == tuple(result.manifest["kernels"])
    arrays = re.findall(r"^static const (int8_t|int32_t) kb_\w+\[(\d+)\]", text, re.M)
    assert est.weight_bytes == sum(int(n) * (1 if t == "int8_t" else 4) for t, n in arrays)  # incl. the 256-byte table
    report = verify_project(result.out_dir, n_random=4, sanitize=op is Op.HARD_SWISH)
    oracle = "tflite" if op.value in TFLM_MISSING_OPS else "tflm"  # TFLite's interpreter where TFLM has no kernel
    assert report.ok and report.engines == ("c-host", "reference", oracle), report.mismatches


@pytest.mark.parametrize("op", [Op.LOGISTIC, Op.TANH, Op.HARD_SWISH, Op.LEAKY_RELU, Op.RELU],
                         ids=lambda op: op.value.lower())
def test_unary_ops_write_into_concat_slices(tmp_path, op):
    """Two branches concatenated: both kb_lut calls write their slice (pixel stride 12, channels 6) directly."""
    graph = unary_model(op, seed=len(op.value) + 1, concat=True)
    result = compile_graph(graph, tmp_path / "m", PlanOptions())
    text = (result.out_dir / "src" / "model.c").read_text()
    assert text.count("kb_lut(") == 2 and "kb_copy_channels" not in text
    assert len(re.findall(r"kb_lut\(63, 6, kb_lut_\w+, \(KB_ARENA \+ \d+\), 6, \(KB_ARENA \+ \d+\), 12\);", text)) == 2
    report = verify_project(result.out_dir, n_random=3)
    assert report.ok and report.engines == ("c-host", "reference", "tflm"), report.mismatches
