"""Which clip instances are one object: one pairwise score, one global partition per concept.

For two instances of one concept that were never seen together, the log odds that they are one
object is a sum of named log-likelihood-ratio terms (``score``):

- ``llr_position``: how well their ground positions agree, -(nu + 2)/2 log(1 + m^2 / nu), m the
  Mahalanobis distance of their difference under S = kappa^2 (both covariances + the pose drift
  accumulated over the distance walked between the samples whose cameras placed the two
  positions, q x walked: ``Located.sample``): a Student-t's
  log-density ratio to a perfect match (nu: how heavy the location errors' tails are). Where the
  two clips' layouts were aligned (``layout``), the alignment is either right (the difference
  after it, under the alignment's uncertainty instead of the drift) or a chance alignment (the
  difference as the poses give it, with the drift), a mixture of the two with P(chance) = F / (1 +
  F), F = 10^g x the alignment's number of false alarms: g says how many more chance alignments
  the scenes' layouts give than the a-contrario test's null hypothesis (objects placed
  independently and uniformly) expects. The term is the mixture's log odds less the prior's (below, under the
  alignment's S);
- ``llr_prior``: the look-alike prior, b0 + log(1 / N +
  1 / (rho x 2 pi sqrt(det S))): N the concept's instances around the pair (the most one of the
  two clips shows within the median viewing range; its whole clip's for an instance without a
  place), rho = N over that disc. Where the match's uncertainty ellipse is small against the
  look-alikes' spacing a match says much; where it covers the look-alikes the odds fall to one
  in N: a match means little where look-alikes crowd or where the places are loose. b0 is fitted
  together with the position term, whose Student-t ratio to a perfect match is at most 0, so it
  carries that term's normalisation too; a pair without a position term (no poses, or an
  instance not located) has its own offset instead, bu - log N: bu is the log odds that two
  instances are one object when only the look-alike count is known;
- ``llr_continuity``: beta x the boxes' overlap when one was seen in the sample just before the
  other's first (across a cut, or a track that broke), each carried at its own image motion;
- ``llr_appearance``: a x (s - 1), s the appearance similarity: the colour histograms'
  Bhattacharyya coefficient (``appearance="histogram"``, the CPU path) or the cosine of the two
  instances' image embeddings (``"embedding"``: open_clip's image tower on their crops). Read as a
  likelihood ratio: if s is normally distributed with one spread for one object and for two, its
  log-likelihood ratio is linear in s, a x (s - s0); the offset -a x s0 lies in the prior's b0, so
  a is the one parameter the term adds (b0 is then the log odds at identical looks, s = 1), and
  both are fitted together with the descriptor in use. Null where either instance has no
  descriptor.

Each concept's instances are then partitioned by correlation clustering (``multicut``): the
partition maximising the summed log odds of the pairs it joins, never joining two instances seen
in one sample (the segmenter saw two objects). A pair's posterior is its odds in context (what the
partition loses when its decision is reversed); it is a review item when the answers the reversed
partition changes, times the probability that the decision is wrong, reach
``review_expected_errors``; the partition's decision stands meanwhile. The nine parameters are
``ASSOCIATE_PARAMS``, fitted by bench/fit_reconcile.py on the bench's training seeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from vsi_wild.stages.reconcile import answers as ans
from vsi_wild.stages.reconcile.instances import ClipInstance, box_iou
from vsi_wild.stages.reconcile.layout import Alignment
from vsi_wild.stages.reconcile.multicut import Partition
from vsi_wild.stages.segment import bhattacharyya

Appearance = Literal["histogram", "embedding"]  # what llr_appearance compares

ASSOCIATE_PARAMS = (
    "position_scale",
    "position_tail",
    "drift_per_distance",
    "prior_log_odds",
    "unplaced_log_odds",
    "chance_alignment_log10",
    "continuity_weight",
    "appearance_weight",
    "review_expected_errors",
)


class AssociateParams(Protocol):
    """What ``score`` and ``associate`` read (``ASSOCIATE_PARAMS``): ``ReconcileParams``, or the
    bench's fitted parameters."""

    @property
    def position_scale(self) -> float: ...
    @property
    def position_tail(self) -> float: ...
    @property
    def drift_per_distance(self) -> float: ...
    @property
    def prior_log_odds(self) -> float: ...
    @property
    def unplaced_log_odds(self) -> float: ...
    @property
    def chance_alignment_log10(self) -> float: ...
    @property
    def continuity_weight(self) -> float: ...
    @property
    def appearance_weight(self) -> float: ...
    @property
    def review_expected_errors(self) -> float: ...


