"""Can the CPU pose backend's own matching recognise a place the walk comes back to? A measurement
for the pose stage's loop closure, from a finished run of the embedded sample.

The fused track drifts (``pose_track_error.py``): without its loops closed the sample's loop ends
metres from where the track says it began, which hides the revisit from reconciliation and from the
VPO visit reading. The pose stage matches moments far apart in time that show one place and closes
the loops on them (``stages/loops.py``). Whether the matching tells a revisit from a place merely
alike decides if that can work, and it is measured here: pairs of 2 FPS samples at least
``--min-gap-s`` apart, drawn per bin of the truth's distance between their cameras (``--per-bin``
each, seeded), every view of one matched against every view of the other as the pose stage
recovers a fast turn (``twoview.rig_rotation``: the rotation that maps the most bearings).
Prints, per bin:

    loop_pairs_<lo>_<hi>m: pairs N, inliers median (p10-p90), at least --min-inliers in K,
                           yaw error median (deg; the pairs found)

With ``--edges``, the revisits the pose stage itself found and closed (``stages/loops.py``, the
run's ``loops.parquet``) against the truth:

    loop_edges: found N, kept K; kept edges' cameras' truth distance median / max (m)
    loop_edges_offset_error_m: the measured offsets' error median / max (N measured)
    loop_edges_turn_error_deg: median / max

Usage: python bench/loop_closure.py DATA_ROOT [--source sample-walk] [--min-gap-s 20]
                                   [--per-bin 30] [--min-inliers 50] [--seed 0]
                                   [--edges]
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
    ap.add_argument("--edges", action="store_true", help="also the pose stage's own loop edges against the truth")
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
    if args.edges:
        loops = pte._read(os.path.join(args.root, "artifacts", "pose", args.source, "*", "loops.parquet"))
        edges_against_truth(loops, truth)
    return 0


def edges_against_truth(loops: list[dict], truth: list[dict]) -> None:
    """``--edges``: the module docstring's lines, printed."""
    times = np.array([p["time"] for p in truth])

    def at(t: float) -> dict:
        return truth[int(np.argmin(np.abs(times - t)))]

    kept = [e for e in loops if e["kept"]]
    dist, offset_err, turn_err = [], [], []
    for e in kept:
        a, b = at(e["time_a"]), at(e["time_b"])
        dx, dy = b["x"] - a["x"], b["y"] - a["y"]
        dist.append(math.hypot(dx, dy))
        h = math.radians(a["yaw_deg"])  # the truth's yaw: 0 = +y, positive right
        right, forward = dx * math.cos(h) - dy * math.sin(h), dx * math.sin(h) + dy * math.cos(h)
        if e["offset_right_m"] is not None:
            offset_err.append(math.hypot(e["offset_right_m"] - right, e["offset_forward_m"] - forward))
        turn_err.append(abs((e["turn_deg"] - (b["yaw_deg"] - a["yaw_deg"]) + 180.0) % 360.0 - 180.0))

    def mm(v: list[float]) -> str:
        return f"{np.median(v):.2f} / {max(v):.2f}" if v else "-"

    print(f"loop_edges: found {len(loops)}, kept {len(kept)}; kept edges' cameras' truth distance {mm(dist)}")
    print(f"loop_edges_offset_error_m: {mm(offset_err)} ({len(offset_err)} measured)")
    print(f"loop_edges_turn_error_deg: {mm(turn_err)}")


if __name__ == "__main__":
    raise SystemExit(main())
