"""Loop closure: places the walk comes back to, recognised by the rig's own matching, and the
pose graph they close.

A track chained from step to step drifts: the CPU backend's by 0.03-0.09 m per metre walked
(docs/metadata.md), so a loop that ends where it began ends metres away on the track, and every
place visited twice is two places to reconciliation and to VPO's visit reading. Matching the
rig's views at two moments far apart on the walk recognises a revisit (``bench/loop_closure.py``:
on the sample every pair of moments within 1 m of each other reaches 50 matches that one rotation
explains, none of 90 pairs 5 m or more apart does). Each revisit found becomes an edge of a pose
graph on the ground plane (positions and headings), beside the track's own steps; the graph's
least-squares solution spreads each loop's gap over the steps that walked it.

1. ``candidates``: pairs of moments that walked at least ``LoopParams.min_walk_m`` apart and that
   the drifting track itself puts near each other (within ``LoopModel.radius``: the drift the
   track can have accumulated over the walk between them); a few per moment, spread in time.
2. ``measure``: the two rigs matched view against view (the views the track says look the same
   way); a revisit when one rotation explains at least ``LoopParams.min_inliers`` matches
   (``twoview.rig_rotation_of``). The offset between the two cameras is then solved from all of
   those matches as one all-round camera (``pose.rig_motion``), its length against the ground
   both see (``pose.rig_ground_height``); where the ground does not give it, the edge says only
   "the same place" (within ``LoopModel.same_place_sd_m``).
3. ``agrees_with_walk``: an edge must agree with what the walk alone says of the two cameras
   (the track's steps compounded with their noise, ``predicted``) at ``LoopModel.reject_chi2``:
   a place merely alike, matched metres away or turned another way than the walk can have drifted,
   must not fold the track.
4. ``solve``: the pose graph, by sparse least squares; a loop edge the others contradict (its
   normalised residual beyond ``LoopModel.reject_chi2``) is dropped, the worst first, and the
   graph solved again.
5. ``apply``: each moment's correction (a turn about the down axis and a shift on the ground)
   applied to its pose; tilt and height stay as estimated.

Ground axes: ``ground_frame`` (e_x, down, e_z), right-handed like the camera's (x right, y down,
z forward); a heading is the camera's forward axis's angle from e_z towards e_x (positive right),
a camera-relative ground vector is (right, forward)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from vsi_wild.stages.backends.twoview import RigFeatures, TwoViewPoseEstimator, rig_rotation_of
from vsi_wild.stages.pose import LoopParams, Track, rig_ground_height, rig_motion


@dataclass(frozen=True)
class LoopModel:
    """The search radius and the pose graph's noise model.

    - Search: ``base_m`` plus ``drift_per_m`` of the walk between two moments (twoview drifts by
      0.03-0.09 per metre, docs/metadata.md), at most ``max_radius_m``; at most ``per_sample``
      candidates per moment, one moment in ``stride`` (2 FPS samples: one a second). The views
      matched: those looking within ``view_overlap_deg`` of the same way by the track's turn (the
      heading drifts by degrees, not tens of them).
    - Odometry, measured on the training renders (``bench/odometry_noise.py``: root mean squares of
      heavy-tailed errors): sd per step ``step_sd_m`` plus ``step_sd_frac`` of its length per axis,
      ``step_turn_sd_deg``. An unmeasured step (the pose left as it was): ``lost_step_sd_m``,
      ``lost_turn_sd_deg``.
    - A loop edge (stated guesses, not fitted): ``same_place_sd_m`` where its offset is not
      measured (revisits recognised lie within about 2 m), else ``offset_sd_m`` plus
      ``offset_sd_frac`` of it; its turn ``turn_sd_deg``, or ``same_place_turn_sd_deg`` without an
      offset (the rotation that maps most matches alone: off by up to 6 degrees on the sample).
      ``max_turn_change_deg``: how far the joint solution of rotation and offset may move that
      rotation (``pose.rig_motion``).
    - Rejection, against the walk and in the graph: ``reject_chi2`` is the chi-square of 3 degrees
      of freedom at 0.999; after
      ``max_single_rejections`` solves that each left out the worst edge, every edge beyond it goes.
    """

    base_m: float = 2.0
    drift_per_m: float = 0.1
    max_radius_m: float = 20.0
    per_sample: int = 8
    stride: int = 2
    step_sd_m: float = 0.037
    step_sd_frac: float = 0.137
    step_turn_sd_deg: float = 0.32
    lost_step_sd_m: float = 1.0
    lost_turn_sd_deg: float = 20.0
    same_place_sd_m: float = 1.0
    offset_sd_m: float = 0.1
    offset_sd_frac: float = 0.1
    turn_sd_deg: float = 1.0
    same_place_turn_sd_deg: float = 6.0
    max_turn_change_deg: float = 10.0
    reject_chi2: float = 16.27
    max_single_rejections: int = 20
    view_overlap_deg: float = 60.0

    def radius(self, walked_m: np.ndarray | float) -> np.ndarray:
        return np.minimum(self.base_m + self.drift_per_m * np.asarray(walked_m, dtype=float), self.max_radius_m)


@dataclass(frozen=True)
class LoopEdge:
    """A revisit: track rows ``i`` < ``j`` show one place. ``turn``: heading at j minus heading at i
    (radians, positive right); ``offset``: camera j's ground position in camera i's ground axes
    (right, forward; metres), None where not measured; ``inliers``: the rotation's matches."""

    i: int
    j: int
    turn: float
    offset: tuple[float, float] | None
    inliers: int


