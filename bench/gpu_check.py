"""One prepared check for a machine with a GPU: each production backend, through our adapters, at
the production config's settings, on CUDA. Prints per stage the frames per second, the peak GPU
memory and the hours of 360° video one GPU-hour processes, for the old and the new ways of running
a stage side by side (segment: one propagation per concept vs one image-encoder pass per frame for
all concepts; detect: fp16 vs fp32, the views' frames in shared passes vs one view per call, batch
vs single frames; pose: bf16 vs fp32, the views' windows one at a time vs batched), checks each
faster way's outputs against the reference way's on the same frames (with the tolerance stated),
and writes it all as JSON.

A weight present under the config's `models.weights_dir` (as `vsi-wild weights check` sees it) is
used; an absent one is replaced by the same architecture with random weights (tests/random_weights.py),
which measures speed and memory only: every stage says which it ran with. With random SAM3 weights
the detection thresholds are set from the model's own scores on the first frames (a few
detections per frame), so that tracking runs and the comparisons are not vacuous.

How one stage's speed becomes hours of 360° video per GPU-hour: a second of a source is `views`
perspective views; the stage handles, per view and second of source,
  detect (YOLO-World-v2)  2 frames (2 FPS sampling)
  segment (SAM3 video)    2 frames, each with all of its clip's concepts (the measured C here;
                          C = 8 by a two-point model: see `segment_cost_model`)
  pose (DA3)              2 frames (windows of da3_window frames, overlap counted as cost)
  faces (SCRFD-10G)       the source fps (the paper detects on every projected frame)
so hours per GPU-hour = fps / (views x frames per view-second); the GPU side as a whole is the
harmonic sum over detect, segment and pose (one GPU runs them one after the other; faces run on the
CPU in our DAG and are reported apart). open_clip text features are per distinct name, not per
second of video: reported as texts per second, left out of the sum.

Usage: python bench/gpu_check.py [-c configs/default.yaml] [--out build/gpu_check.json]
                                 [--stages detect,segment,pose,faces,text] [--cpu] [--tiny]
                                 [--budget-s 420] [--sam3-checkpoint PATH]
`--cpu --tiny` is the reduced form (small frames, small architectures, few frames) that the test
suite runs so that this script cannot rot; its speeds mean nothing, its counts (encoder calls per
frame) and equalities do. On the CPU every model runs fp32, so the precision comparisons there
run but are reported UNMEASURED, and the output's `unmeasured:` lines (JSON: "unmeasured") say
what a run did not measure. `--budget-s` skips the comparison runs that would not fit (the
measurements of the production ways come first).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
STAGES = ("detect", "segment", "pose", "faces", "text")
CONCEPTS = ["person", "chair", "table", "car", "bench", "bicycle", "dog", "tree"]
PLANNED_CONCEPTS = 8  # docs/capacity.md's planning figure for kept concepts per view

# Tolerances of the faster ways against the reference on the same frames (what "the outputs hold" means):
BOX_IOU_MIN = 0.9  # detect fp16 vs fp32: a box counts as kept if the other run has one of its label this close
BOX_KEPT_MIN = 0.95  # ... and this share of either run's boxes must be kept
MASK_IOU_MIN = 0.9  # segment bf16 vs fp32: matched instance masks (same frame and concept), mean IoU
MASK_MATCHED_MIN = 0.9  # ... and this share of either run's masks must find a match at IoU >= 0.5
POSE_DEG_MAX = 0.5  # pose: the largest rotation between two runs' camera orientations of a frame (degrees)


@dataclass
class Setting:
    """The workload: what production runs, or the reduced form."""

    views: int = 4
    view_w: int = 1920
    view_h: int = 1080
    source_fps: float = 30.0
    frames: int = 64  # 2 FPS frames per view per stage run (32 s of one view); detect and pose see 4 views
    sam3_frames: int = 120  # one minute of a clip at 2 FPS (the paper: 5-minute clips)
    concepts: int = 4
    yolo_architecture: str = "yolov8x-worldv2.yaml"
    da3_architecture: str = "da3-large"
    da3_process_res: int | None = None  # None: the config's
    text_names: int = 2048


TINY = Setting(
    views=4,
    view_w=96,
    view_h=64,
    frames=4,
    sam3_frames=2,
    concepts=2,
    yolo_architecture="yolov8s-worldv2.yaml",
    da3_architecture="da3-small",
    da3_process_res=112,
    text_names=16,
)


@dataclass
class Result:
    stage: str
    backend: str
    weights: str  # "real" or "random (speed and memory only)"
    device: str
    variant: str = ""  # which way of running the stage ("" = the only one)
    frames: int = 0
    seconds: float = 0.0
    fps: float = 0.0
    frames_per_view_second: float = 0.0
    video_hours_per_gpu_hour: float | None = None
    peak_gpu_mib: float | None = None
    peak_rss_mib: float = 0.0
    production: bool = True  # the way the pipeline runs it (the others are references and context)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Comparison:
    """A faster way's outputs against the reference way's on the same frames."""

    stage: str
    what: str  # e.g. "fp16 vs fp32"
    measures: dict[str, float | None]
    tolerance: str
    ok: bool | None  # None: nothing to compare (no outputs)
    note: str = ""


def _frames(n: int, s: Setting, view: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(view)
    base = (rng.random((s.view_h, s.view_w, 3)) * 255).astype(np.uint8)
    # a moving pattern: consecutive frames differ as video frames do
    return [np.roll(base, 3 * k, axis=1) for k in range(n)]


def _batch(images: list[np.ndarray], video_id: str = "gpu-check"):
    from vsi_wild.stages.backends.base import FrameBatch

    n = len(images)
    return FrameBatch(video_id, images, [k / 2 for k in range(n)], [k * 15 for k in range(n)], list(range(n)), 30.0)


class Meter:
    """Wall time and peak memory of one measured call (CUDA synchronised on both sides)."""

    def __init__(self, device: str):
        self.cuda = device == "cuda"

    def __call__(self, fn: Callable[[], Any]) -> tuple[float, float | None, Any]:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            free_before = torch.cuda.mem_get_info()[0]
        t = time.perf_counter()
        out = fn()
        if self.cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t
        peak = None
        if self.cuda:
            torch_peak = torch.cuda.max_memory_allocated()
            outside = free_before - torch.cuda.mem_get_info()[0]  # onnxruntime's arena is not torch's
            peak = max(torch_peak, outside) / 2**20
        return dt, peak, out


class Budget:
    """The run's time limit: the comparison runs ask it whether they still fit."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def allows(self, estimate_s: float) -> bool:
        return self.left() > estimate_s


