"""yt-dlp, politely: a process-wide session (one operation at a time, spaced, a circuit breaker for
rate limits) and the client that runs yt-dlp's Python API with retries and the crawl's error classes."""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vsi_wild.errors import UnitError
from vsi_wild.stages.crawl.errors import classify_error, unreachable
from vsi_wild.stages.crawl.params import DownloadParams, NetParams

YOUTUBE_HOST = "www.youtube.com"
PROXY_ENV = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")  # yt-dlp honours these


def watch_url(video_id: str) -> str:
    return f"https://www.youtube.com/watch?v={video_id}"


def jitter(seconds: float) -> float:
    """A wait with +-20% jitter, so that parallel crawlers do not retry in lockstep."""
    return seconds * random.uniform(0.8, 1.2)


class Session:
    """Process-wide politeness: one YouTube operation at a time (``max_concurrent``), at least
    ``min_interval_s`` apart, and circuit breakers that stop contacting YouTube in this run after
    ``max_consecutive_rate_limits`` rate-limited operations in a row (YouTube says "for up to an
    hour"; hammering makes it longer), or after ``max_consecutive_unreachable`` operations in a row
    that never reached it, or at once where YouTube's name does not resolve (``preflight``): an
    offline machine would otherwise spend its retries and their backoff on every id of the crawl
    before saying so."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sem: threading.Semaphore | None = None
        self._sem_n = 0
        self._last = 0.0
        self.consecutive_rate_limits = 0
        self.consecutive_unreachable: list[UnitError] = []
        self.offline: str | None = None  # why YouTube cannot be reached from here at all (``preflight``)
        self._preflown = False
        self.sleep: Callable[[float], None] = time.sleep

    def reset(self) -> None:
        with self._lock:
            self._last = 0.0
            self.consecutive_rate_limits = 0
            self.consecutive_unreachable = []
            self.offline, self._preflown = None, False

    def _semaphore(self, n: int) -> threading.Semaphore:
        with self._lock:
            if self._sem is None or self._sem_n != n:
                self._sem, self._sem_n = threading.Semaphore(n), n
            return self._sem

    @contextmanager
    def turn(self, net: NetParams) -> Iterator[None]:
        if self.consecutive_rate_limits >= net.max_consecutive_rate_limits:
            raise UnitError(
                f"rate_limited: not contacting YouTube again in this run: it rate-limited "
                f"{self.consecutive_rate_limits} operations in a row. Wait (up to an hour), consider "
                f"crawl.net.cookies_file and a longer crawl.net.min_interval_s, then re-run",
                kind="rate_limited",
                retryable=True,
            )
        self.preflight(net)
        if self.offline:
            raise UnitError(
                f"network: not contacting YouTube in this run: {self.offline}. Is this machine online (or "
                "crawl.net.proxy right)? Then re-run: it retries these",
                kind="network",
                retryable=True,
            )
        if len(self.consecutive_unreachable) >= net.max_consecutive_unreachable:
            last = str(self.consecutive_unreachable[-1]).removeprefix("network: ")
            raise UnitError(
                f"network: not contacting YouTube again in this run: {len(self.consecutive_unreachable)} operations "
                f"in a row never reached it (the last: {last}). Is this machine online (or crawl.net.proxy right)? "
                "Then re-run: it retries these",
                kind="network",
                retryable=True,
            )
        with self._semaphore(net.max_concurrent):
            with self._lock:
                wait = self._last + net.min_interval_s - time.monotonic()
            if wait > 0:
                self.sleep(wait)
            try:
                yield
            finally:
                with self._lock:
                    self._last = time.monotonic()

    def preflight(self, net: NetParams) -> None:
        """Once a run, before the first operation: where yt-dlp would connect directly (no proxy
        configured or in the environment, YouTube's own extractors), look YouTube's name up. A
        machine that cannot resolve it is offline: say so at once, where yt-dlp's retries and
        their backoff take minutes an id to fail."""
        with self._lock:
            if self._preflown:
                return
            self._preflown = True
        proxied = net.proxy or (net.proxy is None and any(os.environ.get(k) for k in PROXY_ENV))
        if proxied or net.extractors:
            return
        try:
            socket.getaddrinfo(YOUTUBE_HOST, 443)
        except OSError as e:
            self.offline = f"its name, {YOUTUBE_HOST}, does not resolve here ({e})"

    def note(self, error: UnitError | None) -> None:
        with self._lock:
            if error is not None and error.kind == "rate_limited":
                self.consecutive_rate_limits += 1
            elif error is None:
                self.consecutive_rate_limits = 0
            # any answer from the host, even a refusal, shows it is reachable
            self.consecutive_unreachable = (
                [*self.consecutive_unreachable, error] if error is not None and unreachable(error) else []
            )


SESSION = Session()


class _YtdlpLogger:
    """yt-dlp's messages into logging (never to stdout, which the CLI owns)."""

    def __init__(self, logger: logging.Logger):
        self.logger = logger

    def debug(self, msg: str) -> None:
        if msg.startswith("[debug] "):
            self.logger.debug(msg)
        else:
            self.logger.info(msg)

    def info(self, msg: str) -> None:
        self.logger.info(msg)

    def warning(self, msg: str) -> None:
        self.logger.warning(msg)

    def error(self, msg: str) -> None:
        self.logger.error(msg)


def ytdlp_version() -> str:
    from yt_dlp.version import __version__

    return __version__


def _import(spec: str) -> Any:
    mod_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError, ValueError) as e:
        raise UnitError(f"crawl.net.extractors: cannot load {spec!r}: {e}", kind="bad_input", retryable=False) from None


