"""The flame tree of a trace: GPU work grouped by who launched it.

A path through the tree reads root (the cell or capture label) -> the Python frames that launched
the work, outermost caller first -> the user/NVTX ranges open at launch, outermost first -> the
kernel (or copy, or memset). Each node carries a weight summed over the events below it: GPU
time, launches, or bytes copied.

Everything here is vectorised over events: events are first grouped by (stack, range chain,
leaf), which leaves a few thousand groups even for millions of kernels, and the tree is then
built level by level by interning ``(parent node, token)`` pairs with ``pandas.factorize``. No
Python loop runs per event.

Pure functions: no plotting, no I/O, no globals.
"""
from __future__ import annotations

from typing import Any, Iterable, Literal

import numpy as np
import pandas as pd

Weight = Literal["time", "launches", "bytes"]
WEIGHTS: tuple[str, ...] = ("time", "launches", "bytes")

#: separates the tokens of a node's ``path`` (a character no file name or kernel name holds)
PATH_SEP = "\x1f"

NODE_COLUMNS = ["id", "parent", "label", "kind", "value", "self_value", "calls", "file_line",
                "share", "depth", "path"]


# -- small shared helpers (used by the other analyses too) ---------------------------------

def table(trace: Any, name: str) -> pd.DataFrame:
    """Table ``name`` of ``trace``, or an empty schema table when the trace lacks it."""
    frame = getattr(trace, name, None)
    if frame is None:
        from hookmagic.trace.schema import empty_table
        return empty_table(name)
    return frame


def _as_set(value: int | Iterable[int] | None) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, (int, np.integer)):
        return [int(value)]
    return [int(v) for v in value]


def event_mask(frame: pd.DataFrame, device: int | Iterable[int] | None = None,
               stream: int | Iterable[int] | None = None) -> np.ndarray:
    """Boolean mask of the rows of ``frame`` on ``device`` and ``stream`` (None: all)."""
    mask = np.ones(len(frame), dtype=bool)
    devices, streams = _as_set(device), _as_set(stream)
    if devices is not None and "device" in frame:
        mask &= np.isin(frame["device"].to_numpy(), devices)
    if streams is not None and "stream" in frame:
        mask &= np.isin(frame["stream"].to_numpy(), streams)
    return mask


def root_label(trace: Any) -> str:
    """The name of the tree's root: the capture's label, else ``"capture"``."""
    meta = getattr(trace, "meta", None) or {}
    return str(meta.get("label") or meta.get("cell_label") or "capture")


# -- events -> groups ------------------------------------------------------------------------

def _leaf_events(trace: Any, weight: str, device: Any, stream: Any
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str],
                            list[str]]:
    """Every weighted event as (stack_id, range_id, leaf code, weight) plus the leaf names/kinds.

    Leaves are kernel names, ``Memcpy HtoD``-style copy labels and ``Memset``.
    """
    stacks, ranges, codes, weights, counts = [], [], [], [], []
    labels: list[str] = []
    kinds: list[str] = []
    for name in ("kernels", "memcpy", "memset"):
        if weight == "bytes" and name != "memcpy":
            continue  # "bytes copied": kernels and memsets copy nothing
        frame = table(trace, name)
        if len(frame) == 0:
            continue
        mask = event_mask(frame, device, stream)
        if not mask.all():
            frame = frame[mask]
        if len(frame) == 0:
            continue
        if name == "kernels":
            leaf = frame["name"]
        elif name == "memcpy":
            leaf = "Memcpy " + frame["kind"].astype(str).map(_copy_kind_label)
        else:
            leaf = pd.Series(np.full(len(frame), "Memset", dtype=object), index=frame.index)
        code, uniques = pd.factorize(leaf, sort=False)
        codes.append(code.astype(np.int64) + len(labels))
        labels.extend(str(u) for u in uniques)
        kinds.extend([name.rstrip("s") if name == "kernels" else name] * len(uniques))
        if weight == "time":
            w = frame["duration_ns"].to_numpy(dtype=np.int64)
        elif weight == "bytes":
            w = frame["bytes"].to_numpy(dtype=np.int64)
        else:
            w = np.ones(len(frame), dtype=np.int64)
        weights.append(w)
        counts.append(len(frame))
        stacks.append(frame["stack_id"].to_numpy(dtype=np.int64))
        ranges.append(frame["range_id"].to_numpy(dtype=np.int64))
    if not codes:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty, empty, labels, kinds
    return (np.concatenate(stacks), np.concatenate(ranges), np.concatenate(codes),
            np.concatenate(weights), np.ones(sum(counts), dtype=np.int64), labels, kinds)


