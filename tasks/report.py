"""The `report` stage (one unit, "all"): the build report, published as ``<data root>/report.md``
and ``<data root>/report.html``.

What changed since the previous build: every published report records its build under
``reports/`` (``<export key>.parquet``: its questions, schema.REPORT_QUESTIONS; ``<export key>.json``:
its stage versions and fixes; ``history.txt``: the export keys in publication order). The previous
build of a report is the last recorded build of another export; it is a raw input of the report's
cache key, so a no-op run stays cached and a new export is compared with the one before it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsi_wild import schema
from vsi_wild.config import Config
from vsi_wild.errors import UnitError
from vsi_wild.stages import evaluate as ev
from vsi_wild.stages import leak_probe, report_diff
from vsi_wild.stages.report import (
    answer_controls,
    build_report,
    readings_summary,
    render_markdown,
    text_probe_summary,
    visibility_summary,
)
from vsi_wild.stages.report_html import build_cards, render_html
from vsi_wild.stages.report_plots import all_plots
from vsi_wild.stages.segment import SAMPLE_STEP
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks.engine import ALL, Job, Plan, Stage
from vsi_wild.tasks.export import LEDGER_FILE, TEXT_DEBIAS_FILE

REPORT_MD = "report.md"
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
QUESTIONS = "report_questions.parquet"
BUILDS = "reports"  # the data root's record of published builds (see the module docstring)
HISTORY = f"{BUILDS}/history.txt"
VERIFY = "verify"  # the verification app's records (<data root>/verify/*.json), shown when present
COMPARE_HTML = "report_compare.html"
COMPARE_MD = "report_compare.md"


@dataclass(frozen=True)
class Build:
    """A recorded build: its questions (schema.REPORT_QUESTIONS rows) and what made them."""

    label: str
    questions: list[dict[str, Any]]
    info: dict[str, Any]


# ------------------------------------------------------------------------------------ builds
def _history(store: Store) -> list[str]:
    path = store.path(HISTORY)
    return store.fs.cat_file(path).decode().split() if store.exists(path) else []


def _build_files(store: Store, export_key: str) -> tuple[str, str]:
    return store.path(BUILDS, f"{export_key}.parquet"), store.path(BUILDS, f"{export_key}.json")


def previous_export_key(store: Store, current: str) -> str | None:
    """The export of the last recorded build other than ``current`` (None: there is none)."""
    for key in reversed(_history(store)):
        if key != current and all(store.exists(p) for p in _build_files(store, key)):
            return key
    return None


def recorded_build(store: Store, export_key: str, label: str) -> Build:
    table_path, info_path = _build_files(store, export_key)
    return Build(label, store.read_table_at(table_path).to_pylist(), json.loads(store.fs.cat_file(info_path)))


def latest_build(store: Store) -> Build:
    """Another data root's current build (``vsi-wild report --compare``): its last recorded build,
    else its published export (without fixes or stage versions)."""
    history = _history(store)
    if history:
        return recorded_build(store, history[-1], f"{store.url} (export {history[-1][:12]})")
    qa = store.path("exports", "qa.parquet")
    if not store.exists(qa):
        raise UnitError(f"{store.url}: no published export (exports/qa.parquet) and no recorded build to compare with")
    rows = [r for r in store.read_table_at(qa).to_pylist() if r["split"] == "release"]
    return Build(f"{store.url} (its export)", report_diff.snapshot(rows), {})


def _current_export_key(store: Store) -> str | None:
    row = store.read_status("export", ALL)
    return row["key"] if row and row["state"] == "done" else None


def _digest_files(store: Store, paths: list[str]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.rsplit("/", 1)[-1].encode() + b"\0" + store.fs.cat_file(p) + b"\0")
    return h.hexdigest()


def _verify_files(store: Store) -> list[str]:
    return sorted(store.fs.glob(store.path(VERIFY, "*.json"))) if store.exists(store.path(VERIFY)) else []


def verification(store: Store) -> dict[str, Any] | None:
    """The verification app's records, file name -> content (None when there are none)."""
    out: dict[str, Any] = {}
    for p in _verify_files(store):
        try:
            out[p.rsplit("/", 1)[-1]] = json.loads(store.fs.cat_file(p))
        except ValueError as e:
            out[p.rsplit("/", 1)[-1]] = f"unreadable: {e}"
    return out or None


def _report_raw(config: Config, store: Store, unit: str) -> dict[str, str]:
    """What the report reads outside the store: the failed and skipped status rows it lists, the
    previous build it compares with, the verification records it shows, and the stage versions its
    build section names (a version bump that leaves every output alike changes what it says)."""
    rows = sorted(
        (r["stage"], r["unit"], r["state"], r["error_class"] or "", r["error"] or "")
        for r in store.status_table().to_pylist()
        if r["state"] in ("failed", "skipped") and r["stage"] != "report"
    )
    current = _current_export_key(store)
    previous = previous_export_key(store, current) if current else None
    return {
        "lost": hashlib.sha256(json.dumps(rows).encode()).hexdigest(),
        "previous": f"{previous}:{_digest_files(store, list(_build_files(store, previous)))}" if previous else "none",
        "verify": _digest_files(store, _verify_files(store)),
        "reference_qa": _reference_digest(config),
        "stage_versions": json.dumps(_stage_versions(), sort_keys=True),
    }


