"""From the native session's columns to the Trace's tables.

The native side hands over one NumPy array per CUPTI field; here they become the tables of
``hookmagic.trace.schema``: enumerations named, strings looked up, and the Python stack,
launching thread and user range of every record joined in by correlation id. Vectorised
throughout: a million kernels take well under a second.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd

from hookmagic.trace.correlation import CorrelationIndex
from hookmagic.trace.schema import conform

Columns = dict[str, np.ndarray]


def _names(codes: np.ndarray, names: Sequence[str]) -> np.ndarray:
    table = np.asarray(list(names) + ["unknown"], dtype=object)
    codes = np.asarray(codes).astype(np.int64)
    return table[np.where((codes >= 0) & (codes < len(names)), codes, len(names))]


def _timed(raw: Columns) -> dict[str, np.ndarray]:
    start = raw["start_ns"].astype(np.int64)
    end = raw["end_ns"].astype(np.int64)
    return {"start_ns": start, "end_ns": end, "duration_ns": end - start}


def _attribution(raw: Columns, launches: CorrelationIndex) -> dict:
    corr = raw["correlation"]
    return {
        "correlation": corr.astype(np.int64),
        "thread": launches.get("thread", corr, -1),
        "stack_id": launches.get("stack_id", corr, -1),
        "range_id": launches.get("range_id", corr, -1),
    }


def build_tables(
    raw: dict,
    enums: dict,
    range_rows: pd.DataFrame,
    samples: Columns,
    callback_name: Callable[[int, int], str | None],
) -> dict[str, pd.DataFrame]:
    """Turn the native hand-over ``raw`` (see ``hookmagic._native.take``) into schema tables;
    tables without rows are left out (a Trace makes empty ones when they are asked for).

    ``range_rows`` holds the finished ``hookmagic.range`` records; ``samples`` the NVML
    columns; ``callback_name(domain, cbid)`` names API records (domain 0 runtime, 1 driver).
    """
    strings = np.asarray(list(raw["strings"]) + [""], dtype=object)

    def text(codes: np.ndarray) -> np.ndarray:
        codes = np.asarray(codes).astype(np.int64)
        return strings[np.where((codes >= 0) & (codes < len(strings) - 1), codes, -1)]

    launch = raw["launches"]
    launches = CorrelationIndex(launch["correlation"], keep="last",
                                thread=launch["thread"].astype(np.int64),
                                stack_id=launch["stack_id"].astype(np.int64),
                                range_id=launch["range_id"].astype(np.int64))

    k = raw["kernels"]
    kernels = {**_timed(k), "device": k["device"], "context": k["context"], "stream": k["stream"],
               "name": text(k["name"]),
               **{c: k[c] for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
                                    "registers", "static_smem", "dynamic_smem", "local_mem",
                                    "graph_id")},
               "graph_node": k["graph_node"].astype(np.int64),
               **_attribution(k, launches)}

    c = raw["memcpy"]
    memcpy = {**_timed(c), "device": c["device"], "context": c["context"], "stream": c["stream"],
              "bytes": c["bytes"], "kind": _names(c["kind"], enums["memcpy_kind"]),
              "src_kind": _names(c["src_kind"], enums["memory_kind"]),
              "dst_kind": _names(c["dst_kind"], enums["memory_kind"]),
              "graph_id": c["graph_id"], **_attribution(c, launches)}

    s = raw["memset"]
    memset = {**_timed(s), "device": s["device"], "context": s["context"], "stream": s["stream"],
              "bytes": s["bytes"], "value": s["value"],
              "memory_kind": _names(s["memory_kind"], enums["memory_kind"]),
              "graph_id": s["graph_id"], **_attribution(s, launches)}

    memory = _memory_table(raw["memory"], raw["vmm"], enums, launches, kernels)

    y = raw["sync"]
    api_raw = raw["api"]
    api_threads = CorrelationIndex(api_raw["correlation"], keep="last",
                                   thread=api_raw["thread"].astype(np.int64))
    sync_thread = launches.get("thread", y["correlation"], -1)
    from_api = api_threads.get("thread", y["correlation"], -1)
    sync = {**_timed(y), "type": _names(y["type"], enums["sync_type"]), "context": y["context"],
            "stream": y["stream"], "event": y["event"], "correlation": y["correlation"],
            "thread": np.where(sync_thread >= 0, sync_thread, from_api)}

    api = _api_table(api_raw, callback_name) if len(api_raw["start_ns"]) else None
    ranges_table = _ranges_table(range_rows, raw["markers"], enums, strings)
    tables = {"kernels": kernels, "memcpy": memcpy, "memset": memset, "memory": memory,
              "sync": sync, "api": api, "ranges": ranges_table, "stacks": raw["stacks"],
              "samples": samples}
    # Empty tables are left out: the Trace makes those itself, only if asked for.
    return {name: conform(name, t) for name, t in tables.items()
            if t is not None and _rows(t) > 0}


def _rows(table) -> int:
    if isinstance(table, pd.DataFrame):
        return len(table)
    return len(next(iter(table.values()))) if table else 0


def _memory_table(m: Columns, vmm: Columns, enums: dict, launches: CorrelationIndex,
                  kernels: dict) -> dict[str, np.ndarray] | None:
    """CUPTI's memory records and the map/unmap callbacks' rows as one table's columns, in
    time order (columns of arrays: no DataFrame is built here, :func:`conform` builds one)."""
    n_cupti, n_vmm = len(m["time_ns"]), len(vmm["time_ns"])
    if n_cupti == 0 and n_vmm == 0:
        return None
    cupti = {
        "time_ns": m["time_ns"].astype(np.int64), "op": _names(m["op"], enums["memory_op"]),
        "address": m["address"], "bytes": m["bytes"],
        "memory_kind": _names(m["memory_kind"], enums["memory_kind"]),
        "device": m["device"], "context": m["context"], "stream": m["stream"],
        "correlation": m["correlation"].astype(np.int64), "is_async": m["is_async"].astype(bool),
        "source": np.full(n_cupti, "cupti", dtype=object),
        "thread": launches.get("thread", m["correlation"], -1),
        "stack_id": launches.get("stack_id", m["correlation"], -1),
    }
    if n_vmm == 0:
        parts = [cupti]
    else:
        # Map/unmap callbacks know the context, not the device: borrow it from any record of
        # the same context.
        context_device = dict(zip(np.concatenate([m["context"], kernels["context"]]).tolist(),
                                  np.concatenate([m["device"], kernels["device"]]).tolist()))
        mapped = {
            "time_ns": vmm["time_ns"].astype(np.int64), "op": _names(vmm["op"], enums["vmm_op"]),
            "address": vmm["address"], "bytes": vmm["bytes"],
            "memory_kind": np.full(n_vmm, "device", dtype=object),
            "device": np.array([context_device.get(c, -1) for c in vmm["context"].tolist()],
                               dtype=np.int32),
            "context": vmm["context"], "stream": np.zeros(n_vmm, dtype=np.int64),
            "correlation": vmm["correlation"].astype(np.int64),
            "is_async": np.zeros(n_vmm, dtype=bool), "source": np.full(n_vmm, "vmm", dtype=object),
            "thread": vmm["thread"], "stack_id": vmm["stack_id"].astype(np.int64),
        }
        parts = [cupti, mapped] if n_cupti else [mapped]
    cols = {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in cupti}
    order = np.argsort(cols["time_ns"], kind="stable")
    return {k: v[order] for k, v in cols.items()}


def _api_table(a: Columns, callback_name: Callable[[int, int], str | None]) -> pd.DataFrame:
    domain = a["domain"].astype(np.int64)
    cbid = a["cbid"].astype(np.int64)
    key = domain * 100000 + cbid
    unique = np.unique(key)
    lookup = {int(u): (callback_name(int(u // 100000), int(u % 100000)) or f"cbid {u % 100000}")
              for u in unique}
    names = np.array([lookup[int(u)] for u in unique], dtype=object)
    name = names[np.searchsorted(unique, key)] if len(key) else np.array([], dtype=object)
    return pd.DataFrame({**_timed(a), "domain": _names(domain, ["runtime", "driver"]),
                         "name": name, "cbid": cbid.astype(np.int32), "process": a["process"],
                         "thread": a["thread"], "correlation": a["correlation"],
                         "return_code": a["return_code"]})


def _ranges_table(user: pd.DataFrame, markers: Columns, enums: dict,
                  strings: np.ndarray) -> pd.DataFrame:
    if len(user) and "source" not in user:
        user = user.assign(source="hookmagic")
    flags = enums["marker_flags"]
    if len(markers["time_ns"]):
        mk = pd.DataFrame({k: np.asarray(v) for k, v in markers.items()})
        starts = mk[(mk["flags"] & flags["start"]) != 0]
        ends = mk[(mk["flags"] & flags["end"]) != 0][["id", "time_ns"]]
        paired = starts.merge(ends, on="id", suffixes=("", "_end"))
        nvtx = pd.DataFrame({
            # NVTX ids are CUPTI's; offset them so they never collide with hookmagic ranges.
            "range_id": paired["id"].astype(np.int64) + (1 << 40),
            "name": strings[np.where(paired["name"] >= 0, paired["name"], -1)],
            "start_ns": paired["time_ns"], "end_ns": paired["time_ns_end"],
            "thread": paired["thread"].astype(np.int64), "depth": 0, "parent_id": -1,
            "source": "nvtx",
        })
        user = pd.concat([f for f in (user, nvtx) if len(f)], ignore_index=True)
    if len(user):
        user = user.assign(duration_ns=user["end_ns"] - user["start_ns"])
    return user