TERMS = ("llr_position", "llr_prior", "llr_continuity", "llr_appearance")
TERM_WORDS = {
    "llr_position": "position",
    "llr_prior": "look-alike prior",
    "llr_continuity": "continuity",
    "llr_appearance": "appearance",
}


@dataclass
class Evidence:
    """What is measured of one pair (no parameter enters): ``a`` is the earlier instance."""

    a: ClipInstance
    b: ClipInstance
    same_clip: bool
    boundary: bool  # b's first sighting is the sample right after a's last
    box_iou: float | None  # their boxes' overlap there (carried at their image motion)
    appearance: float | None  # the histograms' Bhattacharyya coefficient, or the embeddings' cosine
    d: np.ndarray | None  # (2,) ground-plane difference (after the layout alignment, if any)
    cov: np.ndarray | None  # (2, 2) both positions' covariance (and the alignment's)
    walked: float  # camera path length between the samples that placed the two positions (pose units)
    aligned: bool  # measured after aligning the two clips' layouts
    alikes: int  # the concept's instances around the pair: the most one of the two clips shows within the
    # median viewing range of the instance's place (or in the whole clip, for an instance without one)
    density: float  # ... over the radius's disc: instances per unit area
    distance: float | None  # |d| over the mean viewing range
    d_poses: np.ndarray | None = None  # (2,) the difference as the poses give it (no alignment)
    cov_poses: np.ndarray | None = None  # (2, 2) both positions' covariance without the alignment's
    alignment_log10_nfa: float | None = None  # the alignment's number of false alarms (log10), if aligned


def _cut_iou(a: ClipInstance, b: ClipInstance) -> float:
    """Overlap of a's last box and b's first, as they are or with one carried one sample on at its
    own image motion: an object near the camera moves far between two 2 FPS samples."""
    ka, kb = a.last_sample, b.first_sample
    box_a, box_b = np.asarray(a.samples[ka].box), np.asarray(b.samples[kb].box)
    ious = [box_iou(box_a, box_b)]
    if ka - 1 in a.samples:
        ious.append(box_iou(2 * box_a - np.asarray(a.samples[ka - 1].box), box_b))
    if kb + 1 in b.samples:
        ious.append(box_iou(box_a, 2 * box_b - np.asarray(b.samples[kb + 1].box)))
    return float(max(ious))


def appearance_similarity(a: ClipInstance, b: ClipInstance, appearance: Appearance) -> float | None:
    """How alike two instances look: the colour histograms' Bhattacharyya coefficient (0..1), or
    their image embeddings' cosine (-1..1); None where either lacks the descriptor."""
    if appearance == "embedding":
        if a.embedding is None or b.embedding is None or not a.embedding.size or not b.embedding.size:
            return None
        na, nb = float(np.linalg.norm(a.embedding)), float(np.linalg.norm(b.embedding))
        return float(a.embedding @ b.embedding) / (na * nb) if na > 0 and nb > 0 else None
    if a.appearance.size and b.appearance.size and a.appearance.sum() > 0 and b.appearance.sum() > 0:
        return bhattacharyya(a.appearance, b.appearance)
    return None


