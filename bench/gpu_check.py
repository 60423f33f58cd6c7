"""One prepared check for a machine with a GPU: each production backend, through our adapters, at
the production config's settings, on CUDA. Prints per stage the frames per second, the peak GPU
memory and the hours of 360° video one GPU-hour processes, and the same for the GPU side as a
whole; writes them as JSON.

A weight present under the config's `models.weights_dir` (as `vsi-wild weights check` sees it) is
used; an absent one is replaced by the same architecture with random weights (tests/random_weights.py),
which measures speed and memory only: every stage says which it ran with.

How one stage's speed becomes hours of 360° video per GPU-hour: a second of a source is `views`
perspective views; the stage handles, per view and second of source,
  detect (YOLO-World-v2)  2 frames (2 FPS sampling)
  segment (SAM3 video)    2 frames x concepts (one propagation per concept over each clip)
  pose (DA3)              2 frames (windows of da3_window frames, overlap counted as cost)
  faces (SCRFD-10G)       the source fps (the paper detects on every projected frame)
so hours per GPU-hour = fps / (views x frames per view-second); the whole GPU side is the harmonic
sum over the stages (one GPU runs them one after the other). open_clip text features are per
distinct name, not per second of video: reported as texts per second, left out of the sum.

Usage: python bench/gpu_check.py [-c configs/default.yaml] [--out build/gpu_check.json]
                                 [--stages detect,segment,pose,faces,text] [--cpu] [--tiny]
`--cpu --tiny` is the reduced form the test suite runs (small frames, small architectures, few
frames) so that this script cannot rot; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
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
CONCEPTS = ["person", "chair", "table", "car"]


@dataclass
class Setting:
    """The workload: what production runs, or the reduced form."""

    views: int = 4
    view_w: int = 1920
    view_h: int = 1080
    source_fps: float = 30.0
    frames: int = 64  # 2 FPS frames per stage run (32 s of one view)
    sam3_frames: int = 120  # one minute of a clip at 2 FPS (the paper: 5-minute clips)
    concepts: int = 4
    yolo_architecture: str = "yolov8x-worldv2.yaml"
    da3_architecture: str = "da3-large"
    da3_process_res: int | None = None  # None: the config's
    text_names: int = 2048


TINY = Setting(views=4, view_w=96, view_h=64, frames=4, sam3_frames=2, concepts=2,
               yolo_architecture="yolov8s-worldv2.yaml", da3_architecture="da3-small", da3_process_res=112,
               text_names=16)


@dataclass
class Result:
    stage: str
    backend: str
    weights: str  # "real" or "random (speed and memory only)"
    device: str
    frames: int = 0
    seconds: float = 0.0
    fps: float = 0.0
    frames_per_view_second: float = 0.0
    video_hours_per_gpu_hour: float | None = None
    peak_gpu_mib: float | None = None
    peak_rss_mib: float = 0.0
    notes: list[str] = field(default_factory=list)


def _frames(n: int, s: Setting) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    base = (rng.random((s.view_h, s.view_w, 3)) * 255).astype(np.uint8)
    # a moving pattern: consecutive frames differ as video frames do
    return [np.roll(base, 3 * k, axis=1) for k in range(n)]


def _batch(images: list[np.ndarray]):
    from vsi_wild.stages.backends.base import FrameBatch

    n = len(images)
    return FrameBatch("gpu-check", images, [k / 2 for k in range(n)], [k * 15 for k in range(n)], list(range(n)), 30.0)


class Meter:
    """Wall time and peak memory of one measured call (CUDA synchronised on both sides)."""

    def __init__(self, device: str):
        self.cuda = device == "cuda"

    def __call__(self, fn: Callable[[], Any]) -> tuple[float, float | None]:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            free_before = torch.cuda.mem_get_info()[0]
        t = time.perf_counter()
        fn()
        if self.cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t
        peak = None
        if self.cuda:
            torch_peak = torch.cuda.max_memory_allocated()
            outside = free_before - torch.cuda.mem_get_info()[0]  # onnxruntime's arena is not torch's
            peak = max(torch_peak, outside) / 2**20
        return dt, peak


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _weight(config, key: str, build: Callable[[Path], None], tmp: Path, name: str) -> tuple[str, str]:
    """The configured weight's path when present and usable, else a random-weight file built by
    ``build`` under ``tmp``: (path, "real" | "random ...")."""
    from vsi_wild.weights import needed_weights

    found = [w for w in needed_weights(config) if w.key == key]
    if found and found[0].status.usable:
        return str(found[0].status.path), "real"
    path = tmp / name
    build(path)
    return str(path), "random (speed and memory only)"


def _random_weights():
    sys.path.insert(0, str(REPO / "tests"))
    import random_weights

    return random_weights


def check_text(config, s: Setting, device: str, tmp: Path, meter: Meter) -> Result:
    from vsi_wild.stages.backends.base import create

    rw = _random_weights()
    path, kind = _weight(config, "models.open_clip_weights", rw.clip_state_dict, tmp, "clip.pt")
    emb = create("text_embedder", "open_clip", device=device, open_clip_weights=path)
    names = [f"object number {k}" for k in range(s.text_names)]
    emb.embed(names[:8])  # warm-up
    dt, peak = meter(lambda: emb.embed(names))
    r = Result("text", "open_clip", kind, device, len(names), dt, len(names) / dt, peak_gpu_mib=peak)
    r.notes.append("texts per second (per distinct name, not per second of video)")
    return r


def check_detect(config, s: Setting, device: str, tmp: Path, meter: Meter) -> Result:
    from vsi_wild.stages.backends.base import create

    rw = _random_weights()
    clip, clip_kind = _weight(config, "models.open_clip_weights", rw.clip_state_dict, tmp, "clip.pt")
    yolo, kind = _weight(config, "models.yolo_world_weights",
                         lambda p: rw.yolo_world(p, s.yolo_architecture), tmp, "yolo_world.pt")
    det = create("open_vocab_detector", "yolo_world", device=device, yolo_world_weights=yolo, open_clip_weights=clip,
                 **_models_overrides(config, "yolo_world_"))
    frames = _frames(s.frames, s)
    det.detect(_batch(frames[:2]), CONCEPTS[: s.concepts])  # warm-up (model load, cudnn autotune)
    dt, peak = meter(lambda: det.detect(_batch(frames), CONCEPTS[: s.concepts]))
    return _rate(Result("detect", "yolo_world", kind, device, len(frames), dt, peak_gpu_mib=peak), s, 2.0)


def check_segment(config, s: Setting, device: str, tmp: Path, meter: Meter) -> Result:
    from vsi_wild.stages.backends.base import create

    rw = _random_weights()
    path, kind = _weight(config, "models.sam3_checkpoint", rw.sam3_checkpoint, tmp, "sam3.pt")
    seg = create("segmenter", "sam3", device=device, sam3_checkpoint=path, **_models_overrides(config, "sam3_"))
    frames = _frames(s.sam3_frames, s)
    concepts = CONCEPTS[: s.concepts]
    seg.segment(_batch(frames[:2]), concepts[:1])  # warm-up
    dt, peak = meter(lambda: seg.segment(_batch(frames), concepts))
    r = Result("segment", "sam3", kind, device, len(frames), dt, peak_gpu_mib=peak)
    r.notes.append(f"one clip of {len(frames)} frames, {len(concepts)} concepts (one propagation each)")
    if kind != "real":
        r.notes.append("random weights find next to nothing: the tracking cost of real instances is not in this figure")
    return _rate(r, s, 2.0 * len(concepts))


def check_pose(config, s: Setting, device: str, tmp: Path, meter: Meter) -> Result:
    from vsi_wild.stages.backends.base import create

    rw = _random_weights()
    path, kind = _weight(config, "models.da3_model_dir", lambda p: rw.da3_folder(p, s.da3_architecture), tmp, "da3")
    opts = _models_overrides(config, "da3_")
    if s.da3_process_res:
        opts["da3_process_res"] = s.da3_process_res
    opts["da3_window"] = min(opts.get("da3_window", 64), s.frames)
    opts["da3_overlap"] = min(opts.get("da3_overlap", 8), opts["da3_window"] - 1)
    est = create("pose_estimator", "da3", device=device, da3_model_dir=path, **opts)
    frames = _frames(s.frames, s)
    est.estimate(_batch(frames[:2]))  # warm-up
    dt, peak = meter(lambda: est.estimate(_batch(frames)))
    r = Result("pose", "da3", kind, device, len(frames), dt, peak_gpu_mib=peak)
    r.notes.append(f"window {opts['da3_window']}, overlap {opts['da3_overlap']}, process_res "
                   f"{opts.get('da3_process_res', 'config')}")
    return _rate(r, s, 2.0)


def check_faces(config, s: Setting, device: str, tmp: Path, meter: Meter) -> Result:
    from vsi_wild.stages.faces import make_detector

    sys.path.insert(0, str(REPO / "tests"))
    from test_project_faces import scrfd_signature_model  # an ONNX graph with SCRFD's interface

    path, kind = _weight(config, "faces.scrfd_weights", scrfd_signature_model, tmp, "scrfd.onnx")
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    faces = config.faces.model_copy(update={"backend": "scrfd", "scrfd_weights": path, "onnx_providers": providers})
    det = make_detector(faces)
    frames = _frames(s.frames, s)
    det.detect(frames[0])  # warm-up
    dt, peak = meter(lambda: [det.detect(f) for f in frames])
    r = Result("faces", "scrfd", kind, device, len(frames), dt, peak_gpu_mib=peak)
    active = _onnx_providers(det)
    r.notes.append(f"onnxruntime providers in use: {active}")
    if device == "cuda" and "CUDAExecutionProvider" not in active:
        r.notes.append("CUDA provider NOT active: install onnxruntime-gpu")
    r.notes.append("rate: every projected frame at the source fps (the paper's choice)")
    return _rate(r, s, s.source_fps)


def _onnx_providers(det: Any) -> list[str]:
    for obj in (det, getattr(det, "model", None)):
        sess = getattr(obj, "session", None) or getattr(obj, "sess", None)
        if sess is not None and hasattr(sess, "get_providers"):
            return list(sess.get_providers())
    return []


def _models_overrides(config, prefix: str) -> dict[str, Any]:
    """The config's settings of one model (production settings), weight paths left out."""
    skip = {"yolo_world_weights", "sam3_checkpoint", "da3_model_dir"}
    return {k: v for k, v in config.models.model_dump().items() if k.startswith(prefix) and k not in skip}


