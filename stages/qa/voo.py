"""VOO (object appearance order): order 4 concepts by first or by last appearance.

Per view video: ``voo_first`` first-appearance and ``voo_last`` last-appearance questions. The 4
concepts of a question have appearance times pairwise at least ``voo_min_gap_s`` apart (so the order
is visible, not a coin toss between near-simultaneous appearances), and no 4-concept set repeats
within a (video, subtype). Sets are drawn from all valid sets, seeded, spread over the strata of
(smallest gap: near / medium / far, query time: early / middle / late; ``qa.difficulty``).

An appearance is dated under every reading of ``qa.voo_readings`` (a sustained sighting, a clear
glimpse; ``stages/qa/readings.py``); a set is valid only when each gives the first reading's order
with consecutive appearances ``voo_min_gap_s`` apart. When the seeded draw would ask a set a reading
reorders, the sets are drawn again from the valid ones only, and the reordered set is recorded as
skipped with that reading (so metadata without such a set draws exactly as without the check).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pyarrow as pa

from vsi_wild.stages.evaluate import ACCURACY
from vsi_wild.stages.qa.common import (
    Provenance,
    Question,
    StableRng,
    VideoInfo,
    base_fields,
    interval,
    ordering_text,
    permutation_distractors,
    voo_question,
)
from vsi_wild.stages.qa.difficulty import DIFFICULTY_COLUMNS, difficulty_bin, gaps, horizon_bin, stamp, stratified_pick
from vsi_wild.stages.qa.params import QAParams
from vsi_wild.stages.qa.readings import Seen, seen_under
from vsi_wild.stages.qa.registry import MC, QATask, TaskQuestions, VideoInputs, copied

SUBTYPES = ("first", "last")
_ENUMERATE_MAX = 100_000  # above this many 4-sets, sample instead of enumerating


def concept_times(seen: dict[int, Seen], which: str) -> dict[str, float]:
    """concept -> its first appearance (its instances' earliest sighting) or last appearance (their
    latest), from the instances' sightings under one reading (``readings.seen_under``)."""
    out: dict[str, float] = {}
    pick = min if which == "first" else max
    for s in seen.values():
        t = s.first if which == "first" else s.last
        out[s.concept] = pick(out.get(s.concept, t), t)
    return out


def is_separated(times: list[float], gap: float) -> bool:
    s = sorted(times)
    return all(b - a >= gap and b > a for a, b in zip(s, s[1:], strict=False))


def choose_sets(
    times: dict[str, float],
    count: int,
    gap: float,
    rng: StableRng,
    stratum: Callable[[tuple[str, ...]], tuple[str, str]] | None = None,
    admissible: Callable[[tuple[str, ...]], bool] | None = None,
) -> list[tuple[str, ...]]:
    """Up to ``count`` distinct 4-concept sets whose times are pairwise >= gap apart (and, with
    ``admissible``, that it admits); with ``stratum`` (set -> (difficulty bin, horizon bin)) spread
    over the strata (``stratified_pick``). Beyond ``_ENUMERATE_MAX`` candidate sets they are sampled,
    unstratified."""
    names = sorted(times, key=lambda c: (times[c], c))
    if len(names) < 4 or count <= 0:
        return []
    ok = admissible or (lambda s: True)
    if math.comb(len(names), 4) <= _ENUMERATE_MAX:
        valid = [
            tuple(s)
            for s in itertools.combinations(names, 4)
            if is_separated([times[c] for c in s], gap) and ok(tuple(s))
        ]
        if stratum is not None:
            return stratified_pick(valid, stratum, count, rng)
        return rng.sample(valid, min(count, len(valid)))
    found: list[tuple[str, ...]] = []
    seen: set[frozenset[str]] = set()
    for _ in range(500 * count):
        s = rng.sample(names, 4)
        key = frozenset(s)
        if key in seen:
            continue
        seen.add(key)
        ordered = tuple(sorted(s, key=lambda c: (times[c], c)))
        if is_separated([times[c] for c in s], gap) and ok(ordered):
            found.append(ordered)
            if len(found) == count:
                break
    return found


def disagreement(
    concepts: tuple[str, ...], per_reading: list[tuple[str, dict[str, float]]], gap: float
) -> tuple[str, str] | None:
    """Why the order of ``concepts`` is not the same under every reading: (the reading, what it
    gives), or None when every reading gives the first reading's order with consecutive
    appearances at least ``gap`` apart."""
    (_, base), *rest = per_reading
    order = sorted(concepts, key=lambda c: (base[c], c))
    for name, times in rest:
        missing = [c for c in concepts if c not in times]
        if missing:
            return name, f"never seen {name}: {', '.join(missing)}"
        other = sorted(concepts, key=lambda c: (times[c], c))
        if other != order:
            return name, f"{ordering_text(other)} seen {name}"
        close = [(a, b) for a, b in itertools.pairwise(other) if not times[b] - times[a] >= gap]
        if close:
            a, b = close[0]
            return name, f"{a} and {b} {times[b] - times[a]:.1f} s apart seen {name}"
    return None


