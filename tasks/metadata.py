"""The metadata stages (the paper's A.2): I/O around ``stages.candidates``, ``detect``, ``segment``,
``pose`` and ``metadata``.

    candidates (video)  keyframes + seed list + proposals file -> canonical concepts
    detect     (video)  2 FPS open-vocabulary detections, occurrence statistics, frequency filter
    segment    (clip)   instance masks (COCO RLE) of the kept concepts, one clip at a time
    pose       (source) per-view poses, fused into the source's, derived back per view
    reconcile  (video)  clip-local instances -> global instances, every merge decision recorded
    metadata   (video)  derived instances and motion, human fixes applied

Only ``candidates`` (the proposals file) and ``metadata`` (the fix file) read files outside the
store; their fingerprints are part of the units' cache keys, so editing one video's fix file
recomputes that video's metadata and what depends on it, and nothing else.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from vsi_wild import ids, schema
from vsi_wild.config import Config
from vsi_wild.errors import Skip, UnitError
from vsi_wild.schema import VIEWS_FILE
from vsi_wild.stages import candidates as cand
from vsi_wild.stages import detect as det
from vsi_wild.stages import fixes as fx
from vsi_wild.stages import loops
from vsi_wild.stages import metadata as meta
from vsi_wild.stages import model_errors as me
from vsi_wild.stages import pose as po
from vsi_wild.stages import reconcile as rc
from vsi_wild.stages import segment as seg
from vsi_wild.stages import visibility as vis
from vsi_wild.stages.backends import base as backends
from vsi_wild.stages.video_io import frame_batches, prefetched, sampled_frames
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks.engine import BackendUse, Job, Plan, Stage

SAMPLE_FPS = 2.0


# ------------------------------------------------------------------------------ helpers
def _raw_path(store: Store, folder: str) -> str:
    """A configured folder of human inputs: absolute, or relative to the data root."""
    return folder if Path(folder).is_absolute() or "://" in folder else store.path(folder)


def _read_raw(store: Store, path: str) -> bytes | None:
    return store.fs.cat_file(path) if store.fs.exists(path) else None


def _proposals_file(store: Store, config: Config, video_id: str) -> tuple[str, bytes] | None:
    folder = _raw_path(store, config.candidates.proposals_dir)
    for ext in (".txt", ".json"):
        p = f"{folder}/{video_id}{ext}"
        data = _read_raw(store, p)
        if data is not None:
            return p, data
    return None


def _fix_file(store: Store, config: Config, video_id: str) -> tuple[str, bytes] | None:
    p = f"{_raw_path(store, config.metadata.fixes_dir)}/{video_id}.yaml"
    data = _read_raw(store, p)
    return (p, data) if data is not None else None


def vocabulary_file(store: Store, config: Config) -> tuple[str, bytes] | None:
    """The benchmark's vocabulary (renames and synonyms for every video), if there is one."""
    p = f"{_raw_path(store, config.metadata.fixes_dir)}/{fx.VOCABULARY_FILE}"
    data = _read_raw(store, p)
    return (p, data) if data is not None else None


def load_vocabulary(store: Store, config: Config) -> fx.Vocabulary | None:
    found = vocabulary_file(store, config)
    return fx.parse_vocabulary_text(found[1].decode("utf-8", errors="replace"), found[0]) if found else None


def _digest(found: tuple[str, bytes] | None) -> str:
    return hashlib.sha256(found[1]).hexdigest() if found else "none"


def _view_row(job: Job, video_id: str) -> dict:
    views = job.read("project", VIEWS_FILE).to_pylist()
    for r in views:
        if r["video_id"] == video_id:
            return r
    raise UnitError(f"{VIEWS_FILE} of {ids.split_video_id(video_id)[0]} has no row for {video_id}")


# ------------------------------------------------------------------------------ candidates
def _candidates_raw(config: Config, store: Store, unit: str) -> dict[str, str]:
    return {"proposals": _digest(_proposals_file(store, config, unit))}


