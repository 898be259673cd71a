"""Export a :class:`~hookmagic.trace.Trace` as Chrome/Perfetto trace JSON.

Fields follow PyTorch's Kineto traces so the file opens in https://ui.perfetto.dev,
chrome://tracing and tools written for Kineto (e.g. Holistic Trace Analysis):

- GPU work: ``"X"`` events, cat ``kernel`` / ``gpu_memcpy`` / ``gpu_memset``, pid = device,
  tid = stream (threads named ``"stream N"``), args with ``correlation``, ``grid``, ``block``,
  ``registers per thread``, ``shared memory``, ``bytes``, ``device``, ``stream``, ``context``.
- Host: ``"X"`` events cat ``cuda_runtime`` / ``cuda_driver`` (API calls), ``cuda_sync``
  (synchronisation waits) and ``user_annotation`` (ranges) on pid = process, tid = thread.
- Flows ``"s"``/``"f"`` (cat ``ac2g``) from each API call to the GPU work it launched.
- Memory: an ``"i"`` event per alloc/free and a ``"C"`` counter "device memory in use" per
  device; NVML samples as ``"C"`` counters.

``ts``/``dur`` are microseconds (float, ns resolution) after ``meta["start_ns"]``, which is
also written as ``baseTimeNanoseconds``. Rows are formatted from whole columns at a time, so
a million kernels export in seconds.
"""
from __future__ import annotations

import gzip
import json
import math
import os
from typing import Any, Callable, Iterator

import numpy as np
import pandas as pd

from hookmagic.analysis.summary import device_memory_in_use
from hookmagic.trace.correlation import CorrelationIndex
from hookmagic.trace.model import Trace

_CHUNK = 200_000          # rows formatted at a time: bounds memory for huge traces
_FALLBACK_HOST_PID = 1_000_000   # when the trace does not know its process id
_SYNC_NAMES = {"event": "Event Sync", "stream_wait_event": "Stream Wait Event",
               "stream": "Stream Sync", "context": "Context Sync"}
_SAMPLE_COUNTERS = [  # (counter name, {arg: column})
    ("GPU utilization (%)", {"gpu": "gpu_util", "memory": "mem_util"}),
    ("GPU memory used (bytes)", {"used": "memory_used"}),
    ("SM clock (MHz)", {"sm": "sm_clock_mhz", "memory": "mem_clock_mhz"}),
    ("power (W)", {"power": "power_w"}),
    ("temperature (C)", {"temperature": "temperature_c"}),
]


def to_chrome_trace(trace: Trace, path: str | os.PathLike) -> str:
    """Write ``trace`` as Chrome/Perfetto trace JSON to ``path`` (gzip if it ends in ``.gz``).

    Returns the path. Open the file at https://ui.perfetto.dev or chrome://tracing.
    """
    from hookmagic.common.files import export_path
    # a folder, a device, a missing folder or another kind of file's name is refused first
    path = export_path(path, (".json", ".json.gz"), "the Chrome trace")
    opener = (lambda: gzip.open(path, "wt", encoding="utf-8", compresslevel=5)) \
        if path.suffix == ".gz" else (lambda: open(path, "w", encoding="utf-8"))
    with opener() as fh:
        for piece in chrome_trace_pieces(trace):
            fh.write(piece)
    return str(path)


def chrome_trace_pieces(trace: Trace) -> Iterator[str]:
    """The JSON document as a stream of strings (concatenate them for the whole file)."""
    t0 = _time_origin(trace)
    host_pid = _host_pid(trace)
    header = {"schemaVersion": 1, "displayTimeUnit": "ns", "baseTimeNanoseconds": t0,
              "deviceProperties": _device_properties(trace.meta),
              "hookmagic": _clean(trace.meta)}
    yield json.dumps(header, allow_nan=False)[:-1] + ',\n"traceEvents":[\n'
    first = True
    for events in _all_events(trace, t0, host_pid):
        if not events:
            continue
        yield ("" if first else ",\n") + ",\n".join(events)
        first = False
    yield "\n]}\n"


