"""Sourcing 360° videos from YouTube with yt-dlp (the paper's stage A.1.1).

What this module does, in order:

1. **Queries.** A panorama cue ("360°", "VR 360", ...) x a term of one of the 8 scene categories,
   per language, from a YAML table (``configs/queries.yaml``); an optional *expander* plugin (an
   MLLM in the paper) adds variants. Each query remembers its category and language.
2. **Search.** ``ytsearchN:<query>`` through yt-dlp's Python API (flat results), then the full
   info dict of each new candidate, then the filters (duration range, minimum resolution, not live,
   not a short, 360° evidence). Every rejection keeps its reason.
3. **Download.** The best format up to a configured height, with a download archive, politeness
   (a minimum interval between requests, yt-dlp's sleeps, a bandwidth limit), retries with
   exponential backoff for network errors, a circuit breaker for YouTube's rate limiting and an
   optional cookies file.
4. **Failures** are classified (``classify_error``), never crashed on: each becomes a
   ``UnitError(message, kind, retryable)`` whose kind is one of ``ERROR_KINDS``.

Everything here takes plain data and returns plain data; the store and the engine are in
``tasks/crawl.py``. yt-dlp is only ever called through ``Ytdlp``, which is also the test seam:
``NetParams.extractors`` adds InfoExtractor classes (by import path) that replace yt-dlp's own
with the same key, so tests serve search results and info dicts from fixtures offline while the
rest of yt-dlp (format selection, file:// download, archive, errors) runs for real.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import logging
import math
import os
import random
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from vsi_wild import ids
from vsi_wild.errors import UnitError

log = logging.getLogger("vsi_wild.crawl")

# The paper's 8 scene categories, exactly as the benchmark names them.
SCENE_CATEGORIES: tuple[str, ...] = (
    "culture & entertainment",
    "industry",
    "medical",
    "office & education",
    "residential space",
    "retail space",
    "street view",
    "transportation hubs",
)

# Failure classes of a crawl, and whether a re-run with the same inputs can succeed.
ERROR_KINDS: dict[str, bool] = {
    "unavailable": False,  # deleted, never existed, or not playable
    "private": False,
    "removed": False,  # removed by the uploader, for a policy, a copyright claim, a terminated account
    "gated": False,  # age- or membership-gated, or YouTube's "confirm you're not a bot" (retryable)
    "geo_blocked": False,
    "rate_limited": True,
    "network": True,
    "ytdlp_error": True,  # anything yt-dlp reports that none of the above explains
}

REPO_ROOT = Path(__file__).resolve().parents[1]


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# =============================================================================================
# Parameters (the `crawl` config section)
# =============================================================================================


class SearchParams(_Params):
    """What to search for and which results to keep (the `search` stage's cache key)."""

    queries_file: str = Field(
        "configs/queries.yaml", description="the query table (relative: to the working folder, then the repo)"
    )
    categories: list[str] = Field(default_factory=lambda: list(SCENE_CATEGORIES), description="categories to search")
    languages: list[str] = Field(default_factory=lambda: ["en"], description="languages of the table to use; ['*'] = all")
    cues: list[str] | None = Field(None, description="only these panorama cues (default: the table's)")
    max_queries: int | None = Field(None, ge=1, description="cap on the number of queries (trial runs)")
    results_per_query: int = Field(20, ge=1, le=500, description="N of ytsearchN:")
    expander: str | None = Field(
        None, description="query expansion plugin 'module:factory' (an MLLM in the paper); none by default"
    )
    expander_options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the factory")
    min_duration_s: float = Field(60.0, ge=0, description="shorter results are rejected")
    max_duration_s: float = Field(5 * 3600.0, gt=0, description="longer results are rejected")
    min_height: int = Field(1920, ge=0, description="minimum height of the best video format (4K equirect = 1920)")
    require_360: bool = Field(True, description="reject results without 360° evidence")
    allow_stereo: bool = Field(False, description="keep stereoscopic (top-bottom) 360° videos")
    reject_live: bool = True
    reject_shorts: bool = True

    @field_validator("categories")
    @classmethod
    def _known_categories(cls, v: list[str]) -> list[str]:
        bad = [c for c in v if c not in SCENE_CATEGORIES]
        if bad:
            raise ValueError(f"unknown categories {bad}; expected some of {list(SCENE_CATEGORIES)}")
        return v


class DownloadParams(_Params):
    """What a download produces (the `download` stage's cache key)."""

    max_height: int = Field(2880, ge=144, description="best format up to this height (5.7K equirect = 2880)")
    audio: bool = Field(True, description="keep an audio track")
    format: str | None = Field(None, description="a yt-dlp format selector; overrides max_height/audio")
    merge_output_format: str = Field("mp4/mkv", description="container of merged video+audio")


class NetParams(_Params):
    """How yt-dlp talks to the network. Not part of any cache key: it changes how, not what."""

    cookies_file: str | None = Field(None, description="Netscape cookies.txt (for gated videos and bot checks)")
    proxy: str | None = Field(None, description="http/socks proxy URL; '' forces a direct connection")
    min_interval_s: float = Field(2.0, ge=0, description="at least this long between two YouTube operations")
    sleep_requests_s: float = Field(1.0, ge=0, description="yt-dlp's sleep between requests of one extraction")
    sleep_before_download_s: float = Field(5.0, ge=0, description="yt-dlp's sleep before each download (min)")
    max_sleep_before_download_s: float = Field(15.0, ge=0, description="... (max; a random wait in between)")
    rate_limit: str | None = Field("10M", description="download bandwidth limit in bytes/s ('10M'); none = unlimited")
    socket_timeout_s: float = Field(30.0, gt=0)
    retries: int = Field(3, ge=0, description="yt-dlp's own retries (http, fragments, extractor)")
    unit_retries: int = Field(2, ge=0, description="whole-unit retries after a network error")
    backoff_s: float = Field(10.0, ge=0, description="first retry wait; doubles each retry")
    max_backoff_s: float = Field(300.0, ge=0)
    max_consecutive_rate_limits: int = Field(
        2, ge=1, description="after this many rate-limited units in a row, stop contacting YouTube in this run"
    )
    max_concurrent: int = Field(1, ge=1, description="YouTube operations at once in one process")
    archive: str | None = Field(
        "crawl/archive.txt", description="yt-dlp download archive (relative: under the data root); none = off"
    )
    extractors: list[str] = Field(
        default_factory=list,
        description="extra yt-dlp InfoExtractor classes 'module:Class'; one with the key of a built-in replaces it",
    )
    extractor_args: dict[str, dict[str, list[str]]] = Field(
        default_factory=dict, description="yt-dlp extractor_args, e.g. {youtube: {player_client: [web]}}"
    )
    enable_file_urls: bool = Field(False, description="allow file:// media URLs (tests, local mirrors)")
    js_runtimes: dict[str, dict[str, str]] | None = Field(
        None, description="yt-dlp JavaScript runtimes for YouTube's challenges, e.g. {deno: {path: /usr/bin/deno}}; "
                          "none = yt-dlp's default (deno on the PATH)"
    )
    remote_components: list[str] = Field(
        default_factory=list, description="components yt-dlp may fetch when missing, e.g. ['ejs:github']"
    )


class CrawlParams(_Params):
    """The `crawl` config section: search (keyed), download (keyed), net (not keyed), and which ids."""

    enabled: bool = Field(False, description="search YouTube in full runs too (`vsi-wild crawl` always does)")
    release_file: str | None = Field(
        None, description="download exactly the YouTube ids of this release QA file (jsonl) instead of searching"
    )
    ids: list[str] = Field(default_factory=list, description="download exactly these YouTube ids (with release_file)")
    search: SearchParams = SearchParams()
    download: DownloadParams = DownloadParams()
    net: NetParams = NetParams()

    @field_validator("ids")
    @classmethod
    def _youtube_ids(cls, v: list[str]) -> list[str]:
        for i in v:
            if not ids.YOUTUBE_ID.match(i):
                raise ValueError(f"not a YouTube id: {i!r} (11 characters of [A-Za-z0-9_-])")
        return v


# =============================================================================================
# Queries
# =============================================================================================


@dataclasses.dataclass(frozen=True)
class Query:
    text: str
    category: str
    language: str
    cue: str = ""
    term: str = ""
    origin: str = "table"  # "table" or "expander:<name>"


class LanguageQueries(_Params):
    template: str = Field("{cue} {term}", description="how a cue and a category term make a query")
    cues: list[str]
    categories: dict[str, list[str]] = Field(description="scene category (English name) -> terms in this language")


class QueryTable(_Params):
    languages: dict[str, LanguageQueries]


class QueryTableError(UnitError):
    def __init__(self, message: str):
        super().__init__(message, kind="bad_input", retryable=False)


def resolve_path(path: str | os.PathLike[str]) -> Path:
    """A config-relative path: as given (absolute or from the working folder), else from the repo."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    return REPO_ROOT / p


def load_query_table(path: str | os.PathLike[str]) -> QueryTable:
    p = resolve_path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise QueryTableError(f"query table not found: {p} (crawl.search.queries_file)") from None
    except yaml.YAMLError as e:
        raise QueryTableError(f"{p}: not valid YAML: {e}") from None
    try:
        table = QueryTable.model_validate(data)
    except ValidationError as e:
        where = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())
        raise QueryTableError(f"{p}: {where}") from None
    for lang, lq in table.languages.items():
        bad = [c for c in lq.categories if c not in SCENE_CATEGORIES]
        if bad:
            raise QueryTableError(f"{p}: languages.{lang}.categories: unknown categories {bad}; "
                                  f"expected the benchmark's names {list(SCENE_CATEGORIES)}")
        if "{cue}" not in lq.template or "{term}" not in lq.template:
            raise QueryTableError(f"{p}: languages.{lang}.template must contain {{cue}} and {{term}}")
    return table


def _norm_query(text: str) -> str:
    return " ".join(text.casefold().split())


def build_queries(table: QueryTable, params: SearchParams) -> list[Query]:
    """Cue x category term per language, in a stable order, without duplicates."""
    langs = list(table.languages) if params.languages == ["*"] else params.languages
    missing = [lang for lang in langs if lang not in table.languages]
    if missing:
        raise QueryTableError(f"languages {missing} are not in the query table (has {sorted(table.languages)})")
    out: list[Query] = []
    seen: set[str] = set()
    for lang in langs:
        lq = table.languages[lang]
        cues = [c for c in lq.cues if params.cues is None or c in params.cues]
        for category in params.categories:
            for term in lq.categories.get(category, []):
                for cue in cues:
                    text = " ".join(lq.template.format(cue=cue, term=term).split())
                    if _norm_query(text) in seen:
                        continue
                    seen.add(_norm_query(text))
                    out.append(Query(text, category, lang, cue, term, "table"))
    return out


@runtime_checkable
class QueryExpander(Protocol):
    """A plugin that proposes more queries (variants, other languages) from the table's queries.

    It returns new ``Query`` objects (or dicts with ``text``, ``category``, ``language``); each must
    keep a scene category and a language. Nothing calls a network model unless configured.
    """

    name: str

    def expand(self, queries: Sequence[Query]) -> Iterable[Query | Mapping[str, Any]]: ...


def load_expander(spec: str, options: Mapping[str, Any] | None = None) -> QueryExpander:
    mod_name, _, attr = spec.partition(":")
    if not attr:
        raise QueryTableError(f"crawl.search.expander {spec!r}: expected 'module:factory'")
    try:
        factory = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise QueryTableError(f"crawl.search.expander {spec!r} cannot be loaded: {e}") from None
    expander = factory(**dict(options or {}))
    if not isinstance(expander, QueryExpander):
        raise QueryTableError(f"crawl.search.expander {spec!r} does not provide name and expand(queries)")
    return expander


def expand_queries(queries: Sequence[Query], expander: QueryExpander | None,
                   max_queries: int | None = None) -> list[Query]:
    out = list(queries)
    if expander is not None:
        seen = {_norm_query(q.text) for q in out}
        for i, item in enumerate(expander.expand(list(queries))):
            if isinstance(item, Mapping):
                item = Query(str(item.get("text", "")), str(item.get("category", "")), str(item.get("language", "")))
            if not item.text.strip() or item.category not in SCENE_CATEGORIES or not item.language:
                raise QueryTableError(
                    f"expander {expander.name!r} result {i}: needs a text, a language and one of the scene "
                    f"categories, got {item!r}"
                )
            if _norm_query(item.text) in seen:
                continue
            seen.add(_norm_query(item.text))
            out.append(dataclasses.replace(item, text=" ".join(item.text.split()), origin=f"expander:{expander.name}"))
    return out[:max_queries] if max_queries else out


def queries_for(params: SearchParams) -> list[Query]:
    table = load_query_table(params.queries_file)
    expander = load_expander(params.expander, params.expander_options) if params.expander else None
    return expand_queries(build_queries(table, params), expander, params.max_queries)


# =============================================================================================
# The release file
# =============================================================================================


def release_ids(path: str | os.PathLike[str]) -> list[str]:
    """The YouTube ids behind the view videos of a release QA file (jsonl: ``video_name`` =
    ``<id>_<view>.mp4``), sorted; a bad row is an error naming its line."""
    p = Path(path)
    found: set[str] = set()
    try:
        fh = p.open(encoding="utf-8")
    except OSError as e:
        raise UnitError(f"release file {p}: {e.strerror}", kind="bad_input", retryable=False) from None
    with fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                name = row["video_name"]
                stem = name[:-4] if name.endswith(".mp4") else name
                source, _view = ids.split_video_id(stem)
            except (ValueError, KeyError, TypeError) as e:
                raise UnitError(f"{p}:{n}: not a release row with a video_name '<id>_<view>.mp4' ({e})",
                                kind="bad_input", retryable=False) from None
            if not ids.YOUTUBE_ID.match(source):
                raise UnitError(f"{p}:{n}: {source!r} is not a YouTube id", kind="bad_input", retryable=False)
            found.add(source)
    return sorted(found)


def watch_url(video_id: str) -> str:
    return f"https://www.youtube.com/watch?v={video_id}"


# =============================================================================================
# Failure classification
# =============================================================================================

_PATTERNS: list[tuple[str, bool, re.Pattern[str]]] = [
    ("geo_blocked", False, re.compile(
        r"not (?:made this video )?available in your country|blocked it in your country|"
        r"geo.?restrict|not available from your location", re.I)),
    ("rate_limited", True, re.compile(
        r"HTTP Error 429|Too Many Requests|rate-?limit|try again later", re.I)),
    ("private", False, re.compile(r"private video|this video is private", re.I)),
    ("removed", False, re.compile(
        r"has been removed|account associated with this video has been terminated|"
        r"due to a copyright claim|violat\w+ YouTube", re.I)),
    ("gated", True, re.compile(r"confirm you'?re not a bot|captcha", re.I)),
    ("gated", False, re.compile(
        r"confirm your age|age.?restricted|inappropriate for some users|members.?only|join this channel|"
        r"requires payment|only available for registered users|sign in|login required|log in", re.I)),
    ("unavailable", True, re.compile(r"live event will begin|premieres in|is not currently live", re.I)),
    ("unavailable", False, re.compile(
        r"video unavailable|this video is unavailable|this video is not available|content isn'?t available|"
        r"video (?:does not|doesn't) exist|unsupported url|incomplete youtube id|not a valid url|"
        r"requested format is not available|no video formats found|HTTP Error 404|HTTP Error 410", re.I)),
    ("network", True, re.compile(
        r"urlopen error|timed out|timeout|connection (?:reset|refused|aborted)|remote end closed|"
        r"incompleteread|name or service not known|temporary failure in name resolution|"
        r"network is unreachable|no route to host|\bssl\b|certificate|HTTP Error 5\d\d|HTTP Error 403|"
        r"unable to download (?:webpage|video data|api page|json)|transport", re.I)),
]


def _chain(e: BaseException) -> Iterator[BaseException]:
    """The error and everything it wraps (yt-dlp keeps originals in ``exc_info`` and ``cause``)."""
    seen: set[int] = set()
    todo = [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        info = getattr(x, "exc_info", None)
        if isinstance(info, tuple) and len(info) > 1 and isinstance(info[1], BaseException):
            todo.append(info[1])
        for attr in ("cause", "__cause__", "__context__"):
            nxt = getattr(x, attr, None)
            if isinstance(nxt, BaseException):
                todo.append(nxt)


_COOKIE_HINT = re.compile(
    r"Use --cookies-from-browser or --cookies for the authentication\..*?(?:exporting YouTube cookies|$)", re.S)


def clean_message(msg: str) -> str:
    """yt-dlp's message made readable in a status row: no ``ERROR: `` prefix or ANSI colours, one
    line, curly apostrophes straight (YouTube writes "you’re"), yt-dlp's command-line cookie hint
    replaced by this project's option."""
    msg = re.sub(r"\x1b\[[0-9;]*m", "", msg).replace("\u2019", "'").strip()
    msg = re.sub(r"^ERROR:\s*", "", msg)
    lines = [x.strip() for x in msg.splitlines() if x.strip()]
    msg = " ".join(x if x[-1] in ".!?:;," or i == len(lines) - 1 else x + "." for i, x in enumerate(lines))
    msg = _COOKIE_HINT.sub("Pass cookies with crawl.net.cookies_file (`vsi-wild crawl --cookies FILE`).", msg)
    msg = msg.replace("(with --proxy)", "(crawl.net.proxy)")
    return " ".join(msg.split())


def classify_error(e: BaseException | str, what: str = "") -> UnitError:
    """A yt-dlp (or network) failure as a ``UnitError`` whose kind is one of ``ERROR_KINDS``."""
    if isinstance(e, UnitError):
        return e
    message = clean_message(str(e))
    kind: str | None = None
    retryable = True
    if not isinstance(e, str):
        from yt_dlp.networking.exceptions import HTTPError
        from yt_dlp.utils import GeoRestrictedError

        for x in _chain(e):
            if isinstance(x, GeoRestrictedError):
                kind, retryable = "geo_blocked", False
                break
            if isinstance(x, HTTPError) and x.status == 429:
                kind, retryable = "rate_limited", True
                break
    if kind is None:
        for k, r, pattern in _PATTERNS:
            if pattern.search(message):
                kind, retryable = k, r
                break
    if kind is None and not isinstance(e, str):
        from yt_dlp.networking.exceptions import TransportError

        if any(isinstance(x, (TransportError, ConnectionError, TimeoutError)) for x in _chain(e)):
            kind, retryable = "network", True
    if kind is None:
        kind, retryable = "ytdlp_error", True
    prefix = f"{what}: " if what else ""
    return UnitError(f"{prefix}{kind}: {message}", kind=kind, retryable=retryable)


# =============================================================================================
# 360° evidence and filters
# =============================================================================================


@dataclasses.dataclass(frozen=True)
class Projection:
    kind: str  # equirectangular | equirectangular_stereo | mesh | flat | unknown
    evidence: dict[str, Any]

    @property
    def is_360(self) -> bool:
        return self.kind in ("equirectangular", "equirectangular_stereo")


def video_formats(info: Mapping[str, Any]) -> list[dict[str, Any]]:
    fmts = [f for f in info.get("formats") or [] if f.get("vcodec") != "none" and (f.get("height") or f.get("width"))]
    if not fmts and info.get("height"):
        fmts = [dict(info)]
    return fmts


def best_video_format(info: Mapping[str, Any]) -> dict[str, Any] | None:
    fmts = video_formats(info)
    return max(fmts, key=lambda f: ((f.get("height") or 0), (f.get("width") or 0), f.get("tbr") or 0)) if fmts else None


def detect_projection(info: Mapping[str, Any], spherical: Mapping[str, Any] | None = None,
                      width: int | None = None, height: int | None = None) -> Projection:
    """360° evidence, strongest first: the file's spherical metadata (ffprobe), the projection
    YouTube reports per format (yt-dlp puts it in ``format_note``: "equirectangular", "mesh",
    "equirectangular_threed_top_bottom"), a ``projection`` field some extractors set, then the
    frame's 2:1 shape."""
    evidence: dict[str, Any] = {}
    if spherical and spherical.get("projection"):
        evidence["spherical"] = dict(spherical)
    notes = sorted({str(f.get("format_note") or "") for f in info.get("formats") or []} |
                   {str(info.get("format_note") or "")})
    proj_notes = sorted({p for n in notes for p in re.findall(r"(equirectangular\w*|mesh)", n.lower())})
    if proj_notes:
        evidence["format_note"] = proj_notes
    if info.get("projection"):
        evidence["projection_field"] = str(info["projection"])
    if width is None or height is None:
        best = best_video_format(info)
        if best is not None:
            width, height = best.get("width"), best.get("height")
    if width and height:
        evidence["aspect"] = round(width / height, 4)
    stereo = (spherical or {}).get("stereo_mode") not in (None, "2d", "mono")

    names = [str((spherical or {}).get("projection") or "").lower(), *proj_notes,
             str(info.get("projection") or "").lower()]
    for name in names:
        if not name:
            continue
        if "mesh" in name or "cubemap" in name:
            return Projection("mesh", evidence)
        if "equirect" in name:
            if "threed" in name or "top_bottom" in name or "stereo" in name or stereo:
                return Projection("equirectangular_stereo", evidence)
            return Projection("equirectangular", evidence)
    if width and height:
        aspect = width / height
        if 1.98 <= aspect <= 2.02:
            return Projection("equirectangular", evidence)
        if 0.98 <= aspect <= 1.02 and re.search(r"\b360|vr\b", str(info.get("title") or ""), re.I):
            return Projection("equirectangular_stereo", evidence)
        return Projection("flat", evidence)
    return Projection("unknown", evidence)


def is_short(info: Mapping[str, Any]) -> bool:
    urls = " ".join(str(info.get(k) or "") for k in ("webpage_url", "original_url", "url"))
    if info.get("media_type") == "short" or "/shorts/" in urls:
        return True
    w, h, d = info.get("width"), info.get("height"), info.get("duration")
    return bool(w and h and d and h > w and d <= 180)


def is_live(info: Mapping[str, Any]) -> bool:
    return bool(info.get("is_live")) or info.get("live_status") in ("is_live", "is_upcoming", "post_live")


def prefilter(entry: Mapping[str, Any], params: SearchParams) -> str | None:
    """A reason to reject a flat search result before asking for its full info (saves requests)."""
    d = entry.get("duration")
    if d is not None and d < params.min_duration_s:
        return f"too short: {d:.0f} s < {params.min_duration_s:.0f} s"
    if d is not None and d > params.max_duration_s:
        return f"too long: {d:.0f} s > {params.max_duration_s:.0f} s"
    if params.reject_live and is_live(entry):
        return f"live: {entry.get('live_status') or 'is_live'}"
    if params.reject_shorts and ("/shorts/" in str(entry.get("url") or "") or entry.get("media_type") == "short"):
        return "a short"
    return None


def reject_reason(info: Mapping[str, Any], params: SearchParams) -> str | None:
    """Why a fully extracted result is rejected, or None to keep it."""
    if reason := prefilter(info, params):
        return reason
    if info.get("duration") is None:
        return "no duration (a live stream or an unfinished premiere?)"
    if params.reject_shorts and is_short(info):
        return "a short"
    best = best_video_format(info)
    if best is None:
        return "no video formats"
    if (best.get("height") or 0) < params.min_height:
        return f"resolution too low: best {best.get('width')}x{best.get('height')} < height {params.min_height}"
    proj = detect_projection(info)
    if proj.kind == "equirectangular_stereo" and not params.allow_stereo:
        return "stereoscopic 360° (top-bottom) is not supported"
    if params.require_360 and not proj.is_360:
        return f"no 360° evidence (projection {proj.kind}, evidence {json.dumps(proj.evidence, sort_keys=True)})"
    return None


# =============================================================================================
# yt-dlp, politely
# =============================================================================================


class Session:
    """Process-wide politeness: one YouTube operation at a time (``max_concurrent``), at least
    ``min_interval_s`` apart, and a circuit breaker that stops contacting YouTube in this run after
    ``max_consecutive_rate_limits`` rate-limited operations in a row (YouTube says "for up to an
    hour"; hammering makes it longer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sem: threading.Semaphore | None = None
        self._sem_n = 0
        self._last = 0.0
        self.consecutive_rate_limits = 0
        self.sleep: Callable[[float], None] = time.sleep

    def reset(self) -> None:
        with self._lock:
            self._last = 0.0
            self.consecutive_rate_limits = 0

    def _semaphore(self, n: int) -> threading.Semaphore:
        with self._lock:
            if self._sem is None or self._sem_n != n:
                self._sem, self._sem_n = threading.Semaphore(n), n
            return self._sem

    @contextmanager
    def turn(self, net: NetParams) -> Iterator[None]:
        if self.consecutive_rate_limits >= net.max_consecutive_rate_limits:
            raise UnitError(
                f"rate_limited: not contacting YouTube again in this run: it rate-limited "
                f"{self.consecutive_rate_limits} operations in a row. Wait (up to an hour), consider "
                f"crawl.net.cookies_file and a longer crawl.net.min_interval_s, then re-run",
                kind="rate_limited", retryable=True,
            )
        with self._semaphore(net.max_concurrent):
            with self._lock:
                wait = self._last + net.min_interval_s - time.monotonic()
            if wait > 0:
                self.sleep(wait)
            try:
                yield
            finally:
                with self._lock:
                    self._last = time.monotonic()

    def note(self, error: UnitError | None) -> None:
        with self._lock:
            if error is not None and error.kind == "rate_limited":
                self.consecutive_rate_limits += 1
            elif error is None:
                self.consecutive_rate_limits = 0


SESSION = Session()


class _YtdlpLogger:
    """yt-dlp's messages into logging (never to stdout, which the CLI owns)."""

    def __init__(self, logger: logging.Logger):
        self.logger = logger

    def debug(self, msg: str) -> None:
        if msg.startswith("[debug] "):
            self.logger.debug(msg)
        else:
            self.logger.info(msg)

    def info(self, msg: str) -> None:
        self.logger.info(msg)

    def warning(self, msg: str) -> None:
        self.logger.warning(msg)

    def error(self, msg: str) -> None:
        self.logger.error(msg)


def ytdlp_version() -> str:
    from yt_dlp.version import __version__

    return __version__


def _import(spec: str) -> Any:
    mod_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError, ValueError) as e:
        raise UnitError(f"crawl.net.extractors: cannot load {spec!r}: {e}", kind="bad_input", retryable=False) from None


