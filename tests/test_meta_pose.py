"""Poses: view geometry, chunk stitching, and the two-view backend on rendered frames."""

from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from cameras import OPENCV_AXES, level_extrinsics
from synthetic_world import Room, walk

from vsi_wild import schema
from vsi_wild.stages import geometry
from vsi_wild.stages import pose as po
from vsi_wild.stages.backends import (
    base,
    twoview,  # noqa: F401  (registers "twoview")
)
from vsi_wild.stages.backends.base import PoseResult

VIEWS = {"front": 0.0, "right": 90.0, "back": 180.0, "left": 270.0}


def truth_extrinsics(path, view_yaw: float, height: float = 1.6) -> np.ndarray:
    return np.array([level_extrinsics(x, y, height, yaw + view_yaw) for x, y, yaw in path])


def truth_angles(path, view_yaw: float, dt: float = 0.5):
    """Direction of travel relative to the view's heading (central differences), and moving flags."""
    xy = np.array([(p[0], p[1]) for p in path])
    n = len(xy)
    ang = np.full(n, np.nan)
    moving = np.zeros(n, bool)
    for i in range(n):
        a, b = max(i - 1, 0), min(i + 1, n - 1)
        v = xy[b] - xy[a]
        if np.hypot(*v) / ((b - a) * dt) > 0.2:
            moving[i] = True
            ang[i] = geometry.wrap_deg(math.degrees(math.atan2(v[0], v[1])) - path[i][2] - view_yaw)
    return ang, moving


def test_views_are_the_source_turned_by_their_yaw():
    path = [(0.0, 0.0, 30.0), (0.3, 0.4, 30.0), (0.7, 0.7, 35.0), (1.2, 0.9, 40.0)]
    E = truth_extrinsics(path, 0.0)
    src = po.Track(
        np.arange(4),
        np.arange(4) * 0.5,
        np.arange(4) * 4,
        8.0,
        E[:, :, :3],
        -np.einsum("nji,nj->ni", E[:, :, :3], E[:, :, 3]),
        np.repeat(np.eye(3)[None], 4, 0),
        np.ones(4, bool),
    )
    for view, yaw in VIEWS.items():
        derived = po.derive_view(src, yaw)
        want = truth_extrinsics(path, yaw)
        assert np.allclose(derived.extrinsics, want, atol=1e-9), view
        a, _, _ = po.motion_vectors(derived)
        ta, _ = truth_angles(path, yaw)
        assert np.allclose(po.wrap(a - ta), 0.0, atol=1e-6), view
    # the right view sees forward motion going to its left
    assert po.motion_vectors(po.derive_view(src, 90.0))[0][1] == pytest.approx(
        po.wrap(po.motion_vectors(src)[0][1] - 90.0)
    )


class ExactPoses:
    """A pose estimator for testing the stitching: exact poses, but each call in a world frame and
    scale of its own (as DA3 windows are)."""

    name = "exact"

    def __init__(self, path, seed=0):
        self.E = truth_extrinsics(path, 0.0)
        self.rng = np.random.default_rng(seed)

    def estimate(self, batch):
        ks = list(batch.sample_indices)
        a = self.rng.uniform(-3, 3)
        G = geometry.rotation_yaw_pitch(self.rng.uniform(0, 360), self.rng.uniform(-20, 20), self.rng.uniform(-20, 20))
        s = self.rng.uniform(0.2, 5.0)
        out = []
        for k in ks:
            R, t = self.E[k][:, :3], self.E[k][:, 3]
            C = -R.T @ t
            # world' = s * G (world) + a: camera centre C' = s G C + a, rotation R' = R G^T
            R2 = R @ G.T
            C2 = s * (G @ C) + a
            out.append(np.c_[R2, -R2 @ C2])
        n = len(ks)
        return PoseResult(np.array(out), np.repeat(np.eye(3)[None], n, 0), np.ones(n, bool))


