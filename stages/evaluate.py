"""Evaluation: the paper's metrics, the Shuffle24 protocol, and blind baselines that flag leaks.

Metrics (SPEC.md, "Evaluation protocol"), each task's own (``QATask.metric``):
- multiple choice (VMR, VPO, VOO): ``ACCURACY``;
- VOC: ``MRA`` = mean(1 - |pred - gt| / max(gt, 1)), each term clipped at 0;
- Shuffle24: every MC question asked under all 24 orders of its 4 options; Top-K (at least one
  correct among the first K orders), Pass@K (at least K of 24 correct), option-order bias (std of
  accuracy across the 24 orders) and the best and worst order's accuracy.
- breakdowns: per task, per subtype, per duration bin (0-10, 10-30, 30-60, 60-120, 120+ min), and
  where the rows carry them (exports/qa.parquet) per difficulty bin (``VOO~difficulty:near``) and
  horizon bin (``VOO~horizon:early``).

Blind baselines answer without the video, from the question's text and options alone (the probes
of seeds 001 and 003): a question set where one of them beats chance clearly leaks its answer
through wording, priors or option asymmetry.
- ``prior``: the option whose text was most often correct in *other* videos of the same task and
  subtype (leave-one-source-out, so a video's own answers never inform it); a numeric task (VOC):
  the median answer of the same concept in other sources (else of all).
- ``consensus``: for orderings (VOO, VPO), the option whose order agrees most with the other
  options (a distractor built by perturbing the answer gives the answer away); else option A
  (a numeric task: 1).
- ``text_probe`` (``text_probe_report``, ``vsi_wild.stages.leak_probe``): a learned one, a classifier
  of the question and option texts trained out of fold, folds grouped by source video.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsi_wild.stages.qa.registry import MC, NUMBER, Metric, mc_tasks, task

LETTERS = "ABCD"
DURATION_BINS_MIN = ((0, 10), (10, 30), (30, 60), (60, 120), (120, math.inf))
# Shuffle24's 24 orders, in the order they are tried: first the 4 cyclic shifts (each option once
# in each slot, so Top-4 of a model that always answers "A" is 1), then the rest. Order p shows
# the original option p[i] at slot i.
_CYCLIC = [tuple((i + s) % 4 for i in range(4)) for s in range(4)]
PERMUTATIONS = _CYCLIC + [p for p in itertools.permutations(range(4)) if p not in _CYCLIC]
_OPTION = re.compile(r"^([A-D])\) (.*)$", re.S)
_ARROW = " → "


class EvalError(ValueError):
    pass


# ------------------------------------------------------------------------------------ rows
def option_texts(row: Mapping[str, Any]) -> list[str]:
    texts = []
    for i, opt in enumerate(row["options"] or []):
        m = _OPTION.match(opt)
        if not m or m.group(1) != LETTERS[i]:
            raise EvalError(f"{row['doc_id']}: option {i} is not '{LETTERS[i]}) ...': {opt!r}")
        texts.append(m.group(2))
    return texts


def correct_index(row: Mapping[str, Any]) -> int:
    return LETTERS.index(row["answer"])


def duration_bin(minutes: float) -> str:
    for lo, hi in DURATION_BINS_MIN:
        if lo <= minutes < hi:
            return f"{lo}-{hi}" if hi != math.inf else f"{lo}+"
    raise EvalError(f"bad duration {minutes}")


def _json_objects(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSONL file; a line that is not a JSON
    object is an error naming the file and the line."""
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise EvalError(f"{path}:{n}: not JSON: {e}") from None
            if not isinstance(row, dict):
                raise EvalError(f"{path}:{n}: not a JSON object: {line.strip()[:80]}")
            yield n, row


def load_jsonl(path: str | Path) -> list[dict[str, Any]]:
    return [row for _, row in _json_objects(path)]


QUESTION_FIELDS = ("doc_id", "task_type", "answer")  # what scoring reads of every question


def check_questions(rows: Sequence[Mapping[str, Any]], source: str | Path) -> None:
    """An error naming ``source`` and the row (1-based) where a question lacks a field scoring
    reads, or has a task type no registered task scores."""
    for n, r in enumerate(rows, 1):
        lacking = [k for k in QUESTION_FIELDS if r.get(k) in (None, "")]
        if lacking:
            raise EvalError(f"{source}: row {n}: no {', '.join(lacking)}")
        try:
            task(r["task_type"])
        except KeyError as e:
            raise EvalError(f"{source}: row {n} ({r['doc_id']}): {e.args[0]}") from None