def _all_events(trace: Trace, t0: int, host_pid: int) -> Iterator[list[str]]:
    yield _metadata_events(trace, host_pid)
    yield from _chunked(trace.kernels, lambda f: _kernel_events(f, t0))
    yield from _chunked(trace.memcpy, lambda f: _memcpy_events(f, t0))
    yield from _chunked(trace.memset, lambda f: _memset_events(f, t0))
    yield from _chunked(trace.api, lambda f: _api_events(f, t0, host_pid))
    yield from _chunked(trace.sync, lambda f: _sync_events(f, t0, host_pid))
    yield from _chunked(trace.ranges, lambda f: _range_events(f, t0, host_pid))
    yield from _chunked(_flow_pairs(trace), lambda f: _flow_events(f, t0))
    yield from _chunked(trace.memory, lambda f: _memory_events(f, t0, host_pid))
    yield from _chunked(device_memory_in_use(trace.memory), lambda f: _memory_counters(f, t0))
    yield from _chunked(trace.samples, lambda f: _sample_counters(f, t0))


def _chunked(frame: pd.DataFrame, emit: Callable[[pd.DataFrame], list[str]]
             ) -> Iterator[list[str]]:
    for lo in range(0, len(frame), _CHUNK):
        yield emit(frame.iloc[lo:lo + _CHUNK])


# -- column helpers -------------------------------------------------------------------------
def _us(ns: pd.Series, t0: int = 0) -> list[float]:
    """Nanoseconds (relative to t0) as microseconds."""
    return ((ns.to_numpy(np.int64) - t0) / 1000.0).tolist()


def _ints(col: pd.Series) -> list[int]:
    return col.to_numpy(np.int64).tolist()


def _jstr(col: pd.Series) -> list[str]:
    """JSON-encoded strings, escaping each distinct value once (names repeat a lot)."""
    codes, uniques = pd.factorize(col.astype(str), sort=False)
    if len(uniques) == 0:
        return []
    encoded = np.array([json.dumps(u) for u in uniques], dtype=object)
    return encoded[codes].tolist()


def _host(col: pd.Series, host_pid: int) -> list[int]:
    """A process column with unknown (<= 0) ids replaced by the trace's host pid."""
    v = col.to_numpy(np.int64)
    return np.where(v > 0, v, host_pid).tolist()


# -- event emitters: each turns a table slice into JSON strings ------------------------------
def _kernel_events(k: pd.DataFrame, t0: int) -> list[str]:
    smem = (k["static_smem"].astype(np.int64) + k["dynamic_smem"].astype(np.int64))
    cols = zip(_jstr(k["name"]), _ints(k["device"]), _ints(k["stream"]), _us(k["start_ns"], t0),
               _us(k["duration_ns"]), _ints(k["context"]), _ints(k["correlation"]),
               _ints(k["registers"]), _ints(smem), _ints(k["grid_x"]), _ints(k["grid_y"]),
               _ints(k["grid_z"]), _ints(k["block_x"]), _ints(k["block_y"]), _ints(k["block_z"]))
    return [f'{{"ph":"X","cat":"kernel","name":{nm},"pid":{d},"tid":{s},"ts":{ts:.3f},'
            f'"dur":{du:.3f},"args":{{"device":{d},"context":{c},"stream":{s},'
            f'"correlation":{co},"registers per thread":{r},"shared memory":{sm},'
            f'"grid":[{gx},{gy},{gz}],"block":[{bx},{by},{bz}]}}}}'
            for nm, d, s, ts, du, c, co, r, sm, gx, gy, gz, bx, by, bz in cols]


