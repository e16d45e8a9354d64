"""int8 ADD, SUB, MUL, MAXIMUM and MINIMUM in generated C: conv -> op -> conv models, C == reference == TFLite Micro.

Each model is an int8 3x3 conv on the input, a second operand — another conv of the input (equal shapes) or the
MEAN (keepdims) of the first conv, a (1,1,1,C) per-channel operand as squeeze-excite multiplies by — the op, and a
3x3 conv after it. MAXIMUM / MINIMUM operands share the op's quantisation (TFLite compares raw values). Each is
compiled with the default plan and checked by `verify_project` (host build, run_int8, TFLM on the project's
model.tflite, one ASan/UBSan run). A constant operand of MAXIMUM / MINIMUM (per-channel, single value or full) is a
const array in model.c. A constant operand of ADD / SUB / MUL of any shape that broadcasts, first or second, with a
fused activation, runs `kb_add_const` / `kb_mul_const` from one int32 term per constant value (never the broadcast
map), lives in Flash and takes no arena bytes; an ADD by a constant may run in place. Other broadcasts of two
activations are refused with a one-line error naming the node.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from kilobyte.codegen import compile_graph
from kilobyte.driver.verify import verify_project
from kilobyte.errors import UnsupportedOpError
from kilobyte.ir import Activation, AddAttrs, ConvAttrs, GraphBuilder, MeanAttrs, Op, QParams
from kilobyte.schedule.estimate import estimate_resources
from kilobyte.schedule.plan_types import PlanOptions

KERNEL = {Op.ADD: "kb_add", Op.SUB: "kb_sub", Op.MUL: "kb_mul", Op.MAXIMUM: "kb_maximum", Op.MINIMUM: "kb_minimum"}
FAMILY = {Op.ADD: "add", Op.SUB: "add", Op.MUL: "elementwise", Op.MAXIMUM: "elementwise", Op.MINIMUM: "elementwise"}


def conv(b: GraphBuilder, rng, x: str, cout: int, q_out: QParams, act=Activation.NONE) -> str:
    """A 3x3 SAME int8 conv with random per-channel weights and bias."""
    cin = b.shape(x)[-1]
    s_w = (2.0 ** rng.uniform(-8, -6, cout)).astype(np.float32)
    zeros = np.zeros(cout, np.int64)
    k = len(b.nodes)
    w = b.const(f"w{k}", rng.integers(-127, 128, (cout, 3, 3, cin)).astype(np.int8), QParams(s_w, zeros, 0))
    bias_scale = (np.float32(b.tensors[x].qparams.scale[0]) * s_w).astype(np.float32)
    bias = b.const(f"b{k}", rng.integers(-3000, 3000, cout).astype(np.int32), QParams(bias_scale, zeros, 0))
    return b.node(Op.CONV_2D, [x, w, bias], ConvAttrs(padding=(1, 1, 1, 1), activation=act), dtype="int8",
                  qparams=q_out)


def binary_model(op: Op, layout: str, seed: int = 0, hw=(8, 7), c: int = 12):
    """conv -> op (with its second operand per `layout`: "equal", "per-channel", "per-channel-first") -> conv."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"{op.value.lower()}_{layout}")
    x = b.input((1, *hw, 3), "int8", qparams=QParams.per_tensor(0.02, int(rng.integers(-20, 20))))
    shared = op in (Op.MAXIMUM, Op.MINIMUM)
    q_a = QParams.per_tensor(0.05, int(rng.integers(-40, 40)))
    q_b = q_a if shared else QParams.per_tensor(0.03, int(rng.integers(-40, 40)))
    a = conv(b, rng, x, c, q_a, Activation.RELU if op is Op.MUL else Activation.NONE)
    if layout == "equal":
        other = conv(b, rng, x, c, q_b)
    else:
        other = b.node(Op.MEAN, [a], MeanAttrs((1, 2), keepdims=True), dtype="int8", qparams=q_b)
    operands = [other, a] if layout == "per-channel-first" else [a, other]
    q_y = q_a if shared else QParams.per_tensor(0.05 if op is Op.SUB else 0.08, int(rng.integers(-60, 60)))
    attrs = None if shared else AddAttrs(Activation.RELU6 if op is Op.SUB else Activation.NONE)
    y = b.node(op, operands, attrs, dtype="int8", qparams=q_y)
    return b.build([conv(b, rng, y, 5, QParams.per_tensor(0.1, 3))])


CASES = [(op, layout) for op in KERNEL for layout in ("equal", "per-channel")] + [
    (op, "per-channel-first") for op in (Op.SUB, Op.ADD)]


