"""Instances: clip splitting, instance masks as COCO RLE, and cross-clip reconciliation.

The paper (A.2.1) runs SAM3 with the kept concepts as text prompts on the video at 2 FPS, split
into non-overlapping 5-minute clips processed independently (GPU memory), and reconciles repeated
instances across clips by hand. Here reconciliation *proposes* merges automatically and records
every decision (``schema.MERGE_DECISIONS``) so that a human can overrule it with a fix:

- **boundary continuity**: an instance seen in the last sample of a clip and one seen in the first
  sample of the next, with overlapping boxes, are one object crossing the cut;
- **position** (where poses exist): the instance's world position, triangulated from the rays
  through its box centres, agrees (distance relative to the viewing range);
- **appearance**: hue/saturation/value histograms of the masked pixels agree.

Constraint: a global instance holds at most one clip-local instance per clip (the segmenter said
those are different objects), so two objects seen together are never merged. Revisits of a place
link back to the first visit by position and appearance, so they do not inflate counts. Merges go
strongest evidence first, except that between two clips a concept's instances are paired one to
one by the best total score (``best_pairings``) before the other matches are tried.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import pycocotools.mask as mask_utils
from pydantic import BaseModel, ConfigDict, Field

SAMPLE_STEP = 0.5  # seconds between 2 FPS timestamps


class SegmentParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str = Field("sam3", description="segmenter backend: sam3 | groundtruth")
    clip_seconds: float = Field(300.0, gt=0, description="length of the independently segmented clips")
    min_score: float = Field(0.3, ge=0, le=1, description="instance masks below this score are ignored")
    min_area: int = Field(16, ge=0, description="masks with fewer pixels are ignored")
    frame_max_width: int = Field(
        1920, ge=64, description="frames are downscaled to at most this width before segmentation"
    )


class ReconcileParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    boundary_iou: float = Field(0.3, ge=0, le=1, description="box IoU across a clip cut that links two instances")
    max_distance: float = Field(
        0.35, gt=0, description="triangulated positions closer than this fraction of the viewing range may merge"
    )
    min_appearance: float = Field(
        0.5, ge=0, le=1, description="appearance similarity (Bhattacharyya) needed besides a position match ..."
    )
    appearance_min_area: float = Field(
        1500.0, ge=0, description="... when both instances are this large (mean mask pixels): small masks' colours are unreliable"
    )
    appearance_only: float | None = Field(
        None, ge=0, le=1,
        description="appearance similarity that merges on its own when neither instance can be located "
        "(off by default: objects of one category often look alike)",
    )
    min_ray_spread_deg: float = Field(
        3.0, ge=0, description="an instance's rays must span at least this angle to be triangulated"
    )
    use_positions: bool = True
    level_views: bool = Field(
        True, description="views are level (360° videos usually are horizon-levelled): the ground is below each "
        "camera's own down axis, whatever the drift of the estimated pitch; false: below the cameras' mean down"
    )
    constellation_tol: float = Field(
        0.2, gt=0, description="revisits: instances within this fraction of the median viewing range align"
    )
    min_constellation: int = Field(
        4, ge=2, description="revisits: a layout alignment needs this many instances (of >= 2 concepts)"
    )
    max_layout_rotation_deg: float = Field(30.0, ge=0, description="revisits: pose drift this large at most")
    max_layout_shift: float = Field(
        1.0, ge=0, description="revisits: ... and a shift of at most this fraction of the median viewing range ..."
    )
    max_drift_per_distance: float = Field(
        0.05, ge=0, description="... plus this fraction of the distance walked between the two clips (pose drift)"
    )
    extent_weight: float = Field(
        0.5, ge=0, description="... plus this fraction of the objects' apparent width (ground contacts of a "
        "large object differ with the viewpoint)"
    )
    max_ray_distance: float = Field(
        0.25, gt=0, description="an instance that could not be located merges when its viewing rays pass this close"
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
    spans: dict[int, list[int]] = {}
    for k in range(n):
        spans.setdefault(clip_of_sample(k, clip_seconds), []).append(k)
    return [
        ClipSpan(i, i * clip_seconds, min((i + 1) * clip_seconds, duration_s), ks[0], len(ks))
        for i, ks in sorted(spans.items())
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


# --------------------------------------------------------------------------------- frames
class JpegFrames(Sequence):
    """A clip's frames as JPEG files, decoded on access: a FrameBatch's ``images`` for a whole
    clip without holding it in memory (and the folder a video segmenter can read directly)."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]]):
        self.paths = [Path(p) for p in paths]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i):  # type: ignore[override]
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
def clip_tables(video_id: str, clip_index: int, batch, records: Iterable, backend: str,
                params: SegmentParams) -> tuple[list[dict], list[dict]]:
    """Rows of schema.CLIP_SEGMENTS and schema.CLIP_INSTANCES from a segmenter's records."""
    seg_rows: list[dict] = []
    acc: dict[tuple[str, int], dict] = {}
    by_frame: dict[int, list] = {}
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
            if r.score < params.min_score or area < max(params.min_area, 1):
                continue
            ys, xs = np.nonzero(mask)
            box = (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))
            seg_rows.append({
                "video_id": video_id, "clip_index": clip_index, "sample_index": int(batch.sample_indices[pos]),
                "time": float(batch.times[pos]), "frame": int(batch.frame_indices[pos]), "fps": float(batch.fps),
                "concept": r.concept, "local_id": int(r.local_id),
                "x0": box[0], "y0": box[1], "x1": box[2], "y1": box[3], "area": area, "score": float(r.score),
                "image_width": int(w), "image_height": int(h), "mask_rle": encode_rle(mask), "backend": backend,
            })
            a = acc.setdefault((r.concept, int(r.local_id)), {
                "times": [], "areas": [], "scores": [], "hist": np.zeros(int(np.prod(HIST_BINS)))})
            a["times"].append(float(batch.times[pos]))
            a["areas"].append(area)
            a["scores"].append(float(r.score))
            a["hist"] += appearance_histogram(image, mask) * area
    inst_rows = []
    for (concept, lid), a in sorted(acc.items(), key=lambda kv: (min(kv[1]["times"]), kv[0])):
        hist = a["hist"] / max(a["hist"].sum(), 1e-12)
        inst_rows.append({
            "video_id": video_id, "clip_index": clip_index, "concept": concept, "local_id": lid,
            "first_time": min(a["times"]), "last_time": max(a["times"]), "n_observations": len(set(a["times"])),
            "mean_area": float(np.mean(a["areas"])), "mean_score": float(np.mean(a["scores"])),
            "appearance": hist.astype(np.float32).tolist(),
        })
    return seg_rows, inst_rows