@dataclass(frozen=True)
class Predictions:
    """A predictions file (JSONL of ``{"doc_id": ..., "prediction": ...}``) read against the
    questions it answers: ``by_doc`` the predictions by doc id, ``unknown`` the doc ids that name
    none of the questions (nor one of an MC question's Shuffle24 copies), in file order."""

    by_doc: dict[str, Any]
    unknown: list[str]


def read_predictions(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> Predictions:
    """``path``'s predictions for ``rows``. A line without a string ``doc_id`` or without a
    ``prediction``, or a doc id predicted twice, is an error naming the file and the line (a
    prediction counted twice or dropped would move a score unseen)."""
    known = {r["doc_id"] for r in rows}
    known |= {shuffle24_doc_id(r["doc_id"], p) for r in rows if task(r["task_type"]).kind == MC for p in range(24)}
    by_doc: dict[str, Any] = {}
    line_of: dict[str, int] = {}
    unknown = []
    for n, p in _json_objects(path):
        doc = p.get("doc_id")
        if not isinstance(doc, str) or not doc:
            raise EvalError(f'{path}:{n}: needs a "doc_id" (a string), has {sorted(p)}')
        if "prediction" not in p:
            raise EvalError(f'{path}:{n}: {doc}: needs a "prediction"')
        if doc in line_of:
            raise EvalError(f"{path}:{n}: {doc} is predicted again (first on line {line_of[doc]})")
        line_of[doc] = n
        by_doc[doc] = p["prediction"]
        if doc not in known:
            unknown.append(doc)
    return Predictions(by_doc, unknown)


def coverage(rows: Sequence[Mapping[str, Any]], predictions: Predictions) -> dict[str, Any]:
    """How far ``predictions`` answer ``rows``: the questions; those with a prediction; those
    without (scored 0); those whose prediction names no answer of its kind (no letter A-D for a
    multiple-choice question, no number for a count: scored 0); the Shuffle24 copies predicted;
    the predictions that name no question (with the first few)."""
    answered = [r for r in rows if predictions.by_doc.get(r["doc_id"]) is not None]
    unparsed = sum(
        (parse_count if is_numeric(r) else parse_letter)(predictions.by_doc[r["doc_id"]]) is None for r in answered
    )
    return {
        "questions": len(rows),
        "answered": len(answered),
        "missing": len(rows) - len(answered),
        "no_answer_in_prediction": unparsed,
        "shuffle24_copies": len(predictions.by_doc)
        - len(predictions.unknown)
        - sum(r["doc_id"] in predictions.by_doc for r in rows),
        "unknown_doc_ids": len(predictions.unknown),
        "unknown_examples": predictions.unknown[:3],
    }


def group_metric(group: str) -> str:
    """The metric a group of ``default_groups`` is scored by (``mixed`` for ``all``)."""
    name = re.split(r"[/@~]", group, maxsplit=1)[0]
    return "mixed" if name == "all" else task(name).metric.name


# ------------------------------------------------------------------------------------ metrics
def mra(pred: float | None, gt: float) -> float:
    if pred is None or not math.isfinite(pred):
        return 0.0
    return max(0.0, 1.0 - abs(pred - gt) / max(gt, 1.0))


def parse_count(text: Any) -> float | None:
    m = re.search(r"-?\d+(?:\.\d+)?", str(text))
    return float(m.group()) if m else None


def parse_letter(text: Any) -> str | None:
    m = re.search(r"\b([A-D])\b", str(text).strip().upper())
    return m.group(1) if m else None


ACCURACY = Metric("accuracy", lambda row, prediction: float(parse_letter(prediction) == row["answer"]))
MRA = Metric("MRA", lambda row, prediction: mra(parse_count(prediction), float(row["answer"])))


def score(row: Mapping[str, Any], prediction: Any) -> float:
    """The row's task's metric: 1/0 for a multiple-choice row (a letter), MRA for a VOC row (a number)."""
    return task(row["task_type"]).metric.score(row, prediction)


def is_numeric(row: Mapping[str, Any]) -> bool:
    return task(row["task_type"]).kind == NUMBER


def evaluate(
    rows: Sequence[Mapping[str, Any]],
    predictions: Mapping[str, Any],
    groups: Callable[[Mapping[str, Any]], Iterable[str]] | None = None,
) -> dict[str, dict[str, float]]:
    """Mean score per group (default: per task, per task/subtype, and overall); rows with no
    prediction score 0 (``coverage`` counts them)."""
    groups = groups or default_groups
    sums: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        pred = predictions.get(row["doc_id"])
        s = score(row, pred) if pred is not None else 0.0
        for g in groups(row):
            sums[g].append(s)
    return {g: {"score": statistics.fmean(v), "n": len(v)} for g, v in sorted(sums.items())}


def default_groups(row: Mapping[str, Any]) -> list[str]:
    g = ["all", row["task_type"]]
    if row.get("subtype"):
        g.append(f"{row['task_type']}/{row['subtype']}")
    if row.get("duration_s") is not None:
        g.append(f"{row['task_type']}@{duration_bin(row['duration_s'] / 60)}min")
    # stratified difficulty (stages/qa/difficulty.py; rich rows only): near / medium / far, early / middle / late
    if row.get("difficulty_bin"):
        g.append(f"{row['task_type']}~difficulty:{row['difficulty_bin']}")
    if row.get("horizon_bin"):
        g.append(f"{row['task_type']}~horizon:{row['horizon_bin']}")
    return g


# ------------------------------------------------------------------------------------ Shuffle24
def shuffle24_doc_id(doc_id: str, order: int) -> str:
    """The doc id of a question's copy in Shuffle24's order ``order`` (``|perm00``..``|perm23``)."""
    return f"{doc_id}|perm{order:02d}"


def shuffle24(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The 24 re-ordered copies of a multiple-choice row (doc_id suffixed ``|perm00``..``|perm23``)."""
    texts = option_texts(row)
    if len(texts) != 4:
        raise EvalError(f"{row['doc_id']}: Shuffle24 needs 4 options, has {len(texts)}")
    ans = correct_index(row)
    out = []
    for p, perm in enumerate(PERMUTATIONS):
        r = dict(row)
        r["doc_id"] = shuffle24_doc_id(row["doc_id"], p)
        r["options"] = [f"{LETTERS[i]}) {texts[j]}" for i, j in enumerate(perm)]
        r["answer"] = LETTERS[perm.index(ans)]
        out.append(r)
    return out


def shuffle24_metrics(
    rows: Sequence[Mapping[str, Any]], predictions: Mapping[str, Any], ks: Sequence[int] = (1, 3, 5)
) -> dict[str, float]:
    """Top-K, Pass@K, option-order bias and best/worst order accuracy over MC ``rows`` (originals,
    not the shuffled copies; predictions are keyed by the shuffled doc ids)."""
    mc = [r for r in rows if task(r["task_type"]).kind == MC]
    if not mc:
        return {}
    per_perm = [[0.0] * len(mc) for _ in PERMUTATIONS]
    for qi, row in enumerate(mc):
        for p, r in enumerate(shuffle24(row)):
            per_perm[p][qi] = score(r, predictions.get(r["doc_id"])) if r["doc_id"] in predictions else 0.0
    out: dict[str, float] = {}
    for k in ks:
        out[f"top{k}"] = statistics.fmean(any(per_perm[p][q] for p in range(k)) for q in range(len(mc)))
        out[f"pass@{k}"] = statistics.fmean(sum(per_perm[p][q] for p in range(24)) >= k for q in range(len(mc)))
    accs = [statistics.fmean(pp) for pp in per_perm]
    out["order_bias_std"] = statistics.pstdev(accs)
    out["best_order_acc"] = max(accs)
    out["worst_order_acc"] = min(accs)
    return out


# ------------------------------------------------------------------------------------ blind baselines
def _source(row: Mapping[str, Any]) -> str:
    return row.get("source_id") or row["video_name"].rsplit("_", 1)[0]


def _concept(row: Mapping[str, Any]) -> str:
    concepts = row.get("concepts")
    if concepts:
        return concepts[0]
    m = re.search(r"number of (.+?)\(s\)", row["question"])
    return m.group(1) if m else ""


def prior_baseline(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Leave-one-source-out answer priors (see the module docstring)."""
    correct_text: dict[tuple[str, str], Counter] = defaultdict(Counter)
    by_source: dict[tuple[str, str, str], Counter] = defaultdict(Counter)
    counts: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for r in rows:
        if is_numeric(r):
            counts[_concept(r)].append((_source(r), float(r["answer"])))
            counts["*"].append((_source(r), float(r["answer"])))
        else:
            key = (r["task_type"], r.get("subtype") or "")
            text = option_texts(r)[correct_index(r)]
            correct_text[key][text] += 1
            by_source[(*key, _source(r))][text] += 1
    preds = {}
    for r in rows:
        src = _source(r)
        if is_numeric(r):
            others = [v for s, v in counts.get(_concept(r), []) if s != src] or [v for s, v in counts["*"] if s != src]
            preds[r["doc_id"]] = str(round(statistics.median(others))) if others else "1"
            continue
        key = (r["task_type"], r.get("subtype") or "")
        freq = correct_text[key] - by_source[(*key, src)]
        texts = option_texts(r)
        best = max(range(len(texts)), key=lambda i: (freq.get(texts[i], 0), -i))
        preds[r["doc_id"]] = LETTERS[best]
    return preds


def _kendall_agreement(a: Sequence[str], b: Sequence[str]) -> int:
    pos = {x: i for i, x in enumerate(b)}
    if set(pos) != set(a):
        return 0
    return sum((pos[a[i]] < pos[a[j]]) for i in range(len(a)) for j in range(i + 1, len(a)))


def consensus_baseline(rows: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """For ordering questions, the option agreeing most with the others (ties: the first)."""
    preds = {}
    for r in rows:
        t = task(r["task_type"])
        if not t.ordering:
            preds[r["doc_id"]] = "1" if t.kind == NUMBER else "A"
            continue
        orders = [t.split(_ARROW) for t in option_texts(r)]
        agree = [sum(_kendall_agreement(o, other) for other in orders if other is not o) for o in orders]
        preds[r["doc_id"]] = LETTERS[max(range(len(orders)), key=lambda i: (agree[i], -i))]
    return preds


def voc_priors(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How far a count prior gets on the numeric rows (release format suffices: the concept is read
    from the question): the MRA of the best constant answer (the integer that scores best on these
    very rows, an upper bound for any constant) and of ``prior_baseline``'s per-concept median
    (leave-one-source-out). Empty when there is no numeric row."""
    numeric = [r for r in rows if is_numeric(r)]
    if not numeric:
        return {}
    answers = [float(r["answer"]) for r in numeric]
    lo, hi = int(min(answers)), int(max(answers))
    best = max(range(min(lo, 1), hi + 1), key=lambda c: (statistics.fmean(mra(c, a) for a in answers), -c))
    preds = prior_baseline(numeric)
    return {
        "n": len(numeric),
        "best_constant": {"answer": best, "mra": statistics.fmean(mra(best, a) for a in answers)},
        "median_prior_mra": statistics.fmean(score(r, preds[r["doc_id"]]) for r in numeric),
    }


BASELINES: dict[str, Callable[[Sequence[Mapping[str, Any]]], dict[str, str]]] = {
    "prior": prior_baseline,
    "consensus": consensus_baseline,
}


def blind_report(rows: Sequence[Mapping[str, Any]], margin: float = 0.10, min_n: int = 30) -> dict[str, Any]:
    """Each blind baseline's score per task; a multiple-choice task of at least ``min_n`` questions
    whose best blind score is above chance (25%) by more than ``margin`` is flagged as leaking
    (fewer questions cannot tell a leak from luck)."""
    out: dict[str, Any] = {
        "chance": 0.25,
        "margin": margin,
        "min_n": min_n,
        "baselines": {},
        "leaks": [],
        "too_few": [],
    }
    for name, fn in BASELINES.items():
        res = evaluate(rows, fn(rows), groups=lambda r: [r["task_type"]])
        out["baselines"][name] = {k: v["score"] for k, v in res.items()}
    n = Counter(r["task_type"] for r in rows)
    for name in mc_tasks():
        if 0 < n[name] < min_n:
            out["too_few"].append(name)
            continue
        best = max((b.get(name, 0.0) for b in out["baselines"].values()), default=0.0)
        if best > 0.25 + margin:
            out["leaks"].append({"task": name, "best_blind_accuracy": best})
    return out


def text_probe_report(
    rows: Sequence[Mapping[str, Any]], margin: float = 0.10, min_n: int = 30, folds: int = 5, seed: int = 0
) -> dict[str, Any]:
    """The learned text probe over release-format ``rows``: per task its score against chance
    (``leak_probe.ProbeResult.as_json``)."""
    from vsi_wild.stages import leak_probe

    return leak_probe.probe(
        leak_probe.items_from_release(rows), folds=folds, seed=seed, margin=margin, min_n=min_n
    ).as_json()
