"""From the native session's columns to the Trace's tables.

The native side hands over one NumPy array per CUPTI field; here they become the tables of
``hookmagic.trace.schema``: enumerations named, strings looked up, and the Python stack,
launching thread and user range of every record joined in by correlation id (work replayed
from a CUDA graph takes the stack of the line that captured its node: :class:`CaptureStacks`).
Vectorised throughout: a million kernels take well under a second.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from hookmagic.trace.correlation import CorrelationIndex
from hookmagic.trace.schema import conform

Columns = dict[str, np.ndarray]


def _take_text(texts: Sequence[str], codes: np.ndarray) -> Any:
    """``texts[codes]`` as a column of pandas' own string dtype, each distinct text converted
    once (converting a text per row costs ~0.2 µs each, which a capture of thousands of
    kernels pays in full). ``codes`` must index ``texts``."""
    codes = np.asarray(codes, dtype=np.intp)
    if codes.size == 0:
        return np.zeros(0, dtype=object)
    return _text_array(tuple(texts)).take(codes)


#: the dtype pandas gives a column of text it infers by itself (conform leaves text so)
_STRING = pd.Series(["text"]).dtype


@functools.lru_cache(maxsize=32)
def _text_array(texts: tuple[str, ...]) -> Any:
    """``texts`` converted to pandas' string dtype (kept: enumerations' names recur)."""
    return pd.array(list(texts), dtype=_STRING)


def _names(codes: np.ndarray, names: Sequence[str]) -> Any:
    codes = np.asarray(codes).astype(np.int64)
    return _take_text(list(names) + ["unknown"],
                      np.where((codes >= 0) & (codes < len(names)), codes, len(names)))


def _timed(raw: Columns) -> dict[str, np.ndarray]:
    # copy=False: the hand-over's arrays are fresh and become the table's own; every copy of
    # a column of tens of thousands of rows is one more allocation the capture waits for
    start = raw["start_ns"].astype(np.int64, copy=False)
    end = raw["end_ns"].astype(np.int64, copy=False)
    return {"start_ns": start, "end_ns": end, "duration_ns": end - start}


#: clones of clones followed at most this deep (a graph cloned from an instantiated graph's
#: source, and so on); a longer chain, or a cycle in damaged input, ends the walk unresolved
MAX_CLONE_DEPTH = 32


class CaptureStacks:
    """The stack of the line that captured each CUDA-graph node.

    Built from the graph-node callbacks' rows (``hookmagic._native.take()["graph_nodes"]``):
    a created node's row holds the stack of the thread that made it (under stream capture, the
    line whose launch, copy or memset became the node); a cloned node's row names the node it
    copies. Graph launches replay instantiated nodes, which are clones, so a replayed record's
    node is followed back through its clones to the node that was created, and takes that
    node's stack. Rows absent (``None``), or a node whose creation the capture did not see (the
    graph was captured before it started), resolve to -1.
    """

    def __init__(self, rows: Columns | None) -> None:
        self.nodes = np.zeros(0, dtype=np.int64)   # distinct node ids, ascending
        self.stack = np.zeros(0, dtype=np.int64)   # the capture stack of each, -1 if unknown
        if rows is None or not len(rows.get("node", ())):
            return
        node = np.asarray(rows["node"]).astype(np.int64)
        original = np.asarray(rows["original"]).astype(np.int64)
        stack = np.asarray(rows["stack_id"]).astype(np.int64)
        cloned = original != 0
        clone_of = dict(zip(node[cloned].tolist(), original[cloned].tolist()))
        created: dict[int, int] = {}
        for n, s in zip(node[~cloned].tolist(), stack[~cloned].tolist()):
            created.setdefault(n, s)
        self.nodes = np.unique(node)
        resolved = []
        for n in self.nodes.tolist():
            # a clone's own "created" row (made inside the instantiation) never counts: its
            # original's does
            for _ in range(MAX_CLONE_DEPTH):
                if n not in clone_of:
                    break
                n = clone_of[n]
            resolved.append(-1 if n in clone_of else created.get(n, -1))
        self.stack = np.asarray(resolved, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.nodes.size)

    def of(self, graph_node: np.ndarray) -> np.ndarray:
        """The capture stack of each node id in ``graph_node`` (-1: none known, or 0: not a
        graph node)."""
        query = np.asarray(graph_node).astype(np.int64)
        if self.nodes.size == 0 or query.size == 0:
            return np.full(query.shape, -1, dtype=np.int64)
        pos = np.clip(np.searchsorted(self.nodes, query), 0, self.nodes.size - 1)
        hit = (self.nodes[pos] == query) & (query != 0)
        return np.where(hit, self.stack[pos], -1)


def uncaptured_graph_notes(kernels: pd.DataFrame | None) -> list[str]:
    """One line saying how many kernels replayed from CUDA graphs could not be given the line
    that captured their node (their stack is the graph launch's: the capture did not see the
    graph being captured), for the trace's warnings; none when there are no such kernels."""
    if kernels is None or not len(kernels) or "launch_stack_id" not in kernels:
        return []
    replayed = kernels["graph_id"].to_numpy() != 0
    unknown = int((replayed & (kernels["stack_id"].to_numpy()
                               == kernels["launch_stack_id"].to_numpy())).sum())
    if not unknown:
        return []
    return [f"{unknown:,} of {int(replayed.sum()):,} kernels replayed from CUDA graphs are shown "
            "on the line that launched their graph: the graph was captured before this capture "
            "started. Capture the graph inside it to see the line that captured each node."]


