"""The `models` config section, and what every production backend shares: weight paths, device
choice, optional imports and the once-per-process model cache.

Heavy packages (torch, ultralytics, sam3, depth_anything_3, open_clip, sentence_transformers) are
imported inside backend constructors only, so importing this module (and the core CPU path) stays
fast and works without the `models` extra.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vsi_wild.errors import MissingDependency, MissingWeights
from vsi_wild.stages.backends.weights import WeightStatus, check_weight, content_digest, problem_text

# The open_clip text tower's fields: its own backend's, and YOLO-World's text encoder's.
OPEN_CLIP_FIELDS = ("open_clip_model", "open_clip_quick_gelu", "open_clip_weights")


def package_version(name: str) -> str:
    """An installed distribution's version (for models shipped inside a wheel), "absent" if none."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


SECTION = "models"  # the section's name in Config: error messages name keys as "models.<field>"
WEIGHTS_ENV = "VSI_WILD_WEIGHTS"


class ModelsParams(BaseModel):
    """Where the production models' weights are and how they run. Relative paths are relative to
    ``weights_dir``; nothing is ever downloaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto = cuda when available")
    weights_dir: str | None = Field(
        None, description=f"base of relative weight paths; default ${WEIGHTS_ENV} or ~/.cache/vsi-wild/weights"
    )

    # -- text embedders (candidate-name normalisation) and YOLO-World's text encoder
    open_clip_model: str = Field("ViT-B-32", description="open_clip architecture of the text encoder")
    open_clip_quick_gelu: bool = Field(
        True, description="OpenAI's CLIP weights were trained with QuickGELU; False for LAION weights"
    )
    open_clip_weights: str = Field(
        "clip/ViT-B-32.pt",
        description="OpenAI CLIP ViT-B/32 (the TorchScript file `clip` downloads, or an open_clip "
        "state dict / safetensors); also YOLO-World's text encoder",
    )
    open_clip_synonym_threshold: float = Field(
        0.92, ge=-1, le=1, description="cosine at or above which two names are synonyms (paper: 0.92)"
    )
    minilm_synonym_threshold: float = Field(
        0.80, ge=-1, le=1, description="same for all-MiniLM-L6-v2 (measured, see text.py)"
    )
    text_batch_size: int = Field(256, ge=1)
    image_batch_size: int = Field(64, ge=1, description="crops per forward pass of the open_clip image tower")

    # -- YOLO-World-v2 (open-vocabulary filtering)
    yolo_world_weights: str = Field("yolo_world/yolov8x-worldv2.pt", description="ultralytics .pt")
    yolo_world_imgsz: int = Field(640, ge=32)
    yolo_world_conf: float = Field(0.25, ge=0, le=1, description="minimum box score")
    yolo_world_iou: float = Field(0.7, ge=0, le=1, description="NMS IoU")
    yolo_world_max_det: int = Field(300, ge=1)
    yolo_world_batch_size: int = Field(16, ge=1, description="frames per forward pass")
    yolo_world_half: bool = Field(
        False,
        description="on a GPU: fp16 inference (ultralytics' quantize=16); the CPU runs fp32. Off until "
        "`make gpu-check` has shown fp16's boxes hold against fp32's on the same frames (unmeasured: no GPU yet)",
    )

    # -- SAM3 (instances)
    sam3_checkpoint: str = Field("sam3/sam3.pt", description="facebook/sam3 sam3.pt")
    sam3_score_threshold: float = Field(0.5, ge=0, le=1, description="detection score threshold")
    sam3_new_det_threshold: float = Field(0.7, ge=0, le=1, description="score to start a new track")
    sam3_offload_video_to_cpu: bool = Field(
        False, description="keep the clip's frames in host memory (long clips on small GPUs)"
    )
    sam3_shared_backbone: bool = Field(
        True,
        description="one image-encoder pass per frame for all of a clip's concepts (false: the "
        "per-concept path, one propagation per concept; same records, C times the encoder work)",
    )
    sam3_precision: Literal["bf16", "fp32"] = Field(
        "bf16", description="on a GPU: bf16 autocast (sam3's own choice) or fp32; the CPU runs fp32"
    )

    # -- Depth Anything 3 (camera poses)
    da3_model_dir: str = Field(
        "da3/DA3-LARGE", description="folder with config.json + model.safetensors (save_pretrained)"
    )
    da3_process_res: int = Field(504, ge=14, description="longest side DA3 works at")
    da3_window: int = Field(64, ge=2, description="frames per DA3 call; longer videos are chained")
    da3_overlap: int = Field(8, ge=1, description="frames shared by consecutive windows")
    da3_ref_view_strategy: Literal["first", "middle", "saddle_balanced", "saddle_sim_range"] = "saddle_balanced"
    da3_use_ray_pose: bool = False
    da3_precision: Literal["bf16", "fp32"] = Field(
        "bf16",
        description="on a GPU: DA3's own forward (bf16 autocast, fp16 where bf16 is unsupported) or "
        "fp32; the CPU runs fp32",
    )

    def model_post_init(self, __context: Any) -> None:
        if self.da3_overlap >= self.da3_window:
            raise ValueError("da3_overlap must be smaller than da3_window")

    # ----------------------------------------------------------------------------- resolution
    def resolved_weights_dir(self) -> Path:
        base = self.weights_dir or os.environ.get(WEIGHTS_ENV) or "~/.cache/vsi-wild/weights"
        return Path(base).expanduser()

    def weight_path(self, key: str, *, kind: Literal["file", "dir"] = "file", hint: str = "") -> Path:
        """The configured path of field ``key``, checked to exist; MissingWeights names the key."""
        p = self.resolve(getattr(self, key))
        ok = p.is_file() if kind == "file" else p.is_dir()
        if not ok:
            raise MissingWeights(f"{SECTION}.{key}", str(p), hint)
        return p

    def resolve(self, value: str) -> Path:
        """A configured weight path: absolute as given, else under ``weights_dir``."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else self.resolved_weights_dir() / p

    def torch_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"


