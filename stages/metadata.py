"""Derived metadata of one video: instances (VOO, VOC) and motion (VMR), with human fixes applied.

Instances come from the reconciled observations (``stages.reconcile``): concept, global
id, first and last time, visible spans (runs of 2 FPS observations; gaps up to ``span_gap_s``
do not split a span), world position where poses allow.

Motion comes from the view's poses (``stages.pose``): per 2 FPS timestamp the direction of
travel relative to the view's heading, the speed and the stability (mean resultant length of the
unit directions within ``stability_window_s``); per motion clip (``motion_clip_seconds``) the
pivot = the candidate timestamp (moving, stability >= ``min_stability``) with the steadiest
direction, or state "none" when the clip has no steady motion, or "failed" when the views'
independent estimates disagree in that clip (see ``view_agreement``).

Fixes (``stages.fixes``) are applied last, in file order, each op by its handler (``FIX_HANDLERS``);
see docs/fixes.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from vsi_wild.stages import fixes as fx
from vsi_wild.stages.pose import Track, derive_view, motion_vectors, wrap
from vsi_wild.stages.reconcile import Obs, mark_occluded_bottoms
from vsi_wild.stages.reconcile.locate import locate
from vsi_wild.stages.segment import SAMPLE_STEP, clip_of_sample


class MetadataParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    fixes_dir: str = Field("fixes", description="folder of <video_id>.yaml fix files (relative: under the data root)")
    span_gap_s: float = Field(1.0, ge=0, description="observations at most this far apart join one visible span")
    motion_clip_seconds: float = Field(300.0, gt=0, description="VMR asks one question per clip of this length")
    moving_rel_speed: float = Field(
        0.3, ge=0, description="a timestamp is moving when its speed >= this x the video's median moving speed"
    )
    min_speed: float = Field(0.0, ge=0, description="... and >= this absolute speed (pose backend units / s)")
    stability_window_s: float = Field(2.0, ge=0, description="half-width of the window stability is measured on")
    min_stability: float = Field(0.9, ge=0, le=1, description="a pivot's directions must be at least this steady")
    angle_window_s: float = Field(0.5, ge=0, description="the pivot's angle is the mean direction over +- this")
    view_agreement_deg: float = Field(
        30.0, gt=0, description="a view whose independent motion is off by more (median over a clip) disagrees"
    )
    fail_on_disagreement: bool = Field(True, description="clips where the views disagree get state 'failed'")
    min_ray_spread_deg: float = Field(3.0, ge=0, description="instance positions need rays spanning this angle")
    visibility_min_consistency: float = Field(
        0.8,
        ge=0,
        le=1,
        description="visibility tracks: an instance's position decides out_of_view / occluded "
        "only when it puts the instance in the frustum at least at this fraction of its sightings",
    )


# ------------------------------------------------------------------------------ instances
@dataclass
class Inst:
    id: int
    concept: str
    obs: dict[int, dict] = field(default_factory=dict)  # sample index -> OBSERVATIONS row
    origin: str = "auto"
    first_override: float | None = None
    last_override: float | None = None
    spans_override: list[tuple[float, float]] | None = None  # as a person gave them (add_instance)

    @property
    def times_given(self) -> bool:
        """A person gave its first or last time, or its spans (``schema.INSTANCES`` times_given)."""
        return not (self.first_override is None and self.last_override is None and self.spans_override is None)


def spans_of(times: Sequence[float], gap_s: float) -> list[tuple[float, float]]:
    ts = sorted(set(times))
    if not ts:
        return []
    out = [[ts[0], ts[0]]]
    for t in ts[1:]:
        if t - out[-1][1] - SAMPLE_STEP <= gap_s + 1e-9:
            out[-1][1] = t
        else:
            out.append([t, t])
    return [(a, b) for a, b in out]


def instance_rows(
    video_id: str,
    insts: Iterable[Inst],
    fps: float,
    params: MetadataParams,
    poses: Track | None = None,
    camera_height: float | None = None,
    image_size: tuple[int, int] | None = None,
    level: bool = True,
) -> list[dict]:
    """schema.INSTANCES rows, ordered by first appearance. Positions (when ``poses`` are given)
    as in reconciliation (``stages.reconcile.locate``); ``image_size`` is the view's (w, h), the
    pixels of the observation boxes."""
    insts = list(insts)
    located = poses is not None and poses.valid.any()
    sightings_of: dict[int, dict[int, Obs]] = {}
    if located:
        for ins in insts:
            sightings_of[ins.id] = {
                k: Obs(
                    o["time"],
                    (o["x0"], o["y0"], o["x1"], o["y1"]),
                    o["area"] or 0,
                    o["frame"],
                    o["fps"],
                    image_size or (0, 0),
                )
                for k, o in ins.obs.items()
                if o["x0"] is not None
            }
        mark_occluded_bottoms(sightings_of.values())  # as reconciliation does: feet hidden by nearer objects
    rows = []
    for ins in insts:
        if not ins.obs and ins.first_override is None:
            continue
        times = [o["time"] for o in ins.obs.values()]
        spans = list(ins.spans_override) if ins.spans_override is not None else spans_of(times, params.span_gap_s)
        first = ins.first_override if ins.first_override is not None else min(times)
        last = ins.last_override if ins.last_override is not None else max(times)
        # A recalibrated first (last) appearance trims the spans, or stretches the first (last) one.
        spans = [(max(a, first), min(b, last)) for a, b in spans if b >= first and a <= last]
        if not spans:
            spans = [(first, last)]
        else:
            if spans[0][0] > first:
                spans[0] = (first, spans[0][1])
            if spans[-1][1] < last:
                spans[-1] = (spans[-1][0], last)
        by_time = {o["time"]: o for o in ins.obs.values()}
        pos = None
        if located:
            assert poses is not None  # located
            sightings = sightings_of[ins.id]
            loc = locate(sightings, poses, camera_height, params.min_ray_spread_deg, level) if sightings else None
            pos = loc[0] if loc is not None else None
        rows.append(
            {
                "video_id": video_id,
                "concept": ins.concept,
                "instance_id": ins.id,
                "first_time": float(first),
                "last_time": float(last),
                "first_frame": int(by_time[first]["frame"]) if first in by_time else int(round(first * fps)),
                "last_frame": int(by_time[last]["frame"]) if last in by_time else int(round(last * fps)),
                "fps": float(fps),
                "n_observations": len(ins.obs),
                "spans": [{"start": float(a), "end": float(b)} for a, b in spans],
                "x": None if pos is None else float(pos[0]),
                "y": None if pos is None else float(pos[1]),
                "z": None if pos is None else float(pos[2]),
                "origin": ins.origin,
                "times_given": ins.times_given,
            }
        )
    rows.sort(key=lambda r: (r["first_time"], r["concept"], r["instance_id"]))
    return rows


def instances_from_observations(rows: Iterable[dict]) -> dict[int, Inst]:
    out: dict[int, Inst] = {}
    for r in rows:
        i = out.setdefault(int(r["instance_id"]), Inst(int(r["instance_id"]), r["concept"]))
        i.obs[int(r["sample_index"])] = dict(r)
        if r["origin"] == "fix":
            i.origin = "fix"
    return out


# ------------------------------------------------------------------------------ motion
@dataclass
class MotionClip:
    index: int
    start: float
    end: float


def motion_clips(duration_s: float, clip_seconds: float) -> list[MotionClip]:
    n = max(1, math.ceil(duration_s / clip_seconds - 1e-9))
    return [MotionClip(i, i * clip_seconds, min((i + 1) * clip_seconds, duration_s)) for i in range(n)]


def _resultant(angles: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """Mean resultant length (sum of unit vectors / number of entries) and mean angle."""
    if len(angles) == 0:
        return 0.0, float("nan")
    a = np.radians(np.nan_to_num(angles))
    x = (np.sin(a) * weights).sum()
    y = (np.cos(a) * weights).sum()
    return float(math.hypot(x, y) / len(angles)), float(math.degrees(math.atan2(x, y)))


def motion_samples(video_id: str, track: Track, params: MetadataParams) -> list[dict]:
    """schema.MOTION_SAMPLES rows of one view's track."""
    angle, speed, ok = motion_vectors(track)
    positive = speed[ok & (speed > 0)]
    typical = float(np.median(positive)) if len(positive) else 0.0
    moving = (
        ok & (speed > 0) & (speed >= params.moving_rel_speed * typical) & (speed >= params.min_speed) & ~np.isnan(angle)
    )
    w = int(round(params.stability_window_s / SAMPLE_STEP))
    n = len(angle)
    rows = []
    for i in range(n):
        lo, hi = max(0, i - w), min(n, i + w + 1)
        stab, _ = _resultant(angle[lo:hi], moving[lo:hi].astype(float)) if moving[i] else (0.0, 0.0)
        rows.append(
            {
                "video_id": video_id,
                "sample_index": int(track.sample_indices[i]),
                "time": float(track.times[i]),
                "frame": int(track.frames[i]),
                "fps": float(track.fps),
                "clip_index": clip_of_sample(int(track.sample_indices[i]), params.motion_clip_seconds),
                "angle_deg": None if np.isnan(angle[i]) else float(wrap(angle[i])),
                "speed": float(speed[i]),
                "stability": float(stab) if moving[i] else None,
                "moving": bool(moving[i]),
                "candidate": bool(moving[i] and stab >= params.min_stability),
            }
        )
    return rows


