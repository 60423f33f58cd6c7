"""Benchmark of the `project` stage (panorama -> 4 perspective views, faces blurred).

Prints, measured in this one run on the same inputs (lines `name: value`):

- projection_vs_py360convert: CPU time of ``py360convert.e2p`` called per view (4 views, RGB,
  OpenCV importable) over CPU time of our projection as the stage runs it (the decoder's YUV
  4:2:0 planes, 4 views), on the same decoded frames of a 3840x1920 source. > 1: ours is faster.
- projection_vs_ffmpeg_v360: CPU time of ffmpeg's ``v360`` (linear, yuv420p, the same 4 views from
  the same raw decoded frames, filter set-up and I/O subtracted) over ours. > 1: ours is faster.
- stage_vs_decode_encode_floor: CPU time of ``project_source`` (decode + project + detect/blur +
  encode 4 x 1920x1080, default parameters) over ffmpeg decoding the same source and encoding the
  same 4 streams (the views' pixels, the stage's own encoder settings: preset, CRF, x264 options,
  threads and thread type, faststart) with no projection. < 1.3 is the target. Context: the floor
  with x264's defaults (macroblock-tree on, frame threads: cheaper here, not byte-reproducible, so
  not the stage's), and 4 crops of the panorama instead of the views (encoding cost depends on the
  pixels).
- peak_memory_10min_vs_1min: peak RSS (the child's own VmHWM) of a process running the stage on
  a 10-minute source over one running it on a 1-minute source (same resolution, content and
  parameters). ~1: streaming.

CPU time (user + system, all threads) is the headline because these machines are shared: wall
times are printed as context. Even CPU time drifts by +-30% here as neighbours come and go, so each
ratio is measured in ``BENCH_PROJECT_ROUNDS`` (3) rounds, its two sides back to back in each, and
the headline is the median of the rounds' ratios (each round's is printed as context). Per-process set-up (imports,
loading the detector and the projection kernel) is not counted in the stage's time; per-source work (building the
maps included) is.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

SRC_W, SRC_H, FPS = 3840, 1920, 30
CLIP_S = float(os.environ.get("BENCH_PROJECT_CLIP_S", "6"))
PROJ_FRAMES = int(os.environ.get("BENCH_PROJECT_FRAMES", "24"))
ROUNDS = int(os.environ.get("BENCH_PROJECT_ROUNDS", "3"))
MEM_W, MEM_H, MEM_FPS = 512, 256, 6
MEM_VIEW = (256, 144)


def log(msg: str) -> None:
    print(f"# {msg}", flush=True)


def run_child(cmd: list[str]) -> tuple[float, float, int, str]:
    """Run a process; return (its CPU seconds user + sys, wall seconds, peak RSS in KiB, stdout),
    measured for that process alone (os.wait4)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.time() - t0
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {err.read()[-2000:]}")
        return ru.ru_utime + ru.ru_stime, wall, ru.ru_maxrss, out.read()


def ffmpeg(*args: str) -> tuple[float, float]:
    cpu, wall, _, _ = run_child(["ffmpeg", "-v", "error", "-y", *args])
    return cpu, wall


def texture(path: Path) -> None:
    """A 3840x1920 mosaic of natural photographs (scikit-image's samples; two have faces)."""
    from skimage import data

    names = [
        "astronaut",
        "coffee",
        "chelsea",
        "rocket",
        "hubble_deep_field",
        "immunohistochemistry",
        "retina",
        "colorwheel",
        "coins",
        "camera",
        "page",
        "text",
        "brick",
        "grass",
        "gravel",
        "cell",
    ]
    imgs = []
    for n in names:
        fn = getattr(data, n, None)
        if fn is None:
            continue
        try:
            im = fn()
        except Exception:  # noqa: BLE001 - a sample image that needs a download: skip it
            continue
        im = np.stack([im] * 3, -1) if im.ndim == 2 else im[..., :3]
        imgs.append(np.ascontiguousarray(im[..., ::-1]))
    rng = np.random.default_rng(0)
    canvas = np.zeros((SRC_H, SRC_W, 3), np.uint8)
    tile_h, i = SRC_H // 4, 0
    for y in range(0, SRC_H, tile_h):
        x = 0
        while x < SRC_W:
            im = imgs[i % len(imgs)]
            i += 1
            tw = int(im.shape[1] * tile_h / im.shape[0] * rng.uniform(0.8, 1.2))
            tile = cv2.resize(im, (tw, tile_h), interpolation=cv2.INTER_AREA)
            w = min(tw, SRC_W - x)
            canvas[y : y + tile_h, x : x + w] = tile[:, :w]
            x += w
    cv2.imwrite(str(path), canvas)


