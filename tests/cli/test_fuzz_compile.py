"""Fuzz test of the whole compile path: no `.tflite` file, whatever is in it, gets a Python traceback.

10,000 mutants of six real-shaped int8 models (random nets written by Kilobyte's exporter): field rewrites that keep
the flatbuffer well-formed (shapes, types, quantisation, operator wiring, options, weights), byte flips and
truncations (tests/fuzz_tflite.py). Each goes through what `kilobyte compile` runs — `kilobyte.load` then
`compile_model` (quantisation check, plan, C generation) — and must either compile or raise a `KilobyteError` whose
message is one line. Split in four chunks so xdist spreads them. A further 2,000 mutants of the data-movement models
(TRANSPOSE, STRIDED_SLICE, TILE, REDUCE_MAX, tests/random_nets.movement_model) and of the shape arithmetic the
importer folds (SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE, GATHER / MUL / CONCATENATION) go the same way, and
2,000 of the upsampling models (RESIZE_NEAREST_NEIGHBOR, RESIZE_BILINEAR, TRANSPOSE_CONV with the writer's crop
slices, GELU; tests/random_nets.upsample_model).
"""

from __future__ import annotations

import traceback

import pytest
from fuzz_tflite import mutants
from random_nets import (
    MOVEMENTS,
    UPSAMPLES,
    gather_chain,
    keras_chain,
    movement_model,
    quantized,
    random_graph,
    upsample_model,
    with_shape_chain,
)

from kilobyte.api import compile_model, load
from kilobyte.errors import KilobyteError
from kilobyte.export.tflite import to_tflite

CASES, CHUNKS = 10_000, 4


@pytest.fixture(scope="module")
def seeds() -> list[bytes]:
    return [to_tflite(quantized(random_graph(s), s)[0]) for s in range(6)]


@pytest.fixture(scope="module")
def movement_seeds() -> list[bytes]:
    return ([to_tflite(movement_model(kind)) for kind in MOVEMENTS]
            + [with_shape_chain(*keras_chain()), with_shape_chain(*gather_chain())])


@pytest.fixture(scope="module")
def upsample_seeds() -> list[bytes]:
    return [to_tflite(upsample_model(kind)) for kind in UPSAMPLES]


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_no_traceback_for_any_mutated_file(tmp_path, seeds, chunk):
    _no_traceback(tmp_path, seeds, CASES // CHUNKS, chunk)


@pytest.mark.parametrize("chunk", range(2))
def test_no_traceback_for_mutated_data_movement_files(tmp_path, movement_seeds, chunk):
    _no_traceback(tmp_path, movement_seeds, 1000, 100 + chunk)


@pytest.mark.parametrize("chunk", range(2))
def test_no_traceback_for_mutated_upsampling_files(tmp_path, upsample_seeds, chunk):
    _no_traceback(tmp_path, upsample_seeds, 1000, 200 + chunk)


def _no_traceback(tmp_path, seeds: list[bytes], n: int, seed: int) -> None:
    escaped, multiline, compiled = [], [], 0
    for i, data in enumerate(mutants(seeds, n, seed=seed)):
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
    assert compiled > n // 20  # the mutants reach code generation, not only the reader
