"""One right answer: questions whose answer a reasonable reading changes are re-picked or not asked.

Constructed metadata, the answers worked out here by hand:
- VOC: a speck (an instance seen, never clearly) changes a count: the total is not asked, and a
  checkpoint it straddles moves to a moment both readings agree on; seen clearly once, it counts;
- VOO: a clear half-second glimpse of a hydrant after its last sustained sighting reorders a
  last-appearance question: another concept set is asked; without the glimpse the set is asked;
- VMR: a direction 3° from a sector's edge: another steady moment of the clip is the pivot, or the
  clip is not asked; 12.5° from the edge it is asked as it is;
- a video whose metadata has no unstable item: the same questions with the check on and off.
- VPO: a loop walked again whose drifting track misses the revisit: the posts seen close at both
  visits show it (no question asked holds an anchor a post dates in another visit across another
  anchor); seen only from afar on the second lap, they show nothing (the track's questions).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from qa_world import instances_table, make_world, motion_samples_table, motion_table, poses_table, views_table

from vsi_wild import schema
from vsi_wild.stages.pose import Track, track_from_rows
from vsi_wild.stages.qa import QAParams
from vsi_wild.stages.qa.build import plan_video
from vsi_wild.stages.qa.common import Provenance, StableRng, VideoInfo, ordering_text
from vsi_wild.stages.qa.params import Sighting
from vsi_wild.stages.qa.readings import sector_margin, seen_under
from vsi_wild.stages.qa.vmr import vmr_questions
from vsi_wild.stages.qa.voc import voc_questions
from vsi_wild.stages.qa.voo import voo_questions
from vsi_wild.stages.qa.vpo import (
    Candidate,
    GroundSighting,
    OtherVisits,
    VideoPoses,
    ViewContent,
    apart_visits,
    choose_anchor_sets,
    compatible,
    object_visits,
    other_visits,
    search_set,
    sightings_from_metadata,
    trajectory_extent,
    view_problem,
    vpo_plan,
)

VID = "sample-test_front"
PROV = Provenance(0, "test", "test")
W, H = 640, 360  # 50 px of this view is "seen clearly"


def _video(duration: float = 60.0, fps: float = 8.0) -> VideoInfo:
    return VideoInfo(VID, "sample-test", "front", 0.0, 0.0, 90.0, 58.7, W, H, fps, int(duration * fps), duration)


def _metadata(
    seen: dict[int, tuple[str, dict[float, int]]],
    origin: dict[int, str] | None = None,
    duration: float = 60.0,
    times_given: frozenset[int] = frozenset(),
) -> tuple[pa.Table, pa.Table]:
    """INSTANCES and VISIBILITY of instances seen at {time: mask area} (every other 2 FPS time: not
    seen); ``times_given``: the instances whose times a person gave."""
    inst, vis = [], []
    for iid, (concept, at) in sorted(seen.items()):
        ts = sorted(at)
        inst.append(
            {
                "video_id": VID,
                "concept": concept,
                "instance_id": iid,
                "first_time": ts[0],
                "last_time": ts[-1],
                "first_frame": int(ts[0] * 8),
                "last_frame": int(ts[-1] * 8),
                "fps": 8.0,
                "n_observations": len(ts),
                "spans": [{"start": ts[0], "end": ts[-1]}],
                "x": None,
                "y": None,
                "z": None,
                "origin": (origin or {}).get(iid, "auto"),
                "times_given": iid in times_given,
            }
        )
        for k in range(int(duration * 2) + 1):
            t = k * 0.5
            seen_now, area = t in at, at.get(t)  # seen with no area: a box a person drew
            vis.append(
                {
                    "video_id": VID,
                    "instance_id": iid,
                    "concept": concept,
                    "sample_index": k,
                    "time": t,
                    "frame": int(t * 8),
                    "fps": 8.0,
                    "state": "visible" if seen_now else "not_seen",
                    "geometric": False,
                    "x0": 0.0 if seen_now else None,
                    "y0": 0.0 if seen_now else None,
                    "x1": 10.0 if seen_now else None,
                    "y1": 10.0 if seen_now else None,
                    "area": area,
                }
            )
    return schema.table(schema.INSTANCES, inst), schema.table(schema.VISIBILITY, vis)


def _span(a: float, b: float, area: int) -> dict[float, int]:
    return {k * 0.5: area for k in range(int(a * 2), int(b * 2) + 1)}


# ----------------------------------------------------------------------------- sightings
def test_sightings_under_each_reading():
    instances, visibility = _metadata(
        {
            1: ("cone", {**_span(2, 2, 400), **_span(10, 11, 30)}),  # a clear glimpse, then a sustained speck
            2: ("cone", _span(5, 5, 20)),  # one frame, a speck
            3: ("cone", {1.0: 30}),  # added by a person: its times stand
            4: ("cone", {**_span(20, 20, 400), **_span(30, 31, 30)}),  # merged by a person: read like instance 1
            5: ("cone", {40.0: None, 50.0: 30}),  # a box a person drew (no mask), then a speck
        },
        origin={3: "fix", 4: "fix", 5: "fix"},
        times_given=frozenset({3}),
    )
    pixels = W * H

    def times(reading: Sighting) -> dict[int, tuple[float, ...]]:
        return {i: s.times for i, s in seen_under(instances, visibility, VID, pixels, reading).items()}

    four = (20.0, 30.0, 30.5, 31.0)
    at_all = {1: (2.0, 10.0, 10.5, 11.0), 2: (5.0,), 3: (1.0,), 4: four, 5: (40.0, 50.0)}
    assert times(Sighting(name="at all")) == at_all
    assert times(Sighting(name="clearly", min_area_frac=50 / pixels)) == {1: (2.0,), 3: (1.0,), 4: (20.0,), 5: (40.0,)}
    assert times(Sighting(name="sustained", min_visible_s=1.0)) == {1: (10.0, 10.5, 11.0), 3: (1.0,), 4: four[1:]}
    # without a visibility track every instance is seen from its first to its last time, whatever the reading
    unknown = {
        i: s.times for i, s in seen_under(instances, None, VID, pixels, Sighting(name="x", min_area_frac=1)).items()
    }
    assert unknown == {1: (2.0, 11.0), 2: (5.0,), 3: (1.0,), 4: (20.0, 31.0), 5: (40.0, 50.0)}


def _specks(rows: list[tuple[int | None, str, int, float, int]]) -> pa.Table:
    """SPECKS of (instance or None, concept, clip-local id, time, area); clip 0."""
    return schema.table(
        schema.SPECKS,
        [
            {
                "video_id": VID,
                "instance_id": iid,
                "attributed_by": None if iid is None else "track",
                "concept": concept,
                "clip_index": 0,
                "local_id": local,
                "sample_index": int(t * 2),
                "time": t,
                "x0": 0.0,
                "y0": 0.0,
                "x1": 2.0,
                "y1": 2.0,
                "area": area,
            }
            for iid, concept, local, t, area in rows
        ],
    )


def test_specks_are_sightings_under_the_readings_their_areas_meet():
    """A speck (a mask under segment.min_area) adds its moment to the instance it shows where the
    track has no mask then; one no instance is told for is an object of its own (a negative id),
    seen at all and never clearly."""
    instances, visibility = _metadata({1: ("cone", _span(10, 12, 400)), 2: ("cone", _span(20, 21, 400))})
    specks = _specks(
        [(1, "cone", 0, 6.0, 5), (1, "cone", 0, 11.0, 3), (None, "cone", 9, 30.0, 8), (None, "cone", 9, 30.5, 2)]
    )
    pixels = W * H

    def times(reading: Sighting, sp=specks) -> dict[int, tuple[float, ...]]:
        return {i: s.times for i, s in seen_under(instances, visibility, VID, pixels, reading, sp).items()}

    at_all = Sighting(name="at all")
    assert times(at_all) == {1: (6.0, 10.0, 10.5, 11.0, 11.5, 12.0), 2: (20.0, 20.5, 21.0), -1: (30.0, 30.5)}
    assert times(Sighting(name="clearly", min_area_frac=50 / pixels)) == {1: _times(10, 12), 2: _times(20, 21)}
    assert times(Sighting(name="4 px", min_area_frac=4 / pixels)) == {
        1: (6.0, *_times(10, 12)),
        2: _times(20, 21),
        -1: (30.0,),
    }
    assert times(at_all, None) == {1: _times(10, 12), 2: _times(20, 21)}  # no specks read: as before


def _times(a: float, b: float) -> tuple[float, ...]:
    return tuple(sorted(_span(a, b, 1)))


# ----------------------------------------------------------------------------- VOC
CLEAR = 400
VOC_PARAMS = QAParams(clip_seconds=20.0)


def _voc(seen, params=VOC_PARAMS, specks=None):
    instances, visibility = _metadata(seen)
    questions, skipped = voc_questions(instances, _video(), params, PROV, visibility, specks)
    return {(q.concepts[0], q.subtype): q for q in questions}, skipped


def test_a_speck_too_small_to_track_moves_a_checkpoint_or_drops_a_total():
    """Instance 2 is tracked from 43 s, and a speck of it (under segment.min_area: no track, no
    visibility row) was seen at 38 s: seen at all by 40 s, not clearly. The checkpoint at 40 s
    moves before the speck; without the specks it is asked at 40 s. A speck no instance is told
    for may be a third bench: the total is not asked."""
    seen = {1: ("bench", _span(1, 3, CLEAR)), 2: ("bench", _span(43, 45, CLEAR))}
    qs, skipped = _voc(seen)
    assert qs[("bench", "stream")].query_times == [20.0, 40.0, 60.0] and not skipped
    qs, skipped = _voc(seen, specks=_specks([(2, "bench", 4, 38.0, 6)]))
    stream = qs[("bench", "stream")]
    assert stream.query_times == [20.0, 37.5, 60.0] and stream.answers == ["1", "1", "2"] and not skipped
    qs, skipped = _voc(seen, specks=_specks([(None, "bench", 4, 50.0, 6)]))
    assert ("bench", "total") not in qs
    (row,) = skipped
    assert row["reading"] == "clearly"
    assert row["reason"] == (
        "total not asked: 3 seen at all, 2 seen clearly (with specks no instance is told for: "
        "clip 0 speck 4 first seen at 50 s)"
    )
    assert row["specks"] == [{"clip_index": 0, "local_id": 4, "first_time": 50.0}]  # what a speck fix names
    # the check off: the tracked instances' count, the specks not read
    qs, skipped = _voc(seen, QAParams(clip_seconds=20.0, stable_answers=False), _specks([(None, "bench", 4, 50.0, 6)]))
    assert qs[("bench", "total")].answers == ["2"] and not skipped


def test_a_speck_that_changes_a_count_is_not_asked():
    seen = {
        1: ("bench", _span(1, 3, CLEAR)),
        2: ("bench", _span(25, 27, CLEAR)),
        3: ("bench", _span(45, 50, 20)),
        4: ("cone", _span(4, 8, CLEAR)),
    }
    qs, skipped = _voc(seen)
    assert ("bench", "total") not in qs and ("bench", "stream") not in qs  # 3 seen at all, 2 seen clearly
    (row,) = [s for s in skipped if s["item"] == "bench"]
    assert row["reading"] == "clearly" and "3 seen at all, 2 seen clearly" in row["reason"]
    assert qs[("cone", "total")].answers == ["1"]
    # seen clearly once, the speck counts under both readings: asked, 3
    seen[3] = ("bench", {**_span(45, 50, 20), 52.0: 60})
    qs, skipped = _voc(seen)
    assert qs[("bench", "total")].answers == ["3"] and not [s for s in skipped if s.get("reading")]
    assert qs[("bench", "stream")].query_times == [20.0, 40.0, 60.0]
    assert qs[("bench", "stream")].answers == ["1", "2", "3"]
    # the check off: the first reading's count (seen at all), as the pipeline asked before
    seen[3] = ("bench", _span(45, 50, 20))
    qs, skipped = _voc(seen, QAParams(clip_seconds=20.0, stable_answers=False))
    assert qs[("bench", "total")].answers == ["3"] and not skipped


def test_a_checkpoint_the_readings_disagree_on_moves():
    # instance 2 is a speck from 38 s and seen clearly from 43 s: at 40 s one reading counts it, the other not
    seen = {1: ("bench", _span(1, 3, CLEAR)), 2: ("bench", {**_span(38, 42, 20), **_span(43, 45, CLEAR)})}
    qs, skipped = _voc(seen)
    stream = qs[("bench", "stream")]
    # within a quarter of the 20 s interval of 40 s, the nearest moment both agree on: 37.5 s (before the speck)
    assert stream.query_times == [20.0, 37.5, 60.0] and stream.answers == ["1", "1", "2"]
    assert qs[("bench", "total")].answers == ["2"] and not skipped
    # a speck through the whole window around the checkpoint: the checkpoint is not asked
    seen[2] = ("bench", {**_span(30, 52, 20), **_span(53, 55, CLEAR)})
    qs, skipped = _voc(seen)
    assert qs[("bench", "stream")].query_times == [20.0, 60.0]
    (row,) = skipped
    assert row["reading"] == "clearly" and row["reason"].startswith("checkpoint 40 s not asked")


# ----------------------------------------------------------------------------- VOO
VOO_LAST_PARAMS = QAParams(voo_first=0, voo_last=1)


def _voo_last(seen, params=VOO_LAST_PARAMS):
    instances, visibility = _metadata(seen, duration=160.0)
    questions, skipped = voo_questions(instances, _video(160.0), params, PROV, visibility)
    return questions, skipped


def test_a_glimpse_that_reorders_a_last_appearance_is_not_asked():
    seen = {
        1: ("hydrant", {**_span(95, 100, CLEAR), 144.0: CLEAR}),  # glimpsed clearly for half a second at 144 s
        2: ("bench", _span(105, 110, CLEAR)),
        3: ("cone", _span(115, 120, CLEAR)),
        4: ("sign", _span(125, 130, CLEAR)),
    }
    qs, skipped = _voo_last(seen)
    assert qs == []  # the only set: hydrant last-seen at 100 s sustained, at 144 s in a glimpse
    assert [s.get("reading") for s in skipped if s.get("reading")] == ["glimpse"]
    assert "bench → cone → sign → hydrant seen glimpse" in skipped[0]["reason"]
    # a fifth concept gives another set: it is asked instead
    seen[5] = ("ball", _span(135, 140, CLEAR))
    (q,), skipped = _voo_last(seen)
    assert q.correct == ordering_text(["bench", "cone", "sign", "ball"])
    assert [s["item"] for s in skipped if s.get("reading")] == ["bench|cone|hydrant|sign"] or all(
        "hydrant" in s["item"] for s in skipped if s.get("reading")
    )
    # without the glimpse (too small to be seen clearly, too short to be sustained) every reading agrees
    del seen[5]
    seen[1] = ("hydrant", {**_span(95, 100, CLEAR), 144.0: 20})
    (q,), skipped = _voo_last(seen)
    assert q.correct == ordering_text(["hydrant", "bench", "cone", "sign"]) and not [
        s for s in skipped if s.get("reading")
    ]


def test_appearances_closer_than_the_gap_under_one_reading():
    # sustained: cone first at 20 s; a clear glimpse at 9 s puts it 1 s after the bench (8 s): too close to order
    seen = {
        1: ("bench", _span(8, 12, CLEAR)),
        2: ("cone", {9.0: CLEAR, **_span(20, 24, CLEAR)}),
        3: ("sign", _span(30, 34, CLEAR)),
        4: ("ball", _span(40, 44, CLEAR)),
    }
    instances, visibility = _metadata(seen)
    qs, skipped = voo_questions(instances, _video(), QAParams(voo_first=1, voo_last=0), PROV, visibility)
    assert qs == [] and "bench and cone 1.0 s apart seen glimpse" in skipped[0]["reason"]


# ----------------------------------------------------------------------------- VMR
def _motion(
    angle: float, samples: dict[float, float], clip=(0.0, 30.0), pivot=10.0, origin="auto"
) -> tuple[pa.Table, pa.Table]:
    """One ok clip with its pivot at ``pivot`` (angle ``angle``) and the 2 FPS moments {time: angle}
    (moving, steady); every other moment of the clip is still."""
    motion = schema.table(
        schema.MOTION,
        [
            {
                "video_id": VID,
                "clip_index": 0,
                "clip_start": clip[0],
                "clip_end": clip[1],
                "state": "ok",
                "pivot_time": pivot,
                "pivot_frame": int(pivot * 8),
                "fps": 8.0,
                "angle_deg": angle,
                "speed": 1.0,
                "stability": 1.0,
                "views_consistent": True,
                "reason": None,
                "origin": origin,
            }
        ],
    )
    rows = []
    for k in range(int(clip[1] * 2)):
        t = k * 0.5
        a = samples.get(t)
        rows.append(
            {
                "video_id": VID,
                "sample_index": k,
                "time": t,
                "frame": int(t * 8),
                "fps": 8.0,
                "clip_index": 0,
                "angle_deg": a,
                "speed": 1.0 if a is not None else 0.0,
                "stability": 1.0 if a is not None else None,
                "moving": a is not None,
                "candidate": a is not None,
            }
        )
    return motion, schema.table(schema.MOTION_SAMPLES, rows)


def _steady(a: float, b: float, angle: float) -> dict[float, float]:
    return {k * 0.5: angle for k in range(int(a * 2), int(b * 2) + 1)}


def test_a_direction_near_a_sector_edge_moves_the_pivot_or_is_not_asked():
    edge = 22.5 - 3.0  # forward to the rule, forward-right to a viewer who misjudges by 5°
    assert sector_margin(edge) == pytest.approx(3.0)
    video = _video(30.0)
    motion, samples = _motion(edge, {**_steady(8, 12, edge), **_steady(20, 24, 2.0)})
    (q,), skipped = vmr_questions(motion, video, QAParams(), PROV, motion_samples=samples)
    # the steady stretch 20-24 s nearest the clip's middle whose whole ±1 s window moves: 21 s
    assert q.correct == "forward" and q.frame_times == [21.0] and q.angle_deg == pytest.approx(2.0)
    assert q.query_times == [22.0] and q.frame_indices == [168] and not skipped
    # no other steady moment: not asked, with the reading that changes it
    motion, samples = _motion(edge, _steady(8, 12, edge))
    qs, (row,) = vmr_questions(motion, video, QAParams(), PROV, motion_samples=samples)
    assert qs == [] and row["reading"] == "the direction judged +10°" and "forward-right" in row["reason"]
    # 12.5° from the edge (>= 5° judgement + 5° error): asked at its own pivot
    motion, samples = _motion(10.0, _steady(8, 12, 10.0))
    (q,), skipped = vmr_questions(motion, video, QAParams(), PROV, motion_samples=samples)
    assert q.correct == "forward" and q.frame_times == [10.0] and not skipped
    # a turn inside the evidence window (10.5 s reads "forward-right"): the steady moment before it, 9 s
    motion, samples = _motion(10.0, {**_steady(8, 12, 10.0), 10.5: 30.0})
    (q,), skipped = vmr_questions(motion, video, QAParams(), PROV, motion_samples=samples)
    assert q.frame_times == [9.0] and q.correct == "forward" and not skipped
    # ... and with no steady second around any other moment: not asked
    motion, samples = _motion(10.0, {**_steady(9, 11, 10.0), 10.5: 30.0})
    qs, (row,) = vmr_questions(motion, video, QAParams(), PROV, motion_samples=samples)
    assert qs == [] and row["reading"] == "the motion at 10.5 s" and "forward-right" in row["reason"]
    # a person's pivot stands
    motion, samples = _motion(edge, _steady(8, 12, edge), origin="fix")
    (q,), _ = vmr_questions(motion, video, QAParams(), PROV, motion_samples=samples)
    assert q.frame_times == [10.0] and q.correct == "forward"


# ----------------------------------------------------------------------------- nothing to drop
def test_metadata_without_unstable_items_drops_nothing():
    """A world whose every sighting is clear and sustained, whose directions keep 10° from the
    sectors' edges and whose walk never comes back to a place: the check changes nothing."""
    w = make_world(5, duration=240.0, jitter_deg=10.0)  # directions at least 12.5° inside their sectors
    params = QAParams(clip_seconds=60.0, vpo_min_gap_s=30.0)
    for view in ("front", "back"):
        video = VideoInfo.from_row(next(r for r in views_table(w, W, H).to_pylist() if r["view"] == view))
        instances = instances_table(w, view)
        # every sighting a clear mask, runs of at least 1 s (the world's spans are 0.5-20 s: lengthen the short)
        vis = [
            {
                "video_id": video.video_id,
                "instance_id": v["instance_id"],
                "concept": v["category"],
                "sample_index": int(v["time"] * 2),
                "time": v["time"],
                "frame": int(round(v["time"] * w.fps)),
                "fps": w.fps,
                "state": "visible",
                "geometric": False,
                "x0": 0.0,
                "y0": 0.0,
                "x1": 40.0,
                "y1": 40.0,
                "area": 1600,
            }
            for v in w.visibility
            if v["view"] == view
        ]
        visibility = schema.table(schema.VISIBILITY, _sustained(vis))
        instances = _instances_of(visibility, instances)
        samples = motion_samples_table(w, view, 60.0)
        motion = motion_table(w, view, 60.0)
        # VPO's places: a walk that never comes back (the cameras moved there, facing as before)
        straight = replace(w, poses=[{**p, "x": p["time"], "y": 0.0} for p in w.poses])
        args = (video, instances, motion, poses_table(straight, view, width=W, height=H))
        on = plan_video(*args, params, PROV, visibility, samples)
        off = plan_video(*args, params.model_copy(update={"stable_answers": False}), PROV, visibility, samples)
        assert {q.task_type for q in on.questions} == {"VOC", "VOO", "VMR", "VPO"}
        assert on.questions == off.questions, view
        assert not [s for s in on.skipped if s.get("reading")], view