def run_candidates(job: Job) -> None:
    p: cand.CandidatesParams = job.config.candidates
    vid = job.unit
    source_id, _ = ids.split_video_id(vid)
    view = _view_row(job, vid)
    video = job.file("project", f"{vid}.mp4")
    # Keyframes for whoever writes the proposals (an MLLM or a person).
    times = cand.keyframe_times(float(view["duration_s"]), p.n_keyframes)
    kf_rows, paths = [], []
    for j, (t, frame, rgb) in enumerate(cand.extract_keyframes(video, times, p.keyframe_max_width)):
        name = f"keyframes/{vid}_{j:02d}.jpg"
        cv2.imwrite(str(job.out.path(name)), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90])
        paths.append(job.out.path(name))
        kf_rows.append(
            {"video_id": vid, "index": j, "time": t, "frame": frame, "fps": float(view["fps"]), "path": name}
        )
    job.out.write_table("keyframes.parquet", schema.table(schema.KEYFRAMES, kf_rows))

    proposals: list[str] = []
    found = _proposals_file(job.store, job.config, vid)
    if found is not None:
        proposals = cand.parse_proposals(found[1].decode("utf-8", errors="replace"), found[0])
    if p.mllm_plugin:
        proposals += [cand.normalise_term(t) for t in cand.load_plugin(p.mllm_plugin)(vid, paths)]
        job.out.path("mllm_proposals.txt").write_text("\n".join(proposals) + "\n")
    embedder = job.backend("text_embedder")
    rows = [
        {
            "video_id": vid,
            "term": c.term,
            "origin": c.origin,
            "concept": c.concept,
            "similarity": c.similarity,
            "embedder": p.embedder,
            "threshold": p.threshold(),
        }
        for c in cand.normalise(p.seeds, proposals, embedder.embed, p.threshold())
    ]
    job.out.write_table("candidates.parquet", schema.table(schema.CANDIDATES, rows))


CANDIDATES = Stage(
    name="candidates",
    outputs=schema.ARTIFACTS["candidates"],
    version="1",
    unit_kind="video",
    run=run_candidates,
    needs=("project",),
    sections=("candidates",),
    backends=(BackendUse("text_embedder", "candidates.embedder"),),
    raw_inputs=_candidates_raw,
    description="Candidate objects: seed list + per-video proposals, normalised by text-embedding similarity",
)


# ------------------------------------------------------------------------------ detect
class _VideoDetections:
    """One detect unit's work: its concepts, its 2 FPS batches (decoded ahead by a thread of its
    own while the detector runs), the rows found so far, and the tables it writes at the end."""

    def __init__(self, job: Job):
        self.job = job
        self.params: det.DetectParams = job.config.detect
        vid = job.unit
        self.concepts = list(dict.fromkeys(job.read("candidates", "candidates.parquet")["concept"].to_pylist()))
        view = _view_row(job, vid)
        self.size = (int(view["width"]), int(view["height"]))
        self.total = seg.n_samples(float(view["duration_s"]))
        self.batches = prefetched(
            frame_batches(
                job.file("project", f"{vid}.mp4"), vid, float(view["fps"]), self.params.batch_frames, SAMPLE_FPS
            ),
            depth=2,
            name=f"feed-{vid}",
        )
        self.rows: list[dict] = []
        self.n = 0

    def add(self, batch: backends.FrameBatch, dets: list[backends.Detections] | None) -> None:
        """The detections of one batch (None: the video has no concepts to detect)."""
        if dets is None:
            dets = [backends.Detections(np.zeros((0, 4)), np.zeros(0), []) for _ in batch.images]
        self.rows.extend(det.detection_rows(self.job.unit, batch, dets, self.params.backend))
        self.n += len(batch.images)
        self.job.progress(self.n, self.total, "frames")

    def write(self) -> None:
        stats = det.occurrence_stats(self.concepts, self.rows, self.n, self.params)
        out = self.job.out
        out.write_table("detections.parquet", schema.table(schema.DETECTIONS, self.rows))
        out.write_table(
            "concept_stats.parquet", schema.table(schema.CONCEPT_STATS, det.stats_rows(self.job.unit, stats))
        )


def run_detect(job: Job) -> None:
    video = _VideoDetections(job)
    detector = job.backend("open_vocab_detector")
    for batch in video.batches:
        video.add(batch, detector.detect(batch, video.concepts) if video.concepts else None)
    video.write()


def run_detect_views(jobs: list[Job]) -> None:
    """A source's views detected together (``DETECT.group``): the views that prompt the same
    concepts at the same frame size go through the detector in lockstep, the next batch of each in
    one call (``detect_many``: YOLO-World runs their frames, interleaved, in shared forward passes).
    Only such views share a call: YOLO-World's neck attends to the prompt's text features
    (``C2fAttn``), so another view's names would change this view's boxes. Each view's rows are the
    ones it gets alone (exactly, on the CPU: tests/test_backends_detect.py)."""
    videos = [_VideoDetections(job) for job in jobs]
    detector = jobs[0].backend("open_vocab_detector")  # one source: the same backend for each view
    together: dict[tuple, list[_VideoDetections]] = {}
    for v in videos:
        together.setdefault((tuple(v.concepts), v.size), []).append(v)
    for (concepts, _size), group in together.items():
        live = list(group)
        while live:
            got = [(v, next(v.batches, None)) for v in live]
            live = [v for v, b in got if b is not None]
            batches = [b for _, b in got if b is not None]
            if not batches:
                break
            if not concepts:
                found: list = [None] * len(batches)
            elif callable(getattr(detector, "detect_many", None)):
                found = detector.detect_many(batches, list(concepts))
            else:  # a backend without a batched call (groundtruth): one view after the other
                found = [detector.detect(b, list(concepts)) for b in batches]
            for v, b, d in zip(live, batches, found, strict=True):
                v.add(b, d)
    for v in videos:
        v.write()


