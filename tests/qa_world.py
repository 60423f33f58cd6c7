"""Small synthetic worlds for the QA tests, and the metadata a perfect metadata stage would derive
from them. Written independently of the QA code: the tests compare the QA answers against truths
computed here from the world itself (poses, visibility), never through ``vsi_wild.stages.qa``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import pyarrow as pa
from cameras import level_extrinsics

from vsi_wild import schema
from vsi_wild.stages import geometry

VIEW_YAW = {"front": 0.0, "right": 90.0, "back": 180.0, "left": 270.0}
LABEL_DIRS = {  # label -> clockwise angle from the heading
    "forward": 0,
    "forward-right": 45,
    "right": 90,
    "backward-right": 135,
    "backward": 180,
    "backward-left": 225,
    "left": 270,
    "forward-left": 315,
}
WIDTH, HEIGHT, HFOV = 64, 36, 90.0  # the views' size (pixels) and horizontal field of view (degrees)


@dataclass
class World:
    source_id: str
    duration: float
    fps: float
    poses: list[dict]  # 2 FPS: time, x, y, z, yaw_deg (panorama heading), moving
    visibility: list[dict]  # view, time, instance_id, category
    segments: list[dict] = field(default_factory=list)  # start, end, rel_deg (motion vs camera heading) or None

    @property
    def n_frames(self) -> int:
        return int(round(self.duration * self.fps))

    def video_id(self, view: str) -> str:
        return f"{self.source_id}_{view}"

    def pose_at(self, t: float) -> dict:
        k = min(max(int(round(t * 2)), 0), len(self.poses) - 1)
        return self.poses[k]


def make_world(
    seed: int,
    duration: float = 600.0,
    fps: float = 10.0,
    n_categories: int = 8,
    per_category: int = 4,
    speed: float = 1.0,
    source_id: str | None = None,
    jitter_deg: float = 15.0,
) -> World:
    """A walk of segments, each moving in one of the 8 directions relative to the heading, turned by
    up to ``jitter_deg`` (or standing still), and objects seen in random stretches of time."""
    rnd = random.Random(seed)
    sid = source_id or f"sample-w{seed}"
    # trajectory: segments of constant motion relative to the camera heading, some standing still
    segs = []
    t = 0.0
    while t < duration:
        length = rnd.uniform(20, 70)
        if rnd.random() < 0.12:
            rel = None
        else:
            rel = rnd.choice(list(LABEL_DIRS.values())) + rnd.uniform(-jitter_deg, jitter_deg)
        segs.append({"start": t, "end": min(duration, t + length), "rel_deg": rel, "turn": rnd.uniform(-0.5, 0.5)})
        t += length
    poses = []
    x = y = 0.0
    yaw = rnd.uniform(-180, 180)
    n = int(math.floor(duration * 2)) + 1
    for k in range(n):
        tk = k / 2.0
        seg = next(s for s in segs if s["start"] <= tk < s["end"] or s is segs[-1])
        poses.append({"time": tk, "x": x, "y": y, "z": 1.6, "yaw_deg": yaw, "moving": seg["rel_deg"] is not None})
        if seg["rel_deg"] is not None:
            a = math.radians(yaw + seg["rel_deg"])
            x += 0.5 * speed * math.sin(a)
            y += 0.5 * speed * math.cos(a)
        yaw += seg["turn"]  # slow turns; direction relative to heading stays put
    cats = [f"thing{c}" for c in range(n_categories)]
    vis = []
    iid = 0
    times = [p["time"] for p in poses]
    for cat in cats:
        for _ in range(rnd.randint(1, per_category)):
            iid += 1
            for view in VIEW_YAW:
                if rnd.random() < 0.4:
                    continue
                for _ in range(rnd.randint(1, 3)):
                    a = rnd.choice(times)
                    b = min(duration, a + rnd.uniform(0.5, 20))
                    vis += [
                        {"view": view, "time": tt, "instance_id": iid, "category": cat} for tt in times if a <= tt <= b
                    ]
    # one instance per view seen exactly at the start, and a sighting at the very end
    vis = sorted(
        {(v["view"], v["time"], v["instance_id"]): v for v in vis}.values(),
        key=lambda v: (v["view"], v["time"], v["instance_id"]),
    )
    return World(sid, duration, fps, poses, vis, segs)


# ------------------------------------------------------------------ what a metadata stage derives
def views_table(w: World, width: int = WIDTH, height: int = HEIGHT) -> pa.Table:
    rows = []
    for view, yaw in VIEW_YAW.items():
        rows.append(
            {
                "video_id": w.video_id(view),
                "source_id": w.source_id,
                "view": view,
                "yaw_deg": yaw,
                "pitch_deg": 0.0,
                "hfov_deg": HFOV,
                "vfov_deg": 2 * math.degrees(math.atan(math.tan(math.radians(HFOV / 2)) * height / width)),
                "width": width,
                "height": height,
                "fps": w.fps,
                "n_frames": w.n_frames,
                "duration_s": w.duration,
                "path": f"{w.video_id(view)}.mp4",
                "sha256": "0" * 64,
            }
        )
    return schema.table(schema.VIEWS_TABLE, rows)


def instances_table(w: World, view: str) -> pa.Table:
    by_id: dict[int, list[float]] = {}
    cat: dict[int, str] = {}
    for v in w.visibility:
        if v["view"] == view:
            by_id.setdefault(v["instance_id"], []).append(v["time"])
            cat[v["instance_id"]] = v["category"]
    rows = []
    for iid, ts in sorted(by_id.items()):
        ts = sorted(ts)
        spans = []
        for t in ts:
            if spans and t - spans[-1]["end"] <= 0.5 + 1e-9:
                spans[-1]["end"] = t
            else:
                spans.append({"start": t, "end": t})
        rows.append(
            {
                "video_id": w.video_id(view),
                "concept": cat[iid],
                "instance_id": iid,
                "first_time": ts[0],
                "last_time": ts[-1],
                "first_frame": int(round(ts[0] * w.fps)),
                "last_frame": int(round(ts[-1] * w.fps)),
                "fps": w.fps,
                "n_observations": len(ts),
                "spans": spans,
                "x": None,
                "y": None,
                "z": None,
                "origin": "auto",
                "times_given": False,
            }
        )
    return schema.table(schema.INSTANCES, rows)


def camera_extrinsics(x: float, y: float, z: float, heading_deg: float) -> list[float]:
    """Row-major 3x4 [R|t], world -> camera (schema.POSES), of a level camera at (x, y, z) facing
    ``heading_deg`` (clockwise from the world's +y, as ``motion_angle`` reads a heading): R takes
    world vectors to the camera's OpenCV axes, t = -R C."""
    return level_extrinsics(x, y, z, heading_deg).ravel().tolist()


def poses_table(
    w: World, view: str, invalid_every: int = 0, width: int = WIDTH, height: int = HEIGHT, hfov_deg: float = HFOV
) -> pa.Table:
    """The view's 2 FPS cameras: at the world's pose (x, y, z), facing its yaw turned by the view's
    (``VIEW_YAW``), with the pinhole K of a ``width`` x ``height`` view of ``hfov_deg`` (pass the
    size given to ``views_table``)."""
    K = geometry.view_intrinsics(width, height, hfov_deg).ravel().tolist()
    rows = []
    for k, p in enumerate(w.poses):
        valid = not (invalid_every and k % invalid_every == 0)
        rows.append(
            {
                "video_id": w.video_id(view),
                "sample_index": k,
                "time": p["time"],
                "frame": int(round(p["time"] * w.fps)),
                "fps": w.fps,
                "extrinsics": camera_extrinsics(p["x"], p["y"], p["z"], p["yaw_deg"] + VIEW_YAW[view]),
                "intrinsics": K,
                "x": p["x"],
                "y": p["y"],
                "z": p["z"],
                "valid": valid,
                "backend": "groundtruth",
            }
        )
    return schema.table(schema.POSES, rows)


def motion_angle(w: World, view: str, t: float, half: float = 1.0) -> float | None:
    """Direction of the camera's motion around t relative to the view's heading (deg, + = right)."""
    a, b = w.pose_at(t - half), w.pose_at(t + half)
    dx, dy = b["x"] - a["x"], b["y"] - a["y"]
    if math.hypot(dx, dy) < 1e-6:
        return None
    heading = w.pose_at(t)["yaw_deg"] + VIEW_YAW[view]
    ang = math.degrees(math.atan2(dx, dy)) - heading
    return (ang + 180.0) % 360.0 - 180.0


def motion_table(w: World, view: str, clip_seconds: float, fixes: dict[int, dict] | None = None) -> pa.Table:
    rows = []
    n = int(math.ceil(w.duration / clip_seconds))
    for c in range(n):
        s, e = c * clip_seconds, min(w.duration, (c + 1) * clip_seconds)
        # pivot: the middle of the longest moving segment inside the clip (2 FPS grid)
        best = None
        for seg in w.segments:
            lo, hi = max(s, seg["start"]) + 1.5, min(e, seg["end"]) - 1.5
            if seg["rel_deg"] is not None and hi > lo and (best is None or hi - lo > best[1] - best[0]):
                best = (lo, hi)
        base = {
            "video_id": w.video_id(view),
            "clip_index": c,
            "clip_start": s,
            "clip_end": e,
            "fps": w.fps,
            "speed": None,
            "stability": None,
            "views_consistent": None,
            "reason": None,
            "origin": "auto",
        }
        if best is None:
            rows.append(
                {
                    **base,
                    "state": "none",
                    "pivot_time": None,
                    "pivot_frame": None,
                    "angle_deg": None,
                    "reason": "no meaningful motion",
                }
            )
            continue
        t = round((best[0] + best[1]) / 2 * 2) / 2
        ang = motion_angle(w, view, t)
        rows.append(
            {
                **base,
                "state": "ok" if ang is not None else "none",
                "pivot_time": t,
                "pivot_frame": int(round(t * w.fps)),
                "angle_deg": ang,
                "speed": 1.0,
                "stability": 1.0,
                "views_consistent": True,
            }
        )
    for c, fix in (fixes or {}).items():
        auto = next(r for r in rows if r["clip_index"] == c)
        rows.append({**auto, **fix, "origin": "fix"})
    return schema.table(schema.MOTION, rows)


def motion_samples_table(w: World, view: str, clip_seconds: float) -> pa.Table:
    """schema.MOTION_SAMPLES of a view: every 2 FPS moment of a moving segment moves in the
    segment's direction relative to the heading, steadily (a candidate pivot)."""
    rows = []
    for k, p in enumerate(w.poses):
        t = p["time"]
        ang = motion_angle(w, view, t, half=0.5) if p["moving"] else None
        moving = ang is not None
        rows.append(
            {
                "video_id": w.video_id(view),
                "sample_index": k,
                "time": t,
                "frame": int(round(t * w.fps)),
                "fps": w.fps,
                "clip_index": math.floor(t / clip_seconds),
                "angle_deg": ang,
                "speed": 1.0 if moving else 0.0,
                "stability": 1.0 if moving else None,
                "moving": moving,
                "candidate": moving,
            }
        )
    return schema.table(schema.MOTION_SAMPLES, rows)


# ------------------------------------------------------------------ truths (independent of the QA code)
def truth_count(w: World, view: str, category: str, until: float) -> int:
    return len(
        {
            v["instance_id"]
            for v in w.visibility
            if v["view"] == view and v["category"] == category and v["time"] <= until + 1e-9
        }
    )


def truth_order(w: World, view: str, categories: list[str], which: str) -> list[str]:
    times = {}
    for c in categories:
        ts = [v["time"] for v in w.visibility if v["view"] == view and v["category"] == c]
        times[c] = min(ts) if which == "first" else max(ts)
    return sorted(categories, key=lambda c: times[c])


def truth_direction(w: World, view: str, t: float, half: float = 1.0) -> str:
    """The label whose direction (heading turned clockwise by its angle) best matches the motion."""
    a, b = w.pose_at(t - half), w.pose_at(t + half)
    d = (b["x"] - a["x"], b["y"] - a["y"])
    heading = w.pose_at(t)["yaw_deg"] + VIEW_YAW[view]
    best, score = None, -2.0
    for label, rel in LABEL_DIRS.items():
        a_ = math.radians(heading + rel)
        u = (math.sin(a_), math.cos(a_))
        s = (d[0] * u[0] + d[1] * u[1]) / math.hypot(*d)
        if s > score:
            best, score = label, s
    return best
