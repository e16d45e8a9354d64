"""The search's resource evaluator gives exactly the compiler's figures for the same network.

Oracle chain: the candidate built with random trained-like weights, calibrated and quantised by `quantize()` (the
path `kilobyte compile` takes for a float model), then `make_plan` (SRAM, MACs) and the generated C project (Flash:
the constant arrays in model.c, the kernel families in the manifest). The evaluator never calibrates nor sees
weights; its figures must still match.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from model_c_code import project_code

from kilobyte.codegen import compile_graph
from kilobyte.nas.build import build_graph, network
from kilobyte.nas.resources import Budget, ResourceEvaluator, layer_counts, sram_lower_bound
from kilobyte.nas.space import MBSpace
from kilobyte.quant.quantize import int8_structure, quantize
from kilobyte.schedule.estimate import estimate_resources
from kilobyte.schedule.flash import code_bytes
from kilobyte.schedule.plan import make_plan
from kilobyte.schedule.plan_types import PlanOptions

SPACE = MBSpace(num_classes=10, in_channels=1, widths=(0.2, 0.3, 0.4, 0.5), resolutions=(16, 24, 28, 32, 40))
ARRAY = re.compile(r"^(?:static )?const (int8_t|int32_t) kb_(?:w|b|mult|shift|lut)_\w+\[(\d+)\]", re.M)


def random_weights(space, arch, rng):
    """Gaussian (weight, bias) per layer of `arch`, in build order."""
    net = network(space, arch)
    layers = [net.stem, *(c for b in net.blocks for c in b.convs), net.head]
    for layer in layers:
        shape = (1, layer.kernel, layer.kernel, layer.cout) if layer.depthwise else \
            (layer.cout, layer.kernel, layer.kernel, layer.cin)
        fan_in = layer.kernel * layer.kernel * (1 if layer.depthwise else layer.cin)
        yield (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), \
            (0.1 * rng.standard_normal(layer.cout)).astype(np.float32)
    yield (0.1 * rng.standard_normal((net.num_classes, net.head.cout))).astype(np.float32), \
        np.zeros(net.num_classes, np.float32)


def real_int8(space, arch, seed):
    rng = np.random.default_rng(seed)
    g = build_graph(space, arch, weights=random_weights(space, arch, rng))
    calib = [rng.standard_normal((1, arch.resolution, arch.resolution, 1)).astype(np.float32) for _ in range(2)]
    return quantize(g, calib)


@pytest.mark.parametrize("options", [PlanOptions(), PlanOptions(kernels="dsp")], ids=["portable", "dsp"])
def test_evaluator_equals_plan_on_random_architectures(options):
    rng = np.random.default_rng(3)
    ev = ResourceEvaluator(SPACE, options)
    for seed in range(150):  # x2 option sets = 300 architectures
        arch = SPACE.sample(rng)
        r = ev.evaluate(arch)
        q = real_int8(SPACE, arch, seed)
        plan = make_plan(q, options)
        assert (r.peak_bytes, r.arena_bytes, r.scratch_bytes, r.input_bytes, r.macs) == (
            plan.peak_bytes, plan.arena_bytes, plan.scratch_bytes, plan.input_bytes, plan.macs), arch.describe()
        assert r == estimate_resources(q, options)
        weights, macs = layer_counts(network(SPACE, arch))
        assert (weights, macs) == (r.weight_bytes, r.macs)
        assert ev.flash_lower_bound(arch) <= r.flash_bytes
        assert sram_lower_bound(network(SPACE, arch)) <= r.peak_bytes <= r.arena_bytes


@pytest.mark.parametrize("core", ["cortex-m4", "cortex-m55", "cortex-m0plus"])
def test_evaluator_flash_is_the_estimate_for_its_core(core):
    """Flash for the device's core (an unmeasured core: the largest), and the early-exit bound stays below it."""
    rng = np.random.default_rng(11)
    options = PlanOptions(kernels="dsp")
    ev, largest = ResourceEvaluator(SPACE, options, core=core), ResourceEvaluator(SPACE, options)
    for _ in range(10):
        arch = SPACE.sample(rng)
        r = ev.evaluate(arch)
        assert r == estimate_resources(int8_structure(build_graph(SPACE, arch)), options, core=core)
        top = largest.evaluate(arch).flash_bytes
        assert ev.flash_lower_bound(arch) <= r.flash_bytes <= top
        assert r.flash_bytes == top or core != "cortex-m0plus"


def test_evaluator_equals_the_compiled_project(tmp_path):
    rng = np.random.default_rng(5)
    ev = ResourceEvaluator(SPACE)
    for seed in range(4):
        arch = SPACE.sample(rng)
        r = ev.evaluate(arch)
        result = compile_graph(real_int8(SPACE, arch, seed), tmp_path / f"m{seed}")
        m = result.manifest
        assert (r.arena_bytes, r.peak_bytes, r.macs) == (m["arena_bytes"], m["peak_bytes"], m["macs"])
        assert list(r.families) == m["kernels"]
        text = (result.out_dir / "src" / "model.c").read_text()
        assert r.weight_bytes == sum(int(n) * (1 if t == "int8_t" else 4) for t, n in ARRAY.findall(text))
        code = project_code(text, len(m["outputs"]))
        assert r.functions == tuple(sorted(code.functions))
        assert r.flash_bytes == r.weight_bytes + code_bytes(code, "portable")