DETECT = Stage(
    name="detect",
    outputs=schema.ARTIFACTS["detect"],
    version="1",
    unit_kind="video",
    run=run_detect,
    group="source",  # a source's views on one worker: their frames share the detector's calls
    run_group=run_detect_views,
    needs=("candidates", "project"),
    sections=("detect",),
    backends=(BackendUse("open_vocab_detector", "detect.backend"),),
    gpu=True,
    gpu_memory_gib=6,  # YOLO-World-v2-X, 16 frames at 640 px (rough: `make gpu-check` measures it)
    description="Open-vocabulary detection at 2 FPS, occurrence statistics and the frequency filter",
)


# ------------------------------------------------------------------------------ segment
def _segment_units(plan: Plan, stage: Stage) -> list[str]:
    """The clips of every projected video, from the project stage's views.parquet durations."""
    clip_s = plan.config.segment.clip_seconds
    out = []
    for source, (key, _fp) in plan.current.get("project", {}).items():
        views = plan.store.read_table(UnitRef("project", source, key), VIEWS_FILE).to_pylist()
        for v in views:
            for c in seg.clip_spans(float(v["duration_s"]), clip_s):
                out.append(ids.clip_id(v["video_id"], c.index))
    return out


def _drawn_in_clip(store: Store, config: Config, video_id: str, index: int) -> list[tuple[str, str | None, list]]:
    """The tracks reviewers drew (the video's fix file) that reach into segmentation clip ``index``;
    none when the file is missing or does not parse (the metadata stage says why)."""
    found = _fix_file(store, config, video_id)
    if found is None:
        return []
    try:
        fixset = fx.parse_fix_text(found[1].decode("utf-8", errors="replace"), found[0], video_id)
    except fx.FixError:
        return []
    cs = config.segment.clip_seconds
    return [
        (key, concept, frames)
        for key, concept, frames in fx.drawn_tracks(fixset)
        if fx.track_span(frames)[0] < (index + 1) * cs and fx.track_span(frames)[1] >= index * cs - seg.SAMPLE_STEP
    ]


def _segment_raw(config: Config, store: Store, unit: str) -> dict[str, str]:
    """The boxes reviewers drew in this clip (only when there are some: the key is otherwise as before)."""
    vid, index = ids.split_clip_id(unit)
    drawn = _drawn_in_clip(store, config, vid, index)
    return {"drawn": hashlib.sha256(",".join(sorted(k for k, _, _ in drawn)).encode()).hexdigest()} if drawn else {}


def _prompts(
    drawn: list, view: dict, batch, index: int, clip_seconds: float
) -> list[tuple[str, str | None, int, tuple]]:
    """(track key, concept, frame position in the batch, drawn box in view pixels) of every 2 FPS
    timestamp of the clip where a drawn track shows a box (laid as the metadata stage lays it)."""
    pos_of = {int(k): i for i, k in enumerate(batch.sample_indices)}
    out = []
    for key, concept, frames in drawn:
        for k, box in sorted(
            meta.track_boxes(frames, float(view["duration_s"]), (int(view["width"]), int(view["height"]))).items()
        ):
            if box is not None and k in pos_of and seg.clip_of_sample(k, clip_seconds) == index:
                out.append((key, concept, pos_of[k], box))
    return out


@dataclass
class ClipFeed:
    """What segment's model reads for one clip (``feed_segment``): the kept concepts, the drawn
    tracks, and the clip's 2 FPS frames as a folder of JPEGs (``batch``: None when there is nothing
    to segment). ``close`` removes the folder."""

    view: dict
    span: seg.ClipSpan
    concepts: list[str]
    drawn: list
    batch: backends.FrameBatch | None
    folder: tempfile.TemporaryDirectory | None

    def close(self) -> None:
        if self.folder is not None:
            self.folder.cleanup()


