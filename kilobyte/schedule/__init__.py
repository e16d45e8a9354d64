"""Schedule stage: Graph -> Plan — execution order, in-place rules, patch stage, scratch and arena offsets.

Modules in processing order: `inplace` (storage units, and the in-place / fusion decisions for an order), `scratch`
(the scratch each kernel set reads, from `kilobyte.kernels`), `liveness` (lifetimes and live bytes of one order),
`reorder` (the order with the smallest peak), `patch` (the patch-based first stage) and `patch_eval` (its separable
evaluator), `arena` (offsets for lifetimes), `plan` (`make_plan`: the planner's named steps, then verification),
`estimate` (`estimate_resources`: the same steps without verification or C, for search; its Flash from `flash`, the
Flash model of the linked firmware, and `code_size`, its table measured on Cortex-M ELF files by
bench/calibrate_flash.py), `patch_fit` (for search: every patch schedule (n, p) and its figures, and `fit_patch`, the
fewest-MAC schedule whose arena fits a limit, exactly `estimate_resources`' figures), `latency`
(`estimate_instructions`: the Cortex-M instructions of the generated C per layer and patch tile, constants fitted on
measured counts by bench/fit_latency.py) and `execute` (runs an int8 graph inside one simulated arena exactly as
planned).
"""

from .arena import ArenaResult, plan_arena, plan_groups, plan_offsets
from .estimate import Resources, estimate_resources
from .liveness import Liveness, analyze
from .patch_fit import PatchCandidate, PatchFit, fit_patch, patch_candidates
from .plan import PlanError, make_plan, plan_to_dict, verify_plan
from .plan_types import PatchStage, Plan, PlanOptions, TensorPlacement, Tile
from .reorder import ReorderResult, best_order

__all__ = [
    "ArenaResult", "Liveness", "PatchCandidate", "PatchFit", "PatchStage", "Plan", "PlanError", "PlanOptions",
    "ReorderResult", "Resources", "TensorPlacement", "Tile", "analyze", "best_order", "estimate_resources",
    "fit_patch", "make_plan", "patch_candidates", "plan_arena", "plan_groups", "plan_offsets", "plan_to_dict",
    "verify_plan",
]
