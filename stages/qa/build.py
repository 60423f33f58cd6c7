"""All questions of one view video: the per-video half of the QA stage (letters come at export).

Every registered task (``registry.tasks()``) builds its questions from the same inputs; they are
checked against the streaming rule and sorted by (task order, subtype, index)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from vsi_wild import schema
from vsi_wild.stages.qa.common import (
    Provenance,
    Question,
    RenderJob,
    VideoInfo,
    check_distinct_options,
    questions_table,
    skipped_table,
)
from vsi_wild.stages.qa.params import QAParams
from vsi_wild.stages.qa.registry import MC, RELEASE, QATask, VideoInputs, tasks
from vsi_wild.stages.qa.vpo import render_jobs


@dataclass
class VideoQA:
    questions: list[Question]
    renders: list[RenderJob]
    skipped: list[dict]
    images: list[dict] = field(default_factory=list)  # QA_IMAGES rows, once rendered

    def tables(self) -> tuple[pa.Table, pa.Table]:
        return questions_table(self.questions), skipped_table(self.skipped)

    def images_table(self) -> pa.Table:
        return schema.table(schema.QA_IMAGES, self.images)


def _check(task: QATask, q: Question) -> None:
    where = f"{q.video_id} {q.task_type} {q.index}"
    if q.task_type != task.name:
        raise ValueError(f"{where}: built by task {task.name}")
    if q.split != RELEASE and q.split not in {s.name for s in task.splits if s.variant}:
        raise ValueError(f"{where}: split {q.split!r} is not one of the task's")
    if (q.correct is not None) != (task.kind == MC):
        raise ValueError(f"{where}: a {task.kind} question {'without' if task.kind == MC else 'with'} a correct option")
    if q.correct is not None:
        check_distinct_options(q.correct, q.distractors or [])
    if len(q.query_times) != len(q.answers) or len(q.evidence) != len(q.query_times):
        raise ValueError(f"{where}: query times, answers and evidence differ in length")
    for qt, ev in zip(q.query_times, q.evidence, strict=True):
        if any(iv["end"] > qt + 1e-9 for iv in ev):  # the streaming rule
            raise ValueError(f"{where}: evidence after its query time {qt}")


def plan_video(
    video: VideoInfo,
    instances: pa.Table,
    motion: pa.Table,
    poses: pa.Table | None,
    params: QAParams,
    prov: Provenance,
    visibility: pa.Table | None = None,
    motion_samples: pa.Table | None = None,
    camera_height: float | None = None,
    level_views: bool = True,
    specks: pa.Table | None = None,
) -> VideoQA:
    """Every question of one video (pure: no pixels); the images to render are listed.
    ``camera_height``: the camera's height above the ground in the poses' unit (None: not known);
    ``level_views``: the views are level (VPO's revisits by the objects, ``vpo.object_visits``);
    ``specks``: the segmenter's masks too small to track (``schema.SPECKS``), which the readings
    that count an object seen at all read (VOC, VOO with ``qa.stable_answers``)."""
    inputs = VideoInputs(
        video, instances, motion, poses, visibility, motion_samples, camera_height, level_views, specks
    )
    qs: list[Question] = []
    jobs: list[RenderJob] = []
    skipped: list[dict] = []
    order: dict[str, int] = {}
    for task in tasks():
        built = task.questions(inputs, params, prov)
        for q in built.questions:
            _check(task, q)
        qs += built.questions
        jobs += built.renders
        skipped += built.skipped
        order[task.name] = task.order
    qs.sort(key=lambda q: (order[q.task_type], q.subtype, q.index))
    return VideoQA(qs, jobs, skipped)


def render_video(
    result: VideoQA,
    video: VideoInfo,
    params: QAParams,
    pano_path: str | Path | None,
    dest: Callable[[str], Path],
    blur: Callable[[np.ndarray], tuple[np.ndarray, list[dict]]] | None,
) -> None:
    """Render the planned images (written to ``dest(relative path)``) and let each task refine its
    questions by the shown frames' decoded times."""
    if not result.renders:
        return
    if pano_path is None:
        who = sorted({q.task_type for q in result.questions if q.image_files})
        raise ValueError(f"{video.video_id}: {', '.join(who)} needs the source panorama, and none is known")
    result.images = render_jobs(pano_path, result.renders, dest, video, params, blur)
    frame_time = {r["frame"]: r["time"] for r in result.images}
    for task in tasks():
        if task.after_render:
            task.after_render([q for q in result.questions if q.task_type == task.name], frame_time, params)


def build_video(
    video: VideoInfo,
    instances: pa.Table,
    motion: pa.Table,
    poses: pa.Table | None,
    params: QAParams,
    prov: Provenance,
    pano_path: str | Path | None,
    dest: Callable[[str], Path],
    blur: Callable[[np.ndarray], tuple[np.ndarray, list[dict]]] | None,
    visibility: pa.Table | None = None,
    motion_samples: pa.Table | None = None,
    camera_height: float | None = None,
    level_views: bool = True,
) -> VideoQA:
    """Plan the video's questions and render their images (written to ``dest(relative path)``)."""
    result = plan_video(
        video, instances, motion, poses, params, prov, visibility, motion_samples, camera_height, level_views
    )
    render_video(result, video, params, pano_path, dest, blur)
    return result
