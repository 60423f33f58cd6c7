"""Panorama -> perspective views with faces blurred (the paper's stage A.1.3).

Each equirectangular source becomes four perspective videos, front/right/back/left = yaw
0/90/180/270, pitch 0, horizontal FOV 90°, 1920x1080 by default; the vertical FOV follows from
the aspect ratio (58.7155° for 16:9). Geometry and conventions are ``stages/geometry.py``'s,
i.e. py360convert's (pinned by tests against ``py360convert.e2p`` and ffmpeg's ``v360``):

* positive yaw turns right: "right" (90) looks at panorama column 0.75·W, "left" (270) at 0.25·W;
* view pixel centres: the outermost centres lie on the FOV edges (``linspace(-tan, tan, w)``);
* panorama pixel centres: ``u = (lon/2π + 0.5)·W - 0.5``, ``v = (0.5 - lat/π)·H - 0.5``;
* bilinear sampling; the seam wraps (column -0.5 interpolates columns W-1 and 0).

Speed: the sampling maps are built once per geometry (cached) and applied to the decoder's own
YUV 4:2:0 planes, so the panorama is never converted to RGB and the views go to the encoder
without a conversion either. For pitch 0 a view's source column depends only on the output
column, which a small numba kernel exploits (``_remap_plane``: per output column, blend its two
source columns over the rows it reads, then resample down the column, reading a transposed strip
of the source that the views share); other geometries use ``cv2.remap`` on py360convert-style
padded planes. Chroma samples are
sited as H.264/MPEG-2 4:2:0 defines them ("left": co-sited with even luma columns, between luma
rows), in the source and in the views.

Streaming (``project_source``): one decode feeds four encoders, each in its own thread; frames keep
their decoded timestamps (variable frame rate included); audio is dropped; faces are blurred in
every frame before it reaches an encoder (``stages/faces.FaceBlurrer``), so no unblurred view frame
is ever written anywhere. Memory is a few frames, whatever the video's length.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Literal, cast

import av
import cv2
import numba
import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator

from vsi_wild import ids, schema
from vsi_wild.digest import sha256_file
from vsi_wild.errors import UnitError
from vsi_wild.stages import geometry
from vsi_wild.stages.faces import (
    FaceBlurrer,
    FaceDetector,
    FaceParams,
    ReadyFrame,
    auto_detect_width,
    detection_every,
)
from vsi_wild.stages.video_io import (
    EncoderSettings,
    ThreadedWriter,
    VideoReader,
    VideoWriter,
    inspect_written,
    yuv420_planes,
)

ViewName = Literal["front", "right", "back", "left"]


class ProjectParams(BaseModel):
    """The `project` config section: which views, at what size, and how they are encoded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    views: list[ViewName] = Field(
        default_factory=lambda: cast(list[ViewName], list(ids.VIEWS)), description="views to write"
    )
    width: int = Field(1920, ge=16, description="view width (even)")
    height: int = Field(1080, ge=16, description="view height (even); vertical FOV follows from the aspect")
    hfov_deg: float = Field(90.0, gt=0, lt=180)
    pitch_deg: float = Field(0.0, ge=-90, le=90, description="0 in the paper; nonzero uses the generic path")
    interpolation: Literal["linear", "cubic"] = Field("linear", description="cubic uses the generic path (~4x)")
    codec: str = "libx264"
    preset: str = Field("veryfast", description="x264 preset")
    crf: int = Field(20, ge=0, le=51)
    encoder_threads: int = Field(
        2,
        ge=1,
        description="threads per encoder, pinned: x264's output depends on its thread count (1, 2 and 3 "
        "threads give three different files of the same frames), and its automatic count follows the CPUs the "
        "process may use, so the same source projected on another machine would give other views and other "
        "fingerprints for every later stage. 2 is what the automatic count was on the 2-core machines the "
        "sample's reference build came from",
    )
    faststart: bool = Field(True, description="moov atom first (streamable files)")
    min_aspect: float = Field(1.98, description="equirectangular sources are 2:1 (width/height in range)")
    max_aspect: float = 2.02
    queue_frames: int = Field(4, ge=1, description="frames buffered per encoder thread")
    threads: int = Field(
        1,
        ge=1,
        description="threads projecting one frame (the encoders have their own); 2 "
        "buys wall time on an idle machine for ~25% more CPU (measured), and the pipeline runs "
        "several sources at once",
    )

    @field_validator("width", "height")
    @classmethod
    def _even(cls, v: int) -> int:
        if v % 2:
            raise ValueError("must be even (4:2:0 video)")
        return v

    @field_validator("views")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if not v or len(set(v)) != len(v):
            raise ValueError("views must be a non-empty list of distinct view names")
        return v

    @property
    def vfov_deg(self) -> float:
        return geometry.vfov_deg(self.hfov_deg, self.width, self.height)

    def encoder(self) -> EncoderSettings:
        return EncoderSettings(self.codec, self.preset, self.crf, self.encoder_threads, self.faststart)


