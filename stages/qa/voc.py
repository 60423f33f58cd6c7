"""VOC (object counting) asked as a stream, as the paper describes it.

Per view video and retained concept: checkpoints every ``checkpoint_s`` seconds and at the end;
the answer at a checkpoint is the number of unique (reconciled) instances of the concept first
seen up to then. Two questions per concept: the stream (all checkpoints) and the final total (the
release's form, a single count for the whole video). At export, VOC-Repeat: each release row
again on its video concatenated with itself k times (the same final count).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from vsi_wild.stages.evaluate import MRA

from vsi_wild.stages.qa.common import (
    VOC_STREAM_QUESTION,
    VOC_TOTAL_QUESTION,
    Provenance,
    Question,
    StableRng,
    VideoInfo,
    base_fields,
    interval,
)
from vsi_wild.stages.qa.difficulty import DIFFICULTY_COLUMNS, since_last, stamp
from vsi_wild.stages.qa.params import QAParams
from vsi_wild.stages.qa.registry import NUMBER, QATask, Split, TaskQuestions, VideoInputs, copied


def checkpoints(duration_s: float, every_s: float) -> list[float]:
    """Multiples of ``every_s`` strictly inside the video, then the end."""
    out: list[float] = []
    k = 1
    while k * every_s < duration_s - 1e-9:
        out.append(k * every_s)
        k += 1
    out.append(float(duration_s))
    return out


def first_seen(instances: pa.Table, video_id: str) -> dict[str, dict[int, float]]:
    """concept -> instance id -> first time seen (an instance listed twice keeps its earliest)."""
    out: dict[str, dict[int, float]] = defaultdict(dict)
    for r in instances.select(["video_id", "concept", "instance_id", "first_time"]).to_pylist():
        if r["video_id"] != video_id:
            continue
        seen = out[r["concept"]]
        iid = int(r["instance_id"])
        seen[iid] = min(seen.get(iid, float("inf")), float(r["first_time"]))
    return dict(out)


def voc_questions(instances: pa.Table, video: VideoInfo, params: QAParams, prov: Provenance) -> tuple[list[Question], list[dict]]:
    seen = first_seen(instances, video.video_id)
    concepts = sorted(c for c, ids in seen.items() if ids)
    skipped: list[dict] = []
    if params.voc_max_per_video is not None and len(concepts) > params.voc_max_per_video:
        keep = set(StableRng(params.seed, video.video_id, "VOC", "concepts").sample(concepts, params.voc_max_per_video))
        skipped += [
            {"video_id": video.video_id, "task_type": "VOC", "item": c, "reason": f"over voc_max_per_video={params.voc_max_per_video}"}
            for c in concepts if c not in keep
        ]
        concepts = [c for c in concepts if c in keep]
    cps = checkpoints(video.duration_s, params.checkpoint_s)
    questions: list[Question] = []
    for i, concept in enumerate(concepts):
        times = sorted(seen[concept].values())
        counts = [sum(1 for t in times if t <= c + 1e-9) for c in cps]
        total = counts[-1]
        if total == 0:
            skipped.append({"video_id": video.video_id, "task_type": "VOC", "item": concept,
                            "reason": "no instance first seen within the video"})
            continue
        if total != len(times):
            skipped.append({"video_id": video.video_id, "task_type": "VOC", "item": concept,
                            "reason": f"{len(times) - total} instance(s) first seen after the video's end: not counted"})
        base = dict(**base_fields(video, prov), task_type="VOC", index=i, item=concept, concepts=[concept])
        edges = (params.voc_since_new_bins_s, params.horizon_edges)
        questions.append(stamp(
            Question(
                **base,
                subtype="total",
                split="release",
                question=VOC_TOTAL_QUESTION.format(concept=concept),
                query_times=[float(video.duration_s)],
                answers=[str(total)],
                evidence=[[interval(0.0, video.duration_s)]],
            ),
            *edges, since_s=[since_last(times, video.duration_s)],
        ))
        questions.append(stamp(
            Question(
                **base,
                subtype="stream",
                split="voc_stream",
                question=VOC_STREAM_QUESTION.format(concept=concept),
                query_times=[float(c) for c in cps],
                answers=[str(n) for n in counts],
                evidence=[[interval(0.0, c)] for c in cps],
            ),
            *edges, since_s=[since_last(times, c) for c in cps],
        ))
    return questions, skipped


def _build(inputs: VideoInputs, params: QAParams, prov: Provenance) -> TaskQuestions:
    return TaskQuestions(*voc_questions(inputs.instances, inputs.video, params, prov))


def repeat_video_name(video_name: str, k: int) -> str:
    stem = video_name[:-4] if video_name.endswith(".mp4") else video_name
    return f"{stem}_repeat{k}.mp4"


def repeat_rows(release: Sequence[dict[str, Any]], params: QAParams) -> tuple[list[dict[str, Any]], list[tuple[str, str, int]]]:
    """VOC-Repeat: each release row on its video played ``k`` times (``params.repeat_times``), and
    the repeated videos to make."""
    rows: list[dict[str, Any]] = []
    repeats: list[tuple[str, str, int]] = []
    for r in release:
        for k in params.repeat_times:
            name = repeat_video_name(r["video_name"], k)
            if (r["video_name"], name, k) not in repeats:
                repeats.append((r["video_name"], name, k))
            d = r["duration_s"]
            rows.append({
                **r,
                "doc_id": f"{name}|{r['doc_id'].split('|', 2)[1]}|VOC|0",
                "video_name": name,
                "split": "voc_repeat",
                "video_path": f"splits/voc_repeat/videos/{name}",
                "query_times": [k * d],
                "evidence": [[{"start": 0.0, "end": d}]],  # the first pass already shows every instance
                "duration_s": k * d,
                "base_doc_id": r["doc_id"],
                "repeat": k,
            })
    return rows, repeats


TASK = QATask(
    name="VOC", order=3, release_rank=0, kind=NUMBER, metric=MRA, questions=_build,
    export_columns=copied("concepts", *DIFFICULTY_COLUMNS),
    splits=(Split("voc_stream", "VOC stream", "rich", variant="stream"), Split("voc_repeat", "VOC-Repeat", "release")),
    derive=repeat_rows,
)
