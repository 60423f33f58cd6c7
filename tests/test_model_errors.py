"""The simulated segmenter and pose errors (stages/model_errors.py): each error the level names
happens, none changes nothing, and the same seed gives the same errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cameras import OPENCV_AXES

from vsi_wild.stages import model_errors as me
from vsi_wild.stages import pose as po
from vsi_wild.stages.backends.base import SegmentRecord

W, H = 320, 180


def _records(n_tracks: int = 6, n_positions: int = 60) -> list[SegmentRecord]:
    """Tracks of two concepts, each a box drifting right, seen at every position."""
    out = []
    for t in range(n_tracks):
        for pos in range(n_positions):
            x0, y0 = 10 + 40 * t + pos * 0.2, 60.0
            box = (x0, y0, x0 + 20, y0 + 40)
            mask = np.zeros((H, W), bool)
            mask[int(y0) : int(y0) + 40, int(x0) : int(x0) + 20] = True
            out.append(SegmentRecord(pos, "bin" if t % 2 else "cone", t, box, 1.0, mask))
    return out


def test_none_changes_nothing_and_a_level_is_deterministic():
    recs = _records()
    assert me.perturb_segments(recs, "none", me.rng_for(1, "v", 0), (W, H), 0.5, ["bin", "cone"]) == recs
    a = me.perturb_segments(recs, "severe", me.rng_for(1, "v", 0), (W, H), 0.5, ["bin", "cone"])
    b = me.perturb_segments(recs, "severe", me.rng_for(1, "v", 0), (W, H), 0.5, ["bin", "cone"])
    assert [(r.frame_pos, r.local_id, r.concept, r.box) for r in a] == [
        (r.frame_pos, r.local_id, r.concept, r.box) for r in b
    ]
    c = me.perturb_segments(recs, "severe", me.rng_for(2, "v", 0), (W, H), 0.5, ["bin", "cone"])
    assert [r.box for r in a] != [r.box for r in c]


def test_severe_segmenter_errors_break_miss_add_shrink_and_confuse():
    recs = _records(n_tracks=6, n_positions=120)
    out = me.perturb_segments(recs, "severe", me.rng_for(3, "v", 0), (W, H), 0.5, ["bin", "cone"])
    ids = {r.local_id for r in out}
    assert len(ids) > 6  # fragments and false tracks
    assert sorted(ids) == list(range(len(ids)))  # renumbered in order of first appearance
    assert len(out) < len(recs)  # missed samples
    # boxes shrink and jitter, and the mask follows its box
    shrunk = [r for r in out if (r.box[2] - r.box[0]) < 19.5 or (r.box[3] - r.box[1]) < 39.5]
    assert shrunk
    r = shrunk[0]
    ys, xs = np.nonzero(r.mask)
    assert xs.min() >= math.floor(r.box[0]) - 1 and xs.max() <= math.ceil(r.box[2]) + 1
    # a false track: a short one where no object is
    lengths: dict[int, int] = {}
    for r in out:
        lengths[r.local_id] = lengths.get(r.local_id, 0) + 1
    assert min(lengths.values()) <= me.SEGMENTER_LEVELS["severe"].false_max_samples


def test_a_switch_swaps_two_look_alikes_ids_and_fragmentation_splits_a_track():
    # two tracks of two concepts: no switch between them, each output id keeps one concept (a
    # confusion renames a whole track)
    out = me.perturb_segments(
        _records(n_tracks=2, n_positions=400), "severe", me.rng_for(5, "v", 0), (W, H), 0.5, ["bin", "cone"]
    )
    for i in {r.local_id for r in out}:
        assert len({r.concept for r in out if r.local_id == i}) == 1
    # two look-alikes seen together for 200 s: at 2 switches a minute, one id holds both objects' boxes
    same = [
        SegmentRecord(r.frame_pos, "bin", r.local_id, r.box, 1.0, r.mask) for r in _records(n_tracks=2, n_positions=400)
    ]
    out = me.perturb_segments(same, "severe", me.rng_for(6, "v", 0), (W, H), 0.5, ["bin"])
    xs_by_id: dict[int, list[float]] = {}
    for r in out:
        xs_by_id.setdefault(r.local_id, []).append(r.box[0])
    assert any(max(x) - min(x) > 30 for x in xs_by_id.values())


def _walk(n: int = 240) -> po.Track:
    """A level camera walking 1 m per sample along +y for n samples."""
    R = np.repeat(OPENCV_AXES[None], n, 0)
    C = np.stack([np.zeros(n), np.arange(n, dtype=float), np.full(n, 1.6)], axis=1)
    K = np.repeat(np.array([[[160.0, 0.0, 160.0], [0.0, 160.0, 90.0], [0.0, 0.0, 1.0]]]), n, 0)
    return po.Track(np.arange(n), np.arange(n) * 0.5, np.arange(n) * 4, 8.0, R, C, K, np.ones(n, bool))


def test_pose_errors_drift_with_the_distance_walked_and_keep_the_cameras_level_on_average():
    track = _walk()
    assert me.perturb_track(track, "none", me.rng_for(1, "v", "poses")) is track
    drifts = []
    for seed in range(20):
        noisy = me.perturb_track(track, "moderate", me.rng_for(seed, "v", "poses"))
        err = np.linalg.norm(noisy.C - track.C, axis=1)
        drifts.append((err[20], err[-1]))
        # heading drift turns about the vertical: the cameras' down axis stays down (up to the jitter)
        downs = np.array([noisy.down_at(int(k)) for k in noisy.sample_indices])
        assert np.degrees(np.arccos(np.clip(downs @ np.array([0.0, 0.0, -1.0]), -1, 1))).max() < 3.0
    early, late = np.median([d[0] for d in drifts]), np.median([d[1] for d in drifts])
    assert late > 3 * early  # the error grows along the walk
    assert me.perturb_track(track, "severe", me.rng_for(1, "v", "poses")).C[-1] != pytest.approx(track.C[-1])
