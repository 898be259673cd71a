"""Import PyTorch Kineto / ``torch.profiler`` Chrome-trace JSON into the trace tables.

``read_kineto(path)`` reads ``.json`` or ``.json.gz`` and returns ``(tables, meta)`` in the
columns of :mod:`hookmagic.trace.schema`; :class:`~hookmagic.trace.Trace` wraps them. What
becomes what (Kineto's ``cat`` names; older capitalised ones are accepted too):

- ``kernel`` -> kernels (grid, block, registers per thread, shared memory, stream, device,
  correlation from ``args``); ``gpu_memcpy`` -> memcpy (direction and memory kinds parsed
  from names like ``Memcpy HtoD (Pageable -> Device)``); ``gpu_memset`` -> memset;
- ``cuda_runtime`` / ``cuda_driver`` -> api; ``cuda_sync`` -> sync;
- ``user_annotation`` (record_function) and ``cpu_op`` (operators) -> ranges on their host
  thread, nested by time; ``gpu_user_annotation`` -> ranges with thread -1;
- ``python_function`` (``with_stack=True``) -> stacks: the Python frames around each
  runtime call, via ``Python id`` / ``Python parent id``.

GPU work gets the stack, ranges and thread of the runtime call that launched it (same
``correlation``). Kineto reports a kernel's shared memory as one number; it is stored as
``static_smem``. Times are kept exactly: ``ts``/``dur`` are microseconds with three
decimals, parsed as decimal text into integer nanoseconds (not through a float, which loses
nanoseconds on absolute timestamps).

Anything that is not a readable Chrome trace raises one :class:`TraceFileError` saying why.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from hookmagic.common.errors import InvalidArgument
from hookmagic.trace import schema
from hookmagic.trace.correlation import CorrelationIndex
from hookmagic.trace.io import TraceFileError

_KERNEL = {"kernel"}
_MEMCPY = {"gpu_memcpy", "memcpy"}
_MEMSET = {"gpu_memset", "memset"}
_RUNTIME = {"cuda_runtime", "runtime"}
_DRIVER = {"cuda_driver", "driver"}
_SYNC = {"cuda_sync"}
_HOST_RANGES = {"user_annotation": "user_annotation", "cpu_op": "cpu_op", "operator": "cpu_op"}
_GPU_RANGES = {"gpu_user_annotation"}
_PYTHON = {"python_function"}

_COPY = re.compile(r"Memcpy\s+(\w+)\s*(?:\((\w+)\s*->\s*(\w+)\))?", re.IGNORECASE)
_MEMSET_KIND = re.compile(r"Memset\s*\((\w+)\)", re.IGNORECASE)
_FRAME = re.compile(r"^(.*)\((\d+)\):\s*(.*)$")
_SYNC_TYPES = {"event sync": "event", "stream wait event": "stream_wait_event",
               "stream sync": "stream", "context sync": "context"}


def read_kineto(path: str | os.PathLike) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """Read a Kineto / torch.profiler trace (``.json`` or ``.json.gz``).

    Returns ``(tables, meta)``: a DataFrame per schema table (conformed to
    :mod:`hookmagic.trace.schema`) and the meta dict (``source`` "import:kineto", ``label``,
    ``start_ns``, ``end_ns``, ``devices`` from ``deviceProperties``, ``kineto`` with the
    file's own header fields, ``ignored`` event counts by category). Raises
    :class:`TraceFileError` for a missing, unreadable or malformed file.
    """
    from hookmagic.common import limits
    from hookmagic.common.errors import HookmagicError
    from hookmagic.common.files import gc_paused
    path = Path(os.path.expanduser(os.fspath(path)))
    try:
        with gc_paused():   # a third faster on large traces: no collections while building rows
            doc = _load(path)
            events, header = _events_of(doc, path)
            limits.check(limits.MAX_ROWS, len(events), f"Kineto trace {str(path)!r} (traceEvents)")
            tables, meta = _convert(events, header, path)
        # negative sizes (or times) would silently shrink every total: the file is damaged
        from hookmagic.trace.io import refuse_bad_numbers
        refuse_bad_numbers(tables, str(path))
        return tables, meta
    except HookmagicError:
        raise
    except (ValueError, TypeError, OverflowError, KeyError, AttributeError) as err:
        raise TraceFileError(f"{str(path)!r} holds values this importer cannot convert "
                             f"({type(err).__name__}: {err}); is it a torch.profiler trace?") from None


# -- reading -------------------------------------------------------------------------------------

def _load(path: Path) -> Any:
    # bounded reading (hookmagic.common.files): special files refused, gzip inflated in a
    # stream within HOOKMAGIC_MAX_BYTES, JSON within HOOKMAGIC_MAX_JSON_BYTES and _DEPTH
    from hookmagic.common import files
    if not os.path.lexists(path):
        raise TraceFileError(f"no Kineto trace at {str(path)!r}: check the path")
    # floats as text: ts/dur are parsed exactly below
    return files.load_json_file(path, "Kineto trace", TraceFileError, parse_float=str)


def _events_of(doc: Any, path: Path) -> tuple[list[Any], dict[str, Any]]:
    if isinstance(doc, list):  # the bare "JSON array" form of a Chrome trace
        return doc, {}
    if not isinstance(doc, dict) or "traceEvents" not in doc:
        raise TraceFileError(f"{str(path)!r} is JSON but not a Chrome/Kineto trace: it has no "
                             "'traceEvents' list")
    events = doc["traceEvents"]
    if not isinstance(events, list):
        raise TraceFileError(f"{str(path)!r}: 'traceEvents' is a {type(events).__name__}, "
                             "not a list of events")
    return events, {k: v for k, v in doc.items() if k != "traceEvents"}


def _ns(value: Any) -> int:
    """Microseconds (int, float or decimal text) -> integer nanoseconds, rounded half up."""
    if isinstance(value, bool):
        raise InvalidArgument("a boolean is not a time")
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, float):
        return int(round(value * 1000))
    text = str(value).strip()
    if "e" in text.lower():
        return int(round(float(text) * 1000))
    neg = text.startswith("-")
    whole, _, frac = text.lstrip("+-").partition(".")
    frac = (frac + "0000")[:4]
    ns = int(whole or 0) * 1000 + int(frac[:3]) + (1 if int(frac[3]) >= 5 else 0)
    return -ns if neg else ns


def _int(value: Any, default: int = -1) -> int:
    if value is None or isinstance(value, bool):
        return default
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return default


def _dim3(value: Any) -> tuple[int, int, int]:
    if isinstance(value, (list, tuple)):
        dims = [_int(v, 1) for v in list(value)[:3]] + [1, 1, 1]
        return dims[0], dims[1], dims[2]
    return 0, 0, 0


# -- conversion ----------------------------------------------------------------------------------

@dataclass
class _Rows:
    """Rows gathered from the events, by the table (or intermediate list) they go to."""

    tables: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {
        k: [] for k in ("kernels", "memcpy", "memset", "api", "sync")})
    host_ranges: list[dict[str, Any]] = field(default_factory=list)
    gpu_ranges: list[dict[str, Any]] = field(default_factory=list)
    python: list[dict[str, Any]] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)


def _convert(events: list[Any], header: dict[str, Any], path: Path
             ) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """Events -> rows (one small builder per category) -> tables joined by correlation."""
    rows = _Rows()
    ignored = rows.ignored
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise TraceFileError(f"{str(path)!r}: traceEvents[{i}] is a "
                                 f"{type(ev).__name__}, not an event object")
        cat = str(ev.get("cat", "")).lower()
        if ev.get("ph") != "X" or not cat:
            continue
        if cat not in _KERNEL | _MEMCPY | _MEMSET | _RUNTIME | _DRIVER | _SYNC | _GPU_RANGES \
                | _PYTHON and cat not in _HOST_RANGES:
            ignored[cat] = ignored.get(cat, 0) + 1
            continue
        try:
            start = _ns(ev["ts"])
            dur = _ns(ev.get("dur", 0))
        except (ValueError, OverflowError) as err:
            from hookmagic.trace.io import TraceNumbersError
            raise TraceNumbersError(
                f"{str(path)!r}: traceEvents[{i}] ({cat} {str(ev.get('name'))[:60]!r}) has "
                f"no valid 'ts'/'dur': not a finite number ({err})") from None
        except (KeyError, TypeError) as err:
            raise TraceFileError(
                f"{str(path)!r}: traceEvents[{i}] ({cat} {str(ev.get('name'))[:60]!r}) has no "
                f"valid 'ts'/'dur' ({err!r})") from err
        if dur < 0:
            # A measured time cannot run backwards; summed, it would silently shrink totals.
            from hookmagic.trace.io import TraceNumbersError
            raise TraceNumbersError(
                f"{str(path)!r}: traceEvents[{i}] ({cat} {str(ev.get('name'))[:60]!r}) has a "
                f"negative duration (dur {ev.get('dur')!r}); the file is damaged")
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        name = str(ev.get("name", ""))
        base = {"start_ns": start, "end_ns": start + dur, "duration_ns": dur}
        _add_event(rows, cat, ev, args, name, base)
    return _assemble(rows, header, path)


def _add_event(rows: _Rows, cat: str, ev: dict[str, Any], args: dict[str, Any], name: str,
               base: dict[str, int]) -> None:
    """File one event's row where its category goes."""
    if cat in _KERNEL or cat in _MEMCPY or cat in _MEMSET:
        table, row = _gpu_row(cat, ev, args, name, base)
        rows.tables[table].append(row)
    elif cat in _RUNTIME or cat in _DRIVER:
        rows.tables["api"].append({**base, "domain": "runtime" if cat in _RUNTIME else "driver",
                                   "name": name, "cbid": _int(args.get("cbid"), 0),
                                   "process": _int(ev.get("pid")), "thread": _int(ev.get("tid")),
                                   "correlation": _int(args.get("correlation")),
                                   "return_code": 0})
    elif cat in _SYNC:
        rows.tables["sync"].append({
            **base, "type": _SYNC_TYPES.get(name.lower(), "unknown"),
            "context": _int(args.get("context")),
            "stream": _int(args.get("stream"), _int(args.get("cuda_stream"))),
            "event": _int(args.get("cuda_event"), -1),
            "correlation": _int(args.get("correlation")), "thread": -1})
    elif cat in _HOST_RANGES:
        rows.host_ranges.append({**base, "name": name, "thread": _int(ev.get("tid")),
                                 "source": _HOST_RANGES[cat]})
    elif cat in _GPU_RANGES:
        rows.gpu_ranges.append({**base, "name": name, "thread": -1,
                                "lane": (_int(ev.get("pid")), _int(ev.get("tid"))),
                                "source": "gpu_user_annotation"})
    else:  # python_function
        rows.python.append({**base, "name": name, "thread": _int(ev.get("tid")),
                            "pid": _int(args.get("Python id"), -1),
                            "parent": _int(args.get("Python parent id"), -1)})


def _gpu_row(cat: str, ev: dict[str, Any], args: dict[str, Any], name: str,
             base: dict[str, int]) -> tuple[str, dict[str, Any]]:
    """A kernel, copy or memset: (table name, row)."""
    gpu = {**base, "device": _int(args.get("device"), _int(ev.get("pid"), -1)),
           "context": _int(args.get("context")),
           "stream": _int(args.get("stream"), _int(ev.get("tid"), -1)),
           "correlation": _int(args.get("correlation"))}
    if cat in _KERNEL:
        gx, gy, gz = _dim3(args.get("grid"))
        bx, by, bz = _dim3(args.get("block"))
        return "kernels", {
            **gpu, "name": name, "grid_x": gx, "grid_y": gy, "grid_z": gz,
            "block_x": bx, "block_y": by, "block_z": bz,
            "registers": _int(args.get("registers per thread"), 0),
            "static_smem": _int(args.get("shared memory"), 0), "dynamic_smem": 0}
    if cat in _MEMCPY:
        m = _COPY.search(name)
        return "memcpy", {
            **gpu, "bytes": _int(args.get("bytes"), 0),
            "kind": m.group(1).lower() if m else "unknown",
            "src_kind": (m.group(2) or "unknown").lower() if m else "unknown",
            "dst_kind": (m.group(3) or "unknown").lower() if m else "unknown"}
    m = _MEMSET_KIND.search(name)
    return "memset", {**gpu, "bytes": _int(args.get("bytes"), 0), "value": 0,
                      "memory_kind": m.group(1).lower() if m else "unknown"}


def _assemble(rows: _Rows, header: dict[str, Any], path: Path
              ) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """Rows -> schema tables: ranges and stacks built, GPU work joined to its launching call."""
    api = pd.DataFrame(rows.tables["api"])
    ranges, api_range = _ranges(rows.host_ranges, rows.gpu_ranges, api)
    stacks, api_stack = _stacks(rows.python, api)
    tables: dict[str, pd.DataFrame] = {}
    for name in ("kernels", "memcpy", "memset"):
        frame = pd.DataFrame(rows.tables[name])
        if len(frame) and len(api):
            # GPU work inherits thread, stack and ranges from the runtime call that launched it
            row = CorrelationIndex(api["correlation"].to_numpy(np.int64)).row_of(
                frame["correlation"].to_numpy(np.int64))
            hit = row >= 0
            frame["thread"] = np.where(hit, api["thread"].to_numpy(np.int64)[row], -1)
            frame["stack_id"] = np.where(hit, api_stack[row], -1)
            frame["range_id"] = np.where(hit, api_range[row], -1)
        tables[name] = schema.conform(name, frame) if len(frame) else schema.empty_table(name)
    tables["api"] = schema.conform("api", api) if len(api) else schema.empty_table("api")
    sync = pd.DataFrame(rows.tables["sync"])
    tables["sync"] = schema.conform("sync", sync) if len(sync) else schema.empty_table("sync")
    tables["ranges"] = ranges
    tables["stacks"] = stacks
    return tables, _meta(tables, header, path, rows.ignored)


def _nest(starts: np.ndarray, ends: np.ndarray, lanes: list[Any], q_time: np.ndarray,
          q_lane: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nesting of intervals within each lane, and the innermost interval around each query.

    Returns (parent index per interval or -1, depth per interval, innermost interval index
    per query or -1). Intervals that do not nest properly are closed where they end.
    """
    n, q = len(starts), len(q_time)
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    inner = np.full(q, -1, dtype=np.int64)
    # sweep: opens (outer first), then queries, then closes (inner first) at equal times
    marks = ([(lanes[i], int(starts[i]), 0, -int(ends[i]), i) for i in range(n)]
             + [(q_lane[j], int(q_time[j]), 1, 0, j) for j in range(q)]
             + [(lanes[i], int(ends[i]), 2, -int(starts[i]), i) for i in range(n)])
    marks.sort(key=lambda m: (str(m[0]), m[1], m[2], m[3], m[4]))
    stack: list[int] = []
    lane = None
    for key, _t, kind, _tie, idx in marks:
        if key != lane:
            lane, stack = key, []
        if kind == 0:
            parent[idx] = stack[-1] if stack else -1
            depth[idx] = len(stack)
            stack.append(idx)
        elif kind == 1:
            inner[idx] = stack[-1] if stack else -1
        elif stack and stack[-1] == idx:
            stack.pop()
        elif idx in stack:
            stack.remove(idx)
    return parent, depth, inner


def _ranges(host: list[dict[str, Any]], gpu: list[dict[str, Any]], api: pd.DataFrame
            ) -> tuple[pd.DataFrame, np.ndarray]:
    """The ranges table, and the innermost host range around each API call (-1: none)."""
    n_api = len(api)
    if not host and not gpu:
        return schema.empty_table("ranges"), np.full(n_api, -1, dtype=np.int64)
    h = pd.DataFrame(host) if host else pd.DataFrame(columns=["start_ns", "end_ns", "thread"])
    q_time = api["start_ns"].to_numpy(np.int64) if n_api else np.zeros(0, np.int64)
    q_lane = list(api["thread"]) if n_api else []
    parent, depth, inner = _nest(h["start_ns"].to_numpy(np.int64), h["end_ns"].to_numpy(np.int64),
                                 list(h["thread"]), q_time, q_lane)
    frames = []
    if len(h):
        h = h.assign(range_id=np.arange(len(h), dtype=np.int64), parent_id=parent, depth=depth)
        frames.append(h)
    if gpu:
        g = pd.DataFrame(gpu)
        gp, gd, _ = _nest(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64),
                          list(g["lane"]), np.zeros(0, np.int64), [])
        first = len(h)
        g = g.drop(columns="lane").assign(range_id=np.arange(first, first + len(g), dtype=np.int64),
                                          parent_id=np.where(gp >= 0, gp + first, -1), depth=gd)
        frames.append(g)
    return schema.conform("ranges", pd.concat(frames, ignore_index=True)), inner


def _frame_of(name: str) -> tuple[str, str, int]:
    """``file.py(12): func`` -> (file, func, 12); other names (modules, built-ins) as functions."""
    m = _FRAME.match(name)
    if m:
        return m.group(1), m.group(3), int(m.group(2))
    return "", name, 0


def _stacks(python: list[dict[str, Any]], api: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The stacks table, and the stack id of each API call (-1: no Python frames around it)."""
    n_api = len(api)
    if not python or not n_api:
        return schema.empty_table("stacks"), np.full(n_api, -1, dtype=np.int64)
    p = pd.DataFrame(python)
    nest_parent, _, inner = _nest(p["start_ns"].to_numpy(np.int64), p["end_ns"].to_numpy(np.int64),
                                  list(p["thread"]), api["start_ns"].to_numpy(np.int64),
                                  list(api["thread"]))
    # prefer Kineto's own parent links; fall back to nesting by time where they are missing
    by_pid = {pid: i for i, pid in enumerate(p["pid"]) if pid >= 0}
    parent = np.array([by_pid.get(pp, nest_parent[i]) if pp >= 0 else nest_parent[i]
                       for i, pp in enumerate(p["parent"])], dtype=np.int64)
    frames = [_frame_of(n) for n in p["name"]]
    chain_of: dict[int, tuple[int, ...]] = {}

    def chain(i: int) -> tuple[int, ...]:
        path = []
        seen = set()
        while i >= 0 and i not in chain_of and i not in seen:
            seen.add(i)
            path.append(i)
            i = int(parent[i])
        tail = chain_of.get(i, ()) if i >= 0 else ()
        for j in reversed(path):  # outermost first
            tail = tail + (j,)
            chain_of[j] = tail
        return chain_of[path[0]] if path else tail

    stack_ids: dict[tuple[tuple[str, str, int], ...], int] = {}
    api_stack = np.full(n_api, -1, dtype=np.int64)
    for j, i in enumerate(inner):
        if i < 0:
            continue
        key = tuple(frames[k] for k in chain(int(i)))
        api_stack[j] = stack_ids.setdefault(key, len(stack_ids))
    rows = [(sid, d, f[0], f[1], f[2]) for key, sid in stack_ids.items()
            for d, f in enumerate(key)]
    table = pd.DataFrame(rows, columns=["stack_id", "depth", "filename", "function", "line"])
    return schema.conform("stacks", table), api_stack


def _meta(tables: dict[str, pd.DataFrame], header: dict[str, Any], path: Path,
          ignored: dict[str, int]) -> dict[str, Any]:
    starts = [int(t["start_ns"].min()) for n, t in tables.items()
              if len(t) and "start_ns" in t and n != "stacks"]
    ends = [int(t["end_ns"].max()) for n, t in tables.items()
            if len(t) and "end_ns" in t and n != "stacks"]
    devices = []
    for prop in header.get("deviceProperties") or []:
        if not isinstance(prop, dict):
            continue
        dev = {"index": _int(prop.get("id"), len(devices)), "name": prop.get("name"),
               "total_memory": _int(prop.get("totalGlobalMem"), None),
               "multiprocessors": _int(prop.get("numSms"), None),
               "compute_capability": [_int(prop.get("computeMajor"), 0),
                                      _int(prop.get("computeMinor"), 0)]
               if prop.get("computeMajor") is not None else None,
               "max_threads_per_sm": _int(prop.get("maxThreadsPerMultiprocessor"), None),
               "max_regs_per_sm": _int(prop.get("regsPerMultiprocessor"), None),
               "max_regs_per_block": _int(prop.get("regsPerBlock"), None),
               "max_smem_per_sm": _int(prop.get("sharedMemPerMultiprocessor"), None),
               "max_smem_per_block": _int(prop.get("sharedMemPerBlockOptin",
                                                   prop.get("sharedMemPerBlock")), None),
               "warp_size": _int(prop.get("warpSize"), None)}
        devices.append({k: v for k, v in dev.items() if v is not None})
    name = path.name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    kineto = {k: header[k] for k in ("schemaVersion", "baseTimeNanoseconds", "traceName",
                                     "displayTimeUnit", "distributedInfo") if k in header}
    meta: dict[str, Any] = {"source": "import:kineto", "label": name, "path": str(path),
                            "status": "complete", "devices": devices, "kineto": kineto,
                            "ignored": ignored}
    if starts:
        meta["start_ns"], meta["end_ns"] = min(starts), max(ends)
    if not any(len(tables[n]) for n in ("kernels", "memcpy", "memset")):
        meta["reason"] = "the Kineto trace holds no GPU events (was CUDA activity profiled?)"
    return meta
