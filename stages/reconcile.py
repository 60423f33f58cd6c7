"""Cross-clip reconciliation: clip-local instances linked into a video's global instances.

The paper (A.2.1) segments each 5-minute clip independently (``stages.segment``) and reconciles
repeated instances across clips by hand. Here reconciliation *proposes* merges automatically
(``Proposal``) and records every decision (``schema.MERGE_DECISIONS``) so that a human can
overrule it with a fix. The evidence for two instances of one concept in different clips:

- **boundary continuity**: an instance seen in the last sample of a clip and one seen in the first
  sample of the next, with overlapping boxes, are one object crossing the cut;
- **position** (where poses exist): the instance's world position, triangulated from the rays
  through its box centres, agrees (distance relative to the viewing range);
- **appearance**: hue/saturation/value histograms of the masked pixels agree.

Constraint: a global instance holds at most one clip-local instance per clip (the segmenter said
those are different objects), so two objects seen together are never merged. Objects of one
category often look identical, so a position match is only decisive well inside its limit
(``decisive_fraction``): a weaker one leaves the two apart and records the pair as a proposal for
the reviewer (decision ``review``; `vsi-wild verify` lists them, a ``merge`` fix joins them), as a
false merge would silently undercount VOC. So is a match between instances located too loosely
for their distance to mean anything (``Location.sigma``: an object seen once from far away, or one
whose foot a nearer object hides, ``mark_occluded_bottoms``; one seen only in part, every box of
it cut off by the image's side, ``ClipInstance.seen_in_part``), a match of two instances each
seen in one sample (nothing checks either place), and the match of an instance seen once that
could not be located (one viewing ray: a direction, no distance; a ray below the horizon reaches
no farther than the ground, ``_ray_gap``). Revisits of a place link back to the first visit by
position and appearance, so they do not inflate counts; between two clips whose layouts align,
every pair is measured after the alignment.

``reconcile`` runs in phases: mark the sightings whose foot is hidden (``mark_occluded_bottoms``),
locate the instances (``locate_instances``), align the layouts of revisited places
(``align_clips``), weigh every pair (``propose``), merge the strong proposals strongest evidence
first, except that between two clips a concept's instances are paired one to one by the closest
total (``best_pairings``) before the other matches are tried, and a pairing that a look-alike
could take as well is left for review (``ambiguous_pairings``; ``merge_proposals``), as is a merge
that would also join two instances that their own pair measures apart or leaves in doubt
(``_implied_against``: merging is transitive, the evidence must hold for every pair) or that a
third instance as near to one of the two contradicts (``_nearer_elsewhere``), join the
instances that could not be located by their viewing rays (``assign_unlocated``), and number the
global instances (``global_instances``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import linear_sum_assignment

from vsi_wild.stages.pose import Track
from vsi_wild.stages.segment import ClipSpan, bhattacharyya


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
        4, ge=2, description="revisits: a layout alignment needs this many instances (of >= 2 concepts; two more "
        "than the poses as they are match, and three they do not: any two define an alignment)"
    )
    constellation_holdout: float = Field(
        5.0, gt=0, description="revisits: ... each of which the alignment fitted without it lays within this many "
        "constellation_tol of its match (objects near each other fix a shift, hardly a rotation: one far look-alike "
        "can swing an alignment about them onto itself; bench seeds 1-76: true alignments need up to 3.9, the two "
        "such chance alignments 6.7 and 12.1)"
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
    decisive_fraction: float = Field(
        0.5, gt=0, le=1, description="a position match farther apart than this fraction of its limit is too weak to "
        "tell look-alikes apart: the pair is left apart and recorded for a reviewer (decision `review`)"
    )
    pixel_error: float = Field(
        1.0, ge=0, description="how far (pixels) a box edge or centre may be off, the poses' tilt errors included: an "
        "instance's location uncertainty is what this error moves its position by (a ground contact seen far away "
        "moves by range^2 / (height x focal) per pixel), with the spread of its per-sighting positions"
    )
    rival_sigmas: float = Field(
        1.5, ge=0, description="a one-to-one pairing by position is decisive only when the best pairing that "
        "leaves the two apart is worse by this many location uncertainties of the pair: else a look-alike "
        "nearly as close could be the one (the pairs are left for a reviewer)"
    )
    location_sigmas: float = Field(
        3.5, ge=0, description="a position match is decisive only when this many location uncertainties of the pair "
        "(both instances', over the range) fit within its limit: else a look-alike could be where the match is (the "
        "errors have long tails: a tenth of the located instances are over 5 of their uncertainties off, "
        "bench/location_error.py; 3 merged a bench's part, seen once 4 m away, with a look-alike at 3.1)"
    )
    part_error: float = Field(
        2.0, ge=1, description="an instance seen only in part (every box of it cut off by the image's side or "
        "bottom) is located this many times as loosely as its pixels say: where a part's box ends and centres is not "
        "where the object stands (bench/location_error.py on bench seeds 1-36, at the median: 1.8 times the errors of "
        "instances never cut off for those cut off at the side, 3.6 times for the others; 3.6 for those added 32 "
        "false splits on seeds 1-108 and changed no false merge)"
    )



# --------------------------------------------------------------------------------- instances
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
    """An instance as one clip's segmenter gave it; the positions phase fills in where it is."""

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
    sigma: float = 0.0  # location uncertainty in pose units (``Location.sigma``)

    @property
    def key(self) -> tuple[int, int]:
        return (self.clip, self.local)

    @property
    def seen_in_part(self) -> bool:
        """Every box of it is cut off by the image's side or bottom: only parts of the object were
        seen, and where a part's box ends and centres is not where the object stands (a bench's end,
        5 x 7 pixels at the border, was placed 3.6 m from itself, 5 of its location uncertainties,
        beside a look-alike; a bench seen 3 m from the camera, its foot below the image, was
        triangulated 12 m from itself, onto a look-alike: ``ReconcileParams.part_error``)."""
        return bool(self.samples) and all(o.cut_at_side() or o.cut_at_bottom() for o in self.samples.values())


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


def mark_occluded_bottoms(sightings: Iterable[dict[int, Obs]], margin: float = 2.0) -> None:
    """Mark the sightings (``Obs.occluder_bottom``) whose box ends where another instance's box
    begins, the other spanning its width and reaching lower in the image: an object standing
    nearer, in front, hides its foot. Such a box's bottom is the occluder's top, and a ground
    contact read there lies too far away (a hydrant behind a beach ball, seen once, was placed 3 m
    beyond itself, beside a look-alike). ``sightings``: each instance's sample index -> sighting,
    for all the instances of one video, whatever their concepts; marked in place."""
    by_sample: dict[int, list[tuple[int, Obs]]] = {}
    per_instance = list(sightings)
    for i, samples in enumerate(per_instance):
        for k, o in samples.items():
            by_sample.setdefault(k, []).append((i, o))
    for k, seen in by_sample.items():
        for i, o in seen:
            x0, _, x1, bottom = o.box
            covers = [b.box[3] for j, b in seen if j != i and b.box[0] <= x0 + margin
                      and b.box[2] >= x1 - margin and abs(b.box[1] - bottom) <= margin and b.box[3] > bottom + margin]
            occluder = max(covers) if covers else None
            if occluder != o.occluder_bottom:
                per_instance[i][k] = replace(o, occluder_bottom=occluder)


