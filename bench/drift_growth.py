"""How far apart two sightings of one object are located, against the distance walked between them
and what the association model's covariance says; and where its confident wrong pairs come from.

Training seeds only (bench_reconcile.TRAINING_SEEDS, as bench/fit_reconcile.py reads them): every
pair of one concept's clip instances never seen together, located and its clips' layouts aligned as
reconciliation does (``stages.reconcile.associate.evidence``). For the pairs of one object compared
as the poses give them (no layout alignment), binned by the camera's path length between the
sightings: the median Mahalanobis distance under the propagated covariances alone, and the extra
per-axis standard deviation that brings the median squared distance to a 2-d Gaussian's (ln 4),
over the walked distance and over walked^1.5 (the first flat if the drift grows like walked, the
second if it grows like walked^1.5, as a heading random walk's does). For the pairs compared after a layout alignment,
how many lie in an alignment whose correspondences are mostly wrong by the truth (and how many of
the alignments accepted are), and the alignments' false alarms (log10 NFA) for right and wrong
ones. For the pairs of one object compared after a right alignment (not themselves one of its
correspondences, whose residuals the fit absorbed): the median Mahalanobis distance under the
covariance they are scored with (positions and alignment, no drift) and the extra per-axis standard
deviation it lacks, binned by the path walked inside the two clips from each sighting's placing
camera to the nearest inlier's: the drift a rigid layout fit leaves. Then, under the current
defaults (``ReconcileParams``), the pairs of two objects with log odds above 0 and 2 and the pairs
of one object below 0, by how they were compared; for the latter compared as the poses give them,
how many objects (by the truth, any concept) their two clips both located: what an alignment of
those clips could have used; and where three or more, the best proposal the layout test saw for
those clips (the same search with no false-alarm bound): its log10 NFA, and whether it is mostly
right by the truth.

Usage: python bench/drift_growth.py [--noise none] [--truth-poses] [--seeds 1 ... 16] [--n-per-category 6]
                                    [--root build/bench_reconcile] [--reconcile JSON]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_reconcile as br  # noqa: E402  the bench folder goes on sys.path first

BINS = (0.0, 1e-9, 5.0, 10.0, 20.0, 40.0, 80.0, 200.0, math.inf)
MEDIAN_CHI2_2 = math.log(4.0)  # the median of a 2-d standard Gaussian's squared norm


def _m2(d: np.ndarray, cov: np.ndarray, extra: float) -> np.ndarray:
    S = cov + extra * np.eye(2)[None]
    det = S[:, 0, 0] * S[:, 1, 1] - S[:, 0, 1] * S[:, 1, 0]
    return (S[:, 1, 1] * d[:, 0] ** 2 - 2 * S[:, 0, 1] * d[:, 0] * d[:, 1] + S[:, 0, 0] * d[:, 1] ** 2) / det


def _extra_variance(d: np.ndarray, cov: np.ndarray) -> float:
    """The per-axis variance that, added to every covariance, brings the median m^2 to ln 4."""
    from scipy.optimize import brentq

    def f(v: float) -> float:
        return float(np.median(_m2(d, cov, v))) - MEDIAN_CHI2_2

    return float(brentq(f, 0.0, 1e6)) if f(0.0) > 0 else 0.0


def _median_m(d: np.ndarray, cov: np.ndarray) -> float:
    return math.sqrt(float(np.median(_m2(d, cov, 0.0))))


def _share_right(inliers, truth_of: dict) -> float:
    """The share of an alignment's correspondences that the truth calls one object."""
    return float(np.mean([truth_of.get(a, -1) == truth_of.get(b, -2) for a, b in inliers]))


