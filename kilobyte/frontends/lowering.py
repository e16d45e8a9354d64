"""Frontend stage: the shared lowering from NCHW framework semantics to the NHWC IR.

Both frontends (PyTorch and ONNX) describe each source node in the *source* layout — NCHW shapes, OIHW weights,
PyTorch/ONNX axis numbers — and call one `Lowering` method per node. This module (with the layout rules of
`layout.py`: NCHW -> NHWC, a 1-D signal as an image one pixel high, flatten permutations) owns every layout decision,
so the two frontends cannot drift apart: the same network gives the same IR whichever way it arrives.
"""

from __future__ import annotations

import numpy as np

from ..ir import (
    AddAttrs,
    BatchNormAttrs,
    ConcatAttrs,
    ConvAttrs,
    DepthwiseAttrs,
    FullyConnectedAttrs,
    GeluAttrs,
    Graph,
    GraphBuilder,
    MeanAttrs,
    Op,
    PadAttrs,
    PoolAttrs,
    ReshapeAttrs,
    ResizeAttrs,
    ShapeError,
    SoftmaxAttrs,
    TransposeConvAttrs,
)
from .layout import (
    LAYOUT_AXES,
    LoweringError,
    Value,
    ir_axis,
    ir_constant,
    natural_perm,
    nhwc,
    normalize_axes,
    per_channel,
    same_perm,
    source_shape,
)

Pad4 = tuple[int, int, int, int]  # (top, bottom, left, right)
__all__ = ["Lowering", "LoweringError", "Value", "nhwc", "same_padding"]

