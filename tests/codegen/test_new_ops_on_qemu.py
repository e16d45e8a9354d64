"""The elementwise ops added for real models (MUL, SUB, MAXIMUM, MINIMUM, ADD / SUB / MUL by broadcast constants
(`kb_add_const`, `kb_mul_const`), the table ops LOGISTIC, TANH, ELU, HARD_SWISH, LEAKY_RELU, RELU, RELU_N1_TO_1,
EXP, LOG, and PRELU's table per channel), the int8 MEAN and the data-movement ops (TRANSPOSE at a model's NCHW
head, STRIDED_SLICE into concat slices, REDUCE_MAX, TILE) compiled for Cortex-M: bit-exact with the numpy
reference under QEMU (M7), built with the portable and the DSP kernel sets
(`verify_on_target`: QEMU == host C == reference).
"""

from __future__ import annotations

import pytest
from random_nets import movement_model
from test_binary_codegen import CONST_STEPS, binary_model, const_chain_model
from test_prelu_codegen import prelu_model
from test_unary_codegen import unary_model

from kilobyte.codegen import compile_graph
from kilobyte.ir import Op
from kilobyte.schedule.plan_types import PlanOptions

MODELS = [("mul", lambda: binary_model(Op.MUL, "per-channel")), ("sub", lambda: binary_model(Op.SUB, "equal")),
          ("maximum", lambda: binary_model(Op.MAXIMUM, "per-channel")),
          ("minimum", lambda: binary_model(Op.MINIMUM, "equal")),
          *((f"const-operands-{k}", lambda k=k: const_chain_model(CONST_STEPS[k], seed=k))
            for k in range(len(CONST_STEPS))),
          *((op.value.lower(), lambda op=op: unary_model(op, seed=3))
            for op in (Op.LOGISTIC, Op.TANH, Op.ELU, Op.HARD_SWISH, Op.LEAKY_RELU, Op.RELU, Op.RELU_N1_TO_1, Op.EXP,
                       Op.LOG)),
          ("prelu", lambda: prelu_model(seed=3)),
          *((kind, lambda kind=kind: movement_model(kind, seed=5))
            for kind in ("transpose-nchw-head", "slice-rows", "reduce-max-hw", "tile"))]


@pytest.mark.parametrize("name,build", MODELS, ids=[m[0] for m in MODELS])
def test_bit_exact_on_cortex_m7(tmp_path, name, build):
    from kilobyte.driver import verify_on_target

    for kernels in ("portable", "dsp"):
        result = compile_graph(build(), tmp_path / kernels, PlanOptions(kernels=kernels))
        report = verify_on_target(result.out_dir, "cortex-m7", n_random=2)
        assert report.ok and report.inputs == 2, f"{name} {kernels}: {report.mismatches}"