# ------------------------------------------------------------------------------------ the text probe
def _reference_qa(config: Config) -> Path | None:
    return Path(config.report.reference_qa).expanduser() if config.report.reference_qa else None


def _reference_digest(config: Config) -> str:
    """The public release file's content digest (a raw input: a new file recomputes the report)."""
    path = _reference_qa(config)
    if path is None or not path.is_file():
        return f"absent:{path}"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reference_probe(config: Config, store: Store) -> dict[str, Any]:
    """The text probe on the public release (``report.reference_qa``), or a note why there is none.
    Computed once per release file: the current report's figure is reused while the file's digest
    and the probe's version are those it was computed with."""
    path = _reference_qa(config)
    if path is None:
        return {"note": "not configured (report.reference_qa)"}
    if not path.is_file():
        return {"path": str(path), "note": f"{path} is not there (report.reference_qa): not probed"}
    digest = _reference_digest(config)
    row = store.read_status("report", ALL)
    if row and row["state"] == "done":
        ref = UnitRef("report", ALL, row["key"])
        if store.has_file(ref, REPORT_JSON):
            cached = (json.loads(store.local_file(ref, REPORT_JSON).read_text()).get("text_probe") or {}).get(
                "reference"
            )
            if cached and cached.get("sha256") == digest and cached.get("probe_version") == leak_probe.VERSION:
                return cached
    try:
        rows = ev.load_jsonl(path)
        probed = ev.text_probe_report(rows)
    except (ev.EvalError, KeyError) as e:
        return {"path": str(path), "sha256": digest, "note": f"{path}: not a release-format file: {e}"}
    return {"path": str(path), "sha256": digest, "probe_version": leak_probe.VERSION, "rows": len(rows), **probed}


def text_probe(job: Job, release: list[dict[str, Any]]) -> dict[str, Any]:
    """report.json's ``text_probe``: this build's release rows, the public release, what the
    export's ``qa.debias_text`` dropped."""
    export = job.ref("export")
    dropped = (
        job.store.read_table(export, TEXT_DEBIAS_FILE).to_pylist()
        if job.store.has_file(export, TEXT_DEBIAS_FILE)
        else None
    )
    return text_probe_summary(ev.text_probe_report(release), reference_probe(job.config, job.store), dropped)


def public_release_rows(config: Config) -> list[dict[str, Any]] | None:
    """The public release's rows (``report.reference_qa``) for the answer controls' figures by the
    same code; None when it is absent or unreadable (the text probe's section says which)."""
    path = _reference_qa(config)
    if path is None or not path.is_file():
        return None
    try:
        return ev.load_jsonl(path)
    except ev.EvalError:
        return None


# ------------------------------------------------------------------------------------ the report
VISIBILITY_COLUMNS = ["video_id", "instance_id", "concept", "state"]  # what the report's visibility section reads


def _stage_versions() -> dict[str, str]:
    from vsi_wild.tasks.registry import STAGES  # the registry imports this module

    return {s.name: s.version for s in STAGES}


def compose(job: Job, previous: Build | None) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """The report's numbers (report.json), its question snapshot and its page, from the job's
    inputs (the export, every probed source, every video's metadata) and ``previous``."""
    store = job.store
    rows = job.read("export", "qa.parquet").to_pylist()
    sources = [store.read_table(ref, "source.parquet").to_pylist()[0] for ref in job.refs("probe").values()]
    status = [r for r in store.status_table().to_pylist() if r["stage"] != "report"]
    rep = build_report(rows, status, sources)
    rep["readings"] = readings_summary(job.read("export", "skipped.parquet").to_pylist())
    rep["text_probe"] = text_probe(job, [r for r in rows if r["split"] == "release"])
    rep["answer_controls"] = answer_controls(
        [r for r in rows if r["split"] == "release"], public_release_rows(job.config)
    )
    fixes = {
        video: store.read_table(ref, "fixes_applied.parquet").to_pylist()
        for video, ref in sorted(job.refs("metadata").items())
    }
    rep["visibility"] = visibility_summary(
        [
            r
            for ref in job.refs("metadata").values()
            for r in store.read_table(ref, "visibility.parquet").select(VISIBILITY_COLUMNS).to_pylist()
        ],
        SAMPLE_STEP,
    )
    release = [r for r in rows if r["split"] == "release"]
    questions = report_diff.snapshot(release)
    rep["build"] = report_diff.build_info(job.ref("export").key, _stage_versions(), fixes)
    rep["fixes"] = rep["build"]["fixes"]
    rep["changes"] = (
        report_diff.compare(previous.questions, previous.info, questions, rep["build"], previous.label)
        if previous is not None
        else None
    )
    rep["verification"] = verification(store)
    rep["letter_moves"] = letter_moves(job)
    rep["forced_out"] = forced_out(job)
    links = {r["path"]: r["target"] for r in job.read("export", "links.parquet").to_pylist()}

    def exported(rel: str) -> Path | None:
        return store.local_path_of(links[rel]) if rel in links else None

    cards = build_cards(release, lambda name: exported(f"videos/{name}"), exported)
    return rep, questions, render_html(rep, all_plots(rep), cards)


