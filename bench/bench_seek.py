"""Clip sampling: the 2 FPS sampler over the last clip of a long view video, seeking vs decoding
from the start (what a clip stage did before `sample_frames` took a range).

A 10-minute 640x360 H.264 view at 30 fps (x264, keyframe every 250 frames, as our projection
writes), made once with ffmpeg under data/cache/bench_seek/. Both passes sample the same
30-second clip at its end and must yield the same frames. Prints:

    clip_sampling_seek_vs_full_decode: <seconds decoding from the start / seconds with the seek>
    clip_sampling_frames_equal: 1

The ratio grows with the clip's offset into the video: a 2-hour view's last 5-minute clip decodes
~24x fewer frames.

Usage: python bench/bench_seek.py [--minutes 10] [--clip-seconds 30]
"""

from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clip-seconds", type=float, default=30.0)
    args = ap.parse_args()
    from vsi_wild.stages.video_io import sample_frames

    seconds = args.minutes * 60
    cache = REPO / "data" / "cache" / "bench_seek"
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"view_{seconds:g}s.mp4"
    if not path.exists():
        tmp = path.with_suffix(".part.mp4")
        subprocess.run(
            [
                "ffmpeg",
                "-v",
                "error",
                "-y",
                "-f",
                "lavfi",
                "-i",
                f"testsrc2=size=640x360:rate=30:duration={seconds:g}",
                "-c:v",
                "libx264",
                "-preset",
                "ultrafast",
                "-g",
                "250",
                "-pix_fmt",
                "yuv420p",
                str(tmp),
            ],
            check=True,
        )
        tmp.rename(path)
    start, end = seconds - args.clip_seconds, seconds

    t0 = time.perf_counter()
    full = [f for f in sample_frames(path, 2.0) if start - 1e-9 <= f[1] < end - 1e-9]
    t_full = time.perf_counter() - t0
    t0 = time.perf_counter()
    seek = list(sample_frames(path, 2.0, start=start, end=end))
    t_seek = time.perf_counter() - t0
    equal = [f[:4] for f in full] == [f[:4] for f in seek] and all(
        np.array_equal(a[4], b[4]) for a, b in zip(full, seek, strict=True)
    )
    print(f"clip_sampling_full_decode_s: {t_full:.2f}")
    print(f"clip_sampling_seek_s: {t_seek:.2f}")
    print(f"clip_sampling_seek_vs_full_decode: {t_full / t_seek:.1f}")
    print(f"clip_sampling_frames_equal: {int(equal)}")
    if not equal:
        raise SystemExit("the seeking sampler yielded other frames than the whole-video pass")


if __name__ == "__main__":
    main()
