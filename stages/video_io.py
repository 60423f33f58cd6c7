"""Streaming video input and output shared by every stage: decode, encode, and the 2 FPS sampler.

Nothing here holds more than a few frames: decoding, sampling and encoding are streams, so memory
does not grow with a video's length.

Time: a frame's time is ``(pts - first_pts) * time_base`` in seconds, so the first decoded frame is
at 0 s whatever the container's start offset; frame indices count decoded frames in presentation
order from 0. The projected views keep their source's timestamps (see ``VideoWriter``), so a time
means the same instant in a source and in each of its views.

Bad input (unreadable, no video stream, truncated, not 2:1 where that is required) raises
``vsi_wild.errors.UnitError`` naming the file and the reason.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import queue
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TypeVar

import av
import cv2
import numpy as np

from vsi_wild.errors import UnitError
from vsi_wild.stages.backends.base import FrameBatch

# Frames whose decoding fails at the very end of a file that announces its frame count are
# "truncated"; a stream that announces nothing is checked against its announced duration.
_TRUNCATION_TOLERANCE_FRAMES = 1
_TRUNCATION_TOLERANCE_S = 0.5
T = TypeVar("T")


@dataclass(frozen=True)
class VideoInfo:
    """What the container says about a video's first video stream (before decoding it)."""

    path: str
    width: int
    height: int
    fps: float  # average frame rate (0 when the container does not say)
    time_base: Fraction
    n_frames: int  # announced frame count; 0 when unknown
    duration_s: float  # announced duration; 0 when unknown
    codec: str
    pix_fmt: str | None
    has_audio: bool


@dataclass
class DecodedFrame:
    index: int  # decoded frames so far, in presentation order, from 0
    pts: int  # in the stream's time_base, relative to the first frame
    time: float  # seconds from the first frame
    frame: av.VideoFrame


def _unreadable(path: Path, e: BaseException) -> UnitError:
    msg = str(e).replace(f": '{path}'", "").replace(str(path), "").strip(" :'")
    return UnitError(f"{path}: unreadable ({msg or type(e).__name__})", retryable=False)


