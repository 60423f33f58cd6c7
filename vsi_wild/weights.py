"""The weight files a config's backends need, and fetching them (`vsi-wild weights`).

Which weights: every weight field of every backend the config selects (the stages' declared
``BackendUse``s), each with its source from the backend's declaration. Fetching is explicit:
nothing here runs during a pipeline run, which reads weights from disk and checks them with the
same ``check_weight`` (``backend_problems``). Hugging Face sources download with huggingface_hub
(``HF_TOKEN``, ``HF_ENDPOINT``; its own retries resume a cut transfer); plain URLs download with
HTTP Range resume from a ``.part`` file kept between tries. Every result is checked against its
pinned sha256 before it is put in place.
"""

from __future__ import annotations

import http.client
import os
import shutil
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsi_wild.config import Config
from vsi_wild.stages.backends.params import weight_statuses
from vsi_wild.stages.backends.weights import WeightSource, WeightStatus, check_weight, forget_digests

TOKEN_URL = "https://huggingface.co/settings/tokens"


class FetchError(Exception):
    """A weight that could not be fetched; the message says what to do."""


@dataclass(frozen=True)
class NeededWeight:
    """One weight a config needs: which backends read it and what is on disk now."""

    backends: tuple[str, ...]  # "kind/name"
    status: WeightStatus

    @property
    def key(self) -> str:
        return self.status.key

    def row(self) -> dict[str, Any]:
        s, src = self.status, self.status.source
        return {
            "key": s.key,
            "path": None if s.path is None else str(s.path),
            "state": s.state,
            "detail": s.detail,
            "backends": list(self.backends),
            "origin": None if src is None else src.origin,
            "size": None if src is None else src.size,
            "sha256": None if src is None else src.sha256,
            "checksum_note": "" if src is None else src.checksum_note,
            "license": "" if src is None else src.license,
            "gated": bool(src and src.gated),
            "page": "" if src is None else src.page,
        }


def needed_weights(config: Config, only: list[str] | None = None) -> list[NeededWeight]:
    """The weights of the backends ``config`` selects, one per config key, in stage order;
    ``only`` keeps those keys (``models.sam3_checkpoint`` or ``sam3_checkpoint``)."""
    from vsi_wild.tasks import engine, registry

    found: dict[str, tuple[list[str], WeightStatus]] = {}
    for stage in registry.STAGES:
        for use in stage.backends:
            if not use.active(config):
                continue
            spec = engine.backend_spec(use, config)
            for status in weight_statuses(spec, config.models, getattr(config, spec.section)):
                users = found.setdefault(status.key, ([], status))[0]
                if f"{spec.kind}/{spec.name}" not in users:
                    users.append(f"{spec.kind}/{spec.name}")
    out = [NeededWeight(tuple(users), status) for users, status in found.values()]
    if only:
        unknown = [k for k in only if not any(k in (w.key, w.key.split(".", 1)[1]) for w in out)]
        if unknown:
            raise FetchError(
                f"no weight {', '.join(unknown)} in this config; its weights: {', '.join(w.key for w in out) or 'none'}"
            )
        out = [w for w in out if w.key in only or w.key.split(".", 1)[1] in only]
    return out


# ----------------------------------------------------------------------------- fetch
def fetch(weight: NeededWeight, weights_dir: Path, progress: Callable[[str], None] = print) -> WeightStatus:
    """Download one weight into place and check it; returns its new status. A present weight is
    left alone; a wrong one is replaced."""
    s, src = weight.status, weight.status.source
    if s.usable:
        return s
    if s.path is None:
        raise FetchError(f"`{s.key}` is not set: set it to a path under models.weights_dir first")
    if src is None:
        raise FetchError(f"`{s.key}`: its backend declares no source; put the file at {s.path}")
    s.path.parent.mkdir(parents=True, exist_ok=True)
    if src.repo_id:
        _fetch_hub(s.key, src, s.path, progress)
    else:
        _fetch_url(s.key, src, s.path, progress)
    forget_digests()
    done = check_weight(s.key, s.path, src, weights_dir)
    if not done.usable:
        if done.state == "wrong checksum" and s.path.is_file():
            s.path.unlink()  # never leave a file the run would refuse
        raise FetchError(f"`{s.key}`: the downloaded file was refused: {done.state} ({done.detail})")
    return done


