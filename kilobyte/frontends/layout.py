"""Frontend stage: the layout contract between NCHW framework values and the NHWC IR, shared by both frontends.

A 4-D source value of shape `(1, C, H, W)` is an IR tensor `(1, H, W, C)`; a 3-D one `(1, C, L)` (a
1-D signal: Conv1d, MaxPool1d, BatchNorm1d) is an image one pixel high, `(1, 1, L, C)`, so 1-D layers lower to the 2-D
ops with a `1 x k` window; every other rank keeps its shape. A reshape that leaves the IR tensor as it is, such as
`(1, C, L) -> (1, C, 1, L)`, only relabels the `Value`. The IR has no transpose, so a flatten of `(1, C, H, W)` with
`H*W > 1` and `C > 1` (or of `(1, C, L)` with `L > 1`) cannot reproduce PyTorch's channel-major order in memory.
Instead the flattened `Value` remembers a column permutation (`perm`: IR column `j` holds source column `perm[j]`) and
the next Linear/Gemm absorbs it by permuting the columns of its weight, `W_ir = W[:, perm]`, so `W_ir @ x_ir == W @ x`
exactly. Elementwise ops carry the permutation along; an op that would need the source order (a graph output, a
reshape to another rank) is rejected with a one-line reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LAYOUT_AXES = {4: (0, 2, 3, 1), 3: (0, 2, 1)}  # source axes in the order the IR stores them, per source rank
IR_AXIS = {4: (0, 3, 1, 2), 3: (0, 3, 2)}  # source axis i of a 4-D / 3-D value is IR axis IR_AXIS[rank][i]


class LoweringError(Exception):
    """A source node cannot be expressed in the IR; the frontend adds the node name and op to the reason."""


@dataclass(frozen=True, eq=False)
class Value:
    """An activation: the IR tensor `name` holding a source value of `shape` (NCHW when 4-D, NCL when 3-D)."""

    name: str
    shape: tuple[int, ...]
    perm: np.ndarray | None = None  # rank 2 only: IR column j holds source column perm[j]


def nhwc(shape) -> tuple[int, ...]:
    """IR shape of a source value: `(N, C, H, W) -> (N, H, W, C)`, `(N, C, L) -> (N, 1, L, C)`, others unchanged.

    >>> nhwc((1, 40, 49))
    (1, 1, 49, 40)
    """
    shape = tuple(int(d) for d in shape)
    if len(shape) == 4:
        return (shape[0], shape[2], shape[3], shape[1])
    if len(shape) == 3:
        return (shape[0], 1, shape[2], shape[1])
    return shape


def source_shape(ir_shape, rank: int) -> tuple[int, ...]:
    """The source shape of rank `rank` that an IR tensor of shape `ir_shape` holds (`nhwc` inverted)."""
    s = tuple(int(d) for d in ir_shape)
    if rank == 4 and len(s) == 4:
        return (s[0], s[3], s[1], s[2])
    if rank == 3 and len(s) == 4 and s[1] == 1:
        return (s[0], s[3], s[2])
    if rank != len(s):
        raise LoweringError(f"IR shape {s} cannot hold a rank-{rank} value")
    return s


def ir_axis(axis: int, rank: int) -> int:
    """IR axis of source axis `axis` (normalised) of a rank-`rank` value."""
    return IR_AXIS[rank][axis] if rank in IR_AXIS else axis


def natural_perm(shape) -> np.ndarray | None:
    """Order in which the IR stores the elements of a source value (None when it is the source order)."""
    axes = LAYOUT_AXES.get(len(shape))
    if axes is None:
        return None
    order = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape).transpose(axes).ravel()
    return None if np.array_equal(order, np.arange(order.size)) else order


def same_perm(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return np.array_equal(a, b)


def normalize_axes(axes, rank: int) -> tuple[int, ...]:
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise LoweringError(f"axis {a} out of range for a rank-{rank} tensor")
        out.append(a % rank)
    return tuple(sorted(set(out)))


def per_channel(const, x: Value, what: str) -> np.ndarray:
    """The (C,) values of a constant that broadcasts to `x` and varies along the channel axis (1) at most."""
    c = np.asarray(const, np.float32)
    try:
        full = np.broadcast_to(c, x.shape)
    except ValueError:
        raise LoweringError(f"constant {what} of shape {c.shape} does not broadcast to {x.shape}") from None
    vec = full[tuple(slice(None) if i == 1 else 0 for i in range(len(x.shape)))]  # (C,)
    if not np.array_equal(full, np.broadcast_to(vec.reshape((1, -1) + (1,) * (len(x.shape) - 2)), x.shape)):
        raise LoweringError(f"constant {what} of shape {c.shape} varies along more than the channel axis; only "
                            "per-channel or scalar constants are supported")
    return np.ascontiguousarray(vec)


def ir_constant(const, x: Value, what: str) -> np.ndarray:
    """A constant that broadcasts to `x`, in `x`'s IR layout and in its own broadcast shape (never the broadcast map):
    against an (N, C, H, W) value a (1, 1, H, W) constant becomes (1, H, W, 1), against (N, C, L) a (C, 1) one
    becomes (1, 1, 1, C); against a rank-2 value it keeps its shape.

    >>> ir_constant(np.zeros((1, 1, 5, 7)), Value("x", (1, 3, 5, 7)), "term").shape
    (1, 5, 7, 1)
    """
    c = np.asarray(const, np.float32)
    rank = len(x.shape)
    try:
        fits = c.ndim <= rank and np.broadcast_shapes(c.shape, x.shape) == tuple(x.shape)
    except ValueError:
        fits = False
    if not fits:
        raise LoweringError(f"constant {what} of shape {c.shape} does not broadcast to {x.shape}")
    if x.perm is not None and c.size > 1:
        raise LoweringError(f"constant {what} of shape {c.shape} against a flattened (C, H, W) value: the IR holds "
                            "its elements in another order")
    c = c.reshape((1,) * (rank - c.ndim) + c.shape)
    if rank == 3:
        c = c[:, :, None, :]  # (N, C, L) -> (N, C, 1, L), as `nhwc` does
    return np.ascontiguousarray(c.transpose(LAYOUT_AXES[4]) if c.ndim == 4 else c)
