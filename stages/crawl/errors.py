"""Failure classification: a yt-dlp (or network) failure as a ``UnitError`` of one of ``ERROR_KINDS``."""

from __future__ import annotations

import re
from collections.abc import Iterator

from vsi_wild.errors import UnitError

# Failure classes of a crawl, and whether a re-run with the same inputs can succeed.
ERROR_KINDS: dict[str, bool] = {
    "unavailable": False,  # deleted, never existed, or not playable
    "private": False,
    "removed": False,  # removed by the uploader, for a policy, a copyright claim, a terminated account
    "gated": False,  # age- or membership-gated, or YouTube's "confirm you're not a bot" (retryable)
    "geo_blocked": False,
    "rate_limited": True,
    "network": True,
    "ytdlp_error": True,  # anything yt-dlp reports that none of the above explains
}

_PATTERNS: list[tuple[str, bool, re.Pattern[str]]] = [
    (
        "geo_blocked",
        False,
        re.compile(
            r"not (?:made this video )?available in your country|blocked it in your country|"
            r"geo.?restrict|not available from your location",
            re.I,
        ),
    ),
    ("rate_limited", True, re.compile(r"HTTP Error 429|Too Many Requests|rate-?limit|try again later", re.I)),
    ("private", False, re.compile(r"private video|this video is private", re.I)),
    (
        "removed",
        False,
        re.compile(
            r"has been removed|account associated with this video has been terminated|"
            r"due to a copyright claim|violat\w+ YouTube",
            re.I,
        ),
    ),
    ("gated", True, re.compile(r"confirm you'?re not a bot|captcha", re.I)),
    (
        "gated",
        False,
        re.compile(
            r"confirm your age|age.?restricted|inappropriate for some users|members.?only|join this channel|"
            r"requires payment|only available for registered users|sign in|login required|log in",
            re.I,
        ),
    ),
    ("unavailable", True, re.compile(r"live event will begin|premieres in|is not currently live", re.I)),
    (
        "unavailable",
        False,
        re.compile(
            r"video unavailable|this video is unavailable|this video is not available|content isn'?t available|"
            r"video (?:does not|doesn't) exist|unsupported url|incomplete youtube id|not a valid url|"
            r"requested format is not available|no video formats found|HTTP Error 404|HTTP Error 410",
            re.I,
        ),
    ),
    (
        "network",
        True,
        re.compile(
            r"urlopen error|timed out|timeout|connection (?:reset|refused|aborted)|remote end closed|"
            r"incompleteread|name or service not known|temporary failure in name resolution|"
            r"network is unreachable|no route to host|\bssl\b|certificate|HTTP Error 5\d\d|HTTP Error 403|"
            r"unable to download (?:webpage|video data|api page|json)|transport",
            re.I,
        ),
    ),
]


# A network failure before any answer from the host: the machine is offline, its DNS or route is
# down, or a proxy refuses. Retrying such an operation soon after the last one gains nothing.
_UNREACHABLE = re.compile(
    r"name or service not known|temporary failure in name resolution|failed to resolve|"
    r"nodename nor servname|network is unreachable|no route to host|connection refused",
    re.I,
)


def unreachable(error: UnitError) -> bool:
    """Whether ``error`` is a network failure that never reached the host (``_UNREACHABLE``)."""
    return error.kind == "network" and bool(_UNREACHABLE.search(str(error)))


def _chain(e: BaseException) -> Iterator[BaseException]:
    """The error and everything it wraps (yt-dlp keeps originals in ``exc_info`` and ``cause``)."""
    seen: set[int] = set()
    todo = [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        info = getattr(x, "exc_info", None)
        if isinstance(info, tuple) and len(info) > 1 and isinstance(info[1], BaseException):
            todo.append(info[1])
        for attr in ("cause", "__cause__", "__context__"):
            nxt = getattr(x, attr, None)
            if isinstance(nxt, BaseException):
                todo.append(nxt)


_COOKIE_HINT = re.compile(
    r"Use --cookies-from-browser or --cookies for the authentication\..*?(?:exporting YouTube cookies|$)", re.S
)


def clean_message(msg: str) -> str:
    """yt-dlp's message made readable in a status row: no ``ERROR: `` prefix or ANSI colours, one
    line, curly apostrophes straight (YouTube writes "you’re"), yt-dlp's command-line cookie hint
    replaced by this project's option."""
    msg = re.sub(r"\x1b\[[0-9;]*m", "", msg).replace("\u2019", "'").strip()
    msg = re.sub(r"^ERROR:\s*", "", msg)
    lines = [x.strip() for x in msg.splitlines() if x.strip()]
    msg = " ".join(x if x[-1] in ".!?:;," or i == len(lines) - 1 else x + "." for i, x in enumerate(lines))
    msg = _COOKIE_HINT.sub("Pass cookies with crawl.net.cookies_file (`vsi-wild crawl --cookies FILE`).", msg)
    msg = msg.replace("(with --proxy)", "(crawl.net.proxy)")
    return " ".join(msg.split())


def classify_error(e: BaseException | str, what: str = "") -> UnitError:
    """A yt-dlp (or network) failure as a ``UnitError`` whose kind is one of ``ERROR_KINDS``."""
    if isinstance(e, UnitError):
        return e
    message = clean_message(str(e))
    kind: str | None = None
    retryable = True
    if not isinstance(e, str):
        from yt_dlp.networking.exceptions import HTTPError
        from yt_dlp.utils import GeoRestrictedError

        for x in _chain(e):
            if isinstance(x, GeoRestrictedError):
                kind, retryable = "geo_blocked", False
                break
            if isinstance(x, HTTPError) and x.status == 429:
                kind, retryable = "rate_limited", True
                break
    if kind is None:
        for k, r, pattern in _PATTERNS:
            if pattern.search(message):
                kind, retryable = k, r
                break
    if kind is None and not isinstance(e, str):
        from yt_dlp.networking.exceptions import TransportError

        if any(isinstance(x, (TransportError, ConnectionError, TimeoutError)) for x in _chain(e)):
            kind, retryable = "network", True
    if kind is None:
        kind, retryable = "ytdlp_error", True
    prefix = f"{what}: " if what else ""
    return UnitError(f"{prefix}{kind}: {message}", kind=kind, retryable=retryable)
