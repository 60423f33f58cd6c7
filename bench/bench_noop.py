"""Benchmark of a run that has nothing to do (issue 11): a no-op `vsi-wild run` at the release's scale.

A daily incremental build of the whole release must find out quickly that nothing changed. This
builds a synthetic data root with the release's unit counts, every unit of every stage of the real
DAG cached, and times a no-op `vsi-wild run` against it (the CLI, end to end: Prefect's start
included), then the same on a root of one source (the fixed cost). Prints `name: value` lines:

    noop_seconds_release_scale   the no-op CLI run on the release-scale root (target: < 60 s)
    noop_ms_per_cached_unit      that time over the units it found cached (target: < 10 ms)
    noop_units                   the units it found cached
    noop_seconds_one_unit        the no-op CLI run on a root of one source (the fixed cost)
    noop_seconds_in_process      the engine's plan loop alone on the release-scale root (no Prefect)

``--profile`` also prints the hot spots of that in-process loop (cProfile, cumulative seconds).

How the root is built: the stages are walked in DAG order with the engine's own ``Plan`` and
``prepare`` (so every cache key is the one a run computes); instead of a stage's ``run``, a tiny
output is written through ``Store.writer`` (real manifests), then ``prepare`` again finds it
complete and does what follows a cached output (registration, publish hook, ``done`` status row). Sources are YouTube
ids fetched by the ``download`` stage (``crawl.ids``) and kept by recorded review decisions; the config is the
production one (configs/default.yaml) with tiny weight files. The release has 442 views because a few were dropped by
hand; this pipeline projects every configured view of a source, so the root has 113 x 4 = 452 views, and 3,400
five-minute clips.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
RELEASE_SOURCES = 113
RELEASE_CLIPS = 3400
TARGET_SECONDS = 60.0
TARGET_MS_PER_UNIT = 10.0
# Every weight file the production config names (relative to models.weights_dir); the backends'
# fingerprints stat them on every run, as they would real weights.
WEIGHT_FILES = (
    "clip/ViT-B-32.pt",
    "yolo_world/yolov8x-worldv2.pt",
    "sam3/sam3.pt",
    "da3/DA3-LARGE/config.json",
    "da3/DA3-LARGE/model.safetensors",
    "scrfd/scrfd_10g_bnkps.onnx",
)
# One video in this many has a human fix file and a proposals file (raw inputs read on every run).
HUMAN_INPUT_EVERY = 10
STAMP = datetime(2025, 1, 1, tzinfo=UTC)


# ----------------------------------------------------------------------------------- the root
def source_ids(n: int) -> list[str]:
    """``n`` YouTube-shaped ids (11 characters)."""
    return [f"noop{i:07d}" for i in range(n)]


def clips_per_view(n_sources: int, total_clips: int, n_views: int) -> list[int]:
    """Clips per view of each source (the release: 7 or 8, ~38 min videos), all views together
    about ``total_clips``."""
    base, extra = divmod(max(n_sources, round(total_clips / n_views)), n_sources)
    return [base + (i < extra) for i in range(n_sources)]


def write_config(base: Path, root: Path, sources: list[str]) -> Path:
    """The production config with this root, tiny weight files and the sources as ``crawl.ids``."""
    weights = base / "weights"
    for rel in WEIGHT_FILES:
        (weights / rel).parent.mkdir(parents=True, exist_ok=True)
        (weights / rel).write_bytes(rel.encode())
    data = yaml.safe_load((REPO / "configs" / "default.yaml").read_text())
    data["run"]["data_root"] = str(root)
    data.setdefault("models", {})["weights_dir"] = str(weights)
    data.setdefault("crawl", {})["ids"] = sources
    path = base / "noop.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=True))
    return path


@dataclass
class _Unit:
    """What a tiny output writer sees (the part of ``engine.Job`` it needs)."""

    stage: str
    unit: str
    key: str
    config: Any
    store: Any
    inputs: dict[str, dict[str, Any]]
    out: Any  # UnitWriter
    durations: dict[str, float]


@contextlib.contextmanager
def _without_fsync() -> Iterator[None]:
    """Building the root need not survive a power cut (it is rebuilt each time): every status row
    and manifest would otherwise wait for the disk, minutes for the release's ~6,000 units."""
    real = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = real


