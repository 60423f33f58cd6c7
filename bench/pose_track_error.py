"""The fused pose track of the embedded sample against its truth, from a finished run's data root.

Reads artifacts/pose/<source>/*/poses.parquet (the front view's track = the source's, yaw 0)
and view_pose/view_poses.parquet (each view's independent estimate), and the sample's truth_poses.parquet;
the estimate's world is the first camera's axes, so it is put in the truth's world by the truth's
first pose (no fitting: errors accumulate as they do for the reconciler). Prints, per 2 FPS step,
nothing by default; with --steps the steps whose length or turn is off by more than --tol:

    track_position_error_m: median / p90 / max over the samples
    track_yaw_error_deg: median / p90 / max (absolute)
    track_step_length_error_m: median / p90 (|estimated - true| per step)
    track_step_turn_error_deg: median / p90 (per step)
    place_distance_error_frac: median / p90 / p95 / max of |estimated - true| distance between two
        moments at least --min-gap-s apart whose true distance lies within half to twice VPO's place
        radius (qa.vpo_min_position_frac of the extent), each distance a fraction of its own track's
        extent (the largest distance between two ground positions, as stages/qa/vpo.py takes it):
        the metadata's own error where VPO decides whether the walk came back to a place
        (qa.vpo_visit_error_frac is sized from it on the training renders)
    view_spread_step_error_spearman: over the steps, the rank correlation between the fused step
        length's error and the views' disagreement on that step (the sd of the four views' own
        lengths of it, each view scaled to the fused median step: view_poses.parquet), and the share
        of all length error in the tenth of steps the views disagree on most: whether the views'
        disagreement could tell the loop closure's pose graph which steps to trust less (its
        odometry noise is one model for every step, stages/loops.py LoopModel)

With ``--sources`` several sample sources (e.g. bench_reconcile's training renders) are pooled.

Usage: python bench/pose_track_error.py DATA_ROOT [--sources sample-walk ...] [--steps] [--tol 0.3]
"""

from __future__ import annotations

import argparse
import glob
import math
import os

import numpy as np
import pyarrow.parquet as pq
from scipy.stats import spearmanr

from vsi_wild.stages.qa.params import QAParams


def _read(pattern: str) -> list[dict]:
    """The file matching ``pattern`` (<root>/artifacts/<stage>/<unit>/*/<name>; <stage> may be a glob)
    whose key the unit's status row names current. A data root keeps the outputs of every version and
    config that ran, and the newest file need not be the last run's (a run that finds an older
    config's output cached writes nothing). Without a status row (a copied folder), the newest file."""
    from vsi_wild.store import Store

    paths = glob.glob(pattern)
    if not paths:
        raise SystemExit(f"no file matches {pattern}")
    current = []
    for path in paths:
        key_dir = os.path.dirname(path)
        unit_dir = os.path.dirname(key_dir)
        stage_dir = os.path.dirname(unit_dir)
        root = os.path.dirname(os.path.dirname(stage_dir))
        status = Store(root).read_status(os.path.basename(stage_dir), os.path.basename(unit_dir))
        if status is not None and status["state"] == "done" and status["key"] == os.path.basename(key_dir):
            current.append(path)
    return pq.read_table(max(current or paths, key=os.path.getmtime)).to_pylist()


