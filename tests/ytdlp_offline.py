"""Offline YouTube for the crawl tests: yt-dlp extractors that serve fixtures the tests make.

They take the place of yt-dlp's ``Youtube`` and ``YoutubeSearch`` extractors (same keys) through
``crawl.net.extractors``; everything else is yt-dlp itself: format selection, the file://
download (``enable_file_urls``), the info-JSON writer, the download archive, error wrapping.

Fixtures live in the folder named by ``crawl.net.extractor_args.youtube.fixtures_dir``:

- ``<id>.info.json``: an info dict in yt-dlp's shape whose formats point at local files;
- ``<id>.error.json``: how extraction fails, the way YouTube's extractor fails:
  ``{"reason": ..., "subreason": ..., "countries": [...]}`` is YouTube's playability status, run
  through the same handling as ``yt_dlp/extractor/youtube/_video.py`` (geo restriction ->
  ``raise_geo_restricted``, "sign in" -> the cookies hint, rate limit -> its explanation, then
  ``raise_no_formats``); ``{"fetch": URL}`` fetches URL with yt-dlp's networking (a local server
  answering 429, a closed port) so the error is a real network error;
- ``search.json``: ``{query: [ids]}`` or ``{query: {"fetch": URL}}``.
"""

from __future__ import annotations

import copy
import http.server
import json
import socket
import struct
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from yt_dlp.extractor.common import InfoExtractor, SearchInfoExtractor
from yt_dlp.utils import ExtractorError, clean_html, remove_end

_COOKIE_HINT = (
    "Use --cookies-from-browser or --cookies for the authentication. See  "
    "https://github.com/yt-dlp/yt-dlp/wiki/FAQ#how-do-i-pass-cookies-to-yt-dlp  for how to manually pass cookies. "
    "Also see  https://github.com/yt-dlp/yt-dlp/wiki/Extractors#exporting-youtube-cookies  for tips on "
    "effectively exporting YouTube cookies"
)


def _fixtures(ie: InfoExtractor) -> Path:
    d = ie._configuration_arg("fixtures_dir", ie_key="youtube", casesense=True)
    if not d:
        raise ExtractorError("offline extractor: no youtube:fixtures_dir extractor arg", expected=True)
    return Path(d[0])


class OfflineYoutubeIE(InfoExtractor):
    IE_NAME = "youtube"
    _VALID_URL = r"https?://(?:www\.)?youtube\.com/watch\?v=(?P<id>[0-9A-Za-z_-]{11})"

    @classmethod
    def ie_key(cls) -> str:
        return "Youtube"

    def _real_extract(self, url: str) -> dict[str, Any]:
        video_id = self._match_id(url)
        root = _fixtures(self)
        err = root / f"{video_id}.error.json"
        if err.is_file():
            self._fail(video_id, json.loads(err.read_text()))
        info = root / f"{video_id}.info.json"
        if not info.is_file():
            self.raise_no_formats("Video unavailable. This video is unavailable", expected=True)
        return copy.deepcopy(json.loads(info.read_text()))

    def _fail(self, video_id: str, spec: dict[str, Any]) -> None:
        if "fetch" in spec:
            self._download_webpage(spec["fetch"], video_id)
            raise AssertionError("the fetch fixture was expected to fail")
        # As YoutubeIE does with a playability status that has no formats.
        reason = spec.get("reason") or ""
        subreason = clean_html(spec.get("subreason") or "")
        if subreason:
            if subreason.startswith("The uploader has not made this video available in your country"):
                self.raise_geo_restricted(subreason, spec.get("countries"), metadata_available=True)
            if subreason != reason:
                reason += f". {subreason}"
        if "sign in" in reason.lower():
            reason = remove_end(reason, "This helps protect our community. Learn more")
            reason = f"{remove_end(reason.strip(), '.')}. {_COOKIE_HINT}"
        elif "This content isn't available, try again later" in reason:
            reason = (
                f"{remove_end(reason.strip(), '.')}. The current session has been rate-limited by YouTube for up "
                "to an hour. It is recommended to use `-t sleep` to add a delay between video requests to avoid "
                "exceeding the rate limit. For more information, refer to  "
                "https://github.com/yt-dlp/yt-dlp/wiki/Extractors#this-content-isnt-available-try-again-later"
            )
        self.raise_no_formats(reason, expected=True)