def as_params(params: ModelsParams | dict[str, Any] | None, overrides: dict[str, Any]) -> ModelsParams:
    """A factory's settings: the context's ``models`` section with the options given to ``create``
    on top (``create(kind, name, device="cpu", sam3_checkpoint=...)`` in tests and benches)."""
    if params is None:
        base: dict[str, Any] = {}
    elif isinstance(params, ModelsParams):
        base = params.model_dump()
    else:
        base = dict(params)
    return ModelsParams.model_validate({**base, **overrides})


def backend_fingerprint(spec: Any, models: ModelsParams, section: Any = None) -> str:
    """What a backend's outputs depend on, from its declaration (``base.register``): its name, the
    values of its declared fields, for weight fields the content of the files (their sha256,
    remembered per file version: the same weights in another folder or on another machine give
    the same key, replacing a file recomputes the stages that used it; tuning YOLO-World does not
    recompute SAM3), and the versions of the distributions it declares."""
    params = models if spec.section == SECTION else section
    data: dict[str, Any] = {"backend": spec.name, "kind": spec.kind}
    for name in spec.fields:
        value = getattr(params, name)
        if name in spec.weights:
            if value is None:
                value = "unset"
            else:
                digest = content_digest(models.resolve(value), models.resolved_weights_dir())
                # missing: the run fails naming the key; the configured value tells one absence from another
                value = ["missing", value] if digest is None else digest
        data[name] = value
    for dist in spec.versions:
        data[f"package:{dist}"] = package_version(dist)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def weight_statuses(spec: Any, models: ModelsParams, section: Any = None) -> list[WeightStatus]:
    """Each weight field of a backend as found on disk: present, missing, wrong checksum or unset
    (what `vsi-wild weights check` prints and the run's requirement check refuses)."""
    params = models if spec.section == SECTION else section
    out = []
    for name in spec.weights:
        value = getattr(params, name)
        out.append(
            check_weight(
                f"{spec.section}.{name}",
                None if value is None else models.resolve(value),
                spec.source(name),
                models.resolved_weights_dir(),
            )
        )
    return out


def backend_problems(spec: Any, models: ModelsParams, section: Any = None) -> list[str]:
    """What keeps a backend from running here, found without loading it: a package that cannot
    be imported, a weight file that is missing or has the wrong checksum (each naming the config
    key to set)."""
    import importlib.util

    problems = []
    for module, dist in spec.packages:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            problems.append(f"backend {spec.name!r} needs the package {dist!r}: pip install 'vsi-wild[models]'")
    if not problems and spec.checks is not None:  # the packages are there: is each the verified one?
        problems += [f"backend {spec.name!r}: {p}" for p in spec.checks()]
    for status in weight_statuses(spec, models, section):
        if status.state == "unset":
            problems.append(f"backend {spec.name!r} needs `{status.key}` set to its weight file")
        elif not status.usable:
            problems.append(problem_text(status))
    return problems


def require(module: str, package: str, backend: str) -> Any:
    """Import an optional package or raise MissingDependency naming it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing = getattr(e, "name", None)
        top = module.split(".")[0]
        if missing and missing.split(".")[0] != top:
            # the package is there but one of its own imports is not: name that one
            package = f"{missing.split('.')[0]} (needed by {package})"
        raise MissingDependency(package, backend) from e


# ------------------------------------------------------------------------------ model cache
class LoadedModel:
    """A model loaded once per process, with the lock that serialises its use across threads."""

    def __init__(self, model: Any, device: str):
        self.model = model
        self.device = device
        self.lock = threading.RLock()


_CACHE: dict[tuple[Any, ...], LoadedModel] = {}
_CACHE_LOCK = threading.Lock()
_KEY_LOCKS: dict[tuple[Any, ...], threading.Lock] = {}


def load_once(key: tuple[Any, ...], loader: Callable[[], tuple[Any, str]]) -> LoadedModel:
    """Return the cached model for ``key``, calling ``loader() -> (model, device)`` at most once
    per process even when several threads ask at the same time (a Prefect GPU worker runs tasks in
    threads and must load each model once, not once per task). A failed load is not cached."""
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            return hit
        key_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with key_lock:  # one loader per key; other keys load concurrently
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
        if hit is not None:
            return hit
        model, device = loader()
        loaded = LoadedModel(model, device)
        with _CACHE_LOCK:
            _CACHE[key] = loaded
        return loaded


def clear_cache() -> None:
    """Drop every cached model (tests; a worker that must free GPU memory)."""
    with _CACHE_LOCK:
        _CACHE.clear()
        _KEY_LOCKS.clear()


def cached_keys() -> list[tuple[Any, ...]]:
    with _CACHE_LOCK:
        return list(_CACHE)
