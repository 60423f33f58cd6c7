"""Revisited places, recognised by their objects: a ground-plane similarity between two clips'
layouts, proposed by RANSAC and accepted by an a-contrario test.

Poses drift over a walk, so an object seen again minutes later is located metres from its first
sighting; the objects around it have drifted the same way. For two clips, every pair of
same-concept correspondences proposes the similarity z -> m z + t (complex ground coordinates)
that lays both onto their partners, and every single correspondence the shift that lays it onto
its partner (the drift over a short walk is mostly a shift; exhaustive RANSAC over both). A
proposal is scored by the number of false alarms (Moisan and Stival's a-contrario RANSAC): under
the null hypothesis that the first clip's other objects stand anywhere in their own layout (area
A: their bounding box), independently of the second clip's, an object of concept c that the
proposal maps by z -> m z + t lands within e of one of the second clip's n_c objects of c with
probability p = min(1, n_c pi e^2 / (|m|^2 A)): the disc of radius e around a look-alike is one of
radius e / |m| in the first layout. (A proposal that shrinks the first layout, |m| < 1, packs its
objects among the second's look-alikes; the null is stated where the objects are random, in their
own layout, so that packing is no evidence.) With the residuals' probabilities
sorted, p_(1) <= p_(2) <= ..., the proposal explains k objects beyond its own s (1 or 2) with

    NFA = N_tests * (n - s) * C(n - s, k) * p_(k)^k

false alarms expected by chance, N_tests twice the number of proposals of its kind tried in the
whole video (every clip pair's: the two kinds share the expected false alarms). The best proposal is accepted when its
NFA is below ``max_false_alarms`` (1: fewer than one chance alignment expected per video), refitted by least squares on
its k + s objects. There is no tolerance, rotation or shift limit to tune: what chance could explain, the NFA says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import gammaln

from vsi_wild.stages.reconcile.instances import ClipInstance

if TYPE_CHECKING:
    from vsi_wild.stages.reconcile.locate import Located

_CHUNK = 2048  # proposals scored at once (memory: chunk x n_a x n_b floats)


@dataclass(frozen=True)
class Alignment:
    """A similarity z -> m z + t laying clip ``clips[0]``'s ground layout onto ``clips[1]``'s."""

    clips: tuple[int, int]
    m: complex
    t: complex
    inliers: tuple[tuple[tuple[int, int], tuple[int, int]], ...]  # (instance key in clip i, in clip j)
    log10_nfa: float
    residual_var: float  # per axis, of an aligned object's position (pose units squared)
    centre: complex  # of the inliers in clip i
    spread: float  # sum of the inliers' squared distances from the centre

    def apply(self, xy: np.ndarray) -> np.ndarray:
        z = self.m * complex(xy[0], xy[1]) + self.t
        return np.array([z.real, z.imag])

    @property
    def jacobian(self) -> np.ndarray:
        return np.array([[self.m.real, -self.m.imag], [self.m.imag, self.m.real]])

    def cov_at(self, xy: np.ndarray) -> np.ndarray:
        """Uncertainty of the fitted map at a point (a line fit's: larger away from the inliers)."""
        k = len(self.inliers)
        lever = abs(complex(xy[0], xy[1]) - self.centre) ** 2 / max(self.spread, 1e-12)
        return np.eye(2) * self.residual_var * (1.0 / k + lever)


def _located(instances: Sequence[ClipInstance]) -> list[ClipInstance]:
    """Instances a layout can use: located by ground contact or triangulation (a viewing ray alone
    leaves the distance open)."""
    return [c for c in instances if c.where is not None and c.where.how != "ray"]


def _place(c: ClipInstance) -> Located:
    """Where a layout's instance is (a layout holds only ``_located`` instances)."""
    assert c.where is not None
    return c.where


def _hypotheses(A: list[ClipInstance], B: list[ClipInstance], fixed: int) -> list[tuple[int, ...]]:
    """Proposals from ``fixed`` same-concept correspondences: one (a shift) or two (a similarity)."""
    corr: list[tuple[int, ...]] = [(i, j) for i, a in enumerate(A) for j, b in enumerate(B) if a.concept == b.concept]
    if fixed == 1:
        return corr
    out: list[tuple[int, ...]] = []
    for x in range(len(corr)):
        for y in range(x + 1, len(corr)):
            (i1, j1), (i2, j2) = corr[x], corr[y]
            if i1 != i2 and j1 != j2:
                out.append((i1, j1, i2, j2))
    return out


def _area(z: np.ndarray, layout: list[ClipInstance]) -> float:
    """The area a layout's objects spread over: their bounding box, widened on every side by the
    objects' mean location uncertainty (a layout of two objects still covers some ground)."""
    sig = float(np.mean([math.sqrt(max(np.trace(_place(c).cov) / 2.0, 0.0)) for c in layout]))
    w = z.real.max() - z.real.min() + 2 * sig
    h = z.imag.max() - z.imag.min() + 2 * sig
    return max(w * h, 1e-9)


def _best(
    A: list[ClipInstance], B: list[ClipInstance], hyps: list[tuple[int, ...]], fixed: int, log10_tests: float
) -> tuple[float, tuple[int, ...], int] | None:
    """(log10 NFA, proposal, k) of the proposal with the fewest false alarms, of proposals from
    ``fixed`` correspondences (1: a shift; 2: a similarity); None without one."""
    za = np.array([complex(*_place(c).xy) for c in A])
    zb = np.array([complex(*_place(c).xy) for c in B])
    n = len(A)
    if n < fixed + 1 or not hyps:
        return None
    same = np.array([[a.concept == b.concept for b in B] for a in A])
    n_c = same.sum(axis=1).astype(float)  # B's look-alikes of each of A's objects
    area = _area(za, A)  # where the null places A's objects
    rest = n - fixed  # objects beyond the proposal's own
    ks = np.arange(1, rest + 1)
    log10_comb = (gammaln(rest + 1) - gammaln(ks + 1) - gammaln(rest + 1 - ks)) / math.log(10)
    base = log10_tests + math.log10(rest)
    best = None
    H = np.array(hyps)
    for s in range(0, len(H), _CHUNK):
        h = H[s : s + _CHUNK]
        if fixed == 1:
            m = np.ones(len(h), dtype=complex)
            ok = np.ones(len(h), dtype=bool)
        else:
            da = za[h[:, 2]] - za[h[:, 0]]
            ok = np.abs(da) > 1e-9
            m = np.where(ok, (zb[h[:, 3]] - zb[h[:, 1]]) / np.where(ok, da, 1.0), 0.0)
        t = zb[h[:, 1]] - m * za[h[:, 0]]
        mapped = m[:, None] * za[None, :] + t[:, None]  # (H, n_a)
        d = np.abs(mapped[:, :, None] - zb[None, None, :])  # (H, n_a, n_b)
        d = np.where(same[None], d, np.inf)
        rows = np.arange(len(h))
        for c in range(1, 2 * fixed, 2):  # the proposal's own partners are taken
            d[rows, :, h[:, c]] = np.inf
        e = d.min(axis=2)
        with np.errstate(invalid="ignore"):  # no look-alike at all: p = 1
            # a disc of radius e in B's layout is one of radius e / |m| in A's
            scaled = np.maximum(np.abs(m), 1e-12)[:, None] ** 2 * area
            p = np.where(np.isfinite(e), np.minimum(1.0, n_c[None, :] * math.pi * e**2 / scaled), 1.0)
        for c in range(0, 2 * fixed, 2):  # the proposal's own objects do not count
            p[rows, h[:, c]] = np.inf
        # a residual of exactly 0 (a layout laid onto itself) would make the NFA -inf: floor it
        p = np.maximum(np.sort(p, axis=1)[:, :rest], 1e-300)
        log10_nfa = base + log10_comb[None, :] + ks[None, :] * np.log10(p)
        log10_nfa[~ok] = np.inf
        k_best = np.argmin(log10_nfa, axis=1)
        vals = log10_nfa[rows, k_best]
        i = int(np.argmin(vals))
        if np.isfinite(vals[i]) and (best is None or vals[i] < best[0]):
            best = (float(vals[i]), tuple(int(x) for x in h[i]), int(ks[k_best[i]]))
    return best


def _fit(za: np.ndarray, zb: np.ndarray, shift_only: bool = False) -> tuple[complex, complex]:
    """Least-squares similarity zb ~ m za + t (``shift_only``: m = 1)."""
    ca, cb = za.mean(), zb.mean()
    if shift_only:
        return 1.0 + 0j, complex(cb - ca)
    den = float((np.abs(za - ca) ** 2).sum())
    m = complex(((zb - cb) * np.conj(za - ca)).sum() / den) if den > 1e-12 else 1.0 + 0j
    return m, complex(cb - m * ca)


def align_clips(instances: Sequence[ClipInstance], max_false_alarms: float = 1.0) -> dict[tuple[int, int], Alignment]:
    """The accepted alignment (``Alignment``) of every pair of clips i < j whose layouts a
    similarity lays onto each other with fewer than ``max_false_alarms`` chance alignments
    expected in the whole video (the module docstring)."""
    by_clip: dict[int, list[ClipInstance]] = {}
    for ci in sorted(_located(instances), key=lambda c: c.key):
        by_clip.setdefault(ci.clip, []).append(ci)
    clips = sorted(by_clip)
    pairs = [(i, j) for x, i in enumerate(clips) for j in clips[x + 1 :]]
    hyps = {(i, j, fixed): _hypotheses(by_clip[i], by_clip[j], fixed) for i, j in pairs for fixed in (1, 2)}
    # the two kinds share the expected false alarms: each is tested with twice its own count
    tests = {fixed: 2 * sum(len(h) for (_, _, f), h in hyps.items() if f == fixed) for fixed in (1, 2)}
    out = {}
    for i, j in pairs:
        A, B = by_clip[i], by_clip[j]
        found = None
        for fixed in (1, 2):
            if not tests[fixed]:
                continue
            got = _best(A, B, hyps[(i, j, fixed)], fixed, math.log10(tests[fixed]))
            if got is not None and (found is None or got[0] < found[0][0]):
                found = (got, fixed)
        if found is None or found[0][0] >= math.log10(max_false_alarms):
            continue
        (log10_nfa, h, k), fixed = found
        za = np.array([complex(*_place(c).xy) for c in A])
        zb = np.array([complex(*_place(c).xy) for c in B])
        own = [(h[c], h[c + 1]) for c in range(0, 2 * fixed, 2)]
        if fixed == 1:
            m0, t0 = 1.0 + 0j, zb[own[0][1]] - za[own[0][0]]
        else:
            m0 = (zb[own[1][1]] - zb[own[0][1]]) / (za[own[1][0]] - za[own[0][0]])
            t0 = zb[own[0][1]] - m0 * za[own[0][0]]
        # the proposal's k best-explained objects, one-to-one with their nearest look-alikes
        pairs_ij = list(own)
        used_a, used_b = {a for a, _ in own}, {b for _, b in own}
        cand = sorted(
            (abs(m0 * za[a] + t0 - zb[b]), a, b)
            for a in range(len(A))
            for b in range(len(B))
            if A[a].concept == B[b].concept and a not in used_a and b not in used_b
        )
        for _, a, b in cand:
            if len(pairs_ij) >= k + fixed:
                break
            if a in used_a or b in used_b:
                continue
            pairs_ij.append((a, b))
            used_a.add(a)
            used_b.add(b)
        sa = np.array([za[a] for a, _ in pairs_ij])
        sb = np.array([zb[b] for _, b in pairs_ij])
        m, t = _fit(sa, sb, shift_only=fixed == 1)
        res = np.abs(m * sa + t - sb) ** 2
        dof = max(2 * len(pairs_ij) - 2 * fixed, 1)
        own_var = float(np.mean([np.trace(_place(A[a]).cov) / 2 + np.trace(_place(B[b]).cov) / 2 for a, b in pairs_ij]))
        centre = complex(sa.mean())
        spread = float((np.abs(sa - centre) ** 2).sum()) if fixed == 2 else math.inf  # a shift has no lever
        out[(i, j)] = Alignment(
            (i, j),
            m,
            t,
            tuple((A[a].key, B[b].key) for a, b in pairs_ij),
            log10_nfa,
            max(float(res.sum()) / dof, own_var),
            centre,
            spread,
        )
    return out
