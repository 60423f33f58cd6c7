"""The segmentation masks of one 2 FPS timestamp, for the canvas over the video.

Masks live in the ``segment`` stage's clip outputs (COCO RLE, clip-local ids); the instance each
belongs to now is in the ``metadata`` stage's observations (after reconciliation and fixes). A
mask row is matched to the current observation of the same timestamp with the same box (boxes
are scaled to view pixels as reconciliation does), else the one it overlaps most (a merged
duplicate whose smaller box was dropped). Only the rows needed are read: the observations are
indexed by timestamp once per metadata output (a few numbers per row), and the masks come from
the one clip file that holds the timestamp (the last few clips stay in memory for playback).

The answer is one label image (PNG, 8-bit: pixel = 1 + the index of its mask, 0 = none) and the
list of masks; the page colours each instance and hides the toggled-off ones itself.
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import pyarrow.parquet as pq
from pycocotools import mask as mask_utils

from vsi_wild import ids
from vsi_wild.stages.segment import SAMPLE_STEP, clip_of_sample
from vsi_wild.store import UnitRef
from vsi_wild.verify.catalog import Catalog

SEGMENT_COLUMNS = [
    "sample_index",
    "local_id",
    "concept",
    "x0",
    "y0",
    "x1",
    "y1",
    "image_width",
    "image_height",
    "mask_rle",
]
MAX_MASKS = 255  # labels of one 8-bit image
CLIPS_KEPT = 3


def _by_sample(k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct samples, start of each in ``order``, order): the rows of samples[i] are
    order[starts[i]:starts[i + 1]]."""
    order = np.argsort(k, kind="stable")
    samples, starts = np.unique(k[order], return_index=True)
    return samples, np.append(starts, len(k)), order


@dataclass
class ObservationIndex:
    """One metadata output's observations sorted by timestamp: instance id and box per row."""

    starts: np.ndarray  # row range of sample k: order[starts[i]:starts[i+1]] for samples[i]
    samples: np.ndarray
    instance: np.ndarray
    boxes: np.ndarray  # (n, 4) view pixels, NaN where a fix added the instance (no box)
    fixed: np.ndarray  # (n,) the observation was laid by a fix (a drawn box)

    @classmethod
    def read(cls, path: str) -> ObservationIndex:
        t = pq.read_table(path, columns=["instance_id", "sample_index", "x0", "y0", "x1", "y1", "origin"])
        samples, starts, order = _by_sample(t["sample_index"].to_numpy())
        boxes = np.stack(
            [t[c].to_numpy(zero_copy_only=False).astype(np.float64) for c in ("x0", "y0", "x1", "y1")], axis=1
        )[order]
        fixed = (np.asarray(t["origin"].to_pylist(), dtype=object) == "fix")[order]
        return cls(starts, samples, t["instance_id"].to_numpy()[order].astype(np.int64), boxes, fixed)

    def at(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        inst, boxes, _ = self.at_with_origin(k)
        return inst, boxes

    def at_with_origin(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        i = int(np.searchsorted(self.samples, k))
        if i >= len(self.samples) or self.samples[i] != k:
            return np.zeros(0, np.int64), np.zeros((0, 4)), np.zeros(0, bool)
        lo, hi = self.starts[i], self.starts[i + 1]
        return self.instance[lo:hi], self.boxes[lo:hi], self.fixed[lo:hi]


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    x0 = np.maximum(box[0], boxes[:, 0])
    y0 = np.maximum(box[1], boxes[:, 1])
    x1 = np.minimum(box[2], boxes[:, 2])
    y1 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1]) + (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) - inter
    return np.where(area > 0, inter / np.where(area > 0, area, 1), 0.0)


