"""Shared int8 unary-op test cases: one-op graphs over every int8 value and the parameter sets they run with.

Used by tests/interp/test_unary_vs_tflm.py (reference vs TFLite Micro), tests/runtime/test_lut_kernel.py (kb_lut vs
the reference) and tests/codegen/test_unary_codegen.py (compiled models), so all three compare on the same cases.
"""

from __future__ import annotations

import numpy as np

from kilobyte.ir import GraphBuilder, LeakyReluAttrs, Op, QParams

ALL_INT8 = np.arange(-128, 128, dtype=np.int8).reshape(1, 16, 16, 1)  # every int8 value once
LOGISTIC_OUT = (1 / 256, -128)
TANH_OUT = (1 / 128, 0)

# Scales whose float32 quotient (or product with alpha) rounds onto a tie that the double one misses: TFLite Micro
# computes LEAKY_RELU's and RELU's multipliers in double, and these tables show it (s_in / s_out is 1.25 in float32).
TIE_CASES = [((0.042607866, -3), (0.034086294, 20), 0.15), ((0.06804366, 60), (0.054434925, -20), 0.2),
             ((0.013778362, 60), (0.01102269, -20), -0.25)]

# (op, input (scale, zero point), output (scale, zero point), alpha): scales from 1e-3 to 2, zero points across the
# range, outputs finer and coarser than inputs; alphas negative, small, above 1.
CASES = [
    *((Op.LOGISTIC, q, LOGISTIC_OUT, 0.0) for q in [(0.1, 0), (0.05, -20), (0.02, 100), (0.5, -128), (0.003, 3),
                                                    (1.0, 127), (2.0, -7), (0.0625, 0)]),
    *((Op.TANH, q, TANH_OUT, 0.0) for q in [(0.1, 0), (0.05, -20), (0.02, 100), (0.5, -128), (0.003, 3), (1.0, 127),
                                            (2.0, -7), (0.0625, 0), (0.01, -50)]),
    *((Op.ELU, q_in, q_out, 0.0) for q_in, q_out in [((0.1, 0), (0.07, 30)), ((0.05, -20), (0.05, -20)),
                                                      ((0.02, 100), (0.01, -128)), ((0.5, -128), (0.3, 50)),
                                                      ((0.003, 3), (0.004, -100)), ((0.04, 10), (0.02, -10)),
                                                      ((1.0, 0), (0.01, 0))]),
    *((Op.HARD_SWISH, q_in, q_out, 0.0) for q_in, q_out in [((0.1, 0), (0.07, -60)), ((0.05, -20), (0.15, 10)),
                                                             ((0.02, 100), (0.014, -128)), ((0.5, -128), (1.5, 10)),
                                                             ((0.003, 3), (0.0021, -60)), ((0.04, 10), (0.04, 10)),
                                                             ((0.2, -100), (0.02, -128)), ((1.0, 5), (0.03, 0))]),
    *((Op.LEAKY_RELU, q_in, q_out, alpha) for q_in, q_out, alpha in [
        ((0.1, 0), (0.09, -5), 0.2), ((0.1, 0), (0.13, 7), -0.3), ((0.05, -20), (0.065, 7), 1.7),
        ((0.02, 100), (0.018, -5), 0.01), ((0.5, -128), (0.45, -128), 0.1), ((0.003, 3), (0.0039, 7), 0.5),
        ((0.04, 10), (0.04, 10), 0.2), ((0.3, 0), (0.05, 30), -1.5),
        *TIE_CASES]),
    *((Op.RELU, q_in, q_out, 0.0) for q_in, q_out in [((0.1, 0), (0.08, -128)), ((0.05, -20), (0.05, -20)),
                                                       ((0.02, 100), (0.04, -100)), ((0.5, -128), (0.25, 0)),
                                                       TIE_CASES[0][:2]]),
    *((Op.RELU6, q, q, 0.0) for q in [(0.1, 0), (0.05, -20), (0.02, 100), (0.5, -128), (0.01, -128)]),
]


# Ops TFLite Micro has no int8 kernel for (its EXP and LOG take float32 only): checked against TFLite's interpreter.
# EXP's inputs stay where exp(x) / s_out fits int32 (TFLite's float -> int conversion is undefined beyond).
LITERT_CASES = [
    *((Op.RELU_N1_TO_1, q_in, q_out, 0.0) for q_in, q_out in [
        ((0.05, -10), (0.03, 5)), ((0.1, 0), (0.2, -100)), ((0.02, 100), (0.01, -128)), ((0.2, -128), (0.01, 0)),
        ((0.003, 3), (0.004, -100)), ((0.01, -128), (1 / 128, 0)), *(c[:2] for c in TIE_CASES)]),
    *((Op.EXP, q_in, q_out, 0.0) for q_in, q_out in [
        ((0.05, -128), (0.03, 5)), ((0.02, -128), (0.05, 100)), ((0.05, -10), (0.03, 5)), ((0.1, 0), (0.2, -100)),
        ((0.02, 100), (0.01, -128)), ((0.003, 3), (0.004, -100)), TIE_CASES[1][:2]]),
    *((Op.LOG, q_in, q_out, 0.0) for q_in, q_out in [
        ((0.05, -128), (0.03, 5)), ((0.02, -128), (0.05, 100)), ((0.05, -10), (0.03, 5)), ((0.1, 0), (0.2, -100)),
        ((0.02, 100), (0.02, 127)), ((0.5, -128), (0.3, 50)), ((0.003, 3), (0.025, 127)), TIE_CASES[1][:2]]),
]


def case_id(case) -> str:
    op, (si, zi), (so, zo), alpha = case
    return f"{op.value.lower()}-{si}:{zi}-{so}:{zo}" + (f"-a{alpha}" if op is Op.LEAKY_RELU else "")


def unary_graph(op: Op, q_in, q_out, alpha: float = 0.0, shape=ALL_INT8.shape):
    """A one-node int8 graph of `op` with the given (scale, zero point) pairs."""
    b = GraphBuilder(op.value.lower())
    x = b.input(tuple(shape), "int8", qparams=QParams.per_tensor(*q_in))
    attrs = LeakyReluAttrs(alpha) if op is Op.LEAKY_RELU else None
    return b.build([b.node(op, [x], attrs, qparams=QParams.per_tensor(*q_out))])
