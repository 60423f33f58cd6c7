"""Segmenters (kind ``segmenter``).

``sam3``: SAM3 (PyPI ``sam3`` 0.1.4) video model, text prompts. For each kept concept the clip's
2 FPS frames are prompted with the concept's name on frame 0 and propagated forward; SAM3 detects
on every frame and tracks, so objects appearing later get ids too. Track ids are clip-local and
stable across the clip; we renumber them so that ids are unique across concepts in one clip
(``local_id``), keeping SAM3's own id in ``extra["sam3_obj_id"]``.

How it is loaded: ``build_sam3_video_model(checkpoint_path=None, load_from_HF=False)`` (never the
hub), then the state dict of ``models.sam3_checkpoint`` (facebook/sam3 ``sam3.pt``) loaded strictly,
memory-mapped. The wheel lacks the BPE vocabulary; open_clip ships the same file
(``bpe_simple_vocab_16e6.txt.gz``), so ``bpe_path`` points there. We drive the model directly
(``init_state`` / ``add_prompt`` / ``propagate_in_video``) rather than ``Sam3VideoPredictor``,
which calls ``.cuda()`` and keeps a global session table. A clip's frames go in as the folder of
JPEGs the segment stage writes (sam3 decodes them one at a time), or as PIL images when they are
arrays (``sam3_frames``).

On CPU (tests, no GPU) sam3 0.1.4 hard-codes CUDA in places (``device="cuda"`` in
position_encoding/decoder, ``.cuda()``, ``pin_memory()``, bf16 casts); ``cpu_shim()`` is a
TorchFunctionMode that maps those to CPU / fp32 without editing the library, and the CPU
connected-components fallback, which crashes on an empty batch (zero detections), is wrapped.

Cost: one propagation per concept (``add_prompt`` resets the session, so the image backbone runs
again per concept): GPU time ~ frames x concepts.

Boxes are xyxy in pixel-edge coordinates of the frame (a full-frame box is (0, 0, W, H)), like
ultralytics' boxes: the mask's pixel bounds, max + 1.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vsi_wild.errors import UnitError
from vsi_wild.stages.backends.base import BackendContext, BoxPrompt, FrameBatch, SegmentRecord, register
from vsi_wild.stages.backends.detect import check_rgb_frames
from vsi_wild.stages.backends.params import LoadedModel, ModelsParams, as_params, load_once, require
from vsi_wild.stages.backends import weights as W

SAM3_IMAGE_SIZE = 1008  # the only resolution sam3 0.1.4 accepts


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

    safe._vsi_safe = True  # type: ignore[attr-defined]
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

    with cpu_shim(device), (contextlib.nullcontext() if init_weights else skip_random_init()):
        return build_sam3_video_model(
            checkpoint_path=None, load_from_HF=False, bpe_path=bpe_path(), device="cpu"
        )


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
    if not isinstance(state, dict) or not any(str(k).startswith("detector.") for k in state) or not any(
        str(k).startswith("tracker.") for k in state
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
    if paths and folder is not None and all(p.stem.isdigit() for p in paths) \
            and [int(p.stem) for p in paths] == sorted({int(p.stem) for p in paths}) \
            and sorted(os.listdir(folder)) == sorted(p.name for p in paths):
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
    sizes = {img.shape[:2] for img in batch.images}
    if len(sizes) != 1:
        raise UnitError(f"video {batch.video_id}: frames of different sizes in one clip: {sorted(sizes)}")
    return [Image.fromarray(img) for img in batch.images]


class Sam3Segmenter:
    name = "sam3"

    def __init__(self, params: ModelsParams):
        self.params = params
        require("sam3", "sam3", self.name)
        require("torch", "torch", self.name)
        path = params.weight_path("sam3_checkpoint", hint="facebook/sam3 sam3.pt")
        device = params.torch_device()
        self._loaded: LoadedModel = load_once(
            ("sam3_video", str(path.resolve()), device), lambda: (load_sam3_video(path, device), device)
        )

    @property
    def model(self) -> Any:
        return self._loaded.model

    def _set_thresholds(self) -> None:
        """This segmenter's thresholds on the model, which the load-once cache shares between segmenters
        (a threshold left by another one's call must not apply to this one's)."""
        self._loaded.model.score_threshold_detection = self.params.sam3_score_threshold
        self._loaded.model.new_det_thresh = self.params.sam3_new_det_threshold

    def iter_segments(self, batch: FrameBatch, concepts: Sequence[str]) -> Iterator[SegmentRecord]:
        """The clip's instance masks, concept by concept, frame by frame. Stream them: a 5-minute
        clip at 1080p holds gigabytes of full-frame masks. The model is locked until the iterator
        is exhausted or closed."""
        concepts = list(dict.fromkeys(str(c) for c in concepts))
        n = len(batch.images)
        if not concepts or n == 0:
            return
        images = sam3_frames(batch)
        model, p = self._loaded.model, self.params
        next_id = 0
        with self._loaded.lock:
            with self._context():
                self._set_thresholds()
                state = model.init_state(resource_path=images, offload_video_to_cpu=p.sam3_offload_video_to_cpu)
            for concept in concepts:
                with self._context():
                    model.add_prompt(state, frame_idx=0, text_str=concept)  # resets the session
                frames = model.propagate_in_video(state, start_frame_idx=0, max_frame_num_to_track=n, reverse=False)
                ids: dict[int, int] = {}
                while True:
                    # step sam3's generator inside our contexts, and leave them before yielding:
                    # the shim and inference mode must not leak into the caller's code
                    with self._context():
                        item = next(frames, None)
                    if item is None:
                        break
                    frame_idx, out = item
                    if out is None:
                        continue
                    masks = np.asarray(out["out_binary_masks"], dtype=bool)
                    for k, obj_id in enumerate(out["out_obj_ids"].tolist()):
                        mask = masks[k]
                        if not mask.any():
                            continue
                        local = ids.setdefault(int(obj_id), next_id + len(ids))
                        yield SegmentRecord(
                            frame_pos=int(frame_idx),
                            concept=concept,
                            local_id=local,
                            box=mask_box(mask),
                            score=float(out["out_probs"][k]),
                            mask=mask,
                            extra={"sam3_obj_id": int(obj_id)},
                        )
                next_id += len(ids)

    @contextlib.contextmanager
    def _context(self) -> Iterator[None]:
        import torch

        with cpu_shim(self._loaded.device), torch.inference_mode():
            yield

    def segment(self, batch: FrameBatch, concepts: Sequence[str]) -> list[SegmentRecord]:
        return list(self.iter_segments(batch, concepts))

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
                x0, y0, x1, y1 = (min(max(v, 0.0), lim) for v, lim in zip(prompt.box, (w, h, w, h)))
                if x1 - x0 < 1 or y1 - y0 < 1:
                    continue
                with self._context():
                    _, res = model.add_prompt(state, frame_idx=int(prompt.frame_pos), text_str=prompt.concept or "visual",
                                              boxes_xywh=[[x0 / w, y0 / h, (x1 - x0) / w, (y1 - y0) / h]], box_labels=[1])
                if res is None or not len(res["out_obj_ids"]):
                    continue
                masks = np.asarray(res["out_binary_masks"], dtype=bool)
                scored = [(_box_iou(mask_box(m), (x0, y0, x1, y1)), k) for k, m in enumerate(masks) if m.any()]
                if not scored:
                    continue
                best, k = max(scored)
                out.append(SegmentRecord(frame_pos=int(prompt.frame_pos), concept=prompt.concept or "", local_id=n,
                                         box=mask_box(masks[k]), score=float(res["out_probs"][k]), mask=masks[k],
                                         extra={"box_iou": best}))
        return out


def _box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy
    return ix * iy / union if union > 0 else 0.0


@register("segmenter", "sam3", fields=("sam3_checkpoint", "sam3_score_threshold", "sam3_new_det_threshold"),
          weights=("sam3_checkpoint",), sources={"sam3_checkpoint": W.SAM3},
          packages=(("sam3", "sam3"), ("open_clip", "open-clip-torch"), ("torch", "torch")), gpu=True)
def make_sam3(ctx: BackendContext) -> Sam3Segmenter:
    return Sam3Segmenter(as_params(ctx.models, ctx.options))

