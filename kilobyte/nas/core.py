"""Search stage: what every search strategy shares — the protocols a space, an architecture and a builder meet, the
architecture JSON envelope, and the data split.

A strategy is a space plus a search loop (TinyNAS: `MBSpace` + supernet and evolution; μNAS: `UnasSpace` + aging
evolution, every candidate trained). Everything around the loop is one piece of code for both, as Optuna separates
samplers from storage and trials:

- resources: `resources.ResourceEvaluator` (the compiler's planner on the candidate's IR graph, one LRU cache),
  which finds the space's builder here (`builder`);
- the store: `store.SearchStore` (SQLite, resumable; `SearchStore.stored_settings` for readers of a finished one);
- training: `kilobyte.train.fit` (the recipe) and `train.bn.recalibrate_batches` (BatchNorm recalibration);
- workers: `parallel.open_pool` (this process, a process pool or Ray; torch on one thread, `parallel.one_thread`);
- the report: `report.write_report` (JSON), `report.pareto_png` (the figure); every file written through
  `kilobyte.atomic`.

Architecture JSON: `arch_json(arch)` is the architecture's own `to_json()` with the space's kind in front,
``{"space": "mbconv" | "unas", ...}``; `load_arch` reads it, and the bare JSON of earlier stores and reports (no
"space" key) with the kind the reader expects.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..data import load_dataset
from ..data.detect import load_detection
from ..errors import KilobyteError
from . import build, unas_build
from .space import Arch, MBSpace
from .unas_space import UArch, UnasSpace

# kind -> (space class, architecture class, builder module)
KINDS = {"mbconv": (MBSpace, Arch, build), "unas": (UnasSpace, UArch, unas_build)}
VAL_SHARE = 0.25  # of the training split: the validation images when a search gives no number


class SplitError(KilobyteError):
    """Data a search cannot split into training, validation and test images."""


@runtime_checkable
class Architecture(Protocol):
    """One network of a space: JSON that round-trips, and a key that is equal for the same network."""

    def to_json(self) -> dict: ...

    def dumps(self) -> str: ...

    def key(self) -> Any: ...

    def describe(self) -> str: ...

    @staticmethod
    def from_json(data: dict | str) -> Architecture: ...


@runtime_checkable
class Space(Protocol):
    """A search space as data. `mutate` gives the child (μNAS: the child and the morphism's name, Table 1);
    `check` returns the architecture or raises a one-line error. TinyNAS's space also has `crossover(a, b, rng)`
    (OFA's uniform crossover); μNAS's has none — the paper's search only mutates."""

    def sample(self, rng: np.random.Generator) -> Architecture: ...

    def mutate(self, arch, rng: np.random.Generator): ...

    def check(self, arch) -> Architecture: ...

    def to_json(self) -> dict: ...

    @staticmethod
    def from_json(data: dict) -> Space: ...


@runtime_checkable
class Evaluator(Protocol):
    """What a search asks of its resource evaluator (`resources.ResourceEvaluator`, the one both strategies use):
    an architecture's figures as `kilobyte compile` gives them (`schedule.estimate.Resources`), planned once and
    cached per network (`arch.key()`), and the figures already planned without planning (`cached`)."""

    def evaluate(self, arch): ...

    def cached(self, arch): ...

    def graph(self, arch): ...


class Builder(Protocol):
    """A space's builder module: one resolved layer list (`network`), the IR graph for resources, the PyTorch module
    for training (tests/nas/test_nas_build.py and test_unas.py hold the two equal)."""

    def network(self, space, arch): ...

    def build_graph(self, space, arch, weights=None, name: str = ..., verify: bool = True): ...

    def build_module(self, space, arch): ...


def kind_of(obj) -> str:
    """"mbconv" or "unas": the kind of a space or an architecture."""
    for kind, (space_cls, arch_cls, _) in KINDS.items():
        if isinstance(obj, (space_cls, arch_cls)):
            return kind
    raise TypeError(f"not a search space or architecture: {type(obj).__name__}")


def builder(space) -> Builder:
    """The builder module of `space`'s kind."""
    return KINDS[kind_of(space)][2]


def arch_json(arch) -> dict:
    """`arch`'s JSON in the envelope every search writes: {"space": kind, ...its own fields}."""
    return {"space": kind_of(arch), **arch.to_json()}


def load_arch(data: dict | str, kind: str):
    """An architecture from `arch_json` (or the bare JSON earlier searches wrote, read as `kind`); a JSON of another
    kind is a one-line error."""
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise KilobyteError(f"architecture: not JSON ({e})") from None
    stored = data.get("space", kind) if isinstance(data, dict) else kind
    if stored != kind:
        raise KilobyteError(f"architecture: a {stored!r} architecture where a {kind!r} one was expected")
    fields = {k: v for k, v in data.items() if k != "space"} if isinstance(data, dict) else data
    return KINDS[kind][1].from_json(fields)


# -- the data split ----------------------------------------------------------------------------------------------------
def split_data(data: str, seed: int, train_fraction: float, val_images: int | None, train_images: int | None):
    """(fit, val, test) of labelled images `data` shuffled by `seed`: test = the last 1 - `train_fraction`, val = the
    last `val_images` of the rest (None: `VAL_SHARE` of it), fit = the others (at most `train_images` of them)."""
    ds = load_dataset(data, seed=seed)
    if ds.y is None:
        raise SplitError(f"--data {data}: search needs labelled images (a folder of class sub-folders, an "
                         f".npz with 'y', or a bundled set)")
    return _three_ways(ds, len(ds.x), data, train_fraction, val_images, train_images, least=(100, 50))


def split_detection(data: str, train_fraction: float, val_images: int | None, train_images: int | None):
    """(fit, val, test) `data.detect.DetectionSet`s of images with boxes `data`, in their order (the built-in
    scenes' held-out digits appear in the last fifth only: `data.detect.TRAIN_SHARE`): test = the last
    1 - `train_fraction`, val = the last `val_images` of the rest (at most `VAL_SHARE` of it), fit = the others (at
    most `train_images`)."""
    ds = load_detection(data)
    n_train = int(len(ds.images) * train_fraction)
    val_images = None if val_images is None else min(val_images, int(n_train * VAL_SHARE))
    return _three_ways(ds, len(ds.images), data, train_fraction, val_images, train_images, least=(50, 20))


def _three_ways(ds, n: int, data: str, train_fraction: float, val_images: int | None, train_images: int | None,
                least: tuple[int, int]):
    """(fit, val, test) of the `n` images of `ds` (a `.split(k)`: the first k and the rest) as `split_data` says;
    fewer than `least` (fit, test) images is a one-line error."""
    n_train = int(n * train_fraction)
    if val_images is None:
        val_images = int(n_train * VAL_SHARE)
    if n_train - val_images < least[0] or n - n_train < least[1]:
        raise SplitError(f"--data {data}: {n} images are too few to split into train, "
                         f"{val_images} validation and a test split")
    train, test = ds.split(n_train)
    fit, val = train.split(n_train - val_images)
    if train_images is not None:
        fit = fit.split(train_images)[0]
    return fit, val, test


def load_split(config):
    """(fit, val, test) of a search configuration of either strategy: its data, `train_fraction`, `val_images` and
    `train_images`, shuffled by its `split_seed` when it has one (μNAS: 0, so that searches of different seeds are
    scored on the same test images), else by its `seed` (TinyNAS); a detector's (`task="detect"`) unshuffled
    (`split_detection`)."""
    if getattr(config, "task", "classify") == "detect":
        return split_detection(config.data, config.train_fraction, config.val_images, config.train_images)
    seed = getattr(config, "split_seed", config.seed)
    return split_data(config.data, seed, config.train_fraction, config.val_images, config.train_images)
