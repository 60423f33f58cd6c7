"""VPO (place order): order 4 views of the scene, shown from rotated viewpoints, by capture time.

Per view video, ``vpo_per_video`` questions of 4 anchors each. Repairs over the release:
- any two anchors of a question are at least ``vpo_min_gap_s`` apart in time and, where poses
  exist, ``vpo_min_position_frac`` of the trajectory's extent apart in place, on the ground plane,
  plus ``vpo_drift_per_distance`` of the path walked between them (the estimated track drifts)
  (the release had pairs 1 frame apart);
- each anchor is really rendered from the *panorama* at the view's yaw plus a signed offset drawn
  from [offset_min, offset_max] degrees (the release's evaluation read the unrotated frames), blurred
  by the face backend like every published frame, and shipped as an image file;
- an unrotated control (same anchors, same options, offset 0) for the rotation analysis;
- with ``qa.stable_answers``, no anchor's place is visited again on the other side of another
  anchor (``other_visits``): a viewer who recognises a place but not the visit would reorder them.

The plan (anchors, labels, offsets, options) is pure data; rendering is a separate pass over the
panorama that holds one decoded frame at a time and decodes only around the anchors (a seek to the
keyframe before each, as ``candidates`` seeks to its keyframes), not the whole panorama.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import cv2
import numpy as np
import pyarrow as pa

from vsi_wild.errors import UnitError
from vsi_wild.stages import geometry
from vsi_wild.stages.evaluate import ACCURACY
from vsi_wild.stages.export import image_export_path
from vsi_wild.stages.pose import track_from_rows
from vsi_wild.stages.project import render_view
from vsi_wild.stages.qa.common import (
    Provenance,
    Question,
    RenderJob,
    StableRng,
    VideoInfo,
    base_fields,
    interval,
    ordering_text,
    permutation_distractors,
    vpo_question,
)
from vsi_wild.stages.qa.difficulty import DIFFICULTY_COLUMNS, difficulty_bin, gaps, horizon_bin, stamp
from vsi_wild.stages.qa.params import QAParams
from vsi_wild.stages.qa.registry import MC, QATask, Split, TaskQuestions, VideoInputs, copied
from vsi_wild.stages.video_io import frames_at


@dataclass(frozen=True)
class Candidate:
    time: float  # time of the frame shown (the sample time until rendering reads the frame's own)
    frame: int
    pos: tuple[float, float, float] | None  # camera centre on the ground plane when a valid pose exists
    walked: float = 0.0  # ground path length of the camera from the video's first pose to here


def candidates(poses: pa.Table | None, video: VideoInfo, params: QAParams) -> list[Candidate]:
    """Anchor candidates: the 2 FPS pose timestamps (or a 2 FPS grid when there are no poses),
    away from both ends of the video."""
    lo, hi = params.vpo_edge_margin_s, video.duration_s - params.vpo_edge_margin_s
    out: dict[int, Candidate] = {}
    rows = poses.to_pylist() if poses is not None and poses.num_rows else []
    rows = [r for r in rows if r["video_id"] == video.video_id]
    if rows:  # the 2 FPS sampler's (t_k, nearest frame) pairs: right for variable frame rates too
        ground = ground_positions(rows)
        for r in sorted(rows, key=lambda r: r["time"]):
            frame = int(r["frame"])
            if not 0 <= frame < video.n_frames:
                continue
            out.setdefault(frame, Candidate(float(r["time"]), frame, ground.get(int(r["sample_index"]))))
    else:
        k = 0
        while k / 2.0 <= video.duration_s:
            frame = video.frame_at(k / 2.0)
            out.setdefault(frame, Candidate(video.time_of(frame), frame, None))
            k += 1
    ordered = []
    walked, last = 0.0, None
    for c in sorted(out.values(), key=lambda c: c.frame):
        if c.pos is not None:
            walked += math.dist(c.pos, last) if last is not None else 0.0
            last = c.pos
        ordered.append(replace(c, walked=walked))
    return [c for c in ordered if lo <= c.time <= hi]


def ground_positions(rows: Sequence[dict]) -> dict[int, tuple[float, float, float]]:
    """sample index -> the camera centre (x, y, z) on the ground plane: its component along the
    cameras' mean down axis removed, for the valid, finite poses of one video (schema.POSES rows).
    A place is a position on the ground: an estimated track's height drifts (the CPU backend's by
    ~2 m over the sample's loop), a walker's eye height does not, and the drift must not part two
    anchors. Rotations that give no down axis (all zero) leave the centres as they are."""
    centres = {
        int(r["sample_index"]): c
        for r in rows
        if r["valid"] and np.isfinite(c := np.array([r["x"], r["y"], r["z"]], dtype=np.float64)).all()
    }
    if not centres:
        return {}
    down = track_from_rows(rows).down()  # zero when the rotations give no axis
    if not np.isfinite(down).all():
        down = np.zeros(3)
    return {k: cast(tuple[float, float, float], tuple(map(float, c - (c @ down) * down))) for k, c in centres.items()}


def trajectory_extent(cands: Sequence[Candidate]) -> float:
    pts = np.array([c.pos for c in cands if c.pos is not None], dtype=np.float64)
    if len(pts) < 2:
        return 0.0
    return float(np.linalg.norm(pts.max(axis=0) - pts.min(axis=0)))


def compatible(a: Candidate, b: Candidate, min_gap_s: float, min_dist: float, drift_per_distance: float = 0.0) -> bool:
    """Far enough apart in time and, where both have a pose, in place: ``min_dist``, plus
    ``drift_per_distance`` of the path walked between them (the estimated track drifts with the
    distance walked: at the end of the sample's loop it put the start 5 m away, 1.3 m by the truth)."""
    if abs(a.time - b.time) < min_gap_s or a.frame == b.frame:
        return False
    if min_dist > 0 and a.pos is not None and b.pos is not None:
        return math.dist(a.pos, b.pos) >= min_dist + drift_per_distance * abs(a.walked - b.walked)
    return True


def other_visits(cands: Sequence[Candidate], min_dist: float) -> dict[int, tuple[float, float]]:
    """frame -> (first, last) moment the camera came back to that candidate's place on another
    visit: the candidates closer than ``min_dist`` to it on the ground (the place radius of
    ``compatible``), outside the unbroken stretch of such candidates around its own moment. A viewer
    who recognises the place a frame shows but not the visit may date the frame in another visit (a
    loop that ends where it started puts its first and last frames in one place). Frames whose place
    is visited once, and candidates without a pose, are left out.

    Measured on the track as estimated, without ``compatible``'s drift allowance: with it every
    place of the sample's loop is one with every place walked 100 m later, and no anchor set is
    left; so a revisit the track's drift moves beyond the radius is not seen (the sample's loop ends
    5.1 m from its start by the CPU backend's track, 1.3 m by the truth)."""
    posed = sorted((c for c in cands if c.pos is not None), key=lambda c: c.time)
    if not posed or min_dist <= 0:
        return {}
    pts = np.array([c.pos for c in posed], dtype=np.float64)
    times = np.array([c.time for c in posed])
    out = {}
    for i, c in enumerate(posed):  # one row at a time: a long video has many thousands of candidates
        same = np.linalg.norm(pts - pts[i], axis=1) < min_dist
        lo, hi = i, i
        while lo > 0 and same[lo - 1]:
            lo -= 1
        while hi < len(posed) - 1 and same[hi + 1]:
            hi += 1
        same[lo : hi + 1] = False  # its own visit
        if same.any():
            out[c.frame] = (float(times[same].min()), float(times[same].max()))
    return out


def apart_visits(a: Candidate, b: Candidate, visits: dict[int, tuple[float, float]]) -> bool:
    """Dating either frame in another visit of its place (``other_visits``) keeps the two in order."""
    a, b = sorted((a, b), key=lambda c: c.time)
    return (a.frame not in visits or visits[a.frame][1] < b.time) and (
        b.frame not in visits or visits[b.frame][0] > a.time
    )


def anchor_stratum(anchors: Sequence[Candidate], video: VideoInfo, params: QAParams) -> tuple[str, str]:
    """(difficulty bin of the smallest gap between the anchors, horizon bin of the query time)."""
    ts = sorted(a.time for a in anchors)
    return (
        difficulty_bin(min(gaps(ts)), params.vpo_gap_bins_s),
        horizon_bin(ts[-1], video.duration_s, params.horizon_edges),
    )


def choose_anchor_sets(
    cands: Sequence[Candidate],
    count: int,
    params: QAParams,
    video: VideoInfo,
    visits: dict[int, tuple[float, float]] | None = None,
) -> list[tuple[Candidate, ...]]:
    """``count`` sets of 4 pairwise-compatible anchors, seeded per question; anchors are not reused
    across a video's questions unless there is no other way. With ``visits`` (``other_visits``), no
    anchor's place is visited again on the other side of another anchor (``apart_visits``). Stratified: of the sets its
    random restarts find, a question takes the first whose stratum (``anchor_stratum``) the video's earlier questions
    used least (one never used ends the search)."""
    min_dist = params.vpo_min_position_frac * trajectory_extent(cands)
    sets: list[tuple[Candidate, ...]] = []
    used: set[int] = set()
    strata: Counter[tuple[str, str]] = Counter()
    for q in range(count):
        rng = StableRng(params.seed, video.video_id, "VPO", q)
        found = None
        for allow_reuse in (False, True):
            options: dict[tuple[int, ...], tuple[Candidate, ...]] = {}
            for _ in range(params.vpo_attempts):
                picked: list[Candidate] = []
                for c in rng.shuffled(cands):
                    if not allow_reuse and c.frame in used:
                        continue
                    if all(
                        compatible(c, p, params.vpo_min_gap_s, min_dist, params.vpo_drift_per_distance)
                        and (visits is None or apart_visits(c, p, visits))
                        for p in picked
                    ):
                        picked.append(c)
                        if len(picked) == 4:
                            break
                if len(picked) == 4:
                    key = tuple(sorted(p.frame for p in picked))
                    if key not in options and all(key != tuple(sorted(p.frame for p in s)) for s in sets):
                        options[key] = tuple(sorted(picked, key=lambda c: c.time))
                        if strata[anchor_stratum(options[key], video, params)] == 0:
                            break
            if options:
                found = min(options.values(), key=lambda s: strata[anchor_stratum(s, video, params)])
                break
        if found is None:
            break  # a later question would not find room either
        sets.append(found)
        used.update(c.frame for c in found)
        strata[anchor_stratum(found, video, params)] += 1
    return sets


def vpo_plan(
    poses: pa.Table | None, video: VideoInfo, params: QAParams, prov: Provenance
) -> tuple[list[Question], list[RenderJob], list[dict]]:
    """The questions (rotated + unrotated control) and the images to render for them."""
    cands = candidates(poses, video, params)
    sets = choose_anchor_sets(cands, params.vpo_per_video, params, video)
    skipped = []
    if params.stable_answers:
        visits = other_visits(cands, params.vpo_min_position_frac * trajectory_extent(cands))
        unstable = [(s, a, b) for s in sets for a, b in itertools.combinations(s, 2) if not apart_visits(a, b, visits)]
        if unstable:  # choose again: anchors whose places no other visit interleaves
            sets = choose_anchor_sets(cands, params.vpo_per_video, params, video, visits)
            reported = set()
            for s, a, b in unstable:
                if id(s) in reported:
                    continue
                reported.add(id(s))
                a, b = sorted((a, b), key=lambda c: c.time)
                again = (
                    f"where the frame at {a.time:g} s was taken is "
                    f"visited again at {visits[a.frame][1]:g} s, after the "
                    f"frame at {b.time:g} s"
                    if a.frame in visits and visits[a.frame][1] >= b.time
                    else f"where the frame at {b.time:g} s was taken is "
                    f"visited at {visits[b.frame][0]:g} s, before the "
                    f"frame at {a.time:g} s"
                )
                skipped.append(
                    {
                        "video_id": video.video_id,
                        "task_type": "VPO",
                        "item": "frames " + ",".join(str(c.frame) for c in s),
                        "reason": f"the camera stands {again}: a viewer who "
                        "dates a frame by another visit of its place "
                        f"orders them otherwise; another set asked where one is left",
                        "reading": "another visit of the place",
                    }
                )
    if len(sets) < params.vpo_per_video:
        skipped.append(
            {
                "video_id": video.video_id,
                "task_type": "VPO",
                "item": "anchors",
                "reason": f"{len(sets)} of {params.vpo_per_video} anchor sets fit (gap {params.vpo_min_gap_s:g}s, "
                f"position {params.vpo_min_position_frac:g} of the extent, {len(cands)} candidates)",
            }
        )
    ext = "jpg" if params.image_format == "jpg" else "png"
    questions: list[Question] = []
    jobs: list[RenderJob] = []
    for q, anchors in enumerate(sets):  # anchors sorted by time
        rng = StableRng(params.seed, video.video_id, "VPO", q, "present")
        shown = rng.shuffled(range(4))  # shown[p] = time rank of the anchor shown as "Frame p+1"
        label_of_rank = {rank: p + 1 for p, rank in enumerate(shown)}
        correct_labels = tuple(f"Frame {label_of_rank[r]}" for r in range(4))
        distractors = [ordering_text(p) for p in permutation_distractors(correct_labels, rng)]
        offsets = []
        for _ in range(4):
            sign = 1.0 if rng.below(2) else -1.0
            offsets.append(sign * rng.uniform(params.vpo_offset_min_deg, params.vpo_offset_max_deg))
        frames = [anchors[shown[p]].frame for p in range(4)]
        times = [anchors[shown[p]].time for p in range(4)]
        qt = max(times)
        evidence = [[interval(anchors[r].time, anchors[r].time) for r in range(4)]]
        for subtype, offs, split, text in (
            ("rotated", offsets, "release", vpo_question(params.vpo_offset_min_deg, params.vpo_offset_max_deg)),
            ("unrotated", [0.0] * 4, "vpo_unrotated", vpo_question(None)),
        ):
            tag = "rot" if subtype == "rotated" else "unrot"
            files = [f"images/vpo{q}_f{p + 1}_{tag}.{ext}" for p in range(4)]
            yaws = [float(geometry.wrap_deg(video.yaw_deg + o)) for o in offs]
            jobs += [RenderJob(frames[p], yaws[p], params.vpo_pitch_deg, files[p]) for p in range(4)]
            questions.append(
                stamp(
                    Question(
                        **base_fields(video, prov),
                        task_type="VPO",
                        subtype=subtype,
                        split=split,
                        index=q,
                        item="frames " + ",".join(str(a.frame) for a in anchors),
                        question=text,
                        correct=ordering_text(correct_labels),
                        distractors=distractors,
                        query_times=[qt],
                        answers=[ordering_text(correct_labels)],
                        evidence=evidence,
                        frame_indices=frames,
                        frame_times=times,
                        image_files=files,
                        render_yaw_deg=yaws,
                        render_offset_deg=[float(o) for o in offs],
                        render_pitch_deg=params.vpo_pitch_deg,
                        render_hfov_deg=video.hfov_deg,
                    ),
                    params.vpo_gap_bins_s,
                    params.horizon_edges,
                    gaps_s=gaps(times),
                )
            )
    return questions, jobs, skipped


# ----------------------------------------------------------------------------- rendering
def iter_frames(path: str | Path, wanted: Sequence[int]) -> Iterator[tuple[int, float, np.ndarray]]:
    """(index, time, RGB) of the wanted frames only, indices and times as every stage counts
    them (the shared reader's): decoded around each anchor by seeking to the keyframe before it
    (``video_io.frames_at``), not by decoding the panorama from its start."""
    yield from frames_at(path, wanted)


def encode_image(rgb: np.ndarray, fmt: str, jpeg_quality: int) -> bytes:
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    if fmt == "png":
        ok, buf = cv2.imencode(".png", bgr, [cv2.IMWRITE_PNG_COMPRESSION, 3])
    else:
        ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality])
    if not ok:
        raise RuntimeError(f"could not encode a {fmt} image")
    return buf.tobytes()


