"""One Prefect flow per stage: run that stage alone (e.g. after a human fixed metadata).

Each flow reads upstream outputs from the store as they are (it does not re-run upstream stages)
and recomputes only the units whose inputs changed. The flows are written out one by one (not
generated in a loop) so that `prefect deploy` can read their parameters from the source.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from vsi_wild.flows.build import PARAMETERS_DOC, RunRequest, run_request, with_doc

# Prefect publishes these "Args:" as the parameters' descriptions (the stage flows have no only/from).
STAGE_DOC = "Run one stage alone (upstream outputs are read as they are).\n\nArgs:\n" + "".join(
    line + "\n"
    for line in PARAMETERS_DOC.split("Args:")[1].splitlines()
    if line.strip() and not line.strip().startswith(("only:", "from_stage:"))
)


def _run(
    stage: str,
    config: str,
    data_root: str | None,
    videos: list[str] | None,
    force: bool,
    overrides: dict[str, Any] | None,
) -> Any:
    return run_request(
        RunRequest(
            config=config, data_root=data_root, only=[stage], videos=videos, force=force, overrides=overrides or {}
        )
    )


@flow(name="stage-sample", description="Render the embedded sample and register it as a source.")
@with_doc(STAGE_DOC)
def sample_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("sample", config, data_root, videos, force, overrides)


@flow(
    name="stage-search",
    description="Search YouTube for 360° videos (queries from the crawl config) and filter the candidates.",
)
@with_doc(STAGE_DOC)
def search_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("search", config, data_root, videos, force, overrides)


@flow(name="stage-download", description="Download the selected candidates with yt-dlp and register them as sources.")
@with_doc(STAGE_DOC)
def download_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("download", config, data_root, videos, force, overrides)


@flow(name="stage-probe", description="Measure and validate every registered source.")
@with_doc(STAGE_DOC)
def probe_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("probe", config, data_root, videos, force, overrides)


@flow(name="stage-review", description="Apply the human keep/reject decisions: only kept sources go on.")
@with_doc(STAGE_DOC)
def review_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("review", config, data_root, videos, force, overrides)


@flow(name="stage-project", description="Project each kept source into four perspective views with faces blurred.")
@with_doc(STAGE_DOC)
def project_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("project", config, data_root, videos, force, overrides)


@flow(
    name="stage-candidates",
    description="Candidate object names per view video: keyframes, the human seed list and proposals, normalised.",
)
@with_doc(STAGE_DOC)
def candidates_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("candidates", config, data_root, videos, force, overrides)


@flow(
    name="stage-detect",
    description="Open-vocabulary detection at 2 FPS and the frequency filter: which concepts are kept, and why.",
)
@with_doc(STAGE_DOC)
def detect_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("detect", config, data_root, videos, force, overrides)


@flow(name="stage-segment", description="Instance masks per 5-minute clip (COCO RLE) with clip-local ids.")
@with_doc(STAGE_DOC)
def segment_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("segment", config, data_root, videos, force, overrides)


@flow(
    name="stage-view_pose",
    description="Each view's own camera poses per 2 FPS timestamp (the pose backend, DA3: the GPU half of the poses).",
)
@with_doc(STAGE_DOC)
def view_pose_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("view_pose", config, data_root, videos, force, overrides)


@flow(
    name="stage-pose",
    description="Camera poses per 2 FPS timestamp of each source: the views' estimates fused, loops closed, "
    "each view's motion (CPU).",
)
@with_doc(STAGE_DOC)
def pose_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("pose", config, data_root, videos, force, overrides)


@flow(
    name="stage-reconcile", description="Cross-clip reconciliation: global instance ids, every merge decision recorded."
)
@with_doc(STAGE_DOC)
def reconcile_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("reconcile", config, data_root, videos, force, overrides)


@flow(name="stage-metadata", description="Derived instances and motion per view video, with human fixes applied.")
@with_doc(STAGE_DOC)
def metadata_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("metadata", config, data_root, videos, force, overrides)


@flow(
    name="stage-qa",
    description="Questions for VMR, VPO, VOO and VOC per view video (VPO views rendered from the panorama).",
)
@with_doc(STAGE_DOC)
def qa_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("qa", config, data_root, videos, force, overrides)


@flow(
    name="stage-export",
    description="The published benchmark: release jsonl, rich parquet, rendered images, invariance splits.",
)
@with_doc(STAGE_DOC)
def export_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("export", config, data_root, videos, force, overrides)


@flow(name="stage-report", description="The build report: contents, answer spreads, blind baselines, what was lost.")
@with_doc(STAGE_DOC)
def report_flow(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    return _run("report", config, data_root, videos, force, overrides)


FLOWS = {
    "sample": sample_flow,
    "search": search_flow,
    "download": download_flow,
    "probe": probe_flow,
    "review": review_flow,
    "project": project_flow,
    "candidates": candidates_flow,
    "detect": detect_flow,
    "segment": segment_flow,
    "view_pose": view_pose_flow,
    "pose": pose_flow,
    "reconcile": reconcile_flow,
    "metadata": metadata_flow,
    "qa": qa_flow,
    "export": export_flow,
    "report": report_flow,
}
