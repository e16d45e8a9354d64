"""Frontend stage: PyTorch `nn.Module` -> IR, by tracing with torch.fx.

`from_torch` puts the module in eval mode (restoring every submodule's mode afterwards), traces it with
`torch.fx.symbolic_trace`, and walks the fx graph in order. Each call — a leaf module (`nn.Conv2d`), a function
(`F.relu`, `torch.cat`, `operator.add`) or a tensor method (`x.view`) — is mapped to one `Lowering` call, which owns
the NCHW -> NHWC layout rules shared with the ONNX frontend (see `lowering.py`). Calls that involve no activation
(`x.size(0)`, arithmetic on sizes, slicing a parameter) are simply evaluated. Anything else raises a one-line
`UnsupportedOpError` naming the fx node and the PyTorch op.
"""

from __future__ import annotations

import inspect
import operator

import torch
import torch.nn.functional as F
from torch import fx, nn

from ..errors import UnsupportedOpError
from ..ir import Graph
from .lowering import Lowering, LoweringError, Value
from .torch_ops import EITHER_OPERAND, FUNCTIONS, METHODS, SUPPORTED, missing_ir_op, module_handler


def from_torch(module: nn.Module, input_shape: tuple) -> Graph:
    """Trace `module` for one input of NCHW `input_shape` (batch 1) and return its float IR graph (NHWC).

    The graph input is `(1, H, W, C)`; parameters are copied, so later changes to `module` do not affect the graph.
    Each node's `origin` is the fx node it came from (the module path for layers).

    >>> from torch import nn
    >>> print(from_torch(nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), nn.ReLU()), (1, 3, 8, 8)))
    graph Sequential(%input:float32[1x8x8x3])
      %conv_2d_0:float32[1x6x6x4] = CONV_2D(%input:float32[1x8x8x3], %conv_2d_0.weight)  # conv_2d_0 <- 0
      %relu_0:float32[1x6x6x4] = RELU(%conv_2d_0:float32[1x6x6x4])  # relu_0 <- 1
      return relu_0
    """
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        try:
            traced = fx.symbolic_trace(_traceable(module))
        except Exception as e:  # fx raises many types; all mean "this forward cannot be traced"
            raise UnsupportedOpError(f"model {type(module).__name__}: torch.fx cannot trace forward() "
                                     f"({_first_line(e)}); "
                                     "remove data-dependent control flow") from None
        return _Converter(traced, type(module).__name__).run(tuple(input_shape))
    finally:
        for m, training in modes:
            m.training = training


def _traceable(module: nn.Module) -> nn.Module:
    """fx traces *into* the root even when it is a library layer; wrap such a root so it stays one leaf call."""
    return _Root(module) if fx.Tracer().is_leaf_module(module, "") else module


class _Root(nn.Module):
    def __init__(self, layer: nn.Module):
        super().__init__()
        self.name = type(layer).__name__.lower()
        self.add_module(self.name, layer)

    def forward(self, x):
        return getattr(self, self.name)(x)


# -- naming (for messages) -------------------------------------------------------------------------------------------
def _module_kind(mod: nn.Module) -> str:
    cls = type(mod)
    if getattr(nn, cls.__name__, None) is cls:
        return f"torch.nn.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _function_kind(fn) -> str:
    name = getattr(fn, "__name__", None)
    for prefix, namespace in (("torch.nn.functional", F), ("torch", torch), ("operator", operator)):
        if name and getattr(namespace, name, None) is fn:
            return f"{prefix}.{name}"
    return f"{getattr(fn, '__module__', None) or '?'}.{getattr(fn, '__qualname__', repr(fn))}"


def _node_kind(node: fx.Node, root: nn.Module) -> str:
    if node.op == "call_module":
        return _module_kind(root.get_submodule(node.target))
    if node.op == "call_function":
        return _function_kind(node.target)
    return f"Tensor.{node.target}" if node.op == "call_method" else node.op


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _contains_value(obj) -> bool:
    found = []
    fx.node.map_aggregate(obj, lambda a: found.append(isinstance(a, Value)))
    return any(found)


