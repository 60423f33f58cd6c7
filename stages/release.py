"""A release, as data: its changelog against the previous release, its dataset card, its manifest.

Pure: rows and dicts in, text and rows out (``vsi_wild/release.py`` reads the store and writes the
folder). Questions are matched across releases by doc id, which the export's ledger keeps for a
question that persists (stages/ledger.py), so a question is "changed" when the same doc id has
another answer, option set, answer letter, option order or frames.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

CHANGE_FIELDS = ("answer", "options", "letter", "order", "frames")


def _texts(options: Sequence[str] | None) -> list[str] | None:
    return [o.split(") ", 1)[1] if ") " in o else o for o in options] if options else None


def _what_changed(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    ta, tb = _texts(a["options"]), _texts(b["options"])
    out = []
    if a["answer_text"] != b["answer_text"]:
        out.append("answer")
    if sorted(ta or []) != sorted(tb or []):
        out.append("options")
    if ta and tb and a["answer"] != b["answer"]:
        out.append("letter")
    if ta and tb and sorted(ta) == sorted(tb) and ta != tb:
        out.append("order")
    if (a["frame_indices"] or None) != (b["frame_indices"] or None):
        out.append("frames")
    return out


def causes(
    video: str, source: str, before_build: Mapping[str, Any], after_build: Mapping[str, Any], before_sources: set[str]
) -> list[str]:
    """Why a video's questions changed: its fix ops, stage versions, a new source."""
    out = []
    fixes_before = before_build.get("fixes", {}).get(video, [])
    fixes_after = after_build.get("fixes", {}).get(video, [])
    out += [f"fix added: {f}" for f in fixes_after if f not in fixes_before]
    out += [f"fix removed: {f}" for f in fixes_before if f not in fixes_after]
    vb, va = before_build.get("stage_versions", {}), after_build.get("stage_versions", {})
    out += [f"stage {s} version {vb.get(s)} → {va.get(s)}" for s in sorted(set(vb) | set(va)) if vb.get(s) != va.get(s)]
    if source not in before_sources:
        out.append(f"new source {source}")
    return out or ["its metadata changed upstream (no fix of its own, no stage version change)"]


def changelog(
    before: Sequence[Mapping[str, Any]] | None,
    before_build: Mapping[str, Any],
    after: Sequence[Mapping[str, Any]],
    after_build: Mapping[str, Any],
    previous: str | None,
) -> dict[str, Any]:
    """Questions added, removed and changed (by doc id; release rows of qa.parquet), each with its
    cause. ``before`` None: the first release."""
    new = {r["doc_id"]: r for r in after}
    if before is None:
        return {
            "previous": None,
            "added": len(new),
            "removed": 0,
            "changed": 0,
            "per_field": {},
            "questions": [],
            "summary": f"first release: {len(new)} questions",
        }
    old = {r["doc_id"]: r for r in before}
    sources_before = {r["source_id"] for r in before}
    entries = []
    for d in sorted(old.keys() | new.keys()):
        a, b = old.get(d), new.get(d)
        if a is not None and b is not None:
            what = _what_changed(a, b)
            if not what:
                continue
            kind = "changed"
        else:
            what, kind = [], "added" if a is None else "removed"
        r = b or a
        assert r is not None  # a row is in the old or the new release
        entries.append(
            {
                "doc_id": d,
                "kind": kind,
                "what": what,
                "video_id": r["video_id"],
                "task_type": r["task_type"],
                "question": r["question"],
                "before": None
                if a is None
                else {"answer": a["answer"], "answer_text": a["answer_text"], "options": a["options"]},
                "after": None
                if b is None
                else {"answer": b["answer"], "answer_text": b["answer_text"], "options": b["options"]},
                "causes": causes(r["video_id"], r["source_id"], before_build, after_build, sources_before)
                if kind != "removed"
                else _removed_causes(r, before_build, after_build, {x["source_id"] for x in after}),
            }
        )
    kinds = Counter(e["kind"] for e in entries)
    per_field = Counter(f for e in entries for f in e["what"])
    return {
        "previous": previous,
        "added": kinds["added"],
        "removed": kinds["removed"],
        "changed": kinds["changed"],
        "per_field": {f: per_field[f] for f in CHANGE_FIELDS if per_field[f]},
        "questions": entries,
        "summary": f"against {previous}: {kinds['added']} added, "
        f"{kinds['removed']} removed, {kinds['changed']} changed",
    }


def _removed_causes(
    r: Mapping[str, Any], before_build: Mapping[str, Any], after_build: Mapping[str, Any], sources_after: set[str]
) -> list[str]:
    if r["source_id"] not in sources_after:
        return [f"source {r['source_id']} removed"]
    return causes(r["video_id"], r["source_id"], before_build, after_build, {r["source_id"]})