def _window_angle(samples: list[dict], i: int, half: int) -> float:
    lo, hi = max(0, i - half), min(len(samples), i + half + 1)
    win = [s for s in samples[lo:hi] if s["moving"] and s["angle_deg"] is not None]
    _, mean = _resultant(np.array([s["angle_deg"] for s in win]), np.ones(len(win)))
    return float(wrap(mean))


def motion_rows(
    video_id: str,
    samples: list[dict],
    clips: Sequence[MotionClip],
    params: MetadataParams,
    agreement: dict[int, tuple[bool | None, str]] | None = None,
) -> list[dict]:
    """schema.MOTION rows: one per motion clip."""
    fps = samples[0]["fps"] if samples else 0.0
    half = int(round(params.angle_window_s / SAMPLE_STEP))
    by_clip: dict[int, list[int]] = {}
    for i, s in enumerate(samples):
        by_clip.setdefault(s["clip_index"], []).append(i)
    rows = []
    for c in clips:
        idx = by_clip.get(c.index, [])
        cands = [i for i in idx if samples[i]["candidate"]]
        consistent, detail = (agreement or {}).get(c.index, (None, ""))
        row = {
            "video_id": video_id,
            "clip_index": c.index,
            "clip_start": c.start,
            "clip_end": c.end,
            "state": "none",
            "pivot_time": None,
            "pivot_frame": None,
            "fps": float(fps),
            "angle_deg": None,
            "speed": None,
            "stability": None,
            "views_consistent": consistent,
            "reason": None,
            "origin": "auto",
        }
        if not cands:
            best = max((samples[i]["stability"] or 0.0 for i in idx), default=0.0)
            moving = sum(samples[i]["moving"] for i in idx)
            row["reason"] = (
                f"no steady motion: {moving} of {len(idx)} timestamps moving, best stability "
                f"{best:.2f} < {params.min_stability}"
            )
        else:
            centre = (c.start + c.end) / 2.0
            i = min(
                cands,
                key=lambda j: (
                    -samples[j]["stability"],
                    -samples[j]["speed"],
                    abs(samples[j]["time"] - centre),
                    samples[j]["time"],
                ),
            )
            s = samples[i]
            row.update(
                state="ok",
                pivot_time=s["time"],
                pivot_frame=s["frame"],
                angle_deg=_window_angle(samples, i, half),
                speed=s["speed"],
                stability=s["stability"],
                reason=f"steadiest of {len(cands)} candidate timestamps",
            )
            if consistent is False and params.fail_on_disagreement:
                row["state"] = "failed"
                row["reason"] = f"views disagree: {detail}"
        rows.append(row)
    return rows


