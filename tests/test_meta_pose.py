"""Poses: view geometry, chunk stitching, and the two-view backend on rendered frames."""

from __future__ import annotations

import math

import numpy as np
import pytest

from synthetic_world import Room, walk
from vsi_wild.stages import geometry
from vsi_wild.stages import pose as po
from vsi_wild.stages.backends import base
from vsi_wild.stages.backends import twoview  # noqa: F401  (registers "twoview")
from vsi_wild.stages.backends.base import FrameBatch, PoseResult

CV = np.array([[1.0, 0, 0], [0, 0, -1.0], [0, 1.0, 0]])  # (right, forward, up) -> OpenCV axes
VIEWS = {"front": 0.0, "right": 90.0, "back": 180.0, "left": 270.0}


def truth_extrinsics(path, view_yaw: float, height: float = 1.6) -> np.ndarray:
    out = []
    for x, y, yaw in path:
        R = CV @ geometry.rotation_yaw_pitch(yaw + view_yaw, 0.0).T
        out.append(np.c_[R, -R @ np.array([x, y, height])])
    return np.array(out)


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
    src = po.Track(np.arange(4), np.arange(4) * 0.5, np.arange(4) * 4, 8.0, E[:, :, :3],
                   -np.einsum("nji,nj->ni", E[:, :, :3], E[:, :, 3]), np.repeat(np.eye(3)[None], 4, 0), np.ones(4, bool))
    for view, yaw in VIEWS.items():
        derived = po.derive_view(src, yaw)
        want = truth_extrinsics(path, yaw)
        assert np.allclose(derived.extrinsics, want, atol=1e-9), view
        a, _, _ = po.motion_vectors(derived)
        ta, _ = truth_angles(path, yaw)
        assert np.allclose(po.wrap(a - ta), 0.0, atol=1e-6), view
    # the right view sees forward motion going to its left
    assert po.motion_vectors(po.derive_view(src, 90.0))[0][1] == pytest.approx(
        po.wrap(po.motion_vectors(src)[0][1] - 90.0))


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
    tracks = {v: po.estimate_chunked(est, iter([(k, k * 0.5, 4 * k, f) for k, f in enumerate(frames[v])]),
                                     f"sample-x_{v}", 8.0, chunk=30) for v in VIEWS}
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
                err = geometry.rotation_yaw_pitch(5.0, 0.0, 0.0) if k % 8 < 4 else geometry.rotation_yaw_pitch(0.0, 5.0, 0.0)
                step = (CV @ err @ CV.T) @ step
            R[k] = step @ R[k - 1]
        tracks[view] = po.Track(np.arange(len(path)), np.arange(len(path)) * 0.5, np.arange(len(path)) * 4, 8.0, R, C,
                                np.repeat(np.eye(3)[None], len(path), 0), np.ones(len(path), bool))
    fused = po.fuse_views(tracks, VIEWS)
    truth = truth_extrinsics(path, 0.0)[:, :, :3]
    # compare the rig's rotation relative to its first pose with the truth's
    for k in range(len(path)):
        rel_est = fused.R[k] @ fused.R[0].T
        rel_true = truth[k] @ truth[0].T
        cos = (np.trace(rel_est @ rel_true.T) - 1) / 2
        assert math.degrees(math.acos(min(1.0, cos))) < 0.5, k


def test_a_failed_step_into_a_pose_does_not_void_the_step_out_of_it():
    """twoview chains its steps: when three views fail the step into sample 5 (their pose 5 is only
    offset), the step 5 -> 6 they measured from the frames still counts. Read as 'pose 5 invalid',
    both steps had one view left and went to the rig's turn recovery: a rotation, no translation
    (on the sample: a false 4.6° turn where the camera walked 0.46 m)."""
    path = walk(12)
    tracks = {}
    for view, yaw in VIEWS.items():
        E = truth_extrinsics(path, yaw)
        R, C = E[:, :, :3].copy(), -np.einsum("nji,nj->ni", E[:, :, :3], E[:, :, 3])
        step_valid = np.ones(len(path), bool)
        if view != "back":  # the failed step 4 -> 5 is chained as no motion, the later ones as measured
            G = R[5].T @ R[4]  # the later poses turned back by the missed rotation, about C[5]
            C[5:] = C[4] + (C[5:] - C[5]) @ G
            R[5:] = R[5:] @ G
            step_valid[5] = False
        tracks[view] = po.Track(np.arange(len(path)), np.arange(len(path)) * 0.5, np.arange(len(path)) * 4, 8.0, R, C,
                                np.repeat(np.eye(3)[None], len(path), 0), step_valid.copy(), step_valid=step_valid)
    assert po.weak_steps(tracks) == [4]
    fused = po.fuse_views(tracks, VIEWS)
    true_steps = np.linalg.norm(np.diff([(p[0], p[1]) for p in path], axis=0), axis=1)
    est_steps = np.linalg.norm(np.diff(fused.C, axis=0), axis=1)
    assert true_steps[5] > 0.2
    np.testing.assert_allclose(est_steps[5:], true_steps[5:], rtol=1e-6)


