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

from hookmagic.analysis.frames import fold_stacks
from hookmagic.analysis.tables import event_mask, root_label, table
from hookmagic.common.errors import InvalidArgument

Weight = Literal["time", "launches", "bytes"]
WEIGHTS: tuple[str, ...] = ("time", "launches", "bytes")

#: separates the tokens of a node's ``path`` (a character no file name or kernel name holds)
PATH_SEP = "\x1f"

NODE_COLUMNS = ["id", "parent", "label", "kind", "value", "self_value", "calls", "file_line",
                "share", "depth", "path"]


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
               frame_lines: bool = True, fold: bool = True) -> pd.DataFrame:
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
    fold : leave out framework frames (``Module._call_impl`` plumbing, decorator wrappers,
        TorchDynamo glue; :mod:`hookmagic.analysis.frames`), so module names and the user's
        frames sit next to each other (default). False: every frame as recorded.

    Returns
    -------
    DataFrame with one row per node: ``id`` (0 is the root), ``parent`` (-1 for the root),
    ``label``, ``kind`` (root, frame, range, kernel, memcpy, memset), ``value`` (weight of
    everything below), ``self_value`` (weight not in any child), ``calls`` (events below),
    ``file_line`` (frames: "file:line"; ranges: their source), ``share`` (value / root value),
    ``depth`` (root 0) and ``key`` (what the node is: ``f:function@file:line``,
    ``r:range``, ``k:kernel``, ``m:Memcpy HtoD``; :func:`node_paths` joins the keys from the
    root into a path that identifies a node across traces). Parents come before children.
    """
    if weight not in WEIGHTS:
        raise InvalidArgument(f"weight must be one of {WEIGHTS}, not {weight!r}")
    stack_ids, range_ids, leaf, w, _, leaf_labels, leaf_kinds = _leaf_events(
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

    # 2. token sequences: frames of each stack (outermost first), ranges (outermost first)
    stacks = table(trace, "stacks")
    if fold:
        stacks = fold_stacks(stacks)
    s_mat, s_len, s_tok = _stack_tokens(stacks, ust[ust >= 0], frame_lines)
    r_mat, r_len, r_tok = _range_tokens(table(trace, "ranges"), urg[urg >= 0])
    off_range = len(s_tok)
    off_leaf = off_range + len(r_tok)
    n_tok = off_leaf + len(leaf_labels)
    tree = _Builder(n_tok)

    # 3. build in three passes, each over few distinct rows: stacks, (stack, range), leaves
    has_stack = ust[g_stack] >= 0
    s_row = np.searchsorted(ust[ust >= 0], ust[g_stack])
    stack_end = tree.descend(np.zeros(len(s_len), dtype=np.int64), s_mat, s_len)
    g_node = np.where(has_stack, stack_end[np.minimum(s_row, max(len(stack_end) - 1, 0))]
                      if len(stack_end) else 0, 0)
    has_range = urg[g_range] >= 0
    r_row = np.where(has_range, np.searchsorted(urg[urg >= 0], urg[g_range]), -1)
    pair_code, pair_keys = pd.factorize(g_node * (len(r_len) + 1) + (r_row + 1), sort=False)
    p_start = pair_keys // (len(r_len) + 1)
    p_range = pair_keys % (len(r_len) + 1) - 1
    p_has = p_range >= 0
    p_mat = np.where(p_has[:, None] & (r_mat[np.maximum(p_range, 0)] >= 0),
                     r_mat[np.maximum(p_range, 0)] + off_range, -1) \
        if r_mat.shape[1] and len(p_range) else np.full((len(p_range), 0), -1, dtype=np.int64)
    p_len = np.where(p_has, r_len[np.maximum(p_range, 0)] if len(r_len) else 0, 0)
    range_end = tree.descend(p_start, p_mat, p_len)
    leaf_node = tree.descend(range_end[pair_code], (g_leaf + off_leaf)[:, None],
                             np.ones(len(g_leaf), dtype=np.int64))

    parent, token, depth = tree.arrays()
    n_nodes = len(parent)
    value = np.bincount(leaf_node, weights=g_value, minlength=n_nodes)
    calls = np.bincount(leaf_node, weights=g_calls, minlength=n_nodes)
    self_value = value.astype(np.int64)
    # sum children into parents, deepest level first
    for level in range(int(depth.max(initial=0)), 0, -1):
        nodes = np.flatnonzero(depth == level)
        np.add.at(value, parent[nodes], value[nodes])
        np.add.at(calls, parent[nodes], calls[nodes])
    value = value.astype(np.int64)
    calls = calls.astype(np.int64)

    # 4. labels (one entry per node, not per event)
    tok_label = np.array([t[0] for t in s_tok] + [t[0] for t in r_tok] + list(leaf_labels) + [root],
                         dtype=object)
    tok_where = np.array([t[1] for t in s_tok] + [t[1] for t in r_tok]
                         + [""] * (len(leaf_labels) + 1), dtype=object)
    tok_kind = np.array(["frame"] * len(s_tok) + ["range"] * len(r_tok) + list(leaf_kinds)
                        + ["root"], dtype=object)
    # keys say what a token is, so a frame and a kernel of the same name stay apart
    tok_key = np.array([f"f:{lab}@{wh}" for lab, wh in s_tok] + [f"r:{lab}" for lab, _ in r_tok]
                       + [f"{k[0]}:{lab}" for lab, k in zip(leaf_labels, leaf_kinds)] + [""],
                       dtype=object)
    token = np.where(token < 0, n_tok, token)  # the root's "token" is the last entry
    total = value[0]
    return pd.DataFrame({
        "id": np.arange(n_nodes, dtype=np.int64), "parent": parent,
        "label": tok_label[token], "kind": tok_kind[token], "value": value,
        "self_value": self_value, "calls": calls, "file_line": tok_where[token],
        "share": value / total if total > 0 else np.zeros(n_nodes), "depth": depth,
        "key": tok_key[token],
    })


class _Builder:
    """Grows a tree by interning (parent node, token) pairs; node 0 is the root."""

    def __init__(self, n_tokens: int) -> None:
        self.n_tok = max(n_tokens, 1)
        self.parent = [np.array([-1], dtype=np.int64)]
        self.token = [np.array([-1], dtype=np.int64)]
        self.depth = [np.array([0], dtype=np.int64)]
        self.size = 1
        self._depth_of = np.zeros(1, dtype=np.int64)  # depth of every node so far

    def descend(self, start: np.ndarray, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Walk each row's tokens down from its start node, creating nodes; return the ends.

        A pair (parent, token) seen at one level never recurs at another within a call (the
        parent's depth fixes the level), so interning level by level finds every shared prefix.
        """
        current = np.asarray(start, dtype=np.int64).copy()
        width = tokens.shape[1] if tokens.ndim == 2 else 0
        for level in range(width):
            tok = tokens[:, level]
            live = (level < lengths) & (tok >= 0)
            if not live.any():
                continue
            pair = current[live] * self.n_tok + tok[live]
            code, uniq = pd.factorize(pair, sort=False)
            parents = uniq // self.n_tok
            self.parent.append(parents)
            self.token.append(uniq % self.n_tok)
            new_depth = self._depth_of[parents] + 1
            self.depth.append(new_depth)
            self._depth_of = np.concatenate([self._depth_of, new_depth])
            current[live] = self.size + code
            self.size += len(uniq)
        return current

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.concatenate(self.parent), np.concatenate(self.token),
                np.concatenate(self.depth))


