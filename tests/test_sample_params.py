"""Sample parameters, failure modes, progress, and long (looping) variants."""

from __future__ import annotations

import math

import numpy as np
import pydantic
import pytest

from vsi_wild.errors import UnitError
from vsi_wild.stages.sample import SampleParams, generate_sample, truth_samples
from vsi_wild.stages.sample.world import build_world

TINY = dict(width=64, fps=2.0, truth_view_width=32, truth_view_height=18)


def test_params_are_validated():
    with pytest.raises(pydantic.ValidationError, match="multiple of 4"):
        SampleParams(width=130)
    with pytest.raises(pydantic.ValidationError):
        SampleParams(colour="red")  # extra keys are errors
    with pytest.raises(pydantic.ValidationError):
        SampleParams(source_id="walk")  # ids follow vsi_wild.ids
    with pytest.raises(pydantic.ValidationError):
        SampleParams().seed = 2  # frozen
    assert SampleParams().height == 640


def test_truth_samples_are_the_nearest_frames():
    p = SampleParams(duration_s=3.0, fps=3.0)
    got = truth_samples(p)
    assert [k for k, _, _ in got] == list(range(6))
    for k, t, fr in got:
        assert t == k / 2 and abs(fr / 3.0 - t) <= 0.5 / 3.0 + 1e-9


def test_unwritable_output_is_a_unit_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UnitError, match="file"):
        generate_sample(SampleParams(duration_s=0.5, **TINY), blocker / "sub" / "v.mp4")


def test_progress_and_long_variant_loops_the_route(tmp_path):
    """A variant longer than its route walks the closed route again (the 10-minute variants)."""
    seen = []
    p = SampleParams(route="short", duration_s=110.0, **TINY)
    truth = generate_sample(p, tmp_path / "long.mp4", progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (220, 220) and len(seen) == 220
    assert truth.poses.num_rows == 220
    poses = truth.poses.to_pydict()
    w = build_world(0, route="short")
    L = w.route.length
    xy = np.c_[poses["x"], poses["y"]]
    step = np.hypot(*np.diff(xy, axis=0).T) * p.fps
    assert step.max() <= 1.5 + 1e-6  # continuous through the loop point: no jump
    for t in (3.0, 17.5, 40.0):
        a, b = w.route.pose(t), w.route.pose(t + L)
        assert np.allclose(a[:2], b[:2]) and math.isclose(a[3], b[3], abs_tol=1e-9)
    assert "outside" not in set(poses["place"])
    assert truth.visibility.num_rows > 0
    # the short route leaves the plaza and comes back more than 20 s later
    t, pl = np.asarray(poses["time"]), np.asarray(poses["place"])
    first_loop = t < L
    left = t[first_loop & (pl == "street")]
    back = t[first_loop & (pl == "plaza") & (t > left.max())]
    assert len(back) and back.min() - t[first_loop & (pl == "plaza") & (t < left.min())].max() >= 20.0


def test_more_faces_and_instances(tmp_path):
    p = SampleParams(duration_s=1.0, faces=3, n_per_category=6, **TINY)
    w = build_world(p.seed, p.route, p.n_per_category, p.faces)
    assert len(w.faces) == 3 and len(w.instances) == 36
    assert {f.place for f in w.faces} == {"hall", "street", "corridor"}
    truth = generate_sample(p, tmp_path / "v.mp4")
    assert truth.objects.num_rows == 36
