"""`vsi-wild`: build the VSI-Super-Wild benchmark from 360° videos.

Heavy modules (Prefect, the stages) are imported inside the commands, so that `--help` is fast.
"""

from __future__ import annotations

import collections
import errno
import json
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, cast

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vsi_wild.process_exit import exit_process

if TYPE_CHECKING:
    from prefect.states import State

    from vsi_wild.stages.evaluate import Predictions

# Into a pipe or a file, rich would fold lines and squeeze tables to $COLUMNS or to the width of
# whatever terminal stdin is attached to: `vsi-wild status | grep` and `... --json | jq` broke.
_UNWRAPPED_WIDTH = 1 << 20


def _console(stderr: bool = False) -> Console:
    """The console for results (stdout) or messages (stderr): fitted to the width on a terminal,
    never wrapping anything elsewhere."""
    c = Console(stderr=stderr)
    return c if c.is_terminal else Console(stderr=stderr, width=_UNWRAPPED_WIDTH, soft_wrap=True)


def emit_json(record: dict[str, Any]) -> None:
    """Machine-readable output: one JSON object on one line of stdout, whatever the terminal
    (written directly: no console wraps it, highlights it or reads markup in its strings)."""
    sys.stdout.write(json.dumps(record, default=str) + "\n")


app = typer.Typer(
    name="vsi-wild",
    help=(
        "Build the VSI-Super-Wild benchmark: crawl 360° videos, review them, project each into four "
        "perspective views with faces blurred, extract object and camera metadata, and generate "
        "questions for the VMR, VPO, VOO and VOC tasks.\n\n"
        "Every stage caches its outputs under the data root; running again recomputes only what "
        "changed. Start with:  vsi-wild run --config configs/sample.yaml"
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
)

DATA_ROOT_HELP = "Data root (a folder or an fsspec URL like s3://bucket/prefix); default: the config's run.data_root."
CONFIG_HELP = "YAML config file (see configs/): sample.yaml runs the embedded sample on CPU."


def _prefect_env() -> None:
    """Defaults that make Prefect's ephemeral mode quiet and patient on small machines, and keep
    model libraries offline and free of their own progress bars; a value the user set wins."""
    for k, v in {
        "HF_HUB_OFFLINE": "1",
        "YOLO_OFFLINE": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "TQDM_DISABLE": "1",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
        "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
    }.items():
        os.environ.setdefault(k, v)


def _parse_sets(values: list[str] | None) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for item in values or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--set expects KEY=VALUE, got {item!r}")
        try:
            overrides[key] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[key] = raw
    return overrides


def _split(value: str | None) -> list[str] | None:
    return [x.strip() for x in value.split(",") if x.strip()] if value else None


def _store(config: Path | None, data_root: str | None):
    from vsi_wild.config import ConfigError, load_config
    from vsi_wild.store import Store

    try:
        cfg = load_config(config)
    except ConfigError as e:
        _console(stderr=True).print(f"[red]error:[/] {e}")
        raise typer.Exit(2) from None
    return cfg, Store(data_root or cfg.run.data_root)


@app.command()
def run(
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP)] = Path("configs/sample.yaml"),
    only: Annotated[
        str | None, typer.Option("--only", help="Run only these stages (comma-separated), e.g. `metadata,qa`.")
    ] = None,
    from_stage: Annotated[str | None, typer.Option("--from", help="Run this stage and every stage after it.")] = None,
    videos: Annotated[
        str | None, typer.Option("--videos", help="Restrict to these source or video ids (comma-separated).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Recompute the selected stages even where cached.")] = False,
    data_root: Annotated[str | None, typer.Option("--data-root", help=DATA_ROOT_HELP)] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override a config key: `--set run.workers=1` (repeatable).")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    """Run the pipeline (all stages, or the selected ones) and print a summary.

    Units that are cached are not recomputed; failed units are retried; a unit whose inputs
    failed is skipped. Exits 1 when any unit failed (the others still complete).
    """
    _prefect_env()
    from vsi_wild.config import ConfigError, load_config
    from vsi_wild.tasks import registry

    overrides = _parse_sets(set_)
    try:
        cfg = load_config(config, overrides)
        registry.select(_split(only), from_stage)
    except (ConfigError, ValueError) as e:
        _console(stderr=True).print(f"[red]error:[/] {e}")
        raise typer.Exit(2) from None
    root = data_root or cfg.run.data_root  # the flow registers the config's sources.paths

    from vsi_wild.flows.build import PipelineFailed, build_vsi_wild

    progress = (
        None
        if quiet or not Console(stderr=True).is_terminal and os.environ.get("VSI_WILD_PROGRESS") != "1"
        else _Progress()
    )
    try:
        if progress:
            progress.start()
        # a sync flow: return_state gives its State (its Any return type reads as maybe async to mypy)
        state = cast(
            "State[Any]",
            build_vsi_wild(
                config=str(config),
                data_root=root,
                only=_split(only),
                from_stage=from_stage,
                videos=_split(videos),
                force=force,
                overrides=overrides,
                return_state=True,
            ),
        )
    finally:
        if progress:
            progress.stop()
    result = state.result(raise_on_failure=False)
    if isinstance(result, PipelineFailed):
        summary = result.summary
    elif isinstance(result, dict) and "stages" in result:
        summary = result
    else:
        _console(stderr=True).print(f"[red]the run broke:[/] {type(result).__name__}: {result}", soft_wrap=True)
        raise typer.Exit(1)
    _print_summary(summary)
    raise typer.Exit(1 if summary["failed"] else 0)


def _print_summary(summary: dict[str, Any]) -> None:
    out = _console()
    t = Table(title="vsi-wild run", show_lines=False)
    for col in ("stage", "computed", "cached", "skipped", "failed", "seconds"):
        t.add_column(col, justify="left" if col == "stage" else "right")
    for s in summary["stages"]:
        t.add_row(
            s["stage"],
            *(str(s[k]) for k in ("computed", "cached", "skipped", "failed")),
            f"{s['seconds']:.1f}",
            style="red" if s["failed"] else None,
        )
    out.print(t)
    for f in summary["failed"]:
        out.print(f"[red]failed[/] {f['stage']}:{f['unit']}: {f['error']}", soft_wrap=True)
    reasons: dict[str, int] = {}
    for s in summary["skipped"]:
        reasons[f"{s['stage']}: {s['reason']}"] = reasons.get(f"{s['stage']}: {s['reason']}", 0) + 1
    for r, n in sorted(reasons.items()):
        out.print(f"[yellow]skipped[/] {n} x {r}", soft_wrap=True)
    for e in summary.get("no_units", []):
        out.print(f"[yellow]nothing to do[/] {e['stage']}: {e['reason']}", soft_wrap=True)
    root = summary["data_root"]
    out.print(f"outputs: {root}  (artifacts/, status/, logs/)", soft_wrap=True)
    counts_file = Path(root) / "exports" / "counts.json"
    if "export" in {s["stage"] for s in summary["stages"]} and counts_file.is_file():
        from vsi_wild.tasks.export import summary_line

        out.print(summary_line(str(counts_file.parent), json.loads(counts_file.read_text())), soft_wrap=True)


class _Progress:
    """Rich progress bars fed by the engine's events (one bar per stage, one per running unit)."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.stage_bars: dict[str, Any] = {}
        self.unit_bars: dict[tuple[str, str], Any] = {}
        self.lock = threading.Lock()

    def start(self) -> None:
        from vsi_wild.tasks import engine

        engine.add_listener(self.on_event)
        self.progress.start()

    def stop(self) -> None:
        from vsi_wild.tasks import engine

        engine.remove_listener(self.on_event)
        self.progress.stop()

    def on_event(self, event: str, p: dict[str, Any]) -> None:
        with self.lock:
            if event == "stage":
                self.stage_bars[p["stage"]] = self.progress.add_task(
                    f"{p['stage']:<10}", total=p["total"] or 1, completed=0 if p["total"] else 1
                )
            elif event == "start":
                self.unit_bars[(p["stage"], p["unit"])] = self.progress.add_task(f"  {p['unit']}", total=None)
            elif event == "progress":
                bar = self.unit_bars.get((p["stage"], p["unit"]))
                if bar is not None:
                    self.progress.update(
                        bar, completed=p["done"], total=p["total"], description=f"  {p['unit']} {p['what']}".rstrip()
                    )
            elif event == "end":
                bar = self.unit_bars.pop((p["stage"], p["unit"]), None)
                if bar is not None:
                    self.progress.remove_task(bar)
                if p["stage"] in self.stage_bars:
                    self.progress.advance(self.stage_bars[p["stage"]])


