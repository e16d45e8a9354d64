"""Published numbers trace to results files: README.md and docs/benchmarks.md against bench/results/.

The convention (docs/benchmarks.md, "How the numbers are checked"): a figure block — a fenced code block, a table or a
paragraph — is followed, after at most blank lines, by one line

    Source: `COMMAND` → `bench/results/FILE.json`[, `bench/results/OTHER.json` ...]

(`FILE.json#key.0.key` narrows a file to one object, a number indexing a list: the figures of one run of a file that
holds several), and then the block's figures must be in those files:
- a code block whose results file stores the command's printed output (`stdout`, bench/bench_readme.py) must show
  only lines of that output (`...` marks lines left out; a `$ COMMAND` line must be the stored command);
- any other code block, and each body row of a table, shows only numbers that some value of the file gives at the
  doc's rounding (a row: all its numbers from one record of the file — one element of a list of objects);
- in a paragraph, the **bold** figures are the ones checked (a stored output's printed numbers count as values).
A number counts as given by a value v when v, or v in the unit written after the number (% of a fraction, kB of
bytes or kB, M of a count, ms / µs of seconds or ms, min of seconds), rounds to it. So a block that drifts from its
file (the README's 18.4 kB against a stale 18.9 kB in vs_tflm.json) fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "docs" / "benchmarks.md"]
SOURCE = re.compile(r"^Source: `([^`]+)` → ((?:`bench/results/[^`]+`(?:, )?)+)\s*$")
# a number not glued to a word or path (r40, w0.35, m7, 1x28, conv_2d_1), with the unit written after it
NUMBER = re.compile(r"(?<![\w.,/+-])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?![\w.]?\d)"
                    r"\s?(%|kB|KB|KiB|MB|ms|µs|min\b|s\b|M\b|K\b|B\b|×|x\b)?")
SCALES = {  # unit -> the factors a stored value may be multiplied by to give the figure
    "%": (1, 100), "kB": (1 / 1024, 1 / 1000, 1), "KB": (1 / 1024, 1 / 1000, 1), "KiB": (1 / 1024, 1),
    "MB": (1 / 1024 ** 2, 1e-6, 1), "B": (1,), "M": (1e-6, 1), "K": (1e-3, 1), "ms": (1, 1e3), "µs": (1, 1e6, 1e3),
    "s": (1,), "min": (1, 1 / 60), "×": (1,), "x": (1,),
}
ANY_SCALE = (1, 100, 1 / 1024, 1e-6, 1e3, 1 / 60)


def numbers(text: str) -> list[tuple[str, float, int, str | None]]:
    """(as written, value, decimals, unit) of each figure in `text`, inline code and links left out."""
    text = re.sub(r"`[^`]*`|\]\([^)]*\)", " ", text)
    found = []
    for m in NUMBER.finditer(text):
        whole, frac, unit = m.group(1), m.group(2) or "", m.group(3)
        found.append((whole + frac, float(whole.replace(",", "") + frac), len(frac) - 1 if frac else 0, unit))
    return found


def leaves(obj) -> list[float]:
    if isinstance(obj, bool):
        return []
    if isinstance(obj, (int, float)):
        return [float(obj)]
    if isinstance(obj, dict):
        obj = list(obj.values())
    return [v for item in obj for v in leaves(item)] if isinstance(obj, list) else []


def values_of(result) -> list[float]:
    """A results file's values: its numbers, and those printed in a stored output (`stdout`: a list of lines)."""
    printed = result.get("stdout", []) if isinstance(result, dict) else []
    return leaves(result) + [f[1] for line in printed for f in numbers(line)]


def records(obj) -> list:
    """The objects that are elements of a list, anywhere in `obj` (a results file's rows)."""
    found = []
    if isinstance(obj, dict):
        for v in obj.values():
            found += records(v)
    elif isinstance(obj, list):
        for v in obj:
            found += ([v] if isinstance(v, dict) else []) + records(v)
    return found


def given_by(figure: tuple[str, float, int, str | None], values: list[float]) -> bool:
    _, x, decimals, unit = figure
    tolerance = 0.5 * 10 ** -decimals + 1e-9
    return any(abs(v * f - x) <= tolerance for v in values for f in SCALES.get(unit, ANY_SCALE))


