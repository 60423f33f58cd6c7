"""``vsi-wild report``: regenerate a data root's build report without running any other stage.

The main CLI mounts it (``app.command("report")(report)``). Without ``--compare`` it runs the
report stage through the engine, as ``vsi-wild run --only report`` would (cached when nothing it
reads changed) and publishes report.md and report.html; with ``--compare OTHER_ROOT`` it writes
report_compare.html / .md beside them: this root's current build against the other root's.
"""

from __future__ import annotations

from typing import Annotated

import typer

from vsi_wild.cli_sources import ConfigOpt, DataRootOpt, _fail, _open

CompareOpt = Annotated[
    str | None,
    typer.Option("--compare", help="Another data root: report what changed from its current build to this one's."),
]


def report(config: ConfigOpt = None, data_root: DataRootOpt = None, compare: CompareOpt = None) -> None:
    """Regenerate the build report (report.md, report.html) of a data root from its current
    outputs, without running any other stage; or compare it with another data root's build."""
    from vsi_wild.errors import UnitError
    from vsi_wild.store import Store
    from vsi_wild.tasks import engine, registry
    from vsi_wild.tasks.report import REPORT, REPORT_HTML, compare_with

    cfg, store = _open(config, data_root)
    if compare:
        try:
            html_path, md_path = compare_with(cfg, store, Store(compare))
        except UnitError as e:
            raise _fail(f"error: {e}", 1) from None
        typer.echo(f"compared with {compare}: {html_path} ({md_path})")
        return
    plan = engine.Plan.load(cfg, store, registry.STAGES)
    engine.run_stages(plan, [REPORT], engine.run_inline(plan))
    outcome = plan.outcomes.get(REPORT.name, {}).get(engine.ALL)
    if outcome is None or outcome.state not in ("computed", "cached"):
        why = outcome.error if outcome is not None else plan.no_units.get(REPORT.name, "no unit")
        raise _fail(f"report {outcome.state if outcome else 'not made'}: {why}", 1)
    typer.echo(f"report {outcome.state}: {store.path(REPORT_HTML)}")
