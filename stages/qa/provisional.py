"""Which questions rest on reconciliation decisions that no person has reviewed yet.

Reconciliation decides, for every compared pair of one concept's clip instances, whether they are
one object, with a posterior P (``schema.MERGE_DECISIONS``); the metadata takes the more likely
decision, and leaves for review the pairs whose expected wrong answers reach
``review_expected_errors``. The metadata stage lists the decisions no fix has resolved
(``schema.UNREVIEWED_DECISIONS``; the review items among them also in ``schema.REVIEW_PENDING``).

A **VOC** question is provisional when its concept has a review item (reversing a merge or a split
changes the count), or when the probability that its answer is wrong because of unreviewed
decisions reaches ``QAParams.provisional_risk``. Each decision is wrong with probability min(P, 1 -
P); a count at time t rests on the decisions whose two sides (clip instances) are both seen by t
(``at_risk``). It is wrong only if (i) an instance holds two objects both seen by t: then any tree
of its joined pairs that spans its clip instances seen by t has a pair joining two objects, a wrong
merge; or (ii) two instances, each one object, both seen by t, are one object: then every pair
between their clip instances seen by t was wrongly left apart. So, by Boole's inequality, the
probability is at most the sum over instances of their lightest spanning tree's probabilities
(Kruskal), plus, over pairs of instances, the least of their pairs' probabilities, capped at 1
(``answer_risk``). The bound holds whatever the decisions' dependence: it says more than it must
rather than less, as far as the posteriors are calibrated. It is not 1 - prod(1 - p) over the
pairs, which is exact only for independent errors: the pairs across one wrong merge are all wrong
together (summing or multiplying them all counts one error many times), and a sighting is the
revisit of at most one earlier object (exclusive errors, whose union's probability is the sum, more
than the product form says). Pairs reconciliation left apart below a posterior of 0.001 are not
listed and add nothing.

A **VOO** question rests on those of its four concepts' review items whose reversal would move the
appearance it asks about (first or last) under some reading of ``QAParams.voo_readings``
(``Track.moves``); the sum above does not apply, since most decisions that change a count change no
order. A concept's first (last) appearance is its instances' earliest (latest) sighting, so how its
sightings are grouped into instances moves it only where a grouping makes or breaks a run of
consecutive sightings (a sustained sighting). So the verdict against each item is applied to the
concept's visibility track as the metadata's fix applies it (the two instances merged, or one side's
clip split out of their instance) and the appearances are dated again. An item on an instance whose
times a person gave always counts (merged, those times would stand for the other's sightings). Every
other question is not provisional, and neither is a question a person accepted (a
``review_question`` fix, verdict accept) while it gives the answers they saw: they checked that
answer against the video, which is what the flag asks for. Once a later fix changes its answers, the
accept no longer holds and the question is provisional, whatever its task: a person judged another
answer right.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from vsi_wild.stages.metadata import decided_apart
from vsi_wild.stages.qa.common import question_id
from vsi_wild.stages.qa.params import Sighting
from vsi_wild.stages.qa.readings import Sample, Seen, sighting_times, visible_samples
from vsi_wild.stages.segment import clip_of_sample

_EPS = 1e-9


@dataclass(frozen=True)
class AtRisk:
    """One unreviewed decision as a VOC count reads it: it bears on the count at every time from
    ``changes_from`` on, when both its sides are seen."""

    row: dict  # its schema.UNREVIEWED_DECISIONS row
    concept: str
    p_wrong: float
    changes_from: float

    @property
    def joined(self) -> bool:
        return bool(self.row["instance_a"] == self.row["instance_b"])

    @property
    def sides(self) -> tuple[tuple[int, int], tuple[int, int]]:
        d = self.row
        return (int(d["clip_a"]), int(d["local_a"])), (int(d["clip_b"]), int(d["local_b"]))

    def describe(self) -> str:
        return _pair_text(self.concept, *self.sides, self.joined, self.row["posterior"])


@dataclass(frozen=True)
class Track:
    """When the metadata sees each instance, which a VOO question's review items are judged by:
    instance id -> sample index -> its visible timestamp (``readings.visible_samples``); each
    instance's concept; each clip instance's instance after the fixes (``(clip, local)``; None:
    removed), which the review items' own ids (reconciliation's) need not be once a person fixed the
    video; the first and last time of each instance whose times a person gave (``schema.INSTANCES``
    times_given: seen then under every reading, ``readings.seen_under``); the segmentation clip
    length (a split takes a whole clip's observations); the view's pixels and
    ``QAParams.voo_readings`` (what counts as an appearance)."""

    samples: Mapping[int, Mapping[int, Sample]]
    concept_of: Mapping[int, str]
    instance_now: Mapping[tuple[int, int], int | None]
    given: Mapping[int, tuple[float, float]]
    clip_seconds: float
    view_pixels: int
    readings: tuple[Sighting, ...]

    @classmethod
    def from_metadata(
        cls,
        instances: pa.Table,
        visibility: pa.Table,
        unreviewed: Iterable[Mapping],
        video_id: str,
        clip_seconds: float,
        view_pixels: int,
        readings: Sequence[Sighting],
        specks: pa.Table | None = None,
    ) -> Track:
        """From one video's ``schema.INSTANCES``, ``schema.VISIBILITY`` and
        ``schema.UNREVIEWED_DECISIONS`` rows (the last give each side's instance after the fixes),
        and the ``schema.SPECKS`` rows that show an instance (None: none read)."""
        rows = instances.select(
            ["video_id", "instance_id", "concept", "times_given", "first_time", "last_time"]
        ).to_pylist()
        rows = [r for r in rows if r["video_id"] == video_id]
        now: dict[tuple[int, int], int | None] = {}
        for d in unreviewed:
            for side in "ab":
                i = d[f"instance_{side}"]
                now[(int(d[f"clip_{side}"]), int(d[f"local_{side}"]))] = None if i is None else int(i)
        return cls(
            visible_samples(visibility, video_id, specks),
            {int(r["instance_id"]): r["concept"] for r in rows},
            now,
            {int(r["instance_id"]): (float(r["first_time"]), float(r["last_time"])) for r in rows if r["times_given"]},
            clip_seconds,
            view_pixels,
            tuple(readings),
        )

    def _appearances(
        self, groups: Iterable[Mapping[int, Sample]], given: Sequence[tuple[float, float]]
    ) -> list[tuple[float, float] | None]:
        """Per reading: the first and last appearance of one concept whose instances are seen at
        ``groups`` and, under every reading, at ``given`` (first, last) times (None: never seen)."""
        out: list[tuple[float, float] | None] = []
        for reading in self.readings:
            seen = [t for t in (sighting_times(g.values(), reading, self.view_pixels) for g in groups) if t]
            seen += [list(g) for g in given]
            out.append((min(t[0] for t in seen), max(t[-1] for t in seen)) if seen else None)
        return out

    def sides_now(self, item: Mapping) -> tuple[int | None, int | None]:
        """The instances a review item's two sides are part of after the fixes (None: removed)."""
        a, b = (
            self.instance_now.get((int(item[f"clip_{s}"]), int(item[f"local_{s}"])), int(item[f"instance_{s}"]))
            for s in "ab"
        )
        return a, b

    def concept_now(self, item: Mapping) -> str | None:
        """The concept a review item bears on: its sides' concept after the fixes, which a person's
        rename or the benchmark's vocabulary may have changed from reconciliation's; None where a
        side was removed or the two sides were renamed apart (a person decided the pair:
        ``metadata.decided_apart``, by which the metadata stage lists no such item)."""
        a, b = self.sides_now(item)
        ca, cb = (None if i is None else self.concept_of.get(i) for i in (a, b))
        return None if decided_apart(ca, cb) else ca

    def moves(self, item: Mapping) -> set[str]:
        """Which appearances (``first``, ``last``) of its concept a person's verdict against a
        review item (``schema.REVIEW_PENDING`` row) could move under some reading. The verdict is
        applied as the metadata's ``review_pair`` fix applies it to the sides' instances after the
        fixes: merged where they are apart (where both are seen at a sample, the larger mask
        stays), or, where they are one, clip_a's or clip_b's observations split out (the fix may
        name the pair in either order); then the concept's appearances are dated again. A side
        a person removed, or a pair a person renamed apart, takes no verdict."""
        a, b = self.sides_now(item)
        concept = self.concept_now(item)
        if a is None or b is None or concept is None:
            return set()
        if a in self.given or b in self.given:
            return {"first", "last"}  # their given first and last times would stand for the others' sightings
        ids = [i for i, c in self.concept_of.items() if c == concept]
        given = [self.given[i] for i in ids if i in self.given]
        groups = {i: self.samples.get(i, {}) for i in ids if i not in self.given}
        others = [g for i, g in groups.items() if i not in (a, b)]
        if a != b:
            merged = dict(groups.get(a, {}))
            for k, sample in groups.get(b, {}).items():
                if k not in merged or (sample[1] or 0) > (merged[k][1] or 0):
                    merged[k] = sample
            afters = [[*others, merged]]
        else:
            afters = []
            for clip in {int(item["clip_a"]), int(item["clip_b"])}:
                split = {k: v for k, v in groups.get(a, {}).items() if clip_of_sample(k, self.clip_seconds) == clip}
                rest = {k: v for k, v in groups.get(a, {}).items() if k not in split}
                if split and rest:
                    afters.append([*others, split, rest])
        before = self._appearances(groups.values(), given)
        moved: set[str] = set()
        for after in afters:
            for x, y in zip(before, self._appearances(after, given), strict=True):
                if x != y:
                    moved |= (
                        {"first", "last"}
                        if x is None or y is None
                        else {w for w, p, q in zip(("first", "last"), x, y, strict=True) if p != q}
                    )
        return moved


def _pair_text(concept: str, a: tuple[int, int], b: tuple[int, int], merged: bool, posterior: float) -> str:
    """One decision as the reasons name it: its two clip instances, merged or apart, P(same)."""
    state = "merged" if merged else "apart"
    return f"{concept} clip {a[0]} #{a[1]} / clip {b[0]} #{b[1]} ({state}, P(same) {posterior:.2f})"


def _first_within(times: Sequence[float], lo: float, hi: float) -> float | None:
    return next((t for t in times if lo - _EPS <= t <= hi + _EPS), None)


def at_risk(decisions: Iterable[dict], seen: Mapping[int, Seen]) -> list[AtRisk]:
    """The decisions (``schema.UNREVIEWED_DECISIONS`` rows) a count can rest on, each from when
    both its sides' clip instances are seen. ``seen``: instance id -> its sightings under the
    reading the count is made by (``readings.seen_under``); a side's own first sighting is its
    instance's first within the side's times. A side that was removed or is never seen counts
    nothing either way, and two sides a person renamed apart were decided by that person: no risk
    (``metadata.decided_apart``, by which the metadata stage lists no such decision)."""
    out = []
    for d in decisions:
        ia, ib = d["instance_a"], d["instance_b"]
        sa = seen.get(int(ia)) if ia is not None else None
        sb = seen.get(int(ib)) if ib is not None else None
        if sa is None or sb is None or decided_apart(sa.concept, sb.concept):
            continue
        fa = _first_within(sa.times, d["first_a"], d["last_a"])
        fb = _first_within(sb.times, d["first_b"], d["last_b"])
        if fa is None or fb is None:
            continue
        out.append(AtRisk(d, sa.concept, float(d["p_wrong"]), max(fa, fb)))
    return out


def answer_risk(risks: Iterable[AtRisk], concept: str, query_times: Sequence[float]) -> tuple[float, list[AtRisk]]:
    """An upper bound on the probability that any of ``concept``'s counts at ``query_times`` is
    wrong because of unreviewed decisions, and the decisions it sums, the likeliest wrong first.
    Per instance: the lightest tree of its joined pairs spanning its clip instances seen by the
    last query time (an instance that holds two objects by some time holds them by then). Per two
    instances: the surest of the pairs between them left apart, among those seen by the first
    query time both are seen by (if they are one object then, they are one object at every time
    after)."""
    times = sorted(query_times)
    if not times:
        return 0.0, []
    rel = sorted(
        (r for r in risks if r.concept == concept and r.changes_from <= times[-1] + _EPS and r.p_wrong > 0),
        key=lambda r: (r.p_wrong, r.sides),
    )
    parent: dict[tuple[int, int], tuple[int, int]] = {}

    def root(x: tuple[int, int]) -> tuple[int, int]:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    def asked_by(t: float) -> float:  # the first query time at or after t
        return next(q for q in times if t <= q + _EPS)

    first_asked: dict[frozenset, float] = {}
    for r in rel:
        if not r.joined:
            key = frozenset((r.row["instance_a"], r.row["instance_b"]))
            first_asked[key] = min(first_asked.get(key, math.inf), asked_by(r.changes_from))
    carrying, apart_done = [], set()
    for r in rel:  # the likeliest right first: Kruskal's lightest tree, and each instance pair's surest
        if r.joined:
            a, b = (root(x) for x in r.sides)
            if a != b:
                parent[a] = b
                carrying.append(r)
            continue
        key = frozenset((r.row["instance_a"], r.row["instance_b"]))
        if key not in apart_done and r.changes_from <= first_asked[key] + _EPS:
            apart_done.add(key)
            carrying.append(r)
    carrying.sort(key=lambda r: (-r.p_wrong, r.changes_from, r.sides))
    return min(1.0, math.fsum(r.p_wrong for r in carrying)), carrying


def _describe(items: list[dict]) -> str:
    shown = sorted(items, key=lambda d: (-d["answer_impact"], abs(d["posterior"] - 0.5)))[:3]
    parts = [
        _pair_text(
            d["concept"],
            (d["clip_a"], d["local_a"]),
            (d["clip_b"], d["local_b"]),
            d["decision"] == "merge",
            d["posterior"],
        )
        for d in shown
    ]
    more = f" and {len(items) - len(shown)} more" if len(items) > len(shown) else ""
    return f"rests on {len(items)} unreviewed reconciliation decision(s): " + "; ".join(parts) + more


def _describe_risk(risk: float, carrying: list[AtRisk]) -> str:
    shown = carrying[:3]
    more = f" and {len(carrying) - len(shown)} more" if len(carrying) > len(shown) else ""
    return (
        f"{len(carrying)} unreviewed decision(s) that may make the answer wrong (P(wrong answer) up to "
        f"{risk:.2f}): " + "; ".join(r.describe() for r in shown) + more
    )


def voc_provisional(
    pending: Sequence[dict], risk: float, carrying: list[AtRisk], level: float
) -> tuple[bool, str | None]:
    """Whether a VOC question is provisional, and why: ``pending``, its concept's review items
    (``schema.REVIEW_PENDING`` rows); ``risk`` and ``carrying``, ``answer_risk``'s bound for its
    concept and query times and the decisions it sums; ``level``, ``QAParams.provisional_risk``."""
    if pending:
        return True, _describe(list(pending)) + (f"; in all, {_describe_risk(risk, carrying)}" if carrying else "")
    if carrying and risk >= level:
        return True, "rests on " + _describe_risk(risk, carrying)
    return False, None


def accepts(reviews: Iterable[dict]) -> dict[str, list[str] | None]:
    """The questions a person accepted, from the video's ``schema.QUESTION_REVIEWS`` rows (one per
    question: a later verdict replaces an earlier one): question id -> the answers they saw (None:
    the fix did not record them)."""
    return {r["question_id"]: r.get("answers") for r in reviews if r["verdict"] == "accept"}


def verdict_holds(verdict: str, seen: Sequence[str] | None, answers: Sequence[str]) -> bool:
    """Whether a person's verdict on the answers ``seen`` stands for a question that gives
    ``answers`` now. An accept stands while they are the same (a person checked an answer, not an
    id), or when it recorded none; a rejection (the question is unfair or unanswerable) always."""
    return verdict != "accept" or seen is None or list(seen) == list(answers)


def standing(reviews: Iterable[dict], questions: pa.Table) -> list[dict]:
    """The review rows with ``holds`` set against ``questions`` as asked now: an accept while the
    question gives the answers the person saw, a rejection always; None for a question not asked."""
    now = {
        question_id(r): r["answers"]
        for r in questions.select(["video_id", "task_type", "subtype", "item", "answers"]).to_pylist()
    }
    out = []
    for r in reviews:
        answers = now.get(r["question_id"])
        holds = None if answers is None else verdict_holds(r["verdict"], r.get("answers"), answers)
        out.append({**r, "holds": holds})
    return out


def _stale_accept(seen: Sequence[str], answers: Sequence[str]) -> str:
    were = "answer was" if len(seen) == 1 else "answers were"
    now = "it is" if len(answers) == 1 else "they are"
    return f"accepted by a person when its {were} {', '.join(seen)}; {now} {', '.join(answers)} now"


def mark(
    questions: pa.Table,
    pending: Iterable[dict],
    risks: Sequence[AtRisk],
    level: float,
    accepted: Mapping[str, Sequence[str] | None] | None = None,
    track: Track | None = None,
) -> pa.Table:
    """``questions`` (``schema.QA_QUESTIONS``) with ``provisional``, ``provisional_reason`` and
    ``wrong_answer_bound`` (VOC: ``answer_risk``'s bound) set:
    ``pending``, the video's review items no fix resolved (``schema.REVIEW_PENDING``); ``risks``,
    its unreviewed decisions as the VOC counts read them (``at_risk``); ``level``,
    ``QAParams.provisional_risk``; ``accepted`` (``accepts``), the questions a person accepted with
    the answers they saw; ``track``, when each instance is seen (None: unknown, and every review
    item of a VOO question's concepts counts), and which concept each review item bears on after the
    fixes (``Track.concept_now``; None: reconciliation's). An accepted question is not provisional
    whatever its decisions while it gives those answers (its bound is then 0); once a later fix
    changes them it is provisional, whatever its task, until a person looks again (they judged
    another answer right)."""
    accepted = accepted or {}
    by_concept: dict[str, list[dict]] = {}
    for d in pending:
        concept = d["concept"] if track is None else track.concept_now(d)
        if concept is not None:  # named as the questions name it now
            by_concept.setdefault(concept, []).append({**d, "concept": concept})
    # per concept, each item with the appearances its verdict would move (None: unknown), once for
    # all the VOO questions that share the concept
    voo_items = {c: [(d, None if track is None else track.moves(d)) for d in ds] for c, ds in by_concept.items()}
    flags: list[bool] = []
    reasons: list[str | None] = []
    bounds: list[float | None] = []
    ids = (question_id(r) for r in questions.select(["video_id", "task_type", "subtype", "item"]).to_pylist())
    for task, subtype, concepts, times, answers, qid in zip(
        questions["task_type"].to_pylist(),
        questions["subtype"].to_pylist(),
        questions["concepts"].to_pylist(),
        questions["query_times"].to_pylist(),
        questions["answers"].to_pylist(),
        ids,
        strict=True,
    ):
        flag: bool = False
        reason: str | None = None
        bound: float | None = None
        if task == "VOC" and concepts:
            bound, carrying = answer_risk(risks, concepts[0], times or [])
            flag, reason = voc_provisional(by_concept.get(concepts[0], []), bound, carrying, level)
        elif task == "VOO":
            items = [
                d for c in (concepts or []) for d, moved in voo_items.get(c, []) if moved is None or subtype in moved
            ]
            flag, reason = bool(items), _describe(items) if items else None
        if qid in accepted:
            seen = accepted[qid]
            if verdict_holds("accept", seen, answers):
                # a person checked this answer against the video: no unreviewed decision makes it wrong
                flag, reason = False, None
                if bound is not None:
                    bound = 0.0
            else:
                assert seen is not None
                flag, reason = True, _stale_accept(seen, answers) + (f"; and {reason}" if reason else "")
        flags.append(flag)
        reasons.append(reason)
        bounds.append(bound)
    out = questions
    for name, values, typ in (
        ("provisional", flags, pa.bool_()),
        ("provisional_reason", reasons, pa.string()),
        ("wrong_answer_bound", bounds, pa.float64()),
    ):
        i = out.schema.get_field_index(name)
        out = out.set_column(i, out.schema.field(i), pa.array(values, type=typ))
    return out
