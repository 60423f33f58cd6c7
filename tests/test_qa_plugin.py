"""A QA task type is a plug-in: one declaration (``QATask``) registered, and the build, the export,
the evaluation and the report pick it up through the same functions the pipeline calls."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from test_qa_export import PARAMS, all_questions, write

from vsi_wild.stages import evaluate as ev
from vsi_wild.stages import export as ex
from vsi_wild.stages.qa import QAParams
from vsi_wild.stages.qa.common import Provenance, Question, base_fields, interval
from vsi_wild.stages.qa.registry import (
    NUMBER,
    QATask,
    TaskQuestions,
    VideoInputs,
    copied,
    register_task,
    tasks,
    unregister_task,
)
from vsi_wild.stages.report import build_report, render_markdown

BUILTIN = ["VMR", "VPO", "VOO", "VOC"]


def kinds_questions(inputs: VideoInputs, params: QAParams, prov: Provenance) -> TaskQuestions:
    """One question per video: how many kinds of object (concepts) it shows."""
    video = inputs.video
    concepts = sorted({r["concept"] for r in inputs.instances.to_pylist() if r["video_id"] == video.video_id})
    if not concepts:
        return TaskQuestions(
            [], [{"video_id": video.video_id, "task_type": "KND", "item": "all", "reason": "no objects"}]
        )
    q = Question(
        **base_fields(video, prov),
        task_type="KND",
        subtype="total",
        split="release",
        index=0,
        item="all",
        question="[Fill-in-the-Blank] How many kinds of object appear in this video?",
        query_times=[video.duration_s],
        answers=[str(len(concepts))],
        evidence=[[interval(0.0, video.duration_s)]],
        concepts=concepts,
    )
    return TaskQuestions([q], [])


def kinds_report(entry) -> list[str]:
    return [f"KND: at most {entry['most_kinds']} kinds of object in one video."]


KINDS = QATask(
    name="KND",
    order=4,
    release_rank=4,
    kind=NUMBER,
    metric=ev.MRA,
    questions=kinds_questions,
    export_columns=copied("concepts"),
    summarise=lambda rows: {"most_kinds": max(int(r["answer"]) for r in rows)},
    report_section=kinds_report,
)


@pytest.fixture
def kinds():
    register_task(KINDS)
    try:
        yield KINDS
    finally:
        unregister_task(KINDS.name)


def test_a_registered_task_is_built_exported_evaluated_and_reported(kinds, tmp_path):
    assert [t.name for t in tasks()] == [*BUILTIN, "KND"]
    questions = all_questions(2)  # the pipeline's per-video build (plan_video) of 8 view videos
    asked = [q for q in questions.to_pylist() if q["task_type"] == "KND"]
    assert len(asked) == 8  # one per view video, after the four built-in tasks of its video
    by_video = {}
    for q in questions.to_pylist():
        by_video.setdefault(q["video_id"], []).append(q["task_type"])
    assert all(types[-1] == "KND" and types.count("KND") == 1 for types in by_video.values())

    # exported: the release jsonl and the rich parquet, with the column it adds
    export = ex.assemble(questions, PARAMS)
    write(tmp_path, export)
    counts = json.loads((tmp_path / "counts.json").read_text())
    assert counts["release"]["KND"] == 8 and set(counts["release"]) == {*BUILTIN, "KND"}
    release = [json.loads(line) for line in (tmp_path / ex.RELEASE_FILE).read_text().splitlines()]
    rows = [r for r in release if r["task_type"] == "KND"]
    assert len(rows) == 8
    truth = {q["video_name"]: q["answers"][0] for q in asked}
    for r in rows:
        assert list(r) == list(ex.RELEASE_KEYS) and r["options"] is None and r["answer"] == truth[r["video_name"]]
        assert r["doc_id"].split("|")[2:] == ["KND", "0"]
    rich = [r for r in pq.read_table(tmp_path / "qa.parquet").to_pylist() if r["task_type"] == "KND"]
    assert len(rich) == 8 and all(r["concepts"] and len(r["concepts"]) == int(r["answer"]) for r in rich)
    assert all(r["angle_deg"] is None and r["image_paths"] is None for r in rich)  # other tasks' columns

    # evaluated with its metric (MRA): exact counts on half of its rows, twice the count on the rest
    release_rows = export.split_rows("release")
    mine = sorted((r for r in release_rows if r["task_type"] == "KND"), key=lambda r: r["doc_id"])
    preds = {
        r["doc_id"]: (f"I see {r['answer']}" if i % 2 == 0 else str(2 * int(r["answer"]))) for i, r in enumerate(mine)
    }
    scores = ev.evaluate(release_rows, preds)
    assert scores["KND"] == {"score": 0.5, "n": 8}
    assert ev.score(mine[0], mine[0]["answer"]) == 1.0
    assert "KND" not in ev.mc_tasks() and "KND" in ev.blind_report(release_rows)["baselines"]["prior"]

    # reported: its row in the table and its own section
    rep = build_report(export.rows, [], [{"origin": "sample", "duration_s": 600.0}])
    md = render_markdown(rep)
    most = max(int(r["answer"]) for r in mine)
    assert rep["questions"]["KND"]["most_kinds"] == most
    assert "| KND | 8 | 8 | total 8 | min " in md
    assert f"KND: at most {most} kinds of object in one video." in md
    assert "(KND is scored with MRA" in md


def test_registration_refuses_a_clash(kinds):
    with pytest.raises(ValueError, match="name, order, release_rank already taken by KND"):
        register_task(KINDS)
    with pytest.raises(ValueError, match="not task columns"):
        register_task(
            QATask(
                name="BAD",
                order=9,
                release_rank=9,
                kind=NUMBER,
                metric=ev.MRA,
                questions=kinds_questions,
                export_columns=copied("doc_id"),
            )
        )


def test_the_plugin_is_gone_afterwards():
    assert [t.name for t in tasks()] == BUILTIN


def test_the_first_reads_from_several_threads_all_see_every_task(monkeypatch):
    """The qa stage's units run in threads: each must see every task, also while the registry is
    first being filled (a thread that saw it half-filled built one video's questions from no task)."""
    import threading
    import time

    from vsi_wild.stages.qa import registry as R

    expected = [t.name for t in tasks()]
    saved = dict(R._TASKS)
    real_import = R.importlib.import_module

    def slow_import(name, *a):
        time.sleep(0.05)  # a task module takes a while to import (cv2, the faces module, ...)
        return real_import(name, *a)

    monkeypatch.setattr(R, "_TASKS", {})
    monkeypatch.setattr(R, "_discovered", False)
    monkeypatch.setattr(R.importlib, "import_module", slow_import)
    seen: list[list[str]] = []
    threads = [threading.Thread(target=lambda: seen.append([t.name for t in tasks()])) for _ in range(4)]
    for t in threads:
        t.start()
        time.sleep(0.01)
    for t in threads:
        t.join()
    assert seen == [expected] * 4
    monkeypatch.setattr(R, "_TASKS", saved)
