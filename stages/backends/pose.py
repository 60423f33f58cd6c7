"""Pose estimators (kind ``pose_estimator``).

``da3``: Depth Anything 3 (PyPI ``depth-anything-3`` 0.1.1) from the folder ``models.da3_model_dir``
(``save_pretrained`` layout: config.json + model.safetensors, e.g. the HF repo depth-anything/DA3-LARGE
downloaded by hand). One DA3 call sees ``da3_window`` frames; its poses live in a world frame and
scale of that call only, so a long video is cut into windows sharing ``da3_overlap`` frames and each
window is mapped into the previous windows' frame by the similarity transform (rotation,
translation and scale) that the shared frames imply: the scale from the ratio of the two calls'
depth maps of the shared frames (works for a camera that only turns, unlike camera-centre spreads),
rotation and translation averaged over the shared frames' poses. Drift accumulates over windows as
in any chained odometry; the paper audits poses by hand.

Output convention (``PoseResult``): extrinsics world -> camera, OpenCV axes (x right, y down,
z forward), world = the first frame's camera, unit = DA3's scale of the first window, or metres
where the pose stage's ``camera_height`` is given and the chunk's depth maps see the ground: the
level views' pixels well below the horizon put the ground at a height in DA3's unit
(``ground_height``), and the chunk is scaled to make it ``camera_height`` (``PoseResult.metric``);
intrinsics in the *input* frames' pixels, pixel-centre coordinates (``stages/geometry.py``). DA3
resizes frames so the longest side is ``da3_process_res`` (each side then rounded to a multiple of
14) and writes K with the principal point at (w/2, h/2) in pixel-edge coordinates (VGGT style), so
``fx_in = fx / sx``, ``cx_in = cx / sx - 1/2`` with ``sx = w / W_in`` (same for y).

On CPU the model runs in fp32: DA3's ``forward`` autocasts to fp16 whenever bf16 CUDA is missing,
which on CPU is ~3x slower; on CUDA we call DA3's own ``forward`` (bf16/fp16 autocast) unless
``models.da3_precision`` is ``fp32``. ``run_windows`` runs several windows (the same window of the
4 views) as one batch; `make gpu-check` measures both against fp32 and one-at-a-time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vsi_wild.errors import UnitError
from vsi_wild.stages.backends import weights as W
from vsi_wild.stages.backends.base import POSE_STAGE_OPTIONS, BackendContext, FrameBatch, PoseResult, register
from vsi_wild.stages.backends.detect import check_rgb_frames
from vsi_wild.stages.backends.params import LoadedModel, ModelsParams, as_params, load_once, require


# ------------------------------------------------------------------ pure geometry (tested alone)
def window_starts(n: int, window: int, overlap: int) -> list[int]:
    """Starts of windows of ``window`` frames covering ``range(n)``, consecutive ones sharing at
    least ``overlap`` frames (the last one is pulled back to end at ``n``)."""
    if n <= window:
        return [0]
    step = window - overlap
    starts = list(range(0, n - window, step))
    starts.append(n - window)
    return starts


def _to44(e: np.ndarray) -> np.ndarray:
    out = np.tile(np.eye(4), (*e.shape[:-2], 1, 1))
    out[..., :3, :4] = e[..., :3, :4]
    return out


def project_to_rotation(m: np.ndarray) -> np.ndarray:
    u, _, vt = np.linalg.svd(m)
    d = np.sign(np.linalg.det(u @ vt))
    return u @ np.diag([1.0, 1.0, d]) @ vt


def depth_scale(depth_a: np.ndarray, depth_b: np.ndarray) -> float:
    """s with depth_a = s * depth_b (median ratio over pixels valid in both)."""
    a, b = np.asarray(depth_a, np.float64).ravel(), np.asarray(depth_b, np.float64).ravel()
    ok = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    if ok.sum() < 16:
        return float("nan")
    return float(np.median(a[ok] / b[ok]))


def centre_scale(ext_a: np.ndarray, ext_b: np.ndarray) -> float:
    """s from the spread of the camera centres (fallback when depth is unavailable)."""
    ca = np.einsum("nji,nj->ni", ext_a[:, :3, :3], -ext_a[:, :3, 3])
    cb = np.einsum("nji,nj->ni", ext_b[:, :3, :3], -ext_b[:, :3, 3])
    da = np.linalg.norm(ca - ca.mean(0), axis=1).sum()
    db = np.linalg.norm(cb - cb.mean(0), axis=1).sum()
    return float(da / db) if db > 1e-9 and da > 1e-9 else float("nan")


def align_window(ext_a: np.ndarray, ext_b: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """The similarity x_A = s R x_B + t between two calls' world frames, from the same frames'
    extrinsics in both (n, 3, 4), given the scale s (camera-frame units A = s * units B).
    Returns (R, t)."""
    ra, ta = ext_a[:, :3, :3], ext_a[:, :3, 3]
    rb, tb = ext_b[:, :3, :3], ext_b[:, :3, 3]
    r_ab = np.einsum("nji,njk->nik", ra, rb)  # R_A^T R_B per frame
    r = project_to_rotation(r_ab.sum(0))
    t = np.einsum("nji,nj->ni", ra, scale * tb - ta).mean(0)  # R_A^T (s t_B - t_A)
    return r, t


def apply_alignment(ext_b: np.ndarray, r: np.ndarray, t: np.ndarray, scale: float) -> np.ndarray:
    """Extrinsics of window B's frames expressed in A's world frame and scale."""
    rb, tb = ext_b[:, :3, :3], ext_b[:, :3, 3]
    rn = rb @ r.T
    tn = scale * tb - rn @ t
    return np.concatenate([rn, tn[..., None]], axis=-1)


@dataclass
class WindowPoses:
    start: int  # index of the window's first frame in the video
    extrinsics: np.ndarray  # (m, 3, 4) world -> camera, the call's own frame and scale
    intrinsics: np.ndarray  # (m, 3, 3)
    depth: np.ndarray | None = None  # (m, h, w), same scale as the extrinsics' translations


def chain_windows(
    n: int, windows: Sequence[WindowPoses]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, np.ndarray]]:
    """Poses of frames 0..n-1 in one world frame: window 0's, then re-expressed so that frame 0's
    camera is the world (identity extrinsics). Returns (extrinsics (n,3,4), intrinsics (n,3,3),
    valid (n,), depth: frame -> its depth map in the chain's unit, where the windows had one). A
    window whose alignment cannot be estimated (no finite scale, no shared frame with a placed
    window) leaves its new frames invalid rather than guessing."""
    ext = np.full((n, 3, 4), np.nan)
    ixt = np.full((n, 3, 3), np.nan)
    have = np.zeros(n, bool)
    depth: dict[int, np.ndarray] = {}
    for w in windows:
        m = len(w.extrinsics)
        idx = np.arange(w.start, w.start + m)
        shared = [k for k, i in enumerate(idx) if have[i]]
        new = [k for k, i in enumerate(idx) if not have[i]]
        if not have.any():  # the first window: its frame is the world so far
            e = np.asarray(w.extrinsics, np.float64)
        elif not shared:  # nothing ties it to the frames so far (a window before it failed)
            continue
        else:
            s = float("nan")
            if w.depth is not None and all(int(idx[k]) in depth for k in shared):
                ratios = [depth_scale(depth[int(idx[k])], w.depth[k]) for k in shared]
                ratios = [x for x in ratios if np.isfinite(x)]
                s = float(np.median(ratios)) if ratios else float("nan")
            if not np.isfinite(s):
                s = centre_scale(ext[idx[shared]], np.asarray(w.extrinsics, np.float64)[shared])
            if not np.isfinite(s) or s <= 0:
                continue
            r, t = align_window(ext[idx[shared]], np.asarray(w.extrinsics, np.float64)[shared], s)
            e = apply_alignment(np.asarray(w.extrinsics, np.float64), r, t, s)
            if w.depth is not None:
                w = WindowPoses(w.start, w.extrinsics, w.intrinsics, np.asarray(w.depth) * s)
        for k in new:
            i = int(idx[k])
            ext[i], ixt[i], have[i] = e[k], w.intrinsics[k], True
            if w.depth is not None:
                depth[i] = w.depth[k]
    valid = have & np.isfinite(ext).all(axis=(1, 2)) & np.isfinite(ixt).all(axis=(1, 2))
    if valid.any():
        ref = int(np.flatnonzero(valid)[0])
        inv = np.linalg.inv(_to44(ext[ref]))
        ext = (_to44(ext) @ inv)[:, :3, :4]
    return ext, ixt, valid, depth


# The ground a level camera sees at least this far below the horizon: within about 6 m of a camera
# 1.6 m up, where a depth map is most accurate, and below most obstacles' tops.
GROUND_DEPRESSION_DEG = 15.0


def ground_height(depth: np.ndarray, K: np.ndarray, input_wh: tuple[int, int]) -> float:
    """The height above the ground of a level camera, in the unit of its depth map ``depth``
    ((h, w), depth along the optical axis; ``K``: intrinsics in the input image's pixels,
    ``input_wh`` its size): a pixel at row v sees a point z (v - cy) / fy below the camera (z its
    depth), the ground's height where the ray descends at least ``GROUND_DEPRESSION_DEG``. The
    median over those pixels (an obstacle standing in them lowers a minority); nan where the view
    sees nothing that far down."""
    d = np.asarray(depth, np.float64)
    h, _w = d.shape
    sy = input_wh[1] / h  # depth rows -> input rows (pixel centres)
    v_in = (np.arange(h) + 0.5) * sy - 0.5
    drop = (v_in - K[1, 2]) / K[1, 1]  # tan of each row's depression
    rows = drop >= math.tan(math.radians(GROUND_DEPRESSION_DEG))
    below = d[rows] * drop[rows, None]
    below = below[np.isfinite(below) & (below > 0)]
    return float(np.median(below)) if below.size else float("nan")


def chain_ground_height(
    depth: dict[int, np.ndarray], intrinsics: np.ndarray, valid: np.ndarray, input_wh: tuple[int, int]
) -> float:
    """The camera's height in a chain's unit: the median of its valid frames' ``ground_height``
    (nan where none measured one)."""
    hs = [ground_height(d, intrinsics[i], input_wh) for i, d in sorted(depth.items()) if valid[i]]
    hs = [x for x in hs if np.isfinite(x) and x > 0]
    return float(np.median(hs)) if hs else float("nan")


def intrinsics_to_input(k: np.ndarray, processed_wh: tuple[int, int], input_wh: tuple[int, int]) -> np.ndarray:
    """DA3's K (processed image, pixel-edge coordinates) -> K of the input image, pixel centres."""
    sx = processed_wh[0] / input_wh[0]
    sy = processed_wh[1] / input_wh[1]
    out = np.array(k, dtype=np.float64, copy=True)
    out[..., 0, 0] /= sx
    out[..., 0, 1] /= sx
    out[..., 0, 2] = out[..., 0, 2] / sx - 0.5
    out[..., 1, 1] /= sy
    out[..., 1, 2] = out[..., 1, 2] / sy - 0.5
    return out


def pose_validity(ext: np.ndarray, ixt: np.ndarray, tol: float = 1e-3) -> np.ndarray:
    r = ext[:, :3, :3]
    finite = np.isfinite(ext).all(axis=(1, 2)) & np.isfinite(ixt).all(axis=(1, 2))
    with np.errstate(invalid="ignore"):
        ortho = np.abs(np.einsum("nij,nkj->nik", r, r) - np.eye(3)).max(axis=(1, 2)) < tol
        det = np.abs(np.linalg.det(np.where(finite[:, None, None], r, np.eye(3))) - 1) < tol
        focal = (ixt[:, 0, 0] > 0) & (ixt[:, 1, 1] > 0)
    return finite & ortho & det & focal


# -------------------------------------------------------------------------------- the model
def load_da3(path: Path, device: str) -> Any:
    require("depth_anything_3", "depth-anything-3", "da3")
    import torch
    from depth_anything_3.api import DepthAnything3

    model = DepthAnything3.from_pretrained(str(path))
    model = model.to(device).eval()
    model.device = torch.device(device)  # DA3 moves its inputs to this
    return model


class DA3PoseEstimator:
    name = "da3"

    def __init__(self, params: ModelsParams, camera_height: float | None = None):
        self.params = params
        self.camera_height = camera_height  # metres: each chunk is scaled so that its ground lies this far below
        require("depth_anything_3", "depth-anything-3", self.name)
        path = params.weight_path("da3_model_dir", kind="dir", hint="a DA3 folder (config.json + model.safetensors)")
        for f in ("config.json",):
            if not (path / f).is_file():
                raise UnitError(
                    f"{path} has no {f}: not a DA3 model folder (config key `models.da3_model_dir`)",
                    kind="missing_weights",
                    retryable=False,
                )
        if not any((path / f).is_file() for f in ("model.safetensors", "pytorch_model.bin")):
            raise UnitError(
                f"{path} has no model.safetensors (config key `models.da3_model_dir`)",
                kind="missing_weights",
                retryable=False,
            )
        device = params.torch_device()
        self._loaded: LoadedModel = load_once(
            ("da3", str(path.resolve()), device), lambda: (load_da3(path, device), device)
        )

    @property
    def model(self) -> Any:
        return self._loaded.model

    def run_window(
        self, images: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, tuple[int, int]]:
        """One DA3 call: (extrinsics (m,3,4), intrinsics (m,3,3) of the processed frames, depth
        (m,h,w), processed (w, h))."""
        return self.run_windows([images])[0]

    def run_windows(
        self, windows: Sequence[Sequence[np.ndarray]]
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None, tuple[int, int]]]:
        """Several windows (of the same frame count and size: e.g. the same window of each view of
        a source) in one forward pass, as DA3's batch dimension (B, N, 3, H, W); each window's
        result is what ``run_window`` gives it alone (its own reference view and scale). Windows of
        different shapes run one after the other."""
        import torch

        da3, p = self._loaded.model, self.params
        out: list = [None] * len(windows)
        with self._loaded.lock, torch.inference_mode():
            cpu = [
                da3._preprocess_inputs(list(w), None, None, p.da3_process_res, "upper_bound_resize")[0] for w in windows
            ]
            groups: dict[tuple[int, ...], list[int]] = {}
            for i, x in enumerate(cpu):
                groups.setdefault(tuple(x.shape), []).append(i)
            for members in groups.values():
                if len(members) == 1:
                    imgs, _, _ = da3._prepare_model_inputs(cpu[members[0]], None, None)
                else:
                    imgs = torch.stack([cpu[i] for i in members]).to(da3._get_model_device()).float()
                args: tuple[Any, ...] = (imgs, None, None, [], False, p.da3_use_ray_pose, p.da3_ref_view_strategy)
                own_precision = imgs.device.type == "cuda" and p.da3_precision == "bf16"
                raw = da3.forward(*args) if own_precision else da3.model(*args)
                for b, i in enumerate(members):
                    pred = da3._convert_to_prediction(_batch_item(raw, b, len(members)))
                    h, w = cpu[i].shape[-2:]
                    out[i] = (
                        np.asarray(pred.extrinsics, np.float64)[:, :3, :4],
                        np.asarray(pred.intrinsics, np.float64),
                        pred.depth,
                        (int(w), int(h)),
                    )
        return out

    def estimate(self, batch: FrameBatch) -> PoseResult:
        return self.estimate_many([batch])[0]

    def estimate_many(self, batches: Sequence[FrameBatch]) -> list[PoseResult]:
        """``estimate`` of several videos' frames (a source's views), their windows batched: the
        k-th window of every video goes through DA3 in one forward pass where the videos' frame
        counts and sizes agree. Each result is the one ``estimate`` gives that video alone."""
        out: list[PoseResult | None] = [None] * len(batches)
        todo = []
        for i, batch in enumerate(batches):
            n = len(batch.images)
            if n == 0:
                out[i] = PoseResult(np.zeros((0, 3, 4)), np.zeros((0, 3, 3)), np.zeros((0,), bool))
                continue
            check_rgb_frames(batch)
            sizes = {img.shape[:2] for img in batch.images}
            if len(sizes) != 1:
                raise UnitError(f"video {batch.video_id}: frames of different sizes: {sorted(sizes)}")
            todo.append(i)
        p = self.params
        starts = {i: window_starts(len(batches[i].images), p.da3_window, p.da3_overlap) for i in todo}
        windows: dict[int, list[WindowPoses]] = {i: [] for i in todo}
        for k in range(max((len(v) for v in starts.values()), default=0)):
            live = [i for i in todo if k < len(starts[i])]
            results = self.run_windows([batches[i].images[starts[i][k] : starts[i][k] + p.da3_window] for i in live])
            for i, (ext, K, depth, wh) in zip(live, results, strict=True):
                in_h, in_w = batches[i].images[0].shape[:2]
                windows[i].append(WindowPoses(starts[i][k], ext, intrinsics_to_input(K, wh, (in_w, in_h)), depth))
        for i in todo:
            ext, ixt, valid, depths = chain_windows(len(batches[i].images), windows[i])
            valid &= pose_validity(ext, ixt)
            metric = None
            if self.camera_height:
                in_h, in_w = batches[i].images[0].shape[:2]
                h = chain_ground_height(depths, ixt, valid, (in_w, in_h))
                if np.isfinite(h):  # the chunk in metres: its ground camera_height below the camera
                    ext = ext.copy()
                    ext[:, :, 3] *= self.camera_height / h
                    metric = valid.copy()
            out[i] = PoseResult(extrinsics=ext, intrinsics=ixt, valid=valid, metric=metric)
        done = [r for r in out if r is not None]
        assert len(done) == len(out)  # every video's result is filled above
        return done


