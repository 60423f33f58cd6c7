"""Every artifact's Arrow schema, in one place.

Each artifact the pipeline writes is a parquet file with one of the schemas below (images and
videos are files referenced from parquet by path). Conventions:
- times are seconds (float64); every row that points into a video also carries the frame index
  and that video's fps;
- ids follow ``vsi_wild.ids``; boxes are ``x0, y0, x1, y1`` in pixels of the image they refer to
  unless a column name says ``_norm`` (fractions of width/height);
- world coordinates are metres, right-handed, z up; yaw in degrees, positive turns right
  (clockwise seen from above), 0 = +y.

Add a new artifact by adding its schema here and listing it in ``ARTIFACTS`` under the stage
that writes it: the engine refuses outputs that do not match their stage's declarations.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")


def _schema(doc: str, *fields: pa.Field) -> pa.Schema:
    return pa.schema(list(fields), metadata={"doc": doc})


def f(name: str, typ: pa.DataType, nullable: bool = False, doc: str | None = None) -> pa.Field:
    return pa.field(name, typ, nullable=nullable, metadata={"doc": doc} if doc else None)


# --------------------------------------------------------------------------------------------
# Store bookkeeping
# --------------------------------------------------------------------------------------------

MANIFEST = _schema(
    "The files of one completed (stage, unit) output; written last, so its presence means done.",
    f("file", pa.string(), doc="path relative to the unit's output folder"),
    f("bytes", pa.int64()),
    f("sha256", pa.string()),
)

STATUS = _schema(
    "One row per (stage, unit): the latest state of that unit.",
    f("stage", pa.string()),
    f("unit", pa.string()),
    f("state", pa.string(), doc="running | done | failed | skipped"),
    f("key", pa.string(), doc="cache key of the latest attempt"),
    f("fingerprint", pa.string(), True, doc="content fingerprint of the output (done only)"),
    f("error", pa.string(), True),
    f("error_class", pa.string(), True, doc="bad_input | unavailable | private | ... | internal"),
    f("retryable", pa.bool_(), True, doc="false: a re-run does not retry it (unless --force)"),
    f("attempts", pa.int64(), doc="times this unit was computed (cache hits do not count)"),
    f("started_at", TIMESTAMP, True),
    f("ended_at", TIMESTAMP, True),
    f("duration_s", pa.float64(), True),
    f("host", pa.string(), True),
    f("pipeline_version", pa.string()),
)

STATUS_INDEX = pa.schema(
    list(STATUS)
    + [
        f("file", pa.string(), doc="the row's file, relative to status/"),
        f("file_mtime_ns", pa.int64(), doc="that file's modification time when the row was read"),
        f("file_bytes", pa.int64()),
    ],
    metadata={
        "doc": "status/_index.parquet: every status row with its file's stat, so a reader parses only "
        "the rows written since (Store.status_table)"
    },
)

# --------------------------------------------------------------------------------------------
# Sources: registered by crawl, `vsi-wild add` or the sample generator; completed by probe
# --------------------------------------------------------------------------------------------

SOURCE = _schema(
    "One row per 360° source video: where it came from and what it is.",
    f("source_id", pa.string()),
    f("origin", pa.string(), doc="youtube | local | sample"),
    f("path", pa.string(), True, doc="local file (absolute, or relative to the data root)"),
    f("url", pa.string(), True),
    f("title", pa.string(), True),
    f("channel", pa.string(), True),
    f("license", pa.string(), True),
    f("upload_date", pa.string(), True, doc="YYYYMMDD as yt-dlp gives it"),
    f("query", pa.string(), True),
    f("category", pa.string(), True, doc="one of the 8 scene categories, when known"),
    f("language", pa.string(), True),
    f("crawl_time", TIMESTAMP, True),
    f("ytdlp_version", pa.string(), True),
    f("projection", pa.string(), True, doc="equirectangular | unknown | ..."),
    f("duration_s", pa.float64(), True),
    f("width", pa.int64(), True),
    f("height", pa.int64(), True),
    f("fps", pa.float64(), True, doc="average frame rate"),
    f("n_frames", pa.int64(), True),
    f("size_bytes", pa.int64(), True),
    f("content_sha256", pa.string(), True),
    f("codec", pa.string(), True),
    f("provenance", pa.string(), True, doc="JSON: generator parameters, info-dict path, ..."),
)

REMOVED_SOURCE = _schema(
    "A source a person removed (`vsi-wild remove`, removed/<source_id>.parquet): the crawl and the "
    "sample stage do not register it again; `vsi-wild add` of the file or `vsi-wild remove --undo` does.",
    f("source_id", pa.string()),
    f("removed_at", TIMESTAMP),
    f("reason", pa.string(), True),
)

CRAWL_QUERIES = _schema(
    "The search stage's queries (queries.parquet): what was asked and what came back.",
    f("query", pa.string()),
    f("category", pa.string(), doc="one of the 8 scene categories"),
    f("language", pa.string()),
    f("cue", pa.string(), doc="the panorama cue ('' for an expander's query)"),
    f("term", pa.string(), doc="the category term ('' for an expander's query)"),
    f("origin", pa.string(), doc="table | expander:<name>"),
    f("results", pa.int64(), True, doc="results returned; null when the query failed"),
    f("error_class", pa.string(), True),
    f("error", pa.string(), True),
)

CRAWL_CANDIDATES = _schema(
    "The search stage's candidates (candidates.parquet): one row per YouTube id found, with the "
    "filters' verdict and yt-dlp's info dict.",
    f("source_id", pa.string()),
    f("url", pa.string()),
    f("title", pa.string(), True),
    f("channel", pa.string(), True),
    f("duration_s", pa.float64(), True),
    f("width", pa.int64(), True, doc="of the best video format (full info only)"),
    f("height", pa.int64(), True),
    f("fps", pa.float64(), True),
    f("live_status", pa.string(), True),
    f("media_type", pa.string(), True),
    f("projection", pa.string(), True, doc="equirectangular | equirectangular_stereo | mesh | flat | unknown"),
    f("projection_evidence", pa.string(), True, doc="JSON: format_note, spherical, aspect, ..."),
    f("query", pa.string(), doc="the first query that found it"),
    f("category", pa.string()),
    f("language", pa.string()),
    f("queries", pa.list_(pa.string()), doc="every query that found it"),
    f("rank", pa.int64(), doc="position in the first query's results"),
    f("accepted", pa.bool_()),
    f("reject_reason", pa.string(), True),
    f("error_class", pa.string(), True, doc="when the info could not be had (private, removed, ...)"),
    f("extracted", pa.bool_(), doc="info_json is the full info dict (else the flat search entry)"),
    f("info_json", pa.string(), True, doc="yt-dlp's info dict (sanitized), JSON"),
)

# --------------------------------------------------------------------------------------------
# Ground truth of a generated sample (stages/sample)
# --------------------------------------------------------------------------------------------

TRUTH_POSES = _schema(
    "Camera pose per frame of a generated sample (world frame, metres, degrees).",
    f("source_id", pa.string()),
    f("frame", pa.int64()),
    f("time", pa.float64()),
    f("x", pa.float64()),
    f("y", pa.float64()),
    f("z", pa.float64()),
    f("yaw_deg", pa.float64(), doc="heading of the panorama's centre column; + turns right"),
    f("pitch_deg", pa.float64()),
    f("roll_deg", pa.float64()),
    f("place", pa.string(), doc="the place the camera is in"),
)

TRUTH_OBJECTS = _schema(
    "Every object instance of a generated sample.",
    f("source_id", pa.string()),
    f("instance_id", pa.int64(), doc="unique within the sample"),
    f("category", pa.string()),
    f("shape", pa.string(), doc="box | cylinder | sphere | cone"),
    f("x", pa.float64(), doc="centre"),
    f("y", pa.float64()),
    f("z", pa.float64()),
    f("size_x", pa.float64()),
    f("size_y", pa.float64()),
    f("size_z", pa.float64()),
    f("place", pa.string()),
)

TRUTH_VISIBILITY = _schema(
    "Per 2 FPS timestamp and perspective view: the instances visible (in the frustum, not fully "
    "occluded: at least one pixel of the view's instance-id buffer), with their image boxes and "
    "masks at the truth resolution. Boxes are in pixel-edge coordinates (pixel (i, j) covers "
    "[i, i+1) x [j, j+1), as pycocotools' toBbox), i.e. +0.5 from geometry's pixel-centre ones.",
    f("source_id", pa.string()),
    f("view", pa.string()),
    f("sample_index", pa.int64(), doc="k of t_k = k / 2 s"),
    f("time", pa.float64()),
    f("frame", pa.int64(), doc="source frame index nearest to time"),
    f("fps", pa.float64()),
    f("instance_id", pa.int64()),
    f("category", pa.string()),
    f("x0", pa.float64()),
    f("y0", pa.float64()),
    f("x1", pa.float64()),
    f("y1", pa.float64()),
    f("image_width", pa.int64()),
    f("image_height", pa.int64()),
    f("pixels", pa.int64(), doc="visible pixels of the instance"),
    f("mask_rle", pa.string(), doc="COCO RLE counts (compressed string) of the visible mask"),
)

TRUTH_FACES = _schema(
    "Per 2 FPS timestamp and perspective view: the face photographs visible, with the boxes of "
    "their face regions (the face inside the photograph, not the whole photograph; pixel-edge "
    "coordinates as in TRUTH_VISIBILITY).",
    f("source_id", pa.string()),
    f("view", pa.string()),
    f("sample_index", pa.int64()),
    f("time", pa.float64()),
    f("frame", pa.int64()),
    f("fps", pa.float64()),
    f("face_id", pa.int64()),
    f("x0", pa.float64()),
    f("y0", pa.float64()),
    f("x1", pa.float64()),
    f("y1", pa.float64()),
    f("image_width", pa.int64()),
    f("image_height", pa.int64()),
    f("pixels", pa.int64(), doc="visible pixels of the face region"),
)

TRUTH_PLACES = _schema(
    "The places of a generated sample (axis-aligned footprints).",
    f("source_id", pa.string()),
    f("place", pa.string()),
    f("x_min", pa.float64()),
    f("y_min", pa.float64()),
    f("x_max", pa.float64()),
    f("y_max", pa.float64()),
)

# --------------------------------------------------------------------------------------------
# Review (stages/review): the human keep/reject gate between sourcing and projection
# --------------------------------------------------------------------------------------------

REVIEW_DECISION = _schema(
    "A source's review decision: recorded by `vsi-wild review apply` under review/<source_id>.parquet "
    "and, for kept sources, the review stage's output (review.parquet).",
    f("source_id", pa.string()),
    f("decision", pa.string(), doc="keep | reject"),
    f("reason", pa.string(), True, doc="why (required to reject)"),
    f("reviewer", pa.string(), doc="who decided ('auto' for origins kept without review)"),
    f("decided_at", TIMESTAMP, True),
    f("suggestion", pa.string(), True, doc="the camera-motion heuristic's pre-filled suggestion"),
    f("motion_score", pa.float64(), True, doc="median optical flow, fraction of the frame width per second"),
    f("decision_file", pa.string(), True, doc="the CSV the decision came from"),
    f("line", pa.int64(), True, doc="its line in that CSV"),
)


# --------------------------------------------------------------------------------------------
# Projection (stages/project): four perspective views per source, faces blurred
# --------------------------------------------------------------------------------------------

VIEWS_TABLE = _schema(
    "The perspective videos made from one source (one row per view).",
    f("video_id", pa.string()),
    f("source_id", pa.string()),
    f("view", pa.string()),
    f("yaw_deg", pa.float64()),
    f("pitch_deg", pa.float64()),
    f("hfov_deg", pa.float64()),
    f("vfov_deg", pa.float64()),
    f("width", pa.int64()),
    f("height", pa.int64()),
    f("fps", pa.float64(), doc="average frame rate (timestamps are kept as decoded)"),
    f("n_frames", pa.int64()),
    f("duration_s", pa.float64()),
    f("path", pa.string(), doc="file name inside the unit's output folder"),
    f("sha256", pa.string()),
)

FACES = _schema(
    "Every face box blurred in a written view frame: the privacy audit trail.",
    f("video_id", pa.string()),
    f("frame", pa.int64()),
    f("time", pa.float64()),
    f("x0", pa.float64()),
    f("y0", pa.float64()),
    f("x1", pa.float64()),
    f("y1", pa.float64()),
    f("score", pa.float64()),
    f("backend", pa.string()),
    f("detected", pa.bool_(), doc="false when the box was carried from an earlier detection"),
)

# --------------------------------------------------------------------------------------------
# Metadata (stages/candidates, detect, segment, pose, metadata): the contract between the
# metadata stages and the QA stages. Angles: degrees, 0 = the view's heading, +90 = right.
# --------------------------------------------------------------------------------------------

POSES = _schema(
    "Camera pose per 2 FPS timestamp of one video (world-to-camera, OpenCV camera axes).",
    f("video_id", pa.string()),
    f("sample_index", pa.int64()),
    f("time", pa.float64()),
    f("frame", pa.int64()),
    f("fps", pa.float64()),
    f("extrinsics", pa.list_(pa.float64(), 12), doc="row-major 3x4 [R|t], world -> camera"),
    f("intrinsics", pa.list_(pa.float64(), 9), doc="row-major 3x3 K in view pixels"),
    f("x", pa.float64(), doc="camera centre in the world frame (scale as estimated)"),
    f("y", pa.float64()),
    f("z", pa.float64()),
    f("valid", pa.bool_()),
    f("backend", pa.string()),
)

VIEW_POSES = _schema(
    "Each view's own pose estimate per 2 FPS timestamp (the view_pose stage, before the views are "
    "fused): everything the pose stage's fusion reads of it but its matches (VIEW_MATCHES).",
    *POSES,
    f(
        "metric",
        pa.bool_(),
        True,
        doc="the backend measured step i-1 -> i's length in the track's unit "
        "(twoview: against the ground); null where the backend says nothing of its steps (DA3)",
    ),
    f(
        "chained",
        pa.bool_(),
        doc="the backend chains pairwise steps: valid says whether step i-1 -> i "
        "was measured (twoview), not whether both of its poses are",
    ),
    f(
        "frame_width",
        pa.int64(),
        doc="the width of the frames the backend saw (pose.frame_max_width); intrinsics are in the view's own pixels",
    ),
)

VIEW_MATCHES = _schema(
    "Per step a view's pose backend matched (twoview; none for DA3), the inlier bearings it was "
    "solved from, for the fusion's all-round solve (stages/pose.py rig_motion).",
    f("video_id", pa.string()),
    f("sample_index", pa.int64(), doc="the step's later sample (step i-1 -> i)"),
    f("n_matches", pa.int64()),
    f(
        "before",
        pa.list_(pa.float32()),
        doc="n_matches x 3 unit rays in the view's camera axes at sample i-1, row-major",
    ),
    f("after", pa.list_(pa.float32()), doc="the same matches' rays at sample i"),
)

POSE_LOOPS = _schema(
    "The revisits the pose stage recognised in one source's walk (stages/loops.py): two moments "
    "whose rigs show one place, an edge of the pose graph that closed the track's loops.",
    f("source_id", pa.string()),
    f("sample_index_a", pa.int64(), doc="the earlier moment (2 FPS sample)"),
    f("time_a", pa.float64()),
    f("sample_index_b", pa.int64(), doc="the later moment"),
    f("time_b", pa.float64()),
    f("inliers", pa.int64(), doc="matches one rotation of the rig explains"),
    f("turn_deg", pa.float64(), doc="heading at b minus heading at a (positive right)"),
    f("offset_right_m", pa.float64(), True, doc="camera b's position in camera a's ground axes; null: not measured"),
    f("offset_forward_m", pa.float64(), True),
    f("kept", pa.bool_(), doc="false: the other edges and the walk contradict it, the graph left it out"),
)

INSTANCES = _schema(
    "Derived object instances of one video (after reconciliation and human fixes).",
    f("video_id", pa.string()),
    f("concept", pa.string()),
    f("instance_id", pa.int64(), doc="global within the video"),
    f("first_time", pa.float64()),
    f("last_time", pa.float64()),
    f("first_frame", pa.int64()),
    f("last_frame", pa.int64()),
    f("fps", pa.float64()),
    f("n_observations", pa.int64(), doc="2 FPS timestamps at which it is visible"),
    f(
        "spans",
        pa.list_(pa.struct([("start", pa.float64()), ("end", pa.float64())])),
        doc="visible intervals (seconds)",
    ),
    f("x", pa.float64(), True, doc="world position when known"),
    f("y", pa.float64(), True),
    f("z", pa.float64(), True),
    f("origin", pa.string(), doc="auto | fix"),
    f(
        "times_given",
        pa.bool_(),
        doc="a person gave its first or last time (set_appearance) or its visible spans (add_instance): "
        "QA takes those times as seen under every reading, where it reads the visibility track for the rest",
    ),
)

MOTION = _schema(
    "Derived camera motion of one video, one row per clip (VMR's metadata).",
    f("video_id", pa.string()),
    f("clip_index", pa.int64()),
    f("clip_start", pa.float64()),
    f("clip_end", pa.float64()),
    f("state", pa.string(), doc="ok | none (no meaningful motion) | failed (a check failed)"),
    f("pivot_time", pa.float64(), True),
    f("pivot_frame", pa.int64(), True),
    f("fps", pa.float64()),
    f("angle_deg", pa.float64(), True, doc="motion direction relative to the view's heading, [-180, 180)"),
    f("speed", pa.float64(), True, doc="units of the pose backend per second"),
    f("stability", pa.float64(), True, doc="0..1, how steady the direction is around the pivot"),
    f("views_consistent", pa.bool_(), True, doc="the four views' motions agree"),
    f("reason", pa.string(), True),
    f("origin", pa.string(), doc="auto | fix"),
)

KEYFRAMES = _schema(
    "The keyframes of one video offered to whoever proposes candidate objects (an MLLM or a human).",
    f("video_id", pa.string()),
    f("index", pa.int64(), doc="0..n-1 in time order"),
    f("time", pa.float64()),
    f("frame", pa.int64()),
    f("fps", pa.float64()),
    f("path", pa.string(), doc="JPEG file name inside the unit's output folder"),
)

CANDIDATES = _schema(
    "Candidate object terms of one video and the canonical concept each was normalised to.",
    f("video_id", pa.string()),
    f("term", pa.string(), doc="the term as proposed (lower-cased, spaces collapsed)"),
    f("origin", pa.string(), doc="seed (the human list) | mllm (a proposal)"),
    f("concept", pa.string(), doc="canonical label; an MLLM term wins over a human synonym"),
    f("similarity", pa.float64(), doc="cosine similarity of term and concept (1 for the concept itself)"),
    f("embedder", pa.string()),
    f("threshold", pa.float64(), doc="similarity at or above which two terms are synonyms"),
)

DETECTIONS = _schema(
    "Open-vocabulary detections of one video at 2 FPS, candidates as prompts.",
    f("video_id", pa.string()),
    f("sample_index", pa.int64()),
    f("time", pa.float64()),
    f("frame", pa.int64()),
    f("fps", pa.float64()),
    f("concept", pa.string()),
    f("x0", pa.float64()),
    f("y0", pa.float64()),
    f("x1", pa.float64()),
    f("y1", pa.float64()),
    f("score", pa.float64()),
    f("image_width", pa.int64()),
    f("image_height", pa.int64()),
    f("backend", pa.string()),
)

CONCEPT_STATS = _schema(
    "Temporal occurrence statistics of each candidate concept in one video, and the frequency "
    "filter's verdict with its reason.",
    f("video_id", pa.string()),
    f("concept", pa.string()),
    f("n_samples", pa.int64(), doc="2 FPS timestamps of the video"),
    f("frames_present", pa.int64(), doc="timestamps with at least one detection"),
    f("fraction", pa.float64(), doc="frames_present / n_samples"),
    f("appearances", pa.int64(), doc="separate runs of presence (gaps longer than gap_s split runs)"),
    f("detections", pa.int64()),
    f("mean_per_frame", pa.float64(), doc="detections per timestamp where present"),
    f("max_score", pa.float64(), True),
    f("first_time", pa.float64(), True),
    f("last_time", pa.float64(), True),
    f("kept", pa.bool_()),
    f("reason", pa.string()),
)

CLIP_SEGMENTS = _schema(
    "Instance masks of one clip (one row per instance and 2 FPS timestamp); ids are clip-local.",
    f("video_id", pa.string()),
    f("clip_index", pa.int64()),
    f("sample_index", pa.int64()),
    f("time", pa.float64()),
    f("frame", pa.int64()),
    f("fps", pa.float64()),
    f("concept", pa.string()),
    f("local_id", pa.int64(), doc="stable across the clip's frames, unrelated across clips"),
    f("x0", pa.float64()),
    f("y0", pa.float64()),
    f("x1", pa.float64()),
    f("y1", pa.float64()),
    f("area", pa.int64(), doc="mask pixels"),
    f("score", pa.float64()),
    f("image_width", pa.int64()),
    f("image_height", pa.int64()),
    f("mask_rle", pa.string(), doc="COCO RLE counts (pycocotools' compressed string), size = image h, w"),
    f("backend", pa.string()),
)

CLIP_SPECKS = _schema(
    "Masks of one clip the segmenter returned (score at least segment.min_score) that are smaller than "
    "segment.min_area: too small to track or reconcile, kept as evidence that something of the concept was "
    "in view (the qa readings that count an object seen at all read them). One row per mask; ids clip-local, "
    "shared with segments.parquet where the same object is also masked larger in the clip.",
    f("video_id", pa.string()),
    f("clip_index", pa.int64()),
    f("sample_index", pa.int64()),
    f("time", pa.float64()),
    f("concept", pa.string()),
    f("local_id", pa.int64(), doc="the segmenter's id in the clip (segments.parquet's where it is there too)"),
    f("x0", pa.float64()),
    f("y0", pa.float64()),
    f("x1", pa.float64()),
    f("y1", pa.float64()),
    f("area", pa.int64(), doc="mask pixels, under segment.min_area"),
    f("score", pa.float64()),
)

PROMPTED_MASKS = _schema(
    "Masks of the boxes reviewers drew (fix files' add_instance / set_box keyframes, interpolated at "
    "every 2 FPS timestamp) in one clip, from a segmenter that takes box prompts; written only when the "
    "clip has drawn boxes and the configured segmenter takes them.",
    f("video_id", pa.string()),
    f("clip_index", pa.int64()),
    f("prompt", pa.string(), doc="the drawn track (stages.fixes.drawn_tracks: a digest of its fix)"),
    f("sample_index", pa.int64()),
    f("time", pa.float64()),
    f("concept", pa.string(), True, doc="the drawn instance's concept (null: a set_box of an existing one)"),
    f("box_x0", pa.float64(), doc="the drawn box, view pixels"),
    f("box_y0", pa.float64()),
    f("box_x1", pa.float64()),
    f("box_y1", pa.float64()),
    f("x0", pa.float64(), doc="the mask's box, image pixels"),
    f("y0", pa.float64()),
    f("x1", pa.float64()),
    f("y1", pa.float64()),
    f("area", pa.int64(), doc="mask pixels"),
    f("score", pa.float64()),
    f("image_width", pa.int64()),
    f("image_height", pa.int64()),
    f("mask_rle", pa.string(), doc="COCO RLE counts, size = image h, w"),
    f("backend", pa.string()),
)

CLIP_INSTANCES = _schema(
    "One row per clip-local instance: its extent in the clip and its appearance descriptor.",
    f("video_id", pa.string()),
    f("clip_index", pa.int64()),
    f("concept", pa.string()),
    f("local_id", pa.int64()),
    f("first_time", pa.float64()),
    f("last_time", pa.float64()),
    f("n_observations", pa.int64()),
    f("mean_area", pa.float64()),
    f("mean_score", pa.float64()),
    f("appearance", pa.list_(pa.float32()), doc="L1-normalised hue-saturation histogram of the masked pixels"),
)

CLIP_EMBEDDINGS = _schema(
    "One row per clip-local instance: an image embedding of its look (the segment stage writes it when "
    "segment.appearance names an image_embedder; reconciliation's appearance term compares two by cosine).",
    f("video_id", pa.string()),
    f("clip_index", pa.int64()),
    f("concept", pa.string()),
    f("local_id", pa.int64()),
    f("embedder", pa.string(), doc="the image_embedder backend (segment.appearance), e.g. open_clip"),
    f("n_crops", pa.int64(), doc="crops embedded: its largest sightings the image border does not cut"),
    f("embedding", pa.list_(pa.float32()), doc="the normalised mean of its crops' L2-normalised embeddings"),
)

CLIP_SPANS = _schema(
    "The clips of one video (non-overlapping windows of the 2 FPS samples).",
    f("video_id", pa.string()),
    f("clip_index", pa.int64()),
    f("start", pa.float64(), doc="seconds, inclusive"),
    f("end", pa.float64(), doc="seconds, exclusive"),
    f("first_sample", pa.int64(), doc="k of the first 2 FPS timestamp in the clip"),
    f("n_samples", pa.int64()),
)

MERGE_DECISIONS = _schema(
    "Every pair of one concept's clip instances that reconciliation compared (never seen together; "
    "pairs below a posterior of 0.001 that it left apart are not listed), with its log-likelihood-ratio "
    "terms and decision (stages/reconcile/associate.py); a person overrules one with a `merge` or `split` fix.",
    f("video_id", pa.string()),
    f("concept", pa.string()),
    f("clip_a", pa.int64()),
    f("local_a", pa.int64()),
    f("clip_b", pa.int64()),
    f("local_b", pa.int64()),
    f("decision", pa.string(), doc="merge | apart: what the automatic metadata does (the partition's outcome)"),
    f(
        "review",
        pa.bool_(),
        doc="the decision is uncertain (posterior in the review band, or the partition went "
        "against the pair's own odds): a person should decide",
    ),
    f("log_odds", pa.float64(), doc="the sum of the llr_* terms: log P(same) / P(different)"),
    f("posterior", pa.float64(), doc="P(same object)"),
    f("llr_position", pa.float64(), True, doc="how well the two ground positions agree (null: not both located)"),
    f(
        "llr_appearance",
        pa.float64(),
        True,
        doc="the appearance similarity's term (segment.appearance; null: either instance has no descriptor)",
    ),
    f("llr_continuity", pa.float64(), True, doc="box overlap across the cut (null: not seen either side of one)"),
    f(
        "llr_prior",
        pa.float64(),
        True,
        doc="the look-alike prior: how many other objects of the concept could be there",
    ),
    f(
        "answer_impact",
        pa.int64(),
        doc="how many of the video's VOC answers (counts at every checkpoint, the total) "
        "and VOO appearance orders the opposite decision would change",
    ),
    f("reason", pa.string(), doc="the terms in words, e.g. 'position -3.1, look-alike prior -1.0: left apart'"),
    f("boundary", pa.bool_(), doc="one was seen in the sample right before the other's first"),
    f("box_iou", pa.float64(), True, doc="IoU of those two boxes (boundary pairs only)"),
    f(
        "appearance",
        pa.float64(),
        True,
        doc="the colour histograms' Bhattacharyya coefficient (0..1) or the image embeddings' cosine "
        "(segment.appearance)",
    ),
    f("distance", pa.float64(), True, doc="ground-plane distance of the two positions over their mean viewing range"),
)

INSTANCE_MEMBERS = _schema(
    "Which clip-local instances make up each global instance of one video (automatic reconciliation).",
    f("video_id", pa.string()),
    f("instance_id", pa.int64()),
    f("concept", pa.string()),
    f("clip_index", pa.int64()),
    f("local_id", pa.int64()),
    f("first_time", pa.float64()),
    f("last_time", pa.float64()),
)

OBSERVATIONS = _schema(
    "Each global instance's 2 FPS observations in one video (times it is visible, with its box).",
    f("video_id", pa.string()),
    f("instance_id", pa.int64()),
    f("concept", pa.string()),
    f("sample_index", pa.int64()),
    f("time", pa.float64()),
    f("frame", pa.int64()),
    f("fps", pa.float64()),
    f("x0", pa.float64(), True, doc="box in view pixels; null for an instance added by a fix"),
    f("y0", pa.float64(), True),
    f("x1", pa.float64(), True),
    f("y1", pa.float64(), True),
    f("area", pa.int64(), True, doc="mask pixels"),
    f("origin", pa.string(), doc="auto | fix"),
)

SPECKS = _schema(
    "The segmenter's masks under segment.min_area in one video (segment's specks.parquet), each with the "
    "instance it shows after the fixes: as a person told it (a speck fix), else by its clip track (the same "
    "clip-local id masked larger: the "
    "instance that track is a member of), else by position (the one instance of its concept whose predicted "
    "box, stages/visibility.py's, overlaps the speck's at that timestamp). Null where neither tells one "
    "instance: an object of the concept the metadata may not count. A speck a person said shows no object, "
    "or of an instance a person removed, is left out.",
    f("video_id", pa.string()),
    f("instance_id", pa.int64(), True, doc="the instance it shows; null when none can be told"),
    f("attributed_by", pa.string(), True, doc="fix | track | position; null with instance_id"),
    f("concept", pa.string(), doc="the instance's concept after the fixes (the segmenter's where unattributed)"),
    f("clip_index", pa.int64()),
    f("local_id", pa.int64()),
    f("sample_index", pa.int64()),
    f("time", pa.float64()),
    f("x0", pa.float64()),
    f("y0", pa.float64()),
    f("x1", pa.float64()),
    f("y1", pa.float64()),
    f("area", pa.int64(), doc="mask pixels"),
)

VISIBILITY = _schema(
    "Each instance's visibility track in one video (stages/visibility.py): one row per instance and 2 FPS "
    "timestamp of the video's poses, visible when observed (with the observation's box), else out_of_view "
    "or occluded by its estimated position projected through the view's camera, or not_seen where no "
    "consistent position says which.",
    f("video_id", pa.string()),
    f("instance_id", pa.int64()),
    f("concept", pa.string()),
    f("sample_index", pa.int64()),
    f("time", pa.float64()),
    f("frame", pa.int64()),
    f("fps", pa.float64()),
    f("state", pa.string(), doc="visible | out_of_view | occluded | not_seen"),
    f("geometric", pa.bool_(), doc="the instance's position decided its unobserved states (else not_seen)"),
    f("x0", pa.float64(), True, doc="the observed box in view pixels (visible only; null for one a fix added)"),
    f("y0", pa.float64(), True),
    f("x1", pa.float64(), True),
    f("y1", pa.float64(), True),
    f("area", pa.int64(), True, doc="mask pixels of the observation"),
)

MOTION_SAMPLES = _schema(
    "Camera motion of one video per 2 FPS timestamp (the candidates VMR's pivot is chosen from).",
    f("video_id", pa.string()),
    f("sample_index", pa.int64()),
    f("time", pa.float64()),
    f("frame", pa.int64()),
    f("fps", pa.float64()),
    f("clip_index", pa.int64(), doc="motion clip (MetadataParams.motion_clip_seconds)"),
    f("angle_deg", pa.float64(), True, doc="direction of travel relative to the view's heading"),
    f("speed", pa.float64(), doc="units of the pose backend per second"),
    f("stability", pa.float64(), True, doc="mean resultant length of the directions around t, 0..1"),
    f("moving", pa.bool_()),
    f("candidate", pa.bool_(), doc="moving and stable enough to be a pivot"),
)

VIEW_AGREEMENT = _schema(
    "Per source and clip: how far each view's independently estimated motion is from the fused one.",
    f("source_id", pa.string()),
    f("clip_index", pa.int64()),
    f("clip_start", pa.float64()),
    f("clip_end", pa.float64()),
    f("view", pa.string()),
    f("moving_samples", pa.int64()),
    f("median_error_deg", pa.float64(), True),
    f("consistent", pa.bool_(), True),
)

FIXES_APPLIED = _schema(
    "The human fixes applied to one video's metadata (one row per fix, in file order).",
    f("video_id", pa.string()),
    f("file", pa.string()),
    f("line", pa.int64()),
    f("op", pa.string()),
    f("summary", pa.string()),
    f("sha256", pa.string(), doc="of the fix file"),
)


REVIEW_PENDING = _schema(
    "Reconciliation's review items of one video that no fix has resolved yet (a `merge` fix joining "
    "the two sides' instances, or a `split` fix of either side's clip instance): the qa stage marks "
    "the questions that rest on them provisional. Written only when there are some.",
    f("video_id", pa.string()),
    f("concept", pa.string()),
    f("clip_a", pa.int64()),
    f("local_a", pa.int64()),
    f("clip_b", pa.int64()),
    f("local_b", pa.int64()),
    f("instance_a", pa.int64(), doc="the automatic instance of clip_a's instance (members.parquet)"),
    f("instance_b", pa.int64()),
    f("decision", pa.string(), doc="merge | apart: what the automatic metadata does meanwhile"),
    f("posterior", pa.float64(), doc="P(same object)"),
    f("answer_impact", pa.int64(), doc="the answers the opposite decision would change"),
)


UNREVIEWED_DECISIONS = _schema(
    "Every reconciliation decision of one video (`merge_decisions.parquet`) that no fix has resolved (as for "
    "`review_pending.parquet`), with the instances its two sides are part of after the fixes and the probability "
    "that it is wrong: the qa stage bounds, per VOC question, the probability that they make its answer wrong "
    "(stages/qa/provisional.py). Review items are among them. Written only when there are some.",
    f("video_id", pa.string()),
    f("concept", pa.string()),
    f("clip_a", pa.int64()),
    f("local_a", pa.int64()),
    f("clip_b", pa.int64()),
    f("local_b", pa.int64()),
    f("instance_a", pa.int64(), True, doc="the instance clip_a's instance is part of after the fixes (null: removed)"),
    f("instance_b", pa.int64(), True),
    f("first_a", pa.float64(), doc="clip_a's instance's first and last time (members.parquet)"),
    f("last_a", pa.float64()),
    f("first_b", pa.float64()),
    f("last_b", pa.float64()),
    f("decision", pa.string(), doc="merge | apart: what the automatic metadata did"),
    f("review", pa.bool_(), doc="a review item (also in review_pending.parquet)"),
    f("posterior", pa.float64(), doc="P(same object)"),
    f("p_wrong", pa.float64(), doc="the probability that the decision is wrong: min(posterior, 1 - posterior)"),
)


QUESTION_REVIEWS = _schema(
    "A person's verdicts on one video's generated questions (`review_question` fixes, in file order): "
    "written by the metadata and qa stages only when the video's fix file has such a fix.",
    f("video_id", pa.string()),
    f("question_id", pa.string(), doc="stages.qa.common.question_id: video, task, subtype, item"),
    f("verdict", pa.string(), doc="accept | reject (a rejected question is not asked)"),
    f("reason", pa.string(), True),
    f("line", pa.int64(), doc="of the fix in the fix file"),
    f(
        "answers",
        pa.list_(pa.string()),
        True,
        doc="the question's answers as the person saw them (null: the fix did not record them)",
    ),
    f(
        "holds",
        pa.bool_(),
        True,
        doc="the qa stage's copy: whether the verdict stands for the question as asked now (an accept "
        "while the question gives the answers the person saw); null in the metadata stage's copy and "
        "for a question no longer asked",
    ),
)

EXPORT_REVIEWED = _schema(
    "The exported rows a person reviewed and accepted (exports/reviewed.parquet; only written when "
    "some question was reviewed). Twins (controls, the stream form, repeats) follow their release row.",
    f("doc_id", pa.string()),
    f("question_id", pa.string()),
    f("video_id", pa.string()),
    f("split", pa.string()),
)


# --------------------------------------------------------------------------------------------
# QA (stages/qa, one unit per video) and the published benchmark (stages/export, unit "all").
# Streaming protocol: every question carries its query time(s) t; each answer is derivable from the
# video prefix [0, t] (frames at t included), and ``evidence`` gives intervals that suffice to
# answer it (all inside [0, t]).
# --------------------------------------------------------------------------------------------

INTERVAL = pa.struct([("start", pa.float64()), ("end", pa.float64())])

# --- The question's columns, declared once -------------------------------------------------
# Every column a question has, in one list: the per-video question table (QA_QUESTIONS), the
# published rich export (QA_EXPORT), ``stages.qa.common.Question`` (one field per QA_QUESTIONS
# column), the export's own columns (``stages.qa.registry.EXPORT_BASE_COLUMNS``) and a question's
# content identity (``identity_fields``: the release ledger's key) are all derived from it. A new
# column is one entry here: where it goes in the list is where it goes in both tables. (A column of
# QA_QUESTIONS also needs its line in the type checker's copy of ``Question``, under TYPE_CHECKING in
# stages/qa/common.py: mypy cannot read a made dataclass; tests/test_qa_columns.py fails until it is.)

QUESTIONS = "questions"  # QA_QUESTIONS only
EXPORT = "export"  # QA_EXPORT only
BOTH = "both"


@dataclass(frozen=True)
class QuestionColumn:
    """One column of a question, in the per-video question table and/or the published export."""

    name: str
    type: pa.DataType
    nullable: bool = False
    doc: str | None = None  # its doc in QA_QUESTIONS
    export_doc: str | None = None  # its doc in QA_EXPORT
    tables: str = BOTH  # QUESTIONS | EXPORT | BOTH
    # In QA_EXPORT: "base" the export fills it for every row; "task" the question's task fills it
    # (``QATask.export_columns``; other tasks' rows hold None). A figure of the whole build (the
    # text probe's bias) is no column here: it would change a row whenever another video changes.
    role: str = "base"
    # Part of what defines a question (its content identity): a question keeps its identity, hence
    # its doc id, option order and letter, while these are unchanged (stages/qa/ledger.py).
    identity: bool = False

    @property
    def in_questions(self) -> bool:
        return self.tables in (QUESTIONS, BOTH)

    @property
    def in_export(self) -> bool:
        return self.tables in (EXPORT, BOTH)


def _q(name: str, typ: pa.DataType, nullable: bool = False, doc: str | None = None, **kw: Any) -> QuestionColumn:
    return QuestionColumn(name, typ, nullable, doc, **kw)


QUESTION_COLUMNS: tuple[QuestionColumn, ...] = (
    _q("video_id", pa.string(), identity=True),
    _q("source_id", pa.string()),
    _q("view", pa.string()),
    _q("video_name", pa.string(), doc="release file name: f'{video_id}.mp4'"),
    _q("task_type", pa.string(), doc="VMR | VPO | VOO | VOC", identity=True),
    _q(
        "subtype",
        pa.string(),
        doc="VMR cardinal|diagonal; VPO rotated|unrotated; VOO first|last; VOC total|stream",
        identity=True,
    ),
    _q(
        "split",
        pa.string(),
        doc="release | vpo_unrotated | voc_stream",
        export_doc="release | vpo_unrotated | voc_stream | voc_repeat",
    ),
    _q("index", pa.int64(), doc="index within (video, task, subtype); seeds its random choices", tables=QUESTIONS),
    _q(
        "item",
        pa.string(),
        doc="what the question is about: clip, anchor set, concept set, concept",
        tables=QUESTIONS,
        identity=True,
    ),
    _q("question", pa.string()),
    _q("correct", pa.string(), True, doc="MC: the correct option's text", tables=QUESTIONS),
    _q(
        "distractors",
        pa.list_(pa.string()),
        True,
        doc="MC: 3 distinct wrong options, in a seeded order",
        tables=QUESTIONS,
    ),
    _q("doc_id", pa.string(), tables=EXPORT),
    _q("answer", pa.string(), export_doc="MC: the letter; VOC: an integer as a string", tables=EXPORT),
    _q("options", pa.list_(pa.string()), True, export_doc="'A) ...' strings", tables=EXPORT),
    _q("video_path", pa.string(), export_doc="relative to the exports folder", tables=EXPORT),
    _q("answer_text", pa.string(), export_doc="MC: the correct option's text; VOC: the final count", tables=EXPORT),
    _q("answer_index", pa.int64(), True, export_doc="MC: 0-3", tables=EXPORT),
    _q("query_times", pa.list_(pa.float64()), doc="seconds; one per answer; answerable from [0, t]", identity=True),
    _q("answers", pa.list_(pa.string()), doc="the answer at each query time (MC: option text; VOC: integer)"),
    _q("evidence", pa.list_(pa.list_(INTERVAL)), doc="per query time: intervals (s) that suffice to answer"),
    _q("frame_indices", pa.list_(pa.int64()), True, doc="frames of the view video the question shows"),
    _q("frame_times", pa.list_(pa.float64()), True),
    _q("fps", pa.float64()),
    _q("duration_s", pa.float64()),
    _q(
        "image_files",
        pa.list_(pa.string()),
        True,
        doc="VPO: rendered views, relative to the unit's folder",
        tables=QUESTIONS,
    ),
    _q(
        "image_paths",
        pa.list_(pa.string()),
        True,
        export_doc="VPO: rendered views, relative to the exports folder",
        tables=EXPORT,
        role="task",
    ),
    _q(
        "render_yaw_deg",
        pa.list_(pa.float64()),
        True,
        doc="VPO: absolute yaw of each render (panorama frame)",
        role="task",
    ),
    _q("render_offset_deg", pa.list_(pa.float64()), True, doc="VPO: render yaw minus the view's yaw", role="task"),
    _q("render_pitch_deg", pa.float64(), True, role="task"),
    _q("render_hfov_deg", pa.float64(), True, role="task"),
    _q("concepts", pa.list_(pa.string()), True, doc="VOO: the 4 concepts; VOC: the concept", role="task"),
    _q("angle_deg", pa.float64(), True, doc="VMR: motion direction relative to the view's heading", role="task"),
    _q(
        "gaps_s",
        pa.list_(pa.float64()),
        True,
        doc="VOO: gaps between the 4 ordered appearances; VPO: between the 4 anchors (s, time order)",
        role="task",
    ),
    _q(
        "since_s",
        pa.list_(pa.float64()),
        True,
        doc="per query time: VOC seconds since the last new instance; VMR seconds since the last turn or stop",
        role="task",
    ),
    _q(
        "difficulty_s",
        pa.float64(),
        True,
        doc="the stratified quantity: min(gaps_s), or since_s at the last query",
        role="task",
    ),
    _q(
        "difficulty_bin",
        pa.string(),
        True,
        doc="near | medium | far (difficulty_s by the task's QAParams edges)",
        role="task",
    ),
    _q("horizon_bin", pa.string(), True, doc="early | middle | late (last query time / duration)", role="task"),
    _q(
        "base_doc_id",
        pa.string(),
        True,
        export_doc="controls and repeats: the release row they derive from",
        tables=EXPORT,
    ),
    _q("repeat", pa.int64(), True, export_doc="VOC-Repeat: how many times the video is concatenated", tables=EXPORT),
    _q(
        "provisional",
        pa.bool_(),
        True,
        doc="the answer rests on reconciliation decisions no person has reviewed yet (VOC: one of its concept's "
        "review items, or unreviewed decisions whose reversal would change its answer that are wrong with "
        "probability qa.provisional_risk or more; VOO: one of its four concepts' review items); filled for every "
        "question by the qa stage",
    ),
    _q(
        "provisional_reason",
        pa.string(),
        True,
        doc="which unreviewed decisions, and how likely they make the answer wrong (null when not provisional)",
    ),
    _q(
        "wrong_answer_bound",
        pa.float64(),
        True,
        doc="VOC: an upper bound on the probability that the answer (any of its counts) is wrong because of "
        "unreviewed reconciliation decisions (stages/qa/provisional.py answer_risk; 0 when none bears on it or a "
        "person accepted the answer); null for the other tasks. The review queue puts the riskiest provisional "
        "questions first",
        export_doc="VOC: an upper bound on the probability that the answer (any of its counts) is wrong because "
        "of reconciliation decisions no person has reviewed (0 when none bears on it or a person accepted the "
        "answer); null for the other tasks",
    ),
    _q("seed", pa.int64()),
    _q("metadata_fingerprint", pa.string()),
    _q("pipeline_version", pa.string()),
)

# QA_EXPORT opens with the release row's seven fields, then what says which question of which
# video it is; every other export column follows in QUESTION_COLUMNS' order.
QA_EXPORT_HEAD = (
    "doc_id",
    "video_name",
    "task_type",
    "question",
    "answer",
    "frame_indices",
    "options",
    "split",
    "subtype",
    "video_id",
    "source_id",
    "view",
    "video_path",
    "answer_text",
    "answer_index",
)


def question_column(name: str) -> QuestionColumn:
    for c in QUESTION_COLUMNS:
        if c.name == name:
            return c
    raise KeyError(f"no question column {name!r}")


def identity_fields() -> tuple[str, ...]:
    """The columns that define a question (its content identity), in declaration order."""
    return tuple(c.name for c in QUESTION_COLUMNS if c.identity)


def _questions_schema(columns: Iterable[QuestionColumn] = QUESTION_COLUMNS) -> pa.Schema:
    return _schema(
        "The questions of one video, before answer letters are assigned (letters are balanced over a "
        "whole task at export). MC questions carry the correct option text and 3 distinct distractors.",
        *(f(c.name, c.type, c.nullable, c.doc) for c in columns if c.in_questions),
    )


def _export_schema(columns: Iterable[QuestionColumn] = QUESTION_COLUMNS) -> pa.Schema:
    cols = {c.name: c for c in columns if c.in_export}
    unknown = [n for n in QA_EXPORT_HEAD if n not in cols]
    if unknown:
        raise ValueError(f"QA_EXPORT_HEAD names columns not in the export: {unknown}")
    order = [*QA_EXPORT_HEAD, *(n for n in cols if n not in QA_EXPORT_HEAD)]
    return _schema(
        "The published benchmark, rich form (exports/qa.parquet): the release row's seven fields "
        "first, then the streaming fields and provenance.",
        *(f(n, cols[n].type, cols[n].nullable, cols[n].export_doc) for n in order),
    )


QA_QUESTIONS = _questions_schema()

QA_IMAGES = _schema(
    "The rendered VPO views of one video: what was rendered from which panorama frame, and the faces "
    "blurred in it (privacy audit trail).",
    f("video_id", pa.string()),
    f("file", pa.string(), doc="relative to the unit's folder (images/...)"),
    f("frame", pa.int64(), doc="frame index of the source panorama (= of the view video)"),
    f("time", pa.float64(), doc="that frame's decoded time"),
    f("yaw_deg", pa.float64(), doc="absolute yaw in the panorama frame"),
    f("pitch_deg", pa.float64()),
    f("hfov_deg", pa.float64()),
    f("width", pa.int64()),
    f("height", pa.int64()),
    f(
        "faces_blurred",
        pa.list_(
            pa.struct(
                [
                    ("x0", pa.float64()),
                    ("y0", pa.float64()),
                    ("x1", pa.float64()),
                    ("y1", pa.float64()),
                    ("score", pa.float64()),
                ]
            )
        ),
        doc="enlarged boxes blurred, in the image's pixels",
    ),
)

QA_SKIPPED = _schema(
    "Candidate questions of one video that were not asked, and why (audit trail).",
    f("video_id", pa.string()),
    f("task_type", pa.string()),
    f("item", pa.string()),
    f("reason", pa.string()),
    f(
        "reading",
        pa.string(),
        True,
        doc="not asked because its answer differs under this reading of the question "
        "(stages/qa/readings.py); null for the other reasons",
    ),
    f(
        "specks",
        pa.list_(
            pa.struct(
                [
                    pa.field("clip_index", pa.int64(), nullable=False),
                    pa.field("local_id", pa.int64(), nullable=False),
                    pa.field("first_time", pa.float64(), nullable=False),
                ]
            )
        ),
        True,
        doc="the specks no instance is told for (metadata's specks.parquet) that the count takes in, by clip and "
        "clip-local id (what a speck fix names), with when each was first seen; null when none",
    ),
)

QA_EXPORT = _export_schema()


def _identity_field(name: str) -> pa.Field:
    c = question_column(name)
    return f(c.name, c.type, c.nullable)


QA_LEDGER = _schema(
    "The question ledger (exports/ledger.parquet; stages/ledger.py): one row per question identity ever "
    "numbered, with its number in its video's doc ids, its option order and letter, and whether this build "
    "asked it. The next export starts from it: a persisting question keeps its doc id, order and letter.",
    f("identity", pa.string(), doc="hash of the question's identity columns (schema.identity_fields)"),
    f("video_name", pa.string()),
    *(_identity_field(name) for name in identity_fields()),
    f("n", pa.int64(), True, doc="its number within its video's doc ids; never given to another question"),
    f("doc_id", pa.string(), True, doc="its release doc id"),
    f("state", pa.string(), doc="asked | unasked (answer balance) | text_biased (text debiasing) | duplicate | gone"),
    f("reason", pa.string(), True, doc="why it is not asked"),
    f("question", pa.string()),
    f("answer_text", pa.string(), doc="MC: the correct option's text; VOC: the final count"),
    f("options", pa.list_(pa.string()), True, doc="MC: the option texts in letter order (without letters)"),
    f("answer_index", pa.int64(), True, doc="MC: the answer letter's index (0-3)"),
    f("frame_indices", pa.list_(pa.int64()), True),
    f("moved_from", pa.string(), True, doc="the letter before the balance bound forced it to move in this build"),
    f("moved_stratum", pa.string(), True, doc="the stratum whose bound forced the move (task/subtype/answer)"),
    f(
        "forced_out",
        pa.bool_(),
        True,
        doc="the previous build asked it and this build's bound (answer balance, text debiasing) forced it out",
    ),
    f("dropped_round", pa.int64(), True, doc="text_biased: the debiasing round that dropped it"),
    f("dropped_text_bias", pa.float64(), True, doc="text_biased: its bias score in that round"),
)

TEXT_BIAS = _schema(
    "Each exported row's text bias (text_bias.parquet): the text-only probe's out-of-fold probability of the "
    "correct option minus chance (VOC: its MRA minus the best constant's). A figure of the whole build (the probe "
    "learns from every other source), so it is kept apart from the rows, which change only with their own video.",
    f("doc_id", pa.string()),
    f("split", pa.string()),
    f(
        "text_bias",
        pa.float64(),
        True,
        doc="a twin row carries its release row's; None: the task had too few "
        "source videos to probe (stages/leak_probe.py)",
    ),
)

TEXT_DEBIAS = _schema(
    "The questions the export's text debiasing dropped (qa.debias_text; text_debias.parquet): the "
    "release questions the text-only probe answered best, round by round, until it was at chance.",
    f("video_id", pa.string()),
    f("task_type", pa.string()),
    f("subtype", pa.string()),
    f("question", pa.string()),
    f("answer_text", pa.string(), doc="MC: the correct option's text; VOC: the final count"),
    f("round", pa.int64(), doc="the pruning round that dropped it (0: the first)"),
    f("text_bias", pa.float64(), doc="its bias score in that round"),
    f("reason", pa.string()),
)

REPORT_QUESTIONS = _schema(
    "The release questions of one build as the report compares them with another build's "
    "(report_questions.parquet; published as reports/<export key>.parquet): a question is the same "
    "one when its video, task, subtype, text and query times are; it changed when its answer or its "
    "set of options did (letters are rebalanced over a whole task, so option texts are compared).",
    f("video_id", pa.string()),
    f("source_id", pa.string()),
    f("task_type", pa.string()),
    f("subtype", pa.string()),
    f("question", pa.string()),
    f("query_times", pa.list_(pa.float64())),
    f("doc_id", pa.string()),
    f("answer", pa.string(), doc="MC: the letter; VOC: the integer"),
    f("answer_text", pa.string()),
    f("options", pa.list_(pa.string()), True, doc="MC: the option texts, in letter order, without letters"),
    f("metadata_fingerprint", pa.string()),
    f("pipeline_version", pa.string()),
)

# The export's links: exports/<path> -> the file under the data root it shows (``target``, relative
# to the root). Written without field docs or nullability flags, as it always was (same bytes).
EXPORT_LINKS = pa.schema([("path", pa.string()), ("target", pa.string())])


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def table(schema: pa.Schema, rows: Iterable[Mapping[str, Any]] | Mapping[str, Iterable[Any]]) -> pa.Table:
    """Build a table of ``schema`` from row dicts or a column dict; a missing or extra field is an
    error naming the field (never silently dropped)."""
    if isinstance(rows, Mapping):
        cols = dict(rows)
    else:
        rows = list(rows)
        cols = {
            name: [r[name] if name in r else _missing(name, i) for i, r in enumerate(rows)] for name in schema.names
        }
        unknown = set().union(*(r.keys() for r in rows)) - set(schema.names) if rows else set()
        if unknown:
            raise KeyError(f"fields not in schema {schema.metadata.get(b'doc', b'')[:40]!r}: {sorted(unknown)}")
    missing = [n for n in schema.names if n not in cols]
    extra = [n for n in cols if n not in schema.names]
    if missing or extra:
        raise KeyError(f"columns missing {missing}, unexpected {extra}")
    return pa.Table.from_arrays([pa.array(cols[n], type=schema.field(n).type) for n in schema.names], schema=schema)


def _missing(name: str, i: int) -> Any:
    raise KeyError(f"row {i}: missing field {name!r}")


def conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """Check that ``t`` has exactly ``schema``'s columns (any order) and cast it to ``schema``."""
    missing = [n for n in schema.names if n not in t.column_names]
    extra = [n for n in t.column_names if n not in schema.names]
    if missing or extra:
        raise KeyError(f"columns missing {missing}, unexpected {extra}")
    return t.select(schema.names).cast(schema)


