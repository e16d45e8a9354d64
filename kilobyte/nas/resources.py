"""Search stage: what a candidate architecture costs on the device — the compiler's own figures, fast. One evaluator
for every strategy: TinyNAS's MBConv candidates and μNAS's granular ones (`core.builder` gives the space's builder).

`ResourceEvaluator.evaluate(arch)` builds the candidate's IR graph (`build.build_graph` or `unas_build.build_graph`,
placeholder weights), takes
the int8 structure `quantize()` would give (`quant.int8_structure`), and runs the planner's own steps
(`schedule.estimate_resources`): peak SRAM with operator reordering and in-place rules (and the best patch stage when
`PlanOptions.patch` asks for one), Flash = the constant arrays of the generated `model.c` + the rest of the linked
firmware for the device's core (`schedule/flash.py`: runtime code, layer code, harness; measured on ELF files), MACs.
So a candidate's figures are exactly what `kilobyte compile` reports for the same network (tests/nas/
test_resources.py holds them equal on 300 random architectures).

Searches ask this hundreds of thousands of times, so:
- results are cached per network (`arch.key()`: genes of inactive blocks do not matter), least recently used first
  out when the cache is full;
- `fits(arch, budget)` (MBConv spaces) decides with exact early exits before planning: Flash and MACs come from the
  layer list alone (`flash_lower_bound` is the constant arrays plus `flash.code_lower_bound` of the kernel families
  every candidate calls — the firmware base and the code every function of those families links —, which the planned
  figure can only exceed), so a candidate over the Flash or MAC budget is rejected without building a graph.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace

from ..quant.quantize import int8_structure
from ..schedule.estimate import Resources, estimate_resources
from ..schedule.flash import code_lower_bound
from ..schedule.latency import estimate_instructions
from ..schedule.patch_fit import PatchFit, fit_patch
from ..schedule.plan_types import PlanOptions
from ..targets.cortexm.firmware import DEFAULT_STACK_BYTES
from .build import Network, network
from .core import builder
from .space import Arch

REQUANT_BYTES_PER_CHANNEL = 12  # int32 bias + int32 multiplier + int32 shift per output channel (model.c)
# kernel families every network of an MBConv space calls (with RD too: the first block of every stage keeps its
# depthwise, `MBSpace.kernel_choices`)
ALWAYS_CALLED = ("conv", "depthwise", "fc", "mean")


@dataclass(frozen=True)
class Budget:
    """A device's limits for a candidate. SRAM counts the planned arena, plus with `count_input` the caller-owned
    buffers — the input and the outputs (a detector's head maps are tens of KB: issue 28's first joint winner
    overflowed STM32F412's RAM by 44 KB when only the input counted) — and `sram_reserve` bytes the firmware needs
    besides (its stack; a detector's candidate and result arrays): the sum the linked firmware's SRAM comes to (see
    `device_budget`). Flash counts model.c's constants and the kernel code."""

    sram_bytes: int
    flash_bytes: int
    max_macs: int | None = None
    count_input: bool = False
    sram_reserve: int = 0
    max_instructions: int | None = None  # emulated Cortex-M instructions per inference (`schedule.latency`)

    def sram_of(self, r: Resources) -> int:
        return r.arena_bytes + (r.input_bytes + r.output_bytes if self.count_input else 0) + self.sram_reserve

    def admits(self, r: Resources) -> bool:
        return (self.sram_of(r) <= self.sram_bytes and r.flash_bytes <= self.flash_bytes
                and (self.max_macs is None or r.macs <= self.max_macs))


def figures(r: Resources) -> dict:
    """A candidate's figures as both searches store and report them: peak SRAM (the caller-owned input excluded),
    that input, the linked firmware's Flash, model.c's constant bytes and MACs."""
    return {"peak_bytes": r.peak_bytes, "input_bytes": r.input_bytes, "flash_bytes": r.flash_bytes,
            "weight_bytes": r.weight_bytes, "macs": r.macs}


def device_budget(sram_bytes: int, flash_bytes: int, max_macs: int | None = None) -> Budget:
    """The budget that keeps a model inside a device by the measured firmware: arena + input buffer + the Cortex-M
    firmware's stack reserve within the SRAM."""
    return Budget(sram_bytes, flash_bytes, max_macs, count_input=True, sram_reserve=DEFAULT_STACK_BYTES)


def layer_counts(net: Network) -> tuple[int, int]:
    """(constant bytes of model.c, MACs) from the layer list alone: int8 weights + 12 bytes per output channel of
    every weighted layer (a detector's heads included); MACs of the convolutions and the classifier (adds and pooling
    count none)."""
    weights = macs = 0
    for layer, h in net.convs():
        out_h = -(-h // layer.stride)
        per_out = layer.kernel * layer.kernel * (1 if layer.depthwise else layer.cin)
        weights += per_out * layer.cout + REQUANT_BYTES_PER_CHANNEL * layer.cout
        macs += per_out * layer.cout * out_h * out_h
    if net.head is not None:
        weights += (net.head.cout + REQUANT_BYTES_PER_CHANNEL) * net.num_classes
        macs += net.head.cout * net.num_classes
    return weights, macs


class ResourceEvaluator:
    """Exact, cached resource figures of a space's candidates under one set of plan options, with Flash for `core`
    (the device's; None: the largest of the calibrated cores). `space`: an `MBSpace` (every method) or a
    `UnasSpace` (`evaluate`, `cached`, `graph`: μNAS bounds its objectives itself). `peak_bytes` excludes the
    caller-owned input (μNAS's convention too); `input_bytes` says how much it is.

    With `options.patch == "auto"` (the joint search, `kilobyte search --patch`) a candidate's figures depend on the
    budget: `fitting(arch, budget)` runs it with the schedule MCUNetV2 keeps — per layer, or the patch stage (n, p)
    with the fewest MACs among those whose exact arena fits the SRAM (`schedule.patch_fit.fit_patch`) — and
    `evaluate(arch)` gives the smallest-peak schedule (`make_plan(patch="auto")`), the least SRAM the network can
    run in."""

    def __init__(self, space, options: PlanOptions | None = None, cache_size: int = 100_000,
                 core: str | None = None, latency_core: str | None = None):
        self.space = space
        self.builder = builder(space)
        self.options = options or PlanOptions()
        self.core = core
        self.latency_core = latency_core  # with a budget's max_instructions: the latency model's core
        self.patch = self.options.patch == "auto"
        self.code_floor = code_lower_bound(ALWAYS_CALLED, self.options.kernels, core)
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple, Resources] = OrderedDict()
        self._fitted: OrderedDict[tuple, PatchFit | None] = OrderedDict()
        self.planned = 0  # candidates planned (cache misses), for benchmarks

    def graph(self, arch):
        """The int8 inference graph the figures are of (placeholder weights)."""
        return int8_structure(self.builder.build_graph(self.space, arch, verify=False), verify=False)

    def evaluate(self, arch) -> Resources:
        """SRAM, Flash and MACs of `arch` as `kilobyte compile` gives them (cached per network)."""
        key = arch.key()
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        result = estimate_resources(self.graph(arch), self.options, core=self.core)
        self.planned += 1
        _remember(self._cache, key, result, self.cache_size)
        return result

    def per_layer(self, arch: Arch) -> Resources:
        """`arch`'s figures without a patch stage (the least Flash and MACs it can have; `evaluate` in per-layer
        mode)."""
        if not self.patch:
            return self.evaluate(arch)
        key = ("per-layer", arch.key())
        if key not in self._fitted:
            _remember(self._fitted, key, estimate_resources(self.graph(arch), replace(self.options, patch=None),
                                                            core=self.core), self.cache_size)
        return self._fitted[key]

    def cached(self, arch) -> Resources | None:
        """`arch`'s figures if it has been planned already, else None (never plans)."""
        return self._cache.get(arch.key())

    def flash_lower_bound(self, arch: Arch) -> int:
        """Bytes of Flash `arch` needs at least: its constant arrays plus the firmware base and the code every
        function of the families every candidate calls links (planning only adds: layers, structs, functions)."""
        return layer_counts(network(self.space, arch))[0] + self.code_floor

    def fits(self, arch: Arch, budget: Budget) -> bool:
        """Whether `arch` meets `budget`, planning it only when Flash, MACs and the SRAM bound cannot already tell."""
        net = network(self.space, arch)
        weights, macs = layer_counts(net)
        if weights + self.code_floor > budget.flash_bytes:
            return False
        if budget.max_macs is not None and macs > budget.max_macs:  # a patch stage only adds MACs
            return False
        extra = (self.io_bytes(arch) if budget.count_input else 0) + budget.sram_reserve
        if not self.patch and sram_lower_bound(net) + extra > budget.sram_bytes:  # a patch stage beats the bound
            return False
        if extra > budget.sram_bytes:
            return False
        return self.fitting(arch, budget) is not None

    def fitting(self, arch: Arch, budget: Budget) -> Resources | None:
        """`arch`'s figures under the schedule it would be compiled with for `budget` — per layer, or (patch mode)
        the fewest-MAC patch stage whose arena fits —, or None if it does not fit `budget`."""
        if not self.patch:
            r = self.evaluate(arch)
            ok = budget.admits(r) and (budget.max_instructions is None
                                       or self.instructions(arch, budget) <= budget.max_instructions)
            return r if ok else None
        fit = self._fit(arch, budget)
        if fit is None or not budget.admits(fit.resources):
            return None
        if budget.max_instructions is not None and self.instructions(arch, budget) > budget.max_instructions:
            return None
        return fit.resources

    def instructions(self, arch: Arch, budget: Budget) -> int:
        """Emulated Cortex-M instructions of one inference of `arch` with the schedule `fitting` gives it for
        `budget` (the fitted per-layer model, `schedule.latency`, of `latency_core`: Cortex-M7 by default)."""
        key = ("instructions", arch.key(), self._limit(arch, budget))
        if key not in self._fitted:
            options = replace(self.options, patch=self.schedule(arch, budget) if self.patch else self.options.patch)
            _remember(self._fitted, key, estimate_instructions(self.graph(arch), options,
                                                               core=self._latency_core()).total, self.cache_size)
        return self._fitted[key]

    def _latency_core(self) -> str:
        return self.latency_core or "cortex-m7"  # the core the shipped model is fitted on

    def schedule(self, arch: Arch, budget: Budget) -> tuple[int, int] | None:
        """The patch stage (n_nodes, grid) `fitting` runs `arch` with for `budget`; None: per layer (or no fit)."""
        if not self.patch:
            return None
        fit = self._fit(arch, budget)
        return None if fit is None else fit.patch

    def _limit(self, arch: Arch, budget: Budget) -> int:
        """The arena bytes `budget` leaves `arch` (its SRAM minus the input and output buffers and the reserve)."""
        return budget.sram_bytes - budget.sram_reserve - (self.io_bytes(arch) if budget.count_input else 0)

    def io_bytes(self, arch: Arch) -> int:
        """The caller-owned buffers of `arch`: its int8 input and outputs (`Resources.input_bytes + output_bytes`
        without planning)."""
        net = network(self.space, arch)
        convs = list(net.convs())
        heads = convs[len(convs) - len(net.detect):]  # a detector's heads are its last convolutions
        outputs = sum(layer.cout * side ** 2 for layer, side in heads) if net.detect else net.num_classes
        return self.input_bytes(arch) + outputs

    def input_bytes(self, arch: Arch) -> int:
        """The caller-owned int8 input of `arch`: the data's image when the space resizes it (`MBSpace.input_size`)."""
        h, w = self.space.input_hw(arch.resolution)
        return self.space.in_channels * h * w

    def _fit(self, arch: Arch, budget: Budget) -> PatchFit | None:
        """The fewest-cost schedule whose arena fits: MACs, or the latency model's instructions when the budget
        caps them (MCUNetV2: "minimal computation/latency")."""
        limit = self._limit(arch, budget)
        latency = budget.max_instructions is not None
        key = (arch.key(), limit, latency)
        if key in self._fitted:
            self._fitted.move_to_end(key)
            return self._fitted[key]
        fit = None
        if limit > 0:
            graph, options = self.graph(arch), replace(self.options, patch=None)
            cost = None
            if latency:
                def cost(c):
                    return estimate_instructions(graph, replace(options, patch=c.patch),
                                                 core=self._latency_core()).total
            fit = fit_patch(graph, limit, options, core=self.core, cost=cost)
        self.planned += 1
        _remember(self._fitted, key, fit, self.cache_size)
        return fit


def _remember(cache: OrderedDict, key, value, size: int) -> None:
    cache[key] = value
    if len(cache) > size:
        cache.popitem(last=False)


def sram_lower_bound(net: Network) -> int:
    """Bytes any per-layer plan of `net` has live at once, at least: a (non-depthwise) convolution has no in-place
    rule, so its whole int8 input and output coexist while it runs (a conv fused with the ADD after it writes the
    ADD's output, of the same size). The stem is left out: its input is the caller's buffer, outside the peak."""
    bound = 0
    for layer, h in list(net.convs())[1:]:
        out_h = -(-h // layer.stride)
        if not layer.depthwise:
            bound = max(bound, layer.cin * h * h + layer.cout * out_h * out_h)
    return bound
