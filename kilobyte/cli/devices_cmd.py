"""CLI stage: `kilobyte devices` — the device catalogue (built-ins plus a user TOML file)."""

from __future__ import annotations

from dataclasses import asdict

from ..targets.cortexm.toolchain import BOARDS
from ..targets.devices import format_table, list_devices
from .common import add_command, add_devices_file_arg, print_json


def register(sub) -> None:
    """list the known microcontrollers (SRAM, Flash, clock, where firmware runs emulated)

    List built-in devices and those of a TOML file ($KILOBYTE_DEVICES or --devices-file). TOML format: [device.NAME]
    core="cortex-m4" sram_kb=192 flash_kb=512 clock_mhz=120. The last column names the QEMU board that runs firmware
    for the device's core (`verify` / `bench --device`), "-" when none does yet.
    """
    p = add_command(sub, "devices", register)
    add_devices_file_arg(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args) -> int:


    devices = list_devices(args.devices_file)
    if args.json:
        print_json([asdict(d) for d in devices])
    else:
        print(format_table(devices, {core: board.machine for core, board in BOARDS.items()}))
    return 0
