"""MCUNetV2's joint search (`kilobyte search --patch`, issue #17): the patch-aware resource evaluator is the compiler's
own figures for the schedule it picks, the latency cap works through the fitted model, and the whole search on
bundled digits under 8 KB of SRAM — where no per-layer network above 12 px fits — compiles a patch-stage winner that
is bit-exact with TensorFlow Lite Micro and fits by the linked firmware."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from kilobyte.nas.build import network
from kilobyte.nas.resources import device_budget, layer_counts
from kilobyte.nas.search import SearchConfig, evaluator, plan_options, search_budget, search_space
from kilobyte.schedule import estimate_resources, patch_candidates
from kilobyte.schedule.latency import estimate_instructions
from kilobyte.targets.cortexm.firmware import DEFAULT_STACK_BYTES

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _joint(sram_kb: int, r: int, w: float = 0.1, native: int = 28):
    config = SearchConfig("stm32f410", sram_kb * 1024, 128 * 1024, patch=True)
    return config, search_space(config, 1, 10, native).with_config(w, r)


def test_joint_space_is_mcunetv2s_genome():
    config, _ = _joint(16, 64)
    space = search_space(config, 1, 10, 28)
    assert space.stage_width_choices == (0.5, 0.75, 1.0) and space.rd_stages == 2
    assert max(space.resolutions) == 112 and min(space.resolutions) == 16  # up to 4x MNIST's 28 px
    per_layer = search_space(dataclasses.replace(config, patch=False), 1, 10, 28)
    assert per_layer.stage_width_choices == (1.0,) and per_layer.rd_stages == 0 and max(per_layer.resolutions) == 40


def test_fitting_is_the_cheapest_schedule_that_fits_with_the_compilers_figures():
    """For random networks at 16 KB: `fitting` = estimate_resources with the chosen schedule; no schedule with fewer
    MACs fits (brute force over every candidate); the arena limit is the budget's SRAM minus input and stack."""
    patched = per_layer = rejected = 0
    for r, arch_seed in ((24, 0), (24, 1), (32, 2), (32, 3), (64, 4), (64, 5), (80, 6)):
        config, space = _joint(16, r)
        ev, budget = evaluator(config, space, "cortex-m4"), search_budget(config)
        arch = space.sample(np.random.default_rng(arch_seed))
        graph, options = ev.graph(arch), dataclasses.replace(plan_options(config), patch=None)
        limit = budget.sram_bytes - budget.sram_reserve - arch.resolution ** 2 - 10  # input and the 10 outputs
        fitting = ev.fitting(arch, budget)
        feasible = []
        for c in patch_candidates(graph, options):
            res = estimate_resources(graph, dataclasses.replace(options, patch=c.patch), core="cortex-m4")
            if res.arena_bytes <= limit and budget.admits(res):
                feasible.append((res.macs, c.patch, res))
        assert (fitting is None) == (not feasible) == (not ev.fits(arch, budget))
        if fitting is None:
            rejected += 1
            continue
        schedule = ev.schedule(arch, budget)
        assert fitting == estimate_resources(graph, dataclasses.replace(options, patch=schedule), core="cortex-m4")
        assert fitting.macs == min(m for m, _, _ in feasible)
        patched += schedule is not None
        per_layer += schedule is None
    assert patched >= 2 and rejected + per_layer >= 1, (patched, per_layer, rejected)


