"""VMR (motion relative to the viewing direction): one question per clip with notable motion.

The metadata stage picks each clip's pivot (a moment of notable, stable motion), measures the
direction of the camera's motion relative to the view's heading (0 = forward, +90 = right) and
applies the human fixes; a clip without meaningful motion is ``none``, one whose checks failed is
``failed``. Here: the angle -> one of 8 sectors of 45° -> the option set of that sector's kind.
A cardinal answer is asked with the cardinal set, a diagonal one with the diagonal set (as the
release does), so the nearest wrong option is always at least 45° from the true direction.
"""

from __future__ import annotations

import math

import pyarrow as pa

from vsi_wild.stages.qa.common import (
    VMR_QUESTION,
    Provenance,
    Question,
    StableRng,
    VideoInfo,
    base_fields,
    finite,
    interval,
)
from vsi_wild.stages.evaluate import ACCURACY
from vsi_wild.stages.qa.difficulty import DIFFICULTY_COLUMNS, since_last_turn, stamp
from vsi_wild.stages.qa.params import QAParams
from vsi_wild.stages.qa.registry import MC, QATask, TaskQuestions, VideoInputs, copied

# Sector k covers [45k - 22.5, 45k + 22.5) degrees, clockwise from forward.
SECTORS = (
    "forward",
    "forward-right",
    "right",
    "backward-right",
    "backward",
    "backward-left",
    "left",
    "forward-left",
)
CARDINAL = ("forward", "backward", "left", "right")
DIAGONAL = ("forward-left", "forward-right", "backward-left", "backward-right")


def sector(angle_deg: float) -> str:
    """The direction label of a motion angle (degrees, 0 = forward, +90 = right)."""
    k = math.floor((float(angle_deg) + 22.5) / 45.0) % 8
    return SECTORS[k]


def option_set(label: str) -> tuple[str, ...]:
    if label in CARDINAL:
        return CARDINAL
    if label in DIAGONAL:
        return DIAGONAL
    raise ValueError(f"not a direction label: {label!r}")


def _pick_rows(motion: pa.Table) -> dict[int, dict]:
    """One row per clip; a human fix wins over an automatic row of the same clip."""
    chosen: dict[int, dict] = {}
    for row in sorted(motion.to_pylist(), key=lambda r: (r["clip_index"], r["origin"] == "fix")):
        chosen[int(row["clip_index"])] = row  # fix rows sort last, so they win
    return chosen


def vmr_questions(motion: pa.Table, video: VideoInfo, params: QAParams, prov: Provenance,
                  poses: pa.Table | None = None) -> tuple[list[Question], list[dict]]:
    """Questions from the video's MOTION rows, and the clips that gave none (with the reason).
    With the video's ``poses``, each records the time since the last turn before its pivot."""
    rows = _pick_rows(motion)
    questions: list[Question] = []
    skipped: list[dict] = []
    eps = 1e-6

    def skip(clip: int, reason: str) -> None:
        skipped.append({"video_id": video.video_id, "task_type": "VMR", "item": f"clip{clip:04d}", "reason": reason})

    for clip in sorted(rows):
        r = rows[clip]
        if r["video_id"] != video.video_id:
            skip(clip, f"motion row of another video ({r['video_id']})")
            continue
        if r["state"] != "ok":
            skip(clip, f"state {r['state']}" + (f": {r['reason']}" if r.get("reason") else ""))
            continue
        t, frame, angle = r["pivot_time"], r["pivot_frame"], r["angle_deg"]
        if not (finite(t) and finite(angle) and frame is not None):
            skip(clip, "ok row without pivot time, frame or angle")
            continue
        if not (r["clip_start"] - eps <= t <= r["clip_end"] + eps):
            skip(clip, f"pivot {t:.3f}s outside its clip [{r['clip_start']:.3f}, {r['clip_end']:.3f}]")
            continue
        if not (0 <= frame < video.n_frames) or not (0 <= t <= video.duration_s + eps):
            skip(clip, f"pivot frame {frame} / time {t:.3f}s outside the video")
            continue
        if not (-180.0 <= angle < 180.0):
            skip(clip, f"angle {angle} outside [-180, 180)")
            continue
        label = sector(angle)
        opts = option_set(label)
        rng = StableRng(params.seed, video.video_id, "VMR", clip)
        distractors = rng.shuffled([o for o in opts if o != label])
        w = params.vmr_evidence_s
        since = since_last_turn(poses, video.video_id, float(t), w, params.vmr_turn_deg)
        questions.append(stamp(
            Question(
                **base_fields(video, prov),
                task_type="VMR",
                subtype="cardinal" if opts == CARDINAL else "diagonal",
                split="release",
                index=clip,
                item=f"clip{clip:04d}",
                question=VMR_QUESTION,
                correct=label,
                distractors=distractors,
                query_times=[min(float(t) + w, video.duration_s)],
                answers=[label],
                evidence=[[interval(max(0.0, t - w), min(video.duration_s, t + w))]],
                frame_indices=[int(frame)],
                frame_times=[float(t)],  # the pivot's sample time (the metadata stage's frame for it)
                angle_deg=float(angle),
            ),
            params.vmr_since_turn_bins_s, params.horizon_edges, since_s=[since] if since is not None else None,
        ))
    return questions, skipped


def _build(inputs: VideoInputs, params: QAParams, prov: Provenance) -> TaskQuestions:
    return TaskQuestions(*vmr_questions(inputs.motion, inputs.video, params, prov, inputs.poses))


TASK = QATask(
    name="VMR", order=0, release_rank=2, kind=MC, metric=ACCURACY, questions=_build,
    subtypes=("cardinal", "diagonal"), export_columns=copied("angle_deg", *DIFFICULTY_COLUMNS),
)