def _memcpy_events(m: pd.DataFrame, t0: int) -> list[str]:
    # Kineto's naming: "Memcpy HtoD (Pageable -> Device)"
    names = ("Memcpy " + m["kind"].astype(str).str.upper().str.replace("TO", "to", regex=False)
             + " (" + m["src_kind"].astype(str).str.capitalize() + " -> "
             + m["dst_kind"].astype(str).str.capitalize() + ")")
    with np.errstate(divide="ignore", invalid="ignore"):
        bw = m["bytes"].to_numpy(np.float64) / m["duration_ns"].to_numpy(np.float64)
    bw_txt = [f"{b:.3f}" if math.isfinite(b) else "null" for b in bw.tolist()]
    cols = zip(_jstr(names), _ints(m["device"]), _ints(m["stream"]), _us(m["start_ns"], t0),
               _us(m["duration_ns"]), _ints(m["context"]), _ints(m["correlation"]),
               _ints(m["bytes"]), bw_txt)
    return [f'{{"ph":"X","cat":"gpu_memcpy","name":{nm},"pid":{d},"tid":{s},"ts":{ts:.3f},'
            f'"dur":{du:.3f},"args":{{"device":{d},"context":{c},"stream":{s},'
            f'"correlation":{co},"bytes":{b},"memory bandwidth (GB/s)":{bw}}}}}'
            for nm, d, s, ts, du, c, co, b, bw in cols]


def _memset_events(m: pd.DataFrame, t0: int) -> list[str]:
    names = "Memset (" + m["memory_kind"].astype(str).str.capitalize() + ")"
    cols = zip(_jstr(names), _ints(m["device"]), _ints(m["stream"]), _us(m["start_ns"], t0),
               _us(m["duration_ns"]), _ints(m["context"]), _ints(m["correlation"]),
               _ints(m["bytes"]), _ints(m["value"]))
    return [f'{{"ph":"X","cat":"gpu_memset","name":{nm},"pid":{d},"tid":{s},"ts":{ts:.3f},'
            f'"dur":{du:.3f},"args":{{"device":{d},"context":{c},"stream":{s},'
            f'"correlation":{co},"bytes":{b},"value":{v}}}}}'
            for nm, d, s, ts, du, c, co, b, v in cols]


def _api_events(a: pd.DataFrame, t0: int, host_pid: int) -> list[str]:
    cats = np.where(a["domain"].astype(str).to_numpy() == "driver", "cuda_driver", "cuda_runtime")
    cols = zip(cats.tolist(), _jstr(a["name"]), _host(a["process"], host_pid), _ints(a["thread"]),
               _us(a["start_ns"], t0), _us(a["duration_ns"]), _ints(a["correlation"]),
               _ints(a["cbid"]), _ints(a["return_code"]))
    return [f'{{"ph":"X","cat":"{cat}","name":{nm},"pid":{p},"tid":{t},"ts":{ts:.3f},'
            f'"dur":{du:.3f},"args":{{"correlation":{co},"cbid":{cb},"return code":{rc}}}}}'
            for cat, nm, p, t, ts, du, co, cb, rc in cols]


def _sync_events(s: pd.DataFrame, t0: int, host_pid: int) -> list[str]:
    names = s["type"].astype(str).map(lambda t: _SYNC_NAMES.get(t, "Sync"))
    cols = zip(_jstr(names), _ints(s["thread"]), _us(s["start_ns"], t0), _us(s["duration_ns"]),
               _ints(s["context"]), _ints(s["stream"]), _ints(s["event"]),
               _ints(s["correlation"]))
    return [f'{{"ph":"X","cat":"cuda_sync","name":{nm},"pid":{host_pid},"tid":{t},'
            f'"ts":{ts:.3f},"dur":{du:.3f},"args":{{"context":{c},"stream":{st},'
            f'"event":{e},"correlation":{co}}}}}'
            for nm, t, ts, du, c, st, e, co in cols]


def _range_events(r: pd.DataFrame, t0: int, host_pid: int) -> list[str]:
    cols = zip(_jstr(r["name"]), _ints(r["thread"]), _us(r["start_ns"], t0),
               _us(r["duration_ns"]), _ints(r["range_id"]), _jstr(r["source"]))
    return [f'{{"ph":"X","cat":"user_annotation","name":{nm},"pid":{host_pid},"tid":{t},'
            f'"ts":{ts:.3f},"dur":{du:.3f},"args":{{"range id":{rid},"source":{src}}}}}'
            for nm, t, ts, du, rid, src in cols]


