"""Instances per clip: clip splitting, instance masks as COCO RLE, appearance histograms and embeddings.

The paper (A.2.1) runs SAM3 with the kept concepts as text prompts on the video at 2 FPS, split
into non-overlapping 5-minute clips processed independently (GPU memory). The instances' ids are
clip-local; ``stages.reconcile`` links them across clips. ``SAMPLE_STEP`` spaces the 2 FPS
samples (t_k = k · SAMPLE_STEP) that clips, poses and the derived metadata are indexed by.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, overload

import cv2
import numpy as np
import pycocotools.mask as mask_utils
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # backends.groundtruth imports this module
    from vsi_wild.stages.backends.base import FrameBatch, ImageEmbedder, SegmentRecord

SAMPLE_STEP = 0.5  # seconds between 2 FPS timestamps
HISTOGRAM = "histogram"  # segment.appearance's CPU setting: colour histograms only, no image embedder


class SegmentParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str = Field("sam3", description="segmenter backend: sam3 | groundtruth")
    clip_seconds: float = Field(300.0, gt=0, description="length of the independently segmented clips")
    min_score: float = Field(0.3, ge=0, le=1, description="instance masks below this score are ignored")
    min_area: int = Field(
        16,
        ge=0,
        description="masks with fewer pixels are not tracked; they are kept as specks (specks.parquet), which the "
        "qa readings that count an object seen at all read",
    )
    frame_max_width: int = Field(
        1920, ge=64, description="frames are downscaled to at most this width before segmentation"
    )
    appearance: str = Field(
        "open_clip",
        description="what reconciliation compares two instances' looks by: `histogram` (the colour histogram "
        "of the masked pixels, the CPU path) or an image_embedder backend: `open_clip` (the CLIP image tower "
        "on the instance's crops, written to embeddings.parquet)",
    )
    embed_crops: int = Field(
        4, ge=1, description="crops embedded per clip instance: its largest sightings the image border does not cut"
    )


# --------------------------------------------------------------------------------- clips
@dataclass(frozen=True)
class ClipSpan:
    index: int
    start: float
    end: float
    first_sample: int
    n_samples: int


def n_samples(duration_s: float) -> int:
    """2 FPS timestamps t_k = k / 2 with t_k < duration."""
    return max(0, math.ceil(duration_s / SAMPLE_STEP - 1e-9))


def clip_of_sample(k: int, clip_seconds: float) -> int:
    return int(math.floor(k * SAMPLE_STEP / clip_seconds + 1e-9))


def clip_spans(duration_s: float, clip_seconds: float) -> list[ClipSpan]:
    """Non-overlapping clips [i·L, (i+1)·L) covering the video's 2 FPS timestamps."""
    n = n_samples(duration_s)
    # clip_of_sample for every k at once (the same float operations, so the same clips): a 4-hour
    # video has 31,000 samples, and the plan enumerates the clips of every video of a release
    clips = np.floor(np.arange(n, dtype=np.float64) * SAMPLE_STEP / clip_seconds + 1e-9).astype(np.int64)
    index, first, count = np.unique(clips, return_index=True, return_counts=True)
    return [
        ClipSpan(i, i * clip_seconds, min((i + 1) * clip_seconds, duration_s), int(k0), int(c))
        for i, k0, c in zip(map(int, index), first, count, strict=True)
    ]


# --------------------------------------------------------------------------------- masks
def encode_rle(mask: np.ndarray) -> str:
    """COCO RLE (pycocotools' compressed counts string) of a 2-D boolean mask."""
    m = np.asfortranarray(np.asarray(mask, dtype=np.uint8))
    return mask_utils.encode(m)["counts"].decode("ascii")


def decode_rle(counts: str, height: int, width: int) -> np.ndarray:
    return mask_utils.decode({"size": [int(height), int(width)], "counts": counts.encode("ascii")}).astype(bool)


def rle_area(counts: str, height: int, width: int) -> int:
    return int(mask_utils.area({"size": [int(height), int(width)], "counts": counts.encode("ascii")}))


HIST_BINS = (8, 3, 3)  # hue, saturation, value


