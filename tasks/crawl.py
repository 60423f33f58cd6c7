"""The crawl's stages: ``search`` (unit "all") and ``download`` (unit = YouTube id).

- ``search`` turns the query table into a candidate list (``queries.parquet``,
  ``candidates.parquet``), every rejection with its reason. Its cache key holds the
  ``crawl.search`` section and the query table's content: the same queries are never asked twice
  (``--force`` asks again). A half-finished search keeps its answers under
  ``cache/crawl-search/<key>/`` so that the re-run asks only what failed.
- ``download`` fetches one video into its output folder (``<id>.<ext>``, ``<id>.info.json``,
  ``registration.parquet``) and then *publishes* it: the registration row (``schema.SOURCE``,
  ``path`` relative to the data root) goes into the source registry, where ``probe`` finds it.
  Its units are the accepted candidates of the current search, or exactly the ids of
  ``crawl.release_file`` / ``crawl.ids``. Its cache key holds only ``crawl.download``: politeness
  and cookies (``crawl.net``) change how, not what.
- yt-dlp's download archive (``crawl.net.archive``) lists what was downloaded: when a unit must be
  recomputed (``--force``, a new stage version) and the archive lists it, the earlier file is
  linked into the new output instead of being downloaded again.

``run_crawl`` runs both stages one unit at a time (politeness, not a thread pool) and writes a
report of what was found, fetched and lost (``crawl/report.csv``).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import io
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from vsi_wild import ids, schema
from vsi_wild.config import Config
from vsi_wild.digest import sha256_file
from vsi_wild.errors import UnitError
from vsi_wild.stages import crawl
from vsi_wild.stages.probe import describe_video
from vsi_wild.store import MANIFEST_NAME, Store, UnitRef
from vsi_wild.tasks.engine import Job, Outcome, Plan, Stage, add_listener, remove_listener, run_inline, run_stages

# ----------------------------------------------------------------------------------- helpers


def archive_path(config: Config, store: Store) -> Path | None:
    """yt-dlp needs a local archive file: relative paths live under a local data root."""
    a = config.crawl.net.archive
    if not a:
        return None
    p = Path(a).expanduser()
    if p.is_absolute():
        return p
    if store.is_local:
        return store.local_root() / p
    # A remote data root: keep the archive beside the local cache (it is only an optimisation).
    return Path(tempfile.gettempdir()) / "vsi-wild-archive" / hashlib.sha256(store.url.encode()).hexdigest()[:12] / p


def make_client(config: Config, store: Store) -> crawl.Ytdlp:
    return crawl.Ytdlp(config.crawl.net, archive=archive_path(config, store))


def output_relpath(ref: UnitRef, name: str) -> str:
    """Where a file of a completed output lives, relative to the data root (see store.py)."""
    return f"artifacts/{ref.stage}/{ref.unit}/{ref.key}/{name}"


def release_file_path(config: Config) -> Path | None:
    f = config.crawl.release_file
    return crawl.resolve_path(f) if f else None


def requested_ids(config: Config) -> list[str] | None:
    """The ids asked for by name (release file and/or ``crawl.ids``), or None to use the search."""
    c = config.crawl
    if not c.release_file and not c.ids:
        return None
    found = set(c.ids)
    rf = release_file_path(config)
    if rf is not None:
        found.update(crawl.release_ids(rf))
    return sorted(found)


# ----------------------------------------------------------------------------------- search


def search_units(plan: Plan, stage: Stage) -> list[str]:
    c = plan.config.crawl
    return ["all"] if c.enabled and not (c.release_file or c.ids) else []


def search_raw_inputs(config: Config, store: Store, unit: str) -> dict[str, str]:
    p = crawl.resolve_path(config.crawl.search.queries_file)
    try:
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
    except OSError as e:
        raise UnitError(
            f"query table {p}: {e.strerror} (crawl.search.queries_file)", kind="bad_input", retryable=False
        ) from None
    return {"queries_table": digest}


def _search_cache_dir(store: Store, key: str) -> Path | None:
    return store.local_root() / "cache" / "crawl-search" / key if store.is_local else None


def run_search(job: Job) -> None:
    params = job.config.crawl.search
    queries = crawl.queries_for(params)
    if not queries:
        raise UnitError(
            "no queries: crawl.search.categories/languages/cues select nothing from the table",
            kind="bad_input",
            retryable=False,
        )
    client = make_client(job.config, job.store)
    cache_dir = _search_cache_dir(job.store, job.key)
    result = crawl.search_candidates(
        client, queries, params, cache=crawl.JsonCache(cache_dir), progress=lambda d, t, what: job.progress(d, t, what)
    )
    job.out.write_table("queries.parquet", schema.table(schema.CRAWL_QUERIES, result.queries))
    job.out.write_table("candidates.parquet", schema.table(schema.CRAWL_CANDIDATES, result.candidates))
    if result.failures:
        kinds = Counter(e.kind for e in result.failures)
        worst = "rate_limited" if "rate_limited" in kinds else kinds.most_common(1)[0][0]
        raise UnitError(
            f"{len(result.failures)} search operations failed ({', '.join(f'{k}: {n}' for k, n in kinds.items())}); "
            f"answers so far are kept, a re-run asks only the rest. First: {result.failures[0]}",
            kind=worst,
            retryable=any(e.retryable for e in result.failures),
        )
    if cache_dir is not None:
        shutil.rmtree(cache_dir, ignore_errors=True)


SEARCH = Stage(
    name="search",
    outputs=schema.ARTIFACTS["search"],
    version="1",
    unit_kind="all",
    run=run_search,
    sections=("crawl.search",),
    unkeyed_sections=("crawl.net",),  # politeness, retries, cookies: how to ask, not what is found
    packages=("yt_dlp",),
    units=search_units,
    no_units_hint="the crawl is off (crawl.enabled) or asks for given ids (crawl.ids, crawl.release_file)",
    raw_inputs=search_raw_inputs,
    description="YouTube search: panorama cue x scene category queries -> filtered candidates",
)

# ----------------------------------------------------------------------------------- download


def wanted_ids(plan: Plan) -> list[str]:
    """The ids asked for (``crawl.ids``, a release file) or the search's accepted candidates."""
    asked = requested_ids(plan.config)
    if asked is not None:
        return asked
    if not plan.config.crawl.enabled:
        return []
    cur = plan.current.get("search", {}).get("all")
    if cur is None:
        return []
    t = plan.store.read_table(UnitRef("search", "all", cur[0]), "candidates.parquet")
    return t.filter(t["accepted"])["source_id"].to_pylist()


