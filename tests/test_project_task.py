"""The `project` stage through the real engine and store: probe -> review -> project on registered
files."""

from __future__ import annotations

import numpy as np
from project_media import ffmpeg

from vsi_wild import schema
from vsi_wild.config import Config, ReviewSection
from vsi_wild.schema import VIEWS_FILE
from vsi_wild.stages.faces import FaceParams
from vsi_wild.stages.project import ProjectParams
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks import engine
from vsi_wild.tasks.engine import Plan
from vsi_wild.tasks.probe import PROBE
from vsi_wild.tasks.project import FACES, PROJECT
from vsi_wild.tasks.review import REVIEW


class ProjectConfig(Config):
    """Config with small, fast defaults for this test."""

    project: ProjectParams = ProjectParams(width=64, height=36, preset="ultrafast")
    faces: FaceParams = FaceParams()
    review: ReviewSection = ReviewSection(require_decision=False)  # local test files need no human


def register(store: Store, source_id: str, path) -> None:
    row = {n: None for n in schema.SOURCE.names}
    row.update(source_id=source_id, origin="local", path=str(path))
    store.register_source(row)


def run(store: Store, config: Config) -> Plan:
    stages = [PROBE, REVIEW, PROJECT]
    plan = Plan.load(config, store, stages)
    engine.run_stages(plan, stages, engine.run_inline(plan))
    return plan


def test_project_stage_writes_views_and_audit_trail_and_caches(tmp_path):
    src = tmp_path / "pano.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=256x128:rate=10:duration=1.2", "-pix_fmt", "yuv420p", str(src))
    bad = tmp_path / "square.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=128x128:rate=10:duration=1", "-pix_fmt", "yuv420p", str(bad))
    store = Store(tmp_path / "data")
    register(store, "local-pano-0001", src)
    register(store, "local-square-0001", bad)
    config = ProjectConfig()
    plan = run(store, config)
    out = plan.outcomes["project"]
    assert out["local-pano-0001"].state == "computed", out["local-pano-0001"].error
    assert plan.outcomes["probe"]["local-square-0001"].state == "failed"  # rejected; the other went on
    assert "local-square-0001" not in out
    ref = UnitRef("project", "local-pano-0001", out["local-pano-0001"].key)
    files = set(store.files(ref))
    vids = [f"local-pano-0001_{v}" for v in ("front", "right", "back", "left")]
    assert {f"{v}.mp4" for v in vids} | {VIEWS_FILE, FACES} <= files
    views = store.read_table(ref, VIEWS_FILE)
    assert views.schema.equals(schema.VIEWS_TABLE)
    assert views["video_id"].to_pylist() == vids
    assert views["n_frames"].to_pylist() == [12] * 4
    manifest = {r["file"]: r["sha256"] for r in store.manifest(ref).to_pylist()}
    assert [manifest[p] for p in views["path"].to_pylist()] == views["sha256"].to_pylist()
    assert store.read_table(ref, FACES).schema.equals(schema.FACES)
    again = run(store, config)
    assert again.outcomes["project"]["local-pano-0001"].state == "cached"
    changed = run(store, ProjectConfig(faces=FaceParams(margin=0.5)))  # its own section changed
    assert changed.outcomes["project"]["local-pano-0001"].state == "computed"
    assert np.isfinite(views["duration_s"].to_numpy()).all()
