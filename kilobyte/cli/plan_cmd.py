"""CLI stage: `kilobyte plan MODEL` — the memory plan: order, in-place rules, patch stage, arena."""

from __future__ import annotations

import argparse
import re

from ..analysis import block_ids, profile
from ..driver.fit import fit_verdict
from ..errors import KilobyteError
from ..report.plan_plot import plot_plan
from ..schedule import PlanOptions, make_plan, plan_to_dict
from ..units import kb
from .common import add_command, add_device_arg, add_model_args, add_plan_args, get_device, load_model, print_json


def register(sub) -> None:
    """plan memory: best operator order, in-place ops, patch-based stage, arena offsets

    Plan the int8 activation memory: the operator order with the smallest peak, in-place depthwise/add, aliasing
    reshape/concat, an optional MCUNetV2 patch-based first stage, and the arena offsets. The model input is a
    caller-owned buffer (reported as input_bytes, not in the arena). Exit code 2 when arena + scratch do not fit
    --device.
    """
    p = add_command(sub, "plan", register)
    add_model_args(p)
    add_device_arg(p)
    p.add_argument("--patch", default="off", metavar="auto|off|N,P",
                   help="patch-based stage: off (default), auto (minimise peak), or N,P = first N nodes "
                   "(or 'K-blocks') with a PxP grid, e.g. '5-blocks,4x4' or '12,4'")
    add_mac_overhead_arg(p)
    add_plan_args(p)
    p.add_argument("--no-reorder", action="store_true", help="keep the graph's own operator order")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="FILE.png", help="plot live memory per step: per-layer vs planned")
    p.set_defaults(func=run)


def mac_overhead(text: str) -> float | None:
    """--max-mac-overhead: a fraction >= 0, or 'none' for no limit."""
    if text.strip().lower() in ("none", "inf", "unlimited"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a fraction (e.g. 0.2) or 'none'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def add_mac_overhead_arg(p) -> None:
    p.add_argument("--max-mac-overhead", type=mac_overhead, default=0.2, metavar="FRAC|none",
                   help="for --patch auto: the most extra MACs the patch stage may cost, as a fraction of the "
                   "model's MACs (default 0.2 = +20 %%; 'none' = no limit). The plan's notes say when a larger "
                   "overhead would lower the peak further")


def parse_patch(text: str, graph):
    """'off' -> None, 'auto' -> 'auto', 'N,P' / 'K-blocks,PxP' -> (n_nodes, p)."""
    text = text.strip().lower().replace("×", "x")
    if text in ("off", "none", "no"):
        return None
    if text == "auto":
        return "auto"
    m = re.fullmatch(r"(\d+)(-?blocks?)?,(\d+)(?:x(\d+))?", text)
    if not m or (m.group(4) and m.group(4) != m.group(3)):
        raise KilobyteError(f"--patch '{text}': expected auto, off, N,P or K-blocks,PxP (square grid)")
    n, p = int(m.group(1)), int(m.group(3))
    if m.group(2):
        n = nodes_in_first_blocks(graph, n)
    if not 1 <= n <= len(graph.nodes) or p < 1:
        raise KilobyteError(f"--patch '{text}': N must be 1..{len(graph.nodes)} and P ≥ 1")
    return (n, p)


def nodes_in_first_blocks(graph, k: int) -> int:
    """Node count of the first k blocks (block rule of `kilobyte.analysis.blocks`)."""

    ids = block_ids(graph)
    if k > max(ids) + 1:
        raise KilobyteError(f"--patch: the model has only {max(ids) + 1} blocks")
    return sum(1 for b in ids if b < k)


def run(args) -> int:

    model = load_model(args)
    inplace = not args.no_inplace
    opts = PlanOptions(inplace_depthwise=inplace, inplace_add=inplace, alias_reshape=inplace,
                       concat_in_place=inplace, fuse_add=inplace, reorder=not args.no_reorder,
                       patch=parse_patch(args.patch, model.graph), max_mac_overhead=args.max_mac_overhead,
                       conv_columns=args.conv_columns, kernels=args.kernels)
    plan = make_plan(model.graph, opts)
    device = get_device(args)
    flash = _flash_bytes(model.graph)
    verdict = fit_verdict(plan.arena_bytes, flash, device)
    if args.plot:
        plot_plan(model.graph, plan, args.plot, sram_bytes=device.sram_bytes if device else None)
    if args.json:
        d = plan_to_dict(plan)
        d["model"] = args.model
        if device:
            d["device"], d["fits"] = device.name, verdict.fits
        print_json(d)
    else:
        _print_human(plan, verdict)
    return 0 if verdict.fits else 2


def _flash_bytes(graph) -> int:

    return profile(graph).flash_bytes


def _print_human(plan, verdict) -> None:
    p = plan.patch
    print(f"order: {len(plan.order)} ops ({'optimal' if plan.optimal else 'heuristic'}; lower bound "
          f"{kb(plan.lower_bound)})")
    if p:
        print(f"patch stage: first {p.n_nodes} ops, {p.grid}x{p.grid} patches, input patch {p.input_patch}², "
              f"stage output {kb(p.stage_output_bytes)}, working {kb(p.working_bytes)}")
    print(f"peak {kb(plan.peak_bytes)} | arena {kb(plan.arena_bytes)} ({plan.arena_bytes} B) | scratch "
          f"{kb(plan.scratch_bytes)} | input (caller-owned) {kb(plan.input_bytes)}")
    print(f"MACs {plan.macs / 1e6:.2f} M (overhead {plan.mac_overhead * 100:+.1f} %)")
    for note in plan.notes:
        print(f"note: {note}")
    if verdict.text:
        print(verdict.text)