def _sustained(vis: list[dict]) -> list[dict]:
    """Each instance's one-timestamp sightings extended to the timestamp before (so each run lasts >= 1 s)."""
    have = {(v["instance_id"], v["sample_index"]) for v in vis}
    out = list(vis)
    for v in vis:
        k = v["sample_index"]
        if (v["instance_id"], k - 1) not in have and (v["instance_id"], k + 1) not in have:
            j = k - 1 if k > 0 else k + 1
            out.append({**v, "sample_index": j, "time": j * 0.5, "frame": int(round(j * 0.5 * v["fps"]))})
            have.add((v["instance_id"], j))
    return sorted(out, key=lambda v: (v["instance_id"], v["sample_index"]))


def _instances_of(visibility: pa.Table, instances: pa.Table) -> pa.Table:
    """The instances' first and last times from the (lengthened) visibility rows."""
    times: dict[int, list[float]] = {}
    for r in visibility.to_pylist():
        times.setdefault(r["instance_id"], []).append(r["time"])
    rows = instances.to_pylist()
    for r in rows:
        r["first_time"], r["last_time"] = min(times[r["instance_id"]]), max(times[r["instance_id"]])
    return schema.table(schema.INSTANCES, rows)


# ----------------------------------------------------------------------------- VPO
def _visits(w, t: float, radius: float) -> tuple[float, float]:
    here = w.pose_at(t)
    ts = [p["time"] for p in w.poses if ((p["x"] - here["x"]) ** 2 + (p["y"] - here["y"]) ** 2) ** 0.5 < radius]
    return min(ts), max(ts)


