"""The text-only leak probe (stages/leak_probe.py): it flags constructed question sets whose texts give
the answer away and not ones whose answers are independent of the texts; its folds never split a
source; the export's debiasing prunes a leaking set to chance and leaves a clean one whole; the
CLI's --blind --json output is JSON lines."""

from __future__ import annotations

import json
import random
from pathlib import Path

from conftest import vsi_wild

from vsi_wild import schema
from vsi_wild.stages import evaluate as ev
from vsi_wild.stages import leak_probe as lp
from vsi_wild.stages.export import add_text_bias, assemble, drop_text_biased
from vsi_wild.stages.qa import QAParams

DIRECTIONS = ["forward", "left", "backward", "right"]
PLACES = ["kitchen", "street", "park", "hall", "market", "garden", "station", "bridge"]
# In a leaking set, a question about one of these places has this answer (the rest: random).
GIVEAWAY = {"kitchen": "left", "street": "forward", "park": "right", "hall": "backward"}
CONCEPTS = ["chair", "cone", "bench", "lamp", "bin", "sign"]


def vmr_set(leak: bool, sources: int = 40, per_source: int = 6, seed: int = 1) -> tuple[list[dict], set[str]]:
    """Release-format VMR rows (options shuffled, letters random) and the doc ids of the rows whose
    answer the question's wording gives away (none when ``leak`` is off)."""
    rng = random.Random(seed)
    rows, leaky = [], set()
    for s in range(sources):
        for v in range(per_source):
            place = rng.choice(PLACES)
            correct = DIRECTIONS[(s + v) % 4]  # every answer text equally often: no prior to learn
            doc = f"src{s:02d}_front.mp4|{v}|VMR|0"
            if leak and place in GIVEAWAY:
                correct = GIVEAWAY[place]
                leaky.add(doc)
            options = DIRECTIONS[:]
            rng.shuffle(options)
            rows.append(
                {
                    "doc_id": doc,
                    "video_name": f"src{s:02d}_front.mp4",
                    "task_type": "VMR",
                    "question": f"In the {place}, which direction is the camera moving?",
                    "answer": "ABCD"[options.index(correct)],
                    "source_id": f"src{s:02d}",
                    "options": [f"{'ABCD'[i]}) {o}" for i, o in enumerate(options)],
                }
            )
    return rows, leaky


def voo_longest_set(sources: int = 30, per_source: int = 5, seed: int = 2) -> list[dict]:
    """VOO rows whose correct order is always the longest option text (its concepts have long names)."""
    rng = random.Random(seed)
    rows = []
    for s in range(sources):
        for v in range(per_source):
            short = rng.sample(CONCEPTS, 4)
            long = [f"large {c} with a stripe" for c in rng.sample(CONCEPTS, 4)]
            options = [" → ".join(rng.sample(short, 4)) for _ in range(3)] + [" → ".join(long)]
            rng.shuffle(options)
            answer = max(range(4), key=lambda i: len(options[i]))
            rows.append(
                {
                    "doc_id": f"v{s}_back.mp4|{v}|VOO|0",
                    "video_name": f"v{s}_back.mp4",
                    "task_type": "VOO",
                    "question": "Choose the option listing the four objects by first-appearance time.",
                    "answer": "ABCD"[answer],
                    "options": [f"{'ABCD'[i]}) {o}" for i, o in enumerate(options)],
                }
            )
    return rows


def voc_set(leak: bool, sources: int = 30, per_source: int = 4, seed: int = 3) -> list[dict]:
    """VOC rows: with ``leak`` the concept fixes the count (chair 2, cone 12, ...); else random counts."""
    rng = random.Random(seed)
    typical = {c: 2 + 5 * i for i, c in enumerate(CONCEPTS)}
    rows = []
    for s in range(sources):
        for v in range(per_source):
            concept = rng.choice(CONCEPTS)
            count = typical[concept] if leak else rng.randint(1, 27)
            rows.append(
                {
                    "doc_id": f"c{s}_left.mp4|{v}|VOC|0",
                    "video_name": f"c{s}_left.mp4",
                    "task_type": "VOC",
                    "question": f"count the total number of {concept}(s) you observe.",
                    "answer": str(count),
                    "options": None,
                }
            )
    return rows


def task_entry(result: lp.ProbeResult, name: str) -> lp.TaskProbe:
    return result.tasks[name]


def test_probe_flags_a_question_word_that_gives_the_answer_away():
    rows, leaky = vmr_set(leak=True)
    res = lp.probe(lp.items_from_release(rows))
    vmr = task_entry(res, "VMR")
    assert vmr.flagged and vmr.chance == 0.25 and vmr.probe > 0.40
    # the bias score points at the leaking questions: their mean is well above the others'
    biased = [res.bias[r["doc_id"]] for r in rows if r["doc_id"] in leaky]
    other = [res.bias[r["doc_id"]] for r in rows if r["doc_id"] not in leaky]
    assert sum(biased) / len(biased) > 0.2 > sum(other) / len(other)