def view_agreement(
    source_id: str,
    fused: Track,
    independent: dict[str, Track],
    yaws: dict[str, float],
    clips: Sequence[MotionClip],
    params: MetadataParams,
) -> tuple[list[dict], dict[int, tuple[bool | None, str]]]:
    """schema.VIEW_AGREEMENT rows and, per clip, (consistent, detail).

    Each view's independently estimated direction, turned into the source's axes by its yaw, is
    compared with the fused direction at the timestamps where the fused track moves."""
    fa, fs, fok = motion_vectors(fused)
    positive = fs[fok & (fs > 0)]
    typical = float(np.median(positive)) if len(positive) else 0.0
    moving = fok & (fs > 0) & (fs >= params.moving_rel_speed * typical) & ~np.isnan(fa)
    clip_idx = np.array([clip_of_sample(int(k), params.motion_clip_seconds) for k in fused.sample_indices])
    rows = []
    verdict: dict[int, tuple[bool | None, str]] = {}
    for c in clips:
        in_clip = clip_idx == c.index
        offs = []
        for v in sorted(independent):
            tr = independent[v]
            if not np.array_equal(tr.sample_indices, fused.sample_indices):
                raise ValueError(f"view {v}: independent poses do not cover the fused samples")
            va, _, vok = motion_vectors(tr)
            sel = in_clip & moving & vok & ~np.isnan(va)
            err = np.abs(wrap(va[sel] + yaws[v] - fa[sel]))
            med = float(np.median(err)) if len(err) else None
            ok = None if med is None or len(err) < 3 else med <= params.view_agreement_deg
            rows.append(
                {
                    "source_id": source_id,
                    "clip_index": c.index,
                    "clip_start": c.start,
                    "clip_end": c.end,
                    "view": v,
                    "moving_samples": int(sel.sum()),
                    "median_error_deg": med,
                    "consistent": ok,
                }
            )
            if ok is not None:
                offs.append((v, med, ok))
        if len(independent) < 2 or len(offs) < 2:
            verdict[c.index] = (None, "fewer than two views with motion to compare")
        else:
            bad = [f"{v} off by {m:.0f}°" for v, m, ok in offs if not ok]
            verdict[c.index] = (not bad, ", ".join(bad) if bad else "all views agree")
    return rows, verdict


def source_track_from_view(track: Track, yaw_deg: float) -> Track:
    """The source camera's track from one of its derived views (inverse of ``derive_view``)."""
    return derive_view(track, -yaw_deg)


# ------------------------------------------------------------------------------ fixes
@dataclass
class Derived:
    instances: list[dict]
    observations: list[dict]
    motion: list[dict]
    applied: list[dict]
    reviews: list[dict] = field(default_factory=list)  # schema.QUESTION_REVIEWS rows (review_question)
    # each clip-local member's instance after the fixes and its concept (None: removed): which review
    # items the fixes resolved, and what the verification app shows review pairs and mask labels with
    # (not written by the stage)
    members: list[dict] = field(default_factory=list)
    # the specks a person told (``speck``): (clip, local id) -> the instance it shows after the
    # fixes, None where it shows no object or its instance was removed (``visibility.speck_rows``)
    specks_told: dict[tuple[int, int], int | None] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class FixInputs:
    """One video's automatic metadata, which ``apply_fixes`` corrects, and what locating its
    instances needs (as in ``instance_rows``)."""

    video_id: str
    observations: Sequence[dict]  # schema.OBSERVATIONS rows of the reconcile stage
    members: Sequence[dict]  # schema.INSTANCE_MEMBERS rows
    motion: Sequence[dict]  # schema.MOTION rows
    motion_samples: Sequence[dict]  # schema.MOTION_SAMPLES rows
    duration_s: float
    fps: float
    params: MetadataParams
    poses: Track | None = None
    clip_seconds: float | None = None  # the segmentation clip length: split finds a member's observations by it
    camera_height: float | None = None
    image_size: tuple[int, int] | None = None  # the view's (w, h), the pixels of the observation boxes
    level: bool = True
    specks: Sequence[dict] | None = None  # schema.CLIP_SPECKS rows of the video's clips (None: not read, not checked)


class _Fixing:
    """One video's metadata while its fixes are applied in file order (the handlers' shared state)."""

    def __init__(self, fixset: fx.FixSet, inputs: FixInputs):
        self.inputs = inputs
        self.file = fixset.file or f"<fixes of {inputs.video_id}>"
        self.insts = instances_from_observations(inputs.observations)
        self.next_id = max(self.insts, default=0) + 1
        self.alias: dict[int, int] = {}  # merged id -> the id it was merged into
        self.removed: dict[int, int] = {}  # id -> line of its removal
        self.member_of = {(int(m["clip_index"]), int(m["local_id"])): int(m["instance_id"]) for m in inputs.members}
        self.motion_by_clip = {int(r["clip_index"]): dict(r) for r in inputs.motion}
        self.samples_by_time = {round(float(s["time"]), 6): s for s in inputs.motion_samples}
        self.reviews: dict[str, dict] = {}  # question id -> its review row
        self.reviewed_by: dict[str, str | None] = {}  # question id -> who gave the verdict that counts
        self.member_now = dict(self.member_of)  # (clip, local) -> the instance its observations are in
        self.speck_tracks = (
            None if inputs.specks is None else {(int(s["clip_index"]), int(s["local_id"])) for s in inputs.specks}
        )
        self.specks_told: dict[tuple[int, int], int | None] = {}  # (clip, local) -> instance (None: no object)

    def member_instance(self, key: tuple[int, int]) -> int | None:
        """The instance a clip-local member is part of now (after merges and splits); None if removed."""
        return self.current(self.member_now[key])

    def current(self, i: int) -> int | None:
        """The instance ``i`` is now (following merges); None if it was removed."""
        seen = set()
        while i in self.alias and i not in seen:
            seen.add(i)
            i = self.alias[i]
        return i if i in self.insts else None

    def error(self, f: fx.Fix, field_name: str, message: str, line: int | None = None) -> fx.FixError:
        """The error of fix ``f`` at ``field_name`` (at that field's line unless ``line`` is given)."""
        return fx.FixError(self.file, f.line_of(field_name) if line is None else line, field_name, message)

    def resolve(self, i: int, f: fx.Fix, name: str) -> int:
        """The current id of instance ``i`` (following merges); an error if it was removed or never was."""
        seen = set()
        while i in self.alias and i not in seen:
            seen.add(i)
            i = self.alias[i]
        if i in self.removed:
            raise self.error(f, name, f"instance {i} was removed by the fix at line {self.removed[i]}")
        if i not in self.insts:
            known = sorted(self.insts)
            raise self.error(
                f,
                name,
                f"no instance {i} in {self.inputs.video_id} (ids: {known[:12]}{' ...' if len(known) > 12 else ''})",
            )
        return i

    def new_instance(self, concept: str) -> Inst:
        """An instance with the next free id (not yet among ``insts``)."""
        new = Inst(self.next_id, concept, origin="fix")
        self.next_id += 1
        return new