def node_paths(nodes: pd.DataFrame) -> list[str]:
    """The path of each node: the ``key`` of every node from the root, joined by PATH_SEP.

    Identifies a node across traces (the root's path is ""). One Python step per node, so
    use it on trees, never on events.
    """
    pos = {int(i): k for k, i in enumerate(nodes["id"])}
    keys = nodes["key"].tolist()
    parents = nodes["parent"].tolist()
    paths = [""] * len(keys)
    for k in range(len(keys)):  # parents precede children
        p = parents[k]
        if p >= 0:
            paths[k] = paths[pos[p]] + PATH_SEP + keys[k]
    return paths


def flame_diff(a: Any, b: Any, weight: Weight = "time", device: int | Iterable[int] | None = None,
               stream: int | Iterable[int] | None = None, frame_lines: bool = False,
               fold: bool = True) -> pd.DataFrame:
    """Two flame trees aligned by path: what got faster or slower from ``a`` to ``b``.

    Nodes are matched by the keys of their path from the root (roots always match, whatever
    their labels). By default frames are matched by file and function, not line, because a
    code change shifts lines.

    Returns one row per node of either tree, parents first: ``id, parent, label, kind,
    file_line, depth, key``, ``value_a, value_b, calls_a, calls_b`` (0 where the node is
    absent), ``delta`` (b - a), ``ratio`` (b / a; inf for new nodes, 0 for vanished ones),
    ``status`` (new, gone, slower, faster, same) and ``value`` = value_a + value_b, the
    width of the node in a diff flame graph (additive, so parents hold their children).
    """
    ta = flame_tree(a, weight, device, stream, frame_lines=frame_lines, fold=fold)
    tb = flame_tree(b, weight, device, stream, frame_lines=frame_lines, fold=fold)
    key_code, _ = pd.factorize(np.concatenate([ta["key"].to_numpy(object),
                                               tb["key"].to_numpy(object)]), sort=False)
    n_keys = int(key_code.max(initial=0)) + 1
    ka, kb = key_code[: len(ta)], key_code[len(ta):]
    pa, pb = ta["parent"].to_numpy(), tb["parent"].to_numpy()
    da, db = ta["depth"].to_numpy(), tb["depth"].to_numpy()
    # align level by level: a node is (aligned parent, key); ids in a tree equal row positions
    al_a = np.zeros(len(ta), dtype=np.int64)
    al_b = np.zeros(len(tb), dtype=np.int64)
    size = 1
    for level in range(1, int(max(da.max(initial=0), db.max(initial=0))) + 1):
        ia, ib = np.flatnonzero(da == level), np.flatnonzero(db == level)
        pair = np.concatenate([al_a[pa[ia]] * n_keys + ka[ia], al_b[pb[ib]] * n_keys + kb[ib]])
        code, uniq = pd.factorize(pair, sort=False)
        al_a[ia] = size + code[: len(ia)]
        al_b[ib] = size + code[len(ia):]
        size += len(uniq)
    out = {}
    for side, t, al in (("a", ta, al_a), ("b", tb, al_b)):
        out[f"value_{side}"] = np.bincount(al, weights=t["value"].to_numpy(), minlength=size)
        out[f"calls_{side}"] = np.bincount(al, weights=t["calls"].to_numpy(), minlength=size)
    parent = np.full(size, -1, dtype=np.int64)
    label = np.empty(size, dtype=object)
    cols = {c: np.empty(size, dtype=object) for c in ("kind", "file_line", "key")}
    depth = np.zeros(size, dtype=np.int64)
    for t, al, par in ((ta, al_a, pa), (tb, al_b, pb)):  # b's words win where both have them
        parent[al[1:]] = al[par[1:]]
        label[al] = t["label"].to_numpy(object)
        depth[al] = t["depth"].to_numpy()
        for c in cols:
            cols[c][al] = t[c].to_numpy(object)
    label[0] = f"{ta['label'].iloc[0]} → {tb['label'].iloc[0]}"
    va = out["value_a"]
    vb = out["value_b"]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(va > 0, vb / np.where(va > 0, va, 1), np.where(vb > 0, np.inf, 1.0))
    status = np.where(va == 0, "new", np.where(vb == 0, "gone", np.where(
        ratio > 1.0, "slower", np.where(ratio < 1.0, "faster", "same"))))
    status = np.where((va == 0) & (vb == 0), "same", status)
    return pd.DataFrame({
        "id": np.arange(size, dtype=np.int64), "parent": parent, "label": label,
        "kind": cols["kind"], "file_line": cols["file_line"], "depth": depth, "key": cols["key"],
        "value_a": va.astype(np.int64), "value_b": vb.astype(np.int64),
        "calls_a": out["calls_a"].astype(np.int64), "calls_b": out["calls_b"].astype(np.int64),
        "delta": (vb - va).astype(np.int64), "ratio": ratio, "status": status,
        "value": (va + vb).astype(np.int64)})
