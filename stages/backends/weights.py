"""Model weights by content: where each weight file comes from (``WeightSource``, declared with
the backend that reads it), its sha256 (computed once per file version and remembered), and the
check that tells a usable weight from a missing or wrong one.

A weight enters a stage's cache key by its content only, so the same files in another folder or
on another machine give the same keys. Hashing a multi-GB checkpoint takes seconds, so each
file's digest is remembered per (resolved path, size, mtime_ns) in ``.vsi-wild-sha256.json``
under the weights folder (and in memory): a file is read again only when it changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

DIGEST_CACHE = ".vsi-wild-sha256.json"
_CHUNK = 1 << 22


@dataclass(frozen=True)
class WeightSource:
    """Where a weight comes from: a Hugging Face repo (``repo_id`` at ``revision``, the repo
    ``files``: one for a file weight, several for a folder weight) or a plain ``url``. ``sha256``
    and ``size`` are pinned only where the publisher gives them; ``checksum_note`` says why not."""

    files: tuple[str, ...]
    repo_id: str | None = None
    revision: str = "main"
    url: str | None = None
    archive_member: str | None = None  # the url is a zip; the weight is its member of this name
    sha256: str | None = None  # of the single file
    size: int | None = None  # bytes, of the single file
    checksum_note: str = ""
    license: str = ""
    gated: bool = False  # access needs an accepted license and a token (HF_TOKEN)
    page: str = ""  # the model card / release page: where access is requested

    def __post_init__(self) -> None:
        if (self.repo_id is None) == (self.url is None):
            raise ValueError("a WeightSource has either a Hugging Face repo_id or a url")
        if self.url is not None and len(self.files) != 1:
            raise ValueError("a url source is one file")
        if self.archive_member is not None and self.url is None:
            raise ValueError("an archive member comes from a url")

    @property
    def origin(self) -> str:
        if self.url:
            return f"{self.url}!{self.archive_member}" if self.archive_member else self.url
        return f"hf://{self.repo_id}@{self.revision}/" + ",".join(self.files)


# ----------------------------------------------------------------------------- the catalogue
# Each pin below is copied from a source that publishes it; a checksum nobody publishes is None.
OPENAI_CLIP_VIT_B_32 = WeightSource(
    files=("ViT-B-32.pt",),
    # open_clip's pretrained.py and OpenAI's clip package download this URL; the path segment is
    # the file's sha256, which `clip` verifies after download.
    url="https://openaipublic.azureedge.net/clip/models/"
    "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af/ViT-B-32.pt",
    sha256="40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af",
    license="MIT (openai/CLIP)",
    page="https://github.com/openai/CLIP",
)
YOLOV8X_WORLDV2 = WeightSource(
    files=("yolov8x-worldv2.pt",),
    url="https://github.com/ultralytics/assets/releases/download/v8.1.0/yolov8x-worldv2.pt",
    checksum_note="not published (the release lists no checksums)",
    license="AGPL-3.0 (Ultralytics)",
    page="https://docs.ultralytics.com/models/yolo-world/",
)
SAM3 = WeightSource(
    files=("sam3.pt",),
    repo_id="facebook/sam3",
    checksum_note="not published beside the file (the Hub's LFS sha256 is on its file page)",
    license="SAM License (Meta)",
    gated=True,
    page="https://huggingface.co/facebook/sam3",
)
DA3_LARGE = WeightSource(
    files=("config.json", "model.safetensors"),
    repo_id="depth-anything/DA3-LARGE",
    checksum_note="not published",
    license="CC BY-NC 4.0",
    page="https://huggingface.co/depth-anything/DA3-LARGE",
)
SCRFD_10G_BNKPS = WeightSource(
    # insightface publishes SCRFD-10G (with keypoints) inside its antelopev2 model pack, on the
    # release tag insightface 2.1 downloads its packs from (insightface/utils/storage.py)
    files=("scrfd_10g_bnkps.onnx",),
    url="https://github.com/deepinsight/insightface/releases/download/model-zoo/antelopev2.zip",
    archive_member="scrfd_10g_bnkps.onnx",
    checksum_note="not published",
    license="insightface models: non-commercial research use",
    page="https://github.com/deepinsight/insightface",
)


# ----------------------------------------------------------------------------- digests
_MEMO: dict[tuple[str, int, int], str] = {}
_LOCK = threading.Lock()


def _stamp_key(p: Path) -> tuple[str, int, int]:
    st = p.stat()
    return (str(p.resolve()), st.st_size, st.st_mtime_ns)


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, data: dict[str, Any]) -> None:
    """Atomically (a reader never sees half a file); a read-only weights folder keeps digests in
    memory only."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=DIGEST_CACHE, dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, sort_keys=True, indent=0)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


