"""The allocator-level event table: blocks inside segments, as caching allocators see them.

The driver-level ``memory`` table of a :class:`~hookmagic.trace.Trace` holds what the driver
did (``cudaMalloc``/``cuMemMap`` and their frees). A caching allocator (PyTorch's, CuPy's pool)
hands out *blocks* carved from those *segments* and keeps freed blocks cached, so the questions
"how fragmented is the cache?" and "which tensor sat where?" need one more table. Its columns are
fixed here, in the same style as :mod:`hookmagic.trace.schema`.

Actions (the names PyTorch's memory history uses, so its traces map one to one):

============== =========================================================================
alloc          a block was handed to the program (``size``: block bytes after rounding,
               ``requested_size``: bytes the program asked for)
free_requested the program released the block; it may still be in use by another stream
free_completed the block went back to the allocator's free lists (only this ends its life)
segment_alloc  the allocator took a segment from the driver (``cudaMalloc``)
segment_free   the allocator gave a segment back (``cudaFree``)
segment_map    pages mapped into an expandable segment (``cuMemMap``); ``address`` is the
               mapped range, ``segment`` the base of the reserved virtual range
segment_unmap  pages unmapped from an expandable segment
oom            an allocation failed (``size``: bytes asked of the driver, ``address``: bytes
               the driver still had free, where known)
============== =========================================================================

Rows are in time order; for a given ``time_ns`` their order in the table is the order in which
they happened (allocators emit several events inside one microsecond).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

I64, I32, U64, BOOL, STR = "int64", "int32", "uint64", "bool", "str"

#: The table's name inside a Trace (to be added to ``hookmagic.trace.schema.TABLES``).
TABLE_NAME = "allocator_events"

#: ordered {column: dtype}; the proposal for ``schema.TABLES["allocator_events"]``.
ALLOCATOR_EVENTS: dict[str, str] = {
    "time_ns": I64,
    "action": STR,            # see ACTIONS
    "address": U64,           # block, segment or mapped-range start
    "size": I64,              # block / segment / mapped-range bytes
    "requested_size": I64,    # bytes the program asked for (alloc, free_*); = size otherwise
    "segment": U64,           # base address of the segment holding this block (0: unknown)
    "stream": I64,            # allocation stream (allocators cache per stream)
    "device": I32,
    "pool": STR,              # small, large, or "" (allocators without pools)
    "stack_id": I64,          # into the ``stacks`` table; -1: none taken
    "source": STR,            # torch, cupy, model (what-if replay), cupti
}

ACTIONS: tuple[str, ...] = (
    "alloc", "free_requested", "free_completed",
    "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom",
)

#: columns of the ``stacks`` table (same as ``hookmagic.trace.schema.TABLES["stacks"]``)
STACKS: dict[str, str] = {
    "stack_id": I64, "depth": I32, "filename": STR, "function": STR, "line": "int32",
}

_NEUTRAL_MINUS_ONE = ("stack_id", "device", "stream")


def empty_events() -> pd.DataFrame:
    """An empty allocator-event table with the schema's columns and dtypes."""
    return pd.DataFrame({c: pd.Series(dtype=d) for c, d in ALLOCATOR_EVENTS.items()})


def empty_stacks() -> pd.DataFrame:
    """An empty ``stacks`` table."""
    return pd.DataFrame({c: pd.Series(dtype=d) for c, d in STACKS.items()})


def conform_events(frame: pd.DataFrame | dict) -> pd.DataFrame:
    """Return ``frame`` with exactly the allocator-event columns, in order, with their dtypes.

    Missing columns get neutral values (-1 for ids, 0 for numbers, "" for strings);
    ``requested_size`` defaults to ``size``. Extra columns are kept after the schema's.
    Unknown actions raise ``ValueError`` so a typo never silently drops events from analyses.
    """
    if isinstance(frame, dict):
        frame = pd.DataFrame(frame)
    n = len(frame)
    out: dict[str, np.ndarray] = {}
    for col, dtype in ALLOCATOR_EVENTS.items():
        if col in frame.columns:
            series = frame[col]
            if series.isna().any():
                # partial rows (e.g. built from dicts): fill gaps the way missing columns are
                if col == "requested_size" and "size" in frame.columns:
                    series = series.fillna(frame["size"])
                else:
                    series = series.fillna(_neutral(col, dtype))
            values = series.to_numpy()
            out[col] = values.astype(object).astype(str) if dtype == STR else values
        elif col == "requested_size" and "size" in frame.columns:
            out[col] = frame["size"].to_numpy()
        elif dtype == STR:
            out[col] = np.full(n, "", dtype=object)
        elif col in _NEUTRAL_MINUS_ONE:
            out[col] = np.full(n, -1, dtype=dtype)
        else:
            out[col] = np.zeros(n, dtype=dtype)
    result = pd.DataFrame(out, index=pd.RangeIndex(n)).astype(ALLOCATOR_EVENTS)
    bad = set(result["action"].unique()) - set(ACTIONS)
    if bad:
        raise ValueError(f"unknown allocator actions: {sorted(bad)}")
    for col in frame.columns:
        if col not in ALLOCATOR_EVENTS:
            result[col] = frame[col].to_numpy()
    return result


def _neutral(col: str, dtype: str):
    if dtype == STR:
        return ""
    if dtype == BOOL:
        return False
    return -1 if col in _NEUTRAL_MINUS_ONE else 0


def sort_events(events: pd.DataFrame) -> pd.DataFrame:
    """Events in time order, keeping the table order of events that share a timestamp."""
    order = np.argsort(events["time_ns"].to_numpy(), kind="stable")
    return events.iloc[order].reset_index(drop=True)
