"""The 2 FPS sampler over a time range seeks, and gives exactly what the whole-video pass gives;
so does ``frames_at`` (VPO's anchors) for any set of wanted frames.

The reference is the same sampler without a range, filtered to the range (for ``frames_at``: the
whole pass's frames at those indices): the same k, t_k, frame index, frame time and pixels, on
constant-rate videos with B-frames (closed and open GOPs, short and one-keyframe GOPs) and on a
variable-rate one.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from conftest import make_video
from project_media import write_video

from vsi_wild.errors import UnitError
from vsi_wild.stages import video_io
from vsi_wild.stages.video_io import VideoReader, frame_batches, frames_at, sample_frames, sampled_frames

RANGES = [(0.0, 3.0), (2.5, 7.0), (5.25, None), (None, 4.0), (10.9, 20.0), (11.5, 11.6), (40.0, 50.0)]


def _full(path, start, end):
    lo = -np.inf if start is None else start - 1e-9
    hi = np.inf if end is None else end - 1e-9
    return [f for f in sample_frames(path, 2.0) if lo <= f[1] < hi]


# wanted frame sets: single frames (first, last, keyframes and their neighbours), clusters, spread
WANTED = [[0], [299], [24, 25, 26], [1, 2, 3, 100, 101, 250], [60, 10, 10, 299, 150], list(range(0, 300, 37)), [49, 50]]


def _check_frames_at(path):
    with VideoReader(path) as r:
        whole = [(f.index, f.time, f.frame.to_ndarray(format="rgb24")) for f in r.frames()]
    n = len(whole)
    for wanted in WANTED + [[n - 1], [n // 2, n // 3]]:
        wanted = [w for w in wanted if w < n]
        got = list(frames_at(path, wanted))
        want = [whole[i] for i in sorted(set(wanted))]
        assert [g[:2] for g in got] == [w[:2] for w in want], (path.name, wanted)
        for g, w in zip(got, want, strict=True):
            assert np.array_equal(g[2], w[2]), (path.name, wanted, g[0])


def _check(path):
    _check_frames_at(path)
    for start, end in RANGES:
        want = _full(path, start, end)
        got = list(sample_frames(path, 2.0, start=start, end=end))
        assert [g[:4] for g in got] == [w[:4] for w in want], (path.name, start, end)
        for g, w in zip(got, want, strict=True):
            assert np.array_equal(g[4], w[4]), (path.name, start, end, g[0])


@pytest.mark.parametrize(
    "name, extra",
    [
        ("gop25", ["-g", "25", "-bf", "3"]),
        ("open_gop", ["-x264-params", "keyint=20:open-gop=1", "-bf", "3"]),
        ("one_keyframe", ["-g", "1000"]),
    ],
)
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


def test_frame_batches_are_the_sampled_frames_in_consecutive_batches(tmp_path):
    path = make_video(tmp_path / "batches.mp4", 96, 48, 25, 12, extra=["-g", "25"])
    # the frames the model stages read: the sampler's, downscaled to max_width
    want = [
        (k, t, i, cv2.resize(rgb, (64, 32), interpolation=cv2.INTER_AREA))
        for k, t, i, _ft, rgb in sample_frames(path, 2.0)
    ]
    got = list(sampled_frames(path, 2.0, max_width=64))
    assert [g[:3] for g in got] == [w[:3] for w in want]
    assert all(np.array_equal(g[3], w[3]) for g, w in zip(got, want, strict=True))

    batches = list(frame_batches(path, "v_front", 25.0, 5, max_width=64))
    assert [len(b.images) for b in batches] == [5, 5, 5, 5, 4]  # 12 s at 2 FPS: 24 frames
    assert all(b.video_id == "v_front" and b.fps == 25.0 for b in batches)
    flat = [(k, t, i) for b in batches for k, t, i in zip(b.sample_indices, b.times, b.frame_indices, strict=True)]
    assert flat == [w[:3] for w in want]
    assert all(np.array_equal(a, w[3]) for a, w in zip((a for b in batches for a in b.images), want, strict=True))

    # one batch of a whole range, its images made as the frames stream (the segment stage's JPEG files)
    streamed = []

    def keep(rgbs):
        return [streamed.append(r.shape) or r for r in rgbs]

    (clip,) = frame_batches(path, "v_front", 25.0, None, start=2.5, end=7.0, images=keep)
    assert list(clip.sample_indices) == [k for k, *_ in sampled_frames(path, 2.0, 2.5, 7.0)] == list(range(5, 14))
    assert len(streamed) == len(clip.images) == 9
    (empty,) = frame_batches(path, "v_front", 25.0, None, start=40.0, end=50.0)
    assert list(empty.images) == [] and list(empty.times) == [] and list(empty.sample_indices) == []
    assert list(frame_batches(path, "v_front", 25.0, 5, start=40.0, end=50.0)) == []


def test_frames_at_decodes_around_the_anchors_only(tmp_path, monkeypatch):
    path = make_video(tmp_path / "anchors.mp4", 96, 48, 25, 12, extra=["-g", "25", "-bf", "2"])
    decoded = []
    real = video_io._decode

    def counting(reader, failed):
        for f in real(reader, failed):
            decoded.append(f.pts)
            yield f

    monkeypatch.setattr(video_io, "_decode", counting)
    got = [i for i, _t, _rgb in frames_at(path, [290, 60, 61, 62, 130])]
    assert got == [60, 61, 62, 130, 290]
    # three GOPs (from the keyframes at 50, 125 and 275) decoded up to each anchor, not 300 frames
    assert 0 < len(decoded) <= 3 * 25 + 3 * 5
    with pytest.raises(UnitError, match="not found"):
        list(frames_at(path, [5, 300]))


def test_prefetched_gives_the_same_items_ahead_and_stops_when_closed():
    import threading
    import time

    from vsi_wild.stages.video_io import prefetched

    made = []

    def items(n):
        for i in range(n):
            made.append((i, threading.current_thread().name))
            yield i

    assert list(prefetched(items(20), depth=3, name="feed-test")) == list(range(20))
    assert {name for _, name in made} == {"feed-test"}  # produced by its own thread
    made.clear()
    it = prefetched(items(1000), depth=3)
    assert next(it) == 0
    time.sleep(0.2)
    assert len(made) <= 1 + 3 + 1  # ahead by at most the queue's depth (and the item in hand)
    it.close()  # the producer stops: nothing more is made
    n = len(made)
    time.sleep(0.2)
    assert len(made) == n < 1000

    def failing():
        yield 1
        raise UnitError("bad frame 2")

    got = []
    with pytest.raises(UnitError, match="bad frame 2"):
        for x in prefetched(failing()):
            got.append(x)
    assert got == [1]
