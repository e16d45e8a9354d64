"""Schedule stage: exact, fast evaluation of patch-stage candidates (stage length n, grid p) for `choose_patch`.

A tile's geometry is separable. A patch's box is a row range times a column range, each layer's window acts on rows
and columns independently, and the union of the boxes a tensor's readers need is the union of their row ranges times
the union of their column ranges. So for a p x p grid, `patch.patch_tiles` does p^2 box walks, but p row walks and
p column walks give the same tiles. The per-patch working memory is then products of per-axis lengths: numpy over
(patches, nodes) instead of Python loops over `Tile`s.

This module reproduces `patch.working_memory` on those arrays: the same tile buffers, in-place hosts, scratch and
live bytes. So `stage_peak` and the stage's MACs equal those of `patch.plan_patch_stage` for the same (n, p).

There is one case where separability fails. When a needed range has zero length (an output tile that reads only
padding), the box walk drops that reader's whole box, both axes. `evaluate` then returns None and the caller uses
the box walk. `tests/schedule/test_patch.py` checks that both agree.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from ..analysis.macs import node_macs
from ..ir import Graph, Op
from ..kernels import contract_for, inplace_rule
from .plan_types import PlanOptions
from .scratch import kernel_scratch

Ranges = tuple[np.ndarray, np.ndarray]  # (lo, hi) over the grid's row (or column) ranges


@functools.lru_cache(maxsize=1 << 16)  # pure; the rows of a grid repeat its columns' ranges, cuts repeat layers
def axis_in(o0: int, o1: int, window: tuple[int, ...], size: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Input range read by outputs [o0, o1) along one axis, clipped to [0, size), and the padding outside it: the rule
    of both the box walk (`patch.input_box`) and the separable evaluator below, so the two agree by construction."""
    k, s, d, before, _ = window
    i0 = o0 * s - before
    i1 = (o1 - 1) * s - before + d * (k - 1) + 1
    lo = min(max(i0, 0), size)
    hi = max(min(i1, size), lo)
    pad_lo = min(max(-i0, 0), i1 - i0)
    return (lo, hi), (pad_lo, (i1 - i0) - pad_lo - (hi - lo))


