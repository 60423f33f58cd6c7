"""The stage contract: declared outputs checked at commit and on read, config sections enforced,
backends declared (their requirements checked once per stage, their models released after it)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from vsi_wild import schema
from vsi_wild.config import Config
from vsi_wild.digest import table_bytes
from vsi_wild.stages.backends import base as backends
from vsi_wild.stages.backends import params as P
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks import engine, registry
from vsi_wild.tasks.engine import BackendUse, Plan, Stage

ROWS = schema._schema("test rows", schema.f("unit", pa.string()), schema.f("n", pa.int64()))


def _register(store: Store, *source_ids: str) -> None:
    for sid in source_ids:
        row = {n: None for n in schema.SOURCE.names}
        row.update(source_id=sid, origin="local", path=f"/nonexistent/{sid}.mp4")
        store.register_source(row)


def _rows(unit: str, n: int = 1) -> pa.Table:
    return schema.table(ROWS, [{"unit": unit, "n": n}])


def _run(store: Store, stages: list[Stage], config: Config | None = None, only: int = 0) -> Plan:
    """Run ``stages[only:]`` of the DAG ``stages``."""
    plan = Plan.load(config or Config(), store, stages)
    engine.run_stages(plan, stages[only:], engine.run_inline(plan))
    return plan


def _src(run, **kw) -> Stage:
    return Stage(
        "src",
        "1",
        "source",
        run,
        outputs=(schema._parquet("t.parquet", ROWS), schema.Artifact("media/*.bin", optional=True)),
        units=lambda plan, st: plan.sources(),
        **kw,
    )


def test_an_output_that_breaks_its_declaration_is_not_committed(tmp_path):
    store = Store(tmp_path)
    _register(store, "local-a-1")

    def undeclared(job):
        job.out.write_table("t.parquet", _rows(job.unit))
        job.out.path("notes.txt").write_text("not declared")

    def wrong_schema(job):
        job.out.write_table("t.parquet", pa.table({"unit": [job.unit], "n": [1.5]}))

    def missing(job):
        job.out.path("media/x.bin").write_bytes(b"x")

    def good(job):
        job.out.write_table("t.parquet", _rows(job.unit))
        job.out.path("media/x.bin").write_bytes(b"x")

    for run, expected in (
        (undeclared, "undeclared files ['notes.txt']"),
        (wrong_schema, "t.parquet: column 'n': type double != int64"),
        (missing, "missing t.parquet"),
    ):
        plan = _run(store, [_src(run)])
        o = plan.outcomes["src"]["local-a-1"]
        assert o.state == "failed" and expected in o.error and "schema.ARTIFACTS['src']" in o.error
        assert not list((tmp_path / "artifacts").rglob("_manifest.parquet"))  # nothing committed
    plan = _run(store, [_src(good)])
    assert plan.outcomes["src"]["local-a-1"].state == "computed"


def test_a_read_is_checked_against_the_upstream_declaration(tmp_path):
    store = Store(tmp_path)
    _register(store, "local-a-1")
    seen = []

    def src(job):
        job.out.write_table("t.parquet", _rows(job.unit))

    def vid(job):
        seen.append(job.read("src", "t.parquet").num_rows)
        job.out.write_table("t.parquet", _rows(job.unit))

    def vid_undeclared(job):
        job.read("src", "other.parquet")

    stages = [_src(src), Stage("vid", "1", "video", vid, outputs=(schema._parquet("t.parquet", ROWS),), needs=("src",))]
    plan = _run(store, stages)
    assert seen and all(o.state == "computed" for o in plan.outcomes["vid"].values())

    # the upstream file changed under the declaration (another version wrote it): the reader fails, naming it
    ref = UnitRef("src", "local-a-1", plan.current["src"]["local-a-1"][0])
    (tmp_path / "artifacts" / "src" / "local-a-1" / ref.key / "t.parquet").write_bytes(
        table_bytes(pa.table({"unit": ["x"]}))
    )
    stages[1] = Stage("vid", "2", "video", vid, outputs=stages[1].outputs, needs=("src",))
    plan = _run(store, stages, only=1)
    errors = {o.error for o in plan.outcomes["vid"].values()}
    assert len(errors) == 1 and "src:local-a-1 t.parquet does not conform to its declared schema" in errors.pop()

    stages = [stages[0], Stage("vid", "3", "video", vid_undeclared, outputs=stages[1].outputs, needs=("src",))]
    plan = _run(store, stages, only=1)
    assert all("which stage src does not declare" in o.error for o in plan.outcomes["vid"].values())


def test_a_stage_reads_only_the_config_sections_it_declares(tmp_path):
    store = Store(tmp_path)
    _register(store, "local-a-1")
    got = {}

    def reads(job):
        got["probe"] = job.config.probe.timeout_s  # declared
        got["run"] = job.config.run.workers  # how the run executes: always readable
        got["search"] = job.config.crawl.search.results_per_query  # a declared sub-section
        job.out.write_table("t.parquet", _rows(job.unit))

    plan = _run(store, [_src(reads, sections=("probe", "crawl.search"))])
    assert plan.outcomes["src"]["local-a-1"].state == "computed" and set(got) == {"probe", "run", "search"}

    def reads_more(job):
        job.config.qa  # noqa: B018 - not declared

    plan = _run(store, [_src(reads_more, sections=("probe",))])
    err = plan.outcomes["src"]["local-a-1"].error
    assert "reads config section 'qa' without declaring it" in err

    def reads_other_sub(job):
        job.config.crawl.download  # noqa: B018 - only crawl.search is declared

    plan = _run(store, [_src(reads_other_sub, sections=("crawl.search",))])
    assert "'crawl.download' without declaring it" in plan.outcomes["src"]["local-a-1"].error

    def reads_models(job):
        job.config.models  # noqa: B018 - only a stage that builds backends sees models

    plan = _run(store, [_src(reads_models, sections=("probe",))])
    assert "'models' without declaring it" in plan.outcomes["src"]["local-a-1"].error


@pytest.fixture
def weighted_backend():
    """A segmenter with a weight file (models.sam3_checkpoint) whose model is loaded through the
    shared model cache, as the production backends do."""
    loads = []

    class Seg:
        def __init__(self, ctx):
            path = ctx.models.weight_path("sam3_checkpoint")
            self.model = P.load_once(("test-seg", str(path)), lambda: (loads.append(path) or object(), "cpu")).model

    backends.register(
        "segmenter",
        "test_weighted",
        fields=("sam3_checkpoint",),
        weights=("sam3_checkpoint",),
        packages=(("json", "json"),),
    )(Seg)
    yield loads
    del backends._SPECS["segmenter"]["test_weighted"]
    P.clear_cache()


def test_a_missing_weight_file_is_one_error_for_the_stage_naming_its_key(tmp_path, weighted_backend):
    store = Store(tmp_path / "root")
    _register(store, "local-a-1", "local-b-2", "local-c-3")
    calls = []

    def seg(job):
        calls.append(job.unit)
        job.backend("segmenter")
        job.out.write_table("t.parquet", _rows(job.unit))

    def after(job):
        job.out.write_table("t.parquet", _rows(job.unit))

    stage = _src(seg, sections=("segment",), backends=(BackendUse("segmenter", "segment.backend"),))
    down = Stage("down", "1", "source", after, outputs=stage.outputs[:1], needs=("src",))
    config = Config.model_validate(
        {"segment": {"backend": "test_weighted"}, "models": {"weights_dir": str(tmp_path / "w")}}
    )
    plan = _run(store, [stage, down], config)
    assert calls == []  # no unit ran
    summary = engine.summarize(plan, str(tmp_path))
    (failure,) = summary["failed"]
    assert failure["stage"] == "src" and "3 units not started" in failure["unit"]
    assert "model weights not found" in failure["error"] and "`models.sam3_checkpoint`" in failure["error"]
    assert store.read_status("src", "local-a-1") is None  # not a failure of each unit
    assert "down" not in plan.outcomes  # no unit: the summary says why
    assert summary["no_units"] == [
        {
            "stage": "down",
            "reason": (
                f"src has no current output for local-a-1, local-b-2, local-c-3 (stage src could not start: "
                f"{failure['error']}); make it ready: vsi-wild run --from src"
            ),
        }
    ]

    # with the file there, every unit runs, the model loads once, and is released after the stage
    (tmp_path / "w" / "sam3").mkdir(parents=True)
    (tmp_path / "w" / "sam3" / "sam3.pt").write_bytes(b"weights")
    plan = _run(store, [stage, down], config)
    assert sorted(calls) == ["local-a-1", "local-b-2", "local-c-3"] and len(weighted_backend) == 1
    assert not [k for k in P.cached_keys() if k[0] == "test-seg"]
    assert all(o.state == "computed" for o in plan.outcomes["down"].values())


def test_backend_fingerprints_come_from_declarations(tmp_path, weighted_backend):
    with pytest.raises(TypeError):
        backends.register("segmenter", "undeclared")(lambda ctx: None)  # fields= is required
    with pytest.raises(ValueError, match="unknown backend kind"):
        backends.register("tracker", "x", fields=())(lambda ctx: None)
    with pytest.raises(ValueError, match="not among its fields"):
        backends.register("segmenter", "x", fields=(), weights=("sam3_checkpoint",))(lambda ctx: None)
    store = Store(tmp_path / "root")
    stage = _src(lambda job: None, sections=("segment",), backends=(BackendUse("segmenter", "segment.backend"),))

    def key(**models) -> str:
        config = Config.model_validate(
            {"segment": {"backend": "test_weighted"}, "models": {"weights_dir": str(tmp_path / "w"), **models}}
        )
        return Plan.load(config, store, [stage]).backend_fingerprints(stage)["segment.backend"]

    base = key()
    assert key(sam3_score_threshold=0.1) == base  # not a declared field of this backend
    assert key(sam3_checkpoint="other.pt") != base
    (tmp_path / "w" / "sam3").mkdir(parents=True)
    (tmp_path / "w" / "sam3" / "sam3.pt").write_bytes(b"weights")
    assert key() != base  # the file appeared


def test_every_production_stage_declares_typed_outputs_and_its_backends():
    for stage in registry.STAGES:
        assert stage.outputs == schema.ARTIFACTS[stage.name]
        for a in stage.outputs:
            if a.name.endswith(".parquet"):
                assert a.schema is not None, (stage.name, a.name)
    by_name = registry.BY_NAME
    assert {u.kind for u in by_name["detect"].backends} == {"open_vocab_detector"}
    assert {u.kind for u in by_name["project"].backends} == {"face_detector"}
    for kind in backends.KINDS:
        for name in backends.available(kind):
            spec = backends.spec(kind, name)
            assert set(spec.weights) <= set(spec.fields)


def test_a_run_that_selects_nothing_says_why(tmp_path, capsys):
    """`run --only project` on a newly added source: project has no unit, because probe and review
    have not run for it; the summary names them, the source and the command that makes it ready."""
    from vsi_wild.cli import _print_summary

    store = Store(tmp_path / "root")
    _register(store, "local-new-1")
    stages = registry.select(only=["project"])
    plan = Plan.load(Config(), store, registry.STAGES)
    engine.run_stages(plan, stages, engine.run_inline(plan))
    summary = engine.summarize(plan, str(tmp_path))
    assert summary["no_units"] == [
        {
            "stage": "project",
            "reason": (
                "probe has no current output for local-new-1 (probe has not run for it); make it ready: "
                "vsi-wild run --from probe; review has no current output for local-new-1 (review has not run for it); "
                "make it ready: vsi-wild run --from review"
            ),
        }
    ]
    _print_summary(summary)
    out = capsys.readouterr().out
    assert "nothing to do project: probe has no current output for local-new-1" in out

    empty = Plan.load(Config(), Store(tmp_path / "empty"), registry.STAGES)
    engine.run_stages(empty, stages, engine.run_inline(empty))
    assert "no source is registered" in empty.no_units["project"]
    # stages that enumerate their own units say what their config lacks (the crawl is off by default)
    engine.run_stages(empty, registry.select(only=["sample", "search", "probe"]), engine.run_inline(empty))
    for name in ("sample", "search", "probe"):
        assert empty.no_units[name] == registry.stage(name).no_units_hint != ""
