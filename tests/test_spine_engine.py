"""The engine: cache keys, caching, failure isolation, skips, selection - with small test stages.

The stages here are test doubles of the Stage interface (a stage is any function of a Job); the
real stages are exercised end to end in test_spine_pipeline.py.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from vsi_wild import ids, schema
from vsi_wild.config import Config
from vsi_wild.errors import UnitError
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks import engine
from vsi_wild.tasks.engine import Plan, Selection, Stage

ANY_OUTPUT = (schema.Artifact("*"),)  # these test stages write whatever they test

CALLS: list[tuple[str, str]] = []


def _register(store: Store, *source_ids: str) -> None:
    for sid in source_ids:
        row = {n: None for n in schema.SOURCE.names}
        row.update(source_id=sid, origin="local", path=f"/nonexistent/{sid}.mp4")
        store.register_source(row)


def _src_run(job):
    CALLS.append(("src", job.unit))
    if job.unit.startswith("local-bad"):
        raise UnitError(f"{job.unit}: broken on purpose")
    job.out.write_table("t.parquet", pa.table({"unit": [job.unit], "workers": [job.config.run.workers]}))


def _vid_run(job):
    CALLS.append(("vid", job.unit))
    src = job.read("src", "t.parquet")
    job.out.write_table("t.parquet", src.append_column("video", pa.array([job.unit])))


def _all_run(job):
    CALLS.append(("all", job.unit))
    units = sorted(job.refs("vid"))
    job.out.write_table("t.parquet", pa.table({"units": units}))


def stages(src_version: str = "1", raw: dict | None = None) -> list[Stage]:
    return [
        Stage(
            "src",
            src_version,
            "source",
            _src_run,
            outputs=ANY_OUTPUT,
            units=lambda plan, st: plan.sources(),
            sections=("review",),
            raw_inputs=(lambda c, s, u: raw or {}),
        ),
        Stage("vid", "1", "video", _vid_run, outputs=ANY_OUTPUT, needs=("src",)),
        Stage("all", "1", "all", _all_run, outputs=ANY_OUTPUT, needs=("vid",)),
    ]


def run(
    store: Store,
    config: Config | None = None,
    sts: list[Stage] | None = None,
    only: list[str] | None = None,
    videos: set[str] | None = None,
    force: bool = False,
) -> Plan:
    sts = sts or stages()
    chosen = [s for s in sts if not only or s.name in only]
    plan = Plan.load(
        config or Config(),
        store,
        sts,
        selection=Selection(frozenset(videos or ())),
        force=frozenset(s.name for s in chosen) if force else frozenset(),
    )
    engine.run_stages(plan, chosen, engine.run_inline(plan))
    return plan


def counts(plan: Plan, stage: str) -> dict[str, int]:
    c: dict[str, int] = {}
    for o in plan.outcomes[stage].values():
        c[o.state] = c.get(o.state, 0) + 1
    return c


@pytest.fixture(autouse=True)
def _clear():
    CALLS.clear()


def test_second_run_computes_nothing(tmp_path):
    store = Store(tmp_path)
    _register(store, "local-a-1", "local-b-2")
    p1 = run(store)
    assert counts(p1, "src") == {"computed": 2} and counts(p1, "vid") == {"computed": 8}
    assert counts(p1, "all") == {"computed": 1}
    CALLS.clear()
    p2 = run(store)
    assert CALLS == []
    assert (
        counts(p2, "src") == {"cached": 2} and counts(p2, "vid") == {"cached": 8} and counts(p2, "all") == {"cached": 1}
    )
    out = store.read_table(UnitRef("all", "all", p2.current["all"]["all"][0]), "t.parquet")
    assert out["units"].to_pylist() == sorted(ids.video_id(s, v) for s in ("local-a-1", "local-b-2") for v in ids.VIEWS)


def test_failure_is_isolated_and_downstream_skipped(tmp_path):
    store = Store(tmp_path)
    _register(store, "local-a-1", "local-bad-2")
    plan = run(store)
    assert counts(plan, "src") == {"computed": 1, "failed": 1}
    assert counts(plan, "vid") == {"computed": 4}  # the bad source has no videos to enumerate
    row = store.read_status("src", "local-bad-2")
    assert row["state"] == "failed" and "broken on purpose" in row["error"]
    assert row["error_class"] == "bad_input" and row["attempts"] == 1
    summary = engine.summarize(plan, str(tmp_path))
    assert [f["unit"] for f in summary["failed"]] == ["local-bad-2"]
    # a re-run retries only the failed unit
    CALLS.clear()
    plan = run(store)
    assert CALLS == [("src", "local-bad-2")]
    assert store.read_status("src", "local-bad-2")["attempts"] == 2


def test_non_retryable_failure_is_not_retried_unless_forced(tmp_path):
    def src_run(job):
        CALLS.append(("src", job.unit))
        raise UnitError("video removed by uploader", kind="removed", retryable=False)

    sts = stages()
    sts[0] = Stage("src", "1", "source", src_run, outputs=ANY_OUTPUT, units=lambda plan, st: plan.sources())
    store = Store(tmp_path)
    _register(store, "local-a-1")
    run(store, sts=sts, only=["src"])
    assert CALLS == [("src", "local-a-1")]
    row = store.read_status("src", "local-a-1")
    assert row["retryable"] is False and row["error_class"] == "removed"
    CALLS.clear()
    plan = run(store, sts=sts, only=["src"])
    assert CALLS == [] and counts(plan, "src") == {"failed": 1}
    run(store, sts=sts, only=["src"], force=True)
    assert CALLS == [("src", "local-a-1")]


def test_keys_follow_version_config_section_and_raw_inputs(tmp_path):
    store = Store(tmp_path)
    _register(store, "local-a-1")
    run(store)
    CALLS.clear()
    # a config section the stage does not read: nothing recomputed
    run(store, config=Config.model_validate({"run": {"workers": 1}}))
    assert CALLS == []
    # the section it reads: src recomputed; its output bytes are equal, so downstream stays cached
    run(store, config=Config.model_validate({"review": {"require_decision": False}}))
    assert CALLS == [("src", "local-a-1")]
    CALLS.clear()
    # a new stage version recomputes it
    run(store, sts=stages(src_version="2"))
    assert CALLS == [("src", "local-a-1")]
    CALLS.clear()
    # a raw input (e.g. a fix file) changes the key
    run(store, sts=stages(raw={"fix": "abc"}))
    assert CALLS == [("src", "local-a-1")]


def test_changed_upstream_content_recomputes_only_its_dependents(tmp_path):
    def src_run(job):
        CALLS.append(("src", job.unit))
        # output depends on config only for one source
        extra = job.config.run.workers if job.unit == "local-a-1" else 0
        job.out.write_table("t.parquet", pa.table({"unit": [job.unit], "v": [extra]}))

    sts = stages()
    sts[0] = Stage(
        "src", "1", "source", src_run, outputs=ANY_OUTPUT, units=lambda plan, st: plan.sources(), sections=("run",)
    )
    store = Store(tmp_path)
    _register(store, "local-a-1", "local-b-2")
    run(store, sts=sts)
    CALLS.clear()
    run(store, sts=sts, config=Config.model_validate({"run": {"workers": 7}}))
    recomputed = sorted(CALLS)
    assert recomputed == sorted(
        [("src", "local-a-1"), ("src", "local-b-2")]
        + [("vid", ids.video_id("local-a-1", v)) for v in ids.VIEWS]
        + [("all", "all")]
    )


def test_only_and_videos_selection(tmp_path):
    store = Store(tmp_path)
    _register(store, "local-a-1", "local-b-2")
    run(store)
    CALLS.clear()
    plan = run(store, only=["vid"], videos={"local-a-1_front"}, force=True)
    assert CALLS == [("vid", "local-a-1_front")]
    assert list(plan.outcomes) == ["vid"]
    CALLS.clear()
    # the global stage still sees every current video output, not only the selected ones
    plan = run(store, only=["all"], videos={"local-a-1_front"}, force=True)
    key = plan.current["all"]["all"][0]
    assert len(store.read_table(UnitRef("all", "all", key), "t.parquet")["units"]) == 8


def test_a_selected_id_that_names_no_source_fails_the_run_by_name(tmp_path):
    """A typo in --videos selects nothing: the run says which id named no registered source (a
    view name mistyped, an id of no form, a source not registered), and runs the valid ones."""
    store = Store(tmp_path)
    _register(store, "local-a-1", "local-b-2")
    run(store)
    CALLS.clear()
    picked = {"local-a-1_front", "local-a-1_fornt", "local-c-3", "not an id"}
    plan = run(store, only=["vid"], videos=picked, force=True)
    assert CALLS == [("vid", "local-a-1_front")]
    failed = engine.summarize(plan, str(tmp_path))["failed"]
    assert [(f["stage"], f["unit"]) for f in failed] == [
        ("--videos", "local-a-1_fornt"),
        ("--videos", "local-c-3"),
        ("--videos", "not an id"),
    ]
    assert "'<source id>_<front|right|back|left>'" in failed[0]["error"]
    assert "sources: local-a-1, local-b-2" in failed[1]["error"]
    plan = run(store, only=["vid"], videos={"local-b-2", "local-a-1_left"}, force=True)
    assert not engine.summarize(plan, str(tmp_path))["failed"]


def test_unregistered_sources_leave_global_outputs(tmp_path):
    store = Store(tmp_path)
    _register(store, "local-a-1", "local-b-2")
    run(store)
    store.unregister_source("local-b-2")
    plan = run(store)
    key = plan.current["all"]["all"][0]
    assert store.read_table(UnitRef("all", "all", key), "t.parquet")["units"].to_pylist() == sorted(
        ids.video_id("local-a-1", v) for v in ids.VIEWS
    )


def test_skip_reason_names_the_missing_input(tmp_path):
    store = Store(tmp_path)
    _register(store, "local-a-1")
    sts = stages()
    plan = Plan.load(Config(), store, sts)
    # vid units enumerated by hand while src never ran
    outcome = engine.prepare(plan, sts[1], "local-a-1_front")
    assert outcome.state == "skipped" and "needs src:local-a-1" in outcome.error
    assert store.read_status("vid", "local-a-1_front")["state"] == "skipped"


def test_global_stage_after_a_failed_global_stage_is_skipped(tmp_path):
    def broken_all(job):
        raise UnitError("export broke")

    def report(job):
        CALLS.append(("report", job.unit))
        job.out.write_table("t.parquet", job.read("all", "t.parquet"))

    sts = stages()
    sts[2] = Stage("all", "1", "all", broken_all, outputs=ANY_OUTPUT, needs=("vid",))
    sts.append(Stage("report", "1", "all", report, outputs=ANY_OUTPUT, needs=("all", "src")))
    store = Store(tmp_path)
    _register(store, "local-a-1")
    plan = run(store, sts=sts)
    assert counts(plan, "all") == {"failed": 1}
    assert counts(plan, "report") == {"skipped": 1} and ("report", "all") not in CALLS
    assert "needs all:all" in plan.outcomes["report"]["all"].error


def test_a_group_runs_in_one_pass_and_a_failure_falls_back_to_its_own_unit(tmp_path):
    """A stage with ``group`` and ``run_group`` gets a source's videos in one call, each video with
    its own output and status; when that call raises, the videos run again one at a time, so the
    bad one fails alone and its siblings are computed."""
    import dataclasses

    store = Store(tmp_path / "data")
    _register(store, "local-a", "local-b")
    bad_view = ids.video_id("local-b", "left")
    passes: list[list[str]] = []

    def vid_run(job):
        if job.unit == bad_view:
            raise UnitError(f"{job.unit}: broken on purpose")
        _vid_run(job)

    def together(jobs):
        passes.append(sorted(j.unit for j in jobs))
        for j in jobs:
            vid_run(j)

    src, vid, _ = stages()
    vid = dataclasses.replace(vid, run=vid_run, group="source", run_group=together)
    plan = run(store, sts=[src, vid])
    views = {sid: sorted(ids.video_id(sid, v) for v in ids.VIEWS) for sid in ("local-a", "local-b")}
    assert sorted(passes) == [views["local-a"], views["local-b"]]
    states = {u: o.state for u, o in plan.outcomes["vid"].items()}
    assert states == {u: "failed" if u == bad_view else "computed" for us in views.values() for u in us}
    assert "broken on purpose" in plan.outcomes["vid"][bad_view].error
    # local-a's views ran once, in the group's pass; local-b's again one at a time after it raised
    vid_calls = [u for stage, u in CALLS if stage == "vid"]
    assert sorted(u for u in vid_calls if u.startswith("local-a")) == views["local-a"]
    assert sorted(u for u in vid_calls if u.startswith("local-b")) == sorted(
        [u for u in views["local-b"] if u < bad_view] + [u for u in views["local-b"] if u != bad_view]
    )
