"""The DAG: every stage that exists, in dependency order.

A stage is listed here only once it is really built; nothing is faked to fill the DAG.
"""

from __future__ import annotations

from vsi_wild.tasks.crawl import DOWNLOAD, SEARCH
from vsi_wild.tasks.engine import Stage, register_stages
from vsi_wild.tasks.export import EXPORT
from vsi_wild.tasks.metadata import STAGES as METADATA_STAGES
from vsi_wild.tasks.probe import PROBE
from vsi_wild.tasks.project import PROJECT
from vsi_wild.tasks.qa import QA
from vsi_wild.tasks.report import REPORT
from vsi_wild.tasks.review import REVIEW
from vsi_wild.tasks.sample import SAMPLE

STAGES: list[Stage] = [SAMPLE, SEARCH, DOWNLOAD, PROBE, REVIEW, PROJECT, *METADATA_STAGES, QA, EXPORT, REPORT]
BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}
register_stages(STAGES)


def stage(name: str) -> Stage:
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown stage {name!r}; stages: {', '.join(BY_NAME)}") from None


def select(only: list[str] | None = None, from_stage: str | None = None) -> list[Stage]:
    """The stages a run executes, in DAG order: all, or ``--only`` these, or ``--from`` one on."""
    if only and from_stage:
        raise ValueError("give --only or --from, not both")
    if only:
        names = {stage(n).name for n in only}
        return [s for s in STAGES if s.name in names]
    if from_stage:
        i = STAGES.index(stage(from_stage))
        return STAGES[i:]
    return list(STAGES)
