"""Acceptance (code generator): generated C == numpy reference == TFLite Micro, bit for bit, on 200 random graphs.

200 random int8 graphs (tests/random_nets.py: conv k 1/3/5/7, stride 1/2, dilation, asymmetric padding; depthwise
k 3/5/7; residual ADD; CONCAT; avg/max pooling; PAD; MEAN or flatten + FC, the MEAN kept as TFLite's MEAN (kb_mean)
or, in even seeds, rewritten as a full-image AVG_POOL_2D before quantising; some ending in a float softmax left to
the host) in four groups of 50, one group per planner configuration: per layer, and with a patch stage (a random valid
prefix of the graph, a random patch grid), each with the in-place rules on (depthwise over its input, ADD into a
dead input, fused 1x1 conv + ADD, reshape aliasing, concat producers writing their slice) and off. A group is
compiled one graph at a time and then bundled into ONE C build (tests/random_nets.write_bundle). Every graph runs on
two inputs (an image quantised with the model's input qparams, uniform int8 noise) through:
- the host build (ctypes, gcc -O3 -Wall -Wextra -Werror), every model's `kb_arena` filled with random bytes first so
  a value read before it is written cannot pass by luck;
- the numpy reference `run_int8`;
- TFLite Micro (the `tflite-micro` wheel) on the project's own model.tflite;
- an ASan/UBSan executable of the same bundle with 64 guard bytes around every model's arena (checked after each
  model's kb_invoke: a write outside the planned arena aborts naming the model).
Every model's `kb_arena` symbol in the built library is exactly its plan's `arena_bytes`.
"""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pytest
from random_nets import compile_bundle, inputs_for, pack_inputs, quantized, random_graph, stage_side, valid_cuts

from kilobyte.codegen import HostModel, build_executable, run_executable, split_float_tail
from kilobyte.formats.project import manifest
from kilobyte.interp import run_int8
from kilobyte.ir import Op
from kilobyte.schedule.plan_types import PlanOptions

N_PER_GROUP = 50
NO_RULES = PlanOptions(inplace_depthwise=False, inplace_add=False, alias_reshape=False, concat_in_place=False,
                       fuse_add=False)
GROUPS = {  # name -> (first seed, in-place rules, with a patch stage)
    "per-layer": (1000, PlanOptions(), False),
    "per-layer-no-rules": (2000, NO_RULES, False),
    "patches": (3000, PlanOptions(), True),
    "patches-no-rules": (4000, NO_RULES, True),
}


def _patch_option(core, seed: int) -> tuple[int, int] | None:
    """A random (stage length, grid) that `core` can run as a patch stage, or None if no prefix can be one."""
    cuts = valid_cuts(core)
    if not cuts:
        return None
    rng = np.random.default_rng(seed)
    n, outputs = cuts[int(rng.integers(len(cuts)))]
    return n, int(rng.integers(1, min(stage_side(core, outputs), 4) + 1))


def _tflm_output(result, x: np.ndarray) -> np.ndarray:
    from kilobyte.targets.tflm import run_tflm

    tfl = (result.out_dir / "model.tflite").read_bytes()
    out = result.graph.outputs[0]
    return run_tflm(tfl, x, preserve_all=True).tensors[out].reshape(-1)


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    """group name -> (compile results, inputs per graph, bundle dir, slices), built on first use per worker."""
    cache = {}

    def get(name):
        if name not in cache:
            first, base, patched = GROUPS[name]
            models = []
            for seed in range(first, first + N_PER_GROUP):
                qgraph, unseen = quantized(random_graph(seed), seed, spread=(0.5, 1.0, 4.0)[seed % 3],
                                           mean_as_pool=seed % 2 == 0)
                options = base
                if patched:
                    patch = _patch_option(split_float_tail(qgraph)[0], seed)
                    options = dataclasses.replace(base, patch=patch) if patch else base
                models.append((f"g{seed}", qgraph, options, inputs_for(qgraph, unseen, seed)))
            cache[name] = compile_bundle(tmp_path_factory.mktemp(name), models)
        return cache[name]

    return get


@pytest.mark.parametrize("group", list(GROUPS))
def test_c_equals_reference_equals_tflm(groups, group):
    results, inputs, bundle, slices = groups(group)
    patched = sum(r.plan.patch is not None for r in results)
    if GROUPS[group][2]:
        assert patched >= N_PER_GROUP * 0.9, f"only {patched} of {N_PER_GROUP} graphs got a patch stage"
    else:
        assert patched == 0
    assert any(n.op is Op.MEAN for r in results for n in r.graph.nodes)  # kb_mean runs in every group
    host = HostModel(bundle)
    symbols = host.symbol_sizes()
    rng = np.random.default_rng(0)
    failures = []
    for i in range(2):
        for k, r in enumerate(results):  # poison every arena: nothing may be read before it is written
            assert symbols[f"kb_arena_{k}"] == r.plan.arena_bytes
            arena = (ctypes.c_int8 * r.plan.arena_bytes).in_dll(host.lib, f"kb_arena_{k}")
            ctypes.memmove(arena, rng.integers(-128, 128, len(arena), dtype=np.int8).tobytes(), len(arena))
        y = host(pack_inputs(inputs, slices, i, host.in_shape[0]))
        for k, (r, (_, _, off, n)) in enumerate(zip(results, slices)):
            x = inputs[k][i]
            engines = {"c-host": y[off:off + n], "reference": run_int8(r.graph, x)[r.graph.outputs[0]].reshape(-1),
                       "tflm": _tflm_output(r, x)}
            for engine, got in engines.items():
                if not np.array_equal(got, engines["reference"]):
                    failures.append(f"{r.graph.name} input {i}: {engine} differs in "
                                    f"{int(np.sum(got != engines['reference']))} values")
    assert not failures, f"{len(failures)} mismatches: " + "; ".join(failures[:10])


@pytest.mark.parametrize("group", ["per-layer", "patches"])
def test_sanitizer_build_with_arena_guards(groups, group):
    results, inputs, bundle, slices = groups(group)
    exe = build_executable(bundle, sanitize=True)
    m = manifest(bundle)
    size_in, size_out = m["input"]["shape"][0], m["output"]["shape"][0]
    y = run_executable(exe, pack_inputs(inputs, slices, 1, size_in), (size_out,))
    for k, (r, (_, _, off, n)) in enumerate(zip(results, slices)):
        want = run_int8(r.graph, inputs[k][1])[r.graph.outputs[0]].reshape(-1)
        assert np.array_equal(y[off:off + n], want), f"{r.graph.name}: sanitizer build differs"
