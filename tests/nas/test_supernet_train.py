"""The supernet phase learns, and a search says so when it did not (issue 26).

On 26 letters the summed gradients of 6 subnets per step sent every subnet to chance (ln 26) for good; the search
then scored 239 subnets at 4.6 % and presented a random pick as its winner. Here, through the search's own
`train_supernet` (store, checkpoint, scorer): on digits with a tiny budget the random subnets keep >= 80 % of the
largest network's validation accuracy and the report has no warning; with random labels nothing can be learned, so
`searched` is False and the printed report says so in one line.
"""

from __future__ import annotations

import numpy as np
import torch

from kilobyte.cli.search_cmd import _supernet_rows
from kilobyte.nas.search import SearchConfig, SearchContext, _space, split_data, train_supernet
from kilobyte.nas.store import SearchStore
from kilobyte.nas.supernet import SuperNet
from kilobyte.nas.supernet_train import SupernetTraining
from kilobyte.train import to_nchw_tensor

WIDTH, RESOLUTION = 0.25, 12  # a digits configuration of the stm32f410 budget (the CLI test's space picks one)


def _check(tmp_path, shuffle_labels: bool) -> dict:
    torch.set_num_threads(1)
    epochs = (1, 1) if shuffle_labels else (3, 2)  # nothing to learn from random labels: one epoch each is enough
    config = SearchConfig(device="stm32f410", sram_bytes=32 * 1024, flash_bytes=128 * 1024, data="digits",
                          training=SupernetTraining(*epochs), train_images=400 if shuffle_labels else None)
    fit, val, _ = split_data("digits", 0, config.train_fraction, config.val_images, config.train_images)
    fit_y, val_y = fit.y, val.y
    if shuffle_labels:  # labels independent of the images: no network can beat chance on the validation split
        rng = np.random.default_rng(0)
        fit_y, val_y = rng.integers(0, 10, len(fit_y)), rng.integers(0, 10, len(val_y))
    torch.manual_seed(0)
    net = SuperNet(_space(config, 1, 10, 8), WIDTH, RESOLUTION)
    x = to_nchw_tensor(fit.x, RESOLUTION)
    store = SearchStore(tmp_path / "search.sqlite", config.settings(), resume=False)
    try:
        ctx = SearchContext(config, tmp_path, store, log=lambda *a: None)
        return train_supernet(ctx, net, x, torch.from_numpy(fit_y), x, to_nchw_tensor(val.x, RESOLUTION),
                              torch.from_numpy(val_y))
    finally:
        store.close()


def test_on_digits_the_random_subnets_keep_most_of_the_largest_accuracy(tmp_path):
    """Measured: warm-up 20.6 %, then largest 25.4 %, random mean 20.7 % (81 %; chance 11.2 %).
    Deterministic (one thread, seeded), but the margin is small: at 6 + 3 epochs the largest pulls ahead (40 % vs
    21 % in bench/diag_supernet.py), the random subnets being trained far less often."""
    c = _check(tmp_path, shuffle_labels=False)
    assert c["largest_warmup"] > c["chance"] + 0.05 and len(c["random"]) == 4, c
    assert c["random_mean"] >= 0.8 * c["largest"], c
    assert c["searched"] and c["reason"] is None
    rows = _supernet_rows({"supernet": c})
    assert [k for k, _ in rows] == ["largest network (validation)", "supernet (validation)"]


def test_random_labels_are_reported_as_not_searched_in_one_line(tmp_path):
    c = _check(tmp_path, shuffle_labels=True)
    assert not c["searched"] and c["random_mean"] < c["threshold"], c
    warnings = [v for k, v in _supernet_rows({"supernet": c}) if k == "WARNING"]
    assert len(warnings) == 1 and "\n" not in warnings[0] and "not a searched result" in warnings[0]
