"""The search: every query through yt-dlp, then each new candidate's full info and the filters."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from vsi_wild import ids
from vsi_wild.errors import UnitError
from vsi_wild.stages.crawl.cache import JsonCache
from vsi_wild.stages.crawl.client import Ytdlp, watch_url
from vsi_wild.stages.crawl.filters import prefilter, reject_reason
from vsi_wild.stages.crawl.params import SearchParams
from vsi_wild.stages.crawl.queries import Query
from vsi_wild.stages.crawl.rows import candidate_row


@dataclasses.dataclass
class SearchResult:
    queries: list[dict[str, Any]]
    candidates: list[dict[str, Any]]
    failures: list[UnitError]


def search_candidates(
    client: Ytdlp,
    queries: Sequence[Query],
    params: SearchParams,
    *,
    cache: JsonCache | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> SearchResult:
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
        row: dict[str, Any] = {
            "query": q.text,
            "category": q.category,
            "language": q.language,
            "cue": q.cue,
            "term": q.term,
            "origin": q.origin,
            "results": None,
            "error_class": None,
            "error": None,
        }
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
