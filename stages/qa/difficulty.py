"""Stratified difficulty (seed 002): the temporal quantities that make a question hard, and their bins.

Every question records them (QA_QUESTIONS ``gaps_s`` / ``since_s``, ``difficulty_s``, ``difficulty_bin``,
``horizon_bin``):
- VOO: the gaps between the 4 ordered appearances (``gaps_s``); the smallest is the difficulty;
- VPO: the gaps between the 4 anchors in time (``gaps_s``); the smallest is the difficulty;
- VOC: per query time, the seconds since the last new instance of the concept (``since_s``; the count
  seen so far is the answer itself, ``answers``); the difficulty is the final query time's;
- VMR: the seconds from the last turn (a change of travel direction by more than ``vmr_turn_deg``, or a
  stop) to the queried moment (``since_s``).
A difficulty is binned near / medium / far by the task's edges (QAParams ``*_bins_s``), the query time
by the video's horizon (early / middle / late, ``horizon_edges``). VOO and VPO draw their concept sets
and anchors stratified over (difficulty bin, horizon bin): ``stratified_pick``.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import pyarrow as pa

from vsi_wild.stages.qa.common import Question, StableRng

T = TypeVar("T")

DIFFICULTY_COLUMNS = ("gaps_s", "since_s", "difficulty_s", "difficulty_bin", "horizon_bin")  # copied to the export


def difficulty_bin(seconds: float, edges: Sequence[float]) -> str:
    """near below the first edge, far from the second on, medium between."""
    if seconds < edges[0]:
        return "near"
    return "medium" if seconds < edges[1] else "far"


def horizon_bin(query_time: float, duration_s: float, edges: Sequence[float]) -> str:
    """Where in the video the query falls: early / middle / late by query time / duration."""
    frac = query_time / duration_s if duration_s > 0 else 1.0
    if frac < edges[0]:
        return "early"
    return "middle" if frac < edges[1] else "late"


def gaps(times: Sequence[float]) -> list[float]:
    """The gaps between consecutive times, in time order."""
    s = sorted(float(t) for t in times)
    return [b - a for a, b in zip(s, s[1:], strict=False)]


def since_last(events: Sequence[float], query_time: float, origin: float = 0.0) -> float:
    """Seconds from the last event at or before ``query_time`` (none: from ``origin``) to it."""
    past = [e for e in events if e <= query_time + 1e-9]
    return float(query_time - (max(past) if past else origin))


def stratified_pick(items: Sequence[T], stratum: Callable[[T], tuple[str, str]], count: int, rng: StableRng) -> list[T]:
    """Up to ``count`` distinct items, spread over their strata: the strata in a seeded order, one
    item (seeded) from each in turn, so every non-empty stratum gets a question before any gets two."""
    by: dict[tuple[str, str], list[T]] = {}
    for it in items:
        by.setdefault(stratum(it), []).append(it)
    pools = {k: rng.shuffled(v) for k, v in sorted(by.items())}
    order = rng.shuffled(sorted(pools))
    out: list[T] = []
    while len(out) < count and any(pools.values()):
        for k in order:
            if pools[k] and len(out) < count:
                out.append(pools[k].pop())
    return out


def since_last_turn(
    poses: pa.Table | None, video_id: str, moment: float, half_window_s: float, turn_deg: float
) -> float | None:
    """Seconds from the last turn or stop before ``moment`` to it, from the video's 2 FPS poses.

    The travel direction at a sample time t is the ground-plane (x, y) displacement from t - w to
    t + w (w = ``half_window_s``, the window VMR's direction is measured on). Walking back from the
    moment, the last turn is the latest sample whose direction differs from the moment's by more
    than ``turn_deg``, or where the camera moved less than a tenth of its move at the moment (a
    stop; both tests are scale-free, as pose scale is arbitrary). None when the poses do not give a
    direction at the moment; the first sample when the camera travelled the same way since then."""
    if poses is None or not poses.num_rows:
        return None
    rows = sorted(
        (
            r
            for r in poses.select(["video_id", "time", "x", "y", "valid"]).to_pylist()
            if r["video_id"] == video_id
            and r["valid"]
            and r["x"] is not None
            and r["y"] is not None
            and math.isfinite(float(r["x"]))
            and math.isfinite(float(r["y"]))
        ),
        key=lambda r: r["time"],
    )
    if len(rows) < 2:
        return None
    times = [float(r["time"]) for r in rows]
    pts = [(float(r["x"]), float(r["y"])) for r in rows]

    def at(t: float) -> tuple[float, float]:  # the nearest sample's position
        k = bisect.bisect_left(times, t)
        if k > 0 and (k == len(times) or t - times[k - 1] <= times[k] - t):
            k -= 1
        return pts[k]

    def move(t: float) -> tuple[float, float, float]:
        a, b = at(t - half_window_s), at(t + half_window_s)
        dx, dy = b[0] - a[0], b[1] - a[1]
        return dx, dy, math.hypot(dx, dy)

    x0, y0, n0 = move(moment)
    if n0 <= 0:
        return None
    for t in reversed([t for t in times if t < moment - 1e-9]):
        dx, dy, n = move(t)
        if n <= 0.1 * n0:
            return float(moment - t)
        cos = max(-1.0, min(1.0, (dx * x0 + dy * y0) / (n * n0)))
        if math.degrees(math.acos(cos)) > turn_deg:
            return float(moment - t)
    return float(moment - times[0])


def stamp(
    q: Question,
    edges: Sequence[float],
    horizon_edges: Sequence[float],
    gaps_s: Sequence[float] | None = None,
    since_s: Sequence[float] | None = None,
) -> Question:
    """Record a question's difficulty quantities and bins (gaps: their smallest is the difficulty;
    since: the last query time's)."""
    q.gaps_s = [float(g) for g in gaps_s] if gaps_s is not None else None
    q.since_s = [float(s) for s in since_s] if since_s is not None else None
    q.difficulty_s = min(q.gaps_s) if q.gaps_s else (q.since_s[-1] if q.since_s else None)
    q.difficulty_bin = difficulty_bin(q.difficulty_s, edges) if q.difficulty_s is not None else None
    q.horizon_bin = horizon_bin(q.query_times[-1], q.duration_s, horizon_edges)
    return q
