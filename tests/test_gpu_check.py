"""bench/gpu_check.py in its reduced form (`--cpu --tiny`): every backend it measures on the GPU
machine runs here through the same code, on small frames and architectures with random weights,
so the prepared script cannot rot. SAM3's part runs in tests/test_backends_segment.py, on the
random checkpoint that module builds anyway (on this CPU SAM3 needs ~9 GB and minutes)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import load_bench

pytestmark = [pytest.mark.models, pytest.mark.slow]


def test_the_gpu_check_runs_in_its_reduced_form(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VSI_WILD_WEIGHTS", str(tmp_path / "no-weights"))  # random weights, and said so
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(tmp_path / "yolo"))
    gpu_check = load_bench("gpu_check")
    out = tmp_path / "gpu_check.json"
    # no time limit: a loaded machine must not skip the runs the test checks
    report = gpu_check.main(
        ["--cpu", "--tiny", "--stages", "detect,pose,faces,text", "--out", str(out), "--budget-s", "1e9"]
    )
    assert report["errors"] == {}
    assert json.loads(out.read_text()) == report
    rows = report["stages"]
    by = {(r["stage"], r["variant"]): r for r in rows}
    assert {r["stage"] for r in rows} == {"detect", "pose", "faces", "text"}
    assert {v for s, v in by if s == "detect"} == {
        "fp16, batch 16",
        "fp32, batch 16",
        "fp16, batch 1",
        "fp32, one view per call",
    }
    assert {v for s, v in by if s == "pose"} == {
        "views one at a time, fp32",
        "views batched, fp32",
        "fp32 reference, views batched",
    }
    production = {r["stage"]: r for r in rows if r["production"]}
    # the views' frames in shared passes (fp16, yolo_world_half, is off until measured)
    assert production["detect"]["variant"] == "fp32, batch 16"
    assert production["pose"]["variant"] == "views batched, fp32"  # what the pose stage calls
    for r in rows:
        if r["stage"] != "text":
            assert r["fps"] > 0 and r["video_hours_per_gpu_hour"] > 0 and r["weights"].startswith("random")
    assert by[("faces", "")]["frames_per_view_second"] == 30.0  # SCRFD on every projected frame
    assert by[("text", "")]["video_hours_per_gpu_hour"] is None  # per name, not per second of video
    # the GPU side: detect, segment and pose as the pipeline runs them (faces run on the CPU)
    rates = [production[n]["video_hours_per_gpu_hour"] for n in ("detect", "pose")]
    assert report["overall_video_hours_per_gpu_hour"] == pytest.approx(1 / sum(1 / x for x in rates))
    before = [
        by[("detect", "fp32, one view per call")]["video_hours_per_gpu_hour"],
        by[("pose", "views one at a time, fp32")]["video_hours_per_gpu_hour"],
    ]
    assert report["overall_video_hours_per_gpu_hour_by_way"]["before"] == pytest.approx(1 / sum(1 / x for x in before))
    fp16 = [by[("detect", "fp16, batch 16")]["video_hours_per_gpu_hour"], rates[1]]
    assert report["overall_video_hours_per_gpu_hour_by_way"]["detect_fp16"] == pytest.approx(
        1 / sum(1 / x for x in fp16)
    )
    # the faster ways against the reference ways, on the same frames: batching the views' DA3
    # windows changes nothing; on the CPU everything is fp32, so the precision comparisons run but
    # claim nothing (unmeasured)
    checks = {(c["stage"], c["what"]): c for c in report["comparisons"]}
    assert checks[("pose", "views batched vs one at a time")]["ok"] is True
    shared = checks[("detect", "views in shared passes vs one view per call")]
    assert shared["ok"] is True and shared["measures"]["kept_share"] == 1.0
    fp32 = checks[("pose", "fp32 vs fp32")]
    assert fp32["measures"]["max_deg"] == 0.0 and fp32["ok"] is None and fp32["note"].startswith("unmeasured")
    det = checks[("detect", "fp16 vs fp32 (same frames, batch)")]
    assert det["ok"] is None and det["note"].startswith("unmeasured")
    assert any("fp16 / bf16 against fp32" in u for u in report["unmeasured"])
    assert any("every GPU figure" in u for u in report["unmeasured"])
    printed = capsys.readouterr().out
    assert "hours of 360° video per GPU-hour" in printed and "random (speed and memory only)" in printed
    assert "check pose: views batched vs one at a time: holds" in printed
    assert "check detect: views in shared passes vs one view per call: holds" in printed
    assert "check detect: fp16 vs fp32 (same frames, batch): UNMEASURED" in printed
    assert "unmeasured: fp16 / bf16 against fp32" in printed


def test_the_comparisons_measure_what_they_say():
    gpu_check = load_bench("gpu_check")
    from vsi_wild.stages.backends.base import Detections, SegmentRecord

    a = [Detections(np.array([[0, 0, 10, 10], [20, 20, 30, 30]], float), np.array([0.9, 0.8]), ["cat", "dog"])]
    same = gpu_check.compare_detections(a, a)
    assert same["kept_share"] == 1.0 and same["mean_best_iou"] == 1.0 and same["max_score_diff"] == 0.0
    moved = [Detections(np.array([[0, 0, 10, 11], [20, 20, 30, 30]], float), np.array([0.9, 0.7]), ["cat", "cat"])]
    m = gpu_check.compare_detections(a, moved)
    assert m["kept_share"] == pytest.approx(0.5)  # the dog has no partner of its label; the cat is 10/11
    assert m["max_score_diff"] == pytest.approx(0.0)

    mask = np.zeros((8, 8), bool)
    mask[2:6, 2:6] = True
    r = SegmentRecord(0, "cat", 0, (2, 2, 6, 6), 0.9, mask, {"sam3_obj_id": 0})
    shifted = SegmentRecord(0, "cat", 0, (2, 3, 6, 7), 0.9, np.roll(mask, 1, axis=0), {"sam3_obj_id": 0})
    m = gpu_check.compare_segments([r], [shifted])
    assert m["matched_share"] == 1.0 and m["mean_mask_iou"] == pytest.approx(12 / 20) and m["identical"] == 0
    assert gpu_check.compare_segments([r], [r])["identical"] == 1

    ext = np.tile(np.eye(3, 4), (2, 1, 1))
    turned = ext.copy()
    c, s = np.cos(np.radians(2.0)), np.sin(np.radians(2.0))
    turned[1, :3, :3] = [[c, -s, 0], [s, c, 0], [0, 0, 1]]
    e = gpu_check.rotation_error_deg(ext, turned)
    assert e["frames"] == 2 and e["max_deg"] == pytest.approx(2.0) and e["mean_deg"] == pytest.approx(1.0)

    # the segment cost model: per-concept 3 frames x 4 concepts x (E + H), shared 3 x (E + 4 H)
    model = gpu_check.segment_cost_model(3 * 4 * (0.5 + 0.1), 3 * (0.5 + 4 * 0.1), 3, 4)
    assert model["encoder_s_per_frame"] == pytest.approx(0.5) and model["per_concept_s_per_frame"] == pytest.approx(0.1)