def _rename_concept(st: _Fixing, f: fx.Fix) -> str:
    op, insts = f.op, st.insts
    targets = (
        [st.resolve(i, f, "instances") for i in op.instances]
        if op.instances is not None
        else [i for i, ins in insts.items() if ins.concept == op.from_]
    )
    if not targets:
        raise st.error(f, "from", f"no instance has concept {op.from_!r}")
    for i in targets:
        if insts[i].concept != op.from_:
            raise st.error(f, "instances", f"instance {i} is a {insts[i].concept!r}, not a {op.from_!r}")
        insts[i].concept = op.to
        insts[i].origin = "fix"
        for o in insts[i].obs.values():
            o["concept"] = op.to
    return f"renamed {len(targets)} instance(s) {op.from_!r} -> {op.to!r}"


def _merge(st: _Fixing, f: fx.Fix) -> str:
    op = f.op
    ids = sorted({st.resolve(i, f, "instances") for i in op.instances})
    if len(ids) < 2:
        raise st.error(f, "instances", f"instances {op.instances} are already one")
    return _merge_ids(st, f, ids, "instances")


def _merge_ids(st: _Fixing, f: fx.Fix, ids: list[int], name: str) -> str:
    insts = st.insts
    concepts = {insts[i].concept for i in ids}
    if len(concepts) > 1:
        raise st.error(f, name, f"different concepts {sorted(concepts)}: rename first")
    keep = ids[0]
    if any(insts[i].spans_override is not None for i in ids):  # an added instance among them
        spans: list[tuple[float, float]] = []
        for i in ids:
            override = insts[i].spans_override
            spans += (
                override
                if override is not None
                else spans_of([o["time"] for o in insts[i].obs.values()], st.inputs.params.span_gap_s)
            )
        insts[keep].spans_override = sorted(spans)
    for i in ids[1:]:
        for k, o in insts[i].obs.items():
            if k not in insts[keep].obs or (o["area"] or 0) > (insts[keep].obs[k]["area"] or 0):
                insts[keep].obs[k] = {**o, "instance_id": keep}
        st.alias[i] = keep
        for name, pick in (("first_override", min), ("last_override", max)):
            theirs, ours = getattr(insts[i], name), getattr(insts[keep], name)
            if theirs is not None:
                setattr(insts[keep], name, theirs if ours is None else pick(theirs, ours))
        del insts[i]
    insts[keep].origin = "fix"
    return f"merged {ids} into {keep}"


def _split(st: _Fixing, f: fx.Fix) -> str:
    op = f.op
    key = (op.clip, op.local_id)
    if key not in st.member_of:
        raise st.error(f, "local_id", f"no clip-local instance {op.local_id} in clip {op.clip}")
    now = st.member_instance(key)  # where an earlier fix moved it, if one did
    src = st.resolve(st.member_of[key] if now is None else now, f, "local_id")
    return _split_member(st, f, key, src, "local_id")


def _split_member(st: _Fixing, f: fx.Fix, key: tuple[int, int], src: int, name: str) -> str:
    insts, (clip, local) = st.insts, key
    clip_seconds = st.inputs.clip_seconds
    if clip_seconds is None:
        raise st.error(f, "op", "split needs the segmentation clip length", line=f.line)
    moved = {k: o for k, o in insts[src].obs.items() if clip_of_sample(k, clip_seconds) == clip}
    if len(moved) == len(insts[src].obs):
        raise st.error(f, name, f"clip {clip} local {local} is all of instance {src}: nothing to split")
    new = st.new_instance(insts[src].concept)
    for k, o in moved.items():
        new.obs[k] = {**o, "instance_id": new.id, "origin": "fix"}
        del insts[src].obs[k]
    insts[src].origin = "fix"
    insts[new.id] = new
    for other in st.member_now:  # the clip's members of src go with their observations
        if other[0] == clip and st.member_instance(other) == src:
            st.member_now[other] = new.id
    return f"split clip {clip} local {local} out of {src} as {new.id}"


