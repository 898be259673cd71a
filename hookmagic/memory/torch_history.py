"""PyTorch's caching-allocator history as allocator events.

During a capture, :func:`start` turns on ``torch.cuda.memory._record_memory_history`` and
:func:`stop` takes ``torch.cuda.memory._snapshot()`` and converts it. Snapshot files written by
``torch.cuda.memory._dump_snapshot`` are pickles: :func:`load_snapshot` opens them only with
``allow_pickle=True`` (and warns), because unpickling a file runs code chosen by its author.

What the conversion adds to PyTorch's trace:

- block sizes: the trace records *requested* bytes; the block size follows from PyTorch's
  rounding, and a large-pool block also keeps a remainder of at most 1 MiB it was not worth
  splitting off (inferred from the layout of the segment at that moment);
- the segment of every block, and its pool (small: 2 MiB segments);
- state at the start of the recording: segments and blocks that existed before the first
  recorded event (the history is a ring buffer of ``max_entries``) are added at the first
  event's time, so reserved and allocated curves start at their true level.

Times are ``time_us`` of PyTorch's trace (Unix epoch) in nanoseconds, plus ``time_offset_ns``.
"""
from __future__ import annotations

import pickle
import sys
import warnings
from bisect import bisect_right, insort
from pathlib import Path

import numpy as np
import pandas as pd

from hookmagic.common import files, limits
from hookmagic.common.errors import BadNumbers, HookmagicError, InputFileError
from hookmagic.memory import torch_rules as R
from hookmagic.memory.stacks import StackInterner
from hookmagic.trace import schema

_ACTIONS = frozenset(schema.ALLOCATOR_ACTIONS)
_recording = False


class SnapshotFileError(InputFileError):
    """A memory snapshot file is missing, not a regular file, or not a PyTorch snapshot."""


class SnapshotNumbersError(SnapshotFileError, BadNumbers):
    """A memory snapshot holds negative sizes or times, or text where numbers belong."""


class PickleRefused(SnapshotFileError, PermissionError):
    """A snapshot is a pickle and ``allow_pickle=True`` was not given (unpickling runs code)."""


# -- live recording ------------------------------------------------------------------------------
def start(max_entries: int = 1_000_000, stacks: bool = True) -> bool:
    """Start recording PyTorch's allocator history; False when torch/CUDA is not in use.

    Only acts when ``torch`` is already imported and CUDA is initialised (a capture must not
    import torch or create a CUDA context on its own). ``stacks``: take the Python stack of
    every allocator event (``%%cudahook --no-stacks`` turns it off: the events are still
    recorded, each with ``stack_id`` -1). ``max_entries`` bounds PyTorch's ring buffer.
    """
    global _recording
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    torch.cuda.memory._record_memory_history(enabled="all", context="all" if stacks else None,
                                             stacks="python", max_entries=max_entries)
    _recording = True
    return True


def stop(time_offset_ns: int = 0) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """Stop recording; return (allocator_events, stacks), or None if :func:`start` did not
    record. ``time_offset_ns`` is added to every time (to move onto the capture's clock)."""
    global _recording
    if not _recording:
        return None
    torch = sys.modules["torch"]
    try:
        snap = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
        _recording = False
    return events_from_snapshot(snap, time_offset_ns=time_offset_ns)


# -- files ---------------------------------------------------------------------------------------
def load_snapshot(path: str | Path, allow_pickle: bool = False) -> dict:
    """Read a snapshot file: JSON as is; a pickle (``_dump_snapshot``) only with
    ``allow_pickle=True``, with a warning. Never unpickle a file you did not make yourself."""
    path = Path(path)
    # bounded (HOOKMAGIC_MAX_BYTES, _JSON_BYTES, _DEPTH); folders, FIFOs and devices refused
    raw = files.read_input(path, "memory snapshot", SnapshotFileError)
    if raw.lstrip()[:1] in (b"{", b"["):
        doc = files.parse_json(raw, f"memory snapshot {str(path)!r}", SnapshotFileError)
        if not isinstance(doc, dict):
            raise SnapshotFileError(f"memory snapshot {str(path)!r} is JSON but not a snapshot "
                                    "(an object with 'segments' and 'device_traces')")
        return doc
    if not allow_pickle:
        raise PickleRefused(
            f"{path} is a pickle (torch.cuda.memory._dump_snapshot). Unpickling runs code chosen "
            "by whoever wrote the file; pass allow_pickle=True only for files you trust.")
    warnings.warn(f"unpickling {path}: only do this for files you trust", stacklevel=2)
    return pickle.loads(raw)


