"""The embedded sample: every answer equals one derived here from the generator's truth tables
(TRUTH_VISIBILITY, TRUTH_POSES), never through the QA code.

Two levels:
- ``qa_on_truth``: the real sample (generator at a small resolution), its metadata taken from the
  truth as a perfect metadata stage would give it, the real QA stage functions (VPO images
  rendered from the sample's panorama video) and the export;
- ``built``: the real DAG (``vsi-wild run`` on ``configs/sample.yaml``, the default sample at its
  640x360 views, groundtruth detect/segment, twoview poses, 30 s clips reconciled), the exports
  checked the same way, plus: reconciled counts per view and category equal the truth's, and VOO
  asks every valid concept set it can. An instance counts as seen from its first mask of at least
  ``segment.min_area`` pixels (the segment stage drops smaller ones, as a segmenter misses a few
  pixels at the horizon). Several minutes: it renders and projects the sample.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import REPO
from qa_world import LABEL_DIRS as DIRS
from sample_oracle import (
    VIEW_YAW,
    appearance_times,
    kept,
    min_pixels,
    reading_pixels,
    reviewed_voc,
    stable_voo_sets,
    visible,
)

pytestmark = pytest.mark.slow


# ------------------------------------------------------------------ QA on the sample's truth
SMALL = dict(duration_s=120.0, width=128, fps=4.0, truth_view_width=160, truth_view_height=90)
VIEW_SIZE = (128, 72)  # the views' width and height (pixels) as the QA stage is told them


def _oracle_metadata(truth, params, view: str, clip_s: float):
    """What a perfect metadata stage derives from the truth: instances, 2 FPS poses, motion."""
    from qa_world import camera_extrinsics

    from vsi_wild import schema
    from vsi_wild.stages.geometry import view_intrinsics
    from vsi_wild.stages.sample import truth_samples

    vid = f"{params.source_id}_{view}"
    vis = [v for v in truth["visibility"].to_pylist() if v["view"] == view]
    inst: dict[int, list] = {}
    for v in vis:
        inst.setdefault(v["instance_id"], []).append(v)
    instances = []
    for iid, vs in sorted(inst.items()):
        vs.sort(key=lambda v: v["time"])
        instances.append(
            {
                "video_id": vid,
                "concept": vs[0]["category"],
                "instance_id": iid,
                "first_time": vs[0]["time"],
                "last_time": vs[-1]["time"],
                "first_frame": vs[0]["frame"],
                "last_frame": vs[-1]["frame"],
                "fps": params.fps,
                "n_observations": len(vs),
                "spans": [{"start": vs[0]["time"], "end": vs[-1]["time"]}],
                "x": None,
                "y": None,
                "z": None,
                "origin": "auto",
                "times_given": False,
            }
        )
    frames = {p["frame"]: p for p in truth["poses"].to_pylist()}
    # each view's camera: level (the generator's pitch and roll are 0), at the truth's pose, facing its yaw
    # turned by the view's; K of the views' VIEW_SIZE at 90 degrees
    assert all(p["pitch_deg"] == 0.0 and p["roll_deg"] == 0.0 for p in frames.values())
    K = view_intrinsics(*VIEW_SIZE, 90.0).ravel().tolist()
    samples = truth_samples(params)
    poses = [
        {
            "video_id": vid,
            "sample_index": k,
            "time": t,
            "frame": f,
            "fps": params.fps,
            "extrinsics": camera_extrinsics(
                frames[f]["x"], frames[f]["y"], frames[f]["z"], frames[f]["yaw_deg"] + VIEW_YAW[view]
            ),
            "intrinsics": K,
            "x": frames[f]["x"],
            "y": frames[f]["y"],
            "z": frames[f]["z"],
            "valid": True,
            "backend": "truth",
        }
        for k, t, f in samples
    ]
    motion = []
    n_clips = int(math.ceil(params.duration_s / clip_s))
    for c in range(n_clips):
        lo, hi = c * clip_s, min(params.duration_s, (c + 1) * clip_s)
        best = None
        for _k, t, f in samples:  # steadiest moving moment: same direction over +- 2 s, away from the edges
            if not (lo + 2 <= t <= hi - 2):
                continue
            rel = [_rel_angle(frames, samples, t + d, view) for d in (-1.5, -0.5, 0.5, 1.5)]
            if any(r is None for r in rel) or max(abs((r - rel[0] + 180) % 360 - 180) for r in rel) > 1.0:
                continue
            margin = min(t - lo, hi - t)
            if best is None or margin > best[0]:
                best = (margin, t, f, _rel_angle(frames, samples, t, view))
        base = {
            "video_id": vid,
            "clip_index": c,
            "clip_start": lo,
            "clip_end": hi,
            "fps": params.fps,
            "speed": None,
            "stability": None,
            "views_consistent": None,
            "reason": None,
            "origin": "auto",
        }
        if best is None:
            motion.append({**base, "state": "none", "pivot_time": None, "pivot_frame": None, "angle_deg": None})
        else:
            _, t, f, ang = best
            motion.append(
                {**base, "state": "ok", "pivot_time": t, "pivot_frame": f, "angle_deg": (ang + 180.0) % 360.0 - 180.0}
            )
    return (
        schema.table(schema.INSTANCES, instances),
        schema.table(schema.POSES, poses),
        schema.table(schema.MOTION, motion),
    )


def _rel_angle(frames, samples, t, view, half=0.5):
    """Motion direction around t relative to the view's heading, from positions +- half."""
    fa = min(samples, key=lambda s: abs(s[1] - (t - half)))[2]
    fb = min(samples, key=lambda s: abs(s[1] - (t + half)))[2]
    a, b = frames[fa], frames[fb]
    dx, dy = b["x"] - a["x"], b["y"] - a["y"]
    if math.hypot(dx, dy) < 0.2:
        return None
    heading = frames[min(samples, key=lambda s: abs(s[1] - t))[2]]["yaw_deg"] + VIEW_YAW[view]
    return math.degrees(math.atan2(dx, dy)) - heading


