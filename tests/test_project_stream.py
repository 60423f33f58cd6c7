"""The streaming stage: one decode, four encodes, timestamps kept (VFR), audio dropped, bad input
rejected with a message naming the file, nothing partial left behind."""

from __future__ import annotations

import hashlib
import os
import threading

import av
import numpy as np
import pytest
from project_media import QUADRANT_COLOURS, ffmpeg, frame_times, quadrant_panorama, write_video

from vsi_wild import schema
from vsi_wild.errors import UnitError
from vsi_wild.stages.faces import FaceParams, make_detector
from vsi_wild.stages.project import ProjectParams, project_source

SMALL = ProjectParams(width=64, height=36, preset="ultrafast")
FACES = FaceParams(detect_width=0)


@pytest.fixture(scope="module")
def detector():
    return make_detector(FACES)


def textured(i: int, w: int = 256, h: int = 128) -> np.ndarray:
    img = quadrant_panorama(w, h)
    img[(i * 7) % h, :] = 255  # something that changes per frame
    return img


def test_vfr_timestamps_kept_views_match_their_yaw_and_table_describes_files(tmp_path, detector):
    times = [0.0, 0.1, 0.15, 0.4, 0.45, 0.5, 1.0, 1.033, 1.5, 2.2, 2.25, 3.0]
    src = write_video(tmp_path / "vfr.mkv", textured, times)
    views, faces = project_source(src, tmp_path / "out", SMALL, detector, face_params=FACES, source_id="local-vfr")
    assert views.schema.equals(schema.VIEWS_TABLE)
    assert faces.schema.equals(schema.FACES) and faces.num_rows == 0
    rows = {r["view"]: r for r in views.to_pylist()}
    assert list(rows) == ["front", "right", "back", "left"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(f"local-vfr_{v}.mp4" for v in rows)
    for view, r in rows.items():
        p = tmp_path / "out" / r["path"]
        got = frame_times(p)
        assert len(got) == len(times) == r["n_frames"]
        assert np.allclose(got, times, atol=1e-3), (view, got)
        assert r["video_id"] == f"local-vfr_{view}" and r["source_id"] == "local-vfr"
        assert r["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()
        assert (r["width"], r["height"]) == (64, 36) and r["vfov_deg"] == pytest.approx(58.7155, abs=1e-4)
        assert r["duration_s"] == pytest.approx(3.0 + 3.0 / 11, abs=1e-3)  # last time + mean interval
        assert r["fps"] == pytest.approx(12 / r["duration_s"], rel=1e-6)
        with av.open(str(p)) as c:  # the view shows its own quarter of the panorama
            rgb = next(c.decode(video=0)).to_ndarray(format="rgb24")
        assert np.abs(rgb[4:-4, 4:-4].reshape(-1, 3).mean(0) - QUADRANT_COLOURS[view]).max() < 12, view


def test_audio_dropped(tmp_path, detector):
    src = tmp_path / "with_audio.mp4"
    ffmpeg(
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=256x128:rate=10:duration=1.5",
        "-f",
        "lavfi",
        "-i",
        "sine=duration=1.5",
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-pix_fmt",
        "yuv420p",
        "-c:a",
        "aac",
        "-shortest",
        str(src),
    )
    with av.open(str(src)) as c:
        assert len(c.streams.audio) == 1
    views, _ = project_source(src, tmp_path / "out", SMALL, detector, face_params=FACES, source_id="local-audio")
    for r in views.to_pylist():
        with av.open(str(tmp_path / "out" / r["path"])) as c:
            assert len(c.streams.audio) == 0 and len(c.streams.video) == 1
        assert r["n_frames"] == 15


def test_one_decode_feeds_four_outputs(tmp_path, detector):
    """The source is a named pipe: it can be read exactly once, so four complete outputs prove
    that one decode fed all four encoders."""
    ts = tmp_path / "src.ts"
    ffmpeg(
        "-f",
        "lavfi",
        "-i",
        "testsrc2=size=256x128:rate=10:duration=2",
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-pix_fmt",
        "yuv420p",
        "-f",
        "mpegts",
        str(ts),
    )
    n_src = len(frame_times(ts))
    fifo = tmp_path / "source.ts"
    os.mkfifo(fifo)
    data = ts.read_bytes()
    reads = []

    def feed() -> None:
        with open(fifo, "wb") as f:  # blocks until a reader opens the pipe
            reads.append(1)
            f.write(data)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    result: dict = {}

    def run() -> None:
        try:
            result["views"], _ = project_source(
                fifo, tmp_path / "out", SMALL, detector, face_params=FACES, source_id="local-fifo"
            )
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            result["error"] = e

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(120)
    if worker.is_alive():  # a second open of the pipe would wait for a writer forever
        with open(fifo, "wb"):
            pass
        pytest.fail("project_source opened its source more than once")
    assert "error" not in result, result.get("error")
    assert len(reads) == 1
    assert [r["n_frames"] for r in result["views"].to_pylist()] == [n_src] * 4


@pytest.mark.parametrize("case", ["not_2to1", "no_video", "truncated", "truncated_index", "garbage", "missing"])
def test_bad_input_raises_unit_error_naming_the_file(tmp_path, detector, case):
    out = tmp_path / "out"
    if case == "not_2to1":
        src = tmp_path / "square.mp4"
        ffmpeg("-f", "lavfi", "-i", "testsrc2=size=320x240:rate=10:duration=1", "-pix_fmt", "yuv420p", str(src))
        reason = "not equirectangular"
    elif case == "no_video":
        src = tmp_path / "audio_only.m4a"
        ffmpeg("-f", "lavfi", "-i", "sine=duration=1", "-c:a", "aac", str(src))
        reason = "no video stream"
    elif case in ("truncated", "truncated_index"):
        full = tmp_path / "full.mp4"
        flags = ["-movflags", "+faststart"] if case == "truncated" else []
        ffmpeg(
            "-f", "lavfi", "-i", "testsrc2=size=256x128:rate=10:duration=4", "-pix_fmt", "yuv420p", *flags, str(full)
        )
        src = tmp_path / f"{case}.mp4"
        src.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
        reason = "truncated" if case == "truncated" else "unreadable"  # no index left: cannot even open
    elif case == "garbage":
        src = tmp_path / "garbage.mp4"
        src.write_bytes(np.random.default_rng(0).integers(0, 256, 50_000, dtype=np.uint8).tobytes())
        reason = "unreadable"
    else:
        src = tmp_path / "nowhere.mp4"
        reason = "not found"
    with pytest.raises(UnitError) as e:
        project_source(src, out, SMALL, detector, face_params=FACES, source_id="local-bad")
    assert str(src) in str(e.value) and reason in str(e.value), str(e.value)
    assert not list(out.glob("*.mp4"))  # nothing partial left behind


def test_other_units_go_on_after_a_bad_one(tmp_path, detector):
    """A failure is per call: the next source is projected normally by the same detector."""
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video")
    with pytest.raises(UnitError):
        project_source(bad, tmp_path / "o1", SMALL, detector, face_params=FACES, source_id="local-bad")
    good = write_video(tmp_path / "good.mkv", textured, [0.0, 0.1, 0.2])
    views, _ = project_source(good, tmp_path / "o2", SMALL, detector, face_params=FACES, source_id="local-good")
    assert views.num_rows == 4


def test_progress_is_reported_per_frame(tmp_path, detector):
    src = write_video(tmp_path / "p.mp4", textured, [i / 10 for i in range(7)])
    seen: list[tuple[int, int | None]] = []
    project_source(
        src,
        tmp_path / "out",
        SMALL,
        detector,
        lambda d, t: seen.append((d, t)),
        face_params=FACES,
        source_id="local-progress",
    )
    assert [d for d, _ in seen] == list(range(1, 8)) and seen[-1][1] == 7