@dataclass
class Context:
    config: Any
    s: Setting
    device: str
    tmp: Path
    meter: Meter
    budget: Budget
    sam3_checkpoint: str | None = None
    comparisons: list[Comparison] = field(default_factory=list)


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _weight(
    config, backend: tuple[str, str], key: str, build: Callable[[Path], None], tmp: Path, name: str
) -> tuple[str, str]:
    """The configured weight's path when present and usable (the check `vsi-wild weights check`
    runs), else a random-weight file built by ``build`` under ``tmp``: (path, "real" | "random ...")."""
    from vsi_wild.stages.backends import base
    from vsi_wild.stages.backends.params import weight_statuses

    spec = base.spec(*backend)
    found = [w for w in weight_statuses(spec, config.models, getattr(config, spec.section, None)) if w.key == key]
    if found and found[0].usable:
        return str(found[0].path), "real"
    path = tmp / name
    build(path)
    return str(path), RANDOM


def load_sections(path: Path) -> Any:
    """The config's ``models``, ``faces`` and ``pose`` sections, each validated by its own model: all
    this check reads. (The whole ``Config`` imports every stage, PyAV included, which the GPU machine's
    environment need not carry for this.)"""
    from types import SimpleNamespace

    import yaml

    from vsi_wild.stages.backends.params import ModelsParams
    from vsi_wild.stages.faces import FaceParams
    from vsi_wild.stages.pose import PoseParams

    data = yaml.safe_load(Path(path).read_text()) or {}
    return SimpleNamespace(
        models=ModelsParams.model_validate(data.get("models") or {}),
        faces=FaceParams.model_validate(data.get("faces") or {}),
        pose=PoseParams.model_validate(data.get("pose") or {}),
    )


RANDOM = "random (speed and memory only)"
# a precision comparison on the CPU, where every model runs fp32: it runs (the code cannot rot) but
# measures nothing about half precision
UNMEASURED_CPU = "unmeasured: the CPU runs both in fp32"


def _random_weights():
    sys.path.insert(0, str(REPO / "tests"))
    import random_weights

    return random_weights


def _rate(r: Result, s: Setting, frames_per_view_second: float) -> Result:
    r.fps = r.frames / r.seconds if r.seconds else 0.0
    r.frames_per_view_second = frames_per_view_second
    r.video_hours_per_gpu_hour = r.fps / (s.views * frames_per_view_second)
    return r


def _models_overrides(config, prefix: str) -> dict[str, Any]:
    """The config's settings of one model (production settings), weight paths left out."""
    skip = {"yolo_world_weights", "sam3_checkpoint", "da3_model_dir"}
    return {k: v for k, v in config.models.model_dump().items() if k.startswith(prefix) and k not in skip}


