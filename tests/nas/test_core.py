"""The search core (issue 26 item 3): TinyNAS and μNAS run through the same evaluator, store, worker pool, trainer,
BatchNorm recalibration and report writer — only the space and the loop differ — and their architecture JSON shares
one envelope that still reads what earlier searches stored."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from kilobyte.errors import KilobyteError
from kilobyte.nas import core, parallel, report
from kilobyte.nas.resources import ResourceEvaluator
from kilobyte.nas.space import Arch, MBSpace
from kilobyte.nas.store import SearchStore, StoreError
from kilobyte.nas.unas_space import UnasSpace

CALLS: dict[str, list] = defaultdict(list)


def _spy(monkeypatch, owner, name: str, describe=lambda *a, **k: None):
    """Replace `owner.name` by a wrapper that records `describe(args)` under `name` and calls the original."""
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        CALLS[name].append(describe(*args, **kwargs))
        return original(*args, **kwargs)
    monkeypatch.setattr(owner, name, wrapper)


@pytest.fixture
def spies(monkeypatch):
    import kilobyte.train
    import kilobyte.train.bn

    CALLS.clear()
    _spy(monkeypatch, ResourceEvaluator, "evaluate", lambda self, arch: core.kind_of(arch))
    _spy(monkeypatch, SearchStore, "add", lambda self, e: json.loads(e.arch).get("space"))
    _spy(monkeypatch, parallel, "open_pool", lambda make_worker, *a, **k: make_worker.__name__)
    _spy(monkeypatch, kilobyte.train, "fit", lambda module, *a, **k: type(module).__name__)
    # the supernet's scorer holds the function by name (imported before this spy when other tests ran first):
    # spy that name too, after checking it is the very same function
    from kilobyte.nas import supernet_train

    assert supernet_train.recalibrate_batches is kilobyte.train.bn.recalibrate_batches
    for owner in (kilobyte.train.bn, supernet_train):
        _spy(monkeypatch, owner, "recalibrate_batches", lambda module, batches: type(module).__name__)
    _spy(monkeypatch, report, "write_json", lambda path, obj, *a, **k: path.name)
    _spy(monkeypatch, report, "save_png", lambda fig, path, *a, **k: path.name)
    return CALLS


def _tinynas(out, monkeypatch):
    """A TinyNAS search on digits small enough for seconds; its deployment (int8, C, TFLM) is left out — the search
    CLI's tests cover it — so the run ends at the report."""
    from kilobyte.nas import search
    from kilobyte.nas.evolution import EvolutionConfig
    from kilobyte.nas.supernet_train import SupernetTraining

    monkeypatch.setattr(search, "deploy", lambda *a, **k: {"deployed": False})
    config = search.SearchConfig(device="stm32f410", sram_bytes=32 * 1024, flash_bytes=128 * 1024, data="digits",
                                 widths=(0.1,), resolutions=(8,), space_samples=4, train_images=128, val_images=100,
                                 training=SupernetTraining(largest_epochs=1, supernet_epochs=1, subnets_per_batch=1),
                                 evolution=EvolutionConfig(population=3, parents=2, generations=1), finetune_epochs=1)
    return search.run_search(config, out, log=lambda *a: None)


def _unas(out):
    from kilobyte.nas.unas_search import UnasConfig, run_unas

    config = UnasConfig(data="digits", evaluations=3, population=2, sample=1, epochs=1, prune="structured",
                        bounds={"error": 0.9, "peak_bytes": 4096.0}, train_images=300, finalists=0, final_epochs=0)
    return run_unas(config, out, log=lambda *a: None, deploy=False)


