"""The pipeline's configuration: one YAML file, one pydantic model, one section per stage.

Each stage reads its own section; a stage's cache key includes exactly the sections it reads
(``Config.section_json``), so changing a section recomputes that stage and what depends on it,
and nothing else. Unknown keys are errors that name the key (``extra="forbid"``): a typo in a
config must never be silently ignored.

Section models of the domain live beside their stage in ``stages/`` (they are plain data); this
module only composes them and adds the orchestration sections.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import to_jsonable_python

from vsi_wild.stages.backends.params import ModelsParams
from vsi_wild.stages.candidates import CandidatesParams
from vsi_wild.stages.crawl import HOME_ENV, CrawlParams, project_home, resolve_path
from vsi_wild.stages.detect import DetectParams
from vsi_wild.stages.faces import FaceParams
from vsi_wild.stages.metadata import MetadataParams
from vsi_wild.stages.model_errors import ModelErrorParams
from vsi_wild.stages.pose import PoseParams
from vsi_wild.stages.project import ProjectParams
from vsi_wild.stages.qa.params import QAParams
from vsi_wild.stages.reconcile import ReconcileParams
from vsi_wild.stages.report import ReportParams
from vsi_wild.stages.review import ReviewExportParams
from vsi_wild.stages.sample import SampleParams
from vsi_wild.stages.segment import SegmentParams


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunSection(Section):
    """How a run is executed (not part of any cache key)."""

    data_root: str = Field("data/out", description="where artifacts go: a folder or an fsspec URL (s3://...)")
    workers: int = Field(2, ge=1, description="units run concurrently (thread pool)")
    task_runner: Literal["thread", "dask"] = "thread"
    dask_address: str | None = Field(None, description="tcp://host:port of a dask scheduler")
    dask_cluster_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="LocalCluster / dask-jobqueue kwargs when no address"
    )
    dask_cluster_class: str = Field(
        "distributed.LocalCluster",
        description="cluster started by each run when no address: e.g. dask_jobqueue.SLURMCluster",
    )
    dask_adapt_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="adaptive scaling of that cluster, e.g. {minimum: 1, maximum: 16}"
    )


class SourcesSection(Section):
    """Local files registered at the start of every run (besides `vsi-wild add`)."""

    paths: list[str] = Field(default_factory=list, description="files or folders of 360° videos")


class ProbeSection(Section):
    """What makes a source usable."""

    timeout_s: float = Field(120.0, description="ffprobe time limit per file")
    min_aspect: float = Field(1.98, description="equirectangular sources are 2:1 (w/h within these)")
    max_aspect: float = 2.02


class ReviewSection(Section):
    """The human keep/reject gate between sourcing and projection."""

    require_decision: bool = Field(
        True, description="sources with no recorded decision wait (are skipped) until reviewed"
    )
    auto_keep_origins: list[str] = Field(
        default_factory=lambda: ["sample"],
        description="origins kept without a decision (generated samples need no review)",
    )
    export: ReviewExportParams = Field(
        ReviewExportParams(), description="contact sheets and the motion heuristic of `vsi-wild review export`"
    )


class Config(Section):
    run: RunSection = RunSection()
    sample: SampleParams | None = Field(None, description="generate the embedded sample when set")
    sources: SourcesSection = SourcesSection()
    probe: ProbeSection = ProbeSection()
    review: ReviewSection = ReviewSection()
    crawl: CrawlParams = Field(CrawlParams(), description="YouTube search and download (stages/crawl)")
    project: ProjectParams = Field(ProjectParams(), description="panorama -> perspective views (stages/project)")
    faces: FaceParams = Field(FaceParams(), description="face detection and blurring (stages/faces)")
    models: ModelsParams = Field(ModelsParams(), description="model weights and devices (stages/backends)")
    candidates: CandidatesParams = Field(CandidatesParams(), description="candidate object names (stages/candidates)")
    detect: DetectParams = Field(DetectParams(), description="open-vocabulary frequency filter (stages/detect)")
    segment: SegmentParams = Field(SegmentParams(), description="instance masks per clip (stages/segment)")
    reconcile: ReconcileParams = Field(ReconcileParams(), description="cross-clip instance merging (stages/reconcile)")
    model_errors: ModelErrorParams = Field(
        ModelErrorParams(), description="simulated segmenter and pose errors, for benchmarks (stages/model_errors)"
    )
    pose: PoseParams = Field(PoseParams(), description="camera poses (stages/pose)")
    metadata: MetadataParams = Field(
        MetadataParams(), description="derived instances and motion, fixes (stages/metadata)"
    )
    qa: QAParams = Field(QAParams(), description="question generation and export (stages/qa, stages/export)")
    report: ReportParams = Field(ReportParams(), description="the build report (stages/report)")

    def section_json(self, name: str) -> str:
        """Canonical JSON of one section: what a stage's cache key depends on. A dotted name
        (``crawl.download``) is a sub-section, so a stage can depend on part of a section."""
        value: Any = self
        for part in name.split("."):
            value = getattr(value, part)
        data = value.model_dump(mode="json") if isinstance(value, BaseModel) else to_jsonable_python(value)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


class ConfigError(ValueError):
    """A config file that cannot be read or does not validate; the message names file and key."""


def _config_file(p: Path) -> Path:
    """A config path as given (absolute, or from the working directory), else a relative one under
    the project folder, as every config-relative path is read (``crawl.resolve_path``): the default
    `configs/sample.yaml` from anywhere."""
    found = resolve_path(p)
    if found.is_file():
        return found
    where = "" if p.is_absolute() else f" (in {Path.cwd()} or the project folder {project_home()})"
    raise ConfigError(
        f"config file not found: {p}{where}; run from the project folder, give --config a path, "
        f"or set {HOME_ENV} to the project folder"
    )


def load_config(path: str | os.PathLike[str] | None, overrides: dict[str, Any] | None = None) -> Config:
    data: dict[str, Any] = {}
    if path is not None:
        p = _config_file(Path(path))
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {e}") from e
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: expected a mapping of sections at the top level")
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for k in parents:
            node = node.setdefault(k, {})
        node[leaf] = value
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        where = path or "<defaults>"
        lines = [f"{where}: {'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors()]
        raise ConfigError("invalid config\n  " + "\n  ".join(lines)) from None
