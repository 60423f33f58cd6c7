"""YOLO-World through our adapter: ultralytics' real YOLO-World-v2 architecture with random weights,
saved as the .pt the production loader reads, prompted through open_clip text features.

Checked against ultralytics itself driven independently: a fresh model loaded from the same file,
text features computed with open_clip directly, predicting on the BGR frame (ultralytics' numpy
convention)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")

import numpy as np
import pytest
import random_weights

from vsi_wild.errors import MissingWeights
from vsi_wild.stages.backends.base import FrameBatch, create

pytestmark = pytest.mark.models

H, W = 120, 200  # not a multiple of 32: exercises ultralytics' letterbox and the mapping back
CONF = 0.5


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("weights")
    clip = random_weights.clip_state_dict(d / "clip.pt")
    random_weights.yolo_world(d / "yolo_world.pt")
    return d, clip


def _detector(d, batch_size: int):
    """Our YOLO-World adapter on the module's random weights, at the tests' small image size."""
    return create(
        "open_vocab_detector",
        "yolo_world",
        device="cpu",
        weights_dir=str(d),
        yolo_world_weights="yolo_world.pt",
        open_clip_weights="clip.pt",
        yolo_world_imgsz=160,
        yolo_world_conf=CONF,
        yolo_world_batch_size=batch_size,
    )


def _frames() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    a = np.zeros((H, W, 3), np.uint8)
    a[..., 0] = np.linspace(0, 255, W)[None, :].astype(np.uint8)  # red ramp, blue flat: channel order matters
    a[20:90, 30:110] = (250, 40, 10)
    b = (rng.random((H, W, 3)) * 255).astype(np.uint8)
    return [a, b]


def _reference(d, clip, frames, concepts, bgr=True):
    """ultralytics YOLO-World on the same weights, text features from open_clip, no adapter."""
    import open_clip
    import torch
    from ultralytics import YOLOWorld

    yolo = YOLOWorld(str(d / "yolo_world.pt"))
    with torch.no_grad():
        f = clip.encode_text(open_clip.get_tokenizer("ViT-B-32")(concepts)).float()
    f = f / f.norm(dim=-1, keepdim=True)
    yolo.model.txt_feats = f.reshape(1, len(concepts), 512)
    yolo.model.model[-1].nc = len(concepts)
    yolo.model.names = list(concepts)
    out = []
    for img in frames:
        r = yolo.predict(img[..., ::-1].copy() if bgr else img, imgsz=160, conf=CONF, verbose=False, device="cpu")[0]
        out.append((r.boxes.xyxy.numpy(), r.boxes.conf.numpy(), [concepts[int(c)] for c in r.boxes.cls]))
    return out


@pytest.fixture
def one_torch_thread():
    """The adapter and the reference are two runs of one float model: with several threads a reduction's order
    (and so its last bits) can differ between them, enough to move a box by 1/200 px. One thread makes the
    comparison exact arithmetic, so the tolerance below measures the adapter, not the scheduler."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_yolo_world_detects_through_our_adapter(weights, one_torch_thread) -> None:
    d, clip = weights
    det = _detector(d, batch_size=1)
    frames = _frames()
    batch = FrameBatch("vid_front", frames, [0.0, 0.5], [0, 15], [0, 1], 30.0)
    for concepts in (["chair", "trash can", "person"], ["bus", "chair"]):  # re-prompting resets classes
        got = det.detect(batch, concepts)
        ref = _reference(d, clip, frames, concepts)
        assert len(got) == 2
        assert sum(len(g.labels) for g in got) > 0, "the random model must produce boxes for the test to bite"
        for g, (boxes, scores, labels) in zip(got, ref, strict=True):
            assert g.boxes.shape == (len(g.labels), 4) and g.boxes.dtype == np.float32
            assert g.scores.shape == (len(g.labels),)
            assert set(g.labels) <= set(concepts) and (g.scores >= CONF).all()
            assert (g.boxes[:, 0] >= 0).all() and (g.boxes[:, 2] <= W).all() and (g.boxes[:, 3] <= H).all()
            assert (g.boxes[:, 2] >= g.boxes[:, 0]).all() and (g.boxes[:, 3] >= g.boxes[:, 1]).all()
            np.testing.assert_allclose(g.boxes, boxes, atol=1e-3)
            np.testing.assert_allclose(g.scores, scores, atol=1e-5)
            assert g.labels == labels
    # the adapter converts RGB to BGR: on RGB input as-is ultralytics would see other colours
    rgb_as_is = _reference(d, clip, frames, ["bus", "chair"], bgr=False)
    got = det.detect(batch, ["bus", "chair"])
    assert any(
        len(g.labels) != len(r[2]) or not np.allclose(g.scores, r[1]) for g, r in zip(got, rgb_as_is, strict=True)
    )
    # empty prompts and empty batches
    assert [len(g.labels) for g in det.detect(batch, [])] == [0, 0]
    assert det.detect(FrameBatch("v", [], [], [], [], 30.0), ["chair"]) == []


def test_yolo_world_missing_weights_name_the_config_keys(weights, tmp_path) -> None:
    d, _ = weights
    with pytest.raises(MissingWeights) as e:
        create("open_vocab_detector", "yolo_world", device="cpu", weights_dir=str(tmp_path))
    assert "models.yolo_world_weights" in str(e.value)
    # the text encoder's weights are a separate key
    with pytest.raises(MissingWeights) as e:
        create(
            "open_vocab_detector",
            "yolo_world",
            device="cpu",
            weights_dir=str(d),
            yolo_world_weights="yolo_world.pt",
            open_clip_weights="missing.pt",
        )
    assert "models.open_clip_weights" in str(e.value)


