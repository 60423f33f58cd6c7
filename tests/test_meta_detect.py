"""Occurrence statistics and the frequency filter: every concept's verdict and its reason."""

from __future__ import annotations

import pytest

from vsi_wild.stages import detect as det


def rows(concept, samples, score=0.9, per_frame=1):
    return [
        {"concept": concept, "sample_index": k, "time": k / 2.0, "score": score}
        for k in samples
        for _ in range(per_frame)
    ]


def test_frequency_filter_reasons():
    n = 200  # 100 s at 2 FPS
    p = det.DetectParams(min_fraction=0.02, min_frames=3, max_fraction=0.5, gap_s=2.0, min_score=0.3)
    dets = (
        rows("rare", [10, 11])  # 2 timestamps: too rare
        + rows("everywhere", range(0, 150))  # 75 %: too frequent
        + rows("good", list(range(20, 30)) + list(range(100, 110)), per_frame=2)  # two appearances
        + rows("faint", range(40, 80), score=0.1)
    )  # below min_score: never counted
    stats = {s.concept: s for s in det.occurrence_stats(["rare", "everywhere", "good", "faint", "absent"], dets, n, p)}
    assert not stats["rare"].kept and stats["rare"].reason.startswith("dropped: too rare")
    assert not stats["everywhere"].kept and "too frequent" in stats["everywhere"].reason
    assert stats["everywhere"].fraction == pytest.approx(0.75)
    g = stats["good"]
    assert g.kept and g.reason.startswith("kept")
    assert (g.frames_present, g.appearances, g.detections, g.mean_per_frame) == (20, 2, 40, 2.0)
    assert (g.first_time, g.last_time) == (10.0, 54.5)
    assert stats["faint"].reason == "dropped: never detected" and stats["absent"].reason == "dropped: never detected"
    assert [s.concept for s in det.occurrence_stats(["b", "a"], [], n, p)] == ["b", "a"]


def test_gaps_up_to_gap_s_do_not_split_an_appearance():
    # presences at 0, 0.5, [absent 1.0 .. 2.5] 3.0: an absence of 2.0 s joins, 2.5 s splits
    assert det.count_runs([0.0, 0.5, 3.0], gap_s=2.0) == 1
    assert det.count_runs([0.0, 0.5, 3.5], gap_s=2.0) == 2
    assert det.count_runs([], gap_s=2.0) == 0


def test_thresholds_must_be_ordered():
    with pytest.raises(ValueError):
        det.DetectParams(min_fraction=0.5, max_fraction=0.1)
