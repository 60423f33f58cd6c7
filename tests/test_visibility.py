"""Visibility tracks (stages/visibility.py, metadata/visibility.parquet).

- a constructed camera walk whose states follow from the objects' true extents;
- the embedded sample (the session's ``sample_root``): the visible state against the truth's
  visibility, and out_of_view vs occluded against the truth's frustum, computed here from
  truth_poses, truth_objects and the view's direction.
(What VOO and VOC count as a sighting: tests/test_qa_readings.py.)
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest

from vsi_wild import schema
from vsi_wild.stages import geometry as geo
from vsi_wild.stages import visibility as vz
from vsi_wild.stages.pose import Track

W, H, F = 200, 100, 100.0  # image and focal length of the constructed camera
VID = "sample-test_front"


# ------------------------------------------------------------------ a constructed walk
def _walk(n: int) -> Track:
    """A camera looking along +z (OpenCV axes: x right, y down), one unit forward per sample."""
    K = np.array([[F, 0, (W - 1) / 2], [0, F, (H - 1) / 2], [0, 0, 1.0]])
    return Track(
        np.arange(n),
        np.arange(n) * 0.5,
        np.arange(n) * 4,
        8.0,
        np.repeat(np.eye(3)[None], n, 0),
        np.array([[0.0, 0.0, float(i)] for i in range(n)]),
        np.repeat(K[None], n, 0),
        np.ones(n, bool),
    )


def _box(centre: tuple[float, float, float], half: float, cam_z: float) -> tuple[float, float, float, float] | None:
    """The image box of a cube of half-size ``half`` seen from (0, 0, cam_z); None when behind."""
    x, y, z = centre
    d = z - cam_z
    if d <= half:
        return None
    cx, cy = (W - 1) / 2 + F * x / d, (H - 1) / 2 + F * y / d
    r = F * half / d
    return cx - r, cy - r, cx + r, cy + r


def _instance(i: int, concept: str, pos: tuple[float, float, float] | None, origin: str = "auto") -> dict:
    return {
        "video_id": VID,
        "concept": concept,
        "instance_id": i,
        "first_time": 0.0,
        "last_time": 0.0,
        "first_frame": 0,
        "last_frame": 0,
        "fps": 8.0,
        "n_observations": 0,
        "spans": [],
        "x": None if pos is None else pos[0],
        "y": None if pos is None else pos[1],
        "z": None if pos is None else pos[2],
        "origin": origin,
    }


def _obs(i: int, concept: str, k: int, box: tuple[float, float, float, float] | None) -> dict:
    b = box or (None,) * 4
    return {
        "video_id": VID,
        "instance_id": i,
        "concept": concept,
        "sample_index": k,
        "time": k * 0.5,
        "frame": k * 4,
        "fps": 8.0,
        "x0": b[0],
        "y0": b[1],
        "x1": b[2],
        "y1": b[3],
        "area": None if box is None else 100,
        "origin": "auto" if box is not None else "fix",
    }


def _states(cols: dict[str, list], instance_id: int) -> list[str]:
    return [s for i, s in zip(cols["instance_id"], cols["state"], strict=True) if i == instance_id]


def test_states_follow_the_walk():
    n = 24
    track = _walk(n)
    ahead, right = (0.0, 0.5, 10.0), (3.0, 0.0, 20.0)  # passed at sample 10; leaves the image to the right
    obs = [_obs(1, "cone", k, _box(ahead, 0.5, k)) for k in range(4)]
    obs += [_obs(2, "ball", k, _box(right, 0.5, k)) for k in range(3)]
    obs += [_obs(3, "bench", k, _box(ahead, 0.5, k)) for k in range(3)]  # no position
    obs += [_obs(4, "sign", k, _box(ahead, 0.5, k)) for k in range(3)]  # a position behind every sighting
    instances = [
        _instance(1, "cone", ahead),
        _instance(2, "ball", right),
        _instance(3, "bench", None),
        _instance(4, "sign", (0.0, 0.0, -5.0)),
    ]
    cols = vz.visibility_columns(VID, instances, obs, track, vz.project_instances(instances, obs, track, (W, H), 0.8))
    table = schema.table(schema.VISIBILITY, cols)  # the declared schema holds
    assert table.num_rows == 4 * n

    def expected(centre, seen: range) -> list[str]:
        out = []
        for k in range(n):
            b = _box(centre, 0.5, k)
            in_view = b is not None and b[2] > 0 and b[0] < W and b[3] > 0 and b[1] < H
            out.append(vz.VISIBLE if k in seen else vz.OCCLUDED if in_view else vz.OUT_OF_VIEW)
        return out

    assert _states(cols, 1) == expected(ahead, range(4))
    assert _states(cols, 2) == expected(right, range(3))
    assert _states(cols, 2)[18:20] == [vz.OUT_OF_VIEW] * 2  # out of the frame sideways before it is passed (20)
    assert _states(cols, 3) == [vz.VISIBLE] * 3 + [vz.NOT_SEEN] * (n - 3)
    assert _states(cols, 4) == [vz.VISIBLE] * 3 + [vz.NOT_SEEN] * (n - 3)
    geometric = dict(zip(cols["instance_id"], cols["geometric"], strict=True))
    assert geometric == {1: True, 2: True, 3: False, 4: False}


def test_a_fixed_instance_past_the_last_pose_is_kept():
    """An instance a person added may end at the video's end, one timestamp past the last pose."""
    track = _walk(4)
    obs = [_obs(1, "cone", k, None) for k in (3, 4)]
    added = [_instance(1, "cone", None, "fix")]
    cols = vz.visibility_columns(VID, added, obs, track, vz.project_instances(added, obs, track, (W, H), 0.8))
    assert list(cols["sample_index"]) == [0, 1, 2, 3, 4]
    assert list(cols["state"]) == [vz.NOT_SEEN] * 3 + [vz.VISIBLE] * 2


