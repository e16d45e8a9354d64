"""Reference stage: numpy interpreters (float; int8 with TFLite arithmetic) used as oracles and for calibration."""

from .float_ref import run_float
from .int8_ref import eval_node_int8, run_int8

__all__ = ["eval_node_int8", "run_float", "run_int8"]
