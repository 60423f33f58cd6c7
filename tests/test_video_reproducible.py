"""The view encoder is byte-reproducible: the same frames give the same file whatever the heap held.

x264's macroblock-tree rate control read memory it had not written, so a process whose heap held
other bytes (torch loaded, another stage run before) wrote other bytes, and `make run` twice gave
two builds. Each encode here runs in a fresh interpreter with glibc filling the heap with a
different byte (MALLOC_PERTURB_, and no allocation from fresh zeroed pages): with mbtree on, the
two files differ.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import textwrap
from fractions import Fraction

import numpy as np
import pytest

ENCODE = textwrap.dedent("""
    import sys
    from fractions import Fraction
    import numpy as np

    from vsi_wild.stages.video_io import EncoderSettings, VideoWriter

    w, h, n = 320, 180, 48
    writer = VideoWriter(sys.argv[1], w, h, Fraction(1, 30), 30, EncoderSettings(threads=1))
    uv = np.full((h // 2) * (w // 2), 128, np.uint8)
    for i in range(n):  # a bright block moving over a flat ground (a textured pan did not show it)
        y = np.full((h, w), 90, np.uint8)
        y[40:100, 10 + 4 * i : 60 + 4 * i] = 200
        writer.write(np.concatenate([y.ravel(), uv, uv]), i)
    writer.close()
""")


def _encode(path, perturb: int) -> str:
    # every allocation from the heap (none from fresh, zeroed pages), filled with the perturb byte
    env = {"MALLOC_PERTURB_": str(perturb), "MALLOC_MMAP_THRESHOLD_": str(32 << 20), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", ENCODE, str(path)], check=True, env=env, timeout=120)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MALLOC_PERTURB_ is glibc's")
def test_the_same_frames_encode_to_the_same_bytes_whatever_the_heap_held(tmp_path) -> None:
    digests = {p: _encode(tmp_path / f"perturb{p}.mp4", p) for p in (85, 170)}
    assert digests[85] == digests[170], digests


def _x264_options(path) -> str:
    """The settings x264 writes into its stream (an SEI message): every option it encoded with."""
    found = re.search(rb"x264 - core \d+.*? - options: ([ -~]+)", path.read_bytes())
    assert found, f"{path}: no x264 settings message"
    return found.group(1).decode()


def test_ffmpeg_args_encode_as_the_view_writer_does(tmp_path) -> None:
    """bench_projection's floor encodes with ``EncoderSettings.ffmpeg_args`` on ffmpeg's command line:
    x264 must then report the same options as for ``VideoWriter`` (macroblock-tree off, sliced
    threads, the pinned count), or the floor measures another encoder's work."""
    from vsi_wild.stages.video_io import EncoderSettings, VideoWriter

    w, h, n = 320, 180, 12
    settings = EncoderSettings(threads=2)
    frames = []
    for i in range(n):
        y = np.full((h, w), 90, np.uint8)
        y[40:100, 10 + 4 * i : 60 + 4 * i] = 200
        frames.append(np.concatenate([y.ravel(), np.full(w * h // 2, 128, np.uint8)]))
    writer = VideoWriter(tmp_path / "pyav.mp4", w, h, Fraction(1, 30), 30, settings)
    for i, frame in enumerate(frames):
        writer.write(frame, i)
    writer.close()
    raw = b"".join(f.tobytes() for f in frames)
    cmd = ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "yuv420p", "-s", f"{w}x{h}", "-r", "30"]
    subprocess.run([*cmd, "-i", "-", *settings.ffmpeg_args(), str(tmp_path / "cli.mp4")], input=raw, check=True)
    written = _x264_options(tmp_path / "pyav.mp4")
    assert "mbtree=0" in written and "sliced_threads=1" in written and "threads=2" in written, written
    assert _x264_options(tmp_path / "cli.mp4") == written
