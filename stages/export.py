"""The published benchmark: answer letters, the release file, the rich parquet, the splits.

What is task-specific comes from the registered tasks (``vsi_wild.stages.qa.registry``): their
order, the columns they add, their splits and derived rows.

Why a global step: the correct letter of a multiple-choice question is *assigned*, balanced over a
whole task (and within each subtype and correct-answer text), which needs every question of the
task at once. Each video's questions arrive with their correct option and 3 distractors in a
seeded order; here the questions of a task are ranked by (subtype, correct text, hash(seed, doc_id))
and rank r gets letter ``perm_b[r % 4]`` for a seeded permutation per block b = r // 4. So every
letter's count per task differs from any other's by at most 1 per stratum, and the letter carries
no information about the subtype or the answer.

Outputs (relative to the export folder; ``exports/`` under the data root mirrors it):
- ``vsi_super_wild_qa.jsonl``  the release format, exactly: one JSON object per line with the keys
  ``doc_id, video_name, task_type, question, answer, frame_indices, options`` (compact separators,
  UTF-8, as the public file);
- ``qa.parquet``  every row of every split with the streaming fields and provenance (QA_EXPORT);
- ``text_debias.parquet``  with ``qa.debias_text``: the questions the text probe's pruning dropped
  (TEXT_DEBIAS); ``text_bias.parquet`` every row's text bias (TEXT_BIAS, ``vsi_wild.stages.leak_probe``),
  a figure of the whole build kept apart from the rows;
- ``ledger.parquet``  the question ledger (QA_LEDGER, ``vsi_wild.stages.ledger``): each question's
  identity, number, option order and letter, which the next export keeps;
- ``splits/vpo_unrotated/vsi_super_wild_qa.jsonl``  the VPO control (same anchors and options,
  unrotated views; its images are in ``images/``);
- ``splits/voc_repeat/vsi_super_wild_qa.jsonl`` + ``splits/voc_repeat/videos/``  VOC-Repeat: each
  view video concatenated with itself k times, the same final counts;
- ``splits/voc_stream.parquet``  the streaming VOC questions (also in qa.parquet);
- ``counts.json``  questions per split and task, answer letters per task, answer texts per task and subtype;
- ``skipped.parquet``  the questions not asked because their answer differs between readings (the qa
  stage's, ``vsi_wild.stages.qa.readings``: the row's ``reading`` names the one that changes it), then those
  the answer-text balance did not ask (QA_SKIPPED, with the reason: ``vsi_wild.stages.qa.balance``).

The release file and the public evaluation task: the task loads it unchanged, shows VMR's pivot
frame and VPO's four frames by reading ``frame_indices`` from the view video, and the whole video
otherwise. So through that task a VPO row shows the *unrotated* frames of the anchors (the
release's own shortcoming, which the task's code, not the file, decides); the rotated renders the
question describes are ``image_paths`` in ``qa.parquet`` (and ``images/``), for evaluators that
read them. VOC rows there are the final totals; the streaming checkpoints (``query_times`` /
``answers``) are in ``qa.parquet`` and ``splits/voc_stream.parquet``; the checkpoint wording is the
one the public task already rewrites into "Report the total count up to this point".
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from vsi_wild import schema
from vsi_wild.digest import table_bytes
from vsi_wild.stages import leak_probe
from vsi_wild.stages.ledger import (
    ASKED,
    DUPLICATE,
    TEXT_BIASED,
    UNASKED,
    Ledger,
    Move,
    identity,
    keep_letters,
    ledger_row,
    merged,
)
from vsi_wild.stages.qa.balance import answer_histograms, balance_answers
from vsi_wild.stages.qa.common import LETTERS, StableRng, question_id, skipped_table, stable_hash
from vsi_wild.stages.qa.params import QAParams
from vsi_wild.stages.qa.registry import MC, RELEASE, Split, task, tasks

RELEASE_KEYS = ("doc_id", "video_name", "task_type", "question", "answer", "frame_indices", "options")
RELEASE_FILE = "vsi_super_wild_qa.jsonl"


def splits() -> list[Split]:
    """Every task's splits beside the release, in task order."""
    return [s for t in tasks() for s in t.splits]


