"""Tests for kilobyte/kernels: the contracts agree with the C kernels, and planned scratch == scratch the kernels read.

Oracles: the runtime's C sources (the constants and conditions under which the DSP conv reads im2col columns, parsed
from `runtime/c/arm/`), and the generated projects: per layer, the scratch codegen hands the kernel (pointer and
`scratch_bytes`) for zoo models compiled for each kernel set.
"""

from __future__ import annotations

import re

import pytest
from random_nets import quantized

from kilobyte.codegen import compile_graph
from kilobyte.ir import Op
from kilobyte.kernels import (
    KB_COLS_MIN_OUT_C,
    WIDE_COLUMNS,
    column_bytes,
    depthwise_ring_bytes,
    padded_channel_bytes,
    wide_column_bytes,
)
from kilobyte.ops import defs, opdef
from kilobyte.ops.conv import conv_scratch
from kilobyte.runtime import C_DIR, KERNEL_FILES
from kilobyte.schedule.plan_types import PlanOptions

ARM = C_DIR / "arm"


def _c_define(name: str) -> int:
    for path in sorted(ARM.glob("*.[chS]")):
        m = re.search(rf"^#define {name} (\d+)", path.read_text(), re.M)
        if m:
            return int(m.group(1))
    raise AssertionError(f"#define {name} not found in {ARM}")


def test_contracts_mirror_the_dsp_conv():
    """The DSP conv reads columns only with >= KB_COLS_MIN_OUT_C output channels, at most KB_WIDE_COLS of them (with
    scratch or, without, in its own output: wide_ok)."""
    assert _c_define("KB_COLS_MIN_OUT_C") == KB_COLS_MIN_OUT_C
    assert _c_define("KB_WIDE_COLS") == WIDE_COLUMNS
    conv = (ARM / "kb_conv.c").read_text()
    assert conv.count("if (wide_ok(p, in, out, scratch))") == 2  # kb_conv and kb_conv_1x1 ...
    assert conv.count("if (p->out_c < KB_COLS_MIN_OUT_C) {\n        return 0;") == 1  # ... which need the channels
    portable = (C_DIR / "kb_conv.c").read_text()
    assert "(void)scratch" in portable and "scratch[" not in portable  # the portable conv never touches it


def test_every_op_has_a_contract_with_a_real_family():
    assert all(opdef(op).contract.op is op for op in Op)
    assert {d.contract.family for d in defs() if d.contract.family} <= set(KERNEL_FILES)


ZOO = [("mnist-cnn", 1.0, 28), ("resnet-small", 1.0, 32), ("vgg-small", 1.0, 32), ("mobilenetv2", 0.35, 64)]


@pytest.mark.parametrize("kernels", ["portable", "dsp"])
@pytest.mark.parametrize("name,width,res", ZOO)
def test_planned_scratch_is_the_scratch_the_kernels_read(tmp_path, name, width, res, kernels):
    """Per layer: every planned scratch buffer is handed to its kernel whole, and the kernel set reads it (a DSP conv
    with enough output channels, up to six columns; an in-place depthwise conv, one padded channel, or with the DSP
    kernels the channel-group ring where that is larger and was granted; a DSP 3x3 depthwise conv out of place, its
    ring or nothing); every layer whose kernel would read scratch has some."""
    from kilobyte.api import load

    qgraph, _ = quantized(load(name, width=width, resolution=res).graph, 0)
    result = compile_graph(qgraph, tmp_path / "m", PlanOptions(kernels=kernels))
    graph, plan = result.graph, result.plan
    for node in graph.nodes:
        planned = plan.scratch.get(node.name, (0, 0))[1]
        if node.op is Op.CONV_2D:
            reads = kernels == "dsp" and graph.tensors[node.outputs[0]].shape[-1] >= KB_COLS_MIN_OUT_C
            col = column_bytes(graph, node)
            if not reads:
                assert planned == 0, f"{node.name}: {planned} B the {kernels} conv never reads"
                continue
            _, handed = conv_scratch(graph, node, plan.scratch.get(node.name))
            wide = wide_column_bytes(graph, node)  # granted columns: whole groups; the planned two: exactly 2 * col
            assert handed == planned and (planned % wide == 0 and planned <= WIDE_COLUMNS * wide or
                                          planned == 2 * col), node.name
            big_window = graph.tensors[node.inputs[1]].shape[1:3] != (1, 1)
            assert planned >= 2 * col or not big_window or node.name in plan.fused, node.name
        elif node.op is Op.DEPTHWISE_CONV_2D:
            in_place = node.name in plan.inplace
            ring = depthwise_ring_bytes(graph, node, in_place) if kernels == "dsp" else 0
            plane = padded_channel_bytes(graph, node) if in_place else 0
            allowed = {plane, ring} if ring > plane else {plane}
            assert planned in allowed, f"{node.name}: {planned} B, its kernel reads {sorted(allowed)}"
        else:
            assert planned == 0, f"{node.name} ({node.op.value}) reads no scratch"


def test_the_depthwise_ring_rule_is_the_kernels():
    """The planner's copy of the DSP depthwise group path's rule (ops/conv_kernels.py) equals the kernel's own
    constants in runtime/c/arm: the ring's bytes per pixel and the widest stride-1 output row it takes in place."""
    import re

    from kilobyte.ops import conv_kernels
    from kilobyte.runtime import C_DIR

    header = (C_DIR / "arm" / "kb_arm_dwg.h").read_text()
    kernel = (C_DIR / "arm" / "kb_depthwise.c").read_text()
    assert int(re.search(r"#define KB_DWG_RING_PIXEL_BYTES (\d+)", header).group(1)) == \
        conv_kernels.DW_RING_BYTES_PER_PIXEL
    assert int(re.search(r"#define KB_DWG_S1_MAX_WIDTH (\d+)", kernel).group(1)) == conv_kernels.DW_RING_S1_MAX_WIDTH
    helium = (C_DIR / "mve" / "kb_depthwise.c").read_text()
    assert int(re.search(r"#define KB_DW_RING_PIXEL_BYTES (\d+)", helium).group(1)) == \
        conv_kernels.MVE_RING_BYTES_PER_PIXEL