def appearance_histogram(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """L1-normalised HSV histogram of the masked pixels (zeros when the mask is empty)."""
    if mask.shape != image.shape[:2]:
        mask = cv2.resize(mask.astype(np.uint8), (image.shape[1], image.shape[0]), interpolation=cv2.INTER_NEAREST) > 0
    if not mask.any():
        return np.zeros(int(np.prod(HIST_BINS)), dtype=np.float32)
    hsv = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2HSV)
    h = cv2.calcHist([hsv], [0, 1, 2], mask.astype(np.uint8), list(HIST_BINS), [0, 180, 0, 256, 0, 256]).ravel()
    return (h / max(h.sum(), 1.0)).astype(np.float32)


def bhattacharyya(p: np.ndarray, q: np.ndarray) -> float:
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.sum() <= 0 or q.sum() <= 0:
        return 0.0
    return float(np.sqrt((p / p.sum()) * (q / q.sum())).sum())


# --------------------------------------------------------------------------------- embeddings
CROP_MARGIN = 0.1  # of the box's size on each side: the object's outline, and a little of where it stands


def best_sightings(seg_rows: Iterable[dict], per_instance: int) -> dict[tuple[str, int], list[dict]]:
    """(concept, local id) -> its ``per_instance`` largest sightings (``schema.CLIP_SEGMENTS`` rows)
    whose box the image border does not cut (a cut box shows part of the object), all of them
    ranked the same way when every box is cut; ties by time."""
    by_instance: dict[tuple[str, int], list[dict]] = {}
    for r in seg_rows:
        by_instance.setdefault((r["concept"], int(r["local_id"])), []).append(r)

    def cut(r: dict) -> bool:
        w, h = r["image_width"], r["image_height"]
        return r["x0"] <= 0 or r["y0"] <= 0 or r["x1"] >= w or r["y1"] >= h

    out = {}
    for key, rows in by_instance.items():
        whole = [r for r in rows if not cut(r)] or rows
        out[key] = sorted(whole, key=lambda r: (-int(r["area"]), float(r["time"])))[:per_instance]
    return out


def crop(image: np.ndarray, box: Sequence[float], margin: float = CROP_MARGIN) -> np.ndarray:
    """The box's pixels, widened by ``margin`` of its size on each side, within the image."""
    h, w = image.shape[:2]
    x0, y0, x1, y1 = (float(v) for v in box)
    mx, my = margin * (x1 - x0), margin * (y1 - y0)
    c0, r0 = max(0, int(math.floor(x0 - mx))), max(0, int(math.floor(y0 - my)))
    c1, r1 = min(w, int(math.ceil(x1 + mx))), min(h, int(math.ceil(y1 + my)))
    return np.ascontiguousarray(image[r0 : max(r1, r0 + 1), c0 : max(c1, c0 + 1)])


def embedding_rows(
    video_id: str,
    clip_index: int,
    batch: FrameBatch,
    seg_rows: Sequence[dict],
    embedder: ImageEmbedder,
    per_instance: int,
) -> list[dict]:
    """Rows of schema.CLIP_EMBEDDINGS: each clip instance's embedding, the normalised mean of its
    best sightings' crops (``best_sightings``) embedded by ``embedder``. Each frame is decoded once."""
    chosen = best_sightings(seg_rows, per_instance)
    pos_of = {int(k): i for i, k in enumerate(batch.sample_indices)}
    wanted: dict[int, list[tuple[tuple[str, int], dict]]] = {}
    for key, rows in chosen.items():
        for r in rows:
            wanted.setdefault(pos_of[int(r["sample_index"])], []).append((key, r))
    owners: list[tuple[str, int]] = []
    crops: list[np.ndarray] = []
    for pos in sorted(wanted):
        image = np.asarray(batch.images[pos])
        for key, r in wanted[pos]:
            sx, sy = image.shape[1] / r["image_width"], image.shape[0] / r["image_height"]
            owners.append(key)
            crops.append(crop(image, (r["x0"] * sx, r["y0"] * sy, r["x1"] * sx, r["y1"] * sy)))
    vectors = np.asarray(embedder.embed(crops), dtype=np.float64) if crops else np.zeros((0, 0))
    rows_of: dict[tuple[str, int], list[int]] = {}
    for i, key in enumerate(owners):
        rows_of.setdefault(key, []).append(i)
    out = []
    for key in sorted(rows_of):
        mean = vectors[rows_of[key]].mean(axis=0)
        out.append(
            {
                "video_id": video_id,
                "clip_index": clip_index,
                "concept": key[0],
                "local_id": key[1],
                "embedder": embedder.name,
                "n_crops": len(rows_of[key]),
                "embedding": (mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32).tolist(),
            }
        )
    return out


