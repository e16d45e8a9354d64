"""Reference stage: numpy interpreters (float; int8 with TFLite arithmetic) used as oracles and for calibration."""

from .float_ref import run_float

__all__ = ["run_float"]