def test_both_strategies_run_through_the_same_functions(tmp_path, monkeypatch, spies, one_torch_thread):
    from kilobyte.nas.unas_front import load_member

    kinds = {}
    for strategy, run in (("mbconv", lambda: _tinynas(tmp_path / "tinynas", monkeypatch)),
                          ("unas", lambda: _unas(tmp_path / "unas"))):
        before = {name: len(calls) for name, calls in spies.items()}
        result = run()
        kinds[strategy] = {name: calls[before.get(name, 0):] for name, calls in spies.items()}
        kinds[strategy]["result"] = result
    tiny, unas = kinds["mbconv"], kinds["unas"]
    # the same evaluator class measured each strategy's own architectures ...
    assert set(tiny["evaluate"]) == {"mbconv"} and set(unas["evaluate"]) == {"unas"}
    # ... the same store committed them, each in the {"space": kind} envelope ...
    assert set(tiny["add"]) == {"mbconv"} and set(unas["add"]) == {"unas"}
    # ... the same pool ran the workers, the same recipe trained, the same BN recalibration ran ...
    assert tiny["open_pool"] == ["scorer_worker"] and unas["open_pool"] == ["make_worker"]
    assert "MobileNet" in tiny["fit"] and "UnasNet" in unas["fit"]
    assert "SuperNet" in tiny["recalibrate_batches"] and "UnasNet" in unas["recalibrate_batches"]
    # ... and the same writer wrote each report.json and pareto.png
    for calls, out in ((tiny, tmp_path / "tinynas"), (unas, tmp_path / "unas")):
        assert "report.json" in calls["write_json"] and calls["save_png"].count("pareto.png") == 1
        assert json.loads((out / "report.json").read_text()) is not None and (out / "pareto.png").exists()
    best = core.load_arch(tiny["result"]["architecture"], "mbconv")
    assert tiny["result"]["architecture"]["space"] == "mbconv" and isinstance(best, Arch)
    member = unas["result"]["pareto"][0]
    assert member["architecture"]["space"] == "unas"
    space = UnasSpace.from_json(unas["result"]["space"])
    assert type(load_member(space, tmp_path / "unas", member)).__name__ == "UnasNet"


def test_arch_envelope_reads_old_json_and_refuses_another_kind():
    import numpy as np

    from kilobyte.nas.unas_eval import Genome

    rng = np.random.default_rng(0)
    mb, u = MBSpace().sample(rng), UnasSpace().sample(rng)
    for space, arch in ((MBSpace(), mb), (UnasSpace(), u)):  # both kinds meet the protocols the core calls
        assert isinstance(space, core.Space) and isinstance(arch, core.Architecture)
        assert isinstance(ResourceEvaluator(space), core.Evaluator)
        assert all(callable(getattr(core.builder(space), f)) for f in ("network", "build_graph", "build_module"))
    for arch, kind in ((mb, "mbconv"), (u, "unas")):
        data = core.arch_json(arch)
        assert data["space"] == kind and {k: v for k, v in data.items() if k != "space"} == arch.to_json()
        assert core.load_arch(data, kind) == arch  # the envelope
        assert core.load_arch(arch.to_json(), kind) == arch  # bare JSON of earlier stores and reports
        assert core.load_arch(json.dumps(data), kind) == arch
    with pytest.raises(KilobyteError, match="a 'unas' architecture where a 'mbconv' one"):
        core.load_arch(core.arch_json(u), "mbconv")
    old = json.dumps({"arch": u.to_json(), "sparsity": 0.25})  # a μNAS genome as stores before the envelope hold it
    assert Genome.loads(old) == Genome(u, 0.25) == Genome.loads(Genome(u, 0.25).dumps())
    assert json.loads(Genome(u, 0.25).dumps())["space"] == "unas"


def test_one_evaluator_one_lru_cache_for_both_spaces():
    """`cache_size` 2: the least recently used network leaves first, for either kind of space."""
    import numpy as np

    for space in (MBSpace(widths=(0.2,), resolutions=(48,), num_classes=10),
                  UnasSpace(input_shape=(8, 8, 1), num_classes=10)):
        ev = ResourceEvaluator(space, cache_size=2)
        rng = np.random.default_rng(1)
        a, b, c = (space.sample(rng) for _ in range(3))
        ra = ev.evaluate(a)
        ev.evaluate(b)
        assert ev.evaluate(a) is ra  # a used again: b is now the least recent
        ev.evaluate(c)
        assert ev.cached(a) is ra and ev.cached(b) is None and ev.cached(c) is not None


def test_stored_settings_reads_a_store_without_opening_it_for_writing(tmp_path):
    path = tmp_path / "search.sqlite"
    SearchStore(path, {"data": "digits", "seed": 3}, resume=False).close()
    assert SearchStore.stored_settings(path) == {"schema": 1, "data": "digits", "seed": 3}
    (tmp_path / "bad.sqlite").write_bytes(b"garbage" * 100)
    for bad in (tmp_path / "bad.sqlite", tmp_path / "missing.sqlite"):
        with pytest.raises(StoreError) as e:
            SearchStore.stored_settings(bad)
        assert "\n" not in str(e.value) and bad.name in str(e.value)
