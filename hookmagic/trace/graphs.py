"""CUDA-graph launches and the nodes they replayed, as one table (``Trace.graphs()``).

A graph launch (``cudaGraphLaunch``, ``torch.cuda.CUDAGraph.replay()``) runs many kernels,
copies and memsets, each an activity record with the launch's ``correlation`` and the node's
``graph_id``/``graph_node``. Here each launch becomes one row, followed by one row per record
it ran, so the table reads as launches with their nodes beneath. Launch rows name the line that
launched the graph; node rows the line that captured the node (the records' ``stack_id``, see
:mod:`hookmagic.trace.schema`). Pure: tables in, a DataFrame out.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from hookmagic.common.sources import MODULE_FILE, is_library_file

#: the columns of :func:`graph_launches`, in order
GRAPH_COLUMNS = ["launch", "kind", "graph_id", "graph_node", "correlation", "name", "start_ns",
                 "end_ns", "duration_ns", "gpu_ns", "nodes", "stack_id", "file", "line",
                 "function"]
#: the tables whose records a graph launch runs, and the ``kind`` of their node rows
_NODE_TABLES = ("kernels", "memcpy", "memset")


def graph_launches(tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per graph launch (``kind`` "launch"), each followed by one row per kernel, copy
    or memset it ran (``kind`` "kernel", "memcpy" or "memset"), launches in time order and
    nodes in time order beneath theirs.

    Columns: ``launch`` (0, 1, ... in time order, on the launch and its nodes), ``graph_id``,
    ``graph_node`` (0 on launch rows), ``correlation`` (the launch call's), ``name`` ("graph
    <id>", the kernel's name, "memcpy <kind>" or "memset"), ``start_ns``/``end_ns``/
    ``duration_ns`` (a launch: its first node's start to its last node's end), ``gpu_ns`` (a
    launch: its nodes' summed time), ``nodes`` (node rows beneath the row: 0 on node rows),
    ``stack_id`` (a launch: the stack that launched it; a node: the stack that captured it,
    else the launch's) and ``file``/``line``/``function``: that stack's innermost frame of the
    user's own code (else its innermost frame; "", 0, "" without a stack), as ``lines()``
    charges a kernel. Records launched by a call whose correlation id is unknown (0) are one
    launch per graph.
    """
    parts = [_node_rows(tables.get(name), kind)
             for name, kind in zip(_NODE_TABLES, ("kernel", "memcpy", "memset"))]
    parts = [p for p in parts if p is not None and len(p)]
    if not parts:
        return _empty()
    nodes = pd.concat(parts, ignore_index=True)
    # one launch per correlation id; unknown ids (0, -1) group by graph instead
    corr = nodes["correlation"].to_numpy(dtype=np.int64)
    key = np.where(corr > 0, corr, -nodes["graph_id"].to_numpy(dtype=np.int64) - 1)
    nodes["_key"] = key
    grouped = nodes.groupby("_key", sort=False)
    launches = pd.DataFrame({
        "graph_id": grouped["graph_id"].first(),
        "correlation": grouped["correlation"].first(),
        "start_ns": grouped["start_ns"].min(),
        "end_ns": grouped["end_ns"].max(),
        "gpu_ns": grouped["duration_ns"].sum(),
        "nodes": grouped.size(),
        "stack_id": grouped["launch_stack_id"].first(),
    })
    launches = launches.sort_values(["start_ns", "correlation"], kind="stable")
    launches["launch"] = np.arange(len(launches), dtype=np.int64)
    launches["kind"] = "launch"
    launches["graph_node"] = 0
    launches["name"] = ["graph " + str(g) for g in launches["graph_id"].tolist()]
    launches["duration_ns"] = launches["end_ns"] - launches["start_ns"]
    launches["_order"] = -1
    nodes["launch"] = nodes["_key"].map(dict(zip(launches.index, launches["launch"])))
    nodes["_order"] = 0
    rows = pd.concat([launches.reset_index(drop=True),
                      nodes.drop(columns=["_key", "launch_stack_id"])], ignore_index=True)
    rows = rows.sort_values(["launch", "_order", "start_ns"], kind="stable", ignore_index=True)
    frames = _user_frames(tables.get("stacks"), rows["stack_id"].to_numpy(dtype=np.int64))
    rows = rows.join(frames)
    return rows[GRAPH_COLUMNS].astype({c: "int64" for c in GRAPH_COLUMNS
                                       if c not in ("kind", "name", "file", "function")})


