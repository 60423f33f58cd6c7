"""The geometry every stage shares: panorama coordinates, perspective views, world poses.

Conventions (pinned by tests against py360convert and ffmpeg's v360):

* **Camera frame of a panorama**: x = right, y = forward (the panorama's centre column), z = up.
  Longitude ``lon = atan2(x, y)`` grows to the right; latitude ``lat = asin(z)`` grows upwards.
* **Equirectangular pixels** (W x H, pixel centres at half-integers, as py360convert samples):
  ``u = (lon / 2π + 0.5) · W - 0.5``, ``v = (0.5 - lat / π) · H - 0.5`` (integer u, v are pixel
  centres). So a view of yaw ψ is centred on column ``(0.5 + ψ/360) · W``.
* **Views**: yaw ψ (degrees, positive turns right, so "right" = 90, "left" = 270 = -90) and pitch
  θ (positive looks up), horizontal FOV ``hfov``; the vertical FOV follows from the aspect ratio,
  ``vfov = 2·atan(tan(hfov/2) · h / w)`` (58.7155° for 16:9 at 90°).
* **View pixels** (py360convert's convention): the outermost pixel *centres* lie on the FOV edge:
  column i looks along ``X = tan(hfov/2) · (2i/(w-1) - 1)`` (right), row j along
  ``Y = tan(vfov/2) · (1 - 2j/(h-1))`` (up), forward 1. The pinhole intrinsics in pixel-centre
  coordinates are therefore ``fx = (w-1) / (2 tan(hfov/2))``, ``cx = (w-1)/2`` (same for y).
* **World**: metres, x east, y north, z up. A camera of yaw ψ faces ``(sin ψ, cos ψ, 0)``.
"""

from __future__ import annotations

import math

import numpy as np


def vfov_deg(hfov_deg: float, width: int, height: int) -> float:
    return math.degrees(2.0 * math.atan(math.tan(math.radians(hfov_deg) / 2.0) * height / width))


def rotation_yaw_pitch(yaw_deg: float, pitch_deg: float, roll_deg: float = 0.0) -> np.ndarray:
    """3x3 matrix taking view-frame vectors (right, forward, up) to the parent frame, for a view
    turned by yaw (right-positive), then tilted by pitch (up-positive), then rolled."""
    a, b, c = np.radians([yaw_deg, pitch_deg, roll_deg])
    # roll about forward (y): positive tilts the right axis downwards (clockwise as seen by the camera)
    roll = np.array([[np.cos(c), 0.0, np.sin(c)], [0.0, 1.0, 0.0], [-np.sin(c), 0.0, np.cos(c)]])
    # pitch about right (x): forward goes up for positive pitch
    pitch = np.array([[1.0, 0.0, 0.0], [0.0, np.cos(b), -np.sin(b)], [0.0, np.sin(b), np.cos(b)]])
    # yaw about up (z): forward goes right for positive yaw
    yaw = np.array([[np.cos(a), np.sin(a), 0.0], [-np.sin(a), np.cos(a), 0.0], [0.0, 0.0, 1.0]])
    return yaw @ pitch @ roll


def view_rays(
    width: int, height: int, hfov_deg: float, yaw_deg: float = 0.0, pitch_deg: float = 0.0, vfov: float | None = None
) -> np.ndarray:
    """Unit ray directions (h, w, 3) of a perspective view, in the panorama's camera frame."""
    vf = vfov if vfov is not None else vfov_deg(hfov_deg, width, height)
    tx = math.tan(math.radians(hfov_deg) / 2.0)
    ty = math.tan(math.radians(vf) / 2.0)
    xs = np.linspace(-tx, tx, width, dtype=np.float64)
    ys = np.linspace(ty, -ty, height, dtype=np.float64)
    X, Y = np.meshgrid(xs, ys)
    d = np.stack([X, np.ones_like(X), Y], axis=-1)
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    return d @ rotation_yaw_pitch(yaw_deg, pitch_deg).T


def dirs_to_lonlat(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, y, z = d[..., 0], d[..., 1], d[..., 2]
    return np.arctan2(x, y), np.arctan2(z, np.hypot(x, y))


def lonlat_to_dirs(lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    c = np.cos(lat)
    return np.stack([c * np.sin(lon), c * np.cos(lon), np.sin(lat)], axis=-1)


def lonlat_to_equirect(lon: np.ndarray, lat: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    u = (lon / (2.0 * np.pi) + 0.5) * width - 0.5
    v = (0.5 - lat / np.pi) * height - 0.5
    return u, v


def equirect_to_lonlat(u: np.ndarray, v: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    lon = ((np.asarray(u) + 0.5) / width - 0.5) * 2.0 * np.pi
    lat = (0.5 - (np.asarray(v) + 0.5) / height) * np.pi
    return lon, lat


def view_intrinsics(width: int, height: int, hfov_deg: float, vfov: float | None = None) -> np.ndarray:
    """Pinhole K of a view in pixel-centre coordinates (see the module docstring)."""
    vf = vfov if vfov is not None else vfov_deg(hfov_deg, width, height)
    fx = (width - 1) / (2.0 * math.tan(math.radians(hfov_deg) / 2.0))
    fy = (height - 1) / (2.0 * math.tan(math.radians(vf) / 2.0))
    return np.array([[fx, 0.0, (width - 1) / 2.0], [0.0, fy, (height - 1) / 2.0], [0.0, 0.0, 1.0]])


def project_to_view(
    points_cam: np.ndarray, width: int, height: int, hfov_deg: float, yaw_deg: float = 0.0, pitch_deg: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Pixel coordinates (n, 2) of camera-frame points in a view, and a mask of points in front."""
    R = rotation_yaw_pitch(yaw_deg, pitch_deg)
    local = np.asarray(points_cam, dtype=np.float64) @ R  # parent -> view frame (R is orthonormal)
    K = view_intrinsics(width, height, hfov_deg)
    front = local[..., 1] > 1e-9
    depth = np.where(front, local[..., 1], np.nan)
    px = K[0, 0] * local[..., 0] / depth + K[0, 2]
    py = -K[1, 1] * local[..., 2] / depth + K[1, 2]
    return np.stack([px, py], axis=-1), front


def world_to_camera(
    points: np.ndarray, position: np.ndarray, yaw_deg: float, pitch_deg: float = 0.0, roll_deg: float = 0.0
) -> np.ndarray:
    """World points -> the panorama camera frame of a camera at ``position`` with that attitude."""
    R = rotation_yaw_pitch(yaw_deg, pitch_deg, roll_deg)
    # World axes: x east, y north, z up = (right, forward, up) of a camera of yaw 0.
    return (np.asarray(points, dtype=np.float64) - np.asarray(position, dtype=np.float64)) @ R


def heading_vector(yaw_deg: float) -> np.ndarray:
    a = math.radians(yaw_deg)
    return np.array([math.sin(a), math.cos(a), 0.0])


def wrap_deg(angle: float | np.ndarray) -> float | np.ndarray:
    """Wrap to [-180, 180)."""
    return (np.asarray(angle) + 180.0) % 360.0 - 180.0
