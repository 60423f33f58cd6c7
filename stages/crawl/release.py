"""The ids of a release: the YouTube ids behind the view videos of a release QA file."""

from __future__ import annotations

import json
import os
from pathlib import Path

from vsi_wild import ids
from vsi_wild.errors import UnitError


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
                raise UnitError(
                    f"{p}:{n}: not a release row with a video_name '<id>_<view>.mp4' ({e})",
                    kind="bad_input",
                    retryable=False,
                ) from None
            if not ids.YOUTUBE_ID.match(source):
                raise UnitError(f"{p}:{n}: {source!r} is not a YouTube id", kind="bad_input", retryable=False)
            found.add(source)
    return sorted(found)
