"""What real models do to reconciliation's inputs, simulated on exact ones: a segmenter error model
and a pose error model, each at a named level (none / moderate / severe).

The embedded sample and the bench run on the ``groundtruth`` segmenter (exact, clip-local tracks)
and on ``twoview`` poses or the truth's. Production runs SAM3 and Depth-Anything-3, whose errors
reach reconciliation as:

- **segmenter** (per clip, on the segmenter's records, ``perturb_segments``): a track that breaks
  in two inside the clip (fragmentation: the rest gets a new id, after a gap of up to
  ``break_gap`` samples); two tracks of one concept in view together that swap ids (an id
  switch); a missed sample (the mask is dropped); a short false track (a box of a concept where
  nothing is, for 1 to ``false_max_samples`` samples); a box that shrinks (a mask missing part of
  the object) and jitters (edges moved by a fraction of the box's size); a track whose concept
  is a neighbour's (the kept concept whose boxes are most alike in aspect).
- **poses** (per view video, on the track reconciliation reads, ``perturb_track``): scale drift
  (the step lengths multiplied by a log-normal random walk), heading drift (the path turned about
  the vertical by a random walk growing with the distance walked, the cameras with it) and jitter
  (noise on each camera's centre and orientation).

Where the levels' numbers come from: SAM3's paper reports video concept segmentation as cgF1 and
pHOTA, and Depth-Anything-3's as pose AUC on short multi-view sets; neither gives a per-track
fragmentation, switch or miss rate, nor drift per metre over a minutes-long walk. The rates below
are therefore guesses, chosen to be plausible for a strong modern tracker on 2 FPS street footage
(moderate) and for a hard clip (severe), and documented as guesses in docs/metadata.md. They are
a bench input: nothing in production reads them (``ModelErrorParams`` defaults to none).

Everything is seeded by (``seed``, video id, clip): the same inputs give the same errors.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from vsi_wild.stages.pose import Track

Level = Literal["none", "moderate", "severe"]
LEVELS: tuple[Level, ...] = ("none", "moderate", "severe")


class ModelErrorParams(BaseModel):
    """Simulated model errors (benchmarks only; production leaves both at none)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    segmenter: Level = Field(
        "none", description="segmenter errors applied to the segmenter's tracks (SEGMENTER_LEVELS)"
    )
    poses: Level = Field("none", description="pose errors applied to the poses reconciliation reads (POSE_LEVELS)")
    seed: int = Field(0, description="seeds the simulated errors (with the video id and clip)")


@dataclass(frozen=True)
class SegmenterErrors:
    break_per_min: float  # fragmentation: breaks per minute of a track
    break_gap: int  # samples dropped at a break, at most (uniform 0..break_gap)
    switch_per_min: float  # id switches per minute that two tracks of one concept are in view together
    miss_rate: float  # fraction of sightings missed
    false_per_min: float  # short false tracks per minute of clip
    false_max_samples: int  # a false track lasts 1..this many samples
    shrink: float  # a box keeps between 1 - shrink and all of its width and height
    jitter: float  # each box edge moves by a normal error of this fraction of the box's size
    confusion: float  # fraction of tracks labelled with the neighbouring concept


@dataclass(frozen=True)
class PoseErrors:
    scale_per_sqrt_min: float  # log-scale random walk: standard deviation after one minute
    heading_deg_per_sqrt_m: float  # heading random walk: standard deviation after one metre walked
    jitter_m: float  # camera centre noise (pose units: metres for metric backends)
    jitter_deg: float  # camera orientation noise (each axis)


SEGMENTER_LEVELS: dict[str, SegmenterErrors] = {
    "none": SegmenterErrors(0.0, 0, 0.0, 0.0, 0.0, 1, 0.0, 0.0, 0.0),
    "moderate": SegmenterErrors(
        break_per_min=1.0,
        break_gap=2,
        switch_per_min=0.5,
        miss_rate=0.05,
        false_per_min=1.0,
        false_max_samples=4,
        shrink=0.15,
        jitter=0.03,
        confusion=0.03,
    ),
    "severe": SegmenterErrors(
        break_per_min=3.0,
        break_gap=4,
        switch_per_min=2.0,
        miss_rate=0.15,
        false_per_min=3.0,
        false_max_samples=6,
        shrink=0.3,
        jitter=0.08,
        confusion=0.1,
    ),
}

POSE_LEVELS: dict[str, PoseErrors] = {
    "none": PoseErrors(0.0, 0.0, 0.0, 0.0),
    "moderate": PoseErrors(scale_per_sqrt_min=0.05, heading_deg_per_sqrt_m=0.3, jitter_m=0.05, jitter_deg=0.2),
    "severe": PoseErrors(scale_per_sqrt_min=0.15, heading_deg_per_sqrt_m=1.0, jitter_m=0.15, jitter_deg=0.5),
}


def rng_for(seed: int, *keys: object) -> np.random.Generator:
    """A generator that depends on ``seed`` and the keys only (strings hashed with CRC-32)."""
    return np.random.default_rng([seed, *(zlib.crc32(str(k).encode()) for k in keys)])


