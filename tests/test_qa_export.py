"""The export: balanced letters, determinism, the release file's exact shape (compared with the
public release file), the splits, and loading the rich parquet as a dataset."""

from __future__ import annotations

import itertools
import json
import os
import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from qa_world import instances_table, make_world, motion_table, poses_table, views_table

from vsi_wild.stages import export as ex
from vsi_wild.stages.qa import QAParams
from vsi_wild.stages.qa.build import plan_video
from vsi_wild.stages.qa.common import Provenance, VideoInfo, questions_table

REFERENCE = Path(os.environ.get("VSI_WILD_REFERENCE", "/work/shared/reference/vsi_super_wild_qa.jsonl"))
PARAMS = QAParams(clip_seconds=60.0)


def all_questions(n_worlds: int, params: QAParams = PARAMS):
    import pyarrow as pa

    tables = []
    for s in range(n_worlds):
        w = make_world(100 + s)
        for row in views_table(w).to_pylist():
            v = VideoInfo.from_row(row)
            res = plan_video(
                v,
                instances_table(w, v.view),
                motion_table(w, v.view, params.clip_seconds),
                poses_table(w, v.view),
                params,
                Provenance(params.seed, "fp", "test"),
            )
            tables.append(questions_table(res.questions))
    return pa.concat_tables(tables)


@pytest.fixture(scope="module")
def questions():
    return all_questions(18)  # 72 view videos: >= 200 questions per task


@pytest.fixture(scope="module")
def export(questions):
    return ex.assemble(questions, PARAMS)


def write(tmp_path: Path, export) -> Path:
    def dest(rel):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    ex.write_export(dest, export)
    return tmp_path


# ----------------------------------------------------------------------------- balance
def test_letters_are_balanced_per_task(export):
    release = export.split_rows("release")
    for task in ("VMR", "VPO", "VOO"):
        rows = [r for r in release if r["task_type"] == task]
        assert len(rows) >= 200, (task, len(rows))
        c = Counter(r["answer"] for r in rows)
        for letter in "ABCD":
            assert abs(c[letter] / len(rows) - 0.25) <= 0.02, (task, c)
        # within each subtype, and the letter says nothing about the answer's text (VMR)
        for sub in {r["subtype"] for r in rows}:
            cs = Counter(r["answer"] for r in rows if r["subtype"] == sub)
            assert max(cs.values()) - min(cs[k] for k in "ABCD") <= 2, (task, sub, cs)
        if task == "VMR":
            for text in {r["answer_text"] for r in rows}:
                ct = Counter(r["answer"] for r in rows if r["answer_text"] == text)
                assert max(ct.values()) - min(ct[k] for k in "ABCD") <= 2, (text, ct)


def test_answer_letter_matches_the_correct_option(export):
    for r in export.rows:
        if r["options"] is None:
            assert r["task_type"] == "VOC" and re.fullmatch(r"\d+", r["answer"])
            continue
        assert [o[:3] for o in r["options"]] == ["A) ", "B) ", "C) ", "D) "]
        texts = [o[3:] for o in r["options"]]
        assert len(set(texts)) == 4
        assert texts["ABCD".index(r["answer"])] == r["answer_text"] == r["answers"][0]


def test_option_text_alone_does_not_give_the_answer(export):
    """Blind probes on the ordering tasks: picking the option closest to the others (Kendall
    distance), or the one that keeps most items in place, should stay near chance."""

    def kendall(a, b):
        pos = {x: i for i, x in enumerate(b)}
        return sum(1 for i, j in itertools.combinations(range(len(a)), 2) if pos[a[i]] > pos[a[j]])

    for task in ("VPO", "VOO"):
        rows = [r for r in export.split_rows("release") if r["task_type"] == task]
        medoid = centre = 0
        for r in rows:
            orders = [o[3:].split(" → ") for o in r["options"]]
            score = [sum(kendall(a, b) for b in orders) for a in orders]
            medoid += "ABCD"[score.index(min(score))] == r["answer"]
            same = [sum(sum(x == y for x, y in zip(a, b, strict=True)) for b in orders) for a in orders]
            centre += "ABCD"[same.index(max(same))] == r["answer"]
        assert medoid / len(rows) < 0.36 and centre / len(rows) < 0.36, (task, medoid, centre, len(rows))


def test_no_duplicates(export):
    ids = [r["doc_id"] for r in export.rows]
    assert len(ids) == len(set(ids))
    release = export.split_rows("release")
    keys = [
        (
            r["video_name"],
            r["question"],
            json.dumps(r["frame_indices"]),
            json.dumps(sorted(o[3:] for o in r["options"] or [])),
            r["answer_text"],
        )
        for r in release
    ]
    assert len(keys) == len(set(keys))