# ------------------------------------------------------------------------------- comparisons
def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) IoU of xyxy boxes."""
    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)

    def area(x):
        return np.clip(x[:, 2:] - x[:, :2], 0, None).prod(-1)

    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def _kept(iou: np.ndarray, axis: int, threshold: float) -> int:
    return int((iou.max(axis=axis) >= threshold).sum()) if iou.size else 0


def compare_detections(ref: list, other: list) -> dict[str, float | None]:
    """Per frame and label, each box of either run against the other run's boxes of its label:
    the share of boxes with a partner at IoU >= BOX_IOU_MIN (the lower of the two directions),
    the mean best IoU, the largest score difference of partners."""
    n_ref = n_other = kept_ref = kept_other = 0
    ious, score_diff = [], []
    for a, b in zip(ref, other, strict=True):  # one detection list per frame, the same frames
        for label in set(a.labels) | set(b.labels):
            ia = [i for i, x in enumerate(a.labels) if x == label]
            ib = [i for i, x in enumerate(b.labels) if x == label]
            n_ref, n_other = n_ref + len(ia), n_other + len(ib)
            if not ia or not ib:
                continue
            m = box_iou(a.boxes[ia], b.boxes[ib])
            kept_ref += _kept(m, 1, BOX_IOU_MIN)
            kept_other += _kept(m, 0, BOX_IOU_MIN)
            best = m.argmax(axis=1)
            ious += m.max(axis=1).tolist()
            score_diff += np.abs(np.asarray(a.scores)[ia] - np.asarray(b.scores)[ib][best]).tolist()
    if n_ref + n_other == 0:
        return {"boxes_ref": 0, "boxes_other": 0, "kept_share": None, "mean_best_iou": None, "max_score_diff": None}
    share = min(kept_ref / n_ref if n_ref else 1.0, kept_other / n_other if n_other else 1.0)
    return {
        "boxes_ref": n_ref,
        "boxes_other": n_other,
        "kept_share": share,
        "mean_best_iou": float(np.mean(ious)) if ious else 0.0,
        "max_score_diff": float(np.max(score_diff)) if score_diff else None,
    }


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def compare_segments(ref: list, other: list) -> dict[str, float | None]:
    """Records of two runs on the same clip: matched per (frame, concept) greedily by mask IoU
    (>= 0.5); the share matched (the lower of the two directions), the mean IoU of the matches,
    and how many records are identical (same ids, box, score and mask)."""

    def by_key(recs):
        out: dict[tuple[int, str], list] = {}
        for r in recs:
            out.setdefault((r.frame_pos, r.concept), []).append(r)
        return out

    ka, kb = by_key(ref), by_key(other)
    matched, ious = 0, []
    for key in set(ka) | set(kb):
        pa, pb = ka.get(key, []), kb.get(key, [])
        pairs = sorted(
            ((mask_iou(x.mask, y.mask), i, j) for i, x in enumerate(pa) for j, y in enumerate(pb)), reverse=True
        )
        used_a, used_b = set(), set()
        for iou, i, j in pairs:
            if iou < 0.5 or i in used_a or j in used_b:
                continue
            used_a.add(i)
            used_b.add(j)
            matched += 1
            ious.append(iou)
    identical = sum(
        1
        for x, y in zip(ref, other, strict=False)  # the records in order, however many each path has
        if (x.frame_pos, x.concept, x.local_id, x.box, x.score) == (y.frame_pos, y.concept, y.local_id, y.box, y.score)
        and np.array_equal(x.mask, y.mask)
    )
    if not ref and not other:
        return {"records_ref": 0, "records_other": 0, "matched_share": None, "mean_mask_iou": None, "identical": 0}
    share = min(matched / len(ref) if ref else 1.0, matched / len(other) if other else 1.0)
    return {
        "records_ref": len(ref),
        "records_other": len(other),
        "matched_share": share,
        "mean_mask_iou": float(np.mean(ious)) if ious else 0.0,
        "identical": identical,
    }


def rotation_error_deg(
    ext_a: np.ndarray, ext_b: np.ndarray, valid: np.ndarray | None = None
) -> dict[str, float | None]:
    """Camera orientations of the same frames from two runs (world = each run's first camera):
    the angle of R_a R_b^T per frame, its mean and largest (degrees)."""
    ra, rb = np.asarray(ext_a)[:, :3, :3], np.asarray(ext_b)[:, :3, :3]
    ok = np.isfinite(ra).all(axis=(1, 2)) & np.isfinite(rb).all(axis=(1, 2))
    if valid is not None:
        ok &= np.asarray(valid, bool)
    if not ok.any():
        return {"frames": 0, "mean_deg": None, "max_deg": None}
    # ||R_a - R_b||_F = 2 sqrt(2) sin(angle / 2): well conditioned near 0, where arccos of the trace is not
    chord = np.linalg.norm(ra[ok] - rb[ok], axis=(1, 2)) / (2 * np.sqrt(2))
    ang = np.degrees(2 * np.arcsin(np.clip(chord, 0, 1)))
    return {"frames": int(ok.sum()), "mean_deg": float(ang.mean()), "max_deg": float(ang.max())}


# ------------------------------------------------------------------------------------- stages
def check_text(ctx: Context) -> list[Result]:
    from vsi_wild.stages.backends.base import create

    rw = _random_weights()
    path, kind = _weight(
        ctx.config, ("text_embedder", "open_clip"), "models.open_clip_weights", rw.clip_state_dict, ctx.tmp, "clip.pt"
    )
    emb = create("text_embedder", "open_clip", device=ctx.device, open_clip_weights=path)
    names = [f"object number {k}" for k in range(ctx.s.text_names)]
    emb.embed(names[:8])  # warm-up
    dt, peak, _ = ctx.meter(lambda: emb.embed(names))
    r = Result("text", "open_clip", kind, ctx.device, "", len(names), dt, len(names) / dt, peak_gpu_mib=peak)
    r.notes.append("texts per second (per distinct name, not per second of video)")
    return [r]


def check_detect(ctx: Context) -> list[Result]:
    """YOLO-World-v2 on frames of the 4 views at 2 FPS, in the production batch size, fp32 (the
    reference, and the production way while ``models.yolo_world_half`` is off) and fp16, and one
    frame per call for context."""
    from vsi_wild.stages.backends.base import create

    s, rw = ctx.s, _random_weights()
    detector = ("open_vocab_detector", "yolo_world")
    clip, _ = _weight(ctx.config, detector, "models.open_clip_weights", rw.clip_state_dict, ctx.tmp, "clip.pt")
    yolo, kind = _weight(
        ctx.config,
        detector,
        "models.yolo_world_weights",
        lambda p: rw.yolo_world(p, s.yolo_architecture),
        ctx.tmp,
        "yolo_world.pt",
    )
    opts = _models_overrides(ctx.config, "yolo_world_")
    batch_size = opts.get("yolo_world_batch_size", 16)
    # the 4 views' 2 FPS frames, detected as the stage runs a source's views (run_detect_views): in
    # shared passes, their frames interleaved (detect_many)
    views = [_frames(s.frames, s, v) for v in range(s.views)]
    view_batches = [_batch(views[v], f"gpu-check_{v}") for v in range(s.views)]
    frames = [views[v][k] for k in range(s.frames) for v in range(s.views)]
    concepts = CONCEPTS[: s.concepts]
    out: list[Result] = []
    runs: dict[bool, list] = {}
    detectors: dict[bool, Any] = {}
    for half in (True, False):
        det = create(
            "open_vocab_detector",
            "yolo_world",
            device=ctx.device,
            yolo_world_weights=yolo,
            open_clip_weights=clip,
            **{**opts, "yolo_world_half": half},
        )
        det.detect(_batch(frames[:2]), concepts)  # warm-up (model load, cudnn autotune)
        dt, peak, many = ctx.meter(lambda det=det: det.detect_many(view_batches, concepts))  # called here
        runs[half] = [d for per_view in many for d in per_view]
        detectors[half] = det
        r = Result(
            "detect",
            "yolo_world",
            kind,
            ctx.device,
            f"{'fp16' if half else 'fp32'}, batch {batch_size}",
            len(frames),
            dt,
            peak_gpu_mib=peak,
            production=half == opts.get("yolo_world_half", False),
            notes=[f"the {s.views} views' frames interleaved in shared passes (detect_many, as run_detect_views)"],
        )
        out.append(_rate(r, s, 2.0))
        if half and ctx.budget.allows(4 * dt):
            single = create(
                "open_vocab_detector",
                "yolo_world",
                device=ctx.device,
                yolo_world_weights=yolo,
                open_clip_weights=clip,
                **{**opts, "yolo_world_half": half, "yolo_world_batch_size": 1},
            )
            few = frames[: max(2, len(frames) // 4)]
            dt1, peak1, _ = ctx.meter(
                lambda single=single, few=few: single.detect(_batch(few), concepts)
            )  # called here
            r1 = Result(
                "detect",
                "yolo_world",
                kind,
                ctx.device,
                "fp16, batch 1",
                len(few),
                dt1,
                peak_gpu_mib=peak1,
                production=False,
            )
            out.append(_rate(r1, s, 2.0))
    prod = bool(opts.get("yolo_world_half", False))
    if ctx.budget.allows(2 * out[0].seconds + 5):
        # the views one per call (the stage before run_detect_views) against the shared passes
        dt1, peak1, alone = ctx.meter(lambda: [d for b in view_batches for d in detectors[prod].detect(b, concepts)])
        r1 = Result(
            "detect",
            "yolo_world",
            kind,
            ctx.device,
            f"{'fp16' if prod else 'fp32'}, one view per call",
            len(frames),
            dt1,
            peak_gpu_mib=peak1,
            production=False,
        )
        out.append(_rate(r1, s, 2.0))
        m = compare_detections(alone, runs[prod])
        ctx.comparisons.append(
            Comparison(
                "detect",
                "views in shared passes vs one view per call",
                m,
                f"share of boxes with a same-label partner at IoU >= {BOX_IOU_MIN} >= {BOX_KEPT_MIN}",
                None if m["kept_share"] is None else m["kept_share"] >= BOX_KEPT_MIN,
            )
        )
    m = compare_detections(runs[False], runs[True])
    ok = None if m["kept_share"] is None or ctx.device == "cpu" else m["kept_share"] >= BOX_KEPT_MIN
    ctx.comparisons.append(
        Comparison(
            "detect",
            "fp16 vs fp32 (same frames, batch)",
            m,
            f"share of boxes with a same-label partner at IoU >= {BOX_IOU_MIN} >= {BOX_KEPT_MIN}",
            ok,
            UNMEASURED_CPU if ctx.device == "cpu" else "",
        )
    )
    return out


def _sam3_thresholds(seg, batch, concepts: list[str], per_frame: int = 3) -> float:
    """A score threshold that lets ~``per_frame`` detections per frame through: random weights
    score every query nearly alike (~0.18), far below the production thresholds, so nothing would
    be tracked. The scores are every concept's on ``batch`` (sam3's detector, before NMS: ``seg``
    lets none through), because concepts score differently: one concept's threshold can let all
    200 queries of another through, and NMS over 200 masks needs a 26 GB IoU matrix. The detector
    sees no tracking state, so on the frames probed the run's scores are these."""
    from vsi_wild.stages.backends.segment import detection_scores

    scores = detection_scores(seg, lambda: seg.segment(batch, concepts))
    top = np.unique(scores)[::-1]
    k = min(len(top) - 1, per_frame * len(batch.images))
    return float((top[k - 1] + top[k]) / 2)


