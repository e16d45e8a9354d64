"""The README's CLI runs whose output it prints: `kilobyte demo`, the Quickstart's `kilobyte search --out
/tmp/search` and the `kilobyte prune` example, run as a user types them, their printed output (stdout; progress bars
go to stderr) and, where the command writes one, its report stored in bench/results/readme_demo.json,
readme_search.json and readme_prune.json. tests/test_docs_numbers.py checks that every line the README shows of
these outputs is a line of the stored output, so re-running this script and pasting its output is how those README
blocks change.

    python bench/bench_readme.py                 # all three (about 1 + 10 + 5 minutes on an idle 2-core machine)
    python bench/bench_readme.py --only prune
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
# name -> (the README's command after `kilobyte`, the folder it writes (the README's paths, so that the printed
# paths are the README's; replaced), the report file it writes there or None)
RUNS = {
    "demo": (["demo", "--out", "/tmp/kilobyte-demo"], "/tmp/kilobyte-demo", None),
    "search": (["search", "--out", "/tmp/search"], "/tmp/search", "report.json"),  # the Quickstart's main job
    "prune": (["prune", "vgg-small", "--data", "mnist", "--resolution", "48", "--sparsity", "0.9", "--method",
               "filterlet", "--target", "cortex-m7", "--out", "/tmp/kbp/readme"], "/tmp/kbp/readme", "report.json"),
}


def run(name: str) -> dict:
    """One README command, its folder emptied first: its command line, stdout lines, exit code, seconds, report."""
    argv, folder, report_name = RUNS[name]
    out = Path(folder)
    shutil.rmtree(out, ignore_errors=True)
    start = time.time()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's kilobyte
    proc = subprocess.run([sys.executable, "-m", "kilobyte", *argv], capture_output=True, text=True, cwd=ROOT,
                          env=env)
    seconds = time.time() - start
    if proc.returncode not in (0, 2):  # 2: does not fit, still a report
        raise SystemExit(f"kilobyte {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    report = json.loads((out / report_name).read_text()) if report_name else None
    return {"command": "kilobyte " + " ".join(argv), "exit_code": proc.returncode, "seconds": round(seconds, 1),
            "stdout": proc.stdout.splitlines(), "report": report}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(RUNS), action="append", help="run only these (default: all)")
    args = ap.parse_args()
    meta = {"machine": platform.platform(), "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}
    for name in args.only or sorted(RUNS):
        result = {"meta": meta, **run(name)}
        path = RESULTS / f"readme_{name}.json"
        path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
        print(f"$ {result['command']}  ({result['seconds']} s) -> {path.relative_to(ROOT)}")
        print("\n".join(result["stdout"]))


if __name__ == "__main__":
    main()