@app.command()
def stages(
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP)] = Path("configs/sample.yaml"),
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per stage.")] = False,
) -> None:
    """The DAG's stages and their contracts, in order: unit, upstream stages, the config sections
    in their cache keys, the model backends the config chooses for them, GPU, and every output file
    with its schema. (docs/architecture.md: how to add a stage.)"""
    cfg, _ = _store(config, None)
    from vsi_wild.tasks import registry

    for st in registry.STAGES:
        record: dict[str, Any] = {
            "stage": st.name,
            "version": st.version,
            "unit": st.unit_kind,
            "needs": list(st.needs),
            "sections": list(st.sections),
            "unkeyed_sections": list(st.unkeyed_sections),
            "backends": {
                u.selector: f"{u.kind}:{u.name(cfg)}" if u.active(cfg) else f"none ({u.name(cfg)})" for u in st.backends
            },
            "gpu": st.gpu,
            "gpu_memory_gib": st.gpu_memory_gib,
            "registers": st.registers,
            "outputs": [
                {
                    "file": a.name,
                    "schema": a.doc if a.schema is not None else None,
                    "columns": a.schema.names if a.schema is not None else None,
                    "optional": a.optional,
                }
                for a in st.outputs
            ],
            "description": st.description,
        }
        if as_json:
            emit_json(record)
            continue
        out = _console()
        gpu = (
            f"  [magenta]gpu[/] (~{st.gpu_memory_gib:g} GiB)"
            if st.gpu and st.gpu_memory_gib
            else ("  [magenta]gpu[/]" if st.gpu else "")
        )
        out.print(f"[bold]{st.name}[/] v{st.version} per {st.unit_kind}{gpu}: {st.description}", soft_wrap=True)
        if st.needs:
            out.print(f"  reads      {', '.join(st.needs)}", soft_wrap=True)
        if st.sections:
            out.print(f"  keyed by   {', '.join(st.sections)}", soft_wrap=True)
        for sel, name in record["backends"].items():
            out.print(f"  backend    {sel} = {name}", soft_wrap=True)
        for a in st.outputs:
            kind = "table" if a.schema is not None else "file"
            out.print(
                f"  writes     {a.name}{' (optional)' if a.optional else ''}  ({kind}) {a.doc}",
                soft_wrap=True,
                markup=False,
            )


