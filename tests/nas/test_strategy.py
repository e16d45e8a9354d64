"""`--strategy auto`: TinyNAS where its MBConv space fits the budget, μNAS with the device's bounds where it cannot."""

from __future__ import annotations

from kilobyte.nas.search import SearchConfig
from kilobyte.nas.strategy import choose_strategy, device_bounds
from kilobyte.schedule.flash import code_lower_bound

KB = 1024


def test_a_roomy_budget_runs_tinynas_and_a_tiny_one_unas():
    roomy = choose_strategy(SearchConfig("stm32f410", 32 * KB, 128 * KB, data="digits"), workers=2,
                            core="cortex-m4")
    assert roomy.name == "tinynas" and "fits 32 KB SRAM / 128 KB Flash" in roomy.reason
    tiny = choose_strategy(SearchConfig("stm32f410", 4 * KB, 16 * KB, data="digits"), workers=2, core="cortex-m4")
    assert tiny.name == "unas" and "no MBConv configuration fits 4 KB SRAM / 16 KB Flash" in tiny.reason
    assert tiny.input_bytes == roomy.input_bytes == 64  # digits: 8 x 8 x 1
    assert "\n" not in tiny.reason + roomy.reason


def test_device_bounds_leave_the_runtime_code_its_flash():
    bounds = device_bounds(16 * KB, 64 * KB, "portable", "cortex-m4")
    code = code_lower_bound(("conv", "fc"), "portable", "cortex-m4")
    assert bounds == {"peak_bytes": 16 * KB, "weight_bytes": 64 * KB - code}
    assert 0 < code < 64 * KB
    assert device_bounds(4 * KB, 16 * KB, max_macs=2e6, error=0.1)["macs"] == 2e6
    assert device_bounds(4 * KB, 16 * KB, input_bytes=784)["peak_bytes"] == 4 * KB - 784  # μNAS: input excluded


def test_max_sram_bounds_the_model_and_the_device_keeps_its_stack():
    """`--max-sram 4KB` is 4 KB for arena + input (a 4 KB part cannot hold our 4 KB firmware stack besides)."""
    from kilobyte.nas.search import search_budget
    from kilobyte.targets.cortexm.firmware import DEFAULT_STACK_BYTES

    device = search_budget(SearchConfig("stm32f410", 32 * KB, 128 * KB))
    model = search_budget(SearchConfig("stm32f410", 4 * KB, 16 * KB, model_sram=True))
    assert device.sram_reserve == DEFAULT_STACK_BYTES and device.count_input
    assert model.sram_reserve == 0 and model.count_input and model.sram_bytes == 4 * KB
