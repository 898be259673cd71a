"""Memory over time, peak attribution, leaks and "would it fail?" — pure functions.

Inputs are an allocator-event table (``allocator_events`` of :mod:`hookmagic.trace.schema`)
and, for stack labels, a ``stacks`` table. Any function also accepts a ``Trace``: its ``allocator_events`` table is used,
or, when the trace has none, its driver-level ``memory`` table read as one segment per
``cudaMalloc`` (see :func:`events_of`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from hookmagic.trace import schema

_ALIVE = np.iinfo(np.int64).max
#: stack frames inside these paths are plumbing, not the user's line
_PLUMBING = ("/torch/", "/cupy/", "/cupyx/", "/hookmagic/", "/site-packages/", "<frozen")


def events_of(data) -> pd.DataFrame:
    """The allocator-event table of ``data`` (a DataFrame, or a Trace-like object)."""
    if isinstance(data, pd.DataFrame):
        return data
    ev = getattr(data, "allocator_events", None)
    if ev is None:
        tables = getattr(data, "tables", None) or {}
        ev = tables.get("allocator_events")
    if ev is not None and len(ev):
        return ev
    mem = getattr(data, "memory", None)
    if mem is None:
        mem = (getattr(data, "tables", None) or {}).get("memory")
    if mem is None:
        return schema.empty_table("allocator_events")
    return events_from_memory_table(mem)


def stacks_of(data) -> pd.DataFrame:
    """The ``stacks`` table of a Trace-like object (empty for a bare DataFrame)."""
    st = getattr(data, "stacks", None)
    if st is None:
        st = (getattr(data, "tables", None) or {}).get("stacks")
    return st if st is not None else schema.empty_table("stacks")


def events_from_memory_table(memory: pd.DataFrame) -> pd.DataFrame:
    """Driver-level ``memory`` rows as allocator events.

    Each driver allocation is a segment wholly handed out as one block (so the driver view has
    reserved = allocated and no fragmentation inside a segment; fragmentation across segments
    is the allocator's business). ``map``/``unmap`` become segment maps.
    """
    if memory is None or len(memory) == 0:
        return schema.empty_table("allocator_events")
    m = memory.sort_values("time_ns", kind="stable").reset_index(drop=True)
    op = m["op"].to_numpy()
    n = len(m)
    base = {"time_ns": m["time_ns"].to_numpy(), "address": m["address"].to_numpy(),
            "size": m["bytes"].to_numpy(), "segment": m["address"].to_numpy(),
            "stream": m["stream"].to_numpy(), "device": m["device"].to_numpy(),
            "stack_id": m["stack_id"].to_numpy(), "source": m["source"].to_numpy()}
    seg_action = np.select([op == "alloc", op == "free", op == "map", op == "unmap"],
                           ["segment_alloc", "segment_free", "segment_map", "segment_unmap"],
                           "")
    blk_action = np.select([op == "alloc", op == "free"], ["alloc", "free_completed"], "")
    # an alloc is its segment then its block; a free is its block then its segment
    seg = pd.DataFrame(base | {"action": seg_action,
                               "_k": np.arange(n) * 2 + (op == "free")})
    blk = pd.DataFrame(base | {"action": blk_action,
                               "_k": np.arange(n) * 2 + (op == "alloc")})
    out = pd.concat([seg, blk], ignore_index=True)
    out = out[out["action"] != ""].sort_values("_k", kind="stable")
    return schema.conform("allocator_events", out.drop(columns=["_k"]).reset_index(drop=True))


def end_action(events: pd.DataFrame) -> str:
    """The action that ends a block's life in this table (free_completed where present)."""
    return "free_completed" if (events["action"].to_numpy() == "free_completed").any() \
        else "free_requested"


# -- lifetimes ---------------------------------------------------------------------------------
def block_lifetimes(events: pd.DataFrame) -> pd.DataFrame:
    """One row per block: where, how big, which stack, and the event indices of its life.

    ``i_alloc``/``i_free`` are positions in ``events`` (``i_free`` = int64 max while alive at
    the end); ``t_alloc``/``t_free`` the matching times (``t_free`` = -1 while alive). Blocks
    freed but never allocated inside the recording are left out.
    """
    act = events["action"].to_numpy()
    endname = end_action(events)
    sel = np.flatnonzero((act == "alloc") | (act == endname))
    addr = events["address"].to_numpy()[sel]
    is_alloc = act[sel] == "alloc"
    order = np.lexsort((sel, addr))
    s_sel, s_addr, s_alloc = sel[order], addr[order], is_alloc[order]
    nxt_same = np.zeros(len(order), dtype=bool)
    nxt_same[:-1] = (s_addr[1:] == s_addr[:-1]) & ~s_alloc[1:]
    a_pos = np.flatnonzero(s_alloc)
    i_alloc = s_sel[a_pos]
    freed = nxt_same[a_pos]
    i_free = np.full(len(a_pos), _ALIVE, dtype=np.int64)
    i_free[freed] = s_sel[a_pos[freed] + 1]
    back = np.argsort(i_alloc, kind="stable")
    i_alloc, i_free = i_alloc[back], i_free[back]
    t = events["time_ns"].to_numpy()
    rows = events.iloc[i_alloc]
    out = pd.DataFrame({
        "address": rows["address"].to_numpy(), "size": rows["size"].to_numpy(),
        "requested_size": rows["requested_size"].to_numpy(),
        "segment": rows["segment"].to_numpy(), "stream": rows["stream"].to_numpy(),
        "pool": rows["pool"].to_numpy(), "stack_id": rows["stack_id"].to_numpy(),
        "i_alloc": i_alloc, "i_free": i_free, "t_alloc": t[i_alloc],
        "t_free": np.where(i_free == _ALIVE, -1, t[np.minimum(i_free, len(t) - 1)]),
    })
    return out


def alive_at(lifetimes: pd.DataFrame, index: int) -> pd.DataFrame:
    """Blocks alive just after event ``index``."""
    m = (lifetimes["i_alloc"].to_numpy() <= index) & (lifetimes["i_free"].to_numpy() > index)
    return lifetimes.loc[m]


# -- over time ---------------------------------------------------------------------------------
def byte_deltas(events: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-event change of reserved, allocated and requested bytes."""
    act = events["action"].to_numpy()
    size = events["size"].to_numpy().astype(np.int64)
    req = events["requested_size"].to_numpy().astype(np.int64)
    up = (act == "segment_alloc") | (act == "segment_map")
    down = (act == "segment_free") | (act == "segment_unmap")
    d_res = np.where(up, size, 0) - np.where(down, size, 0)
    a = act == "alloc"
    f = act == end_action(events)
    d_alloc = np.where(a, size, 0) - np.where(f, size, 0)
    d_req = np.where(a, req, 0) - np.where(f, req, 0)
    return d_res, d_alloc, d_req


def memory_over_time(data) -> pd.DataFrame:
    """Reserved, allocated and requested bytes after every event.

    ``reserved``: held from the device (segments, mapped pages); ``allocated``: in blocks handed
    to the program (rounded sizes); ``requested``: what the program asked for;
    ``unallocated`` = reserved - allocated (cached, reusable only if it fits);
    ``rounding`` = allocated - requested (internal waste). Columns also carry ``time_ns`` and
    the event ``index``.
    """
    ev = events_of(data)
    d_res, d_alloc, d_req = byte_deltas(ev)
    reserved, allocated, requested = np.cumsum(d_res), np.cumsum(d_alloc), np.cumsum(d_req)
    return pd.DataFrame({
        "index": np.arange(len(ev)), "time_ns": ev["time_ns"].to_numpy(),
        "reserved": reserved, "allocated": allocated, "requested": requested,
        "unallocated": reserved - allocated, "rounding": allocated - requested,
    })


def stack_labels(stacks: pd.DataFrame) -> pd.Series:
    """stack_id -> "file:line function" of the innermost frame outside library plumbing."""
    if stacks is None or len(stacks) == 0:
        return pd.Series(dtype=object)
    st = stacks.sort_values(["stack_id", "depth"])
    fn = st["filename"].astype(str)
    user = ~fn.str.contains("|".join(map(_regex_escape, _PLUMBING)), regex=True)
    label = (fn.str.rsplit("/", n=1).str[-1] + ":" + st["line"].astype(str) + " "
             + st["function"].astype(str))
    frame = pd.DataFrame({"stack_id": st["stack_id"].to_numpy(), "label": label.to_numpy(),
                          "user": user.to_numpy()})
    innermost = frame.groupby("stack_id")["label"].last()
    user_inner = frame[frame["user"]].groupby("stack_id")["label"].last()
    return user_inner.reindex(innermost.index).fillna(innermost)


def _regex_escape(s: str) -> str:
    import re
    return re.escape(s)


def _label_ids(stack_ids: np.ndarray, labels: pd.Series) -> np.ndarray:
    lab = pd.Series(stack_ids).map(labels)
    return lab.fillna("(no stack)").to_numpy(dtype=object)


def memory_by(data, stacks: pd.DataFrame | None = None, key: str = "stack",
              top: int = 8) -> pd.DataFrame:
    """Allocated bytes over time split by ``key``: stack (allocating line), pool, stream, source.

    The ``top`` categories with the highest individual peak get a column each; the rest are
    summed into "other". Rows match :func:`memory_over_time`'s (one per event).
    """
    ev = events_of(data)
    stacks = stacks if stacks is not None else stacks_of(data)
    life = block_lifetimes(ev)
    if key == "stack":
        cats = _label_ids(life["stack_id"].to_numpy(), stack_labels(stacks))
    else:
        cats = life[key].astype(str).to_numpy(dtype=object)
    codes, names = pd.factorize(cats)
    n = len(ev)
    size = life["size"].to_numpy().astype(np.int64)
    at = np.concatenate([life["i_alloc"].to_numpy(), np.minimum(life["i_free"].to_numpy(), n)])
    code2 = np.concatenate([codes, codes])
    delta = np.concatenate([size, -size])
    # each category's own peak: cumulative sums within the category, in event order
    order = np.lexsort((at, code2))
    run = np.cumsum(delta[order])
    first = np.flatnonzero(np.r_[True, code2[order][1:] != code2[order][:-1]]) \
        if len(order) else np.zeros(0, dtype=np.int64)
    base = np.repeat(np.r_[0, run][first], np.diff(np.r_[first, len(order)]))
    own = run - base
    peaks = np.maximum.reduceat(own, first) if len(first) else np.zeros(0, np.int64)
    cat_of_group = code2[order][first] if len(first) else np.zeros(0, np.int64)
    ranked = cat_of_group[np.argsort(-peaks, kind="stable")]

    def curve(mask: np.ndarray) -> np.ndarray:
        w = np.bincount(at[mask], delta[mask].astype(np.float64), minlength=n + 1)
        return np.cumsum(w[:n]).astype(np.int64)

    out = {"time_ns": ev["time_ns"].to_numpy()}
    shown = np.zeros(n, dtype=np.int64)
    for c in ranked[:top]:
        out[str(names[c])] = curve(code2 == c)
        shown += out[str(names[c])]
    if len(ranked) > top:
        out["other"] = curve(np.ones(len(at), dtype=bool)) - shown
    return pd.DataFrame(out)


# -- peak, leaks -------------------------------------------------------------------------------
def _group_by_stack(blocks: pd.DataFrame, stacks: pd.DataFrame) -> pd.DataFrame:
    labels = _label_ids(blocks["stack_id"].to_numpy(), stack_labels(stacks))
    g = pd.DataFrame({"stack": labels, "stack_id": blocks["stack_id"].to_numpy(),
                      "bytes": blocks["size"].to_numpy(),
                      "requested": blocks["requested_size"].to_numpy()})
    out = g.groupby("stack", sort=False).agg(
        bytes=("bytes", "sum"), requested=("requested", "sum"), blocks=("bytes", "size"),
        stack_id=("stack_id", "first")).reset_index()
    total = out["bytes"].sum()
    out["share"] = out["bytes"] / total if total else 0.0
    return out.sort_values("bytes", ascending=False, kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class PeakAttribution:
    """Who held memory at the allocated peak."""

    index: int            # event index of the peak
    time_ns: int
    allocated: int        # bytes in blocks at the peak
    reserved: int
    blocks: pd.DataFrame  # every block alive at the peak
    by_stack: pd.DataFrame  # blocks grouped by allocating line: bytes, requested, blocks, share


def peak_attribution(data, stacks: pd.DataFrame | None = None,
                     of: str = "allocated") -> PeakAttribution:
    """Which allocations, from which lines, were alive at the peak of ``of`` (allocated or
    reserved); the first moment of the peak is used."""
    ev = events_of(data)
    stacks = stacks if stacks is not None else stacks_of(data)
    mot = memory_over_time(ev)
    if len(mot) == 0:
        empty = block_lifetimes(ev)
        return PeakAttribution(-1, 0, 0, 0, empty, _group_by_stack(empty, stacks))
    i = int(np.argmax(mot[of].to_numpy()))
    blocks = alive_at(block_lifetimes(ev), i)
    return PeakAttribution(i, int(mot["time_ns"].iat[i]), int(mot["allocated"].iat[i]),
                           int(mot["reserved"].iat[i]), blocks.reset_index(drop=True),
                           _group_by_stack(blocks, stacks))


def leak_report(data, stacks: pd.DataFrame | None = None) -> pd.DataFrame:
    """Blocks still allocated at the end of the recording, grouped by allocating line."""
    ev = events_of(data)
    stacks = stacks if stacks is not None else stacks_of(data)
    life = block_lifetimes(ev)
    return _group_by_stack(life[life["i_free"] == _ALIVE], stacks)
