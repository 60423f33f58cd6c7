"""Render the sample's equirectangular video and write its complete ground truth."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numba
import numpy as np
import pyarrow as pa

from vsi_wild import schema
from vsi_wild.errors import UnitError
from vsi_wild.ids import VIEWS
from vsi_wild.stages.sample.params import SampleParams
from vsi_wild.stages.sample.render import Camera, Renderer, set_threads
from vsi_wild.stages.sample.world import FACE_LABEL, World, build_world

TRUTH_FPS = 2.0  # t_k = k / 2 s, the pipeline's sampling rate


@dataclass
class SampleTruth:
    poses: pa.Table  # schema.TRUTH_POSES
    objects: pa.Table  # schema.TRUTH_OBJECTS
    visibility: pa.Table  # schema.TRUTH_VISIBILITY
    faces: pa.Table  # schema.TRUTH_FACES
    places: pa.Table  # schema.TRUTH_PLACES
    stats: dict[str, float] = field(default_factory=dict)  # timings (not part of the truth)


def n_frames(params: SampleParams) -> int:
    return max(1, int(round(params.duration_s * params.fps)))


def truth_samples(params: SampleParams) -> list[tuple[int, float, int]]:
    """(k, t_k, frame) for every 2 FPS timestamp t_k = k / 2 inside the video; frame = the nearest."""
    nf = n_frames(params)
    out = []
    k = 0
    while k / TRUTH_FPS < nf / params.fps - 1e-9:
        t = k / TRUTH_FPS
        out.append((k, t, min(int(math.floor(t * params.fps + 0.5)), nf - 1)))
        k += 1
    return out


def frame_pose(world: World, params: SampleParams, frame: int) -> tuple[float, float, float, float]:
    return world.route.pose(params.route_offset_s + frame / params.fps)


def _ffmpeg_cmd(params: SampleParams, out: Path) -> list[str]:
    exe = shutil.which("ffmpeg")
    if exe is None:
        raise UnitError("ffmpeg not found on PATH: the sample generator encodes with ffmpeg/libx264")
    rate = Fraction(params.fps).limit_denominator(1001)
    gop = max(1, int(round(params.gop_s * params.fps)))
    return [
        exe,
        "-hide_banner",
        "-loglevel",
        "error",
        "-nostdin",
        "-y",
        "-f",
        "rawvideo",
        "-pix_fmt",
        "rgb24",
        "-s",
        f"{params.width}x{params.height}",
        "-framerate",
        f"{rate.numerator}/{rate.denominator}",
        "-i",
        "pipe:0",
        "-an",
        "-c:v",
        "libx264",
        "-preset",
        params.x264_preset,
        "-crf",
        str(params.crf),
        "-pix_fmt",
        "yuv420p",
        "-g",
        str(gop),
        "-threads",
        str(params.encoder_threads),
        "-fflags",
        "+bitexact",
        "-flags:v",
        "+bitexact",
        "-map_metadata",
        "-1",
        "-f",
        "mp4",
        str(out),
    ]


def _mask_rows(ids: np.ndarray) -> list[tuple[int, int, int, int, int, int, str]]:
    """(label, x0, y0, x1, y1, pixels, rle counts) for every label >= 0 in an id buffer.

    Boxes are in pixel-edge coordinates (pixel (i, j) covers [i, i+1) x [j, j+1)), as
    pycocotools' toBbox gives them."""
    from pycocotools import mask as mask_utils

    labels = np.unique(ids[ids >= 0])  # object pixels are few: unique on them only
    rows = []
    for lab in labels:
        m = ids == lab
        cols = np.flatnonzero(m.any(axis=0))
        rws = np.flatnonzero(m.any(axis=1))
        rle = mask_utils.encode(np.asfortranarray(m.astype(np.uint8)))
        counts = rle["counts"].decode("ascii") if isinstance(rle["counts"], bytes) else str(rle["counts"])
        rows.append((int(lab), int(cols[0]), int(rws[0]), int(cols[-1]) + 1, int(rws[-1]) + 1, int(m.sum()), counts))
    return rows


def generate_sample(
    params: SampleParams, video_path: Path, progress: Callable[[int, int], None] | None = None
) -> SampleTruth:
    """Render ``params``' walk to ``video_path`` (H.264 MP4, equirectangular, CFR, no audio) and
    return its ground truth. The same parameters give byte-identical video and tables (on the
    same machine and ffmpeg build)."""
    t_start = time.perf_counter()
    cpu_start = time.process_time()
    video_path = Path(video_path)
    try:
        video_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UnitError(f"cannot create the folder for {video_path}: {e}") from e
    try:
        world = build_world(params.seed, params.route, params.n_per_category, params.faces)
    except RuntimeError as e:
        raise UnitError(f"sample {params.source_id}: cannot build the world: {e}") from e
    threads_before = numba.get_num_threads()
    set_threads(params.render_threads)
    try:
        return _generate(params, world, video_path, progress, t_start, cpu_start)
    finally:
        numba.set_num_threads(threads_before)


