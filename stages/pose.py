"""Camera poses: per view, fused per source, derived back per view; motion directions.

The paper (A.2.2) runs Depth-Anything-3 on the 2 FPS video for a pose per timestamp. The four
views of a source are one camera turned by fixed yaws, so:

1. a pose backend estimates each configured view independently (long videos in overlapping
   chunks, stitched: ``estimate_chunked``);
2. the per-step motions of the views are rotated into the source camera's axes by their yaws and
   fused (``fuse_views``): rotations by their chordal L1 median, translation directions by a
   robust mean, step lengths by the median of each view's normalised step; where the backend
   gives its matches (twoview), a step is solved from all views' matches as one all-round camera
   (``rig_motion``) and measured against the ground they all see (``rig_ground_height``);
3. the fused track's loops are closed where the walk comes back to a place (``stages.loops``:
   revisits recognised by matching the rig's views, a pose graph on the ground plane);
4. each view's poses are derived from the fused source poses by its yaw (``derive_view``), so the
   four views' motions agree by construction; the independent estimates are kept to flag clips
   where the views disagree (``view_agreement``).

Axes: OpenCV camera axes (x right, y down, z forward); extrinsics map world -> camera. A view of
yaw ψ (positive turns right) has its axes rotated about the camera's y axis. The direction of
travel relative to a view's heading is ``atan2(d_x, d_z)`` of the displacement ``d`` in that
view's camera axes (0 = forward, +90 = right, ±180 = backward), as in ``schema.MOTION``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal, Protocol, cast, overload

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

from vsi_wild.stages.backends.base import FrameBatch, PoseEstimator, PoseResult, PoseStageOptions

if TYPE_CHECKING:
    from vsi_wild.stages.backends.twoview import RigFeatures
    from vsi_wild.stages.loops import LoopReport


class LoopParams(BaseModel):
    """``pose.loops``: closing the track's loops (``stages.loops``) and what counts as a revisit there
    (the search and the pose graph's noise are ``stages.loops.LoopModel``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        True,
        description="close the track's loops (places the walk comes back to, recognised by matching the views); "
        "needs pose.camera_height (the search is in metres)",
    )
    min_walk_m: float = Field(
        10.0, gt=0, description="a revisit: the walk between the two moments is at least this long (metres)"
    )
    min_inliers: int = Field(
        50, ge=8, description="a revisit: one rotation of the rig explains at least this many matches"
    )


class PoseParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str = Field("da3", description="pose_estimator backend: da3 (production) | twoview (CPU)")
    views: list[str] = Field(
        default_factory=lambda: ["front", "right", "back", "left"],
        description="views estimated independently (fused into the source's motion; >= 2 to check agreement)",
    )
    chunk_frames: int = Field(64, ge=3, description="frames per backend call; chunks overlap by 2 frames")
    frame_max_width: int = Field(640, ge=64, description="frames are downscaled to at most this width")
    outlier_deg: float = Field(
        60.0, gt=0, description="a view's step direction this far from the others' mean is left out of the fusion"
    )
    twoview_features: str = Field("sift", description="twoview backend: sift | orb")
    camera_height: float | None = Field(
        1.6,
        description="the camera's height above the ground (metres). twoview and da3 scale their poses so "
        "that the ground they see lies this far below the camera (the poses' unit is then metres), and "
        "reconcile and VPO locate objects where they meet the ground; null: not known (da3's unit is then "
        "that of its first window)",
    )
    loops: LoopParams = Field(default_factory=LoopParams, description="loop closure of the fused track")

    def estimator_options(self, hfov_deg: float) -> PoseStageOptions:
        """What the pose stage passes to its pose estimator for a view of ``hfov_deg``."""
        return PoseStageOptions(hfov_deg=hfov_deg, features=self.twoview_features, camera_height=self.camera_height)

    def ground_height(self) -> float | None:
        """The camera's height in the poses' own unit, when known: the backends in
        ``METRIC_BACKENDS`` scale their poses to metres by it."""
        return self.camera_height if self.backend in METRIC_BACKENDS else None


# Pose backends whose unit is set by ``PoseParams.camera_height``.
METRIC_BACKENDS = ("twoview", "da3")


def yaw_matrix(yaw_deg: float) -> np.ndarray:
    """M_v: view-camera coordinates -> source-camera coordinates (OpenCV axes), for a view turned
    right by ``yaw_deg``. Its columns are the view's x, y, z axes in the source camera."""
    a = math.radians(yaw_deg)
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