@app.command()
def status(
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP)] = Path("configs/sample.yaml"),
    data_root: Annotated[str | None, typer.Option("--data-root", help=DATA_ROOT_HELP)] = None,
    failed: Annotated[
        bool, typer.Option("--failed", help="Show only units with a failed stage, with the errors.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status rows as JSON lines.")] = False,
) -> None:
    """Show the state of every unit: units (rows) x stages (columns).

    States: done, failed, skipped (why in --failed/--json), running (or interrupted).
    """
    cfg, store = _store(config, data_root)
    rows = store.status_table().to_pylist()
    if as_json:
        for r in rows:
            emit_json(r)
        return
    if not rows:
        _console(stderr=True).print(f"no status under {store.url} yet: run `vsi-wild run` first")
        return
    from vsi_wild import ids
    from vsi_wild.tasks import registry

    kinds = {s.name: s.unit_kind for s in registry.STAGES}
    stages = [s.name for s in registry.STAGES if any(r["stage"] == s.name for r in rows)]
    # One row per source, view video and "all"; a clip stage's cell on a video row counts its clips.
    grid: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        unit = ids.split_clip_id(r["unit"])[0] if kinds.get(r["stage"]) == "clip" else r["unit"]
        grid.setdefault(unit, {}).setdefault(r["stage"], []).append(r["state"])
    sym = {"done": "[green]✓[/]", "failed": "[red]✗[/]", "skipped": "[yellow]-[/]", "running": "[blue]…[/]"}

    def cell(states: list[str] | None, clips: bool) -> str:
        if not states:
            return ""
        if not clips:
            return sym.get(states[0], states[0])
        n = {k: states.count(k) for k in sym if k in states}
        return " ".join(f"{v}{sym[k]}" for k, v in n.items())

    t = Table(title=f"status of {store.url}  (✓ done, ✗ failed, - skipped, … running or interrupted)")
    t.add_column("unit", no_wrap=True)
    for name in stages:
        t.add_column(name[:4] if len(name) > 5 else name, justify="center", no_wrap=True)
    for unit in sorted(grid, key=lambda u: (u != "all", ids.unit_source(u) if u != "all" else "", "_" in u, u)):
        cells = grid[unit]
        if failed and not any("failed" in v for v in cells.values()):
            continue
        t.add_row(unit, *(cell(cells.get(name), kinds[name] == "clip") for name in stages))
    out = _console()
    out.print(t)
    out.print("columns: " + ", ".join(f"{n[:4]}={n}" for n in stages if len(n) > 5))
    for r in rows:
        if r["state"] == "failed" or (failed and r["state"] == "skipped"):
            out.print(
                f"[red]{r['state']}[/] {r['stage']}:{r['unit']} (attempts {r['attempts']}): {r['error']}",
                soft_wrap=True,
            )
    from vsi_wild.cli_verify import verification_lines

    for line in verification_lines(cfg, store):
        out.print(line, soft_wrap=True, markup=False)