def test_duplicate_questions_are_dropped(questions):
    import pyarrow as pa

    doubled = ex.assemble(pa.concat_tables([questions, questions.slice(0, 5)]), PARAMS)
    assert len(doubled.dropped) == 5  # exact copies go
    rows = questions.to_pylist()
    clash = {**rows[0], "question": rows[0]["question"] + " (edited)"}
    with pytest.raises(ValueError):  # same doc id, different content: refused, never both kept
        ex.assemble(rows + [clash], PARAMS)
    vmr = next(r for r in rows if r["task_type"] == "VMR")
    twin = {**vmr, "index": vmr["index"] + 1000, "item": "clip9999"}  # a second clip with the same pivot
    out = ex.assemble(rows + [twin], PARAMS)
    assert len(out.dropped) == 1
    # every release question is kept but those the answer balance drops (recorded as unasked)
    assert len(out.split_rows("release")) == len([r for r in rows if r["split"] == "release"]) - len(out.unasked)


# ----------------------------------------------------------------------------- determinism
def test_same_inputs_same_bytes(tmp_path, questions):
    a = write(tmp_path / "a", ex.assemble(all_questions(3), PARAMS))
    b = write(tmp_path / "b", ex.assemble(all_questions(3), PARAMS))
    for rel in (
        "vsi_super_wild_qa.jsonl",
        "qa.parquet",
        "splits/vpo_unrotated/vsi_super_wild_qa.jsonl",
        "splits/voc_repeat/vsi_super_wild_qa.jsonl",
        "splits/voc_stream.parquet",
        "counts.json",
    ):
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
    c = write(
        tmp_path / "c",
        ex.assemble(all_questions(3, PARAMS.model_copy(update={"seed": 9})), PARAMS.model_copy(update={"seed": 9})),
    )
    assert (a / "vsi_super_wild_qa.jsonl").read_bytes() != (c / "vsi_super_wild_qa.jsonl").read_bytes()


# ----------------------------------------------------------------------------- release shape
@pytest.fixture(scope="module")
def reference():
    if not REFERENCE.exists():
        pytest.skip(f"the public release file is not at {REFERENCE} (set VSI_WILD_REFERENCE)")
    return REFERENCE.read_text(encoding="utf-8").splitlines()


def _shape(row: dict) -> dict:
    """What the evaluation task relies on, per field."""
    fi, opts = row["frame_indices"], row["options"]
    return {
        "keys": list(row),
        "types": {k: type(v).__name__ for k, v in row.items()},
        "frame_indices": None if fi is None else (len(fi), all(type(x) is int for x in fi)),
        "options": None if opts is None else (len(opts), all(re.fullmatch(r"[ABCD]\) .+", o) for o in opts)),
        "answer": "int"
        if re.fullmatch(r"\d+", row["answer"])
        else ("letter" if re.fullmatch(r"[ABCD]", row["answer"]) else "?"),
    }


def test_release_file_has_the_public_shape(tmp_path, export, reference):
    ref_rows = [json.loads(line) for line in reference]
    # the public file's own conventions, measured (so this test notices if the reference differs)
    assert all(
        json.dumps(r, ensure_ascii=False, separators=(",", ":")) == line
        for r, line in zip(ref_rows, reference, strict=True)
    )
    ref_shapes = {}
    for r in ref_rows:
        ref_shapes.setdefault(r["task_type"], []).append(_shape(r))
    ref_questions = {t: {r["question"] for r in ref_rows if r["task_type"] == t} for t in ("VMR", "VPO", "VOO")}
    voc_template = re.compile(
        r"\[Fill-in-the-Blank\] Throughout this video, count the total number of (.+)\(s\) you observe\. "
        r"Report the total count as a single integer\."
    )
    assert all(voc_template.fullmatch(r["question"]) for r in ref_rows if r["task_type"] == "VOC")

    out = write(tmp_path, export)
    raw = (out / "vsi_super_wild_qa.jsonl").read_bytes()
    assert raw.endswith(b"\n") and b"\r" not in raw
    lines = raw.decode("utf-8").splitlines()
    assert len(lines) == len(export.split_rows("release"))
    seen_tasks = set()
    for line in lines:
        row = json.loads(line)
        assert json.dumps(row, ensure_ascii=False, separators=(",", ":")) == line  # same serialisation
        task = row["task_type"]
        seen_tasks.add(task)
        assert list(row) == list(ref_rows[0])  # exactly the seven keys, in the release's order
        s = _shape(row)
        assert s in ref_shapes[task], (task, s)
        assert re.fullmatch(
            r"[A-Za-z0-9_-]{11}_(front|back|left|right)\.mp4|sample-[a-z0-9-]+_(front|back|left|right)\.mp4",
            row["video_name"],
        )
        if task == "VOC":
            assert voc_template.fullmatch(row["question"])
        else:
            assert row["question"] in ref_questions[task]
        if task in ("VPO", "VOO"):
            assert all(o[3:].count(" → ") == 3 for o in row["options"])
        if task == "VMR":
            ref_sets = {frozenset(o[3:] for o in r["options"]) for r in ref_rows if r["task_type"] == "VMR"}
            assert frozenset(o[3:] for o in row["options"]) in ref_sets
    assert seen_tasks == {"VMR", "VPO", "VOO", "VOC"}


