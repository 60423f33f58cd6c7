"""Controlled answer distributions (the paper: "strictly controlled ... to prevent models from
exploiting statistical shortcuts"), over a whole task: the export's selection.

Letters are balanced at export (``stages.export.assign_letters``); this balances the answer *texts*.
Within a task and subtype (a group), no answer text may be the answer of more than ``cap(n)``
questions of the group's n, ``cap(n) = max(1, ceil(share * n))``:
- multiple choice: ``share = max_answer_ratio / k``, k the number of distinct option texts the
  group's questions offer (VMR cardinal: 4, so 1.5 x 25%); a "forward" prior gains little;
- a number (VOC): ``share = voc_max_answer_share``, over the task and within each concept that
  spans at least ``CONCEPT_MIN_SOURCES`` sources (the leave-one-source-out per-concept median prior of
  ``stages.evaluate.prior_baseline`` learns from other sources only).
A group of fewer than ``params.answer_balance_min_n`` questions is too small to carry a shortcut
and is left alone. Questions of an over-represented text are dropped, the one with the largest
``hash(seed, doc_id)`` first (seeded, deterministic), until every group's bound holds; each dropped
one becomes a QA_SKIPPED row with the reason. Given the previous build's ledger, a question it left
out stays out and one it asked is dropped only after every newcomer of its text and group. Only release rows are chosen;
their twins (controls, stream forms) follow them at export.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from vsi_wild.stages.qa.common import stable_hash
from vsi_wild.stages.qa.params import QAParams
from vsi_wild.stages.qa.registry import MC, RELEASE, task

CONCEPT_MIN_SOURCES = 3

Group = tuple[str, ...]


def answer_text(q: Mapping[str, Any]) -> str:
    """A question row's answer: the correct option's text (MC) or the final answer (a number)."""
    return q["correct"] if q.get("correct") is not None else q["answers"][-1]


def _source(q: Mapping[str, Any]) -> str:
    return q.get("source_id") or q["video_name"].rsplit("_", 1)[0]


def groups_of(q: Mapping[str, Any]) -> list[Group]:
    """The groups whose answer histogram a question counts in."""
    out: list[Group] = [(q["task_type"], q["subtype"])]
    if task(q["task_type"]).kind != MC and q.get("concepts"):
        out.append((q["task_type"], q["subtype"], "concept", q["concepts"][0]))
    return out


def cap(n: int, share: float) -> int:
    return max(1, math.ceil(share * n - 1e-9))


def group_shares(rows: Sequence[Mapping[str, Any]], params: QAParams) -> dict[Group, float]:
    """Each controlled group's bound on the share of one answer text."""
    members: dict[Group, list[Mapping[str, Any]]] = defaultdict(list)
    for q in rows:
        for g in groups_of(q):
            members[g].append(q)
    out: dict[Group, float] = {}
    for g, qs in sorted(members.items()):
        if len(qs) < params.answer_balance_min_n:
            continue
        if task(g[0]).kind == MC:
            k = len({t for q in qs for t in [q["correct"], *(q["distractors"] or [])]})
            out[g] = min(1.0, params.max_answer_ratio / max(k, 1))
        elif len(g) == 2 or len({_source(q) for q in qs}) >= CONCEPT_MIN_SOURCES:
            out[g] = params.voc_max_answer_share
    return out


def balance_answers(
    rows: Sequence[Mapping[str, Any]], params: QAParams, prior: Mapping[str, Mapping[str, Any]] | None = None
) -> tuple[set[str], list[dict[str, str]]]:
    """The doc ids of release rows to drop so that every controlled group's bound holds, and their
    QA_SKIPPED rows (see the module docstring). ``rows``: question rows with their ``doc_id`` (and
    ``_identity`` when ``prior`` is given).

    ``prior``: the previous build's ledger rows by identity (``stages.ledger``). A question it left
    out stays out (with the reason it was given); one it asked is dropped only when the group's
    bound cannot hold by dropping questions it did not ask."""
    prior = prior or {}
    release = [q for q in rows if q["split"] == RELEASE]
    shares = group_shares(release, params)
    dropped: dict[str, dict[str, str]] = {}
    for q in release:
        before = prior.get(q.get("_identity", ""))
        if before is not None and before["state"] == "unasked":
            dropped[q["doc_id"]] = {
                "video_id": q["video_id"],
                "task_type": q["task_type"],
                "item": q["item"],
                "reason": before["reason"],
            }
    asked_before = {ident for ident, r in prior.items() if r["state"] == "asked"}
    alive: dict[Group, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for q in release:
        if q["doc_id"] in dropped:
            continue
        for g in groups_of(q):
            if g in shares:
                alive[g][answer_text(q)].append(q)
    for by_text in alive.values():  # the next to drop is the last of its list: one not asked before first
        for qs in by_text.values():
            qs.sort(
                key=lambda q: (q.get("_identity") not in asked_before, stable_hash(params.seed, "balance", q["doc_id"]))
            )
    while True:
        worst = None  # (excess, group, text)
        for g, by_text in sorted(alive.items()):
            n = sum(len(v) for v in by_text.values())
            limit = cap(n, shares[g])
            for text, qs in sorted(by_text.items()):
                if len(qs) > limit and (worst is None or len(qs) - limit > worst[0]):
                    worst = (len(qs) - limit, g, text, n, limit)
        if worst is None:
            break
        _, g, text, n, limit = worst
        q = alive[g][text][-1]
        reason = (
            f"answer balance: {text!r} answers {len(alive[g][text])} of {n} {'/'.join(g)} questions, "
            f"over {limit} (share {shares[g]:.3f})"
        )
        for h in groups_of(q):
            if h in alive:
                alive[h][answer_text(q)].remove(q)
        dropped[q["doc_id"]] = {
            "video_id": q["video_id"],
            "task_type": q["task_type"],
            "item": q["item"],
            "reason": reason,
        }
    return set(dropped), [dropped[d] for d in sorted(dropped)]


def answer_histograms(rows: Sequence[Mapping[str, Any]], top: int = 10) -> dict[str, dict[str, dict[str, Any]]]:
    """task -> subtype -> the release rows' answer texts (QA_EXPORT rows): how many questions, how
    many distinct texts, the largest share and the ``top`` most common (what the bound left)."""
    out: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for r in rows:
        if r["split"] == RELEASE:
            out[r["task_type"]][r["subtype"]][r["answer_text"]] += 1
    hist: dict[str, dict[str, dict[str, Any]]] = {}
    for t, by_subtype in sorted(out.items()):
        hist[t] = {}
        for st, c in sorted(by_subtype.items()):
            n = sum(c.values())
            common = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))
            hist[t][st] = {"n": n, "distinct": len(c), "max_share": common[0][1] / n, "top": dict(common[:top])}
    return hist
