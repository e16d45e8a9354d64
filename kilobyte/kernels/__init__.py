"""Kernels stage: one contract per (op, kernel set) — what the planner and the code generator both know of a kernel.

TFLite Micro registers each kernel with the callbacks its interpreter needs; Kilobyte has no interpreter, so the same
idea is done at generation time. A `KernelContract` holds, for one op:
- which activation input it may overwrite in place, under which plan option, and the scratch it reads then;
- the scratch it reads when not in place, as a function of shapes and the kernel set being built
  (`"portable"`: `runtime/c/`, `"dsp"`: the Cortex-M DSP files in `runtime/c/arm/`), and how many extra im2col
  columns it reads when the planner grants them from free bytes;
- its spatial window (what a patch of its output reads), for the patch-based stage;
- its runtime family (the one C file it lives in) and the C parameter struct it takes.
The planner (`schedule/`) sizes scratch, in-place groups and patch halos from it; codegen emits the calls from it.
Adding an op means one contract in `contracts.py`, its kernel in `runtime/c/` and its tests.
"""

from .contracts import (
    KB_COLS_MIN_OUT_C,
    KERNEL_SETS,
    WIDE_COLUMNS,
    InPlaceRule,
    KernelContract,
    check_kernel_set,
    column_bytes,
    contract_for,
    extra_columns,
    inplace_rule,
    is_local,
    is_sparse,
    layer_scratch,
    padded_channel_bytes,
    sparse_scratch_bytes,
)

__all__ = ["KB_COLS_MIN_OUT_C", "KERNEL_SETS", "WIDE_COLUMNS", "InPlaceRule", "KernelContract",
           "check_kernel_set", "column_bytes", "contract_for", "extra_columns", "inplace_rule", "is_local", "is_sparse",
           "layer_scratch", "padded_channel_bytes", "sparse_scratch_bytes"]
