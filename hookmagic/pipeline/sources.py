"""Where frames come from: any iterable, a video file decoded on the CPU (PyAV), an image
folder, or N synthetic cameras paced in real time.

A source is a list of *streams*; each stream is read by its own thread of the pipeline and its
reads are timed as the pipeline's first stage (``decode`` for video, ``read`` otherwise), so a
decode-bound pipeline names decoding as its bottleneck. PyAV releases the GIL while FFmpeg
decodes, so a thread per stream decodes in parallel with the other stages.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from hookmagic.common.errors import InputFileError, InvalidArgument, Unavailable


@dataclass
class Stream:
    """One sequence of frames: ``open()`` returns a fresh iterator; ``fps`` paces it (None: as
    fast as it can be read)."""

    name: str
    open: Callable[[], Iterator[Any]]
    fps: float | None = None
    description: str = ""


@dataclass
class Source:
    """Frames for :meth:`Pipeline.run`: one or several streams and the name of the read stage."""

    streams: list[Stream]
    stage: str = "read"
    description: str = ""
    meta: dict = field(default_factory=dict)


def frames(iterable: Iterable[Any], name: str = "frames", fps: float | None = None) -> Source:
    """Frames from any iterable (NumPy arrays, tensors, anything a stage accepts)."""
    if fps is not None:
        _check_fps(fps)
    return Source([Stream(name, lambda: iter(iterable), fps, "iterable")], "read",
                  f"iterable {name!r}")


def _check_fps(fps: float) -> None:
    if not isinstance(fps, (int, float)) or not np.isfinite(fps) or fps <= 0:
        raise InvalidArgument(f"fps must be a finite number > 0, got {fps!r}")


def _import_av():
    try:
        import av  # type: ignore[import-not-found]
    except ImportError as err:
        raise Unavailable("decoding a video file needs PyAV: pip install av") from err
    return av


def video_file(path: str | os.PathLike, fmt: str = "rgb24", threads: int = 0,
               name: str | None = None) -> Source:
    """A video file decoded on the CPU with PyAV (FFmpeg inside the wheel).

    Each frame is an ``H×W×3`` uint8 NumPy array (``fmt`` is any PyAV pixel format). The file is
    probed here, so a missing, unreadable or corrupt file raises one
    :class:`~hookmagic.common.errors.InputFileError` naming the file and the decoder's message.
    ``threads`` > 0 lets FFmpeg decode with that many threads.
    """
    av = _import_av()
    path = Path(path)
    info = probe_video(path)

    def open_() -> Iterator[np.ndarray]:
        return _decode(av, path, fmt, threads)

    return Source([Stream(name or path.stem, open_, None, f"{path.name} (PyAV CPU decode)")],
                  "decode", f"{path.name}: {info['codec']} {info['width']}x{info['height']}"
                  f" {info['frames']} frames, PyAV {av.__version__} CPU decode", meta=info)


def probe_video(path: str | os.PathLike) -> dict:
    """Codec, size, frame count and rate of a video file (one InputFileError if unreadable)."""
    av = _import_av()
    path = Path(path)
    if not path.is_file():
        raise InputFileError(f"{path}: no such video file")
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise InputFileError(f"{path}: no video stream in this file")
            stream = container.streams.video[0]
            info = {"file": path.name, "codec": stream.codec_context.name,
                    "width": stream.codec_context.width, "height": stream.codec_context.height,
                    "frames": int(stream.frames or 0),
                    "rate": float(stream.average_rate) if stream.average_rate else None}
            # decode the first frame: a corrupt stream fails here, not inside a pipeline thread
            next(container.decode(stream), None)
    except InputFileError:
        raise
    except (av.error.FFmpegError, OSError, ValueError, StopIteration) as err:
        raise InputFileError(f"{path}: cannot be decoded by PyAV/FFmpeg: {err}") from err
    return info


def _decode(av: Any, path: Path, fmt: str, threads: int) -> Iterator[np.ndarray]:
    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError) as err:
        raise InputFileError(f"{path}: cannot be decoded by PyAV/FFmpeg: {err}") from err
    try:
        stream = container.streams.video[0]
        if threads > 0:
            stream.thread_type = "AUTO"
            stream.codec_context.thread_count = threads
        try:
            for frame in container.decode(stream):
                yield frame.to_ndarray(format=fmt)
        except av.error.FFmpegError as err:
            raise InputFileError(f"{path}: decoding failed in PyAV/FFmpeg: {err}") from err
    finally:
        container.close()


def image_folder(path: str | os.PathLike, pattern: str = "*.png") -> Source:
    """Images of a folder in name order, decoded with Pillow to ``H×W×3`` uint8 arrays."""
    folder = Path(path)
    if not folder.is_dir():
        raise InputFileError(f"{folder}: no such folder")
    files = sorted(folder.glob(pattern))
    if not files:
        raise InputFileError(f"{folder}: no files match {pattern!r}")
    try:
        from PIL import Image
    except ImportError as err:
        raise Unavailable("reading an image folder needs Pillow: pip install pillow") from err

    def open_() -> Iterator[np.ndarray]:
        for file in files:
            try:
                with Image.open(file) as img:
                    yield np.asarray(img.convert("RGB"))
            except OSError as err:
                raise InputFileError(f"{file}: cannot be read as an image: {err}") from err

    return Source([Stream(folder.name, open_, None, f"{len(files)} images")], "read",
                  f"image folder {folder.name} ({len(files)} files)")


def synthetic_cameras(n: int, fps: float, height: int = 720, width: int = 1280,
                      seed: int = 0) -> Source:
    """``n`` synthetic cameras, each producing ``height×width×3`` uint8 frames at ``fps`` in real
    time (frame ``i`` of each camera is due ``i/fps`` seconds after the run starts).

    The pixels are synthetic (a few pre-made random frames, cycled); the pacing is real.
    """
    if not isinstance(n, int) or n < 1:
        raise InvalidArgument(f"n (cameras) must be an int >= 1, got {n!r}")
    _check_fps(fps)
    rng = np.random.default_rng(seed)
    pool = [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(4)]

    def make(cam: int) -> Callable[[], Iterator[np.ndarray]]:
        def open_() -> Iterator[np.ndarray]:
            i = cam
            while True:
                yield pool[i % len(pool)].copy()
                i += 1
        return open_

    return Source([Stream(f"cam{c}", make(c), float(fps), f"synthetic camera {c}")
                   for c in range(n)], "capture",
                  f"{n} synthetic cameras at {fps:g} fps, {width}x{height}")


def as_source(obj: Any) -> Source:
    """A :class:`Source` as is; anything iterable wrapped by :func:`frames`."""
    if isinstance(obj, Source):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        return video_file(obj)
    if hasattr(obj, "__iter__"):
        return frames(obj)
    raise InvalidArgument(f"not a frame source: {type(obj).__name__} (give an iterable of "
                          "frames, a video path, or a hookmagic.pipeline source)")


def write_synthetic_video(path: str | os.PathLike, frames: int = 60, width: int = 320,
                          height: int = 240, fps: int = 30, codec: str = "libx264",
                          preset: str = "veryfast", seed: int = 0) -> Path:
    """Encode a *synthetic* test video with PyAV: a moving gradient over fixed noise, ``frames``
    long, ``width×height`` at ``fps`` (``codec`` libx264 → H.264, yuv420p).

    For tests, notebooks and benchmarks: the file is really encoded, the pictures are generated.
    """
    av = _import_av()
    path = Path(path)
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.int32)
    base = np.stack([xx, yy, xx + yy], axis=-1)
    base = (base + rng.integers(0, 24, base.shape)).astype(np.uint8)
    step = np.array([4, 2, 1], dtype=np.uint8)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if codec == "libx264":
            stream.options = {"preset": preset}
        for i in range(frames):
            img = base + (step * (i % 256)).astype(np.uint8)  # uint8 wraps: moving bands
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
