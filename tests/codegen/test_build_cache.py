"""Codegen tests: the host build's object cache (codegen/host.py). Runtime files are compiled once per content and
flags and shared between generated projects; a changed file or header, or other flags, gets a new object; with
KILOBYTE_BUILD_CACHE=off nothing is cached; the cached build computes what the reference interpreter does."""

from __future__ import annotations

import numpy as np

from kilobyte.codegen import HostModel, LibraryOptions, compile_graph
from kilobyte.codegen.host import build_executable, cache_dir
from kilobyte.interp import run_int8
from kilobyte.ir import ConvAttrs, GraphBuilder, Op, PoolAttrs
from kilobyte.quant import quantize


def _model(seed: int):
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"m{seed}")
    y = b.node(Op.CONV_2D, [b.input((1, 6, 6, 2))], ConvAttrs((1, 1), (1, 1, 1, 1)),
               params={"weight": rng.normal(0, .5, (4, 3, 3, 2))})
    g = b.build([b.node(Op.AVG_POOL_2D, [y], PoolAttrs((2, 2), (2, 2)))])
    return quantize(g, [rng.normal(size=(1, 6, 6, 2)).astype(np.float32) for _ in range(4)])


def _check(project, graph):
    x = np.random.default_rng(0).integers(-128, 128, (1, 6, 6, 2)).astype(np.int8)
    y = HostModel(project)(x).reshape(-1)
    assert np.array_equal(y, run_int8(graph, x)[graph.outputs[0]].reshape(-1))


def test_projects_share_objects_and_a_change_rebuilds(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("KILOBYTE_BUILD_CACHE", str(cache))
    g1, g2 = _model(1), _model(2)
    p1 = compile_graph(g1, tmp_path / "a").out_dir
    _check(p1, g1)
    objects = sorted(cache.glob("*.o"))
    runtime = sorted(p.name for p in (p1 / "src").glob("*.c") if p.name != "model.c")
    assert runtime and len(objects) == len(runtime)  # one object per runtime file, model.c not cached
    prefixed = compile_graph(g1, tmp_path / "c", library=LibraryOptions(prefix="kws")).out_dir
    assert (prefixed / "src" / "kws_model.c").is_file()
    _check(prefixed, g1)
    assert sorted(cache.glob("*.o")) == objects  # a prefixed model file is not cached either
    p2 = compile_graph(g2, tmp_path / "b").out_dir  # another model, same kernels: every object reused
    _check(p2, g2)
    assert sorted(cache.glob("*.o")) == objects

    # a header the runtime includes changes (a comment): every file that includes it is compiled again
    header = p2 / "src" / "kilobyte.h"
    header.write_text(header.read_text() + "\n/* changed */\n")
    _check(p2, g2)
    assert len(list(cache.glob("*.o"))) == 2 * len(objects)

    build_executable(p1)  # other flags (no -fPIC): other objects
    assert len(list(cache.glob("*.o"))) > 2 * len(objects)
    assert not list(cache.glob(".*.tmp"))  # nothing half-written left behind


def test_cache_off_builds_without_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KILOBYTE_BUILD_CACHE", "off")
    assert cache_dir() is None
    g = _model(3)
    p = compile_graph(g, tmp_path / "m").out_dir
    _check(p, g)
    assert not list(tmp_path.rglob("*.o"))
