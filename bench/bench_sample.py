"""Benchmark of the sample generator: render cost per frame, its share of the whole generation,
speed relative to real time, and peak memory against the video's length (must not grow).

Prints `name: value` lines. CPU times (this process and ffmpeg) are reported beside wall times,
because these machines are shared and wall times say little.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, os, resource, sys, time
from pathlib import Path
from vsi_wild.stages.sample import SampleParams, generate_sample
# warm (numba's cached compile, imports), then measure
generate_sample(SampleParams(duration_s=0.5, width=64, truth_view_width=32, truth_view_height=18), Path(sys.argv[2]))
p = SampleParams.model_validate_json(sys.argv[1])
t0, w0 = os.times(), time.perf_counter()
tr = generate_sample(p, Path(sys.argv[2]))
t1 = os.times()
print(json.dumps({**tr.stats, "wall_s": time.perf_counter() - w0,
                  "cpu_self_s": t1.user - t0.user + t1.system - t0.system,
                  "cpu_ffmpeg_s": t1.children_user - t0.children_user + t1.children_system - t0.children_system,
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(params: dict, out: Path) -> dict:
    from vsi_wild.stages.sample import SampleParams

    p = SampleParams(**params)
    r = subprocess.run([sys.executable, "-c", CHILD, p.model_dump_json(), str(out)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "s.mp4"
        # the default resolution over 20 s of the default route
        a = run({"duration_s": 20.0}, out)
        frames = a["frames"]
        print(
            "sample_render_cpu_ms_per_frame_1280: "
            f"{1000 * a['cpu_self_s'] / frames:.0f}  (render + truth, this process)"
        )
        print(f"sample_encode_cpu_ms_per_frame_1280: {1000 * a['cpu_ffmpeg_s'] / frames:.0f}  (ffmpeg libx264)")
        print(f"sample_frames_rendered_per_s: {a['frames_rendered_per_s']:.1f}  (wall, loaded machine)")
        print(f"sample_speed_vs_realtime: {20.0 / a['wall_s']:.2f}  (video seconds per wall second)")
        print(f"sample_truth_share_of_wall: {a['truth_s'] / a['wall_s']:.2f}")
        print(f"sample_mb_per_video_minute_1280: {a['video_bytes'] / 1e6 * 60 / 20.0:.1f}")
        cpu_2min = (a["cpu_self_s"] + a["cpu_ffmpeg_s"]) * 120.0 / 20.0
        print(f"sample_default_2min_estimate_s_on_2_free_cores: {cpu_2min / 2:.0f}")
        # peak memory must not grow with the length: 30 s vs 240 s (the short route looped)
        small = {"width": 256, "fps": 4.0, "route": "short", "truth_view_width": 160, "truth_view_height": 90}
        m1 = run({**small, "duration_s": 30.0}, out)["maxrss_mb"]
        m2 = run({**small, "duration_s": 240.0}, out)["maxrss_mb"]
        print(f"sample_peak_rss_mb_30s: {m1:.0f}")
        print(f"sample_peak_rss_ratio_240s_vs_30s: {m2 / m1:.2f}  (~1: memory does not grow with length)")
    return 0


if __name__ == "__main__":
    t = time.time()
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - a benchmark reports, it does not crash the suite
        print(f"sample_bench: error {e!r}")
        sys.exit(1)
    finally:
        print(f"sample_bench_seconds: {time.time() - t:.0f}", file=sys.stderr)
