"""What the CPU side of a rebuild costs: CPU-core-hours per hour of 360° video, per CPU stage.

Each stage's own functions run, at the production config's settings (configs/default.yaml: 4 views
of 1920x1080, x264 veryfast CRF 20, faces detected once a second plus the blurrer's bisection), on
the embedded sample's panorama: rendered once at 30 fps (cached under build/bench_capacity/) and,
by default, upscaled to the production source size, 3840x1920 (YouTube's 4K 360° stream; the
paper gives no size). Printed as `name: value` lines (and written as JSON), per hour of source
video, i.e. of one 360° video (= 4 view-hours):

    probe           ffprobe counting every packet (the `probe` stage's check)
    decode          the source decoded once (PyAV, as the projection reads it): context
    project         decode + projection + face detection on the CPU (CenterFace, the CPU default;
                    production runs SCRFD on a GPU) + blur + encoding the 4 views
    project_cpu_side the same without face detection: what stays on the CPU when SCRFD is on a GPU
    projection, face_detection  the parts the stage counts itself
    encode          project - decode - projection - face detection: the 4 x264 encoders (and the
                    blur and frame hand-over, a few %)
    view_feed       decoding the 4 views at 2 FPS sampling (every frame decoded): the CPU work of
                    each GPU stage that reads the views (detect, segment and pose each do it once)
    pose_cpu        the CPU pose backend (twoview) on the 4 views at 2 FPS, feed included
    qa_render       VPO images: each view video's `qa` unit decodes the panorama around its 12
                    anchors only (a seek to the keyframe before each: `video_io.frames_at`, measured
                    on 8 anchors spread over the source, i.e. at the source's keyframe interval) and
                    renders, blurs and writes 24 images; per source 48 anchors and 96 images, spread
                    over the mean video length (38.62 min, SPEC)

The figures are CPU TIME (user + system of this process's threads and of its waited-for
children, ffprobe included: resource.getrusage RUSAGE_SELF + RUSAGE_CHILDREN), not wall time:
these machines are shared. CPU-seconds per second of video = core-hours per video hour.
Per-process and per-source set-up (imports, loading the detector, building the projection maps) is
done before the clock starts: on a 38-minute video it is negligible, on a 6-second one it is not.

When the source is not measured at the production size (--source-width), the parts whose cost
follows the source's pixels (decode, the QA stage's decodes) are also given scaled by the
pixel ratio (`*_at_production`); the rest works on views, whose size is the production one.

`--storage-root DIR` adds the bytes per second of source video of each stage's artifacts in a data
root that has run (e.g. configs/sample.yaml's).

Usage: python bench/bench_capacity.py [--seconds 6] [--source-width 3840] [--json PATH]
                                      [--storage-root DIR [--storage-only]]
docs/capacity.md turns these figures into the cost of a full release rebuild.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PRODUCTION_SOURCE = (3840, 1920)  # YouTube's 4K 360° stream
PRODUCTION_FPS = 30.0
MEAN_VIDEO_MIN = 38.62  # SPEC: 442 view videos, 284.52 h
SAMPLE_FPS = 2.0  # the model stages' sampling (stages/video_io.sample_frames)


def cpu_seconds() -> float:
    """User + system CPU seconds of this process (all threads) and its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measured(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(CPU seconds, wall seconds, result) of one call."""
    c0, t0 = cpu_seconds(), time.perf_counter()
    out = fn()
    return cpu_seconds() - c0, time.perf_counter() - t0, out


@dataclass(frozen=True)
class Source:
    path: Path
    width: int
    height: int
    fps: float
    seconds: float
    rendered_width: int  # the sample's own panorama width before any upscale

    @classmethod
    def of(cls, path: Path, rendered_width: int | None = None) -> Source:
        """A source file as the `probe` stage measures it."""
        from vsi_wild.stages.probe import probe_video

        info = probe_video(path)
        return cls(
            Path(path), info["width"], info["height"], info["fps"], info["duration_s"], rendered_width or info["width"]
        )


def _ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True)


def prepare_source(cache: Path, seconds: float, fps: float, source_width: int, sample_width: int = 1280) -> Source:
    """The sample's panorama, `seconds` long at `fps`, at `source_width` (upscaled with lanczos when
    wider than the render), cached under ``cache`` by its parameters."""
    from vsi_wild.stages.sample import SampleParams, generate_sample

    sample_width = min(sample_width, source_width)
    sp = SampleParams(duration_s=seconds, fps=fps, width=sample_width)
    key = hashlib.sha256(json.dumps([sp.model_dump(mode="json"), source_width], sort_keys=True).encode()).hexdigest()[
        :12
    ]
    d = cache / key
    src = d / f"source_{source_width}.mp4"
    if not src.exists():
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        with tempfile.TemporaryDirectory(dir=d) as tmp:
            rendered = Path(tmp) / "sample.mp4"
            generate_sample(sp, rendered)
            part = Path(tmp) / src.name
            if source_width == sample_width:
                shutil.copyfile(rendered, part)
            else:  # x264 at the sample's own quality; decode cost follows the bitrate a little
                _ffmpeg(
                    "-i",
                    str(rendered),
                    "-vf",
                    f"scale={source_width}:{source_width // 2}:flags=lanczos",
                    "-c:v",
                    "libx264",
                    "-preset",
                    sp.x264_preset,
                    "-crf",
                    str(sp.crf),
                    "-pix_fmt",
                    "yuv420p",
                    "-g",
                    str(int(round(sp.gop_s * fps))),
                    str(part),
                )
            part.rename(src)
    return Source.of(src, sample_width)


def production_settings(config_path: Path):
    """The production config's sections the CPU stages read, with the face detector swapped for the
    CPU one (production's SCRFD runs on a GPU; its weights are not here)."""
    from vsi_wild.config import load_config

    cfg = load_config(config_path)
    faces = cfg.faces.model_copy(
        update={"backend": "centerface", "scrfd_weights": None, "onnx_providers": ["CPUExecutionProvider"]}
    )
    return cfg.project, faces, cfg.pose, cfg.qa


def measure(src: Source, work: Path, config_path: Path, qa_images: int = 8) -> dict[str, Any]:
    """Every figure of the module docstring for one source: CPU seconds per second of source."""
    import numpy as np

    from vsi_wild.stages import pose as po
    from vsi_wild.stages.backends import (
        base,
        twoview,  # noqa: F401 - registers the CPU pose backend
    )
    from vsi_wild.stages.faces import image_blurrer, make_detector
    from vsi_wild.stages.probe import probe_video
    from vsi_wild.stages.project import Projector, project_source
    from vsi_wild.stages.qa.common import RenderJob, VideoInfo
    from vsi_wild.stages.qa.vpo import iter_frames, render_jobs
    from vsi_wild.stages.video_io import VideoReader, sample_frames, sampled_frames

    project_p, faces_p, pose_p, qa_p = production_settings(config_path)
    secs = src.seconds
    cpu: dict[str, float] = {}
    wall: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        c, w, out = measured(fn)
        cpu[name], wall[name] = c, w
        return out

    timed("probe", lambda: probe_video(src.path))

    def decode() -> int:
        n = 0
        with VideoReader(src.path) as reader:
            for _ in reader.frames():
                n += 1
        return n

    n_frames = timed("decode", decode)

    # set-up outside the clock: the detector's session, the projection's maps (cached per geometry)
    detector = make_detector(faces_p)
    warm = Projector(src.width, src.height, project_p)
    warm.project(
        np.zeros((src.height, src.width), np.uint8),
        np.zeros((src.height // 2, src.width // 2), np.uint8),
        np.zeros((src.height // 2, src.width // 2), np.uint8),
    )
    warm.close()
    views_dir = work / "views"
    stats: dict[str, Any] = {}
    views, faces = timed(
        "project",
        lambda: project_source(
            src.path, views_dir, project_p, detector, face_params=faces_p, source_id="local-capacity", stats=stats
        ),
    )
    cpu["projection"], cpu["face_detection"] = stats["project_cpu_s"], stats["detect_cpu_s"]
    cpu["project_cpu_side"] = cpu["project"] - cpu["face_detection"]
    cpu["encode"] = cpu["project"] - cpu["decode"] - cpu["projection"] - cpu["face_detection"]
    view_rows = views.to_pylist()
    view_files = {r["view"]: views_dir / r["path"] for r in view_rows}

    def feed() -> int:
        return sum(1 for path in view_files.values() for _ in sample_frames(path, SAMPLE_FPS))

    n_feed = timed("view_feed", feed)

    rows = {r["view"]: r for r in view_rows}
    inputs = {
        v: po.ViewInput(
            rows[v]["video_id"],
            float(rows[v]["yaw_deg"]),
            float(rows[v]["hfov_deg"]),
            float(rows[v]["fps"]),
            int(rows[v]["width"]),
            lambda path=view_files[v]: sampled_frames(path, SAMPLE_FPS, max_width=pose_p.frame_max_width),
        )
        for v in pose_p.views
        if v in rows
    }
    timed(
        "pose_cpu",
        lambda: po.estimate_source(
            inputs,
            lambda vi: base.create("pose_estimator", "twoview", **pose_p.estimator_options(vi.hfov_deg).as_options()),
            pose_p,
        ),
    )

    # QA's VPO images: the panorama decoded around each anchor (seeking), then render + blur + JPEG
    anchors = [int((k + 0.5) * n_frames / qa_images) for k in range(qa_images)]
    frames = timed("qa_decode", lambda: list(iter_frames(src.path, anchors)))
    video = VideoInfo.from_row(view_rows[0])
    blur = image_blurrer(detector, faces_p)
    jobs = [
        RenderJob(a, float(k * 360.0 / qa_images), qa_p.vpo_pitch_deg, f"images/capacity_{k}.{qa_p.image_format}")
        for k, a in enumerate(anchors)
    ]
    (work / "images").mkdir(exist_ok=True)
    timed("qa_images", lambda: render_jobs(src.path, jobs, lambda f: work / f, video, qa_p, blur, frames=frames))
    image_bytes = sum((work / j.file).stat().st_size for j in jobs) / qa_images
    anchors_per_view = qa_p.vpo_per_video * 4  # rotated and unrotated images show the same frames
    images_per_view = anchors_per_view * 2
    n_views = len(project_p.views)
    per_image = cpu["qa_images"] / qa_images
    per_anchor = cpu["qa_decode"] / qa_images
    video_s = MEAN_VIDEO_MIN * 60.0
    qa_per_s = n_views * (anchors_per_view * per_anchor + images_per_view * per_image) / video_s

    per_s = {k: v / secs for k, v in cpu.items() if k not in ("qa_decode", "qa_images")}
    per_s["qa_render"] = qa_per_s
    pixels_ratio = (PRODUCTION_SOURCE[0] * PRODUCTION_SOURCE[1]) / (src.width * src.height)
    at_production = {}
    if abs(pixels_ratio - 1.0) > 1e-9:  # decoding follows the source's pixels; probe only demuxes
        at_production["decode"] = per_s["decode"] * pixels_ratio
        at_production["qa_render"] = (
            n_views * (anchors_per_view * pixels_ratio * per_anchor + images_per_view * per_image) / video_s
        )
    view_bytes = sum(p.stat().st_size for p in view_files.values())
    return {
        "source": {
            "width": src.width,
            "height": src.height,
            "fps": src.fps,
            "seconds": secs,
            "frames": n_frames,
            "rendered_width": src.rendered_width,
            "bytes": src.path.stat().st_size,
            "bitrate_mbit_s": src.path.stat().st_size * 8 / secs / 1e6,
        },
        "production_source": list(PRODUCTION_SOURCE),
        "pixels_ratio_to_production": pixels_ratio,
        "views": {
            "n": n_views,
            "width": project_p.width,
            "height": project_p.height,
            "preset": project_p.preset,
            "crf": project_p.crf,
            "bytes_per_source_s": view_bytes / secs,
        },
        "faces": {
            "backend": faces_p.backend,
            "detect_width": stats["detect_width"],
            "detect_every": stats["detect_every"],
            "detector_runs_per_view_frame": (stats["detector_calls"] + stats["crop_calls"])
            / max(1, n_views * n_frames),
            "face_rows": faces.num_rows,
        },
        "feed_frames": n_feed,
        "qa": {
            "images_per_view": images_per_view,
            "anchors_per_view": anchors_per_view,
            "cpu_s_per_image": per_image,
            "cpu_s_per_anchor_decode": per_anchor,
            "keyframe_interval_s": _keyframe_interval(src.path),
            "bytes_per_image": image_bytes,
            "mean_video_min": MEAN_VIDEO_MIN,
        },
        "cpu_s": cpu,
        "wall_s": wall,
        "core_h_per_video_h": per_s,
        "core_h_per_video_h_at_production": at_production,
    }


def _keyframe_interval(path: Path) -> float | None:
    """Mean seconds between keyframes (what one anchor's seek-and-decode costs grows with); None
    with fewer than two keyframes."""
    import numpy as np

    from vsi_wild.stages.video_io import _packet_table, probe

    table, info = _packet_table(Path(path)), probe(path)
    if table is None or len(table.keyframes) < 2 or not info.fps:
        return None
    return float(np.mean(np.diff(table.keyframes))) / info.fps


def storage(root: Path) -> dict[str, Any]:
    """Bytes per second of source video of each stage's artifacts under a data root (every unit's
    current and older keys: what the root holds), the seconds from its probe rows."""
    import pyarrow.parquet as pq

    arts = root / "artifacts"
    probe_files = sorted((arts / "probe").rglob("source.parquet"))
    if not probe_files:
        raise SystemExit(f"{root}: no artifacts/probe/*/source.parquet (run the pipeline on it first)")
    seconds = {}
    for f in probe_files:
        for row in pq.read_table(f, columns=["source_id", "duration_s"]).to_pylist():
            seconds[row["source_id"]] = float(row["duration_s"])
    total = sum(seconds.values())
    per_stage = {}
    for stage_dir in sorted(p for p in arts.iterdir() if p.is_dir()):
        size = sum(f.stat().st_size for f in stage_dir.rglob("*") if f.is_file() and not f.is_symlink())
        per_stage[stage_dir.name] = size / total
    return {"root": str(root), "source_seconds": total, "bytes_per_source_s": per_stage}


def lines(res: dict[str, Any]) -> list[str]:
    """The `name: value` lines of a result (the measurement's, the storage's, or both)."""
    out = [] if "source" not in res else _cpu_lines(res)
    if "storage" in res:
        for stage, b in res["storage"]["bytes_per_source_s"].items():
            out.append(f"capacity_storage_{stage}_bytes_per_source_s: {b:.0f}")
    return out


def _cpu_lines(res: dict[str, Any]) -> list[str]:
    s = res["source"]
    out = [
        f"capacity_measured_at: {s['width']}x{s['height']} {s['fps']:g} fps, {s['seconds']:.1f} s "
        f"(the sample's {s['rendered_width']}x{s['rendered_width'] // 2} panorama"
        f"{', upscaled' if s['width'] != s['rendered_width'] else ''}; {s['bitrate_mbit_s']:.1f} Mbit/s)",
        f"capacity_pixels_ratio_to_production: {res['pixels_ratio_to_production']:.3f}  "
        f"(production source {PRODUCTION_SOURCE[0]}x{PRODUCTION_SOURCE[1]})",
    ]
    for name, v in res["core_h_per_video_h"].items():
        out.append(f"capacity_{name}_core_h_per_video_h: {v:.3f}")
    for name, v in res["core_h_per_video_h_at_production"].items():
        out.append(f"capacity_{name}_core_h_per_video_h_at_production: {v:.3f}  (scaled by the pixel ratio)")
    f = res["faces"]
    out.append(
        f"capacity_face_detector_runs_per_view_frame: {f['detector_runs_per_view_frame']:.4f}  "
        f"({f['backend']} at {f['detect_width']} px, every {f['detect_every']} frames + bisection; "
        "the paper: 1)"
    )
    out.append(
        f"capacity_view_bytes_per_source_s: {res['views']['bytes_per_source_s']:.0f}  "
        f"({res['views']['n']} x {res['views']['width']}x{res['views']['height']} x264 {res['views']['preset']} "
        f"CRF {res['views']['crf']})"
    )
    q = res["qa"]
    out.append(
        f"capacity_qa_image_bytes: {q['bytes_per_image']:.0f}  ({q['images_per_view']} VPO images per view video, "
        f"{res['views']['width']}x{res['views']['height']})"
    )
    gop = q["keyframe_interval_s"]
    out.append(
        f"capacity_qa_cpu_s_per_anchor: {q['cpu_s_per_anchor_decode']:.3f}  (seek + decode up to one anchor, "
        f"keyframes every {'?' if gop is None else f'{gop:.1f}'} s here; {q['anchors_per_view']} anchors "
        "per view video)"
    )
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=6.0, help="length of the measured source")
    ap.add_argument("--fps", type=float, default=PRODUCTION_FPS)
    ap.add_argument("--source-width", type=int, default=PRODUCTION_SOURCE[0])
    ap.add_argument("--sample-width", type=int, default=1280, help="the sample's render width (then upscaled)")
    ap.add_argument("-c", "--config", type=Path, default=REPO / "configs" / "default.yaml")
    ap.add_argument("--cache", type=Path, default=REPO / "build" / "bench_capacity")
    ap.add_argument("--json", type=Path, default=REPO / "build" / "bench_capacity.json")
    ap.add_argument("--qa-images", type=int, default=8, help="VPO images rendered to time one")
    ap.add_argument("--storage-root", type=Path, default=None)
    ap.add_argument("--storage-only", action="store_true", help="only the storage of --storage-root")
    args = ap.parse_args(argv)
    if args.storage_only and args.storage_root is None:
        ap.error("--storage-only needs --storage-root")
    t0 = time.time()
    res: dict[str, Any] = {}
    if not args.storage_only:
        src = prepare_source(args.cache, args.seconds, args.fps, args.source_width, args.sample_width)
        with tempfile.TemporaryDirectory(prefix="bench-capacity-") as tmp:
            res = measure(src, Path(tmp), args.config, args.qa_images)
    if args.storage_root is not None:
        res["storage"] = storage(args.storage_root)
    for line in lines(res):
        print(line, flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(res, indent=1))
    print(f"# wrote {args.json}; took {time.time() - t0:.0f} s", flush=True)
    return res


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
