"""Verification commands: ``vsi-wild verify`` (the browser app) and ``vsi-wild fixes check``.

The main CLI mounts them::

    app.command("verify")(verify)
    app.add_typer(fixes_app, name="fixes")
"""

from __future__ import annotations

import secrets
import socket
from pathlib import Path
from typing import Annotated

import typer

CONFIG_HELP = "YAML config file (see configs/)."
DATA_ROOT_HELP = "Data root (a local folder); default: the config's run.data_root."

fixes_app = typer.Typer(help="Human fix files of the metadata (docs/fixes.md).", no_args_is_help=True)


def _review(config: Path, data_root: str | None):
    from vsi_wild.config import ConfigError, load_config
    from vsi_wild.store import Store
    from vsi_wild.verify.review import Review

    try:
        cfg = load_config(config)
    except ConfigError as e:
        typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    root = data_root or cfg.run.data_root
    if "://" not in root and not Path(root).is_dir():  # before Store(), which would make it
        typer.secho(
            f"error: no data root at {root}: `vsi-wild run` makes one (give its folder with --data-root)",
            err=True,
            fg=typer.colors.RED,
        )
        raise typer.Exit(2)
    store = Store(root)
    if not store.is_local:
        typer.secho(
            f"error: the verification app needs a local data root, not {store.url}", err=True, fg=typer.colors.RED
        )
        raise typer.Exit(2)
    return cfg, store, Review(cfg, store)


def verify(
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP)] = Path("configs/sample.yaml"),
    data_root: Annotated[str | None, typer.Option("--data-root", help=DATA_ROOT_HELP)] = None,
    host: Annotated[
        str, typer.Option("--host", help="Address to bind; anything but loopback needs a token.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port")] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            "--token", help="The session token (default: generated and printed when binding beyond loopback)."
        ),
    ] = None,
    reviewer: Annotated[
        str | None,
        typer.Option(
            "--reviewer",
            help="The name fixes are recorded under when a page "
            "names none (default: your login name); each page can set its own.",
        ),
    ] = None,
) -> None:
    """Serve the verification app: people check and correct each video's metadata and questions
    in a browser; it writes the fix files the pipeline consumes (docs/verify.md)."""
    import uvicorn

    from vsi_wild.verify.server import LOOPBACK, create_app

    cfg, store, _ = _review(config, data_root)
    require = host not in LOOPBACK or token is not None
    token = token or secrets.token_urlsafe(24)
    try:
        app = create_app(cfg, store, token=token, require_token=require, reviewer=reviewer)
    except ValueError as e:  # a reviewer name a draft file cannot be named after
        typer.secho(f"error: --reviewer: {e}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    shown = socket.gethostname() if host in ("0.0.0.0", "::") else f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if require else "")
    typer.echo(f"vsi-wild verify: {store.url}\n  open {url}")
    uvicorn.run(app, host=host, port=port, log_level="warning")


@fixes_app.command("check")
def check(
    videos: Annotated[
        list[str] | None, typer.Argument(help="Video ids (default: every video with a fix file).")
    ] = None,
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP)] = Path("configs/sample.yaml"),
    data_root: Annotated[str | None, typer.Option("--data-root", help=DATA_ROOT_HELP)] = None,
) -> None:
    """Validate fix files without running anything: each is applied (dry run) to its video's
    automatic metadata by the metadata stage's own code. Exits 1 if any has a problem."""
    from vsi_wild.stages.fixes import FixError
    from vsi_wild.verify.catalog import NotFound, NotReady
    from vsi_wild.verify.review import video_ids_for

    _, _, review = _review(config, data_root)
    try:
        chosen = video_ids_for(review, videos)
    except NotFound as e:
        typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    if not chosen:
        typer.echo(f"no fix files under {review.fixes_dir()}")
        return
    bad = 0
    for vid in chosen:
        path = review.fix_path(vid)
        if not path.is_file():
            typer.echo(f"{vid}: no fix file ({path})")
            continue
        try:
            derived = review.dry_run(vid, path.read_text(encoding="utf-8"))
        except FixError as e:
            bad += 1
            typer.secho(f"{vid}: {e}", fg=typer.colors.RED)
        except NotReady as e:
            bad += 1
            typer.secho(f"{vid}: {e}", fg=typer.colors.YELLOW)
        else:
            typer.echo(f"{vid}: ok ({len(derived.applied)} fixes)")
    raise typer.Exit(1 if bad else 0)