_COPY_LABELS = {"htod": "HtoD", "dtoh": "DtoH", "dtod": "DtoD", "htoh": "HtoH", "ptop": "PtoP",
                "atoh": "AtoH", "htoa": "HtoA", "atod": "AtoD", "dtoa": "DtoA", "atoa": "AtoA"}


def _copy_kind_label(kind: str) -> str:
    return _COPY_LABELS.get(kind, kind or "unknown")


# -- ragged token sequences -------------------------------------------------------------------

def _stack_tokens(stacks: pd.DataFrame, wanted: np.ndarray, frame_lines: bool
                  ) -> tuple[np.ndarray, np.ndarray, list[tuple[str, str]]]:
    """Frame tokens of each wanted stack, outermost first, as a padded matrix (-1 = none).

    Returns (matrix [len(wanted), max depth], lengths, token (label, file_line) list).
    """
    n = len(wanted)
    rows = stacks[np.isin(stacks["stack_id"].to_numpy(), wanted)] if len(stacks) else stacks
    if n == 0 or len(rows) == 0:
        return np.full((n, 0), -1, dtype=np.int64), np.zeros(n, dtype=np.int64), []
    rows = rows.sort_values(["stack_id", "depth"], kind="stable")
    files = rows["filename"].astype(str).to_numpy()
    funcs = rows["function"].astype(str).to_numpy()
    lines = rows["line"].to_numpy(dtype=np.int64)
    # a frame is (file, function, line); diffs across code edits drop the line (it shifts)
    key = pd.MultiIndex.from_arrays([files, funcs, lines if frame_lines else np.zeros_like(lines)])
    tok, uniq = pd.factorize(key, sort=False)
    tokens = [(str(fn), f"{fl}:{ln}" if frame_lines else str(fl)) for fl, fn, ln in uniq]
    sid = rows["stack_id"].to_numpy(dtype=np.int64)
    row_of = np.searchsorted(wanted, sid)  # wanted is sorted and unique
    start = np.r_[0, np.flatnonzero(np.diff(sid)) + 1]
    pos = np.arange(len(sid)) - np.repeat(start, np.diff(np.r_[start, len(sid)]))
    lengths = np.zeros(n, dtype=np.int64)
    np.maximum.at(lengths, row_of, pos + 1)
    matrix = np.full((n, int(lengths.max())), -1, dtype=np.int64)
    matrix[row_of, pos] = tok
    return matrix, lengths, tokens


