"""Live sources: network streams (RTSP, HTTP, TCP, UDP, SRT, RTMP) and V4L2 cameras, read with
PyAV as the frames arrive.

A live stream paces itself: each frame is handed to the pipeline when it arrives, never faster.
Every frame carries its capture time on the host clock, taken from the stream's own timestamps
(PTS): ``capture = pts + the smallest arrival offset seen so far on this connection``, i.e. the
arrival of the fastest frame defines the network and decode delay, and each later frame is
placed by its own timestamp. End-to-end latency is then measured from capture to result (the
part of a camera's own pipeline that no timestamp reveals is not included).

On each connection, frames before the first key frame are skipped (they are predicted from
pictures that connection never received). Frames the stream skipped are counted, not hidden: a gap in the timestamps larger than one
frame period becomes that many frames ``dropped`` with the reason ``lost in the stream``. When
the connection drops, the source reconnects (up to ``reconnects`` attempts in a row, with a
growing pause) and counts the frames of the outage, from the timestamps when the new
connection continues the old timeline, else from the outage's length at the stream's rate.
"""
from __future__ import annotations

import re
import time
from typing import Any, Iterator

import numpy as np

from hookmagic.common.errors import InvalidArgument, Unavailable
from hookmagic.pipeline.sources import Captured, Lost, Source, Stream, _check_fps, _import_av

#: URL schemes PyAV/FFmpeg reads as live streams
SCHEMES = ("rtsp", "rtsps", "http", "https", "tcp", "udp", "srt", "rtmp", "rtmps")
#: the longest pause between two reconnect attempts, seconds
MAX_BACKOFF_S = 2.0


class StreamUnavailable(Unavailable):
    """A live stream or camera could not be opened (after every reconnect attempt)."""


def live_stream(url: str, name: str | None = None, fmt: str = "rgb24", reconnects: int = 5,
                timeout_s: float = 10.0, options: dict[str, str] | None = None) -> Source:
    """A live network stream (``rtsp://``, ``http(s)://``, ``tcp://``, ``udp://``, ``srt://``,
    ``rtmp://``) decoded on the CPU with PyAV as it arrives.

    Frames are ``H×W×3`` uint8 arrays (``fmt``: any PyAV pixel format), each with its capture
    time from the stream's timestamps (see the module's text). ``reconnects``: attempts in a
    row to reopen a lost stream before it is treated as ended (0: end at the first loss);
    ``timeout_s``: how long the first open waits for the stream to appear, and how long an open
    or a read may wait for data. ``options`` go to FFmpeg
    (``{"rtsp_transport": "tcp"}``). The stream is opened when the pipeline runs; a stream that
    cannot be opened at all raises :class:`StreamUnavailable` from ``Pipeline.run``.
    """
    if not isinstance(url, str) or not re.match(rf"^({'|'.join(SCHEMES)})://[^\s]+$", url):
        raise InvalidArgument(f"live_stream needs a URL of {', '.join(s + '://' for s in SCHEMES)}"
                              f"; got {url!r} (a file: use video_file)")
    return _live(url, None, name or _short(url), fmt, reconnects, timeout_s, options,
                 f"live stream {_short(url)}")


def camera(device: str = "/dev/video0", name: str | None = None, fmt: str = "rgb24",
           fps: float | None = None, size: tuple[int, int] | None = None,
           reconnects: int = 5, timeout_s: float = 10.0) -> Source:
    """A V4L2 camera (Linux, e.g. a USB webcam or a Jetson CSI camera behind v4l2), read with
    PyAV as frames arrive, with the driver's own timestamps as capture times. ``fps`` and
    ``size=(width, height)`` ask the driver for a mode; the driver may pick the nearest."""
    if not isinstance(device, str) or not device.startswith("/dev/"):
        raise InvalidArgument(f"camera needs a V4L2 device path such as /dev/video0, got {device!r}")
    options: dict[str, str] = {}
    if fps is not None:
        _check_fps(fps)
        options["framerate"] = str(fps)
    if size is not None:
        if (not isinstance(size, tuple) or len(size) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 8192 for v in size)):
            raise InvalidArgument(f"size must be (width, height) in pixels, got {size!r}")
        options["video_size"] = f"{size[0]}x{size[1]}"
    return _live(device, "v4l2", name or device.rsplit("/", 1)[-1], fmt, reconnects, timeout_s,
                 options, f"V4L2 camera {device}")


def _short(url: str) -> str:
    # no credentials in names, tables or figures: rtsp://user:pass@host/... -> rtsp://host/...
    return re.sub(r"//[^/@]*@", "//", url)


