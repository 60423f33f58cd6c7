"""The `sample` stage: generate the embedded sample and register it as a source.

The generated video enters the pipeline exactly as a crawled or added video does: through the
source registry, so that nothing downstream can tell a sample from a crawl. Its ground truth stays
in this stage's output, where ``load_truth`` finds it for the groundtruth backends and the tests.
"""

from __future__ import annotations

import json

import pyarrow as pa

from vsi_wild import schema
from vsi_wild.errors import UnitError
from vsi_wild.stages.sample import SampleParams
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks.engine import Job, Plan, Stage

VIDEO = "video.mp4"
REGISTRATION = "registration.parquet"  # the sample's registry row (the engine registers it)
TRUTH_FILES = {
    "poses": "truth_poses.parquet",
    "objects": "truth_objects.parquet",
    "visibility": "truth_visibility.parquet",
    "faces": "truth_faces.parquet",
    "places": "truth_places.parquet",
}


def _units(plan: Plan, stage: Stage) -> list[str]:
    return [plan.config.sample.source_id] if plan.config.sample is not None else []


def run(job: Job) -> None:
    from vsi_wild.stages.sample import generate_sample  # numba compiles at import: only when needed

    params = job.config.sample
    assert params is not None  # the stage has a unit only when the config has a sample (_units)
    truth = generate_sample(params, job.out.path(VIDEO), progress=lambda d, t: job.progress(d, t, "frames"))
    for name, fname in TRUTH_FILES.items():
        job.out.write_table(fname, getattr(truth, name))
    ref = UnitRef(job.stage.name, job.unit, job.key)
    job.out.write_table(REGISTRATION, schema.table(schema.SOURCE, [registration_row(params, ref)]))


def registration_row(params: SampleParams, ref: UnitRef) -> dict:
    """The sample's registry row: its video where the committed output will hold it."""
    return {
        "source_id": ref.unit,
        "origin": "sample",
        # relative to the data root: the store owns this file
        "path": f"artifacts/{ref.stage}/{ref.unit}/{ref.key}/{VIDEO}",
        "url": None,
        "title": f"embedded sample ({params.route} route, seed {params.seed})",
        "channel": None,
        "license": "CC0-1.0 (generated; face photo: scikit-image astronaut, public domain)",
        "upload_date": None,
        "query": None,
        "category": None,
        "language": None,
        "crawl_time": None,
        "ytdlp_version": None,
        "projection": "equirectangular",
        "duration_s": None,
        "width": None,
        "height": None,
        "fps": None,
        "n_frames": None,
        "size_bytes": None,
        "content_sha256": None,
        "codec": None,
        "provenance": json.dumps(
            {
                "generator": "vsi_wild.stages.sample",
                "params": params.model_dump(mode="json"),
                "truth": {"stage": ref.stage, "unit": ref.unit, "key": ref.key},
            },
            sort_keys=True,
        ),
    }


def truth_ref(store: Store, source_id: str) -> UnitRef:
    """Where a generated sample source's ground-truth tables are (its registry row says)."""
    row = store.registry_row(source_id)
    if row is None or row["origin"] != "sample":
        raise UnitError(f"source {source_id} is not a generated sample: it has no ground truth", kind="config")
    where = json.loads(row["provenance"])["truth"]
    return UnitRef(where["stage"], where["unit"], where["key"])


def load_truth(store: Store, source_id: str) -> dict[str, pa.Table]:
    """The ground-truth tables of a generated sample source (for groundtruth backends and tests)."""
    ref = truth_ref(store, source_id)
    if not store.is_complete(ref):
        raise UnitError(f"ground truth of {source_id} is missing from the store (re-run the sample stage)")
    return {name: store.read_table(ref, fname) for name, fname in TRUTH_FILES.items()}


SAMPLE = Stage(
    name="sample",
    outputs=schema.ARTIFACTS["sample"],
    version="1",
    unit_kind="source",
    run=run,
    sections=("sample",),
    units=_units,
    no_units_hint="this config has no `sample` section (configs/sample.yaml has one)",
    registers=REGISTRATION,
    description="render the embedded synthetic 360° walk and its ground truth",
)
