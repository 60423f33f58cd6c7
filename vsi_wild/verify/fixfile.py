"""Saving a video's fix file from the browser: validated, atomic, rebased onto a newer file, history kept.

A reviewer's pending work is a list of *edits* (``drafts.py``): add a fix, or drop one the file
has. A save applies the edits to the file as it is *now* (``save_edits``): when another page, a
second reviewer or a person with an editor saved in between, the edits are rebased onto their
file, one by one through the same validation, and an edit that no longer applies is returned with
its error while the others are saved. ``validate`` gets the new text and raises the pipeline's own
``FixError`` (file, line, field), so the app and the ``metadata`` stage share one code path.
The file is edited as a YAML round trip (ruamel.yaml): fixes that are still there keep their
mapping objects, and with them the comments a person wrote by hand. The previous version goes to
``<fixes_dir>/.history/<video_id>/<n>.yaml`` first (undo: ``restore``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from vsi_wild.stages import fixes as fx

HISTORY = ".history"
NO_FILE = "none"  # the sha256 a page sends for a video without a fix file (as fixes.fingerprint says)
_LOCK = threading.Lock()  # one save at a time: the staleness check and the write are one step


class StaleSave(RuntimeError):
    """The fix file changed since the page loaded it."""


def _yaml() -> YAML:
    y = YAML()  # round trip: comments, key order and quoting are kept
    y.width = 100
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def sha256_text(data: bytes | None) -> str:
    return hashlib.sha256(data).hexdigest() if data is not None else NO_FILE


def read(path: Path) -> tuple[bytes | None, str]:
    data = path.read_bytes() if path.is_file() else None
    return data, sha256_text(data)


def plain(node: Any) -> Any:
    """A ruamel node as plain Python (dicts, lists, scalars; a YAML timestamp as its ISO text, as
    the fix models keep it)."""
    if isinstance(node, dict):
        return {str(k): plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [plain(v) for v in node]
    if isinstance(node, (dt.datetime, dt.date)):
        return node.isoformat().replace("+00:00", "Z")
    return node


VOCABULARY = fx.VOCABULARY_FILE.removesuffix(".yaml")  # the benchmark's file: its list is `vocabulary`


def list_key(name: str) -> str:
    """The key of a file's list of fixes: `fixes` in a video's file, `vocabulary` in the benchmark's."""
    return "vocabulary" if name == VOCABULARY else "fixes"


def fixes_of(data: bytes | None, key: str = "fixes") -> list[dict[str, Any]]:
    """The fixes of a fix file's bytes as plain dicts ([] for no file or no list)."""
    if not data:
        return []
    doc = _yaml().load(data.decode("utf-8"))
    items = doc.get(key) if isinstance(doc, dict) else None
    return [plain(f) for f in items] if isinstance(items, list) else []


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same fix, also when one of them lacks who made it and when."""
    if a == b:
        return True

    def strip(f: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in f.items() if k not in ("by", "at")}

    return strip(a) == strip(b)


def apply_edits(fixes: Sequence[dict[str, Any]], edits: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fix list after the edits, in order: ``{"kind": "add", "fix": f}`` appends f (replacing
    the fix *of the same reviewer* that decided the same thing, ``fixes.op_key``: a question's
    verdict, a clip's motion, a pair; a second reviewer's decision is kept beside the first's, the
    later one counts and ``vsi-wild fixes agreement`` compares them); ``{"kind": "drop", "fix": f}``
    removes f (nothing if it is gone already)."""
    out = list(fixes)
    for e in edits:
        fix = e["fix"]
        if e["kind"] == "drop":
            j = next((i for i, g in enumerate(out) if g == fix), None)
            if j is None:
                j = next((i for i, g in enumerate(out) if _same(g, fix)), None)
            if j is not None:
                del out[j]
        elif e["kind"] == "add":
            key = fx.op_key(fix)
            if key is not None:
                out = [g for g in out if not (fx.op_key(g) == key and g.get("by") == fix.get("by"))]
            out.append(fix)
        else:
            raise ValueError(f"unknown edit kind {e['kind']!r}")
    return out


def _node(value: Any, depth: int = 0) -> Any:
    """A new fix as ruamel nodes: block mapping, lists in flow style ([3, 11], [[62.0, 70.5]])."""
    if isinstance(value, dict):
        m = CommentedMap()
        for k, v in value.items():
            if v is not None:
                m[k] = _node(v, depth + 1)
        return m
    if isinstance(value, (list, tuple)):
        s = CommentedSeq(_node(v, depth + 1) for v in value)
        s.fa.set_flow_style()
        return s
    return value