# --------------------------------------------------------------------------------- positions
class Location(NamedTuple):
    """Where an instance is: its world position, mean viewing range and location uncertainty (pose
    units: how far ``pixel_error`` moves the position, combined with the spread of the sightings)."""

    position: np.ndarray
    range: float
    sigma: float


def triangulate(rays: Sequence[tuple[np.ndarray, np.ndarray]], min_spread_deg: float,
                angle_error: float = 0.0) -> Location | None:
    """Least-squares point nearest to the rays, and its mean range; None when the rays are too
    parallel (the camera barely moved) or the point lies behind the cameras. ``angle_error``
    (radians) is how far a ray may be off: the uncertainty follows the rays' geometry (nearly
    parallel rays leave the depth loose), with the rays' own misses of the point."""
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
    ranges = [float(np.linalg.norm(X - c)) for c, _ in rays]
    # a ray off by angle_error misses by range x angle_error: weigh each ray's projector by it
    W = sum((np.eye(3) - np.outer(d, d)) / max(r, 1e-9) ** 2 for (_, d), r in zip(rays, ranges))
    misses = [float(np.linalg.norm((np.eye(3) - np.outer(d, d)) @ (X - c))) for c, d in rays]
    try:
        geometric = angle_error ** 2 * float(np.trace(np.linalg.inv(W)))
    except np.linalg.LinAlgError:
        geometric = math.inf
    return Location(X, float(np.mean(ranges)), math.sqrt(geometric + float(np.mean(np.square(misses))) / len(rays)))


def _rays(samples: dict, poses: Track) -> list:
    """Rays (centre, direction) through the box centres; boxes cut off by the image border are left
    out when at least two others remain (their centres are biased towards the image)."""
    return [r for _, r in _sample_rays(samples, poses)]


