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


def scrfd_signature_model(path) -> None:
    """An ONNX graph with SCRFD's interface (input.1 [1, 3, H, W]; 9 outputs: scores, boxes and
    keypoints for strides 8/16/32 with 2 anchors). Its stride-8 score is high where the blob's
    first channel (red, after insightface's BGR->RGB swap) is bright, and each box is that 8x8
    cell; strides 16 and 32 never fire."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    nodes, outputs, inits = [], [], []

    def const(name, arr):
        inits.append(onnx.numpy_helper.from_array(np.asarray(arr), name))
        return name

    nodes.append(
        helper.make_node(
            "Slice",
            [
                "input.1",
                const("s0", np.array([0], np.int64)),
                const("s1", np.array([1], np.int64)),
                const("s_ax", np.array([1], np.int64)),
            ],
            ["red"],
        )
    )
    scores, boxes, kps = [], [], []
    for s in (8, 16, 32):
        nodes.append(helper.make_node("AveragePool", ["red"], [f"pool{s}"], kernel_shape=[s, s], strides=[s, s]))
        nodes.append(helper.make_node("Transpose", [f"pool{s}"], [f"t{s}"], perm=[0, 2, 3, 1]))
        nodes.append(helper.make_node("Concat", [f"t{s}", f"t{s}"], [f"a{s}"], axis=3))
        nodes.append(helper.make_node("Reshape", [f"a{s}", const(f"shape{s}", np.array([-1, 1], np.int64))], [f"r{s}"]))
        if s == 8:
            nodes.append(helper.make_node("Sub", [f"r{s}", const("thr", np.array(0.8, np.float32))], [f"d{s}"]))
            nodes.append(helper.make_node("Mul", [f"d{s}", const("gain", np.array(20.0, np.float32))], [f"g{s}"]))
        else:
            nodes.append(helper.make_node("Mul", [f"r{s}", const(f"zero{s}", np.array(0.0, np.float32))], [f"z{s}"]))
            nodes.append(helper.make_node("Sub", [f"z{s}", const(f"ten{s}", np.array(10.0, np.float32))], [f"g{s}"]))
        nodes.append(helper.make_node("Sigmoid", [f"g{s}"], [f"score_{s}"]))
        nodes.append(helper.make_node("Mul", [f"r{s}", const(f"z2{s}", np.array(0.0, np.float32))], [f"zz{s}"]))
        nodes.append(helper.make_node("Add", [f"zz{s}", const(f"one{s}", np.array(1.0, np.float32))], [f"ones{s}"]))
        nodes.append(
            helper.make_node(
                "MatMul", [f"ones{s}", const(f"dist{s}", np.array([[0, 0, 1, 1]], np.float32))], [f"bbox_{s}"]
            )
        )
        nodes.append(
            helper.make_node("MatMul", [f"ones{s}", const(f"kz{s}", np.zeros((1, 10), np.float32))], [f"kps_{s}"])
        )
        scores.append(helper.make_tensor_value_info(f"score_{s}", TensorProto.FLOAT, [f"n{s}", 1]))
        boxes.append(helper.make_tensor_value_info(f"bbox_{s}", TensorProto.FLOAT, [f"n{s}", 4]))
        kps.append(helper.make_tensor_value_info(f"kps_{s}", TensorProto.FLOAT, [f"n{s}", 10]))
    outputs = scores + boxes + kps
    graph = helper.make_graph(
        nodes,
        "scrfd_signature",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [1, 3, "H", "W"])],
        outputs,
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