def _walked_to_inliers(by_key: dict, al, walked, e) -> tuple[float, bool]:
    """For a pair compared after the alignment ``al``: the path walked inside its first clip from
    the first sighting's placing camera to the nearest inlier's, plus the same in the second clip;
    and whether the pair is itself one of the alignment's correspondences. (nan, False) for a pair
    not aligned. ``by_key``: the view's instances by key."""
    from vsi_wild.stages.reconcile.associate import placed_at

    if not e.aligned or walked is None:
        return math.nan, False
    first, second = (e.a, e.b) if e.a.clip == al.clips[0] else (e.b, e.a)
    total = 0.0
    for side, x in ((0, first), (1, second)):
        s = placed_at(x, x.first_sample)
        refs = [placed_at(by_key[pair[side]], by_key[pair[side]].first_sample) for pair in al.inliers]
        total += min(walked(*sorted((s, r))) for r in refs)
    return total, (first.key, second.key) in al.inliers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    br.add_noise_argument(ap)
    ap.add_argument("--truth-poses", action="store_true", help="the truth's camera poses instead of twoview's")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(br.TRAINING_SEEDS))
    br.add_training_density_argument(ap)
    ap.add_argument("--root", type=Path, default=br.REPO / "build" / "bench_reconcile")
    ap.add_argument(
        "--reconcile",
        type=json.loads,
        default={},
        help="reconcile parameters to score with (JSON)",
    )
    args = ap.parse_args()
    if not set(args.seeds) <= set(br.TRAINING_SEEDS):
        raise SystemExit(f"training seeds only ({br.TRAINING_SEEDS[0]}-{br.TRAINING_SEEDS[-1]})")

    from vsi_wild.stages import model_errors as me
    from vsi_wild.stages import reconcile as rc
    from vsi_wild.stages.reconcile import associate as asc
    from vsi_wild.stages.reconcile import layout
    from vsi_wild.store import Store
    from vsi_wild.tasks import metadata as tm

    params = rc.ReconcileParams(**args.reconcile)
    store = Store(args.root)
    evs: list = []
    same: list[bool] = []
    wrong_alignment: list[bool] = []
    accepted = accepted_wrong = 0  # layout alignments accepted, and of them mostly wrong
    in_reach: list[tuple[float, bool]] = []  # per pair: walked within the clips to the alignment's inliers, an inlier
    shared: list[int] = []  # per pair: objects (by the truth) that both its clips located, any concept
    best_proposal: list[tuple[float, bool]] = []  # per pair: its clips' best layout proposal, log10 NFA and right
    for seed in args.seeds:
        config = br.bench_config(seed, args.n_per_category, 640, None, args.noise)
        views = br.prepared_views(store, config)
        if isinstance(views, dict):
            raise SystemExit(f"seed {seed}: {views}")
        for vi in views:
            errs = config.model_errors
            track = vi.truth_track if args.truth_poses else vi.track
            poses = me.perturb_track(track, errs.poses, me.rng_for(errs.seed, vi.video_id, "poses"))
            instances = sorted(vi.instances(), key=lambda c: c.key)
            alignments, walked = rc.prepare(instances, params, poses, config.pose.ground_height())
            bad = {k: _share_right(al.inliers, vi.truth_of) < 0.5 for k, al in alignments.items()}
            accepted += len(bad)
            accepted_wrong += sum(bad.values())
            view_evs = asc.evidence(instances, alignments, walked, tm.appearance_of(config))
            evs.extend(view_evs)
            by_key = {c.key: c for c in instances}
            located: dict[int, set] = {}
            for c in instances:
                if c.where is not None:
                    located.setdefault(c.clip, set()).add(vi.truth_of.get(c.key, ("unmatched", c.key)))
            # every clip pair's best proposal, accepted or not (no false-alarm bound)
            proposals = layout.align_clips(instances, math.inf)
            for e in view_evs:
                same.append(vi.truth_of[e.a.key] == vi.truth_of[e.b.key])
                key = (min(e.a.clip, e.b.clip), max(e.a.clip, e.b.clip))
                wrong_alignment.append(e.aligned and bad[key])
                in_reach.append(_walked_to_inliers(by_key, alignments.get(key), walked, e))
                shared.append(len(located.get(e.a.clip, set()) & located.get(e.b.clip, set())))
                pr = proposals.get(key)
                best_proposal.append(
                    (math.inf, False) if pr is None else (pr.log10_nfa, _share_right(pr.inliers, vi.truth_of) > 0.5)
                )
    ev = asc.EvidenceArrays.of(evs)
    y, bad_al = np.array(same), np.array(wrong_alignment)
    has = np.isfinite(ev.d).all(axis=1)
    print(f"drift_pairs: {len(y)} ({int(y.sum())} of one object)")
    plain = y & has & ~ev.aligned
    for lo, hi in zip(BINS, BINS[1:], strict=False):
        m = plain & (ev.walked >= lo) & (ev.walked < hi)
        if m.sum() < 5:
            continue
        v = _extra_variance(ev.d_poses[m], ev.cov_poses[m])
        walked = float(np.median(ev.walked[m]))
        print(
            f"drift_walked_{lo:g}_{hi:g}: pairs {int(m.sum())}, median walked {walked:.1f}, median m (covariances "
            f"alone) {math.sqrt(float(np.median(_m2(ev.d_poses[m], ev.cov_poses[m], 0.0)))):.2f}, extra sd "
            f"{math.sqrt(v):.2f}, over walked {math.sqrt(v) / max(walked, 1e-9):.4f}, over walked^1.5 "
            f"{math.sqrt(v) / max(walked, 1e-9) ** 1.5:.5f}"
        )
    al = has & ev.aligned
    print(f"drift_alignments: {accepted}, mostly wrong {accepted_wrong}")
    print(f"drift_aligned_pairs: {int(al.sum())}, in a mostly wrong alignment {int((al & bad_al).sum())}")
    for name, m in (("right", al & ~bad_al), ("wrong", al & bad_al)):
        if m.any():
            q = np.percentile(ev.alignment_log10_nfa[m], [10, 50, 90])
            print(f"drift_alignment_log10_nfa_{name}: p10 {q[0]:.1f}, median {q[1]:.1f}, p90 {q[2]:.1f}")
    # the aligned comparison's residual against the covariance it is scored with (alignment and
    # positions, no drift), binned by the path walked inside the two clips from each sighting's placing
    # camera to the nearest of the alignment's inliers: the drift a rigid layout fit does not remove
    reach = np.array([w for w, _ in in_reach])
    inlier = np.array([i for _, i in in_reach], dtype=bool)
    right = y & al & ~bad_al
    m = right & inlier
    if m.sum() >= 5:
        print(f"drift_aligned_inlier_pairs: {int(m.sum())}, median m {_median_m(ev.d[m], ev.cov[m]):.2f}")
    for lo, hi in zip(BINS, BINS[1:], strict=False):
        m = right & ~inlier & (reach >= lo) & (reach < hi)
        if m.sum() < 5:
            continue
        v = _extra_variance(ev.d[m], ev.cov[m])
        w = float(np.median(reach[m]))
        print(
            f"drift_aligned_reach_{lo:g}_{hi:g}: pairs {int(m.sum())}, median walked to the inliers {w:.1f}, "
            f"median m (alignment's covariance) {_median_m(ev.d[m], ev.cov[m]):.2f}, extra sd {math.sqrt(v):.2f}, "
            f"over walked {math.sqrt(v) / max(w, 1e-9):.4f}"
        )
    lo_ = asc.log_odds(asc.score(params, ev))
    for name, m in (("two_objects_above_0", ~y & (lo_ > 0)), ("two_objects_above_2", ~y & (lo_ > 2))):
        m = m & has
        print(
            f"drift_{name}: {int(m.sum())} (aligned {int((m & ev.aligned).sum())}, of them in a mostly wrong "
            f"alignment {int((m & bad_al).sum())}; as the poses give them {int((m & ~ev.aligned).sum())})"
        )
    m = y & has & (lo_ < 0)
    print(f"drift_one_object_below_0: {int(m.sum())} (aligned {int((m & ev.aligned).sum())})")
    # the ones compared as the poses give them: could a layout alignment have reached them (how many
    # objects their two clips both located), and did the test see one between those clips at all
    n_shared = np.array(shared)
    m = m & ~ev.aligned & ~ev.same_clip
    cuts = ((0, 2), (2, 3), (3, 5), (5, 10), (10, None))
    parts = ", ".join(
        f"{lo}+: {int((m & (n_shared >= lo)).sum())}"
        if hi is None
        else f"{lo}-{hi - 1}: {int((m & (n_shared >= lo) & (n_shared < hi)).sum())}"
        for lo, hi in cuts
    )
    print(f"drift_one_object_below_0_unaligned_by_shared_objects: {int(m.sum())} ({parts})")
    # of those whose clips share three or more: the best proposal the layout test rejected
    nfa = np.array([n for n, _ in best_proposal])
    right = np.array([r for _, r in best_proposal], dtype=bool)
    m = m & (n_shared >= 3)
    if m.any():
        found = m & np.isfinite(nfa)
        q = np.percentile(nfa[found], [10, 50, 90]) if found.any() else [math.nan] * 3
        print(
            f"drift_one_object_below_0_unaligned_rejected: {int(m.sum())}, "
            f"no proposal {int((m & ~found).sum())},"
            f" best proposal mostly right {int((m & right).sum())}, its log10 NFA p10 {q[0]:.1f}, median {q[1]:.1f},"
            f" p90 {q[2]:.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
