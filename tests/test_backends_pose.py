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


def _estimator(da3_dir, window: int):
    """Our DA3 adapter on the module's random-weight model, at the tests' small resolution."""
    return create(
        "pose_estimator",
        "da3",
        device="cpu",
        da3_model_dir=str(da3_dir),
        da3_process_res=112,
        da3_window=window,
        da3_overlap=1,
    )


def _frames(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [(rng.random((H, W, 3)) * 255).astype(np.uint8) for _ in range(n)]


def test_da3_poses_through_our_adapter(da3_dir) -> None:
    est = _estimator(da3_dir, window=2)
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
    est = _estimator(da3_dir, window=3)
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


def test_pose_stage_runs_a_sources_views_through_da3_together(da3_dir, monkeypatch) -> None:
    """The pose stage's source unit has all four views: their chunks go to DA3 in lockstep, each
    DA3 call a batch of the four views' windows (``estimate_source``), and every view's track and
    the fused one are what the views one at a time give, within DA3's batching tolerance."""
    from vsi_wild.stages import pose as po
    from vsi_wild.stages.backends.pose import DA3PoseEstimator

    rng = np.random.default_rng(11)
    n = 4
    clips = {v: [(rng.random((H, W, 3)) * 255).astype(np.uint8) for _ in range(n)] for v in range(4)}
    names = ["front", "right", "back", "left"]
    views = {
        name: po.ViewInput(
            f"src_{name}",
            90.0 * i,
            90.0,
            30.0,
            W,
            lambda i=i: iter([(k, k / 2, 15 * k, clips[i][k]) for k in range(n)]),
        )
        for i, name in enumerate(names)
    }
    params = po.PoseParams(backend="da3", chunk_frames=3)  # chunks [0..2] [1..3], one DA3 window each

    def make(_vi):
        return _estimator(da3_dir, window=3)

    calls: list[int] = []
    real = DA3PoseEstimator.run_windows
    monkeypatch.setattr(DA3PoseEstimator, "run_windows", lambda self, ws: (calls.append(len(ws)), real(self, ws))[1])
    fused_alone, alone = po.estimate_source(views, make, params, batch_views=False)
    calls_alone, calls[:] = list(calls), []
    done: list[tuple[int, int]] = []
    fused, together = po.estimate_source(views, make, params, lambda d, t: done.append((d, t)))
    # one view at a time: 2 chunks per view, one window per call; together: each call the four
    # views' windows
    assert calls_alone == [1] * 8 and calls == [4] * 2
    assert done == [(1, 4), (2, 4), (3, 4), (4, 4)]
    for v in names:
        a, b = alone[v], together[v]
        assert np.array_equal(a.sample_indices, b.sample_indices) and np.array_equal(a.valid, b.valid)
        np.testing.assert_allclose(b.R, a.R, atol=1e-4)
        np.testing.assert_allclose(b.C, a.C, atol=1e-4)
        np.testing.assert_allclose(b.K, a.K, rtol=1e-4)
    # the fusion (rotation medians over four random-weight views) moves the views' 1e-6 to ~1e-4
    assert np.array_equal(fused.valid, fused_alone.valid)
    turn = np.einsum("nij,nkj->nik", fused.R, fused_alone.R)
    deg = np.degrees(np.arccos(np.clip((np.trace(turn, axis1=1, axis2=2) - 1) / 2, -1, 1)))
    assert deg.max() < 0.05, deg


def _walk_windows(windows):
    """What DA3 would say of a level camera walking 0.5 m per frame straight ahead, 1.6 m above
    flat ground: each window in its own world (its first frame's camera) and its own unit (0.37 m x
    (1 + first frame / 10)), depth maps (84 x 112, the processed size) of the ground in that unit.
    The frame's index is in its first pixel."""
    w, h = 112, 84
    f = (w / 2) / np.tan(np.radians(45.0))
    k = np.array([[f, 0, w / 2], [0, f, h / 2], [0, 0, 1.0]])
    v = np.arange(h)[:, None] + 0.5 - h / 2
    out = []
    for images in windows:
        first = int(images[0][0, 0, 0])
        unit = 0.37 * (1 + first / 10)
        ext = np.zeros((len(images), 3, 4))
        ext[:, :, :3] = np.eye(3)
        for j, img in enumerate(images):
            ext[j, 2, 3] = -0.5 * (int(img[0, 0, 0]) - first) * unit  # t = -R C
        ground = np.where(v > 0, 1.6 * unit * f / np.maximum(v, 1e-9), np.inf) * np.ones((1, w))
        out.append((ext, np.repeat(k[None], len(images), 0), np.repeat(ground[None], len(images), 0), (w, h)))
    return out


def test_da3_chunks_are_in_metres_where_they_see_the_ground(da3_dir, monkeypatch) -> None:
    """With the pose stage's camera height (passed as the stage passes it, beside the views'
    geometry), every chunk is scaled so that the ground its depth maps see lies that far below:
    the walk's steps come out 0.5 m whatever DA3's unit, marked metric, and the stitched track
    keeps them across chunks of different units. Without it, the unit is the first window's."""
    from vsi_wild.stages import pose as po
    from vsi_wild.stages.backends.pose import DA3PoseEstimator

    monkeypatch.setattr(DA3PoseEstimator, "run_windows", lambda self, ws: _walk_windows(ws))
    n = 9
    frames = [np.full((H, W, 3), k, np.uint8) for k in range(n)]
    opts = {"device": "cpu", "da3_model_dir": str(da3_dir), "da3_window": 3, "da3_overlap": 1}
    stage = {h: po.PoseParams(camera_height=h).estimator_options(90.0).as_options() for h in (1.6, None)}
    metric = create("pose_estimator", "da3", **stage[1.6], **opts)  # the options the pose stage passes
    unscaled = create("pose_estimator", "da3", **stage[None], **opts)
    batch = FrameBatch(
        "walk_front", frames, [k / 2 for k in range(n)], [15 * k for k in range(n)], list(range(n)), 30.0
    )

    def steps(ext: np.ndarray) -> np.ndarray:
        c = -np.einsum("nji,nj->ni", ext[:, :, :3], ext[:, :, 3])
        return np.linalg.norm(np.diff(c, axis=0), axis=1)

    got = metric.estimate(batch)
    np.testing.assert_allclose(steps(got.extrinsics), 0.5, rtol=1e-9)
    assert got.metric is not None and got.metric.all()
    raw = unscaled.estimate(batch)
    np.testing.assert_allclose(steps(raw.extrinsics), 0.5 * 0.37, rtol=1e-9)
    assert raw.metric is None

    items = [(k, k / 2, 15 * k, frames[k]) for k in range(n)]
    track = po.estimate_chunked(metric, iter(items), "walk_front", 30.0, 4)  # chunks of other units
    np.testing.assert_allclose(np.linalg.norm(np.diff(track.C, axis=0), axis=1), 0.5, rtol=1e-9)
    assert track.metric is not None and track.metric.all()
