"""VOC (object counting) asked as a stream, as the paper describes it.

Per view video and retained concept: checkpoints every ``checkpoint_s`` seconds and at the end;
the answer at a checkpoint is the number of unique (reconciled) instances of the concept first
seen up to then. Two questions per concept: the stream (all checkpoints) and the final total (the
release's form, a single count for the whole video). At export, VOC-Repeat: each release row
again on its video concatenated with itself k times (the same final count).

A count is asked only where every reading of "seen" (``qa.voc_readings``: at all, clearly) gives
it (``stages/qa/readings.py``): a concept whose total the readings disagree on is not asked, and a
streaming checkpoint they disagree on moves to the nearest 2 FPS moment they agree on, within
``qa.voc_checkpoint_shift`` of the interval, or is left out. The answers are the first reading's.
"""

from __future__ import annotations

import math
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
from vsi_wild.stages.qa.readings import Disagreement, Seen, by_concept, count_at, count_disagreement, seen_under
from vsi_wild.stages.qa.registry import NUMBER, QATask, Split, TaskQuestions, VideoInputs, copied
from vsi_wild.stages.segment import SAMPLE_STEP


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


def stable_checkpoints(
    cps: list[float], per_reading: list[tuple[str, list[Seen]]], duration_s: float, shift_s: float
) -> tuple[list[float], list[tuple[float, Disagreement]]]:
    """The streaming checkpoints whose count every reading gives: a nominal checkpoint where the
    readings disagree moves to the nearest 2 FPS moment within ``shift_s`` where they agree (after
    the previous checkpoint, before the end), else it is not asked. The end stays the end. Returns
    the checkpoints and the (nominal time, disagreement) of each one not asked."""
    out: list[float] = []
    dropped: list[tuple[float, Disagreement]] = []
    for c in cps:
        d = count_disagreement(per_reading, c)
        if d is None:
            out.append(c)
            continue
        if c >= duration_s - 1e-9:
            dropped.append((c, d))
            continue
        lo = max(c - shift_s, out[-1] if out else 0.0)
        hi = min(c + shift_s, duration_s)
        k_lo, k_hi = math.ceil(lo / SAMPLE_STEP - 1e-9), math.floor(hi / SAMPLE_STEP + 1e-9)
        grid = sorted(
            (k * SAMPLE_STEP for k in range(k_lo, k_hi + 1) if lo + 1e-9 < k * SAMPLE_STEP < hi - 1e-9),
            key=lambda t: (abs(t - c), t),
        )
        t = next((t for t in grid if count_disagreement(per_reading, t) is None), None)
        if t is None:
            dropped.append((c, d))
        else:
            out.append(t)
    return out, dropped