def render_jobs(
    pano_path: str | Path,
    jobs: Sequence[RenderJob],
    dest: Callable[[str], Path],
    video: VideoInfo,
    params: QAParams,
    blur: Callable[[np.ndarray], tuple[np.ndarray, list[dict]]] | None,
    frames: Iterable[tuple[int, float, np.ndarray]] | None = None,
) -> list[dict]:
    """Render every job from the panorama, blur its faces, write it to ``dest(job.file)``.
    Returns one QA_IMAGES row per image (with the frame's decoded time)."""
    width = params.image_width or video.width
    height = params.image_height or video.height
    by_frame: dict[int, list[RenderJob]] = {}
    for j in jobs:
        by_frame.setdefault(j.frame, []).append(j)
    rows = []
    stream = frames if frames is not None else iter_frames(pano_path, list(by_frame))
    for index, time, pano in stream:
        for j in by_frame.get(index, ()):
            img = render_view(pano, j.yaw_deg, j.pitch_deg, video.hfov_deg, width, height)
            boxes: list[dict] = []
            if blur is not None:
                img, boxes = blur(img)
            dest(j.file).write_bytes(encode_image(img, params.image_format, params.jpeg_quality))
            rows.append(
                {
                    "video_id": video.video_id,
                    "file": j.file,
                    "frame": index,
                    "time": float(time),
                    "yaw_deg": j.yaw_deg,
                    "pitch_deg": j.pitch_deg,
                    "hfov_deg": video.hfov_deg,
                    "width": width,
                    "height": height,
                    "faces_blurred": boxes,
                }
            )
    missing = sorted(set(by_frame) - {r["frame"] for r in rows})
    if missing:
        raise UnitError(f"{pano_path}: frames {missing[:5]} were not decoded")
    return sorted(rows, key=lambda r: r["file"])


