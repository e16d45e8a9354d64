"""Op registry tests: one OpDef per op, consistent data, and the op modules as the one place their ops are named.

Issue 27's acceptance: adding an op is one `ops/` module + its C kernel + a line in each frontend + tests, so no
Python file outside `kilobyte/ops/`, `kilobyte/frontends/` (their per-source mappings) and `tests/` names a migrated
op. The migrated ops' stage behaviour is exercised by the stage tests (references against TFLite Micro, emitted C
against the references); here the registry's own invariants.
"""

import re
from pathlib import Path

import numpy as np
import pytest

from kilobyte.ir import GraphBuilder, Op, ResizeAttrs
from kilobyte.ops import REGISTRY, defs, opdef, ops_where
from kilobyte.ops.contract import KernelContract
from kilobyte.ops.opdef import OpDef
from kilobyte.ops.types import NoAttrs
from kilobyte.runtime import KERNEL_FILES

PACKAGE = Path(__file__).resolve().parents[2] / "kilobyte"
MIGRATED = ("RESIZE_BILINEAR", "GELU", "TRANSPOSE_CONV", "RESIZE_NEAREST_NEIGHBOR")  # the issue's three, and one more


def files_naming(op_name: str) -> list[str]:
    """Python files of the package outside ops/ and frontends/ that write `Op.<op_name>`."""
    pattern = re.compile(rf"\bOp\.{op_name}\b")
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                  if p.relative_to(PACKAGE).parts[0] not in ("ops", "frontends") and pattern.search(p.read_text()))


@pytest.mark.parametrize("name", MIGRATED)
def test_no_stage_names_the_issues_three_ops(name):
    assert files_naming(name) == []


def test_every_op_has_exactly_one_definition_with_its_own_contract():
    assert set(REGISTRY) == set(Op)
    for d in defs():
        assert d.op is REGISTRY[d.op].op and d.contract.op is d.op
        assert d.contract.family is None or d.contract.family in KERNEL_FILES
        assert d.attrs.__dataclass_fields__ is not None  # a dataclass type a node can carry


def test_data_that_must_agree_does():
    for d in defs():
        if d.linear:  # linear ops: constant weights, int32 bias, per-channel weights along a real axis
            assert d.params and d.weight_axis in (0, 3)
        if d.qparams == "fixed":
            scale, zero_point = d.fixed_qparams
            assert 0 < float(scale) < 1 and -128 <= zero_point <= 127
    assert ops_where(lambda d: d.linear) == {Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.FULLY_CONNECTED, Op.TRANSPOSE_CONV}


def test_every_op_has_its_behaviour_filled():
    for d in defs():
        assert None not in (d.shape, d.float_ref, d.int8_ref), d.op
        assert (d.lower is None) == (d.builtin is None), d.op  # a TFLite builtin is written by its own lowering
        assert (d.emit is None) == (d.op in (Op.BATCH_NORM, Op.IDENTITY, Op.DEQUANTIZE)), d.op  # no C of their own


def test_bad_definitions_are_refused():
    contract = KernelContract(Op.EXP, "lut")
    with pytest.raises(ValueError, match="fixed_qparams"):
        OpDef(Op.EXP, NoAttrs, contract, qparams="fixed")
    with pytest.raises(ValueError, match="contract"):
        OpDef(Op.LOG, NoAttrs, contract)


def test_the_ir_asks_the_registry_for_a_migrated_ops_shape():
    b = GraphBuilder()
    y = b.node(Op.RESIZE_BILINEAR, [b.input((1, 3, 5, 2))], ResizeAttrs((7, 4), half_pixel_centers=True))
    assert b.build([y]).tensors[y].shape == (1, 7, 4, 2)
    with pytest.raises(ValueError, match="align_corners and half_pixel_centers"):
        opdef(Op.RESIZE_BILINEAR).shape(ResizeAttrs((2, 2), True, True), [(1, 3, 3, 1)])


def test_gelu_float_reference_is_x_times_phi_x():
    from kilobyte.interp.float_ref import run_float

    b = GraphBuilder()
    y = b.node(Op.GELU, [b.input((1, 2, 2, 3))])
    g = b.build([y])
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(1, 2, 2, 3)
    from math import erf, sqrt

    want = np.array([v * 0.5 * (1 + erf(v / sqrt(2))) for v in x.reshape(-1)]).reshape(x.shape)
    assert np.allclose(run_float(g, x)[y], want, atol=1e-6)
