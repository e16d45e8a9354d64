"""Targets stage: the device catalogue — SRAM, Flash and clock of the microcontrollers Kilobyte plans for.

Built-in boards (`devices.toml`, in the user file's format) are the ones the papers benchmark on (MCUNet / MCUNetV2:
STM32F412, F746, F765, H743; DTMM: Corstone-300 and NUCLEO-F446RE) plus a few common hobby boards. Users add their
own in a TOML file, found from an explicit path or, when none is given, from the `KILOBYTE_DEVICES` environment
variable:

    [device.MYBOARD]
    core = "cortex-m4"
    sram_kb = 192          # or sram_bytes = 196608
    flash_kb = 512         # or flash_bytes = 524288
    clock_mhz = 120        # or clock_hz = 120000000
    notes = "optional"

A user device with the same name as a built-in replaces it. Names are matched case-insensitively, ignoring '-', '_'
and spaces, and common short aliases (`f746`, `h743`, `m55`, ...) resolve to the built-ins. KB = 1024 bytes.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kilobyte.errors import KilobyteError
from kilobyte.units import KB

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser ships as the `tomli` package (a core dependency there)
    import tomli as tomllib

MHZ = 1_000_000
ENV_VAR = "KILOBYTE_DEVICES"
BUILTIN_FILE = Path(__file__).with_name("devices.toml")


class DeviceError(KilobyteError):
    """Unknown device name or a bad device file; the message names the device or the file and field."""


@dataclass(frozen=True)
class Device:
    """One microcontroller: `core` is the lower-case Arm core name ("cortex-m4", "cortex-m0plus", ...)."""

    name: str
    core: str
    sram_bytes: int
    flash_bytes: int
    clock_hz: int
    notes: str = ""


# Short names people type, normalised (see `_key`), mapped to built-in names.
ALIASES: dict[str, str] = {
    "f412": "STM32F412",
    "f746": "STM32F746",
    "f765": "STM32F765",
    "h743": "STM32H743",
    "f410": "STM32F410",
    "f446": "NUCLEO-F446RE",
    "f446re": "NUCLEO-F446RE",
    "stm32f446re": "NUCLEO-F446RE",
    "nrf52": "nRF52840",
    "nrf53": "nRF5340",
    "u585": "STM32U585",
    "pico": "RP2040",
    "corstone": "Corstone-300",
    "m55": "Corstone-300",
    "an547": "Corstone-300",
    "mps3an547": "Corstone-300",
}


@functools.cache
def builtin_devices() -> tuple[Device, ...]:
    """The built-in catalogue: `devices.toml` beside this module, in the user file's format and read by its parser."""
    return tuple(load_device_file(BUILTIN_FILE))


def _key(name: str) -> str:
    """Case- and punctuation-insensitive lookup key: 'Corstone-300' -> 'corstone300'."""
    return re.sub(r"[\s_\-]", "", name).lower()


def list_devices(extra_file: str | os.PathLike[str] | None = None) -> list[Device]:
    """Built-in devices followed by those of the user file (explicit path, else $KILOBYTE_DEVICES).

    >>> [d.name for d in list_devices()][:3]
    ['STM32F412', 'STM32F746', 'STM32F765']
    """
    devices = {_key(d.name): d for d in builtin_devices()}
    path = _extra_path(extra_file)
    if path is not None:
        for device in load_device_file(path):
            devices[_key(device.name)] = device  # a user device overrides a built-in of the same name
    return list(devices.values())


def get_device(name: str, extra_file: str | os.PathLike[str] | None = None) -> Device:
    """Look a device up by name or alias, case-insensitively.

    >>> get_device("f746").sram_bytes // 1024
    320
    """
    devices = {_key(d.name): d for d in list_devices(extra_file)}
    key = _key(name)
    if key in devices:
        return devices[key]
    if key in ALIASES:
        return devices[_key(ALIASES[key])]
    raise DeviceError(f"unknown device {name!r}; valid names: {', '.join(d.name for d in devices.values())} "
                      f"(or define it in a TOML file via --devices-file / ${ENV_VAR})")


def _extra_path(extra_file: str | os.PathLike[str] | None) -> Path | None:
    """The explicit path if given, else $KILOBYTE_DEVICES if set and non-empty, else None."""
    if extra_file is not None:
        return Path(extra_file)
    from_env = os.environ.get(ENV_VAR, "").strip()
    return Path(from_env) if from_env else None