@pytest.fixture(scope="module")
def qa_on_truth(tmp_path_factory):
    import pyarrow as pa

    from vsi_wild.stages import export as ex
    from vsi_wild.stages.faces import FaceParams, image_blurrer, make_detector
    from vsi_wild.stages.qa import QAParams
    from vsi_wild.stages.qa.build import build_video
    from vsi_wild.stages.qa.common import Provenance, VideoInfo, questions_table
    from vsi_wild.stages.sample import SampleParams, generate_sample

    tmp = tmp_path_factory.mktemp("sample-qa")
    params = SampleParams(**SMALL)
    video_path = tmp / "sample.mp4"
    t = generate_sample(params, video_path)
    truth = {"poses": t.poses, "visibility": t.visibility}
    qa = QAParams(clip_seconds=30.0, image_width=96, image_height=54, image_format="png")
    blur = image_blurrer(make_detector(FaceParams()), FaceParams())
    tables, images = [], {}
    n = int(round(params.duration_s * params.fps))
    for view, yaw in VIEW_YAW.items():
        video = VideoInfo(
            f"{params.source_id}_{view}",
            params.source_id,
            view,
            yaw,
            0.0,
            90.0,
            58.7155,
            *VIEW_SIZE,
            params.fps,
            n,
            params.duration_s,
        )
        instances, poses, motion = _oracle_metadata(truth, params, view, qa.clip_seconds)

        def dest(rel, view=view, video=video):
            p = tmp / "images" / view / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            images[(video.video_id, rel)] = p
            return p

        res = build_video(video, instances, motion, poses, qa, Provenance(0, "truth", "test"), video_path, dest, blur)
        tables.append(questions_table(res.questions))
    export = ex.assemble(pa.concat_tables(tables), qa)
    rows = [r for r in export.rows if r["split"] != "voc_repeat"]
    return {params.source_id: truth}, rows, images


def test_qa_on_the_sample_truth(qa_on_truth):
    truths, rows, images = qa_on_truth
    _check_rows(truths, rows, min_pixels=1)  # the oracle metadata keeps every visible pixel
    for r in rows:
        if r["task_type"] == "VPO":
            for p in r["image_paths"]:
                assert (r["video_id"], "images/" + p.rsplit("/", 1)[1]) in images


# ------------------------------------------------------------------ the whole DAG
@pytest.fixture(scope="module")
def built(sample_root):
    from vsi_wild.tasks import registry

    missing = [s for s in ("sample", "project", "metadata", "qa", "export") if s not in registry.BY_NAME]
    if missing:
        pytest.skip(f"the DAG has no {', '.join(missing)} stage yet")
    root, output = sample_root
    from vsi_wild.store import Store
    from vsi_wild.tasks.sample import load_truth

    store = Store(root)
    sources = store.registry()["source_id"].to_pylist()
    truths = {s: load_truth(store, s) for s in sources}
    return root, truths, output