def render(existing: bytes | None, video_id: str, fixes: Sequence[dict[str, Any]]) -> str:
    """The fix file's new text: ``existing`` with its ``fixes`` list made ``fixes`` (``video_id``
    ``vocabulary``: the benchmark's file, whose list is ``vocabulary``)."""
    key = list_key(video_id)
    y = _yaml()
    doc = y.load(existing.decode("utf-8")) if existing else None
    if not isinstance(doc, CommentedMap):
        doc = CommentedMap()
        if key == "fixes":
            doc["video_id"] = video_id
    old = doc.get(key)
    pool = list(enumerate(old)) if isinstance(old, CommentedSeq) else []
    items: list[Any] = []
    comments: dict[int, Any] = {}
    for fix in fixes:
        same = next((p for p in pool if plain(p[1]) == fix), None)
        if same is not None:
            pool.remove(same)
            if same[0] in old.ca.items:  # a comment on the lines above the fix moves with it
                comments[len(items)] = old.ca.items[same[0]]
            items.append(same[1])
        else:
            items.append(_node(fix))
    if isinstance(old, CommentedSeq) and old.fa.flow_style() is not True:
        old[:] = items
        old.ca.items.clear()
        old.ca.items.update(comments)
    else:
        seq = CommentedSeq(items)
        doc[key] = seq
        if not items:
            seq.fa.set_flow_style()
    buf = io.StringIO()
    y.dump(doc, buf)
    return buf.getvalue()


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def history_dir(path: Path, video_id: str) -> Path:
    return path.parent / HISTORY / video_id


def history(path: Path, video_id: str) -> list[int]:
    d = history_dir(path, video_id)
    return sorted(int(p.stem) for p in d.glob("*.yaml") if p.stem.isdigit()) if d.is_dir() else []


def _keep_previous(path: Path, video_id: str, data: bytes) -> None:
    versions = history(path, video_id)
    write_atomic(history_dir(path, video_id) / f"{(versions[-1] if versions else 0) + 1}.yaml", data)


def save(
    path: Path, video_id: str, fixes: Sequence[dict[str, Any]], loaded_sha256: str, validate: Callable[[str], None]
) -> str:
    """Write the video's fix file with ``fixes``; returns the new file's sha256. Raises StaleSave
    or the pipeline's FixError, and then writes nothing."""
    with _LOCK:
        data, current = read(path)
        if current != loaded_sha256:
            raise StaleSave(
                f"{path.name} changed since this page loaded it (another page or a person saved it): "
                "reload the page to see the current fixes; nothing was written"
            )
        text = render(data, video_id, fixes)
        validate(text)
        if data is not None:
            _keep_previous(path, video_id, data)
        write_atomic(path, text.encode("utf-8"))
        return sha256_text(text.encode("utf-8"))


def save_edits(
    path: Path, video_id: str, edits: Sequence[dict[str, Any]], validate: Callable[[str], object]
) -> tuple[str, list[tuple[dict[str, Any], fx.FixError]]]:
    """Apply ``edits`` to the fix file as it is now and write it; returns the new sha256 and the
    edits that did not apply, each with the pipeline's error. All at once when the result
    validates; else one by one, keeping each edit that still validates (a rebase). Writes nothing
    when nothing applies."""
    with _LOCK:
        data, sha = read(path)
        current = fixes_of(data, list_key(video_id))
        fixes, failed = apply_edits(current, edits), []
        try:
            validate(render(data, video_id, fixes))
        except fx.FixError:
            fixes = current
            for e in edits:
                trial = apply_edits(fixes, [e])
                try:
                    validate(render(data, video_id, trial))
                except fx.FixError as err:
                    failed.append((e, err))
                else:
                    fixes = trial
        if fixes == current:
            return sha, failed
        text = render(data, video_id, fixes)
        if data is not None:
            _keep_previous(path, video_id, data)
        write_atomic(path, text.encode("utf-8"))
        return sha256_text(text.encode("utf-8")), failed


def restore(path: Path, video_id: str, version: int, loaded_sha256: str, validate: Callable[[str], None]) -> str:
    """Make history version ``version`` the current file again (the current one is kept too)."""
    with _LOCK:
        data, current = read(path)
        if current != loaded_sha256:
            raise StaleSave(f"{path.name} changed since this page loaded it: reload; nothing was written")
        old = history_dir(path, video_id) / f"{version}.yaml"
        if not old.is_file():
            raise fx.FixError(str(path), None, None, f"no saved version {version}")
        text = old.read_bytes()
        validate(text.decode("utf-8"))
        if data is not None:
            _keep_previous(path, video_id, data)
        write_atomic(path, text)
        return sha256_text(text)
