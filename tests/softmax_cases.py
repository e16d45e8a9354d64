"""Shared SOFTMAX / LOG_SOFTMAX test cases: one-op int8 graphs and input rows that probe the kernels' corners.

Used by tests/interp/test_softmax_vs_tflm.py (reference vs TFLite Micro) and tests/runtime/test_softmax_kernel.py
(C kernel vs reference), so both compare on the same cases.
"""

from __future__ import annotations

import numpy as np

from kilobyte.ir import GraphBuilder, Op, QParams, SoftmaxAttrs

SOFTMAX_OUT = QParams.per_tensor(1 / 256, -128)
LOG_SOFTMAX_OUT = QParams.per_tensor(16 / 256, 127)
SCALES = [1e-3, 0.01, 0.1, 0.3, 1.0, 40.0]  # 40: beta · scale · 2^26 caps at 2^31 - 1
BETAS = [1.0, 0.5, 2.0, 0.1]
DEPTHS = [1, 2, 10, 1000]
SHAPES = [(1, 10), (1, 4, 4, 10), (2, 3, 7)]


def softmax_graph(op: Op, shape, scale: float, beta: float = 1.0, zero_point: int = 0, out: QParams | None = None):
    """A one-node int8 SOFTMAX (with `beta`) or LOG_SOFTMAX graph; the output quantised as TFLite requires unless
    `out` says otherwise."""
    b = GraphBuilder("softmax")
    x = b.input(tuple(shape), "int8", qparams=QParams.per_tensor(scale, zero_point))
    attrs = SoftmaxAttrs(beta) if op is Op.SOFTMAX else None
    default = SOFTMAX_OUT if op is Op.SOFTMAX else LOG_SOFTMAX_OUT
    return b.build([b.node(op, [x], attrs, qparams=out or default)])


def edge_rows(depth: int, rng) -> np.ndarray:
    """Rows that probe the kernels' corners, (8, depth) int8."""
    rows = [np.full(depth, v) for v in (-128, 0, 127)]  # all equal
    one_large = np.full(depth, -128)
    one_large[rng.integers(depth)] = 127
    rows.append(one_large)
    rows.append(np.resize(np.arange(-128, 128), depth))  # the full int8 range (repeating)
    near = np.full(depth, 100)
    near[::2] = 99  # one step below the maximum
    rows.append(near)
    rows.append(np.where(np.arange(depth) % 3 == 0, 127, -128))  # the two extremes
    rows.append(rng.integers(120, 128, depth))  # a crowd near the top
    return np.stack(rows).astype(np.int8)


def case_rows(depth: int, rng, n_random: int) -> np.ndarray:
    """Edge rows, `n_random` uniform rows and `n_random // 2` rows bunched around 60, (k, depth) int8."""
    return np.concatenate([edge_rows(depth, rng), rng.integers(-128, 128, (n_random, depth)).astype(np.int8),
                           np.clip(rng.normal(60, 20, (n_random // 2, depth)), -128, 127).astype(np.int8)])