def feed_segment(job: Job) -> ClipFeed:
    """The CPU half of a segment unit: decode the clip's 2 FPS frames and write them as the JPEG
    folder SAM3 reads (a whole clip stays on disk, not in memory). On a worker running a video's
    clips (``SEGMENT.group``) the next clips' folders are written while SAM3 works on this one."""
    p: seg.SegmentParams = job.config.segment
    vid, index = ids.split_clip_id(job.unit)
    view = _view_row(job, vid)
    spans = {c.index: c for c in seg.clip_spans(float(view["duration_s"]), p.clip_seconds)}
    if index not in spans:
        raise Skip(f"clip {index} is past the end of {vid}")
    span = spans[index]
    stats = job.read("detect", "concept_stats.parquet").to_pylist()
    concepts = [r["concept"] for r in stats if r["kept"]]
    drawn = _drawn_in_clip(job.store, job.config, vid, index)
    if not (concepts or drawn):
        return ClipFeed(view, span, concepts, drawn, None, None)
    folder = tempfile.TemporaryDirectory(prefix="vsi-clip-")
    try:

        def jpeg_files(rgbs: Iterator[np.ndarray]) -> seg.JpegFrames:
            paths: list[Path] = []
            for rgb in rgbs:
                path = Path(folder.name) / f"{len(paths):05d}.jpg"
                cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95])
                paths.append(path)
                job.progress(len(paths), span.n_samples, "frames")
            return seg.JpegFrames(paths)

        (batch,) = frame_batches(
            job.file("project", f"{vid}.mp4"),
            vid,
            float(view["fps"]),
            None,
            SAMPLE_FPS,
            span.start,
            span.end,
            p.frame_max_width,
            images=jpeg_files,
        )
    except BaseException:
        folder.cleanup()
        raise
    return ClipFeed(view, span, concepts, drawn, batch, folder)


def run_segment(job: Job) -> None:
    p: seg.SegmentParams = job.config.segment
    vid, index = ids.split_clip_id(job.unit)
    clip: ClipFeed = job.feed()
    embeds = appearance_of(job.config) == "embedding"  # embeddings.parquet is written: reconcile reads it
    inst_rows: list[dict] = []
    seg_rows: list[dict] = []
    speck_rows: list[dict] = []
    emb_rows: list[dict] = []
    prompted_rows: list[dict] | None = None
    try:
        concepts, drawn, batch, view = clip.concepts, clip.drawn, clip.batch, clip.view
        if batch is not None:
            segmenter = job.backend("segmenter")
            if concepts:
                records = segmenter.segment(batch, concepts)
                errors = job.config.model_errors
                if errors.segmenter != "none" and records:
                    h, w = np.asarray(batch.images[0]).shape[:2]
                    records = me.perturb_segments(
                        records,
                        errors.segmenter,
                        me.rng_for(errors.seed, vid, index),
                        (w, h),
                        seg.SAMPLE_STEP,
                        concepts,
                    )
                seg_rows, inst_rows, speck_rows = seg.clip_tables(vid, index, batch, records, p.backend, p)
                if embeds:
                    emb_rows = seg.embedding_rows(
                        vid, index, batch, seg_rows, job.backend("image_embedder"), p.embed_crops
                    )
            if drawn and backends.takes_box_prompts(segmenter):
                prompted_rows = _prompted_rows(
                    vid, index, batch, _prompts(drawn, view, batch, index, p.clip_seconds), segmenter, view, p
                )
    finally:
        clip.close()
    job.out.write_table("segments.parquet", schema.table(schema.CLIP_SEGMENTS, seg_rows))
    job.out.write_table("instances.parquet", schema.table(schema.CLIP_INSTANCES, inst_rows))
    job.out.write_table("specks.parquet", schema.table(schema.CLIP_SPECKS, speck_rows))
    if embeds:
        job.out.write_table("embeddings.parquet", schema.table(schema.CLIP_EMBEDDINGS, emb_rows))
    if prompted_rows is not None:
        job.out.write_table("prompted.parquet", schema.table(schema.PROMPTED_MASKS, prompted_rows))


def _prompted_rows(
    vid: str, index: int, batch, prompts: list, segmenter, view: dict, p: seg.SegmentParams
) -> list[dict]:
    """schema.PROMPTED_MASKS rows: the segmenter's mask for each drawn box (boxes scaled to the frames)."""
    if not prompts:
        return []
    h, w = batch.images[0].shape[:2]
    sx, sy = w / float(view["width"]), h / float(view["height"])
    asks = [
        backends.BoxPrompt(concept, pos, (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy))
        for _, concept, pos, box in prompts
    ]
    rows = []
    for r in segmenter.segment_boxes(batch, asks):
        key, concept, pos, box = prompts[r.local_id]
        mask = np.asarray(r.mask, dtype=bool)
        if mask.shape != (h, w):
            mask = cv2.resize(mask.astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST) > 0
        if not mask.any():
            continue
        ys, xs = np.nonzero(mask)
        rows.append(
            {
                "video_id": vid,
                "clip_index": index,
                "prompt": key,
                "sample_index": int(batch.sample_indices[pos]),
                "time": float(batch.times[pos]),
                "concept": concept,
                "box_x0": float(box[0]),
                "box_y0": float(box[1]),
                "box_x1": float(box[2]),
                "box_y1": float(box[3]),
                "x0": float(xs.min()),
                "y0": float(ys.min()),
                "x1": float(xs.max() + 1),
                "y1": float(ys.max() + 1),
                "area": int(mask.sum()),
                "score": float(r.score),
                "image_width": int(w),
                "image_height": int(h),
                "mask_rle": seg.encode_rle(mask),
                "backend": p.backend,
            }
        )
    return rows


