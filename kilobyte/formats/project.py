"""Formats: a compiled project's interface — its manifest `kilobyte.json` and the C calls of its entry points.

Written by the codegen stage (`codegen/project.py`, `codegen/header.py`), read by everything that runs a compiled
library: the host model (`codegen/host.py`), the Cortex-M firmware harness and QEMU runner (`targets/cortexm/`), the
driver's verification and the accuracy of a library (`train/library_accuracy.py`). It lives below all of them so that
`targets/` need not import `codegen/`.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import KilobyteError

MANIFEST = "kilobyte.json"


def manifest(project: str | Path) -> dict:
    """The manifest of the compiled project in directory `project` (one-line error when it is not one)."""
    path = Path(project) / MANIFEST
    if not path.is_file():
        raise KilobyteError(f"{project}: not a compiled Kilobyte project (no {MANIFEST})")
    return json.loads(path.read_text())


def symbol(prefix: str, name: str) -> str:
    """The C name of the library's `name` (`kb_invoke` for prefix "kb")."""
    return f"{prefix}_{name}"


def invoke_call(m: dict, input_expr: str, output_expr: str) -> str:
    """A C call of the model's invoke that reads `input_expr` and writes every output into the one byte buffer
    `output_expr`, back to back at their offsets (the test harnesses' packed output; the manifest's offsets)."""
    outs = m.get("outputs", [{"offset": 0}])
    args = [f"(const void *)({input_expr})"] + [f"(void *)((int8_t *)({output_expr}) + {o.get('offset', 0)})"
                                                 for o in outs]
    return f"{symbol(m.get('prefix', 'kb'), 'invoke')}({', '.join(args)})"


def float_call(m: dict, input_expr: str, output_expr: str) -> str:
    """A C call of `<prefix>_invoke_float` reading `input_expr` (the file's input bytes) and writing every output
    into the byte buffer `output_expr` at its `file_offset` (4-byte aligned: `output_expr` must be too)."""
    args = [f"(const void *)({input_expr})"] + [f"(void *)((int8_t *)({output_expr}) + {o['file_offset']})"
                                                 for o in m["outputs"]]
    return f"{symbol(m.get('prefix', 'kb'), 'invoke_float')}({', '.join(args)})"
