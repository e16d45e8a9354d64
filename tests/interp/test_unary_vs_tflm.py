"""int8 LOGISTIC, TANH, ELU, HARD_SWISH, LEAKY_RELU, RELU and RELU6: the reference tables (kilobyte.ops.lut)
against TFLite Micro, exhaustively.

Every output of these ops depends on its input byte alone, so one run over a (1, 16, 16, 1) input holding each int8
value once compares the whole function; tests/unary_cases.py lists the parameter sets (scales, zero points, alphas).
Files TFLite Micro refuses or would misread are refused by the reader and the reference too.
"""

from __future__ import annotations

import numpy as np
import pytest
from litert_oracle import run_litert
from unary_cases import ALL_INT8, CASES, LITERT_CASES, case_id, unary_graph

from kilobyte.errors import KilobyteError, UnsupportedOpError
from kilobyte.export.tflite import to_tflite
from kilobyte.frontends.tflite import from_tflite
from kilobyte.interp import run_int8
from kilobyte.ir import Op
from kilobyte.ops.lut import node_table as unary_node_table
from kilobyte.ops.unary_math import hard_swish_params, logistic_params
from kilobyte.targets import tflm


def tflm_output(graph, x: np.ndarray) -> np.ndarray:
    return tflm.run_tflm(to_tflite(graph), x).outputs[graph.outputs[0]].reshape(x.shape)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_all_256_inputs_equal_tflm(case):
    op, q_in, q_out, alpha = case
    graph = unary_graph(op, q_in, q_out, alpha)
    ours = run_int8(graph, ALL_INT8)[graph.outputs[0]]
    theirs = tflm_output(graph, ALL_INT8)
    differ = np.flatnonzero(ours != theirs)
    assert differ.size == 0, (f"{differ.size} of 256 differ, first at input {ALL_INT8.flat[differ[0]]}: "
                              f"ours {ours.flat[differ[0]]}, TFLM {theirs.flat[differ[0]]}")
    table = unary_node_table(graph, graph.nodes[0])
    assert table.dtype == np.int8 and table.shape == (256,)
    np.testing.assert_array_equal(table, theirs.reshape(-1))  # ALL_INT8 is in table order


@pytest.mark.parametrize("case", LITERT_CASES, ids=case_id)
def test_all_256_inputs_equal_tflite_where_tflm_has_no_int8_kernel(case):
    """RELU_N1_TO_1, EXP and LOG: TFLite's interpreter is the oracle (TFLite Micro refuses the int8 model)."""
    op, q_in, q_out, _ = case
    graph = unary_graph(op, q_in, q_out)
    ours = run_int8(graph, ALL_INT8)[graph.outputs[0]]
    theirs = run_litert(to_tflite(graph), {graph.inputs[0]: ALL_INT8})[graph.outputs[0]]
    differ = np.flatnonzero(ours != theirs)
    assert differ.size == 0, (f"{differ.size} of 256 differ, first at input {ALL_INT8.flat[differ[0]]}: "
                              f"ours {ours.flat[differ[0]]}, TFLite {theirs.flat[differ[0]]}")
    assert len(set(theirs.reshape(-1).tolist())) >= 5


def test_tflm_has_no_int8_kernel_for_exp_log_relu_n1_to_1():
    """What makes TFLite's interpreter the oracle for these ops (`tflm.TFLM_MISSING_OPS`)."""
    for op in (Op.RELU_N1_TO_1, Op.EXP, Op.LOG):
        with pytest.raises(KilobyteError, match="cannot prepare|invoke failed"):
            tflm.run_tflm(to_tflite(unary_graph(op, (0.05, -10), (0.03, 5))), ALL_INT8)
        assert op.value in tflm.TFLM_MISSING_OPS


def test_log_at_or_below_zero_is_the_lowest_value():
    graph = unary_graph(Op.LOG, (0.05, -10), (0.03, 5))
    table = unary_node_table(graph, graph.nodes[0])
    assert np.all(table[:128 - 10 + 1] == -128) and table[128 - 10 + 1] > -128  # inputs -128 .. -10 are <= 0


def test_outputs_are_not_trivial():
    """The cases exercise the functions, not a constant: every table takes several values, and each op has a case
    that uses most of the int8 range (coarse input scales saturate LOGISTIC after a few steps)."""
    for op in (Op.LOGISTIC, Op.TANH, Op.ELU, Op.HARD_SWISH, Op.LEAKY_RELU, Op.RELU, Op.RELU6):
        distinct = []
        for _, q_in, q_out, alpha in (c for c in CASES if c[0] is op):
            graph = unary_graph(op, q_in, q_out, alpha)
            distinct.append(len(set(unary_node_table(graph, graph.nodes[0]).tolist())))
        assert min(distinct) >= 5 and max(distinct) > 100, (op, distinct)