def _batch_item(raw: Any, b: int, n: int) -> Any:
    """Element ``b`` of a DA3 output of batch size ``n``, as a batch of one (what DA3's output
    processor reads)."""
    import torch

    if n == 1:
        return raw
    part = type(raw)()
    for k, v in raw.items():
        part[k] = v[b : b + 1] if isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == n else v
    return part


@register(
    "pose_estimator",
    "da3",
    fields=(
        "da3_model_dir",
        "da3_process_res",
        "da3_window",
        "da3_overlap",
        "da3_ref_view_strategy",
        "da3_use_ray_pose",
        "da3_precision",
    ),
    weights=("da3_model_dir",),
    sources={"da3_model_dir": W.DA3_LARGE},
    packages=(("depth_anything_3", "depth-anything-3"), ("torch", "torch")),
    gpu=True,
)
def make_da3(ctx: BackendContext) -> DA3PoseEstimator:
    # The pose stage gives every pose estimator the views' geometry and the camera's height
    # (base.PoseStageOptions, named by POSE_STAGE_OPTIONS); DA3 estimates its own intrinsics and
    # reads the height. Other options override the models section (tests, benches).
    options = {k: v for k, v in ctx.options.items() if k not in POSE_STAGE_OPTIONS}
    return DA3PoseEstimator(as_params(ctx.models, options), ctx.options.get("camera_height"))
