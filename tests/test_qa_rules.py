"""The QA rules on synthetic worlds: every answer against a truth derived from the world itself."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qa_world import (
    LABEL_DIRS,
    VIEW_YAW,
    instances_table,
    make_world,
    motion_table,
    poses_table,
    truth_count,
    truth_direction,
    truth_order,
    views_table,
)

from vsi_wild.stages.qa import QAParams
from vsi_wild.stages.qa.build import plan_video
from vsi_wild.stages.qa.common import Provenance, VideoInfo
from vsi_wild.stages.qa.vmr import CARDINAL, DIAGONAL, option_set, sector, vmr_questions
from vsi_wild.stages.qa.voc import checkpoints

PROV = Provenance(0, "fp", "test")
CLIP = 60.0
PARAMS = QAParams(clip_seconds=CLIP, vpo_min_gap_s=30.0)


def video_of(w, view) -> VideoInfo:
    return VideoInfo.from_row(next(r for r in views_table(w).to_pylist() if r["view"] == view))


def plan(w, view, params=PARAMS, **kw):
    return plan_video(
        video_of(w, view),
        instances_table(w, view),
        motion_table(w, view, params.clip_seconds, **kw),
        poses_table(w, view),
        params,
        PROV,
    )


@pytest.fixture(scope="module")
def worlds():
    return [make_world(s) for s in range(3)]


# ----------------------------------------------------------------------------- VMR
@pytest.mark.parametrize(
    "angle,label",
    [
        (0, "forward"),
        (22.49, "forward"),
        (22.5, "forward-right"),
        (45, "forward-right"),
        (67.49, "forward-right"),
        (67.5, "right"),
        (90, "right"),
        (112.5, "backward-right"),
        (135, "backward-right"),
        (157.5, "backward"),
        (179.99, "backward"),
        (-180, "backward"),
        (-157.51, "backward"),
        (-157.5, "backward-left"),
        (-135, "backward-left"),
        (-112.5, "left"),
        (-90, "left"),
        (-67.51, "left"),
        (-67.5, "forward-left"),
        (-45, "forward-left"),
        (-22.51, "forward-left"),
        (-22.5, "forward"),
    ],
)
def test_sector_table(angle, label):
    assert sector(angle) == label


@settings(max_examples=300, deadline=None)
@given(st.floats(-180, 179.999999, allow_nan=False))
def test_sector_is_the_nearest_of_8_directions(angle):
    cos = {k: math.cos(math.radians(angle - c)) for k, c in LABEL_DIRS.items()}
    best = max(cos.values())
    if sum(1 for v in cos.values() if best - v < 1e-9) > 1:
        return  # exactly on a boundary: the table test pins those
    assert sector(angle) == max(cos, key=cos.get)


def test_option_sets():
    assert set(CARDINAL) == {"forward", "backward", "left", "right"}
    assert set(DIAGONAL) == {"forward-left", "forward-right", "backward-left", "backward-right"}
    for label in CARDINAL:
        assert option_set(label) == CARDINAL
    for label in DIAGONAL:
        assert option_set(label) == DIAGONAL
    with pytest.raises(ValueError):
        option_set("up")


def test_vmr_answers_match_the_trajectory(worlds):
    n = 0
    for w in worlds:
        for view in VIEW_YAW:
            for q in plan(w, view).questions:
                if q.task_type != "VMR":
                    continue
                n += 1
                truth = truth_direction(w, view, q.frame_times[0])
                assert q.correct == truth, (w.source_id, view, q.index)
                assert {q.correct, *q.distractors} == set(CARDINAL if truth in CARDINAL else DIAGONAL)
                assert q.subtype == ("cardinal" if truth in CARDINAL else "diagonal")
                assert q.frame_indices == [round(q.frame_times[0] * w.fps)]
                assert q.evidence[0][0]["end"] <= q.query_times[0]
                assert q.evidence[0][0]["start"] <= q.frame_times[0] <= q.query_times[0]
    assert n > 50


def test_vmr_none_failed_and_fixes():
    w = make_world(7)
    view = "front"
    base = motion_table(w, view, CLIP)
    ok_clips = [r["clip_index"] for r in base.to_pylist() if r["state"] == "ok"]
    a, b, c = ok_clips[:3]
    t = next(r["pivot_time"] for r in base.to_pylist() if r["clip_index"] == c)
    fixes = {
        a: {"state": "none", "reason": "reviewer: no meaningful motion"},
        b: {"state": "failed", "reason": "views disagree"},
        c: {"angle_deg": 100.0},  # reviewer's compass says right
    }
    video = video_of(w, view)
    qs, skipped = vmr_questions(motion_table(w, view, CLIP, fixes=fixes), video, PARAMS, PROV)
    by_clip = {q.index: q for q in qs}
    assert a not in by_clip and b not in by_clip
    assert by_clip[c].correct == "right" and by_clip[c].frame_times[0] == pytest.approx(t, abs=0.1)
    reasons = {s["item"]: s["reason"] for s in skipped}
    assert "none" in reasons[f"clip{a:04d}"] and "failed" in reasons[f"clip{b:04d}"]
    # a pivot outside its clip fails the check
    bad = motion_table(w, view, CLIP, fixes={ok_clips[3]: {"pivot_time": 1e6}})
    qs2, skipped2 = vmr_questions(bad, video, PARAMS, PROV)
    assert ok_clips[3] not in {q.index for q in qs2}
    assert any("outside" in s["reason"] for s in skipped2)


# ----------------------------------------------------------------------------- VOC
def test_checkpoints():
    assert checkpoints(650.0, 300.0) == [300.0, 600.0, 650.0]
    assert checkpoints(600.0, 300.0) == [300.0, 600.0]
    assert checkpoints(100.0, 300.0) == [100.0]


def test_voc_stream_and_total_match_truth(worlds):
    n = 0
    for w in worlds:
        for view in VIEW_YAW:
            qs = [q for q in plan(w, view).questions if q.task_type == "VOC"]
            cats = {v["category"] for v in w.visibility if v["view"] == view}
            assert {q.concepts[0] for q in qs if q.subtype == "total"} == cats
            for q in qs:
                cat = q.concepts[0]
                expect_cps = [k * CLIP for k in range(1, int(w.duration // CLIP) + 1) if k * CLIP < w.duration] + [
                    w.duration
                ]
                if q.subtype == "stream":
                    assert q.query_times == pytest.approx(expect_cps)
                    assert q.split == "voc_stream"
                else:
                    assert q.query_times == [w.duration] and q.split == "release"
                for qt, ans, ev in zip(q.query_times, q.answers, q.evidence, strict=True):
                    assert int(ans) == truth_count(w, view, cat, qt)
                    assert all(iv["end"] <= qt for iv in ev)
                    n += 1
            totals = {q.concepts[0]: q.answers[0] for q in qs if q.subtype == "total"}
            streams = {q.concepts[0]: q.answers[-1] for q in qs if q.subtype == "stream"}
            assert totals == streams
    assert n > 300


def test_no_answer_depends_on_the_future():
    """Add sightings after time T: every answer whose query time is <= T stays the same."""
    w = make_world(11)
    T = 330.0
    w2 = make_world(11)
    extra = []
    for v in w2.visibility:
        if v["time"] <= 100:  # re-sight early instances late, and add new ones, all after T
            extra.append({**v, "time": v["time"] + T + 50})
    extra += [{"view": "front", "time": T + 10 + k, "instance_id": 10_000 + k, "category": "thing0"} for k in range(5)]
    w2.visibility = w2.visibility + extra
    for view in VIEW_YAW:
        q1 = plan(w, view).questions
        q2 = plan(w2, view).questions
        s1 = {q.concepts[0]: q for q in q1 if q.task_type == "VOC" and q.subtype == "stream"}
        s2 = {q.concepts[0]: q for q in q2 if q.task_type == "VOC" and q.subtype == "stream"}
        for cat, q in s1.items():
            for qt, a1, a2 in zip(q.query_times, q.answers, s2[cat].answers, strict=True):
                if qt <= T:
                    assert a1 == a2, (view, cat, qt)
        for q in q1:
            if q.task_type == "VOO" and q.subtype == "first" and q.query_times[0] <= T:
                assert truth_order(w2, view, q.concepts, "first") == q.concepts


# ----------------------------------------------------------------------------- VOO
def test_voo_gaps_sets_and_order(worlds):
    n = 0
    for w in worlds:
        for view in VIEW_YAW:
            qs = [q for q in plan(w, view).questions if q.task_type == "VOO"]
            for which in ("first", "last"):
                sub = [q for q in qs if q.subtype == which]
                assert len(sub) == 5
                sets = [frozenset(q.concepts) for q in sub]
                assert len(set(sets)) == len(sets), "a 4-concept set repeats"
                for q in sub:
                    n += 1
                    truth = truth_order(w, view, q.concepts, which)
                    assert q.correct == " → ".join(truth)
                    times = []
                    for c in q.concepts:
                        ts = [v["time"] for v in w.visibility if v["view"] == view and v["category"] == c]
                        times.append(min(ts) if which == "first" else max(ts))
                    assert all(abs(a - b) >= PARAMS.voo_min_gap_s for a, b in itertools.combinations(times, 2))
                    opts = [q.correct, *q.distractors]
                    assert len(set(opts)) == 4 and all(sorted(o.split(" → ")) == sorted(q.concepts) for o in opts)
                    qt = q.query_times[0]
                    if which == "first":
                        assert qt == pytest.approx(max(times))
                    else:
                        assert qt == pytest.approx(w.duration)
                    assert all(iv["end"] <= qt for iv in q.evidence[0])
    assert n == 3 * 4 * 10


def test_voo_gap_is_enforced_when_concepts_crowd():
    """All first appearances within 2.5 s of each other: no 4 of them are 2 s apart, so no
    first-appearance question (and the reason is recorded); last appearances are unaffected."""
    w = make_world(3, n_categories=6)
    vis = [v for v in w.visibility if not (v["view"] == "front" and v["time"] < 10.0)]
    vis += [
        {"view": "front", "time": 5.0 + 0.5 * int(c[-1]), "instance_id": 500 + int(c[-1]), "category": c}
        for c in sorted({v["category"] for v in w.visibility})
    ]
    w.visibility = vis
    res = plan(w, "front")
    assert not [q for q in res.questions if q.task_type == "VOO" and q.subtype == "first"]
    assert any(s["task_type"] == "VOO" and s["item"] == "first" for s in res.skipped)


# ----------------------------------------------------------------------------- VPO
def _extent(points):
    """The walk's diameter, pair by pair (qa.vpo_min_position_frac's extent)."""
    return max(math.dist(a, b) for a, b in itertools.combinations(points, 2))


def test_vpo_gaps_order_and_offsets(worlds):
    n = 0
    for w in worlds:
        extent = _extent([(p["x"], p["y"], p["z"]) for p in w.poses])
        for view in VIEW_YAW:
            qs = [q for q in plan(w, view).questions if q.task_type == "VPO"]
            rot = [q for q in qs if q.subtype == "rotated"]
            unrot = {q.index: q for q in qs if q.subtype == "unrotated"}
            assert len(rot) == 3
            for q in rot:
                n += 1
                times = [f / w.fps for f in q.frame_indices]
                assert q.frame_times == pytest.approx(times)
                for a, b in itertools.combinations(range(4), 2):
                    assert abs(times[a] - times[b]) >= PARAMS.vpo_min_gap_s
                    pa_, pb = w.pose_at(times[a]), w.pose_at(times[b])
                    d = math.dist((pa_["x"], pa_["y"], pa_["z"]), (pb["x"], pb["y"], pb["z"]))
                    assert d >= PARAMS.vpo_min_position_frac * extent - 1e-9
                order = sorted(range(4), key=lambda i: times[i])
                assert q.correct == " → ".join(f"Frame {i + 1}" for i in order)
                assert len({q.correct, *q.distractors}) == 4
                for off, yaw in zip(q.render_offset_deg, q.render_yaw_deg, strict=True):
                    assert 30.0 <= abs(off) <= 60.0
                    assert ((yaw - (VIEW_YAW[view] + off)) + 180) % 360 - 180 == pytest.approx(0, abs=1e-9)
                assert q.query_times[0] == pytest.approx(max(times))
                c = unrot[q.index]
                assert c.frame_indices == q.frame_indices and c.correct == q.correct and c.distractors == q.distractors
                assert c.render_offset_deg == [0.0] * 4 and "rotated" not in c.question
            frames_used = [f for q in rot for f in q.frame_indices]
            assert len(set(frames_used)) == len(frames_used), "anchors reused across a video's questions"
    assert n == 36


def assert_shuttle_anchors_apart(w) -> None:
    """The shuttle walk (0 -> 40 m -> 0 every 80 s) revisits every place every 80 s, so no order is
    the same under every reading (a frame read as another visit of its place): nothing is asked.
    With that check off, the anchors' own place rule holds: any two are a fifth of the walk apart."""
    params = QAParams(clip_seconds=CLIP, vpo_min_gap_s=10.0, vpo_min_position_frac=0.2, vpo_per_video=3)
    res = plan(w, "front", params=params)
    assert not [q for q in res.questions if q.task_type == "VPO"]
    assert any(s.get("reading") == "another visit of the place" for s in res.skipped)
    params = params.model_copy(update={"stable_answers": False})
    qs = [q for q in plan(w, "front", params=params).questions if q.task_type == "VPO" and q.subtype == "rotated"]
    assert qs
    for q in qs:
        xs = [w.pose_at(f / w.fps)["x"] for f in q.frame_indices]
        for a, b in itertools.combinations(xs, 2):
            assert abs(a - b) >= 0.2 * 40.0 - 1e-9