# ------------------------------------------------------------------------------------ geometry
def equirect_coords(
    src_w: int,
    src_h: int,
    width: int,
    height: int,
    hfov_deg: float,
    yaw_deg: float,
    pitch_deg: float = 0.0,
    px: np.ndarray | None = None,
    py: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Panorama pixel coordinates (u, v) sampled by view pixel positions (px, py).

    px, py are in view pixels (default: every pixel centre); u is wrapped into [-0.5, W - 0.5).
    This is ``geometry.view_rays`` generalised to fractional positions (chroma sites).
    """
    if px is None or py is None:
        py, px = np.mgrid[0:height, 0:width].astype(np.float64)
    vf = geometry.vfov_deg(hfov_deg, width, height)
    tx = math.tan(math.radians(hfov_deg) / 2.0)
    ty = math.tan(math.radians(vf) / 2.0)
    X = tx * (2.0 * np.asarray(px, np.float64) / (width - 1) - 1.0)
    Y = ty * (1.0 - 2.0 * np.asarray(py, np.float64) / (height - 1))
    d = np.stack(np.broadcast_arrays(X, np.ones_like(X), Y), axis=-1)
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    d = d @ geometry.rotation_yaw_pitch(yaw_deg, pitch_deg).T
    lon, lat = geometry.dirs_to_lonlat(d)
    u, v = geometry.lonlat_to_equirect(lon, lat, src_w, src_h)
    u = np.where(u >= src_w - 0.5, u - src_w, u)  # atan2's +pi edge: same column as -pi
    return u, v


@dataclass(frozen=True)
class PlaneMaps:
    """Separable fixed-point bilinear maps of one plane for several views of pitch 0.

    x0, x1 (int32), wx (uint16): (n_views, w) the two source columns of each output column and
    the 8-bit weight of x1; rows_t (uint16): (w, h), transposed because the kernel runs down
    columns: the source row of output pixel (j, i) relative to ``rmin`` (high 10 bits) and the
    6-bit weight of the row below it (low 6 bits), shared by the views (turning about the vertical
    axis changes longitude only). Rows rmin .. rmin + nrows - 1 are all a view reads; output column
    i reads rows col_lo[i] .. col_hi[i] of them (fewer towards the view's sides). (6 bits: 1/64
    px, finer than OpenCV's and so py360convert's 1/32.)
    """

    x0: np.ndarray
    x1: np.ndarray
    wx: np.ndarray
    rmin: int
    nrows: int
    rows_t: np.ndarray  # (w, h) uint16
    col_lo: np.ndarray  # (w,) int32: first source row (relative to rmin) that an output column reads
    col_hi: np.ndarray  # (w,) int32: last one

    def row_coords(self) -> np.ndarray:
        """The source row coordinate each output pixel samples (float, (h, w))."""
        rows = self.rows_t.T
        return self.rmin + (rows >> 6) + (rows & 63) / 64.0


@dataclass(frozen=True)
class YuvMaps:
    src_w: int
    src_h: int
    width: int
    height: int
    yaws: tuple[float, ...]
    luma: PlaneMaps
    chroma: PlaneMaps


def _fixed(c: np.ndarray, bits: int = 8) -> tuple[np.ndarray, np.ndarray]:
    one = 1 << bits
    i = np.floor(c).astype(np.int64)
    w = np.rint((c - i) * one).astype(np.int64)
    carry = w == one
    return i + carry, np.where(carry, 0, w)


def _plane_maps(us: list[np.ndarray], v: np.ndarray, src_w: int, src_h: int) -> PlaneMaps | None:
    """us: per view (w,) source column of each output column; v: (h, w) source rows.
    None when a row outside [0, H-1) would be needed (a view reaching a pole)."""
    x0, wx = _fixed(np.stack(us))
    y0, wy = _fixed(v, 6)
    if y0.min() < 0 or y0.max() > src_h - 2:
        return None
    rmin = int(y0.min())
    if y0.max() - rmin >= 1023:
        return None  # a view this tall does not fit the packed rows (the generic path copes)
    rel = y0 - rmin
    rows = ((rel << 6) | wy).astype(np.uint16)
    return PlaneMaps(
        x0=np.ascontiguousarray(x0 % src_w, dtype=np.int32),
        x1=np.ascontiguousarray((x0 + 1) % src_w, dtype=np.int32),
        wx=np.ascontiguousarray(wx, dtype=np.uint16),
        rmin=rmin,
        nrows=int(y0.max()) + 2 - rmin,
        rows_t=np.ascontiguousarray(rows.T),
        col_lo=np.ascontiguousarray(rel.min(axis=0), dtype=np.int32),
        col_hi=np.ascontiguousarray(rel.max(axis=0) + 1, dtype=np.int32),
    )


@functools.lru_cache(maxsize=8)
def build_yuv_maps(
    src_w: int, src_h: int, width: int, height: int, hfov_deg: float, yaws: tuple[float, ...]
) -> YuvMaps | None:
    """The fast path's maps for views of pitch 0 (cached per geometry); None when the geometry
    needs the generic path. Chroma sample (i, j) sits at luma (2i, 2j + 0.5), in the source as
    in the views."""
    if src_w % 2 or src_h % 2 or width % 2 or height % 2:
        return None
    planes = []
    for cols, rows, to_plane, (pw, ph) in (
        (np.arange(width, dtype=np.float64), np.arange(height, dtype=np.float64), lambda u, v: (u, v), (src_w, src_h)),
        (
            2.0 * np.arange(width // 2, dtype=np.float64),
            2.0 * np.arange(height // 2, dtype=np.float64) + 0.5,
            lambda u, v: (u / 2.0, (v - 0.5) / 2.0),
            (src_w // 2, src_h // 2),
        ),
    ):
        _, v = to_plane(*equirect_coords(src_w, src_h, width, height, hfov_deg, 0.0, 0.0, cols[None, :], rows[:, None]))
        us = []
        for yaw in yaws:
            # a column samples one source column at pitch 0: its top row says which
            u, vt = to_plane(*equirect_coords(src_w, src_h, width, height, hfov_deg, yaw, 0.0, cols, rows[0]))
            if not np.allclose(vt, v[0], atol=1e-6):
                return None
            us.append(u)
        m = _plane_maps(us, v, pw, ph)
        if m is None:
            return None
        planes.append(m)
    return YuvMaps(src_w, src_h, width, height, tuple(yaws), planes[0], planes[1])


@numba.njit(nogil=True, fastmath=True, cache=True, boundscheck=False)
def _remap_plane(
    strip_t: np.ndarray,
    x0: np.ndarray,
    x1: np.ndarray,
    wx: np.ndarray,
    rows_t: np.ndarray,  # pragma: no cover - numba
    col_lo: np.ndarray,
    col_hi: np.ndarray,
    col: np.ndarray,
    out: np.ndarray,
) -> None:
    """Bilinear remap of one plane into one view, one output column at a time (the source
    column of an output column is fixed at pitch 0). ``strip_t`` is the source rows a view reads,
    transposed (one row per source column, shared by the views). Per output column i: col[r] = the
    two source columns blended (x 256) for the rows it reads (contiguous loads); then
    out[j, i] = col[r], col[r + 1] blended as ``rows_t[i, j]`` says: lookups in a ~2.5 KB column
    that stays in L1 (row-major passes gathered from L2: ~1.6x slower). Indices are unsigned (no
    negative-index wrap code in the inner loops). Runs without the GIL: views run in threads."""
    r: int | np.uint64  # a source row: int below, uint64 in the inner loop
    w, h = rows_t.shape
    for i in range(w):
        b = np.uint32(wx[i])
        nb = np.uint32(256) - b
        sa, sb = strip_t[x0[i]], strip_t[x1[i]]
        for r in range(col_lo[i], col_hi[i] + 1):
            col[r] = np.uint32(sa[r]) * nb + np.uint32(sb[r]) * b
        rt = rows_t[i]
        for j in range(h):
            v = np.uint32(rt[j])
            r = np.uint64(v >> np.uint32(6))
            a = v & np.uint32(63)
            out[j, i] = np.uint8(
                (col[r] * (np.uint32(64) - a) + col[r + np.uint64(1)] * a + np.uint32(8192)) >> np.uint32(14)
            )


def _pad_like_py360(img: np.ndarray) -> np.ndarray:
    """py360convert's 1-pixel padding: columns wrap, the rows beyond a pole are the pole row
    turned half a revolution."""
    w = img.shape[1]
    out = np.empty((img.shape[0] + 2, w + 2) + img.shape[2:], img.dtype)
    out[1:-1, 1:-1] = img
    out[0, 1:-1] = np.roll(img[0], w // 2, axis=0)
    out[-1, 1:-1] = np.roll(img[-1], w // 2, axis=0)
    out[:, 0] = out[:, -2]
    out[:, -1] = out[:, 1]
    return out


_CV_INTERP = {"linear": cv2.INTER_LINEAR, "cubic": cv2.INTER_CUBIC}


@functools.lru_cache(maxsize=32)
def _cv_maps(
    src_w: int, src_h: int, width: int, height: int, hfov_deg: float, yaw_deg: float, pitch_deg: float, chroma: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-point cv2 maps into a py360-padded plane (the generic path)."""
    if chroma:  # chroma plane of a 4:2:0 frame whose luma is (2*src_w) x (2*src_h)
        cols = 2.0 * np.arange(width // 2, dtype=np.float64)[None, :]
        rows = 2.0 * np.arange(height // 2, dtype=np.float64)[:, None] + 0.5
        u, v = equirect_coords(2 * src_w, 2 * src_h, width, height, hfov_deg, yaw_deg, pitch_deg, cols, rows)
        u, v = u / 2.0, (v - 0.5) / 2.0
        u, v = np.broadcast_arrays(u, v)
    else:
        u, v = equirect_coords(src_w, src_h, width, height, hfov_deg, yaw_deg, pitch_deg)
    return cv2.convertMaps((u + 1.0).astype(np.float32), (v + 1.0).astype(np.float32), cv2.CV_16SC2)


def render_view(
    pano_rgb: np.ndarray,
    yaw_deg: float,
    pitch_deg: float,
    hfov_deg: float,
    width: int,
    height: int,
    interpolation: Literal["linear", "cubic"] = "linear",
) -> np.ndarray:
    """Any perspective view of a panorama image (H, W[, C]): yaw right-positive, pitch
    up-positive, horizontal FOV ``hfov_deg``, vertical FOV from the aspect ratio. Same pixel
    conventions and sampling as ``py360convert.e2p(pano, (hfov, vfov), yaw, pitch, (h, w))``."""
    src_h, src_w = pano_rgb.shape[:2]
    m1, m2 = _cv_maps(src_w, src_h, width, height, float(hfov_deg), float(yaw_deg), float(pitch_deg), False)
    return cv2.remap(_pad_like_py360(pano_rgb), m1, m2, _CV_INTERP[interpolation], borderMode=cv2.BORDER_REPLICATE)


class Projector:
    """Projects decoded I420 frames of one source size into n views (maps built once)."""

    def __init__(self, src_w: int, src_h: int, params: ProjectParams):
        self.src_w, self.src_h = src_w, src_h
        self.params = params
        self.yaws = tuple(ids.VIEWS[v] for v in params.views)
        self.n = len(self.yaws)
        self.w, self.h = params.width, params.height
        self.frame_size = self.w * self.h * 3 // 2
        self.fast: YuvMaps | None = None
        if params.pitch_deg == 0.0 and params.interpolation == "linear":
            self.fast = build_yuv_maps(src_w, src_h, self.w, self.h, float(params.hfov_deg), self.yaws)
        self.threads = max(1, min(params.threads, self.n))
        self.pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="project") if self.threads > 1 else None
        self._col: dict[tuple[int, bool], np.ndarray] = {}  # per thread, luma or chroma: the kernel's column
        self._strips: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # Y, U, V rows read, transposed
        if self.fast is not None:
            lm, cm = self.fast.luma, self.fast.chroma
            self._strips = (
                np.empty((src_w, lm.nrows), np.uint8),
                np.empty((src_w // 2, cm.nrows), np.uint8),
                np.empty((src_w // 2, cm.nrows), np.uint8),
            )
        self.cpu_s = 0.0  # CPU time spent projecting (fast path), all threads
        self._lock = threading.Lock()

    def _views_fast(
        self, t: int, k0: int, k1: int, strips: tuple[np.ndarray, np.ndarray, np.ndarray], out: np.ndarray
    ) -> None:
        t0 = time.thread_time()
        self._views_fast_inner(t, k0, k1, strips, out)
        with self._lock:
            self.cpu_s += time.thread_time() - t0

    def _views_fast_inner(
        self, t: int, k0: int, k1: int, strips: tuple[np.ndarray, np.ndarray, np.ndarray], out: np.ndarray
    ) -> None:
        m = self.fast
        assert m is not None  # the fast path's
        ysz, csz = self.w * self.h, (self.w // 2) * (self.h // 2)
        for k in range(k0, k1):
            dst = out[k]
            for strip, pm, o, (pw, ph) in (
                (strips[0], m.luma, 0, (self.w, self.h)),
                (strips[1], m.chroma, ysz, (self.w // 2, self.h // 2)),
                (strips[2], m.chroma, ysz + csz, (self.w // 2, self.h // 2)),
            ):
                col = self._col.get((t, pm is m.luma))
                if col is None:
                    col = self._col[(t, pm is m.luma)] = np.zeros(pm.nrows + 1, np.uint32)
                _remap_plane(
                    strip,
                    pm.x0[k],
                    pm.x1[k],
                    pm.wx[k],
                    pm.rows_t,
                    pm.col_lo,
                    pm.col_hi,
                    col,
                    dst[o : o + pw * ph].reshape(ph, pw),
                )

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None

    def project(self, Y: np.ndarray, U: np.ndarray, V: np.ndarray) -> np.ndarray:
        """(n_views, h*w*3/2) uint8: each row one view's I420 picture."""
        out = np.empty((self.n, self.frame_size), np.uint8)
        m = self.fast
        if m is not None:
            assert self._strips is not None  # made with self.fast
            t0 = time.thread_time()
            cw = self.src_w // 2
            strips = (
                cv2.transpose(Y[m.luma.rmin : m.luma.rmin + m.luma.nrows, : self.src_w], self._strips[0]),
                cv2.transpose(U[m.chroma.rmin : m.chroma.rmin + m.chroma.nrows, :cw], self._strips[1]),
                cv2.transpose(V[m.chroma.rmin : m.chroma.rmin + m.chroma.nrows, :cw], self._strips[2]),
            )
            with self._lock:
                self.cpu_s += time.thread_time() - t0
            cuts = [self.n * t // self.threads for t in range(self.threads + 1)]
            futures = (
                [
                    self.pool.submit(self._views_fast, t, cuts[t], cuts[t + 1], strips, out)
                    for t in range(1, self.threads)
                ]
                if self.pool is not None
                else []
            )
            self._views_fast(0, cuts[0], cuts[1], strips, out)
            for f in futures:
                f.result()
            return out
        p = self.params
        interp = _CV_INTERP[p.interpolation]
        planes = [
            _pad_like_py360(Y[:, : self.src_w]),
            _pad_like_py360(U[:, : self.src_w // 2]),
            _pad_like_py360(V[:, : self.src_w // 2]),
        ]
        ysize, csize = self.w * self.h, (self.w // 2) * (self.h // 2)
        for k, yaw in enumerate(self.yaws):
            lm = _cv_maps(self.src_w, self.src_h, self.w, self.h, float(p.hfov_deg), yaw, float(p.pitch_deg), False)
            cm = _cv_maps(
                self.src_w // 2, self.src_h // 2, self.w, self.h, float(p.hfov_deg), yaw, float(p.pitch_deg), True
            )
            dst = out[k]
            cv2.remap(
                planes[0],
                lm[0],
                lm[1],
                interp,
                dst=dst[:ysize].reshape(self.h, self.w),
                borderMode=cv2.BORDER_REPLICATE,
            )
            for i, plane in enumerate(planes[1:]):
                o = ysize + i * csize
                cv2.remap(
                    plane,
                    cm[0],
                    cm[1],
                    interp,
                    dst=dst[o : o + csize].reshape(self.h // 2, self.w // 2),
                    borderMode=cv2.BORDER_REPLICATE,
                )
        return out

    def project_frame(self, frame: av.VideoFrame) -> np.ndarray:
        return self.project(*yuv420_planes(frame))


def i420_to_rgb(i420: np.ndarray, width: int, height: int) -> np.ndarray:
    return cv2.cvtColor(i420.reshape(height * 3 // 2, width), cv2.COLOR_YUV2RGB_I420)


# ------------------------------------------------------------------------------------ streaming
ProgressFn = Callable[[int, int | None], None]


def project_source(
    source_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    params: ProjectParams,
    face_detector: FaceDetector,
    progress: ProgressFn | None = None,
    *,
    face_params: FaceParams | None = None,
    source_id: str | None = None,
    stats: dict | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Decode a 360° source once and write its perspective views, faces blurred.

    Writes ``<video_id>.mp4`` per view into ``out_dir`` and returns ``(views, faces)`` tables
    (``schema.VIEWS_TABLE``, ``schema.FACES``). ``source_id`` defaults to the file's stem.
    Bad input raises ``UnitError`` naming the file; no partial video is left behind. ``stats``,
    when given, receives counters: frames, detect_every, detect_width, detector_calls (whole
    views), crop_calls (crops around fast faces) and the CPU seconds of detection and of projection.
    """
    src = Path(source_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sid = source_id if source_id is not None else src.stem
    vids = [ids.video_id(sid, v) for v in params.views]
    paths = [out / f"{vid}.mp4" for vid in vids]
    fparams = face_params or FaceParams()

    with VideoReader(src, require_aspect=(params.min_aspect, params.max_aspect)) as reader:
        info = reader.info
        projector = Projector(info.width, info.height, params)
        dw = fparams.detect_width
        if dw is None:
            dw = auto_detect_width(info.width, params.width, params.hfov_deg, cap=fparams.detect_max_width)
        every = detection_every(fparams, info.fps, projector.n * projector.frame_size)
        blurrer = FaceBlurrer(
            face_detector, fparams, vids, params.width, params.height, detect_width=dw, detect_every=every
        )
        rate = reader.stream.average_rate or (Fraction(info.fps).limit_denominator(100000) if info.fps else None)
        writers: list[ThreadedWriter] = []
        try:
            for p in paths:
                writers.append(
                    ThreadedWriter(
                        VideoWriter(p, params.width, params.height, info.time_base, rate, params.encoder()),
                        max_queue=params.queue_frames,
                    )
                )
            total = info.n_frames or (int(round(info.duration_s * info.fps)) if info.fps else None)

            def emit(ready: list[ReadyFrame]) -> None:
                for item in ready:
                    for k, w in enumerate(writers):
                        w.write(item.views[k], item.pts)

            done = 0
            for df in reader.frames():
                if (df.frame.width, df.frame.height) != (info.width, info.height):
                    raise UnitError(f"{src}: frame size changes mid-stream at frame {df.index}", retryable=False)
                views = projector.project_frame(df.frame)
                emit(blurrer.push(df.index, df.pts, df.time, views))
                done += 1
                if progress is not None:
                    progress(done, total)
            emit(blurrer.finish())
            for w in writers:
                w.close()
            if stats is not None:
                stats.update(
                    frames=done,
                    detect_every=every,
                    detect_width=blurrer.dw,
                    detector_calls=blurrer.detector_calls,
                    crop_calls=blurrer.crop_calls,
                    detect_cpu_s=blurrer.detect_cpu_s,
                    project_cpu_s=projector.cpu_s,
                )
        except BaseException:
            for w in writers:
                w.abort()
            for p in paths:
                p.unlink(missing_ok=True)
            raise
        finally:
            projector.close()

    vfov = params.vfov_deg
    rows = []
    for view, vid, p in zip(params.views, vids, paths, strict=True):
        got = inspect_written(p)
        rows.append(
            {
                "video_id": vid,
                "source_id": sid,
                "view": view,
                "yaw_deg": ids.VIEWS[view],
                "pitch_deg": float(params.pitch_deg),
                "hfov_deg": float(params.hfov_deg),
                "vfov_deg": vfov,
                "width": params.width,
                "height": params.height,
                "fps": got.fps,
                "n_frames": got.n_frames,
                "duration_s": got.duration_s,
                "path": p.name,
                "sha256": sha256_file(p),
            }
        )
    return schema.table(schema.VIEWS_TABLE, rows), blurrer.faces_table()


__all__ = [
    "ProjectParams",
    "Projector",
    "YuvMaps",
    "build_yuv_maps",
    "equirect_coords",
    "render_view",
    "project_source",
    "i420_to_rgb",
]