def _sample_rays(samples: dict, poses: Track) -> list[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """``_rays`` with the sample index of each."""
    whole = {k: o for k, o in samples.items() if not o.clipped()}
    if len(whole) >= 2:
        samples = whole
    rays = []
    for k, o in sorted(samples.items()):
        box = o.box
        r = poses.ray(k, (box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0)
        if r is not None:
            rays.append((k, r))
    return rays


def ground_basis(poses: Track) -> np.ndarray:
    """(2, 3): two world axes spanning the ground plane (orthogonal to the cameras' mean down axis)."""
    down = poses.down()
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


class Alignment(NamedTuple):
    """A ground-plane similarity z -> m z + t (complex) that lays one clip's layout onto another's,
    and how many aligned objects it has beyond the least it needs."""

    m: complex
    t: complex
    spare: int  # aligned objects beyond the least it needs (``align_layouts``)

    @property
    def decisive(self) -> bool:
        """Aligned objects to spare: with exactly as many as it needs, the alignment may be a chance
        layout of look-alikes (bench seed 120: a 29 degree turn laid four objects of three concepts,
        none of them the same, each within tolerance of a look-alike 5-21 m from it), so the pairs
        it lays together are left for review rather than merged."""
        return self.spare > 0


def align_layouts(A: list[ClipInstance], B: list[ClipInstance], basis: np.ndarray, tol: float,
                  min_inliers: int, max_rot_deg: float = 180.0, max_shift: float = math.inf,
                  holdout_tol: float | None = None) -> Alignment | None:
    """The ground-plane similarity (``Alignment``) that lays clip A's instances onto clip B's
    (same concepts), found by exhaustive 2-correspondence RANSAC; None unless it aligns at least
    ``min_inliers`` instances of at least two concepts within ``tol``: two more than the poses as
    they are, three of them objects those do not match, and (with ``holdout_tol``) each laid within
    ``holdout_tol`` of its match by the alignment fitted without it. This recognises a revisited
    place by its layout of objects, whatever the pose drift since the first visit."""
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
    as_is_inliers = inliers(1.0, 0.0)[0]
    need = max(min_inliers, len(as_is_inliers) + 2)
    matched_as_is = {corr[k][0] for k in as_is_inliers}  # A's objects the poses as they are match
    best, best_key = None, None
    corroborated: dict[tuple, int] = {}  # inlier set -> how many of its pairs the others predict
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
            if len(inl) < need or len(concepts) < 2:
                continue
            # Any two correspondences define a similarity that lays both onto their partners, and a
            # turn about objects the poses already match keeps those: an alignment is evidence only
            # from a third object it lays that the poses as they are do not (bench seed 79: a 21
            # degree turn about a vending machine and a hydrant the poses matched laid a cone and a
            # hydrant onto look-alikes 10 and 16 m from them, two pairs, what any turn gets for free)
            if sum(corr[k][0] not in matched_as_is for k in inl) < 3:
                continue
            ids = tuple(sorted(inl))
            if holdout_tol is not None and ids not in corroborated:
                corroborated[ids] = _corroborated(za[[corr[k][0] for k in ids]], zb[[corr[k][1] for k in ids]],
                                                  holdout_tol)
            key = (len(inl), -err)
            if corroborated.get(ids, len(inl)) >= need and (best_key is None or key > best_key):
                best, best_key = (m, t, inl), key
    if best is None:
        return None
    m, t, inl = best
    fit = _fit_similarity(za[[corr[k][0] for k in inl]], zb[[corr[k][1] for k in inl]])
    return Alignment(*(fit if fit is not None else (m, t)), spare=len(inl) - need)


def _fit_similarity(A: np.ndarray, B: np.ndarray, any_scale: bool = False) -> tuple[complex, complex] | None:
    """The least-squares ground-plane similarity B ~ m A + t (complex); None when A's points
    coincide or the scale is not near 1 (the poses are metric, or one scale throughout)."""
    ca, cb = A.mean(), B.mean()
    den = (np.abs(A - ca) ** 2).sum()
    if den <= 1e-12:
        return None
    m = ((B - cb) * np.conj(A - ca)).sum() / den
    if not any_scale and not 0.8 <= abs(m) <= 1.25:
        return None
    return m, cb - m * ca


def _corroborated(A: np.ndarray, B: np.ndarray, tol: float) -> int:
    """How many of an alignment's inlier pairs (A[k] onto B[k]) the others predict: the
    similarity fitted without pair k (at any scale: three near objects fix it loosely) lays A[k]
    within ``tol`` of B[k]. Objects near each other fix a shift but hardly a rotation, so one far
    look-alike can swing the alignment onto itself (bench seed 71: a trash can 20 m from three
    objects the poses already agreed on, laid by a 20 degree turn about them onto a look-alike
    9.4 m from it; the alignment without it lays it 6.7 constellation tolerances off): such a
    pair is not corroborated."""
    n = len(A)
    if n < 3:
        return 0
    keep = np.ones(n, dtype=bool)
    count = 0
    for k in range(n):
        keep[k] = False
        fit = _fit_similarity(A[keep], B[keep], any_scale=True)
        keep[k] = True
        if fit is not None and abs(fit[0] * A[k] + fit[1] - B[k]) <= tol:
            count += 1
    return count


def _walked(poses: Track) -> Callable[[int, int], float]:
    """distance(k0, k1): path length of the camera between two samples (pose units)."""
    rows = poses.valid_rows()
    cum = np.concatenate([[0.0], np.cumsum([np.linalg.norm(poses.C[b] - poses.C[a]) for a, b in zip(rows, rows[1:])])])
    idx = np.array([int(poses.sample_indices[i]) for i in rows])

    def distance(k0: int, k1: int) -> float:
        i0, i1 = np.searchsorted(idx, [k0, k1])
        i0, i1 = min(i0, len(cum) - 1), min(i1, len(cum) - 1)
        return float(abs(cum[i1] - cum[i0]))

    return distance


# A viewing ray pointing below the horizon by more than this (the poses' pitch may be off by as
# much) is bounded by the ground: what it sees stands no farther than where it meets the ground.
RAY_DEPRESSION_SLACK_DEG = 2.0


def _ray_gap(lone: ClipInstance, placed: ClipInstance, layout: Layout, lone_is_later: bool) -> float | None:
    """Median ground-plane distance from ``placed``'s position to ``lone``'s viewing rays, over
    ``placed``'s range; the earlier clip's ground plane is mapped onto the later one's where their
    layouts align. Where the camera height is known, a ray that points below the horizon reaches no
    farther than where it meets the ground, and the object's foot no farther than that and its size
    (``placed``'s apparent width): the object's silhouette spans every row of its box, so a point
    of it, above the ground, is seen as far below the horizon as the box centre (an unlocated bench
    passing beside the camera, its boxes cut off by the image's bottom, was joined by its rays to a
    look-alike 13 m away, 3 times as far as its rays reach)."""
    poses, basis = layout.poses, layout.basis
    rays = _sample_rays(lone.samples, poses)
    if not rays:
        return None
    p = basis @ placed.position
    sim = layout.aligned.get((placed.clip, lone.clip) if lone_is_later else (lone.clip, placed.clip))
    if sim is not None:
        m, t, _ = sim
        z = complex(*p)
        z = (z - t) / m if lone_is_later is False else m * z + t  # into the lone instance's frame
        p = np.array([z.real, z.imag])
    slack = math.radians(RAY_DEPRESSION_SLACK_DEG)
    mean_down = None if layout.level else poses.down()  # the world's down when views are not level
    gaps = []
    for k, (c, d) in rays:
        c2, d2 = basis @ c, basis @ d
        nd = np.linalg.norm(d2)
        if nd < 1e-9:
            continue
        d2 = d2 / nd
        reach = math.inf
        if layout.camera_height:
            down = poses.down_at(k) if mean_down is None else mean_down
            depression = math.asin(float(np.clip(d @ down, -1.0, 1.0))) - slack
            if depression > 0:  # ground-plane length to where the ray, that much shallower, meets the ground,
                # and beyond it by the object's size (the ray passes a point of it, its place is its foot)
                reach = layout.camera_height / math.tan(depression) + placed.extent
        along = min(max(float((p - c2) @ d2), 0.0), reach)
        gaps.append(np.linalg.norm(p - c2 - along * d2))
    if not gaps:
        return None
    return float(np.median(gaps)) / max(placed.range, 1e-9)


def locate(samples: dict[int, Obs], poses: Track, camera_height: float | None, min_spread_deg: float,
           level: bool = True, pixel_error: float = 0.0) -> Location | None:
    """World position, viewing range and uncertainty of an object from its sightings: where it
    meets the ground when the camera height is known, else by triangulation; None when neither
    works. ``level``: the views are level (the ground plane is below each camera's own down axis,
    which is immune to drift of the estimated pitch); else the ground is below the cameras' mean
    down. ``pixel_error``: how far a box may be off, in pixels (``ReconcileParams.pixel_error``)."""
    if camera_height:
        loc = ground_contact(samples, poses, camera_height, None if level else poses.down(), pixel_error=pixel_error)
        if loc is not None:
            return loc
    rays = _rays(samples, poses)
    focal = np.median([poses.K[poses.row(k)][0, 0] for k in samples if poses.row(k) is not None] or [math.inf])
    return triangulate(rays, min_spread_deg, pixel_error / focal)


def ground_contact(samples: dict[int, Obs], poses: Track, height: float, down: np.ndarray | None,
                   min_depression_deg: float = 1.0, pixel_error: float = 0.0) -> Location | None:
    """An object standing on the ground, located from single frames: the bottom centre of its box
    is where it meets the ground, and the ground lies ``height`` (the camera's height, in pose
    units) below the camera. Median over the observations whose box bottom is neither cut off by
    the image nor hidden by a nearer object (``Obs.occluder_bottom``: those only when there are
    no others); with the mean range from the cameras. Uncertainty: how far ``pixel_error`` moves
    each sighting's ground point (about range^2 / (height x focal) per pixel down the image, range
    / focal across), how far a hidden foot may be in front of it, with their positions' spread
    over the square root of the sightings."""
    pts, ranges, moves, gaps = [], [], [], []
    whole = {k: o for k, o in samples.items() if not o.cut_at_bottom()}
    # a foot hidden by a nearer object counts only when no other is seen: the object stands
    # somewhere between the occluder's ground contact and its own box's, and is as loose as that
    usable = {k: o for k, o in whole.items() if o.occluder_bottom is None} or whole
    for k, o in sorted(usable.items()):
        u, v = (o.box[0] + o.box[2]) / 2.0, o.box[3]
        X = poses.ground_point(k, u, v, height, down, min_depression_deg)
        if X is not None:
            pts.append(X)
            ranges.append(float(np.linalg.norm(X - poses.C[poses.row(k)])))
            lower = poses.ground_point(k, u, v + 1.0, height, down, min_depression_deg)
            beside = poses.ground_point(k, u + 1.0, v, height, down, min_depression_deg)
            moves.append(float(np.linalg.norm(lower - X) ** 2 + np.linalg.norm(beside - X) ** 2)
                         if lower is not None and beside is not None else math.inf)
            gap = 0.0
            if o.occluder_bottom is not None:  # squared distance to where the occluder stands
                front = poses.ground_point(k, u, o.occluder_bottom, height, down, min_depression_deg)
                gap = float(np.sum((front - X) ** 2)) if front is not None else math.inf
            gaps.append(gap)
    if not pts:
        return None
    # The error grows with the square of the distance: keep the nearer half of the sightings.
    order = np.argsort(ranges, kind="stable")[: max(1, (len(pts) + 1) // 2)]
    near = np.array(pts)[order]
    X = np.median(near, axis=0)
    spread = float(np.mean(np.sum((near - X) ** 2, axis=1)))
    moved = pixel_error ** 2 * float(np.mean(np.array(moves)[order])) if pixel_error > 0 else 0.0
    # the pixel term is not averaged down over the sightings: the poses' tilt errors, which it also
    # stands for, are shared by sightings close in time
    variance = moved + float(np.mean(np.array(gaps)[order])) + spread / len(order)
    return Location(X, float(np.median(np.array(ranges)[order])), math.sqrt(variance))


# --------------------------------------------------------------------------------- proposals
# blocked: would join two instances of one clip; review: the evidence is too weak to tell two
# look-alikes apart, left apart for a reviewer (a `merge` fix joins them)
Decision = Literal["merge", "apart", "blocked", "review"]


@dataclass(frozen=True, eq=False)  # eq=False: proposals are told apart by identity (instances hold arrays)
class Proposal:
    """A candidate merge of two clip-local instances of one concept in different clips, with its
    evidence, and once decided, the decision; ``row`` is its ``schema.MERGE_DECISIONS`` row."""

    a: ClipInstance  # the instance in the earlier clip
    b: ClipInstance
    boundary: bool  # a is seen in the last sample of its clip, b in the first of the next clip
    box_iou: float | None  # overlap of those two boxes (boundary pairs only)
    appearance: float  # Bhattacharyya similarity of the two appearance histograms
    looks_differ: bool  # appearance below min_appearance, and both masks large enough for colours to count
    distance: float | None  # ground-plane distance over the viewing range; None: not measured
    distance_limit: float | None  # the largest distance that still merges (with ``distance``)
    by_rays: bool  # one of the two was not located: ``distance`` is from its viewing rays to the other
    continues: bool  # a boundary pair whose boxes overlap enough: one object crossing the cut
    # strength of the evidence: 3-4 continues across the cut, 2-2.5 same place, 1.5-2 same place by
    # viewing rays (1-1.5 once ``assign_unlocated`` merges it), 1-1.5 same look alone; 0: keep apart
    score: float
    reason: str
    decision: Decision | None = None  # once decided
    weak: bool = False  # a position match too far apart to tell look-alikes apart: never merges on its own
    uncertainty: float | None = None  # the two positions' combined uncertainty over the range

    @property
    def keys(self) -> tuple[tuple[int, int], tuple[int, int]]:
        return (self.a.key, self.b.key)

    def decided(self, decision: Decision, reason: str, score: float | None = None) -> Proposal:
        return replace(self, decision=decision, reason=reason, score=self.score if score is None else score)

    def row(self, video_id: str) -> dict:
        a, b = self.a, self.b
        return {
            "video_id": video_id, "concept": a.concept, "clip_a": a.clip, "local_a": a.local, "clip_b": b.clip,
            "local_b": b.local, "boundary": bool(self.boundary), "box_iou": self.box_iou, "appearance": self.appearance,
            "distance": self.distance, "score": float(self.score), "decision": self.decision, "reason": self.reason,
        }


def _pairing_gain(p: Proposal) -> float:
    """How much a pairing adds to a one-to-one pairing's total: its closeness (0 at the limit, 1 at
    the same place), without the score's base, which would make the most pairs win over the
    closest (four look-alikes paired at half the limit outscoring three at nearly no distance)."""
    if p.distance is not None and p.distance_limit:
        return max(0.0, 1.0 - p.distance / p.distance_limit)
    return max(0.0, p.score - 1.0)


def best_pairings(proposals: Iterable[Proposal]) -> set[tuple]:
    """The keys of the merge proposals to make first: every object that continues across a cut,
    then, per concept and pair of clips, the position matches that pair the remaining instances
    one to one with the highest total closeness (``_pairing_gain``). Taken one at a time by score, the single closest
    pair can take the partner of another instance and leave both others unpaired (two trash cans
    side by side, with the poses off by a few % of the range: each a near match for either). Weak
    matches take part (a weak pairing that scores more in total says the strong one is not sure),
    though ``merge_proposals`` merges none of them."""
    chosen = {p.keys for p in proposals if p.continues}
    for group in _pairing_groups(proposals, chosen):
        if len(group) <= 1:
            chosen |= {p.keys for p in group}
            continue
        rows, cols, gain = _gain_matrix(group)
        chosen |= {(rows[r], cols[c]) for r, c in _assignment(gain)}
    return chosen


def _pairing_groups(proposals: Iterable[Proposal], continuing: set[tuple]) -> list[list[Proposal]]:
    """The position matches to pair one to one: per concept and pair of clips, those of instances
    that do not continue across the cut between those two clips (an instance continuing across a
    cut is paired there; between other clips it takes part: left out, a look-alike would take its
    partner by default)."""
    groups: dict[tuple, list[Proposal]] = {}
    for p in proposals:
        if not p.continues and p.score > 0:
            groups.setdefault((p.a.concept, p.a.clip, p.b.clip), []).append(p)
    linked: dict[tuple[int, int], set] = {}
    for a, b in continuing:
        linked.setdefault((a[0], b[0]), set()).update((a, b))
    out = []
    for (_, clip_a, clip_b), group in sorted(groups.items()):
        taken = linked.get((clip_a, clip_b), set())
        out.append([p for p in group if p.a.key not in taken and p.b.key not in taken])
    return out


def _gain_matrix(group: list[Proposal]) -> tuple[list, list, np.ndarray]:
    rows = sorted({p.a.key for p in group})
    cols = sorted({p.b.key for p in group})
    gain = np.zeros((len(rows), len(cols)))
    for p in group:
        gain[rows.index(p.a.key), cols.index(p.b.key)] = _pairing_gain(p)
    return rows, cols, gain


def _assignment(gain: np.ndarray) -> list[tuple[int, int]]:
    """The one-to-one pairing of the highest total gain (pairs of no gain left out)."""
    r_, c_ = linear_sum_assignment(gain, maximize=True)
    return [(int(r), int(c)) for r, c in zip(r_, c_) if gain[r, c] > 0]


def ambiguous_pairings(proposals: Iterable[Proposal], rival_sigmas: float) -> dict[tuple, str]:
    """The position pairings a look-alike could take as well, each with its reason: a pairing of
    the best one-to-one pairing (``best_pairings``'s, computed the same way) is ambiguous when the
    best pairing without it is worse by less than ``rival_sigmas`` of its location uncertainty (two
    hydrants a step apart, one seen once from afar: which of them a third sighting is, the
    positions cannot say); so are the pairs that the pairing without it uses instead. Leaving the
    instance unpaired counts as a rival too: a pairing near its limit is ambiguous by the same
    measure."""
    out: dict[tuple, str] = {}
    if rival_sigmas <= 0:
        return out
    proposals = list(proposals)
    for group in _pairing_groups(proposals, {p.keys for p in proposals if p.continues}):
        positional = [p for p in group if p.distance is not None and not p.by_rays and p.uncertainty is not None]
        if not positional:
            continue
        rows, cols, gain = _gain_matrix(group)
        best = _assignment(gain)
        total = sum(gain[r, c] for r, c in best)
        by_cell = {(rows.index(p.a.key), cols.index(p.b.key)): p for p in group}
        for r, c in best:
            p = by_cell[(r, c)]
            if p not in positional:
                continue
            without = gain.copy()
            without[r, c] = 0.0
            alt = _assignment(without)
            worse = total - sum(without[i, j] for i, j in alt)  # in gain units: distance / limit
            margin = rival_sigmas * p.uncertainty / p.distance_limit
            if worse >= margin:
                continue
            instead = [by_cell[(i, j)] for i, j in alt if (i == r or j == c) and (i, j) in by_cell]
            rival = (f"{instead[0].b.key if instead[0].a.key == p.a.key else instead[0].a.key} at distance "
                     f"{instead[0].distance:.2f}" if instead and instead[0].distance is not None else "none at all")
            out[p.keys] = (f"the best pairing without it is worse by {worse * p.distance_limit:.2f} of range, under "
                           f"{rival_sigmas:g} location uncertainties ({p.uncertainty:.2f}): as good a pairing is "
                           f"{rival}")
            for q in instead:
                out.setdefault(q.keys, f"a rival of the pairing {p.a.key}-{p.b.key} (distance {p.distance:.2f}), "
                                       f"nearly as close")
    return out


# --------------------------------------------------------------------------------- phases
@dataclass(frozen=True)
class Cuts:
    """The first and last 2 FPS sample of each clip."""

    first: dict[int, int]
    last: dict[int, int]

    @classmethod
    def of(cls, clips: Sequence[ClipSpan]) -> Cuts:
        return cls({c.index: c.first_sample for c in clips}, {c.index: c.first_sample + c.n_samples - 1 for c in clips})


@dataclass(frozen=True)
class Layout:
    """The ground geometry the proposals measure distances in (there when an instance was located)."""

    poses: Track
    basis: np.ndarray  # ground_basis
    walked: Callable[[int, int], float]  # camera path length between two samples
    aligned: dict[tuple[int, int], Alignment]  # (clip i, clip j) -> similarity of i's layout onto j's
    camera_height: float | None = None  # above the ground, in pose units (None: unknown)
    level: bool = True  # ReconcileParams.level_views: the ground is below each camera's own down axis


def locate_instances(instances: Iterable[ClipInstance], poses: Track, camera_height: float | None,
                     params: ReconcileParams) -> None:
    """Fill in each instance's position, viewing range and apparent width where it can be located."""
    for ci in instances:
        loc = locate(ci.samples, poses, camera_height, params.min_ray_spread_deg, params.level_views,
                     params.pixel_error)
        if loc is not None:
            ci.position, ci.range, ci.sigma = loc
            if ci.seen_in_part:  # parts of the object: its error is several times what its pixels say
                ci.sigma *= params.part_error
            widths = [(o.box[2] - o.box[0]) / poses.K[poses.row(k)][0, 0] for k, o in ci.samples.items()
                      if poses.row(k) is not None and not o.clipped()]
            ci.extent = ci.range * float(np.median(widths)) if widths else 0.0


def align_clips(instances: list[ClipInstance], cuts: Cuts, poses: Track, params: ReconcileParams,
                camera_height: float | None = None) -> Layout | None:
    """The ground layout, with every pair of clips whose located instances align as a revisited
    place (``align_layouts``); None when no instance was located."""
    ranges = [ci.range for ci in instances if ci.range is not None]
    if not ranges:
        return None
    walked = _walked(poses)
    basis = ground_basis(poses)
    tol = params.constellation_tol * float(np.median(ranges))
    by_clip: dict[int, list[ClipInstance]] = {}
    for ci in instances:
        by_clip.setdefault(ci.clip, []).append(ci)
    aligned: dict[tuple[int, int], Alignment] = {}
    for i in sorted(by_clip):
        for j in sorted(by_clip):
            if j > i:  # neighbours too: a fast turn between them may have left the poses off
                dist_walked = walked(cuts.last[i], cuts.first[j])
                shift = params.max_layout_shift * float(np.median(ranges)) + params.max_drift_per_distance * dist_walked
                sim = align_layouts(by_clip[i], by_clip[j], basis, tol, params.min_constellation,
                                    params.max_layout_rotation_deg, shift, params.constellation_holdout * tol)
                if sim is not None:
                    aligned[(i, j)] = sim
    return Layout(poses, basis, walked, aligned, camera_height, params.level_views)


def _distance(a: ClipInstance, b: ClipInstance, params: ReconcileParams,
              layout: Layout | None) -> tuple[float | None, bool, float, bool]:
    """(distance over the range, by viewing rays, allowed drift, after aligning the clips' layouts)."""
    if (a.position is None) != (b.position is None) and layout is not None:
        # one of them was not located: do its viewing rays pass the other's position?
        lone, placed = (a, b) if a.position is None else (b, a)
        gap = _ray_gap(lone, placed, layout, lone is b)
        return gap, True, 0.0, (a.clip, b.clip) in layout.aligned
    if a.position is None or b.position is None:
        return None, False, 0.0, False
    basis = layout.basis
    rng_ = max((a.range + b.range) / 2.0, 1e-9)
    # a large object's ground contact moves with the viewpoint (near edge vs far edge)
    size = params.extent_weight * (a.extent + b.extent) / 2.0 / rng_
    if (a.clip, b.clip) in layout.aligned:
        # The alignment measured the drift between these two clips: every pair of them is measured
        # after it. Raw distances with a drift allowance beside aligned ones would compare pairings
        # under different limits, and a look-alike's raw 0.15 of 0.96 outscored the object's own
        # 0.08 of 0.40 once the layouts were aligned.
        m, t, _ = layout.aligned[(a.clip, b.clip)]
        za, zb = complex(*(basis @ a.position)), complex(*(basis @ b.position))
        return abs(m * za + t - zb) / rng_, False, size, True
    # raw positions: the poses drift with the distance walked between the sightings
    dist = float(np.linalg.norm(basis @ (a.position - b.position))) / rng_
    drift = size + params.max_drift_per_distance * layout.walked(max(a.samples), min(b.samples)) / rng_
    return dist, False, drift, False


def _cut_iou(a: ClipInstance, b: ClipInstance, last: int, first: int) -> float:
    """Overlap of the boxes either side of a cut: as they are, or with one box carried across the
    cut at its own image motion (its previous or next sample): an object near the camera moves
    far between two 2 FPS samples."""
    box_a, box_b = np.asarray(a.samples[last].box), np.asarray(b.samples[first].box)
    ious = [_iou(box_a, box_b)]
    if last - 1 in a.samples:
        ious.append(_iou(2 * box_a - np.asarray(a.samples[last - 1].box), box_b))
    if first + 1 in b.samples:
        ious.append(_iou(box_a, 2 * box_b - np.asarray(b.samples[first + 1].box)))
    return max(ious)


def propose_pair(a: ClipInstance, b: ClipInstance, cuts: Cuts, params: ReconcileParams,
                 layout: Layout | None) -> Proposal:
    """The evidence that ``a`` (earlier clip) and ``b`` are one object, scored."""
    boundary = b.clip == a.clip + 1 and cuts.last[a.clip] in a.samples and cuts.first[b.clip] in b.samples
    iou = _cut_iou(a, b, cuts.last[a.clip], cuts.first[b.clip]) if boundary else None
    app = bhattacharyya(a.appearance, b.appearance)
    looks_differ = app < params.min_appearance and min(a.mean_area, b.mean_area) >= params.appearance_min_area
    dist, by_rays, drift, used_layout = _distance(a, b, params, layout)
    continues = boundary and iou >= params.boundary_iou
    limit = None if dist is None else (params.max_ray_distance if by_rays else params.max_distance + drift)
    uncertainty = (math.hypot(a.sigma, b.sigma) / max((a.range + b.range) / 2.0, 1e-9)
                   if a.position is not None and b.position is not None else None)
    weak = False
    if continues:
        score, why = 3.0 + iou, f"continues across the cut (box IoU {iou:.2f})"
    elif dist is not None:
        how = ((" by viewing rays" if by_rays else "")
               + (" after aligning the two clips' layouts" if used_layout else ""))
        if dist <= limit and not looks_differ:
            score = (1.5 if by_rays else 2.0) + (1.0 - dist / limit) / 2
            why = f"same place{how} (distance {dist:.2f} of range) and look (appearance {app:.2f})"
            # beyond the decisive fraction the place alone cannot tell look-alikes apart; seen in
            # the last sample before the cut and the first after it, the time tells (a look-alike
            # would have to vanish and another appear at that instant, at nearly the same place)
            far = not by_rays and dist > params.decisive_fraction * limit
            # where either was located loosely (seen once, far away) a look-alike could be anywhere
            # in that reach: a near distance says nothing
            loose = not by_rays and uncertainty is not None and params.location_sigmas * uncertainty > limit
            # each seen in one sample: nothing checks either place (a pose or box error at either
            # instant lays one on the other's look-alike)
            once = not by_rays and len(a.samples) == 1 and len(b.samples) == 1
            # laid together by an alignment with no aligned object to spare (``Alignment.decisive``)
            chance = used_layout and not layout.aligned[(a.clip, b.clip)].decisive
            weak = (far or loose or once or chance) and not boundary
            if (far or loose or once or chance) and boundary:
                why += f", seen either side of the cut (box IoU {iou:.2f})"
            if weak and far:
                why = (f"near{how} (distance {dist:.2f} of range, over {params.decisive_fraction:g} of the limit "
                       f"{limit:.2f}) with the same look (appearance {app:.2f}): too weak to tell look-alikes apart")
            elif weak and chance and not loose:
                why = (f"near{how} (distance {dist:.2f} of range) with the same look (appearance {app:.2f}), but "
                       f"the alignment has no aligned object to spare: a chance layout of look-alikes could "
                       f"give it, too weak to tell look-alikes apart")
            elif weak and once and not loose:
                why = (f"near{how} (distance {dist:.2f} of range) with the same look (appearance {app:.2f}), but "
                       f"each was seen in one sample only: nothing checks either place, too weak to tell look-alikes "
                       f"apart")
            elif weak:
                part = [str(x.key) for x in (a, b) if x.seen_in_part]
                why = (f"near{how} (distance {dist:.2f} of range) with the same look (appearance {app:.2f}), but "
                       f"located too loosely (uncertainty {uncertainty:.2f} of range; {params.location_sigmas:g} of "
                       f"it over the limit {limit:.2f}) to tell look-alikes apart"
                       + (f"; {' and '.join(part)} seen only in part (every box cut off by the image's side or bottom)"
                          if part else ""))
        else:
            score, why = 0.0, (f"distance{how} {dist:.2f} (max {limit:.2f})" if dist > limit else
                               f"same place{how} (distance {dist:.2f}) but the looks differ "
                               f"(appearance {app:.2f} < {params.min_appearance})")
    elif params.appearance_only is not None and app >= params.appearance_only:
        score, why = 1.0 + app / 2, f"same look (appearance {app:.2f}), neither could be located"
    else:
        score, why = 0.0, f"appearance {app:.2f}, neither could be located"
    return Proposal(a, b, boundary, iou, app, looks_differ, dist, limit, by_rays, continues, score, why, weak=weak,
                    uncertainty=uncertainty)


def propose(instances: list[ClipInstance], cuts: Cuts, params: ReconcileParams,
            layout: Layout | None) -> tuple[list[Proposal], list[Proposal]]:
    """Every pair of one concept's instances in different clips, weighed: the proposals worth a
    decision, and those where one instance could not be located and its viewing rays pass the
    other (weak evidence: settled after the strong merges, as an assignment)."""
    by_concept: dict[str, list[ClipInstance]] = {}
    for ci in instances:
        by_concept.setdefault(ci.concept, []).append(ci)
    strong, by_rays = [], []
    for _, items in sorted(by_concept.items()):
        for i, a in enumerate(items):
            for b in items[i + 1:]:
                if a.clip == b.clip:
                    continue
                p = propose_pair(*((a, b) if a.clip < b.clip else (b, a)), cuts, params, layout)
                if p.by_rays and p.distance is not None and not p.continues:
                    by_rays.append(p)
                elif (p.boundary or (p.distance is not None and p.distance <= 2 * p.distance_limit)
                      or (params.appearance_only is not None and p.appearance >= params.appearance_only)):
                    strong.append(p)
    return strong, by_rays


class Groups:
    """Union-find over clip instances (by key); each group knows its members and their clips."""

    def __init__(self, instances: Iterable[ClipInstance]):
        self.parent = {ci.key: ci.key for ci in instances}
        self.clips = {k: {k[0]} for k in self.parent}
        self.members = {k: [k] for k in self.parent}

    def find(self, x: tuple[int, int]) -> tuple[int, int]:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, ra: tuple[int, int], rb: tuple[int, int]) -> None:
        """Join two groups (by their roots): the smaller key stays the root."""
        root, child = (ra, rb) if ra < rb else (rb, ra)
        self.parent[child] = root
        self.clips[root] |= self.clips.pop(child)
        self.members[root] += self.members.pop(child)

    def share_a_clip(self, ra: tuple[int, int], rb: tuple[int, int]) -> bool:
        return bool(self.clips[ra] & self.clips[rb])


# A third instance is "as near" (``_nearer_elsewhere``) within this fraction of ``rival_sigmas``
# location uncertainties of the match: measured on bench seeds 1-28 with the rule's first form, of
# 0, 0.5, 0.75 and 1, 0.5 was the smallest that left no false merge (0: one), and each step up
# sent more true merges to review (1: 18 more pairs than 0.5).
NEAR_FRACTION = 0.5


def merge_proposals(proposals: list[Proposal], groups: Groups, rival_sigmas: float = 0.0) -> list[Proposal]:
    """Decide the proposals, best one-to-one pairings first, then strongest evidence first
    (deterministic tie-break on keys); a merge that would put two instances of one clip into one
    global instance is blocked. A weak position match never merges: unless other evidence joined
    its two instances already, or separates them (blocked), it is left apart for review. Neither
    does a match that would join, besides its own two instances, two that their own pair says may
    be different objects (``_implied_against``), or one that a third instance as near to either
    of them says may be wrong (``_nearer_elsewhere``): it is left for review."""
    paired = best_pairings(proposals)
    rivals = ambiguous_pairings(proposals, rival_sigmas)
    # Weak as a far match (seen either side of the cut, the time tells): an ambiguous pairing, and
    # a near match that the best one-to-one pairing does not make (that pairing joins its instances
    # to others, weak matches included, which says this one is not sure).
    def pairs_otherwise(p: Proposal) -> str:
        return f"the best one-to-one pairing of clips {p.a.clip} and {p.b.clip} pairs them otherwise"

    doubt: dict[tuple, str] = {}
    for p in proposals:
        if p.boundary or p.weak:
            continue
        if p.keys in rivals:
            doubt[p.keys] = rivals[p.keys]
        elif p.keys not in paired and p.score > 0:
            doubt[p.keys] = pairs_otherwise(p)
    near: dict[tuple, list[Proposal]] = {}  # each instance's position matches within their limits
    for p in proposals:
        if p.score > 0 and not p.continues and p.distance is not None and p.distance <= p.distance_limit:
            near.setdefault(p.a.key, []).append(p)
            near.setdefault(p.b.key, []).append(p)
    proposals = [replace(p, weak=True, reason=f"{p.reason}, but {doubt[p.keys]}") if p.keys in doubt else p
                 for p in proposals]
    by_keys = {p.keys: p for p in proposals}
    decided = []
    # the weak ones last: whether other evidence joined them already, or separates them, is known then
    for p in sorted(proposals, key=lambda p: (p.weak, p.keys not in paired, -p.score, p.a.key, p.b.key)):
        ra, rb = groups.find(p.a.key), groups.find(p.b.key)
        if p.score <= 0:
            decided.append(p.decided("apart", p.reason))
        elif ra == rb:
            decided.append(p.decided("merge", p.reason + " (already joined)"))
        elif p.weak and not groups.share_a_clip(ra, rb):
            decided.append(p.decided("review", p.reason))
        elif groups.share_a_clip(ra, rb):
            decided.append(p.decided("blocked", p.reason + "; would join two instances of one clip" + (
                "" if p.keys in paired or doubt.get(p.keys) == pairs_otherwise(p) else f" ({pairs_otherwise(p)})")))
        elif against := _implied_against(p, groups.members[ra], groups.members[rb], by_keys, doubt):
            decided.append(p.decided("review", p.reason + against))
        elif against := _nearer_elsewhere(p, groups, near, by_keys, rival_sigmas * NEAR_FRACTION):
            decided.append(p.decided("review", p.reason + against))
        else:
            groups.union(ra, rb)
            decided.append(p.decided("merge", p.reason))
    return decided


def _pairs_between(members_a: list, members_b: list, by_keys: dict[tuple, Proposal],
                   skip: Proposal | None = None) -> Iterable[Proposal]:
    """The proposals between two groups' members (keyed earlier clip first), ``skip`` left out."""
    for x in members_a:
        for y in members_b:
            q = by_keys.get((x, y) if x[0] < y[0] else (y, x))
            if q is not None and q is not skip:
                yield q


def _measured_apart(members_a: list, members_b: list, by_keys: dict[tuple, Proposal],
                    skip: Proposal | None = None) -> Iterable[Proposal]:
    """The pairs between two groups' members that are measured apart: over their distance limit,
    or looking different."""
    return (q for q in _pairs_between(members_a, members_b, by_keys, skip)
            if q.looks_differ or (q.distance is not None and q.distance > q.distance_limit))


def _nearer_elsewhere(p: Proposal, groups: Groups, near: dict[tuple, list[Proposal]],
                      by_keys: dict[tuple, Proposal], margin: float) -> str:
    """Why merging ``p`` may be wrong from a third instance ('' when none says so). Each of its
    instances' other position matches that are as near as ``p`` (within ``margin`` location
    uncertainties of ``p``), in another clip than ``p``'s other instance, is a place it could
    belong to as well, unless the segmenter says it cannot (the match's group has an instance in
    a clip of the instance's group; a pair measured apart does not rule it out: such evidence
    raises doubts here, it does not settle them):

    - one whose group cannot be the merged object (it shares a clip with the other instance's
      group, or a pair between them is measured apart) is ruled out only by this merge;
    - when both instances' nearest such matches in one clip are in two different groups, the two
      instances point at two objects there.

    Either way the match is left for review. What it catches: a raw match between clips far apart
    on the walk, inside a limit that the drift allowance widened, took an object whose sharper
    match (after aligning its clip to the first visit) was a look-alike's group. The one-to-one
    pairing of two clips already weighs a nearer instance in the other one's clip."""
    if p.continues or p.distance is None:
        return ""
    roots = {p.a.key: groups.find(p.a.key), p.b.key: groups.find(p.b.key)}
    as_near = p.distance + margin * (p.uncertainty or 0.0)
    nearest: dict[tuple, dict[int, tuple[float, ClipInstance]]] = {p.a.key: {}, p.b.key: {}}

    def apart(r1: tuple, r2: tuple) -> str:
        if groups.share_a_clip(r1, r2):
            return "its group has another instance in a clip of theirs"
        q = next(_measured_apart(groups.members[r1], groups.members[r2], by_keys), None)
        return "" if q is None else f"{q.a.key} and {q.b.key}: {q.reason}"

    for x, other in ((p.a, p.b), (p.b, p.a)):
        rx, ro = roots[x.key], roots[other.key]
        for q in near.get(x.key, ()):
            c = q.b if q.a is x else q.a
            rc = groups.find(c.key)
            if q is p or c.clip == other.clip or q.distance > as_near or rc == ro or groups.share_a_clip(rc, rx):
                continue
            if why := apart(rc, ro):
                return (f"; but {c.key} is as near to {x.key} (distance {q.distance:.2f} of range) and cannot be "
                        f"the same object as {other.key} ({why})")
            if c.clip not in nearest[x.key] or q.distance < nearest[x.key][c.clip][0]:
                nearest[x.key][c.clip] = (q.distance, c)
    for clip in sorted(nearest[p.a.key].keys() & nearest[p.b.key].keys()):
        (da, ca), (db, cb) = nearest[p.a.key][clip], nearest[p.b.key][clip]
        if groups.find(ca.key) != groups.find(cb.key):
            return (f"; but their nearest in clip {clip} are two objects: {ca.key} to {p.a.key} (distance {da:.2f}) "
                    f"and {cb.key} to {p.b.key} ({db:.2f})")
    return ""


def _implied_against(p: Proposal, members_a: list, members_b: list, by_keys: dict[tuple, Proposal],
                     doubt: dict[tuple, str]) -> str:
    """Why merging ``p``'s two groups may be wrong, from the other pairs it joins ('' when nothing
    says so): every member of one group becomes the other's members' object, and a pair of them
    measured apart (over its limit, or looking different) or in doubt (``merge_proposals``: a
    look-alike could be its match) says otherwise. A chain through a match that a drift allowance
    widened (raw positions, clips far apart on the walk) joined an object's revisit to a look-alike
    that a sharper measurement, after aligning the layouts, had put apart from the object."""
    q = next(_measured_apart(members_a, members_b, by_keys, skip=p), None) or next(
        (q for q in _pairs_between(members_a, members_b, by_keys, skip=p) if q.keys in doubt), None)
    return "" if q is None else f"; but it would also join {q.a.key} and {q.b.key}: {q.reason}"


# seen in one sample and not located: ``assign_unlocated`` leaves its best match for a reviewer
SEEN_ONCE = ("; but it was seen once: its one viewing ray says which way it is, not how far, and a "
             "look-alike anywhere along it would match as well")


def assign_unlocated(proposals: list[Proposal], instances: Iterable[ClipInstance], groups: Groups,
                     params: ReconcileParams) -> list[Proposal]:
    """Instances that could not be located (seen briefly, or without parallax) join the located
    instance their viewing rays pass closest to. Several of them in one clip are assigned jointly
    (each to a different instance), so that one wrong guess cannot push another out. The match
    of an instance seen in one sample only, one that a look-alike's position nearly equals, or one
    whose rays another member of the group passes too far (or that looks different), is left for a
    reviewer (decision ``review``)."""
    located = {groups.find(ci.key) for ci in instances if ci.position is not None}
    by_keys = {p.keys: p for p in proposals}
    lone_sets: dict[tuple[int, str], dict[tuple[int, int], list[tuple[ClipInstance, Proposal]]]] = {}
    for p in proposals:
        lone, placed = (p.a, p.b) if p.a.position is None else (p.b, p.a)
        lone_sets.setdefault((lone.clip, lone.concept), {}).setdefault(lone.key, []).append((placed, p))
    decided = []
    for (clip, concept), by_lone in sorted(lone_sets.items()):
        lones = [k for k in sorted(by_lone) if groups.find(k) not in located]
        cols: list = []
        cost: dict[tuple[int, int], tuple[float, Proposal]] = {}
        for li, k in enumerate(lones):
            for placed, p in by_lone[k]:
                g = groups.find(placed.key)
                if groups.share_a_clip(g, groups.find(k)):
                    continue
                if p.looks_differ:
                    continue
                if g not in cols:
                    cols.append(g)
                gi = cols.index(g)
                if (li, gi) not in cost or p.distance < cost[(li, gi)][0]:
                    cost[(li, gi)] = (p.distance, p)
        chosen: set[tuple[int, int]] = set()
        if cost:
            big = 1e6
            M = np.full((len(lones), len(cols)), big)
            for (li, gi), (d, _) in cost.items():
                if d <= params.max_ray_distance:
                    M[li, gi] = d
            rows_, cols_ = linear_sum_assignment(M)
            chosen = {(int(r), int(c)) for r, c in zip(rows_, cols_) if M[r, c] < big}
        # a look-alike whose position the rays pass nearly as close (within the two positions'
        # uncertainty) could be the one as well: left for a reviewer
        to_review: dict[tuple[int, int], str] = {}
        for li, gi in chosen:
            d, p = cost[(li, gi)]
            placed = p.a if p.b.key == lones[li] else p.b
            for gj in range(len(cols)):
                if gj == gi or M[li, gj] >= big:
                    continue
                rival = cost[(li, gj)][1]
                other = rival.a if rival.b.key == lones[li] else rival.b
                unc = math.hypot(placed.sigma / max(placed.range, 1e-9), other.sigma / max(other.range, 1e-9))
                if M[li, gj] - d < params.rival_sigmas * unc:
                    to_review[(li, gi)] = (f"; but the rays pass {other.key} nearly as close (distance "
                                           f"{M[li, gj]:.2f}, within {params.rival_sigmas:g} location "
                                           f"uncertainties {unc:.2f})")
                    break
        # rays laid by an alignment with nothing to spare (the proposal's reason says so), or passing
        # an instance seen only in part, whose place is several times looser than its pixels say
        # (bench seed 19: an unlocated vending machine's rays passed a look-alike whose every box
        # the image's bottom or side cut off, and joined it), are left for a reviewer
        for li, gi in chosen:
            p = cost[(li, gi)][1]
            placed = p.a if p.b.key == lones[li] else p.b
            if (li, gi) not in to_review and p.weak:
                to_review[(li, gi)] = ""
            elif (li, gi) not in to_review and placed.seen_in_part:
                to_review[(li, gi)] = (f"; but {placed.key} was seen only in part (every box cut off by the image's "
                                       f"side or bottom): its place is too loose for rays to tell look-alikes apart")
        # the group's other members must match as well (merging is transitive): one whose own pair
        # the rays put over the limit, or that looks different, says this is another object
        for li, gi in chosen:
            if (li, gi) not in to_review and (q := next(_measured_apart([lones[li]], groups.members[cols[gi]], by_keys),
                                                         None)) is not None:
                to_review[(li, gi)] = f"; but it would also join {q.a.key} and {q.b.key}: {q.reason}"
        note = f" (joint assignment of {len(lones)} unlocated {concept!r} of clip {clip})" if len(lones) > 1 else ""
        for li, k in enumerate(lones):
            for placed, p in by_lone[k]:
                g = groups.find(placed.key)
                gi = cols.index(g) if g in cols else None
                if gi is not None and (li, gi) in to_review and cost[(li, gi)][1] is p:
                    decided.append(p.decided("review", p.reason + to_review[(li, gi)] + note, 0.0))
                elif gi is not None and (li, gi) in chosen and cost[(li, gi)][1] is p:
                    if len((p.a if p.a.key == k else p.b).samples) == 1:
                        decided.append(p.decided("review", p.reason + SEEN_ONCE + note, 0.0))
                    else:
                        groups.union(groups.find(k), g)
                        decided.append(p.decided("merge", p.reason + note,
                                                 1.0 + (1.0 - p.distance / params.max_ray_distance) / 2))
                else:
                    decided.append(p.decided("apart", p.reason if p.distance > params.max_ray_distance else
                                             p.reason + "; another pairing was closer" + note, 0.0))
    return decided


def global_instances(video_id: str, instances: Iterable[ClipInstance], groups: Groups, poses: Track | None,
                     camera_height: float | None, params: ReconcileParams,
                     ) -> tuple[list[dict], list[dict], dict[int, tuple[float, float, float]]]:
    """Number the groups by first appearance: their members, merged observations and positions."""
    by_root: dict[tuple[int, int], list[ClipInstance]] = {}
    for ci in instances:
        by_root.setdefault(groups.find(ci.key), []).append(ci)
    ordered = sorted(by_root.values(),
                     key=lambda g: (min(c.first_time for c in g), g[0].concept, min(c.key for c in g)))
    members, observations, positions = [], [], {}
    for gid, g in enumerate(ordered, start=1):
        merged_samples: dict[int, Obs] = {}
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
        if poses is not None:
            loc = locate(merged_samples, poses, camera_height, params.min_ray_spread_deg, params.level_views)
            if loc is not None:
                positions[gid] = tuple(float(x) for x in loc[0])
    return members, observations, positions


def reconcile(video_id: str, instances: list[ClipInstance], clips: Sequence[ClipSpan], params: ReconcileParams,
              poses: Track | None = None, camera_height: float | None = None) -> Reconciled:
    """Link clip-local instances across clips into global instances (see the module docstring).

    ``camera_height``: the camera's height above the ground in the poses' units; when given,
    instances are located where they meet the ground (single frames suffice), else by
    triangulating the rays through their box centres (needs parallax)."""
    if poses is not None and not (params.use_positions and poses.valid.any()):
        poses = None
    for ci in instances:  # the positions phase fills these in place: an earlier call's must not stay
        ci.position, ci.range, ci.extent, ci.sigma = None, None, 0.0, 0.0
    mark_occluded_bottoms(ci.samples for ci in instances)
    cuts = Cuts.of(clips)
    layout = None
    if poses is not None:
        locate_instances(instances, poses, camera_height, params)
        layout = align_clips(instances, cuts, poses, params, camera_height)
    strong, by_rays = propose(instances, cuts, params, layout)
    groups = Groups(instances)
    decided = merge_proposals(strong, groups, params.rival_sigmas) + assign_unlocated(by_rays, instances, groups, params)
    members, observations, positions = global_instances(video_id, instances, groups, poses, camera_height, params)
    return Reconciled(members, [p.row(video_id) for p in decided], observations, positions)
