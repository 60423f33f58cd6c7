"""The shared 2 FPS sampler: t_k = k / 2 maps to the nearest decoded frame (ties to the later),
checked against a brute-force nearest search; the frame returned is really that frame (its index
is written into its pixels)."""

from __future__ import annotations

import numpy as np
import pytest
from project_media import write_video

from vsi_wild.errors import UnitError
from vsi_wild.stages.video_io import sample_frames


def coded(i: int) -> np.ndarray:
    return np.full((64, 128, 3), 10 + 12 * i, np.uint8)


def decode_index(rgb: np.ndarray) -> int:
    return int(round((rgb.astype(np.float64).mean() - 10) / 12))


def expected(times: list[float], fps: float = 2.0) -> list[tuple[int, float, int]]:
    t = np.asarray(times)
    end = t[-1] + (t[-1] - t[0]) / (len(t) - 1)
    out = []
    k = 0
    while k / fps < end - 1e-9:
        d = np.abs(t - k / fps)
        out.append((k, k / fps, int(len(t) - 1 - np.argmin(d[::-1]))))  # the last of a tie: the later frame
        k += 1
    return out


@pytest.mark.parametrize(
    "times",
    [
        [0.0, 0.1, 0.3, 0.62, 0.75, 1.0, 1.24, 1.26, 1.9, 2.5, 2.51, 3.7, 4.0],  # variable frame rate
        [0.0, 0.25, 0.75, 1.0, 1.5, 1.75, 2.6],  # exact ties at 0.5 and 2.25 s
        [i / 25 for i in range(20)],  # 25 fps: t = 0.5 s is a tie between frames 12 and 13
        [0.0, 1.0, 2.0],  # slower than 2 FPS: a frame serves several t_k
        [i / 30 for i in range(20)],  # 30 fps
    ],
)
def test_sampler_maps_t_k_to_the_nearest_frame(tmp_path, times):
    src = write_video(tmp_path / "coded.mkv", coded, times, lossless=True)
    got = list(sample_frames(src, fps=2.0))
    want = expected(times)
    assert [(k, t, i) for k, t, i, _, _ in got] == want
    for _k, _t, i, ft, rgb in got:
        assert ft == pytest.approx(times[i], abs=1e-6)
        assert decode_index(rgb) == i
        assert rgb.shape == (64, 128, 3) and rgb.dtype == np.uint8


def test_sampler_agrees_with_the_sample_truth_rule(tmp_path):
    """The generated sample's truth says frame = floor(t * fps + 0.5) (stages/sample): the same."""
    from vsi_wild.stages.sample import SampleParams, truth_samples

    for fps in (5.0, 8.0, 25.0):
        p = SampleParams(duration_s=3.0, fps=fps)
        times = [i / fps for i in range(int(round(3.0 * fps)))]
        assert [(k, t, i) for k, t, i in truth_samples(p)] == expected(times)


def test_sampler_counts_a_ten_second_video_as_twenty_samples(tmp_path):
    times = [i / 8 for i in range(80)]
    src = write_video(tmp_path / "ten.mp4", lambda i: np.full((64, 128, 3), 3 * i, np.uint8), times, lossless=True)
    got = list(sample_frames(src))
    assert [k for k, *_ in got] == list(range(20))
    assert [i for _, _, i, _, _ in got] == [4 * k for k in range(20)]


def test_sampler_rejects_bad_input(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00" * 1000)
    with pytest.raises(UnitError, match="bad.mp4"):
        list(sample_frames(bad))
