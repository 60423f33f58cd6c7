"""Segmenters (kind ``segmenter``).

``sam3``: SAM3 (PyPI ``sam3`` 0.1.4, pinned) video model, text prompts. Each kept concept prompts
the clip's 2 FPS frames with its name on frame 0 and propagates forward; SAM3 detects on every
frame and tracks, so objects appearing later get ids too. Track ids are clip-local and stable
across the clip; we renumber them so that ids are unique across concepts in one clip
(``local_id``), keeping SAM3's own id in ``extra["sam3_obj_id"]``.

How it is loaded: ``build_sam3_video_model(checkpoint_path=None, load_from_HF=False)`` (never the
hub), then the state dict of ``models.sam3_checkpoint`` (facebook/sam3 ``sam3.pt``) loaded strictly,
memory-mapped. The wheel lacks the BPE vocabulary; open_clip ships the same file
(``bpe_simple_vocab_16e6.txt.gz``), so ``bpe_path`` points there. We drive the model directly
(``init_state`` / ``add_prompt`` / ``propagate_in_video``) rather than ``Sam3VideoPredictor``,
which calls ``.cuda()`` and keeps a global session table. A clip's frames go in as the folder of
JPEGs the segment stage writes (sam3 decodes them one at a time), or as PIL images when they are
arrays (``sam3_frames``).

**One image-encoder pass per frame for all concepts** (``models.sam3_shared_backbone``, the
default). A frame's vision-backbone output (``detector.backbone.forward_image``: the SAM3 and the
tracker's feature pyramids) does not depend on the text prompt, but sam3 computes it inside each
session's detector call, and ``add_prompt`` resets a session, so prompting concept after concept
ran the encoder once per frame and concept. Here every concept gets its own session (``init_state``
once, then copies sharing the clip's image tensor), the sessions are stepped through the clip
together, and each frame's backbone output is computed once (``SharedImageFeatures``) and handed to
every session's detector in ``backbone_out``, the way sam3's own image API reuses ``set_image``'s
features for each text prompt: ``Sam3Image._get_img_feats`` takes precomputed ``backbone_fpn``
with an ``id_mapping`` instead of running the encoder. The tracker reads the features from its
session's ``feature_cache``, which the detector fills, so it never runs the encoder either. A frame's
features are dropped once every session has used them (sam3's hotstart delay keeps the sessions
~16 frames apart at most). Same arithmetic, same results: on the CPU with random weights the
records equal the per-concept path's exactly (tests/test_backends_segment.py).
``models.sam3_shared_backbone: false`` is the per-concept path (one session, re-prompted).

These rest on sam3 internals, not only its public API, so they are pinned: the installed version
and a digest of the source of every sam3 function the shared path relies on are checked before
any unit runs (``sam3_problems``, the backend's requirement check): a changed package is one clear
error naming what changed, never a silently different result.

Precision: sam3's tracker enters a process-wide ``torch.autocast("cuda", bfloat16)`` when it is
built (and leaves it entered), so on a GPU SAM3 ran in bf16 only in the thread that built it, and
every model used later in that thread did too. We leave that context right after the build and run
SAM3 under our own: ``models.sam3_precision`` ``bf16`` (sam3's own choice, the default) or ``fp32``.

On CPU (tests, no GPU) sam3 0.1.4 hard-codes CUDA in places (``device="cuda"`` in
position_encoding/decoder, ``.cuda()``, ``pin_memory()``, bf16 casts); ``cpu_shim()`` is a
TorchFunctionMode that maps those to CPU / fp32 without editing the library, and the CPU
connected-components fallback, which crashes on an empty batch (zero detections), is wrapped.
Precision there is always fp32.

Cost: per frame, one image-encoder pass plus, per concept, the detector's fusion, decoder and
mask heads and the tracker (the per-concept path: everything per concept).

Boxes are xyxy in pixel-edge coordinates of the frame (a full-frame box is (0, 0, W, H)), like
ultralytics' boxes: the mask's pixel bounds, max + 1.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vsi_wild.errors import UnitError
from vsi_wild.stages.backends import weights as W
from vsi_wild.stages.backends.base import BackendContext, BoxPrompt, FrameBatch, SegmentRecord, register
from vsi_wild.stages.backends.detect import check_rgb_frames
from vsi_wild.stages.backends.params import LoadedModel, ModelsParams, as_params, load_once, require

SAM3_IMAGE_SIZE = 1008  # the only resolution sam3 0.1.4 accepts
SAM3_VERSION = "0.1.4"  # pinned in pyproject.toml; the internals below are this version's

# The sam3 functions whose behaviour the adapter relies on beyond the public API (the shared
# backbone path and the precision fix): sha256 of each one's source in sam3 0.1.4. A different
# digest means the package changed under us: re-run tests/test_backends_segment.py (the shared
# path's records against the per-concept path's) before updating a digest here.
SAM3_INTERNALS = {
    # the state a session is, copied per concept with the clip's image tensor shared
    "sam3.model.sam3_video_inference:Sam3VideoInference.init_state": "38b2eb4622ce1812",
    "sam3.model.sam3_video_inference:Sam3VideoInference._construct_initial_input_batch": "b78505cebe2a74cd",
    "sam3.model.sam3_video_inference:Sam3VideoInference.reset_state": "0ff430b6a2c58447",
    "sam3.model.sam3_video_inference:Sam3VideoInference.add_prompt": "81656e97f01d6482",
    "sam3.model.sam3_video_inference:Sam3VideoInference.propagate_in_video": "e1e6500c9e830ce3",
    "sam3.model.sam3_video_inference:Sam3VideoInferenceWithInstanceInteractivity.add_prompt": "4175a6dcbfdfbb9c",
    "sam3.model.sam3_video_inference:Sam3VideoInferenceWithInstanceInteractivity.propagate_in_video": "90b94231000976f3",  # noqa: E501  a qualified name
    # cached_frame_outputs: written per frame, read only by interactive refinement (dropped per frame)
    "sam3.model.sam3_video_inference:Sam3VideoInference._run_single_frame_inference": "a2564334e6845a63",
    "sam3.model.sam3_video_inference:Sam3VideoInference._cache_frame_outputs": "edfbe8f53cc7dc77",
    "sam3.model.sam3_video_inference:Sam3VideoInference._build_tracker_output": "26f94d3aab5e86e1",
    # backbone_out = {img_batch_all_stages, text features} handed to the detector per frame
    "sam3.model.sam3_video_base:Sam3VideoBase.run_backbone_and_detection": "be1933b22dce85d5",
    "sam3.model.sam3_image:Sam3ImageOnVideoMultiGPU.forward_video_grounding_multigpu": "7f5b5afa8d701277",
    "sam3.model.sam3_image:Sam3ImageOnVideoMultiGPU._build_multigpu_buffer_next_chunk": "62e665008e1af0ae",
    # precomputed backbone_fpn + id_mapping are used instead of running the encoder
    "sam3.model.sam3_image:Sam3Image.forward_grounding": "9a836f6407107f21",
    "sam3.model.sam3_image:Sam3Image._encode_prompt": "0091c6f4517a20ae",
    "sam3.model.sam3_image:Sam3Image._get_img_feats": "d476a6d048d19d36",
    "sam3.model.vl_combiner:SAM3VLBackbone.forward_image": "aaab744e548943df",
    "sam3.model.vl_combiner:SAM3VLBackbone._forward_image_no_act_ckpt": "58284ff977f4c8a6",
    # the tracker reads features from the session's feature_cache only (no backbone of its own)
    "sam3.model.sam3_tracking_predictor:Sam3TrackerPredictor._get_image_feature": "3b040fe3fa9fb130",
    # the autocast context entered at build (left by build_sam3_video)
    "sam3.model.sam3_tracking_predictor:Sam3TrackerPredictor.__init__": "ac418f0e5315af3e",
}


def _source_digest(qualified: str) -> str:
    import importlib

    module, _, path = qualified.partition(":")
    obj: Any = importlib.import_module(module)
    for part in path.split("."):
        obj = getattr(obj, part)
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()[:16]


def sam3_problems() -> list[str]:
    """Why the installed sam3 is not the one this adapter was written and verified against: its
    version, and each relied-upon function whose source differs or is gone. Empty when all is as
    pinned. Checked before any unit (the backend's requirement check) and when the model loads."""
    from vsi_wild.stages.backends.params import package_version

    installed = package_version("sam3")
    if installed == "absent":
        return []  # the missing package is reported by the package check
    problems = []
    if installed != SAM3_VERSION:
        problems.append(
            f"sam3 {installed} is installed; the adapter is pinned to sam3=={SAM3_VERSION} "
            f"(pip install sam3=={SAM3_VERSION})"
        )
    changed = []
    for name, digest in SAM3_INTERNALS.items():
        try:
            found = _source_digest(name)
        except Exception as e:  # noqa: BLE001 - gone or unreadable: either way not what was verified
            changed.append(f"{name} ({type(e).__name__}: {e})")
            continue
        if found != digest:
            changed.append(f"{name} (source digest {found}, verified {digest})")
    if changed:
        problems.append(
            "sam3's internals that the segmenter relies on differ from the verified sam3 "
            f"{SAM3_VERSION}: "
            + "; ".join(changed)
            + ". Re-verify with tests/test_backends_segment.py and update SAM3_INTERNALS "
            "in stages/backends/segment.py"
        )
    return problems


def bpe_path() -> str:
    """The CLIP BPE vocabulary sam3 needs (missing from its wheel; open_clip ships the same file)."""
    open_clip = require("open_clip", "open-clip-torch", "sam3")
    p = Path(open_clip.__file__).parent / "bpe_simple_vocab_16e6.txt.gz"
    if not p.is_file():
        raise UnitError(f"open_clip's BPE vocabulary is missing: {p}", kind="missing_dependency")
    return str(p)


# ------------------------------------------------------------------------------- CPU shim
def _cpu_mode_class() -> type:
    import torch
    from torch.overrides import TorchFunctionMode

    def is_cuda(d: Any) -> bool:
        return (isinstance(d, str) and d.startswith("cuda")) or (isinstance(d, torch.device) and d.type == "cuda")

    def fix(v: Any) -> Any:
        if is_cuda(v):
            return torch.device("cpu")
        if v is torch.bfloat16:  # no bf16 autocast on CPU: keep fp32 so dtypes stay consistent
            return torch.float32
        return v

    noops = {torch.Tensor.cuda, torch.Tensor.pin_memory}

    class CudaToCpu(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if func in noops:
                return args[0]
            if "device" in kwargs or "dtype" in kwargs:
                kwargs = {k: (fix(v) if k in ("device", "dtype") else v) for k, v in kwargs.items()}
            if func is torch.Tensor.to:
                args = (args[0], *(fix(a) for a in args[1:]))
            return func(*args, **kwargs)

    return CudaToCpu


_CPU_MODE: type | None = None


def _patch_cpu_connected_components() -> None:
    """sam3's CPU connected-components stacks an empty list when nothing was detected."""
    import torch
    from sam3.perflib import connected_components as cc

    if getattr(cc.connected_components_cpu, "_vsi_safe", False):
        return
    original = cc.connected_components_cpu

    def safe(input_tensor: Any) -> Any:
        if input_tensor.shape[0] == 0:
            labels = torch.zeros(input_tensor.shape, dtype=torch.int64, device=input_tensor.device)
            return labels, labels.clone()
        return original(input_tensor)

    safe._vsi_safe = True  # type: ignore[attr-defined]  # a mark on the function: patched once
    cc.connected_components_cpu = safe


@contextlib.contextmanager
def cpu_shim(device: str) -> Iterator[None]:
    """Run sam3 on CPU: CUDA placements -> CPU, bf16 -> fp32 (no-op on a CUDA device)."""
    global _CPU_MODE
    if device != "cpu":
        yield
        return
    if _CPU_MODE is None:
        _CPU_MODE = _cpu_mode_class()
    _patch_cpu_connected_components()
    with _CPU_MODE():
        yield


@contextlib.contextmanager
def skip_random_init() -> Iterator[None]:
    """Skip the random initialisation of parameters (``uniform_``/``normal_``/``erfinv_`` become
    no-ops): half of the minute sam3 takes to build goes into initialising 860M parameters that
    the checkpoint then overwrites. Only for a build followed by a strict load of every parameter
    and persistent buffer (``load_sam3_video``)."""
    import torch
    from torch.overrides import TorchFunctionMode

    skipped = {torch.Tensor.uniform_, torch.Tensor.normal_, torch.Tensor.erfinv_}

    class SkipInit(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func in skipped:
                return args[0]
            return func(*args, **(kwargs or {}))

    with SkipInit():
        yield


def build_sam3_video(device: str, init_weights: bool = True) -> Any:
    """SAM3's video model with sam3's own builder, no checkpoint loaded. With ``init_weights`` the
    parameters are randomly initialised as sam3 does (except two ``torch.empty`` tensors of the
    text encoder), without it they are left uninitialised for a checkpoint to fill."""
    require("sam3", "sam3", "sam3")
    from sam3.model_builder import build_sam3_video_model

    with cpu_shim(device), contextlib.nullcontext() if init_weights else skip_random_init():
        model = build_sam3_video_model(checkpoint_path=None, load_from_HF=False, bpe_path=bpe_path(), device="cpu")
    leave_build_autocast(model)
    return model


def leave_build_autocast(model: Any) -> None:
    """sam3's tracker enters ``torch.autocast("cuda", bfloat16)`` in its constructor and never
    leaves it: from then on everything in the building thread (other models included) ran under
    bf16 autocast on a GPU, and nothing in other threads did. Leave it (same thread as the build,
    right after it); ``Sam3Segmenter`` runs SAM3 under the precision it is configured with."""
    ctx = getattr(getattr(model, "tracker", None), "bf16_context", None)
    if ctx is not None and not getattr(model.tracker, "_vsi_left_autocast", False):
        ctx.__exit__(None, None, None)
        model.tracker._vsi_left_autocast = True


def load_sam3_video(path: Path, device: str) -> Any:
    import torch

    try:
        try:  # memory-mapped: no second copy of 3.4 GB while the model is filled
            state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap" not in str(e):
                raise
            state = torch.load(str(path), map_location="cpu", weights_only=True)  # legacy format
    except Exception as e:  # not a torch file at all
        raise UnitError(
            f"{path} cannot be read as a SAM3 checkpoint (config key `models.sam3_checkpoint`): {e}",
            kind="missing_weights",
            retryable=False,
        ) from None
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]
    # check the format before the ~1 minute build of an 860M-parameter model
    if (
        not isinstance(state, dict)
        or not any(str(k).startswith("detector.") for k in state)
        or not any(str(k).startswith("tracker.") for k in state)
    ):
        raise UnitError(
            f"{path} is not a SAM3 video checkpoint: no detector.* / tracker.* weights "
            f"(config key `models.sam3_checkpoint`; expected facebook/sam3 sam3.pt)",
            kind="missing_weights",
            retryable=False,
        )
    model = build_sam3_video(device, init_weights=False)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise UnitError(
            f"{path} is not a SAM3 video checkpoint (config key `models.sam3_checkpoint`): {str(e)[:500]}",
            kind="missing_weights",
            retryable=False,
        ) from None
    del state
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        raise UnitError(
            f"{path}: non-finite weights in {bad[:5]} (config key `models.sam3_checkpoint`)",
            kind="missing_weights",
            retryable=False,
        )
    with cpu_shim(device):
        model = model.to(device).eval()
    return model


def mask_box(mask: np.ndarray) -> tuple[float, float, float, float]:
    ys = np.flatnonzero(mask.any(axis=1))
    xs = np.flatnonzero(mask.any(axis=0))
    return (float(xs[0]), float(ys[0]), float(xs[-1] + 1), float(ys[-1] + 1))


def sam3_frames(batch: FrameBatch) -> str | list[Any]:
    """What sam3's ``init_state`` reads: the clip's JPEG folder when the frames are exactly the
    files of one folder, named by their position (sam3 sorts them by that number and decodes them
    one by one: no copy of the clip in memory); otherwise the frames as PIL images."""
    from PIL import Image

    paths = getattr(batch.images, "paths", None)
    folder = getattr(batch.images, "folder", None)
    if (
        paths
        and folder is not None
        and all(p.stem.isdigit() for p in paths)
        and [int(p.stem) for p in paths] == sorted({int(p.stem) for p in paths})
        and sorted(os.listdir(folder)) == sorted(p.name for p in paths)
    ):
        sizes = set()
        for p in paths:
            with Image.open(p) as img:  # the header only
                if img.mode != "RGB":
                    raise UnitError(f"video {batch.video_id}: frame {p} is {img.mode}, not RGB")
                sizes.add(img.size[::-1])
        if len(sizes) != 1:
            raise UnitError(f"video {batch.video_id}: frames of different sizes in one clip: {sorted(sizes)}")
        return str(folder)
    check_rgb_frames(batch)
    shapes = {img.shape[:2] for img in batch.images}
    if len(shapes) != 1:
        raise UnitError(f"video {batch.video_id}: frames of different sizes in one clip: {sorted(shapes)}")
    return [Image.fromarray(img) for img in batch.images]


class SharedImageFeatures:
    """A clip's per-frame image-encoder outputs, computed once and handed to every concept
    session's detector (the encoder call sam3 makes in ``Sam3Image._get_img_feats``, with the
    same input preparation, moved in front of the sessions).

    ``install(detector)`` wraps the detector's ``forward_grounding`` for the duration: a call
    whose ``backbone_out`` carries no image features gets this frame's (computed on first use)
    together with the ``id_mapping`` that makes ``_get_img_feats`` index them instead of running
    the encoder. ``session`` names the session being stepped; a frame's features are dropped once
    every session has used them. ``encoder_calls`` counts encoder passes per frame."""

    def __init__(self, detector: Any, n_sessions: int):
        self.detector = detector
        self.n_sessions = n_sessions
        self.session = 0
        self._frames: dict[int, tuple[dict[str, Any], set[int]]] = {}
        self.encoder_calls: dict[int, int] = {}
        self.peak_frames = 0  # the most frames whose features were held at once

    def _features(self, backbone_out: dict[str, Any], frame: int) -> dict[str, Any]:
        import torch

        hit = self._frames.get(frame)
        if hit is None:
            img_batch = backbone_out["img_batch_all_stages"]
            device = self.detector.device
            # as _get_img_feats prepares one frame: frames may be stored in fp16 and on the CPU
            image = img_batch[frame].unsqueeze(0).to(dtype=torch.float32, device=device)
            feats = self.detector.backbone.forward_image(image)
            self.encoder_calls[frame] = self.encoder_calls.get(frame, 0) + 1
            id_mapping = torch.full((len(img_batch),), -1, dtype=torch.long, device=device)
            id_mapping[frame] = 0
            hit = self._frames[frame] = ({**feats, "id_mapping": id_mapping}, set())
            self.peak_frames = max(self.peak_frames, len(self._frames))
        feats, used = hit
        used.add(self.session)
        if len(used) >= self.n_sessions:
            del self._frames[frame]
        # each caller gets its own dict and lists (the tensors are shared and only read)
        out = {k: (list(v) if isinstance(v, list) else v) for k, v in feats.items()}
        if isinstance(sam2 := out.get("sam2_backbone_out"), dict):
            out["sam2_backbone_out"] = {k: (list(v) if isinstance(v, list) else v) for k, v in sam2.items()}
        return out

    @contextlib.contextmanager
    def install(self) -> Iterator[None]:
        det = self.detector
        had_own = "forward_grounding" in vars(det)
        inner = det.forward_grounding

        def forward_grounding(
            backbone_out: dict[str, Any],
            find_input: Any,
            find_target: Any = None,
            geometric_prompt: Any = None,
            **kwargs: Any,
        ) -> Any:
            if "backbone_fpn" not in backbone_out and "img_batch_all_stages" in backbone_out:
                img_ids = find_input.img_ids
                if img_ids.numel() != 1:
                    raise RuntimeError(
                        f"sam3 asked for the features of {img_ids.numel()} frames at once; "
                        "the shared-backbone path serves one frame per detector call"
                    )
                backbone_out = {**backbone_out, **self._features(backbone_out, int(img_ids.item()))}
            return inner(backbone_out, find_input, find_target, geometric_prompt, **kwargs)

        det.forward_grounding = forward_grounding
        try:
            yield
        finally:
            if had_own:
                det.forward_grounding = inner
            else:
                del det.forward_grounding
            self._frames.clear()


def copy_session(template: dict[str, Any]) -> dict[str, Any]:
    """A fresh session like ``template`` (an ``init_state`` result not yet prompted) that shares
    its frames: everything is copied except the image tensor(s) and the read-only constants."""
    batch = template["input_batch"]
    shared: list[Any] = [batch.img_batch, template.get("constants")]
    if isinstance(batch.img_batch, (list, tuple)):
        shared += list(batch.img_batch)
    memo = {id(x): x for x in shared if x is not None}
    return copy.deepcopy(template, memo)


class Sam3Segmenter:
    name = "sam3"

    def __init__(self, params: ModelsParams):
        self.params = params
        require("sam3", "sam3", self.name)
        require("torch", "torch", self.name)
        problems = sam3_problems()
        if problems:
            raise UnitError("; ".join(problems), kind="missing_dependency", retryable=False)
        path = params.weight_path("sam3_checkpoint", hint="facebook/sam3 sam3.pt")
        device = params.torch_device()
        self._loaded: LoadedModel = load_once(
            ("sam3_video", str(path.resolve()), device), lambda: (load_sam3_video(path, device), device)
        )

        self.last_shared: SharedImageFeatures | None = None  # the last clip's (shared path)

    @property
    def model(self) -> Any:
        return self._loaded.model

    def _set_thresholds(self) -> None:
        """This segmenter's thresholds on the model, which the load-once cache shares between segmenters
        (a threshold left by another one's call must not apply to this one's)."""
        self._loaded.model.score_threshold_detection = self.params.sam3_score_threshold
        self._loaded.model.new_det_thresh = self.params.sam3_new_det_threshold

    def iter_segments(self, batch: FrameBatch, concepts: Sequence[str]) -> Iterator[SegmentRecord]:
        """The clip's instance masks, streamed (a 5-minute clip at 1080p holds gigabytes of
        full-frame masks). Shared-backbone path: frame by frame, each frame's concepts in turn;
        per-concept path: concept by concept, frame by frame. ``local_id`` is unique per
        (concept, SAM3 track) in the clip, numbered in order of first appearance in the stream;
        ``segment`` gives both paths' records in one canonical order and numbering. The model is
        locked until the iterator is exhausted or closed."""
        concepts = list(dict.fromkeys(str(c) for c in concepts))
        if not concepts or len(batch.images) == 0:
            return
        images = sam3_frames(batch)
        with self._loaded.lock:
            if self.params.sam3_shared_backbone:
                yield from self._iter_shared(images, len(batch.images), concepts)
            else:
                yield from self._iter_per_concept(images, len(batch.images), concepts)

    def _start(self, images: str | list[Any]) -> dict[str, Any]:
        model, p = self._loaded.model, self.params
        with self._context():
            self._set_thresholds()
            return model.init_state(resource_path=images, offload_video_to_cpu=p.sam3_offload_video_to_cpu)

    def _steps(self, state: dict[str, Any], frames: Iterator[Any]) -> Iterator[tuple[int, dict[str, Any]]]:
        """sam3's propagation generator stepped inside our contexts, which are left before each
        yield: the shim, inference mode and autocast must not leak into the caller's code. A
        frame's entry in the session's ``cached_frame_outputs`` (its masks at video resolution, kept
        for interactive refinement, which full propagation never reads) is dropped once the frame
        is out: otherwise it holds every frame of the clip, per concept session."""
        while True:
            with self._context():
                item = next(frames, None)
            if item is None:
                return
            state["cached_frame_outputs"].pop(item[0], None)
            if item[1] is not None:
                yield item

    def _iter_per_concept(self, images: str | list[Any], n: int, concepts: list[str]) -> Iterator[SegmentRecord]:
        """One session, prompted concept after concept (``add_prompt`` resets it): the image
        encoder runs once per frame and concept."""
        model = self._loaded.model
        state = self._start(images)
        ids: dict[tuple[str, int], int] = {}
        for concept in concepts:
            with self._context():
                model.add_prompt(state, frame_idx=0, text_str=concept)  # resets the session
            frames = model.propagate_in_video(state, start_frame_idx=0, max_frame_num_to_track=n, reverse=False)
            for frame_idx, out in self._steps(state, frames):
                yield from _records(frame_idx, out, concept, ids)

    def _iter_shared(self, images: str | list[Any], n: int, concepts: list[str]) -> Iterator[SegmentRecord]:
        """One session per concept, sharing the clip's frames and each frame's image-encoder
        output (``SharedImageFeatures``), stepped through the clip together."""
        model = self._loaded.model
        template = self._start(images)
        with self._context():
            sessions = [template] + [copy_session(template) for _ in concepts[1:]]
        shared = SharedImageFeatures(model.detector, len(sessions))
        self.last_shared = shared  # for the bench and tests: encoder calls, frames held
        ids: dict[tuple[str, int], int] = {}
        with shared.install():
            for k, (state, concept) in enumerate(zip(sessions, concepts, strict=True)):
                shared.session = k
                with self._context():
                    model.add_prompt(state, frame_idx=0, text_str=concept)
            steps = [
                self._steps(
                    state, model.propagate_in_video(state, start_frame_idx=0, max_frame_num_to_track=n, reverse=False)
                )
                for state in sessions
            ]
            live = list(range(len(sessions)))
            while live:
                for k in list(live):
                    shared.session = k
                    item = next(steps[k], None)
                    if item is None:
                        live.remove(k)
                        continue
                    yield from _records(item[0], item[1], concepts[k], ids)

    @contextlib.contextmanager
    def _context(self) -> Iterator[None]:
        import torch

        device = self._loaded.device
        bf16 = device.startswith("cuda") and self.params.sam3_precision == "bf16"
        with (
            cpu_shim(device),
            torch.inference_mode(),
            torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16),
        ):
            yield

    def segment(self, batch: FrameBatch, concepts: Sequence[str]) -> list[SegmentRecord]:
        """Every record of the clip in one order whichever path made them: by concept (in the
        order given), then as streamed (frame by frame); ``local_id`` numbered in that order."""
        concepts = list(dict.fromkeys(str(c) for c in concepts))
        return canonical_records(list(self.iter_segments(batch, concepts)), concepts)

    def segment_boxes(self, batch: FrameBatch, prompts: Sequence[BoxPrompt]) -> list[SegmentRecord]:
        """A mask for each box a reviewer drew: SAM3's prompt on that frame with the box as a
        positive exemplar (normalised xywh) and the concept's text where the reviewer gave one
        ("visual": the box alone); of the objects it returns, the one whose mask's box overlaps the
        drawn box most."""
        if not prompts or not len(batch.images):
            return []
        images = sam3_frames(batch)
        h, w = batch.images[0].shape[:2]
        model, p = self._loaded.model, self.params
        out = []
        with self._loaded.lock:
            with self._context():
                self._set_thresholds()
                state = model.init_state(resource_path=images, offload_video_to_cpu=p.sam3_offload_video_to_cpu)
            for n, prompt in enumerate(prompts):
                x0, y0, x1, y1 = (min(max(v, 0.0), lim) for v, lim in zip(prompt.box, (w, h, w, h), strict=True))
                if x1 - x0 < 1 or y1 - y0 < 1:
                    continue
                with self._context():
                    _, res = model.add_prompt(
                        state,
                        frame_idx=int(prompt.frame_pos),
                        text_str=prompt.concept or "visual",
                        boxes_xywh=[[x0 / w, y0 / h, (x1 - x0) / w, (y1 - y0) / h]],
                        box_labels=[1],
                    )
                if res is None or not len(res["out_obj_ids"]):
                    continue
                masks = np.asarray(res["out_binary_masks"], dtype=bool)
                scored = [(_box_iou(mask_box(m), (x0, y0, x1, y1)), k) for k, m in enumerate(masks) if m.any()]
                if not scored:
                    continue
                best, k = max(scored)
                out.append(
                    SegmentRecord(
                        frame_pos=int(prompt.frame_pos),
                        concept=prompt.concept or "",
                        local_id=n,
                        box=mask_box(masks[k]),
                        score=float(res["out_probs"][k]),
                        mask=masks[k],
                        extra={"box_iou": best},
                    )
                )
        return out


def detection_scores(segmenter: Sam3Segmenter, run: Callable[[], object]) -> np.ndarray:
    """sam3's detection scores (sigmoid, before NMS) of every detector call while ``run()`` runs:
    what a threshold is chosen from where the scores are unknown (random weights score every query
    nearly alike, and move between CPUs by more than their gaps)."""
    detector = segmenter.model.detector
    real = detector.forward_grounding
    seen: list[np.ndarray] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        seen.append(out["pred_logits"].squeeze(-1).sigmoid().float().flatten().cpu().numpy().copy())
        return out

    detector.forward_grounding = spy
    try:
        run()
    finally:
        del detector.forward_grounding
    if not seen:
        raise RuntimeError("sam3's detector was not called")
    return np.concatenate(seen)


def _box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy
    return ix * iy / union if union > 0 else 0.0


def _records(
    frame_idx: int, out: dict[str, Any], concept: str, ids: dict[tuple[str, int], int]
) -> Iterator[SegmentRecord]:
    """One frame's output of one concept's session as records; ``ids`` numbers (concept, SAM3
    track) pairs in order of first appearance."""
    masks = np.asarray(out["out_binary_masks"], dtype=bool)
    for k, obj_id in enumerate(out["out_obj_ids"].tolist()):
        mask = masks[k]
        if not mask.any():
            continue
        local = ids.setdefault((concept, int(obj_id)), len(ids))
        yield SegmentRecord(
            frame_pos=int(frame_idx),
            concept=concept,
            local_id=local,
            box=mask_box(mask),
            score=float(out["out_probs"][k]),
            mask=mask,
            extra={"sam3_obj_id": int(obj_id)},
        )


def canonical_records(records: list[SegmentRecord], concepts: Sequence[str]) -> list[SegmentRecord]:
    """Records ordered by concept (stable: each concept's records keep their streamed order),
    ``local_id`` renumbered by first appearance in that order: the per-concept path's own
    order and numbering, which the shared path's records take too."""
    rank = {c: i for i, c in enumerate(concepts)}
    out = sorted(records, key=lambda r: rank[r.concept])
    ids: dict[tuple[str, int], int] = {}
    for r in out:
        r.local_id = ids.setdefault((r.concept, int(r.extra["sam3_obj_id"])), len(ids))
    return out


@register(
    "segmenter",
    "sam3",
    fields=("sam3_checkpoint", "sam3_score_threshold", "sam3_new_det_threshold", "sam3_precision"),
    weights=("sam3_checkpoint",),
    sources={"sam3_checkpoint": W.SAM3},
    versions=("sam3",),
    packages=(("sam3", "sam3"), ("open_clip", "open-clip-torch"), ("torch", "torch")),
    gpu=True,
    checks=sam3_problems,
)
def make_sam3(ctx: BackendContext) -> Sam3Segmenter:
    return Sam3Segmenter(as_params(ctx.models, ctx.options))
