"""The human review gate (the paper's stage A.1.2): keep egocentric, dynamic, handheld videos; drop
static cameras and mounted platforms (in-car, on-ship).

A person decides; this module makes it fast and safe:

- ``contact_sheet`` tiles a few frames of a source into one JPEG (frames sampled by seeking, so
  the cost does not grow with the video's length);
- ``camera_motion`` is a heuristic that pre-fills a *suggestion*: the median optical-flow
  magnitude between frames a fraction of a second apart, as a fraction of the frame width per
  second. Moving people barely move the median; a moving camera moves everything. It never decides;
- ``parse_decisions`` validates a decision CSV (source id, keep/reject, reason, reviewer) as a
  whole and names the line of the first problem, so that a bad file changes nothing.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
from collections.abc import Collection, Sequence
from pathlib import Path

import cv2
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

DECISIONS = ("keep", "reject")
REQUIRED_COLUMNS = ("source_id", "decision", "reason", "reviewer")
# The columns `vsi-wild review export` writes; the reviewer fills decision, reason, reviewer.
EXPORT_COLUMNS = (
    *REQUIRED_COLUMNS,
    "suggestion",
    "motion_score",
    "origin",
    "title",
    "duration_s",
    "url",
    "contact_sheet",
)


class ReviewExportParams(BaseModel):
    """How `vsi-wild review export` shows each source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    frames: int = Field(6, ge=1, le=36, description="frames per contact sheet")
    columns: int = Field(3, ge=1, le=12, description="tiles per row")
    tile_width: int = Field(480, ge=64, le=1920, description="width of one tile (height: width / 2)")
    jpeg_quality: int = Field(85, ge=10, le=100)
    motion_pairs: int = Field(5, ge=1, le=50, description="frame pairs measured by the motion heuristic")
    motion_dt_s: float = Field(0.5, gt=0, le=5, description="time between the two frames of a pair")
    motion_width: int = Field(256, ge=32, le=1024, description="analysis width of the motion heuristic")
    static_threshold: float = Field(
        0.003, ge=0, description="below this median flow (frame widths per second) suggest 'reject: static camera'"
    )


class ReviewError(ValueError):
    """A decision file that cannot be applied; ``line`` is its 1-based line (0: the whole file)."""

    def __init__(self, file: str, line: int, message: str):
        super().__init__(f"{file}:{line}: {message}" if line else f"{file}: {message}")
        self.file = file
        self.line = line


@dataclasses.dataclass(frozen=True)
class Decision:
    source_id: str
    decision: str  # keep | reject
    reason: str | None
    reviewer: str
    line: int
    suggestion: str | None = None
    motion_score: float | None = None


@dataclasses.dataclass(frozen=True)
class ParsedDecisions:
    decisions: list[Decision]
    pending: list[str]  # ids listed with an empty decision


def parse_decisions(
    text: str, known_ids: Collection[str], *, file: str = "<decisions>", default_reviewer: str | None = None
) -> ParsedDecisions:
    """Validate a whole decision CSV; raise ``ReviewError`` naming the first bad line."""
    if text.startswith("\ufeff"):  # spreadsheets save a byte-order mark
        text = text[1:]
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise ReviewError(file, 0, f"empty file: expected a header with {', '.join(REQUIRED_COLUMNS)}") from None
    except csv.Error as e:
        raise ReviewError(file, 1, f"not CSV: {e}") from None
    header = [h.strip().lower() for h in header]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise ReviewError(file, 1, f"header lacks the columns {missing} (has {header})")
    dup = sorted({h for h in header if h and header.count(h) > 1})
    if dup:
        raise ReviewError(file, 1, f"header repeats the columns {dup}")
    known = set(known_ids)
    decisions: list[Decision] = []
    pending: list[str] = []
    seen: dict[str, int] = {}
    line = 1
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            raise ReviewError(file, start, f"not CSV: {e}") from None
        line = start
        if not fields or all(not x.strip() for x in fields):
            continue
        if len(fields) > len(header):
            raise ReviewError(
                file,
                line,
                f"{len(fields)} fields but the header has {len(header)} (a comma inside a reason needs quotes)",
            )
        row = {h: (fields[i].strip() if i < len(fields) else "") for i, h in enumerate(header)}
        sid = row["source_id"]
        if not sid:
            raise ReviewError(file, line, "empty source_id")
        if sid not in known:
            raise ReviewError(file, line, f"unknown source id {sid!r}: not in the registry")
        if sid in seen:
            raise ReviewError(file, line, f"source id {sid!r} is already on line {seen[sid]}")
        seen[sid] = line
        decision = row["decision"].lower()
        if not decision:
            pending.append(sid)
            continue
        if decision not in DECISIONS:
            raise ReviewError(
                file,
                line,
                f"decision {row['decision']!r} for {sid}: expected keep or reject (or empty to leave it pending)",
            )
        reason = row["reason"] or None
        if decision == "reject" and not reason:
            raise ReviewError(file, line, f"rejecting {sid} needs a reason (e.g. 'static camera', 'in-car')")
        reviewer = row["reviewer"] or default_reviewer
        if not reviewer:
            raise ReviewError(file, line, f"no reviewer for {sid}: fill the reviewer column or pass --reviewer")
        score = row.get("motion_score") or ""
        try:
            motion = float(score) if score else None
        except ValueError:
            raise ReviewError(file, line, f"motion_score {score!r} is not a number") from None
        decisions.append(Decision(sid, decision, reason, reviewer, line, row.get("suggestion") or None, motion))
    return ParsedDecisions(decisions, pending)


