"""Are reconciliation's posteriors calibrated, and the provisional bound they feed? A measurement on
the training seeds only (bench_reconcile.TRAINING_SEEDS); it changes and fits nothing.

Each seed runs as bench_reconcile runs it (its renders, ``--noise`` level and ``--truth-poses``,
reconciliation as the reconcile stage runs it: ``tasks.metadata.reconcile_view``), and its decision
rows are read as the metadata stage writes them (``merge_decisions.parquet``, the partition's
posterior in context, and ``unreviewed_decisions.parquet``'s p_wrong = min(P, 1 - P), without
fixes): what the qa stage's bound consumes. A pair is one object when the truth maps both clip
instances to one object (``bench_reconcile.truth_of_clip_instances``, as fit_reconcile labels its
pairs). Printed, pooled over the seeds' views:

    calib_pairs, calib_pairs_same_object, calib_pairs_against_odds (the partition's decision is
        not the likelier one: then min(P, 1 - P) is not its probability of being wrong)
    calib_posterior_bin_LO_HI: the listed pairs with P(same) in [LO, HI): how many, their mean P,
        the fraction truly one object; calib_posterior_ece: the count-weighted |observed - mean P|
    calib_p_wrong_bin_LO_HI, calib_p_wrong_ece: the same for the decisions as taken, p_wrong
        against the fraction wrong; calib_decisions_expected_wrong / calib_decisions_wrong: sum of
        p_wrong against the number wrong (all, merged, apart)
    calib_bound_KIND_bin_LO_HI: the VOC questions (KIND total: the total question, one answer;
        stream: the stream question, wrong when any checkpoint's count is) by the bound
        ``provisional.answer_risk`` gives them (bench_reconcile.voc_questions, marked as the qa
        stage marks them): how many, the mean bound, the fraction wrong against the truth
        partition's answers; calib_bound_KIND_sum / calib_bound_KIND_wrong: the bounds' sum
        against the questions wrong
    calib_bound_KIND_expected_wrong_decisions: the bounds before the cap at 1 (the summed p_wrong
        of the decisions each question rests on: the expected number of them wrong, if the
        posteriors are calibrated); _wrong_decisions: how many of them are wrong; _with_a_wrong_
        decision: the questions with at least one; _wrong_without_a_wrong_decision: wrong
        questions none of whose summed decisions is wrong (what the bound cannot see);
        _wrong_unflagged: wrong and not provisional

So the bound's looseness splits into the posteriors' (expected against wrong decisions), Boole's
(wrong decisions against the questions with one) and the answers a wrong decision leaves right
(those questions against the wrong ones).

Usage: python bench/calibration_reconcile.py [--noise none|moderate|severe] [--seeds 1 ... 16] [--n-per-category 6]
                                             [--truth-poses] [--root build/bench_reconcile] [--bins 10]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_reconcile as br  # noqa: E402  the bench folder goes on sys.path first

P_WRONG_EDGES = (0.0, 0.001, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5)
BOUND_EDGES = (0.0, 0.01, 0.05, 0.2, 0.5, 1.0)


@dataclass(frozen=True)
class Bin:
    lo: float
    hi: float
    n: int
    mean_p: float  # nan where empty
    observed: float  # the fraction of outcomes that happened; nan where empty


def reliability(p, outcome, edges) -> list[Bin]:
    """The predictions ``p`` (probabilities) with their ``outcome`` (True: happened) binned by
    ``edges`` (increasing; [lo, hi), the last bin closed): per bin the count, the mean prediction
    and the observed frequency."""
    p = np.asarray(p, dtype=float)
    y = np.asarray(outcome, dtype=float)
    edges = np.asarray(edges, dtype=float)
    k = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, len(edges) - 2)
    out = []
    for i in range(len(edges) - 1):
        sel = k == i
        n = int(sel.sum())
        out.append(
            Bin(
                float(edges[i]),
                float(edges[i + 1]),
                n,
                float(p[sel].mean()) if n else float("nan"),
                float(y[sel].mean()) if n else float("nan"),
            )
        )
    return out


def ece(bins: list[Bin]) -> float:
    """Expected calibration error: the count-weighted mean of |observed - mean prediction|."""
    n = sum(b.n for b in bins)
    return sum(b.n * abs(b.observed - b.mean_p) for b in bins if b.n) / n if n else float("nan")


def bin_lines(name: str, bins: list[Bin], what: str) -> list[str]:
    return [f"{name}_bin_{b.lo:g}_{b.hi:g}: n {b.n}, mean {b.mean_p:.4f}, {what} {b.observed:.4f}" for b in bins] + [
        f"{name}_ece: {ece(bins):.4f}"
    ]


@dataclass
class Collected:
    posterior: list[float]
    same: list[bool]
    merged: list[bool]
    p_wrong: list[float]
    questions: list[tuple[bool, float, float, int, bool, bool]]  # total, bound, uncapped, wrong decisions, wrong, flag


def collect_view(vi: br.ViewInputs, config, track, out: Collected) -> None:
    """One view's decision rows and VOC questions, with the truth, into ``out``."""
    from vsi_wild.stages import fixes as fx
    from vsi_wild.stages import metadata as meta
    from vsi_wild.tasks import metadata as tm

    rules = tm.answer_rules(config, vi.row)
    instances = vi.instances()
    by_key = {c.key: c for c in instances}
    concept_of = {c.key: c.concept for c in instances}
    result = tm.reconcile_view(config, vi.video_id, vi.row, instances, vi.clips, track)
    rows = meta.unreviewed_decisions(
        result.decisions, result.members, fx.FixSet.empty(vi.video_id), result.members
    )  # no fix: every merge_decisions row, with its p_wrong
    for d in rows:
        same = vi.truth_of[(d["clip_a"], d["local_a"])] == vi.truth_of[(d["clip_b"], d["local_b"])]
        out.posterior.append(d["posterior"])
        out.same.append(same)
        out.merged.append(d["decision"] == "merge")
        out.p_wrong.append(d["p_wrong"])
    groups = br.truth_groups(sorted(by_key), concept_of, vi.truth_of)
    want = br.answers(groups, by_key, rules)
    members_groups: dict[int, list] = {}
    for m in result.members:
        members_groups.setdefault(m["instance_id"], []).append((int(m["clip_index"]), int(m["local_id"])))
    got = br.answers([sorted(g) for _, g in sorted(members_groups.items())], by_key, rules)
    for q in br.voc_questions(
        result.members,
        result.decisions,
        vi.video_id,
        by_key,
        rules,
        got[0],
        want[0],
        config.qa.provisional_risk,
    ):
        wrong_decisions = 0
        for r in q.carrying:
            a, b = r.sides
            wrong_decisions += r.joined != (vi.truth_of[a] == vi.truth_of[b])
        uncapped = float(sum(r.p_wrong for r in q.carrying))
        out.questions.append((q.total, q.risk, uncapped, wrong_decisions, any(q.wrong), q.provisional))


