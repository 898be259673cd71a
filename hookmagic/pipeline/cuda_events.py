"""CUDA events for timing GPU stages, recorded through the CUDA driver API with the GIL held.

A GPU stage execution is timed by two events recorded on the worker's stream around ``fn``;
the worker already waits for its stream after ``fn`` (instrumented or not), so the end event is
complete then and nothing waits for it. The events are read (``cuEventElapsedTime``) only after
the run, or inside it once a worker holds :data:`PENDING_MAX` unread pairs.

Which executions are timed: every one that starts :data:`INTERVAL_S` or more after the start of
the worker's previous timed one — all executions of a stage slower than that, an evenly spaced
sample of a faster one's. Two event records cost 5–11 µs per execution on an H200 in a
3-thread pipeline of one-kernel stages (lab/pipeline/pipeline_instrument.md), 8–24 % of such a
pipeline's throughput when every execution was timed; spaced this way they cost a worker at
most about 0.5 % of its time.

Why the driver API through ``ctypes.PyDLL``: ``torch.cuda.Event.record`` releases the GIL
around a call of about a microsecond, and with several pipeline threads each hand-over of the
GIL costs more than the call (lab/pipeline/pipeline_instrument_host.md); a ``PyDLL`` call keeps
the GIL, and recording an event never blocks for long. Events are created once per worker
thread and reused across runs (the threads themselves are kept: :mod:`hookmagic.pipeline.workers`).
"""
from __future__ import annotations

import ctypes
import sys
import threading
from collections import deque
from typing import Any

from hookmagic.common.errors import Unavailable

#: unread event pairs a worker holds before it reads its oldest one after each execution
PENDING_MAX = 4096
#: a worker times an execution when this long has passed since the start of its last timed one
INTERVAL_S = 2e-3
#: event pairs created at once when a worker has none free (creation costs a few µs each)
CHUNK = 64

_lock = threading.Lock()
_driver: Any = None
_why = ""


def driver() -> Any:
    """The CUDA driver library, loaded once with ``ctypes.PyDLL`` (its calls keep the GIL);
    :class:`~hookmagic.common.errors.Unavailable` when it cannot be loaded."""
    global _driver, _why
    with _lock:
        if _driver is None and not _why:
            names = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")
            for name in names:
                try:
                    lib = ctypes.PyDLL(name)
                    break
                except OSError as err:
                    _why = f"{name}: {err}"
            else:
                raise Unavailable(f"GPU stage timing needs the CUDA driver library ({_why})")
            vp, c_int = ctypes.c_void_p, ctypes.c_int
            for fn, names_, args in (
                    ("create", ("cuEventCreate",), (ctypes.POINTER(vp), ctypes.c_uint)),
                    ("record", ("cuEventRecord",), (vp, vp)),
                    ("sync", ("cuEventSynchronize",), (vp,)),
                    ("elapsed", ("cuEventElapsedTime", "cuEventElapsedTime_v2"),
                     (ctypes.POINTER(ctypes.c_float), vp, vp)),
                    ("destroy", ("cuEventDestroy_v2", "cuEventDestroy"), (vp,)),
                    ("get_ctx", ("cuCtxGetCurrent",), (ctypes.POINTER(vp),)),
                    ("set_ctx", ("cuCtxSetCurrent",), (vp,)),
                    ("retain", ("cuDevicePrimaryCtxRetain",), (ctypes.POINTER(vp), c_int)),
                    ("device", ("cuDeviceGet",), (ctypes.POINTER(c_int), c_int))):
                f = next((getattr(lib, n) for n in names_ if hasattr(lib, n)), None)
                if f is None:
                    _why = f"the CUDA driver library has no {names_[0]}"
                    raise Unavailable(f"GPU stage timing: {_why}")
                f.argtypes, f.restype = args, c_int
                setattr(lib, "hm_" + fn, f)
            _driver = lib
        if _driver is None:
            raise Unavailable(f"GPU stage timing needs the CUDA driver library ({_why})")
        return _driver


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise Unavailable(f"GPU stage timing: {what} failed with CUDA driver error {rc}")


def bind_context(device: int) -> None:
    """Make ``device``'s primary context (the one PyTorch uses) current on this thread, so the
    driver calls below work on a thread where only the runtime was used so far."""
    lib = driver()
    cur = ctypes.c_void_p()
    _check(lib.hm_get_ctx(ctypes.byref(cur)), "cuCtxGetCurrent")
    if cur.value:
        return
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    _check(lib.hm_device(ctypes.byref(dev), device), "cuDeviceGet")
    _check(lib.hm_retain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    _check(lib.hm_set_ctx(ctx), "cuCtxSetCurrent")


def new_event() -> int:
    """A new timing event (default flags) in the current context: its handle."""
    ev = ctypes.c_void_p()
    _check(driver().hm_create(ctypes.byref(ev), 0), "cuEventCreate")
    return int(ev.value or 0)


class EventPairs:
    """One worker thread's timing event pairs: ``take()`` a free pair (creating
    :data:`CHUNK` more when none is free), ``give(pair)`` it back once read."""

    def __init__(self) -> None:
        self.free: list[tuple[int, int]] = []
        self.record = driver().hm_record

    def take(self) -> tuple[int, int]:
        if not self.free:
            self.free.extend((new_event(), new_event()) for _ in range(CHUNK))
        return self.free.pop()

    def give(self, pair: tuple[int, int]) -> None:
        self.free.append(pair)

    def destroy(self) -> None:
        lib = driver()
        for a, b in self.free:
            lib.hm_destroy(a)
            lib.hm_destroy(b)
        self.free.clear()


class Reference:
    """A run's reference event: recorded on the legacy default stream after the device is idle,
    waited for, and paired with the host clock then; later events are placed on the host clock by
    their elapsed time from it."""

    def __init__(self, event: int) -> None:
        import time
        lib = driver()
        _check(lib.hm_record(event, None), "cuEventRecord")
        _check(lib.hm_sync(event), "cuEventSynchronize")
        self.ns = time.perf_counter_ns()
        self.event = event
        self._elapsed = lib.hm_elapsed
        self._ms = ctypes.c_float()

    def times(self, pair: tuple[int, int]) -> tuple[int, int]:
        """Host-clock ns of a completed pair: the start from the reference, the end from the start
        (so a long run's float milliseconds lose no precision on the duration); (-1, -1), the
        tables' "no GPU time", if the driver cannot say."""
        ms = self._ms
        if self._elapsed(ctypes.byref(ms), self.event, pair[0]) != 0:
            return -1, -1
        start = self.ns + int(ms.value * 1e6)
        if self._elapsed(ctypes.byref(ms), pair[0], pair[1]) != 0:
            return -1, -1
        return start, start + int(ms.value * 1e6)


def resolve(ref: Reference, owner: EventPairs, pending: deque, done: list,
            count: int | None = None) -> None:
    """Turn the ``count`` oldest (default: all) completed pairs of ``pending`` — entries
    ``(first row, rows, pair)`` — into ``(first row, rows, start_ns, end_ns)`` appended to
    ``done``, and give the pairs back to ``owner``."""
    for _ in range(len(pending) if count is None else min(count, len(pending))):
        first, n, pair = pending.popleft()
        done.append((first, n, *ref.times(pair)))
        owner.give(pair)
