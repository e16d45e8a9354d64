"""Search stage: μNAS's granular CNN search space as data, its architectures and its morphisms (papers/003, Table 1;
papers/search-specs.md C.2).

An architecture (`UArch`) is 1–10 conv blocks, each serial (it reads the previous blocks' combined output) or parallel
(it reads the input of the last serial block, and its output is added to that block's), with an optional 2x2
max-pool before it and 1–3 layers; a layer is a full, depthwise or 1x1 convolution with a kernel in {1, 3, 5, 7},
1–128 output channels (a depthwise layer keeps its input's), stride 1 or 2 (1 for a 1x1), optional BatchNorm and
optional ReLU. Then a final average or max pooling of size 2, 4 or 6, a flatten, 1–3 fully connected layers of
10–256 units with ReLU, and the classifier. Padding is "valid", as in μNAS.

What the genes do not say, fixed as μNAS's code does it (`network` resolves it, for both builders):
- a kernel, pre-pool or final pool larger than its input shrinks to the input's size; a 1x1 layer has stride 1;
- a parallel block's last layer outputs the previous block's channel count; when it is depthwise (it cannot change
  the count) and the counts differ, a 1x1 convolution (no BN, no ReLU) follows it;
- pending outputs of different sizes are max-pooled to the smallest (by the rounded size ratio), zero-padded at the
  bottom and right to the largest that remains, then added.

`UnasSpace.morphisms` are Table 1's mutations; each returns a valid architecture or None when it does not apply (a
block cannot be removed from a one-block network, ...). `UnasSpace.mutate` applies one applicable morphism drawn
uniformly, as μNAS's code does. `UArch.to_json` / `UArch.from_json` round-trip exactly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np

from ..errors import KilobyteError

LAYER_TYPES = ("full", "depthwise", "1x1")
KERNELS = (1, 3, 5, 7)
POOL_SIZES = (2, 4, 6)
STEPS = (1, 3, 5)  # channel / unit morphism steps (±)


class UnasError(KilobyteError):
    """μNAS cannot go on as asked: an architecture outside the space (bad JSON, a gene out of range), or a search's
    settings, data or member to export."""


UArchError = UnasError  # the name architecture errors were raised under


@dataclass(frozen=True)
class ULayer:
    """One layer of a block: a convolution (its kernel, output channels and stride), then BatchNorm and ReLU."""

    type: str = "full"  # "full", "depthwise" or "1x1"
    kernel: int = 3  # 1, 3, 5 or 7
    channels: int = 16  # a depthwise layer keeps its input's
    stride: int = 1
    bn: bool = True
    relu: bool = True


@dataclass(frozen=True)
class UBlock:
    """1–3 layers; serial, or parallel to the last serial block (their outputs are added)."""

    layers: tuple[ULayer, ...] = (ULayer(),)
    parallel: bool = False
    pool: bool = False  # a 2x2 max-pool before the block


@dataclass(frozen=True)
class UArch:
    """A μNAS network: the conv blocks, the final pooling and the fully connected layers' widths."""

    blocks: tuple[UBlock, ...] = (UBlock(),)
    pooling: str = "avg"
    pool_size: int = 2
    dense: tuple[int, ...] = (32,)

    def to_json(self) -> dict:
        return {"blocks": [{"parallel": b.parallel, "pool": b.pool,
                            "layers": [vars(layer).copy() for layer in b.layers]} for b in self.blocks],
                "pooling": self.pooling, "pool_size": self.pool_size, "dense": list(self.dense)}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    def key(self) -> str:
        """Identifies the network (every gene is active in this space): its JSON text."""
        return self.dumps()

    @staticmethod
    def from_json(data: dict | str) -> UArch:
        try:
            if isinstance(data, str):
                data = json.loads(data)
            blocks = tuple(UBlock(tuple(ULayer(str(ly["type"]), int(ly["kernel"]), int(ly["channels"]),
                                               int(ly["stride"]), bool(ly["bn"]), bool(ly["relu"]))
                                        for ly in b["layers"]), bool(b["parallel"]), bool(b["pool"]))
                           for b in data["blocks"])
            return UArch(blocks, str(data["pooling"]), int(data["pool_size"]), tuple(int(u) for u in data["dense"]))
        except (KeyError, TypeError, ValueError, json.JSONDecodeError) as e:
            raise UnasError(f"μNAS architecture: cannot read it ({type(e).__name__}: {e})") from None

    def describe(self) -> str:
        """Compact text: `[p] c3x16s2 bn relu, d5 | ... | avg2 | fc32`."""
        def layer(ly: ULayer) -> str:
            kind = {"full": "c", "depthwise": "dw", "1x1": "pw"}[ly.type]
            k = "" if ly.type == "1x1" else f"{ly.kernel}"
            ch = "" if ly.type == "depthwise" else f"x{ly.channels}"
            extras = "".join((f"s{ly.stride}" if ly.stride != 1 and ly.type != "1x1" else "",
                              "+bn" if ly.bn else "", "+relu" if ly.relu else ""))
            return f"{kind}{k}{ch}{extras}"
        blocks = " | ".join(("par " if b.parallel else "") + ("pool " if b.pool else "")
                            + ", ".join(layer(ly) for ly in b.layers) for b in self.blocks)
        return f"{blocks} | {self.pooling}{self.pool_size} | " + " ".join(f"fc{u}" for u in self.dense)