def _flow_pairs(trace: Trace) -> pd.DataFrame:
    """One row per (API call, GPU record) pair sharing a correlation id, with a flow id."""
    gpu = pd.concat([getattr(trace, t)[["correlation", "device", "stream", "start_ns"]]
                     for t in ("kernels", "memcpy", "memset")], ignore_index=True)
    api = trace.api
    row = CorrelationIndex(api["correlation"].to_numpy(np.int64)).row_of(
        gpu["correlation"].to_numpy(np.int64))
    hit = row >= 0
    pairs = gpu[hit].reset_index(drop=True).assign(
        **{c: api[c].to_numpy()[row[hit]] for c in ("process", "thread")},
        start_ns_api=api["start_ns"].to_numpy()[row[hit]])
    if pairs.empty:
        return pairs.assign(flow_id=pd.Series(dtype="int64"))
    pairs = pairs.sort_values(["start_ns"], kind="stable").reset_index(drop=True)
    # Kineto uses the correlation as the flow id; when one call launched several records
    # (a graph launch), the extra pairs get fresh ids above every correlation.
    dup = pairs["correlation"].duplicated().to_numpy()
    ids = pairs["correlation"].to_numpy(np.int64).copy()
    ids[dup] = int(ids.max()) + 1 + np.arange(int(dup.sum()))
    return pairs.assign(flow_id=ids, process=pairs["process"].where(pairs["process"] > 0,
                                                                    _host_pid(trace)))


def _flow_events(f: pd.DataFrame, t0: int) -> list[str]:
    cols = zip(_ints(f["flow_id"]), _ints(f["process"]), _ints(f["thread"]),
               _us(f["start_ns_api"], t0), _ints(f["device"]), _ints(f["stream"]),
               _us(f["start_ns"], t0))
    out = []
    for fid, p, t, ts_a, d, s, ts_g in cols:
        out.append(f'{{"ph":"s","cat":"ac2g","name":"ac2g","id":{fid},"pid":{p},"tid":{t},'
                   f'"ts":{ts_a:.3f}}}')
        out.append(f'{{"ph":"f","cat":"ac2g","name":"ac2g","id":{fid},"pid":{d},"tid":{s},'
                   f'"ts":{ts_g:.3f},"bp":"e"}}')
    return out


def _memory_events(m: pd.DataFrame, t0: int, host_pid: int) -> list[str]:
    dev = m["device"].to_numpy(np.int64)
    pids = np.where(dev >= 0, dev, host_pid).tolist()
    tids = np.maximum(m["stream"].to_numpy(np.int64), 0).tolist()
    addrs = [f'"{a:#x}"' for a in m["address"].to_numpy(np.uint64).tolist()]
    cols = zip(_jstr(m["op"]), pids, tids, _us(m["time_ns"], t0), addrs, _ints(m["bytes"]),
               _jstr(m["memory_kind"]), _ints(m["device"]), _ints(m["stream"]),
               _ints(m["correlation"]), m["is_async"].to_numpy(bool).tolist(), _jstr(m["source"]))
    return [f'{{"ph":"i","s":"p","cat":"gpu_memory","name":{op},"pid":{p},"tid":{t},'
            f'"ts":{ts:.3f},"args":{{"address":{a},"bytes":{b},"memory kind":{k},'
            f'"device":{d},"stream":{s},"correlation":{co},"async":{"true" if asy else "false"},'
            f'"source":{src}}}}}'
            for op, p, t, ts, a, b, k, d, s, co, asy, src in cols]


def _memory_counters(u: pd.DataFrame, t0: int) -> list[str]:
    return [f'{{"ph":"C","cat":"gpu_memory","name":"device memory in use","pid":{d},"tid":0,'
            f'"ts":{ts:.3f},"args":{{"allocated":{v}}}}}'
            for d, ts, v in zip(_ints(u["device"]), _us(u["time_ns"], t0), _ints(u["in_use"]))]


def _sample_counters(s: pd.DataFrame, t0: int) -> list[str]:
    out = []
    devs, ts = _ints(s["device"]), _us(s["time_ns"], t0)
    for name, args in _SAMPLE_COUNTERS:
        values = [s[col].to_numpy(np.float64) for col in args.values()]
        keep = np.logical_or.reduce([np.isfinite(v) for v in values])  # NaN: not reported
        for i in np.flatnonzero(keep).tolist():
            body = ",".join(f'"{k}":{_num(v[i])}' for k, v in zip(args, values))
            out.append(f'{{"ph":"C","cat":"nvml","name":"{name}","pid":{devs[i]},"tid":0,'
                       f'"ts":{ts[i]:.3f},"args":{{{body}}}}}')
    return out