def segment_cost_model(t_per_concept: float, t_shared: float, frames: int, concepts: int) -> dict[str, float]:
    """Per frame: the per-concept path costs C x (E + H), the shared path E + C x H (E: the image
    encoder, H: the rest per concept: fusion, decoder, heads, tracker). Two measured runs on the
    same clip give E and H; hours of 360° video per GPU-hour at C concepts follow. A model from two
    points: it assumes H does not depend on C (true of the arithmetic; real objects add tracking)."""
    if concepts < 2:
        return {}
    eh = t_per_concept / (frames * concepts)
    h = (t_shared / frames - eh) / (concepts - 1)
    e = eh - h
    return {"encoder_s_per_frame": e, "per_concept_s_per_frame": h}


def check_segment(ctx: Context) -> list[Result]:
    """SAM3 video on one clip: the per-concept path (one propagation per concept, the old way) and
    the shared-backbone path (one image-encoder pass per frame), both bf16 on a GPU; the shared
    path's records against the per-concept path's (equal by design), bf16 against fp32."""
    from vsi_wild.stages.backends.base import create

    s = ctx.s
    if ctx.sam3_checkpoint:
        path, kind = ctx.sam3_checkpoint, RANDOM + ", given"
    else:
        path, kind = _weight(
            ctx.config,
            ("segmenter", "sam3"),
            "models.sam3_checkpoint",
            _random_weights().sam3_checkpoint,
            ctx.tmp,
            "sam3.pt",
        )
    opts = _models_overrides(ctx.config, "sam3_")
    frames = _frames(s.sam3_frames, s)
    batch = _batch(frames)
    concepts = CONCEPTS[: s.concepts]

    def make(**kw):
        return create("segmenter", "sam3", device=ctx.device, sam3_checkpoint=path, **{**opts, **kw})

    notes = []
    if kind != "real":
        # the probe runs the shared path (one encoder pass per frame) over the first frames, all
        # of them in the reduced form: there no frame of the run can let more through
        probe = make(sam3_score_threshold=1.0, sam3_new_det_threshold=1.0, sam3_shared_backbone=True)
        thr = _sam3_thresholds(probe, _batch(frames[:2]), concepts)
        opts.update(sam3_score_threshold=thr, sam3_new_det_threshold=thr)
        notes.append(
            f"random weights: thresholds set to {thr:.6f} from the detector's own scores (a few "
            "detections per frame); the tracking cost of real scenes is not in this figure"
        )
    else:
        make().segment(_batch(frames[:2]), concepts[:1])  # warm-up

    results: list[Result] = []
    records: dict[str, list] = {}
    for variant, shared in (("per-concept (old)", False), ("shared encoder (new)", True)):
        seg = make(sam3_shared_backbone=shared)
        encoder = seg.model.detector.backbone
        calls: list[float] = []
        real_forward = encoder.forward_image

        def counting(x, real_forward=real_forward, calls=calls):
            # which frame: a strided sample of its pixels (a whole sum would not tell rolled frames apart)
            calls.append(float(x.flatten()[::4099].double().sum()))
            return real_forward(x)

        encoder.forward_image = counting
        try:
            dt, peak, recs = ctx.meter(lambda seg=seg: seg.segment(batch, concepts))  # called here
        finally:
            del encoder.forward_image
        records[variant] = recs
        r = Result(
            "segment",
            "sam3",
            kind,
            ctx.device,
            variant,
            len(frames),
            dt,
            peak_gpu_mib=peak,
            production=shared == opts.get("sam3_shared_backbone", True),
        )
        r.extra.update(
            concepts=len(concepts),
            encoder_calls=len(calls),
            distinct_frames_encoded=len(set(calls)),
            encoder_calls_per_frame=len(calls) / len(frames),
            records=len(recs),
            precision="fp32" if ctx.device == "cpu" else opts.get("sam3_precision", "bf16"),
        )
        if shared and seg.last_shared is not None:
            r.extra["frames_held_at_most"] = seg.last_shared.peak_frames
        r.notes.append(
            f"one clip of {len(frames)} frames, {len(concepts)} concepts, {len(recs)} masks; "
            f"image encoder {len(calls) / len(frames):.2f} x per frame"
        )
        if shared:
            r.notes.append(
                "the model only: in the stage a worker runs a video's clips, the next clips' JPEG folders "
                "written by its feed thread while SAM3 works (engine.execute_group, SEGMENT.feed)"
            )
        r.notes += notes
        results.append(_rate(r, s, 2.0))
    old, new = records["per-concept (old)"], records["shared encoder (new)"]
    m = compare_segments(old, new)
    ok = len(old) == len(new) == m["identical"]
    ctx.comparisons.append(
        Comparison(
            "segment",
            "shared encoder vs per-concept (same precision)",
            m,
            "identical records (same arithmetic)",
            ok if old or new else None,
        )
    )
    model = segment_cost_model(results[0].seconds, results[1].seconds, len(frames), len(concepts))
    if model:
        for r, shared in zip(results, (False, True), strict=True):
            c = PLANNED_CONCEPTS
            per_frame = (
                c * (model["encoder_s_per_frame"] + model["per_concept_s_per_frame"])
                if not shared
                else model["encoder_s_per_frame"] + c * model["per_concept_s_per_frame"]
            )
            r.extra["cost_model"] = model
            if per_frame > 0:
                r.extra[f"video_hours_per_gpu_hour_at_{c}_concepts"] = 1.0 / (per_frame * s.views * 2.0)
    tolerance = f"matched share >= {MASK_MATCHED_MIN}, mean mask IoU >= {MASK_IOU_MIN}"
    if ctx.device != "cpu" and ctx.budget.allows(1.5 * results[1].seconds + 30):
        seg32 = make(sam3_shared_backbone=True, sam3_precision="fp32")
        dt, peak, recs32 = ctx.meter(lambda: seg32.segment(batch, concepts))
        r = Result(
            "segment",
            "sam3",
            kind,
            ctx.device,
            "shared encoder, fp32",
            len(frames),
            dt,
            peak_gpu_mib=peak,
            production=False,
        )
        results.append(_rate(r, s, 2.0))
        m = compare_segments(recs32, new)
        ok = (
            None
            if m["matched_share"] is None
            else (m["matched_share"] >= MASK_MATCHED_MIN and m["mean_mask_iou"] >= MASK_IOU_MIN)
        )
        ctx.comparisons.append(
            Comparison(
                "segment",
                "bf16 vs fp32 (shared encoder)",
                m,
                tolerance,
                ok,
                "random weights: scores ~1e-4 apart, so precision flips which pass" if kind != "real" else "",
            )
        )
    else:
        ctx.comparisons.append(
            Comparison(
                "segment",
                "bf16 vs fp32 (shared encoder)",
                {},
                tolerance,
                None,
                UNMEASURED_CPU if ctx.device == "cpu" else "skipped: out of --budget-s",
            )
        )
    return results