SEGMENT = Stage(
    name="segment",
    outputs=schema.ARTIFACTS["segment"],
    version="2",
    unit_kind="clip",
    run=run_segment,
    feed=feed_segment,  # the clip's JPEG folder, written ahead on a worker running a video's clips
    group="video",
    needs=("detect", "project"),
    sections=("segment", "model_errors.segmenter", "model_errors.seed"),
    backends=(
        BackendUse("segmenter", "segment.backend"),
        BackendUse("image_embedder", "segment.appearance", off=(seg.HISTOGRAM,)),
    ),
    gpu=True,
    units=_segment_units,
    raw_inputs=_segment_raw,  # the boxes reviewers drew in the clip: segmented as prompts
    unkeyed_sections=("metadata",),  # only where the fix files are (metadata.fixes_dir): what they draw is in raw
    gpu_memory_gib=24,  # SAM3 video (848M) tracking a 5-minute clip at 2 FPS (rough)
    description="Instance masks of the kept concepts, one clip at a time (COCO RLE, clip-local ids)",
)


# ------------------------------------------------------------------------------ pose
def _view_feed(path: Path, view: str, p: po.PoseParams) -> Callable[[], Iterator[tuple[int, float, int, np.ndarray]]]:
    """A view's frames at 2 FPS, opened fresh on each call; a chunk's frames are decoded (by a thread
    named for the view) while the estimator runs on the previous chunk."""
    return lambda: prefetched(
        sampled_frames(path, SAMPLE_FPS, max_width=p.frame_max_width), depth=p.chunk_frames, name=f"feed-{view}"
    )


def _view_inputs(job: Job, p: po.PoseParams, views: dict[str, dict]) -> dict[str, po.ViewInput]:
    """The configured views (``pose.views``) of the unit's source, in that order; ``views``: its
    ``views.parquet`` rows by view."""
    wanted = [v for v in p.views if v in views]
    if not wanted:
        raise UnitError(f"pose.views {p.views} names none of the projected views {sorted(views)}")
    return {
        v: po.ViewInput(
            views[v]["video_id"],
            float(views[v]["yaw_deg"]),
            float(views[v]["hfov_deg"]),
            float(views[v]["fps"]),
            int(views[v]["width"]),
            _view_feed(job.file("project", views[v]["path"]), v, p),
        )
        for v in wanted
    }


def run_view_pose(job: Job) -> None:
    p: po.PoseParams = job.config.pose
    views = {r["view"]: r for r in job.read("project", VIEWS_FILE).to_pylist()}
    inputs = _view_inputs(job, p, views)
    estimates = po.estimate_views(
        inputs,
        lambda vi: job.backend("pose_estimator", **p.estimator_options(vi.hfov_deg).as_options()),
        p,
        lambda d, t: job.progress(d, t, "views"),
    )
    pose_rows, match_rows = [], []
    for v, est in estimates.items():
        vid = inputs[v].video_id
        pose_rows += po.view_pose_rows(vid, est, f"{p.backend}:independent")
        match_rows += po.view_match_rows(vid, est.track)
    job.out.write_table("view_poses.parquet", schema.table(schema.VIEW_POSES, pose_rows))
    job.out.write_table("view_matches.parquet", schema.table(schema.VIEW_MATCHES, match_rows))


# What the view_pose stage's estimates depend on: the backend and its input. The fusion's and the
# loop closure's fields (outlier_deg, loops) are the pose stage's alone, so changing them re-runs
# only the CPU half, not the GPU pass over every view.
VIEW_POSE_SECTIONS = (
    "pose.backend",
    "pose.views",
    "pose.chunk_frames",
    "pose.frame_max_width",
    "pose.twoview_features",
    "pose.camera_height",
)

VIEW_POSE = Stage(
    name="view_pose",
    outputs=schema.ARTIFACTS["view_pose"],
    version="1",
    unit_kind="source",
    run=run_view_pose,
    needs=("project",),
    sections=VIEW_POSE_SECTIONS,
    gpu=True,
    backends=(BackendUse("pose_estimator", "pose.backend"),),
    gpu_memory_gib=12,  # DA3-Large on 64-frame windows at 504 px (rough)
    description="Each view's own camera poses per 2 FPS timestamp (the pose backend: DA3 in production)",
)