class VideoReader:
    """A streaming decoder of a file's first video stream (PyAV, frame threads); audio is ignored.

    ``require_aspect=(lo, hi)`` rejects videos whose width/height lies outside [lo, hi] (2:1 for
    equirectangular sources).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, require_aspect: tuple[float, float] | None = None, threads: bool = True
    ):
        self.path = Path(path)
        if not self.path.exists():
            raise UnitError(f"{self.path}: file not found")
        try:
            self.container = av.open(str(self.path))
        except (av.error.FFmpegError, ValueError, OSError) as e:
            raise _unreadable(self.path, e) from e
        try:
            videos = self.container.streams.video
            if not videos:
                raise UnitError(f"{self.path}: no video stream", retryable=False)
            self.stream = videos[0]
            cc = self.stream.codec_context
            w, h = int(cc.width or 0), int(cc.height or 0)
            if w <= 0 or h <= 0:
                raise UnitError(f"{self.path}: video stream has no frame size", retryable=False)
            if require_aspect is not None:
                lo, hi = require_aspect
                if not lo <= w / h <= hi:
                    raise UnitError(
                        f"{self.path}: {w}x{h} is not equirectangular (aspect {w / h:.3f}, expected 2:1)",
                        retryable=False,
                    )
            if threads:
                self.stream.thread_type = "AUTO"
            tb = self.stream.time_base or Fraction(1, 90000)
            rate = self.stream.average_rate or self.stream.guessed_rate
            dur = 0.0
            if self.stream.duration:
                dur = float(self.stream.duration * tb)
            elif self.container.duration:
                dur = self.container.duration / av.time_base
            self.info = VideoInfo(
                path=str(self.path),
                width=w,
                height=h,
                fps=float(rate) if rate else 0.0,
                time_base=tb,
                n_frames=int(self.stream.frames or 0),
                duration_s=dur,
                codec=cc.name,
                pix_fmt=cc.format.name if cc.format is not None else None,
                has_audio=bool(self.container.streams.audio),
            )
        except BaseException:
            self.container.close()
            raise

    def __enter__(self) -> VideoReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.container.close()

    def frames(self) -> Iterator[DecodedFrame]:
        """Decode the whole stream in presentation order; check at the end that it was complete."""
        tb = self.info.time_base
        first_pts: int | None = None
        last_pts: int | None = None
        index = -1
        of = f" of {self.info.n_frames}" if self.info.n_frames else ""
        for frame in _decode(self, lambda n: f"decoding failed after {n} frames{of}"):
            index += 1
            pts = frame.pts
            if pts is None:  # no timestamp: continue at the average rate
                step = int(round(1 / (self.info.fps * tb))) if self.info.fps else 1
                pts = (last_pts + step) if last_pts is not None else 0
            if first_pts is None:
                first_pts = pts
            last_pts = pts
            rel = pts - first_pts
            yield DecodedFrame(index, rel, float(rel * tb), frame)
        n = index + 1
        if n == 0:
            raise UnitError(f"{self.path}: no decodable video frames", retryable=False)
        if self.info.n_frames and n < self.info.n_frames - _TRUNCATION_TOLERANCE_FRAMES:
            raise UnitError(f"{self.path}: truncated: decoded {n} of {self.info.n_frames} frames", retryable=False)
        if not self.info.n_frames and self.info.duration_s and self.info.fps:
            assert first_pts is not None and last_pts is not None  # set by the first of n > 0 frames
            end = float((last_pts - first_pts) * tb) + 1.0 / self.info.fps
            if end < self.info.duration_s - _TRUNCATION_TOLERANCE_S:
                raise UnitError(
                    f"{self.path}: truncated: decoded {end:.2f} s of {self.info.duration_s:.2f} s", retryable=False
                )


def probe(path: str | os.PathLike[str]) -> VideoInfo:
    with VideoReader(path, threads=False) as r:
        return r.info


def yuv420_planes(frame: av.VideoFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zero-copy views (rows, line_size) of an I420 frame's Y, U, V planes (other formats are
    converted first). Only the first ``plane.width`` columns of each row are picture."""
    if frame.format.name != "yuv420p":
        frame = frame.reformat(format="yuv420p")
    out = []
    for p in frame.planes:
        out.append(np.frombuffer(memoryview(p), np.uint8).reshape(p.height, p.line_size))
    return out[0], out[1], out[2]


# ------------------------------------------------------------------------------------ sampler
def sample_frames(
    path: str | os.PathLike[str], fps: float = 2.0, start: float | None = None, end: float | None = None
) -> Iterator[tuple[int, float, int, float, np.ndarray]]:
    """The frames nearest to t_k = k / fps, streamed: ``(k, t_k, frame_index, frame_time, rgb)``.

    Every stage that samples a video at 2 FPS uses this, so that "the frame at t_k" is the same
    frame everywhere. Rule: t_k maps to the decoded frame whose time is nearest; a tie goes to the
    later frame (round half up, as ffmpeg's ``fps`` filter and the sample's ground truth do: at
    25 fps, t = 0.5 s is frame 13). k runs over every t_k < end, where end = last frame time + one
    average frame interval (a 10 s video at any rate gives k = 0..19). A frame nearest to several
    t_k (a source slower than ``fps``) is yielded for each of them. Only the chosen frames are
    converted to RGB.

    ``start`` / ``end`` (seconds) keep the t_k in [start, end) and seek there instead of decoding
    the prefix: a 5-minute clip of a 2-hour view decodes from the keyframe before it, not from 0.
    The frames, indices and times are those of the whole-video pass (frame indices come from the
    container's packet timestamps; a file without them is decoded from the start).
    """
    if fps <= 0:
        raise ValueError("fps must be positive")
    if start is None and end is None:
        with VideoReader(path) as reader:
            yield from _nearest_frames(reader.frames(), fps, 0, None, reader.info)
        return
    k0 = max(0, math.ceil((start or 0.0) * fps - 1e-9))
    with VideoReader(path) as reader:
        table = _pts_table(reader.path) if k0 > 0 else None
        if table is None:
            yield from _nearest_frames(reader.frames(), fps, k0, end, reader.info)
            return
        times = (table - table[0]) * float(reader.info.time_base)
        # the frame before t_k0 may be the nearest: decode from the keyframe at or before it
        j = max(0, int(np.searchsorted(times, k0 / fps, side="left")) - 1)
        yield from _nearest_frames(_frames_from(reader, table, j), fps, k0, end, reader.info)


