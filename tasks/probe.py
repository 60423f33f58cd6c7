"""The `probe` stage: measure and validate every registered source (one unit per source)."""

from __future__ import annotations

import os

from vsi_wild import schema
from vsi_wild.config import Config
from vsi_wild.digest import sha256_file
from vsi_wild.errors import UnitError
from vsi_wild.stages.probe import probe_video
from vsi_wild.store import Store
from vsi_wild.tasks.engine import Job, Plan, Stage

OUTPUT = "source.parquet"


def registry_row(store: Store, source_id: str) -> dict:
    row = store.registry_row(source_id)
    if row is None:
        raise UnitError(f"source {source_id} is not registered")
    return row


def _units(plan: Plan, stage: Stage) -> list[str]:
    return plan.sources()


def _raw_inputs(config: Config, store: Store, unit: str) -> dict[str, str]:
    """The registry row, and the file: by content for files the store made (a sample, a download:
    their manifest has the hash, so the key is the same in every data root), by size and mtime for
    files outside the store (hashing every source on every run would cost minutes per hour of video)."""
    row = registry_row(store, unit)
    return {"registry": repr(schema.table(schema.SOURCE, [row]).to_pylist()), "file": _file_fingerprint(store, row)}


def _file_fingerprint(store: Store, row: dict) -> str:
    path = row["path"] or ""
    if not os.path.isabs(path) and path.startswith("artifacts/"):
        digest = store.manifest_sha256(path)
        return f"sha256:{digest}" if digest else "missing"
    try:
        st = store.source_file(row).stat()
    except (OSError, UnitError):
        return "missing"
    return f"stat:{st.st_size}:{st.st_mtime_ns}"


def run(job: Job) -> None:
    row = registry_row(job.store, job.unit)
    path = job.store.source_file(row)
    cfg = job.config.probe
    measured = probe_video(path, min_aspect=cfg.min_aspect, max_aspect=cfg.max_aspect, timeout_s=cfg.timeout_s)
    measured["content_sha256"] = sha256_file(path)
    out = {**row, **measured}
    job.out.write_table(OUTPUT, schema.table(schema.SOURCE, [out]))


PROBE = Stage(
    name="probe",
    outputs=schema.ARTIFACTS["probe"],
    version="1",
    unit_kind="source",
    run=run,
    sections=("probe",),
    units=_units,
    no_units_hint="no source is registered: `vsi-wild add PATH`, a crawl, or the sample (configs/sample.yaml)",
    raw_inputs=_raw_inputs,
    description="measure each registered source (ffprobe) and reject unusable files",
)
