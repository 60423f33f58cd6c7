"""Names of the pipeline's units: sources, views (videos) and clips.

A *source* is one 360° video. Its id is a YouTube id (11 characters of ``[A-Za-z0-9_-]``) or a
project id with a prefix (``sample-...`` for generated samples, ``local-...`` for files added by
hand). A *video* is one perspective view of a source: ``f"{source_id}_{view}"``; the released
benchmark names its files ``f"{video_id}.mp4"``. A *clip* is a fixed-length window of a video:
``f"{video_id}@{index:04d}"``.
"""

from __future__ import annotations

import hashlib
import re

# View name -> yaw in degrees. Positive yaw turns right (clockwise seen from above): "right" looks
# 90° clockwise of the panorama's centre column. Order is the release's canonical order.
VIEWS: dict[str, float] = {"front": 0.0, "right": 90.0, "back": 180.0, "left": 270.0}

YOUTUBE_ID = re.compile(r"^[A-Za-z0-9_-]{11}$")
PROJECT_ID = re.compile(r"^(sample|local)-[a-z0-9][a-z0-9-]{0,62}$")
_CLIP_SEP = "@"


class BadId(ValueError):
    """An id that does not follow the naming rules above."""


def check_source_id(source_id: str) -> str:
    if YOUTUBE_ID.match(source_id) or PROJECT_ID.match(source_id):
        return source_id
    raise BadId(
        f"bad source id {source_id!r}: expected a YouTube id ([A-Za-z0-9_-]{{11}}) "
        "or 'sample-...'/'local-...' (lowercase letters, digits, '-')"
    )


def video_id(source_id: str, view: str) -> str:
    if view not in VIEWS:
        raise BadId(f"bad view {view!r}: expected one of {sorted(VIEWS)}")
    return f"{check_source_id(source_id)}_{view}"


def split_video_id(vid: str) -> tuple[str, str]:
    """``"abc_def-ghi_front"`` -> ``("abc_def-ghi", "front")`` (YouTube ids may contain '_')."""
    source_id, sep, view = vid.rpartition("_")
    if not sep or view not in VIEWS:
        raise BadId(f"bad video id {vid!r}: expected '<source id>_<front|right|back|left>'")
    check_source_id(source_id)
    return source_id, view


def clip_id(vid: str, index: int) -> str:
    return f"{vid}{_CLIP_SEP}{index:04d}"


def split_clip_id(cid: str) -> tuple[str, int]:
    vid, sep, index = cid.rpartition(_CLIP_SEP)
    if not sep or not index.isdigit():
        raise BadId(f"bad clip id {cid!r}: expected '<video id>@<index>'")
    split_video_id(vid)
    return vid, int(index)


def unit_source(unit: str) -> str:
    """The source id that a source, video or clip unit belongs to."""
    if _CLIP_SEP in unit:
        unit = split_clip_id(unit)[0]
    try:
        return split_video_id(unit)[0]
    except BadId:
        return check_source_id(unit)


def local_source_id(stem: str, content_key: str) -> str:
    """A stable id for a file added by hand: a slug of its name and a short hash of its content key."""
    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")[:40] or "video"
    return f"local-{slug}-{hashlib.sha256(content_key.encode()).hexdigest()[:8]}"