def write_decision_csv(rows: Sequence[dict[str, object]]) -> str:
    """The decision file of an export (``EXPORT_COLUMNS``; missing values empty)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(EXPORT_COLUMNS), lineterminator="\n", extrasaction="raise")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in EXPORT_COLUMNS})
    return buf.getvalue()


# =============================================================================================
# Frames, contact sheet, camera motion
# =============================================================================================


@dataclasses.dataclass
class Sampled:
    time: float
    frame: np.ndarray  # BGR, at the requested width
    pair: np.ndarray | None = None  # the frame ``dt`` later (for the motion heuristic)
    pair_time: float | None = None


def video_duration(path: str | os.PathLike[str]) -> float:
    import av

    with av.open(os.fspath(path)) as c:
        s = c.streams.video[0]
        if s.duration is not None and s.time_base is not None:
            return float(s.duration * s.time_base)
        if c.duration is not None:
            return c.duration / 1_000_000
    raise ValueError(f"{path}: unknown duration")


def sample_times(duration: float, n: int) -> list[float]:
    """``n`` times spread evenly over the video (centres of ``n`` equal parts)."""
    return [(i + 0.5) * duration / n for i in range(n)]


def sample_frames(
    path: str | os.PathLike[str], times: Sequence[float], width: int, pair_dt: float | None = None
) -> list[Sampled]:
    """The first frame at or after each time (and, with ``pair_dt``, the first one ``pair_dt``
    later), resized to ``width`` keeping the aspect. Seeks to the keyframe before each time and
    decodes forward from there: memory and time do not grow with the video's length."""
    import av

    out: list[Sampled] = []
    with av.open(os.fspath(path)) as c:
        stream = c.streams.video[0]
        stream.thread_type = "AUTO"
        assert stream.time_base is not None  # a video stream has its time base
        tb = float(stream.time_base)
        height = max(2, int(round(width * stream.codec_context.height / stream.codec_context.width / 2)) * 2)
        start = float(stream.start_time * stream.time_base) if stream.start_time is not None else 0.0
        for t in sorted(times):
            c.seek(int((start + t) / tb), stream=stream, backward=True, any_frame=False)
            first: Sampled | None = None
            last = None
            for frame in c.decode(stream):
                ft = (frame.pts * tb - start) if frame.pts is not None else None
                if ft is None:
                    continue
                last = (ft, frame)
                if first is None:
                    if ft + 1e-6 >= t:
                        first = Sampled(ft, frame.to_ndarray(width=width, height=height, format="bgr24"))
                        if pair_dt is None:
                            break
                elif pair_dt is not None and ft + 1e-6 >= first.time + pair_dt:  # (a pair is asked for)
                    first.pair = frame.to_ndarray(width=width, height=height, format="bgr24")
                    first.pair_time = ft
                    break
            if first is None and last is not None:  # the time is past the last frame: take the last
                first = Sampled(last[0], last[1].to_ndarray(width=width, height=height, format="bgr24"))
            if first is not None:
                out.append(first)
    return out


