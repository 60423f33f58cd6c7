"""Loop closure (stages/loops.py) on walks made here: the search, the pose graph, its correction
applied to the poses. The same on the rendered sample, against its truth:
tests/test_bench_loop_closure.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vsi_wild.stages import loops
from vsi_wild.stages import pose as po


def level_track(P: np.ndarray, heading: np.ndarray, tilt_deg: np.ndarray | None = None) -> po.Track:
    """A Track of cameras at ground positions P (x right, z forward of the world) turned right by
    ``heading`` (radians), level or pitched by ``tilt_deg``."""
    n = len(P)
    R = np.zeros((n, 3, 3))
    for k in range(n):
        c, s = math.cos(heading[k]), math.sin(heading[k])
        yaw = np.array([[c, 0.0, -s], [0.0, 1.0, 0.0], [s, 0.0, c]])  # rows: the camera's axes in the world
        p = math.radians(tilt_deg[k]) if tilt_deg is not None else 0.0
        pitch = np.array([[1.0, 0.0, 0.0], [0.0, math.cos(p), -math.sin(p)], [0.0, math.sin(p), math.cos(p)]])
        R[k] = pitch @ yaw
    C = np.c_[P[:, 0], np.zeros(n), P[:, 1]]
    return po.Track(
        np.arange(n), np.arange(n) / 2.0, np.arange(n) * 15, 30.0, R, C, np.tile(np.eye(3), (n, 1, 1)),
        np.ones(n, dtype=bool),
    )  # fmt: skip


def rectangle_walk(step: float = 0.6) -> tuple[np.ndarray, np.ndarray]:
    """Ground positions and headings of a walk around a 20 x 12 m block, back to 0.3 m past its start."""
    corners = [(0.0, 0.0), (0.0, 20.0), (12.0, 20.0), (12.0, 0.0), (0.3, 0.0)]
    P, H = [], []
    for (x0, z0), (x1, z1) in zip(corners, corners[1:], strict=False):
        d = math.hypot(x1 - x0, z1 - z0)
        h = math.atan2(x1 - x0, z1 - z0)
        for t in np.arange(0.0, d, step):
            P.append((x0 + (x1 - x0) * t / d, z0 + (z1 - z0) * t / d))
            H.append(h)
    return np.array(P), np.unwrap(np.array(H))


def drifted(P: np.ndarray, H: np.ndarray, turn_bias_deg: float, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The walk as a chained odometry with a steady heading bias per step and a scale error sees it."""
    steps = [loops.to_camera(H[k], P[k + 1] - P[k]) * scale for k in range(len(P) - 1)]
    Q, G = [P[0]], [H[0]]
    for k, s in enumerate(steps):
        g = G[-1]
        Q.append(Q[-1] + np.array([math.cos(g) * s[0] + math.sin(g) * s[1], -math.sin(g) * s[0] + math.cos(g) * s[1]]))
        G.append(g + (H[k + 1] - H[k]) + math.radians(turn_bias_deg))
    return np.array(Q), np.array(G)


def true_edge(P: np.ndarray, H: np.ndarray, i: int, j: int, measured: bool = True) -> loops.LoopEdge:
    off = loops.to_camera(H[i], P[j] - P[i])
    return loops.LoopEdge(i, j, float(H[j] - H[i]), (float(off[0]), float(off[1])) if measured else None, 200)


def test_to_camera_is_the_inverse_of_walking_in_the_cameras_axes():
    """A step (right, forward) of a camera turned by h, walked in the world and read back."""
    h, s = 0.7, np.array([0.3, 1.1])
    world = np.array([math.cos(h) * s[0] + math.sin(h) * s[1], -math.sin(h) * s[0] + math.cos(h) * s[1]])
    assert np.allclose(loops.to_camera(h, world), s)
    # the camera's forward axis on the ground is (sin h, cos h): a forward step moves it along its heading
    assert np.allclose(loops.to_camera(h, np.array([math.sin(h), math.cos(h)])), [0.0, 1.0])


