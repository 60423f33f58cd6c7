"""VOO (object appearance order): order 4 concepts by first or by last appearance.

Per view video: ``voo_first`` first-appearance and ``voo_last`` last-appearance questions. The 4
concepts of a question have appearance times pairwise at least ``voo_min_gap_s`` apart (so the order
is visible, not a coin toss between near-simultaneous appearances), and no 4-concept set repeats
within a (video, subtype). Sets are drawn from all valid sets, seeded, spread over the strata of
(smallest gap: near / medium / far, query time: early / middle / late; ``qa.difficulty``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pyarrow as pa

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
from vsi_wild.stages.evaluate import ACCURACY
from vsi_wild.stages.qa.difficulty import DIFFICULTY_COLUMNS, difficulty_bin, gaps, horizon_bin, stamp, stratified_pick
from vsi_wild.stages.qa.params import QAParams
from vsi_wild.stages.qa.registry import MC, QATask, TaskQuestions, VideoInputs, copied
from vsi_wild.stages.segment import SAMPLE_STEP
from vsi_wild.stages.visibility import real_sightings

SUBTYPES = ("first", "last")
_ENUMERATE_MAX = 100_000  # above this many 4-sets, sample instead of enumerating


def concept_times(instances: pa.Table, video_id: str, which: str,
                  sightings: dict[int, tuple[float, float]] | None = None) -> dict[str, float]:
    """concept -> its first appearance (min first_time) or last appearance (max last_time).
    ``sightings`` (``visibility.real_sightings``): an automatic instance counts from its first to its
    last real sighting, and not at all without one; a person's fixes (origin "fix") stand as given."""
    out: dict[str, float] = {}
    col = "first_time" if which == "first" else "last_time"
    pick = min if which == "first" else max
    for r in instances.select(["video_id", "concept", "instance_id", "origin", col]).to_pylist():
        if r["video_id"] != video_id:
            continue
        t = float(r[col])
        if sightings is not None and r["origin"] == "auto":
            if r["instance_id"] not in sightings:
                continue
            t = sightings[r["instance_id"]][0 if which == "first" else 1]
        out[r["concept"]] = pick(out.get(r["concept"], t), t)
    return out


def is_separated(times: list[float], gap: float) -> bool:
    s = sorted(times)
    return all(b - a >= gap and b > a for a, b in zip(s, s[1:]))


def choose_sets(times: dict[str, float], count: int, gap: float, rng: StableRng,
                stratum: Callable[[tuple[str, ...]], tuple[str, str]] | None = None) -> list[tuple[str, ...]]:
    """Up to ``count`` distinct 4-concept sets whose times are pairwise >= gap apart; with
    ``stratum`` (set -> (difficulty bin, horizon bin)) spread over the strata (``stratified_pick``).
    Beyond ``_ENUMERATE_MAX`` candidate sets they are sampled, unstratified."""
    names = sorted(times, key=lambda c: (times[c], c))
    if len(names) < 4 or count <= 0:
        return []
    if math.comb(len(names), 4) <= _ENUMERATE_MAX:
        valid = [tuple(s) for s in itertools.combinations(names, 4) if is_separated([times[c] for c in s], gap)]
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
        if is_separated([times[c] for c in s], gap):
            found.append(tuple(sorted(s, key=lambda c: (times[c], c))))
            if len(found) == count:
                break
    return found


def voo_questions(instances: pa.Table, video: VideoInfo, params: QAParams, prov: Provenance,
                  visibility: pa.Table | None = None) -> tuple[list[Question], list[dict]]:
    questions: list[Question] = []
    skipped: list[dict] = []
    sightings = None if visibility is None else real_sightings(
        visibility, SAMPLE_STEP, params.voo_min_visible_s, params.voo_min_visible_px)
    for which, count in (("first", params.voo_first), ("last", params.voo_last)):
        times = concept_times(instances, video.video_id, which, sightings)

        def stratum(s: tuple[str, ...], times: dict[str, float] = times, which: str = which) -> tuple[str, str]:
            ts = sorted(times[c] for c in s)
            return (difficulty_bin(min(gaps(ts)), params.voo_gap_bins_s),
                    horizon_bin(_query_time(ts, which, video), video.duration_s, params.horizon_edges))

        sets = choose_sets(times, count, params.voo_min_gap_s, StableRng(params.seed, video.video_id, "VOO", which, "sets"),
                           stratum)
        if len(sets) < count:
            skipped.append({
                "video_id": video.video_id, "task_type": "VOO", "item": which,
                "reason": f"{len(sets)} of {count} concept sets with times >= {params.voo_min_gap_s:g}s apart "
                          f"({len(times)} concepts)",
            })
        for i, concepts in enumerate(sets):
            order = tuple(sorted(concepts, key=lambda c: (times[c], c)))
            ts = [times[c] for c in order]
            rng = StableRng(params.seed, video.video_id, "VOO", which, i)
            # The options list the concepts in a seeded order, not in time order (no leak).
            distractors = [ordering_text(p) for p in permutation_distractors(order, rng)]
            qt = _query_time(ts, which, video)
            evidence = [interval(0.0, qt)] if which == "first" else [interval(ts[0], video.duration_s)]
            questions.append(stamp(
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
                params.voo_gap_bins_s, params.horizon_edges, gaps_s=gaps(ts),
            ))
    return questions, skipped


def _query_time(ordered_times: list[float], which: str, video: VideoInfo) -> float:
    if which == "first":
        return ordered_times[-1]  # all four have appeared: the first-appearance order is settled
    return video.duration_s  # a later reappearance would change the last-appearance order: the whole video


def _build(inputs: VideoInputs, params: QAParams, prov: Provenance) -> TaskQuestions:
    return TaskQuestions(*voo_questions(inputs.instances, inputs.video, params, prov, inputs.visibility))


TASK = QATask(
    name="VOO", order=2, release_rank=3, kind=MC, metric=ACCURACY, questions=_build,
    subtypes=SUBTYPES, ordering=True, export_columns=copied("concepts", *DIFFICULTY_COLUMNS),
)
