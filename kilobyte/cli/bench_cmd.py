"""CLI stage: `kilobyte bench DIR --target cortex-m7` — measured Flash, SRAM, stack and instructions of a build.

Also home of the `--target/--kernels/--device` options that `verify` and `run` share with `bench`.
"""

from __future__ import annotations

import sys

from ..errors import DoesNotFitError
from ..targets.cortexm.toolchain import BOARDS
from ..targets.cortexm.verify import bench_on_target, resolve_target
from ..units import kb
from .common import KERNEL_SETS, add_command, add_devices_file_arg, add_json_arg, add_project_dir_arg, print_json

TARGET_HELP = f"Cortex-M core to build for and run under QEMU: {', '.join(BOARDS)}"


def add_target_args(p, required: bool = False) -> None:
    """--target (validated by us, so a bad name is a one-line error), --kernels, --device, --devices-file."""
    p.add_argument("--target", "-t", default=None, metavar="CORE",
                   help=TARGET_HELP + ("" if required else "; default: run on the host")
                   + " (with --device, the device's core when omitted)")
    p.add_argument("--kernels", default=None, choices=KERNEL_SETS,
                   help="runtime kernels: portable C, or the Cortex-M DSP ones (default: the set the model was "
                   "compiled for, `kilobyte compile --kernels`)")
    p.add_argument("--device", "-d", default=None,
                   help="hold the firmware to this device's Flash and SRAM (see `kilobyte devices`)")
    add_devices_file_arg(p)


def target_device(args):
    """(target core or None, Device or None) from the parsed --target / --device options."""

    if args.target is None and args.device is None:
        return None, None
    return resolve_target(args.target, args.device, args.devices_file)


def does_not_fit(err: DoesNotFitError) -> int:
    """The one-line error of a build over the device's budget; exit code 2 ("does not fit")."""
    print(f"kilobyte: error: {err}", file=sys.stderr)
    return 2


def register(sub) -> None:
    """measure a compiled model on a Cortex-M build: Flash, SRAM, stack, instructions, modelled cycles

    Build the firmware of the project in DIR for --target, run it once under QEMU on a random int8 input (measured stack
    high-water mark), read Flash and SRAM from the ELF (weights / kernels / arena / stack split) and count executed
    instructions with unicorn, per layer, with the cycles they model (Arm's per-instruction timings at zero wait
    states plus a refill per taken branch; Cortex-M7 dual issue approximated: see kilobyte/targets/cortexm/cycles.py).
    On cortex-m55, which unicorn cannot run, Kilobyte's QEMU plugin counts the instructions, per layer; cycles are
    not modelled there yet (null). Exit code 2 if the build does not fit --device.
    """
    p = add_command(sub, "bench", register)
    add_project_dir_arg(p)
    add_target_args(p, required=True)
    p.add_argument("--seed", type=int, default=0, help="seed of the random input (default 0)")
    add_json_arg(p, "the numbers")
    p.set_defaults(func=run)


def run(args) -> int:

    target, device = resolve_target(args.target, args.device, args.devices_file)
    try:
        res = bench_on_target(args.dir, target, device=device, kernels=args.kernels, seed=args.seed)
    except DoesNotFitError as e:
        return does_not_fit(e)
    if args.json:
        print_json(res)
    else:
        print(format_bench(res))
    return 0


def format_bench(r: dict) -> str:
    """Human table of `bench_on_target`'s numbers."""
    where = f"{r['target']} ({r['machine']}), {r['kernels']} kernels" + (f", {r['device']}" if r["device"] else "")
    f, s = r["flash"], r["sram"]
    lines = [f"bench {r['model']} on {where}",
             f"  Flash         {kb(r['flash_bytes'])} of {kb(f['limit'])} (weights {kb(f['weights'])}, kernels "
             f"{kb(f['kernels'])}, other {kb(f['other'])})  measured",
             f"  SRAM          {kb(r['sram_bytes'])} of {kb(s['limit'])} (arena {kb(s['arena'])}, stack reserve "
             f"{kb(s['stack_reserve'])}, other {kb(s['other'])})  measured",
             f"  stack used    {r['stack_bytes']} B (high-water mark under QEMU)",
             f"  planned       arena {kb(r['planned']['arena_bytes'])}, peak {kb(r['planned']['peak_bytes'])}",
             f"  MACs          {r['macs']:,}"]
    lines.append(f"  instructions  {r['instructions']:,} ({r['instructions_per_mac']:.2f} per MAC)")
    layers, cycles = r["per_layer_instructions"], r["per_layer_cycles"]
    width = max((len(name) for name in layers), default=0)
    if r["cycles"] is None:  # a core without a cycle model (cortex-m33): instructions only
        lines.append(f"  cycles        n/a (no cycle model for {r['target']}; instructions are exact)")
        lines.append("  per layer (instructions, share of the instructions):")
        for name, n in layers.items():
            lines.append(f"    {name:<{width}}  {n:>12,}  {100 * n / r['instructions']:5.1f} %")
        return "\n".join(lines)
    model = "beat model" if r["target"] == "cortex-m55" else "modelled"
    lines.append(f"  cycles        {r['cycles']:,} ({r['cycles_per_mac']:.2f} per MAC, {model})")
    lines.append("  per layer (instructions, modelled cycles, share of the cycles):")
    for name, n in layers.items():
        lines.append(f"    {name:<{width}}  {n:>12,}  {cycles[name]:>12,}  {100 * cycles[name] / r['cycles']:5.1f} %")
    return "\n".join(lines)