def test_chunks_are_stitched_into_one_trajectory():
    path = walk(40)
    frames = [(k, k * 0.5, 4 * k, np.zeros((4, 4, 3), np.uint8)) for k in range(len(path))]
    tr = po.estimate_chunked(ExactPoses(path), iter(frames), "sample-x_front", 8.0, chunk=7)
    assert list(tr.sample_indices) == list(range(40))
    # equal to the truth up to one similarity: compare the motion directions and relative steps
    a, s, _ = po.motion_vectors(tr)
    ta, moving = truth_angles(path, 0.0)
    assert np.nanmax(np.abs(po.wrap(a[moving] - ta[moving]))) < 1e-6
    true_steps = np.linalg.norm(np.diff([(p[0], p[1]) for p in path], axis=0), axis=1)
    est_steps = np.linalg.norm(np.diff(tr.C, axis=0), axis=1)
    m = true_steps > 0.1
    ratio = est_steps[m] / true_steps[m]
    assert np.allclose(ratio, ratio[0], rtol=1e-6)


@pytest.fixture(scope="module")
def rendered():
    room = Room()
    path = walk(72)
    frames = {v: [room.render((x, y, 1.6), yaw, vy, 256, 144) for x, y, yaw in path] for v, vy in VIEWS.items()}
    return path, frames


@pytest.mark.slow
def test_twoview_motion_directions_and_scale(rendered):
    path, frames = rendered
    est = base.create("pose_estimator", "twoview", hfov_deg=90.0, camera_height=1.6)
    tracks = {
        v: po.estimate_chunked(
            est, iter([(k, k * 0.5, 4 * k, f) for k, f in enumerate(frames[v])]), f"sample-x_{v}", 8.0, chunk=30
        )
        for v in VIEWS
    }
    fused = po.fuse_views(tracks, VIEWS)
    for v, yaw in VIEWS.items():
        ta, moving = truth_angles(path, yaw)
        own, _, _ = po.motion_vectors(tracks[v])
        der, _, _ = po.motion_vectors(po.derive_view(fused, yaw))
        assert np.nanmedian(np.abs(po.wrap(own[moving] - ta[moving]))) < 6.0, v
        assert np.nanmedian(np.abs(po.wrap(der[moving] - ta[moving]))) < 3.0, v
        # standing still (the pause) is standing still
        _, speed, _ = po.motion_vectors(po.derive_view(fused, yaw))
        assert np.all(speed[~moving][2:-2] < 0.05)
    # the ground plane makes steps metric (camera height 1.6 m)
    xy = np.array([(p[0], p[1]) for p in path])
    true_steps = np.linalg.norm(np.diff(xy, axis=0), axis=1)
    est_steps = np.linalg.norm(np.diff(fused.C, axis=0), axis=1)
    m = true_steps > 0.1
    assert np.median(est_steps[m] / true_steps[m]) == pytest.approx(1.0, abs=0.1)


def _read_back(estimates: dict[str, po.ViewEstimate], backend: str, tmp_path) -> dict[str, po.ViewEstimate]:
    """The estimates through the view_pose stage's files (parquet written and read) and back."""
    tables = {}
    for name, sch, make in (
        ("view_poses", schema.VIEW_POSES, lambda v, e: po.view_pose_rows(f"s_{v}", e, backend)),
        ("view_matches", schema.VIEW_MATCHES, lambda v, e: po.view_match_rows(f"s_{v}", e.track)),
    ):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(schema.table(sch, [r for v, e in estimates.items() for r in make(v, e)]), path)
        read = pq.read_table(path)
        tables[name] = po.view_match_rows_of(read) if name == "view_matches" else read.to_pylist()
    return {
        v: po.view_estimate_from_rows(
            [r for r in tables["view_poses"] if r["video_id"] == f"s_{v}"],
            [r for r in tables["view_matches"] if r["video_id"] == f"s_{v}"],
            8.0,
            1,
        )
        for v in estimates
    }


