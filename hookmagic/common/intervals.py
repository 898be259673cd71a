"""Interval arithmetic shared by the importers and analyses (vectorised; times in int64 nanoseconds)."""
from __future__ import annotations

import numpy as np


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of ``[start, end)`` intervals as sorted, disjoint ``(starts, ends)`` arrays.

    Overlapping or touching intervals merge into one. Ends before starts count as empty.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.maximum(np.asarray(ends, dtype=np.int64), starts)
    if starts.size == 0:
        return starts.copy(), ends.copy()
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)          # furthest end seen so far
    begins = np.empty(s.size, dtype=bool)
    begins[0] = True
    begins[1:] = s[1:] > reach[:-1]           # a gap before this interval starts a new run
    first = np.flatnonzero(begins)
    last = np.r_[first[1:] - 1, s.size - 1]
    return s[first], reach[last]


def busy_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Nanoseconds covered by at least one of the intervals (overlaps counted once)."""
    s, e = merge_intervals(starts, ends)
    return int((e - s).sum())
