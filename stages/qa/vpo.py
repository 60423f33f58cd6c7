"""VPO (place order): order 4 views of the scene, shown from rotated viewpoints, by capture time.

Per view video, ``vpo_per_video`` questions of 4 anchors each. Repairs over the release:
- any two anchors of a question are at least ``vpo_min_gap_s`` apart in time and, where poses
  exist, ``vpo_min_position_frac`` of the trajectory's extent apart in place (the release had pairs
  1 frame apart);
- each anchor is really rendered from the *panorama* at the view's yaw plus a signed offset drawn
  from [offset_min, offset_max] degrees (the release's evaluation read the unrotated frames), blurred
  by the face backend like every published frame, and shipped as an image file;
- an unrotated control (same anchors, same options, offset 0) for the rotation analysis.

The plan (anchors, labels, offsets, options) is pure data; rendering is a separate pass over the
panorama that holds one decoded frame at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pyarrow as pa

from vsi_wild.stages import geometry
from vsi_wild.stages.qa.common import (
    Provenance,
    Question,
    StableRng,
    VideoInfo,
    base_fields,
    interval,
    ordering_text,
    permutation_distractors,
    vpo_question,
)
from vsi_wild.stages.qa.params import QAParams


@dataclass(frozen=True)
class Candidate:
    time: float  # time of the frame shown (frame / fps)
    frame: int
    pos: tuple[float, float, float] | None  # camera centre when a valid pose exists


@dataclass(frozen=True)
class RenderJob:
    frame: int  # frame index of the source panorama (= of the view video)
    yaw_deg: float
    pitch_deg: float
    file: str  # output path relative to the image folder's parent (e.g. "images/vpo0_f1_rot.jpg")


def candidates(poses: pa.Table | None, video: VideoInfo, params: QAParams) -> list[Candidate]:
    """Anchor candidates: the 2 FPS pose timestamps (or a 2 FPS grid when there are no poses),
    away from both ends of the video."""
    lo, hi = params.vpo_edge_margin_s, video.duration_s - params.vpo_edge_margin_s
    out: dict[int, Candidate] = {}
    rows = poses.to_pylist() if poses is not None and poses.num_rows else []
    rows = [r for r in rows if r["video_id"] == video.video_id]
    if rows:
        for r in sorted(rows, key=lambda r: r["time"]):
            frame = video.frame_at(float(r["time"]))
            pos = (float(r["x"]), float(r["y"]), float(r["z"])) if r["valid"] and all(
                math.isfinite(float(r[k])) for k in "xyz") else None
            out.setdefault(frame, Candidate(video.time_of(frame), frame, pos))
    else:
        k = 0
        while k / 2.0 <= video.duration_s:
            frame = video.frame_at(k / 2.0)
            out.setdefault(frame, Candidate(video.time_of(frame), frame, None))
            k += 1
    return [c for c in sorted(out.values(), key=lambda c: c.frame) if lo <= c.time <= hi]


def trajectory_extent(cands: Sequence[Candidate]) -> float:
    pts = np.array([c.pos for c in cands if c.pos is not None], dtype=np.float64)
    if len(pts) < 2:
        return 0.0
    return float(np.linalg.norm(pts.max(axis=0) - pts.min(axis=0)))


def compatible(a: Candidate, b: Candidate, min_gap_s: float, min_dist: float) -> bool:
    if abs(a.time - b.time) < min_gap_s or a.frame == b.frame:
        return False
    if min_dist > 0 and a.pos is not None and b.pos is not None:
        return math.dist(a.pos, b.pos) >= min_dist
    return True


def choose_anchor_sets(cands: Sequence[Candidate], count: int, params: QAParams, video_id: str) -> list[tuple[Candidate, ...]]:
    """``count`` sets of 4 pairwise-compatible anchors, seeded per question; anchors are not reused
    across a video's questions unless there is no other way."""
    min_dist = params.vpo_min_position_frac * trajectory_extent(cands)
    sets: list[tuple[Candidate, ...]] = []
    used: set[int] = set()
    for q in range(count):
        rng = StableRng(params.seed, video_id, "VPO", q)
        found = None
        for allow_reuse in (False, True):
            for _ in range(params.vpo_attempts):
                picked: list[Candidate] = []
                for c in rng.shuffled(cands):
                    if not allow_reuse and c.frame in used:
                        continue
                    if all(compatible(c, p, params.vpo_min_gap_s, min_dist) for p in picked):
                        picked.append(c)
                        if len(picked) == 4:
                            break
                if len(picked) == 4:
                    key = tuple(sorted(p.frame for p in picked))
                    if all(key != tuple(sorted(p.frame for p in s)) for s in sets):
                        found = tuple(sorted(picked, key=lambda c: c.time))
                        break
            if found:
                break
        if found is None:
            break  # a later question would not find room either
        sets.append(found)
        used.update(c.frame for c in found)
    return sets