def file_sha256(p: Path, cache_dir: Path | None = None) -> str:
    """The sha256 of file ``p``, read once per (resolved path, size, mtime_ns)."""
    key = _stamp_key(p)
    with _LOCK:
        hit = _MEMO.get(key)
    if hit is not None:
        return hit
    cache = cache_dir / DIGEST_CACHE if cache_dir is not None and cache_dir.is_dir() else None
    if cache is not None:
        with _LOCK:
            row = _read_cache(cache).get(key[0])
        if isinstance(row, list) and len(row) == 3 and tuple(row[:2]) == key[1:]:
            with _LOCK:
                _MEMO[key] = row[2]
            return row[2]
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    digest = h.hexdigest()
    with _LOCK:
        _MEMO[key] = digest
        if cache is not None:
            data = _read_cache(cache)
            data[key[0]] = [key[1], key[2], digest]
            _write_cache(cache, data)
    return digest


def folder_files(p: Path) -> list[Path]:
    """A folder weight's files, in name order; hidden ones left out (the digest cache,
    huggingface_hub's download metadata under .cache/)."""
    return sorted(
        q for q in p.rglob("*") if q.is_file() and not any(part.startswith(".") for part in q.relative_to(p).parts)
    )


def content_digest(p: Path, cache_dir: Path | None = None) -> str | list[list[str]] | None:
    """What a weight is, independent of where it lies: a file's sha256; a folder's sorted
    (relative name, sha256) of its files; None when nothing is there."""
    if p.is_file():
        return file_sha256(p, cache_dir)
    if p.is_dir():
        return [[q.relative_to(p).as_posix(), file_sha256(q, cache_dir)] for q in folder_files(p)]
    return None


def forget_digests() -> None:
    """Drop the in-memory digests (tests that rewrite a file within one mtime tick)."""
    with _LOCK:
        _MEMO.clear()


# ----------------------------------------------------------------------------- check
@dataclass(frozen=True)
class WeightStatus:
    """One weight field of one backend as found on disk."""

    key: str  # config key, e.g. models.sam3_checkpoint
    path: Path | None  # resolved; None when the key is unset
    state: Literal["present", "missing", "wrong checksum", "unset"]
    source: WeightSource | None
    sha256: str | None = None  # of a present single file, when it was computed
    detail: str = ""

    @property
    def usable(self) -> bool:
        return self.state == "present"


def check_weight(key: str, path: Path | None, source: WeightSource | None, cache_dir: Path | None) -> WeightStatus:
    """Present / missing / wrong checksum of one weight. A folder weight is present when every
    file its source lists is there; a pinned sha256 is compared with the file's when it bears
    the source's file name."""
    if path is None:
        return WeightStatus(key, None, "unset", source, detail=f"`{key}` is not set")
    if not path.exists():
        return WeightStatus(key, path, "missing", source)
    if path.is_dir():
        absent = [f for f in (source.files if source else ()) if not (path / f).is_file()]
        if absent:
            return WeightStatus(key, path, "missing", source, detail=f"missing in the folder: {', '.join(absent)}")
        return WeightStatus(key, path, "present", source)
    if source is not None and source.sha256 and path.name == source.files[0]:
        # the pin is the catalogue file's; a file of another name is the user's own conversion
        # (e.g. an open_clip state dict for the CLIP field), which no pin covers
        digest = file_sha256(path, cache_dir)
        if digest != source.sha256:
            return WeightStatus(
                key, path, "wrong checksum", source, digest, f"sha256 {digest}, expected {source.sha256}"
            )
        return WeightStatus(key, path, "present", source, digest)
    return WeightStatus(key, path, "present", source)


def problem_text(status: WeightStatus) -> str:
    """The requirement-check line of an unusable weight (names the config key to set)."""
    key = status.key
    if status.state == "unset":
        return f"`{key}` is not set to its weight file"
    if status.state == "missing":
        extra = f" ({status.detail})" if status.detail else ""
        return (
            f"model weights not found: {status.path}{extra} (config key `{key}`). "
            f"Put the file there or point `{key}` at it; `vsi-wild weights fetch` downloads it."
        )
    return (
        f"model weights at {status.path} have the wrong checksum: {status.detail} (config key `{key}`); "
        f"`vsi-wild weights fetch --only {key}` replaces them."
    )