@pytest.mark.parametrize("op,layout", CASES, ids=[f"{op.value}-{layout}" for op, layout in CASES])
def test_c_equals_reference_equals_tflm(tmp_path, op, layout):
    graph = binary_model(op, layout, seed=len(layout))
    result = compile_graph(graph, tmp_path / "m")
    text = (result.out_dir / "src" / "model.c").read_text()
    assert text.count(f"{KERNEL[op]}(&p, ") == 1 and FAMILY[op] in result.manifest["kernels"]
    assert estimate_resources(result.graph, PlanOptions()).families == tuple(result.manifest["kernels"])
    if layout != "equal":  # the per-channel operand is read with pixel stride 0
        stride = "in1_cstride = 0" if layout == "per-channel-first" else "in2_cstride = 0"
        assert stride in text
    report = verify_project(result.out_dir, n_random=3, sanitize=layout == "per-channel")
    assert report.engines == ("c-host", "reference", "tflm") and report.inputs == 3
    assert report.ok, "; ".join(report.mismatches)


def test_other_broadcasts_are_one_line_errors(tmp_path):
    """A (1,H,1,C) operand against (1,H,W,C) is valid IR (TFLite broadcasting) but has no C kernel."""
    rng = np.random.default_rng(1)
    b = GraphBuilder("row_broadcast")
    x = b.input((1, 4, 5, 3), "int8", qparams=QParams.per_tensor(0.02, 0))
    a = conv(b, rng, x, 6, QParams.per_tensor(0.05, 0))
    row = b.node(Op.MEAN, [a], MeanAttrs((2,), keepdims=True), dtype="int8", qparams=QParams.per_tensor(0.05, 0))
    graph = b.build([b.node(Op.MUL, [a, row], dtype="int8", qparams=QParams.per_tensor(0.05, 0))])
    with pytest.raises(UnsupportedOpError) as err:
        compile_graph(graph, tmp_path / "m")
    msg = str(err.value)
    assert "\n" not in msg and "'mul_0'" in msg and "(1, 4, 1, 6)" in msg


@pytest.mark.parametrize("op,shape", [(Op.MAXIMUM, (1, 4, 5, 6)), (Op.MINIMUM, (1, 1, 1, 6)), (Op.MAXIMUM, (1,))])
def test_constant_operand_is_a_const_array(tmp_path, op, shape):
    """MAXIMUM / MINIMUM with a per-channel constant, a single value, or a full tensor: the constant becomes a const
    array in model.c (a single value repeated over the channels) read with pixel stride 0 unless it has the output's
    shape; C == reference == TFLite Micro, and the estimate counts its bytes."""
    rng = np.random.default_rng(2)
    b = GraphBuilder("const_operand")
    x = b.input((1, 4, 5, 3), "int8", qparams=QParams.per_tensor(0.02, 0))
    q = QParams.per_tensor(0.05, 3)
    a = conv(b, rng, x, 6, q)
    k = b.const("k", rng.integers(-128, 128, shape).astype(np.int8), q)
    operands = [k, a] if op is Op.MINIMUM else [a, k]  # a constant first operand too
    y = b.node(op, operands, None, dtype="int8", qparams=q)
    result = compile_graph(b.build([y]), tmp_path / "m")
    text = (result.out_dir / "src" / "model.c").read_text()
    assert "kb_k_" in text and (("_cstride = 0" in text) == (shape != (1, 4, 5, 6)))
    arrays = re.findall(r"^(?:static )?const (int8_t|int32_t) kb_\w+\[(\d+)\]", text, re.M)  # model.c's data
    flash = sum(int(n) * (1 if t == "int8_t" else 4) for t, n in arrays)
    assert estimate_resources(result.graph, PlanOptions()).weight_bytes == flash
    report = verify_project(result.out_dir, n_random=3, sanitize=False)
    assert report.ok, "; ".join(report.mismatches)


# (op, constant shape, constant first, fused activation) over a (1, 8, 7, 12) map
CONST_STEPS = [
    [(Op.ADD, (12,), False, Activation.RELU), (Op.SUB, (1,), True, Activation.NONE),
     (Op.MUL, (1, 1, 7, 1), False, Activation.RELU6), (Op.ADD, (1, 8, 1, 12), True, Activation.NONE)],
    [(Op.MUL, (12,), True, Activation.NONE), (Op.SUB, (8, 7, 12), False, Activation.RELU),
     (Op.ADD, (1,), False, Activation.RELU6), (Op.SUB, (1, 1, 1, 12), True, Activation.RELU),
     (Op.MUL, (7, 1), True, Activation.NONE)],
]