def download_units(plan: Plan, stage: Stage) -> list[str]:
    """The wanted ids but those a person removed (``vsi-wild remove``): the report lists them."""
    return [sid for sid in wanted_ids(plan) if not plan.store.is_removed(sid)]


@functools.lru_cache(maxsize=4)
def _candidates_by_id(store_url: str, key: str) -> dict[str, dict[str, Any]]:
    store = Store(store_url)
    path = f"{store.unit_dir(UnitRef('search', 'all', key))}/candidates.parquet"
    t = store.read_table_at(path, columns=["source_id", "query", "category", "language", "queries"])
    return {r["source_id"]: r for r in t.to_pylist()}


def download_context(config: Config, store: Store, video_id: str) -> dict[str, Any]:
    """Why this id is being downloaded: its search query, category and language, or the release."""
    asked = requested_ids(config)
    if asked is not None:
        rf = release_file_path(config)
        by = f"release:{rf.name}" if rf is not None and video_id not in config.crawl.ids else "ids"
        return {"query": None, "category": None, "language": None, "requested_by": by}
    st = store.read_status("search", "all")
    if st is not None and st["state"] == "done":
        row = _candidates_by_id(store.url, st["key"]).get(video_id)
        if row is not None:
            return {
                "query": row["query"],
                "category": row["category"],
                "language": row["language"],
                "queries": row["queries"],
                "requested_by": "search",
            }
    return {"query": None, "category": None, "language": None, "requested_by": "unknown"}


