"""Where each clip instance stands on the ground, with a covariance.

An instance is located where the bottom of its box meets the ground (``ground_contact``: the
camera's height is known; single frames suffice), else by triangulating the rays through its box
centres (``triangulate``: needs parallax), else, seen from one place only, along its viewing ray
(``ray_line``: anywhere between the camera and where the ray meets the ground). Each way gives a
position on the ground plane and a 2 x 2 covariance propagated from how far a box edge may be off
(``pixel_error`` pixels, the poses' tilt included; a box cut off by the image border has its hidden
side anywhere within half its visible size), the spread of the sightings, a foot hidden by a
nearer object (anywhere between the occluder's ground contact and its own), and the object's
apparent size (a large object's ground contact moves with the viewpoint).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from vsi_wild.stages.pose import Track
from vsi_wild.stages.reconcile.instances import ClipInstance, Obs


@dataclass(frozen=True)
class Located:
    """An instance on the ground plane: position (``ground_basis`` coordinates), covariance, the
    mean viewing range, the apparent width (pose units), and how it was located."""

    xy: np.ndarray  # (2,)
    cov: np.ndarray  # (2, 2)
    range: float
    extent: float
    how: str  # "ground" | "rays" | "ray"
    # the middle of the samples whose sightings place it: the poses' drift between two instances'
    # positions is the camera's walk between these, not between their last and first sightings
    sample: int | None = None


class Location(NamedTuple):
    """A world position with its mean viewing range, covariance (3 x 3) and how it was found."""

    position: np.ndarray
    range: float
    cov: np.ndarray
    how: str = "rays"  # "ground" | "rays"
    sample: int | None = None  # the middle of the samples whose sightings give the position


def ground_basis(poses: Track) -> np.ndarray:
    """(2, 3): two world axes spanning the ground plane (orthogonal to the cameras' mean down axis)."""
    down = poses.down()
    a = np.array([1.0, 0.0, 0.0]) if abs(down[0]) < 0.9 else np.array([0.0, 0.0, 1.0])
    e1 = a - (a @ down) * down
    e1 /= np.linalg.norm(e1)
    return np.stack([e1, np.cross(down, e1)])


def _pixel_sigmas(o: Obs, pixel_error: float) -> tuple[float, float]:
    """How far (pixels) the box's centre column and its bottom or centre row may be off: the
    pixel error, and half the visible size on an axis where the image border cuts the box off
    (its hidden part is not seen: the box centres or ends elsewhere than the object)."""
    x0, y0, x1, y1 = o.box
    su = pixel_error + ((x1 - x0) / 2.0 if o.cut_at_side() else 0.0)
    sv = pixel_error + ((y1 - y0) / 2.0 if o.cut_at_bottom() or (o.size[1] > 0 and y0 <= 2.0) else 0.0)
    return su, sv


def triangulate(
    rays: Sequence[tuple[np.ndarray, np.ndarray]], min_spread_deg: float, angle_errors: Sequence[float] | float = 0.0
) -> Location | None:
    """Least-squares point nearest to the rays, its mean range and covariance; None when the rays
    are too parallel (the camera barely moved) or the point lies behind the cameras.
    ``angle_errors`` (radians, one per ray or one for all): how far each ray may be off; the
    covariance follows the rays' geometry (nearly parallel rays leave the depth loose), with the
    rays' own misses of the point."""
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
    errs = np.broadcast_to(np.asarray(angle_errors, dtype=np.float64), (len(rays),))
    # a ray off by e radians misses by range x e: weigh each ray's projector by it
    W = sum(
        (np.eye(3) - np.outer(d, d)) / max(r * e, 1e-9) ** 2 for (_, d), r, e in zip(rays, ranges, errs, strict=True)
    )
    misses = [float(np.linalg.norm((np.eye(3) - np.outer(d, d)) @ (X - c))) for c, d in rays]
    try:
        geometric = np.linalg.inv(W) if errs.max() > 0 else np.zeros((3, 3))
    except np.linalg.LinAlgError:
        geometric = np.eye(3) * math.inf
    return Location(X, float(np.mean(ranges)), geometric + np.eye(3) * float(np.mean(np.square(misses))) / len(rays))


def _rays(samples: dict[int, Obs], poses: Track) -> list[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """Rays (centre, direction) through the box centres, with their sample indices; boxes cut off
    by the image border are left out when at least two others remain (their centres are biased)."""
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


def ground_contact(
    samples: dict[int, Obs],
    poses: Track,
    height: float,
    down: np.ndarray | None,
    min_depression_deg: float = 1.0,
    pixel_error: float = 0.0,
) -> Location | None:
    """An object standing on the ground, located from single frames: the bottom centre of its box
    is where it meets the ground, ``height`` (the camera's height, pose units) below the camera.
    Median over the nearer half of the observations whose box bottom is neither cut off by the
    image nor hidden by a nearer object (``Obs.occluder_bottom``: those only when there are no
    others), with their median range. Covariance: how far ``pixel_error`` (and a cut-off side)
    moves each sighting's ground point, the ground between a hidden foot's occluder and the box,
    and the positions' spread over the number of sightings."""
    pts, ranges, covs, keys = [], [], [], []
    whole = {k: o for k, o in samples.items() if not o.cut_at_bottom()}
    # a foot hidden by a nearer object counts only when no other is seen: the object stands
    # somewhere between the occluder's ground contact and its own box's, and is as loose as that
    usable = {k: o for k, o in whole.items() if o.occluder_bottom is None} or whole
    for k, o in sorted(usable.items()):
        u, v = (o.box[0] + o.box[2]) / 2.0, o.box[3]
        X = poses.ground_point(k, u, v, height, down, min_depression_deg)
        if X is None:
            continue
        pts.append(X)
        keys.append(k)
        ranges.append(float(np.linalg.norm(X - poses.C[poses.row(k)])))
        lower = poses.ground_point(k, u, v + 1.0, height, down, min_depression_deg)
        beside = poses.ground_point(k, u + 1.0, v, height, down, min_depression_deg)
        su, sv = _pixel_sigmas(o, pixel_error)
        if lower is None or beside is None:
            cov = np.eye(3) * math.inf
        else:
            cov = su**2 * np.outer(beside - X, beside - X) + sv**2 * np.outer(lower - X, lower - X)
        if o.occluder_bottom is not None:  # to where the occluder stands
            front = poses.ground_point(k, u, o.occluder_bottom, height, down, min_depression_deg)
            gap = (front - X) if front is not None else None
            cov = cov + (np.outer(gap, gap) if gap is not None else np.eye(3) * math.inf)
        covs.append(cov)
    if not pts:
        return None
    # The error grows with the square of the distance: keep the nearer half of the sightings.
    order = np.argsort(ranges, kind="stable")[: max(1, (len(pts) + 1) // 2)]
    near = np.array(pts)[order]
    X = np.median(near, axis=0)
    spread = (near - X).T @ (near - X) / len(order)
    # the pixel term is not averaged down over the sightings: the poses' tilt errors, which it also
    # stands for, are shared by sightings close in time
    cov = np.mean(np.array(covs)[order], axis=0) + spread / len(order)
    used = sorted(keys[i] for i in order)
    return Location(X, float(np.median(np.array(ranges)[order])), cov, "ground", used[len(used) // 2])


def locate(
    samples: dict[int, Obs],
    poses: Track,
    camera_height: float | None,
    min_spread_deg: float,
    level: bool = True,
    pixel_error: float = 0.0,
) -> Location | None:
    """World position, viewing range and covariance of an object from its sightings: where it
    meets the ground when the camera height is known, else by triangulation; None when neither
    works. ``level``: the views are level (the ground plane is below each camera's own down axis,
    immune to drift of the estimated pitch); else the ground is below the cameras' mean down."""
    if camera_height:
        loc = ground_contact(samples, poses, camera_height, None if level else poses.down(), pixel_error=pixel_error)
        if loc is not None:
            return loc
    rays = _rays(samples, poses)
    focal = np.median([poses.K[poses.row(k)][0, 0] for k in samples if poses.row(k) is not None] or [math.inf])
    errors = [math.hypot(*_pixel_sigmas(samples[k], pixel_error)) / focal for k, _ in rays]
    loc = triangulate([r for _, r in rays], min_spread_deg, errors or 0.0)
    return None if loc is None else loc._replace(sample=rays[len(rays) // 2][0])


def ray_line(
    samples: dict[int, Obs],
    poses: Track,
    basis: np.ndarray,
    camera_height: float | None,
    max_range: float,
    pixel_error: float,
    level: bool = True,
) -> Located | None:
    """An instance seen from one place only, on the ground plane: somewhere along its middle
    sighting's viewing ray, between the camera and where the ray meets the ground (a point of
    the object is seen as far below the horizon as the box centre, so the object stands no
    farther), or ``max_range`` (the farthest any instance of the video was located) for a ray at
    or above the horizon: the mean and covariance of a uniform position on that segment, across
    it by the pixel error. None when no sighting has a pose."""
    rays = _rays(samples, poses)
    if not rays:
        return None
    k, (c, d) = rays[len(rays) // 2]
    c2, d2 = basis @ c, basis @ d
    n = float(np.linalg.norm(d2))
    if n < 1e-9:
        return None
    d2 = d2 / n
    reach = max_range
    if camera_height:
        down = poses.down_at(k) if level else poses.down()
        s = float(d @ down)
        if s > 1e-6:
            reach = min(reach, camera_height * math.sqrt(max(1.0 - s * s, 0.0)) / s)
    focal = float(poses.K[poses.row(k)][0, 0])
    across = (reach / 2.0) * math.hypot(*_pixel_sigmas(samples[k], pixel_error)) / focal
    cov = reach**2 / 12.0 * np.outer(d2, d2) + across**2 * (np.eye(2) - np.outer(d2, d2))
    return Located(c2 + d2 * reach / 2.0, cov, reach / 2.0, 0.0, "ray", k)


def locate_instances(
    instances: Sequence[ClipInstance],
    poses: Track,
    basis: np.ndarray,
    camera_height: float | None,
    min_spread_deg: float,
    pixel_error: float,
    level: bool = True,
) -> None:
    """Fill in each instance's ``where`` (``Located``) where it can be placed: by ground contact
    or triangulation, else along its viewing ray (bounded by the farthest located instance)."""
    for ci in instances:
        ci.where = None
        loc = locate(ci.samples, poses, camera_height, min_spread_deg, level, pixel_error)
        if loc is None:
            continue
        widths = [
            (o.box[2] - o.box[0]) / poses.K[poses.row(k)][0, 0]
            for k, o in ci.samples.items()
            if poses.row(k) is not None and not o.clipped()
        ]
        extent = loc.range * float(np.median(widths)) if widths else 0.0
        # a large object's ground contact moves with the viewpoint: uniform over its width
        cov = basis @ loc.cov @ basis.T + np.eye(2) * extent**2 / 12.0
        ci.where = Located(basis @ loc.position, cov, loc.range, extent, loc.how, loc.sample)
    ranges = [ci.where.range for ci in instances if ci.where is not None]
    max_range = max(ranges) if ranges else 0.0
    if max_range <= 0:
        return
    for ci in instances:
        if ci.where is None:
            ci.where = ray_line(ci.samples, poses, basis, camera_height, max_range, pixel_error, level)
