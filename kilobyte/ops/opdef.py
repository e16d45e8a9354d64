"""Op registry: `OpDef`, everything Kilobyte knows of one operator, in one record.

Each stage asks the registry (`kilobyte.ops.opdef`) instead of keeping its own table keyed by `Op`: the IR its attrs
type and shape rule, analysis its MACs and other arithmetic, quantisation which params its output takes, the
interpreters its float and int8 references, the planner its kernel contract, codegen its C function and emitter,
the Flash model the constant tables its layer adds, the `.tflite` writer its builtin and lowering.

Data fields are filled for every op; behaviour fields (callables) by the op modules (`conv.py`, `resize.py`,
`lut.py`, ...) where the op has that behaviour (a training op has no emitter or lowering: the transforms remove it).

Callables take duck-typed graphs and nodes (`graph.tensors[name].shape / .qparams / .dtype / .data`, `node.name /
.op / .attrs / .inputs / .outputs`): an op module imports nothing above `kilobyte.ops`, so every stage may import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .contract import KernelContract
from .types import Op, ShapeError

QPARAMS_RULES = ("own", "shared", "fixed")


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy / TFLite broadcasting of two shapes, aligned at the last axis.

    >>> broadcast_shape((1, 4, 4, 8), (1, 1, 1, 8))
    (1, 4, 4, 8)
    """
    rank = max(len(a), len(b))
    a, b = (1,) * (rank - len(a)) + tuple(a), (1,) * (rank - len(b)) + tuple(b)
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        raise ShapeError(f"operands {a} and {b} do not broadcast")
    return tuple(x if y == 1 else y for x, y in zip(a, b))


def same_shape(attrs, shapes) -> tuple[int, ...]:
    """The shape rule of an elementwise op: its output has its (first) input's shape."""
    return tuple(shapes[0])


@dataclass(frozen=True)
class OpDef:
    """One operator. `attrs`: its attrs dataclass (a node of the op carries exactly that type).

    Data (every op):
    - `params`: inputs after the first are constant parameters, not activations (weights, BN statistics).
    - `weight_axis`: a linear op with int8 weights quantised per channel along this axis; its MACs come from
      `macs`, its bias is int32 (Flash), its weights may be stored sparse (CONV_2D).
    - `fusable`: takes a fused activation (RELU / RELU6 folded into it at import).
    - `qparams`: its int8 output's quantisation: "own" (calibrated), "shared" (its input's: values move or are
      compared, never rescaled), "fixed" (`fixed_qparams` = (scale, zero point), what TFLite's kernel writes).
    - `elementwise_cost`: one arithmetic op per output element (analysis counts it besides MACs).
    - `int8_input`: its first input must be int8 in an int8 graph (the reference checks).
    - `const_operands`: an operand after the first may be a constant, quantised per tensor (ADD, SUB, MUL,
      MAXIMUM, MINIMUM; PRELU's alpha).
    - `builtin`: the TFLite BuiltinOperator name it is written as (None: a training op the transforms remove).
    - `contract`: the kernel contract (`contract.py`) the planner and codegen read.
    - `function`: the runtime function its layer calls, when that is one name (else `kernels.calls` decides).

    Behaviour (None: the op has none of that kind):
    - `shape(attrs, input_shapes) -> output shape`; raises `ShapeError`.
    - `macs(graph, node) -> int` multiply-accumulates (linear ops).
    - `float_ref(node, args) -> ndarray`, `int8_ref(graph, node, args) -> ndarray`: the references.
    - `emit(graph, node, bufs, plan) -> LayerCode`: the C of its layer (`layer_code.py`).
    - `emit_tile(g, k, code) -> str`: its block of a patch stage's loop, on tiles (`tile_code.py`); None: the op
      cannot run inside a patch stage.
    - `table_bytes(graph, node) -> int`: Flash bytes of the constant tables its layer adds besides its params.
    - `lower(writer, graph, node)`: its `.tflite` operators, through the writer's small interface (`export`).
    """

    op: Op
    attrs: type
    contract: KernelContract
    params: bool = False
    weight_axis: int | None = None
    fusable: bool = False
    qparams: str = "own"
    fixed_qparams: tuple | None = None
    elementwise_cost: bool = False
    int8_input: bool = True
    const_operands: bool = False
    builtin: str | None = None
    function: str | None = None
    shape: Callable | None = None
    macs: Callable | None = None
    float_ref: Callable | None = None
    int8_ref: Callable | None = None
    emit: Callable | None = None
    emit_tile: Callable | None = None
    table_bytes: Callable | None = None
    lower: Callable | None = None

    def __post_init__(self):
        if self.qparams not in QPARAMS_RULES or (self.qparams == "fixed") != (self.fixed_qparams is not None):
            raise ValueError(f"{self.op.value}: qparams {self.qparams!r} with fixed_qparams {self.fixed_qparams}")
        if self.contract.op is not self.op:
            raise ValueError(f"{self.op.value}: the contract is {self.contract.op.value}'s")

    @property
    def linear(self) -> bool:
        """A conv-like op with int8 weights (MACs, per-channel weights, int32 bias)."""
        return self.weight_axis is not None
