"""What changed between two builds of the benchmark: questions added, removed and changed, per task
and per video, and the fixes or stage versions that changed with them.

A build is its release questions (``snapshot``: schema.REPORT_QUESTIONS rows) and what made them
(``BuildInfo``: the stage versions and each video's applied fixes). A question is the same one in
both builds when its video, task, subtype, text and query times are; it changed when its answer
or its set of options did. Its answer letter, option order and doc id are kept by the export's
ledger (stages/ledger.py), so a move of any of them is counted apart (``letters``, ``order``,
``doc_ids``): a fix to one video must show none in another.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from vsi_wild.stages.evaluate import option_texts

Key = tuple[str, str, str, str, tuple[float, ...], int]
# What is counted per task and per video: questions added, removed, changed (answer or option set),
# and of the questions in both builds those whose answer letter, option order or doc id moved.
KINDS = ("added", "removed", "changed", "letters", "order", "doc_ids")


def snapshot(release: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The schema.REPORT_QUESTIONS rows of the release rows (schema.QA_EXPORT), in their order."""
    return [
        {
            "video_id": r["video_id"],
            "source_id": r["source_id"],
            "task_type": r["task_type"],
            "subtype": r["subtype"],
            "question": r["question"],
            "query_times": list(r["query_times"] or []),
            "doc_id": r["doc_id"],
            "answer": r["answer"],
            "answer_text": r["answer_text"],
            "options": option_texts(r) if r["options"] else None,
            "metadata_fingerprint": r["metadata_fingerprint"],
            "pipeline_version": r["pipeline_version"],
        }
        for r in release
    ]


def build_info(
    export_key: str, stage_versions: Mapping[str, str], fixes: Mapping[str, Sequence[Mapping[str, Any]]]
) -> dict[str, Any]:
    """What made a build: the export it shows, every stage's version, and per video the fixes
    applied to its metadata (schema.FIXES_APPLIED rows) as "op (line n): summary" lines."""
    return {
        "export_key": export_key,
        "stage_versions": dict(sorted(stage_versions.items())),
        "fixes": {v: [fix_line(f) for f in rows] for v, rows in sorted(fixes.items()) if rows},
    }


def fix_line(row: Mapping[str, Any]) -> str:
    return f"{row['op']} (line {row['line']}): {row['summary']}"


def _keyed(rows: Sequence[Mapping[str, Any]]) -> dict[Key, Mapping[str, Any]]:
    seen: Counter = Counter()
    out = {}
    for r in rows:
        base = (r["video_id"], r["task_type"], r["subtype"], r["question"], tuple(r["query_times"] or ()))
        out[(*base, seen[base])] = r
        seen[base] += 1
    return out


def _answer(r: Mapping[str, Any]) -> dict[str, Any]:
    return {"doc_id": r["doc_id"], "answer": r["answer_text"], "options": list(r["options"]) if r["options"] else None}