@app.command()
def add(
    paths: Annotated[list[str], typer.Argument(help="Video files, or folders whose video files to add.")],
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP)] = Path("configs/sample.yaml"),
    data_root: Annotated[str | None, typer.Option("--data-root", help=DATA_ROOT_HELP)] = None,
) -> None:
    """Register local 360° videos as sources; the next `vsi-wild run` probes and processes them."""
    _, store = _store(config, data_root)
    from vsi_wild.tasks.sources import expand_paths, register_local

    missing = [str(p) for p in expand_paths(paths) if not p.is_file()]
    if missing:
        _console(stderr=True).print(f"[red]error:[/] not a file: {', '.join(missing)}")
        raise typer.Exit(2)
    for sid in register_local(store, paths):
        _console().print(sid)


@app.command()
def remove(
    source_ids: Annotated[list[str], typer.Argument(help="Source ids to unregister (see `vsi-wild sources`).")],
    reason: Annotated[str | None, typer.Option("--reason", help="Why (kept with the removal).")] = None,
    undo: Annotated[
        bool,
        typer.Option(
            "--undo",
            help="Take removals back: the next run registers the "
            "sources again (a crawled or sample source from its cached output).",
        ),
    ] = False,
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP)] = Path("configs/sample.yaml"),
    data_root: Annotated[str | None, typer.Option("--data-root", help=DATA_ROOT_HELP)] = None,
) -> None:
    """Unregister sources, for good: a later crawl or sample run does not register them again
    (`--undo` takes it back; `vsi-wild add` of a local file does too). Their cached outputs stay
    until deleted by hand."""
    from vsi_wild import ids

    try:
        for sid in source_ids:
            ids.check_source_id(sid)
    except ids.BadId as e:
        _console(stderr=True).print(f"[red]error:[/] {e}")
        raise typer.Exit(2) from None
    _, store = _store(config, data_root)
    for sid in source_ids:
        if undo:
            if not store.undo_remove(sid):
                _console(stderr=True).print(f"[yellow]not removed:[/] {sid}")
        elif not store.remove_source(sid, reason):
            _console(stderr=True).print(f"[yellow]not registered (kept out of later runs all the same):[/] {sid}")


