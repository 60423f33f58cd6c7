"""The `qa` stage (one unit per view video): its questions, before answer letters, and its VPO images.

Reads ``project/views.parquet`` (the view's geometry, fps, duration), ``metadata/instances.parquet``,
``metadata/motion.parquet``, ``metadata/motion_samples.parquet``, ``metadata/visibility.parquet``,
``pose/poses.parquet`` (VPO's place gap), the probed source row (``probe/source.parquet``) for the panorama file,
the ``qa`` and ``faces`` config sections, and ``pose.camera_height``, ``pose.backend`` and
``reconcile.level_views`` (VPO's revisits by the objects: where they meet the ground), and the metadata stage's
``unreviewed_decisions.parquet`` and ``review_pending.parquet`` (which questions are provisional; with
``segment.clip_seconds``, which review items could move a VOO appearance), and its
``question_reviews.parquet`` (a rejected question is dropped; an accepted one is not provisional while it gives
the answers accepted). Writes ``questions.parquet`` (QA_QUESTIONS), ``skipped.parquet`` (QA_SKIPPED),
``images.parquet`` (QA_IMAGES), ``images/*`` and, when there are reviews, ``question_reviews.parquet`` with whether
each verdict holds for the question as asked now (``holds``).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from vsi_wild import __version__, ids, schema
from vsi_wild.errors import UnitError
from vsi_wild.schema import VIEWS_FILE
from vsi_wild.stages.faces import image_blurrer
from vsi_wild.stages.qa import QAParams, provisional
from vsi_wild.stages.qa.build import plan_video, render_video
from vsi_wild.stages.qa.common import Provenance, VideoInfo, question_id, skipped_table
from vsi_wild.stages.qa.readings import seen_under
from vsi_wild.tasks.engine import Job, Stage
from vsi_wild.tasks.project import FACE_DETECTOR, face_setup

SOURCE_FILE = "source.parquet"  # the probe stage's output
POSES_FILE = "poses.parquet"  # the pose stage's output
REVIEWS_FILE = "question_reviews.parquet"  # the metadata stage's, when the fix file reviews questions
PENDING_FILE = "review_pending.parquet"  # the metadata stage's, when reconciliation left review items unresolved
UNREVIEWED_FILE = "unreviewed_decisions.parquet"  # the metadata stage's, when decisions are left unresolved


def _view(job: Job, vid: str) -> VideoInfo:
    for r in job.read("project", VIEWS_FILE).to_pylist():
        if r["video_id"] == vid:
            return VideoInfo.from_row(r)
    raise UnitError(f"{VIEWS_FILE} of {ids.split_video_id(vid)[0]} has no row for {vid}")


def _poses(job: Job, vid: str) -> pa.Table:
    """The view's 2 FPS poses (the pose stage writes every view of a source in one table)."""
    t = job.read("pose", POSES_FILE)
    return t.filter(pc.equal(t["video_id"], vid))


def _panorama(job: Job) -> str:
    row = job.read("probe", SOURCE_FILE).to_pylist()[0]
    return str(job.store.source_file(row))


def _pending_reviews(job: Job) -> list[dict]:
    """Reconciliation's review items no fix has resolved, which the metadata stage writes only when
    there are some."""
    if not job.store.has_file(job.ref("metadata"), PENDING_FILE):
        return []
    return job.read("metadata", PENDING_FILE).to_pylist()


def _unreviewed(job: Job) -> list[dict]:
    """The metadata stage's unreviewed reconciliation decisions, which it writes only when there are
    some (each side with its instance after the fixes)."""
    if not job.store.has_file(job.ref("metadata"), UNREVIEWED_FILE):
        return []
    return job.read("metadata", UNREVIEWED_FILE).to_pylist()


def _at_risk(
    unreviewed: list[dict],
    instances: pa.Table,
    visibility: pa.Table,
    video: VideoInfo,
    params: QAParams,
    specks: pa.Table | None,
) -> list[provisional.AtRisk]:
    """The video's unreviewed reconciliation decisions as its VOC counts read them: by the sightings
    of the reading that gives the answers (``qa.voc_readings``' first; the specks too where the
    answers read them)."""
    if not unreviewed:
        return []
    seen = seen_under(instances, visibility, video.video_id, video.width * video.height, params.voc_readings[0], specks)
    return provisional.at_risk(unreviewed, seen)


