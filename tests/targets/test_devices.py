"""Tests for the device catalogue: built-in figures, aliases, user TOML devices and their error messages.

The expected numbers are written out here from the project brief (MCUNet's and the datasheets' figures), not read
back from the catalogue.
"""

from __future__ import annotations

import pytest

from kilobyte.errors import KilobyteError
from kilobyte.targets.devices import Device, DeviceError, format_table, get_device, list_devices

KB = 1024
MB = 1024 * 1024

EXPECTED = {
    # name: (core, SRAM bytes, Flash bytes, clock Hz)
    "STM32F412": ("cortex-m4", 256 * KB, 1 * MB, 100_000_000),
    "STM32F746": ("cortex-m7", 320 * KB, 1 * MB, 216_000_000),
    "STM32F765": ("cortex-m7", 512 * KB, 1 * MB, 216_000_000),
    "STM32H743": ("cortex-m7", 512 * KB, 2 * MB, 480_000_000),
    "STM32F410": ("cortex-m4", 32 * KB, 128 * KB, 100_000_000),
    "NUCLEO-F446RE": ("cortex-m4", 128 * KB, 512 * KB, 180_000_000),
    "nRF52840": ("cortex-m4", 256 * KB, 1 * MB, 64_000_000),
    "RP2040": ("cortex-m0plus", 264 * KB, 2 * MB, 133_000_000),
    "nRF5340": ("cortex-m33", 512 * KB, 1 * MB, 128_000_000),  # issue 31: Cortex-M33 parts
    "STM32U585": ("cortex-m33", 786 * KB, 2 * MB, 160_000_000),
}


@pytest.fixture(autouse=True)
def no_env_file(monkeypatch):
    monkeypatch.delenv("KILOBYTE_DEVICES", raising=False)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_builtin_figures(name):
    device = get_device(name)
    assert device.name == name
    assert (device.core, device.sram_bytes, device.flash_bytes, device.clock_hz) == EXPECTED[name]


def test_corstone_300():
    device = get_device("Corstone-300")
    assert device.core == "cortex-m55"
    assert device.sram_bytes == 512 * KB and device.flash_bytes == 512 * KB
    assert "AN547" in device.notes  # the notes say where the figures come from


def test_list_has_every_builtin_once():
    names = [d.name for d in list_devices()]
    assert set(EXPECTED) | {"Corstone-300"} == set(names)
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("f412", "STM32F412"), ("stm32f412", "STM32F412"), ("STM32F412", "STM32F412"), ("f746", "STM32F746"),
        ("F765", "STM32F765"), ("h743", "STM32H743"), ("stm32_h743", "STM32H743"), ("nrf52840", "nRF52840"),
        ("rp2040", "RP2040"), ("corstone-300", "Corstone-300"), ("Corstone300", "Corstone-300"),
        ("m55", "Corstone-300"), ("nucleo-f446re", "NUCLEO-F446RE"), ("f446re", "NUCLEO-F446RE"),
    ],
)
def test_aliases(alias, name):
    assert get_device(alias).name == name


def test_unknown_device():
    with pytest.raises(ValueError) as info:
        get_device("esp32")
    message = str(info.value)
    assert "esp32" in message and "STM32F746" in message and "RP2040" in message and "\n" not in message
    assert isinstance(info.value, KilobyteError)


def write(tmp_path, text, name="boards.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_user_device_from_explicit_file(tmp_path):
    path = write(tmp_path, '[device.MYBOARD]\ncore = "cortex-m4"\nsram_kb = 192\nflash_kb = 512\nclock_mhz = 120\n')
    device = get_device("myboard", path)
    assert device == Device("MYBOARD", "cortex-m4", 192 * KB, 512 * KB, 120_000_000)
    assert [d.name for d in list_devices(path)][-1] == "MYBOARD"
    assert get_device("f746", path).name == "STM32F746"  # built-ins still there


def test_user_device_in_bytes_from_env(tmp_path, monkeypatch):
    path = write(tmp_path, '[device.tiny]\ncore = "Cortex-M0plus"\nsram_bytes = 16384\nflash_bytes = 65536\n'
                           'clock_hz = 48000000\nnotes = "SAMD21-ish"\n')
    monkeypatch.setenv("KILOBYTE_DEVICES", str(path))
    device = get_device("TINY")
    assert (device.core, device.sram_bytes, device.flash_bytes, device.clock_hz) == (
        "cortex-m0plus", 16 * KB, 64 * KB, 48_000_000)
    assert device.notes == "SAMD21-ish"


def test_user_device_overrides_builtin(tmp_path):
    path = write(tmp_path, '[device.STM32F746]\ncore = "cortex-m7"\nsram_kb = 256\nflash_kb = 1024\nclock_mhz = 216\n')
    assert get_device("f746", path).sram_bytes == 256 * KB
    assert [d.name for d in list_devices(path)].count("STM32F746") == 1


def test_malformed_toml_names_file(tmp_path):
    path = write(tmp_path, "[device.X\ncore = \n", name="broken.toml")
    with pytest.raises(ValueError, match="broken.toml"):
        list_devices(path)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('core = "cortex-m4"\nflash_kb = 512\nclock_mhz = 120\n', "sram_kb"),
        ('sram_kb = 1\nflash_kb = 512\nclock_mhz = 120\n', "core"),
        ('core = "cortex-m4"\nsram_kb = 1\nflash_kb = 512\n', "clock_mhz"),
        ('core = "cortex-m4"\nsram_kb = 1\nsram_bytes = 1024\nflash_kb = 512\nclock_mhz = 1\n', "sram_kb"),
        ('core = "cortex-m4"\nsram_kb = -4\nflash_kb = 512\nclock_mhz = 120\n', "sram_kb"),
        ('core = "cortex-m4"\nsram_kb = 1\nflash_kb = "big"\nclock_mhz = 120\n', "flash_kb"),
        ('core = "cortex-m4"\nsram_kib = 1\nflash_kb = 512\nclock_mhz = 120\n', "sram_kib"),
    ],
)
def test_bad_fields_name_file_device_and_field(tmp_path, body, field):
    path = write(tmp_path, "[device.BAD]\n" + body, name="mine.toml")
    with pytest.raises(DeviceError) as info:
        get_device("BAD", path)
    message = str(info.value)
    assert "mine.toml" in message and "BAD" in message and field in message and "\n" not in message


def test_missing_file_and_empty_file(tmp_path, monkeypatch):
    monkeypatch.setenv("KILOBYTE_DEVICES", str(tmp_path / "absent.toml"))
    with pytest.raises(DeviceError, match="absent.toml"):
        list_devices()
    with pytest.raises(DeviceError, match="empty.toml"):
        list_devices(write(tmp_path, "", name="empty.toml"))


def test_format_table_aligned():
    lines = format_table(list_devices()).splitlines()
    assert lines[0].split() == ["name", "core", "SRAM", "kB", "Flash", "kB", "clock", "MHz"]
    assert len(lines) == 1 + len(list_devices())
    f746 = next(line for line in lines if line.startswith("STM32F746"))
    assert f746.split() == ["STM32F746", "cortex-m7", "320", "1024", "216"]
    # numbers are right-aligned under their headers: every row ends at the same column
    assert len({len(line) for line in lines}) == 1