def test_vpo_position_gap_on_a_back_and_forth_walk():
    """A walk that shuttles between two spots: anchors far apart in time but at the same place must
    not be paired."""
    w = make_world(5, duration=400.0)
    for _k, p in enumerate(w.poses):
        phase = (p["time"] % 80.0) / 80.0  # 0 -> 40 m -> 0 every 80 s
        p["x"], p["y"] = 40.0 * (1 - abs(2 * phase - 1)), 0.0
    assert_shuttle_anchors_apart(w)


def test_vpo_place_is_measured_on_the_ground_plane():
    """The shuttle walk again, with the estimated height drifting 40 m over the video (a pose
    backend's drift, cameras level): two anchors above the same spot of the ground are the same
    place however far the drift has carried their heights apart."""
    w = make_world(5, duration=400.0)
    for p in w.poses:
        phase = (p["time"] % 80.0) / 80.0
        p["x"], p["y"], p["z"] = 40.0 * (1 - abs(2 * phase - 1)), 0.0, 1.6 + 0.1 * p["time"]
        p["yaw_deg"] = 90.0 if phase < 0.5 else 270.0  # facing east out, west back (poses_table's cameras)
    assert_shuttle_anchors_apart(w)


def test_vpo_without_room_asks_fewer_and_says_why():
    w = make_world(2, duration=80.0)
    res = plan(w, "front")  # 4 anchors 30 s apart need a 90 s span
    assert not [q for q in res.questions if q.task_type == "VPO"]
    assert any(s["task_type"] == "VPO" for s in res.skipped)
    w = make_world(2, duration=95.0)  # room for sets, but only by sharing anchors between questions
    # (its last 30 s walk back over the places of 40-65 s: with the check on no set is left)
    params = PARAMS.model_copy(update={"stable_answers": False})
    rot = [q for q in plan(w, "front", params=params).questions if q.task_type == "VPO" and q.subtype == "rotated"]
    assert 1 <= len(rot) <= 3
    assert len({tuple(sorted(q.frame_indices)) for q in rot}) == len(rot)


