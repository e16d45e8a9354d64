"""`--minutes` as a budget (nas/budget.py): the plan's arithmetic, the measurement leaving the supernet untouched,
and a plan applied only to the settings the user left to it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from kilobyte.nas.budget import (
    DEPLOY_SECONDS,
    LOOP_OVERHEAD,
    MAX_EPOCHS,
    MAX_GENERATIONS,
    MIN_EPOCHS,
    POPULATION,
    SANDWICH_COST,
    SHARES,
    SPACE_SHARE,
    StepCosts,
    StepModel,
    apply_plan,
    largest_macs_cap,
    measure_costs,
    plan_finetune,
    plan_phases,
    space_samples,
)
from kilobyte.nas.resources import Budget
from kilobyte.nas.search import PLANNED, SearchConfig
from kilobyte.nas.space import MBSpace
from kilobyte.nas.space_opt import ConfigStats, choose
from kilobyte.nas.supernet import SuperNet
from kilobyte.nas.supernet_train import SubnetScorer, SupernetTraining

COSTS = StepCosts(largest_step=0.05, sandwich_step=0.3, evaluation=0.5, steps_per_epoch=60)


def test_the_plan_fills_the_time_left_by_the_shares():
    plan = plan_phases(900, 60, COSTS, workers=2, finetune_step=0.04)
    left = 900 - 60 - DEPLOY_SECONDS
    evaluations = plan.population * (plan.generations + 1)
    assert POPULATION[0] <= plan.population <= POPULATION[1] and plan.generations <= MAX_GENERATIONS
    assert plan.seconds["evolution"] == evaluations * 0.5 / 2 <= SHARES["evolution"] * left + 1e-9
    # the training phases share the rest in proportion, each less than one epoch short of its part
    training = left - plan.seconds["evolution"]
    weight = SHARES["largest"] + SHARES["supernet"] + SHARES["finetune"]
    for phase, step in (("largest", 0.05 * LOOP_OVERHEAD), ("supernet", 0.3 * LOOP_OVERHEAD), ("finetune", 0.04)):
        epoch = step * COSTS.steps_per_epoch
        part = SHARES[phase] / weight * training
        assert part - epoch < plan.seconds[phase] <= part + 1e-9, phase
        assert getattr(plan, f"{phase}_epochs") == round(plan.seconds[phase] / epoch)
    total = sum(plan.seconds.values())
    assert 0.8 * 900 <= total <= 900


def test_cheap_evaluations_stop_at_the_generation_cap_and_give_training_the_time():
    plan = plan_phases(900, 60, replace(COSTS, evaluation=0.01), workers=2, finetune_step=0.04)
    assert (plan.population, plan.generations) == (POPULATION[1], MAX_GENERATIONS)
    assert plan.supernet_epochs > plan_phases(900, 60, COSTS, workers=2, finetune_step=0.04).supernet_epochs


def test_tiny_data_stops_at_the_epoch_caps_and_a_spent_budget_still_trains_once():
    cheap = replace(COSTS, largest_step=1e-4, sandwich_step=1e-4)
    plan = plan_phases(900, 0, cheap, workers=1, finetune_step=1e-4)
    assert (plan.largest_epochs, plan.supernet_epochs, plan.finetune_epochs) == \
        (MAX_EPOCHS["largest"], MAX_EPOCHS["supernet"], MAX_EPOCHS["finetune"])
    spent = plan_phases(60, 120, COSTS, workers=1, finetune_step=0.04)
    assert (spent.largest_epochs, spent.supernet_epochs, spent.finetune_epochs, spent.generations) == (1, 1, 1, 1)
    assert plan_finetune(10, 0.05, 60) == 1 and plan_finetune(DEPLOY_SECONDS + 30, 0.05, 60) == 10


def test_space_samples_scale_with_the_minutes():
    assert space_samples(15) == 150 and space_samples(60) == 150
    assert space_samples(5) == 50 and space_samples(0.5) == 40


def test_the_macs_cap_leaves_the_minimum_epochs_their_time():
    model = StepModel(fixed=0.01, per_mac=2e-8)
    cap = largest_macs_cap(15, model, steps_per_epoch=50)
    step = model.seconds(cap)
    units = LOOP_OVERHEAD * (MIN_EPOCHS["largest"] + SANDWICH_COST * MIN_EPOCHS["supernet"]) + MIN_EPOCHS["finetune"]
    training = (15 * 60 * (1 - SPACE_SHARE) - DEPLOY_SECONDS) * (1 - SHARES["evolution"])
    assert abs(step * units * 50 - training) < 1e-6 * training
    assert largest_macs_cap(30, model, 50) > cap > largest_macs_cap(15, model, 100)
    assert largest_macs_cap(1, model, 50) == 0  # a minute cannot train anything: the smallest configuration


def test_a_time_cap_chooses_the_most_macs_among_the_fast_configurations():
    def stats(width, mean, largest, fitting=50):
        return ConfigStats(width, 28, 100, fitting, mean, (), 0, 0, largest_macs=largest)
    configs = (stats(0.1, 1e6, 3e6), stats(0.2, 2e6, 6e6), stats(0.3, 3e6, 9e6), stats(0.4, 4e6, 12e6, fitting=2))
    budget = Budget(32 * 1024, 128 * 1024)
    assert choose(budget, configs).best.width == 0.3  # 0.4: only 2 % of its samples fit
    capped = choose(budget, configs, max_largest_macs=7e6)
    assert capped.best.width == 0.2 and capped.too_slow == 1
    assert choose(budget, configs, max_largest_macs=1e6).best.width == 0.1  # none is fast: the fastest


def test_a_plan_changes_only_what_was_left_to_it():
    config = SearchConfig("stm32f410", 32 * 1024, 128 * 1024, minutes=5,
                          planned=("supernet_epochs", "population"))
    plan = {"largest_epochs": 9, "supernet_epochs": 7, "population": 12, "generations": 5, "finetune_epochs": 3}
    out = apply_plan(config, plan)
    assert out.training.supernet_epochs == 7 and out.evolution.population == 12 and out.evolution.parents == 3
    assert out.training.largest_epochs == config.training.largest_epochs
    assert out.evolution.generations == config.evolution.generations
    assert out.finetune_epochs == config.finetune_epochs
    everything = apply_plan(replace(config, planned=PLANNED), plan)
    assert (everything.training.largest_epochs, everything.evolution.generations, everything.finetune_epochs) == \
        (9, 5, 3)


@pytest.mark.usefixtures("one_torch_thread")
def test_measuring_leaves_the_supernet_as_it_was():
    space = MBSpace(num_classes=10, in_channels=1, widths=(0.2,), resolutions=(16,))
    torch.manual_seed(0)
    net = SuperNet(space, 0.2, 16)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    x = torch.randn(96, 1, 16, 16)
    y = torch.from_numpy(np.arange(96) % 10)
    cfg = SupernetTraining(batch_size=32)
    costs = measure_costs(net, x, y, cfg, lambda n: SubnetScorer(n, x[:64], x[:32], y[:32], calib_batches=2), 0)
    assert costs.steps_per_epoch == 3
    assert 0 < costs.largest_step < costs.sandwich_step  # the sandwich runs the largest and 5 more subnets
    assert costs.evaluation > 0
    after = net.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_fine_tuning_spends_the_epochs_its_budget_gave_it():
    """Fine-tuning's epochs are sized to the time left: it never stops early (a one-cycle run's peak-rate epochs fall
    below the inherited weights and would trip the patience), and it still keeps the inherited weights unless an epoch
    matches them."""
    from kilobyte.nas.search import finetune_config

    cfg = finetune_config(SearchConfig("stm32f410", 32 * 1024, 128 * 1024, data="digits"), 16)
    assert cfg.patience is None and cfg.keep_initial
    assert cfg.resolution == 16 and cfg.schedule == "onecycle"
