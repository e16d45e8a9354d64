"""Runtime tests: the sparse-weight convolutions of kb_sparse_conv.c (FWCS filterlet conv and CSR conv) on the host,
bit for bit against the numpy int8 reference and TFLite Micro (on the project's own dense `.tflite`: the pruned
weights are zeros there).

One host build holds every case (tests/random_nets.write_bundle): random filterlet-pruned convs (tests/sparse_nets.py:
strides 1/2, SAME/VALID padding, kernels 1/3/5, Cin odd and even, fully pruned filters and a fully pruned layer,
fused ReLU/ReLU6), a sparsity sweep 0..0.99, and whole small pruned models (MNIST CNN, three chained convs), each in
FWCS and in CSR. The arena is filled with random bytes first: nothing may be read before it is written. The Flash
model's constant bytes equal the arrays model.c really holds.
"""

from __future__ import annotations

import ctypes
import dataclasses
import re

import numpy as np
import pytest
from flash_models import sparse_convs, zoo
from random_nets import compile_bundle, pack_inputs
from sparse_nets import CASES, case_graph, prune_filterlets, pruned_conv

from kilobyte.codegen import HostModel
from kilobyte.interp import run_int8
from kilobyte.ir import Op
from kilobyte.schedule.estimate import constant_bytes
from kilobyte.transforms import set_weight_format

SWEEP = (0.0, 0.25, 0.5, 0.75, 0.9, 0.99)
FORMATS = ("fwcs", "csr")


def _pruned_model(graph, seed: int, sparsity: float = 0.7):
    """`graph` (int8) with every CONV_2D's filterlets pruned at `sparsity`."""
    rng = np.random.default_rng(seed)
    tensors = dict(graph.tensors)
    for n in graph.nodes:
        if n.op is Op.CONV_2D:
            w = tensors[n.inputs[1]]
            tensors[w.name] = dataclasses.replace(w, data=prune_filterlets(rng, w.data, sparsity))
    return graph.replace(tensors=tensors)


def _models():
    models = []
    for fmt in FORMATS:
        models += [case_graph(i, fmt) for i in range(len(CASES))]
        for s in SWEEP:
            g, x = pruned_conv(int(s * 100) + 7, hw=(6, 7), cin=8, cout=10, sparsity=s, extra=0.0)
            models.append((set_weight_format(g, fmt).replace(name=f"sweep{int(s * 100)}_{fmt}"), x))
        mnist = _pruned_model(zoo("mnist-cnn", 1.0, 28)(), 5)
        chain = sparse_convs()
        for name, g in (("mnist", mnist), ("chain", chain)):
            x = np.random.default_rng(3).integers(-128, 128, g.tensors[g.inputs[0]].shape).astype(np.int8)
            models.append((set_weight_format(g, fmt).replace(name=f"{name}_{fmt}"), x))
    return models


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    models = _models()
    return compile_bundle(tmp_path_factory.mktemp("sparse"), [(g.name, g, None, [x]) for g, x in models])


def test_host_equals_reference_equals_tflm(bundle):
    from kilobyte.targets.tflm import run_tflm

    results, inputs, path, slices = bundle
    host = HostModel(path)
    rng = np.random.default_rng(0)
    for k, r in enumerate(results):
        arena = (ctypes.c_int8 * r.plan.arena_bytes).in_dll(host.lib, f"kb_arena_{k}")
        ctypes.memmove(arena, rng.integers(-128, 128, len(arena), dtype=np.int8).tobytes(), len(arena))
    y = host(pack_inputs(inputs, slices, 0, host.in_shape[0]))
    failures = []
    for r, xs, (_, _, off, n) in zip(results, inputs, slices):
        assert any(node.attrs.weight_format != "dense" for node in r.graph.nodes if node.op is Op.CONV_2D)
        ref = run_int8(r.graph, xs[0])[r.graph.outputs[0]].reshape(-1)
        tflm = run_tflm((r.out_dir / "model.tflite").read_bytes(), xs[0]).tensors[r.graph.outputs[0]].reshape(-1)
        for engine, got in (("c-host", y[off:off + n]), ("tflm", tflm)):
            if not np.array_equal(got, ref):
                failures.append(f"{r.graph.name}: {engine} differs in {int(np.sum(got != ref))} values")
    assert not failures, "; ".join(failures)


def test_flash_model_counts_the_real_arrays(bundle):
    """constant_bytes == the bytes of model.c's constant arrays, FWCS and CSR alike."""
    sizes = {"int8_t": 1, "uint16_t": 2, "int32_t": 4}
    for r in bundle[0]:
        text = (r.out_dir / "src" / "model.c").read_text()
        arrays = sum(sizes[t] * int(n) for t, n in re.findall(r"static const (\w+) \w+\[(\d+)\]", text))
        luts = sum(256 for n in r.graph.nodes if n.op.value in ("LOGISTIC",))
        assert arrays == constant_bytes(r.graph) + luts, r.graph.name