@pytest.fixture(scope="module")
def sample_config():
    from vsi_wild.config import load_config

    return load_config(REPO / "configs" / "sample.yaml")


def _pose_at(poses: list[dict], t: float) -> dict:
    return min(poses, key=lambda p: abs(p["time"] - t))


def test_exports_exist_and_counts_are_printed(built):
    root, _, output = built
    ex = root / "exports"
    for rel in (
        "vsi_super_wild_qa.jsonl",
        "qa.parquet",
        "counts.json",
        "splits/vpo_unrotated/vsi_super_wild_qa.jsonl",
        "splits/voc_repeat/vsi_super_wild_qa.jsonl",
    ):
        assert (ex / rel).exists(), rel
    counts = json.loads((ex / "counts.json").read_text())
    for task in ("VMR", "VPO", "VOO", "VOC"):
        assert counts["release"][task] > 0, task
        assert f"{task} {counts['release'][task]}" in output
    for line in (ex / "vsi_super_wild_qa.jsonl").read_text().splitlines():
        assert (ex / "videos" / json.loads(line)["video_name"]).exists()


def test_every_answer_matches_the_truth_unless_provisional(built, sample_config):
    """Every exported answer that is not provisional equals the truth's: a wrong VOC count rests on a
    review item or on unreviewed decisions likely enough wrong to reach qa.provisional_risk (the
    left view's beach balls, split where no review item covers it: P(wrong answer) up to 0.56). The
    provisional ones are VOC and VOO questions and say which decisions they rest on."""
    root, truths, _ = built
    (truth,) = truths.values()
    rows = pq.read_table(Path(root) / "exports" / "qa.parquet").to_pylist()
    provisional = [r for r in rows if r["provisional"]]
    assert all(r["task_type"] in ("VOC", "VOO") and r["provisional_reason"].startswith("rests on") for r in provisional)
    assert all(r["provisional_reason"] is None for r in rows if not r["provisional"])
    sure = [r for r in rows if not r["provisional"]]
    min_px = min_pixels(sample_config, truth)
    wrong = [r for r in sure if r["task_type"] == "VOC" and _voc_wrong(truth, r, min_px)]
    _check_rows(
        truths,
        [r for r in sure if r not in wrong],
        min_pixels=min_px,
        min_visible_s=sample_config.qa.voo_readings[0].min_visible_s,
    )
    assert not wrong, [(r["view"], r["concepts"], r["split"]) for r in wrong]


def _voc_wrong(truth, r, min_px: float) -> bool:
    """A VOC row's answers differ from the truth's (as ``_check_rows`` derives them)."""
    vis = visible(truth, r["view"], min_px)
    return any(
        int(ans) != len({v["instance_id"] for v in vis if v["category"] == r["concepts"][0] and v["time"] <= qt + 1e-9})
        for qt, ans in zip(r["query_times"], r["answers"], strict=True)
    )


def test_reconciled_counts_equal_the_truth_in_every_view(built, sample_config):
    """The release's VOC totals: one per view and kept concept, each the number of distinct truth
    instances of that category seen in that view (30 s clips, reconciled across them, the plaza
    revisited at the end), and a count for every concept the frequency filter keeps: equal to the
    truth's where the question is not provisional, and after an oracle review of the review items
    but for three (issue 30's target, all, is missed: docs/metadata.md)."""
    from vsi_wild.store import Store, UnitRef

    root, truths, _ = built
    (truth,) = truths.values()
    min_px = min_pixels(sample_config, truth)
    rows = pq.read_table(Path(root) / "exports" / "qa.parquet").to_pylist()
    release = [r for r in rows if r["split"] == "release" and r["task_type"] == "VOC"]
    got = {(r["view"], r["concepts"][0]): int(r["answers"][-1]) for r in release}
    want = {}
    for view in VIEW_YAW:
        keep = kept(truth, view, sample_config)
        for v in visible(truth, view, min_px):
            if v["category"] in keep:
                want.setdefault((view, v["category"]), set()).add(v["instance_id"])
    want = {k: len(v) for k, v in want.items()}
    assert set(got) <= set(want) and len(got) >= 16  # asked where the readings agree: >= 4 concepts per view
    sure = {(r["view"], r["concepts"][0]) for r in release if not r["provisional"]}
    assert all(got[k] == want[k] for k in sure), {k: (got[k], want[k]) for k in sure if got[k] != want[k]}
    store = Store(root)
    (source,) = truths

    def read(stage, unit, name):
        return store.read_table(UnitRef(stage, unit, store.read_status(stage, unit)["key"]), name)

    reviewed = {}
    for view in VIEW_YAW:
        _, counts = reviewed_voc(read, source, view, sample_config, truth)
        reviewed.update({(view, c): n[-1] for c, n in counts.items()})
    # after an oracle review: at most a few totals off, each by a false split or two
    assert sum(reviewed[k] != want[k] for k in want) <= 3
    assert all(0 <= reviewed[k] - want[k] <= 2 for k in want), {k: (reviewed[k], want[k]) for k in want}


