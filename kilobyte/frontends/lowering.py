"""Frontend stage: the shared lowering from NCHW framework semantics to the NHWC IR.

Both frontends (PyTorch and ONNX) describe each source node in the *source* layout — NCHW shapes, OIHW weights,
PyTorch/ONNX axis numbers — and call one `Lowering` method per node. This module owns every layout decision, so the
two frontends cannot drift apart: the same network gives the same IR whichever way it arrives.

Layout contract. A 4-D source value of shape `(1, C, H, W)` is an IR tensor `(1, H, W, C)`; every other rank keeps its
shape. The IR has no transpose, so a flatten of `(1, C, H, W)` with `H*W > 1` and `C > 1` cannot reproduce PyTorch's
channel-major order in memory. Instead the flattened `Value` remembers a column permutation (`perm`: IR column `j`
holds source column `perm[j]`) and the next Linear/Gemm absorbs it by permuting the columns of its weight,
`W_ir = W[:, perm]`, so `W_ir @ x_ir == W @ x` exactly. Elementwise ops carry the permutation along; an op that would
need the source order (a graph output, a reshape to another rank) is rejected with a one-line reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import (
    AddAttrs,
    BatchNormAttrs,
    ConcatAttrs,
    ConvAttrs,
    DepthwiseAttrs,
    FullyConnectedAttrs,
    Graph,
    GraphBuilder,
    MeanAttrs,
    Op,
    PadAttrs,
    PoolAttrs,
    ReshapeAttrs,
    ShapeError,
    SoftmaxAttrs,
)

Pad4 = tuple[int, int, int, int]  # (top, bottom, left, right)

NCHW_TO_NHWC_AXIS = (0, 3, 1, 2)  # source axis i of a 4-D value is IR axis NCHW_TO_NHWC_AXIS[i]


class LoweringError(Exception):
    """A source node cannot be expressed in the IR; the frontend adds the node name and op to the reason."""


@dataclass(frozen=True, eq=False)
class Value:
    """An activation: the IR tensor `name` holding a source value of `shape` (NCHW when 4-D)."""

    name: str
    shape: tuple[int, ...]
    perm: np.ndarray | None = None  # rank 2 only: IR column j holds source column perm[j]


def nhwc(shape) -> tuple[int, ...]:
    """IR shape of a source value: `(N, C, H, W) -> (N, H, W, C)`, other ranks unchanged."""
    shape = tuple(int(d) for d in shape)
    return (shape[0], shape[2], shape[3], shape[1]) if len(shape) == 4 else shape


def nchw(shape) -> tuple[int, ...]:
    """Source shape of an IR tensor: `(N, H, W, C) -> (N, C, H, W)`, other ranks unchanged."""
    return (shape[0], shape[3], shape[1], shape[2]) if len(shape) == 4 else tuple(shape)


def natural_perm(shape) -> np.ndarray | None:
    """Order in which the IR stores the elements of a source value (None when it is the source order)."""
    if len(shape) != 4 or shape[1] == 1 or shape[2] * shape[3] == 1:
        return None
    n, c, h, w = shape
    return np.arange(n * c * h * w).reshape(n, c, h, w).transpose(0, 2, 3, 1).ravel()


def same_padding(size: int, k: int, stride: int, dilation: int = 1, lower: bool = False) -> tuple[int, int]:
    """(before, after) padding of ONNX SAME_UPPER (PyTorch 'same' is its stride-1 case) or SAME_LOWER.

    >>> same_padding(8, 4, 1)
    (1, 2)
    """
    out = -(-size // stride)
    total = max((out - 1) * stride + dilation * (k - 1) + 1 - size, 0)
    small, big = total // 2, total - total // 2
    return (big, small) if lower else (small, big)


def _same_perm(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return np.array_equal(a, b)


def _normalize_axes(axes, rank: int) -> tuple[int, ...]:
    out = []
    for a in axes:
        if not -rank <= a < rank:
            raise LoweringError(f"axis {a} out of range for a rank-{rank} tensor")
        out.append(a % rank)
    return tuple(sorted(set(out)))


def _pool_ceil_matches_floor(size: int, k: int, s: int, before: int, after: int) -> bool:
    span = size + before + after - k
    floor_out, ceil_out = span // s + 1, -(-span // s) + 1
    if (ceil_out - 1) * s >= size + before:  # the last window must start inside the input (PyTorch and ONNX rule)
        ceil_out -= 1
    return ceil_out == floor_out


class Lowering:
    """Builds an IR graph from NCHW-semantics calls, one per source node; `origin` is the source node name."""

    def __init__(self, name: str = "model"):
        self.builder = GraphBuilder(name)
        self._n_inputs = 0

    # -- plumbing --------------------------------------------------------------------------------------------------
    def _emit(self, op: Op, inputs: list[str], attrs, origin: str, params=None, perm=None) -> Value:
        if params is not None:  # every constant of a float graph is float32, whatever the source precision
            params = {k: None if v is None else np.asarray(v, np.float32) for k, v in params.items()}
        try:
            out = self.builder.node(op, inputs, attrs, params=params, origin=origin)
        except ShapeError as e:
            raise LoweringError(str(e)) from None
        return Value(out, nchw(self.builder.shape(out)), perm)

    def input(self, shape) -> Value:
        """A graph input of source shape `shape` (batch 1); the first is named `input`, later ones `input_<k>`."""
        shape = tuple(int(d) for d in shape)
        if not shape or shape[0] != 1:
            raise LoweringError(f"input shape {shape} must have batch size 1")
        name = "input" if self._n_inputs == 0 else f"input_{self._n_inputs}"
        self._n_inputs += 1
        return Value(self.builder.input(nhwc(shape), name=name), shape)

    def build(self, outputs: list[Value]) -> Graph:
        for v in outputs:
            if v.perm is not None:
                raise LoweringError(f"output {v.shape} is a flatten of a (C, H, W) tensor with H*W > 1 that feeds no "
                                    "Linear; the NHWC IR cannot reproduce that order (flatten after pooling to 1x1)")
        return self.builder.build([v.name for v in outputs])

    @staticmethod
    def _rank(x: Value, *ranks: int) -> None:
        if len(x.shape) not in ranks:
            want = " or ".join(str(r) for r in ranks)
            raise LoweringError(f"expected a rank-{want} input, got shape {x.shape}")

    # -- convolution, linear, normalisation ------------------------------------------------------------------------
    def conv2d(self, x: Value, weight: np.ndarray, bias: np.ndarray | None, *, stride, padding: Pad4, dilation,
               groups: int, origin: str) -> Value:
        """2-D convolution with an OIHW `weight`: CONV_2D (groups 1) or DEPTHWISE_CONV_2D (groups == in channels)."""
        self._rank(x, 4)
        if weight.ndim != 4:
            raise LoweringError(f"only 2-D convolutions are supported, got a weight of shape {weight.shape}")
        cout, cin_g, _, _ = weight.shape
        cin = x.shape[1]
        if min(padding) < 0:
            raise LoweringError(f"negative padding {padding}")
        geometry = dict(stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation))
        if groups == 1:
            params = {"weight": weight.transpose(0, 2, 3, 1), "bias": bias}  # OIHW -> OHWI
            return self._emit(Op.CONV_2D, [x.name], ConvAttrs(**geometry), origin, params)
        if groups == cin and cin_g == 1 and cout % cin == 0:
            params = {"weight": weight.transpose(1, 2, 3, 0), "bias": bias}  # (C*m, 1, kh, kw) -> (1, kh, kw, C*m)
            attrs = DepthwiseAttrs(**geometry, depth_multiplier=cout // cin)
            return self._emit(Op.DEPTHWISE_CONV_2D, [x.name], attrs, origin, params)
        raise LoweringError(f"grouped convolution (groups={groups}, {cin} input channels) is not supported; "
                            "use groups=1 or depthwise (groups == in_channels)")

    def linear(self, x: Value, weight: np.ndarray, bias: np.ndarray | None, *, origin: str) -> Value:
        """y = x @ weight.T + bias with weight (out, in); absorbs a pending flatten permutation of `x`."""
        if len(x.shape) != 2:
            raise LoweringError(f"linear layer on a tensor of shape {x.shape}; only (1, features) inputs "
                                "are supported (flatten first)")
        if weight.ndim != 2 or weight.shape[1] != x.shape[1]:
            raise LoweringError(f"weight {weight.shape} does not match input {x.shape}")
        if x.perm is not None:
            weight = weight[:, x.perm]  # see the module docstring: NHWC flatten order
        params = {"weight": weight, "bias": None if bias is None else bias.reshape(-1)}
        return self._emit(Op.FULLY_CONNECTED, [x.name], FullyConnectedAttrs(), origin, params)

    def batch_norm(self, x: Value, gamma, beta, mean, var, *, eps: float, origin: str) -> Value:
        """Inference batch norm over the channel axis (1); parameters in the IR order gamma, beta, mean, var."""
        self._rank(x, 2, 4)
        params = {"gamma": gamma, "beta": beta, "mean": mean, "var": var}
        if x.perm is not None:
            params = {k: v[x.perm] for k, v in params.items()}
        return self._emit(Op.BATCH_NORM, [x.name], BatchNormAttrs(eps=float(eps)), origin, params, x.perm)

    # -- elementwise -----------------------------------------------------------------------------------------------
    def unary(self, op: Op, x: Value, *, origin: str) -> Value:
        """RELU, RELU6 or IDENTITY; layout-agnostic, so a pending permutation passes through."""
        return self._emit(op, [x.name], None, origin, perm=x.perm)

    def add(self, a: Value, b: Value, *, origin: str) -> Value:
        if a.shape != b.shape:
            raise LoweringError(f"add of shapes {a.shape} and {b.shape}; broadcasting is not supported")
        if not _same_perm(a.perm, b.perm):
            raise LoweringError("add of two tensors flattened in different orders")
        return self._emit(Op.ADD, [a.name, b.name], AddAttrs(), origin, perm=a.perm)

    def softmax(self, x: Value, axis: int, *, origin: str) -> Value:
        """Softmax over the channel axis of a 4-D value or the last axis otherwise (the IR's last axis)."""
        rank = len(x.shape)
        axis = _normalize_axes([axis], rank)[0]
        if axis != (1 if rank == 4 else rank - 1):
            raise LoweringError(f"softmax over axis {axis} of shape {x.shape}; only the channel/last axis")
        return self._emit(Op.SOFTMAX, [x.name], SoftmaxAttrs(), origin, perm=x.perm)

    # -- pooling ---------------------------------------------------------------------------------------------------
    def pool(self, op: Op, x: Value, *, kernel, stride, padding: Pad4, origin: str, ceil_mode: bool = False,
             count_include_pad: bool = False) -> Value:
        """AVG_POOL_2D / MAX_POOL_2D; a zero-counting average pool becomes PAD + AVG_POOL_2D (the IR counts
        only in-image taps)."""
        self._rank(x, 4)
        kernel, stride, padding = tuple(kernel), tuple(stride), tuple(padding)
        if min(padding) < 0:
            raise LoweringError(f"negative padding {padding}")
        t, b, left, r = padding
        if ceil_mode and not (_pool_ceil_matches_floor(x.shape[2], kernel[0], stride[0], t, b)
                              and _pool_ceil_matches_floor(x.shape[3], kernel[1], stride[1], left, r)):
            raise LoweringError("ceil_mode=True changes the output size here; only floor mode is supported")
        if op is Op.AVG_POOL_2D and count_include_pad and any(padding):
            x = self.pad(x, [(0, 0), (0, 0), (t, b), (left, r)], origin=origin)
            padding = (0, 0, 0, 0)
        return self._emit(op, [x.name], PoolAttrs(kernel=kernel, stride=stride, padding=padding), origin)

    def mean(self, x: Value, axes, keepdims: bool, *, origin: str) -> Value:
        """Mean over the spatial axes (2, 3) of a 4-D value -> MEAN over NHWC axes (1, 2)."""
        self._rank(x, 4)
        if _normalize_axes(axes, 4) != (2, 3):
            raise LoweringError(f"mean over axes {tuple(axes)}; only the spatial axes (2, 3) are supported")
        return self._emit(Op.MEAN, [x.name], MeanAttrs(axes=(1, 2), keepdims=bool(keepdims)), origin)

    # -- shape ops -------------------------------------------------------------------------------------------------
    def pad(self, x: Value, pads, *, origin: str) -> Value:
        """Zero padding; `pads` is (before, after) per source axis. All-zero padding emits nothing."""
        pads = [(int(a), int(b)) for a, b in pads]
        if len(pads) != len(x.shape) or min(min(p) for p in pads) < 0:
            raise LoweringError(f"padding {pads} does not fit shape {x.shape} (negative padding is a crop)")
        if not any(a or b for a, b in pads):
            return x
        if pads[0] != (0, 0) or x.perm is not None:
            raise LoweringError("padding the batch axis or a flattened tensor is not supported")
        if len(pads) == 4:
            pads = [pads[0], pads[2], pads[3], pads[1]]
        return self._emit(Op.PAD, [x.name], PadAttrs(pads=tuple(pads)), origin)

    def reshape(self, x: Value, shape, *, origin: str) -> Value:
        """View `x` as `shape` (one -1 allowed) in source (row-major NCHW) order; a no-op reshape emits nothing."""
        shape = self._resolve_shape(x, shape)
        if shape == x.shape:
            return x
        source_order = x.perm if x.perm is not None else natural_perm(x.shape)
        if _same_perm(source_order, natural_perm(shape)):
            return self._emit(Op.RESHAPE, [x.name], ReshapeAttrs(shape=nhwc(shape)), origin)
        if len(shape) == 2 and shape[0] == 1:
            return self._emit(Op.RESHAPE, [x.name], ReshapeAttrs(shape=shape), origin, perm=source_order)
        raise LoweringError(f"reshape {x.shape} -> {shape} would need a transpose, which the NHWC IR does not have")

    def flatten(self, x: Value, start_dim: int = 1, end_dim: int = -1, *, origin: str) -> Value:
        rank = len(x.shape)
        start, end = start_dim % rank, end_dim % rank
        merged = int(np.prod(x.shape[start:end + 1], dtype=np.int64))
        return self.reshape(x, x.shape[:start] + (merged,) + x.shape[end + 1:], origin=origin)

    @staticmethod
    def _resolve_shape(x: Value, shape) -> tuple[int, ...]:
        shape = [int(d) for d in shape]
        numel = int(np.prod(x.shape, dtype=np.int64))
        if shape.count(-1) > 1 or any(d < -1 or d == 0 for d in shape):
            raise LoweringError(f"cannot reshape {x.shape} to {tuple(shape)}")
        if -1 in shape:
            known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
            shape[shape.index(-1)] = numel // known if known else 0
        if int(np.prod(shape, dtype=np.int64)) != numel:
            raise LoweringError(f"cannot reshape {x.shape} to {tuple(shape)}")
        return tuple(shape)

    def concat(self, xs: list[Value], axis: int, *, origin: str) -> Value:
        """Concatenation along a source axis (channels of 4-D values -> IR axis 3)."""
        if len(xs) == 1:
            return xs[0]
        rank = len(xs[0].shape)
        if any(len(v.shape) != rank for v in xs):
            raise LoweringError(f"concat of tensors of different ranks: {[v.shape for v in xs]}")
        axis = _normalize_axes([axis], rank)[0]
        perm = None
        if any(v.perm is not None for v in xs):
            if rank != 2 or axis != 1:
                raise LoweringError("concat of flattened tensors is only supported along the feature axis")
            offsets = np.cumsum([0] + [v.shape[1] for v in xs[:-1]])
            perm = np.concatenate([(v.perm if v.perm is not None else np.arange(v.shape[1])) + o
                                   for v, o in zip(xs, offsets)])
        ir_axis = NCHW_TO_NHWC_AXIS[axis] if rank == 4 else axis
        return self._emit(Op.CONCAT, [v.name for v in xs], ConcatAttrs(axis=ir_axis), origin, perm=perm)