def make_sources(work: Path) -> tuple[Path, Path, Path, Path]:
    tex = work / "texture.png"
    texture(tex)
    src = work / "source_3840.mp4"
    # the camera turns slowly (the panorama scrolls) and the sensor is a little noisy
    ffmpeg(
        "-loop",
        "1",
        "-i",
        str(tex),
        "-vf",
        "scroll=horizontal=0.0007,noise=alls=3:allf=t,format=yuv420p",
        "-t",
        str(CLIP_S),
        "-r",
        str(FPS),
        "-c:v",
        "libx264",
        "-preset",
        "veryfast",
        "-crf",
        "18",
        str(src),
    )
    raw = work / "frames.yuv"
    ffmpeg("-i", str(src), "-frames:v", str(PROJ_FRAMES), "-f", "rawvideo", "-pix_fmt", "yuv420p", str(raw))
    mem1, mem10 = work / "mem_1min.mp4", work / "mem_10min.mp4"
    for p, seconds in ((mem1, 60), (mem10, 600)):
        ffmpeg(
            "-f",
            "lavfi",
            "-i",
            f"testsrc2=size={MEM_W}x{MEM_H}:rate={MEM_FPS}:duration={seconds}",
            "-c:v",
            "libx264",
            "-preset",
            "veryfast",
            "-pix_fmt",
            "yuv420p",
            str(p),
        )
    return src, raw, mem1, mem10