def _node_rows(table: pd.DataFrame | None, kind: str) -> pd.DataFrame | None:
    if table is None or not len(table) or "graph_id" not in table:
        return None
    replayed = table[table["graph_id"].to_numpy() != 0]
    if not len(replayed):
        return None
    if kind == "kernel":
        name = replayed["name"].astype(str).to_numpy(object)
    elif kind == "memcpy":
        name = ("memcpy " + replayed["kind"].astype(str)).to_numpy(object)
    else:
        name = np.full(len(replayed), "memset", dtype=object)
    n = len(replayed)
    stack = replayed["stack_id"].to_numpy(dtype=np.int64)
    launch_stack = (replayed["launch_stack_id"].to_numpy(dtype=np.int64)
                    if "launch_stack_id" in replayed else stack)
    graph_node = (replayed["graph_node"].to_numpy(dtype=np.int64) if "graph_node" in replayed
                  else np.zeros(n, dtype=np.int64))
    return pd.DataFrame({
        "kind": np.full(n, kind, dtype=object),
        "graph_id": replayed["graph_id"].to_numpy(dtype=np.int64),
        "graph_node": graph_node,
        "correlation": replayed["correlation"].to_numpy(dtype=np.int64),
        "name": name,
        "start_ns": replayed["start_ns"].to_numpy(dtype=np.int64),
        "end_ns": replayed["end_ns"].to_numpy(dtype=np.int64),
        "duration_ns": replayed["duration_ns"].to_numpy(dtype=np.int64),
        "gpu_ns": replayed["duration_ns"].to_numpy(dtype=np.int64),
        "nodes": np.zeros(n, dtype=np.int64),
        "stack_id": stack,
        "launch_stack_id": launch_stack,
    })


def _user_frames(stacks: pd.DataFrame | None, stack_ids: np.ndarray) -> pd.DataFrame:
    """``file``, ``line``, ``function`` for each of ``stack_ids``: the stack's innermost frame of
    the user's code, else its innermost source frame (module frames and frames without a file
    or line are not source lines)."""
    n = len(stack_ids)
    out = pd.DataFrame({"file": np.full(n, "", dtype=object), "line": np.zeros(n, np.int64),
                        "function": np.full(n, "", dtype=object)})
    if stacks is None or not len(stacks) or not n:
        return out
    wanted = np.unique(stack_ids[stack_ids >= 0])
    s = stacks[stacks["stack_id"].isin(wanted)]
    names = s["filename"].astype(str)
    s = s[(names != MODULE_FILE) & (names != "") & (s["line"].to_numpy() > 0)]
    if not len(s):
        return out
    files = s["filename"].astype(str)
    user = files.map({f: not is_library_file(f) for f in files.unique()}).to_numpy(dtype=bool)
    rank = user.astype(np.int64) * (1 << 32) + s["depth"].to_numpy(dtype=np.int64)
    order = np.lexsort((rank, s["stack_id"].to_numpy(dtype=np.int64)))
    best = s.iloc[order].drop_duplicates("stack_id", keep="last")
    ids = best["stack_id"].to_numpy(dtype=np.int64)
    pos = np.clip(np.searchsorted(ids, stack_ids), 0, max(len(ids) - 1, 0))
    hit = (ids[pos] == stack_ids) & (stack_ids >= 0)
    out.loc[hit, "file"] = best["filename"].astype(str).to_numpy(object)[pos[hit]]
    out.loc[hit, "line"] = best["line"].to_numpy(dtype=np.int64)[pos[hit]]
    out.loc[hit, "function"] = best["function"].astype(str).to_numpy(object)[pos[hit]]
    return out


def _empty() -> pd.DataFrame:
    text = ("kind", "name", "file", "function")
    return pd.DataFrame({c: pd.Series([], dtype=object if c in text else "int64")
                         for c in GRAPH_COLUMNS})