def format_selector(params: DownloadParams) -> str:
    if params.format:
        return params.format
    h = params.max_height
    if params.audio:
        return f"bv*[height<={h}]+ba/b[height<={h}]/wv*+ba/w"
    return f"bv*[height<={h}]/b[height<={h}]/wv*/w"


@dataclasses.dataclass
class Downloaded:
    info: dict[str, Any]
    file: Path
    info_file: Path | None


class Ytdlp:
    """yt-dlp's Python API with the crawl's politeness, retries and error classes."""

    def __init__(self, net: NetParams, *, archive: str | os.PathLike[str] | None = None,
                 session: Session | None = None, logger: logging.Logger | None = None):
        self.net = net
        self.archive = os.fspath(archive) if archive else None
        self.session = session or SESSION
        self.logger = logger or logging.getLogger("vsi_wild.crawl.ytdlp")
        self._extractors = [_import(s) for s in net.extractors]

    # ------------------------------------------------------------------ params
    def params(self, **extra: Any) -> dict[str, Any]:
        net = self.net
        backoff = lambda n: min(net.backoff_s * 2 ** n, net.max_backoff_s)  # noqa: E731
        p: dict[str, Any] = {
            "quiet": True,
            "noprogress": True,
            "no_color": True,
            "logger": _YtdlpLogger(self.logger),
            "socket_timeout": net.socket_timeout_s,
            "retries": net.retries,
            "fragment_retries": net.retries,
            "extractor_retries": net.retries,
            "file_access_retries": 1,
            "retry_sleep_functions": {"http": backoff, "fragment": backoff, "extractor": backoff},
            "sleep_interval_requests": net.sleep_requests_s or None,
            "ignoreerrors": False,
            "noplaylist": True,
            "extractor_args": {k: dict(v) for k, v in net.extractor_args.items()},
        }
        if net.cookies_file:
            cookies = Path(net.cookies_file).expanduser()
            if not cookies.is_file():
                raise UnitError(f"crawl.net.cookies_file not found: {cookies}", kind="bad_input", retryable=False)
            p["cookiefile"] = str(cookies)
        if net.proxy is not None:
            p["proxy"] = net.proxy
        if net.enable_file_urls:
            p["enable_file_urls"] = True
        if net.js_runtimes is not None:
            p["js_runtimes"] = {k: dict(v) for k, v in net.js_runtimes.items()}
        if net.remote_components:
            p["remote_components"] = list(net.remote_components)
        p.update(extra)
        return p

    @contextmanager
    def ydl(self, **extra: Any) -> Iterator[Any]:
        from yt_dlp import YoutubeDL

        with YoutubeDL(self.params(**extra)) as ydl:
            # Added after the built-ins: an extractor with a built-in's key takes its place (and
            # position), so e.g. an offline "Youtube" extractor serves youtube.com URLs.
            for cls in self._extractors:
                ydl.add_info_extractor(cls())
            yield ydl

    def _call(self, what: str, fn: Callable[[Any], Any], retries: int | None = None, **extra: Any) -> Any:
        """Run ``fn(ydl)`` in the session's turn, retrying network errors with exponential backoff."""
        from yt_dlp.utils import YoutubeDLError

        retries = self.net.unit_retries if retries is None else retries
        for attempt in range(retries + 1):
            error: UnitError | None = None
            with self.session.turn(self.net):
                try:
                    with self.ydl(**extra) as ydl:
                        result = fn(ydl)
                except UnitError:
                    raise
                except (YoutubeDLError, OSError) as e:
                    error = classify_error(e, what)
                except Exception as e:  # noqa: BLE001 - yt-dlp extractors raise anything
                    if type(e).__module__.startswith("yt_dlp"):
                        error = classify_error(e, what)
                    else:
                        raise
            self.session.note(error)
            if error is None:
                return result
            if error.kind != "network" or attempt == retries:
                raise error
            wait = jitter(min(self.net.backoff_s * 2 ** attempt, self.net.max_backoff_s))
            self.logger.warning("%s (attempt %d of %d; retrying in %.0f s)", error, attempt + 1, retries + 1, wait)
            self.session.sleep(wait)
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ operations
    def search(self, text: str, n: int) -> list[dict[str, Any]]:
        """The first ``n`` results of a YouTube search (flat: id, url, title, duration, ...)."""
        def run(ydl: Any) -> list[dict[str, Any]]:
            res = ydl.extract_info(f"ytsearch{n}:{text}", download=False)
            return [ydl.sanitize_info(e) for e in (res or {}).get("entries") or [] if e]

        return self._call(f"search {text!r}", run, extract_flat="in_playlist")

    def extract(self, url: str) -> dict[str, Any]:
        """The full info dict of one video, without downloading or choosing a format."""
        def run(ydl: Any) -> dict[str, Any]:
            info = ydl.extract_info(url, download=False, process=False)
            if not info:
                raise UnitError(f"{url}: yt-dlp returned no info", kind="ytdlp_error")
            return ydl.sanitize_info(info)

        return self._call("", run)

    def download(self, url: str, out_dir: Path, params: DownloadParams, *, use_archive: bool = True) -> Downloaded:
        """Download ``url`` into ``out_dir`` as ``<id>.<ext>`` with ``<id>.info.json`` beside it."""
        net = self.net
        extra: dict[str, Any] = {
            "format": format_selector(params),
            "merge_output_format": params.merge_output_format,
            "outtmpl": {"default": str(out_dir / "%(id)s.%(ext)s")},
            "paths": {"home": str(out_dir), "temp": str(out_dir)},
            "writeinfojson": True,
            "overwrites": True,
            "continuedl": False,
            "sleep_interval": net.sleep_before_download_s or None,
            "max_sleep_interval": max(net.max_sleep_before_download_s, net.sleep_before_download_s) or None,
        }
        if net.rate_limit:
            from yt_dlp.utils import parse_bytes

            rate = parse_bytes(net.rate_limit)
            if rate is None:
                raise UnitError(f"crawl.net.rate_limit {net.rate_limit!r}: expected bytes/s like '10M'",
                                kind="bad_input", retryable=False)
            extra["ratelimit"] = rate
        if use_archive and self.archive:
            Path(self.archive).parent.mkdir(parents=True, exist_ok=True)
            extra["download_archive"] = self.archive

        def run(ydl: Any) -> Downloaded:
            info = ydl.extract_info(url, download=True)
            if info is None:
                raise UnitError(f"{url}: the download archive {self.archive} already lists it but its file "
                                "is not in the store", kind="ytdlp_error")
            info = ydl.sanitize_info(info)
            files = [Path(d["filepath"]) for d in info.get("requested_downloads") or [] if d.get("filepath")]
            if not files or not files[0].is_file():
                raise UnitError(f"{url}: yt-dlp finished without a file", kind="ytdlp_error")
            info_file = out_dir / f"{info['id']}.info.json"
            return Downloaded(info, files[0], info_file if info_file.is_file() else None)

        return self._call("", run, **extra)


