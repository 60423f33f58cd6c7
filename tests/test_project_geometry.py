"""Projection geometry, checked against two independent implementations (py360convert, ffmpeg's
v360) and against analytic truth (``geometry.project_to_view`` / the pinhole intrinsics)."""

from __future__ import annotations

import math
import subprocess

import cv2
import numpy as np
import py360convert
import pytest
from py360convert import utils as p3u

from vsi_wild import ids
from vsi_wild.stages import geometry
from vsi_wild.stages.project import Projector, ProjectParams, build_yuv_maps, equirect_coords, render_view

PW, PH = 2048, 1024  # panorama
VW, VH = 1280, 720  # view
VFOV = geometry.vfov_deg(90.0, VW, VH)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10.0 * math.log10(255.0**2 / mse)


def smooth_texture(h: int, w: int, seed: int = 0, channels: int = 3) -> np.ndarray:
    """Natural-looking texture: octaves of smooth noise (detail down to a few pixels)."""
    rng = np.random.default_rng(seed)
    acc = np.zeros((h, w, channels))
    for octave, amp in ((8, 60.0), (32, 40.0), (128, 25.0), (512, 12.0)):
        small = rng.normal(size=(max(2, h * octave // w), octave, channels))
        acc += amp * cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC).reshape(h, w, channels)
    return np.clip(128 + acc, 0, 255).astype(np.uint8)


# --------------------------------------------------------------------------------- conventions
def test_conventions_pinned():
    assert ids.VIEWS == {"front": 0.0, "right": 90.0, "back": 180.0, "left": 270.0}
    assert geometry.vfov_deg(90, 1920, 1080) == pytest.approx(58.7155, abs=1e-4)
    p = ProjectParams()
    assert (p.width, p.height, p.hfov_deg, p.pitch_deg) == (1920, 1080, 90.0, 0.0)
    assert p.vfov_deg == pytest.approx(58.7155, abs=1e-4)
    assert p.views == ["front", "right", "back", "left"]


def test_yaw_turns_right_and_which_view_is_left():
    # Panorama: longitudes < 0 (left half of the image) black, > 0 white.
    pano = np.zeros((PH, PW, 3), np.uint8)
    pano[:, PW // 2 :] = 255
    views = {name: render_view(pano, yaw, 0, 90, 320, 180)[..., 0].astype(int) for name, yaw in ids.VIEWS.items()}
    assert (views["right"] == 255).all()  # yaw +90 looks into the white (positive-longitude) half
    assert (views["left"] == 0).all()
    f, b = views["front"], views["back"]
    assert (f[:, :150] == 0).all() and (f[:, 170:] == 255).all()  # left of the front view is lon < 0
    assert (b[:, :150] == 255).all() and (b[:, 170:] == 0).all()  # behind: lon 135..180 then -180..-135
    # centre column of view yaw ψ samples panorama column (0.5 + ψ/360)·W - 0.5
    for yaw in ids.VIEWS.values():
        u, _ = equirect_coords(PW, PH, 321, 181, 90, yaw, 0)
        want = ((0.5 + yaw / 360.0) * PW - 0.5 + 0.5) % PW - 0.5
        assert u[90, 160] == pytest.approx(want, abs=1e-6)


# --------------------------------------------------------------------------------- py360convert
@pytest.mark.parametrize("yaw", list(ids.VIEWS.values()) + [37.5])
@pytest.mark.parametrize("pitch", [0.0, 30.0, -75.0])
def test_maps_equal_py360convert_coordinates(yaw, pitch):
    """Our sampling positions are py360convert's own (xyzpers -> xyz2uv -> uv2coor)."""
    w, h = 320, 180
    vf = geometry.vfov_deg(90, w, h)
    xyz = p3u.xyzpers(math.radians(90), math.radians(vf), -math.radians(yaw), math.radians(pitch), (h, w), 0.0)
    pu, pv = p3u.xyz2uv(xyz.astype(np.float64))
    cx, cy = p3u.uv2coor(pu[..., 0], pv[..., 0], PH, PW)
    u, v = equirect_coords(PW, PH, w, h, 90, yaw, pitch)
    du = (u - cx + PW / 2) % PW - PW / 2  # the seam: -0.5 and W - 0.5 are the same place
    assert np.abs(du).max() < 2e-3
    assert np.abs(v - cy).max() < 2e-3


def test_fast_maps_are_the_same_coordinates_in_fixed_point():
    yaws = tuple(ids.VIEWS.values())
    m = build_yuv_maps(PW, PH, 640, 360, 90.0, yaws)
    assert m is not None
    for k, yaw in enumerate(yaws):
        u, v = equirect_coords(PW, PH, 640, 360, 90, yaw, 0)
        fu = m.luma.x0[k] + m.luma.wx[k] / 256.0
        du = (fu[None, :] - u + PW / 2) % PW - PW / 2
        assert np.abs(du).max() <= 0.5 / 256 + 1e-9
        assert np.abs(m.luma.row_coords() - v).max() <= 0.5 / 64 + 1e-9
        assert ((m.luma.x1[k] - m.luma.x0[k]) % PW == 1).all()


@pytest.mark.parametrize("yaw", list(ids.VIEWS.values()) + [-37.5])
@pytest.mark.parametrize("pitch", [0.0, 40.0, -80.0])
def test_render_view_agrees_with_py360convert(yaw, pitch):
    pano = smooth_texture(PH, PW, seed=1)
    ours = render_view(pano, yaw, pitch, 90.0, VW, VH)
    ref = py360convert.e2p(pano, (90.0, VFOV), yaw, pitch, (VH, VW))
    assert ours.shape == ref.shape == (VH, VW, 3)
    assert psnr(ours, ref) >= 50.0


def _i420_from_planes(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.ascontiguousarray(y), np.ascontiguousarray(u), np.ascontiguousarray(v)


@pytest.mark.parametrize(("fast", "threads"), [(True, 1), (True, 2), (False, 1)])
def test_stream_projection_luma_agrees_with_py360convert(fast, threads):
    tex = smooth_texture(PH, PW, seed=2, channels=1)[..., 0]
    uv = smooth_texture(PH // 2, PW // 2, seed=3, channels=2)
    params = ProjectParams(width=VW, height=VH, threads=threads)
    proj = Projector(PW, PH, params)
    if not fast:
        proj.fast = None  # the generic cv2 path
    else:
        assert proj.fast is not None
    out = proj.project(*_i420_from_planes(tex, uv[..., 0], uv[..., 1]))
    proj.close()
    for k, yaw in enumerate(ids.VIEWS.values()):
        ref = py360convert.e2p(tex, (90.0, VFOV), yaw, 0.0, (VH, VW))
        assert psnr(out[k, : VW * VH].reshape(VH, VW), ref) >= 50.0


def _analytic_rays(px: np.ndarray, py: np.ndarray, w: int, h: int, yaw: float) -> np.ndarray:
    """Rays through fractional view positions from the pinhole intrinsics (independent of the maps)."""
    K = geometry.view_intrinsics(w, h, 90.0)
    X = (px - K[0, 2]) / K[0, 0]
    Z = -(py - K[1, 2]) / K[1, 1]
    d = np.stack(np.broadcast_arrays(X, np.ones_like(X), Z), axis=-1)
    return d @ geometry.rotation_yaw_pitch(yaw, 0.0).T


def test_chroma_and_luma_siting_is_exact():
    """Planes filled with a smooth function of (lon, lat) at their sample sites (4:2:0 'left'
    siting: chroma (i, j) at luma (2i, 2j + 0.5)) come out equal to the function at the views'
    sample sites; a systematic offset is estimated by regression on the gradient."""

    def f(lon, lat):
        return 128 + 100 * np.sin(6 * lon) * np.cos(2 * lat) + 20 * np.sin(9 * lat)

    ju, iu = np.mgrid[0 : PH // 2, 0 : PW // 2].astype(np.float64)
    lon, lat = geometry.equirect_to_lonlat(2 * iu, 2 * ju + 0.5, PW, PH)
    U = np.clip(np.rint(f(lon, lat)), 0, 255).astype(np.uint8)
    jy, iy = np.mgrid[0:PH, 0:PW].astype(np.float64)
    lon, lat = geometry.equirect_to_lonlat(iy, jy, PW, PH)
    Y = np.clip(np.rint(f(lon, lat)), 0, 255).astype(np.uint8)
    w, h = 640, 360
    proj = Projector(PW, PH, ProjectParams(width=w, height=h))
    out = proj.project(Y, U, U.copy())
    for k, yaw in enumerate(ids.VIEWS.values()):
        for plane, (pw, ph, sx, sy, ox, oy, off) in {
            "luma": (w, h, 1, 1, 0.0, 0.0, 0),
            "chroma": (w // 2, h // 2, 2, 2, 0.0, 0.5, w * h),
        }.items():
            got = out[k, off : off + pw * ph].reshape(ph, pw).astype(np.float64)
            jj, ii = np.mgrid[0:ph, 0:pw].astype(np.float64)
            d = _analytic_rays(sx * ii + ox, sy * jj + oy, w, h, yaw)
            want = f(*geometry.dirs_to_lonlat(d))
            err = (got - want)[2:-2, 2:-2]
            gx = np.gradient(want, axis=1)[2:-2, 2:-2]
            gy = np.gradient(want, axis=0)[2:-2, 2:-2]
            shift_x = float((err * gx).sum() / (gx * gx).sum())
            shift_y = float((err * gy).sum() / (gy * gy).sum())
            assert abs(shift_x) < 0.05 and abs(shift_y) < 0.05, (plane, yaw, shift_x, shift_y)
            assert np.abs(err).max() < 1.5, (plane, yaw)


# --------------------------------------------------------------------------------- markers
MARKER_OFFSETS = [(-35.0, -18.0), (-35.0, 12.0), (0.0, 0.0), (0.0, 22.0), (28.0, -22.0), (30.0, 8.0), (12.0, -8.0)]
SIGMA_DEG = 0.3


def marker_panorama() -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    """A dark panorama with Gaussian blobs (Gaussian in angle on the sphere) at known lon/lat."""
    jj, ii = np.mgrid[0:PH, 0:PW].astype(np.float64)
    lon, lat = geometry.equirect_to_lonlat(ii, jj, PW, PH)
    dirs = geometry.lonlat_to_dirs(lon, lat)
    img = np.full((PH, PW), 20.0)
    markers = []
    for name, yaw in ids.VIEWS.items():
        for dlon, mlat in MARKER_OFFSETS:
            mlon = math.radians(geometry.wrap_deg(yaw + dlon))
            c = geometry.lonlat_to_dirs(np.array(mlon), np.array(math.radians(mlat)))
            ang = np.degrees(np.arccos(np.clip(dirs @ c, -1, 1)))
            img += 220.0 * np.exp(-0.5 * (ang / SIGMA_DEG) ** 2)
            markers.append((name, mlon, math.radians(mlat)))
    return np.clip(np.rint(img), 0, 255).astype(np.uint8), markers


def centroid(img: np.ndarray, x: float, y: float, r: int = 9) -> tuple[float, float]:
    x0, y0 = int(round(x)) - r, int(round(y)) - r
    win = img[max(0, y0) : y0 + 2 * r + 1, max(0, x0) : x0 + 2 * r + 1].astype(np.float64)
    wgt = np.clip(win - 40.0, 0, None)
    assert wgt.sum() > 100, f"no marker near ({x:.1f}, {y:.1f})"
    jj, ii = np.mgrid[0 : win.shape[0], 0 : win.shape[1]]
    return float((wgt * ii).sum() / wgt.sum()) + max(0, x0), float((wgt * jj).sum() / wgt.sum()) + max(0, y0)


def v360_view(png: str, yaw: float) -> np.ndarray:
    yaw_ff = yaw - 360.0 if yaw > 180.0 else yaw  # v360 takes yaw in [-180, 180]
    vf = f"v360=input=e:output=flat:yaw={yaw_ff}:pitch=0:h_fov=90:v_fov={VFOV:.6f}:w={VW}:h={VH}:interp=linear"
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", png, "-vf", vf, "-pix_fmt", "gray", "-f", "rawvideo", "-"],
        check=True,
        capture_output=True,
    ).stdout
    return np.frombuffer(raw, np.uint8).reshape(VH, VW)


def test_markers_land_where_geometry_says_in_ours_py360convert_and_v360(tmp_path):
    pano, markers = marker_panorama()
    png = str(tmp_path / "markers.png")
    cv2.imwrite(png, pano)
    proj = Projector(PW, PH, ProjectParams(width=VW, height=VH))
    fast = proj.project(pano, np.full((PH // 2, PW // 2), 128, np.uint8), np.full((PH // 2, PW // 2), 128, np.uint8))
    worst = {"ours": 0.0, "ours_stream": 0.0, "py360convert": 0.0, "v360": 0.0}
    for k, (name, yaw) in enumerate(ids.VIEWS.items()):
        images = {
            "ours": render_view(pano, yaw, 0.0, 90.0, VW, VH),
            "ours_stream": fast[k, : VW * VH].reshape(VH, VW),
            "py360convert": py360convert.e2p(pano, (90.0, VFOV), yaw, 0.0, (VH, VW)),
            "v360": v360_view(png, yaw),
        }
        mine = [(lon, lat) for n, lon, lat in markers if n == name]
        for lon, lat in mine:
            (px, py), front = geometry.project_to_view(
                geometry.lonlat_to_dirs(np.array(lon), np.array(lat)), VW, VH, 90.0, yaw
            )
            assert front and 0 <= px < VW and 0 <= py < VH
            for impl, img in images.items():
                cx, cy = centroid(img, px, py)
                worst[impl] = max(worst[impl], math.hypot(cx - px, cy - py))
    assert worst["ours"] <= 1.0, worst
    assert worst["ours_stream"] <= 1.0, worst
    assert worst["py360convert"] <= 1.0, worst
    assert worst["v360"] <= 2.5, worst
