"""The pose track's error per 2 FPS step, on the training renders of bench_reconcile.py: the noise
model of the loop closure's odometry (``stages.loops.LoopModel``: step_sd_m, step_sd_frac,
step_turn_sd_deg) is read from here.

For every step k -> k+1 of each seed's front-view track (the source's, yaw 0) and of the truth at
the same times, the step in camera k's ground axes (right, forward) and the turn; their
differences are the step's error. Printed:

    odometry_steps: N (seeds S)
    odometry_turn_sd_deg: the turn error's root mean square (median |error| in brackets)
    odometry_step_error_m_<lo>_<hi>: per bin of the true step length: the error's rms per axis
    odometry_step_sd_fit: a, b of sd = a + b x length, by maximum likelihood (Gaussian per axis)

The errors are heavy-tailed (most steps are right to centimetres, a few are off by a metre): the
fit's sd is a root mean square, the scale the pose graph spreads a loop's gap by, not a typical
step's error. The tracks read are the pose stage's output, loops closed: a loop's correction per
step (its gap over its hundreds of steps, about a centimetre) is far below these errors.

Usage: python bench/odometry_noise.py [--root build/bench_reconcile] [--seeds 1 ... 16] [--n-per-category 6]
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_reconcile as br  # noqa: E402  the bench folder goes on sys.path first
import pose_track_error as pte  # noqa: E402

BINS_M = (0.0, 0.05, 0.3, 0.6, 0.9, 2.0)


def step_errors(root: str, source: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(turn errors (radians), step errors (n, 2: right, forward), true step lengths) of a source."""
    A = os.path.join(root, "artifacts")
    if not glob.glob(f"{A}/pose/{source}/*/poses.parquet"):
        return None
    truth = pte._read(f"{A}/sample/{source}/*/truth_poses.parquet")
    t, P, yaw = pte.ground_track(pte._read(f"{A}/pose/{source}/*/poses.parquet"), f"{source}_front")
    P_true, yaw_true = pte.truth_track(truth, t)
    h, h_true = np.radians(yaw), np.radians(yaw_true)

    def in_camera(heading: np.ndarray, d: np.ndarray) -> np.ndarray:
        c, s = np.cos(heading), np.sin(heading)
        return np.c_[c * d[:, 0] - s * d[:, 1], s * d[:, 0] + c * d[:, 1]]

    est = in_camera(h[:-1], np.diff(P, axis=0))
    true = in_camera(h_true[:-1], np.diff(P_true, axis=0))
    return np.diff(h) - np.diff(h_true), est - true, np.linalg.norm(true, axis=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="build/bench_reconcile")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(br.TRAINING_SEEDS))
    ap.add_argument("--n-per-category", type=int, default=6)
    args = ap.parse_args()
    from scipy.optimize import minimize

    turns, errors, lengths, seeds = [], [], [], 0
    for seed in args.seeds:
        got = step_errors(args.root, f"sample-bench-s{seed}-n{args.n_per_category}-w640")
        if got is None:
            print(f"# seed {seed}: no poses under {args.root} (run bench_reconcile.py first)", file=sys.stderr)
            continue
        seeds += 1
        turns.append(got[0])
        errors.append(got[1])
        lengths.append(got[2])
    if not seeds:
        raise SystemExit(f"{args.root}: none of the seeds has poses")
    turn, err, length = np.concatenate(turns), np.concatenate(errors), np.concatenate(lengths)
    print(f"odometry_steps: {len(length)} (seeds {seeds})")
    print(
        f"odometry_turn_sd_deg: {np.degrees(np.sqrt(np.mean(turn**2))):.3f} "
        f"(median |error| {np.degrees(np.median(np.abs(turn))):.3f})"
    )
    for lo, hi in zip(BINS_M, BINS_M[1:], strict=False):
        m = (length >= lo) & (length < hi)
        if m.any():
            rms = np.sqrt(np.mean(err[m] ** 2))
            print(f"odometry_step_error_m_{lo:g}_{hi:g}: steps {m.sum()}, rms per axis {rms:.3f}")

    def nll(x: np.ndarray) -> float:
        sd = abs(x[0]) + abs(x[1]) * length
        return float(np.sum(2.0 * np.log(sd) + (err**2).sum(axis=1) / (2.0 * sd**2)))

    a, b = np.abs(minimize(nll, [0.02, 0.05], method="Nelder-Mead").x)
    print(f"odometry_step_sd_fit: a {a:.3f} m, b {b:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