def track_boxes(
    frames: Sequence[fx.Keyframe], duration_s: float, image_size: tuple[int, int] | None
) -> dict[int, tuple[float, ...] | None]:
    """A drawn track's box at each 2 FPS timestamp (sample index -> box, None where it is out of
    view): from a box to the next keyframe interpolated linearly (held up to an ``outside``
    keyframe), a keyframe between two timestamps giving its nearest one its box; boxes clipped to
    the view. The segment stage prompts a segmenter with the same boxes."""
    w, h = image_size or (None, None)

    def clipped(b: Sequence[float]) -> tuple[float, ...]:
        if w is None or h is None:  # both None or neither
            return tuple(float(v) for v in b)
        return (max(0.0, b[0]), max(0.0, b[1]), min(float(w), b[2]), min(float(h), b[3]))

    boxes: dict[int, tuple[float, ...] | None] = {}
    for a, b in zip(frames, list(frames[1:]) + [None], strict=True):
        if a.box is None:
            continue
        end = b.time if b is not None else a.time
        lo, hi = math.ceil(a.time / SAMPLE_STEP - 1e-9), math.floor(end / SAMPLE_STEP + 1e-9)
        for k in range(lo, hi + 1):
            t = k * SAMPLE_STEP
            if b is not None and b.outside:
                if t < b.time - 1e-9:
                    boxes[k] = clipped(a.box)
                continue
            u = 0.0 if b is None or b.time == a.time else (t - a.time) / (b.time - a.time)
            end_box = b.box if b is not None else a.box
            assert end_box is not None  # a keyframe that is not outside has a box (fixes.Keyframe)
            boxes[k] = clipped([p + u * (q - p) for p, q in zip(a.box, end_box, strict=True)])
        if b is not None and b.outside:  # up to the next box, the object is out of view
            nxt = next((k for k in frames if k.time > b.time and k.box is not None), None)
            stop = nxt.time if nxt is not None else duration_s
            for k in range(math.ceil(b.time / SAMPLE_STEP - 1e-9), math.floor(stop / SAMPLE_STEP + 1e-9) + 1):
                if k * SAMPLE_STEP < stop - 1e-9:
                    boxes.setdefault(k, None)
    for kf in frames:  # a keyframe between two timestamps: its nearest one shows its box
        k = int(round(kf.time / SAMPLE_STEP))
        if kf.box is not None and boxes.get(k) is None and k * SAMPLE_STEP <= duration_s + 1e-6:
            boxes[k] = clipped(kf.box)
    return boxes


def _track(st: _Fixing, f: fx.Fix, ins: Inst, frames: Sequence[fx.Keyframe]) -> tuple[int, int]:
    """Lay drawn keyframes on ``ins``: at every 2 FPS timestamp from a box to the next keyframe the
    box is interpolated (held up to an ``outside`` keyframe, whose stretch loses its observations);
    a keyframe between two timestamps gives its nearest one its box. Returns (set, removed)."""
    duration_s, fps = st.inputs.duration_s, st.inputs.fps
    w, h = st.inputs.image_size or (None, None)
    for i, kf in enumerate(frames):
        if kf.time > duration_s + 1e-6:
            raise st.error(
                f,
                "boxes",
                f"keyframe {i + 1} at {kf.time} s is after the video ({duration_s:.1f} s)",
                line=f.line_of(f"boxes.{i}"),
            )
        if (
            kf.box is not None
            and w is not None
            and h is not None
            and (kf.box[0] >= w or kf.box[1] >= h or kf.box[2] <= 0 or kf.box[3] <= 0)
        ):
            raise st.error(
                f,
                "boxes",
                f"keyframe {i + 1}: box {list(kf.box)} is outside the {w}x{h} view",
                line=f.line_of(f"boxes.{i}"),
            )

    boxes = track_boxes(frames, duration_s, st.inputs.image_size)
    n_set = n_removed = 0
    for k, box in sorted(boxes.items()):
        if box is None:
            n_removed += ins.obs.pop(k, None) is not None
            continue
        t = k * SAMPLE_STEP
        old = ins.obs.get(k)
        ins.obs[k] = {
            "video_id": st.inputs.video_id,
            "instance_id": ins.id,
            "concept": ins.concept,
            "sample_index": k,
            "time": t,
            "frame": int(round(t * fps)) if old is None else old["frame"],
            "fps": float(fps),
            "x0": float(box[0]),
            "y0": float(box[1]),
            "x1": float(box[2]),
            "y1": float(box[3]),
            "area": None if old is None else old["area"],
            "origin": "fix",
        }
        n_set += 1
    return n_set, n_removed


def _add_instance(st: _Fixing, f: fx.Fix) -> str:
    op, duration_s, fps = f.op, st.inputs.duration_s, st.inputs.fps
    if op.boxes is not None:
        new = st.new_instance(op.concept)
        n, _ = _track(st, f, new, op.boxes)
        if not n:
            raise st.error(f, "boxes", "no 2 FPS timestamp lies inside the drawn track")
        st.insts[new.id] = new
        return f"added {op.concept!r} as {new.id} ({n} boxes from {len(op.boxes)} keyframes)"
    for s, e in op.spans:
        if e > duration_s + 1e-6:
            raise st.error(f, "spans", f"span [{s}, {e}] ends after the video ({duration_s:.1f} s)")
    new = st.new_instance(op.concept)
    for s, e in op.spans:
        for k in range(math.ceil(s / SAMPLE_STEP - 1e-9), math.floor(e / SAMPLE_STEP + 1e-9) + 1):
            t = k * SAMPLE_STEP
            new.obs[k] = {
                "video_id": st.inputs.video_id,
                "instance_id": new.id,
                "concept": op.concept,
                "sample_index": k,
                "time": t,
                "frame": int(round(t * fps)),
                "fps": float(fps),
                "x0": None,
                "y0": None,
                "x1": None,
                "y1": None,
                "area": None,
                "origin": "fix",
            }
    # the spans as given (a span between two samples still marks an appearance)
    new.spans_override = sorted((float(s), float(e)) for s, e in op.spans)
    new.first_override = min(s for s, _ in op.spans)
    new.last_override = max(e for _, e in op.spans)
    st.insts[new.id] = new
    return f"added {op.concept!r} as {new.id} ({len(new.obs)} timestamps)"