def _range_tokens(ranges: pd.DataFrame, wanted: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, list[tuple[str, str]]]:
    """Range names from the outermost enclosing range to each wanted range, as a padded matrix."""
    n = len(wanted)
    if n == 0 or len(ranges) == 0:
        return np.full((n, 0), -1, dtype=np.int64), np.zeros(n, dtype=np.int64), []
    rid = ranges["range_id"].to_numpy(dtype=np.int64)
    order = np.argsort(rid, kind="stable")
    rid_sorted = rid[order]
    parent = ranges["parent_id"].to_numpy(dtype=np.int64)[order]
    name_tok, uniq = pd.factorize(ranges["name"].astype(str).to_numpy()[order], sort=False)
    src = ranges["source"].astype(str).to_numpy()[order] if "source" in ranges else None

    def index_of(ids: np.ndarray) -> np.ndarray:
        pos = np.clip(np.searchsorted(rid_sorted, ids), 0, len(rid_sorted) - 1)
        return np.where((ids >= 0) & (rid_sorted[pos] == ids), pos, -1)

    # walk up the parents, innermost first; depth is bounded (cycles in bad data stop at 256)
    chain = [index_of(wanted)]
    while len(chain) < 256:
        cur = chain[-1]
        nxt = np.where(cur >= 0, index_of(np.where(cur >= 0, parent[np.maximum(cur, 0)], -1)), -1)
        if (nxt < 0).all():
            break
        chain.append(nxt)
    inner_first = np.stack(chain, axis=1)
    lengths = (inner_first >= 0).sum(axis=1)
    # reverse each row's valid prefix so the outermost range comes first
    cols = np.arange(inner_first.shape[1])
    src_col = lengths[:, None] - 1 - cols[None, :]
    valid = src_col >= 0
    picked = np.take_along_axis(inner_first, np.where(valid, src_col, 0), axis=1)
    matrix = np.where(valid & (picked >= 0), name_tok[np.maximum(picked, 0)], -1)
    source_of = {}
    if src is not None:
        first = pd.Series(src).groupby(name_tok).first()
        source_of = dict(zip(first.index, first.to_numpy()))
    tokens = [(str(u), str(source_of.get(i, ""))) for i, u in enumerate(uniq)]
    return matrix.astype(np.int64), lengths.astype(np.int64), tokens


# -- the tree ------------------------------------------------------------------------------------

