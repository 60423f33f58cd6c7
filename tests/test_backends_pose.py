"""Depth Anything 3 through our adapter: the real da3-small architecture with random weights,
saved with save_pretrained (the folder layout of the released models), loaded from the configured
folder, run on tiny frames in overlapping windows (so the chaining runs on real model output)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import random_weights

from vsi_wild.errors import MissingWeights, UnitError
from vsi_wild.stages.backends.base import FrameBatch, create

pytestmark = pytest.mark.models

H, W = 60, 80


@pytest.fixture(scope="module")
def da3_dir(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("da3") / "DA3-SMALL"
    random_weights.da3_folder(d, "da3-small")
    return d


def _frames(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [(rng.random((H, W, 3)) * 255).astype(np.uint8) for _ in range(n)]


def test_da3_poses_through_our_adapter(da3_dir) -> None:
    est = create(
        "pose_estimator",
        "da3",
        device="cpu",
        da3_model_dir=str(da3_dir),
        da3_process_res=112,
        da3_window=2,
        da3_overlap=1,
    )
    frames = _frames(3)
    res = est.estimate(FrameBatch("vid_front", frames, [0.0, 0.5, 1.0], [0, 15, 30], [0, 1, 2], 30.0))
    assert res.extrinsics.shape == (3, 3, 4) and res.intrinsics.shape == (3, 3, 3) and res.valid.shape == (3,)
    assert res.valid.all()
    r = res.extrinsics[:, :, :3]
    np.testing.assert_allclose(r @ r.transpose(0, 2, 1), np.broadcast_to(np.eye(3), (3, 3, 3)), atol=1e-5)
    np.testing.assert_allclose(np.linalg.det(r), 1.0, atol=1e-5)
    np.testing.assert_allclose(res.extrinsics[0], np.eye(3, 4), atol=1e-6)  # world = first camera
    k = res.intrinsics
    assert (k[:, 0, 0] > 0).all() and (k[:, 1, 1] > 0).all()
    # DA3's camera head puts the principal point at the image centre: in the input's pixel-centre
    # coordinates that is ((W-1)/2, (H-1)/2), whatever the processing size was
    np.testing.assert_allclose(k[:, 0, 2], (W - 1) / 2, atol=1e-4)
    np.testing.assert_allclose(k[:, 1, 2], (H - 1) / 2, atol=1e-4)

    # Independent check of the first window: DA3's own public API on the same two frames (it
    # autocasts to fp16 on CPU, we run fp32: compare the relative pose loosely) ...
    pred = est.model.inference(frames[:2], process_res=112)
    h, w = pred.processed_images.shape[1:3]
    assert (w, h) == (112, 84)  # longest side 112, the other rounded to a multiple of 14
    e = np.tile(np.eye(4), (2, 1, 1))
    e[:, :3, :4] = pred.extrinsics[:, :3, :4]
    rel_ref = (e[1] @ np.linalg.inv(e[0]))[:3, :3]
    np.testing.assert_allclose(res.extrinsics[1][:, :3], rel_ref, atol=2e-2)
    # ... and the field of view: DA3's K is in processed pixels, ours in input pixels
    ext, k_proc, _, wh = est.run_window(frames[:2])
    assert wh == (112, 84)
    np.testing.assert_allclose((W / 2) / k[:2, 0, 0], (wh[0] / 2) / k_proc[:, 0, 0], rtol=1e-6)


def test_da3_missing_or_wrong_folder_names_the_config_key(tmp_path) -> None:
    with pytest.raises(MissingWeights) as e:
        create("pose_estimator", "da3", device="cpu", weights_dir=str(tmp_path))
    assert "models.da3_model_dir" in str(e.value) and str(tmp_path / "da3/DA3-LARGE") in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UnitError) as e:
        create("pose_estimator", "da3", device="cpu", da3_model_dir=str(tmp_path / "empty"))
    assert "models.da3_model_dir" in str(e.value)


def test_da3_rejects_frames_of_mixed_sizes(da3_dir) -> None:
    est = create("pose_estimator", "da3", device="cpu", da3_model_dir=str(da3_dir), da3_process_res=112)
    frames = [_frames(1)[0], np.zeros((40, 80, 3), np.uint8)]
    with pytest.raises(UnitError, match="vid_left"):
        est.estimate(FrameBatch("vid_left", frames, [0.0, 0.5], [0, 15], [0, 1], 30.0))


def test_da3_windows_batched_across_views_equal_one_at_a_time(da3_dir) -> None:
    """A source's views' windows in one forward pass (DA3's batch dimension) give each view the
    poses it gets alone: batching is a speed choice, not an output one. Tolerance: the same fp32
    arithmetic per batch element, reordered by the batched kernels (measured here: well below it)."""
    est = create(
        "pose_estimator",
        "da3",
        device="cpu",
        da3_model_dir=str(da3_dir),
        da3_process_res=112,
        da3_window=3,
        da3_overlap=1,
    )
    rng = np.random.default_rng(7)
    views = []
    for v in range(3):
        frames = [(rng.random((H, W, 3)) * 255).astype(np.uint8) for _ in range(5)]
        views.append(
            FrameBatch(f"src_{v}", frames, [k / 2 for k in range(5)], [15 * k for k in range(5)], list(range(5)), 30.0)
        )
    short = FrameBatch("src_short", views[0].images[:2], [0.0, 0.5], [0, 15], [0, 1], 30.0)  # fewer windows
    alone = [est.estimate(b) for b in views + [short]]
    calls = []
    real = est.run_windows
    est.run_windows = lambda ws: (calls.append(len(ws)), real(ws))[1]
    try:
        together = est.estimate_many(views + [short])
    finally:
        del est.run_windows
    assert calls == [4, 3]  # window 0 of all four videos, then window 1 of the three long ones
    for a, b in zip(alone, together, strict=True):
        assert np.array_equal(a.valid, b.valid)
        np.testing.assert_allclose(b.extrinsics, a.extrinsics, atol=1e-4)
        np.testing.assert_allclose(b.intrinsics, a.intrinsics, rtol=1e-4)
