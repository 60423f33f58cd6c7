"""Controlled answer distributions (issue 14 part 2): on synthetic question pools whose answer
histogram is skewed, the export's selection brings every answer text under its bound (which the
pool breaks without it), records what it dropped, and the VOC count priors are measured."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict

import pytest

from vsi_wild import schema
from vsi_wild.stages import evaluate as ev
from vsi_wild.stages import export as ex
from vsi_wild.stages.qa import QAParams
from vsi_wild.stages.qa.balance import balance_answers
from vsi_wild.stages.qa.vmr import CARDINAL

PARAMS = QAParams()


def base(source: str, view: str, task: str, subtype: str, index: int, item: str) -> dict:
    """A question row with every column the qa stage writes (null unless set here), so the pool follows the
    schema as it grows."""
    vid = f"{source}_{view}"
    row = {c.name: None for c in schema.QUESTION_COLUMNS if c.in_questions}
    row.update(
        {
            "video_id": vid,
            "source_id": source,
            "view": view,
            "video_name": f"{vid}.mp4",
            "task_type": task,
            "subtype": subtype,
            "split": "release",
            "index": index,
            "item": item,
            "fps": 10.0,
            "duration_s": 600.0,
            "seed": 0,
            "metadata_fingerprint": "fp",
            "pipeline_version": "test",
            "provisional": False,
        }
    )
    return row


def vmr_pool(n_sources: int, skew: float) -> list[dict]:
    """One VMR cardinal question per (source, view); a ``skew`` share of them answer "forward"."""
    rows = []
    k = 0
    for s in range(n_sources):
        for view in ("front", "right", "back", "left"):
            answer = "forward" if (k * 0.6180339887) % 1 < skew else CARDINAL[1 + k % 3]
            rows.append(
                {
                    **base(f"src{s:02d}", view, "VMR", "cardinal", 0, "clip0000"),
                    "question": "q",
                    "correct": answer,
                    "distractors": [o for o in CARDINAL if o != answer],
                    "query_times": [10.0],
                    "answers": [answer],
                    "evidence": [[{"start": 9.0, "end": 10.0}]],
                    "frame_indices": [90],
                    "frame_times": [9.0],
                    "angle_deg": 0.0,
                }
            )
            k += 1
    return rows


def voc_pool(n_sources: int, concepts: tuple[str, ...] = ("chair", "bench", "lamp")) -> list[dict]:
    """VOC totals and their stream twins; most answers are 4 (the category size), per concept too."""
    rows = []
    k = 0
    for s in range(n_sources):
        for view in ("front", "back"):
            for i, concept in enumerate(concepts):
                total = 4 if k % 5 < 3 else 1 + k % 7
                k += 1
                common = {**base(f"src{s:02d}", view, "VOC", "total", i, concept), "concepts": [concept]}
                rows.append(
                    {
                        **common,
                        "question": f"count the {concept}(s)",
                        "query_times": [600.0],
                        "answers": [str(total)],
                        "evidence": [[{"start": 0.0, "end": 600.0}]],
                    }
                )
                rows.append(
                    {
                        **common,
                        "subtype": "stream",
                        "split": "voc_stream",
                        "question": f"stream {concept}",
                        "query_times": [300.0, 600.0],
                        "answers": [str(max(1, total - 1)), str(total)],
                        "evidence": [[{"start": 0.0, "end": 300.0}], [{"start": 0.0, "end": 600.0}]],
                    }
                )
    return rows


def shares(rows, key) -> dict:
    c = Counter(key(r) for r in rows)
    n = sum(c.values())
    return {t: v / n for t, v in c.items()}


def test_vmr_answer_texts_are_brought_under_the_bound():
    pool = vmr_pool(20, skew=0.7)  # 80 questions, about 70% "forward"
    bound = PARAMS.max_answer_ratio / len(CARDINAL)  # 1.5 x the uniform 25%
    before = shares(pool, lambda r: r["correct"])
    assert before["forward"] > bound + 0.2  # the pool breaks the bound ...
    out = ex.assemble(pool, PARAMS)
    kept = out.split_rows("release")
    after = Counter(r["answer_text"] for r in kept)
    n = len(kept)
    assert max(after.values()) <= math.ceil(bound * n)  # ... the selection holds it
    assert len(kept) + len(out.unasked) == len(pool)
    # only "forward" rows went, as few as the bound allows: the most f with f <= ceil(bound (others + f))
    counts = Counter(r["correct"] for r in pool)
    others = len(pool) - counts["forward"]
    most = max(f for f in range(counts["forward"] + 1) if f <= math.ceil(bound * (others + f)))
    assert {t: after[t] for t in CARDINAL if t != "forward"} == {t: counts[t] for t in CARDINAL if t != "forward"}
    assert after["forward"] == most and n == others + most
    assert all(
        u["task_type"] == "VMR" and "'forward'" in u["reason"] and "answer balance" in u["reason"] for u in out.unasked
    )
    hist = out.counts()["answer_texts"]["VMR"]["cardinal"]
    assert hist["n"] == n and hist["top"] == dict(sorted(after.items(), key=lambda kv: (-kv[1], kv[0])))
    assert hist["max_share"] == pytest.approx(max(after.values()) / n)
    # the letters are still balanced over what is left
    letters = Counter(r["answer"] for r in kept)
    assert max(letters.values()) - min(letters.values()) <= 1


def test_the_selection_is_seeded_and_deterministic():
    pool = vmr_pool(20, skew=0.7)
    a = balance_answers([{**r, "doc_id": f"{r['video_name']}|0|VMR|0"} for r in pool], PARAMS)
    b = balance_answers([{**r, "doc_id": f"{r['video_name']}|0|VMR|0"} for r in reversed(pool)], PARAMS)
    assert a == b
    c = balance_answers(
        [{**r, "doc_id": f"{r['video_name']}|0|VMR|0"} for r in pool], PARAMS.model_copy(update={"seed": 5})
    )
    assert len(c[0]) == len(a[0]) and c[0] != a[0]  # as many dropped, other ones


def test_a_small_group_is_left_alone():
    pool = vmr_pool(3, skew=0.9)  # 12 questions: fewer than answer_balance_min_n
    assert Counter(r["correct"] for r in pool)["forward"] >= 9
    out = ex.assemble(pool, PARAMS)
    assert out.unasked == [] and len(out.split_rows("release")) == 12


def test_voc_counts_are_spread_over_the_task_and_per_concept_with_their_streams():
    pool = voc_pool(12)  # 72 totals, 60% of them 4
    totals = [r for r in pool if r["split"] == "release"]
    assert shares(totals, lambda r: r["answers"][-1])["4"] >= 0.55
    out = ex.assemble(pool, PARAMS)
    kept = out.split_rows("release")

    def cap(n):
        return max(1, math.ceil(PARAMS.voc_max_answer_share * n))

    c = Counter(r["answer"] for r in kept)
    assert max(c.values()) <= cap(len(kept))
    by_concept = defaultdict(Counter)
    for r in kept:
        by_concept[r["concepts"][0]][r["answer"]] += 1
    for concept, cc in by_concept.items():
        assert max(cc.values()) <= cap(sum(cc.values())), (concept, cc)
    # a dropped total takes its stream twin with it; the kept ones keep theirs
    stream = out.split_rows("voc_stream")
    assert {r["base_doc_id"] for r in stream} == {r["doc_id"] for r in kept}
    assert len(out.unasked) == len(totals) - len(kept) > 0
    # the best constant answer scores lower than before the selection
    assert (
        ev.voc_priors(kept)["best_constant"]["mra"]
        < ev.voc_priors([{**r, "doc_id": str(i), "answer": r["answers"][-1]} for i, r in enumerate(totals)])[
            "best_constant"
        ]["mra"]
    )


def test_voc_priors_against_a_hand_computation():
    def row(doc, concept, source, answer):
        return {
            "doc_id": doc,
            "task_type": "VOC",
            "video_name": f"{source}_front.mp4",
            "source_id": source,
            "question": f"count the total number of {concept}(s) you observe.",
            "answer": str(answer),
            "options": None,
            "concepts": [concept],
        }

    rows = [
        row("a", "cup", "s1", 2),
        row("b", "cup", "s2", 4),
        row("c", "cup", "s3", 9),
        row("d", "pen", "s1", 1),
        row("e", "pen", "s2", 1),
    ]
    answers = [2, 4, 9, 1, 1]
    scores = {c: statistics.fmean(max(0.0, 1 - abs(c - a) / max(a, 1)) for a in answers) for c in range(0, 12)}
    best = max(scores, key=lambda c: (scores[c], -c))
    # leave-one-source-out medians: a <- median(4, 9) = 6.5 -> round 6; b <- median(2, 9) = 5.5 -> 6 (banker's);
    # c <- median(2, 4) = 3; d <- 1; e <- 1
    preds = {"a": 6, "b": 6, "c": 3, "d": 1, "e": 1}
    truth = {"a": 2, "b": 4, "c": 9, "d": 1, "e": 1}
    median_mra = statistics.fmean(max(0.0, 1 - abs(preds[d] - truth[d]) / max(truth[d], 1)) for d in truth)
    got = ev.voc_priors(rows)
    assert got["n"] == 5
    assert got["best_constant"] == {"answer": best, "mra": pytest.approx(scores[best])}
    assert got["median_prior_mra"] == pytest.approx(median_mra)
    assert ev.voc_priors([]) == {}


def test_the_report_shows_the_balanced_histograms_and_both_priors():
    from vsi_wild.stages import report

    release = ex.assemble(voc_pool(12) + vmr_pool(20, skew=0.7), PARAMS).split_rows("release")
    public = [
        {
            "doc_id": f"p{i}",
            "task_type": "VOC",
            "video_name": f"yt{i % 5}_front.mp4",
            "answer": str(a),
            "question": "count the total number of cup(s) you observe.",
            "options": None,
        }
        for i, a in enumerate([1, 2, 3, 5, 8, 13, 2, 3])
    ]
    ac = report.answer_controls(release, public)
    assert ac["voc_priors"] == {"build": ev.voc_priors(release), "public": ev.voc_priors(public)}
    vmr = [r for r in release if r["task_type"] == "VMR"]
    assert ac["answer_texts"]["VMR"]["cardinal"]["max_share"] == pytest.approx(
        max(Counter(r["answer_text"] for r in vmr).values()) / len(vmr)
    )
    md = "\n".join(report.answer_controls_markdown(ac))
    assert "| VMR | cardinal | " in md and "public release: best constant" in md
    assert "no higher here" in md or "HIGHER here" in md
    assert "not available" in "\n".join(report.answer_controls_markdown(report.answer_controls(release, None)))


def test_the_report_stage_reads_the_public_release_for_the_priors(tmp_path):
    import json

    from vsi_wild.config import Config
    from vsi_wild.tasks.report import public_release_rows

    rows = [
        {
            "doc_id": "v_front.mp4|0|VOC|0",
            "video_name": "v_front.mp4",
            "task_type": "VOC",
            "answer": "3",
            "question": "count the total number of cup(s) you observe.",
            "frame_indices": None,
            "options": None,
        }
    ]
    path = tmp_path / "release.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert public_release_rows(Config.model_validate({"report": {"reference_qa": str(path)}})) == rows
    assert (
        public_release_rows(Config.model_validate({"report": {"reference_qa": str(tmp_path / "nope.jsonl")}})) is None
    )
    path.write_text("not json\n")
    assert public_release_rows(Config.model_validate({"report": {"reference_qa": str(path)}})) is None
