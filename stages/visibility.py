"""Visibility tracks (seed 002's "visible, occluded, or out of view" per object and moment).

For each instance of one view video and each 2 FPS timestamp, one state:

* ``visible``: the instance was observed then (its box is the observation's);
* ``out_of_view``: not observed, and its estimated position projects outside the view's frustum;
* ``occluded``: not observed, although its position projects inside the frustum;
* ``not_seen``: not observed, and no consistent position says why.

The frustum test uses the view's own camera at that timestamp (``stages.pose.Track``) and the
instance's estimated world position (``INSTANCES`` x, y, z: ``stages.reconcile.locate``). The
position is a point (ground contact or triangulated centre), not the object's extent, so each
instance's box is modelled from its own sightings: its size and the offset of the box centre from
the projected point, both in world units (pixels x depth / focal length), and the predicted box at
another timestamp is that model at the new depth. The instance is in the frustum when the predicted
box overlaps the image.

Positions are only as good as the poses behind them (a track drifts; its unit is metres only
where the backend measured the ground): an instance's position is used only when it explains its
own sightings, i.e. when the predicted box is in the frustum at no fewer than ``min_consistency``
of the timestamps it was seen at. Otherwise, and for instances without position, every unobserved
timestamp is ``not_seen``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from vsi_wild.stages.pose import Track

VISIBLE, OUT_OF_VIEW, OCCLUDED, NOT_SEEN = "visible", "out_of_view", "occluded", "not_seen"
STATES = (VISIBLE, OUT_OF_VIEW, OCCLUDED, NOT_SEEN)
_MIN_DEPTH = 1e-6  # pose units: a point this close to the camera plane has no projection


@dataclass(frozen=True)
class BoxModel:
    """An instance's box in world units: width and height, and the box centre's offset from the
    projected position (right and down), each divided by the depth gives pixels / focal length."""

    width: float
    height: float
    dx: float
    dy: float


def _project(track: Track, position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pixel coordinates (n, 2) and depths (n,) of a world point in every camera of the track."""
    cam = np.einsum("nij,nj->ni", track.R, position[None, :] - track.C)
    depth = cam[:, 2]
    safe = np.where(depth > _MIN_DEPTH, depth, np.nan)
    u = track.K[:, 0, 0] * cam[:, 0] / safe + track.K[:, 0, 2]
    v = track.K[:, 1, 1] * cam[:, 1] / safe + track.K[:, 1, 2]
    return np.stack([u, v], axis=1), depth


def box_model(
    boxes: dict[int, tuple[float, float, float, float]], pixels: np.ndarray, depth: np.ndarray, track: Track
) -> BoxModel | None:
    """The instance's box model from its sightings (track row -> box), median over them; None when
    no sighting has the point in front of the camera."""
    rows = [i for i in boxes if depth[i] > _MIN_DEPTH and np.isfinite(pixels[i]).all()]
    if not rows:
        return None
    fx, fy = track.K[rows, 0, 0], track.K[rows, 1, 1]
    b = np.array([boxes[i] for i in rows])
    z = depth[rows]
    return BoxModel(
        width=float(np.median((b[:, 2] - b[:, 0]) * z / fx)),
        height=float(np.median((b[:, 3] - b[:, 1]) * z / fy)),
        dx=float(np.median(((b[:, 0] + b[:, 2]) / 2 - pixels[rows, 0]) * z / fx)),
        dy=float(np.median(((b[:, 1] + b[:, 3]) / 2 - pixels[rows, 1]) * z / fy)),
    )


@dataclass(frozen=True)
class PredictedBoxes:
    """Per track row: an instance's predicted box, its centre (cx, cy) and half size (hw, hh) in
    pixels, and whether there is one (``ok``: a valid pose, the point in front)."""

    cx: np.ndarray
    cy: np.ndarray
    hw: np.ndarray
    hh: np.ndarray
    ok: np.ndarray

    def in_frustum(self, image_size: tuple[int, int]) -> np.ndarray:
        """Per track row: the predicted box overlaps the image (and the point is in front)."""
        w, h = image_size
        with np.errstate(invalid="ignore"):
            overlaps = (
                (self.cx + self.hw > 0) & (self.cx - self.hw < w) & (self.cy + self.hh > 0) & (self.cy - self.hh < h)
            )
        return self.ok & overlaps


