"""Targets stage (Cortex-M): where a linked firmware's Flash goes, part by part — what the Flash estimate's table
(`kilobyte/schedule/code_size.py`, written by `bench/calibrate_flash.py`) is measured from.

Three parts, each read from ELF symbols (`measure.elf_symbols`), never from a map file or a guess:
- the harness: a probe firmware whose `kb_invoke` does nothing; its whole Flash is the firmware around the model
  (vector table, startup, semihosting, `main`, newlib's `memcpy` / `memset` / `strlen`, their strings);
- the runtime: a probe whose `kb_invoke` only takes the addresses of some runtime functions, so the linker keeps
  exactly their closure (`-Wl,--gc-sections`: the functions and static tables they reach, across files and into
  the C library). `closures` builds one probe per function; a set of functions links the union of their closures;
- the generated code of a real model: each `kb_layer_<k>_*` function (k = its step in the plan's order),
  `kb_invoke` and `kb_patch_stage` (`model_functions`).

Symbols are keyed "file:name" for static ones (two files may each have a static `store_block`) and "name" for
global ones.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from kilobyte.runtime import C_DIR

from .firmware import FirmwareBuild, build_firmware
from .measure import elf_sections, elf_symbols

PROBE_SINK = "kb_probe_sink"
_LAYER = re.compile(r"^kb_layer_(\d+)_")
_MODEL_H = """#include <stdint.h>
#define KB_INPUT_BYTES 4
#define KB_OUTPUT_BYTES 4
void kb_invoke(const int8_t *input, int8_t *output);
"""


@dataclass(frozen=True)
class ModelFunctions:
    """The code bytes of a model's generated functions in one firmware (sizes as the ELF gives them)."""

    layers: dict[int, int]  # step k of the plan's order -> bytes of kb_layer_<k>_*
    invoke: int  # kb_invoke
    patch_stage: int  # kb_patch_stage (0 without a patch stage)


def flash_bytes(elf: str | Path) -> int:
    """Flash of a linked firmware: every allocated section with contents (as `measure` counts it)."""
    return sum(s.size for s in elf_sections(elf) if s.has_contents)


def symbol_key(sym) -> str:
    """"file:name" for a static symbol, "name" for a global one."""
    return f"{sym.source}:{sym.name}" if sym.source else sym.name


def write_probe(model_dir: Path, functions: list[str]) -> Path:
    """A compiled-model directory holding every runtime file and a model.c whose kb_invoke stores the address of
    each of `functions` in a volatile sink (so they, and what they call, are linked; nothing runs)."""
    src = model_dir / "src"
    shutil.rmtree(model_dir, ignore_errors=True)
    src.mkdir(parents=True)
    for path in sorted(C_DIR.glob("*.[ch]")):
        shutil.copy2(path, src / path.name)
    takes = "".join(f"    {PROBE_SINK} = (void *){name};\n" for name in functions)
    (src / "model.h").write_text(_MODEL_H)
    (src / "model.c").write_text(
        '#include <string.h>\n\n#include "kilobyte.h"\n#include "model.h"\n\n'
        f"void *volatile {PROBE_SINK};\n\nvoid kb_invoke(const int8_t *input, int8_t *output)\n{{\n"
        f"    (void)input;\n    (void)output;\n{takes}}}\n")
    return model_dir


def probe_build(core: str, kernels: str, functions: list[str], work_dir: str | Path) -> FirmwareBuild:
    """Link the probe for `functions` (kernel set `kernels`) for `core` in `work_dir`."""
    model_dir = write_probe(Path(work_dir), list(functions))
    return build_firmware(model_dir, core, kernels=kernels, out_dir=model_dir / "firmware")


def linked_symbols(build: FirmwareBuild) -> dict[str, int]:
    """Every function and object of a firmware outside model.c (and the probe's sink): key -> bytes."""
    skip = {"kb_invoke", PROBE_SINK}
    return {symbol_key(s): s.size for s in elf_symbols(build.elf) if s.source != "model.c" and s.name not in skip}


def harness(core: str, kernels: str, work_dir: str | Path) -> tuple[int, dict[str, int]]:
    """(Flash bytes of the probe that links no runtime function, minus its empty kb_invoke; its symbols)."""
    build = probe_build(core, kernels, [], work_dir)
    invoke = sum(s.size for s in elf_symbols(build.elf) if s.name == "kb_invoke")
    return flash_bytes(build.elf) - invoke, linked_symbols(build)


def closures(core: str, kernels: str, functions: list[str], work_dir: str | Path,
             base: dict[str, int] | None = None) -> dict[str, dict[str, int]]:
    """Per runtime function, the symbols (key -> bytes) its probe links beyond the harness's (`base`: the harness's
    symbols, probed when not given). One probe firmware per function."""
    work = Path(work_dir)
    if base is None:
        base = harness(core, kernels, work / "harness")[1]
    found = {}
    for name in functions:
        linked = linked_symbols(probe_build(core, kernels, [name], work / "probe"))
        found[name] = {key: size for key, size in linked.items() if key not in base}
    return found


def model_functions(build: FirmwareBuild) -> ModelFunctions:
    """The generated functions of a compiled model's firmware (clones such as `.constprop.0` count as theirs)."""
    layers, invoke, stage = {}, 0, 0
    for sym in elf_symbols(build.elf):
        if sym.kind != "func":
            continue
        match = _LAYER.match(sym.name)
        if match and sym.source == "model.c":
            layers[int(match.group(1))] = layers.get(int(match.group(1)), 0) + sym.size
        elif sym.name == "kb_invoke":
            invoke = sym.size
        elif sym.name.startswith("kb_patch_stage") and sym.source == "model.c":
            stage += sym.size
    return ModelFunctions(layers, invoke, stage)
