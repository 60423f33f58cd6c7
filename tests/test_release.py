"""`vsi-wild release`: a dataset folder that `datasets` loads and whose card the libraries accept;
the same inputs give the same release on a machine limited to one CPU; a release never changes; a
fix to one video moves only that video's rows and the changelog names the fix; the lmms-eval task's
scoring agrees with `vsi-wild evaluate`.

Two small sample builds (conftest's SMALL_SAMPLE_CONFIG), side by side, one of them in processes that
may use one CPU only (taskset)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import small_sample_config, vsi_wild

from vsi_wild import lmms_task_utils as lmms
from vsi_wild.release import validate_card
from vsi_wild.stages import evaluate as ev
from vsi_wild.stages import release as rel


def _start(tmp: Path, name: str, one_cpu: bool) -> tuple[Path, Path, subprocess.Popen]:
    """Start a build of the small sample (limited to CPU 0 when ``one_cpu``)."""
    root = tmp / name
    cfg = small_sample_config(tmp / f"{name}.yaml", root)
    exe = str(Path(sys.executable).with_name("vsi-wild"))
    cmd = [exe, "run", "-c", str(cfg), "--data-root", str(root)]
    if one_cpu:
        cmd = [shutil.which("taskset") or "taskset", "-c", "0", *cmd]
    return root, cfg, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> tuple[Path, Path]:
    """Two builds of the same inputs from empty data roots, run side by side (one limited to one CPU),
    each released as v1."""
    if not shutil.which("taskset"):
        pytest.skip("taskset (util-linux) is needed to limit a build to one CPU")
    tmp = tmp_path_factory.mktemp("release")
    started = [_start(tmp, "every-cpu", False), _start(tmp, "one-cpu", True)]
    roots = []
    for root, cfg, proc in started:
        out, err = proc.communicate(timeout=1800)
        assert proc.returncode == 0, out[-3000:] + err[-3000:]
        res = vsi_wild("release", "v1", "-c", str(cfg), "--data-root", str(root))
        assert res.returncode == 0, res.stdout + res.stderr
        roots.append(root)
    return roots[0], roots[1]


def test_the_same_inputs_give_the_same_release_on_one_cpu(builds):
    a, b = (json.loads((root / "releases" / "v1" / "manifest.json").read_text()) for root in builds)
    assert a == b and {"vsi_super_wild_qa.jsonl", "qa.parquet", "ledger.parquet", "README.md"} <= a.keys()


def test_the_release_is_a_dataset(builds, tmp_path):
    import datasets

    folder = builds[0] / "releases" / "v1"
    # a cache of its own: datasets keys a local folder's cache by its path, and a folder at a path an
    # earlier run used would be read from that run's cache
    cache = str(tmp_path / "hf")
    rows = datasets.load_dataset(str(folder), split="test", cache_dir=cache)
    jsonl = [json.loads(line) for line in (folder / "vsi_super_wild_qa.jsonl").read_text().splitlines()]
    assert rows.num_rows == len(jsonl) > 0 and rows[0]["doc_id"] == jsonl[0]["doc_id"]
    rich = datasets.load_dataset(str(folder), "rich", split="test", cache_dir=cache)
    assert rich.num_rows == pq.read_table(folder / "qa.parquet").num_rows
    card = (folder / "README.md").read_text()
    assert validate_card(card) == []
    # the card counts the answers no person has verified, as the rich rows mark them
    release = [r for r in rich if r["split"] == "release"]
    marked = [r for r in release if r["provisional"]]
    if marked:
        assert f"{len(marked)} of {len(release)} release questions" in card
    else:
        assert "Answers not yet verified" not in card
    for r in rich:
        assert (r["wrong_answer_bound"] is not None) == (r["task_type"] == "VOC"), r["doc_id"]
    assert validate_card(card.replace("visual-question-answering", "seeing-things")) != []  # the check can fail
    manifest = json.loads((folder / "manifest.json").read_text())
    listed = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest) == listed


def test_a_release_never_changes_and_a_fix_is_in_the_changelog(builds, tmp_path):
    root = builds[0]
    cfg = small_sample_config(tmp_path / "c.yaml", root)
    again = vsi_wild("release", "v1", "-c", str(cfg), "--data-root", str(root))
    assert again.returncode == 0 and "identical" in again.stdout
    before = [json.loads(x) for x in (root / "releases" / "v1" / "vsi_super_wild_qa.jsonl").read_text().splitlines()]
    video = "sample-small_front"
    (root / "fixes").mkdir(exist_ok=True)
    (root / "fixes" / f"{video}.yaml").write_text(
        f"video_id: {video}\nfixes:\n  - op: motion\n    clip: 0\n    state: none\n"
    )
    res = vsi_wild("run", "-c", str(cfg), "--data-root", str(root))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    refused = vsi_wild("release", "v1", "-c", str(cfg), "--data-root", str(root))
    assert refused.returncode == 1 and "never changes" in refused.stderr
    made = vsi_wild("release", "v2", "-c", str(cfg), "--data-root", str(root))
    assert made.returncode == 0, made.stdout + made.stderr
    after = [json.loads(x) for x in (root / "releases" / "v2" / "vsi_super_wild_qa.jsonl").read_text().splitlines()]
    # every release row of the other videos is the same row, whole
    assert [r for r in before if not r["video_name"].startswith(video)] == [
        r for r in after if not r["video_name"].startswith(video)
    ]
    log = json.loads((root / "releases" / "v2" / "changelog.json").read_text())
    assert log["previous"] == "v1" and log["questions"]
    for e in log["questions"]:
        assert e["video_id"] == video and any(c.startswith("fix added: motion") for c in e["causes"]), e
    from vsi_wild.store import Store

    key = Store(str(root)).read_status("report", "all")["key"]
    report = json.loads((root / "artifacts" / "report" / "all" / key / "report.json").read_text())
    assert report["changes"]["letters"] == 0 and report["changes"]["order"] == 0
    pushed = vsi_wild(
        "release",
        "v2",
        "-c",
        str(cfg),
        "--data-root",
        str(root),
        "--push",
        "someone/vsi-wild",
        env={"HF_TOKEN": "", "HF_HUB_OFFLINE": "1"},
    )
    assert pushed.returncode == 2 and "HF_TOKEN" in pushed.stderr


def test_push_through_huggingface_hub_to_a_local_hub(builds, tmp_path):
    """`--push` through huggingface_hub's own client against a local stand-in of the Hub's API: the
    repository is created as a dataset, README.md's metadata is validated by the endpoint, every file
    of the release arrives with its bytes, and the commit is tagged with the version."""
    from fake_hub import Hub

    root = builds[1]
    cfg = small_sample_config(tmp_path / "c.yaml", root)
    hub = Hub()
    try:
        res = vsi_wild(
            "release",
            "v1",
            "-c",
            str(cfg),
            "--data-root",
            str(root),
            "--push",
            "vsi/vsi-super-wild",
            env={"HF_TOKEN": "hf_local", "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": hub.url},
        )
    finally:
        hub.close()
    assert res.returncode == 0, res.stdout + res.stderr
    folder = root / "releases" / "v1"
    local = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert hub.files == local
    assert hub.repos == [{"name": "vsi-super-wild", "organization": "vsi", "visibility": "public", "type": "dataset"}]
    assert [v["repoType"] for v in hub.validated] == ["dataset"] and hub.validated[0]["content"] == local[
        "README.md"
    ].decode()
    assert [t["tag"] for t in hub.tags.values()] == ["v1"]


def _predictions(rows: list[dict]) -> dict[str, str]:
    """Right, wrong, and off by some: known predictions to score."""
    out = {}
    for i, r in enumerate(rows):
        if r["options"]:
            wrong = "ABCD"[("ABCD".index(r["answer"]) + 1) % 4]
            out[r["doc_id"]] = f"The answer is {r['answer'] if i % 3 else wrong}."
        else:
            out[r["doc_id"]] = str(int(r["answer"]) + i % 3)
    return out


LMMS_CHECK = """
import json, sys
from lmms_eval.tasks import TaskManager, get_task_dict
name, predictions = sys.argv[1], json.load(open(sys.argv[2]))
task = get_task_dict([name], TaskManager(include_path="lmms_eval"))[name]
values = {}
docs = list(task.test_docs())
for doc in docs:
    for metric, value in task.process_results(doc, [predictions[doc["doc_id"]]]).items():
        values.setdefault(metric, []).append(value)
