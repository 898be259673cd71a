"""Fragmentation of a caching allocator's memory, over time and at a moment — pure functions.

Definitions (per segment and overall):

- *free* bytes: reserved but not in an allocated block (cached, "reserved-but-unallocated");
- *largest free block*: the longest run of free bytes inside one segment (free runs never span
  two segments: an allocator cannot hand out memory across a ``cudaMalloc`` boundary; in an
  expandable segment, consecutive mapped pages do form one run);
- *external fragmentation* = 1 - largest free block / total free (0 when nothing is free): 0
  means all free memory is one usable block, near 1 means it is scattered in crumbs;
- *internal waste* = allocated - requested: bytes lost to the allocator's size rounding.

Over time the largest free block is kept by a segment tree over the compressed address space
(assign "unreserved / free / allocated" to a range, read the longest free run), O(log n) per
event, compiled with numba.
"""
from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import pandas as pd

from hookmagic.analysis.memory import (
    alive_at, block_lifetimes, byte_deltas, end_action, events_of,
)
from hookmagic.common.format import iec_bytes
from hookmagic.memory import torch_rules as R

_UNRESERVED, _FREE, _ALLOCATED = 0, 1, 2


# -- the segment tree ----------------------------------------------------------------------------
@numba.njit(cache=True)
def _put(node, state, length, full, pre, suf, best, fsum, lazy):
    if state == _FREE:
        full[node] = 1
        v = length[node]
    else:
        full[node] = 0
        v = 0
    pre[node] = v
    suf[node] = v
    best[node] = v
    fsum[node] = v
    lazy[node] = state


@numba.njit(cache=True)
def _pull(node, full, pre, suf, best, fsum):
    left = 2 * node
    right = left + 1
    full[node] = full[left] & full[right]
    pre[node] = pre[left] + pre[right] if full[left] else pre[left]
    suf[node] = suf[right] + suf[left] if full[right] else suf[right]
    b = max(best[left], best[right])
    best[node] = max(b, suf[left] + pre[right])
    fsum[node] = fsum[left] + fsum[right]


@numba.njit(cache=True)
def _assign(lo, hi, state, size, length, full, pre, suf, best, fsum, lazy, stack):
    """Assign ``state`` to leaves [lo, hi). Iterative (an explicit stack) because numba's
    cached recursive functions can crash when loaded from the cache."""
    top = 0
    stack[0, 0], stack[0, 1], stack[0, 2], stack[0, 3] = 1, 0, size, 0
    top = 1
    while top > 0:
        top -= 1
        node, nl, nr, phase = stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3]
        if phase == 1:
            _pull(node, full, pre, suf, best, fsum)
            continue
        if hi <= nl or nr <= lo:
            continue
        if lo <= nl and nr <= hi:
            _put(node, state, length, full, pre, suf, best, fsum, lazy)
            continue
        left = 2 * node
        if lazy[node] >= 0:
            _put(left, lazy[node], length, full, pre, suf, best, fsum, lazy)
            _put(left + 1, lazy[node], length, full, pre, suf, best, fsum, lazy)
            lazy[node] = -1
        mid = (nl + nr) // 2
        stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3] = node, nl, nr, 1
        stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2], stack[top + 1, 3] = \
            left, nl, mid, 0
        stack[top + 2, 0], stack[top + 2, 1], stack[top + 2, 2], stack[top + 2, 3] = \
            left + 1, mid, nr, 0
        top += 3


@numba.njit(cache=True)
def _sweep(leaf_len, lo, hi, state):
    """Largest free run and total free bytes after each range assignment."""
    n = leaf_len.shape[0]
    size = 1
    while size < max(n, 1):
        size *= 2
    length = np.zeros(2 * size, dtype=np.int64)
    length[size:size + n] = leaf_len
    for node in range(size - 1, 0, -1):
        length[node] = length[2 * node] + length[2 * node + 1]
    full = np.zeros(2 * size, dtype=np.int8)
    pre = np.zeros(2 * size, dtype=np.int64)
    suf = np.zeros(2 * size, dtype=np.int64)
    best = np.zeros(2 * size, dtype=np.int64)
    fsum = np.zeros(2 * size, dtype=np.int64)
    lazy = np.full(2 * size, -1, dtype=np.int8)
    stack = np.zeros((256, 4), dtype=np.int64)   # 3 entries per level, < 64 levels
    m = lo.shape[0]
    out_best = np.zeros(m, dtype=np.int64)
    out_free = np.zeros(m, dtype=np.int64)
    for k in range(m):
        if state[k] >= 0 and hi[k] > lo[k]:
            _assign(lo[k], hi[k], state[k], size, length, full, pre, suf, best, fsum, lazy,
                    stack)
        out_best[k] = best[1]
        out_free[k] = fsum[1]
    return out_best, out_free