@dataclass
class Track:
    """Poses of one camera at consecutive 2 FPS samples: arrays for the motion, and lookups by
    sample index (``row``, ``ray``, ``ground_point``) for locating objects seen in those samples."""

    sample_indices: np.ndarray  # (n,)
    times: np.ndarray
    frames: np.ndarray
    fps: float
    R: np.ndarray  # (n, 3, 3) world -> camera
    C: np.ndarray  # (n, 3) centre in world
    K: np.ndarray  # (n, 3, 3)
    valid: np.ndarray  # (n,) bool
    metric: np.ndarray | None = None  # (n,) bool: step i-1 -> i has a trusted length (see fuse_views)
    # per row: the matched bearings (b1, b2, camera axes) of step i-1 -> i where the backend gave
    # them (twoview), else None; held in memory for fuse_views, never written
    bearings: list | None = field(default=None, repr=False, compare=False)
    # valid[i] says whether step i-1 -> i was measured, whatever came before: backends that chain
    # pairwise steps (twoview: a step it missed leaves the pose before as it was, the next step is
    # measured again). False: a step is as valid as both of its poses
    chained: bool = False

    def moved(self, R: np.ndarray, C: np.ndarray, K: np.ndarray | None = None) -> Track:
        """The same samples with other poses (and intrinsics, when given); what the backend said of
        its steps (``metric``, ``bearings``) is not carried over."""
        return Track(
            self.sample_indices.copy(),
            self.times.copy(),
            self.frames.copy(),
            self.fps,
            R,
            C,
            self.K.copy() if K is None else K,
            self.valid.copy(),
            chained=self.chained,
        )

    @property
    def extrinsics(self) -> np.ndarray:
        t = -np.einsum("nij,nj->ni", self.R, self.C)
        return np.concatenate([self.R, t[:, :, None]], axis=2)

    def steps(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per step k -> k+1: rotation cam_k -> cam_{k+1}, displacement in cam_k axes, validity."""
        dR = np.einsum("nij,nkj->nik", self.R[1:], self.R[:-1])
        d = np.einsum("nij,nj->ni", self.R[:-1], self.C[1:] - self.C[:-1])
        return dR, d, self.step_ok()

    def step_ok(self) -> np.ndarray:
        """Per step k -> k+1: whether it was estimated."""
        return self.valid[1:].copy() if self.chained else self.valid[1:] & self.valid[:-1]

    @cached_property
    def sample_rows(self) -> dict[int, int]:
        """Sample index -> the array row of its pose, valid or not (read only: it is shared)."""
        return {int(k): i for i, k in enumerate(self.sample_indices)}

    @cached_property
    def _valid_rows(self) -> dict[int, int]:
        return {int(k): i for i, k in enumerate(self.sample_indices) if self.valid[i]}

    def row(self, k: int) -> int | None:
        """The array row of sample k's pose; None when sample k has no valid pose."""
        return self._valid_rows.get(k)

    def valid_rows(self) -> list[int]:
        """Rows of the valid poses, in sample order."""
        return list(self._valid_rows.values())

    def ray(self, k: int, u: float, v: float) -> tuple[np.ndarray, np.ndarray] | None:
        """Centre and unit direction (world) of the ray through pixel (u, v) of sample k."""
        i = self.row(k)
        if i is None:
            return None
        try:
            d_cam = np.linalg.solve(self.K[i], np.array([u, v, 1.0]))
        except np.linalg.LinAlgError:
            raise ValueError(
                f"sample {k}: its pose is marked valid but its intrinsics are not a camera's "
                f"({self.K[i].ravel().tolist()}): poses.parquet's intrinsics column"
            ) from None
        d = self.R[i].T @ d_cam
        return self.C[i], d / np.linalg.norm(d)

    def down(self) -> np.ndarray:
        """The world's down direction: the cameras' mean down axis (cameras are level on average)."""
        d = np.mean([self._down_of_row(i) for i in self.valid_rows()], axis=0)
        return d / max(np.linalg.norm(d), 1e-12)

    def down_at(self, k: int) -> np.ndarray:
        """Camera k's own down axis in the world (the world's down where the view is level)."""
        i = self.row(k)
        if i is None:  # (indexing R with None raised a ValueError here before)
            raise ValueError(f"sample {k} has no valid pose")
        return self._down_of_row(i)

    def _down_of_row(self, i: int) -> np.ndarray:
        return self.R[i].T @ np.array([0.0, 1.0, 0.0])

    def ground_point(
        self, k: int, u: float, v: float, height: float, down: np.ndarray | None = None, min_depression_deg: float = 1.0
    ) -> np.ndarray | None:
        """Where the ray through pixel (u, v) meets the ground, ``height`` below camera k; None
        when the ray does not point below the horizon by at least ``min_depression_deg``.
        ``down``: the world's down direction; None: camera k's own down axis (a level view)."""
        r = self.ray(k, u, v)
        if r is None:
            return None
        c, d = r
        s = float(d @ (self.down_at(k) if down is None else down))
        if s < math.sin(math.radians(min_depression_deg)):
            return None
        return c + d * (height / s)


def track_from_result(batch_meta: tuple, res: PoseResult) -> Track:
    sample_indices, times, frames, fps = batch_meta
    E = np.asarray(res.extrinsics, dtype=np.float64)
    R = E[:, :, :3]
    C = -np.einsum("nji,nj->ni", R, E[:, :, 3])
    return Track(
        np.asarray(sample_indices),
        np.asarray(times, dtype=float),
        np.asarray(frames),
        float(fps),
        R,
        C,
        np.asarray(res.intrinsics, dtype=np.float64),
        np.asarray(res.valid, dtype=bool),
    )


def _project_so3(M: np.ndarray) -> np.ndarray:
    U, _, Vt = np.linalg.svd(M)
    D = np.diag([1.0, 1.0, np.sign(np.linalg.det(U @ Vt))])
    return U @ D @ Vt


def rotation_median(Rs: Sequence[np.ndarray], iters: int = 20, eps_deg: float = 0.05) -> np.ndarray:
    """The chordal L1 median of rotations (Weiszfeld: the chordal mean reweighted by 1 / distance).
    Unlike the mean, one view's failed estimate does not pull the result: on the sample, single
    views' step rotations were off by 3-6° now and then, and the mean let that add up to 11-19° of
    heading drift over two minutes (the median: 5-8°)."""
    R = _project_so3(sum(Rs, np.zeros((3, 3))))
    if len(Rs) < 3:
        return R
    eps = math.radians(eps_deg)
    for _ in range(iters):
        d = [math.acos(max(-1.0, min(1.0, (float(np.trace(R.T @ Q)) - 1.0) / 2.0))) for Q in Rs]
        R2 = _project_so3(sum((Q / max(x, eps) for Q, x in zip(Rs, d, strict=True)), np.zeros((3, 3))))
        if np.allclose(R2, R, atol=1e-12):
            break
        R = R2
    return R


# ------------------------------------------------------------------------------ chunking
FrameItem = tuple[int, float, int, np.ndarray]  # (k, t_k, frame index, rgb)


def frame_chunks(frames: Iterable[FrameItem], chunk: int) -> Iterator[list[FrameItem]]:
    """The chunks ``estimate_chunked`` runs the estimator on: ``chunk`` frames each, consecutive
    chunks sharing two frames, the last one shorter (and none of only the two shared frames)."""
    assert chunk >= 3
    buf: list[FrameItem] = []
    ran = False
    for item in frames:
        buf.append(item)
        if len(buf) == chunk:
            yield buf
            ran = True
            buf = buf[-2:]
    if len(buf) > 2 or (not ran and buf):
        yield buf


def chunk_batch(items: Sequence[FrameItem], video_id: str, fps: float) -> FrameBatch:
    return FrameBatch(
        video_id, [x[3] for x in items], [x[1] for x in items], [x[2] for x in items], [x[0] for x in items], fps
    )


class ChunkStitcher:
    """One video's chunk results stitched into one track (rigid alignment on the last shared
    frame; scale from the shared step, unless the backend measured the chunk's lengths in its
    common unit: ``metric``). ``add`` each chunk's result in order, then ``track``."""

    def __init__(self, fps: float, chained: bool = False):
        self.fps = fps
        self.chained = chained
        self.ks: list[int] = []
        self.ts: list[float] = []
        self.fs: list[int] = []
        self.Rs: list[np.ndarray] = []
        self.Cs: list[np.ndarray] = []
        self.Ks: list[np.ndarray] = []
        self.valid: list[bool] = []
        self.metric: list[bool] = []
        self.bearings: list = []
        self.has_metric = self.has_bearings = False
        self.first = True
        self.scale: float | np.floating = 1.0

    def add(
        self,
        items: Sequence[FrameItem],
        result: PoseResult,
        metric: Sequence[bool] | np.ndarray | None = None,
        bearings: Sequence | None = None,
    ) -> None:
        """``result``: the estimator's poses of ``items``; ``metric`` and ``bearings``: what it said
        of them (``last_metric``, ``last_bearings``; else ``result.metric``), used where they cover
        every item."""
        fps = self.fps
        if metric is None:
            metric = result.metric
        tr = track_from_result(([x[0] for x in items], [x[1] for x in items], [x[2] for x in items], fps), result)
        # Backends that know which step lengths are metric say so (twoview: ground-plane scale).
        m = np.asarray(metric, dtype=bool) if metric is not None and len(metric) == len(items) else None
        self.has_metric = self.has_metric or m is not None
        pairs = bearings if bearings is not None and len(bearings) == len(items) else None
        self.has_bearings = self.has_bearings or pairs is not None
        s: float | np.floating
        if self.first:
            start = 0
            R_al, C_al, s = np.eye(3), np.zeros(3), 1.0
        else:
            # Previous track's poses of the two shared frames: P_a, P_b (world), chunk's: Q_a, Q_b.
            Ca, Rb, Cb = self.Cs[-2], self.Rs[-1], self.Cs[-1]
            qa, qb = tr.C[0], tr.C[1]
            prev_step = np.linalg.norm(Cb - Ca)
            new_step = np.linalg.norm(qb - qa)
            if m is not None and m.any():
                # The backend measured this chunk's lengths (twoview: against the ground plane): it
                # is in the common unit already. Rescaling it by its shared step would multiply all
                # of its measured lengths by that one step's error (seen: x0.35 over 32 s).
                self.scale = 1.0
            elif prev_step > 1e-9 and new_step > 1e-9:
                self.scale = prev_step / new_step
            s = self.scale
            # X_world = A (X_chunk * s) + b, anchored at the last shared frame (A = Rb^T tr.R[1]), so
            # that the chunk's next steps continue from where the previous chunk ended
            A = Rb.T @ tr.R[1]
            b = Cb - A @ (s * tr.C[1])
            R_al, C_al = A, b
            start = 2
        for i in range(start, len(items)):
            self.ks.append(items[i][0])
            self.ts.append(items[i][1])
            self.fs.append(items[i][2])
            self.Rs.append(tr.R[i] @ R_al.T)
            self.Cs.append(R_al @ (s * tr.C[i]) + C_al)
            self.Ks.append(tr.K[i])
            self.valid.append(bool(tr.valid[i]))
            self.metric.append(bool(m[i]) if m is not None else False)
            self.bearings.append(pairs[i] if pairs is not None else None)
        self.first = False

    def track(self) -> Track:
        n = len(self.ks)
        return Track(
            np.asarray(self.ks, dtype=np.int64),
            np.asarray(self.ts, dtype=float),
            np.asarray(self.fs, dtype=np.int64),
            float(self.fps),
            np.asarray(self.Rs).reshape(n, 3, 3),
            np.asarray(self.Cs).reshape(n, 3),
            np.asarray(self.Ks).reshape(n, 3, 3),
            np.asarray(self.valid, dtype=bool),
            np.asarray(self.metric, dtype=bool) if self.has_metric else None,
            self.bearings if self.has_bearings else None,
            chained=self.chained,
        )


def estimate_chunked(
    estimator: PoseEstimator,
    frames: Iterable[FrameItem],
    video_id: str,
    fps: float,
    chunk: int,
) -> Track:
    """Run ``estimator`` over a stream of (k, t_k, frame_index, rgb) in chunks of ``chunk`` frames
    overlapping by two (``frame_chunks``), and stitch the chunks into one track
    (``ChunkStitcher``). Holds at most one chunk of images."""
    stitcher = ChunkStitcher(fps, bool(getattr(estimator, "chains_steps", False)))
    for items in frame_chunks(frames, chunk):
        result = estimator.estimate(chunk_batch(items, video_id, fps))
        stitcher.add(items, result, getattr(estimator, "last_metric", None), getattr(estimator, "last_bearings", None))
    return stitcher.track()


class BatchPoseEstimator(PoseEstimator, Protocol):
    """An estimator that runs several videos' frames in one call (DA3: their windows as one batch),
    each result what ``estimate`` gives that video alone."""

    def estimate_many(self, batches: Sequence[FrameBatch]) -> list[PoseResult]: ...


def batches_views(estimators: Sequence[PoseEstimator]) -> BatchPoseEstimator | None:
    """The estimator that can run all of these views' chunks in one call: they are one backend
    with one configuration (its ``params``) and it has ``estimate_many``; else None. Backends that
    report per-chunk state beside their poses (twoview's ``last_metric``, ``last_bearings``) run
    one view at a time."""
    first = estimators[0] if estimators else None
    if first is None or not callable(getattr(first, "estimate_many", None)):
        return None
    if any(hasattr(first, a) for a in ("last_metric", "last_bearings")):
        return None
    same = all(
        type(e) is type(first) and getattr(e, "params", None) == getattr(first, "params", None) for e in estimators
    )
    return cast("BatchPoseEstimator", first) if same else None


def estimate_chunked_together(
    estimator: BatchPoseEstimator,
    streams: dict[str, tuple[Iterable[FrameItem], str, float]],
    chunk: int,
    done: Callable[[str], None] | None = None,
) -> dict[str, Track]:
    """``estimate_chunked`` of several videos (a source's views) in lockstep: the i-th chunk of
    every video goes to the estimator in one ``estimate_many`` call. ``streams``: name ->
    (frames, video id, fps). Each video's chunks and stitching are the ones it gets alone; holds
    one chunk per video. ``done(name)`` when a video's frames have all been estimated."""
    chunks = {v: frame_chunks(frames, chunk) for v, (frames, _vid, _fps) in streams.items()}
    stitchers = {
        v: ChunkStitcher(fps, bool(getattr(estimator, "chains_steps", False))) for v, (_f, _vid, fps) in streams.items()
    }
    live = list(streams)
    while live:
        got = {v: next(chunks[v], None) for v in live}
        for v in [v for v in live if got[v] is None]:
            live.remove(v)
            if done:
                done(v)
        now = [v for v in live if got[v] is not None]
        if not now:
            break
        results = estimator.estimate_many([chunk_batch(got[v], streams[v][1], streams[v][2]) for v in now])  # type: ignore[arg-type]
        for v, res in zip(now, results, strict=True):
            stitchers[v].add(got[v], res)  # type: ignore[arg-type]
    return {v: s.track() for v, s in stitchers.items()}


# ------------------------------------------------------------------------------ fusion
def _depths(b1: np.ndarray, b2: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per match, the depths along both rays, ``lambda1 b1 - lambda2 b2 = c`` in least squares
    (``b2`` already turned into the first camera's axes, ``dR^T b2``), and whether the rays are far
    enough from parallel for them to mean anything (0 where not)."""
    a12 = -(b1 * b2).sum(axis=1)
    r1, r2 = b1 @ c, -(b2 @ c)
    det = 1.0 - a12 * a12
    ok = np.abs(det) > 1e-9
    safe = np.where(ok, det, 1.0)
    return (np.where(ok, (r1 - a12 * r2) / safe, 0.0), np.where(ok, (r2 - a12 * r1) / safe, 0.0), ok)


def _epipolar_normals(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]], dR: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    b1 = np.concatenate([p[0] for p in pairs])
    b2 = np.concatenate([p[1] for p in pairs]) @ dR  # dR^T b2, rows
    return b1, b2, np.cross(b1, b2)


def rig_motion(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]], dR0: np.ndarray, tol: float, max_change_deg: float = 3.0
) -> tuple[np.ndarray, np.ndarray] | None:
    """One step's rotation and translation direction from all of a rig's matches (bearings in the
    rig's axes): the translation by ``rig_translation`` given the rotation, the rotation refined
    from ``dR0`` (the views' median) by minimising the smallest eigenvalue of the epipolar normals'
    scatter (``sum n n^T``, ``n = b1 x dR^T b2``: zero when one translation lies in every epipolar
    plane). A single 90° view confuses a small turn with a sideways step, which the views' median
    inherits as a steady heading drift on straight walks; all around, the two differ. The refined
    rotation is kept when it moves less than ``max_change_deg`` and leaves as many matches within
    ``tol``. None when too few matches agree."""
    from scipy.optimize import minimize
    from scipy.spatial.transform import Rotation

    got = rig_translation(pairs, dR0, tol, with_inliers=True)
    if got is None:
        return None
    c0, inl = got
    b1 = np.concatenate([p[0] for p in pairs])[inl]
    b2 = np.concatenate([p[1] for p in pairs])[inl]

    def cost(w: np.ndarray) -> float:
        N = np.cross(b1, b2 @ (Rotation.from_rotvec(w).as_matrix() @ dR0))
        return float(np.linalg.eigvalsh(N.T @ N)[0]) / len(N)

    res = minimize(
        cost,
        np.zeros(3),
        method="Nelder-Mead",
        options={"xatol": 1e-6, "fatol": 1e-14, "initial_simplex": np.r_[[np.zeros(3)], 1e-3 * np.eye(3)]},
    )
    w = res.x
    dR = Rotation.from_rotvec(w).as_matrix() @ dR0
    if np.degrees(np.linalg.norm(w)) > max_change_deg:
        return dR0, c0
    c1 = rig_translation(pairs, dR, tol, with_inliers=True)
    if c1 is None or c1[1].sum() < inl.sum():
        return dR0, c0
    return dR, c1[0]


def rig_ground_height(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]],
    dR: np.ndarray,
    c: np.ndarray,
    tol: float,
    min_depression_deg: float = 8.0,
    plane_tol: float = 0.05,
    min_spread: float = 0.1,
) -> float | None:
    """The rig's height above the ground in units of the step's baseline (``c`` unit length), from
    all of its views' matches at once: the points triangulated below the horizon (at least
    ``min_depression_deg``), the ground their densest level plane (the views are level: its normal
    is the rig's down axis), within ``plane_tol`` of its height. One view alone sees a facade's
    sills or a car's roof as often as the ground (twoview's per-view heights disagreed by x2-x4
    on the sample's street); all around, the ground is what every view sees below. The plane's
    points must spread across the ground (both horizontal directions, ``min_spread``: the smaller
    spread over the larger), not lie along one line. None when the ground is not seen well enough."""
    b1, b2, N = _epipolar_normals(pairs, dR)
    on_plane = np.abs(N @ c) < tol
    b1, b2 = b1[on_plane], b2[on_plane]
    lam1, lam2, _ = _depths(b1, b2, c)
    parallax = 1.0 - (b1 * b2).sum(axis=1) ** 2 > 1e-6  # some parallax
    X = lam1[:, None] * b1
    below = parallax & (lam1 > 0) & (lam2 > 0) & (b1[:, 1] > math.sin(math.radians(min_depression_deg)))
    heights = X[below, 1]
    if len(heights) < 8:
        return None
    support = np.array([(np.abs(heights - h) < plane_tol * h).sum() for h in heights])
    best = int(np.argmax(support))
    if support[best] < max(8, 0.3 * len(heights)):
        return None
    inliers = np.abs(heights - heights[best]) < plane_tol * heights[best]
    ground = X[below][inliers][:, [0, 2]]
    spread = np.linalg.svd(ground - ground.mean(axis=0), compute_uv=False)
    if spread[1] < min_spread * spread[0]:
        return None
    return float(np.median(heights[inliers]))


@overload
def rig_translation(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]],
    dR: np.ndarray,
    tol: float,
    min_inliers: int = ...,
    seed: int = ...,
    *,
    with_inliers: Literal[True],
) -> tuple[np.ndarray, np.ndarray] | None: ...


@overload
def rig_translation(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]],
    dR: np.ndarray,
    tol: float,
    min_inliers: int = ...,
    seed: int = ...,
    with_inliers: Literal[False] = ...,
) -> np.ndarray | None: ...


def rig_translation(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]],
    dR: np.ndarray,
    tol: float,
    min_inliers: int = 12,
    seed: int = 0,
    with_inliers: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray] | None:
    """The direction of one step's translation from the matches of all of a rig's views at once.

    The views of a panorama share its centre, so their bearings (rotated into the rig's axes) are
    the rays of one camera seeing all around: with the step's rotation ``dR`` (``x_{k+1} = dR
    x_k``) known, the camera's displacement ``c`` lies in every match's epipolar plane,
    ``c . (b1 x dR^T b2) = 0``. Views facing the motion see the focus of expansion, views beside it
    see the parallax: together they fix the direction far better than one 90° view (whose
    estimates the per-view fusion could only average). RANSAC on pairs of planes, least squares
    over the inliers (``|c . n| < tol``, about a pixel's angle), sign from the matches' depths (in
    front of both cameras). None when too few matches agree; ``with_inliers``: (direction, the
    matches' inlier mask)."""
    if not pairs:
        return None
    b1, b2, N = _epipolar_normals(pairs, dR)
    mag = np.linalg.norm(N, axis=1)
    informative = mag > tol  # matches with parallax (the others lie in every plane)
    if informative.sum() < min_inliers:
        return None
    Ni, b1i, b2i = N[informative], b1[informative], b2[informative]
    rng = np.random.default_rng(seed)
    best, best_n = None, 0
    m = len(Ni)
    for _ in range(min(200, m * (m - 1) // 2)):
        i, j = rng.choice(m, 2, replace=False)
        c = np.cross(Ni[i], Ni[j])
        nc = np.linalg.norm(c)
        if nc < 1e-12:
            continue
        c /= nc
        n_in = int((np.abs(Ni @ c) < tol).sum())
        if n_in > best_n:
            best, best_n = c, n_in
    if best is None or best_n < min_inliers:
        return None
    inl = np.abs(Ni @ best) < tol
    _, _, Vt = np.linalg.svd(Ni[inl])
    c = Vt[2] if Vt[2] @ best >= 0 else -Vt[2]
    inl = np.abs(Ni @ c) < tol
    lam1, lam2, _ = _depths(b1i[inl], b2i[inl], c)
    front = int(((lam1 > 0) & (lam2 > 0)).sum())
    behind = int(((lam1 < 0) & (lam2 < 0)).sum())
    c = c if front >= behind else -c
    if not with_inliers:
        return c
    mask = np.zeros(len(N), dtype=bool)
    mask[np.nonzero(informative)[0][inl]] = True
    return c, mask


def fuse_views(
    tracks: dict[str, Track],
    yaws: dict[str, float],
    outlier_deg: float = 60.0,
    turns: dict[int, np.ndarray] | None = None,
    bearing_tol: float = 0.01,
    camera_height: float | None = None,
    length_window: int = 10,
) -> Track:
    """The source camera's track (axes of a yaw-0 view) from independent tracks of its views.

    ``turns``: rotations (rig axes, ``x_{k+1} = R x_k``) of steps k -> k+1 that fewer than two
    views could estimate (a turn too fast for a view to overlap itself), recovered by matching
    across views (``stages.backends.twoview.rig_rotation``).

    Where the views' matches are known (``Track.bearings``), a moving step's rotation and direction
    are solved from all of them at once (``rig_motion``, tolerance ``bearing_tol`` radians) rather
    than averaged over the views' own estimates, and with ``camera_height`` its length is measured
    against the ground all views see (``rig_ground_height``); unmeasured steps take the scale of
    the measured ones within ``length_window`` steps (``step_lengths``)."""
    turns = turns or {}
    if not tracks:
        raise ValueError("no view tracks to fuse")
    names = sorted(tracks)
    ref = tracks[names[0]]
    n = len(ref.sample_indices)
    for v in names:
        if not np.array_equal(tracks[v].sample_indices, ref.sample_indices):
            raise ValueError(f"view {v}: its samples differ from view {names[0]}'s")
    steps = {}
    typicals = []
    for v in names:
        M = yaw_matrix(yaws[v])
        dR, d, ok = tracks[v].steps()
        dR_s = np.einsum("ij,njk,lk->nil", M, dR, M)
        d_s = d @ M.T
        mag = np.linalg.norm(d, axis=1)
        moving = ok & (mag > 1e-9)
        typical = float(np.median(mag[moving])) if moving.any() else 1.0
        if moving.any():
            typicals.append(typical)
        steps[v] = (dR_s, d_s, ok, mag / typical)
    # Each view's steps are normalised by its median step (monocular backends may give each view
    # its own scale), then the fused steps are put back in the views' common unit when they share
    # one (twoview's ground-plane scale: metres).
    unit = float(np.median(typicals)) if typicals else 1.0
    R = np.zeros((n, 3, 3))
    C = np.zeros((n, 3))
    valid = np.zeros(n, dtype=bool)
    R[0] = np.eye(3)
    valid[0] = any(tracks[v].valid[0] for v in names)
    cos_out = math.cos(math.radians(outlier_deg))
    rig_lengths: dict[int, float] = {}
    # per step: the displacement's direction (world), its parallax-based length (the views' common
    # unit) and its measured length (metres, against the ground) where one was measured
    direction = np.zeros((n, 3))
    parallax_length = np.zeros(n)
    by_view: dict[int, float] = {}  # the views' own ground-measured lengths (median)
    for k in range(n - 1):
        oks = [v for v in names if steps[v][2][k]]
        if k in turns and len(oks) < 2:  # a fast turn: the rig's rotation, no translation
            R[k + 1] = turns[k] @ R[k]
            valid[k + 1] = True
            continue
        if not oks:
            R[k + 1] = R[k]
            continue
        valid[k + 1] = True
        dR = rotation_median([steps[v][0][k] for v in oks])
        mags = np.array([steps[v][3][k] for v in oks])
        movers = [v for v in oks if steps[v][3][k] > 1e-9]
        d = np.zeros(3)
        if movers and np.median(mags) > 1e-9:
            units = np.array([steps[v][1][k] / np.linalg.norm(steps[v][1][k]) for v in movers])
            mean = units.sum(axis=0)
            if len(units) >= 3 and np.linalg.norm(mean) > 1e-9:
                keep = units @ (mean / np.linalg.norm(mean)) >= cos_out
                if keep.sum() >= 2:
                    mean = units[keep].sum(axis=0)
            if np.linalg.norm(mean) > 1e-9:
                d = mean / np.linalg.norm(mean) * float(np.median(mags)) * unit
            pairs = []
            for v in oks:
                bv = tracks[v].bearings
                b = bv[k + 1] if bv is not None else None
                if b is not None:
                    M = yaw_matrix(yaws[v])
                    pairs.append((b[0] @ M.T, b[1] @ M.T))
            joint = rig_motion(pairs, dR, bearing_tol) if len(pairs) >= 2 else None
            if joint is not None and np.linalg.norm(d) > 1e-12:
                dR, d = joint[0], joint[1] * np.linalg.norm(d)
                h = rig_ground_height(pairs, dR, joint[1], bearing_tol) if camera_height else None
                if h is not None and camera_height is not None:  # h is None without camera_height
                    rig_lengths[k] = camera_height / h
        # Step lengths the views measured against the ground (metric), where the rig did not.
        trusted = [
            float(np.linalg.norm(steps[v][1][k])) for v in oks if (mv := tracks[v].metric) is not None and mv[k + 1]
        ]
        # a view that saw no parallax (its "standing still" is exact) where the others saw the rig
        # move: it looked at far things only, its zero measures nothing. Its zero comes back from
        # the chained poses as rounding (1e-15 to 1e-13: 2-3 steps of every sample and bench seed),
        # which a test against 0 kept as a measured length of nothing.
        trusted = [x for x in trusted if x > 1e-9] if np.linalg.norm(d) > 1e-12 else trusted
        length = float(np.linalg.norm(d))
        if length > 1e-12:
            direction[k] = R[k].T @ (d / length)
            parallax_length[k] = length
            if trusted:
                by_view[k] = float(np.median(trusted))
        R[k + 1] = dR @ R[k]
    lengths = step_lengths(parallax_length, rig_lengths, by_view, length_window)
    C[1:] = np.cumsum(direction[:-1] * lengths[:-1, None], axis=0)
    return Track(ref.sample_indices.copy(), ref.times.copy(), ref.frames.copy(), ref.fps, R, C, ref.K.copy(), valid)


def step_lengths(
    parallax: np.ndarray, by_rig: dict[int, float], by_view: dict[int, float], window: int, max_ratio: float = 4.0
) -> np.ndarray:
    """The length of every moving step (``parallax`` > 0): measured against the ground by the
    whole rig (``rig_ground_height``), else by the views themselves (their median); the others
    their parallax-based length (baseline over the scene's typical depth) times the median ratio
    of measured to parallax-based lengths of the measured steps within ``window`` steps. The
    typical depth changes with the scene (a street's facades, a plaza's far side): one ratio per
    chunk of a view made a narrow street's steps twice as long as they were. Without a measured
    step near, the parallax-based length as it is (the views' common unit).

    A measured step whose ratio is more than ``max_ratio`` times off the median ratio of the
    other measured steps within the window (two at least: of two alone, neither can say which
    is off) is a mismeasure and is treated as unmeasured: the scene's depth does not change that
    much in a few steps, a wrong ground match does (one view measured 36 m for a 0.5 m step, the
    bench's seed 18, and the track jumped by as much)."""
    measured = {k: x for k, x in {**by_view, **by_rig}.items() if parallax[k] > 1e-12}
    ratio = {k: x / parallax[k] for k, x in measured.items()}
    ks = np.array(sorted(measured), dtype=int)
    mismeasured = set()
    for k in ks:
        others = [ratio[int(j)] for j in ks[np.abs(ks - k) <= window] if j != k]
        if len(others) >= 2 and not (1.0 / max_ratio <= ratio[int(k)] / float(np.median(others)) <= max_ratio):
            mismeasured.add(int(k))
    ks = np.array([k for k in ks if k not in mismeasured], dtype=int)
    out = parallax.copy()
    for k in np.nonzero(parallax > 1e-12)[0]:
        if k in measured and k not in mismeasured:
            out[k] = measured[k]
            continue
        near = ks[np.abs(ks - k) <= window]
        if len(near):
            out[k] = parallax[k] * float(np.median([ratio[int(j)] for j in near]))
    return out


def weak_steps(tracks: dict[str, Track]) -> list[int]:
    """Steps k -> k+1 that fewer than two views estimated."""
    n = min(len(t.sample_indices) for t in tracks.values())
    counts = np.zeros(max(n - 1, 0), dtype=int)
    for t in tracks.values():
        counts += t.step_ok()[: n - 1]
    return [int(k) for k in np.nonzero(counts < 2)[0]]


def recover_turns(
    weak: list[int], frames: dict[str, dict[int, np.ndarray]], yaws: dict[str, float], hfov_deg: float
) -> dict[int, np.ndarray]:
    """Rotations of the weak steps (``weak_steps``; array positions = 2 FPS sample offsets) from
    the frames around them, matched across views (``twoview.rig_rotation``)."""
    from vsi_wild.stages.backends.twoview import TwoViewPoseEstimator, rig_rotation

    est = TwoViewPoseEstimator(hfov_deg=hfov_deg)
    out = {}
    for k in weak:
        before = {v: f[k] for v, f in frames.items() if k in f}
        after = {v: f[k + 1] for v, f in frames.items() if k + 1 in f}
        if before and after:
            r = rig_rotation(est, before, after, yaws)
            if r is not None:
                out[k] = r[0]
    return out


@dataclass
class ViewInput:
    """One view of a source for ``estimate_views`` and ``fuse_source``: ``frames()`` opens a fresh
    stream of (k, t_k, frame index, rgb) at 2 FPS (the estimate reads it once; the turn recovery
    and the loop closure maybe again)."""

    video_id: str
    yaw_deg: float
    hfov_deg: float
    fps: float
    width: int  # the view's own width (intrinsics are returned in its pixels)
    frames: Callable[[], Iterable[tuple[int, float, int, np.ndarray]]]


@dataclass
class ViewEstimate:
    """One view's own estimate (the GPU half of the pose stage): its stitched track, intrinsics in
    the view's own pixels, and the width of the frames the estimator saw (``frame_max_width``)."""

    track: Track
    frame_width: int


def estimate_views(
    views: dict[str, ViewInput],
    make_estimator: Callable[[ViewInput], PoseEstimator],
    params: PoseParams,
    progress: Callable[[int, int], None] | None = None,
    batch_views: bool = True,
) -> dict[str, ViewEstimate]:
    """Each view of a source estimated alone (``estimate_chunked``): the view_pose stage's work.

    Where the views' estimators can run together (``batches_views``: DA3) and ``batch_views``,
    the views' chunks go through it in lockstep, the i-th chunk of every view in one call
    (``estimate_chunked_together``; DA3 batches their windows); each view's track is the one it
    gets alone, within the backend's batching tolerance (DA3: 1e-4, tests/test_backends_pose.py).
    Else (twoview) one view after the other."""
    first_ws: dict[str, list[int]] = {}
    streams: dict[str, Iterator[FrameItem]] = {}
    for v, vi in views.items():
        first_w: list[int] = []

        def stream(vi: ViewInput = vi, first_w: list[int] = first_w) -> Iterator[FrameItem]:
            for item in vi.frames():
                if not first_w:
                    first_w.append(item[3].shape[1])
                yield item

        first_ws[v] = first_w
        streams[v] = stream()
    estimators = {v: make_estimator(vi) for v, vi in views.items()}
    together = batches_views(list(estimators.values())) if batch_views and len(views) > 1 else None
    finished: list[str] = []

    def view_done(v: str) -> None:
        finished.append(v)
        if progress:
            progress(len(finished), len(views))

    if together is not None:
        found = estimate_chunked_together(
            together,
            {v: (streams[v], vi.video_id, vi.fps) for v, vi in views.items()},
            params.chunk_frames,
            view_done,
        )
    else:
        found = {}
        for v, vi in views.items():
            found[v] = estimate_chunked(estimators[v], streams[v], vi.video_id, vi.fps, params.chunk_frames)
            view_done(v)
    out = {}
    for v, vi in views.items():
        tr, first_w = found[v], first_ws[v]
        if len(tr.sample_indices) and first_w and first_w[0] != vi.width:
            s = vi.width / first_w[0]  # intrinsics back to the view's own pixels
            tr.K = np.einsum("ij,njk->nik", np.diag([s, s, 1.0]), tr.K)
        out[v] = ViewEstimate(tr, first_w[0] if first_w else vi.width)
    return out


def fuse_source(
    views: dict[str, ViewInput],
    estimates: dict[str, ViewEstimate],
    params: PoseParams,
    on_loops: Callable[[LoopReport], None] | None = None,
) -> Track:
    """The source's track from its views' own estimates (the CPU half of the pose stage): steps
    that fewer than two views managed recovered across the rig (``recover_turns``, reading the
    frames around them), the views fused (``fuse_views``), the fused track's loops closed
    (``stages.loops.close_loops``; ``on_loops`` gets what it did)."""
    tracks = {v: e.track for v, e in estimates.items()}
    yaws = {v: vi.yaw_deg for v, vi in views.items()}
    turns: dict[int, np.ndarray] = {}
    weak = weak_steps(tracks) if len(tracks) > 1 else []
    if weak:
        first = int(next(iter(tracks.values())).sample_indices[0])
        need = {first + k for k in weak} | {first + k + 1 for k in weak}
        frames = {v: {k - first: rgb for k, _t, _i, rgb in vi.frames() if k in need} for v, vi in views.items()}
        turns = recover_turns(weak, frames, yaws, next(iter(views.values())).hfov_deg)
    # a match agrees with a step's translation within about two pixels of the frames matched
    focal = min(
        (float(e.track.K[0][0, 0]) * e.frame_width / views[v].width for v, e in estimates.items() if len(e.track.K)),
        default=0.0,
    )
    tol = 2.0 / focal if focal > 0 else 0.01
    fused = fuse_views(tracks, yaws, params.outlier_deg, turns, tol, params.ground_height())
    fused, report = close_source_loops(fused, views, params, tol)
    if on_loops:
        on_loops(report)
    return fused


def estimate_source(
    views: dict[str, ViewInput],
    make_estimator: Callable[[ViewInput], PoseEstimator],
    params: PoseParams,
    progress: Callable[[int, int], None] | None = None,
    batch_views: bool = True,
    on_loops: Callable[[LoopReport], None] | None = None,
) -> tuple[Track, dict[str, Track]]:
    """Both halves of the pose work for one source in one pass (``estimate_views``, then
    ``fuse_source``), as the view_pose and pose stages do it through the store. Returns the fused
    (source) track and the views' own tracks."""
    estimates = estimate_views(views, make_estimator, params, progress, batch_views)
    fused = fuse_source(views, estimates, params, on_loops)
    return fused, {v: e.track for v, e in estimates.items()}


def close_source_loops(
    fused: Track, views: dict[str, ViewInput], params: PoseParams, tol: float
) -> tuple[Track, LoopReport]:
    """``stages.loops.close_loops`` of a source's fused track, the rig's features read in one more
    pass over the views' frames (only at the moments the search asks about)."""
    from vsi_wild.stages import loops
    from vsi_wild.stages.backends.twoview import TwoViewPoseEstimator, rig_features

    hfov = next(iter(views.values())).hfov_deg
    est = TwoViewPoseEstimator(hfov_deg=hfov, features=params.twoview_features)
    yaws = {v: vi.yaw_deg for v, vi in views.items()}

    def features_of(rows: list[int]) -> dict[int, RigFeatures]:
        row_of = {int(fused.sample_indices[r]): r for r in rows}
        feats: dict[int, RigFeatures] = {}
        for v, vi in views.items():
            for k, _t, _i, rgb in vi.frames():
                if k in row_of:  # features, not frames, are kept (rig_features: 256 KB a view)
                    feats.setdefault(row_of[k], {}).update(rig_features(est, {v: rgb}))
        # a moment some view has no frame of is left out (the views' streams end together)
        return {r: f for r, f in feats.items() if len(f) == len(views)}

    return loops.close_loops(fused, features_of, est, yaws, params.loops, tol, params.ground_height())


def derive_view(source: Track, yaw_deg: float, K: np.ndarray | None = None) -> Track:
    """The track of the view of yaw ``yaw_deg`` of a source camera: same centres, axes turned."""
    Mt = yaw_matrix(yaw_deg).T
    R = np.einsum("ij,njk->nik", Mt, source.R)
    return source.moved(R, source.C.copy(), None if K is None else np.broadcast_to(K, source.K.shape).copy())


def pose_rows(video_id: str, track: Track, backend: str) -> list[dict]:
    """schema.POSES rows."""
    E = track.extrinsics
    return [
        {
            "video_id": video_id,
            "sample_index": int(track.sample_indices[i]),
            "time": float(track.times[i]),
            "frame": int(track.frames[i]),
            "fps": float(track.fps),
            "extrinsics": E[i].ravel().tolist(),
            "intrinsics": track.K[i].ravel().tolist(),
            "x": float(track.C[i, 0]),
            "y": float(track.C[i, 1]),
            "z": float(track.C[i, 2]),
            "valid": bool(track.valid[i]),
            "backend": backend,
        }
        for i in range(len(track.sample_indices))
    ]


def track_from_rows(rows: Sequence[dict]) -> Track:
    """The track of schema.POSES rows (one video's), in sample order."""
    rows = sorted(rows, key=lambda r: r["sample_index"])
    n = len(rows)
    E = np.array([r["extrinsics"] for r in rows], dtype=np.float64).reshape(n, 3, 4)
    R = E[:, :, :3]
    C = -np.einsum("nji,nj->ni", R, E[:, :, 3])
    return Track(
        np.array([r["sample_index"] for r in rows], dtype=np.int64),
        np.array([r["time"] for r in rows]),
        np.array([r["frame"] for r in rows], dtype=np.int64),
        float(rows[0]["fps"]) if rows else 0.0,
        R,
        C,
        np.array([r["intrinsics"] for r in rows], dtype=np.float64).reshape(n, 3, 3),
        np.array([r["valid"] for r in rows], dtype=bool),
    )


def view_pose_rows(video_id: str, estimate: ViewEstimate, backend: str) -> list[dict]:
    """schema.VIEW_POSES rows of a view's own estimate: every value ``fuse_source`` reads of it
    but the matches (``view_match_rows``), exactly (``view_estimate_from_rows`` reads them back)."""
    tr = estimate.track
    rows = pose_rows(video_id, tr, backend)
    for i, r in enumerate(rows):
        r["metric"] = bool(tr.metric[i]) if tr.metric is not None else None
        r["chained"] = tr.chained
        r["frame_width"] = int(estimate.frame_width)
    return rows


def view_match_rows(video_id: str, track: Track) -> list[dict]:
    """schema.VIEW_MATCHES rows: per step the backend matched (twoview), its inlier bearings."""
    if track.bearings is None:
        return []
    return [
        {
            "video_id": video_id,
            "sample_index": int(track.sample_indices[i]),
            "n_matches": int(len(b[0])),
            "before": np.asarray(b[0], dtype=np.float32).ravel(),  # arrays, not lists: pyarrow reads them whole
            "after": np.asarray(b[1], dtype=np.float32).ravel(),
        }
        for i, b in enumerate(track.bearings)
        if b is not None
    ]


def view_match_rows_of(table: pa.Table) -> list[dict]:
    """schema.VIEW_MATCHES rows of a table, their bearings as float32 arrays: an hour of twoview's
    matches as Python floats (``to_pylist``) would take gigabytes."""
    rows = table.select(["video_id", "sample_index", "n_matches"]).to_pylist()
    for name in ("before", "after"):
        col = table.column(name).combine_chunks()
        values = pc.list_flatten(col).to_numpy(zero_copy_only=False)
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
        ends = np.cumsum(lengths)
        for r, lo, hi in zip(rows, ends - lengths, ends, strict=True):
            r[name] = values[lo:hi]
    return rows


def view_estimate_from_rows(
    rows: Sequence[dict], matches: Sequence[dict], fps: float, frame_width: int
) -> ViewEstimate:
    """The estimate ``view_pose_rows`` and ``view_match_rows`` wrote (one view's rows), equal to
    the one in memory: rotations from the extrinsics and centres from x, y, z, as computed (not
    re-derived from the translation). ``fps`` and ``frame_width``: the view's, for a view without
    rows."""
    rows = sorted(rows, key=lambda r: r["sample_index"])
    n = len(rows)
    E = np.array([r["extrinsics"] for r in rows], dtype=np.float64).reshape(n, 3, 4)
    metric = [r["metric"] for r in rows]
    track = Track(
        np.array([r["sample_index"] for r in rows], dtype=np.int64),
        np.array([r["time"] for r in rows], dtype=float),
        np.array([r["frame"] for r in rows], dtype=np.int64),
        float(rows[0]["fps"]) if rows else float(fps),
        np.ascontiguousarray(E[:, :, :3]),
        np.array([[r["x"], r["y"], r["z"]] for r in rows], dtype=np.float64).reshape(n, 3),
        np.array([r["intrinsics"] for r in rows], dtype=np.float64).reshape(n, 3, 3),
        np.array([r["valid"] for r in rows], dtype=bool),
        None if all(m is None for m in metric) else np.array([bool(m) for m in metric], dtype=bool),
        chained=bool(rows[0]["chained"]) if rows else False,
    )
    if matches:
        row_of = track.sample_rows
        bearings: list = [None] * n
        for m in matches:
            i = row_of.get(int(m["sample_index"]))
            if i is None:
                raise ValueError(
                    f"view_matches: sample {m['sample_index']} of {m['video_id']} has no pose row in view_poses"
                )
            b1, b2 = (np.asarray(m[k], dtype=np.float32) for k in ("before", "after"))
            if len(b1) != 3 * m["n_matches"] or len(b2) != 3 * m["n_matches"]:
                raise ValueError(
                    f"view_matches: sample {m['sample_index']} of {m['video_id']}: {m['n_matches']} matches "
                    f"but {len(b1)} and {len(b2)} bearing coordinates (3 per match)"
                )
            bearings[i] = (b1.reshape(-1, 3), b2.reshape(-1, 3))
        track.bearings = bearings
    return ViewEstimate(track, int(rows[0]["frame_width"]) if rows else int(frame_width))


# ------------------------------------------------------------------------------ motion
def motion_vectors(track: Track) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sample: direction of travel relative to the camera's heading (degrees, NaN when
    unknown), horizontal speed (units per second) and validity. Central differences over the
    neighbouring samples (forward/backward at the ends), in the camera axes of the sample itself."""
    n = len(track.sample_indices)
    angle = np.full(n, np.nan)
    speed = np.zeros(n)
    ok = np.zeros(n, dtype=bool)
    for i in range(n):
        if not track.valid[i]:
            continue
        a = i - 1 if i > 0 and track.valid[i - 1] else i
        b = i + 1 if i + 1 < n and track.valid[i + 1] else i
        if a == b:
            continue
        dt = track.times[b] - track.times[a]
        d = track.R[i] @ (track.C[b] - track.C[a])
        h = math.hypot(d[0], d[2])
        speed[i] = h / dt if dt > 0 else 0.0
        ok[i] = True
        if h > 1e-12:
            angle[i] = math.degrees(math.atan2(d[0], d[2]))
    return angle, speed, ok


def wrap(a: npt.ArrayLike) -> np.ndarray:
    return (np.asarray(a) + 180.0) % 360.0 - 180.0