def _question_reviews(job: Job) -> list[dict]:
    """The video's question reviews (``review_question`` fixes), which the metadata stage writes
    only when there are some."""
    if not job.store.has_file(job.ref("metadata"), REVIEWS_FILE):
        return []
    return job.read("metadata", REVIEWS_FILE).to_pylist()


def _drop_rejected(questions: pa.Table, skipped: pa.Table, reviews: list[dict]) -> tuple[pa.Table, pa.Table]:
    """The questions a person rejected leave the table, and are listed as skipped with the reason."""
    rejected = {r["question_id"]: r for r in reviews if r["verdict"] == "reject"}
    rows = questions.to_pylist()
    keep = [question_id(q) not in rejected for q in rows]
    gone = [
        {
            "video_id": q["video_id"],
            "task_type": q["task_type"],
            "item": q["item"],
            "reason": f"rejected by a person: {rejected[question_id(q)]['reason']}",
        }
        for q, k in zip(rows, keep, strict=True)
        if not k
    ]
    return questions.filter(pa.array(keep, type=pa.bool_())), skipped_table(skipped.to_pylist() + gone)


def run(job: Job) -> None:
    params: QAParams = job.config.qa
    vid = job.unit
    video = _view(job, vid)
    instances = job.read("metadata", "instances.parquet")
    motion = job.read("metadata", "motion.parquet")
    poses = _poses(job, vid)
    prov = Provenance(params.seed, job.store.fingerprint(job.ref("metadata")), __version__)
    visibility = job.read("metadata", "visibility.parquet")  # sightings under each reading (VOC, VOO)
    motion_samples = job.read("metadata", "motion_samples.parquet")  # VMR's evidence window and other pivots
    # the masks too small to track, which the readings that count an object seen at all read
    specks = job.read("metadata", "specks.parquet") if params.stable_answers else None
    # VPO's revisits by the objects: where they meet the ground, the camera's height below it (the
    # poses' unit: known for the metric pose backends), in views as level as reconcile takes them
    result = plan_video(
        video,
        instances,
        motion,
        poses,
        params,
        prov,
        visibility,
        motion_samples,
        job.config.pose.ground_height(),
        job.config.reconcile.level_views,
        specks,
    )
    if result.renders:  # the face model and the panorama only for a video with images to render
        blur = image_blurrer(*face_setup(job.config))
        render_video(result, video, params, _panorama(job), job.out.path, blur)
    questions, skipped = result.tables()
    unreviewed = _unreviewed(job)
    risks = _at_risk(unreviewed, instances, visibility, video, params, specks)
    reviews = _question_reviews(job)
    accepted = provisional.accepts(reviews)  # checked against the video by a person: not provisional
    track = provisional.Track.from_metadata(
        instances,
        visibility,
        unreviewed,
        vid,
        job.config.segment.clip_seconds,
        video.width * video.height,
        params.voo_readings,
        specks,
    )
    questions = provisional.mark(questions, _pending_reviews(job), risks, params.provisional_risk, accepted, track)
    if reviews:
        reviews = provisional.standing(reviews, questions)  # whether each verdict holds for the question as asked now
        questions, skipped = _drop_rejected(questions, skipped, reviews)
        job.out.write_table("question_reviews.parquet", schema.table(schema.QUESTION_REVIEWS, reviews))
    job.out.write_table("questions.parquet", questions)
    job.out.write_table("skipped.parquet", skipped)
    job.out.write_table("images.parquet", result.images_table())
    job.progress(1, 1, f"{questions.num_rows} questions")


QA = Stage(
    name="qa",
    outputs=schema.ARTIFACTS["qa"],
    version="16",
    unit_kind="video",
    run=run,
    needs=("project", "metadata", "pose", "probe"),
    sections=("qa", "faces", "pose.camera_height", "pose.backend", "reconcile.level_views", "segment.clip_seconds"),
    backends=(FACE_DETECTOR,),
    description="Rule-based questions of one view video (VMR, VPO, VOO, VOC) and its rendered VPO views",
)