def flow_score(a: np.ndarray, b: np.ndarray, dt: float) -> float:
    """Median optical-flow magnitude between two frames, in frame widths per second. The top and
    bottom sixth of an equirectangular frame (the poles, where pixels stretch) are left out."""
    ga = cv2.cvtColor(a, cv2.COLOR_BGR2GRAY)
    gb = cv2.cvtColor(b, cv2.COLOR_BGR2GRAY)
    flow = cv2.calcOpticalFlowFarneback(ga, gb, None, 0.5, 4, 15, 3, 5, 1.2, 0)  # type: ignore[call-overload]  # OpenCV takes None for the flow it allocates; its stubs want an array
    h = ga.shape[0]
    band = flow[h // 6 : h - h // 6]
    mag = np.hypot(band[..., 0], band[..., 1])
    return float(np.median(mag)) / ga.shape[1] / dt


@dataclasses.dataclass(frozen=True)
class Motion:
    score: float | None  # frame widths per second (median over pixels, mean over pairs)
    pairs: int
    suggestion: str | None


def camera_motion(path: str | os.PathLike[str], params: ReviewExportParams, duration: float | None = None) -> Motion:
    """The motion heuristic: ``score`` and a suggestion ("keep" or "reject: static camera")."""
    duration = video_duration(path) if duration is None else duration
    usable = max(duration - params.motion_dt_s, 0.0)
    times = sample_times(usable, params.motion_pairs) if usable > 0 else [0.0]
    samples = sample_frames(path, times, params.motion_width, pair_dt=params.motion_dt_s)
    scores = [
        flow_score(s.frame, s.pair, s.pair_time - s.time)
        for s in samples
        if s.pair is not None and s.pair_time is not None and s.pair_time > s.time
    ]
    if not scores:
        return Motion(None, 0, None)
    score = float(np.mean(scores))
    suggestion = "keep" if score >= params.static_threshold else "reject: static camera"
    return Motion(score, len(scores), suggestion)


def _label(img: np.ndarray, text: str, org: tuple[int, int], scale: float) -> None:
    cv2.putText(img, text, org, cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), max(1, int(3 * scale)) + 1, cv2.LINE_AA)
    cv2.putText(img, text, org, cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), max(1, int(2 * scale)), cv2.LINE_AA)


def contact_sheet(samples: Sequence[Sampled], params: ReviewExportParams, title: str = "") -> np.ndarray:
    """Tile the sampled frames (each letterboxed into a 2:1 tile) under a title strip; each tile is
    labelled with its time (m:ss). Returns a BGR image."""
    tw = params.tile_width
    th = tw // 2
    cols = min(params.columns, max(1, len(samples)))
    rows = max(1, math.ceil(len(samples) / cols))
    header = max(24, tw // 12) if title else 0
    sheet = np.full((header + rows * th, cols * tw, 3), 32, np.uint8)
    scale = tw / 960
    if title:
        _label(sheet, _ascii(title)[: cols * tw // max(1, int(20 * scale * 2))], (8, header - 8), 2 * scale)
    for i, s in enumerate(samples):
        r, col = divmod(i, cols)
        y0, x0 = header + r * th, col * tw
        f = s.frame
        k = min(tw / f.shape[1], th / f.shape[0])
        w, h = max(1, int(round(f.shape[1] * k))), max(1, int(round(f.shape[0] * k)))
        tile = cv2.resize(f, (w, h), interpolation=cv2.INTER_AREA)
        oy, ox = y0 + (th - h) // 2, x0 + (tw - w) // 2
        sheet[oy : oy + h, ox : ox + w] = tile
        m, sec = divmod(int(s.time), 60)
        _label(sheet, f"{m}:{sec:02d}", (x0 + 6, y0 + th - 8), 1.4 * scale)
    return sheet


def _ascii(text: str) -> str:
    return text.encode("ascii", "replace").decode("ascii")


def write_jpeg(path: str | os.PathLike[str], image: np.ndarray, quality: int) -> None:
    ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError(f"{path}: JPEG encoding failed")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_bytes(buf.tobytes())
    os.replace(tmp, p)