def check_pose(ctx: Context) -> list[Result]:
    """DA3 on the 4 views' 2 FPS frames: each view alone (windows one at a time) and the views'
    windows batched, in the production precision; fp32 as the reference."""
    from vsi_wild.stages.backends.base import create

    s, rw = ctx.s, _random_weights()
    path, kind = _weight(
        ctx.config,
        ("pose_estimator", "da3"),
        "models.da3_model_dir",
        lambda p: rw.da3_folder(p, s.da3_architecture),
        ctx.tmp,
        "da3",
    )
    opts = _models_overrides(ctx.config, "da3_")
    if s.da3_process_res:
        opts["da3_process_res"] = s.da3_process_res
    opts["da3_window"] = min(opts.get("da3_window", 64), s.frames)
    opts["da3_overlap"] = min(opts.get("da3_overlap", 8), opts["da3_window"] - 1)
    views = [_batch(_frames(s.frames, s, v), f"gpu-check_{v}") for v in range(s.views)]
    n = sum(len(b.images) for b in views)
    # as the pose stage builds it: with the camera height, each chunk is scaled to metres by its ground
    height = {"camera_height": ctx.config.pose.camera_height}
    est = create("pose_estimator", "da3", device=ctx.device, da3_model_dir=path, **height, **opts)
    est.estimate(_batch(views[0].images[:2]))  # warm-up
    out = []
    dt, peak, alone = ctx.meter(lambda: [est.estimate(b) for b in views])
    note = (
        f"window {opts['da3_window']}, overlap {opts['da3_overlap']}, process_res "
        f"{opts.get('da3_process_res', 'config')}, {s.views} views"
    )
    precision = "fp32" if ctx.device == "cpu" else opts.get("da3_precision", "bf16")
    r = Result(
        "pose",
        "da3",
        kind,
        ctx.device,
        f"views one at a time, {precision}",
        n,
        dt,
        peak_gpu_mib=peak,
        production=False,
        notes=[note],
    )
    out.append(_rate(r, s, 2.0))
    dt, peak, together = ctx.meter(lambda: est.estimate_many(views))
    r = Result(
        "pose",
        "da3",
        kind,
        ctx.device,
        f"views batched, {precision}",
        n,
        dt,
        peak_gpu_mib=peak,
        notes=[note, "estimate_many: the pose stage's path (estimate_source: the views' chunks in lockstep)"],
    )
    out.append(_rate(r, s, 2.0))
    _compare_poses(ctx, "views batched vs one at a time", alone, together)
    if ctx.budget.allows(2 * dt + 10):
        est32 = create(
            "pose_estimator",
            "da3",
            device=ctx.device,
            da3_model_dir=path,
            **height,
            **{**opts, "da3_precision": "fp32"},
        )
        dt32, peak32, ref = ctx.meter(lambda: est32.estimate_many(views))
        r = Result(
            "pose",
            "da3",
            kind,
            ctx.device,
            "fp32 reference, views batched",
            n,
            dt32,
            peak_gpu_mib=peak32,
            production=False,
            notes=[note],
        )
        out.append(_rate(r, s, 2.0))
        _compare_poses(ctx, f"{precision} vs fp32", ref, together, unmeasured=ctx.device == "cpu")
    return out