def test_yolo_world_runs_a_sources_views_in_shared_passes(weights, one_torch_thread, monkeypatch, tmp_path) -> None:
    """The detect stage runs a source's views together (``run_detect_views``): views prompting the
    same concepts go through YOLO-World in lockstep, their frames interleaved in shared forward
    passes (``detect_many``), and each view's rows are the ones it gets alone (fp32 on one CPU
    thread: a frame's boxes do not depend on the other frames of its pass). A view with other
    concepts never shares a pass: YOLO-World's neck attends to the prompt's names, so a longer list
    changes the boxes (shown here too)."""
    from types import SimpleNamespace

    import pyarrow as pa

    from vsi_wild.stages.backends.detect import YoloWorldDetector
    from vsi_wild.stages.detect import DetectParams
    from vsi_wild.tasks import metadata as tm

    d, _ = weights
    det = _detector(d, batch_size=4)
    rng = np.random.default_rng(3)
    frames = {v: [(rng.random((H, W, 3)) * 255).astype(np.uint8) for _ in range(3)] for v in range(4)}
    prompts = {0: ["chair", "bench"], 1: ["chair", "bench"], 2: ["chair", "bench"], 3: ["chair", "bench", "bus"]}

    def batches(v, fps, size):  # the stage's 2 FPS feed of view v, in batches of `size`
        for k in range(0, len(frames[v]), size):
            imgs = frames[v][k : k + size]
            n = range(k, k + len(imgs))
            yield FrameBatch(f"src_{v}", imgs, [i / 2 for i in n], [15 * i for i in n], list(n), fps)

    monkeypatch.setattr(tm, "frame_batches", lambda path, vid, fps, size, *_: batches(int(str(path)[-1]), fps, size))
    calls: list[list[int]] = []
    real = YoloWorldDetector.detect_many
    monkeypatch.setattr(
        YoloWorldDetector,
        "detect_many",
        lambda self, bs, cs: (calls.append([len(b.images) for b in bs]), real(self, bs, cs))[1],
    )
    views = pa.Table.from_pylist(
        [{"video_id": f"src_{v}", "duration_s": 1.5, "fps": 30.0, "width": W, "height": H} for v in range(4)]
    )

    def job(v):
        out = SimpleNamespace(tables={})
        out.write_table = lambda name, table: out.tables.__setitem__(name, table.to_pylist())
        return SimpleNamespace(
            unit=f"src_{v}",
            config=SimpleNamespace(detect=DetectParams(backend="yolo_world", batch_frames=2)),
            read=lambda stage, name, v=v: views if stage == "project" else pa.table({"concept": prompts[v]}),
            file=lambda stage, name, v=v: f"view{v}",
            backend=lambda kind: det,
            progress=lambda *a: None,
            out=out,
        )

    together = [job(v) for v in range(4)]
    tm.run_detect_views(together)
    # views 0-2 share calls (batches of 2 frames, then their last frame), view 3 runs alone
    assert calls == [[2, 2, 2], [1, 1, 1], [2], [1]]
    alone = [job(v) for v in range(4)]
    for j in alone:
        tm.run_detect(j)
    rows = [len(j.out.tables["detections.parquet"]) for j in together]
    assert sum(rows) > 0, "the random model must produce boxes for the test to bite"
    for a, b in zip(alone, together, strict=True):
        sa, sb = a.out.tables["concept_stats.parquet"], b.out.tables["concept_stats.parquet"]
        assert [{**r, "max_score": None} for r in sa] == [{**r, "max_score": None} for r in sb]
        assert all(abs((x["max_score"] or 0) - (y["max_score"] or 0)) < 1e-5 for x, y in zip(sa, sb, strict=True))
        ra, rb = a.out.tables["detections.parquet"], b.out.tables["detections.parquet"]
        assert [(r["sample_index"], r["concept"]) for r in ra] == [(r["sample_index"], r["concept"]) for r in rb]
        # exact where both passes hold several frames; a pass of one frame (a view's last batch,
        # alone) takes another oneDNN kernel: boxes move by ~1e-3 px (checked to 1e-2)
        for x, y in zip(ra, rb, strict=True):
            for c in ("x0", "y0", "x1", "y1"):
                assert abs(x[c] - y[c]) < 1e-2
            assert abs(x["score"] - y["score"]) < 1e-5
    # the neck attends to the names: view 0's frames prompted with view 3's list give other boxes
    own = det.detect(next(batches(0, 30.0, 3)), prompts[0])
    longer = det.detect(next(batches(0, 30.0, 3)), prompts[3])
    assert any(
        len(x.labels) != len([lab for lab in y.labels if lab in prompts[0]])
        or not np.array_equal(x.scores, y.scores[[lab in prompts[0] for lab in y.labels]])
        for x, y in zip(own, longer, strict=True)
    )
    # ultralytics' NMS gives up after 2 s + 0.05 s per image and leaves the rest of the pass without
    # boxes; the adapter turns that limit off: a clock that jumps a minute per reading loses nothing
    from types import SimpleNamespace as Clock

    from ultralytics.utils import nms

    ticks = iter(range(0, 10**6, 60))
    monkeypatch.setattr(nms, "time", Clock(time=lambda: float(next(ticks))))
    slow = det.detect(next(batches(1, 30.0, 3)), prompts[1])
    assert [len(x.labels) for x in slow] == [len(x.labels) for x in det.detect(next(batches(1, 30.0, 3)), prompts[1])]
    assert all(len(x.labels) for x in slow)