# --------------------------------------------------------------------------------- segmenter
def _moved_mask(
    mask: np.ndarray, box: tuple[float, float, float, float], new: tuple[float, float, float, float]
) -> np.ndarray:
    """The mask's content inside ``box`` resampled into ``new`` (clipped to the image)."""
    h, w = mask.shape
    x0, y0, x1, y1 = (int(round(v)) for v in box)
    nx0, ny0, nx1, ny1 = (int(round(v)) for v in new)
    out = np.zeros_like(mask)
    if x1 <= x0 or y1 <= y0 or nx1 <= nx0 or ny1 <= ny0:
        return out
    crop = mask[max(y0, 0) : min(y1, h), max(x0, 0) : min(x1, w)]
    if crop.size == 0:
        return out
    resized = cv2.resize(crop.astype(np.uint8), (nx1 - nx0, ny1 - ny0), interpolation=cv2.INTER_NEAREST) > 0
    cx0, cy0, cx1, cy1 = max(nx0, 0), max(ny0, 0), min(nx1, w), min(ny1, h)
    if cx1 <= cx0 or cy1 <= cy0:
        return out
    out[cy0:cy1, cx0:cx1] = resized[cy0 - ny0 : cy1 - ny0, cx0 - nx0 : cx1 - nx0]
    return out


def _neighbour_concepts(records: Sequence, concepts: Sequence[str]) -> dict[str, str]:
    """Each concept's neighbour: the other kept concept whose boxes' median aspect (height over
    width) is closest (a concept without boxes in the clip: the next one in name order)."""
    aspect: dict[str, list[float]] = {}
    for r in records:
        x0, y0, x1, y1 = r.box
        aspect.setdefault(r.concept, []).append(math.log(max(y1 - y0, 1.0) / max(x1 - x0, 1.0)))
    names = sorted(set(concepts) | set(aspect))
    med = {c: float(np.median(aspect[c])) for c in aspect}
    out = {}
    for i, c in enumerate(names):
        others = [o for o in names if o != c]
        if not others:
            continue
        if c in med and any(o in med for o in others):
            out[c] = min((o for o in others if o in med), key=lambda o: (abs(med[o] - med[c]), o))
        else:
            out[c] = names[(i + 1) % len(names)]
    return out


