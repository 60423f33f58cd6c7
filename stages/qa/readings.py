"""Readings of a question: the ways a careful viewer may reasonably take it, from the metadata alone.

A question is fair only when the answer we grade as right is the one a viewer gives whichever
reasonable reading of it they hold, so a task asks a question only when its answer is the same under
each (``QAParams.stable_answers``). Everything here reads the pipeline's own metadata (the visibility
track's masks and times, the instances, the motion samples), never a truth table, so the check
holds on real footage as on the sample. The readings:

- **sightings** (VOC, VOO; ``Sighting``): when a viewer counts an object as seen. VOC counts an
  instance seen *at all* or *clearly*; VOO dates an appearance by a *sustained* sighting or a clear
  *glimpse*. An instance is seen under a reading at the 2 FPS timestamps of its runs of masks at
  least ``min_area_frac`` of the view, each run at least ``min_visible_s`` long. Its masks include
  the segmenter's specks (``schema.SPECKS``: under ``segment.min_area``, not tracked) that the
  metadata stage tells it by; a speck that tells no instance is an object of its own, which the
  metadata may not count.
- **direction** (VMR): a viewer may judge the direction of motion ``vmr_judgement_deg`` off, at any
  moment of the evidence window; the metadata's direction itself may be ``vmr_angle_error_deg`` off.

What a person fixed stands as they set it: an instance whose first or last time or spans a person
gave (``times_given``) is seen at its first and its last time under every reading, and a box a
person added or drew (no mask area) is seen under every reading. An instance a person merged, split
or renamed, or told a speck of (a ``speck`` fix), is read like any other: they decided which object
its masks show, not when it is seen clearly. Without a visibility track (a caller that has none)
every instance is seen from its first to its last time under every reading: the readings cannot be
told apart, and nothing is dropped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from vsi_wild.stages.qa.params import Sighting
from vsi_wild.stages.segment import SAMPLE_STEP
from vsi_wild.stages.visibility import VISIBLE

_EPS = 1e-9


# ----------------------------------------------------------------------------- sightings
@dataclass(frozen=True)
class Seen:
    """One instance's sightings under one reading: the 2 FPS times it counts as seen, in order.
    ``speck``: the (clip, local id) of the speck track it is, for one no instance is told for."""

    instance_id: int
    concept: str
    times: tuple[float, ...]
    speck: tuple[int, int] | None = None

    @property
    def first(self) -> float:
        return self.times[0]

    @property
    def last(self) -> float:
        return self.times[-1]


def _runs(times: Sequence[float]) -> list[list[float]]:
    """Consecutive 2 FPS timestamps (a gap of more than one step ends a run)."""
    runs: list[list[float]] = []
    for t in times:
        if runs and t - runs[-1][-1] <= SAMPLE_STEP * 1.5:
            runs[-1].append(t)
        else:
            runs.append([t])
    return runs


Sample = tuple[float, int | None]  # a visible 2 FPS timestamp: its time and mask area (None: a person's box)


def visible_samples(
    visibility: pa.Table, video_id: str, specks: pa.Table | None = None
) -> dict[int, dict[int, Sample]]:
    """instance id -> sample index -> its visible timestamp, from ``schema.VISIBILITY`` rows, and
    from the ``schema.SPECKS`` rows that show an instance at a timestamp its track has no mask at
    (a speck of two merged clip tracks beside a larger mask of the other: the larger stands)."""
    out: dict[int, dict[int, Sample]] = {}
    v = visibility.filter(pc.and_(pc.equal(visibility["video_id"], video_id), pc.equal(visibility["state"], VISIBLE)))
    for r in v.select(["instance_id", "sample_index", "time", "area"]).to_pylist():
        out.setdefault(int(r["instance_id"]), {})[int(r["sample_index"])] = (float(r["time"]), r["area"])
    for r in _specks_of(specks, video_id):
        if r["instance_id"] is not None:
            samples = out.setdefault(int(r["instance_id"]), {})
            k = int(r["sample_index"])
            if k not in samples or _area(samples[k]) < r["area"]:
                samples[k] = (float(r["time"]), int(r["area"]))
    return out


def _area(sample: Sample) -> float:
    return math.inf if sample[1] is None else sample[1]


def _specks_of(specks: pa.Table | None, video_id: str) -> list[dict]:
    if specks is None or not specks.num_rows:
        return []
    mine = specks.filter(pc.equal(specks["video_id"], video_id))
    return mine.select(["instance_id", "concept", "clip_index", "local_id", "sample_index", "time", "area"]).to_pylist()


def unattributed_specks(
    specks: pa.Table | None, video_id: str
) -> dict[int, tuple[str, dict[int, Sample], tuple[int, int]]]:
    """The ``schema.SPECKS`` rows no instance is told for, as objects the metadata may not count:
    one per clip track (a negative id, in the tracks' order) -> its concept, its timestamps and
    its (clip, local id)."""
    tracks: dict[tuple[int, int], tuple[str, dict[int, Sample]]] = {}
    for r in _specks_of(specks, video_id):
        if r["instance_id"] is None:
            _, samples = tracks.setdefault((int(r["clip_index"]), int(r["local_id"])), (r["concept"], {}))
            samples[int(r["sample_index"])] = (float(r["time"]), int(r["area"]))
    return {-(n + 1): (*tracks[key], key) for n, key in enumerate(sorted(tracks))}


def sighting_times(samples: Iterable[Sample], reading: Sighting, view_pixels: int) -> list[float]:
    """The times an instance visible at ``samples`` counts as seen under ``reading``, in order: a
    box without a mask area (a person added or drew it) counts under every reading."""
    min_area = reading.min_area_frac * view_pixels
    ok = sorted(t for t, area in samples if area is None or area >= min_area - _EPS)
    return [t for run in _runs(ok) if len(run) * SAMPLE_STEP >= reading.min_visible_s - _EPS for t in run]


def seen_under(
    instances: pa.Table,
    visibility: pa.Table | None,
    video_id: str,
    view_pixels: int,
    reading: Sighting,
    specks: pa.Table | None = None,
) -> dict[int, Seen]:
    """instance id -> its sightings under ``reading``; instances never seen under it are left out.

    ``instances``: schema.INSTANCES rows; ``visibility``: schema.VISIBILITY rows (None: unknown);
    ``view_pixels``: the view's width x height (the masks' areas are in its pixels); ``specks``:
    schema.SPECKS rows (None: none read), the segmenter's masks too small to track: a speck adds
    its timestamp to the instance it shows, and the specks no instance is told for are objects of
    their own (negative ids, ``unattributed_specks``), seen under a reading their areas meet."""
    rows = [
        r
        for r in instances.select(
            ["video_id", "concept", "instance_id", "first_time", "last_time", "times_given"]
        ).to_pylist()
        if r["video_id"] == video_id
    ]
    out: dict[int, Seen] = {}
    visible = visible_samples(visibility, video_id, specks) if visibility is not None else {}
    for r in rows:
        iid = int(r["instance_id"])
        if visibility is None or r["times_given"]:  # as given: unknown sizes, or a person's times
            times: list[float] = sorted({float(r["first_time"]), float(r["last_time"])})
        else:
            times = sighting_times(visible.get(iid, {}).values(), reading, view_pixels)
        if times:
            out[iid] = Seen(iid, r["concept"], tuple(times))
    for iid, (concept, samples, key) in unattributed_specks(specks, video_id).items():
        times = sighting_times(samples.values(), reading, view_pixels)
        if times:
            out[iid] = Seen(iid, concept, tuple(times), key)
    return out


def by_concept(seen: dict[int, Seen]) -> dict[str, list[Seen]]:
    out: dict[str, list[Seen]] = {}
    for s in seen.values():
        out.setdefault(s.concept, []).append(s)
    return out


# ----------------------------------------------------------------------------- VOC
def count_at(seen: Sequence[Seen], t: float) -> int:
    """Instances first seen by time ``t`` (frames at t included)."""
    return sum(1 for s in seen if s.first <= t + _EPS)


@dataclass(frozen=True)
class Disagreement:
    """Where a question's answer differs between readings: ``answer`` under the first reading
    (``base``) and ``other`` under ``reading``, the first reading that differs."""

    base: str
    answer: str
    reading: str
    other: str


def count_disagreement(per_reading: Sequence[tuple[str, Sequence[Seen]]], t: float) -> Disagreement | None:
    """None when every reading gives the same count at ``t``."""
    (base_name, base), *rest = per_reading
    n = count_at(base, t)
    for name, seen in rest:
        m = count_at(seen, t)
        if m != n:
            return Disagreement(base_name, str(n), name, str(m))
    return None


# ----------------------------------------------------------------------------- VMR
def sector_margin(angle_deg: float) -> float:
    """Degrees from ``angle_deg`` to the nearer edge of its 45° sector (0 on an edge, 22.5 at the centre)."""
    off = (float(angle_deg) + 22.5) % 45.0
    return min(off, 45.0 - off)


def circular_mean(angles: Sequence[float]) -> float:
    """Mean direction (degrees, [-180, 180)) of unit vectors."""
    x = sum(math.sin(math.radians(a)) for a in angles)
    y = sum(math.cos(math.radians(a)) for a in angles)
    return (math.degrees(math.atan2(x, y)) + 180.0) % 360.0 - 180.0