def _range_ops(events: pd.DataFrame):
    """Each event as "assign state to elementary range [lo, hi)" over a compressed address
    axis; zero-length walls at segment boundaries keep neighbouring segments' runs apart."""
    act = events["action"].to_numpy()
    addr = events["address"].to_numpy().astype(np.int64)
    size = events["size"].to_numpy().astype(np.int64)
    seg = events["segment"].to_numpy().astype(np.int64)
    endname = end_action(events)
    state = np.full(len(act), -1, dtype=np.int8)
    state[(act == "segment_alloc") | (act == "segment_map")] = _FREE
    state[(act == "segment_free") | (act == "segment_unmap")] = _UNRESERVED
    state[act == "alloc"] = _ALLOCATED
    state[act == endname] = _FREE
    active = state >= 0
    start, stop = addr[active], addr[active] + size[active]
    is_seg = (act == "segment_alloc") | (act == "segment_free")
    walls = np.concatenate([addr[is_seg], addr[is_seg] + size[is_seg],
                            seg[(act == "segment_map") & (seg > 0)]])
    # key = 2*address + kind: a wall (kind 0) sorts before the interval starting there (kind 1)
    points = np.unique(np.concatenate([start, stop]))
    keys = np.unique(np.concatenate([2 * points + 1, 2 * np.unique(walls)]))
    addr_of = keys >> 1
    is_wall = (keys & 1) == 0
    nxt = np.searchsorted(points, addr_of, side="right")
    nxt_addr = np.where(nxt < len(points), points[np.minimum(nxt, len(points) - 1)], addr_of)
    leaf_len = np.where(is_wall, 0, nxt_addr - addr_of).astype(np.int64)
    lo = np.zeros(len(act), dtype=np.int64)
    hi = np.zeros(len(act), dtype=np.int64)
    lo[active] = np.searchsorted(keys, 2 * start + 1)
    hi[active] = np.searchsorted(keys, 2 * stop)
    return leaf_len, lo, hi, state


def fragmentation_over_time(trace) -> pd.DataFrame:
    """Fragmentation after every allocator event (``Trace.fragmentation()``).

    Columns: ``index``, ``time_ns``, ``reserved``, ``allocated``, ``requested``, ``free``
    (reserved - allocated), ``largest_free``, ``external`` (1 - largest_free / free),
    ``internal_waste`` (allocated - requested), ``internal`` (internal_waste / allocated).
    Accepts a Trace or an allocator-event DataFrame.
    """
    ev = events_of(trace)
    d_res, d_alloc, d_req = byte_deltas(ev)
    reserved, allocated, requested = np.cumsum(d_res), np.cumsum(d_alloc), np.cumsum(d_req)
    if len(ev):
        leaf_len, lo, hi, state = _range_ops(ev)
        largest, free_tree = _sweep(leaf_len, lo, hi, state)
    else:
        largest = free_tree = np.zeros(0, dtype=np.int64)
    free = reserved - allocated
    with np.errstate(divide="ignore", invalid="ignore"):
        external = np.where(free_tree > 0, 1.0 - largest / np.maximum(free_tree, 1), 0.0)
        internal = np.where(allocated > 0, (allocated - requested) / np.maximum(allocated, 1),
                            0.0)
    return pd.DataFrame({
        "index": np.arange(len(ev)), "time_ns": ev["time_ns"].to_numpy(),
        "reserved": reserved, "allocated": allocated, "requested": requested,
        "free": free, "largest_free": largest, "external": external,
        "internal_waste": allocated - requested, "internal": internal,
    })