def letter_moves(job: Job) -> list[dict[str, Any]]:
    """The questions whose answer letter the export's balance bound moved (its ledger's ``moved_from``)."""
    ledger = job.read("export", LEDGER_FILE).to_pylist()
    return [
        {
            "doc_id": r["doc_id"],
            "moved_from": r["moved_from"],
            "answer": "ABCD"[r["answer_index"]],
            "moved_stratum": r["moved_stratum"],
        }
        for r in ledger
        if r["moved_from"] is not None
    ]


def forced_out(job: Job) -> list[dict[str, Any]]:
    """The questions the previous build asked that this build's bounds forced out (the ledger's ``forced_out``)."""
    return [
        {"doc_id": r["doc_id"], "state": r["state"], "reason": r["reason"]}
        for r in job.read("export", LEDGER_FILE).to_pylist()
        if r["forced_out"]
    ]


def run(job: Job) -> None:
    export_key = job.ref("export").key
    previous_key = previous_export_key(job.store, export_key)
    previous = (
        recorded_build(job.store, previous_key, f"the previous build (export {previous_key[:12]})")
        if previous_key
        else None
    )
    rep, questions, page = compose(job, previous)
    job.out.write_table(QUESTIONS, schema.table(schema.REPORT_QUESTIONS, questions))
    job.out.path(REPORT_JSON).write_text(json.dumps(rep, indent=1, sort_keys=True, default=str))
    job.out.path(REPORT_MD).write_text(render_markdown(rep))
    job.out.path(REPORT_HTML).write_text(page)


def publish(store: Store, config: Config, ref: UnitRef) -> None:
    """Show the report in the data root and record its build (once per export)."""
    for name in (REPORT_MD, REPORT_HTML):
        store.write_bytes_atomic(store.path(name), store.local_file(ref, name).read_bytes())
    export_key = json.loads(store.local_file(ref, REPORT_JSON).read_text())["build"]["export_key"]
    table_path, info_path = _build_files(store, export_key)
    if not store.exists(table_path):
        store.write_bytes_atomic(table_path, store.local_file(ref, QUESTIONS).read_bytes())
        info = json.loads(store.local_file(ref, REPORT_JSON).read_text())["build"]
        store.write_bytes_atomic(info_path, json.dumps(info, indent=1, sort_keys=True).encode())
    history = _history(store)
    if not history or history[-1] != export_key:
        store.write_bytes_atomic(store.path(HISTORY), "".join(f"{k}\n" for k in [*history, export_key]).encode())


def compare_with(config: Config, store: Store, other: Store) -> tuple[str, str]:
    """The report of ``store``'s current build compared with ``other``'s (``vsi-wild report
    --compare``), written beside report.html as report_compare.html and .md; returns their paths."""
    from vsi_wild.tasks.registry import STAGES

    plan = Plan.load(config, store, STAGES)
    inputs, missing = plan.inputs_of(REPORT, ALL)
    if missing is not None:
        raise UnitError(f"the report cannot be made: {missing}")
    job = Job(REPORT, ALL, "", config, store, inputs, out=None)  # type: ignore[arg-type]  # compose only reads
    rep, _, page = compose(job, latest_build(other))
    html_path, md_path = store.path(COMPARE_HTML), store.path(COMPARE_MD)
    store.write_bytes_atomic(html_path, page.encode())
    store.write_bytes_atomic(md_path, render_markdown(rep).encode())
    return html_path, md_path


@dataclass(frozen=True)
class PublishedReport:
    """The current report of a data root, as a flow run shows it (Prefect artifacts)."""

    markdown: str
    per_task: list[dict[str, Any]]  # task, questions, videos, and the changes since the previous build
    html_link: str


def published_report(store: Store) -> PublishedReport | None:
    row = store.read_status("report", ALL)
    if row is None or row["state"] != "done":
        return None
    ref = UnitRef("report", ALL, row["key"])
    rep = json.loads(store.local_file(ref, REPORT_JSON).read_text())
    changes = (rep.get("changes") or {}).get("per_task", {})
    per_task = [
        {
            "task": t,
            "questions": e["n"],
            "videos": e["videos"],
            **{w: changes.get(t, {}).get(w, 0) for w in ("added", "removed", "changed")},
        }
        for t, e in rep["questions"].items()
    ]
    link = store.local_root().joinpath(REPORT_HTML).as_uri() if store.is_local else store.path(REPORT_HTML)
    return PublishedReport(store.local_file(ref, REPORT_MD).read_text(), per_task, link)


REPORT = Stage(
    name="report",
    outputs=schema.ARTIFACTS["report"],
    version="7",
    unit_kind="all",
    run=run,
    needs=("export", "probe", "metadata"),
    raw_inputs=_report_raw,
    sections=("report",),
    publish=publish,
    description="the build report (report.md, report.html): contents, the paper's statistics as plots, "
    "question cards, blind baselines, what was lost, fixes, what changed since the previous build",
)