def build_root(base: Path, n_sources: int, total_clips: int) -> tuple[Path, Path, int]:
    """A data root of ``n_sources`` sources with every unit of every stage cached.

    Returns (config file, data root, number of cached units)."""
    from vsi_wild.config import load_config
    from vsi_wild.store import Store
    from vsi_wild.tasks import engine, registry
    from vsi_wild.tasks.review import apply_decisions

    root = base / "out"
    sources = source_ids(n_sources)
    config_path = write_config(base, root, sources)
    config = load_config(config_path)
    store = Store(root)
    views = list(config.project.views)
    clip_s = config.segment.clip_seconds
    # a video of n clips ends 20% into its last clip
    durations = {
        sid: clip_s * (n - 0.2)
        for sid, n in zip(sources, clips_per_view(n_sources, total_clips, len(views)), strict=True)
    }
    _human_inputs(store, config, sources, views)
    first_probed = registry.STAGES.index(registry.stage("probe"))
    crawl_stages, rest = registry.STAGES[:first_probed], registry.STAGES[first_probed:]
    with _without_fsync():
        n = _fill(engine.Plan.load(config, store, registry.STAGES), crawl_stages, durations)
        csv = base / "decisions.csv"
        csv.write_text("source_id,decision,reason,reviewer\n" + "".join(f"{s},keep,,bench\n" for s in sources))
        apply_decisions(store, csv, now=STAMP)
        # a new plan: the download stage's publish hook registered the sources the probe enumerates
        n += _fill(engine.Plan.load(config, store, registry.STAGES), rest, durations)
    return config_path, root, n


def _human_inputs(store: Any, config: Any, sources: list[str], views: list[str]) -> None:
    """Fix files and proposals for some videos; the folders exist for all."""
    fixes = Path(store.path(config.metadata.fixes_dir))
    proposals = Path(store.path(config.candidates.proposals_dir))
    fixes.mkdir(parents=True, exist_ok=True)
    proposals.mkdir(parents=True, exist_ok=True)
    videos = [f"{s}_{v}" for s in sources for v in views]
    for vid in videos[::HUMAN_INPUT_EVERY]:
        (fixes / f"{vid}.yaml").write_text("# no fixes yet\n")
        (proposals / f"{vid}.txt").write_text("chair\nlamp\n")


def _fill(plan: Any, stages: list[Any], durations: dict[str, float]) -> int:
    """Walk ``stages`` in order as ``engine.run_stages`` does; every unit must be new: write its
    tiny output in place of the stage's ``run``, then let the engine find it complete, as it finds
    a cached output (registration, publish hook, ``done`` status row)."""
    from vsi_wild.store import UnitRef
    from vsi_wild.tasks import engine

    store, config = plan.store, plan.config
    n = 0
    for stage in stages:
        for unit in plan.units_of(stage):
            prepared = engine.prepare(plan, stage, unit)
            if not isinstance(prepared, engine.Prepared):
                raise RuntimeError(f"building {stage.name}:{unit}: {prepared.state} ({prepared.error})")
            with store.writer(UnitRef(stage.name, unit, prepared.key)) as w:
                if stage.name in REAL_RUN:  # cheap on this root, and what its publish reads is its own
                    stage.run(engine.Job(stage, unit, prepared.key, config, store, prepared.inputs, w))
                else:
                    u = _Unit(stage.name, unit, prepared.key, config, store, prepared.inputs, w, durations)
                    TINY_OUTPUTS.get(stage.name, lambda u: None)(u)
                    _declared(u, stage)
            outcome = engine.prepare(plan, stage, unit)
            if not isinstance(outcome, engine.Outcome) or outcome.state != "cached":
                raise RuntimeError(f"building {stage.name}:{unit}: its output is not taken as cached ({outcome})")
            plan.record(outcome)
            n += 1
    return n


# ----------------------------------------------------------------------------------- tiny outputs
# Every file a stage declares (schema.ARTIFACTS): empty tables of their schemas, a few bytes for
# other files; a few rows where a later stage enumerates units from them or its publish reads them
# (the registration, the probed row, the views, the export's links): TINY_OUTPUTS.
_EMPTY: dict[str, bytes] = {}
REAL_RUN = {"report"}  # stages whose real run builds the tiny output (the report of no questions)