# -- the state at one moment -------------------------------------------------------------------
def reserved_ranges_at(events: pd.DataFrame, index: int) -> pd.DataFrame:
    """Reserved address ranges just after event ``index``: segment, start, end, pool, stream,
    expandable. Adjacent mapped pages of one expandable segment form one range."""
    sub = events.iloc[: index + 1]
    act = sub["action"].to_numpy()
    rows = []
    # whole segments: pair each segment_alloc with a later segment_free at the same address
    sel = np.flatnonzero((act == "segment_alloc") | (act == "segment_free"))
    if len(sel):
        addr = sub["address"].to_numpy()[sel]
        order = np.lexsort((sel, addr))
        s_sel, s_addr = sel[order], addr[order]
        s_alloc = act[s_sel] == "segment_alloc"
        closed = np.zeros(len(order), dtype=bool)
        closed[:-1] = (s_addr[1:] == s_addr[:-1]) & ~s_alloc[1:]
        live = s_sel[s_alloc & ~closed]
        seg = sub.iloc[np.sort(live)]
        rows.append(pd.DataFrame({
            "segment": seg["address"].to_numpy(), "start": seg["address"].to_numpy(),
            "end": seg["address"].to_numpy() + seg["size"].to_numpy().astype(np.uint64),
            "pool": seg["pool"].to_numpy(), "stream": seg["stream"].to_numpy(),
            "expandable": False}))
    # expandable segments: replay map/unmap as interval arithmetic (they are few)
    msel = np.flatnonzero((act == "segment_map") | (act == "segment_unmap"))
    if len(msel):
        mapped: dict[int, list[list[int]]] = {}
        info: dict[int, tuple[str, int]] = {}
        a = sub["address"].to_numpy()
        s = sub["size"].to_numpy()
        g = sub["segment"].to_numpy()
        p = sub["pool"].to_numpy()
        st = sub["stream"].to_numpy()
        for i in msel:
            key = int(g[i])
            info.setdefault(key, (p[i], int(st[i])))
            lo, hi = int(a[i]), int(a[i]) + int(s[i])
            ivs = mapped.setdefault(key, [])
            if act[i] == "segment_map":
                ivs.append([lo, hi])
            else:
                cut = []
                for x, y in ivs:
                    if y <= lo or x >= hi:
                        cut.append([x, y])
                    else:
                        if x < lo:
                            cut.append([x, lo])
                        if y > hi:
                            cut.append([hi, y])
                mapped[key] = cut
        out = []
        for key, ivs in mapped.items():
            for x, y in _merge_intervals(ivs):
                out.append((key, x, y, info[key][0], info[key][1], True))
        if out:
            rows.append(pd.DataFrame(out, columns=["segment", "start", "end", "pool", "stream",
                                                   "expandable"]))
    if not rows:
        return pd.DataFrame({"segment": pd.Series(dtype="uint64"),
                             "start": pd.Series(dtype="uint64"),
                             "end": pd.Series(dtype="uint64"), "pool": pd.Series(dtype=str),
                             "stream": pd.Series(dtype="int64"),
                             "expandable": pd.Series(dtype=bool)})
    res = pd.concat(rows, ignore_index=True)
    res = res.astype({"segment": "uint64", "start": "uint64", "end": "uint64"})
    return res.sort_values("start", kind="stable").reset_index(drop=True)


