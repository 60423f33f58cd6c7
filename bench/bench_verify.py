"""The verification app on a video the size of the longest released one (4.35 h at 2 FPS): the masks
of one timestamp, the page's payload, the server's memory, the timeline's drawing time.

A synthetic store (no video decoding: the tables only) with one view video of 31,000 timestamps,
2,000 instances and 300,000 mask observations in 52 five-minute segment clips, and a small one
(the sample's size: 240 timestamps, 24 instances, 2,000 observations) to compare memory with.
Prints:

    verify_masks_median_ms / _p95_ms / _max_ms: serving one timestamp's masks (JSON included),
        random timestamps (each a cold clip read) and playback order mixed
    verify_masks_budget_ratio: p95 / (1/20 of the 0.5 s between two 2 FPS timestamps); < 1 passes
    verify_masks_rows_read_fraction: mask rows read per cold request / mask rows of the video
    verify_payload_mb: the temporal page's metadata (spans, not observations); < 2 passes
    verify_memory_ratio: the server's peak RSS with the long video open / with the small one; < 1.3 passes
    verify_timeline_render_ms: the page's timeline drawn in chromium (when chromium is installed); < 1000 passes

Usage: python bench/bench_verify.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SID = "local-benchverify"
VID = f"{SID}_front"
W, H = 640, 360
CLIP_S = 300.0


def _status(store, stage: str, unit: str, key: str) -> None:
    from datetime import datetime

    from vsi_wild import __version__

    now = datetime.now(UTC)
    store.write_status(
        {
            "stage": stage,
            "unit": unit,
            "state": "done",
            "key": key,
            "fingerprint": key,
            "error": None,
            "error_class": None,
            "retryable": None,
            "attempts": 1,
            "started_at": now,
            "ended_at": now,
            "duration_s": 0.0,
            "host": "bench",
            "pipeline_version": __version__,
        }
    )


def _output(store, stage: str, unit: str, tables: dict) -> None:
    from vsi_wild import schema
    from vsi_wild.store import UnitRef

    ref = UnitRef(stage, unit, "bench")
    # the stage's other declared tables, which the app does not read, empty: a store the stage could
    # have written (tests/test_bench_verify.py checks it, so a new output the app reads is noticed)
    declared = {
        a.name: a.schema.empty_table()
        for a in schema.ARTIFACTS[stage]
        if a.schema is not None and not (a.optional or a.is_pattern)
    }
    tables = {**declared, **tables}
    with store.writer(ref) as w:
        for name, table in tables.items():
            w.write_table(name, table)
    _status(store, stage, unit, "bench")


def build(root: Path, n_samples: int, n_instances: int, n_obs: int) -> None:
    """One view video's store: project, segment (per clip), reconcile and metadata outputs."""
    import pyarrow as pa
    from pycocotools import mask as mask_utils

    from vsi_wild import ids, schema
    from vsi_wild.stages.segment import SAMPLE_STEP
    from vsi_wild.store import Store

    store = Store(root)
    duration = n_samples * SAMPLE_STEP
    fps = 30.0
    _output(
        store,
        "project",
        SID,
        {
            "views.parquet": schema.table(
                schema.VIEWS_TABLE,
                [
                    {
                        "video_id": VID,
                        "source_id": SID,
                        "view": "front",
                        "yaw_deg": 0.0,
                        "pitch_deg": 0.0,
                        "hfov_deg": 90.0,
                        "vfov_deg": 58.7,
                        "width": W,
                        "height": H,
                        "fps": fps,
                        "n_frames": int(duration * fps),
                        "duration_s": duration,
                        "path": f"{VID}.mp4",
                        "sha256": "",
                    }
                ],
            )
        },
    )
    rng = np.random.default_rng(0)
    templates = []  # a few masks (boxes) the observations reuse: encoding 300,000 masks would dominate
    for _ in range(50):
        w, h = int(rng.integers(20, 120)), int(rng.integers(20, 120))
        x, y = int(rng.integers(0, W - w)), int(rng.integers(0, H - h))
        m = np.zeros((H, W), np.uint8, order="F")
        m[y : y + h, x : x + w] = 1
        templates.append(
            ((float(x), float(y), float(x + w), float(y + h)), w * h, mask_utils.encode(m)["counts"].decode())
        )
    per = n_obs // n_instances
    starts = np.linspace(0, n_samples - per, n_instances).astype(int)
    inst = np.repeat(np.arange(1, n_instances + 1), per)
    k = (starts[:, None] + np.arange(per)[None, :]).ravel()
    tmpl = (inst - 1) % len(templates)
    concepts = np.array([f"concept{c:02d}" for c in range(20)])[(inst - 1) % 20]
    box = np.array([templates[t][0] for t in tmpl])
    area = np.array([templates[t][1] for t in tmpl])
    clip = (k * SAMPLE_STEP // CLIP_S).astype(int)
    times = k * SAMPLE_STEP
    n = len(k)
    obs = {
        "video_id": [VID] * n,
        "instance_id": inst,
        "concept": concepts,
        "sample_index": k,
        "time": times,
        "frame": np.round(times * fps).astype(int),
        "fps": np.full(n, fps),
        "x0": box[:, 0],
        "y0": box[:, 1],
        "x1": box[:, 2],
        "y1": box[:, 3],
        "area": area,
        "origin": ["auto"] * n,
    }
    rows_inst = [
        {
            "video_id": VID,
            "concept": f"concept{(i - 1) % 20:02d}",
            "instance_id": i,
            "first_time": float(starts[i - 1] * SAMPLE_STEP),
            "last_time": float((starts[i - 1] + per - 1) * SAMPLE_STEP),
            "first_frame": 0,
            "last_frame": 0,
            "fps": fps,
            "n_observations": per,
            "spans": [
                {"start": float(starts[i - 1] * SAMPLE_STEP), "end": float((starts[i - 1] + per - 1) * SAMPLE_STEP)}
            ],
            "x": None,
            "y": None,
            "z": None,
            "origin": "auto",
            "times_given": False,
        }
        for i in range(1, n_instances + 1)
    ]
    n_clips = math.ceil(duration / CLIP_S)
    motion = [
        {
            "video_id": VID,
            "clip_index": c,
            "clip_start": c * CLIP_S,
            "clip_end": min((c + 1) * CLIP_S, duration),
            "state": "ok",
            "pivot_time": c * CLIP_S + 10,
            "pivot_frame": 0,
            "fps": fps,
            "angle_deg": 0.0,
            "speed": 1.0,
            "stability": 1.0,
            "views_consistent": True,
            "reason": "bench",
            "origin": "auto",
        }
        for c in range(n_clips)
    ]
    ks = np.arange(n_samples)
    samples = {
        "video_id": [VID] * n_samples,
        "sample_index": ks,
        "time": ks * SAMPLE_STEP,
        "frame": np.round(ks * SAMPLE_STEP * fps).astype(int),
        "fps": np.full(n_samples, fps),
        "clip_index": (ks * SAMPLE_STEP // CLIP_S).astype(int),
        "angle_deg": np.zeros(n_samples),
        "speed": np.ones(n_samples),
        "stability": np.ones(n_samples),
        "moving": np.ones(n_samples, bool),
        "candidate": np.zeros(n_samples, bool),
    }
    _output(
        store,
        "metadata",
        VID,
        {
            "instances.parquet": schema.table(schema.INSTANCES, rows_inst),
            "observations.parquet": schema.table(schema.OBSERVATIONS, obs),
            "motion.parquet": schema.table(schema.MOTION, motion),
            "motion_samples.parquet": schema.table(schema.MOTION_SAMPLES, samples),
        },
    )
    _output(
        store,
        "reconcile",
        VID,
        {
            "clips.parquet": schema.table(
                schema.CLIP_SPANS,
                [
                    {
                        "video_id": VID,
                        "clip_index": c,
                        "start": c * CLIP_S,
                        "end": min((c + 1) * CLIP_S, duration),
                        "first_sample": int(c * CLIP_S / SAMPLE_STEP),
                        "n_samples": int(CLIP_S / SAMPLE_STEP),
                    }
                    for c in range(n_clips)
                ],
            ),
            # pairs of look-alikes reconciliation compared (one per instance and its next of the concept),
            # left apart, a third of them review items: the temporal page lists those
            "merge_decisions.parquet": schema.table(
                schema.MERGE_DECISIONS,
                [
                    {
                        "video_id": VID,
                        "concept": f"concept{(i - 1) % 20:02d}",
                        "clip_a": 0,
                        "local_a": i,
                        "clip_b": 0,
                        "local_b": i + 20,
                        "decision": "apart",
                        "review": i % 3 == 0,
                        "log_odds": -0.4,
                        "posterior": 0.4,
                        "llr_position": -1.2,
                        "llr_appearance": None,
                        "llr_continuity": None,
                        "llr_prior": 0.8,
                        "answer_impact": 2,
                        "reason": "position -1.2, look-alike prior +0.8: left apart",
                        "boundary": False,
                        "box_iou": None,
                        "appearance": 0.9,
                        "distance": 0.3,
                    }
                    for i in range(1, n_instances - 19)
                ],
            ),
            "members.parquet": schema.table(
                schema.INSTANCE_MEMBERS,
                [
                    {
                        "video_id": VID,
                        "instance_id": r["instance_id"],
                        "concept": r["concept"],
                        "clip_index": 0,
                        "local_id": r["instance_id"],
                        "first_time": r["first_time"],
                        "last_time": r["last_time"],
                    }
                    for r in rows_inst
                ],
            ),
        },
    )
    rle = np.array([t[2] for t in templates], dtype=object)[tmpl]
    for c in range(n_clips):
        sel = clip == c
        m = int(sel.sum())
        _output(
            store,
            "segment",
            ids.clip_id(VID, c),
            {
                "segments.parquet": schema.table(
                    schema.CLIP_SEGMENTS,
                    {
                        "video_id": [VID] * m,
                        "clip_index": np.full(m, c),
                        "sample_index": k[sel],
                        "time": times[sel],
                        "frame": obs["frame"][sel],
                        "fps": np.full(m, fps),
                        "concept": concepts[sel],
                        "local_id": inst[sel],
                        "x0": box[sel, 0],
                        "y0": box[sel, 1],
                        "x1": box[sel, 2],
                        "y1": box[sel, 3],
                        "area": area[sel],
                        "score": np.ones(m),
                        "image_width": np.full(m, W),
                        "image_height": np.full(m, H),
                        "mask_rle": pa.array(list(rle[sel]), pa.string()),
                        "backend": ["bench"] * m,
                    },
                )
            },
        )


def _app(root: Path):
    from vsi_wild.config import Config
    from vsi_wild.stages.metadata import MetadataParams
    from vsi_wild.stages.segment import SegmentParams
    from vsi_wild.store import Store
    from vsi_wild.verify.server import create_app

    config = Config(segment=SegmentParams(clip_seconds=CLIP_S), metadata=MetadataParams(motion_clip_seconds=CLIP_S))
    return create_app(config, Store(root), token="bench")


def child(root: Path, n_samples: int) -> None:
    """Open the video as a reviewer would (payload, then masks while playing and seeking); print
    the peak RSS in KiB."""
    from fastapi.testclient import TestClient

    c = TestClient(_app(root))
    assert c.get(f"/api/videos/{VID}").status_code == 200
    rnd = random.Random(1)
    for k in [*range(0, 40), *(rnd.randrange(n_samples) for _ in range(40))]:
        assert c.get(f"/api/videos/{VID}/masks?k={k}").status_code == 200
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def timeline_ms(root: Path) -> float | None:
    chromium = shutil.which("chromium") or "/usr/lib/chromium/chromium"
    if not Path(chromium).exists():
        return None
    import socket
    import threading

    import uvicorn
    from playwright.sync_api import sync_playwright

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    srv = uvicorn.Server(uvicorn.Config(_app(root), host="127.0.0.1", port=port, log_level="error"))
    threading.Thread(target=srv.run, daemon=True).start()
    while not srv.started:
        time.sleep(0.05)
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = b.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/videos/{VID}")
            page.wait_for_function("window.pageReady === true", timeout=60_000)
            page.evaluate("(() => { S.t0 = 0; S.t1 = S.info.video.duration_s; drawTimeline(); })()")
            ms = page.evaluate("window.timelineRenderMs")
            b.close()
            return float(ms)
    finally:
        srv.should_exit = True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", type=Path, help="build the stores here and keep them")
    ap.add_argument("--child", nargs=2, metavar=("ROOT", "SAMPLES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(Path(args.child[0]), int(args.child[1]))
        return
    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-verify-"))
    big, small = base / "long", base / "sample"
    big_n, small_n = 31_000, 240
    if not (big / "status").exists():
        build(big, big_n, 2_000, 300_000)
        build(small, small_n, 24, 2_000)

    from fastapi.testclient import TestClient

    from vsi_wild.verify.review import Review  # noqa: F401 - imported before timing

    c = TestClient(_app(big))
    payload = c.get(f"/api/videos/{VID}")
    assert payload.status_code == 200, payload.text
    print(f"verify_payload_mb: {len(payload.content) / 1e6:.3f}")
    rnd = random.Random(0)
    order = [*(rnd.randrange(big_n) for _ in range(60)), *range(10_000, 10_120)]
    times = []
    for k in order:
        t0 = time.perf_counter()
        r = c.get(f"/api/videos/{VID}/masks?k={k}")
        times.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200 and r.json()["masks"], (k, r.text[:200])
    ms = np.array(times)
    budget = 0.5 / 20 * 1000
    print(f"verify_masks_median_ms: {np.median(ms):.2f}")
    print(f"verify_masks_p95_ms: {np.percentile(ms, 95):.2f}")
    print(f"verify_masks_max_ms: {ms.max():.2f}")
    print(f"verify_masks_budget_ratio: {np.percentile(ms, 95) / budget:.3f}")
    import pyarrow.parquet as pq

    one_clip = pq.ParquetFile(
        next((big / "artifacts" / "segment").glob("*@0001/bench/segments.parquet"))
    ).metadata.num_rows
    print(f"verify_masks_rows_read_fraction: {one_clip / 300_000:.4f}")
    rss = {}
    for name, root, n in (("long", big, big_n), ("sample", small, small_n)):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(root), str(n)], capture_output=True, text=True, check=True
        )
        rss[name] = int(out.stdout.split()[-1])
    print(f"verify_memory_ratio: {rss['long'] / rss['sample']:.3f}")
    try:
        ms_tl = timeline_ms(big)
    except Exception as e:  # noqa: BLE001 - no browser here: the other numbers stand
        print(f"verify_timeline_render_ms: error ({type(e).__name__}: {e})")
    else:
        if ms_tl is not None:
            print(f"verify_timeline_render_ms: {ms_tl:.1f}")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
