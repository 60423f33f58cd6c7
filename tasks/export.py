"""The `export` stage (one unit, "all"): letters, the release file, the rich parquet, the splits,
and their publication under ``<data root>/exports/``.

The export's own files live in its artifact folder like every output. ``exports/`` is the
published view of the current export: links (copies when the data root is remote) to the export's
files, to the view videos the rows name (the project stage's outputs) and to the rendered images
(the qa stage's outputs). It is rebuilt beside the old one and swapped in, so a reader sees the
old or the new benchmark, not a mix. Layout: see ``vsi_wild.stages.export``; plus
``videos/<video_name>`` and ``images/<video_id>/...``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import pyarrow as pa

from vsi_wild import schema
from vsi_wild.config import Config
from vsi_wild.errors import UnitError
from vsi_wild.schema import VIEWS_FILE
from vsi_wild.stages.export import (
    Export,
    add_text_bias,
    assemble,
    concat_video,
    drop_text_biased,
    ffconcat_list,
    image_export_path,
    write_export,
)
from vsi_wild.stages.ledger import Ledger
from vsi_wild.stages.qa import QAParams
from vsi_wild.stages.qa.common import question_id
from vsi_wild.stages.qa.registry import tasks
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks.engine import Job, Stage
from vsi_wild.verify import progress

EXPORTS = "exports"
LINKS_FILE = "links.parquet"  # exports/<path> -> the file under the data root it shows
COUNTS_FILE = "counts.json"
REVIEWS_FILE = "question_reviews.parquet"  # a qa output's question reviews, when it has some
REVIEWED_FILE = "reviewed.parquet"  # the exported rows a person accepted
TEXT_DEBIAS_FILE = "text_debias.parquet"  # the questions qa.debias_text dropped (schema.TEXT_DEBIAS)
LEDGER_FILE = "ledger.parquet"  # the question ledger this export leaves (schema.QA_LEDGER)
LEDGER_META = "ledger.json"  # what it was made from: {"inputs": digest, "parent": the ledger it started from}
LEDGERS = "ledger"  # the data root's ledgers: <sha256>.parquet, and history.jsonl (one line per published export)
VERSION = "8"  # 8: VOC's wrong_answer_bound is exported


# ------------------------------------------------------------------------------------ the ledger
def _ledger_history(store: Store) -> list[dict]:
    path = store.path(LEDGERS, "history.jsonl")
    if not store.exists(path):
        return []
    return [json.loads(line) for line in store.fs.cat_file(path).decode().splitlines() if line.strip()]


def inputs_digest(config: Config, store: Store, unit: str, inputs: dict[str, dict[str, UnitRef]]) -> str:
    """The export's inputs but its ledger: its version, the qa section, the upstream outputs, the
    reviewers' marks it reads."""
    payload = {
        "version": VERSION,
        "qa": config.qa.model_dump(mode="json"),
        "inputs": sorted([s, u, ref.key] for s, units in inputs.items() for u, ref in units.items()),
        "raw": _verification_raw(config, store, unit),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def prior_ledger(store: Store, digest: str) -> str | None:
    """The sha256 of the ledger an export with inputs ``digest`` starts from: the last published
    one, unless the last published export had these same inputs, then the one that export started
    from (so that running again with nothing changed is a cache hit); None: none yet."""
    history = _ledger_history(store)
    if not history:
        return None
    last = history[-1]
    return last["parent"] if last["inputs"] == digest else last["ledger"]


def carried_ledger(config: Config, store: Store, unit: str, inputs: dict[str, dict[str, UnitRef]]) -> dict[str, str]:
    return {"ledger": prior_ledger(store, inputs_digest(config, store, unit, inputs)) or "none"}


def read_ledger(store: Store, sha: str | None) -> Ledger:
    if sha is None:
        return Ledger.empty()
    path = store.path(LEDGERS, f"{sha}.parquet")
    if not store.exists(path):
        raise UnitError(
            f"the question ledger {path} is missing (ledger/history.jsonl names it): restore it, or "
            "remove ledger/ to number every question afresh (doc ids and letters will move)",
            retryable=False,
        )
    return Ledger.from_rows(store.read_table_at(path).to_pylist())


def publish_ledger(store: Store, ref: UnitRef) -> None:
    """Record the export's ledger under ``ledger/`` (once per export): the next export starts from it.
    An export without its ``ledger.json`` (not made by ``run``: a benchmark's stand-in) is not recorded."""
    if not store.has_file(ref, LEDGER_META):
        return
    data = store.local_file(ref, LEDGER_FILE).read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    path = store.path(LEDGERS, f"{sha}.parquet")
    if not store.exists(path):
        store.write_bytes_atomic(path, data)
    meta = json.loads(store.local_file(ref, LEDGER_META).read_text())
    history = _ledger_history(store)
    if history and history[-1]["export_key"] == ref.key:
        return
    line = {"export_key": ref.key, "inputs": meta.get("inputs"), "parent": meta.get("parent"), "ledger": sha}
    store.write_bytes_atomic(
        store.path(LEDGERS, "history.jsonl"),
        "".join(json.dumps(h, sort_keys=True) + "\n" for h in [*history, line]).encode(),
    )


def _video_files(job: Job) -> dict[str, tuple[UnitRef, str]]:
    """video_name -> (project output, file inside it) for every projected view."""
    out = {}
    for _, ref in sorted(job.refs("project").items()):
        for r in job.store.read_table(ref, VIEWS_FILE).to_pylist():
            out[f"{r['video_id']}.mp4"] = (ref, r["path"])
    return out


def publish(store: Store, links: dict[str, str]) -> str:
    """Make ``exports/<rel>`` point at each target (a path under the data root); replace the old
    ``exports/`` as a whole. Local roots get relative symlinks, remote roots copies."""
    final = store.path(EXPORTS)
    if store.is_local:
        staging = store.path(f"{EXPORTS}.new-{uuid.uuid4().hex[:12]}")
        for rel, target in sorted(links.items()):
            link = Path(staging) / rel
            link.parent.mkdir(parents=True, exist_ok=True)
            # relative to where the link will live after the swap (staging is exports' sibling)
            os.symlink(os.path.relpath(target, os.path.dirname(os.path.join(final, rel))), link)
        old = None
        if os.path.lexists(final):
            old = store.path(f"{EXPORTS}.old-{uuid.uuid4().hex[:12]}")
            os.rename(final, old)
        os.rename(staging, final)
        if old:
            shutil.rmtree(old, ignore_errors=True)
        return final
    # An object store has no atomic folder swap: replace the objects one by one; `publish_export`
    # writes the marker naming the export last, so a reader can tell a complete publication.
    if store.fs.exists(final):
        store.fs.rm(final, recursive=True)
    for rel, target in sorted(links.items()):
        store.fs.copy(target, f"{final}/{rel}")
    return final


def _accepted(job: Job, qa_refs: dict[str, UnitRef]) -> set[str]:
    """The question ids a person accepted whose accept holds for the question as asked now
    (``review_question`` fixes, carried by the qa outputs: an accept of answers a later fix
    changed does not count)."""
    out: set[str] = set()
    for ref in qa_refs.values():
        if job.store.has_file(ref, REVIEWS_FILE):
            reviews = schema.conform(job.store.read_table(ref, REVIEWS_FILE), schema.QUESTION_REVIEWS).to_pylist()
            out |= {r["question_id"] for r in reviews if r["verdict"] == "accept" and r["holds"] is not False}
    return out


def reviewed_rows(export: Export, accepted: set[str]) -> list[dict]:
    """EXPORT_REVIEWED rows: every exported row whose question (or release twin's) was accepted."""
    rows = []
    for r in export.rows:
        qid = export.question_ids.get(r["doc_id"]) or export.question_ids.get(r["base_doc_id"] or "")
        if qid in accepted:
            rows.append({"doc_id": r["doc_id"], "question_id": qid, "video_id": r["video_id"], "split": r["split"]})
    return rows


def unstable_rows(job: Job, qa_refs: dict[str, UnitRef]) -> list[dict]:
    """The qa units' QA_SKIPPED rows of questions not asked because a reading changes their answer."""
    out = []
    for ref in qa_refs.values():
        rows = schema.conform(job.store.read_table(ref, "skipped.parquet"), schema.QA_SKIPPED).to_pylist()
        out += [r for r in rows if r["reading"] is not None]
    return out


def _verification(store: Store, videos: list[str]) -> dict[str, progress.Progress]:
    """What a reviewer marked verified (verify/<video_id>.json) of each video."""
    return {vid: progress.read(store, vid) for vid in videos}


def _verification_raw(config: Config, store: Store, unit: str) -> dict[str, str]:
    """With ``qa.require_verified_videos`` the export depends on the reviewers' marks: marking a
    video verified re-exports. Without it, nothing (the key is as before)."""
    if not config.qa.require_verified_videos:
        return {}
    marks = {
        vid: [p.temporal_verified, p.clips_verified]
        for vid, p in _verification(store, progress.recorded(store)).items()
    }
    return {"verified": hashlib.sha256(json.dumps(marks, sort_keys=True).encode()).hexdigest()}


def from_verified_videos(questions: pa.Table, marks: dict[str, progress.Progress]) -> pa.Table:
    """The questions of videos whose temporal metadata is marked verified; of their VMR questions,
    those whose motion clip is marked verified too."""

    def kept(q: dict) -> bool:
        p = marks.get(q["video_id"])
        if p is None or not p.temporal_verified:
            return False
        return q["task_type"] != "VMR" or int(q["item"].removeprefix("clip")) in p.clips_verified

    return questions.filter(pa.array([kept(q) for q in questions.to_pylist()], type=pa.bool_()))


def run(job: Job) -> None:
    params: QAParams = job.config.qa
    qa_refs = dict(sorted(job.refs("qa").items()))
    tables = [
        schema.conform(job.store.read_table(ref, "questions.parquet"), schema.QA_QUESTIONS) for ref in qa_refs.values()
    ]
    questions = pa.concat_tables(tables) if tables else schema.QA_QUESTIONS.empty_table()
    accepted = _accepted(job, qa_refs)
    if params.require_reviewed:
        questions = questions.filter(
            pa.array([question_id(q) in accepted for q in questions.to_pylist()], type=pa.bool_())
        )
    if params.require_verified_videos:
        questions = from_verified_videos(questions, _verification(job.store, sorted(qa_refs)))
    digest = inputs_digest(job.config, job.store, job.unit, job.inputs)
    parent = prior_ledger(job.store, digest)  # the same choice as carried_ledger made for the key
    ledger = read_ledger(job.store, parent)
    text_biased: list[dict] = []
    if params.debias_text:
        questions, text_dropped, text_biased = drop_text_biased(questions, params, ledger)
        job.out.write_table(TEXT_DEBIAS_FILE, schema.table(schema.TEXT_DEBIAS, text_dropped))
    export = assemble(questions, params, ledger, text_biased)
    export.unstable = unstable_rows(job, qa_refs)
    job.out.path(LEDGER_META).write_text(json.dumps({"inputs": digest, "parent": parent}, sort_keys=True) + "\n")
    add_text_bias(export, params.seed)
    write_export(job.out.path, export)  # also writes counts.json (printed by the CLI summary)
    if accepted:  # only when someone reviewed questions: a build without reviews keeps its bytes
        job.out.write_table(REVIEWED_FILE, schema.table(schema.EXPORT_REVIEWED, reviewed_rows(export, accepted)))

    videos = _video_files(job)
    links: dict[str, str] = {}
    for name in sorted({r["video_name"] for r in export.rows if r["split"] != "voc_repeat"}):
        if name not in videos:
            raise UnitError(f"no projected video {name} (project outputs: {len(videos)} views)")
        ref, path = videos[name]
        links[f"videos/{name}"] = f"{job.store.unit_dir(ref)}/{path}"
    for src, rep, k in export.repeats:
        if params.repeat_materialize:
            ref, path = videos[src]
            concat_video(job.store.local_file(ref, path), k, job.out.path(f"splits/voc_repeat/videos/{rep}"))
        else:  # a playlist relative to its place under exports/: ffmpeg/ffplay read it as one video
            job.out.path(f"splits/voc_repeat/videos/{rep[:-4]}.ffconcat").write_text(
                ffconcat_list(f"../../../videos/{src}", k)
            )
    for unit, ref in qa_refs.items():
        for f in job.store.read_table(ref, "images.parquet")["file"].to_pylist():
            links[image_export_path(unit, f)] = f"{job.store.unit_dir(ref)}/{f}"
    # The export's own files are linked by `publish_export`, once they are in their final place.
    root = job.store.path("")
    targets = [t[len(root) :] if t.startswith(root) else t for t in links.values()]  # relative to the root
    job.out.write_table(LINKS_FILE, schema.table(schema.EXPORT_LINKS, {"path": list(links), "target": targets}))


def publish_export(store: Store, config: object, ref: UnitRef) -> None:
    """After the export is complete (computed or cached): make ``exports/`` show it."""
    want = store.read_table(ref, LINKS_FILE).to_pylist()
    links = {r["path"]: store.path(r["target"]) for r in want}
    for rel in store.files(ref):
        if rel != LINKS_FILE:
            links[rel] = f"{store.unit_dir(ref)}/{rel}"
    marker = store.path(EXPORTS, ".export-key")
    if (
        store.exists(marker)
        and store.fs.cat_file(marker).decode() == ref.key
        and all(store.exists(store.path(EXPORTS, rel)) for rel in links)
    ):
        publish_ledger(store, ref)  # idempotent: a ledger/ removed by hand is recorded again
        return  # exports/ already shows this export
    publish_ledger(store, ref)
    publish(store, {**links})
    store.write_bytes_atomic(marker, ref.key.encode())


def summary_line(where: str, counts: dict) -> str:
    """What the CLI prints after a run with the export: rows per task (and per subtype where a
    task counts its subtypes apart), rows per split, and (when there are some) the questions not
    asked because a reading of them changes the answer (VOC: counts; exports/skipped.parquet)."""
    r, s, sub = counts["release"], counts["splits"], counts["release_subtypes"]
    release, split_parts = [], []
    for t in tasks():
        part = f"{t.name} {r.get(t.name, 0)}"
        if t.subtypes:
            part += " (" + ", ".join(f"{st} {sub.get(t.name, {}).get(st, 0)}" for st in t.subtypes) + ")"
        release.append(part)
        split_parts += [f"{sp.label} {s.get(sp.name, {}).get(t.name, 0)}" for sp in t.splits]
    unstable = counts.get("readings_dropped") or {}
    return (
        f"exports: {where}\n"
        f"  release ({sum(r.values())} rows): " + " · ".join(release) + "\n"
        "  splits: "
        + " · ".join(split_parts)
        + (
            "\n  not asked, another reading gives another answer: "
            + " · ".join(f"{t.name} {unstable.get(t.name, 0)}" for t in tasks())
            if any(unstable.values())
            else ""
        )
    )


EXPORT = Stage(
    name="export",
    outputs=schema.ARTIFACTS["export"],
    version=VERSION,
    unit_kind="all",
    run=run,
    needs=("qa", "project"),
    sections=("qa",),
    raw_inputs=_verification_raw,
    carried=carried_ledger,
    publish=publish_export,
    description="Answer letters balanced per task; the release jsonl, rich parquet, images, splits; exports/",
)
