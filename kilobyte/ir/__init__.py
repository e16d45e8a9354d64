"""IR stage: the one graph representation (NHWC, batch 1, float or int8) shared by every later stage.

The `Op` enum and the attrs dataclasses live in the op registry (`kilobyte.ops.types`, a layer below); they are
re-exported here because every stage builds and reads graphs with them."""

from ..ops import types as _op_types
from ..ops.types import *  # noqa: F403 (types.__all__: the Op enum and every attrs dataclass)
from ..ops.window import conv_out_size
from .builder import GraphBuilder
from .graph import DTYPES, Graph, GraphError, Node, QParams, Tensor
from .shapes import ShapeError, infer_shape

__all__ = [  # noqa: F405
    *_op_types.__all__, "DTYPES", "Graph", "GraphBuilder", "GraphError", "Node", "QParams", "ShapeError", "Tensor",
    "conv_out_size", "infer_shape",
]