def _previous_download(
    store: Store, video_id: str, params: crawl.DownloadParams
) -> tuple[Path, Path | None, dict] | None:
    """A complete earlier output of this id made with the same download parameters."""
    if not store.is_local:
        return None
    base = store.local_root() / "artifacts" / "download" / video_id
    if not base.is_dir():
        return None
    wanted = params.model_dump(mode="json")
    for d in sorted(base.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True):
        if not (d / MANIFEST_NAME).is_file() or not (d / "registration.parquet").is_file():
            continue
        row = pq.read_table(d / "registration.parquet").to_pylist()[0]
        prov = json.loads(row.get("provenance") or "{}")
        if prov.get("download_params") != wanted:
            continue
        media = d / Path(row["path"]).name
        if not media.is_file() or media.stat().st_size != row["size_bytes"]:
            continue
        info = d / f"{video_id}.info.json"
        return media, (info if info.is_file() else None), row
    return None


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def run_download(job: Job) -> None:
    vid = job.unit
    if not ids.YOUTUBE_ID.match(vid):
        raise UnitError(f"{vid!r} is not a YouTube id", kind="bad_input", retryable=False)
    c = job.config.crawl
    store = job.store
    context = download_context(job.config, store, vid)
    out_dir: Path = job.out.scratch
    crawl_time = datetime.now(UTC)
    archive = archive_path(job.config, store)
    listed = crawl.in_archive(archive, vid)
    previous = _previous_download(store, vid, c.download) if listed else None
    provenance: dict[str, Any] = {
        "requested_by": context["requested_by"],
        "queries": context.get("queries"),
        "download_params": c.download.model_dump(mode="json"),
        "format_selector": crawl.format_selector(c.download),
        "archive": str(archive) if archive else None,
    }
    if previous is not None:
        media_src, info_src, prev_row = previous
        media = out_dir / media_src.name
        _link(media_src, media)
        info_file = None
        if info_src is not None:
            info_file = out_dir / info_src.name
            _link(info_src, info_file)
            info = json.loads(info_file.read_text(encoding="utf-8"))
        else:
            info = {"id": vid, "title": prev_row.get("title")}
        provenance["reused_from"] = prev_row["path"]
        crawl_time = prev_row.get("crawl_time") or crawl_time
    else:
        # Listed without a usable file (the store was wiped, or other parameters): download again,
        # without the archive, which would otherwise skip it.
        dl = make_client(job.config, store).download(crawl.watch_url(vid), out_dir, c.download, use_archive=not listed)
        media, info_file, info = dl.file, dl.info_file, dl.info
        keep = {media, info_file}
        for p in list(out_dir.iterdir()):  # yt-dlp leftovers (.part, .ytdl, fragments)
            if p not in keep:
                shutil.rmtree(p) if p.is_dir() else p.unlink()
    ref = UnitRef(job.stage.name, vid, job.key)
    if info_file is not None:
        provenance["info_json"] = output_relpath(ref, info_file.name)
    probe = describe_video(media)
    row = crawl.source_row(
        vid,
        info,
        path=output_relpath(ref, media.name),
        size_bytes=media.stat().st_size,
        sha256=sha256_file(media),
        probe=probe,
        context=context,
        crawl_time=crawl_time,
        provenance=provenance,
    )
    job.out.write_table("registration.parquet", schema.table(schema.SOURCE, [row]))


DOWNLOAD = Stage(
    name="download",
    outputs=schema.ARTIFACTS["download"],
    version="1",
    unit_kind="source",
    run=run_download,
    sections=("crawl.download",),
    # how to fetch, and why an id was wanted (recorded in its registration): not a reason to fetch again
    unkeyed_sections=("crawl.net", "crawl.ids", "crawl.release_file"),
    packages=("yt_dlp",),
    units=download_units,
    no_units_hint="no id to download: the crawl is off, or crawl.ids, crawl.release_file and the search found none",
    registers="registration.parquet",  # the downloaded source (engine.register_sources)
    description="yt-dlp download of one YouTube id, registered as a source",
)

