"""The question ledger: what keeps a question the same question from one build to the next.

A question's **identity** is its content: the columns ``schema.QUESTION_COLUMNS`` marks ``identity``
(its view video, task, subtype, what it is about -- the clip, the anchor frames, the concept set,
the concept -- and its query times), hashed (``identity``). It does not depend on any other
question, so a fix to one video leaves the identities of every other video's questions alone.

The ledger (``schema.QA_LEDGER``, one row per identity ever numbered) is kept with the exports
(``ledger.parquet``) and is what the next export starts from:
- ``n``, the question's number within its video in the release's doc id
  (``<video>|<n>|<task>|<variant>``): a question that persists keeps it; a new one gets the next
  number of its video; a number once given is never given to another question (a question that
  is gone keeps its row, ``state`` "gone", and gets its number back if it returns);
- the option order and answer letter of a multiple-choice question: kept while the question
  persists (``assign_letters``), moved only when the letter balance bound would otherwise break,
  and then as few as the greedy repair needs, each named (``moved_from``);
- whether the export's selections took it (``state``: asked, or why not): the answer-text balance
  (``stages/qa/balance.py``) and the text debiasing (``stages/leak_probe.py``) keep a selected
  question selected unless their bound forces otherwise, and a question they left out stays out.

With no ledger (a first build) every rule falls back to the fresh assignment, so a first build is
what it was before ledgers existed.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vsi_wild import schema
from vsi_wild.stages.qa.common import LETTERS, StableRng, stable_hash

ASKED = "asked"  # in this build's release
UNASKED = "unasked"  # left out by the answer-text balance
TEXT_BIASED = "text_biased"  # left out by the text debiasing
DUPLICATE = "duplicate"  # the same question as another row (dropped at export)
GONE = "gone"  # not among this build's questions (its number stays retired)
STATES = (ASKED, UNASKED, TEXT_BIASED, DUPLICATE, GONE)

# The letter balance bound: within a task, a task and subtype, and a task, subtype and answer
# text (a stratum of n questions), no letter is the answer of more than max(LETTER_SLACK,
# ceil(LETTER_SHARE * n)) questions more than another letter: a model that always answers the
# most frequent letter gains at most about that share over chance. The fresh assignment
# (``export.assign_letters``) is within 1 per task and 2 per stratum.
LETTER_SLACK = 2
LETTER_SHARE = 0.02


def allowed_spread(n: int, slack: int = LETTER_SLACK, share: float = LETTER_SHARE) -> int:
    return max(slack, math.ceil(share * n - 1e-9))


def identity(row: Mapping[str, Any]) -> str:
    """A question's content identity (a QA_QUESTIONS row): a hash of its identity columns."""
    values = [row[name] for name in schema.identity_fields()]
    return stable_hash("identity", *(json.dumps(v, sort_keys=True) for v in values))[:20]


@dataclass
class Ledger:
    """The ledger an export starts from: identity -> its QA_LEDGER row."""

    rows: dict[str, dict[str, Any]]

    @classmethod
    def empty(cls) -> Ledger:
        return cls({})

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> Ledger:
        out: dict[str, dict[str, Any]] = {}
        for i, r in enumerate(rows):
            if r["identity"] in out:
                raise ValueError(f"ledger row {i}: identity {r['identity']} occurs twice")
            out[r["identity"]] = dict(r)
        return cls(out)

    def __bool__(self) -> bool:
        return bool(self.rows)

    def get(self, ident: str) -> dict[str, Any] | None:
        return self.rows.get(ident)

    def state(self, ident: str) -> str | None:
        r = self.rows.get(ident)
        return r["state"] if r else None

    def next_number(self) -> dict[str, int]:
        """video_name -> the first number no question of that video ever had."""
        top: dict[str, int] = {}
        for r in self.rows.values():
            if r["n"] is not None:
                top[r["video_name"]] = max(top.get(r["video_name"], -1), r["n"])
        return {v: n + 1 for v, n in top.items()}


# ----------------------------------------------------------------------------- letters
@dataclass(frozen=True)
class Move:
    """A question whose letter the balance bound forced to move."""

    doc_id: str
    identity: str
    before: str  # letter
    after: str
    stratum: str  # the stratum whose bound forced it, e.g. "VMR/cardinal/forward"


