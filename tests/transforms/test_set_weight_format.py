"""Transforms tests: set_weight_format — which CONV_2D layers get FWCS / CSR, and that nothing else changes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sparse_nets import pruned_conv

from kilobyte.errors import KilobyteError
from kilobyte.interp import run_int8
from kilobyte.ir import DepthwiseAttrs, GraphBuilder, Op
from kilobyte.transforms import set_weight_format


def _formats(g):
    return {n.name: getattr(n.attrs, "weight_format", None) for n in g.nodes}


def test_sets_pruned_convs_and_keeps_values():
    g, x = pruned_conv(1, sparsity=0.5)
    out = set_weight_format(g, "csr")
    assert _formats(out) == {"conv_2d_0": "csr"} and _formats(g) == {"conv_2d_0": "dense"}  # pure
    assert out.nodes[0].attrs == dataclasses.replace(g.nodes[0].attrs, weight_format="csr")
    assert out.tensors == g.tensors
    np.testing.assert_array_equal(run_int8(out, x)[out.outputs[0]], run_int8(g, x)[g.outputs[0]])
    assert "weight_format=csr" in str(out)


def test_layers_without_zeros_or_below_min_sparsity_stay_dense():
    g, _ = pruned_conv(2, sparsity=0.3)
    w = g.tensors[g.nodes[0].inputs[1]]
    dense = g.replace(tensors={**g.tensors, w.name: dataclasses.replace(w, data=np.where(w.data == 0, 1, w.data)
                                                                         .astype(np.int8))})
    assert _formats(set_weight_format(dense, "fwcs"))["conv_2d_0"] == "dense"
    assert _formats(set_weight_format(g, "fwcs", min_sparsity=0.95))["conv_2d_0"] == "dense"
    assert _formats(set_weight_format(g, {"conv_2d_0": "fwcs"}, min_sparsity=0.1))["conv_2d_0"] == "fwcs"


def test_errors_are_one_line():
    g, _ = pruned_conv(3)
    with pytest.raises(KilobyteError, match="unknown weight format 'coo'"):
        set_weight_format(g, "coo")
    with pytest.raises(KilobyteError, match="no node 'nope'"):
        set_weight_format(g, {"nope": "fwcs"})
    b = GraphBuilder()
    y = b.node(Op.DEPTHWISE_CONV_2D, [b.input((1, 4, 4, 2))], DepthwiseAttrs(),
               params={"weight": np.zeros((1, 3, 3, 2), np.float32)})
    dw = b.build([y])
    with pytest.raises(KilobyteError, match="only CONV_2D"):
        set_weight_format(dw, {dw.nodes[0].name: "fwcs"})
    assert set_weight_format(dw, "fwcs") == dw  # a graph-wide format touches only CONV_2D


def test_sparse_conv_runs_per_layer_never_in_a_patch_stage():
    from flash_models import sparse_convs

    from kilobyte.schedule.patch import PatchStageError
    from kilobyte.schedule.plan import make_plan
    from kilobyte.schedule.plan_types import PlanOptions

    g = sparse_convs()
    assert make_plan(g, PlanOptions(patch="auto")).patch is None
    with pytest.raises(PatchStageError, match="stores its weights fwcs and runs per layer"):
        make_plan(g, PlanOptions(patch=(2, 2)))
