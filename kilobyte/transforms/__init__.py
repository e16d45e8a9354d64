"""Transforms stage: pure passes `Graph -> Graph` that turn a training-shaped graph into an inference graph.

Each pass lives in its own module, named verb_noun, never mutates its input and keeps the names of the nodes that
survive. `INFERENCE_PASSES` is the pipeline, in order; `prepare_for_inference` runs it and verifies the result.
"""

from __future__ import annotations

from ..ir import Graph
from .drop_identity import drop_identity
from .edit import drop_unused_tensors
from .fold_batchnorm import fold_batchnorm
from .fold_pad import fold_pad
from .fuse_activation import fuse_activation
from .lower_batchnorm import lower_batchnorm
from .lower_depthwise import lower_depthwise_multiplier
from .set_weight_format import set_weight_format

# Identities first (they hide conv -> BN and conv -> ReLU pairs), BN before activations (BN sits between the conv
# and its ReLU), pads before activations (order-independent, kept stable for golden tests).
INFERENCE_PASSES = [drop_identity, fold_batchnorm, fold_pad, fuse_activation]


def prepare_for_inference(graph: Graph) -> Graph:
    """Run `INFERENCE_PASSES` in order, drop now-unused tensors and `verify()` the result."""
    for step in INFERENCE_PASSES:
        graph = step(graph)
    return drop_unused_tensors(graph).verify()


__all__ = ["INFERENCE_PASSES", "drop_identity", "drop_unused_tensors", "fold_batchnorm", "fold_pad",
           "fuse_activation", "lower_batchnorm", "lower_depthwise_multiplier", "prepare_for_inference",
           "set_weight_format"]