def test_cache_is_per_network_and_fits_uses_early_exits():
    rng = np.random.default_rng(7)
    ev = ResourceEvaluator(SPACE)
    arch = SPACE.sample(rng)
    ev.evaluate(arch)
    ev.evaluate(SPACE.mutate(arch, np.random.default_rng(0), prob=0.0))
    assert ev.planned == 1
    r = ev.evaluate(arch)
    assert ev.fits(arch, Budget(r.arena_bytes, r.flash_bytes)) is True
    assert ev.fits(arch, Budget(r.arena_bytes - 1, r.flash_bytes)) is False
    assert ev.fits(arch, Budget(r.arena_bytes, r.flash_bytes - 1)) is False
    need = r.arena_bytes + r.input_bytes + r.output_bytes + 4096  # the caller-owned buffers: input and outputs
    assert r.output_bytes == SPACE.num_classes
    assert ev.fits(arch, Budget(need, r.flash_bytes, count_input=True, sram_reserve=4096)) is True
    assert ev.fits(arch, Budget(need - 1, r.flash_bytes, count_input=True, sram_reserve=4096)) is False
    planned = ev.planned
    other = SPACE.sample(np.random.default_rng(99))
    assert ev.fits(other, Budget(10 ** 9, 1000)) is False  # Flash alone decides: nothing planned
    assert ev.planned == planned


JOINT = MBSpace(num_classes=10, in_channels=1, widths=(0.2, 0.3, 0.4), resolutions=(16, 24, 32),
                stage_width_choices=(0.5, 0.75, 1.0), rd_stages=2)


def test_evaluator_equals_plan_on_the_joint_space():
    """Width per stage and RD (kernel-1 blocks without depthwise, deeper stage 2): the layer-list counts are still
    the compiled figures and the SRAM bound still a lower bound."""
    rng = np.random.default_rng(13)
    ev = ResourceEvaluator(JOINT)
    no_dw = 0
    for seed in range(24):
        arch = JOINT.sample(rng)
        net = network(JOINT, arch)
        no_dw += sum(not any(c.depthwise for c in b.convs) for b in net.blocks)
        r = ev.evaluate(arch)
        plan = make_plan(real_int8(JOINT, arch, seed), PlanOptions())
        assert (r.peak_bytes, r.arena_bytes, r.macs) == (plan.peak_bytes, plan.arena_bytes, plan.macs), \
            arch.describe()
        assert layer_counts(net) == (r.weight_bytes, r.macs)
        assert ev.flash_lower_bound(arch) <= r.flash_bytes
        assert sram_lower_bound(net) <= r.peak_bytes
    assert no_dw >= 10  # the kernel-1 blocks were exercised


def test_evaluator_counts_the_input_resize_as_the_deployed_library_has_it(tmp_path):
    """A space with the data's size (8x8 images searched at 16..40) prices each candidate as `deploy_module`
    compiles it: the PyTorch module behind `nn.Upsample` (`search.with_input_resize`), through the torch frontend,
    quantised and compiled — the resize's tensor in the arena, its kernel in Flash, the 8x8 input counted."""
    import dataclasses

    import torch

    from kilobyte.driver import from_module
    from kilobyte.nas.build import build_module
    from kilobyte.nas.deploy import with_input_resize

    space = dataclasses.replace(SPACE, input_size=(8, 8))
    rng = np.random.default_rng(13)
    ev = ResourceEvaluator(space)
    for seed in range(3):
        arch = space.sample(rng)
        r = ev.evaluate(arch)
        torch.manual_seed(seed)
        module = with_input_resize(build_module(space, arch).eval(), (arch.resolution,) * 2, (8, 8))
        graph = from_module("m", module, (1, 1, 8, 8)).graph
        calib = [rng.random((1, 8, 8, 1), dtype=np.float32) for _ in range(2)]
        result = compile_graph(quantize(graph, calib), tmp_path / f"m{seed}")
        m = result.manifest
        assert m["order"][0].startswith("resize_bilinear") and "resize" in r.families
        assert (r.arena_bytes, r.peak_bytes, r.input_bytes, r.macs) == (
            m["arena_bytes"], m["peak_bytes"], m["input_bytes"], m["macs"]) and r.input_bytes == 64
        assert r.output_bytes == int(np.prod(m["outputs"][0]["shape"])) == 10
        assert list(r.families) == m["kernels"]
        code = project_code((result.out_dir / "src" / "model.c").read_text(), len(m["outputs"]))
        assert r.functions == tuple(sorted(code.functions))
        stem = network(space, arch).stem  # the stem reads the resized image: both live in the arena
        assert r.peak_bytes >= arch.resolution ** 2 + stem.cout * (-(-arch.resolution // stem.stride)) ** 2
        assert r.peak_bytes >= ResourceEvaluator(SPACE).evaluate(arch).peak_bytes
