"""Fuzz test of the whole compile path: no `.tflite` file, whatever is in it, gets a Python traceback.

10,000 mutants of six real-shaped int8 models (random nets written by Kilobyte's exporter): field rewrites that keep
the flatbuffer well-formed (shapes, types, quantisation, operator wiring, options, weights), byte flips and
truncations (tests/fuzz_tflite.py). Each goes through what `kilobyte compile` runs — `kilobyte.load` then
`compile_model` (quantisation check, plan, C generation) — and must either compile or raise a `KilobyteError` whose
message is one line. Split in four chunks so xdist spreads them.
"""

from __future__ import annotations

import traceback

import pytest
from fuzz_tflite import mutants
from random_nets import quantized, random_graph

from kilobyte.api import compile_model, load
from kilobyte.errors import KilobyteError
from kilobyte.export.tflite import to_tflite

CASES, CHUNKS = 10_000, 4


@pytest.fixture(scope="module")
def seeds() -> list[bytes]:
    return [to_tflite(quantized(random_graph(s), s)[0]) for s in range(6)]


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_no_traceback_for_any_mutated_file(tmp_path, seeds, chunk):
    escaped, multiline, compiled = [], [], 0
    for i, data in enumerate(mutants(seeds, CASES // CHUNKS, seed=chunk)):
        path = tmp_path / "model.tflite"
        path.write_bytes(data)
        try:
            compile_model(load(str(path)), tmp_path / "out")
            compiled += 1
        except KilobyteError as e:
            if "\n" in str(e):
                multiline.append(f"case {i}: {e!r}")
        except Exception as e:  # a traceback a user would see
            where = traceback.extract_tb(e.__traceback__)[-1]
            escaped.append(f"case {i}: {type(e).__name__} at {where.filename}:{where.lineno}: {e}")
    assert not escaped, escaped[:5]
    assert not multiline, multiline[:5]
    assert compiled > CASES // CHUNKS // 20  # the mutants reach code generation, not only the reader