def _assert_same_estimate(a: po.ViewEstimate, b: po.ViewEstimate) -> None:
    assert a.frame_width == b.frame_width and a.track.chained == b.track.chained and a.track.fps == b.track.fps
    for name in ("sample_indices", "times", "frames", "R", "C", "K", "valid"):
        x, y = getattr(a.track, name), getattr(b.track, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert (a.track.metric is None) == (b.track.metric is None)
    if a.track.metric is not None:
        assert np.array_equal(a.track.metric, b.track.metric)
    if a.track.bearings is None or all(p is None for p in a.track.bearings):
        assert b.track.bearings is None
        return
    assert b.track.bearings is not None and len(a.track.bearings) == len(b.track.bearings)
    for p, q in zip(a.track.bearings, b.track.bearings, strict=True):
        assert (p is None) == (q is None)
        if p is not None:
            assert all(u.dtype == w.dtype and np.array_equal(u, w) for u, w in zip(p, q, strict=True))


@pytest.mark.slow
def test_the_views_estimates_read_back_exactly_and_fuse_to_the_same_track(rendered, tmp_path):
    """The pose stage fuses the estimates the view_pose stage wrote, not the ones in memory: what it
    reads back must be them to the bit (rotations, centres as computed, not re-derived from the
    translation; which steps were metric; twoview's matches), so the fused track is the one-pass
    track to the bit too. twoview's estimate has all of it, with a blank frame in one view (steps
    without matches); a DA3-like one (ExactPoses) has neither metric steps nor matches."""
    _, frames = rendered
    estimates = {}
    for v in VIEWS:
        est = base.create("pose_estimator", "twoview", hfov_deg=90.0, camera_height=1.6)
        items = [
            (k, k * 0.5, 4 * k, np.full_like(frames[v][k], 128) if v == "front" and k == 20 else frames[v][k])
            for k in range(40)
        ]
        estimates[v] = po.ViewEstimate(po.estimate_chunked(est, iter(items), f"s_{v}", 8.0, chunk=16), 256)
    front = estimates["front"].track
    assert front.metric is not None and front.bearings is not None and any(b is None for b in front.bearings[1:])
    back = _read_back(estimates, "twoview:independent", tmp_path)
    for v in VIEWS:
        _assert_same_estimate(estimates[v], back[v])

    def fused(es: dict[str, po.ViewEstimate]) -> po.Track:
        return po.fuse_views({v: e.track for v, e in es.items()}, VIEWS, camera_height=1.6)

    one_pass, read = fused(estimates), fused(back)
    assert np.array_equal(one_pass.R, read.R) and np.array_equal(one_pass.C, read.C)

    path = walk(20)
    items = [(k, k * 0.5, 4 * k, np.zeros((4, 4, 3), np.uint8)) for k in range(len(path))]
    exact = {"front": po.ViewEstimate(po.estimate_chunked(ExactPoses(path), iter(items), "s_front", 8.0, chunk=7), 4)}
    assert exact["front"].track.metric is None and exact["front"].track.bearings is None
    _assert_same_estimate(exact["front"], _read_back(exact, "da3:independent", tmp_path)["front"])


@pytest.mark.slow
def test_a_step_twoview_missed_does_not_lose_the_next_one(rendered):
    """twoview chains pairwise steps: a frame it cannot match (blank: no features) loses the steps
    into and out of it, and only those; the step after is measured from its own two frames, as it
    is without the blank frame. With the blank frame in three views of four, those two steps are
    the rig's weak ones (fewer than two views), not the step after them too."""
    _, frames = rendered
    span, blank = range(8, 34), 20

    def track(view, blanked):
        est = base.create("pose_estimator", "twoview", hfov_deg=90.0, camera_height=1.6)
        items = [
            (k, k * 0.5, 4 * k, np.full_like(frames[view][k], 128) if blanked and k == blank else frames[view][k])
            for k in span
        ]
        return po.estimate_chunked(est, iter(items), f"sample-x_{view}", 8.0, chunk=64)

    clean = {v: track(v, False) for v in VIEWS}
    blanked = {v: track(v, v != "right") for v in VIEWS}
    i = blank - span[0]  # the blank frame's row: steps i-1 -> i and i -> i+1 touch it
    for v in ("front", "back", "left"):
        dR_c, d_c, ok_c = clean[v].steps()
        dR_b, d_b, ok_b = blanked[v].steps()
        assert ok_c[i - 1 : i + 2].all(), v  # the clean frames match (the test's premise)
        assert not ok_b[i - 1] and not ok_b[i], v
        assert ok_b[i + 1], f"{v}: the step after the blank frame was lost"
        assert np.allclose(dR_b[i + 1], dR_c[i + 1], atol=1e-9)
        others = np.r_[: i - 1, i + 1 : len(ok_c)]
        assert np.array_equal(ok_b[others], ok_c[others]), v
    assert set(po.weak_steps(blanked)) == set(po.weak_steps(clean)) | {i - 1, i}


class MetricPoses:
    """A metric pose estimator for testing the stitching (as twoview is): each call in a rigid world
    frame of its own, the lengths of the steps it measured (``last_metric``) exact, the others in a
    unit of the call's own (twoview scales them by the chunk's median measured/parallax ratio)."""

    name = "metric"

    def __init__(self, path, unmeasured: set[int], seed=0):
        self.E = truth_extrinsics(path, 0.0)
        self.unmeasured = unmeasured  # steps k-1 -> k whose length the backend could not measure
        self.rng = np.random.default_rng(seed)
        self.last_metric = None

    def estimate(self, batch):
        ks = list(batch.sample_indices)
        G = geometry.rotation_yaw_pitch(self.rng.uniform(0, 360), 0.0, 0.0)
        a = self.rng.uniform(-3, 3, 3)
        unit = self.rng.uniform(0.3, 3.0)  # this call's unit for the lengths it did not measure
        out, C_prev, C_est = [], None, None
        metric = []
        for i, k in enumerate(ks):
            R, t = self.E[k][:, :3], self.E[k][:, 3]
            C = -R.T @ t
            if i == 0:
                C_est = C.copy()
            else:
                step = C - C_prev
                C_est = C_est + (step * unit if k in self.unmeasured else step)
            C_prev = C
            metric.append(i > 0 and k not in self.unmeasured)
            R2 = R @ G.T
            C2 = G @ C_est + a
            out.append(np.c_[R2, -R2 @ C2])
        self.last_metric = np.array(metric)
        n = len(ks)
        return PoseResult(np.array(out), np.repeat(np.eye(3)[None], n, 0), np.ones(n, bool))


def test_chunks_of_a_metric_backend_keep_their_measured_lengths():
    """A chunk whose lengths the backend measured is stitched without rescaling: scaling it by its
    shared step (a step the backend could not measure, in a unit of that chunk's own) multiplied
    every measured length of the chunk by that step's error."""
    path = walk(40)
    chunk = 7
    # the shared step of every chunk (its first step) and one more were not measured
    unmeasured = {k for k in range(1, 40) if (k - 1) % (chunk - 2) == 0} | {10}
    frames = [(k, k * 0.5, 4 * k, np.zeros((4, 4, 3), np.uint8)) for k in range(len(path))]
    tr = po.estimate_chunked(MetricPoses(path, unmeasured), iter(frames), "sample-x_front", 8.0, chunk=chunk)
    assert tr.metric is not None
    true_steps = np.linalg.norm(np.diff([(p[0], p[1]) for p in path], axis=0), axis=1)
    est_steps = np.linalg.norm(np.diff(tr.C, axis=0), axis=1)
    measured = np.array([k not in unmeasured and true_steps[k - 1] > 0.1 for k in range(1, 40)])
    assert measured.sum() >= 20
    assert np.allclose(est_steps[measured], true_steps[measured], rtol=1e-6)
    # the directions are right everywhere
    a, _, _ = po.motion_vectors(tr)
    ta, moving = truth_angles(path, 0.0)
    assert np.nanmax(np.abs(po.wrap(a[moving] - ta[moving]))) < 1e-6


def _facade_matches(seed: int, ground: bool):
    """Matches between two frames of a camera stepping 0.6 m sideways along a facade 3 m ahead whose
    features below the horizon lie on two horizontal edges (sills, lintels: 0.55 m and 1.1 m below
    the eye), with the wall's texture above; with ``ground``, also points on the ground 1.6 m below."""
    rng = np.random.default_rng(seed)
    K = geometry.view_intrinsics(640, 360, 90.0)
    parts = [np.c_[rng.uniform(-3, 3, n), np.full(n, y), np.full(n, 3.0)] for n, y in ((60, 0.55), (25, 1.1))]
    parts.append(np.c_[rng.uniform(-3, 3, 80), rng.uniform(-1.5, 0.3, 80), np.full(80, 3.0)])
    if ground:
        parts = parts[2:] + [np.c_[rng.uniform(-3, 3, 80), np.full(80, 1.6), rng.uniform(2, 10, 80)]]
    X = np.concatenate(parts)
    t = np.array([-0.6, 0.0, 0.0])  # camera 2 = camera 1 moved 0.6 m right, same orientation

    def project(P):
        x = P @ K.T
        return x[:, :2] / x[:, 2:] + rng.normal(0, 0.3, (len(P), 2))

    return project(X), project(X + t), K, np.eye(3), t / np.linalg.norm(t)


def test_twoview_takes_the_pose_stage_options():
    """twoview is built from exactly the options the pose stage passes (PoseParams.estimator_options)."""
    p = po.PoseParams(backend="twoview", twoview_features="orb", camera_height=None)
    est = base.create("pose_estimator", "twoview", **p.estimator_options(75.0).as_options())
    assert (est.hfov_deg, est.features, est.camera_height) == (75.0, "orb", None)
    est = base.create("pose_estimator", "twoview", **po.PoseParams().estimator_options(90.0).as_options())
    assert (est.hfov_deg, est.features, est.camera_height) == (90.0, "sift", 1.6)


def test_twoview_ground_plane_is_not_a_line_of_facade_features():
    est = twoview.TwoViewPoseEstimator(hfov_deg=90.0)
    for seed in range(8):
        # points along a line lie in a level plane through it at any height: not the ground
        assert est._ground_height(*_facade_matches(seed, ground=False)) is None, seed
        # the real ground: 1.6 m below, in units of the 0.6 m baseline
        h = est._ground_height(*_facade_matches(seed, ground=True))
        assert h is not None and h * 0.6 == pytest.approx(1.6, rel=0.03), seed


def test_fused_rotation_is_not_pulled_by_one_failed_view():
    """Each view estimates the rig's step rotations; now and then one of them fails by a few
    degrees. The fused rotation is their chordal L1 median: the heading stays right (the chordal
    mean would drift by a quarter of every failure, and those add up over a walk)."""
    path = walk(40)
    tracks = {}
    for i, (view, yaw) in enumerate(VIEWS.items()):
        E = truth_extrinsics(path, yaw)
        R_true, C = E[:, :, :3], -np.einsum("nji,nj->ni", E[:, :, :3], E[:, :, 3])
        # the view's chained estimate: its step rotations are right, except at every 4th step (each
        # view at other steps), where it is 5° off (a turn or a tilt)
        R = R_true.copy()
        for k in range(1, len(path)):
            step = R_true[k] @ R_true[k - 1].T
            if k % 4 == i:
                err = (
                    geometry.rotation_yaw_pitch(5.0, 0.0, 0.0)
                    if k % 8 < 4
                    else geometry.rotation_yaw_pitch(0.0, 5.0, 0.0)
                )
                step = (OPENCV_AXES @ err @ OPENCV_AXES.T) @ step
            R[k] = step @ R[k - 1]
        tracks[view] = po.Track(
            np.arange(len(path)),
            np.arange(len(path)) * 0.5,
            np.arange(len(path)) * 4,
            8.0,
            R,
            C,
            np.repeat(np.eye(3)[None], len(path), 0),
            np.ones(len(path), bool),
        )
    fused = po.fuse_views(tracks, VIEWS)
    truth = truth_extrinsics(path, 0.0)[:, :, :3]
    # compare the rig's rotation relative to its first pose with the truth's
    for k in range(len(path)):
        rel_est = fused.R[k] @ fused.R[0].T
        rel_true = truth[k] @ truth[0].T
        cos = (np.trace(rel_est @ rel_true.T) - 1) / 2
        assert math.degrees(math.acos(min(1.0, cos))) < 0.5, k


# ------------------------------------------------------------------ the rig solved as one camera
def _rig_matches(dR: np.ndarray, c: np.ndarray, height: float = 1.6, noise_rad: float = 0.001, seed: int = 3):
    """Matches of a 4-view rig (bearings in the rig's OpenCV axes, one (b1, b2) pair per view)
    between two instants, ``x_2 = dR (x_1 - c)``: points on the ground ``height`` below the rig and
    on walls 4-12 m around, each bearing turned by ``noise_rad`` at random; each view keeps the
    points within its 90° field of view."""
    rng = np.random.default_rng(seed)
    ground = np.c_[rng.uniform(-8, 8, 300), np.full(300, height), rng.uniform(-8, 8, 300)]
    az = rng.uniform(0, 2 * np.pi, 500)
    dist = rng.uniform(4, 12, 500)
    walls = np.c_[dist * np.sin(az), rng.uniform(-3, height - 0.2, 500), dist * np.cos(az)]
    X = np.r_[ground, walls]

    def bearings(P):
        b = P / np.linalg.norm(P, axis=1, keepdims=True)
        b = b + rng.normal(0, noise_rad, b.shape)
        return b / np.linalg.norm(b, axis=1, keepdims=True)

    b1, b2 = bearings(X), bearings((X - c) @ dR.T)
    pairs = []
    for yaw in VIEWS.values():
        M = po.yaw_matrix(yaw)  # view -> rig
        v1, v2 = b1 @ M, b2 @ M  # in the view's axes
        seen = (v1[:, 2] > np.cos(np.radians(45)) * np.linalg.norm(v1[:, [0, 2]], axis=1)) & (v2[:, 2] > 0.3)
        seen &= np.abs(v1[:, 1] / np.maximum(v1[:, 2], 1e-9)) < 0.56
        pairs.append((b1[seen], b2[seen]))
    return pairs, X


@pytest.mark.parametrize("direction_deg", [0.0, 37.0, 90.0, 180.0, -135.0])
def test_the_rig_solves_a_steps_direction_and_rotation_from_all_its_views(direction_deg):
    """A step of 0.6 m in any direction of the rig (forward, diagonal, sideways, backward: a 360°
    camera's direction of travel is not its heading) with a 2° turn: the translation direction
    from all views' matches at once is within a degree of the truth, its sign right, and a
    rotation estimate 1° off is refined to within 0.1°."""
    a = math.radians(direction_deg)
    c = 0.6 * np.array([math.sin(a), 0.0, math.cos(a)])
    dR = po.yaw_matrix(2.0)
    pairs, _ = _rig_matches(dR, c)
    tol = 2.0 / 320.0
    got = po.rig_translation(pairs, dR, tol)
    assert math.degrees(math.acos(np.clip(got @ (c / 0.6), -1, 1))) < 1.0
    off = po.yaw_matrix(3.0) @ np.array(
        [[1, 0, 0], [0, math.cos(0.005), -math.sin(0.005)], [0, math.sin(0.005), math.cos(0.005)]]
    )
    R2, c2 = po.rig_motion(pairs, off, tol)
    err = math.degrees(math.acos(np.clip((np.trace(R2.T @ dR) - 1) / 2, -1, 1)))
    assert err < 0.1
    assert math.degrees(math.acos(np.clip(c2 @ (c / 0.6), -1, 1))) < 1.0


def test_the_rigs_ground_is_the_level_plane_every_view_sees_below():
    """The rig's height above the ground in baselines: 1.6 m over a 0.5 m step is 3.2, found
    among the walls' points to within 2 %; with only points along one level line (a facade's
    sills: every level plane through it fits), no height."""
    c = np.array([0.0, 0.0, 0.5])
    dR = po.yaw_matrix(1.0)
    pairs, _ = _rig_matches(dR, c)
    h = po.rig_ground_height(pairs, dR, c / 0.5, 2.0 / 320.0)
    assert h == pytest.approx(1.6 / 0.5, rel=0.02)
    line = np.c_[np.linspace(-6, 6, 80), np.full(80, 1.2), np.full(80, 5.0)]
    b1 = line / np.linalg.norm(line, axis=1, keepdims=True)
    b2 = (line - c) @ dR.T
    b2 /= np.linalg.norm(b2, axis=1, keepdims=True)
    assert po.rig_ground_height([(b1, b2)], dR, c / 0.5, 2.0 / 320.0) is None


def test_a_views_standing_still_in_rounding_is_no_measured_length():
    """Two views measure the rig's 0.6 m steps against the ground; on one step the front view saw
    no parallax (far things only): its zero comes back from the chained poses as rounding (1e-14),
    not as 0. That is no measured length either: the step keeps the back view's 0.6 m, not the
    median of 0.6 and nothing."""
    n = 5
    C = np.c_[np.zeros(n), np.zeros(n), 0.6 * np.arange(n)]
    front_C = C.copy()
    front_C[3:] -= [0.0, 0.0, 0.6]  # the front view stood still on step 2 -> 3 ...
    front_C[3:] += [1e-14, 0.0, 0.0]  # ... up to rounding
    tracks = {}
    for view, centres in (("front", front_C), ("back", C)):
        R = np.repeat(po.yaw_matrix(VIEWS[view]).T[None], n, 0)
        tracks[view] = po.Track(
            np.arange(n),
            np.arange(n) * 0.5,
            np.arange(n) * 4,
            8.0,
            R,
            centres,
            np.repeat(np.eye(3)[None], n, 0),
            np.ones(n, bool),
            metric=np.ones(n, bool),
        )
    fused = po.fuse_views(tracks, {v: VIEWS[v] for v in tracks})
    assert np.linalg.norm(fused.C[3] - fused.C[2]) == pytest.approx(0.6, rel=1e-6)
    assert np.linalg.norm(np.diff(fused.C, axis=0), axis=1) == pytest.approx([0.6] * (n - 1), rel=1e-6)


def test_unmeasured_steps_take_the_ratio_of_their_measured_neighbours():
    """Step lengths: a measured step keeps its length (the rig's over the views'); an unmeasured
    one its parallax-based length times the measured-to-parallax ratio of the measured steps
    within the window (here 0.5 / 0.1 = 5: the street's near facades, not one ratio for the
    video); without a measured step near, the parallax-based length as it is; standing still, 0."""
    parallax = np.array([0.1, 0.1, 0.12, 0.0, 0.1, 0.3, 0.3, 0.3])
    by_rig = {0: 0.5, 1: 0.5}
    by_view = {4: 1.0, 1: 9.0}
    got = po.step_lengths(parallax, by_rig, by_view, window=2)
    assert got == pytest.approx([0.5, 0.5, 0.6, 0.0, 1.0, 0.3 * 10.0, 0.3 * 10.0, 0.3])


def test_a_step_measured_far_off_its_neighbours_scale_is_treated_as_unmeasured():
    """The bench's seed 18: one view measured a 0.5 m step as 36 m against the ground (a wrong
    ground match), the fused track jumped by as much and 38 objects seen after it were split from
    their earlier sightings. A measured step whose measured-to-parallax ratio is more than
    ``max_ratio`` times off its measured neighbours' takes their ratio; one twice off (the scene's
    depth changing, a street opening onto a plaza) keeps its measurement."""
    parallax = np.full(12, 0.1)
    by_view = {k: 0.05 for k in range(12)}
    by_view[6] = 3.6
    by_view[9] = 0.1
    got = po.step_lengths(parallax, {}, by_view, window=3)
    assert got[6] == pytest.approx(0.05)
    assert got[9] == pytest.approx(0.1)
    assert np.delete(got, [6, 9]) == pytest.approx([0.05] * 10)
    assert po.step_lengths(parallax, {}, by_view, window=3, max_ratio=100.0)[6] == pytest.approx(3.6)


def test_a_valid_pose_without_a_camera_is_named_where_a_ray_is_cast():
    """A pose row marked valid whose intrinsics are not a camera's (all zero: a stand-in) cannot
    cast a ray; the error names the sample and the column, not a bare singular-matrix error."""
    rows = [
        {
            "video_id": "v_front",
            "sample_index": k,
            "time": k / 2,
            "frame": 15 * k,
            "fps": 30.0,
            "extrinsics": np.eye(3, 4).ravel().tolist(),
            "intrinsics": ([0.0] * 9) if k == 1 else geometry.view_intrinsics(640, 360, 90.0).ravel().tolist(),
            "valid": True,
        }
        for k in range(3)
    ]
    track = po.track_from_rows(rows)
    c, d = track.ray(0, 319.5, 179.5)
    np.testing.assert_allclose(d, [0.0, 0.0, 1.0], atol=1e-12)
    with pytest.raises(ValueError, match=r"sample 1: .*intrinsics"):
        track.ray(1, 10.0, 10.0)


def test_a_match_row_that_disagrees_with_its_poses_is_named():
    """view_matches rows the poses do not hold, or whose bearings do not make their match count, are
    refused naming the sample and the view video, not reshaped into something else."""
    path = walk(6)
    items = [(k, k * 0.5, 4 * k, np.zeros((4, 4, 3), np.uint8)) for k in range(len(path))]
    est = po.ViewEstimate(po.estimate_chunked(ExactPoses(path), iter(items), "s_front", 8.0, chunk=7), 4)
    rows = po.view_pose_rows("s_front", est, "da3:independent")
    ray = [0.0, 0.0, 1.0]
    good = {"video_id": "s_front", "sample_index": 2, "n_matches": 2, "before": ray * 2, "after": ray * 2}
    back = po.view_estimate_from_rows(rows, [good], 8.0, 4)
    assert back.track.bearings is not None and back.track.bearings[2][0].shape == (2, 3)
    with pytest.raises(ValueError, match="sample 2 of s_front: 3 matches but 6 and 6 bearing coordinates"):
        po.view_estimate_from_rows(rows, [{**good, "n_matches": 3}], 8.0, 4)
    with pytest.raises(ValueError, match="sample 99 of s_front has no pose row"):
        po.view_estimate_from_rows(rows, [{**good, "sample_index": 99}], 8.0, 4)
