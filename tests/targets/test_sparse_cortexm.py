"""Targets tests: the sparse-weight convolutions (FWCS, CSR) of runtime/c/arm/kb_sparse_conv.c under QEMU on
Cortex-M4 and M7, bit for bit against the numpy int8 reference (itself held equal to TFLite Micro on the same cases
by tests/runtime/test_sparse_conv.py).

Every case of tests/sparse_nets.py (strides 1/2, SAME/VALID, kernels 1/3/5, Cin odd — the scalar FWCS path — and
multiples of 4 — the SMLAD path —, fully pruned filters and layer, fused activations) and a chain of three pruned
convs, in FWCS and in CSR, are bundled into one firmware per core (DSP kernel set) and one portable build on the M4.
On CI (env CI set) nothing here is skipped: a missing toolchain fails with the install hint.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from flash_models import sparse_convs
from random_nets import compile_bundle, pack_inputs
from sparse_nets import CASES, case_graph

from kilobyte.interp import run_int8
from kilobyte.schedule.plan_types import PlanOptions
from kilobyte.targets.cortexm import build_firmware, have_tools, run_qemu
from kilobyte.transforms import set_weight_format

_HAVE_ALL = have_tools() and all(importlib.util.find_spec(m) for m in ("unicorn", "elftools"))
pytestmark = pytest.mark.skipif(not os.environ.get("CI") and not _HAVE_ALL,  # never skipped on CI: fail there
                                reason="Cortex-M tools (arm-none-eabi-gcc, qemu-system-arm) or kilobyte[arm] missing")


def _bundle(root, kernels: str):
    models = []
    for fmt in ("fwcs", "csr"):
        models += [case_graph(i, fmt) for i in range(len(CASES))]
        chain = set_weight_format(sparse_convs(), fmt).replace(name=f"chain_{fmt}")
        models.append((chain, np.random.default_rng(1).integers(-128, 128, (1, 8, 8, 8)).astype(np.int8)))
    return compile_bundle(root, [(g.name, g, PlanOptions(kernels=kernels), [x]) for g, x in models])


@pytest.mark.parametrize("target, kernels", [("cortex-m4", "dsp"), ("cortex-m7", "dsp"), ("cortex-m4", "portable"),
                                            ("cortex-m55", "mve")])
def test_qemu_equals_reference(tmp_path, target, kernels):
    results, inputs, bundle, slices = _bundle(tmp_path, kernels)
    build = build_firmware(bundle, target, kernels=kernels)
    y = run_qemu(build, pack_inputs(inputs, slices, 0, build.input_bytes)).output.reshape(-1)
    bad = []
    for r, xs, (_, _, off, n) in zip(results, inputs, slices):
        ref = run_int8(r.graph, xs[0])[r.graph.outputs[0]].reshape(-1)
        if not np.array_equal(y[off:off + n], ref):
            bad.append(f"{r.graph.name}: {int(np.sum(y[off:off + n] != ref))} values differ")
    assert not bad, "; ".join(bad)
