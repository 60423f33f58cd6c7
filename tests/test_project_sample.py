"""The stage on the embedded sample (a short, low-resolution stretch of its route past the face
photograph), checked against the sample's ground truth: the face is blurred where the truth puts
it and nowhere is a face left for the detector; objects land in the views where the truth says."""

from __future__ import annotations

import av
import numpy as np
import pytest
from pycocotools import mask as mask_utils

from vsi_wild.stages.faces import FaceParams, make_detector
from vsi_wild.stages.project import ProjectParams, project_source
from vsi_wild.stages.sample import SampleParams, generate_sample, truth_samples
from vsi_wild.stages.sample.world import CATEGORIES
from vsi_wild.stages.video_io import sample_frames

pytestmark = pytest.mark.slow

# the stretch that walks up to the face photograph (left view, then front) and stops before it
SAMPLE = SampleParams(
    source_id="sample-project-test",
    width=1024,
    fps=4.0,
    route_offset_s=48.0,
    duration_s=10.0,
    truth_view_width=640,
    truth_view_height=360,
)
VIEW_W, VIEW_H = SAMPLE.truth_view_width, SAMPLE.truth_view_height  # views at the truth's resolution


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("sample")
    truth = generate_sample(SAMPLE, d / "sample.mp4")
    faces = FaceParams()
    det = make_detector(faces)
    stats: dict = {}
    views, blurred = project_source(
        d / "sample.mp4",
        d / "views",
        ProjectParams(width=VIEW_W, height=VIEW_H),
        det,
        face_params=faces,
        source_id=SAMPLE.source_id,
        stats=stats,
    )
    return truth, views, blurred, d / "views", det, stats


def covers(row: dict, t: dict, tol: float = 3.0) -> bool:
    return (
        row["x0"] <= t["x0"] + tol
        and row["y0"] <= t["y0"] + tol
        and row["x1"] >= t["x1"] - tol
        and row["y1"] >= t["y1"] - tol
    )


def test_face_blurred_where_the_truth_puts_it(run):
    truth, views, blurred, _, _, stats = run
    tf = truth.faces.to_pylist()
    assert len(tf) >= 10 and {r["view"] for r in tf} >= {"left", "front"}
    rows = blurred.to_pylist()
    big = [t for t in tf if t["x1"] - t["x0"] >= 24]  # CenterFace's smallest face is about 24 px
    assert len(big) >= 5
    for t in big:
        vid = f"{SAMPLE.source_id}_{t['view']}"
        mine = [r for r in rows if r["video_id"] == vid and r["frame"] == t["frame"]]
        assert any(covers(r, t) for r in mine), (t, mine)
    # the detector's own boxes are about the face: (nearly) all overlap a truth face of their frame
    # (neighbours' boxes carried into a frame during a fast turn need not)
    by_key = {}
    for t in tf:
        by_key.setdefault((f"{SAMPLE.source_id}_{t['view']}", t["frame"]), []).append(t)
    sampled = {f for _, _, f in truth_samples(SAMPLE)}  # the truth has faces at its 2 FPS frames only
    at_truth = [r for r in rows if r["frame"] in sampled and r["detected"]]
    near = sum(
        1
        for r in at_truth
        if any(
            min(r["x1"], t["x1"]) > max(r["x0"], t["x0"]) and min(r["y1"], t["y1"]) > max(r["y0"], t["y0"])
            for t in by_key.get((r["video_id"], r["frame"]), [])
        )
    )
    assert len(at_truth) >= 10 and near >= 0.9 * len(at_truth), (near, len(at_truth))
    assert stats["detect_every"] == 4  # detect_interval_s (1 s) at 4 fps


def test_no_face_left_in_any_written_frame(run):
    _, views, _, out, det, _ = run
    n = 0
    for r in views.to_pylist():
        with av.open(str(out / r["path"])) as c:
            for f in c.decode(video=0):
                boxes, _ = det.detect(f.to_ndarray(format="rgb24"))
                assert len(boxes) == 0, (r["view"], f.pts)
                n += 1
    assert n == 4 * 40


def chroma(rgb: np.ndarray) -> np.ndarray:
    rgb = np.asarray(rgb, float)
    return rgb / np.maximum(rgb.sum(axis=-1, keepdims=True), 1.0)


def test_objects_land_where_the_truth_says(run):
    """Inside each truth mask (eroded), our written view at that 2 FPS sample shows the object's
    category colour, closer to it than to any other category's: the views' geometry, view order
    and timing agree with the truth's own projection."""
    truth, views, _, out, _, _ = run
    vis = truth.visibility.to_pylist()
    cat = {c.name: chroma(np.array(c.colour)) for c in CATEGORIES}
    names = list(cat)
    checked = ok = 0
    for r in views.to_pylist():
        rows = [v for v in vis if v["view"] == r["view"]]
        if not rows:
            continue
        frames = {k: (fi, rgb) for k, _, fi, _, rgb in sample_frames(out / r["path"])}
        for v in rows:
            fi, rgb = frames[v["sample_index"]]
            assert fi == v["frame"]  # our 2 FPS frame is the truth's frame
            m = mask_utils.decode({"size": [v["image_height"], v["image_width"]], "counts": v["mask_rle"].encode()})
            m = m.astype(bool)
            er = m.copy()
            for dy in (-2, 0, 2):
                for dx in (-2, 0, 2):
                    er &= np.roll(np.roll(m, dy, 0), dx, 1)
            if er.sum() < 150:
                continue
            mean = chroma(rgb[er].mean(axis=0))
            best = names[int(np.argmin([np.abs(mean - cat[n]).sum() for n in names]))]
            checked += 1
            ok += best == v["category"]
    assert checked >= 20, checked
    assert ok >= 0.9 * checked, (ok, checked)
