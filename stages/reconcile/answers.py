"""The answers a partition of clip instances gives (VOC counts, VOO appearance times), as the qa
stage derives them from the instances: what a reconciliation decision changes, and what the bench
compares with the truth's."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vsi_wild.stages.reconcile.instances import ClipInstance
from vsi_wild.stages.segment import SAMPLE_STEP


@dataclass(frozen=True)
class AnswerRules:
    """What the qa stage's VOC and VOO answers read (``QAParams``; the view's duration)."""

    duration_s: float
    checkpoint_s: float  # VOC streaming checkpoints (QAParams.checkpoint_s)
    min_visible_s: float = 1.0  # the first of QAParams.voo_readings: a real sighting lasts this long
    min_visible_px: float = 0.0  # with boxes at least this large on their shorter side

    def checkpoints(self) -> list[float]:
        """Multiples of ``checkpoint_s`` strictly inside the video, then the end (``qa.voc.checkpoints``)."""
        out, k = [], 1
        while k * self.checkpoint_s < self.duration_s - 1e-9:
            out.append(k * self.checkpoint_s)
            k += 1
        return [*out, float(self.duration_s)]


def voc_answers(clusters: Iterable[Sequence[ClipInstance]], rules: AnswerRules) -> dict[str, list[int]]:
    """concept -> its count at every checkpoint (the stream question's answers; the last is the
    total question's): the global instances first seen by then."""
    firsts: dict[str, list[float]] = {}
    for members in clusters:
        firsts.setdefault(members[0].concept, []).append(min(m.first_time for m in members))
    cps = rules.checkpoints()
    return {c: [sum(1 for t in ts if t <= cp + 1e-9) for cp in cps] for c, ts in firsts.items()}


def sighting_span(members: Sequence[ClipInstance], rules: AnswerRules) -> tuple[float, float] | None:
    """(start of the first, last timestamp of the last) real sighting of one global instance: runs
    of consecutive 2 FPS samples seen with a box at least ``min_visible_px`` on its shorter side,
    lasting ``min_visible_s`` (``visibility.real_sightings``); None without one."""
    seen = sorted(
        {
            k: o
            for m in members
            for k, o in m.samples.items()
            if min(o.box[2] - o.box[0], o.box[3] - o.box[1]) >= rules.min_visible_px
        }.items()
    )
    runs: list[list] = []
    for k, o in seen:
        if runs and k == runs[-1][1] + 1:
            runs[-1][1], runs[-1][3] = k, o.time
        else:
            runs.append([k, k, o.time, o.time])
    real = [r for r in runs if (r[1] - r[0] + 1) * SAMPLE_STEP >= rules.min_visible_s - 1e-9]
    return (real[0][2], real[-1][3]) if real else None


def concept_times(clusters: Iterable[Sequence[ClipInstance]], rules: AnswerRules) -> dict[str, tuple[float, float]]:
    """concept -> (first, last) appearance: the earliest real sighting's start and the latest's end
    over its global instances (VOO's order); concepts never really seen are left out."""
    out: dict[str, tuple[float, float]] = {}
    for members in clusters:
        span = sighting_span(members, rules)
        if span is None:
            continue
        c = members[0].concept
        f, last = out.get(c, span)
        out[c] = (min(f, span[0]), max(last, span[1]))
    return out


def order_flips(times: dict[str, tuple[float, float]], concept: str, new: tuple[float, float] | None) -> int:
    """How many (other concept, first|last) appearance orders change when ``concept``'s times
    become ``new`` (None: never really seen)."""
    old = times.get(concept)
    if old == new:
        return 0
    flips = 0
    for other, t in times.items():
        if other == concept:
            continue
        for w in (0, 1):
            before = None if old is None else old[w] < t[w]
            after = None if new is None else new[w] < t[w]
            flips += before != after
    return flips
