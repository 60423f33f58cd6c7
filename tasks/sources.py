"""Registering local video files as sources (`vsi-wild add`, and `sources.paths` in the config)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vsi_wild import ids
from vsi_wild.store import Store

VIDEO_SUFFIXES = {".mp4", ".mkv", ".mov", ".webm", ".avi", ".m4v"}


def expand_paths(paths: list[str]) -> list[Path]:
    """Files as given, and the video files directly inside given folders (sorted)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(q for q in p.iterdir() if q.suffix.lower() in VIDEO_SUFFIXES and q.is_file())
        else:
            out.append(p)
    return out


def register_local(store: Store, paths: list[str]) -> list[str]:
    """Register local files (absolute paths) as sources of origin "local"; return their ids.

    The id depends on the file's name and absolute path, so re-adding the same file is a no-op
    and replacing the file's bytes keeps its id (the probe stage notices the new content).
    """
    added = []
    for path in expand_paths(paths):
        path = path.resolve()
        sid = ids.local_source_id(path.stem, str(path))
        store.undo_remove(sid)  # adding a file again is the person's own word: it overrides a removal
        if store.registry_row(sid) is None:
            store.register_source(_local_row(sid, path))
        added.append(sid)
    return added


def _local_row(sid: str, path: Path) -> dict:
    row: dict[str, Any] = {
        name: None
        for name in (
            "url",
            "title",
            "channel",
            "license",
            "upload_date",
            "query",
            "category",
            "language",
            "crawl_time",
            "ytdlp_version",
            "projection",
            "duration_s",
            "width",
            "height",
            "fps",
            "n_frames",
            "size_bytes",
            "content_sha256",
            "codec",
        )
    }
    row.update(
        source_id=sid, origin="local", path=str(path), title=path.name, provenance=json.dumps({"added_from": str(path)})
    )
    return row
