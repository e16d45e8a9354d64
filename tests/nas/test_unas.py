"""μNAS's granular space (issue #15, items 1–2): architectures as data with a JSON round trip, Table 1's morphisms
keeping every architecture valid and buildable (10,000 morphs in random chains), and the two builders agreeing — the
IR graph built directly equals what `from_torch` + `prepare_for_inference` make of the PyTorch module (ops, shapes,
MACs, parameters, and the float outputs with the module's weights)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from bn_helpers import randomise_bn

from kilobyte.analysis.macs import node_macs
from kilobyte.frontends import from_torch
from kilobyte.interp.float_ref import run_float
from kilobyte.ir import Op
from kilobyte.nas.unas_build import build_graph, build_module, input_shape, network
from kilobyte.nas.unas_space import UArch, UArchError, UBlock, ULayer, UnasSpace
from kilobyte.transforms import prepare_for_inference

SPACE = UnasSpace(input_shape=(28, 28, 1), num_classes=10)


def test_json_round_trip_and_one_line_errors():
    rng = np.random.default_rng(0)
    for _ in range(200):
        arch = SPACE.sample(rng)
        assert UArch.from_json(arch.dumps()) == arch and UArch.from_json(arch.to_json()) == arch
    with pytest.raises(UArchError, match="cannot read") as e:
        UArch.from_json('{"blocks": [{"layers": []}]}')
    assert "\n" not in str(e.value)
    bad = UArch((UBlock((ULayer("1x1", 3, 8),), parallel=True),), dense=(300,))
    problems = SPACE.problems(bad)
    assert any("first block" in p for p in problems) and any("kernel 3" in p for p in problems)
    assert any("300 units" in p for p in problems)


def test_ten_thousand_morphs_stay_valid_and_buildable():
    """200 chains of 50 random morphisms from random architectures: every child is inside the space, resolves to
    positive shapes and builds a verified IR graph; every morphism of Table 1 is exercised."""
    rng = np.random.default_rng(1)
    used = set()
    for _ in range(200):
        arch = SPACE.sample(rng)
        for _ in range(50):
            child, name = SPACE.mutate(arch, rng)
            used.add(name)
            assert not SPACE.problems(child), (name, child.describe())
            assert child != arch
            net = network(SPACE, child)
            assert min(d for shape in net.shapes for d in shape) >= 1, child.describe()
            arch = child
        build_graph(SPACE, arch)  # verify=True: the IR builder's own shape and graph checks
    assert used == set(SPACE.morphisms), set(SPACE.morphisms) - used


def test_parallel_blocks_add_what_they_tie():
    """A parallel block with a depthwise last layer gets a 1x1 conv to the serial block's channels; outputs of
    different sizes are max-pooled and zero-padded before the ADD."""
    serial = UBlock((ULayer("full", 3, 12, 2),))
    branch = UBlock((ULayer("full", 5, 6, 1), ULayer("depthwise", 3, 1, 1)), parallel=True)
    net = network(SPACE, UArch((serial, branch), "max", 2, (20,)))
    kinds = [s.kind for s in net.steps]
    assert kinds == ["conv", "conv", "conv", "conv", "pool", "pad", "add", "pool", "flatten", "dense", "dense"]
    one_by_one = net.steps[3]
    assert one_by_one.kernel == (1, 1) and one_by_one.cout == 12 and not one_by_one.bn
    assert net.shapes[1][:2] == (13, 13) and net.shapes[4][:2] == (22, 22)  # serial 13x13, branch 22x22
    assert net.shapes[5][:2] == (11, 11) and net.shapes[6][:2] == (13, 13)  # pooled by 2, padded to 13


def _torch_weights(module, net):
    """(weight, bias) per conv / dense step in IR layouts, BatchNorm folded, the first FC after a flatten permuted
    from PyTorch's (C, H, W) order to the IR's (H, W, C)."""
    mods = [m for m in module.layers]
    for step, seq in zip(net.steps, mods):
        if step.kind == "conv":
            conv = seq[0]
            w = conv.weight.detach().numpy()
            bias = conv.bias.detach().numpy() if conv.bias is not None else np.zeros(step.cout, np.float32)
            if step.bn:
                bn = seq[1]
                scale = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach().numpy()
                w = w * scale[:, None, None, None]
                bias = bn.bias.detach().numpy() - bn.running_mean.numpy() * scale
            w = w.transpose(1, 2, 3, 0) if step.depthwise else w.transpose(0, 2, 3, 1)
            yield w.astype(np.float32), bias.astype(np.float32)
        elif step.kind == "dense":
            lin = seq[0]
            w = lin.weight.detach().numpy()
            src = net.steps[step.src[0] - 1] if step.src[0] > 0 else None
            if src is not None and src.kind == "flatten":
                h, wd, c = net.shapes[src.src[0]]
                w = w.reshape(len(w), c, h, wd).transpose(0, 2, 3, 1).reshape(len(w), -1)
            yield w.astype(np.float32), lin.bias.detach().numpy().astype(np.float32)


@pytest.mark.parametrize("seed", range(8))
def test_graph_equals_traced_module(seed):
    rng = np.random.default_rng(100 + seed)
    arch = SPACE.sample(rng)
    for _ in range(10):
        arch = SPACE.mutate(arch, rng)[0]
    torch.manual_seed(seed)
    module = build_module(SPACE, arch).eval()
    randomise_bn(module, seed)
    traced = prepare_for_inference(from_torch(module, input_shape(SPACE)))
    net = network(SPACE, arch)
    direct = build_graph(SPACE, arch, weights=iter(list(_torch_weights(module, net))))
    assert [n.op for n in direct.nodes] == [n.op for n in traced.nodes], arch.describe()
    assert [direct.tensors[n.outputs[0]].shape for n in direct.nodes] == \
        [traced.tensors[n.outputs[0]].shape for n in traced.nodes]
    assert [node_macs(direct, n) for n in direct.nodes] == [node_macs(traced, n) for n in traced.nodes]
    params = sum(p.numel() for p in module.parameters())
    bn_extra = sum(2 * m.num_features for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d))
    conv_bias = sum(s.cout for s in net.steps if s.kind == "conv" and s.bn)  # folded BN adds a bias
    ir_params = sum(t.data.size for t in direct.tensors.values() if t.is_const)
    assert ir_params == params - bn_extra + conv_bias
    x = np.random.default_rng(seed).standard_normal((1, 28, 28, 1)).astype(np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x.transpose(0, 3, 1, 2))).numpy()
    got_direct = run_float(direct, x)[direct.outputs[0]]
    got_traced = run_float(traced, x)[traced.outputs[0]]
    np.testing.assert_allclose(got_traced, want, rtol=0, atol=1e-4)
    np.testing.assert_allclose(got_direct, want, rtol=0, atol=1e-4)
    assert Op.FULLY_CONNECTED in {n.op for n in direct.nodes}


@pytest.mark.parametrize("kernels", ["portable", "dsp"])
def test_evaluator_equals_the_plan_of_the_quantised_module(kernels):
    """50 random architectures: the evaluator (placeholder weights, no calibration) gives what make_plan and the
    Flash estimate give for the module itself imported, quantised with calibration data, as `kilobyte compile`
    takes a float model."""
    from kilobyte.nas.resources import ResourceEvaluator
    from kilobyte.quant import quantize
    from kilobyte.schedule.estimate import estimate_resources
    from kilobyte.schedule.plan import make_plan
    from kilobyte.schedule.plan_types import PlanOptions

    options = PlanOptions(kernels=kernels)
    ev = ResourceEvaluator(SPACE, options, core="cortex-m4")
    rng = np.random.default_rng(7)
    for seed in range(25):
        arch = SPACE.sample(rng)
        torch.manual_seed(seed)
        module = build_module(SPACE, arch).eval()
        randomise_bn(module, seed)
        graph = prepare_for_inference(from_torch(module, input_shape(SPACE)))
        calib = [rng.standard_normal((1, 28, 28, 1)).astype(np.float32) for _ in range(2)]
        q = quantize(graph, calib)
        r = ev.evaluate(arch)
        plan = make_plan(q, options)
        assert (r.peak_bytes, r.arena_bytes, r.input_bytes, r.macs) == (
            plan.peak_bytes, plan.arena_bytes, plan.input_bytes, plan.macs), arch.describe()
        assert r.flash_bytes == estimate_resources(q, options, core="cortex-m4").flash_bytes
        assert ev.evaluate(arch) is r  # cached


@pytest.mark.parametrize("prune,sparsity", [("none", 0.0), ("structured", 0.5)])
def test_objectives_of_a_candidate_trained_on_digits(prune, sparsity):
    """A small candidate trained 3 epochs on scikit-learn's digits (unpruned, and pruned by channel to half): int8
    error on the validation split from the quantised graph (close to the float error), and the evaluator's resources
    of the architecture it has after pruning (smaller than the unpruned one's when pruned)."""
    from kilobyte.data import load_dataset
    from kilobyte.nas.resources import ResourceEvaluator
    from kilobyte.nas.unas_eval import Genome, UnasConfig, evaluate_genome

    space = UnasSpace(input_shape=(8, 8, 1), num_classes=10)
    arch = UArch((UBlock((ULayer("full", 3, 16, 1),)), UBlock((ULayer("depthwise", 3, 1, 1), ULayer("1x1", 1, 24)))),
                 "avg", 2, (32,))
    ds = load_dataset("digits", seed=0)
    train, val = (ds.x[:1200], ds.y[:1200]), (ds.x[1200:1500], ds.y[1200:1500])
    torch.set_num_threads(1)
    ev = ResourceEvaluator(space)
    config = UnasConfig(data="digits", epochs=3, prune=prune, bounds={"error": 0.1, "peak_bytes": 4096.0})
    obj = evaluate_genome(space, config, ev, Genome(arch, sparsity), train, val, seed=0)
    assert obj["trained"] and obj["error"] < 0.5 and abs(obj["error"] - obj["float_error"]) < 0.05, obj
    r = ev.evaluate(UArch.from_json(obj["arch"]))
    assert (obj["peak_bytes"], obj["flash_bytes"], obj["weight_bytes"], obj["macs"]) == (
        r.peak_bytes, r.flash_bytes, r.weight_bytes, r.macs)
    assert obj["input_bytes"] == 64
    dense = ev.evaluate(arch)
    if sparsity:
        assert obj["sparsity"] > 0.2 and r.weight_bytes < dense.weight_bytes and r.macs < dense.macs
    else:
        assert obj["arch"] == {"space": "unas", **arch.to_json()} and obj["sparsity"] == 0.0


def test_candidates_far_over_a_bound_are_not_trained():
    """Above `skip_factor` times a resource bound a candidate is measured but not trained: error 1.0."""
    from kilobyte.nas.resources import ResourceEvaluator
    from kilobyte.nas.unas_eval import Genome, UnasConfig, evaluate_genome

    space = UnasSpace(input_shape=(8, 8, 1), num_classes=10)
    arch = UArch((UBlock((ULayer("full", 3, 64, 1),)),), "avg", 2, (32,))
    ev = ResourceEvaluator(space)
    peak = ev.evaluate(arch).peak_bytes
    config = UnasConfig(data="digits", prune="none", bounds={"peak_bytes": peak / 10.5}, skip_factor=10)
    obj = evaluate_genome(space, config, ev, Genome(arch), None, None, seed=0)
    assert not obj["trained"] and obj["error"] == 1.0 and obj["weights"] is None and obj["peak_bytes"] == peak
