"""VMR's metadata: motion per timestamp, the pivot per clip, "none", and the views' agreement."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cameras import level_rotation

from vsi_wild.stages import geometry
from vsi_wild.stages import metadata as meta
from vsi_wild.stages import pose as po

YAWS = {"front": 0.0, "right": 90.0, "back": 180.0, "left": 270.0}


def track(path, view_yaw=0.0):
    R = np.array([level_rotation(yaw + view_yaw) for _, _, yaw in path])
    C = np.array([[x, y, 1.6] for x, y, _ in path])
    n = len(path)
    return po.Track(
        np.arange(n),
        np.arange(n) * 0.5,
        np.arange(n) * 4,
        8.0,
        R,
        C,
        np.repeat(np.eye(3)[None], n, 0),
        np.ones(n, bool),
    )


def walk():
    """Clip 0 (0-30 s): heading 20°, moving steadily 45° right of it. Clip 1: standing still.
    Clip 2: heading 20°, lurching in a new direction every step (no steady motion)."""
    rng = np.random.default_rng(1)
    x, y, out = 0.0, 0.0, []
    for k in range(180):
        out.append((x, y, 20.0))
        clip = k // 60
        if clip == 0:
            a = math.radians(20 + 45)
        elif clip == 1:
            continue
        else:
            a = math.radians(20 + rng.choice([0, 120, 240]) + rng.uniform(-20, 20))
        x, y = x + 0.6 * math.sin(a), y + 0.6 * math.cos(a)
    return out


def test_pivot_angle_none_and_speed():
    p = meta.MetadataParams(motion_clip_seconds=30.0)
    path = walk()
    clips = meta.motion_clips(90.0, 30.0)
    for view, yaw in YAWS.items():
        samples = meta.motion_samples(f"sample-x_{view}", track(path, yaw), p)
        rows = {r["clip_index"]: r for r in meta.motion_rows(f"sample-x_{view}", samples, clips, p)}
        ok = rows[0]
        assert ok["state"] == "ok" and ok["origin"] == "auto"
        assert ok["angle_deg"] == pytest.approx(float(geometry.wrap_deg(45.0 - yaw)), abs=1e-6)
        assert 0.0 <= ok["pivot_time"] < 30.0 and ok["pivot_frame"] == int(ok["pivot_time"] * 8)
        assert ok["speed"] == pytest.approx(1.2, rel=1e-6)  # 0.6 m per 0.5 s
        assert ok["stability"] == pytest.approx(1.0)
        assert rows[1]["state"] == "none" and rows[1]["pivot_time"] is None and "no steady motion" in rows[1]["reason"]
        assert rows[2]["state"] == "none"
        assert all(not s["moving"] for s in samples if 61 <= s["sample_index"] <= 118)


def test_views_disagreeing_fail_the_clip():
    p = meta.MetadataParams(motion_clip_seconds=30.0)
    path = walk()
    clips = meta.motion_clips(90.0, 30.0)
    fused = track(path)
    good = {v: track(path, y) for v, y in YAWS.items()}
    rows, verdict = meta.view_agreement("sample-x", fused, good, YAWS, clips, p)
    assert verdict[0] == (True, "all views agree")
    assert all(r["median_error_deg"] == pytest.approx(0.0, abs=1e-6) for r in rows if r["clip_index"] == 0)
    # the back view's estimate turned by 90°: that clip is flagged, and VMR gets no question from it
    bad = dict(good)
    bad["back"] = track(path, 270.0)
    rows, verdict = meta.view_agreement("sample-x", fused, bad, YAWS, clips, p)
    assert verdict[0][0] is False and "back off by 90°" in verdict[0][1]
    samples = meta.motion_samples("sample-x_front", fused, p)
    motion = {r["clip_index"]: r for r in meta.motion_rows("sample-x_front", samples, clips, p, verdict)}
    assert motion[0]["state"] == "failed" and motion[0]["views_consistent"] is False
    assert "views disagree" in motion[0]["reason"]
    # one view only: nothing to compare
    _, verdict = meta.view_agreement("sample-x", fused, {"front": good["front"]}, YAWS, clips, p)
    assert verdict[0][0] is None


def test_spans_join_gaps_up_to_span_gap():
    assert meta.spans_of([0.0, 0.5, 1.0, 2.5, 5.0], 1.0) == [(0.0, 2.5), (5.0, 5.0)]
    assert meta.spans_of([0.0, 0.5, 1.0, 2.5, 5.0], 0.0) == [(0.0, 1.0), (2.5, 2.5), (5.0, 5.0)]
    assert meta.spans_of([], 1.0) == []
