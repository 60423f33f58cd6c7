"""Production model architectures with random weights, saved as the files our loaders read: what
the backend tests check our adapters with, and what bench/gpu_check.py measures speed and memory
with where the real weights are absent. Each builder seeds torch itself, so a file is the same
whoever builds it."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any


def clip_state_dict(path: Path) -> Any:
    """open_clip ViT-B-32 (QuickGELU, OpenAI's architecture), random init, its state dict saved
    at ``path``; returns the model."""
    import open_clip
    import torch

    torch.manual_seed(0)
    model = open_clip.create_model("ViT-B-32", pretrained=None, force_quick_gelu=True).eval()
    torch.save(model.state_dict(), path)
    return model


def yolo_world(path: Path, architecture: str = "yolov8s-worldv2.yaml") -> None:
    """ultralytics' YOLO-World-v2 architecture, random init, saved as the .pt the loader reads.
    Fresh init is degenerate (every box and score the same whatever the image, scores ~0): give
    BatchNorm the statistics of a few random images and zero the class-score bias (-10 at init)
    so that outputs depend on the pixels and some pass the threshold."""
    import torch
    from ultralytics import YOLOWorld

    torch.manual_seed(0)
    yolo = YOLOWorld(architecture)
    net = yolo.model
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None
    net.train()
    with torch.no_grad():
        net.predict(torch.rand(4, 3, 160, 160))
        for conv in net.model[-1].cv4:
            conv.bias.zero_()
    net.eval()
    yolo.save(str(path))


def sam3_checkpoint(path: Path) -> dict[str, Any]:
    """SAM3's video model, random init, saved as a half-precision ``sam3.pt`` at ``path``; returns
    the buffers outside the state dict (they must come out of the adapter's uninitialised build
    the same)."""
    import torch

    from vsi_wild.stages.backends.segment import build_sam3_video

    torch.manual_seed(0)
    model = build_sam3_video("cpu")
    with torch.no_grad():
        # sam3 leaves the text encoder's positional embedding and projection as torch.empty when no
        # checkpoint is loaded: give them values (not the -inf causal mask buffer). Memory garbage can
        # be finite in fp32 and still overflow the fp16 file below (a CI run met exactly that).
        for _, p in model.named_parameters():
            if not torch.isfinite(p.half()).all():
                p.copy_(torch.randn(p.shape) * 0.02)
    persistent = set(model.state_dict())
    extra_buffers = {n: b.clone() for n, b in model.named_buffers() if n not in persistent}
    # half precision halves the file (1.7 GB); loading casts back to the model's fp32
    torch.save({k: v.half() if v.is_floating_point() else v for k, v in model.state_dict().items()}, path)
    del model
    gc.collect()
    return extra_buffers


def da3_folder(path: Path, model_name: str = "da3-small") -> None:
    """Depth Anything 3 (``model_name``'s architecture, from the configs in the wheel), random
    init, saved with save_pretrained as the folder the loader reads."""
    import torch
    from depth_anything_3.api import DepthAnything3

    torch.manual_seed(0)
    DepthAnything3(model_name=model_name).save_pretrained(str(path))