# --------------------------------------------------------------------------------------------
# The artifacts: what each stage writes into one unit's output folder
# --------------------------------------------------------------------------------------------
# A stage declares exactly these (tasks/*.py: ``Stage.outputs = ARTIFACTS[name]``); the engine
# refuses to commit an output with a file no declaration matches, without a required file, or
# with a parquet file whose schema differs from its declaration, and checks tables again when a
# downstream stage reads them (``Job.read``). ``vsi-wild artifacts`` lists them.


@dataclass(frozen=True)
class Artifact:
    """One file of a unit's output, or a family of files named by a glob pattern."""

    name: str  # relative path, or an fnmatch pattern ("*.mp4", "images/*"; '*' crosses '/')
    schema: pa.Schema | None = None  # parquet files: the schema every such file conforms to
    doc: str = ""
    optional: bool = False  # may be absent (a pattern may always match nothing)

    @property
    def is_pattern(self) -> bool:
        return any(c in self.name for c in "*?[")

    def matches(self, file: str) -> bool:
        return fnmatch.fnmatchcase(file, self.name) if self.is_pattern else file == self.name


def schema_difference(actual: pa.Schema, expected: pa.Schema) -> str | None:
    """None when ``actual`` is ``expected`` (field names, order, types, nullability; docs are
    not compared); else what differs, first difference first."""
    if actual.equals(expected, check_metadata=False):
        return None
    missing = [n for n in expected.names if n not in actual.names]
    extra = [n for n in actual.names if n not in expected.names]
    if missing or extra:
        return f"columns missing {missing}, unexpected {extra}"
    if actual.names != expected.names:
        return f"column order {actual.names} != {expected.names}"
    for a, e in zip(actual, expected, strict=True):  # a wrong type says more than a nullability flag
        if not a.type.equals(e.type):
            return f"column {e.name!r}: type {a.type} != {e.type}"
    for a, e in zip(actual, expected, strict=True):
        if a.nullable != e.nullable:
            return f"column {e.name!r}: nullable {a.nullable} != {e.nullable}"
    return "schemas differ"