def split_names() -> list[str]:
    """The file order of the rich parquet's splits: the release, then the tasks' splits."""
    return [RELEASE, *(s.name for s in splits())]


def split_file(split: Split) -> str:
    return f"splits/{split.name}.parquet" if split.form == "rich" else f"splits/{split.name}/{RELEASE_FILE}"


@dataclass
class Export:
    rows: list[dict[str, Any]]  # QA_EXPORT rows, in file order
    repeats: list[tuple[str, str, int]]  # (source video name, repeated video name, k)
    dropped: list[dict[str, str]] = field(default_factory=list)  # duplicates removed
    unasked: list[dict[str, str]] = field(default_factory=list)  # QA_SKIPPED rows the answer balance dropped
    # QA_SKIPPED rows of the qa units: what their readings left unasked (``reading`` set)
    unstable: list[dict[str, str | None]] = field(default_factory=list)
    question_ids: dict[str, str] = field(default_factory=dict)  # doc_id -> qa.common.question_id (asked rows)
    ledger: list[dict[str, Any]] = field(default_factory=list)  # QA_LEDGER rows: the next export starts from them
    moves: list[Move] = field(default_factory=list)  # letters the balance bound forced to move
    text_bias: list[dict[str, Any]] = field(default_factory=list)  # TEXT_BIAS rows (``add_text_bias``)

    def table(self) -> pa.Table:
        return schema.table(schema.QA_EXPORT, self.rows)

    def split_rows(self, split: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["split"] == split]

    def counts(self) -> dict[str, Any]:
        per_split: dict[str, dict[str, int]] = {}
        for r in self.rows:
            d = per_split.setdefault(r["split"], {})
            d[r["task_type"]] = d.get(r["task_type"], 0) + 1
        letters: dict[str, dict[str, int]] = {}
        for r in self.split_rows(RELEASE):
            if r["options"]:
                d = letters.setdefault(r["task_type"], {k: 0 for k in LETTERS})
                d[r["answer"]] += 1
        subtypes: dict[str, dict[str, int]] = {}
        for r in self.split_rows(RELEASE):
            d = subtypes.setdefault(r["task_type"], {})
            d[r["subtype"]] = d.get(r["subtype"], 0) + 1
        return {
            "release": {t.name: per_split.get(RELEASE, {}).get(t.name, 0) for t in tasks()},
            "release_subtypes": {t: dict(sorted(d.items())) for t, d in sorted(subtypes.items())},
            "splits": {s: dict(sorted(per_split.get(s, {}).items())) for s in split_names()},
            "letters": letters,
            "duplicates_dropped": len(self.dropped),
            "answer_texts": answer_histograms(self.rows),
            "balance_dropped": len(self.unasked),
            "readings_dropped": {t.name: sum(r["task_type"] == t.name for r in self.unstable) for t in tasks()},
        }


