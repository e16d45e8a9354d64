"""`targets.fit_hint.suggest_fit`: the first configuration that fits, from the device asked for upwards in SRAM.

Oracle: `estimate_resources` planned independently for every (device, patch) pair of the catalogue — the hint's
device is the smallest in SRAM that any plan fits, its arena is the plan's, and nothing is suggested for a model
whose weights no device's Flash holds. (That a hint really links is `tests/cli/test_compile_cmd.py`'s.)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from random_nets import _int8_weighted, wide_head_model

from kilobyte.ir import FullyConnectedAttrs, GraphBuilder, Op, QParams, ReshapeAttrs
from kilobyte.schedule.estimate import estimate_resources
from kilobyte.schedule.plan_types import PlanOptions
from kilobyte.targets.cortexm.firmware import DEFAULT_STACK_BYTES
from kilobyte.targets.devices import get_device, list_devices
from kilobyte.targets.fit_hint import FIRMWARE_SLACK_BYTES, suggest_fit


def fits(graph, patch, device) -> bool:
    r = estimate_resources(graph, replace(PlanOptions(), patch=patch))
    io = 128 * 128 * 3 + 10
    return (r.arena_bytes + io + DEFAULT_STACK_BYTES + FIRMWARE_SLACK_BYTES <= device.sram_bytes
            and r.flash_bytes <= device.flash_bytes)


def test_the_smallest_device_that_fits_and_its_plan():
    graph, asked = wide_head_model(), get_device("stm32f410")
    hint = suggest_fit(graph, PlanOptions(), asked)
    assert hint is not None and fits(graph, hint.patch, hint.device)
    assert hint.arena_bytes == estimate_resources(graph, PlanOptions(patch=hint.patch)).arena_bytes
    smaller = [d for d in list_devices() if asked.sram_bytes <= d.sram_bytes < hint.device.sram_bytes]
    assert not any(fits(graph, patch, d) for d in smaller for patch in (None, "auto"))
    assert hint.text(asked).startswith(f"try {'--patch auto ' if hint.patch else ''}--device "
                                       f"{hint.device.name.lower()}: plans at")


def test_the_device_asked_for_comes_first():
    hint = suggest_fit(wide_head_model(), PlanOptions(), get_device("stm32f412"))
    assert (hint.device.name, hint.patch) == ("STM32F412", "auto") and hint.text(hint.device).startswith(
        "try --patch auto: plans at")


def test_nothing_fits_weights_no_flash_holds():
    b = GraphBuilder("huge_fc")
    x = b.input((1, 1, 1, 64), "int8", qparams=QParams.per_tensor(1 / 64, 0))
    x = b.node(Op.RESHAPE, [x], ReshapeAttrs((1, 64)), dtype="int8", qparams=b.tensors[x].qparams)
    rng = np.random.default_rng(1)
    y = _int8_weighted(b, rng, Op.FULLY_CONNECTED, x, (40_000, 64), FullyConnectedAttrs(), 0.5)  # 2.56 MB weights
    assert suggest_fit(b.build([y]), PlanOptions(), get_device("stm32f412")) is None