def test_probe_flags_an_answer_that_is_always_the_longest_option():
    res = lp.probe(lp.items_from_release(voo_longest_set()))
    assert task_entry(res, "VOO").flagged and task_entry(res, "VOO").probe > 0.9


def test_probe_does_not_flag_answers_independent_of_the_texts():
    rows, _ = vmr_set(leak=False)
    res = lp.probe(lp.items_from_release(rows))
    assert not task_entry(res, "VMR").flagged and abs(task_entry(res, "VMR").probe - 0.25) < 0.08
    assert res.flagged() == []


def test_numeric_probe_beats_the_constant_only_when_the_concept_gives_the_count():
    leaking = task_entry(lp.probe(lp.items_from_release(voc_set(leak=True))), "VOC")
    assert leaking.metric == "MRA" and leaking.flagged and leaking.probe > 0.9 > leaking.chance
    clean = task_entry(lp.probe(lp.items_from_release(voc_set(leak=False))), "VOC")
    assert not clean.flagged and clean.probe - clean.chance < 0.05


def test_best_constant_maximises_mra():
    answers = [1, 2, 2, 10]
    best = lp.best_constant(answers)
    assert best == 2
    assert all(sum(ev.mra(best, a) for a in answers) >= sum(ev.mra(c, a) for a in answers) for c in range(0, 12))


def test_folds_are_grouped_by_source_video():
    rows, _ = vmr_set(leak=True, sources=13, per_source=4)
    for r in rows:  # four views of one source: the rows name videos of every view
        r["video_name"] = r["video_name"].replace(
            "_front", ["_front", "_right", "_back", "_left"][int(r["doc_id"].split("|")[1]) % 4]
        )
        del r["source_id"]  # the public file's rows: the source comes from the video name
    res = lp.probe(lp.items_from_release(rows))
    fold_of_source: dict[str, set[int]] = {}
    for r in rows:
        fold_of_source.setdefault(r["video_name"].rsplit("_", 1)[0], set()).add(res.folds[r["doc_id"]])
    assert len(fold_of_source) == 13 and all(len(f) == 1 for f in fold_of_source.values())
    assert len({f for fs in fold_of_source.values() for f in fs}) == 5  # and every fold is used
    assert lp.fold_of(["a", "b", "a", "c"], 5, seed=0)[0] == lp.fold_of(["a", "b", "a", "c"], 5, seed=0)[2]


def test_one_source_is_grouped_by_view_video_and_one_video_is_not_probed():
    rows, _ = vmr_set(leak=True, sources=1, per_source=60)
    vmr = task_entry(lp.probe(lp.items_from_release(rows)), "VMR")  # every row: src00_front.mp4
    assert vmr.probe is None and not vmr.flagged and "one view video" in vmr.note
    views = ["front", "right", "back", "left"]
    for i, r in enumerate(rows):  # the embedded sample's shape: one source, its four views
        r["video_name"] = f"src00_{views[i % 4]}.mp4"
    res = lp.probe(lp.items_from_release(rows))
    vmr = task_entry(res, "VMR")
    assert vmr.probe is not None and vmr.grouped_by == "view video" and "grouped by view video" in vmr.note
    assert vmr.probe > 0.4 and not vmr.flagged  # the views of one walk share it: not called a leak
    assert lp.debias(lp.items_from_release(rows)).dropped == []  # nor pruned
    fold_of_video: dict[str, set[int]] = {}
    for r in rows:
        fold_of_video.setdefault(r["video_name"], set()).add(res.folds[r["doc_id"]])
    assert all(len(f) == 1 for f in fold_of_video.values()) and len(set().union(*fold_of_video.values())) == 4


def test_probe_is_deterministic():
    rows, _ = vmr_set(leak=True)
    a, b = lp.probe(lp.items_from_release(rows)), lp.probe(lp.items_from_release(list(rows)))
    assert a.as_json() == b.as_json() and a.bias == b.bias


def test_debias_prunes_a_leaking_set_to_chance_and_leaves_a_clean_one():
    rows, leaky = vmr_set(leak=True)
    out = lp.debias(lp.items_from_release(rows), stop_margin=0.05)
    final = task_entry(out.final, "VMR")
    assert final.probe - final.chance <= 0.05 or final.p_value >= 0.01
    dropped = {d["key"] for d in out.dropped}
    assert len(dropped & leaky) > 0.8 * len(dropped)  # what it drops is mostly what leaks
    assert all(d["reason"].startswith(f"round {d['round']}: text probe accuracy") for d in out.dropped)
    clean, _ = vmr_set(leak=False)
    untouched = lp.debias(lp.items_from_release(clean), stop_margin=0.05)
    assert untouched.dropped == [] and len(untouched.kept) == len(clean)