class _Converter:
    """Walks a traced fx graph; `env` maps each fx node to a `Value` (activation), a tensor (constant) or a Python
    object (sizes, flags)."""

    def __init__(self, traced: fx.GraphModule, name: str):
        self.traced = traced
        self.low = Lowering(name)
        self.env: dict[fx.Node, object] = {}

    def run(self, input_shape: tuple) -> Graph:
        outputs = None
        for node in self.traced.graph.nodes:
            origin = node.target if node.op == "call_module" else node.name
            try:
                if node.op == "output":
                    outputs = self._outputs(node)
                else:
                    self.env[node] = self._convert(node, origin, input_shape)
            except LoweringError as e:
                raise UnsupportedOpError(f"node '{origin}' ({_node_kind(node, self.traced)}): {e}") from None
        try:
            return self.low.build(outputs)
        except LoweringError as e:
            raise UnsupportedOpError(f"model {self.low.builder.name}: {e}") from None

    def _outputs(self, node: fx.Node) -> list[Value]:
        flat: list = []
        fx.node.map_aggregate(self._args(node.args[0]), flat.append)
        if not flat or not all(isinstance(v, Value) for v in flat):
            raise LoweringError("the model must return a tensor or a tuple of tensors computed from its input")
        return flat

    def _args(self, obj):
        return fx.node.map_arg(obj, lambda n: self.env[n])

    def _convert(self, node: fx.Node, origin: str, input_shape: tuple):
        if node.op == "placeholder":
            if not any(isinstance(v, Value) for v in self.env.values()):
                return self.low.input(input_shape)
            if node.args:  # an optional argument: use its default
                return node.args[0]
            raise LoweringError("only single-input models are supported")
        if node.op == "get_attr":
            obj = self.traced
            for part in node.target.split("."):
                obj = getattr(obj, part)
            return obj.detach() if isinstance(obj, torch.Tensor) else obj
        args, kwargs = self._args(node.args), self._args(node.kwargs)
        if node.op == "call_module":
            return self._call_module(self.traced.get_submodule(node.target), origin, args, kwargs)
        if not _contains_value((args, kwargs)):
            return self._evaluate(node, args, kwargs)  # sizes, shape arithmetic, slices of parameters
        if node.op == "call_method":
            return self._call_method(node.target, origin, args, kwargs)
        if node.target is getattr and args[1] == "shape":
            return torch.Size(args[0].shape)
        handler = FUNCTIONS.get(node.target) if _hashable(node.target) else None
        return self._call(handler, origin, args, kwargs, node.target)

    def _call_module(self, mod: nn.Module, origin: str, args, kwargs):
        return self._call(module_handler(mod), origin, (mod, *args), kwargs, mod)

    def _call_method(self, name: str, origin: str, args, kwargs):
        x = args[0]
        if name == "size":
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            return torch.Size(x.shape) if dim is None else x.shape[dim]
        if name == "dim":
            return len(x.shape)
        if name == "contiguous":
            return x
        return self._call(METHODS.get(name), origin, args, kwargs, name)

    def _call(self, handler, origin: str, args, kwargs, target):
        if handler is None:
            missing = missing_ir_op(target)
            if missing:
                raise LoweringError(f"needs {missing}, which the IR does not have yet")
            raise LoweringError(f"unsupported op; supported: {SUPPORTED}")
        try:  # bind first, so a wrong call is reported as such and never hides a bug inside a handler
            bound = inspect.signature(handler).bind(self.low, origin, *args, **kwargs)
        except TypeError as e:
            raise LoweringError(f"arguments not understood ({e})") from None
        values = list(bound.arguments.values())[2:]  # after (low, origin): [module,] main input, ...
        main = values[1] if isinstance(values[0], nn.Module) else values[0]
        if not isinstance(main, (Value, list, tuple)) and handler not in EITHER_OPERAND:
            raise LoweringError("the op's main input is a constant, not an activation")
        return handler(self.low, origin, *args, **kwargs)

    @staticmethod
    def _evaluate(node: fx.Node, args, kwargs):
        try:
            if node.op == "call_method":
                return getattr(args[0], node.target)(*args[1:], **kwargs)
            return node.target(*args, **kwargs)
        except Exception as e:  # any failure here is the model's, not ours
            raise LoweringError(f"cannot evaluate constant expression ({_first_line(e)})") from None


def _hashable(obj) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True
