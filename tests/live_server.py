"""A live stream for the live-source tests: SYNTHETIC frames, MPEG-TS over TCP on loopback,
sent in real time like a camera (one frame every 1/fps seconds from the first connection).

    python tests/live_server.py PORT --frames 60 [--fps 30] [--skip 20:30]
                                [--break-after 30 --pause 1.0 [--reset-pts]]

Frame ``i`` shows its index in binary, eight vertical bars of black or white (:func:`picture`,
read back by :func:`index_of`), with presentation timestamp ``i`` (in 1/fps units). ``--skip A:B``: frames A..B-1 are never sent (their timestamps are skipped, as a camera
that drops frames). ``--break-after K``: after frame K-1 the connection is closed, the server
waits ``--pause`` seconds (the camera keeps counting frames: their timestamps are skipped), then
listens again and sends the rest; ``--reset-pts`` starts the second connection's timestamps at 0
instead. At the end it prints one JSON line: the indices sent and the timestamps skipped.
"""
from __future__ import annotations

import argparse
import json
import time

import av
import numpy as np


def picture(i: int) -> np.ndarray:
    """A 48x64 RGB frame: bar b (8 pixels wide) white when bit b of ``i`` is set, else black."""
    bits = np.array([(i >> b) & 1 for b in range(8)], np.uint8)
    row = np.repeat(np.where(bits, 235, 16).astype(np.uint8), 8)
    return np.repeat(np.repeat(row[None, :, None], 48, axis=0), 3, axis=2)


def index_of(frame: np.ndarray) -> int:
    """The index a decoded frame shows (each bar's mean against mid-grey)."""
    bars = frame[:, :64].reshape(frame.shape[0], 8, 8, -1).mean(axis=(0, 2, 3))
    return int(sum(1 << b for b, v in enumerate(bars) if v > 125))


def serve(port: int, indices: list[int], fps: float, first_pts: int) -> None:
    out = av.open(f"tcp://127.0.0.1:{port}?listen=1", "w", format="mpegts")
    stream = out.add_stream("mpeg4", rate=int(fps))
    stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
    stream.bit_rate = 2_000_000
    t0 = None
    for i in indices:
        frame = av.VideoFrame.from_ndarray(picture(i), format="rgb24")
        frame.pts = i - first_pts
        for packet in stream.encode(frame):
            out.mux(packet)        # the first write waits for the reader to connect
        t0 = t0 or time.perf_counter() - (i - indices[0]) / fps
        time.sleep(max(0.0, t0 + (i - indices[0] + 1) / fps - time.perf_counter()))
    for packet in stream.encode():
        out.mux(packet)
    out.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--frames", type=int, default=60)
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--skip", default="")
    ap.add_argument("--break-after", type=int, default=0)
    ap.add_argument("--pause", type=float, default=1.0)
    ap.add_argument("--reset-pts", action="store_true")
    args = ap.parse_args()
    skipped = set(range(*map(int, args.skip.split(":")))) if args.skip else set()
    every = [i for i in range(args.frames) if i not in skipped]
    if args.break_after:
        paused = round(args.pause * args.fps)   # frames the camera made while the link was down
        first = [i for i in every if i < args.break_after]
        second = [i + paused for i in every if i >= args.break_after]
        serve(args.port, first, args.fps, 0)
        time.sleep(args.pause)
        serve(args.port, second, args.fps, second[0] if args.reset_pts else 0)
        sent = first + second
        skipped |= set(range(args.break_after, args.break_after + paused))
    else:
        serve(args.port, every, args.fps, 0)
        sent = every
    print(json.dumps({"sent": sent, "skipped": sorted(skipped)}), flush=True)


if __name__ == "__main__":
    main()