def _declared(u: _Unit, stage: Any) -> None:
    """Write each required declared file the stage's tiny writer did not."""
    from vsi_wild.digest import table_bytes

    for a in stage.outputs:
        if a.optional or a.is_pattern or u.out.path(a.name).exists():
            continue
        if a.schema is None:
            u.out.path(a.name).write_text("{}\n" if a.name.endswith(".json") else f"noop {a.name}\n")
            continue
        if a.name not in _EMPTY:
            _EMPTY[a.name] = table_bytes(a.schema.empty_table())
        u.out.path(a.name).write_bytes(_EMPTY[a.name])


def _download(u: _Unit) -> None:
    from vsi_wild import schema

    sid = u.unit
    media = f"{sid}.mp4"
    data = f"noop media {sid}".encode()
    u.out.path(media).write_bytes(data)
    u.out.path(f"{sid}.info.json").write_text(json.dumps({"id": sid, "title": f"noop {sid}"}))
    duration = u.durations[sid]
    row = {
        "source_id": sid,
        "origin": "youtube",
        "path": f"artifacts/{u.stage}/{sid}/{u.key}/{media}",
        "url": f"https://www.youtube.com/watch?v={sid}",
        "title": f"noop {sid}",
        "channel": "noop",
        "license": "youtube",
        "upload_date": "20240101",
        "query": None,
        "category": None,
        "language": None,
        "crawl_time": STAMP,
        "ytdlp_version": "noop",
        "projection": "equirectangular",
        "duration_s": duration,
        "width": 3840,
        "height": 1920,
        "fps": 30.0,
        "n_frames": int(duration * 30),
        "size_bytes": len(data),
        "content_sha256": hashlib.sha256(data).hexdigest(),
        "codec": "h264",
        "provenance": json.dumps({"requested_by": "ids"}),
    }
    u.out.write_table("registration.parquet", schema.table(schema.SOURCE, [row]))


def _probe(u: _Unit) -> None:
    from vsi_wild import schema

    u.out.write_table("source.parquet", schema.table(schema.SOURCE, [u.store.registry_row(u.unit)]))


def _review(u: _Unit) -> None:
    from vsi_wild import schema
    from vsi_wild.tasks.review import read_decision

    u.out.write_table("review.parquet", schema.table(schema.REVIEW_DECISION, [read_decision(u.store, u.unit)]))


def _project(u: _Unit) -> None:
    from vsi_wild import ids, schema

    p = u.config.project
    duration = u.durations[u.unit]
    rows = []
    for view in p.views:
        vid = ids.video_id(u.unit, view)
        data = f"noop view {vid}".encode()
        u.out.path(f"{vid}.mp4").write_bytes(data)
        rows.append(
            {
                "video_id": vid,
                "source_id": u.unit,
                "view": view,
                "yaw_deg": ids.VIEWS[view],
                "pitch_deg": 0.0,
                "hfov_deg": 90.0,
                "vfov_deg": 60.0,
                "width": p.width,
                "height": p.height,
                "fps": 30.0,
                "n_frames": int(duration * 30),
                "duration_s": duration,
                "path": f"{vid}.mp4",
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )
    u.out.write_table("views.parquet", schema.table(schema.VIEWS_TABLE, rows))


def _export(u: _Unit) -> None:
    """The real export files of no questions, and links to every projected view (as a release has)."""
    from vsi_wild import schema
    from vsi_wild.stages.export import assemble, write_export

    write_export(u.out.path, assemble(schema.QA_QUESTIONS.empty_table(), u.config.qa))
    links = {}
    for ref in u.inputs["project"].values():
        for r in u.store.read_table(ref, "views.parquet").to_pylist():
            links[f"videos/{r['video_id']}.mp4"] = f"artifacts/{ref.stage}/{ref.unit}/{ref.key}/{r['path']}"
    u.out.write_table(
        "links.parquet", schema.table(schema.EXPORT_LINKS, {"path": list(links), "target": list(links.values())})
    )


TINY_OUTPUTS: dict[str, Callable[[_Unit], None]] = {
    "download": _download,
    "probe": _probe,
    "review": _review,
    "project": _project,
    "export": _export,
}


# ----------------------------------------------------------------------------------- the no-op runs
def summary_counts(output: str, stage_names: set[str]) -> dict[str, list[int]]:
    """stage -> [computed, cached, skipped, failed] from the CLI's summary table."""
    rows = {}
    for line in output.splitlines():
        cells = line.replace("│", " ").replace("┃", " ").split()
        if len(cells) == 6 and cells[0] in stage_names:
            rows[cells[0]] = [int(x) for x in cells[1:5]]
    return rows


def check_noop(counts: dict[str, list[int]], expected_units: int) -> None:
    """Nothing computed, skipped or failed; every unit of the root found cached."""
    busy = {s: c for s, c in counts.items() if c[0] or c[2] or c[3]}
    cached = sum(c[1] for c in counts.values())
    if busy or cached != expected_units:
        raise RuntimeError(f"not a no-op: {busy or counts} ({cached} cached of {expected_units} units)")


def noop_cli(config: Path, root: Path, expected_units: int) -> float:
    """Seconds of a no-op `vsi-wild run` (a separate process, as a user runs it)."""
    from vsi_wild.tasks import registry

    exe = Path(sys.executable).with_name("vsi-wild")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "YOLO_OFFLINE": "1"}
    t0 = time.perf_counter()
    r = subprocess.run(
        [str(exe), "run", "--config", str(config), "--data-root", str(root), "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
    )
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"vsi-wild run exited {r.returncode}: {(r.stdout + r.stderr)[-3000:]}")
    check_noop(summary_counts(r.stdout, set(registry.BY_NAME)), expected_units)
    return seconds