def _set_box(st: _Fixing, f: fx.Fix) -> str:
    i = st.resolve(f.op.instance, f, "instance")
    ins = st.insts[i]
    if ins.spans_override is not None:
        raise st.error(f, "instance", f"instance {i} was added with spans only: add it with boxes to draw them")
    n, removed = _track(st, f, ins, f.op.boxes)
    if not ins.obs:
        raise st.error(f, "boxes", f"would leave instance {i} with no observation: remove it instead")
    ins.origin = "fix"
    return f"instance {i}: {n} boxes set" + (f", {removed} timestamps out of view" if removed else "")


def _split_at(st: _Fixing, f: fx.Fix) -> str:
    op, insts = f.op, st.insts
    src = st.resolve(op.instance, f, "instance")
    ins = insts[src]
    if ins.spans_override is not None:
        raise st.error(f, "instance", f"instance {src} was added with spans only: split its spans by hand")
    moved = {k: o for k, o in ins.obs.items() if o["time"] >= op.time - 1e-9}
    if not moved or len(moved) == len(ins.obs):
        times = sorted(o["time"] for o in ins.obs.values())
        raise st.error(
            f, "time", f"instance {src} is seen {times[0]:.1f}-{times[-1]:.1f} s: {op.time} leaves nothing on one side"
        )
    new = st.new_instance(ins.concept)
    for k, o in moved.items():
        new.obs[k] = {**o, "instance_id": new.id, "origin": "fix"}
        del ins.obs[k]
    if ins.last_override is not None and ins.last_override >= op.time:
        new.last_override, ins.last_override = ins.last_override, None
    ins.origin = "fix"
    insts[new.id] = new
    cs = st.inputs.clip_seconds
    if cs:  # a member goes with the side that holds most of its clip's observations
        for key in st.member_now:
            if st.member_instance(key) == src:
                lo, hi = key[0] * cs, (key[0] + 1) * cs
                after = sum(lo <= o["time"] < hi for o in new.obs.values())
                before = sum(lo <= o["time"] < hi for o in ins.obs.values())
                if after > before:
                    st.member_now[key] = new.id
    return f"split instance {src} at {op.time:.1f} s: {len(moved)} timestamps from then on are {new.id}"


def _review_pair(st: _Fixing, f: fx.Fix) -> str:
    op = f.op
    sides = []
    for clip, local, name in ((op.clip_a, op.local_a, "local_a"), (op.clip_b, op.local_b, "local_b")):
        key = (clip, local)
        if key not in st.member_of:
            raise st.error(f, name, f"no clip-local instance {local} in clip {clip}")
        now = st.member_instance(key)
        if now is None:
            raise st.error(f, name, f"clip {clip} local {local} belongs to a removed instance")
        sides.append(now)
    a, b = sides
    pair = f"clip {op.clip_a} #{op.local_a} · clip {op.clip_b} #{op.local_b}"
    if op.decision == "merge":
        if a == b:
            return f"pair {pair}: kept merged (instance {a})"
        return f"pair {pair}: " + _merge_ids(st, f, sorted((a, b)), "decision")
    if a != b:
        return f"pair {pair}: kept apart ({a}, {b})"
    return f"pair {pair}: " + _split_member(st, f, (op.clip_b, op.local_b), a, "decision")


def _speck(st: _Fixing, f: fx.Fix) -> str:
    op = f.op
    key = (op.clip, op.local_id)
    if st.speck_tracks is not None and key not in st.speck_tracks:
        in_clip = sorted(lo for c, lo in st.speck_tracks if c == op.clip)
        more = " ..." if len(in_clip) > 12 else ""
        raise st.error(f, "local_id", f"no speck {op.local_id} in clip {op.clip} (its specks: {in_clip[:12]}{more})")
    if key in st.member_of:
        raise st.error(
            f,
            "local_id",
            f"clip {op.clip} local {op.local_id} is tracked (instance {st.member_instance(key)}): its specks show "
            "its instance; split or merge it instead",
        )
    if op.instance == "none":
        st.specks_told[key] = None
        return f"speck clip {op.clip} local {op.local_id}: no object"
    i = st.resolve(op.instance, f, "instance")
    st.specks_told[key] = i
    return f"speck clip {op.clip} local {op.local_id}: instance {i}"


def _remove_instance(st: _Fixing, f: fx.Fix) -> str:
    i = st.resolve(f.op.instance, f, "instance")
    del st.insts[i]
    st.removed[i] = f.line
    return f"removed instance {i}"


def _set_appearance(st: _Fixing, f: fx.Fix) -> str:
    op, duration_s = f.op, st.inputs.duration_s
    i = st.resolve(op.instance, f, "instance")
    ins = st.insts[i]
    for name in ("first_time", "last_time"):
        v = getattr(op, name)
        if v is not None and v > duration_s + 1e-6:
            raise st.error(f, name, f"{v} is after the end of the video ({duration_s:.1f} s)")
    times = [o["time"] for o in ins.obs.values()]
    first = (
        op.first_time
        if op.first_time is not None
        else (ins.first_override if ins.first_override is not None else min(times, default=0.0))
    )
    last = (
        op.last_time
        if op.last_time is not None
        else (ins.last_override if ins.last_override is not None else max(times, default=first))
    )
    if last < first:
        raise st.error(
            f,
            "first_time" if op.first_time is not None else "last_time",
            f"would put the first appearance ({first}) after the last ({last})",
        )
    ins.first_override, ins.last_override = first, last
    ins.origin = "fix"
    return f"instance {i} appears {first:.1f}-{last:.1f} s"