def voo_questions(
    instances: pa.Table,
    video: VideoInfo,
    params: QAParams,
    prov: Provenance,
    visibility: pa.Table | None = None,
    specks: pa.Table | None = None,
) -> tuple[list[Question], list[dict]]:
    """The VOO questions of one video and what it did not ask (QA_SKIPPED rows); with
    ``qa.stable_answers`` the specks (``schema.SPECKS``) are read too (as VOC's)."""
    questions: list[Question] = []
    skipped: list[dict] = []
    readings = params.voo_readings if params.stable_answers else params.voo_readings[:1]
    specks = specks if params.stable_answers else None
    pixels = video.width * video.height
    seen = [(r.name, seen_under(instances, visibility, video.video_id, pixels, r, specks)) for r in readings]
    for which, count in (("first", params.voo_first), ("last", params.voo_last)):
        per_reading = [(name, concept_times(s, which)) for name, s in seen]
        times = per_reading[0][1]

        def stratum(s: tuple[str, ...], times: dict[str, float] = times, which: str = which) -> tuple[str, str]:
            ts = sorted(times[c] for c in s)
            return (
                difficulty_bin(min(gaps(ts)), params.voo_gap_bins_s),
                horizon_bin(_query_time(ts, which, video), video.duration_s, params.horizon_edges),
            )

        def rng(which: str = which) -> StableRng:
            return StableRng(params.seed, video.video_id, "VOO", which, "sets")

        sets = choose_sets(times, count, params.voo_min_gap_s, rng(), stratum)
        unstable = {s: d for s in sets if (d := disagreement(s, per_reading, params.voo_min_gap_s)) is not None}
        if unstable:  # choose again among the sets every reading orders alike

            def admissible(s: tuple[str, ...], pr: list[tuple[str, dict[str, float]]] = per_reading) -> bool:
                return disagreement(s, pr, params.voo_min_gap_s) is None

            sets = choose_sets(times, count, params.voo_min_gap_s, rng(), stratum, admissible=admissible)
            for s, (reading, what) in unstable.items():
                order = tuple(sorted(s, key=lambda c: (times[c], c)))
                skipped.append(
                    {
                        "video_id": video.video_id,
                        "task_type": "VOO",
                        "item": "|".join(sorted(s)),
                        "reason": f"{which}: {ordering_text(order)} seen "
                        f"{per_reading[0][0]}, {what}: another set asked "
                        f"where one is left",
                        "reading": reading,
                    }
                )
        if len(sets) < count:
            skipped.append(
                {
                    "video_id": video.video_id,
                    "task_type": "VOO",
                    "item": which,
                    "reason": f"{len(sets)} of {count} concept sets with times >= {params.voo_min_gap_s:g}s apart "
                    f"under every reading ({len(times)} concepts)",
                }
            )
        for i, concepts in enumerate(sets):
            order = tuple(sorted(concepts, key=lambda c: (times[c], c)))
            ts = [times[c] for c in order]
            rng_q = StableRng(params.seed, video.video_id, "VOO", which, i)
            # The options list the concepts in a seeded order, not in time order (no leak).
            distractors = [ordering_text(p) for p in permutation_distractors(order, rng_q)]
            qt = _query_time(ts, which, video)
            evidence = [interval(0.0, qt)] if which == "first" else [interval(ts[0], video.duration_s)]
            questions.append(
                stamp(
                    Question(
                        **base_fields(video, prov),
                        task_type="VOO",
                        subtype=which,
                        split="release",
                        index=i,
                        item="|".join(sorted(order)),
                        question=voo_question(which),
                        correct=ordering_text(order),
                        distractors=distractors,
                        query_times=[float(qt)],
                        answers=[ordering_text(order)],
                        evidence=[evidence],
                        concepts=list(order),
                    ),
                    params.voo_gap_bins_s,
                    params.horizon_edges,
                    gaps_s=gaps(ts),
                )
            )
    return questions, skipped


def _query_time(ordered_times: list[float], which: str, video: VideoInfo) -> float:
    if which == "first":
        return ordered_times[-1]  # all four have appeared: the first-appearance order is settled
    return video.duration_s  # a later reappearance would change the last-appearance order: the whole video


def _build(inputs: VideoInputs, params: QAParams, prov: Provenance) -> TaskQuestions:
    return TaskQuestions(*voo_questions(inputs.instances, inputs.video, params, prov, inputs.visibility, inputs.specks))


TASK = QATask(
    name="VOO",
    order=2,
    release_rank=3,
    kind=MC,
    metric=ACCURACY,
    questions=_build,
    subtypes=SUBTYPES,
    ordering=True,
    export_columns=copied("concepts", *DIFFICULTY_COLUMNS),
)
