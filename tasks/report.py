"""The `report` stage (one unit, "all"): the build report, published as ``<data root>/report.md``."""

from __future__ import annotations

import hashlib
import json

from vsi_wild import schema
from vsi_wild.config import Config
from vsi_wild.stages.report import build_report, render_markdown
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks.engine import Job, Stage

REPORT_MD = "report.md"
REPORT_JSON = "report.json"


def _lost_units(config: Config, store: Store, unit: str) -> dict[str, str]:
    """The report lists what failed or was skipped: those rows are an input of its cache key."""
    rows = sorted((r["stage"], r["unit"], r["state"], r["error_class"] or "", r["error"] or "")
                  for r in store.status_table().to_pylist()
                  if r["state"] in ("failed", "skipped") and r["stage"] != "report")
    return {"lost": hashlib.sha256(json.dumps(rows).encode()).hexdigest()}


def run(job: Job) -> None:
    rows = job.read("export", "qa.parquet").to_pylist()
    sources = [job.store.read_table(ref, "source.parquet").to_pylist()[0] for ref in job.refs("probe").values()]
    status = [r for r in job.store.status_table().to_pylist() if r["stage"] != "report"]
    rep = build_report(rows, status, sources)
    job.out.path(REPORT_JSON).write_text(json.dumps(rep, indent=1, sort_keys=True, default=str))
    job.out.path(REPORT_MD).write_text(render_markdown(rep))


def publish(store: Store, config: Config, ref: UnitRef) -> None:
    store.write_bytes_atomic(store.path(REPORT_MD), store.local_file(ref, REPORT_MD).read_bytes())


REPORT = Stage(
    name="report",
    outputs=schema.ARTIFACTS["report"],
    version="1",
    unit_kind="all",
    run=run,
    needs=("export", "probe"),
    raw_inputs=_lost_units,
    publish=publish,
    description="the build report: contents, answer spreads, blind baselines, what was lost",
)
