"""The CPU pose backend (twoview) on the embedded sample: motion direction against the truth.

Generates the sample (cached under data/cache/bench_pose/, keyed by its parameters), projects its
four views, runs the `pose` stage's functions (each view estimated, fused per source, derived per
view) and compares each view's direction of travel, relative to its heading, with the truth's at
every 2 FPS timestamp where the camera moves. Prints:

    vo_motion_median_error_deg: <median over the moving timestamps of all four views>
    vo_motion_p90_error_deg, vo_independent_median_error_deg_<view>, vo_views_consistent_clips,
    vo_step_scale_median (estimated / true step length; 1 = metric), vo_cpu_seconds_per_frame

Usage: python bench/bench_pose.py [--fps 2] [--view-width 640] [--cache DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]


def prepare(cache: Path, fps: float, view_w: int) -> tuple[Path, Path]:
    from vsi_wild.stages.faces import FaceParams, make_detector
    from vsi_wild.stages.project import ProjectParams, project_source
    from vsi_wild.stages.sample import SampleParams, generate_sample

    sp = SampleParams(fps=fps)
    pp = ProjectParams(width=view_w, height=view_w * 9 // 16 // 2 * 2)
    fp = FaceParams(detect_every=8)
    key = hashlib.sha256(
        json.dumps([sp.model_dump(mode="json"), pp.model_dump(mode="json")], sort_keys=True).encode()
    ).hexdigest()[:12]
    d = cache / key
    if not (d / "done").exists():
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        truth = generate_sample(sp, d / "video.mp4")
        pq.write_table(truth.poses, d / "truth_poses.parquet")
        views, _ = project_source(
            d / "video.mp4", d / "views", pp, make_detector(fp), face_params=fp, source_id=sp.source_id
        )
        pq.write_table(views, d / "views.parquet")
        (d / "done").write_text("ok\n")
    return d, d / "views"


def truth_motion(truth_poses, times: np.ndarray, view_yaw: float):
    """Direction of travel relative to the view's heading at each time (central differences over
    the neighbouring 2 FPS timestamps, as the estimate), and whether the camera moves."""
    t = np.asarray(truth_poses["time"])
    x, y, yaw = (np.asarray(truth_poses[c]) for c in ("x", "y", "yaw_deg"))
    xs, ys = np.interp(times, t, x), np.interp(times, t, y)
    yaws = np.degrees(np.unwrap(np.radians(yaw)))
    ys_yaw = np.interp(times, t, yaws)
    n = len(times)
    ang = np.full(n, np.nan)
    moving = np.zeros(n, bool)
    for i in range(n):
        a, b = max(i - 1, 0), min(i + 1, n - 1)
        vx, vy = xs[b] - xs[a], ys[b] - ys[a]
        speed = math.hypot(vx, vy) / (times[b] - times[a])
        if speed > 0.3:
            moving[i] = True
            ang[i] = (math.degrees(math.atan2(vx, vy)) - ys_yaw[i] - view_yaw + 180.0) % 360.0 - 180.0
    return ang, moving, np.hypot(np.diff(xs), np.diff(ys))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fps", type=float, default=2.0, help="sample frame rate (8 = the sample config's; slower)")
    ap.add_argument("--view-width", type=int, default=640)
    ap.add_argument("--cache", type=Path, default=REPO / "data" / "cache" / "bench_pose")
    args = ap.parse_args()

    from vsi_wild.stages import metadata as meta
    from vsi_wild.stages import pose as po
    from vsi_wild.stages.backends import (
        base,
        twoview,  # noqa: F401  imported to register
    )
    from vsi_wild.stages.video_io import sample_frames

    d, views_dir = prepare(args.cache, args.fps, args.view_width)
    truth = pq.read_table(d / "truth_poses.parquet").to_pydict()
    views = pq.read_table(d / "views.parquet").to_pylist()
    params = po.PoseParams(backend="twoview")
    inputs = {
        row["view"]: po.ViewInput(
            row["video_id"],
            row["yaw_deg"],
            row["hfov_deg"],
            row["fps"],
            row["width"],
            lambda path=views_dir / row["path"]: ((k, t, idx, rgb) for k, t, idx, _ft, rgb in sample_frames(path, 2.0)),
        )
        for row in views
    }
    cpu0 = time.process_time()
    fused, tracks = po.estimate_source(
        inputs,
        lambda vi: base.create("pose_estimator", "twoview", hfov_deg=vi.hfov_deg, camera_height=params.camera_height),
        params,
    )
    cpu = time.process_time() - cpu0
    yaws = {v: vi.yaw_deg for v, vi in inputs.items()}
    n_frames = sum(len(t.sample_indices) for t in tracks.values())
    errors, p_indep = [], {}
    for v, yaw in yaws.items():
        ta, moving, true_steps = truth_motion(truth, fused.times, yaw)
        der, _, _ = po.motion_vectors(po.derive_view(fused, yaw))
        own, _, _ = po.motion_vectors(tracks[v])
        errors.append(np.abs(po.wrap(der[moving] - ta[moving])))
        p_indep[v] = float(np.nanmedian(np.abs(po.wrap(own[moving] - ta[moving]))))
    err = np.concatenate(errors)
    est_steps = np.linalg.norm(np.diff(fused.C, axis=0), axis=1)
    m = true_steps > 0.2
    mp = meta.MetadataParams(motion_clip_seconds=30.0)
    clips = meta.motion_clips(float(fused.times[-1]) + 0.5, 30.0)
    _, verdict = meta.view_agreement("sample", fused, tracks, yaws, clips, mp)
    print(f"vo_motion_median_error_deg: {np.nanmedian(err):.2f}")
    print(f"vo_motion_p90_error_deg: {np.nanpercentile(err, 90):.2f}")
    print(f"vo_motion_unknown_fraction: {np.isnan(err).mean():.3f}")
    for v, e in p_indep.items():
        print(f"vo_independent_median_error_deg_{v}: {e:.2f}")
    print(f"vo_views_consistent_clips: {sum(1 for c, _ in verdict.values() if c)}/{len(verdict)}")
    print(f"vo_step_scale_median: {np.median(est_steps[m] / true_steps[m]):.3f}")
    print(f"vo_cpu_seconds_per_frame: {cpu / max(n_frames, 1):.3f}")
    return 0 if np.nanmedian(err) <= 10.0 else 1


if __name__ == "__main__":
    sys.exit(main())