def ground_track(rows: list[dict], video_id: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Times, ground-plane positions (x right, z forward of the first camera) and headings (degrees,
    positive right) of one video's poses."""
    rows = sorted((r for r in rows if r["video_id"] == video_id), key=lambda r: r["sample_index"])
    if not rows:
        raise SystemExit(f"no poses of {video_id}")
    E = np.array([r["extrinsics"] for r in rows]).reshape(-1, 3, 4)
    R = E[:, :, :3]
    C = -np.einsum("nji,nj->ni", R, E[:, :, 3])
    fwd = R[:, 2, :]  # the camera's z axis in the world
    yaw = np.degrees(np.unwrap(np.arctan2(fwd[:, 0], fwd[:, 2])))
    return np.array([r["time"] for r in rows]), C[:, [0, 2]], yaw


def truth_track(rows: list[dict], times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The truth's positions in its first camera's ground axes (x right, z forward) and headings
    relative to its first, at ``times``."""
    t = np.array([r["time"] for r in rows])
    x, y = np.array([r["x"] for r in rows]), np.array([r["y"] for r in rows])
    yaw = np.degrees(np.unwrap(np.radians([r["yaw_deg"] for r in rows])))
    h0 = math.radians(yaw[0])
    right = np.array([math.cos(h0), -math.sin(h0)])
    fwd = np.array([math.sin(h0), math.cos(h0)])
    d = np.c_[np.interp(times, t, x) - x[0], np.interp(times, t, y) - y[0]]
    return np.c_[d @ right, d @ fwd], np.interp(times, t, yaw) - yaw[0]


def place_distance_error(
    t: np.ndarray, P: np.ndarray, P_true: np.ndarray, radius_frac: float, min_gap_s: float
) -> np.ndarray:
    """|estimated - true| distance, each a fraction of its track's extent, of the pairs of moments at
    least ``min_gap_s`` apart whose true distance is within half to twice the place radius."""

    def extent(X: np.ndarray) -> float:  # the track's diameter
        return float(np.linalg.norm(X[:, None] - X[None], axis=2).max())

    i, j = np.triu_indices(len(t), 1)
    d = np.linalg.norm(P[i] - P[j], axis=1) / extent(P)
    d_true = np.linalg.norm(P_true[i] - P_true[j], axis=1) / extent(P_true)
    near = (np.abs(t[i] - t[j]) >= min_gap_s) & (d_true >= radius_frac / 2) & (d_true <= 2 * radius_frac)
    return np.abs(d - d_true)[near]


def view_tracks(views: list[dict], source: str) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each view's own track (``ground_track``) of ``source``, for the views view_poses.parquet holds."""
    present = {r["video_id"] for r in views}
    return {
        v: ground_track(views, f"{source}_{v}")
        for v in ("front", "right", "back", "left")
        if f"{source}_{v}" in present
    }


def view_spread(
    per_view: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], t: np.ndarray, step: np.ndarray
) -> np.ndarray:
    """Per step of the fused track (``step``: its lengths at times ``t``), the sd of the views' own
    lengths of it (``per_view``: ``view_tracks``), each view's scaled so that its median moving step
    is the fused track's."""
    target = float(np.median(step[step > 1e-9]))
    lengths = []
    for tv, Pv, _ in per_view.values():
        own = np.linalg.norm(np.diff(Pv, axis=0), axis=1)
        if len(tv) == len(t) and (own > 1e-9).any():
            lengths.append(own * target / float(np.median(own[own > 1e-9])))
    return np.std(np.array(lengths), axis=0) if len(lengths) >= 2 else np.zeros(len(step))


def stats(a: np.ndarray) -> str:
    return f"{np.median(a):.3f} / {np.percentile(a, 90):.3f} / {a.max():.3f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument(
        "--sources",
        nargs="+",
        default=["sample-walk"],
        help="the sample sources to measure, pooled (bench_reconcile's: sample-bench-s<seed>-n<count>-w640)",
    )
    ap.add_argument("--steps", action="store_true", help="list the steps off by more than --tol (one source)")
    ap.add_argument("--tol", type=float, default=0.3, help="metres (length) or degrees x 0.1 (turn)")
    ap.add_argument("--min-gap-s", type=float, default=30.0, help="place pairs: at least this far apart in time")
    a = ap.parse_args()
    A = f"{a.root}/artifacts"
    errors: dict[str, list[np.ndarray]] = {
        "position": [],
        "yaw": [],
        "length": [],
        "turn": [],
        "place": [],
        "spread": [],
    }
    for source in a.sources:
        truth = _read(f"{A}/sample/{source}/*/truth_poses.parquet")
        t, P, yaw = ground_track(_read(f"{A}/pose/{source}/*/poses.parquet"), f"{source}_front")
        P_true, yaw_true = truth_track(truth, t)
        pos_err = np.linalg.norm(P - P_true, axis=1)
        step = np.linalg.norm(np.diff(P, axis=0), axis=1)
        step_true = np.linalg.norm(np.diff(P_true, axis=0), axis=1)
        turn_err = np.abs(np.diff(yaw) - np.diff(yaw_true))
        errors["position"].append(pos_err)
        errors["yaw"].append(np.abs((yaw - yaw_true + 180.0) % 360.0 - 180.0))
        errors["length"].append(np.abs(step - step_true))
        errors["turn"].append(turn_err)
        errors["place"].append(place_distance_error(t, P, P_true, QAParams().vpo_min_position_frac, a.min_gap_s))
        # the view_pose stage's (a root built before the pose stage was split keeps them under pose/)
        per_view = view_tracks(_read(f"{A}/*pose/{source}/*/view_poses.parquet"), source)
        errors["spread"].append(view_spread(per_view, t, step))
        if a.steps and len(a.sources) == 1:
            for k in range(len(step)):
                if abs(step[k] - step_true[k]) > a.tol or turn_err[k] > 10 * a.tol:
                    vs = " ".join(f"{v[0]}{np.linalg.norm(tr[1][k + 1] - tr[1][k]):.2f}" for v, tr in per_view.items())
                    print(
                        f"  k{k}: step {step[k]:.2f} true {step_true[k]:.2f}  turn {np.diff(yaw)[k]:+.1f} true "
                        f"{np.diff(yaw_true)[k]:+.1f}  views {vs}  pos err {pos_err[k + 1]:.2f}"
                    )
    pooled = {k: np.concatenate(v) for k, v in errors.items()}
    print(f"track_position_error_m: {stats(pooled['position'])}  (median / p90 / max)")
    print(f"track_yaw_error_deg: {stats(pooled['yaw'])}")
    print(f"track_step_length_error_m: {stats(pooled['length'])}")
    print(f"track_step_turn_error_deg: {stats(pooled['turn'])}")
    spread, length = pooled["spread"], pooled["length"]
    top = spread >= np.percentile(spread, 90)
    print(
        f"view_spread_step_error_spearman: {spearmanr(length, spread).statistic:.3f}  "
        f"(the top tenth by spread holds {length[top].sum() / max(length.sum(), 1e-12):.3f} of the length error)"
    )
    place = pooled["place"]
    print(
        f"place_distance_error_frac: {np.median(place):.4f} / {np.percentile(place, 90):.4f} / "
        f"{np.percentile(place, 95):.4f} / {place.max():.4f}  (median / p90 / p95 / max, {len(place)} pairs)"
    )


if __name__ == "__main__":
    main()