def _compare_poses(ctx: Context, what: str, ref: list, other: list, unmeasured: bool = False) -> None:
    """A Comparison of two runs' poses of the same views: the largest orientation difference
    (judged against POSE_DEG_MAX unless ``unmeasured``: a precision the CPU does not use)."""
    worst = _worst_rotation(
        [rotation_error_deg(a.extrinsics, b.extrinsics, a.valid & b.valid) for a, b in zip(ref, other, strict=True)]
    )
    ok = None if worst["max_deg"] is None or unmeasured else worst["max_deg"] <= POSE_DEG_MAX
    note = UNMEASURED_CPU if unmeasured else ""
    ctx.comparisons.append(
        Comparison("pose", what, worst, f"largest orientation difference <= {POSE_DEG_MAX} deg", ok, note)
    )


def _worst_rotation(parts: list[dict]) -> dict[str, float | None]:
    seen = [p for p in parts if p["frames"]]
    if not seen:
        return {"frames": 0, "mean_deg": None, "max_deg": None}
    frames = sum(p["frames"] for p in seen)
    return {
        "frames": frames,
        "mean_deg": sum(p["mean_deg"] * p["frames"] for p in seen) / frames,
        "max_deg": max(p["max_deg"] for p in seen),
    }


def check_faces(ctx: Context) -> list[Result]:
    from vsi_wild.stages.faces import make_detector

    scrfd_signature_model = _random_weights().scrfd_signature_model  # an ONNX graph with SCRFD's interface
    s = ctx.s
    path, kind = _weight(
        ctx.config, ("face_detector", "scrfd"), "faces.scrfd_weights", scrfd_signature_model, ctx.tmp, "scrfd.onnx"
    )
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if ctx.device == "cuda" else ["CPUExecutionProvider"]
    faces = ctx.config.faces.model_copy(update={"backend": "scrfd", "scrfd_weights": path, "onnx_providers": providers})
    det = make_detector(faces)
    frames = _frames(s.frames, s)
    det.detect(frames[0])  # warm-up
    dt, peak, _ = ctx.meter(lambda: [det.detect(f) for f in frames])
    r = Result("faces", "scrfd", kind, ctx.device, "", len(frames), dt, peak_gpu_mib=peak)
    active = _onnx_providers(det)
    r.notes.append(f"onnxruntime providers in use: {active}")
    if ctx.device == "cuda" and "CUDAExecutionProvider" not in active:
        r.notes.append("CUDA provider NOT active: install onnxruntime-gpu")
    r.notes.append("rate: every projected frame at the source fps (the paper's choice; our DAG detects on the CPU)")
    return [_rate(r, s, s.source_fps)]