def _attribution(raw: Columns, launches: CorrelationIndex, captured: CaptureStacks) -> dict:
    """Thread, stacks and range of each record from its launch; a record replayed from a CUDA
    graph takes as ``stack_id`` the stack that captured its node, where known."""
    corr = raw["correlation"]
    pos = launches.positions(corr)
    launch_stack = launches.at("stack_id", pos, -1)
    capture_stack = captured.of(raw["graph_node"])
    return {
        "correlation": corr.astype(np.int64),
        "thread": launches.at("thread", pos, -1),
        "stack_id": (np.where(capture_stack >= 0, capture_stack, launch_stack) if len(captured)
                     else launch_stack.copy()),
        "range_id": launches.at("range_id", pos, -1),
        "launch_stack_id": launch_stack,
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
    All at once; :func:`table_builders` makes each table only when it is asked for.
    """
    return build_tables_from(table_builders(raw, enums, range_rows, samples, callback_name))


def build_tables_from(builders: dict[str, Callable[[], Any]]) -> dict[str, pd.DataFrame]:
    """Each table of :func:`table_builders`, built and conformed to the schema; tables
    without rows are left out (a Trace makes empty ones when they are asked for)."""
    tables = {name: build() for name, build in builders.items()}
    return {name: conform(name, t) for name, t in tables.items()
            if t is not None and _rows(t) > 0}


def table_builders(
    raw: dict,
    enums: dict,
    range_rows: pd.DataFrame,
    samples: Columns,
    callback_name: Callable[[int, int], str | None],
) -> dict[str, Callable[[], Any]]:
    """What :func:`build_tables` makes, one function per table: each returns that table's
    columns (a mapping of arrays, a DataFrame, or None for no rows), built when it is first
    called and kept. A live capture hands these to its Trace, which calls each only when the
    table is first read: a capture whose tables are never all read does not pay for them."""
    strings = list(raw["strings"]) + [""]

    def text(codes: np.ndarray) -> Any:
        codes = np.asarray(codes).astype(np.int64)
        return _take_text(strings, np.where((codes >= 0) & (codes < len(strings) - 1), codes,
                                            len(strings) - 1))

    @functools.cache
    def launches() -> CorrelationIndex:
        launch = raw["launches"]
        return CorrelationIndex(launch["correlation"], keep="last",
                                thread=launch["thread"].astype(np.int64, copy=False),
                                stack_id=launch["stack_id"].astype(np.int64, copy=False),
                                range_id=launch["range_id"].astype(np.int64, copy=False))

    @functools.cache
    def captured() -> CaptureStacks:
        # the test extension's decoder hands over no callback tables beyond "launches"
        return CaptureStacks(raw.get("graph_nodes"))

    @functools.cache
    def kernels() -> dict:
        k = raw["kernels"]
        return {**_timed(k), "device": k["device"], "context": k["context"],
                "stream": k["stream"], "name": text(k["name"]),
                **{c: k[c] for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y",
                                     "block_z", "registers", "static_smem", "dynamic_smem",
                                     "local_mem", "graph_id")},
                "graph_node": k["graph_node"].astype(np.int64),
                **_attribution(k, launches(), captured())}

    @functools.cache
    def memcpy() -> dict | None:
        c = raw["memcpy"]
        if not len(c["start_ns"]):
            return None
        return {**_timed(c), "device": c["device"], "context": c["context"],
                "stream": c["stream"], "bytes": c["bytes"],
                "kind": _names(c["kind"], enums["memcpy_kind"]),
                "src_kind": _names(c["src_kind"], enums["memory_kind"]),
                "dst_kind": _names(c["dst_kind"], enums["memory_kind"]),
                "graph_id": c["graph_id"], "graph_node": c["graph_node"].astype(np.int64),
                **_attribution(c, launches(), captured())}

    @functools.cache
    def memset() -> dict | None:
        s = raw["memset"]
        if not len(s["start_ns"]):
            return None
        return {**_timed(s), "device": s["device"], "context": s["context"],
                "stream": s["stream"], "bytes": s["bytes"], "value": s["value"],
                "memory_kind": _names(s["memory_kind"], enums["memory_kind"]),
                "graph_id": s["graph_id"], "graph_node": s["graph_node"].astype(np.int64),
                **_attribution(s, launches(), captured())}

    @functools.cache
    def memory() -> dict | None:
        return _memory_table(raw["memory"], raw["vmm"], enums, launches(), raw["kernels"])

    @functools.cache
    def sync() -> dict | None:
        y = raw["sync"]
        if not len(y["start_ns"]):
            return None
        api_raw = raw["api"]
        api_threads = CorrelationIndex(api_raw["correlation"], keep="last",
                                       thread=api_raw["thread"].astype(np.int64, copy=False))
        sync_thread = launches().get("thread", y["correlation"], -1)
        from_api = api_threads.get("thread", y["correlation"], -1)
        return {**_timed(y), "type": _names(y["type"], enums["sync_type"]),
                "context": y["context"], "stream": y["stream"], "event": y["event"],
                "correlation": y["correlation"],
                "thread": np.where(sync_thread >= 0, sync_thread, from_api)}

    @functools.cache
    def api() -> pd.DataFrame | None:
        api_raw = raw["api"]
        return _api_table(api_raw, callback_name) if len(api_raw["start_ns"]) else None

    @functools.cache
    def ranges() -> pd.DataFrame:
        return _ranges_table(range_rows, raw["markers"], enums, np.asarray(strings, dtype=object))

    @functools.cache
    def stacks() -> Any:
        return stack_columns(raw["stacks"])

    return {name: _none_if_empty(build) for name, build in (
        ("kernels", kernels), ("memcpy", memcpy), ("memset", memset), ("memory", memory),
        ("sync", sync), ("api", api), ("ranges", ranges), ("stacks", stacks),
        ("samples", lambda: samples))}


def _none_if_empty(build: Callable[[], Any]) -> Callable[[], Any]:
    """``build``, returning None for a table without rows (a Trace's empty table costs less
    than conforming one)."""
    def built() -> Any:
        table = build()
        return table if table is not None and _rows(table) > 0 else None
    return built


def stack_columns(stacks: Columns) -> Columns:
    """The ``stacks`` table's columns from the native hand-over: ``filename`` and ``function``
    come as codes into ``text`` (each distinct text once), or, from older hand-overs and
    tests, as lists of texts."""
    if "text" not in stacks:
        return stacks
    texts = list(stacks["text"])
    return {"stack_id": stacks["stack_id"], "depth": stacks["depth"],
            "filename": _take_text(texts, stacks["filename"]),
            "function": _take_text(texts, stacks["function"]), "line": stacks["line"]}


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
        "time_ns": m["time_ns"].astype(np.int64, copy=False), "op": _names(m["op"], enums["memory_op"]),
        "address": m["address"], "bytes": m["bytes"],
        "memory_kind": _names(m["memory_kind"], enums["memory_kind"]),
        "device": m["device"], "context": m["context"], "stream": m["stream"],
        "correlation": m["correlation"].astype(np.int64), "is_async": m["is_async"].astype(bool),
        "source": _take_text(["cupti"], np.zeros(n_cupti, dtype=np.intp)),
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
            "time_ns": vmm["time_ns"].astype(np.int64, copy=False), "op": _names(vmm["op"], enums["vmm_op"]),
            "address": vmm["address"], "bytes": vmm["bytes"],
            "memory_kind": _take_text(["device"], np.zeros(n_vmm, dtype=np.intp)),
            "device": np.array([context_device.get(c, -1) for c in vmm["context"].tolist()],
                               dtype=np.int32),
            "context": vmm["context"], "stream": np.zeros(n_vmm, dtype=np.int64),
            "correlation": vmm["correlation"].astype(np.int64),
            "is_async": np.zeros(n_vmm, dtype=bool),
            "source": _take_text(["vmm"], np.zeros(n_vmm, dtype=np.intp)),
            "thread": vmm["thread"], "stack_id": vmm["stack_id"].astype(np.int64),
        }
        parts = [cupti, mapped] if n_cupti else [mapped]
    cols = {k: _joined([p[k] for p in parts]) for k in cupti}
    order = np.argsort(cols["time_ns"], kind="stable")
    return {k: v.take(order) for k, v in cols.items()}


def _joined(parts: list) -> Any:
    """One column from its parts (NumPy arrays, or text columns of pandas' string dtype)."""
    if len(parts) == 1:
        return parts[0]
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts)
    return pd.concat([pd.Series(p) for p in parts], ignore_index=True).array


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