def voc_questions(
    instances: pa.Table,
    video: VideoInfo,
    params: QAParams,
    prov: Provenance,
    visibility: pa.Table | None = None,
    specks: pa.Table | None = None,
) -> tuple[list[Question], list[dict]]:
    """The VOC questions of one video and what it did not ask (QA_SKIPPED rows). With
    ``qa.stable_answers`` a count is asked only where every reading gives it, the specks
    (``schema.SPECKS``) read too; without, the first reading's count of the tracked instances."""
    seen = first_seen(instances, video.video_id)
    concepts = sorted(c for c, ids in seen.items() if ids)
    skipped: list[dict] = []
    if params.voc_max_per_video is not None and len(concepts) > params.voc_max_per_video:
        keep = set(StableRng(params.seed, video.video_id, "VOC", "concepts").sample(concepts, params.voc_max_per_video))
        skipped += [
            {
                "video_id": video.video_id,
                "task_type": "VOC",
                "item": c,
                "reason": f"over voc_max_per_video={params.voc_max_per_video}",
            }
            for c in concepts
            if c not in keep
        ]
        concepts = [c for c in concepts if c in keep]
    readings = params.voc_readings if params.stable_answers else params.voc_readings[:1]
    specks = specks if params.stable_answers else None
    pixels = video.width * video.height
    under = [
        (r.name, by_concept(seen_under(instances, visibility, video.video_id, pixels, r, specks))) for r in readings
    ]
    cps = checkpoints(video.duration_s, params.checkpoint_s)
    questions: list[Question] = []
    for i, concept in enumerate(concepts):
        per_reading = [(name, by.get(concept, [])) for name, by in under]
        times = sorted(s.first for s in per_reading[0][1])
        if not times:
            skipped.append(
                {
                    "video_id": video.video_id,
                    "task_type": "VOC",
                    "item": concept,
                    "reason": f"never seen {per_reading[0][0]}",
                    "reading": per_reading[0][0],
                }
            )
            continue
        total_d = count_disagreement(per_reading, video.duration_s)
        if total_d is not None:
            skipped.append(_unstable(video, concept, "total", video.duration_s, total_d, per_reading))
            continue
        stream, dropped = stable_checkpoints(
            cps, per_reading, video.duration_s, params.voc_checkpoint_shift * params.checkpoint_s
        )
        skipped += [_unstable(video, concept, "stream", c, d, per_reading) for c, d in dropped]
        counts = [count_at(per_reading[0][1], c) for c in stream]
        total = counts[-1]
        if total == 0:
            skipped.append(
                {
                    "video_id": video.video_id,
                    "task_type": "VOC",
                    "item": concept,
                    "reason": "no instance first seen within the video",
                }
            )
            continue
        if total != len(times):
            skipped.append(
                {
                    "video_id": video.video_id,
                    "task_type": "VOC",
                    "item": concept,
                    "reason": f"{len(times) - total} instance(s) first seen after the video's end: not counted",
                }
            )
        base = dict(**base_fields(video, prov), task_type="VOC", index=i, item=concept, concepts=[concept])
        edges = (params.voc_since_new_bins_s, params.horizon_edges)
        questions.append(
            stamp(
                Question(
                    **base,
                    subtype="total",
                    split="release",
                    question=VOC_TOTAL_QUESTION.format(concept=concept),
                    query_times=[float(video.duration_s)],
                    answers=[str(total)],
                    evidence=[[interval(0.0, video.duration_s)]],
                ),
                *edges,
                since_s=[since_last(times, video.duration_s)],
            )
        )
        questions.append(
            stamp(
                Question(
                    **base,
                    subtype="stream",
                    split="voc_stream",
                    question=VOC_STREAM_QUESTION.format(concept=concept),
                    query_times=[float(c) for c in stream],
                    answers=[str(n) for n in counts],
                    evidence=[[interval(0.0, c)] for c in stream],
                ),
                *edges,
                since_s=[since_last(times, c) for c in stream],
            )
        )
    return questions, skipped


def _unstable(
    video: VideoInfo, concept: str, form: str, t: float, d: Disagreement, per_reading: list[tuple[str, list[Seen]]]
) -> dict:
    """The QA_SKIPPED row of a count the readings disagree on: the total (the concept's questions
    are not asked) or a streaming checkpoint with no agreed moment near it. Where the count takes
    in specks no instance is told for (``readings.unattributed_specks``), the reason names them (clip
    and clip-local id, what a ``speck`` fix names) and when each was first seen, for a reviewer to look."""
    what = "total" if form == "total" else f"checkpoint {t:g} s"
    firsts: dict[tuple[int, int], float] = {}
    for _, seen in per_reading:
        for s in seen:
            if s.speck is not None and s.first <= t + 1e-9:
                firsts[s.speck] = min(s.first, firsts.get(s.speck, math.inf))
    at = (
        " (with specks no instance is told for: "
        + ", ".join(
            f"clip {c} speck {lo} first seen at {firsts[c, lo]:g} s"
            for c, lo in sorted(firsts, key=lambda k: (firsts[k], k))
        )
        + ")"
        if firsts
        else ""
    )
    return {
        "video_id": video.video_id,
        "task_type": "VOC",
        "item": concept,
        "reason": f"{what} not asked: {d.answer} seen {d.base}, {d.other} seen {d.reading}{at}",
        "reading": d.reading,
        "specks": [{"clip_index": c, "local_id": lo, "first_time": firsts[c, lo]} for c, lo in sorted(firsts)] or None,
    }


def _build(inputs: VideoInputs, params: QAParams, prov: Provenance) -> TaskQuestions:
    return TaskQuestions(*voc_questions(inputs.instances, inputs.video, params, prov, inputs.visibility, inputs.specks))


def repeat_video_name(video_name: str, k: int) -> str:
    stem = video_name[:-4] if video_name.endswith(".mp4") else video_name
    return f"{stem}_repeat{k}.mp4"


def repeat_rows(
    release: Sequence[dict[str, Any]], params: QAParams
) -> tuple[list[dict[str, Any]], list[tuple[str, str, int]]]:
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
            rows.append(
                {
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
                }
            )
    return rows, repeats


TASK = QATask(
    name="VOC",
    order=3,
    release_rank=0,
    kind=NUMBER,
    metric=MRA,
    questions=_build,
    export_columns=copied("concepts", *DIFFICULTY_COLUMNS),
    splits=(Split("voc_stream", "VOC stream", "rich", variant="stream"), Split("voc_repeat", "VOC-Repeat", "release")),
    derive=repeat_rows,
)