def compare(
    before: Sequence[Mapping[str, Any]],
    before_build: Mapping[str, Any],
    after: Sequence[Mapping[str, Any]],
    after_build: Mapping[str, Any],
    label: str,
) -> dict[str, Any]:
    """The changes from build ``before`` (named ``label``) to build ``after``: counts per task and
    per video, the changed questions with their answers and options before and after, and why
    (per video: fixes added or removed, its metadata changed, another pipeline version; for the
    whole build: stage versions)."""
    old, new = _keyed(before), _keyed(after)
    added = [new[k] for k in new if k not in old]
    removed = [old[k] for k in old if k not in new]
    changed: list[dict[str, Any]] = []
    letters: list[dict[str, Any]] = []
    order: list[dict[str, Any]] = []
    renumbered: list[dict[str, Any]] = []
    for k in new:
        if k in old:
            a, b = old[k], new[k]
            entry = {
                "video_id": k[0],
                "task_type": k[1],
                "subtype": k[2],
                "question": k[3],
                "query_times": list(k[4]),
                "before": _answer(a),
                "after": _answer(b),
            }
            if a["answer_text"] != b["answer_text"] or sorted(a["options"] or []) != sorted(b["options"] or []):
                changed.append(entry)
            if a["options"] and b["options"] and a["answer"] != b["answer"]:
                letters.append({**entry, "letter": [a["answer"], b["answer"]]})
            if (
                a["options"]
                and b["options"]
                and sorted(a["options"]) == sorted(b["options"])
                and a["options"] != b["options"]
            ):
                order.append(entry)
            if a["doc_id"] != b["doc_id"]:
                renumbered.append({**entry, "doc_id": [a["doc_id"], b["doc_id"]]})
    per_task: dict[str, Counter] = defaultdict(Counter)
    per_video: dict[str, Counter] = defaultdict(Counter)
    groups: tuple[tuple[str, Sequence[Mapping[str, Any]]], ...] = (
        ("added", added),
        ("removed", removed),
        ("changed", changed),
        ("letters", letters),
        ("order", order),
        ("doc_ids", renumbered),
    )
    for what, rows in groups:
        for r in rows:
            per_task[r["task_type"]][what] += 1
            per_video[r["video_id"]][what] += 1
    versions_before, versions_after = before_build.get("stage_versions", {}), after_build.get("stage_versions", {})
    stage_versions = {
        s: [versions_before.get(s), versions_after.get(s)]
        for s in sorted(set(versions_before) | set(versions_after))
        if versions_before.get(s) != versions_after.get(s)
    }
    videos = {}
    for v in sorted(per_video):
        videos[v] = {
            **{w: per_video[v][w] for w in KINDS},
            "causes": _causes(
                v,
                [r for r in before if r["video_id"] == v],
                before_build,
                [r for r in after if r["video_id"] == v],
                after_build,
            ),
        }
    return {
        "previous": label,
        "before": len(before),
        "after": len(after),
        "added": len(added),
        "removed": len(removed),
        "changed": len(changed),
        "letters": len(letters),
        "order": len(order),
        "doc_ids": len(renumbered),
        "per_task": {t: {w: c[w] for w in KINDS} for t, c in sorted(per_task.items())},
        "per_video": videos,
        "stage_versions": stage_versions,
        "changed_questions": changed,
        "letter_changes": letters,
        "order_changes": order,
        "doc_id_changes": renumbered,
        "added_questions": [_listed(r) for r in added],
        "removed_questions": [_listed(r) for r in removed],
    }


def _listed(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "video_id": r["video_id"],
        "task_type": r["task_type"],
        "subtype": r["subtype"],
        "question": r["question"],
        **_answer(r),
    }


def _causes(
    video: str,
    before: Sequence[Mapping[str, Any]],
    before_build: Mapping[str, Any],
    after: Sequence[Mapping[str, Any]],
    after_build: Mapping[str, Any],
) -> list[str]:
    causes = []
    fixes_before = before_build.get("fixes", {}).get(video, [])
    fixes_after = after_build.get("fixes", {}).get(video, [])
    causes += [f"fix added: {f}" for f in fixes_after if f not in fixes_before]
    causes += [f"fix removed: {f}" for f in fixes_before if f not in fixes_after]
    fp_before = {r["metadata_fingerprint"] for r in before}
    fp_after = {r["metadata_fingerprint"] for r in after}
    if fp_before and fp_after and fp_before != fp_after and not causes:
        causes.append("its metadata changed (an upstream stage's output, no fix of its own)")
    pv_before = sorted({r["pipeline_version"] for r in before})
    pv_after = sorted({r["pipeline_version"] for r in after})
    if pv_before and pv_after and pv_before != pv_after:
        causes.append(f"pipeline version {', '.join(pv_before)} → {', '.join(pv_after)}")
    if not before:
        causes.append("new video")
    elif not after:
        causes.append("video gone")
    return causes
