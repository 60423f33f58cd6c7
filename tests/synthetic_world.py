"""A tiny ray-cast world for pose tests: a textured room with pillars, rendered into perspective
views with stages.geometry's conventions. Independent of the pipeline's pose code: the camera
path is given here, so the truth of every motion is known exactly."""

from __future__ import annotations

import math

import cv2
import numpy as np

from vsi_wild.stages import geometry


def _texture(seed: int, size: int = 512) -> np.ndarray:
    rng = np.random.default_rng(seed)
    tex = np.zeros((size, size), np.float32)
    for scale, amp in ((64, 0.5), (16, 0.3), (4, 0.2)):
        small = rng.random((size // scale + 1, size // scale + 1)).astype(np.float32)
        tex += amp * cv2.resize(small, (size, size), interpolation=cv2.INTER_CUBIC)
    tex = (tex - tex.min()) / (tex.max() - tex.min())
    colour = rng.random(3) * 0.6 + 0.2
    return (np.stack([tex * c for c in colour], -1) * 255).astype(np.float32)


class Room:
    """Axis-aligned room [-X, X] x [-Y, Y] x [0, H] with square pillars; world z up, metres."""

    def __init__(
        self,
        X: float = 8.0,
        Y: float = 8.0,
        H: float = 3.0,
        seed: int = 0,
        pillars=((2.5, 2.0), (-3.0, 3.5), (-2.0, -3.0), (3.5, -2.5), (0.0, 5.5), (5.5, 0.5)),
    ):
        self.X, self.Y, self.H = X, Y, H
        self.pillars = [(px, py, 0.35) for px, py in pillars]
        self.tex = [_texture(seed * 100 + i) for i in range(8)]

    def render(
        self, position, yaw_deg: float, view_yaw: float, width: int, height: int, hfov: float = 90.0
    ) -> np.ndarray:
        d = geometry.view_rays(width, height, hfov, yaw_deg=view_yaw).reshape(-1, 3)
        R = geometry.rotation_yaw_pitch(yaw_deg, 0.0)
        d = d @ R.T  # camera frame -> world
        o = np.asarray(position, np.float64)
        best_t = np.full(len(d), np.inf)
        uv = np.zeros((len(d), 2))
        tid = np.zeros(len(d), np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            planes = [(0, -self.X, 0), (0, self.X, 1), (1, -self.Y, 2), (1, self.Y, 3), (2, 0.0, 4), (2, self.H, 5)]
            for axis, val, k in planes:
                t = (val - o[axis]) / d[:, axis]
                p = o + t[:, None] * d
                ok = (t > 1e-6) & (t < best_t)
                others = [a for a in range(3) if a != axis]
                best_t = np.where(ok, t, best_t)
                uv = np.where(ok[:, None], p[:, others], uv)
                tid = np.where(ok, k, tid)
            for j, (px, py, r) in enumerate(self.pillars):
                for axis, val in ((0, px - r), (0, px + r), (1, py - r), (1, py + r)):
                    t = (val - o[axis]) / d[:, axis]
                    p = o + t[:, None] * d
                    other = 1 - axis
                    c = (px, py)[other]
                    ok = (
                        (t > 1e-6)
                        & (t < best_t)
                        & (np.abs(p[:, other] - c) <= r)
                        & (p[:, 2] >= 0)
                        & (p[:, 2] <= self.H)
                    )
                    best_t = np.where(ok, t, best_t)
                    uv = np.where(ok[:, None], np.stack([p[:, other] + 7 * j, p[:, 2]], -1), uv)
                    tid = np.where(ok, 6 + (j % 2), tid)
        out = np.zeros((len(d), 3), np.float32)
        size = self.tex[0].shape[0]
        scale = size / 4.0  # texture repeats every 4 m
        for k in range(8):
            sel = tid == k
            if not sel.any():
                continue
            mx = (uv[sel, 0] * scale) % size
            my = (uv[sel, 1] * scale) % size
            x0 = np.floor(mx).astype(np.int64)
            y0 = np.floor(my).astype(np.int64)
            fx = (mx - x0)[:, None]
            fy = (my - y0)[:, None]
            x1, y1 = (x0 + 1) % size, (y0 + 1) % size
            t = self.tex[k]
            out[sel] = (t[y0, x0] * (1 - fx) + t[y0, x1] * fx) * (1 - fy) + (t[y1, x0] * (1 - fx) + t[y1, x1] * fx) * fy
        return np.clip(out, 0, 255).astype(np.uint8).reshape(height, width, 3)


def walk(n: int, dt: float = 0.5):
    """A path with forward, sideways, backward and diagonal motion, a pause and turns:
    list of (x, y, yaw_deg) at t_k = k * dt."""
    poses = []
    x, y, yaw = -4.0, -4.0, 20.0
    for k in range(n):
        t = k * dt
        phase = int(t // 6) % 6
        speed = 0.8
        if phase == 0:
            rel = 0.0  # forward
        elif phase == 1:
            rel = 90.0  # sideways right
        elif phase == 2:
            rel = 180.0  # backward
        elif phase == 3:
            rel, speed = 0.0, 0.0  # pause, turning
            yaw += 15.0 * dt
        elif phase == 4:
            rel = -45.0  # diagonal forward-left
        else:
            rel = 0.0
            yaw -= 12.0 * dt  # walking while turning
        poses.append((x, y, yaw))
        a = math.radians(yaw + rel)
        x, y = x + speed * dt * math.sin(a), y + speed * dt * math.cos(a)
    return poses
