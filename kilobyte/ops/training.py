"""Op registry: BATCH_NORM and IDENTITY — training-graph ops the frontends emit and the inference transforms remove
(BATCH_NORM folded into the conv before it, IDENTITY dropped); no C, no `.tflite` builtin."""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOpError
from .contract import KernelContract
from .node_params import require_same_qparams
from .opdef import OpDef, same_shape
from .types import BatchNormAttrs, NoAttrs, Op


def _batch_norm(node, args) -> np.ndarray:
    x, gamma, beta, mean, var = args
    return (x - mean) / np.sqrt(var + node.attrs.eps) * gamma + beta


def _batch_norm_int8(graph, node, args) -> np.ndarray:
    raise UnsupportedOpError(f"node '{node.name}': no int8 kernel for BATCH_NORM (fold it into the conv first)")


def _identity_int8(graph, node, args) -> np.ndarray:
    """Values unchanged, so input and output params must agree."""
    require_same_qparams(graph, node)
    return args[0].copy()


_FOLDED = "folded into the producer at import"
DEFS = (
    OpDef(Op.BATCH_NORM, BatchNormAttrs, KernelContract(Op.BATCH_NORM, None, local=True, constraints=_FOLDED),
          params=True, elementwise_cost=True, int8_input=False, shape=same_shape, float_ref=_batch_norm,
          int8_ref=_batch_norm_int8),
    OpDef(Op.IDENTITY, NoAttrs, KernelContract(Op.IDENTITY, None, local=True, constraints=_FOLDED),
          qparams="shared", int8_input=False, shape=same_shape, float_ref=lambda node, args: args[0],
          int8_ref=_identity_int8),
)
