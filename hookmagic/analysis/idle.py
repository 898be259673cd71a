"""When the GPU sat idle, and why.

A device is busy while any kernel, copy or memset runs on it. Every stretch between busy
periods is a gap, and each gap's time is split three ways:

- ``launch_ns``: the next piece of work had already been asked for (its API call, found by
  correlation id, had started) but had not begun on the GPU yet: launch latency;
- ``sync_ns``: the host sat in a synchronising call (the ``sync`` table, or a runtime/driver
  call that blocks: ``*Synchronize``, synchronous ``cudaMemcpy``);
- ``host_ns``: the rest. The host had not asked for anything: Python, data loading, or API
  calls that launch no work.

A gap opened while the host was synchronising (a sync overlaps or touches it) is flagged
``after_sync``: the host waited for the GPU to drain, so everything it did before the next
launch left the GPU idle; its cause is "synchronisation" when that part dominates.

Pure functions, vectorised over events.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

import numpy as np
import pandas as pd

from hookmagic.analysis.tables import as_set, event_mask, table
from hookmagic.common.intervals import merge_intervals
from hookmagic.trace.correlation import CorrelationIndex

#: API calls that block the host until the GPU catches up
BLOCKING_API = re.compile(r"Synchronize|^cudaMemcpy(2D|3D)?(_v\d+)?$|"
                          r"^cuMemcpy(DtoH|HtoD|DtoD)?(_v\d+)?$")

POSITIONS = ["lead", "between", "tail"]
CAUSES = ["host-bound", "launch latency", "synchronisation"]
GAP_COLUMNS = ["device", "start_ns", "end_ns", "duration_ns", "position", "next_kind",
               "next_name", "next_correlation", "launch_start_ns", "host_ns", "launch_ns",
               "sync_ns", "after_sync", "cause"]


# -- interval arithmetic (merge_intervals lives in hookmagic.common.intervals) -----------

def covered_until(u_starts: np.ndarray, u_ends: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Length of the disjoint sorted intervals ``u`` that lies before each ``x``."""
    x = np.asarray(x, dtype=np.int64)
    if u_starts.size == 0:
        return np.zeros(x.shape, dtype=np.int64)
    lengths = u_ends - u_starts
    before = np.r_[0, np.cumsum(lengths)]
    i = np.searchsorted(u_starts, x, side="right")  # intervals starting at or before x
    partial = np.where(i > 0, np.clip(x - u_starts[np.maximum(i - 1, 0)], 0,
                                      lengths[np.maximum(i - 1, 0)]), 0)
    return before[np.maximum(i - 1, 0)] * (i > 0) + partial


