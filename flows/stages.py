"""One Prefect flow per stage: run that stage alone (e.g. after a human fixed metadata).

Each flow reads upstream outputs from the store as they are (it does not re-run upstream stages)
and recomputes only the units whose inputs changed. The flows are written out one by one (not
generated in a loop) so that `prefect deploy` can read their parameters from the source.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from vsi_wild.flows.build import RunRequest, run_request


def _run(stage: str, config: str, data_root: str | None, videos: list[str] | None, force: bool,
         overrides: dict[str, Any] | None) -> Any:
    return run_request(RunRequest(config=config, data_root=data_root, only=[stage], videos=videos, force=force,
                                  overrides=overrides or {}))


@flow(name="stage-sample", description="Render the embedded sample and register it as a source.")
def sample_flow(config: str = "configs/sample.yaml", data_root: str | None = None, videos: list[str] | None = None,
                force: bool = False, overrides: dict[str, Any] | None = None) -> Any:
    return _run("sample", config, data_root, videos, force, overrides)


@flow(name="stage-probe", description="Measure and validate every registered source.")
def probe_flow(config: str = "configs/sample.yaml", data_root: str | None = None, videos: list[str] | None = None,
               force: bool = False, overrides: dict[str, Any] | None = None) -> Any:
    return _run("probe", config, data_root, videos, force, overrides)


FLOWS = {"sample": sample_flow, "probe": probe_flow}