def _metadata_events(trace: Trace, host_pid: int) -> list[str]:
    names = {int(d["index"]): str(d.get("name", "")) for d in trace.meta.get("devices") or []
             if isinstance(d, dict) and "index" in d}
    gpu = pd.concat([getattr(trace, t)[["device", "stream"]]
                     for t in ("kernels", "memcpy", "memset")], ignore_index=True)
    devices = sorted(set(gpu["device"].tolist()) | set(trace.memory["device"].tolist())
                     | set(trace.samples["device"].tolist()) | set(names))
    out = []
    for d in devices:
        if d < 0:
            continue
        out.append(_meta_event("process_name", d, 0, {"name": f"GPU {d}"}))
        out.append(_meta_event("process_sort_index", d, 0, {"sort_index": 1000 + d}))
        if names.get(d):
            out.append(_meta_event("process_labels", d, 0, {"labels": names[d]}))
    for d, s in gpu.drop_duplicates().itertuples(index=False):
        out.append(_meta_event("thread_name", d, s, {"name": f"stream {s}"}))
        out.append(_meta_event("thread_sort_index", d, s, {"sort_index": s}))
    label = trace.meta.get("label")
    out.append(_meta_event("process_name", host_pid, 0,
                           {"name": f"host{f' · {label}' if label else ''}"}))
    threads = pd.concat([trace.api["thread"], trace.ranges["thread"], trace.sync["thread"]])
    for t in sorted(set(threads.tolist())):
        out.append(_meta_event("thread_name", host_pid, t, {"name": f"thread {t}"}))
    return out


def _meta_event(name: str, pid: int, tid: int, args: dict[str, Any]) -> str:
    return json.dumps({"ph": "M", "name": name, "pid": int(pid), "tid": int(tid), "args": args})


# -- document-level fields ------------------------------------------------------------------
def _time_origin(trace: Trace) -> int:
    start = trace.meta.get("start_ns")
    if isinstance(start, (int, np.integer)) and not isinstance(start, bool):
        return int(start)
    firsts = [int(getattr(trace, t)["start_ns"].min()) for t in
              ("kernels", "memcpy", "memset", "api", "ranges", "sync") if len(getattr(trace, t))]
    if len(trace.memory):
        firsts.append(int(trace.memory["time_ns"].min()))
    return min(firsts, default=0)


def _host_pid(trace: Trace) -> int:
    pid = trace.meta.get("pid")
    return int(pid) if isinstance(pid, int) and pid > 0 else _FALLBACK_HOST_PID


def _device_properties(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """meta["devices"] under the key names Kineto writes (what HTA and others read)."""
    keys = {"index": "id", "name": "name", "total_memory": "totalGlobalMem",
            "multiprocessors": "numSms", "max_threads_per_sm": "maxThreadsPerMultiprocessor",
            "max_regs_per_block": "regsPerBlock", "max_regs_per_sm": "regsPerMultiprocessor",
            "warp_size": "warpSize", "max_smem_per_block": "sharedMemPerBlock",
            "max_smem_per_sm": "sharedMemPerMultiprocessor"}
    out = []
    for dev in meta.get("devices") or []:
        if not isinstance(dev, dict):
            continue
        props = {k2: dev[k1] for k1, k2 in keys.items() if k1 in dev}
        cc = dev.get("compute_capability")
        if isinstance(cc, (list, tuple)) and len(cc) == 2:
            props["computeMajor"], props["computeMinor"] = int(cc[0]), int(cc[1])
        out.append(_clean(props))
    return out


def _num(v: float) -> str:
    return repr(int(v)) if float(v).is_integer() else f"{v:.6g}" if math.isfinite(v) else "null"


def _clean(value: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, NaN/inf to null (JSON has no NaN)."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