class OfflineYoutubeSearchIE(SearchInfoExtractor):
    IE_NAME = "youtube:search"
    _SEARCH_KEY = "ytsearch"

    @classmethod
    def ie_key(cls) -> str:
        return "YoutubeSearch"

    def _search_results(self, query: str):
        root = _fixtures(self)
        table = json.loads((root / "search.json").read_text()) if (root / "search.json").is_file() else {}
        hits = table.get(query, [])
        if isinstance(hits, dict):
            self._download_webpage(hits["fetch"], query)
            raise AssertionError("the fetch fixture was expected to fail")
        for vid in hits:
            p = root / f"{vid}.info.json"
            info = json.loads(p.read_text()) if p.is_file() else {}
            # A flat entry as YouTube's search gives it: no formats, a few fields.
            yield self.url_result(
                f"https://www.youtube.com/watch?v={vid}",
                "Youtube",
                vid,
                info.get("title"),
                duration=info.get("duration"),
                channel=info.get("channel"),
                live_status=info.get("live_status"),
            )


EXTRACTORS = ["ytdlp_offline:OfflineYoutubeIE", "ytdlp_offline:OfflineYoutubeSearchIE"]


# ---------------------------------------------------------------------------------------- fixtures


def make_video(
    path: Path,
    width: int = 256,
    height: int = 128,
    seconds: float = 2.0,
    fps: int = 10,
    kind: str = "testsrc2",
    scroll: float = 0.0,
) -> Path:
    """A small H.264 test video. ``kind='scroll'`` pans a still pattern horizontally by ``scroll``
    of the width per frame (for an equirectangular frame, a pure yaw rotation);
    ``kind='static'`` is a still pattern with a small moving box (someone walking past a tripod)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "testsrc2":
        src = ["-f", "lavfi", "-i", f"testsrc2=size={width}x{height}:rate={fps}"]
        vf = []
    elif kind in ("scroll", "static"):
        # A fixed random-looking texture (cellular automaton), scaled up: rich for optical flow.
        src = [
            "-f",
            "lavfi",
            "-i",
            f"cellauto=size={width // 4}x{height // 4}:rate={fps}:rule=110:random_seed=7:scroll=0:full=1",
        ]
        chain = [
            "trim=start_frame=40:end_frame=41",
            "loop=loop=-1:size=1",
            f"scale={width}:{height}:flags=neighbor",
            "format=yuv420p",
            f"setpts=N/{fps}/TB",
        ]
        if kind == "scroll":
            chain.append(f"scroll=horizontal={scroll}")
        else:
            chain.append(
                f"drawbox=x='mod(t*{width // 4},{width})':y={height // 2}"
                f":w={width // 16}:h={height // 8}:color=red:t=fill"
            )
        vf = ["-vf", ",".join(chain)]
    else:
        raise ValueError(kind)
    cmd = [
        "ffmpeg",
        "-v",
        "error",
        "-y",
        *src,
        *vf,
        "-t",
        str(seconds),
        "-r",
        str(fps),
        "-c:v",
        "libx264",
        "-preset",
        "ultrafast",
        "-g",
        str(fps),
        "-pix_fmt",
        "yuv420p",
        str(path),
    ]
    subprocess.run(cmd, check=True)
    return path


_SPHERICAL_UUID = bytes.fromhex("ffcc8263f8554a938814587a02521fdd")
_SPHERICAL_XML = (
    b'<?xml version="1.0"?><rdf:SphericalVideo xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" '
    b'xmlns:GSpherical="http://ns.google.com/videos/1.0/spherical/"><GSpherical:Spherical>true'
    b"</GSpherical:Spherical><GSpherical:Stitched>true</GSpherical:Stitched><GSpherical:StitchingSoftware>"
    b"vsi-wild tests</GSpherical:StitchingSoftware><GSpherical:ProjectionType>equirectangular"
    b"</GSpherical:ProjectionType></rdf:SphericalVideo>"
)


def inject_spherical_v1(src: Path, dst: Path) -> Path:
    """Copy an MP4 (moov after mdat, as ffmpeg writes it) adding Google's V1 spherical metadata (a
    ``uuid`` box with the GSpherical XML in the video track), as 360° cameras and the spatial-media
    tool do. Appending to moov leaves the sample offsets in mdat valid."""
    data = bytearray(src.read_bytes())

    def boxes(start: int, end: int):
        i = start
        while i < end:
            size, typ = struct.unpack(">I4s", data[i : i + 8])
            yield i, size, typ
            i += size

    top = list(boxes(0, len(data)))
    mi, ms, _ = next(b for b in top if b[2] == b"moov")
    assert mi > next(b for b in top if b[2] == b"mdat")[0], "moov must follow mdat"
    ti, ts, _ = next(b for b in boxes(mi + 8, mi + ms) if b[2] == b"trak")
    box = struct.pack(">I4s", 8 + 16 + len(_SPHERICAL_XML), b"uuid") + _SPHERICAL_UUID + _SPHERICAL_XML
    data[ti + ts : ti + ts] = box
    struct.pack_into(">I", data, ti, ts + len(box))
    struct.pack_into(">I", data, mi, ms + len(box))
    dst.write_bytes(bytes(data))
    return dst


def fmt(
    path: Path,
    width: int,
    height: int,
    fps: float = 10.0,
    note: str = "",
    format_id: str | None = None,
    acodec: str = "none",
) -> dict[str, Any]:
    return {
        "format_id": format_id or f"{height}p",
        "url": path.resolve().as_uri(),
        "ext": "mp4",
        "width": width,
        "height": height,
        "fps": fps,
        "vcodec": "avc1.64000d",
        "acodec": acodec,
        "format_note": note,
    }


def write_info(root: Path, video_id: str, formats: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """An info dict in the shape yt-dlp's YouTube extractor returns (the fields the crawl reads)."""
    info = {
        "id": video_id,
        "title": f"360° walk {video_id}",
        "channel": "Walker",
        "channel_id": "UCwalker",
        "uploader": "Walker",
        "license": None,
        "upload_date": "20240501",
        "duration": 600,
        "live_status": "not_live",
        "media_type": "video",
        "webpage_url": f"https://www.youtube.com/watch?v={video_id}",
        "extractor": "youtube",
        "extractor_key": "Youtube",
        "formats": formats,
        "tags": ["360", "walk"],
    }
    info.update(fields)
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{video_id}.info.json").write_text(json.dumps(info))
    return info


def write_error(root: Path, video_id: str, **spec: Any) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{video_id}.error.json").write_text(json.dumps(spec))


def write_search(root: Path, table: dict[str, Any]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "search.json").write_text(json.dumps(table))


class StatusURL(str):
    """The server's URL; ``hits`` counts the requests it answered."""

    hits: list[str]


@contextmanager
def http_status_server(status: int):
    """A local HTTP server answering every GET with ``status`` (e.g. 429 Too Many Requests)."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802  http.server's name
            hits.append(self.path)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            if status == 429:
                self.send_header("Retry-After", "3600")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    url = StatusURL(f"http://127.0.0.1:{srv.server_address[1]}/")
    url.hits = hits
    try:
        yield url
    finally:
        srv.shutdown()
        srv.server_close()


def closed_port_url() -> str:
    """A URL on a local port nobody listens on (connection refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/"
