"""Op registry: one `OpDef` per operator (`opdef.py`), the one place each op's facts live.

`opdef(op)` is what every stage asks; `defs()` iterates over all of them. The op modules (`binary.py`,
`concat.py`, `edges.py`, `fully_connected.py`, `lut.py`, `mean.py`, `movement.py`, `pad.py`, `pool.py`, `prelu.py`,
`reshape.py`, `resize.py`, `softmax.py`, `training.py`, `transpose_conv.py`, `conv.py`) define their ops completely —
data and behaviour. The registry is checked when built: every `Op` has exactly one `OpDef`.

This package sits right above `errors` in the layer order (`docs/layout.md`): it imports nothing else of Kilobyte,
so the IR and every stage can ask it. Its building blocks are leaf modules here too: the Op enum and attrs
(`types.py`), TFLite's integer arithmetic (`arith.py`, `fixedpoint.py`), C text (`c_text.py`), kernel contracts
(`contract.py`), and the layer code an emitter returns (`layer_code.py`).
"""

from __future__ import annotations

from collections.abc import Iterator

from . import (
    binary,
    concat,
    conv,
    edges,
    fully_connected,
    lut,
    mean,
    movement,
    pad,
    pool,
    prelu,
    reshape,
    resize,
    softmax,
    training,
    transpose_conv,
)
from .opdef import OpDef
from .types import Op

_MODULES = (conv, binary, concat, edges, fully_connected, lut, mean, movement, pad, pool, prelu, reshape, resize,
            softmax, training, transpose_conv)


def _registry() -> dict[Op, OpDef]:
    out: dict[Op, OpDef] = {}
    for module in _MODULES:
        for d in module.DEFS:
            if d.op in out:
                raise RuntimeError(f"{d.op.value}: defined twice ({module.__name__})")
            out[d.op] = d
    missing = set(Op) - out.keys()
    if missing:
        raise RuntimeError(f"no OpDef for {sorted(o.value for o in missing)}")
    return out


REGISTRY: dict[Op, OpDef] = _registry()


def opdef(op: Op) -> OpDef:
    """The definition of `op` (every `Op` has one)."""
    return REGISTRY[op]


def defs() -> Iterator[OpDef]:
    """Every op's definition, in `Op` order."""
    return (REGISTRY[op] for op in Op)


def ops_where(test) -> frozenset[Op]:
    """The ops whose `OpDef` passes `test` (e.g. `lambda d: d.linear`)."""
    return frozenset(d.op for d in defs() if test(d))


__all__ = ["REGISTRY", "OpDef", "defs", "opdef", "ops_where"]
