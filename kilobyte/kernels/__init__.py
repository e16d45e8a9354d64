"""Kernels stage: what the planner and the code generator both ask of a kernel, from its op's contract.

TFLite Micro registers each kernel with the callbacks its interpreter needs; Kilobyte has no interpreter, so the same
idea is done at generation time. Each op's `KernelContract` lives in its `OpDef` (`kilobyte.ops`): which activation
input it may overwrite in place and under which plan option, its spatial window (what a patch of its output reads),
whether it reads im2col columns with the DSP kernel set, its runtime family (the one C file it lives in) and the C
parameter struct it takes. This package answers the planner's questions from it: the scratch a layer reads per
kernel set (`"portable"`: `runtime/c/`, `"dsp"`: the Cortex-M DSP files in `runtime/c/arm/`) and the extra columns
it reads when granted free bytes (`contracts.py`), and the runtime function each node calls (`calls.py`). Adding an
op means one `ops/` module (its contract included), its kernel in `runtime/c/` and its tests (`docs/layout.md`).
"""

from ..ops.conv_kernels import (
    column_bytes,
    depthwise_ring_bytes,
    is_sparse,
    padded_channel_bytes,
    sparse_scratch_bytes,
    wide_column_bytes,
)
from .contracts import (
    DSP_BASED,
    KB_COLS_MIN_OUT_C,
    KERNEL_SETS,
    NO_DSP_CORES,
    WIDE_COLUMNS,
    InPlaceRule,
    KernelContract,
    check_kernel_set,
    contract_for,
    extra_columns,
    extra_ring,
    inplace_rule,
    is_local,
    kernel_sets,
    layer_scratch,
)

__all__ = ["DSP_BASED", "KB_COLS_MIN_OUT_C", "KERNEL_SETS", "NO_DSP_CORES", "WIDE_COLUMNS", "InPlaceRule",
           "KernelContract",
           "check_kernel_set", "column_bytes", "contract_for", "depthwise_ring_bytes", "extra_columns", "extra_ring",
           "inplace_rule", "is_local", "is_sparse", "kernel_sets", "layer_scratch", "padded_channel_bytes",
           "sparse_scratch_bytes", "wide_column_bytes"]
