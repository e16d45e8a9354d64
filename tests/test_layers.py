"""Imports run only down the pipeline (in the spirit of import-linter): the import graph of `kilobyte/` is built from
the source with `ast` -- module-level and function-level imports, relative and absolute -- and every module is mapped
to its entry of `docs/layout.md`'s "Import order" list, read from the docs so that the order is written once.

Four rules, each failure naming the file, the line and the imported name:
(a) no import of a later entry; (b) no cycle between modules (a strongly connected component of the module graph);
(c) no private name (`_x`) imported from another module; (d) a function-level import only of an optional heavy
dependency (`HEAVY`), or of a kilobyte module that imports one when it loads, saying which with `# defers <package>`
on the import (checked: the module is imported in a fresh interpreter and must bring that package in) — so that the
CLI and `import kilobyte` stay quick and work without the extras; never of anything else.

Violations that other work in flight still has to remove are listed in `KNOWN` with the reason; the test fails on a
violation not listed and on a listed one that no longer exists, so the list only shrinks.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "kilobyte"
LAYOUT = ROOT / "docs" / "layout.md"

# The optional heavy dependencies (pyproject's extras, by import name): the only packages a function may import, so
# that `import kilobyte` and the CLI work without them and stay quick.
HEAVY = frozenset({
    "torch", "onnx", "onnxruntime", "tflite", "flatbuffers", "tflite_micro", "ai_edge_litert", "tflite_runtime",
    "unicorn", "elftools", "ray", "matplotlib", "PIL", "sklearn", "mlxtend",
})


@dataclass(frozen=True)
class Import:
    """One imported name: `from a.b import c` in `kilobyte/x.py` line 3 gives target `a.b`, name `c`."""

    file: str  # the importing file, relative to the repository root
    line: int
    module: str  # the importing module, dotted
    target: str  # the module imported from: the longest prefix of `imported` that is a module of the package
    imported: str  # the full dotted name: `a.b.c`
    in_function: bool
    defers: str | None = None  # the package named by a `# defers <package>` comment on the statement


@dataclass(frozen=True)
class Violation:
    rule: str
    imp: Import
    detail: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.imp.file, self.imp.imported)

    def __str__(self) -> str:
        return f"{self.imp.file}:{self.imp.line} imports {self.imp.imported}: {self.rule} ({self.detail})"


# ---- the layer order, read from the docs -------------------------------------------------------------------------

def layer_order(text: str) -> list[tuple[str, ...]]:
    """The "Import order" section's numbered entries, lowest first, each as the modules it names: a folder "`ir/`"
    as the prefix `kilobyte.ir.` (the package and everything in it), a file "`quant/arith.py`" as the one module
    `kilobyte.quant.arith`, "`__init__.py`" as the package root `kilobyte`."""
    section = text.split("## Import order", 1)[1].split("\n## ", 1)[0]
    entries = []
    for line in section.splitlines():
        if re.match(r"\d+\. `", line):
            names = re.findall(r"`([^`]+)`", line.split(" — ", 1)[0])
            entries.append(tuple(dotted(name) for name in names))
    return entries


def dotted(path: str) -> str:
    """`ir/` -> `kilobyte.ir.`; `quant/arith.py` -> `kilobyte.quant.arith`; `__init__.py` -> `kilobyte`."""
    if path.endswith("/"):
        return ".".join([PACKAGE] + path.strip("/").split("/")) + "."
    parts = [PACKAGE] + path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str, order: list[tuple[str, ...]]) -> int | None:
    """Index of the entry naming `module` itself, else of the entry whose folder holds it most closely (a module of
    `quant/` is in `quant/`'s entry unless an entry names the module); None if no entry does."""
    best, best_len = None, -1
    for index, names in enumerate(order):
        for name in names:
            if module == name:
                return index
            if name.endswith(".") and (module + ".").startswith(name) and len(name) > best_len:
                best, best_len = index, len(name)
    return best


# ---- the import graph, from the source ---------------------------------------------------------------------------

def package_modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every `.py` under `root/kilobyte`."""
    modules = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        rel = path.relative_to(root).with_suffix("").parts
        modules[".".join(rel[:-1] if rel[-1] == "__init__" else rel)] = path
    return modules


def function_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside a function body (imports there run only when the function is called)."""
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inside.update(id(n) for n in ast.walk(node) if n is not node)
    return inside


def imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """Full dotted names one import statement binds, relative imports resolved against `module`."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        here = here[:len(here) - node.level + 1]
        base = ".".join(here + ([node.module] if node.module else []))
    return [f"{base}.{alias.name}" for alias in node.names]


def longest_module(name: str, modules: dict[str, Path]) -> str:
    """The module a dotted name lives in (`kilobyte.ir.Graph` -> `kilobyte.ir`); for a name outside the package,
    its top-level package."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return parts[0]
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return PACKAGE


def imports(root: Path) -> list[Import]:
    """Every imported name of every module of the package."""
    modules = package_modules(root)
    found = []
    for module, path in modules.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text, filename=str(path))
        inside = function_nodes(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            said = re.search(r"#\s*defers (\w+)", " ".join(lines[node.lineno - 1:node.end_lineno]))
            for name in imported_names(node, module, path.name == "__init__.py"):
                found.append(Import(str(path.relative_to(root)), node.lineno, module, longest_module(name, modules),
                                    name, id(node) in inside, said.group(1) if said else None))
    return found


# ---- the four rules ----------------------------------------------------------------------------------------------

def upward(found: list[Import], order: list[tuple[str, ...]]) -> list[Violation]:
    out = []
    for imp in found:
        if imp.target.split(".")[0] != PACKAGE:
            continue
        src, dst = layer_of(imp.module, order), layer_of(imp.target, order)
        if src is not None and dst is not None and dst > src:
            out.append(Violation("upward import", imp, f"entry {dst + 1} `{order[dst][0]}` is above entry "
                                                       f"{src + 1} `{order[src][0]}`"))
    return out


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components with more than one module (iterative: no recursion limit)."""
    index, low, on_stack, stack, comps, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = set()
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        comp.add(top)
                        if top == node:
                            break
                    if len(comp) > 1:
                        comps.append(comp)
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return comps


def cycles(found: list[Import]) -> list[Violation]:
    """Every import that lies on a cycle of the module graph (both ends in one strongly connected component)."""
    graph: dict[str, set[str]] = {}
    for imp in found:
        graph.setdefault(imp.module, set())
        if imp.target.split(".")[0] == PACKAGE and imp.target != imp.module:
            graph[imp.module].add(imp.target)
    out = []
    for comp in strongly_connected(graph):
        names = ", ".join(sorted(comp))
        out += [Violation("cycle", imp, f"modules {names}") for imp in found
                if imp.module in comp and imp.target in comp and imp.target != imp.module]
    return out


def private_names(found: list[Import]) -> list[Violation]:
    out = []
    for imp in found:
        last = imp.imported.rsplit(".", 1)[-1]
        if imp.target != imp.module and last.startswith("_") and not last.startswith("__"):
            out.append(Violation("private name", imp, f"`{last}` is private to {imp.target}"))
    return out


@functools.cache
def loads_package(root: Path, module: str, package: str) -> bool:
    """Whether importing `module` (from `root`) in a fresh interpreter imports `package`."""
    code = f"import importlib, sys; importlib.import_module({module!r}); print({package!r} in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(root)}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=root)
    return run.stdout.strip() == "True"


def function_level(found: list[Import], root: Path) -> list[Violation]:
    out = []
    for imp in found:
        if not imp.in_function or imp.imported.split(".")[0] in HEAVY:
            continue
        if imp.defers is None:
            why = ("only optional heavy dependencies (HEAVY) are imported in a function, or a module that imports one "
                   "(`# defers <package>`); move it to the top of the module")
        elif imp.defers not in HEAVY:
            why = f"`# defers {imp.defers}`: not an optional heavy dependency (HEAVY)"
        elif imp.target.split(".")[0] != PACKAGE or not loads_package(root, imp.target, imp.defers):
            why = f"`# defers {imp.defers}`: importing {imp.target} does not import {imp.defers}"
        else:
            continue
        out.append(Violation("function-level import", imp, why))
    return out


def violations(root: Path, order: list[tuple[str, ...]]) -> list[Violation]:
    found = imports(root)
    return upward(found, order) + cycles(found) + private_names(found) + function_level(found, root)


# ---- what other work in flight still has to remove ---------------------------------------------------------------

KNOWN: dict[tuple[str, str], str] = {}  # none left: every import follows the rules


# ---- the tests ---------------------------------------------------------------------------------------------------

def test_the_docs_list_the_layers_lowest_first():
    order = layer_order(LAYOUT.read_text())
    flat = [prefix for entry in order for prefix in entry]
    assert flat[:2] == ["kilobyte", "kilobyte.errors"], flat[:2]
    assert flat.index("kilobyte.ir.") < flat.index("kilobyte.interp.") < flat.index("kilobyte.codegen.") \
        < flat.index("kilobyte.cli.")
    assert len(flat) == len(set(flat)), "an entry is listed twice"


def test_every_module_the_docs_name_exists():
    """A file entry (`quant/arith.py`) must name a module of the package, so that the list cannot keep a moved one;
    a folder entry may name a stage still to come (`ops/`, `driver/`)."""
    modules = package_modules(ROOT)
    stale = [name for entry in layer_order(LAYOUT.read_text()) for name in entry
             if not name.endswith(".") and name not in modules]
    assert not stale, f"docs/layout.md's Import order names modules that do not exist: {stale}"


def test_every_module_has_a_layer():
    order = layer_order(LAYOUT.read_text())
    missing = [str(path.relative_to(ROOT)) for module, path in package_modules(ROOT).items()
               if layer_of(module, order) is None]
    assert not missing, f"modules in no entry of docs/layout.md's Import order: {missing}"


def test_imports_only_run_down_the_layers():
    found = violations(ROOT, layer_order(LAYOUT.read_text()))
    new = sorted({str(v) for v in found if v.key not in KNOWN})
    assert not new, "imports against docs/layout.md's Import order:\n" + "\n".join(new)


def test_known_violations_still_exist():
    found = {v.key for v in violations(ROOT, layer_order(LAYOUT.read_text()))}
    gone = sorted(f"{file}: {name}" for file, name in KNOWN if (file, name) not in found)
    assert not gone, "fixed, so remove from KNOWN:\n" + "\n".join(gone)


# ---- the checker itself, on a small package ----------------------------------------------------------------------

def write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_finds_each_rule(tmp_path):
    write_package(tmp_path, {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "from ..high import thing\nfrom . import b\n",
        "low/b.py": "from .a import _hidden\n",
        "high/__init__.py": "thing = 1\n",
        "high/c.py": "def f():\n    import torch\n    import json\n    from kilobyte.low import a\n",
        "high/d.py": ("def f():\n    from kilobyte.low import a  # defers torch\n"
                     "    from kilobyte.low import b  # defers json\n    from kilobyte.low import t  # defers torch\n"),
        "low/t.py": "import torch\n",
    })
    order = [("kilobyte",), ("kilobyte.low.",), ("kilobyte.high.",)]
    found = {(v.rule, v.imp.file, v.imp.line, v.imp.imported) for v in violations(tmp_path, order)}
    assert found == {
        ("upward import", "kilobyte/low/a.py", 1, "kilobyte.high.thing"),
        ("cycle", "kilobyte/low/a.py", 2, "kilobyte.low.b"),
        ("cycle", "kilobyte/low/b.py", 1, "kilobyte.low.a._hidden"),
        ("private name", "kilobyte/low/b.py", 1, "kilobyte.low.a._hidden"),
        ("function-level import", "kilobyte/high/c.py", 3, "json"),
        ("function-level import", "kilobyte/high/c.py", 4, "kilobyte.low.a"),
        ("function-level import", "kilobyte/high/d.py", 2, "kilobyte.low.a"),  # low.a does not import torch
        ("function-level import", "kilobyte/high/d.py", 3, "kilobyte.low.b"),  # json is not an optional dependency
    }


def test_layer_order_reads_numbered_entries_and_module_entries():
    text = "## Import order\n\nprose `x/`\n\n1. `__init__.py`, `errors.py` — roots\n2. `quant/arith.py` — `y/`\n" \
           "3. `quant/`\n\n## Next\n4. `z/`\n"
    order = layer_order(text)
    assert order == [("kilobyte", "kilobyte.errors"), ("kilobyte.quant.arith",), ("kilobyte.quant.",)]
    assert layer_of("kilobyte.quant.arith", order) == 1
    assert layer_of("kilobyte.quant.calibrate", order) == 2
    assert layer_of("kilobyte.quant", order) == 2
    assert layer_of("kilobyte", order) == 0
    assert layer_of("kilobyte.zoo", order) is None