def _rate(r: Result, s: Setting, frames_per_view_second: float) -> Result:
    r.fps = r.frames / r.seconds if r.seconds else 0.0
    r.frames_per_view_second = frames_per_view_second
    r.video_hours_per_gpu_hour = r.fps / (s.views * frames_per_view_second)
    return r


CHECKS = {"detect": check_detect, "segment": check_segment, "pose": check_pose, "faces": check_faces,
          "text": check_text}


def overall(results: list[Result]) -> float | None:
    """Hours of 360° video per GPU-hour of the stages together, run one after the other."""
    rates = [r.video_hours_per_gpu_hour for r in results if r.video_hours_per_gpu_hour]
    return 1.0 / sum(1.0 / x for x in rates) if rates else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-c", "--config", default=str(REPO / "configs" / "default.yaml"))
    ap.add_argument("--out", default=str(REPO / "build" / "gpu_check.json"))
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--cpu", action="store_true", help="run on CPU (the test suite's reduced form)")
    ap.add_argument("--tiny", action="store_true", help="small frames and architectures, few frames")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("YOLO_OFFLINE", "1")

    import torch

    from vsi_wild.config import load_config
    from vsi_wild.stages.backends import params as P

    config = load_config(Path(args.config))
    device = "cpu" if args.cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on the GPU machine, or --cpu --tiny for the reduced form")
    s = TINY if args.tiny else Setting()
    meter = Meter(device)
    results: list[Result] = []
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="vsi-gpu-check-") as tmp:
        for stage in [x.strip() for x in args.stages.split(",") if x.strip()]:
            try:
                r = CHECKS[stage](config, s, device, Path(tmp), meter)
            except Exception as e:  # one backend failing must not hide the others' figures
                errors[stage] = f"{type(e).__name__}: {e}"
                print(f"{stage}: FAILED {errors[stage]}", flush=True)
                continue
            finally:
                P.clear_cache()
                if device == "cuda":
                    torch.cuda.empty_cache()
            r.peak_rss_mib = _rss_mib()
            results.append(r)
            hours = "-" if r.video_hours_per_gpu_hour is None else f"{r.video_hours_per_gpu_hour:.2f}"
            gpu = "-" if r.peak_gpu_mib is None else f"{r.peak_gpu_mib:,.0f} MiB"
            print(f"{r.stage:8s} {r.backend:11s} {r.fps:9.2f} fps  peak GPU {gpu:>11s}  "
                  f"video h / GPU h {hours:>7s}  [{r.weights}]", flush=True)
            for note in r.notes:
                print(f"{'':10s}{note}")
    report = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "setting": asdict(s),
        "tiny": args.tiny,
        "stages": [asdict(r) for r in results],
        "overall_video_hours_per_gpu_hour": overall(results),
        "errors": errors,
    }
    total = report["overall_video_hours_per_gpu_hour"]
    print(f"overall: {'-' if total is None else f'{total:.2f}'} hours of 360° video per GPU-hour"
          + (" (random weights in some stages: speed and memory only)" if any(r.weights != "real" for r in results)
             else ""))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    rep = main()
    sys.exit(1 if rep["errors"] else 0)