def _refuse(stage: Any, group: list[Any]) -> Callable[[], Any]:
    raise RuntimeError(f"a no-op run would compute {stage.name}:{', '.join(p.unit for p in group)}")


def noop_in_process(
    config_path: Path, root: Path, expected_units: int, profile: cProfile.Profile | None = None
) -> float:
    """Seconds of the engine's plan loop on a cached root (what the flow does, without Prefect)."""
    from vsi_wild.config import load_config
    from vsi_wild.store import Store
    from vsi_wild.tasks import engine, registry

    config = load_config(config_path)
    t0 = time.perf_counter()
    if profile is not None:
        profile.enable()
    store = Store(root)
    plan = engine.Plan.load(config, store, registry.STAGES)
    engine.run_stages(plan, registry.STAGES, _refuse)
    summary = engine.summarize(plan, str(root))
    if profile is not None:
        profile.disable()
    seconds = time.perf_counter() - t0
    check_noop(
        {s["stage"]: [s["computed"], s["cached"], s["skipped"], s["failed"]] for s in summary["stages"]}, expected_units
    )
    return seconds


def hot_spots(profile: cProfile.Profile, n: int = 25) -> str:
    buf = io.StringIO()
    pstats.Stats(profile, stream=buf).sort_stats("cumulative").print_stats(n)
    return buf.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", action="store_true", help="print the in-process loop's hot spots")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vsi-noop-") as d:
        base = Path(d)
        t0 = time.perf_counter()
        big_cfg, big_root, units = build_root(base / "release", RELEASE_SOURCES, RELEASE_CLIPS)
        print(f"# release-scale root: {units} cached units built in {time.perf_counter() - t0:.0f} s", flush=True)
        one_cfg, one_root, one_units = build_root(base / "one", 1, 30)
        # The one-source run first: it also pays a fresh Prefect home's database set-up, if any,
        # so it is run twice and the second is kept.
        noop_cli(one_cfg, one_root, one_units)
        one = noop_cli(one_cfg, one_root, one_units)
        big = noop_cli(big_cfg, big_root, units)
        inproc = noop_in_process(big_cfg, big_root, units)
        profile = None
        if args.profile:  # a run of its own: the profiler slows what it measures
            profile = cProfile.Profile()
            noop_in_process(big_cfg, big_root, units, profile)
    print(f"noop_seconds_release_scale: {big:.1f}  (target < {TARGET_SECONDS:.0f})")
    print(f"noop_ms_per_cached_unit: {1000 * big / units:.2f}  (target < {TARGET_MS_PER_UNIT:.0f})")
    print(f"noop_units: {units}")
    print(f"noop_seconds_one_unit: {one:.1f}  (a root of one source: {one_units} units)")
    print(f"noop_seconds_in_process: {inproc:.1f}  (the engine's plan loop alone, release scale)")
    if profile is not None:
        print("# hot spots of the in-process no-op (cumulative seconds):")
        print("\n".join(f"# {line}" for line in hot_spots(profile).splitlines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