def test_questions_are_deterministic_and_seeded(worlds):
    w = worlds[0]
    a = plan(w, "left").tables()[0]
    b = plan(w, "left").tables()[0]
    assert a.equals(b)
    c = plan(w, "left", params=PARAMS.model_copy(update={"seed": 1})).tables()[0]
    assert not a.equals(c)


def test_vpo_place_condition_grows_with_the_path_walked_between_the_anchors():
    """The sample's loop: the estimated track put its end (t = 117 s) 5.1 m from its start (4.5 s),
    1.3 m by the truth, after a 110 m walk. Apart by the extent's fraction alone (4 m) the two
    passed as different places; with the drift allowance (0.05 of the path between them) they
    need 9.5 m. Anchors 15 m apart after a 20 m walk stay compatible. ``candidates`` measures the
    path along the track's ground positions."""
    from vsi_wild.stages.qa.vpo import Candidate, compatible

    start, end = Candidate(4.5, 36, (0.0, 0.0, 0.0), 0.0), Candidate(117.0, 936, (5.1, 0.0, 0.0), 110.0)
    near_in_path = Candidate(25.0, 200, (15.0, 0.0, 0.0), 20.0)
    assert compatible(start, end, 10.0, 4.0)
    assert not compatible(start, end, 10.0, 4.0, 0.05)
    assert compatible(start, near_in_path, 10.0, 4.0, 0.05)
    w = make_world(5, duration=60.0)
    for p in w.poses:
        p["x"], p["y"] = 1.5 * p["time"], 0.0  # 1.5 m/s straight ahead
    from vsi_wild.stages.qa.vpo import VideoPoses, candidates

    video = video_of(w, "front")
    cands = candidates(VideoPoses(poses_table(w, "front"), video), video, PARAMS)
    a, b = cands[0], cands[-1]
    assert b.walked - a.walked == pytest.approx(1.5 * (b.time - a.time), rel=0.02)
