"""kilobyte.units: the one way sizes are written (kB of 1024 bytes, one decimal), shared by the CLI and the fit
hints of targets/."""

from __future__ import annotations

from kilobyte.units import KB, kb


def test_kb_writes_kibibytes_with_one_decimal():
    assert KB == 1024
    assert kb(0) == "0.0 kB"
    assert kb(1536) == "1.5 kB"
    assert kb(551_936) == "539.0 kB"  # MCUNetV2's first-conv figure
    assert kb(1023) == "1.0 kB"
