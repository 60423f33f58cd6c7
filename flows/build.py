"""The Prefect flow `build-vsi-wild`: the whole DAG, stage by stage, unit by unit.

One Prefect task run per (stage, unit) that must be computed; cached and skipped units are
answered in the flow without a task (they cost a file lookup, not a task run). Stages run in DAG
order; within a stage, units run concurrently on the task runner the config names (a thread pool
here, a Dask cluster past one machine). The flow ends Failed when any unit failed, after every
other unit has had its turn.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from prefect import flow, get_run_logger, task
from prefect.states import Failed
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, Field

from vsi_wild.config import Config, ConfigError, load_config
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks import engine, registry
from vsi_wild.tasks.engine import Outcome, Prepared, Selection
from vsi_wild.tasks.sources import register_local

# The stage names as a type: a deployment's published parameter schema lists them, so that
# `prefect deployment run ... -p only='["typo"]'` is rejected when the run is created.
F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:  # the names are known only at run time
    StageName = str
else:
    StageName = Literal[tuple(s.name for s in registry.STAGES)]


class RunRequest(BaseModel):
    """What to run: the flow's parameters, validated (a deployment publishes this schema)."""

    config: str = Field("configs/sample.yaml", description="YAML config file (relative to the working directory)")
    data_root: str | None = Field(None, description="overrides run.data_root (a folder or an fsspec URL)")
    only: list[StageName] | None = Field(None, description="run only these stages")
    from_stage: StageName | None = Field(None, description="run this stage and every stage after it")
    videos: list[str] | None = Field(None, description="restrict to these source or video ids")
    force: bool = Field(False, description="recompute the selected stages even when cached")
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted config keys -> values")


class PipelineFailed(RuntimeError):
    def __init__(self, summary: dict[str, Any]):
        failed = summary["failed"]
        super().__init__(
            f"{len(failed)} unit(s) failed: " + "; ".join(f"{f['stage']}:{f['unit']}: {f['error']}" for f in failed[:5])
        )
        self.summary = summary


class WorkerSpec(BaseModel):
    """Everything a worker process needs to run a unit (pickled to Dask workers)."""

    config: dict[str, Any]
    data_root: str


@functools.lru_cache(maxsize=4)
def _worker_context(spec_json: str) -> tuple[Config, Store]:
    spec = WorkerSpec.model_validate_json(spec_json)
    return Config.model_validate(spec.config), Store(spec.data_root)


@task(name="run-unit", task_run_name="{stage_name}:{unit}")
def run_unit(
    spec_json: str, stage_name: str, unit: str, key: str, inputs: dict[str, dict[str, tuple[str, str, str]]]
) -> dict[str, Any]:
    config, store = _worker_context(spec_json)
    refs = {name: {u: UnitRef(*r) for u, r in units.items()} for name, units in inputs.items()}
    outcome = engine.execute(registry.stage(stage_name), Prepared(stage_name, unit, key, refs), config, store)
    return outcome.to_dict()


@task(name="run-units", task_run_name="{stage_name}:{group}")
def run_units(
    spec_json: str,
    stage_name: str,
    group: str,
    units: list[tuple[str, str, dict[str, dict[str, tuple[str, str, str]]]]],
) -> list[dict[str, Any]]:
    """A stage's units that run together on one worker (``Stage.group``): (unit, key, inputs) each."""
    config, store = _worker_context(spec_json)
    prepared = [
        Prepared(stage_name, unit, key, {name: {u: UnitRef(*r) for u, r in us.items()} for name, us in inputs.items()})
        for unit, key, inputs in units
    ]
    return [o.to_dict() for o in engine.execute_group(registry.stage(stage_name), prepared, config, store)]


def task_runner(config: Config) -> Any:
    if config.run.task_runner == "dask":
        from prefect_dask import DaskTaskRunner

        run = config.run
        if run.dask_address:
            return DaskTaskRunner(address=run.dask_address)
        kwargs = run.dask_cluster_kwargs
        if not kwargs and run.dask_cluster_class == "distributed.LocalCluster":
            kwargs = {"n_workers": run.workers, "threads_per_worker": 1, "processes": True}
        try:
            return DaskTaskRunner(
                cluster_class=run.dask_cluster_class, cluster_kwargs=kwargs, adapt_kwargs=run.dask_adapt_kwargs or None
            )
        except ImportError as e:
            raise ConfigError(
                f"run.dask_cluster_class: cannot import {run.dask_cluster_class!r} ({e}); "
                "install its package (dask_jobqueue.*: pip install dask-jobqueue)"
            ) from None
    return ThreadPoolTaskRunner(max_workers=config.run.workers)


def execute_plan(request: RunRequest) -> dict[str, Any]:
    """Run the selected stages (inside a flow, so that `run_unit` submissions are Prefect tasks)."""
    logger = get_run_logger()
    config = load_config(request.config, request.overrides)
    store = Store(request.data_root or config.run.data_root)
    # Workers (Dask processes, other hosts) may have another working directory: they get the
    # absolute folder or the URL.
    data_root = str(store.local_root()) if store.is_local else store.url
    store.clean_scratch()
    if config.sources.paths:  # the same for `vsi-wild run` and a deployment run
        register_local(store, config.sources.paths)
    stages = registry.select(request.only, request.from_stage)
    forced = frozenset(s.name for s in stages) if request.force else frozenset()
    plan = engine.Plan.load(
        config, store, registry.STAGES, selection=Selection(frozenset(request.videos or ())), force=forced
    )
    spec_json = WorkerSpec(config=config.model_dump(mode="json"), data_root=data_root).model_dump_json()

    def submit(stage: engine.Stage, group: list[Prepared]):
        tags = ["gpu"] if stage.gpu else []
        units = [
            (p.unit, p.key, {n: {u: (r.stage, r.unit, r.key) for u, r in us.items()} for n, us in p.inputs.items()})
            for p in group
        ]
        if len(units) == 1:
            future = run_unit.with_options(tags=tags).submit(spec_json, stage.name, *units[0])
            return lambda: [Outcome(**future.result())]
        name = f"{units[0][0]}..{units[-1][0]}"
        futures = run_units.with_options(tags=tags).submit(spec_json, stage.name, name, units)
        return lambda: [Outcome(**o) for o in futures.result()]

    engine.run_stages(plan, stages, submit)
    summary = engine.summarize(plan, data_root)
    for s in summary["stages"]:
        logger.info(
            "stage %(stage)s: %(computed)d computed, %(cached)d cached, %(skipped)d skipped, %(failed)d failed", s
        )
    return summary


