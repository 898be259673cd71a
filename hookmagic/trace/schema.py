"""Column schema of every table in a :class:`~hookmagic.trace.Trace`.

One schema for every source: the live CUPTI capture, recordings, and imports all produce
exactly these columns, so every analysis and view works on all of them.

Conventions
-----------
- Times are ``int64`` nanoseconds on the capture's clock (CUPTI's timestamp clock for live
  captures). ``meta["start_ns"]`` is the capture's start on that clock; ``duration_ns`` is
  stored beside ``start_ns``/``end_ns`` because nearly every question asks for it.
- ``correlation`` ties a kernel, copy, memset or allocation to the API call that caused it.
- ``stack_id`` points into the ``stacks`` table (-1: no Python stack was taken, e.g. the
  launching thread did not hold the GIL). ``range_id`` points into ``ranges`` (-1: none).
- Work replayed from a CUDA graph (``graph_id`` not 0) has as ``stack_id`` the stack of the
  line that captured its graph node, where the capture saw the node made; ``launch_stack_id``
  is always the stack of the call that launched the work (``cudaGraphLaunch`` for a replay),
  and equals ``stack_id`` for work launched directly. ``range_id`` is the launch's range.
- ``thread`` is the OS thread id of the launching thread (-1: unknown).
- Strings are plain ``str`` columns; enumerations use the lower-case names listed below.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

from hookmagic.common.errors import InvalidArgument

I64, I32, U64, F64, BOOL, STR = "int64", "int32", "uint64", "float64", "bool", "str"

#: table name -> ordered {column: dtype}
TABLES: dict[str, dict[str, str]] = {
    "kernels": {
        "start_ns": I64, "end_ns": I64, "duration_ns": I64,
        "device": I32, "context": I64, "stream": I64, "correlation": I64,
        "name": STR,
        "grid_x": I32, "grid_y": I32, "grid_z": I32,
        "block_x": I32, "block_y": I32, "block_z": I32,
        "registers": I32,            # per thread
        "static_smem": I32,          # bytes per block
        "dynamic_smem": I32,         # bytes per block
        "local_mem": I32,            # bytes per thread
        "graph_id": I64,             # 0: not launched from a CUDA graph
        "graph_node": I64,           # the graph node replayed (0: not from a graph)
        "thread": I64, "stack_id": I64, "range_id": I64,
        "launch_stack_id": I64,
    },
    "memcpy": {
        "start_ns": I64, "end_ns": I64, "duration_ns": I64,
        "device": I32, "context": I64, "stream": I64, "correlation": I64,
        "bytes": I64,
        "kind": STR,                 # htod, dtoh, dtod, htoh, ptop, atoh, htoa, ... or unknown
        "src_kind": STR,             # pageable, pinned, device, array, managed, ... or unknown
        "dst_kind": STR,
        "graph_id": I64, "graph_node": I64,
        "thread": I64, "stack_id": I64, "range_id": I64,
        "launch_stack_id": I64,
    },
    "memset": {
        "start_ns": I64, "end_ns": I64, "duration_ns": I64,
        "device": I32, "context": I64, "stream": I64, "correlation": I64,
        "bytes": I64, "value": I64,
        "memory_kind": STR,
        "graph_id": I64, "graph_node": I64,
        "thread": I64, "stack_id": I64, "range_id": I64,
        "launch_stack_id": I64,
    },
    "memory": {
        "time_ns": I64,
        "op": STR,                   # alloc, free (CUPTI MEMORY2); map, unmap (virtual memory)
        "address": U64, "bytes": I64,
        "memory_kind": STR,          # device, pinned, managed, pageable, ... or unknown
        "device": I32, "context": I64, "stream": I64, "correlation": I64,
        "is_async": BOOL,            # stream-ordered (cudaMallocAsync / memory pools)
        "source": STR,               # cupti, vmm, torch, cupy
        "thread": I64, "stack_id": I64,
    },
    "sync": {
        "start_ns": I64, "end_ns": I64, "duration_ns": I64,
        "type": STR,                 # event, stream_wait_event, stream, context, unknown
        "context": I64, "stream": I64, "event": I64, "correlation": I64,
        "thread": I64,
    },
    "api": {
        "start_ns": I64, "end_ns": I64, "duration_ns": I64,
        "domain": STR,               # runtime, driver
        "name": STR, "cbid": I32,
        "process": I64, "thread": I64, "correlation": I64,
        "return_code": I64,
    },
    "ranges": {
        "range_id": I64, "name": STR,
        "start_ns": I64, "end_ns": I64, "duration_ns": I64,
        "thread": I64, "depth": I32, "parent_id": I64,
        "source": STR,               # hookmagic, nvtx
    },
    "stacks": {
        "stack_id": I64,
        "depth": I32,                # 0 is the outermost frame
        "filename": STR, "function": STR, "line": I32,
    },
    # Blocks inside segments, as caching allocators (PyTorch's, CuPy's pool) see them; the
    # actions are ALLOCATOR_ACTIONS below. Rows are in time order; rows sharing a time_ns are
    # in the order they happened (allocators emit several events inside one microsecond).
    "allocator_events": {
        "time_ns": I64,
        "action": STR,               # one of ALLOCATOR_ACTIONS
        "address": U64,              # block, segment or mapped-range start
        "size": I64,                 # block / segment / mapped-range bytes
        "requested_size": I64,       # bytes the program asked for (= size when not given)
        "segment": U64,              # base of the segment holding the block (0: unknown)
        "stream": I64,               # allocation stream (allocators cache per stream)
        "device": I32,
        "pool": STR,                 # small, large, or "" (allocators without pools)
        "stack_id": I64,
        "source": STR,               # torch, cupy, cupti, model (a what-if replay)
    },
    "samples": {
        "time_ns": I64, "device": I32,
        "gpu_util": F64, "mem_util": F64,       # percent, as NVML reports them
        "memory_used": I64, "memory_total": I64,  # bytes
        "sm_clock_mhz": F64, "mem_clock_mhz": F64,
        "power_w": F64, "temperature_c": F64,
    },
    # Hardware counters, one row per (kernel launch, metric), from capture(counters=...);
    # empty for captures without counters. Metric names are Nsight Compute's.
    "counters": {
        "correlation_id": I64,       # the launch's `correlation` in the kernels table (-1: unmatched)
        "kernel": STR,               # the kernel's name
        "metric": STR,
        "value": F64,                # in the metric's own unit (bytes, ns, %, instructions)
    },
    # GPU-wide metrics sampled every interval of GPU time (CUPTI's PM sampling), one row per
    # (sample, metric), from capture(pm_sampling=...); empty without it. Times are CUPTI's
    # (the kernels' clock for live captures); each value covers [start_ns, end_ns].
    "pm_samples": {
        "start_ns": I64, "end_ns": I64,
        "device": I32,
        "metric": STR,
        "value": F64,                # in the metric's own unit (% of peak for the default set)
    },
}

TABLE_NAMES: tuple[str, ...] = tuple(TABLES)

#: The ``action`` values of ``allocator_events`` (PyTorch's memory-history names, so its traces
#: map one to one):
#:
#: - ``alloc``: a block was handed to the program (``size``: block bytes after rounding,
#:   ``requested_size``: bytes the program asked for)
#: - ``free_requested``: the program released the block; another stream may still use it
#: - ``free_completed``: the block went back to the allocator's free lists (ends its life)
#: - ``segment_alloc`` / ``segment_free``: the allocator took a segment from the driver
#:   (``cudaMalloc``) / gave it back (``cudaFree``)
#: - ``segment_map`` / ``segment_unmap``: pages mapped into / unmapped from an expandable
#:   segment (``cuMemMap``); ``address`` is the mapped range, ``segment`` the reserved base
#: - ``oom``: an allocation failed (``size``: bytes asked of the driver, ``address``: bytes the
#:   driver still had free, where known)
ALLOCATOR_ACTIONS: tuple[str, ...] = (
    "alloc", "free_requested", "free_completed",
    "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom",
)


class SchemaError(InvalidArgument):
    """A table holds values its schema does not allow (e.g. an unknown allocator action)."""


def validate(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """Check the values of table ``name`` that the schema restricts; return ``frame``.

    Today that is ``allocator_events.action``, which must be one of :data:`ALLOCATOR_ACTIONS`:
    an unknown action (a typo, a newer PyTorch) raises :class:`SchemaError` rather than being
    silently left out of every analysis. (Reading a file written by a newer hookmagic leaves
    such rows out with a warning instead, as it does unknown tables and columns.)
    """
    if name == "allocator_events" and len(frame):
        bad = set(pd.unique(frame["action"])) - set(ALLOCATOR_ACTIONS)
        if bad:
            raise SchemaError(f"unknown allocator action(s) {sorted(map(str, bad))}; the "
                              f"allowed ones are {list(ALLOCATOR_ACTIONS)}")
    return frame


#: columns of measured times and sizes that must be finite and not negative
NON_NEGATIVE = ("duration_ns", "bytes", "size", "requested_size")


def number_problems(tables: Mapping[str, Any], intervals: bool = True) -> list[str]:
    """Impossible numbers in trace tables, in words: negative durations or sizes and, with
    ``intervals``, rows that end before they start or whose duration is not their span."""
    out = []
    for name, frame in tables.items():
        if frame is None or not len(frame):
            continue
        for col in NON_NEGATIVE:
            if col in frame.columns and frame[col].dtype.kind in "if":
                neg = int((frame[col].to_numpy() < 0).sum())
                if neg:
                    out.append(f"{name}: {neg:,} row(s) with negative {col}")
        if intervals and "start_ns" in frame.columns and "end_ns" in frame.columns \
                and frame["start_ns"].dtype.kind in "iu" and frame["end_ns"].dtype.kind in "iu":
            back = int((frame["end_ns"].to_numpy() < frame["start_ns"].to_numpy()).sum())
            if back:
                out.append(f"{name}: {back:,} row(s) end before they start")
            if "duration_ns" in frame.columns and frame["duration_ns"].dtype.kind in "iu":
                # the analyses sum durations and the views draw start..end: they must agree
                span = frame["end_ns"].to_numpy() - frame["start_ns"].to_numpy()
                off = int((frame["duration_ns"].to_numpy() != span).sum())
                if off:
                    out.append(f"{name}: {off:,} row(s) whose duration_ns is not end_ns - start_ns")
    return out


_EMPTY: dict[str, pd.DataFrame] = {}


def empty_table(name: str) -> pd.DataFrame:
    """An empty DataFrame with the columns and dtypes of table ``name`` (a new one each call:
    callers may add columns to it)."""
    if name not in _EMPTY:
        _EMPTY[name] = conform(name, {})
    return _EMPTY[name].copy()


def conform(name: str, frame: pd.DataFrame | Mapping[str, Any]) -> pd.DataFrame:
    """Return ``frame`` with exactly the schema's columns, in order, cast to the schema's dtypes.

    ``frame`` is a DataFrame or a mapping of column name to array. Missing columns are filled
    with the column's neutral value (-1 for ids, 0 for numbers, "" for strings, False for
    flags; an allocator event's ``requested_size`` copies its ``size``, a ``launch_stack_id``
    its row's ``stack_id``) so that partial sources
    (imports, older recordings) still produce a complete table. The result is checked by
    :func:`validate`.
    Extra columns are kept after the schema's columns. A DataFrame that already conforms is
    returned as it is: this runs on every table of every trace, so it must cost nothing then.
    """
    columns = TABLES[name]
    if isinstance(frame, pd.DataFrame) and _conforms(frame, columns):
        return validate(name, frame)
    present = list(frame.columns) if isinstance(frame, pd.DataFrame) else list(frame)
    n = _length(frame, present)
    out: dict[str, Any] = {}
    for col, dtype in columns.items():
        if col not in present:
            fill_from = _FILLED_FROM.get((name, col))
            out[col] = (np.asarray(frame[fill_from]).astype(dtype, copy=False)
                        if fill_from in present else _neutral(col, dtype, n))
            continue
        values = frame[col]
        if dtype == STR:
            if isinstance(values, pd.Series) and values.hasnans:
                values = values.fillna("")
            out[col] = values  # pandas infers its string dtype from text
        else:
            arr = np.asarray(values)
            if arr.dtype.kind == "f" and dtype in (I64, I32, U64) and not np.isfinite(arr).all():
                # NaN would become INT64_MIN (a wall time of 9.2e9 s): refuse it
                from hookmagic.common.errors import BadNumbers
                bad = int((~np.isfinite(arr)).sum())
                raise BadNumbers(f"table {name!r}: column {col!r} holds {bad:,} NaN or infinite "
                                 "value(s) where integers belong")
            out[col] = arr.astype(dtype, copy=False)
    for col in present:
        if col not in columns:
            out[col] = np.asarray(frame[col])
    if n == 0:  # nothing for pandas to infer the string dtype from
        out.update({c: pd.Series([], dtype=STR) for c, d in columns.items() if d == STR})
    # Columns from a mapping become the table's own (the capture hands over fresh arrays, so
    # copying them again would only cost time); a DataFrame's are copied, leaving it untouched.
    return validate(name, pd.DataFrame(out, index=pd.RangeIndex(n),
                                       copy=isinstance(frame, pd.DataFrame)))


#: (table, column) -> the column a missing one copies (instead of the neutral value)
_FILLED_FROM: dict[tuple[str, str], str] = {
    ("allocator_events", "requested_size"): "size",
    # tables from before capture lines: the stack is the launch's
    ("kernels", "launch_stack_id"): "stack_id",
    ("memcpy", "launch_stack_id"): "stack_id",
    ("memset", "launch_stack_id"): "stack_id",
}


def _conforms(frame: pd.DataFrame, columns: dict[str, str]) -> bool:
    names = list(columns)
    if frame.columns.tolist()[: len(names)] != names or not isinstance(frame.index, pd.RangeIndex):
        return False
    dtypes = frame.dtypes.tolist()[: len(names)]
    return all(_dtype_matches(actual, wanted) for actual, wanted in zip(dtypes, columns.values()))


def _dtype_matches(actual: Any, wanted: str) -> bool:
    if wanted == STR:
        return pd.api.types.is_string_dtype(actual)
    return actual == np.dtype(wanted)


def _length(frame: Any, present: list[str]) -> int:
    if isinstance(frame, pd.DataFrame):
        return len(frame)
    return len(frame[present[0]]) if present else 0


def _neutral(col: str, dtype: str, n: int) -> np.ndarray:
    if dtype == STR:
        return np.full(n, "", dtype=object)
    if dtype == BOOL:
        return np.zeros(n, dtype=bool)
    if col in ("stack_id", "range_id", "parent_id", "thread", "device", "correlation", "stream"):
        return np.full(n, -1, dtype=dtype)
    return np.zeros(n, dtype=dtype)
