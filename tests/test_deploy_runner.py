"""The task runner a run uses comes from the config's `run` section (fast: nothing is started)."""

from __future__ import annotations

import pytest
from prefect.task_runners import ThreadPoolTaskRunner
from prefect_dask import DaskTaskRunner

from vsi_wild.config import ConfigError, load_config
from vsi_wild.flows.build import task_runner


def test_thread_pool_is_bounded_by_run_workers():
    r = task_runner(load_config(None, {"run.workers": 3}))
    assert isinstance(r, ThreadPoolTaskRunner) and r._max_workers == 3


def test_dask_address_uses_that_scheduler():
    r = task_runner(load_config(None, {"run.task_runner": "dask", "run.dask_address": "tcp://10.0.0.5:8786"}))
    assert isinstance(r, DaskTaskRunner) and r.address == "tcp://10.0.0.5:8786"


def test_dask_without_address_starts_a_local_cluster_of_run_workers_processes():
    r = task_runner(load_config(None, {"run.task_runner": "dask", "run.workers": 3}))
    assert r.address is None
    assert r.cluster_class == "distributed.LocalCluster"  # resolved by prefect-dask when the run starts
    assert r.cluster_kwargs == {"n_workers": 3, "threads_per_worker": 1, "processes": True}


def test_dask_cluster_settings_pass_through():
    r = task_runner(
        load_config(
            None,
            {
                "run.task_runner": "dask",
                "run.dask_cluster_kwargs": {"n_workers": 1},
                "run.dask_adapt_kwargs": {"minimum": 1, "maximum": 4},
            },
        )
    )
    assert r.cluster_kwargs == {"n_workers": 1} and r.adapt_kwargs == {"minimum": 1, "maximum": 4}


def test_missing_cluster_package_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"run\.dask_cluster_class.*no_such_jobqueue"):
        task_runner(
            load_config(None, {"run.task_runner": "dask", "run.dask_cluster_class": "no_such_jobqueue.SLURMCluster"})
        )


def test_unknown_runner_is_rejected():
    with pytest.raises(ConfigError, match="run.task_runner"):
        load_config(None, {"run.task_runner": "ray"})
