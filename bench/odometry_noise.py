"""The pose track's error per 2 FPS step, on the training renders of bench_reconcile.py: the noise
model of the loop closure's odometry (``stages.loops.LoopModel``: step_sd_m, step_sd_frac,
step_turn_sd_deg) is read from here, and how often the walk check (``loops.agrees_with_walk``)
would reject a true relative pose is measured.

The tracks read are open ones, which no loop closure moved (``open_track``: the newest pose
output whose loops.parquet is absent, a pose stage before v6, or keeps no revisit,
``pose.loops.enabled: false``). For every step k -> k+1 of each seed's front-view track (the
source's, yaw 0) and of the truth at the same times, the step in camera k's ground axes (right,
forward) and the turn; their differences are the step's error. Printed:

    odometry_steps: N (seeds S)
    odometry_turn_sd_deg: the turn error's root mean square (median |error| in brackets)
    odometry_step_error_m_<lo>_<hi>: per bin of the true step length: the error's rms per axis
    odometry_step_sd_fit: a, b of sd = a + b x length, by maximum likelihood (Gaussian per axis)
    odometry_walk_check_lag_<n>: for pairs of moments n steps apart (one in 10), the true relative
        pose's squared Mahalanobis distance from what the walk predicts (``loops.predicted``, the
        noise above): its median (3 degrees of freedom: 2.37 if the model held) and the fraction
        beyond ``LoopModel.reject_chi2`` (0.001 if it held): true revisits the check would reject
        before the loop edge's own noise is added

The errors are heavy-tailed (most steps are right to centimetres, a few are off by a metre): the
fit's sd is a root mean square, the scale the pose graph spreads a loop's gap by, not a typical
step's error.

Usage: python bench/odometry_noise.py [--root build/bench_reconcile] [--seeds 1 ... 16] [--n-per-category 6]
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
import bench_reconcile as br  # noqa: E402  the bench folder goes on sys.path first
import pose_track_error as pte  # noqa: E402

from vsi_wild.stages import loops  # noqa: E402

BINS_M = (0.0, 0.05, 0.3, 0.6, 0.9, 2.0)
LAGS = (20, 60, 120, 200)  # steps between the two moments of the walk check's pairs


def open_track(A: str, source: str) -> str | None:
    """The newest pose output of a source whose track no loop closure moved: its loops.parquet is
    absent (a pose stage before v6) or keeps no revisit (``pose.loops.enabled: false``)."""
    for folder in sorted(glob.glob(f"{A}/pose/{source}/*/"), key=os.path.getmtime, reverse=True):
        loops = os.path.join(folder, "loops.parquet")
        if not os.path.exists(loops) or not any(pq.read_table(loops, columns=["kept"]).column("kept").to_pylist()):
            return os.path.join(folder, "poses.parquet")
    return None


def tracks(root: str, source: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """A source's open track (``open_track``) and the truth at its times: ground positions and
    headings (radians) of both."""
    A = os.path.join(root, "artifacts")
    path = open_track(A, source)
    if path is None:
        return None
    truth = pte._read(f"{A}/sample/{source}/*/truth_poses.parquet")
    t, P, yaw = pte.ground_track(pq.read_table(path).to_pylist(), f"{source}_front")
    P_true, yaw_true = pte.truth_track(truth, t)
    return P, np.radians(yaw), P_true, np.radians(yaw_true)


def step_errors(P: np.ndarray, h: np.ndarray, P_true: np.ndarray, h_true: np.ndarray) -> tuple:
    """(turn errors (radians), step errors (n, 2: right, forward), true step lengths) of a track."""
    est = loops.to_camera(h[:-1], np.diff(P, axis=0).T).T
    true = loops.to_camera(h_true[:-1], np.diff(P_true, axis=0).T).T
    return np.diff(h) - np.diff(h_true), est - true, np.linalg.norm(true, axis=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="build/bench_reconcile")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(br.TRAINING_SEEDS))
    ap.add_argument("--n-per-category", type=int, default=6)
    args = ap.parse_args()
    from scipy.optimize import minimize

    turns, errors, lengths, seeds = [], [], [], 0
    model = loops.LoopModel()
    gate: dict[int, list[float]] = {lag: [] for lag in LAGS}
    for seed in args.seeds:
        got = tracks(args.root, f"sample-bench-s{seed}-n{args.n_per_category}-w640")
        if got is None:
            print(f"# seed {seed}: no open track under {args.root} (see the docstring)", file=sys.stderr)
            continue
        seeds += 1
        turn_e, err_e, length_e = step_errors(*got)
        turns.append(turn_e)
        errors.append(err_e)
        lengths.append(length_e)
        P, h, P_true, h_true = got
        odo = loops.odometry(P, h, np.ones(len(P) - 1, dtype=bool), model)
        for lag in LAGS:
            for i in range(0, len(P) - lag, 10):
                j = i + lag
                z, cov = loops.predicted(odo, i, j)
                nu = z - np.r_[loops.to_camera(h_true[i], P_true[j] - P_true[i]), h_true[j] - h_true[i]]
                nu[2] = (nu[2] + math.pi) % (2 * math.pi) - math.pi
                gate[lag].append(float(nu @ np.linalg.solve(cov, nu)))
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
    for lag, d2 in gate.items():
        if d2:
            print(
                f"odometry_walk_check_lag_{lag}: pairs {len(d2)}, d2 median {np.median(d2):.1f}, "
                f"beyond reject_chi2 {np.mean(np.array(d2) > model.reject_chi2):.3f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