def test_voo_asks_every_valid_concept_set(built, sample_config):
    """Per view and subtype: as many VOO questions as the truth allows (sets of 4 concepts whose
    first or last appearances keep their order, pairwise >= voo_min_gap_s apart, under every
    reading of qa.voo_readings), up to voo_first / voo_last."""
    root, truths, _ = built
    (truth,) = truths.values()
    qa = sample_config.qa
    rows = pq.read_table(Path(root) / "exports" / "qa.parquet").to_pylist()
    for view in VIEW_YAW:
        for which, count in (("first", qa.voo_first), ("last", qa.voo_last)):
            _, valid = stable_voo_sets(truth, view, sample_config, which)
            asked = [
                frozenset(r["concepts"])
                for r in rows
                if r["task_type"] == "VOO" and r["view"] == view and r["subtype"] == which
            ]
            assert len(asked) == len(set(asked)) == min(count, len(valid)), (view, which, len(valid))
            assert set(asked) <= valid, (view, which)


def test_every_exported_answer_holds_under_every_reading(built, sample_config):
    """The sample's exported VOC, VOO and VMR answers, derived from the truth tables under each
    reading of the question (qa.voc_readings, qa.voo_readings; a viewer misjudging the direction by
    qa.vmr_judgement_deg at any moment of the evidence window), are one answer. Seen at all is any
    pixel of the truth: the specks under segment.min_area reach the readings too."""
    root, truths, _ = built
    (truth,) = truths.values()
    qa = sample_config.qa
    rows = pq.read_table(Path(root) / "exports" / "qa.parquet").to_pylist()
    poses = truth["poses"].to_pylist()
    checked = {"VOC": 0, "VOO": 0, "VMR": 0}
    for r in rows:
        view, task = r["view"], r["task_type"]
        if task == "VOC" and r["split"] in ("release", "voc_stream"):
            for qt in r["query_times"]:
                counts = set()
                for reading in qa.voc_readings:
                    vis = visible(truth, view, reading_pixels(sample_config, truth, reading))
                    counts.add(
                        len(
                            {
                                v["instance_id"]
                                for v in vis
                                if v["category"] == r["concepts"][0] and v["time"] <= qt + 1e-9
                            }
                        )
                    )
                assert len(counts) == 1, (r["doc_id"], r["split"], qt, counts)
                checked[task] += 1
        elif task == "VOO" and r["split"] == "release":
            orders = set()
            for reading in qa.voo_readings:
                vis = visible(truth, view, reading_pixels(sample_config, truth, reading))
                times = appearance_times(vis, r["subtype"], reading.min_visible_s)
                orders.add(" → ".join(sorted(r["concepts"], key=lambda c: times.get(c, math.inf))))
            assert orders == {r["answer_text"]}, (r["doc_id"], orders)
            checked[task] += 1
        elif task == "VMR":
            t, w = r["frame_times"][0], qa.vmr_evidence_s
            labels = set()
            for k in range(
                math.ceil(max(0.0, t - w) * 2 - 1e-9), math.floor(min(r["duration_s"], t + w) * 2 + 1e-9) + 1
            ):
                a, b = _pose_at(poses, k / 2 - 0.5), _pose_at(poses, k / 2 + 0.5)
                heading = _pose_at(poses, k / 2)["yaw_deg"] + VIEW_YAW[view]
                angle = math.degrees(math.atan2(b["x"] - a["x"], b["y"] - a["y"])) - heading
                for d in (-qa.vmr_judgement_deg, 0.0, qa.vmr_judgement_deg):
                    labels.add(max(DIRS, key=lambda x: math.cos(math.radians(angle + d - DIRS[x]))))
            assert labels == {r["answer_text"]}, (r["doc_id"], t, labels)
            checked[task] += 1
    assert all(checked.values()), checked