def in_archive(archive: str | os.PathLike[str] | None, video_id: str, extractor_key: str = "youtube") -> bool:
    """Whether yt-dlp's download archive lists ``<extractor> <id>``."""
    if not archive or not Path(archive).is_file():
        return False
    line = f"{extractor_key.lower()} {video_id}"
    with open(archive, encoding="utf-8") as fh:
        return any(raw.strip() == line for raw in fh)


# =============================================================================================
# Search
# =============================================================================================


class JsonCache:
    """Answers of a search that failed half way, so that the re-run asks only the rest."""

    def __init__(self, root: Path | None):
        self.root = root

    def _path(self, key: str) -> Path:
        assert self.root is not None
        return self.root / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"

    def get(self, key: str) -> Any | None:
        if self.root is None:
            return None
        p = self._path(key)
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def put(self, key: str, value: Any) -> None:
        if self.root is None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        p = self._path(key)
        tmp = p.with_name(f"{p.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        tmp.write_text(json.dumps(value), encoding="utf-8")
        os.replace(tmp, p)


@dataclasses.dataclass
class SearchResult:
    queries: list[dict[str, Any]]
    candidates: list[dict[str, Any]]
    failures: list[UnitError]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def search_candidates(client: Ytdlp, queries: Sequence[Query], params: SearchParams, *,
                      cache: JsonCache | None = None,
                      progress: Callable[[int, int, str], None] | None = None) -> SearchResult:
    """Run every query, then extract each new candidate's full info and apply the filters.

    A retryable failure (network, rate limit) of one query or one candidate is collected in
    ``failures`` (the caller fails the unit; cached answers make the re-run ask only the rest); a
    rate limit stops the search at once. A non-retryable one (a private or removed video) rejects
    that candidate with its reason.
    """
    cache = cache or JsonCache(None)
    failures: list[UnitError] = []
    query_rows: list[dict[str, Any]] = []
    by_id: dict[str, dict[str, Any]] = {}
    total = len(queries)
    stopped = False
    for qi, q in enumerate(queries):
        row = {"query": q.text, "category": q.category, "language": q.language, "cue": q.cue, "term": q.term,
               "origin": q.origin, "results": None, "error_class": None, "error": None}
        query_rows.append(row)
        if stopped:
            row["error_class"], row["error"] = "rate_limited", "not asked: the search stopped at a rate limit"
            continue
        key = f"search\0{q.text}\0{params.results_per_query}"
        entries = cache.get(key)
        if entries is None:
            try:
                entries = client.search(q.text, params.results_per_query)
            except UnitError as e:
                row["error_class"], row["error"] = e.kind, str(e)
                failures.append(e)
                stopped = e.kind == "rate_limited"
                continue
            cache.put(key, entries)
        row["results"] = len(entries)
        for rank, entry in enumerate(entries):
            vid = entry.get("id")
            if not vid or not ids.YOUTUBE_ID.match(str(vid)):
                continue
            if vid in by_id:
                if q.text not in by_id[vid]["queries"]:
                    by_id[vid]["queries"].append(q.text)
                continue
            by_id[vid] = {"entry": entry, "query": q, "rank": rank, "queries": [q.text]}
        if progress:
            progress(qi + 1, total, "queries")

    candidates: list[dict[str, Any]] = []
    ids_sorted = list(by_id)
    for ci, vid in enumerate(ids_sorted):
        c = by_id[vid]
        entry, q = c["entry"], c["query"]
        info: dict[str, Any] | None = None
        reason = prefilter(entry, params)
        error_class = None
        if reason is None and not stopped:
            key = f"info\0{vid}"
            info = cache.get(key)
            if info is None:
                try:
                    info = client.extract(watch_url(vid))
                except UnitError as e:
                    if e.retryable:
                        failures.append(e)
                        stopped = stopped or e.kind == "rate_limited"
                        continue
                    reason, error_class = str(e), e.kind
                else:
                    cache.put(key, info)
            if info is not None:
                reason = reject_reason(info, params)
        elif reason is None:
            continue  # not extracted because of a rate limit: the failure is already recorded
        candidates.append(candidate_row(vid, entry, info, q, c["rank"], c["queries"], reason, error_class))
        if progress:
            progress(ci + 1, len(ids_sorted), "candidates")
    return SearchResult(query_rows, candidates, failures)


def candidate_row(vid: str, entry: Mapping[str, Any], info: Mapping[str, Any] | None, q: Query, rank: int,
                  queries: list[str], reason: str | None, error_class: str | None) -> dict[str, Any]:
    src = info if info is not None else entry
    best = best_video_format(src) if info is not None else None
    proj = detect_projection(info) if info is not None else None
    return {
        "source_id": vid,
        "url": str(src.get("webpage_url") or watch_url(vid)),
        "title": src.get("title"),
        "channel": src.get("channel") or src.get("uploader"),
        "duration_s": _float(src.get("duration")),
        "width": _int(best.get("width")) if best else None,
        "height": _int(best.get("height")) if best else None,
        "fps": _float(best.get("fps")) if best else None,
        "live_status": src.get("live_status"),
        "media_type": src.get("media_type"),
        "projection": proj.kind if proj else None,
        "projection_evidence": json.dumps(proj.evidence, sort_keys=True) if proj else None,
        "query": q.text,
        "category": q.category,
        "language": q.language,
        "queries": list(queries),
        "rank": rank,
        "accepted": reason is None,
        "reject_reason": reason,
        "error_class": error_class,
        "extracted": info is not None,
        "info_json": json.dumps(src, sort_keys=True, default=str),
    }


def _float(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _int(x: Any) -> int | None:
    v = _float(x)
    return int(v) if v is not None else None


# =============================================================================================
# Provenance of a downloaded file
# =============================================================================================


def ffprobe_video(path: str | os.PathLike[str], timeout_s: float = 120.0) -> dict[str, Any]:
    """Width, height, fps, duration, codec and spherical metadata of a file's first video stream."""
    cmd = ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_streams", "-show_format", "-of", "json",
           os.fspath(path)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UnitError(f"{path}: ffprobe failed: {e}", kind="bad_input", retryable=False) from None
    if out.returncode != 0:
        raise UnitError(f"{path}: not a readable video: {out.stderr.strip()[:300]}", kind="bad_input",
                        retryable=False)
    data = json.loads(out.stdout or "{}")
    streams = data.get("streams") or []
    if not streams:
        raise UnitError(f"{path}: no video stream", kind="bad_input", retryable=False)
    s = streams[0]
    spherical = None
    stereo = None
    for sd in s.get("side_data_list") or []:
        t = sd.get("side_data_type", "")
        if t == "Spherical Mapping":
            spherical = {k: v for k, v in sd.items() if k != "side_data_type"}
        elif t == "Stereo 3D":
            stereo = sd.get("type")
    if spherical is not None and stereo:
        spherical["stereo_mode"] = stereo
    num, _, den = str(s.get("avg_frame_rate") or "0/1").partition("/")
    fps = float(num) / float(den) if den and float(den) else None
    duration = _float(s.get("duration")) or _float((data.get("format") or {}).get("duration"))
    return {"width": _int(s.get("width")), "height": _int(s.get("height")), "fps": fps, "duration_s": duration,
            "codec": s.get("codec_name"), "spherical": spherical}


def source_row(video_id: str, info: Mapping[str, Any], *, path: str, size_bytes: int, sha256: str,
               probe: Mapping[str, Any], context: Mapping[str, Any], crawl_time: datetime,
               provenance: Mapping[str, Any]) -> dict[str, Any]:
    """The registry row (schema.SOURCE) of a downloaded YouTube video."""
    proj = detect_projection(info, probe.get("spherical"), probe.get("width"), probe.get("height"))
    fmt_fps = _float(info.get("fps"))
    return {
        "source_id": video_id,
        "origin": "youtube",
        "path": path,
        "url": str(info.get("webpage_url") or watch_url(video_id)),
        "title": info.get("title"),
        "channel": info.get("channel") or info.get("uploader"),
        "license": info.get("license") or "YouTube standard license",
        "upload_date": info.get("upload_date"),
        "query": context.get("query"),
        "category": context.get("category"),
        "language": context.get("language"),
        "crawl_time": crawl_time,
        "ytdlp_version": ytdlp_version(),
        "projection": proj.kind,
        "duration_s": _float(info.get("duration")) or probe.get("duration_s"),
        "width": probe.get("width") or _int(info.get("width")),
        "height": probe.get("height") or _int(info.get("height")),
        "fps": probe.get("fps") or fmt_fps,
        "n_frames": None,
        "size_bytes": size_bytes,
        "content_sha256": sha256,
        "codec": probe.get("codec") or info.get("vcodec"),
        "provenance": json.dumps({**provenance, "projection_evidence": proj.evidence,
                                  "format_id": info.get("format_id"), "format_note": info.get("format_note")},
                                 sort_keys=True, default=str),
    }


def jitter(seconds: float) -> float:
    """A wait with +-20% jitter, so that parallel crawlers do not retry in lockstep."""
    return seconds * random.uniform(0.8, 1.2)
