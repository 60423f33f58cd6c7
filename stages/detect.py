"""Open-vocabulary filtering: detections at 2 FPS, occurrence statistics, the frequency filter.

The paper (A.2.1) runs YOLO-World-v2 on the video at 2 FPS with the candidates as prompts,
computes temporal occurrence statistics per concept and removes concepts of extremely low
frequency (too little evidence) and extremely high frequency (too redundant). Every concept gets
a verdict and its reason, kept or dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from vsi_wild.stages.backends.base import Detections, FrameBatch


class DetectParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str = Field("yolo_world", description="open_vocab_detector backend: yolo_world | groundtruth")
    min_score: float = Field(0.25, ge=0, le=1, description="detections below this score are ignored")
    min_fraction: float = Field(
        0.01, ge=0, le=1, description="drop a concept present in fewer than this fraction of 2 FPS timestamps"
    )
    min_frames: int = Field(3, ge=1, description="... or in fewer than this many timestamps")
    max_fraction: float = Field(
        0.6, ge=0, le=1, description="drop a concept present in more than this fraction (too redundant)"
    )
    gap_s: float = Field(2.0, ge=0, description="absences up to this long do not split an appearance into two")
    batch_frames: int = Field(16, ge=1, description="frames per detector call")

    @model_validator(mode="after")
    def _order(self) -> DetectParams:
        if self.min_fraction > self.max_fraction:
            raise ValueError(f"min_fraction {self.min_fraction} > max_fraction {self.max_fraction}")
        return self


@dataclass
class ConceptStats:
    concept: str
    n_samples: int
    frames_present: int
    fraction: float
    appearances: int
    detections: int
    mean_per_frame: float
    max_score: float | None
    first_time: float | None
    last_time: float | None
    kept: bool
    reason: str


def detection_rows(video_id: str, batch: FrameBatch, dets: Sequence[Detections], backend: str) -> list[dict]:
    """Rows of schema.DETECTIONS for one batch."""
    if len(dets) != len(batch.images):
        raise ValueError(f"detector returned {len(dets)} results for {len(batch.images)} frames")
    rows = []
    for i, d in enumerate(dets):
        h, w = batch.images[i].shape[:2]
        for box, score, label in zip(
            np.asarray(d.boxes, dtype=float).reshape(-1, 4), np.asarray(d.scores, dtype=float), d.labels, strict=True
        ):
            rows.append(
                {
                    "video_id": video_id,
                    "sample_index": int(batch.sample_indices[i]),
                    "time": float(batch.times[i]),
                    "frame": int(batch.frame_indices[i]),
                    "fps": float(batch.fps),
                    "concept": label,
                    "x0": float(box[0]),
                    "y0": float(box[1]),
                    "x1": float(box[2]),
                    "y1": float(box[3]),
                    "score": float(score),
                    "image_width": int(w),
                    "image_height": int(h),
                    "backend": backend,
                }
            )
    return rows


def count_runs(times: Sequence[float], gap_s: float, step_s: float = 0.5) -> int:
    """Separate appearances: runs of presence split by absences longer than ``gap_s``.

    Two presences at t1 < t2 belong to one run when the absence between them, t2 - t1 - step,
    is at most ``gap_s``.
    """
    ts = sorted(set(times))
    if not ts:
        return 0
    runs = 1
    for a, b in zip(ts, ts[1:], strict=False):
        if b - a - step_s > gap_s + 1e-9:
            runs += 1
    return runs


def occurrence_stats(
    concepts: Sequence[str], detections: Iterable[dict], n_samples: int, params: DetectParams
) -> list[ConceptStats]:
    """Statistics and verdict for every concept (also those never detected), in ``concepts`` order.

    ``detections`` are schema.DETECTIONS rows; ``n_samples`` the number of 2 FPS timestamps seen.
    """
    present: dict[str, dict[int, float]] = {c: {} for c in concepts}  # concept -> sample -> time
    count = {c: 0 for c in concepts}
    best: dict[str, float] = {}
    for r in detections:
        c = r["concept"]
        if c not in present or r["score"] < params.min_score:
            continue
        present[c][int(r["sample_index"])] = float(r["time"])
        count[c] += 1
        best[c] = max(best.get(c, 0.0), float(r["score"]))
    out = []
    for c in concepts:
        times = sorted(present[c].values())
        n = len(times)
        frac = n / n_samples if n_samples else 0.0
        if n == 0:
            kept, reason = False, "dropped: never detected"
        elif n < params.min_frames or frac < params.min_fraction:
            kept, reason = (
                False,
                (
                    f"dropped: too rare ({n} timestamps, fraction {frac:.4f}; "
                    f"needs >= {params.min_frames} and >= {params.min_fraction})"
                ),
            )
        elif frac > params.max_fraction:
            kept, reason = False, f"dropped: too frequent (fraction {frac:.4f} > max_fraction {params.max_fraction})"
        else:
            kept, reason = (
                True,
                (f"kept: {n} timestamps, fraction {frac:.4f} in [{params.min_fraction}, {params.max_fraction}]"),
            )
        out.append(
            ConceptStats(
                concept=c,
                n_samples=n_samples,
                frames_present=n,
                fraction=frac,
                appearances=count_runs(times, params.gap_s),
                detections=count[c],
                mean_per_frame=count[c] / n if n else 0.0,
                max_score=best.get(c),
                first_time=times[0] if times else None,
                last_time=times[-1] if times else None,
                kept=kept,
                reason=reason,
            )
        )
    return out


def stats_rows(video_id: str, stats: Sequence[ConceptStats]) -> list[dict]:
    return [{"video_id": video_id, **s.__dict__} for s in stats]
