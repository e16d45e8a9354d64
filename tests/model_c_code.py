"""The Flash model's view of a compiled project, read back from the text of its model.c — the oracle
`estimate_resources`' Flash is held to (tests/schedule/test_estimate.py, tests/nas/test_resources.py).

From the generated C alone: the runtime functions it calls, one layer kind per kb_layer_* function (the family of the
function it calls; a concat once per channel copy, a copying RESHAPE as "reshape"), the blocks of kb_patch_stage, and
the bytes of its parameter structs and per-patch tables. `flash.code_bytes` of that must equal the estimate's.
"""

from __future__ import annotations

import re

from kilobyte.kernels.calls import ENTRY_POINTS
from kilobyte.schedule.flash import STRUCT_PAD, WEIGHTED_PAD, GeneratedCode, struct_bytes

KIND_OF = {function: family for family, functions in ENTRY_POINTS.items() for function in functions}
CALL = re.compile(r"\b(kb_\w+|memmove)\(")
LAYER = re.compile(r"^static void kb_layer_\d+_\w+\(const int8_t \*input\)\n\{\n(.*?)\n\}\n", re.M | re.S)
STAGE = re.compile(r"^static void kb_patch_stage\(const int8_t \*input\)\n\{\n(.*?)\n\}\n", re.M | re.S)
STRUCT = re.compile(r"^\s*static const (kb_\w+_params) [pa] = ", re.M)
PATCH_PARAMS = re.compile(r"^static const (kb_\w+_params) kb_pp_\w+\[(\d+)\]", re.M)
PATCH_OFFSETS = re.compile(r"^static const int32_t kb_po_\w+\[(\d+)\]\[(\d+)\]", re.M)
WEIGHTS = re.compile(r"^static const int8_t kb_w_\w+\[", re.M)
TABLES = re.compile(r"^static const int8_t kb_lut_\w+\[", re.M)


def _calls(text: str) -> list[str]:
    return [f for f in CALL.findall(text) if f in KIND_OF]


def stage_blocks(body: str) -> list[str]:
    """Block kinds of the patch loop: the family each block calls (a concat: per input), "copy" per stage output
    copied out of its tile."""
    kinds = []
    for block in body.split("{   /* ")[1:]:
        work, _, copy = block.partition("/* stage output '")
        calls = _calls(work)
        kinds += [KIND_OF[f] for f in calls] if KIND_OF[calls[0]] == "concat" else [KIND_OF[calls[0]]]
        kinds += ["copy"] * len(_calls(copy))
    return kinds


def project_code(model_c: str, outputs: int) -> GeneratedCode:
    """The `GeneratedCode` of a project's model.c with `outputs` outputs."""
    layers = [KIND_OF[f] for body in LAYER.findall(model_c) for f in _calls(body)]
    stage = STAGE.search(model_c)
    data = sum(struct_bytes(t) + STRUCT_PAD for t in STRUCT.findall(model_c))
    data += sum(int(n) * struct_bytes(t) + STRUCT_PAD for t, n in PATCH_PARAMS.findall(model_c))
    data += sum(int(n) * int(c) * 4 + STRUCT_PAD for n, c in PATCH_OFFSETS.findall(model_c))
    data += len(WEIGHTS.findall(model_c)) * WEIGHTED_PAD + len(TABLES.findall(model_c)) * STRUCT_PAD
    blocks = tuple(stage_blocks(stage.group(1))) if stage else ()
    return GeneratedCode(frozenset(_calls(model_c)), tuple(layers), blocks, data, outputs)