def predicted_boxes(model: BoxModel, pixels: np.ndarray, depth: np.ndarray, track: Track) -> PredictedBoxes:
    """The box model at every camera of the track, the instance's position at ``pixels`` and ``depth``."""
    ok = track.valid & (depth > _MIN_DEPTH) & np.isfinite(pixels).all(axis=1)
    z = np.where(ok, depth, 1.0)
    fx, fy = track.K[:, 0, 0], track.K[:, 1, 1]
    cx, cy = pixels[:, 0] + model.dx * fx / z, pixels[:, 1] + model.dy * fy / z
    hw, hh = model.width * fx / z / 2, model.height * fy / z / 2
    return PredictedBoxes(cx, cy, hw, hh, ok)


def visibility_columns(
    video_id: str,
    instances: Sequence[dict],
    observations: Sequence[dict],
    track: Track,
    projected: Mapping[int, ProjectedInstance],
) -> dict[str, np.ndarray]:
    """``schema.VISIBILITY`` columns: every instance (``INSTANCES`` rows) at every timestamp of
    ``track`` (the view's 2 FPS poses, valid or not) and of its observations (``OBSERVATIONS``
    rows; one a fix added may lie past the last pose), from the observations and, where its
    position explains its sightings (``projected``: ``project_instances``), the position. Built
    as arrays: a long video has instances x timestamps rows."""
    row_of = track.sample_rows
    timeline = {int(k): (float(track.times[i]), int(track.frames[i])) for k, i in row_of.items()}
    seen: dict[int, dict[int, dict]] = {}
    for o in observations:
        k = int(o["sample_index"])
        seen.setdefault(int(o["instance_id"]), {})[k] = o
        timeline.setdefault(k, (float(o["time"]), int(o["frame"])))
    ks = np.array(sorted(timeline), dtype=np.int64)
    n = len(ks)
    times = np.array([timeline[k][0] for k in ks], dtype=np.float64)
    frames = np.array([timeline[k][1] for k in ks], dtype=np.int64)
    track_row = np.array([row_of.get(int(k), -1) for k in ks], dtype=np.int64)  # -1: no pose at that timestamp
    position_of = {int(k): j for j, k in enumerate(ks)}
    fps = float(track.fps) if len(track.sample_indices) else float(observations[0]["fps"]) if observations else 0.0
    ordered = sorted(instances, key=lambda r: r["instance_id"])
    m = len(ordered)
    state = np.full((m, n), STATES.index(NOT_SEEN), dtype=np.int8)
    frame = np.tile(frames, (m, 1))
    geometric = np.zeros(m, dtype=bool)
    box = {c: np.zeros((m, n)) for c in ("x0", "y0", "x1", "y1", "area")}
    has_box = {c: np.zeros((m, n), dtype=bool) for c in box}
    for j, ins in enumerate(ordered):
        obs = seen.get(int(ins["instance_id"]), {})
        where = projected.get(int(ins["instance_id"]))
        if where is not None:
            geometric[j] = True
            posed = track_row >= 0
            state[j, posed] = np.where(
                where.inside[track_row[posed]], STATES.index(OCCLUDED), STATES.index(OUT_OF_VIEW)
            )
        for k, o in obs.items():
            at = position_of[k]
            state[j, at] = STATES.index(VISIBLE)
            frame[j, at] = int(o["frame"])
            for c in box:
                if o[c] is not None:
                    box[c][j, at], has_box[c][j, at] = o[c], True
    cols: dict[str, np.ndarray] = {
        "video_id": np.full(m * n, video_id),
        "instance_id": np.repeat(np.array([int(r["instance_id"]) for r in ordered], dtype=np.int64), n),
        "concept": np.repeat(np.array([r["concept"] for r in ordered], dtype=str), n),
        "sample_index": np.tile(ks, m),
        "time": np.tile(times, m),
        "frame": frame.ravel(),
        "fps": np.full(m * n, fps),
        "state": np.array(STATES)[state.ravel()],
        "geometric": np.repeat(geometric, n),
    }
    for c in box:  # null where there is no observed box
        values = box[c].ravel() if c != "area" else box[c].ravel().astype(np.int64)
        cols[c] = np.ma.masked_array(values, mask=~has_box[c].ravel())
    return cols


