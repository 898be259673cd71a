"""A time window of a :class:`~hookmagic.trace.Trace`: the rows that start inside it.

Used by scheduled captures (``hookmagic.capture(schedule=...)``) to keep only the active steps
of each window and leave out the warm-up steps recorded before them.
"""
from __future__ import annotations

from typing import Any

from hookmagic.trace.model import Trace

#: tables whose rows are kept by their ``start_ns``; the others with a ``time_ns`` by that
_STARTED = ("kernels", "memcpy", "memset", "sync", "api")
_TIMED = ("memory", "allocator_events", "samples")


def window(trace: Trace, start_ns: int, end_ns: int | None = None, **meta: Any) -> Trace:
    """A new Trace with the rows of ``trace`` that start in ``[start_ns, end_ns)``.

    Kernels, copies, memsets, synchronisation and API calls are kept by their start time on
    the GPU/CUPTI clock (as Kineto keeps a profiler's active window); allocations, allocator
    events and NVML samples by their time; ranges that overlap the window are kept whole; the
    ``stacks`` table is kept whole (stack ids stay valid). ``end_ns`` None: no upper bound.
    ``meta`` entries are added to the copy of ``trace.meta``, whose ``start_ns`` (and
    ``end_ns``, when given) become the window's.
    """
    start = int(start_ns)
    end = None if end_ns is None else int(end_ns)
    tables = {}
    for name, frame in trace.tables.items():
        if name in _STARTED or name in _TIMED:
            column = frame["start_ns" if name in _STARTED else "time_ns"]
            keep = column >= start
            if end is not None:
                keep &= column < end
            frame = frame[keep]
        elif name == "ranges":
            keep = frame["end_ns"] >= start
            if end is not None:
                keep &= frame["start_ns"] < end
            frame = frame[keep]
        tables[name] = frame.reset_index(drop=True)
    new_meta = dict(trace.meta)
    new_meta["start_ns"] = start
    if end is not None:
        new_meta["end_ns"] = end
    new_meta.update(meta)
    return Trace(tables, new_meta)
