"""SAM3 through our adapter: sam3's real video model (860M parameters) built with random weights,
saved as the state dict the production loader reads (facebook/sam3 ``sam3.pt`` layout:
``detector.*`` + ``tracker.*``), loaded from the configured path, run on CPU (our CUDA->CPU shim)
on two tiny frames (sam3 resizes every frame to 1008 x 1008 internally: the cost is per frame, so
each test runs as few frames as it needs). The shared-backbone path (one image-encoder pass per
frame for all concepts) is checked against the per-concept path by the GPU check's segment part,
run here in its reduced form: the same records, bit for bit, and the encoder's calls counted per
frame by a spy on sam3's own encoder.

Heavy: ~6 GB RSS and minutes of CPU. Run alone: ``pytest -m models tests/test_backends_segment.py``.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import random_weights

from vsi_wild.errors import MissingWeights, UnitError
from vsi_wild.stages.backends.base import FrameBatch, create
from vsi_wild.stages.backends.segment import detection_scores

pytestmark = [pytest.mark.models, pytest.mark.slow]

H, W = 48, 64
NEED_GB = 9.0  # model built for the checkpoint + the adapter's model, one after the other


def _available_gb() -> float:
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: line.split()[1] for line in f}
    return int(info["MemAvailable"]) / 2**20


@pytest.fixture(scope="module")
def sam3_checkpoint(tmp_path_factory: pytest.TempPathFactory):
    if _available_gb() < NEED_GB:
        pytest.skip(f"SAM3 on CPU needs ~{NEED_GB} GB free memory; {_available_gb():.1f} GB available")
    path = tmp_path_factory.mktemp("sam3") / "sam3.pt"
    extra_buffers = random_weights.sam3_checkpoint(path)
    return path, extra_buffers


# With random weights SAM3's detection scores are nearly constant (on one machine the 200 queries
# for "chair" on the frame below scored 0.1809-0.1843, the top four 1e-4 apart), and they move by
# more than their gaps between CPUs (oneDNN picks other kernels): a fixed threshold let three
# detections through here and none on CI's machine. So the test measures the scores on this machine
# first (sam3's detector, before NMS) and puts the threshold in the gap after the third: a few
# detections (NMS on all 200 would need a 26 GB IoU matrix).
N_DETECTIONS = 3


def _detector_scores(seg, batch: FrameBatch, concept: str | list[str]) -> np.ndarray:
    """sam3's detection scores on the batch's frames, as its detector computes them (before NMS),
    for one concept or several."""
    return detection_scores(seg, lambda: seg.segment(batch, [concept] if isinstance(concept, str) else concept))


def _segmenter(path, threshold: float, **options):
    """The checkpoint's segmenter (one loaded model, cached by path) with ``threshold`` as both its
    detection and its new-track threshold; its image trunk remembers what it computed (below)."""
    seg = create(
        "segmenter",
        "sam3",
        device="cpu",
        sam3_checkpoint=str(path),
        sam3_score_threshold=threshold,
        sam3_new_det_threshold=threshold,
        **options,
    )
    _remember_trunk_outputs(seg.model)
    return seg


def _remember_trunk_outputs(model) -> None:
    """The module's tests run SAM3's ViT trunk on the same pixels again and again (a probe, then the
    run it sets the threshold for; one frame under several concepts): 40-60 s a frame on two CPU
    cores, most of the module's time. The trunk is a deterministic function of its input, and what
    these tests check is the adapter around it, so a call with an input already seen (same dtype,
    shape and bytes) gets copies of that call's outputs. The encoder calls the GPU check counts are
    one level up (``backbone.forward_image``) and still happen."""
    import hashlib

    trunk = model.detector.backbone.vision_backbone.trunk
    if "forward" in vars(trunk):
        return
    real_forward, seen = trunk.forward, {}

    def forward(x):
        key = (x.dtype, tuple(x.shape), hashlib.sha256(x.detach().float().cpu().numpy().tobytes()).hexdigest())
        if key not in seen:
            seen[key] = real_forward(x)
        return [t.clone() for t in seen[key]]

    trunk.forward = forward


def _probe(path, **options):
    """The segmenter letting no detection through (thresholds 1.0): its scores are measured,
    nothing is tracked."""
    return _segmenter(path, 1.0, **options)


def _threshold_after(scores: np.ndarray, n: int) -> float:
    """A threshold in the first gap at or after the n-th highest score."""
    top = np.unique(scores)[::-1]
    assert len(top) > n, f"the random model's scores are too flat: {top[:10]}"
    return float((top[n - 1] + top[n]) / 2)


def test_sam3_segments_through_our_adapter(sam3_checkpoint, tmp_path) -> None:
    import torch

    path, extra_buffers = sam3_checkpoint
    rng = np.random.default_rng(0)
    frame = (rng.random((H, W, 3)) * 255).astype(np.uint8)
    # the same picture twice: the second frame's scores equal the first's, so detections stay few
    batch = FrameBatch("vid_front", [frame, frame.copy()], [0.0, 0.5], [0, 15], [0, 1], 30.0)
    # the detector sees no tracking state, so the second frame scores as the first: one is probed
    probe = _probe(path)
    first = FrameBatch("vid_front", batch.images[:1], [0.0], [0], [0], 30.0)
    threshold = _threshold_after(_detector_scores(probe, first, "chair"), N_DETECTIONS)
    # the same loaded model (cached by path), now with the measured threshold
    seg = _segmenter(path, threshold)
    assert seg.model is probe.model
    state = seg.model.state_dict()
    saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    assert state.keys() == saved.keys()
    for name in ("detector.backbone.vision_backbone.trunk.blocks.0.attn.qkv.weight", "tracker.maskmem_tpos_enc"):
        assert torch.equal(state[name], saved[name].float())  # the configured file's weights
    buffers = dict(seg.model.named_buffers())
    for name, value in extra_buffers.items():
        assert torch.equal(buffers[name], value)
    del state, saved

    records = seg.segment(batch, ["chair", "chair"])  # a repeated concept is prompted once
    assert records, "the random model must produce masks for the test to bite"
    assert {r.concept for r in records} == {"chair"}
    for r in records:
        assert r.frame_pos in (0, 1)
        assert r.mask.shape == (H, W) and r.mask.dtype == np.bool_ and r.mask.any()
        ys, xs = np.nonzero(r.mask)
        assert r.box == (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        assert 0.0 <= r.score <= 1.0
    # one local id per (concept, sam3 track), never shared between concepts
    by_track: dict[tuple[str, int], set[int]] = {}
    for r in records:
        by_track.setdefault((r.concept, r.extra["sam3_obj_id"]), set()).add(r.local_id)
    assert all(len(ids) == 1 for ids in by_track.values())
    concept_of_id = {}
    for r in records:
        assert concept_of_id.setdefault(r.local_id, r.concept) == r.concept
    # at most one record per (frame, local id)
    keys = [(r.frame_pos, r.local_id) for r in records]
    assert len(keys) == len(set(keys))

    # the segment stage's clip folder: sam3 reads the JPEGs itself (no copy of the clip in memory)
    import cv2

    from vsi_wild.stages.segment import JpegFrames

    paths = [tmp_path / f"{i:05d}.jpg" for i in range(2)]
    for p, img in zip(paths, batch.images, strict=True):
        cv2.imwrite(str(p), cv2.cvtColor(img, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 100])
    folder_batch = FrameBatch("vid_front", JpegFrames(paths), [0.0, 0.5], [0, 15], [0, 1], 30.0)
    # the probe (no detection through: the decoded JPEGs are other pixels, whose scores no threshold
    # measured above would hold to a few) shows what sam3 read: the folder, and both of its frames
    seen = []
    real_init = probe.model.init_state

    def spy(resource_path, **kw):
        seen.append(resource_path)
        return real_init(resource_path=resource_path, **kw)

    probe.model.init_state = spy
    try:
        folder_scores = _detector_scores(probe, folder_batch, "chair")
    finally:
        del probe.model.init_state
    assert seen == [str(tmp_path)]
    assert folder_scores.size == 2 * 200  # sam3's 200 queries on each of the folder's two frames


def test_sam3_checkpoint_errors_name_the_config_key(tmp_path) -> None:
    import torch

    with pytest.raises(MissingWeights) as e:
        create("segmenter", "sam3", device="cpu", weights_dir=str(tmp_path))
    assert "models.sam3_checkpoint" in str(e.value) and str(tmp_path / "sam3/sam3.pt") in str(e.value)
    # a file of the wrong kind fails before the expensive build, naming the key
    torch.save({"model": {"backbone.weight": torch.zeros(1)}}, tmp_path / "other.pt")
    with pytest.raises(UnitError, match="models.sam3_checkpoint"):
        create("segmenter", "sam3", device="cpu", sam3_checkpoint=str(tmp_path / "other.pt"))
    # a legacy (pre-zip) torch file cannot be memory-mapped: it is still read (and judged by content)
    torch.save({"backbone.weight": torch.zeros(1)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(UnitError, match="no detector"):
        create("segmenter", "sam3", device="cpu", sam3_checkpoint=str(tmp_path / "legacy.pt"))
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UnitError, match="models.sam3_checkpoint"):
        create("segmenter", "sam3", device="cpu", sam3_checkpoint=str(tmp_path / "junk.pt"))


def test_sam3_segments_drawn_boxes_through_its_box_prompt(sam3_checkpoint) -> None:
    """A drawn box goes through sam3's own add_prompt (a positive box exemplar, normalised xywh, with
    the concept's text, or "visual" without one); every mask that comes back is the prompt's."""
    from vsi_wild.stages.backends.base import BoxPrompt, takes_box_prompts

    path, _ = sam3_checkpoint
    rng = np.random.default_rng(1)
    frame = (rng.random((H, W, 3)) * 255).astype(np.uint8)
    batch = FrameBatch("vid_front", [frame, frame.copy()], [0.0, 0.5], [0, 15], [0, 1], 30.0)
    prompts = [BoxPrompt("chair", 0, (10.0, 20.0, 60.0, 44.0)), BoxPrompt(None, 1, (0.0, 0.0, W + 5.0, 40.0))]
    # a threshold measured on this machine, as in the test above (every one of 200 detections through
    # NMS would need a 26 GB IoU matrix); the probe lets none through
    probe = _probe(path)
    threshold = _threshold_after(detection_scores(probe, lambda: probe.segment_boxes(batch, prompts)), N_DETECTIONS)
    seg = _segmenter(path, threshold)
    assert takes_box_prompts(seg)
    calls = []
    real = seg.model.add_prompt

    def spy(state, **kw):
        calls.append(kw)
        return real(state, **kw)

    seg.model.add_prompt = spy
    try:
        records = seg.segment_boxes(batch, prompts)
    finally:
        del seg.model.add_prompt
    assert records, "the measured threshold lets detections through: the checks below must bite"
    assert [c["frame_idx"] for c in calls] == [0, 1] and [c["text_str"] for c in calls] == ["chair", "visual"]
    for c in calls:
        (box,) = c["boxes_xywh"]
        assert all(0.0 <= v <= 1.0 for v in box) and c["box_labels"] == [1]
    assert calls[0]["boxes_xywh"][0] == pytest.approx([10 / W, 20 / H, 50 / W, 24 / H])
    assert calls[1]["boxes_xywh"][0] == pytest.approx([0.0, 0.0, 1.0, 40 / H])  # clipped to the frame
    for r in records:
        assert r.local_id in (0, 1) and r.frame_pos == prompts[r.local_id].frame_pos
        assert r.mask.shape == (H, W) and r.mask.any()


def test_a_changed_sam3_is_one_clear_error_before_any_unit(monkeypatch) -> None:
    from vsi_wild.stages.backends import base
    from vsi_wild.stages.backends import segment as S
    from vsi_wild.stages.backends.params import ModelsParams, backend_problems

    spec = base.spec("segmenter", "sam3")
    assert S.sam3_problems() == []  # the installed sam3 is the verified one
    assert not any("internals" in p for p in backend_problems(spec, ModelsParams()))
    name = "sam3.model.sam3_image:Sam3Image._get_img_feats"
    monkeypatch.setitem(S.SAM3_INTERNALS, name, "0" * 16)
    problems = backend_problems(spec, ModelsParams())
    changed = [p for p in problems if name in p]
    assert len(changed) == 1 and "tests/test_backends_segment.py" in changed[0]
    with pytest.raises(UnitError, match="_get_img_feats") as e:  # before the weights are even looked at
        create("segmenter", "sam3", device="cpu", sam3_checkpoint="/nonexistent/sam3.pt")
    assert e.value.retryable is False
    monkeypatch.setattr("vsi_wild.stages.backends.params.package_version", lambda name: "9.9.9")
    assert any("sam3 9.9.9 is installed" in p and "sam3==0.1.4" in p for p in S.sam3_problems())


def test_the_gpu_check_segment_part_runs_in_its_reduced_form(sam3_checkpoint, tmp_path, capsys) -> None:
    """`bench/gpu_check.py --cpu --tiny --stages segment` on this module's random checkpoint (the
    model loaded above, not another build): both paths run, the encoder's calls per frame are
    printed for each, the shared path's records are the per-concept path's, the JSON is written.
    Last in the module: the check empties the load-once cache when it is done."""
    import json

    from conftest import load_bench

    path, _ = sam3_checkpoint
    gpu_check = load_bench("gpu_check")
    out = tmp_path / "gpu_check.json"
    report = gpu_check.main(
        [
            "--cpu",
            "--tiny",
            "--stages",
            "segment",
            "--sam3-checkpoint",
            str(path),
            "--out",
            str(out),
            "--budget-s",
            "1e9",
        ]
    )
    assert report["errors"] == {}
    assert json.loads(out.read_text()) == report
    rows = {r["variant"]: r for r in report["stages"]}
    old, new = rows["per-concept (old)"], rows["shared encoder (new)"]
    concepts = old["extra"]["concepts"]
    assert concepts == new["extra"]["concepts"] >= 2 and old["frames"] == new["frames"] >= 2
    assert old["extra"]["encoder_calls_per_frame"] == concepts and new["extra"]["encoder_calls_per_frame"] == 1.0
    assert old["extra"]["distinct_frames_encoded"] == new["extra"]["distinct_frames_encoded"] == new["frames"]
    assert new["production"] and not old["production"]  # the pipeline runs the shared path
    checks = {c["what"]: c for c in report["comparisons"] if c["stage"] == "segment"}
    same = checks["shared encoder vs per-concept (same precision)"]
    assert same["ok"] is True and same["measures"]["identical"] == same["measures"]["records_ref"] > 0
    assert checks["bf16 vs fp32 (shared encoder)"]["ok"] is None  # the CPU runs fp32 only: unmeasured
    printed = capsys.readouterr().out
    assert f"segment_encoder_calls_per_frame: {concepts:.2f}  (per-concept (old)" in printed
    assert "segment_encoder_calls_per_frame: 1.00  (shared encoder (new)" in printed
    assert "check segment: bf16 vs fp32 (shared encoder): UNMEASURED" in printed
