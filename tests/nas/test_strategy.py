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


def test_a_budget_the_mcunet_choices_miss_runs_tinynas_on_the_compact_space():
    """16 KB SRAM / 64 KB Flash: every sampled network of MCUNet's choices needs more Flash, compact ones fit; the
    search then builds the compact space (shallower stages, narrower expansion, same skeleton)."""
    from kilobyte.nas.search import search_space

    config = SearchConfig("stm32f410", 16 * KB, 64 * KB, data="mnist", model_sram=True)
    choice = choose_strategy(config, workers=2, core="cortex-m4")
    assert choice.name == "tinynas" and choice.compact, choice.reason
    assert "the MBConv space does not fit 16 KB SRAM / 64 KB Flash" in choice.reason
    assert "the compact MBConv space fits" in choice.reason and choice.to_json()["space"] == "compact"
    full = search_space(config, 1, 10, 28, (28, 28))
    compact = search_space(SearchConfig("stm32f410", 16 * KB, 64 * KB, compact=True), 1, 10, 28, (28, 28))
    assert compact.is_compact and not full.is_compact
    assert min(min(d) for d in compact.depth_choices) == 1 < min(min(d) for d in full.depth_choices[:5])
    assert max(compact.expands) < max(full.expands) and compact.stage_widths == full.stage_widths


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


def test_a_compact_search_trains_and_picks_a_network_of_the_compact_space(tmp_path, monkeypatch):
    """The compact space through the whole search on digits (deployment left out, as in test_core): the supernet is
    built with its depths and expands, the winner belongs to it, and the report says which space ran."""
    from kilobyte.nas import search
    from kilobyte.nas.core import load_arch
    from kilobyte.nas.evolution import EvolutionConfig
    from kilobyte.nas.space import COMPACT_DEPTHS, COMPACT_EXPANDS
    from kilobyte.nas.supernet_train import SupernetTraining

    monkeypatch.setattr(search, "deploy", lambda *a, **k: {"deployed": False})
    config = SearchConfig("stm32f410", 16 * KB, 64 * KB, data="digits", compact=True, model_sram=True,
                          widths=(0.1,), resolutions=(8,), space_samples=8, train_images=128, val_images=100,
                          training=SupernetTraining(largest_epochs=1, supernet_epochs=1, subnets_per_batch=2),
                          evolution=EvolutionConfig(population=4, parents=2, generations=1), finetune_epochs=1)
    report = search.run_search(config, tmp_path, log=lambda *a: None)
    assert report["space"]["compact"] is True
    arch = load_arch(report["architecture"], "mbconv")
    assert all(d in choices for d, choices in zip(arch.depths, COMPACT_DEPTHS, strict=True))
    assert all(e in COMPACT_EXPANDS for stage in arch.blocks for _, e in stage)
    assert search.search_space(config, 1, 10, 8, (8, 8)).is_compact
