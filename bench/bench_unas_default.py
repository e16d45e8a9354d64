"""What the default μNAS command gives: `kilobyte search --strategy unas --data mnist` (300 evaluations, the CLI's
defaults) once per seed, each report (`--json`) stored in bench/results/unas_default.json as it finishes, so a run
stopped part way keeps the seeds it finished. Meant for the README's μNAS tour, beside the longer bench_unas.py runs
it shows; not yet run to the end (a first try on a loaded 2-core machine managed ~5 evaluations a minute).

    python bench/bench_unas_default.py --seeds 0 1 2      # about 11 minutes per seed on an idle 2-core machine
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "unas_default.json"


def run(seed: int, out: Path) -> dict:
    argv = ["search", "--strategy", "unas", "--data", "mnist", "--seed", str(seed), "--out", str(out), "--json"]
    start = time.time()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's kilobyte
    proc = subprocess.run([sys.executable, "-m", "kilobyte", *argv], capture_output=True, text=True, cwd=ROOT,
                          env=env)
    if proc.returncode not in (0, 2):
        raise SystemExit(f"kilobyte {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {"command": "kilobyte " + " ".join(argv), "seed": seed, "exit_code": proc.returncode,
            "minutes": round((time.time() - start) / 60, 1), "report": json.loads(proc.stdout)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="/tmp/bench-unas-default", help="folder for the searches")
    args = ap.parse_args()
    results = {"meta": {"machine": platform.platform(), "python": platform.python_version(),
                        "date": time.strftime("%Y-%m-%d")}, "runs": []}
    for seed in args.seeds:
        results["runs"].append(run(seed, Path(args.out) / f"seed{seed}"))
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
        print(f"seed {seed}: {results['runs'][-1]['minutes']} min", flush=True)


if __name__ == "__main__":
    main()