def run_pose(job: Job) -> None:
    p: po.PoseParams = job.config.pose
    views = {r["view"]: r for r in job.read("project", VIEWS_FILE).to_pylist()}
    inputs = _view_inputs(job, p, views)
    pose_rows = job.read("view_pose", "view_poses.parquet").to_pylist()
    match_rows = po.view_match_rows_of(job.read("view_pose", "view_matches.parquet"))
    estimates = {
        v: po.view_estimate_from_rows(
            [r for r in pose_rows if r["video_id"] == vi.video_id],
            [r for r in match_rows if r["video_id"] == vi.video_id],
            vi.fps,
            vi.width,
        )
        for v, vi in inputs.items()
    }
    reports: list[loops.LoopReport] = []
    fused = po.fuse_source(inputs, estimates, p, on_loops=reports.append)
    rows = []
    for v, row in sorted(views.items()):
        own = estimates[v].track.K if v in estimates else fused.K[:0]
        K = own[0] if len(own) else fused.K[0] if len(fused.K) else np.eye(3)
        rows += po.pose_rows(row["video_id"], po.derive_view(fused, float(row["yaw_deg"]), K), p.backend)
    job.out.write_table("poses.parquet", schema.table(schema.POSES, rows))
    loop_rows = [row for r in reports for row in loops.loop_rows(job.unit, fused, r)]
    job.out.write_table("loops.parquet", schema.table(schema.POSE_LOOPS, loop_rows))


POSE = Stage(
    name="pose",
    outputs=schema.ARTIFACTS["pose"],
    version="8",
    unit_kind="source",
    run=run_pose,
    needs=("view_pose", "project"),
    sections=("pose",),
    description="Camera poses per 2 FPS timestamp: the views' own estimates fused per source, loops closed, "
    "derived per view",
)


# ------------------------------------------------------------------------------ reconcile
def _video_poses(job: Job, vid: str) -> po.Track | None:
    t = job.read("pose", "poses.parquet")
    rows = [r for r in t.to_pylist() if r["video_id"] == vid]
    return po.track_from_rows(rows) if rows else None


def answer_rules(config, view: dict) -> rc.AnswerRules:
    """What the qa stage's VOC and VOO answers read, for reconciliation's ``answer_impact``."""
    qa = config.qa
    return rc.AnswerRules(
        float(view["duration_s"]),
        qa.voc_checkpoint_s if qa.voc_checkpoint_s is not None else qa.clip_seconds,
        qa.voo_readings[0].min_visible_s,
    )


def appearance_of(config) -> rc.Appearance:
    """What reconciliation's appearance term compares: the colour histograms, or the image
    embeddings ``segment.appearance``'s embedder wrote."""
    return "histogram" if config.segment.appearance == seg.HISTOGRAM else "embedding"


def reconcile_view(
    config, vid: str, view: dict, instances: list[rc.ClipInstance], clips: list, poses: po.Track | None
) -> rc.Reconciled:
    """Reconcile one view video as the reconcile stage does: the simulated pose errors of
    ``model_errors.poses`` applied to its poses first (none in production); appearance as
    ``segment.appearance`` says (``appearance_of``)."""
    errors = config.model_errors
    if poses is not None and errors.poses != "none":
        poses = me.perturb_track(poses, errors.poses, me.rng_for(errors.seed, vid, "poses"))
    return rc.reconcile(
        vid,
        instances,
        clips,
        config.reconcile,
        poses,
        camera_height=config.pose.ground_height(),
        rules=answer_rules(config, view),
        appearance=appearance_of(config),
    )


SEGMENT_FIELDS = (
    "clip_index",
    "local_id",
    "sample_index",
    "time",
    "frame",
    "fps",
    "x0",
    "y0",
    "x1",
    "y1",
    "area",
    "image_width",
    "image_height",
)


def clip_instances_in_view(
    view: dict, inst_rows: list[dict], seg_rows: list[dict], emb_rows: list[dict] | None = None
) -> list[rc.ClipInstance]:
    """The clip-local instances of one view video (its ``views.parquet`` row) for reconciliation,
    their boxes in the view's own pixels (segmentation may have run on downscaled frames), with
    their image embeddings when ``emb_rows`` (schema.CLIP_EMBEDDINGS) are given."""
    for r in seg_rows:
        s = float(view["width"]) / float(r["image_width"])
        if s != 1.0:
            r.update(x0=r["x0"] * s, y0=r["y0"] * s, x1=r["x1"] * s, y1=r["y1"] * s, area=int(round(r["area"] * s * s)))
        r.update(image_width=int(view["width"]), image_height=int(view["height"]))
    return rc.load_clip_instances(inst_rows, seg_rows, emb_rows)


