"""The review gate: export what waits for a human, apply their decisions, and the ``review`` stage.

- ``export_review`` writes, for every registered source without a decision, a contact sheet
  (``sheets/<source_id>.jpg``) and one row of ``decisions.csv`` with the motion heuristic's
  suggestion pre-filled. The reviewer fills ``decision`` (keep/reject), ``reason`` and ``reviewer``.
- ``apply_decisions`` validates the whole file first (``stages.review.parse_decisions``: unknown
  ids, bad values, duplicates - an error names the line and nothing is recorded), then records
  each decision atomically under ``review/<source_id>.parquet`` (``schema.REVIEW_DECISION``).
- The ``review`` stage (unit = source, after ``probe``) reads the recorded decision: keep ->
  ``review.parquet`` (the decision row), reject -> skipped with the reason, none -> skipped
  "awaiting review" unless the source's origin is kept without review (``review.auto_keep_origins``,
  the generated sample) or ``review.require_decision`` is off. The decision's fingerprint is in the
  stage's cache key, so a new decision re-runs exactly that source and what depends on it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vsi_wild import schema
from vsi_wild.config import Config
from vsi_wild.errors import Skip, UnitError
from vsi_wild.stages import review as rv
from vsi_wild.store import Store
from vsi_wild.tasks.engine import Job, Stage
from vsi_wild.tasks.probe import registry_row

# ----------------------------------------------------------------------------------- records


def decision_path(store: Store, source_id: str) -> str:
    return store.path("review", f"{source_id}.parquet")


def read_decision(store: Store, source_id: str) -> dict[str, Any] | None:
    p = decision_path(store, source_id)
    if not store.exists(p):
        return None
    return schema.conform(store.read_table_at(p), schema.REVIEW_DECISION).to_pylist()[0]


# ----------------------------------------------------------------------------------- stage


def review_raw_inputs(config: Config, store: Store, unit: str) -> dict[str, str]:
    p = decision_path(store, unit)
    digest = "none"
    if store.exists(p):
        with store.fs.open(p, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
    return {"decision": digest, "origin": registry_row(store, unit)["origin"]}


def run_review(job: Job) -> None:
    sid = job.unit
    d = read_decision(job.store, sid)
    cfg = job.config.review
    if d is None:
        origin = registry_row(job.store, sid)["origin"]
        if origin in cfg.auto_keep_origins:
            reason = f"origin {origin!r} is kept without review (review.auto_keep_origins)"
        elif not cfg.require_decision:
            reason = "kept without review (review.require_decision is off)"
        else:
            raise Skip(
                "awaiting review: run `vsi-wild review export`, fill decisions.csv, "
                "then `vsi-wild review apply decisions.csv`"
            )
        d = {
            "source_id": sid,
            "decision": "keep",
            "reason": reason,
            "reviewer": "auto",
            "decided_at": None,
            "suggestion": None,
            "motion_score": None,
            "decision_file": None,
            "line": None,
        }
    elif d["decision"] != "keep":
        raise Skip(f"rejected in review: {d['reason']} ({d['reviewer']})")
    job.out.write_table("review.parquet", schema.table(schema.REVIEW_DECISION, [d]))


REVIEW = Stage(
    name="review",
    outputs=schema.ARTIFACTS["review"],
    version="1",
    unit_kind="source",
    run=run_review,
    needs=("probe",),
    sections=("review",),
    raw_inputs=review_raw_inputs,
    description="the human keep/reject gate: only kept sources flow on to projection",
)

# ----------------------------------------------------------------------------------- export


@dataclasses.dataclass
class ExportResult:
    out_dir: Path
    decisions_csv: Path
    rows: list[dict[str, Any]]
    problems: list[str]


def pending_sources(config: Config, store: Store, include_decided: bool = False) -> list[dict[str, Any]]:
    """Registered sources that wait for a decision (all of them with ``include_decided``)."""
    rows = store.registry().to_pylist()
    if include_decided:
        return rows
    auto = set(config.review.auto_keep_origins)
    return [r for r in rows if r["origin"] not in auto and not store.exists(decision_path(store, r["source_id"]))]


def export_review(
    config: Config,
    store: Store,
    out_dir: str | os.PathLike[str] | None = None,
    *,
    include_decided: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
) -> ExportResult:
    params = config.review.export
    if out_dir is None and not store.is_local:
        raise UnitError(
            f"the data root {store.url} is not a local folder: give the export an --out folder",
            kind="bad_input",
            retryable=False,
        )
    if out_dir is None:
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        out = store.local_root() / "review" / f"export-{stamp}"
    else:
        out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sources = pending_sources(config, store, include_decided)
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for i, src in enumerate(sources):
        sid = src["source_id"]
        row: dict[str, Any] = {
            "source_id": sid,
            "decision": "",
            "reason": "",
            "reviewer": "",
            "origin": src["origin"],
            "title": src.get("title"),
            "url": src.get("url"),
            "duration_s": src.get("duration_s"),
        }
        old = read_decision(store, sid) if include_decided else None
        if old is not None:
            row.update(decision=old["decision"], reason=old["reason"] or "", reviewer=old["reviewer"])
        try:
            path = store.source_file(src)
            duration = src.get("duration_s") or rv.video_duration(path)
            row["duration_s"] = round(float(duration), 3)
            samples = rv.sample_frames(path, rv.sample_times(duration, params.frames), params.tile_width)
            if not samples:
                raise ValueError("no frame could be decoded")
            sheet = rv.contact_sheet(samples, params, title=f"{sid}  {src.get('title') or ''}")
            rv.write_jpeg(out / "sheets" / f"{sid}.jpg", sheet, params.jpeg_quality)
            row["contact_sheet"] = f"sheets/{sid}.jpg"
            motion = rv.camera_motion(path, params, duration)
            row["suggestion"] = motion.suggestion
            row["motion_score"] = None if motion.score is None else f"{motion.score:.5f}"
        except Exception as e:  # noqa: BLE001 - one unreadable source must not stop the export
            problems.append(f"{sid}: {e}")
            row["suggestion"] = f"unreadable: {e}"[:200]
        rows.append(row)
        if progress:
            progress(i + 1, len(sources), "sources")
    csv_path = out / "decisions.csv"
    tmp = csv_path.with_name(csv_path.name + ".tmp")
    tmp.write_text(rv.write_decision_csv(rows), encoding="utf-8")
    os.replace(tmp, csv_path)
    return ExportResult(out, csv_path, rows, problems)


# ----------------------------------------------------------------------------------- apply


@dataclasses.dataclass
class ApplyResult:
    kept: list[str]
    rejected: list[str]
    pending: list[str]
    changed: list[str]  # ids whose earlier decision this file changed


def apply_decisions(
    store: Store, file: str | os.PathLike[str], *, default_reviewer: str | None = None, now: datetime | None = None
) -> ApplyResult:
    """Validate the whole decision file, then record each decision. Raises ``stages.review.ReviewError``
    (naming the line) before recording anything when the file is malformed."""
    p = Path(file)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise rv.ReviewError(str(p), 0, f"cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise rv.ReviewError(str(p), 0, f"not UTF-8 text: {e}") from None
    known = store.registry()["source_id"].to_pylist()
    parsed = rv.parse_decisions(text, known, file=str(p), default_reviewer=default_reviewer)
    now = now or datetime.now(UTC)
    kept: list[Any] = []
    rejected: list[Any] = []
    changed: list[Any] = []
    for d in parsed.decisions:
        old = read_decision(store, d.source_id)
        if old is not None and (old["decision"], old["reason"]) != (d.decision, d.reason):
            changed.append(d.source_id)
        row = {
            "source_id": d.source_id,
            "decision": d.decision,
            "reason": d.reason,
            "reviewer": d.reviewer,
            "decided_at": now,
            "suggestion": d.suggestion,
            "motion_score": d.motion_score,
            "decision_file": str(p.resolve()),
            "line": d.line,
        }
        (kept if d.decision == "keep" else rejected).append(d.source_id)
        if old is not None and all(old[k] == row[k] for k in ("decision", "reason", "reviewer")):
            continue  # the same decision again: keep its record (and the review stage's cache)
        store.write_table_atomic(decision_path(store, d.source_id), schema.table(schema.REVIEW_DECISION, [row]))
    return ApplyResult(kept, rejected, parsed.pending, changed)
