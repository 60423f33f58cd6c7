"""The 2 FPS sampler over a time range seeks, and gives exactly what the whole-video pass gives.

The reference is the same sampler without a range, filtered to the range: the same k, t_k, frame
index, frame time and pixels, on constant-rate videos with B-frames (closed and open GOPs, short and
one-keyframe GOPs) and on a variable-rate one.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_video
from project_media import write_video

from vsi_wild.stages import video_io
from vsi_wild.stages.video_io import sample_frames

RANGES = [(0.0, 3.0), (2.5, 7.0), (5.25, None), (None, 4.0), (10.9, 20.0), (11.5, 11.6), (40.0, 50.0)]


def _full(path, start, end):
    lo = -np.inf if start is None else start - 1e-9
    hi = np.inf if end is None else end - 1e-9
    return [f for f in sample_frames(path, 2.0) if lo <= f[1] < hi]


def _check(path):
    for start, end in RANGES:
        want = _full(path, start, end)
        got = list(sample_frames(path, 2.0, start=start, end=end))
        assert [g[:4] for g in got] == [w[:4] for w in want], (path.name, start, end)
        for g, w in zip(got, want):
            assert np.array_equal(g[4], w[4]), (path.name, start, end, g[0])


@pytest.mark.parametrize("name, extra", [
    ("gop25", ["-g", "25", "-bf", "3"]),
    ("open_gop", ["-x264-params", "keyint=20:open-gop=1", "-bf", "3"]),
    ("one_keyframe", ["-g", "1000"]),
])
def test_range_equals_the_whole_pass_at_constant_rate(tmp_path, name, extra):
    _check(make_video(tmp_path / f"{name}.mp4", 96, 48, 25, 12, extra=extra))


def test_range_equals_the_whole_pass_at_variable_rate(tmp_path):
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.uniform(0.02, 0.3, 80))
    times -= times[0]

    def frame(i):
        img = np.zeros((48, 96, 3), np.uint8)
        img[:, (i * 7) % 96] = 255
        img[(i * 3) % 48, :, 1] = 200
        return img

    _check(write_video(tmp_path / "vfr.mp4", frame, list(times)))


def test_a_late_range_decodes_only_its_neighbourhood(tmp_path, monkeypatch):
    path = make_video(tmp_path / "long.mp4", 96, 48, 25, 12, extra=["-g", "25"])
    decoded = []
    real = video_io._decode

    def counting(reader, failed):
        for f in real(reader, failed):
            decoded.append(f.pts)
            yield f

    monkeypatch.setattr(video_io, "_decode", counting)
    got = list(sample_frames(path, 2.0, start=10.0, end=11.0))
    assert [g[0] for g in got] == [20, 21]
    assert 0 < len(decoded) <= 2 * 25 + 5  # one GOP before 10 s and what follows up to 11 s; 300 in all