def placed_at(c: ClipInstance, default: int) -> int:
    """The sample whose camera placed ``c`` (``Located.sample``), ``default`` where not recorded."""
    return default if c.where is None or c.where.sample is None else c.where.sample


def co_visible(a: ClipInstance, b: ClipInstance) -> bool:
    """Seen in one sample: two objects (the cannot-link)."""
    return a.clip == b.clip and not a.samples.keys().isdisjoint(b.samples.keys())


def evidence(
    instances: Sequence[ClipInstance],
    alignments: dict[tuple[int, int], Alignment],
    walked: Callable[[int, int], float] | None,
    appearance: Appearance = "histogram",
) -> list[Evidence]:
    """The evidence of every pair of one concept's instances that were never seen together, in key
    order (``a`` the one seen first). ``walked(k0, k1)``: camera path length between two samples;
    ``appearance``: which descriptor ``appearance_similarity`` compares."""
    by_concept: dict[str, list[ClipInstance]] = {}
    for ci in sorted(instances, key=lambda c: c.key):
        by_concept.setdefault(ci.concept, []).append(ci)
    located = [c.where.range for c in instances if c.where is not None and c.where.how != "ray"]
    radius = float(np.median(located)) if located else 0.0
    out = []
    for concept in sorted(by_concept):
        items = by_concept[concept]
        per_clip: dict[int, list[ClipInstance]] = {}
        for c in items:
            if c.where is not None:
                per_clip.setdefault(c.clip, []).append(c)

        in_clip: dict[int, int] = {}
        for c in items:
            in_clip[c.clip] = in_clip.get(c.clip, 0) + 1

        def crowd(
            x: ClipInstance, in_clip: dict[int, int] = in_clip, per_clip: dict[int, list[ClipInstance]] = per_clip
        ) -> int:
            """Look-alikes around x: within the radius of its place, or its whole clip's without one."""
            if radius <= 0 or x.where is None:
                return in_clip[x.clip]
            return sum(
                1
                for o in per_clip.get(x.clip, ())
                if o.where is not None and np.linalg.norm(o.where.xy - x.where.xy) <= radius
            )

        for i, x in enumerate(items):
            for y in items[i + 1 :]:
                if co_visible(x, y):
                    continue
                a, b = (x, y) if (x.first_sample, x.key) <= (y.first_sample, y.key) else (y, x)
                boundary = b.first_sample == a.last_sample + 1
                app = appearance_similarity(a, b, appearance)
                d = cov = dist = d_poses = cov_poses = nfa = None
                dist_walked, aligned = 0.0, False
                if a.where is not None and b.where is not None:
                    key = (min(a.clip, b.clip), max(a.clip, b.clip))
                    al = alignments.get(key)
                    first, second = (a.where, b.where) if a.clip == key[0] else (b.where, a.where)
                    d_poses = d = a.where.xy - b.where.xy
                    cov_poses = cov = a.where.cov + b.where.cov
                    if walked is not None:
                        dist_walked = walked(*sorted((placed_at(a, a.last_sample), placed_at(b, b.first_sample))))
                    if al is not None and a.clip != b.clip:
                        J = al.jacobian
                        d = al.apply(first.xy) - second.xy
                        cov = J @ first.cov @ J.T + second.cov + al.cov_at(first.xy)
                        aligned, nfa = True, float(al.log10_nfa)
                    dist = float(np.linalg.norm(d)) / max((a.where.range + b.where.range) / 2.0, 1e-9)
                alikes = max(1, crowd(a), crowd(b))
                density = alikes / (math.pi * radius**2) if radius > 0 else 1.0
                out.append(
                    Evidence(
                        a,
                        b,
                        a.clip == b.clip,
                        boundary,
                        _cut_iou(a, b) if boundary else None,
                        app,
                        d,
                        cov,
                        dist_walked,
                        aligned,
                        alikes,
                        density,
                        dist,
                        d_poses,
                        cov_poses,
                        nfa,
                    )
                )
    return out