def sampled_frames(
    path: str | os.PathLike[str],
    fps: float = 2.0,
    start: float | None = None,
    end: float | None = None,
    max_width: int | None = None,
) -> Iterator[tuple[int, float, int, np.ndarray]]:
    """``(k, t_k, frame_index, rgb)`` of ``sample_frames``, each frame wider than ``max_width``
    downscaled to it (area interpolation, aspect kept): what the model stages read. The pose
    stage chunks this stream itself (its chunks overlap); the others take ``frame_batches``."""
    for k, t, idx, _ft, rgb in sample_frames(path, fps, start=start, end=end):
        if max_width and rgb.shape[1] > max_width:
            s = max_width / rgb.shape[1]
            rgb = cv2.resize(rgb, (max_width, max(2, round(rgb.shape[0] * s))), interpolation=cv2.INTER_AREA)
        yield k, t, idx, rgb


def frame_batches(
    path: str | os.PathLike[str],
    video_id: str,
    video_fps: float,
    batch_size: int | None,
    fps: float = 2.0,
    start: float | None = None,
    end: float | None = None,
    max_width: int | None = None,
    images: Callable[[Iterator[np.ndarray]], Sequence[np.ndarray]] = list,
) -> Iterator[FrameBatch]:
    """The ``FrameBatch`` es the backends take: ``sampled_frames`` in consecutive batches of
    ``batch_size`` frames (the last may be shorter; None: one batch of every frame, even if none).

    ``images`` builds a batch's images from its frames as they are decoded: ``list`` holds them in
    memory; a whole clip's batch can put them on disk instead (the segment stage's JPEG files).
    """
    frames = sampled_frames(path, fps, start, end, max_width)
    while True:
        ks: list[int] = []
        times: list[float] = []
        indices: list[int] = []

        def rgbs(
            chunk: Iterator[tuple[int, float, int, np.ndarray]], ks: list[int], times: list[float], indices: list[int]
        ) -> Iterator[np.ndarray]:
            for k, t, idx, rgb in chunk:
                ks.append(k)
                times.append(t)
                indices.append(idx)
                yield rgb

        batch_images = images(rgbs(itertools.islice(frames, batch_size), ks, times, indices))
        if batch_size is not None and not ks:
            return
        yield FrameBatch(video_id, batch_images, times, indices, ks, video_fps)
        if batch_size is None:
            return


