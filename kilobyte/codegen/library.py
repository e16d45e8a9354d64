"""Codegen stage: the generated library as firmware sees it — its name prefix, who owns the arena, the Arm target its
build files are for — and every C name and file name that follows from them.

One prefix names everything a library exports, so several libraries link into one image: with `--prefix kws`
the header is `src/kws_model.h`, the functions `kws_invoke`, `kws_quantize_input`, `kws_argmax`, the arena
`kws_arena`, the macros `KWS_ARENA_BYTES`, `KWS_INPUT_SCALE`, ... The default prefix `kb` keeps the names of a
single-model project (`src/model.h`, `kb_invoke`, `KB_ARENA_BYTES`) whatever the model file is called, so renaming
a `.tflite` never renames the API a firmware calls. Everything else in `model.c` is `static`; the runtime kernels
(`kb_conv`, ...) are shared by every library and compiled once (the build files say how).

>>> lib = LibraryOptions(prefix="kws")
>>> lib.symbol("invoke"), lib.macro("ARENA_BYTES"), lib.header
('kws_invoke', 'KWS_ARENA_BYTES', 'kws_model.h')
>>> LibraryOptions().header
'model.h'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import KilobyteError
from ..formats.project import symbol
from ..ops.c_text import c_ident
from ..targets.cortexm.toolchain import BOARDS

DEFAULT_PREFIX = "kb"
ARENA_ALIGN = 16  # bytes; the DSP kernels read the arena in words, the generated arena is aligned(16)
TARGETS = tuple(BOARDS)  # the cores a library builds for: the firmware boards (targets/cortexm/toolchain.py)
_PREFIX = re.compile(r"[a-z][a-z0-9_]{0,31}")
C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef union unsigned void
    volatile while""".split())
# The generated invoke's own parameter and local names, and C keywords: an output parameter may not be named so.
_TAKEN = C_KEYWORDS | {"input", "raw_input", "output"}


@dataclass(frozen=True)
class LibraryOptions:
    """How the C library presents itself: `prefix` of every exported name and file, `arena_extern` (the user
    defines `<prefix>_arena`, e.g. in DTCM; model.h gives its size and alignment), and the Arm `target` whose
    compiler flags the generated CMake toolchain file carries."""

    prefix: str = DEFAULT_PREFIX
    arena_extern: bool = False
    target: str = "cortex-m4"

    def __post_init__(self):
        if not _PREFIX.fullmatch(self.prefix) or self.prefix in C_KEYWORDS:
            raise KilobyteError(f"--prefix {self.prefix!r}: give a lower-case C identifier of at most 32 characters "
                                "(letters, digits, '_', starting with a letter), e.g. --prefix kws")
        if self.prefix.startswith("kb_") or self.prefix in ("kilobyte", "fw"):
            raise KilobyteError(f"--prefix {self.prefix!r}: names kb_* and fw_* belong to the runtime and the test "
                                "firmware; choose another prefix, e.g. the model's name")
        if self.target not in TARGETS:
            raise KilobyteError(f"--target {self.target!r}: choose one of {', '.join(TARGETS)}")

    def symbol(self, name: str) -> str:
        return symbol(self.prefix, name)

    def macro(self, name: str) -> str:
        return f"{self.prefix.upper()}_{name}"

    @property
    def stem(self) -> str:
        """File stem of the generated model: `model` for the default prefix, else `<prefix>_model`."""
        return "model" if self.prefix == DEFAULT_PREFIX else f"{self.prefix}_model"

    @property
    def header(self) -> str:
        return f"{self.stem}.h"

    @property
    def source(self) -> str:
        return f"{self.stem}.c"


def output_params(names) -> list[str]:
    """C parameter names of the outputs of a multi-output invoke: each output's name as an identifier, made unique
    and kept clear of the invoke's own names.

    >>> output_params(["scores", "boxes:0", "input", "scores"])
    ['scores', 'boxes_0', 'input_out', 'scores_3']
    """
    params: list[str] = []
    for k, name in enumerate(names):
        p = c_ident(name)
        if p in _TAKEN:
            p += "_out"
        if p in params:
            p += f"_{k}"
        params.append(p)
    return params


def is_classifier(outputs: list[dict]) -> bool:
    """One int8 (or uint8) output of shape (1, ..., 1, N), N > 1: a vector of class scores, for which
    `<prefix>_argmax` is generated (the integer argmax is the float one, since DEQUANTIZE is increasing)."""
    if len(outputs) != 1 or outputs[0]["dtype"] not in ("int8", "uint8"):
        return False
    shape = outputs[0]["shape"]
    return len(shape) >= 2 and shape[-1] > 1 and all(d == 1 for d in shape[:-1])


def output_name(o: dict, count: int) -> str:
    """An output's parameter name in the invokes: `output` when it is the only one, else its own."""
    return "output" if count == 1 else o["param"]
