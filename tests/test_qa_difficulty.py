"""Stratified difficulty (issue 14 part 4): each question's temporal quantities against an
independent computation from the synthetic world (tests/qa_world.py), their bins, the stratified
sampling of VOO concept sets and VPO anchors, and the evaluation's breakdown by them."""

from __future__ import annotations

import itertools
import math

import pytest
from qa_world import (
    HEIGHT,
    HFOV,
    WIDTH,
    camera_extrinsics,
    instances_table,
    make_world,
    motion_table,
    poses_table,
    views_table,
)

from vsi_wild import schema
from vsi_wild.stages import evaluate as ev
from vsi_wild.stages import geometry
from vsi_wild.stages.qa import QAParams
from vsi_wild.stages.qa.build import plan_video
from vsi_wild.stages.qa.common import Provenance, StableRng, VideoInfo
from vsi_wild.stages.qa.difficulty import since_last_turn, stratified_pick
from vsi_wild.stages.qa.voo import choose_sets

PROV = Provenance(0, "fp", "test")
PARAMS = QAParams(clip_seconds=60.0, vpo_min_gap_s=30.0, vpo_per_video=4)


def expected_bin(x: float, edges) -> str:
    return "near" if x < edges[0] else ("medium" if x < edges[1] else "far")


def expected_horizon(t: float, duration: float, edges) -> str:
    f = t / duration
    return "early" if f < edges[0] else ("middle" if f < edges[1] else "late")


@pytest.fixture(scope="module")
def planned():
    out = []
    for seed in (3, 4):
        w = make_world(seed, duration=600.0)
        for row in views_table(w).to_pylist():
            v = VideoInfo.from_row(row)
            res = plan_video(
                v,
                instances_table(w, v.view),
                motion_table(w, v.view, PARAMS.clip_seconds),
                poses_table(w, v.view),
                PARAMS,
                PROV,
            )
            out.append((w, v, res.questions))
    return out


def asked(planned, task_type: str):
    """(world, video, question) of every planned question of the task."""
    return [(w, v, q) for w, v, qs in planned for q in qs if q.task_type == task_type]


def test_voo_gaps_are_those_between_the_ordered_appearances(planned):
    questions = asked(planned, "VOO")
    assert len(questions) >= 40
    for w, v, q in questions:
        times = []
        for c in q.concepts:  # straight from the world's sightings, not the instances table
            ts = [s["time"] for s in w.visibility if s["view"] == v.view and s["category"] == c]
            times.append(min(ts) if q.subtype == "first" else max(ts))
        want = [b - a for a, b in zip(sorted(times), sorted(times)[1:], strict=False)]
        assert q.gaps_s == pytest.approx(want)
        assert q.difficulty_s == pytest.approx(min(want))
        assert q.difficulty_bin == expected_bin(min(want), PARAMS.voo_gap_bins_s)
        assert q.horizon_bin == expected_horizon(q.query_times[-1], w.duration, PARAMS.horizon_edges)


def test_vpo_gaps_are_those_between_the_anchors(planned):
    questions = asked(planned, "VPO")
    assert len(questions) >= 16
    for w, _v, q in questions:
        frames = sorted(int(f) for f in q.item.removeprefix("frames ").split(","))
        times = [f / w.fps for f in frames]  # the world's pose samples sit on frames
        want = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert q.gaps_s == pytest.approx(want)
        assert q.difficulty_bin == expected_bin(min(want), PARAMS.vpo_gap_bins_s)
        assert q.horizon_bin == expected_horizon(times[-1], w.duration, PARAMS.horizon_edges)


def test_voc_time_since_the_last_new_instance(planned):
    questions = asked(planned, "VOC")
    assert len(questions) >= 40
    for w, v, q in questions:
        first = {}
        for s in w.visibility:
            if s["view"] == v.view and s["category"] == q.concepts[0]:
                first[s["instance_id"]] = min(first.get(s["instance_id"], math.inf), s["time"])
        want = [t - max([f for f in first.values() if f <= t + 1e-9], default=0.0) for t in q.query_times]
        assert q.since_s == pytest.approx(want)
        assert q.difficulty_bin == expected_bin(want[-1], PARAMS.voc_since_new_bins_s)


def walk(segments, fps: float = 10.0, video_id: str = "w_front"):
    """2 FPS poses of a walk: (duration s, (dx, dy) per second) segments, one after the other; a
    level camera 1.6 m up facing north throughout (as qa_world's front view of heading 0)."""
    K = geometry.view_intrinsics(WIDTH, HEIGHT, HFOV).ravel().tolist()
    rows, x, y, t = [], 0.0, 0.0, 0.0
    for length, (vx, vy) in segments:
        for _ in range(int(length * 2)):
            rows.append(
                {
                    "video_id": video_id,
                    "sample_index": len(rows),
                    "time": t,
                    "frame": int(round(t * fps)),
                    "fps": fps,
                    "extrinsics": camera_extrinsics(x, y, 1.6, 0.0),
                    "intrinsics": K,
                    "x": x,
                    "y": y,
                    "z": 1.6,
                    "valid": True,
                    "backend": "groundtruth",
                }
            )
            x, y, t = x + vx / 2, y + vy / 2, t + 0.5
    return schema.table(schema.POSES, rows)


