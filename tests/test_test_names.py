"""pytest imports a test file outside a package under its bare basename, so two such files with the same name
break collection of the whole suite ("import file mismatch") -- caught here with the names that clash."""
from collections import defaultdict
from pathlib import Path


def test_test_module_basenames_do_not_clash():
    root = Path(__file__).parent
    bare = defaultdict(list)
    for path in root.rglob("test_*.py"):
        if not (path.parent / "__init__.py").exists():
            bare[path.name].append(str(path.relative_to(root)))
    clashes = {name: paths for name, paths in bare.items() if len(paths) > 1}
    assert not clashes, f"test files with the same basename outside packages: {clashes}"
