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

Two dimensions of MCUNetV2's joint search (papers/search-specs.md B.2, B.3), both off by default, where the space is
exactly the one above (same genes, same random draws, same JSON and keys):

- **Width per stage** (`stage_width_choices`, joint search: (0.5, 0.75, 1.0)): the gene `Arch.stage_widths` scales
  stage s to `make_divisible(base_s · w · ws)` output channels. MCUNetV2 writes "per-block w" and leaves per block
  vs per stage undefined (B.5); it is per stage here because every block after a stage's first adds its input to
  its output, which needs equal channels in and out — a per-block width would silently drop those residuals.
  `stage_widths=None` means all 1.0 (an arch with all 1.0 is stored as None: one network, one key, one JSON).
  (`Arch.stage_widths` are multipliers; `MBSpace.stage_widths` are the stages' base channel counts.)
- **Receptive-field redistribution** (`rd_stages`, joint search: 2): the first `rd_stages` stages (the
  high-resolution ones a patch stage covers) follow the RD rules (B.2: keep the down-sampling, stride-2 layers keep
  k = 3, remove the other spatial layers from the patch stage, add blocks to the later stage). There a stage's first
  block keeps kernel 3 only; its other blocks may also take kernel 1, which means *no depthwise convolution* (1x1
  expand -> 1x1 projection, MbV2-RD's "MB1 without depthwise"); the fixed MB1 block gets a kernel gene
  `Arch.first_kernel` in {1, 3}; the stage's depth choices gain 1; and the next stage (index `rd_stages`) gains
  depths up to its largest + 2 (blocks moved to the later stage). `kernel_choices(stage, index)` and
  `depth_choices` give every slot's choices; sampling, mutation, checks, `largest` (the biggest kernel per slot) and
  `smallest` use them.

A third variant, for small budgets: `MBSpace.compact()` keeps the skeleton and the kernels but takes stage depths
{1, 2, 3} and expand ratios {2, 3, 4} (`COMPACT_DEPTHS`, `COMPACT_EXPANDS`), so that MBConv networks reach budgets
like 16 KB SRAM / 64 KB Flash; `--strategy auto` picks it where the MCUNet choices do not fit (nas/strategy.py).

The new genes are drawn after the old ones and only when the space has them. tests/nas/test_joint_space.py builds
MobileNetV2 and an MbV2-RD as spaces of this kind and reproduces MCUNetV2's patch figures from them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ..errors import KilobyteError
from ..zoo.blocks import make_divisible

DEFAULT_WIDTHS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
DEFAULT_RESOLUTIONS = tuple(range(48, 225, 16))  # 48, 64, ..., 224: the thesis's 12 values
DEFAULT_STRIDES = (2, 2, 2, 2, 1, 2, 1)  # ImageNet's downsampling: the stem, then each stage's first block
# The compact space (`MBSpace.compact`): shallower stages and narrower expansion, for budgets where no configuration
# of the MCUNet choices fits (MNIST at 16 KB SRAM / 64 KB Flash: the smallest of those needs 55 KB of Flash at w0.1,
# random ones 76 KB and more; of these 50-80 % fit).
COMPACT_DEPTHS = ((1, 2, 3),) * 5 + ((1,),)
COMPACT_EXPANDS = (2, 3, 4)


class ArchError(KilobyteError):
    """An architecture that does not belong to its space (bad JSON, a gene outside the choices)."""


@dataclass(frozen=True)
class MBSpace:
    """The macro-architecture and the choices of an MBConv space. All channel counts are before width scaling."""

    stem_channels: int = 32
    first_block_channels: int = 16
    stage_widths: tuple[int, ...] = (24, 40, 80, 96, 192, 320)
    stage_strides: tuple[int, ...] = DEFAULT_STRIDES[1:]
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
    stage_width_choices: tuple[float, ...] = (1.0,)  # MCUNetV2 joint search: (0.5, 0.75, 1.0)
    rd_stages: int = 0  # MCUNetV2 joint search: 2
    # the data's (H, W) when a network may run at another resolution: it then starts with the resize to it (the
    # deployed library's RESIZE_BILINEAR) and its input is the data's image; None: the input is at the resolution
    input_size: tuple[int, int] | None = None
    stem_stride: int = DEFAULT_STRIDES[0]
    # "fixed": every configuration downsamples by `stem_stride` and `stage_strides`; "adaptive" (small images, issue
    # 26): the downsampling schedule is a configuration dimension, chosen per resolution (`downsampling_schedules`)
    schedules: str = "fixed"
    # a detector (issue 28): (stage, anchors) of each YOLO head, finest first. The stage's last block feeds a 1x1
    # convolution (bias, no BatchNorm) to anchors · (5 + num_classes) channels (`ops.detect_post`'s layout); there is
    # no feature-mix head, pooling or classifier, and no stage after the last head's (`detector`). Empty: a classifier.
    detect_heads: tuple[tuple[int, int], ...] = ()

    def __post_init__(self):
        stages = [s for s, _ in self.detect_heads]
        if self.detect_heads and (stages != sorted(set(stages)) or stages[-1] >= len(self.stage_depths)
                                  or min(a for _, a in self.detect_heads) < 1):
            raise ArchError(f"search space: detect_heads = {[list(h) for h in self.detect_heads]} must be "
                            f"(stage, anchors) pairs in increasing stage order, stages below {len(self.stage_depths)}, "
                            "at least one anchor each")
        if not 0 <= self.rd_stages < len(self.stage_depths):
            raise ArchError(f"search space: rd_stages = {self.rd_stages} must be in 0..{len(self.stage_depths) - 1} "
                            "(receptive-field redistribution moves blocks to a later stage)")
        if self.schedules not in ("fixed", "adaptive"):
            raise ArchError(f"search space: schedules = {self.schedules!r} must be 'fixed' or 'adaptive'")
        if self.stem_stride not in (1, 2) or len(self.stage_strides) != len(self.stage_depths):
            raise ArchError(f"search space: strides {self.strides} must be 1 or 2, one per stage after the stem")
        if not self.stage_width_choices or min(self.stage_width_choices) <= 0:
            raise ArchError(f"search space: stage_width_choices = {list(self.stage_width_choices)} must be "
                            "positive multipliers")

    def input_hw(self, resolution: int) -> tuple[int, int]:
        """(H, W) of the input a network at `resolution` takes: the data's when the space has one, else its own."""
        return tuple(self.input_size) if self.input_size is not None else (resolution, resolution)

    def compact(self) -> MBSpace:
        """The same skeleton with the compact choices: stage depths {1, 2, 3}, expand ratios {2, 3, 4}."""
        return replace(self, stage_depths=COMPACT_DEPTHS[:len(self.stage_depths)], expands=COMPACT_EXPANDS)

    def detector(self, heads: Sequence[tuple[int, int]]) -> MBSpace:
        """The same skeleton as a detector with YOLO `heads` ((stage, anchors), finest first): the stages after the
        last head's are dropped."""
        last = max(s for s, _ in heads) + 1
        return replace(self, stage_widths=self.stage_widths[:last], stage_strides=self.stage_strides[:last],
                       stage_depths=self.stage_depths[:last], detect_heads=tuple((int(s), int(a)) for s, a in heads))

    @property
    def head_strides(self) -> tuple[int, ...]:
        """Each detection head's stride: the product of the strides up to its stage's first block."""
        return tuple(math.prod(self.strides[:s + 2]) for s, _ in self.detect_heads)

    @property
    def is_compact(self) -> bool:
        return self.stage_depths == COMPACT_DEPTHS[:len(self.stage_depths)] and self.expands == COMPACT_EXPANDS

    @property
    def depth_choices(self) -> tuple[tuple[int, ...], ...]:
        """Each stage's depth choices: `stage_depths`, with 1 added in the RD stages and up to 2 more blocks in the
        stage after them."""
        out = []
        for s, choices in enumerate(self.stage_depths):
            if s < self.rd_stages:
                choices = tuple(sorted({1, *choices}))
            elif s == self.rd_stages and self.rd_stages:
                choices = tuple(sorted({*choices, max(choices) + 1, max(choices) + 2}))
            out.append(choices)
        return tuple(out)

    @property
    def max_depths(self) -> tuple[int, ...]:
        return tuple(max(d) for d in self.depth_choices)

    @property
    def first_kernel_choices(self) -> tuple[int, ...]:
        """The fixed MB1 block's depthwise kernel: 3, or also 1 (no depthwise) with RD."""
        return (1, 3) if self.rd_stages else (3,)

    def kernel_choices(self, stage: int, index: int) -> tuple[int, ...]:
        """Depthwise kernels of block slot `index` of `stage`; 1 means the block has no depthwise convolution.

        >>> MBSpace(rd_stages=2).kernel_choices(0, 0), MBSpace(rd_stages=2).kernel_choices(0, 1)
        ((3,), (1, 3, 5, 7))
        """
        if stage >= self.rd_stages:
            return self.kernels
        return (3,) if index == 0 else tuple(sorted({1, *self.kernels}))

    def channels(self, width: float, stage_widths: Sequence[float] | None = None
                 ) -> tuple[int, int, tuple[int, ...], int]:
        """(stem, first block, per-stage outputs, head) channels at width multiplier `width` and per-stage
        multipliers `stage_widths` (None: all 1.0)."""
        head = make_divisible(self.head_channels * width) if self.head_scales else \
            make_divisible(self.head_channels * max(1.0, width))
        scales = stage_widths or (1.0,) * len(self.stage_widths)
        return (make_divisible(self.stem_channels * width), make_divisible(self.first_block_channels * width),
                tuple(make_divisible(c * width * ws) for c, ws in zip(self.stage_widths, scales)), head)

    @property
    def strides(self) -> tuple[int, ...]:
        """The downsampling schedule: (stem stride, first-block stride of each stage)."""
        return (self.stem_stride, *self.stage_strides)

    def with_config(self, width: float, resolution: int, strides: Sequence[int] | None = None) -> MBSpace:
        """The sub-space of one (w, r) configuration, as TinyNAS searches it; `strides` (a schedule of
        `downsampling_schedules`) sets the downsampling, and the sub-space's schedule is then fixed."""
        space = replace(self, widths=(width,), resolutions=(resolution,))
        if strides is None:
            return space
        return replace(space, stem_stride=int(strides[0]), stage_strides=tuple(int(s) for s in strides[1:]),
                       schedules="fixed")

    def _blocks(self, kernel, expand) -> tuple:
        """(kernel, expand) genes for every slot from `kernel(choices)` / `expand(choices)`, slot by slot."""
        return tuple(tuple((kernel(self.kernel_choices(s, i)), expand(self.expands)) for i in range(d))
                     for s, d in enumerate(self.max_depths))

    def sample(self, rng: np.random.Generator) -> Arch:
        """A uniformly random architecture: every gene drawn independently from its choices."""
        pick = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
        blocks = self._blocks(pick, pick)
        arch = Arch(pick(self.widths), pick(self.resolutions), tuple(pick(d) for d in self.depth_choices), blocks)
        # the joint-search genes are drawn last and only when the space has them: the default space draws as before
        if len(self.stage_width_choices) > 1:
            arch = replace(arch, stage_widths=tuple(pick(self.stage_width_choices) for _ in self.stage_widths))
        if len(self.first_kernel_choices) > 1:
            arch = replace(arch, first_kernel=pick(self.first_kernel_choices))
        return self._fixed_genes(arch)

    def _fixed_genes(self, arch: Arch) -> Arch:
        """`arch` with the genes of one-choice joint-search dimensions set to that choice."""
        if len(self.stage_width_choices) == 1:
            arch = replace(arch, stage_widths=self.stage_width_choices * len(self.stage_widths))
        return arch

    def largest(self, width: float | None = None, resolution: int | None = None) -> Arch:
        """The largest network (biggest kernel and expand per slot, full depth, widest stages), at the largest
        configuration unless one is given."""
        arch = Arch(width or max(self.widths), resolution or max(self.resolutions),
                    tuple(max(d) for d in self.depth_choices), self._blocks(max, max),
                    first_kernel=max(self.first_kernel_choices))
        return replace(arch, stage_widths=(max(self.stage_width_choices),) * len(self.stage_widths))

    def smallest(self, width: float | None = None, resolution: int | None = None) -> Arch:
        """The smallest network (smallest kernel and expand per slot, least depth, narrowest stages), at the
        smallest configuration unless one is given."""
        arch = Arch(width or min(self.widths), resolution or min(self.resolutions),
                    tuple(min(d) for d in self.depth_choices), self._blocks(min, min),
                    first_kernel=min(self.first_kernel_choices))
        return replace(arch, stage_widths=(min(self.stage_width_choices),) * len(self.stage_widths))

    def mutate(self, arch: Arch, rng: np.random.Generator, prob: float = 0.1) -> Arch:
        """OFA's mutation: each gene (w, r, every depth, every block's kernel and expand, and the joint-search genes
        the space has) is redrawn with `prob`."""
        def maybe(value, choices):
            return choices[int(rng.integers(len(choices)))] if rng.random() < prob else value

        blocks = tuple(tuple((maybe(k, self.kernel_choices(s, i)), maybe(e, self.expands))
                             for i, (k, e) in enumerate(stage)) for s, stage in enumerate(arch.blocks))
        child = Arch(maybe(arch.width, self.widths), maybe(arch.resolution, self.resolutions),
                     tuple(maybe(d, c) for d, c in zip(arch.depths, self.depth_choices)), blocks,
                     arch.stage_widths, arch.first_kernel)
        if len(self.stage_width_choices) > 1:
            child = replace(child, stage_widths=tuple(maybe(ws, self.stage_width_choices)
                                                      for ws in arch.stage_scales(len(self.stage_widths))))
        if len(self.first_kernel_choices) > 1:
            child = replace(child, first_kernel=maybe(arch.first_kernel, self.first_kernel_choices))
        return child

    def crossover(self, a: Arch, b: Arch, rng: np.random.Generator) -> Arch:
        """OFA's uniform crossover: every gene taken from either parent with probability 1/2."""
        def either(x, y):
            return x if rng.random() < 0.5 else y

        blocks = tuple(tuple((either(ka, kb), either(ea, eb)) for (ka, ea), (kb, eb) in zip(sa, sb))
                       for sa, sb in zip(a.blocks, b.blocks))
        child = Arch(either(a.width, b.width), either(a.resolution, b.resolution),
                     tuple(either(x, y) for x, y in zip(a.depths, b.depths)), blocks, a.stage_widths, a.first_kernel)
        n = len(self.stage_widths)
        if len(self.stage_width_choices) > 1:
            child = replace(child, stage_widths=tuple(either(x, y)
                                                      for x, y in zip(a.stage_scales(n), b.stage_scales(n))))
        if len(self.first_kernel_choices) > 1:
            child = replace(child, first_kernel=either(a.first_kernel, b.first_kernel))
        return child

    def check(self, arch: Arch) -> Arch:
        """`arch` itself if every gene is one of this space's choices; otherwise an `ArchError` naming the gene."""
        def bad(what, value, choices):
            raise ArchError(f"architecture: {what} = {value} is not one of {list(choices)}")

        if arch.width not in self.widths:
            bad("width", arch.width, self.widths)
        if arch.resolution not in self.resolutions:
            bad("resolution", arch.resolution, self.resolutions)
        if arch.first_kernel not in self.first_kernel_choices:
            bad("first block kernel", arch.first_kernel, self.first_kernel_choices)
        n = len(self.stage_depths)
        if len(arch.depths) != n or len(arch.blocks) != n:
            raise ArchError(f"architecture: {len(arch.depths)} stages, the space has {n}")
        if arch.stage_widths is not None and len(arch.stage_widths) != n:
            raise ArchError(f"architecture: {len(arch.stage_widths)} stage widths, the space has {n} stages")
        for s, ws in enumerate(arch.stage_scales(n)):
            if ws not in self.stage_width_choices:
                bad(f"stage {s} width", ws, self.stage_width_choices)
        for s, (d, stage, choices) in enumerate(zip(arch.depths, arch.blocks, self.depth_choices)):
            if d not in choices:
                bad(f"stage {s} depth", d, choices)
            if len(stage) != max(choices):
                raise ArchError(f"architecture: stage {s} has {len(stage)} block genes, the space {max(choices)}")
            for i, (k, e) in enumerate(stage):
                if k not in self.kernel_choices(s, i):
                    bad(f"stage {s} block {i} kernel", k, self.kernel_choices(s, i))
                if e not in self.expands:
                    bad(f"stage {s} block {i} expand", e, self.expands)
        return arch

    def size(self) -> int:
        """Number of distinct architectures per (w, r) configuration (active genes only)."""
        total = len(self.first_kernel_choices)
        for s, choices in enumerate(self.depth_choices):
            per_slot = [len(self.kernel_choices(s, i)) * len(self.expands) for i in range(max(choices))]
            total *= len(self.stage_width_choices) * sum(math.prod(per_slot[:d]) for d in choices)
        return total

    def to_json(self) -> dict:
        """The fields as JSON values; the joint-search fields only when they differ from their defaults."""
        data = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        for name, default in _DEFAULT_JOINT.items():  # old stores hold spaces without them
            if getattr(self, name) == default:
                del data[name]
        return data

    @staticmethod
    def from_json(data: dict) -> MBSpace:
        def tup(v):
            return tuple(tup(x) for x in v) if isinstance(v, list) else v

        try:
            return MBSpace(**{k: tup(v) for k, v in data.items()})
        except TypeError as e:
            raise ArchError(f"search space: {e}") from None


_DEFAULT_JOINT = {"stage_width_choices": (1.0,), "rd_stages": 0, "stem_stride": 2, "schedules": "fixed",
                  "detect_heads": ()}

MIN_FINAL_MAP, MAX_FINAL_MAP = 3, 7  # the last stage's map side an adaptive schedule aims for (issue 26: >= 3x3)


def final_map(strides: Sequence[int], resolution: int) -> int:
    """Side of the last stage's feature map: each stride-2 layer (padding k // 2) takes ceil(side / 2)."""
    side = resolution
    for s in strides:
        side = -(-side // s)
    return side


def downsampling_schedules(space: MBSpace, resolution: int) -> tuple[tuple[int, ...], ...]:
    """The downsampling schedules a configuration at `resolution` may take, each (stem stride, stage strides...).

    "fixed": the space's own. "adaptive": n of the default schedule's stride-2 slots (the stem and the stages whose
    first block downsamples) keep stride 2 — the first n, or with the stem at stride 1 the first n stages — for
    every n whose last stage sees a map of MIN_FINAL_MAP..MAX_FINAL_MAP pixels (else the n closest to that range).
    ImageNet's schedule (stride-2 stem, four stride-2 stages) at 224 px ends at 7x7; at 28 px it would end at 1x1.
    """
    if space.schedules == "fixed":
        return (space.strides,)
    slots = [i for i, s in enumerate(space.strides) if s == 2]  # indices into (stem, stage 0, ...)
    candidates = []
    for stem in (2, 1):
        usable = slots if stem == 2 else [i for i in slots if i > 0]
        for n in range(1 if stem == 2 else 0, len(usable) + 1):
            strides = [1] * len(space.strides)
            for i in usable[:n]:
                strides[i] = 2
            candidates.append(tuple(strides))
    def distance(strides):
        side = final_map(strides, resolution)
        return max(MIN_FINAL_MAP - side, side - MAX_FINAL_MAP, 0)
    best = min(distance(c) for c in candidates)
    return tuple(c for c in candidates if distance(c) == best)


@dataclass(frozen=True)
class Arch:
    """One network of an `MBSpace`: width, resolution, depth per stage, (kernel, expand) per block slot (kernel 1:
    no depthwise), and the joint-search genes: a width multiplier per stage (None: all 1.0) and the MB1 block's
    kernel."""

    width: float
    resolution: int
    depths: tuple[int, ...]
    blocks: tuple[tuple[tuple[int, int], ...], ...] = field(repr=False)
    stage_widths: tuple[float, ...] | None = None
    first_kernel: int = 3

    def __post_init__(self):
        if self.stage_widths is not None:  # all 1.0 is the default network: one form, one key, one JSON
            widths = tuple(float(w) for w in self.stage_widths)
            object.__setattr__(self, "stage_widths", None if all(w == 1.0 for w in widths) else widths)

    def __repr__(self) -> str:  # the joint-search genes only when set, so default archs print as before
        extra = (f", stage_widths={self.stage_widths}" if self.stage_widths is not None else "") + \
            (f", first_kernel={self.first_kernel}" if self.first_kernel != 3 else "")
        return f"Arch(width={self.width}, resolution={self.resolution}, depths={self.depths}{extra})"

    def stage_scales(self, n: int) -> tuple[float, ...]:
        """The width multiplier of each of the `n` stages (1.0 everywhere when `stage_widths` is None)."""
        return self.stage_widths if self.stage_widths is not None else (1.0,) * n

    def active_blocks(self) -> list[tuple[int, int, int]]:
        """(stage, kernel, expand) of every block the network runs, in order (the first `depth` of each stage)."""
        return [(s, k, e) for s, (d, stage) in enumerate(zip(self.depths, self.blocks)) for k, e in stage[:d]]

    def key(self) -> tuple:
        """Identifies the network: equal for archs that differ only in genes of inactive blocks."""
        key = (self.width, self.resolution, self.depths,
               tuple(stage[:d] for d, stage in zip(self.depths, self.blocks)))
        if self.stage_widths is not None:
            key += (("stage_widths", self.stage_widths),)
        if self.first_kernel != 3:
            key += (("first_kernel", self.first_kernel),)
        return key

    def describe(self) -> str:
        """Compact text: `w0.3 r28 | d2 k3e4 k5e3 | d3 ...` (with `mb1 k1 |` and `x0.75` per stage when set)."""
        scales = self.stage_scales(len(self.depths))
        stages = " | ".join(f"d{d} " + (f"x{ws:g} " if self.stage_widths is not None else "")
                            + " ".join(f"k{k}e{e}" for k, e in stage[:d])
                            for d, stage, ws in zip(self.depths, self.blocks, scales))
        first = f"mb1 k{self.first_kernel} | " if self.first_kernel != 3 else ""
        return f"w{self.width:g} r{self.resolution} | {first}{stages}"

    def to_json(self) -> dict:
        data = {"width": self.width, "resolution": self.resolution, "depths": list(self.depths),
                "kernels": [[k for k, _ in stage] for stage in self.blocks],
                "expands": [[e for _, e in stage] for stage in self.blocks]}
        if self.stage_widths is not None:
            data["stage_widths"] = list(self.stage_widths)
        if self.first_kernel != 3:
            data["first_kernel"] = self.first_kernel
        return data

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
            widths = data.get("stage_widths")
            return Arch(float(data["width"]), int(data["resolution"]), tuple(int(d) for d in data["depths"]), blocks,
                        None if widths is None else tuple(float(w) for w in widths), int(data.get("first_kernel", 3)))
        except ArchError:
            raise
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
            raise ArchError(f"architecture: not a valid architecture JSON ({type(e).__name__}: {e})") from None


def grid(space: MBSpace, widths: Sequence[float] | None = None,
         resolutions: Sequence[int] | None = None) -> list[tuple[float, int, tuple[int, ...]]]:
    """Every (w, r, downsampling schedule) configuration of the space (or of the given widths and resolutions),
    width-major."""
    return [(w, r, strides) for w in (widths or space.widths) for r in (resolutions or space.resolutions)
            for strides in downsampling_schedules(space, r)]