# ------------------------------------------------------------------ the embedded sample
VIEW_YAW = {"front": 0.0, "right": 90.0, "back": 180.0, "left": 270.0}


def _truth_in_frustum(obj: dict, pose: dict, view: dict) -> bool:
    """Whether any of the object's bounding-box corners' image extent overlaps the view (the truth's
    camera at that frame, the view turned by its yaw)."""
    c = np.array([obj["x"], obj["y"], obj["z"]])
    half = np.array([obj["size_x"], obj["size_y"], obj["size_z"]]) / 2
    corners = np.array([c + half * (2 * np.array(s) - 1) for s in np.ndindex(2, 2, 2)])
    cam = geo.world_to_camera(
        corners, [pose["x"], pose["y"], pose["z"]], pose["yaw_deg"], pose["pitch_deg"], pose["roll_deg"]
    )
    px, front = geo.project_to_view(
        cam, view["width"], view["height"], view["hfov_deg"], view["yaw_deg"], view["pitch_deg"]
    )
    if not front.any():
        return False
    q = px[front]
    return bool(
        q[:, 0].max() > -0.5
        and q[:, 0].min() < view["width"] - 0.5
        and q[:, 1].max() > -0.5
        and q[:, 1].min() < view["height"] - 0.5
    )


def _truth_ids(observations: list[dict], truth_vis: list[dict], scale: float) -> dict[int, int]:
    """Our instance id -> the truth instance whose boxes it overlaps most often (best IoU per sample)."""
    by_sample = defaultdict(list)
    for t in truth_vis:
        by_sample[t["sample_index"]].append(t)
    votes: dict[int, Counter] = defaultdict(Counter)
    for o in observations:
        if o["x0"] is None:
            continue
        best, best_iou = None, 0.0
        for t in by_sample[o["sample_index"]]:
            if t["category"] != o["concept"]:
                continue
            tb = [(t[k] - 0.5) * scale for k in ("x0", "y0", "x1", "y1")]  # pixel edges -> centres, view pixels
            ix = max(0.0, min(o["x1"], tb[2]) - max(o["x0"], tb[0]))
            iy = max(0.0, min(o["y1"], tb[3]) - max(o["y0"], tb[1]))
            union = (o["x1"] - o["x0"]) * (o["y1"] - o["y0"]) + (tb[2] - tb[0]) * (tb[3] - tb[1]) - ix * iy
            if union > 0 and ix * iy / union > best_iou:
                best, best_iou = t["instance_id"], ix * iy / union
        if best is not None:
            votes[o["instance_id"]][best] += 1
    return {i: c.most_common(1)[0][0] for i, c in votes.items()}