# ----------------------------------------------------------------------------- letters
def assign_letters(rows: Sequence[dict[str, Any]], seed: int) -> dict[str, int]:
    """doc_id -> answer index (0-3) for the multiple-choice rows, balanced per task (see module)."""
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_task[r["task_type"]].append(r)
    out: dict[str, int] = {}
    for name, rs in sorted(by_task.items()):
        ranked = sorted(rs, key=lambda r: (r["subtype"], r["correct"], stable_hash(seed, "letters", r["doc_id"])))
        perm: list[int] = []
        for rank, r in enumerate(ranked):
            if rank % 4 == 0:
                perm = StableRng(seed, "letters", name, rank // 4).shuffled(range(4))
            out[r["doc_id"]] = perm[rank % 4]
    return out


def options_with_letters(correct: str, distractors: Sequence[str], index: int) -> list[str]:
    texts = list(distractors)
    texts.insert(index, correct)
    return [f"{LETTERS[i]}) {t}" for i, t in enumerate(texts)]


# ----------------------------------------------------------------------------- assembly
def _doc_ids(questions: list[dict[str, Any]], ledger: Ledger) -> None:
    """Release-style ids: ``{video_name}|{n}|{task}|{variant}``; variant 0 for release rows, the
    split's for twins (a question and its twins, the control and the stream form, share n). A
    question the ledger knows keeps its n; a new one gets the next number its video never had, new
    ones numbered in the release's task order (``QATask.release_rank``: VOC, VPO, VMR, VOO), so a
    first build numbers a video's questions 0, 1, 2, ... in that order."""
    variants = {RELEASE: "0", **{s.name: s.variant for s in splits() if s.variant}}

    def key(q: dict[str, Any]) -> tuple[int, int, int]:
        t = task(q["task_type"])
        return t.release_rank, q["index"], t.subtype_rank(q["subtype"])

    by_video: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for q in questions:
        by_video[q["video_name"]].append(q)
    next_number = ledger.next_number()
    for name, qs in by_video.items():
        groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
        for q in qs:
            if q["split"] in variants:
                groups[key(q)].append(q)
        number: dict[tuple, int] = {}
        fresh = next_number.get(name, 0)
        for k in sorted(groups):
            head = next((q for q in groups[k] if q["split"] == RELEASE), groups[k][0])
            known = ledger.get(head["_identity"])
            if known is not None and known["n"] is not None:
                number[k] = known["n"]
            else:
                number[k], fresh = fresh, fresh + 1
        for q in qs:
            n = number[key(q)]
            variant = variants[q["split"]]
            q["_n"] = n
            q["doc_id"] = f"{name}|{n}|{q['task_type']}|{variant}"
            q["base_doc_id"] = None if q["split"] == RELEASE else f"{name}|{n}|{q['task_type']}|0"


def _content_key(q: dict[str, Any]) -> tuple:
    opts = tuple(sorted([q["correct"], *q["distractors"]])) if q["correct"] is not None else None
    fi = tuple(q["frame_indices"]) if q["frame_indices"] is not None else None
    return (q["split"], q["video_name"], q["task_type"], q["question"], fi, opts, q["correct"], tuple(q["answers"]))


def assemble(
    questions: pa.Table | Iterable[dict[str, Any]],
    params: QAParams,
    ledger: Ledger | None = None,
    text_biased: Sequence[dict[str, Any]] = (),
) -> Export:
    """Every exported row from the videos' question tables (QA_QUESTIONS rows), and the new ledger.

    ``ledger``: the previous build's (``stages.ledger``; None: a first build). ``text_biased``: the
    release questions the text debiasing dropped (``drop_text_biased``), for the ledger."""
    ledger = ledger or Ledger.empty()
    qs = [dict(q) for q in (questions.to_pylist() if isinstance(questions, pa.Table) else questions)]
    for q in qs:
        q["_identity"] = identity(q)
    _doc_ids(qs, ledger)
    seen: dict[tuple, str] = {}
    kept, dropped, duplicates = [], [], []
    for q in sorted(qs, key=lambda q: q["doc_id"]):
        key = _content_key(q)
        if key in seen:
            dropped.append({"doc_id": q["doc_id"], "duplicate_of": seen[key]})
            duplicates.append(q)
            continue
        seen[key] = q["doc_id"]
        kept.append(q)
    ids = Counter(q["doc_id"] for q in kept)
    if any(n > 1 for n in ids.values()):
        raise ValueError(f"duplicate doc ids: {[i for i, n in ids.items() if n > 1][:5]}")
    # the answer texts' balance (stages/qa/balance.py) drops release rows; their twins follow below
    unasked_ids, unasked = balance_answers(kept, params, ledger.rows)
    unasked_rows = [q for q in kept if q["doc_id"] in unasked_ids]
    kept = [q for q in kept if q["doc_id"] not in unasked_ids]
    # a control is dropped with its release twin, never alone
    release_ids = {q["doc_id"] for q in kept if q["split"] == RELEASE}
    kept = [q for q in kept if q["split"] == RELEASE or q["base_doc_id"] in release_ids]

    mc = {t.name for t in tasks() if t.kind == MC}  # letters are balanced over the multiple-choice tasks
    mc_release = [q for q in kept if q["split"] == RELEASE and q["task_type"] in mc]
    orders, moves = keep_letters(mc_release, assign_letters(mc_release, params.seed), ledger, params.seed)
    by_doc = {q["doc_id"]: q for q in mc_release}
    rows: list[dict[str, Any]] = []
    for q in kept:
        if q["task_type"] in mc:
            base = q["doc_id"] if q["split"] == RELEASE else q["base_doc_id"]
            order = orders[base]
            idx = order.index(by_doc[base]["correct"])
            if sorted(order) != sorted([q["correct"], *q["distractors"]]):  # a twin offering other texts
                order = [*q["distractors"]]
                order.insert(idx, q["correct"])
            answer, options = LETTERS[idx], [f"{LETTERS[i]}) {t}" for i, t in enumerate(order)]
            answer_text = q["correct"]
        else:
            idx, options = None, None
            answer = answer_text = q["answers"][-1]
        rows.append(
            _export_row(
                q,
                doc_id=q["doc_id"],
                answer=answer,
                options=options,
                video_path=f"videos/{q['video_name']}",
                answer_text=answer_text,
                answer_index=idx,
                base_doc_id=q["base_doc_id"],
                repeat=None,
            )
        )

    repeats: list[tuple[str, str, int]] = []
    for t in tasks():
        if t.derive:
            derived, videos = t.derive([r for r in rows if r["split"] == RELEASE and r["task_type"] == t.name], params)
            rows += derived
            repeats += videos
    split_rank = {s: i for i, s in enumerate(split_names())}
    rows.sort(key=lambda r: (split_rank[r["split"]], r["video_name"], r["_n"]))
    for r in rows:
        r.pop("_n")
    reasons = {d: u["reason"] for d, u in zip(sorted(unasked_ids), unasked, strict=True)}  # balance_answers' order
    current = _ledger_rows(kept, unasked_rows, reasons, duplicates, seen, text_biased, orders, moves)
    for ident, r in current.items():
        if r["state"] in (UNASKED, TEXT_BIASED) and ledger.state(ident) == ASKED:
            r["forced_out"] = True
    new_ledger = merged(ledger, current)
    return Export(
        rows,
        sorted(repeats),
        dropped,
        unasked=unasked,
        question_ids={q["doc_id"]: question_id(q) for q in kept},
        ledger=new_ledger,
        moves=moves,
    )


def _ledger_rows(
    kept: Sequence[dict[str, Any]],
    unasked_rows: Sequence[dict[str, Any]],
    reasons: dict[str, str],
    duplicates: Sequence[dict[str, Any]],
    seen: dict[tuple, str],
    text_biased: Sequence[dict[str, Any]],
    orders: dict[str, list[str]],
    moves: Sequence[Move],
) -> dict[str, dict[str, Any]]:
    """This build's QA_LEDGER rows of its release questions, by identity."""
    moved = {m.doc_id: m for m in moves}
    current: dict[str, dict[str, Any]] = {}
    for q in text_biased:
        current[q["_identity"]] = ledger_row(
            q, TEXT_BIASED, reason=q["_reason"], dropped_round=q["_round"], dropped_text_bias=q["_text_bias"]
        )
    for q in duplicates:
        if q["split"] == RELEASE:
            current[q["_identity"]] = ledger_row(
                q, DUPLICATE, n=q["_n"], doc_id=q["doc_id"], reason=f"the same question as {seen[_content_key(q)]}"
            )
    for q in unasked_rows:
        current[q["_identity"]] = ledger_row(q, UNASKED, n=q["_n"], doc_id=q["doc_id"], reason=reasons[q["doc_id"]])
    for q in kept:
        if q["split"] != RELEASE:
            continue
        extra: dict[str, Any] = {"n": q["_n"], "doc_id": q["doc_id"]}
        if q["doc_id"] in orders:
            extra |= {"options": orders[q["doc_id"]], "answer_index": orders[q["doc_id"]].index(q["correct"])}
        if q["doc_id"] in moved:
            extra |= {"moved_from": moved[q["doc_id"]].before, "moved_stratum": moved[q["doc_id"]].stratum}
        current[q["_identity"]] = ledger_row(q, ASKED, **extra)
    return current


# The export's own columns that the question table also has: copied from the question row.
_COPIED = tuple(c.name for c in schema.QUESTION_COLUMNS if c.role == "base" and c.in_export and c.in_questions)
# The export's own columns it makes (the rest of its own): ``_export_row``'s keyword arguments.
_MADE = tuple(c.name for c in schema.QUESTION_COLUMNS if c.role == "base" and c.in_export and not c.in_questions)


def _export_row(q: dict[str, Any], **made: Any) -> dict[str, Any]:
    """The QA_EXPORT row of question row ``q``: the export's own columns (copied from ``q``, or
    ``made`` here), then every task's columns (filled by ``q``'s task, None for the others)."""
    missing = [c for c in _MADE if c not in made]
    if missing:
        raise KeyError(f"export columns {missing} are declared (schema.QUESTION_COLUMNS) but not made")
    row = {c: None for c in schema.QA_EXPORT.names}
    row.update({c: q[c] for c in _COPIED})
    row.update(made)
    row.update({c: value(q) for c, value in task(q["task_type"]).export_columns.items()})
    row["_n"] = q["_n"]
    return row


# ----------------------------------------------------------------------------- text leak probe
def _probe_items(questions: Sequence[dict[str, Any]]) -> list[leak_probe.Item]:
    """The release questions (QA_QUESTIONS rows) as probe items, keyed by their row number. The
    correct option is listed first: the probe's features do not depend on the options' order."""
    items = []
    for i, q in enumerate(questions):
        if q["split"] != RELEASE:
            continue
        if task(q["task_type"]).kind == MC:
            items.append(
                leak_probe.Item(
                    str(i),
                    q["task_type"],
                    q["question"],
                    q["source_id"],
                    q["video_id"],
                    options=(q["correct"], *q["distractors"]),
                    correct=0,
                )
            )
        else:
            items.append(
                leak_probe.Item(
                    str(i), q["task_type"], q["question"], q["source_id"], q["video_id"], answer=float(q["answers"][-1])
                )
            )
    return items


def drop_text_biased(
    questions: pa.Table, params: QAParams, ledger: Ledger | None = None
) -> tuple[pa.Table, list[dict[str, Any]], list[dict[str, Any]]]:
    """``qa.debias_text``: the questions without those the text probe's iterative pruning drops
    (``leak_probe.debias``), the TEXT_DEBIAS rows saying which and why, and the dropped release
    questions (QA_QUESTIONS rows with their ``_identity`` and why) for the ledger. A dropped
    question's twins (control, stream form) go with it when ``assemble`` drops twins without a
    release row. With the previous build's ``ledger``, a question it dropped stays dropped (with the
    round and score it was dropped with) and one it kept is cut only after the newcomers."""
    ledger = ledger or Ledger.empty()
    rows = questions.to_pylist()
    sticky: dict[int, dict[str, Any]] = {}
    for i, q in enumerate(rows):
        before = ledger.get(identity(q)) if q["split"] == RELEASE else None
        if before is not None and before["state"] == TEXT_BIASED:
            sticky[i] = {
                "round": before["dropped_round"],
                "text_bias": before["dropped_text_bias"],
                "reason": before["reason"],
            }
    probed = [q if i not in sticky else {**q, "split": "_kept_out"} for i, q in enumerate(rows)]
    protected = {
        str(i)
        for i, q in enumerate(rows)
        if q["split"] == RELEASE and ledger.state(identity(q)) not in (None, TEXT_BIASED)
    }
    pruned = leak_probe.debias(
        _probe_items(probed),
        stop_margin=params.debias_text_margin,
        step=params.debias_text_step,
        seed=params.seed,
        protected=protected,
    )
    dropped = {**{int(d["key"]): d for d in pruned.dropped}, **sticky}
    out, biased = [], []
    for i, d in sorted(dropped.items()):
        q = rows[i]
        out.append(
            {
                "video_id": q["video_id"],
                "task_type": q["task_type"],
                "subtype": q["subtype"],
                "question": q["question"],
                "answer_text": q["correct"] if q["correct"] is not None else q["answers"][-1],
                "round": d["round"],
                "text_bias": d["text_bias"],
                "reason": d["reason"],
            }
        )
        biased.append(
            {**q, "_identity": identity(q), "_round": d["round"], "_text_bias": d["text_bias"], "_reason": d["reason"]}
        )
    keep = [i not in dropped for i in range(len(rows))]
    return questions.filter(pa.array(keep, type=pa.bool_())), out, biased


def add_text_bias(export: Export, seed: int) -> leak_probe.ProbeResult:
    """Probe the export's release rows and record each row's text bias (a twin row: its release
    row's) in ``export.text_bias`` (TEXT_BIAS rows, text_bias.parquet); returns the probe's result."""
    result = leak_probe.probe(leak_probe.items_from_release(export.split_rows(RELEASE)), seed=seed)
    export.text_bias = [
        {
            "doc_id": r["doc_id"],
            "split": r["split"],
            "text_bias": result.bias.get(r["doc_id"] if r["split"] == RELEASE else r["base_doc_id"] or ""),
        }
        for r in export.rows
    ]
    return result


def image_export_path(video_id: str, unit_file: str) -> str:
    """``images/vpo0_f1_rot.jpg`` of a video's QA output -> ``images/<video_id>/vpo0_f1_rot.jpg``."""
    return f"images/{video_id}/{Path(unit_file).name}"


# ----------------------------------------------------------------------------- files
def release_line(row: dict[str, Any]) -> str:
    """One line of the release file: the seven keys in order, compact, UTF-8 (as the public file)."""
    return json.dumps({k: row[k] for k in RELEASE_KEYS}, ensure_ascii=False, separators=(",", ":"))


def release_bytes(rows: Iterable[dict[str, Any]]) -> bytes:
    return "".join(release_line(r) + "\n" for r in rows).encode("utf-8")


def write_export(dest: Callable[[str], Path], export: Export) -> dict[str, Any]:
    """Write the export's tables; ``dest(relative path)`` gives where (videos and images are the
    caller's). Returns the counts."""

    def put(rel: str, data: bytes) -> None:
        dest(rel).write_bytes(data)

    put(RELEASE_FILE, release_bytes(export.split_rows(RELEASE)))
    put("qa.parquet", table_bytes(export.table()))
    put("skipped.parquet", table_bytes(skipped_table([*export.unstable, *export.unasked])))
    put("text_bias.parquet", table_bytes(schema.table(schema.TEXT_BIAS, export.text_bias)))
    put("ledger.parquet", table_bytes(schema.table(schema.QA_LEDGER, export.ledger)))
    for s in splits():
        rows = export.split_rows(s.name)
        put(
            split_file(s),
            table_bytes(schema.table(schema.QA_EXPORT, rows)) if s.form == "rich" else release_bytes(rows),
        )
    counts = export.counts()
    put("counts.json", (json.dumps(counts, indent=1, sort_keys=True) + "\n").encode())
    return counts


def ffconcat_list(path: str, k: int) -> str:
    """An ffconcat playlist playing ``path`` k times (a relative path is relative to the list)."""
    return "ffconcat version 1.0\n" + "".join(f"file '{_ffconcat_escape(path)}'\n" for _ in range(k))


def concat_video(src: str | Path, k: int, dst: str | Path, ffmpeg: str = "ffmpeg") -> None:
    """``src`` played ``k`` times in a row, by stream copy (no re-encode: the same frames k times)."""
    src = os.path.abspath(src)
    with tempfile.TemporaryDirectory() as tmp:
        lst = Path(tmp) / "list.ffconcat"
        lst.write_text(ffconcat_list(src, k))
        cmd = [
            ffmpeg,
            "-v",
            "error",
            "-y",
            "-f",
            "concat",
            "-safe",
            "0",
            "-i",
            str(lst),
            "-map",
            "0:v:0",
            "-c",
            "copy",
            "-map_metadata",
            "-1",
            "-fflags",
            "+bitexact",
            "-movflags",
            "+faststart",
            str(dst),
        ]
        res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"ffmpeg could not concatenate {src} x{k}: {res.stderr.strip()[-500:]}")


def _ffconcat_escape(path: str) -> str:
    return path.replace("'", "'\\''")
