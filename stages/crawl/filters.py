"""360° evidence of a video (its projection) and the filters that keep or reject a search result."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from vsi_wild.stages.crawl.params import SearchParams


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


def detect_projection(
    info: Mapping[str, Any],
    spherical: Mapping[str, Any] | None = None,
    width: int | None = None,
    height: int | None = None,
) -> Projection:
    """360° evidence, strongest first: the file's spherical metadata (ffprobe), the projection
    YouTube reports per format (yt-dlp puts it in ``format_note``: "equirectangular", "mesh",
    "equirectangular_threed_top_bottom"), a ``projection`` field some extractors set, then the
    frame's 2:1 shape."""
    evidence: dict[str, Any] = {}
    if spherical and spherical.get("projection"):
        evidence["spherical"] = dict(spherical)
    notes = sorted(
        {str(f.get("format_note") or "") for f in info.get("formats") or []} | {str(info.get("format_note") or "")}
    )
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

    names = [
        str((spherical or {}).get("projection") or "").lower(),
        *proj_notes,
        str(info.get("projection") or "").lower(),
    ]
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