def test_max_latency_uses_the_fitted_model():
    """A cap on Cortex-M7 instructions (the latency model, for the schedule the evaluator picks) admits the networks
    under it and rejects those over it."""
    config, space = _joint(16, 32)
    rng = np.random.default_rng(3)
    ev = evaluator(config, space, "cortex-m4")
    archs = [a for a in (space.sample(rng) for _ in range(12)) if ev.fits(a, search_budget(config))][:3]
    assert len(archs) >= 3
    capped = dataclasses.replace(config, max_instructions=1)
    ev_lat, budget = evaluator(capped, space, "cortex-m4"), search_budget(capped)
    counts = []
    for arch in archs:
        n = ev_lat.instructions(arch, budget)
        schedule = ev_lat.schedule(arch, budget)
        options = dataclasses.replace(plan_options(config), patch=schedule)
        assert n == estimate_instructions(ev_lat.graph(arch), options, core="cortex-m7").total
        counts.append(n)
    cap = sorted(counts)[len(counts) // 2]
    budget = dataclasses.replace(budget, max_instructions=cap)
    ev_cap = evaluator(dataclasses.replace(config, max_instructions=cap), space, "cortex-m4")
    for arch, n in zip(archs, counts):
        assert ev_cap.fits(arch, budget) == (n <= cap)


def test_device_budget_limit_leaves_room_for_input_and_stack():
    config, space = _joint(16, 64)
    ev = evaluator(config, space, "cortex-m4")
    arch = space.sample(np.random.default_rng(0))
    budget = device_budget(16 * 1024, 128 * 1024)
    assert ev._limit(arch, budget) == 16 * 1024 - budget.sram_reserve - 64 * 64 - 10


def test_patch_with_unas_is_refused():
    run = subprocess.run([sys.executable, "-m", "kilobyte", "search", "--strategy", "unas", "--patch", "--data",
                          "digits"], capture_output=True, text=True, env=ENV, timeout=120)
    assert run.returncode != 0 and "--patch" in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_joint_search_on_digits_compiles_a_patch_stage(tmp_path):
    out = tmp_path / "s"
    cmd = [sys.executable, "-m", "kilobyte", "search", "--patch", "--data", "digits", "--device", "stm32f410",
           "--max-sram", "4KB", "--space-samples", "8", "--epochs", "1,0,1", "--population", "4", "--generations",
           "1", "--workers", "1", "--out", str(out), "--json"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    # --max-sram bounds the model (arena + input); the measured firmware holds the 4 KB stack besides
    assert report["bit_exact"] is True and report["fits"] is True
    assert report["planned"]["arena_bytes"] + report["planned"]["input_bytes"] + 10 <= 4 * 1024
    assert report["sram_bytes"] <= 4 * 1024 + DEFAULT_STACK_BYTES + 1024  # + the firmware's own few hundred bytes
    # per layer nothing above 12 px fits 4 KB; space optimisation prefers the larger inputs a patch stage allows
    assert report["space"]["resolution"] > 12
    patch = report["patch"]
    assert set(patch) == {"n_nodes", "grid", "input_patch", "mac_overhead"}
    manifest = json.loads((out / "model" / "kilobyte.json").read_text())
    assert (manifest["patch"]["n_nodes"], manifest["patch"]["grid"]) == (patch["n_nodes"], patch["grid"])
    assert manifest["patch"]["input_patch"] == patch["input_patch"] < report["space"]["resolution"]
    planned = report["planned"]
    assert planned["per_layer_peak_bytes"] > planned["peak_bytes"] == manifest["peak_bytes"]
    assert patch["mac_overhead"] == pytest.approx((manifest["macs"] - planned["per_layer_macs"])
                                                  / planned["per_layer_macs"])


def test_space_choice_scores_a_configuration_by_its_networks_own_macs():
    """TinyNAS scores a (w, r) configuration by the mean MACs of its fitting networks — their capacity. Under a patch
    schedule the halo recomputation adds MACs that are a cost: they must not count (counting them pushed issue 28's
    joint detection search to w0.1 at the resolution where patches start). At 16 KB and 64 px most fitting networks
    need a patch stage, so the two measures differ."""
    from kilobyte.nas.space_opt import config_seed, score_configs

    config, space = _joint(16, 64)
    budget = search_budget(config)
    (stats,), = score_configs(space, (budget,), [(0.1, 64, space.strides)], samples=12, seed=3,
                              options=plan_options(config), workers=1, progress=False, core="cortex-m4")
    ev = evaluator(config, space, "cortex-m4")
    rng = np.random.default_rng(config_seed(3, 0.1, 64))
    archs = [a for a in (space.sample(rng) for _ in range(12)) if ev.fits(a, budget)]
    own = sorted(layer_counts(network(space, a))[1] for a in archs)
    scheduled = sorted(ev.fitting(a, budget).macs for a in archs)
    assert len(own) >= 3 and sum(scheduled) > sum(own)  # patches recompute: the measures differ here
    assert stats.macs == tuple(own) and stats.fitting == len(own)
