"""Fan-out on a Dask `distributed` cluster (a scheduler and 2 single-threaded workers on loopback,
started with the commands of README.md, "Run on a cluster") gives byte-identical artifacts to a sequential run."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
import uuid

import pytest
from deploy_support import (
    BIN,
    artifact_digests,
    doc_block,
    free_port,
    kill_all,
    processes_with_env,
    small_sample_yaml,
    status_rows,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

BLOCK = "tests/test_deploy_dask.py runs these lines"


def _run(cmd: list[str], cwd, env, timeout=900) -> subprocess.CompletedProcess:
    out = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    assert out.returncode == 0, f"{shlex.join(cmd)} exited {out.returncode}\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return out


def test_dask_cluster_gives_the_sequential_artifacts(tmp_path):
    scheduler_line, worker_line, run_line = doc_block(BLOCK)
    port = free_port()  # instead of the doc's 8786, which another program may hold
    scheduler_line, worker_line, run_line = (
        x.replace("8786", str(port)) for x in (scheduler_line, worker_line, run_line)
    )
    assert scheduler_line.endswith(" &") and worker_line.endswith(" &")

    work = tmp_path / "work"
    (work / "configs").mkdir(parents=True)
    # the doc's command names configs/sample.yaml: here, the small sample (the same stages, less video)
    (work / "configs" / "sample.yaml").write_text(small_sample_yaml())
    marker = uuid.uuid4().hex
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "VSI_WILD_TEST_DASK": marker}

    # the sequential reference: one unit at a time on the thread runner
    ref = tmp_path / "sequential"
    _run(
        ["vsi-wild", "run", "--config", "configs/sample.yaml", "--data-root", str(ref), "--set", "run.workers=1"],
        work,
        env,
    )

    procs = []
    client = None
    try:
        for line in (scheduler_line, worker_line):
            with open(tmp_path / f"{line.split()[1]}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        shlex.split(line.removesuffix("&").strip()),
                        cwd=work,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        from distributed import Client

        address = f"tcp://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while client is None:
            try:
                client = Client(address, timeout=10)
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        client.wait_for_workers(2, timeout=180)
        assert len(client.scheduler_info()["workers"]) == 2
        assert all(w["nthreads"] == 1 for w in client.scheduler_info()["workers"].values())

        _run(shlex.split(run_line), work, env)

        fanned = artifact_digests(work / "data" / "out")
        assert fanned, "the Dask run produced no artifacts"
        assert fanned == artifact_digests(ref)
        rows, ref_rows = status_rows(work / "data" / "out"), status_rows(ref)
        assert rows.keys() == ref_rows.keys()
        for k, r in rows.items():
            assert (r["state"], r["key"], r["fingerprint"]) == (
                ref_rows[k]["state"],
                ref_rows[k]["key"],
                ref_rows[k]["fingerprint"],
            ), k
        # the units ran on the cluster's workers, not in the flow's process: one Dask task per
        # unit, or per group of units where a stage groups them (a source's views, a video's clips)
        executed = client.run(lambda dask_worker: dask_worker.state.executed_count)
        tasks = submitted_tasks([k for k, r in rows.items() if r["state"] == "done"])
        assert sum(executed.values()) >= tasks > 0, (executed, tasks)
    finally:
        if client is not None:
            client.close()
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        deadline = time.monotonic() + 30
        while processes_with_env("VSI_WILD_TEST_DASK", marker) and time.monotonic() < deadline:
            time.sleep(0.5)
        stray = processes_with_env("VSI_WILD_TEST_DASK", marker)
        kill_all(stray)
    assert not stray, f"processes left running: {[p.pid for p in stray]}"


def submitted_tasks(done: list[tuple[str, str]]) -> int:
    """How many tasks the flow submits for these computed (stage, unit)s: one per unit, or one per
    ancestor of the stage's ``group`` kind (``engine.unit_groups``)."""
    from vsi_wild.tasks.engine import ALL, unit_ancestor
    from vsi_wild.tasks.registry import BY_NAME

    tasks = set()
    for name, unit in done:
        stage = BY_NAME[name]
        if stage.group is None or stage.unit_kind == ALL:
            tasks.add((name, unit))
        else:
            tasks.add((name, unit_ancestor(unit, stage.unit_kind, stage.group)))
    return len(tasks)