def const_chain_model(steps, seed: int = 0, hw=(8, 7), c: int = 12):
    """conv -> the ADD / SUB / MUL by constants of `steps` -> 3x3 conv (int8, random quantisation per op)."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"const_chain_{seed}")
    x = b.input((1, *hw, 3), "int8", qparams=QParams.per_tensor(0.02, int(rng.integers(-20, 20))))
    y = conv(b, rng, x, c, QParams.per_tensor(0.05, int(rng.integers(-40, 40))))
    for op, shape, first, act in steps:
        k = b.const(f"k{len(b.nodes)}", rng.integers(-128, 128, shape).astype(np.int8),
                    QParams.per_tensor(float(2.0 ** rng.uniform(-7, -3)), int(rng.integers(-60, 60))))
        scale = 0.2 if op is Op.MUL else 0.08
        y = b.node(op, [k, y] if first else [y, k], AddAttrs(act), dtype="int8",
                   qparams=QParams.per_tensor(scale, int(rng.integers(-60, 60))))
    return b.build([conv(b, rng, y, 5, QParams.per_tensor(0.1, 3))])


@pytest.mark.parametrize("chain", range(len(CONST_STEPS)))
def test_constant_operands_broadcast_in_c(tmp_path, chain):
    """Each constant is one int32 term per value it has (a (12,) bias: 12, not 8*7*12) in Flash, no placement in the
    arena; every op calls kb_add_const / kb_mul_const; C == reference == TFLite Micro (one run under ASan/UBSan)."""
    steps = CONST_STEPS[chain]
    graph = const_chain_model(steps, seed=chain)
    result = compile_graph(graph, tmp_path / "m")
    text = (result.out_dir / "src" / "model.c").read_text()
    adds = sum(op is not Op.MUL for op, *_ in steps)
    assert text.count("kb_add_const(&p, ") == adds and text.count("kb_mul_const(&p, ") == len(steps) - adds
    consts = [t for t in result.graph.tensors.values() if t.is_const and t.name.startswith("k")]
    for t in consts:
        ident = next(n.name for n in result.graph.nodes if t.name in n.inputs)
        assert re.search(rf"const int32_t kb_k_{ident}\[{t.numel}\] =", text), t.name
        assert t.name not in result.plan.placements
    arrays = re.findall(r"^(?:static )?const (int8_t|int32_t) kb_\w+\[(\d+)\]", text, re.M)
    flash = sum(int(n) * (1 if t == "int8_t" else 4) for t, n in arrays)
    assert estimate_resources(result.graph, PlanOptions()).weight_bytes == flash
    report = verify_project(result.out_dir, n_random=3, sanitize=chain == 0)
    assert report.engines == ("c-host", "reference", "tflm") and report.inputs == 3
    assert report.ok, "; ".join(report.mismatches)


def test_constant_add_runs_in_place_on_a_vector(tmp_path):
    """A (1, N) vector (a MEAN's): ADD of an (N,) constant in place over its dying input, then MUL by one value
    given first. C == reference == TFLite Micro."""
    rng = np.random.default_rng(5)
    b = GraphBuilder("vector_const")
    x = b.input((1, 4, 4, 3), "int8", qparams=QParams.per_tensor(0.02, 0))
    a = conv(b, rng, x, 10, QParams.per_tensor(0.05, 2))
    v = b.node(Op.MEAN, [a], MeanAttrs((1, 2)), dtype="int8", qparams=QParams.per_tensor(0.05, 2))  # (1, 10)
    k = b.const("k_bias", rng.integers(-128, 128, (10,)).astype(np.int8), QParams.per_tensor(0.01, 4))
    y = b.node(Op.ADD, [v, k], AddAttrs(Activation.RELU), dtype="int8", qparams=QParams.per_tensor(0.06, -128))
    s = b.const("k_scale", np.array([-77], np.int8), QParams.per_tensor(0.02, 0))
    y = b.node(Op.MUL, [s, y], AddAttrs(), dtype="int8", qparams=QParams.per_tensor(0.1, 5))
    graph = b.build([y])
    result = compile_graph(graph, tmp_path / "m")
    add = next(n.name for n in result.graph.nodes if n.op is Op.ADD)
    assert result.plan.inplace == {add: v}
    report = verify_project(result.out_dir, n_random=3, sanitize=False)
    assert report.engines == ("c-host", "reference", "tflm") and report.ok, "; ".join(report.mismatches)
