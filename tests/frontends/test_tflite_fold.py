"""Constant folding at `.tflite` import (kilobyte.frontends.tflite_fold): the shape arithmetic Keras and PyTorch
exports write — `SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE`, GATHER / MUL / CONCATENATION of shape entries, CAST,
SQUEEZE, EXPAND_DIMS — becomes constant tensors, so the operators reading it import as if the file held constants.

Files are crafted from an int8 conv -> RESHAPE (flatten) -> FULLY_CONNECTED graph written by Kilobyte's exporter,
with the RESHAPE's constant shape replaced by an operator chain computing it. Oracles: TensorFlow Lite Micro on the
crafted file itself (TFLite's interpreter where TFLite Micro cannot run the file), the numpy reference on what
Kilobyte imports, and the compiled C (host build).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import tflite
from litert_oracle import run_litert
from random_nets import (
    FEATURES,
    SHAPE_CHAIN_INPUT,
    act,
    gather_chain,
    i32,
    keras_chain,
    shape_chain_net,
    with_shape_chain,
)

from kilobyte.api import compile_model, load
from kilobyte.codegen import run_compiled
from kilobyte.driver.verify import verify_project
from kilobyte.errors import ModelFileError
from kilobyte.export.tflite import _tensor_order, _Writer
from kilobyte.export.tflite_ops import TflOp, lower_graph
from kilobyte.frontends.tflite import from_tflite
from kilobyte.interp import run_int8
from kilobyte.ir import Op, Tensor
from kilobyte.targets.tflm import run_tflm

B, T = tflite.BuiltinOperator, tflite.TensorType
OUT = "fully_connected_0"  # flatten_net's output

def oracle(chain, data: bytes, x: np.ndarray) -> np.ndarray:
    """TFLite Micro, or TFLite's interpreter for the GATHER chain: TFLite Micro's GATHER refuses int32 values
    ("Type 'INT32' is not supported by gather"), so it cannot run that file at all."""
    if chain is gather_chain:
        return run_litert(data, {"x": x})[OUT]
    return run_tflm(data, x, preserve_all=False).outputs[OUT]


@pytest.mark.parametrize("chain", [keras_chain, gather_chain], ids=["shape-slice-pack", "gather-mul-concat"])
def test_shape_chain_folds_compiles_and_is_bit_exact(tmp_path, chain):
    data = with_shape_chain(*chain())
    path = tmp_path / "chain.tflite"
    path.write_bytes(data)
    graph = from_tflite(data)
    assert [n.op for n in graph.nodes] == [Op.CONV_2D, Op.RESHAPE, Op.FULLY_CONNECTED]
    assert graph.nodes[1].attrs.shape == (1, FEATURES)
    assert not any(t.dtype == "int32" and not t.is_const for t in graph.tensors.values())  # no shape tensor left
    model = load(str(path))
    result = compile_model(model, tmp_path / "c")
    for seed in range(3):
        x = np.random.default_rng(seed).integers(-128, 128, SHAPE_CHAIN_INPUT).astype(np.int8)
        want = oracle(chain, data, x)
        np.testing.assert_array_equal(run_int8(graph, x)[OUT], want)
        np.testing.assert_array_equal(run_compiled(result.out_dir, x).reshape(want.shape), want)
    report = verify_project(result.out_dir, n_random=2, sanitize=False)
    assert report.ok and "tflm" in report.engines, report.mismatches


def test_cast_squeeze_expand_sub_floor_div_fold():
    """The other folded operators: the new shape [1, -1] as CAST(EXPAND_DIMS(SQUEEZE(...))) of arithmetic."""
    ops = [TflOp(B.SHAPE, ("conv_2d_0",), ("shape",), {"OutType": T.INT32}),
           TflOp(B.CAST, ("shape",), ("shape32",), {}),  # (the writer has no int64 tensors: an int32 -> int32 CAST)
           TflOp(B.SUB, ("shape32", "three"), ("minus",), {}),  # (-2, 2, 3, 5)
           TflOp(B.FLOOR_DIV, ("minus", "two"), ("halves",), {}),  # (-1, 1, 1, 2)
           TflOp(B.STRIDED_SLICE, ("halves", "z", "e2", "one"), ("pair",), {}),  # (-1, 1)
           TflOp(B.MUL, ("pair", "neg"), ("flip",), {}),  # (1, -1)
           TflOp(B.EXPAND_DIMS, ("flip", "z1"), ("col",), {}),
           TflOp(B.SQUEEZE, ("col",), ("newshape",), {"SqueezeDims": (0,)})]
    tensors = [act("shape", (4,)), act("shape32", (4,)), i32("three", 3), act("minus", (4,)),
               i32("two", 2), act("halves", (4,)), i32("z", [0]), i32("e2", [2]), i32("one", [1]),
               act("pair", (2,)), i32("neg", [-1]), act("flip", (2,)), i32("z1", 0), act("col", (1, 2)),
               act("newshape", (2,))]
    graph = from_tflite(with_shape_chain(ops, tensors))
    assert [n.op for n in graph.nodes] == [Op.CONV_2D, Op.RESHAPE, Op.FULLY_CONNECTED]
    assert graph.nodes[1].attrs.shape == (1, FEATURES)


def test_gather_out_of_range_is_a_one_line_error():
    ops, tensors = gather_chain()
    tensors[4] = i32("i3", [4])  # the shape has 4 entries: index 4 is past the end
    with pytest.raises(ModelFileError) as err:
        from_tflite(with_shape_chain(ops, tensors))
    msg = str(err.value)
    assert "\n" not in msg and "GATHER" in msg and "out of range" in msg


def test_folded_perm_feeds_a_transpose():
    """Folding is not only for RESHAPE: a TRANSPOSE whose perm is CONCATENATION([0], [2, 1, 3]). TFLite Micro
    refuses a computed perm ("Non-constant >perm< tensor is not supported"): TFLite's interpreter is the oracle."""
    graph = shape_chain_net()
    ops, extra = lower_graph(graph)
    tensors = _tensor_order(graph, ops, extra)
    conv = next(t for t in tensors if t.name == "conv_2d_0")
    moved = Tensor("moved", (1, 6, 5, 8), "int8", None, conv.qparams)
    perm_ops = [TflOp(B.CONCATENATION, ("p0", "p1"), ("perm",), {"Axis": 0}),
                TflOp(B.TRANSPOSE, ("conv_2d_0", "perm"), ("moved",), {})]
    k = next(i for i, op in enumerate(ops) if op.code == B.RESHAPE)
    ops[k] = TflOp(B.RESHAPE, ("moved", ops[k].inputs[1]), ops[k].outputs, {})
    data = _Writer(SimpleNamespace(name="perm", nodes=(), inputs=graph.inputs, outputs=graph.outputs),
                   tensors + [i32("p0", [0]), i32("p1", [2, 1, 3]), act("perm", (4,)), moved],
                   ops[:k] + perm_ops + ops[k:]).serialise()
    imported = from_tflite(data)
    assert [n.op for n in imported.nodes] == [Op.CONV_2D, Op.TRANSPOSE, Op.RESHAPE, Op.FULLY_CONNECTED]
    assert imported.nodes[1].attrs.perm == (0, 2, 1, 3)
    x = np.random.default_rng(0).integers(-128, 128, SHAPE_CHAIN_INPUT).astype(np.int8)
    want = run_litert(data, {"x": x})[OUT]
    np.testing.assert_array_equal(run_int8(imported, x)[OUT], want)