def _embeddings(job: Job, unit: str) -> list[dict]:
    ref = job.ref("segment", unit)
    if not job.store.has_file(ref, "embeddings.parquet"):
        raise UnitError(
            f"segment:{unit} has no embeddings.parquet, and segment.appearance is "
            f"{job.config.segment.appearance!r} (re-run it: vsi-wild run --only segment --force)"
        )
    return job.read("segment", "embeddings.parquet", unit).to_pylist()


def run_reconcile(job: Job) -> None:
    vid = job.unit
    view = _view_row(job, vid)
    clip_s = job.config.segment.clip_seconds
    clips = seg.clip_spans(float(view["duration_s"]), clip_s)
    inst_rows, seg_rows = [], []
    emb_rows: list[dict] | None = None if appearance_of(job.config) == "histogram" else []
    for unit in sorted(job.refs("segment")):
        inst_rows += job.read("segment", "instances.parquet", unit).to_pylist()
        seg_rows += job.read("segment", "segments.parquet", unit).select(list(SEGMENT_FIELDS)).to_pylist()
        if emb_rows is not None:
            emb_rows += _embeddings(job, unit)
    instances = clip_instances_in_view(view, inst_rows, seg_rows, emb_rows)
    result = reconcile_view(job.config, vid, view, instances, clips, _video_poses(job, vid))
    job.out.write_table(
        "clips.parquet",
        schema.table(
            schema.CLIP_SPANS,
            [
                {
                    "video_id": vid,
                    "clip_index": c.index,
                    "start": c.start,
                    "end": c.end,
                    "first_sample": c.first_sample,
                    "n_samples": c.n_samples,
                }
                for c in clips
            ],
        ),
    )
    job.out.write_table("clip_instances.parquet", schema.table(schema.CLIP_INSTANCES, inst_rows))
    job.out.write_table("merge_decisions.parquet", schema.table(schema.MERGE_DECISIONS, result.decisions))
    job.out.write_table("members.parquet", schema.table(schema.INSTANCE_MEMBERS, result.members))
    job.out.write_table("observations_auto.parquet", schema.table(schema.OBSERVATIONS, result.observations))
    insts = meta.instances_from_observations(result.observations)
    auto = meta.instance_rows(
        vid,
        insts.values(),
        float(view["fps"]),
        job.config.metadata,
        _video_poses(job, vid),
        job.config.pose.ground_height(),
        (int(view["width"]), int(view["height"])),
        job.config.reconcile.level_views,
    )
    job.out.write_table("instances_auto.parquet", schema.table(schema.INSTANCES, auto))


RECONCILE = Stage(
    name="reconcile",
    outputs=schema.ARTIFACTS["reconcile"],
    version="16",
    unit_kind="video",
    run=run_reconcile,
    needs=("segment", "pose", "project"),
    sections=(
        "segment",
        "reconcile",
        "metadata",
        "pose",
        "model_errors.poses",
        "model_errors.seed",
        "qa.clip_seconds",
        "qa.voc_checkpoint_s",
        "qa.voo_readings",
    ),
    description="Cross-clip reconciliation: global instance ids, every merge decision recorded",
)


# ------------------------------------------------------------------------------ metadata
def _metadata_raw(config: Config, store: Store, unit: str) -> dict[str, str]:
    raw = {"fixes": _digest(_fix_file(store, config, unit))}
    vocabulary = vocabulary_file(store, config)
    if vocabulary is not None:  # only then: a build without one keeps its cache keys
        raw["vocabulary"] = _digest(vocabulary)
    return raw


