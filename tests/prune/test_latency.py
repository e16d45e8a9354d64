"""The latency model's fit (kilobyte/prune/latency.py): samples made from known constants plus 1 % noise give the
constants back, with a fit error at the noise's level; too few samples are refused; the shipped Cortex-M7 constants
are the fit of their stored samples (tests/targets/test_latency_cortexm.py predicts a fresh measurement with them)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kilobyte.prune.latency import (
    SHIPPED_MODELS,
    LatencyModel,
    LatencySample,
    fit_kernel_latency,
    fit_latency,
    sample_from_dict,
    shipped_model,
)
from kilobyte.prune.layers import ConvLayer

TRUTH = LatencyModel(t_mem=1.5, t_idx=6.0, t_com=2.5, t_post=14.0, lanes=16)


def samples(rng, n: int, noise: float) -> list[LatencySample]:
    out = []
    for _ in range(n):
        layer = ConvLayer("c", int(rng.choice([8, 16, 32, 64])), int(rng.choice([3, 8, 16, 24, 48, 64])),
                          *[int(rng.choice([1, 3, 5]))] * 2, *[int(rng.choice([4, 8, 16]))] * 2)
        alpha = float(rng.choice([0.0, 0.3, 0.6, 0.9]))
        exact = TRUTH.layer(layer, alpha)
        out.append(LatencySample(layer, alpha, exact * (1 + noise * rng.normal())))
    return out


def test_fit_recovers_known_constants_from_noisy_samples():
    rng = np.random.default_rng(0)
    fit = fit_latency(samples(rng, 40, 0.01), lanes=16)
    np.testing.assert_allclose(fit.model.as_array(), TRUTH.as_array(), rtol=0.05)
    assert fit.rank == 4
    assert 0.003 < fit.relative_rms < 0.02  # the 1 % noise, not more
    assert fit.mse > 0 and "t_com" in fit.describe()


def test_exact_samples_fit_exactly_and_prediction_follows_alpha():
    rng = np.random.default_rng(1)
    fit = fit_latency(samples(rng, 10, 0.0))  # the paper's 10 samples
    np.testing.assert_allclose(fit.model.as_array(), TRUTH.as_array(), rtol=1e-9)
    assert fit.relative_rms < 1e-9
    layer = ConvLayer("c", 16, 32, 3, 3, 8, 8)
    saved = fit.model.layer(layer, 0.0) - fit.model.layer(layer, 0.5)
    assert saved == pytest.approx(0.5 * layer.filterlets * fit.model.per_filterlet(layer))


def test_too_few_samples_are_refused():
    with pytest.raises(ValueError, match="3 samples"):
        fit_latency(samples(np.random.default_rng(2), 3, 0.0))


def test_one_geometry_fits_but_says_the_constants_are_undetermined():
    layer = ConvLayer("c", 64, 64, 3, 3, 16, 16)
    fit = fit_latency([LatencySample(layer, a, TRUTH.layer(layer, a)) for a in (0.0, 0.2, 0.5, 0.7, 0.9)])
    assert fit.rank == 2 and "rank 2 of 4" in fit.describe()
    assert fit.relative_rms < 1e-9  # T̂ itself is still predicted exactly


def test_shipped_constants_are_the_fit_of_the_shipped_samples():
    """latency_cortex_m7.json (bench/bench_dtmm.py --fit-latency): refitting its samples gives its constants and
    errors back, and its held-out error is what the constants give on its held-out samples."""
    data = json.loads(SHIPPED_MODELS["cortex-m7"].read_text())
    fit = fit_kernel_latency([sample_from_dict(d) for d in data["samples"]])
    model = shipped_model("cortex-m7")
    np.testing.assert_allclose(fit.model.as_array(), model.as_array(), rtol=1e-9)
    np.testing.assert_allclose(fit.model.scalar.as_array(), model.scalar.as_array(), rtol=1e-9)
    assert (model.lanes, model.scalar.lanes) == (4, 1) and fit.ranks == (5, 5)
    assert fit.summary()["all"]["relative_rms"] == pytest.approx(data["fit"]["all"]["relative_rms"])
    held = fit.evaluate([sample_from_dict(d) for d in data["held_out_samples"]])
    assert held["all"]["max_relative"] == pytest.approx(data["held_out"]["all"]["max_relative"])
    assert held["all"]["relative_rms"] < 0.05  # what docs/benchmarks.md reports: 3.0 %


def test_two_paths_pick_constants_by_cin():
    model = LatencyModel(1.0, 0.0, 0.0, 0.0, lanes=4, scalar=LatencyModel(2.0, 0.0, 0.0, 0.0, lanes=1))
    assert model.layer(ConvLayer("c", 8, 8, 1, 1, 1, 1), 0.0) == 8.0
    assert model.layer(ConvLayer("c", 8, 6, 1, 1, 1, 1), 0.0) == 12.0
    assert LatencyModel.from_dict(model.to_dict()) == model
