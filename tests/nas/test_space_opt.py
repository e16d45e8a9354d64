"""TinyNAS search-space optimisation: the thesis's trends over a grid of budgets, determinism, the report, and the
one-line error when nothing fits."""

from __future__ import annotations

import json

import pytest

from kilobyte.nas.resources import Budget
from kilobyte.nas.space import MBSpace
from kilobyte.nas.space_opt import (
    MIN_FIT_SHARE,
    ConfigStats,
    NoSpaceFitsError,
    choose,
    optimize_space,
    optimize_spaces,
    require_fit,
    write_report,
)

KB = 1024
IMAGENET = MBSpace(num_classes=1000, in_channels=3)  # the thesis's 9 widths x 12 resolutions
SRAMS = (128 * KB, 192 * KB, 256 * KB, 320 * KB, 512 * KB)
FLASHES = (512 * KB, 1024 * KB, 2048 * KB)


def test_trends_of_the_thesis_hold_over_a_grid_of_budgets():
    """Thesis Fig. 5-5: more SRAM at fixed Flash -> the chosen resolution does not fall (unless the chosen width
    rises: at 2 MB Flash no longer caps the width, and extra SRAM may buy width instead — with 60 samples per
    configuration it did at 512 KB); more Flash at fixed SRAM -> the chosen width does not fall. 30 samples per
    configuration (108 of them, 15 budgets): the grid ran 3x longer with 60 for the same assertions."""
    budgets = [Budget(s, f) for f in FLASHES for s in SRAMS]
    choices = dict(zip(((b.sram_bytes, b.flash_bytes) for b in budgets),
                       optimize_spaces(IMAGENET, budgets, samples=30, workers=2)))
    best = {k: (c.best.width, c.best.resolution) for k, c in choices.items()}
    assert len(best) == len(SRAMS) * len(FLASHES) and all(c.best for c in choices.values())
    for f in FLASHES:
        for lo, hi in zip(SRAMS, SRAMS[1:]):
            (w0, r0), (w1, r1) = best[lo, f], best[hi, f]
            assert r1 >= r0 or w1 > w0, (f, lo, hi, best[lo, f], best[hi, f])
            assert w1 >= w0
    for s in SRAMS:
        for lo, hi in zip(FLASHES, FLASHES[1:]):
            assert best[s, hi][0] >= best[s, lo][0], (s, lo, hi)
    # and the resolution really rises with SRAM at 1 MB (not a flat, vacuous grid)
    assert best[512 * KB, 1024 * KB][1] > best[128 * KB, 1024 * KB][1]


def test_same_result_for_any_number_of_workers():
    space = MBSpace(num_classes=10, in_channels=1, widths=(0.2, 0.5), resolutions=(24, 32, 48))
    budget = Budget(24 * KB, 160 * KB)
    a = optimize_space(space, budget, samples=40, workers=1)
    b = optimize_space(space, budget, samples=40, workers=2)
    assert a == b and a.best is not None
    assert all(c.fitting <= c.sampled for c in a.configs)
    roomy = [c for c in a.configs if c.fitting >= MIN_FIT_SHARE * c.sampled]
    assert a.best.mean_macs == max(c.mean_macs for c in roomy)


def test_report_files(tmp_path):
    space = MBSpace(num_classes=10, in_channels=1, widths=(0.2, 0.3), resolutions=(24, 32))
    choice = optimize_space(space, Budget(32 * KB, 128 * KB), samples=20, workers=1)
    paths = write_report(choice, tmp_path)
    data = json.loads(paths["json"].read_text())
    assert data["best"]["width"] == choice.best.width and len(data["configs"]) == 4
    assert paths["plot"].read_bytes()[:4] == b"\x89PNG"


def test_impossible_budget_says_what_the_smallest_network_needs():
    space = MBSpace(num_classes=10, in_channels=1, widths=(0.2,), resolutions=(24, 32))
    choice = optimize_space(space, Budget(1 * KB, 1 * KB), samples=10, workers=1)
    with pytest.raises(NoSpaceFitsError, match=r"no architecture in any of the 2 .* B Flash$") as e:
        require_fit(choice)
    assert "\n" not in str(e.value)
    choice = optimize_space(space, Budget(1 * KB, 10 ** 7), samples=10, workers=1)
    with pytest.raises(NoSpaceFitsError, match=r"smallest sampled network needs [\d,]+ B SRAM"):
        require_fit(choice)


SMALL = MBSpace(num_classes=10, in_channels=1, widths=(0.1, 0.15), resolutions=(16, 20), input_size=(20, 20),
                schedules="adaptive")


def test_a_grid_whose_budget_does_not_bind_grows_and_reports_its_edge():
    """Every network fits 8 MB: the choice sits on the largest width and resolution, so the grid grows (the ladder's
    next widths, the grid's own resolution step) until the limit, and the choice says it is on the edge."""
    choice = optimize_space(SMALL, Budget(8 * 1024 * KB, 8 * 1024 * KB), samples=6, workers=1, grow_to=(0.25, 28))
    widths = sorted({c.width for c in choice.configs})
    resolutions = sorted({c.resolution for c in choice.configs})
    assert widths == [0.1, 0.15, 0.2, 0.25] and resolutions == [16, 20, 24, 28]
    assert (choice.best.width, choice.best.resolution) == (0.25, 28)
    assert set(choice.edge) == {"width", "resolution"}


def test_a_binding_budget_stops_the_growth_inside_the_grid():
    """At 24 KB SRAM the widest networks no longer fit: the grid grows at most until the choice is inside it."""
    choice = optimize_space(SMALL, Budget(24 * KB, 1024 * KB), samples=12, workers=1, grow_to=(2.0, 20))
    widths = sorted({c.width for c in choice.configs})
    assert choice.best is not None and choice.best.width < max(widths) < 2.0
    assert "width" not in choice.edge
    # every configuration of one (w, r) draws the same networks: the schedules are compared pairwise
    assert len({c.strides for c in choice.configs}) > 1


def test_a_tie_below_the_datas_resolution_goes_to_the_one_at_or_above_it():
    """Mean MACs are estimated from the sampled networks that fit: within two standard errors of the difference, a
    configuration at or above the data's side is preferred to one below it; a clear lead, or no native side, keeps
    the largest mean."""
    def stats(resolution, macs):
        return ConfigStats(0.1, resolution, 100, len(macs), sum(macs) / len(macs), tuple(sorted(macs)), 0, 0)
    spread = [-4e5, -2e5, 0, 2e5, 4e5] * 10  # 50 networks: sd 2.83e5, standard error of the mean 4.0e4
    low = stats(24, [3.00e6 + d for d in spread])
    tied = stats(48, [2.95e6 + d for d in spread])  # 5e4 below: inside 2 x hypot(4e4, 4e4) = 1.13e5
    behind = stats(40, [2.80e6 + d for d in spread])
    budget = Budget(32 * KB, 128 * KB)
    assert 3.9e4 < low.macs_error < 4.1e4
    assert choose(budget, (low, tied, behind)).best is low  # no native side: the thesis's rule alone
    choice = choose(budget, (low, tied, behind), native=32)
    assert choice.best is tied and choice.tie_break is low and choice.to_json()["tie_break"] == "w0.1-r24"
    assert choose(budget, (low, behind), native=32).best is low  # 2e5 below: the mean MACs tell them apart
    assert choose(budget, (low, tied, behind), native=24).best is low  # already at the data's side
