"""``vsi-wild weights list|check|fetch``: the model weights a config needs, where each comes from,
whether the ones on disk are usable, and downloading those that are not.

The main CLI mounts ``weights_app``. ``check`` runs the same check as a pipeline run's
requirement check (``backend_problems``); ``fetch`` is the only place anything is downloaded.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from vsi_wild.cli_sources import ConfigOpt, _config, _fail

weights_app = typer.Typer(
    help="Model weights: list where they come from, check them, fetch them.", no_args_is_help=True
)

OnlyOpt = Annotated[
    list[str] | None,
    typer.Option("--only", help="Only this config key, e.g. models.sam3_checkpoint or sam3_checkpoint (repeatable)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON object per weight.")]


def _needed(cfg, only):
    from vsi_wild.weights import FetchError, needed_weights

    try:
        return needed_weights(cfg, only)
    except (FetchError, ValueError) as e:
        raise _fail(f"error: {e}") from None


def _size(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e6:,.1f} MB"


@weights_app.command("list")
def list_weights(config: ConfigOpt = None, only: OnlyOpt = None, as_json: JsonOpt = False) -> None:
    """Every weight file the config's backends need: config key, path, where it comes from, size,
    sha256 (where published), license, and whether access is gated."""
    for w in _needed(_config(config), only):
        row = w.row()
        if as_json:
            typer.echo(json.dumps(row))
            continue
        typer.echo(f"{row['key']}  ({', '.join(row['backends'])})")
        typer.echo(f"  path     {row['path']}  [{row['state']}]")
        typer.echo(f"  source   {row['origin'] or 'none declared'}")
        typer.echo(f"  size     {_size(row['size'])}   sha256 {row['sha256'] or row['checksum_note'] or '?'}")
        typer.echo(
            f"  license  {row['license'] or '?'}"
            + ("   GATED: needs an accepted license and HF_TOKEN" if row["gated"] else "")
        )


@weights_app.command("check")
def check(config: ConfigOpt = None, only: OnlyOpt = None, as_json: JsonOpt = False) -> None:
    """Present / missing / wrong checksum for each weight; exit 1 when any is not usable."""
    from vsi_wild.stages.backends.weights import problem_text

    needed = _needed(_config(config), only)
    for w in needed:
        if as_json:
            typer.echo(json.dumps({k: v for k, v in w.row().items() if k in ("key", "path", "state", "detail")}))
        else:
            line = f"{w.status.state:>14}  {w.key}  {w.status.path}"
            typer.echo(line if w.status.usable else f"{line}\n                {problem_text(w.status)}")
    bad = [w for w in needed if not w.status.usable]
    if bad:
        if not as_json:
            typer.echo(
                f"{len(bad)} of {len(needed)} weights not usable: `vsi-wild weights fetch` downloads them", err=True
            )
        raise typer.Exit(1)


@weights_app.command("fetch")
def fetch(config: ConfigOpt = None, only: OnlyOpt = None) -> None:
    """Download what is missing or wrong (Hugging Face with HF_TOKEN, or the release URL),
    resumable, checked against its sha256, into models.weights_dir."""
    from vsi_wild.weights import FetchError
    from vsi_wild.weights import fetch as fetch_one

    cfg = _config(config)
    failed = []
    for w in _needed(cfg, only):
        if w.status.usable:
            typer.echo(f"present  {w.key}  {w.status.path}")
            continue
        try:
            done = fetch_one(w, cfg.models.resolved_weights_dir(), progress=lambda m: typer.echo(m, err=True))
        except FetchError as e:
            typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
            failed.append(w.key)
            continue
        typer.echo(f"fetched  {w.key}  {done.path}")
    if failed:
        raise typer.Exit(1)