def _loop_world(beside: float = 0.0):
    """A loop: 60 m east, 40 m north, then back: to (30, ``beside``) at 170 s and west from there to
    (0, ``beside``) at 200 s, alongside its first 30 m, ``beside`` m north of them."""
    w = make_world(7, duration=200.0)
    for p in w.poses:
        t = p["time"]
        if t <= 60:
            p["x"], p["y"] = t, 0.0
        elif t <= 100:
            p["x"], p["y"] = 60.0, t - 60.0
        elif t <= 170:
            f = (t - 100.0) / 70.0
            p["x"], p["y"] = 60.0 - 30.0 * f, 40.0 + f * (beside - 40.0)
        else:
            p["x"], p["y"] = 200.0 - t, beside
    return w


def _loop_vpo(w, params: QAParams):
    """The rotated VPO questions of the loop's front view, and what was skipped."""
    video = VideoInfo.from_row(next(r for r in views_table(w).to_pylist() if r["view"] == "front"))
    res = plan_video(
        video, instances_table(w, "front"), motion_table(w, "front", 60.0), poses_table(w, "front"), params, PROV
    )
    return [q for q in res.questions if q.task_type == "VPO" and q.subtype == "rotated"], res.skipped


def _interleaved(w, q, radius: float) -> bool:
    """Some anchor's visits of its place (the walk within ``radius``) reach across another anchor."""
    spans = sorted(_visits(w, t, radius) for t in q.frame_times)
    return any(a[1] >= b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_a_frame_whose_place_is_visited_again_is_not_anchored_across_the_other_visit():
    """The loop ends at its start, along its first 30 m. A frame of the first seconds shows a place
    the walk passes again at its end: a viewer may date it first or last."""
    w = _loop_world()
    params = QAParams(clip_seconds=60.0, vpo_min_gap_s=30.0, vpo_per_video=3)
    radius = params.vpo_min_position_frac * (60.0**2 + 40.0**2) ** 0.5
    before, _ = _loop_vpo(w, params.model_copy(update={"stable_answers": False}))
    after, skipped = _loop_vpo(w, params)
    assert any(_interleaved(w, q, radius) for q in before)  # what the place rule alone asked
    assert after and not any(_interleaved(w, q, radius) for q in after)
    assert [s["reading"] for s in skipped if s["task_type"] == "VPO" and s.get("reading")] == [
        "another visit of the place"
    ] * sum(_interleaved(w, q, radius) for q in before)


def test_a_return_just_beyond_the_place_radius_is_another_visit_within_the_metadatas_error():
    """The loop's last 30 m pass its first 30 m 1.05 place radii away: outside the radius by the
    track, inside it by a truth the track is off from by less than ``vpo_visit_error_frac`` of the
    extent (0.2 radii here). No question may put a frame of the first 30 m across that return; with
    no margin for the error, the radius alone sees no return and such questions are asked."""
    params = QAParams(clip_seconds=60.0, vpo_min_gap_s=30.0, vpo_per_video=3, vpo_visit_error_frac=0.02)
    radius = params.vpo_min_position_frac * (60.0**2 + 40.0**2) ** 0.5
    near = _loop_world(1.05 * radius)
    no_margin, _ = _loop_vpo(near, params.model_copy(update={"vpo_visit_error_frac": 0.0}))
    assert not any(_interleaved(near, q, radius) for q in no_margin)
    assert any(_interleaved(near, q, 1.1 * radius) for q in no_margin)
    with_margin, skipped = _loop_vpo(near, params)
    assert with_margin and not any(_interleaved(near, q, 1.1 * radius) for q in with_margin)
    assert any(s.get("reading") == "another visit of the place" for s in skipped)
    far = _loop_world(1.5 * radius)  # beyond radius + error: nothing to re-pick
    assert [q.frame_times for q in _loop_vpo(far, params)[0]] == [
        q.frame_times for q in _loop_vpo(far, params.model_copy(update={"vpo_visit_error_frac": 0.0}))[0]
    ]


def test_other_visits_maybe_within_the_radius_plus_the_error_and_surely_within_it_minus():
    """A camera walks 1 m/s east from the place, turns and comes back to pass it ``d`` m north:
    another visit when ``d`` is under the radius (5) plus the error (1). Its own visit is the stretch
    surely at the place (under 4 m out); the moments maybe still there on the way out are seconds
    away, and a return between 4 and 6 m is not taken for the own stretch."""

    def walk(d: float) -> list[Candidate]:
        out = [Candidate(float(t), t, (float(t), 0.0, 0.0)) for t in range(40)]
        out += [Candidate(float(t), t, (float(79 - t), d, 0.0)) for t in range(40, 80)]
        return out

    # the own stretch is 0-3 m; 4 and 5 m out on the way the camera is maybe still there (4-5 s)
    assert other_visits(walk(20.0), 5.0, 1.0)[0] == OtherVisits(4.0, 5.0)
    assert other_visits(walk(6.5), 5.0, 1.0)[0] == OtherVisits(4.0, 5.0)
    assert other_visits(walk(5.5), 5.0, 1.0)[0] == OtherVisits(4.0, 79.0)  # back at 77-79 s, 5.5-6 m away
    assert 0 not in other_visits(walk(5.5), 5.0, 0.0)
    assert other_visits(walk(4.5), 5.0, 0.0)[0] == OtherVisits(77.0, 79.0)


# ----------------------------------------------------------------------------- the report
def test_the_report_counts_what_readings_left_unasked():
    from vsi_wild.stages.report import _readings_markdown, readings_summary

    rows = [
        {
            "video_id": "v_front",
            "task_type": "VOC",
            "item": "bench",
            "reason": "total not asked: 6 seen at all, 3 seen clearly",
            "reading": "clearly",
        },
        {
            "video_id": "v_front",
            "task_type": "VOC",
            "item": "cone",
            "reason": "checkpoint 30 s not asked: ...",
            "reading": "clearly",
        },
        {
            "video_id": "v_back",
            "task_type": "VMR",
            "item": "clip0002",
            "reason": "...",
            "reading": "the motion at 41.5 s",
        },
        {"video_id": "v_back", "task_type": "VOC", "item": "x", "reason": "answer balance: ...", "reading": None},
    ]
    summary = readings_summary(rows)
    assert summary["VOC"]["n"] == 2 and summary["VOC"]["by_reading"] == {"clearly": 2}
    assert summary["VMR"]["by_reading"] == {"the motion at 41.5 s": 1} and summary["VOO"]["n"] == 0
    md = "\n".join(_readings_markdown(summary))
    assert "| VOC | 2 | clearly 2 |" in md and "| VOO | 0 | - |" in md
    assert "v_front bench: total not asked: 6 seen at all, 3 seen clearly" in md
    from vsi_wild.stages.report_html import _readings

    page = _readings({"readings": summary})
    assert "<td>VOC</td><td class=n>2</td><td>clearly 2</td>" in page and "exports/skipped.parquet" in page


# a street walked straight down at 1 m/s (OpenCV world axes: the camera at (0, 0, t) looks along +z,
# the front view): balls 1 m across stand 5 m to the right, at these distances along the street,
# none between 90 m and 160 m and none on the left
STREET = [10.0 * i for i in range(1, 10)] + [10.0 * i for i in range(16, 22)]
_F = W / 2  # the focal length of a 90° view


def _street(duration: float = 200.0) -> tuple[VideoInfo, pa.Table, pa.Table, pa.Table]:
    """The video, its POSES, INSTANCES and VISIBILITY as the metadata would have them: an object is
    visible while its box (projected, half of it mask) overlaps the view and it is at most 30 m away."""
    K = [_F, 0.0, (W - 1) / 2, 0.0, _F, (H - 1) / 2, 0.0, 0.0, 1.0]
    n = int(duration * 2) + 1
    poses = [
        {
            **dict(video_id=VID, sample_index=k, time=k / 2, frame=k, fps=2.0, intrinsics=K, valid=True),
            **dict(extrinsics=[1.0, 0, 0, 0, 0, 1.0, 0, 0, 0, 0, 1.0, -k / 2], x=0.0, y=0.0, z=k / 2, backend="test"),
        }
        for k in range(n)
    ]
    inst, vis = [], []
    for iid, z in enumerate(STREET, start=1):
        rows = []
        for k in range(n):
            depth = z - k / 2
            u, half = _F * 5.0 / depth + (W - 1) / 2 if depth > 0 else 0.0, _F * 0.5 / depth if depth > 0 else 0.0
            box = (max(u - half, 0.0), max((H - 1) / 2 - half, 0.0), min(u + half, W), min((H - 1) / 2 + half, H))
            seen = 0 < depth <= 30 and box[0] < box[2]
            rows.append(
                {
                    **dict(video_id=VID, instance_id=iid, concept="ball", sample_index=k, time=k / 2, frame=k),
                    **dict(fps=2.0, state="visible" if seen else "out_of_view", geometric=True),
                    **dict(zip(("x0", "y0", "x1", "y1"), box if seen else (None,) * 4, strict=True)),
                    "area": int((box[2] - box[0]) * (box[3] - box[1]) / 2) if seen else None,
                }
            )
        times = [r["time"] for r in rows if r["state"] == "visible"]
        vis += rows
        inst.append(
            {
                **dict(video_id=VID, concept="ball", instance_id=iid, first_time=times[0], last_time=times[-1]),
                **dict(
                    first_frame=int(times[0] * 2), last_frame=int(times[-1] * 2), fps=2.0, n_observations=len(times)
                ),
                **dict(spans=[{"start": times[0], "end": times[-1]}], x=5.0, y=0.0, z=z, origin="auto"),
                "times_given": False,
            }
        )
    video = VideoInfo(VID, "sample-test", "front", 0.0, 0.0, 90.0, 58.7155, W, H, 2.0, n, duration)
    tables = (schema.table(schema.POSES, poses), schema.table(schema.INSTANCES, inst))
    return video, *tables, schema.table(schema.VISIBILITY, vis)


def test_each_rotated_view_shows_an_object_that_dates_it():
    """Worked out from the street's geometry (the objects as balls, their angular extents), not the
    pipeline's box models and projection; the video saw each from 30 m to 4.5 m away. A view turned left, or
    from the empty stretch (92-128 s), shows nothing: with the check off some question has one; on,
    every view shows an object the video saw only between the frames before and after it, the
    drawn left turns mirrored, and the video keeps its 3 questions."""
    video, poses, instances, visibility = _street()
    seen = {z: (z - 30.0, z - 4.5) for z in STREET}  # from 30 m to 4.5 m away (then its box leaves the view)

    def area(t: float, offset: float, z: float) -> float:
        """Mask pixels of the ball at z (1 m across, half its box) in the view of the frame at t turned
        right by ``offset``: the part of its angular extent inside the view's 90°, through tan."""
        off = math.degrees(math.atan2(5.0, z - t)) - offset
        d = math.hypot(5.0, z - t)
        r = math.degrees(math.asin(0.5 / d))
        lo, hi = max(off - r, -45.0), min(off + r, 45.0)
        if hi <= lo or abs(off) >= 90:
            return 0.0
        wide = _F * (math.tan(math.radians(hi)) - math.tan(math.radians(lo)))
        return wide * _F / (d * math.cos(math.radians(off))) / 2

    # every view shows an object seen only between its neighbours: 50 px by the rule's box models, at
    # least 40 by the balls' own geometry (the two models differ by up to a fifth near the threshold)
    def dated(q) -> bool:
        times = sorted(q.frame_times)
        for t, o in zip(q.frame_times, q.render_offset_deg, strict=True):
            r = times.index(t)
            lo, hi = (times[r - 1] if r else -math.inf), (times[r + 1] if r < 3 else math.inf)
            if not any(area(t, o, z) >= 40 and lo < seen[z][0] and seen[z][1] < hi for z in STREET):
                return False
        return True

    def blind(q) -> bool:  # some view shows nothing
        return any(
            all(area(t, o, z) == 0 for z in STREET) for t, o in zip(q.frame_times, q.render_offset_deg, strict=True)
        )

    params = QAParams(vpo_per_video=3, vpo_min_landmarks=1)

    def rotated(params: QAParams):
        qs, _, skipped = vpo_plan(poses, video, params, PROV, instances, visibility)
        return [q for q in qs if q.subtype == "rotated"], skipped

    off, _ = rotated(params.model_copy(update={"stable_answers": False}))
    on, skipped = rotated(params)
    assert any(blind(q) for q in off) and not all(dated(q) for q in off)
    assert len(on) == 3 and all(dated(q) for q in on)
    assert all(s["reading"] == "what the rotated view shows" for s in skipped if s.get("reading"))
    # drawn left turns are turned right, not redrawn: the same magnitudes
    assert {round(abs(o), 6) for q in on for o in q.render_offset_deg} & {
        round(abs(o), 6) for q in off for o in q.render_offset_deg if o < 0
    }
    # the view at 2 s turned 45° right shows the balls 10, 20 and 30 m down the street (and the one at
    # 40 m, which the view at 40 s shows too): the three tie it to its moment, until the video shows
    # the third again at 150 s, after the next anchor (a look-alike merged into it)
    anchors = [Candidate(t, int(t * 2), (0.0, 0.0, t)) for t in (2.0, 40.0, 80.0, 120.0)]
    content = ViewContent.from_metadata(VideoPoses(poses, video), instances, visibility, video, params)
    assert content is not None and view_problem(content, anchors, 0, [45.0] * 4, 3) is None
    again = [
        {**r, "state": "visible", "x0": 600.0, "y0": 150.0, "x1": 640.0, "y1": 210.0, "area": 1200}
        if r["instance_id"] == 3 and r["time"] == 150.0
        else r
        for r in visibility.to_pylist()
    ]
    later = [{**r, "last_time": 150.0} if r["instance_id"] == 3 else r for r in instances.to_pylist()]
    content = ViewContent.from_metadata(
        VideoPoses(poses, video),
        schema.table(schema.INSTANCES, later),
        schema.table(schema.VISIBILITY, again),
        video,
        params,
    )
    assert content is not None
    assert "ball #3" in (view_problem(content, anchors, 0, [45.0] * 4, 3) or "")
    assert view_problem(content, anchors, 0, [45.0] * 4, 2) is None
    # without positions that explain the sightings the check cannot tell, and changes nothing
    unknown = visibility.set_column(
        visibility.schema.get_field_index("geometric"), "geometric", pa.array([False] * visibility.num_rows)
    )
    assert (
        vpo_plan(poses, video, params, PROV, instances, unknown)[0]
        == vpo_plan(poses, video, params.model_copy(update={"stable_answers": False}), PROV, instances, unknown)[0]
    )


def test_anchor_sets_are_searched_for_where_random_restarts_miss_them():
    """Candidates at 0, 10, 20, 30, 45, 60, 90 and 95 s, anchors 30 s apart: the only sets are
    0-30-60-90 and 0-30-60-95 (worked out by hand). One random restart misses them; the search after
    it finds both, for two questions (the second reusing anchors, as there is no other way)."""
    times = (0.0, 10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 95.0)
    cands = [Candidate(t, int(t * 2), None) for t in times]
    params = QAParams(vpo_attempts=1, vpo_min_gap_s=30.0)
    sets = choose_anchor_sets(cands, 3, params, _video(duration=100.0, fps=2.0))
    assert sorted(tuple(c.time for c in s) for s in sets) == [(0.0, 30.0, 60.0, 90.0), (0.0, 30.0, 60.0, 95.0)]


def _walked_again(overlap_end: float) -> tuple[list[Candidate], dict[int, OtherVisits]]:
    """A 150 s walk's 2 FPS candidates (1.5-148.5 s, no poses) whose moments up to ``overlap_end`` are
    walked again 119 s later, and each of those frames' other visit."""
    cands = [Candidate(k / 2, k, None) for k in range(3, 298)]
    early = {c.frame: OtherVisits(c.time + 119.0, c.time + 119.0) for c in cands if c.time <= overlap_end}
    late = {c.frame: OtherVisits(c.time - 119.0, c.time - 119.0) for c in cands if 1.5 <= c.time - 119.0 <= overlap_end}
    return cands, early | late


def test_the_anchor_search_finds_the_one_set_a_walk_walked_again_leaves():
    """The walk's first 28 s (1.5-29.5 s) walked again 119 s later (120.5-148.5 s), anchors 30 s apart:
    no other anchor may lie between a frame of either end and its other visit, which leaves room for
    one anchor at each end and none between them, so every anchor lies in 30-120 s, exactly 90 s, and
    the only set is 30-60-90-120 (worked out by hand). The random restarts miss it; the search finds
    it for the first question, and no second set exists, whatever the seed."""
    cands, visits = _walked_again(29.5)
    for seed in range(3):
        params = QAParams(seed=seed, vpo_min_gap_s=30.0)
        sets = choose_anchor_sets(cands, 3, params, _video(duration=150.0, fps=2.0), visits)
        assert [tuple(c.time for c in s) for s in sets] == [(30.0, 60.0, 90.0, 120.0)]


def test_the_anchor_search_checks_each_pair_once():
    """Where no set exists (the walk's moments up to 30 s walked again: the stretch no other visit
    reaches is 30.5-120 s, under the 90 s four anchors 30 s apart need), the search tries every set
    and checks each pair of candidates once: n(n-1)/2 checks at most, within the default budget."""
    cands, visits = _walked_again(30.0)
    checked: list[tuple[int, int]] = []

    def fits(c: Candidate, p: Candidate) -> bool:
        checked.append((c.frame, p.frame))
        return compatible(c, p, 30.0, 0.0) and apart_visits(c, p, visits)

    assert search_set(cands, fits, lambda s: True, StableRng(0, VID, "VPO", 0)) is None
    assert len(checked) == len(set(checked)) <= len(cands) * (len(cands) - 1) // 2


# a loop walked once and then its first 30 s again (OpenCV world axes, y down, the camera 1.6 m above
# the ground): a circle of 16 m radius at 1 m/s from the origin, heading +z and turning right; posts
# stand 1 m inside it every 2 m of its first 46 m. The estimated track drifts (0.08, 0, 0.04) m/s:
# it ends the first lap 8.9 m from the start, beyond the place radius, so the track alone does not
# see the second lap come back.
LOOP_R, LOOP_S, LOOP_H, LOOP_DRIFT = 16.0, 130.0, 1.6, (0.08, 0.0, 0.04)
LOOP_POSTS = [3.0 + 2.0 * j for j in range(22)]  # arc length (m) from the start
LOOP_PLACE_FRAC = 0.14  # qa.vpo_min_position_frac: a place radius of 5.0 m on the drifting loop, 36 m across


def _loop_camera(t: float) -> tuple[np.ndarray, np.ndarray]:
    """The true camera centre and its world -> camera rotation (rows: right, down, forward) at t."""
    a = t / LOOP_R
    centre = np.array([LOOP_R - LOOP_R * math.cos(a), 0.0, LOOP_R * math.sin(a)])
    R = np.array([[math.cos(a), 0.0, -math.sin(a)], [0.0, 1.0, 0.0], [math.sin(a), 0.0, math.cos(a)]])
    return centre, R


def _loop_post(s: float) -> np.ndarray:
    a = s / LOOP_R
    return np.array([LOOP_R - (LOOP_R - 1.0) * math.cos(a), LOOP_H, (LOOP_R - 1.0) * math.sin(a)])


def _loop_foot(t: float, s: float) -> tuple[float, float] | None:
    """The pixel where post ``s`` meets the ground in the front view at t, when it is in view (its
    foot inside the image, at most 30 m away); else None."""
    centre, R = _loop_camera(t)
    x, y, z = R @ (_loop_post(s) - centre)
    if z <= 0.5 or math.hypot(x, z) > 30.0:
        return None
    u, v = _F * x / z + (W - 1) / 2, _F * y / z + (H - 1) / 2
    return (u, v) if 10.0 <= u <= W - 10.0 and v < H - 3.0 else None


def _loop(far_on_second_lap: bool = False) -> tuple[VideoInfo, pa.Table, pa.Table, pa.Table, float]:
    """The video, its POSES (the drifting track), INSTANCES, VISIBILITY (from the true camera) and
    the place radius (``LOOP_PLACE_FRAC`` of the track's extent over the anchor candidates).
    ``far_on_second_lap``: the detector misses every post the second lap passes within the radius
    (it sees them only farther away)."""
    K = [_F, 0.0, (W - 1) / 2, 0.0, _F, (H - 1) / 2, 0.0, 0.0, 1.0]
    n = int(LOOP_S * 2) + 1
    poses = []
    for k in range(n):
        t = k / 2
        centre, R = _loop_camera(t)
        c = centre + t * np.array(LOOP_DRIFT)
        tr = -R @ c
        extr = [*R[0], tr[0], *R[1], tr[1], *R[2], tr[2]]
        poses.append(
            {
                **dict(video_id=VID, sample_index=k, time=t, frame=k, fps=2.0, intrinsics=K, valid=True),
                **dict(
                    extrinsics=[float(e) for e in extr], x=float(c[0]), y=float(c[1]), z=float(c[2]), backend="test"
                ),
            }
        )
    track = np.array([[p["x"], p["z"]] for p in poses if 1.0 <= p["time"] <= LOOP_S - 1.0])
    radius = LOOP_PLACE_FRAC * float(np.linalg.norm(track[:, None] - track[None], axis=2).max())  # its diameter
    inst, vis = [], []
    for iid, s in enumerate(LOOP_POSTS, start=1):
        times = []
        for k in range(n):
            t = k / 2
            foot = _loop_foot(t, s)
            if foot is not None and far_on_second_lap and t > 2 * math.pi * LOOP_R:
                centre, _ = _loop_camera(t)
                if math.hypot(*(_loop_post(s) - centre)[[0, 2]]) < radius:
                    foot = None
            box = (foot[0] - 10.0, foot[1] - 40.0, foot[0] + 10.0, foot[1]) if foot else (None,) * 4
            vis.append(
                {
                    **dict(video_id=VID, instance_id=iid, concept="post", sample_index=k, time=t, frame=k, fps=2.0),
                    **dict(state="visible" if foot else "out_of_view", geometric=True),
                    **dict(zip(("x0", "y0", "x1", "y1"), box, strict=True)),
                    "area": 400 if foot else None,
                }
            )
            times += [t] if foot else []
        p = _loop_post(s)
        inst.append(
            {
                **dict(video_id=VID, concept="post", instance_id=iid, first_time=times[0], last_time=times[-1]),
                **dict(first_frame=int(times[0] * 2), last_frame=int(times[-1] * 2), fps=2.0),
                **dict(n_observations=len(times), spans=[{"start": times[0], "end": times[-1]}]),
                **dict(x=float(p[0]), y=float(p[1]), z=float(p[2]), origin="auto", times_given=False),
            }
        )
    video = VideoInfo(VID, "sample-test", "front", 0.0, 0.0, 90.0, 58.7155, W, H, 2.0, n, LOOP_S)
    tables = (schema.table(schema.POSES, poses), schema.table(schema.INSTANCES, inst))
    return video, *tables, schema.table(schema.VISIBILITY, vis), radius


def _loop_near_posts(t: float, radius: float) -> set[float]:
    centre, _ = _loop_camera(t)
    return {
        s for s in LOOP_POSTS if _loop_foot(t, s) is not None and math.hypot(*(_loop_post(s) - centre)[[0, 2]]) < radius
    }


def _loop_revisits(a: float, radius: float) -> list[float]:
    """Worked out from the loop's geometry, not the pipeline's back-projection: the moments the
    camera stands at the place of moment ``a`` again (the true cameras closer than ``radius``,
    outside the unbroken stretch of such moments around ``a``) with a post within ``radius`` of the
    camera there and at ``a``, its foot in view at both."""
    moments = [k / 2 for k in range(int(LOOP_S * 2) + 1)]
    here = _loop_camera(a)[0]
    close = [float(np.linalg.norm(_loop_camera(t)[0] - here)) < radius for t in moments]
    i = moments.index(a)
    lo, hi = i, i
    while lo > 0 and close[lo - 1]:
        lo -= 1
    while hi < len(moments) - 1 and close[hi + 1]:
        hi += 1
    posts = _loop_near_posts(a, radius)
    return [t for j, t in enumerate(moments) if close[j] and not lo <= j <= hi and posts & _loop_near_posts(t, radius)]


def _revisits_a_post_shows(times: list[float], radius: float) -> bool:
    """Some anchor's place is visited again on the other side of another anchor (``_loop_revisits``)."""
    return any((a < b) != (t < b) for a in times for t in _loop_revisits(a, radius) for b in times if b != a)


def test_object_visits_are_the_places_a_post_shows_twice():
    """Every frame's other visits by the posts, against the loop's geometry: the moments its true
    camera comes back within the radius with a post near both (the drifting track's positions
    play no part); the frames of the first 30 s are visited again on the second lap, which the
    track puts beyond the radius."""
    video, poses, _, visibility, radius = _loop()
    track = track_from_rows(poses.to_pylist())
    found = object_visits(track, sightings_from_metadata(visibility, video), LOOP_H, radius)
    again = {k: _loop_revisits(k / 2, radius) for k in range(int(LOOP_S * 2) + 1)}
    expected = {k: (min(ts), max(ts)) for k, ts in again.items() if ts}
    assert {f: (v.first, v.last) for f, v in found.items()} == expected
    assert all(k / 2 < 30 or k / 2 > 100 for k in expected) and len([k for k in expected if k < 60]) > 40
    assert all(v.first_by and v.first_by.startswith("post #") for v in found.values())
    drifted = {p["sample_index"]: np.array([p["x"], p["z"]]) for p in poses.to_pylist()}
    assert all(np.linalg.norm(drifted[k] - drifted[int(t * 2)]) > radius for k in expected if k < 60 for t in again[k])
    assert object_visits(track, sightings_from_metadata(visibility, video), LOOP_H, 0.0) == {}


def test_vpo_revisit_the_track_misses_is_seen_by_the_objects():
    """The second lap comes back to the places of the first 30 s; the drifting track puts them 9 m
    and more away. Without the objects (no camera height: the track alone), some question holds
    an anchor whose place a post shows visited again across another anchor; with them, none does,
    and the sets dropped name the post. When the second lap sees the posts only from beyond the
    radius, the objects show no revisit: the questions are those of the track alone."""
    video, poses, instances, visibility, radius = _loop()
    # anchors 20 s apart: sets fit between the first lap's revisited 30 s and the second lap (at 30 s,
    # every set of a 130 s video would hold a revisited anchor, and none would be asked)
    params = QAParams(vpo_per_video=3, vpo_min_gap_s=20.0, vpo_min_position_frac=LOOP_PLACE_FRAC)

    def rotated(height: float | None, vis: pa.Table = visibility):
        qs, _, skipped = vpo_plan(poses, video, params, PROV, instances, vis, camera_height=height)
        return [q for q in qs if q.subtype == "rotated"], skipped

    by_track, _ = rotated(None)
    assert any(_revisits_a_post_shows(q.frame_times, radius) for q in by_track)
    by_objects, skipped = rotated(LOOP_H)
    assert len(by_objects) == 3
    assert not any(_revisits_a_post_shows(q.frame_times, radius) for q in by_objects)
    visit = [s for s in skipped if s.get("reading") == "another visit of the place"]
    assert visit and all("(post #" in s["reason"] and "stands at the place in both" in s["reason"] for s in visit)

    far = _loop(far_on_second_lap=True)[3]
    assert rotated(LOOP_H, far)[0] == rotated(None, far)[0]


def _side_by_side(
    centres: list[list[float]], times: list[float], truth: tuple[float, float], error: float = 0.0
) -> dict:
    """``object_visits`` (radius 5 m) of cameras facing +z at ``centres`` (the track) and ``times``,
    the first and the last of them seeing a post midway between their true places ``truth`` (x, on
    the ground line z = 0) 3.5 m ahead."""
    n = len(centres)
    track = Track(
        sample_indices=np.arange(n),
        times=np.array(times),
        frames=np.arange(n) * 2,
        fps=2.0,
        R=np.stack([np.eye(3)] * n),
        C=np.array(centres, dtype=np.float64),
        K=np.stack([np.array([[_F, 0.0, (W - 1) / 2], [0.0, _F, (H - 1) / 2], [0.0, 0.0, 1.0]])] * n),
        valid=np.ones(n, dtype=bool),
    )
    post = (truth[0] + truth[1]) / 2
    seen = [
        GroundSighting("post #1", k, _F * (post - x) / 3.5 + (W - 1) / 2, _F * LOOP_H / 3.5 + (H - 1) / 2)
        for k, x in ((0, truth[0]), (n - 1, truth[1]))
    ]
    return object_visits(track, seen, LOOP_H, 5.0, error=error)


@pytest.mark.parametrize(("apart", "again"), [(4.5, True), (5.5, False)])
def test_object_visits_measure_the_cameras_apart_by_the_object(apart: float, again: bool):
    """Two cameras facing +z, ``apart`` m side by side, 100 s apart (a sample between them 50 m
    away), see a post midway between them 3.5 m ahead (4.45 m from each at most, within the 5 m
    radius): the post puts them ``apart`` m from each other, one place when that is under the radius."""
    found = _side_by_side([[0.0, 0.0, 0.0], [50.0, 0.0, 0.0], [apart, 0.0, 0.0]], [0.0, 50.0, 100.0], (0.0, apart))
    expected = {0: OtherVisits(100.0, 100.0, "post #1", "post #1"), 4: OtherVisits(0.0, 0.0, "post #1", "post #1")}
    assert found == (expected if again else {})


def test_object_visits_within_the_radius_plus_the_error():
    """Cameras 5.5 m apart by the post are another visit when the metadata may be 1 m off."""
    found = _side_by_side(
        [[0.0, 0.0, 0.0], [50.0, 0.0, 0.0], [5.5, 0.0, 0.0]], [0.0, 50.0, 100.0], (0.0, 5.5), error=1.0
    )
    assert found == {0: OtherVisits(100.0, 100.0, "post #1", "post #1"), 4: OtherVisits(0.0, 0.0, "post #1", "post #1")}


def test_object_visits_one_visit_where_the_track_and_the_object_differ_near_the_radius():
    """A camera steps 4.5 m sideways in a second; the track makes it 5.2 m, beyond the radius. The
    post seen at both ends keeps the camera at its place all along: one visit, not two."""
    assert _side_by_side([[0.0, 0.0, 0.0], [2.6, 0.0, 0.0], [5.2, 0.0, 0.0]], [0.0, 0.5, 1.0], (0.0, 4.5)) == {}


def test_the_place_radius_does_not_turn_with_the_worlds_axes():
    """The extent is the track's diameter (all pairs, worked out here pair by pair), the same for a
    walk turned by any angle; a bounding box's diagonal would grow 1.4 times for a square turned 45°.
    Over 64 positions the hull's vertices are searched; collinear and single positions work too."""
    rng = np.random.default_rng(3)
    walk = np.cumsum(rng.normal(size=(400, 2)), axis=0)
    brute = max(math.dist(a, b) for a, b in itertools.combinations(walk.tolist(), 2))
    for angle in (0.0, 0.3, 1.1, 2.9):
        c, s = math.cos(angle), math.sin(angle)
        turned = walk @ np.array([[c, -s], [s, c]])
        cands = [Candidate(float(t), t, (float(x), 0.0, float(z))) for t, (x, z) in enumerate(turned)]
        assert trajectory_extent(cands) == pytest.approx(brute, rel=1e-9)
    square = [Candidate(float(t), t, p) for t, p in enumerate([(0, 0, 0), (10, 0, 0), (10, 0, 10), (0, 0, 10)])]
    assert trajectory_extent(square) == pytest.approx(math.sqrt(200))
    line = [Candidate(float(t), t, (3.0 * t, 0.0, 4.0 * t)) for t in range(100)]
    assert trajectory_extent(line) == pytest.approx(5.0 * 99)
    assert trajectory_extent(line[:1]) == 0.0
    assert trajectory_extent([Candidate(float(t), t, (1.0, 0.0, 1.0)) for t in range(80)]) == 0.0


def test_a_visit_error_as_large_as_the_place_radius_is_refused():
    with pytest.raises(ValueError, match="vpo_visit_error_frac .0.1. must be below vpo_min_position_frac"):
        QAParams(vpo_visit_error_frac=0.1)
    QAParams(vpo_visit_error_frac=0.1, vpo_min_position_frac=0.0)  # no place condition: nothing to be surely in