def _motion(st: _Fixing, f: fx.Fix) -> str:
    op = f.op
    if op.clip not in st.motion_by_clip:
        raise st.error(f, "clip", f"no motion clip {op.clip} (clips 0..{max(st.motion_by_clip, default=-1)})")
    row = st.motion_by_clip[op.clip]
    note = f" ({op.note})" if op.note else ""
    if op.state == "none":
        row.update(
            state="none",
            pivot_time=None,
            pivot_frame=None,
            angle_deg=None,
            speed=None,
            stability=None,
            reason=f"fix at line {f.line}: no meaningful motion{note}",
            origin="fix",
        )
        return f"clip {op.clip}: none"
    pivot = op.pivot_time if op.pivot_time is not None else row["pivot_time"]
    if pivot is None:
        raise st.error(
            f,
            "pivot_time",
            f"clip {op.clip} has no automatic pivot: give pivot_time with the angle",
            line=f.line_of("angle_deg"),
        )
    if not row["clip_start"] - 1e-6 <= pivot < row["clip_end"] + 1e-6:
        raise st.error(f, "pivot_time", f"{pivot} is outside clip {op.clip} [{row['clip_start']}, {row['clip_end']})")
    snapped = round(pivot / SAMPLE_STEP) * SAMPLE_STEP
    s = st.samples_by_time.get(round(snapped, 6))
    angle = op.angle_deg
    if angle is None:
        if s is None or s["angle_deg"] is None:
            raise st.error(
                f, "angle_deg", f"no estimated direction at {snapped} s: give angle_deg", line=f.line_of("pivot_time")
            )
        angle = s["angle_deg"]
    row.update(
        state="ok",
        pivot_time=float(snapped),
        pivot_frame=int(s["frame"]) if s is not None else int(round(snapped * st.inputs.fps)),
        angle_deg=float(wrap(angle)),
        speed=s["speed"] if s is not None else None,
        stability=s["stability"] if s is not None else None,
        reason=f"fix at line {f.line}{note}",
        origin="fix",
    )
    return f"clip {op.clip}: pivot {snapped:.1f} s, angle {float(wrap(angle)):.0f}°"


def _review_question(st: _Fixing, f: fx.Fix) -> str:
    op = f.op
    # a second reviewer's verdict, or a verdict on answers a later fix changed, replaces the earlier
    # one; one reviewer's twice on the same answers is a slip
    if op.question in st.reviews:
        earlier = st.reviewed_by[op.question]
        if earlier == op.by and st.reviews[op.question]["answers"] == op.answers:
            raise st.error(
                f,
                "question",
                f"question {op.question} was reviewed by the fix at line "
                f"{st.reviews[op.question]['line']}" + (f" (also by {op.by})" if op.by else ""),
            )
    st.reviewed_by[op.question] = op.by
    st.reviews[op.question] = {
        "video_id": st.inputs.video_id,
        "question_id": op.question,
        "verdict": op.verdict,
        "reason": op.reason,
        "line": f.line,
        "answers": op.answers,
        "holds": None,  # the qa stage's to say: it knows the question as asked now
    }
    seen = f" of answer{'s' if len(op.answers) > 1 else ''} {', '.join(op.answers)}" if op.answers else ""
    return f"question {op.question}: {op.verdict}{seen}" + (f" ({op.reason})" if op.reason else "")


# One handler per fix op (``fixes.OPS``): it changes the metadata and returns the audit summary.
FIX_HANDLERS: dict[str, Callable[[_Fixing, fx.Fix], str]] = {
    "rename_concept": _rename_concept,
    "merge": _merge,
    "split": _split,
    "add_instance": _add_instance,
    "remove_instance": _remove_instance,
    "set_appearance": _set_appearance,
    "motion": _motion,
    "review_question": _review_question,
    "set_box": _set_box,
    "split_at": _split_at,
    "review_pair": _review_pair,
    "speck": _speck,
}


def decided_apart(concept_a: str | None, concept_b: str | None) -> bool:
    """Whether a person's fixes decided a reconciliation pair without naming it, from the concepts
    its two sides' instances have after the fixes (None: the side's clip instance is part of no
    instance): a side removed (not an object), or the two renamed apart (a person's
    ``rename_concept`` of one side: two different objects). The benchmark vocabulary renames every
    instance of a name alike, so it decides no pair. The metadata stage counts such a pair resolved
    (``_resolved_by``) and the qa stage weighs no risk or verdict of it (``stages/qa/provisional.py``)."""
    return concept_a is None or concept_b is None or concept_a != concept_b


def _resolved_by(fixset: fx.FixSet, members: Iterable[dict], fixed_members: Iterable[dict]) -> Callable[[dict], bool]:
    """Whether a ``schema.MERGE_DECISIONS`` row is resolved by the fix set: by a person's
    ``review_pair`` decision on it, a ``merge`` fix naming both sides' automatic instances, a
    ``split`` fix of either side's clip instance, or fixes that decided it without naming it
    (``decided_apart``: a side removed, or the two renamed apart). ``members``: reconciliation's
    (what the fixes name); ``fixed_members``: each clip instance's ``instance_id`` and ``concept``
    after the fixes (``Derived.members``: concept None where removed)."""
    instance_of = {(int(m["clip_index"]), int(m["local_id"])): int(m["instance_id"]) for m in members}
    concept_now = {(int(m["clip_index"]), int(m["local_id"])): m["concept"] for m in fixed_members}
    merged = [set(f.op.instances) for f in fixset.fixes if f.op.op == "merge"]
    split = {(f.op.clip, f.op.local_id) for f in fixset.fixes if f.op.op == "split"}
    decided = {
        frozenset({(f.op.clip_a, f.op.local_a), (f.op.clip_b, f.op.local_b)})
        for f in fixset.fixes
        if f.op.op == "review_pair"
    }

    def resolved(d: dict) -> bool:
        a, b = (int(d["clip_a"]), int(d["local_a"])), (int(d["clip_b"]), int(d["local_b"]))
        ia, ib = instance_of[a], instance_of[b]
        return (
            a in split
            or b in split
            or any({ia, ib} <= m for m in merged)
            or frozenset({a, b}) in decided
            or decided_apart(concept_now[a], concept_now[b])
        )

    return resolved