def prefetched(items: Iterator[T], depth: int = 2, name: str = "prefetch") -> Iterator[T]:
    """``items`` produced ``depth`` ahead by a thread of its own: a model stage's decoding and
    resizing (PyAV and OpenCV release the GIL) run while the model works on the previous batch,
    so a GPU does not wait on the decoder. Same items, same order; an error in the producer is
    raised here, where its item would have come; closing this generator stops the producer."""
    q: queue.Queue = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((done, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            q.put((done, e))
        finally:
            close = getattr(items, "close", None)
            if stop.is_set() and close is not None:
                close()

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item, error = q.get()
            if item is done:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            with contextlib.suppress(queue.Empty):
                q.get_nowait()
            thread.join(timeout=0.05)


def _nearest_frames(
    frames: Iterator[DecodedFrame], fps: float, k: int, stop: float | None, info: VideoInfo
) -> Iterator[tuple[int, float, int, float, np.ndarray]]:
    """The nearest-frame rule over decoded frames that start at or before t_k (or at frame 0)."""
    stop = float("inf") if stop is None else stop
    prev: DecodedFrame | None = None
    for cur in frames:
        # every t_k before the current frame's time is decided: prev or cur, whichever is nearer
        while k / fps <= cur.time:
            t = k / fps
            if t >= stop - 1e-9:
                return
            pick = prev if prev is not None and (t - prev.time) < (cur.time - t) else cur
            yield k, t, pick.index, pick.time, pick.frame.to_ndarray(format="rgb24")
            k += 1
        prev = cur
    if prev is None:
        return
    # times count from the first frame
    interval = prev.time / prev.index if prev.index > 0 else (1.0 / info.fps if info.fps else 1.0 / fps)
    last = min(prev.time + interval, stop)
    while k / fps < last - 1e-9:
        yield k, k / fps, prev.index, prev.time, prev.frame.to_ndarray(format="rgb24")
        k += 1


@dataclass(frozen=True)
class PacketTable:
    """A video stream's packets as demuxing finds them (no decoding): every packet's pts, sorted
    (frame i in presentation order has pts ``pts[i]``), and the keyframes' frame indices."""

    pts: np.ndarray  # int64, sorted
    keyframes: np.ndarray  # int64, sorted frame indices of the keyframes


_PACKET_TABLES: dict[tuple[str, int, int], PacketTable | None] = {}


def _packet_table(path: Path) -> PacketTable | None:
    """The file's ``PacketTable``, kept per file version (a video's clips and anchors share it; the
    file is opened for this only the first time); None when a packet has no pts."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _PACKET_TABLES:
        found: list[int] = []
        pts: list[int] | None = found
        key_pts: list[int] = []
        try:
            with VideoReader(path, threads=False) as reader:
                for packet in reader.container.demux(reader.stream):
                    if packet.size == 0:
                        continue  # the demuxer's flush packet
                    if packet.pts is None:
                        pts = None
                        break
                    found.append(packet.pts)
                    if packet.is_keyframe:
                        key_pts.append(packet.pts)
        except av.error.FFmpegError:
            pts = None  # the whole-video pass reports what is wrong with the file
        if len(_PACKET_TABLES) >= 16:
            _PACKET_TABLES.pop(next(iter(_PACKET_TABLES)))
        table = None
        if pts:
            ordered = np.sort(np.asarray(pts, dtype=np.int64))
            keys = np.searchsorted(ordered, np.asarray(sorted(key_pts), dtype=np.int64))
            table = PacketTable(ordered, keys.astype(np.int64))
        _PACKET_TABLES[key] = table
    return _PACKET_TABLES[key]


def _pts_table(path: Path) -> np.ndarray | None:
    """Every video packet's pts, sorted: frame i (presentation order) has pts table[i]."""
    table = _packet_table(path)
    return None if table is None else table.pts


def frames_at(path: str | os.PathLike[str], indices: Sequence[int]) -> Iterator[tuple[int, float, np.ndarray]]:
    """``(index, time, rgb)`` of the wanted frames (indices and times as the whole-video pass counts
    them), in index order, decoding only around them: for each wanted frame the decoder goes on
    from where it stands, unless a keyframe lies between there and the frame, in which case it
    seeks to the last keyframe before it. A few anchors of a long video cost a GOP each instead of
    the whole video; the pixels are those of the whole pass (a keyframe's picture and what follows
    it in presentation order need nothing before it). A file whose packets lack timestamps is
    decoded from the start. A wanted frame past the end is ``UnitError``."""
    want = sorted({int(i) for i in indices})
    if not want:
        return
    path = Path(path)
    with VideoReader(path) as reader:
        table = _packet_table(reader.path)
        if table is None:
            frames: Iterator[DecodedFrame] = reader.frames()
            k = 0
            for fr in frames:
                if fr.index == want[k]:
                    yield fr.index, fr.time, fr.frame.to_ndarray(format="rgb24")
                    k += 1
                    if k == len(want):
                        return
            raise UnitError(f"{path}: frames {want[k:][:5]} not found (the video ended first)", retryable=False)
        past = [w for w in want if w >= len(table.pts)]
        if past:
            raise UnitError(
                f"{path}: frames {past[:5]} not found (the video has {len(table.pts)} frames)", retryable=False
            )
        stream: Generator[DecodedFrame, None, None] | None = None
        pos = -1  # index of the last frame decoded
        for w in want:
            key = (
                int(table.keyframes[np.searchsorted(table.keyframes, w, side="right") - 1])
                if len(table.keyframes) and table.keyframes[0] <= w
                else 0
            )
            if stream is None or key > pos:
                if stream is not None:
                    stream.close()
                stream = _frames_from(reader, table.pts, w)
            for fr in stream:
                pos = fr.index
                if fr.index == w:
                    yield w, fr.time, fr.frame.to_ndarray(format="rgb24")
                    break
                if fr.index > w:
                    raise UnitError(
                        f"{path}: frame {w} was not decoded (the decoder went from {pos} past it)", retryable=False
                    )
            else:
                raise UnitError(f"{path}: frame {w} not found (decoding ended first)", retryable=False)
        if stream is not None:
            stream.close()


def _frames_from(reader: VideoReader, table: np.ndarray, j: int) -> Generator[DecodedFrame, None, None]:
    """Decoded frames from the keyframe at or before frame j, with the whole pass's index and time
    (decoding from the start when the seek lands past frame j)."""
    tb = reader.info.time_base
    target = int(table[j])
    reader.container.seek(target, stream=reader.stream, backward=True, any_frame=False)

    def after_seek(n: int) -> str:
        return f"decoding failed {n} frames after the seek"

    frames = _decode(reader, after_seek)
    # leading frames of an open GOP may lack their references: start at a keyframe
    first = next((f for f in frames if f.key_frame), None)
    if first is None or first.pts is None or first.pts > target:
        frames.close()
        reader.container.seek(int(table[0]), stream=reader.stream, backward=True, any_frame=False)
        frames = _decode(reader, after_seek)
        first = next(frames, None)
    if first is None:
        return
    for frame in itertools.chain([first], frames):
        index = int(np.searchsorted(table, frame.pts)) if frame.pts is not None else len(table)
        if index >= len(table) or table[index] != frame.pts:
            raise UnitError(
                f"{reader.path}: decoded a frame (pts {frame.pts}) that no packet announced", retryable=False
            )
        yield DecodedFrame(index, int(frame.pts - table[0]), float((frame.pts - table[0]) * tb), frame)


def _decode(reader: VideoReader, failed: Callable[[int], str]) -> Generator[av.VideoFrame, None, None]:
    """The frames of ``reader``'s stream from where its container stands (the whole pass and the
    seeking one): a decoding error is ``UnitError("<path>: truncated or corrupt: <failed(n)> (<error>)")``,
    n the frames decoded before it."""
    n = 0
    try:
        for packet in reader.container.demux(reader.stream):
            for frame in packet.decode():
                n += 1
                yield frame
    except av.error.FFmpegError as e:
        raise UnitError(f"{reader.path}: truncated or corrupt: {failed(n)} ({e.strerror or e})", retryable=False) from e


# ------------------------------------------------------------------------------------ encoder
@dataclass(frozen=True)
class EncoderSettings:
    codec: str = "libx264"
    preset: str = "veryfast"
    crf: int = 20
    threads: int = 0  # 0 = the codec's default (auto: as many as the CPUs this process may use, so machine-dependent)
    faststart: bool = True

    def codec_options(self) -> dict[str, str]:
        """The encoder's own options, as PyAV's ``stream.options`` and ffmpeg's ``-name value`` take them."""
        opts = {"preset": self.preset, "crf": str(self.crf)}
        if self.codec == "libx264":
            opts["x264-params"] = X264_REPRODUCIBLE
        return opts

    def ffmpeg_args(self) -> list[str]:
        """The same encoder as ``ffmpeg`` command-line options (codec, its options, threads and thread
        type; not the container's faststart): what a benchmark's reference encode must use to do the
        work ``VideoWriter`` does."""
        args = ["-c:v", self.codec]
        for name, value in self.codec_options().items():
            args += [f"-{name}", value]
        if self.threads:
            args += ["-threads", str(self.threads)]
        return [*args, "-thread_type", ENCODER_THREAD_TYPE.lower()]


# x264's macroblock-tree rate control reads memory it has not written: its output changed with
# what the heap held before (MALLOC_PERTURB_=85 and =170 gave two different files from the same
# frames; in the pipeline's processes, torch loaded, two `make run`s gave two different view
# videos, so every stage after them differed). Without it x264 is byte-reproducible (checked
# under both perturbations, 1 and auto threads). The cost, at the same CRF: the sample's views are
# 5 % larger; bench_projection's noisy photographic panorama gives views 65 % larger and x264
# ~20 % more CPU (its own encode, 4 views: 25.4 -> 30-31 CPU-s).
X264_REPRODUCIBLE = "mbtree=0"
# How the encoder's threads split the work: x264's sliced threads (PyAV's default for encoders,
# pinned because the bytes depend on it as on the thread count); ffmpeg's command line defaults
# to frame threads, so a reference encode there must ask for slices (``ffmpeg_args``).
ENCODER_THREAD_TYPE = "SLICE"


class VideoWriter:
    """An H.264/MP4 writer that keeps the given timestamps (variable frame rate included).

    Frames are ``yuv420p`` numpy buffers of shape (height * 3 // 2, width) (I420 layout) with their
    pts in ``time_base``; they are handed to the encoder without a copy. No audio stream is written.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        width: int,
        height: int,
        time_base: Fraction,
        rate: Fraction | float | None,
        settings: EncoderSettings = EncoderSettings(),
    ):
        self.path = Path(path)
        self.width, self.height, self.time_base = width, height, time_base
        opts = {"movflags": "+faststart"} if settings.faststart else {}
        self.container = av.open(str(self.path), "w", format="mp4", options=opts)
        try:
            rate = Fraction(rate).limit_denominator(100000) if rate else Fraction(30)
            s = self.container.add_stream(settings.codec, rate=rate)
            assert isinstance(s, av.VideoStream)  # settings.codec is a video codec
            s.width, s.height, s.pix_fmt = width, height, "yuv420p"
            s.time_base = time_base
            s.codec_context.time_base = time_base
            s.options = {**settings.codec_options()}
            s.codec_context.thread_type = ENCODER_THREAD_TYPE
            if settings.threads:
                s.codec_context.thread_count = settings.threads
            self.stream = s
        except BaseException:
            self.container.close()
            raise
        self.n_frames = 0

    def write(self, i420: np.ndarray, pts: int) -> None:
        frame = av.VideoFrame.from_numpy_buffer(i420.reshape(self.height * 3 // 2, self.width), format="yuv420p")
        frame.pts = pts
        frame.time_base = self.time_base
        for packet in self.stream.encode(frame):
            self.container.mux(packet)
        self.n_frames += 1

    def close(self) -> None:
        try:
            for packet in self.stream.encode(None):
                self.container.mux(packet)
        finally:
            self.container.close()

    def abort(self) -> None:
        with contextlib.suppress(Exception):  # the file is deleted by the caller anyway
            self.container.close()


class ThreadedWriter:
    """A ``VideoWriter`` fed through a bounded queue by its own thread, so that several encoders
    run beside decoding and projection (PyAV releases the GIL while encoding). An encoder error is
    re-raised in the caller at its next ``write`` or at ``close``."""

    _STOP = object()

    def __init__(self, writer: VideoWriter, max_queue: int = 4):
        self.writer = writer
        self.q: queue.Queue = queue.Queue(maxsize=max_queue)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name=f"encode-{writer.path.name}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            item = self.q.get()
            if item is self._STOP:
                return
            if self.error is not None:
                continue  # drain after a failure so the producer never blocks
            try:
                self.writer.write(*item)
            except BaseException as e:  # noqa: BLE001 - handed to the producer
                self.error = e

    def write(self, i420: np.ndarray, pts: int) -> None:
        if self.error is not None:
            raise self.error
        self.q.put((i420, pts))

    def close(self) -> None:
        self.q.put(self._STOP)
        self.thread.join()
        if self.error is not None:
            self.writer.abort()
            raise self.error
        self.writer.close()

    def abort(self) -> None:
        self.error = self.error or RuntimeError("aborted")
        self.q.put(self._STOP)
        self.thread.join()
        self.writer.abort()


@dataclass(frozen=True)
class WrittenVideo:
    """What a written file really holds, read back from it (not what was meant to be written)."""

    n_frames: int
    duration_s: float
    fps: float
    times: list[float] | None = None


def inspect_written(path: str | os.PathLike[str], with_times: bool = False) -> WrittenVideo:
    """Count a video's frames by demuxing its packets (no decoding) and measure its duration."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        tb = s.time_base
        pts = sorted(p.pts for p in c.demux(s) if p.pts is not None and p.size > 0)
    n = len(pts)
    if n == 0:
        return WrittenVideo(0, 0.0, 0.0, [] if with_times else None)
    assert tb is not None  # a stream with packets has a time base
    times = [float((p - pts[0]) * tb) for p in pts]
    interval = (times[-1] / (n - 1)) if n > 1 else 0.0
    duration = times[-1] + interval
    fps = (n / duration) if duration > 0 else 0.0
    return WrittenVideo(n, duration, fps, times if with_times else None)
