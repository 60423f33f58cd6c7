"""The Prefect flow `build-vsi-wild`: the whole DAG, stage by stage, unit by unit.

One Prefect task run per (stage, unit) that must be computed; cached and skipped units are
answered in the flow without a task (they cost a file lookup, not a task run). Stages run in DAG
order; within a stage, units run concurrently on the task runner the config names (a thread pool
here, a Dask cluster past one machine). The flow ends Failed when any unit failed, after every
other unit has had its turn.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.states import Failed
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, Field

from vsi_wild.config import Config, load_config
from vsi_wild.store import Store, UnitRef
from vsi_wild.tasks import engine, registry
from vsi_wild.tasks.engine import Outcome, Prepared, Selection


class RunRequest(BaseModel):
    """What to run: the flow's parameters, validated (a deployment publishes this schema)."""

    config: str = Field("configs/sample.yaml", description="YAML config file (relative to the working directory)")
    data_root: str | None = Field(None, description="overrides run.data_root (a folder or an fsspec URL)")
    only: list[str] | None = Field(None, description="run only these stages")
    from_stage: str | None = Field(None, description="run this stage and every stage after it")
    videos: list[str] | None = Field(None, description="restrict to these source or video ids")
    force: bool = Field(False, description="recompute the selected stages even when cached")
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted config keys -> values")


class PipelineFailed(RuntimeError):
    def __init__(self, summary: dict[str, Any]):
        failed = summary["failed"]
        super().__init__(f"{len(failed)} unit(s) failed: " + "; ".join(f"{f['stage']}:{f['unit']}: {f['error']}" for f in failed[:5]))
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
def run_unit(spec_json: str, stage_name: str, unit: str, key: str, inputs: dict[str, dict[str, tuple[str, str, str]]]) -> dict[str, Any]:
    config, store = _worker_context(spec_json)
    refs = {name: {u: UnitRef(*r) for u, r in units.items()} for name, units in inputs.items()}
    outcome = engine.execute(registry.stage(stage_name), Prepared(stage_name, unit, key, refs), config, store)
    return outcome.to_dict()


def task_runner(config: Config) -> Any:
    if config.run.task_runner == "dask":
        from prefect_dask import DaskTaskRunner

        if config.run.dask_address:
            return DaskTaskRunner(address=config.run.dask_address)
        return DaskTaskRunner(cluster_kwargs=config.run.dask_cluster_kwargs or {"n_workers": config.run.workers, "threads_per_worker": 1, "processes": True})
    return ThreadPoolTaskRunner(max_workers=config.run.workers)


def execute_plan(request: RunRequest) -> dict[str, Any]:
    """Run the selected stages (inside a flow, so that `run_unit` submissions are Prefect tasks)."""
    logger = get_run_logger()
    config = load_config(request.config, request.overrides)
    data_root = request.data_root or config.run.data_root
    store = Store(data_root)
    store.clean_scratch()
    stages = registry.select(request.only, request.from_stage)
    forced = frozenset(s.name for s in stages) if request.force else frozenset()
    plan = engine.Plan.load(config, store, registry.STAGES, selection=Selection(frozenset(request.videos or ())), force=forced)
    spec_json = WorkerSpec(config=config.model_dump(mode="json"), data_root=data_root).model_dump_json()

    def submit(stage: engine.Stage, prepared: Prepared):
        inputs = {n: {u: (r.stage, r.unit, r.key) for u, r in us.items()} for n, us in prepared.inputs.items()}
        t = run_unit.with_options(tags=["gpu"] if stage.gpu else [])
        future = t.submit(spec_json, stage.name, prepared.unit, prepared.key, inputs)
        return lambda: Outcome(**future.result())

    engine.run_stages(plan, stages, submit)
    summary = engine.summarize(plan, data_root)
    for s in summary["stages"]:
        logger.info("stage %(stage)s: %(computed)d computed, %(cached)d cached, %(skipped)d skipped, %(failed)d failed", s)
    return summary


@flow(name="build-vsi-wild", description="Build VSI-Super-Wild: the whole DAG (or the selected stages) on the configured sources.")
def build_vsi_wild(
    config: str = "configs/sample.yaml",
    data_root: str | None = None,
    only: list[str] | None = None,
    from_stage: str | None = None,
    videos: list[str] | None = None,
    force: bool = False,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any] | Failed:
    return run_request(RunRequest(config=config, data_root=data_root, only=only, from_stage=from_stage,
                                  videos=videos, force=force, overrides=overrides or {}))


def run_request(request: RunRequest) -> dict[str, Any] | Failed:
    """The body of every flow: run the request's stages on the configured task runner."""
    cfg = load_config(request.config, request.overrides)
    summary = _dag.with_options(task_runner=task_runner(cfg))(request.model_dump_json())
    _publish_summary(summary)
    if summary["failed"]:
        # A Failed final state (not an exception): the run did what it could; the summary says what
        # failed, without a traceback in the log.
        return Failed(message=str(PipelineFailed(summary)), data=summary)
    return summary


@flow(name="vsi-wild-dag", description="The stages of one build-vsi-wild run, on the configured task runner.")
def _dag(request_json: str) -> dict[str, Any]:
    return execute_plan(RunRequest.model_validate_json(request_json))


def _publish_summary(summary: dict[str, Any]) -> None:
    try:
        from prefect.artifacts import create_table_artifact

        create_table_artifact(key="vsi-wild-summary", table=summary["stages"], description=json.dumps(
            {"data_root": summary["data_root"], "failed": len(summary["failed"])}))
    except Exception:  # the summary is also returned; an artifact API hiccup must not fail the run
        pass
