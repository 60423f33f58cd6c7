"""Probe a source video: what it is (size, rate, duration, codec, hash) and whether it is usable.

A usable source has a video stream, decodes to its end (a truncated file does not: ffprobe's
demuxer reads fewer packets than the container announces, or cannot find the index at all) and
is equirectangular, i.e. 2:1. Every rejection is a ``UnitError`` naming the file and the reason.

``ffprobe`` is the one place that runs ffprobe: ``probe_video`` (the `probe` stage's check) and
``describe_video`` (the quick look a crawl download records) both ask through it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from vsi_wild.errors import UnitError


@dataclass(frozen=True)
class FFprobeAnswer:
    info: dict[str, Any]  # ffprobe's JSON; {} when it printed none
    stderr: str
    returncode: int


def ffprobe(path: str | os.PathLike[str], args: Sequence[str], timeout_s: float) -> FFprobeAnswer:
    """ffprobe's JSON answer about ``path``; ``args`` choose what it reads and shows."""
    cmd = ["ffprobe", "-v", "error", *args, "-of", "json", os.fspath(path)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError as e:
        raise UnitError("ffprobe not found: install ffmpeg (e.g. apt-get install ffmpeg)", kind="internal") from e
    except subprocess.TimeoutExpired as e:
        raise UnitError(f"{path}: ffprobe did not finish in {timeout_s:.0f} s (file unreadable?)") from e
    try:
        info = json.loads(proc.stdout or "{}")
    except json.JSONDecodeError:
        info = {}
    return FFprobeAnswer(info, proc.stderr.strip(), proc.returncode)


def _rate(s: str | None) -> float | None:
    if not s or s in ("0/0", "0"):
        return None
    try:
        r = float(Fraction(s))
    except (ValueError, ZeroDivisionError):
        return None
    return r if r > 0 else None


# Every stream's size, rate and packet count (read to the end: a truncated file shows), and the format.
PROBE_ARGS = (
    "-count_packets",
    "-show_entries",
    "stream=index,codec_type,codec_name,width,height,avg_frame_rate,r_frame_rate,nb_frames,"
    "nb_read_packets,duration:stream_side_data=side_data_type,projection"
    ":format=duration,size,format_name",
)


def probe_video(
    path: str | os.PathLike[str], *, min_aspect: float = 1.98, max_aspect: float = 2.02, timeout_s: float = 120.0
) -> dict[str, Any]:
    """Measure a source video and check that it is a complete equirectangular video.

    Returns the probe fields of ``schema.SOURCE``: duration_s, width, height, fps, n_frames,
    size_bytes, codec, projection. Raises ``UnitError`` naming the file and the reason otherwise.
    """
    p = Path(path)
    if not p.exists():
        raise UnitError(f"{p}: file not found (removed? re-add it, or `vsi-wild remove` its source)")
    if not p.is_file():
        raise UnitError(f"{p}: not a regular file")
    size = p.stat().st_size
    if size == 0:
        raise UnitError(f"{p}: empty file")
    answer = ffprobe(p, PROBE_ARGS, timeout_s)
    info, err = answer.info, answer.stderr
    if not info.get("format"):
        reason = err.splitlines()[-1] if err else "not a media file"
        raise UnitError(f"{p}: unreadable ({_clean(reason, p)})")
    videos = [s for s in info.get("streams", []) if s.get("codec_type") == "video"]
    if not videos:
        raise UnitError(f"{p}: no video stream")
    v = videos[0]
    width, height = int(v.get("width") or 0), int(v.get("height") or 0)
    if width <= 0 or height <= 0:
        raise UnitError(f"{p}: video stream has no frame size")
    announced = int(v["nb_frames"]) if str(v.get("nb_frames", "")).isdigit() else None
    read = int(v["nb_read_packets"]) if str(v.get("nb_read_packets", "")).isdigit() else None
    if read == 0:
        raise UnitError(f"{p}: no decodable video packets ({_clean(err, p) or 'empty stream'})")
    if announced and read is not None and read < announced:
        raise UnitError(
            f"{p}: truncated: {read} of {announced} video packets present"
            f"{' (' + _clean(err.splitlines()[-1], p) + ')' if err else ''}"
        )
    if "partial file" in err:
        raise UnitError(f"{p}: truncated ({_clean(err.splitlines()[-1], p)})")
    aspect = width / height
    if not (min_aspect <= aspect <= max_aspect):
        raise UnitError(f"{p}: {width}x{height} is not equirectangular (aspect {aspect:.3f}, expected 2:1)")
    fps = _rate(v.get("avg_frame_rate")) or _rate(v.get("r_frame_rate"))
    if fps is None:
        raise UnitError(f"{p}: no frame rate")
    duration = v.get("duration") or info["format"].get("duration")
    try:
        duration_s = float(duration)
    except (TypeError, ValueError):
        duration_s = (read or 0) / fps
    projection = None
    for sd in v.get("side_data_list", []) or []:
        if sd.get("projection"):
            projection = str(sd["projection"])
    return {
        "duration_s": duration_s,
        "width": width,
        "height": height,
        "fps": fps,
        "n_frames": read if read is not None else announced,
        "size_bytes": size,
        "codec": v.get("codec_name"),
        "projection": projection or "equirectangular (2:1 frame)",
    }


def _clean(msg: str, p: Path) -> str:
    """ffprobe prefixes messages with the path and a demuxer address: keep the words."""
    msg = msg.replace(str(p) + ": ", "").replace(str(p), "")
    if msg.startswith("[") and "]" in msg:
        msg = msg.split("]", 1)[1].strip()
    return msg.strip()


def describe_video(path: str | os.PathLike[str], timeout_s: float = 120.0) -> dict[str, Any]:
    """Width, height, fps, duration, codec and spherical metadata of a file's first video stream
    (its headers only: nothing is counted or checked, ``probe_video`` does that)."""
    answer = ffprobe(path, ("-select_streams", "v:0", "-show_streams", "-show_format"), timeout_s)
    if answer.returncode != 0:
        raise UnitError(f"{path}: not a readable video: {answer.stderr[:300]}", kind="bad_input", retryable=False)
    streams = answer.info.get("streams") or []
    if not streams:
        raise UnitError(f"{path}: no video stream", kind="bad_input", retryable=False)
    s = streams[0]
    spherical = None
    stereo = None
    for sd in s.get("side_data_list") or []:
        t = sd.get("side_data_type", "")
        if t == "Spherical Mapping":
            spherical = {k: v for k, v in sd.items() if k != "side_data_type"}
        elif t == "Stereo 3D":
            stereo = sd.get("type")
    if spherical is not None and stereo:
        spherical["stereo_mode"] = stereo
    duration = finite_float(s.get("duration")) or finite_float((answer.info.get("format") or {}).get("duration"))
    return {
        "width": s.get("width"),
        "height": s.get("height"),
        "fps": _rate(s.get("avg_frame_rate")),
        "duration_s": duration,
        "codec": s.get("codec_name"),
        "spherical": spherical,
    }


def finite_float(x: Any) -> float | None:
    """A number of a media description (ffprobe's, yt-dlp's JSON), or None for junk, NaN or infinity."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
