"""Fit the association model's parameters (``stages.reconcile.associate.ASSOCIATE_PARAMS``) on the
bench's training seeds, and print them as the ``ReconcileParams`` defaults.

Only the training seeds (bench_reconcile.TRAINING_SEEDS, rendered as bench_reconcile renders them)
are read, at the noise levels given (default: none and moderate, pooled: the model must serve the
exact inputs of the sample and production-like ones). For every pair of one concept's clip
instances never seen together, its evidence (stages/reconcile/associate.py: ``evidence``, with the
instances located and the layouts aligned as reconciliation does) and whether the truth says it
is one object. Then:

1. the seven parameters of the log odds with a position term (position scale and tail, drift per
   distance walked, the prior's offset b0, how far a layout alignment's false alarms are trusted,
   the continuity and appearance weights) maximise the pairs' Bernoulli log-likelihood (logistic
   loss of the labels under the model's log odds; L-BFGS-B from the current defaults); then, those
   fixed, the offset without a position term (``unplaced_log_odds``) maximises it on the same
   pairs compared with the positions withheld (as ``use_positions: false`` compares them: no
   position term, the look-alikes counted over the whole clip);
2. with those, every training view is reconciled (the partition does not depend on the review
   threshold), and ``review_expected_errors`` (a decision is a review item when the answers the
   opposite decision changes, times the probability that it is wrong, reach it) is the smallest
   threshold, of a geometric grid, whose review items per view-minute on the training seeds at
   noise none are at most half of reconcile v11's on the same inputs (issue 30's budget for a
   reviewer's time; ``--v11``: a checkout of commit fcba453): the budget spent on the decisions
   expected to get the most answers wrong.

With ``--appearance open_clip`` the training seeds' segment stage embeds every clip instance's
crops with open_clip's image tower (the configured weights) and the appearance weight is fitted on
the embeddings' cosine; the printed parameters then belong to that setting (``segment.appearance:
open_clip``, the production default), not to the histogram's.

Usage: python bench/fit_reconcile.py --v11 PATH [--noise none moderate] [--seeds 1 ... 16] [--n-per-category 6]
                                    [--root build/bench_reconcile] [--appearance histogram|open_clip]
                                    [--models '{"open_clip_weights": PATH}']
                                    [--hold '{"NAME": VALUE}'] [--start '{"NAME": VALUE}']

``--hold`` keeps parameters at given values (to compare forms of the model by their fitted log loss
and answers); ``--start`` starts L-BFGS-B elsewhere than the defaults.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_reconcile as br  # noqa: E402  the bench folder goes on sys.path first

from vsi_wild.stages.reconcile.associate import ASSOCIATE_PARAMS  # noqa: E402

# the log odds' parameters; the review threshold is chosen after them, by its review budget
FITTED = tuple(k for k in ASSOCIATE_PARAMS if k != "review_expected_errors")
BOUNDS = {
    "position_scale": (0.05, 50.0),
    "position_tail": (0.3, 200.0),
    "drift_per_distance": (0.0, 1.0),
    "prior_log_odds": (-30.0, 30.0),
    "unplaced_log_odds": (-30.0, 30.0),
    "chance_alignment_log10": (-10.0, 10.0),
    "continuity_weight": (0.0, 50.0),
    "appearance_weight": (0.0, 100.0),
}


THRESHOLDS = tuple(float(x) for x in np.geomspace(0.02, 4.0, 24))


class P:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def views(seeds, levels, root, appearance="histogram", models=None, densities=(br.TRAINING_N_PER_CATEGORY,)):
    """(level, seed, ViewInputs, config) of every training view at each look-alike density,
    rendered if needed."""
    from vsi_wild.store import Store

    store = Store(root)
    for level in levels:
        for seed, n_per_category in ((s, n) for n in densities for s in seeds):
            config = br.bench_config(seed, n_per_category, 640, None, level, appearance, models)
            got = br.prepared_views(store, config)
            if isinstance(got, dict):
                raise SystemExit(f"seed {seed} ({level}): {got}")
            for vi in got:
                yield level, seed, vi, config


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--noise", nargs="+", default=["none", "moderate"], choices=("none", "moderate", "severe"))
    ap.add_argument("--seeds", type=int, nargs="+", default=list(br.TRAINING_SEEDS))
    br.add_training_density_argument(ap, several=True)
    ap.add_argument("--root", type=Path, default=br.REPO / "build" / "bench_reconcile")
    ap.add_argument(
        "--v11",
        type=Path,
        required=True,
        help="a checkout of commit fcba453 (reconcile v11): its review items per view-minute set the budget",
    )
    ap.add_argument(
        "--appearance",
        default="histogram",
        help="segment.appearance the parameters are fitted for: histogram (the CPU path) or an image "
        "embedder (open_clip: its weights from $VSI_WILD_WEIGHTS; the training seeds' segment stage "
        "embeds their crops with it)",
    )
    ap.add_argument(
        "--models", type=json.loads, default={}, help="models section settings (JSON), e.g. another open_clip_weights"
    )
    ap.add_argument(
        "--hold",
        type=json.loads,
        default={},
        help="parameters held at these values instead of fitted (JSON), to compare forms of the model: "
        "e.g. '{\"chance_alignment_log10\": 0}'",
    )
    ap.add_argument(
        "--start",
        type=json.loads,
        default={},
        help="start the fit from these values instead of the defaults (JSON): a drift rate's log-likelihood is "
        "flat at 0, where a rate defaulting to 0 would stay",
    )
    args = ap.parse_args()
    if set(args.hold) - set(FITTED) or set(args.start) - set(FITTED):
        raise SystemExit(
            f"--hold/--start: not fitted parameters: {sorted((set(args.hold) | set(args.start)) - set(FITTED))}"
        )
    if not set(args.seeds) <= set(br.TRAINING_SEEDS):
        raise SystemExit(
            f"fit on training seeds only ({br.TRAINING_SEEDS[0]}-{br.TRAINING_SEEDS[-1]}), "
            f"not {sorted(set(args.seeds) - set(br.TRAINING_SEEDS))}"
        )

    from scipy.optimize import minimize

    from vsi_wild.stages import model_errors as me
    from vsi_wild.stages import reconcile as rc
    from vsi_wild.stages.reconcile import associate as asc
    from vsi_wild.tasks import metadata as tm

    defaults = rc.ReconcileParams().model_copy(update={**args.start, **args.hold})
    data = []  # (level, seed, vi, config, instances, poses)
    evs, labels = [], []
    withheld_evs, withheld_labels = [], []  # the same pairs without positions
    no_positions = defaults.model_copy(update={"use_positions": False})
    read = []  # (video id, inputs fingerprint) of every training view, as bench_reconcile prints them
    for level, seed, vi, config in views(
        args.seeds, args.noise, args.root, args.appearance, args.models, args.n_per_category
    ):
        read.append((vi.video_id, vi.inputs_fingerprint))
        errs = config.model_errors
        poses = me.perturb_track(vi.track, errs.poses, me.rng_for(errs.seed, vi.video_id, "poses"))
        instances = sorted(vi.instances(), key=lambda c: c.key)
        alignments, walked = rc.prepare(instances, no_positions, poses, config.pose.ground_height())
        ev = asc.evidence(instances, alignments, walked, tm.appearance_of(config))
        withheld_evs += ev
        withheld_labels += [vi.truth_of[e.a.key] == vi.truth_of[e.b.key] for e in ev]
        alignments, walked = rc.prepare(instances, defaults, poses, config.pose.ground_height())
        ev = asc.evidence(instances, alignments, walked, tm.appearance_of(config))
        evs += ev
        labels += [vi.truth_of[e.a.key] == vi.truth_of[e.b.key] for e in ev]
        data.append((level, seed, vi, config, poses))
        print(
            f"# {level} seed {seed} ({config.sample.n_per_category} per category) {vi.view}: {len(ev)} pairs, "
            f"{len(alignments)} layout alignments",
            flush=True,
        )
    arrays = asc.EvidenceArrays.of(evs)
    withheld = asc.EvidenceArrays.of(withheld_evs)
    y = np.array(labels, dtype=float)
    y_withheld = np.array(withheld_labels, dtype=float)
    print(f"fit_inputs_fingerprint: {br.inputs_fingerprint(read)}")
    print(f"fit_pairs: {len(y)}")
    print(f"fit_pairs_same_object: {int(y.sum())}")
    print(f"fit_pairs_without_position_term: {int((~np.isfinite(arrays.d).all(axis=1)).sum())}")
    print(f"fit_pairs_positions_withheld: {len(y_withheld)}")

    def params_of(x) -> P:
        return P(**dict(zip(FITTED, x, strict=True)))

    def pair_loss(x, ev, labels) -> float:
        lo = asc.log_odds(asc.score(params_of(x), ev))
        return float(np.logaddexp(0.0, -(2 * labels - 1) * lo).sum())

    x0 = np.array([getattr(defaults, k) for k in FITTED])
    # stage 1 fits these; bu (stage 2) and the held ones stay at their values
    placed = np.array([k != "unplaced_log_odds" and k not in args.hold for k in FITTED])

    def with_placed(z) -> np.ndarray:
        x = x0.copy()
        x[placed] = z
        return x

    res = minimize(
        lambda z: pair_loss(with_placed(z), arrays, y),
        x0[placed],
        method="L-BFGS-B",
        bounds=[BOUNDS[k] for k, on in zip(FITTED, placed, strict=True) if on],
    )
    x1 = with_placed(res.x)
    print(f"fit_converged: {bool(res.success)} ({res.message})")
    print(f"fit_mean_log_loss: {res.fun / len(y):.4f} (at the defaults {pair_loss(x0, arrays, y) / len(y):.4f})")

    iu = FITTED.index("unplaced_log_odds")

    def withheld_loss(bu: float) -> float:
        x = x1.copy()
        x[iu] = bu
        return pair_loss(x, withheld, y_withheld)

    if "unplaced_log_odds" in args.hold:
        bu = float(x0[iu])
        print(f"fit_unplaced_held: {bu:.4g}")
    else:
        res_u = minimize(
            lambda z: withheld_loss(float(z[0])), x0[[iu]], method="L-BFGS-B", bounds=[BOUNDS["unplaced_log_odds"]]
        )
        bu = float(res_u.x[0])
        print(f"fit_unplaced_converged: {bool(res_u.success)} ({res_u.message})")
    x_fit = x1.copy()
    x_fit[iu] = bu
    fitted = dict(zip(FITTED, (float(v) for v in x_fit), strict=True))
    print(
        f"fit_mean_log_loss_positions_withheld: {withheld_loss(bu) / len(y_withheld):.4f} "
        f"(at the default bu {withheld_loss(float(x0[iu])) / len(y_withheld):.4f}; "
        f"at bu = b0 {withheld_loss(fitted['prior_log_odds']) / len(y_withheld):.4f})"
    )
    print("# the log odds' parameters: " + ", ".join(f"{k} {v:.4g}" for k, v in fitted.items()), flush=True)

    # the review threshold: reconcile every training view with the fitted parameters (the
    # partition does not depend on the threshold; the smallest one tried gives every margin it needs)
    params = defaults.model_copy(update={**fitted, "review_expected_errors": THRESHOLDS[0]})
    v11 = br.load_v11(args.v11)
    views_out, v11_items, minutes = [], 0, 0.0
    for level, _seed, vi, config, poses in data:
        rules = tm.answer_rules(config, vi.row)
        instances = vi.instances()
        by_key = {c.key: c for c in instances}
        concept_of = {c.key: c.concept for c in instances}
        result = rc.reconcile(
            vi.video_id,
            instances,
            vi.clips,
            params,
            poses,
            config.pose.ground_height(),
            rules,
            tm.appearance_of(config),
        )
        want = br.answers(br.truth_groups(sorted(by_key), concept_of, vi.truth_of), by_key, rules)
        views_out.append((level, vi, result, by_key, rules, br.voo_sets(want[1], config.qa.voo_min_gap_s), want))
        if level == "none":
            minutes += float(vi.row["duration_s"]) / 60.0
            old = [
                v11.ClipInstance(
                    c.clip, c.local, c.concept, c.first_time, c.last_time, c.appearance, c.mean_area, dict(c.samples)
                )
                for c in vi.instances()
            ]
            res = v11.reconcile(
                vi.video_id, old, vi.clips, v11.ReconcileParams(), poses, camera_height=config.pose.ground_height()
            )
            v11_items += sum(d["decision"] == "review" for d in res.decisions)
    if minutes == 0:
        raise SystemExit("the review threshold is fitted at noise none: include it in --noise")
    budget = v11_items / minutes / 2.0
    print(f"fit_v11_review_items_per_view_minute: {v11_items / minutes:.3f}")
    chosen = None
    for c in THRESHOLDS:
        tallies = {level: br.Tally() for level in args.noise}
        for level, vi, result, by_key, rules, sets, want in views_out:
            decisions = [
                {**d, "review": min(d["posterior"], 1 - d["posterior"]) * d["answer_impact"] >= c}
                for d in result.decisions
            ]
            tallies[level].add(br.measure(result.members, decisions, vi, by_key, rules, sets, want))
        line = []
        for level, t in tallies.items():
            v = t.v
            line.append(
                f"{level}: review items {v['review']:.0f}, silent false merges {v['silent_merges']:.0f}, "
                f"silent false splits {v['silent_splits']:.0f}, VOC auto {v['voc_auto'] / v['voc_total']:.4f} "
                f"reviewed {v['voc_reviewed'] / v['voc_total']:.4f}"
            )
        print(f"# review threshold {c:.3f}: " + "; ".join(line), flush=True)
        if chosen is None and tallies["none"].v["review"] / minutes <= budget:
            chosen = c
    fitted["review_expected_errors"] = chosen if chosen is not None else THRESHOLDS[-1]
    print("# ReconcileParams defaults (stages/reconcile/__init__.py):")
    for k in rc.ASSOCIATE_PARAMS:
        print(f"fit_{k}: {fitted[k]:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
