"""VPO (place order): order 4 views of the scene, shown from rotated viewpoints, by capture time.

Per view video, ``vpo_per_video`` questions of 4 anchors each. Repairs over the release:
- any two anchors of a question are at least ``vpo_min_gap_s`` apart in time and, where poses
  exist, ``vpo_min_position_frac`` of the trajectory's extent apart in place, on the ground plane,
  plus ``vpo_drift_per_distance`` of the path walked between them (the estimated track drifts)
  (the release had pairs 1 frame apart);
- each anchor is really rendered from the *panorama* at the view's yaw plus a signed offset drawn
  from [offset_min, offset_max] degrees (the release's evaluation read the unrotated frames), blurred
  by the face backend like every published frame, and shipped as an image file;
- an unrotated control (same anchors, same options, offset 0) for the rotation analysis;
- with ``qa.stable_answers``, no anchor's place is visited again on the other side of another
  anchor (``other_visits``): a viewer who recognises a place but not the visit would reorder them;
  and each rotated view shows its place (``ViewContent``, ``view_problem``): at least
  ``vpo_min_landmarks`` of the video's objects predicted clearly in it that the video showed only
  between the anchors before and after it and no other view of the question shows (a viewer dates a
  view by the moments the video showed what it shows). A view that fails is turned the other way,
  then to other seeded offsets (``rotation_tries``), before its anchor set is re-picked.

The plan (anchors, labels, offsets, options) is pure data; rendering is a separate pass over the
panorama that holds one decoded frame at a time and decodes only around the anchors (a seek to the
keyframe before each, as ``candidates`` seeks to its keyframes), not the whole panorama.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.spatial import ConvexHull
from scipy.spatial.distance import pdist

from vsi_wild.errors import UnitError
from vsi_wild.stages import geometry
from vsi_wild.stages.evaluate import ACCURACY
from vsi_wild.stages.export import image_export_path
from vsi_wild.stages.pose import Track, track_from_rows, yaw_matrix
from vsi_wild.stages.project import render_view
from vsi_wild.stages.qa.common import (
    Provenance,
    Question,
    RenderJob,
    StableRng,
    VideoInfo,
    base_fields,
    interval,
    ordering_text,
    permutation_distractors,
    vpo_question,
)
from vsi_wild.stages.qa.difficulty import DIFFICULTY_COLUMNS, difficulty_bin, gaps, horizon_bin, stamp
from vsi_wild.stages.qa.params import CLEAR_AREA_FRAC, QAParams
from vsi_wild.stages.qa.registry import MC, QATask, Split, TaskQuestions, VideoInputs, copied
from vsi_wild.stages.video_io import frames_at
from vsi_wild.stages.visibility import OCCLUDED, VISIBLE, BoxModel, box_model


@dataclass(frozen=True)
class Candidate:
    time: float  # time of the frame shown (the sample time until rendering reads the frame's own)
    frame: int
    pos: tuple[float, float, float] | None  # camera centre on the ground plane when a valid pose exists
    walked: float = 0.0  # ground path length of the camera from the video's first pose to here


class VideoPoses:
    """One view video's pose rows (schema.POSES) and the track they make, read once per video for
    every use (anchor candidates, revisits by the objects, what a rotated view shows); the track is
    built on first use."""

    def __init__(self, poses: pa.Table | None, video: VideoInfo):
        rows = poses.to_pylist() if poses is not None and poses.num_rows else []
        self.rows = [r for r in rows if r["video_id"] == video.video_id]
        self._track: Track | None = None

    @property
    def track(self) -> Track:
        if self._track is None:
            self._track = track_from_rows(self.rows)
        return self._track

    def any_valid(self) -> bool:
        return any(r["valid"] for r in self.rows)


def candidates(posed: VideoPoses, video: VideoInfo, params: QAParams) -> list[Candidate]:
    """Anchor candidates: the 2 FPS pose timestamps (or a 2 FPS grid when there are no poses),
    away from both ends of the video."""
    lo, hi = params.vpo_edge_margin_s, video.duration_s - params.vpo_edge_margin_s
    out: dict[int, Candidate] = {}
    if posed.rows:  # the 2 FPS sampler's (t_k, nearest frame) pairs: right for variable frame rates too
        ground = ground_positions(posed)
        for r in sorted(posed.rows, key=lambda r: r["time"]):
            frame = int(r["frame"])
            if not 0 <= frame < video.n_frames:
                continue
            out.setdefault(frame, Candidate(float(r["time"]), frame, ground.get(int(r["sample_index"]))))
    else:
        k = 0
        while k / 2.0 <= video.duration_s:
            frame = video.frame_at(k / 2.0)
            out.setdefault(frame, Candidate(video.time_of(frame), frame, None))
            k += 1
    ordered = []
    walked, last = 0.0, None
    for c in sorted(out.values(), key=lambda c: c.frame):
        if c.pos is not None:
            walked += math.dist(c.pos, last) if last is not None else 0.0
            last = c.pos
        ordered.append(replace(c, walked=walked))
    return [c for c in ordered if lo <= c.time <= hi]


def ground_positions(posed: VideoPoses) -> dict[int, tuple[float, float, float]]:
    """sample index -> the camera centre (x, y, z) on the ground plane: its component along the
    cameras' mean down axis removed, for the valid, finite poses of one video.
    A place is a position on the ground: an estimated track's height drifts (the CPU backend's by
    ~2 m over the sample's loop), a walker's eye height does not, and the drift must not part two
    anchors. Rotations that give no down axis (all zero) leave the centres as they are."""
    centres = {
        int(r["sample_index"]): c
        for r in posed.rows
        if r["valid"] and np.isfinite(c := np.array([r["x"], r["y"], r["z"]], dtype=np.float64)).all()
    }
    if not centres:
        return {}
    down = posed.track.down()  # zero when the rotations give no axis
    if not np.isfinite(down).all():
        down = np.zeros(3)
    return {k: cast(tuple[float, float, float], tuple(map(float, c - (c @ down) * down))) for k, c in centres.items()}


def trajectory_extent(cands: Sequence[Candidate]) -> float:
    """The largest distance between two candidates' ground positions (the track's diameter): the same
    whatever the world's axes, which are the first camera's (a bounding box's diagonal turns with
    them, up to 1.4 times, so the same walk would get another place radius for another first heading)."""
    pts = np.array([c.pos for c in cands if c.pos is not None], dtype=np.float64)
    return diameter(pts) if len(pts) >= 2 else 0.0


def diameter(pts: np.ndarray) -> float:
    """The largest distance between two of ``pts`` (n x d): over the convex hull's vertices, in the
    subspace the points span (ground positions lie in a plane), as all pairs of a long video's
    positions would not fit in memory."""
    centred = pts - pts.mean(axis=0)
    _, sv, vt = np.linalg.svd(centred, full_matrices=False)
    rank = int((sv > sv[0] * 1e-9).sum()) if sv[0] > 0 else 0
    if rank == 0:
        return 0.0
    coords = centred @ vt[:rank].T
    if rank == 1:
        return float(np.ptp(coords))
    if len(pts) > 64:
        pts = pts[ConvexHull(coords, qhull_options="QJ").vertices]
    return float(pdist(pts).max())


def compatible(a: Candidate, b: Candidate, min_gap_s: float, min_dist: float, drift_per_distance: float = 0.0) -> bool:
    """Far enough apart in time and, where both have a pose, in place: ``min_dist``, plus
    ``drift_per_distance`` of the path walked between them (the estimated track drifts with the
    distance walked: at the end of the sample's loop it put the start 5 m away, 1.3 m by the truth)."""
    if abs(a.time - b.time) < min_gap_s or a.frame == b.frame:
        return False
    if min_dist > 0 and a.pos is not None and b.pos is not None:
        return math.dist(a.pos, b.pos) >= min_dist + drift_per_distance * abs(a.walked - b.walked)
    return True


def run_around(i: int, n: int, here: Callable[[int], Any]) -> tuple[int, int]:
    """The first and last index of the unbroken run of indices of [0, n) around ``i`` where
    ``here`` holds (``i`` is in it whatever ``here(i)`` says): a moment's own visit of its place."""
    lo, hi = i, i
    while lo > 0 and here(lo - 1):
        lo -= 1
    while hi < n - 1 and here(hi + 1):
        hi += 1
    return lo, hi


@dataclass(frozen=True)
class OtherVisits:
    """The first and last moments another visit brings the camera back to a frame's place, and what
    dates each: the object whose sightings put the camera there (``object_visits``: its name), or
    None where the estimated track does (``other_visits``)."""

    first: float
    last: float
    first_by: str | None = None
    last_by: str | None = None

    def union(self, other: OtherVisits) -> OtherVisits:
        """The visits either shows (the earlier first, the later last; on a tie, this one's)."""
        first, first_by = (self.first, self.first_by) if self.first <= other.first else (other.first, other.first_by)
        last, last_by = (self.last, self.last_by) if self.last >= other.last else (other.last, other.last_by)
        return OtherVisits(first, last, first_by, last_by)


def union_visits(*found: Mapping[int, OtherVisits]) -> dict[int, OtherVisits]:
    """frame -> the other visits any of ``found`` shows (a revisit seen by the track or by the objects)."""
    out: dict[int, OtherVisits] = {}
    for visits in found:
        for frame, v in visits.items():
            out[frame] = out[frame].union(v) if frame in out else v
    return out


def other_visits(cands: Sequence[Candidate], min_dist: float, error: float = 0.0) -> dict[int, OtherVisits]:
    """frame -> the first and last moment the camera came back to that candidate's place on another
    visit: the candidates closer than ``min_dist`` to it on the ground (the place radius of
    ``compatible``), outside the unbroken stretch of such candidates around its own moment. A viewer
    who recognises the place a frame shows but not the visit may date the frame in another visit (a
    loop that ends where it started puts its first and last frames in one place). Frames whose place
    is visited once, and candidates without a pose, are left out.

    ``error``: how far the track's distance between two moments may be off (``qa.vpo_visit_error_frac``
    of the extent). A moment is at the place *maybe* within ``min_dist + error`` and *surely* within
    ``min_dist - error``: the own visit is the stretch surely there (the camera may have left where it
    ends), another visit any moment maybe there outside it, so a return at the radius's edge counts
    whichever side of the edge the truth puts it.

    Measured on the track as estimated, without ``compatible``'s drift allowance: with it every
    place of the sample's loop is one with every place walked 100 m later, and no anchor set is
    left; so a revisit the track's drift moves beyond the radius is not seen here unless the pose
    stage closed that loop (``stages.loops``: the sample's loop ends 1.3 m from its start by the
    closed track and by the truth, 4.7 m by the track before): ``object_visits`` sees such
    revisits by the objects."""
    posed = sorted((c for c in cands if c.pos is not None), key=lambda c: c.time)
    if not posed or min_dist <= 0:
        return {}
    pts = np.array([c.pos for c in posed], dtype=np.float64)
    times = np.array([c.time for c in posed])
    out = {}
    for i, c in enumerate(posed):  # one row at a time: a long video has many thousands of candidates
        dist = np.linalg.norm(pts - pts[i], axis=1)
        lo, hi = run_around(i, len(posed), (dist < min_dist - error).__getitem__)
        again = dist < min_dist + error
        again[lo : hi + 1] = False  # its own visit
        if again.any():
            out[c.frame] = OtherVisits(float(times[again].min()), float(times[again].max()))
    return out


@dataclass(frozen=True)
class GroundSighting:
    """An object seen in one 2 FPS sample: its name ("bench #12"), the sample, and its box's bottom
    centre (view pixels), where it meets the ground."""

    name: str
    sample_index: int
    u: float
    v: float


def object_visits(
    track: Track,
    sightings: Iterable[GroundSighting],
    camera_height: float,
    radius: float,
    level: bool = True,
    error: float = 0.0,
) -> dict[int, OtherVisits]:
    """frame -> the other visits of the place the camera stands at in that frame, as the objects
    show them, independently of where the track puts the camera.

    In each sighting the object stands where its box's bottom meets the ground
    (``Track.ground_point``: ``camera_height`` below that frame's camera, along the ray of that
    frame's orientation), at a ground offset v from the camera. One object at X seen in two frames
    puts their cameras at X - v1 and X - v2: |v1 - v2| apart. That distance rests on the two frames'
    orientations and the object's ranges only, not on the track's positions, whose drift grows with
    the distance walked where no loop closed it (``stages.loops``: the sample's loop ended 4.7 m
    from its start by the track before its loop was closed, 1.3 m by the truth). Two frames are at
    one place when |v1 - v2| < ``radius`` (the place radius of ``other_visits``), and on different
    visits when the camera stays at neither's place between them: each lies outside the other's own
    visit, the unbroken run of moments around it at its place by the track (over a few seconds its
    drift is small) or by an object (the two measures differ near the radius: a moment either keeps
    at the place has not left it). Only objects within ``radius`` of the camera in both frames
    count: objects at the place, whose offsets an error of the heading moves by at most ``radius``
    times that angle. A box cut off at the image's bottom does not show where the object meets the
    ground, and is left out (as ``reconcile.locate.ground_contact`` leaves it out).
    ``level``: the views are level (the ground is below each camera's own down axis); else below
    the cameras' mean down. ``error``: as ``other_visits``' (another visit maybe within ``radius +
    error``, the own visit surely within ``radius - error``, by the object or by the track). Frames
    without a valid pose, and samples no object places twice, are left out."""
    rows = track.valid_rows()
    if not rows or not camera_height or radius <= 0:
        return {}
    down = track.down()
    C = track.C[rows]
    ground = C - np.outer(C @ down, down)  # the cameras on the ground plane (ground_positions)
    at = {int(track.sample_indices[i]): n for n, i in enumerate(rows)}
    near: dict[str, list[tuple[int, np.ndarray]]] = {}  # object -> (valid row, ground offset) within the radius
    for s in sightings:
        n = at.get(s.sample_index)
        X = None if n is None else track.ground_point(s.sample_index, s.u, s.v, camera_height, None if level else down)
        if n is None or X is None:
            continue
        offset = X - C[n]
        offset = offset - (offset @ down) * down
        if float(np.linalg.norm(offset)) < radius:
            near.setdefault(s.name, []).append((n, offset))
    # row n -> {row j: the object that puts the camera at j maybe within the radius of the camera at n}
    placed: dict[int, dict[int, str]] = {}
    surely: dict[int, set[int]] = {}  # row n -> the rows an object puts surely within the radius
    for name, seen in sorted(near.items()):
        where = np.array([n for n, _ in seen])
        offsets = np.array([o for _, o in seen])
        for n, o in seen:
            apart = np.linalg.norm(offsets - o, axis=1)
            by = placed.setdefault(n, {})
            for j in where[apart < radius + error].tolist():
                by.setdefault(int(j), name)
            surely.setdefault(n, set()).update(where[apart < radius - error].tolist())
    own: dict[int, tuple[int, int]] = {}  # row n -> its own visit (first and last row)
    for n in placed:

        def here(j: int, n: int = n) -> bool:  # surely at row n's place, by the track or an object
            return j in surely[n] or bool(np.linalg.norm(ground[j] - ground[n]) < radius - error)

        own[n] = run_around(n, len(rows), here)
    times = track.times[rows]
    out: dict[int, OtherVisits] = {}
    for n, by in placed.items():  # (placing is mutual: j in placed[n] when n in placed[j])
        again = sorted(j for j in by if not own[n][0] <= j <= own[n][1] and not own[j][0] <= n <= own[j][1])
        if again:
            first, last = again[0], again[-1]
            out[int(track.frames[rows[n]])] = OtherVisits(float(times[first]), float(times[last]), by[first], by[last])
    return out


def sightings_from_metadata(visibility: pa.Table | None, video: VideoInfo) -> list[GroundSighting]:
    """The video's sightings whose box bottom shows where the object meets the ground (VISIBILITY's
    visible rows with a box not cut off by the image's bottom, within 2 px as ``Obs.cut_at_bottom``),
    named by their concept and instance id."""
    if visibility is None or not visibility.num_rows:
        return []
    mine = visibility.filter(pc.equal(visibility["video_id"], video.video_id))
    mine = mine.filter(pc.equal(mine["state"], VISIBLE))
    out = []
    for r in mine.select(["instance_id", "concept", "sample_index", "x0", "x1", "y1"]).to_pylist():
        if r["x0"] is None or r["y1"] is None or r["y1"] >= video.height - 2.0:
            continue
        out.append(
            GroundSighting(
                f"{r['concept']} #{r['instance_id']}", int(r["sample_index"]), (r["x0"] + r["x1"]) / 2, r["y1"]
            )
        )
    return out


def apart_visits(a: Candidate, b: Candidate, visits: Mapping[int, OtherVisits]) -> bool:
    """Dating either frame in another visit of its place (``other_visits``, ``object_visits``)
    keeps the two in order."""
    a, b = sorted((a, b), key=lambda c: c.time)
    return (a.frame not in visits or visits[a.frame].last < b.time) and (
        b.frame not in visits or visits[b.frame].first > a.time
    )


# ----------------------------------------------------------------------------- what a view shows
@dataclass(frozen=True)
class Landmark:
    """An instance of the video a rotated view can show: its position (world), its box model from
    its own sightings (``visibility.box_model``), the share of its box its mask fills, and the first
    and last moments the video showed it."""

    instance_id: int
    concept: str
    position: np.ndarray
    box: BoxModel
    fill: float
    first: float
    last: float


class ViewContent:
    """Which of the video's objects a view rendered from the panorama at an anchor shows, from the
    metadata alone: an instance whose position is consistent with its sightings (the visibility
    track's ``geometric``) is shown when its box, modelled from its sightings as the visibility stage
    models it and projected through the anchor's camera turned by the view's offset, covers at least
    "seen clearly" (``CLEAR_AREA_FRAC`` of the view, its mask's share of that box counted) and the
    video's own camera at that moment does not find it occluded (occlusion depends on where the
    camera stands, not where it looks). The view is the video's camera turned right by the offset
    and tilted to ``vpo_pitch_deg``, with the video's intrinsics (a render's size changes its
    pixels, not its field, and areas are compared as fractions)."""

    def __init__(
        self,
        track: Track,
        landmarks: Sequence[Landmark],
        occluded: set[tuple[int, int]],
        size: tuple[int, int],
        pitch_deg: float,
    ):
        self.track, self.landmarks, self.occluded = track, list(landmarks), occluded
        self.size, self.pitch_deg = size, pitch_deg
        self.row_of = {int(f): i for i, f in enumerate(track.frames) if track.valid[i]}
        self._positions = np.array([lm.position for lm in self.landmarks], dtype=np.float64).reshape(-1, 3)
        self._boxes = np.array(
            [(lm.box.width, lm.box.height, lm.box.dx, lm.box.dy) for lm in self.landmarks], dtype=np.float64
        ).reshape(-1, 4)
        self._fills = np.array([lm.fill for lm in self.landmarks], dtype=np.float64)
        self._shown: dict[tuple[int, float], tuple[Landmark, ...]] = {}

    @classmethod
    def from_metadata(
        cls,
        posed: VideoPoses,
        instances: pa.Table | None,
        visibility: pa.Table | None,
        video: VideoInfo,
        params: QAParams,
    ) -> ViewContent | None:
        """None when the metadata cannot say what a view shows: no poses, no visibility track, or no
        instance whose position explains its sightings (then nothing is checked)."""
        if instances is None or visibility is None or not posed.any_valid():
            return None
        track = posed.track
        row_of_sample = {int(k): i for i, k in enumerate(track.sample_indices) if track.valid[i]}
        mine = visibility.filter(pc.equal(visibility["video_id"], video.video_id))
        geometric = set(pc.unique(mine.filter(mine["geometric"])["instance_id"]).to_pylist())
        occluded = {
            (int(r["instance_id"]), int(r["sample_index"]))
            for r in mine.filter(pc.equal(mine["state"], OCCLUDED)).select(["instance_id", "sample_index"]).to_pylist()
        }
        boxes: dict[int, dict[int, tuple[float, float, float, float]]] = {}
        fills: dict[int, list[float]] = {}
        for r in mine.filter(pc.equal(mine["state"], VISIBLE)).to_pylist():
            i = row_of_sample.get(int(r["sample_index"]))
            if i is None or r["x0"] is None:
                continue
            b = (float(r["x0"]), float(r["y0"]), float(r["x1"]), float(r["y1"]))
            boxes.setdefault(int(r["instance_id"]), {})[i] = b
            if r["area"] is not None and (b[2] - b[0]) * (b[3] - b[1]) > 0:
                fills.setdefault(int(r["instance_id"]), []).append(r["area"] / ((b[2] - b[0]) * (b[3] - b[1])))
        landmarks = []
        for r in instances.to_pylist():
            iid = int(r["instance_id"])
            if r["video_id"] != video.video_id or iid not in geometric or iid not in boxes:
                continue
            position = np.array([r["x"], r["y"], r["z"]], dtype=np.float64)
            if not np.isfinite(position).all():
                continue
            pixels, depth = _project(track.R, track.C, track.K, position)
            model = box_model(boxes[iid], pixels, depth, track)
            if model is not None:
                fill = float(np.median(fills[iid])) if iid in fills else 1.0
                landmarks.append(
                    Landmark(iid, r["concept"], position, model, fill, float(r["first_time"]), float(r["last_time"]))
                )
        if not landmarks:
            return None
        return cls(track, landmarks, occluded, (video.width, video.height), params.vpo_pitch_deg - video.pitch_deg)

    def shown(self, frame: int, offset_deg: float) -> tuple[Landmark, ...]:
        """The landmarks the view of ``frame`` turned by ``offset_deg`` shows clearly (none when the
        frame has no valid pose: where it looks is unknown)."""
        key = (frame, round(offset_deg, 9))
        if key not in self._shown:
            self._shown[key] = self._compute(frame, offset_deg)
        return self._shown[key]

    def _compute(self, frame: int, offset_deg: float) -> tuple[Landmark, ...]:
        i = self.row_of.get(frame)
        if i is None:
            return ()
        b = math.radians(self.pitch_deg)  # the view's axes in the video camera's: turned right, then tilted up
        tilt = np.array([[1.0, 0.0, 0.0], [0.0, math.cos(b), -math.sin(b)], [0.0, math.sin(b), math.cos(b)]])
        R = (yaw_matrix(offset_deg) @ tilt).T @ self.track.R[i]
        K = self.track.K[i]
        k = int(self.track.sample_indices[i])
        cam = (self._positions - self.track.C[i]) @ R.T
        z = cam[:, 2]
        ok = z > 1e-6
        z = np.where(ok, z, 1.0)
        fx, fy = K[0, 0], K[1, 1]
        cx = fx * (cam[:, 0] + self._boxes[:, 2]) / z + K[0, 2]  # box centre: the point plus its offset
        cy = fy * (cam[:, 1] + self._boxes[:, 3]) / z + K[1, 2]
        hw, hh = fx * self._boxes[:, 0] / z / 2, fy * self._boxes[:, 1] / z / 2
        w, h = self.size
        inside = np.clip(np.minimum(cx + hw, w) - np.maximum(cx - hw, 0.0), 0.0, None) * np.clip(
            np.minimum(cy + hh, h) - np.maximum(cy - hh, 0.0), 0.0, None
        )
        clear = ok & (inside * self._fills >= CLEAR_AREA_FRAC * w * h)
        return tuple(
            lm for lm, c in zip(self.landmarks, clear, strict=True) if c and (lm.instance_id, k) not in self.occluded
        )


def _project(R: np.ndarray, C: np.ndarray, K: np.ndarray, position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pixels (n, 2) and depths (n,) of a world point in n cameras (world -> camera R, centres C, intrinsics K)."""
    cam = np.einsum("nij,nj->ni", R, position[None, :] - C)
    depth = cam[:, 2]
    safe = np.where(depth > 1e-6, depth, np.nan)
    u = K[:, 0, 0] * cam[:, 0] / safe + K[:, 0, 2]
    v = K[:, 1, 1] * cam[:, 1] / safe + K[:, 1, 2]
    return np.stack([u, v], axis=1), depth


def view_problem(
    content: ViewContent, anchors: Sequence[Candidate], r: int, offsets: Sequence[float], min_landmarks: int
) -> str | None:
    """Why the view of anchor ``r`` (time rank; ``offsets`` by time rank) does not show its place,
    or None when it does: it must show at least ``min_landmarks`` objects that tie it to its anchor,
    i.e. that the video showed only between the anchors before and after it (a viewer who dates the
    view by the moments the video showed them keeps it in its place in the order), and that no
    other view of the question shows (two views sharing them could be taken for one another)."""
    a = anchors[r]
    before = anchors[r - 1].time if r > 0 else -math.inf
    after = anchors[r + 1].time if r + 1 < len(anchors) else math.inf
    shown = content.shown(a.frame, offsets[r])
    elsewhere = {lm.instance_id for q, b in enumerate(anchors) if q != r for lm in content.shown(b.frame, offsets[q])}
    tied = [lm for lm in shown if before < lm.first and lm.last < after and lm.instance_id not in elsewhere]
    if len(tied) >= min_landmarks:
        return None
    view = f"the view of the frame at {a.time:g} s turned {offsets[r]:+.0f}°"
    if not shown:
        return f"{view} shows none of the video's objects clearly"
    names = ", ".join(f"{lm.concept} #{lm.instance_id}" for lm in shown[:3])
    return (
        f"{view} shows {names}, which the video also shows beyond the frames before and after it "
        f"({before:g} s, {after:g} s) or another view of the question shows: {len(tied)} of "
        f"{min_landmarks} objects tie it to its moment"
    )


def settle_rotations(
    content: ViewContent, anchors: Sequence[Candidate], tries: Sequence[Sequence[float]], min_landmarks: int
) -> tuple[list[float] | None, str | None]:
    """Offsets (by time rank) under which every view shows its place, the first that works of each
    anchor's ``tries`` (its drawn offset first), chosen in time order with the others at their
    current choice and checked together at the end; (None, why the first failing view fails) when
    none is found."""
    offsets = [t[0] for t in tries]
    for r in range(len(anchors)):
        first_problem = None
        for o in tries[r]:
            problem = view_problem(content, anchors, r, [*offsets[:r], o, *offsets[r + 1 :]], min_landmarks)
            if problem is None:
                offsets[r] = o
                break
            first_problem = first_problem or problem
        else:
            return None, first_problem
    for r in range(len(anchors)):
        problem = view_problem(content, anchors, r, offsets, min_landmarks)
        if problem is not None:
            return None, problem
    return offsets, None


def anchor_stratum(anchors: Sequence[Candidate], video: VideoInfo, params: QAParams) -> tuple[str, str]:
    """(difficulty bin of the smallest gap between the anchors, horizon bin of the query time)."""
    ts = sorted(a.time for a in anchors)
    return (
        difficulty_bin(min(gaps(ts)), params.vpo_gap_bins_s),
        horizon_bin(ts[-1], video.duration_s, params.horizon_edges),
    )


def choose_anchor_sets(
    cands: Sequence[Candidate],
    count: int,
    params: QAParams,
    video: VideoInfo,
    visits: Mapping[int, OtherVisits] | None = None,
    accept: Callable[[int, tuple[Candidate, ...]], bool] | None = None,
    usable: Callable[[int, Candidate], bool] | None = None,
) -> list[tuple[Candidate, ...]]:
    """``count`` sets of 4 pairwise-compatible anchors, seeded per question; anchors are not reused
    across a video's questions unless there is no other way. With ``visits`` (``other_visits``), no
    anchor's place is visited again on the other side of another anchor (``apart_visits``); with
    ``accept``, a set is taken only when ``accept(question index, anchors by time)`` holds (every
    view shows its place: ``settle_rotations``), and drawn only from the candidates
    ``usable(question index, candidate)`` admits (a condition every anchor of an accepted set meets,
    so that the restarts are not spent on sets that cannot pass). Stratified: of the sets its
    random restarts find, a question takes the first whose stratum (``anchor_stratum``) the video's earlier questions
    used least (one never used ends the search)."""
    min_dist = params.vpo_min_position_frac * trajectory_extent(cands)
    sets: list[tuple[Candidate, ...]] = []
    used: set[int] = set()
    strata: Counter[tuple[str, str]] = Counter()
    for q in range(count):
        rng = StableRng(params.seed, video.video_id, "VPO", q)
        pool = [c for c in cands if usable is None or usable(q, c)]
        found = None
        for allow_reuse in (False, True):
            options: dict[tuple[int, ...], tuple[Candidate, ...]] = {}
            rejected: set[tuple[int, ...]] = set()
            for _ in range(params.vpo_attempts):
                picked: list[Candidate] = []
                for c in rng.shuffled(pool):
                    if not allow_reuse and c.frame in used:
                        continue
                    if all(
                        compatible(c, p, params.vpo_min_gap_s, min_dist, params.vpo_drift_per_distance)
                        and (visits is None or apart_visits(c, p, visits))
                        for p in picked
                    ):
                        picked.append(c)
                        if len(picked) == 4:
                            break
                if len(picked) == 4:
                    key = tuple(sorted(p.frame for p in picked))
                    if key in options or key in rejected or any(key == tuple(sorted(p.frame for p in s)) for s in sets):
                        continue
                    chosen = tuple(sorted(picked, key=lambda c: c.time))
                    if accept is not None and not accept(q, chosen):
                        rejected.add(key)
                        continue
                    options[key] = chosen
                    if strata[anchor_stratum(chosen, video, params)] == 0:
                        break
            if options:
                found = min(options.values(), key=lambda s: strata[anchor_stratum(s, video, params)])
                break

        def fits(c: Candidate, p: Candidate) -> bool:
            return compatible(c, p, params.vpo_min_gap_s, min_dist, params.vpo_drift_per_distance) and (
                visits is None or apart_visits(c, p, visits)
            )

        def whole(s: tuple[Candidate, ...], q: int = q) -> bool:
            taken = {tuple(sorted(c.frame for c in t)) for t in sets}
            return tuple(sorted(c.frame for c in s)) not in taken and (accept is None or accept(q, s))

        for allow_reuse in (False, True) if found is None else ():  # the restarts found none: search them all
            found = search_set([c for c in pool if allow_reuse or c.frame not in used], fits, whole, rng)
            if found is not None:
                break
        if found is None:
            break  # a later question would not find room either
        sets.append(found)
        used.update(c.frame for c in found)
        strata[anchor_stratum(found, video, params)] += 1
    return sets


SEARCH_STEPS = 200_000  # pair checks a search may spend before it gives up (a long video's candidates are many)


class _SearchSpent(Exception):
    """``search_set``'s budget of pair checks ran out."""


def search_set(
    pool: Sequence[Candidate],
    fits: Callable[[Candidate, Candidate], bool],
    accept: Callable[[tuple[Candidate, ...]], bool],
    rng: StableRng,
    steps: int = SEARCH_STEPS,
) -> tuple[Candidate, ...] | None:
    """A set of 4 anchors, pairwise ``fits`` and ``accept``-ed as a whole, by depth-first search in time
    order (the first anchor in a seeded order): where random restarts miss a narrow space of sets,
    this finds one if any exists, within ``steps`` pair checks. None when there is none (or the
    budget ran out).

    Each pair is checked once: a candidate's later candidates that fit it are a bit set, worked out
    the first time the search picks it, and the candidates that fit every anchor picked so far are
    the intersection of theirs. So a pool of n candidates costs at most n(n-1)/2 checks, and the
    search is complete for up to ~630 candidates (a 5-minute view at 2 FPS) at the default budget;
    a branch with fewer candidates left than anchors still to pick is not entered."""
    ordered = sorted(pool, key=lambda c: c.time)
    n = len(ordered)
    index = {id(c): i for i, c in enumerate(ordered)}
    fitting: dict[int, int] = {}  # i -> bit j set when ordered[j] (j > i) fits ordered[i]
    left = steps

    def later(i: int) -> int:
        nonlocal left
        if i not in fitting:
            left -= n - i - 1
            if left < 0:
                raise _SearchSpent
            fitting[i] = sum(1 << j for j in range(i + 1, n) if fits(ordered[j], ordered[i]))
        return fitting[i]

    def extend(picked: list[int], domain: int) -> tuple[Candidate, ...] | None:
        """``domain``: the candidates after the last picked that fit every picked one."""
        if len(picked) == 4:
            chosen = tuple(ordered[i] for i in picked)
            return chosen if accept(chosen) else None
        need = 4 - len(picked)
        while domain and domain.bit_count() >= need:
            i = (domain & -domain).bit_length() - 1  # the earliest left
            domain &= domain - 1
            found = extend([*picked, i], domain & later(i) if need > 1 else 0)
            if found is not None:
                return found
        return None

    try:
        for first in rng.shuffled(ordered):
            i = index[id(first)]
            found = extend([i], later(i))
            if found is not None:
                return found
    except _SearchSpent:
        return None
    return None


@dataclass(frozen=True)
class Presentation:
    """How question ``q`` shows its anchors: ``shown[p]`` is the time rank of the anchor shown as
    "Frame p+1"; ``offsets[p]`` its drawn rotation."""

    shown: list[int]
    correct_labels: tuple[str, ...]
    distractors: list[str]
    offsets: list[float]


def presentation(params: QAParams, video: VideoInfo, q: int) -> Presentation:
    rng = StableRng(params.seed, video.video_id, "VPO", q, "present")
    shown = rng.shuffled(range(4))
    label_of_rank = {rank: p + 1 for p, rank in enumerate(shown)}
    correct_labels = tuple(f"Frame {label_of_rank[r]}" for r in range(4))
    distractors = [ordering_text(p) for p in permutation_distractors(correct_labels, rng)]
    offsets = []
    for _ in range(4):
        sign = 1.0 if rng.below(2) else -1.0
        offsets.append(sign * rng.uniform(params.vpo_offset_min_deg, params.vpo_offset_max_deg))
    return Presentation(shown, correct_labels, distractors, offsets)


def rotation_tries(params: QAParams, video: VideoInfo, q: int) -> list[list[float]]:
    """Per time rank, the offsets its view may take: the drawn one, the same turned the other way,
    then ``vpo_rotation_attempts`` seeded draws from the offset range (either way)."""
    pres = presentation(params, video, q)
    tries: list[list[float]] = [[] for _ in range(4)]
    for p, rank in enumerate(pres.shown):
        o = pres.offsets[p]
        rng = StableRng(params.seed, video.video_id, "VPO", q, "rotate", p)
        more = [
            (1.0 if rng.below(2) else -1.0) * rng.uniform(params.vpo_offset_min_deg, params.vpo_offset_max_deg)
            for _ in range(params.vpo_rotation_attempts)
        ]
        tries[rank] = list(dict.fromkeys([o, -o, *more]))
    return tries


def _skip(video: VideoInfo, anchors: Sequence[Candidate], reason: str, reading: str) -> dict:
    return {
        "video_id": video.video_id,
        "task_type": "VPO",
        "item": "frames " + ",".join(str(c.frame) for c in anchors),
        "reason": reason,
        "reading": reading,
    }


def _visit_reason(s: Sequence[Candidate], visits: Mapping[int, OtherVisits]) -> str | None:
    for a, b in itertools.combinations(s, 2):
        if apart_visits(a, b, visits):
            continue
        a, b = sorted((a, b), key=lambda c: c.time)
        if a.frame in visits and visits[a.frame].last >= b.time:
            v = visits[a.frame]
            again = (
                f"where the frame at {a.time:g} s was taken is visited again at {v.last:g} s, after the "
                f"frame at {b.time:g} s{_dated_by(v.last_by)}"
            )
        else:
            v = visits[b.frame]
            again = (
                f"where the frame at {b.time:g} s was taken is visited at {v.first:g} s, before the "
                f"frame at {a.time:g} s{_dated_by(v.first_by)}"
            )
        return (
            f"the camera stands {again}: a viewer who dates a frame by another visit of its place "
            "orders them otherwise; another set asked where one is left"
        )
    return None


def _dated_by(name: str | None) -> str:
    return "" if name is None else f" ({name} stands at the place in both)"


VISIT_READING = "another visit of the place"
VIEW_READING = "what the rotated view shows"


def vpo_plan(
    poses: pa.Table | None,
    video: VideoInfo,
    params: QAParams,
    prov: Provenance,
    instances: pa.Table | None = None,
    visibility: pa.Table | None = None,
    camera_height: float | None = None,
    level_views: bool = True,
) -> tuple[list[Question], list[RenderJob], list[dict]]:
    """The questions (rotated + unrotated control) and the images to render for them.

    With ``stable_answers``, a set is asked only when no anchor's place is visited again across
    another anchor, by the estimated track (``other_visits``) or, where the camera's height is
    known (``camera_height``, the poses' unit; ``level_views`` as reconcile's), by the objects the
    video saw there (``object_visits``), and, where the metadata can tell (``ViewContent``), each
    rotated view shows its place (``view_problem``), turned another way if its drawn offset does
    not (``rotation_tries``). Where the first choice has a set that fails, every set is chosen again
    under both (``choose_anchor_sets``' ``visits`` and ``accept``), and the failing sets are listed
    as skipped with their reading."""
    posed = VideoPoses(poses, video)
    cands = candidates(posed, video, params)
    sets = choose_anchor_sets(cands, params.vpo_per_video, params, video)
    skipped = []
    rotations: dict[int, list[float]] = {}  # question index -> offsets by time rank, where settled
    if params.stable_answers:
        extent = trajectory_extent(cands)
        radius, error = params.vpo_min_position_frac * extent, params.vpo_visit_error_frac * extent
        visits = other_visits(cands, radius, error)
        if camera_height and posed.rows:
            sightings = sightings_from_metadata(visibility, video)
            seen = object_visits(posed.track, sightings, camera_height, radius, level_views, error)
            visits = union_visits(visits, {c.frame: seen[c.frame] for c in cands if c.frame in seen})
        content = (
            ViewContent.from_metadata(posed, instances, visibility, video, params)
            if params.vpo_min_landmarks > 0
            else None
        )

        def settle(q: int, s: Sequence[Candidate]) -> tuple[list[float] | None, str | None]:
            if content is None:
                return [], None
            return settle_rotations(content, s, rotation_tries(params, video, q), params.vpo_min_landmarks)

        offsets_of: dict[int, set[float]] = {}

        def usable(q: int, c: Candidate) -> bool:  # some offset it may take shows enough objects, tied or not
            if content is None:
                return True
            if q not in offsets_of:
                offsets_of[q] = {o for t in rotation_tries(params, video, q) for o in t}
            return any(len(content.shown(c.frame, o)) >= params.vpo_min_landmarks for o in offsets_of[q])

        failed = []
        for q, s in enumerate(sets):
            why = _visit_reason(s, visits)
            if why is not None:
                failed.append(_skip(video, s, why, VISIT_READING))
                continue
            offsets, problem = settle(q, s)
            if offsets is None:
                failed.append(
                    _skip(
                        video,
                        s,
                        f"{problem}: a viewer cannot tell which moment it shows; another set asked where one is left",
                        VIEW_READING,
                    )
                )
        if failed:  # choose again: sets whose places no other visit interleaves and whose views show them
            sets = choose_anchor_sets(
                cands,
                params.vpo_per_video,
                params,
                video,
                visits,
                accept=lambda q, s: settle(q, s)[0] is not None,
                usable=usable,
            )
            skipped += failed
        for q, s in enumerate(sets):
            offsets, _ = settle(q, s)
            if offsets:
                rotations[q] = offsets
    if len(sets) < params.vpo_per_video:
        skipped.append(
            {
                "video_id": video.video_id,
                "task_type": "VPO",
                "item": "anchors",
                "reason": f"{len(sets)} of {params.vpo_per_video} anchor sets fit (gap {params.vpo_min_gap_s:g}s, "
                f"position {params.vpo_min_position_frac:g} of the extent, {len(cands)} candidates)",
            }
        )
    ext = "jpg" if params.image_format == "jpg" else "png"
    questions: list[Question] = []
    jobs: list[RenderJob] = []
    for q, anchors in enumerate(sets):  # anchors sorted by time
        pres = presentation(params, video, q)
        shown, correct_labels, distractors = pres.shown, pres.correct_labels, pres.distractors
        # offsets[p]: the rotation of "Frame p+1" (shown[p] = the time rank of the anchor it shows)
        offsets = [rotations[q][shown[p]] for p in range(4)] if q in rotations else pres.offsets
        frames = [anchors[shown[p]].frame for p in range(4)]
        times = [anchors[shown[p]].time for p in range(4)]
        qt = max(times)
        evidence = [[interval(anchors[r].time, anchors[r].time) for r in range(4)]]
        for subtype, offs, split, text in (
            ("rotated", offsets, "release", vpo_question(params.vpo_offset_min_deg, params.vpo_offset_max_deg)),
            ("unrotated", [0.0] * 4, "vpo_unrotated", vpo_question(None)),
        ):
            tag = "rot" if subtype == "rotated" else "unrot"
            files = [f"images/vpo{q}_f{p + 1}_{tag}.{ext}" for p in range(4)]
            yaws = [float(geometry.wrap_deg(video.yaw_deg + o)) for o in offs]
            jobs += [RenderJob(frames[p], yaws[p], params.vpo_pitch_deg, files[p]) for p in range(4)]
            questions.append(
                stamp(
                    Question(
                        **base_fields(video, prov),
                        task_type="VPO",
                        subtype=subtype,
                        split=split,
                        index=q,
                        item="frames " + ",".join(str(a.frame) for a in anchors),
                        question=text,
                        correct=ordering_text(correct_labels),
                        distractors=distractors,
                        query_times=[qt],
                        answers=[ordering_text(correct_labels)],
                        evidence=evidence,
                        frame_indices=frames,
                        frame_times=times,
                        image_files=files,
                        render_yaw_deg=yaws,
                        render_offset_deg=[float(o) for o in offs],
                        render_pitch_deg=params.vpo_pitch_deg,
                        render_hfov_deg=video.hfov_deg,
                    ),
                    params.vpo_gap_bins_s,
                    params.horizon_edges,
                    gaps_s=gaps(times),
                )
            )
    return questions, jobs, skipped


# ----------------------------------------------------------------------------- rendering
def iter_frames(path: str | Path, wanted: Sequence[int]) -> Iterator[tuple[int, float, np.ndarray]]:
    """(index, time, RGB) of the wanted frames only, indices and times as every stage counts
    them (the shared reader's): decoded around each anchor by seeking to the keyframe before it
    (``video_io.frames_at``), not by decoding the panorama from its start."""
    yield from frames_at(path, wanted)


def encode_image(rgb: np.ndarray, fmt: str, jpeg_quality: int) -> bytes:
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    if fmt == "png":
        ok, buf = cv2.imencode(".png", bgr, [cv2.IMWRITE_PNG_COMPRESSION, 3])
    else:
        ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality])
    if not ok:
        raise RuntimeError(f"could not encode a {fmt} image")
    return buf.tobytes()