@dataclass(frozen=True)
class EvidenceArrays:
    """``Evidence`` of many pairs as arrays (nan where a measurement does not apply)."""

    d: np.ndarray  # (n, 2)
    cov: np.ndarray  # (n, 2, 2)
    walked: np.ndarray
    aligned: np.ndarray
    density: np.ndarray
    alikes: np.ndarray
    same_clip: np.ndarray
    box_iou: np.ndarray
    appearance: np.ndarray
    d_poses: np.ndarray  # (n, 2)
    cov_poses: np.ndarray  # (n, 2, 2)
    alignment_log10_nfa: np.ndarray  # -inf where not aligned

    @classmethod
    def of(cls, ev: Sequence[Evidence]) -> EvidenceArrays:
        n = len(ev)
        d, d_poses = np.full((n, 2), np.nan), np.full((n, 2), np.nan)
        cov, cov_poses = np.full((n, 2, 2), np.nan), np.full((n, 2, 2), np.nan)
        for i, e in enumerate(ev):
            if e.d is not None:
                d[i], cov[i] = e.d, e.cov
            if e.d_poses is not None:
                d_poses[i], cov_poses[i] = e.d_poses, e.cov_poses

        def f(v: float | None) -> float:
            return np.nan if v is None else float(v)

        return cls(
            d,
            cov,
            np.array([e.walked for e in ev], dtype=float),
            np.array([e.aligned for e in ev], dtype=bool),
            np.array([e.density for e in ev], dtype=float),
            np.array([e.alikes for e in ev], dtype=float),
            np.array([e.same_clip for e in ev], dtype=bool),
            np.array([f(e.box_iou) for e in ev]),
            np.array([f(e.appearance) for e in ev]),
            d_poses,
            cov_poses,
            np.array([-np.inf if e.alignment_log10_nfa is None else e.alignment_log10_nfa for e in ev], dtype=float),
        )


def _match(
    p: AssociateParams, d: np.ndarray, cov: np.ndarray, drift_var: np.ndarray, ev: EvidenceArrays
) -> tuple[np.ndarray, np.ndarray]:
    """The Student-t's log-density ratio to a perfect match of the differences ``d`` under S =
    kappa^2 (cov + drift_var I), and the prior's density part log(1 + N / (rho 2 pi sqrt(det S)));
    0 where a difference is missing."""
    kappa2, nu = p.position_scale**2, p.position_tail
    S = kappa2 * (cov + drift_var[:, None, None] * np.eye(2)[None])
    has = np.isfinite(d).all(axis=1)
    det = np.where(has, S[:, 0, 0] * S[:, 1, 1] - S[:, 0, 1] * S[:, 1, 0], 1.0)
    det = np.maximum(np.nan_to_num(det, nan=1.0), 1e-300)
    dx, dy = np.nan_to_num(d[:, 0]), np.nan_to_num(d[:, 1])
    m2 = (S[:, 1, 1] * dx * dx - 2 * S[:, 0, 1] * dx * dy + S[:, 0, 0] * dy * dy) / det
    position = np.where(has, -(nu + 2.0) / 2.0 * np.log1p(np.nan_to_num(m2, nan=np.inf, posinf=np.inf) / nu), 0.0)
    density = np.where(has, np.log1p(ev.alikes / (ev.density * 2.0 * math.pi * np.sqrt(det))), 0.0)
    return position, density


