"""A learned blind baseline: how far a model that reads only the question and option texts gets.

The text probe of seed 003 and the "train on the test set" method of the debiased VSI-Bench: a
classifier is trained on the benchmark itself, with k-fold cross-validation, and every question is
answered by a model that never saw it (out of fold). The folds are grouped by source video (the
four views of one 360° video share objects, places and wording), so a question is never answered
by a model trained on its own source's questions. A task whose questions all come from one source
(the embedded sample) is grouped by view video instead, and says so (``grouped_by``, a note).

Multiple-choice tasks (VMR, VPO, VOO): every (question, option) pair is a sample, labelled 1 for the
correct option; its features are
- the option's text (TF-IDF of word 1-2 grams): an answer text correct more often than the others;
- the question's words crossed with the option's (``q:o`` pairs): a word of the question that
  predicts the answer;
- the option's shape among its question's options: its length (z-score, longest, shortest), its
  word overlap with the question, and its mean similarity to the other options (a distractor made
  by perturbing the answer makes the answer the options' consensus).
A logistic regression per task scores each option; a question's scores, normalised over its
options, are the probe's probabilities. The probe answers with the highest one (a tie of t options
that holds the correct one counts 1/t); its accuracy is compared with chance (mean 1/options).
A question's bias score is the probability the out-of-fold probe gives its correct option minus
chance: positive where the wording points at the answer.

Numeric tasks (VOC): a ridge regression of log(1 + count) on the question's words (the concept
name: "how many chairs" has a typical answer), scored by MRA against the best constant answer of the
same training folds (the constant that maximises MRA there). A question's bias score is the MRA of
the probe's answer minus the constant's.

A task is flagged when it has at least ``min_n`` questions, the probe beats chance (the constant) by
more than ``margin`` and the binomial test (MC) says that is not luck (p < ``alpha``), with folds grouped
by source (by view video, what one view teaches about another is the shared world, not wording).

``debias`` is the debiased VSI-Bench's iterative bias pruning: drop the questions with the highest
bias score, retrain, and repeat until the probe is within ``stop_margin`` of chance.

Deterministic: the folds are seeded, the models have no random state left.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vsi_wild.stages import evaluate as ev
from vsi_wild.stages.qa.registry import NUMBER, task

PROBE_NAME = "text_probe"
VERSION = "2"  # bump when the probe's features or models change: a cached figure of another version is redone
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class Item:
    """One question as the probe sees it: texts, the truth and its groups (source and view video)."""

    key: str  # unique within a probe run (a doc_id, or a question's row number before letters exist)
    task_type: str
    question: str
    group: str  # the source video: the folds' groups
    video: str  # the view video: the groups when a task has one source only
    options: tuple[str, ...] = ()  # MC: the option texts, without letters
    correct: int | None = None  # MC: index of the correct option
    answer: float | None = None  # numeric: the true count


@dataclass
class TaskProbe:
    """The probe's result on one task."""

    task_type: str
    metric: str  # "accuracy" (MC) or "MRA" (numeric)
    n: int
    sources: int
    probe: float | None  # the probe's mean score (None: too few sources to cross-validate)
    chance: float | None  # MC: mean 1/options; numeric: the best constant's MRA
    p_value: float | None  # MC: one-sided binomial test of the probe's hits against chance
    flagged: bool
    grouped_by: str = "source video"
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "task": self.task_type,
            "metric": self.metric,
            "n": self.n,
            "sources": self.sources,
            "probe": self.probe,
            "chance": self.chance,
            "p_value": self.p_value,
            "flagged": self.flagged,
            "grouped_by": self.grouped_by,
            **({"note": self.note} if self.note else {}),
        }


@dataclass
class ProbeResult:
    tasks: dict[str, TaskProbe]
    bias: dict[str, float]  # item key -> bias score (items of tasks that could be cross-validated)
    folds: dict[str, int]  # item key -> the fold that answered it
    folds_k: int
    margin: float
    min_n: int
    alpha: float

    def flagged(self) -> list[str]:
        return [t for t, p in self.tasks.items() if p.flagged]

    def as_json(self) -> dict[str, Any]:
        return {
            "probe": PROBE_NAME,
            "folds": self.folds_k,
            "margin": self.margin,
            "min_n": self.min_n,
            "alpha": self.alpha,
            "tasks": [p.as_json() for p in self.tasks.values()],
            "flagged": self.flagged(),
        }