def test_twoview_step_scale_follows_the_scene_and_outvotes_one_bad_ground_fit(monkeypatch):
    """twoview's parallax-based lengths are baseline / typical depth: a walk in a plaza (depth 10 m),
    a turn about (40° a step), then down a street (depth 4 m) at 0.5 m a step, the ground seen at a
    few steps only, one of its fits 3x off. The scale of each step comes from the ground steps near
    it after the same turn: the batch's one scale made the street's steps 2.5x too long, and the
    bad fit gave its step 1.5 m."""
    n, true_step = 40, 0.5
    depth = np.where(np.arange(n) < 20, 10.0, 4.0)  # per step i-1 -> i
    ground = {3: 3.2, 8: 3.2, 12: 3.2, 17: 3.2, 23: 3.2, 27: 3.2, 28: 3.2 / 3, 33: 3.2, 37: 3.2}  # baselines
    ground = {i: h * 0.5 / true_step for i, h in ground.items()}  # 1.6 m / 0.5 m per step = 3.2 baselines
    est = twoview.TwoViewPoseEstimator(hfov_deg=90.0)
    monkeypatch.setattr(est, "_features", lambda gray: int(gray[0, 0]))

    def relative(f1, f2, K):
        est.last_height = ground.get(f2)
        if f2 in (19, 20):  # the turn about, on the spot
            est.last_height = None
            return geometry.rotation_yaw_pitch(40.0, 0.0, 0.0), np.zeros(3), True
        return np.eye(3), np.array([0.0, 0.0, true_step / depth[f2]]), True

    monkeypatch.setattr(est, "relative", relative)
    frames = [np.full((36, 64, 3), i, np.uint8) for i in range(n)]
    res = est.estimate(FrameBatch("x_front", frames, list(np.arange(n) * 0.5), list(range(n)), list(range(n)), 8.0))
    C = -np.einsum("nji,nj->ni", res.extrinsics[:, :, :3], res.extrinsics[:, :, 3])
    steps = np.linalg.norm(np.diff(C, axis=0), axis=1)
    turn = np.isin(np.arange(1, n), (19, 20))
    np.testing.assert_allclose(steps[~turn], true_step, rtol=0.01)
    assert np.all(steps[turn] == 0.0) and est.last_metric[1:].all()


def test_fused_rotation_leaves_out_a_view_far_off_when_another_is_a_little_off():
    """Along a corridor the right view's step rotations were 7-12° off and another view's 2°: the L1
    median of four is any rotation between the middle two, and it took the 2° one (-10° of heading
    over 8 steps on the sample). The far view is left out and the median taken of the other three."""
    path = walk(20)
    offs = {"right": 10.0, "back": 2.0}  # degrees of yaw added to every step
    tracks = {}
    for view, yaw in VIEWS.items():
        E = truth_extrinsics(path, yaw)
        R_true, C = E[:, :, :3], -np.einsum("nji,nj->ni", E[:, :, :3], E[:, :, 3])
        R = R_true.copy()
        err = CV @ geometry.rotation_yaw_pitch(offs.get(view, 0.0), 0.0, 0.0) @ CV.T
        for k in range(1, len(path)):
            R[k] = err @ (R_true[k] @ R_true[k - 1].T) @ R[k - 1]
        tracks[view] = po.Track(np.arange(len(path)), np.arange(len(path)) * 0.5, np.arange(len(path)) * 4, 8.0, R, C,
                                np.repeat(np.eye(3)[None], len(path), 0), np.ones(len(path), bool))
    truth = truth_extrinsics(path, 0.0)[:, :, :3]
    fused = po.fuse_views(tracks, VIEWS)
    rel_est, rel_true = fused.R[-1] @ fused.R[0].T, truth[-1] @ truth[0].T
    assert math.degrees(math.acos(min(1.0, (np.trace(rel_est @ rel_true.T) - 1) / 2))) < 0.5


def test_a_view_whose_step_length_jumps_does_not_drag_the_fused_step():
    """A near object passing a side view multiplies its parallax-based step lengths for a few steps
    (x3-x10 on the sample) while another view is steadily 1.5x long: the median of the four took the
    mean of the middle two. The view farthest from its own neighbouring steps is left out."""
    path = walk(24)
    jumps = {10: 5.0, 11: 6.0, 12: 4.0}  # steps k -> k+1 of the right view
    tracks = {}
    for view, yaw in VIEWS.items():
        E = truth_extrinsics(path, yaw)
        R, C_true = E[:, :, :3], -np.einsum("nji,nj->ni", E[:, :, :3], E[:, :, 3])
        C = C_true.copy()
        for k in range(len(path) - 1):
            s = jumps.get(k, 1.0) if view == "right" else 1.5 if view == "back" else 1.0
            C[k + 1] = C[k] + s * (C_true[k + 1] - C_true[k])
        n = len(path)
        tracks[view] = po.Track(np.arange(n), np.arange(n) * 0.5, np.arange(n) * 4, 8.0, R, C,
                                np.repeat(np.eye(3)[None], n, 0), np.ones(n, bool), metric=np.ones(n, bool))
    fused = po.fuse_views(tracks, VIEWS)
    true_steps = np.linalg.norm(np.diff([(p[0], p[1]) for p in path], axis=0), axis=1)
    est_steps = np.linalg.norm(np.diff(fused.C, axis=0), axis=1)
    assert (true_steps[list(jumps)] > 0.2).all()
    np.testing.assert_allclose(est_steps[list(jumps)], true_steps[list(jumps)], rtol=1e-6)
