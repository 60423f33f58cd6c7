"""Can the CPU pose backend's own matching recognise a place the walk comes back to? A measurement
for a loop closure the pose stage does not have yet, from a finished run of the embedded sample.

The fused track drifts (``pose_track_error.py``): the sample's loop ends metres from where the
track says it began, which hides the revisit from reconciliation and from the VPO visit reading.
A loop closure would match frames far apart in time that show one place and add their relative
pose to the track. Whether the matching tells a revisit from a place merely alike decides if that
can work, and it is measured here: pairs of 2 FPS samples at least ``--min-gap-s`` apart, drawn
per bin of the truth's distance between their cameras (``--per-bin`` each, seeded), every view of
one matched against every view of the other as the pose stage recovers a fast turn
(``twoview.rig_rotation``: the rotation that maps the most bearings). Prints, per bin:

    loop_pairs_<lo>_<hi>m: pairs N, inliers median (p10-p90), at least --min-inliers in K,
                           yaw error median (deg; the pairs found)

With ``--graph``, what closing the loops would do to the track, as a what-if (the pose stage does
not do it): the pairs at least ``--min-gap-s`` apart (every second sample) that the estimated track
itself puts within 2 m plus a tenth of the path walked between them (the search a drifting track
allows, no truth) are matched the same way; a pair reaching ``--min-inliers`` is a loop edge, "the
two cameras stand within ``--same-place-m`` of each other (sd), turned by the rig rotation (sd 2
degrees)". With the fused track's steps as odometry (sd 2 cm plus 5 % of the step, 0.3 degrees per
step: guesses, not fitted), the 2-D pose graph (positions and headings, the first sample fixed) is
solved by least squares, and the front view's track is compared with the truth before and after:

    loop_graph_edges: candidate pairs N, loop edges K, their cameras' truth distance median / max
    loop_graph_track_error_m: median / p90 / max, before -> after
    loop_graph_end_gap_m: the track's last position from its first, before -> after (truth: ...)

Usage: python bench/loop_closure.py DATA_ROOT [--source sample-walk] [--min-gap-s 20]
                                   [--per-bin 30] [--min-inliers 50] [--seed 0]
                                   [--graph [--same-place-m 1]]
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pose_track_error as pte  # noqa: E402  the bench folder goes on sys.path first

BINS_M = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, math.inf)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="data root of a finished run of a sample (its truth tables are read)")
    ap.add_argument("--source", default="sample-walk")
    ap.add_argument("--min-gap-s", type=float, default=20.0, help="pairs at least this far apart in time")
    ap.add_argument("--per-bin", type=int, default=30, help="pairs drawn per distance bin")
    ap.add_argument("--min-inliers", type=int, default=50, help="inliers that count as a place recognised")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--graph", action="store_true", help="also the track after a pose graph closed by the loops found")
    ap.add_argument("--same-place-m", type=float, default=1.0, help="--graph: a loop edge's position sd (metres)")
    args = ap.parse_args()

    from vsi_wild.stages import video_io
    from vsi_wild.stages.backends.twoview import TwoViewPoseEstimator, rig_rotation
    from vsi_wild.store import Store
    from vsi_wild.tasks.sample import load_truth

    folders = glob.glob(os.path.join(args.root, "artifacts", "project", args.source, "*", ""))
    if not folders:
        raise SystemExit(f"{args.root}: no projected views of {args.source} (run the pipeline first)")
    folder = max(folders, key=os.path.getmtime)
    views = pq.read_table(os.path.join(folder, "views.parquet")).to_pylist()
    yaws = {r["view"]: float(r["yaw_deg"]) for r in views}
    frames = {
        r["view"]: {k: rgb for k, _t, _i, rgb in video_io.sampled_frames(os.path.join(folder, r["path"]), 2.0)}
        for r in views
    }
    est = TwoViewPoseEstimator(hfov_deg=float(views[0]["hfov_deg"]))

    def match(i: int, j: int) -> tuple[np.ndarray, int] | None:
        """Every view at sample i against every view at sample j: the rig rotation and its inliers."""
        return rig_rotation(
            est, {v: f[i] for v, f in frames.items()}, {v: f[j] for v, f in frames.items()}, yaws, min_inliers=8
        )

    truth = sorted(load_truth(Store(args.root), args.source)["poses"].to_pylist(), key=lambda p: p["time"])
    times = np.array([p["time"] for p in truth])
    n = min(len(f) for f in frames.values())

    def pose_at(k: int) -> dict:
        return truth[int(np.argmin(np.abs(times - k / 2.0)))]

    gap = math.ceil(args.min_gap_s * 2)
    pairs = [(i, j) for i in range(n) for j in range(i + gap, n)]
    dist = np.array(
        [math.hypot(pose_at(i)["x"] - pose_at(j)["x"], pose_at(i)["y"] - pose_at(j)["y"]) for i, j in pairs]
    )
    rng = np.random.default_rng(args.seed)
    for lo, hi in zip(BINS_M, BINS_M[1:], strict=False):
        idx = np.flatnonzero((dist >= lo) & (dist < hi))
        if not len(idx):
            continue
        idx = rng.choice(idx, size=min(args.per_bin, len(idx)), replace=False)
        inliers, yaw_err = [], []
        for x in idx:
            i, j = pairs[x]
            got = match(i, j)
            inliers.append(0 if got is None else got[1])
            if got is not None and got[1] >= args.min_inliers:
                R = got[0]  # x_after = R x_before in the rig's camera axes (y down): its yaw about y
                yaw = math.degrees(math.atan2(R[0, 2], R[2, 2]))
                truth_turn = pose_at(j)["yaw_deg"] - pose_at(i)["yaw_deg"]
                yaw_err.append(abs((yaw + truth_turn + 180.0) % 360.0 - 180.0))
        q = np.percentile(inliers, [10, 50, 90])
        print(
            f"loop_pairs_{lo:g}_{hi:g}m: pairs {len(idx)}, inliers median {q[1]:.0f} ({q[0]:.0f}-{q[2]:.0f}), "
            f"at least {args.min_inliers} in {sum(v >= args.min_inliers for v in inliers)}, yaw error median "
            + (f"{np.median(yaw_err):.1f}" if yaw_err else "-"),
            flush=True,
        )
    if args.graph:
        fused = pte._read(os.path.join(args.root, "artifacts", "pose", args.source, "*", "poses.parquet"))
        close_loops(args, fused, truth, match, n)
    return 0


def _ground(heading: float, v: np.ndarray) -> np.ndarray:
    """A ground-plane vector (x right, z forward of the first camera) in the axes of a camera of
    that heading (radians, positive right): (right, forward)."""
    c, s = math.cos(heading), math.sin(heading)
    return np.array([c * v[0] - s * v[1], s * v[0] + c * v[1]])


def close_loops(args, fused, truth, match, n_samples: int) -> None:
    """``--graph``: the module docstring's what-if, printed (``match``: ``main``'s rig matching of
    two samples; ``n_samples``: the views' 2 FPS samples)."""
    from scipy.optimize import least_squares

    t, P, yaw = pte.ground_track(fused, f"{args.source}_front")
    P_true, _ = pte.truth_track(truth, t)
    heading = np.radians(yaw)
    n = min(len(t), n_samples)
    walked = np.r_[0.0, np.cumsum(np.linalg.norm(np.diff(P, axis=0), axis=1))]
    gap = math.ceil(args.min_gap_s * 2)
    tried, loops = 0, []
    for i in range(0, n, 2):
        for j in range(i + gap, n, 2):
            if np.linalg.norm(P[i] - P[j]) > 2.0 + 0.1 * (walked[j] - walked[i]):
                continue
            tried += 1
            got = match(i, j)
            if got is not None and got[1] >= args.min_inliers:
                R = got[0]  # x_after = R x_before: the camera turned by minus its yaw about y
                loops.append((i, j, -math.atan2(R[0, 2], R[2, 2])))
    odometry = [(_ground(heading[k], P[k + 1] - P[k]), heading[k + 1] - heading[k]) for k in range(n - 1)]

    def residuals(x: np.ndarray) -> np.ndarray:
        X = x.reshape(n, 3)
        out = [100.0 * (X[0] - np.r_[P[0], heading[0]])]
        for k, (step, turn) in enumerate(odometry):
            out.append((_ground(X[k, 2], X[k + 1, :2] - X[k, :2]) - step) / (0.02 + 0.05 * np.linalg.norm(step)))
            out.append([(X[k + 1, 2] - X[k, 2] - turn) / math.radians(0.3)])
        for i, j, turn in loops:
            out.append((X[j, :2] - X[i, :2]) / args.same_place_m)
            out.append([((X[j, 2] - X[i, 2] - turn + math.pi) % (2 * math.pi) - math.pi) / math.radians(2.0)])
        return np.concatenate([np.ravel(r) for r in out])

    X = least_squares(residuals, np.c_[P[:n], heading[:n]].ravel(), x_scale="jac").x.reshape(n, 3)

    def errors(Q: np.ndarray) -> str:
        e = np.linalg.norm(Q - P_true[:n], axis=1)
        return f"{np.median(e):.2f} / {np.percentile(e, 90):.2f} / {e.max():.2f}"

    dist = [float(np.linalg.norm(P_true[i] - P_true[j])) for i, j, _ in loops]
    print(
        f"loop_graph_edges: candidate pairs {tried}, loop edges {len(loops)}, their cameras' truth distance "
        + (f"{np.median(dist):.2f} / {max(dist):.2f}" if dist else "-")
    )
    print(f"loop_graph_track_error_m: {errors(P[:n])} -> {errors(X[:, :2])}")
    print(
        f"loop_graph_end_gap_m: {np.linalg.norm(P[n - 1] - P[0]):.2f} -> {np.linalg.norm(X[-1, :2] - X[0, :2]):.2f} "
        f"(truth {np.linalg.norm(P_true[n - 1] - P_true[0]):.2f})"
    )


if __name__ == "__main__":
    raise SystemExit(main())