@dataclass(frozen=True)
class ProjectedInstance:
    """An instance whose position explains its own sightings, in every camera of the track."""

    depth: np.ndarray  # (n,) its position's depth
    boxes: PredictedBoxes  # its box model there
    inside: np.ndarray  # (n,) the predicted box overlaps the image
    observed: dict[int, tuple[float, float, float, float]]  # track row -> its observed box


def project_instance(
    ins: dict, obs: dict[int, dict], track: Track, image_size: tuple[int, int], min_consistency: float
) -> ProjectedInstance | None:
    """The instance (``INSTANCES`` row) in the view's cameras, from its observations (track row ->
    ``OBSERVATIONS`` row); None when its position is unknown or does not explain its own sightings
    (the predicted box in the frustum at fewer than ``min_consistency`` of them)."""
    if ins["x"] is None or not track.valid.any():
        return None
    pixels, depth = _project(track, np.array([ins["x"], ins["y"], ins["z"]], dtype=np.float64))
    boxes = {i: (o["x0"], o["y0"], o["x1"], o["y1"]) for i, o in obs.items() if o["x0"] is not None and track.valid[i]}
    model = box_model(boxes, pixels, depth, track) if boxes else None
    if model is None:
        return None
    predicted = predicted_boxes(model, pixels, depth, track)
    inside = predicted.in_frustum(image_size)
    if float(np.mean([inside[i] for i in boxes])) < min_consistency:
        return None
    return ProjectedInstance(depth, predicted, inside, boxes)


def project_instances(
    instances: Sequence[dict],
    observations: Sequence[dict],
    track: Track,
    image_size: tuple[int, int],
    min_consistency: float,
) -> dict[int, ProjectedInstance]:
    """Instance id -> the instance in the view's cameras (``project_instance``), for every instance
    (``INSTANCES`` rows) whose position explains its own sightings (``OBSERVATIONS`` rows at the
    track's timestamps): what the visibility track and the specks' attribution both read."""
    row_of = track.sample_rows
    obs_by: dict[int, dict[int, dict]] = {}
    for o in observations:
        k = int(o["sample_index"])
        if k in row_of:
            obs_by.setdefault(int(o["instance_id"]), {})[row_of[k]] = o
    out = {}
    for ins in sorted(instances, key=lambda r: r["instance_id"]):
        iid = int(ins["instance_id"])
        p = project_instance(ins, obs_by.get(iid, {}), track, image_size, min_consistency)
        if p is not None:
            out[iid] = p
    return out