def load_snapshot_events(path: str | Path, allow_pickle: bool = False,
                         time_offset_ns: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`load_snapshot` then :func:`events_from_snapshot`."""
    return events_from_snapshot(load_snapshot(path, allow_pickle), time_offset_ns)


# -- conversion ----------------------------------------------------------------------------------
def _frames(entry: dict) -> list[tuple[str, str, int]]:
    fr = entry.get("frames") or []
    # PyTorch lists the innermost frame first; the stacks table puts the outermost at depth 0
    return [(str(f.get("filename", "")), str(f.get("name", "")), int(f.get("line", 0) or 0))
            for f in reversed(fr)]


class _Layout:
    """Live segments and allocated blocks, to infer each block's segment and true size."""

    def __init__(self) -> None:
        self.starts: list[int] = []             # sorted segment/mapped-range starts
        self.seg: dict[int, tuple[int, int, bool]] = {}   # start -> (end, segment, expandable)
        self.blocks: dict[int, list[int]] = {}  # segment -> sorted allocated block starts

    def add_range(self, start: int, end: int, segment: int, expandable: bool) -> None:
        if start not in self.seg:
            insort(self.starts, start)
        self.seg[start] = (end, segment, expandable)

    def drop_range(self, start: int, end: int) -> None:
        if start in self.seg:
            self.starts.remove(start)
            del self.seg[start]

    def find(self, addr: int) -> tuple[int, int, int, bool] | None:
        i = bisect_right(self.starts, addr) - 1
        if i < 0:
            return None
        s = self.starts[i]
        end, segment, expandable = self.seg[s]
        return (s, end, segment, expandable) if addr < end else None

    def block_size(self, addr: int, requested: int, pool_small: bool) -> tuple[int, int]:
        """(block size, segment base) of a block allocated at ``addr``."""
        size = R.round_size(requested)
        hit = self.find(addr)
        if hit is None:
            return size, 0
        _, end, segment, expandable = hit
        starts = self.blocks.setdefault(segment, [])
        if not pool_small and not expandable:
            j = bisect_right(starts, addr)
            limit = starts[j] if j < len(starts) else end
            if 0 <= limit - (addr + size) <= R.SMALL_SIZE:
                size = limit - addr    # the remainder was too small to split off
        insort(starts, addr)
        return size, segment

    def release(self, addr: int, segment: int) -> None:
        starts = self.blocks.get(segment)
        if starts:
            i = bisect_right(starts, addr) - 1
            if i >= 0 and starts[i] == addr:
                del starts[i]


def events_from_snapshot(snapshot: dict, time_offset_ns: int = 0,
                         source: str = "torch") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Convert a PyTorch memory snapshot dict into (allocator_events, stacks).

    Raises :class:`SnapshotFileError` for a dict that is not a snapshot,
    :class:`SnapshotNumbersError` for negative or non-numeric sizes, addresses or times, and
    :class:`~hookmagic.common.errors.LimitExceeded` past ``HOOKMAGIC_MAX_ROWS`` events.
    """
    if not isinstance(snapshot, dict):
        raise SnapshotFileError(f"a memory snapshot is a dict, not {type(snapshot).__name__}")
    try:
        with files.gc_paused():
            return _events_from_snapshot(snapshot, time_offset_ns, source)
    except HookmagicError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:
        raise SnapshotNumbersError(f"memory snapshot holds a size, address or time that is not "
                                   f"a whole number ({type(exc).__name__}: {exc})") from None
    except (KeyError, AttributeError, IndexError) as exc:
        raise SnapshotFileError(f"memory snapshot is missing a field or has one of the wrong "
                                f"kind ({type(exc).__name__}: {exc})") from None


def _events_from_snapshot(snapshot: dict, time_offset_ns: int,
                          source: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    interner = StackInterner()
    traces = snapshot.get("device_traces") or []
    segments = snapshot.get("segments") or []
    if not isinstance(traces, list) or not isinstance(segments, list):
        raise SnapshotFileError("memory snapshot: 'device_traces' and 'segments' must be lists")
    limits.check(limits.MAX_ROWS, sum(len(t) for t in traces if isinstance(t, list))
                 + len(segments), "memory snapshot (events plus segments)")
    rows: list[tuple] = []
    for device, trace in enumerate(traces):
        if not isinstance(trace, list):
            raise SnapshotFileError(f"memory snapshot: device_traces[{device}] is not a list")
        rows.extend(_device_rows(device, trace, segments, interner, time_offset_ns))
    if not rows:
        return schema.empty_table("allocator_events"), interner.table()
    cols = ["time_ns", "action", "address", "size", "requested_size", "segment", "stream",
            "device", "pool", "stack_id", "_order"]
    frame = pd.DataFrame.from_records(rows, columns=cols)
    for col in ("size", "requested_size", "address"):
        neg = int((frame[col] < 0).sum())
        if neg:
            raise SnapshotNumbersError(f"memory snapshot: {neg} event(s) with a negative {col}")
    frame = frame.sort_values(["time_ns", "_order"], kind="stable").drop(columns="_order")
    frame["source"] = source
    frame["address"] = frame["address"].astype(np.uint64)
    frame["segment"] = frame["segment"].astype(np.uint64)
    return schema.conform("allocator_events", frame.reset_index(drop=True)), interner.table()


class _Rows:
    """The rows of one device, each numbered in the order it was emitted (events sharing a
    time keep that order)."""

    def __init__(self, device: int) -> None:
        self.device = device
        self.rows: list[tuple] = []

    def emit(self, t: int, action: str, addr: int, size: int, req: int, seg: int, stream: int,
             pool: str, stack: int) -> None:
        self.rows.append((t, action, addr, size, req, seg, stream, self.device, pool, stack,
                          len(self.rows)))


def _device_rows(device: int, trace: list[dict], segments: list[dict],
                 interner: StackInterner, offset: int) -> list[tuple]:
    """Allocator-event rows of one device: the state before the history began, then the
    history's events with block sizes, segments and pools filled in."""
    entries = [e for e in trace if isinstance(e, dict) and e.get("action") in _ACTIONS]
    dev_segments = [s for s in segments
                    if isinstance(s, dict) and int(s.get("device", device)) == device]
    seg_type = {int(s["address"]): s.get("segment_type", "") for s in dev_segments}
    t0 = min((int(e.get("time_us", 0)) for e in entries), default=0) * 1000 + offset
    layout, out = _Layout(), _Rows(device)
    live = _emit_initial_state(entries, dev_segments, seg_type, layout, out, t0)
    for e in entries:
        t = int(e.get("time_us", 0)) * 1000 + offset
        stack = interner.intern(_frames(e))
        if e["action"].startswith("segment_"):
            _segment_event(e, t, stack, seg_type, layout, out)
        else:
            _block_event(e, t, stack, layout, live, out)
    return out.rows


def _initial_segments(entries: list[dict],
                      dev_segments: list[dict]) -> dict[int, tuple[int, str, int, bool]]:
    """address -> (size, pool, stream, expandable) of the segments that existed before the
    first recorded event: freed before the history allocates them, or in the snapshot but
    never allocated in the history; for expandable segments, the ranges mapped at the start
    (:func:`_initial_mapped_ranges`)."""
    allocated = {int(e["addr"]) for e in entries if e["action"] == "segment_alloc"}
    found: dict[int, tuple[int, str, int, bool]] = {}
    seen: set[int] = set()
    for e in entries:
        a = int(e["addr"])
        if e["action"] == "segment_free" and a not in seen:
            found.setdefault(a, (int(e["size"]), "", int(e.get("stream", 0)), False))
        elif e["action"] == "segment_alloc":
            seen.add(a)
    for s in dev_segments:
        a = int(s["address"])
        if not s.get("is_expandable") and a not in allocated:
            found.setdefault(a, (int(s["total_size"]), s.get("segment_type", ""),
                                 int(s.get("stream", 0)), False))
    for a, (size, pool, stream) in _initial_mapped_ranges(entries, dev_segments).items():
        found.setdefault(a, (size, pool, stream, True))
    return found


def _initial_mapped_ranges(entries: list[dict],
                           dev_segments: list[dict]) -> dict[int, tuple[int, str, int]]:
    """start -> (size, pool, stream) of the expandable-segment ranges mapped before the first
    recorded event.

    The snapshot reports an expandable segment as one entry per contiguous range mapped *when the
    snapshot was taken*; a range that was already mapped when the history began and then grew
    (``segment_map`` of the pages after it) is reported at its final size. The ranges mapped at
    the start are therefore the final ones with the history undone, newest event first: a
    ``segment_map`` unmaps its pages again, a ``segment_unmap`` maps them back.
    """
    final: list[tuple[int, int, str, int]] = []     # (start, end, pool, stream)
    for s in dev_segments:
        if s.get("is_expandable"):
            a = int(s["address"])
            final.append((a, a + int(s["total_size"]), s.get("segment_type", ""),
                          int(s.get("stream", 0))))
    ranges = sorted((a, b) for a, b, _, _ in final)
    streams: dict[int, int] = {}
    for e in reversed([e for e in entries if e["action"] in ("segment_map", "segment_unmap")]):
        a, b = int(e["addr"]), int(e["addr"]) + int(e["size"])
        if e["action"] == "segment_map":
            ranges = _interval_minus(ranges, a, b)
        else:
            ranges = _interval_plus(ranges, a, b)
            streams[a] = int(e.get("stream", 0))
    out: dict[int, tuple[int, str, int]] = {}
    for a, b in ranges:
        # pool and stream: the snapshot's range holding it, else (unmapped since) the unmap's
        hold = [(pool, stream) for lo, hi, pool, stream in final if lo <= a < hi]
        out[a] = (b - a, *(hold[0] if hold else ("", streams.get(a, 0))))
    return out


def _interval_minus(ranges: list[tuple[int, int]], a: int, b: int) -> list[tuple[int, int]]:
    """Sorted disjoint ``ranges`` with [a, b) taken out."""
    out = []
    for lo, hi in ranges:
        if hi <= a or lo >= b:
            out.append((lo, hi))
            continue
        if lo < a:
            out.append((lo, a))
        if hi > b:
            out.append((b, hi))
    return sorted(out)


def _interval_plus(ranges: list[tuple[int, int]], a: int, b: int) -> list[tuple[int, int]]:
    """Sorted disjoint ``ranges`` with [a, b) added; touching ranges merge into one."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges + [(a, b)]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _initial_blocks(entries: list[dict],
                    dev_segments: list[dict]) -> dict[int, tuple[int, int, int]]:
    """address -> (size, requested, stream) of the blocks allocated before the first recorded
    event: freed before the history allocates them, or allocated in the snapshot but never in
    the history."""
    found: dict[int, tuple[int, int, int]] = {}
    seen: set[int] = set()
    for e in entries:
        a = int(e["addr"])
        if e["action"] == "alloc":
            seen.add(a)
        elif e["action"] in ("free_requested", "free_completed") and a not in seen:
            found.setdefault(a, (R.round_size(int(e["size"])), int(e["size"]),
                                 int(e.get("stream", 0))))
    allocated = {int(e["addr"]) for e in entries if e["action"] == "alloc"}
    for s in dev_segments:
        for b in s.get("blocks", []):
            a = int(b["address"])
            if b.get("state") == "active_allocated" and a not in allocated:
                found.setdefault(a, (int(b["size"]), int(b.get("requested_size", b["size"])),
                                     int(s.get("stream", 0))))
    return found


def _emit_initial_state(entries: list[dict], dev_segments: list[dict], seg_type: dict[int, str],
                        layout: _Layout, out: _Rows,
                        t0: int) -> dict[int, tuple[int, int, int, str]]:
    """Emit the segments and blocks that predate the history at its first event's time ``t0``
    (no stack is known for them); return the live blocks: address -> (size, requested,
    segment, pool)."""
    for a, (size, pool, stream, expandable) in sorted(_initial_segments(entries,
                                                                        dev_segments).items()):
        pool = pool or _pool_of_range(size, expandable)
        seg_type[a] = seg_type.get(a) or pool      # for the history's maps that extend it
        out.emit(t0, "segment_map" if expandable else "segment_alloc", a, size, size, a, stream,
                 pool, -1)
        layout.add_range(a, a + size, a, expandable)
    live: dict[int, tuple[int, int, int, str]] = {}
    for a, (size, req, stream) in sorted(_initial_blocks(entries, dev_segments).items()):
        hit = layout.find(a)
        seg = hit[2] if hit else 0
        pool = seg_type.get(seg, "") or ("small" if size <= R.SMALL_SIZE else "large")
        insort(layout.blocks.setdefault(seg, []), a)
        live[a] = (size, req, seg, pool)
        out.emit(t0, "alloc", a, size, req, seg, stream, pool, -1)
    return live


def _pool_of_range(size: int, expandable: bool) -> str:
    """The pool of a segment (or mapped range) the snapshot does not name: small-pool segments
    are 2 MiB; expandable large-pool ranges are mapped in 20 MiB pages, small-pool ones in 2 MiB
    pages (a small-pool range of ten pages reads as large: rare, and only its label)."""
    if expandable:
        return "large" if size % R.LARGE_BUFFER == 0 else "small"
    return "small" if size == R.SMALL_BUFFER else "large"


def _segment_event(e: dict, t: int, stack: int, seg_type: dict[int, str], layout: _Layout,
                   out: _Rows) -> None:
    """A segment_alloc / segment_free / segment_map / segment_unmap of the history."""
    act, a, size, stream = e["action"], int(e["addr"]), int(e["size"]), int(e.get("stream", 0))
    if act == "segment_alloc":
        pool = seg_type.get(a, "") or ("small" if size == R.SMALL_BUFFER else "large")
        layout.add_range(a, a + size, a, False)
        out.emit(t, act, a, size, size, a, stream, pool, stack)
    elif act == "segment_free":
        layout.drop_range(a, a + size)
        out.emit(t, act, a, size, size, a, stream, seg_type.get(a, ""), stack)
    else:  # map / unmap: the mapped range belongs to the expandable segment it extends
        hit = layout.find(a - 1) if act == "segment_map" else layout.find(a)
        seg = hit[2] if hit else a
        if act == "segment_map":
            layout.add_range(a, a + size, seg, True)
        pool = seg_type.get(seg, "") or (_pool_of_range(size, True) if seg == a else "")
        out.emit(t, act, a, size, size, seg, stream, pool, stack)


def _block_event(e: dict, t: int, stack: int, layout: _Layout,
                 live: dict[int, tuple[int, int, int, str]], out: _Rows) -> None:
    """An alloc / free_requested / free_completed / oom of the history."""
    act, a, size, stream = e["action"], int(e["addr"]), int(e["size"]), int(e.get("stream", 0))
    if act == "alloc":
        small = R.round_size(size) <= R.SMALL_SIZE
        bsize, seg = layout.block_size(a, size, small)
        pool = "small" if small else "large"
        live[a] = (bsize, size, seg, pool)
        out.emit(t, act, a, bsize, size, seg, stream, pool, stack)
    elif act in ("free_requested", "free_completed"):
        bsize, req, seg, pool = live.get(a, (R.round_size(size), size, 0, ""))
        if act == "free_completed":
            live.pop(a, None)
            layout.release(a, seg)
        out.emit(t, act, a, bsize, req, seg, stream, pool, stack)
    elif act == "oom":
        # PyTorch stores the device's free bytes in ``addr`` for an oom entry
        out.emit(t, act, int(e.get("device_free", a)), size, size, 0, stream, "", stack)
