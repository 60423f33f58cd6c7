"""Reconciliation's input: the clip-local instances of one view video and their sightings."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # locate imports this module
    from vsi_wild.stages.reconcile.locate import Located


@dataclass(frozen=True)
class Obs:
    """One sighting of an instance: its box in one 2 FPS sample."""

    time: float
    box: tuple[float, float, float, float]
    area: int
    frame: int
    fps: float
    size: tuple[int, int] = (0, 0)  # image width, height of the box's pixels
    # the bottom edge (image y) of a nearer object's box that begins where this one ends
    # (``mark_occluded_bottoms``): this box's bottom is the occluder's top, not the ground contact
    occluder_bottom: float | None = None

    def clipped(self, margin: float = 2.0) -> bool:
        """The box touches the image border: the object is cut off, its box centre is biased."""
        w, h = self.size
        x0, y0, x1, y1 = self.box
        return w > 0 and (x0 <= margin or y0 <= margin or x1 >= w - margin or y1 >= h - margin)

    def cut_at_bottom(self, margin: float = 2.0) -> bool:
        """The box touches the image's bottom: the object's foot, and its nearest part, are not seen."""
        return self.size[1] > 0 and self.box[3] >= self.size[1] - margin

    def cut_at_side(self, margin: float = 2.0) -> bool:
        """The box touches the image's left or right border: it shows a part of the object."""
        w = self.size[0]
        return w > 0 and (self.box[0] <= margin or self.box[2] >= w - margin)


@dataclass
class ClipInstance:
    """An instance as one clip's segmenter gave it (``locate`` fills in ``where``)."""

    clip: int
    local: int
    concept: str
    first_time: float
    last_time: float
    appearance: np.ndarray
    mean_area: float = 0.0
    samples: dict[int, Obs] = field(default_factory=dict)  # sample index -> observation
    where: Located | None = None  # once located
    embedding: np.ndarray | None = None  # L2-normalised image embedding (segment.appearance's embedder), if any

    @property
    def key(self) -> tuple[int, int]:
        return (self.clip, self.local)

    @property
    def first_sample(self) -> int:
        return min(self.samples)

    @property
    def last_sample(self) -> int:
        return max(self.samples)


def load_clip_instances(
    instance_rows: Iterable[dict], segment_rows: Iterable[dict], embedding_rows: Iterable[dict] | None = None
) -> list[ClipInstance]:
    """Clip instances (``schema.CLIP_INSTANCES`` rows) with their sightings (``schema.CLIP_SEGMENTS``
    rows) and, where given, their image embeddings (``schema.CLIP_EMBEDDINGS`` rows), sorted by
    clip, first time and local id."""
    out: dict[tuple[int, int], ClipInstance] = {}
    for r in instance_rows:
        ci = ClipInstance(
            int(r["clip_index"]),
            int(r["local_id"]),
            r["concept"],
            float(r["first_time"]),
            float(r["last_time"]),
            np.asarray(r["appearance"], dtype=np.float64),
            float(r.get("mean_area") or 0.0),
        )
        out[ci.key] = ci
    for r in segment_rows:
        key = (int(r["clip_index"]), int(r["local_id"]))
        if key not in out:
            raise ValueError(f"segment of unknown clip instance {key}")
        out[key].samples[int(r["sample_index"])] = Obs(
            float(r["time"]),
            (r["x0"], r["y0"], r["x1"], r["y1"]),
            int(r["area"]),
            int(r["frame"]),
            float(r["fps"]),
            (int(r["image_width"]), int(r["image_height"])),
        )
    for r in embedding_rows or ():
        key = (int(r["clip_index"]), int(r["local_id"]))
        if key not in out:
            raise ValueError(f"embedding of unknown clip instance {key}")
        out[key].embedding = np.asarray(r["embedding"], dtype=np.float64)
    return sorted(out.values(), key=lambda c: (c.clip, c.first_time, c.local))


def mark_occluded_bottoms(sightings: Iterable[dict[int, Obs]], margin: float = 2.0) -> None:
    """Mark the sightings (``Obs.occluder_bottom``) whose box ends where another instance's box
    begins, the other spanning its width and reaching lower in the image: an object standing
    nearer, in front, hides its foot, and a ground contact read at this box's bottom lies too far.
    ``sightings``: each instance's sample index -> sighting, for all the instances of one video,
    whatever their concepts; marked in place."""
    by_sample: dict[int, list[tuple[int, Obs]]] = {}
    per_instance = list(sightings)
    for i, samples in enumerate(per_instance):
        for k, o in samples.items():
            by_sample.setdefault(k, []).append((i, o))
    for k, seen in by_sample.items():
        for i, o in seen:
            x0, _, x1, bottom = o.box
            covers = [
                b.box[3]
                for j, b in seen
                if j != i
                and b.box[0] <= x0 + margin
                and b.box[2] >= x1 - margin
                and abs(b.box[1] - bottom) <= margin
                and b.box[3] > bottom + margin
            ]
            occluder = max(covers) if covers else None
            if occluder != o.occluder_bottom:
                per_instance[i][k] = replace(o, occluder_bottom=occluder)


def box_iou(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0
