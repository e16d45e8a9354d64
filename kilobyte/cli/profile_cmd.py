"""CLI stage: `kilobyte profile MODEL` — analytic per-layer profile and a fit verdict against a device."""

from __future__ import annotations

from ..analysis import profile
from ..driver.fit import fit_verdict
from ..report.memory_plot import plot_memory_profile
from ..report.tables import format_profile_table
from ..units import kb
from .common import add_command, add_device_arg, add_model_args, get_device, load_model, print_json


def register(sub) -> None:
    """per-layer MACs, params and activation memory; fit verdict against a device

    Analytic profile of the inference graph (BN folded, activations fused): MACs, params, Flash at int8, activation
    bytes, the analytic per-layer peak (inputs + outputs + tensors held for later) and receptive fields. Exit code 2
    when the model does not fit --device.
    """
    p = add_command(sub, "profile", register)
    add_model_args(p)
    add_device_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--plot", metavar="FILE.png", help="draw per-layer / per-block activation memory")
    p.set_defaults(func=run)


def run(args) -> int:

    model = load_model(args)
    prof = profile(model.graph)
    device = get_device(args)
    verdict = fit_verdict(prof.peak_bytes, prof.flash_bytes, device)
    if args.plot:
        plot_memory_profile(prof, args.plot, sram_bytes=device.sram_bytes if device else None,
                            title=f"{args.model}: activation memory per layer (int8)")
    if args.json:
        d = prof.to_dict()
        d["model"] = args.model
        if device:
            d["device"] = device.name
            d["fits"] = verdict.fits
        print_json(d)
    else:
        print(format_profile_table(prof))
        print(f"\nMACs {prof.macs / 1e6:.1f} M | params {prof.params / 1e6:.3f} M | Flash (int8) "
              f"{kb(prof.flash_bytes)} | analytic peak {kb(prof.peak_bytes)}")
        if device:
            print(verdict.text)
    return 0 if verdict.fits else 2