def _merge_intervals(ivs: list[list[int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for x, y in sorted(ivs):
        if out and x <= out[-1][1]:
            out[-1][1] = max(out[-1][1], y)
        else:
            out.append([x, y])
    return [(x, y) for x, y in out]


def _gaps(ranges: pd.DataFrame, blocks: pd.DataFrame) -> pd.DataFrame:
    """Free runs: reserved ranges minus allocated blocks (vectorised, no per-segment loop)."""
    rs = ranges["start"].to_numpy().astype(np.int64)
    re_ = ranges["end"].to_numpy().astype(np.int64)
    bs = blocks["address"].to_numpy().astype(np.int64)
    be = bs + blocks["size"].to_numpy().astype(np.int64)
    # blocks outside every reserved range (inconsistent sources) are ignored
    rb = np.searchsorted(rs, bs, side="right") - 1
    inb = (rb >= 0) & (be <= re_[np.maximum(rb, 0)])
    bs, be, rb = bs[inb], be[inb], rb[inb]
    nr = np.arange(len(rs))
    # a run starts at a range start or a block end and stops at the next block start or range
    # end *of the same range*: key = range * 2**41 + offset keeps ranges apart even where two
    # segments touch in address space
    shift = np.int64(1) << 41
    s_key = np.concatenate([nr * shift, rb * shift + (be - rs[rb])])
    e_key = np.sort(np.concatenate([nr * shift + (re_ - rs), rb * shift + (bs - rs[rb])]))
    j = np.searchsorted(e_key, s_key, side="left")
    ok = j < len(e_key)
    s_key, stop_key = s_key[ok], e_key[j[ok]]
    keep = stop_key > s_key
    s_key, stop_key = s_key[keep], stop_key[keep]
    r = s_key // shift
    starts = rs[r] + (s_key - r * shift)
    stop = rs[r] + (stop_key - r * shift)
    whole = (starts == rs[r]) & (stop == re_[r]) & ~ranges["expandable"].to_numpy()[r]
    return pd.DataFrame({
        "address": starts.astype(np.uint64), "size": stop - starts,
        "segment": ranges["segment"].to_numpy()[r], "pool": ranges["pool"].to_numpy()[r],
        "stream": ranges["stream"].to_numpy()[r], "whole_segment": whole,
    }).sort_values("address", kind="stable").reset_index(drop=True)


def free_blocks_at(events: pd.DataFrame, index: int,
                   lifetimes: pd.DataFrame | None = None) -> pd.DataFrame:
    """Free runs just after event ``index``: address, size, segment, pool, stream,
    whole_segment (the run is an entire cached segment, releasable to the device)."""
    if index < 0 or len(events) == 0:
        return _gaps(reserved_ranges_at(events, -1), events.iloc[:0].assign())
    life = lifetimes if lifetimes is not None else block_lifetimes(events)
    blocks = alive_at(life, index).sort_values("address")
    return _gaps(reserved_ranges_at(events, index), blocks)


def layout_at(events: pd.DataFrame, index: int,
              lifetimes: pd.DataFrame | None = None) -> pd.DataFrame:
    """Everything in reserved memory just after event ``index``, for the fragmentation map.

    One row per piece: ``kind`` allocated (the requested bytes of a block), slack (its rounding
    slack), or free; ``segment``, ``address``, ``size``, ``block_size``, ``requested_size``,
    ``stack_id``, ``t_alloc``. Pieces of an expandable segment share its ``segment``.
    """
    life = lifetimes if lifetimes is not None else block_lifetimes(events)
    blocks = alive_at(life, index).sort_values("address")
    ranges = reserved_ranges_at(events, index)
    free = _gaps(ranges, blocks)
    addr = blocks["address"].to_numpy()
    size = blocks["size"].to_numpy().astype(np.int64)
    req = np.minimum(blocks["requested_size"].to_numpy().astype(np.int64), size)
    # blocks whose segment the source did not name get the reserved range holding them
    seg = blocks["segment"].to_numpy().astype(np.uint64)
    if len(ranges) and (seg == 0).any():
        r = np.searchsorted(ranges["start"].to_numpy(), addr, side="right") - 1
        seg = np.where(seg == 0, ranges["segment"].to_numpy()[np.maximum(r, 0)], seg)
    common = {"segment": seg, "block_size": size, "requested_size": req,
              "stack_id": blocks["stack_id"].to_numpy(), "t_alloc": blocks["t_alloc"].to_numpy()}
    used = pd.DataFrame(common | {"kind": "allocated", "address": addr, "size": req})
    slack = pd.DataFrame(common | {"kind": "slack", "address": addr + req.astype(np.uint64),
                                   "size": size - req})
    slack = slack[slack["size"] > 0]
    gaps = pd.DataFrame({"segment": free["segment"].to_numpy(), "block_size": free["size"],
                         "requested_size": 0, "stack_id": -1, "t_alloc": -1, "kind": "free",
                         "address": free["address"].to_numpy(), "size": free["size"]})
    out = pd.concat([used, slack, gaps], ignore_index=True)
    out = out.astype({"segment": "uint64", "address": "uint64"})
    return out.sort_values(["segment", "address"], kind="stable").reset_index(drop=True)


def segment_fragmentation(trace, index: int | None = None) -> pd.DataFrame:
    """Per segment just after event ``index`` (default: the last event): reserved, allocated,
    requested, free, largest_free, external (1 - largest_free / free)."""
    ev = events_of(trace)
    index = len(ev) - 1 if index is None else index
    lay = layout_at(ev, index)
    ranges = reserved_ranges_at(ev, index)
    res = (ranges.assign(bytes=(ranges["end"] - ranges["start"]).astype(np.int64))
           .groupby("segment")["bytes"].sum())
    piv = lay.pivot_table(index="segment", columns="kind", values="size", aggfunc="sum",
                          fill_value=0)
    largest = lay[lay["kind"] == "free"].groupby("segment")["size"].max()
    out = pd.DataFrame({"reserved": res})
    for k in ("allocated", "slack", "free"):
        out[k] = piv[k] if k in piv else 0
    out = out.fillna(0).astype(np.int64)
    out["requested"] = out["allocated"]
    out["allocated"] = out["allocated"] + out["slack"]
    out["largest_free"] = largest.reindex(out.index).fillna(0).astype(np.int64)
    out["external"] = np.where(out["free"] > 0,
                               1.0 - out["largest_free"] / out["free"].clip(lower=1), 0.0)
    out = out.drop(columns="slack")
    return out.reset_index().rename(columns={"index": "segment"})


def map_steps(trace, steps: int = 30) -> tuple[np.ndarray, list[pd.DataFrame]]:
    """Event indices to show in the fragmentation map and the layout at each.

    ``steps`` moments spread evenly over the events, plus the moment of peak reserved memory
    (where fragmentation usually bites). Returns (indices, layouts).
    """
    ev = events_of(trace)
    n = len(ev)
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    d_res, _, _ = byte_deltas(ev)
    peak = int(np.argmax(np.cumsum(d_res)))
    idx = np.unique(np.concatenate([np.linspace(0, n - 1, max(steps, 1)).astype(np.int64),
                                    [peak]]))
    # plain object arrays: each layout reads the columns again, Arrow strings convert slowly
    ev = ev.assign(action=ev["action"].to_numpy(dtype=object),
                   pool=ev["pool"].to_numpy(dtype=object))
    life = block_lifetimes(ev)
    return idx, [layout_at(ev, int(i), life) for i in idx]


# -- would it fail? ----------------------------------------------------------------------------
@dataclass(frozen=True)
class WouldFail:
    """The answer to "would an allocation of N bytes fail at this moment?"."""

    fails: bool | None        # None: needs the device but its free memory is unknown
    block_bytes: int          # N after the allocator's rounding
    fits_in_cache: bool       # a cached free block is large enough (no device call needed)
    largest_free: int         # largest cached free block at that moment
    total_free: int           # all cached free bytes at that moment
    device_bytes: int         # what the allocator would ask the device for on a miss
    reason: str


def would_fail(data, n_bytes: int, at_ns: int | None = None, device_free: int | None = None,
               allocator: str = "pytorch") -> WouldFail:
    """Would an allocation of ``n_bytes`` fail at time ``at_ns`` (default: the end)?

    It succeeds from the cache when the largest free block fits the rounded size (``pytorch``
    rounding and pools, or exact 512 B rounding for ``cupy``/others). Otherwise it needs a new
    segment; with ``device_free`` (bytes the device had free, e.g. from NVML samples) the
    answer is definite: it fails when the segment exceeds device free memory plus what the
    allocator could release (whole cached segments).
    """
    ev = events_of(data)
    t = ev["time_ns"].to_numpy()
    index = len(ev) - 1 if at_ns is None else int(np.searchsorted(t, at_ns, side="right")) - 1
    free = free_blocks_at(ev, index)
    if allocator == "pytorch":
        block = R.round_size(n_bytes)
        small = R.is_small(block)
        pool_ok = free["pool"].to_numpy() == ("small" if small else "large") \
            if len(free) and (free["pool"] != "").any() else np.ones(len(free), bool)
        cand = free.loc[pool_ok]
        seg_bytes = R.allocation_size(block)
    else:
        block = max(512, (n_bytes + 511) // 512 * 512)
        cand, seg_bytes = free, block
    largest = int(cand["size"].max()) if len(cand) else 0
    total = int(free["size"].sum()) if len(free) else 0
    if largest >= block:
        return WouldFail(False, block, True, largest, total, 0,
                         f"fits in a cached free block of {_b(largest)}")
    if device_free is None:
        return WouldFail(None, block, False, largest, total, seg_bytes,
                         f"no cached block fits: needs a new {_b(seg_bytes)} segment; "
                         "device free memory unknown")
    releasable = int(free.loc[free["whole_segment"], "size"].sum()) if len(free) else 0
    fails = seg_bytes > device_free + releasable
    why = (f"needs a {_b(seg_bytes)} segment; device has {_b(device_free)} free"
           f" + {_b(releasable)} releasable from the cache")
    frag = f" although {_b(total)} are free in the cache (largest block {_b(largest)})" \
        if fails and total >= block else ""
    return WouldFail(fails, block, False, largest, total, seg_bytes, why + frag)


def _b(n: int) -> str:
    """Bytes as people read them in a sentence: 2 MiB, 118.2 MiB, 512 B."""
    return iec_bytes(n, ".4g")
