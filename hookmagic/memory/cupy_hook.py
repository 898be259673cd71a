"""CuPy's memory pool as allocator events, through ``cupy.cuda.MemoryHook``.

CuPy calls a hook around three things: ``malloc`` (a chunk handed to the program, from the pool
or after a miss), ``alloc`` (a pool miss: a new device allocation) and ``free`` (a chunk returned
to the pool). It does not call one when the pool releases memory to the device
(``free_all_blocks``); a released allocation shows up when the device hands the same address
out again, so :meth:`PoolEventLog.events` closes an old segment where a new one overlaps it
(such ``segment_free`` rows are placed at the new allocation's time).

Use :func:`start` / :func:`stop` from a capture; they do nothing when CuPy is not imported.
"""
from __future__ import annotations

import sys
import time
from bisect import bisect_right, insort
from collections.abc import Callable

import numpy as np
import pandas as pd

from hookmagic.trace import schema
from hookmagic.memory.stacks import StackInterner, python_frames


class PoolEventLog:
    """The hook's callbacks and what they recorded; independent of CuPy so it can be tested.

    ``stream_of`` returns the current stream handle (CuPy's hooks do not pass one);
    ``with_stacks`` takes a Python stack at every hand-out (a few microseconds each).
    """

    name = "hookmagic"

    def __init__(self, clock: Callable[[], int] = time.time_ns,
                 stream_of: Callable[[], int] = lambda: 0, with_stacks: bool = True,
                 device: int = 0) -> None:
        self.clock, self.stream_of, self.with_stacks = clock, stream_of, with_stacks
        self.device = device
        self.stacks = StackInterner()
        self._rows: list[tuple] = []
        self._live: dict[int, tuple[int, int, int]] = {}   # ptr -> (size, requested, stack)

    # CuPy's postprocess callbacks, with their names and arguments (the hook start() installs
    # forwards them here; the preprocess ones carry nothing this log needs)
    def alloc_postprocess(self, device_id: int, mem_size: int, mem_ptr: int) -> None:
        self._rows.append((self.clock(), "segment_alloc", int(mem_ptr), int(mem_size),
                           int(mem_size), self.stream_of(), int(device_id), -1))

    def malloc_postprocess(self, device_id: int, size: int, mem_size: int, mem_ptr: int,
                           pmem_id: int) -> None:
        stack = self.stacks.intern(python_frames(skip=2)) if self.with_stacks else -1
        self._live[int(mem_ptr)] = (int(mem_size), int(size), stack)
        self._rows.append((self.clock(), "alloc", int(mem_ptr), int(mem_size), int(size),
                           self.stream_of(), int(device_id), stack))

    def free_postprocess(self, device_id: int, mem_size: int, mem_ptr: int,
                         pmem_id: int) -> None:
        size, req, stack = self._live.pop(int(mem_ptr), (int(mem_size), int(mem_size), -1))
        t, s = self.clock(), self.stream_of()
        for action in ("free_requested", "free_completed"):
            self._rows.append((t, action, int(mem_ptr), size, req, s, int(device_id), stack))

    def events(self) -> pd.DataFrame:
        """The recording as allocator events, with each chunk's segment filled in."""
        if not self._rows:
            return schema.empty_table("allocator_events")
        cols = ["time_ns", "action", "address", "size", "requested_size", "stream", "device",
                "stack_id"]
        rows: list[tuple] = []
        starts: list[int] = []
        seg_end: dict[int, int] = {}
        for r in self._rows:
            t, action, addr, size = r[0], r[1], r[2], r[3]
            seg = 0
            if action == "segment_alloc":
                # an overlapping older segment must have been released (no hook for that)
                i = bisect_right(starts, addr + size - 1) - 1
                while i >= 0 and seg_end[starts[i]] > addr:
                    old = starts.pop(i)
                    end = seg_end.pop(old)
                    rows.append((t, "segment_free", old, end - old, end - old, r[5], r[6], -1,
                                 old))
                    i -= 1
                insort(starts, addr)
                seg_end[addr] = addr + size
                seg = addr
            else:
                i = bisect_right(starts, addr) - 1
                if i >= 0 and seg_end[starts[i]] > addr:
                    seg = starts[i]
            rows.append(r + (seg,))
        frame = pd.DataFrame.from_records(rows, columns=cols + ["segment"])
        frame["address"] = frame["address"].astype(np.uint64)
        frame["segment"] = frame["segment"].astype(np.uint64)
        frame["source"] = "cupy"
        return schema.conform("allocator_events", frame)


_active: tuple[object, PoolEventLog] | None = None


def start(stacks: bool = True, clock: Callable[[], int] = time.time_ns) -> bool:
    """Install the hook on the calling thread; False when CuPy is not imported.

    ``stacks``: take the Python stack of every hand-out (``%%cudahook --no-stacks``: none).

    CuPy's hooks are per thread: allocations on other threads are not seen.
    """
    global _active
    cupy = sys.modules.get("cupy")
    if cupy is None or _active is not None:
        return False

    def stream_of() -> int:
        return int(cupy.cuda.get_current_stream().ptr)

    log = PoolEventLog(clock=clock, stream_of=stream_of, with_stacks=stacks,
                       device=int(cupy.cuda.Device().id))
    hook_cls = type("HookmagicPoolHook", (cupy.cuda.MemoryHook,), {
        "name": "hookmagic",
        "alloc_postprocess": lambda self, **kw: log.alloc_postprocess(**kw),
        "malloc_postprocess": lambda self, **kw: log.malloc_postprocess(**kw),
        "free_postprocess": lambda self, **kw: log.free_postprocess(**kw),
    })
    hook = hook_cls()
    hook.__enter__()
    _active = (hook, log)
    return True


def stop() -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """Remove the hook; return (allocator_events, stacks), or None if nothing was recording."""
    global _active
    if _active is None:
        return None
    hook, log = _active
    _active = None
    hook.__exit__(None, None, None)
    return log.events(), log.stacks.table()
