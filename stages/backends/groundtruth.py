"""Detector and segmenter that read a generated sample's ground truth (``schema.TRUTH_VISIBILITY``).

They serve the embedded sample and CI with exact answers, and they are the way human-verified
metadata enters the pipeline: a table of that schema, made by people, drives the same stages.
Both look rows up by the batch's view (from its video id) and 2 FPS sample index; boxes and masks
are rescaled from the truth resolution to the frames' resolution.

The segmenter hands out **clip-local** ids, numbered per call in order of first appearance, as
SAM3 does for each clip it processes: the truth's instance ids never leave this module, so the
cross-clip reconciliation downstream is really exercised.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np
import pyarrow as pa

from vsi_wild import ids
from vsi_wild.stages.backends.base import BackendContext, BoxPrompt, Detections, FrameBatch, SegmentRecord, register
from vsi_wild.stages.segment import decode_rle


class _TruthIndex:
    def __init__(self, visibility: pa.Table, min_pixels: int):
        need = {
            "source_id",
            "view",
            "sample_index",
            "instance_id",
            "category",
            "x0",
            "y0",
            "x1",
            "y1",
            "image_width",
            "image_height",
            "pixels",
            "mask_rle",
        }
        missing = need - set(visibility.column_names)
        if missing:
            raise ValueError(f"truth visibility table lacks columns {sorted(missing)}")
        self.rows: dict[tuple[str, str, int], list[dict]] = {}
        for r in visibility.to_pylist():
            if r["pixels"] < min_pixels:
                continue
            self.rows.setdefault((r["source_id"], r["view"], int(r["sample_index"])), []).append(r)
        for v in self.rows.values():
            v.sort(key=lambda r: (r["x0"], r["y0"], r["instance_id"]))

    def at(self, video_id: str, k: int) -> list[dict]:
        source, view = ids.split_video_id(video_id)
        return self.rows.get((source, view, int(k)), [])


def _scale(r: dict, image: np.ndarray) -> tuple[float, float]:
    h, w = image.shape[:2]
    return w / r["image_width"], h / r["image_height"]


class GroundTruthDetector:
    name = "groundtruth"

    def __init__(self, visibility: pa.Table, min_pixels: int = 1):
        self._index = _TruthIndex(visibility, min_pixels)

    def detect(self, batch: FrameBatch, concepts: Sequence[str]) -> list[Detections]:
        wanted = set(concepts)
        out = []
        for img, k in zip(batch.images, batch.sample_indices, strict=True):
            rows = [r for r in self._index.at(batch.video_id, k) if r["category"] in wanted]
            boxes = []
            for r in rows:
                sx, sy = _scale(r, img)
                boxes.append([r["x0"] * sx, r["y0"] * sy, r["x1"] * sx, r["y1"] * sy])
            out.append(
                Detections(
                    np.asarray(boxes, dtype=np.float64).reshape(-1, 4),
                    np.ones(len(rows)),
                    [r["category"] for r in rows],
                )
            )
        return out


class GroundTruthSegmenter:
    name = "groundtruth"

    def __init__(self, visibility: pa.Table, min_pixels: int = 1):
        self._index = _TruthIndex(visibility, min_pixels)

    def segment(self, batch: FrameBatch, concepts: Sequence[str]) -> list[SegmentRecord]:
        wanted = set(concepts)
        local: dict[int, int] = {}  # truth id -> clip-local id, in order of first appearance
        out = []
        for pos, k in enumerate(batch.sample_indices):
            rows = [r for r in self._index.at(batch.video_id, k) if r["category"] in wanted]
            if not rows:
                continue
            img = batch.images[pos]
            h, w = img.shape[:2]
            for r in rows:
                lid = local.setdefault(r["instance_id"], len(local))
                mask = decode_rle(r["mask_rle"], r["image_height"], r["image_width"])
                if mask.shape != (h, w):
                    mask = cv2.resize(mask.astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST) > 0
                sx, sy = _scale(r, img)
                out.append(
                    SegmentRecord(
                        frame_pos=pos,
                        concept=r["category"],
                        local_id=lid,
                        box=(r["x0"] * sx, r["y0"] * sy, r["x1"] * sx, r["y1"] * sy),
                        score=1.0,
                        mask=mask,
                    )
                )
        return out

    def segment_boxes(self, batch: FrameBatch, prompts: Sequence[BoxPrompt]) -> list[SegmentRecord]:
        """The truth mask each drawn box outlines (the object whose box overlaps it most, IoU >= 0.3),
        as a box-prompted segmenter would give it; none where the box outlines no object."""
        out = []
        for n, p in enumerate(prompts):
            img = batch.images[p.frame_pos]
            h, w = img.shape[:2]
            best, row = 0.0, None
            for r in self._index.at(batch.video_id, batch.sample_indices[p.frame_pos]):  # the box decides
                sx, sy = _scale(r, img)
                x = _iou(p.box, (r["x0"] * sx, r["y0"] * sy, r["x1"] * sx, r["y1"] * sy))
                if x > best:
                    best, row = x, r
            if row is None or best < 0.3:
                continue
            mask = decode_rle(row["mask_rle"], row["image_height"], row["image_width"])
            if mask.shape != (h, w):
                mask = cv2.resize(mask.astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST) > 0
            sx, sy = _scale(row, img)
            out.append(
                SegmentRecord(
                    frame_pos=p.frame_pos,
                    concept=row["category"],
                    local_id=n,
                    box=(row["x0"] * sx, row["y0"] * sy, row["x1"] * sx, row["y1"] * sy),
                    score=float(best),
                    mask=mask,
                )
            )
        return out


def _iou(a: Sequence[float], b: Sequence[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy
    return ix * iy / union if union > 0 else 0.0


# Their outputs depend on the sample's truth, which reaches the cache key through the sample's video
# (probe's fingerprint of it is upstream of every stage that builds them): no fields of their own.
@register("open_vocab_detector", "groundtruth", fields=())
def _detector(ctx: BackendContext) -> GroundTruthDetector:
    opts = {k: v for k, v in ctx.options.items() if k != "visibility"}
    return GroundTruthDetector(ctx.truth_table("visibility"), **opts)


@register("segmenter", "groundtruth", fields=())
def _segmenter(ctx: BackendContext) -> GroundTruthSegmenter:
    opts = {k: v for k, v in ctx.options.items() if k != "visibility"}
    return GroundTruthSegmenter(ctx.truth_table("visibility"), **opts)
