"""The interfaces every model backend implements, and the registry that builds them by name.

All images are RGB uint8 arrays (H, W, 3). Frames travel in a ``FrameBatch`` that carries their
times and indices, so that backends which read metadata rather than pixels (``groundtruth``) and
backends that need temporal context (video segmenters, pose estimators) share one call shape.
Backends load weights once, in their constructor, from configured local paths; a missing file is
``vsi_wild.errors.MissingWeights`` naming the config key, never a download.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass
class FrameBatch:
    """Consecutive 2 FPS frames of one perspective video (or one clip of it)."""

    video_id: str
    images: Sequence[np.ndarray]
    times: Sequence[float]  # seconds, t_k = k / 2
    frame_indices: Sequence[int]  # decoded frame index nearest to each time
    sample_indices: Sequence[int]  # k
    fps: float  # the video's frame rate


@dataclass
class Detections:
    """Detections in one frame."""

    boxes: np.ndarray  # (n, 4) float xyxy, pixels
    scores: np.ndarray  # (n,)
    labels: list[str]  # concept of each box


@dataclass
class SegmentRecord:
    """One instance mask in one frame of a clip; ``local_id`` is stable across the clip's frames."""

    frame_pos: int  # index into the clip's FrameBatch
    concept: str
    local_id: int
    box: tuple[float, float, float, float]  # xyxy pixels
    score: float
    mask: np.ndarray  # bool (H, W)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class PoseResult:
    extrinsics: np.ndarray  # (n, 3, 4) world -> camera, OpenCV axes (x right, y down, z forward)
    intrinsics: np.ndarray  # (n, 3, 3) in the input images' pixels
    valid: np.ndarray  # (n,) bool


class TextEmbedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(n, d) float32, each row L2-normalised."""
        ...


class OpenVocabDetector(Protocol):
    name: str

    def detect(self, batch: FrameBatch, concepts: Sequence[str]) -> list[Detections]:
        ...


class Segmenter(Protocol):
    name: str

    def segment(self, batch: FrameBatch, concepts: Sequence[str]) -> list[SegmentRecord]:
        ...


class PoseEstimator(Protocol):
    name: str

    def estimate(self, batch: FrameBatch) -> PoseResult:
        ...


# ---------------------------------------------------------------------------------- registry
# kind -> name -> factory(params) ; modules register their backends at import time.
_FACTORIES: dict[str, dict[str, Callable[..., Any]]] = {}


def register(kind: str, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(factory: Callable[..., Any]) -> Callable[..., Any]:
        _FACTORIES.setdefault(kind, {})[name] = factory
        return factory

    return deco


def available(kind: str) -> list[str]:
    return sorted(_FACTORIES.get(kind, {}))


def create(kind: str, name: str, **kwargs: Any) -> Any:
    try:
        factory = _FACTORIES[kind][name]
    except KeyError:
        raise ValueError(f"unknown {kind} backend {name!r}; available: {available(kind)}") from None
    return factory(**kwargs)
