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

One module per concern: ``params`` (the config section), ``queries``, ``release`` (the ids of a
release file), ``search``, ``filters`` (360° evidence), ``client`` (yt-dlp and the politeness
session), ``errors`` (failure classes), ``cache`` (a search's answers, the download archive) and
``rows`` (the candidate and source rows); the file itself is measured by ``stages/probe.py``.
Everything here takes plain data and returns plain data; the store and the engine are in
``tasks/crawl.py``. yt-dlp is only ever called through ``Ytdlp``, which is also the test seam:
``NetParams.extractors`` adds InfoExtractor classes (by import path) that replace yt-dlp's own
with the same key, so tests serve search results and info dicts from fixtures offline while the
rest of yt-dlp (format selection, file:// download, archive, errors) runs for real.
"""

from __future__ import annotations

from vsi_wild.stages.crawl.cache import JsonCache, in_archive
from vsi_wild.stages.crawl.client import (
    PROXY_ENV,
    SESSION,
    YOUTUBE_HOST,
    Downloaded,
    Session,
    Ytdlp,
    format_selector,
    jitter,
    watch_url,
    ytdlp_version,
)
from vsi_wild.stages.crawl.errors import ERROR_KINDS, classify_error, clean_message
from vsi_wild.stages.crawl.filters import (
    Projection,
    best_video_format,
    detect_projection,
    is_live,
    is_short,
    prefilter,
    reject_reason,
    video_formats,
)
from vsi_wild.stages.crawl.params import (
    HOME_ENV,
    SCENE_CATEGORIES,
    CrawlParams,
    DownloadParams,
    NetParams,
    SearchParams,
    project_home,
    resolve_path,
)
from vsi_wild.stages.crawl.queries import (
    LanguageQueries,
    Query,
    QueryExpander,
    QueryTable,
    QueryTableError,
    build_queries,
    expand_queries,
    load_expander,
    load_query_table,
    queries_for,
)
from vsi_wild.stages.crawl.release import release_ids
from vsi_wild.stages.crawl.rows import candidate_row, source_row
from vsi_wild.stages.crawl.search import SearchResult, search_candidates

__all__ = [
    "PROXY_ENV",
    "YOUTUBE_HOST",
    "JsonCache",
    "in_archive",
    "SESSION",
    "Downloaded",
    "Session",
    "Ytdlp",
    "format_selector",
    "jitter",
    "watch_url",
    "ytdlp_version",
    "ERROR_KINDS",
    "classify_error",
    "clean_message",
    "Projection",
    "best_video_format",
    "detect_projection",
    "is_live",
    "is_short",
    "prefilter",
    "reject_reason",
    "video_formats",
    "HOME_ENV",
    "SCENE_CATEGORIES",
    "CrawlParams",
    "DownloadParams",
    "NetParams",
    "SearchParams",
    "project_home",
    "resolve_path",
    "LanguageQueries",
    "Query",
    "QueryExpander",
    "QueryTable",
    "QueryTableError",
    "build_queries",
    "expand_queries",
    "load_expander",
    "load_query_table",
    "queries_for",
    "release_ids",
    "candidate_row",
    "source_row",
    "SearchResult",
    "search_candidates",
]
