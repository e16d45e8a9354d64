"""Tests for schedule/flash.py on the checked-in table: the pieces of the Flash model and how they add up.

The estimate's equality with the compiled project is tests/schedule/test_estimate.py's; its bound on linked firmware
tests/targets/test_flash_estimate.py's."""

from __future__ import annotations

import numpy as np
import pytest

from kilobyte.ir import ConvAttrs, GraphBuilder, Op
from kilobyte.kernels.calls import ENTRY_POINTS
from kilobyte.schedule import code_size
from kilobyte.schedule.flash import code_bytes, code_lower_bound, core_code_bytes, generated_code, runtime_bytes
from kilobyte.schedule.plan import plan_steps
from kilobyte.schedule.plan_types import PlanOptions

NAS_FAMILIES = ("conv", "depthwise", "fc", "pool")


def _graph():
    """A residual block: r = conv3x3(x); ADD(r, conv1x1(conv3x3(r)))."""
    b = GraphBuilder()
    x = b.input((1, 8, 8, 4))
    r = b.node(Op.CONV_2D, [x], ConvAttrs(padding=(1, 1, 1, 1)), params={"weight": np.zeros((8, 3, 3, 4))})
    t = b.node(Op.CONV_2D, [r], ConvAttrs(padding=(1, 1, 1, 1)), params={"weight": np.zeros((8, 3, 3, 8))})
    z = b.node(Op.CONV_2D, [t], ConvAttrs(), params={"weight": np.zeros((8, 1, 1, 8))})
    return b.build([b.node(Op.ADD, [r, z])])


def test_generated_code_of_a_residual_block():
    graph = _graph()
    code = generated_code(graph, plan_steps(graph, PlanOptions()))
    assert code.layers == ("conv", "conv", "conv_add") and code.functions == {"kb_conv_3x3", "kb_conv_1x1_add"}
    assert code.stage == () and code.outputs == 1
    unfused = generated_code(graph, plan_steps(graph, PlanOptions(fuse_add=False)))
    assert sorted(unfused.layers) == ["add", "conv", "conv", "conv"]
    assert unfused.functions == {"kb_conv_3x3", "kb_conv_1x1", "kb_add"}


@pytest.mark.parametrize("kernels", ["portable", "dsp"])
def test_without_a_core_the_estimate_is_the_largest_core(kernels):
    graph = _graph()
    code = generated_code(graph, plan_steps(graph, PlanOptions(kernels=kernels)))
    per_core = [core_code_bytes(code, kernels, core) for core in code_size.CORES]
    assert code_bytes(code, kernels) == code_bytes(code, kernels, "cortex-m0plus") == max(per_core)
    assert [code_bytes(code, kernels, core) for core in code_size.CORES] == per_core


@pytest.mark.parametrize("key", sorted(code_size.RUNTIME_CLOSURES))
def test_runtime_code_is_the_union_of_closures(key):
    core, kernels = key
    every = frozenset(f for names in ENTRY_POINTS.values() for f in names)
    singles = {f: runtime_bytes(frozenset({f}), core, kernels) for f in every}
    assert all(size > 0 for size in singles.values())
    assert max(singles.values()) <= runtime_bytes(every, core, kernels) <= sum(singles.values())
    for family, names in ENTRY_POINTS.items():
        assert code_size.CODE_BYTES[key][family] == runtime_bytes(frozenset(names), core, kernels)


@pytest.mark.parametrize("kernels", ["portable", "dsp"])
@pytest.mark.parametrize("core", [*code_size.CORES, None])
def test_the_lower_bound_is_below_every_plan_calling_the_families(kernels, core):
    floor = code_lower_bound(NAS_FAMILIES, kernels, core)
    for conv in ENTRY_POINTS["conv"]:
        for dw in ENTRY_POINTS["depthwise"]:
            for pool in ENTRY_POINTS["pool"]:
                functions = frozenset({conv, dw, pool, "kb_fully_connected"})
                cores = [core] if core else code_size.CORES
                assert floor <= max(code_size.BASE_BYTES[c] + code_size.INVOKE_BYTES[c][0]
                                    + runtime_bytes(functions, c, kernels) for c in cores)