def _generate(
    params: SampleParams,
    world: World,
    video_path: Path,
    progress: Callable[[int, int], None] | None,
    t_start: float,
    cpu_start: float,
) -> SampleTruth:
    t_world = time.perf_counter() - t_start
    renderer = Renderer(world)
    ss = params.supersample
    pano = Camera.equirect(params.width * ss, params.height * ss)
    views = {
        name: Camera.view(params.truth_view_width, params.truth_view_height, params.truth_hfov_deg, yaw)
        for name, yaw in VIEWS.items()
    }
    nf = n_frames(params)
    samples: dict[int, list[tuple[int, float]]] = {}
    for k, t, fr in truth_samples(params):
        samples.setdefault(fr, []).append((k, t))

    sid = params.source_id
    poses: dict[str, list] = {n: [] for n in schema.TRUTH_POSES.names}
    vis_rows: list[dict] = []
    face_rows: list[dict] = []
    cat_of = {inst.instance_id: inst.category for inst in world.instances}
    vw, vh = params.truth_view_width, params.truth_view_height

    tmp = video_path.with_name(video_path.name + ".partial")
    try:
        proc = subprocess.Popen(_ffmpeg_cmd(params, tmp), stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as e:
        raise UnitError(f"cannot start ffmpeg to write {video_path}: {e}") from e
    assert proc.stdin is not None and proc.stderr is not None  # both PIPE
    render_s = 0.0
    truth_s = 0.0
    try:
        for fr in range(nf):
            x, y, z, yaw = frame_pose(world, params, fr)
            t0 = time.perf_counter()
            rgb, _ = renderer.render(pano, x, y, z, yaw)
            assert rgb is not None  # want_rgb
            if ss > 1:
                rgb = rgb.reshape(params.height, ss, params.width, ss, 3).mean(axis=(1, 3)).round().astype(np.uint8)
            render_s += time.perf_counter() - t0
            try:
                proc.stdin.write(rgb.tobytes())
            except BrokenPipeError:
                break
            place = world.place_at(x, y)
            for n, v in (
                ("source_id", sid),
                ("frame", fr),
                ("time", fr / params.fps),
                ("x", x),
                ("y", y),
                ("z", z),
                ("yaw_deg", yaw),
                ("pitch_deg", 0.0),
                ("roll_deg", 0.0),
                ("place", place),
            ):
                poses[n].append(v)
            if fr in samples:
                t1 = time.perf_counter()
                for view, cam in views.items():
                    _, ids = renderer.render(cam, x, y, z, yaw, want_rgb=False)
                    rows = _mask_rows(ids)
                    for k, t in samples[fr]:
                        common = {
                            "source_id": sid,
                            "view": view,
                            "sample_index": k,
                            "time": t,
                            "frame": fr,
                            "fps": float(params.fps),
                            "image_width": vw,
                            "image_height": vh,
                        }
                        for lab, x0, y0, x1, y1, npx, counts in rows:
                            box = {"x0": float(x0), "y0": float(y0), "x1": float(x1), "y1": float(y1), "pixels": npx}
                            if lab >= FACE_LABEL:
                                face_rows.append({**common, "face_id": lab - FACE_LABEL, **box})
                            else:
                                vis_rows.append(
                                    {**common, "instance_id": lab, "category": cat_of[lab], **box, "mask_rle": counts}
                                )
                truth_s += time.perf_counter() - t1
            if progress is not None:
                progress(fr + 1, nf)
        with contextlib.suppress(BrokenPipeError):  # ffmpeg died: its message follows
            proc.stdin.close()
        err = proc.stderr.read().decode(errors="replace")
        rc = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        tmp.unlink(missing_ok=True)
        raise
    if rc != 0:
        tmp.unlink(missing_ok=True)
        raise UnitError(f"ffmpeg failed (exit {rc}) writing {video_path}: {err.strip()[-2000:]}")
    os.replace(tmp, video_path)

    objects = [
        {
            "source_id": sid,
            "instance_id": i.instance_id,
            "category": i.category,
            "shape": i.shape,
            "x": i.centre[0],
            "y": i.centre[1],
            "z": i.centre[2],
            "size_x": i.size[0],
            "size_y": i.size[1],
            "size_z": i.size[2],
            "place": i.place,
        }
        for i in world.instances
    ]
    places = [
        {"source_id": sid, "place": p.name, "x_min": p.x_min, "y_min": p.y_min, "x_max": p.x_max, "y_max": p.y_max}
        for p in world.places
    ]
    total = time.perf_counter() - t_start
    stats = {
        "frames": float(nf),
        "world_s": t_world,
        "render_s": render_s,
        "truth_s": truth_s,
        "total_s": total,
        "cpu_s": time.process_time() - cpu_start,  # this process (render + truth), not ffmpeg
        "frames_rendered_per_s": nf / render_s if render_s > 0 else float("nan"),
        "video_bytes": float(video_path.stat().st_size),
    }
    return SampleTruth(
        poses=schema.table(schema.TRUTH_POSES, poses),
        objects=schema.table(schema.TRUTH_OBJECTS, objects),
        visibility=schema.table(schema.TRUTH_VISIBILITY, vis_rows),
        faces=schema.table(schema.TRUTH_FACES, face_rows),
        places=schema.table(schema.TRUTH_PLACES, places),
        stats=stats,
    )