# ------------------------------------------------------------------------------------ the export
def question_rows(rows: list[dict]) -> list[dict]:
    """QA_QUESTIONS rows of release-format MC rows (the export's input)."""
    out = []
    for i, r in enumerate(rows):
        texts = ev.option_texts(r)
        correct = texts[ev.correct_index(r)]
        video = r["video_name"].removesuffix(".mp4")
        row = {n: None for n in schema.QA_QUESTIONS.names}
        row.update(
            video_id=video,
            source_id=r["source_id"],
            view="front",
            video_name=r["video_name"],
            task_type="VMR",
            subtype="cardinal",
            split="release",
            index=i,
            item=f"clip{i}",
            question=r["question"],
            correct=correct,
            distractors=[t for t in texts if t != correct],
            query_times=[10.0],
            answers=[correct],
            evidence=[[{"start": 9.0, "end": 11.0}]],
            frame_indices=[80],
            frame_times=[10.0],
            fps=8.0,
            duration_s=600.0,
            seed=0,
            metadata_fingerprint="m",
            pipeline_version="0",
        )
        out.append(row)
    return out


def test_export_writes_text_bias_and_debias_drops_leaking_questions():
    rows, leaky = vmr_set(leak=True)
    questions = schema.table(schema.QA_QUESTIONS, question_rows(rows))
    export = assemble(questions, QAParams())
    result = add_text_bias(export, seed=0)
    assert result.tasks["VMR"].flagged
    assert [r["doc_id"] for r in export.text_bias] == [r["doc_id"] for r in export.rows]
    assert schema.table(schema.TEXT_BIAS, export.text_bias).column("text_bias").null_count == 0

    kept, dropped, _ = drop_text_biased(questions, QAParams(debias_text=True))
    assert dropped and kept.num_rows == questions.num_rows - len(dropped)
    schema.table(schema.TEXT_DEBIAS, dropped)  # the recorded rows have the declared schema
    leaky_questions = {r["question"] for r in rows if r["doc_id"] in leaky}
    assert sum(d["question"] in leaky_questions for d in dropped) > 0.8 * len(dropped)
    after = assemble(kept, QAParams())
    vmr = add_text_bias(after, seed=0).tasks["VMR"]
    assert not vmr.flagged and vmr.probe - vmr.chance < 0.10

    clean, _ = vmr_set(leak=False)
    clean_questions = schema.table(schema.QA_QUESTIONS, question_rows(clean))
    same, none, _ = drop_text_biased(clean_questions, QAParams(debias_text=True))
    assert none == [] and same.num_rows == clean_questions.num_rows


# ------------------------------------------------------------------------------------ the CLI
def test_cli_blind_json_is_one_object_per_line(tmp_path: Path):
    rows, _ = vmr_set(leak=True)
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        "".join(
            json.dumps({k: r[k] for k in ("doc_id", "video_name", "task_type", "question", "answer", "options")}) + "\n"
            for r in rows
        )
    )
    res = vsi_wild("evaluate", "--qa", str(qa), "--blind", "--json", env={"COLUMNS": "20"}, timeout=300)
    assert res.returncode == 0, res.stderr
    records = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(records) == len(res.stdout.splitlines()) > 0
    probe = [r for r in records if r["baseline"] == "text_probe"]
    assert [(r["task"], r["flagged"], r["n"]) for r in probe] == [("VMR", True, len(rows))]
    assert {r["baseline"] for r in records} == {"prior", "consensus", "text_probe"}
    assert all(r["n"] == len(rows) and r["metric"] == "accuracy" for r in records)


# ------------------------------------------------------------------------------------ the report
def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text(
        "".join(
            json.dumps({k: r[k] for k in ("doc_id", "video_name", "task_type", "question", "answer", "options")}) + "\n"
            for r in rows
        )
    )
    return path


def test_report_probes_the_build_and_the_public_release(tmp_path: Path):
    from vsi_wild.config import Config
    from vsi_wild.stages.report import text_probe_markdown, text_probe_summary
    from vsi_wild.store import Store
    from vsi_wild.tasks.report import reference_probe

    store = Store(tmp_path / "out")
    clean, _ = vmr_set(leak=False)
    reference = write_jsonl(tmp_path / "release.jsonl", clean)
    ref = reference_probe(Config.model_validate({"report": {"reference_qa": str(reference)}}), store)
    assert ref["rows"] == len(clean) and ref["flagged"] == [] and len(ref["sha256"]) == 64
    missing = reference_probe(Config.model_validate({"report": {"reference_qa": str(tmp_path / "nope.jsonl")}}), store)
    assert "nope.jsonl is not there" in missing["note"] and "tasks" not in missing

    leaking, _ = vmr_set(leak=True)
    build = ev.text_probe_report(leaking)
    md = "\n".join(text_probe_markdown(text_probe_summary(build, ref, dropped=[])))
    vmr = build["tasks"][0]
    assert f"| VMR | accuracy | {vmr['probe']:.3f} · 0.250 ({len(leaking)}) **flagged** |" in md
    assert f"{ref['tasks'][0]['probe']:.3f} · 0.250 ({len(clean)}) |" in md
    assert "Flagged in this build: VMR" in md and "Dropped by qa.debias_text" in md
    md_missing = "\n".join(text_probe_markdown(text_probe_summary(build, missing, dropped=None)))
    assert "Public release: " in md_missing and "not probed" in md_missing and "debias" not in md_missing