@app.command()
def sources(
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP)] = Path("configs/sample.yaml"),
    data_root: Annotated[str | None, typer.Option("--data-root", help=DATA_ROOT_HELP)] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One JSON object per line: each registered source with every column of its row (the probe's "
            "measurements where it ran), `probe_state`, `probe_error` and `removed: false`; then each removed "
            "source with `removed: true`, `removed_at` and `reason`.",
        ),
    ] = False,
) -> None:
    """List the registered sources with what the probe measured."""
    from vsi_wild.store import UnitRef

    _, store = _store(config, data_root)
    rows = []
    for r in store.registry().to_pylist():
        st = store.read_status("probe", r["source_id"])
        probed: dict[str, Any] = {}
        if st and st["state"] == "done":
            probed = store.read_table(UnitRef("probe", r["source_id"], st["key"]), "source.parquet").to_pylist()[0]
        rows.append((r, probed, st))
    removed = store.removed_sources().to_pylist()
    if as_json:
        for r, probed, st in rows:
            state = st["state"] if st else "not probed"
            emit_json({**r, **probed, "probe_state": state, "probe_error": st and st["error"], "removed": False})
        for x in removed:
            emit_json({**x, "removed": True})
        return
    t = Table(title="sources")
    for c in ("source_id", "origin", "duration", "size", "fps", "probe"):
        t.add_column(c)
    for r, probed, st in rows:
        t.add_row(
            r["source_id"],
            r["origin"],
            f"{probed['duration_s']:.1f} s" if probed else "",
            f"{probed['width']}x{probed['height']}" if probed else "",
            f"{probed['fps']:.2f}" if probed else "",
            (st["state"] + (f": {st['error']}" if st and st["error"] else "")) if st else "not probed",
        )
    out = _console()
    out.print(t)
    if removed:
        out.print(
            "removed (kept out of runs; `vsi-wild remove --undo ID` takes it back): "
            + ", ".join(r["source_id"] + (f" ({r['reason']})" if r["reason"] else "") for r in removed)
        )


@app.command()
def sample(
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for sample.mp4 and the truth tables.")] = Path(
        "data/sample"
    ),
    seed: Annotated[int, typer.Option(help="Seed: the same seed gives the same bytes.")] = 0,
    duration: Annotated[float, typer.Option(help="Length of the walk in seconds.")] = 120.0,
    width: Annotated[int, typer.Option(help="Panorama width (height = width / 2).")] = 1280,
    fps: Annotated[float, typer.Option(help="Frame rate.")] = 8.0,
    route: Annotated[str, typer.Option(help="Named route: loop (revisits a place) or short.")] = "loop",
) -> None:
    """Generate a synthetic 360° walk with complete ground truth (video + parquet tables)."""
    from vsi_wild.stages.sample import SampleParams, generate_sample
    from vsi_wild.store import table_bytes

    params = SampleParams(seed=seed, duration_s=duration, width=width, fps=fps, route=route)
    out_dir.mkdir(parents=True, exist_ok=True)
    from rich.progress import Progress

    with Progress(console=Console(stderr=True)) as bar:
        task_id = bar.add_task("rendering", total=None)
        truth = generate_sample(
            params, out_dir / "sample.mp4", progress=lambda d, t: bar.update(task_id, completed=d, total=t)
        )
    for name in ("poses", "objects", "visibility", "faces", "places"):
        (out_dir / f"truth_{name}.parquet").write_bytes(table_bytes(getattr(truth, name)))
    _console().print(f"wrote {out_dir / 'sample.mp4'} and truth_*.parquet")


