"""pyproject's extras give what the README says they give: its first command (`pip install -e ".[all]"`) installs
what the main job's measured Flash/SRAM need (the `arm` extra: pyelftools, unicorn), and `dev` holds all of `all`;
and its package data ships every data file of the package (a wheel, unlike the editable install, has only those)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def extras() -> dict[str, set[str]]:
    """Each extra's requirements, with `kilobyte[a,b]` self-references expanded."""
    raw = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def expand(name: str) -> set[str]:
        out = set()
        for req in raw[name]:
            m = re.fullmatch(r"kilobyte\[([\w,]+)\]", req)
            out |= set().union(*(expand(e) for e in m.group(1).split(","))) if m else {req}
        return out
    return {name: expand(name) for name in raw}


def test_all_has_the_arm_extra_and_dev_has_all():
    ex = extras()
    assert ex["arm"] <= ex["all"], "the README's `.[all]` would print estimates where it shows measured figures"
    assert ex["all"] <= ex["dev"]
    assert {"pyelftools", "unicorn"} <= {re.split(r"[<>=\[]", r)[0] for r in ex["all"]}


def test_the_readme_installs_all_first():
    readme = (ROOT / "README.md").read_text()
    assert 'pip install -e ".[all]" && kilobyte search' in readme


def test_package_data_ships_every_data_file():
    """Every file under kilobyte/ that is not Python (runtime C, firmware, the device catalogue, fitted constants)
    matches one of pyproject's package-data globs, as setuptools expands them: a wheel would lack any other (the
    shipped latency constants of schedule/ once did)."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["kilobyte"]
    package = ROOT / "kilobyte"
    shipped = {p for g in globs for p in package.glob(g) if p.is_file()}
    data = {p for p in package.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")
            and "__pycache__" not in p.parts}
    missing = sorted(str(p.relative_to(ROOT)) for p in data - shipped)
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"