# ------------------------------------------------------------------------------------ items
def items_from_release(rows: Iterable[Mapping[str, Any]]) -> list[Item]:
    """Probe items of release-format rows (the jsonl or exports/qa.parquet): options ``"A) ..."``,
    the answer a letter (MC) or a number (VOC); grouped by ``source_id``, else by the video name
    without its view suffix (the public file's ``<youtube id>_<view>.mp4``)."""
    out = []
    for r in rows:
        group, video = ev._source(r), r["video_name"]
        if task(r["task_type"]).kind == NUMBER:
            value = ev.parse_count(r["answer"])
            if value is None:
                raise ev.EvalError(f"{r['doc_id']}: answer {r['answer']!r} is not a number")
            out.append(Item(r["doc_id"], r["task_type"], r["question"], group, video, answer=value))
        else:
            out.append(
                Item(
                    r["doc_id"],
                    r["task_type"],
                    r["question"],
                    group,
                    video,
                    options=tuple(ev.option_texts(r)),
                    correct=ev.correct_index(r),
                )
            )
    return out


# ------------------------------------------------------------------------------------ folds
def fold_of(groups: Sequence[str], folds: int, seed: int) -> list[int]:
    """The fold of each row: GroupKFold over the groups (every group in exactly one fold), with the
    groups shuffled by ``seed``; ``min(folds, distinct groups)`` folds."""
    from sklearn.model_selection import GroupKFold

    k = min(folds, len(set(groups)))
    out = [0] * len(groups)
    splitter = GroupKFold(n_splits=k, shuffle=True, random_state=seed)
    for f, (_, test) in enumerate(splitter.split(np.zeros(len(groups)), groups=list(groups))):
        for i in test:
            out[i] = f
    return out


# ------------------------------------------------------------------------------------ features
def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _cross_analyzer(questions: Sequence[str]) -> Callable[[str], list[str]]:
    """The ``q:o`` pairs of a "question\0option" text, over the question words that are in at most
    half the task's questions: a template's words say nothing the option's own features do not."""
    df = Counter(w for q in questions for w in set(_words(q)))
    informative = {w for w, n in df.items() if n <= 0.5 * len(questions)}

    def pairs(text: str) -> list[str]:
        question, option = text.split("\x00", 1)
        q, o = sorted(set(_words(question)) & informative), sorted(set(_words(option)))
        return [f"{a}:{b}" for a in q for b in o]

    return pairs


def _bigrams(words: Sequence[str]) -> set[tuple[str, str]]:
    return set(zip(words, words[1:], strict=False)) or {(w, "") for w in words}


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def _shape_features(items: Sequence[Item]) -> np.ndarray:
    """Per option: length z-score, longest, shortest, overlap with the question, mean similarity
    to the question's other options (word bigrams, which keep order: 'a → b')."""
    rows = []
    for it in items:
        lengths = np.array([len(o) for o in it.options], dtype=float)
        sd = lengths.std() or 1.0
        qwords = set(_words(it.question))
        grams = [_bigrams(_words(o)) for o in it.options]
        for i, opt in enumerate(it.options):
            others = [_jaccard(grams[i], grams[j]) for j in range(len(it.options)) if j != i]
            rows.append(
                [
                    (lengths[i] - lengths.mean()) / sd,
                    float(lengths[i] == lengths.max() and lengths.min() != lengths.max()),
                    float(lengths[i] == lengths.min() and lengths.min() != lengths.max()),
                    _jaccard(set(_words(opt)), qwords),
                    float(np.mean(others)) if others else 0.0,
                ]
            )
    return np.array(rows, dtype=float).reshape(-1, 5)


def _mc_matrix(items: Sequence[Item]) -> Any:  # a scipy CSR matrix
    from scipy import sparse
    from sklearn.feature_extraction.text import TfidfVectorizer

    options = [o for it in items for o in it.options]
    pairs = [f"{it.question}\x00{o}" for it in items for o in it.options]
    # Fitted on the task's texts without labels: no answer reaches the held-out fold through them.
    opt = TfidfVectorizer(token_pattern=r"(?u)\b\w+\b", ngram_range=(1, 2), sublinear_tf=True).fit_transform(options)
    analyzer = _cross_analyzer([it.question for it in items])
    parts = [opt, sparse.csr_matrix(_shape_features(items))]
    if any(analyzer(p) for p in pairs):  # a templated task has no informative question word at all
        parts.append(TfidfVectorizer(analyzer=analyzer, sublinear_tf=True).fit_transform(pairs))
    return sparse.hstack(parts).tocsr()


