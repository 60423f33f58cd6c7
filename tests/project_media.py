"""Small synthetic media for the projection tests (made with PyAV / ffmpeg, nothing downloaded)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np


def write_video(
    path: Path,
    frames: Callable[[int], np.ndarray],
    times: Sequence[float],
    *,
    time_base: Fraction = Fraction(1, 1000),
    fmt: str | None = None,
    lossless: bool = False,
    rate: float | None = None,
) -> Path:
    """Encode RGB frames ``frames(i)`` at the given times (seconds; any spacing: VFR) with x264."""
    first = frames(0)
    h, w = first.shape[:2]
    with av.open(str(path), "w", format=fmt) as c:
        s = c.add_stream("libx264", rate=Fraction(rate or 10).limit_denominator(1000))
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        s.time_base = time_base
        s.codec_context.time_base = time_base
        s.options = {"preset": "ultrafast", **({"qp": "0"} if lossless else {"crf": "18"})}
        for i, t in enumerate(times):
            f = av.VideoFrame.from_ndarray(first if i == 0 else frames(i), format="rgb24")
            f.pts = int(round(t / time_base))
            f.time_base = time_base
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode(None):
            c.mux(p)
    return path


def frame_times(path: Path) -> list[float]:
    """Presentation times of a file's decoded video frames, relative to the first."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        pts = [f.pts for f in c.decode(s)]
        tb = s.time_base
    return [float((p - pts[0]) * tb) for p in pts]


def quadrant_panorama(w: int, h: int) -> np.ndarray:
    """Longitude [-45, 45) red, [45, 135) green, [135, 180) u [-180, -135) blue, [-135, -45) yellow."""
    img = np.zeros((h, w, 3), np.uint8)
    lon = ((np.arange(w) + 0.5) / w - 0.5) * 360.0
    colours = {"front": (220, 30, 30), "right": (30, 200, 30), "back": (30, 30, 220), "left": (220, 220, 30)}
    for name, centre in (("front", 0), ("right", 90), ("back", 180), ("left", -90)):
        d = (lon - centre + 180.0) % 360.0 - 180.0
        img[:, np.abs(d) < 45.0] = colours[name]
    return img


QUADRANT_COLOURS = {"front": (220, 30, 30), "right": (30, 200, 30), "back": (30, 30, 220), "left": (220, 220, 30)}


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True)


def astronaut_face() -> np.ndarray:
    """The face of scikit-image's astronaut photograph (public domain), 240x210 RGB."""
    from skimage import data

    return np.ascontiguousarray(data.astronaut()[20:260, 120:330])


def paste(img: np.ndarray, patch: np.ndarray, cx: float, cy: float) -> tuple[int, int, int, int]:
    """Paste ``patch`` centred at (cx, cy) (clipped); returns its box x0, y0, x1, y1."""
    ph, pw = patch.shape[:2]
    x0, y0 = int(round(cx - pw / 2)), int(round(cy - ph / 2))
    xa, ya, xb, yb = max(0, x0), max(0, y0), min(img.shape[1], x0 + pw), min(img.shape[0], y0 + ph)
    img[ya:yb, xa:xb] = patch[ya - y0 : yb - y0, xa - x0 : xb - x0]
    return xa, ya, xb, yb


def rgb_to_i420(rgb: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_I420).reshape(-1)


def i420_to_rgb(buf: np.ndarray, w: int, h: int) -> np.ndarray:
    return cv2.cvtColor(buf.reshape(h * 3 // 2, w), cv2.COLOR_YUV2RGB_I420)
