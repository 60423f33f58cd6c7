"""bench/gpu_check.py in its reduced form (`--cpu --tiny`): every backend it measures on the GPU
machine runs here through the same code, on small frames and architectures with random weights,
so the prepared script cannot rot. SAM3 is left to the GPU run: on this CPU it needs ~9 GB and
minutes (tests/test_backends_segment.py covers its adapter)."""

from __future__ import annotations

import json

import pytest

from conftest import load_bench

pytestmark = [pytest.mark.models, pytest.mark.slow]


def test_the_gpu_check_runs_in_its_reduced_form(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VSI_WILD_WEIGHTS", str(tmp_path / "no-weights"))  # random weights, and said so
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(tmp_path / "yolo"))
    gpu_check = load_bench("gpu_check")
    out = tmp_path / "gpu_check.json"
    report = gpu_check.main(["--cpu", "--tiny", "--stages", "detect,pose,faces,text", "--out", str(out)])
    assert report["errors"] == {}
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    stages = {r["stage"]: r for r in report["stages"]}
    assert set(stages) == {"detect", "pose", "faces", "text"}
    for name in ("detect", "pose", "faces"):
        r = stages[name]
        assert r["fps"] > 0 and r["video_hours_per_gpu_hour"] > 0 and r["weights"].startswith("random")
    assert stages["faces"]["frames_per_view_second"] == 30.0  # SCRFD on every projected frame
    assert stages["text"]["video_hours_per_gpu_hour"] is None  # per name, not per second of video
    rates = [stages[n]["video_hours_per_gpu_hour"] for n in ("detect", "pose", "faces")]
    assert report["overall_video_hours_per_gpu_hour"] == pytest.approx(1 / sum(1 / x for x in rates))
    printed = capsys.readouterr().out
    assert "hours of 360° video per GPU-hour" in printed and "random (speed and memory only)" in printed
