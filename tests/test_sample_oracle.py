"""The default sample is an oracle for every QA rule (issue 14, part 1).

From the sample's truth tables (truth_objects, truth_visibility, truth_poses) and the config alone,
each test derives what a rule must produce on the sample built by `vsi-wild run` on
configs/sample.yaml (the session's ``sample_root``), checks that the sample really exercises the
rule, and checks that the exported questions agree:
- VOC: totals per (view, category) spread over 1..8, no value holding more than a third of them;
  streaming counts that rise between checkpoints in most (concept, video) pairs;
- VOO: both subtypes asked, in balance (every concept's last appearance is not at the loop's end);
- VMR: cardinal and diagonal option sets, and a motion clip without steady motion (`none`);
- VPO: anchor pairs far apart in time at the same place (the plaza revisit) exist and are refused.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import REPO
from sample_oracle import VIEW_YAW, instances_seen, reviewed_voc, stable_voo_sets

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def oracle(sample_root):
    from vsi_wild.config import load_config
    from vsi_wild.store import Store, UnitRef
    from vsi_wild.tasks.sample import load_truth

    root, _ = sample_root
    store = Store(root)
    (source,) = store.registry()["source_id"].to_pylist()

    def read(stage: str, unit: str, name: str):
        return store.read_table(UnitRef(stage, unit, store.read_status(stage, unit)["key"]), name)

    rows = [r for r in pq.read_table(root / "exports" / "qa.parquet").to_pylist() if r["split"] != "voc_repeat"]
    return load_truth(store, source), load_config(REPO / "configs" / "sample.yaml"), rows, read, source


def _rows(rows, task: str, split: str = "release") -> list[dict]:
    return [r for r in rows if r["task_type"] == task and r["split"] == split]


def _checkpoints(config) -> list[float]:
    duration, every = config.sample.duration_s, config.qa.checkpoint_s
    return [k * every for k in range(1, math.ceil(duration / every)) if k * every < duration - 1e-9] + [duration]


def _truth_counts(truth, config) -> dict[tuple[str, str], list[int]]:
    """(view, kept category) -> the number of its truth instances first seen by each checkpoint."""
    cps = _checkpoints(config)
    return {
        (view, c): [sum(t <= cp + 1e-9 for t in first.values()) for cp in cps]
        for view in VIEW_YAW
        for c, first in instances_seen(truth, view, config).items()
    }


def test_voc_totals_spread_over_one_to_eight(oracle, sample_root):
    """A VOC total is the number of truth instances of the category seen in that view video: on the
    sample they spread over 1..8, no value holding more than a third (a constant guess scores little).
    One question per (view, kept concept), but where a reading of "seen" may change the total by
    the metadata (exports/skipped.parquet, with the reading)."""
    truth, config, rows, _, _ = oracle
    totals = [counts[-1] for counts in _truth_counts(truth, config).values()]
    skipped = pq.read_table(sample_root[0] / "exports" / "skipped.parquet").to_pylist()
    unstable = [s for s in skipped if s["task_type"] == "VOC" and s["reading"] and s["reason"].startswith("total")]
    assert len(_rows(rows, "VOC")) + len(unstable) == len(totals)
    hist = Counter(totals)
    assert min(hist) == 1 and max(hist) >= 8, sorted(hist.items())
    assert max(hist.values()) <= len(totals) / 3, sorted(hist.items())
    assert len(hist) >= 6, sorted(hist.items())


def test_voc_streaming_counts_rise(oracle):
    """Checkpoints every qa.checkpoint_s and at the end; the count at each = instances first seen by
    then. In most (concept, video) pairs an earlier checkpoint counts fewer than the end, and in a
    quarter of them a checkpoint counts some but not all (the walk finds them place after place)."""
    truth, config, _, _, _ = oracle
    streams = list(_truth_counts(truth, config).values())
    rising = sum(counts[0] < counts[-1] for counts in streams)
    partial = sum(any(0 < n < counts[-1] for n in counts[:-1]) for counts in streams)
    assert rising > len(streams) / 2, (rising, len(streams))
    assert partial >= len(streams) / 4, (partial, len(streams))


def test_voc_answers_agree_with_the_truth_unless_provisional_and_after_review(oracle):
    """What reconciliation gets right on the default sample (issue 30's target, every answer right
    after an oracle review, is missed: docs/metadata.md). Every VOC answer (each checkpoint's and
    the total) that is not provisional equals the truth's (a look-alike the layout test could not
    link back to the plaza's first visit has no review item, but its count is likely enough wrong
    to be provisional); once an oracle reviewer has resolved the review items, at least 95 % do
    (95 of 96 today), and every wrong one counts too many, by at most two (false splits, not
    merges)."""
    truth, config, rows, read, source = oracle
    want = _truth_counts(truth, config)
    first = {(view, c): seen for view in VIEW_YAW for c, seen in instances_seen(truth, view, config).items()}
    stream = [r for r in _rows(rows, "VOC", "voc_stream") if not r["provisional"]]
    got = {
        (r["view"], r["concepts"][0], t): int(a)
        for r in stream
        for t, a in zip(r["query_times"], r["answers"], strict=True)
    }
    expect = {(v, c, t): sum(s <= t + 1e-9 for s in first[(v, c)].values()) for v, c, t in got}
    wrong = {k: (expect[k], n) for k, n in got.items() if expect[k] != n}
    assert got and not wrong, wrong
    right = total = 0
    for view in VIEW_YAW:
        _, reviewed = reviewed_voc(read, source, view, config, truth)
        for (v, c), counts in want.items():
            if v == view:
                got = reviewed[c]
                right += sum(x == y for x, y in zip(got, counts, strict=True))
                total += len(counts)
                assert all(0 <= x - y <= 2 for x, y in zip(got, counts, strict=True)), (view, c, got, counts)
    assert right >= 0.95 * total, (right, total)


def test_voo_asks_first_and_last_in_balance(oracle):
    """Per view and subtype as many questions as the truth allows (4-concept sets whose first or
    last appearances keep their order, pairwise >= qa.voo_min_gap_s apart, under every reading of
    qa.voo_readings, up to voo_first / voo_last): last appearances are spread too, so both subtypes
    are asked about as often (14 first, 16 last: the glimpse reading reorders a first-appearance set)."""
    truth, config, rows, _, _ = oracle
    qa = config.qa
    voo = _rows(rows, "VOO")
    totals = {}
    for which, count in (("first", qa.voo_first), ("last", qa.voo_last)):
        expected = 0
        for view in VIEW_YAW:
            times, valid = stable_voo_sets(truth, view, config, which)
            asked = [frozenset(r["concepts"]) for r in voo if r["view"] == view and r["subtype"] == which]
            assert set(asked) <= valid, (view, which)
            for r in voo:
                if r["view"] == view and r["subtype"] == which:
                    assert r["answer_text"] == " → ".join(sorted(r["concepts"], key=times.get)), r["doc_id"]
            expected += min(count, len(valid))
        totals[which] = expected
        assert sum(r["subtype"] == which for r in voo) == expected, which
    assert min(totals.values()) >= 0.8 * max(totals.values()) > 0, totals


def _steady_at(poses: dict[str, np.ndarray], t: float, half_s: float) -> bool:
    """The camera translates (>= 0.3 m/s) at a fixed heading in one direction relative to it
    throughout [t - half_s, t + half_s] (frame to frame)."""
    sel = (poses["time"] >= t - half_s - 1e-9) & (poses["time"] <= t + half_s + 1e-9)
    x, y, yaw, tt = (poses[k][sel] for k in ("x", "y", "yaw_deg", "time"))
    if tt.size < 3 or tt[0] > t - half_s + 0.2 or tt[-1] < t + half_s - 0.2:
        return False
    dx, dy, dt = np.diff(x), np.diff(y), np.diff(tt)
    rel = (np.degrees(np.arctan2(dx, dy)) - yaw[:-1] + 180.0) % 360.0 - 180.0
    spread = np.abs((rel - rel[0] + 180.0) % 360.0 - 180.0)
    turning = np.abs((np.diff(yaw) + 180.0) % 360.0 - 180.0)
    return bool((np.hypot(dx, dy) / dt >= 0.3).all() and spread.max() < 5.0 and turning.max() < 0.5)


def test_vmr_has_both_option_sets_and_a_clip_without_motion(oracle):
    """A motion clip (metadata.motion_clip_seconds) none of whose 2 FPS times is the middle of a
    steady move of +- metadata.stability_window_s has no pivot: state `none`, no VMR question, in
    every view. The other clips ask about cardinal and diagonal directions."""
    truth, config, rows, read, source = oracle
    poses = {k: np.asarray(v) for k, v in truth["poses"].to_pydict().items() if k in ("time", "x", "y", "yaw_deg")}
    clip_s, half = config.metadata.motion_clip_seconds, config.metadata.stability_window_s
    n_clips = math.ceil(config.sample.duration_s / clip_s - 1e-9)
    times = np.arange(0.0, config.sample.duration_s, 0.5)
    still = {
        c
        for c in range(n_clips)
        if not any(_steady_at(poses, t, half) for t in times if c * clip_s <= t < (c + 1) * clip_s)
    }
    assert still and len(still) < n_clips / 2, still
    vmr = _rows(rows, "VMR")
    assert {r["subtype"] for r in vmr} == {"cardinal", "diagonal"}
    for view in VIEW_YAW:
        motion = {m["clip_index"]: m for m in read("metadata", f"{source}_{view}", "motion.parquet").to_pylist()}
        asked = {int(r["frame_times"][0] // clip_s) for r in vmr if r["view"] == view}  # the pivot's clip
        assert all(motion[c]["state"] == "none" for c in still), (view, {c: motion[c]["reason"] for c in still})
        assert not asked & still, view
        assert len(asked) >= (n_clips - len(still)) / 2, (view, asked)


def _revisits(oracle):
    """Per view: the VPO candidates (from the pipeline's poses), and a test of whether two frames are
    >= qa.vpo_min_gap_s apart in time and clearly at the same place by the truth (closer than half
    of qa.vpo_min_position_frac of the truth trajectory's extent: the pose estimate is not the truth)."""
    from vsi_wild.stages.qa.common import VideoInfo
    from vsi_wild.stages.qa.vpo import VideoPoses, candidates

    truth, config, _, read, source = oracle
    qa = config.qa
    at_frame = {p["frame"]: (p["x"], p["y"]) for p in truth["poses"].to_pylist()}
    est_poses = read("pose", source, "poses.parquet")
    views = {v["view"]: v for v in read("project", source, "views.parquet").to_pylist()}
    for view in VIEW_YAW:
        video = VideoInfo.from_row(views[view])
        cands = candidates(VideoPoses(est_poses, video), video, qa)
        xy = np.array([at_frame[c.frame] for c in cands])
        near = qa.vpo_min_position_frac * float(np.linalg.norm(xy[:, None] - xy[None], axis=2).max()) / 2

        def revisit(fa: int, fb: int, video=video, near=near) -> bool:
            return (
                abs(video.time_of(fa) - video.time_of(fb)) >= qa.vpo_min_gap_s
                and math.dist(at_frame[fa], at_frame[fb]) < near
            )

        yield view, video, cands, revisit


def test_vpo_selection_meets_the_revisit(oracle):
    """The loop ends where it began: anchor candidates far apart in time at the same place exist,
    and the rule's own selection without the place condition (qa.vpo_min_position_frac = 0) asks
    such a pair: the condition is what must keep them apart."""
    from vsi_wild.stages.qa.vpo import choose_anchor_sets

    qa = oracle[1].qa
    loose = qa.model_copy(update={"vpo_min_position_frac": 0.0})
    asked_without_rule = 0
    for _, video, cands, revisit in _revisits(oracle):
        assert any(revisit(a.frame, b.frame) for a in cands for b in cands), video.video_id
        for s in choose_anchor_sets(cands, qa.vpo_per_video, loose, video):
            asked_without_rule += any(revisit(a.frame, b.frame) for i, a in enumerate(s) for b in s[i + 1 :])
    assert asked_without_rule > 0


def test_vpo_exports_no_anchor_pair_at_the_same_place(oracle):
    """Measured on the ground plane (stages/qa/vpo.ground_positions): in 3D, the CPU pose backend's
    height drift (~2 m over the loop) let a pair 2.1 m apart in the plaza (t = 1.5 s and 117 s,
    back view) through."""
    vpo = [r for r in oracle[2] if r["task_type"] == "VPO"]
    assert vpo
    for view, _, _, revisit in _revisits(oracle):
        for r in vpo:
            if r["view"] == view:
                f = r["frame_indices"]
                assert not any(revisit(f[i], f[j]) for i in range(4) for j in range(i + 1, 4)), r["doc_id"]