def auto_metadata(job: Job) -> tuple[meta.FixInputs, list[dict]]:
    """One video's automatic metadata, which its fix file corrects (``apply_fixes``' inputs), and
    its view-agreement rows. The verification app dry-runs a fix file against the same inputs."""
    p: meta.MetadataParams = job.config.metadata
    vid = job.unit
    source_id, view_name = ids.split_video_id(vid)
    view = _view_row(job, vid)
    views = {r["view"]: r for r in job.read("project", VIEWS_FILE).to_pylist()}
    duration, fps = float(view["duration_s"]), float(view["fps"])

    # Motion of this view, and whether the four views' independent estimates agree.
    pose_rows = job.read("pose", "poses.parquet").to_pylist()
    track = po.track_from_rows([r for r in pose_rows if r["video_id"] == vid])
    clips = meta.motion_clips(duration, p.motion_clip_seconds)
    samples = meta.motion_samples(vid, track, p)
    indep_rows = job.read("view_pose", "view_poses.parquet").to_pylist()
    independent = {}
    for v, row in views.items():
        rows = [r for r in indep_rows if r["video_id"] == row["video_id"]]
        if rows:
            independent[v] = po.track_from_rows(rows)
    fused = meta.source_track_from_view(track, float(view["yaw_deg"]))
    agreement_rows, agreement = meta.view_agreement(
        source_id, fused, independent, {v: float(r["yaw_deg"]) for v, r in views.items()}, clips, p
    )
    motion = meta.motion_rows(vid, samples, clips, p, agreement)
    specks: list[dict] = []  # the segment stage's masks too small to track, which a speck fix tells
    for unit in sorted(job.refs("segment")):
        specks += job.read("segment", "specks.parquet", unit).to_pylist()
    inputs = meta.FixInputs(
        video_id=vid,
        observations=job.read("reconcile", "observations_auto.parquet").to_pylist(),
        members=job.read("reconcile", "members.parquet").to_pylist(),
        motion=motion,
        motion_samples=samples,
        duration_s=duration,
        fps=fps,
        params=p,
        poses=track,
        clip_seconds=job.config.segment.clip_seconds,
        camera_height=job.config.pose.ground_height(),
        image_size=(int(view["width"]), int(view["height"])),
        level=job.config.reconcile.level_views,
        specks=specks,
    )
    return inputs, agreement_rows


def run_metadata(job: Job) -> None:
    vid = job.unit
    found = _fix_file(job.store, job.config, vid)
    fixset = (
        fx.parse_fix_text(found[1].decode("utf-8", errors="replace"), found[0], vid) if found else fx.FixSet.empty(vid)
    )
    inputs, agreement_rows = auto_metadata(job)
    derived = meta.apply_fixes(fixset, inputs, load_vocabulary(job.store, job.config))
    job.out.write_table("instances.parquet", schema.table(schema.INSTANCES, derived.instances))
    job.out.write_table("observations.parquet", schema.table(schema.OBSERVATIONS, derived.observations))
    job.out.write_table("motion.parquet", schema.table(schema.MOTION, derived.motion))
    job.out.write_table("motion_samples.parquet", schema.table(schema.MOTION_SAMPLES, inputs.motion_samples))
    job.out.write_table("view_agreement.parquet", schema.table(schema.VIEW_AGREEMENT, agreement_rows))
    job.out.write_table("fixes_applied.parquet", schema.table(schema.FIXES_APPLIED, derived.applied))
    assert inputs.poses is not None and inputs.image_size is not None  # auto_metadata sets both
    # each instance in the view's cameras, once: the visibility track and the specks both read it
    projected = vis.project_instances(
        derived.instances,
        derived.observations,
        inputs.poses,
        inputs.image_size,
        inputs.params.visibility_min_consistency,
    )
    job.out.write_table(
        "visibility.parquet",
        schema.table(
            schema.VISIBILITY,
            vis.visibility_columns(vid, derived.instances, derived.observations, inputs.poses, projected),
        ),
    )
    job.out.write_table(
        "specks.parquet",
        schema.table(
            schema.SPECKS,
            vis.speck_rows(
                vid,
                inputs.specks or [],
                derived.members,
                derived.instances,
                inputs.poses,
                projected,
                derived.specks_told,
            ),
        ),
    )
    if derived.reviews:  # the qa stage drops the rejected questions (only then: no file, same bytes)
        job.out.write_table("question_reviews.parquet", schema.table(schema.QUESTION_REVIEWS, derived.reviews))
    decisions = job.read("reconcile", "merge_decisions.parquet").to_pylist()
    members = job.read("reconcile", "members.parquet").to_pylist()
    pending = meta.pending_reviews(decisions, members, fixset, derived.members)
    if pending:  # the qa stage marks the questions that rest on them provisional
        job.out.write_table("review_pending.parquet", schema.table(schema.REVIEW_PENDING, pending))
    unreviewed = meta.unreviewed_decisions(decisions, members, fixset, derived.members)
    if unreviewed:  # the qa stage weighs each VOC answer by those it rests on
        job.out.write_table("unreviewed_decisions.parquet", schema.table(schema.UNREVIEWED_DECISIONS, unreviewed))


METADATA = Stage(
    name="metadata",
    outputs=schema.ARTIFACTS["metadata"],
    version="9",
    unit_kind="video",
    run=run_metadata,
    needs=("reconcile", "pose", "view_pose", "project", "segment"),
    sections=("metadata", "segment", "pose", "reconcile"),
    raw_inputs=_metadata_raw,
    description="Derived instances and motion of one video, with its human fixes applied",
)

STAGES = [CANDIDATES, DETECT, SEGMENT, VIEW_POSE, POSE, RECONCILE, METADATA]
