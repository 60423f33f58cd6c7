"""Sourcing commands: ``vsi-wild crawl`` and ``vsi-wild review export|apply``.

The main CLI mounts them::

    app.command("crawl")(crawl)
    app.add_typer(review_app, name="review")

(``vsi-wild add`` is the main CLI's: it registers local files through ``tasks/sources.py``.)
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from vsi_wild.config import Config, ConfigError, load_config
from vsi_wild.errors import UnitError
from vsi_wild.store import Store

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="YAML config (e.g. configs/crawl-example.yaml); defaults apply without one.",
        dir_okay=False,
    ),
]
DataRootOpt = Annotated[
    str | None,
    typer.Option(
        "--data-root",
        "-d",
        help="where outputs, the registry and decisions live (a folder or s3://...); "
        "default: the config's run.data_root",
    ),
]


def _classed(row: dict) -> str:
    """A failed id's error led by its class, once (the crawl's errors mostly begin with it)."""
    error, kind = row["error"] or "", row["error_class"] or ""
    return error if error.startswith(f"{kind}:") else f"{kind}: {error}"


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.secho(message, err=True, fg=typer.colors.RED)
    return typer.Exit(code)


def _config(config: Path | None, overrides: dict[str, Any] | None = None) -> Config:
    try:
        return load_config(config, overrides)
    except ConfigError as e:
        raise _fail(str(e)) from None


def _open(config: Path | None, data_root: str | None, overrides: dict[str, Any] | None = None) -> tuple[Config, Store]:
    cfg = _config(config, overrides)
    return cfg, Store(data_root or cfg.run.data_root)


# =============================================================================================
# crawl
# =============================================================================================


def crawl(
    config: ConfigOpt = None,
    data_root: DataRootOpt = None,
    from_release: Annotated[
        Path | None,
        typer.Option(
            "--from-release",
            dir_okay=False,
            help="a release QA file (jsonl, video_name = `<id>_<view>.mp4`): download exactly its YouTube ids, "
            "no search, and report which can no longer be had",
        ),
    ] = None,
    ids: Annotated[
        str | None, typer.Option("--ids", help="comma-separated YouTube ids to download (no search)")
    ] = None,
    max_results: Annotated[
        int | None, typer.Option("--max-results", min=1, help="results per query (crawl.search.results_per_query)")
    ] = None,
    max_queries: Annotated[
        int | None, typer.Option("--max-queries", min=1, help="ask at most this many queries (a trial run)")
    ] = None,
    languages: Annotated[
        str | None,
        typer.Option(
            "--languages", help="comma-separated languages of the query table, or '*' (crawl.search.languages)"
        ),
    ] = None,
    cookies: Annotated[
        Path | None,
        typer.Option(
            "--cookies",
            dir_okay=False,
            help="Netscape cookies.txt for gated videos and bot checks (crawl.net.cookies_file)",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the queries (or the ids) that would be used; contact nothing")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="search again and recompute downloads (files the archive lists are reused)")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show yt-dlp's messages")] = False,
) -> None:
    """Find 360° videos on YouTube and download them into the source registry.

    Without --from-release/--ids, every query of the table (a panorama cue
    x a scene category term, per language: configs/queries.yaml) is
    searched with yt-dlp (ytsearchN:); each new result's full info is read
    and filtered (duration, resolution, not live, not a short, 360°
    evidence); the accepted ones are downloaded. The search output
    (candidates.parquet) keeps every rejection with its reason.

    With --from-release FILE, exactly the YouTube ids behind the release's
    view videos are downloaded (no search).

    Re-running is cheap and safe: finished work is not redone; failures
    that cannot succeed (private, removed, geo-blocked, gated) are not
    retried unless --force; network and rate-limit failures are. The
    report (crawl/report.csv under the data root) lists every id with its
    state and, when lost, why. Exit status 1 when anything failed.

    Examples:

      vsi-wild crawl -c configs/crawl-example.yaml --dry-run

      vsi-wild crawl -c configs/crawl-example.yaml --max-queries 4

      vsi-wild crawl --from-release vsi_super_wild_qa.jsonl --cookies c.txt
    """
    from vsi_wild.stages import crawl as sc
    from vsi_wild.tasks import crawl as tc

    overrides: dict[str, Any] = {"crawl.enabled": True}
    if from_release is not None:
        if not from_release.is_file():
            raise _fail(f"--from-release: no such file: {from_release}")
        overrides["crawl.release_file"] = str(from_release.resolve())
    if ids:
        overrides["crawl.ids"] = [i.strip() for i in ids.split(",") if i.strip()]
    if max_results is not None:
        overrides["crawl.search.results_per_query"] = max_results
    if max_queries is not None:
        overrides["crawl.search.max_queries"] = max_queries
    if languages:
        overrides["crawl.search.languages"] = [x.strip() for x in languages.split(",") if x.strip()]
    if cookies is not None:
        overrides["crawl.net.cookies_file"] = str(cookies)
    cfg = _config(config, overrides)
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(message)s")

    try:
        asked = tc.requested_ids(cfg)
        if dry_run:
            if asked is not None:
                typer.echo(f"{len(asked)} YouTube ids would be downloaded:")
                for i in asked:
                    typer.echo(f"  {i}  {sc.watch_url(i)}")
            else:
                queries = sc.queries_for(cfg.crawl.search)
                typer.echo(f"{len(queries)} queries x {cfg.crawl.search.results_per_query} results:")
                for q in queries:
                    typer.echo(f"  [{q.language}] {q.category:<24} {q.text}")
            return
        if asked is None:
            sc.queries_for(cfg.crawl.search)  # a bad query table fails here, before anything runs
    except UnitError as e:
        raise _fail(str(e)) from None

    store = Store(data_root or cfg.run.data_root)  # only now: a dry run creates nothing

    def show(o: Any) -> None:
        mark = {"computed": "ok", "cached": "cached", "failed": "FAILED", "skipped": "skipped"}[o.state]
        line = f"{o.stage:<9} {o.unit:<12} {mark}"
        if o.error:
            line += f"  {o.error[:160]}"
        typer.echo(line)

    summary = tc.run_crawl(cfg, store, force=force, on_outcome=show)
    counts = tc.status_counts(summary.report)
    if summary.report:
        typer.echo("")
        typer.echo(f"{len(summary.report)} ids: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
        lost = [r for r in summary.report if r["state"] == "failed" and r["retryable"] is False]
        retry = [r for r in summary.report if r["state"] == "failed" and r["retryable"] is not False]
        if lost:
            typer.echo(f"can no longer be had ({len(lost)}):")
            for r in lost:
                typer.echo(f"  {r['source_id']}  {_classed(r)[:120]}")
        if retry:
            typer.echo(f"failed, a re-run retries them ({len(retry)}):")
            for r in retry:
                typer.echo(f"  {r['source_id']}  {_classed(r)[:120]}")
        typer.echo(f"report: {summary.report_path}")
    elif not summary.outcomes:
        typer.echo("nothing to do (no queries selected and no ids asked for)")
    if summary.failed:
        raise typer.Exit(1)


# =============================================================================================
# review
# =============================================================================================

review_app = typer.Typer(
    help="The human keep/reject gate between sourcing and projection (export, then apply).",
    no_args_is_help=True,
)


@review_app.command("export")
def review_export(
    config: ConfigOpt = None,
    data_root: DataRootOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            file_okay=False,
            help="folder to write (default: `review/export-<time>/` under the data root)",
        ),
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="also sources already decided or kept automatically")] = False,
) -> None:
    """Write a contact sheet per pending source and a decision file to fill.

    Writes OUT/sheets/<source_id>.jpg (frames across the video) and
    OUT/decisions.csv (source_id, decision, reason, reviewer, suggestion,
    motion_score, origin, title, ...). Fill 'decision' with keep or reject
    (a reject needs a reason; leave it empty to decide later) and
    'reviewer' with your name, then run:

      vsi-wild review apply OUT/decisions.csv

    What to keep (the paper's rule): egocentric, dynamic, handheld walks.
    Reject static cameras, mounted platforms (in-car, on-ship) and low
    quality. 'suggestion' comes from a camera-motion heuristic (median
    optical flow): it only suggests, it never decides.
    """
    from vsi_wild.tasks import review as tr

    cfg, store = _open(config, data_root)
    try:
        res = tr.export_review(cfg, store, out, include_decided=all_)
    except UnitError as e:
        raise _fail(str(e)) from None
    if not res.rows:
        typer.echo("no source waits for review")
    for r in res.rows:
        typer.echo(f"{r['source_id']:<40} {r.get('suggestion') or '':<24} {r.get('contact_sheet') or ''}")
    for p in res.problems:
        typer.secho(f"warning: {p}", err=True, fg=typer.colors.YELLOW)
    typer.echo(f"{len(res.rows)} sources; fill {res.decisions_csv} then run: vsi-wild review apply {res.decisions_csv}")


@review_app.command("apply")
def review_apply(
    file: Annotated[Path, typer.Argument(dir_okay=False, help="the filled decisions.csv")],
    config: ConfigOpt = None,
    data_root: DataRootOpt = None,
    reviewer: Annotated[
        str | None, typer.Option("--reviewer", help="reviewer name for rows that leave the column empty")
    ] = None,
) -> None:
    """Record the decisions of a filled decision file.

    The whole file is checked first: every source id must be registered
    and appear once; decision must be keep, reject or empty (pending); a
    reject needs a reason; every decision needs a reviewer. On a problem
    the error names the line and nothing is recorded.

    Only kept sources flow on to projection; the next run re-runs exactly
    the sources whose decision changed.
    """
    from vsi_wild.stages.review import ReviewError
    from vsi_wild.tasks import review as tr

    _cfg, store = _open(config, data_root)
    try:
        res = tr.apply_decisions(store, file, default_reviewer=reviewer)
    except ReviewError as e:
        raise _fail(f"{e}\nnothing was recorded") from None
    typer.echo(
        f"kept {len(res.kept)}, rejected {len(res.rejected)}, pending {len(res.pending)}"
        + (f", changed {len(res.changed)}: {', '.join(res.changed)}" if res.changed else "")
    )