def vpo_plan(poses: pa.Table | None, video: VideoInfo, params: QAParams, prov: Provenance) -> tuple[list[Question], list[RenderJob], list[dict]]:
    """The questions (rotated + unrotated control) and the images to render for them."""
    cands = candidates(poses, video, params)
    sets = choose_anchor_sets(cands, params.vpo_per_video, params, video.video_id)
    skipped = []
    if len(sets) < params.vpo_per_video:
        skipped.append({
            "video_id": video.video_id, "task_type": "VPO", "item": "anchors",
            "reason": f"{len(sets)} of {params.vpo_per_video} anchor sets fit (gap {params.vpo_min_gap_s:g}s, "
                      f"position {params.vpo_min_position_frac:g} of the extent, {len(cands)} candidates)",
        })
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
                )
            )
    return questions, jobs, skipped


# ----------------------------------------------------------------------------- rendering
def render_view(pano_rgb: np.ndarray, yaw_deg: float, pitch_deg: float, hfov_deg: float, width: int, height: int) -> np.ndarray:
    """A perspective view of an equirectangular frame (geometry's conventions: py360convert's
    pixel grid, bilinear, seam wrapped)."""
    h, w = pano_rgb.shape[:2]
    rays = geometry.view_rays(width, height, hfov_deg, yaw_deg, pitch_deg)
    lon, lat = geometry.dirs_to_lonlat(rays)
    u, v = geometry.lonlat_to_equirect(lon, lat, w, h)
    # Pad one column each side so that bilinear sampling across the seam wraps; rows clamp.
    padded = np.concatenate([pano_rgb[:, -1:], pano_rgb, pano_rgb[:, :1]], axis=1)
    map_x = (u + 1.0).astype(np.float32)
    map_y = v.astype(np.float32)
    return cv2.remap(padded, map_x, map_y, interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def iter_frames(path: str | Path, wanted: Sequence[int]) -> Iterator[tuple[int, np.ndarray]]:
    """Decode ``path`` once, in order, yielding (index, RGB) for the wanted frame indices only."""
    import av

    want = sorted(set(int(i) for i in wanted))
    if not want:
        return
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        k = 0
        i = 0
        for frame in container.decode(stream):
            if i == want[k]:
                yield i, frame.to_ndarray(format="rgb24")
                k += 1
                if k == len(want):
                    return
            i += 1
    missing = want[k:]
    raise ValueError(f"{path}: frames {missing[:5]} not found (the video has {i} frames)")


def encode_image(rgb: np.ndarray, fmt: str, jpeg_quality: int) -> bytes:
    bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    if fmt == "png":
        ok, buf = cv2.imencode(".png", bgr, [cv2.IMWRITE_PNG_COMPRESSION, 3])
    else:
        ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality])
    if not ok:
        raise RuntimeError(f"could not encode a {fmt} image")
    return buf.tobytes()


def render_jobs(pano_path: str | Path, jobs: Sequence[RenderJob], dest: Callable[[str], Path], video: VideoInfo,
                params: QAParams, blur: Callable[[np.ndarray], np.ndarray] | None,
                frames: Iterator[tuple[int, np.ndarray]] | None = None) -> None:
    """Render every job from the panorama, blur faces, write each image to ``dest(job.file)``."""
    width = params.image_width or video.width
    height = params.image_height or video.height
    by_frame: dict[int, list[RenderJob]] = {}
    for j in jobs:
        by_frame.setdefault(j.frame, []).append(j)
    stream = frames if frames is not None else iter_frames(pano_path, list(by_frame))
    for index, pano in stream:
        for j in by_frame.get(index, ()):
            img = render_view(pano, j.yaw_deg, j.pitch_deg, video.hfov_deg, width, height)
            if blur is not None:
                img = blur(img)
            dest(j.file).write_bytes(encode_image(img, params.image_format, params.jpeg_quality))