@pytest.fixture(scope="module")
def sample_tracks(sample_root):
    from conftest import REPO

    from vsi_wild.config import load_config
    from vsi_wild.store import Store, UnitRef
    from vsi_wild.tasks.sample import load_truth

    root, _ = sample_root
    store = Store(root)
    config = load_config(REPO / "configs" / "sample.yaml")
    (source,) = store.registry()["source_id"].to_pylist()
    truth = {k: t.to_pylist() for k, t in load_truth(store, source).items()}

    def read(stage: str, unit: str, name: str) -> list[dict]:
        return store.read_table(UnitRef(stage, unit, store.read_status(stage, unit)["key"]), name).to_pylist()

    views = read("project", source, schema.VIEWS_FILE)
    per_view = {
        v["view"]: (
            v,
            read("metadata", v["video_id"], "visibility.parquet"),
            read("metadata", v["video_id"], "observations.parquet"),
        )
        for v in views
    }
    return truth, per_view, config


def test_sample_visibility_agrees_with_the_truth(sample_tracks):
    truth, per_view, config = sample_tracks
    frame_pose = {p["frame"]: p for p in truth["poses"]}
    objects = {o["instance_id"]: o for o in truth["objects"]}
    agree = Counter()
    geometric_instances = []
    for view_name, (view, rows, observations) in per_view.items():
        tv = [t for t in truth["visibility"] if t["view"] == view_name]
        scale = view["width"] / tv[0]["image_width"]
        # the segmenter drops masks under segment.min_area view pixels: so does the truth's visible state
        min_pixels = config.segment.min_area / scale**2
        visible = {(t["instance_id"], t["sample_index"]) for t in tv if t["pixels"] >= min_pixels}
        truth_of = _truth_ids(observations, tv, scale)
        assert len(truth_of) == len({r["instance_id"] for r in rows}), view_name  # every instance was seen
        geometric_instances.append(np.mean([r["geometric"] for r in rows]))
        for r in rows:
            tid = truth_of[r["instance_id"]]
            truly_visible = (tid, r["sample_index"]) in visible
            agree["visible", (r["state"] == vz.VISIBLE) == truly_visible] += 1
            if r["state"] in (vz.OUT_OF_VIEW, vz.OCCLUDED) and not truly_visible:
                want = vz.OCCLUDED if _truth_in_frustum(objects[tid], frame_pose[r["frame"]], view) else vz.OUT_OF_VIEW
                agree["frustum", r["state"] == want] += 1
                agree[r["state"], want] += 1

    def rate(what: str) -> float:
        return agree[what, True] / (agree[what, True] + agree[what, False])

    assert rate("visible") >= 0.98, agree
    assert rate("frustum") >= 0.9, agree
    # both unobserved states are exercised, and positions decide most instances' tracks
    assert agree[vz.OUT_OF_VIEW, vz.OUT_OF_VIEW] > 0 and agree[vz.OCCLUDED, vz.OCCLUDED] > 0, agree
    assert np.mean(geometric_instances) >= 0.5, geometric_instances


def test_report_section_per_concept():
    from vsi_wild.stages.report import render_markdown, visibility_summary

    states = {("v1", 1): "VVVOOC", ("v2", 1): "VOOOOO", ("v1", 2): "VVVVNN"}  # V visible, O out, C occluded, N not seen
    names = {"V": vz.VISIBLE, "O": vz.OUT_OF_VIEW, "C": vz.OCCLUDED, "N": vz.NOT_SEEN}
    rows = [
        {"video_id": v, "instance_id": i, "concept": "cone" if i == 1 else "ball", "state": names[s]}
        for (v, i), track in states.items()
        for s in track
    ]
    summary = visibility_summary(rows, 0.5)
    assert summary["cone"]["instances"] == 2 and summary["ball"]["instances"] == 1
    assert summary["cone"]["median_visible_s"] == (1.5 + 0.5) / 2 and summary["cone"]["max_visible_s"] == 1.5
    assert summary["cone"]["unobserved"] == {"out_of_view": 7 / 8, "occluded": 1 / 8, "not_seen": 0.0}
    assert summary["ball"]["unobserved"]["not_seen"] == 1.0
    rep = {
        "sources": {"n": 0, "hours": 0.0, "origins": {}},
        "questions": {},
        "splits": {},
        "lost": {},
        "statistics": {"videos": 0, "hours": 0.0, "categories": {}},
        "visibility": summary,
    }
    text = render_markdown(rep)
    assert "| cone | 2 | 1.0 | 1.5 | 88% · 12% · 0% |" in text


