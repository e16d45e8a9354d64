"""Search stage: the MCUNet / ProxylessNAS MBConv search space as data, and its architectures.

A space (`MBSpace`) fixes the macro-architecture — MCUNet's `ofa_proxyless` skeleton (papers/search-specs.md A.1):
a 3x3 stride-2 stem of 32·w channels, a fixed MB1 k3 block of 16·w, six stages of base widths
[24, 40, 80, 96, 192, 320] with first strides [2, 2, 2, 1, 2, 1], a 1x1 "feature mix" head conv, global average pool
and a linear classifier — and the choices: per block depthwise kernel k ∈ {3, 5, 7} and expand ratio e ∈ {3, 4, 6},
per stage depth d (stages 1–5: {2, 3, 4}; the last stage holds one block, as in MCUNet's code), and the
configuration: width multiplier w and input resolution r.

An architecture (`Arch`) is a frozen dataclass: w, r, one depth per stage and a (kernel, expand) gene for every block
slot, active or not (OFA keeps the genes of the blocks elastic depth skips, so that mutation and crossover can bring
them back). Two archs that differ only in inactive genes are the same network: `Arch.key()` says which network it is.
`Arch.to_json` / `Arch.from_json` round-trip exactly.

One deviation from MCUNet, which keeps the head at 1280 channels for w ≤ 1: here the head scales with w by default
(`MBSpace.head_scales`), because a 1280-wide head alone needs more Flash than the 64–128 KB parts Kilobyte targets.
`MBSpace(head_scales=False)` is MCUNet's rule.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ..errors import KilobyteError
from ..zoo.blocks import make_divisible

DEFAULT_WIDTHS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
DEFAULT_RESOLUTIONS = tuple(range(48, 225, 16))  # 48, 64, ..., 224: the thesis's 12 values


class ArchError(KilobyteError):
    """An architecture that does not belong to its space (bad JSON, a gene outside the choices)."""


@dataclass(frozen=True)
class MBSpace:
    """The macro-architecture and the choices of an MBConv space. All channel counts are before width scaling."""

    stem_channels: int = 32
    first_block_channels: int = 16
    stage_widths: tuple[int, ...] = (24, 40, 80, 96, 192, 320)
    stage_strides: tuple[int, ...] = (2, 2, 2, 1, 2, 1)
    stage_depths: tuple[tuple[int, ...], ...] = ((2, 3, 4),) * 5 + ((1,),)
    kernels: tuple[int, ...] = (3, 5, 7)
    expands: tuple[int, ...] = (3, 4, 6)
    widths: tuple[float, ...] = DEFAULT_WIDTHS
    resolutions: tuple[int, ...] = DEFAULT_RESOLUTIONS
    head_channels: int = 1280
    head_scales: bool = True  # MCUNet: False (1280 for every w <= 1)
    num_classes: int = 1000
    in_channels: int = 3
    dropout: float = 0.1

    @property
    def max_depths(self) -> tuple[int, ...]:
        return tuple(max(d) for d in self.stage_depths)

    def channels(self, width: float) -> tuple[int, int, tuple[int, ...], int]:
        """(stem, first block, per-stage outputs, head) channels at width multiplier `width`."""
        head = make_divisible(self.head_channels * width) if self.head_scales else \
            make_divisible(self.head_channels * max(1.0, width))
        return (make_divisible(self.stem_channels * width), make_divisible(self.first_block_channels * width),
                tuple(make_divisible(c * width) for c in self.stage_widths), head)

    def with_config(self, width: float, resolution: int) -> MBSpace:
        """The sub-space of one (w, r) configuration, as TinyNAS searches it."""
        return replace(self, widths=(width,), resolutions=(resolution,))

    def sample(self, rng: np.random.Generator) -> Arch:
        """A uniformly random architecture: every gene drawn independently from its choices."""
        pick = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
        blocks = tuple(tuple((pick(self.kernels), pick(self.expands)) for _ in range(d)) for d in self.max_depths)
        return Arch(pick(self.widths), pick(self.resolutions), tuple(pick(d) for d in self.stage_depths), blocks)

    def largest(self, width: float | None = None, resolution: int | None = None) -> Arch:
        """The largest network (k7 e6, full depth), at the largest configuration unless one is given."""
        blocks = tuple(((max(self.kernels), max(self.expands)),) * d for d in self.max_depths)
        return Arch(width or max(self.widths), resolution or max(self.resolutions),
                    tuple(max(d) for d in self.stage_depths), blocks)

    def smallest(self, width: float | None = None, resolution: int | None = None) -> Arch:
        """The smallest network (k3 e3, least depth), at the smallest configuration unless one is given."""
        blocks = tuple(((min(self.kernels), min(self.expands)),) * d for d in self.max_depths)
        return Arch(width or min(self.widths), resolution or min(self.resolutions),
                    tuple(min(d) for d in self.stage_depths), blocks)

    def mutate(self, arch: Arch, rng: np.random.Generator, prob: float = 0.1) -> Arch:
        """OFA's mutation: each gene (w, r, every depth, every block's kernel and expand) is redrawn with `prob`."""
        def maybe(value, choices):
            return choices[int(rng.integers(len(choices)))] if rng.random() < prob else value

        blocks = tuple(tuple((maybe(k, self.kernels), maybe(e, self.expands)) for k, e in stage)
                       for stage in arch.blocks)
        return Arch(maybe(arch.width, self.widths), maybe(arch.resolution, self.resolutions),
                    tuple(maybe(d, c) for d, c in zip(arch.depths, self.stage_depths)), blocks)

    def crossover(self, a: Arch, b: Arch, rng: np.random.Generator) -> Arch:
        """OFA's uniform crossover: every gene taken from either parent with probability 1/2."""
        def either(x, y):
            return x if rng.random() < 0.5 else y

        blocks = tuple(tuple((either(ka, kb), either(ea, eb)) for (ka, ea), (kb, eb) in zip(sa, sb))
                       for sa, sb in zip(a.blocks, b.blocks))
        return Arch(either(a.width, b.width), either(a.resolution, b.resolution),
                    tuple(either(x, y) for x, y in zip(a.depths, b.depths)), blocks)

    def check(self, arch: Arch) -> Arch:
        """`arch` itself if every gene is one of this space's choices; otherwise an `ArchError` naming the gene."""
        def bad(what, value, choices):
            raise ArchError(f"architecture: {what} = {value} is not one of {list(choices)}")

        if arch.width not in self.widths:
            bad("width", arch.width, self.widths)
        if arch.resolution not in self.resolutions:
            bad("resolution", arch.resolution, self.resolutions)
        if len(arch.depths) != len(self.stage_depths) or len(arch.blocks) != len(self.stage_depths):
            raise ArchError(f"architecture: {len(arch.depths)} stages, the space has {len(self.stage_depths)}")
        for s, (d, stage, choices) in enumerate(zip(arch.depths, arch.blocks, self.stage_depths)):
            if d not in choices:
                bad(f"stage {s} depth", d, choices)
            if len(stage) != max(choices):
                raise ArchError(f"architecture: stage {s} has {len(stage)} block genes, the space {max(choices)}")
            for i, (k, e) in enumerate(stage):
                if k not in self.kernels:
                    bad(f"stage {s} block {i} kernel", k, self.kernels)
                if e not in self.expands:
                    bad(f"stage {s} block {i} expand", e, self.expands)
        return arch

    def size(self) -> int:
        """Number of distinct networks per (w, r) configuration (active genes only)."""
        per_block = len(self.kernels) * len(self.expands)
        total = 1
        for choices in self.stage_depths:
            total *= sum(per_block ** d for d in choices)
        return total

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @staticmethod
    def from_json(data: dict) -> MBSpace:
        def tup(v):
            return tuple(tup(x) for x in v) if isinstance(v, list) else v

        try:
            return MBSpace(**{k: tup(v) for k, v in data.items()})
        except TypeError as e:
            raise ArchError(f"search space: {e}") from None