# --------------------------------------------------------------------------------- positions
@dataclass
class Poses:
    """Camera poses of one video by 2 FPS sample index (from schema.POSES rows)."""

    R: dict[int, np.ndarray]  # world -> camera rotation
    C: dict[int, np.ndarray]  # camera centre (world)
    K: dict[int, np.ndarray]

    @classmethod
    def from_rows(cls, rows: Iterable[dict]) -> Poses:
        R, C, K = {}, {}, {}
        for r in rows:
            if not r["valid"]:
                continue
            E = np.asarray(r["extrinsics"], dtype=np.float64).reshape(3, 4)
            k = int(r["sample_index"])
            R[k] = E[:, :3]
            C[k] = -E[:, :3].T @ E[:, 3]
            K[k] = np.asarray(r["intrinsics"], dtype=np.float64).reshape(3, 3)
        return cls(R, C, K)

    def ray(self, k: int, u: float, v: float) -> tuple[np.ndarray, np.ndarray] | None:
        if k not in self.R:
            return None
        d_cam = np.linalg.solve(self.K[k], np.array([u, v, 1.0]))
        d = self.R[k].T @ d_cam
        return self.C[k], d / np.linalg.norm(d)

    def down(self) -> np.ndarray:
        """The world's down direction: the cameras' mean down axis (cameras are level on average)."""
        d = np.mean([R.T @ np.array([0.0, 1.0, 0.0]) for R in self.R.values()], axis=0)
        return d / max(np.linalg.norm(d), 1e-12)

    def ground_point(self, k: int, u: float, v: float, height: float, down: np.ndarray | None = None,
                     min_depression_deg: float = 1.0) -> np.ndarray | None:
        """Where the ray through pixel (u, v) meets the ground, ``height`` below camera k; None
        when the ray does not point below the horizon by at least ``min_depression_deg``.
        ``down``: the world's down direction; None: camera k's own down axis (a level view)."""
        r = self.ray(k, u, v)
        if r is None:
            return None
        c, d = r
        s = float(d @ (self.R[k].T @ np.array([0.0, 1.0, 0.0]) if down is None else down))
        if s < math.sin(math.radians(min_depression_deg)):
            return None
        return c + d * (height / s)


