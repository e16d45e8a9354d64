"""Quantisation stage: calibration and post-training int8 quantisation following TFLite's specification exactly.

TFLite's integer arithmetic (multipliers, rounding, requantisation) is the op registry's (`kilobyte.ops.arith`);
`calibrate` measures activation ranges with the float reference interpreter, and `quantize` turns a float inference
graph into the int8 graph that the numpy reference (`kilobyte.interp.run_int8`), the generated C and TensorFlow Lite
Micro all execute bit for bit.
"""

from .calibrate import calibrate
from .quantize import (
                       activation_qparams,
                       choose_qparams,
                       dequantize_output,
                       quantize,
                       quantize_input,
                       quantize_weights,
                       weight_scales,
)

__all__ = ["activation_qparams", "calibrate", "choose_qparams", "dequantize_output", "quantize", "quantize_input",
           "quantize_weights", "weight_scales"]
