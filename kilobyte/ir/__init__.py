"""IR stage: the one graph representation (NHWC, batch 1, float or int8) shared by every later stage."""

from .builder import GraphBuilder
from .graph import DTYPES, Graph, GraphError, Node, QParams, Tensor
from .ops import (
                  ATTRS_TYPE,
                  PARAM_OPS,
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
from .shapes import ShapeError, conv_out_size, infer_shape

__all__ = [
    "ATTRS_TYPE", "DTYPES", "PARAM_OPS", "Activation", "AddAttrs", "BatchNormAttrs", "ConcatAttrs", "ConvAttrs",
    "DepthwiseAttrs", "FullyConnectedAttrs", "GeluAttrs", "Graph", "GraphBuilder", "GraphError", "LeakyReluAttrs",
    "MeanAttrs", "Node", "NoAttrs", "Op", "PadAttrs", "PoolAttrs", "QParams", "ReshapeAttrs", "ResizeAttrs",
    "ShapeError", "SoftmaxAttrs", "StridedSliceAttrs", "Tensor", "TileAttrs", "TransposeAttrs", "TransposeConvAttrs",
    "conv_out_size", "infer_shape",
]
