"""Tests for codegen/patch_loop.py: the MCUNetV2 patch stage as generated C (per-patch tables + a loop over patches).

Oracle: `run_int8` (the numpy reference). The generated C — built as a ctypes library, and as an ASan/UBSan
executable with guard bytes around the arena — must give the reference's output bit for bit, for every zoo model
(fixed stages at a block boundary and inside a residual block, and "auto") and for random graphs (conv, depthwise,
pooling, pad, residual add, concat; in-place rules on and off), with a `kb_arena` of exactly the planned size.
"""

from __future__ import annotations

import ctypes
import dataclasses
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from random_nets import stage_side, valid_cuts

from kilobyte.codegen import HostModel, build_executable, compile_graph, run_executable, split_float_tail
from kilobyte.interp import run_int8
from kilobyte.ir import Activation, ConcatAttrs, ConvAttrs, DepthwiseAttrs, GraphBuilder, Op, PadAttrs, PoolAttrs
from kilobyte.quant import quantize
from kilobyte.schedule.patch import candidate_cuts
from kilobyte.schedule.plan_types import PlanOptions

NO_RULES = PlanOptions(inplace_depthwise=False, inplace_add=False, alias_reshape=False, concat_in_place=False)
SMALL_CNNS = ("mnist-cnn", "resnet-small", "vgg-small")


def _quantize(graph, seed=0, samples=3):
    rng = np.random.default_rng(seed)
    shape = graph.tensors[graph.inputs[0]].shape
    return quantize(graph, [rng.normal(0, 1, shape).astype(np.float32) for _ in range(samples)])


def _inputs(graph, n, seed=1):
    rng = np.random.default_rng(seed)
    shape = graph.tensors[graph.inputs[0]].shape
    return [rng.integers(-128, 128, shape, dtype=np.int64).astype(np.int8) for _ in range(n)]


def _check(result, host, n_inputs=2):
    """The host build of `result` equals the reference on random inputs and its arena is the planned size. The
    arena is filled with random bytes before each run (as the plan executor poisons it): a tile read before it is
    written cannot pass by luck."""
    assert host.arena_symbol_bytes() == result.plan.arena_bytes
    arena = (ctypes.c_int8 * result.plan.arena_bytes).in_dll(host.lib, "kb_arena")
    rng, out = np.random.default_rng(3), result.graph.outputs[0]
    for i, x in enumerate(_inputs(result.graph, n_inputs)):
        ctypes.memmove(arena, rng.integers(-128, 128, len(arena), dtype=np.int8).tobytes(), len(arena))
        got, want = host(x), run_int8(result.graph, x)[out]
        assert np.array_equal(got, want), f"input {i}: {int(np.sum(got != want))} values differ"


def _compile_and_check(q, out_dir, options, n_inputs=2):
    """Compile `q` under `options` and `_check` the host build. Returns the compile result."""
    result = compile_graph(q, out_dir, options)
    _check(result, HostModel(result.out_dir), n_inputs)
    return result


# -- zoo models ---------------------------------------------------------------------------------------------------
def _zoo_names():
    from kilobyte import zoo

    return zoo.names("image")


@pytest.fixture(scope="module")
def zoo_core():
    """name -> the int8 core graph (10 classes keeps the generated C small and quick to build)."""
    cache = {}

    def get(name):
        if name not in cache:
            pytest.importorskip("torch")
            from kilobyte.api import load

            resolution = 32 if name in SMALL_CNNS else 64
            q = _quantize(load(name, width=0.35, resolution=resolution, num_classes=10).graph)
            cache[name] = split_float_tail(q)[0]
        return cache[name]

    return get


