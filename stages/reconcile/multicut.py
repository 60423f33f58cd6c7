"""Correlation clustering (multicut) under cannot-links: the partition of n items that maximises
the summed weights of the pairs it joins.

A positive weight is evidence that two items are one (a log-likelihood ratio); a cannot-link pair
is never joined. Items that no chain of positive weights connects are never joined by an optimal
partition (joining them adds only weights <= 0), so each connected component of the positive
pairs is solved alone: exactly as an integer linear program (HiGHS through ``scipy.optimize.milp``,
transitivity constraints added as they are violated) up to ``exact_max`` items, beyond that by
greedy additive edge contraction (GAEC) followed by moves of single items between clusters while
one improves the objective (the single-item moves of Kernighan-Lin local search). Items are
visited in index order and ties broken by index: the same weights give the same partition.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix


def _components(n: int, positive: Iterable[tuple[int, int]]) -> list[list[int]]:
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j in positive:
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    groups: dict[int, list[int]] = {}
    for x in range(n):
        groups.setdefault(find(x), []).append(x)
    return [groups[r] for r in sorted(groups)]


def _exact(
    items: list[int],
    weight: dict[tuple[int, int], float],
    cannot: set[tuple[int, int]],
    join: tuple[int, int] | None = None,
) -> list[list[int]]:
    """The optimal partition of ``items`` by integer programming (lazy triangle constraints); with
    ``join``, the optimal one that puts that pair together."""
    pairs = list(itertools.combinations(items, 2))
    index = {p: k for k, p in enumerate(pairs)}
    c = -np.array([weight.get(p, 0.0) for p in pairs])
    ub = np.array([0.0 if p in cannot else 1.0 for p in pairs])
    lb = np.zeros(len(pairs))
    if join is not None:
        lb[index[join]] = 1.0
    rows: list[tuple[int, int, int]] = []  # x_ij + x_jk - x_ik <= 1 as (plus, plus, minus)
    seen: set[tuple[int, int, int]] = set()
    while True:
        cons = []
        if rows:
            data, ri, ci = [], [], []
            for r, (ka, kb, km) in enumerate(rows):
                data += [1.0, 1.0, -1.0]
                ri += [r, r, r]
                ci += [ka, kb, km]
            A = coo_matrix((data, (ri, ci)), shape=(len(rows), len(pairs))).tocsr()
            cons = [LinearConstraint(A, -np.inf, 1.0)]
        res = milp(c, integrality=np.ones(len(pairs)), bounds=Bounds(lb, ub), constraints=cons)
        if res.x is None:
            raise RuntimeError(f"multicut ILP failed: {res.message}")
        x = np.round(res.x).astype(int)
        added = False
        for i, j, k in itertools.combinations(items, 3):
            for a, b, m in (((i, j), (j, k), (i, k)), ((i, j), (i, k), (j, k)), ((i, k), (j, k), (i, j))):
                if x[index[a]] + x[index[b]] - x[index[m]] > 1:
                    key = (index[a], index[b], index[m])
                    if key not in seen:
                        seen.add(key)
                        rows.append(key)
                        added = True
        if not added:
            break
    parent = {i: i for i in items}

    def find(v: int) -> int:
        while parent[v] != v:
            v = parent[v]
        return v

    for (i, j), k in index.items():
        if x[k]:
            root_i, root_j = find(i), find(j)
            if root_i != root_j:
                parent[max(root_i, root_j)] = min(root_i, root_j)
    groups: dict[int, list[int]] = {}
    for i in items:
        groups.setdefault(find(i), []).append(i)
    return [groups[r] for r in sorted(groups)]


def _objective_gain(node: int, cluster: list[int], weight: dict[tuple[int, int], float]) -> float:
    return sum(weight.get((min(node, o), max(node, o)), 0.0) for o in cluster if o != node)


def _heuristic(
    items: list[int],
    weight: dict[tuple[int, int], float],
    cannot: set[tuple[int, int]],
    join: tuple[int, int] | None = None,
) -> list[list[int]]:
    """GAEC, then single-item moves while one improves the objective; ``join``: a pair contracted
    first and never separated."""
    clusters: dict[int, list[int]] = {i: [i] for i in items}
    if join is not None:  # contracted from the start: the pair moves as one
        weight = dict(weight)
        a, b = join
        for o in items:
            if o in join:
                continue
            ka, kb = (min(a, o), max(a, o)), (min(b, o), max(b, o))
            weight[ka] = weight.get(ka, 0.0) + weight.pop(kb, 0.0)
            if kb in cannot:
                cannot = cannot | {ka}
        clusters = {i: [i] for i in items if i != b}
        items = [i for i in items if i != b]
    between: dict[tuple[int, int], float] = {}
    blocked: set[tuple[int, int]] = set()
    for (i, j), w in weight.items():
        if i in clusters and j in clusters:
            between[(i, j)] = w
    for p in cannot:
        if p[0] in clusters and p[1] in clusters:
            blocked.add(p)
    while True:
        cand = [(w, p) for p, w in between.items() if w > 0 and p not in blocked]
        if not cand:
            break
        w, (a, b) = max(cand, key=lambda x: (x[0], -x[1][0], -x[1][1]))
        clusters[a] += clusters.pop(b)  # b joins a (a < b)
        for x, y in list(between):
            if b in (x, y):
                o = y if x == b else x
                w_ob = between.pop((x, y))
                if o == a:
                    continue
                key = (min(a, o), max(a, o))
                between[key] = between.get(key, 0.0) + w_ob
        for x, y in list(blocked):
            if b in (x, y):
                o = y if x == b else x
                blocked.discard((x, y))
                if o != a:
                    blocked.add((min(a, o), max(a, o)))
    label = {i: root for root, members in clusters.items() for i in members}
    members = {root: sorted(m) for root, m in clusters.items()}

    def allowed(node: int, cl: list[int]) -> bool:
        return not any((min(node, o), max(node, o)) in cannot for o in cl)

    improved = True
    while improved:
        improved = False
        for node in items:
            here = label[node]
            stay = _objective_gain(node, members[here], weight)
            best, best_gain = None, 0.0
            for root in sorted(members):
                if root == here or not allowed(node, members[root]):
                    continue
                gain = _objective_gain(node, members[root], weight) - stay
                if gain > best_gain + 1e-12:
                    best, best_gain = root, gain
            if best is None and len(members[here]) > 1 and -stay > 1e-12:
                best, best_gain = node, -stay  # alone
                members.setdefault(node, [])
            if best is not None and best != here:
                members[here].remove(node)
                if not members[here]:
                    del members[here]
                members.setdefault(best, []).append(node)
                members[best].sort()
                label[node] = best
                improved = True
    out = [sorted(m) for m in sorted(members.values(), key=min) if m]
    if join is not None:
        out = [sorted(g + [join[1]]) if join[0] in g else g for g in out]
    return out


def objective(groups: Iterable[Iterable[int]], weight: dict[tuple[int, int], float]) -> float:
    """The summed weights of the pairs a partition joins."""
    return sum(weight.get((i, j), 0.0) for g in groups for i, j in itertools.combinations(sorted(g), 2))


class Partition:
    """The optimal partition of n items (``labels``: a cluster label per item, numbered by its
    smallest item), with what reversing one pair's decision costs (``margin``)."""

    def __init__(
        self, n: int, weight: dict[tuple[int, int], float], cannot: Iterable[tuple[int, int]], exact_max: int = 40
    ):
        self.n, self.weight, self.exact_max = n, weight, exact_max
        self.cannot = {(min(p), max(p)) for p in cannot}
        positive = [p for p, w in weight.items() if w > 0 and p not in self.cannot]
        self.components = _components(n, positive)
        self.component_of = {i: k for k, comp in enumerate(self.components) for i in comp}
        self.groups: dict[int, list[list[int]]] = {}  # component -> its optimal groups
        self.labels = list(range(n))
        for k, comp in enumerate(self.components):
            groups = self._solve(comp) if len(comp) > 1 else [comp]
            self.groups[k] = groups
            for g in groups:
                for i in g:
                    self.labels[i] = min(g)

    def _solve(
        self, items: list[int], join: tuple[int, int] | None = None, apart: tuple[int, int] | None = None
    ) -> list[list[int]]:
        cannot = self.cannot | ({apart} if apart else set())
        if len(items) <= self.exact_max:
            return _exact(items, self.weight, cannot, join)
        return _heuristic(items, self.weight, cannot, join)

    def margin(self, i: int, j: int) -> tuple[float, list[list[int]] | None]:
        """(how much the summed weights drop when the pair's decision is reversed, positive when
        they are joined and negative when apart; the partition of their components with it
        reversed). -inf without a partition that joins them (a cannot-link)."""
        i, j = min(i, j), max(i, j)
        ki, kj = self.component_of[i], self.component_of[j]
        comps = sorted({ki, kj})
        items = sorted(x for k in comps for x in self.components[k])
        best = objective((g for k in comps for g in self.groups[k]), self.weight)
        joined = self.labels[i] == self.labels[j]
        if joined:
            flipped = self._solve(items, apart=(i, j))
        elif (i, j) in self.cannot:
            return -math.inf, None
        else:
            flipped = self._solve(items, join=(i, j))
        drop = best - objective(flipped, self.weight)
        return (drop if joined else -drop), flipped


def partition(
    n: int, weight: dict[tuple[int, int], float], cannot: Iterable[tuple[int, int]], exact_max: int = 40
) -> list[int]:
    """A cluster label per item (0..n-1), labels numbered by their smallest item. ``weight``: pair
    (i < j) -> weight (absent: 0); ``cannot``: pairs (i < j) never joined."""
    return Partition(n, weight, cannot, exact_max).labels