def read_raw(raw: Path, n: int | None = None):
    size = SRC_W * SRC_H * 3 // 2
    data = np.fromfile(raw, np.uint8)
    k = len(data) // size if n is None else n
    for i in range(k):
        f = data[i * size : (i + 1) * size]
        y = f[: SRC_W * SRC_H].reshape(SRC_H, SRC_W)
        u = f[SRC_W * SRC_H : SRC_W * SRC_H * 5 // 4].reshape(SRC_H // 2, SRC_W // 2)
        v = f[SRC_W * SRC_H * 5 // 4 :].reshape(SRC_H // 2, SRC_W // 2)
        yield f, y, u, v


def bench_projection(raw: Path) -> dict[str, float]:
    import py360convert

    from vsi_wild import ids
    from vsi_wild.stages.geometry import vfov_deg
    from vsi_wild.stages.project import Projector, ProjectParams, render_view

    p = ProjectParams()
    frames = list(read_raw(raw))
    n = len(frames)
    rgbs = [cv2.cvtColor(f.reshape(SRC_H * 3 // 2, SRC_W), cv2.COLOR_YUV2RGB_I420) for f, *_ in frames]
    proj = Projector(SRC_W, SRC_H, p)  # maps built and the kernel compiled before timing
    proj.project(*frames[0][1:])
    vf = vfov_deg(p.hfov_deg, p.width, p.height)
    yaws = [ids.VIEWS[v] for v in p.views]
    for yaw in yaws:  # py360convert caches its sampler per geometry: warm it too
        py360convert.e2p(rgbs[0], (p.hfov_deg, vf), yaw, 0.0, (p.height, p.width))
        render_view(rgbs[0], yaw, 0.0, p.hfov_deg, p.width, p.height)
    res = {}
    for name, fn in (
        ("ours", lambda i: proj.project(*frames[i][1:])),
        (
            "py360convert",
            lambda i: [py360convert.e2p(rgbs[i], (p.hfov_deg, vf), y, 0.0, (p.height, p.width)) for y in yaws],
        ),
        ("ours_rgb", lambda i: [render_view(rgbs[i], y, 0.0, p.hfov_deg, p.width, p.height) for y in yaws]),
    ):
        c0, t0 = time.process_time(), time.time()
        for i in range(n):
            fn(i)
        res[name] = (time.process_time() - c0) / n
        res[name + "_wall"] = (time.time() - t0) / n
    proj.close()
    return res


def bench_v360(raw: Path, work: Path) -> float:
    """CPU seconds per frame of v360 making the 4 views, set-up and raw I/O subtracted."""
    from vsi_wild import ids
    from vsi_wild.stages.geometry import vfov_deg
    from vsi_wild.stages.project import ProjectParams

    p = ProjectParams()
    vf = vfov_deg(p.hfov_deg, p.width, p.height)
    size = SRC_W * SRC_H * 3 // 2
    n = raw.stat().st_size // size
    short = work / "frames_short.yuv"
    with open(raw, "rb") as f:
        short.write_bytes(f.read(size * max(1, n // 4)))
    n_short = max(1, n // 4)

    def graph(with_v360: bool) -> list[str]:
        parts = [f"[0:v]split={len(p.views)}" + "".join(f"[s{k}]" for k in range(len(p.views)))]
        outs = []
        for k, view in enumerate(p.views):
            yaw = ids.VIEWS[view]
            yaw = yaw - 360 if yaw > 180 else yaw
            filt = (
                (
                    f"v360=input=e:output=flat:yaw={yaw}:h_fov={p.hfov_deg}:v_fov={vf:.4f}:w={p.width}:h={p.height}"
                    ":interp=linear"
                )
                if with_v360
                else "null"
            )
            parts.append(f"[s{k}]{filt}[o{k}]")
            outs += ["-map", f"[o{k}]", "-f", "null", "-"]
        return ["-filter_complex", ";".join(parts), *outs]

    def cpu(path: Path, with_v360: bool) -> float:
        c, _ = ffmpeg(
            "-f",
            "rawvideo",
            "-pix_fmt",
            "yuv420p",
            "-s",
            f"{SRC_W}x{SRC_H}",
            "-r",
            str(FPS),
            "-i",
            str(path),
            *graph(with_v360),
        )
        return c

    v = (cpu(raw, True) - cpu(short, True)) - (cpu(raw, False) - cpu(short, False))
    return v / (n - n_short)


STAGE_CHILD = r"""
import json, resource, sys, time
import numpy as np
from vsi_wild import schema
from vsi_wild.stages.faces import FaceParams, make_detector
from vsi_wild.stages.project import Projector, ProjectParams, project_source
src, out, width, height = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
params = ProjectParams() if width == 0 else ProjectParams(width=width, height=height)
faces = FaceParams()
det = make_detector(faces)  # per-process set-up
# per-process set-up the stage would otherwise do inside the clock: loading the projection kernel
# (numba's cache) on a tiny geometry (the source's maps are still built in the clock) and pyarrow's
# lazy imports (its first table imports pandas)
warm = Projector(64, 32, ProjectParams(width=32, height=18))
warm.project(np.zeros((32, 64), np.uint8), np.zeros((16, 32), np.uint8), np.zeros((16, 32), np.uint8))
warm.close()
schema.table(schema.VIEWS_TABLE, [])
stats = {}
r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.time()
views, blurred = project_source(src, out, params, det, face_params=faces, source_id="local-bench", stats=stats)
r1 = resource.getrusage(resource.RUSAGE_SELF)
# VmHWM: this process's own peak RSS (ru_maxrss of a child also counts its parent's pages at fork)
hwm = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
print(json.dumps({"cpu": cpu, "wall": time.time() - t0, "hwm_kib": hwm,
                  "view_frames": views["n_frames"].to_pylist(), "face_rows": blurred.num_rows, **stats}))
"""


def bench_stage(src: Path, work: Path, width: int = 0, height: int = 0) -> dict:
    cpu, wall, rss, out = run_child(
        [sys.executable, "-c", STAGE_CHILD, str(src), str(work / f"views_{width}"), str(width), str(height)]
    )
    res = json.loads(out.strip().splitlines()[-1])
    res.update(process_cpu=cpu, process_wall=wall, rss_kib=rss)
    return res


def bench_floor(src: Path, work: Path, views: list[Path], encoder_args: list[str] | None = None) -> tuple[float, float]:
    """ffmpeg decoding the source, plus ffmpeg encoding the same 4 streams (the pixels of the
    views the stage wrote, fed raw through a pipe by a separate decoder process that is not
    counted) with the stage's encoder settings (``EncoderSettings.ffmpeg_args``: preset, CRF,
    x264 options, threads and thread type, as ``VideoWriter`` encodes): the decode + encode work no
    implementation of the stage can avoid. ``encoder_args`` replaces them (context figures).
    Returns (CPU seconds, wall seconds) of the counted processes."""
    from vsi_wild.stages.project import ProjectParams

    p = ProjectParams()
    if encoder_args is None:
        encoder_args = p.encoder().ffmpeg_args()
    cpu, wall = ffmpeg("-i", str(src), "-map", "0:v", "-f", "null", "-")
    for k, view in enumerate(views):
        feeder = subprocess.Popen(
            ["ffmpeg", "-v", "error", "-i", str(view), "-f", "rawvideo", "-pix_fmt", "yuv420p", "-"],
            stdout=subprocess.PIPE,
        )
        enc = [
            "ffmpeg",
            "-v",
            "error",
            "-y",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "yuv420p",
            "-s",
            f"{p.width}x{p.height}",
            "-r",
            str(FPS),
            "-i",
            "-",
            *encoder_args,
            "-an",
            *(["-movflags", "+faststart"] if p.faststart else []),
            str(work / f"floor_{k}.mp4"),
        ]
        t0 = time.time()
        proc = subprocess.Popen(enc, stdin=feeder.stdout, stderr=subprocess.PIPE)
        feeder.stdout.close()
        _, status, ru = os.wait4(proc.pid, 0)
        feeder.wait()
        if os.waitstatus_to_exitcode(status) != 0 or feeder.returncode != 0:
            raise RuntimeError(f"floor encode of {view} failed")
        cpu += ru.ru_utime + ru.ru_stime
        wall += time.time() - t0
    return cpu, wall


def bench_crop_floor(src: Path, work: Path) -> tuple[float, float]:
    """Context: one ffmpeg decoding the source and encoding 4 view-sized crops of it (other
    pixels than the views: cheaper or dearer to encode depending on the content)."""
    from vsi_wild import ids
    from vsi_wild.stages.project import ProjectParams

    p = ProjectParams()
    parts = [f"[0:v]split={len(p.views)}" + "".join(f"[s{k}]" for k in range(len(p.views)))]
    outs = []
    for k, view in enumerate(p.views):
        cx = int(((0.5 + ids.VIEWS[view] / 360.0) % 1.0) * SRC_W)
        x = min(max(0, cx - p.width // 2), SRC_W - p.width)
        parts.append(f"[s{k}]crop={p.width}:{p.height}:{x}:{(SRC_H - p.height) // 2}[o{k}]")
        outs += [
            "-map",
            f"[o{k}]",
            "-c:v",
            p.codec,
            "-preset",
            p.preset,
            "-crf",
            str(p.crf),
            "-an",
            *(["-movflags", "+faststart"] if p.faststart else []),
            str(work / f"crop_{k}.mp4"),
        ]
    return ffmpeg("-i", str(src), "-filter_complex", ";".join(parts), *outs)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-project-") as tmp:
        work = Path(tmp)
        t0 = time.time()
        src, raw, mem1, mem10 = make_sources(work)
        log(
            f"inputs made in {time.time() - t0:.0f} s: {SRC_W}x{SRC_H} {FPS} fps {CLIP_S:.0f} s clip; "
            f"{PROJ_FRAMES} raw frames; {MEM_W}x{MEM_H} {MEM_FPS} fps 1 and 10 min sources"
        )

        rounds = []
        for r in range(ROUNDS):
            proj = bench_projection(raw)
            v360 = bench_v360(raw, work)
            rounds.append((proj["py360convert"] / proj["ours"], v360 / proj["ours"]))
            log(
                f"round {r + 1}: projection, CPU-ms per source frame (4 views 1920x1080): ours (YUV planes) "
                f"{proj['ours'] * 1e3:.1f}, ours (RGB, render_view) {proj['ours_rgb'] * 1e3:.1f}, py360convert.e2p "
                f"{proj['py360convert'] * 1e3:.1f}, ffmpeg v360 {v360 * 1e3:.1f}; wall-ms per frame: ours "
                f"{proj['ours_wall'] * 1e3:.1f}, py360convert {proj['py360convert_wall'] * 1e3:.1f}"
            )

        stage_ratios = []
        for r in range(ROUNDS):
            stage = bench_stage(src, work)
            view_files = sorted((work / "views_0").glob("*.mp4"))
            floor_cpu, floor_wall = bench_floor(src, work, view_files)
            stage_ratios.append(stage["cpu"] / floor_cpu)
            n = stage["view_frames"][0]
            log(
                f"round {r + 1}: stage {n} frames x 4 views, project_source CPU {stage['cpu']:.1f} s "
                f"({stage['cpu'] / n * 1e3:.0f} ms/frame), wall "
                f"{stage['wall']:.1f} s; floor (ffmpeg: decode the source "
                "+ encode the same 4 streams, no projection) CPU "
                f"{floor_cpu:.1f} s ({floor_cpu / n * 1e3:.0f} ms/frame); "
                f"ratio {stage_ratios[-1]:.3f}"
            )
            log(
                f"round {r + 1}: stage breakdown: projection {stage['project_cpu_s'] / n * 1e3:.0f} CPU-ms/frame; face "
                f"detection {stage['detect_cpu_s'] / n * 1e3:.0f} "
                f"CPU-ms/frame ({stage['detector_calls']} detector runs on "
                f"whole views at {stage['detect_width']} px wide, every {stage['detect_every']} frames, and "
                f"{stage['crop_calls']} on crops around fast faces); without face detection (e.g. SCRFD on a GPU) the "
                f"stage would be {(stage['cpu'] - stage['detect_cpu_s']) / floor_cpu:.3f} x the floor"
            )
        from vsi_wild.stages.project import ProjectParams

        p = ProjectParams()
        default_cpu, _ = bench_floor(
            src, work, view_files, ["-c:v", p.codec, "-preset", p.preset, "-crf", str(p.crf), "-threads", "2"]
        )
        log(
            "context: the floor with x264's defaults instead of the stage's settings (macroblock-tree on, frame "
            f"threads; the stage cannot use them: non-reproducible bytes): CPU {default_cpu:.1f} s, last stage / it "
            f"{stage['cpu'] / default_cpu:.3f}"
        )
        crop_cpu, _ = bench_crop_floor(src, work)
        log(
            "context: one ffmpeg decoding and encoding 4 crops of "
            f"the panorama instead of the views: CPU {crop_cpu:.1f} s "
            f"({crop_cpu / n * 1e3:.0f} ms/frame, last stage / it "
            f"{stage['cpu'] / crop_cpu:.3f}); face rows {stage['face_rows']}"
        )

        m1 = bench_stage(mem1, work, *MEM_VIEW)
        m10 = bench_stage(mem10, work, *MEM_VIEW)
        log(
            f"peak RSS (VmHWM): 1 min ({m1['view_frames'][0]} frames) {m1['hwm_kib'] / 1024:.0f} MiB, "
            f"10 min ({m10['view_frames'][0]} frames) {m10['hwm_kib'] / 1024:.0f} MiB; stage at 3840: "
            f"{stage['hwm_kib'] / 1024:.0f} MiB"
        )

        print(f"projection_vs_py360convert: {statistics.median(r[0] for r in rounds):.3f}")
        print(f"projection_vs_ffmpeg_v360: {statistics.median(r[1] for r in rounds):.3f}")
        print(f"stage_vs_decode_encode_floor: {statistics.median(stage_ratios):.3f}")
        print(f"peak_memory_10min_vs_1min: {m10['hwm_kib'] / m1['hwm_kib']:.3f}")
        log(f"total {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