def overlap(u_starts: np.ndarray, u_ends: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Nanoseconds of ``[a, b)`` covered by the disjoint sorted intervals ``u``."""
    b = np.maximum(np.asarray(b, dtype=np.int64), np.asarray(a, dtype=np.int64))
    return covered_until(u_starts, u_ends, b) - covered_until(u_starts, u_ends, a)


def touches(u_starts: np.ndarray, u_ends: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether any interval of ``u`` meets the closed span ``[a, b]``."""
    a = np.asarray(a, dtype=np.int64)
    if u_starts.size == 0:
        return np.zeros(a.shape, dtype=bool)
    i = np.searchsorted(u_ends, a, side="left")  # first interval ending at or after a
    ok = i < u_ends.size
    return ok & (u_starts[np.minimum(i, u_ends.size - 1)] <= np.asarray(b, dtype=np.int64))


# -- launches ---------------------------------------------------------------------------------

def api_by_correlation(api: pd.DataFrame) -> CorrelationIndex:
    """API calls indexed by correlation id, the earliest (outermost) call kept per id.

    Its values ``start_ns`` and ``end_ns`` are the kept calls' times; ``rows`` their rows in
    ``api``.
    """
    start = api["start_ns"].to_numpy(dtype=np.int64)
    return CorrelationIndex(api["correlation"].to_numpy(dtype=np.int64), keep="first", by=start,
                            start_ns=start, end_ns=api["end_ns"].to_numpy(dtype=np.int64))


def launch_latency(trace: Any, device: int | Iterable[int] | None = None,
                   stream: int | Iterable[int] | None = None) -> pd.DataFrame:
    """For every kernel, copy and memset: the API call that launched it and the wait after.

    Columns: ``kind`` (kernel, memcpy, memset), ``device, stream, correlation, name,
    start_ns`` (on the GPU), ``api_name, api_start_ns, api_end_ns``, ``latency_ns`` (API call
    start -> GPU start) and ``queue_ns`` (API call end -> GPU start; negative when the work
    began before the call returned). Events whose API call was not captured are left out.
    """
    api = table(trace, "api")
    calls = api_by_correlation(api)
    a_start, a_end, a_row = calls.values["start_ns"], calls.values["end_ns"], calls.rows
    parts = []
    for kind, name in (("kernel", "kernels"), ("memcpy", "memcpy"), ("memset", "memset")):
        frame = table(trace, name)
        mask = event_mask(frame, device, stream)
        frame = frame[mask] if not mask.all() else frame
        if len(frame) == 0:
            continue
        pos = calls.positions(frame["correlation"].to_numpy(dtype=np.int64))
        hit = pos >= 0
        if not hit.any():
            continue
        f = frame[hit]
        p = pos[hit]
        start = f["start_ns"].to_numpy(dtype=np.int64)
        # string columns are taken, not rebuilt, so a million rows stay cheap
        label = (f["name"].reset_index(drop=True) if kind == "kernel"
                 else pd.Series(kind, index=pd.RangeIndex(len(f)), dtype="str"))
        parts.append(pd.DataFrame({
            "kind": kind, "device": f["device"].to_numpy(), "stream": f["stream"].to_numpy(),
            "correlation": f["correlation"].to_numpy(), "name": label, "start_ns": start,
            "api_name": api["name"].iloc[a_row[p]].reset_index(drop=True),
            "api_start_ns": a_start[p], "api_end_ns": a_end[p],
            "latency_ns": start - a_start[p], "queue_ns": start - a_end[p]}))
    if not parts:
        return pd.DataFrame(columns=["kind", "device", "stream", "correlation", "name", "start_ns",
                                     "api_name", "api_start_ns", "api_end_ns", "latency_ns",
                                     "queue_ns"])
    return pd.concat(parts, ignore_index=True)


# -- gaps -------------------------------------------------------------------------------------

def sync_intervals(trace: Any) -> tuple[np.ndarray, np.ndarray]:
    """Union of the host's blocking waits: the sync table and blocking API calls."""
    sync = table(trace, "sync")
    api = table(trace, "api")
    starts = [sync["start_ns"].to_numpy(dtype=np.int64)]
    ends = [sync["end_ns"].to_numpy(dtype=np.int64)]
    if len(api):
        codes, names = pd.factorize(api["name"], sort=False)
        blocking = np.array([bool(BLOCKING_API.search(n)) for n in names], dtype=bool)
        rows = blocking[codes]
        starts.append(api["start_ns"].to_numpy(dtype=np.int64)[rows])
        ends.append(api["end_ns"].to_numpy(dtype=np.int64)[rows])
    return merge_intervals(np.concatenate(starts), np.concatenate(ends))


def _gpu_events(trace: Any, devices: list[int] | None) -> tuple[pd.DataFrame, np.ndarray]:
    """Kernels, copies and memsets as one numeric frame, and the label of each ``label`` code.

    Columns: device, start_ns, end_ns, correlation, kind (0 kernel, 1 memcpy, 2 memset) and
    label (a code into the returned labels: kernel names, "memcpy", "memset"). Strings stay
    codes so that a million events cost no Python objects.
    """
    parts: list[pd.DataFrame] = []
    index: dict[str, int] = {}  # label -> code; unique, so codes can be categories
    for kind, name in enumerate(("kernels", "memcpy", "memset")):
        frame = table(trace, name)
        if len(frame) == 0:
            continue
        if devices is not None:
            frame = frame[np.isin(frame["device"].to_numpy(), devices)]
        if kind == 0:
            code, uniq = pd.factorize(frame["name"], sort=False)
            remap = np.array([index.setdefault(str(u), len(index)) for u in uniq], dtype=np.int64)
            code = remap[code] if len(code) else code.astype(np.int64)
        else:
            code = np.full(len(frame), index.setdefault(name, len(index)), dtype=np.int64)
        parts.append(pd.DataFrame({
            "device": frame["device"].to_numpy(dtype=np.int64),
            "start_ns": frame["start_ns"].to_numpy(dtype=np.int64),
            "end_ns": frame["end_ns"].to_numpy(dtype=np.int64),
            "correlation": frame["correlation"].to_numpy(dtype=np.int64),
            "kind": np.full(len(frame), kind, dtype=np.int8), "label": code}))
    if not parts:
        return pd.DataFrame({c: np.zeros(0, np.int64) for c in
                             ("device", "start_ns", "end_ns", "correlation", "kind", "label")}), \
            np.zeros(0, dtype=object)
    index.setdefault("", len(index))
    return pd.concat(parts, ignore_index=True), np.asarray(list(index), dtype=object)


def idle_gaps(trace: Any, device: int | Iterable[int] | None = None,
              min_gap_ns: int = 1) -> pd.DataFrame:
    """Every stretch of at least ``min_gap_ns`` in which a device ran nothing, with its cause.

    Includes the stretch from the capture's start (``meta["start_ns"]``) to the first work
    (``position`` "lead") and from the last work to the capture's end ("tail"), when the
    meta gives them; the others are "between". Columns: see :data:`GAP_COLUMNS` and the
    module docstring; ``cause`` is "host-bound", "launch latency" or "synchronisation".
    """
    events, labels = _gpu_events(trace, as_set(device))
    none_label = int(np.flatnonzero(labels == "")[0]) if len(labels) else 0
    meta = getattr(trace, "meta", None) or {}
    cap_start, cap_end = meta.get("start_ns"), meta.get("end_ns")
    sync_s, sync_e = sync_intervals(trace)
    calls = api_by_correlation(table(trace, "api"))
    a_start = calls.values["start_ns"]
    frames = []
    for dev, ev in events.groupby("device", sort=True):
        order = np.argsort(ev["start_ns"].to_numpy(), kind="stable")
        s = ev["start_ns"].to_numpy()[order]
        e = ev["end_ns"].to_numpy()[order]
        reach = np.maximum.accumulate(e)
        gap_after = np.flatnonzero(s[1:] > reach[:-1])  # gap between i and i + 1
        g0 = reach[gap_after]
        g1 = s[gap_after + 1]
        nxt = order[gap_after + 1]
        position = np.full(len(g0), 1, dtype=np.int8)  # codes of POSITIONS
        if cap_start is not None and int(cap_start) < s[0]:
            g0, g1 = np.r_[int(cap_start), g0], np.r_[s[0], g1]
            nxt = np.r_[order[0], nxt]
            position = np.r_[np.int8(0), position]
        tail = cap_end is not None and int(cap_end) > reach[-1]
        if tail:
            g0, g1 = np.r_[g0, reach[-1]], np.r_[g1, int(cap_end)]
            nxt = np.r_[nxt, -1]
            position = np.r_[position, np.int8(2)]
        keep = (g1 - g0) >= min_gap_ns
        g0, g1, nxt, position = g0[keep], g1[keep], nxt[keep], position[keep]
        has_next = nxt >= 0
        safe = np.maximum(nxt, 0)
        n_corr = np.where(has_next, ev["correlation"].to_numpy()[safe], -1)
        api_pos = calls.positions(n_corr)
        found = (api_pos >= 0) & has_next
        launch_at = g1.copy()
        launch_at[found] = a_start[api_pos[found]]
        launch_at = np.minimum(launch_at, g1)  # a launch "after" its work is clock skew
        launch_from = np.maximum(launch_at, g0)
        sync_ns = overlap(sync_s, sync_e, g0, g1)
        launch_ns = (g1 - launch_from) - overlap(sync_s, sync_e, launch_from, g1)
        host_ns = np.maximum((g1 - g0) - sync_ns - launch_ns, 0)
        after_sync = touches(sync_s, sync_e, g0, g1)
        parts = np.stack([host_ns, launch_ns, sync_ns + np.where(after_sync, host_ns, 0)], axis=1)
        cause = pd.Categorical.from_codes(np.argmax(parts, axis=1), CAUSES)
        frames.append(pd.DataFrame({
            "device": np.full(len(g0), dev, dtype=np.int64), "start_ns": g0, "end_ns": g1,
            "duration_ns": g1 - g0, "position": pd.Categorical.from_codes(position, POSITIONS),
            "next_kind": pd.Categorical.from_codes(
                np.where(has_next, ev["kind"].to_numpy()[safe], 3),
                ["kernel", "memcpy", "memset", ""]),
            "next_name": pd.Categorical.from_codes(
                np.where(has_next, ev["label"].to_numpy()[safe], none_label), labels),
            "next_correlation": n_corr,
            "launch_start_ns": np.where(api_pos >= 0, launch_at, -1),
            "host_ns": host_ns, "launch_ns": launch_ns, "sync_ns": sync_ns,
            "after_sync": after_sync, "cause": cause}))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in GAP_COLUMNS})
    return pd.concat(frames, ignore_index=True)


