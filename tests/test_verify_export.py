"""`qa.require_verified_videos`: the export keeps only what reviewers marked verified in the app
(verify/<video_id>.json), and marking a video verified re-exports. Engine runs on a copy of the
session's sample root; the expected rows are derived from its unfiltered export."""

from __future__ import annotations

import pyarrow.parquet as pq
from conftest import REPO, copy_root

from vsi_wild.config import load_config
from vsi_wild.store import Store
from vsi_wild.tasks import engine, registry
from vsi_wild.verify import progress

VID = "sample-walk_front"


def _export(root, **qa):
    config = load_config(REPO / "configs" / "sample.yaml", {f"qa.{k}": v for k, v in qa.items()})
    plan = engine.Plan.load(config, Store(root), registry.STAGES)
    engine.run_stages(plan, registry.select(only=["export"]), engine.run_inline(plan))
    outcome = plan.outcomes["export"]["all"]
    assert outcome.state in ("computed", "cached"), outcome.error
    return outcome, pq.read_table(root / "artifacts" / "export" / "all" / outcome.key / "qa.parquet").to_pylist()


def test_only_verified_videos_are_exported(sample_root, tmp_path):
    root = copy_root(sample_root[0], tmp_path / "data")
    store = Store(root)
    _, everything = _export(root)

    def release(rows):
        return {(r["video_id"], r["task_type"], r["question"]) for r in rows if r["split"] == "release"}

    nothing_marked, rows = _export(root, require_verified_videos=True)
    assert rows == []  # no video is marked: nothing is exported

    progress.write(store, VID, progress.Progress(temporal_verified=True, clips_verified=[0, 1]))
    marked, rows = _export(root, require_verified_videos=True)
    assert marked.key != nothing_marked.key  # the marks are an input of the export
    assert {r["video_id"] for r in rows} == {VID}
    expected = {q for q in release(everything) if q[0] == VID and q[1] != "VMR"}
    assert expected and {q for q in release(rows) if q[1] != "VMR"} == expected
    vmr = [r for r in rows if r["task_type"] == "VMR" and r["split"] == "release"]
    all_vmr = [r for r in everything if r["video_id"] == VID and r["task_type"] == "VMR" and r["split"] == "release"]
    assert 0 < len(vmr) < len(all_vmr)  # the clips not marked verified are left out
    assert {r["query_times"][0] < 60.0 for r in vmr} == {True}  # clips 0 and 1: the first minute
    again, _ = _export(root, require_verified_videos=True)
    assert again.state == "cached" and again.key == marked.key
