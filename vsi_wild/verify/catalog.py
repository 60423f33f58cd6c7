"""What the verification app reads from the store: the view videos and each one's current outputs.

The current output of a stage for a unit is the one its status row names (state ``done``, the
row's key); a page never guesses a folder. A video id from a URL is looked up among the videos of
the current ``project`` outputs before anything is built from it (``Catalog.video``), so no request
can name a path outside the data root.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from vsi_wild import schema
from vsi_wild.config import Config
from vsi_wild.stages.metadata import motion_clips
from vsi_wild.stages.qa.common import question_id
from vsi_wild.store import Store, UnitRef

VIEWS_FILE = schema.VIEWS_FILE
VIEWS_TTL_S = 2.0


class NotFound(LookupError):
    """The id is not one of the store's videos (or questions, images, ...)."""


class NotReady(RuntimeError):
    """An output a page needs is missing or failed; the message says which and why."""


@dataclass
class Catalog:
    config: Config
    store: Store
    _views: dict[str, dict[str, Any]] = field(default_factory=dict)
    _views_key: tuple = ()
    _views_at: float = float("-inf")
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _question_answers: dict[str, tuple[UnitRef, dict[str, list[str]]]] = field(default_factory=dict)
    _concepts: dict[str, tuple[UnitRef, set[str]]] = field(default_factory=dict)

    # ------------------------------------------------------------------ status rows
    def status(self, stage: str, unit: str) -> dict[str, Any]:
        """{'state': done | failed | skipped | running | missing, 'error': ...} of one unit."""
        row = self.store.read_status(stage, unit)
        if row is None:
            return {"state": "missing", "error": f"{stage} has not run for {unit}"}
        return {"state": row["state"], "error": row["error"]}

    def _status_rows(self, stage: str) -> list[dict[str, Any]]:
        """Every status row of one stage, from its files (not ``Store.status_table``, which
        refreshes an index file: the app writes nothing but fix and progress files)."""
        base = self.store.path("status", stage)
        if not self.store.exists(base):
            return []
        units = sorted(
            p.rsplit("/", 1)[-1][: -len(".parquet")]
            for p in self.store.fs.glob(f"{base}/*.parquet")
            if not p.rsplit("/", 1)[-1].startswith("_")
        )
        return [r for r in (self.store.read_status(stage, u) for u in units) if r is not None]

    def current(self, stage: str, unit: str) -> UnitRef | None:
        row = self.store.read_status(stage, unit)
        if row is None or row["state"] != "done":
            return None
        ref = UnitRef(stage, unit, row["key"])
        return ref if self.store.is_complete(ref) else None

    def require(self, stage: str, unit: str) -> UnitRef:
        ref = self.current(stage, unit)
        if ref is None:
            st = self.status(stage, unit)
            raise NotReady(f"{stage}:{unit} is {st['state']}" + (f": {st['error']}" if st["error"] else ""))
        return ref

    def table(self, stage: str, unit: str, name: str, columns: list[str] | None = None) -> pa.Table:
        ref = self.require(stage, unit)
        return pq.read_table(self.store.local_file(ref, name), columns=columns)

    def num_rows(self, stage: str, unit: str, name: str) -> int | None:
        ref = self.current(stage, unit)
        return None if ref is None else pq.ParquetFile(self.store.local_file(ref, name)).metadata.num_rows

    # ------------------------------------------------------------------ videos
    def views(self) -> dict[str, dict[str, Any]]:
        """video_id -> its row of the current project output's views.parquet (and 'project_ref');
        the status rows are looked at again after VIEWS_TTL_S (every request names a video)."""
        with self._lock:
            if time.monotonic() - self._views_at < VIEWS_TTL_S:
                return self._views
        done = sorted((r["unit"], r["key"]) for r in self._status_rows("project") if r["state"] == "done")
        with self._lock:
            self._views_at = time.monotonic()
            if tuple(done) != self._views_key:
                views = {}
                for source, key in done:
                    ref = UnitRef("project", source, key)
                    if not self.store.is_complete(ref):
                        continue
                    for r in self.store.read_table(ref, VIEWS_FILE).to_pylist():
                        views[r["video_id"]] = {**r, "project_ref": ref}
                self._views, self._views_key = views, tuple(done)
            return self._views

    def video(self, video_id: str) -> dict[str, Any]:
        """The view row of a video of the store; NotFound for any other string."""
        row = self.views().get(video_id)
        if row is None:
            raise NotFound(f"no video {video_id!r} in this data root")
        return row

    def video_file(self, video_id: str) -> str:
        row = self.video(video_id)
        path = self.store.local_file(row["project_ref"], row["path"])
        if not path.is_file():
            raise NotFound(f"the view video of {video_id} is missing: {row['path']} of project:{row['source_id']}")
        return str(path)

    def n_motion_clips(self, video_id: str) -> int:
        return len(motion_clips(float(self.video(video_id)["duration_s"]), self.config.metadata.motion_clip_seconds))

    def questions(self, video_id: str) -> list[dict[str, Any]]:
        """The video's current questions (qa stage), each with its stable ``question_id``."""
        self.video(video_id)
        rows = self.table("qa", video_id, "questions.parquet").to_pylist()
        for r in rows:
            r["question_id"] = question_id(r)
        return rows

    def question_answers(self, video_id: str) -> dict[str, list[str]]:
        """The stable ids of the video's current questions, each with its answers ({} when its qa
        output is not current)."""
        ref = self.current("qa", video_id)
        if ref is None:
            return {}
        with self._lock:
            held = self._question_answers.get(video_id)
            if held is not None and held[0] == ref:
                return held[1]
        rows = (
            self.store.read_table(ref, "questions.parquet")
            .select(["video_id", "task_type", "subtype", "item", "answers"])
            .to_pylist()
        )
        out = {question_id(r): r["answers"] for r in rows}
        with self._lock:
            self._question_answers[video_id] = (ref, out)
        return out

    def concepts(self) -> list[str]:
        """Every concept of the benchmark's current metadata (every view video)."""
        out: set[str] = set()
        for vid in self.views():
            ref = self.current("metadata", vid)
            if ref is None:
                continue
            with self._lock:
                held = self._concepts.get(vid)
            if held is None or held[0] != ref:
                held = (
                    ref,
                    set(
                        pq.read_table(self.store.local_file(ref, "instances.parquet"), columns=["concept"])[
                            "concept"
                        ].to_pylist()
                    ),
                )
                with self._lock:
                    self._concepts[vid] = held
            out |= held[1]
        return sorted(out)

    def image_file(self, video_id: str, name: str) -> str:
        """A rendered VPO image of the video's current qa output, named as images.parquet lists it."""
        ref = self.require("qa", video_id)
        files = set(self.store.read_table(ref, "images.parquet")["file"].to_pylist())
        if name not in files:
            raise NotFound(f"no image {name!r} for {video_id}")
        return str(self.store.local_file(ref, name))
