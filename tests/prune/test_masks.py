"""Masks (kilobyte/prune/masks.py): filterlet masks zero whole Cin vectors, remove exactly round(α x filterlets) per
layer and the lowest-scored ones; the masks hold through retraining with momentum and weight decay; the sparsity
allocation removes what it is asked to, cheapest per weight first."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kilobyte.prune.layers import ConvLayer, conv_layers
from kilobyte.prune.masks import (
    ParameterMasks,
    achieved_ratios,
    keep_lowest_removed,
    ratios_for_sparsity,
    removal_counts,
    unit_keep,
)
from kilobyte.train import TrainConfig, fit
from kilobyte.zoo.small_cnns import build_vgg

RATIOS = {"features.0": 0.25, "features.4": 0.5, "features.8": 0.9, "features.11": 0.0, "features.25": 0.7}


def vgg_with_scores(seed: int = 0):
    torch.manual_seed(seed)
    net = build_vgg(0.25, 10, 1)
    layers = conv_layers(net, (1, 1, 16, 16))
    rng = np.random.default_rng(seed)
    scores = {c.name: rng.random(c.score_shape("filterlet")) for c in layers}
    return net, layers, scores


def zero_filterlets(weight: torch.Tensor) -> np.ndarray:
    """(O, KH, KW) booleans: the filterlet's Cin weights all 0."""
    return (weight.detach() == 0).all(dim=1).numpy()


def test_filterlet_masks_zero_whole_cin_vectors_at_the_asked_ratio():
    net, layers, scores = vgg_with_scores()
    counts = removal_counts(layers, RATIOS, "filterlet")
    keep = unit_keep(scores, counts)
    ParameterMasks.for_units(net, keep, "filterlet").apply()
    for c in layers:
        w = net.get_submodule(c.name).weight.detach()  # (O, I, KH, KW)
        zero = w == 0
        # every filterlet is all zero or (random init) all non-zero: the unit is the whole Cin vector
        assert (zero.all(dim=1) | (~zero).all(dim=1)).all()
        removed = zero_filterlets(w)
        assert removed.sum() == round(RATIOS.get(c.name, 0.0) * c.filterlets)
        if removed.any():  # the removed ones are the lowest scores
            assert scores[c.name][removed].max() < scores[c.name][~removed].min()
    achieved = achieved_ratios(net, layers, "filterlet")
    for c in layers:
        assert achieved[c.name] == pytest.approx(RATIOS.get(c.name, 0.0), abs=0.5 / c.filterlets)


def test_keep_lowest_removed_breaks_ties_by_index():
    assert keep_lowest_removed(np.array([1.0, 0.5, 0.5, 0.5]), 2).tolist() == [True, False, False, True]


def test_masks_survive_retraining():
    """SGD with momentum and weight decay moves every weight; the on_step masks keep the pruned ones exactly 0 and
    the kept ones still train."""
    net, layers, scores = vgg_with_scores(1)
    keep = unit_keep(scores, removal_counts(layers, RATIOS, "filterlet"))
    masks = ParameterMasks.for_units(net, keep, "filterlet")
    masks.apply()
    before = {c.name: net.get_submodule(c.name).weight.detach().clone() for c in layers}
    rng = np.random.default_rng(0)
    x, y = rng.random((64, 16, 16, 1)).astype(np.float32), rng.integers(0, 10, 64)
    config = TrainConfig(epochs=2, batch_size=16, lr=0.05, validation_fraction=0.0, patience=None, augment=False,
                         weight_decay=1e-2)
    steps = []
    fit(net, x, y, config, on_step=lambda s, t: (masks(s, t), steps.append(s)))
    assert steps == list(range(1, 9))
    for c in layers:
        w = net.get_submodule(c.name).weight.detach()
        np.testing.assert_array_equal(zero_filterlets(w), ~keep[c.name])
        kept = torch.from_numpy(keep[c.name])[:, None].expand_as(w)  # (O, I, KH, KW)
        assert (w[kept] != before[c.name][kept]).float().mean() > 0.9


def test_ratios_for_sparsity_removes_the_goal_cheapest_per_weight_first():
    # b's filterlets hold 4 weights each: its score 2.0 is 0.5 per weight, below a's 1.0 per weight
    a, b = ConvLayer("a", 2, 1, 1, 2, 4, 4), ConvLayer("b", 2, 4, 1, 1, 4, 4)
    scores = {"a": np.array([[[1.0, 5.0]], [[6.0, 7.0]]]), "b": np.array([[[2.0]], [[30.0]]])}
    assert ratios_for_sparsity([a, b], scores, "filterlet", 4) == {"a": 0.0, "b": 0.5}
    assert ratios_for_sparsity([a, b], scores, "filterlet", 5) == {"a": 0.25, "b": 0.5}
    capped = ratios_for_sparsity([a, b], scores, "filterlet", 100, max_ratio=0.5)
    assert capped == {"a": 0.5, "b": 0.5}


def greedy(layers, scores, unit, goal, max_ratio, sizes):
    """The allocation one unit at a time: cheapest per weight first, skipping layers at their cap."""
    room = [min(int(max_ratio * c.units(unit)), c.units(unit) - (unit == "channel")) for c in layers]
    items = sorted((s / sizes[i], i) for i, c in enumerate(layers) for s in scores[c.name].ravel())
    removed, taken = [0] * len(layers), 0
    for _, i in items:
        if taken >= goal:
            break
        if removed[i] < room[i]:
            removed[i], taken = removed[i] + 1, taken + sizes[i]
    return {c.name: removed[i] / c.units(unit) for i, c in enumerate(layers)}


@pytest.mark.parametrize("seed", range(6))
def test_ratios_for_sparsity_equals_the_one_at_a_time_greedy(seed):
    rng = np.random.default_rng(seed)
    layers = [ConvLayer(f"l{i}", int(rng.integers(2, 9)), int(rng.integers(1, 9)), 3, 3, 4, 4) for i in range(4)]
    unit = ["filterlet", "weight", "channel"][seed % 3]
    scores = {c.name: rng.random(c.score_shape(unit)) for c in layers}
    sizes = [c.unit_size(unit) for c in layers]
    goal = float(rng.uniform(0, 1.1)) * sum(c.weights for c in layers)
    expected = greedy(layers, scores, unit, goal, 0.8, sizes)
    assert ratios_for_sparsity(layers, scores, unit, goal, 0.8) == expected