@dataclass(frozen=True)
class UnasSpace:
    """μNAS Table 1's ranges (all inclusive) for a task of `num_classes` classes on (H, W, C) inputs."""

    input_shape: tuple[int, int, int] = (28, 28, 1)
    num_classes: int = 10
    max_blocks: int = 10
    max_layers: int = 3
    max_channels: int = 128
    max_dense: int = 3
    units: tuple[int, int] = (10, 256)

    def to_json(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @staticmethod
    def from_json(data: dict) -> UnasSpace:
        try:
            return UnasSpace(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
        except TypeError as e:
            raise UnasError(f"μNAS search space: {e}") from None

    # -- validity --------------------------------------------------------------------------------------------------
    def problems(self, arch: UArch) -> list[str]:
        """Why `arch` is outside this space (empty when it is inside)."""
        out = []
        if not 1 <= len(arch.blocks) <= self.max_blocks:
            out.append(f"{len(arch.blocks)} blocks (1..{self.max_blocks})")
        if arch.blocks and arch.blocks[0].parallel:
            out.append("the first block cannot be parallel")
        for i, b in enumerate(arch.blocks):
            if not 1 <= len(b.layers) <= self.max_layers:
                out.append(f"block {i}: {len(b.layers)} layers (1..{self.max_layers})")
            for j, ly in enumerate(b.layers):
                where = f"block {i} layer {j}"
                if ly.type not in LAYER_TYPES:
                    out.append(f"{where}: type {ly.type!r}")
                if ly.kernel not in KERNELS or (ly.type == "1x1") != (ly.kernel == 1):
                    out.append(f"{where}: kernel {ly.kernel} for a {ly.type} layer")
                if not 1 <= ly.channels <= self.max_channels:
                    out.append(f"{where}: {ly.channels} channels (1..{self.max_channels})")
                if ly.stride not in (1, 2) or (ly.type == "1x1" and ly.stride != 1):
                    out.append(f"{where}: stride {ly.stride} for a {ly.type} layer")
        if arch.pooling not in ("avg", "max") or arch.pool_size not in POOL_SIZES:
            out.append(f"final pooling {arch.pooling}{arch.pool_size}")
        if not 1 <= len(arch.dense) <= self.max_dense:
            out.append(f"{len(arch.dense)} FC layers (1..{self.max_dense})")
        out += [f"FC layer of {u} units ({self.units[0]}..{self.units[1]})" for u in arch.dense
                if not self.units[0] <= u <= self.units[1]]
        return out

    def check(self, arch: UArch) -> UArch:
        bad = self.problems(arch)
        if bad:
            raise UnasError(f"μNAS architecture outside the space: {'; '.join(bad)}")
        return arch

    # -- sampling ----------------------------------------------------------------------------------------------------
    def random_layer(self, rng: np.random.Generator) -> ULayer:
        kind = LAYER_TYPES[int(rng.integers(3))]
        kernel = 1 if kind == "1x1" else int(rng.choice(KERNELS[1:]))
        stride = 1 if kind == "1x1" else int(rng.integers(1, 3))
        return ULayer(kind, kernel, int(rng.integers(1, self.max_channels + 1)), stride, bool(rng.integers(2)),
                      bool(rng.integers(2)))

    def random_block(self, rng: np.random.Generator, parallel: bool = False) -> UBlock:
        layers = tuple(self.random_layer(rng) for _ in range(int(rng.integers(1, self.max_layers + 1))))
        return UBlock(layers, parallel, bool(rng.integers(2)))

    def sample(self, rng: np.random.Generator) -> UArch:
        """A random architecture (μNAS's generator: uniform counts, then uniform genes)."""
        n = int(rng.integers(1, self.max_blocks + 1))
        blocks = tuple(self.random_block(rng, parallel=bool(i) and bool(rng.integers(2))) for i in range(n))
        dense = tuple(int(rng.integers(self.units[0], self.units[1] + 1))
                      for _ in range(int(rng.integers(1, self.max_dense + 1))))
        return UArch(blocks, ("avg", "max")[int(rng.integers(2))], int(rng.choice(POOL_SIZES)), dense)

    # -- morphisms (Table 1) ---------------------------------------------------------------------------------------
    @property
    def morphisms(self) -> dict[str, Callable[[UArch, np.random.Generator], UArch | None]]:
        return {name[len("_m_"):]: getattr(self, name) for name in sorted(dir(self)) if name.startswith("_m_")}

    def mutate(self, arch: UArch, rng: np.random.Generator) -> tuple[UArch, str]:
        """One applicable morphism, drawn uniformly, applied to `arch`: (the child, the morphism's name)."""
        names = list(self.morphisms)
        for name in rng.permutation(names):
            child = self.morphisms[str(name)](arch, rng)
            if child is not None and child != arch:
                return self.check(child), str(name)
        raise UnasError(f"no morphism applies to {arch.describe()}")  # cannot happen: FC units always can move

    def _pick_block(self, arch: UArch, rng) -> int:
        return int(rng.integers(len(arch.blocks)))

    def _set_block(self, arch: UArch, i: int, block: UBlock) -> UArch:
        return replace(arch, blocks=arch.blocks[:i] + (block,) + arch.blocks[i + 1:])

    def _set_layer(self, arch: UArch, i: int, j: int, layer: ULayer) -> UArch:
        b = arch.blocks[i]
        return self._set_block(arch, i, replace(b, layers=b.layers[:j] + (layer,) + b.layers[j + 1:]))

    def _pick_layer(self, arch: UArch, rng, want=None) -> tuple[int, int] | None:
        spots = [(i, j) for i, b in enumerate(arch.blocks) for j, ly in enumerate(b.layers)
                 if want is None or want(ly)]
        return spots[int(rng.integers(len(spots)))] if spots else None

    def _m_add_block(self, arch, rng):
        if len(arch.blocks) >= self.max_blocks:
            return None
        i = int(rng.integers(len(arch.blocks) + 1))
        block = self.random_block(rng, parallel=i > 0 and bool(rng.integers(2)))
        return replace(arch, blocks=arch.blocks[:i] + (block,) + arch.blocks[i:])

    def _m_remove_block(self, arch, rng):
        if len(arch.blocks) <= 1:
            return None
        i = self._pick_block(arch, rng)
        blocks = arch.blocks[:i] + arch.blocks[i + 1:]
        if blocks[0].parallel:  # the new first block reads the input: it cannot be parallel
            blocks = (replace(blocks[0], parallel=False),) + blocks[1:]
        return replace(arch, blocks=blocks)

    def _m_toggle_parallel(self, arch, rng):
        if len(arch.blocks) < 2:
            return None
        i = 1 + int(rng.integers(len(arch.blocks) - 1))
        return self._set_block(arch, i, replace(arch.blocks[i], parallel=not arch.blocks[i].parallel))

    def _m_toggle_pool(self, arch, rng):
        i = self._pick_block(arch, rng)
        return self._set_block(arch, i, replace(arch.blocks[i], pool=not arch.blocks[i].pool))

    def _m_add_layer(self, arch, rng):
        spots = [i for i, b in enumerate(arch.blocks) if len(b.layers) < self.max_layers]
        if not spots:
            return None
        i = spots[int(rng.integers(len(spots)))]
        b = arch.blocks[i]
        j = int(rng.integers(len(b.layers) + 1))
        return self._set_block(arch, i, replace(b, layers=b.layers[:j] + (self.random_layer(rng),) + b.layers[j:]))

    def _m_remove_layer(self, arch, rng):
        spots = [i for i, b in enumerate(arch.blocks) if len(b.layers) > 1]
        if not spots:
            return None
        i = spots[int(rng.integers(len(spots)))]
        b = arch.blocks[i]
        j = int(rng.integers(len(b.layers)))
        return self._set_block(arch, i, replace(b, layers=b.layers[:j] + b.layers[j + 1:]))

    def _edit_layer(self, arch: UArch, rng, edit, want=None) -> UArch | None:
        """`arch` with one random layer (among those `want` accepts; None: any) replaced by `edit(layer)`; None when
        no layer qualifies. The layer is drawn before `edit` draws anything."""
        spot = self._pick_layer(arch, rng, want)
        if spot is None:
            return None
        return self._set_layer(arch, *spot, edit(arch.blocks[spot[0]].layers[spot[1]]))

    def _m_change_type(self, arch, rng):
        def change(ly):
            kind = [t for t in LAYER_TYPES if t != ly.type][int(rng.integers(2))]
            kernel = 1 if kind == "1x1" else (ly.kernel if ly.kernel > 1 else 3)
            return replace(ly, type=kind, kernel=kernel, stride=1 if kind == "1x1" else ly.stride)
        return self._edit_layer(arch, rng, change)

    def _m_kernel(self, arch, rng):
        def change(ly):
            options = [k for k in (ly.kernel - 2, ly.kernel + 2) if k in KERNELS[1:]]
            return replace(ly, kernel=options[int(rng.integers(len(options)))])
        return self._edit_layer(arch, rng, change, lambda ly: ly.type != "1x1")

    def _m_channels(self, arch, rng):
        def change(ly):
            return replace(ly, channels=int(np.clip(ly.channels + _step(rng), 1, self.max_channels)))
        return self._edit_layer(arch, rng, change, lambda ly: ly.type != "depthwise")

    def _m_stride(self, arch, rng):
        return self._edit_layer(arch, rng, lambda ly: replace(ly, stride=3 - ly.stride), lambda ly: ly.type != "1x1")

    def _m_toggle_bn(self, arch, rng):
        return self._edit_layer(arch, rng, lambda ly: replace(ly, bn=not ly.bn))

    def _m_toggle_relu(self, arch, rng):
        return self._edit_layer(arch, rng, lambda ly: replace(ly, relu=not ly.relu))

    def _m_pooling_type(self, arch, rng):
        return replace(arch, pooling="max" if arch.pooling == "avg" else "avg")

    def _m_pool_size(self, arch, rng):
        options = [p for p in (arch.pool_size - 2, arch.pool_size + 2) if p in POOL_SIZES]
        return replace(arch, pool_size=options[int(rng.integers(len(options)))])

    def _m_add_dense(self, arch, rng):
        if len(arch.dense) >= self.max_dense:
            return None
        i = int(rng.integers(len(arch.dense) + 1))
        units = int(rng.integers(self.units[0], self.units[1] + 1))
        return replace(arch, dense=arch.dense[:i] + (units,) + arch.dense[i:])

    def _m_remove_dense(self, arch, rng):
        if len(arch.dense) <= 1:
            return None
        i = int(rng.integers(len(arch.dense)))
        return replace(arch, dense=arch.dense[:i] + arch.dense[i + 1:])

    def _m_units(self, arch, rng):
        i = int(rng.integers(len(arch.dense)))
        units = int(np.clip(arch.dense[i] + _step(rng), *self.units))
        return replace(arch, dense=arch.dense[:i] + (units,) + arch.dense[i + 1:])


def _step(rng) -> int:
    """A channel or unit morphism's change: one of `STEPS`, up or down (two draws, in that order)."""
    return int(rng.choice(STEPS)) * (1 if rng.integers(2) else -1)
