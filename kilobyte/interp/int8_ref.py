"""Reference stage: a numpy int8 interpreter with TFLite's integer arithmetic — bit-exact with TensorFlow Lite Micro.

`run_int8` runs a whole quantised graph; `eval_node_int8` runs one node from its argument arrays (a memory-plan
executor calls it node by node). Each op's int8 reference is its `OpDef.int8_ref` (`kilobyte.ops`: the binary ops'
broadcasting ADD / SUB / MUL / MAXIMUM / MINIMUM, the lookup-table activations, PRELU, the softmaxes, MEAN, the
resizes, the convolutions, the transposed convolution, data movement, the model-edge QUANTIZE, ...);
`kilobyte.ops.node_params` (`requant_params`, ...) derives their parameters from a graph exactly as TFLite Micro's
Prepare functions do.
"""

from __future__ import annotations

import numpy as np

from ..errors import KilobyteError, UnsupportedOpError
from ..ir import Graph, Node
from ..ops import opdef


# -- graph-level execution ---------------------------------------------------------------------------------------------
def run_int8(graph: Graph, inputs, *, keep_all: bool = False) -> dict[str, np.ndarray]:
    """Execute a quantised `graph`; return its outputs (or every non-constant tensor with `keep_all`).

    `inputs` is one int8 array (single-input graphs) or a dict name -> int8 array in the graph's shapes; a
    leading axis of N instead of the graph's batch of 1 runs N samples at once (results equal N single runs).
    Quantise float data first with `kilobyte.quant.quantize_input`.
    """
    if not isinstance(inputs, dict):
        inputs = {graph.inputs[0]: inputs}
    env: dict[str, np.ndarray] = {name: _check_input(graph, name, inputs.get(name)) for name in graph.inputs}
    for node in graph.nodes:
        args = [env[t] if t in env else graph.tensors[t].data for t in node.inputs]
        env[node.outputs[0]] = eval_node_int8(graph, node, args)
    names = list(env) if keep_all else list(graph.outputs)
    return {k: env[k] for k in names}


def _check_input(graph: Graph, name: str, x) -> np.ndarray:
    t = graph.tensors[name]
    if x is None:
        raise KilobyteError(f"graph input '{name}' was not given")
    x = np.asarray(x)
    if x.dtype != np.dtype(t.dtype):
        hint = " (quantise float data with kilobyte.quant.quantize_input)" if t.dtype == "int8" else ""
        raise KilobyteError(f"graph input '{name}' is {t.dtype}, got {x.dtype}{hint}")
    if x.shape != t.shape and not (t.shape[0] == 1 and x.shape[1:] == t.shape[1:]):
        raise KilobyteError(f"graph input '{name}': shape {x.shape}, graph expects {t.shape}")
    return x


def eval_node_int8(graph: Graph, node: Node, args: list[np.ndarray]) -> np.ndarray:
    """Run one node of a quantised graph on its argument arrays (activations, then weight / bias data): the op's
    own int8 reference (`OpDef.int8_ref`)."""
    op, d = node.op, opdef(node.op)
    if d.int8_input and args[0].dtype != np.int8:
        raise KilobyteError(f"node '{node.name}' ({op.value}): expects an int8 input, got {args[0].dtype}")
    if d.int8_ref is not None:
        return d.int8_ref(graph, node, args)
    raise UnsupportedOpError(f"node '{node.name}': no int8 kernel for {op.value}")