STAGES = (SEARCH, DOWNLOAD)

# ----------------------------------------------------------------------------------- running


@dataclasses.dataclass
class CrawlSummary:
    outcomes: list[Outcome]
    report: list[dict[str, Any]]
    report_path: str | None

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.state == "failed"]

    def counts(self, stage: str) -> Counter[str]:
        return Counter(o.state for o in self.outcomes if o.stage == stage)


REPORT_COLUMNS = ("source_id", "state", "error_class", "retryable", "attempts", "error", "title", "path")


def crawl_report(store: Store, units: list[str], removed: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One row per download unit: done, or failed with its class and whether a re-run can help;
    then one per wanted id a person removed (state ``removed``, the reason as its error)."""
    reg = store.registry()
    by_id = {r["source_id"]: r for r in reg.select(["source_id", "title", "path"]).to_pylist()}
    reasons = {r["source_id"]: r["reason"] for r in store.removed_sources().to_pylist()}
    rows = []
    for u in units:
        st = store.read_status("download", u) or {}
        r = by_id.get(u, {})
        rows.append(
            {
                "source_id": u,
                "state": st.get("state", "not run"),
                "error_class": st.get("error_class"),
                "retryable": st.get("retryable"),
                "attempts": st.get("attempts"),
                "error": st.get("error"),
                "title": r.get("title"),
                "path": r.get("path") if st.get("state") == "done" else None,
            }
        )
    for u in removed:
        rows.append(
            {
                "source_id": u,
                "state": "removed",
                "error_class": None,
                "retryable": None,
                "attempts": None,
                "error": reasons.get(u),
                "title": None,
                "path": None,
            }
        )
    return rows


def report_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(REPORT_COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if r.get(k) is None else r[k] for k in REPORT_COLUMNS})
    return buf.getvalue()


def run_crawl(
    config: Config, store: Store, *, force: bool = False, on_outcome: Callable[[Outcome], None] | None = None
) -> CrawlSummary:
    """Search (unless ids were asked for by name), then download, one unit at a time; write
    ``crawl/report.csv``. Never raises for a unit's failure: it is in the outcomes and the report."""
    crawl.SESSION.reset()
    forced = frozenset(s.name for s in STAGES) if force else frozenset()
    plan = Plan.load(config, store, STAGES, force=forced)

    def listen(event: str, payload: dict[str, Any]) -> None:
        if event == "end" and on_outcome is not None:
            on_outcome(payload["outcome"])

    add_listener(listen)
    try:
        # Inline, one unit at a time: politeness forbids a pool here (crawl.net.max_concurrent).
        run_stages(plan, STAGES, run_inline(plan))
    finally:
        remove_listener(listen)
    outcomes = [o for s in STAGES for o in plan.outcomes.get(s.name, {}).values()]
    rows = crawl_report(
        store, plan.enumerated.get("download", []), [sid for sid in wanted_ids(plan) if store.is_removed(sid)]
    )
    report_path = None
    if rows:
        report_path = store.path("crawl", "report.csv")
        store.write_bytes_atomic(report_path, report_csv(rows).encode())
    return CrawlSummary(outcomes, rows, report_path)


def status_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    out: Counter[str] = Counter()
    for r in rows:
        out[r["state"] if r["state"] != "failed" else f"failed: {r['error_class']}"] += 1
    return dict(out)


__all__ = [
    "SEARCH",
    "DOWNLOAD",
    "STAGES",
    "run_crawl",
    "crawl_report",
    "report_csv",
    "CrawlSummary",
    "download_units",
    "wanted_ids",
    "search_units",
    "archive_path",
    "status_counts",
]
