"""Targets stage (Cortex-M): Flash and SRAM of a built firmware, read from its ELF with pyelftools.

Flash = every allocated section with contents (.text, .ARM.exidx, .rodata and the initial values of .data);
SRAM = every allocated section in the RAM region (.stack reserve, .data, .bss) — the figures `arm-none-eabi-size -A`
gives. Both are split by symbol name, following the code generator's naming contract:

    flash: weights  = objects kb_w_*, kb_b_*, kb_mult_*, kb_shift_*   (const arrays in .rodata)
           kernels  = functions kb_* (runtime kernels, the generated kb_layer_* functions and kb_invoke), the
                      static helpers of the runtime files and model.c, and the runtime files' own static constant
                      tables (by the ELF's STT_FILE entries)
           other    = the rest (startup, semihosting, libc, parameter structs, strings)
    sram:  arena    = the object <prefix>_arena;  stack = the .stack reserve;  other = firmware buffers, libc state
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kilobyte.errors import KilobyteError

_WEIGHTS = re.compile(r"kb_(w|b|mult|shift)_")


@dataclass(frozen=True)
class ElfSection:
    """One section header of the ELF, as the size split needs it."""

    name: str
    address: int
    size: int
    has_contents: bool  # False for NOBITS (.bss, .stack): occupies RAM but not Flash


@dataclass(frozen=True)
class ElfSymbol:
    """One symbol of the ELF's symbol table (functions and data objects only)."""

    name: str
    address: int  # Thumb bit cleared for functions
    size: int
    kind: str  # "func" | "object"
    source: str = ""  # for a local (static) symbol, the source file it came from (the preceding STT_FILE entry)


CLONE_SUFFIX = re.compile(r"\.(constprop|isra|part|cold|lto_priv)\b.*$")  # GCC's clones: kb_layer_1_x.constprop.0


def _elffile():
    try:
        from elftools.elf.elffile import ELFFile
    except ImportError:
        raise KilobyteError("pyelftools is not installed: pip install kilobyte[arm]") from None
    return ELFFile


def elf_sections(elf: str | Path) -> list[ElfSection]:
    """The allocated (SHF_ALLOC) sections of an ELF file, in file order."""
    elffile = _elffile()
    with open(elf, "rb") as f:
        sections = []
        for sec in elffile(f).iter_sections():
            if sec["sh_flags"] & 0x2 and sec["sh_size"] > 0:  # SHF_ALLOC
                sections.append(ElfSection(sec.name, sec["sh_addr"], sec["sh_size"], sec["sh_type"] != "SHT_NOBITS"))
    return sections


def elf_bytes(elf: str | Path, address: int, size: int) -> bytes:
    """`size` bytes of the ELF's contents at `address` (inside one allocated section with contents, e.g. code);
    a one-line error when no section holds them."""
    elffile = _elffile()
    with open(elf, "rb") as f:
        for sec in elffile(f).iter_sections():
            start = sec["sh_addr"]
            if (sec["sh_flags"] & 0x2 and sec["sh_type"] != "SHT_NOBITS" and start <= address
                    and address + size <= start + sec["sh_size"]):
                return sec.data()[address - start:address - start + size]
    raise KilobyteError(f"{elf}: no section holds {size} bytes at 0x{address:08x}")


def elf_contents(elf: str | Path) -> list[tuple[int, bytes]]:
    """(address, contents) of every allocated section with contents (code, read-only data, .data's image)."""
    elffile = _elffile()
    with open(elf, "rb") as f:
        return [(sec["sh_addr"], sec.data()) for sec in elffile(f).iter_sections()
                if sec["sh_flags"] & 0x2 and sec["sh_type"] != "SHT_NOBITS"]


def elf_symbols(elf: str | Path) -> list[ElfSymbol]:
    """Function and object symbols (global and local) of an ELF file with a non-zero size."""
    kinds = {"STT_FUNC": "func", "STT_OBJECT": "object"}
    symbols, source = [], ""
    for sym in _symtab(elf):  # local symbols follow the STT_FILE entry of their source file
        if sym["st_info"]["type"] == "STT_FILE":
            source = sym.name
        kind = kinds.get(sym["st_info"]["type"])
        if kind and sym["st_size"] > 0:
            address = sym["st_value"] & ~1 if kind == "func" else sym["st_value"]
            local = sym["st_info"]["bind"] == "STB_LOCAL"
            symbols.append(ElfSymbol(sym.name, address, sym["st_size"], kind, source if local else ""))
    return symbols


def elf_symbol_values(elf: str | Path) -> dict[str, int]:
    """Every named symbol of an ELF file (linker-script symbols such as __stack_top included) -> its value."""
    return {sym.name: sym["st_value"] for sym in _symtab(elf) if sym.name}


def _symtab(elf: str | Path):
    """The symbols of an ELF file's .symtab, read while the file is open; a one-line error when it has none."""
    elffile = _elffile()
    with open(elf, "rb") as f:
        symtab = elffile(f).get_section_by_name(".symtab")
        if symtab is None:
            raise KilobyteError(f"{elf}: no symbol table (was it stripped?)")
        yield from symtab.iter_symbols()


def _unique_size(symbols: list[ElfSymbol]) -> int:
    """Total size of symbols, counting aliases (same address and size) once."""
    return sum(size for _, size in {(s.address, s.size) for s in symbols})


def _is_kernel_code(sym: ElfSymbol, prefix: str = "kb") -> bool:
    """A kb_* function, the library's <prefix>_invoke*, or a static helper compiled from a runtime file (kb_*.c) or
    the generated model.c (<prefix>_model.c)."""
    model_c = "model.c" if prefix == "kb" else f"{prefix}_model.c"
    return sym.name.startswith(("kb_", f"{prefix}_invoke")) or sym.source.startswith("kb_") or sym.source == model_c


def measure(build) -> dict[str, Any]:
    """Flash and SRAM of a `FirmwareBuild` in bytes, split as the module docstring says."""
    sections = elf_sections(build.elf)
    symbols = elf_symbols(build.elf)
    ram_lo, flash_lo = build.board.ram_origin, build.board.flash_origin

    def in_flash(address: int) -> bool:
        return flash_lo <= address < flash_lo + build.board.flash_bytes

    flash = sum(s.size for s in sections if s.has_contents)
    sram = sum(s.size for s in sections if ram_lo <= s.address < ram_lo + build.board.ram_bytes)
    weights = _unique_size([s for s in symbols if s.kind == "object" and _WEIGHTS.match(s.name)])
    kernels = _unique_size([s for s in symbols if (s.kind == "func" and _is_kernel_code(s, build.prefix)) or
                            (s.kind == "object" and s.source.startswith("kb_") and in_flash(s.address))])
    arena = _unique_size([s for s in symbols if s.kind == "object" and s.name == f"{build.prefix}_arena"])
    stack = sum(s.size for s in sections if s.name == ".stack")
    return {
        "target": build.target,
        "device": build.device.name if build.device else None,
        "kernels": build.kernels,
        "flash_bytes": flash,
        "flash_weights_bytes": weights,
        "flash_kernel_bytes": kernels,
        "flash_other_bytes": flash - weights - kernels,
        "sram_bytes": sram,
        "sram_arena_bytes": arena,
        "sram_stack_bytes": stack,
        "sram_other_bytes": sram - arena - stack,
        "flash_limit_bytes": build.flash_limit_bytes,
        "sram_limit_bytes": build.ram_limit_bytes,
        "sections": {s.name: s.size for s in sections},
    }
