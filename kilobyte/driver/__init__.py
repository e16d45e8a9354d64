"""Driver stage: the pipeline's steps as functions with typed results, for every entry point above it.

Load a model (`load.py`), compile it (`compile.py`), prove the C right on the host and under QEMU (`verify.py`,
`verify_target.py`), and report whether it fits a device — estimated from the plan or measured on linked firmware
(`fit.py`). `kilobyte.api` is the public facade over these; `cli/` parses arguments and prints what they return;
`nas/` deploys a search's winner with them. The driver imports every stage below it and none above
(`docs/layout.md`): never `prune/`, `nas/`, `report/`, `api` or `cli/`.
"""

from .compile import CheckedBuild, compile_checked, compile_model, quantize
from .fit import FitReport, device_fit, fit_report, suggested
from .load import LoadedModel, calibration_inputs, from_module, load, match_input
from .verify import VerifyReport, verification_line, verify_project
from .verify_target import verify_on_target

__all__ = ["CheckedBuild", "FitReport", "LoadedModel", "VerifyReport", "calibration_inputs", "compile_checked",
           "compile_model", "device_fit", "fit_report", "from_module", "load", "match_input", "quantize", "suggested",
           "verification_line", "verify_on_target", "verify_project"]
