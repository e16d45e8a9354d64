"""Prune stage: DTMM's filterlet pruning, its baselines (unstructured weights stored as CSR; structured channels
really removed), and DTMM's pruning-strategy scheduler, on a trained PyTorch classifier before it becomes int8 IR.

In pipeline order: the prunable convolutions and their geometry (`layers.py`), Taylor importance per filterlet,
weight or channel (`importance.py`), the lowest-scored units masked through retraining (`masks.py`), the channels
that can really go and the smaller module (`channels.py`), the Flash bytes the scheduler counts (`storage.py`), DTMM's
latency model and its fit to measured samples (`latency.py`), the simulated-annealing scheduler (`scheduler.py`),
and `prune_model`, which runs them and quantises the result (`pipeline.py`).
"""

from .latency import (
                      PROVISIONAL_MODEL,
                      LatencyFit,
                      LatencyModel,
                      LatencySample,
                      fit_kernel_latency,
                      fit_latency,
                      shipped_model,
)
from .layers import ConvLayer, conv_layers
from .pipeline import METHODS, LayerReport, PruneResult, prune_model
from .scheduler import Constraints, Strategy, schedule
from .storage import LayerBytes, dense_bytes, fwcs_bytes

__all__ = ["METHODS", "PROVISIONAL_MODEL", "Constraints", "ConvLayer", "LatencyFit", "LatencyModel", "LatencySample",
           "LayerBytes", "LayerReport", "PruneResult", "Strategy", "conv_layers", "dense_bytes",
           "fit_kernel_latency", "fit_latency", "fwcs_bytes", "prune_model", "schedule", "shipped_model"]