def _live(target: str, fmt_in: str | None, name: str, fmt: str, reconnects: int,
          timeout_s: float, options: dict[str, str] | None, description: str) -> Source:
    if isinstance(reconnects, bool) or not isinstance(reconnects, int) or not 0 <= reconnects <= 1000:
        raise InvalidArgument(f"reconnects must be an int in 0..1000, got {reconnects!r}")
    if (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
            or not np.isfinite(timeout_s) or not 0 < timeout_s <= 3600):
        raise InvalidArgument(f"timeout_s must be a number of seconds in (0, 3600], got {timeout_s!r}")
    if options is not None and not (isinstance(options, dict)
                                    and all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in options.items())):
        raise InvalidArgument("options must be a dict of FFmpeg option names to string values")
    av = _import_av()
    meta: dict[str, Any] = {"live": True, "url": _short(target), "reconnects": 0}

    def open_() -> Iterator[Any]:
        return _frames(av, target, fmt_in, fmt, reconnects, float(timeout_s), dict(options or {}),
                       meta)

    return Source([Stream(name, open_, None, description)], "read", description, meta=meta)


def _frames(av: Any, target: str, fmt_in: str | None, fmt: str, reconnects: int,
            timeout_s: float, options: dict[str, str], meta: dict[str, Any]) -> Iterator[Any]:
    """Captured frames and Lost markers of one run, reconnecting on loss."""
    # a short probe: the first frame comes as soon as the stream's parameters are known (the
    # probed packets are kept, so no frame is lost to the probe)
    opts = {"probesize": "32768", "analyzeduration": "0", **options}
    last_pts_s: float | None = None     # the timeline of the previous connection
    last_seen_ns: int | None = None     # host time of the last frame received
    period_s: float | None = None
    failures = 0
    connected_once = False
    give_up = time.monotonic() + timeout_s   # the first open waits this long for the stream
    while True:
        try:
            container = av.open(target, format=fmt_in, options=opts, timeout=(timeout_s, timeout_s))
        except (av.error.FFmpegError, OSError) as err:
            if not connected_once:
                if time.monotonic() >= give_up:
                    raise StreamUnavailable(f"{_short(target)}: cannot be opened within "
                                            f"{timeout_s:g} s ({err})") from err
                time.sleep(0.1)
                continue
            failures += 1
            if failures > reconnects:
                return
            time.sleep(min(MAX_BACKOFF_S, 0.1 * 2 ** failures))
            continue
        if connected_once:
            meta["reconnects"] += 1
        connected_once = True
        failures = 0
        first_of_connection = True
        try:
            with container:
                stream = container.streams.video[0]
                rate = stream.average_rate or stream.guessed_rate or stream.base_rate
                period_s = 1.0 / float(rate) if rate else period_s
                base = float(stream.time_base) if stream.time_base else None
                offset_ns: int | None = None
                keyed = False
                for frame in container.decode(stream):
                    now = time.perf_counter_ns()
                    # joined mid-group-of-pictures: frames before the first key frame are
                    # predicted from pictures this connection never saw (garbage), so they are
                    # neither shown nor counted
                    keyed = keyed or frame.key_frame
                    if not keyed:
                        continue
                    pts_s = frame.pts * base if frame.pts is not None and base else None
                    if pts_s is not None:
                        offset = now - int(pts_s * 1e9)
                        offset_ns = offset if offset_ns is None else min(offset_ns, offset)
                        captured = int(pts_s * 1e9) + offset_ns
                    else:
                        captured = now
                    if first_of_connection and last_seen_ns is not None and period_s:
                        # the outage: the old timeline continued, else its length at the rate
                        if pts_s is not None and last_pts_s is not None and pts_s > last_pts_s:
                            missed = round((pts_s - last_pts_s) / period_s) - 1
                        else:
                            missed = round((now - last_seen_ns) / 1e9 / period_s) - 1
                        if missed > 0:
                            yield Lost(missed, last_seen_ns, "lost in the stream (reconnected)")
                    elif pts_s is not None and last_pts_s is not None and period_s:
                        missed = round((pts_s - last_pts_s) / period_s) - 1
                        if missed > 0:
                            yield Lost(missed, captured, "lost in the stream")
                    first_of_connection = False
                    if pts_s is not None:
                        last_pts_s = pts_s
                    last_seen_ns = now
                    yield Captured(frame.to_ndarray(format=fmt), captured)
        except (av.error.FFmpegError, OSError):
            pass   # the stream broke off: reconnect below, keeping the counts
        if reconnects == 0:
            return
        time.sleep(min(MAX_BACKOFF_S, 0.1))