# ------------------------------------------------------------------------------------ probes
def _probe_mc(items: Sequence[Item], fold: Sequence[int], seed: int) -> tuple[list[float], list[float]]:
    """Per item: (the probe's hit, tie-shared, and the probability of its correct option)."""
    from sklearn.linear_model import LogisticRegression

    x = _mc_matrix(items)
    owner = np.repeat(np.arange(len(items)), [len(it.options) for it in items])
    y = np.array([int(i == it.correct) for it in items for i in range(len(it.options))])
    option_fold = np.asarray(fold)[owner]
    score = np.zeros(len(y))
    for f in sorted(set(fold)):
        train, test = option_fold != f, option_fold == f
        if len(set(y[train])) < 2:  # nothing to learn from: every option scores the same
            score[test] = 0.5
            continue
        model = LogisticRegression(C=1.0, max_iter=2000, solver="liblinear", random_state=seed)
        score[test] = model.fit(x[train], y[train]).predict_proba(x[test])[:, 1]
    hits, probs = [], []
    start = 0
    for it in items:
        s = score[start : start + len(it.options)]
        start += len(it.options)
        best = np.flatnonzero(np.isclose(s, s.max(), rtol=0, atol=1e-12))
        hits.append(1.0 / len(best) if it.correct in best else 0.0)
        probs.append(float(s[it.correct] / s.sum()) if s.sum() > 0 else 1.0 / len(s))
    return hits, probs


def best_constant(answers: Sequence[float]) -> float:
    """The answer that maximises mean MRA over ``answers`` (among the answers themselves)."""
    values = sorted(set(answers))
    return max(values, key=lambda c: (sum(ev.mra(c, a) for a in answers), -c))


