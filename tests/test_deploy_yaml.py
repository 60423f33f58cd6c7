"""prefect.yaml, the flows and the docs agree with the stage registry (fast: no server)."""

from __future__ import annotations

import re

import pytest
import yaml
from deploy_support import DOC, REPO, doc_block
from pydantic import ValidationError

from vsi_wild import deploy
from vsi_wild.flows import stages as stage_flows
from vsi_wild.flows.build import RunRequest, build_vsi_wild
from vsi_wild.tasks import registry


def _committed() -> dict:
    return yaml.safe_load((REPO / "prefect.yaml").read_text())


def _flow_name(entrypoint: str) -> str:
    from prefect.flows import load_flow_from_entrypoint

    return load_flow_from_entrypoint(entrypoint).name


def test_committed_prefect_yaml_is_current():
    assert (REPO / "prefect.yaml").read_text() == deploy.render_prefect_yaml(), (
        "prefect.yaml is stale: run `python -m vsi_wild.deploy yaml`"
    )


def test_every_stage_has_a_flow_and_deployments():
    names = {(_flow_name(d["entrypoint"]), d["name"]): d for d in _committed()["deployments"]}
    for st in registry.STAGES:
        fn = stage_flows.FLOWS.get(st.name)
        assert fn is not None, f"flows/stages.py has no flow for stage {st.name}"
        assert fn.name == f"stage-{st.name}"
        for dep in ("sample", "default"):
            d = names.get((f"stage-{st.name}", dep))
            assert d is not None, f"prefect.yaml has no deployment stage-{st.name}/{dep}"
            # the stage flow runs exactly that stage
            assert fn.fn.__code__.co_consts and st.name in fn.fn.__code__.co_consts
        assert names[(f"stage-{st.name}", "default")]["work_pool"]["name"] == ("gpu" if st.gpu else "cpu")
        assert names[(f"stage-{st.name}", "sample")]["work_pool"]["name"] == "cpu"
    assert set(stage_flows.FLOWS) == {s.name for s in registry.STAGES}, "a flow for a stage that is not in the registry"
    for dep in ("sample", "default", "incremental"):
        assert ("build-vsi-wild", dep) in names


def test_deployments_are_well_formed():
    doc = _committed()
    assert doc["pull"] == [{"prefect.deployments.steps.set_working_directory": {"directory": "{{ $VSI_WILD_HOME }}"}}]
    for d in doc["deployments"]:
        assert d["work_pool"]["name"] in deploy.POOLS
        assert d["enforce_parameter_schema"] is True
        assert d["description"] and "vsi-wild" in d["tags"]
        assert (REPO / d["parameters"]["config"]).is_file(), d["parameters"]["config"]
        if d["parameters"]["config"].endswith("default.yaml"):
            assert "production" in d["tags"]
    inc = [d for d in doc["deployments"] if d["name"] == "incremental"]
    assert len(inc) == 1
    (sched,) = inc[0]["schedules"]
    assert sched["active"] is False
    # a valid cron expression (five fields) that Prefect accepts
    from prefect.client.schemas.schedules import CronSchedule

    CronSchedule(cron=sched["cron"], timezone=sched["timezone"])
    assert len(sched["cron"].split()) == 5
    assert all(not d["schedules"] for d in doc["deployments"] if d is not inc[0])


def test_published_parameter_schema_is_typed():
    """A deployment publishes the flow's parameter schema; a type Prefect cannot resolve silently
    becomes "anything" (what a `-> X | Failed` return annotation once did to every parameter)."""
    from prefect.utilities.callables import parameter_schema

    names = sorted(s.name for s in registry.STAGES)
    props = parameter_schema(build_vsi_wild).model_dump()["properties"]
    only = props["only"]["anyOf"][0]
    assert only["type"] == "array" and sorted(only["items"]["enum"]) == names
    assert sorted(props["from_stage"]["anyOf"][0]["enum"]) == names
    assert props["force"]["type"] == "boolean"
    assert props["overrides"]["anyOf"][0]["type"] == "object"
    assert all(p.get("description") for p in props.values())
    for fn in stage_flows.FLOWS.values():
        sp = parameter_schema(fn).model_dump()["properties"]
        assert set(sp) == {"config", "data_root", "videos", "force", "overrides"}
        assert sp["videos"]["anyOf"][0]["items"]["type"] == "string"
        assert all(p.get("description") for p in sp.values())


def test_run_request_rejects_unknown_stages():
    with pytest.raises(ValidationError):
        RunRequest(only=["no-such-stage"])
    with pytest.raises(ValidationError):
        RunRequest(from_stage="no-such-stage")
    assert RunRequest(only=[registry.STAGES[-1].name]).only == [registry.STAGES[-1].name]


def test_docs_and_makefile_name_the_same_commands():
    block = doc_block("tests/test_deploy_e2e.py runs this block")
    assert block[0] == "make deploy" and block[-1] == "make deploy-stop"
    assert "prefect deployment run build-vsi-wild/sample --watch" in block
    make = (REPO / "Makefile").read_text()
    assert re.search(r"^deploy:.*\n\t\$\(BIN\)/python -m vsi_wild\.deploy up", make, re.M)
    assert re.search(r"^deploy-stop:.*\n\t\$\(BIN\)/python -m vsi_wild\.deploy down", make, re.M)
    # every deployment the doc runs exists
    names = {f"{_flow_name(d['entrypoint'])}/{d['name']}" for d in _committed()["deployments"]}
    for line in block:
        m = re.match(r"prefect deployment run (\S+)", line)
        if m:
            assert m.group(1) in names
    assert "PREFECT_API_DATABASE_CONNECTION_URL" in DOC.read_text()


def test_gpu_count_from_environment(monkeypatch):
    monkeypatch.setenv("DEPLOY_GPUS", "3")
    assert deploy.detect_gpus() == 3
    monkeypatch.delenv("DEPLOY_GPUS")
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: no GPU
    assert deploy.detect_gpus() == 0