class MaskServer:
    """Masks of one timestamp of a video (thread-safe; indexes kept per current output)."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self._lock = threading.Lock()
        self._obs: dict[str, tuple[UnitRef, ObservationIndex]] = {}
        self._clips: OrderedDict[UnitRef, tuple] = OrderedDict()  # clip output -> its table, sorted by sample
        self._prompts: dict[UnitRef, list[dict[str, Any]]] = {}  # clip output -> its drawn boxes' masks

    def _observations(self, video_id: str) -> ObservationIndex:
        ref = self.catalog.require("metadata", video_id)
        with self._lock:
            held = self._obs.get(video_id)
            if held is None or held[0] != ref:
                self._obs = {
                    video_id: (
                        ref,
                        ObservationIndex.read(str(self.catalog.store.local_file(ref, "observations.parquet"))),
                    )
                }
            return self._obs[video_id][1]

    def _clip_rows(self, ref: UnitRef, k: int) -> list[dict[str, Any]]:
        with self._lock:
            held = self._clips.get(ref)
            if held is None:
                t = pq.read_table(self.catalog.store.local_file(ref, "segments.parquet"), columns=SEGMENT_COLUMNS)
                held = (t, *_by_sample(t["sample_index"].to_numpy()))
                self._clips[ref] = held
                while len(self._clips) > CLIPS_KEPT:
                    self._clips.popitem(last=False)
            else:
                self._clips.move_to_end(ref)
        table, samples, starts, order = held
        i = int(np.searchsorted(samples, k))
        if i >= len(samples) or samples[i] != k:
            return []
        return table.take(order[starts[i] : starts[i + 1]]).to_pylist()

    def decoded(self, video_id: str, k: int) -> list[dict[str, Any]]:
        """The masks of 2 FPS timestamp ``k``, each matched to its current instance: instance id,
        concept, clip and clip-local id, box (view pixels) and the binary mask (segment pixels)."""
        view = self.catalog.video(video_id)
        width = int(view["width"])
        clip = clip_of_sample(k, self.catalog.config.segment.clip_seconds)
        ref = self.catalog.current("segment", ids.clip_id(video_id, clip)) if k >= 0 else None
        rows = self._clip_rows(ref, k) if ref is not None else []
        inst, boxes = self._observations(video_id).at(k)
        out: list[dict[str, Any]] = []
        for r in rows[:MAX_MASKS]:
            s = float(width) / float(r["image_width"])
            box = (
                np.array([r["x0"], r["y0"], r["x1"], r["y1"]], dtype=np.float64) * s
                if s != 1.0
                else np.array([r["x0"], r["y0"], r["x1"], r["y1"]], dtype=np.float64)
            )
            if not len(inst):
                continue
            same = np.flatnonzero(np.all(boxes == box, axis=1))
            if len(same):
                j = int(same[0])
            else:
                overlap = _iou(box, np.nan_to_num(boxes))
                j = int(np.argmax(overlap))
                if overlap[j] < 0.3:
                    continue  # its instance was removed
            h, w = int(r["image_height"]), int(r["image_width"])
            m = mask_utils.decode({"size": [h, w], "counts": r["mask_rle"].encode()})
            out.append(
                {
                    "instance_id": int(inst[j]),
                    "concept": r["concept"],
                    "clip": clip,
                    "local_id": int(r["local_id"]),
                    "box": [float(v) for v in box],
                    "mask": m,
                }
            )
        # the masks of boxes reviewers drew (segmented from them where the segmenter takes box
        # prompts): the instance whose observation is that drawn box
        fixed = self._observations(video_id).at_with_origin(k)[2]
        for r in self._prompted(ref, k) if ref is not None and len(inst) else []:
            drawn = np.array([r["box_x0"], r["box_y0"], r["box_x1"], r["box_y1"]], dtype=np.float64)
            overlap = _iou(drawn, np.nan_to_num(boxes))
            j = int(np.argmax(overlap + fixed))  # a drawn observation before an automatic one in the same place
            if overlap[j] < 0.5:
                continue
            h, w = int(r["image_height"]), int(r["image_width"])
            m = mask_utils.decode({"size": [h, w], "counts": r["mask_rle"].encode()})
            out.append(
                {
                    "instance_id": int(inst[j]),
                    "concept": r["concept"] or "",
                    "clip": clip,
                    "local_id": -1,
                    "box": [float(v) for v in boxes[j]],
                    "mask": m,
                    "prompt": r["prompt"],
                }
            )
        return out

    def _prompted(self, ref: UnitRef, k: int) -> list[dict[str, Any]]:
        with self._lock:
            held = self._prompts.get(ref)
        if held is None:
            path = self.catalog.store.local_file(ref, "prompted.parquet")
            held = pq.read_table(path).to_pylist() if path.is_file() else []
            with self._lock:
                self._prompts[ref] = held
                while len(self._prompts) > CLIPS_KEPT:
                    self._prompts.pop(next(iter(self._prompts)))
        return [r for r in held if r["sample_index"] == k]

    def masks(self, video_id: str, k: int) -> dict[str, Any]:
        view = self.catalog.video(video_id)
        width, height = int(view["width"]), int(view["height"])
        out: list[dict[str, Any]] = []
        label = None
        for d in self.decoded(video_id, k):
            m = d.pop("mask")
            if label is None:
                label = np.zeros(m.shape, np.uint8)
            label[m > 0] = len(out) + 1
            out.append({"label": len(out) + 1, **d})
        png = ""
        mh, mw = label.shape if label is not None else (height, width)
        if label is not None:
            ok, buf = cv2.imencode(".png", label, [cv2.IMWRITE_PNG_COMPRESSION, 1])
            png = base64.b64encode(buf.tobytes()).decode() if ok else ""
        return {
            "video_id": video_id,
            "sample_index": k,
            "time": k * SAMPLE_STEP,
            "mask_width": mw,
            "mask_height": mh,
            "view_width": width,
            "view_height": height,
            "png": png,
            "masks": out,
        }
