"""All questions of one view video: the per-video half of the QA stage (letters come at export)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from vsi_wild import schema

from vsi_wild.stages.qa.common import Provenance, Question, VideoInfo, check_distinct_options, questions_table, skipped_table
from vsi_wild.stages.qa.params import QAParams
from vsi_wild.stages.qa.vmr import vmr_questions
from vsi_wild.stages.qa.voc import voc_questions
from vsi_wild.stages.qa.voo import voo_questions
from vsi_wild.stages.qa.vpo import RenderJob, refine_times, render_jobs, vpo_plan

_ORDER = {"VMR": 0, "VPO": 1, "VOO": 2, "VOC": 3}


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


def plan_video(video: VideoInfo, instances: pa.Table, motion: pa.Table, poses: pa.Table | None,
               params: QAParams, prov: Provenance) -> VideoQA:
    """Every question of one video (pure: no pixels); VPO images to render are listed."""
    qs: list[Question] = []
    skipped: list[dict] = []
    a, s = vmr_questions(motion, video, params, prov)
    qs += a
    skipped += s
    a, jobs, s = vpo_plan(poses, video, params, prov)
    qs += a
    skipped += s
    a, s = voo_questions(instances, video, params, prov)
    qs += a
    skipped += s
    a, s = voc_questions(instances, video, params, prov)
    qs += a
    skipped += s
    for q in qs:
        if q.correct is not None:
            check_distinct_options(q.correct, q.distractors or [])
        if len(q.query_times) != len(q.answers) or len(q.evidence) != len(q.query_times):
            raise ValueError(f"{q.video_id} {q.task_type} {q.index}: query times, answers and evidence differ in length")
        for qt, ev in zip(q.query_times, q.evidence):
            if any(iv["end"] > qt + 1e-9 for iv in ev):  # the streaming rule
                raise ValueError(f"{q.video_id} {q.task_type} {q.index}: evidence after its query time {qt}")
    qs.sort(key=lambda q: (_ORDER[q.task_type], q.subtype, q.index))
    return VideoQA(qs, jobs, skipped)


def build_video(video: VideoInfo, instances: pa.Table, motion: pa.Table, poses: pa.Table | None,
                params: QAParams, prov: Provenance, pano_path: str | Path | None, dest: Callable[[str], Path],
                blur: Callable[[np.ndarray], tuple[np.ndarray, list[dict]]] | None) -> VideoQA:
    """Plan the video's questions and render its VPO images (written to ``dest(relative path)``)."""
    result = plan_video(video, instances, motion, poses, params, prov)
    if result.renders:
        if pano_path is None:
            raise ValueError(f"{video.video_id}: VPO needs the source panorama, and none is known")
        result.images = render_jobs(pano_path, result.renders, dest, video, params, blur)
        refine_times(result.questions, {r["frame"]: r["time"] for r in result.images})
    return result
