"""Live sources against a real stream: tests/live_server.py sends SYNTHETIC frames as MPEG-TS
over TCP on loopback in real time (a camera's pace), and the server's own record of what it
sent and skipped is the reference. Each frame shows its index in binary, so the frames the
pipeline received are identified independently of the timestamps the source uses.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("av")

from hookmagic.common.errors import HookmagicError, InvalidArgument  # noqa: E402
from hookmagic.pipeline import Pipeline, Stage, StreamUnavailable, camera, live_stream  # noqa: E402
from tests.live_server import index_of  # noqa: E402

SERVER = Path(__file__).with_name("live_server.py")
FPS = 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _live_run(*server_args: str, reconnects: int = 0):
    """Run a one-stage pipeline on the live server's stream; the stage reads each frame's index
    from its picture. Returns the run, the indices in arrival order and the server's record."""
    port = _free_port()
    server = subprocess.Popen([sys.executable, str(SERVER), str(port), *server_args],
                              stdout=subprocess.PIPE, text=True)
    try:
        seen: list[int] = []
        stage = Stage("index", lambda f: seen.append(index_of(f)) or f.shape)
        source = live_stream(f"tcp://127.0.0.1:{port}", timeout_s=10, reconnects=reconnects)
        run = Pipeline([stage]).run(source)
        out, _ = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    truth = json.loads(out.strip().splitlines()[-1])
    assert set(seen) <= set(truth["sent"]), "a frame shows an index the server never sent"
    return run, seen, truth, source


def test_a_live_stream_arrives_in_real_time_with_capture_times():
    run, got, truth, _ = _live_run("--frames", "60")
    assert got[0] <= 2 and got[-1] >= 57          # at most the stream's first frames and its tail lost
    assert got == list(range(got[0], got[-1] + 1))  # in order, none missing in between
    frames = run.frames
    assert (frames["outcome"] == "dropped").sum() == 0
    # the frames were read as they arrived: spread over the stream's real duration, not a burst
    reads = run.events[run.events["stage"] == "read"]["start_ns"].to_numpy()
    assert (reads.max() - reads.min()) / 1e9 >= 0.8 * (len(got) - 1) / FPS
    # capture times follow the stream's timestamps: one frame period apart
    done = frames[frames["outcome"] == "done"]
    assert done["e2e_ms"].min() >= 0 and done["e2e_ms"].median() < 500


def test_frames_the_stream_skipped_are_counted_as_dropped():
    run, got, truth, _ = _live_run("--frames", "60", "--skip", "20:30")
    dropped = run.frames[run.frames["outcome"] == "dropped"]
    # every index between the first and the last frame received is either received or dropped
    assert len(dropped) == (got[-1] - got[0] + 1) - len(got)
    assert set(range(20, 30)) <= set(range(got[0], got[-1] + 1)) - set(got)
    assert len(dropped) >= 10 and (dropped["reason"] == "lost in the stream").all()


def test_a_lost_connection_is_reconnected_and_its_frames_counted():
    run, got, truth, source = _live_run("--frames", "60", "--break-after", "30", "--pause", "1.0",
                                           reconnects=4)
    assert source.meta["reconnects"] == 1
    assert got[0] <= 2 and got[-1] >= max(truth["sent"]) - 2
    dropped = run.frames[run.frames["outcome"] == "dropped"]
    # the camera kept counting during the outage: its timestamps say how many frames were lost
    assert len(dropped) == (got[-1] - got[0] + 1) - len(got)
    assert set(truth["skipped"]) <= set(range(got[0], got[-1] + 1)) - set(got)
    assert dropped["reason"].str.contains("reconnected").sum() >= len(truth["skipped"])


def test_a_stream_that_cannot_be_opened_is_one_project_error():
    port = _free_port()   # nothing listens there
    with pytest.raises(StreamUnavailable) as info:
        Pipeline([Stage("a", abs)]).run(live_stream(f"tcp://127.0.0.1:{port}", timeout_s=1, reconnects=1))
    assert isinstance(info.value, HookmagicError) and str(port) in str(info.value)


@pytest.mark.parametrize("bad", [
    lambda: live_stream("clip.mp4"),
    lambda: live_stream("file:///etc/passwd"),
    lambda: live_stream("rtsp://cam/1", reconnects=-1),
    lambda: live_stream("rtsp://cam/1", timeout_s=float("nan")),
    lambda: live_stream("rtsp://cam/1", options={"x": 1}),
    lambda: camera("video0"),
    lambda: camera("/dev/video0", size=(0, 480)),
    lambda: camera("/dev/video0", fps=-5),
])
def test_bad_arguments_are_invalid_argument(bad):
    with pytest.raises(InvalidArgument):
        bad()


def test_credentials_stay_out_of_names():
    source = live_stream("rtsp://user:secret@camera.local:554/stream1")
    assert "secret" not in source.description and "secret" not in source.streams[0].name
    assert "secret" not in json.dumps(source.meta)
    assert np.isfinite(source.meta["reconnects"])
