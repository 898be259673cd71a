"""Headline numbers of a trace: busy/idle GPU time, top kernels, copies, peak memory, overhead.

Pure functions over the trace's DataFrames: nothing here draws, prints or writes files.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from hookmagic.analysis.counters import counter_costs
from hookmagic.common.accessors import accepts_methods
from hookmagic.common.intervals import busy_ns, merge_intervals  # noqa: F401 (public here)
from hookmagic.common.results import Headline

if TYPE_CHECKING:  # pragma: no cover - typing only
    from hookmagic.trace.model import Trace

#: memory kinds that live in host memory; everything else counts as device memory in use.
HOST_MEMORY_KINDS = frozenset({"pinned", "pageable"})
_ADD_OPS = ("alloc", "map")
_REMOVE_OPS = ("free", "unmap")
_GPU_TABLES = ("kernels", "memcpy", "memset")


def device_memory_in_use(memory: pd.DataFrame) -> pd.DataFrame:
    """Device memory allocated during the capture, after every alloc/free event, per device.

    Returns ``time_ns, device, op, address, delta, in_use`` (bytes), one row per device-memory
    event of ``memory`` in time order. An alloc (or map) adds its bytes; a free (or unmap)
    subtracts the bytes of the allocation at the same address it releases. Frees of memory
    allocated before the capture began subtract nothing, so ``in_use`` counts only what the
    capture saw being allocated. Host kinds (pinned, pageable) are left out.
    """
    cols = ["time_ns", "device", "op", "address", "delta", "in_use"]
    mem = memory[~memory["memory_kind"].isin(HOST_MEMORY_KINDS)
                 & memory["op"].isin(_ADD_OPS + _REMOVE_OPS)]
    if mem.empty:
        return pd.DataFrame({c: pd.Series(dtype=d) for c, d in zip(
            cols, ["int64", "int32", "str", "uint64", "int64", "int64"])})
    mem = mem.reset_index(drop=True)
    adds = mem["op"].isin(_ADD_OPS).to_numpy()
    # Pair each free with the latest earlier alloc at its address on its device: sort by
    # (device, address, time) keeping input order for ties, and carry alloc bytes forward.
    by_addr = mem.assign(_seq=np.arange(len(mem)), _add=adds).sort_values(
        ["device", "address", "time_ns", "_seq"], kind="stable")
    keys = [by_addr["device"], by_addr["address"]]
    alloc_no = by_addr["_add"].astype("int64").groupby(keys).cumsum()
    alloc_bytes = by_addr["bytes"].where(by_addr["_add"]).groupby(keys).ffill()
    # Only the first free after an alloc releases it (a repeated free would go negative).
    removes = ~by_addr["_add"]
    repeat = removes & pd.DataFrame({"d": by_addr["device"], "a": by_addr["address"],
                                     "n": alloc_no, "r": removes}).duplicated()
    released = alloc_bytes.where(removes & (alloc_no > 0) & ~repeat, 0).fillna(0)
    delta = np.where(by_addr["_add"], by_addr["bytes"], -released).astype(np.int64)
    delta = pd.Series(delta, index=by_addr["_seq"].to_numpy()).sort_index().to_numpy()

    out = pd.DataFrame({"time_ns": mem["time_ns"], "device": mem["device"], "op": mem["op"],
                        "address": mem["address"], "delta": delta})
    out = out.sort_values("time_ns", kind="stable").reset_index(drop=True)
    out["in_use"] = out.groupby("device")["delta"].cumsum().astype("int64")
    return out


@accepts_methods("Summary")
@dataclass(eq=False, repr=False)
class Summary:
    """Headline numbers of one trace. Display it for a compact table; fields hold the numbers.

    Its display (``repr`` and the notebook's HTML) is attached by :mod:`hookmagic.facades`.

    Times are seconds, sizes bytes. ``idle_fraction`` is the share of the capture's wall time
    the GPUs that did any work spent doing nothing (NaN when the wall time is unknown).
    """

    status: str
    reason: str = ""
    label: str | None = None
    source: str = ""
    recorded_on: str | None = None
    device_names: dict[int, str] = field(default_factory=dict)
    wall_s: float = 0.0
    busy_s: float = 0.0
    idle_fraction: float = float("nan")
    per_device: pd.DataFrame = field(default_factory=pd.DataFrame)
    kernel_count: int = 0
    kernel_time_s: float = 0.0
    top_kernels: pd.DataFrame = field(default_factory=pd.DataFrame)
    copies: pd.DataFrame = field(default_factory=pd.DataFrame)
    memsets: pd.DataFrame = field(default_factory=pd.DataFrame)
    peak_memory: dict[int, int] = field(default_factory=dict)
    allocations: int = 0
    frees: int = 0
    api_calls: int = 0
    overhead_s: float = 0.0
    overhead: dict[str, float] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    #: problems the loader found in the data (negative durations, ...), from ``meta["warnings"]``
    warnings: list[str] = field(default_factory=list)
    #: hardware counters' coverage and cost (:func:`hookmagic.analysis.counters.counter_costs`);
    #: empty for a capture without counters
    counters: dict[str, Any] = field(default_factory=dict)

    @property
    def peak_memory_bytes(self) -> int:
        """The largest per-device peak of memory allocated during the capture."""
        return max(self.peak_memory.values(), default=0)

    def headline(self) -> Headline:
        """The scalar numbers as the shared :class:`~hookmagic.common.results.Headline`
        (name, value, unit); the tables (top kernels, copies, per device) stay fields."""
        values = {name: getattr(self, name) for name in _HEADLINE_UNITS}
        units = {k: u for k, u in _HEADLINE_UNITS.items() if u}
        for key, (name, unit) in _COUNTER_HEADLINE.items():
            if key in self.counters:
                values[name] = self.counters[key]
                if unit:
                    units[name] = unit
        notes = ([self.reason] if self.reason else []) + list(self.warnings)
        title = f"Trace {self.label!r}" if self.label else "Trace"
        return Headline(title, values, units, notes)

    def to_frame(self) -> pd.DataFrame:
        """The scalar numbers as a DataFrame: index ``name``, columns ``value`` and ``unit``
        (as every result's ``summary().to_frame()``)."""
        return self.headline().to_frame()

    def to_dict(self) -> dict[str, Any]:
        """The scalar numbers as a plain dict."""
        return self.headline().to_dict()

    def __getitem__(self, name: str) -> Any:
        return self.headline()[name]


#: the scalar fields of a Summary that its headline table shows, with their units
_HEADLINE_UNITS = {
    "status": "", "wall_s": "s", "busy_s": "s", "idle_fraction": "fraction",
    "kernel_count": "", "kernel_time_s": "s", "peak_memory_bytes": "bytes",
    "allocations": "", "frees": "", "api_calls": "", "overhead_s": "s",
}

#: the counters' numbers a capture with counters adds to its headline: key of
#: :attr:`Summary.counters` -> (headline name, unit)
_COUNTER_HEADLINE = {"kernels": ("counter_kernels", ""), "metrics": ("counter_metrics", ""),
                     "passes": ("counter_passes", ""), "replay_wall_s": ("counter_replay_s", "s")}


_AROUND_THE_CELL = ("start_s", "stop_s", "take_s", "build_s")


def summarize(trace: "Trace", top: int = 10) -> Summary:
    """Summarise ``trace``: wall and GPU busy time, the ``top`` kernels, copies, memsets, peak
    memory allocated during the capture, capture overhead and dropped records."""
    meta = trace.meta
    status = str(meta.get("status", "complete"))
    names = {int(d["index"]): str(d.get("name", f"GPU {d['index']}"))
             for d in meta.get("devices") or [] if isinstance(d, dict) and "index" in d}
    base = dict(status=status, reason=str(meta.get("reason") or ""), label=meta.get("label"),
                source=str(meta.get("source") or ""), recorded_on=meta.get("recorded_on"),
                device_names=names, overhead=_float_dict(meta.get("overhead")),
                dropped=_int_dict(meta.get("dropped")),
                warnings=[str(w) for w in meta.get("warnings") or []
                          if isinstance(meta.get("warnings"), list)])
    # The time the capture added around the cell. The other entries are parts of these
    # (CUPTI's subscribe/drain/detach, decoding) or counts, and must not be added again.
    # A live capture measures everything after the cell as finish_s.
    over = base["overhead"]
    base["overhead_s"] = (float(over.get("start_s", 0.0) + over["finish_s"]) if "finish_s" in over
                          else float(sum(over.get(k, 0.0) for k in _AROUND_THE_CELL)))

    kernels = trace.kernels
    kernel_total = int(kernels["duration_ns"].sum())
    memory = device_memory_in_use(trace.memory)
    peak = memory.groupby("device")["in_use"].max().clip(lower=0)
    wall_s = _wall_seconds(trace)
    per_device = _per_device(trace, wall_s, peak)
    active = per_device[per_device["busy_s"] > 0]
    busy_s = float(active["busy_s"].sum())
    idle = 1.0 - busy_s / (wall_s * len(active)) if wall_s > 0 and len(active) else float("nan")

    return Summary(
        **base, wall_s=wall_s, busy_s=busy_s,
        idle_fraction=max(0.0, idle) if idle == idle else idle,
        per_device=per_device, kernel_count=len(kernels), kernel_time_s=kernel_total / 1e9,
        top_kernels=top_kernels(kernels, top), copies=copies_by_kind(trace.memcpy),
        memsets=memsets_by_kind(trace.memset),
        peak_memory={int(d): int(v) for d, v in peak.items()},
        allocations=int(trace.memory["op"].isin(_ADD_OPS).sum()),
        frees=int(trace.memory["op"].isin(_REMOVE_OPS).sum()),
        api_calls=len(trace.api), counters=counter_costs(trace))


def top_kernels(kernels: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """Kernels grouped by name: ``name, count, total_s, mean_s, share`` (of all kernel time),
    the ``top`` largest by total time."""
    if kernels.empty:
        return pd.DataFrame({"name": pd.Series(dtype="str"), "count": pd.Series(dtype="int64"),
                             "total_s": pd.Series(dtype="float64"),
                             "mean_s": pd.Series(dtype="float64"),
                             "share": pd.Series(dtype="float64")})
    g = kernels.groupby("name", sort=False)["duration_ns"].agg(["count", "sum"])
    total = g["sum"].sum()
    out = pd.DataFrame({"name": g.index.astype(str), "count": g["count"].to_numpy(np.int64),
                        "total_s": g["sum"].to_numpy() / 1e9,
                        "mean_s": g["sum"].to_numpy() / g["count"].to_numpy() / 1e9,
                        "share": g["sum"].to_numpy() / total if total > 0 else np.nan})
    out = out.sort_values(["total_s", "count"], ascending=False, kind="stable")
    return out.head(top).reset_index(drop=True)


def _sums_by(frame: pd.DataFrame, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows of ``frame`` grouped by ``key`` (sorted; missing keys left out): the keys as text, and
    per key the row count, the sum of ``bytes`` and the sum of ``duration_ns``. NumPy, not a
    pandas named aggregation, which costs ~10 ms even on an empty table: the summary runs after
    every captured cell."""
    codes, keys = pd.factorize(frame[key], sort=True)
    kept = codes >= 0
    codes, n = codes[kept], len(keys)
    count = np.bincount(codes, minlength=n).astype(np.int64)
    nbytes = np.zeros(n, np.int64)
    np.add.at(nbytes, codes, frame["bytes"].to_numpy(np.int64)[kept])
    total_ns = np.bincount(codes, weights=frame["duration_ns"].to_numpy(np.float64)[kept], minlength=n)
    return np.asarray(keys, dtype=object).astype(str), count, nbytes, total_ns


def copies_by_kind(memcpy: pd.DataFrame) -> pd.DataFrame:
    """Copies grouped by kind: ``kind, count, bytes, total_s, gb_per_s`` (achieved bandwidth:
    bytes over time spent copying, 1 GB = 1e9 bytes)."""
    kinds, count, nbytes, total_ns = _sums_by(memcpy, "kind")
    with np.errstate(divide="ignore", invalid="ignore"):
        bw = nbytes / total_ns   # bytes/ns == GB/s
    return pd.DataFrame({"kind": kinds, "count": count, "bytes": nbytes, "total_s": total_ns / 1e9,
                         "gb_per_s": np.where(np.isfinite(bw), bw, np.nan)})


def memsets_by_kind(memset: pd.DataFrame) -> pd.DataFrame:
    """Memsets grouped by memory kind: ``memory_kind, count, bytes, total_s``."""
    kinds, count, nbytes, total_ns = _sums_by(memset, "memory_kind")
    return pd.DataFrame({"memory_kind": kinds, "count": count, "bytes": nbytes,
                         "total_s": total_ns / 1e9})


def _per_device(trace: "Trace", wall_s: float, peak: pd.Series) -> pd.DataFrame:
    tables = [getattr(trace, t) for t in _GPU_TABLES]
    device = np.concatenate([t["device"].to_numpy(np.int64) for t in tables])
    start = np.concatenate([t["start_ns"].to_numpy(np.int64) for t in tables])
    end = np.concatenate([t["end_ns"].to_numpy(np.int64) for t in tables])
    rows = []
    for dev in sorted(set(np.unique(device).tolist()) | set(int(d) for d in peak.index)):
        sel = device == dev
        busy = busy_ns(start[sel], end[sel]) / 1e9
        rows.append({"device": int(dev), "busy_s": busy,
                     "idle_fraction": max(0.0, 1 - busy / wall_s) if wall_s > 0 else np.nan,
                     "peak_memory": int(peak.get(dev, 0))})
    return pd.DataFrame(rows, columns=["device", "busy_s", "idle_fraction", "peak_memory"])


def _wall_seconds(trace: "Trace") -> float:
    """The capture's wall time: meta wall_s, else end_ns - start_ns, else the span of events."""
    meta = trace.meta
    wall = meta.get("wall_s")
    if isinstance(wall, (int, float)) and wall > 0:
        return float(wall)
    start, end = meta.get("start_ns"), meta.get("end_ns")
    if isinstance(start, int) and isinstance(end, int) and end > start:
        return (end - start) / 1e9
    lo, hi = [], []
    for name in _GPU_TABLES + ("api", "ranges", "sync"):
        frame = getattr(trace, name)
        if len(frame):
            lo.append(int(frame["start_ns"].min()))
            hi.append(int(frame["end_ns"].max()))
    return (max(hi) - min(lo)) / 1e9 if lo else 0.0


def _float_dict(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    return {str(k): float(v) for k, v in value.items() if isinstance(v, (int, float))}


def _int_dict(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(k): int(v) for k, v in value.items() if isinstance(v, (int, float))}
