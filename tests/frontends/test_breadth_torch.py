"""Breadth (PyTorch): six ordinary modules a new user tries first, from `nn.Module` to C verified against TFLite Micro.

Each case of tests/frontends/breadth_models.py is imported with `from_torch` and taken through `check_pipeline`:
float IR == PyTorch, quantised, compiled, the C == numpy reference == TFLite Micro byte for byte, and the int8 output
within a few quantisation steps of PyTorch's. The three modules that need an op the IR does not have yet (RESIZE,
TRANSPOSE_CONV, GELU) are strict xfails: they fail today with a one-line `UnsupportedOpError` naming the node, and
flip (failing the run, so it is noticed) once their op lands.
"""

from __future__ import annotations

import pytest
import torch
from breadth_models import CASES, build, check_pipeline

from kilobyte.errors import KilobyteError
from kilobyte.frontends import from_torch
from kilobyte.ir import Op


def _params():
    for name, case in CASES.items():
        marks = [pytest.mark.xfail(strict=True, raises=KilobyteError, reason=f"needs {case.needs}")] \
            if case.needs else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", _params())
def test_module_imports_quantises_and_runs_bit_exact(name, tmp_path):
    module = build(name)

    def reference(x):
        with torch.no_grad():
            return module(torch.from_numpy(x)).numpy()

    result = check_pipeline(name, from_torch(module, CASES[name].shape), reference, tmp_path / name)
    expected = {"mobilenet_v3_block": {Op.HARD_SWISH, Op.LOGISTIC, Op.MUL, Op.MEAN},
                "lenet": {Op.LOG_SOFTMAX}, "kws_conv1d": {Op.CONV_2D, Op.DEPTHWISE_CONV_2D, Op.MAX_POOL_2D, Op.MEAN}}
    assert expected.get(name, set()) <= set(result["ops"])


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.needs])
def test_modules_waiting_for_an_op_name_node_and_op(name):
    """Until its op lands, each module fails on the first layer that needs it, in one line naming the layer."""
    with pytest.raises(KilobyteError) as e:
        from_torch(build(name), CASES[name].shape)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("node '") and "which the IR does not have yet" in msg
    assert CASES[name].needs.split("_")[0] in msg
