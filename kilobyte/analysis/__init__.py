"""Analysis stage: read-only figures of a graph — shapes, MACs, params, Flash, activation memory, receptive fields,
dead weights (convolution taps that only ever read padding).

Every function returns values and never changes the graph. Activation memory is counted at int8 (1 B/element)
from tensor shapes, so the same numbers come out of a float graph and of its quantised version.
`profile(graph)` gathers all of them per node; the submodules hold the individual rules.
"""

from .blocks import block_ids, group_blocks
from .dead_weights import DeadWeights, dead_weights
from .macs import node_flash_bytes, node_macs, node_ops, node_params
from .memory import analytic_peak, live_bytes, live_tensors, tensor_lifetimes
from .profile import BlockProfile, LayerProfile, Profile, profile
from .receptive_field import input_region, receptive_field, receptive_fields
from .shapes import activation_bytes

__all__ = [
    "BlockProfile", "DeadWeights", "LayerProfile", "Profile", "activation_bytes", "analytic_peak", "block_ids",
    "dead_weights", "group_blocks", "input_region",
    "live_bytes", "live_tensors", "node_flash_bytes", "node_macs", "node_ops", "node_params", "profile",
    "receptive_field", "receptive_fields", "tensor_lifetimes",
]