def score(p: AssociateParams, ev: EvidenceArrays) -> dict[str, np.ndarray]:
    """The named terms of every pair (nan where a term does not apply) under the parameters ``p``
    (an object with the ``ASSOCIATE_PARAMS`` attributes); their nan-sum is the log odds."""
    has = np.isfinite(ev.d).all(axis=1)
    aligned = ev.aligned & has
    # as the poses give it: the drift over the distance walked between the cameras that placed them
    pos_poses, dens_poses = _match(p, ev.d_poses, ev.cov_poses, (p.drift_per_distance * ev.walked) ** 2, ev)
    # after the alignment: its uncertainty instead of the drift
    pos_aligned, dens_aligned = _match(p, ev.d, ev.cov, np.zeros(len(has)), ev)
    # P(chance alignment) = F / (1 + F), F = 10^g x the alignment's false alarms
    ln_f = np.where(aligned, (p.chance_alignment_log10 + ev.alignment_log10_nfa) * math.log(10.0), -np.inf)
    log_chance, log_right = ln_f - np.logaddexp(0.0, ln_f), -np.logaddexp(0.0, ln_f)
    mixed = np.logaddexp(log_right + pos_aligned + dens_aligned, log_chance + pos_poses + dens_poses)
    density = np.where(aligned, dens_aligned, dens_poses)
    position = np.where(has, np.where(aligned, mixed - dens_aligned, pos_poses), np.nan)
    # b0 goes with the position term (it carries that term's normalisation); bu stands without one
    prior = np.where(has, p.prior_log_odds + density, p.unplaced_log_odds) - np.log(ev.alikes)
    continuity = p.continuity_weight * ev.box_iou  # nan where not a boundary pair
    appearance = p.appearance_weight * (ev.appearance - 1.0)
    return {"llr_position": position, "llr_prior": prior, "llr_continuity": continuity, "llr_appearance": appearance}


def log_odds(terms: dict[str, np.ndarray]) -> np.ndarray:
    return np.nansum(np.stack([terms[t] for t in TERMS]), axis=0)


def _posterior(lo: float) -> float:
    return 1.0 / (1.0 + math.exp(-lo)) if lo > -700 else 0.0


@dataclass
class Decided:
    """One pair's decision row before it is written (``row``)."""

    ev: Evidence
    terms: dict[str, float | None]
    log_odds: float
    posterior: float
    merged: bool
    review: bool
    answer_impact: int

    def reason(self) -> str:
        parts = [
            f"{TERM_WORDS[t]} {v:+.1f}"
            for t, v in sorted(self.terms.items(), key=lambda kv: -abs(kv[1] or 0))
            if v is not None
        ]
        out = ", ".join(parts) + (": merged" if self.merged else ": left apart")
        if self.review:
            out += f"; for review (P(same) {self.posterior:.2f})"
        return out

    def row(self, video_id: str) -> dict:
        a, b = self.ev.a, self.ev.b
        if (b.clip, b.local) < (a.clip, a.local):
            a, b = b, a
        return {
            "video_id": video_id,
            "concept": a.concept,
            "clip_a": a.clip,
            "local_a": a.local,
            "clip_b": b.clip,
            "local_b": b.local,
            "decision": "merge" if self.merged else "apart",
            "review": bool(self.review),
            "log_odds": float(self.log_odds),
            "posterior": float(self.posterior),
            **{t: self.terms.get(t) for t in TERMS},
            "answer_impact": int(self.answer_impact),
            "reason": self.reason(),
            "boundary": bool(self.ev.boundary),
            "box_iou": self.ev.box_iou,
            "appearance": self.ev.appearance,
            "distance": self.ev.distance,
        }


