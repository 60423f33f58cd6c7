"""The whole pipeline on the small sample through the production backends, as `vsi-wild run` runs
them with configs/default.yaml's choices: open_clip candidate names, YOLO-World detection, SCRFD face
blurring, open_clip appearance embeddings for reconciliation, Depth-Anything-3 poses in metres. The
weights are random (built offline: tests/random_weights.py), so the answers mean nothing; what this
checks is that every stage builds its production backend with the options the stage gives it and
runs to the end. Each backend's own tests check its adapter against the package; this one catches
what they cannot: a stage handing a production backend an option it rejects (the pose stage once
gave DA3 twoview's options and failed at its first unit).

SAM3 is the one production backend left out: on this CPU its video propagation takes ~30 s per frame
and concept, hours for the sample. Its adapter and the segment stage's path through it run in
tests/test_backends_segment.py; the segment stage here runs the ground-truth segmenter, with
production's open_clip appearance."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import random_weights
from conftest import vsi_wild

pytestmark = [pytest.mark.models, pytest.mark.slow]

CONFIG = """
run: {{data_root: {root}, workers: 1}}
sample: {{source_id: sample-small, duration_s: 16, width: 512, fps: 8}}
project: {{width: 320, height: 180}}
segment: {{backend: groundtruth, clip_seconds: 8, appearance: open_clip}}
metadata: {{motion_clip_seconds: 8}}
qa: {{clip_seconds: 8}}
review: {{require_decision: true, auto_keep_origins: [sample]}}
faces: {{scrfd_weights: scrfd.onnx, onnx_providers: [CPUExecutionProvider]}}
models:
  device: cpu
  weights_dir: {weights}
  open_clip_weights: clip.pt
  yolo_world_weights: yolo_world.pt
  yolo_world_imgsz: 160
  da3_model_dir: {weights}/DA3-SMALL
  da3_process_res: 112
"""


def _column(root, stage: str, name: str, column: str) -> set:
    values: set = set()
    for path in (root / "artifacts" / stage).rglob(name):
        values |= set(pq.read_table(path, columns=[column]).column(column).to_pylist())
    return values


def test_the_production_backends_run_the_whole_pipeline(tmp_path) -> None:
    weights = tmp_path / "weights"
    weights.mkdir()
    random_weights.clip_state_dict(weights / "clip.pt")
    random_weights.yolo_world(weights / "yolo_world.pt")
    random_weights.da3_folder(weights / "DA3-SMALL", "da3-small")
    random_weights.scrfd_signature_model(weights / "scrfd.onnx")
    root = tmp_path / "data"
    config = tmp_path / "production.yaml"
    config.write_text(CONFIG.format(root=root, weights=weights))

    result = vsi_wild("run", "-c", str(config), "--quiet")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for stage in (
        "candidates",
        "detect",
        "segment",
        "view_pose",
        "pose",
        "reconcile",
        "metadata",
        "qa",
        "export",
        "report",
    ):
        assert (root / "artifacts" / stage).is_dir(), f"{stage} wrote nothing"
    # each production backend did the work its stage records
    assert _column(root, "candidates", "candidates.parquet", "embedder") == {"open_clip"}
    assert _column(root, "detect", "detections.parquet", "backend") == {"yolo_world"}
    for stage, name, backend in (
        ("pose", "poses.parquet", "da3"),
        ("view_pose", "view_poses.parquet", "da3:independent"),
    ):
        (path,) = (root / "artifacts" / stage).rglob(name)
        poses = pq.read_table(path).to_pylist()
        assert {r["backend"] for r in poses} == {backend}  # every view, fused and on its own
        assert len({r["video_id"] for r in poses}) == 4 and len(poses) == 4 * 32  # 16 s at 2 FPS
    (matches,) = (root / "artifacts" / "view_pose").rglob("view_matches.parquet")
    assert pq.read_metadata(matches).num_rows == 0  # DA3 gives no matches: the fusion reads its poses alone
    embedded = [p for p in (root / "artifacts" / "segment").rglob("embeddings.parquet") if pq.read_metadata(p).num_rows]
    assert embedded, "no clip instance was embedded"
    rows = pq.read_table(embedded[0]).to_pylist()
    assert {r["embedder"] for r in rows} == {"open_clip"} and all(len(r["embedding"]) == 512 for r in rows)
    assert (root / "exports" / "qa.parquet").is_file() and (root / "report.md").is_file()