def flame_tree(trace: Any, weight: Weight = "time", device: int | Iterable[int] | None = None,
               stream: int | Iterable[int] | None = None, label: str | None = None,
               frame_lines: bool = True) -> pd.DataFrame:
    """The flame tree of ``trace`` as a node table, root first, parents before children.

    Parameters
    ----------
    weight : "time" (GPU nanoseconds), "launches" (event count) or "bytes" (bytes copied by
        memcpy; kernels and memsets weigh nothing and are left out).
    device, stream : keep only events on these devices / streams (an int or a list; None: all).
    label : name of the root (default: the trace's ``meta["label"]``, else "capture").
    frame_lines : tell frames apart by line as well as file and function (default). Off, the
        calls of one function from different lines merge, which is what a diff across a code
        edit needs.

    Returns
    -------
    DataFrame with one row per node: ``id`` (0 is the root), ``parent`` (-1 for the root),
    ``label``, ``kind`` (root, frame, range, kernel, memcpy, memset), ``value`` (weight of
    everything below), ``self_value`` (weight not in any child), ``calls`` (events below),
    ``file_line`` (frames: "file:line"; ranges: their source), ``share`` (value / root value),
    ``depth`` (root 0) and ``path`` (the labels from the root, joined by ``PATH_SEP``, that
    identifies a node across traces).
    """
    if weight not in WEIGHTS:
        raise ValueError(f"weight must be one of {WEIGHTS}, not {weight!r}")
    stack_ids, range_ids, leaf, w, ones, leaf_labels, leaf_kinds = _leaf_events(
        trace, weight, device, stream)
    root = label if label is not None else root_label(trace)

    # 1. group events by (stack, range, leaf): the tree only needs these groups
    ust, st_code = np.unique(stack_ids, return_inverse=True)
    urg, rg_code = np.unique(range_ids, return_inverse=True)
    n_leaf = max(len(leaf_labels), 1)
    key = (st_code.astype(np.int64) * len(urg) + rg_code) * n_leaf + leaf
    gcode, gkeys = pd.factorize(key, sort=False)
    g_value = np.bincount(gcode, weights=w, minlength=len(gkeys)).astype(np.int64) \
        if len(gkeys) else np.zeros(0, dtype=np.int64)
    g_calls = np.bincount(gcode, minlength=len(gkeys)).astype(np.int64)
    g_leaf = gkeys % n_leaf
    g_range = (gkeys // n_leaf) % max(len(urg), 1)
    g_stack = gkeys // n_leaf // max(len(urg), 1)
    if weight == "bytes":
        keep = g_value > 0
        g_value, g_calls, g_leaf, g_range, g_stack = (
            a[keep] for a in (g_value, g_calls, g_leaf, g_range, g_stack))

    # 2. token sequences: frames (outermost first), then ranges, then the leaf
    s_mat, s_len, s_tok = _stack_tokens(table(trace, "stacks"), ust[ust >= 0], frame_lines)
    s_row = np.searchsorted(ust[ust >= 0], ust[g_stack]) if len(g_stack) else g_stack
    has_stack = ust[g_stack] >= 0 if len(g_stack) else np.zeros(0, dtype=bool)
    r_mat, r_len, r_tok = _range_tokens(table(trace, "ranges"), urg[urg >= 0])
    r_row = np.searchsorted(urg[urg >= 0], urg[g_range]) if len(g_range) else g_range
    has_range = urg[g_range] >= 0 if len(g_range) else np.zeros(0, dtype=bool)

    n_groups = len(g_value)
    ls = np.where(has_stack, s_len[np.minimum(s_row, max(len(s_len) - 1, 0))] if len(s_len) else 0, 0)
    lr = np.where(has_range, r_len[np.minimum(r_row, max(len(r_len) - 1, 0))] if len(r_len) else 0, 0)
    width = int((ls + lr).max(initial=0)) + 1
    col = np.arange(width)[None, :]
    off_frame, off_range = 0, len(s_tok)
    off_leaf = off_range + len(r_tok)
    tokens = np.full((n_groups, width), -1, dtype=np.int64)
    if s_mat.shape[1]:
        j = np.minimum(col, s_mat.shape[1] - 1)
        vals = s_mat[np.minimum(s_row, len(s_mat) - 1)[:, None], j]
        sel = (col < ls[:, None]) & (vals >= 0)
        tokens = np.where(sel, vals + off_frame, tokens)
    if r_mat.shape[1]:
        j = np.clip(col - ls[:, None], 0, r_mat.shape[1] - 1)
        vals = r_mat[np.minimum(r_row, len(r_mat) - 1)[:, None], j]
        sel = (col >= ls[:, None]) & (col < (ls + lr)[:, None]) & (vals >= 0)
        tokens = np.where(sel, vals + off_range, tokens)
    tokens = np.where(col == (ls + lr)[:, None], g_leaf[:, None] + off_leaf, tokens)

    # 3. intern (parent node, token) level by level: node ids grow with depth
    n_tok = off_leaf + len(leaf_labels)
    node_parent = [np.array([-1], dtype=np.int64)]
    node_token = [np.array([-1], dtype=np.int64)]
    node_value = [np.array([g_value.sum()], dtype=np.int64)]
    node_calls = [np.array([g_calls.sum()], dtype=np.int64)]
    node_depth = [np.array([0], dtype=np.int64)]
    current = np.zeros(n_groups, dtype=np.int64)  # node each group has reached so far
    next_id = 1
    for level in range(width):
        tok = tokens[:, level]
        live = tok >= 0
        if not live.any():
            continue
        pair = current[live] * n_tok + tok[live]
        code, uniq = pd.factorize(pair, sort=False)
        node_parent.append(uniq // n_tok)
        node_token.append(uniq % n_tok)
        node_value.append(np.bincount(code, weights=g_value[live], minlength=len(uniq)).astype(np.int64))
        node_calls.append(np.bincount(code, weights=g_calls[live], minlength=len(uniq)).astype(np.int64))
        node_depth.append(np.full(len(uniq), level + 1, dtype=np.int64))
        current[live] = next_id + code
        next_id += len(uniq)

    parent = np.concatenate(node_parent)
    token = np.concatenate(node_token)
    value = np.concatenate(node_value)
    calls = np.concatenate(node_calls)
    depth = np.concatenate(node_depth)
    child_sum = np.bincount(parent[1:], weights=value[1:], minlength=len(value)).astype(np.int64)

    # 4. labels and paths (one entry per node, not per event)
    tok_label = [t[0] for t in s_tok] + [t[0] for t in r_tok] + list(leaf_labels)
    tok_where = [t[1] for t in s_tok] + [t[1] for t in r_tok] + [""] * len(leaf_labels)
    tok_kind = ["frame"] * len(s_tok) + ["range"] * len(r_tok) + list(leaf_kinds)
    # path keys say what a token is, so a frame and a kernel of the same name stay apart
    tok_key = ([f"f:{lab}@{wh}" for lab, wh in s_tok] + [f"r:{lab}" for lab, _ in r_tok]
               + [f"{k[0]}:{lab}" for lab, k in zip(leaf_labels, leaf_kinds)])
    labels = [root] + [tok_label[t] for t in token[1:]]
    where = [""] + [tok_where[t] for t in token[1:]]
    kinds = ["root"] + [tok_kind[t] for t in token[1:]]
    paths = [""] * len(parent)
    for i in range(1, len(parent)):  # parents precede children, so one pass suffices
        paths[i] = paths[parent[i]] + PATH_SEP + tok_key[token[i]]
    total = value[0]
    share = value / total if total > 0 else np.zeros(len(value))
    return pd.DataFrame({
        "id": np.arange(len(parent), dtype=np.int64), "parent": parent,
        "label": labels, "kind": kinds, "value": value, "self_value": value - child_sum,
        "calls": calls, "file_line": where, "share": share, "depth": depth, "path": paths,
    })


def flame_diff(a: Any, b: Any, weight: Weight = "time", device: int | Iterable[int] | None = None,
               stream: int | Iterable[int] | None = None, frame_lines: bool = False) -> pd.DataFrame:
    """Two flame trees aligned by path: what got faster or slower from ``a`` to ``b``.

    Nodes are matched by their path of labels from the root (roots always match, whatever
    their labels). By default frames are matched by file and function, not line, because a
    code change shifts lines.

    Returns one row per node of either tree: ``id, parent, label, kind, file_line, depth,
    path``, ``value_a, value_b, calls_a, calls_b`` (0 where the node is absent), ``delta``
    (b - a), ``ratio`` (b / a; inf for new nodes, 0 for vanished ones), ``status`` (new, gone,
    slower, faster, same) and ``value`` = value_a + value_b, the width of the node in a diff
    flame graph (additive, so parents hold their children).
    """
    ta = flame_tree(a, weight, device, stream, frame_lines=frame_lines)
    tb = flame_tree(b, weight, device, stream, frame_lines=frame_lines)
    keep = ["path", "label", "kind", "file_line", "depth", "value", "calls"]
    merged = ta[keep].merge(tb[keep], on="path", how="outer", suffixes=("_a", "_b"), sort=False)
    for col in ("label", "kind", "file_line", "depth"):
        merged[col] = merged[f"{col}_b"].where(merged[f"{col}_b"].notna(), merged[f"{col}_a"])
    merged.loc[merged["path"] == "", "label"] = f"{ta['label'].iloc[0]} → {tb['label'].iloc[0]}"
    for col in ("value_a", "value_b", "calls_a", "calls_b"):
        merged[col] = merged[col].fillna(0).astype(np.int64)
    merged["depth"] = merged["depth"].astype(np.int64)
    merged = merged.sort_values(["depth", "path"], kind="stable").reset_index(drop=True)
    merged["id"] = np.arange(len(merged), dtype=np.int64)
    paths = merged["path"].tolist()
    index = dict(zip(paths, range(len(paths))))
    merged["parent"] = [-1 if p == "" else index[p.rsplit(PATH_SEP, 1)[0]] for p in paths]
    va = merged["value_a"].to_numpy(dtype=np.float64)
    vb = merged["value_b"].to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(va > 0, vb / np.where(va > 0, va, 1), np.where(vb > 0, np.inf, 1.0))
    merged["delta"] = merged["value_b"] - merged["value_a"]
    merged["ratio"] = ratio
    status = np.where(va == 0, "new", np.where(vb == 0, "gone", np.where(
        ratio > 1.0, "slower", np.where(ratio < 1.0, "faster", "same"))))
    status = np.where((va == 0) & (vb == 0), "same", status)
    merged["status"] = status
    merged["value"] = merged["value_a"] + merged["value_b"]
    return merged[["id", "parent", "label", "kind", "file_line", "depth", "path", "value_a",
                   "value_b", "calls_a", "calls_b", "delta", "ratio", "status", "value"]]