def changelog_markdown(version: str, log: Mapping[str, Any]) -> str:
    out = [f"# Changelog of {version}", "", log["summary"] + "."]
    if log.get("per_field"):
        out += ["", "Changed, by what changed: " + ", ".join(f"{f} {n}" for f, n in log["per_field"].items()) + "."]
    by_video: dict[str, list] = defaultdict(list)
    for e in log["questions"]:
        by_video[e["video_id"]].append(e)
    for video, entries in sorted(by_video.items()):
        out += ["", f"## {video}", "", "Cause: " + "; ".join(sorted({c for e in entries for c in e["causes"]})), ""]
        for e in entries:
            detail = f" ({', '.join(e['what'])})" if e["what"] else ""
            before = f" {e['before']['answer']} {e['before']['answer_text']!r}" if e["before"] else ""
            after = f" → {e['after']['answer']} {e['after']['answer_text']!r}" if e["after"] else ""
            out.append(f"- {e['kind']} `{e['doc_id']}`{detail}:{before}{after}")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- the dataset card
TASK_CATEGORIES = ("visual-question-answering", "multiple-choice")
RELEASE_PARQUET = "data/release.parquet"  # the release rows (the jsonl's seven fields): the `default` config


def size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return name
    return "n>1M"


# how the card tells a reader to score predictions on the release folder without lmms-eval
EVALUATE_COMMAND = "vsi-wild evaluate --qa qa.parquet --predictions predictions.jsonl"


