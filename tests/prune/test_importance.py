"""Taylor importance (kilobyte/prune/importance.py) against an oracle computed here with torch.autograd.grad: per
batch the gradient of the mean cross-entropy, the dot product with the weights over each unit, its absolute value,
averaged over the batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from kilobyte.prune.importance import taylor_scores
from kilobyte.prune.layers import conv_layers


def tiny_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 2), nn.Flatten(), nn.Linear(2 * 3 * 3, 5))


def data(n: int = 12):
    rng = np.random.default_rng(1)
    return rng.normal(size=(n, 6, 6, 3)).astype(np.float32), rng.integers(0, 5, n)


def oracle(net, name: str, x, y, batch: int) -> np.ndarray:
    """Per-weight g·w of each batch, (batches, O, I, KH, KW), by autograd.grad on the named conv's weight."""
    weight = dict(net.named_modules())[name].weight
    out = []
    for s in range(0, len(x), batch):
        xb = torch.from_numpy(x[s:s + batch].transpose(0, 3, 1, 2).copy())
        loss = nn.functional.cross_entropy(net(xb), torch.from_numpy(y[s:s + batch]))
        (g,) = torch.autograd.grad(loss, weight)
        out.append((g * weight).detach().double().numpy())
    return np.stack(out)


@pytest.mark.parametrize("unit", ["filterlet", "weight", "channel"])
def test_scores_equal_hand_computed_gradient_times_weight(unit):
    net = tiny_net()
    x, y = data()
    layers = conv_layers(net, (1, 3, 6, 6))
    scores = taylor_scores(net, layers, x, y, unit, batch_size=4)
    for layer in layers:
        gw = oracle(net, layer.name, x, y, 4)  # (3 batches, O, I, KH, KW)
        b, o, i, kh, kw = gw.shape
        expected = np.zeros(layer.score_shape(unit))
        for batch in range(b):
            for f in range(o):
                if unit == "channel":
                    expected[f] += abs(gw[batch, f].sum()) / b
                    continue
                for h in range(kh):
                    for w in range(kw):
                        if unit == "filterlet":
                            expected[f, h, w] += abs(gw[batch, f, :, h, w].sum()) / b
                        else:
                            expected[f, :, h, w] += np.abs(gw[batch, f, :, h, w]) / b
        np.testing.assert_allclose(scores[layer.name], expected, rtol=1e-5, atol=1e-12)
        assert scores[layer.name].shape == layer.score_shape(unit)


def test_zero_filterlets_score_zero_and_first_batches_only():
    net = tiny_net()
    with torch.no_grad():
        net[0].weight[1, :, 2, 0] = 0.0
    x, y = data()
    scores = taylor_scores(net, conv_layers(net, (1, 3, 6, 6)), x, y, "filterlet", batch_size=4, max_batches=1)
    assert scores["0"][1, 2, 0] == 0.0 and (np.delete(scores["0"].ravel(), 1 * 9 + 2 * 3) > 0).all()
    one_batch = taylor_scores(net, conv_layers(net, (1, 3, 6, 6)), x[:4], y[:4], "filterlet", batch_size=4)
    np.testing.assert_array_equal(scores["0"], one_batch["0"])