def _gated_message(key: str, src: WeightSource, status: int | None) -> str:
    token = "HF_TOKEN is set, but its account has no access" if os.environ.get("HF_TOKEN") else "HF_TOKEN is not set"
    return (
        f"`{key}`: {src.repo_id} is gated ({'HTTP ' + str(status) if status else 'no access'}; {token}). "
        f"Request access: log in at huggingface.co, open {src.page or f'https://huggingface.co/{src.repo_id}'}, "
        f"accept its license ({src.license or 'see the model card'}) and wait for approval; then create a "
        f"read token at {TOKEN_URL} and `export HF_TOKEN=hf_...` before `vsi-wild weights fetch --only {key}`."
    )


def _http_status(error: BaseException) -> int | None:
    """The HTTP status of a huggingface_hub error, looking through the errors it wraps."""
    seen: BaseException | None = error
    while seen is not None:
        response = getattr(seen, "response", None)
        if response is not None and getattr(response, "status_code", None) is not None:
            return int(response.status_code)
        seen = seen.__cause__ or seen.__context__
    return None


def _fetch_hub(key: str, src: WeightSource, path: Path, progress: Callable[[str], None]) -> None:
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError

    if constants.HF_HUB_OFFLINE:
        raise FetchError(f"`{key}`: HF_HUB_OFFLINE is set; unset it to download {src.repo_id}")
    if src.repo_id is None:
        raise FetchError(f"`{key}`: its source names no Hugging Face repository")
    folder = len(src.files) > 1
    local_dir = path if folder else path.parent
    for name in src.files:
        progress(f"{key}: {src.repo_id}@{src.revision}/{name} -> {local_dir / name}")
        try:
            got = Path(
                hf_hub_download(
                    src.repo_id,
                    name,
                    revision=src.revision,
                    local_dir=local_dir,
                    endpoint=os.environ.get("HF_ENDPOINT") or None,
                    token=os.environ.get("HF_TOKEN") or None,
                )
            )
        except (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError) as e:
            status = _http_status(e)
            if isinstance(e, GatedRepoError) or status in (401, 403):
                raise FetchError(_gated_message(key, src, status)) from None
            raise FetchError(f"`{key}`: downloading {src.repo_id}/{name} failed: {e}") from None
        if not folder and got != path:
            shutil.move(got, path)  # the config names the file otherwise than the repo does


def _fetch_url(key: str, src: WeightSource, path: Path, progress: Callable[[str], None]) -> None:
    assert src.url is not None
    part = path.with_name(path.name + (".zip" if src.archive_member else "") + ".part")
    progress(f"{key}: {src.url} -> {path}" + (f" (resuming at {part.stat().st_size} bytes)" if part.exists() else ""))
    _download_resumable(src.url, part, progress)
    if src.archive_member:
        with zipfile.ZipFile(part) as z:
            members = [n for n in z.namelist() if n.rsplit("/", 1)[-1] == src.archive_member]
            if not members:
                raise FetchError(f"`{key}`: {src.url} has no member {src.archive_member}")
            tmp = path.with_name(path.name + ".tmp")
            with z.open(members[0]) as fin, open(tmp, "wb") as fout:
                shutil.copyfileobj(fin, fout)
        os.replace(tmp, path)
        part.unlink()
    else:
        os.replace(part, path)


def _download_resumable(url: str, part: Path, progress: Callable[[str], None], tries: int = 5) -> None:
    """GET ``url`` into ``part``, continuing from its current size with an HTTP Range request
    (a server that ignores the range restarts it); a cut connection is retried from where it was."""
    last: Exception | None = None
    for _ in range(tries):
        have = part.stat().st_size if part.exists() else 0
        req = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                if have and r.status != 206:
                    have = 0  # the range was ignored: start over
                total = r.headers.get("Content-Length")
                total_n = None if total is None else int(total) + have
                with open(part, "ab" if have else "wb") as f:
                    got = have
                    while chunk := r.read(1 << 20):
                        f.write(chunk)
                        got += len(chunk)
                if total_n is not None and got < total_n:
                    raise OSError(f"connection closed at {got} of {total_n} bytes")
                progress(f"  {got} bytes")
                return
        except urllib.error.HTTPError as e:
            if e.code == 416:  # the part file is already complete
                return
            raise FetchError(f"{url}: HTTP {e.code} {e.reason}") from None
        except (OSError, http.client.HTTPException) as e:  # a cut connection: IncompleteRead, reset, timeout
            last = e
            progress(f"  interrupted ({e!r}); resuming")
    raise FetchError(f"{url}: gave up after {tries} tries ({last})")