def perturb_segments(
    records: Sequence,
    level: str,
    rng: np.random.Generator,
    image_size: tuple[int, int],
    sample_step: float,
    concepts: Sequence[str],
) -> list:
    """A clip's segmenter records (``SegmentRecord``: frame_pos, concept, local_id, box, mask)
    as a segmenter of the given level would have returned them (see the module docstring).
    ``image_size``: (width, height); ``sample_step``: seconds between frame positions; ``concepts``:
    the clip's kept concepts (false tracks and confusions draw from them). Ids are renumbered in
    order of first appearance."""
    e = SEGMENTER_LEVELS[level]
    if level == "none" or not records:
        return list(records)
    w, h = image_size
    per_min = sample_step / 60.0  # minutes per sample step
    tracks: dict[int, list] = {}
    for r in sorted(records, key=lambda r: (r.frame_pos, r.local_id)):
        tracks.setdefault(int(r.local_id), []).append(r)
    ids = sorted(tracks)
    # concept confusion: a whole track under its neighbour's name
    neighbour = _neighbour_concepts(records, concepts)
    concept_of = {i: tracks[i][0].concept for i in ids}
    for i in ids:
        if rng.random() < e.confusion and concept_of[i] in neighbour:
            concept_of[i] = neighbour[concept_of[i]]
    # id switches: two tracks of one concept in view together swap ids from a sample on
    out_id: dict[tuple[int, int], int] = {}  # (local id, frame_pos) -> output id
    current = {i: i for i in ids}
    positions = sorted({r.frame_pos for r in records})
    present = {pos: sorted(i for i in ids if any(r.frame_pos == pos for r in tracks[i])) for pos in positions}
    for pos in positions:
        here = present[pos]
        for a_i in range(len(here)):
            for b_i in range(a_i + 1, len(here)):
                a, b = here[a_i], here[b_i]
                if concept_of[a] == concept_of[b] and rng.random() < e.switch_per_min * per_min:
                    current[a], current[b] = current[b], current[a]
        for i in here:
            out_id[(i, pos)] = current[i]
    # fragmentation: a break gives the rest of the track a new id, after a short gap
    next_id = max(ids) + 1
    fragment: dict[tuple[int, int], int] = {}
    dropped: set[tuple[int, int]] = set()
    by_out: dict[int, list[tuple[int, int]]] = {}
    for (i, pos), o in sorted(out_id.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        by_out.setdefault(o, []).append((i, pos))
    for o in sorted(by_out):
        seq = by_out[o]
        new, skip = o, 0
        for j, key in enumerate(seq):
            if j > 0 and rng.random() < e.break_per_min * per_min * (key[1] - seq[j - 1][1]):
                new, next_id = next_id, next_id + 1
                skip = int(rng.integers(0, e.break_gap + 1))
            if skip > 0:
                dropped.add(key)
                skip -= 1
                continue
            fragment[key] = new
    out = []
    for i in ids:
        for r in tracks[i]:
            key = (i, r.frame_pos)
            if key in dropped or key not in fragment or rng.random() < e.miss_rate:
                continue
            x0, y0, x1, y1 = r.box
            bw, bh = x1 - x0, y1 - y0
            sx, sy = 1.0 - rng.random() * e.shrink, 1.0 - rng.random() * e.shrink
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
            jit = rng.normal(0.0, e.jitter, 4) * np.array([bw, bh, bw, bh])
            moved = (
                cx - sx * bw / 2 + jit[0],
                cy - sy * bh / 2 + jit[1],
                cx + sx * bw / 2 + jit[2],
                cy + sy * bh / 2 + jit[3],
            )
            moved = (max(0.0, moved[0]), max(0.0, moved[1]), min(float(w), moved[2]), min(float(h), moved[3]))
            if moved[2] - moved[0] < 1 or moved[3] - moved[1] < 1:
                continue
            out.append(
                replace(
                    r,
                    concept=concept_of[i],
                    local_id=fragment[key],
                    box=moved,
                    mask=_moved_mask(np.asarray(r.mask, dtype=bool), r.box, moved),
                )
            )
    # short false tracks: a box of a kept concept where nothing is
    n_positions = max(positions) + 1
    template = records[0]
    for _ in range(int(rng.poisson(e.false_per_min * per_min * n_positions))):
        concept = str(rng.choice(sorted(concepts))) if concepts else template.concept
        sizes = [(r.box[2] - r.box[0], r.box[3] - r.box[1]) for r in records if r.concept == concept]
        bw, bh = sizes[int(rng.integers(len(sizes)))] if sizes else (w * 0.05, h * 0.1)
        bw, bh = min(bw, w - 2.0), min(bh, h - 2.0)
        x0, y0 = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
        start = int(rng.integers(0, n_positions))
        for pos in range(start, min(n_positions, start + int(rng.integers(1, e.false_max_samples + 1)))):
            box = (x0, y0, x0 + bw, y0 + bh)
            mask = np.zeros((h, w), dtype=np.uint8)
            cv2.ellipse(
                mask,
                (int(x0 + bw / 2), int(y0 + bh / 2)),
                (max(int(bw / 2), 1), max(int(bh / 2), 1)),
                0,
                0,
                360,
                (1,),
                -1,
            )
            out.append(
                replace(template, frame_pos=pos, concept=concept, local_id=next_id, box=box, score=1.0, mask=mask > 0)
            )
        next_id += 1
    # ids in order of first appearance, as a segmenter numbers them
    first: dict[int, tuple] = {}
    for r in out:
        first[r.local_id] = min(first.get(r.local_id, (math.inf,)), (r.frame_pos, r.box[0], r.box[1]))
    renumber = {old: new for new, old in enumerate(sorted(first, key=lambda i: (first[i], i)))}
    return sorted((replace(r, local_id=renumber[r.local_id]) for r in out), key=lambda r: (r.frame_pos, r.local_id))


# --------------------------------------------------------------------------------- poses
def _rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    """Rotation matrix about a unit axis (Rodrigues)."""
    K = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    return np.eye(3) + math.sin(angle) * K + (1.0 - math.cos(angle)) * K @ K


def perturb_track(track: Track, level: str, rng: np.random.Generator) -> Track:
    """The track (``stages.pose.Track``) as a pose estimator of the given level would have given it:
    its steps scaled by a drifting scale and turned about the world's vertical by a drifting
    heading (the cameras turned with them), then each camera jittered. Invalid rows stay as they
    are. Returns a new track."""
    e = POSE_LEVELS[level]
    if level == "none" or len(track.sample_indices) == 0 or not track.valid.any():
        return track
    down = track.down()
    R, C = track.R.copy(), track.C.copy()
    rows = [i for i in range(len(C)) if track.valid[i]]
    log_scale, heading = 0.0, 0.0
    newC = {rows[0]: C[rows[0]].copy()}
    turn = {rows[0]: np.eye(3)}
    for prev, i in zip(rows, rows[1:], strict=False):
        step = track.C[i] - track.C[prev]
        dt = max(float(track.times[i] - track.times[prev]), 0.0)
        log_scale += rng.normal(0.0, e.scale_per_sqrt_min * math.sqrt(dt / 60.0))
        heading += rng.normal(0.0, math.radians(e.heading_deg_per_sqrt_m) * math.sqrt(float(np.linalg.norm(step))))
        turn[i] = _rotation(down, heading)
        newC[i] = newC[prev] + math.exp(log_scale) * (turn[i] @ step)
    for i in rows:
        v = rng.normal(0.0, math.radians(e.jitter_deg), 3)  # rotation vector
        angle = float(np.linalg.norm(v))
        wobble = _rotation(v / angle, angle) if angle > 0 else np.eye(3)
        R[i] = wobble @ track.R[i] @ turn[i].T
        C[i] = newC[i] + rng.normal(0.0, e.jitter_m, 3)
    return replace(track, R=R, C=C)