# ----------------------------------------------------------------------------- specks
class SpeckFits:
    """Which instances a speck's box may show by their positions: per concept, each projected
    instance's predicted box (``project_instances``), grown by the box model's largest miss on the
    instance's own sightings (in world units, so it scales with the depth as the box does)."""

    def __init__(self, instances: Sequence[dict], track: Track, projected: Mapping[int, ProjectedInstance]):
        self.boxes_of: dict[str, list[tuple[int, PredictedBoxes]]] = {}  # concept -> (instance, grown boxes)
        fx, fy = track.K[:, 0, 0], track.K[:, 1, 1]
        for ins in sorted(instances, key=lambda r: r["instance_id"]):
            p = projected.get(int(ins["instance_id"]))
            if p is None:
                continue
            b, at = p.boxes, sorted(p.observed)
            seen = np.array([p.observed[i] for i in at])
            z = p.depth[at]
            miss_x = float(np.max(np.abs((seen[:, 0] + seen[:, 2]) / 2 - b.cx[at]) * z / fx[at]))
            miss_y = float(np.max(np.abs((seen[:, 1] + seen[:, 3]) / 2 - b.cy[at]) * z / fy[at]))
            zz = np.where(b.ok, p.depth, 1.0)
            grown = PredictedBoxes(b.cx, b.cy, b.hw + miss_x * fx / zz, b.hh + miss_y * fy / zz, b.ok)
            self.boxes_of.setdefault(ins["concept"], []).append((int(ins["instance_id"]), grown))

    def at(self, concept: str, row: int, box: Sequence[float]) -> list[int]:
        """The instances of ``concept`` whose grown predicted box at track row ``row`` overlaps
        ``box`` (x0, y0, x1, y1: view pixels), in id order."""
        x0, y0, x1, y1 = box
        return [
            i
            for i, g in self.boxes_of.get(concept, [])
            if g.ok[row]
            and g.cx[row] - g.hw[row] < x1
            and g.cx[row] + g.hw[row] > x0
            and g.cy[row] - g.hh[row] < y1
            and g.cy[row] + g.hh[row] > y0
        ]


def speck_rows(
    video_id: str,
    specks: Sequence[dict],
    members: Sequence[dict],
    instances: Sequence[dict],
    track: Track,
    projected: Mapping[int, ProjectedInstance],
    told: Mapping[tuple[int, int], int | None] | None = None,
) -> list[dict]:
    """``schema.SPECKS`` rows: each of the segmenter's masks under ``segment.min_area`` (``specks``:
    ``schema.CLIP_SPECKS`` rows of the video) with the instance it shows after the fixes.

    As a person told it first (``told``: (clip, local id) -> instance, ``Derived.specks_told``;
    None: no object, the speck is left out). Else by its clip track: a speck whose clip-local id
    is a member of an instance (``members``: ``Derived.members`` rows, instance None where a
    person removed it; a removed one's specks are left out) shows that instance. Else by position:
    the instances of its concept whose position explains its sightings (``projected``:
    ``project_instances``) and whose grown predicted box at the speck's timestamp overlaps the
    speck's box (``SpeckFits``). One such instance: it; none or several: the speck is left
    unattributed (instance null)."""
    member = {(int(m["clip_index"]), int(m["local_id"])): m for m in members}
    told = told or {}
    concept_of = {int(r["instance_id"]): r["concept"] for r in instances}
    row_of = track.sample_rows
    fits = SpeckFits(instances, track, projected)
    out = []
    for s in sorted(specks, key=lambda r: (r["clip_index"], r["local_id"], r["sample_index"])):
        key = (int(s["clip_index"]), int(s["local_id"]))
        iid: int | None = None
        by: str | None = None
        concept = s["concept"]
        if key in told:
            told_id = told[key]
            if told_id is None:
                continue  # a person said it shows no object (or its instance was removed)
            iid, by, concept = told_id, "fix", concept_of[told_id]
        elif key in member:
            if member[key]["instance_id"] is None:
                continue  # a person removed the instance its track is part of
            iid, by, concept = int(member[key]["instance_id"]), "track", member[key]["concept"]
        elif int(s["sample_index"]) in row_of:
            hits = fits.at(concept, row_of[int(s["sample_index"])], (s["x0"], s["y0"], s["x1"], s["y1"]))
            if len(hits) == 1:
                iid, by = hits[0], "position"
        out.append(
            {
                "video_id": video_id,
                "instance_id": iid,
                "attributed_by": by,
                "concept": concept,
                "clip_index": key[0],
                "local_id": key[1],
                "sample_index": int(s["sample_index"]),
                "time": float(s["time"]),
                **{c: float(s[c]) for c in ("x0", "y0", "x1", "y1")},
                "area": int(s["area"]),
            }
        )
    return out
