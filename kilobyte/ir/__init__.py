"""IR stage: the one graph representation (NHWC, batch 1, float or int8) shared by every later stage.

The `Op` enum and the attrs dataclasses live in the op registry (`kilobyte.ops.types`, a layer below); they are
re-exported here because every stage builds and reads graphs with them."""

from ..ops.types import (
                  Activation,
                  AddAttrs,
                  BatchNormAttrs,
                  ConcatAttrs,
                  ConvAttrs,
                  DepthwiseAttrs,
                  FullyConnectedAttrs,
                  GeluAttrs,
                  LeakyReluAttrs,
                  MeanAttrs,
                  NoAttrs,
                  Op,
                  PadAttrs,
                  PoolAttrs,
                  ReshapeAttrs,
                  ResizeAttrs,
                  SoftmaxAttrs,
                  StridedSliceAttrs,
                  TileAttrs,
                  TransposeAttrs,
                  TransposeConvAttrs,
)
from .builder import GraphBuilder
from .graph import DTYPES, Graph, GraphError, Node, QParams, Tensor
from .shapes import ShapeError, conv_out_size, infer_shape

__all__ = [
    "DTYPES", "Activation", "AddAttrs", "BatchNormAttrs", "ConcatAttrs", "ConvAttrs",
    "DepthwiseAttrs", "FullyConnectedAttrs", "GeluAttrs", "Graph", "GraphBuilder", "GraphError", "LeakyReluAttrs",
    "MeanAttrs", "Node", "NoAttrs", "Op", "PadAttrs", "PoolAttrs", "QParams", "ReshapeAttrs", "ResizeAttrs",
    "ShapeError", "SoftmaxAttrs", "StridedSliceAttrs", "Tensor", "TileAttrs", "TransposeAttrs", "TransposeConvAttrs",
    "conv_out_size", "infer_shape",
]
