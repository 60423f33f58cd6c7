"""Does a video tell its own pose drift? Each view video's drift per metre walked, as its one-object
pairs show it against the truth, beside what its layout alignments alone say.

Training seeds only (bench_reconcile.TRAINING_SEEDS, as bench/fit_reconcile.py reads them), poses as
twoview gives them. Per view video:

- ``truth``: the median, over the pairs of one object (by the truth) compared as the poses give them
  and placed at least 10 m of walk apart, of the spread their difference has beyond both covariances
  (per axis: sqrt(max(0, (|d|^2 - trace(cov)) / 2))), over the distance walked between the samples
  that placed them;
- ``alignments``: the same quantity measured by the video's layout alignments (``layout``): an
  alignment maps one clip's layout onto another's, so its displacement at its inliers' centre is
  the poses' drift over the walk between the two clips' placing samples. Each alignment is weighted
  by the association model's probability that it is right, 1 / (1 + F), F = 10^g x its false alarms
  (``ReconcileParams.chance_alignment_log10``), and the fitted drift rate q counts as one
  alignment's worth of prior: sqrt((q^2 + sum w r^2) / (1 + sum w)). No truth enters it.

Printed: each video's two figures (``--per-video``), then ``drift_videos``, the spread of
``truth`` over the videos (its 10th, 50th and 90th percentiles, against the one q every video is
given now), and ``drift_rank_correlation`` (Spearman's, ``truth`` against ``alignments``).

Usage: python bench/drift_per_video.py [--n-per-category 6] [--seeds 1 ... 16] [--per-video]
                                       [--root build/bench_reconcile]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_reconcile as br  # noqa: E402  the bench folder goes on sys.path first

MIN_WALKED = 10.0  # pairs and alignments placed closer than this say little about a rate per metre


def alignment_drift(alignments, instances, walked, params) -> float:
    """The drift per metre a view's layout alignments say, weighted by P(right), with q as one
    alignment's worth of prior."""
    by_key = {c.key: c for c in instances}
    num, den = params.drift_per_distance**2, 1.0
    for al in alignments.values():
        placed = [
            [by_key[k].where.sample for k in side if by_key[k].where is not None and by_key[k].where.sample is not None]
            for side in zip(*al.inliers, strict=True)
        ]
        if not all(placed):
            continue
        w = walked(*sorted(int(np.median(s)) for s in placed))
        if w < MIN_WALKED:
            continue
        c = np.array([al.centre.real, al.centre.imag])
        r2 = float(np.sum((al.apply(c) - c) ** 2)) / 2.0 / w**2
        ln_f = (params.chance_alignment_log10 + al.log10_nfa) * math.log(10.0)
        p_right = 1.0 / (1.0 + math.exp(min(ln_f, 700.0)))
        num, den = num + p_right * r2, den + p_right
    return math.sqrt(num / den)


def truth_drift(evidence, truth_of) -> float | None:
    """The median drift per metre of a view's one-object pairs compared as the poses give them."""
    rates = []
    for e in evidence:
        same = truth_of[e.a.key] == truth_of[e.b.key] and truth_of[e.a.key] >= 0
        if not same or e.d_poses is None or e.walked < MIN_WALKED:
            continue
        extra = (float(e.d_poses @ e.d_poses) - float(np.trace(e.cov_poses))) / 2.0
        rates.append(math.sqrt(max(extra, 0.0)) / e.walked)
    return float(np.median(rates)) if len(rates) >= 3 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(br.TRAINING_SEEDS))
    br.add_training_density_argument(ap)
    ap.add_argument("--per-video", action="store_true", help="print each video's two figures")
    ap.add_argument("--root", type=Path, default=br.REPO / "build" / "bench_reconcile")
    args = ap.parse_args()
    if not set(args.seeds) <= set(br.TRAINING_SEEDS):
        raise SystemExit(f"training seeds only ({br.TRAINING_SEEDS[0]}-{br.TRAINING_SEEDS[-1]})")

    from scipy.stats import spearmanr

    from vsi_wild.stages import reconcile as rc
    from vsi_wild.stages.reconcile import associate as asc
    from vsi_wild.store import Store
    from vsi_wild.tasks import metadata as tm

    params = rc.ReconcileParams()
    store = Store(args.root)
    rows = []
    for seed in args.seeds:
        config = br.bench_config(seed, args.n_per_category, 640, None, "none")
        views = br.prepared_views(store, config)
        if isinstance(views, dict):
            raise SystemExit(f"seed {seed}: {views}")
        for vi in views:
            instances = sorted(vi.instances(), key=lambda c: c.key)
            alignments, walked = rc.prepare(instances, params, vi.track, config.pose.ground_height())
            truth = truth_drift(asc.evidence(instances, alignments, walked, tm.appearance_of(config)), vi.truth_of)
            if truth is None:
                continue
            rows.append((vi.video_id, truth, alignment_drift(alignments, instances, walked, params), len(alignments)))
            if args.per_video:
                print(f"drift_{vi.video_id}: truth {truth:.4f}, alignments {rows[-1][2]:.4f} ({rows[-1][3]})")
    if len(rows) < 3:
        raise SystemExit("fewer than 3 videos with enough one-object pairs")
    truth = np.array([r[1] for r in rows])
    said = np.array([r[2] for r in rows])
    q10, q50, q90 = np.percentile(truth, [10, 50, 90])
    print(
        f"drift_videos: {len(rows)}, truth p10 {q10:.4f}, median {q50:.4f}, p90 {q90:.4f} "
        f"(q {params.drift_per_distance})"
    )
    print(f"drift_rank_correlation: {float(spearmanr(truth, said).statistic):.3f}")
    print(f"drift_alignments_median: {float(np.median(said)):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
