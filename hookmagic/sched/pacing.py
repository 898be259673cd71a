"""Host work through the host's slow (or fast) periods: compiled helpers both simulator engines
call (numba). ``windows`` are :func:`hookmagic.sched.host_speed.check_windows` rows
``(start_s, end_s, factor)``.

Imported only when a simulation runs, so that ``import hookmagic.sched`` (and opening a saved
result) needs no numba.
"""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["stretched", "paced"]


@numba.njit(cache=True, nogil=True)
def stretched(t: float, work: float, windows: np.ndarray) -> float:
    """When ``work`` seconds of host work (at the calibrated speed) begun at ``t`` end, with
    host work taking ``factor`` times as long inside each of ``windows`` (sorted, not
    overlapping)."""
    pos = t
    left = work
    k = windows.shape[0]
    i = 0
    while i < k and windows[i, 1] <= pos:
        i += 1
    while left > 0.0:
        if i == k or pos + left <= windows[i, 0]:
            return pos + left
        if pos < windows[i, 0]:
            left -= windows[i, 0] - pos
            pos = windows[i, 0]
        f = windows[i, 2]
        room = (windows[i, 1] - pos) / f  # calibrated-speed work that fits in the rest of it
        if left <= room:
            return pos + left * f
        left -= room
        pos = windows[i, 1]
        i += 1
    return pos


@numba.njit(cache=True, nogil=True)
def paced(dur: float, share: float, start: float, call: float, windows: np.ndarray) -> float:
    """A batch's GPU time ``dur`` (at the specs' host speed) when its launch call of ``call``
    seconds begins at ``start`` and the GPU waits through ``share`` of it: longer by ``share``
    of the time the call takes beyond ``call`` inside ``windows`` (shorter where the host is
    faster), never below 0. Both engines call it (``ModelSpec.call_share``)."""
    if share <= 0.0 or windows.shape[0] == 0:
        return dur
    return max(0.0, dur + share * (stretched(start, call, windows) - start - call))