def _probe_numeric(items: Sequence[Item], fold: Sequence[int]) -> tuple[list[float], list[float]]:
    """Per item: (MRA of the probe's answer, MRA of the training folds' best constant)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import Ridge

    x = TfidfVectorizer(token_pattern=r"(?u)\b\w+\b", ngram_range=(1, 2), sublinear_tf=True).fit_transform(
        [it.question for it in items]
    )
    y = np.log1p(np.array([it.answer for it in items], dtype=float))
    fold_arr = np.asarray(fold)
    probe, const = [0.0] * len(items), [0.0] * len(items)
    for f in sorted(set(fold)):
        train, test = np.flatnonzero(fold_arr != f), np.flatnonzero(fold_arr == f)
        constant = best_constant([items[i].answer for i in train])
        pred = np.expm1(Ridge(alpha=1.0).fit(x[train], y[train]).predict(x[test]))
        for i, p in zip(test, pred, strict=True):
            probe[i] = ev.mra(float(round(max(p, 0.0))), items[i].answer)
            const[i] = ev.mra(constant, items[i].answer)
    return probe, const


def _binomial_p(hits: Sequence[float], chance: float) -> float:
    from scipy.stats import binomtest

    return float(binomtest(int(round(sum(hits))), len(hits), chance, alternative="greater").pvalue)


def probe(
    items: Sequence[Item], folds: int = 5, seed: int = 0, margin: float = 0.10, min_n: int = 30, alpha: float = 0.01
) -> ProbeResult:
    """The text probe over ``items`` (each task apart): scores per task, bias score per item."""
    keys = [it.key for it in items]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ev.EvalError(f"text probe: question key {dup!r} occurs twice")
    by_task: dict[str, list[Item]] = {}
    for it in items:
        by_task.setdefault(it.task_type, []).append(it)
    result = ProbeResult({}, {}, {}, folds, margin, min_n, alpha)
    for name in sorted(by_task, key=lambda n: task(n).order):
        its = by_task[name]
        numeric = task(name).kind == NUMBER
        sources = len({it.group for it in its})
        entry = TaskProbe(name, "MRA" if numeric else "accuracy", len(its), sources, None, None, None, False)
        result.tasks[name] = entry
        groups = [it.group for it in its]
        if sources < 2:
            # One 360° video (the embedded sample): its views are the only groups there are. They share
            # objects and places, so a probe trained on one view can know another's answers: an upper bound.
            groups = [it.video for it in its]
            entry.grouped_by = "view video"
            entry.note = (
                "one source video: folds grouped by view video instead; its views share the world (the "
                "order objects are passed in, their counts), so the probe's lead is no leak and is not flagged"
            )
            if len(set(groups)) < 2:
                entry.note = "one view video: cross-validation needs two groups"
                continue
        fold = fold_of(groups, folds, seed)
        result.folds.update({it.key: f for it, f in zip(its, fold, strict=True)})
        if numeric:
            scores, baseline = _probe_numeric(its, fold)
            entry.probe, entry.chance = float(np.mean(scores)), float(np.mean(baseline))
            result.bias.update({it.key: s - b for it, s, b in zip(its, scores, baseline, strict=True)})
            beats = entry.probe - entry.chance > margin
        else:
            hits, probs = _probe_mc(its, fold, seed)
            chances = [1.0 / len(it.options) for it in its]
            entry.probe, entry.chance = float(np.mean(hits)), float(np.mean(chances))
            entry.p_value = _binomial_p(hits, entry.chance)
            result.bias.update({it.key: p - c for it, p, c in zip(its, probs, chances, strict=True)})
            beats = entry.probe - entry.chance > margin and entry.p_value < alpha
        if len(its) < min_n:
            entry.note = "; ".join(filter(None, [entry.note, f"fewer than {min_n} questions: too few to call a leak"]))
        entry.flagged = beats and len(its) >= min_n and entry.grouped_by == "source video"
    return result


# ------------------------------------------------------------------------------------ pruning
@dataclass
class Debiased:
    kept: list[Item]
    dropped: list[dict[str, Any]]  # key, task_type, round, text_bias, reason
    rounds: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # task -> probe per round
    final: ProbeResult | None = None


def debias(
    items: Sequence[Item],
    stop_margin: float = 0.05,
    step: float = 0.05,
    folds: int = 5,
    seed: int = 0,
    alpha: float = 0.01,
    max_rounds: int = 100,
    protected: frozenset[str] | set[str] = frozenset(),
) -> Debiased:
    """Iterative bias pruning, each task apart: while the probe is more than ``stop_margin`` above
    chance (the constant) and, for a multiple-choice task, its lead is significant (binomial p <
    ``alpha``: a lead that luck explains is chance), drop the ``step`` fraction (at least one) of the
    task's questions with the highest positive bias score, and retrain. Stops too when no question
    has a positive score, when fewer than two sources are left (folds by view video: no leak is
    called there), or after ``max_rounds``. The keys in ``protected`` (the questions the previous
    build kept) are cut only after every other positively biased question of their task."""
    kept = list(items)
    dropped: list[dict[str, Any]] = []
    rounds: dict[str, list[dict[str, Any]]] = {}
    for name in sorted({it.task_type for it in items}, key=lambda n: task(n).order):
        for rnd in range(max_rounds):
            its = [it for it in kept if it.task_type == name]
            res = probe(its, folds=folds, seed=seed)
            entry = res.tasks[name]
            rounds.setdefault(name, []).append(
                {"round": rnd, "n": entry.n, "probe": entry.probe, "chance": entry.chance}
            )
            if (
                entry.probe is None
                or entry.chance is None
                or entry.probe - entry.chance <= stop_margin
                or (entry.p_value is not None and entry.p_value >= alpha)
                or entry.grouped_by != "source video"
            ):  # one source: its lead is the shared world (``probe``)
                break
            biased = sorted(
                (it for it in its if res.bias[it.key] > 0),
                key=lambda it: (it.key in protected, -res.bias[it.key], it.key),
            )
            if not biased:
                break
            cut = {it.key for it in biased[: max(1, math.ceil(step * len(its)))]}
            reason = (
                f"round {rnd}: text probe {entry.metric} {entry.probe:.3f} > chance {entry.chance:.3f} + "
                f"{stop_margin:.3f}; among the {len(cut)} most text-biased questions"
            )
            dropped += [
                {"key": it.key, "task_type": name, "round": rnd, "text_bias": res.bias[it.key], "reason": reason}
                for it in biased
                if it.key in cut
            ]
            kept = [it for it in kept if it.key not in cut]
    return Debiased(kept, dropped, rounds, probe(kept, folds=folds, seed=seed))