# --------------------------------------------------------------------------------- frames
class JpegFrames(Sequence[np.ndarray]):
    """A clip's frames as JPEG files, decoded on access: a FrameBatch's ``images`` for a whole
    clip without holding it in memory (and the folder a video segmenter can read directly)."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]]):
        self.paths = [Path(p) for p in paths]

    def __len__(self) -> int:
        return len(self.paths)

    @overload
    def __getitem__(self, i: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, i: slice) -> list[np.ndarray]: ...

    def __getitem__(self, i: int | slice) -> np.ndarray | list[np.ndarray]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        img = cv2.imread(str(self.paths[i]), cv2.IMREAD_COLOR)
        if img is None:
            raise OSError(f"cannot read frame {self.paths[i]}")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)

    @property
    def folder(self) -> Path | None:
        parents = {p.parent for p in self.paths}
        return parents.pop() if len(parents) == 1 else None


# --------------------------------------------------------------------------------- one clip
class ClipTables(NamedTuple):
    segments: list[dict]  # schema.CLIP_SEGMENTS rows: masks of segment.min_area pixels or more
    instances: list[dict]  # schema.CLIP_INSTANCES rows: the clip-local ids those masks have
    specks: list[dict]  # schema.CLIP_SPECKS rows: smaller masks (at least a pixel), not tracked


def clip_tables(
    video_id: str,
    clip_index: int,
    batch: FrameBatch,
    records: Iterable[SegmentRecord],
    backend: str,
    params: SegmentParams,
) -> ClipTables:
    """Rows of schema.CLIP_SEGMENTS, schema.CLIP_INSTANCES and schema.CLIP_SPECKS from a segmenter's
    records (those under ``min_score`` are dropped: the segmenter's own doubt)."""
    seg_rows: list[dict] = []
    speck_rows: list[dict] = []
    acc: dict[tuple[str, int], dict] = {}
    by_frame: dict[int, list[SegmentRecord]] = {}
    for r in records:
        by_frame.setdefault(int(r.frame_pos), []).append(r)
    for pos in sorted(by_frame):
        if not 0 <= pos < len(batch.times):
            raise ValueError(f"segmenter returned frame_pos {pos} outside the clip (0..{len(batch.times) - 1})")
        image = batch.images[pos]
        h, w = image.shape[:2]
        for r in by_frame[pos]:
            mask = np.asarray(r.mask, dtype=bool)
            if mask.shape != (h, w):
                mask = cv2.resize(mask.astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST) > 0
            area = int(mask.sum())
            if r.score < params.min_score or area == 0:
                continue
            ys, xs = np.nonzero(mask)
            box = (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))
            row = {
                "video_id": video_id,
                "clip_index": clip_index,
                "sample_index": int(batch.sample_indices[pos]),
                "time": float(batch.times[pos]),
                "concept": r.concept,
                "local_id": int(r.local_id),
                "x0": box[0],
                "y0": box[1],
                "x1": box[2],
                "y1": box[3],
                "area": area,
                "score": float(r.score),
            }
            if area < params.min_area:
                speck_rows.append(row)
                continue
            seg_rows.append(
                {
                    **row,
                    "frame": int(batch.frame_indices[pos]),
                    "fps": float(batch.fps),
                    "image_width": int(w),
                    "image_height": int(h),
                    "mask_rle": encode_rle(mask),
                    "backend": backend,
                }
            )
            a = acc.setdefault(
                (r.concept, int(r.local_id)),
                {"times": [], "areas": [], "scores": [], "hist": np.zeros(int(np.prod(HIST_BINS)))},
            )
            a["times"].append(float(batch.times[pos]))
            a["areas"].append(area)
            a["scores"].append(float(r.score))
            a["hist"] += appearance_histogram(image, mask) * area
    inst_rows = []
    for (concept, lid), a in sorted(acc.items(), key=lambda kv: (min(kv[1]["times"]), kv[0])):
        hist = a["hist"] / max(a["hist"].sum(), 1e-12)
        inst_rows.append(
            {
                "video_id": video_id,
                "clip_index": clip_index,
                "concept": concept,
                "local_id": lid,
                "first_time": min(a["times"]),
                "last_time": max(a["times"]),
                "n_observations": len(set(a["times"])),
                "mean_area": float(np.mean(a["areas"])),
                "mean_score": float(np.mean(a["scores"])),
                "appearance": hist.astype(np.float32).tolist(),
            }
        )
    return ClipTables(seg_rows, inst_rows, speck_rows)
