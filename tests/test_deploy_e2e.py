"""The pipeline as its users run it: `make deploy` (a real Prefect server on loopback, work pools,
`prefect deploy`, process workers), `prefect deployment run ...`, `make deploy-stop` - the commands of
README.md, "Run on a cluster", run as written, in a copy of the project.

The copy's configs/sample.yaml is the small generated sample (the whole DAG, whatever
tasks/registry.STAGES holds, on 16 s of video) so that two full runs fit in CI's time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from deploy_support import (
    BIN,
    artifact_digests,
    copy_project,
    doc_block,
    free_port,
    kill_all,
    processes_with_env,
    small_sample_yaml,
    status_rows,
)

from vsi_wild import deploy
from vsi_wild.tasks import registry

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

BLOCK = "tests/test_deploy_e2e.py runs this block"


def _sh(cmd: str, cwd: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    """One line of the doc in bash, after `source .deploy/env` once that file exists (the doc's
    second line: a shell keeps it for the lines after)."""
    prefix = "source .deploy/env && " if (cwd / ".deploy" / "env").is_file() and not cmd.startswith("source ") else ""
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; {prefix}{cmd}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _api(url: str, path: str, body: dict | None = None) -> object:
    req = urllib.request.Request(
        f"{url}{path}",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"},
        method="POST" if body is not None else "GET",
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _logs(proj: Path) -> str:
    out = []
    for f in sorted((proj / ".deploy" / "logs").glob("*.log")):
        out.append(f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-25:]))
    return "\n".join(out)


def _check(out: subprocess.CompletedProcess, proj: Path, what: str) -> None:
    assert out.returncode == 0, (
        f"{what} exited {out.returncode}\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}\n{_logs(proj)}"
    )


def test_make_deploy_runs_the_deployments_and_stops_everything(tmp_path):
    lines = doc_block(BLOCK)
    assert lines[0] == "make deploy" and lines[1] == "source .deploy/env" and lines[-1] == "make deploy-stop"
    runs = lines[2:-1]
    dag_run = next(x for x in runs if x.startswith("prefect deployment run build-vsi-wild/sample"))
    stage_run = next(x for x in runs if x.startswith("prefect deployment run stage-"))
    stage = stage_run.split()[3].split("/")[0].removeprefix("stage-")
    assert stage in registry.BY_NAME and stage in CHANGE_ONE_INPUT

    proj = copy_project(tmp_path / "proj")
    # the copy's embedded sample is the small one: the same DAG on less video, within CI's time
    (proj / "configs" / "sample.yaml").write_text(small_sample_yaml())
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API_URL", "VSI_WILD_HOME", "DEPLOY_"))}
    env.update(
        {
            "PATH": f"{BIN}{os.pathsep}{env['PATH']}",
            "VENV": sys.prefix,
            "SETUP": "",  # this interpreter's environment, as it is
            "DEPLOY_PORT": str(port),  # a free port: another server may hold 4200
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "PREFECT_UI_ENABLED": "false",
        }
    )
    home = proj / ".deploy" / "prefect"
    api = f"http://127.0.0.1:{port}/api"
    try:
        out = _sh(lines[0], proj, env)
        _check(out, proj, lines[0])
        assert "prefect deployment run build-vsi-wild/sample --watch" in out.stdout
        assert (proj / ".deploy" / "env").read_text().count(f"PREFECT_API_URL={api}") == 1

        # the tag of GPU stages is limited to the number of GPUs (at least 1)
        limit = _api(api, "/concurrency_limits/tag/gpu")
        assert limit["concurrency_limit"] == max(1, deploy.detect_gpus())
        pools = {p["name"]: p["type"] for p in _api(api, "/work_pools/filter", {})}
        assert pools.get("cpu") == "process" and pools.get("gpu") == "process"
        assert len(_api(api, "/deployments/filter", {})) == len(yaml_deployments(proj))
        # the incremental deployment's cron schedule exists, switched off: nothing is scheduled
        inc = _api(api, "/deployments/name/build-vsi-wild/incremental")
        (sched,) = inc["schedules"]
        assert sched["active"] is False and sched["schedule"]["cron"] == deploy.INCREMENTAL_CRON
        assert not _api(api, "/flow_runs/filter", {"flow_runs": {"deployment_id": {"any_": [inc["id"]]}}})

        # the whole DAG, as a deployment run
        out = _sh(dag_run, proj, env)
        _check(out, proj, dag_run)
        assert "Completed" in out.stdout
        data = proj / "data" / "out"
        deployed = artifact_digests(data)
        assert deployed, "the deployment run produced no artifacts"
        rows = status_rows(data)
        assert not [k for k, r in rows.items() if r["state"] == "failed"]
        assert {s for (s, _), r in rows.items() if r["state"] == "done"} >= {stage}

        # the run's report as its Prefect artifacts: summary, per-task counts, a link to report.html
        sample_dep = _api(api, "/deployments/name/build-vsi-wild/sample")
        run_ids = [
            r["id"]
            for r in _api(api, "/flow_runs/filter", {"flow_runs": {"deployment_id": {"any_": [sample_dep["id"]]}}})
        ]
        arts = {a["key"]: a for a in _api(api, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": run_ids}}})}
        assert {"vsi-wild-report", "vsi-wild-report-tasks", "vsi-wild-report-html"} <= set(arts), sorted(arts)
        assert arts["vsi-wild-report"]["data"].startswith("# VSI-Super-Wild build report")
        assert "report.html" in arts["vsi-wild-report-html"]["data"] and (data / "report.html").is_file()

        # GPU stages' task runs carry the `gpu` tag, the others do not
        task_runs = _api(api, "/task_runs/filter", {"task_runs": {"name": {"like_": ":"}}, "limit": 200})
        for tr in task_runs:
            st = tr["name"].split(":")[0]
            if st in registry.BY_NAME:
                assert ("gpu" in tr["tags"]) == registry.BY_NAME[st].gpu, tr

        # invalid parameters are rejected when the run is created
        bad = _sh("prefect deployment run build-vsi-wild/sample -p only='[\"no-such-stage\"]'", proj, env)
        assert bad.returncode != 0, bad.stdout

        # the same artifacts as `make run`
        ref = tmp_path / "ref"
        out = _sh(f"make run DATA_ROOT={ref}", proj, env)
        _check(out, proj, "make run")
        assert artifact_digests(ref) == deployed
        ref_rows = status_rows(ref)
        for k, r in status_rows(data).items():
            assert (r["state"], r["key"], r["fingerprint"]) == (
                ref_rows[k]["state"],
                ref_rows[k]["key"],
                ref_rows[k]["fingerprint"],
            ), k

        # one stage after one input changed: only the affected unit is recomputed
        before = status_rows(data)
        CHANGE_ONE_INPUT[stage](proj)
        out = _sh(stage_run, proj, env)
        _check(out, proj, stage_run)
        after = status_rows(data)
        changed = {k for k in after if before.get(k) != after[k]}
        assert len(changed) == 1 and next(iter(changed))[0] == stage, changed
        (unit_key,) = changed
        assert after[unit_key]["state"] == "done" and after[unit_key]["key"] != (before.get(unit_key) or {}).get("key")
        summary = _api(api, "/artifacts/latest/filter", {"artifacts": {"key": {"any_": ["vsi-wild-summary"]}}})
        (row,) = summary[0]["data"] if isinstance(summary[0]["data"], list) else json.loads(summary[0]["data"])
        assert row["stage"] == stage and row["computed"] == 1 and row["failed"] == 0

        out = _sh(lines[-1], proj, env)
        _check(out, proj, lines[-1])
    finally:
        if (proj / ".deploy" / "state.json").is_file():
            deploy.Deployment(proj / ".deploy", port=port).down(say=lambda *_: None)
        stray = processes_with_env("PREFECT_HOME", str(home))
        kill_all(stray)
    assert not stray, f"processes left running: {[p.pid for p in stray]}"
    assert not any((proj / ".deploy").glob("env")), "the env file of a stopped deployment remains"


def _fix_one_video(proj: Path) -> None:
    """A reviewer's fix file for one view video of the sample: its first motion clip has no
    meaningful motion (docs/fixes.md). Only that video's metadata unit depends on it."""
    fixes = proj / "data" / "out" / "fixes"
    fixes.mkdir(parents=True, exist_ok=True)
    (fixes / "sample-small_front.yaml").write_text(
        "video_id: sample-small_front\nfixes:\n  - op: motion\n    clip: 0\n    state: none\n"
    )


CHANGE_ONE_INPUT = {"metadata": _fix_one_video}


def yaml_deployments(proj: Path) -> list[dict]:
    import yaml

    return yaml.safe_load((proj / "prefect.yaml").read_text())["deployments"]