@dataclass
class LoopReport:
    """What ``close_loops`` did: the pairs tried, the edges found, those kept (that agreed with
    the walk and the graph kept), or why it did nothing (``skipped``)."""

    tried: int = 0
    found: list[LoopEdge] | None = None
    kept: list[LoopEdge] | None = None
    skipped: str | None = None


def ground_frame(track: Track) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(e_x, down, e_z): the world's down (``Track.down``) and two ground axes, e_z along the first
    valid camera's forward axis on the ground, e_x = down x e_z."""
    down = track.down()
    rows = track.valid_rows()
    f = track.R[rows[0] if rows else 0][2]
    e_z = f - (f @ down) * down
    if np.linalg.norm(e_z) < 1e-9:
        raise ValueError("the first camera looks straight down: no heading to measure the ground from")
    e_z /= np.linalg.norm(e_z)
    return np.cross(down, e_z), down, e_z


def ground_poses(track: Track, frame: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ground position (n, 2: along e_x, e_z) and heading (radians, unwrapped)."""
    e_x, _, e_z = frame
    P = np.c_[track.C @ e_x, track.C @ e_z]
    fwd = track.R[:, 2, :]
    return P, np.unwrap(np.arctan2(fwd @ e_x, fwd @ e_z))


def to_camera(heading: float | np.ndarray, v: np.ndarray) -> np.ndarray:
    """A ground vector (e_x, e_z) in the ground axes of a camera of that heading: (right, forward)."""
    c, s = np.cos(heading), np.sin(heading)
    return np.array([c * v[0] - s * v[1], s * v[0] + c * v[1]])


def candidates(
    P: np.ndarray, walked: np.ndarray, rows: Sequence[int], params: LoopParams, model: LoopModel
) -> list[tuple[int, int]]:
    """Pairs of rows (i < j, among ``rows``, one in ``model.stride``) at least ``params.min_walk_m``
    of walk apart whose positions lie within ``model.radius`` of that walk: per row i, at most
    ``model.per_sample`` of them, spread evenly in time."""
    from scipy.spatial import cKDTree

    sel = np.asarray(rows, dtype=int)[:: model.stride]
    if len(sel) < 2:
        return []
    tree = cKDTree(P[sel])
    out: list[tuple[int, int]] = []
    for a, i in enumerate(sel):
        near = np.array(tree.query_ball_point(P[i], model.max_radius_m), dtype=int)
        near = near[near > a]
        if not len(near):
            continue
        js = sel[near]
        walk = walked[js] - walked[i]
        ratio = np.linalg.norm(P[js] - P[i], axis=1) / model.radius(walk)
        ok = np.flatnonzero((walk >= params.min_walk_m) & (ratio <= 1.0))
        if len(ok) > model.per_sample:  # spread over the time the track may be back (not its nearest:
            # within the radius the track's distances are drift, a revisit 3 m off ranks below a stranger 1 m off)
            ok = ok[np.argsort(js[ok])][np.linspace(0, len(ok) - 1, model.per_sample).round().astype(int)]
        out.extend((int(i), int(j)) for j in sorted(js[ok]))
    return out


def view_pairs(yaws: dict[str, float], turn: float, overlap_deg: float) -> set[tuple[str, str]]:
    """The (view at i, view at j) pairs that look within ``overlap_deg`` of the same way when the
    camera turned by ``turn`` (radians) from i to j."""
    t = math.degrees(turn)
    return {(u, v) for u in yaws for v in yaws if abs((yaws[u] - yaws[v] - t + 180.0) % 360.0 - 180.0) < overlap_deg}


def measure(
    est: TwoViewPoseEstimator,
    fi: RigFeatures,
    fj: RigFeatures,
    yaws: dict[str, float],
    predicted_turn: float,
    params: LoopParams,
    model: LoopModel,
    tol: float,
    camera_height: float,
) -> tuple[float, tuple[float, float] | None, int] | None:
    """Whether the rigs at two moments show one place, and how they stand to each other: (turn,
    offset or None, inliers), or None when not recognised (the module's step 2)."""
    got = rig_rotation_of(
        est, fi, fj, yaws, params.min_inliers, view_pairs(yaws, predicted_turn, model.view_overlap_deg)
    )
    if got is None:
        return None
    R0, inliers, matches = got
    turn = -math.atan2(R0[0, 2], R0[2, 2])  # x_j = R0 x_i: the camera turned by minus R0's yaw
    # the matches of the views that look the same way by the measured turn (wrong pairs only add outliers)
    pairs = [matches[p] for p in sorted(view_pairs(yaws, turn, model.view_overlap_deg)) if p in matches]
    # R0 fits a homography to matches with parallax (the cameras stand up to metres apart): off by up
    # to 6 degrees on the sample's revisits, where a step's is off by a fraction of one; the joint
    # solution may move it that far
    motion = rig_motion(pairs, R0, tol, max_change_deg=model.max_turn_change_deg) if pairs else None
    if motion is None:
        return turn, None, inliers
    dR, c = motion
    h = rig_ground_height(pairs, dR, c, tol)
    turn = -math.atan2(dR[0, 2], dR[2, 2])
    if h is None or h <= 0:
        return turn, None, inliers
    d = c * (camera_height / h)  # camera j's centre in camera i's axes (x right, z forward), metres
    return turn, (float(d[0]), float(d[2])), inliers


def _residuals(
    X: np.ndarray,
    P0: np.ndarray,
    h0: float,
    odo: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    edges: Sequence[LoopEdge],
    model: LoopModel,
) -> np.ndarray:
    n = len(X) // 3
    p, h = X[: 2 * n].reshape(n, 2), X[2 * n :]
    step, turn, sd_t, sd_r = odo
    d = p[1:] - p[:-1]
    out = [100.0 * (p[0] - P0), [100.0 * (h[0] - h0)]]
    out.append(((to_camera(h[:-1], d.T).T - step) / sd_t[:, None]).ravel())
    out.append((h[1:] - h[:-1] - turn) / sd_r)
    for e in edges:
        out.append(_edge_residual(p, h, e, model))
    return np.concatenate([np.ravel(r) for r in out])


def _edge_residual(p: np.ndarray, h: np.ndarray, e: LoopEdge, model: LoopModel) -> np.ndarray:
    """A loop edge's residual, in sds: its offset (2) and its turn (1)."""
    dh = (h[e.j] - h[e.i] - e.turn + math.pi) % (2 * math.pi) - math.pi
    rel = to_camera(h[e.i], p[e.j] - p[e.i])
    if e.offset is None:
        r = rel / model.same_place_sd_m
    else:
        o = np.array(e.offset)
        r = (rel - o) / (model.offset_sd_m + model.offset_sd_frac * float(np.linalg.norm(o)))
    sd = model.turn_sd_deg if e.offset is not None else model.same_place_turn_sd_deg
    return np.r_[r, dh / math.radians(sd)]


Odometry = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def odometry(P: np.ndarray, heading: np.ndarray, step_ok: np.ndarray, model: LoopModel) -> Odometry:
    """The track's steps as the pose graph reads them: per step k -> k+1, the step in camera k's
    ground axes (n - 1, 2), the turn (radians), and their sds (per axis; radians)."""
    step = to_camera(heading[:-1], (P[1:] - P[:-1]).T).T
    length = np.linalg.norm(step, axis=1)
    sd_t = np.where(step_ok, model.step_sd_m + model.step_sd_frac * length, model.lost_step_sd_m)
    sd_r = np.radians(np.where(step_ok, model.step_turn_sd_deg, model.lost_turn_sd_deg))
    return step, heading[1:] - heading[:-1], sd_t, sd_r


def predicted(odo: Odometry, i: int, j: int) -> tuple[np.ndarray, np.ndarray]:
    """What the walk alone says of camera j seen from camera i: (offset right, offset forward,
    turn) and its covariance, the steps i..j compounded with their noise (first order: each step's
    sd, and each turn's sd carried over the distance walked after it)."""
    step, turn, sd_t, sd_r = odo
    p, phi, cov = np.zeros(2), 0.0, np.zeros((3, 3))
    for k in range(i, j):
        c, s = math.cos(phi), math.sin(phi)
        M = np.array([[c, s], [-s, c]])  # camera k's (right, forward) in camera i's ground axes
        dM = np.array([[-s, c], [-c, -s]])
        F = np.eye(3)
        F[:2, 2] = dM @ step[k]
        G = np.zeros((3, 3))
        G[:2, :2], G[2, 2] = M, 1.0
        cov = F @ cov @ F.T + G @ np.diag([sd_t[k] ** 2, sd_t[k] ** 2, sd_r[k] ** 2]) @ G.T
        p = p + M @ step[k]
        phi += float(turn[k])
    return np.r_[p, phi], cov


def agrees_with_walk(odo: Odometry, e: LoopEdge, model: LoopModel) -> bool:
    """Whether a loop edge agrees with what the walk alone says (``predicted``) within both
    uncertainties, at ``model.reject_chi2``: a place merely alike, seen metres away or turned
    another way than the walk can have drifted, does not. A consistent set of such edges (one
    facade matched from several moments) would bend the graph to itself, where its residuals after
    the solve look small: it is tested against the walk before."""
    z, cov = predicted(odo, e.i, e.j)
    if e.offset is None:
        meas, sd_o, sd_r = np.zeros(2), model.same_place_sd_m, math.radians(model.same_place_turn_sd_deg)
    else:
        meas = np.array(e.offset)
        sd_o = model.offset_sd_m + model.offset_sd_frac * float(np.linalg.norm(meas))
        sd_r = math.radians(model.turn_sd_deg)
    nu = np.r_[meas - z[:2], (e.turn - z[2] + math.pi) % (2 * math.pi) - math.pi]
    S = cov + np.diag([sd_o**2, sd_o**2, sd_r**2])
    return float(nu @ np.linalg.solve(S, nu)) <= model.reject_chi2


def solve(
    P: np.ndarray, heading: np.ndarray, step_ok: np.ndarray, edges: Sequence[LoopEdge], model: LoopModel
) -> tuple[np.ndarray, np.ndarray, list[LoopEdge]]:
    """The pose graph's ground positions and headings, and the loop edges it kept (the module's
    step 4). ``step_ok``: per step k -> k+1, whether it was measured."""
    from scipy.optimize import least_squares
    from scipy.sparse import lil_matrix

    n = len(P)
    odo = odometry(P, heading, step_ok, model)
    kept = list(edges)
    rounds = 0
    X = np.r_[P.ravel(), heading]
    while True:
        # which unknowns each residual reads: p_k is columns 2k, 2k+1, h_k column 2n + k
        m = 3 + 3 * (n - 1) + 3 * len(kept)
        S = lil_matrix((m, 3 * n), dtype=np.int8)
        S[0, 0] = S[1, 1] = S[2, 2 * n] = 1
        r = 3
        for k in range(n - 1):
            for row in (r + 2 * k, r + 2 * k + 1):
                S[row, [2 * k, 2 * k + 1, 2 * k + 2, 2 * k + 3, 2 * n + k]] = 1
        r += 2 * (n - 1)
        for k in range(n - 1):
            S[r + k, [2 * n + k, 2 * n + k + 1]] = 1
        r += n - 1
        for e in kept:
            cols = [2 * e.i, 2 * e.i + 1, 2 * e.j, 2 * e.j + 1, 2 * n + e.i, 2 * n + e.j]
            for row in range(r, r + 3):
                S[row, cols] = 1
            r += 3
        sol = least_squares(
            _residuals,
            X,
            jac_sparsity=S.tocsr(),
            method="trf",
            x_scale="jac",
            args=(P[0], float(heading[0]), odo, kept, model),
        )
        p, h = sol.x[: 2 * n].reshape(n, 2), sol.x[2 * n :]
        chi2 = [float(np.sum(_edge_residual(p, h, e, model) ** 2)) for e in kept]
        if not chi2 or max(chi2) <= model.reject_chi2:
            return p, h, kept
        rounds += 1
        if rounds <= model.max_single_rejections:
            kept.pop(int(np.argmax(chi2)))
        else:  # many contradicted edges (a long walk through look-alike places): the rest at once
            kept = [e for e, c in zip(kept, chi2, strict=True) if c <= model.reject_chi2]


def apply(
    track: Track,
    frame: tuple[np.ndarray, np.ndarray, np.ndarray],
    P: np.ndarray,
    heading: np.ndarray,
    P_new: np.ndarray,
    heading_new: np.ndarray,
) -> Track:
    """``track`` with each row turned about the down axis by its heading's change and shifted on the
    ground by its position's (the module's step 5)."""
    e_x, down, e_z = frame
    B = np.c_[e_x, down, e_z]  # ground axes -> world
    delta = heading_new - heading
    c, s = np.cos(delta), np.sin(delta)
    Ry = np.zeros((len(delta), 3, 3))
    Ry[:, 0, 0], Ry[:, 0, 2], Ry[:, 1, 1], Ry[:, 2, 0], Ry[:, 2, 2] = c, s, 1.0, -s, c
    W = np.einsum("ij,njk,lk->nil", B, Ry, B)  # world rotation about down by delta (turns headings right)
    R = np.einsum("nij,nkj->nik", track.R, W)  # camera axes turned with the world: R W^T
    shift = P_new - P
    C = track.C + np.outer(shift[:, 0], e_x) + np.outer(shift[:, 1], e_z)
    return track.moved(R, C)


def close_loops(
    track: Track,
    features_of: Callable[[list[int]], dict[int, RigFeatures]],
    est: TwoViewPoseEstimator,
    yaws: dict[str, float],
    params: LoopParams,
    tol: float,
    camera_height: float | None,
    model: LoopModel | None = None,
) -> tuple[Track, LoopReport]:
    """``track`` with its loops closed (the module's docstring), and what was done.
    ``features_of(rows)``: the rig's features at those track rows (``twoview.rig_features``),
    computed in one pass over the views' frames. Without ``camera_height`` (the track's unit is
    not metres) or without candidates, the track comes back as it was."""
    model = model or LoopModel()
    report = LoopReport(found=[], kept=[])
    if not params.enabled:
        report.skipped = "pose.loops.enabled is false"
        return track, report
    if not camera_height:
        report.skipped = "pose.camera_height is not set: the track is not in metres"
        return track, report
    rows = track.valid_rows()
    if len(rows) < 3:
        report.skipped = "too few valid poses"
        return track, report
    frame = ground_frame(track)
    P, heading = ground_poses(track, frame)
    walked = np.r_[0.0, np.cumsum(np.linalg.norm(np.diff(P, axis=0), axis=1))]
    pairs = candidates(P, walked, rows, params, model)
    report.tried = len(pairs)
    if not pairs:
        return track, report
    feats = features_of(sorted({r for pair in pairs for r in pair}))
    found = []
    for i, j in pairs:
        if i not in feats or j not in feats:
            continue
        got = measure(est, feats[i], feats[j], yaws, float(heading[j] - heading[i]), params, model, tol, camera_height)
        if got is not None:
            found.append(LoopEdge(i, j, got[0], got[1], got[2]))
    report.found = found
    odo = odometry(P, heading, track.step_ok(), model)
    agreeing = [e for e in found if agrees_with_walk(odo, e, model)]
    if not agreeing:
        return track, report
    P_new, heading_new, kept = solve(P, heading, track.step_ok(), agreeing, model)
    report.kept = kept
    if not kept:
        return track, report
    return apply(track, frame, P, heading, P_new, heading_new), report


def loop_rows(source_id: str, track: Track, report: LoopReport) -> list[dict]:
    """schema.POSE_LOOPS rows: every revisit found, kept by the graph or not."""
    kept = {(e.i, e.j) for e in report.kept or []}
    return [
        {
            "source_id": source_id,
            "sample_index_a": int(track.sample_indices[e.i]),
            "time_a": float(track.times[e.i]),
            "sample_index_b": int(track.sample_indices[e.j]),
            "time_b": float(track.times[e.j]),
            "inliers": int(e.inliers),
            "turn_deg": math.degrees(e.turn),
            "offset_right_m": None if e.offset is None else e.offset[0],
            "offset_forward_m": None if e.offset is None else e.offset[1],
            "kept": (e.i, e.j) in kept,
        }
        for e in report.found or []
    ]