def test_vmr_time_since_the_last_turn_or_stop():
    w = 1.0
    turned = walk([(40, (0, 1)), (60, (1, 0))])  # north for 40 s, then east
    assert since_last_turn(turned, "w_front", 70.0, w, 45.0) == pytest.approx(30.0, abs=w)
    stopped = walk([(20, (0, 1)), (10, (0, 0)), (50, (0, 1))])  # stands still 20-30 s
    assert since_last_turn(stopped, "w_front", 60.0, w, 45.0) == pytest.approx(30.0, abs=w)
    straight = walk([(80, (1, 1))])  # never turns: since the first pose
    assert since_last_turn(straight, "w_front", 50.0, w, 45.0) == pytest.approx(50.0)
    slight = walk([(40, (0, 1)), (60, (0.5, 1))])  # a 27 degree bend is not a turn
    assert since_last_turn(slight, "w_front", 70.0, w, 45.0) == pytest.approx(70.0)
    assert since_last_turn(walk([(10, (0, 0))]), "w_front", 5.0, w, 45.0) is None  # no direction at the moment


def test_vmr_questions_record_it(planned):
    questions = asked(planned, "VMR")
    assert len(questions) >= 40
    for _w, _v, q in questions:
        assert q.since_s is not None and 0 <= q.since_s[0] <= q.frame_times[0] + 1e-9
        assert q.difficulty_bin == expected_bin(q.since_s[0], PARAMS.vmr_since_turn_bins_s)


def test_voo_sets_are_stratified():
    # 10 concepts: early ones close together (near gaps), late ones far apart
    times = {f"c{i}": t for i, t in enumerate([5, 9, 13, 17, 21, 25, 120, 240, 360, 480])}
    edges, horizon, duration = (10.0, 60.0), (1 / 3, 2 / 3), 600.0

    def stratum(s):
        ts = sorted(times[c] for c in s)
        return (
            expected_bin(min(b - a for a, b in zip(ts, ts[1:], strict=False)), edges),
            expected_horizon(ts[-1], duration, horizon),
        )

    valid = [s for s in itertools.combinations(sorted(times, key=times.get), 4)]
    strata = {stratum(s) for s in valid}
    assert len(strata) >= 4
    chosen = choose_sets(times, len(strata), 2.0, StableRng(0, "t"), stratum)
    assert {stratum(s) for s in chosen} == strata  # one from every stratum
    # drawn uniformly instead, near sets would take most and the rarest stratum would usually be missed
    share = {st: sum(stratum(s) == st for s in valid) / len(valid) for st in strata}
    assert sum(v for (d, _), v in share.items() if d == "near") > 0.6 and min(share.values()) < 0.05


def test_stratified_pick_cycles_over_strata():
    items = list(range(30))
    picked = stratified_pick(items, lambda i: ("a" if i < 27 else "b", "x"), 4, StableRng(1))
    assert sum(i >= 27 for i in picked) == 2 and len(set(picked)) == 4


def test_vpo_anchor_sets_spread_over_strata(planned):
    for _w, v, qs in planned:
        strata = [(q.difficulty_bin, q.horizon_bin) for q in qs if q.task_type == "VPO" and q.subtype == "rotated"]
        assert len(strata) == PARAMS.vpo_per_video
        assert len(set(strata)) >= 2, (v.video_id, strata)


def test_evaluate_breaks_scores_down_by_difficulty_and_horizon():
    rows = []
    for i, (d, h, _right) in enumerate(
        [
            ("near", "early", False),
            ("near", "late", False),
            ("far", "late", True),
            ("far", "late", True),
            ("medium", "early", True),
        ]
    ):
        rows.append(
            {
                "doc_id": f"d{i}",
                "task_type": "VOO",
                "subtype": "first",
                "answer": "A",
                "duration_s": 600.0,
                "difficulty_bin": d,
                "horizon_bin": h,
            }
        )
    preds = {
        r["doc_id"]: ("A" if right else "B") for r, right in zip(rows, [False, False, True, True, True], strict=True)
    }
    got = ev.evaluate(rows, preds)
    assert got["VOO~difficulty:near"] == {"score": 0.0, "n": 2}
    assert got["VOO~difficulty:far"] == {"score": 1.0, "n": 2}
    assert got["VOO~difficulty:medium"] == {"score": 1.0, "n": 1}
    assert got["VOO~horizon:late"]["score"] == pytest.approx(2 / 3) and got["VOO~horizon:late"]["n"] == 3
    assert got["VOO~horizon:early"] == {"score": 0.5, "n": 2}
    # release-format rows (no bins) get no such groups
    plain = ev.evaluate([{k: v for k, v in r.items() if not k.endswith("_bin")} for r in rows], preds)
    assert not any("~" in g for g in plain)