def test_vpo_orders_hold_when_a_frame_is_taken_for_another_visit(built, sample_config):
    """Each anchor dated at its moment or at any moment of another visit of its place (the camera
    back within qa.vpo_min_position_frac of the truth track's extent after leaving it): the order of
    the 4 anchors is one answer. The sample's loop ends where it began, so frames of its first
    seconds show a place its last seconds come back to: the qa stage sees that revisit on the pose
    track once the pose stage has closed the loop (stages/loops.py)."""
    root, truths, _ = built
    (truth,) = truths.values()
    poses = sorted(truth["poses"].to_pylist(), key=lambda p: p["time"])
    xy = np.array([(p["x"], p["y"]) for p in poses])
    diameter = float(np.linalg.norm(xy[:, None] - xy[None], axis=2).max())
    radius = sample_config.qa.vpo_min_position_frac * diameter
    bad = []
    for r in pq.read_table(Path(root) / "exports" / "qa.parquet").to_pylist():
        if r["task_type"] != "VPO" or r["split"] != "release":
            continue
        dates = []
        for t in r["frame_times"]:
            i = min(range(len(poses)), key=lambda j: abs(poses[j]["time"] - t))
            near = [math.hypot(p["x"] - poses[i]["x"], p["y"] - poses[i]["y"]) < radius for p in poses]
            lo, hi = i, i
            while lo > 0 and near[lo - 1]:
                lo -= 1
            while hi < len(near) - 1 and near[hi + 1]:
                hi += 1
            dates.append([t] + [p["time"] for j, p in enumerate(poses) if near[j] and not lo <= j <= hi])
        ts = r["frame_times"]
        if any((ts[a] < ts[b]) != (d < ts[b]) for a in range(4) for b in range(4) if a != b for d in dates[a]):
            bad.append(r["doc_id"])
    assert not bad, bad


def _check_rows(truths, rows, min_pixels: float, min_visible_s: float = 0.0):
    checked = {"VMR": 0, "VPO": 0, "VOO": 0, "VOC": 0}
    for r in rows:
        if r["split"] == "voc_repeat":
            continue
        truth = truths[r["source_id"]]
        view = r["view"]
        task = r["task_type"]
        if task == "VOC":
            vis = visible(truth, view, min_pixels)
            for qt, ans in zip(r["query_times"], r["answers"], strict=True):
                expect = len(
                    {v["instance_id"] for v in vis if v["category"] == r["concepts"][0] and v["time"] <= qt + 1e-9}
                )
                assert int(ans) == expect, (r["doc_id"], qt)
        elif task == "VOO":
            times = appearance_times(visible(truth, view, min_pixels), r["subtype"], min_visible_s)
            key = {c: times[c] for c in r["concepts"]}
            assert r["answer_text"] == " → ".join(sorted(r["concepts"], key=key.get)), r["doc_id"]
            assert all(abs(key[a] - key[b]) >= 2.0 - 1e-9 for a in key for b in key if a != b)
        elif task == "VPO":
            poses = truth["poses"].to_pylist()
            by_frame = {p["frame"]: p["time"] for p in poses}
            times = [by_frame[f] for f in r["frame_indices"]]
            order = sorted(range(4), key=lambda i: times[i])
            assert r["answer_text"] == " → ".join(f"Frame {i + 1}" for i in order), r["doc_id"]
            assert all(abs(a - b) >= 30.0 - 0.5 for i, a in enumerate(times) for b in times[i + 1 :])
        elif task == "VMR":
            poses = truth["poses"].to_pylist()
            t = r["frame_times"][0]
            a, b = _pose_at(poses, t - 1.0), _pose_at(poses, t + 1.0)
            dx, dy = b["x"] - a["x"], b["y"] - a["y"]
            heading = _pose_at(poses, t)["yaw_deg"] + VIEW_YAW[view]
            angle = (math.degrees(math.atan2(dx, dy)) - heading) % 360.0
            dist = {k: abs((angle - d + 180.0) % 360.0 - 180.0) for k, d in DIRS.items()}
            best = min(dist, key=dist.get)
            if abs(dist[best] - 22.5) > 5.0:  # not within 5° of a sector boundary
                assert r["answer_text"] == best, (r["doc_id"], angle)
        checked[task] += 1
    assert all(n > 0 for n in checked.values()), checked