def pending_reviews(
    decisions: Iterable[dict], members: Iterable[dict], fixset: fx.FixSet, fixed_members: Iterable[dict]
) -> list[dict]:
    """Reconciliation's review items (``schema.MERGE_DECISIONS`` rows with ``review``) that the fix
    set has not resolved (``_resolved_by``; ``members``: reconciliation's, ``fixed_members``: after
    the fixes, ``Derived.members``), as ``schema.REVIEW_PENDING`` rows."""
    members = list(members)
    instance_of = {(int(m["clip_index"]), int(m["local_id"])): int(m["instance_id"]) for m in members}
    resolved = _resolved_by(fixset, members, fixed_members)
    out = []
    for d in decisions:
        if not d["review"] or resolved(d):
            continue
        a, b = (int(d["clip_a"]), int(d["local_a"])), (int(d["clip_b"]), int(d["local_b"]))
        out.append(
            {
                "video_id": d["video_id"],
                "concept": d["concept"],
                "clip_a": a[0],
                "local_a": a[1],
                "clip_b": b[0],
                "local_b": b[1],
                "instance_a": instance_of[a],
                "instance_b": instance_of[b],
                "decision": d["decision"],
                "posterior": float(d["posterior"]),
                "answer_impact": int(d["answer_impact"]),
            }
        )
    return out


def unreviewed_decisions(
    decisions: Iterable[dict], members: Iterable[dict], fixset: fx.FixSet, fixed_members: Iterable[dict]
) -> list[dict]:
    """Every reconciliation decision (``schema.MERGE_DECISIONS`` rows) the fix set has not resolved
    (``_resolved_by``), as ``schema.UNREVIEWED_DECISIONS`` rows: each side with the instance it is
    part of after the fixes (``fixed_members``: ``Derived.members``, with its concept; None where
    removed) and its clip instance's times (``members``: reconciliation's), the decision's
    probability of being wrong min(P, 1 - P). A decision a person resolved carries no risk, so it is
    left out."""
    members = list(members)
    times = {
        (int(m["clip_index"]), int(m["local_id"])): (float(m["first_time"]), float(m["last_time"])) for m in members
    }
    fixed_members = list(fixed_members)
    now = {(int(m["clip_index"]), int(m["local_id"])): m["instance_id"] for m in fixed_members}
    resolved = _resolved_by(fixset, members, fixed_members)
    out = []
    for d in decisions:
        if resolved(d):
            continue
        a, b = (int(d["clip_a"]), int(d["local_a"])), (int(d["clip_b"]), int(d["local_b"]))
        p = float(d["posterior"])
        out.append(
            {
                "video_id": d["video_id"],
                "concept": d["concept"],
                "clip_a": a[0],
                "local_a": a[1],
                "clip_b": b[0],
                "local_b": b[1],
                "instance_a": now.get(a),
                "instance_b": now.get(b),
                "first_a": times[a][0],
                "last_a": times[a][1],
                "first_b": times[b][0],
                "last_b": times[b][1],
                "decision": d["decision"],
                "review": bool(d["review"]),
                "posterior": p,
                "p_wrong": min(p, 1.0 - p),
            }
        )
    return out


def _apply_vocabulary(st: _Fixing, vocabulary: fx.Vocabulary) -> list[dict]:
    """The benchmark's renames and synonyms, in file order, before the video's own fixes; one
    fixes_applied row per entry that renamed something in this video."""
    rows = []
    for f in vocabulary.fixes:
        names = set(f.op.synonyms) if f.op.op == "synonyms" else {f.op.from_}
        to = f.op.concept if f.op.op == "synonyms" else f.op.to
        hit = [ins for ins in st.insts.values() if ins.concept in names]
        was = sorted({ins.concept for ins in hit})
        for ins in hit:
            ins.concept, ins.origin = to, "fix"
            for o in ins.obs.values():
                o["concept"] = to
        if hit:
            rows.append(
                {
                    "video_id": st.inputs.video_id,
                    "file": vocabulary.file,
                    "line": f.line,
                    "op": f.op.op,
                    "summary": f"vocabulary: renamed {len(hit)} instance(s) {', '.join(map(repr, was))} -> {to!r}",
                    "sha256": vocabulary.sha256,
                }
            )
    return rows


def apply_fixes(fixset: fx.FixSet, inputs: FixInputs, vocabulary: fx.Vocabulary | None = None) -> Derived:
    """Apply the benchmark's vocabulary, then a video's fixes, to its automatic metadata; a problem
    raises ``FixError`` (file, line, field) before anything is returned, so a bad file changes nothing."""
    st = _Fixing(fixset, inputs)
    applied = _apply_vocabulary(st, vocabulary) if vocabulary is not None else []
    for f in fixset.fixes:
        kind = f.op.op
        handler = FIX_HANDLERS.get(kind)
        if handler is None:  # parse_fix_text admits only fixes.OPS; an op added there needs a handler here
            raise fx.FixError(st.file, f.line, "op", f"unknown op {kind!r}")
        applied.append(
            {
                "video_id": inputs.video_id,
                "file": st.file,
                "line": f.line,
                "op": kind,
                "summary": handler(st, f),
                "sha256": fixset.sha256,
            }
        )
    inst_rows = instance_rows(
        inputs.video_id,
        st.insts.values(),
        inputs.fps,
        inputs.params,
        inputs.poses,
        inputs.camera_height,
        inputs.image_size,
        inputs.level,
    )
    obs_rows = []
    for ins in sorted(st.insts.values(), key=lambda x: x.id):
        for k in sorted(ins.obs):
            obs_rows.append({**ins.obs[k], "instance_id": ins.id, "concept": ins.concept})
    motion_out = [st.motion_by_clip[c] for c in sorted(st.motion_by_clip)]
    members = []
    for c, lo in sorted(st.member_now):
        i = st.member_instance((c, lo))
        members.append(
            {"clip_index": c, "local_id": lo, "instance_id": i, "concept": None if i is None else st.insts[i].concept}
        )
    told = {key: None if i is None else st.current(i) for key, i in sorted(st.specks_told.items())}
    return Derived(inst_rows, obs_rows, motion_out, applied, list(st.reviews.values()), members, told)