@dataclass(frozen=True)
class Arch:
    """One network of an `MBSpace`: width, resolution, depth per stage, (kernel, expand) per block slot."""

    width: float
    resolution: int
    depths: tuple[int, ...]
    blocks: tuple[tuple[tuple[int, int], ...], ...] = field(repr=False)

    def active_blocks(self) -> list[tuple[int, int, int]]:
        """(stage, kernel, expand) of every block the network runs, in order (the first `depth` of each stage)."""
        return [(s, k, e) for s, (d, stage) in enumerate(zip(self.depths, self.blocks)) for k, e in stage[:d]]

    def key(self) -> tuple:
        """Identifies the network: equal for archs that differ only in genes of inactive blocks."""
        return (self.width, self.resolution, self.depths,
                tuple(stage[:d] for d, stage in zip(self.depths, self.blocks)))

    def describe(self) -> str:
        """Compact text: `w0.3 r28 | d2 k3e4 k5e3 | d3 ...`."""
        stages = " | ".join(f"d{d} " + " ".join(f"k{k}e{e}" for k, e in stage[:d])
                            for d, stage in zip(self.depths, self.blocks))
        return f"w{self.width:g} r{self.resolution} | {stages}"

    def to_json(self) -> dict:
        return {"width": self.width, "resolution": self.resolution, "depths": list(self.depths),
                "kernels": [[k for k, _ in stage] for stage in self.blocks],
                "expands": [[e for _, e in stage] for stage in self.blocks]}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @staticmethod
    def from_json(data: dict | str) -> Arch:
        try:
            if isinstance(data, str):
                data = json.loads(data)
            kernels, expands = data["kernels"], data["expands"]
            if len(kernels) != len(expands) or any(len(a) != len(b) for a, b in zip(kernels, expands)):
                raise ArchError("architecture: 'kernels' and 'expands' differ in shape")
            blocks = tuple(tuple((int(k), int(e)) for k, e in zip(ks, es)) for ks, es in zip(kernels, expands))
            return Arch(float(data["width"]), int(data["resolution"]), tuple(int(d) for d in data["depths"]), blocks)
        except ArchError:
            raise
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
            raise ArchError(f"architecture: not a valid architecture JSON ({type(e).__name__}: {e})") from None


def grid(space: MBSpace, widths: Sequence[float] | None = None,
         resolutions: Sequence[int] | None = None) -> list[tuple[float, int]]:
    """Every (w, r) configuration of the space (or of the given values), width-major."""
    return [(w, r) for w in (widths or space.widths) for r in (resolutions or space.resolutions)]
