"""The qa and export stages through the engine: real store, real files, exports/ published.

Upstream of qa, small stages write what the projection, pose, metadata and probe stages would
(views, poses, instances, motion from a synthetic world; a real panorama video and real view
videos); the qa and export stages under test are the real ones.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import av
import pyarrow.parquet as pq
import pytest
from conftest import make_video
from project_media import write_video
from qa_world import (
    instances_table,
    make_world,
    motion_samples_table,
    motion_table,
    poses_table,
    truth_count,
    views_table,
)
from test_qa_vpo_render import pano_frame

from vsi_wild import schema
from vsi_wild.config import Config
from vsi_wild.stages.faces import FaceParams
from vsi_wild.stages.qa import QAParams
from vsi_wild.store import Store
from vsi_wild.tasks import engine
from vsi_wild.tasks.engine import Plan, Stage
from vsi_wild.tasks.export import EXPORT, summary_line
from vsi_wild.tasks.qa import QA

ANY_OUTPUT = (schema.Artifact("*"),)  # these test stages write whatever they test

DURATION, FPS = 20.0, 10.0
SOURCES = ("sample-qa-a", "sample-qa-b")


class QAConfig(Config):
    qa: QAParams = QAParams(
        clip_seconds=10.0,
        vpo_per_video=2,
        vpo_min_gap_s=3.0,
        vpo_edge_margin_s=0.5,
        image_width=128,
        image_height=72,
        repeat_times=[2, 3],
    )
    faces: FaceParams = FaceParams()


def world(source_id: str):
    return make_world(sum(map(ord, source_id)), duration=DURATION, fps=FPS, source_id=source_id)


def _project(job):
    w = world(job.unit)
    views = views_table(w, 64, 36)
    for r in views.to_pylist():
        make_video(job.out.path(r["path"]), 64, 36, FPS, DURATION)
    job.out.write_table("views.parquet", views)


def _pose(job):
    w = world(job.unit)
    import pyarrow as pa

    job.out.write_table(
        "poses.parquet", pa.concat_tables([poses_table(w, v) for v in ("front", "right", "back", "left")])
    )


def _metadata(job):
    source, view = job.unit.rsplit("_", 1)
    w = world(source)
    job.out.write_table("instances.parquet", instances_table(w, view))
    job.out.write_table("motion.parquet", motion_table(w, view, 10.0))
    job.out.write_table("motion_samples.parquet", motion_samples_table(w, view, 10.0))
    # every sighting of the world is a real one (visible, a box well above any size floor)
    job.out.write_table(
        "visibility.parquet",
        schema.table(
            schema.VISIBILITY,
            [
                {
                    "video_id": job.unit,
                    "instance_id": v["instance_id"],
                    "concept": v["category"],
                    "sample_index": int(v["time"] * 2),
                    "time": v["time"],
                    "frame": int(round(v["time"] * FPS)),
                    "fps": FPS,
                    "state": "visible",
                    "geometric": False,
                    "x0": 0.0,
                    "y0": 0.0,
                    "x1": 32.0,
                    "y1": 32.0,
                    "area": 1024,
                }
                for v in w.visibility
                if v["view"] == view
            ],
        ),
    )
    job.out.write_table("specks.parquet", schema.table(schema.SPECKS, []))  # nothing under a size floor


def _probe(job):
    row = job.store.registry_row(job.unit)
    job.out.write_table("source.parquet", schema.table(schema.SOURCE, [row]))


def upstream() -> list[Stage]:
    return [
        Stage("probe", "1", "source", _probe, outputs=ANY_OUTPUT, units=lambda plan, st: plan.sources()),
        Stage("project", "1", "source", _project, outputs=ANY_OUTPUT, needs=("probe",)),
        Stage("pose", "1", "source", _pose, outputs=ANY_OUTPUT, needs=("project",)),
        Stage("metadata", "1", "video", _metadata, outputs=ANY_OUTPUT, needs=("project", "pose")),
    ]


def setup_root(root: Path, pano: Path) -> Store:
    store = Store(root)
    for sid in SOURCES:
        row = {n: None for n in schema.SOURCE.names}
        row.update(source_id=sid, origin="sample", path=str(pano))
        store.register_source(row)
    return store


def run(store: Store) -> Plan:
    stages = upstream() + [QA, EXPORT]
    plan = Plan.load(QAConfig(), store, stages)
    engine.run_stages(plan, stages, engine.run_inline(plan))
    return plan


@pytest.fixture(scope="module")
def pano(tmp_path_factory):
    p = tmp_path_factory.mktemp("pano") / "pano.mp4"
    return write_video(p, pano_frame, [i / FPS for i in range(int(DURATION * FPS))], lossless=True, rate=FPS)


@pytest.fixture(scope="module")
def built(tmp_path_factory, pano):
    root = tmp_path_factory.mktemp("root")
    store = setup_root(root, pano)
    plan = run(store)
    return root, store, plan


def frames_of(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(video=0))


def test_exports_are_published(built, capsys):
    root, store, plan = built
    failed = [o for s in plan.outcomes.values() for o in s.values() if o.state == "failed"]
    assert not failed, failed
    ex = root / "exports"
    lines = (ex / "vsi_super_wild_qa.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    assert {r["task_type"] for r in rows} == {"VMR", "VPO", "VOO", "VOC"}
    for name in {r["video_name"] for r in rows}:
        p = ex / "videos" / name
        assert p.is_symlink() and not os.path.isabs(os.readlink(p)) and p.exists(), name
        assert frames_of(p) == DURATION * FPS
    rich = pq.read_table(ex / "qa.parquet").to_pylist()
    assert len([r for r in rich if r["split"] == "release"]) == len(rows)
    for r in rich:
        for img in r["image_paths"] or []:
            assert (ex / img).exists(), img
    # VOC-Repeat: the videos really are the view played k times, with the same answers
    reps = [json.loads(x) for x in (ex / "splits/voc_repeat/vsi_super_wild_qa.jsonl").read_text().splitlines()]
    assert reps
    for r in reps[:4]:
        k = int(r["video_name"].rsplit("_repeat", 1)[1][:-4])
        assert frames_of(ex / "splits/voc_repeat/videos" / r["video_name"]) == k * DURATION * FPS
    totals = {r["doc_id"].split("|", 1)[1] + r["video_name"][:-4]: r["answer"] for r in rows if r["task_type"] == "VOC"}
    for r in reps:
        stem = r["video_name"].rsplit("_repeat", 1)[0]
        assert totals[r["doc_id"].split("|", 1)[1] + stem] == r["answer"]
    counts = json.loads((ex / "counts.json").read_text())
    assert counts["release"]["VOC"] == sum(r["task_type"] == "VOC" for r in rows)
    assert (ex / "splits/vpo_unrotated/vsi_super_wild_qa.jsonl").exists()
    # what a reading left unasked, from every qa unit, is in exports/skipped.parquet with the reading
    unstable = [
        r
        for p in sorted((root / "artifacts" / "qa").glob("*/*/skipped.parquet"))
        for r in pq.read_table(p).to_pylist()
        if r["reading"]
    ]
    exported = [r for r in pq.read_table(ex / "skipped.parquet").to_pylist() if r["reading"]]
    assert unstable and sorted(map(str, exported)) == sorted(map(str, unstable))
    assert counts["readings_dropped"] == {
        t: sum(r["task_type"] == t for r in unstable) for t in ("VMR", "VPO", "VOO", "VOC")
    }
    assert "not asked, another reading gives another answer: VMR" in summary_line("exports", counts)


def test_answers_match_the_worlds(built):
    root, _, _ = built
    rich = pq.read_table(root / "exports" / "qa.parquet").to_pylist()
    for r in rich:
        if r["task_type"] != "VOC" or r["split"] == "voc_repeat":
            continue
        w = world(r["source_id"])
        for qt, a in zip(r["query_times"], r["answers"], strict=True):
            assert int(a) == truth_count(w, r["view"], r["concepts"][0], qt)


def test_second_run_recomputes_nothing_and_keeps_exports(built, capsys):
    root, store, _ = built
    before = (root / "exports" / "vsi_super_wild_qa.jsonl").read_bytes()
    plan = run(store)
    states = {o.state for s in plan.outcomes.values() for o in s.values()}
    assert states == {"cached"}
    assert (root / "exports" / "vsi_super_wild_qa.jsonl").read_bytes() == before


def test_same_inputs_same_bytes_in_another_root(built, tmp_path, pano, capsys):
    root, _, _ = built
    other = tmp_path / "root2"
    run(setup_root(other, pano))
    counts = json.loads((other / "exports" / "counts.json").read_text())
    out = summary_line("exports", counts)  # what the CLI prints after a run that included export
    for task, n in counts["release"].items():
        assert f"{task} {n}" in out
    assert f"VOC-Repeat {counts['splits']['voc_repeat']['VOC']}" in out
    for rel in (
        "vsi_super_wild_qa.jsonl",
        "qa.parquet",
        "splits/voc_repeat/vsi_super_wild_qa.jsonl",
        "splits/voc_repeat/videos/sample-qa-a_front_repeat2.mp4",
    ):
        a, b = root / "exports" / rel, other / "exports" / rel
        if rel.endswith(".mp4") and not a.exists():
            continue
        assert a.read_bytes() == b.read_bytes(), rel
    imgs = sorted((root / "exports" / "images").rglob("*.jpg"))
    assert imgs and all(
        p.read_bytes() == (other / "exports" / p.relative_to(root / "exports")).read_bytes() for p in imgs
    )


@pytest.mark.parametrize("root", ["local", "memory"])
def test_publish_replaces_exports_as_a_whole(tmp_path, root):
    from vsi_wild.tasks.export import publish

    store = Store(tmp_path / "r" if root == "local" else f"memory://qa-publish-{tmp_path.name}")
    for name, data in (("a", b"A"), ("b", b"B")):
        store.write_bytes_atomic(store.path("artifacts", "x", f"{name}.txt"), data)
    publish(store, {"one.txt": store.path("artifacts/x/a.txt"), "sub/two.txt": store.path("artifacts/x/b.txt")})
    assert store.fs.cat_file(store.path("exports/sub/two.txt")) == b"B"
    publish(store, {"three.txt": store.path("artifacts/x/a.txt")})
    assert sorted(p.rsplit("/", 1)[1] for p in store.fs.find(store.path("exports"))) == ["three.txt"]
    assert store.fs.cat_file(store.path("exports/three.txt")) == b"A"
    assert sorted(p.rsplit("/", 1)[1] for p in store.fs.ls(store.root, detail=False)) == ["artifacts", "exports"]
    if root == "local":
        link = Path(store.path("exports/three.txt"))
        assert link.is_symlink() and not os.path.isabs(os.readlink(link))
