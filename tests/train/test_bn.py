"""BatchNorm recalibration: every layer's running statistics become its input's statistics on the given data
(numpy mean / unbiased variance of what the layer sees), and nothing else about the module changes."""

from __future__ import annotations

import numpy as np
import pytest

from kilobyte.train import recalibrate_bn

torch = pytest.importorskip("torch")
nn = torch.nn


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(),
                         nn.Conv2d(6, 4, 3, stride=2), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 7 * 7, 5), nn.BatchNorm1d(5))


def _images(n: int) -> np.ndarray:
    """(n, 16, 16, 3) NHWC, mean 2 and spread 3: far from a fresh layer's statistics (0, 1)."""
    return np.random.default_rng(0).normal(2.0, 3.0, (n, 16, 16, 3)).astype(np.float32)


def _bn_inputs(module, x, batch_size: int) -> dict:
    """What each BatchNorm layer sees during recalibration, per batch: {layer: [(B, C, ...) arrays]}."""
    seen: dict = {m: [] for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)}
    hooks = [m.register_forward_pre_hook(lambda m, a: seen[m].append(a[0].detach().numpy().copy())) for m in seen]
    recalibrate_bn(module, x, batches=len(x) // batch_size, batch_size=batch_size)
    for h in hooks:
        h.remove()
    return seen


def _channel_stats(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    flat = np.moveaxis(a, 1, 0).reshape(a.shape[1], -1)  # (C, everything else)
    return flat.mean(1), flat.var(1, ddof=1)


def test_one_batch_gives_exactly_the_data_statistics():
    net, x = _net(), _images(64)
    seen = _bn_inputs(net, x, batch_size=64)
    for bn, inputs in seen.items():
        assert len(inputs) == 1
        mean, var = _channel_stats(inputs[0])
        np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=1e-4)
        assert bn.num_batches_tracked.item() == 1


def test_several_batches_average_to_the_data_statistics():
    net, x = _net(), _images(256)
    seen = _bn_inputs(net, x, batch_size=32)
    for bn, inputs in seen.items():
        assert len(inputs) == 8
        mean, var = _channel_stats(np.concatenate(inputs))
        np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5, atol=1e-5)  # equal batches: exact
        np.testing.assert_allclose(bn.running_var.numpy(), var, rtol=0.05)  # mean of batch variances
        assert np.abs(mean).max() > 0.5 or np.abs(var - 1).max() > 0.5  # the data really moved the statistics


def test_weights_mode_and_momentum_unchanged():
    net = _net().eval()
    before = {k: v.clone() for k, v in net.state_dict().items() if "running" not in k and "batches" not in k}
    recalibrate_bn(net, _images(128), batches=2, batch_size=64)
    assert not net.training
    assert all(m.momentum == 0.1 for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm))
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in before.items())


def test_resolution_resizes_before_the_forward_pass():
    """Images recalibrated at another resolution: the first layer's statistics are those of the resized images."""
    net, x = _net(), _images(64)
    recalibrate_bn(net, x[:, :8, :8], batches=1, batch_size=64, resolution=16)
    xt = torch.nn.functional.interpolate(torch.from_numpy(x[:, :8, :8].transpose(0, 3, 1, 2).copy()), size=(16, 16),
                                         mode="bilinear", align_corners=False)
    mean, _ = _channel_stats(net[0](xt).detach().numpy())
    np.testing.assert_allclose(net[1].running_mean.numpy(), mean, rtol=1e-5, atol=1e-5)


def test_recalibrate_batches_uses_the_given_batches_in_order():
    """The batches as given (TinyNAS's subnet scorer hands the same fixed ones to every subnet, a short last one
    included): a BatchNorm on the input ends with the mean of the batch means and of the unbiased batch variances,
    computed by numpy; the module's mode is kept."""
    from kilobyte.train import recalibrate_batches

    torch.manual_seed(0)
    bn = nn.BatchNorm2d(3).eval()
    x = _images(100).transpose(0, 3, 1, 2)
    batches = [x[:64], x[64:]]  # 64 + 36 images
    recalibrate_batches(bn, [torch.from_numpy(b) for b in batches])
    stats = [_channel_stats(b) for b in batches]
    np.testing.assert_allclose(bn.running_mean.numpy(), np.mean([m for m, _ in stats], 0), rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), np.mean([v for _, v in stats], 0), rtol=1e-5)
    assert not bn.training and bn.momentum == 0.1
