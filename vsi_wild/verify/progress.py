"""What a reviewer marked as verified, per video: ``<data root>/verify/<video_id>.json``.

Written by the app (atomically), read by its videos page and by `vsi-wild status`. It records
the reviewer's marks only; the corrections themselves are in the fix files.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from vsi_wild.store import Store

FOLDER = "verify"


class Progress(BaseModel):
    model_config = ConfigDict(extra="forbid")

    temporal_verified: bool = Field(False, description="the video's instances (VOO, VOC) were checked")
    clips_verified: list[int] = Field(default_factory=list, description="motion clips (VMR) checked")
    questions: dict[str, Literal["accept", "reject"]] = Field(
        default_factory=dict, description="question id -> the reviewer's verdict"
    )
    by: dict[str, str] = Field(default_factory=dict, description="what was marked ('temporal', 'clip:<n>') -> by whom")
    updated_at: str | None = None


def path(store: Store, video_id: str) -> str:
    return store.path(FOLDER, f"{video_id}.json")


def read(store: Store, video_id: str) -> Progress:
    p = path(store, video_id)
    if not store.exists(p):
        return Progress()
    return Progress.model_validate_json(store.fs.cat_file(p))


def write(store: Store, video_id: str, progress: Progress, reviewer: str | None = None) -> Progress:
    """Write the marks; those new since the file as it is (a clip, 'temporal') are recorded as ``reviewer``'s."""
    if reviewer is not None:
        before = read(store, video_id)
        by = {k: v for k, v in {**before.by, **progress.by}.items()}
        if progress.temporal_verified and not before.temporal_verified:
            by["temporal"] = reviewer
        for c in set(progress.clips_verified) - set(before.clips_verified):
            by[f"clip:{c}"] = reviewer
        progress = progress.model_copy(update={"by": by})
    progress = progress.model_copy(
        update={
            "clips_verified": sorted(set(progress.clips_verified)),
            "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
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
        lines.append(
            f"{vid}: temporal {'verified' if p.temporal_verified else 'not verified'}, "
            f"clips {len(p.clips_verified)}/{clips_of.get(vid, '?')}, "
            f"questions {len(p.questions)}/{'?' if n_q is None else n_q} reviewed"
        )
    return lines


class Patch(BaseModel):
    """One mark changed (a page sends only what it changes: two tabs never undo each other's marks)."""

    model_config = ConfigDict(extra="forbid")
    temporal_verified: bool | None = None
    clip: int | None = Field(None, ge=0)
    clip_verified: bool | None = None
    question: str | None = None
    verdict: Literal["accept", "reject"] | None = None


def patch(store: Store, video_id: str, change: Patch, reviewer: str | None = None) -> Progress:
    """Apply one change to the video's marks as they are now (``reviewer`` recorded as its author)."""
    p = read(store, video_id)
    update: dict = {}
    if change.temporal_verified is not None:
        update["temporal_verified"] = change.temporal_verified
    if change.clip is not None and change.clip_verified is not None:
        clips = set(p.clips_verified)
        clips.add(change.clip) if change.clip_verified else clips.discard(change.clip)
        update["clips_verified"] = sorted(clips)
    if change.question is not None and change.verdict is not None:
        update["questions"] = {**p.questions, change.question: change.verdict}
    return write(store, video_id, p.model_copy(update=update), reviewer)
