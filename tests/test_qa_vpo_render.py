"""VPO's rendered views: really rendered from the panorama at the recorded yaw (checked against
py360convert on independently decoded frames), from the right frames, with faces blurred."""

from __future__ import annotations

import math

import av
import cv2
import numpy as np
import py360convert
import pytest
from project_media import astronaut_face, paste, write_video
from qa_world import instances_table, make_world, motion_table, poses_table, views_table

from vsi_wild.stages.faces import FaceParams, image_blurrer, make_detector
from vsi_wild.stages.qa import QAParams
from vsi_wild.stages.qa.build import build_video
from vsi_wild.stages.qa.common import Provenance, VideoInfo
from vsi_wild.stages.qa.vpo import RenderJob, render_jobs

PW, PH = 512, 256
FPS = 10.0
DURATION = 20.0


def pano_frame(i: int) -> np.ndarray:
    """A smooth texture that differs from frame to frame (a wrong frame or yaw cannot match)."""
    rng = np.random.default_rng(123)
    base = cv2.resize(rng.integers(0, 255, (16, 32, 3), dtype=np.uint8), (PW, PH), interpolation=cv2.INTER_CUBIC)
    img = np.roll(base, 5 * i, axis=1)
    img[..., 2] = (img[..., 2].astype(int) + 3 * i) % 256
    return img


def decode(path, wanted) -> dict[int, tuple[float, np.ndarray]]:
    out = {}
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        first = None
        for i, f in enumerate(c.decode(s)):
            first = f.pts if first is None else first
            if i in wanted:
                out[i] = (float((f.pts - first) * s.time_base), f.to_ndarray(format="rgb24"))
    return out


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * math.log10(255.0**2 / mse)


def read_image(path) -> np.ndarray:
    return cv2.cvtColor(cv2.imread(str(path), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


@pytest.fixture(scope="module")
def pano(tmp_path_factory):
    p = tmp_path_factory.mktemp("pano") / "pano.mp4"
    return write_video(p, pano_frame, [i / FPS for i in range(int(DURATION * FPS))], lossless=True, rate=FPS)


@pytest.fixture(scope="module")
def centerface():
    return make_detector(FaceParams(backend="centerface"))


def small_video(w, view: str, width=128, height=72) -> VideoInfo:
    row = next(r for r in views_table(w, width, height).to_pylist() if r["view"] == view)
    return VideoInfo.from_row(row)


@pytest.mark.parametrize("view,fmt", [("right", "png"), ("left", "jpg")])
def test_rendered_views_match_py360convert_at_the_recorded_yaw(tmp_path, pano, centerface, view, fmt):
    w = make_world(4, duration=DURATION, fps=FPS)
    video = small_video(w, view)
    params = QAParams(
        clip_seconds=10,
        vpo_per_video=2,
        vpo_min_gap_s=2.0,
        vpo_edge_margin_s=0.5,
        image_format=fmt,
        voo_first=0,
        voo_last=0,
    )
    written = {}

    def dest(rel):
        written[rel] = tmp_path / rel
        written[rel].parent.mkdir(parents=True, exist_ok=True)
        return written[rel]

    res = build_video(
        video,
        instances_table(w, view),
        motion_table(w, view, 10),
        poses_table(w, view, width=video.width, height=video.height),
        params,
        Provenance(0, "fp", "t"),
        pano,
        dest,
        image_blurrer(centerface, FaceParams()),
    )
    vpo = [q for q in res.questions if q.task_type == "VPO"]
    assert len(vpo) == 4  # 2 rotated + 2 unrotated controls
    frames = decode(pano, {f for q in vpo for f in q.frame_indices})
    min_ok = 45.0 if fmt == "png" else 26.0
    for q in vpo:
        assert q.frame_times == pytest.approx([frames[f][0] for f in q.frame_indices])
        assert q.query_times == [max(q.frame_times)]
        for f, file, yaw, off in zip(
            q.frame_indices, q.image_files, q.render_yaw_deg, q.render_offset_deg, strict=True
        ):
            img = read_image(written[file])
            assert img.shape == (72, 128, 3)
            ref = py360convert.e2p(frames[f][1], fov_deg=(90.0, video.vfov_deg), u_deg=yaw, v_deg=0.0, out_hw=(72, 128))
            assert psnr(img, ref) > min_ok, (file, yaw)
            if q.subtype == "rotated":
                assert 30 <= abs(off) <= 60
                unrotated = py360convert.e2p(
                    frames[f][1], fov_deg=(90.0, video.vfov_deg), u_deg=yaw - off, v_deg=0.0, out_hw=(72, 128)
                )
                assert psnr(img, unrotated) < 20.0, "the view is not rotated"
                other = frames[min(frames, key=lambda g: (g == f, abs(g - f)))][1]
                wrong_frame = py360convert.e2p(
                    other, fov_deg=(90.0, video.vfov_deg), u_deg=yaw, v_deg=0.0, out_hw=(72, 128)
                )
                assert psnr(img, wrong_frame) < 22.0, "rendered from the wrong frame"
            else:
                assert off == 0.0
    assert sorted(r["file"] for r in res.images) == sorted(f for q in vpo for f in q.image_files)


def test_faces_in_rendered_views_are_blurred(tmp_path, centerface):
    """A face at longitude 40° (between the front and right views): its rotated render shows it;
    the written image has it blurred, and the audit row names the box."""
    face = cv2.resize(astronaut_face(), (105, 120))
    pw, ph = 1024, 512

    def frame(i: int) -> np.ndarray:
        img = np.full((ph, pw, 3), 90, np.uint8)
        img[..., 0] = (np.arange(pw) * 255 // pw).astype(np.uint8)[None, :]
        paste(img, face, (0.5 + 40 / 360) * pw, ph / 2)
        return img

    src = write_video(tmp_path / "face.mp4", frame, [i / FPS for i in range(5)], rate=FPS)
    video = VideoInfo("sample-face_front", "sample-face", "front", 0.0, 0.0, 90.0, 58.7155, 640, 360, FPS, 5, 0.5)
    params = QAParams(image_format="png")
    jobs = [RenderJob(2, 40.0, 0.0, "images/face_rot.png")]
    out = {}

    def dest(rel):
        out[rel] = tmp_path / rel
        out[rel].parent.mkdir(parents=True, exist_ok=True)
        return out[rel]

    bare = render_jobs(src, jobs, dest, video, params, None)
    assert len(centerface.detect(read_image(out["images/face_rot.png"]))[0]) == 1, "the test face is not visible"
    assert bare[0]["faces_blurred"] == []
    rows = render_jobs(src, jobs, dest, video, params, image_blurrer(centerface, FaceParams()))
    assert len(rows[0]["faces_blurred"]) == 1
    assert len(centerface.detect(read_image(out["images/face_rot.png"]))[0]) == 0
