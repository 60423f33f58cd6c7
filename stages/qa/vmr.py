"""VMR (motion relative to the viewing direction): one question per clip with notable motion.

The metadata stage picks each clip's pivot (a moment of notable, stable motion), measures the
direction of the camera's motion relative to the view's heading (0 = forward, +90 = right) and
applies the human fixes; a clip without meaningful motion is ``none``, one whose checks failed is
``failed``. Here: the angle -> one of 8 sectors of 45° -> the option set of that sector's kind.
A cardinal answer is asked with the cardinal set, a diagonal one with the diagonal set (as the
release does), so the nearest wrong option is always at least 45° from the true direction.

With ``qa.stable_answers`` the direction must keep ``vmr_judgement_deg`` (a viewer's misjudgement)
plus ``vmr_angle_error_deg`` (the metadata's) from its sector's edges, at the pivot and at every
2 FPS moment of the evidence window, the camera moving throughout (``unstable_direction``); else
another candidate moment of the clip becomes the pivot (``repick``) or the clip is not asked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from vsi_wild.stages.evaluate import ACCURACY
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
from vsi_wild.stages.qa.difficulty import DIFFICULTY_COLUMNS, since_last_turn, stamp
from vsi_wild.stages.qa.params import QAParams
from vsi_wild.stages.qa.readings import circular_mean, sector_margin
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


@dataclass(frozen=True)
class Pivot:
    time: float
    frame: int
    angle: float


def _window(samples: Sequence[dict], t: float, w: float) -> list[dict]:
    return [s for s in samples if abs(s["time"] - t) <= w + 1e-9]


def unstable_direction(pivot: Pivot, samples: Sequence[dict] | None, params: QAParams) -> tuple[str, str] | None:
    """Why a pivot's answer is not the same under every reading: (the reading, the label it gives),
    or None. Each direction, the pivot's and that of every 2 FPS moment of the evidence window
    (``samples``: the video's MOTION_SAMPLES rows, None: the pivot's alone), must keep judgement +
    error from its sector's edges, in the pivot's sector, the camera moving throughout."""
    margin = params.vmr_judgement_deg + params.vmr_angle_error_deg
    label = sector(pivot.angle)

    def off(angle: float) -> tuple[str, str] | None:
        if sector(angle) != label:
            return "", sector(angle)
        if sector_margin(angle) < margin:
            # the nearer edge: the side the angle leans to within its sector
            lean = 1.0 if (angle + 22.5) % 45.0 > 22.5 else -1.0
            return f"judged {lean * margin:+g}°", sector(angle + lean * margin)
        return None

    if (why := off(pivot.angle)) is not None:
        return f"the direction {why[0]}", why[1]
    for s in _window(samples or (), pivot.time, params.vmr_evidence_s):
        at = f"the motion at {s['time']:g} s"
        if not s["moving"] or s["angle_deg"] is None:
            return at, "not moving"
        if (why := off(s["angle_deg"])) is not None:
            return f"{at} {why[0]}".rstrip(), why[1]
    return None


def repick(clip: dict, samples: Sequence[dict], params: QAParams, video: VideoInfo) -> Pivot | None:
    """Another pivot of the clip whose answer every reading gives: of the clip's candidate moments
    (moving and steady, as the metadata stage marks them), in the metadata stage's order of
    preference (steadiest, fastest, nearest the clip's middle), the first whose evidence window lies
    in the video and passes ``unstable_direction``; its direction is the mean over that window."""
    centre = (clip["clip_start"] + clip["clip_end"]) / 2.0
    w = params.vmr_evidence_s
    cands = [
        s
        for s in samples
        if s["candidate"]
        and s["clip_index"] == clip["clip_index"]
        and s["angle_deg"] is not None
        and s["time"] - w >= -1e-9
        and s["time"] + w <= video.duration_s + 1e-9
    ]
    cands.sort(key=lambda s: (-(s["stability"] or 0.0), -s["speed"], abs(s["time"] - centre), s["time"]))
    for s in cands:
        win = [x["angle_deg"] for x in _window(samples, s["time"], w) if x["moving"] and x["angle_deg"] is not None]
        p = Pivot(float(s["time"]), int(s["frame"]), circular_mean(win))
        if 0 <= p.frame < video.n_frames and unstable_direction(p, samples, params) is None:
            return p
    return None


def vmr_questions(
    motion: pa.Table,
    video: VideoInfo,
    params: QAParams,
    prov: Provenance,
    poses: pa.Table | None = None,
    motion_samples: pa.Table | None = None,
) -> tuple[list[Question], list[dict]]:
    """Questions from the video's MOTION rows, and the clips that gave none (with the reason).
    With the video's ``poses``, each records the time since the last turn before its pivot. With
    ``qa.stable_answers``, an automatic pivot whose direction a reading changes is replaced by
    another of the clip's (``repick``, from ``motion_samples``), or the clip is not asked; a
    person's pivot (origin fix) stands."""
    rows = _pick_rows(motion)
    samples = None
    if motion_samples is not None:
        samples = sorted(
            (s for s in motion_samples.to_pylist() if s["video_id"] == video.video_id), key=lambda s: s["time"]
        )
    questions: list[Question] = []
    skipped: list[dict] = []
    eps = 1e-6

    def skip(clip: int, reason: str, reading: str | None = None) -> None:
        skipped.append(
            {
                "video_id": video.video_id,
                "task_type": "VMR",
                "item": f"clip{clip:04d}",
                "reason": reason,
                "reading": reading,
            }
        )

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
        pivot = Pivot(float(t), int(frame), float(angle))
        if params.stable_answers and r["origin"] != "fix":
            why = unstable_direction(pivot, samples, params)
            if why is not None:
                other = repick(r, samples, params, video) if samples is not None else None
                if other is None:
                    skip(
                        clip,
                        f"{sector(angle)} at {t:g} s ({angle:.1f}°), {why[1]} under {why[0]}; no other moment "
                        f"of the clip keeps {params.vmr_judgement_deg + params.vmr_angle_error_deg:g}° from "
                        f"its sector's edges over ±{params.vmr_evidence_s:g} s",
                        reading=why[0],
                    )
                    continue
                pivot = other
        t, frame, angle = pivot.time, pivot.frame, pivot.angle
        label = sector(angle)
        opts = option_set(label)
        rng = StableRng(params.seed, video.video_id, "VMR", clip)
        distractors = rng.shuffled([o for o in opts if o != label])
        w = params.vmr_evidence_s
        since = since_last_turn(poses, video.video_id, float(t), w, params.vmr_turn_deg)
        questions.append(
            stamp(
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
                params.vmr_since_turn_bins_s,
                params.horizon_edges,
                since_s=[since] if since is not None else None,
            )
        )
    return questions, skipped


def _build(inputs: VideoInputs, params: QAParams, prov: Provenance) -> TaskQuestions:
    return TaskQuestions(*vmr_questions(inputs.motion, inputs.video, params, prov, inputs.poses, inputs.motion_samples))


TASK = QATask(
    name="VMR",
    order=0,
    release_rank=2,
    kind=MC,
    metric=ACCURACY,
    questions=_build,
    subtypes=("cardinal", "diagonal"),
    export_columns=copied("angle_deg", *DIFFICULTY_COLUMNS),
)
