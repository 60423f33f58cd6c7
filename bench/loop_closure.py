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

Usage: python bench/loop_closure.py DATA_ROOT [--source sample-walk] [--min-gap-s 20]
                                   [--per-bin 30] [--min-inliers 50] [--seed 0]
"""

from __future__ import annotations

import argparse
import glob
import math
import os

import numpy as np

BINS_M = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, math.inf)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="data root of a finished run of a sample (its truth tables are read)")
    ap.add_argument("--source", default="sample-walk")
    ap.add_argument("--min-gap-s", type=float, default=20.0, help="pairs at least this far apart in time")
    ap.add_argument("--per-bin", type=int, default=30, help="pairs drawn per distance bin")
    ap.add_argument("--min-inliers", type=int, default=50, help="inliers that count as a place recognised")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from vsi_wild.stages import video_io
    from vsi_wild.stages.backends.twoview import TwoViewPoseEstimator, rig_rotation
    from vsi_wild.store import Store
    from vsi_wild.tasks.sample import load_truth

    folders = glob.glob(os.path.join(args.root, "artifacts", "project", args.source, "*", ""))
    if not folders:
        raise SystemExit(f"{args.root}: no projected views of {args.source} (run the pipeline first)")
    folder = max(folders, key=os.path.getmtime)
    yaws = {"front": 0.0, "right": 90.0, "back": 180.0, "left": 270.0}
    frames = {}
    for view in yaws:
        path = os.path.join(folder, f"{args.source}_{view}.mp4")
        frames[view] = {k: rgb for k, _t, _i, rgb in video_io.sampled_frames(path, 2.0)}
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
    est = TwoViewPoseEstimator(hfov_deg=90.0)
    for lo, hi in zip(BINS_M, BINS_M[1:], strict=False):
        idx = np.flatnonzero((dist >= lo) & (dist < hi))
        if not len(idx):
            continue
        idx = rng.choice(idx, size=min(args.per_bin, len(idx)), replace=False)
        inliers, yaw_err = [], []
        for x in idx:
            i, j = pairs[x]
            got = rig_rotation(
                est, {v: f[i] for v, f in frames.items()}, {v: f[j] for v, f in frames.items()}, yaws, min_inliers=8
            )
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
