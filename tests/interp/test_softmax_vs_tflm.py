"""int8 SOFTMAX and LOG_SOFTMAX: the numpy reference (kilobyte.ops.softmax) against TFLite Micro, bit for bit.

Each case is a one-op int8 graph written with `to_tflite` and run by TFLM; its input holds random rows plus edge rows
(all values equal, one large value among -128s, the full int8 range, values one step below the maximum, the two
extremes). Input scales span 1e-3 .. 40 (40 caps TFLite's multiplier at 2^31 - 1), betas 0.1 .. 2, depths 1 .. 1000.
Rows TFLite Micro aborts on (a SOFTMAX row whose exps sum to 512 or more) are left out of the TFLM runs, where the
reference must raise instead; one test shows TFLM really aborts on such a row. Files whose softmax output is not
quantised as TFLite prescribes are refused by TFLM, by the `.tflite` reader and by the reference alike.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from softmax_cases import BETAS, DEPTHS, LOG_SOFTMAX_OUT, SCALES, SHAPES, case_rows, softmax_graph

from kilobyte.errors import KilobyteError, UnsupportedOpError
from kilobyte.export.tflite import to_tflite
from kilobyte.frontends.tflite import from_tflite
from kilobyte.interp import run_int8
from kilobyte.ir import Op, QParams
from kilobyte.ops.softmax import kernel_fields as softmax_params
from kilobyte.ops.softmax import log_softmax_int8, log_softmax_params_for, softmax_int8, softmax_params_for
from kilobyte.targets import tflm


def tflm_runnable(x: np.ndarray, graph) -> np.ndarray:
    """The rows TFLite Micro does not abort on; the reference raises on each of the others."""
    node = graph.nodes[0]
    s_in = float(graph.tensors[graph.inputs[0]].qparams.scale[0])
    keep = []
    for row in x.reshape(-1, x.shape[-1]):
        try:
            if node.op is Op.SOFTMAX:
                softmax_int8(row, softmax_params_for(s_in, node.attrs.beta))
            else:
                log_softmax_int8(row, log_softmax_params_for(s_in))
            keep.append(row)
        except KilobyteError:
            assert row.size >= 512, "only rows of 512+ values may exceed TFLite's limits"
    return np.array(keep, np.int8).reshape(-1, x.shape[-1])


def assert_bit_exact(graph, x: np.ndarray) -> int:
    """Reference output == TFLM output; returns the number of values compared."""
    ours = run_int8(graph, x)[graph.outputs[0]]
    theirs = tflm.run_tflm(to_tflite(graph), x).outputs[graph.outputs[0]].reshape(ours.shape)
    differ = np.flatnonzero(ours != theirs)
    assert differ.size == 0, (f"{differ.size} of {ours.size} values differ, first at {differ[0]}: "
                              f"ours {ours.flat[differ[0]]}, TFLM {theirs.flat[differ[0]]}")
    return ours.size


def run_case(op: Op, scale: float, beta: float, depth: int, seed: int, n_random: int = 100) -> int:
    rng = np.random.default_rng(seed)
    zero_point = int(rng.integers(-128, 128))  # the zero point cancels in x - max: any value must give the same
    x = case_rows(depth, rng, n_random)
    probe = softmax_graph(op, (len(x), depth), scale, beta, zero_point)
    x = tflm_runnable(x, probe)
    if len(x) == 0:
        return 0
    graph = softmax_graph(op, x.shape, scale, beta, zero_point)
    return assert_bit_exact(graph, x)


def beyond_tflm(depth: int, scale: float, beta: float) -> bool:
    """No SOFTMAX row of `depth` values can stay under TFLite Micro's limit: even at the largest difference (-255)
    each value adds exp(-255 · beta · scale) to the sum, which must stay below 512."""
    return depth * np.exp(-255 * scale * beta) >= 512


# -- grids -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("scale", SCALES)
def test_softmax_grid(scale, beta, depth):
    compared = run_case(Op.SOFTMAX, scale, beta, depth, seed=depth)
    assert compared > 0 or beyond_tflm(depth, scale, beta)  # else every row was left out for no reason


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("scale", SCALES)
def test_log_softmax_grid(scale, depth):
    assert run_case(Op.LOG_SOFTMAX, scale, 1.0, depth, seed=depth + 1) > 0


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", [Op.SOFTMAX, Op.LOG_SOFTMAX])
def test_leading_shapes(op, shape):
    """Any leading shape: the op works along the last axis, and softmax_params counts its rows."""
    rng = np.random.default_rng(len(shape))
    for scale in (0.02, 0.25):
        graph = softmax_graph(op, shape, scale, beta=0.7 if op is Op.SOFTMAX else 1.0)
        assert assert_bit_exact(graph, rng.integers(-128, 128, shape).astype(np.int8)) == np.prod(shape)
        fields = softmax_params(graph, graph.nodes[0])
        assert (fields["rows"], fields["depth"]) == (int(np.prod(shape[:-1])), shape[-1])


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([Op.SOFTMAX, Op.LOG_SOFTMAX]), st.floats(-10, 1), st.floats(0.1, 3.0),
       st.integers(1, 300), st.integers(0, 2**32 - 1))
def test_random_scales_and_rows(op, log2_scale, beta, depth, seed):
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 12))
    x = rng.integers(-128, 128, (rows, depth))
    x = np.clip(x.max() - rng.geometric(rng.uniform(0.05, 0.9), x.shape) + 1, -128, 127).astype(np.int8)
    graph = softmax_graph(op, x.shape, 2.0 ** log2_scale, beta if op is Op.SOFTMAX else 1.0,
                          int(rng.integers(-128, 128)))
    assert assert_bit_exact(graph, x) == x.size


# -- what TFLite Micro refuses ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("op,out", [(Op.SOFTMAX, QParams.per_tensor(1 / 255, -128)),
                                    (Op.SOFTMAX, QParams.per_tensor(1 / 256, 0)),
                                    (Op.LOG_SOFTMAX, QParams.per_tensor(1 / 16, 0)),
                                    (Op.LOG_SOFTMAX, QParams.per_tensor(1 / 256, 127))])
def test_other_output_quantisation_is_refused(op, out):
    graph = softmax_graph(op, (1, 10), 0.1, out=out)
    data = to_tflite(graph)
    with pytest.raises(KilobyteError, match="cannot prepare"):
        tflm.run_tflm(data, np.zeros((1, 10), np.int8))
    where = f"operator 0 \\({op.value}, output '{graph.outputs[0]}'\\)"
    with pytest.raises(UnsupportedOpError, match=f"{where}.*zero point"):
        from_tflite(data)
    with pytest.raises(KilobyteError, match=f"node '{graph.nodes[0].name}' \\({op.value}\\).*refuses"):
        run_int8(graph, np.zeros((1, 10), np.int8))


def test_tflm_aborts_where_the_reference_raises(tmp_path):
    """512 equal values: the exps sum to 512, TFLM's output shift check fails and the process aborts."""
    graph = softmax_graph(Op.SOFTMAX, (1, 512), 1e-3)
    x = np.zeros((1, 512), np.int8)
    with pytest.raises(KilobyteError, match="softmax_0.*sum to 512"):
        run_int8(graph, x)
    model = tmp_path / "m.tflite"
    model.write_bytes(to_tflite(graph))
    script = textwrap.dedent(f"""
        import numpy as np
        from kilobyte.targets.tflm import run_tflm
        run_tflm(open({str(model)!r}, 'rb').read(), np.zeros((1, 512), np.int8))
        print('survived')
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "survived" not in res.stdout


def test_511_equal_values_run():
    graph = softmax_graph(Op.SOFTMAX, (1, 511), 1e-3)
    assert assert_bit_exact(graph, np.zeros((1, 511), np.int8)) == 511


def test_log_softmax_overflow_raises():
    graph = softmax_graph(Op.LOG_SOFTMAX, (1, 4096), 1e-3)
    with pytest.raises(KilobyteError, match="log_softmax_0.*overflows"):
        run_int8(graph, np.zeros((1, 4096), np.int8))
    assert run_int8(graph, np.resize(np.int8([0, -128]), (1, 4096)))[graph.outputs[0]].shape == (1, 4096)


def test_log_softmax_round_trips_through_tflite():
    graph = softmax_graph(Op.LOG_SOFTMAX, (1, 3, 5), 0.05)
    back = from_tflite(to_tflite(graph))
    assert [n.op for n in back.nodes] == [Op.LOG_SOFTMAX]
    assert back.tensors[back.outputs[0]].qparams == LOG_SOFTMAX_OUT