def _onnx_providers(det: Any) -> list[str]:
    for obj in (det, getattr(det, "model", None)):
        sess = getattr(obj, "session", None) or getattr(obj, "sess", None)
        if sess is not None and hasattr(sess, "get_providers"):
            return list(sess.get_providers())
    return []


CHECKS = {
    "detect": check_detect,
    "segment": check_segment,
    "pose": check_pose,
    "faces": check_faces,
    "text": check_text,
}
GPU_SIDE = ("detect", "segment", "pose")  # the DAG's GPU stages (faces run on the CPU)


# Ways of running the GPU side, by the variant each stage runs in (None: the production way)
WAYS = {
    "production": {},
    # the pipeline before issue 33
    "before": {"detect": "fp32, one view per call", "segment": "per-concept (old)", "pose": "views one at a time"},
    "pose_alone": {"pose": "views one at a time"},  # production, but the views' DA3 windows one view at a time
    "detect_fp16": {"detect": "fp16, batch"},  # production, with YOLO-World in fp16 (models.yolo_world_half)
}


def overall(results: list[Result], way: dict[str, str] | None = None) -> float | None:
    """Hours of 360° video per GPU-hour of the DAG's GPU stages together, run one after the other,
    each stage in the variant ``way`` names for it (a prefix of the variant) or else its production
    way; None unless every stage measured has that variant."""
    way = way or {}
    rates = []
    for stage in GPU_SIDE:
        rows = [r for r in results if r.stage == stage]
        if not rows:
            continue
        want = way.get(stage)
        pick = [r for r in rows if (r.variant.startswith(want) if want else r.production)]
        if not pick or not pick[0].video_hours_per_gpu_hour:
            return None
        rates.append(pick[0].video_hours_per_gpu_hour)
    return 1.0 / sum(1.0 / x for x in rates) if rates else None


