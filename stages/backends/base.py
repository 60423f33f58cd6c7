"""The interfaces every model backend implements, and the registry that builds them by name.

All images are RGB uint8 arrays (H, W, 3). Frames travel in a ``FrameBatch`` that carries their
times and indices, so that backends which read metadata rather than pixels (``groundtruth``) and
backends that need temporal context (video segmenters, pose estimators) share one call shape.
Backends load weights once, in their constructor, from configured local paths; a missing file is
``vsi_wild.errors.MissingWeights`` naming the config key, never a download.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import numpy as np

from .weights import WeightSource


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
    # (n,) bool: the frame's position is in metres, measured against the ground (da3 with
    # ``camera_height``); None: the backend's own unit, or it says so itself (twoview's last_metric)
    metric: np.ndarray | None = None


class TextEmbedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(n, d) float32, each row L2-normalised."""
        ...


class ImageEmbedder(Protocol):
    name: str
    dim: int

    def embed(self, crops: Sequence[np.ndarray]) -> np.ndarray:
        """(n, dim) float32 of n RGB crops, each row L2-normalised."""
        ...


class OpenVocabDetector(Protocol):
    name: str

    def detect(self, batch: FrameBatch, concepts: Sequence[str]) -> list[Detections]: ...


class Segmenter(Protocol):
    """Masks of the concepts in a clip. A segmenter that also has ``segment_boxes(batch, prompts)``
    (``takes_box_prompts``) turns the boxes a reviewer drew into masks: one record per prompt it
    found an object in, ``local_id`` = the prompt's index."""

    name: str

    def segment(self, batch: FrameBatch, concepts: Sequence[str]) -> list[SegmentRecord]: ...


@dataclass
class BoxPrompt:
    """A drawn box to segment: at ``frame_pos`` of the batch, ``box`` xyxy in the batch images' pixels."""

    concept: str | None  # what it is, where the reviewer said (None: a box on an existing instance)
    frame_pos: int
    box: tuple[float, float, float, float]


def takes_box_prompts(segmenter: Any) -> bool:
    return callable(getattr(segmenter, "segment_boxes", None))


class PoseEstimator(Protocol):
    name: str

    def estimate(self, batch: FrameBatch) -> PoseResult: ...


