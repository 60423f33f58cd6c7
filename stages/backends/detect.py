"""Open-vocabulary detectors (kind ``open_vocab_detector``).

``yolo_world``: ultralytics YOLO-World-v2 from ``models.yolo_world_weights``, prompted with the
candidate names. ultralytics' own ``set_classes`` needs OpenAI's `clip` package, which it tries to
pip-install from GitHub (impossible offline, and a runtime install in a worker is wrong anyway), so
we do what it does with open_clip instead: encode the names with the CLIP ViT-B/32 text tower
(``models.open_clip_weights``, the same encoder YOLO-World-v2 was trained against), L2-normalise,
and set ``txt_feats`` (1, n, 512), the head's ``nc`` and the names, then drop the cached predictor
(mirrors ``WorldModel.set_classes`` + ``YOLOWorld.set_classes`` in ultralytics 8.4).

Frames go to the model ``models.yolo_world_batch_size`` at a time (one forward pass per batch:
ultralytics stacks a list of same-sized images into one tensor), in fp32, or in fp16 on a GPU
with ``models.yolo_world_half`` (ultralytics' ``quantize=16``, which it applies on CUDA only;
off by default until `make gpu-check` has compared its boxes with fp32's on the same frames).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vsi_wild.errors import UnitError
from vsi_wild.stages.backends import weights as W
from vsi_wild.stages.backends.base import BackendContext, Detections, FrameBatch, register
from vsi_wild.stages.backends.params import OPEN_CLIP_FIELDS, LoadedModel, ModelsParams, as_params, load_once, require
from vsi_wild.stages.backends.text import OpenClipTextEmbedder


def empty_detections() -> Detections:
    return Detections(boxes=np.zeros((0, 4), np.float32), scores=np.zeros((0,), np.float32), labels=[])


def check_rgb_frames(batch: FrameBatch) -> None:
    """Frames must be (H, W, 3) uint8 RGB; say which one is not (a bad frame is the unit's fault)."""
    for pos, img in enumerate(batch.images):
        if not isinstance(img, np.ndarray) or img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
            desc = f"{type(img).__name__} {getattr(img, 'shape', '')} {getattr(img, 'dtype', '')}"
            raise UnitError(
                f"video {batch.video_id}: frame {pos} (sample {batch.sample_indices[pos]}) is not an "
                f"(H, W, 3) uint8 RGB array: {desc}"
            )


@contextlib.contextmanager
def no_nms_time_limit() -> Iterator[None]:
    """ultralytics' NMS stops after 2 s + 0.05 s per image of a batch and returns the images after
    that with no boxes at all (a log warning only): a loaded machine, a large batch or a frame with
    many candidates would lose detections, differently from run to run (seen on this CPU with random
    weights: 16-frame passes kept 2,100 boxes where 4-frame passes kept 4,500). Within this context
    the limit is off (``max_time_img`` infinite); the module attribute is what ultralytics' predictor
    calls, restored on exit. Entered under the model lock."""
    from ultralytics.utils import nms

    real = nms.non_max_suppression
    nms.non_max_suppression = functools.partial(real, max_time_img=float("inf"))
    try:
        yield
    finally:
        nms.non_max_suppression = real


def _load_yolo_world(path: Path, device: str) -> Any:
    ultralytics = require("ultralytics", "ultralytics", "yolo_world")
    model = ultralytics.YOLOWorld(str(path))
    model.model.to(device).eval()
    model._vsi_classes = None  # the class list whose text features are set (see _set_classes)
    return model


class YoloWorldDetector:
    name = "yolo_world"

    def __init__(self, params: ModelsParams):
        self.params = params
        require("ultralytics", "ultralytics", self.name)
        path = params.weight_path("yolo_world_weights", hint="YOLO-World-v2 weights, e.g. yolov8x-worldv2.pt")
        self._text = OpenClipTextEmbedder(params)
        device = params.torch_device()
        self._loaded: LoadedModel = load_once(
            ("yolo_world", str(path.resolve()), device), lambda: (_load_yolo_world(path, device), device)
        )

    @property
    def model(self) -> Any:
        """The ultralytics ``YOLOWorld`` (shared by every detector built from the same weights)."""
        return self._loaded.model

    def _set_classes(self, concepts: list[str]) -> None:
        yolo = self._loaded.model
        if yolo._vsi_classes == tuple(concepts):
            return
        feats = self._text.embed_tensor(concepts)
        world = yolo.model
        param = next(world.parameters())
        world.txt_feats = feats.reshape(1, len(concepts), feats.shape[-1]).to(device=param.device, dtype=param.dtype)
        world.model[-1].nc = len(concepts)
        world.names = list(concepts)
        yolo.predictor = None  # the predictor caches names and the backend
        yolo._vsi_classes = tuple(concepts)

    def detect(self, batch: FrameBatch, concepts: Sequence[str]) -> list[Detections]:
        return self.detect_many([batch], concepts)[0]

    def detect_many(self, batches: Sequence[FrameBatch], concepts: Sequence[str]) -> list[list[Detections]]:
        """``detect`` of several videos' frames (a source's views) with the same concepts, in shared
        forward passes: their frames interleaved (frame 0 of each batch, then frame 1, ...) and run
        ``models.yolo_world_batch_size`` at a time. A frame's boxes do not depend on the others in
        its pass (exactly so on a CPU in fp32; on a GPU the kernels chosen per batch size may round
        differently: `make gpu-check` compares). Frames of one size per call (ultralytics letterboxes
        a batch of mixed sizes to a square, which moves boxes)."""
        concepts = list(dict.fromkeys(str(c) for c in concepts))  # unique, in order
        out: list[list[Detections]] = [[empty_detections() for _ in b.images] for b in batches]
        if not concepts:
            return out
        order = [
            (b, i)
            for i in range(max((len(x.images) for x in batches), default=0))
            for b, x in enumerate(batches)
            if i < len(x.images)
        ]
        if not order:
            return out
        for fb in batches:
            check_rgb_frames(fb)
        sizes = {batches[b].images[i].shape[:2] for b, i in order}
        if len(sizes) != 1:
            raise UnitError(
                f"videos {', '.join(b.video_id for b in batches)}: frames of different sizes {sorted(sizes)} "
                "in one detector call"
            )
        p = self.params
        found: list[Detections] = []
        with self._loaded.lock, no_nms_time_limit():  # classes and predictor are model state: one caller at a time
            self._set_classes(concepts)
            for start in range(0, len(order), p.yolo_world_batch_size):
                # ultralytics reads numpy arrays as BGR (OpenCV order)
                bgr = [
                    np.ascontiguousarray(batches[b].images[i][..., ::-1])
                    for b, i in order[start : start + p.yolo_world_batch_size]
                ]
                results = self._loaded.model.predict(
                    bgr,
                    imgsz=p.yolo_world_imgsz,
                    conf=p.yolo_world_conf,
                    iou=p.yolo_world_iou,
                    max_det=p.yolo_world_max_det,
                    quantize=16 if p.yolo_world_half else 32,  # fp16 or fp32; ultralytics runs fp32 on a CPU
                    device=self._loaded.device,
                    verbose=False,
                )
                for r in results:
                    boxes = r.boxes
                    cls = boxes.cls.cpu().numpy().astype(int)
                    found.append(
                        Detections(
                            boxes=boxes.xyxy.cpu().numpy().astype(np.float32).reshape(-1, 4),
                            scores=boxes.conf.cpu().numpy().astype(np.float32),
                            labels=[concepts[c] for c in cls],
                        )
                    )
        for (b, i), d in zip(order, found, strict=True):
            out[b][i] = d
        return out


@register(
    "open_vocab_detector",
    "yolo_world",
    fields=(
        "yolo_world_weights",
        "yolo_world_imgsz",
        "yolo_world_conf",
        "yolo_world_iou",
        "yolo_world_max_det",
        "yolo_world_half",
        *OPEN_CLIP_FIELDS,
    ),
    weights=("yolo_world_weights", "open_clip_weights"),
    sources={"yolo_world_weights": W.YOLOV8X_WORLDV2, "open_clip_weights": W.OPENAI_CLIP_VIT_B_32},
    packages=(("ultralytics", "ultralytics"), ("open_clip", "open-clip-torch"), ("torch", "torch")),
    gpu=True,
)
def make_yolo_world(ctx: BackendContext) -> YoloWorldDetector:
    return YoloWorldDetector(as_params(ctx.models, ctx.options))
