"""docs/ops.md is exactly what `kilobyte.report.ops_table` generates from the code."""

from pathlib import Path

from kilobyte.codegen import layers
from kilobyte.ir import Op
from kilobyte.report.ops_table import ops_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "ops.md"


def test_ops_page_matches_the_code():
    assert DOC.read_text() == ops_table(), "regenerate: python -m kilobyte.report.ops_table > docs/ops.md"


# what the generated library cannot run: training ops the transforms remove, and the float DEQUANTIZE that only
# `<prefix>_invoke_float`'s tail runs
NO_C = {Op.BATCH_NORM, Op.IDENTITY, Op.DEQUANTIZE}


def test_every_op_has_a_row_and_c_ops_say_so():
    text = ops_table()
    for op in Op:
        row = next(line for line in text.splitlines() if line.startswith(f"| {op.value} |"))
        assert row.split(" | ")[1] == ("–" if op in NO_C else "yes")
        assert (layers.emitter(op) is None) == (op in NO_C)