@fixes_app.command("agreement")
def agreement(
    videos: Annotated[
        list[str] | None, typer.Argument(help="Video ids (default: every video with a fix file).")
    ] = None,
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP)] = Path("configs/sample.yaml"),
    data_root: Annotated[str | None, typer.Option("--data-root", help=DATA_ROOT_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
) -> None:
    """How consistently reviewers decided the same items: review pairs (merge or apart), VMR
    directions (the answer sector, or none) and question verdicts, from the fixes each recorded
    (a second reviewer reviews blind in the queue: /queue?second=1). Percent agreement and Cohen's
    kappa per pair of reviewers, then every disagreement."""
    import json

    from vsi_wild.verify import agreement as ag
    from vsi_wild.verify import fixfile, progress
    from vsi_wild.verify.catalog import NotFound, NotReady
    from vsi_wild.verify.review import video_ids_for

    _, store, review = _review(config, data_root)
    try:
        chosen = video_ids_for(review, videos)
    except NotFound as e:
        typer.secho(f"error: {e}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    per_video = []
    for vid in chosen:
        data, _ = fixfile.read(review.fix_path(vid))
        fixes = fixfile.fixes_of(data)
        marks = progress.read(store, vid)
        verified_by: dict[int, list[str]] = {}
        for c in marks.clips_verified:
            if marks.by.get(f"clip:{c}"):
                verified_by[c] = [marks.by[f"clip:{c}"]]
        try:
            automatic = {
                m["clip_index"]: "none" if m["angle_deg"] is None else ag.sector(m["angle_deg"])
                for m in review.auto_inputs(vid).motion
            }
        except NotReady:
            automatic = {}
        per_video.append(ag.decisions(vid, fixes, verified_by, automatic))
    report = ag.compare(per_video)
    report["videos"] = chosen
    if as_json:
        typer.echo(json.dumps(report))
    else:
        typer.echo("\n".join(ag.lines(report)))


@fixes_app.command("export-cvat")
def export_cvat(
    video: Annotated[str, typer.Argument(help="The view video (e.g. sample-walk_front).")],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="File to write (default: `<video>.xml`, or `<video>.json` with --format coco)."
        ),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="cvat: CVAT for video 1.1 XML (tracks with boxes and masks); "
            "coco: YouTube-VIS JSON with COCO RLE masks.",
        ),
    ] = "cvat",
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP)] = Path("configs/sample.yaml"),
    data_root: Annotated[str | None, typer.Option("--data-root", help=DATA_ROOT_HELP)] = None,
) -> None:
    """Write a video's metadata (its current instances, as tracks with boxes and masks) in the
    format annotation tools read: CVAT for video 1.1, or COCO-RLE / YouTube-VIS. Edit it in CVAT
    and bring the corrections back with `vsi-wild fixes import-cvat`."""
    from vsi_wild.verify import exchange
    from vsi_wild.verify.catalog import NotFound, NotReady
    from vsi_wild.verify.masks import MaskServer

    if fmt not in ("cvat", "coco"):
        typer.secho(f"error: --format {fmt!r}: cvat or coco", err=True, fg=typer.colors.RED)
        raise typer.Exit(2)
    _, _, review = _review(config, data_root)
    try:
        vid = review.catalog.video(video)["video_id"]
        make = exchange.export_cvat if fmt == "cvat" else exchange.export_ytvis
        data, stats = make(review, MaskServer(review.catalog), vid)
    except (NotFound, NotReady) as e:
        typer.secho(f"error: {review.relative(str(e))}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    out = output or Path(f"{vid}.{'xml' if fmt == 'cvat' else 'json'}")
    out.write_bytes(data)
    typer.echo(
        f"{out}: {vid} as {'CVAT for video 1.1' if fmt == 'cvat' else 'YouTube-VIS (COCO RLE)'}: "
        + ", ".join(f"{v} {k}" for k, v in stats.items())
    )


@fixes_app.command("import-cvat")
def import_cvat(
    file: Annotated[
        Path, typer.Argument(help="A CVAT for video 1.1 XML file exported by export-cvat and edited in CVAT.")
    ],
    video: Annotated[str | None, typer.Option("--video", help="The video (default: the file's task name).")] = None,
    reviewer: Annotated[
        str | None, typer.Option("--reviewer", help="Recorded as who made the fixes (default: your login name).")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the fix ops, save nothing.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the fix ops (and what did not apply) as JSON.")
    ] = False,
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP)] = Path("configs/sample.yaml"),
    data_root: Annotated[str | None, typer.Option("--data-root", help=DATA_ROOT_HELP)] = None,
) -> None:
    """Turn a CVAT job's corrections into fix ops (relabel -> rename_concept, moved boxes ->
    set_box, merged tracks -> merge, split tracks -> split_at, deleted tracks -> remove_instance,
    new tracks -> add_instance) and save them to the video's fix file through the same validation
    as the app's saves (rebased; an op the pipeline refuses is printed with its reason and not
    saved; exit 1 then)."""
    import json

    from vsi_wild.verify import exchange
    from vsi_wild.verify.catalog import NotFound, NotReady
    from vsi_wild.verify.server import default_reviewer_name

    _, _, review = _review(config, data_root)
    try:
        vid, ops = exchange.import_cvat(review, file, video)
    except (exchange.ExchangeError, NotFound, NotReady) as e:
        typer.secho(f"error: {review.relative(str(e))}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None
    if dry_run:
        typer.echo(
            json.dumps({"video_id": vid, "fixes": ops})
            if as_json
            else "\n".join(
                [f"{vid}: {len(ops)} fix ops (dry run, nothing saved)"] + [f"  {json.dumps(o)}" for o in ops]
            )
        )
        return
    who = reviewer or default_reviewer_name()
    res = review.save(vid, who, [{"kind": "add", "fix": o} for o in ops])
    failed = [{"fix": f["edit"]["fix"], "error": f["error"]["error"]} for f in res["failed"]]
    if as_json:
        typer.echo(json.dumps({"video_id": vid, "fixes": ops, "failed": failed, "file": res["path"]}))
    else:
        typer.echo(f"{vid}: {len(ops) - len(failed)} of {len(ops)} fix ops saved to {res['path']} (by {who})")
        for f in failed:
            typer.secho(f"  not saved: {json.dumps(f['fix'])}: {f['error']}", fg=typer.colors.RED)
    raise typer.Exit(1 if failed else 0)


def verification_lines(config, store) -> list[str]:
    """`vsi-wild status`'s verification section: one line per video a reviewer has marked
    (nothing when nobody has used `vsi-wild verify` on this root)."""
    from vsi_wild.verify import progress

    if not progress.recorded(store):
        return []
    from vsi_wild.verify.review import Review

    videos = {v["video_id"]: v for v in Review(config, store).videos()}
    lines = progress.status_lines(
        store, {v: r["clips"] for v, r in videos.items()}, {v: r["questions"] for v, r in videos.items()}
    )
    return ["verification (vsi-wild verify):", *(f"  {line}" for line in lines)]