aggregate = task.aggregation()
print(json.dumps({"n": len(docs), "scores": {m: aggregate[m](v) for m, v in values.items()}}))
"""


@pytest.mark.slow
def test_lmms_eval_loads_the_release_task_and_scores_it(builds, tmp_path):
    """lmms-eval's own task loader (TaskManager) reads the release's task folder; its scores of known
    predictions are `vsi-wild evaluate`'s. lmms-eval lives in its own environment (lmms_env.py says why)."""
    from lmms_env import lmms_eval_python

    python = lmms_eval_python()
    folder = builds[0] / "releases" / "v1"
    rows = [json.loads(x) for x in (folder / "vsi_super_wild_qa.jsonl").read_text().splitlines()]
    predictions = _predictions(rows)
    (tmp_path / "p.json").write_text(json.dumps(predictions))
    res = subprocess.run(
        [str(python), "-c", LMMS_CHECK, "vsi_super_wild_v1", str(tmp_path / "p.json")],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    ours = ev.evaluate(rows, predictions)
    assert got["n"] == len(rows)
    metric = {"VMR": "vmr_accuracy", "VPO": "vpo_accuracy", "VOO": "voo_accuracy", "VOC": "voc_mra"}
    tasks = {r["task_type"] for r in rows}
    for task in tasks:
        assert abs(got["scores"][metric[task]] - ours[task]["score"]) < 1e-9, task
    assert abs(got["scores"]["overall"] - sum(ours[t]["score"] for t in tasks) / len(tasks)) < 1e-9
    assert 0 < ours["all"]["score"] < 1  # the predictions are neither all right nor all wrong


def test_the_lmms_eval_scoring_agrees_with_evaluate(builds, tmp_path):
    folder = builds[0] / "releases" / "v1"
    rows = [json.loads(x) for x in (folder / "vsi_super_wild_qa.jsonl").read_text().splitlines()]
    predictions = _predictions(rows)
    ours = ev.evaluate(rows, predictions)
    # the card's command for scoring without lmms-eval, as written there, run from a copy of the folder
    card = (folder / "README.md").read_text()
    assert f"`{rel.EVALUATE_COMMAND}`" in card
    copy = shutil.copytree(folder, tmp_path / "v1")
    (copy / "predictions.jsonl").write_text(
        "".join(json.dumps({"doc_id": d, "prediction": p}) + "\n" for d, p in predictions.items())
    )
    res = vsi_wild(*rel.EVALUATE_COMMAND.split()[1:], "--json", cwd=copy)
    assert res.returncode == 0, res.stdout + res.stderr
    scored = [json.loads(line) for line in res.stdout.splitlines()]
    for task in {r["task_type"] for r in rows}:
        (row,) = [g for g in scored if g.get("group") == task]
        assert abs(row["score"] - ours[task]["score"]) < 1e-9 and row["n"] == ours[task]["n"], task
    per_task: dict[str, list[float]] = {}
    for r in rows:
        out = lmms.process_results(r, [predictions[r["doc_id"]]])
        per_task.setdefault(r["task_type"], []).append(out["overall"]["score"])
    for task, scores in per_task.items():
        assert abs(lmms.mean_score(scores) - ours[task]["score"]) < 1e-9, task


def test_the_card_says_how_many_answers_no_person_has_verified():
    rows = [
        {"task_type": "VOC", "provisional": True},
        {"task_type": "VOC", "provisional": False},
        {"task_type": "VOO", "provisional": True},
        {"task_type": "VMR", "provisional": False},
        {"task_type": "VMR", "provisional": None},
    ]
    text = "\n".join(rel.unverified_section(rows))
    assert "2 of 5 release questions (VOC 1 of 2, VOO 1 of 1)" in text
    assert "VMR" not in text.split("questions (")[1].split(")")[0]  # a task with none is not listed
    assert rel.unverified_section([{**r, "provisional": False} for r in rows]) == []
    card = rel.card("v9", "cc-by-4.0", {}, {}, {"summary": "first release: 5 questions"}, False, "lmms", rows)
    assert "## Answers not yet verified" in card and validate_card(card) == []
