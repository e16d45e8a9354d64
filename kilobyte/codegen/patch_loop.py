"""Codegen stage: the MCUNetV2 patch stage as a generated loop over patches (filled in with the patch executor)."""

from __future__ import annotations

from ..errors import KilobyteError


def emit_patch_stage(graph, plan, bufs):
    raise KilobyteError("code generation for patch-based stages is not implemented yet; use --patch off")
