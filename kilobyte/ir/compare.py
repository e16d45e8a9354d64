"""IR stage: structural equivalence of two graphs (the oracle that two frontends or two pass orders agree).

Two graphs are *equivalent* when they have the same nodes in the same order — same ops, attributes, wiring,
tensor shapes, dtypes and quantisation parameters — and their constants agree within a tolerance. Tensor and node
names may differ: tensors are matched by position (graph inputs, then node inputs and outputs in order), so a graph
whose passes renumbered its nodes is still equivalent to one built directly. `Graph.__eq__` is the strict version
(same names, bit-identical constants).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NoReturn

import numpy as np

from .graph import Graph, QParams, Tensor


def assert_graphs_equivalent(a: Graph, b: Graph, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Raise `AssertionError` naming the first difference between `a` and `b`; return None when equivalent.

    >>> from kilobyte.ir import GraphBuilder, Op
    >>> def g(name):
    ...     bld = GraphBuilder()
    ...     return bld.build([bld.node(Op.RELU, [bld.input((1, 4, 4, 3), name=name)])])
    >>> assert_graphs_equivalent(g("x"), g("image"))
    """
    cmp = _Comparison(a, b, rtol, atol)
    cmp.run()


class _Comparison:
    def __init__(self, a: Graph, b: Graph, rtol: float, atol: float):
        self.a, self.b, self.rtol, self.atol = a, b, rtol, atol
        self.names: dict[str, str] = {}  # tensor of a -> matching tensor of b

    def run(self) -> None:
        if len(self.a.inputs) != len(self.b.inputs):
            _fail(f"graph inputs: {len(self.a.inputs)} vs {len(self.b.inputs)}")
        for k, (ta, tb) in enumerate(zip(self.a.inputs, self.b.inputs)):
            self._tensor(f"graph input {k}", self.a.tensors[ta], self.b.tensors[tb])
            self.names[ta] = tb
        for i, (na, nb) in enumerate(zip(self.a.nodes, self.b.nodes)):
            self._node(i, na, nb)
        if len(self.a.nodes) != len(self.b.nodes):
            i = min(len(self.a.nodes), len(self.b.nodes))
            extra = (self.a if len(self.a.nodes) > i else self.b).nodes[i]
            _fail(f"node counts differ ({len(self.a.nodes)} vs {len(self.b.nodes)}); first unmatched node {i} "
                  f"'{extra.name}' ({extra.op.value})")
        outs_a = [self.names.get(t) for t in self.a.outputs]
        if outs_a != list(self.b.outputs):
            _fail(f"graph outputs: {list(self.a.outputs)} (as {outs_a}) vs {list(self.b.outputs)}")

    def _node(self, i: int, na, nb) -> None:
        where = f"node {i} ('{na.name}' vs '{nb.name}')"
        if na.op is not nb.op:
            _fail(f"{where}: op {na.op.value} vs {nb.op.value}")
        where = f"{where} {na.op.value}"
        _compare_attrs(where, na.attrs, nb.attrs, self.rtol)
        if len(na.inputs) != len(nb.inputs) or len(na.outputs) != len(nb.outputs):
            _fail(f"{where}: inputs {list(na.inputs)} vs {list(nb.inputs)}")
        for k, (ta, tb) in enumerate(zip(na.inputs, nb.inputs)):
            tensor_a, tensor_b = self.a.tensors[ta], self.b.tensors[tb]
            if tensor_a.is_const or tensor_b.is_const:
                self._tensor(f"{where} input {k} ('{ta}' vs '{tb}')", tensor_a, tensor_b)
            elif self.names.get(ta) != tb:
                _fail(f"{where}: input {k} is '{ta}' (matching '{self.names.get(ta)}') vs '{tb}'")
        for ta, tb in zip(na.outputs, nb.outputs):
            self._tensor(f"{where} output", self.a.tensors[ta], self.b.tensors[tb])
            self.names[ta] = tb

    def _tensor(self, where: str, ta: Tensor, tb: Tensor) -> None:
        if ta.shape != tb.shape or ta.dtype != tb.dtype:
            _fail(f"{where}: {ta.dtype}{list(ta.shape)} vs {tb.dtype}{list(tb.shape)}")
        if ta.is_const != tb.is_const:
            _fail(f"{where}: constant in one graph only")
        if ta.is_const:
            _compare_arrays(where, ta.data, tb.data, self.rtol, self.atol)
        _compare_qparams(where, ta.qparams, tb.qparams, self.rtol)


def _fail(message: str) -> NoReturn:
    raise AssertionError(f"graphs differ: {message}")


def _compare_arrays(where: str, x: np.ndarray, y: np.ndarray, rtol: float, atol: float) -> None:
    if x.dtype.kind in "iub":
        if not np.array_equal(x, y):
            idx = tuple(int(i) for i in np.argwhere(x != y)[0])
            _fail(f"{where}: values differ at {idx}: {x[idx]} vs {y[idx]}")
        return
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    bad = ~np.isclose(x64, y64, rtol=rtol, atol=atol)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        _fail(f"{where}: values differ at {idx}: {x64[idx]:.8g} vs {y64[idx]:.8g} "
              f"(max |diff| {np.abs(x64 - y64).max():.3g}, {int(bad.sum())} of {bad.size} elements)")


def _compare_qparams(where: str, qa: QParams | None, qb: QParams | None, rtol: float) -> None:
    if qa is None or qb is None:
        if qa is not qb:
            _fail(f"{where}: quantisation params in one graph only")
        return
    if qa.axis != qb.axis or qa.scale.shape != qb.scale.shape or not np.array_equal(qa.zero_point, qb.zero_point):
        _fail(f"{where}: quantisation axis/zero points differ ({qa.axis} vs {qb.axis})")
    if not np.allclose(qa.scale, qb.scale, rtol=rtol, atol=0.0):
        _fail(f"{where}: quantisation scales differ (max |diff| {np.abs(qa.scale - qb.scale).max():.3g})")


def _compare_attrs(where: str, x, y, rtol: float) -> None:
    if type(x) is not type(y):
        _fail(f"{where}: attrs {type(x).__name__} vs {type(y).__name__}")
    for f in dataclasses.fields(x):
        va, vb = getattr(x, f.name), getattr(y, f.name)
        same = math.isclose(va, vb, rel_tol=rtol) if isinstance(va, float) and isinstance(vb, float) else va == vb
        if not same:
            _fail(f"{where}: {f.name} = {va} vs {vb}")
