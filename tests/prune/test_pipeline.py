"""The pruning pipeline (kilobyte/prune/pipeline.py) end to end on scikit-learn's digits with resnet-small: each
method reaches its sparsity and keeps int8 accuracy within 3 points, the pruned structure survives into the int8
graph, the byte counts add up, and the device mode fits the device's Flash no slower than uniform ratios."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kilobyte.errors import DoesNotFitError, PruneError
from kilobyte.ir import Op
from kilobyte.prune.pipeline import SPREAD, prune_model
from kilobyte.schedule import estimate_resources
from kilobyte.targets.devices import Device
from kilobyte.train import TrainConfig, fit, quantise_module
from kilobyte.zoo.small_cnns import build_resnet

RETRAIN = TrainConfig.plain(epochs=2, lr=1e-3)


@pytest.fixture(scope="module")
def trained():
    """(a resnet-small trained on 1,400 digits, ((train x, y), (test x, y)))."""
    from kilobyte.data import load_dataset

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train, test = load_dataset("digits", seed=0).split(1400)
        torch.manual_seed(0)
        net = build_resnet(0.5, 10, 1)
        fit(net, train.x, train.y, TrainConfig.plain(epochs=6, lr=3e-3))
    finally:
        torch.set_num_threads(threads)
    return net.eval(), ((train.x, train.y), (test.x, test.y))


def conv_weights(graph) -> dict[str, np.ndarray]:
    """Per conv module path, the int8 OHWI weight of its CONV_2D node."""
    return {n.origin: graph.tensors[n.inputs[1]].data for n in graph.nodes if n.op is Op.CONV_2D}


def test_filterlet_pruning_end_to_end(trained):
    net, data = trained
    original = {k: v.clone() for k, v in net.state_dict().items()}
    r = prune_model(net, data, "filterlet", sparsity=0.5, config=RETRAIN)
    assert all(torch.equal(v, original[k]) for k, v in net.state_dict().items())  # the caller's module is untouched
    assert r.sparsity == pytest.approx(0.5, abs=0.01)
    assert r.accuracy_before["int8"] > 0.9
    assert r.accuracy_after["int8"] >= r.accuracy_before["int8"] - 0.03
    weights = conv_weights(r.graph)
    for layer in r.layers:  # int8 weights: whole Cin vectors zero, as many as the ratio says
        w = weights[layer.name]  # (O, KH, KW, I)
        zero = (w == 0).all(axis=-1)
        assert zero.sum() == round(layer.ratio * zero.size)
        kept = zero.size - zero.sum()
        if layer.ratio > 0:
            assert layer.weight_bytes == kept * w.shape[-1]
            assert layer.index_bytes == 2 * (kept + w.shape[0] + 1)
    assert any(layer.ratio > 0.3 for layer in r.layers)
    assert max(r.ratios.values()) <= 0.5 + SPREAD + 1e-9  # no layer loses more than sparsity + spread
    assert r.flash_bytes < r.dense_flash_bytes
    assert r.to_dict()["layers"][0].keys() >= {"name", "ratio", "weight_bytes", "index_bytes"}


def test_csr_and_channel_baselines(trained):
    net, data = trained
    csr = prune_model(net, data, "csr", sparsity=0.5, config=RETRAIN)
    assert csr.sparsity == pytest.approx(0.5, abs=0.01)
    assert csr.accuracy_after["int8"] >= csr.accuracy_before["int8"] - 0.03
    assert csr.index_bytes > 2 * sum(layer.weight_bytes for layer in csr.layers if layer.ratio > 0)
    assert csr.flash_bytes > csr.dense_flash_bytes  # 2 B of index per kept weight: half the weights cost more
    channel = prune_model(net, data, "channel", sparsity=0.3, config=RETRAIN)
    assert 0.3 <= channel.sparsity < 0.32 and channel.index_bytes == 0
    assert channel.accuracy_after["int8"] >= channel.accuracy_before["int8"] - 0.03
    small = conv_weights(channel.graph)
    for layer in channel.layers:  # the int8 graph has the smaller module's channels
        assert small[layer.name].shape[0] == channel.module.get_submodule(layer.name).out_channels
    pruned = [layer for layer in channel.layers if layer.ratio > 0]
    assert pruned and all(".body.0" in layer.name for layer in pruned)  # residual convs keep their channels
    assert sum(w.size for w in small.values()) < sum(w.size for w in conv_weights(csr.graph).values())


def test_device_mode_fits_flash_no_slower_than_uniform(trained):
    net, data = trained
    graph = quantise_module(net, (1, 1, 8, 8), data[0][0][:64])
    dense = estimate_resources(graph, core="cortex-m4").flash_bytes
    device = Device("tight", "cortex-m4", 64 * 1024, dense - 8000, 100_000_000)
    r = prune_model(net, data, "filterlet", device=device, loss_budget=0.05, config=RETRAIN, scheduler_steps=5000)
    assert r.dense_flash_bytes == dense
    assert r.flash_bytes <= device.flash_bytes < r.dense_flash_bytes
    assert r.strategy.loss <= 0.05 and r.strategy.latency <= r.uniform.latency
    assert r.ratios == pytest.approx(r.strategy.ratios, abs=1e-9)
    with pytest.raises(DoesNotFitError, match="SRAM"):
        prune_model(net, data, device=Device("small", "cortex-m4", 512, 10**6, 10**8), config=RETRAIN)


def test_bad_requests_are_refused(trained):
    net, data = trained
    with pytest.raises(PruneError, match="exactly one"):
        prune_model(net, data, sparsity=0.5, device="f410")
    with pytest.raises(PruneError, match="filterlet, csr, channel"):
        prune_model(net, data, "magnitude", sparsity=0.5)
    with pytest.raises(PruneError, match="give a sparsity"):
        prune_model(net, data, "csr", device="f410")
    with pytest.raises(PruneError, match="cannot prune: nope"):
        prune_model(net, data, ratios={"nope": 0.5})
    mlp = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10))
    with pytest.raises(PruneError, match="no standard convolution"):
        prune_model(mlp, data, sparsity=0.5)
