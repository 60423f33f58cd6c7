"""The crawl's table rows: a search candidate (schema.CRAWL_CANDIDATES) and a downloaded source (schema.SOURCE)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from vsi_wild.stages.crawl.client import watch_url, ytdlp_version
from vsi_wild.stages.crawl.filters import best_video_format, detect_projection
from vsi_wild.stages.crawl.queries import Query
from vsi_wild.stages.probe import finite_float


def candidate_row(
    vid: str,
    entry: Mapping[str, Any],
    info: Mapping[str, Any] | None,
    q: Query,
    rank: int,
    queries: list[str],
    reason: str | None,
    error_class: str | None,
) -> dict[str, Any]:
    src = info if info is not None else entry
    best = best_video_format(src) if info is not None else None
    proj = detect_projection(info) if info is not None else None
    return {
        "source_id": vid,
        "url": str(src.get("webpage_url") or watch_url(vid)),
        "title": src.get("title"),
        "channel": src.get("channel") or src.get("uploader"),
        "duration_s": finite_float(src.get("duration")),
        "width": _int(best.get("width")) if best else None,
        "height": _int(best.get("height")) if best else None,
        "fps": finite_float(best.get("fps")) if best else None,
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


def source_row(
    video_id: str,
    info: Mapping[str, Any],
    *,
    path: str,
    size_bytes: int,
    sha256: str,
    probe: Mapping[str, Any],
    context: Mapping[str, Any],
    crawl_time: datetime,
    provenance: Mapping[str, Any],
) -> dict[str, Any]:
    """The registry row (schema.SOURCE) of a downloaded YouTube video."""
    proj = detect_projection(info, probe.get("spherical"), probe.get("width"), probe.get("height"))
    fmt_fps = finite_float(info.get("fps"))
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
        "duration_s": finite_float(info.get("duration")) or probe.get("duration_s"),
        "width": probe.get("width") or _int(info.get("width")),
        "height": probe.get("height") or _int(info.get("height")),
        "fps": probe.get("fps") or fmt_fps,
        "n_frames": None,
        "size_bytes": size_bytes,
        "content_sha256": sha256,
        "codec": probe.get("codec") or info.get("vcodec"),
        "provenance": json.dumps(
            {
                **provenance,
                "projection_evidence": proj.evidence,
                "format_id": info.get("format_id"),
                "format_note": info.get("format_note"),
            },
            sort_keys=True,
            default=str,
        ),
    }


def _int(x: Any) -> int | None:
    v = finite_float(x)
    return int(v) if v is not None else None