@dataclass(frozen=True)
class PoseStageOptions:
    """What the pose stage passes to whichever pose estimator it builds, one view at a time
    (``PoseParams.estimator_options`` fills it; ``as_options`` are the keywords of ``create`` /
    ``Job.backend``): the view's horizontal field of view, twoview's feature kind and the camera's
    height above the ground (None: not known). One structure for the stage and the factories: a
    factory that takes its other options from elsewhere leaves out exactly ``POSE_STAGE_OPTIONS``
    (DA3's: its model settings reject an unknown name), so a field added here reaches both."""

    hfov_deg: float
    features: str
    camera_height: float | None

    def as_options(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# The names of the options the pose stage passes to every pose estimator (PoseStageOptions' fields).
POSE_STAGE_OPTIONS = tuple(f.name for f in fields(PoseStageOptions))


# ---------------------------------------------------------------------------------- registry
@dataclass
class BackendContext:
    """What every backend factory receives: the ``models`` section (weights, devices), the
    config section that chose the backend (e.g. ``faces`` for a face detector), the unit it is
    built for, the sample's truth tables (loaded on first use, for ``groundtruth``) and options
    of the stage's own (e.g. the twoview estimator's view geometry)."""

    models: Any = None  # ModelsParams; None = defaults
    section: Any = None  # the choosing section's params model, when the backend reads it
    unit: str = ""
    truth: Callable[[], dict[str, Any]] | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def truth_table(self, name: str) -> Any:
        if name in self.options:
            return self.options[name]
        if self.truth is None:
            raise ValueError(
                f"this backend reads the sample's truth table {name!r}, and {self.unit or 'this unit'} "
                "has none (groundtruth backends run on the generated sample only)"
            )
        return self.truth()[name]


@dataclass(frozen=True)
class BackendSpec:
    """A registered backend and what it declares: the fields its outputs depend on (the cache key
    is derived from them), which of them are weight paths (checked before a stage runs) and where
    each weight comes from (``sources``: what `vsi-wild weights` lists, checks and fetches), the
    packages it imports, and the distributions whose version is part of its key (models that ship
    inside a wheel)."""

    kind: str
    name: str
    factory: Callable[[BackendContext], Any]
    fields: tuple[str, ...]  # of ``section``
    section: str = "models"  # the config section the fields belong to
    weights: tuple[str, ...] = ()  # the fields that are weight files or folders (paths under models.weights_dir)
    packages: tuple[tuple[str, str], ...] = ()  # (module to import, pip distribution)
    versions: tuple[str, ...] = ()
    gpu: bool = False
    sources: tuple[tuple[str, WeightSource], ...] = ()  # (weight field, where it comes from)
    checks: Callable[[], list[str]] | None = None  # problems with the installed packages (e.g. changed internals)

    def __post_init__(self) -> None:
        undeclared = [w for w in self.weights if w not in self.fields]
        if undeclared:
            raise ValueError(f"{self.kind} backend {self.name!r}: weight fields {undeclared} are not among its fields")
        stray = [f for f, _ in self.sources if f not in self.weights]
        if stray:
            raise ValueError(f"{self.kind} backend {self.name!r}: sources for {stray}, which are not weight fields")

    def source(self, field_name: str) -> WeightSource | None:
        return dict(self.sources).get(field_name)


KINDS = ("text_embedder", "image_embedder", "open_vocab_detector", "segmenter", "pose_estimator", "face_detector")
_SPECS: dict[str, dict[str, BackendSpec]] = {}


def register(
    kind: str,
    name: str,
    *,
    fields: tuple[str, ...],
    section: str = "models",
    weights: tuple[str, ...] = (),
    packages: tuple[tuple[str, str], ...] = (),
    versions: tuple[str, ...] = (),
    gpu: bool = False,
    sources: dict[str, WeightSource] | None = None,
    checks: Callable[[], list[str]] | None = None,
) -> Callable[[Callable[[BackendContext], Any]], Callable[[BackendContext], Any]]:
    """Register ``factory(context) -> backend`` as the ``kind`` backend ``name``. ``fields`` is
    required (``()`` for a backend whose outputs depend on none): what is not declared cannot
    reach the cache key, so a missing declaration is an error here, not a stale cache later.
    ``sources`` names, per weight field, where its file comes from (stages/backends/weights.py);
    ``checks()`` lists what is wrong with the installed packages beyond their presence (run before
    any unit, like the weight check: a package whose internals changed is one error, not a unit's)."""
    if kind not in KINDS:
        raise ValueError(f"unknown backend kind {kind!r}; kinds: {', '.join(KINDS)}")

    def deco(factory: Callable[[BackendContext], Any]) -> Callable[[BackendContext], Any]:
        _SPECS.setdefault(kind, {})[name] = BackendSpec(
            kind,
            name,
            factory,
            tuple(fields),
            section,
            tuple(weights),
            tuple(packages),
            tuple(versions),
            gpu,
            tuple((sources or {}).items()),
            checks,
        )
        return factory

    return deco


def available(kind: str) -> list[str]:
    return sorted(_SPECS.get(kind, {}))


def spec(kind: str, name: str) -> BackendSpec:
    try:
        return _SPECS[kind][name]
    except KeyError:
        raise ValueError(f"unknown {kind} backend {name!r}; available: {available(kind)}") from None


def create(kind: str, name: str, context: BackendContext | None = None, **options: Any) -> Any:
    """Build backend ``name`` of ``kind``; ``options`` add to the context's (tests, benches)."""
    ctx = context or BackendContext()
    if options:
        ctx = BackendContext(ctx.models, ctx.section, ctx.unit, ctx.truth, {**ctx.options, **options})
    return spec(kind, name).factory(ctx)