def same_padding(size: int, k: int, stride: int, dilation: int = 1, lower: bool = False) -> tuple[int, int]:
    """(before, after) padding of ONNX SAME_UPPER (PyTorch 'same' is its stride-1 case) or SAME_LOWER.

    >>> same_padding(8, 4, 1)
    (1, 2)
    """
    out = -(-size // stride)
    total = max((out - 1) * stride + dilation * (k - 1) + 1 - size, 0)
    small, big = total // 2, total - total // 2
    return (big, small) if lower else (small, big)


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
    def _emit(self, op: Op, inputs: list[str], attrs, origin: str, params=None, perm=None, rank: int | None = None
              ) -> Value:
        """Append one node; its output is a source value of `rank` (default: the IR output's rank)."""
        if params is not None:  # every constant of a float graph is float32, whatever the source precision
            params = {k: None if v is None else np.asarray(v, np.float32) for k, v in params.items()}
        try:
            out = self.builder.node(op, inputs, attrs, params=params, origin=origin)
        except ShapeError as e:
            raise LoweringError(str(e)) from None
        shape = self.builder.shape(out)
        return Value(out, source_shape(shape, rank or len(shape)), perm)

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

    @staticmethod
    def _as_image(x: Value) -> Value:
        """A (N, C, L) value seen as the (N, C, 1, L) image its IR tensor (N, 1, L, C) already is: no node."""
        n, c, length = x.shape
        return Value(x.name, (n, c, 1, length))

    @staticmethod
    def _as_signal(y: Value) -> Value:
        """An (N, C, 1, L) image seen as the (N, C, L) signal it holds: no node."""
        n, c, h, length = y.shape
        if h != 1:
            raise LoweringError(f"1-D op produced an image of height {h}")
        return Value(y.name, (n, c, length))

    # -- convolution, linear, normalisation ------------------------------------------------------------------------
    def conv2d(self, x: Value, weight: np.ndarray, bias: np.ndarray | None, *, stride, padding: Pad4, dilation,
               groups: int, origin: str) -> Value:
        """2-D convolution with an OIHW `weight`: CONV_2D (groups 1) or DEPTHWISE_CONV_2D (groups == in channels)."""
        self._rank(x, 4)
        if weight.ndim != 4:
            raise LoweringError(f"only 1-D and 2-D convolutions are supported, got a weight of shape {weight.shape}")
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

    def conv1d(self, x: Value, weight: np.ndarray, bias: np.ndarray | None, *, stride: int, padding: tuple[int, int],
               dilation: int, groups: int, origin: str) -> Value:
        """1-D convolution of a (N, C, L) value with an (O, I, k) `weight`: the 2-D op with a 1 x k window."""
        self._rank(x, 3)
        if weight.ndim != 3:
            raise LoweringError(f"a 1-D convolution needs an (out, in, k) weight, got shape {weight.shape}")
        y = self.conv2d(self._as_image(x), weight[:, :, None, :], bias, stride=(1, stride),
                        padding=(0, 0, *padding), dilation=(1, dilation), groups=groups, origin=origin)
        return self._as_signal(y)

    def conv_transpose2d(self, x: Value, weight: np.ndarray, bias: np.ndarray | None, *, stride, padding,
                         output_padding, dilation=(1, 1), groups: int = 1, origin: str) -> Value:
        """Transposed 2-D convolution with a PyTorch / ONNX (Cin, Cout, kh, kw) `weight`: TRANSPOSE_CONV cropping the
        full output by `padding` (top, bottom, left, right) less `output_padding` (rows, columns) at the end."""
        self._rank(x, 4)
        if weight.ndim != 4 or weight.shape[0] != x.shape[1]:
            raise LoweringError(f"transposed convolution weight {weight.shape} does not match input {x.shape}")
        if groups != 1 or tuple(dilation) != (1, 1):
            raise LoweringError(f"transposed convolution with groups={groups}, dilation={tuple(dilation)}; only "
                                "groups 1 and dilation 1 are supported")
        top, bottom, left, right = padding
        (oph, opw), (sh, sw) = output_padding, stride
        if min(top, left) < 0 or not (0 <= oph < max(sh, 1) and 0 <= opw < max(sw, 1)):
            raise LoweringError(f"transposed convolution padding {tuple(padding)} / output_padding "
                                f"{tuple(output_padding)}: padding must be >= 0 and output_padding below the stride")
        attrs = TransposeConvAttrs(stride=(int(sh), int(sw)), padding=(top, bottom - oph, left, right - opw))
        params = {"weight": weight.transpose(1, 2, 3, 0), "bias": bias}  # (Cin, Cout, kh, kw) -> OHWI
        return self._emit(Op.TRANSPOSE_CONV, [x.name], attrs, origin, params)

    def conv_transpose1d(self, x: Value, weight: np.ndarray, bias: np.ndarray | None, *, stride: int,
                         padding: tuple[int, int], output_padding: int, origin: str) -> Value:
        """Transposed 1-D convolution of a (N, C, L) value: the 2-D op with a 1 x k window."""
        self._rank(x, 3)
        y = self.conv_transpose2d(self._as_image(x), weight[:, :, None, :], bias, stride=(1, stride),
                                  padding=(0, 0, *padding), output_padding=(0, output_padding), origin=origin)
        return self._as_signal(y)

    def resize(self, x: Value, size, *, mode: str, align_corners: bool = False, half_pixel_centers: bool = False,
               origin: str) -> Value:
        """RESIZE_NEAREST_NEIGHBOR (`mode` "nearest") or RESIZE_BILINEAR ("bilinear") of the H and W axes to `size`,
        TFLite's coordinate flags as given (the frontends map their own conventions onto them)."""
        self._rank(x, 4)
        op = {"nearest": Op.RESIZE_NEAREST_NEIGHBOR, "bilinear": Op.RESIZE_BILINEAR}[mode]
        attrs = ResizeAttrs(tuple(int(v) for v in size), bool(align_corners), bool(half_pixel_centers))
        return self._emit(op, [x.name], attrs, origin)

    def gelu(self, x: Value, *, approximate: bool, origin: str) -> Value:
        """GELU, exact (erf) or tanh-approximate; elementwise, so a pending permutation passes through."""
        return self._emit(Op.GELU, [x.name], GeluAttrs(bool(approximate)), origin, perm=x.perm, rank=len(x.shape))

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
        self._rank(x, 2, 3, 4)
        params = {"gamma": gamma, "beta": beta, "mean": mean, "var": var}
        if x.perm is not None:
            params = {k: v[x.perm] for k, v in params.items()}
        return self._emit(Op.BATCH_NORM, [x.name], BatchNormAttrs(eps=float(eps)), origin, params, x.perm,
                          len(x.shape))

    def scale_shift(self, x: Value, scale, shift, *, origin: str) -> Value:
        """`x * scale + shift` with constants that broadcast to `x` and vary along the channel axis (1) at most:
        a BATCH_NORM with mean 0, variance 1 and eps 0, which `fold_batchnorm` folds into a conv / FC before it
        (and `quantize` turns into MUL and SUB by constants where it cannot)."""
        self._rank(x, 2, 3, 4)
        gamma, beta = per_channel(scale, x, "factor"), per_channel(shift, x, "term")
        c = x.shape[1]
        return self.batch_norm(x, gamma, beta, np.zeros(c, np.float32), np.ones(c, np.float32), eps=0.0,
                               origin=origin)

    def arith_const(self, op: Op, x: Value, const, *, const_first: bool, origin: str) -> Value:
        """ADD / SUB / MUL of `x` and a constant (`const_first`: the constant is the first operand, c - x for SUB).
        A per-channel or single-value constant is a `scale_shift` (folded into a conv before it, else MUL / SUB by
        constants); one of any other shape that broadcasts stays one ADD / SUB / MUL with the constant in IR layout
        and its own shape (`ir_constant`; `kb_add_const` / `kb_mul_const` read it by strides)."""
        c = np.asarray(const, np.float32)
        try:
            if len(x.shape) in (2, 3, 4):
                per_channel(c, x, "operand")
                scale, shift = {Op.ADD: (1.0, c), Op.MUL: (c, 0.0),
                                Op.SUB: (-1.0, c) if const_first else (1.0, -c)}[op]
                return self.scale_shift(x, scale, shift, origin=origin)
        except LoweringError:
            pass  # varies along more than the channel axis (or does not broadcast: ir_constant says so)
        name = next(n for n in (f"const_{k}" for k in range(len(self.builder.tensors) + 1))
                    if n not in self.builder.tensors)
        k = self.builder.const(name, ir_constant(c, x, "operand"))
        return self._emit(op, [k, x.name] if const_first else [x.name, k], AddAttrs(), origin, perm=x.perm,
                          rank=len(x.shape))

    # -- elementwise -----------------------------------------------------------------------------------------------
    def unary(self, op: Op, x: Value, *, origin: str, attrs=None) -> Value:
        """An elementwise op of one input (RELU, RELU6, IDENTITY, LOGISTIC, TANH, ELU, HARD_SWISH, LEAKY_RELU);
        layout-agnostic, so a pending permutation passes through."""
        return self._emit(op, [x.name], attrs, origin, perm=x.perm, rank=len(x.shape))

    def prelu(self, x: Value, slope, *, origin: str) -> Value:
        """PRELU with a constant slope per channel (axis 1) or one for all: the IR's alpha is (C,) or (1,)."""
        alpha = per_channel(slope, x, "slope") if np.size(slope) > 1 else np.asarray(slope, np.float32).reshape(1)
        if x.perm is not None and alpha.size > 1:
            alpha = alpha[x.perm]
        return self._emit(Op.PRELU, [x.name], None, origin, {"alpha": alpha}, x.perm, len(x.shape))

    def hard_sigmoid(self, x: Value, alpha: float, beta: float, *, origin: str) -> Value:
        """`clip(alpha * x + beta, 0, 1)` as `relu6(6 alpha x + 6 beta) / 6` (PyTorch's Hardsigmoid is alpha 1/6,
        beta 1/2): the IR has no such op, TFLite neither; its converter writes the same ADD, RELU6, MUL chain."""
        y = self.scale_shift(x, 6.0 * alpha, 6.0 * beta, origin=origin)
        y = self.unary(Op.RELU6, y, origin=origin)
        return self.scale_shift(y, 1.0 / 6.0, 0.0, origin=origin)

    def add(self, a: Value, b: Value, *, origin: str) -> Value:
        """ADD of two activations; of different shapes, broadcast as `binary` does (x + x.mean(..., keepdim=True))."""
        if a.shape != b.shape:
            return self.binary(Op.ADD, a, b, origin=origin)
        if not same_perm(a.perm, b.perm):
            raise LoweringError("add of two tensors flattened in different orders")
        return self._emit(Op.ADD, [a.name, b.name], AddAttrs(), origin, perm=a.perm, rank=len(a.shape))

    def binary(self, op: Op, a: Value, b: Value, *, origin: str) -> Value:
        """ADD, SUB, MUL, MAXIMUM or MINIMUM of two activations of one rank, broadcast as numpy does (e.g. the
        (1, C, 1, 1) scale of a squeeze-excite block over (1, C, H, W))."""
        if len(a.shape) != len(b.shape):
            raise LoweringError(f"{op.value.lower()} of shapes {a.shape} and {b.shape}: operands of different ranks")
        try:
            out = tuple(np.broadcast_shapes(a.shape, b.shape))
        except ValueError:
            raise LoweringError(f"{op.value.lower()} of shapes {a.shape} and {b.shape}: they do not broadcast"
                                ) from None
        perm = a.perm if a.shape == out else b.perm
        for v in (a, b):
            if not (same_perm(v.perm, perm) or (v.perm is None and np.prod(v.shape) == 1)):
                raise LoweringError(f"{op.value.lower()} of tensors flattened in different orders")
        attrs = AddAttrs() if op in (Op.ADD, Op.SUB, Op.MUL) else None
        return self._emit(op, [a.name, b.name], attrs, origin, perm=perm, rank=len(out))

    def softmax(self, x: Value, axis: int, *, origin: str, log: bool = False) -> Value:
        """SOFTMAX (LOG_SOFTMAX with `log`) over the channel axis of a 3-D / 4-D value or the last axis otherwise
        (the IR's last axis)."""
        rank = len(x.shape)
        axis = normalize_axes([axis], rank)[0]
        if axis != (1 if rank in LAYOUT_AXES else rank - 1):
            raise LoweringError(f"softmax over axis {axis} of shape {x.shape}; only the channel/last axis")
        if log:
            return self._emit(Op.LOG_SOFTMAX, [x.name], None, origin, perm=x.perm, rank=rank)
        return self._emit(Op.SOFTMAX, [x.name], SoftmaxAttrs(), origin, perm=x.perm, rank=rank)

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

    def pool1d(self, op: Op, x: Value, *, kernel: int, stride: int, padding: tuple[int, int], origin: str,
               ceil_mode: bool = False, count_include_pad: bool = False) -> Value:
        """1-D pooling of a (N, C, L) value: the 2-D pool with a 1 x k window."""
        self._rank(x, 3)
        y = self.pool(op, self._as_image(x), kernel=(1, kernel), stride=(1, stride), padding=(0, 0, *padding),
                      origin=origin, ceil_mode=ceil_mode, count_include_pad=count_include_pad)
        return self._as_signal(y)

    def adaptive_pool(self, op: Op, x: Value, size, *, origin: str) -> Value:
        """Adaptive average / max pooling of a 3-D / 4-D value to `size` (one entry per spatial axis, None keeps
        it): MEAN for a global average, else the pool whose windows tile the input exactly."""
        self._rank(x, 3, 4)
        spatial = x.shape[2:]
        size = tuple(d if s is None else int(s) for d, s in zip(spatial, size))
        if op is Op.AVG_POOL_2D and all(s == 1 for s in size):
            return self.mean(x, range(2, len(x.shape)), True, origin=origin)
        if any(d % s for d, s in zip(spatial, size)):
            raise LoweringError(f"adaptive pooling {spatial} -> {size} with uneven windows is not supported")
        k = tuple(d // s for d, s in zip(spatial, size))
        if len(k) == 1:
            return self.pool1d(op, x, kernel=k[0], stride=k[0], padding=(0, 0), origin=origin)
        return self.pool(op, x, kernel=k, stride=k, padding=(0, 0, 0, 0), origin=origin)

    def mean(self, x: Value, axes, keepdims: bool, *, origin: str) -> Value:
        """Mean over spatial axes (H and/or W of a 4-D value, L of a 3-D one) -> MEAN over the matching NHWC axes."""
        return self._reduce(Op.MEAN, x, axes, keepdims, origin=origin)

    def reduce_max(self, x: Value, axes, keepdims: bool, *, origin: str) -> Value:
        """Maximum over any axes but the batch -> REDUCE_MAX over the matching NHWC axes."""
        return self._reduce(Op.REDUCE_MAX, x, axes, keepdims, origin=origin)

    def _reduce(self, op: Op, x: Value, axes, keepdims: bool, *, origin: str) -> Value:
        self._rank(x, 3, 4)
        rank = len(x.shape)
        axes = normalize_axes(axes, rank)
        lowest = 2 if op is Op.MEAN else 1
        if not axes or min(axes) < lowest:
            which = "the spatial axes (2 and up)" if op is Op.MEAN else "axes 1 and up"
            raise LoweringError(f"{op.value.lower()} over axes {tuple(axes)} of shape {x.shape}; only {which}")
        ir_axes = {ir_axis(a, rank) for a in axes} | ({1} if rank == 3 else set())  # a signal's unit H goes too
        if keepdims:
            target = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        else:
            target = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        dropped = tuple(d for i, d in enumerate(nhwc(x.shape)) if i not in ir_axes)
        if not keepdims and nhwc(target) == dropped:
            return self._emit(op, [x.name], MeanAttrs(tuple(sorted(ir_axes)), False), origin, rank=len(target))
        y = self._emit(op, [x.name], MeanAttrs(tuple(sorted(ir_axes)), True), origin, rank=rank)
        return self.reshape(y, target, origin=origin)

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
        rank = len(x.shape)
        ir_pads = [(0, 0)] * len(nhwc(x.shape))
        for i, p in enumerate(pads):
            ir_pads[ir_axis(i, rank)] = p
        return self._emit(Op.PAD, [x.name], PadAttrs(pads=tuple(ir_pads)), origin, rank=rank)

    def reshape(self, x: Value, shape, *, origin: str) -> Value:
        """View `x` as `shape` (one -1 allowed) in source (row-major NCHW) order; a reshape that leaves the IR tensor
        as it is (a no-op, or e.g. (1, C, L) <-> (1, C, 1, L)) emits nothing."""
        shape = self._resolve_shape(x, shape)
        if shape == x.shape:
            return x
        source_order = x.perm if x.perm is not None else natural_perm(x.shape)
        if same_perm(source_order, natural_perm(shape)):
            if nhwc(shape) == self.builder.shape(x.name):
                return Value(x.name, shape)
            return self._emit(Op.RESHAPE, [x.name], ReshapeAttrs(shape=nhwc(shape)), origin, rank=len(shape))
        if len(shape) == 2 and shape[0] == 1:
            return self._emit(Op.RESHAPE, [x.name], ReshapeAttrs(shape=shape), origin, perm=source_order)
        raise LoweringError(f"reshape {x.shape} -> {shape} would need a transpose, which the NHWC IR does not have")

    def squeeze(self, x: Value, dims=None, *, origin: str) -> Value:
        """Drop the unit axes among `dims` (all unit axes when None, the batch axis included, as PyTorch does)."""
        dims = range(len(x.shape)) if dims is None else normalize_axes(dims, len(x.shape))
        return self.reshape(x, tuple(d for i, d in enumerate(x.shape) if not (i in dims and d == 1)), origin=origin)

    def unsqueeze(self, x: Value, dims, *, origin: str) -> Value:
        """Insert unit axes at positions `dims` of the result."""
        rank = len(x.shape) + len(dims)
        dims = normalize_axes(dims, rank)
        rest = iter(x.shape)
        return self.reshape(x, tuple(1 if i in dims else next(rest) for i in range(rank)), origin=origin)

    def transpose(self, x: Value, perm, *, origin: str) -> Value:
        """A transpose that only moves unit axes (the elements keep their order): a reshape. Others need a
        TRANSPOSE op, which the IR does not have."""
        perm = [p % len(x.shape) for p in perm]
        if sorted(perm) != list(range(len(x.shape))):
            raise LoweringError(f"permutation {perm} does not fit shape {x.shape}")
        moved = [p for p in perm if x.shape[p] != 1]
        if moved != sorted(moved):
            raise LoweringError(f"transpose {perm} of shape {x.shape} reorders elements; the IR has no TRANSPOSE")
        return self.reshape(x, tuple(x.shape[p] for p in perm), origin=origin)

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
        axis = normalize_axes([axis], rank)[0]
        perm = None
        if any(v.perm is not None for v in xs):
            if rank != 2 or axis != 1:
                raise LoweringError("concat of flattened tensors is only supported along the feature axis")
            offsets = np.cumsum([0] + [v.shape[1] for v in xs[:-1]])
            perm = np.concatenate([(v.perm if v.perm is not None else np.arange(v.shape[1])) + o
                                   for v, o in zip(xs, offsets)])
        attrs = ConcatAttrs(axis=ir_axis(axis, rank))
        return self._emit(Op.CONCAT, [v.name for v in xs], attrs, origin, perm=perm, rank=rank)