def render_jobs(
    pano_path: str | Path,
    jobs: Sequence[RenderJob],
    dest: Callable[[str], Path],
    video: VideoInfo,
    params: QAParams,
    blur: Callable[[np.ndarray], tuple[np.ndarray, list[dict]]] | None,
    frames: Iterable[tuple[int, float, np.ndarray]] | None = None,
) -> list[dict]:
    """Render every job from the panorama, blur its faces, write it to ``dest(job.file)``.
    Returns one QA_IMAGES row per image (with the frame's decoded time)."""
    width = params.image_width or video.width
    height = params.image_height or video.height
    by_frame: dict[int, list[RenderJob]] = {}
    for j in jobs:
        by_frame.setdefault(j.frame, []).append(j)
    rows = []
    stream = frames if frames is not None else iter_frames(pano_path, list(by_frame))
    for index, time, pano in stream:
        for j in by_frame.get(index, ()):
            img = render_view(pano, j.yaw_deg, j.pitch_deg, video.hfov_deg, width, height)
            boxes: list[dict] = []
            if blur is not None:
                img, boxes = blur(img)
            dest(j.file).write_bytes(encode_image(img, params.image_format, params.jpeg_quality))
            rows.append(
                {
                    "video_id": video.video_id,
                    "file": j.file,
                    "frame": index,
                    "time": float(time),
                    "yaw_deg": j.yaw_deg,
                    "pitch_deg": j.pitch_deg,
                    "hfov_deg": video.hfov_deg,
                    "width": width,
                    "height": height,
                    "faces_blurred": boxes,
                }
            )
    missing = sorted(set(by_frame) - {r["frame"] for r in rows})
    if missing:
        raise UnitError(f"{pano_path}: frames {missing[:5]} were not decoded")
    return sorted(rows, key=lambda r: r["file"])


