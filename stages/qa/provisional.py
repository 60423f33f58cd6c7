"""Which questions rest on reconciliation decisions that no person has reviewed yet.

Reconciliation decides, for every compared pair of one concept's clip instances, whether they are
one object, with a posterior P (``schema.MERGE_DECISIONS``); the metadata takes the more likely
decision, and leaves for review the pairs whose expected wrong answers reach
``review_expected_errors``. The metadata stage lists the decisions no fix has resolved
(``schema.UNREVIEWED_DECISIONS``; the review items among them also in ``schema.REVIEW_PENDING``).

A **VOC** question is provisional when its concept has a review item (reversing a merge or a split
changes the count), or when the probability that its answer is wrong because of unreviewed
decisions reaches ``QAParams.provisional_risk``. That probability is bounded by summing, over the
decisions whose reversal would change its answer, the probability that each is wrong, min(P, 1 -
P), capped at 1 (``answer_risk``). A decision changes the count at time t when both sides are
counted by then (``at_risk``): two instances left apart, when both are first seen by t (joined,
they count once); one instance it joined, when each side's own clip instance is seen by t (split
there, both parts count). If every such decision is right, the count is right (a count too high
needs two instances of one object both seen by t; one too low, two objects in one instance both
seen by t: either is a wrong decision of such a pair), so the answer is wrong only if one of them
is wrong, and the sum bounds that union whatever the decisions' dependence (Boole's inequality).
It is not 1 - prod(1 - p): that is exact only for independent errors, and the errors here are
mostly exclusive (a sighting is the revisit of at most one earlier object), where the union's
probability is the sum, more than the product form says. The bound says more than it must
rather than less, as far as the posteriors are calibrated; pairs that reconciliation left apart
below a posterior of 0.001 are not listed, and add nothing.

A **VOO** question rests on its four concepts' review items (reversing one may move a concept's
first or last real sighting; marked whenever it could, which says more than it must rather than
less). The sum above does not apply to it: joining or splitting instances moves an appearance only
where it makes or breaks a sustained sighting, so most decisions that change a count change no
order. Every other question is not provisional.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from vsi_wild.stages.qa.readings import Seen

_EPS = 1e-9


@dataclass(frozen=True)
class AtRisk:
    """One unreviewed decision as a VOC count reads it: reversed, it changes the concept's count at
    every time from ``changes_from`` on."""

    row: dict  # its schema.UNREVIEWED_DECISIONS row
    concept: str
    p_wrong: float
    changes_from: float

    def describe(self) -> str:
        d = self.row
        return (
            f"{self.concept} clip {d['clip_a']} #{d['local_a']} / clip {d['clip_b']} #{d['local_b']} "
            f"({'merged' if d['instance_a'] == d['instance_b'] else 'apart'}, P(same) {d['posterior']:.2f})"
        )


def _first_within(times: Sequence[float], lo: float, hi: float) -> float | None:
    return next((t for t in times if lo - _EPS <= t <= hi + _EPS), None)


def at_risk(decisions: Iterable[dict], seen: Mapping[int, Seen]) -> list[AtRisk]:
    """The decisions (``schema.UNREVIEWED_DECISIONS`` rows) whose reversal changes a count, with
    the time from which it does. ``seen``: instance id -> its sightings under the reading the
    count is made by (``readings.seen_under``). A side that was removed or is never seen counts no
    instance either way, and two sides a person renamed apart were decided by that person: no risk."""
    out = []
    for d in decisions:
        ia, ib = d["instance_a"], d["instance_b"]
        sa = seen.get(int(ia)) if ia is not None else None
        sb = seen.get(int(ib)) if ib is not None else None
        if sa is None or sb is None or sa.concept != sb.concept:
            continue
        if ia == ib:  # joined: split there, each part counts from its side's own first sighting
            fa = _first_within(sa.times, d["first_a"], d["last_a"])
            fb = _first_within(sb.times, d["first_b"], d["last_b"])
            if fa is None or fb is None:
                continue
            t = max(fa, fb)
        else:  # apart: joined, the two instances count once from when both are seen
            t = max(sa.first, sb.first)
        out.append(AtRisk(d, sa.concept, float(d["p_wrong"]), t))
    return out


def answer_risk(risks: Iterable[AtRisk], concept: str, t: float) -> tuple[float, list[AtRisk]]:
    """An upper bound on the probability that ``concept``'s count at time ``t`` is wrong because of
    unreviewed decisions (the sum of their probabilities of being wrong, capped at 1), and those
    decisions, the likeliest wrong first."""
    carrying = sorted(
        (r for r in risks if r.concept == concept and r.changes_from <= t + _EPS and r.p_wrong > 0),
        key=lambda r: (
            -r.p_wrong,
            r.changes_from,
            r.row["clip_a"],
            r.row["local_a"],
            r.row["clip_b"],
            r.row["local_b"],
        ),
    )
    return min(1.0, math.fsum(r.p_wrong for r in carrying)), carrying


def _describe(items: list[dict]) -> str:
    shown = sorted(items, key=lambda d: (-d["answer_impact"], abs(d["posterior"] - 0.5)))[:3]
    parts = [
        f"{d['concept']} clip {d['clip_a']} #{d['local_a']} / clip {d['clip_b']} #{d['local_b']} "
        f"({'merged' if d['decision'] == 'merge' else 'apart'}, P(same) {d['posterior']:.2f})"
        for d in shown
    ]
    more = f" and {len(items) - len(shown)} more" if len(items) > len(shown) else ""
    return f"rests on {len(items)} unreviewed reconciliation decision(s): " + "; ".join(parts) + more


def _describe_risk(risk: float, carrying: list[AtRisk]) -> str:
    shown = carrying[:3]
    more = f" and {len(carrying) - len(shown)} more" if len(carrying) > len(shown) else ""
    return (
        f"{len(carrying)} unreviewed decision(s) whose reversal would change the answer (P(wrong answer) up to "
        f"{risk:.2f}): " + "; ".join(r.describe() for r in shown) + more
    )


def voc_provisional(
    concept: str,
    query_times: Sequence[float],
    pending: Sequence[dict],
    risks: Sequence[AtRisk],
    level: float,
) -> tuple[bool, str | None]:
    """Whether a VOC question of ``concept`` asked at ``query_times`` is provisional, and why:
    ``pending``, its concept's review items (``schema.REVIEW_PENDING`` rows); ``risks``, the video's
    decisions at risk (``at_risk``); ``level``, ``QAParams.provisional_risk``. A stream question is
    as risky as its latest checkpoint (a count's risk only grows with time)."""
    risk, carrying = answer_risk(risks, concept, max(query_times, default=0.0))
    if pending:
        return True, _describe(list(pending)) + (f"; in all, {_describe_risk(risk, carrying)}" if carrying else "")
    if carrying and risk >= level:
        return True, "rests on " + _describe_risk(risk, carrying)
    return False, None


def mark(questions: pa.Table, pending: Iterable[dict], risks: Sequence[AtRisk], level: float) -> pa.Table:
    """``questions`` (``schema.QA_QUESTIONS``) with ``provisional`` and ``provisional_reason`` set:
    ``pending``, the video's review items no fix resolved (``schema.REVIEW_PENDING``); ``risks``,
    its unreviewed decisions as the VOC counts read them (``at_risk``); ``level``,
    ``QAParams.provisional_risk``."""
    by_concept: dict[str, list[dict]] = {}
    for d in pending:
        by_concept.setdefault(d["concept"], []).append(d)
    flags, reasons = [], []
    for task, concepts, times in zip(
        questions["task_type"].to_pylist(),
        questions["concepts"].to_pylist(),
        questions["query_times"].to_pylist(),
        strict=True,
    ):
        flag, reason = False, None
        if task == "VOC" and concepts:
            flag, reason = voc_provisional(concepts[0], times or [], by_concept.get(concepts[0], []), risks, level)
        elif task == "VOO":
            items = [d for c in (concepts or []) for d in by_concept.get(c, [])]
            flag, reason = bool(items), _describe(items) if items else None
        flags.append(flag)
        reasons.append(reason)
    out = questions
    for name, values, typ in (("provisional", flags, pa.bool_()), ("provisional_reason", reasons, pa.string())):
        i = out.schema.get_field_index(name)
        out = out.set_column(i, out.schema.field(i), pa.array(values, type=typ))
    return out