# ------------------------------------------------------------------ specks
def _speck(clip: int, local: int, concept: str, k: int, box: tuple[float, float, float, float]) -> dict:
    return {
        "video_id": VID,
        "clip_index": clip,
        "sample_index": k,
        "time": k * 0.5,
        "concept": concept,
        "local_id": local,
        "x0": box[0],
        "y0": box[1],
        "x1": box[2],
        "y1": box[3],
        "area": 4,
        "score": 0.9,
    }


def test_a_speck_shows_the_instance_its_track_or_its_position_tells():
    """The segmenter's masks under segment.min_area, each with the instance it shows: by its clip
    track where the same clip-local id is a member; else the one instance of its concept whose
    predicted box at that moment overlaps it; none where no instance or several do."""
    track = _walk(24)
    cone, balls = (0.0, 0.5, 20.0), ((-2.0, 0.5, 20.0), (-2.05, 0.5, 20.5))
    obs = [_obs(1, "cone", k, _box(cone, 0.2, k)) for k in range(12, 16)]
    obs += [_obs(2, "cone", k, _box((3.0, 0.0, 22.0), 0.2, k)) for k in range(14, 17)]
    obs += [_obs(3 + j, "ball", k, _box(b, 0.2, k)) for j, b in enumerate(balls) for k in range(10, 13)]
    instances = [
        _instance(1, "cone", cone),
        _instance(2, "cone", (3.0, 0.0, 22.0)),
        _instance(3, "ball", balls[0]),
        _instance(4, "ball", balls[1]),
    ]
    members = [
        {"clip_index": 1, "local_id": 3, "instance_id": 2, "concept": "cone"},
        {"clip_index": 1, "local_id": 4, "instance_id": None, "concept": None},  # a person removed it
    ]
    far_cone = _box(cone, 0.2, 2)  # 18 units away: a 2 px box
    assert far_cone is not None and far_cone[2] - far_cone[0] < 3
    aside = (far_cone[0] - 40, far_cone[1], far_cone[2] - 40, far_cone[3])  # where no cone is
    far_ball = _box(balls[0], 0.2, 2)
    assert far_ball is not None
    specks = [
        _speck(0, 5, "cone", 2, far_cone),
        _speck(0, 6, "cone", 2, aside),
        _speck(0, 7, "ball", 2, far_ball),  # both balls' predicted boxes overlap it
        _speck(0, 8, "ball", 2, far_cone),  # a ball where only a cone is
        _speck(1, 3, "cone", 30, (0.0, 0.0, 2.0, 2.0)),  # its track is instance 2's: wherever it is
        _speck(1, 4, "cone", 30, (0.0, 0.0, 2.0, 2.0)),
    ]
    projected = vz.project_instances(instances, obs, track, (W, H), 0.8)
    rows = vz.speck_rows(VID, specks, members, instances, track, projected)
    schema.table(schema.SPECKS, rows)  # the declared schema holds
    got = {(r["clip_index"], r["local_id"]): (r["instance_id"], r["attributed_by"]) for r in rows}
    assert got == {
        (0, 5): (1, "position"),
        (0, 6): (None, None),
        (0, 7): (None, None),
        (0, 8): (None, None),
        (1, 3): (2, "track"),
    }
    # an instance whose position does not explain its sightings tells nothing by position
    lost = [{**i, "z": -5.0} if i["instance_id"] == 1 else i for i in instances]
    rows = vz.speck_rows(VID, specks[:1], members, lost, track, vz.project_instances(lost, obs, track, (W, H), 0.8))
    assert [(r["instance_id"], r["attributed_by"]) for r in rows] == [(None, None)]
    # a person's word stands over both: the ball speck both balls overlap is ball 4, the cone
    # speck the position tells is no object, and the concept follows the instance told
    told = {(0, 7): 4, (0, 5): None, (0, 6): 3}
    rows = vz.speck_rows(VID, specks, members, instances, track, projected, told)
    got = {(r["clip_index"], r["local_id"]): (r["instance_id"], r["attributed_by"], r["concept"]) for r in rows}
    assert got == {
        (0, 6): (3, "fix", "ball"),
        (0, 7): (4, "fix", "ball"),
        (0, 8): (None, None, "ball"),
        (1, 3): (2, "track", "cone"),
    }
