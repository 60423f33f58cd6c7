"""Chaining DA3's per-call poses into one world frame (pure numpy; no model needed).

Truth: a random camera trajectory. Each simulated DA3 call sees a window of it in its own world
frame (random rotation, translation) and scale, with depth maps in that scale. Chaining must give
back the true trajectory up to the one global similarity (world = first camera, scale of the first
call), which we remove independently from the truth.
"""

from __future__ import annotations

import numpy as np
import pytest

from vsi_wild.stages.backends.pose import (
    WindowPoses,
    chain_windows,
    ground_height,
    intrinsics_to_input,
    pose_validity,
    window_starts,
)
from vsi_wild.stages.geometry import view_intrinsics


def _rot(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def _small_rot(rng: np.random.Generator, deg: float) -> np.ndarray:
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    a = np.radians(deg)
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(a) * k + (1 - np.cos(a)) * k @ k


def _trajectory(rng: np.random.Generator, n: int, move: float) -> tuple[np.ndarray, np.ndarray]:
    """World->camera (n,3,4) of a camera walking and turning; depth maps (n,8,8) in metres."""
    r, c = _rot(rng), rng.normal(size=3)
    ext, depth = [], []
    for _ in range(n):
        ext.append(np.concatenate([r, (-r @ c)[:, None]], axis=1))
        depth.append(rng.uniform(1.0, 9.0, size=(8, 8)))
        r = _small_rot(rng, 7.0) @ r
        c = c + move * rng.normal(size=3)
    return np.array(ext), np.array(depth)


def _simulate_call(ext: np.ndarray, depth: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The same cameras seen by one DA3 call: world x_W = s (Q x + u), camera units times s."""
    q, u, s = _rot(rng), rng.normal(size=3) * 3, float(rng.uniform(0.2, 5.0))
    r, t = ext[:, :, :3], ext[:, :, 3]
    r_w = r @ q.T
    t_w = s * (t - np.einsum("nij,j->ni", r_w, u))
    return np.concatenate([r_w, t_w[..., None]], axis=2), depth * s


def _relative_to_first(ext: np.ndarray) -> np.ndarray:
    """Truth re-expressed with frame 0's camera as the world, translation scaled to unit first step."""
    e = np.tile(np.eye(4), (len(ext), 1, 1))
    e[:, :3, :4] = ext
    rel = e @ np.linalg.inv(e[0])
    return rel[:, :3, :4]


@pytest.mark.parametrize("move", [0.5, 0.0])  # 0.0: a camera that only turns (no centre spread)
def test_chained_windows_recover_the_trajectory(move: float) -> None:
    rng = np.random.default_rng(3)
    n, window, overlap = 23, 8, 3
    ext, depth = _trajectory(rng, n, move)
    k = view_intrinsics(64, 48, 90.0)
    windows = []
    for start in window_starts(n, window, overlap):
        e, d = _simulate_call(ext[start : start + window], depth[start : start + window], rng)
        windows.append(WindowPoses(start, e, np.repeat(k[None], len(e), 0), d))
    assert len(windows) > 3
    got, ixt, valid, _ = chain_windows(n, windows)
    assert valid.all()
    truth = _relative_to_first(ext)
    # the global scale is the first call's: measure it from the truth and the first window
    first = windows[0]
    s0 = float(np.median(first.depth[0] / depth[0]))
    np.testing.assert_allclose(got[:, :, :3], truth[:, :, :3], atol=1e-9)
    np.testing.assert_allclose(got[:, :, 3], s0 * truth[:, :, 3], atol=1e-8)
    assert np.allclose(got[0], np.eye(3, 4))
    assert pose_validity(got, ixt).all()


def test_chain_without_depth_uses_camera_centres() -> None:
    rng = np.random.default_rng(5)
    n = 12
    ext, depth = _trajectory(rng, n, 0.7)
    windows = []
    for start in window_starts(n, 6, 3):
        e, _ = _simulate_call(ext[start : start + 6], depth[start : start + 6], rng)
        windows.append(WindowPoses(start, e, np.repeat(np.eye(3)[None], len(e), 0), None))
    got, _, valid, _ = chain_windows(n, windows)
    assert valid.all()
    truth = _relative_to_first(ext)
    np.testing.assert_allclose(got[:, :, :3], truth[:, :, :3], atol=1e-9)
    # scale is unknown without depth: compare translations up to one positive factor
    s = np.linalg.norm(got[:, :, 3]) / np.linalg.norm(truth[:, :, 3])
    np.testing.assert_allclose(got[:, :, 3], s * truth[:, :, 3], atol=1e-8)


def test_unalignable_window_invalidates_its_frames_only_forward() -> None:
    rng = np.random.default_rng(1)
    ext, depth = _trajectory(rng, 10, 0.0)  # pure rotation: no centre spread
    w0 = WindowPoses(0, *_simulate_call(ext[:6], depth[:6], rng)[:1], np.repeat(np.eye(3)[None], 6, 0))
    w1 = WindowPoses(4, *_simulate_call(ext[4:10], depth[4:10], rng)[:1], np.repeat(np.eye(3)[None], 6, 0))
    _, _, valid, _ = chain_windows(10, [w0, w1])  # no depth, no spread: no scale
    assert valid[:6].all() and not valid[6:].any()


def test_window_starts_cover_with_overlap() -> None:
    for n in range(1, 60):
        for window, overlap in [(8, 3), (5, 1), (64, 8), (2, 1)]:
            starts = window_starts(n, window, overlap)
            covered = set()
            for a, b in zip(starts, starts[1:], strict=False):
                assert a < b and (a + window) - b >= overlap
            for s in starts:
                covered |= set(range(s, min(n, s + window)))
            assert covered == set(range(n)) and starts[-1] + min(window, n) == n


def test_intrinsics_map_back_to_input_pixels() -> None:
    # DA3 writes K for the processed image with the principal point at (w/2, h/2) and
    # fx = (w/2) / tan(fov/2). The same field of view in the input image, pixel-centre
    # coordinates, is geometry.view_intrinsics' K (but with w in place of w - 1 for the focal).
    W, H, w, h, hfov = 1920, 1080, 504, 280, 90.0
    vfov = np.degrees(2 * np.arctan(np.tan(np.radians(hfov) / 2) * H / W))
    k_proc = np.array(
        [
            [(w / 2) / np.tan(np.radians(hfov) / 2), 0, w / 2],
            [0, (h / 2) / np.tan(np.radians(vfov) / 2), h / 2],
            [0, 0, 1],
        ]
    )
    k = intrinsics_to_input(k_proc, (w, h), (W, H))
    assert k[0, 2] == pytest.approx((W - 1) / 2) and k[1, 2] == pytest.approx((H - 1) / 2)
    assert (W / 2) / k[0, 0] == pytest.approx(np.tan(np.radians(hfov) / 2))
    assert (H / 2) / k[1, 1] == pytest.approx(np.tan(np.radians(vfov) / 2))


def _da3_k(w: int, h: int, hfov: float) -> np.ndarray:
    """K as DA3 writes it for a processed image of (w, h): principal point (w/2, h/2), pixel edges."""
    f = (w / 2) / np.tan(np.radians(hfov) / 2)
    return np.array([[f, 0, w / 2], [0, f, h / 2], [0, 0, 1.0]])


def _depth_of_scene(k_proc: np.ndarray, w: int, h: int, height: float) -> np.ndarray:
    """Depth (along the optical axis) of a level camera's processed image over the ground plane y
    = ``height`` (camera axes, y down), with a wall at z = 2 x height filling the image's left
    40 % and standing on that ground, found by casting each pixel centre's ray."""
    u, v = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)  # pixel centres, DA3's edge convention
    rays = np.stack([(u - k_proc[0, 2]) / k_proc[0, 0], (v - k_proc[1, 2]) / k_proc[1, 1], np.ones_like(u)], -1)
    depth = np.full((h, w), np.inf)
    down = rays[..., 1] > 0
    depth[down] = height / rays[..., 1][down]  # t with t * ray_y = height; z = t (ray_z = 1)
    wall_z = 2.0 * height
    hit = (np.arange(w) < 0.4 * w)[None, :] & (wall_z * rays[..., 1] <= height) & (wall_z < depth)
    depth[hit] = wall_z
    return depth


def test_ground_height_from_a_level_cameras_depth_map() -> None:
    """The ground below a level camera, in its depth map's unit: the depth map (of DA3's processed
    size, 252 x 140) of a camera 0.592 units up (1.6 m in a unit of 0.37 m) over flat ground, with a
    wall across 40 % of the view; the intrinsics are the input's (640 x 360, ``intrinsics_to_input``).
    The wall's pixels are a minority of those 15 degrees or more below the horizon: the height is
    exact. A view too narrow to see that far down measures nothing."""
    w, h, W, H = 252, 140, 640, 360
    k_proc = _da3_k(w, h, 90.0)
    height = 1.6 * 0.37
    depth = _depth_of_scene(k_proc, w, h, height)
    k_in = intrinsics_to_input(k_proc, (w, h), (W, H))
    assert ground_height(depth, k_in, (W, H)) == pytest.approx(height, rel=1e-9)
    # the wall's rows alone would give less: the median is the ground's
    assert np.isinf(depth).any() and (depth == 2.0 * height).sum() > 1000
    narrow = _da3_k(w, h, 40.0)  # vertical half-angle 12.9 degrees: no row 15 degrees down
    assert np.isnan(
        ground_height(_depth_of_scene(narrow, w, h, height), intrinsics_to_input(narrow, (w, h), (W, H)), (W, H))
    )