@app.command()
def evaluate(
    qa: Annotated[
        Path,
        typer.Option(
            "--qa", help="The questions: exports/qa.parquet (rich: per-bin results) or a release-format .jsonl."
        ),
    ] = Path("data/out/exports/qa.parquet"),
    predictions: Annotated[
        Path | None,
        typer.Option(
            "--predictions",
            "-p",
            help='JSONL of {"doc_id": ..., "prediction": ...}; a letter for MC, a number for VOC.',
        ),
    ] = None,
    blind: Annotated[
        bool,
        typer.Option(
            "--blind",
            help="Score the blind baselines (no video: the rule priors and "
            "the learned text probe) and flag leaking tasks.",
        ),
    ] = False,
    blind_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="One JSON object per line: with --blind, per baseline and task; with --predictions, per group "
            '(`{"group", "metric", "score", "n"}`), then the coverage (`{"coverage": ...}`) and Shuffle24\'s '
            'metrics (`{"shuffle24": ...}`).',
        ),
    ] = False,
    write_shuffle24: Annotated[
        Path | None,
        typer.Option(
            "--write-shuffle24", help="Write every MC question in its 24 option orders (for Shuffle24) to this JSONL."
        ),
    ] = None,
) -> None:
    """Score predictions on the benchmark (accuracy for MC, MRA for VOC; per task, subtype and
    duration bin), run the blind baselines, or write the Shuffle24 variant of the questions.

    Predictions are JSONL, one `{"doc_id": ..., "prediction": ...}` per line. A line without them, or
    a doc id predicted twice, is an error naming the line; a question without a prediction, or whose
    prediction names no answer, scores 0 and is counted in the summary; a file that answers none of
    the questions is an error. Predictions for Shuffle24 use the doc ids of `--write-shuffle24`
    (`<doc_id>|perm00`..`|perm23`); Top-K, Pass@K and option-order bias are then reported too.
    """
    from vsi_wild.stages import evaluate as ev

    err = _console(stderr=True)
    try:
        rows = _read_questions(qa)
        preds = ev.read_predictions(predictions, rows) if predictions else None
    except (ev.EvalError, OSError) as e:
        err.print(f"[red]error:[/] {escape(_error_text(e))}")
        raise typer.Exit(2) from None
    if write_shuffle24:
        with open(write_shuffle24, "w", encoding="utf-8") as fh:
            for r in rows:
                if r["task_type"] in ev.mc_tasks():
                    for c in ev.shuffle24(r):
                        fh.write(json.dumps({k: c[k] for k in SHUFFLE24_FIELDS}, ensure_ascii=False) + "\n")
        err.print(f"wrote {write_shuffle24}")
    if blind:
        counts = collections.Counter(r["task_type"] for r in rows)
        metrics = {t: ev.task(t).metric.name for t in counts}
        _print_blind(ev.blind_report(rows), ev.text_probe_report(rows), metrics, counts, blind_json)
    if predictions and preds is not None:
        _print_scores(rows, preds, predictions, qa, as_json=blind_json)
    if not (blind or predictions or write_shuffle24):
        err.print("nothing to do: give --predictions, --blind or --write-shuffle24")
        raise typer.Exit(2)


SHUFFLE24_FIELDS = ("doc_id", "video_name", "task_type", "question", "answer", "frame_indices", "options")


def _error_text(e: Exception) -> str:
    """An error as one line: a missing or unreadable file by its name and the reason."""
    if isinstance(e, OSError) and e.filename:
        return f"{e.filename}: {e.strerror or e}"
    return str(e)


def _read_questions(qa: Path) -> list[dict[str, Any]]:
    """The questions scored: a release-format JSONL, or exports/qa.parquet's release rows; each
    with the fields scoring reads (``evaluate.check_questions``)."""
    from vsi_wild.stages import evaluate as ev

    if qa.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not qa.is_file():  # pyarrow's own error names the path but not what is wrong with it
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(qa))
        try:
            table = pq.read_table(qa)
        except pa.ArrowException as e:
            raise ev.EvalError(f"{qa}: not a parquet table of questions: {e}") from None
        rows = [r for r in table.to_pylist() if r.get("split", "release") == "release"]
    else:
        rows = ev.load_jsonl(qa)
    ev.check_questions(rows, qa)
    return rows


