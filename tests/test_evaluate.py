"""Evaluation metrics, Shuffle24 and blind baselines, on hand-derived cases and the public release."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from vsi_wild.stages import evaluate as ev

RELEASE = Path("/work/shared/reference/vsi_super_wild_qa.jsonl")
if not RELEASE.exists():  # CI checkouts keep shared/ beside the repository
    RELEASE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "vsi_super_wild_qa.jsonl"


def mc(doc: str, options: list[str], answer: str, task: str = "VMR", source: str = "s1", subtype: str = "") -> dict:
    return {
        "doc_id": doc,
        "video_name": f"{source}_front.mp4",
        "task_type": task,
        "question": "q",
        "answer": answer,
        "frame_indices": None,
        "options": [f"{letter}) {t}" for letter, t in zip("ABCD", options, strict=True)],
        "source_id": source,
        "subtype": subtype,
    }


def test_mra_matches_its_definition():
    assert ev.mra(10, 10) == 1.0
    assert ev.mra(8, 10) == pytest.approx(0.8)
    assert ev.mra(30, 10) == 0.0  # clipped at 0
    assert ev.mra(1, 0) == 0.0  # max(gt, 1) = 1
    assert ev.mra(None, 3) == 0.0
    assert ev.score({"task_type": "VOC", "answer": "4"}, "I count 5 cones") == pytest.approx(0.75)


def test_shuffle24_keeps_the_answer_text():
    row = mc("d1", ["forward", "left", "backward", "right"], "C")
    copies = ev.shuffle24(row)
    assert len(copies) == 24 and len({tuple(c["options"]) for c in copies}) == 24
    for c in copies:
        texts = [o[3:] for o in c["options"]]
        assert texts[ev.LETTERS.index(c["answer"])] == "backward"
        assert sorted(texts) == sorted(["forward", "left", "backward", "right"])


def test_shuffle24_metrics_for_an_always_a_model():
    # The answer is at slot A in exactly the 6 orders whose first element is the answer.
    row = mc("d1", ["w", "x", "y", "z"], "B")
    preds = {c["doc_id"]: "A" for c in ev.shuffle24(row)}
    m = ev.shuffle24_metrics([row], preds, ks=(1, 2, 6, 7))
    first_slot = [p[0] for p in itertools.permutations(range(4))]
    assert sum(1 for x in first_slot if x == 1) == 6
    assert m["pass@6"] == 1.0 and m["pass@7"] == 0.0
    assert m["top1"] == 0.0  # the identity order keeps B at slot B
    assert m["top2"] == 1.0  # the cyclic shifts come first: the second try shows B in slot A
    assert sorted(ev.PERMUTATIONS) == sorted(itertools.permutations(range(4)))
    assert m["best_order_acc"] == 1.0 and m["worst_order_acc"] == 0.0
    oracle = {c["doc_id"]: c["answer"] for c in ev.shuffle24(row)}
    m = ev.shuffle24_metrics([row], oracle, ks=(1, 24))
    assert m["top1"] == 1.0 and m["pass@24"] == 1.0 and m["order_bias_std"] == 0.0


def test_prior_baseline_finds_a_leaky_answer_and_only_from_other_sources():
    # "forward" is always right in sources s1..s4: a blind prior answers it everywhere.
    rows = [
        mc(
            f"d{i}",
            ["left", "forward", "right", "backward"][i % 4 :] + ["left", "forward", "right", "backward"][: i % 4],
            "ABCD"[(1 - i) % 4],
            source=f"s{i % 4 + 1}",
        )
        for i in range(40)
    ]
    for r in rows:
        assert ev.option_texts(r)[ev.correct_index(r)] == "forward"
    rep = ev.blind_report(rows)
    assert rep["baselines"]["prior"]["VMR"] == 1.0
    assert rep["leaks"] == [{"task": "VMR", "best_blind_accuracy": 1.0}]
    # a video's own answers never inform its prior: one source alone has no prior to learn from
    alone = [r for r in rows if r["source_id"] == "s1"]
    preds = ev.prior_baseline(alone)
    assert all(p == "A" for p in preds.values())  # no evidence: the first option


def test_consensus_baseline_exploits_perturbed_distractors():
    # distractors made by swapping neighbours of the true order all agree most with it
    truth = ["cone", "bench", "ball", "bin"]
    opts = [
        " → ".join(truth),
        " → ".join(["bench", "cone", "ball", "bin"]),
        " → ".join(["cone", "ball", "bench", "bin"]),
        " → ".join(["cone", "bench", "bin", "ball"]),
    ]
    rows = [mc("d1", opts[1:2] + opts[:1] + opts[2:], "B", task="VOO")]
    assert ev.consensus_baseline(rows) == {"d1": "B"}


def test_duration_bins():
    assert [ev.duration_bin(m) for m in (0, 9.9, 10, 45, 61, 500)] == [
        "0-10",
        "0-10",
        "10-30",
        "30-60",
        "60-120",
        "120+",
    ]


@pytest.mark.skipif(not RELEASE.exists(), reason="public release file not beside the repository")
def test_blind_baselines_on_the_public_release_stay_near_chance():
    rows = ev.load_jsonl(RELEASE)
    rep = ev.blind_report(rows)
    for name, by_task in rep["baselines"].items():
        for task in ev.mc_tasks():
            assert by_task[task] < 0.30, (name, task, by_task[task])
    assert rep["leaks"] == []


@pytest.mark.skipif(not RELEASE.exists(), reason="public release file not beside the repository")
def test_voc_priors_on_the_public_release():
    rows = ev.load_jsonl(RELEASE)
    voc = [int(r["answer"]) for r in rows if r["task_type"] == "VOC"]
    got = ev.voc_priors(rows)
    assert got["n"] == len(voc)

    def mra(c):
        return sum(max(0.0, 1 - abs(c - a) / max(a, 1)) for a in voc) / len(voc)

    best = max(range(0, 40), key=lambda c: (mra(c), -c))  # the release's counts are mostly small
    assert got["best_constant"]["answer"] == best and got["best_constant"]["mra"] == pytest.approx(mra(best))
    assert 0 < got["median_prior_mra"] < 1