def _zoo_configs(core) -> list[PlanOptions]:
    """A block-boundary stage on 2x2 patches, a stage cut with more than one tensor crossing (e.g. inside a
    residual block: a stage output read inside the stage too) on 3x3, and "auto" within +30 % MACs."""
    order = [n.name for n in core.nodes]
    boundary = [n for n in candidate_cuts(core, order) if min(core.tensors[order[n - 1]].shape[1:3]) >= 2]
    inside = [(n, outs) for n, outs in valid_cuts(core) if len(outs) > 1 and stage_side(core, outs) >= 3]
    configs = [PlanOptions(patch="auto", max_mac_overhead=0.3)]
    if boundary:
        configs.append(PlanOptions(patch=(boundary[len(boundary) // 2], 2)))
    if inside:
        configs.append(PlanOptions(patch=(inside[0][0], 3)))
    return configs


@pytest.mark.parametrize("name", _zoo_names())
def test_zoo_patch_stage_bit_exact(name, zoo_core, tmp_path):
    core = zoo_core(name)
    configs = _zoo_configs(core)
    assert len(configs) >= 2, f"{name}: no fixed patch stage to test"
    results = [compile_graph(core, tmp_path / f"p{k}", options) for k, options in enumerate(configs)]
    with ThreadPoolExecutor(max_workers=len(results)) as pool:  # gcc runs in parallel
        hosts = list(pool.map(HostModel, [r.out_dir for r in results]))
    for options, result, host in zip(configs, results, hosts):
        _check(result, host)
        if options.patch != "auto":
            assert result.plan.patch is not None and "kb_patch_stage" in (result.out_dir / "src/model.c").read_text()


@pytest.mark.parametrize("name,options", [
    ("mobilenetv2", PlanOptions(patch="auto", max_mac_overhead=0.3)),
    ("resnet-small", PlanOptions(patch=(8, 2))),
])
def test_sanitizer_build_with_arena_guards(name, options, zoo_core, tmp_path):
    """ASan/UBSan with 64 guard bytes either side of the arena: no out-of-bounds access, guards intact (exit 3
    otherwise), output bit-exact."""
    core = zoo_core(name)
    result = compile_graph(core, tmp_path / "m", options)
    assert result.plan.patch is not None
    exe = build_executable(result.out_dir, sanitize=True)
    out = core.outputs[0]
    for x in _inputs(core, 2, seed=7):
        y = run_executable(exe, x, tuple(result.manifest["output"]["shape"]))
        assert np.array_equal(y, run_int8(core, x)[out])


# -- hand-built stages --------------------------------------------------------------------------------------------
def _conv(b, x, cout, k=3, stride=1, pad=(1, 1, 1, 1), act=Activation.RELU6, seed=0):
    rng = np.random.default_rng(seed)
    c = b.shape(x)[3]
    return b.node(Op.CONV_2D, [x], ConvAttrs((stride, stride), pad, activation=act),
                  params={"weight": rng.normal(0, 0.5, (cout, k, k, c)), "bias": rng.normal(0, 0.1, cout)})


def test_window_wholly_in_padding(tmp_path):
    """A strided 1x1 conv with padding: patch (0, 0) needs nothing of the layer before (an empty tile) and its
    first output row is computed from zero-point padding alone."""
    b = GraphBuilder()
    a = _conv(b, b.input((1, 8, 8, 2)), 3, seed=4)
    y = _conv(b, a, 2, k=1, stride=2, act=Activation.NONE, seed=5)
    q = _quantize(b.build([b.node(Op.MAX_POOL_2D, [y], PoolAttrs((5, 5), (5, 5)))]))
    result = _compile_and_check(q, tmp_path / "m", PlanOptions(patch=(2, 5)), n_inputs=3)
    assert result.plan.patch.tiles[0][0].out_box == (0, 0, 0, 0)


def test_stage_outputs_read_inside_the_stage(tmp_path):
    """PAD and CONCAT tiles inside the stage; two stage outputs, one of them also read inside the stage (it has a
    tile buffer, and each patch copies its own box out of it into the whole tensor)."""
    b = GraphBuilder()
    x = b.input((1, 12, 12, 3))
    p = b.node(Op.PAD, [x], PadAttrs(((0, 0), (1, 0), (0, 1), (0, 0))))
    a = _conv(b, p, 4, stride=2, pad=(0, 1, 1, 0), seed=1)
    c = b.node(Op.CONCAT, [a, _conv(b, a, 2, k=1, pad=(0, 0, 0, 0), seed=2)], ConcatAttrs(axis=3))
    s = _conv(b, c, 5, seed=3)  # (6, 6, 5): read inside the stage by t and after it by the ADD
    t = _conv(b, s, 5, seed=6)
    q = _quantize(b.build([b.node(Op.ADD, [s, t])]))
    result = _compile_and_check(q, tmp_path / "m", PlanOptions(patch=(6, 3)), n_inputs=3)
    stage = result.plan.patch
    assert set(stage.outputs) == {s, t} and s in stage.tile_offsets and t not in stage.tile_offsets
    assert f"stage output '{s}'" in (result.out_dir / "src/model.c").read_text()


def _depthwise(b, x, k, stride=1, dilation=1, seed=0):
    rng, c = np.random.default_rng(seed), b.shape(x)[3]
    pad = dilation * (k - 1) // 2
    return b.node(Op.DEPTHWISE_CONV_2D, [x], DepthwiseAttrs((stride, stride), (pad,) * 4, (dilation, dilation),
                                                            activation=Activation.RELU6),
                  params={"weight": rng.normal(0, 0.5, (1, k, k, c)), "bias": rng.normal(0, 0.1, c)})


def test_in_place_depthwise_tiles(tmp_path):
    """Depthwise tiles overwriting their input tile through the tile scratch: 5x5 stride 2 (unrolled kernel),
    3x3 dilation 2 (generic kernel), border patches with zero-point padding."""
    b = GraphBuilder()
    x = _conv(b, b.input((1, 20, 20, 3)), 16, seed=1)
    x = _depthwise(b, x, 5, stride=2, seed=2)
    x = _depthwise(b, x, 3, dilation=2, seed=3)
    y = _conv(b, x, 8, k=1, pad=(0, 0, 0, 0), seed=4)
    q = _quantize(b.build([b.node(Op.AVG_POOL_2D, [y], PoolAttrs((10, 10), (10, 10)))]))
    result = _compile_and_check(q, tmp_path / "m", PlanOptions(patch=(4, 3)), n_inputs=3)
    text = (result.out_dir / "src/model.c").read_text()
    assert "kb_depthwise_inplace_5x5(" in text and "kb_depthwise_inplace(" in text
    assert set(result.plan.patch.tile_scratch) >= {"depthwise_conv_2d_0", "depthwise_conv_2d_1"}


# -- random graphs ------------------------------------------------------------------------------------------------
UNITS = ("conv", "dw", "pool", "pad", "residual", "concat")


def _unit(b, x, kind, rng):
    """One random layer (or a residual / concat pair) on `x`; only ops the C runtime has kernels for."""
    _, h, w, c = b.shape(x)
    small = min(h, w) < 5
    stride = 1 if small else int(rng.choice([1, 2]))
    pad = (1, 1, 1, 1) if small else tuple(int(v) for v in rng.integers(0, 2, 4))
    act = [Activation.NONE, Activation.RELU, Activation.RELU6][int(rng.integers(3))]
    seed = int(rng.integers(1 << 16))
    if kind == "conv":
        return _conv(b, x, int(rng.integers(1, 7)), int(rng.choice([1, 3])), stride, pad, act, seed)
    if kind == "dw":
        wr = np.random.default_rng(seed)
        return b.node(Op.DEPTHWISE_CONV_2D, [x], DepthwiseAttrs((stride, stride), pad, activation=act),
                      params={"weight": wr.normal(0, 0.5, (1, 3, 3, c)), "bias": wr.normal(0, 0.1, c)})
    if kind == "pool":
        op, k = [Op.MAX_POOL_2D, Op.AVG_POOL_2D][int(rng.integers(2))], int(rng.choice([2, 3]))
        if op is Op.AVG_POOL_2D:  # .tflite cannot express an uneven AVG padding: VALID, a window that fits
            pad, k = (0, 0, 0, 0), min(k, h, w)
        return b.node(op, [x], PoolAttrs((k, k), (stride, stride), tuple(min(p, k - 1) for p in pad)))
    if kind == "pad":
        return b.node(Op.PAD, [x], PadAttrs(((0, 0), pad[:2], pad[2:], (0, 0))))
    y = _conv(b, x, c, 1, 1, (0, 0, 0, 0), act, seed)
    if kind == "residual":
        return b.node(Op.ADD, [x, y])
    return b.node(Op.CONCAT, [y, x], ConcatAttrs(axis=3))


def _random_graph(seed):
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"random{seed}")
    x = b.input((1, int(rng.integers(6, 13)), int(rng.integers(6, 13)), int(rng.integers(1, 5))))
    for _ in range(int(rng.integers(2, 7))):
        x = _unit(b, x, UNITS[int(rng.integers(len(UNITS)))], rng)
    return _quantize(b.build([x]), seed)


@pytest.mark.parametrize("seed", range(24))
def test_random_graphs_bit_exact(seed, tmp_path):
    q = _random_graph(seed)
    rng = np.random.default_rng(seed + 100)
    cuts = valid_cuts(q)
    assert cuts, "every random graph starts with a spatially local node"
    n, outputs = cuts[int(rng.integers(len(cuts)))]
    grid = int(rng.integers(1, min(stage_side(q, outputs), 4) + 1))
    base = PlanOptions() if seed % 3 else NO_RULES
    result = _compile_and_check(q, tmp_path / "m", dataclasses.replace(base, patch=(n, grid)), n_inputs=2)
    assert result.plan.patch.n_nodes == n


# -- the CLI --------------------------------------------------------------------------------------------------------
def test_cli_compile_with_patch_then_verify(tmp_path, capsys):
    """`kilobyte compile mobilenetv2 -w 0.35 -r 96 --data digits --patch 4,2` then `kilobyte verify` (host C ==
    reference == TFLM, sanitizer runs): both exit 0. (`--classes 10 --samples 16` only keep it quick: the 1000-class
    head is 1.3 MB of weights, nothing to do with the patch stage.)"""
    pytest.importorskip("torch")
    from kilobyte.cli import main

    out = tmp_path / "mbv2"
    assert main(["compile", "mobilenetv2", "-w", "0.35", "-r", "96", "--data", "digits", "--patch", "4,2",
                 "--classes", "10", "--samples", "16", "--out", str(out)]) == 0
    assert "kb_patch_stage" in (out / "src/model.c").read_text()
    assert main(["verify", str(out)]) == 0
    assert "OK: bit-exact" in capsys.readouterr().out