def _print_scores(rows: list[dict[str, Any]], preds: Predictions, predictions: Path, qa: Path, as_json: bool) -> None:
    """The scores per group, how far the predictions cover the questions, and Shuffle24's
    metrics where its copies are predicted; a file that answers none of the questions is an error
    (predictions for another question set would otherwise score 0 everywhere, silently)."""
    from vsi_wild.stages import evaluate as ev

    err = _console(stderr=True)
    cov = ev.coverage(rows, preds)
    if not cov["answered"] and not cov["shuffle24_copies"]:
        first = f" (the first: {cov['unknown_examples'][0]})" if cov["unknown_examples"] else ""
        err.print(
            f"[red]error:[/] {escape(str(predictions))}: none of its {len(preds.by_doc)} predictions names one of "
            f"the {len(rows)} questions of {escape(str(qa))}{escape(first)}: predictions for another question set?"
        )
        raise typer.Exit(2)
    scores = ev.evaluate(rows, preds.by_doc) if cov["answered"] else {}
    s24 = ev.shuffle24_metrics(rows, preds.by_doc) if cov["shuffle24_copies"] else {}
    if as_json:
        for g, v in scores.items():
            emit_json({"group": g, "metric": ev.group_metric(g), "score": v["score"], "n": v["n"]})
        emit_json({"coverage": cov})
        if s24:
            emit_json({"shuffle24": s24})
    else:
        out = _console()
        if scores:
            table = Table(title=f"scores ({len(rows)} questions)")
            for column in ("group", "metric", "score", "n"):
                table.add_column(column)
            for g, v in scores.items():
                table.add_row(g, ev.group_metric(g), f"{v['score']:.4f}", str(v["n"]))
            out.print(table)
        if s24:
            out.print_json(json.dumps(s24))
        out.print(
            f"{cov['answered']} of {cov['questions']} questions answered"
            + (f", {cov['shuffle24_copies']} Shuffle24 copies" if cov["shuffle24_copies"] else ""),
            markup=False,
        )
    scored_zero = {
        "have no prediction": cov["missing"] if cov["answered"] else 0,
        "have a prediction that names no answer (no letter A-D; for VOC, no number)": cov["no_answer_in_prediction"],
    }
    for what, n in scored_zero.items():
        if n:
            err.print(f"warning: {n} of the {cov['questions']} questions {what}: scored 0", markup=False)
    if cov["unknown_doc_ids"]:
        err.print(
            f"warning: {cov['unknown_doc_ids']} predictions name no question, left out "
            f"(e.g. {', '.join(cov['unknown_examples'])})",
            markup=False,
        )


def _blind_records(
    rules: dict[str, Any], text_probe: dict[str, Any], metrics: dict[str, str], counts: dict[str, int]
) -> list[dict[str, Any]]:
    """One record per (blind baseline, task): its metric, score, chance, questions, and whether it
    flags the task (``metrics``: task -> its metric's name; the rule baselines' chance is that of
    accuracy, none for a task scored otherwise; ``counts``: task -> questions)."""
    flagged = {x["task"] for x in rules["leaks"]}
    records = [
        {
            "baseline": name,
            "task": t,
            "metric": metrics[t],
            "score": value,
            "chance": rules["chance"] if metrics[t] == "accuracy" else None,
            "n": counts[t],
            "flagged": t in flagged and value > rules["chance"] + rules["margin"],
        }
        for name, scores in rules["baselines"].items()
        for t, value in scores.items()
    ]
    records += [
        {
            "baseline": text_probe["probe"],
            **{("score" if k == "probe" else k): v for k, v in p.items()},
            "folds": text_probe["folds"],
        }
        for p in text_probe["tasks"]
    ]
    return records


def _print_blind(
    rules: dict[str, Any], text_probe: dict[str, Any], metrics: dict[str, str], counts: dict[str, int], as_json: bool
) -> None:
    records = _blind_records(rules, text_probe, metrics, counts)
    if as_json:
        for r in records:
            emit_json(r)
        return
    t = Table(title="blind baselines (no video)")
    for c in ("baseline", "task", "metric", "score", "chance", "n", "flagged"):
        t.add_column(c)
    for r in records:
        chance = "" if r["chance"] is None else f"{r['chance']:.3f}"
        score = "" if r["score"] is None else f"{r['score']:.3f}"
        t.add_row(r["baseline"], r["task"], r["metric"], score, chance, str(r["n"]), "LEAK" if r["flagged"] else "")
    _console().print(t)
    for p in text_probe["tasks"]:
        if p.get("note"):
            _console().print(f"text_probe {p['task']}: {p['note']}")


