"""What the crawl remembers between runs: a search's answers so far, and yt-dlp's download archive."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any


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


def in_archive(archive: str | os.PathLike[str] | None, video_id: str, extractor_key: str = "youtube") -> bool:
    """Whether yt-dlp's download archive lists ``<extractor> <id>``."""
    if not archive or not Path(archive).is_file():
        return False
    line = f"{extractor_key.lower()} {video_id}"
    with open(archive, encoding="utf-8") as fh:
        return any(raw.strip() == line for raw in fh)