def test_the_graph_closes_a_drifted_loop_on_its_revisits():
    """A 64 m walk around a block chained with a 0.2° per step heading bias and 4 % too long steps
    ends 3.8 m from where it began (truth: 0.3 m); three revisits measured at its end bring every
    position back to within a third of its error, and the end to within 0.3 m of the truth."""
    P, H = rectangle_walk()
    Q, G = drifted(P, H, 0.2, 1.04)
    n = len(P)
    edges = [true_edge(P, H, i, j) for i, j in ((0, n - 1), (2, n - 2), (4, n - 3))]
    Pn, Hn, kept = loops.solve(Q, G, np.ones(n - 1, dtype=bool), edges, loops.LoopModel())
    before = np.linalg.norm(Q - P, axis=1)
    after = np.linalg.norm(Pn - P, axis=1)
    assert np.linalg.norm(Q[-1] - Q[0]) > 3.5
    assert kept == edges
    assert after.max() < before.max() / 3
    assert abs(np.linalg.norm(Pn[-1] - Pn[0]) - np.linalg.norm(P[-1] - P[0])) < 0.3
    assert np.degrees(np.abs(Hn - H)).max() < np.degrees(np.abs(G - H)).max() / 2


def test_a_place_merely_alike_does_not_fold_the_track():
    """Beside the true revisits, an edge that calls two places 11 m apart one place (a facade
    repeated down the street): the graph leaves it out and closes the loop on the others."""
    P, H = rectangle_walk()
    Q, G = drifted(P, H, 0.2, 1.04)
    n = len(P)
    good = [true_edge(P, H, i, j) for i, j in ((0, n - 1), (2, n - 2), (4, n - 3))]
    i, j = 20, 70
    assert np.linalg.norm(P[i] - P[j]) > 10.0
    false = loops.LoopEdge(i, j, float(H[j] - H[i]), None, 80)
    Pn, _, kept = loops.solve(Q, G, np.ones(n - 1, dtype=bool), [*good, false], loops.LoopModel())
    assert false not in kept and all(e in kept for e in good)
    assert np.linalg.norm(Pn - P, axis=1).max() < np.linalg.norm(Q - P, axis=1).max() / 3


def test_the_correction_turns_and_shifts_each_pose_on_the_ground_and_keeps_its_tilt():
    """``apply``: read back on the same ground axes, each pose stands at its new position with its
    new heading; its pitch and height are as they were."""
    rng = np.random.default_rng(3)
    P, H = rectangle_walk()
    n = len(P)
    tilt = rng.normal(0.0, 2.0, n)
    tilt[0] = 0.0
    track = level_track(P, H, tilt)
    frame = loops.ground_frame(track)
    P0, H0 = loops.ground_poses(track, frame)
    P1 = P0 + rng.normal(0.0, 1.0, (n, 2))
    H1 = H0 + rng.normal(0.0, 0.1, n)
    moved = loops.apply(track, frame, P0, H0, P1, H1)
    P2, H2 = loops.ground_poses(moved, frame)
    assert np.allclose(P2, P1, atol=1e-9)
    assert np.allclose(np.unwrap(H2 - H1), 0.0, atol=1e-9)
    down = frame[1]
    assert np.allclose(moved.R @ down, track.R @ down, atol=1e-9)  # each camera's view of down: its tilt
    assert np.allclose(moved.C @ down, track.C @ down, atol=1e-12)


def test_what_the_walk_predicts_has_the_spread_of_its_steps_noise():
    """``predicted``'s first-order covariance of the block walk's end seen from its start, against
    a Monte Carlo of the same step and turn noise: within 5 % per axis."""
    P, H = rectangle_walk()
    n = len(P)
    model = loops.LoopModel()
    odo = loops.odometry(P, H, np.ones(n - 1, dtype=bool), model)
    z, cov = loops.predicted(odo, 0, n - 1)
    assert np.allclose(z[:2], loops.to_camera(H[0], P[-1] - P[0]), atol=1e-9)
    step, turn, sd_t, sd_r = odo
    rng = np.random.default_rng(0)
    ends = []
    for _ in range(2000):
        s = step + rng.normal(0.0, 1.0, step.shape) * sd_t[:, None]
        phi = np.r_[0.0, np.cumsum(turn + rng.normal(0.0, 1.0, len(turn)) * sd_r)]
        c, si = np.cos(phi[:-1]), np.sin(phi[:-1])
        p = np.c_[c * s[:, 0] + si * s[:, 1], -si * s[:, 0] + c * s[:, 1]].sum(axis=0)
        ends.append(np.r_[p, phi[-1]])
    sd_mc = np.std(np.array(ends), axis=0)
    assert np.allclose(np.sqrt(np.diag(cov)), sd_mc, rtol=0.05)


