"""Targets tests: the shipped Cortex-M7 latency constants (kilobyte/prune/latency_cortex_m7.json) predict a fresh
measurement — a small two-layer chain of FWCS convs (one on the SMLAD path, one on the scalar path), not among the
fitted geometries, built for Cortex-M7 and counted by unicorn — within the held-out error the file reports."""

from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest
from sparse_nets import pruned_chain

from kilobyte.codegen import compile_graph
from kilobyte.interp import run_int8
from kilobyte.prune.latency import SHIPPED_MODELS, shipped_model
from kilobyte.schedule import PlanOptions
from kilobyte.targets.cortexm import build_firmware, count_instructions, have_tools
from kilobyte.transforms import set_weight_format

_HAVE_ALL = have_tools() and all(importlib.util.find_spec(m) for m in ("unicorn", "elftools"))
pytestmark = pytest.mark.skipif(not os.environ.get("CI") and not _HAVE_ALL,
                                reason="Cortex-M tools (arm-none-eabi-gcc) or kilobyte[arm] missing")


def test_shipped_model_predicts_a_new_geometry(tmp_path):
    g, x, layers = pruned_chain(7, (10, 8, [(20, 3, 1), (6, 3, 2)]), [0.5, 0.2])  # Cin 8 (SMLAD), 20 (SMLAD)...
    g2, x2, layers2 = pruned_chain(8, (9, 3, [(12, 3, 1)]), [0.4])  # ... and Cin 3 (scalar)
    model = shipped_model("cortex-m7")
    bound = json.loads(SHIPPED_MODELS["cortex-m7"].read_text())["held_out"]["all"]["max_relative"]
    errors = []
    for i, (graph, inp, geometry) in enumerate(((g, x, layers), (g2, x2, layers2))):
        graph = set_weight_format(graph, "fwcs")
        r = compile_graph(graph, tmp_path / f"m{i}", PlanOptions(kernels="dsp"))
        counts = count_instructions(build_firmware(r.out_dir, "cortex-m7", kernels="dsp"), inp)
        assert np.array_equal(counts.output, run_int8(graph, inp)[graph.outputs[0]].reshape(-1))
        for node, layer, measured in zip(graph.nodes, geometry, counts.per_layer.values()):
            alpha = float((~(graph.tensors[node.inputs[1]].data != 0).any(axis=-1)).mean())
            errors.append(model.layer(layer, alpha) / measured - 1)
    assert len(errors) == 3
    print("relative errors", [f"{100 * e:+.1f} %" for e in errors])
    assert max(map(abs, errors)) <= bound, errors
