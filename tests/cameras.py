"""Level cameras for the tests' hand-made poses (schema.POSES conventions), written apart from the
pipeline's code so that the tests do not check the pipeline against itself."""

from __future__ import annotations

import numpy as np

from vsi_wild.stages import geometry

# world (right, forward, up) of a camera facing +y -> its OpenCV axes (right, down, forward)
OPENCV_AXES = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])


def level_rotation(heading_deg: float) -> np.ndarray:
    """R (world -> camera) of a level camera facing ``heading_deg``, clockwise from the world's +y."""
    return OPENCV_AXES @ geometry.rotation_yaw_pitch(heading_deg, 0.0).T


def level_extrinsics(x: float, y: float, z: float, heading_deg: float) -> np.ndarray:
    """[R | t] (3 x 4, world -> camera) of a level camera at (x, y, z) facing ``heading_deg``: t = -R C."""
    R = level_rotation(heading_deg)
    return np.c_[R, -R @ np.array([x, y, z])]