def associate(
    instances: Sequence[ClipInstance],
    alignments: dict[tuple[int, int], Alignment],
    walked: Callable[[int, int], float] | None,
    params: AssociateParams,
    rules: ans.AnswerRules,
    exact_max: int = 40,
    min_posterior: float = 1e-3,
    appearance: Appearance = "histogram",
) -> tuple[list[list[ClipInstance]], list[Decided]]:
    """The global instances (each a list of clip instances) and the decided pairs.

    A pair's posterior is its odds in context: the logistic of how much the partition's summed log
    odds drop when its decision is reversed (the best partition that reverses it, every other
    decision free), so a weak pair that stronger ones already join is sure, and a strong one that
    a stronger rival contradicts is not. Its ``answer_impact`` is how many answers that reversed
    partition changes, and it is a review item when the answers it is expected to get wrong,
    min(P, 1 - P) x answer_impact, reach ``review_expected_errors``. For two instances that no
    chain of positive log odds connects, reversing costs at least the pair's own log odds: where
    even the most answers a decision can change could not make it a review item at those odds,
    its own log odds stand for the margin. Pairs whose posterior is below ``min_posterior`` and
    that are apart are not recorded. ``appearance``: what the appearance term compares (``evidence``)."""
    ev = evidence(instances, alignments, walked, appearance)
    terms = score(params, EvidenceArrays.of(ev)) if ev else {t: np.zeros(0) for t in TERMS}
    lo = log_odds(terms) if ev else np.zeros(0)
    items = sorted(instances, key=lambda c: c.key)
    index = {c.key: i for i, c in enumerate(items)}
    weight = {}
    for e, w in zip(ev, lo, strict=True):
        i, j = sorted((index[e.a.key], index[e.b.key]))
        weight[(i, j)] = float(w)
    cannot = [
        (i, j)
        for i in range(len(items))
        for j in range(i + 1, len(items))
        if items[i].concept == items[j].concept and co_visible(items[i], items[j])
    ]
    part = Partition(len(items), weight, cannot, exact_max)
    by_label: dict[int, list[int]] = {}
    for i, lab in enumerate(part.labels):
        by_label.setdefault(lab, []).append(i)
    groups = [[items[i] for i in by_label[k]] for k in sorted(by_label)]

    def concept_groups(labels_of_flip: list[list[int]] | None, concept: str, touched: set[int]) -> list:
        """The concept's groups with the flipped part (over ``touched`` items) in place."""
        kept = [g for g in groups if g[0].concept == concept and not any(index[c.key] in touched for c in g)]
        return kept + [[items[i] for i in g] for g in (labels_of_flip or [])]

    voc = ans.voc_answers(groups, rules)
    times = ans.concept_times(groups, rules)
    # the most answers one decision can change: every checkpoint and the total, every order
    most = len(rules.checkpoints()) + 1 + 2 * max(len(times) - 1, 0)
    sure = math.log(params.review_expected_errors / most) if params.review_expected_errors < most else 0.0
    decided = []
    for k, e in enumerate(ev):
        i, j = sorted((index[e.a.key], index[e.b.key]))
        merged = part.labels[i] == part.labels[j]
        same_component = part.component_of[i] == part.component_of[j]
        if merged or same_component or lo[k] > sure:
            margin, flipped = part.margin(i, j)
        else:
            margin, flipped = float(lo[k]), None
        post = _posterior(margin)
        if post < min_posterior and not merged:
            continue
        if flipped is None:  # the opposite decision: their two groups joined
            gi = [g for g in groups if e.a in g][0]
            gj = [g for g in groups if e.b in g][0]
            touched = {index[c.key] for c in gi + gj}
            flipped_groups = concept_groups([sorted(touched)], e.a.concept, touched)
        else:
            touched = {x for g in flipped for x in g}
            flipped_groups = concept_groups(flipped, e.a.concept, touched)
        new_voc = ans.voc_answers(flipped_groups, rules).get(e.a.concept, [])
        old_voc = voc[e.a.concept]
        impact = sum(x != y for x, y in zip(old_voc, new_voc, strict=False)) + (
            old_voc[-1] != new_voc[-1] if new_voc else 1
        )
        impact += ans.order_flips(times, e.a.concept, ans.concept_times(flipped_groups, rules).get(e.a.concept))
        decided.append(
            Decided(
                e,
                {t: (None if math.isnan(terms[t][k]) else float(terms[t][k])) for t in TERMS},
                float(lo[k]),
                post,
                merged,
                min(post, 1.0 - post) * impact >= params.review_expected_errors,
                impact,
            )
        )
    return groups, decided