def blocks(path: Path):
    """(line number of the Source line, command, results files, block kind, block lines) for each Source line."""
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        m = SOURCE.match(line)
        if not m:
            continue
        files = re.findall(r"`(bench/results/[^`]+)`", m.group(2))  # each FILE.json or FILE.json#key.path
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        end = j + 1
        if lines[j].startswith("```"):
            j -= 1
            while not lines[j].startswith("```"):
                j -= 1
            yield i + 1, m.group(1), files, "code", lines[j + 1:end - 1]
        elif lines[j].startswith("|"):
            while j >= 0 and lines[j].startswith("|"):
                j -= 1
            yield i + 1, m.group(1), files, "table", lines[j + 1:end]
        else:
            while j >= 0 and lines[j].strip():
                j -= 1
            yield i + 1, m.group(1), files, "paragraph", lines[j + 1:end]


CASES = [(path, *b) for path in DOCS for b in blocks(path)]


def test_the_docs_have_source_lines():
    """The README's headline figures and benchmarks.md's tables are covered (at least this many blocks)."""
    per_doc = {path.name: sum(c[0] == path for c in CASES) for path in DOCS}
    assert per_doc["README.md"] >= 4 and per_doc["benchmarks.md"] >= 2, per_doc


def test_every_cited_results_file_exists():
    """Every bench/results path either doc names, in a Source line or not, is a file in the repository."""
    for path in DOCS:
        for name in re.findall(r"bench/results/[\w./-]+\.json", path.read_text()):
            assert (ROOT / name).is_file(), f"{path.name} cites {name}, which does not exist"


@pytest.mark.parametrize("path, line, command, files, kind, block", CASES,
                         ids=[f"{c[0].name}:{c[1]}" for c in CASES])
def test_block_figures_are_in_its_results_files(path, line, command, files, kind, block):
    results = [load_result(f) for f in files]
    if kind == "code" and any("stdout" in r for r in results):
        check_output(block, results)
    elif kind == "table":
        rows = [row for row in block[2:] if row.strip("|- ")]  # header and |---| left out
        candidates = [rec for r in results for rec in records(r)] or results
        for row in rows:
            figures = numbers(row)
            assert any(all(given_by(f, leaves(rec)) for f in figures) for rec in candidates), \
                f"{path.name}:{line}: no record of {files} holds all of {[f[0] for f in figures]} in row {row!r}"
    else:
        text = "\n".join(block)
        if kind == "paragraph":
            text = " ".join(re.findall(r"\*\*(.+?)\*\*", text))
        figures = numbers(text)
        assert figures, f"{path.name}:{line}: the block above the Source line shows no figure to check"
        values = [v for r in results for v in values_of(r)]
        missing = [f[0] + (f[3] or "") for f in figures if not given_by(f, values)]
        assert not missing, f"{path.name}:{line}: {missing} are not in {files}"


def load_result(cited: str):
    """A cited results file, or the object at its `#key.key` path."""
    name, _, path = cited.partition("#")
    obj = json.loads((ROOT / name).read_text())
    for key in filter(None, path.split(".")):
        obj = obj[int(key)] if isinstance(obj, list) else obj[key]
    return obj


def check_output(block: list[str], results: list[dict]) -> None:
    """A printed-output block: every line shown is a line the stored run printed; `$ CMD` is the stored command."""
    printed = {line.rstrip() for r in results for line in r.get("stdout", [])}
    commands = {"$ " + r["command"] for r in results if "command" in r}
    for line in block:
        shown = line.rstrip()
        if not shown or shown == "...":
            continue
        if shown.startswith("$ "):
            assert shown in commands, f"{shown!r} is not the stored command ({commands})"
        else:
            assert shown in printed, f"{shown!r} is not a line of the stored output"


def test_the_checker_catches_drift():
    """The rules above on made-up data: 18.4 kB is 18,816 B, not 19,392 B; 98.4 % is 0.984; rows are per record."""
    assert given_by(numbers("18.4 kB")[0], [18816.0]) and not given_by(numbers("18.4 kB")[0], [19392.0])
    assert given_by(numbers("98.4 %")[0], [0.984]) and not given_by(numbers("98.4 %")[0], [0.989])
    assert [f[0] for f in numbers("w0.35 r40 conv_2d_1 1x28x28x16 `--minutes 3` 2,177,024 MACs 1.99×")] == \
        ["2,177,024", "1.99"]
    rows = [{"a": 1.0, "b": 2.0}, {"a": 3.0, "b": 4.0}]
    assert not any(all(given_by(f, leaves(r)) for f in numbers("| 1 | 4 |")) for r in records(rows))
