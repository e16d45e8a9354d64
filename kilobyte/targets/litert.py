"""Targets stage: TensorFlow Lite's own interpreter (the `ai-edge-litert` wheel, `kilobyte[litert]`) as the oracle
for models with an op TensorFlow Lite Micro registers no int8 kernel for (GELU, TILE, RELU_N1_TO_1, EXP, LOG; see
`tflm.TFLM_MISSING_OPS`).

It runs with TFLite's reference kernels (`BUILTIN_REF`, the arithmetic TFLite Micro's kernels share) and keeps every
tensor, so a caller can read internal tensors by name as it does with TFLite Micro's `preserve_all`.
"""

from __future__ import annotations

import numpy as np

from ..errors import KilobyteError


def litert_available() -> bool:
    """Whether TFLite's interpreter is installed."""
    try:
        from ai_edge_litert.interpreter import Interpreter  # noqa: F401
    except ImportError:
        return False
    return True


def run_litert(model_bytes: bytes, x: np.ndarray, names) -> dict[str, np.ndarray]:
    """Run a single-input `.tflite` model on `x` with TFLite's reference kernels; the tensors `names` by name."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        raise KilobyteError("TFLite's interpreter is not installed: pip install 'kilobyte[litert]'") from None
    interp = Interpreter(model_content=bytes(model_bytes), experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                         experimental_preserve_all_tensors=True)
    interp.allocate_tensors()
    (feed,) = interp.get_input_details()
    interp.set_tensor(feed["index"], np.ascontiguousarray(x, feed["dtype"]).reshape(feed["shape"]))
    interp.invoke()
    index = {d["name"]: d["index"] for d in interp.get_tensor_details()}
    missing = [n for n in names if n not in index]
    if missing:
        raise KilobyteError(f"TFLite's interpreter has no tensor {missing[0]!r} in this model")
    return {n: np.array(interp.get_tensor(index[n])) for n in names}