def test_a_consistent_set_of_look_alike_places_is_checked_against_the_walk():
    """Five edges that each call one of the walk's first moments and one of its last but twenty
    one place (a facade matched from 10-12 m apart, the camera turned as the walk turned): they agree
    with one another, so the graph alone keeps them and folds the track onto them; against what the
    walk itself predicts none agrees, while every true revisit does. (Look-alikes within the walk's
    own uncertainty, a few metres after a lap, cannot be told apart so: 7 m apart here, they agree.)"""
    P, H = rectangle_walk()
    Q, G = drifted(P, H, 0.1, 1.04)  # a lap's drift the odometry noise explains (1.7 m)
    n = len(P)
    model = loops.LoopModel()
    good = [true_edge(P, H, i, j) for i, j in ((0, n - 1), (2, n - 2), (4, n - 3))]
    j0 = n - 20
    alike = [loops.LoopEdge(k, j0 + k, float(H[j0 + k] - H[k]), None, 120) for k in range(5)]
    assert min(np.linalg.norm(P[k] - P[j0 + k]) for k in range(5)) > 9.5
    _, _, kept = loops.solve(Q, G, np.ones(n - 1, dtype=bool), alike, model)
    assert kept == alike  # why the walk's own prediction is needed
    odo = loops.odometry(Q, G, np.ones(n - 1, dtype=bool), model)
    assert all(loops.agrees_with_walk(odo, e, model) for e in good)
    assert not any(loops.agrees_with_walk(odo, e, model) for e in alike)


def test_revisits_are_searched_within_the_drift_the_walk_allows():
    """The drifted block walk: the search asks about its end against its start (3.8 m apart on the
    track after 64 m walked, within 2 m plus a tenth of the walk), never about moments less than
    ``min_walk_m`` of walk apart, at most ``per_sample`` per moment, and not about the block's far
    side."""
    P, H = rectangle_walk()
    Q, _ = drifted(P, H, 0.2, 1.04)
    walked = np.r_[0.0, np.cumsum(np.linalg.norm(np.diff(Q, axis=0), axis=1))]
    model = loops.LoopModel()
    params = po.LoopParams()
    pairs = loops.candidates(Q, walked, list(range(len(Q))), params, model)
    assert any(i <= 4 and j >= len(Q) - 6 for i, j in pairs)
    for i, j in pairs:
        assert walked[j] - walked[i] >= params.min_walk_m
        assert np.linalg.norm(Q[i] - Q[j]) <= model.radius(walked[j] - walked[i])
        assert i % model.stride == 0 and j % model.stride == 0
        assert np.linalg.norm(P[i] - P[j]) < 15.0  # the block's far corner is 23 m from its start
    per = np.bincount([i for i, _ in pairs])
    assert per.max() <= model.per_sample


@pytest.mark.parametrize(("turn_deg", "expected"), [(0.0, "front"), (90.0, "left"), (-90.0, "right"), (175.0, "back")])
def test_the_views_matched_are_those_that_look_the_same_way(turn_deg, expected):
    """After the camera turned right by 90°, what its front view showed is in its left view."""
    yaws = {"front": 0.0, "right": 90.0, "back": 180.0, "left": 270.0}
    pairs = loops.view_pairs(yaws, math.radians(turn_deg), 44.0)
    assert ("front", expected) in pairs and len(pairs) == 4


def test_without_a_camera_height_or_when_off_the_track_is_left_as_it_was():
    P, H = rectangle_walk()
    track = level_track(P, H)
    calls = []

    def features_of(rows):
        calls.append(rows)
        return {}

    same, report = loops.close_loops(track, features_of, None, {}, po.LoopParams(), 0.01, None)  # type: ignore[arg-type]
    assert same is track and "camera_height" in report.skipped and not calls
    same, report = loops.close_loops(track, features_of, None, {}, po.LoopParams(enabled=False), 0.01, 1.6)  # type: ignore[arg-type]
    assert same is track and "enabled" in report.skipped and not calls