def _parquet(name: str, sch: pa.Schema, optional: bool = False) -> Artifact:
    return Artifact(name, sch, sch.metadata.get(b"doc", b"").decode() if sch.metadata else "", optional)


VIEWS_FILE = "views.parquet"  # the project stage's table of a source's views (read by most stages)

ARTIFACTS: dict[str, tuple[Artifact, ...]] = {
    "sample": (
        Artifact("video.mp4", doc="the rendered 360° equirectangular video"),
        _parquet("truth_poses.parquet", TRUTH_POSES),
        _parquet("truth_objects.parquet", TRUTH_OBJECTS),
        _parquet("truth_visibility.parquet", TRUTH_VISIBILITY),
        _parquet("truth_faces.parquet", TRUTH_FACES),
        _parquet("truth_places.parquet", TRUTH_PLACES),
        _parquet("registration.parquet", SOURCE),
    ),
    "search": (
        _parquet("queries.parquet", CRAWL_QUERIES),
        _parquet("candidates.parquet", CRAWL_CANDIDATES),
    ),
    "download": (
        _parquet("registration.parquet", SOURCE),
        Artifact("*.mp4", doc="the downloaded 360° video"),
        Artifact("*.info.json", doc="yt-dlp's metadata of the video"),
    ),
    "probe": (_parquet("source.parquet", SOURCE),),
    "review": (_parquet("review.parquet", REVIEW_DECISION),),
    "project": (
        _parquet(VIEWS_FILE, VIEWS_TABLE),
        _parquet("faces.parquet", FACES),
        Artifact("*.mp4", doc="one perspective view video per view (<video_id>.mp4)"),
    ),
    "candidates": (
        _parquet("keyframes.parquet", KEYFRAMES),
        _parquet("candidates.parquet", CANDIDATES),
        Artifact("keyframes/*.jpg", doc="the keyframes proposals are made from"),
        Artifact("mllm_proposals.txt", doc="the proposal plug-in's terms", optional=True),
    ),
    "detect": (
        _parquet("detections.parquet", DETECTIONS),
        _parquet("concept_stats.parquet", CONCEPT_STATS),
    ),
    "segment": (
        _parquet("segments.parquet", CLIP_SEGMENTS),
        _parquet("instances.parquet", CLIP_INSTANCES),
        _parquet("specks.parquet", CLIP_SPECKS),
        _parquet("prompted.parquet", PROMPTED_MASKS, optional=True),
        _parquet("embeddings.parquet", CLIP_EMBEDDINGS, optional=True),
    ),
    "view_pose": (
        _parquet("view_poses.parquet", VIEW_POSES),
        _parquet("view_matches.parquet", VIEW_MATCHES),
    ),
    "pose": (
        _parquet("poses.parquet", POSES),
        _parquet("loops.parquet", POSE_LOOPS),
    ),
    "reconcile": (
        _parquet("clips.parquet", CLIP_SPANS),
        _parquet("clip_instances.parquet", CLIP_INSTANCES),
        _parquet("merge_decisions.parquet", MERGE_DECISIONS),
        _parquet("members.parquet", INSTANCE_MEMBERS),
        _parquet("observations_auto.parquet", OBSERVATIONS),
        _parquet("instances_auto.parquet", INSTANCES),
    ),
    "metadata": (
        _parquet("instances.parquet", INSTANCES),
        _parquet("observations.parquet", OBSERVATIONS),
        _parquet("motion.parquet", MOTION),
        _parquet("motion_samples.parquet", MOTION_SAMPLES),
        _parquet("view_agreement.parquet", VIEW_AGREEMENT),
        _parquet("fixes_applied.parquet", FIXES_APPLIED),
        _parquet("visibility.parquet", VISIBILITY),
        _parquet("specks.parquet", SPECKS),
        _parquet("question_reviews.parquet", QUESTION_REVIEWS, optional=True),
        _parquet("review_pending.parquet", REVIEW_PENDING, optional=True),
        _parquet("unreviewed_decisions.parquet", UNREVIEWED_DECISIONS, optional=True),
    ),
    "qa": (
        _parquet("questions.parquet", QA_QUESTIONS),
        _parquet("skipped.parquet", QA_SKIPPED),
        _parquet("images.parquet", QA_IMAGES),
        Artifact("images/*", doc="the rendered VPO views"),
        _parquet("question_reviews.parquet", QUESTION_REVIEWS, optional=True),
    ),
    "export": (
        _parquet("qa.parquet", QA_EXPORT),
        Artifact("vsi_super_wild_qa.jsonl", doc="the release rows"),
        _parquet("splits/voc_stream.parquet", QA_EXPORT),
        Artifact("splits/*", doc="controls and invariance splits (release rows, repeated videos)"),
        Artifact("counts.json", doc="questions per task and subtype"),
        Artifact("links.parquet", EXPORT_LINKS, doc="exported file -> the unit output it is linked from"),
        _parquet("reviewed.parquet", EXPORT_REVIEWED, optional=True),
        _parquet("text_debias.parquet", TEXT_DEBIAS, optional=True),
        _parquet("skipped.parquet", QA_SKIPPED),
        _parquet("text_bias.parquet", TEXT_BIAS),
        _parquet("ledger.parquet", QA_LEDGER),
        Artifact(
            "ledger.json",
            doc="what the ledger was made from: the ledger before it and the export's inputs",
            optional=True,
        ),
    ),
    "report": (
        Artifact("report.md", doc="the build report"),
        Artifact("report.json", doc="the report's numbers"),
        Artifact("report.html", doc="the build report as a self-contained page (plots and frames inlined)"),
        _parquet("report_questions.parquet", REPORT_QUESTIONS),
    ),
}


def artifact(stage: str, name: str) -> Artifact | None:
    """The declaration that file ``name`` of ``stage``'s output matches (None if none does)."""
    for a in ARTIFACTS.get(stage, ()):
        if a.matches(name):
            return a
    return None
