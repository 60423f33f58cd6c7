"""Evaluation metrics, Shuffle24 and blind baselines, on hand-derived cases and the public release."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from conftest import vsi_wild

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


# ------------------------------------------------------------------------------------ the command
def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _questions(tmp_path: Path) -> Path:
    """Three questions whose scores are worked out by hand below: two VMR, one VOC (answer 4)."""
    rows = [
        mc("vmr-1", ["forward", "left", "backward", "right"], "A"),
        mc("vmr-2", ["forward", "left", "backward", "right"], "C"),
        {"doc_id": "voc-1", "video_name": "s1_front.mp4", "task_type": "VOC", "question": "q", "answer": "4"},
    ]
    return _jsonl(tmp_path / "qa.jsonl", rows)


def test_evaluate_scores_a_predictions_file_and_says_what_it_left_out(tmp_path):
    """vmr-1 right, vmr-2 unpredicted (0), voc-1 "3 cones" of 4 (MRA 0.75); one prediction names no
    question. --json: one object per group, then the coverage; the table says the same."""
    qa = _questions(tmp_path)
    preds = _jsonl(
        tmp_path / "p.jsonl",
        [
            {"doc_id": "vmr-1", "prediction": "A) forward"},
            {"doc_id": "voc-1", "prediction": "3 cones"},
            {"doc_id": "elsewhere-7", "prediction": "B"},
        ],
    )
    r = vsi_wild("evaluate", "--qa", str(qa), "-p", str(preds), "--json")
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in r.stdout.splitlines()]
    scores = {x["group"]: x for x in records if "group" in x}
    assert scores["VMR"] == {"group": "VMR", "metric": "accuracy", "score": 0.5, "n": 2}
    assert scores["VOC"] == {"group": "VOC", "metric": "MRA", "score": 0.75, "n": 1}
    assert scores["all"]["metric"] == "mixed" and scores["all"]["score"] == pytest.approx(1.75 / 3)
    (cov,) = [x["coverage"] for x in records if "coverage" in x]
    assert cov["questions"] == 3 and cov["answered"] == 2 and cov["missing"] == 1
    assert cov["unknown_doc_ids"] == 1 and cov["unknown_examples"] == ["elsewhere-7"]
    assert "1 of the 3 questions have no prediction: scored 0" in r.stderr
    assert "1 predictions name no question" in r.stderr and "elsewhere-7" in r.stderr
    table = vsi_wild("evaluate", "--qa", str(qa), "-p", str(preds))
    assert table.returncode == 0, table.stderr
    line = next(x for x in table.stdout.splitlines() if "VOC " in x and "MRA" in x)
    assert "0.7500" in line
    assert "2 of 3 questions answered" in table.stdout


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"doc_id": "vmr-1", "prediction": "A"}', "{not json"], "p.jsonl:2: not JSON"),
        (['["vmr-1", "A"]'], "p.jsonl:1: not a JSON object"),
        (
            ['{"doc_id": "vmr-1", "prediction": "A"}', "", '{"id": "vmr-2", "prediction": "C"}'],
            'p.jsonl:3: needs a "doc_id"',
        ),
        (['{"doc_id": "vmr-2"}'], 'p.jsonl:1: vmr-2: needs a "prediction"'),
        (
            ['{"doc_id": "vmr-1", "prediction": "A"}', '{"doc_id": "vmr-1", "prediction": "B"}'],
            "p.jsonl:2: vmr-1 is predicted again (first on line 1)",
        ),
        (['{"doc_id": "other-1", "prediction": "A"}'], "none of its 1 predictions names one of the 3 questions"),
    ],
)
def test_a_bad_predictions_file_is_an_error_naming_its_line(tmp_path, lines, message):
    qa = _questions(tmp_path)
    r = vsi_wild("evaluate", "--qa", str(qa), "-p", str(_jsonl(tmp_path / "p.jsonl", lines)))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in " ".join(r.stderr.split()), r.stderr
    assert "Traceback" not in r.stderr and not r.stdout


def test_a_bad_questions_file_is_an_error_naming_it(tmp_path):
    r = vsi_wild("evaluate", "--qa", str(tmp_path / "nowhere.parquet"), "--blind")
    assert r.returncode == 2 and "nowhere.parquet: No such file or directory" in r.stderr, r.stderr
    (tmp_path / "junk.parquet").write_text("not parquet")
    r = vsi_wild("evaluate", "--qa", str(tmp_path / "junk.parquet"), "--blind")
    assert r.returncode == 2 and "junk.parquet: not a parquet table of questions" in r.stderr, r.stderr
    bad = _jsonl(
        tmp_path / "bad.jsonl",
        [{"doc_id": "x1", "task_type": "VMR", "answer": "A"}, {"doc_id": "x2", "task_type": "VMR"}],
    )
    r = vsi_wild("evaluate", "--qa", str(bad), "--blind")
    assert r.returncode == 2 and "bad.jsonl: row 2: no answer" in r.stderr, r.stderr
    odd = _jsonl(tmp_path / "odd.jsonl", [{"doc_id": "x1", "task_type": "VXX", "answer": "A"}])
    r = vsi_wild("evaluate", "--qa", str(odd), "--blind")
    assert r.returncode == 2 and "odd.jsonl: row 1 (x1): unknown QA task type 'VXX'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_shuffle24_predictions_are_scored_from_the_written_copies(tmp_path):
    """--write-shuffle24, then an always-"A" model on its copies: the Shuffle24 metrics are reported
    and the coverage counts the copies (24 per MC question); the VOC question is left unscored."""
    qa = _questions(tmp_path)
    copies = tmp_path / "s24.jsonl"
    r = vsi_wild("evaluate", "--qa", str(qa), "--write-shuffle24", str(copies))
    assert r.returncode == 0, r.stderr
    rows = ev.load_jsonl(copies)
    assert len(rows) == 48 and not r.stdout
    preds = _jsonl(tmp_path / "p.jsonl", [{"doc_id": x["doc_id"], "prediction": "A"} for x in rows])
    r = vsi_wild("evaluate", "--qa", str(qa), "-p", str(preds), "--json")
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in r.stdout.splitlines()]
    (s24,) = [x["shuffle24"] for x in records if "shuffle24" in x]
    assert s24 == ev.shuffle24_metrics(ev.load_jsonl(qa), {x["doc_id"]: "A" for x in rows})
    (cov,) = [x["coverage"] for x in records if "coverage" in x]
    assert cov["shuffle24_copies"] == 48 and cov["answered"] == 0 and cov["unknown_doc_ids"] == 0
    assert not [x for x in records if "group" in x]