def refine_times(questions: Sequence[Question], frame_time: dict[int, float], params: QAParams) -> None:
    """Replace the VPO questions' sample times by the shown frames' own decoded times (and the
    difficulty derived from them)."""
    for q in questions:
        assert q.frame_indices is not None  # every VPO question shows its frames
        q.frame_times = [float(frame_time[f]) for f in q.frame_indices]
        ts = sorted(q.frame_times)
        q.query_times = [ts[-1]]
        q.evidence = [[interval(t, t) for t in ts]]
        stamp(q, params.vpo_gap_bins_s, params.horizon_edges, gaps_s=gaps(ts))


# ----------------------------------------------------------------------------- the task
def _build(inputs: VideoInputs, params: QAParams, prov: Provenance) -> TaskQuestions:
    questions, jobs, skipped = vpo_plan(
        inputs.poses,
        inputs.video,
        params,
        prov,
        inputs.instances,
        inputs.visibility,
        inputs.camera_height,
        inputs.level_views,
    )
    return TaskQuestions(questions, skipped, jobs)


def _image_paths(q: Mapping[str, Any]) -> list[str] | None:
    return [image_export_path(q["video_id"], f) for f in q["image_files"]] if q["image_files"] else None


def _anchor_gap(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    gaps = [
        min(b - a for a, b in zip(sorted(r["frame_times"]), sorted(r["frame_times"])[1:], strict=False))
        for r in rows
        if r.get("frame_times")
    ]
    return {"min_anchor_gap_s": min(gaps) if gaps else None}


def _report_section(entry: Mapping[str, Any]) -> list[str]:
    if entry.get("min_anchor_gap_s") is None:
        return []
    return [f"VPO: the closest two anchors of any question are {entry['min_anchor_gap_s']:.1f} s apart."]


TASK = QATask(
    name="VPO",
    order=1,
    release_rank=1,
    kind=MC,
    metric=ACCURACY,
    questions=_build,
    ordering=True,
    export_columns={
        "image_paths": _image_paths,
        **copied("render_yaw_deg", "render_offset_deg", "render_pitch_deg", "render_hfov_deg", *DIFFICULTY_COLUMNS),
    },
    splits=(Split("vpo_unrotated", "VPO unrotated", "release", variant="unrotated"),),
    after_render=refine_times,
    summarise=_anchor_gap,
    report_section=_report_section,
)