class StageEvaluator:
    """Evaluates patch stages that are prefixes of one order of `graph` (the per-node facts are computed once)."""

    def __init__(self, graph: Graph, names: Sequence[str], options: PlanOptions):
        self.graph, self.options = graph, options
        self.nodes = [graph.node(name) for name in names]
        self.outs = [n.outputs[0] for n in self.nodes]
        self.step_of = {t: k for k, t in enumerate(self.outs)}
        self.ins = [list(dict.fromkeys(graph.activation_inputs(n))) for n in self.nodes]
        self.windows = [self._window(n) for n in self.nodes]
        self.hw = [graph.tensors[ins[0]].shape[1:3] for ins in self.ins]
        self.channels = np.array([graph.tensors[t].shape[3] if len(graph.tensors[t].shape) == 4 else 0
                                  for t in self.outs], np.int64)
        self.weights = np.array([graph.tensors[n.inputs[1]].numel if n.op in (Op.CONV_2D, Op.DEPTHWISE_CONV_2D)
                                 else 0 for n in self.nodes], np.int64)
        self.scratch = np.array([0 if n.op is Op.DEPTHWISE_CONV_2D else kernel_scratch(graph, n, options.kernels)
                                 for n in self.nodes], np.int64)
        self.rules = [inplace_rule(graph, n, options) for n in self.nodes]
        self.macs = np.cumsum([0] + [node_macs(graph, n) for n in self.nodes])
        self._walks: dict = {}
        self._last: dict[int, dict[int, int]] = {}

    def _window(self, node):
        window = contract_for(node).window
        return None if window is None else window(self.graph, node)

    def base_macs(self, n: int) -> int:
        return int(self.macs[n])

    def evaluate(self, n: int, outputs: Sequence[str], rows: Sequence[tuple[int, int]],
                 cols: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
        """(working peak, MACs) of the first `n` nodes run over the patches rows x cols (row-major), the stage
        outputs `outputs` kept whole; None where the separable form does not hold (module docstring)."""
        arrays, boxes = [], []
        for ranges, axis in ((rows, 0), (cols, 1)):
            per_range = [self._walk(n, tuple(outputs), lo, hi, axis) for lo, hi in ranges]
            if any(w is None for w in per_range):
                return None
            arrays.append([np.array([w[j] for w in per_range], np.int64).T for j in range(3)])  # 3 x (n, p)
            boxes.append(list(zip(*(w[3] for w in per_range))))  # per node: its (start, length) in every range
        (oh, ih, ph), (ow, iw, pw) = arrays  # per node: output lengths, input lengths, padding totals
        sizes = np.einsum("ki,kj->ijk", oh, ow).reshape(-1, n) * self.channels[:n]  # (P, n)
        padded = np.einsum("ki,kj->ijk", ih + ph, iw + pw).reshape(-1, n)
        macs = int((self.weights[:n] * oh.sum(axis=1) * ow.sum(axis=1)).sum())
        same_box = [(r, c) for r, c in zip(*boxes)]  # a node's box in every patch
        return self._working_peak(n, sizes, padded, same_box), macs

    def _walk(self, n: int, outputs: tuple[str, ...], lo: int, hi: int, axis: int):
        """One range [lo, hi) of the stage output along `axis`, walked back through the first `n` nodes: per node its
        output length, input length, padding total and (output start, length) ((None, 0): not needed); None on a
        zero-length range. Cached: grids share ranges with their centre patch and with each other."""
        key = (n, outputs, lo, hi, axis)
        if key not in self._walks:
            self._walks[key] = self._walk_once(n, outputs, lo, hi, axis)
        return self._walks[key]

    def _walk_once(self, n: int, outputs: tuple[str, ...], lo: int, hi: int, axis: int):
        need: dict[str, tuple[int, int]] = {t: (lo, hi) for t in outputs}
        out_len, in_len, pads, starts = [0] * n, [0] * n, [0] * n, [None] * n
        for k in range(n - 1, -1, -1):
            box = need.get(self.outs[k])
            if box is None:
                continue  # nothing needs this node's output: an empty tile, it reads nothing
            o0, o1 = box
            window = self.windows[k]
            if window is None:
                i0, i1, pad = o0, o1, 0
            else:
                (i0, i1), pads_k = axis_in(o0, o1, window[axis], self.hw[k][axis])  # the box walk's own rule
                pad = sum(pads_k)
            if o1 <= o0 or i1 <= i0:
                return None  # a zero-length range: the box walk drops such a box whole (module docstring)
            out_len[k], in_len[k], pads[k], starts[k] = o1 - o0, i1 - i0, pad, o0
            for t in self.ins[k]:
                old = need.get(t)
                need[t] = (i0, i1) if old is None else (min(old[0], i0), max(old[1], i1))
        return out_len, in_len, pads, tuple(zip(starts, out_len))

    def _last_readers(self, n: int) -> dict[int, int]:
        """Stage node -> the last stage node reading its output (nodes read only after the stage are absent)."""
        if n not in self._last:
            last: dict[int, int] = {}
            for i in range(n):
                for t in self.ins[i]:
                    if self.step_of.get(t, n) < n:
                        last[self.step_of[t]] = i
            self._last[n] = last
        return self._last[n]

    def _working_peak(self, n: int, sizes: np.ndarray, padded: np.ndarray, same_box: list) -> int:
        """`patch.working_memory(...).live` max, on arrays: tile buffers with the in-place rules, scratch."""
        last = self._last_readers(n)
        home: dict[int, int] = {}
        groups: list[list[int]] = []
        for i in range(n):
            if i not in last:
                continue
            host = self._host(i, last, home, sizes, padded, same_box)
            if host is None:
                home[i] = len(groups)
                groups.append([i])
            else:
                home[i] = home[host]
                groups[home[i]].append(i)
        scratch = np.broadcast_to(self.scratch[:n], sizes.shape).copy()  # DW: none unless in place
        for group in groups:
            for i in group[1:]:
                if self.nodes[i].op is Op.DEPTHWISE_CONV_2D:
                    scratch[:, i] = padded[:, i]
        total = scratch
        for group in groups:  # a group holds its largest live member at each step
            if len(group) == 1:
                s = group[0]
                total[:, s:last[s] + 1] += sizes[:, s:s + 1]
                continue
            held = np.zeros_like(sizes)
            for s in group:
                span = slice(s, last[s] + 1)
                held[:, span] = np.maximum(held[:, span], sizes[:, s:s + 1])
            total += held
        return int(total.max())

    def _host(self, i: int, last: dict, home: dict, sizes: np.ndarray, padded: np.ndarray,
              same_box: list) -> int | None:
        """`patch._inplace_host` on arrays."""
        rule = self.rules[i]
        if rule is None:
            return None
        hosts = [self.step_of[t] for t in self.ins[i]
                 if t in self.step_of and self.step_of[t] in home and last[self.step_of[t]] == i]
        if not hosts:
            return None
        if rule.elementwise:  # the same box in every patch
            same = [h for h in hosts if same_box[h] == same_box[i]]
            return same[0] if same else None
        j = hosts[0]
        fits = bool(np.all(sizes[:, i] <= sizes[:, j]))
        saves = padded[:, i].max() < sizes[:, i].max()
        return j if fits and saves else None