def strata_of(row: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The strata whose letter counts the bound limits (``row``: task_type, subtype, correct)."""
    return [(row["task_type"],), (row["task_type"], row["subtype"]), (row["task_type"], row["subtype"], row["correct"])]


def letter_counts(rows: Sequence[Mapping[str, Any]], letter_of: Mapping[str, int]) -> dict[tuple[str, ...], list[int]]:
    counts: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0] * len(LETTERS))
    for r in rows:
        for s in strata_of(r):
            counts[s][letter_of[r["doc_id"]]] += 1
    return counts


def bound_violations(
    rows: Sequence[Mapping[str, Any]], letter_of: Mapping[str, int], slack: int = LETTER_SLACK
) -> dict[tuple[str, ...], int]:
    """stratum -> by how much its letter spread exceeds the bound (strata within it omitted)."""
    out = {}
    for s, c in sorted(letter_counts(rows, letter_of).items()):
        over = (max(c) - min(c)) - allowed_spread(sum(c), slack)
        if over > 0:
            out[s] = over
    return out


def _excess(counts: Mapping[tuple[str, ...], list[int]], slack: int) -> int:
    return sum(max(0, max(c) - min(c) - allowed_spread(sum(c), slack)) for c in counts.values())


def keep_letters(
    rows: Sequence[dict[str, Any]], fresh: Mapping[str, int], ledger: Ledger, seed: int, slack: int = LETTER_SLACK
) -> tuple[dict[str, list[str]], list[Move]]:
    """The option order (texts, in letter order) of each multiple-choice release row.

    ``rows``: question rows with ``doc_id``, ``_identity``, ``task_type``, ``subtype``, ``correct``
    and ``distractors``; ``fresh``: doc_id -> the fresh assignment's answer index, used as is when
    the ledger knows none of the rows. A row the ledger knows keeps its option order when its option
    texts are the same (its letter is where its correct text is), else its answer letter; a new row
    takes the letter its strata have least of. Then, while a stratum's spread exceeds the bound, one
    question of its most frequent letter swaps its answer with the option at the rarest letter,
    new rows before known ones (a known row that moves is a ``Move``); a task the repair cannot
    bring within the bound is assigned afresh."""
    orders: dict[str, list[str]] = {}
    known = {r["doc_id"] for r in rows if (ledger.get(r["_identity"]) or {}).get("options")}
    if not known:
        return {r["doc_id"]: _inserted(r, fresh[r["doc_id"]]) for r in rows}, []
    letter_of: dict[str, int] = {}
    for r in rows:
        if r["doc_id"] not in known:
            continue
        prior = ledger.get(r["_identity"])
        assert prior is not None  # known: the ledger holds its options
        stored = list(prior["options"])
        current = [r["correct"], *r["distractors"]]
        if sorted(stored) == sorted(current):
            orders[r["doc_id"]] = stored
        else:
            orders[r["doc_id"]] = _inserted(r, min(prior["answer_index"], len(current) - 1))
        letter_of[r["doc_id"]] = orders[r["doc_id"]].index(r["correct"])
    counts = letter_counts([r for r in rows if r["doc_id"] in known], letter_of)
    new = sorted(
        (r for r in rows if r["doc_id"] not in known),
        key=lambda r: (r["task_type"], r["subtype"], r["correct"], stable_hash(seed, "letters", r["_identity"])),
    )
    for r in new:
        rng = StableRng(seed, "letters", "new", r["_identity"])
        tie = rng.shuffled(range(len(LETTERS)))
        strata = strata_of(r)
        idx = min(range(len(LETTERS)), key=lambda i: (*(counts[s][i] for s in reversed(strata)), tie.index(i)))
        orders[r["doc_id"]] = _inserted(r, idx)
        letter_of[r["doc_id"]] = idx
        for s in strata:
            counts[s][idx] += 1
    moves = _repair(rows, orders, letter_of, counts, known, slack)
    if moves is None:  # the greedy repair found no improving swap: the offending tasks afresh
        moves = []
        bad = {s[0] for s in bound_violations(rows, letter_of, slack)}
        for r in rows:
            if r["task_type"] in bad:
                before = letter_of[r["doc_id"]]
                orders[r["doc_id"]] = _inserted(r, fresh[r["doc_id"]])
                letter_of[r["doc_id"]] = fresh[r["doc_id"]]
                if r["doc_id"] in known and before != fresh[r["doc_id"]]:
                    moves.append(
                        Move(
                            r["doc_id"],
                            r["_identity"],
                            LETTERS[before],
                            LETTERS[fresh[r["doc_id"]]],
                            f"{r['task_type']} (assigned afresh)",
                        )
                    )
    return orders, moves


def _inserted(row: Mapping[str, Any], index: int) -> list[str]:
    texts = list(row["distractors"])
    texts.insert(index, row["correct"])
    return texts


def _repair(
    rows: Sequence[Mapping[str, Any]],
    orders: dict[str, list[str]],
    letter_of: dict[str, int],
    counts: dict[tuple[str, ...], list[int]],
    known: set[str],
    slack: int,
) -> list[Move] | None:
    """Swap answers until every stratum is within the bound; None when no swap lowers the excess."""
    moved: dict[str, Move] = {}
    by_stratum: dict[tuple[str, ...], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        for s in strata_of(r):
            by_stratum[s].append(r)
    for _ in range(4 * len(rows) + 1):
        total = _excess(counts, slack)
        if total == 0:
            return sorted(moved.values(), key=lambda m: m.doc_id)
        worst = max(
            sorted(counts), key=lambda s: max(counts[s]) - min(counts[s]) - allowed_spread(sum(counts[s]), slack)
        )
        c = counts[worst]
        hi, lo = c.index(max(c)), c.index(min(c))
        best = None
        for r in by_stratum[worst]:
            if letter_of[r["doc_id"]] != hi:
                continue
            for s in strata_of(r):
                counts[s][hi] -= 1
                counts[s][lo] += 1
            after = _excess(counts, slack)
            for s in strata_of(r):
                counts[s][hi] += 1
                counts[s][lo] -= 1
            rank = (after, r["doc_id"] in known, r["doc_id"])
            if after < total and (best is None or rank < best[0]):
                best = (rank, r)
        if best is None:
            return None
        r = best[1]
        order = orders[r["doc_id"]]
        order[hi], order[lo] = order[lo], order[hi]
        letter_of[r["doc_id"]] = lo
        for s in strata_of(r):
            counts[s][hi] -= 1
            counts[s][lo] += 1
        if r["doc_id"] in known:
            first = moved.get(r["doc_id"])
            before = first.before if first else LETTERS[hi]
            if before == LETTERS[lo]:
                moved.pop(r["doc_id"], None)
            else:
                moved[r["doc_id"]] = Move(r["doc_id"], r["_identity"], before, LETTERS[lo], "/".join(worst))
    return None


# ----------------------------------------------------------------------------- the new ledger
def ledger_row(q: Mapping[str, Any], state: str, **kw: Any) -> dict[str, Any]:
    """A QA_LEDGER row of question row ``q`` (a release row) in ``state``."""
    row: dict[str, Any] = {c: None for c in schema.QA_LEDGER.names}
    row.update(
        {
            "identity": q["_identity"],
            "video_name": q["video_name"],
            "state": state,
            **{name: q[name] for name in schema.identity_fields()},
            "question": q["question"],
            "answer_text": q["correct"] if q.get("correct") is not None else q["answers"][-1],
            "frame_indices": q["frame_indices"],
        }
    )
    row.update(kw)
    return row


def merged(prior: Ledger, current: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The new ledger: this build's rows, and every prior row this build does not have, now gone
    (keeping its number, options and letter), ordered by video, number and identity."""
    rows = dict(current)
    for ident, r in prior.rows.items():
        if ident not in rows:
            rows[ident] = {**r, "state": GONE, "moved_from": None, "moved_stratum": None, "forced_out": None}
        elif rows[ident]["n"] is None and r["n"] is not None:  # left out now: keeps its number
            rows[ident] = {**rows[ident], "n": r["n"], "doc_id": r["doc_id"]}
        if rows[ident]["options"] is None and r["options"] is not None and rows[ident]["state"] != ASKED:
            rows[ident] = {**rows[ident], "options": r["options"], "answer_index": r["answer_index"]}
    bad = Counter((r["video_name"], r["n"]) for r in rows.values() if r["n"] is not None)
    twice = [k for k, c in bad.items() if c > 1]
    if twice:
        raise ValueError(f"ledger: numbers given to two questions: {twice[:5]}")
    return sorted(
        rows.values(), key=lambda r: (r["video_name"], r["n"] if r["n"] is not None else 1 << 62, r["identity"])
    )