def test_the_evaluations_parsing_reads_our_answers(export):
    """The public task's scoring (extract the letter / the first integer) applied to our answers."""
    for r in export.split_rows("release"):
        if r["options"]:
            assert re.search(r"\b([A-D])[\.\)]", r["options"]["ABCD".index(r["answer"])])
        else:
            assert int(re.findall(r"\d+", r["answer"])[0]) == int(r["answers"][-1])


# ----------------------------------------------------------------------------- splits
def test_voc_repeat_keeps_the_totals(export):
    totals = {r["doc_id"]: r for r in export.split_rows("release") if r["task_type"] == "VOC"}
    reps = export.split_rows("voc_repeat")
    assert len(reps) == len(totals) * len(PARAMS.repeat_times)
    for r in reps:
        base = totals[r["base_doc_id"]]
        assert r["answer"] == base["answer"] and r["question"] == base["question"]
        assert r["video_name"] == base["video_name"][:-4] + f"_repeat{r['repeat']}.mp4"
        assert r["duration_s"] == pytest.approx(r["repeat"] * base["duration_s"])
        assert r["query_times"] == [pytest.approx(r["repeat"] * base["duration_s"])]
    assert {(s, k) for s, _, k in export.repeats} == {
        (b["video_name"], k) for b in totals.values() for k in PARAMS.repeat_times
    }


def test_vpo_control_pairs_with_its_rotated_twin(export):
    rot = {r["doc_id"]: r for r in export.split_rows("release") if r["task_type"] == "VPO"}
    ctrl = export.split_rows("vpo_unrotated")
    assert len(ctrl) == len(rot)
    for c in ctrl:
        r = rot[c["base_doc_id"]]
        assert c["options"] == r["options"] and c["answer"] == r["answer"] and c["frame_indices"] == r["frame_indices"]
        assert c["render_offset_deg"] == [0.0] * 4 and all(30 <= abs(o) <= 60 for o in r["render_offset_deg"])
        assert c["image_paths"] != r["image_paths"]


def test_voc_stream_rows(export):
    totals = {r["doc_id"]: r for r in export.split_rows("release") if r["task_type"] == "VOC"}
    for s in export.split_rows("voc_stream"):
        t = totals[s["base_doc_id"]]
        assert s["answers"][-1] == t["answer"] and s["query_times"][-1] == t["query_times"][0]
        assert [int(a) for a in s["answers"]] == sorted(int(a) for a in s["answers"])  # a count never decreases
        assert "At each checkpoint" in s["question"]


# ----------------------------------------------------------------------------- the rich parquet
def test_rich_parquet_loads_with_pyarrow_and_datasets(tmp_path, export):
    out = write(tmp_path, export)
    t = pq.read_table(out / "qa.parquet")
    assert t.num_rows == len(export.rows)
    assert t.column_names[:7] == list(ex.RELEASE_KEYS)
    for col in (
        "query_times",
        "answers",
        "evidence",
        "image_paths",
        "seed",
        "metadata_fingerprint",
        "pipeline_version",
    ):
        assert col in t.column_names
    import datasets  # the dev extra installs it: a missing install fails here, not skips

    ds = datasets.load_dataset(
        "parquet", data_files={"test": str(out / "qa.parquet")}, split="test", cache_dir=str(tmp_path / "hf")
    )
    assert len(ds) == len(export.rows)
    row = ds[0]
    assert row["doc_id"] == export.rows[0]["doc_id"]
    vpo = next(r for r in ds if r["task_type"] == "VPO")
    assert len(vpo["image_paths"]) == 4 and vpo["evidence"][0][0].keys() == {"start", "end"}