def load_device_file(path: str | os.PathLike[str]) -> list[Device]:
    """Parse a `[device.NAME]` TOML file; any problem is a DeviceError naming the file (and device and field)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DeviceError(f"{path}: device file not found (given as --devices-file or ${ENV_VAR})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DeviceError(f"{path}: cannot read device file: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise DeviceError(f"{path}: not valid TOML: {exc}") from None
    unexpected = sorted(set(data) - {"device"})
    if unexpected:
        raise DeviceError(f"{path}: unknown top-level key {unexpected[0]!r}; devices go in [device.NAME] tables")
    if not isinstance(data.get("device"), dict) or not data["device"]:
        raise DeviceError(f"{path}: no [device.NAME] tables found")
    return [_parse_device(path, name, table) for name, table in data["device"].items()]


_FIELDS = {"core", "notes", "sram_kb", "sram_bytes", "flash_kb", "flash_bytes", "clock_mhz", "clock_hz"}


def _parse_device(path: Path, name: str, table: object) -> Device:
    """One `[device.NAME]` table -> Device, with sizes in bytes and clock in Hz."""
    where = f"{path}: [device.{name}]"
    if not isinstance(table, dict):
        raise DeviceError(f"{where}: must be a table of fields, got {type(table).__name__}")
    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        raise DeviceError(f"{where}: unknown field {unknown[0]!r}; allowed: {', '.join(sorted(_FIELDS))}")
    core = table.get("core")
    if not isinstance(core, str) or not core.strip():
        raise DeviceError(f"{where}: missing field 'core' (a string such as \"cortex-m4\")")
    notes = table.get("notes", "")
    if not isinstance(notes, str):
        raise DeviceError(f"{where}: field 'notes' must be a string")
    return Device(
        name=name,
        core=core.strip().lower(),
        sram_bytes=_scaled(where, table, "sram", "kb", KB, "bytes"),
        flash_bytes=_scaled(where, table, "flash", "kb", KB, "bytes"),
        clock_hz=_scaled(where, table, "clock", "mhz", MHZ, "hz"),
        notes=notes,
    )


def _scaled(where: str, table: dict, stem: str, unit: str, factor: int, base_unit: str) -> int:
    """Read exactly one of `<stem>_<unit>` (scaled by `factor`) or `<stem>_<base_unit>`, as a positive int."""
    scaled_key, base_key = f"{stem}_{unit}", f"{stem}_{base_unit}"
    present = [k for k in (scaled_key, base_key) if k in table]
    if len(present) != 1:
        problem = "missing field" if not present else "give only one of the fields"
        raise DeviceError(f"{where}: {problem} '{scaled_key}' (or '{base_key}')")
    key = present[0]
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise DeviceError(f"{where}: field '{key}' must be a positive number, got {value!r}")
    amount = value * factor if key == scaled_key else value
    if amount != int(amount):
        raise DeviceError(f"{where}: field '{key}' = {value!r} is not a whole number of {base_unit}")
    return int(amount)


def _number(value: float) -> str:
    """Whole numbers without decimals, others with one: 256 -> '256', 0.5 -> '0.5'."""
    return f"{value:.0f}" if value == int(value) else f"{value:.1f}"


def format_table(devices: list[Device], boards: dict[str, str] | None = None) -> str:
    """Aligned text table (name, core, SRAM kB, Flash kB, clock MHz), one device per line; with `boards` (core ->
    QEMU machine) a last column saying where firmware for the device runs emulated ("-": nowhere yet).

    >>> print(format_table([get_device("f412"), get_device("rp2040")]))
    name       core           SRAM kB  Flash kB  clock MHz
    STM32F412  cortex-m4          256      1024        100
    RP2040     cortex-m0plus      264      2048        133
    >>> print(format_table([get_device("f412")], {"cortex-m4": "mps2-an386"}))
    name       core       SRAM kB  Flash kB  clock MHz  emulated on
    STM32F412  cortex-m4      256      1024        100  mps2-an386
    """
    header = ("name", "core", "SRAM kB", "Flash kB", "clock MHz")
    rows = [(d.name, d.core, _number(d.sram_bytes / KB), _number(d.flash_bytes / KB), _number(d.clock_hz / MHZ))
            for d in devices]
    if boards is not None:
        header += ("emulated on",)
        rows = [(*row, boards.get(d.core, "-")) for row, d in zip(rows, devices, strict=True)]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        text = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]  # text columns left, numbers right
        text += [cell.rjust(width) for cell, width in zip(row[2:5], widths[2:5], strict=True)]
        text += [cell.ljust(width) for cell, width in zip(row[5:], widths[5:], strict=True)]
        lines.append("  ".join(text).rstrip())
    return "\n".join(lines)
