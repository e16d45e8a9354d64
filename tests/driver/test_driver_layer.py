"""The driver sits above codegen and targets and below what calls it: no module of `kilobyte/driver/` imports
`prune`, `nas`, `report`, `api` or `cli` (at module level or inside a function), and no stage below the driver
imports it — the imports that `nas/deploy.py` and `codegen/verify.py` used to take upwards."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kilobyte"
ABOVE = {"prune", "nas", "report", "api", "cli"}
BELOW = ["errors", "ir", "interp", "transforms", "analysis", "quant", "export", "frontends", "kernels", "schedule",
         "runtime", "targets", "codegen", "zoo", "data", "train"]


def imported_stages(path: Path, parts: tuple[str, ...] | None = None) -> set[str]:
    """The top-level `kilobyte` packages and modules `path` imports (absolute or relative; a relative import is
    resolved from `parts`, the module's dotted name, by default where `path` lies in the package)."""
    parts = parts or path.relative_to(PACKAGE.parent).with_suffix("").parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = list(parts[:len(parts) - node.level]) if node.level else []
            names = (base + (node.module or "").split(".")) if node.module else base
            names = [n for n in names if n]
            if names[:1] == ["kilobyte"] and len(names) > 1:
                found.add(names[1])
            elif names == ["kilobyte"]:
                found |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("kilobyte.")}
    return found


def test_the_driver_imports_nothing_above_it():
    bad = {str(p.relative_to(PACKAGE)): sorted(imported_stages(p) & ABOVE) for p in (PACKAGE / "driver").glob("*.py")}
    assert not {k: v for k, v in bad.items() if v}


def test_no_stage_below_imports_the_driver():
    below = [p for stage in BELOW for p in (PACKAGE / stage).rglob("*.py")]
    below += [PACKAGE / f"{stage}.py" for stage in BELOW if (PACKAGE / f"{stage}.py").is_file()]
    bad = sorted(str(p.relative_to(PACKAGE)) for p in below if "driver" in imported_stages(p))
    assert not bad


def test_the_scan_sees_every_form_of_import(tmp_path):
    """The checker itself, on a file read as a module of the driver: `from ..x import`, `from .. import x`,
    `import kilobyte.x` and `from kilobyte.x import` each count as importing stage x; `from .x` is the driver itself."""
    probe = tmp_path / "probe.py"
    probe.write_text("from ..cli import main\nfrom .. import api\nimport kilobyte.nas.core\n"
                     "from kilobyte.report import tables\nfrom .fit import kb\n")
    assert imported_stages(probe, ("kilobyte", "driver", "probe")) == {"cli", "api", "nas", "report", "driver"}