def _line(r: Result) -> str:
    hours = "-" if r.video_hours_per_gpu_hour is None else f"{r.video_hours_per_gpu_hour:.2f}"
    gpu = "-" if r.peak_gpu_mib is None else f"{r.peak_gpu_mib:,.0f} MiB"
    name = f"{r.stage} {r.variant}".strip()
    mark = "*" if r.production else " "
    return f"{mark} {name:38s} {r.fps:9.2f} fps  peak GPU {gpu:>11s}  video h / GPU h {hours:>7s}  [{r.weights}]"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-c", "--config", default=str(REPO / "configs" / "default.yaml"))
    ap.add_argument("--out", default=str(REPO / "build" / "gpu_check.json"))
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--cpu", action="store_true", help="run on CPU (the test suite's reduced form)")
    ap.add_argument("--tiny", action="store_true", help="small frames and architectures, few frames")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=420.0,
        help="time for the whole run: comparison runs that would not fit are skipped (default 7 min)",
    )
    ap.add_argument(
        "--sam3-checkpoint",
        default=None,
        help="a random-weight SAM3 file made before (tests/random_weights.py), instead of building one",
    )
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("YOLO_OFFLINE", "1")

    import torch

    from vsi_wild.stages.backends import params as P

    config = load_sections(Path(args.config))
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on the GPU machine, or --cpu --tiny for the reduced form")
    s = TINY if args.tiny else Setting()
    t0 = time.monotonic()
    results: list[Result] = []
    errors: dict[str, str] = {}
    comparisons: list[Comparison] = []
    print("* = the way the pipeline runs the stage; the other rows are references and context", flush=True)
    with tempfile.TemporaryDirectory(prefix="vsi-gpu-check-") as tmp:
        ctx = Context(
            config, s, device, Path(tmp), Meter(device), Budget(args.budget_s), args.sam3_checkpoint, comparisons
        )
        for stage in [x.strip() for x in args.stages.split(",") if x.strip()]:
            t_stage = time.monotonic()
            try:
                rs = CHECKS[stage](ctx)
            except Exception as e:  # one backend failing must not hide the others' figures
                errors[stage] = f"{type(e).__name__}: {e}"
                print(f"{stage}: FAILED {errors[stage]}", flush=True)
                continue
            finally:
                P.clear_cache()
                if device == "cuda":
                    torch.cuda.empty_cache()
            for r in rs:
                r.peak_rss_mib = _rss_mib()
                results.append(r)
                print(_line(r), flush=True)
                for note in r.notes:
                    print(f"{'':12s}{note}")
            if stage == "segment":
                for r in rs[:2]:
                    print(
                        f"segment_encoder_calls_per_frame: {r.extra['encoder_calls_per_frame']:.2f}  ({r.variant}, "
                        f"{r.extra['concepts']} concepts, {r.frames} frames)",
                        flush=True,
                    )
            print(f"{'':12s}({stage}: {time.monotonic() - t_stage:.0f} s)", flush=True)
    for c in comparisons:
        verdict = {
            True: "holds",
            False: "DOES NOT HOLD",
            None: "UNMEASURED" if c.note.startswith("unmeasured") else "nothing to compare",
        }[c.ok]
        shown = ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in c.measures.items())
        print(
            f"check {c.stage}: {c.what}: {verdict} ({shown}; tolerance: {c.tolerance})"
            + (f" [{c.note}]" if c.note else ""),
            flush=True,
        )
    ways = {name: overall(results, way) for name, way in WAYS.items()}
    new, old = ways["production"], ways["before"]
    report = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "setting": asdict(s),
        "tiny": args.tiny,
        "seconds": time.monotonic() - t0,
        "stages": [asdict(r) for r in results],
        "comparisons": [asdict(c) for c in comparisons],
        "overall_video_hours_per_gpu_hour": new,
        "overall_video_hours_per_gpu_hour_by_way": ways,
        "errors": errors,
        "unmeasured": unmeasured(device, results),
    }
    seg_new = [r for r in results if r.stage == "segment" and r.production]
    at_c = seg_new[0].extra.get(f"video_hours_per_gpu_hour_at_{PLANNED_CONCEPTS}_concepts") if seg_new else None
    if at_c:
        others = [
            r.video_hours_per_gpu_hour
            for r in results
            if r.stage in ("detect", "pose") and r.production and r.video_hours_per_gpu_hour
        ]
        report[f"overall_video_hours_per_gpu_hour_at_{PLANNED_CONCEPTS}_concepts"] = 1.0 / (
            1.0 / at_c + sum(1.0 / x for x in others)
        )
    random_note = (
        " (random weights in some stages: speed and memory only)" if any(r.weights != "real" for r in results) else ""
    )

    def fmt(x):
        return "-" if x is None else f"{x:.2f}"

    print(
        f"overall: {fmt(new)} hours of 360° video per GPU-hour (detect, segment, pose as the pipeline runs them); "
        f"before issue 33 (detect fp32 one view per call, segment per concept, pose one view at a time): "
        f"{fmt(old)}; with the views' DA3 windows one view at a time: {fmt(ways['pose_alone'])}; "
        f"with YOLO-World in fp16: {fmt(ways['detect_fp16'])}{random_note}"
    )
    if f"overall_video_hours_per_gpu_hour_at_{PLANNED_CONCEPTS}_concepts" in report:
        print(
            f"overall at {PLANNED_CONCEPTS} concepts per view (segment by its two-point cost model): "
            f"{fmt(report[f'overall_video_hours_per_gpu_hour_at_{PLANNED_CONCEPTS}_concepts'])}"
        )
    for what in report["unmeasured"]:
        print(f"unmeasured: {what}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1, default=_json_default))
    print(f"wrote {args.out} ({report['seconds']:.0f} s)")
    return json.loads(json.dumps(report, default=_json_default))


def unmeasured(device: str, results: list[Result]) -> list[str]:
    """What this run does not measure, said in its output and JSON rather than left to be read
    into its figures."""
    out = []
    if device == "cpu":
        out += [
            "every GPU figure: the fps, memory and hours of video per GPU-hour here are the CPU's on "
            "reduced inputs (they show the script runs, nothing about a GPU)",
            "fp16 / bf16 against fp32 (detect, segment, pose): the CPU runs every model in fp32",
        ]
    if any(r.weights != "real" for r in results):
        out.append(
            "outputs with real weights (random weights: speed and memory only; a real scene's "
            "objects add tracking cost to segment)"
        )
    return out


def _json_default(x: Any) -> Any:
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)


if __name__ == "__main__":
    rep = main()
    failed = any(c["ok"] is False for c in rep["comparisons"])
    sys.exit(1 if rep["errors"] or failed else 0)