def triangulate(rays: Sequence[tuple[np.ndarray, np.ndarray]], min_spread_deg: float) -> tuple[np.ndarray, float] | None:
    """Least-squares point nearest to the rays, and its mean range; None when the rays are too
    parallel (the camera barely moved) or the point lies behind the cameras."""
    if len(rays) < 2:
        return None
    dirs = np.array([d for _, d in rays])
    mean = dirs.mean(axis=0)
    mean /= max(np.linalg.norm(mean), 1e-12)
    spread = np.degrees(np.arccos(np.clip(dirs @ mean, -1, 1))).max() * 2
    if spread < min_spread_deg:
        return None
    A = np.zeros((3, 3))
    b = np.zeros(3)
    for c, d in rays:
        P = np.eye(3) - np.outer(d, d)
        A += P
        b += P @ c
    try:
        X = np.linalg.solve(A, b)
    except np.linalg.LinAlgError:
        return None
    depths = np.array([(X - c) @ d for c, d in rays])
    if np.median(depths) <= 0:
        return None
    return X, float(np.mean([np.linalg.norm(X - c) for c, _ in rays]))


# --------------------------------------------------------------------------------- reconciliation
@dataclass(frozen=True)
class Obs:
    time: float
    box: tuple[float, float, float, float]
    area: int
    frame: int
    fps: float
    size: tuple[int, int] = (0, 0)  # image width, height of the box's pixels

    def clipped(self, margin: float = 2.0) -> bool:
        """The box touches the image border: the object is cut off, its box centre is biased."""
        w, h = self.size
        x0, y0, x1, y1 = self.box
        return w > 0 and (x0 <= margin or y0 <= margin or x1 >= w - margin or y1 >= h - margin)


@dataclass
class ClipInstance:
    clip: int
    local: int
    concept: str
    first_time: float
    last_time: float
    appearance: np.ndarray
    mean_area: float = 0.0
    samples: dict[int, Obs] = field(default_factory=dict)  # sample index -> observation
    position: np.ndarray | None = None
    range: float | None = None
    extent: float = 0.0  # apparent width in pose units (how far apart two sightings' ground contacts may be)

    @property
    def key(self) -> tuple[int, int]:
        return (self.clip, self.local)


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


@dataclass
class Reconciled:
    members: list[dict]  # schema.INSTANCE_MEMBERS rows
    decisions: list[dict]  # schema.MERGE_DECISIONS rows
    observations: list[dict]  # schema.OBSERVATIONS rows
    positions: dict[int, tuple[float, float, float]]  # instance id -> world position


def load_clip_instances(instance_rows: Iterable[dict], segment_rows: Iterable[dict]) -> list[ClipInstance]:
    out: dict[tuple[int, int], ClipInstance] = {}
    for r in instance_rows:
        ci = ClipInstance(int(r["clip_index"]), int(r["local_id"]), r["concept"], float(r["first_time"]),
                          float(r["last_time"]), np.asarray(r["appearance"], dtype=np.float64), float(r.get("mean_area") or 0.0))
        out[ci.key] = ci
    for r in segment_rows:
        key = (int(r["clip_index"]), int(r["local_id"]))
        if key not in out:
            raise ValueError(f"segment of unknown clip instance {key}")
        out[key].samples[int(r["sample_index"])] = Obs(float(r["time"]), (r["x0"], r["y0"], r["x1"], r["y1"]),
                                                       int(r["area"]), int(r["frame"]), float(r["fps"]),
                                                       (int(r["image_width"]), int(r["image_height"])))
    return sorted(out.values(), key=lambda c: (c.clip, c.first_time, c.local))