def card(
    version: str,
    license_id: str,
    report: Mapping[str, Any],
    counts: Mapping[str, Any],
    log: Mapping[str, Any],
    videos_included: bool,
    task_dir: str,
    rows: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The dataset card (README.md): YAML header (configs, license, task categories, ...) and body.
    ``rows``: the release rows of qa.parquet (rich), for how many answers no person has verified."""
    n = sum(counts.get("release", {}).values())
    header = {
        "pretty_name": f"VSI-Super-Wild {version}",
        "license": license_id,
        "language": ["en"],
        "task_categories": list(TASK_CATEGORIES),
        "tags": ["video", "spatial-reasoning", "streaming", "360-video", "world-state"],
        "size_categories": [size_category(n)],
        "configs": [
            {"config_name": "default", "default": True, "data_files": [{"split": "test", "path": RELEASE_PARQUET}]},
            {"config_name": "rich", "data_files": [{"split": "test", "path": "qa.parquet"}]},
        ],
    }
    stats = report.get("statistics", {})
    questions = report.get("questions", {})
    lines = [
        "---",
        yaml.safe_dump(header, sort_keys=False, allow_unicode=True).strip(),
        "---",
        "",
        f"# VSI-Super-Wild {version}",
        "",
        "Questions about hours of real 360° walking video that test whether a video model keeps a coherent "
        "world state: where the camera moves (VMR), in which order places were seen (VPO), in which order "
        "objects first or last appeared (VOO), and how many objects of a kind were seen (VOC). Rebuilt by "
        "the open vsi-wild pipeline; every question carries the evidence intervals that answer it.",
        "",
        "## Contents",
        "",
        f"- {n} release questions over {stats.get('videos', 0)} view videos ({stats.get('hours', 0.0):.2f} h)",
    ]
    for t, e in questions.items():
        sub = ", ".join(f"{k} {v}" for k, v in (e.get("subtypes") or {}).items())
        lines.append(f"- {t}: {e['n']} questions over {e['videos']} videos" + (f" ({sub})" if sub else ""))
    lines += [
        "",
        "| file | what |",
        "|---|---|",
        "| `vsi_super_wild_qa.jsonl` | the release rows in the public release's format |",
        f"| `{RELEASE_PARQUET}` | the same rows as parquet (config `default`) |",
        "| `qa.parquet` | every split's rows with the streaming fields and provenance (config `rich`) |",
        "| `splits/` | the VPO unrotated control, VOC-Repeat, the VOC streaming form |",
        "| `ledger.parquet` | each question's identity, doc id "
        "number, option order and letter (kept across versions) |",
        "| `images/` | the rendered VPO views, faces blurred |",
        "| `videos.jsonl` | each view video: name, sha256, size, its source and licence"
        + (" (the files are in `videos/`)" if videos_included else " (the files are not in this folder)")
        + " |",
        f"| `{task_dir}/` | the lmms-eval task of this release |",
        "| `CHANGELOG.md`, `changelog.json` | what changed since the previous release, and why |",
        "| `manifest.json` | every file's sha256 |",
        "",
        "## Use",
        "",
        "```python",
        "import datasets",
        'rows = datasets.load_dataset("<this folder or repo>", split="test")  # the release rows',
        'rich = datasets.load_dataset("<this folder or repo>", "rich", split="test")',
        "```",
        "",
        f"With lmms-eval: `lmms-eval --include_path {task_dir} --tasks vsi_super_wild_{_slug(version)} ...`, run "
        "from this folder with `VSI_SUPER_WILD_VIDEO_ROOT` naming the folder of the view videos. Scores: accuracy "
        "for VMR, VPO and VOO (the answer letter), MRA for VOC (1 - |prediction - answer| / max(answer, 1)).",
        "",
        f"Without lmms-eval: `{EVALUATE_COMMAND}`, run from this folder where the vsi-wild pipeline is "
        'installed, scores a JSONL file of `{"doc_id": ..., "prediction": ...}` lines (a letter, or a number '
        "for VOC) the same way, per task, subtype and duration bin; `--json` prints one object per group, "
        "`--blind` scores the blind baselines and `--write-shuffle24` writes the Shuffle24 variant.",
        "",
        *unverified_section(rows),
        "## How it was made",
        "",
        "Crawled 360° videos, reviewed by a person, projected into four perspective views with faces blurred; "
        "objects proposed, detected (YOLO-World), segmented (SAM3), reconciled across clips; camera poses "
        "(Depth-Anything-3); people verified and fixed the metadata; the questions are derived by rules from "
        "it, answer texts and letters balanced over each task. Stage versions of this build:",
        "",
    ]
    versions = (report.get("build") or {}).get("stage_versions", {})
    lines += [
        ", ".join(f"{s} {v}" for s, v in versions.items()) or "(unknown)",
        "",
        "A question keeps its doc id, option order and answer letter from one release to the next while "
        "its content (video, task, subtype, what it asks about, its query times) stays the same.",
        "",
        "## Changelog",
        "",
        log["summary"] + ".",
        "See `CHANGELOG.md`.",
        "",
    ]
    return "\n".join(lines)


def unverified_section(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The card's lines on the answers that rest on reconciliation decisions no person has reviewed
    (``provisional``), per task; none when every answer is verified."""
    per_task: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        per_task[r["task_type"]][1] += 1
        per_task[r["task_type"]][0] += bool(r.get("provisional"))
    n = sum(p for p, _ in per_task.values())
    if n == 0:
        return []
    parts = ", ".join(f"{t} {p} of {total}" for t, (p, total) in sorted(per_task.items()) if p)
    return [
        "## Answers not yet verified",
        "",
        f"{n} of {len(rows)} release questions ({parts}) may have a wrong answer because of decisions no "
        "person has reviewed yet, on which sightings in different clips are one object: a review item bears "
        "on the answer, or the unreviewed decisions make it wrong with a probability at or above the build's "
        "threshold (`qa.provisional_risk`). The `rich` config marks them: `provisional` is true, "
        "`provisional_reason` names the decisions, and for VOC `wrong_answer_bound` is an upper bound on the "
        "probability that the answer is wrong because of unreviewed decisions. Scoring on the rows whose "
        "`provisional` is false leaves them out.",
        "",
    ]


def _slug(version: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in version).strip("_").lower()


def task_name(version: str) -> str:
    return f"vsi_super_wild_{_slug(version)}"


def task_yaml(version: str) -> str:
    """The lmms-eval task of a release (its ``utils.py`` sits beside it)."""
    name = task_name(version)
    return "\n".join(
        [
            f"# lmms-eval task of VSI-Super-Wild {version} (made by `vsi-wild release`)",
            f"task: {name}",
            "dataset_path: json",
            "dataset_kwargs:",
            "  data_files:",
            "    test: vsi_super_wild_qa.jsonl",
            "test_split: test",
            "output_type: generate_until",
            "doc_to_visual: !function utils.doc_to_visual",
            "doc_to_text: !function utils.doc_to_text",
            "doc_to_target: answer",
            "process_results: !function utils.process_results",
            "generation_kwargs:",
            "  max_new_tokens: 16",
            "  temperature: 0.0",
            "  do_sample: false",
            "metric_list:",
            *[
                line
                for m, agg in (
                    ("vmr_accuracy", "mean_score"),
                    ("vpo_accuracy", "mean_score"),
                    ("voo_accuracy", "mean_score"),
                    ("voc_mra", "mean_score"),
                    ("overall", "overall_score"),
                )
                for line in (
                    f"  - metric: {m}",
                    f"    aggregation: !function utils.{agg}",
                    "    higher_is_better: true",
                )
            ],
            "metadata:",
            f"  version: {json.dumps(version)}",
            "",
        ]
    )


# ----------------------------------------------------------------------------- the manifest
def manifest(files: Mapping[str, bytes | str]) -> dict[str, dict[str, Any]]:
    """path -> {sha256, bytes} (``files``: path -> its bytes, or a path on disk to hash)."""
    out = {}
    for rel in sorted(files):
        data = files[rel]
        if isinstance(data, bytes):
            out[rel] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        else:
            h, size = hashlib.sha256(), 0
            with open(data, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
                    size += len(chunk)
            out[rel] = {"sha256": h.hexdigest(), "bytes": size}
    return out


def manifest_difference(a: Mapping[str, Mapping[str, Any]], b: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What differs between two manifests, one line per file."""
    out = [f"only in the existing release: {p}" for p in sorted(a.keys() - b.keys())]
    out += [f"only in the new build: {p}" for p in sorted(b.keys() - a.keys())]
    out += [f"differs: {p}" for p in sorted(a.keys() & b.keys()) if a[p]["sha256"] != b[p]["sha256"]]
    return out
