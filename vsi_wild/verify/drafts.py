"""Pending work, kept on the server as it is made: one draft per video and reviewer.

``<data root>/verify/drafts/<video_id>/<reviewer>.json`` holds the reviewer's edits of the video's
fix file that are not saved yet (``fixfile.apply_edits``: add a fix, drop one of the file's), the
undo and redo stacks, and the edits a save could not rebase (with the pipeline's error). Every
page of the video shows and changes the same draft, so a second tab, a reload or a crashed browser
loses nothing; a save takes the edits out of the draft (those that did not apply stay in it).
"""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from vsi_wild.store import Store

FOLDER = "verify/drafts"
UNDO_DEPTH = 200
REVIEWER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
_LOCK = threading.Lock()


class Edit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["add", "drop"]
    fix: dict[str, Any]


class Failed(BaseModel):
    model_config = ConfigDict(extra="forbid")
    edit: Edit
    error: dict[str, Any] = Field(description="the pipeline's FixError: error, file, line, field, reason")


class Draft(BaseModel):
    model_config = ConfigDict(extra="forbid")
    video_id: str
    reviewer: str
    edits: list[Edit] = Field(default_factory=list)
    undo: list[list[Edit]] = Field(default_factory=list)
    redo: list[list[Edit]] = Field(default_factory=list)
    failed: list[Failed] = Field(default_factory=list, description="edits the last save could not rebase")
    updated_at: str | None = None

    def plain_edits(self) -> list[dict[str, Any]]:
        return [e.model_dump() for e in self.edits]


def check_reviewer(name: str) -> str:
    if not REVIEWER.match(name or ""):
        raise ValueError(
            f"reviewer name {name!r}: 1-40 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def path(store: Store, video_id: str, reviewer: str) -> str:
    return store.path(FOLDER, video_id, f"{check_reviewer(reviewer)}.json")


def read(store: Store, video_id: str, reviewer: str) -> Draft:
    p = path(store, video_id, reviewer)
    if not store.exists(p):
        return Draft(video_id=video_id, reviewer=reviewer)
    return Draft.model_validate_json(store.fs.cat_file(p))


def write(store: Store, draft: Draft) -> Draft:
    draft = draft.model_copy(update={"updated_at": datetime.now(UTC).isoformat(timespec="seconds")})
    store.write_bytes_atomic(
        path(store, draft.video_id, draft.reviewer), json.dumps(draft.model_dump(), indent=1).encode()
    )
    return draft


def reviewers(store: Store, video_id: str) -> list[str]:
    """Reviewers with a draft of the video."""
    base = store.path(FOLDER, video_id)
    if not store.exists(base):
        return []
    return sorted(p.rsplit("/", 1)[-1][: -len(".json")] for p in store.fs.glob(f"{base}/*.json"))


def change(draft: Draft, edits: list[Edit]) -> Draft:
    """The draft with ``edits`` as its pending edits; the previous ones become undoable."""
    undo = (draft.undo + [draft.edits])[-UNDO_DEPTH:]
    return draft.model_copy(
        update={"edits": edits, "undo": undo, "redo": [], "failed": [f for f in draft.failed if f.edit in edits]}
    )


def undo(draft: Draft) -> Draft:
    if not draft.undo:
        raise LookupError("nothing to undo")
    return draft.model_copy(
        update={"edits": draft.undo[-1], "undo": draft.undo[:-1], "redo": draft.redo + [draft.edits]}
    )


def redo(draft: Draft) -> Draft:
    if not draft.redo:
        raise LookupError("nothing to redo")
    return draft.model_copy(
        update={"edits": draft.redo[-1], "redo": draft.redo[:-1], "undo": draft.undo + [draft.edits]}
    )


def lock() -> threading.Lock:
    """One change of any draft at a time (read, check, write)."""
    return _LOCK