def test_logistic_saturates_beyond_its_radius():
    _, _, radius = logistic_params(0.1)
    graph = unary_graph(Op.LOGISTIC, (0.1, 0), (1 / 256, -128))
    table = unary_node_table(graph, graph.nodes[0])
    assert radius < 128 and table[128 + radius] == 127 and table[128 - radius] == -128
    assert table[128] == 0  # logistic(0) = 1/2: 128 steps of 1/256 above -128


def test_tanh_is_odd_and_saturates_beyond_its_radius():
    """tanh(0) = 0 on the fixed output scale 1/128; |x| at the radius (about 15 / scale) saturates to the int8 ends;
    the kernel mirrors negative inputs, but +1 on scale 1/128 is 128, clamped to 127."""
    _, _, radius = logistic_params(0.2)
    graph = unary_graph(Op.TANH, (0.2, 0), (1 / 128, 0))
    table = unary_node_table(graph, graph.nodes[0]).astype(int)
    assert radius < 128 and table[128 + radius] == 127 and table[128 - radius] == -128 and table[128] == 0
    assert all(table[128 + d] == min(127, -table[128 - d]) for d in range(1, radius))
    assert table[128 + 1] == 25  # tanh(0.2) * 128 = 25.26


def test_tanh_with_another_output_quantisation_is_refused():
    """TFLite Micro's TANH reads no output params (it writes 1/128, zero point 0 regardless), so a file saying
    otherwise runs there with a wrong meaning; the reader and the reference refuse it."""
    graph = unary_graph(Op.TANH, (0.05, 0), (1 / 100, 3))
    with pytest.raises(UnsupportedOpError, match="TANH.*scale 0.0078125 and zero point 0"):
        from_tflite(to_tflite(graph))
    with pytest.raises(KilobyteError, match="node 'tanh_0' \\(TANH\\).*scale 0.0078125 and zero point 0"):
        run_int8(graph, ALL_INT8)


def test_tanh_and_elu_round_trip_through_tflite():
    for op, q_out in ((Op.TANH, (1 / 128, 0)), (Op.ELU, (0.07, 30))):
        graph = unary_graph(op, (0.1, 0), q_out)
        back = from_tflite(to_tflite(graph))
        assert [n.op for n in back.nodes] == [op]
        np.testing.assert_array_equal(run_int8(back, ALL_INT8)[back.outputs[0]],
                                      run_int8(graph, ALL_INT8)[graph.outputs[0]])


def test_leaky_relu_round_trips_through_tflite():
    graph = unary_graph(Op.LEAKY_RELU, (0.1, 3), (0.05, -3), alpha=0.25)
    back = from_tflite(to_tflite(graph))
    assert [n.op for n in back.nodes] == [Op.LEAKY_RELU] and back.nodes[0].attrs.alpha == 0.25
    np.testing.assert_array_equal(run_int8(back, ALL_INT8)[back.outputs[0]],
                                  run_int8(graph, ALL_INT8)[graph.outputs[0]])


def test_hard_swish_and_logistic_round_trip_through_tflite():
    for op, q_out in ((Op.HARD_SWISH, (0.07, -60)), (Op.LOGISTIC, (1 / 256, -128))):
        back = from_tflite(to_tflite(unary_graph(op, (0.1, 0), q_out)))
        assert [n.op for n in back.nodes] == [op]


def test_logistic_with_another_output_quantisation_is_refused():
    graph = unary_graph(Op.LOGISTIC, (0.1, 0), (1 / 256, 0))
    data = to_tflite(graph)
    with pytest.raises(KilobyteError, match="cannot prepare"):  # TFLM checks the zero point
        tflm.run_tflm(data, ALL_INT8)
    with pytest.raises(UnsupportedOpError, match="LOGISTIC.*zero point"):
        from_tflite(data)
    with pytest.raises(KilobyteError, match="node 'logistic_0' \\(LOGISTIC\\).*zero point -128"):
        run_int8(graph, ALL_INT8)
    other_scale = unary_graph(Op.LOGISTIC, (0.1, 0), (1 / 128, -128))  # TFLM would write 1/256 steps regardless
    with pytest.raises(KilobyteError, match="scale 0.00390625"):
        run_int8(other_scale, ALL_INT8)


def test_hard_swish_refuses_what_tflm_refuses():
    graph = unary_graph(Op.HARD_SWISH, (1.0, 0), (1 / 200, 0))  # s_in / (128 s_out) >= 1: a positive exponent
    with pytest.raises(KilobyteError, match="cannot prepare"):
        tflm.run_tflm(to_tflite(graph), ALL_INT8)
    with pytest.raises(KilobyteError, match="hard_swish_0.*at least 128"):
        run_int8(graph, ALL_INT8)
    assert hard_swish_params(1.0, 1 / 100)[3] == 0  # just below the limit TFLM runs it


def test_relu6_with_rescaling_is_refused():
    graph = unary_graph(Op.RELU6, (0.1, 0), (0.05, 0))
    with pytest.raises(KilobyteError, match="relu6_0.*share"):
        run_int8(graph, ALL_INT8)