def report(c: Collected, bins: int) -> list[str]:
    post = np.array(c.posterior)
    same = np.array(c.same, dtype=bool)
    merged = np.array(c.merged, dtype=bool)
    p_wrong = np.array(c.p_wrong)
    wrong = merged != same
    lines = [
        f"calib_pairs: {len(post)}",
        f"calib_pairs_same_object: {int(same.sum())}",
        f"calib_pairs_merged: {int(merged.sum())}",
        f"calib_pairs_against_odds: {int(((post < 0.5) & merged).sum() + ((post > 0.5) & ~merged).sum())}",
    ]
    lines += bin_lines("calib_posterior", reliability(post, same, np.linspace(0.0, 1.0, bins + 1)), "same object")
    lines += bin_lines("calib_p_wrong", reliability(p_wrong, wrong, P_WRONG_EDGES), "wrong")
    for name, sel in (("", np.ones_like(merged)), ("_merged", merged), ("_apart", ~merged)):
        lines.append(f"calib_decisions{name}_expected_wrong: {p_wrong[sel].sum():.1f}")
        lines.append(f"calib_decisions{name}_wrong: {int(wrong[sel].sum())}")
    for kind, want_total in (("total", True), ("stream", False)):
        qs = [q for q in c.questions if q[0] == want_total]
        bound = np.array([q[1] for q in qs])
        q_wrong = np.array([q[4] for q in qs], dtype=bool)
        n_wrong_dec = np.array([q[3] for q in qs])
        name = f"calib_bound_{kind}"
        lines.append(f"{name}_questions: {len(qs)}")
        lines += bin_lines(name, reliability(bound, q_wrong, BOUND_EDGES), "wrong")
        lines += [
            f"{name}_sum: {bound.sum():.1f}",
            f"{name}_wrong: {int(q_wrong.sum())}",
            f"{name}_expected_wrong_decisions: {sum(q[2] for q in qs):.1f}",
            f"{name}_wrong_decisions: {int(n_wrong_dec.sum())}",
            f"{name}_with_a_wrong_decision: {int((n_wrong_dec > 0).sum())}",
            f"{name}_wrong_without_a_wrong_decision: {int((q_wrong & (n_wrong_dec == 0)).sum())}",
            f"{name}_wrong_unflagged: {sum(q[4] and not q[5] for q in qs)}",
        ]
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    br.add_noise_argument(ap)
    ap.add_argument("--seeds", type=int, nargs="+", default=list(br.TRAINING_SEEDS), help="training seeds only")
    br.add_training_density_argument(ap)
    ap.add_argument("--truth-poses", action="store_true", help="the truth's camera poses instead of twoview's")
    ap.add_argument("--root", type=Path, default=br.REPO / "build" / "bench_reconcile")
    ap.add_argument("--bins", type=int, default=10, help="equal-width bins of P(same)")
    args = ap.parse_args()
    if not set(args.seeds) <= set(br.TRAINING_SEEDS):
        raise SystemExit(
            f"training seeds only ({br.TRAINING_SEEDS[0]}-{br.TRAINING_SEEDS[-1]}), "
            f"not {sorted(set(args.seeds) - set(br.TRAINING_SEEDS))}"
        )

    from vsi_wild.store import Store

    store = Store(args.root)
    collected = Collected([], [], [], [], [])
    done = []
    for seed in args.seeds:
        config = br.bench_config(seed, args.n_per_category, 640, None, args.noise)
        views = br.prepared_views(store, config)
        if isinstance(views, dict):
            print(f"calib_seed{seed}: error {views}", file=sys.stderr)
            continue
        for vi in views:
            collect_view(vi, config, vi.truth_track if args.truth_poses else vi.track, collected)
        done.append(seed)
        print(f"# seed {seed}: {len(collected.posterior)} pairs so far", flush=True)
    print(f"calib_seeds: {' '.join(map(str, done))}")
    print("\n".join(report(collected, args.bins)))
    return 0 if done == args.seeds else 1


if __name__ == "__main__":
    sys.exit(main())
