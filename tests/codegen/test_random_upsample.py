"""Acceptance (code generator, upsampling ops): generated C == numpy reference == TFLite Micro, bit for bit, on 48
random decoders.

tests/random_decoders.py builds each from a seed: convs, transposed convolutions (kernels 1-4, strides 1-3, SAME,
VALID and PyTorch crops, some with no bias, fused ReLU / ReLU6), nearest and bilinear resizes of random sizes up and
down in every coordinate mode, resize-into-CONCAT skips and, in every fourth seed, GELU. Quantised by `quantize()`
(resizes share their input's params), they are compiled in two groups of 24 — default plan options, and the DSP
kernel set with every in-place rule off — each bundled into ONE C build (tests/random_nets.write_bundle). Every graph
runs on two inputs (a quantised image, uniform int8 noise) through the host build (arena poisoned first), the numpy
reference and TFLite Micro on the project's own model.tflite — TFLite's own interpreter for a graph with GELU, which
TFLite Micro lacks — and one group through an ASan/UBSan build of its bundle.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from litert_oracle import run_litert
from random_decoders import random_decoder
from random_nets import compile_bundle, inputs_for, pack_inputs, quantized

from kilobyte.codegen import HostModel, build_executable, run_executable
from kilobyte.formats.project import manifest
from kilobyte.interp import run_int8
from kilobyte.ir import Op
from kilobyte.schedule.plan_types import PlanOptions

N_PER_GROUP = 24
GROUPS = {  # name -> (first seed, plan options)
    "default": (5000, PlanOptions()),
    "dsp-no-rules": (6000, PlanOptions(kernels="dsp", inplace_depthwise=False, inplace_add=False, alias_reshape=False,
                                       concat_in_place=False, fuse_add=False)),
}


def _oracle_output(result, x: np.ndarray) -> np.ndarray:
    """TFLite Micro's output on the project's model.tflite, or TFLite's interpreter's for a graph with GELU."""
    tfl = (result.out_dir / "model.tflite").read_bytes()
    out = result.graph.outputs[0]
    if any(n.op is Op.GELU for n in result.graph.nodes):
        return run_litert(tfl, {result.graph.inputs[0]: x})[out].reshape(-1)
    from kilobyte.targets.tflm import run_tflm

    return run_tflm(tfl, x, preserve_all=False).outputs[out].reshape(-1)


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    cache = {}

    def get(name):
        if name not in cache:
            first, options = GROUPS[name]
            models = []
            for seed in range(first, first + N_PER_GROUP):
                qgraph, unseen = quantized(random_decoder(seed, gelu=seed % 4 == 3), seed)
                models.append((f"d{seed}", qgraph, options, inputs_for(qgraph, unseen, seed)))
            cache[name] = compile_bundle(tmp_path_factory.mktemp(name), models)
        return cache[name]

    return get


@pytest.mark.parametrize("group", list(GROUPS))
def test_c_equals_reference_equals_tflm(groups, group):
    results, inputs, bundle, slices = groups(group)
    ops = {n.op for r in results for n in r.graph.nodes}
    assert {Op.TRANSPOSE_CONV, Op.RESIZE_NEAREST_NEIGHBOR, Op.RESIZE_BILINEAR, Op.GELU, Op.CONCAT} <= ops
    host = HostModel(bundle)
    rng = np.random.default_rng(0)
    failures = []
    for i in range(2):
        for k, r in enumerate(results):  # poison every arena: nothing may be read before it is written
            arena = (ctypes.c_int8 * r.plan.arena_bytes).in_dll(host.lib, f"kb_arena_{k}")
            ctypes.memmove(arena, rng.integers(-128, 128, len(arena), dtype=np.int8).tobytes(), len(arena))
        y = host(pack_inputs(inputs, slices, i, host.in_shape[0]))
        for k, (r, (_, _, off, n)) in enumerate(zip(results, slices)):
            x = inputs[k][i]
            engines = {"c-host": y[off:off + n], "reference": run_int8(r.graph, x)[r.graph.outputs[0]].reshape(-1),
                       "tflite": _oracle_output(r, x)}
            for engine, got in engines.items():
                if not np.array_equal(got, engines["reference"]):
                    failures.append(f"{r.graph.name} input {i}: {engine} differs in "
                                    f"{int(np.sum(got != engines['reference']))} values")
    assert not failures, f"{len(failures)} mismatches: " + "; ".join(failures[:10])


def test_sanitizer_build(groups):
    results, inputs, bundle, slices = groups("default")
    exe = build_executable(bundle, sanitize=True)
    m = manifest(bundle)
    y = run_executable(exe, pack_inputs(inputs, slices, 1, m["input"]["shape"][0]), (m["output"]["shape"][0],))
    for k, (r, (_, _, off, n)) in enumerate(zip(results, slices)):
        want = run_int8(r.graph, inputs[k][1])[r.graph.outputs[0]].reshape(-1)
        assert np.array_equal(y[off:off + n], want), f"{r.graph.name}: sanitizer build differs"