def _rays(samples: dict, poses: Poses) -> list:
    """Rays through the box centres; boxes cut off by the image border are left out when at least
    two others remain (their centres are biased towards the image)."""
    whole = {k: o for k, o in samples.items() if not o.clipped()}
    if len(whole) >= 2:
        samples = whole
    rays = []
    for k, o in sorted(samples.items()):
        box = o.box
        r = poses.ray(k, (box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0)
        if r is not None:
            rays.append(r)
    return rays


def ground_basis(poses: Poses) -> np.ndarray:
    """(2, 3): two world axes spanning the ground plane (orthogonal to the cameras' mean down axis)."""
    down = np.mean([R.T @ np.array([0.0, 1.0, 0.0]) for R in poses.R.values()], axis=0)
    down /= max(np.linalg.norm(down), 1e-12)
    a = np.array([1.0, 0.0, 0.0]) if abs(down[0]) < 0.9 else np.array([0.0, 0.0, 1.0])
    e1 = a - (a @ down) * down
    e1 /= np.linalg.norm(e1)
    return np.stack([e1, np.cross(down, e1)])


def _similarity_2d(a1, a2, b1, b2) -> tuple[complex, complex] | None:
    da = complex(*(a2 - a1))
    if abs(da) < 1e-9:
        return None
    m = complex(*(b2 - b1)) / da
    return m, complex(*b1) - m * complex(*a1)


def align_layouts(A: list[ClipInstance], B: list[ClipInstance], basis: np.ndarray, tol: float,
                  min_inliers: int, max_rot_deg: float = 180.0, max_shift: float = math.inf) -> tuple[complex, complex] | None:
    """The ground-plane similarity (z -> m z + t, complex) that lays clip A's instances onto clip
    B's (same concepts), found by exhaustive 2-correspondence RANSAC; None unless it aligns at
    least ``min_inliers`` instances of at least two concepts within ``tol``. This recognises a
    revisited place by its layout of objects, whatever the pose drift since the first visit."""
    pa_ = [(c, basis @ c.position) for c in A if c.position is not None]
    pb_ = [(c, basis @ c.position) for c in B if c.position is not None]
    corr = [(i, j) for i, (ca, _) in enumerate(pa_) for j, (cb, _) in enumerate(pb_) if ca.concept == cb.concept]
    if len(corr) < 2:
        return None
    za = np.array([complex(*p) for _, p in pa_])
    zb = np.array([complex(*p) for _, p in pb_])

    def inliers(m, t):
        d = np.abs(m * za[[i for i, _ in corr]] + t - zb[[j for _, j in corr]])
        used_a, used_b, inl, err = set(), set(), [], 0.0
        for k in np.argsort(d, kind="stable"):
            i, j = corr[k]
            if d[k] > tol:
                break
            if i in used_a or j in used_b:
                continue
            used_a.add(i)
            used_b.add(j)
            inl.append(k)
            err += d[k]
        return inl, err

    # An alignment must explain clearly more than the poses as they are (no alignment at all).
    as_is = len(inliers(1.0, 0.0)[0])
    best, best_key = None, None
    for x in range(len(corr)):
        for y in range(x + 1, len(corr)):
            (i1, j1), (i2, j2) = corr[x], corr[y]
            if i1 == i2 or j1 == j2:
                continue
            sim = _similarity_2d(np.array([za[i1].real, za[i1].imag]), np.array([za[i2].real, za[i2].imag]),
                                 np.array([zb[j1].real, zb[j1].imag]), np.array([zb[j2].real, zb[j2].imag]))
            if sim is None or not 0.8 <= abs(sim[0]) <= 1.25:
                continue
            m, t = sim
            if abs(math.degrees(np.angle(m))) > max_rot_deg:
                continue
            centre = za[[i for i, _ in corr]].mean()
            if abs(m * centre + t - centre) > max_shift:
                continue
            inl, err = inliers(m, t)
            concepts = {pa_[corr[k][0]][0].concept for k in inl}
            key = (len(inl), -err)
            if (len(inl) >= max(min_inliers, as_is + 2) and len(concepts) >= 2
                    and (best_key is None or key > best_key)):
                best, best_key = (m, t, inl), key
    if best is None:
        return None
    # least-squares similarity over the inliers (z_b ~ m z_a + t)
    m, t, inl = best
    A = za[[corr[k][0] for k in inl]]
    B = zb[[corr[k][1] for k in inl]]
    ca, cb = A.mean(), B.mean()
    den = (np.abs(A - ca) ** 2).sum()
    if den > 1e-12:
        m2 = ((B - cb) * np.conj(A - ca)).sum() / den
        if 0.8 <= abs(m2) <= 1.25:
            m, t = m2, cb - m2 * ca
    return m, t


def _walked(poses: Poses):
    """distance(k0, k1): path length of the camera between two samples (pose units)."""
    ks = sorted(poses.C)
    cum = np.concatenate([[0.0], np.cumsum([np.linalg.norm(poses.C[b] - poses.C[a]) for a, b in zip(ks, ks[1:])])])
    idx = np.array(ks)

    def distance(k0: int, k1: int) -> float:
        i0, i1 = np.searchsorted(idx, [k0, k1])
        i0, i1 = min(i0, len(cum) - 1), min(i1, len(cum) - 1)
        return float(abs(cum[i1] - cum[i0]))

    return distance


def _ray_gap(lone: ClipInstance, placed: ClipInstance, poses: Poses, basis: np.ndarray,
             sim: tuple[complex, complex] | None, lone_is_later: bool) -> float | None:
    """Median ground-plane distance from ``placed``'s position to ``lone``'s viewing rays, over
    ``placed``'s range. ``sim`` maps the earlier clip's ground plane onto the later one's."""
    rays = _rays(lone.samples, poses)
    if not rays:
        return None
    p = basis @ placed.position
    if sim is not None:
        m, t = sim
        z = complex(*p)
        z = (z - t) / m if lone_is_later is False else m * z + t  # into the lone instance's frame
        p = np.array([z.real, z.imag])
    gaps = []
    for c, d in rays:
        c2, d2 = basis @ c, basis @ d
        nd = np.linalg.norm(d2)
        if nd < 1e-9:
            continue
        d2 = d2 / nd
        along = (p - c2) @ d2
        gaps.append(np.linalg.norm(p - c2 - max(along, 0.0) * d2))
    if not gaps:
        return None
    return float(np.median(gaps)) / max(placed.range, 1e-9)


def locate(samples: dict[int, Obs], poses: Poses, camera_height: float | None, min_spread_deg: float,
           level: bool = True) -> tuple[np.ndarray, float] | None:
    """World position and viewing range of an object from its sightings: where it meets the
    ground when the camera height is known, else by triangulation; None when neither works.
    ``level``: the views are level (the ground plane is below each camera's own down axis, which
    is immune to drift of the estimated pitch); else the ground is below the cameras' mean down."""
    if camera_height:
        loc = ground_contact(samples, poses, camera_height, None if level else poses.down())
        if loc is not None:
            return loc
    return triangulate(_rays(samples, poses), min_spread_deg)


def ground_contact(samples: dict[int, Obs], poses: Poses, height: float, down: np.ndarray | None,
                   min_depression_deg: float = 1.0) -> tuple[np.ndarray, float] | None:
    """An object standing on the ground, located from single frames: the bottom centre of its box
    is where it meets the ground, and the ground lies ``height`` (the camera's height, in pose
    units) below the camera. Median over the observations whose box bottom is not cut off by the
    image; with the mean range from the cameras."""
    pts, ranges = [], []
    for k, o in sorted(samples.items()):
        w, h = o.size
        if h and o.box[3] >= h - 2:
            continue
        X = poses.ground_point(k, (o.box[0] + o.box[2]) / 2.0, o.box[3], height, down, min_depression_deg)
        if X is not None:
            pts.append(X)
            ranges.append(float(np.linalg.norm(X - poses.C[k])))
    if not pts:
        return None
    # The error grows with the square of the distance: keep the nearer half of the sightings.
    order = np.argsort(ranges, kind="stable")[: max(1, (len(pts) + 1) // 2)]
    return np.median(np.array(pts)[order], axis=0), float(np.median(np.array(ranges)[order]))


def best_pairings(proposals: Iterable[tuple[float, ClipInstance, ClipInstance, bool]]) -> set[tuple]:
    """The (a.key, b.key) of merge proposals (score, a, b, continues; a in the earlier clip) to
    make first: every object that continues across a cut, then, per concept and pair of clips, the
    position matches that pair the remaining instances one to one with the highest total score.
    Taken one at a time by score, the single closest pair can take the partner of another instance
    and leave both others unpaired (two trash cans side by side, with the poses off by a few % of
    the range: each a near match for either)."""
    chosen: set[tuple] = set()
    groups: dict[tuple, list[tuple[float, ClipInstance, ClipInstance]]] = {}
    for score, a, b, continues in proposals:
        if continues:
            chosen.add((a.key, b.key))
        elif score > 0:
            groups.setdefault((a.concept, a.clip, b.clip), []).append((score, a, b))
    from scipy.optimize import linear_sum_assignment

    linked = {k for pair in chosen for k in pair}
    for _, group in sorted(groups.items()):
        group = [(score, a, b) for score, a, b in group if a.key not in linked and b.key not in linked]
        if len(group) <= 1:
            chosen |= {(a.key, b.key) for _, a, b in group}
            continue
        rows = sorted({a.key for _, a, _ in group})
        cols = sorted({b.key for _, _, b in group})
        gain = np.zeros((len(rows), len(cols)))
        for score, a, b in group:
            gain[rows.index(a.key), cols.index(b.key)] = score
        r_, c_ = linear_sum_assignment(gain, maximize=True)
        chosen |= {(rows[r], cols[c]) for r, c in zip(r_, c_) if gain[r, c] > 0}
    return chosen


def reconcile(video_id: str, instances: list[ClipInstance], clips: Sequence[ClipSpan], params: ReconcileParams,
              poses: Poses | None = None, camera_height: float | None = None) -> Reconciled:
    """Link clip-local instances across clips into global instances (see the module docstring).

    ``camera_height``: the camera's height above the ground in the poses' units; when given,
    instances are located where they meet the ground (single frames suffice), else by
    triangulating the rays through their box centres (needs parallax)."""
    last_sample = {c.index: c.first_sample + c.n_samples - 1 for c in clips}
    first_sample = {c.index: c.first_sample for c in clips}
    aligned: dict[tuple[int, int], tuple[complex, complex]] = {}
    basis = None
    walked = _walked(poses) if poses is not None and params.use_positions and poses.R else None
    if poses is not None and params.use_positions and poses.R:
        for ci in instances:
            loc = locate(ci.samples, poses, camera_height, params.min_ray_spread_deg, params.level_views)
            if loc is not None:
                ci.position, ci.range = loc
                widths = [(o.box[2] - o.box[0]) / poses.K[k][0, 0] for k, o in ci.samples.items()
                          if k in poses.K and not o.clipped()]
                ci.extent = ci.range * float(np.median(widths)) if widths else 0.0
        ranges = [ci.range for ci in instances if ci.range is not None]
        if ranges:
            basis = ground_basis(poses)
            tol = params.constellation_tol * float(np.median(ranges))
            by_clip: dict[int, list[ClipInstance]] = {}
            for ci in instances:
                by_clip.setdefault(ci.clip, []).append(ci)
            for i in sorted(by_clip):
                for j in sorted(by_clip):
                    if j > i:  # neighbours too: a fast turn between them may have left the poses off
                        dist_walked = walked(last_sample[i], first_sample[j])
                        shift = params.max_layout_shift * float(np.median(ranges)) + params.max_drift_per_distance * dist_walked
                        sim = align_layouts(by_clip[i], by_clip[j], basis, tol, params.min_constellation,
                                            params.max_layout_rotation_deg, shift)
                        if sim is not None:
                            aligned[(i, j)] = sim
    by_concept: dict[str, list[ClipInstance]] = {}
    for ci in instances:
        by_concept.setdefault(ci.concept, []).append(ci)

    proposals = []  # (score, a, b, evidence)
    rays = []  # pairs where one instance could not be located: compared by viewing rays
    for concept, items in sorted(by_concept.items()):
        for i, a in enumerate(items):
            for b in items[i + 1:]:
                if a.clip == b.clip:
                    continue
                if a.clip > b.clip:
                    a, b = b, a
                boundary = (b.clip == a.clip + 1 and last_sample[a.clip] in a.samples
                            and first_sample[b.clip] in b.samples)
                iou = _iou(a.samples[last_sample[a.clip]].box, b.samples[first_sample[b.clip]].box) if boundary else None
                app = bhattacharyya(a.appearance, b.appearance)
                looks_differ = (app < params.min_appearance
                                and min(a.mean_area, b.mean_area) >= params.appearance_min_area)
                dist, located, drift, used_layout = None, "positions", 0.0, False
                if (a.position is None) != (b.position is None) and basis is not None:
                    # one of them was not triangulated: do its viewing rays pass the other's position?
                    lone, placed = (a, b) if a.position is None else (b, a)
                    dist = _ray_gap(lone, placed, poses, basis, aligned.get((a.clip, b.clip)), lone is b)
                    located = "rays"
                elif a.position is not None and b.position is not None:
                    rng_ = max((a.range + b.range) / 2.0, 1e-9)
                    # a large object's ground contact moves with the viewpoint (near edge vs far edge)
                    size = params.extent_weight * (a.extent + b.extent) / 2.0 / rng_
                    # raw positions: the poses drift with the distance walked between the sightings
                    dist = float(np.linalg.norm(basis @ (a.position - b.position))) / rng_
                    drift = size + (params.max_drift_per_distance * walked(max(a.samples), min(b.samples)) / rng_
                                    if walked is not None else 0.0)
                    used_layout = False
                    if (a.clip, b.clip) in aligned:  # or after aligning the two clips' layouts, if closer
                        m, t = aligned[(a.clip, b.clip)]
                        za, zb = complex(*(basis @ a.position)), complex(*(basis @ b.position))
                        d2 = abs(m * za + t - zb) / rng_
                        if d2 / (params.max_distance + size) < dist / (params.max_distance + drift):
                            dist, drift, used_layout = d2, size, True
                if boundary and iou >= params.boundary_iou:
                    score, why = 3.0 + iou, f"continues across the cut (box IoU {iou:.2f})"
                elif dist is not None:
                    how = ("" if located == "positions" else " by viewing rays") + (
                        " after aligning the two clips' layouts" if used_layout else "")
                    limit = params.max_distance + drift if located == "positions" else params.max_ray_distance
                    if dist <= limit and not looks_differ:
                        score = (2.0 if located == "positions" else 1.5) + (1.0 - dist / limit) / 2
                        why = f"same place{how} (distance {dist:.2f} of range) and look (appearance {app:.2f})"
                    else:
                        score, why = 0.0, (f"distance{how} {dist:.2f} (max {limit:.2f})" if dist > limit else
                                           f"same place{how} (distance {dist:.2f}) but the looks differ "
                                           f"(appearance {app:.2f} < {params.min_appearance})")
                elif params.appearance_only is not None and app >= params.appearance_only:
                    score, why = 1.0 + app / 2, f"same look (appearance {app:.2f}), neither could be located"
                else:
                    score, why = 0.0, f"appearance {app:.2f}, neither could be located"
                if located == "rays" and dist is not None and not (boundary and iou >= params.boundary_iou):
                    # weak evidence: settled after the strong merges, as an assignment (below)
                    rays.append((a, b, boundary, iou, app, dist, why))
                    continue
                relevant = (boundary or (dist is not None and dist <= 2 * (params.max_distance + drift))
                            or (params.appearance_only is not None and app >= params.appearance_only))
                if relevant:
                    proposals.append((score, a, b, boundary, iou, app, dist, why))

    # Union-find over clip instances; strongest evidence first (deterministic tie-break on keys).
    parent = {ci.key: ci.key for ci in instances}
    clips_of = {ci.key: {ci.clip} for ci in instances}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(ra, rb):
        root, child = (ra, rb) if ra < rb else (rb, ra)
        parent[child] = root
        clips_of[root] |= clips_of.pop(child)

    decisions = []

    def decide(a, b, boundary, iou, app, dist, score, decision, why):
        decisions.append({
            "video_id": video_id, "concept": a.concept, "clip_a": a.clip, "local_a": a.local, "clip_b": b.clip,
            "local_b": b.local, "boundary": bool(boundary), "box_iou": iou, "appearance": app, "distance": dist,
            "score": float(score), "decision": decision, "reason": why,
        })

    paired = best_pairings([(score, a, b, bool(boundary and iou >= params.boundary_iou))
                            for score, a, b, boundary, iou, *_ in proposals])
    for score, a, b, boundary, iou, app, dist, why in sorted(
            proposals, key=lambda p: ((p[1].key, p[2].key) not in paired, -p[0], p[1].key, p[2].key)):
        ra, rb = find(a.key), find(b.key)
        if score <= 0:
            decision = "apart"
        elif ra == rb:
            decision, why = "merge", why + " (already joined)"
        elif clips_of[ra] & clips_of[rb]:
            decision, why = "blocked", why + "; would join two instances of one clip" + (
                "" if (a.key, b.key) in paired else
                f" (the best one-to-one pairing of clips {a.clip} and {b.clip} pairs them otherwise)")
        else:
            decision = "merge"
            union(ra, rb)
        decide(a, b, boundary, iou, app, dist, score, decision, why)

    # Instances that could not be located (seen briefly, or without parallax) join the located
    # instance their viewing rays pass closest to. Several of them in one clip are assigned
    # jointly (each to a different instance), so that one wrong guess cannot push another out.
    located = {find(ci.key) for ci in instances if ci.position is not None}
    lone_sets: dict[tuple[int, str], dict] = {}
    for a, b, boundary, iou, app, dist, why in rays:
        lone, placed = (a, b) if a.position is None else (b, a)
        lone_sets.setdefault((lone.clip, lone.concept), {}).setdefault(lone.key, []).append(
            (placed, a, b, boundary, iou, app, dist, why))
    for (clip, concept), by_lone in sorted(lone_sets.items()):
        lones = [k for k in sorted(by_lone) if find(k) not in located]
        cols: list = []
        cost: dict[tuple[int, int], tuple] = {}
        for li, k in enumerate(lones):
            for entry in by_lone[k]:
                placed, a, b, boundary, iou, app, dist, why = entry
                g = find(placed.key)
                if clips_of[g] & clips_of[find(k)]:
                    continue
                if app < params.min_appearance and min(a.mean_area, b.mean_area) >= params.appearance_min_area:
                    continue
                if g not in cols:
                    cols.append(g)
                gi = cols.index(g)
                if (li, gi) not in cost or dist < cost[(li, gi)][0]:
                    cost[(li, gi)] = (dist, entry)
        chosen: set[tuple[int, int]] = set()
        if cost:
            from scipy.optimize import linear_sum_assignment

            big = 1e6
            M = np.full((len(lones), len(cols)), big)
            for (li, gi), (d, _) in cost.items():
                if d <= params.max_ray_distance:
                    M[li, gi] = d
            rows_, cols_ = linear_sum_assignment(M)
            chosen = {(int(r), int(c)) for r, c in zip(rows_, cols_) if M[r, c] < big}
        for li, k in enumerate(lones):
            for entry in by_lone[k]:
                placed, a, b, boundary, iou, app, dist, why = entry
                gi = cols.index(find(placed.key)) if find(placed.key) in cols else None
                best = gi is not None and (li, gi) in chosen and cost[(li, gi)][1] is entry
                note = f" (joint assignment of {len(lones)} unlocated {concept!r} of clip {clip})" if len(lones) > 1 else ""
                if best:
                    union(find(k), find(placed.key))
                    decide(a, b, boundary, iou, app, dist, 1.0 + (1.0 - dist / params.max_ray_distance) / 2, "merge",
                           why + note)
                else:
                    decide(a, b, boundary, iou, app, dist, 0.0, "apart",
                           why if dist > params.max_ray_distance else why + "; another pairing was closer" + note)

    groups: dict[tuple[int, int], list[ClipInstance]] = {}
    for ci in instances:
        groups.setdefault(find(ci.key), []).append(ci)
    ordered = sorted(groups.values(), key=lambda g: (min(c.first_time for c in g), g[0].concept, min(c.key for c in g)))
    members, observations, positions = [], [], {}
    for gid, g in enumerate(ordered, start=1):
        merged_samples: dict[int, tuple] = {}
        for ci in sorted(g, key=lambda c: c.key):
            members.append({
                "video_id": video_id, "instance_id": gid, "concept": ci.concept, "clip_index": ci.clip,
                "local_id": ci.local, "first_time": ci.first_time, "last_time": ci.last_time,
            })
            merged_samples.update(ci.samples)
        for k, o in sorted(merged_samples.items()):
            observations.append({
                "video_id": video_id, "instance_id": gid, "concept": g[0].concept, "sample_index": k, "time": o.time,
                "frame": o.frame, "fps": o.fps, "x0": o.box[0], "y0": o.box[1], "x1": o.box[2], "y1": o.box[3],
                "area": o.area, "origin": "auto",
            })
        if poses is not None and params.use_positions and poses.R:
            loc = locate(merged_samples, poses, camera_height, params.min_ray_spread_deg, params.level_views)
            if loc is not None:
                positions[gid] = tuple(float(x) for x in loc[0])
    return Reconciled(members, decisions, observations, positions)
