"""What a reviewer marked as verified, per video: ``<data root>/verify/<video_id>.json``.

Written by the app (atomically), read by its videos page and by `vsi-wild status`. It records
the reviewer's marks only; the corrections themselves are in the fix files.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from vsi_wild.store import Store

FOLDER = "verify"


class Progress(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temporal_verified: bool = Field(False, description="the video's instances (VOO, VOC) were checked")
    clips_verified: list[int] = Field(default_factory=list, description="motion clips (VMR) checked")
    questions: dict[str, Literal["accept", "reject"]] = Field(
        default_factory=dict, description="question id -> the reviewer's verdict")
    updated_at: str | None = None


def path(store: Store, video_id: str) -> str:
    return store.path(FOLDER, f"{video_id}.json")


def read(store: Store, video_id: str) -> Progress:
    p = path(store, video_id)
    if not store.exists(p):
        return Progress()
    return Progress.model_validate_json(store.fs.cat_file(p))


def write(store: Store, video_id: str, progress: Progress) -> Progress:
    progress = progress.model_copy(update={"clips_verified": sorted(set(progress.clips_verified)),
                                           "updated_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    store.write_bytes_atomic(path(store, video_id), json.dumps(progress.model_dump(), indent=1).encode())
    return progress


def recorded(store: Store) -> list[str]:
    """The videos with a progress file."""
    base = store.path(FOLDER)
    if not store.exists(base):
        return []
    return sorted(p.rsplit("/", 1)[-1][: -len(".json")] for p in store.fs.glob(f"{base}/*.json"))


def status_lines(store: Store, clips_of: dict[str, int], questions_of: dict[str, int | None]) -> list[str]:
    """`vsi-wild status`'s lines: per video with a progress file, what was verified of how much."""
    lines = []
    for vid in recorded(store):
        p = read(store, vid)
        n_q = questions_of.get(vid)
        lines.append(f"{vid}: temporal {'verified' if p.temporal_verified else 'not verified'}, "
                     f"clips {len(p.clips_verified)}/{clips_of.get(vid, '?')}, "
                     f"questions {len(p.questions)}/{'?' if n_q is None else n_q} reviewed")
    return lines
