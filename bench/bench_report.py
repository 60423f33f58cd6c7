"""Benchmark of the report stage (issue 13): its cost on the sample against the qa stage's, both
recomputed (--force) on the same built data root, side by side.

Prints `name: value` lines:

    report_seconds              the report stage (every plot, the question cards' frames, the page)
    qa_seconds                  the qa stage (every view video's questions and renders)
    report_seconds_vs_qa_seconds  their ratio (the report must stay a small part of a build)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(config_path: Path, root: Path, only: list[str] | None, force: bool) -> float:
    from vsi_wild.config import load_config
    from vsi_wild.store import Store
    from vsi_wild.tasks import engine, registry

    config = load_config(config_path, {"run.data_root": str(root)})
    plan = engine.Plan.load(config, Store(root), registry.STAGES, force=frozenset(only or ()) if force else frozenset())
    t0 = time.perf_counter()
    engine.run_stages(plan, registry.select(only, None), engine.run_inline(plan))
    seconds = time.perf_counter() - t0
    failed = [(s, u, o.error) for s, us in plan.outcomes.items() for u, o in us.items() if o.state == "failed"]
    if failed:
        raise RuntimeError(f"failed units: {failed[:3]}")
    return seconds


def main() -> int:
    config = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "configs" / "sample.yaml"  # or a smaller one
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "out"
        _run(config, root, None, force=False)  # the whole sample, once
        _run(config, root, ["report"], force=True)  # warm: matplotlib's import and font cache
        qa = _run(config, root, ["qa"], force=True)
        report = _run(config, root, ["report"], force=True)
    print(f"report_seconds: {report:.2f}")
    print(f"qa_seconds: {qa:.2f}")
    print(f"report_seconds_vs_qa_seconds: {report / qa:.3f}  (target: well under 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
