"""The QA worlds' stand-in poses (tests/qa_world.py) are the world's cameras, as the pose stage
reads schema.POSES (``stages.pose.track_from_rows``): each view's camera stands at the world's
pose, faces the pose's yaw turned by the view's, and sees the world's motion in its own axes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from qa_world import HEIGHT, VIEW_YAW, WIDTH, make_world, poses_table

from vsi_wild.stages import geometry
from vsi_wild.stages.pose import track_from_rows


@pytest.mark.parametrize("view", list(VIEW_YAW))
def test_stand_in_poses_are_the_worlds_cameras(view):
    w = make_world(3, duration=60.0)
    track = track_from_rows(poses_table(w, view).to_pylist())
    _, d, ok = track.steps()
    assert ok.all()
    for k in range(0, len(w.poses) - 1, 7):
        p, q = w.poses[k], w.poses[k + 1]
        heading = p["yaw_deg"] + VIEW_YAW[view]
        c, centre = track.ray(k, (WIDTH - 1) / 2, (HEIGHT - 1) / 2)  # the principal point
        np.testing.assert_allclose(c, [p["x"], p["y"], p["z"]], atol=1e-12)
        np.testing.assert_allclose(centre, geometry.heading_vector(heading), atol=1e-12)
        _, edge = track.ray(k, WIDTH - 1, (HEIGHT - 1) / 2)  # the right edge's pixel centre: hfov / 2 right
        np.testing.assert_allclose(edge, geometry.heading_vector(heading + 45.0), atol=1e-12)
        ground = track.ground_point(k, (WIDTH - 1) / 2, HEIGHT - 1, p["z"])  # the bottom row meets the ground
        assert ground is not None and ground[2] == pytest.approx(0.0, abs=1e-9)
        if math.hypot(q["x"] - p["x"], q["y"] - p["y"]) > 1e-6:  # the direction of travel in the view's axes
            want = math.degrees(math.atan2(q["x"] - p["x"], q["y"] - p["y"])) - heading
            got = math.degrees(math.atan2(d[k, 0], d[k, 2]))
            assert geometry.wrap_deg(got - want) == pytest.approx(0.0, abs=1e-9)
            assert d[k, 1] == pytest.approx(0.0, abs=1e-12)  # level: no motion along the down axis
