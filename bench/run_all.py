"""`make bench`: every benchmark of the project, each printing `name: value` lines.

Each benchmark measures its ratios within one run on the same input (these machines are shared
and noisy: absolute times mean little, ratios measured side by side do). A benchmark that fails
prints `name: error` lines and the whole command exits non-zero at the end.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Every bench_*.py beside this file, in name order, each with the arguments of its runs (one run
# with none, unless listed: bench_reconcile runs once per simulated model-error level).
BENCHES = sorted(p for p in HERE.glob("bench_*.py"))
RUNS = {"bench_reconcile.py": [["--noise", level] for level in ("none", "moderate", "severe")]}


def main() -> int:
    failed = 0
    for bench in BENCHES:
        for args in RUNS.get(bench.name, [[]]):
            name = " ".join([bench.name, *args])
            print(f"# {name}", flush=True)
            t0 = time.time()
            proc = subprocess.run([sys.executable, str(bench), *args], cwd=HERE.parent)
            print(f"# {name} took {time.time() - t0:.0f} s (exit {proc.returncode})", flush=True)
            failed += proc.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