def format_selector(params: DownloadParams) -> str:
    if params.format:
        return params.format
    h = params.max_height
    if params.audio:
        return f"bv*[height<={h}]+ba/b[height<={h}]/wv*+ba/w"
    return f"bv*[height<={h}]/b[height<={h}]/wv*/w"


@dataclasses.dataclass
class Downloaded:
    info: dict[str, Any]
    file: Path
    info_file: Path | None


class Ytdlp:
    """yt-dlp's Python API with the crawl's politeness, retries and error classes."""

    def __init__(
        self,
        net: NetParams,
        *,
        archive: str | os.PathLike[str] | None = None,
        session: Session | None = None,
        logger: logging.Logger | None = None,
    ):
        self.net = net
        self.archive = os.fspath(archive) if archive else None
        self.session = session or SESSION
        self.logger = logger or logging.getLogger("vsi_wild.crawl.ytdlp")
        self._extractors = [_import(s) for s in net.extractors]

    # ------------------------------------------------------------------ params
    def params(self, **extra: Any) -> dict[str, Any]:
        net = self.net

        def backoff(n: int) -> float:
            return min(net.backoff_s * 2**n, net.max_backoff_s)

        p: dict[str, Any] = {
            "quiet": True,
            "noprogress": True,
            "no_color": True,
            "logger": _YtdlpLogger(self.logger),
            "socket_timeout": net.socket_timeout_s,
            "retries": net.retries,
            "fragment_retries": net.retries,
            "extractor_retries": net.retries,
            "file_access_retries": 1,
            "retry_sleep_functions": {"http": backoff, "fragment": backoff, "extractor": backoff},
            "sleep_interval_requests": net.sleep_requests_s or None,
            "ignoreerrors": False,
            "noplaylist": True,
            "extractor_args": {k: dict(v) for k, v in net.extractor_args.items()},
        }
        if net.cookies_file:
            cookies = Path(net.cookies_file).expanduser()
            if not cookies.is_file():
                raise UnitError(f"crawl.net.cookies_file not found: {cookies}", kind="bad_input", retryable=False)
            p["cookiefile"] = str(cookies)
        if net.proxy is not None:
            p["proxy"] = net.proxy
        if net.enable_file_urls:
            p["enable_file_urls"] = True
        if net.js_runtimes is not None:
            p["js_runtimes"] = {k: dict(v) for k, v in net.js_runtimes.items()}
        if net.remote_components:
            p["remote_components"] = list(net.remote_components)
        p.update(extra)
        return p

    @contextmanager
    def ydl(self, **extra: Any) -> Iterator[Any]:
        from yt_dlp import YoutubeDL

        with YoutubeDL(self.params(**extra)) as ydl:
            # Added after the built-ins: an extractor with a built-in's key takes its place (and
            # position), so e.g. an offline "Youtube" extractor serves youtube.com URLs.
            for cls in self._extractors:
                ydl.add_info_extractor(cls())
            yield ydl

    def _call(self, what: str, fn: Callable[[Any], Any], retries: int | None = None, **extra: Any) -> Any:
        """Run ``fn(ydl)`` in the session's turn, retrying network errors with exponential backoff."""
        from yt_dlp.utils import YoutubeDLError

        retries = self.net.unit_retries if retries is None else retries
        for attempt in range(retries + 1):
            error: UnitError | None = None
            with self.session.turn(self.net):
                try:
                    with self.ydl(**extra) as ydl:
                        result = fn(ydl)
                except UnitError:
                    raise
                except (YoutubeDLError, OSError) as e:
                    error = classify_error(e, what)
                except Exception as e:  # noqa: BLE001 - yt-dlp extractors raise anything
                    if type(e).__module__.startswith("yt_dlp"):
                        error = classify_error(e, what)
                    else:
                        raise
            self.session.note(error)
            if error is None:
                return result
            if error.kind != "network" or attempt == retries:
                raise error
            wait = jitter(min(self.net.backoff_s * 2**attempt, self.net.max_backoff_s))
            self.logger.warning("%s (attempt %d of %d; retrying in %.0f s)", error, attempt + 1, retries + 1, wait)
            self.session.sleep(wait)
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ operations
    def search(self, text: str, n: int) -> list[dict[str, Any]]:
        """The first ``n`` results of a YouTube search (flat: id, url, title, duration, ...)."""

        def run(ydl: Any) -> list[dict[str, Any]]:
            res = ydl.extract_info(f"ytsearch{n}:{text}", download=False)
            return [ydl.sanitize_info(e) for e in (res or {}).get("entries") or [] if e]

        return self._call(f"search {text!r}", run, extract_flat="in_playlist")

    def extract(self, url: str) -> dict[str, Any]:
        """The full info dict of one video, without downloading or choosing a format."""

        def run(ydl: Any) -> dict[str, Any]:
            info = ydl.extract_info(url, download=False, process=False)
            if not info:
                raise UnitError(f"{url}: yt-dlp returned no info", kind="ytdlp_error")
            return ydl.sanitize_info(info)

        return self._call("", run)

    def download(self, url: str, out_dir: Path, params: DownloadParams, *, use_archive: bool = True) -> Downloaded:
        """Download ``url`` into ``out_dir`` as ``<id>.<ext>`` with ``<id>.info.json`` beside it."""
        net = self.net
        extra: dict[str, Any] = {
            "format": format_selector(params),
            "merge_output_format": params.merge_output_format,
            "outtmpl": {"default": str(out_dir / "%(id)s.%(ext)s")},
            "paths": {"home": str(out_dir), "temp": str(out_dir)},
            "writeinfojson": True,
            "overwrites": True,
            "continuedl": False,
            "sleep_interval": net.sleep_before_download_s or None,
            "max_sleep_interval": max(net.max_sleep_before_download_s, net.sleep_before_download_s) or None,
        }
        if net.rate_limit:
            from yt_dlp.utils import parse_bytes

            rate = parse_bytes(net.rate_limit)
            if rate is None:
                raise UnitError(
                    f"crawl.net.rate_limit {net.rate_limit!r}: expected bytes/s like '10M'",
                    kind="bad_input",
                    retryable=False,
                )
            extra["ratelimit"] = rate
        if use_archive and self.archive:
            Path(self.archive).parent.mkdir(parents=True, exist_ok=True)
            extra["download_archive"] = self.archive

        def run(ydl: Any) -> Downloaded:
            info = ydl.extract_info(url, download=True)
            if info is None:
                raise UnitError(
                    f"{url}: the download archive {self.archive} already lists it but its file is not in the store",
                    kind="ytdlp_error",
                )
            info = ydl.sanitize_info(info)
            files = [Path(d["filepath"]) for d in info.get("requested_downloads") or [] if d.get("filepath")]
            if not files or not files[0].is_file():
                raise UnitError(f"{url}: yt-dlp finished without a file", kind="ytdlp_error")
            info_file = out_dir / f"{info['id']}.info.json"
            return Downloaded(info, files[0], info_file if info_file.is_file() else None)

        return self._call("", run, **extra)
