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
from vsi_wild.stages.backends.base import PoseResult

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