def idle_summary(trace: Any, device: int | Iterable[int] | None = None) -> pd.DataFrame:
    """Busy and idle time per device, the idle time split by cause, and launch latency.

    One row per device: ``span_ns`` (capture start to end, else first to last work),
    ``busy_ns`` (any work running), ``idle_ns``, ``idle_share``, ``host_ns``, ``launch_ns``,
    ``sync_ns`` (idle time by cause, see :func:`idle_gaps`), ``sync_bound_ns`` (idle time in
    gaps whose cause is synchronisation), ``gaps`` (between-work gaps), ``median_gap_ns``,
    ``launch_latency_p50_ns`` and ``launch_latency_p90_ns`` (API call start -> kernel start).
    """
    events, _ = _gpu_events(trace, as_set(device))
    gaps = idle_gaps(trace, device)
    calls = api_by_correlation(table(trace, "api"))
    a_start = calls.values["start_ns"]
    meta = getattr(trace, "meta", None) or {}
    rows = []
    for dev, ev in events.groupby("device", sort=True):
        s, e = merge_intervals(ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy())
        busy = int((e - s).sum())
        lo = int(meta["start_ns"]) if meta.get("start_ns") is not None else int(s[0])
        hi = int(meta["end_ns"]) if meta.get("end_ns") is not None else int(e[-1])
        span = max(hi - lo, busy)
        g = gaps[gaps["device"] == dev]
        between = g[g["position"] == "between"]
        kern = ev[ev["kind"].to_numpy() == 0]
        pos = calls.positions(kern["correlation"].to_numpy())
        kl = kern["start_ns"].to_numpy()[pos >= 0] - a_start[pos[pos >= 0]]
        rows.append({
            "device": int(dev), "span_ns": span, "busy_ns": busy, "idle_ns": span - busy,
            "idle_share": (span - busy) / span if span else 0.0,
            "host_ns": int(g["host_ns"].sum()), "launch_ns": int(g["launch_ns"].sum()),
            "sync_ns": int(g["sync_ns"].sum()),
            "sync_bound_ns": int(g.loc[g["cause"] == "synchronisation", "duration_ns"].sum()),
            "gaps": len(between),
            "median_gap_ns": float(np.median(between["duration_ns"])) if len(between) else 0.0,
            "launch_latency_p50_ns": float(np.percentile(kl, 50)) if kl.size else np.nan,
            "launch_latency_p90_ns": float(np.percentile(kl, 90)) if kl.size else np.nan})
    return pd.DataFrame(rows, columns=["device", "span_ns", "busy_ns", "idle_ns", "idle_share",
                                       "host_ns", "launch_ns", "sync_ns", "sync_bound_ns", "gaps",
                                       "median_gap_ns", "launch_latency_p50_ns",
                                       "launch_latency_p90_ns"])
