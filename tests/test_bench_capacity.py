"""bench/bench_capacity.py's measurement on a tiny input, so that `make bench`'s capacity figures
cannot rot: every stage's function runs, the figures are positive, the lines and the JSON parse,
and the counts it derives match what the input's size and rate say."""

from __future__ import annotations

import json
import math
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, make_video

# production settings but small views, so that the test takes seconds
TINY_CONFIG = "project: {width: 320, height: 180}\n"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(REPO / "bench"))  # a script folder, not a package
    try:
        import bench_capacity
    finally:
        sys.path.remove(str(REPO / "bench"))
    return bench_capacity


def test_measure_gives_positive_figures_that_parse(bench, tmp_path):
    pano = make_video(tmp_path / "pano.mp4", 256, 128, fps=8, seconds=2)
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY_CONFIG)
    work = tmp_path / "work"
    work.mkdir()
    res = bench.measure(bench.Source.of(pano), work, config, qa_images=1)

    per_h = res["core_h_per_video_h"]
    for name in (
        "probe",
        "decode",
        "project",
        "projection",
        "face_detection",
        "project_cpu_side",
        "encode",
        "view_feed",
        "pose_cpu",
        "qa_render",
    ):
        assert math.isfinite(per_h[name]) and per_h[name] > 0, name
    assert per_h["project"] == pytest.approx(res["cpu_s"]["project"] / 2.0, rel=1e-2)  # 2 s of video
    assert res["source"]["frames"] == 16  # 8 fps x 2 s
    assert res["feed_frames"] == 4 * 2 * 2  # 4 views x 2 FPS x 2 s
    assert res["faces"]["detect_every"] == 8  # once a second at 8 fps
    assert res["qa"]["images_per_view"] == 3 * 4 * 2  # 3 VPO questions x 4 anchors x rotated/unrotated
    assert res["qa"]["anchors_per_view"] == 3 * 4
    # qa: 4 views x (12 anchors' seek-and-decode + 24 images) over the mean video length
    qa = res["qa"]
    assert per_h["qa_render"] == pytest.approx(
        4 * (12 * qa["cpu_s_per_anchor_decode"] + 24 * qa["cpu_s_per_image"]) / (bench.MEAN_VIDEO_MIN * 60)
    )
    assert res["pixels_ratio_to_production"] == pytest.approx(3840 * 1920 / (256 * 128))
    assert res["core_h_per_video_h_at_production"]["decode"] == pytest.approx(per_h["decode"] * 225)
    assert res["views"]["bytes_per_source_s"] > 0 and res["qa"]["bytes_per_image"] > 0

    printed = bench.lines(res)
    values = {}
    for line in printed:
        name, value = line.split(": ", 1)
        values[name] = value
    assert float(values["capacity_project_core_h_per_video_h"]) == pytest.approx(per_h["project"], abs=1e-3)
    assert values["capacity_measured_at"].startswith("256x128 8 fps")
    assert json.loads(json.dumps(res)) == res


def test_storage_is_bytes_per_second_of_source(bench, tmp_path):
    arts = tmp_path / "artifacts"
    for sid, seconds in (("a", 10.0), ("b", 30.0)):
        d = arts / "probe" / sid / "k1"
        d.mkdir(parents=True)
        pq.write_table(pa.table({"source_id": [sid], "duration_s": [seconds]}), d / "source.parquet")
        v = arts / "project" / sid / "k1"
        v.mkdir(parents=True)
        (v / f"{sid}_front.mp4").write_bytes(b"x" * 4000)
    got = bench.storage(tmp_path)
    assert got["source_seconds"] == 40.0
    assert got["bytes_per_source_s"]["project"] == pytest.approx(8000 / 40.0)
    assert "capacity_storage_project_bytes_per_source_s: 200" in bench.lines({"storage": got})
