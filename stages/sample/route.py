"""The camera's walk: a list of legs (move, turn, pause, arc), evaluated at any time.

A *move* keeps the heading fixed and travels in a constant direction relative to it (forward = 0°,
right = 90°, backward = 180°, left = -90°, diagonals in between) with a trapezoidal speed profile;
a *turn* rotates in place; a *pause* keeps the camera still; an *arc* walks forward while turning.
Routes are closed (they end at their start pose), so a longer sample loops the route.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EYE_HEIGHT = 1.6
BOB_AMPLITUDE = 0.012  # metres; pitch and roll stay exactly 0
STRIDE = 0.75  # metres per bob period
RAMP_S = 0.4  # speed ramp at each end of a move


@dataclass(frozen=True)
class Move:
    duration: float
    rel_deg: float  # direction of travel relative to the heading (+ = right)
    speed: float  # cruise speed, m/s


@dataclass(frozen=True)
class Goto:
    duration: float
    target: tuple[float, float]  # reached at the current heading (direction derived)


@dataclass(frozen=True)
class Turn:
    duration: float
    dyaw: float  # + turns right


@dataclass(frozen=True)
class Pause:
    duration: float


@dataclass(frozen=True)
class Arc:
    duration: float
    speed: float
    dyaw: float


Leg = Move | Goto | Turn | Pause | Arc


@dataclass(frozen=True)
class LegState:
    t0: float
    x: float
    y: float
    yaw: float
    dist: float  # path length walked before this leg


@dataclass(frozen=True)
class Segment:
    """A resolved leg: when it runs, where it starts, what it does (for truth and tests)."""

    kind: str  # move | turn | pause | arc
    t0: float
    t1: float
    x0: float
    y0: float
    x1: float
    y1: float
    yaw0: float
    yaw1: float
    rel_deg: float | None  # direction of travel relative to the heading, for moves


def _ramp(duration: float) -> float:
    return min(RAMP_S, duration / 4.0)


def _trapezoid(tau: float, duration: float) -> float:
    """Fraction of the distance covered at tau with a trapezoidal speed profile."""
    r = _ramp(duration)
    cruise = duration - r  # distance = v * (T - r)
    tau = min(max(tau, 0.0), duration)
    if tau < r:
        d = 0.5 * tau * tau / r
    elif tau <= duration - r:
        d = 0.5 * r + (tau - r)
    else:
        u = duration - tau
        d = cruise - 0.5 * u * u / r
    return d / cruise


class Route:
    def __init__(self, start: tuple[float, float], start_yaw: float, legs: list[Leg]):
        self.legs = list(legs)
        self.states: list[LegState] = []
        self.segments: list[Segment] = []
        x, y = start
        yaw, t, dist = start_yaw, 0.0, 0.0
        for leg in self.legs:
            st = LegState(t, x, y, yaw, dist)
            self.states.append(st)
            x1, y1, yaw1, d = self._eval(leg, st, leg.duration)
            rel = None
            kind = type(leg).__name__.lower()
            if isinstance(leg, Move):
                rel = float(leg.rel_deg)
            elif isinstance(leg, Goto):
                kind = "move"
                rel = float(_wrap(math.degrees(math.atan2(x1 - x, y1 - y)) - yaw))
            self.segments.append(Segment(kind, t, t + leg.duration, x, y, x1, y1, yaw, yaw1, rel))
            x, y, yaw, dist = x1, y1, yaw1, dist + d
            t += leg.duration
        self.length = t
        self.total_dist = dist
        self.end = (x, y, yaw)
        self.start = (start[0], start[1], start_yaw)
        self._t0 = np.array([s.t0 for s in self.states])

    @property
    def closed(self) -> bool:
        return (
            math.hypot(self.end[0] - self.start[0], self.end[1] - self.start[1]) < 1e-6
            and abs(_wrap(self.end[2] - self.start[2])) < 1e-6
        )

    @staticmethod
    def _eval(leg: Leg, st: LegState, tau: float) -> tuple[float, float, float, float]:
        """(x, y, yaw, distance walked in this leg) at tau seconds into ``leg``."""
        if isinstance(leg, Pause):
            return st.x, st.y, st.yaw, 0.0
        if isinstance(leg, Turn):
            f = 0.5 * (1.0 - math.cos(math.pi * min(max(tau / leg.duration, 0.0), 1.0)))
            return st.x, st.y, st.yaw + leg.dyaw * f, 0.0
        if isinstance(leg, Arc):
            w = math.radians(leg.dyaw) / leg.duration
            a0 = math.radians(st.yaw)
            a = a0 + w * tau
            if abs(w) < 1e-12:
                dx, dy = leg.speed * tau * math.sin(a0), leg.speed * tau * math.cos(a0)
            else:
                dx = leg.speed / w * (math.cos(a0) - math.cos(a))
                dy = leg.speed / w * (math.sin(a) - math.sin(a0))
            return st.x + dx, st.y + dy, math.degrees(a), leg.speed * tau
        if isinstance(leg, Move):
            total = leg.speed * (leg.duration - _ramp(leg.duration))
            a = math.radians(st.yaw + leg.rel_deg)
            ux, uy = math.sin(a), math.cos(a)
        elif isinstance(leg, Goto):
            ux, uy = leg.target[0] - st.x, leg.target[1] - st.y
            total = math.hypot(ux, uy)
            if total > 0:
                ux, uy = ux / total, uy / total
        else:  # pragma: no cover
            raise TypeError(leg)
        d = total * _trapezoid(tau, leg.duration)
        return st.x + d * ux, st.y + d * uy, st.yaw, d

    def pose(self, t: float) -> tuple[float, float, float, float]:
        """(x, y, z, yaw_deg) at route time t (looping past the end of a closed route)."""
        loops = 0
        if t >= self.length:
            if not self.closed:
                t = self.length
            else:
                loops = int(t // self.length)
                t = t - loops * self.length
        i = max(0, int(np.searchsorted(self._t0, t, side="right")) - 1)
        st = self.states[i]
        x, y, yaw, d = self._eval(self.legs[i], st, t - st.t0)
        z = EYE_HEIGHT + BOB_AMPLITUDE * math.sin(2.0 * math.pi * (loops * self.total_dist + st.dist + d) / STRIDE)
        return x, y, z, float(_wrap(yaw))


def _wrap(a: float) -> float:
    return (a + 180.0) % 360.0 - 180.0