def refine_times(questions: Sequence[Question], frame_time: dict[int, float], params: QAParams) -> None:
    """Replace the VPO questions' sample times by the shown frames' own decoded times (and the
    difficulty derived from them)."""
    for q in questions:
        assert q.frame_indices is not None  # every VPO question shows its frames
        q.frame_times = [float(frame_time[f]) for f in q.frame_indices]
        ts = sorted(q.frame_times)
        q.query_times = [ts[-1]]
        q.evidence = [[interval(t, t) for t in ts]]
        stamp(q, params.vpo_gap_bins_s, params.horizon_edges, gaps_s=gaps(ts))


# ----------------------------------------------------------------------------- the task
def _build(inputs: VideoInputs, params: QAParams, prov: Provenance) -> TaskQuestions:
    questions, jobs, skipped = vpo_plan(inputs.poses, inputs.video, params, prov)
    return TaskQuestions(questions, skipped, jobs)


def _image_paths(q: Mapping[str, Any]) -> list[str] | None:
    return [image_export_path(q["video_id"], f) for f in q["image_files"]] if q["image_files"] else None


def _anchor_gap(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    gaps = [
        min(b - a for a, b in zip(sorted(r["frame_times"]), sorted(r["frame_times"])[1:], strict=False))
        for r in rows
        if r.get("frame_times")
    ]
    return {"min_anchor_gap_s": min(gaps) if gaps else None}


def _report_section(entry: Mapping[str, Any]) -> list[str]:
    if entry.get("min_anchor_gap_s") is None:
        return []
    return [f"VPO: the closest two anchors of any question are {entry['min_anchor_gap_s']:.1f} s apart."]


TASK = QATask(
    name="VPO",
    order=1,
    release_rank=1,
    kind=MC,
    metric=ACCURACY,
    questions=_build,
    ordering=True,
    export_columns={
        "image_paths": _image_paths,
        **copied("render_yaw_deg", "render_offset_deg", "render_pitch_deg", "render_hfov_deg", *DIFFICULTY_COLUMNS),
    },
    splits=(Split("vpo_unrotated", "VPO unrotated", "release", variant="unrotated"),),
    after_render=refine_times,
    summarise=_anchor_gap,
    report_section=_report_section,
)