# The flows' docstrings: Prefect publishes "Args:" as the parameters' descriptions. Flow signatures
# must keep annotations that `inspect.signature(eval_str=True)` resolves (no `| Failed` return type:
# `Failed` is a function), else the published schema silently drops every non-builtin type.
PARAMETERS_DOC = """Run vsi-wild's stages (cached units are not recomputed).

Args:
    config: YAML config file, relative to the project folder (VSI_WILD_HOME).
    data_root: overrides run.data_root: a folder or an fsspec URL (s3://bucket/prefix).
    only: run only these stages.
    from_stage: run this stage and every stage after it.
    videos: restrict to these source or video ids.
    force: recompute the selected stages even where cached.
    overrides: dotted config keys -> values, e.g. {"run.workers": 1}.
"""


def with_doc(doc: str) -> Callable[[F], F]:
    """Set a flow function's docstring before @flow reads it (Prefect parses "Args:" at decoration)."""

    def set_doc(fn: F) -> F:
        fn.__doc__ = doc
        return fn

    return set_doc


@flow(
    name="build-vsi-wild",
    description="Build VSI-Super-Wild: the whole DAG (or the selected stages) on the configured sources.",
)
@with_doc(PARAMETERS_DOC)
def build_vsi_wild(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    only: list[StageName] | None = None,
    from_stage: StageName | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:  # the summary, or a Failed state carrying it (a plain annotation: see PARAMETERS_DOC)
    return run_request(
        RunRequest(
            config=config,
            data_root=data_root,
            only=only,
            from_stage=from_stage,
            videos=videos,
            force=force,
            overrides=overrides or {},
        )
    )


def run_request(request: RunRequest) -> Any:
    """The body of every flow: run the request's stages on the configured task runner."""
    cfg = load_config(request.config, request.overrides)
    runner = task_runner(cfg)
    with _api_for_remote_workers(cfg):
        summary = _dag.with_options(task_runner=runner)(request.model_dump_json())
    _publish_summary(summary)
    _publish_report(summary)
    if summary["failed"]:
        # A Failed final state (not an exception): the run did what it could; the summary says what
        # failed, without a traceback in the log.
        return Failed(message=str(PipelineFailed(summary)), data=summary)
    return summary


@flow(name="vsi-wild-dag", description="The stages of one build-vsi-wild run, on the configured task runner.")
def _dag(request_json: str) -> dict[str, Any]:
    return execute_plan(RunRequest.model_validate_json(request_json))


@contextlib.contextmanager
def _api_for_remote_workers(config: Config) -> Iterator[None]:
    """Point Dask workers at this run's Prefect API.

    Task runs on Dask workers report to the API named in the settings shipped with each task. With
    no PREFECT_API_URL (Prefect's ephemeral mode: `vsi-wild run`), every worker process would start
    an ephemeral server of its own on the same database (minutes on a small machine); instead name
    the ephemeral server this flow run already talks to. It listens on 127.0.0.1: workers on other
    hosts need a real server (a deployment run, or PREFECT_API_URL set).
    """
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if config.run.task_runner != "dask" or PREFECT_API_URL.value():
        yield
        return
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        url = str(client.api_url).rstrip("/")
    with temporary_settings(updates={PREFECT_API_URL: url}):
        yield


def _publish_summary(summary: dict[str, Any]) -> None:
    try:
        from prefect.artifacts import create_table_artifact

        create_table_artifact(
            key="vsi-wild-summary",
            table=summary["stages"],
            description=json.dumps({"data_root": summary["data_root"], "failed": len(summary["failed"])}),
        )
    except Exception:  # the summary is also returned; an artifact API hiccup must not fail the run
        pass


def _publish_report(summary: dict[str, Any]) -> None:
    """When this run made or found the report: its summary (report.md), its per-task counts and a
    link to report.html as the flow run's artifacts."""
    if not any(s["stage"] == "report" and (s["computed"] or s["cached"]) for s in summary["stages"]):
        return
    try:
        from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact

        from vsi_wild.tasks.report import published_report

        report = published_report(Store(summary["data_root"]))
        if report is None:
            return
        create_markdown_artifact(key="vsi-wild-report", markdown=report.markdown, description="the build report")
        create_table_artifact(
            key="vsi-wild-report-tasks",
            table=report.per_task,
            description="release questions per task, and what changed since the previous build",
        )
        create_link_artifact(
            key="vsi-wild-report-html",
            link=report.html_link,
            link_text="report.html",
            description="the build report with its plots and question cards",
        )
    except Exception as e:  # noqa: BLE001 - as for the summary: the report is in the data root anyway
        get_run_logger().warning("the report's artifacts were not created: %s", e)
