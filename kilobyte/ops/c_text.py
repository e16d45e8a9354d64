"""Codegen stage: formatting C literals — arrays, struct initialisers, identifiers — deterministically.

Everything the generator writes goes through these helpers so the same graph and plan always give the same bytes.
"""

from __future__ import annotations

import re

import numpy as np

PER_LINE = 24


def c_ident(name: str) -> str:
    """A C identifier from a tensor/node name ('conv_2d_0.weight' -> 'conv_2d_0_weight').

    >>> c_ident("features.0/conv-1")
    'features_0_conv_1'
    """
    ident = re.sub(r"[^0-9A-Za-z_]", "_", name)
    return ident if not ident[:1].isdigit() else f"t_{ident}"


def c_array(name: str, ctype: str, values, *, align: int = 0, static: bool = True, const: bool = True) -> str:
    """A C array definition holding `values` (flattened), PER_LINE numbers per line.

    >>> print(c_array("w", "int8_t", [1, -2, 3], align=16))
    static const int8_t w[3] __attribute__((aligned(16))) = {
        1, -2, 3,
    };
    """
    flat = np.asarray(values).reshape(-1)
    qual = ("static " if static else "") + ("const " if const else "")
    attr = f" __attribute__((aligned({align})))" if align else ""
    lines = [f"{qual}{ctype} {name}[{max(len(flat), 1)}]{attr} = {{"]
    items = [str(int(v)) for v in flat] or ["0"]
    for i in range(0, len(items), PER_LINE):
        lines.append("    " + ", ".join(items[i:i + PER_LINE]) + ",")
    lines.append("};")
    return "\n".join(lines)


def c_struct(ctype: str, fields: dict) -> str:
    """A designated initialiser written as a static const local `p`; a tuple value fills an array field.

    >>> c_struct("kb_strides_params", {"dims": (1, 2, 3, 4), "in_start": 5})
    'static const kb_strides_params p = {.dims = {1, 2, 3, 4}, .in_start = 5};'
    """
    body = ", ".join(f".{k} = {_c_value(v)}" for k, v in fields.items())
    return f"static const {ctype} p = {{{body}}};"


def _c_value(v) -> str:
    if isinstance(v, (tuple, list)):
        return "{" + ", ".join(str(int(x)) for x in v) + "}"
    return str(int(v))