@app.command()
def release(
    version: Annotated[str, typer.Argument(help="The release's version, e.g. v1.0: its folder `releases/<version>/`.")],
    config: Annotated[Path, typer.Option("--config", "-c", help=CONFIG_HELP)] = Path("configs/sample.yaml"),
    data_root: Annotated[str | None, typer.Option("--data-root", help=DATA_ROOT_HELP)] = None,
    license_id: Annotated[
        str,
        typer.Option(
            "--license",
            help="The dataset card's licence id (of the questions "
            "and metadata; each video keeps its own, listed in videos.jsonl).",
        ),
    ] = "cc-by-4.0",
    include_videos: Annotated[
        bool,
        typer.Option(
            "--include-videos",
            help="Copy the view videos into the release "
            "(default: videos.jsonl lists them with their sha256 and source).",
        ),
    ] = False,
    push_to: Annotated[
        str | None,
        typer.Option(
            "--push",
            metavar="REPO_ID",
            help="Upload the release to this Hugging "
            "Face dataset repository and tag it with the version (reads HF_TOKEN).",
        ),
    ] = None,
    private: Annotated[bool, typer.Option("--private", help="With --push: create the repository private.")] = False,
) -> None:
    """Freeze the current export as `releases/VERSION/`: a Hugging Face dataset folder (README.md card,
    the release jsonl, qa.parquet, splits, images, the ledger, an lmms-eval task), a changelog against
    the previous release with causes, and manifest.json (every file's sha256).

    A release never changes: making it again with the same content leaves it as it is; with other
    content it is refused (exit 1). `datasets.load_dataset("releases/VERSION")` loads it. docs/releases.md.
    """
    _, store = _store(config, data_root)
    from vsi_wild.release import ReleaseError, make_release, push, validate_card

    err = _console(stderr=True)
    try:
        made = make_release(store, version, license_id, include_videos)
    except ReleaseError as e:
        err.print(f"error: {e}", soft_wrap=True, markup=False)
        raise typer.Exit(1) from None
    problems = validate_card((made.path / "README.md").read_text())
    out = _console()
    state = "made" if made.created else "already there, identical"
    out.print(
        f"release {version}: {made.path} ({state}; {made.files} files; changelog against "
        f"{made.previous or 'nothing: the first release'})",
        soft_wrap=True,
        markup=False,
    )
    if problems:
        err.print("dataset card problems: " + "; ".join(problems), soft_wrap=True, markup=False)
        raise typer.Exit(1)
    if push_to:
        try:
            url = push(made.path, push_to, version, private=private)
        except ReleaseError as e:
            err.print(f"error: {e}", soft_wrap=True, markup=False)
            raise typer.Exit(2) from None
        out.print(f"pushed to {push_to}: {url}", soft_wrap=True, markup=False)


def _mount_sources_commands() -> None:
    from vsi_wild.cli_sources import crawl, review_app

    app.command("crawl")(crawl)
    app.add_typer(review_app, name="review")


_mount_sources_commands()
from vsi_wild.cli_report import report as _report  # noqa: E402 - `vsi-wild report`

app.command("report")(_report)


def _mount_verify_commands() -> None:
    from vsi_wild.cli_verify import fixes_app, verify

    app.command("verify")(verify)
    app.add_typer(fixes_app, name="fixes")


_mount_verify_commands()
from vsi_wild.cli_weights import weights_app as _weights_app  # noqa: E402 - `vsi-wild weights`

app.add_typer(_weights_app, name="weights")


def main() -> NoReturn:
    code: int | str | None = 0
    try:
        app()
    except SystemExit as e:  # typer ends every command so
        code = e.code
    except KeyboardInterrupt:
        _console(stderr=True).print("interrupted")
        code = 130
    exit_process(code)  # not sys.exit: vsi_wild/process_exit.py says why


if __name__ == "__main__":
    main()
