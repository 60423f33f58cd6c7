"""The `project` stage: one source -> its perspective views (faces blurred), views.parquet and the
face-blur audit trail faces.parquet (one unit per source)."""

from __future__ import annotations

from vsi_wild import schema
from vsi_wild.config import Config
from vsi_wild.errors import UnitError
from vsi_wild.schema import VIEWS_FILE
from vsi_wild.stages.faces import FaceDetector, FaceParams, make_detector, with_weights_dir
from vsi_wild.stages.project import ProjectParams, project_source
from vsi_wild.tasks.engine import BackendUse, Job, Stage
from vsi_wild.tasks.probe import OUTPUT as PROBE_OUTPUT

FACES = "faces.parquet"


def face_setup(config: Config) -> tuple[FaceDetector, FaceParams]:
    """The face detector and parameters of a run (SCRFD's relative weight path resolved under
    ``models.weights_dir``); shared by the stages that blur (project, and qa's rendered views).
    The detector is loaded once per process (the backend registry's model cache)."""
    faces = with_weights_dir(config.faces, config.models.resolved_weights_dir())
    return make_detector(faces), faces


# The stages that blur build the face detector ``faces.backend`` names: its model (SCRFD's weight
# file, the package that ships CenterFace) is part of their cache keys through this declaration.
FACE_DETECTOR = BackendUse("face_detector", "faces.backend")


def run(job: Job) -> None:
    rows = job.read("probe", PROBE_OUTPUT).to_pylist()
    if len(rows) != 1:
        raise UnitError(f"{job.unit}: probe output has {len(rows)} rows, expected 1", kind="internal")
    row = rows[0]
    path = job.store.source_file(row)
    params: ProjectParams = job.config.project
    detector, faces = face_setup(job.config)
    out_dir = job.out.path(VIEWS_FILE).parent  # the unit's scratch folder: committed as a whole on success
    views, blurred = project_source(
        path,
        out_dir,
        params,
        detector,
        lambda done, total: job.progress(done, total, "frames"),
        face_params=faces,
        source_id=job.unit,
    )
    job.out.write_table(VIEWS_FILE, schema.conform(views, schema.VIEWS_TABLE))
    job.out.write_table(FACES, schema.conform(blurred, schema.FACES))


PROJECT = Stage(
    name="project",
    outputs=schema.ARTIFACTS["project"],
    version="2",  # 2: x264 without mbtree (byte-reproducible views)
    unit_kind="source",
    run=run,
    needs=("probe", "review"),
    sections=("project", "faces"),
    backends=(FACE_DETECTOR,),
    description="panorama -> front/right/back/left perspective videos, faces blurred",
)
